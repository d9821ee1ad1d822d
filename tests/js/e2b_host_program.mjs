// e2b_host_program.mjs — getHost(port) traffic (issue 36), run by
// e2b.test.mjs with the same variables as e2b_program.mjs and E2B_PORT (the
// front's port on 127.0.0.1). A server started in the sandbox is fetched at
// sbx.getHost(port): traffic goes to 127.0.0.1 only, with the Host header
// the SDK's name. Prints one JSON line of what it saw.
import https from 'node:https';
import tls from 'node:tls';
import { Sandbox } from 'e2b';

const FRONT = Number(process.env.E2B_PORT);
const PORT = 8123;

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
} finally {
        await pub.kill();
        await priv.kill();
}
console.log(JSON.stringify(out));
