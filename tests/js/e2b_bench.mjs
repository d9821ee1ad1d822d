// e2b_bench.mjs — `scripts/bench.sh --only e2b` (issue 36's speed goals): the
// official E2B SDK (`e2b`, `@e2b/code-interpreter`, pinned in
// tests/package-lock.json) against a real sandboxd over HTTPS on loopback,
// beside sandboxd's own API and plain Docker, samples interleaved in one run:
//   e2b_create_first_command  Sandbox.create() + commands.run('true'), the
//                             pool warm (refilled between samples), against
//                             the Engine API's create + start + exec of a
//                             plain container of the same image
//   e2b_commands_run          commands.run('true') on a running sandbox,
//                             against POST /v1/exec of the same argv (the
//                             SDK's `/bin/bash -l -c true`) in the same
//                             session, /v1/exec of `true` alone (what the
//                             login shell costs: v1_exec_true) and the Engine
//                             API's exec of `true` in a plain container
//   e2b_run_code              runCode('1+1') on a warm context, against
//                             POST /v1/run_cell of the same in the same context
// BENCH_IMAGE runs the daemon's sessions on another image (an image change
// measured before it is tagged sandboxd/python:latest).
// Prints a table (p50, p95 in ms) and writes JSON to the path given as the
// first argument. The daemon (instance SANDBOXD_TEST_RUN) and the baseline
// containers (label sandboxd.bench=SANDBOXD_TEST_RUN) are removed on exit.
//
// The SDK reads NODE_EXTRA_CA_CERTS only when node starts, so the driver
// starts the daemon and runs this same file again as the client (--client).
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { Daemon, RUN_ID, socketRequest } from './harness.mjs';

const HERE = fileURLToPath(import.meta.url);
const IMAGE = 'sandboxd/python:latest';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function pct(xs, p) {
        const s = [...xs].sort((a, b) => a - b);
        return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
}

async function timed(fn) {
        const t0 = process.hrtime.bigint();
        await fn();
        return Number(process.hrtime.bigint() - t0) / 1e6;
}

/** One Engine API call on the Docker socket: { status, body }. */
function docker(method, p, body) {
        return new Promise((resolve, reject) => {
                const req = http.request(
                        { socketPath: process.env.SANDBOXD_DOCKER_SOCKET || '/var/run/docker.sock', path: p, method,
                          headers: body ? { 'Content-Type': 'application/json' } : {}, timeout: 60000 },
                        (res) => {
                                const chunks = [];
                                res.on('data', (c) => chunks.push(c));
                                res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks) }));
                                res.on('error', reject);
                        },
                );
                req.on('error', reject);
                req.on('timeout', () => req.destroy(new Error(`docker ${method} ${p}: no answer in 60 s`)));
                req.end(body ? JSON.stringify(body) : undefined);
        });
}

