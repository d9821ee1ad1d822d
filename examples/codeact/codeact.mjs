#!/usr/bin/env node
// codeact.mjs — the CodeAct-style loop of codeact.py with the TypeScript
// client: a scripted "model" sends cells to one long-lived python context,
// and each step checks the observation a model would read (a DataFrame kept
// across turns, a chart back as a PNG, a structured traceback, a recovery in
// the same namespace). Exit 0 when every observation is as expected.
//
//   (cd clients/typescript && npm ci && npm run build)
//   SANDBOXD_URL=... SANDBOXD_TOKEN=... SANDBOXD_CA=ca.pem node examples/codeact/codeact.mjs
import { randomUUID } from 'node:crypto';

import { Sandboxd } from '../../clients/typescript/dist/index.js';

/** Width and height of a PNG (its IHDR chunk), or undefined. */
function pngSize(png) {
        if (!png || png.length < 24 || png.toString('latin1', 1, 4) !== 'PNG' || png.toString('latin1', 12, 16) !== 'IHDR')
                return undefined;
        return [png.readUInt32BE(16), png.readUInt32BE(20)];
}
const fits = (size, w, h) => !!size && size[0] > w / 2 && size[0] <= w && size[1] > h / 2 && size[1] <= h;

const STEPS = [
        {
                code: "import pandas as pd\ndf = pd.DataFrame({'day': range(1, 8), 'sales': [3, 5, 4, 8, 9, 7, 12]})\ndf.shape",
                check: (r) => r.text === '(7, 2)',
                what: 'a DataFrame of 7 rows, kept for the next turns',
        },
        { code: "df['sales'].sum()", check: (r) => r.text === '48', what: 'the same df, one turn later' },
        {
                code: "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(4, 3), dpi=100)\nax.plot(df['day'], df['sales'])\nax.set_title('sales')",
                check: (r) => fits(pngSize(r.images[0]), 400, 300),
                what: "a PNG chart of the figure's 4x3 in at 100 dpi (cropped tight, as Jupyter's inline backend does)",
        },
        {
                code: "df['revenue'].sum()",
                check: (r) => r.error?.name === 'KeyError' && r.error.traceback.length > 0,
                what: 'a KeyError with its traceback',
        },
        {
                code: "df['revenue'] = df['sales'] * 10\nint(df['revenue'].sum())",
                check: (r) => !r.error && r.text === '480',
                what: 'the fix, in the same namespace',
        },
];

const client = new Sandboxd();
const session = await client.createSession({ session: `codeact-${randomUUID().slice(0, 8)}` });
let failures = 0;
try {
        for (const [i, step] of STEPS.entries()) {
                const r = await session.runCell(step.code, { timeout_seconds: 120 });
                const ok = step.check(r);
                if (!ok) failures++;
                const seen = r.error
                        ? `error ${r.error.name}`
                        : r.images.length
                          ? `${r.images.length} image(s) ${pngSize(r.images[0])}`
                          : JSON.stringify(r.text);
                console.log(`step ${i + 1}: ${ok ? 'ok ' : 'BAD'} ${step.what} (generation ${r.generation}, count ${r.execution_count}: ${seen})`);
                if (r.state_lost) {
                        // a CodeAct loop must never lose its namespace silently
                        console.log(`step ${i + 1}: state lost: ${JSON.stringify(r.state_lost)}`);
                        failures++;
                }
        }
} finally {
        await session.destroy({ purge: true });
}
console.log(`${STEPS.length - failures} of ${STEPS.length} observations as expected`);
process.exit(failures ? 1 : 0);
