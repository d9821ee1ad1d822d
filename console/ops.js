// ops.js — the operator pages (#/ops/users, pool, nodes, top, health): read with
// list_users, pool_status, list_nodes and daemon_health, which only an
// operator token may call. probe() asks whoami once at sign-in (any token may);
// the pages' links are shown only for an operator. Each page is fetched when
// opened and on Refresh; every string reaches the page through el() (text).
// Top samples list_users every few seconds while it is open and draws each
// user's and each live session's CPU and memory over time as small inline SVG
// charts (the busiest sessions first).
import { call } from './api.js';
import { el } from './dom.js';
import { mib } from './sessions.js';

const $ = (id) => document.getElementById(id);
export const PAGES = {
        users: { title: 'Users & quotas', method: 'list_users', render: users },
        pool: { title: 'Pool', method: 'pool_status', render: pool },
        nodes: { title: 'Nodes', method: 'list_nodes', render: nodes },
        top: { title: 'Top', method: 'list_users', render: top },
        health: { title: 'Health', method: 'daemon_health', render: health },
};
const TOP_EVERY_MS = 3000; // a sample of list_users while Top is open
const TOP_SAMPLES = 60; // kept per user and per session: three minutes
const TOP_SESSIONS_SHOWN = 50; // session rows on Top, the busiest (CPU, then memory) first
const SVG = 'http://www.w3.org/2000/svg';
let samples = new Map(); // 'u\n'+user or 's\n'+user+'\n'+session -> [{t, cpu, mem}], oldest first
let topTimer = null;
let operator = false;
let current = null;
let seq = 0; // a slow answer for a page left meanwhile is dropped

export function init() {
        $('ops-refresh').addEventListener('click', () => current && open(current));
}

export function isOperator() {
        return operator;
}

/** Signed in: whoami names the token's user and role; an operator gets the pages' links. */
export async function probe() {
        try {
                const me = await call('whoami');
                operator = me.operator === true;
                $('whoami').textContent = `${me.user} (${me.role})`;
        } catch {
                operator = false; // no pages without an answer
        }
        $('ops-nav').hidden = !operator;
        return operator;
}

export function reset() {
        operator = false;
        leave();
        seq++;
        $('ops-nav').hidden = true;
        $('ops-body').replaceChildren();
}

/** Leaving the operator pages: Top stops sampling and forgets its samples. */
export function leave() {
        current = null;
        seq++;
        clearTimeout(topTimer);
        topTimer = null;
        samples = new Map();
}

/** Show page name (a key of PAGES). */
export async function open(name) {
        const p = PAGES[name];
        if (current !== name) leave();
        const my = ++seq;
        current = name;
        $('ops-title').textContent = p.title;
        $('ops-status').textContent = 'Loading…';
        for (const a of $('ops-nav').querySelectorAll('a')) {
                if (a.getAttribute('href') === `#/ops/${name}`) a.setAttribute('aria-current', 'page');
                else a.removeAttribute('aria-current');
        }
        try {
                const r = await call(p.method);
                if (my !== seq) return;
                $('ops-body').replaceChildren(...p.render(r));
                $('ops-body').dataset.page = name;
                $('ops-status').textContent = `Updated ${new Date().toLocaleTimeString()}`;
                if (name === 'top') {
                        clearTimeout(topTimer);
                        topTimer = setTimeout(() => current === 'top' && open('top'), TOP_EVERY_MS);
                }
        } catch (e) {
                if (my !== seq) return;
                $('ops-body').replaceChildren();
                $('ops-status').textContent = `Cannot read ${p.title.toLowerCase()}: ${e.message}`;
        }
}

/** A definition list of [term, value, id?] rows. */
function facts(rows) {
        const dl = el('dl');
        for (const [term, value, id] of rows) {
                dl.append(el('dt', term), el('dd', value ?? '—', id ? { id } : {}));
        }
        return dl;
}

function table(caption, heads, rows) {
        const t = el('table');
        t.append(el('caption', caption));
        const hr = el('tr');
        for (const h of heads) hr.append(el('th', h, { scope: 'col' }));
        t.append(el('thead'));
        t.tHead.append(hr);
        const body = el('tbody');
        for (const r of rows) body.append(r);
        t.append(body);
        return t;
}

function row(cells, attrs = {}) {
        const tr = el('tr', null, attrs);
        for (const c of cells) tr.append(el('td', c ?? '—'));
        return tr;
}

const bytes = (n) => (typeof n === 'number' ? mib(n) : null);
const cpuTime = (ns) => (typeof ns === 'number' ? `${(ns / 1e9).toFixed(1)} s` : null);
const when = (ms) => (ms ? new Date(ms).toLocaleString() : null);
function duration(s) {
        if (typeof s !== 'number') return null;
        const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
        return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : `${m}m ${s % 60}s`;
}

