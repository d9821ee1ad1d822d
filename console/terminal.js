// terminal.js — a terminal into the session on its page (issue 39): a
// WebSocket to /v1/terminal (sandboxd.terminal.v1, api.js openSocket), whose
// daemon end runs the session's shell as a tty execution of the token's user
// (as any execution: exec {tty, rows, cols}) and carries its output as binary
// frames, the keys typed as binary frames and the screen's size as
// {"type":"resize"} messages, in order on the one connection. A small screen
// model: text, CR, LF, backspace, tab, cursor moves and erases; colours and
// other escape sequences are dropped. Output reaches the page as text nodes
// only, never as HTML.
import { openSocket } from './api.js';

const $ = (id) => document.getElementById(id);
const SCROLLBACK = 2000; // lines kept
const PROTOCOL = 'sandboxd.terminal.v1';
const KEYS = {
        Enter: '\r',
        Backspace: '\x7f',
        Tab: '\t',
        Escape: '\x1b',
        ArrowUp: '\x1b[A',
        ArrowDown: '\x1b[B',
        ArrowRight: '\x1b[C',
        ArrowLeft: '\x1b[D',
        Home: '\x1b[H',
        End: '\x1b[F',
        Delete: '\x1b[3~',
        PageUp: '\x1b[5~',
        PageDown: '\x1b[6~',
};

let session = null; // the session of the page
let t = null; // the open terminal: { session, ws, id, lines, row, col, esc, queue, rows, cols, closed, decoder }

export function init() {
        const screen = $('terminal-screen');
        $('terminal-open').addEventListener('click', open);
        $('terminal-close').addEventListener('click', () => close('Terminal closed.'));
        screen.addEventListener('keydown', onKey);
        screen.addEventListener('paste', (ev) => {
                ev.preventDefault();
                send(ev.clipboardData.getData('text').replace(/\r?\n/g, '\r'));
        });
        new ResizeObserver(() => t && !t.closed && resize()).observe(screen);
}

/** The session page shows name (null: none); an open terminal of another session is closed. */
export function show(name) {
        if (t && t.session !== name) close('');
        session = name;
        if (!t) setState('closed', '');
}

function setState(state, text) {
        const screen = $('terminal-screen');
        screen.dataset.state = state;
        $('terminal-open').hidden = state === 'running' || state === 'starting';
        $('terminal-close').hidden = !(state === 'running' || state === 'starting');
        if (text !== undefined) $('terminal-status').textContent = text;
}

/** Rows and columns that fit the screen element. */
function measure() {
        const screen = $('terminal-screen');
        const probe = document.createElement('span');
        probe.textContent = 'M'.repeat(10);
        screen.append(probe);
        const box = probe.getBoundingClientRect();
        probe.remove();
        const cs = getComputedStyle(screen);
        const lineHeight = parseFloat(cs.lineHeight) || box.height || 16;
        const w = screen.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
        const h = screen.clientHeight - parseFloat(cs.paddingTop) - parseFloat(cs.paddingBottom);
        const fit = (n) => Math.max(1, Math.min(1000, Math.floor(n)));
        return { rows: fit(h / lineHeight), cols: fit(w / (box.width / 10 || 8)) };
}

function open() {
        if (!session || (t && !t.closed)) return;
        const { rows, cols } = measure();
        let ws;
        try {
                ws = openSocket('/v1/terminal', PROTOCOL, { type: 'auth', session, rows, cols });
        } catch (e) {
                setState('closed', `Cannot open a terminal: ${e.message}`);
                return;
        }
        const me = { session, ws, id: null, lines: [''], row: 0, col: 0, esc: null, queue: [], rows, cols, closed: false, decoder: new TextDecoder() };
        t = me;
        $('terminal-screen').replaceChildren();
        setState('starting', 'Starting a shell…');
        ws.addEventListener('message', (ev) => onMessage(me, ev.data));
        ws.addEventListener('close', (ev) => {
                if (me.closed) return;
                me.closed = true;
                if (t !== me) return;
                if (me.id === null) setState('closed', `Cannot open a terminal: ${me.error || ev.reason || `connection closed (${ev.code})`}`);
                else setState('ended', me.exit || `Terminal lost: ${me.error || ev.reason || `connection closed (${ev.code})`}`);
        });
}

