// e2b_ops_program.mjs — an E2B program using the control API beyond create
// and kill (issue 36): getInfo, getMetrics, fork, createSnapshot and create
// from it, run unchanged by e2b.test.mjs against sandboxd. OTHER_KEY is
// another tenant's key: each of these calls with it must fail (NotFoundError
// on the sandbox's routes). One JSON line out.
import { NotFoundError, Sandbox } from 'e2b';

const out = {};
const other = { apiKey: process.env.OTHER_KEY };
const sbx = await Sandbox.create('base', { metadata: { run: process.env.RUN_TAG } });
let fork, restored;
try {
        await sbx.files.write('before.txt', 'written before the fork');
        out.info = (await Sandbox.getInfo(sbx.sandboxId)).sandboxId === sbx.sandboxId;
        const m = await sbx.getMetrics();
        out.metrics = m.map((x) => ({
                cpuCount: x.cpuCount,
                cpuUsedPct: x.cpuUsedPct,
                memUsed: x.memUsed,
                memTotal: x.memTotal,
                diskUsed: x.diskUsed,
                when: x.timestamp instanceof Date && !isNaN(x.timestamp),
        }));
        const forks = await sbx.fork({ timeoutMs: 120_000 });
        out.forks = forks.length;
        fork = forks[0];
        if (fork instanceof Error) throw fork;
        out.forkId = fork.sandboxId;
        out.sourceId = sbx.sandboxId;
        out.forkRead = await fork.files.read('before.txt');
        await fork.files.write('after.txt', 'only in the fork');
        await sbx.files.write('before.txt', 'changed in the source');
        out.forkHasAfter = await fork.files.exists('after.txt');
        out.sourceHasAfter = await sbx.files.exists('after.txt');
        out.forkReadAgain = await fork.files.read('before.txt');
        out.forkMetrics = (await fork.getMetrics()).length;
        const snap = await sbx.createSnapshot({ name: `e2b-${process.env.RUN_TAG}`.slice(0, 60) });
        out.snapshotId = snap.snapshotId;
        out.snapshotNames = snap.names;
        await sbx.files.write('before.txt', 'changed after the snapshot');
        restored = await Sandbox.create(snap.snapshotId, { timeoutMs: 120_000 });
        out.restoredRead = await restored.files.read('before.txt');
        out.restoredOtherId = restored.sandboxId !== sbx.sandboxId;
        try {
                await Sandbox.create(snap.snapshotId, other);
                out.otherCreate = 'no error';
        } catch (e) {
                out.otherCreate = e.name;
        }
        out.otherTenant = {};
        const calls = {
                getInfo: () => Sandbox.getInfo(sbx.sandboxId, other),
                getMetrics: () => Sandbox.getMetrics(sbx.sandboxId, other),
                fork: () => Sandbox.fork(sbx.sandboxId, other),
                createSnapshot: () => Sandbox.createSnapshot(sbx.sandboxId, other),
        };
        for (const [name, call] of Object.entries(calls)) {
                try {
                        await call();
                        out.otherTenant[name] = 'no error';
                } catch (e) {
                        out.otherTenant[name] = e instanceof NotFoundError ? 'NotFoundError' : `${e.name}: ${e.message}`;
                }
        }
} finally {
        if (fork && !(fork instanceof Error)) await fork.kill();
        if (restored) await restored.kill();
        await sbx.kill();
}
console.log(JSON.stringify(out));
