// index.ts — a client of sandboxd's HTTPS JSON API for Node 18+, with no
// runtime dependencies.
//
// Every method is one `POST /v1/<method>` with the params as the JSON body
// (docs/api.md "The HTTPS API"; the method table is
// src/api/api_methods.c, the parameters include/sandboxd/api.h). `exec` and
// `run_code` also stream as Server-Sent Events (execStream, runCodeStream).
//
// Transport: node:https, not the global fetch. Node's fetch (undici) takes
// no CA and no client certificate unless it is given undici's own Agent as
// its `dispatcher`, and that class is only reachable by installing undici
// (a runtime dependency); NODE_EXTRA_CA_CERTS covers the CA alone, for the
// whole process. node:https takes `ca`, `cert` and `key` per agent. One
// keep-alive agent per client holds at most `maxConnections` sockets (the
// daemon takes 16 per client address) and queues the rest, so any number
// of concurrent calls share them.
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';

import { SandboxdError, TransportError, errorFrom } from './errors.js';

export * from './errors.js';

/** A JSON object from the API. */
export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type Result = { [k: string]: any };
export type Params = { [k: string]: unknown };

export interface ClientOptions {
        /** https://host:port (http:// only to loopback); else SANDBOXD_URL. */
        url?: string;
        /** An API token (sandboxctl token create); else SANDBOXD_TOKEN. */
        token?: string;
        /** PEM of the CA that signed the daemon's certificate; else caFile / SANDBOXD_CA, else Node's store. */
        ca?: string | Buffer;
        caFile?: string;
        /** The client certificate and key for mTLS (PEM); else certFile/keyFile, SANDBOXD_CERT/SANDBOXD_KEY. */
        cert?: string | Buffer;
        certFile?: string;
        key?: string | Buffer;
        keyFile?: string;
        /** Bound on each call's silence in ms (default 60 s); calls that wait on the daemon add their own. */
        timeoutMs?: number;
        /** Kept-alive connections at most (default 8, at most 64). */
        maxConnections?: number;
}

/** An execution's result: execution_id, session, state (pending running
 *  completed failed cancelled timeout), exit_code, cause, error, stdout,
 *  stderr, encoding, stdout_bytes, stderr_bytes, truncated, duration_ms, ... */
export interface ExecResult extends Result {
        execution_id: string;
        session: string;
        state: 'pending' | 'running' | 'completed' | 'failed' | 'cancelled' | 'timeout';
        exit_code: number | null;
        cause: string | null;
        error: string | null;
        stdout: string;
        stderr: string;
}

export interface ExecOptions {
        timeout_seconds?: number;
        workdir?: string;
        env?: Record<string, string>;
        stdin?: string;
        interactive?: boolean;
        tty?: boolean;
        rows?: number;
        cols?: number;
        encoding?: 'utf8' | 'base64';
        idempotency_key?: string;
        [k: string]: unknown;
}

export interface RunCodeOptions extends ExecOptions {
        /** A saved script's name (code must then be omitted). */
        script?: string;
        cache?: boolean;
}

export interface OutputChunk {
        stream: 'stdout' | 'stderr';
        data: string;
}

/** One output of a cell, in order: type, name (stdout/stderr for a stream),
 *  text, data (a MIME bundle). `png` is the decoded image/png, if any. */
export class CellOutput {
        type: string;
        name?: string;
        text?: string;
        data?: Record<string, any>;
        [k: string]: unknown;

        constructor(raw: Result) {
                Object.assign(this, raw);
                this.type = raw.type;
        }

        get png(): Buffer | undefined {
                const v = this.data?.['image/png'];
                if (v === undefined || v === null) return undefined;
                return Buffer.from(Array.isArray(v) ? v.join('') : String(v), 'base64');
        }

        mime(type: string): unknown {
                return this.data?.[type];
        }
}

/** run_cell's result: context, generation, execution_count, outputs,
 *  stdout, stderr, error {name, value, traceback} or null, state_lost or null. */
export class CellResult {
        context!: string;
        generation!: number;
        execution_count!: number;
        outputs: CellOutput[];
        stdout!: string;
        stderr!: string;
        error?: { name: string; value: string; traceback: string[] } | null;
        state_lost?: { cause: string } | null;
        [k: string]: unknown;

        constructor(raw: Result) {
                Object.assign(this, raw);
                this.outputs = (raw.outputs ?? []).map((o: Result) => new CellOutput(o));
        }

