// mcp.test.mjs — sandboxd-mcp end to end, driven by the official MCP
// TypeScript SDKs against a real sandboxd and real containers:
//   - @modelcontextprotocol/sdk (1.x): the legacy era, initialize handshake;
//   - @modelcontextprotocol/client (2.x) pinned to protocol 2026-07-28: the
//     stateless era (server/discover probe, per-request _meta envelope);
//   - raw JSON-RPC lines for what no SDK exposes (every legacy version, the
//     -32022 error, a client that disconnects mid-call).
// One daemon serves the whole file (node --test runs files in parallel, and
// two daemons of one instance would reconcile each other's containers away).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Client as LegacyClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as LegacyStdio } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Client as ModernClient } from '@modelcontextprotocol/client';
import { StdioClientTransport as ModernStdio } from '@modelcontextprotocol/client/stdio';

import { Daemon, MCP_BIN, RawAdapter, execAbortedAfterStart, execPacedTicks, readToolCatalog } from './harness.mjs';

const TOOLS = [
        'exec',
        'run_code',
        'get_execution',
        'send_stdin',
        'resize_terminal',
        'cancel_execution',
        'list_executions',
        'write_file',
        'read_file',
        'list_files',
        'start_service',
        'stop_service',
        'list_services',
        'service_logs',
        'session_info',
        // agent tools (issue 17)
        'run_tests',
        'list_scripts',
        'clear_scripts',
        'create_session',
        'destroy_session',
        'list_sessions',
        // pause and resume (issue 28)
        'pause_session',
        'resume_session',
        // stateful interpreters (issue 25)
        'run_cell',
        'list_contexts',
        'restart_context',
        'delete_context',
        'get_variables',
        'interrupt_cell',
        'last_cell',
        // snapshots, restore and fork (issue 28)
        'snapshot_session',
        'list_snapshots',
        'delete_snapshot',
        'restore_session',
        'fork_session',
];
const USER_LEVEL = new Set(['list_scripts', 'clear_scripts', 'list_sessions', 'delete_snapshot']);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let daemon;
let token;
let failed = false;

/** test() that remembers a failure, so the daemon log is shown once at the end. */
function check(name, fn, opts = {}) {
        test(name, { timeout: 120000, ...opts }, async (t) => {
                try {
                        await fn(t);
                } catch (e) {
                        failed = true;
                        throw e;
                }
        });
}

before(async () => {
        daemon = new Daemon();
        await daemon.start();
        token = await daemon.createToken('jsuser');
});

after(async () => {
        if (failed && daemon) process.stderr.write(`--- sandboxd log (tail) ---\n${daemon.logTail(60)}\n`);
        if (daemon) await daemon.stop();
});

/** Poll a tool until pred(structuredContent) holds. */
async function until(client, name, args, pred, timeoutMs = 30000) {
        const deadline = Date.now() + timeoutMs;
        let last;
        while (Date.now() < deadline) {
                last = await client.callTool({ name, arguments: args });
                if (!last.isError && pred(last.structuredContent)) return last.structuredContent;
                await sleep(300);
        }
        assert.fail(`${name} never satisfied the condition; last: ${JSON.stringify(last)}`);
}

