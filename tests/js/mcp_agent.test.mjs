// mcp_agent.test.mjs — what agents ask for (issue 17, items 4-7), end to end
// through sandboxd-mcp with the official SDKs and the MCP Inspector CLI:
//   - portable schemas: no `type` arrays, only keywords the adapter's
//     validator enforces, and the Inspector's --strict check clean; the
//     catalog file (schemas/mcp_tools.json) walked too, and equal to what
//     tools/list serves;
//   - a cut result links its whole output (resource_link), read back byte
//     for byte with resources/read in pages, in both eras, and refused to
//     another user;
//   - idempotent retries and get_execution wait: true through the tools.
// Its own daemon, under an instance of its own (node --test runs files in
// parallel; two daemons of one instance would reconcile each other away).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { Client as LegacyClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as LegacyStdio } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Client as ModernClient } from '@modelcontextprotocol/client';
import { StdioClientTransport as ModernStdio } from '@modelcontextprotocol/client/stdio';

import { Daemon, MCP_BIN, RawAdapter, ROOT, RUN_ID, readToolCatalog } from './harness.mjs';

// Every keyword the adapter's validator (src/mcp/mcp_schema.c) enforces, plus
// the annotations it may carry; a schema using anything else would advertise
// a rule nobody checks.
const KNOWN_KEYWORDS = new Set([
        'type',
        'anyOf',
        'enum',
        'minimum',
        'maximum',
        'minLength',
        'maxLength',
        'pattern',
        'items',
        'minItems',
        'maxItems',
        'properties',
        'required',
        'additionalProperties',
        'description',
        'title',
]);
const INSPECTOR = path.join(ROOT, 'tests', 'node_modules', '.bin', 'mcp-inspector');

let daemon;
let token;
let otherToken;
let failed = false;

