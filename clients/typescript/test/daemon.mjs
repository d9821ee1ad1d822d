// daemon.mjs — a real sandboxd for the client tests: tests/js/harness.mjs's
// Daemon (private dir and sockets, instance = the run id, cleanup of its
// containers and dir even when a test crashes) with the HTTPS front on a
// loopback port, a CA, server and client certificates made with openssl,
// and mTLS when asked.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { Daemon } from '../../../tests/js/harness.mjs';

const OPENSSL = `set -e
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=sbx-test-ca
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1
printf 'subjectAltName=IP:127.0.0.1\\n' >server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile server.ext
openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=sbx-test-client
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2
`;

/** Start a daemon with HTTPS (and mTLS when asked); env adds config. */
export async function startHttpsDaemon({ mtls = false, env = {} } = {}) {
        const d = new Daemon();
        execFileSync('sh', ['-c', OPENSSL], { cwd: d.dir, stdio: 'ignore', timeout: 120000 });
        Object.assign(d.env, {
                SANDBOXD_HTTP_LISTEN: '127.0.0.1:0',
                SANDBOXD_HTTP_TLS_CERT: path.join(d.dir, 'server.pem'),
                SANDBOXD_HTTP_TLS_KEY: path.join(d.dir, 'server.key'),
                // the client keeps at most 8 connections; 100 parallel calls
                // must never meet the default caps of 5 executions
                SANDBOXD_LIMITS_EXEC_PER_USER: '24',
                SANDBOXD_LIMITS_EXEC_PER_SESSION: '24',
                SANDBOXD_LIMITS_EXEC_GLOBAL: '48',
                ...(mtls ? { SANDBOXD_HTTP_TLS_CLIENT_CA: path.join(d.dir, 'ca.pem') } : {}),
                ...env,
        });
        await d.start();
        const m = /HTTPS listening on 127\.0\.0\.1:0 \(port (\d+)\)/.exec(fs.readFileSync(d.logFile, 'utf8'));
        assert.ok(m, `no HTTPS port in the log:\n${d.logTail()}`);
        d.url = `https://127.0.0.1:${m[1]}`;
        d.caFile = path.join(d.dir, 'ca.pem');
        d.certFile = path.join(d.dir, 'client.pem');
        d.keyFile = path.join(d.dir, 'client.key');
        return d;
}