        /** Every PNG output, decoded, in order. */
        get images(): Buffer[] {
                return this.outputs.map((o) => o.png).filter((p): p is Buffer => p !== undefined);
        }

        /** The text/plain of the last output that has one ('' if none). */
        get text(): string {
                for (let i = this.outputs.length - 1; i >= 0; i--) {
                        const t = this.outputs[i].mime('text/plain');
                        if (t !== undefined && t !== null) return Array.isArray(t) ? t.join('') : String(t);
                }
                return '';
        }
}

const READ_ONLY = new Set([
        'session_info',
        'get_execution',
        'list_executions',
        'read_file',
        'list_files',
        'list_services',
        'service_logs',
        'list_sessions',
        'list_scripts',
        'get_task',
        'list_contexts',
        'get_variables',
]);

const MAX_SSE_BUFFER = 64 << 20;

const clean = (p: Params): Params => {
        const o: Params = {};
        for (const [k, v] of Object.entries(p)) if (v !== undefined && v !== null) o[k] = v;
        return o;
};

const env = (name: string): string | undefined => process.env[name] || undefined;

const readPem = (inline: string | Buffer | undefined, file: string | undefined, envName: string) =>
        inline ?? ((f) => (f ? fs.readFileSync(f) : undefined))(file ?? env(envName));

const execWaitMs = (timeoutSeconds?: number): number => (timeoutSeconds ? timeoutSeconds * 1000 + 30000 : 600000);

async function readAll(res: http.IncomingMessage, method: string): Promise<Buffer> {
        const parts: Buffer[] = [];
        try {
                for await (const c of res) parts.push(c as Buffer);
        } catch (e) {
                throw e instanceof SandboxdError
                        ? e
                        : new TransportError(`reading the answer failed: ${(e as Error).message}`, method);
        }
        return Buffer.concat(parts);
}

function failure(method: string, status: number, raw: Buffer): SandboxdError {
        try {
                const e = JSON.parse(raw.toString('utf8')).error;
                if (e && typeof e.code === 'string') return errorFrom(e.code, String(e.message ?? ''), status, method);
        } catch {
                /* not JSON: fall through */
        }
        const code =
                ({ 401: 'unauthorized', 403: 'forbidden', 404: 'not_found', 413: 'too_large', 429: 'busy' } as Record<
                        number,
                        string
                >)[status] ?? 'internal';
        return errorFrom(code, raw.subarray(0, 500).toString('utf8') || `HTTP ${status}`, status, method);
}


export class Sandboxd {
        readonly url: string;
        readonly timeoutMs: number;
        private readonly token: string;
        private readonly agent: http.Agent;
        private readonly request: typeof https.request;

        constructor(opts: ClientOptions = {}) {
                const url = opts.url ?? env('SANDBOXD_URL');
                const token = opts.token ?? env('SANDBOXD_TOKEN');
                if (!url) throw new TypeError('no daemon URL: pass url or set SANDBOXD_URL');
                if (!token) throw new TypeError('no API token: pass token or set SANDBOXD_TOKEN');
                const u = new URL(url);
                if ((u.protocol !== 'https:' && u.protocol !== 'http:') || (u.pathname !== '/' && u.pathname !== ''))
                        throw new TypeError(`url must be https://host:port (or http:// on loopback): ${url}`);
                const max = opts.maxConnections ?? 8;
                if (!(max >= 1 && max <= 64)) throw new RangeError('maxConnections must be 1-64');
                this.url = u.origin;
                this.token = token;
                this.timeoutMs = opts.timeoutMs ?? 60000;
                if (u.protocol === 'https:') {
                        this.agent = new https.Agent({
                                keepAlive: true,
                                maxSockets: max,
                                ca: readPem(opts.ca, opts.caFile, 'SANDBOXD_CA'),
                                cert: readPem(opts.cert, opts.certFile, 'SANDBOXD_CERT'),
                                key: readPem(opts.key, opts.keyFile, 'SANDBOXD_KEY'),
                        });
                        this.request = https.request;
                } else {
                        this.agent = new http.Agent({ keepAlive: true, maxSockets: max });
                        this.request = http.request as typeof https.request;
                }
        }

        /** Close the kept-alive connections. */
        close(): void {
                this.agent.destroy();
        }

