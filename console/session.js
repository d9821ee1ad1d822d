// session.js — one session's page (#/session/<user>/<name>): facts, executions
// with their output, a terminal (terminal.js), the files of /workspace with
// downloads and an upload, its cells' last outputs (a PNG as an <img> from its
// base64, never HTML from an output), services and their ports, egress (the
// policy and blocked requests), its snapshots (restore, fork, delete), its
// events as a timeline, its audit rows (session_audit, paged back from the
// newest), and actions behind a confirmation. A name the
// signed-in token does not list is shown as missing and never sent to a
// session method (those would create it).
import { call } from './api.js';
import { confirmAction, el } from './dom.js';
import * as sessions from './sessions.js';
import { mib } from './sessions.js';
import * as terminal from './terminal.js';

const $ = (id) => document.getElementById(id);
const EXEC_SHOWN = 20; // executions listed, newest first
const OUTPUT_SHOWN = 10; // of which this many with their output
const CONTEXTS_SHOWN = 10; // cells: the last cell of this many contexts
const TIMELINE_SHOWN = 100; // the session's newest events
const EVENT_PAGES = 5; // events read at most (pages of 1,000) for the timeline
const AUDIT_PAGE = 100; // audit rows per session_audit page
const AUDIT_SHOWN_MAX = 1000; // audit rows the page holds at most (Older stops there)
export const UPLOAD_MAX = 4 * 1048576; // base64 in JSON stays under the API's 8 MiB body
let current = null; // the session shown, { user, name }, or null
let gen = 0; // bumps on every open: answers for an older page are dropped
let auditBefore = null; // session_audit's next_before for Older, or null: no older rows

export function init() {
        for (const b of document.querySelectorAll('#session-view [data-action]'))
                b.addEventListener('click', () => act(b.dataset.action, b.textContent));
        $('session-refresh').addEventListener('click', () => current && load(current.name));
        $('upload').addEventListener('click', upload);
        $('audit-older').addEventListener('click', () => current && loadAudit(current.name, gen, auditBefore));
        terminal.init();
}

export function close() {
        terminal.show(null);
        current = null;
        gen++;
}

export function open(user, name) {
        current = { user, name };
        gen++;
        $('session-title').textContent = `Session ${name}`;
        $('action-status').textContent = '';
        // nothing of the session shown before stays, even hidden
        for (const id of ['executions', 'cells', 'egress-blocked', 'timeline']) $(id).replaceChildren();
        for (const id of ['files', 'services', 'snapshots', 'audit']) $(id).tBodies[0].replaceChildren();
        $('audit-older').hidden = true;
        $('audit-status').textContent = '';
        $('egress-policy').textContent = '';
        const info = sessions.get(user, name);
        $('session-missing').hidden = !!info;
        $('session-body').hidden = !info;
        terminal.show(info ? name : null);
        if (!info) {
                $('session-missing').textContent = `No session named ${name} of user ${user} for this token.`;
                return;
        }
        load(name);
}

function facts(info) {
        const dl = $('session-facts');
        const rows = [
                ['State', info.state],
                ['User', info.user],
                ['Image', info.image],
                ['Runtime', info.runtime],
                ['Executions', info.executions !== undefined ? `${info.executions} (${info.executions_running ?? 0} running)` : ''],
                ['Created', info.created_at ? new Date(info.created_at).toISOString() : ''],
                ['Expires', info.expires_at ? new Date(info.expires_at).toISOString() : ''],
                ['Labels', Object.entries(info.labels || {}).map(([k, v]) => `${k}=${v}`).join(', ')],
                [
                        'Limits',
                        info.resources
                                ? [
                                                `${info.resources.cpu} CPU`,
                                                typeof info.resources.memory === 'number' ? `${mib(info.resources.memory)} memory` : '',
                                                typeof info.resources.disk === 'number' ? `${mib(info.resources.disk)} disk` : '',
                                        ]
                                                .filter(Boolean)
                                                .join(', ')
                                : '',
                ],
        ];
        dl.replaceChildren(...rows.filter(([, v]) => v !== undefined && v !== null && v !== '').flatMap(([k, v]) => [el('dt', k), el('dd', v)]));
        dl.dataset.state = info.state || '';
}

async function load(name) {
        const g = gen;
        facts(sessions.get(current.user, name) || { session: name });
        const info = sessions.get(current.user, name);
        const running = info?.state === 'running';
        // cells, services and the policy need the container: a paused or stopped session is not woken for them
        await Promise.all([
                loadExecutions(name, g),
                loadFiles(name, g),
                running ? loadCells(name, g) : $('cells').replaceChildren(el('p', 'Cells are shown while the session runs.')),
                running ? loadServices(name, g) : $('services').tBodies[0].replaceChildren(),
                running ? loadEgress(name, g) : ($('egress-policy').textContent = 'The egress policy is shown while the session runs.'),
                loadSnapshots(name, g),
                loadTimeline(name, g),
                loadAudit(name, g, null),
        ]);
}

