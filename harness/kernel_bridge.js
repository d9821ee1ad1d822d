// kernel_bridge.js — a node context of run_cell (issue 25). The same JSON
// lines as harness/kernel_bridge.py on stdin and stdout (execute, stats,
// shutdown; interrupt is a SIGINT the daemon sends the job, which
// breakOnSigint turns into an error in the running cell), but node is its
// own kernel: cells run in this process's global scope, through node's
// REPL rewrite (internal/repl/await, hence --expose-internals) so that
// top-level await works and declarations become globals; top-level const
// and let become var, so a later cell may declare them again, as in a
// notebook. The value of the last expression comes back as text/plain.
'use strict';
const fs = require('fs');
const util = require('util');
const vm = require('vm');
const { Console } = require('console');
const { createRequire } = require('module');
const { Writable } = require('stream');
const { processTopLevelAwait } = require('internal/repl/await');

const MAX_TEXT = 1 << 20;
const protoWrite = (obj) => {
        const line = JSON.stringify(obj).replace(/[\u007f-\uffff]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
        fs.writeSync(1, line + '\n');
};
const clip = (s) => (s.length > MAX_TEXT ? s.slice(0, MAX_TEXT) : s);

let current = null; // the id of the cell running
function emitText(name, chunk) {
        const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
        // never cut: what does not fit inline goes by reference (the daemon spools it)
        for (let i = 0; current !== null && i < Math.max(text.length, 1); i += MAX_TEXT)
                protoWrite({ ev: 'stream', id: current, name, text: text.slice(i, i + MAX_TEXT) });
}
function stream(name) {
        return new Writable({
                decodeStrings: false,
                write(chunk, enc, cb) {
                        emitText(name, chunk);
                        cb();
                },
        });
}
const out = stream('stdout');
const err = stream('stderr');
process.stdout.write = (chunk, enc, cb) => {
        emitText('stdout', chunk);
        if (typeof enc === 'function') enc();
        else if (typeof cb === 'function') cb();
        return true;
};
process.stderr.write = (chunk, enc, cb) => {
        emitText('stderr', chunk);
        if (typeof enc === 'function') enc();
        else if (typeof cb === 'function') cb();
        return true;
};
globalThis.console = new Console({ stdout: out, stderr: err });
globalThis.require = createRequire(process.cwd() + '/');
globalThis.display = (v) => {
        if (current !== null) protoWrite({ ev: 'display_data', id: current, data: { 'text/plain': clip(util.inspect(v)) } });
};
process.on('SIGINT', () => {}); // an interrupt stops a cell, never the context
process.on('uncaughtException', (e) => {
        if (current !== null) protoWrite({ ev: 'stream', id: current, name: 'stderr', text: clip(String(e && e.stack)) + '\n' });
});
process.on('unhandledRejection', () => {});

// Make the REPL rewrite apply to every cell (it only rewrites code with a
// top-level await), and turn its hoisted let into var.
// A cell without a top-level await runs as a plain function, so that
// breakOnSigint covers all of it (an async one is covered up to its first
// await only).
function rewrite(code) {
        let w = null, plain = false;
        try {
                plain = processTopLevelAwait(code) === null;
                w = processTopLevelAwait('await undefined;\n' + code);
        } catch {
                w = null;
        }
        if (!w) return null;
        const opening = '(async () => {';
        const at = w.indexOf(opening);
        if (at < 0) return null;
        let body = w.slice(at);
        if (plain) {
                const marker = body.indexOf('await undefined;');
                if (marker < 0) return null;
                body = '(() => {' + body.slice(opening.length, marker) + body.slice(marker + 'await undefined;'.length);
        }
        return { code: w.slice(0, at).replace(/\blet /g, 'var ') + body, plain };
}

let count = 0;
async function execute(id, code) {
        current = id;
        count++;
        let status = 'ok';
        try {
                const wrapped = rewrite(code);
                let value;
                if (wrapped) {
                        let r = vm.runInThisContext(wrapped.code, { filename: `cell${count}`, breakOnSigint: true });
                        if (!wrapped.plain) r = await r;
                        value = r ? r.value : undefined;
                } else {
                        value = vm.runInThisContext(code, { filename: `cell${count}`, breakOnSigint: true });
                        if (value && typeof value.then === 'function') value = await value;
                }
                if (value !== undefined)
                        protoWrite({ ev: 'execute_result', id, data: { 'text/plain': clip(util.inspect(value)) } });
        } catch (e) {
                status = 'error';
                const isErr = e instanceof Error || (e && typeof e.stack === 'string');
                const interrupted = isErr && /interrupted by `SIGINT`/.test(e.message);
                protoWrite({
                        ev: 'error',
                        id,
                        ename: interrupted ? 'KeyboardInterrupt' : isErr ? String(e.name) : 'Error',
                        evalue: clip(isErr ? String(e.message) : util.inspect(e)),
                        traceback: isErr ? clip(String(e.stack)).split('\n').slice(0, 200) : [],
                });
        }
        protoWrite({ ev: 'done', id, execution_count: count, status });
        current = null;
}

let buf = '';
const queue = [];
let busy = false;
async function pump() {
        if (busy) return;
        busy = true;
        while (queue.length) {
                const m = queue.shift();
                if (m.op === 'execute' && typeof m.code === 'string') {
                        // the session's environment (secrets' placeholders, CA and package variables)
                        if (m.env && typeof m.env === 'object')
                                for (const [k, v] of Object.entries(m.env)) if (typeof v === 'string') process.env[k] = v;
                        await execute(m.id, m.code);
                }
                else if (m.op === 'stats') protoWrite({ ev: 'stats', id: m.id, rss_kb: Math.round(process.memoryUsage().rss / 1024) });
                else if (m.op === 'shutdown') process.exit(0);
        }
        busy = false;
}
process.stdin.on('data', (chunk) => {
        buf += chunk.toString('utf8');
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
                const line = buf.slice(0, nl);
                buf = buf.slice(nl + 1);
                let m;
                try {
                        m = JSON.parse(line);
                } catch {
                        continue;
                }
                if (m && typeof m === 'object') queue.push(m);
        }
        pump();
});
process.stdin.on('end', () => process.exit(0));
protoWrite({ ev: 'ready', kernel_pid: process.pid, language: 'javascript', implementation: 'node ' + process.version });
