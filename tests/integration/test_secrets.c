/* Integration tests of the secrets (issue 37) over the daemon's real API
 * socket and sqlite: the value goes in and never comes out, not in an
 * answer, not in any file under data_dir (the db, its WAL), and a daemon
 * without a key file still starts and says why it cannot hold secrets. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/secrets.h"
#include "sandboxd/store_egress.h"
#include "sandboxd/token.h"
#include "testenv.h"

TestSuite(secrets, .timeout = 300);

#define VALUE "sbx-test-secret-value-7f3a91c2d4e5b6a8"

static struct sbx_config cfg;
static struct daemon *d;
static char tok_a[TOKEN_LEN + 1], tok_b[TOKEN_LEN + 1], conn_a[TOKEN_LEN + 1], conn_b[TOKEN_LEN + 1];

/* cfg as the test set it (fixture_config first) */
static void open_daemon_with(bool with_key)
{
        char dir[SBX_PATH_MAX];
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};

        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/run/api.sock", dirname(dir));
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/run/admin.sock", dir);
        if (with_key) {
                /* beside data_dir, never in it */
                int fd;
                snprintf(cfg.secrets_key_file, sizeof(cfg.secrets_key_file), "%s/secrets.key", dir);
                fd = open(cfg.secrets_key_file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
                cr_assert_geq(fd, 0);
                cr_assert_eq(write(fd, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n", 65), 65);
                close(fd);
        }
        (void)testenv_docker();
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_AGENT, tok_a, NULL, &err), 0);
        cr_assert_eq(token_create(d->store, "bob", TOKEN_ROLE_AGENT, tok_b, NULL, &err), 0);
        cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_CONNECTOR, conn_a, NULL, &err), 0);
        cr_assert_eq(token_create(d->store, "bob", TOKEN_ROLE_CONNECTOR, conn_b, NULL, &err), 0);
}

static void open_daemon(bool with_key)
{
        fixture_config(&cfg);
        open_daemon_with(with_key);
}

static cJSON *call(const char *token, const char *method, const char *params_json)
{
        return apic_call(cfg.api_socket, token, method, apic_json(params_json));
}

static void expect_code(cJSON *reply, const char *code, const char *what)
{
        cr_assert_str_eq(apic_code(reply), code, "%s: got %s", what, cJSON_PrintUnformatted(reply));
        cJSON_Delete(reply);
}

/* Whether any file under dir (recursively) holds needle. */
static bool found_under(const char *dir, const char *needle)
{
        DIR *dp = opendir(dir);
        struct dirent *de;
        bool found = false;

        if (!dp)
                return false;
        while (!found && (de = readdir(dp))) {
                char p[SBX_PATH_MAX];
                struct stat st;
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
                if (lstat(p, &st) < 0)
                        continue;
                if (S_ISDIR(st.st_mode)) {
                        found = found_under(p, needle);
                } else if (S_ISREG(st.st_mode)) {
                        FILE *f = fopen(p, "rb");
                        size_t n = strlen(needle), have = 0;
                        int c;
                        /* a plain scan: the files are small, the needle has no repeated prefix */
                        while (f && !found && (c = fgetc(f)) != EOF) {
                                have = (unsigned char)c == (unsigned char)needle[have] ? have + 1
                                       : (unsigned char)c == (unsigned char)needle[0]  ? 1
                                                                                       : 0;
                                found = have == n;
                        }
                        if (found)
                                cr_log_error("%s holds the value", p);
                        if (f)
                                fclose(f);
                }
        }
        closedir(dp);
        return found;
}

static bool reply_has_value(const cJSON *r)
{
        char *text = cJSON_PrintUnformatted(r);
        bool has = text && strstr(text, VALUE);
        free(text);
        return has;
}