function onMessage(me, data) {
        if (typeof data !== 'string') {
                write(me, me.decoder.decode(new Uint8Array(data), { stream: true }));
                render(me);
                return;
        }
        let m;
        try {
                m = JSON.parse(data);
        } catch {
                return;
        }
        if (m.type === 'ready') {
                me.id = m.execution_id;
                const screen = $('terminal-screen');
                screen.dataset.rows = me.rows;
                screen.dataset.cols = me.cols;
                if (t === me) {
                        setState('running', `Shell running (${me.cols} × ${me.rows}).`);
                        screen.focus();
                }
                for (const b of me.queue.splice(0)) me.ws.send(b);
                resize();
        } else if (m.type === 'exit') {
                me.exit = `The shell ended (${m.state}${m.exit_code !== undefined && m.exit_code !== null ? `, exit ${m.exit_code}` : ''}).`;
        } else if (m.type === 'error') {
                me.error = m.message || m.code;
        } else if (m.type === 'warning' && t === me) {
                $('terminal-status').textContent = `Not done: ${m.message || m.code}`;
        }
}

function close(text) {
        if (!t) return;
        const me = t;
        t = null;
        me.closed = true;
        me.ws.close(1000, 'closed'); // the daemon cancels the shell with its connection
        setState('closed', text);
}

const encoder = new TextEncoder();

function send(s) {
        if (!t || t.closed || !s) return;
        const bytes = encoder.encode(s);
        if (t.id === null) t.queue.push(bytes);
        else t.ws.send(bytes);
}

/** Follow the screen's size; the message goes in order with the keys. */
function resize() {
        const me = t;
        if (!me || me.id === null || me.closed) return;
        const { rows, cols } = measure();
        if (rows === me.rows && cols === me.cols) return;
        me.ws.send(JSON.stringify({ type: 'resize', rows, cols }));
        me.rows = rows;
        me.cols = cols;
        const screen = $('terminal-screen');
        screen.dataset.rows = rows;
        screen.dataset.cols = cols;
        $('terminal-status').textContent = `Shell running (${cols} × ${rows}).`;
}

function onKey(ev) {
        if (!t || t.closed || ev.metaKey) return;
        let s = null;
        if (ev.key === 'Tab' && ev.shiftKey) return; // Shift+Tab leaves the terminal (keyboard users)
        if (ev.ctrlKey && !ev.altKey && ev.key.length === 1 && /[a-z@[\\\]^_]/i.test(ev.key))
                s = String.fromCharCode(ev.key.toUpperCase().charCodeAt(0) & 0x1f);
        else if (KEYS[ev.key] && !ev.ctrlKey) s = KEYS[ev.key];
        else if (ev.key.length === 1 && !ev.ctrlKey) s = (ev.altKey ? '\x1b' : '') + ev.key;
        if (s === null) return;
        ev.preventDefault();
        send(s);
}

/* ---- the screen ---- */

function put(me, ch) {
        if (me.col >= me.cols) {
                me.col = 0;
                lineFeed(me);
        }
        const line = me.lines[me.row].padEnd(me.col);
        me.lines[me.row] = line.slice(0, me.col) + ch + line.slice(me.col + 1);
        me.col++;
}

function lineFeed(me) {
        me.row++;
        if (me.row === me.lines.length) me.lines.push('');
        if (me.lines.length > SCROLLBACK) {
                me.lines.splice(0, me.lines.length - SCROLLBACK);
                me.row = Math.min(me.row, me.lines.length - 1);
        }
}

