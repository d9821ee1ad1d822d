// e2b_many_program.mjs — COUNT (default 100) @e2b/code-interpreter sandboxes
// at once (issue 36): every one created in parallel, runs a command and a
// Python one, writes and reads a file, one in CODE_EVERY (default 10; 0:
// none) runs code keeping a variable in its interpreter, then all are killed.
// One JSON line out (e2b.test.mjs counts the daemon's fds and threads).
import { Sandbox } from '@e2b/code-interpreter';

const COUNT = Number(process.env.COUNT || 100);
const CODE_EVERY = Number(process.env.CODE_EVERY ?? 10);
const out = { count: COUNT };
const t0 = Date.now();

// 100 at once queue on 2 cores: each call may wait its turn far past the
// SDK's defaults (30 s a request, 60 s a cell), which are not what is tested
const WAIT = { requestTimeoutMs: 600_000 };

async function one(i) {
        const sbx = await Sandbox.create({ metadata: { run: `${process.env.RUN_TAG}many`, i: String(i) }, timeoutMs: 900_000, ...WAIT });
        try {
                const echo = await sbx.commands.run(`echo sandbox-${i}`, { timeoutMs: 600_000, ...WAIT });
                await sbx.files.write('n.txt', String(i), WAIT);
                const read = await sbx.files.read('n.txt', WAIT);
                // runCode (an interpreter each) in every CODE_EVERY-th: the interpreters start
                // CELLS_STARTS_MAX at a time (cells.h), each cell's timeout counting from its
                // kernel's start; all at once on 2 cores, 20 of them beside 100 starting
                // containers ran past their start deadline ("did not start in time")
                let code = { text: String(i * 2) };
                if (CODE_EVERY && i % CODE_EVERY === 0) {
                        await sbx.runCode(`x = ${i}`, { timeoutMs: 600_000, ...WAIT });
                        code = await sbx.runCode('x * 2', { timeoutMs: 600_000, ...WAIT });
                }
                const py = await sbx.commands.run(`python3 -c "print(${i} * 3)"`, { timeoutMs: 600_000, ...WAIT });
                const got = { stdout: echo.stdout, read, text: code.text, py: py.stdout, error: code.error && `${code.error.name}: ${code.error.value}` };
                const ok = got.stdout === `sandbox-${i}\n` && read === String(i) && code.text === String(i * 2) && py.stdout === `${i * 3}\n`;
                return { id: sbx.sandboxId, ok, error: ok ? undefined : `sandbox ${i} answered ${JSON.stringify(got)}` };
        } catch (e) {
                return { id: sbx.sandboxId, ok: false, error: `${e.name}: ${e.message}` };
        } finally {
                await sbx.kill(WAIT);
        }
}

const settled = await Promise.allSettled(Array.from({ length: COUNT }, (_, i) => one(i)));
out.seconds = (Date.now() - t0) / 1000;
out.ok = settled.filter((s) => s.status === 'fulfilled' && s.value.ok).length;
out.ids = new Set(settled.filter((s) => s.status === 'fulfilled').map((s) => s.value.id)).size;
out.errors = settled
        .map((s) => (s.status === 'rejected' ? `${s.reason?.name}: ${s.reason?.message}` : s.value.error))
        .filter(Boolean)
        .slice(0, 5);
out.left = (await Sandbox.list({ query: { metadata: { run: `${process.env.RUN_TAG}many` } } }).nextItems()).length;
console.log(JSON.stringify(out));
