// E2B's /secrets API (issues 36 and 37) on sandboxd's own secrets, driven by
// the official SDK's Secret class (npm `e2b`, pinned, unchanged) through
// e2b_secrets_program.mjs, then raw requests for what the SDK never sends:
// bad JSON, unknown fields, bad metadata, and that nothing was stored. One
// store: the same rows in the admin socket's secret.list (sandboxctl secret
// list), set there and seen here. No value in any answer or the daemon's files.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { Daemon, RUN_ID, httpsRequest, socketRequest } from './harness.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const TAG = `t${RUN_ID}`.toLowerCase().replace(/[^a-z0-9]/g, '').slice(0, 40);

/** httpsRequest with the body as text. */
const request = async (...args) => {
        const r = await httpsRequest(...args);
        return { ...r, body: r.body.toString() };
};

/** Every file under dir holding needle (bytes), by path. */
function filesHolding(dir, needle) {
        const found = [];
        const walk = (d) => {
                for (const e of fs.readdirSync(d, { withFileTypes: true })) {
                        const p = path.join(d, e.name);
                        if (e.isDirectory()) walk(p);
                        else if (e.isFile() && fs.readFileSync(p).includes(needle)) found.push(p);
                }
        };
        walk(dir);
        return found;
}

describe('E2B /secrets against sandboxd (issues 36, 37)', () => {
        let d, ca, port, keyA, keyB, keyAgent;

        before(async () => {
                d = new Daemon();
                // the operator's key, outside data_dir, the daemon's alone
                const keyFile = path.join(d.dir, 'secrets.key');
                fs.writeFileSync(keyFile, `${'0123456789abcdef'.repeat(4)}\n`, { mode: 0o600 });
                d.env.SANDBOXD_SECRETS_KEY_FILE = keyFile;
                ({ ca, port } = await d.startHttps());
                const mint = async (user, role) => {
                        const r = await socketRequest(d.adminSocket, { cmd: 'token.create', user, role, format: 'e2b' });
                        assert.ok(r.ok, JSON.stringify(r));
                        return r.result.token;
                };
                keyA = await mint('sec-alice', 'connector');
                keyB = await mint('sec-bob', 'connector');
                keyAgent = await mint('sec-alice', 'agent');
        });

        after(async () => {
                await d?.stop();
        });

        const api = (method, p, body, key = keyA) =>
                request(ca, port, method, p, {
                        headers: { 'X-API-Key': key, 'Content-Type': 'application/json' },
                        body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
                });
        const adminList = async (user) => {
                const r = await socketRequest(d.adminSocket, { cmd: 'secret.list', user });
                assert.ok(r.ok, JSON.stringify(r));
                return r.result.secrets;
        };

        test('the SDK\'s Secret: create, getInfo by id and name, update (a new version), list paginated, destroy; another tenant gets NotFound; bad names and metadata refused naming the rule', async () => {
                const { stdout, stderr, code } = await new Promise((resolve) =>
                        execFile(process.execPath, [path.join(HERE, 'e2b_secrets_program.mjs')], {
                                env: { ...process.env, E2B_API_URL: `https://127.0.0.1:${port}`, E2B_API_KEY: keyA, KEY_B: keyB,
                                        KEY_AGENT: keyAgent, NODE_EXTRA_CA_CERTS: path.join(d.dir, 'ca.pem'), RUN_TAG: TAG },
                                timeout: 120000,
                        }, (err, so, se) => resolve({ stdout: so, stderr: se, code: err ? err.code : 0 })));
                assert.equal(code, 0, `the program failed:\n${stderr}\n${stdout}\n--- daemon log:\n${d.logTail()}`);
                const out = JSON.parse(stdout.trim().split('\n').pop());
                const name = `gh_${TAG}`;
                assert.deepEqual(out.created, { idOk: true, name, version: 1, metadata: { team: 'a' }, times: true });
                assert.deepEqual(out.get, { byName: true, byId: true, byUpper: true, exists: true });
                assert.deepEqual(out.updated, { version: 2, metadata: { team: 'a' }, sameId: true }); // metadata kept
                assert.deepEqual(out.updated2, { version: 3, metadata: { team: 'b', env: 'prod' }, sameId: true });
                assert.deepEqual(out.pages, [[name, `${name}_p0`], [`${name}_p1`, `${name}_p2`]]);
                assert.equal(out.listed.version, 3);
                assert.equal(out.listed.value, undefined);
                assert.match(out.other.get, /^SecretNotFoundError/);
                assert.match(out.other.getById, /^SecretNotFoundError/);
                assert.equal(out.other.exists, false);
                assert.match(out.other.update, /^SecretNotFoundError/);
                assert.equal(out.other.destroy, false);
                assert.deepEqual(out.other.list, []);
                assert.match(out.agentCreate, /needs a connector key; this key's role is agent/);
                assert.equal(out.agentGet, 3); // reading is any key's
                assert.match(out.dup, /exists already/);
                assert.match(out.badNames['has-dash'], /- is not allowed, use _ \(sandboxd's rule/);
                assert.match(out.badNames.sec_x, /cannot start with sec_.*\(E2B's rule\)/);
                assert.match(out.badNames['1abc'], /does not start with a digit \(sandboxd's rule\)/);
                assert.match(out.badNames['a'.repeat(65)], /at most 64 characters/);
                assert.match(out.badNames['a'.repeat(129)], /1-128 characters .*\(E2B's rule\)/);
                assert.match(out.badNames['sp ace'], /\(E2B's rule\)/);
                assert.match(out.badNames['dot.ted'], /\(E2B's rule\)/);
                assert.match(out.badMeta.many, /at most 32 entries/);
                assert.match(out.badMeta.long, /longer than 1024 bytes/);
                assert.match(out.badMeta.key, /key is 1-128 bytes/);
                assert.match(out.badMeta.big, /more than 8192 bytes/);
                assert.match(out.badValue, /NUL, CR or LF/);
                assert.match(out.missing, /^SecretNotFoundError/);
                assert.match(out.missingUpdate, /^SecretNotFoundError/);
                assert.equal(out.destroyed, true);
                assert.equal(out.destroyedAgain, false);
                assert.equal(out.existsAfter, false);
                // nothing refused was stored, and nothing is left
                assert.deepEqual((await adminList('sec-alice')).filter((s) => s.name.startsWith(`GH_${TAG.toUpperCase()}`)), []);
                assert.deepEqual(await adminList('sec-bob'), []);
                // no value in any answer the program printed, nor in the daemon's files (log, store, audit)
                for (const v of ['one', 'two', 'three']) {
                        assert.ok(!stdout.includes(`value-${v}-${TAG}`));
                        assert.deepEqual(filesHolding(d.dir, `value-${v}-${TAG}`), []);
                }
        });

        test('one store: a secret set through sandboxd\'s admin (sandboxctl secret set) is E2B\'s by its lower-case name, and an E2B one is in secret.list with its id and version', async () => {
                const upper = `SBX_${TAG.toUpperCase()}`;
                let r = await socketRequest(d.adminSocket, { cmd: 'secret.set', user: 'sec-alice', name: upper,
                        value: `admin-value-${TAG}`, hosts: ['api.example.com'] });
                assert.ok(r.ok, JSON.stringify(r));
                const lower = upper.toLowerCase();
                let g = await api('GET', `/secrets/${lower}`);
                assert.equal(g.status, 200, g.body);
                const s = JSON.parse(g.body);
                assert.equal(s.name, lower);
                assert.equal(s.currentVersion, 1);
                assert.deepEqual(s.metadata, {});
                assert.match(s.secretID, /^sec_[0-9a-f]{24}$/);
                r = await socketRequest(d.adminSocket, { cmd: 'secret.set', user: 'sec-alice', name: upper,
                        value: `admin-value2-${TAG}`, hosts: ['api.example.com'] });
                assert.ok(r.ok, JSON.stringify(r));
                g = await api('GET', `/secrets/${s.secretID}`);
                assert.equal(JSON.parse(g.body).currentVersion, 2); // a new value from any front is a new version

                const c = await api('POST', '/secrets', { name: `e2b_${TAG}`, value: `e2b-value-${TAG}`, metadata: { a: 'b' } });
                assert.equal(c.status, 201, c.body);
                const made = JSON.parse(c.body);
                const row = (await adminList('sec-alice')).find((x) => x.name === `E2B_${TAG.toUpperCase()}`);
                assert.deepEqual({ id: row.id, version: row.version, hosts: row.hosts },
                        { id: made.secretID, version: 1, hosts: [] }); // no hosts: only where a sandbox's rule sends it
                assert.equal(row.value, undefined);
                for (const p of [`/secrets/${lower}`, `/secrets/${made.secretID}`]) {
                        const del = await api('DELETE', p);
                        assert.equal(del.status, 204, del.body);
                }
                assert.deepEqual((await adminList('sec-alice')).filter((x) => x.name.endsWith(TAG.toUpperCase())), []);
                assert.deepEqual(filesHolding(d.dir, `e2b-value-${TAG}`), []);
                assert.deepEqual(filesHolding(d.dir, `admin-value2-${TAG}`), []);
        });

        test('a sandbox\'s network.rules (Secret.fill in a transform header): parsed at create and in updateNetwork; a bad rule is a 400 naming it and creates nothing', async () => {
                const n = `rule_${TAG}`;
                const made0 = await api('POST', '/secrets', { name: n, value: `rule-value-${TAG}` });
                assert.equal(made0.status, 201, made0.body);
                const rule = (domain, value) => ({ [domain]: [{ transform: { headers: { Authorization: value } } }] });
                const fill = '${e2b.secrets.' + n + '}';
                const bad = [
                        [rule('api.example.com', 'Bearer ${e2b.secrets.nosuch_' + TAG + '}'), /no secret nosuch_/],
                        [rule('api.example.com', 'Bearer plain'), /holds no \$\{e2b\.secrets\.NAME\}/],
                        [rule('not a host', `Bearer ${fill}`), /network\.rules\[not a host\]: hosts/],
                        [rule('api.example.com', `${fill} ${fill}`), /exactly once|more than one/],
                        [{ 'api.example.com': [{ transform: { headers: { Host: fill } } }] }, /cannot set Host/],
                        [{ 'api.example.com': [{ other: {} }] }, /a rule is \{transform/],
                ];
                for (const [rules, re] of bad) {
                        const c = await api('POST', '/sandboxes', { templateID: 'base', timeout: 300, network: { rules } });
                        assert.equal(c.status, 400, c.body);
                        assert.match(JSON.parse(c.body).message, re);
                }
                const l = await api('GET', '/v2/sandboxes');
                assert.equal(l.status, 200, l.body);
                assert.deepEqual(JSON.parse(l.body), []);
                const made = await api('POST', '/sandboxes', { templateID: 'base', timeout: 300, network: { rules: rule('api.example.com', `Bearer ${fill}`) } });
                assert.equal(made.status, 201, made.body);
                const id = JSON.parse(made.body).sandboxID;
                try {
                        const u = await api('PUT', `/sandboxes/${id}/network`, { allowOut: [], rules: rule('api.example.org', `token ${fill}`) });
                        assert.equal(u.status, 204, u.body);
                        const v = await api('PUT', `/sandboxes/${id}/network`, { rules: rule('api.example.org', 'Bearer ${e2b.secrets.nosuch}') });
                        assert.equal(v.status, 400, v.body);
                        assert.match(JSON.parse(v.body).message, /no secret nosuch/);
                        const w = await api('PUT', `/sandboxes/${id}/network`, {});
                        assert.equal(w.status, 204, w.body);
                } finally {
                        assert.equal((await api('DELETE', `/sandboxes/${id}`)).status, 204);
                        assert.equal((await api('DELETE', `/secrets/${n}`)).status, 204);
                }
        });

        test('malformed requests: 400 with the reason, and nothing stored', async () => {
                const n = `bad_${TAG}`;
                const cases = [
                        ['{"name": ', /JSON/i],
                        ['[]', /JSON object/],
                        [{ name: n, value: 'v', extra: 1 }, /unknown field extra/],
                        [{ name: n }, /value is required/],
                        [{ name: n, value: '' }, /value is required/],
                        [{ name: n, value: 7 }, /value is required/],
                        [{ value: 'v' }, /name is required/],
                        [{ name: 7, value: 'v' }, /name is required/],
                        [{ name: n, value: 'v', metadata: ['x'] }, /metadata must be an object/],
                        [{ name: n, value: 'v', metadata: { k: 1 } }, /metadata\.k must be a string/],
                        [{ name: n, value: 'v', metadata: { '': 'x' } }, /key is 1-128 bytes/],
                        [{ name: n, value: 'v'.repeat(8193) }, /1 to 8192 bytes/],
                ];
                for (const [body, why] of cases) {
                        const r = await api('POST', '/secrets', body);
                        assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${r.body}`);
                        assert.match(JSON.parse(r.body).message, why);
                }
                const ok = await api('POST', '/secrets', { name: n, value: 'v' });
                assert.equal(ok.status, 201, ok.body);
                const id = JSON.parse(ok.body).secretID;
                for (const [body, why] of [[{ value: 'v', metadata: { k: 1 } }, /must be a string/], [{ metadata: {} }, /value is required/],
                        ['nope', /JSON/i]]) {
                        const r = await api('POST', `/secrets/${id}`, body);
                        assert.equal(r.status, 400, r.body);
                        assert.match(JSON.parse(r.body).message, why);
                }
                assert.equal(JSON.parse((await api('GET', `/secrets/${id}`)).body).currentVersion, 1); // unchanged
                for (const [p, why] of [['/secrets?limit=0', /limit must be 1-100/], ['/secrets?limit=101', /limit must be 1-100/],
                        ['/secrets?limit=x', /limit/], ['/secrets?nextToken=a-b', /nextToken/], [`/secrets/sec_XYZ`, /lower-case hex/],
                        ['/secrets/bad.name', /E2B's rule/], [`/secrets/${'a'.repeat(200)}`, /at most 128/]]) {
                        const r = await api('GET', p);
                        assert.equal(r.status, 400, `${p}: ${r.body}`);
                        assert.match(JSON.parse(r.body).message, why);
                }
                const noKey = await request(ca, port, 'GET', '/secrets');
                assert.equal(noKey.status, 401, noKey.body);
                assert.equal((await api('DELETE', `/secrets/${id}`)).status, 204);
                assert.deepEqual((await adminList('sec-alice')).filter((x) => x.name === n.toUpperCase()), []);
        });
});
