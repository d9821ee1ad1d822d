// api.js — the console's only door to sandboxd: POST /v1/<method>, the
// GET /v1/events stream and the terminal's WebSocket of this origin, with the
// token in an Authorization header (the WebSocket: in its first message).
// The token lives in this module's variable and nowhere else (no
// URL, cookie, localStorage or sessionStorage): closing or reloading the tab
// forgets it. Any 401 (a close with 4401 on the WebSocket) signs the tab out
// (a revoked or expired token).

let token = null;
let onSignedOut = () => {};

export class ApiError extends Error {
        constructor(status, code, message) {
                super(message || code || `HTTP ${status}`);
                this.status = status;
                this.code = code;
        }
}

export function setToken(t, signedOut) {
        token = t;
        if (signedOut) onSignedOut = signedOut;
}

export function signedIn() {
        return token !== null;
}

function headers(extra) {
        return { Authorization: `Bearer ${token}`, ...extra };
}

function unauthorized() {
        token = null;
        onSignedOut();
}

/** One API method; resolves with its result object, rejects with ApiError. */
export async function call(method, params = {}) {
        if (token === null) throw new ApiError(401, 'unauthorized', 'not signed in');
        const res = await fetch(`/v1/${encodeURIComponent(method)}`, {
                method: 'POST',
                headers: headers({ 'Content-Type': 'application/json' }),
                body: JSON.stringify(params),
                credentials: 'omit',
                cache: 'no-store',
        });
        let body = null;
        try {
                body = await res.json();
        } catch {
                /* not JSON: the status says enough */
        }
        if (res.status === 401) {
                unauthorized();
                throw new ApiError(401, 'unauthorized', body?.error?.message);
        }
        if (!res.ok) throw new ApiError(res.status, body?.error?.code, body?.error?.message);
        return body;
}

/** Follow GET /v1/events until signal aborts: onEvent({id, type, user,
 *  session, ts, data}) for each, resuming with Last-Event-ID after a drop.
 *  onStatus(text) says whether the stream is live. */
export async function followEvents(since, onEvent, onStatus, signal) {
        let last = since;
        let backoff = 500;
        while (!signal.aborted && token !== null) {
                try {
                        const h = headers({ Accept: 'text/event-stream' });
                        if (last !== null) h['Last-Event-ID'] = String(last);
                        const res = await fetch('/v1/events', { headers: h, credentials: 'omit', cache: 'no-store', signal });
                        if (res.status === 401) {
                                unauthorized();
                                return;
                        }
                        if (!res.ok || !res.body) throw new Error(`events: HTTP ${res.status}`);
                        onStatus('live');
                        backoff = 500;
                        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
                        let buf = '';
                        for (;;) {
                                const { value, done } = await reader.read();
                                if (done) break;
                                buf += value;
                                let sep;
                                while ((sep = buf.indexOf('\n\n')) >= 0) {
                                        const block = buf.slice(0, sep);
                                        buf = buf.slice(sep + 2);
                                        let id = null, type = null, data = '';
                                        for (const line of block.split('\n')) {
                                                if (line.startsWith('id: ')) id = Number(line.slice(4));
                                                else if (line.startsWith('event: ')) type = line.slice(7);
                                                else if (line.startsWith('data: ')) data += line.slice(6);
                                        }
                                        if (id !== null) last = id;
                                        if (!type) continue;
                                        let ev = {};
                                        try {
                                                ev = JSON.parse(data);
                                        } catch {
                                                /* a malformed event is skipped, not fatal */
                                        }
                                        onEvent({ ...ev, type });
                                }
                        }
                } catch (e) {
                        if (signal.aborted) return;
                }
                onStatus('reconnecting');
                await new Promise((r) => setTimeout(r, backoff));
                backoff = Math.min(backoff * 2, 10000);
        }
}

/** A WebSocket to path (/v1/terminal) of this origin speaking protocol. Its
 *  first message is first with the token added: the token is never in the
 *  URL or a header. A close with 4401 (the token refused: revoked, expired
 *  or wrong) signs the tab out, as a 401 does. */
export function openSocket(path, protocol, first) {
        if (token === null) throw new ApiError(401, 'unauthorized', 'not signed in');
        const mine = token;
        const ws = new WebSocket(`${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}${path}`, protocol);
        ws.binaryType = 'arraybuffer';
        ws.addEventListener('open', () => ws.send(JSON.stringify({ ...first, token: mine })));
        ws.addEventListener('close', (ev) => {
                if (ev.code === 4401 && token === mine) unauthorized();
        });
        return ws;
}
