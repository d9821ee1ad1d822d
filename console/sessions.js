// sessions.js — the sessions table: loaded once with list_sessions, then
// kept current from the events stream (each event changes its one row; no
// re-fetch of the list; a destroyed one leaves it). A session the stream announces is added at once
// from the event; its image, labels and limits come from one list_sessions
// that waits 1 s so that a burst of creations costs one request.
import { call, signedIn } from './api.js';
import { el } from './dom.js';

const rows = new Map(); // key(user, session) -> { info, tr, cells }: an operator sees many users'
let detailTimer = null;
let pending = [];
let loaded = false;
const $ = (id) => document.getElementById(id);
const COLS = ['session', 'user', 'state', 'image', 'runtime', 'labels', 'cpu', 'memory', 'executions', 'age'];

export function init() {
        $('filter-label').addEventListener('input', applyFilter);
        $('filter-state').addEventListener('change', applyFilter);
        setInterval(refreshAges, 30000);
}

export function reset() {
        rows.clear();
        pending = [];
        loaded = false;
        clearTimeout(detailTimer);
        $('sessions').tBodies[0].replaceChildren();
        updateCount();
}

export const key = (user, session) => `${user}/${session}`;

/** A session's page address: #/session/<user>/<name>. */
export const href = (user, session) => `#/session/${encodeURIComponent(user)}/${encodeURIComponent(session)}`;

export function get(user, session) {
        return rows.get(key(user, session))?.info;
}

function age(ms) {
        if (!ms) return '';
        const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
        if (s < 60) return `${s}s`;
        if (s < 3600) return `${Math.floor(s / 60)}m`;
        if (s < 86400) return `${Math.floor(s / 3600)}h`;
        return `${Math.floor(s / 86400)}d`;
}

/** An image id as docker ps shows it: sha256:<12 hex>; a name as it is. */
export const shortImage = (id) => (/^sha256:[0-9a-f]{64}$/.test(id || '') ? id.slice(0, 19) : id ?? '');
export const mib = (bytes) => `${Math.round(bytes / 1048576)} MiB`;

// the limits (resources) for CPU and memory: live usage is the admin socket's (sandboxctl top)
function cellText(info, col) {
        switch (col) {
                case 'cpu':
                        return info.resources?.cpu ?? '';
                case 'memory':
                        return typeof info.resources?.memory === 'number' ? mib(info.resources.memory) : '';
                case 'runtime':
                        return info.runtime ?? '';
                case 'executions':
                        return info.executions ?? '';
                case 'age':
                        return age(info.created_at);
                case 'image':
                        return shortImage(info.image);
                default:
                        return info[col] ?? '';
        }
}

function fill(r) {
        const { info, cells } = r;
        for (const col of COLS) {
                const td = cells[col];
                if (col === 'session') {
                        td.firstChild.textContent = info.session;
                } else if (col === 'labels') {
                        td.replaceChildren(
                                ...Object.entries(info.labels || {}).map(([k, v]) => el('span', `${k}=${v}`, { class: 'label' })),
                        );
                } else {
                        td.textContent = String(cellText(info, col));
                }
        }
        cells.state.className = `state-${info.state}`;
        cells.image.title = info.image || '';
        r.tr.dataset.state = info.state || '';
        r.tr.hidden = !matches(info);
}

/* One row made or changed; batch (the first list): the caller places the
 * rows and counts once, so a list of n rows costs O(n), not O(n^2). */
function upsert(info, batch = false) {
        const k = key(info.user, info.session);
        let r = rows.get(k);
        if (!r) {
                const tr = el('tr', null, { 'data-session': info.session, 'data-user': info.user });
                const cells = {};
                for (const col of COLS) {
                        const td = col === 'session' ? el('th', null, { scope: 'row' }) : el('td');
                        if (col === 'session') td.append(el('a', '', { href: href(info.user, info.session) }));
                        cells[col] = td;
                        tr.append(td);
                }
                r = { info: {}, tr, cells };
                rows.set(k, r);
                if (!batch) $('sessions').tBodies[0].prepend(tr);
        }
        r.info = { ...r.info, ...info };
        fill(r);
        if (!batch) updateCount();
        return r;
}

