#!/usr/bin/env node
// eval_harness.mjs — the evaluation harness of eval_harness.py with the
// TypeScript client: N candidates (default 50), each graded in its own
// session in parallel (write the task, run_tests, record, destroy), every
// seventh deliberately wrong; exit 0 when every grade is the expected one.
//
//   (cd clients/typescript && npm ci && npm run build)
//   SANDBOXD_URL=... SANDBOXD_TOKEN=... SANDBOXD_CA=ca.pem node examples/eval_harness/eval_harness.mjs [--n 50] [--language node|python]
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { Sandboxd, SandboxdError } from '../../clients/typescript/dist/index.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const arg = (name, dflt) => {
        const i = process.argv.indexOf(`--${name}`);
        return i > 0 ? process.argv[i + 1] : dflt;
};
const n = Number(arg('n', 50));
const language = arg('language', 'node');

const { problems } = JSON.parse(fs.readFileSync(path.join(HERE, 'tasks.json'), 'utf8'));
const candidates = Array.from({ length: n }, (_, i) => {
        const p = problems[i % problems.length];
        const good = i % 7 !== 3;
        return {
                id: i,
                problem: p.name,
                prompt: p.prompt,
                tests: p[`tests_${language}`],
                solution: p[`${good ? 'good' : 'bad'}_${language}`],
                expectPass: good,
        };
});

const run = randomUUID().slice(0, 8);
// one client, 8 connections shared by every call in flight
const client = new Sandboxd();

async function grade(c) {
        const name = `eval-${run}-${c.id}`;
        const row = { id: c.id, problem: c.problem, expectPass: c.expectPass };
        let s;
        try {
                s = await client.createSession({ session: name, ttl_seconds: 600 });
        } catch (e) {
                // a create that failed half-way may still have left the session
                await client.destroySession(name, { purge: true }).catch(() => {});
                return { ...row, passed: null, error: `create_session: ${e.message}` };
        }
        try {
                await s.writeFile('TASK.md', `# ${c.problem}\n\n${c.prompt}\n`);
                await s.writeFile(language === 'python' ? 'solution.py' : 'solution.js', c.solution);
                const r = await s.runTests(c.tests, { language, code: c.solution, timeout_seconds: 60 });
                return { ...row, passed: r.success === true, summary: r.summary, error: r.error };
        } catch (e) {
                if (!(e instanceof SandboxdError)) throw e;
                return { ...row, passed: null, error: e.message };
        } finally {
                await s.destroy({ purge: true }).catch((e) => console.error(`eval: destroying ${name}: ${e.message}`));
        }
}

const t0 = Date.now();
const rows = await Promise.all(candidates.map(grade));
const left = (await client.listSessions()).filter((x) => x.session.startsWith(`eval-${run}-`));
client.close();

const wrong = rows.filter((r) => r.passed !== r.expectPass);
const count = (f) => rows.filter(f).length;
console.log(
        `eval (${language}): ${rows.length} candidates in ${((Date.now() - t0) / 1000).toFixed(1)} s: ` +
                `${count((r) => r.passed === true)} passed, ${count((r) => r.passed === false)} failed, ` +
                `${count((r) => r.passed === null)} not graded`,
);
for (const r of wrong)
        console.log(
                `  UNEXPECTED: candidate ${r.id} (${r.problem}): expected ${r.expectPass ? 'pass' : 'fail'}, got ${r.passed} ${r.error ?? ''}`,
        );
if (left.length) console.log(`  LEFT BEHIND: ${left.length} session(s) not destroyed`);
process.exit(wrong.length === 0 && left.length === 0 ? 0 : 1);