/** The scenarios both SDKs go through (getClient() has the 1.x callTool signature). */
function commonScenarios(getClient, session) {
        const call = (name, args, opts) => getClient().callTool({ name, arguments: args }, undefined, opts);

        check('lists every tool with input and output schemas', async () => {
                const { tools } = await getClient().listTools();
                assert.deepEqual(tools.map((t) => t.name).sort(), [...TOOLS].sort());
                // in the order of the catalog file, which tools/list serves
                assert.deepEqual(
                        tools.map((t) => t.name),
                        readToolCatalog().tools.map((t) => t.name),
                );
                for (const t of tools) {
                        assert.equal(t.inputSchema.type, 'object', `${t.name} inputSchema`);
                        assert.equal(t.outputSchema?.type, 'object', `${t.name} outputSchema`);
                        if (!USER_LEVEL.has(t.name))
                                assert.ok(t.inputSchema.properties.session, `${t.name} takes session`);
                        assert.ok(t.description.length > 10);
                }
        });

        check('exec runs a shell command', async () => {
                const r = await getClient().callTool({
                        name: 'exec',
                        arguments: { command: 'echo hello; echo oops >&2; id -u', env: { GREETING: 'hi' } },
                });
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                const s = r.structuredContent;
                assert.equal(s.state, 'completed');
                assert.equal(s.exit_code, 0);
                // the session's own host uid, from sandbox_uid_range (200000-299999 by default)
                const m = /^hello\n(\d+)\n$/.exec(s.stdout);
                assert.ok(m, JSON.stringify(s.stdout));
                const uid = Number(m[1]);
                assert.ok(uid >= 200000 && uid <= 299999, `uid ${uid}`);
                assert.equal(s.stderr, 'oops\n');
                assert.equal(s.stdout_bytes, 6 + m[1].length + 1);
                assert.equal(s.truncated, false);
                assert.ok(s.execution_id);
                assert.equal(r.content[0].type, 'text');
                assert.deepEqual(JSON.parse(r.content[0].text), s);
        });

        check('run_code runs python', async () => {
                const r = await getClient().callTool({
                        name: 'run_code',
                        arguments: {
                                language: 'python',
                                code: 'import sys\nprint(sum(range(10)))\nprint(sys.version_info[0])',
                        },
                });
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                assert.equal(r.structuredContent.stdout, '45\n3\n');
        });

        check('run_tests gives structured results (python and node)', async () => {
                let r = await call('run_tests', {
                        language: 'python',
                        code: 'def mul(a, b):\n    return a * b\n',
                        tests: 'import unittest\ndef test_ok():\n    assert mul(2, 3) == 6\n' +
                                'def test_bad():\n    assert mul(2, 3) == 7\n' +
                                '@unittest.skip("later")\ndef test_skip():\n    pass\n',
                });
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                let s = r.structuredContent;
                assert.equal(s.success, false);
                assert.deepEqual(s.summary, { total: 3, passed: 1, failed: 1, skipped: 1 });
                const bad = s.tests.find((t) => t.name === 'test_bad');
                assert.equal(bad.passed, false);
                assert.match(bad.error, /AssertionError/);
                assert.equal(typeof s.duration_ms, 'number');

                r = await call('run_tests', {
                        language: 'node',
                        tests: "const test = require('node:test');\nconst assert = require('node:assert');\n" +
                                "test('ok', () => assert.equal(1 + 1, 2));\n",
                });
                s = r.structuredContent;
                assert.equal(s.success, true, JSON.stringify(r));
                assert.deepEqual(s.summary, { total: 1, passed: 1, failed: 0, skipped: 0 });
                assert.deepEqual(s.tests.map((t) => t.name), ['ok']);
        });

        check('snapshot_session, restore_session, fork_session, list and delete (issue 28)', async () => {
                let r = await call('exec', { command: 'echo kept > /workspace/snap.txt' });
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                r = await call('snapshot_session', { name: 'mcp-snap' });
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                assert.match(r.structuredContent.snapshot, /^snap-/);
                assert.equal(r.structuredContent.session, session); // the connection's session
                await call('exec', { command: 'echo changed > /workspace/snap.txt' });
                r = await call('restore_session', { snapshot: 'mcp-snap' });
                assert.equal(r.structuredContent.restored, true, JSON.stringify(r));
                r = await call('exec', { command: 'cat /workspace/snap.txt' });
                assert.equal(r.structuredContent.stdout, 'kept\n', JSON.stringify(r));
                const kid = `${session}-kid`;
                r = await call('fork_session', { session: kid, from: { snapshot: 'mcp-snap' } });
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                assert.equal(r.structuredContent.session, kid);
                r = await call('exec', { session: kid, command: 'cat /workspace/snap.txt' });
                assert.equal(r.structuredContent.stdout, 'kept\n', JSON.stringify(r));
                r = await call('list_snapshots', {});
                assert.ok(r.structuredContent.snapshots.some((x) => x.name === 'mcp-snap'), JSON.stringify(r));
                r = await call('delete_snapshot', { snapshot: 'mcp-snap' });
                assert.equal(r.structuredContent.deleted, true, JSON.stringify(r));
                r = await call('destroy_session', { session: kid, purge: true });
                assert.equal(r.structuredContent.destroyed, true, JSON.stringify(r));
        });

        check('create_session, exec in it, destroy_session', async () => {
                const name = `${session}-made`;
                let r = await call('create_session', { session: name, env: { COLOR: 'teal' }, ttl_seconds: 600 });
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                assert.equal(r.structuredContent.session, name);
                assert.equal(r.structuredContent.state, 'running');
                assert.equal(typeof r.structuredContent.expires_at, 'number');
                r = await call('exec', { session: name, command: 'echo $COLOR' });
                assert.equal(r.structuredContent.stdout, 'teal\n', JSON.stringify(r));
                r = await call('list_sessions', {});
                assert.ok(r.structuredContent.sessions.some((x) => x.session === name));
                r = await call('destroy_session', { session: name, purge: true });
                assert.equal(r.structuredContent.destroyed, true, JSON.stringify(r));
                assert.equal(r.structuredContent.purged, true);
                r = await call('list_sessions', {});
                assert.ok(!r.structuredContent.sessions.some((x) => x.session === name));
        });

        check('a failing command is an error result', async () => {
                let r = await getClient().callTool({ name: 'exec', arguments: { command: 'echo bad >&2; exit 3' } });
                assert.equal(r.isError, true);
                assert.equal(r.structuredContent.exit_code, 3);
                assert.equal(r.structuredContent.state, 'completed');
                assert.equal(r.structuredContent.stderr, 'bad\n');

                r = await call('exec', { command: 'sleep 30', timeout_seconds: 1 });
                assert.equal(r.isError, true);
                assert.equal(r.structuredContent.state, 'timeout');
                assert.equal(r.structuredContent.exit_code, null);

                // a daemon-side error: an error result carrying the daemon's message
                r = await getClient().callTool({ name: 'read_file', arguments: { path: 'no/such/file.txt' } });
                assert.equal(r.isError, true);
                assert.match(r.content[0].text, /not_found/);

                // argument validation: an error result the model can read
                r = await getClient().callTool({ name: 'exec', arguments: { command: 42 } });
                assert.equal(r.isError, true);
                assert.match(r.content[0].text, /arguments\.command: expected string/);

                // argv: a program and its arguments, no shell between (issue 36)
                r = await call('exec', { argv: ['printf', '%s|', 'a b', '$HOME'] });
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                assert.equal(r.structuredContent.stdout, 'a b|$HOME|');
                r = await getClient().callTool({ name: 'exec', arguments: { argv: [] } });
                assert.equal(r.isError, true);
                assert.match(r.content[0].text, /arguments\.argv: must have at least 1/);
                r = await getClient().callTool({ name: 'exec', arguments: {} });
                assert.equal(r.isError, true);
                assert.match(r.content[0].text, /command|argv/);
        });

        check('progress notifications follow a slow command', async () => {
                const { result: r, seen } = await execPacedTicks((params, opts) => call(params.name, params.arguments, opts), 4);
                assert.equal(r.isError ?? false, false);
                assert.equal(r.structuredContent.stdout, 'tick 1\ntick 2\ntick 3\ntick 4\n');
                assert.equal(seen.length, 5, `one progress notification per tick: ${JSON.stringify(seen)}`);
                for (let i = 1; i < seen.length; i++)
                        assert.ok(seen[i].progress > seen[i - 1].progress, 'progress increases');
                assert.match(seen[0].message, new RegExp(r.structuredContent.execution_id));
                assert.deepEqual(
                        seen.slice(1).map((p) => p.message),
                        ['tick 1\n', 'tick 2\n', 'tick 3\n', 'tick 4\n'],
                );
        });

        check('aborting a call cancels its execution', async () => {
                const executionId = await execAbortedAfterStart(getClient(), 'echo started; sleep 60; echo never');
                assert.ok(executionId, 'the first progress named the execution');
                const s = await until(
                        getClient(),
                        'get_execution',
                        { execution_id: executionId, wait: 5 },
                        (x) => x.state !== 'running' && x.state !== 'pending',
                );
                assert.equal(s.state, 'cancelled');
                assert.equal(s.stdout, 'started\n');
        });

        check('background executions: stdin, offsets, listing, cancel', async () => {
                const c = getClient();
                let r = await c.callTool({
                        name: 'exec',
                        arguments: {
                                command: 'read x; echo "got $x"; read y; echo "then $y"',
                                background: true,
                                interactive: true,
                        },
                });
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                const id = r.structuredContent.execution_id;
                assert.ok(['pending', 'running'].includes(r.structuredContent.state));
                r = await c.callTool({ name: 'send_stdin', arguments: { execution_id: id, data: 'one\n' } });
                assert.equal(r.structuredContent.bytes, 4);
                let s = await until(c, 'get_execution', { execution_id: id, wait: 5, stdout_offset: 0 }, (x) =>
                        x.stdout.includes('got one'),
                );
                assert.equal(s.stdout_offset, 0);
                r = await c.callTool({ name: 'send_stdin', arguments: { execution_id: id, data: 'two\n', eof: true } });
                s = await until(c, 'get_execution', { execution_id: id, wait: 10 }, (x) => x.state === 'completed');
                assert.equal(s.stdout, 'got one\nthen two\n');
                r = await c.callTool({ name: 'get_execution', arguments: { execution_id: id, stdout_offset: 8 } });
                assert.equal(r.structuredContent.stdout, 'then two\n');

                r = await call('run_code', { language: 'bash', code: 'sleep 60', background: true });
                const sleeper = r.structuredContent.execution_id;
                r = await c.callTool({ name: 'list_executions', arguments: { states: ['running', 'pending'] } });
                assert.ok(r.structuredContent.executions.some((x) => x.execution_id === sleeper), JSON.stringify(r));
                r = await c.callTool({ name: 'cancel_execution', arguments: { execution_id: sleeper, force: true } });
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                assert.equal(r.structuredContent.execution_id, sleeper);
                // the daemon answers after the kill grace at most, possibly before the end is recorded
                s = await until(c, 'get_execution', { execution_id: sleeper, wait: 10 }, (x) => x.state !== 'running');
                assert.equal(s.state, 'cancelled');
                r = await c.callTool({ name: 'cancel_execution', arguments: { execution_id: sleeper } });
                assert.equal(r.isError, true, 'cancelling a finished execution is refused');
                r = await c.callTool({ name: 'list_executions', arguments: { limit: 1000 } });
                assert.ok(r.structuredContent.executions.length >= 2);
        });

        check('files: write, read, list', async () => {
                const content = 'line one\nünïcødé ✓\n';
                let r = await call('write_file', { path: `${session}/notes.txt`, content });
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                assert.equal(r.structuredContent.bytes, Buffer.byteLength(content));
                r = await getClient().callTool({ name: 'read_file', arguments: { path: `${session}/notes.txt` } });
                assert.equal(r.structuredContent.content, content);
                assert.equal(r.structuredContent.eof, true);
                r = await call('read_file', { path: `${session}/notes.txt`, offset: 5, length: 3 });
                assert.equal(r.structuredContent.content, 'one');
                r = await getClient().callTool({
                        name: 'write_file',
                        arguments: {
                                path: `${session}/bin.dat`,
                                content: Buffer.from([0, 1, 2, 255]).toString('base64'),
                                encoding: 'base64',
                        },
                });
                assert.equal(r.structuredContent.bytes, 4);
                r = await getClient().callTool({ name: 'list_files', arguments: { path: session } });
                const names = r.structuredContent.entries.map((e) => e.name).sort();
                assert.deepEqual(names, ['bin.dat', 'notes.txt']);
                // the command sees the same workspace
                r = await getClient().callTool({ name: 'exec', arguments: { command: `wc -c < ${session}/bin.dat` } });
                assert.equal(r.structuredContent.stdout.trim(), '4');
        });

        check('services: start, list with its port, stop', async () => {
                const name = `web-${session}`;
                let r = await getClient().callTool({
                        name: 'start_service',
                        arguments: { name, command: 'python3 -m http.server 8000' },
                });
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                assert.equal(r.structuredContent.name, name);
                const on8000 = (x) => x.ports.some((p) => p.container_port === 8000);
                const serving = (x) => x.name === name && x.state === 'running' && on8000(x);
                const svc = await until(getClient(), 'list_services', {}, (s) => s.services.some(serving));
                const port = svc.services.find((x) => x.name === name).ports.find((p) => p.container_port === 8000);
                assert.ok(port.host_port > 0, 'published on a host port');
                const info = (await getClient().callTool({ name: 'session_info', arguments: {} })).structuredContent;
                assert.equal(info.state, 'running');
                assert.equal(info.private, false);
                assert.ok(info.ports.some((p) => p.container_port === 8000 && p.host_port === port.host_port));
                // reachable from the host through the published port
                const res = await fetch(`http://127.0.0.1:${port.host_port}/`);
                assert.equal(res.status, 200);
                await res.text();
                r = await getClient().callTool({ name: 'stop_service', arguments: { name } });
                assert.equal(r.isError ?? false, false, JSON.stringify(r));
                assert.ok(['stopped', 'failed'].includes(r.structuredContent.state), JSON.stringify(r));
                const after = await getClient().callTool({ name: 'list_services', arguments: {} });
                assert.notEqual(after.structuredContent.services.find((x) => x.name === name)?.state, 'running');
        });
}

