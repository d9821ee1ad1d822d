/* Integration tests of the egress proxy through a sealed container (issue
 * 14): python's urllib and curl inside, from the environment's proxy variables, via
 * the runner's 127.0.0.1:3128, the session's egress.sock and the daemon's
 * proxy, to upstream servers on the host's loopback (reached by name through
 * egress.resolve, allowed by egress.allow_private = 127.0.0.1/32).
 * tests/unit/test_egress.c drives curl host-side too. Traffic goes only to
 * 127.0.0.1. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/fronts.h"
#include "sandboxd/token.h"
#include "sandboxd/egress.h"
#include "sandboxd/egress_rules.h"
#include "sandboxd/exec.h"
#include "sandboxd/privacy.h"
#include "sandboxd/service.h"
#include "sandboxd/session.h"
#include "sandboxd/store_egress.h"
#include "testenv.h"

static void upstreams_stop(void);
TestSuite(egress_ct, .timeout = 400, .fini = upstreams_stop);

static struct sbx_config cfg;
static struct daemon *d;

/* Host upstreams, one python process: plain HTTP, HTTPS (a certificate made
 * here) and a TCP echo, each on 127.0.0.1 with a port of its own. */
static const char upstreams_py[] =
        "import asyncio, http.server, ssl, sys, threading\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        b = self.server.body\n"
        "        self.send_response(200); self.send_header('Content-Length', str(len(b)))\n"
        "        self.end_headers(); self.wfile.write(b)\n"
        "    def log_message(self, *a): pass\n"
        "h = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H); h.body = b'hello'\n"
        "t = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H); t.body = b'tls-hello'\n"
        "c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain(sys.argv[1], sys.argv[2])\n"
        "t.socket = c.wrap_socket(t.socket, server_side=True)\n"
        "for s in (h, t): threading.Thread(target=s.serve_forever, daemon=True).start()\n"
        "async def echo(r, w):\n"
        "    while True:\n"
        "        b = await r.read(4096)\n"
        "        if not b: break\n"
        "        w.write(b); await w.drain()\n"
        "    w.close()\n"
        "async def main():\n"
        "    e = await asyncio.start_server(echo, '127.0.0.1', 0, backlog=4096)\n"
        "    print(h.server_address[1], t.server_address[1], e.sockets[0].getsockname()[1], flush=True)\n"
        "    await e.serve_forever()\n"
        "asyncio.run(main())\n";

static pid_t up_pid;
static int http_port, tls_port, echo_port;
static char certdir[512];

static void upstreams_start(void)
{
        char path[600], cert[600], key[600], cmd[2048];
        int pipefd[2];
        FILE *f;
        char *dir = testenv_tmpdir();

        snprintf(certdir, sizeof(certdir), "%s", dir);
        free(dir);
        snprintf(cert, sizeof(cert), "%s/cert.pem", certdir);
        snprintf(key, sizeof(key), "%s/key.pem", certdir);
        snprintf(cmd, sizeof(cmd),
                 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=tls.test "
                 "-addext subjectAltName=DNS:tls.test -keyout %s -out %s >/dev/null 2>&1",
                 key, cert);
        cr_assert_eq(system(cmd), 0, "openssl");
        chmod(cert, 0644);
        snprintf(path, sizeof(path), "%s/upstreams.py", certdir);
        f = fopen(path, "w");
        cr_assert_not_null(f);
        fputs(upstreams_py, f);
        fclose(f);
        cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
        up_pid = fork();
        cr_assert_geq(up_pid, 0);
        if (up_pid == 0) {
                dup2(pipefd[1], 1);
                execlp("python3", "python3", path, cert, key, (char *)NULL);
                _exit(127);
        }
        close(pipefd[1]);
        f = fdopen(pipefd[0], "r");
        cr_assert(fscanf(f, "%d %d %d", &http_port, &tls_port, &echo_port) == 3, "the upstreams did not start");
        fclose(f);
}

static void upstreams_stop(void)
{
        if (up_pid > 0) {
                kill(up_pid, SIGTERM);
                waitpid(up_pid, NULL, 0);
                up_pid = 0;
        }
}