async function dockerCreateStart() {
        const c = await docker('POST', '/containers/create', {
                Image: IMAGE,
                Cmd: ['sleep', 'infinity'],
                Labels: { 'sandboxd.bench': RUN_ID },
                HostConfig: { NetworkMode: 'none', CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'] },
        });
        if (c.status !== 201) throw new Error(`docker create: ${c.status} ${c.body}`);
        const id = JSON.parse(c.body).Id;
        const s = await docker('POST', `/containers/${id}/start`);
        if (s.status !== 204) throw new Error(`docker start: ${s.status} ${s.body}`);
        return id;
}

async function dockerExecTrue(id) {
        const e = await docker('POST', `/containers/${id}/exec`, { Cmd: ['true'], AttachStdout: true, AttachStderr: true });
        if (e.status !== 201) throw new Error(`docker exec create: ${e.status} ${e.body}`);
        const r = await docker('POST', `/exec/${JSON.parse(e.body).Id}/start`, { Detach: false, Tty: false });
        if (r.status !== 200) throw new Error(`docker exec start: ${r.status} ${r.body}`);
}

async function dockerRemove(id) {
        await docker('DELETE', `/containers/${id}?force=1&v=1`);
}

/** POST /v1/<method> on the daemon's HTTPS front; ok(result) says whether it went right. */
function api(method, params, ok) {
        const body = JSON.stringify(params);
        return new Promise((resolve, reject) => {
                const req = https.request(
                        { hostname: '127.0.0.1', port: Number(process.env.E2B_PORT), path: `/v1/${method}`, method: 'POST',
                          headers: { Authorization: `Bearer ${process.env.BENCH_TOKEN}`, 'Content-Type': 'application/json' },
                          timeout: 60000 },
                        (res) => {
                                const chunks = [];
                                res.on('data', (c) => chunks.push(c));
                                res.on('end', () => {
                                        const out = JSON.parse(Buffer.concat(chunks));
                                        if (res.statusCode !== 200 || !ok(out))
                                                reject(new Error(`/v1/${method}: ${res.statusCode} ${JSON.stringify(out)}`));
                                        else resolve();
                                });
                        },
                );
                req.on('error', reject);
                req.on('timeout', () => req.destroy(new Error(`/v1/${method}: no answer in 60 s`)));
                req.end(body);
        });
}

/** /v1/exec of the argv the SDK's commands.run('true') sends (a login bash), so both run the same. */
const apiExec = (session, argv = ['/bin/bash', '-l', '-c', 'true']) => api('exec', { session, argv }, (o) => o.exit_code === 0);
/** /v1/run_cell of 1+1 in the context runCode uses (python's default). */
const apiCell = (session) => api('run_cell', { session, code: '1+1' }, (o) => o.status === 'ok');

async function poolFull() {
        const deadline = Date.now() + 120000;
        for (;;) {
                const r = await socketRequest(process.env.BENCH_ADMIN_SOCKET, { cmd: 'pool' });
                if (r.ok && r.result.pool.ready >= r.result.pool.size) return;
                if (Date.now() > deadline) throw new Error(`the pool did not refill in 120 s: ${JSON.stringify(r)}`);
                await sleep(100);
        }
}

async function client() {
        const { Sandbox } = await import('e2b');
        const { Sandbox: CodeSandbox } = await import('@e2b/code-interpreter');
        const n = Number(process.env.BENCH_N || 50), nCreate = Number(process.env.BENCH_N_CREATE || 10);
        const rows = {};
        const add = (name, key, v) => ((rows[name] ??= {})[key] ??= []).push(v);

        // a new sandbox's first command, the pool warm, against a plain container's
        await poolFull();
        for (let i = 0; i < nCreate; i++) {
                let sbx, id;
                add('e2b_create_first_command', 'sandboxd', await timed(async () => {
                        sbx = await Sandbox.create();
                        await sbx.commands.run('true');
                }));
                await sbx.kill();
                add('e2b_create_first_command', 'docker', await timed(async () => {
                        id = await dockerCreateStart();
                        await dockerExecTrue(id);
                }));
                await dockerRemove(id);
                await poolFull();
        }

        // a command on a running sandbox; the same exec through /v1/exec; docker exec
        const sbx = await Sandbox.create();
        const code = await CodeSandbox.create();
        const base = await dockerCreateStart();
        try {
                const session = `e2b-${sbx.sandboxId}`;
                await sbx.commands.run('true');
                await apiExec(session);
                await dockerExecTrue(base);
                await code.runCode('1+1');
                await apiCell(`e2b-${code.sandboxId}`);
                for (let i = 0; i < n; i++) {
                        add('e2b_commands_run', 'sandboxd', await timed(() => sbx.commands.run('true')));
                        add('e2b_commands_run', 'v1_exec', await timed(() => apiExec(session)));
                        add('e2b_commands_run', 'v1_exec_true', await timed(() => apiExec(session, ['true'])));
                        add('e2b_commands_run', 'docker', await timed(() => dockerExecTrue(base)));
                        add('e2b_run_code', 'sandboxd', await timed(async () => {
                                const r = await code.runCode('1+1');
                                if (r.text !== '2') throw new Error(`runCode('1+1'): ${JSON.stringify(r)}`);
                        }));
                        add('e2b_run_code', 'v1_run_cell', await timed(() => apiCell(`e2b-${code.sandboxId}`)));
                }
        } finally {
                await sbx.kill();
                await code.kill();
                await dockerRemove(base);
        }
        const out = {};
        for (const [name, r] of Object.entries(rows)) {
                out[name] = {};
                for (const [k, xs] of Object.entries(r))
                        out[name][k] = { n: xs.length, p50_ms: +pct(xs, 50).toFixed(2), p95_ms: +pct(xs, 95).toFixed(2) };
        }
        console.log(JSON.stringify(out));
}

async function driver(jsonPath) {
        const d = new Daemon();
        d.env.SANDBOXD_POOL_SIZE = '2';
        d.env.SANDBOXD_POOL_WAIT = '0';
        // an image not yet tagged latest (an A/B of an image change); the baselines stay on IMAGE
        if (process.env.BENCH_IMAGE) d.env.SANDBOXD_IMAGE = process.env.BENCH_IMAGE;
        let failed = false;
        try {
                const { port } = await d.startHttps();
                const key = await socketRequest(d.adminSocket, { cmd: 'token.create', user: 'bench', role: 'agent', format: 'e2b' });
                const tok = await socketRequest(d.adminSocket, { cmd: 'token.create', user: 'bench', role: 'agent' });
                if (!key.ok || !tok.ok) throw new Error(`token.create: ${JSON.stringify(key)} ${JSON.stringify(tok)}`);
                const { stdout, stderr, code } = await new Promise((resolve) =>
                        execFile(
                                process.execPath,
                                [HERE, '--client'],
                                {
                                        env: {
                                                ...process.env,
                                                E2B_API_URL: `https://127.0.0.1:${port}`,
                                                E2B_SANDBOX_URL: `https://127.0.0.1:${port}`,
                                                E2B_API_KEY: key.result.token,
                                                NODE_EXTRA_CA_CERTS: path.join(d.dir, 'ca.pem'),
                                                E2B_PORT: String(port),
                                                BENCH_TOKEN: tok.result.token,
                                                BENCH_ADMIN_SOCKET: d.adminSocket,
                                        },
                                        timeout: 900000,
                                        maxBuffer: 1 << 20,
                                },
                                (err, stdout, stderr) => resolve({ stdout, stderr, code: err ? err.code ?? 1 : 0 }),
                        ),
                );
                if (code !== 0) throw new Error(`the client failed (${code}):\n${stderr}\n--- daemon log:\n${d.logTail()}`);
                const out = JSON.parse(stdout.trim().split('\n').pop());
                fs.writeFileSync(jsonPath, JSON.stringify(out, null, 2) + '\n');
                console.log('row                        against      n   p50 ms   p95 ms');
                for (const [name, r] of Object.entries(out))
                        for (const [k, v] of Object.entries(r))
                                console.log(`${name.padEnd(26)} ${k.padEnd(10)} ${String(v.n).padStart(4)} ${v.p50_ms.toFixed(2).padStart(8)} ${v.p95_ms.toFixed(2).padStart(8)}`);
        } catch (e) {
                console.error(`e2b bench: ${e.message}`);
                failed = true;
        } finally {
                await d.stop();
                const ids = await docker('GET', `/containers/json?all=1&filters=${encodeURIComponent(JSON.stringify({ label: [`sandboxd.bench=${RUN_ID}`] }))}`);
                for (const c of JSON.parse(ids.body || '[]')) await dockerRemove(c.Id);
        }
        process.exit(failed ? 1 : 0);
}

if (process.argv[2] === '--client') await client();
else await driver(process.argv[2] || 'bench/results-e2b.json');