        private send(
                method: string,
                params: Params,
                accept: string,
                timeoutMs: number,
                retryOk: boolean,
        ): Promise<http.IncomingMessage> {
                const body = Buffer.from(JSON.stringify(clean(params)));
                const attempt = (first: boolean): Promise<http.IncomingMessage> =>
                        new Promise((resolve, reject) => {
                                const req = this.request(`${this.url}/v1/${method}`, {
                                        method: 'POST',
                                        agent: this.agent,
                                        headers: {
                                                Authorization: `Bearer ${this.token}`,
                                                'Content-Type': 'application/json',
                                                'Content-Length': body.length,
                                                Accept: accept,
                                                'User-Agent': 'sandboxd-typescript/0.1',
                                        },
                                });
                                req.setTimeout(timeoutMs, () =>
                                        req.destroy(new TransportError(`no answer within ${timeoutMs} ms`, method)),
                                );
                                req.on('response', (res) => {
                                        // the answer's own silences are bounded the same way
                                        res.setTimeout(timeoutMs, () =>
                                                res.destroy(new TransportError(`the answer stalled for ${timeoutMs} ms`, method)),
                                        );
                                        resolve(res);
                                });
                                req.on('error', (e: NodeJS.ErrnoException) => {
                                        // A kept-alive socket the daemon closed as it was reused:
                                        // send again once, when that cannot run anything twice.
                                        if (first && retryOk && req.reusedSocket && e.code === 'ECONNRESET')
                                                return resolve(attempt(false));
                                        reject(
                                                e instanceof SandboxdError
                                                        ? e
                                                        : new TransportError(`cannot reach ${this.url}: ${e.message}`, method),
                                        );
                                });
                                req.end(body);
                        });
                return attempt(true);
        }

        /** Call any API method with its params. `waitMs` is how long the daemon
         *  may legitimately stay silent beyond timeoutMs. */
        async call<T = Result>(method: string, params: Params = {}, waitMs = 0): Promise<T> {
                const retryOk = READ_ONLY.has(method) || Boolean(params.idempotency_key);
                const res = await this.send(method, params, 'application/json', this.timeoutMs + waitMs, retryOk);
                const raw = await readAll(res, method);
                if (res.statusCode !== 200) throw failure(method, res.statusCode ?? 0, raw);
                try {
                        return JSON.parse(raw.toString('utf8')) as T;
                } catch {
                        throw new TransportError(`the answer is not JSON: ${raw.subarray(0, 200).toString()}`, method);
                }
        }

        /** exec or run_code as a Server-Sent Events stream. */
        stream(method: string, params: Params): ExecStream {
                // keep-alive comments come every 10 s of silence
                const res = this.send(method, params, 'text/event-stream', Math.max(this.timeoutMs, 30000), false);
                return new ExecStream(method, res);
        }

        /** A handle on a session (no request; its container is made on first use). */
        session(name: string): Session {
                return new Session(this, name);
        }

        /** Start a session now (conflict if it exists); without a name the daemon makes one. */
        async createSession(
                opts: {
                        session?: string;
                        ttl_seconds?: number;
                        image?: string;
                        env?: Record<string, string>;
                        idempotency_key?: string;
                        [k: string]: unknown;
                } = {},
        ): Promise<Session> {
                const r = await this.call('create_session', opts, 120000);
                const s = new Session(this, r.session);
                s.created = r;
                return s;
        }

        async listSessions(filters: Params = {}): Promise<Result[]> {
                return (await this.call('list_sessions', filters)).sessions;
        }

        destroySession(session: string, opts: { purge?: boolean } = {}): Promise<Result> {
                return this.call('destroy_session', { session, purge: opts.purge ?? false }, 60000);
        }

        // ---- snapshots, restore and fork (issue 28) ----

        /** The user's snapshots, newest first, with the quota: {snapshots, count, bytes, max_count, max_bytes}. */
        listSnapshots(opts: { session?: string } = {}): Promise<Result> {
                return this.call('list_snapshots', opts);
        }

        deleteSnapshot(snapshot: string): Promise<Result> {
                return this.call('delete_snapshot', { snapshot });
        }

        /** A new session with the files and environment of a snapshot or of a live session (exactly one). */
        async forkSession(session: string, from: { session: string } | { snapshot: string }): Promise<Session> {
                const r = await this.call('fork_session', { session, from }, 600000);
                const s = new Session(this, session);
                s.created = r;
                return s;
        }

        /** Freeze the session (memory kept, no CPU); any later call resumes it. */
        pauseSession(session: string): Promise<Result> {
                return this.call('pause_session', { session }, 60000);
        }

        resumeSession(session: string): Promise<Result> {
                return this.call('resume_session', { session }, 60000);
        }