static void open_daemon(void)
{
        struct sbx_error err = {0};
        if (!cfg.data_dir[0]) {
                fixture_config(&cfg);
                snprintf(cfg.image, sizeof(cfg.image), "%s", TESTENV_PYTHON_IMAGE);
                snprintf(cfg.network_default, sizeof(cfg.network_default), "none");
                cfg.memory_bytes = 256 << 20;
                cr_assert_eq(config_set(&cfg, "egress.allow", "up.test:*, tls.test:*, echo.test:*", &err), 0);
                cr_assert_eq(config_set(&cfg, "egress.resolve",
                                        "up.test=127.0.0.1, tls.test=127.0.0.1, echo.test=127.0.0.1, "
                                        "blocked.test=127.0.0.1",
                                        &err),
                             0);
                cr_assert_eq(config_set(&cfg, "egress.allow_private", "127.0.0.1/32", &err), 0);
                cfg.egress_max_tunnels_per_session = 1100; /* constants in the daemon; the fields stay */
                cfg.egress_max_tunnels_per_user = 1100;
                cfg.egress_conns_per_minute = 100000;
        }
        d = fixture_open(&cfg, false);
}

static char *sh(const char *session, const char *command, int *ret_code)
{
        return fixture_run(d, session, command, 120, ret_code);
}

/* Put the test CA where the sandbox can read it: the session's workspace. */
static void give_cert(const char *session)
{
        struct session_info info;
        char src[600], dst[700], cmd[1500];

        cr_assert_eq(session_get_info(d->sessions, "u1", session, &info), 0);
        snprintf(src, sizeof(src), "%s/cert.pem", certdir);
        snprintf(dst, sizeof(dst), "%s/cert.pem", info.workspace);
        session_info_done(&info);
        snprintf(cmd, sizeof(cmd), "cp %s %s && chmod 0644 %s", src, dst, dst);
        cr_assert_eq(system(cmd), 0);
}

Test(egress_ct, urllib_reaches_http_and_https_and_a_blocked_name_is_recorded)
{
        char cmd[2048], *out;
        struct store_egress_entry *rows = NULL;
        size_t n = 0;
        bool blocked_seen = false, allowed_seen = false;
        int code;

        upstreams_start();
        open_daemon();
        free(sh("e", "true", NULL));
        give_cert("e");
        snprintf(cmd, sizeof(cmd),
                 "python3 -c \"import ssl, urllib.request as u, urllib.error as e\n"
                 "c = ssl.create_default_context(cafile='/workspace/cert.pem')\n"
                 "print(u.urlopen('http://up.test:%d/', timeout=30).read().decode())\n"
                 "print(u.urlopen('https://tls.test:%d/', timeout=30, context=c).read().decode())\n"
                 "try:\n"
                 "    u.urlopen('http://blocked.test:%d/', timeout=30)\n"
                 "except e.HTTPError as x:\n"
                 "    print(x.code)\"",
                 http_port, tls_port, http_port);
        out = sh("e", cmd, &code);
        cr_assert_str_eq(out, "hello\ntls-hello\n403\n", "exit %d", code);
        free(out);
        /* without the proxy there is no way out */
        snprintf(cmd, sizeof(cmd),
                 "python3 -c \"import socket\ntry:\n socket.create_connection(('127.0.0.1', %d), timeout=5); "
                 "print('reached')\nexcept OSError as x: print('refused')\"",
                 http_port);
        out = sh("e", cmd, NULL);
        cr_assert_str_eq(out, "refused\n", "the host's loopback is not the container's");
        free(out);
        /* curl, from the same environment: the proxy variables alone take it out;
         * --noproxy '*' finds nothing (exit 7, could not connect: at once, not 28, a timeout) */
        snprintf(cmd, sizeof(cmd),
                 "curl -s --max-time 30 http://up.test:%d/; echo; "
                 "curl -s --max-time 30 --cacert /workspace/cert.pem https://tls.test:%d/; echo; "
                 "curl -s --max-time 30 -o /dev/null -w '%%{http_code}' http://blocked.test:%d/; echo; "
                 "curl -s --max-time 10 --noproxy '*' http://127.0.0.1:%d/; echo rc=$?",
                 http_port, tls_port, http_port, http_port);
        out = sh("e", cmd, &code);
        cr_assert_str_eq(out, "hello\ntls-hello\n403\nrc=7\n", "exit %d", code);
        free(out);

        cr_assert_eq(store_egress_log_list(d->store, "u1", "e", 100, &rows, &n), 0);
        for (size_t i = 0; i < n; i++) {
                if (strcmp(rows[i].host, "blocked.test") == 0 && strcmp(rows[i].decision, "blocked") == 0 &&
                    strcmp(rows[i].reason, "not_allowed") == 0)
                        blocked_seen = true;
                if (strcmp(rows[i].host, "tls.test") == 0 && strcmp(rows[i].method, "CONNECT") == 0 &&
                    strcmp(rows[i].decision, "allowed") == 0 && rows[i].bytes_down > 0)
                        allowed_seen = true;
        }
        free(rows);
        cr_assert(blocked_seen, "the blocked request has its row");
        cr_assert(allowed_seen, "the CONNECT tunnel has its row with bytes");
        {
                cJSON *p = egress_rules_policy_json(d->store, d->privacy, &d->cfg, "u1", "e");
                cr_assert_str_eq(cJSON_GetObjectItem(p, "mode")->valuestring, "egress");
                cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(p, "allow")), 3);
                cJSON_Delete(p);
        }
        daemon_close(d);
        upstreams_stop();
}

