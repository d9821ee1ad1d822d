// The browser console (console/, served at /console/ by the HTTPS front) in
// a real browser: Debian's chromium driven by puppeteer-core, against a real
// sandboxd over HTTPS. Sign in, a session appearing live, its page with an
// execution's output, a terminal over its WebSocket (the token in no URL or
// header; a page of another origin refused, 403 before the upgrade; a
// revoked token signed out by the socket's 4401), pause and resume, a download, another tenant editing
// the URL, an operator token seeing every user's sessions and its pages
// (users and quotas, pool, nodes, health) that a tenant neither sees nor reads,
// hostile output and file names shown as text with no script run, a
// cross-origin POST refused, a revoked token signed out; then a session
// page's sections (a cell's chart as an image, a service's port, an upload
// read back and one refused past its cap, a snapshot taken and deleted) that
// another tenant cannot reach by URL, the role from whoami, and the
// operator's Top page of SVG charts that a tenant is refused. Screenshots of
// each step go to <build>/console-screenshots/. Without chromium the test is
// skipped, except in CI (SANDBOXD_CI=1), where scripts/setup.sh installs it.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BUILD, Daemon, socketRequest } from './harness.mjs';

const CHROMIUM = process.env.SANDBOXD_CHROMIUM || '/usr/bin/chromium';
const SHOTS = path.join(BUILD, 'console-screenshots');
const haveChromium = fs.existsSync(CHROMIUM);
if (!haveChromium && process.env.SANDBOXD_CI === '1') throw new Error(`no ${CHROMIUM}: scripts/setup.sh installs it`);

/** POST /v1/<method> over HTTPS from Node: { status, body, headers }. */
function call(port, ca, token, method, params) {
        return new Promise((resolve, reject) => {
                const req = https.request(
                        {
                                hostname: '127.0.0.1',
                                port,
                                path: `/v1/${method}`,
                                method: 'POST',
                                headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
                                ca,
                        },
                        (res) => {
                                let text = '';
                                res.on('data', (d) => (text += d));
                                res.on('end', () => resolve({ status: res.statusCode, body: JSON.parse(text) }));
                        },
                );
                req.on('error', reject);
                req.end(JSON.stringify(params));
        });
}

