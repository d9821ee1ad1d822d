// e2b_watch_program.mjs — an ordinary E2B program using sbx.files.watchDir
// (issue 36), run unchanged by e2b.test.mjs against sandboxd: a watch sees a
// file a command writes, a recursive watch sees one in a subdirectory. It
// prints one JSON line of what it saw; the test asserts on it.
import { Sandbox } from 'e2b';

const out = {};
const sbx = await Sandbox.create('base', { metadata: { purpose: 'e2b-watch-test', run: process.env.RUN_TAG } });
out.sandboxId = sbx.sandboxId;
/** Wait until events has one matching pred (30 s at most). */
const seen = async (events, pred, what) => {
        const until = Date.now() + 30000;
        while (!events.some(pred)) {
                if (Date.now() > until) throw new Error(`never saw ${what} in ${JSON.stringify(events)}`);
                await new Promise((r) => setTimeout(r, 50));
        }
};
try {
        await sbx.files.makeDir('/home/user/w/sub/deeper');
        const flat = [];
        const h1 = await sbx.files.watchDir('/home/user/w', (e) => flat.push(e));
        await sbx.commands.run('echo hi > w/made-by-command.txt');
        await seen(flat, (e) => e.name === 'made-by-command.txt' && e.type === 'create', 'the create');
        await seen(flat, (e) => e.name === 'made-by-command.txt' && e.type === 'write', 'the write');
        out.flat = flat.filter((e) => e.name === 'made-by-command.txt').map((e) => e.type);
        await h1.stop();

        const deep = [];
        const h2 = await sbx.files.watchDir('/home/user/w', (e) => deep.push(e), { recursive: true });
        await sbx.commands.run('echo hi > w/sub/deeper/inner.txt && mkdir w/sub/later && echo x > w/sub/later/new.txt');
        await seen(deep, (e) => e.name === 'sub/deeper/inner.txt' && e.type === 'create', 'the file in the subdirectory');
        await seen(deep, (e) => e.name === 'sub/later/new.txt', 'the file in a directory made after the watch began');
        out.deep = [...new Set(deep.map((e) => e.name))].sort();
        await h2.stop();

        // outside the home: refused as E2B's SDK reports a bad argument
        try {
                await sbx.files.watchDir('/etc', () => {});
                out.outside = 'accepted';
        } catch (e) {
                out.outside = e.name;
        }
        try {
                await sbx.files.watchDir('/home/user/missing-dir', () => {});
                out.missing = 'accepted';
        } catch (e) {
                out.missing = e.name;
        }
} finally {
        await sbx.kill();
}
console.log(JSON.stringify(out));
