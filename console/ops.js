// ops.js — the operator pages (#/ops/users, pool, nodes, health): read with
// list_users, pool_status, list_nodes and daemon_health, which only an
// operator token may call. probe() asks daemon_health once at sign-in; the
// pages' links are shown only when it answers. Each page is fetched when
// opened and on Refresh; every string reaches the page through el() (text).
import { call } from './api.js';
import { el } from './dom.js';
import { mib } from './sessions.js';

const $ = (id) => document.getElementById(id);
export const PAGES = {
        users: { title: 'Users & quotas', method: 'list_users', render: users },
        pool: { title: 'Pool', method: 'pool_status', render: pool },
        nodes: { title: 'Nodes', method: 'list_nodes', render: nodes },
        health: { title: 'Health', method: 'daemon_health', render: health },
};
let operator = false;
let current = null;
let seq = 0; // a slow answer for a page left meanwhile is dropped

export function init() {
        $('ops-refresh').addEventListener('click', () => current && open(current));
}

export function isOperator() {
        return operator;
}

/** Signed in: is this an operator token? Shows or hides the pages' links. */
export async function probe() {
        try {
                await call('daemon_health');
                operator = true;
        } catch {
                operator = false; // forbidden for a tenant; anything else: no pages either
        }
        $('ops-nav').hidden = !operator;
        return operator;
}

export function reset() {
        operator = false;
        current = null;
        seq++;
        $('ops-nav').hidden = true;
        $('ops-body').replaceChildren();
}

/** Show page name (a key of PAGES). */
export async function open(name) {
        const p = PAGES[name];
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