Test(secrets, set_list_delete_never_shows_the_value)
{
        cJSON *r;
        const cJSON *res, *list, *e;

        open_daemon(true);
        expect_code(call(tok_a, "set_secret",
                         "{\"name\":\"GH\",\"value\":\"" VALUE "\",\"hosts\":[\"api.github.com\"]}"),
                    "forbidden", "an agent token sets");
        r = call(conn_a, "set_secret",
                 "{\"name\":\"GH\",\"value\":\"" VALUE
                 "\",\"hosts\":[\"API.github.com\"],\"header\":\"Authorization\"}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cr_assert_not(reply_has_value(r));
        cJSON_Delete(r);

        r = call(tok_a, "list_secrets", "{}");
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cr_assert_not(reply_has_value(r));
        list = cJSON_GetObjectItem(res, "secrets");
        cr_assert_eq(cJSON_GetArraySize(list), 1);
        e = cJSON_GetArrayItem(list, 0);
        cr_assert_str_eq(apic_str(e, "name"), "GH");
        cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(e, "hosts"), 0)->valuestring, "api.github.com");
        cr_assert_str_eq(apic_str(e, "header"), "Authorization");
        cr_assert_gt(apic_num(e, "created_at"), 0);
        cr_assert_geq(apic_num(e, "updated_at"), apic_num(e, "created_at"));
        cr_assert_eq(apic_num(res, "max_count"), SECRETS_MAX_PER_USER);
        cJSON_Delete(r);

        /* another user sees none of it and cannot delete it */
        r = call(tok_b, "list_secrets", "{}");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(apic_result(r), "secrets")), 0, "%s",
                     cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        expect_code(call(conn_b, "delete_secret", "{\"name\":\"GH\"}"), "not_found", "bob deletes alice's");

        /* bad input is a client error naming the field, never echoing the value */
        r = call(conn_a, "set_secret", "{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"api.github.com\"]}");
        cr_assert_str_eq(apic_code(r), "invalid", "%s", cJSON_PrintUnformatted(r));
        cr_assert_not(reply_has_value(r));
        cJSON_Delete(r);
        expect_code(call(conn_a, "set_secret", "{\"name\":\"X\",\"value\":\"a\\r\\nb\",\"hosts\":[\"a.example\"]}"),
                    "invalid", "CR LF in the value");
        expect_code(call(conn_a, "set_secret", "{\"name\":\"X\",\"value\":\"v\",\"hosts\":[\"10.0.0.1\"]}"), "invalid",
                    "an address as host");

        /* the cap on count */
        for (int i = 1; i < SECRETS_MAX_PER_USER; i++) {
                char p[160];
                snprintf(p, sizeof(p), "{\"name\":\"S%d\",\"value\":\"v\",\"hosts\":[\"a.example\"]}", i);
                r = call(conn_a, "set_secret", p);
                cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
                cJSON_Delete(r);
        }
        r = call(conn_a, "set_secret", "{\"name\":\"ONE_MORE\",\"value\":\"v\",\"hosts\":[\"a.example\"]}");
        cr_assert_null(apic_result(r), "the %dth secret was stored", SECRETS_MAX_PER_USER + 1);
        cJSON_Delete(r);

        /* the value is nowhere under data_dir (db, WAL) while held, nor after delete */
        cr_assert_not(found_under(cfg.data_dir, VALUE));
        r = call(conn_a, "delete_secret", "{\"name\":\"GH\"}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        expect_code(call(conn_a, "delete_secret", "{\"name\":\"GH\"}"), "not_found", "deleted twice");
        r = call(tok_a, "list_secrets", "{}");
        cr_assert_eq(apic_num(apic_result(r), "count"), SECRETS_MAX_PER_USER - 1);
        cJSON_Delete(r);
        cr_assert_not(found_under(cfg.data_dir, VALUE));
        daemon_close(d);
        cr_assert_not(found_under(cfg.data_dir, VALUE));
}

/* $GH and every process's environ as the sandbox sees them. */
static char *exec_env(const char *session)
{
        char p[256];
        cJSON *r;
        char *out;

        snprintf(p, sizeof(p),
                 "{\"session\":\"%s\",\"command\":\"printf '%%s|' \\\"$GH\\\"; cat /proc/*/environ 2>/dev/null | "
                 "tr '\\\\0' '\\\\n' | grep -c sbx_ph_\"}",
                 session);
        r = call(tok_a, "exec", p);
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cr_assert_not(reply_has_value(r), "the sandbox saw the value: %s", cJSON_PrintUnformatted(r));
        out = strdup(apic_str(apic_result(r), "stdout"));
        cJSON_Delete(r);
        return out;
}