/** A CSI sequence (ESC [ params final). */
function csi(me, params, final) {
        const n = (i, d = 1) => {
                const v = parseInt(params.replace(/^\?/, '').split(';')[i], 10);
                return Number.isFinite(v) && v > 0 ? Math.min(v, 10000) : d;
        };
        const top = Math.max(0, me.lines.length - me.rows);
        switch (final) {
                case 'A':
                        me.row = Math.max(top, me.row - n(0));
                        break;
                case 'B':
                        me.row = Math.min(me.lines.length - 1, me.row + n(0));
                        break;
                case 'C':
                        me.col = Math.min(me.cols - 1, me.col + n(0));
                        break;
                case 'D':
                        me.col = Math.max(0, me.col - n(0));
                        break;
                case 'G':
                        me.col = Math.min(me.cols - 1, n(0) - 1);
                        break;
                case 'H':
                case 'f':
                        me.row = top + Math.min(me.rows, n(0)) - 1;
                        while (me.row >= me.lines.length) me.lines.push('');
                        me.col = Math.min(me.cols - 1, n(1) - 1);
                        break;
                case 'K': {
                        const l = me.lines[me.row];
                        const mode = n(0, 0);
                        me.lines[me.row] = mode === 0 ? l.slice(0, me.col) : mode === 1 ? ' '.repeat(me.col) + l.slice(me.col) : '';
                        break;
                }
                case 'J':
                        if (n(0, 0) >= 2) {
                                me.lines = [''];
                                me.row = 0;
                                me.col = 0;
                        } else if (n(0, 0) === 0) {
                                me.lines[me.row] = me.lines[me.row].slice(0, me.col);
                                me.lines.length = me.row + 1;
                        }
                        break;
                case 'P': {
                        const l = me.lines[me.row];
                        me.lines[me.row] = l.slice(0, me.col) + l.slice(me.col + n(0));
                        break;
                }
                default: // colours, modes, scroll regions: not drawn
        }
}

/** Feed decoded output through the escape-sequence state machine. */
function write(me, text) {
        for (const ch of text) {
                const c = ch.codePointAt(0);
                if (me.esc === null) {
                        if (ch === '\x1b') me.esc = '';
                        else if (ch === '\r') me.col = 0;
                        else if (ch === '\n') lineFeed(me);
                        else if (ch === '\b') me.col = Math.max(0, me.col - 1);
                        else if (ch === '\t') me.col = Math.min(me.cols - 1, (Math.floor(me.col / 8) + 1) * 8);
                        else if (c >= 0x20 && c !== 0x7f) put(me, ch);
                } else if (me.esc === '') {
                        me.esc = ch === '[' || ch === ']' || ch === '(' || ch === ')' ? ch : null;
                } else if (me.esc[0] === '[') {
                        if (c >= 0x40 && c <= 0x7e) {
                                csi(me, me.esc.slice(1), ch);
                                me.esc = null;
                        } else if (me.esc.length < 64) me.esc += ch;
                        else me.esc = null;
                } else if (me.esc[0] === ']') {
                        // an OSC (a window title): to BEL or ESC \
                        if (ch === '\x07' || (ch === '\\' && me.esc.endsWith('\x1b')) || me.esc.length > 512) me.esc = null;
                        else me.esc += ch;
                } else me.esc = null; // ESC ( x: a character set
        }
}

function render(me) {
        if (t !== me) return;
        const screen = $('terminal-screen');
        const before = me.lines.slice(0, me.row).join('\n') + (me.row ? '\n' : '');
        const line = me.lines[me.row].padEnd(me.col + 1);
        const after = line.slice(me.col + 1) + (me.row + 1 < me.lines.length ? '\n' : '') + me.lines.slice(me.row + 1).join('\n');
        const cursor = document.createElement('span');
        cursor.className = 'cursor';
        cursor.textContent = line[me.col];
        screen.replaceChildren(document.createTextNode(before + line.slice(0, me.col)), cursor, document.createTextNode(after));
        screen.scrollTop = screen.scrollHeight;
}
