// harness.mjs — a real sandboxd for the MCP end-to-end tests: a private
// data dir and sockets, instance = the test run id (so every container it
// creates can be found and removed), the python sandbox image, and a port
// block of its own. Cleanup is synchronous and idempotent so that it also
// runs from process 'exit' when a test crashes the runner.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const BUILD = path.resolve(ROOT, process.env.SANDBOXD_BUILD_DIR || 'build');
export const DAEMON_BIN = path.join(BUILD, 'sandboxd');
export const MCP_BIN = path.join(BUILD, 'sandboxd-mcp');
/** The tool catalog, schemas/mcp_tools.json: what sandboxd-mcp embeds and tools/list serves. */
export const TOOL_CATALOG = path.join(ROOT, 'schemas', 'mcp_tools.json');
export const readToolCatalog = () => JSON.parse(fs.readFileSync(TOOL_CATALOG, 'utf8'));
export const RUN_ID =
        process.env.SANDBOXD_TEST_RUN || `js${Date.now().toString(36)}${Math.floor(Math.random() * 1e6)}`;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** One JSON line request on a Unix socket; resolves with the parsed reply. */
export function socketRequest(socketPath, obj, timeoutMs = 10000) {
        return new Promise((resolve, reject) => {
                const s = net.createConnection(socketPath);
                let buf = '';
                const timer = setTimeout(() => {
                        s.destroy();
                        reject(new Error(`no reply from ${socketPath}`));
                }, timeoutMs);
                s.on('connect', () => s.write(JSON.stringify(obj) + '\n'));
                s.on('data', (d) => {
                        buf += d.toString('utf8');
                        const nl = buf.indexOf('\n');
                        if (nl >= 0) {
                                clearTimeout(timer);
                                s.end();
                                try {
                                        resolve(JSON.parse(buf.slice(0, nl)));
                                } catch (e) {
                                        reject(e);
                                }
                        }
                });
                s.on('error', (e) => {
                        clearTimeout(timer);
                        reject(e);
                });
        });
}

export class Daemon {
        constructor() {
                this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-mcp-js-'));
                this.apiSocket = path.join(this.dir, 'api.sock');
                this.adminSocket = path.join(this.dir, 'admin.sock');
                this.logFile = path.join(this.dir, 'daemon.log');
                this.instance = RUN_ID;
                // a block of 50 ports somewhere in 10000-13999: below the kernel's ephemeral
                // range (32768-60999), where a client socket could hold one
                // (and away from the defaults, 20000-29999)
                const base = 10000 + Math.floor(Math.random() * 80) * 50;
                this.env = {
                        ...process.env,
                        SANDBOXD_DATA_DIR: path.join(this.dir, 'data'),
                        SANDBOXD_API_SOCKET: this.apiSocket,
                        SANDBOXD_ADMIN_SOCKET: this.adminSocket,
                        SANDBOXD_INSTANCE: this.instance,
                        SANDBOXD_IMAGE: 'sandboxd/python:latest',
                        SANDBOXD_PORT_RANGE: `${base}-${base + 49}`,
                        SANDBOXD_LOG_LEVEL: 'info',
                        SANDBOXD_POOL_SIZE: '0', // the warm pool is off: tests expect lazy creation
                };
                this.proc = null;
                this.cleaned = false;
                this._onExit = () => this.cleanupSync();
                this._onSignal = (sig) => {
                        this.cleanupSync();
                        process.exit(sig === 'SIGINT' ? 130 : 143);
                };
                process.on('exit', this._onExit);
                process.once('SIGINT', this._onSignal);
                process.once('SIGTERM', this._onSignal);
        }

        /** start() with the HTTPS front on 127.0.0.1 (a port of its own) and a
         *  certificate from a CA made here: { ca (PEM), port }. */
        async startHttps() {
                execFileSync(
                        'sh',
                        [
                                '-c',
                                'openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=ca && ' +
                                        'openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1 && ' +
                                        "printf 'subjectAltName=IP:127.0.0.1\\n' >server.ext && " +
                                        'openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial ' +
                                        '-out server.pem -days 2 -extfile server.ext',
                        ],
                        { cwd: this.dir, stdio: 'ignore' },
                );
                this.env.SANDBOXD_HTTP_LISTEN = '127.0.0.1:0';
                this.env.SANDBOXD_HTTP_TLS_CERT = path.join(this.dir, 'server.pem');
                this.env.SANDBOXD_HTTP_TLS_KEY = path.join(this.dir, 'server.key');
                await this.start();
                const m = /HTTPS listening on 127\.0\.0\.1:0 \(port (\d+)\)/.exec(fs.readFileSync(this.logFile, 'utf8'));
                assert.ok(m, `no HTTPS port in the log:\n${this.logTail()}`);
                return { ca: fs.readFileSync(path.join(this.dir, 'ca.pem')), port: Number(m[1]) };
        }