/** A table body of one row, one cell across: "No …" or "Cannot …". */
function oneRow(body, text, colspan) {
        const tr = el('tr');
        tr.append(el('td', text, { colspan: String(colspan) }));
        body.replaceChildren(tr);
}

/** A section's "cannot" line, unless the page moved on. */
function failed(g, target, what, e) {
        if (g !== gen) return;
        const line = el(target.tagName === 'TBODY' ? 'tr' : target.tagName === 'OL' ? 'li' : 'p');
        if (target.tagName === 'TBODY') line.append(el('td', `Cannot list ${what}: ${e.message}`, { colspan: '5' }));
        else line.textContent = `Cannot list ${what}: ${e.message}`;
        target.replaceChildren(line);
}

/** Each context's last cell with its outputs: text as text, image/png as an <img>. */
async function loadCells(name, g) {
        const box = $('cells');
        let res;
        try {
                res = await call('list_contexts', { session: name });
        } catch (e) {
                return failed(g, box, 'cells', e);
        }
        const parts = await Promise.all(
                (res.contexts ?? []).slice(0, CONTEXTS_SHOWN).map(async (c) => {
                        const sec = el('section', null, { 'data-context': c.context });
                        sec.append(el('h4', `${c.context} (${c.language}, ${c.state}, ${c.execution_count ?? 0} cells run)`));
                        try {
                                const cell = await call('last_cell', { session: name, context: c.context });
                                sec.append(...cellOutputs(cell));
                        } catch (e) {
                                sec.append(el('p', `No last cell: ${e.message}`));
                        }
                        return sec;
                }),
        );
        if (g !== gen) return;
        box.replaceChildren(...parts);
        if (!parts.length) box.replaceChildren(el('p', 'No interpreter contexts.'));
}

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

function cellOutputs(cell) {
        const out = [el('p', `Cell ${cell.execution_count ?? ''}: ${cell.status ?? ''}`)];
        if (cell.stdout) out.push(el('pre', cell.stdout, { class: 'stdout', 'aria-label': 'stdout' }));
        if (cell.stderr) out.push(el('pre', cell.stderr, { class: 'stderr', 'aria-label': 'stderr' }));
        for (const o of cell.outputs ?? []) {
                const data = o.data ?? {};
                const png = typeof data['image/png'] === 'string' ? data['image/png'].replace(/\s+/g, '') : '';
                if (png && BASE64.test(png)) {
                        const alt = typeof data['text/plain'] === 'string' ? data['text/plain'] : 'a chart the cell drew';
                        out.push(el('img', null, { src: `data:image/png;base64,${png}`, alt, class: 'cell-output' }));
                } else if (typeof data['text/plain'] === 'string') {
                        out.push(el('pre', data['text/plain'], { class: 'cell-output' })); // text/html is never rendered
                } else if (o.type === 'error') {
                        out.push(el('pre', `${o.ename ?? 'error'}: ${o.evalue ?? ''}`, { class: 'stderr' }));
                }
        }
        if (cell.error) out.push(el('pre', `${cell.error.name ?? 'error'}: ${cell.error.value ?? ''}`, { class: 'stderr' }));
        return out;
}

async function loadServices(name, g) {
        const body = $('services').tBodies[0];
        let res;
        try {
                res = await call('list_services', { session: name });
        } catch (e) {
                return failed(g, body, 'services', e);
        }
        if (g !== gen) return;
        const rows = (res.services ?? []).map((sv) => {
                const tr = el('tr', null, { 'data-service': sv.name });
                const ports = (sv.ports ?? []).map((p) => `${p.container_port} → ${p.host_port}`).join(', ');
                tr.append(el('td', sv.name), el('td', sv.state), el('td', sv.command ?? ''), el('td', ports || 'none', { class: 'ports' }));
                return tr;
        });
        body.replaceChildren(...rows);
        if (!rows.length) oneRow(body, 'No services.', 4);
}

