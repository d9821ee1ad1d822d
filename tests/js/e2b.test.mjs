// The official E2B SDK (npm `e2b`, pinned in tests/package-lock.json) drives
// a real sandboxd unchanged over HTTPS on loopback (issue 36): a program
// written for E2B (e2b_program.mjs) runs with only E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY (a sandboxd token in E2B's spelling) set.
// Then the hostile side: another tenant's key and access token on every
// route, malformed JSON and Connect envelopes, and the body caps.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { Daemon, RUN_ID, httpsRequest as request, socketRequest } from './harness.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));

/** A Connect envelope around a JSON message. */
function envelope(obj, flags = 0) {
        const json = Buffer.from(JSON.stringify(obj));
        const head = Buffer.alloc(5);
        head[0] = flags;
        head.writeUInt32BE(json.length, 1);
        return Buffer.concat([head, json]);
}

/** The JSON messages of a Connect stream body: [{flags, msg}]. */
function frames(body) {
        const out = [];
        for (let off = 0; off + 5 <= body.length; ) {
                const n = body.readUInt32BE(off + 1);
                out.push({ flags: body[off], msg: JSON.parse(body.subarray(off + 5, off + 5 + n).toString()) });
                off += 5 + n;
        }
        return out;
}

describe('E2B SDK against sandboxd (issue 36)', () => {
        let d, ca, port, keyA, keyB, keyMany;

        before(async () => {
                d = new Daemon();
                d.env.SANDBOXD_LIMITS_FILE_SIZE = '64m'; // the upload cap (E2B_UPLOAD_MAX's), tested below
                d.env.SANDBOXD_E2B_DOMAIN = 'sbx.test'; // getHost(port) names: the tests set Host on 127.0.0.1
                d.env.SANDBOXD_E2B_PROXY_MAX_PER_USER = '1'; // an open WebSocket holds the one slot (e2b_host_program.mjs)
                // 100 sandboxes at once (e2b_many_program.mjs), each with its block of ports and an execution
                // running: room for them, as an operator expecting that many would give
                const base = 14000 + Math.floor(Math.random() * 8) * 700;
                d.env.SANDBOXD_PORT_RANGE = `${base}-${base + 699}`;
                // the operator's egress policy the network test narrows: two names of loopback,
                // where the test's own HTTP server listens
                d.env.SANDBOXD_EGRESS_ALLOW = 'up.test:*, other.test:*';
                d.env.SANDBOXD_EGRESS_RESOLVE = 'up.test=127.0.0.1, other.test=127.0.0.1, evil.test=127.0.0.1';
                d.env.SANDBOXD_EGRESS_ALLOW_PRIVATE = '127.0.0.1/32';
                d.env.SANDBOXD_LIMITS_EXEC_PER_USER = '200';
                d.env.SANDBOXD_LIMITS_EXEC_GLOBAL = '200';
                ({ ca, port } = await d.startHttps());
                const mint = async (user) => {
                        const r = await socketRequest(d.adminSocket, { cmd: 'token.create', user, role: 'agent', format: 'e2b' });
                        assert.ok(r.ok, JSON.stringify(r));
                        return r.result.token;
                };
                keyA = await mint('e2b-alice');
                keyB = await mint('e2b-bob');
                keyMany = await mint('e2b-many');
        });

        after(async () => {
                await d?.stop();
        });

        /** Run a program of tests/js/ with the three variables and the test's CA. */
        const runProgram = (name, extra = {}, timeout = 240000) =>
                new Promise((resolve) =>
                        execFile(
                                process.execPath,
                                [path.join(HERE, name)],
                                {
                                        env: {
                                                ...process.env,
                                                E2B_API_URL: `https://127.0.0.1:${port}`,
                                                E2B_SANDBOX_URL: `https://127.0.0.1:${port}`,
                                                E2B_API_KEY: keyA,
                                                NODE_EXTRA_CA_CERTS: path.join(d.dir, 'ca.pem'),
                                                RUN_TAG: `t${RUN_ID}`.toLowerCase().replace(/[^a-z0-9]/g, '').slice(0, 40),
                                                E2B_PORT: String(port),
                                                ...extra,
                                        },
                                        timeout,
                                        maxBuffer: 1 << 20,
                                },
                                (err, stdout, stderr) => resolve({ stdout, stderr, code: err ? err.code : 0 }),
                        ),
                );

        test('getHost(port): a server in the sandbox through {port}-{id}.{domain}; closed port 502; unknown 404; allowPublicTraffic false needs the token; a WebSocket both ways, holding its slot until closed', async () => {
                const { stdout, stderr, code } = await runProgram('e2b_host_program.mjs');
                assert.equal(code, 0, `the getHost program failed:\n${stderr}\n${stdout}\n--- daemon log:\n${d.logTail()}`);
                const out = JSON.parse(stdout.trim().split('\n').pop());
                assert.match(out.host, /^8123-[a-z0-9]{20}\.sbx\.test$/);
                assert.deepEqual(out.get, { status: 200, body: 'hello through getHost', length: '21' });
                assert.equal(out.missing, 404); // the server's own 404, path and query passed on
                assert.equal(out.closed.status, 502);
                assert.match(out.closed.body, /nothing answered on port 8124/);
                assert.deepEqual(out.header, { status: 200, body: 'hello through getHost' });
                assert.equal(out.unknown, 404);
                assert.deepEqual(out.privWith, { status: 200, body: 'hello through getHost', tokenSet: true });
                assert.equal(out.privNone, 404);
                assert.equal(out.privWrong, 404);
                assert.deepEqual(out.ws, {
                        status: 101,
                        accepted: true,
                        first: { op: 1, data: 'ready' },
                        echo: { op: 1, data: 'echo: hello ws' },
                        echo2: { op: 2, data: 'echo: binary too' },
                        busy: 429, // e2b.proxy_max_per_user 1, held by the open WebSocket
                        closeFrame: { op: 8, data: '' },
                        after: 200,
                });
                assert.deepEqual(out.wsPriv, { none: 404, wrong: 404, own: 101, first: 'ready', echo: 'echo: private' });
        });

        test('getHost(port) of another user\'s private sandbox with that user\'s own token: 404', async () => {
                const mk = async (key, body) => {
                        const r = await request(ca, port, 'POST', '/sandboxes', {
                                headers: { 'X-API-Key': key, 'Content-Type': 'application/json' },
                                body: JSON.stringify(body),
                        });
                        assert.equal(r.status, 201, r.body.toString());
                        return JSON.parse(r.body);
                };
                const a = await mk(keyA, { templateID: 'base', timeout: 300, network: { allowPublicTraffic: false } });
                const b = await mk(keyB, { templateID: 'base', timeout: 300 });
                try {
                        assert.equal(a.domain, 'sbx.test');
                        const r = await request(ca, port, 'GET', '/', {
                                headers: { Host: `8123-${a.sandboxID}.sbx.test`, 'e2b-traffic-access-token': b.trafficAccessToken },
                        });
                        assert.equal(r.status, 404, r.body.toString());
                        const ws = await request(ca, port, 'GET', '/', {
                                headers: {
                                        Host: `8125-${a.sandboxID}.sbx.test`,
                                        'e2b-traffic-access-token': b.trafficAccessToken,
                                        Connection: 'Upgrade',
                                        Upgrade: 'websocket',
                                        'Sec-WebSocket-Key': 'dGhlIHNhbXBsZSBub25jZQ==',
                                        'Sec-WebSocket-Version': '13',
                                },
                        });
                        assert.equal(ws.status, 404, ws.body.toString()); // the upgrade too
                        const bad = await request(ca, port, 'POST', '/sandboxes', {
                                headers: { 'X-API-Key': keyA, 'Content-Type': 'application/json' },
                                body: JSON.stringify({ templateID: 'base', network: { allowOut: ['1.2.3.4'] } }),
                        });
                        // a narrowing may not widen: 1.2.3.4 is not in the operator's policy
                        assert.equal(bad.status, 403, bad.body.toString());
                        assert.match(bad.body.toString(), /1\.2\.3\.4 is not allowed/);
                } finally {
                        for (const [k, s] of [[keyA, a], [keyB, b]])
                                await request(ca, port, 'DELETE', `/sandboxes/${s.sandboxID}`, { headers: { 'X-API-Key': k } });
                }
        });

        test('uploads: 50 MB written and read back byte-exact; 1 GiB streamed is refused early, the daemon not buffering it', async () => {
                const { stdout, stderr, code } = await runProgram('e2b_upload_program.mjs', { DAEMON_PID: String(d.proc.pid) });
                assert.equal(code, 0, `the upload program failed:\n${stderr}\n${stdout}\n--- daemon log:\n${d.logTail()}`);
                const out = JSON.parse(stdout.trim().split('\n').pop());
                console.log(`upload figures: ${JSON.stringify(out)}`);
                assert.deepEqual(out.big, { size: 50 * 1024 * 1024, same: true });
                // refused mid-stream: the connection closed past the 64 MiB cap (libmicrohttpd cannot
                // answer in the middle of a body), so the SDK's fetch fails; nothing is written
                assert.notEqual(out.huge, 'written', stdout);
                assert.ok(out.given < 256 * 1024 * 1024, `the stream gave ${out.given} bytes before the refusal`);
                assert.ok(out.hwmAfter - out.hwmBefore < 300 * 1024 * 1024, `the daemon's VmHWM grew by ${out.hwmAfter - out.hwmBefore}`);
                assert.equal(out.hugeExists, false);
        });

        test('100 sandboxes at once, each running a command, Python code and files, then killed: all served, nothing left, no leak', async () => {
                const count = Number(process.env.SANDBOXD_E2B_MANY || 100);
                const counts = () => ({
                        fds: fs.readdirSync(`/proc/${d.proc.pid}/fd`).length,
                        threads: Number(/^Threads:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${d.proc.pid}/status`, 'utf8'))[1]),
                });
                const before = counts();
                const { stdout, stderr, code } = await runProgram('e2b_many_program.mjs', {
                        E2B_API_KEY: keyMany, // a user of its own: max_sessions_per_user is 100
                        COUNT: String(count),
                }, 900000);
                assert.equal(code, 0, `the program failed:\n${stderr}\n${stdout}\n--- daemon log:\n${d.logTail()}`);
                const out = JSON.parse(stdout.trim().split('\n').pop());
                assert.deepEqual(out.errors, []);
                assert.equal(out.ok, count);
                assert.equal(out.ids, count); // each its own sandbox
                assert.equal(out.left, 0);
                // every sandbox gone, the program's connections closed: the runner links, connections
                // and threads go with them (a few of slack for what the daemon opens on its own)
                let after = counts();
                for (const end = Date.now() + 30000; Date.now() < end; after = counts()) {
                        if (after.fds <= before.fds + 4 && after.threads <= before.threads + 2) break;
                        await new Promise((r) => setTimeout(r, 200)); // not a wait: a poll until the deadline
                }
                console.log(`${count} sandboxes at once: ${out.seconds} s; fds ${before.fds} -> ${after.fds}, threads ${before.threads} -> ${after.threads}`);
                assert.ok(after.fds <= before.fds + 4, `fds ${before.fds} -> ${after.fds}`);
                assert.ok(after.threads <= before.threads + 2, `threads ${before.threads} -> ${after.threads}`);
        });

        test('a token in E2B spelling passes the SDK key check and the daemon', () => {
                assert.match(keyA, /^e2b_[0-9a-f]+$/);
        });

        test('an unchanged E2B program: create, commands, files, list with a metadata filter, kill', async () => {
                const { stdout, stderr, code } = await runProgram('e2b_program.mjs');
                assert.equal(code, 0, `the E2B program failed:\n${stderr}\n${stdout}\n--- daemon log:\n${d.logTail()}`);
                const out = JSON.parse(stdout.trim().split('\n').pop());
                assert.match(out.sandboxId, /^[a-z0-9]+$/);
                assert.equal(out.stdout, 'hello\n');
                assert.equal(out.stderr, 'oops\n');
                assert.equal(out.exitCode, 0);
                assert.deepEqual(out.failed, { name: 'CommandExitError', exitCode: 3 });
                assert.equal(out.streamed, 'line1\nline2\nline3\n');
                assert.equal(out.pwd, '/workspace'); // the home is the workspace (docs/e2b.md)
                assert.equal(out.read, 'hi from e2b');
                assert.deepEqual(out.list, ['hello.txt:file', 'other.txt:file']);
                assert.equal(out.catViaShell, 'hi from e2b');
                // E2B's home by its own name inside the sandbox too: /home/user is the workspace
                assert.equal(out.catAbsolute, 'hi from e2b');
                assert.equal(out.cdHome, 'hello.txt\nother.txt\n');
                assert.equal(out.info.sandboxId, out.sandboxId);
                assert.equal(out.info.templateId, 'base');
                assert.equal(out.info.state, 'running');
                assert.equal(out.info.metadata.purpose, 'e2b-test');
                assert.deepEqual(out.listed, [out.sandboxId]);
                assert.equal(out.listedOther, 0);
                assert.equal(out.env, 'from-create per-cmd\n');
                assert.deepEqual(out.exists, [true, false]);
                assert.deepEqual(out.made, [true, false]);
                assert.equal(out.moved, '/home/user/a/b/moved.txt');
                assert.equal(out.movedInfo.type, 'file');
                assert.equal(out.movedInfo.name, 'moved.txt');
                assert.equal(out.afterRemove, false);
                assert.equal(out.listedProcs, true);
                assert.equal(out.bg, 'got:ping\n');
                assert.equal(out.killedCmd, true);
                assert.equal(out.sleeperEnd, 'CommandExitError');
                assert.equal(out.outside, 'InvalidArgumentError');
                assert.equal(out.asRoot, 'InvalidArgumentError: true');
                assert.equal(out.asUser, 'ok\n');
                assert.equal(out.writeAsRoot, 'InvalidArgumentError: true');
                assert.equal(out.overTime, 'TimeoutError');
                assert.equal(out.paused, true);
                assert.equal(out.stateWhilePaused, 'paused');
                assert.deepEqual(out.listedByState, [0, 1, 1]);
                assert.equal(out.stateAfterConnect, 'running');
                assert.equal(out.fileAfterResume, 'kept');
                assert.ok(out.endInSeconds > 100 && out.endInSeconds <= 120, `endAt ${out.endInSeconds} s away`);
                assert.equal(out.killed, true);
                assert.equal(out.killedAgain, false);
                assert.equal(out.listedAfterKill, 0);
                // the sandbox was a session of the key's user, and is gone from every front
                const sessions = await socketRequest(d.adminSocket, { cmd: 'sessions.list' }).catch(() => null);
                if (sessions?.ok)
                        assert.ok(
                                !JSON.stringify(sessions.result).includes(`e2b-${out.sandboxId}`),
                                'the killed sandbox is still a session',
                        );
        });

        test('an unchanged E2B program: watchDir sees a file a command writes; a recursive watch sees one in a subdirectory', async () => {
                const { stdout, stderr, code } = await runProgram('e2b_watch_program.mjs');
                assert.equal(code, 0, `the watch program failed:\n${stderr}\n${stdout}\n--- daemon log:\n${d.logTail()}`);
                const out = JSON.parse(stdout.trim().split('\n').pop());
                assert.deepEqual(out.flat.slice(0, 2), ['create', 'write']);
                assert.ok(out.deep.includes('sub/deeper/inner.txt'), JSON.stringify(out.deep));
                assert.ok(out.deep.includes('sub/later/new.txt'), JSON.stringify(out.deep));
                assert.equal(out.outside, 'InvalidArgumentError');
                assert.equal(out.missing, 'FileNotFoundError');
        });

        test('an unchanged E2B program with a PTY: tty, size, TERM, resize, input, kill, exit', async () => {
                const { stdout, stderr, code } = await runProgram('e2b_pty_program.mjs');
                assert.equal(code, 0, `the E2B PTY program failed:\n${stderr}\n${stdout}\n--- daemon log:\n${d.logTail()}`);
                const out = JSON.parse(stdout.trim().split('\n').pop());
                assert.ok(out.pid > 0);
                assert.match(out.tty, /^\/dev\/pts\/\d+$/);
                assert.equal(out.size, '30 100');
                assert.equal(out.term, 'xterm-256color');
                assert.equal(out.resized, '40 120');
                assert.equal(out.listed, true);
                assert.equal(out.connectedPid, out.pid);
                assert.equal(out.connectedSaw, true);
                assert.equal(out.connectedSawOld, false);
                assert.equal(out.connectedCmd, 'got:later\n');
                assert.equal(out.killed, true);
                assert.equal(out.end, 'CommandExitError');
                assert.equal(out.exitCode, 7);
                assert.equal(out.sandboxKilled, true);
        });

        test('network: allowOut keeps a sandbox to its hosts, updateNetwork denyOut replaces it, a fork carries it, allowInternetAccess false seals it; a widening is refused', async () => {
                const up = http.createServer((req, res) => res.end('up'));
                await new Promise((resolve) => up.listen(0, '127.0.0.1', resolve));
                try {
                        const { stdout, stderr, code } = await runProgram('e2b_network_program.mjs', { UP_PORT: String(up.address().port) });
                        assert.equal(code, 0, `the E2B program failed:\n${stderr}\n${stdout}\n--- daemon log:\n${d.logTail()}`);
                        const out = JSON.parse(stdout.trim().split('\n').pop());
                        assert.equal(out.error, undefined, out.error);
                        assert.deepEqual(out.allowOut, { up: '200', other: '403' });
                        assert.deepEqual(out.denyOut, { up: '403', other: '200' });
                        assert.match(out.widen, /evil\.test is not allowed to this session/);
                        assert.deepEqual(out.afterWiden, { up: '403', other: '200' });
                        assert.deepEqual(out.fork, { up: '403', other: '200' });
                        assert.deepEqual(out.cleared, { up: '200', other: '200' });
                        assert.deepEqual(out.sealed, { up: '403', other: '403' });
                        assert.match(out.createWiden, /evil\.test is not allowed to this session/);
                        assert.match(out.cidr, /not CIDR blocks/);
                        assert.equal(out.left, 0);
                } finally {
                        up.close();
                }
        });

        test('an unchanged E2B program: getInfo, getMetrics, fork keeps files then diverges, createSnapshot then create from it; another key: NotFoundError', async () => {
                const { stdout, stderr, code } = await runProgram('e2b_ops_program.mjs', { OTHER_KEY: keyB });
                assert.equal(code, 0, `the E2B program failed:\n${stderr}\n${stdout}\n--- daemon log:\n${d.logTail()}`);
                const out = JSON.parse(stdout.trim().split('\n').pop());
                assert.equal(out.info, true);
                assert.equal(out.metrics.length, 1);
                const [m] = out.metrics;
                assert.ok(m.cpuCount >= 1, JSON.stringify(m));
                assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, JSON.stringify(m));
                assert.ok(m.memUsed > 0 && m.memTotal >= m.memUsed, JSON.stringify(m));
                assert.ok(m.diskUsed >= 0, JSON.stringify(m));
                assert.equal(m.when, true);
                assert.equal(out.forks, 1);
                assert.notEqual(out.forkId, out.sourceId);
                assert.match(out.forkId, /^[a-z0-9]+$/);
                assert.equal(out.forkRead, 'written before the fork');
                assert.equal(out.forkHasAfter, true);
                assert.equal(out.sourceHasAfter, false);
                assert.equal(out.forkReadAgain, 'written before the fork');
                assert.equal(out.forkMetrics, 1);
                assert.match(out.snapshotId, /^snap-/);
                assert.equal(out.snapshotNames.length, 1);
                assert.equal(out.restoredRead, 'changed in the source'); // as at the snapshot, not as after it
                assert.equal(out.restoredOtherId, true);
                assert.match(out.otherCreate, /Error$/);
                assert.notEqual(out.otherCreate, 'no error');
                // listSnapshots, one item a page: every snapshot once, in id order
                assert.deepEqual(out.listedMine, [out.snapshotId, out.snapshot2Id].sort());
                assert.equal(new Set(out.listedIds).size, out.listedIds.length, JSON.stringify(out.listedIds));
                assert.deepEqual(out.listedNames, out.snapshotNames);
                assert.deepEqual(out.byName, [out.snapshotId]);
                assert.equal(out.otherList, 0);
                assert.equal(out.otherDelete, false); // another tenant's snapshot is not found
                assert.equal(out.deleted, true);
                assert.equal(out.deletedAgain, false);
                assert.equal(out.templateDelete, false); // templates are the operator's
                assert.deepEqual(out.afterDelete, [out.snapshotId]);
                assert.deepEqual(out.otherTenant, {
                        getInfo: 'NotFoundError',
                        getMetrics: 'NotFoundError',
                        fork: 'NotFoundError',
                        createSnapshot: 'NotFoundError',
                });
        });

        test('an unchanged @e2b/code-interpreter program: runCode state, a PNG chart, a DataFrame, a traceback, contexts', async () => {
                const { stdout, stderr, code } = await runProgram('e2b_code_program.mjs');
                assert.equal(code, 0, `the program failed:\n${stderr}\n${stdout}\n--- daemon log:\n${d.logTail()}`);
                const out = JSON.parse(stdout.trim().split('\n').pop());
                assert.equal(out.text, '42');
                assert.equal(out.stdout, 'side\n');
                assert.ok(out.count >= 2);
                assert.equal(out.streamed, 'ready\nsaw go\n', 'runCode did not stream its output as it came');
                assert.equal(out.png, true, 'no PNG result');
                assert.equal(out.html, true, 'no HTML result');
                assert.deepEqual(out.error, { name: 'ZeroDivisionError', hasTraceback: true });
                assert.equal(out.ctxOwn, "'own'");
                assert.equal(out.defaultLacksY, 'NameError');
                assert.equal(out.contexts, true);
                assert.equal(out.afterRemove, false);
        });

        test('a kill racing envd calls: the sandbox stays gone, no call makes it again', async () => {
                const api = (method, p, body) =>
                        request(ca, port, method, p, {
                                headers: { 'X-API-Key': keyA, 'Content-Type': 'application/json' },
                                body: body === undefined ? undefined : JSON.stringify(body),
                        });
                const r = await api('POST', '/sandboxes', { templateID: 'base', timeout: 600 });
                assert.equal(r.status, 201, r.body.toString());
                const { sandboxID: id, envdAccessToken: token } = JSON.parse(r.body);
                const headers = (type) => ({ 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': token, 'Content-Type': type });
                const calls = [
                        (i) => request(ca, port, 'POST', '/filesystem.Filesystem/MakeDir', { headers: headers('application/json'), body: JSON.stringify({ path: `d${i}` }) }),
                        (i) => request(ca, port, 'POST', `/files?path=/home/user/f${i}`, { headers: headers('application/octet-stream'), body: 'x' }),
                        (i) => request(ca, port, 'POST', '/filesystem.Filesystem/ListDir', { headers: headers('application/json'), body: JSON.stringify({ path: `/home/user` }) }),
                        () => request(ca, port, 'POST', '/process.Process/Start', { headers: headers('application/connect+json'), body: envelope({ process: { cmd: '/bin/true' } }) }),
                ];
                let killed = false;
                const statuses = [];
                // each worker calls on until the kill has answered, then three more times
                const worker = async (w) => {
                        for (let i = 0, after = 0; after < 3; i++) {
                                if (killed) after++;
                                const res = await calls[w](`${w}-${i}`);
                                if (killed) statuses.push(res.status);
                        }
                };
                const workers = [0, 1, 2, 3].map(worker);
                // let every worker get going before the kill
                await request(ca, port, 'GET', '/health', { headers: headers('application/json') });
                const kill = await api('DELETE', `/sandboxes/${id}`);
                killed = true;
                assert.equal(kill.status, 204, kill.body.toString());
                await Promise.all(workers);
                // after the kill: not found (Start answers 200 with a not_found end of stream)
                assert.ok(statuses.every((s) => s === 404 || s === 200), `statuses after the kill: ${statuses}`);
                const after = await request(ca, port, 'POST', '/filesystem.Filesystem/MakeDir', { headers: headers('application/json'), body: JSON.stringify({ path: 'late' }) });
                assert.equal(after.status, 404, after.body.toString());
                assert.equal((await api('GET', `/sandboxes/${id}`)).status, 404);
                const sessions = await socketRequest(d.adminSocket, { cmd: 'sessions.list' });
                assert.ok(sessions.ok, JSON.stringify(sessions));
                assert.ok(!JSON.stringify(sessions.result).includes(`e2b-${id}`), `the killed sandbox came back: ${JSON.stringify(sessions.result)}`);
        });

        describe('hostile', () => {
                let id, token;
                const api = (key, method, p, body, extra = {}) =>
                        request(ca, port, method, p, {
                                headers: { 'X-API-Key': key, 'Content-Type': 'application/json', ...extra },
                                body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
                        });
                const envd = (tok, p, body, type = 'application/json', sandbox = id) =>
                        request(ca, port, 'POST', p, {
                                headers: {
                                        'E2b-Sandbox-Id': sandbox,
                                        'E2b-Sandbox-Port': '49983',
                                        ...(tok ? { 'X-Access-Token': tok } : {}),
                                        'Content-Type': type,
                                },
                                body,
                        });

                before(async () => {
                        const r = await api(keyA, 'POST', '/sandboxes', { templateID: 'base', timeout: 600 });
                        assert.equal(r.status, 201, r.body.toString());
                        ({ sandboxID: id, envdAccessToken: token } = JSON.parse(r.body));
                        assert.ok(token);
                });

                after(async () => {
                        if (id) await api(keyA, 'DELETE', `/sandboxes/${id}`);
                });

                test('another tenant\'s key: every control route answers 404', async () => {
                        const routes = [
                                ['GET', `/sandboxes/${id}`],
                                ['DELETE', `/sandboxes/${id}`],
                                ['POST', `/sandboxes/${id}/connect`, { timeout: 10 }],
                                ['POST', `/sandboxes/${id}/pause`, {}],
                                ['POST', `/sandboxes/${id}/resume`, { timeout: 10 }],
                                ['POST', `/sandboxes/${id}/timeout`, { timeout: 10 }],
                                ['POST', `/v2/sandboxes/${id}/connect`, { timeout: 10 }],
                                ['POST', `/sandboxes/${id}/fork`, { timeout: 10 }],
                                ['POST', `/sandboxes/${id}/snapshots`, {}],
                                ['PUT', `/sandboxes/${id}/network`, {}],
                                ['GET', `/sandboxes/${id}/metrics`],
                                ['GET', `/sandboxes/${id}/logs`],
                        ];
                        for (const [m, p, b] of routes) {
                                const r = await api(keyB, m, p, b);
                                assert.equal(r.status, 404, `${m} ${p}: ${r.status} ${r.body}`);
                        }
                        const list = await api(keyB, 'GET', '/v2/sandboxes');
                        assert.equal(list.status, 200);
                        assert.deepEqual(JSON.parse(list.body), []);
                        // and the sandbox is untouched
                        const mine = await api(keyA, 'GET', `/sandboxes/${id}`);
                        assert.equal(mine.status, 200);
                        assert.equal(JSON.parse(mine.body).state, 'running');
                });

                test('no key, or a wrong one: 401', async () => {
                        const r = await request(ca, port, 'GET', '/v2/sandboxes');
                        assert.equal(r.status, 401);
                        const w = await api(`e2b_${'0'.repeat(64)}`, 'GET', '/v2/sandboxes');
                        assert.equal(w.status, 401);
                });

                test('another tenant\'s access token, none, or a forged sandbox id: every envd route refuses', async () => {
                        const rB = await api(keyB, 'POST', '/sandboxes', { templateID: 'base', timeout: 600 });
                        assert.equal(rB.status, 201, rB.body.toString());
                        const b = JSON.parse(rB.body);
                        try {
                                const paths = [
                                        '/process.Process/List',
                                        '/process.Process/SendInput',
                                        '/process.Process/SendSignal',
                                        '/process.Process/CloseStdin',
                                        '/process.Process/Update',
                                        '/filesystem.Filesystem/Stat',
                                        '/filesystem.Filesystem/ListDir',
                                        '/filesystem.Filesystem/MakeDir',
                                        '/filesystem.Filesystem/Remove',
                                        '/filesystem.Filesystem/Move',
                                ];
                                for (const p of paths) {
                                        // B's token on A's sandbox, and A's sandbox id with B's own token
                                        const r1 = await envd(b.envdAccessToken, p, '{}');
                                        assert.equal(r1.status, 404, `${p}: ${r1.status} ${r1.body}`);
                                        const r2 = await envd(null, p, '{}');
                                        assert.equal(r2.status, 401, `${p}: ${r2.status} ${r2.body}`);
                                }
                                const start = await envd(
                                        b.envdAccessToken,
                                        '/process.Process/Start',
                                        envelope({ process: { cmd: '/bin/bash', args: ['-c', 'touch /workspace/pwned'] } }),
                                        'application/connect+json',
                                );
                                assert.equal(start.status, 404);
                                const connect = await envd(
                                        b.envdAccessToken,
                                        '/process.Process/Connect',
                                        envelope({ process: { pid: 1 } }),
                                        'application/connect+json',
                                );
                                assert.equal(connect.status, 404);
                                for (const [m, p, sport] of [
                                        ['GET', '/files?path=/home/user/x', '49983'],
                                        ['POST', '/files?path=/home/user/x', '49983'],
                                        ['GET', '/health', '49983'],
                                        ['POST', '/execute', '49999'],
                                        ['POST', '/contexts', '49999'],
                                        ['GET', '/contexts', '49999'],
                                        ['POST', '/contexts/py0123/restart', '49999'],
                                        ['DELETE', '/contexts/py0123', '49999'],
                                ]) {
                                        const r = await request(ca, port, m, p, {
                                                headers: {
                                                        'E2b-Sandbox-Id': id,
                                                        'E2b-Sandbox-Port': sport,
                                                        'X-Access-Token': b.envdAccessToken,
                                                        'Content-Type': 'application/octet-stream',
                                                },
                                                body: m === 'POST' ? (sport === '49999' ? '{"code": "open(\'/workspace/pwned\', \'w\')"}' : 'x') : undefined,
                                        });
                                        assert.equal(r.status, 404, `${m} ${p}: ${r.status}`);
                                }
                                // nothing ran in A's sandbox
                                const ls = await envd(token, '/filesystem.Filesystem/ListDir', JSON.stringify({ path: '/home/user' }));
                                assert.equal(ls.status, 200, ls.body.toString());
                                assert.deepEqual(JSON.parse(ls.body).entries, []);
                        } finally {
                                await api(keyB, 'DELETE', `/sandboxes/${b.sandboxID}`);
                        }
                });

                test('malformed JSON and Connect envelopes: a clear 400, nothing changes', async () => {
                        const bad = await api(keyA, 'POST', '/sandboxes', '{"templateID": "base",');
                        assert.equal(bad.status, 400);
                        assert.match(JSON.parse(bad.body).message, /JSON/);
                        const unknownTemplate = await api(keyA, 'POST', '/sandboxes', { templateID: 'nope' });
                        assert.equal(unknownTemplate.status, 400);
                        assert.match(JSON.parse(unknownTemplate.body).message, /base, code-interpreter-v1/);
                        const unknownField = await api(keyA, 'POST', '/sandboxes', { templateID: 'base', bogus: 1 });
                        assert.equal(unknownField.status, 400);
                        const forkBogus = await api(keyA, 'POST', `/sandboxes/${id}/fork`, { count: 1, bogus: 1 });
                        assert.equal(forkBogus.status, 400);
                        assert.match(JSON.parse(forkBogus.body).message, /unknown field bogus/);
                        for (const body of [{ count: 0 }, { count: 11 }, { count: 1.5 }, { timeout: 'x' }, '{"count": 1,']) {
                                const r = await api(keyA, 'POST', `/sandboxes/${id}/fork`, body);
                                assert.equal(r.status, 400, `fork ${JSON.stringify(body)}: ${r.status} ${r.body}`);
                        }
                        // one rule for every timeout: whole seconds, 1 (0 for setTimeout) to SESSSPEC_TTL_MAX_S
                        for (const [route, body, floor] of [
                                ['/sandboxes', { templateID: 'base', timeout: 1.5 }, 1],
                                ['/sandboxes', { templateID: 'base', timeout: 0 }, 1],
                                [`/sandboxes/${id}/fork`, { timeout: 0 }, 1],
                                [`/sandboxes/${id}/timeout`, { timeout: -1 }, 0],
                                ['/sandboxes', { templateID: 'snap-0123456789abcdef', timeout: '10' }, 1],
                        ]) {
                                const r = await api(keyA, 'POST', route, body);
                                assert.equal(r.status, 400, `${route} ${JSON.stringify(body)}: ${r.status} ${r.body}`);
                                assert.match(JSON.parse(r.body).message, new RegExp(`timeout must be whole seconds, ${floor}-\\d+`));
                        }
                        const noSnap = await api(keyA, 'POST', '/sandboxes', { templateID: 'snap-0123456789abcdef', timeout: 10 });
                        assert.equal(noSnap.status, 400, noSnap.body.toString());
                        assert.match(JSON.parse(noSnap.body).message, /unknown template or snapshot/);
                        const snapMeta = await api(keyA, 'POST', '/sandboxes', { templateID: 'snap-0123456789abcdef', metadata: { a: 'b' } });
                        assert.equal(snapMeta.status, 400);
                        assert.match(JSON.parse(snapMeta.body).message, /metadata cannot be given with a snapshot/);
                        const snapBogus = await api(keyA, 'POST', `/sandboxes/${id}/snapshots`, { name: 'x', bogus: 1 });
                        assert.equal(snapBogus.status, 400);
                        assert.match(JSON.parse(snapBogus.body).message, /unknown field bogus/);
                        for (const q of ['start=abc', 'end=-1', 'start=1e3']) {
                                const r = await api(keyA, 'GET', `/sandboxes/${id}/metrics?${q}`);
                                assert.equal(r.status, 400, `metrics ?${q}: ${r.status} ${r.body}`);
                        }
                        const list = await api(keyA, 'GET', '/v2/sandboxes');
                        assert.equal(JSON.parse(list.body).length, 1, 'a refused create or fork made a sandbox');

                        const unary = await envd(token, '/filesystem.Filesystem/ListDir', '{"path": ');
                        assert.equal(unary.status, 400);
                        assert.equal(JSON.parse(unary.body).code, 'invalid_argument');
                        const shortEnv = await envd(token, '/process.Process/Start', Buffer.from([0, 0, 0]), 'application/connect+json');
                        const f1 = frames(shortEnv.body);
                        assert.equal(f1.at(-1).flags, 2);
                        assert.equal(f1.at(-1).msg.error.code, 'invalid_argument');
                        const liar = Buffer.concat([envelope({ process: { cmd: 'true' } }), Buffer.from('xx')]);
                        const f2 = frames((await envd(token, '/process.Process/Start', liar, 'application/connect+json')).body);
                        assert.equal(f2.at(-1).msg.error.code, 'invalid_argument');
                        const running = await envd(token, '/process.Process/List', '{}');
                        assert.deepEqual(JSON.parse(running.body).processes, []);
                });

                test('a Start stream: start, output, end, end-of-stream envelope', async () => {
                        const r = await envd(
                                token,
                                '/process.Process/Start',
                                envelope({ process: { cmd: '/bin/bash', args: ['-l', '-c', 'printf abc; exit 4'] } }),
                                'application/connect+json',
                        );
                        assert.equal(r.status, 200);
                        const f = frames(r.body);
                        assert.ok(f[0].msg.event.start.pid > 0);
                        const data = f.filter((x) => x.msg.event?.data?.stdout).map((x) => Buffer.from(x.msg.event.data.stdout, 'base64'));
                        assert.equal(Buffer.concat(data).toString(), 'abc');
                        const end = f.find((x) => x.msg.event?.end);
                        assert.equal(end.msg.event.end.exitCode, 4);
                        assert.equal(f.at(-1).flags, 2);
                        assert.deepEqual(f.at(-1).msg, {});
                });

                test('bodies and uploads are capped', async () => {
                        const big = await api(keyA, 'POST', '/sandboxes', JSON.stringify({ templateID: 'base', metadata: { x: 'y'.repeat(300 * 1024) } }));
                        assert.equal(big.status, 413);
                        const up = await request(ca, port, 'POST', '/files?path=/home/user/big.bin', {
                                headers: {
                                        'E2b-Sandbox-Id': id,
                                        'E2b-Sandbox-Port': '49983',
                                        'X-Access-Token': token,
                                        'Content-Type': 'application/octet-stream',
                                        // past the 64 MiB cap, refused from the headers: the body never sent
                                        'Content-Length': String(1024 * 1024 * 1024),
                                },
                                body: Buffer.alloc(64 * 1024, 1),
                        }).catch((e) => ({ status: 'reset', error: e }));
                        assert.ok(up.status === 413 || up.status === 'reset', `upload past the cap: ${up.status} ${up.body}`);
                        const ls = await envd(token, '/filesystem.Filesystem/ListDir', JSON.stringify({ path: '/home/user' }));
                        assert.ok(!JSON.stringify(JSON.parse(ls.body)).includes('big.bin'));
                });

                test('PTY sizes out of range or missing: a client error, nothing runs', async () => {
                        for (const pty of [{ size: { cols: 0, rows: 24 } }, { size: { cols: 80, rows: 1001 } }, { size: { cols: 80 } }, {}]) {
                                const r = await envd(
                                        token,
                                        '/process.Process/Start',
                                        envelope({ process: { cmd: '/bin/sh', args: ['-c', 'touch /workspace/ran'] }, pty }),
                                        'application/connect+json',
                                );
                                const f = frames(r.body);
                                assert.equal(f.length, 1, `${JSON.stringify(pty)}: ${r.body}`);
                                assert.equal(f[0].msg.error?.code, 'invalid_argument', `${JSON.stringify(pty)}: ${r.body}`);
                        }
                        // a terminal to resize: Update refuses a bad size and takes a good one
                        const started = envd(
                                token,
                                '/process.Process/Start',
                                envelope({ process: { cmd: '/bin/sh', args: ['-c', 'read x; stty size'] }, pty: { size: { cols: 80, rows: 24 } } }),
                                'application/connect+json',
                        );
                        let pid = 0;
                        for (const until = Date.now() + 60000; !pid && Date.now() < until; ) {
                                const l = await envd(token, '/process.Process/List', '{}');
                                pid = JSON.parse(l.body).processes[0]?.pid ?? 0;
                                if (!pid) await new Promise((r) => setTimeout(r, 50));
                        }
                        assert.ok(pid > 0, 'the PTY process never appeared in List');
                        const update = (size) =>
                                envd(token, '/process.Process/Update', JSON.stringify({ process: { pid }, pty: { size } }));
                        for (const size of [{ cols: 0, rows: 5 }, { cols: 5, rows: 70000 }, { cols: 'x', rows: 5 }]) {
                                const r = await update(size);
                                assert.equal(r.status, 400, `${JSON.stringify(size)}: ${r.status} ${r.body}`);
                                assert.equal(JSON.parse(r.body).code, 'invalid_argument');
                        }
                        const ok = await update({ cols: 33, rows: 11 });
                        assert.equal(ok.status, 200, ok.body.toString());
                        const input = await envd(
                                token,
                                '/process.Process/SendInput',
                                JSON.stringify({ process: { pid }, input: { pty: Buffer.from('go\n').toString('base64') } }),
                        );
                        assert.equal(input.status, 200, input.body.toString());
                        const f = frames((await started).body);
                        const pty = Buffer.concat(f.filter((x) => x.msg.event?.data?.pty).map((x) => Buffer.from(x.msg.event.data.pty, 'base64')));
                        assert.match(pty.toString(), /11 33/);
                        assert.ok(!f.some((x) => x.msg.event?.data?.stdout), 'a PTY sent stdout data');
                        assert.equal(f.find((x) => x.msg.event?.end)?.msg.event.end.exitCode, 0);
                        const none = await envd(token, '/filesystem.Filesystem/Stat', JSON.stringify({ path: '/home/user/ran' }));
                        assert.equal(none.status, 404, 'a refused PTY start ran its command');
                });

                /** Start cmd with args and gather its stdout. */
                const start = async (cmd, args) => {
                        const r = await envd(token, '/process.Process/Start', envelope({ process: { cmd, args } }), 'application/connect+json');
                        assert.equal(r.status, 200);
                        const f = frames(r.body);
                        assert.deepEqual(f.at(-1).msg, {}, JSON.stringify(f.at(-1).msg));
                        return Buffer.concat(
                                f.filter((x) => x.msg.event?.data?.stdout).map((x) => Buffer.from(x.msg.event.data.stdout, 'base64')),
                        ).toString();
                };

                test('Start execs cmd and args as an argv: no shell reads them', async () => {
                        // $0 is what was exec'd: a shell line would have run the script under sh
                        assert.equal(await start('/bin/bash', ['-l', '-c', 'echo "$0"']), '/bin/bash\n');
                        assert.equal(await start('/bin/echo', ['a;b', '$(id)', "it's", '']), "a;b $(id) it's \n");
                        const none = await envd(token, '/process.Process/Start', envelope({ process: { cmd: '/nonexistent/x' } }), 'application/connect+json');
                        const end = frames(none.body).find((x) => x.msg.event?.end);
                        assert.notEqual(end?.msg.event.end.exitCode, 0, 'a missing program ran');
                });

                test('MakeDir, Remove and Move never follow a link the sandbox planted', async () => {
                        await start('/bin/sh', ['-c', 'mkdir -p /tmp/outside/d && echo k > /tmp/outside/keep && ln -s /tmp/outside /workspace/ln']);
                        const calls = [
                                ['/filesystem.Filesystem/Remove', { path: '/home/user/ln/keep' }],
                                ['/filesystem.Filesystem/Remove', { path: '/home/user/ln/d' }],
                                ['/filesystem.Filesystem/MakeDir', { path: '/home/user/ln/made' }],
                                ['/filesystem.Filesystem/Move', { source: '/home/user/ln/keep', destination: '/home/user/stolen' }],
                                ['/filesystem.Filesystem/Move', { source: '/home/user/ln', destination: '/home/user/ln/d/x' }],
                        ];
                        for (const [p, body] of calls) {
                                const r = await envd(token, p, JSON.stringify(body));
                                assert.equal(r.status, 400, `${p} ${JSON.stringify(body)}: ${r.status} ${r.body}`);
                                assert.equal(JSON.parse(r.body).code, 'invalid_argument');
                        }
                        assert.equal(await start('/bin/sh', ['-c', 'cd /tmp/outside && ls -A; ls -A /workspace']), 'd\nkeep\nln\n');
                        // the link itself is the sandbox's: removing it leaves its target alone
                        const rm = await envd(token, '/filesystem.Filesystem/Remove', JSON.stringify({ path: '/home/user/ln' }));
                        assert.equal(rm.status, 200, rm.body.toString());
                        assert.equal(await start('/bin/sh', ['-c', 'ls -A /tmp/outside; ls -A /workspace; rm -rf /tmp/outside']), 'd\nkeep\n');
                });

                test('MakeDir, Move and Remove through the runner: a tree made, moved and removed', async () => {
                        const mk = await envd(token, '/filesystem.Filesystem/MakeDir', JSON.stringify({ path: 'p/q/r' }));
                        assert.equal(mk.status, 200, mk.body.toString());
                        assert.equal(JSON.parse(mk.body).entry.path, '/home/user/p/q/r');
                        const again = await envd(token, '/filesystem.Filesystem/MakeDir', JSON.stringify({ path: '/home/user/p/q/r' }));
                        assert.equal(JSON.parse(again.body).code, 'already_exists');
                        await start('/bin/sh', ['-c', 'echo x > /workspace/p/q/r/f && ln -s /etc /workspace/p/q/etc']);
                        const mv = await envd(token, '/filesystem.Filesystem/Move', JSON.stringify({ source: '/home/user/p', destination: '/home/user/s/t' }));
                        assert.equal(mv.status, 200, mv.body.toString());
                        assert.equal(await start('/bin/sh', ['-c', 'cat /workspace/s/t/q/r/f; readlink /workspace/s/t/q/etc; ls -A /workspace']), 'x\n/etc\ns\n');
                        const missing = await envd(token, '/filesystem.Filesystem/Move', JSON.stringify({ source: '/home/user/nope', destination: '/home/user/n2' }));
                        assert.equal(JSON.parse(missing.body).code, 'not_found');
                        const rm = await envd(token, '/filesystem.Filesystem/Remove', JSON.stringify({ path: '/home/user/s' }));
                        assert.equal(rm.status, 200, rm.body.toString());
                        assert.equal(await start('/bin/sh', ['-c', 'ls -A /workspace; ls /etc/passwd']), '/etc/passwd\n');
                });
        });

        // The watcher calls (envd's CreateWatcher, GetWatcherEvents, RemoveWatcher: the JS SDK 2.x
        // uses WatchDir, so a Connect client here), the watch caps (HUB_WATCH_PER_SESSION 16,
        // HUB_WATCH_PER_USER 64, HUB_WATCH_GLOBAL 256) and an event flood against the bounded queues.
        describe('watchers', () => {
                let key, keyOther, capKeys;
                const made = []; // [key, sandboxID] to kill
                const api = (k, method, p, body) =>
                        request(ca, port, method, p, {
                                headers: { 'X-API-Key': k, 'Content-Type': 'application/json' },
                                body: body === undefined ? undefined : JSON.stringify(body),
                        });
                const mk = async (k) => {
                        const r = await api(k, 'POST', '/sandboxes', { templateID: 'base', timeout: 900 });
                        assert.equal(r.status, 201, r.body.toString());
                        const b = JSON.parse(r.body);
                        made.push([k, b.sandboxID]);
                        return { id: b.sandboxID, token: b.envdAccessToken, key: k };
                };
                const kill = async (s) => {
                        const r = await api(s.key, 'DELETE', `/sandboxes/${s.id}`);
                        assert.equal(r.status, 204, r.body.toString());
                };
                /** A unary filesystem call in sandbox s (token: s's own unless given): { status, body }. */
                const fsCall = async (s, method, body, token = s.token) => {
                        const r = await request(ca, port, 'POST', `/filesystem.Filesystem/${method}`, {
                                headers: { 'E2b-Sandbox-Id': s.id, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': token, 'Content-Type': 'application/json' },
                                body: JSON.stringify(body),
                        });
                        const text = r.body.toString();
                        return { status: r.status, body: text ? JSON.parse(text) : {} };
                };
                /** Run argv in s to its end through Start; its stdout. */
                const run = async (s, args) => {
                        const r = await request(ca, port, 'POST', '/process.Process/Start', {
                                headers: { 'E2b-Sandbox-Id': s.id, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': s.token, 'Content-Type': 'application/connect+json' },
                                body: envelope({ process: { cmd: '/bin/sh', args: ['-c', args] } }),
                        });
                        assert.equal(r.status, 200, r.body.toString());
                        const f = frames(r.body);
                        assert.deepEqual(f.at(-1).msg, {}, JSON.stringify(f.at(-1).msg));
                        const end = f.find((x) => x.msg.event?.end)?.msg.event.end;
                        assert.equal(end?.exitCode, 0, JSON.stringify(f.map((x) => x.msg)));
                        return Buffer.concat(f.filter((x) => x.msg.event?.data?.stdout).map((x) => Buffer.from(x.msg.event.data.stdout, 'base64'))).toString();
                };
                const create = async (s, path, recursive = false) => fsCall(s, 'CreateWatcher', { path, recursive });
                /** Poll watcher id of s until an event matches pred (30 s at most): every event seen. */
                const pollUntil = async (s, id, pred, what) => {
                        const seen = [];
                        const until = Date.now() + 30000;
                        for (;;) {
                                const r = await fsCall(s, 'GetWatcherEvents', { watcherId: id });
                                assert.equal(r.status, 200, JSON.stringify(r.body));
                                seen.push(...r.body.events);
                                if (seen.some(pred)) return seen;
                                if (Date.now() > until) throw new Error(`never saw ${what} in ${JSON.stringify(seen)}`);
                                await new Promise((res) => setTimeout(res, 100));
                        }
                };
                const daemonRss = () => Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${d.proc.pid}/status`, 'utf8'))[1]) * 1024;

                before(async () => {
                        const mint = async (user) => {
                                const r = await socketRequest(d.adminSocket, { cmd: 'token.create', user, role: 'agent', format: 'e2b' });
                                assert.ok(r.ok, JSON.stringify(r));
                                return r.result.token;
                        };
                        key = await mint('e2b-watcher');
                        keyOther = await mint('e2b-watcher-other');
                        capKeys = await Promise.all([0, 1, 2, 3].map((i) => mint(`e2b-watcher-cap${i}`)));
                });

                after(async () => {
                        for (const [k, id] of made) await api(k, 'DELETE', `/sandboxes/${id}`);
                });

                test('CreateWatcher, GetWatcherEvents, RemoveWatcher: events polled; the id is its sandbox\'s alone; a removed one is gone', async () => {
                        const [a, a2, b] = await Promise.all([mk(key), mk(key), mk(keyOther)]);
                        await run(a, 'mkdir -p /workspace/pw');
                        const c = await create(a, '/home/user/pw');
                        assert.equal(c.status, 200, JSON.stringify(c.body));
                        assert.match(c.body.watcherId, /^[0-9a-f]{32}$/);
                        const w = c.body.watcherId;
                        const none = await fsCall(a, 'GetWatcherEvents', { watcherId: w });
                        assert.deepEqual([none.status, none.body], [200, { events: [] }]);
                        await run(a, 'echo hi > /workspace/pw/one.txt');
                        const seen = await pollUntil(a, w, (e) => e.name === 'one.txt' && e.type === 'EVENT_TYPE_WRITE', 'the write');
                        assert.ok(seen.some((e) => e.name === 'one.txt' && e.type === 'EVENT_TYPE_CREATE'), JSON.stringify(seen));
                        // another sandbox of the same tenant, and another tenant's: not found, and nothing taken
                        await run(a, 'echo hi > /workspace/pw/two.txt');
                        for (const other of [a2, b]) {
                                for (const m of ['GetWatcherEvents', 'RemoveWatcher']) {
                                        const r = await fsCall(other, m, { watcherId: w });
                                        assert.equal(r.status, 404, `${m} from another sandbox: ${JSON.stringify(r.body)}`);
                                        assert.equal(r.body.code, 'not_found');
                                }
                        }
                        // the other tenant's token on this sandbox's id: refused before any watcher is looked at
                        const forged = await fsCall(a, 'GetWatcherEvents', { watcherId: w }, b.token);
                        assert.notEqual(forged.status, 200, JSON.stringify(forged.body));
                        // the events were not taken by those calls: still here for the owner
                        await pollUntil(a, w, (e) => e.name === 'two.txt' && e.type === 'EVENT_TYPE_CREATE', 'two.txt');
                        // malformed: no id, or an id of nobody
                        assert.equal((await fsCall(a, 'GetWatcherEvents', {})).body.code, 'not_found');
                        assert.equal((await fsCall(a, 'GetWatcherEvents', { watcherId: '0'.repeat(32) })).body.code, 'not_found');
                        const rm = await fsCall(a, 'RemoveWatcher', { watcherId: w });
                        assert.deepEqual([rm.status, rm.body], [200, {}]);
                        for (const m of ['GetWatcherEvents', 'RemoveWatcher'])
                                assert.equal((await fsCall(a, m, { watcherId: w })).body.code, 'not_found', `${m} after the remove`);
                        // outside the home, and a missing directory, as WatchDir
                        assert.equal((await create(a, '/etc')).body.code, 'invalid_argument');
                        assert.equal((await create(a, '/home/user/missing')).body.code, 'not_found');
                        await Promise.all([kill(a), kill(a2), kill(b)]);
                });

                test('an event flood: the queue stays bounded, the loss is reported and the watcher goes on; the daemon\'s memory stays flat', async () => {
                        const s = await mk(key);
                        await run(s, 'mkdir -p /workspace/flood');
                        const c = await create(s, '/home/user/flood');
                        assert.equal(c.status, 200, JSON.stringify(c.body));
                        const w = c.body.watcherId;
                        const rssBefore = daemonRss();
                        // 20,000 files with 200-byte names, twice over (create, write; then remove): about
                        // 12 MB of names through the runner's watch, nobody polling
                        const out = await run(
                                s,
                                'cd /workspace/flood && python3 -c "\nimport os\nfor i in range(20000):\n    n = str(i).rjust(200, chr(120))\n    with open(n, chr(119)) as f: f.write(chr(121))\nfor n in os.listdir(): os.unlink(n)\nprint(len(os.listdir()))"',
                        );
                        assert.equal(out, '0\n');
                        const lost = await fsCall(s, 'GetWatcherEvents', { watcherId: w });
                        assert.equal(lost.status, 429, JSON.stringify(lost.body));
                        assert.equal(lost.body.code, 'resource_exhausted');
                        assert.match(lost.body.message, /events were lost.*the watcher goes on/);
                        const rssAfter = daemonRss();
                        console.log(`flood: daemon VmRSS ${rssBefore} -> ${rssAfter} bytes`);
                        // the daemon holds at most HUB_WATCH_QUEUE (512) events and 64 KiB of names per watch
                        assert.ok(rssAfter - rssBefore < 8 * 1024 * 1024, `the daemon's RSS grew by ${rssAfter - rssBefore} bytes`);
                        // the watcher goes on. The runner may still be passing on the flood's tail (the
                        // kernel's queue), so a later poll can report another loss, which hides whatever
                        // came before it, a marker too: after each loss a new marker, until one is seen
                        // (the tail is finite); every answer holds at most HUB_WATCH_QUEUE events
                        const answers = [];
                        const until = Date.now() + 60000;
                        let marked = false;
                        for (let k = 0; !marked; k++) {
                                await run(s, `echo after > /workspace/flood/after-${k}.txt`);
                                for (;;) {
                                        const r = await fsCall(s, 'GetWatcherEvents', { watcherId: w });
                                        answers.push(r.status === 200 ? r.body.events.length : r.status);
                                        if (r.status === 429) {
                                                assert.match(r.body.message, /events were lost/);
                                                break;
                                        }
                                        assert.equal(r.status, 200, JSON.stringify(r.body));
                                        assert.ok(r.body.events.length <= 512, `one poll gave ${r.body.events.length} events`);
                                        if (r.body.events.some((e) => /^after-\d+\.txt$/.test(e.name))) {
                                                marked = true;
                                                break;
                                        }
                                        if (Date.now() > until) throw new Error(`no marker seen after the flood: ${answers}`);
                                        await new Promise((res) => setTimeout(res, 100));
                                }
                        }
                        console.log(`flood: polls after the first loss (events, or 429 for a loss): ${answers}`);
                        await kill(s);
                });

                test('the caps: 16 watches per sandbox, 64 per user, 256 in the daemon; a killed sandbox\'s watchers give theirs back', async () => {
                        // 16 sandboxes of four users hold 16 watches each: 64 per user, 256 in all
                        const boxes = await Promise.all(Array.from({ length: 16 }, (_, i) => mk(capKeys[i % 4])));
                        const spare = await mk(capKeys[0]); // a fifth sandbox of a user at its cap
                        const last = await mk(key); // another user's
                        await Promise.all([...boxes, spare, last].map((s) => run(s, 'mkdir -p /workspace/cap')));
                        const ids = await Promise.all(
                                boxes.slice(0, 16).map(async (s) => {
                                        const mine = [];
                                        for (let i = 0; i < 16; i++) {
                                                const r = await create(s, '/home/user/cap');
                                                assert.equal(r.status, 200, `watcher ${i} of ${s.id}: ${JSON.stringify(r.body)}`);
                                                mine.push(r.body.watcherId);
                                        }
                                        return mine;
                                }),
                        );
                        // the 17th in a sandbox: refused by the session's cap
                        const seventeenth = await create(boxes[0], '/home/user/cap');
                        assert.equal(seventeenth.body.code, 'resource_exhausted', JSON.stringify(seventeenth.body));
                        assert.match(seventeenth.body.message, /the session has 16 directory watches/);
                        // a user's fifth sandbox, with none of its own: refused by the user's cap
                        const over = await create(spare, '/home/user/cap');
                        assert.equal(over.body.code, 'resource_exhausted', JSON.stringify(over.body));
                        assert.match(over.body.message, /the user has 64 directory watches/);
                        // 256 held in all: another user's sandbox with none is refused by the daemon's cap,
                        // through CreateWatcher and through WatchDir alike
                        const full = await create(last, '/home/user/cap');
                        assert.equal(full.body.code, 'resource_exhausted', JSON.stringify(full.body));
                        assert.match(full.body.message, /the daemon has 256 directory watches/);
                        const stream = await request(ca, port, 'POST', '/filesystem.Filesystem/WatchDir', {
                                headers: { 'E2b-Sandbox-Id': last.id, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': last.token, 'Content-Type': 'application/connect+json' },
                                body: envelope({ path: '/home/user/cap' }),
                        });
                        const end = frames(stream.body).at(-1);
                        assert.equal(end.flags, 2);
                        assert.equal(end.msg.error?.code, 'resource_exhausted', JSON.stringify(end.msg));
                        // one removed: room for one
                        assert.equal((await fsCall(boxes[0], 'RemoveWatcher', { watcherId: ids[0][0] })).status, 200);
                        const one = await create(last, '/home/user/cap');
                        assert.equal(one.status, 200, JSON.stringify(one.body));
                        assert.equal((await create(last, '/home/user/cap')).body.code, 'resource_exhausted');
                        // a killed sandbox's 16 watchers can never be polled again: the next CreateWatcher
                        // finds their watches ended and gives them back
                        await kill(boxes[1]);
                        for (let i = 0; i < 15; i++) {
                                const r = await create(last, '/home/user/cap');
                                assert.equal(r.status, 200, `watcher ${i + 2} of the last sandbox after the kill: ${JSON.stringify(r.body)}`);
                        }
                        await Promise.all([...boxes.filter((s) => s !== boxes[1]), spare, last].map(kill));
                        // every watch given back: a new sandbox gets its 16 again
                        const fresh = await mk(key);
                        await run(fresh, 'mkdir -p /workspace/cap');
                        for (let i = 0; i < 16; i++)
                                assert.equal((await create(fresh, '/home/user/cap')).status, 200, `watcher ${i} of a new sandbox`);
                        await kill(fresh);
                });
        });
});