function updateCount() {
        const shown = [...rows.values()].filter((r) => !r.tr.hidden).length;
        $('sessions-count').textContent = `${shown} of ${rows.size} sessions`;
}

function parseLabelFilter() {
        const t = $('filter-label').value.trim();
        if (!t) return null;
        const i = t.indexOf('=');
        return i < 0 ? { key: t, value: null } : { key: t.slice(0, i), value: t.slice(i + 1) };
}

function matches(info) {
        const st = $('filter-state').value;
        if (st && info.state !== st) return false;
        const f = parseLabelFilter();
        if (!f) return true;
        const labels = info.labels || {};
        if (!(f.key in labels)) return false;
        return f.value === null || labels[f.key] === f.value;
}

function applyFilter() {
        for (const r of rows.values()) r.tr.hidden = !matches(r.info);
        updateCount();
}

function refreshAges() {
        for (const r of rows.values()) r.cells.age.textContent = age(r.info.created_at);
}

const FIRST_ROWS = 100; // rows placed before the first paint (more than a screen)
const CHUNK_ROWS = 250; // then this many per task, so the page stays responsive

/** The first list; events that arrived meanwhile are applied after it. The
 *  first rows are placed at once and the rest in chunks, each its own task,
 *  so a long list paints its top in well under a second. */
export async function load() {
        const res = await call('list_sessions', {});
        const body = $('sessions').tBodies[0];
        body.replaceChildren();
        rows.clear();
        // newest on top, as live additions are
        const list = [...res.sessions].sort((a, b) => (b.created_at || 0) - (a.created_at || 0));
        const place = (from, to) => {
                const frag = document.createDocumentFragment();
                for (const s of list.slice(from, to)) frag.append(upsert(s, true).tr);
                body.append(frag);
                updateCount();
        };
        place(0, FIRST_ROWS);
        for (let i = FIRST_ROWS; i < list.length; i += CHUNK_ROWS) {
                await new Promise((r) => setTimeout(r, 0));
                if (!signedIn()) return;
                place(i, i + CHUNK_ROWS);
        }
        loaded = true;
        for (const ev of pending.splice(0)) applyEvent(ev);
        updateCount();
}

function fetchDetailsSoon() {
        if (detailTimer) return;
        detailTimer = setTimeout(async () => {
                detailTimer = null;
                try {
                        const res = await call('list_sessions', {});
                        for (const s of res.sessions) if (rows.has(key(s.user, s.session))) upsert(s);
                } catch {
                        /* the rows keep what the events said */
                }
        }, 1000);
}

const STATE_OF = {
        'session.created': 'creating',
        'session.running': 'running',
        'session.paused': 'paused',
        'session.resumed': 'running',
        'session.stopped': 'stopped',
        'session.error': 'error',
};

export function applyEvent(ev) {
        if (!loaded) {
                pending.push(ev);
                return;
        }
        if (!ev.session || !ev.user) return;
        const state = STATE_OF[ev.type];
        const r = rows.get(key(ev.user, ev.session));
        if (ev.type === 'session.stopped' && ev.data?.reason === 'destroyed') {
                // gone: list_sessions no longer has it, and its page may no longer act on it
                if (r) {
                        r.tr.remove();
                        rows.delete(key(ev.user, ev.session));
                        updateCount();
                }
        } else if (state) {
                const info = { user: ev.user, session: ev.session, state };
                if (!r) info.created_at = ev.ts || Date.now();
                upsert(info);
                if (!r) fetchDetailsSoon();
        } else if (ev.type === 'execution.finished' && r && typeof r.info.executions === 'number') {
                upsert({ user: ev.user, session: ev.session, executions: r.info.executions + 1 });
        }
}
