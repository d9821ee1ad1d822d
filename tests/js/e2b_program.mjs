// e2b_program.mjs — an ordinary E2B program, run unchanged by e2b.test.mjs
// against sandboxd (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, and
// NODE_EXTRA_CA_CERTS for the test's CA). It prints one JSON line of what it
// saw; the test asserts on it.
import { Sandbox } from 'e2b';

const out = {};
const sbx = await Sandbox.create('base', {
        metadata: { purpose: 'e2b-test', run: process.env.RUN_TAG },
        envs: { GREETING: 'from-create' },
});
out.sandboxId = sbx.sandboxId;
try {
        const hello = await sbx.commands.run('echo hello; echo oops >&2');
        out.stdout = hello.stdout;
        out.stderr = hello.stderr;
        out.exitCode = hello.exitCode;
        try {
                await sbx.commands.run('exit 3');
                out.failed = 'no error';
        } catch (e) {
                out.failed = { name: e.constructor.name, exitCode: e.exitCode };
        }
        const streamed = [];
        await sbx.commands.run('for i in 1 2 3; do echo line$i; done', { onStdout: (d) => streamed.push(d) });
        out.streamed = streamed.join('');
        out.pwd = (await sbx.commands.run('pwd')).stdout.trim();
        await sbx.files.write('notes/hello.txt', 'hi from e2b');
        await sbx.files.write('notes/other.txt', 'kept');
        out.read = await sbx.files.read('/home/user/notes/hello.txt');
        out.list = (await sbx.files.list('/home/user/notes')).map((e) => `${e.name}:${e.type}`);
        out.catViaShell = (await sbx.commands.run('cat notes/hello.txt')).stdout;
        out.catAbsolute = (await sbx.commands.run('cat /home/user/notes/hello.txt')).stdout;
        out.cdHome = (await sbx.commands.run('cd /home/user && ls notes')).stdout;
        out.info = await sbx.getInfo();
        out.listed = (await Sandbox.list({ query: { metadata: { run: process.env.RUN_TAG } } }).nextItems()).map(
                (s) => s.sandboxId,
        );
        out.listedOther = (await Sandbox.list({ query: { metadata: { run: 'nothing-has-this' } } }).nextItems()).length;
        out.env = (await sbx.commands.run('echo $GREETING $PER_CMD', { envs: { PER_CMD: 'per-cmd' } })).stdout;
        out.exists = [await sbx.files.exists('notes/hello.txt'), await sbx.files.exists('notes/nope')];
        out.made = [await sbx.files.makeDir('/home/user/a/b'), await sbx.files.makeDir('/home/user/a/b')];
        const moved = await sbx.files.rename('notes/hello.txt', '/home/user/a/b/moved.txt');
        out.moved = moved.path;
        out.movedInfo = await sbx.files.getInfo('/home/user/a/b/moved.txt');
        await sbx.files.remove('/home/user/a');
        out.afterRemove = await sbx.files.exists('/home/user/a');
        const bg = await sbx.commands.run('read line; echo got:$line; sleep 1', { background: true, stdin: true });
        out.listedProcs = (await sbx.commands.list()).map((p) => p.pid).includes(bg.pid);
        await sbx.commands.sendStdin(bg.pid, 'ping\n');
        out.bg = (await bg.wait()).stdout;
        const sleeper = await sbx.commands.run('sleep 600', { background: true });
        out.killedCmd = await sbx.commands.kill(sleeper.pid);
        try {
                await sleeper.wait();
                out.sleeperEnd = 'exited cleanly';
        } catch (e) {
                out.sleeperEnd = e.constructor.name;
        }
        // one user inside: root is refused with the reason, never run as user
        out.asRoot = await sbx.commands.run('id -u', { user: 'root' }).then(
                (r) => `ran as ${r.stdout.trim()}`,
                (e) => `${e.constructor.name}: ${/root is not available/.test(e.message)}`,
        );
        out.asUser = (await sbx.commands.run('echo ok', { user: 'user' })).stdout;
        out.writeAsRoot = await sbx.files.write('/home/user/root.txt', 'x', { user: 'root' }).then(
                () => 'written',
                (e) => `${e.constructor.name}: ${/root is not available/.test(e.message)}`,
        );
        out.outside = await sbx.files.read('/etc/passwd').then(
                () => 'read it',
                (e) => e.constructor.name,
        );
        // pause keeps the sandbox (sandboxd refuses it while a command runs), connect resumes it
        out.paused = await sbx.pause();
        out.stateWhilePaused = (await sbx.getInfo()).state;
        const byState = async (state) =>
                (await Sandbox.list({ query: { state, metadata: { run: process.env.RUN_TAG } } }).nextItems()).length;
        out.listedByState = [await byState(['running']), await byState(['paused']), await byState(['running', 'paused'])];
        const again = await Sandbox.connect(sbx.sandboxId);
        out.stateAfterConnect = (await again.getInfo()).state;
        out.fileAfterResume = await again.files.read('/home/user/notes/other.txt').catch((e) => e.constructor.name);
        await again.setTimeout(120000);
        const info = await again.getInfo();
        out.endInSeconds = Math.round((new Date(info.endAt).getTime() - Date.now()) / 1000);
        // timeoutMs is the command's limit (Connect-Timeout-Ms): the command is killed
        out.overTime = await sbx.commands.run('sleep 30', { timeoutMs: 1500 }).then(
                () => 'finished',
                (e) => e.constructor.name,
        );
} finally {
        out.killed = await sbx.kill();
}
out.killedAgain = await Sandbox.kill(out.sandboxId);
out.listedAfterKill = (await Sandbox.list({ query: { metadata: { run: process.env.RUN_TAG } } }).nextItems()).length;
console.log(JSON.stringify(out));