        async start() {
                if (!fs.existsSync(DAEMON_BIN) || !fs.existsSync(MCP_BIN))
                        throw new Error(`build first: ${DAEMON_BIN} and ${MCP_BIN} (SANDBOXD_BUILD_DIR=${BUILD})`);
                fs.mkdirSync(this.env.SANDBOXD_DATA_DIR, { recursive: true });
                const log = fs.openSync(this.logFile, 'a');
                this.proc = spawn(DAEMON_BIN, [], { env: this.env, stdio: ['ignore', log, log] });
                fs.closeSync(log);
                this.exited = new Promise((r) => this.proc.once('exit', (code, sig) => r({ code, sig })));
                const deadline = Date.now() + 60000;
                for (;;) {
                        if (this.proc.exitCode !== null)
                                throw new Error(`sandboxd exited at start:\n${this.logTail()}`);
                        if (fs.existsSync(this.apiSocket) && fs.existsSync(this.adminSocket)) {
                                try {
                                        const r = await socketRequest(this.adminSocket, { cmd: 'health' }, 5000);
                                        if (r.ok) break;
                                } catch {
                                        /* not ready yet */
                                }
                        }
                        if (Date.now() > deadline) throw new Error(`sandboxd did not come up:\n${this.logTail()}`);
                        await sleep(100);
                }
        }

        async createToken(user, role = 'agent') {
                const r = await socketRequest(this.adminSocket, { cmd: 'token.create', user, role });
                if (!r.ok) throw new Error(`token.create: ${JSON.stringify(r.error)}`);
                return r.result.token;
        }

        /** Environment for sandboxd-mcp: the API socket and the token. */
        mcpEnv(token) {
                return {
                        ...process.env,
                        SANDBOXD_API_SOCKET: this.apiSocket,
                        SANDBOXD_TOKEN: token,
                        SANDBOXD_LOG_LEVEL: 'debug',
                };
        }

        logTail(lines = 40) {
                try {
                        return fs.readFileSync(this.logFile, 'utf8').split('\n').slice(-lines).join('\n');
                } catch {
                        return '(no daemon log)';
                }
        }

        async stop() {
                if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) {
                        this.proc.kill('SIGTERM');
                        let timer;
                        const done = await Promise.race([
                                this.exited,
                                new Promise((r) => (timer = setTimeout(() => r(null), 15000))),
                        ]);
                        clearTimeout(timer);
                        if (!done) this.proc.kill('SIGKILL');
                }
                this.cleanupSync();
        }

        /** Kill the daemon, remove every container of this instance, delete the data dir. */
        cleanupSync() {
                if (this.cleaned) return;
                this.cleaned = true;
                process.removeListener('exit', this._onExit);
                process.removeListener('SIGINT', this._onSignal);
                process.removeListener('SIGTERM', this._onSignal);
                try {
                        if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null)
                                this.proc.kill('SIGKILL');
                } catch {
                        /* gone already */
                }
                try {
                        const ids = execFileSync(
                                'docker',
                                ['ps', '-aq', '--filter', `label=sandboxd.instance=${this.instance}`],
                                { encoding: 'utf8', timeout: 30000 },
                        )
                                .split(/\s+/)
                                .filter(Boolean);
                        if (ids.length)
                                execFileSync('docker', ['rm', '-f', '-v', ...ids], { stdio: 'ignore', timeout: 60000 });
                } catch (e) {
                        process.stderr.write(`mcp tests: container cleanup failed: ${e.message}\n`);
                }
                try {
                        fs.rmSync(this.dir, { recursive: true, force: true });
                } catch (e) {
                        process.stderr.write(`mcp tests: cannot remove ${this.dir}: ${e.message}\n`);
                }
        }
}