describe('legacy era: @modelcontextprotocol/sdk', () => {
        let client;
        let transport;
        const session = 'js-legacy';

        before(async () => {
                client = new LegacyClient({ name: 'sandboxd-js-test', version: '1.0.0' });
                transport = new LegacyStdio({
                        command: MCP_BIN,
                        args: ['--session', session],
                        env: daemon.mcpEnv(token),
                        stderr: 'pipe',
                });
                let stderr = '';
                transport.stderr?.on('data', (d) => (stderr += d));
                client.onerror = (e) => process.stderr.write(`legacy client error: ${e}\n${stderr.slice(-2000)}\n`);
                await client.connect(transport);
        });

        after(async () => {
                await client?.close();
        });

        check('initialize: server info and capabilities', async () => {
                assert.equal(client.getServerVersion().name, 'sandboxd-mcp');
                const caps = client.getServerCapabilities();
                assert.ok(caps.tools);
                assert.ok(caps.logging);
                assert.ok(client.getInstructions().includes('exec'));
                await client.ping();
                await client.setLoggingLevel('warning');
        });

        commonScenarios(() => client, session);

        check('2025-11-25 tasks (client.experimental.tasks): followed to the end, and cancelled', async () => {
                assert.ok(client.getServerCapabilities().tasks?.requests?.tools?.call);
                const tools = await client.listTools();
                assert.equal(tools.tools.find((t) => t.name === 'exec').execution?.taskSupport, 'optional');
                assert.equal(tools.tools.find((t) => t.name === 'read_file').execution, undefined);
                const seen = [];
                let result;
                for await (const msg of client.experimental.tasks.callToolStream({
                        name: 'exec',
                        arguments: { command: 'sleep 1; echo tasked' },
                })) {
                        seen.push(msg.type);
                        if (msg.type === 'error') throw msg.error;
                        if (msg.type === 'taskCreated') assert.equal(msg.task.ttl, 3600000);
                        if (msg.type === 'result') result = msg.result;
                }
                assert.equal(seen[0], 'taskCreated');
                assert.ok(seen.includes('taskStatus'), seen.join());
                assert.equal(result.structuredContent.stdout, 'tasked\n');
                assert.equal(result.isError ?? false, false);

                let taskId;
                let ended;
                for await (const msg of client.experimental.tasks.callToolStream({
                        name: 'run_code',
                        arguments: { language: 'bash', code: 'sleep 60' },
                })) {
                        if (msg.type === 'taskCreated') {
                                taskId = msg.task.taskId;
                                const c = await client.experimental.tasks.cancelTask(taskId);
                                assert.equal(c.status, 'cancelled');
                        }
                        assert.notEqual(msg.type, 'result', 'a cancelled task gives no result');
                        if (msg.type === 'error') ended = String(msg.error.message);
                }
                assert.match(ended, /cancelled/);
                assert.equal((await client.experimental.tasks.getTask(taskId)).status, 'cancelled');
                await assert.rejects(client.experimental.tasks.cancelTask(taskId), /already ended/);
                await assert.rejects(client.experimental.tasks.getTask('0'.repeat(32)), /Unknown task/);
        });

        check('the session argument reaches another sandbox', async () => {
                await client.callTool({ name: 'write_file', arguments: { path: 'mine.txt', content: 'a' } });
                let r = await client.callTool({ name: 'list_files', arguments: { session: 'js-other' } });
                assert.ok(!r.structuredContent.entries.some((e) => e.name === 'mine.txt'));
                r = await client.callTool({ name: 'session_info', arguments: { session: 'js-other' } });
                assert.equal(r.structuredContent.session, 'js-other');
                r = await client.callTool({ name: 'exec', arguments: { command: 'true', session: '../x' } });
                assert.equal(r.isError, true);
        });
});

