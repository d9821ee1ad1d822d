// GET /v1/events against a real sandboxd over HTTPS (a CA and server
// certificate the test makes with openssl): a client that reconnects with
// Last-Event-ID gets exactly the events it missed, in order; a user never
// sees another user's events.
import assert from 'node:assert/strict';
import https from 'node:https';
import { after, before, describe, test } from 'node:test';

import { Daemon } from './harness.mjs';

/** An SSE stream of GET /v1/events: parsed events in .events, waitFor(pred). */
function openStream(base, ca, token, lastEventId) {
        const headers = { Authorization: `Bearer ${token}`, Accept: 'text/event-stream' };
        if (lastEventId !== undefined) headers['Last-Event-ID'] = String(lastEventId);
        const st = { events: [], waiters: [], status: 0, req: null };
        const wake = () => {
                st.waiters = st.waiters.filter((w) => {
                        const hit = st.events.find(w.pred);
                        if (hit) w.resolve(hit);
                        return !hit;
                });
        };
        st.ready = new Promise((resolve, reject) => {
                st.req = https.request(
                        { hostname: base.hostname, port: base.port, path: '/v1/events', method: 'GET', headers, ca },
                        (res) => {
                                st.status = res.statusCode;
                                resolve();
                                let buf = '';
                                res.on('data', (d) => {
                                        buf += d.toString('utf8');
                                        let sep;
                                        while ((sep = buf.indexOf('\n\n')) >= 0) {
                                                const block = buf.slice(0, sep);
                                                buf = buf.slice(sep + 2);
                                                const ev = {};
                                                for (const line of block.split('\n')) {
                                                        if (line.startsWith('id: ')) ev.id = Number(line.slice(4));
                                                        else if (line.startsWith('event: ')) ev.type = line.slice(7);
                                                        else if (line.startsWith('data: ')) ev.data = JSON.parse(line.slice(6));
                                                }
                                                if (ev.type) st.events.push(ev);
                                        }
                                        wake();
                                });
                                res.on('error', () => {});
                        },
                );
                st.req.on('error', reject);
                st.req.end();
        });
        st.waitFor = (pred, ms = 60000) =>
                new Promise((resolve, reject) => {
                        const hit = st.events.find(pred);
                        if (hit) return resolve(hit);
                        const w = { pred, resolve };
                        st.waiters.push(w);
                        setTimeout(() => reject(new Error(`no such event in ${ms} ms: ${JSON.stringify(st.events)}`)), ms).unref();
                });
        st.close = () => st.req.destroy();
        return st;
}

/** POST /v1/<method> over HTTPS: the parsed body. */
function call(base, ca, token, method, params) {
        return new Promise((resolve, reject) => {
                const body = JSON.stringify(params);
                const req = https.request(
                        {
                                hostname: base.hostname,
                                port: base.port,
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
                req.end(body);
        });
}

describe('GET /v1/events over HTTPS', () => {
        let d, base, ca, port, alice, bob;

        before(async () => {
                d = new Daemon();
                ({ ca, port } = await d.startHttps());
                base = new URL(`https://127.0.0.1:${port}`);
                alice = await d.createToken('alice');
                bob = await d.createToken('bob');
        });

        after(async () => {
                await d?.stop();
        });

        test('Last-Event-ID resumes with exactly the missed events; users are kept apart', { timeout: 240000 }, async () => {
                const a1 = openStream(base, ca, alice);
                const b = openStream(base, ca, bob);
                await a1.ready;
                await b.ready;
                assert.equal(a1.status, 200);

                let r = await call(base, ca, alice, 'create_session', { session: 'ev1' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                const running = await a1.waitFor((e) => e.type === 'session.running' && e.data.session === 'ev1');
                assert.ok(a1.events.some((e) => e.type === 'session.created' && e.id < running.id));
                a1.close(); // disconnected from here on

                r = await call(base, ca, alice, 'exec', { session: 'ev1', command: 'exit 7' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                r = await call(base, ca, alice, 'destroy_session', { session: 'ev1' });
                assert.equal(r.status, 200, JSON.stringify(r.body));

                // what the log holds after the last id seen (polling, the same log)
                r = await call(base, ca, alice, 'events', { since: running.id, limit: 100 });
                assert.equal(r.status, 200);
                const missed = r.body.events;
                assert.deepEqual(
                        missed.map((e) => e.type),
                        ['execution.finished', 'session.stopped'],
                );
                assert.equal(missed[0].data.exit_code, 7);
                assert.equal(missed[1].data.reason, 'destroyed');

                const a2 = openStream(base, ca, alice, running.id);
                await a2.ready;
                await a2.waitFor((e) => e.type === 'session.stopped');
                assert.deepEqual(
                        a2.events.map((e) => e.id),
                        missed.map((e) => e.id),
                        'exactly the missed events, in order',
                );
                for (const e of a2.events) assert.equal(e.data.user, 'alice');

                // bob's own events reach him; alice's never do
                r = await call(base, ca, bob, 'create_session', { session: 'evb' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                await b.waitFor((e) => e.type === 'session.running' && e.data.session === 'evb');
                r = await call(base, ca, bob, 'destroy_session', { session: 'evb' });
                await b.waitFor((e) => e.type === 'session.stopped' && e.data.session === 'evb');
                assert.ok(b.events.length >= 3);
                for (const e of b.events) assert.equal(e.data.user, 'bob', JSON.stringify(e));
                // nor by asking for the whole log
                r = await call(base, ca, bob, 'events', { since: 0, limit: 1000 });
                for (const e of r.body.events) assert.equal(e.user, 'bob');
                a2.close();
                b.close();
        });

        test('pause_session and resume over HTTPS: session.paused, then session.resumed on the next call', { timeout: 240000 }, async () => {
                const st = openStream(base, ca, alice);
                await st.ready;
                let r = await call(base, ca, alice, 'exec', { session: 'evp', command: 'echo before' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                r = await call(base, ca, alice, 'pause_session', { session: 'evp' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                assert.equal(r.body.state, 'paused');
                const paused = await st.waitFor((e) => e.type === 'session.paused' && e.data.session === 'evp');
                assert.equal(paused.data.data.reason, 'request');
                // another user's pause finds no such session
                r = await call(base, ca, bob, 'pause_session', { session: 'evp' });
                assert.equal(r.body.error?.code, 'not_found', JSON.stringify(r.body));
                // any call that needs the container resumes it
                r = await call(base, ca, alice, 'exec', { session: 'evp', command: 'echo after' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                assert.equal(r.body.stdout, 'after\n');
                const resumed = await st.waitFor((e) => e.type === 'session.resumed' && e.data.session === 'evp');
                assert.ok(resumed.id > paused.id);
                r = await call(base, ca, alice, 'destroy_session', { session: 'evp' });
                assert.equal(r.status, 200, JSON.stringify(r.body));
                st.close();
        });

        test('a bad Last-Event-ID is refused', async () => {
                const s = openStream(base, ca, alice, 'x1');
                await s.ready;
                assert.equal(s.status, 400);
                s.close();
        });
});
