// client.test.mjs — the TypeScript client (compiled to dist/ by `npm test`'s
// pretest) against a real sandboxd over HTTPS, then over mTLS: every method
// the client exposes, streaming before the end, errors by type, and a
// 100-way parallel run. The two daemons run one after the other (they
// share the run's instance label).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import * as sbx from '../dist/index.js';
import { startHttpsDaemon } from './daemon.mjs';

const { Sandboxd } = sbx;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Poll pred until it is truthy; fail at the deadline. */
async function waitUntil(pred, what, deadlineMs = 60000) {
        const end = Date.now() + deadlineMs;
        for (;;) {
                const v = await pred();
                if (v) return v;
                if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
                await sleep(100);
        }
}

/** Run fn and return the error it throws (fails when it does not). */
async function caught(fn) {
        try {
                await fn();
        } catch (e) {
                return e;
        }
        assert.fail('expected an error');
}

describe('TypeScript client over HTTPS', { timeout: 600000 }, () => {
        let d, token, c, s;

        before(async () => {
                d = await startHttpsDaemon({
                        env: { SANDBOXD_LIMITS_FILE_SIZE: '1m', SANDBOXD_LIMITS_SERVICES_PER_SESSION: '2' },
                });
                token = await d.createToken('alice');
                c = new Sandboxd({ url: d.url, token, caFile: d.caFile });
                s = await c.createSession({ session: 'main' });
        });

        after(async () => {
                c?.close();
                await d?.stop();
        });

        test('url and token from the environment; a wrong CA is a transport error', async () => {
                const old = { ...process.env };
                try {
                        Object.assign(process.env, { SANDBOXD_URL: d.url, SANDBOXD_TOKEN: token, SANDBOXD_CA: d.caFile });
                        const e = new Sandboxd();
                        assert.equal((await e.session('main').info()).session, 'main');
                        e.close();
                        delete process.env.SANDBOXD_TOKEN;
                        assert.throws(() => new Sandboxd(), TypeError);
                } finally {
                        process.env = old;
                }
                const noCa = new Sandboxd({ url: d.url, token });
                const err = await caught(() => noCa.listSessions());
                assert.ok(err instanceof sbx.TransportError, String(err));
                assert.equal(err.code, 'transport');
                noCa.close();
        });

        test('sessions: create, info, list, conflict, destroy', async () => {
                const life = await c.createSession({ session: 'life', env: { GREETING: 'hello' }, ttl_seconds: 3600 });
                assert.deepEqual(life.created.env_names, ['GREETING']);
                assert.equal((await life.exec('echo $GREETING')).stdout, 'hello\n');
                const info = await life.info();
                assert.deepEqual([info.session, info.user, info.state], ['life', 'alice', 'running']);
                assert.ok((await c.listSessions()).some((x) => x.session === 'life'));
                assert.ok((await caught(() => c.createSession({ session: 'life' }))) instanceof sbx.ConflictError);
                const r = await life.destroy({ purge: true });
                assert.deepEqual([r.destroyed, r.purged], [true, true]);
                const named = await c.createSession();
                assert.match(named.name, /^s-[0-9a-f]{12}$/);
                await named.destroy();
        });

        test('snapshots: snapshot, restore, fork, list, delete', async () => {
                const sn = c.session('snapper');
                await sn.exec('mkdir -p d && echo one > d/f && ln -s d/f link');
                const snap = await sn.snapshot('before');
                assert.match(snap.snapshot, /^snap-/);
                assert.deepEqual([snap.name, snap.session, snap.state], ['before', 'snapper', 'ready']);
                assert.ok((await c.listSnapshots({ session: 'snapper' })).snapshots.some((x) => x.name === 'before'));
                await sn.exec('rm -rf d link && echo two > other');
                const r = await sn.restore('before');
                assert.deepEqual([r.restored, r.state], [true, 'stopped']);
                assert.equal((await sn.exec('cat d/f; readlink link; ls other 2>/dev/null || echo gone')).stdout, 'one\nd/f\ngone\n');
                const kid = await sn.fork('snapkid');
                assert.deepEqual(kid.created.forked_from, { session: 'snapper' });
                await kid.exec('echo kid > d/f');
                assert.equal((await sn.exec('cat d/f')).stdout, 'one\n');
                assert.equal((await kid.exec('cat d/f')).stdout, 'kid\n');
                assert.ok((await caught(() => c.forkSession('snapkid', { snapshot: 'before' }))) instanceof sbx.ConflictError);
                assert.equal((await c.deleteSnapshot('before')).deleted, true);
                assert.ok(!(await c.listSnapshots()).snapshots.some((x) => x.name === 'before'));
                await kid.destroy({ purge: true });
                await sn.destroy({ purge: true });
        });

        test('exec waits for the end', async () => {
                let r = await s.exec('echo out; echo err >&2; exit 3');
                assert.deepEqual([r.state, r.exit_code, r.stdout, r.stderr], ['completed', 3, 'out\n', 'err\n']);
                await s.exec('mkdir -p sub');
                r = await s.exec('pwd; printf $X; cat', { workdir: 'sub', stdin: 'piped', env: { X: 'x-' } });
                assert.equal(r.stdout, '/workspace/sub\nx-piped');
                r = await s.exec('sleep 30', { timeout_seconds: 1 });
                assert.deepEqual([r.state, r.cause], ['timeout', 'timeout']);
        });

        test('a stream delivers output before the execution ends', async () => {
                // the command cannot end before the test creates /workspace/go
                const st = s.execStream(
                        'echo first; while [ ! -e /workspace/go ]; do sleep 0.05; done; echo second >&2',
                        { timeout_seconds: 60 },
                );
                const it = st[Symbol.asyncIterator]();
                const first = await it.next();
                assert.deepEqual(first.value, { stream: 'stdout', data: 'first\n' });
                assert.equal(st.result, undefined);
                const running = await s.listExecutions({ states: ['running'] });
                assert.ok(
                        running.some((x) => (x.command_preview ?? '').includes('/workspace/go')),
                        JSON.stringify(running),
                );
                await s.writeFile('go', '');
                const rest = [];
                for (let n = await it.next(); !n.done; n = await it.next()) rest.push(n.value);
                assert.deepEqual(rest, [{ stream: 'stderr', data: 'second\n' }]);
                assert.deepEqual([st.result.state, st.result.stdout, st.result.stderr], ['completed', 'first\n', 'second\n']);
                await s.exec('rm -f /workspace/go');
                const bad = await caught(() => s.runCodeStream('print(1)', 'cobol').finish());
                assert.ok(bad instanceof sbx.InvalidError, String(bad));
        });

        test('background executions: get, wait, list, cancel, stdin, terminal', async () => {
                const ex = await s.execBackground('echo started; sleep 120', { timeout_seconds: 300 });
                await waitUntil(async () => (await ex.get()).stdout === 'started\n', 'the first output');
                assert.ok((await s.listExecutions({ states: ['running'] })).some((x) => x.execution_id === ex.id));
                assert.equal((await ex.cancel()).state, 'cancelled');
                const late = await caught(() => ex.sendStdin('late'));
                assert.ok(late instanceof sbx.AlreadyFinishedError && late instanceof sbx.ConflictError, String(late));
                assert.equal(late.status, 409);
                const quick = await s.execBackground('echo done');
                assert.equal((await quick.wait(60000)).stdout, 'done\n');
                assert.equal((await s.execution(quick.id).get({ wait: true })).state, 'completed');

                const cat = await s.execBackground('cat', { interactive: true, timeout_seconds: 60 });
                assert.equal((await cat.sendStdin('hello ')).bytes, 6);
                await cat.sendStdin(new Uint8Array([0x62, 0x79, 0x74, 0x65, 0x73, 0x0a]), { eof: true });
                assert.equal((await cat.wait(60000)).stdout, 'hello bytes\n');

                const tty = await s.execBackground('read line; stty size; echo got $line', { tty: true, rows: 10, cols: 20 });
                await waitUntil(async () => {
                        try {
                                return (await tty.resize(33, 44)).rows === 33;
                        } catch (e) {
                                if (e instanceof sbx.BusyError) return false; // not attached yet
                                throw e;
                        }
                }, 'a resize of the terminal');
                await tty.sendStdin('x\n');
                const r = await tty.wait(60000);
                assert.match(r.stdout, /33 44/);
                assert.match(r.stdout, /got x/);
        });

        test('run_code and the script cache', async () => {
                const r = await s.runCode('# sums ts\nprint(sum(range(10)))');
                assert.equal(r.stdout, '45\n');
                assert.ok(r.cached);
                assert.equal((await s.runCode('console.log(6*7)', 'node')).stdout, '42\n');
                assert.equal((await s.runCode(undefined, undefined, { script: r.cached.name })).stdout, '45\n');
                assert.ok((await c.listScripts({ filter: 'sums ts' })).scripts.some((x) => x.name === r.cached.name));
                assert.ok((await c.clearScripts(r.cached.name)) >= 1);
                const gone = await caught(() => s.runCode(undefined, undefined, { script: r.cached.name }));
                assert.ok(gone instanceof sbx.NotFoundError, String(gone));
                const st = s.runCodeStream("import sys\nprint('a', flush=True)\nprint('b', file=sys.stderr)");
                const chunks = [];
                for await (const ch of st) chunks.push(ch);
                assert.equal(chunks.filter((x) => x.stream === 'stdout').map((x) => x.data).join(''), 'a\n');
                assert.deepEqual([st.result.stdout, st.result.stderr], ['a\n', 'b\n']);
                const bg = await s.runCodeBackground("print('bg')");
                assert.equal((await bg.wait(60000)).stdout, 'bg\n');
        });

        test('files', async () => {
                assert.equal((await s.writeFile('dir/a.txt', 'héllo')).bytes, 6);
                const blob = Buffer.alloc(1024, 0).map((_, i) => i % 256);
                assert.equal((await s.writeFile('dir/b.bin', blob)).bytes, 1024);
                assert.deepEqual(await s.readFile('dir/b.bin'), blob);
                assert.equal(await s.readText('dir/a.txt'), 'héllo');
                const part = await s.readFileChunk('dir/b.bin', { offset: 1000, length: 100 });
                assert.deepEqual([part.content, part.size, part.eof], [blob.subarray(1000), 1024, true]);
                const ls = await s.listFiles('dir');
                assert.deepEqual(
                        ls.entries.map((e) => [e.name, e.type, e.size]).sort(),
                        [
                                ['a.txt', 'file', 6],
                                ['b.bin', 'file', 1024],
                        ],
                );
                assert.ok((await caught(() => s.readFile('../../etc/passwd'))) instanceof sbx.InvalidError);
                assert.ok((await caught(() => s.readFile('dir/missing'))) instanceof sbx.NotFoundError);
                const big = await caught(() => s.writeFile('big', Buffer.alloc((1 << 20) + 1))); // limits.file_size=1m
                assert.ok(big instanceof sbx.TooLargeError, String(big));
                assert.equal(big.status, 413);
        });

        test('services', async () => {
                const v = await c.createSession({ session: 'svc' });
                try {
                        assert.equal((await v.startService('ticker', 'echo svc-up; sleep 300')).name, 'ticker');
                        await waitUntil(
                                async () => (await v.serviceLogs('ticker', { tail_lines: 10 })).stdout.includes('svc-up'),
                                "the service's log",
                        );
                        const list = await v.listServices();
                        assert.deepEqual(list.map((x) => [x.name, x.state]), [['ticker', 'running']]);
                        assert.ok((await caught(() => v.startService('ticker', 'sleep 1'))) instanceof sbx.ConflictError);
                        await v.startService('second', 'sleep 300');
                        const busy = await caught(() => v.startService('third', 'sleep 300')); // max 2 here
                        assert.ok(busy instanceof sbx.BusyError, String(busy));
                        assert.equal(busy.status, 429);
                        assert.ok(['stopped', 'failed'].includes((await v.stopService('ticker')).state));
                        assert.ok((await caught(() => v.stopService('never'))) instanceof sbx.NotFoundError);
                } finally {
                        await v.destroy();
                }
        });

        test('egress additions need a connector; private marks', async () => {
                const f = await caught(() => s.egressAllow('example.com'));
                assert.ok(f instanceof sbx.ForbiddenError, String(f));
                assert.equal(f.status, 403);
                const conn = new Sandboxd({ url: d.url, token: await d.createToken('alice', 'connector'), caFile: d.caFile });
                try {
                        const m = conn.session('main');
                        let pol = await m.egressAllow('pypi.org');
                        assert.ok(pol.allow.some((a) => a.pattern === 'pypi.org'));
                        assert.ok((await m.info()).egress.allow.some((a) => a.pattern === 'pypi.org'));
                        pol = await m.egressAllow('pypi.org', { remove: true });
                        assert.ok(!pol.allow.some((a) => a.pattern === 'pypi.org'));
                        const p = conn.session('priv');
                        const r = await p.markPrivate('payroll', { source: 'hr-db' });
                        assert.equal(r.network_mode, 'none');
                        assert.equal((await p.info()).private, true);
                        await p.destroy();
                } finally {
                        conn.close();
                }
        });

        test('idempotency keys', async () => {
                const cmd = 'echo once >> idem.log; cat idem.log';
                const a = await s.exec(cmd, { idempotency_key: 'ts-exec-1' });
                const b = await s.exec(cmd, { idempotency_key: 'ts-exec-1' });
                assert.deepEqual([a.execution_id, a.stdout], [b.execution_id, b.stdout]);
                assert.equal(await s.readText('idem.log'), 'once\n');
                const other = await caught(() => s.exec('echo other', { idempotency_key: 'ts-exec-1' }));
                assert.ok(other instanceof sbx.ConflictError, String(other));
                const { trace_id: t1, ...w } = await s.writeFile('idem.txt', 'v1', { idempotency_key: 'ts-write-1' });
                const { trace_id: t2, ...w2 } = await s.writeFile('idem.txt', 'v1', { idempotency_key: 'ts-write-1' });
                // the replay is the first answer, but names its own request's trace id
                assert.notEqual(t1, t2);
                assert.deepEqual(w2, w);
        });

        test('tasks', async () => {
                const ex = await s.execBackground('sleep 120', { timeout_seconds: 300 });
                const t = await s.createTask(ex.id, 'exec');
                assert.deepEqual([t.execution_id, t.status], [ex.id, 'working']);
                assert.equal((await c.getTask(t.task_id)).status, 'working');
                assert.equal((await c.cancelTask(t.task_id)).status, 'cancelled');
                await waitUntil(async () => (await ex.get()).state === 'cancelled', "the task's execution cancelled");
                assert.ok((await caught(() => c.cancelTask(t.task_id))) instanceof sbx.AlreadyFinishedError);
                assert.ok((await caught(() => c.getTask('0'.repeat(32)))) instanceof sbx.NotFoundError);
        });

        test('run_tests', async () => {
                const code = 'def add(a, b):\n    return a + b\n';
                const ok = await s.runTests('from solution import add\ndef test_add():\n    assert add(2, 3) == 5\n', {
                        code,
                });
                assert.equal(ok.success, true);
                assert.deepEqual(ok.summary, { total: 1, passed: 1, failed: 0, skipped: 0 });
                const bad = await s.runTests(
                        'from solution import add\ndef test_ok():\n    assert add(1, 1) == 2\ndef test_wrong():\n    assert add(2, 2) == 5\n',
                        { code },
                );
                assert.equal(bad.success, false);
                assert.deepEqual(bad.tests.filter((x) => !x.passed).map((x) => x.name), ['test_wrong']);
                const node = await s.runTests(
                        "import test from 'node:test';\nimport assert from 'node:assert';\ntest('sum', () => assert.equal(1 + 1, 2));\n",
                        { language: 'node' },
                );
                assert.equal(node.success, true, JSON.stringify(node));
        });

        test('errors map to their types', async () => {
                const anon = new Sandboxd({ url: d.url, token: 'not-a-token', caFile: d.caFile });
                const u = await caught(() => anon.listSessions());
                anon.close();
                assert.ok(u instanceof sbx.UnauthorizedError, String(u));
                assert.deepEqual([u.code, u.status], ['unauthorized', 401]);
                const inv = await caught(() => c.session('bad name!').info());
                assert.ok(inv instanceof sbx.InvalidError);
                assert.deepEqual([inv.code, inv.status, inv.method], ['invalid', 400, 'session_info']);
                assert.ok((await caught(() => c.call('no_such_method'))) instanceof sbx.NotFoundError);
                assert.ok((await caught(() => s.call('exec', {}))) instanceof sbx.BadRequestError);
                const ex = await s.exec('true');
                const bob = new Sandboxd({ url: d.url, token: await d.createToken('bob'), caFile: d.caFile });
                const nf = await caught(() => bob.session('main').getExecution(ex.execution_id));
                bob.close();
                assert.ok(nf instanceof sbx.NotFoundError, String(nf));
                for (const [code, C] of Object.entries(sbx.ERRORS_BY_CODE)) {
                        const e = sbx.errorFrom(code, 'm', 0, 'x');
                        assert.equal(e.constructor, C);
                        assert.equal(e.code, code);
                        assert.ok(e instanceof sbx.SandboxdError && e instanceof Error);
                }
                assert.equal(sbx.errorFrom('brand_new', 'm').constructor, sbx.SandboxdError);
        });

        test('100 parallel calls on one client', async () => {
                const sessions = ['par0', 'par1', 'par2', 'par3'].map((n) => c.session(n));
                for (const x of sessions) await x.info(); // containers first
                const out = await Promise.all(
                        Array.from({ length: 100 }, async (_, i) => {
                                const x = sessions[i % sessions.length];
                                if (i % 2) return (await x.exec(`echo ${i}`)).stdout;
                                await x.writeFile(`f${i}.txt`, String(i));
                                return (await x.readText(`f${i}.txt`)) + '\n';
                        }),
                );
                assert.deepEqual(out, Array.from({ length: 100 }, (_, i) => `${i}\n`));
                for (const x of sessions) await x.destroy();
        });

        test('run_cell, when the daemon has it', async (t) => {
                try {
                        await s.runCell('x = 41');
                } catch (e) {
                        if (e instanceof sbx.NotFoundError && /unknown method/.test(e.message)) {
                                t.skip('this daemon has no run_cell (issue 25 not merged)');
                                return;
                        }
                        throw e;
                }
                assert.equal((await s.runCell('x + 1')).text, '42');
                const fig = await s.runCell('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()', {
                        timeout_seconds: 120,
                });
                assert.ok(fig.images.length >= 1, JSON.stringify(fig));
                assert.deepEqual([...fig.images[0].subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
        });

        test('cell outputs decode images', () => {
                const png = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(16, 7)]);
                const r = new sbx.CellResult({
                        context: 'default',
                        generation: 1,
                        execution_count: 3,
                        outputs: [
                                { type: 'stream', name: 'stdout', text: 'hi\n' },
                                { type: 'display_data', data: { 'image/png': png.toString('base64'), 'text/plain': '<Figure>' } },
                                { type: 'execute_result', data: { 'text/plain': '42' } },
                        ],
                        stdout: 'hi\n',
                        stderr: '',
                });
                assert.deepEqual(r.outputs[1].png, png);
                assert.equal(r.outputs[0].png, undefined);
                assert.deepEqual(r.images, [png]);
                assert.equal(r.text, '42');
        });
});