        listScripts(opts: { filter?: string; limit?: number } = {}): Promise<Result> {
                return this.call('list_scripts', opts);
        }

        async clearScripts(name?: string): Promise<number> {
                return (await this.call('clear_scripts', { name })).removed;
        }

        getTask(task_id: string): Promise<Result> {
                return this.call('get_task', { task_id });
        }

        cancelTask(task_id: string): Promise<Result> {
                return this.call('cancel_task', { task_id }, 60000);
        }
}

/** An exec/run_code streamed as it runs: `for await (const chunk of stream)`
 *  gives OutputChunks as they arrive; then `result` (also `await
 *  stream.finish()`) is the ExecResult, which carries the whole output (the
 *  daemon's output events are best effort, the result is not). An `error`
 *  event throws its typed error. */
export class ExecStream implements AsyncIterable<OutputChunk> {
        result?: ExecResult;
        private readonly method: string;
        private readonly res: Promise<http.IncomingMessage>;
        private started = false;
        private response?: http.IncomingMessage;

        constructor(method: string, res: Promise<http.IncomingMessage>) {
                this.method = method;
                this.res = res;
                res.catch(() => {}); // surfaced by the iterator
        }

        async *[Symbol.asyncIterator](): AsyncGenerator<OutputChunk> {
                if (this.started) throw new TypeError('an ExecStream is read once');
                this.started = true;
                const res = await this.res;
                this.response = res;
                if (res.statusCode !== 200) {
                        const raw = await readAll(res, this.method);
                        throw failure(this.method, res.statusCode ?? 0, raw);
                }
                let buf = '';
                let name = 'message';
                let data: string[] = [];
                try {
                        for await (const c of res) {
                                buf += (c as Buffer).toString('utf8');
                                if (buf.length > MAX_SSE_BUFFER) throw new TransportError('an SSE event is too large', this.method);
                                let nl: number;
                                while ((nl = buf.indexOf('\n')) >= 0) {
                                        const line = buf.slice(0, nl).replace(/\r$/, '');
                                        buf = buf.slice(nl + 1);
                                        if (line === '') {
                                                if (data.length) {
                                                        const ev = JSON.parse(data.join('\n'));
                                                        const kind = name;
                                                        name = 'message';
                                                        data = [];
                                                        if (kind === 'output') {
                                                                yield { stream: ev.stream ?? 'stdout', data: ev.data ?? '' };
                                                        } else if (kind === 'result') {
                                                                this.result = ev as ExecResult;
                                                                return;
                                                        } else if (kind === 'error') {
                                                                throw errorFrom(
                                                                        String(ev.code ?? 'internal'),
                                                                        String(ev.message ?? ''),
                                                                        Number(ev.status ?? 0),
                                                                        this.method,
                                                                );
                                                        }
                                                }
                                                name = 'message';
                                                continue;
                                        }
                                        if (line.startsWith(':')) continue; // keep-alive comment
                                        const colon = line.indexOf(':');
                                        const field = colon < 0 ? line : line.slice(0, colon);
                                        let value = colon < 0 ? '' : line.slice(colon + 1);
                                        if (value.startsWith(' ')) value = value.slice(1);
                                        if (field === 'event') name = value;
                                        else if (field === 'data') data.push(value);
                                }
                        }
                } catch (e) {
                        if (e instanceof SandboxdError) throw e;
                        throw new TransportError(`the stream broke: ${(e as Error).message}`, this.method);
                } finally {
                        res.destroy(); // the connection goes; the execution runs on
                }
                throw new TransportError('the stream ended without a result', this.method);
        }

        /** Read the rest of the stream; the final result. */
        async finish(): Promise<ExecResult> {
                if (!this.started) for await (const _ of this) void _;
                if (!this.result) throw new TransportError('the stream ended without a result', this.method);
                return this.result;
        }

        /** Stop reading. The execution runs on (readable by id). */
        close(): void {
                this.response?.destroy();
        }
}

/** A background execution. */
export class Execution {
        constructor(
                readonly session: Session,
                readonly id: string,
                readonly started?: Result,
        ) {}

        get(opts: { wait?: number | boolean; stdout_offset?: number; stderr_offset?: number; encoding?: string } = {}) {
                return this.session.getExecution(this.id, opts);
        }

