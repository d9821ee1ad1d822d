// e2b_network_program.mjs — E2B's egress settings narrowing a sandbox's own
// egress (issue 36), run unchanged by e2b.test.mjs against a daemon whose
// operator allows up.test and other.test (both 127.0.0.1, an HTTP server of
// the test's on UP_PORT): create with network.allowOut, updateNetwork with
// denyOut (replacing it), a fork carrying the narrowing,
// allowInternetAccess: false, and widening refused (updateNetwork and
// create naming a host the operator does not allow). curl in the sandbox
// goes through the proxy (HTTP_PROXY): its status is the proxy's verdict.
// One JSON line out.
import { Sandbox } from 'e2b';

const PORT = process.env.UP_PORT;
const out = {};
const meta = { metadata: { run: `${process.env.RUN_TAG}net` } };
const made = [];

/** The HTTP status curl gets for host through the proxy ("403": refused). */
async function status(sbx, host) {
        const r = await sbx.commands.run(`curl -s -o /dev/null -w '%{http_code}' http://${host}:${PORT}/`, { timeoutMs: 60_000 });
        return r.stdout;
}

const both = async (sbx) => ({ up: await status(sbx, 'up.test'), other: await status(sbx, 'other.test') });

async function refused(fn) {
        try {
                await fn();
                return 'no error';
        } catch (e) {
                return `${e.name}: ${e.message}`;
        }
}

try {
        const sbx = await Sandbox.create('base', { ...meta, network: { allowOut: [`up.test:${PORT}`] } });
        made.push(sbx);
        out.allowOut = await both(sbx);
        await sbx.updateNetwork({ denyOut: [`up.test:${PORT}`] });
        out.denyOut = await both(sbx);
        out.widen = await refused(() => sbx.updateNetwork({ allowOut: ['evil.test'] }));
        out.afterWiden = await both(sbx); // the refused update changed nothing
        const [fork] = await sbx.fork({ timeoutMs: 120_000 });
        if (fork instanceof Error) throw fork;
        made.push(fork);
        out.fork = await both(fork);
        await sbx.updateNetwork({});
        out.cleared = await both(sbx);
        const sealed = await Sandbox.create('base', { ...meta, allowInternetAccess: false });
        made.push(sealed);
        out.sealed = await both(sealed);
        out.createWiden = await refused(async () => made.push(await Sandbox.create('base', { ...meta, network: { allowOut: ['evil.test'] } })));
        out.cidr = await refused(() => sbx.updateNetwork({ denyOut: ['10.0.0.0/8'] }));
} catch (e) {
        out.error = `${e.name}: ${e.message}`;
} finally {
        for (const s of made) await s.kill().catch(() => {});
}
out.left = (await Sandbox.list({ query: { metadata: meta.metadata } }).nextItems()).length;
console.log(JSON.stringify(out));
