// e2b_host_program.mjs — getHost(port) traffic (issue 36), run by
// e2b.test.mjs with the same variables as e2b_program.mjs and E2B_PORT (the
// front's port on 127.0.0.1). A server started in the sandbox is fetched at
// sbx.getHost(port): traffic goes to 127.0.0.1 only, with the Host header
// the SDK's name. Then a WebSocket echo server (python3's standard library,
// the handshake by hand) reached through getHost(WS_PORT) by a client with a
// hand-written handshake over TLS (Node 20 has no WebSocket client). The
// daemon runs with e2b.proxy_max_per_user 1: an open WebSocket holds the
// user's one slot, and its close gives it back. Prints one JSON line of what
// it saw.
import crypto from 'node:crypto';
import https from 'node:https';
import tls from 'node:tls';
import { once } from 'node:events';
import { Sandbox } from 'e2b';

const FRONT = Number(process.env.E2B_PORT);
const PORT = 8123;
const WS_PORT = 8125;
const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

// An echo server: "ready" right behind its 101, then "echo: " and each
// message; a close frame answered and the connection closed.
const WS_SERVER = `
import base64, hashlib, socket, struct
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', ${WS_PORT}))
s.listen(8)
def recvn(c, n):
    b = b''
    while len(b) < n:
        x = c.recv(n - len(b))
        if not x:
            raise EOFError
        b += x
    return b
while True:
    c, _ = s.accept()
    try:
        h = b''
        while b'\\r\\n\\r\\n' not in h:
            x = c.recv(4096)
            if not x:
                raise EOFError
            h += x
        key = [l.split(b':', 1)[1].strip() for l in h.split(b'\\r\\n') if l.lower().startswith(b'sec-websocket-key:')][0]
        acc = base64.b64encode(hashlib.sha1(key + b'${WS_GUID}').digest())
        c.sendall(b'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n'
                  b'Sec-WebSocket-Accept: ' + acc + b'\\r\\n\\r\\n\\x81\\x05ready')
        while True:
            b0, b1 = recvn(c, 2)
            n = b1 & 127
            if n == 126:
                n = struct.unpack('>H', recvn(c, 2))[0]
            elif n == 127:
                n = struct.unpack('>Q', recvn(c, 8))[0]
            mask = recvn(c, 4) if b1 & 128 else bytes(4)
            data = bytes(x ^ mask[i % 4] for i, x in enumerate(recvn(c, n)))
            if b0 & 15 == 8:
                c.sendall(b'\\x88\\x00')
                break
            reply = (b'echo: ' + data)[:125]
            c.sendall(bytes([0x80 | (b0 & 15), len(reply)]) + reply)
    except Exception:
        pass
    finally:
        c.close()
`;

/** A WebSocket opened by hand through the front on loopback, Host naming
 * the sandbox: { status, accepted, frame(), send(op, text), end() }. */
