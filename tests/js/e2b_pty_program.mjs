// e2b_pty_program.mjs — an ordinary E2B program using sbx.pty (issue 36), run
// unchanged by e2b.test.mjs against sandboxd. It prints one JSON line of what
// it saw; the test asserts on it.
import { Sandbox } from 'e2b';

const out = {};
const sbx = await Sandbox.create('base', { metadata: { purpose: 'e2b-pty-test', run: process.env.RUN_TAG } });
out.sandboxId = sbx.sandboxId;
try {
        let text = '';
        const decoder = new TextDecoder();
        const send = (pid, s) => sbx.pty.sendInput(pid, new TextEncoder().encode(s));
        /** Wait until the terminal's output matches re (60 s at most). */
        const seen = async (re) => {
                const until = Date.now() + 60000;
                while (!re.test(text)) {
                        if (Date.now() > until) throw new Error(`never saw ${re} in ${JSON.stringify(text)}`);
                        await new Promise((r) => setTimeout(r, 50));
                }
                return text.match(re);
        };
        const term = await sbx.pty.create({
                cols: 100,
                rows: 30,
                onData: (d) => {
                        text += decoder.decode(d, { stream: true });
                },
        });
        out.pid = term.pid;
        // the markers are made by the shell ($m), so the terminal's echo of the line never matches
        await send(term.pid, 'm=X; tty | sed "s/^/TTY$m:/"; stty size | sed "s/^/SIZE$m:/"; echo "TERM$m:$TERM:"\n');
        out.tty = (await seen(/TTYX:(\S+)/))[1];
        out.size = (await seen(/SIZEX:(\d+ \d+)/))[1];
        out.term = (await seen(/TERMX:(\S*):/))[1];
        await sbx.pty.resize(term.pid, { cols: 120, rows: 40 });
        await send(term.pid, 'stty size | sed "s/^/RESIZED$m:/"\n');
        out.resized = (await seen(/RESIZEDX:(\d+ \d+)/))[1];
        out.listed = (await sbx.commands.list()).map((p) => p.pid).includes(term.pid);
        // a second client connects to the same terminal and sees what comes from now on
        let text2 = '';
        const decoder2 = new TextDecoder();
        const joined = await sbx.pty.connect(term.pid, { onData: (d) => (text2 += decoder2.decode(d, { stream: true })) });
        out.connectedPid = joined.pid;
        await send(term.pid, 'echo "CONN$m"\n');
        await seen(/CONNX/);
        for (const until = Date.now() + 60000; !/CONNX/.test(text2) && Date.now() < until; )
                await new Promise((r) => setTimeout(r, 50));
        out.connectedSaw = /CONNX/.test(text2);
        out.connectedSawOld = /TTYX/.test(text2); // what was printed before it connected
        await joined.disconnect();
        out.killed = await sbx.pty.kill(term.pid);
        out.end = await term.wait().then(
                () => 'exited cleanly',
                (e) => e.constructor.name,
        );
        // commands.connect: a background command's output and end from a second handle
        const bg = await sbx.commands.run('read l; echo got:$l', { background: true, stdin: true });
        const again = await sbx.commands.connect(bg.pid);
        await sbx.commands.sendStdin(bg.pid, 'later\n');
        out.connectedCmd = (await again.wait()).stdout;
        // a terminal that ends by itself: exit ends the shell, the handle's wait sees the code
        const second = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
        await send(second.pid, 'exit 7\n');
        out.exitCode = await second.wait().then(
                (r) => r.exitCode,
                (e) => e.exitCode,
        );
} finally {
        out.sandboxKilled = await sbx.kill();
}
console.log(JSON.stringify(out));
