// The console's terminal WebSocket (/v1/terminal, src/http/http_terminal.c)
// from Node, against a real sandboxd over HTTPS: a shell run, typed into,
// resized and ended (exit, then close 1000); a wrong token closed with 4401;
// a first message that is not the auth closed with 1008; a foreign Origin
// refused with 403 before the upgrade; an unmasked frame on a raw TLS
// connection closed with 1002, a 70,000-byte message with 1009; the ninth
// terminal of a user refused with 4429. The browser's side is
// console.test.mjs.
import assert from 'node:assert/strict';
import tls from 'node:tls';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';

import { Daemon } from './harness.mjs';

describe('the terminal WebSocket', () => {
        let d, ca, port, token, url;

        before(async () => {
                d = new Daemon();
                // room for nine shells, so the terminals' own cap (8 per user) is the one reached
                d.env.SANDBOXD_LIMITS_EXEC_PER_USER = '20';
                d.env.SANDBOXD_LIMITS_EXEC_GLOBAL = '20';
                ({ ca, port } = await d.startHttps());
                token = await d.createToken('alice');
                url = `wss://127.0.0.1:${port}/v1/terminal`;
        });

        after(async () => {
                await d?.stop();
        });

        function open(first, opts = {}) {
                const ws = new WebSocket(url, 'sandboxd.terminal.v1', { ca, ...opts });
                const out = { text: '', msgs: [], close: null, ws };
                ws.on('open', () => first && ws.send(JSON.stringify(first)));
                ws.on('message', (data, isBinary) => {
                        if (isBinary) out.text += data.toString();
                        else out.msgs.push(JSON.parse(data.toString()));
                });
                out.closed = new Promise((res) => ws.on('close', (code, reason) => res((out.close = { code, reason: reason.toString() }))));
                return out;
        }

        const waitFor = async (f, what) => {
                for (const end = Date.now() + 60000; !f(); ) {
                        assert.ok(Date.now() < end, what);
                        await new Promise((r) => setTimeout(r, 5));
                }
        };

        test('a shell, bad tokens and frames, the caps', { timeout: 300000 }, async () => {

                const a = open({ type: 'auth', token, session: 's1', rows: 24, cols: 80 });
                await waitFor(() => a.msgs.some((m) => m.type === 'ready'), 'ready ' + JSON.stringify(a));
                a.ws.send(Buffer.from('echo $((6*7))-x; stty size\r'));
                await waitFor(() => /42-x/.test(a.text) && /24 80/.test(a.text), 'output ' + JSON.stringify(a.text));
                a.ws.send(JSON.stringify({ type: 'resize', rows: 30, cols: 100 }));
                a.ws.send(Buffer.from('stty size\r'));
                await waitFor(() => /30 100/.test(a.text), 'resize ' + JSON.stringify(a.text));
                a.ws.send(Buffer.from('exit 3\r'));
                await a.closed;
                assert.equal(a.close.code, 1000);
                assert.deepEqual(a.msgs.at(-1), { type: 'exit', state: 'completed', exit_code: 3 });
                // bad token
                const b = open({ type: 'auth', token: 'sbx_nope', session: 's1', rows: 24, cols: 80 });
                await b.closed;
                assert.equal(b.close.code, 4401);
                // first message not auth
                const c = open({ type: 'resize', rows: 2, cols: 2 });
                await c.closed;
                assert.equal(c.close.code, 1008);
                // foreign origin
                const e = new WebSocket(url, 'sandboxd.terminal.v1', { ca, origin: 'https://evil.example' });
                const st = await new Promise((res) => {
                        e.on('unexpected-response', (req, resp) => res(resp.statusCode));
                        e.on('open', () => res('open'));
                        e.on('error', (err) => res(err.message));
                });
                assert.equal(st, 403);
                // unmasked frame over raw TLS: 1002
                const sock = tls.connect({ host: '127.0.0.1', port, ca, servername: undefined });
                await new Promise((r) => sock.once('secureConnect', r));
                sock.write(`GET /v1/terminal HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: sandboxd.terminal.v1\r\n\r\n`);
                let raw = Buffer.alloc(0);
                sock.on('data', (b2) => (raw = Buffer.concat([raw, b2])));
                await waitFor(() => raw.includes('\r\n\r\n'), 'head');
                raw = Buffer.alloc(0);
                sock.write(Buffer.from([0x81, 0x02, 0x68, 0x69]));
                await waitFor(() => raw.length >= 4, 'close frame');
                assert.equal(raw.readUInt16BE(2), 1002);
                sock.destroy();
                // oversize: 1009
                const f = open({ type: 'auth', token, session: 's1', rows: 24, cols: 80 });
                await waitFor(() => f.msgs.some((m) => m.type === 'ready'), 'ready2');
                f.ws.send(Buffer.alloc(70000));
                await f.closed;
                assert.equal(f.close.code, 1009);
                // per-user cap: 8 open, the 9th refused 4429
                const many = [];
                for (let i = 0; i < 8; i++) many.push(open({ type: 'auth', token, session: `c${i}`, rows: 24, cols: 80 }));
                await waitFor(() => many.every((m) => m.msgs.length || m.close), 'eight answered');
                const ninth = open({ type: 'auth', token, session: 'c9', rows: 24, cols: 80 });
                await ninth.closed;
                assert.equal(ninth.close.code, 4429);
                assert.match(ninth.msgs[0].message, /8 terminals/);
                for (const m of many) m.ws.close(1000);
                await Promise.all(many.map((m) => m.closed));
                // shells cancelled
        });
});
