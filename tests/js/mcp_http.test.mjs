// MCP over Streamable HTTP against a real sandboxd's /mcp, over HTTPS with a
// CA and server certificate the test makes (openssl), through the official
// SDK 1.x client transport: list tools, exec with progress, a cancel, DELETE;
// the 2.x client (2026-07-28) and the tasks extension (raw JSON-RPC: neither
// SDK client follows io.modelcontextprotocol/tasks yet).
import assert from 'node:assert/strict';
import https from 'node:https';
import path from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Client as ModernClient, StreamableHTTPClientTransport as ModernHTTP } from '@modelcontextprotocol/client';

import { Daemon, MCP_BIN, execAbortedAfterStart, execPacedTicks } from './harness.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** get_execution until the execution has ended (30 s at most): its state, or the last one seen. */
async function finalState(client, executionId) {
        let state;
        for (const deadline = Date.now() + 30000; Date.now() < deadline; await sleep(300)) {
                const s = await client.callTool({
                        name: 'get_execution',
                        arguments: { execution_id: executionId, wait: 5 },
                });
                state = s.structuredContent?.state;
                if (state && state !== 'running' && state !== 'pending') break;
        }
        return state;
}

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

describe('MCP Streamable HTTP over HTTPS (SDK 1.x and 2.x)', () => {
        let d, token, url, ca, port;

        before(async () => {
                d = new Daemon();
                ({ ca, port } = await d.startHttps());
                url = new URL(`https://127.0.0.1:${port}/mcp`);
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

                const { result: r, seen } = await execPacedTicks((params, opts) => client.callTool(params, undefined, opts), 3);
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                assert.equal(r.structuredContent.stdout, 'tick 1\ntick 2\ntick 3\n');
                assert.equal(seen.length, 4, `progress over the SSE stream, one per tick: ${JSON.stringify(seen)}`);

                // aborting a call sends notifications/cancelled: its execution is cancelled
                const executionId = await execAbortedAfterStart(client, 'echo started; sleep 60; echo never');
                assert.ok(executionId, 'the first progress named the execution');
                const state = await finalState(client, executionId);
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

        /** One stateless (2026-07-28) JSON-RPC request by POST; resolves with the parsed answer. */
        const rpc = async (tok, id, method, params, tasks = true) => {
                const res = await caFetch(ca)(url, {
                        method: 'POST',
                        headers: {
                                Authorization: `Bearer ${tok}`,
                                'Content-Type': 'application/json',
                                Accept: 'application/json, text/event-stream',
                        },
                        body: JSON.stringify({
                                jsonrpc: '2.0',
                                id,
                                method,
                                params: {
                                        ...params,
                                        _meta: {
                                                'io.modelcontextprotocol/protocolVersion': '2026-07-28',
                                                'io.modelcontextprotocol/clientCapabilities': tasks
                                                        ? { extensions: { 'io.modelcontextprotocol/tasks': {} } }
                                                        : {},
                                        },
                                },
                        }),
                });
                assert.equal(res.status, 200);
                if (!(res.headers.get('content-type') ?? '').includes('text/event-stream')) return res.json();
                // a streamed answer: the response is the event that carries our id
                const events = (await res.text()).split('\n').filter((l) => l.startsWith('data: '));
                return events.map((l) => JSON.parse(l.slice(6))).find((m) => m.id === id);
        };

        test('2026-07-28 client (progress, a cancel), and tasks followed to the end and cancelled', { timeout: 240000 }, async () => {
                const client = new ModernClient(
                        { name: 'sbx-http-test-v2', version: '2.0.0' },
                        { versionNegotiation: { mode: { pin: '2026-07-28' } } },
                );
                await client.connect(
                        new ModernHTTP(url, {
                                fetch: caFetch(ca),
                                requestInit: { headers: { Authorization: `Bearer ${token}` } },
                        }),
                );
                assert.equal(client.getNegotiatedProtocolVersion(), '2026-07-28');
                assert.ok(client.getDiscoverResult().capabilities.extensions['io.modelcontextprotocol/tasks']);
                assert.ok((await client.listTools()).tools.some((t) => t.name === 'run_code'));
                const q = await client.callTool({ name: 'exec', arguments: { command: 'echo v2', session: 'h2' } });
                assert.equal(q.structuredContent.stdout, 'v2\n');
                // progress streams (SSE) without an MCP session too
                const { result: p, seen } = await execPacedTicks((params, opts) => client.callTool(params, opts), 3, {
                        session: 'h2',
                });
                assert.equal(p.structuredContent.stdout, 'tick 1\ntick 2\ntick 3\n');
                assert.equal(seen.length, 4, `progress, one per tick: ${JSON.stringify(seen)}`);
                // an aborted call: the stream closes and the execution is cancelled
                const ac = new AbortController();
                let executionId;
                const call = client.callTool(
                        { name: 'exec', arguments: { command: 'echo started; sleep 60', session: 'h2' } },
                        {
                                signal: ac.signal,
                                onprogress: (x) => {
                                        const m = /execution (\S+) started/.exec(x.message ?? '');
                                        if (m) executionId = m[1];
                                        if ((x.message ?? '').includes('started\n')) ac.abort('enough');
                                },
                        },
                );
                await assert.rejects(call);
                assert.ok(executionId, 'the first progress named the execution');
                let state;
                for (const deadline = Date.now() + 30000; Date.now() < deadline; await sleep(300)) {
                        const s = await client.callTool({
                                name: 'get_execution',
                                arguments: { execution_id: executionId, wait: 5, session: 'h2' },
                        });
                        state = s.structuredContent?.state;
                        if (state !== 'running' && state !== 'pending') break;
                }
                assert.equal(state, 'cancelled');
                await client.close();

                let r = await rpc(token, 1, 'tools/call', {
                        name: 'exec',
                        arguments: { command: 'sleep 2; echo late', session: 'h2' },
                });
                assert.equal(r.result.resultType, 'task', JSON.stringify(r));
                const t1 = r.result;
                assert.equal(t1.status, 'working');
                let id = 2;
                for (const deadline = Date.now() + 60000; ; await sleep(t1.pollIntervalMs)) {
                        r = await rpc(token, id++, 'tasks/get', { taskId: t1.taskId });
                        if (r.result.status !== 'working') break;
                        assert.ok(Date.now() < deadline, 'the task ends');
                }
                assert.equal(r.result.status, 'completed');
                assert.equal(r.result.result.structuredContent.stdout, 'late\n');
                assert.equal(r.result.result.isError ?? false, false);

                r = await rpc(token, id++, 'tools/call', { name: 'exec', arguments: { command: 'sleep 60', session: 'h2' } });
                assert.equal(r.result.resultType, 'task');
                const t2 = r.result.taskId;
                const bob = await d.createToken('bob-tasks');
                r = await rpc(bob, id++, 'tasks/cancel', { taskId: t2 });
                assert.equal(r.error.code, -32602, "another user's task is unknown");
                r = await rpc(token, id++, 'tasks/cancel', { taskId: t2 });
                assert.deepEqual(Object.keys(r.result).sort(), ['_meta', 'resultType']);
                for (const deadline = Date.now() + 30000; ; await sleep(300)) {
                        r = await rpc(token, id++, 'tasks/get', { taskId: t2 });
                        if (r.result.status !== 'working') break;
                        assert.ok(Date.now() < deadline, 'the cancel takes effect');
                }
                assert.equal(r.result.status, 'cancelled');
                // the task is durable in the daemon: the JSON API sees it too
                const res = await caFetch(ca)(new URL('/v1/get_task', url), {
                        method: 'POST',
                        headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
                        body: JSON.stringify({ task_id: t2 }),
                });
                assert.equal(res.status, 200);
                const body = await res.json();
                assert.equal(body.status, 'cancelled');
                assert.equal(body.cancel_requested, true);
        });

        test('sandboxd-mcp --url: the stdio adapter through the HTTPS API', { timeout: 120000 }, async () => {
                const env = { ...process.env, SANDBOXD_TOKEN: token, SANDBOXD_LOG_LEVEL: 'debug' };
                delete env.SANDBOXD_API_SOCKET; // nothing local to fall back on
                const transport = new StdioClientTransport({
                        command: MCP_BIN,
                        args: ['--url', `https://127.0.0.1:${url.port}`, '--cacert', path.join(d.dir, 'ca.pem'),
                               '--session', 'remote'],
                        env,
                        stderr: 'pipe',
                });
                let stderr = '';
                transport.stderr?.on('data', (b) => (stderr += b));
                const client = new Client({ name: 'sbx-url-test', version: '1.0.0' });
                try {
                        await client.connect(transport);
                        const tools = await client.listTools();
                        assert.ok(tools.tools.some((t) => t.name === 'exec'));
                        const r = await client.callTool({ name: 'exec', arguments: { command: 'echo over https' } });
                        assert.equal(r.isError ?? false, false, JSON.stringify(r) + stderr);
                        assert.equal(r.structuredContent.stdout, 'over https\n');
                        // a cancel wakes the adapter's HTTPS request and cancels the execution
                        const executionId = await execAbortedAfterStart(client, 'echo started; sleep 60');
                        const state = await finalState(client, executionId);
                        assert.equal(state, 'cancelled');
                } finally {
                        await client.close();
                }
                assert.match(stderr, /remote https:\/\/127\.0\.0\.1/);
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

        /** A raw /mcp request over a keep-alive agent: resolves at the response's head with
         * { status, headers, res } (res: the body stream, not yet read). */
        const raw = (agent, method, headers, body) =>
                new Promise((resolve, reject) => {
                        const req = https.request(
                                {
                                        hostname: url.hostname,
                                        port: url.port,
                                        path: url.pathname,
                                        method,
                                        agent,
                                        headers: {
                                                Authorization: `Bearer ${token}`,
                                                'Content-Type': 'application/json',
                                                Accept: 'application/json, text/event-stream',
                                                ...headers,
                                        },
                                },
                                (res) => resolve({ status: res.statusCode, headers: res.headers, res }),
                        );
                        req.on('error', reject);
                        req.end(body === undefined ? undefined : JSON.stringify(body));
                });
        const drain = (res) =>
                new Promise((resolve, reject) => {
                        let text = '';
                        res.setEncoding('utf8');
                        res.on('data', (c) => (text += c));
                        res.on('end', () => resolve(text));
                        res.on('error', reject);
                });
        /** initialize by hand: the new session's id. */
        const openSession = async (agent) => {
                const r = await raw(agent, 'POST', {}, {
                        jsonrpc: '2.0',
                        id: 1,
                        method: 'initialize',
                        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
                });
                const body = await drain(r.res);
                assert.equal(r.status, 200, body);
                const sid = r.headers['mcp-session-id'];
                assert.match(sid, /^[0-9a-f]{32}$/);
                const n = await raw(agent, 'POST', { 'Mcp-Session-Id': sid }, { jsonrpc: '2.0', method: 'notifications/initialized' });
                await drain(n.res);
                assert.equal(n.status, 202);
                return sid;
        };

        // issue 24: two DELETEs of one session that arrived together both ended it, and each dropped
        // the list's reference (a use after free; 200 to both). tests/stress/stress_http_mcp.c races
        // the table itself thousands of times under ASan and TSan; this is the same over real HTTPS.
        test('DELETEs racing for one MCP session: exactly one 200, the others 404', { timeout: 240000 }, async () => {
                const agent = new https.Agent({ ca, keepAlive: true, maxSockets: 8 });
                try {
                        // mostly eight at once (the race is likelier), every fourth round 2 to 7
                        for (let i = 0; i < 4000; i++) {
                                const sid = await openSession(agent);
                                const racers = i % 4 ? 8 : 2 + ((i / 4) % 6);
                                const answers = await Promise.all(
                                        Array.from({ length: racers }, async () => {
                                                const r = await raw(agent, 'DELETE', { 'Mcp-Session-Id': sid });
                                                await drain(r.res);
                                                return r.status;
                                        }),
                                ).catch((e) => assert.fail(`round ${i}: ${e.message}; the daemon's log:\n${d.logTail(60)}`));
                                assert.equal(answers.filter((x) => x === 200).length, 1, `round ${i}: ${answers}`);
                                assert.equal(answers.filter((x) => x === 404).length, racers - 1, `round ${i}: ${answers}`);
                        }
                } finally {
                        agent.destroy();
                }
                assert.equal(d.proc.exitCode, null, `the daemon is still up:\n${d.logTail()}`);
                assert.equal(d.proc.signalCode, null, `the daemon is still up:\n${d.logTail()}`);
        });

        // issue 24: a streamed tools/call whose MCP session was DELETEd never got a final event, and its
        // SSE response stayed open on keep-alives, holding a connection slot.
        test('a streamed call ended by DELETE of its MCP session gets its final event; its stream and the server stream end', { timeout: 180000 }, async () => {
                const agent = new https.Agent({ ca, keepAlive: true });
                const session = `del-${process.pid}`;
                try {
                        const sid = await openSession(agent);
                        // the session's server stream, which the DELETE closes too
                        const server = await raw(agent, 'GET', { 'Mcp-Session-Id': sid, Accept: 'text/event-stream' });
                        assert.equal(server.status, 200);
                        const serverEnded = drain(server.res);
                        const call = await raw(agent, 'POST', { 'Mcp-Session-Id': sid }, {
                                jsonrpc: '2.0',
                                id: 7,
                                method: 'tools/call',
                                params: {
                                        name: 'exec',
                                        arguments: { command: 'echo started; sleep 30; echo never', session },
                                        _meta: { progressToken: 'p7' },
                                },
                        });
                        assert.equal(call.status, 200);
                        assert.match(call.headers['content-type'], /text\/event-stream/);
                        const events = [];
                        let executionId;
                        let buf = '';
                        let started;
                        const sawStart = new Promise((r) => (started = r));
                        const ended = new Promise((resolve, reject) => {
                                call.res.setEncoding('utf8');
                                call.res.on('data', (c) => {
                                        buf += c;
                                        let k;
                                        while ((k = buf.indexOf('\n\n')) >= 0) {
                                                const data = buf.slice(0, k).split('\n').find((l) => l.startsWith('data: '));
                                                buf = buf.slice(k + 2);
                                                if (!data) continue; // a keep-alive comment
                                                const m = JSON.parse(data.slice(6));
                                                events.push(m);
                                                const msg = m.params?.message ?? '';
                                                const x = /execution (\S+) started/.exec(msg);
                                                if (x) executionId = x[1];
                                                if (msg.includes('started\n')) started();
                                        }
                                });
                                call.res.on('end', () => resolve('end'));
                                call.res.on('error', reject);
                        });
                        let timer;
                        const deadline = (ms, what) =>
                                new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(what)), ms)));
                        await Promise.race([sawStart, deadline(60000, `no "started" progress: ${JSON.stringify(events)}`)]);
                        clearTimeout(timer);
                        assert.ok(executionId, 'the first progress named the execution');

                        const del = await raw(agent, 'DELETE', { 'Mcp-Session-Id': sid });
                        await drain(del.res);
                        assert.equal(del.status, 200);
                        // the stream ends: its last event answers request 7 with the session's end
                        const how = await Promise.race([
                                ended,
                                deadline(60000, `the stream stayed open after DELETE: ${JSON.stringify(events)}`),
                        ]);
                        clearTimeout(timer);
                        assert.equal(how, 'end');
                        const last = events.at(-1);
                        assert.equal(last.id, 7, JSON.stringify(events));
                        assert.equal(last.error.code, -32000);
                        assert.match(last.error.message, /session was terminated/);
                        assert.equal(events.filter((m) => m.id === 7).length, 1, 'one answer to the call');
                        await Promise.race([serverEnded, deadline(60000, 'the server stream stayed open after DELETE')]);
                        clearTimeout(timer);

                        // the call's execution was cancelled with it
                        const { client } = await connect(token);
                        try {
                                let state;
                                for (const until = Date.now() + 30000; Date.now() < until; await sleep(300)) {
                                        const r = await client.callTool({
                                                name: 'get_execution',
                                                arguments: { execution_id: executionId, wait: 5, session },
                                        });
                                        state = r.structuredContent?.state;
                                        if (state && state !== 'running' && state !== 'pending') break;
                                }
                                assert.equal(state, 'cancelled');
                        } finally {
                                await client.close();
                        }
                } finally {
                        agent.destroy();
                }
        });
});
