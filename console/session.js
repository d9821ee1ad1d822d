// session.js — one session's page (#/session/<user>/<name>): facts, executions
// with their output, a terminal (terminal.js), the files of /workspace with downloads, and actions
// behind a confirmation. A name the signed-in token does not list is shown
// as missing and never sent to a session method (those would create it).
import { call } from './api.js';
import { confirmAction, el } from './dom.js';
import * as sessions from './sessions.js';
import { mib } from './sessions.js';
import * as terminal from './terminal.js';

const $ = (id) => document.getElementById(id);
const EXEC_SHOWN = 20; // executions listed, newest first
const OUTPUT_SHOWN = 10; // of which this many with their output
let current = null; // the session shown, { user, name }, or null
let gen = 0; // bumps on every open: answers for an older page are dropped

export function init() {
        for (const b of document.querySelectorAll('#session-view [data-action]'))
                b.addEventListener('click', () => act(b.dataset.action, b.textContent));
        $('session-refresh').addEventListener('click', () => current && load(current.name));
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
        await Promise.all([loadExecutions(name, g), loadFiles(name, g)]);
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
                if (g === gen) body.replaceChildren(el('tr')).firstChild.append(el('td', `Cannot list files: ${e.message}`));
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

async function act(method, label) {
        if (!current || !sessions.get(current.user, current.name)) return;
        const { name } = current;
        if (!(await confirmAction(`${label} session ${name}?`))) return;
        $('action-status').textContent = `${label}…`;
        try {
                const r = await call(method, { session: name });
                $('action-status').textContent =
                        method === 'snapshot_session' && r.snapshot ? `Snapshot ${r.snapshot} taken.` : `${label}: done.`;
        } catch (e) {
                $('action-status').textContent = `${label} failed: ${e.message}`;
        }
}

export function applyEvent(ev) {
        if (!current || ev.session !== current.name || ev.user !== current.user) return;
        const info = sessions.get(current.user, current.name);
        if (info) facts(info);
        if (ev.type === 'execution.finished') loadExecutions(current.name, gen);
}