function users(r) {
        const list = r.users ?? [];
        const rows = list.map((u) => {
                const us = u.usage ?? {}, l = u.limits ?? {};
                const over = Object.entries(u.overrides ?? {}).map(([k, v]) => `${k}=${v}`).join(', ');
                return row(
                        [
                                u.user,
                                `${us.sessions} (${us.live_sessions} live, ${us.paused_sessions} paused)`,
                                `${us.live_sessions} / ${l.max_sessions_per_user}`,
                                `${us.executions_running} / ${l.max_exec_per_user}`,
                                bytes(us.memory_bytes),
                                cpuTime(us.cpu_total_ns),
                                l.max_session_cpus,
                                bytes(l.max_session_memory),
                                over || 'none',
                        ],
                        { 'data-user': u.user, 'data-sessions': String(us.sessions) },
                );
        });
        return [
                table(`${list.length} user${list.length === 1 ? '' : 's'}`, [
                        'User', 'Sessions', 'Live / max', 'Running executions / max', 'Memory now', 'CPU time',
                        'CPUs per session', 'Memory per session', 'Overrides',
                ], rows),
        ];
}

function pool(r) {
        const p = r.pool ?? {};
        const out = [
                facts([
                        ['Size (per image)', p.size, 'pool-size'],
                        ['Ready', p.ready, 'pool-ready'],
                        ['Being made', p.creating],
                        ['Claimed', p.claims, 'pool-claims'],
                        ['Missed (none ready)', p.misses],
                        ['Made', p.created],
                        ['Failed', p.failed],
                        ['Waiting now', p.waiting],
                        ['Refill per second', p.refill_per_s],
                ]),
        ];
        const imgs = p.images ?? [];
        if (imgs.length)
                out.push(table('Per image', ['Image', 'Size', 'Ready', 'Waiting'], imgs.map((i) => row([i.image, i.size, i.ready, i.waiting]))));
        if (!p.size) out.push(el('p', 'The warm pool is off (pool.size 0): each session makes its container when it starts.'));
        return out;
}

function nodes(r) {
        const list = r.nodes ?? [];
        if (!list.length) return [el('p', 'No nodes: this daemon runs its containers itself.', { id: 'nodes-none' })];
        return [
                table(`${list.length} node${list.length === 1 ? '' : 's'}`, ['Node', 'Connected', 'Fenced', 'Sessions', 'Since', 'Last heartbeat'],
                        list.map((n) => row([n.name, n.connected ? 'yes' : 'no', n.fenced ? 'yes' : 'no', n.sessions, when(n.since), when(n.last_heartbeat)], { 'data-node': n.name }))),
        ];
}

/** Add a sample {t, cpu, mem} to key's series (the last TOP_SAMPLES kept); its CPU in cores and memory per sample. */
function sample(key, t, cpuNs, memBytes) {
        const a = samples.get(key) ?? [];
        a.push({ t, cpu: cpuNs, mem: memBytes });
        if (a.length > TOP_SAMPLES) a.shift();
        samples.set(key, a);
        // CPU in cores: the CPU time used between two samples over the time between them
        const cpu = a.slice(1).map((s, i) =>
                typeof s.cpu === 'number' && typeof a[i].cpu === 'number' && s.t > a[i].t && s.cpu >= a[i].cpu
                        ? (s.cpu - a[i].cpu) / 1e6 / (s.t - a[i].t)
                        : null,
        );
        const mem = a.map((s) => (typeof s.mem === 'number' ? s.mem : null));
        const lastCpu = cpu.length ? cpu[cpu.length - 1] : null;
        const lastMem = mem[mem.length - 1];
        return { cpu, mem, lastCpu, lastMem };
}

/** The CPU and memory chart cells of one series. */
function charts(sr, who) {
        return [
                chartCell(sr.cpu, `CPU of ${who}`, typeof sr.lastCpu === 'number' ? `${sr.lastCpu.toFixed(2)} CPU` : '—'),
                chartCell(sr.mem, `Memory of ${who}`, typeof sr.lastMem === 'number' ? mib(sr.lastMem) : '—'),
        ];
}