async function wsOpen(host, headers = {}) {
        const key = crypto.randomBytes(16).toString('base64');
        const sock = tls.connect({ host: '127.0.0.1', port: FRONT, checkServerIdentity: (_h, cert) => tls.checkServerIdentity('127.0.0.1', cert) });
        let buf = Buffer.alloc(0);
        let ended = false;
        let waiters = [];
        const wake = () => {
                const w = waiters;
                waiters = [];
                for (const f of w) f();
        };
        const closed = new Promise((resolve) => sock.on('close', resolve));
        sock.on('data', (c) => {
                buf = Buffer.concat([buf, c]);
                wake();
        });
        sock.on('close', () => {
                ended = true;
                wake();
        });
        sock.on('error', () => {});
        sock.setTimeout(60000, () => sock.destroy(new Error('no traffic in 60 s')));
        // the value pick() finds in buf, once there; rejected when the socket closes first
        const until = (pick) =>
                new Promise((resolve, reject) => {
                        const check = () => {
                                const v = pick();
                                if (v !== undefined) resolve(v);
                                else if (ended) reject(new Error('the connection closed'));
                                else waiters.push(check);
                        };
                        check();
                });
        await once(sock, 'secureConnect');
        sock.write(
                [`GET /ws?x=1 HTTP/1.1`, `Host: ${host}`, 'Upgrade: websocket', 'Connection: keep-alive, Upgrade', `Sec-WebSocket-Key: ${key}`,
                 'Sec-WebSocket-Version: 13', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`), '', ''].join('\r\n'),
        );
        const head = await until(() => {
                const i = buf.indexOf('\r\n\r\n');
                if (i < 0) return undefined;
                const h = buf.subarray(0, i).toString();
                buf = buf.subarray(i + 4);
                return h;
        });
        const accept = /^sec-websocket-accept:\s*(\S+)/im.exec(head)?.[1];
        return {
                status: Number(head.split(' ')[1]),
                accepted: accept === crypto.createHash('sha1').update(key + WS_GUID).digest('base64'),
                // one unmasked frame of at most 125 bytes from the server
                frame: () =>
                        until(() => {
                                if (buf.length < 2 || buf.length < 2 + (buf[1] & 127)) return undefined;
                                const n = buf[1] & 127;
                                const f = { op: buf[0] & 15, data: buf.subarray(2, 2 + n).toString() };
                                buf = buf.subarray(2 + n);
                                return f;
                        }),
                send: (op, text) => {
                        const p = Buffer.from(text);
                        const mask = crypto.randomBytes(4);
                        sock.write(Buffer.concat([Buffer.from([0x80 | op, 0x80 | p.length]), mask, Buffer.from(p.map((x, i) => x ^ mask[i % 4]))]));
                },
                end: () => {
                        sock.end();
                        return closed;
                },
                destroy: () => sock.destroy(),
        };
}

/** A request to the front on loopback named by host: { status, headers, body }. */
function get(host, path, headers = {}, method = 'GET', body) {
        return new Promise((resolve, reject) => {
                const req = https.request(
                        { hostname: '127.0.0.1', port: FRONT, path, method, headers: { Host: host, ...headers,
                          // the cert names 127.0.0.1, where the test connects; Host names the sandbox
                          checkServerIdentity: (_host, cert) => tls.checkServerIdentity('127.0.0.1', cert) }, timeout: 60000,
                          // the cert names 127.0.0.1, where the test connects; Host names the sandbox
                          checkServerIdentity: (_host, cert) => tls.checkServerIdentity('127.0.0.1', cert) },
                        (res) => {
                                const chunks = [];
                                res.on('data', (c) => chunks.push(c));
                                res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
                        },
                );
                req.on('error', reject);
                req.on('timeout', () => req.destroy(new Error('no answer in 60 s')));
                req.end(body);
        });
}

const out = {};
const pub = await Sandbox.create('base', { metadata: { run: process.env.RUN_TAG } });
const priv = await Sandbox.create('base', { metadata: { run: process.env.RUN_TAG }, network: { allowPublicTraffic: false } });
try {
        for (const s of [pub, priv]) {
                await s.files.write('site/hello.txt', 'hello through getHost');
                await s.commands.run(`cd site && exec python3 -m http.server ${PORT} --bind 127.0.0.1`, { background: true });
        }
        out.host = pub.getHost(PORT);
        // wait for the server: the condition, within a deadline
        const deadline = Date.now() + 60000;
        let r;
        for (;;) {
                r = await get(out.host, '/hello.txt');
                if (r.status === 200 || Date.now() > deadline) break;
                await new Promise((res) => setTimeout(res, 200));
        }
        out.get = { status: r.status, body: r.body, length: r.headers['content-length'] };
        const missing = await get(out.host, '/nope%20here.txt?a=1&b=x%2Fy');
        out.missing = missing.status;
        const closed = await get(pub.getHost(8124), '/');
        out.closed = { status: closed.status, body: closed.body };
        // the E2b-Sandbox-Id route to the same port
        const hdr = await get('127.0.0.1', '/hello.txt', { 'E2b-Sandbox-Id': pub.sandboxId, 'E2b-Sandbox-Port': String(PORT) });
        out.header = { status: hdr.status, body: hdr.body };
        out.unknown = (await get(`${PORT}-${'a'.repeat(20)}.${out.host.split('.').slice(1).join('.')}`, '/')).status;
        // the private sandbox: none, a wrong token, its own
        const ph = priv.getHost(PORT);
        let p;
        const pdeadline = Date.now() + 60000;
        for (;;) {
                p = await get(ph, '/hello.txt', { 'e2b-traffic-access-token': priv.trafficAccessToken });
                if (p.status === 200 || Date.now() > pdeadline) break;
                await new Promise((res) => setTimeout(res, 200));
        }
        out.privWith = { status: p.status, body: p.body, tokenSet: Boolean(priv.trafficAccessToken) };
        out.privNone = (await get(ph, '/hello.txt')).status;
        out.privWrong = (await get(ph, '/hello.txt', { 'e2b-traffic-access-token': pub.trafficAccessToken })).status;
        out.pubToken = Boolean(pub.trafficAccessToken);
        out.publicId = pub.sandboxId;

        // WebSocket through getHost(WS_PORT)
        await pub.files.write('ws_echo.py', WS_SERVER);
        await priv.files.write('ws_echo.py', WS_SERVER);
        for (const s of [pub, priv]) await s.commands.run('exec python3 ws_echo.py', { background: true });
        let ws;
        const wdeadline = Date.now() + 60000;
        for (;;) { // the server listening: the condition, within a deadline
                ws = await wsOpen(pub.getHost(WS_PORT));
                if (ws.status === 101 || Date.now() > wdeadline) break;
                ws.destroy();
                await new Promise((res) => setTimeout(res, 200));
        }
        out.ws = { status: ws.status, accepted: ws.accepted };
        out.ws.first = await ws.frame(); // sent behind the 101
        ws.send(1, 'hello ws');
        out.ws.echo = await ws.frame();
        ws.send(2, 'binary too');
        out.ws.echo2 = await ws.frame();
        // the open WebSocket holds the user's one proxy slot
        out.ws.busy = (await get(out.host, '/hello.txt')).status;
        ws.send(8, '');
        out.ws.closeFrame = await ws.frame();
        await ws.end();
        // closed: the slot is back before the client sees the end
        out.ws.after = (await get(out.host, '/hello.txt')).status;
        // the private sandbox's WebSocket: none, another sandbox's token, its own
        const pws = priv.getHost(WS_PORT);
        const none = await wsOpen(pws);
        none.destroy();
        const wrong = await wsOpen(pws, { 'e2b-traffic-access-token': pub.trafficAccessToken });
        wrong.destroy();
        let own;
        const odeadline = Date.now() + 60000;
        for (;;) {
                own = await wsOpen(pws, { 'e2b-traffic-access-token': priv.trafficAccessToken });
                if (own.status === 101 || Date.now() > odeadline) break;
                own.destroy();
                await new Promise((res) => setTimeout(res, 200));
        }
        own.send(1, 'private');
        out.wsPriv = { none: none.status, wrong: wrong.status, own: own.status, first: (await own.frame()).data, echo: (await own.frame()).data };
        own.destroy();
} finally {
        await pub.kill();
        await priv.kill();
}
console.log(JSON.stringify(out));