#define N_TUNNELS 1000

Test(egress_ct, a_thousand_concurrent_tunnels_through_one_session)
{
        char cmd[4096], *out;
        int code;

        upstreams_start();
        open_daemon();
        /* one asyncio process: every tunnel is up (CONNECT answered, a byte echoed)
         * before any closes; opened 100 at a time (the runner's egress.sock
         * backlog is 128), all held at once */
        snprintf(cmd, sizeof(cmd),
                 "python3 -c \"import asyncio, resource\n"
                 "resource.setrlimit(resource.RLIMIT_NOFILE, (4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
                 "N = %d\n"
                 "async def one(ready, go):\n"
                 "    r, w = await asyncio.open_connection('127.0.0.1', 3128)\n"
                 "    w.write(b'CONNECT echo.test:%d HTTP/1.1\\\\r\\\\n\\\\r\\\\n')\n"
                 "    head = await r.readuntil(b'\\\\r\\\\n\\\\r\\\\n')\n"
                 "    w.write(b'x'); ok = head.startswith(b'HTTP/1.1 200') and await r.readexactly(1) == b'x'\n"
                 "    ready.append(ok)\n"
                 "    await go.wait(); w.close(); return ok\n"
                 "async def main():\n"
                 "    ready, go = [], asyncio.Event()\n"
                 "    tasks = []\n"
                 "    for b in range(0, N, 100):\n"
                 "        tasks += [asyncio.create_task(one(ready, go)) for _ in range(100)]\n"
                 "        while len(ready) < b + 100 and not any(t.done() for t in tasks): await asyncio.sleep(0.05)\n"
                 "    print(sum(ready), flush=True); go.set()\n"
                 "    for r in await asyncio.gather(*tasks, return_exceptions=True):\n"
                 "        if isinstance(r, Exception): print(repr(r)); break\n"
                 "try: asyncio.run(main())\n"
                 "except Exception as x: print(repr(x))\"",
                 N_TUNNELS, echo_port);
        out = sh("k", cmd, &code);
        cr_assert(strcmp(out, "1000\n") == 0, "tunnels up at once (exit %d): %s", code, out);
        free(out);
        daemon_close(d);
        upstreams_stop();
}

static const char holder_py[] =
        "python3 -c \"import socket, time\n"
        "s = socket.create_connection(('127.0.0.1', 3128))\n"
        "s.sendall(b'CONNECT echo.test:%d HTTP/1.1\\r\\n\\r\\n')\n"
        "s.recv(100)\n"
        "while True:\n"
        "    s.sendall(b'p')\n"
        "    if not s.recv(1): break\n"
        "    time.sleep(0.2)\n"
        "time.sleep(3600)\"";