describe('2026-07-28: @modelcontextprotocol/client pinned', () => {
        let client;
        let transport;
        const session = 'js-modern';

        before(async () => {
                client = new ModernClient(
                        { name: 'sandboxd-js-test-v2', version: '2.0.0' },
                        { versionNegotiation: { mode: { pin: '2026-07-28' } } },
                );
                transport = new ModernStdio({
                        command: MCP_BIN,
                        args: ['--session', session],
                        env: daemon.mcpEnv(token),
                        stderr: 'pipe',
                });
                await client.connect(transport);
        });

        after(async () => {
                await client?.close();
        });

        check('server/discover negotiated the stateless era', async () => {
                assert.equal(client.getProtocolEra(), 'modern');
                assert.equal(client.getNegotiatedProtocolVersion(), '2026-07-28');
                const d = client.getDiscoverResult();
                assert.deepEqual(d.supportedVersions, ['2026-07-28']);
                assert.ok(d.capabilities.tools);
                assert.equal(client.getServerVersion()?.name, 'sandboxd-mcp');
        });

        // The v2 client's callTool takes (params, options): adapt to the v1 shape.
        const v2 = {
                listTools: (...a) => client.listTools(...a),
                callTool: (params, _schema, options) => client.callTool(params, options),
        };
        commonScenarios(() => v2, session);
});

