// The browser console (console/, served at /console/ by the HTTPS front) in
// a real browser: Debian's chromium driven by puppeteer-core, against a real
// sandboxd over HTTPS. Sign in, a session appearing live, its page with an
// execution's output, pause and resume, a download, another tenant editing
// the URL, an operator token seeing every user's sessions and its pages
// (users and quotas, pool, nodes, health) that a tenant neither sees nor reads,
// hostile output and file names shown as text with no script run, a
// cross-origin POST refused, a revoked token signed out. Screenshots of
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
                await evil.close();

                // a revoked token is signed out at its next request
                r = await socketRequest(d.adminSocket, { cmd: 'token.revoke', id: aliceId });
                assert.ok(r.ok, JSON.stringify(r));
                await page.evaluate(() => (location.hash = '#/session/alice/live1')); // its page asks the API
                await page.waitForSelector('#signin-view:not([hidden])');
                assert.match(await page.$eval('#signin-error', (e) => e.textContent), /revoked/);
                await shot(page, '8-signed-out');

                assert.deepEqual(dialogs, [], 'no script ran a dialog');
        });
});
