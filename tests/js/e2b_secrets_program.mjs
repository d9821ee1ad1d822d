// E2B's Secret class (npm `e2b`, unchanged) against sandboxd's /secrets
// (e2b_secrets.test.mjs runs it with E2B_API_URL, E2B_API_KEY (a connector
// key of one user), KEY_B (another user's), KEY_AGENT (the first user's,
// role agent) and RUN_TAG). Prints one JSON line of what it saw; never a value.
import { Secret } from 'e2b';

const tag = process.env.RUN_TAG.slice(0, 40);
const name = `gh_${tag}`;
const other = { apiKey: process.env.KEY_B };
const agent = { apiKey: process.env.KEY_AGENT };
const errName = (e) => `${e.constructor.name}: ${e.message}`;
const out = {};

const s1 = await Secret.create(name, `value-one-${tag}`, { metadata: { team: 'a' } });
out.created = { idOk: /^sec_[0-9a-f]{24}$/.test(s1.secretId), name: s1.name, version: s1.version, metadata: s1.metadata,
        times: s1.createdAt.getTime() > 0 && s1.updatedAt.getTime() >= s1.createdAt.getTime() };
const byName = await Secret.getInfo(name);
const byId = await Secret.getInfo(s1.secretId);
const byUpper = await Secret.getInfo(name.toUpperCase());
out.get = { byName: byName.secretId === s1.secretId, byId: byId.name === name, byUpper: byUpper.secretId === s1.secretId,
        exists: await Secret.exists(name) };
const s2 = await Secret.update(s1.secretId, `value-two-${tag}`);
out.updated = { version: s2.version, metadata: s2.metadata, sameId: s2.secretId === s1.secretId };
const s3 = await Secret.update(name, `value-three-${tag}`, { metadata: { team: 'b', env: 'prod' } });
out.updated2 = { version: s3.version, metadata: s3.metadata, sameId: s3.secretId === s1.secretId };

for (let i = 0; i < 3; i++) await Secret.create(`${name}_p${i}`, 'x');
const pag = Secret.list({ limit: 2 });
out.pages = [];
while (pag.hasNext) out.pages.push((await pag.nextItems()).map((s) => s.name));
out.listed = (await Secret.list().nextItems()).find((s) => s.name === name);

// another tenant sees and touches none of them
out.other = {
        get: await Secret.getInfo(name, other).then(() => 'found', errName),
        getById: await Secret.getInfo(s1.secretId, other).then(() => 'found', errName),
        exists: await Secret.exists(s1.secretId, other),
        update: await Secret.update(name, 'x', other).then(() => 'updated', errName),
        destroy: await Secret.destroy(name, other),
        list: (await Secret.list(other).nextItems()).map((s) => s.name),
};
out.agentCreate = await Secret.create(`${name}_ag`, 'v', agent).then(() => 'created', errName);
out.agentGet = await Secret.getInfo(name, agent).then((s) => s.version, errName);
out.dup = await Secret.create(name, 'v').then(() => 'created', errName);
out.badNames = {};
for (const n of ['has-dash', 'sec_x', '1abc', 'a'.repeat(65), 'a'.repeat(129), 'sp ace', 'dot.ted'])
        out.badNames[n] = await Secret.create(n, 'v').then(() => 'created', errName);
out.badMeta = {};
const many = Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, 'v']));
const big = Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`k${i}`, 'v'.repeat(1000)]));
for (const [k, m] of Object.entries({ many, long: { k: 'v'.repeat(1025) }, key: { ['k'.repeat(129)]: 'v' }, big }))
        out.badMeta[k] = await Secret.create(`${name}_m_${k}`, 'v', { metadata: m }).then(() => 'created', errName);
out.badValue = await Secret.create(`${name}_v`, 'line\nbreak').then(() => 'created', errName);
out.missing = await Secret.getInfo(`${name}_none`).then(() => 'found', errName);
out.missingUpdate = await Secret.update(`${name}_none`, 'v').then(() => 'updated', errName);

out.destroyed = await Secret.destroy(s1.secretId);
out.destroyedAgain = await Secret.destroy(name);
out.existsAfter = await Secret.exists(name);
for (let i = 0; i < 3; i++) await Secret.destroy(`${name}_p${i}`);
console.log(JSON.stringify(out));
