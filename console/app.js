// app.js — the console's shell: sign in and out, and the hash router
// (#/ the sessions, #/session/<user>/<name> one session, #/ops/<page> an
// operator's pages: users and quotas, pool, nodes, health). Every string from the
// daemon reaches the page through textContent (dom.js), never as HTML.
import { followEvents, setToken, signedIn } from './api.js';
import * as sessions from './sessions.js';
import * as session from './session.js';
import * as ops from './ops.js';

const $ = (id) => document.getElementById(id);
let streamAbort = null;

function show(view) {
        for (const v of ['signin-view', 'sessions-view', 'session-view', 'ops-view']) $(v).hidden = v !== view;
}

function signedOut(reason) {
        session.close(); // and its terminal
        streamAbort?.abort();
        streamAbort = null;
        sessions.reset();
        ops.reset();
        $('whoami').textContent = '';
        $('signout').hidden = true;
        $('signin-error').textContent = reason || '';
        show('signin-view');
        $('token').focus();
}

function route() {
        if (!signedIn()) return show('signin-view');
        const m = /^#\/session\/([^/]+)\/([^/]+)$/.exec(location.hash);
        const o = /^#\/ops\/(\w+)$/.exec(location.hash);
        if (o && ops.isOperator() && Object.hasOwn(ops.PAGES, o[1])) {
                session.close();
                show('ops-view');
                ops.open(o[1]);
        } else if (m) {
                show('session-view');
                session.open(decodeURIComponent(m[1]), decodeURIComponent(m[2]));
        } else {
                session.close();
                show('sessions-view');
        }
}

async function signIn(tokenText) {
        setToken(tokenText, () => signedOut('Signed out: the token was refused (revoked, expired or wrong).'));
        streamAbort = new AbortController();
        const onEvent = (ev) => {
                sessions.applyEvent(ev);
                session.applyEvent(ev);
        };
        // the stream first (from now), then the list: nothing between is lost
        followEvents(null, onEvent, (s) => ($('live').textContent = s === 'live' ? 'Live' : 'Reconnecting…'), streamAbort.signal);
        try {
                await sessions.load();
        } catch (e) {
                if (signedIn()) $('signin-error').textContent = `Cannot list sessions: ${e.message}`;
                return;
        }
        await ops.probe(); // an operator token: its pages' links
        if (!signedIn()) return;
        $('signin-error').textContent = '';
        $('signout').hidden = false;
        route();
}

$('signin-form').addEventListener('submit', (e) => {
        e.preventDefault();
        const t = $('token').value.trim();
        $('token').value = ''; // not left in the field
        if (t) signIn(t);
});
$('signout').addEventListener('click', () => {
        session.close(); // its terminal's shell is cancelled while the token is still here
        setToken(null);
        signedOut('Signed out.');
        location.hash = '#/';
});
window.addEventListener('hashchange', route);
sessions.init();
session.init();
ops.init();
signedOut('');