Test(secrets, attached_secrets_give_the_sandbox_a_placeholder_never_the_value)
{
        char *a, *a2, *b, ph[64];
        cJSON *r;

        open_daemon(true);
        r = call(conn_a, "set_secret", "{\"name\":\"GH\",\"value\":\"" VALUE "\",\"hosts\":[\"api.github.com\"]}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        expect_code(call(tok_a, "create_session", "{\"session\":\"sa\",\"secrets\":[\"GH\"]}"), "forbidden",
                    "an agent token attaches at create");
        expect_code(call(conn_a, "create_session", "{\"session\":\"sa\",\"secrets\":[\"NOPE\"]}"), "not_found",
                    "an unknown secret");
        expect_code(call(conn_a, "create_session", "{\"session\":\"sa\",\"secrets\":[\"GH\",\"GH\"]}"), "invalid",
                    "a name twice");
        expect_code(call(conn_b, "create_session", "{\"session\":\"sa\",\"secrets\":[\"GH\"]}"), "not_found",
                    "another user's secret");
        r = call(conn_a, "create_session", "{\"session\":\"sa\",\"secrets\":[\"GH\"]}");
        cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(apic_result(r), "secrets"), 0)->valuestring, "GH", "%s",
                         cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        /* the placeholder is in $GH and in the executions' environ; the value nowhere */
        a = exec_env("sa");
        cr_assert_eq(strncmp(a, SECRETS_PLACEHOLDER_PREFIX, strlen(SECRETS_PLACEHOLDER_PREFIX)), 0, "%s", a);
        cr_assert_eq(strchr(a, '|') - a, (long)strlen(SECRETS_PLACEHOLDER_PREFIX) + 2 * SECRETS_PLACEHOLDER_BYTES, "%s",
                     a);
        cr_assert_neq(atoi(strchr(a, '|') + 1), 0, "no environ holds the placeholder: %s", a);
        snprintf(ph, sizeof(ph), "%.*s", (int)(strchr(a, '|') - a), a);

        /* attaching is a connector's; detach and attach again makes a new placeholder */
        expect_code(call(tok_a, "attach_secret", "{\"session\":\"sa\",\"name\":\"GH\"}"), "forbidden",
                    "an agent token attaches");
        expect_code(call(conn_a, "attach_secret", "{\"session\":\"sa\",\"name\":\"GH\"}"), "conflict",
                    "attached twice");
        expect_code(call(conn_a, "attach_secret", "{\"session\":\"nosuch\",\"name\":\"GH\"}"), "not_found",
                    "no such session");

        /* it survives a restart of the daemon */
        daemon_close(d);
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        a2 = exec_env("sa");
        cr_assert_eq(strncmp(a2, ph, strlen(ph)), 0, "the placeholder changed across a restart: %s, %s", a, a2);

        r = call(tok_a, "detach_secret", "{\"session\":\"sa\",\"name\":\"GH\"}");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(apic_result(r), "secrets")), 0, "%s",
                     cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        free(a2);
        a2 = exec_env("sa");
        cr_assert_eq(a2[0], '|', "detached, $GH is still set: %s", a2);
        r = call(conn_a, "attach_secret", "{\"session\":\"sa\",\"name\":\"GH\"}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        free(a2);
        a2 = exec_env("sa");
        cr_assert_eq(strncmp(a2, SECRETS_PLACEHOLDER_PREFIX, strlen(SECRETS_PLACEHOLDER_PREFIX)), 0, "%s", a2);
        cr_assert_eq(strstr(a2, ph), NULL, "the placeholder was reused: %s", a2);

        /* another session of the same user gets its own placeholder */
        r = call(conn_a, "create_session", "{\"session\":\"sb\",\"secrets\":[\"GH\"]}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        b = exec_env("sb");
        cr_assert_neq(strncmp(a2, b, strchr(b, '|') - b), 0, "two sessions share a placeholder: %s", b);

        /* delete_secret detaches it everywhere */
        r = call(conn_a, "delete_secret", "{\"name\":\"GH\"}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        free(b);
        b = exec_env("sb");
        cr_assert_eq(b[0], '|', "deleted, $GH is still set: %s", b);

        for (const char *const *s = (const char *const[]){"sa", "sb", NULL}; *s; s++) {
                char p[96];
                snprintf(p, sizeof(p), "{\"session\":\"%s\",\"purge\":true}", *s);
                cJSON_Delete(call(tok_a, "destroy_session", p));
        }
        free(a);
        free(a2);
        free(b);
        cr_assert_not(found_under(cfg.data_dir, VALUE));
        daemon_close(d);
}

Test(secrets, without_a_key_file_the_daemon_starts_and_refuses_set)
{
        cJSON *r;

        open_daemon(false);
        r = call(conn_a, "set_secret", "{\"name\":\"GH\",\"value\":\"" VALUE "\",\"hosts\":[\"api.github.com\"]}");
        cr_assert_str_eq(apic_code(r), "unavailable", "%s", cJSON_PrintUnformatted(r));
        cr_assert_not_null(strstr(cJSON_PrintUnformatted(r), "secrets_key_file"), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_a, "list_secrets", "{}");
        cr_assert_eq(apic_num(apic_result(r), "count"), 0, "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        /* the daemon serves the rest */
        r = call(tok_a, "list_sessions", "{}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        daemon_close(d);
}

/* ---- the swap at the egress proxy (issue 37, part 2) ----
 * A host upstream on 127.0.0.1 (HTTPS with a CA of the test's own, made with
 * the openssl CLI and trusted by the daemon through SSL_CERT_FILE; plain HTTP
 * beside it), reached by name through egress.resolve: /check says whether
 * the Authorization header held the real value, /echo sends it back (in a
 * header, and three times in a body of 200 KB, so that one falls across
 * reads), /gzip the same body gzipped (Content-Encoding: gzip), /brotli
 * claims Content-Encoding: br, /big has a 20 KB header. */
static const char upstream_py[] =
        "import base64, gzip, http.server, ssl, sys, threading\n"
        "V = sys.argv[3]\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    protocol_version = 'HTTP/1.1'\n"
        "    def do_GET(self):\n"
        "        a = self.headers.get('Authorization', '')\n"
        "        ok = a in ('Bearer ' + V, 'Basic ' + base64.b64encode(('me:' + V).encode()).decode())\n"
        "        b = (b'auth-ok' if ok else b'auth-bad') if self.path == '/check' else (b'x' * 65531 + a.encode()) * 3\n"
        "        if self.path == '/gzip': b = gzip.compress(b)\n"
        "        if self.path == '/brotli': b = b'not really'\n"
        "        self.send_response(200); self.send_header('Content-Length', str(len(b)))\n"
        "        self.send_header('X-Echo', a)\n"
        "        if self.path == '/gzip': self.send_header('Content-Encoding', 'gzip')\n"
        "        if self.path == '/brotli': self.send_header('Content-Encoding', 'br')\n"
        "        if self.path == '/big': self.send_header('X-Big', 'y' * 20000)\n"
        "        self.end_headers(); self.wfile.write(b)\n"
        "    def do_POST(self):\n"
        "        self.rfile.read(int(self.headers.get('Content-Length', '0')))\n"
        "        self.send_response(200); self.send_header('Content-Length', '6'); self.end_headers()\n"
        "        self.wfile.write(b'posted')\n"
        "    def log_message(self, *a): pass\n"
        "h = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)\n"
        "t = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)\n"
        "c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain(sys.argv[1], sys.argv[2])\n"
        "t.socket = c.wrap_socket(t.socket, server_side=True)\n"
        "threading.Thread(target=h.serve_forever, daemon=True).start()\n"
        "print(h.server_address[1], t.server_address[1], flush=True)\n"
        "t.serve_forever()\n";

static pid_t up_pid;
static char up_dir[512];
static int up_http, up_tls;

static void upstream_stop(void)
{
        if (up_pid > 0) {
                kill(up_pid, SIGTERM);
                waitpid(up_pid, NULL, 0);
                up_pid = 0;
        }
}

static void upstream_start(void)
{
        char cert[600], key[600], ca[600];
        int ports[2];
        char *dir = testenv_tmpdir();

        snprintf(up_dir, sizeof(up_dir), "%s", dir);
        free(dir);
        fixture_upstream_cert(up_dir, "api.test,other.test");
        snprintf(ca, sizeof(ca), "%s/upca.pem", up_dir);
        snprintf(cert, sizeof(cert), "%s/up.pem", up_dir);
        snprintf(key, sizeof(key), "%s/up.key", up_dir);
        up_pid = fixture_python_upstream(up_dir, "upstream.py", upstream_py,
                                         (const char *const[]){cert, key, VALUE, NULL}, ports, 2);
        up_http = ports[0];
        up_tls = ports[1];
        /* the daemon trusts the upstream's CA as it would a system one */
        setenv("SSL_CERT_FILE", ca, 1);
}

/* stdout of command in session, through the API (the session's environment applies) */
static char *api_sh(const char *session, const char *command)
{
        cJSON *p = cJSON_CreateObject(), *r;
        char *params, *out;

        cJSON_AddStringToObject(p, "session", session);
        cJSON_AddStringToObject(p, "command", command);
        cJSON_AddNumberToObject(p, "timeout", 120);
        params = cJSON_PrintUnformatted(p);
        cJSON_Delete(p);
        r = call(tok_a, "exec", params);
        free(params);
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cr_assert_not(reply_has_value(r), "the sandbox saw the value: %s", cJSON_PrintUnformatted(r));
        out = strdup(apic_str(apic_result(r), "stdout"));
        cJSON_Delete(r);
        return out;
}

static bool audited(const char *session, const char *host, const char *decision, const char *reason)
{
        struct store_egress_entry *rows = NULL;
        size_t n = 0;
        bool seen = false;

        cr_assert_eq(store_egress_log_list(d->store, "alice", session, 200, &rows, &n), 0);
        for (size_t i = 0; i < n && !seen; i++)
                seen = strcmp(rows[i].host, host) == 0 && strcmp(rows[i].decision, decision) == 0 &&
                       strcmp(rows[i].reason, reason) == 0;
        free(rows);
        return seen;
}

static bool plain_closed(void *ud)
{
        return audited("plain", "api.test", "allowed", "closed");
}

Test(secrets, the_proxy_swaps_the_placeholder_for_its_host_only, .fini = upstream_stop)
{
        char cmd[2048], logpath[SBX_PATH_MAX], *out, *ph;
        struct sbx_error err = {0};
        cJSON *r, *wf;
        FILE *f;
        int logfd;

        upstream_start();
        /* the daemon's log: grepped for the value at the end */
        snprintf(logpath, sizeof(logpath), "%s/daemon.log", up_dir);
        logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        cr_assert_geq(logfd, 0);
        cr_assert_geq(dup2(logfd, 2), 0);
        fixture_config(&cfg);
        snprintf(cfg.image, sizeof(cfg.image), "%s", TESTENV_PYTHON_IMAGE);
        snprintf(cfg.network_default, sizeof(cfg.network_default), "none");
        snprintf(cfg.log_level, sizeof(cfg.log_level), "debug");
        cfg.memory_bytes = 256 << 20;
        cr_assert_eq(config_set(&cfg, "egress.allow", "api.test:*, other.test:*", &err), 0);
        cr_assert_eq(config_set(&cfg, "egress.resolve", "api.test=127.0.0.1, other.test=127.0.0.1", &err), 0);
        cr_assert_eq(config_set(&cfg, "egress.allow_private", "127.0.0.1/32", &err), 0);
        open_daemon_with(true);

        r = call(conn_a, "set_secret", "{\"name\":\"GH\",\"value\":\"" VALUE "\",\"hosts\":[\"api.test\"]}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(conn_a, "set_secret", "{\"name\":\"OTHER\",\"value\":\"other-value\",\"hosts\":[\"other.test\"]}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(conn_a, "create_session", "{\"session\":\"sw\",\"secrets\":[\"GH\",\"OTHER\"]}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_a, "create_session", "{\"session\":\"plain\"}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        /* the upstream's CA, for the sandbox's own check of whose certificate it sees */
        snprintf(cmd, sizeof(cmd), "%s/upca.pem", up_dir);
        f = fopen(cmd, "r");
        cr_assert_not_null(f);
        {
                char pem[8192];
                size_t n = fread(pem, 1, sizeof(pem) - 1, f);
                pem[n] = '\0';
                fclose(f);
                for (const char *const *s = (const char *const[]){"sw", "plain", NULL}; *s; s++) {
                        wf = cJSON_CreateObject();
                        cJSON_AddStringToObject(wf, "session", *s);
                        cJSON_AddStringToObject(wf, "path", "/workspace/upca.pem");
                        cJSON_AddStringToObject(wf, "content", pem);
                        char *params = cJSON_PrintUnformatted(wf);
                        cJSON_Delete(wf);
                        r = call(tok_a, "write_file", params);
                        free(params);
                        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
                        cJSON_Delete(r);
                }
        }

        /* the real value reaches the secret's host; the sandbox trusts its session's CA through SSL_CERT_FILE &c. */
        ph = api_sh("sw", "printf %s \"$GH\"");
        cr_assert_eq(strncmp(ph, SECRETS_PLACEHOLDER_PREFIX, strlen(SECRETS_PLACEHOLDER_PREFIX)), 0, "%s", ph);

        /* the value in the output (the test knows it; code in the sandbox would have to guess it) is
         * masked as the placeholder, also when it comes in two writes (item 4) */
        {
                char want[128];
                out = api_sh("sw",
                             "v=sbx-test-secret-val; printf 'a%sb\\n' \"${v}ue-7f3a91c2d4e5b6a8\"; "
                             "printf %s $v; /bin/echo ue-7f3a91c2d4e5b6a8-and-more");
                snprintf(want, sizeof(want), "a%sb\n%s-and-more\n", ph, ph);
                cr_assert_str_eq(out, want, "the value was not masked");
                free(out);
        }
        snprintf(cmd, sizeof(cmd),
                 "curl -sS --max-time 30 -H \"Authorization: Bearer $GH\" https://api.test:%d/check; echo; "
                 "curl -sS --max-time 30 -u \"me:$GH\" https://api.test:%d/check; echo; "
                 "python3 -c \"import urllib.request as u; print(u.urlopen(u.Request('https://api.test:%d/check', "
                 "headers={'Authorization': 'Bearer $GH'}), timeout=30).read().decode())\"; "
                 "env; cat /proc/*/environ | tr '\\0' '\\n'",
                 up_tls, up_tls, up_tls);
        out = api_sh("sw", cmd); /* which asserts the value is nowhere in it */
        cr_assert_eq(strncmp(out, "auth-ok\nauth-ok\nauth-ok\n", 24), 0, "%s", out);
        cr_assert_not_null(strstr(out, "GH=sbx_ph_"), "%s", out);
        cr_assert_not_null(strstr(out, "SSL_CERT_FILE=/run/sandboxd/ca-bundle.pem"), "%s", out);
        free(out);

        /* an echoing upstream: the sandbox sees its placeholder, never the value (header and body, across reads) */
        snprintf(cmd, sizeof(cmd),
                 "curl -sS --max-time 30 -D /tmp/h -H \"Authorization: Bearer $GH\" https://api.test:%d/echo > /tmp/b; "
                 "grep -o \"$GH\" /tmp/b | wc -l; grep -ci x-echo:.*sbx_ph_ /tmp/h; tr -d x < /tmp/b",
                 up_tls);
        out = api_sh("sw", cmd);
        cr_assert_eq(strncmp(out, "3\n1\n", 4), 0, "the echo (placeholders in body, in header): %s", out);
        free(out);

        /* a gzip echo: decoded at the proxy, masked, sent on decoded (item 1's "compressed bodies are not
         * passed through unread") */
        snprintf(cmd, sizeof(cmd),
                 "curl -sS --max-time 30 -D /tmp/h -H \"Authorization: Bearer $GH\" https://api.test:%d/gzip > /tmp/b; "
                 "grep -o \"$GH\" /tmp/b | wc -l; grep -ci content-encoding /tmp/h; wc -c < /tmp/b",
                 up_tls);
        out = api_sh("sw", cmd);
        {
                char want[64];
                snprintf(want, sizeof(want), "3\n0\n%zu\n", (size_t)3 * (65531 + strlen("Bearer ") + strlen(ph)));
                cr_assert_str_eq(out, want, "the gzip echo (placeholders, no encoding, its length)");
        }
        free(out);

        /* one connection kept alive (curl reuses it: no new connect): the echo comes back chunked and masked,
         * the next request is swapped again, and one whose Host is not the TLS name is refused on it */
        snprintf(cmd, sizeof(cmd),
                 "curl -sS --max-time 30 -w '%%{http_code}:%%{num_connects} ' -H \"Authorization: Bearer $GH\" "
                 "-o /tmp/e https://api.test:%d/echo -o /tmp/c https://api.test:%d/check "
                 "--next -s --max-time 30 -w '%%{http_code}:%%{num_connects} ' -o /dev/null -H 'Host: other.test' "
                 "-H \"Authorization: Bearer $GH\" https://api.test:%d/check; "
                 "echo; grep -o \"$GH\" /tmp/e | wc -l; cat /tmp/c",
                 up_tls, up_tls, up_tls);
        out = api_sh("sw", cmd);
        cr_assert_str_eq(out, "200:1 200:0 403:0 \n3\nauth-ok", "%s", out);
        free(out);

        /* the placeholder anywhere else is refused (and audited): another host (intercepted, or plain HTTP),
         * a Host header that is not the TLS name, a body; an encoding not decoded here is not passed unread */
        snprintf(cmd, sizeof(cmd),
                 "c() { curl -s --max-time 30 -o /dev/null -w '%%{http_code} ' \"$@\"; }; "
                 "c -H \"Authorization: Bearer $GH\" https://other.test:%d/check; "
                 "c -H \"Authorization: Bearer $GH\" http://other.test:%d/check; "
                 "c -H 'Host: other.test' -H \"Authorization: Bearer $GH\" https://api.test:%d/check; "
                 "c --data \"token=$GH\" https://api.test:%d/check; "
                 "c -u \"me:$GH\" https://api.test:%d/check; "
                 "c https://api.test:%d/brotli; c https://api.test:%d/big; "
                 "curl -s --max-time 30 -o /dev/null --cacert /workspace/upca.pem https://api.test:%d/check; echo $?",
                 up_tls, up_http, up_tls, up_tls, up_tls, up_tls, up_tls, up_tls);
        out = api_sh("sw", cmd);
        cr_assert_str_eq(out, "403 403 403 403 200 502 502 60\n", "%s", out);
        free(out);
        cr_assert(audited("sw", "api.test", "allowed", "intercepted"));
        cr_assert(audited("sw", "other.test", "blocked", "secret_refused"), "another host, intercepted");
        cr_assert(audited("sw", "api.test", "blocked", "secret_refused"), "Host != SNI, a body");
        cr_assert(audited("sw", "api.test", "blocked", "encoded_response"));
        cr_assert(audited("sw", "api.test", "blocked", "bad_response"), "a response head past the cap");

        /* a session without secrets: a plain CONNECT, the upstream's own certificate */
        snprintf(cmd, sizeof(cmd),
                 "curl -sS --max-time 30 --cacert /workspace/upca.pem https://api.test:%d/check; echo; "
                 "echo ${SSL_CERT_FILE:-none}",
                 up_tls);
        out = api_sh("plain", cmd);
        cr_assert_str_eq(out, "auth-bad\nnone\n", "%s", out);
        free(out);
        /* a plain tunnel's row is written when both ends have closed: after curl is done */
        cr_assert(testenv_wait_until(plain_closed, NULL, 30000), "the plain CONNECT's row");

        for (const char *const *s = (const char *const[]){"sw", "plain", NULL}; *s; s++) {
                char p[96];
                snprintf(p, sizeof(p), "{\"session\":\"%s\",\"purge\":true}", *s);
                cJSON_Delete(call(tok_a, "destroy_session", p));
        }
        free(ph);
        daemon_close(d);
        fflush(stderr);
        cr_assert_not(found_under(cfg.data_dir, VALUE), "the value is under data_dir");
        cr_assert_not(found_under(up_dir, VALUE), "the value is in the daemon's log");
        {
                struct stat st;
                cr_assert_eq(stat(logpath, &st), 0);
                cr_assert_gt(st.st_size, 0, "the daemon logged nothing: the grep would prove nothing");
        }
        close(logfd);
}

/* A rule on an attachment (E2B's network.rules, docs/e2b.md "Secrets"): the proxy sets the header
 * on requests to the rule's host, with the real value swapped in; the sandbox sends no header (or
 * a wrong one, dropped); another host gets none; the sandbox's env and files never hold the value. */
Test(secrets, a_rule_sets_the_header_for_its_host_only, .fini = upstream_stop)
{
        char cmd[2048], pem[8192];
        struct sbx_error err = {0};
        cJSON *r, *wf;
        char *out, *params;
        FILE *f;
        size_t n;

        upstream_start();
        fixture_config(&cfg);
        snprintf(cfg.image, sizeof(cfg.image), "%s", TESTENV_PYTHON_IMAGE);
        snprintf(cfg.network_default, sizeof(cfg.network_default), "none");
        cfg.memory_bytes = 256 << 20;
        cr_assert_eq(config_set(&cfg, "egress.allow", "api.test:*, other.test:*", &err), 0);
        cr_assert_eq(config_set(&cfg, "egress.resolve", "api.test=127.0.0.1, other.test=127.0.0.1", &err), 0);
        cr_assert_eq(config_set(&cfg, "egress.allow_private", "127.0.0.1/32", &err), 0);
        open_daemon_with(true);

        /* the secret's own host is other.test: the rule's (api.test) takes its place */
        r = call(conn_a, "set_secret", "{\"name\":\"GH\",\"value\":\"" VALUE "\",\"hosts\":[\"other.test\"]}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_a, "create_session", "{\"session\":\"ru\"}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        /* bad rules attach nothing */
        expect_code(call(conn_a, "attach_secret",
                         "{\"session\":\"ru\",\"name\":\"GH\",\"hosts\":[\"api.test\"],\"header\":\"Authorization\","
                         "\"template\":\"Bearer plain\"}"),
                    "invalid", "a template without ${secret}");
        expect_code(call(conn_a, "attach_secret",
                         "{\"session\":\"ru\",\"name\":\"GH\",\"hosts\":[\"api.test\"],\"header\":\"Host\","
                         "\"template\":\"${secret}\"}"),
                    "invalid", "a header the proxy writes");
        expect_code(call(conn_a, "attach_secret",
                         "{\"session\":\"ru\",\"name\":\"GH\",\"hosts\":[\"not a host\"],\"header\":\"Authorization\","
                         "\"template\":\"${secret}\"}"),
                    "invalid", "a bad host");
        expect_code(call(conn_a, "attach_secret", "{\"session\":\"ru\",\"name\":\"GH\",\"hosts\":[\"api.test\"]}"),
                    "bad_request", "hosts without header and template");
        r = call(conn_a, "attach_secret",
                 "{\"session\":\"ru\",\"name\":\"GH\",\"hosts\":[\"api.test\"],\"header\":\"Authorization\","
                 "\"template\":\"Bearer ${secret}\"}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        snprintf(cmd, sizeof(cmd), "%s/upca.pem", up_dir);
        f = fopen(cmd, "r");
        cr_assert_not_null(f);
        n = fread(pem, 1, sizeof(pem) - 1, f);
        pem[n] = '\0';
        fclose(f);
        wf = cJSON_CreateObject();
        cJSON_AddStringToObject(wf, "session", "ru");
        cJSON_AddStringToObject(wf, "path", "/workspace/upca.pem");
        cJSON_AddStringToObject(wf, "content", pem);
        params = cJSON_PrintUnformatted(wf);
        cJSON_Delete(wf);
        r = call(tok_a, "write_file", params);
        free(params);
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        /* no header sent, a wrong one (dropped), Python's client; other.test: a plain tunnel, no header */
        snprintf(cmd, sizeof(cmd),
                 "curl -sS --max-time 30 https://api.test:%d/check; echo; "
                 "curl -sS --max-time 30 -H 'Authorization: Bearer wrong' https://api.test:%d/check; echo; "
                 "python3 -c \"import urllib.request as u; "
                 "print(u.urlopen('https://api.test:%d/check', timeout=30).read().decode())\"; "
                 "curl -sS --max-time 30 --cacert /workspace/upca.pem https://other.test:%d/check; echo; "
                 "curl -sS --max-time 30 -D - -o /dev/null https://api.test:%d/echo | grep -ci x-echo:.*sbx_ph_; "
                 "env; cat /proc/*/environ | tr '\\0' '\\n'; "
                 "grep -rl sbx-test-secret-val /workspace /tmp /etc /root /run 2>/dev/null | wc -l",
                 up_tls, up_tls, up_tls, up_tls, up_tls);
        out = api_sh("ru", cmd); /* which asserts the value is nowhere in it */
        cr_assert_eq(strncmp(out, "auth-ok\nauth-ok\nauth-ok\nauth-bad\n1\n", 35), 0, "%s", out);
        cr_assert_not_null(strstr(out, "GH=sbx_ph_"), "%s", out);
        cr_assert_eq(strcmp(out + strlen(out) - 2, "0\n"), 0, "a file holds the value: %s", out);
        free(out);
        cr_assert(audited("ru", "api.test", "allowed", "intercepted"));

        cJSON_Delete(call(tok_a, "destroy_session", "{\"session\":\"ru\",\"purge\":true}"));
        daemon_close(d);
        cr_assert_not(found_under(cfg.data_dir, VALUE), "the value is under data_dir");
}