async function loadEgress(name, g) {
        let res;
        try {
                res = await call('session_info', { session: name });
        } catch (e) {
                if (g === gen) $('egress-policy').textContent = `Cannot read the egress policy: ${e.message}`;
                return;
        }
        if (g !== gen) return;
        const p = res.egress ?? {};
        const allow = (p.allow ?? []).map((a) => (typeof a === 'string' ? a : a.pattern ?? JSON.stringify(a)));
        $('egress-policy').textContent = `Mode ${p.mode ?? 'unknown'}${res.private ? ' (private: no way out)' : ''}; allowed: ${allow.join(', ') || 'nothing'}.`;
}

/** The user's snapshots of this session, each with restore, fork and delete (confirmed). */
async function loadSnapshots(name, g) {
        const body = $('snapshots').tBodies[0];
        let res;
        try {
                res = await call('list_snapshots', { session: name });
        } catch (e) {
                return failed(g, body, 'snapshots', e);
        }
        if (g !== gen) return;
        const rows = (res.snapshots ?? []).map((sn) => {
                const tr = el('tr', null, { 'data-snapshot': sn.snapshot });
                const acts = el('td');
                for (const [label, fn] of [
                        ['Restore', () => snapshotAction(name, sn, 'restore')],
                        ['Fork', () => snapshotAction(name, sn, 'fork')],
                        ['Delete', () => snapshotAction(name, sn, 'delete')],
                ]) {
                        const b = el('button', label, { type: 'button', 'aria-label': `${label} snapshot ${sn.name || sn.snapshot}`, 'data-snapshot-action': label.toLowerCase() });
                        b.addEventListener('click', fn);
                        acts.append(b, ' ');
                }
                tr.append(el('td', sn.snapshot), el('td', sn.name ?? ''), el('td', typeof sn.bytes === 'number' ? (sn.bytes < 1048576 ? `${sn.bytes} bytes` : mib(sn.bytes)) : ''), el('td', sn.created_at ? new Date(sn.created_at).toISOString() : ''), acts);
                return tr;
        });
        body.replaceChildren(...rows);
        if (!rows.length) oneRow(body, 'No snapshots.', 5);
}

async function snapshotAction(name, sn, what) {
        const label = sn.name || sn.snapshot;
        const fork = what === 'fork' ? forkName(name) : null;
        if (fork === '') return;
        const question = {
                restore: `Restore session ${name} from snapshot ${label}? Its processes end and its workspace is put back.`,
                fork: `Fork snapshot ${label} as a new session ${fork}?`,
                delete: `Delete snapshot ${label}?`,
        }[what];
        if (!(await confirmAction(question))) return;
        try {
                if (what === 'restore') await call('restore_session', { session: name, snapshot: sn.snapshot });
                else if (what === 'fork') await call('fork_session', { from: { snapshot: sn.snapshot }, session: fork });
                else await call('delete_snapshot', { snapshot: sn.snapshot });
                $('action-status').textContent = { restore: `Restored from ${label}.`, fork: `Forked ${label} as ${fork}.`, delete: `Deleted snapshot ${label}.` }[what];
        } catch (e) {
                $('action-status').textContent = `Cannot ${what} snapshot ${label}: ${e.message}`;
        }
        if (current?.name === name) loadSnapshots(name, gen);
}

/** The name a fork gets: the field's, or <name>-fork-<4 hex>; '' (with a message) when invalid. */
function forkName(name) {
        const typed = $('fork-name').value.trim();
        const n = typed || `${name.slice(0, 54)}-fork-${Math.floor(Math.random() * 65536).toString(16).padStart(4, '0')}`;
        if (/^[A-Za-z0-9_.-]{1,64}$/.test(n)) return n;
        $('action-status').textContent = 'A session name is 1-64 characters of A-Z a-z 0-9 _ . -';
        return '';
}

/** One timeline row of an event: its time, type and what it carries, as text. */
function eventRow(ev) {
        const data = ev.data && typeof ev.data === 'object' ? Object.entries(ev.data).map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join(' ') : '';
        return el('li', `${ev.ts ? new Date(ev.ts).toISOString() : ''} ${ev.type} ${data}`.trim(), { 'data-event': ev.type, 'data-id': String(ev.id ?? '') });
}

/** The session's events (the user's log, read in pages) as a timeline, and its blocked requests. */
async function loadTimeline(name, g) {
        const mine = [];
        let since = 0;
        try {
                for (let page = 0; page < EVENT_PAGES; page++) {
                        const r = await call('events', { since, limit: 1000 });
                        for (const ev of r.events ?? []) if (ev.session === name && ev.user === current?.user) mine.push(ev);
                        if ((r.events?.length ?? 0) < 1000 || typeof r.next !== 'number') break;
                        since = r.next;
                }
        } catch (e) {
                return failed(g, $('timeline'), 'events', e);
        }
        if (g !== gen) return;
        const shown = mine.slice(-TIMELINE_SHOWN);
        $('timeline').replaceChildren(...shown.map(eventRow));
        if (!shown.length) $('timeline').replaceChildren(el('li', 'No events.'));
        const blocked = mine.filter((ev) => ev.type === 'egress.blocked').slice(-TIMELINE_SHOWN);
        $('egress-blocked').replaceChildren(...blocked.map(blockedRow));
        if (!blocked.length) $('egress-blocked').replaceChildren(el('li', 'No blocked requests.'));
}