describe('TypeScript client over mTLS', { timeout: 300000 }, () => {
        let d, token;

        before(async () => {
                d = await startHttpsDaemon({ mtls: true });
                token = await d.createToken('carol');
        });

        after(async () => {
                await d?.stop();
        });

        test('calls and streams with a client certificate', async () => {
                const c = new Sandboxd({ url: d.url, token, caFile: d.caFile, certFile: d.certFile, keyFile: d.keyFile });
                try {
                        const s = await c.createSession({ session: 'm1' });
                        assert.equal((await s.exec('echo mtls')).stdout, 'mtls\n');
                        const st = s.execStream('echo a; echo b');
                        let text = '';
                        for await (const ch of st) text += ch.data;
                        assert.equal(text, 'a\nb\n');
                        assert.equal(st.result.state, 'completed');
                        await s.writeFile('x', new Uint8Array([1, 2]));
                        assert.deepEqual([...(await s.readFile('x'))], [1, 2]);
                        await s.destroy();
                } finally {
                        c.close();
                }
        });

        test('the certificate from the environment; none is refused', async () => {
                const old = { ...process.env };
                try {
                        Object.assign(process.env, {
                                SANDBOXD_URL: d.url,
                                SANDBOXD_TOKEN: token,
                                SANDBOXD_CA: d.caFile,
                                SANDBOXD_CERT: d.certFile,
                                SANDBOXD_KEY: d.keyFile,
                        });
                        const c = new Sandboxd();
                        assert.equal((await c.session('m2').exec('echo env')).stdout, 'env\n');
                        await c.destroySession('m2');
                        c.close();
                } finally {
                        process.env = old;
                }
                const c = new Sandboxd({ url: d.url, token, caFile: d.caFile });
                const e = await caught(() => c.listSessions());
                c.close();
                assert.ok(e instanceof sbx.ForbiddenError, String(e));
                assert.equal(e.status, 403);
                assert.match(e.message, /client certificate/);
        });
});