Test(egress_ct, mark_private_closes_open_tunnels_and_survives_a_restart)
{
        struct sbx_error err = {0};
        struct egress_stats es = {0};
        char cmd[2048], *out;
        struct store_egress_entry *rows = NULL;
        size_t n = 0;
        bool ratchet_row = false;

        upstreams_start();
        open_daemon();
        free(sh("p", "true", NULL));
        snprintf(cmd, sizeof(cmd), holder_py, echo_port);
        cr_assert_eq(service_start(d->services, "u1", "p", "holder", cmd, NULL, NULL, &err), 0, "%s", err.msg);
        /* open and relaying (bytes moved): a tunnel still being decided would be
         * closed by the ratchet as blocked, not as the allowed tunnel it is */
        (void)TESTENV_WAIT_UNTIL(egress_session_stats(d->egress, "u1", "p", &es) == 0 && es.open == 1 && es.bytes > 0,
                                 30000);
        cr_assert_eq(es.open, 1, "the holder's tunnel is open");
        cr_assert_gt(es.bytes, 0, "the holder's tunnel relays");

        cr_assert_eq(privacy_mark(d->privacy, "u1", "p", "payroll", "hr", "test", &err), 0, "%s", err.msg);
        cr_assert_eq(egress_session_stats(d->egress, "u1", "p", &es), 0);
        cr_assert_eq(es.open, 0, "closed before mark_private returned");
        cr_assert_eq(store_egress_log_list(d->store, "u1", "p", 10, &rows, &n), 0);
        for (size_t i = 0; i < n; i++)
                ratchet_row |= strcmp(rows[i].reason, "ratchet") == 0 && strcmp(rows[i].decision, "allowed") == 0;
        free(rows);
        cr_assert(ratchet_row, "the closed tunnel's row says why");

        snprintf(cmd, sizeof(cmd),
                 "python3 -c \"import urllib.request as u, time\nt = time.monotonic()\ntry:\n"
                 " u.urlopen('http://up.test:%d/', timeout=30); print('reached')\n"
                 "except Exception as x: print('failed', 'fast' if time.monotonic() - t < 10 else 'slow')\"",
                 http_port);
        out = sh("p", cmd, NULL);
        cr_assert_str_eq(out, "failed fast\n", "a new request fails at once");
        free(out);

        /* a restart: still private, still no socket */
        daemon_close(d);
        open_daemon();
        cr_assert(privacy_is_private(d->privacy, "u1", "p"));
        out = sh("p", "ls /run/sandboxd", NULL);
        cr_assert_null(strstr(out, "egress.sock"), "runner dir after a restart: %s", out);
        free(out);
        out = sh("p", cmd, NULL);
        cr_assert_str_eq(out, "failed fast\n");
        free(out);
        {
                cJSON *p = egress_rules_policy_json(d->store, d->privacy, &d->cfg, "u1", "p");
                cr_assert_str_eq(cJSON_GetObjectItem(p, "mode")->valuestring, "none");
                cJSON_Delete(p);
        }
        daemon_close(d);
        upstreams_stop();
}

/* The admin side: sandboxctl egress-allow / egress-policy / egress / stats,
 * and metrics, on the admin socket (no container needed). */
static int ctl(const char *args, char **out)
{
        return fixture_sandboxctl(SANDBOXD_BINARY_DIR, cfg.admin_socket, args, out);
}

Test(egress_ct, sandboxctl_manages_additions_and_shows_the_log)
{
        struct store_egress_entry row = {.ts = 1, .port = 443, .bytes_up = 10, .bytes_down = 20};
        char *out = NULL;

        fixture_config(&cfg);
        snprintf(cfg.network_default, sizeof(cfg.network_default), "none");
        cr_assert_eq(config_set(&cfg, "egress.allow", "pypi.org", NULL), 0);
        d = fixture_open_sockets(&cfg);

        cr_assert_eq(ctl("egress-allow u1 '*.corp.example:8443' --session s9", &out), 0, "%s", out);
        cr_assert(strstr(out, "*.corp.example:8443") && strstr(out, "session"), "%s", out);
        free(out);
        cr_assert_eq(ctl("egress-allow u1 github.com", &out), 0, "%s", out);
        free(out);
        cr_assert_neq(ctl("egress-allow u1 '*'", &out), 0, "allow-all is the config's alone");
        free(out);
        cr_assert_eq(ctl("egress-policy u1 s9", &out), 0, "%s", out);
        cr_assert(strstr(out, "mode: egress") && strstr(out, "config   pypi.org") &&
                          strstr(out, "user     github.com") && strstr(out, "session  *.corp.example:8443"),
                  "%s", out);
        free(out);
        cr_assert_eq(ctl("egress-deny u1 github.com", &out), 0, "%s", out);
        cr_assert_null(strstr(out, "github.com"), "%s", out);
        free(out);

        snprintf(row.host, sizeof(row.host), "blocked.example");
        snprintf(row.method, sizeof(row.method), "CONNECT");
        snprintf(row.decision, sizeof(row.decision), "blocked");
        snprintf(row.reason, sizeof(row.reason), "not_allowed");
        cr_assert_eq(store_egress_log_add(d->store, "u1", "s9", &row), 0);
        cr_assert_eq(ctl("egress u1 s9", &out), 0, "%s", out);
        cr_assert(strstr(out, "DECISION") && strstr(out, "blocked.example") && strstr(out, "not_allowed"), "%s", out);
        free(out);
        cr_assert_eq(ctl("stats", &out), 0, "%s", out);
        cr_assert(strstr(out, "egress:"), "%s", out);
        free(out);
        cr_assert_eq(ctl("metrics", &out), 0, "%s", out);
        cr_assert(strstr(out, "sandboxd_egress_total{decision=\"blocked\"}"), "%s", out);
        free(out);
        daemon_close(d);
}