function blockedRow(ev) {
        return el('li', `${ev.ts ? new Date(ev.ts).toISOString() : ''} blocked ${ev.data?.host ?? '?'}:${ev.data?.port ?? '?'}`, { class: 'blocked', 'data-host': String(ev.data?.host ?? '') });
}

/** A page of the session's audit rows: the newest (before null) replaces the table, an older page goes above it. */
async function loadAudit(name, g, before) {
        const body = $('audit').tBodies[0];
        let res;
        try {
                res = await call('session_audit', before === null ? { session: name, limit: AUDIT_PAGE } : { session: name, limit: AUDIT_PAGE, before });
        } catch (e) {
                return failed(g, body, 'audit rows', e);
        }
        if (g !== gen) return;
        const rows = (res.audit ?? []).map((a) => {
                const tr = el('tr', null, { 'data-audit': String(a.id), 'data-audit-action': a.action ?? '' });
                const detail = a.detail === undefined || a.detail === null ? '' : typeof a.detail === 'string' ? a.detail : JSON.stringify(a.detail);
                tr.append(el('td', a.ts ? new Date(a.ts).toISOString() : '', { class: 'nowrap' }), el('td', a.actor ?? ''), el('td', a.action ?? ''), el('td', detail, { class: 'detail' }));
                return tr;
        });
        if (before === null) body.replaceChildren(...rows);
        else body.prepend(...rows);
        if (!body.rows.length) oneRow(body, 'No audit rows.', 4);
        const full = body.querySelectorAll('tr[data-audit]').length >= AUDIT_SHOWN_MAX;
        auditBefore = typeof res.next_before === 'number' ? res.next_before : null;
        $('audit-older').hidden = auditBefore === null || full;
        $('audit-status').textContent = full && auditBefore !== null ? `The newest ${AUDIT_SHOWN_MAX} rows are shown; sandboxctl logs reads further back.` : '';
}

/** The chosen file into /workspace (write_file, base64), refused here past UPLOAD_MAX. */
async function upload() {
        if (!current || !sessions.get(current.user, current.name)) return;
        const { name } = current;
        const f = $('upload-file').files[0];
        if (!f) {
                $('action-status').textContent = 'Choose a file to upload first.';
                return;
        }
        if (f.size > UPLOAD_MAX) {
                $('action-status').textContent = `Cannot upload ${f.name}: ${f.size} bytes is over the ${mib(UPLOAD_MAX)} an upload may be.`;
                return;
        }
        const bytes = new Uint8Array(await f.arrayBuffer());
        let bin = '';
        for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
        $('action-status').textContent = `Uploading ${f.name}…`;
        try {
                const r = await call('write_file', { session: name, path: f.name, content: btoa(bin), encoding: 'base64' });
                $('action-status').textContent = `Uploaded ${r.path} (${r.bytes} bytes).`;
        } catch (e) {
                $('action-status').textContent = `Cannot upload ${f.name}: ${e.message}`;
        }
        $('upload-file').value = '';
        if (current?.name === name) loadFiles(name, gen);
}

async function loadExecutions(name, g) {
        const ol = $('executions');
        let res;
        try {
                res = await call('list_executions', { session: name, limit: EXEC_SHOWN });
        } catch (e) {
                if (g === gen) ol.replaceChildren(el('li', `Cannot list executions: ${e.message}`));
                return;
        }
        const items = await Promise.all(
                res.executions.map(async (x, i) => {
                        const li = el('li', null, { 'data-execution': x.execution_id });
                        li.append(
                                el('code', x.command_preview ?? x.command ?? ''),
                                el('span', ` — ${x.state}${x.exit_code !== undefined && x.exit_code !== null ? `, exit ${x.exit_code}` : ''}`),
                        );
                        if (i < OUTPUT_SHOWN) {
                                try {
                                        const full = await call('get_execution', { session: name, execution_id: x.execution_id });
                                        if (full.stdout) li.append(el('pre', full.stdout, { class: 'stdout', 'aria-label': 'stdout' }));
                                        if (full.stderr) li.append(el('pre', full.stderr, { class: 'stderr', 'aria-label': 'stderr' }));
                                } catch {
                                        /* listed without output */
                                }
                        }
                        return li;
                }),
        );
        if (g !== gen) return;
        ol.replaceChildren(...items);
        if (!items.length) ol.replaceChildren(el('li', 'No executions yet.'));
}