/** Top: add this sample of list_users, then a row per user and per live session (the busiest first) with a CPU and a memory chart. */
function top(r) {
        const now = Date.now();
        const list = r.users ?? [];
        const live = r.sessions ?? [];
        const seen = new Set();
        const rows = list.map((u) => {
                const key = `u\n${u.user}`;
                seen.add(key);
                const tr = el('tr', null, { 'data-user': u.user });
                tr.append(el('td', u.user), el('td', u.usage?.live_sessions ?? '—'), ...charts(sample(key, now, u.usage?.cpu_total_ns, u.usage?.memory_bytes), u.user));
                return tr;
        });
        const ranked = live
                .map((s) => {
                        const key = `s\n${s.user}\n${s.session}`;
                        seen.add(key);
                        return { s, sr: sample(key, now, s.cpu_total_ns, s.memory_bytes) };
                })
                .sort((a, b) => (b.sr.lastCpu ?? -1) - (a.sr.lastCpu ?? -1) || (b.sr.lastMem ?? -1) - (a.sr.lastMem ?? -1));
        const sessionRows = ranked.slice(0, TOP_SESSIONS_SHOWN).map(({ s, sr }) => {
                const tr = el('tr', null, { 'data-user': s.user, 'data-session': s.session });
                const a = el('a', s.session, { href: `#/session/${encodeURIComponent(s.user)}/${encodeURIComponent(s.session)}` });
                const name = el('td');
                name.append(a);
                tr.append(name, el('td', s.user), el('td', s.state ?? '—'), ...charts(sr, `${s.user}/${s.session}`));
                return tr;
        });
        // a session gone (or a user) is forgotten with its samples
        for (const k of [...samples.keys()]) if (!seen.has(k)) samples.delete(k);
        const shown = live.length > TOP_SESSIONS_SHOWN ? `the ${TOP_SESSIONS_SHOWN} busiest of ${live.length} live sessions` : `${live.length} live session${live.length === 1 ? '' : 's'}`;
        const sessionsTable = table(shown, ['Session', 'User', 'State', 'CPU', 'Memory'], sessionRows);
        sessionsTable.id = 'top-sessions';
        const usersTable = table(`${list.length} user${list.length === 1 ? '' : 's'}`, ['User', 'Live sessions', 'CPU', 'Memory'], rows);
        usersTable.id = 'top-users';
        return [
                el('p', `Sampled every ${TOP_EVERY_MS / 1000} s while this page is open (list_users: the live containers); the last ${TOP_SAMPLES} samples are drawn.`),
                el('h3', 'Users'),
                usersTable,
                el('h3', 'Sessions'),
                sessionsTable,
        ];
}

/** A cell with the latest value as text and a small SVG line of the series (nulls skipped). */
function chartCell(series, label, now) {
        const td = el('td');
        const W = 160, H = 32;
        const svg = document.createElementNS(SVG, 'svg');
        svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
        svg.setAttribute('width', String(W));
        svg.setAttribute('height', String(H));
        svg.setAttribute('role', 'img');
        svg.setAttribute('class', 'spark');
        const title = document.createElementNS(SVG, 'title');
        title.textContent = `${label}: ${now} now`;
        svg.append(title);
        const vals = series.filter((v) => typeof v === 'number');
        const max = Math.max(...vals, 1e-9);
        const step = W / Math.max(TOP_SAMPLES - 1, 1);
        const pts = series
                .map((v, i) => (typeof v === 'number' ? `${(i * step).toFixed(1)},${(H - 1 - (v / max) * (H - 2)).toFixed(1)}` : null))
                .filter(Boolean);
        const line = document.createElementNS(SVG, 'polyline');
        line.setAttribute('points', pts.join(' '));
        line.setAttribute('fill', 'none');
        line.setAttribute('stroke', 'currentColor');
        line.setAttribute('stroke-width', '1.5');
        svg.append(line);
        if (pts.length === 1) {
                const [cx, cy] = pts[0].split(',');
                const dot = document.createElementNS(SVG, 'circle');
                for (const [k, v] of [['cx', cx], ['cy', cy], ['r', '2'], ['fill', 'currentColor']]) dot.setAttribute(k, v);
                svg.append(dot);
        }
        td.append(el('span', now, { class: 'nowrap' }), el('br'), svg);
        return td;
}

function health(r) {
        const s = r.sessions ?? {}, dk = r.docker ?? {}, ports = r.ports ?? {}, eg = r.egress ?? {}, p = r.pool ?? {}, c = r.counters ?? {};
        const engine = dk.ok ? `reachable (${r.engine?.name ?? 'engine'} ${dk.version ?? ''})`.replace(' )', ')') : `unreachable: ${dk.error ?? ''}`;
        return [
                facts([
                        ['Status', r.status, 'health-status'],
                        ['Engine', engine, 'health-engine'],
                        ['Version', r.version],
                        ['Up for', duration(r.uptime_s)],
                        ['Sessions', `${s.total} (${s.running} running, ${s.paused} paused, ${s.creating} creating, ${s.stopped} stopped, ${s.error} error)`, 'health-sessions'],
                        ['Running executions', r.executions_running],
                        ['Ports', `${ports.used} of ${ports.total} used`],
                        ['Warm pool', `${p.ready ?? 0} ready of ${p.size ?? 0}`],
                        ['Egress', `${eg.allowed} allowed, ${eg.blocked} blocked, ${eg.open} open`],
                        ['Engine cannot enforce', (r.engine?.unenforced ?? []).join(', ') || 'nothing'],
                        ['Monitor last poll', when(r.monitor_last_poll)],
                        ['Errors since start', `${c.auth_failures} failed authentications, ${c.engine_api_errors} engine API errors, ${c.events_dropped} events dropped`, 'health-errors'],
                ]),
        ];
}
