// e2b_code_program.mjs — an ordinary @e2b/code-interpreter program, run
// unchanged by e2b.test.mjs against sandboxd: state across runCode calls, a
// chart as a PNG, a DataFrame as HTML, a traceback, contexts. One JSON line.
import { Sandbox } from '@e2b/code-interpreter';

const out = {};
const sbx = await Sandbox.create();
try {
        await sbx.runCode('x = 41');
        const r = await sbx.runCode('print("side", flush=True)\nx + 1');
        out.text = r.text;
        out.stdout = r.logs.stdout.join('');
        out.count = r.executionCount;
        // runCode streams: the cell waits for a file that its own onStdout
        // callback writes when "ready" arrives; were the lines sent only at the
        // cell's end, the cell would run out its timeout and never see it
        let released = null;
        const streamed = await sbx.runCode(
                'import os, time\nprint("ready", flush=True)\nfor _ in range(600):\n    if os.path.exists("/workspace/go"):\n        break\n    time.sleep(0.05)\nprint("saw go" if os.path.exists("/workspace/go") else "no go", flush=True)',
                {
                        timeoutMs: 60000,
                        onStdout: (m) => {
                                if (!released && String(m.line ?? m).includes('ready')) released = sbx.files.write('/home/user/go', 'x');
                        },
                },
        );
        await released;
        out.streamed = streamed.logs.stdout.join('');
        const chart = await sbx.runCode(
                'import matplotlib\nmatplotlib.use("agg")\nimport matplotlib.pyplot as plt\n%matplotlib inline\nplt.plot([1, 2, 3])\nplt.show()',
        );
        out.png = chart.results.some((x) => typeof x.png === 'string' && Buffer.from(x.png, 'base64').subarray(1, 4).toString() === 'PNG');
        const df = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2]})');
        out.html = df.results.some((x) => typeof x.html === 'string' && x.html.includes('<table'));
        const bad = await sbx.runCode('1/0');
        out.error = bad.error && { name: bad.error.name, hasTraceback: bad.error.traceback.includes('ZeroDivisionError') };
        const ctx = await sbx.createCodeContext();
        await sbx.runCode('y = "own"', { context: ctx });
        out.ctxOwn = (await sbx.runCode('y', { context: ctx })).text;
        out.defaultLacksY = (await sbx.runCode('y')).error?.name;
        out.contexts = (await sbx.listCodeContexts()).map((c) => c.id).includes(ctx.id);
        await sbx.removeCodeContext(ctx);
        out.afterRemove = (await sbx.listCodeContexts()).map((c) => c.id).includes(ctx.id);
} finally {
        await sbx.kill();
}
console.log(JSON.stringify(out));