        /** Long-poll until the execution ends (at most timeoutMs; then its running state). */
        async wait(timeoutMs = 300000): Promise<ExecResult> {
                const deadline = Date.now() + timeoutMs;
                for (;;) {
                        const left = deadline - Date.now();
                        const r = await this.get({ wait: Math.max(0, Math.min(60, Math.floor(left / 1000))) });
                        if ((r.state !== 'pending' && r.state !== 'running') || left <= 0) return r;
                }
        }

        cancel(opts: { force?: boolean } = {}) {
                return this.session.cancelExecution(this.id, opts);
        }

        sendStdin(data: string | Uint8Array, opts: { eof?: boolean } = {}) {
                return this.session.sendStdin(this.id, data, opts);
        }

        resize(rows: number, cols: number) {
                return this.session.resizeTerminal(this.id, rows, cols);
        }
}

/** Everything that acts in one session (params.session = name). */
export class Session {
        created?: Result;

        constructor(
                readonly client: Sandboxd,
                readonly name: string,
        ) {}

        call<T = Result>(method: string, params: Params = {}, waitMs = 0): Promise<T> {
                return this.client.call<T>(method, { ...params, session: this.name }, waitMs);
        }

        info(): Promise<Result> {
                return this.call('session_info', {}, 120000);
        }

        destroy(opts: { purge?: boolean } = {}): Promise<Result> {
                return this.client.destroySession(this.name, opts);
        }

        /** Save the workspace (frozen for the copy) with its environment; the snapshot's record. */
        snapshot(name?: string): Promise<Result> {
                return this.call('snapshot_session', name ? { name } : {}, 600000);
        }

        /** Stop the session and put its workspace back from a snapshot (id or name). */
        restore(snapshot: string): Promise<Result> {
                return this.call('restore_session', { snapshot }, 600000);
        }

        /** A new session with a copy of this one's files and environment. */
        fork(session: string): Promise<Session> {
                return this.client.forkSession(session, { session: this.name });
        }

        pause(): Promise<Result> {
                return this.client.pauseSession(this.name);
        }

        resume(): Promise<Result> {
                return this.client.resumeSession(this.name);
        }

        // ---- executions ----

        exec(command: string, opts: ExecOptions = {}): Promise<ExecResult> {
                return this.call<ExecResult>('exec', { ...opts, command }, execWaitMs(opts.timeout_seconds));
        }

        execStream(command: string, opts: ExecOptions = {}): ExecStream {
                return this.client.stream('exec', { ...opts, command, session: this.name });
        }

        async execBackground(command: string, opts: ExecOptions = {}): Promise<Execution> {
                const r = await this.call('exec', { ...opts, command, background: true }, 60000);
                return new Execution(this, r.execution_id, r);
        }

        private static codeParams(code: string | undefined, language: string | undefined, opts: RunCodeOptions): Params {
                return { ...opts, code, language: language ?? (code !== undefined ? 'python' : undefined) };
        }

        /** Run code (python, node or bash) as a fresh process. */
        runCode(code: string | undefined, language?: string, opts: RunCodeOptions = {}): Promise<ExecResult> {
                return this.call<ExecResult>(
                        'run_code',
                        Session.codeParams(code, language, opts),
                        execWaitMs(opts.timeout_seconds),
                );
        }

        runCodeStream(code: string, language = 'python', opts: RunCodeOptions = {}): ExecStream {
                return this.client.stream('run_code', { ...Session.codeParams(code, language, opts), session: this.name });
        }

        async runCodeBackground(code: string, language = 'python', opts: RunCodeOptions = {}): Promise<Execution> {
                const r = await this.call('run_code', { ...Session.codeParams(code, language, opts), background: true }, 60000);
                return new Execution(this, r.execution_id, r);
        }

        execution(id: string): Execution {
                return new Execution(this, id);
        }

        getExecution(
                execution_id: string,
                opts: { wait?: number | boolean; stdout_offset?: number; stderr_offset?: number; encoding?: string } = {},
        ): Promise<ExecResult> {
                const w = opts.wait === true ? 60 : typeof opts.wait === 'number' ? opts.wait : 0;
                return this.call<ExecResult>('get_execution', { ...opts, execution_id }, w * 1000);
        }

        cancelExecution(execution_id: string, opts: { force?: boolean } = {}): Promise<ExecResult> {
                return this.call<ExecResult>('cancel_execution', { execution_id, force: opts.force ?? false }, 60000);
        }

        async listExecutions(
                opts: { states?: string[]; limit?: number; completed_within_ms?: number } = {},
        ): Promise<ExecResult[]> {
                return (await this.call('list_executions', opts)).executions;
        }

