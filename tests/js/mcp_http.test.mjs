// MCP over Streamable HTTP against a real sandboxd's /mcp, over HTTPS with a
// CA and server certificate the test makes (openssl), through the official
// SDK 1.x client transport: list tools, exec with progress, a cancel, DELETE.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { Daemon } from './harness.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** fetch() over node:https trusting only ca (the global fetch takes no CA). */
function caFetch(ca) {
        return (url, init = {}) =>
                new Promise((resolve, reject) => {
                        const u = new URL(url);
                        const headers = {};
                        new Headers(init.headers).forEach((v, k) => (headers[k] = v));
                        const req = https.request(
                                {
                                        hostname: u.hostname,
                                        port: u.port,
                                        path: u.pathname + u.search,
                                        method: init.method || 'GET',
                                        headers,
                                        ca,
                                },
                                (res) => {
                                        const h = new Headers();
                                        for (const [k, v] of Object.entries(res.headers))
                                                h.set(k, Array.isArray(v) ? v.join(', ') : v);
                                        const empty = res.statusCode === 202 || res.statusCode === 204;
                                        if (empty) res.resume();
                                        resolve(
                                                new Response(empty ? null : Readable.toWeb(res), {
                                                        status: res.statusCode,
                                                        headers: h,
                                                }),
                                        );
                                },
                        );
                        req.on('error', reject);
                        init.signal?.addEventListener('abort', () => req.destroy(new Error('aborted')), {
                                once: true,
                        });
                        req.end(init.body ?? undefined);
                });
}

describe('MCP Streamable HTTP over HTTPS (SDK 1.x)', () => {
        let d, token, url, ca;

        before(async () => {
                d = new Daemon();
                execFileSync(
                        'sh',
                        [
                                '-c',
                                'openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=ca && ' +
                                        'openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1 && ' +
                                        "printf 'subjectAltName=IP:127.0.0.1\\n' >server.ext && " +
                                        'openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial ' +
                                        '-out server.pem -days 2 -extfile server.ext',
                        ],
                        { cwd: d.dir, stdio: 'ignore' },
                );
                ca = fs.readFileSync(path.join(d.dir, 'ca.pem'));
                d.env.SANDBOXD_HTTP_LISTEN = '127.0.0.1:0';
                d.env.SANDBOXD_TLS_CERT = path.join(d.dir, 'server.pem');
                d.env.SANDBOXD_TLS_KEY = path.join(d.dir, 'server.key');
                await d.start();
                const m = /HTTPS listening on 127\.0\.0\.1:0 \(port (\d+)\)/.exec(fs.readFileSync(d.logFile, 'utf8'));
                assert.ok(m, `no HTTPS port in the log:\n${d.logTail()}`);
                url = new URL(`https://127.0.0.1:${m[1]}/mcp`);
                token = await d.createToken('alice');
        });

        after(async () => {
                await d?.stop();
        });

        const connect = async (tok) => {
                const transport = new StreamableHTTPClientTransport(url, {
                        fetch: caFetch(ca),
                        requestInit: { headers: { Authorization: `Bearer ${tok}` } },
                });
                const client = new Client({ name: 'sbx-http-test', version: '1.0.0' });
                await client.connect(transport);
                return { client, transport };
        };

        test('tools, progress, cancel and DELETE', { timeout: 240000 }, async () => {
                const { client, transport } = await connect(token);
                assert.match(transport.sessionId, /^[0-9a-f]{32}$/);

                const tools = await client.listTools();
                assert.ok(tools.tools.some((t) => t.name === 'exec'));

                const seen = [];
                const r = await client.callTool(
                        { name: 'exec', arguments: { command: 'for i in 1 2 3; do echo tick $i; sleep 0.4; done' } },
                        undefined,
                        { onprogress: (p) => seen.push(p), resetTimeoutOnProgress: true },
                );
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                assert.equal(r.structuredContent.stdout, 'tick 1\ntick 2\ntick 3\n');
                assert.ok(seen.length >= 2, `progress over the SSE stream: ${JSON.stringify(seen)}`);

                // aborting a call sends notifications/cancelled: its execution is cancelled
                const ac = new AbortController();
                let executionId;
                const call = client.callTool(
                        { name: 'exec', arguments: { command: 'echo started; sleep 60; echo never' } },
                        undefined,
                        {
                                signal: ac.signal,
                                onprogress: (p) => {
                                        const m = /execution (\S+) started/.exec(p.message ?? '');
                                        if (m) executionId = m[1];
                                        if ((p.message ?? '').includes('started\n')) ac.abort('enough');
                                },
                        },
                );
                await assert.rejects(call);
                assert.ok(executionId, 'the first progress named the execution');
                let state;
                for (const deadline = Date.now() + 30000; Date.now() < deadline; await sleep(300)) {
                        const s = await client.callTool({
                                name: 'get_execution',
                                arguments: { execution_id: executionId, wait: 5 },
                        });
                        state = s.structuredContent?.state;
                        if (state && state !== 'running' && state !== 'pending') break;
                }
                assert.equal(state, 'cancelled');

                // DELETE ends the session: its id is unknown afterwards
                const sid = transport.sessionId;
                await transport.terminateSession();
                const res = await caFetch(ca)(url, {
                        method: 'POST',
                        headers: {
                                Authorization: `Bearer ${token}`,
                                'Mcp-Session-Id': sid,
                                'Content-Type': 'application/json',
                                Accept: 'application/json, text/event-stream',
                        },
                        body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }),
                });
                assert.equal(res.status, 404);
                await client.close();
        });

        test('a wrong token gets 401; another user cannot use the session', { timeout: 60000 }, async () => {
                await assert.rejects(connect('0123456789abcdef0123456789abcdef'), /401|Unauthorized|auth/i);
                const { client, transport } = await connect(token);
                const bob = await d.createToken('bob');
                const res = await caFetch(ca)(url, {
                        method: 'POST',
                        headers: {
                                Authorization: `Bearer ${bob}`,
                                'Mcp-Session-Id': transport.sessionId,
                                'Content-Type': 'application/json',
                                Accept: 'application/json, text/event-stream',
                        },
                        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
                });
                assert.equal(res.status, 404);
                await transport.terminateSession();
                await client.close();
        });
});