/* ---- network policy per execution (issue 37 item 3), through the API ---- */

static char tok[TOKEN_LEN + 1];

static void open_api_daemon(void)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};
        char dir[SBX_PATH_MAX];

        open_daemon(); /* the config */
        daemon_close(d);
        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/run/api.sock", dirname(dir));
        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/run/admin.sock", dir);
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        cr_assert_eq(token_create(d->store, "u1", TOKEN_ROLE_AGENT, tok, NULL, &err), 0, "%s", err.msg);
}

/* A method's result (asserted ok); free with cJSON_Delete. */
static cJSON *api(const char *method, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cJSON *api(const char *method, const char *fmt, ...)
{
        char params[4096];
        va_list ap;
        cJSON *r;

        va_start(ap, fmt);
        vsnprintf(params, sizeof(params), fmt, ap);
        va_end(ap);
        r = apic_call(cfg.api_socket, tok, method, apic_json(params));
        cr_assert_not_null(apic_result(r), "%s %s: %s", method, params, cJSON_PrintUnformatted(r));
        return r;
}

/* Whether the session's audit rows hold a blocked row for host with reason. */
static bool blocked_row(const char *session, const char *host, const char *reason)
{
        struct store_egress_entry *rows = NULL;
        size_t n = 0;
        bool seen = false;

        cr_assert_eq(store_egress_log_list(d->store, "u1", session, 200, &rows, &n), 0);
        for (size_t i = 0; i < n; i++)
                seen |= strcmp(rows[i].host, host) == 0 && strcmp(rows[i].decision, "blocked") == 0 &&
                        strcmp(rows[i].reason, reason) == 0;
        free(rows);
        return seen;
}

Test(egress_ct, network_none_narrows_one_execution_while_a_concurrent_one_keeps_the_session_egress)
{
        char id[40], reason[64], p[256];
        cJSON *r;

        upstreams_start();
        open_api_daemon();
        /* narrowed to nothing; the two curls overlap: each waits for the other to be running */
        r = api("exec",
                "{\"session\":\"n\",\"background\":true,\"network\":\"none\",\"command\":"
                "\"while [ ! -e /tmp/go ]; do sleep 0.05; done; "
                "curl -s -o /dev/null -w '%%{http_code}' --max-time 30 http://up.test:%d/; "
                "touch /tmp/none-done; while [ ! -e /tmp/fin ]; do sleep 0.05; done\"}",
                http_port);
        snprintf(id, sizeof(id), "%s", apic_str(apic_result(r), "execution_id"));
        cJSON_Delete(r);
        r = api("exec",
                "{\"session\":\"n\",\"command\":\"touch /tmp/go; curl -s --max-time 30 http://up.test:%d/; "
                "echo; while [ ! -e /tmp/none-done ]; do sleep 0.05; done; touch /tmp/fin\"}",
                http_port);
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "hello\n", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        snprintf(p, sizeof(p), "{\"session\":\"n\",\"execution_id\":\"%s\",\"wait\":60}", id);
        r = api("get_execution", "%s", p);
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "403", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        snprintf(reason, sizeof(reason), "narrowed:%s", id);
        cr_assert(blocked_row("n", "up.test", reason), "the refusal's row names the execution's narrowing");
        daemon_close(d);
        upstreams_stop();
}

Test(egress_ct, an_allow_list_narrows_to_its_hosts_in_exec_run_code_run_tests_and_run_cell)
{
        cJSON *r;

        upstreams_start();
        open_api_daemon();
        /* both names are on the session's allowlist and reach the same server: the narrowing picks */
        r = api("exec",
                "{\"session\":\"a\",\"network\":{\"allow\":[\"tls.test:%d\"]},\"command\":"
                "\"curl -s --max-time 30 http://tls.test:%d/; echo; "
                "curl -s -o /dev/null -w '%%{http_code}' --max-time 30 http://up.test:%d/\"}",
                http_port, http_port, http_port);
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "hello\n403", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = api("run_code",
                "{\"session\":\"a\",\"language\":\"python\",\"network\":\"none\",\"code\":"
                "\"import urllib.request as u, urllib.error as e\\ntry:\\n"
                "    u.urlopen('http://up.test:%d/', timeout=30); print('reached')\\n"
                "except e.HTTPError as x:\\n    print(x.code)\"}",
                http_port);
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "403\n", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = api("run_tests",
                "{\"session\":\"a\",\"language\":\"python\",\"network\":\"none\",\"tests\":"
                "\"import urllib.request as u, urllib.error as e\\n"
                "def test_offline():\\n    try:\\n        u.urlopen('http://up.test:%d/', timeout=30)\\n"
                "    except e.HTTPError as x:\\n        assert x.code == 403\\n        return\\n"
                "    assert False, 'reached'\\n\"}",
                http_port);
        cr_assert_eq(apic_num(cJSON_GetObjectItem(apic_result(r), "summary"), "passed"), 1, "%s",
                     cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        /* a cell narrows its kernel while it runs; the next cell, not narrowed, has the session's egress */
        r = api("run_cell",
                "{\"session\":\"a\",\"network\":\"none\",\"code\":"
                "\"import urllib.request as u, urllib.error as e\\ntry:\\n"
                "    u.urlopen('http://up.test:%d/', timeout=30); print('reached')\\n"
                "except e.HTTPError as x:\\n    print(x.code)\"}",
                http_port);
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "403\n", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = api("run_cell",
                "{\"session\":\"a\",\"code\":\"print(u.urlopen('http://up.test:%d/', timeout=30).read().decode())\"}",
                http_port);
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "hello\n", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        daemon_close(d);
        upstreams_stop();
}

/* From inside one execution narrowed to nothing: no proxy variables and a CONNECT by hand; a
 * double-forked setsid grandchild; a forged RP_EGRESS_FROM ("a service's") straight on
 * egress.sock. Each is refused (403): attribution is by process, and only the runner's header
 * counts. */
Test(egress_ct, bypasses_from_a_narrowed_execution_are_still_refused)
{
        cJSON *r;

        upstreams_start();
        open_api_daemon();
        r = api("exec",
                "{\"session\":\"b\",\"network\":\"none\",\"command\":"
                "\"env -u HTTPS_PROXY -u HTTP_PROXY -u https_proxy -u http_proxy python3 -c \\\""
                "import socket\\n"
                "s = socket.create_connection(('127.0.0.1', 3128))\\n"
                "s.sendall(b'CONNECT up.test:%d HTTP/1.1\\\\r\\\\n\\\\r\\\\n')\\n"
                "print(s.recv(12).decode())\\\"; "
                "setsid sh -c '(curl -s -o /dev/null -w %%{http_code} --max-time 30 http://up.test:%d/ "
                "> /tmp/gc.out; touch /tmp/gc.done) &'; "
                "while [ ! -e /tmp/gc.done ]; do sleep 0.05; done; cat /tmp/gc.out; echo; "
                "python3 -c \\\""
                "import socket, struct\\n"
                "s = socket.socket(socket.AF_UNIX)\\n"
                "s.connect('/run/sandboxd/egress.sock')\\n"
                "s.sendall(struct.pack('=IHHI', 0, 33, 2, 0) + "
                "b'GET http://up.test:%d/ HTTP/1.1\\\\r\\\\nHost: up.test\\\\r\\\\n\\\\r\\\\n')\\n"
                "print(s.recv(12).decode())\\\"\"}",
                http_port, http_port, http_port);
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "HTTP/1.1 403\n403\nHTTP/1.1 403\n", "%s",
                         cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        /* the same forged header from an execution that is not narrowed changes nothing either */
        r = api("exec",
                "{\"session\":\"b\",\"command\":\"python3 -c \\\""
                "import socket, struct\\n"
                "s = socket.socket(socket.AF_UNIX)\\n"
                "s.connect('/run/sandboxd/egress.sock')\\n"
                "s.sendall(struct.pack('=IHHI', 0, 33, 2, 0) + "
                "b'GET http://up.test:%d/ HTTP/1.1\\\\r\\\\nHost: up.test\\\\r\\\\n\\\\r\\\\n')\\n"
                "print(s.recv(12).decode())\\\"\"}",
                http_port);
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "HTTP/1.0 200\n", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        daemon_close(d);
        upstreams_stop();
}