describe('the browser console', { skip: !haveChromium && `no ${CHROMIUM}` }, () => {
        let d, ca, port, origin, browser, alice, aliceId, bob, ops, other;
        const dialogs = [];

        before(async () => {
                const { default: puppeteer } = await import('puppeteer-core');
                d = new Daemon();
                ({ ca, port } = await d.startHttps());
                origin = `https://127.0.0.1:${port}`;
                const r = await socketRequest(d.adminSocket, { cmd: 'token.create', user: 'alice', role: 'agent' });
                assert.ok(r.ok, JSON.stringify(r));
                ({ token: alice, id: aliceId } = r.result);
                bob = await d.createToken('bob');
                ops = await d.createToken('ops', 'operator');
                fs.mkdirSync(SHOTS, { recursive: true });
                // another origin on loopback, for the CSRF check: a blank page
                other = http.createServer((req, res) => res.end('<!doctype html><title>other</title>'));
                await new Promise((res) => other.listen(0, '127.0.0.1', res));
                browser = await puppeteer.launch({
                        executablePath: CHROMIUM,
                        headless: true,
                        // the daemon's certificate is from a CA made for this test
                        acceptInsecureCerts: true,
                        defaultViewport: { width: 1280, height: 800 },
                        args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-dev-shm-usage'],
                });
        });

        after(async () => {
                await browser?.close();
                other?.close();
                await d?.stop();
        });

        async function newPage(ctx) {
                const page = await (ctx ?? browser).newPage();
                page.on('dialog', async (dlg) => {
                        dialogs.push(dlg.message());
                        await dlg.dismiss();
                });
                return page;
        }

        async function signIn(page, token) {
                const res = await page.goto(`${origin}/console/`, { waitUntil: 'load' });
                assert.equal(res.status(), 200);
                await page.type('#token', token);
                await page.click('#signin-form button[type=submit]');
                await page.waitForSelector('#sessions-view:not([hidden])');
        }

        const shot = (page, name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });

        async function confirmClick(page, action) {
                await page.click(`#session-view [data-action=${action}]`);
                await page.waitForSelector('#confirm[open]');
                await page.click('#confirm-ok');
        }

        test('an operator-on-call walk through the console', { timeout: 300000 }, async () => {
                // served under a strict policy, with the right types
                const page = await newPage();
                const index = await page.goto(`${origin}/console/`);
                const h = index.headers();
                assert.match(h['content-security-policy'], /default-src 'self'/);
                assert.match(h['content-security-policy'], /frame-ancestors 'none'/);
                assert.doesNotMatch(h['content-security-policy'], /unsafe-inline|unsafe-eval/);
                assert.equal(h['x-content-type-options'], 'nosniff');
                assert.match(h['content-type'], /^text\/html/);
                const js = await page.evaluate(async () => (await fetch('app.js')).headers.get('content-type'));
                assert.match(js, /^text\/javascript/);

                // a session made before sign-in, with hostile output and a hostile file name
                const hostile = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2;alert(2)">';
                let r = await call(port, ca, alice, 'create_session', { session: 'hostile', labels: { team: 'red' } });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                r = await call(port, ca, alice, 'exec', { session: 'hostile', command: `printf '%s\\n' '${hostile}'` });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                r = await call(port, ca, alice, 'write_file', {
                        session: 'hostile',
                        path: '<img src=x onerror=alert(3)>.txt',
                        content: 'x',
                });
                assert.equal(r.status, 200, JSON.stringify(r.body));

                await signIn(page, alice);
                await page.waitForSelector('#sessions tr[data-session="hostile"]');
                assert.equal(await page.$eval('#token', (e) => e.value), '', 'the token is not left in the field');
                assert.equal(await page.evaluate(() => sessionStorage.length + localStorage.length + document.cookie.length), 0);
                assert.ok(!page.url().includes(alice.slice(4)), 'the token is not in the URL');
                await shot(page, '1-sessions');

                // a new session appears live, from the events stream
                r = await call(port, ca, alice, 'create_session', { session: 'live1', labels: { team: 'blue' } });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                await page.waitForSelector('#sessions tr[data-session="live1"][data-state="running"]');
                await page.waitForFunction(() =>
                        document.querySelector('#sessions tr[data-session="live1"]')?.textContent.includes('team=blue'),
                );
                // the label filter
                await page.type('#filter-label', 'team=blue');
                await page.waitForSelector('#sessions tr[data-session="hostile"][hidden]');
                assert.equal(await page.$eval('#sessions tr[data-session="live1"]', (e) => e.hidden), false);
                await shot(page, '2-live-session-filtered');

                // its page; an execution's output arrives with execution.finished
                await page.click('#sessions tr[data-session="live1"] a');
                await page.waitForSelector('#session-view:not([hidden])');
                r = await call(port, ca, alice, 'exec', { session: 'live1', command: 'echo hello-console > out.txt; cat out.txt' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                await page.waitForFunction(() =>
                        [...document.querySelectorAll('#executions pre.stdout')].some((p) => p.textContent === 'hello-console\n'),
                );
                await page.click('#session-refresh');
                await page.waitForSelector('#files tr[data-file="out.txt"]');
                await shot(page, '3-session-page');

                // a terminal into the session: a shell on a pseudo-terminal, typed into, resized with the page
                const screenText = () => page.$eval('#terminal-screen', (e) => e.textContent);
                const seen = (re) =>
                        page.waitForFunction((src) => new RegExp(src).test(document.getElementById('terminal-screen').textContent), {}, re.source);
                const size = () => page.$eval('#terminal-screen', (e) => `${e.dataset.rows} ${e.dataset.cols}`);
                // over a WebSocket: no API request while it runs, and the token in neither its URL nor its headers
                const termCdp = await page.createCDPSession();
                await termCdp.send('Network.enable');
                const sockets = [];
                termCdp.on('Network.webSocketCreated', (e) => sockets.push({ url: e.url }));
                termCdp.on('Network.webSocketWillSendHandshakeRequest', (e) => (sockets.at(-1).headers = e.request.headers));
                const apiCalls = [];
                const onRequest = (req) => req.url().includes('/v1/') && !req.url().endsWith('/v1/events') && apiCalls.push(req.url());
                page.on('request', onRequest);
                await page.click('#terminal-open');
                await page.waitForSelector('#terminal-screen[data-state="running"]');
                await page.focus('#terminal-screen');
                // what the shell computes, never what the terminal echoes of the typed line
                await page.keyboard.type('echo $((6*7))-from-the-terminal; tty\n');
                await seen(/\n42-from-the-terminal\n\/dev\/pts\/\d+\n/);
                const before = await size();
                assert.match(before, /^\d+ \d+$/);
                await page.keyboard.type('stty size\n');
                await seen(new RegExp(`\n${before}\n`));
                await page.setViewport({ width: 800, height: 800 }); // the screen narrows: resize_terminal
                await page.waitForFunction((b) => {
                        const e = document.getElementById('terminal-screen');
                        return `${e.dataset.rows} ${e.dataset.cols}` !== b;
                }, {}, before);
                const after = await size();
                await page.keyboard.type('stty size\n');
                await seen(new RegExp(`\n${after}\n`));
                assert.notEqual(after, before);
                // output that looks like HTML is text
                await page.keyboard.type("printf '<img src=x onerror=alert(9)>%s\\n' ok\n");
                await seen(/\n<img src=x onerror=alert\(9\)>ok\n/);
                assert.equal(await page.$$eval('#terminal-screen img', (l) => l.length), 0);
                await shot(page, '3b-terminal');
                page.off('request', onRequest);
                await termCdp.detach();
                assert.deepEqual(apiCalls, [], 'the terminal made no API request of its own');
                assert.equal(sockets.length, 1, JSON.stringify(sockets));
                assert.equal(sockets[0].url, `wss://127.0.0.1:${port}/v1/terminal`);
                assert.equal(sockets[0].headers['Sec-WebSocket-Protocol'], 'sandboxd.terminal.v1');
                assert.ok(!JSON.stringify(sockets[0]).includes(alice), 'the token is in no URL or header');
                await page.click('#terminal-close');
                await page.waitForSelector('#terminal-screen[data-state="closed"]');
                assert.match(await screenText(), /ok/, 'the screen keeps what it showed');
                await page.setViewport({ width: 1280, height: 800 });
                // the shell was cancelled
                for (const end = Date.now() + 60000; ; ) {
                        r = await call(port, ca, alice, 'list_executions', { session: 'live1', states: ['running', 'pending'] });
                        if (r.body.executions?.length === 0) break;
                        assert.ok(Date.now() < end, `the terminal's shell still runs: ${JSON.stringify(r.body)}`);
                        await new Promise((res) => setTimeout(res, 100));
                }

                // pause and resume, each confirmed
                await confirmClick(page, 'pause_session');
                await page.waitForSelector('#session-facts[data-state="paused"]');
                await shot(page, '4-paused');
                await confirmClick(page, 'resume_session');
                await page.waitForSelector('#session-facts[data-state="running"]');

                // a download
                const dlDir = fs.mkdtempSync(path.join(d.dir, 'dl-'));
                const cdp = await page.createCDPSession();
                await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: dlDir });
                await page.click('#files tr[data-file="out.txt"] button');
                await page.waitForFunction(() => document.getElementById('action-status').textContent.startsWith('Downloaded'));
                const file = path.join(dlDir, 'out.txt');
                // the browser writes the file after the click: wait for it (10 s at most)
                for (const end = Date.now() + 10000; !fs.existsSync(file) && Date.now() < end; )
                        await new Promise((res) => setTimeout(res, 50));
                assert.equal(fs.readFileSync(file, 'utf8'), 'hello-console\n');

                // hostile output and file name: text, and nothing ran
                await page.evaluate(() => (location.hash = '#/session/alice/hostile'));
                await page.waitForFunction(
                        (t) => [...document.querySelectorAll('#executions pre.stdout')].some((p) => p.textContent === `${t}\n`),
                        {},
                        hostile,
                );
                await page.waitForSelector('#files tr[data-file="<img src=x onerror=alert(3)>.txt"]');
                assert.equal(await page.$$eval('#executions img, #files img, #sessions img', (l) => l.length), 0);
                assert.equal(await page.evaluate(() => window.__pwned), undefined);
                await shot(page, '5-hostile-as-text');

                // another tenant editing the URL sees nothing of alice's session
                const ctx = await browser.createBrowserContext();
                const bobPage = await newPage(ctx);
                await signIn(bobPage, bob);
                assert.equal(await bobPage.$('#sessions tr[data-session="live1"]'), null);
                await bobPage.evaluate(() => (location.hash = '#/session/alice/live1'));
                await bobPage.waitForSelector('#session-missing:not([hidden])');
                assert.match(await bobPage.$eval('#session-missing', (e) => e.textContent), /No session named live1/);
                assert.equal(await bobPage.$$eval('#executions pre', (l) => l.filter((p) => !p.closest('[hidden]')).length), 0);
                await shot(bobPage, '6-other-tenant');
                r = await call(port, ca, bob, 'list_sessions', {});
                assert.deepEqual(r.body.sessions.map((x) => x.session), [], 'bob has no session, not even one made by the URL');
                // nor the operator pages: no links, the address shows the sessions, the methods are refused
                assert.equal(await bobPage.$eval('#ops-nav', (e) => e.hidden), true);
                await bobPage.evaluate(() => (location.hash = '#/ops/users'));
                await bobPage.waitForSelector('#sessions-view:not([hidden])');
                assert.equal(await bobPage.$eval('#ops-view', (e) => e.hidden), true);
                assert.equal(await bobPage.$eval('#ops-body', (e) => e.childElementCount), 0);
                for (const m of ['list_users', 'pool_status', 'list_nodes', 'daemon_health']) {
                        r = await call(port, ca, bob, m, {});
                        assert.equal(r.status, 403, `${m}: ${JSON.stringify(r.body)}`);
                        assert.equal(r.body.error.code, 'forbidden');
                }
                await ctx.close();

                // an operator token: every user's sessions, live, and nothing else
                const opsCtx = await browser.createBrowserContext();
                const opsPage = await newPage(opsCtx);
                await signIn(opsPage, ops);
                await opsPage.waitForSelector('#sessions tr[data-user="alice"][data-session="live1"]');
                r = await call(port, ca, bob, 'create_session', { session: 'bobs' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                await opsPage.waitForSelector('#sessions tr[data-user="bob"][data-session="bobs"][data-state="running"]');
                await shot(opsPage, '7-operator');
                await opsPage.evaluate(() => (location.hash = '#/session/alice/live1'));
                await opsPage.waitForFunction(() => /operator token/.test(document.getElementById('executions').textContent));
                assert.equal(await opsPage.$$eval('#executions pre', (l) => l.length), 0, 'no output for an operator');
                r = await call(port, ca, ops, 'exec', { session: 'live1', command: 'true' });
                assert.equal(r.status, 403, JSON.stringify(r.body));
                r = await call(port, ca, ops, 'list_sessions', {});
                assert.deepEqual(
                        r.body.sessions.map((x) => `${x.user}/${x.session}`).sort(),
                        ['alice/hostile', 'alice/live1', 'bob/bobs'],
                );
                // its pages (issue 39): users with their sessions, the pool, the nodes, the health
                await opsPage.click('#ops-nav a[href="#/ops/users"]');
                await opsPage.waitForSelector('#ops-body[data-page="users"] tr[data-user="bob"][data-sessions="1"]');
                await opsPage.waitForSelector('#ops-body tr[data-user="alice"][data-sessions="2"]');
                await shot(opsPage, '7a-operator-users');
                await opsPage.click('#ops-nav a[href="#/ops/pool"]');
                await opsPage.waitForSelector('#ops-body[data-page="pool"] #pool-ready');
                await shot(opsPage, '7b-operator-pool');
                await opsPage.click('#ops-nav a[href="#/ops/nodes"]');
                await opsPage.waitForSelector('#ops-body[data-page="nodes"] #nodes-none');
                await opsPage.click('#ops-nav a[href="#/ops/health"]');
                await opsPage.waitForSelector('#ops-body[data-page="health"] #health-engine');
                assert.match(await opsPage.$eval('#health-engine', (e) => e.textContent), /^reachable/);
                assert.equal(await opsPage.$eval('#health-status', (e) => e.textContent), 'ok');
                assert.match(await opsPage.$eval('#health-sessions', (e) => e.textContent), /^3 \(/);
                await shot(opsPage, '7c-operator-health');
                await opsCtx.close();

                // CSRF: a page of another origin can neither send the token nor do anything without it
                const evil = await newPage();
                await evil.goto(`http://127.0.0.1:${other.address().port}/`);
                const cross = await evil.evaluate(
                        async (o, t) => {
                                const out = {};
                                try {
                                        await fetch(`${o}/v1/destroy_session`, {
                                                method: 'POST',
                                                headers: { Authorization: `Bearer ${t}`, 'Content-Type': 'application/json' },
                                                body: '{"session":"live1"}',
                                        });
                                        out.withToken = 'sent';
                                } catch (e) {
                                        out.withToken = e.name;
                                }
                                const res = await fetch(`${o}/v1/destroy_session`, {
                                        method: 'POST',
                                        mode: 'no-cors',
                                        credentials: 'include',
                                        headers: { 'Content-Type': 'text/plain' },
                                        body: '{"session":"live1"}',
                                });
                                out.simple = res.type;
                                return out;
                        },
                        origin,
                        alice,
                );
                assert.equal(cross.withToken, 'TypeError', 'the preflight is refused: the request is never sent');
                assert.equal(cross.simple, 'opaque');
                r = await call(port, ca, alice, 'list_sessions', {});
                assert.ok(
                        r.body.sessions.some((s) => s.session === 'live1' && s.state === 'running'),
                        'the cross-origin destroy did nothing',
                );
                // the terminal's WebSocket refuses a page of another origin: it never opens
                const crossWs = await evil.evaluate(
                        (u) =>
                                new Promise((res) => {
                                        const ws = new WebSocket(u, 'sandboxd.terminal.v1');
                                        ws.onopen = () => res('open');
                                        ws.onclose = (ev) => res(`closed ${ev.code}`);
                                }),
                        `wss://127.0.0.1:${port}/v1/terminal`,
                );
                assert.equal(crossWs, 'closed 1006');
                // ... with a 403 before the upgrade (seen from Node, which reads the status)
                assert.equal(await upgradeStatus(`http://127.0.0.1:${other.address().port}`), 403);
                assert.equal(await upgradeStatus(origin), 101);
                assert.equal(await upgradeStatus(null), 101); // no Origin: not a browser, no forgery
                await evil.close();

                // a revoked token is signed out by the terminal's WebSocket (close 4401)
                const r2 = await socketRequest(d.adminSocket, { cmd: 'token.create', user: 'alice', role: 'agent' });
                assert.ok(r2.ok, JSON.stringify(r2));
                const termPage = await newPage();
                await signIn(termPage, r2.result.token);
                await termPage.evaluate(() => (location.hash = '#/session/alice/live1'));
                await termPage.waitForSelector('#session-view:not([hidden]) #terminal-open:not([hidden])');
                await termPage.waitForSelector('#session-facts[data-state="running"]');
                const revokedCdp = await termPage.createCDPSession();
                await revokedCdp.send('Network.enable');
                const frames = [];
                revokedCdp.on('Network.webSocketFrameReceived', (e) => frames.push(e.response.payloadData));
                r = await socketRequest(d.adminSocket, { cmd: 'token.revoke', id: r2.result.id });
                assert.ok(r.ok, JSON.stringify(r));
                await termPage.click('#terminal-open');
                await termPage.waitForSelector('#signin-view:not([hidden])');
                assert.match(await termPage.$eval('#signin-error', (e) => e.textContent), /revoked/);
                assert.ok(frames.some((f) => /"code":"unauthorized"/.test(f)), JSON.stringify(frames));
                await shot(termPage, '8a-terminal-signed-out');
                await termPage.close();

                // a revoked token is signed out at its next request
                r = await socketRequest(d.adminSocket, { cmd: 'token.revoke', id: aliceId });
                assert.ok(r.ok, JSON.stringify(r));
                await page.evaluate(() => (location.hash = '#/session/alice/live1')); // its page asks the API
                await page.waitForSelector('#signin-view:not([hidden])');
                assert.match(await page.$eval('#signin-error', (e) => e.textContent), /revoked/);
                await shot(page, '8-signed-out');

                assert.deepEqual(dialogs, [], 'no script ran a dialog');
        });

        /** The status of a WebSocket upgrade to /v1/terminal sent with origin (null: none). */
        function upgradeStatus(o) {
                return new Promise((resolve, reject) => {
                        const headers = {
                                Connection: 'Upgrade',
                                Upgrade: 'websocket',
                                'Sec-WebSocket-Version': '13',
                                'Sec-WebSocket-Key': 'dGhlIHNhbXBsZSBub25jZQ==',
                                'Sec-WebSocket-Protocol': 'sandboxd.terminal.v1',
                        };
                        if (o) headers.Origin = o;
                        const req = https.request({ hostname: '127.0.0.1', port, path: '/v1/terminal', headers, ca });
                        req.on('upgrade', (res, sock) => {
                                assert.equal(res.headers['sec-websocket-accept'], 's3pPLMBiTxaQ9kYGzzhZRbK+xOo=');
                                sock.destroy();
                                resolve(res.statusCode);
                        });
                        req.on('response', (res) => {
                                res.resume();
                                resolve(res.statusCode);
                        });
                        req.on('error', reject);
                        req.end();
                });
        }

        /** Poll an API call from Node until ok(body) (60 s at most). */
        async function until(token, method, params, ok) {
                for (const end = Date.now() + 60000; ; ) {
                        const r = await call(port, ca, token, method, params);
                        if (r.status === 200 && ok(r.body)) return r.body;
                        assert.ok(Date.now() < end, `${method}: ${JSON.stringify(r.body).slice(0, 500)}`);
                        await new Promise((res) => setTimeout(res, 200));
                }
        }

        test('a session page: cells, services, upload, snapshots; Top for an operator', { timeout: 300000 }, async () => {
                const carol = await d.createToken('carol');
                const dan = await d.createToken('dan');
                // a chart in a cell and a service listening, made before the page opens
                let r = await call(port, ca, carol, 'create_session', { session: 'sec1' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                const plot = 'import matplotlib.pyplot as plt\nplt.figure(figsize=(4, 3), dpi=100)\nplt.plot([1, 3, 2])';
                r = await call(port, ca, carol, 'run_cell', { session: 'sec1', code: plot });
                assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 500));
                const png = r.body.outputs.find((o) => o.data?.['image/png'])?.data['image/png'];
                assert.ok(png, 'the cell drew a PNG');
                const pngWidth = Buffer.from(png, 'base64').readUInt32BE(16); // IHDR's width
                r = await call(port, ca, carol, 'start_service', { session: 'sec1', name: 'web', command: 'python3 -m http.server 8000' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                await until(carol, 'list_services', { session: 'sec1' }, (b) => b.services.some((s) => s.ports?.some((p) => p.container_port === 8000)));

                const page = await newPage();
                const requests = [];
                page.on('request', (q) => requests.push(new URL(q.url()).pathname));
                await signIn(page, carol);
                await page.waitForFunction(() => document.getElementById('whoami').textContent === 'carol (agent)');
                assert.ok(requests.includes('/v1/whoami'));
                assert.ok(!requests.includes('/v1/daemon_health'), 'a tenant sign-in asks no operator method');
                assert.equal(await page.$eval('#ops-nav', (e) => getComputedStyle(e).display), 'none', 'no operator links shown');
                await page.waitForSelector('#sessions tr[data-session="sec1"]');
                await page.evaluate(() => (location.hash = '#/session/carol/sec1'));

                // the chart is an image decoded from the cell's base64 PNG; the service's port is shown
                await page.waitForSelector('#cells img.cell-output');
                await page.waitForFunction(() => document.querySelector('#cells img.cell-output').complete);
                const img = await page.$eval('#cells img.cell-output', (e) => ({ w: e.naturalWidth, src: e.src.slice(0, 22) }));
                assert.equal(img.src, 'data:image/png;base64,');
                assert.ok(img.w > 0 && img.w === pngWidth, `naturalWidth ${img.w}, the PNG's ${pngWidth}`);
                await page.waitForFunction(() => /^8000 → \d+$/.test(document.querySelector('#services tr[data-service="web"] td.ports')?.textContent));
                assert.match(await page.$eval('#egress-policy', (e) => e.textContent), /^Mode /);
                await page.waitForSelector('#timeline li[data-event="session.created"]');

                // an upload, read back; one past the cap refused in the page with a clear message
                const up = path.join(fs.mkdtempSync(path.join(d.dir, 'up-')), 'up.bin');
                const bytes = Buffer.from(Array.from({ length: 70000 }, (_, i) => (i * 7) % 256));
                fs.writeFileSync(up, bytes);
                await (await page.$('#upload-file')).uploadFile(up);
                await page.click('#upload');
                await page.waitForFunction(() => /^(Uploaded|Cannot upload)/.test(document.getElementById('action-status').textContent));
                assert.match(await page.$eval('#action-status', (e) => e.textContent), /^Uploaded (\/workspace\/)?up\.bin \(70000 bytes\)\.$/);
                await page.waitForSelector('#files tr[data-file="up.bin"]');
                r = await call(port, ca, carol, 'read_file', { session: 'sec1', path: 'up.bin', encoding: 'base64' });
                assert.ok(Buffer.from(r.body.content, 'base64').equals(bytes), 'the upload reads back byte for byte');
                const big = path.join(path.dirname(up), 'big.bin');
                fs.writeFileSync(big, Buffer.alloc(4 * 1048576 + 1));
                await (await page.$('#upload-file')).uploadFile(big);
                await page.click('#upload');
                await page.waitForFunction(() => /^Cannot upload big\.bin: 4194305 bytes is over the 4 MiB/.test(document.getElementById('action-status').textContent));
                r = await call(port, ca, carol, 'list_files', { session: 'sec1' });
                assert.ok(!r.body.entries.some((f) => f.name === 'big.bin'));

                // a snapshot taken with the button, listed, then deleted, each confirmed
                await confirmClick(page, 'snapshot_session');
                await page.waitForSelector('#snapshots tr[data-snapshot]');
                const snap = await page.$eval('#snapshots tr[data-snapshot]', (e) => e.dataset.snapshot);
                await shot(page, '9-session-sections');
                await page.click(`#snapshots tr[data-snapshot="${snap}"] [data-snapshot-action=delete]`);
                await page.waitForSelector('#confirm[open]');
                await page.click('#confirm-ok');
                await page.waitForFunction((id) => !document.querySelector(`#snapshots tr[data-snapshot="${id}"]`), {}, snap);
                r = await call(port, ca, carol, 'list_snapshots', {});
                assert.deepEqual(r.body.snapshots, []);

                // another tenant editing the URL sees none of it, and is refused Top
                const ctx = await browser.createBrowserContext();
                const danPage = await newPage(ctx);
                const danBodies = [];
                danPage.on('request', (q) => danBodies.push(`${new URL(q.url()).pathname} ${q.postData() ?? ''}`));
                await signIn(danPage, dan);
                await danPage.evaluate(() => (location.hash = '#/session/carol/sec1'));
                await danPage.waitForSelector('#session-missing:not([hidden])');
                assert.equal(await danPage.$$eval('#snapshots tr[data-snapshot], #egress-blocked li, #timeline li, #cells *, #services tr[data-service]', (l) => l.length), 0);
                assert.deepEqual(danBodies.filter((b) => b.includes('sec1')), [], 'nothing of carol\'s session is asked for');
                await danPage.evaluate(() => (location.hash = '#/ops/top'));
                await danPage.waitForSelector('#sessions-view:not([hidden])');
                assert.equal(await danPage.$eval('#ops-body', (e) => e.childElementCount), 0);
                assert.equal((await call(port, ca, dan, 'list_users', {})).status, 403);
                r = await call(port, ca, dan, 'list_snapshots', {});
                assert.deepEqual(r.body.snapshots, []);
                await shot(danPage, '10-other-tenant-sections');
                await ctx.close();

                // Top: an operator's users drawn as SVG lines, sampled while it is open
                const opsCtx = await browser.createBrowserContext();
                const opsPage = await newPage(opsCtx);
                await signIn(opsPage, ops);
                await opsPage.waitForFunction(() => document.getElementById('whoami').textContent === 'ops (operator)');
                await opsPage.click('#ops-nav a[href="#/ops/top"]');
                await opsPage.waitForSelector('#ops-body[data-page="top"] #top-users tr[data-user="carol"] svg.spark');
                // a second sample gives the CPU chart its first point (a rate needs two)
                await opsPage.waitForFunction(() => {
                        const lines = document.querySelectorAll('#top-users tr[data-user="carol"] svg.spark polyline');
                        return lines.length === 2 && [...lines].every((l) => l.getAttribute('points').split(' ').length >= 1 && l.getAttribute('points') !== '');
                });
                assert.match(await opsPage.$eval('#top-users tr[data-user="carol"]', (e) => e.textContent), /MiB/);
                await shot(opsPage, '11-operator-top');
                await opsCtx.close();
                assert.deepEqual(dialogs, [], 'no script ran a dialog');
        });

        test('audit rows, a blocked request, fork, restore and mark private; Top per session', { timeout: 300000 }, async () => {
                // a connector token: mark_private is a connector's act
                const erin = await d.createToken('erin', 'connector');
                const fay = await d.createToken('fay');
                let r = await call(port, ca, erin, 'create_session', { session: 'aud1' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                r = await call(port, ca, erin, 'write_file', { session: 'aud1', path: 'v.txt', content: 'before' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                // a request the egress proxy blocks (default deny): nothing leaves the machine
                const connect = "python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', 3128)); " +
                        "s.sendall(b'CONNECT blocked.invalid:443 HTTP/1.1\\r\\n\\r\\n'); print(s.recv(12).decode())\"";
                r = await call(port, ca, erin, 'exec', { session: 'aud1', command: connect });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                assert.match(r.body.stdout, /^HTTP\/1\.[01] 403/, JSON.stringify(r.body));

                const page = await newPage();
                await signIn(page, erin);
                await page.waitForSelector('#sessions tr[data-session="aud1"]');
                await page.evaluate(() => (location.hash = '#/session/erin/aud1'));
                // the blocked request on the session's page, and its audit rows (the exec among them)
                await page.waitForSelector('#egress-blocked li.blocked[data-host="blocked.invalid"]');
                await page.waitForSelector('#audit tr[data-audit-action="exec"]');
                const detail = await page.$$eval('#audit tr[data-audit-action="exec"] td.detail', (l) => l.map((e) => e.textContent).join('\n'));
                assert.match(detail, /"preview":"python3 -c/, 'the exec row names its command');

                // a snapshot, then the file changed, then Restore from the snapshot's row: the file is back
                await confirmClick(page, 'snapshot_session');
                await page.waitForSelector('#snapshots tr[data-snapshot]');
                const snap = await page.$eval('#snapshots tr[data-snapshot]', (e) => e.dataset.snapshot);
                r = await call(port, ca, erin, 'write_file', { session: 'aud1', path: 'v.txt', content: 'after' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                // Fork from the live session under the name typed in Fork as
                await page.type('#fork-name', 'aud1-copy');
                await confirmClick(page, 'fork_session');
                await page.waitForFunction(() => document.getElementById('action-status').textContent === 'Forked as aud1-copy.');
                await page.waitForSelector('#sessions tr[data-session="aud1-copy"]');
                r = await call(port, ca, erin, 'read_file', { session: 'aud1-copy', path: 'v.txt' });
                assert.equal(r.body.content, 'after', 'the fork has the live workspace');
                await page.click(`#snapshots tr[data-snapshot="${snap}"] [data-snapshot-action=restore]`);
                await page.waitForSelector('#confirm[open]');
                assert.match(await page.$eval('#confirm-text', (e) => e.textContent), /^Restore session aud1 from snapshot /);
                await page.click('#confirm-ok');
                await page.waitForFunction(() => /^Restored from /.test(document.getElementById('action-status').textContent));
                r = await call(port, ca, erin, 'read_file', { session: 'aud1', path: 'v.txt' });
                assert.equal(r.body.content, 'before', 'the restore put the snapshot back');

                // Mark private with a dataset name: confirmed, and the session has no way out
                await page.type('#private-dataset', 'payroll');
                await page.click('#session-view [data-action=mark_private]');
                await page.waitForSelector('#confirm[open]');
                assert.match(await page.$eval('#confirm-text', (e) => e.textContent), /dataset payroll.*for good/);
                await page.click('#confirm-ok');
                await page.waitForFunction(() => document.getElementById('action-status').textContent === 'Mark private: done.');
                r = await call(port, ca, erin, 'session_info', { session: 'aud1' });
                assert.equal(r.body.private, true, JSON.stringify(r.body).slice(0, 300));
                // session_info started it again: its page reads the policy once the table says running
                await page.waitForSelector('#sessions tr[data-session="aud1"][data-state="running"]');
                await page.click('#session-refresh');
                await page.waitForSelector('#audit tr[data-audit-action="privacy.mark"]');
                const actions = await page.$$eval('#audit tr[data-audit]', (l) => l.map((e) => e.dataset.auditAction));
                for (const a of ['exec', 'snapshot.create', 'snapshot.restore', 'privacy.mark'])
                        assert.ok(actions.includes(a), `an audit row ${a}: ${actions}`);
                await page.waitForFunction(() => /private: no way out/.test(document.getElementById('egress-policy').textContent));
                await shot(page, '12-audit-fork-restore-private');

                r = await call(port, ca, erin, 'session_audit', { session: 'aud1-copy' });
                assert.ok(r.body.audit.some((a) => a.action === 'session.fork'), JSON.stringify(r.body).slice(0, 500));
                // session_audit pages back from the newest, each row once, oldest first in a page
                const all = (await call(port, ca, erin, 'session_audit', { session: 'aud1', limit: 500 })).body;
                assert.equal(all.next_before, null);
                const ids = [];
                for (let before = 0; ; ) {
                        r = await call(port, ca, erin, 'session_audit', before ? { session: 'aud1', limit: 2, before } : { session: 'aud1', limit: 2 });
                        assert.equal(r.status, 200, JSON.stringify(r.body));
                        ids.unshift(...r.body.audit.map((a) => a.id));
                        if (r.body.next_before === null) break;
                        before = r.body.next_before;
                }
                assert.deepEqual(ids, all.audit.map((a) => a.id));
                assert.ok(ids.length >= 5, `${ids.length} audit rows`);
                assert.equal((await call(port, ca, erin, 'session_audit', { session: 'aud1', limit: 501 })).status, 400);
                // another tenant asking for the same name reads its own (no) rows; an operator is refused
                r = await call(port, ca, fay, 'session_audit', { session: 'aud1' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                assert.deepEqual(r.body.audit, []);
                r = await call(port, ca, fay, 'list_sessions', {});
                assert.ok(!r.body.sessions.some((x) => x.session === 'aud1'), 'asking made no session');
                assert.equal((await call(port, ca, ops, 'session_audit', { session: 'aud1' })).status, 403);

                // Top per session: the operator's chart rows for erin's live fork
                const opsCtx = await browser.createBrowserContext();
                const opsPage = await newPage(opsCtx);
                await signIn(opsPage, ops);
                await opsPage.waitForFunction(() => document.getElementById('whoami').textContent === 'ops (operator)');
                await opsPage.click('#ops-nav a[href="#/ops/top"]');
                const row = '#top-sessions tr[data-user="erin"][data-session="aud1-copy"]';
                await opsPage.waitForFunction((sel) => {
                        const lines = document.querySelectorAll(`${sel} svg.spark polyline`);
                        return lines.length === 2 && [...lines].every((l) => l.getAttribute('points') !== '');
                }, {}, row);
                assert.match(await opsPage.$eval(row, (e) => e.textContent), /CPU.*MiB/s);
                await shot(opsPage, '13-operator-top-sessions');
                await opsCtx.close();
                assert.deepEqual(dialogs, [], 'no script ran a dialog');
        });

        test('1,000 sessions: first paint, 200% zoom, the keyboard', { timeout: 120000 }, async () => {
                const gus = await d.createToken('gus');
                let r = await call(port, ca, gus, 'create_session', { session: 'kb1', labels: { kind: 'real' } });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                const real = (await call(port, ca, gus, 'list_sessions', {})).body.sessions[0];
                // 999 synthetic rows around the real one: list_sessions answered in the browser, no containers made
                const now = Date.now();
                const fake = Array.from({ length: 999 }, (_, i) => ({
                        ...real,
                        session: `s-${(0x100000000000 + i * 7919).toString(16)}`,
                        labels: { team: `team-${i % 17}`, run: `nightly-${i}` },
                        state: ['running', 'paused', 'stopped'][i % 3],
                        executions: i % 50,
                        created_at: now - i * 60000,
                }));
                const list = JSON.stringify({ sessions: [real, ...fake] });
                const page = await newPage();
                await page.setRequestInterception(true);
                page.on('request', (q) => {
                        if (new URL(q.url()).pathname === '/v1/list_sessions' && !q.postData()?.includes('"session"'))
                                q.respond({ status: 200, contentType: 'application/json', body: list });
                        else q.continue();
                });
                const figures = [];
                for (let run = 0; run < 3; run++) {
                        await page.goto(`${origin}/console/`, { waitUntil: 'load' });
                        await page.type('#token', gus);
                        // from Sign in to the first rows painted (the frame after they are placed) and to all 1,000
                        await page.evaluate(() => {
                                window.__paint = {};
                                document.getElementById('signin-form').addEventListener('submit', () => {
                                        const t0 = performance.now();
                                        const tick = () => {
                                                const n = document.querySelectorAll('#sessions tbody tr').length;
                                                if (n > 0 && window.__paint.first === undefined) window.__paint.first = performance.now() - t0;
                                                if (n >= 1000) window.__paint.all = performance.now() - t0;
                                                else requestAnimationFrame(tick);
                                        };
                                        requestAnimationFrame(tick);
                                }, { capture: true });
                        });
                        await page.click('#signin-form button[type=submit]');
                        await page.waitForFunction(() => window.__paint.all !== undefined, { timeout: 60000 });
                        figures.push(await page.evaluate(() => window.__paint));
                }
                assert.equal(await page.$$eval('#sessions tbody tr', (l) => l.length), 1000);
                const fcp = await page.evaluate(() => performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null);
                console.log(`console, 1,000 sessions (synthetic list_sessions): first rows ${figures.map((f) => f.first.toFixed(0)).join(', ')} ms, all ${figures.map((f) => f.all.toFixed(0)).join(', ')} ms after Sign in; first contentful paint ${fcp?.toFixed(0)} ms`);

                // the state filter over 1,000 rows: every third synthetic one is paused
                await page.select('#filter-state', 'paused');
                assert.equal(await page.$$eval('#sessions tbody tr:not([hidden])', (l) => l.length), 333);
                assert.match(await page.$eval('#sessions-count', (e) => e.textContent), /^333 of 1000 sessions$/);
                await page.select('#filter-state', '');
                // 200% zoom: a 1280 x 800 window at twice the size is 640 x 400 CSS pixels at scale 2
                await page.setViewport({ width: 640, height: 400, deviceScaleFactor: 2 });
                const fits = (sel) =>
                        page.$eval(sel, (t) => ({
                                page: document.documentElement.scrollWidth <= window.innerWidth,
                                right: Math.ceil(t.getBoundingClientRect().right) <= window.innerWidth,
                                own: t.scrollWidth <= t.clientWidth,
                        }));
                await page.screenshot({ path: path.join(SHOTS, '14-zoom-200-sessions.png') });
                assert.deepEqual(await fits('#sessions'), { page: true, right: true, own: true }, 'the sessions table fits at 200%');

                // the keyboard: the filter, Tab to the one row shown, Enter opens it
                await page.focus('#filter-label');
                await page.keyboard.type('kind=real');
                await page.waitForFunction(() => document.querySelectorAll('#sessions tbody tr:not([hidden])').length === 1);
                await page.keyboard.press('Tab'); // the state filter
                await page.keyboard.press('Tab');
                assert.equal(await page.evaluate(() => document.activeElement.closest('tr')?.dataset.session), 'kb1');
                await page.keyboard.press('Enter');
                await page.waitForSelector('#session-view:not([hidden]) #session-facts[data-state="running"]');
                await page.waitForSelector('#audit tbody tr');
                await page.screenshot({ path: path.join(SHOTS, '15-zoom-200-session.png'), fullPage: true });
                assert.deepEqual(await fits('#session-view'), { page: true, right: true, own: true }, 'the session page fits at 200%');
                // Tab reaches every action of the session page
                const wanted = await page.$$eval('#session-view button:not([hidden]), #session-view input, #session-view a[href]', (l) =>
                        l.filter((e) => e.offsetParent !== null).map((e) => e.id || e.dataset.action || e.dataset.snapshotAction || e.getAttribute('href')));
                await page.focus('#session-view a[href="#/"]');
                const reached = new Set();
                for (let i = 0; i < 60 && wanted.some((w) => !reached.has(w)); i++) {
                        reached.add(await page.evaluate(() => {
                                const e = document.activeElement;
                                return e.id || e.dataset.action || e.dataset.snapshotAction || e.getAttribute('href');
                        }));
                        await page.keyboard.press('Tab');
                }
                assert.deepEqual(wanted.filter((w) => !reached.has(w)), [], 'every control is reached with Tab');
                for (const a of ['pause_session', 'resume_session', 'snapshot_session', 'fork_session', 'mark_private', 'destroy_session'])
                        assert.ok(wanted.includes(a), `${a} is on the page`);
                // Enter on Pause asks; Enter on Confirm (focused) pauses
                await page.focus('#session-view [data-action=resume_session]');
                await page.keyboard.down('Shift');
                await page.keyboard.press('Tab');
                await page.keyboard.up('Shift');
                assert.equal(await page.evaluate(() => document.activeElement.dataset.action), 'pause_session');
                await page.keyboard.press('Enter');
                await page.waitForSelector('#confirm[open]');
                assert.equal(await page.evaluate(() => document.activeElement.id), 'confirm-ok');
                await page.keyboard.press('Enter');
                await page.waitForFunction(() => document.getElementById('action-status').textContent === 'Pause: done.');
                r = await call(port, ca, gus, 'list_sessions', {});
                assert.equal(r.body.sessions[0].state, 'paused');
                // Destroy the same way: the page says so, and the row leaves the table
                await page.focus('#session-view [data-action=mark_private]');
                await page.keyboard.press('Tab');
                assert.equal(await page.evaluate(() => document.activeElement.dataset.action), 'destroy_session');
                await page.keyboard.press('Enter');
                await page.waitForSelector('#confirm[open]');
                assert.match(await page.$eval('#confirm-text', (e) => e.textContent), /^Destroy session kb1\?$/);
                await page.keyboard.press('Enter');
                await page.waitForSelector('#session-missing:not([hidden])');
                assert.match(await page.$eval('#session-missing', (e) => e.textContent), /kb1 of user gus was destroyed/);
                assert.equal(await page.$('#sessions tr[data-session="kb1"]'), null);
                r = await call(port, ca, gus, 'list_sessions', {});
                assert.deepEqual(r.body.sessions, []);
                await page.close();
                assert.deepEqual(dialogs, [], 'no script ran a dialog');
        });
});