function check(name, fn, opts = {}) {
        test(name, { timeout: 180000, ...opts }, async (t) => {
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
        daemon.instance = `${RUN_ID}ag`;
        daemon.env.SANDBOXD_INSTANCE = daemon.instance;
        await daemon.start();
        token = await daemon.createToken('jsagent');
        otherToken = await daemon.createToken('jsmallory');
});

after(async () => {
        if (failed && daemon) process.stderr.write(`--- sandboxd log (tail) ---\n${daemon.logTail(60)}\n`);
        if (daemon) await daemon.stop();
});

async function legacyClient(tok, session) {
        const client = new LegacyClient({ name: 'sandboxd-js-agent', version: '1.0.0' });
        await client.connect(
                new LegacyStdio({ command: MCP_BIN, args: ['--session', session], env: daemon.mcpEnv(tok), stderr: 'pipe' }),
        );
        return client;
}

/** Visit every (sub)schema of a JSON Schema with its path. */
function walkSchema(schema, where, visit) {
        visit(schema, where);
        for (const [k, v] of Object.entries(schema.properties ?? {})) walkSchema(v, `${where}.properties.${k}`, visit);
        if (schema.items && typeof schema.items === 'object') walkSchema(schema.items, `${where}.items`, visit);
        if (schema.additionalProperties && typeof schema.additionalProperties === 'object')
                walkSchema(schema.additionalProperties, `${where}.additionalProperties`, visit);
        (schema.anyOf ?? []).forEach((b, i) => walkSchema(b, `${where}.anyOf[${i}]`, visit));
}

// 180000 lines of 8 bytes: 1.44 MB, past the inline head and tail (32 KiB
// each) and past one resources/read page (1 MiB).
const LINES = 180000;
const BIG_CODE = `import sys\nsys.stdout.write(''.join('%07d\\n' % i for i in range(${LINES})))`;
const bigExpected = () => Array.from({ length: LINES }, (_, i) => `${String(i).padStart(7, '0')}\n`).join('');

describe('portable, honest schemas', () => {
        let client;
        before(async () => (client = await legacyClient(token, 'js-agent-schema')));
        after(async () => client?.close());

        check('every published schema: no type arrays, only keywords the validator enforces', async () => {
                const { tools } = await client.listTools();
                const catalog = readToolCatalog().tools;
                let nodes = 0;
                for (const t of [...tools, ...catalog]) {
                        for (const [kind, schema] of [
                                ['inputSchema', t.inputSchema],
                                ['outputSchema', t.outputSchema],
                        ]) {
                                walkSchema(schema, `${t.name}.${kind}`, (s, where) => {
                                        nodes++;
                                        assert.ok(!Array.isArray(s.type), `${where}: type is an array`);
                                        for (const k of Object.keys(s))
                                                assert.ok(KNOWN_KEYWORDS.has(k), `${where}: keyword ${k} is not enforced`);
                                        if (s.anyOf)
                                                for (const b of s.anyOf)
                                                        assert.equal(typeof b.type, 'string', `${where}: one type per branch`);
                                        if (s.pattern) new RegExp(s.pattern, 'u'); // also a valid ECMA-262 pattern
                                });
                        }
                }
                assert.ok(nodes > 100, `walked ${nodes} schema nodes`);
                const exec = tools.find((t) => t.name === 'exec');
                assert.ok(exec.inputSchema.properties.idempotency_key.pattern);
        });

        check('schemas/mcp_tools.json is what tools/list serves', async () => {
                const catalog = readToolCatalog().tools;
                // the newest version: the file's tools array as it stands
                const a = new RawAdapter(['--session', 'js-agent-catalog'], daemon.mcpEnv(token));
                try {
                        const r = await a.request(1, 'tools/list', {
                                _meta: {
                                        'io.modelcontextprotocol/protocolVersion': '2026-07-28',
                                        'io.modelcontextprotocol/clientCapabilities': {},
                                },
                        });
                        assert.deepEqual(r.result.tools, catalog);
                } finally {
                        a.kill();
                }
                // and, field by field, what the 1.x SDK lists
                const { tools } = await client.listTools();
                assert.deepEqual(
                        tools.map((t) => t.name),
                        catalog.map((t) => t.name),
                );
                for (const t of tools) {
                        const f = catalog.find((c) => c.name === t.name);
                        for (const k of ['title', 'description', 'inputSchema', 'outputSchema', 'annotations'])
                                assert.deepEqual(t[k], f[k], `${t.name}.${k}`);
                }
        });

        check('the validator enforces pattern', async () => {
                const r = await client.callTool({
                        name: 'exec',
                        arguments: { command: 'true', idempotency_key: 'has space' },
                });
                assert.equal(r.isError, true);
                assert.match(r.content[0].text, /idempotency_key: must match the pattern/);
        });

        check('the MCP Inspector CLI lists the tools with --strict: 0 warnings, 0 errors', async () => {
                const { stdout, stderr } = await new Promise((resolve, reject) =>
                        execFile(
                                INSPECTOR,
                                ['--cli', MCP_BIN, '--method', 'tools/list', '--strict', '--format', 'json'],
                                { env: daemon.mcpEnv(token), timeout: 120000, maxBuffer: 16 << 20 },
                                (err, out, errOut) =>
                                        err ? reject(new Error(`${err.message}\n${errOut}`)) : resolve({ stdout: out, stderr: errOut }),
                        ),
                );
                const envelope = JSON.parse(stdout.trim().split('\n').pop());
                assert.ok(envelope.result.tools.length >= 14, 'the tools were listed');
                assert.equal(envelope.schemaFindings, undefined, JSON.stringify(envelope.schemaFindings));
                assert.doesNotMatch(stderr, /^(Warning|Error): tool/m, stderr);
                assert.doesNotMatch(stderr, /Schema portability/, stderr);
        });

        check('the MCP Inspector CLI calls run_tests and gets structured results', async () => {
                const tests = 'def test_ok():\n    assert 2 * 3 == 6\n\ndef test_bad():\n    assert 2 * 3 == 7\n';
                const { stdout } = await new Promise((resolve, reject) =>
                        execFile(
                                INSPECTOR,
                                // the Inspector hands its server only the variables given with -e
                                ['--cli', '-e', `SANDBOXD_API_SOCKET=${daemon.apiSocket}`, '-e', `SANDBOXD_TOKEN=${token}`,
                                        MCP_BIN, '--method', 'tools/call', '--tool-name', 'run_tests',
                                        '--tool-arg', 'language=python', '--tool-arg', `tests=${tests}`],
                                { env: daemon.mcpEnv(token), timeout: 180000, maxBuffer: 16 << 20 },
                                (err, out, errOut) =>
                                        err ? reject(new Error(`${err.message}\n${errOut}`)) : resolve({ stdout: out, stderr: errOut }),
                        ),
                );
                const text = stdout.trim();
                const result = JSON.parse(text.slice(text.indexOf('{')));
                const s = result.structuredContent;
                assert.ok(s, text);
                assert.equal(s.success, false);
                assert.deepEqual(s.summary, { total: 2, passed: 1, failed: 1, skipped: 0 });
                assert.equal(s.tests.find((t) => t.name === 'test_bad').passed, false);
        });
});

describe('large outputs by reference', () => {
        let client;
        let modern;
        let mallory;
        let link;
        const session = 'js-agent-big';

        before(async () => {
                client = await legacyClient(token, session);
                mallory = await legacyClient(otherToken, session);
                modern = new ModernClient(
                        { name: 'sandboxd-js-agent-v2', version: '2.0.0' },
                        { versionNegotiation: { mode: { pin: '2026-07-28' } } },
                );
                await modern.connect(
                        new ModernStdio({ command: MCP_BIN, args: ['--session', session], env: daemon.mcpEnv(token), stderr: 'pipe' }),
                );
        });
        after(async () => {
                await client?.close();
                await mallory?.close();
                await modern?.close();
        });

        check('a cut result links the whole stdout, read back byte for byte in pages', async () => {
                assert.ok(client.getServerCapabilities().resources, 'resources are advertised');
                const r = await client.callTool({ name: 'run_code', arguments: { language: 'python', code: BIG_CODE } });
                assert.equal(r.isError ?? false, false, JSON.stringify(r).slice(0, 2000));
                const s = r.structuredContent;
                assert.equal(s.truncated, true);
                assert.equal(s.stdout_bytes, LINES * 8);
                const links = r.content.filter((c) => c.type === 'resource_link');
                assert.equal(links.length, 1, 'stdout only: stderr is empty');
                link = links[0];
                assert.equal(link.uri, `sandboxd://sessions/${session}/executions/${s.execution_id}/stdout`);
                assert.equal(link.size, LINES * 8);

                let uri = link.uri;
                let got = '';
                let pages = 0;
                for (;;) {
                        const { contents } = await client.readResource({ uri });
                        assert.equal(contents.length, 1);
                        assert.equal(contents[0].uri, uri);
                        got += contents[0].text;
                        pages++;
                        const meta = contents[0]._meta;
                        assert.equal(meta['sandboxd/total_bytes'], LINES * 8);
                        if (meta['sandboxd/eof']) break;
                        uri = meta['sandboxd/next'];
                        assert.ok(pages < 10);
                }
                assert.ok(pages >= 2, `paged (${pages} pages)`);
                assert.equal(got.length, LINES * 8);
                assert.ok(got === bigExpected(), 'byte for byte');
        });

        check('the 2026-07-28 era reads the same link', async () => {
                assert.ok(link, 'the previous test made the link');
                const { contents } = await modern.readResource({ uri: `${link.uri}?offset=1048576` });
                assert.equal(contents[0].text, bigExpected().slice(1048576));
                assert.equal(contents[0]._meta['sandboxd/eof'], true);
        });

        check('another user, or another session, finds no such resource', async () => {
                assert.ok(link);
                await assert.rejects(mallory.readResource({ uri: link.uri }), (e) => e.code === -32002);
                await assert.rejects(
                        client.readResource({ uri: link.uri.replace(`/sessions/${session}/`, '/sessions/js-elsewhere/') }),
                        (e) => e.code === -32002,
                );
        });
});

describe('retries and polling through the tools', () => {
        let client;
        before(async () => (client = await legacyClient(token, 'js-agent-idem')));
        after(async () => client?.close());

        check('an idempotent exec retried: the same execution, run once', async () => {
                const args = { command: 'echo once $(od -An -N4 -tu4 /dev/urandom)', idempotency_key: 'js-retry-1' };
                const a = await client.callTool({ name: 'exec', arguments: args });
                const b = await client.callTool({ name: 'exec', arguments: args });
                assert.equal(a.isError ?? false, false, JSON.stringify(a));
                assert.equal(b.structuredContent.execution_id, a.structuredContent.execution_id);
                assert.equal(b.structuredContent.stdout, a.structuredContent.stdout);
                const list = await client.callTool({ name: 'list_executions', arguments: {} });
                assert.equal(list.structuredContent.executions.filter((e) => e.command_preview === args.command).length, 1);
                const c = await client.callTool({ name: 'exec', arguments: { ...args, command: 'echo twice' } });
                assert.equal(c.isError, true);
                assert.match(c.content[0].text, /conflict/);
        });

        check('get_execution wait: true, and completed_within_ms', async () => {
                const bg = await client.callTool({
                        name: 'exec',
                        arguments: { command: 'sleep 2; echo waited', background: true },
                });
                const id = bg.structuredContent.execution_id;
                const r = await client.callTool({ name: 'get_execution', arguments: { execution_id: id, wait: true } });
                assert.equal(r.structuredContent.state, 'completed', JSON.stringify(r));
                assert.equal(r.structuredContent.stdout, 'waited\n');
                const l = await client.callTool({ name: 'list_executions', arguments: { completed_within_ms: 600000 } });
                assert.ok(l.structuredContent.executions.some((e) => e.execution_id === id));
        });
});