        sendStdin(execution_id: string, data: string | Uint8Array, opts: { eof?: boolean } = {}): Promise<Result> {
                const d =
                        typeof data === 'string'
                                ? { data }
                                : { data: Buffer.from(data).toString('base64'), encoding: 'base64' };
                return this.call('send_stdin', { execution_id, eof: opts.eof ?? false, ...d });
        }

        resizeTerminal(execution_id: string, rows: number, cols: number): Promise<Result> {
                return this.call('resize_terminal', { execution_id, rows, cols });
        }

        // ---- files ----

        /** Write a file under /workspace (bytes go as base64). */
        writeFile(path: string, content: string | Uint8Array, opts: { idempotency_key?: string } = {}): Promise<Result> {
                const c =
                        typeof content === 'string'
                                ? { content }
                                : { content: Buffer.from(content).toString('base64'), encoding: 'base64' };
                return this.call('write_file', { ...opts, path, ...c }, 60000);
        }

        /** read_file's whole result, content as a Buffer: path, content, offset, bytes, size, eof. */
        async readFileChunk(path: string, opts: { offset?: number; length?: number } = {}): Promise<Result> {
                const r = await this.call('read_file', { ...opts, path, encoding: 'base64' }, 60000);
                r.content = Buffer.from(r.content, 'base64');
                return r;
        }

        /** A file's bytes (at most 4 MiB per call: see readFileChunk). */
        async readFile(path: string, opts: { offset?: number; length?: number } = {}): Promise<Buffer> {
                return (await this.readFileChunk(path, opts)).content;
        }

        async readText(path: string): Promise<string> {
                return (await this.readFile(path)).toString('utf8');
        }

        /** {path, entries: [{name, type, size}], truncated} */
        listFiles(path?: string): Promise<Result> {
                return this.call('list_files', { path }, 60000);
        }

        // ---- services ----

        startService(
                name: string,
                command: string,
                opts: { workdir?: string; idempotency_key?: string } = {},
        ): Promise<Result> {
                return this.call('start_service', { ...opts, name, command }, 60000);
        }

        stopService(name: string): Promise<Result> {
                return this.call('stop_service', { name }, 60000);
        }

        async listServices(): Promise<Result[]> {
                return (await this.call('list_services')).services;
        }

        serviceLogs(name: string, opts: { tail_lines?: number } = {}): Promise<Result> {
                return this.call('service_logs', { ...opts, name });
        }

        // ---- policy ----

        /** Add (or remove) an egress pattern; needs a connector token. */
        egressAllow(pattern: string, opts: { scope?: 'session' | 'user'; remove?: boolean } = {}): Promise<Result> {
                return this.call('egress_allow', { ...opts, pattern });
        }

        /** Mark the session as holding a private dataset (connector token). */
        markPrivate(dataset: string, opts: { source?: string } = {}): Promise<Result> {
                return this.call('mark_private', { ...opts, dataset });
        }

        // ---- agent tools ----

        /** Run a test file against `code` (python: test_* / unittest; node: node:test). */
        runTests(
                tests: string,
                opts: { language?: 'python' | 'node'; code?: string; timeout_seconds?: number; idempotency_key?: string } = {},
        ): Promise<Result> {
                return this.call(
                        'run_tests',
                        { language: 'python', ...opts, tests },
                        execWaitMs(opts.timeout_seconds),
                );
        }

        /** A task handle on an execution (the MCP tasks extension's). */
        createTask(execution_id: string, tool: 'exec' | 'run_code' = 'exec'): Promise<Result> {
                return this.call('create_task', { execution_id, tool });
        }

        // ---- stateful interpreters (run_cell, issue 25) ----

        async runCell(
                code: string,
                opts: { language?: string; context?: string; timeout_seconds?: number; env?: Record<string, string> } = {},
        ): Promise<CellResult> {
                return new CellResult(await this.call('run_cell', { ...opts, code }, execWaitMs(opts.timeout_seconds)));
        }

        async listContexts(): Promise<Result[]> {
                return (await this.call('list_contexts')).contexts;
        }

        restartContext(context = 'default'): Promise<Result> {
                return this.call('restart_context', { context }, 60000);
        }

        deleteContext(context: string): Promise<Result> {
                return this.call('delete_context', { context }, 60000);
        }

        getVariables(context = 'default'): Promise<Result> {
                return this.call('get_variables', { context }, 30000);
        }
}
