// mcp_cells.test.mjs — run_cell through sandboxd-mcp with the official SDK
// clients of both protocol eras (issue 25): a matplotlib chart left open
// comes back as an `image` content block (a PNG that decodes, of the
// figure's size), text/plain in the text block, the whole bundle in
// structuredContent, and the context keeps its state between calls.
// Its own daemon, under an instance of its own.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Client as LegacyClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as LegacyStdio } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Client as ModernClient } from '@modelcontextprotocol/client';
import { StdioClientTransport as ModernStdio } from '@modelcontextprotocol/client/stdio';

import { Daemon, MCP_BIN, RUN_ID } from './harness.mjs';

let daemon;
let token;
let failed = false;

before(async () => {
        daemon = new Daemon();
        daemon.instance = `${RUN_ID}cl`;
        daemon.env.SANDBOXD_INSTANCE = daemon.instance;
        await daemon.start();
        token = await daemon.createToken('jscells');
});

after(async () => {
        if (failed && daemon) process.stderr.write(`--- sandboxd log (tail) ---\n${daemon.logTail(60)}\n`);
        if (daemon) await daemon.stop();
});

const PLOT = 'import matplotlib.pyplot as plt\nplt.figure(figsize=(4, 3), dpi=100)\nplt.plot([1, 3, 2])\nprint("plotted")';

function pngSize(b64) {
        const png = Buffer.from(b64, 'base64');
        assert.equal(png.subarray(0, 8).toString('latin1'), '\x89PNG\r\n\x1a\n', 'a PNG signature');
        assert.equal(png.subarray(12, 16).toString('latin1'), 'IHDR');
        return { width: png.readUInt32BE(16), height: png.readUInt32BE(20) };
}

async function runCells(client, session) {
        const first = await client.callTool({ name: 'run_cell', arguments: { code: 'x = 41', session } });
        assert.ok(!first.isError, JSON.stringify(first));
        const plot = await client.callTool({ name: 'run_cell', arguments: { code: PLOT, session } });
        assert.ok(!plot.isError, JSON.stringify(plot).slice(0, 2000));
        const images = plot.content.filter((c) => c.type === 'image');
        assert.equal(images.length, 1, JSON.stringify(plot.content.map((c) => c.type)));
        assert.equal(images[0].mimeType, 'image/png');
        const { width, height } = pngSize(images[0].data);
        assert.ok(width > 200 && width <= 400 && height > 150 && height <= 300, `${width}x${height}`);
        const text = plot.content.find((c) => c.type === 'text');
        assert.match(text.text, /plotted/);
        const again = await client.callTool({ name: 'run_cell', arguments: { code: 'x + 1', session } });
        assert.match(again.content.find((c) => c.type === 'text').text, /^42\n/);
        return again;
}

test('run_cell: image content blocks and state, 2025-06-18 era SDK', { timeout: 240000 }, async () => {
        const client = new LegacyClient({ name: 'sandboxd-js-cells', version: '1.0.0' });
        await client.connect(
                new LegacyStdio({ command: MCP_BIN, args: ['--session', 'js-cells-a'], env: daemon.mcpEnv(token), stderr: 'pipe' }),
        );
        try {
                const r = await runCells(client, 'js-cells-a');
                assert.equal(r.structuredContent.generation, 1);
                assert.equal(r.structuredContent.execution_count, 3);
                assert.equal(r.structuredContent.outputs[0].data['text/plain'], '42');
                // streamed output arrives as progress while the cell runs
                const seen = [];
                const streamed = await client.callTool(
                        { name: 'run_cell', arguments: { code: 'import time\nprint("tick", flush=True)\ntime.sleep(1)\n"end"', session: 'js-cells-a' } },
                        undefined,
                        { onprogress: (p) => seen.push(p.message ?? '') },
                );
                assert.match(streamed.content[0].text, /'end'/);
                assert.ok(seen.some((m) => m.includes('tick')), JSON.stringify(seen));
        } catch (e) {
                failed = true;
                throw e;
        } finally {
                await client.close();
        }
});

test('run_cell: image content blocks and state, newest SDK', { timeout: 240000 }, async () => {
        const client = new ModernClient({ name: 'sandboxd-js-cells', version: '1.0.0' });
        await client.connect(
                new ModernStdio({ command: MCP_BIN, args: ['--session', 'js-cells-b'], env: daemon.mcpEnv(token), stderr: 'pipe' }),
        );
        try {
                await runCells(client, 'js-cells-b');
        } catch (e) {
                failed = true;
                throw e;
        } finally {
                await client.close();
        }
});

test('run_cell: a cancelled call interrupts its cell, and large outputs come by reference', { timeout: 240000 }, async () => {
        const client = new LegacyClient({ name: 'sandboxd-js-cells', version: '1.0.0' });
        const session = 'js-cells-c';
        await client.connect(
                new LegacyStdio({ command: MCP_BIN, args: ['--session', session], env: daemon.mcpEnv(token), stderr: 'pipe' }),
        );
        try {
                await client.callTool({ name: 'run_cell', arguments: { code: 'y = 5', session } });
                // the client gives up on a cell that never ends: notifications/cancelled
                const ac = new AbortController();
                const running = client.callTool(
                        { name: 'run_cell', arguments: { code: 'import time\nprint("busy", flush=True)\nwhile True:\n    time.sleep(0.05)', session } },
                        undefined,
                        { signal: ac.signal, onprogress: (p) => { if ((p.message ?? '').includes('busy')) ac.abort(); } },
                );
                await assert.rejects(running);
                // the cell is interrupted (not left running): the context becomes idle, state kept
                const deadline = Date.now() + 60000;
                let state = '';
                while (Date.now() < deadline) {
                        const l = await client.callTool({ name: 'list_contexts', arguments: { session } });
                        state = l.structuredContent.contexts[0].state;
                        if (state === 'idle') break;
                        await new Promise((r) => setTimeout(r, 100));
                }
                assert.equal(state, 'idle');
                const y = await client.callTool({ name: 'run_cell', arguments: { code: 'y', session } });
                assert.equal(y.structuredContent.outputs[0].data['text/plain'], '5', JSON.stringify(y.structuredContent));
                assert.equal(y.structuredContent.generation, 1);

                // 6 MiB of text: the inline part, and a resource link to all of it
                const big = await client.callTool({ name: 'run_cell', arguments: { code: 'print("z" * (6 << 20), end="")', session } });
                assert.equal(big.structuredContent.truncated, true);
                assert.equal(big.structuredContent.stdout_bytes, 6 << 20);
                const link = big.content.find((c) => c.type === 'resource_link' && c.uri.endsWith('/stdout'));
                assert.ok(link, JSON.stringify(big.content.map((c) => c.type)));
                assert.match(link.uri, new RegExp(`/executions/${big.structuredContent.execution_id}/stdout$`));
                let uri = link.uri;
                let total = 0;
                while (uri) {
                        const page = await client.readResource({ uri });
                        const c = page.contents[0];
                        assert.match(c.text, /^z*$/); // the page at the very end is empty (eof)
                        total += c.text.length;
                        uri = c._meta['sandboxd/next'];
                }
                assert.equal(total, 6 << 20);
        } catch (e) {
                failed = true;
                throw e;
        } finally {
                await client.close();
        }
});