describe('raw JSON-RPC lines', () => {
        check('every legacy version, the stateless envelope and its errors', async () => {
                const a = new RawAdapter(['--session', 'js-raw'], daemon.mcpEnv(token));
                try {
                        let id = 1;
                        for (const v of ['2024-11-05', '2025-03-26', '2025-06-18', '2025-11-25']) {
                                const r = await a.request(id++, 'initialize', {
                                        protocolVersion: v,
                                        capabilities: {},
                                        clientInfo: { name: 'raw', version: '0' },
                                });
                                assert.equal(r.result.protocolVersion, v);
                        }
                        let r = await a.request(id++, 'initialize', { protocolVersion: '1999-01-01' });
                        assert.equal(r.result.protocolVersion, '2025-11-25');
                        const meta = (v) => ({
                                'io.modelcontextprotocol/protocolVersion': v,
                                'io.modelcontextprotocol/clientCapabilities': {},
                                'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '0' },
                        });
                        r = await a.request(id++, 'tools/call', {
                                name: 'exec',
                                arguments: { command: 'echo stateless' },
                                _meta: meta('2026-07-28'),
                        });
                        assert.equal(r.result.resultType, 'complete');
                        assert.equal(r.result.structuredContent.stdout, 'stateless\n');
                        assert.equal(r.result._meta['io.modelcontextprotocol/serverInfo'].name, 'sandboxd-mcp');
                        r = await a.request(id++, 'tools/list', { _meta: meta('2030-01-01') });
                        assert.equal(r.error.code, -32022);
                        assert.deepEqual(r.error.data, { supported: ['2026-07-28'], requested: '2030-01-01' });
                        r = await a.request(id++, 'ping', { _meta: meta('2026-07-28') });
                        assert.equal(r.error.code, -32601);
                        a.send('this is not json');
                        r = await a.next((m) => m.error?.code === -32700);
                        assert.equal(r.id, null);
                        r = await a.request(id++, 'nope/nothing', {});
                        assert.equal(r.error.code, -32601);
                        r = await a.request(id++, 'tools/call', { name: 'no_such_tool', arguments: {} });
                        assert.equal(r.error.code, -32602);
                } finally {
                        a.kill();
                }
        });

        check('tasks extension: a long exec becomes a task, followed to the end; another cancelled', async () => {
                const meta = (tasks) => ({
                        'io.modelcontextprotocol/protocolVersion': '2026-07-28',
                        'io.modelcontextprotocol/clientCapabilities': tasks
                                ? { extensions: { 'io.modelcontextprotocol/tasks': {} } }
                                : {},
                });
                const a = new RawAdapter(['--session', 'js-tasks'], daemon.mcpEnv(token));
                try {
                        let r = await a.request(1, 'server/discover', { _meta: meta(true) });
                        assert.deepEqual(r.result.capabilities.extensions, { 'io.modelcontextprotocol/tasks': {} });
                        // long (over a second): a task, durable before the answer
                        r = await a.request(3, 'tools/call', {
                                name: 'exec',
                                arguments: { command: 'sleep 2; echo done; exit 3' },
                                _meta: meta(true),
                        });
                        assert.equal(r.result.resultType, 'task', JSON.stringify(r));
                        const task = r.result;
                        assert.match(task.taskId, /^[0-9a-f]{32}$/);
                        assert.equal(task.status, 'working');
                        assert.equal(task.ttlMs, 3600000);
                        assert.ok(task.pollIntervalMs > 0);
                        assert.ok(!Number.isNaN(Date.parse(task.createdAt)));
                        let id = 10;
                        for (const deadline = Date.now() + 60000; ; await sleep(task.pollIntervalMs)) {
                                r = await a.request(id++, 'tasks/get', { taskId: task.taskId, _meta: meta(true) });
                                assert.equal(r.result.resultType, 'complete');
                                if (r.result.status !== 'working') break;
                                assert.ok(Date.now() < deadline, 'the task ends');
                        }
                        assert.equal(r.result.status, 'completed');
                        assert.equal(r.result.result.isError, true); // exit 3: a tool error, still completed
                        assert.equal(r.result.result.structuredContent.stdout, 'done\n');
                        assert.equal(r.result.result.structuredContent.exit_code, 3);
                        // without the extension: no task, and tasks/* is refused
                        r = await a.request(id++, 'tasks/get', { taskId: task.taskId, _meta: meta(false) });
                        assert.equal(r.error.code, -32021);
                        r = await a.request(id++, 'tasks/get', { taskId: 'f'.repeat(32), _meta: meta(true) });
                        assert.equal(r.error.code, -32602);

                        // cancelled
                        r = await a.request(id++, 'tools/call', {
                                name: 'run_code',
                                arguments: { language: 'bash', code: 'sleep 60' },
                                _meta: meta(true),
                        });
                        assert.equal(r.result.resultType, 'task');
                        const t2 = r.result.taskId;
                        r = await a.request(id++, 'tasks/cancel', { taskId: t2, _meta: meta(true) });
                        assert.equal(r.result.resultType, 'complete');
                        for (const deadline = Date.now() + 30000; ; await sleep(300)) {
                                r = await a.request(id++, 'tasks/get', { taskId: t2, _meta: meta(true) });
                                if (r.result.status !== 'working') break;
                                assert.ok(Date.now() < deadline, 'the cancel takes effect');
                        }
                        assert.equal(r.result.status, 'cancelled');

                        // another user's adapter does not find the task
                        const other = await daemon.createToken('jsother');
                        const b = new RawAdapter(['--session', 'js-tasks'], daemon.mcpEnv(other));
                        try {
                                r = await b.request(1, 'tasks/get', { taskId: task.taskId, _meta: meta(true) });
                                assert.equal(r.error.code, -32602);
                                r = await b.request(2, 'tasks/cancel', { taskId: t2, _meta: meta(true) });
                                assert.equal(r.error.code, -32602);
                        } finally {
                                b.kill();
                        }
                } finally {
                        a.kill();
                }
        });

        check('a client that disconnects mid-call: the execution goes on and stays readable', async () => {
                const a = new RawAdapter(['--session', 'js-raw', '--drain-ms', '0'], daemon.mcpEnv(token));
                let executionId;
                try {
                        a.send({
                                jsonrpc: '2.0',
                                id: 1,
                                method: 'tools/call',
                                params: {
                                        name: 'exec',
                                        arguments: { command: 'sleep 2; echo finished' },
                                        _meta: { progressToken: 'p' },
                                },
                        });
                        const p = await a.next((m) => m.method === 'notifications/progress');
                        executionId = /execution (\S+) started/.exec(p.params.message)[1];
                        const t0 = Date.now();
                        const ex = await a.close();
                        assert.equal(ex.code, 0);
                        assert.ok(Date.now() - t0 < 1500, 'the adapter exits when stdin closes');
                } finally {
                        a.kill();
                }
                const b = new RawAdapter(['--session', 'js-raw'], daemon.mcpEnv(token));
                try {
                        const r = await b.request(2, 'tools/call', {
                                name: 'get_execution',
                                arguments: { execution_id: executionId, wait: 30 },
                        });
                        assert.equal(r.result.structuredContent.state, 'completed');
                        assert.equal(r.result.structuredContent.stdout, 'finished\n');
                } finally {
                        b.kill();
                }
        });
});