async function loadFiles(name, g) {
        const body = $('files').tBodies[0];
        let res;
        try {
                res = await call('list_files', { session: name });
        } catch (e) {
                if (g === gen) oneRow(body, `Cannot list files: ${e.message}`, 4);
                return;
        }
        if (g !== gen) return;
        body.replaceChildren(
                ...res.entries.map((f) => {
                        const tr = el('tr', null, { 'data-file': f.name });
                        const dl = el('td');
                        if (f.type === 'file') {
                                const b = el('button', 'Download', { type: 'button', 'aria-label': `Download ${f.name}` });
                                b.addEventListener('click', () => download(name, f.name));
                                dl.append(b);
                        }
                        tr.append(el('td', f.name), el('td', f.type), el('td', f.size ?? ''), dl);
                        return tr;
                }),
        );
}

/** read_file in base64 pages until eof, then a Blob saved under its name. */
async function download(name, path) {
        const parts = [];
        let offset = 0;
        try {
                for (;;) {
                        const r = await call('read_file', { session: name, path, offset, encoding: 'base64' });
                        const bin = atob(r.content);
                        const bytes = new Uint8Array(bin.length);
                        for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
                        parts.push(bytes);
                        offset += bytes.length;
                        if (r.eof || bytes.length === 0) break;
                }
        } catch (e) {
                $('action-status').textContent = `Cannot download ${path}: ${e.message}`;
                return;
        }
        const url = URL.createObjectURL(new Blob(parts, { type: 'application/octet-stream' }));
        const a = el('a', null, { href: url, download: path.split('/').pop() });
        document.body.append(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 60000);
        $('action-status').textContent = `Downloaded ${path} (${offset} bytes).`;
}

/** The params of an action, or null when it cannot be asked (a bad fork name). */
function actionParams(method, name) {
        if (method === 'fork_session') {
                const fork = forkName(name);
                return fork ? { from: { session: name }, session: fork } : null;
        }
        if (method === 'mark_private') return { session: name, dataset: $('private-dataset').value.trim() || 'console' };
        return { session: name };
}

function question(method, label, name, p) {
        if (method === 'fork_session') return `Fork session ${name} as a new session ${p.session}?`;
        if (method === 'mark_private')
                return `Mark session ${name} private (dataset ${p.dataset})? It loses every way out (egress, port forwards), for good.`;
        return `${label} session ${name}?`;
}

async function act(method, label) {
        if (!current || !sessions.get(current.user, current.name)) return;
        const { name } = current;
        const p = actionParams(method, name);
        if (!p || !(await confirmAction(question(method, label, name, p)))) return;
        $('action-status').textContent = `${label}…`;
        try {
                const r = await call(method, p);
                $('action-status').textContent =
                        method === 'snapshot_session' && r.snapshot
                                ? `Snapshot ${r.snapshot} taken.`
                                : method === 'fork_session'
                                  ? `Forked as ${p.session}.`
                                  : `${label}: done.`;
                if (method === 'snapshot_session' && current?.name === name) loadSnapshots(name, gen);
        } catch (e) {
                $('action-status').textContent = `${label} failed: ${e.message}`;
        }
}

export function applyEvent(ev) {
        if (!current || ev.session !== current.name || ev.user !== current.user) return;
        const info = sessions.get(current.user, current.name);
        if (info) facts(info);
        else if ($('session-missing').hidden) {
                // destroyed while shown: nothing here acts on it any more (an action would create it again)
                terminal.show(null);
                $('session-missing').textContent = `Session ${current.name} of user ${current.user} was destroyed.`;
                $('session-missing').hidden = false;
                $('session-body').hidden = true;
        }
        if (ev.type === 'execution.finished') loadExecutions(current.name, gen);
        const tl = $('timeline');
        if ([...tl.children].some((li) => li.dataset.id === String(ev.id))) return; // read with the log already
        if (tl.firstChild && !tl.firstChild.dataset.event) tl.replaceChildren(); // "No events."
        tl.append(eventRow(ev));
        while (tl.children.length > TIMELINE_SHOWN) tl.firstChild.remove();
        if (ev.type === 'egress.blocked') {
                const eb = $('egress-blocked');
                if (eb.firstChild && !eb.firstChild.dataset.host) eb.replaceChildren();
                eb.append(blockedRow(ev));
        }
}