/** Raw JSON-RPC over the adapter's stdio: send objects, await matching lines. */
export class RawAdapter {
        constructor(args, env) {
                this.proc = spawn(MCP_BIN, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
                this.lines = [];
                this.waiters = [];
                this.stderr = '';
                let buf = '';
                this.proc.stdout.on('data', (d) => {
                        buf += d.toString('utf8');
                        let nl;
                        while ((nl = buf.indexOf('\n')) >= 0) {
                                const line = buf.slice(0, nl);
                                buf = buf.slice(nl + 1);
                                this.lines.push(JSON.parse(line));
                                this._wake();
                        }
                });
                this.proc.stderr.on('data', (d) => (this.stderr += d.toString('utf8')));
                this.exited = new Promise((r) => this.proc.once('exit', (code, sig) => r({ code, sig })));
        }

        _wake() {
                for (const w of [...this.waiters]) {
                        const i = this.lines.findIndex(w.pred);
                        if (i >= 0) {
                                this.waiters.splice(this.waiters.indexOf(w), 1);
                                clearTimeout(w.timer);
                                w.resolve(this.lines.splice(i, 1)[0]);
                        }
                }
        }

        send(obj) {
                this.proc.stdin.write((typeof obj === 'string' ? obj : JSON.stringify(obj)) + '\n');
        }

        next(pred, timeoutMs = 60000) {
                return new Promise((resolve, reject) => {
                        const w = { pred, resolve };
                        w.timer = setTimeout(() => {
                                this.waiters.splice(this.waiters.indexOf(w), 1);
                                reject(new Error(`no matching message in ${timeoutMs} ms; stderr:\n${this.stderr}`));
                        }, timeoutMs);
                        this.waiters.push(w);
                        this._wake();
                });
        }

        reply(id, timeoutMs) {
                return this.next((m) => m.id === id && ('result' in m || 'error' in m), timeoutMs);
        }

        async request(id, method, params, timeoutMs) {
                this.send({ jsonrpc: '2.0', id, method, ...(params === undefined ? {} : { params }) });
                return this.reply(id, timeoutMs);
        }

        close() {
                this.proc.stdin.end();
                return this.exited;
        }

        kill() {
                if (this.proc.exitCode === null) this.proc.kill('SIGKILL');
        }
}

/** An MCP exec of `command` (which first prints "started") aborted once its
 * progress shows "started": the call must be rejected; returns the execution
 * id that the first progress named (undefined if none did). */
export async function execAbortedAfterStart(client, command) {
        const ac = new AbortController();
        let executionId;
        const call = client.callTool({ name: 'exec', arguments: { command } }, undefined, {
                signal: ac.signal,
                onprogress: (p) => {
                        const m = /execution (\S+) started/.exec(p.message ?? '');
                        if (m) executionId = m[1];
                        if ((p.message ?? '').includes('started\n')) ac.abort('enough');
                },
        });
        await assert.rejects(call);
        return executionId;
}

/**
 * exec of a command that prints "tick 1" … "tick n", each only once the test
 * has acknowledged the one before (a file that a second exec in the same
 * session creates). The output's pieces are set by the test, not by how the
 * scheduler spaces a sleep, so the call sends exactly one progress
 * notification per tick after the first ("execution … started").
 * callTool(params, options) is the client's call; args go into both execs
 * (a session). Returns the call's result and the notifications seen.
 */
export async function execPacedTicks(callTool, n, args = {}) {
        const tag = `${process.pid}-${Math.floor(Math.random() * 1e9)}`;
        const ticks = Array.from({ length: n }, (_, i) => i + 1).join(' ');
        const command = `for i in ${ticks}; do echo tick $i; while [ ! -e /tmp/pace-${tag}-$i ]; do sleep 0.05; done; done`;
        const seen = [];
        const acks = [];
        let text = '';
        const result = await callTool(
                { name: 'exec', arguments: { ...args, command } },
                {
                        onprogress: (p) => {
                                seen.push(p);
                                if (seen.length === 1) return; // "execution … started"
                                text += p.message ?? '';
                                for (let lines = text.split('\n').length - 1; acks.length < lines; )
                                        acks.push(
                                                callTool({
                                                        name: 'exec',
                                                        arguments: { ...args, command: `touch /tmp/pace-${tag}-${acks.length + 1}` },
                                                }),
                                        );
                        },
                        resetTimeoutOnProgress: true,
                },
        );
        for (const r of await Promise.all(acks)) assert.equal(r.isError ?? false, false, JSON.stringify(r));
        return { result, seen };
}

/** One HTTPS request to 127.0.0.1:port trusting only ca (the E2B tests' front): { status, headers, body (Buffer) }. */
export function httpsRequest(ca, port, method, urlPath, { headers = {}, body } = {}) {
        return new Promise((resolve, reject) => {
                const req = https.request(
                        { hostname: '127.0.0.1', port, path: urlPath, method, headers, ca, timeout: 60000,
                          // the cert names 127.0.0.1, where the test connects; Host names the sandbox
                          checkServerIdentity: (_host, cert) => tls.checkServerIdentity('127.0.0.1', cert) },
                        (res) => {
                                const chunks = [];
                                res.on('data', (c) => chunks.push(c));
                                res.on('end', () =>
                                        resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }),
                                );
                                res.on('error', reject);
                        },
                );
                req.on('error', reject);
                req.on('timeout', () => req.destroy(new Error(`${method} ${urlPath}: no answer in 60 s`)));
                req.end(body);
        });
}
