/* Integration tests of the HTTP front (http.h) against the real dockerd:
 * curl over HTTPS on loopback, with a CA, server and client certificates the
 * test makes with the openssl CLI. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/api.h"
#include "sandboxd/http.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
#include "testenv.h"

TestSuite(http, .timeout = 300);

static struct sbx_config cfg;
static struct daemon *d;
static char tok_a[TOKEN_LEN + 1], tok_b[TOKEN_LEN + 1];
static char pki[SBX_PATH_MAX]; /* certificates made by make_pki() */
static int port;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
        char cmd[4096];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        return system(cmd);
}

/* A CA, a server certificate for 127.0.0.1, a client certificate the CA
 * signed, and a self-signed client certificate the CA never saw. */
static void make_pki(void)
{
        _cleanup_free_ char *dir = testenv_tmpdir();
        snprintf(pki, sizeof(pki), "%s", dir);
        cr_assert_eq(sh("cd %s && exec >openssl.log 2>&1 && "
                        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
                        "  -subj /CN=sbx-test-ca && "
                        "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1 && "
                        "printf 'subjectAltName=IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\n' >server.ext && "
                        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem "
                        "  -days 2 -extfile server.ext && "
                        "openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=agent && "
                        "printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=clientAuth\\n' >client.ext && "
                        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem "
                        "  -days 2 -extfile client.ext && "
                        "openssl req -x509 -newkey rsa:2048 -nodes -keyout rogue.key -out rogue.pem -days 2 "
                        "  -subj /CN=rogue",
                        pki),
                     0, "openssl failed: see %s/openssl.log", pki);
}

static void open_daemon(bool tls, bool mtls)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};

        fixture_config(&cfg);
        cfg.port_range_lo = 29000;
        cfg.port_range_hi = 29499;
        cfg.ports_per_session = 0;
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/api.sock", cfg.data_dir);
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/admin.sock", cfg.data_dir);
        snprintf(cfg.http_listen, sizeof(cfg.http_listen), "127.0.0.1:0");
        snprintf(cfg.metrics_listen, sizeof(cfg.metrics_listen), "127.0.0.1:0");
        cfg.http_timeout_s = 2;
        if (tls) {
                snprintf(cfg.tls_cert, sizeof(cfg.tls_cert), "%s/server.pem", pki);
                snprintf(cfg.tls_key, sizeof(cfg.tls_key), "%s/server.key", pki);
        }
        if (mtls)
                snprintf(cfg.tls_client_ca, sizeof(cfg.tls_client_ca), "%s/ca.pem", pki);
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        port = http_server_port(d->http);
        cr_assert_gt(port, 0);
        cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_AGENT, tok_a, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(token_create(d->store, "bob", TOKEN_ROLE_AGENT, tok_b, NULL, &err), 0, "%s", err.msg);
}

static void setup_tls(void)
{
        (void)testenv_docker();
        make_pki();
        open_daemon(true, false);
}

static void teardown(void)
{
        daemon_close(d);
        d = NULL;
}

/* curl with extra args (test constants, tokens and paths only); the status
 * code, the body in *ret_body (malloc'd, may be NULL). */
static int curl(char **ret_body, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int curl(char **ret_body, const char *fmt, ...)
{
        char args[4096], cmd[8192], body_path[SBX_PATH_MAX + 16];
        va_list ap;
        FILE *p;
        int code = -1;

        va_start(ap, fmt);
        vsnprintf(args, sizeof(args), fmt, ap);
        va_end(ap);
        snprintf(body_path, sizeof(body_path), "%s/body", pki);
        snprintf(cmd, sizeof(cmd), "curl -sS --max-time 60 --cacert %s/ca.pem -o %s -w '%%{http_code}' %s", pki,
                 body_path, args);
        p = popen(cmd, "r");
        cr_assert_not_null(p);
        if (fscanf(p, "%d", &code) != 1)
                code = -1;
        pclose(p);
        if (ret_body) {
                FILE *f = fopen(body_path, "re");
                char *buf = calloc(1, 1 << 20);
                size_t n = f ? fread(buf, 1, (1 << 20) - 1, f) : 0;
                buf[n] = '\0';
                if (f)
                        fclose(f);
                *ret_body = buf;
        }
        unlink(body_path);
        return code;
}

/* Write text to <pki>/<name>; the path in ret. */
static void put_file(const char *name, const char *text, char ret[SBX_PATH_MAX + 16])
{
        FILE *f;
        snprintf(ret, SBX_PATH_MAX + 16, "%s/%s", pki, name);
        f = fopen(ret, "we");
        cr_assert_not_null(f);
        fputs(text, f);
        fclose(f);
}

/* POST /v1/<method> over HTTPS with a bearer token: the status; *ret the body as JSON. */
static int post(const char *token, const char *method, const char *json, cJSON **ret)
{
        char *body = NULL;
        int code;
        char auth[128] = "";
        char jpath[SBX_PATH_MAX + 16];

        put_file("req.json", json, jpath);
        if (token)
                snprintf(auth, sizeof(auth), "-H 'Authorization: Bearer %s'", token);
        code = curl(&body, "%s -H 'Content-Type: application/json' --data-binary @%s https://127.0.0.1:%d/v1/%s", auth,
                    jpath, port, method);
        if (ret)
                *ret = cJSON_Parse(body);
        free(body);
        return code;
}

static const char *err_code(const cJSON *o)
{
        const cJSON *e = cJSON_GetObjectItem(o, "error");
        return e ? apic_str(e, "code") : "";
}

Test(http, exec_tokens_and_statuses, .init = setup_tls, .fini = teardown)
{
        cJSON *r = NULL;
        char *body = NULL, id[64];

        /* a round trip, the result as the body */
        cr_assert_eq(post(tok_a, "exec", "{\"session\": \"s1\", \"command\": \"echo hi; exit 3\"}", &r), 200);
        cr_assert_str_eq(apic_str(r, "state"), "completed");
        cr_assert_eq(apic_num(r, "exit_code"), 3);
        cr_assert_str_eq(apic_str(r, "stdout"), "hi\n");
        snprintf(id, sizeof(id), "%s", apic_str(r, "execution_id"));
        cJSON_Delete(r);

        /* tokens: absent, wrong; the error names the code */
        cr_assert_eq(post(NULL, "exec", "{\"session\": \"s1\", \"command\": \"true\"}", &r), 401);
        cr_assert_str_eq(err_code(r), "unauthorized");
        cJSON_Delete(r);
        cr_assert_eq(post("0123456789abcdef", "exec", "{\"session\": \"s1\", \"command\": \"true\"}", &r), 401);
        cJSON_Delete(r);

        /* another tenant's execution id is not found, exactly like an unknown one */
        {
                char p[256];
                snprintf(p, sizeof(p), "{\"session\": \"s1\", \"execution_id\": \"%s\"}", id);
                cr_assert_eq(post(tok_b, "get_execution", p, &r), 404);
                cr_assert_str_eq(err_code(r), "not_found");
                cJSON_Delete(r);
                cr_assert_eq(post(tok_a, "get_execution", p, &r), 200);
                cr_assert_str_eq(apic_str(r, "stdout"), "hi\n");
                cJSON_Delete(r);
        }

        /* statuses for the codes */
        cr_assert_eq(post(tok_a, "exec", "{\"command\": \"true\"}", &r), 400); /* no session */
        cr_assert_str_eq(err_code(r), "bad_request");
        cJSON_Delete(r);
        cr_assert_eq(post(tok_a, "exec", "{\"session\": \"s1\", ", &r), 400);
        cJSON_Delete(r);
        cr_assert_eq(post(tok_a, "exec", "[1]", &r), 400);
        cJSON_Delete(r);
        cr_assert_eq(post(tok_a, "no_such_method", "{}", &r), 404);
        cJSON_Delete(r);
        cr_assert_eq(post(tok_a, "read_file", "{\"session\": \"s1\", \"path\": \"nope\"}", &r), 404);
        cJSON_Delete(r);
        cr_assert_eq(post(tok_a, "mark_private", "{\"session\": \"s1\", \"dataset\": \"x\"}", &r), 403);
        cr_assert_str_eq(err_code(r), "forbidden");
        cJSON_Delete(r);
        cr_assert_eq(post(tok_a, "read_file", "{\"session\": \"s1\", \"path\": \"../etc/passwd\"}", &r), 400);
        cJSON_Delete(r);

        /* wrong verb, wrong path, health */
        cr_assert_eq(curl(NULL, "-H 'Authorization: Bearer %s' https://127.0.0.1:%d/v1/exec", tok_a, port), 405);
        cr_assert_eq(curl(NULL, "https://127.0.0.1:%d/nowhere", port), 404);
        cr_assert_eq(curl(&body, "https://127.0.0.1:%d/healthz", port), 200);
        cr_assert_str_eq(body, "ok\n");
        free(body);

        /* a too large body is refused from its Content-Length, before it is read */
        cr_assert_eq(curl(&body,
                          "-H 'Authorization: Bearer %s' -H 'Content-Length: 99999999' --data-binary 'x' "
                          "https://127.0.0.1:%d/v1/exec",
                          tok_a, port),
                     413);
        free(body);
        /* ... and one that arrives chunked, without a length, when it passes the cap */
        cr_assert_eq(sh("head -c 9000000 /dev/zero | tr '\\0' 'x' >%s/big", pki), 0);
        cr_assert_eq(curl(&body,
                          "-H 'Authorization: Bearer %s' -H 'Transfer-Encoding: chunked' --data-binary @%s/big "
                          "https://127.0.0.1:%d/v1/exec",
                          tok_a, pki, port),
                     413);
        free(body);
        /* headers past the cap */
        {
                char *big = malloc(HTTP_MAX_HEADERS + 100);
                memset(big, 'a', HTTP_MAX_HEADERS + 99);
                big[HTTP_MAX_HEADERS + 99] = '\0';
                int code = curl(NULL, "-H 'X-Big: %.*s' https://127.0.0.1:%d/healthz", 3000, big, port);
                cr_assert_eq(code, 200); /* a few KiB is fine */
                free(big);
                cr_assert_eq(sh("printf 'X-Big: %%070000d\\r\\n' 0 >%s/hdr", pki), 0);
                code = curl(NULL, "-H @%s/hdr https://127.0.0.1:%d/healthz", pki, port);
                cr_assert(code == 431 || code == 413, "oversized headers: %d", code);
        }
        /* an answer may take longer than the idle limit (2 s here) */
        cr_assert_eq(post(tok_a, "exec", "{\"session\": \"s1\", \"command\": \"sleep 3; echo late\"}", &r), 200);
        cr_assert_str_eq(apic_str(r, "stdout"), "late\n");
        cJSON_Delete(r);
        /* keep-alive: both requests on one connection, the second after a wait past the idle limit's start */
        {
                char cmd[2048];
                snprintf(cmd, sizeof(cmd),
                         "curl -sS -v --max-time 60 --cacert %s/ca.pem -H 'Authorization: Bearer %s' "
                         "--data-binary '{\"session\":\"s1\",\"command\":\"sleep 2.5\"}' -o /dev/null "
                         "https://127.0.0.1:%d/v1/exec -o /dev/null https://127.0.0.1:%d/v1/exec 2>&1 | "
                         "grep -c -e '^< HTTP/1.1 200' -e 'Re-using existing connection' | grep -qx 3",
                         pki, tok_a, port, port);
                cr_assert_eq(system(cmd), 0, "two 200s on one reused connection");
        }
        /* the daemon still answers */
        cr_assert_eq(post(tok_a, "session_info", "{\"session\": \"s1\"}", &r), 200);
        cr_assert_str_eq(apic_str(r, "state"), "running");
        cJSON_Delete(r);
}

/* POST /v1/exec asking for Server-Sent Events, with params from json. */
static int sse_exec(const char *name, const char *json, char **ret_body)
{
        char jpath[SBX_PATH_MAX + 16];
        put_file(name, json, jpath);
        return curl(ret_body,
                    "-N -H 'Accept: text/event-stream' -H 'Authorization: Bearer %s' --data-binary @%s "
                    "https://127.0.0.1:%d/v1/exec",
                    tok_a, jpath, port);
}

Test(http, sse_streams_output_then_the_result, .init = setup_tls, .fini = teardown)
{
        char *body = NULL;
        const char *res;
        cJSON *r;

        cr_assert_eq(sse_exec("sse.json",
                              "{\"session\": \"s2\", \"command\": "
                              "\"echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three\"}",
                              &body),
                     200);
        /* output events carry the streams' bytes; exactly one final result, last */
        cr_assert(strstr(body, "event: output\ndata: {\"stream\":\"stdout\",\"data\":\"one\\n") != NULL, "%s", body);
        cr_assert(strstr(body, "\"stream\":\"stderr\",\"data\":\"two\\n\"") != NULL, "%s", body);
        res = strstr(body, "event: result\ndata: ");
        cr_assert_not_null(res, "%s", body);
        cr_assert_null(strstr(res + 1, "event:"), "the result is the last event: %s", body);
        r = cJSON_Parse(res + strlen("event: result\ndata: "));
        cr_assert_not_null(r, "%s", body);
        cr_assert_str_eq(apic_str(r, "stdout"), "one\nthree\n");
        cr_assert_str_eq(apic_str(r, "state"), "completed");
        cJSON_Delete(r);
        free(body);

        /* a stream quiet for longer than the idle limit stays open */
        cr_assert_eq(sse_exec("sse.json", "{\"session\": \"s2\", \"command\": \"sleep 3; echo late\"}", &body), 200);
        cr_assert(strstr(body, "event: result\ndata: ") != NULL, "%s", body);
        cr_assert(strstr(body, "\"stdout\":\"late\\n\"") != NULL, "%s", body);
        free(body);

        /* an error before the call runs comes as one error event */
        cr_assert_eq(sse_exec("sse.json", "{\"session\": \"s2\"}", &body), 200);
        cr_assert(strstr(body, "event: error\ndata: {\"code\":\"bad_request\"") != NULL, "%s", body);
        cr_assert(strstr(body, "\"status\":400") != NULL, "%s", body);
        free(body);
}

/* A TCP peer that stops in the middle of the handshake, or trickles bytes, is
 * closed by the daemon (HTTP_IDLE_TIMEOUT_S is 2 s here). */
static int connect_port(void)
{
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        return fd;
}

/* Wait up to timeout_ms for the peer to close; true if it did. Sends one
 * byte of junk every 500 ms when trickle. */
static bool closed_by_peer(int fd, int timeout_ms, bool trickle)
{
        int64_t until = sbx_now_ms() + timeout_ms;
        while (sbx_now_ms() < until) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                char buf[256];
                if (poll(&p, 1, 500) > 0) {
                        ssize_t n = recv(fd, buf, sizeof(buf), 0);
                        if (n <= 0)
                                return true;
                }
                if (trickle && send(fd, "G", 1, MSG_NOSIGNAL) < 0)
                        return true;
        }
        return false;
}

Test(http, stalled_handshakes_and_slowloris_are_closed, .init = setup_tls, .fini = teardown)
{
        int fd = connect_port();
        /* half a TLS ClientHello header, then nothing */
        cr_assert_eq(send(fd, "\x16\x03\x01", 3, MSG_NOSIGNAL), 3);
        cr_assert(closed_by_peer(fd, 30000, false), "a stalled TLS handshake is closed");
        close(fd);

        fd = connect_port();
        cr_assert(closed_by_peer(fd, 30000, true), "a trickling peer is closed");
        close(fd);
}

Test(http, mtls_requires_a_client_certificate_signed_by_the_ca)
{
        char *body = NULL;

        (void)testenv_docker();
        make_pki();
        open_daemon(true, true);
        cr_assert_eq(curl(&body, "https://127.0.0.1:%d/healthz", port), 403);
        cr_assert(strstr(body, "client certificate") != NULL, "%s", body);
        free(body);
        cr_assert_eq(curl(NULL, "--cert %s/rogue.pem --key %s/rogue.key https://127.0.0.1:%d/healthz", pki, pki, port),
                     403);
        cr_assert_eq(curl(&body, "--cert %s/client.pem --key %s/client.key https://127.0.0.1:%d/healthz", pki, pki,
                          port),
                     200);
        free(body);
        cr_assert_eq(curl(&body,
                          "--cert %s/client.pem --key %s/client.key -H 'Authorization: Bearer %s' "
                          "--data-binary '{\"session\":\"m1\",\"command\":\"echo mtls\"}' https://127.0.0.1:%d/v1/exec",
                          pki, pki, tok_a, port),
                     200);
        cr_assert(strstr(body, "\"stdout\":\"mtls\\n\"") != NULL, "%s", body);
        free(body);
        teardown();
}

Test(http, plain_http_only_on_loopback)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};
        char *body = NULL;

        (void)testenv_docker();
        make_pki();
        fixture_config(&cfg);
        cfg.ports_per_session = 0;
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/api.sock", cfg.data_dir);
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/admin.sock", cfg.data_dir);
        snprintf(cfg.http_listen, sizeof(cfg.http_listen), "0.0.0.0:0");
        cr_assert_lt(fronts_open(&cfg, &opts, &d, &err), 0);
        cr_assert(strstr(err.msg, "loopback") != NULL, "%s", err.msg);

        open_daemon(false, false);
        cr_assert_eq(curl(&body, "http://127.0.0.1:%d/healthz", port), 200);
        free(body);
        cr_assert_eq(curl(NULL,
                          "-H 'Authorization: Bearer %s' --data-binary '{\"session\":\"p1\",\"command\":\"true\"}' "
                          "http://127.0.0.1:%d/v1/exec",
                          tok_a, port),
                     200);
        teardown();
}

/* Every line of a Prometheus text exposition: a comment, or
 * name{labels} value. */
static bool prometheus_text_ok(const char *text, char *why, size_t why_len)
{
        regex_t sample;
        bool ok = true;
        const char *line = text;

        cr_assert_eq(regcomp(&sample,
                             "^[a-zA-Z_:][a-zA-Z0-9_:]*(\\{[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"]*\""
                             "(,[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"]*\")*\\})? (-?[0-9.e+]+|\\+Inf|NaN)$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
        while (*line && ok) {
                const char *nl = strchr(line, '\n');
                char buf[512];
                size_t n = nl ? (size_t)(nl - line) : strlen(line);
                snprintf(buf, sizeof(buf), "%.*s", (int)n, line);
                if (!(strncmp(buf, "# HELP ", 7) == 0 || strncmp(buf, "# TYPE ", 7) == 0) &&
                    regexec(&sample, buf, 0, NULL, 0) != 0) {
                        snprintf(why, why_len, "bad line: %s", buf);
                        ok = false;
                }
                if (!nl) {
                        snprintf(why, why_len, "no final newline");
                        ok = false;
                        break;
                }
                line = nl + 1;
        }
        regfree(&sample);
        return ok;
}

/* The value of the sample whose line starts with prefix (name and labels). */
static double sample_value(const char *text, const char *prefix)
{
        size_t n = strlen(prefix);
        for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
                if (strncmp(l, prefix, n) == 0 && l[n] == ' ')
                        return strtod(l + n + 1, NULL);
        return -1;
}

Test(http, metrics_parse_and_move_as_executions_run)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};
        char *before = NULL, *after = NULL, why[600] = "", cmd[2 * SBX_PATH_MAX];
        int mport;
        cJSON *r;

        (void)testenv_docker();
        make_pki();
        /* metrics are served on loopback only */
        fixture_config(&cfg);
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/api.sock", cfg.data_dir);
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/admin.sock", cfg.data_dir);
        snprintf(cfg.metrics_listen, sizeof(cfg.metrics_listen), "0.0.0.0:0");
        cr_assert_lt(fronts_open(&cfg, &opts, &d, &err), 0);
        cr_assert(strstr(err.msg, "loopback") != NULL, "%s", err.msg);

        open_daemon(true, false);
        mport = http_server_port(d->metrics);
        cr_assert_gt(mport, 0);

        cr_assert_eq(curl(&before, "http://127.0.0.1:%d/metrics", mport), 200);
        cr_assert(prometheus_text_ok(before, why, sizeof(why)), "%s", why);
        cr_assert_eq(sample_value(before, "sandboxd_up"), 1);
        cr_assert_gt(sample_value(before, "process_resident_memory_bytes"), 0);
        cr_assert_gt(sample_value(before, "process_threads"), 1);
        cr_assert_gt(sample_value(before, "process_open_fds"), 2);

        cr_assert_eq(post(tok_a, "exec", "{\"session\": \"met\", \"command\": \"exit 0\"}", &r), 200);
        cJSON_Delete(r);
        cr_assert_eq(post(tok_a, "exec", "{\"session\": \"met\", \"command\": \"sleep 5\", \"timeout_seconds\": 1}",
                          &r),
                     200);
        cr_assert_str_eq(apic_str(r, "state"), "timeout");
        cJSON_Delete(r);
        cr_assert_eq(post("0000000000000000", "exec", "{\"session\": \"met\", \"command\": \"true\"}", NULL), 401);

        cr_assert_eq(curl(&after, "http://127.0.0.1:%d/metrics", mport), 200);
        cr_assert(prometheus_text_ok(after, why, sizeof(why)), "%s", why);
#define DELTA(prefix) (sample_value(after, prefix) - sample_value(before, prefix))
        cr_assert_eq(DELTA("sandboxd_executions_total{state=\"completed\",cause=\"exited\"}"), 1);
        cr_assert_eq(DELTA("sandboxd_executions_total{state=\"timeout\",cause=\"timeout\"}"), 1);
        cr_assert_eq(DELTA("sandboxd_exec_duration_seconds_count"), 2);
        cr_assert_eq(DELTA("sandboxd_exec_duration_seconds_bucket{le=\"+Inf\"}"), 2);
        cr_assert_geq(DELTA("sandboxd_exec_duration_seconds_sum"), 1.0, "the timeout ran at least 1 s");
        cr_assert_lt(DELTA("sandboxd_exec_duration_seconds_bucket{le=\"0.5\"}"), 2, "the 1 s one is above 0.5 s");
        cr_assert_geq(DELTA("sandboxd_auth_failures_total"), 1);
        cr_assert_geq(DELTA("sandboxd_http_requests_total{code=\"401\"}"), 1);
        cr_assert_geq(DELTA("sandboxd_http_requests_total{code=\"200\"}"), 2);
        cr_assert_eq(sample_value(after, "sandboxd_sessions{state=\"running\"}"), 1);
#undef DELTA
        free(before);
        free(after);

        /* health; anything else is 404; sandboxctl metrics prints the same text */
        cr_assert_eq(curl(&before, "http://127.0.0.1:%d/healthz", mport), 200);
        cr_assert_str_eq(before, "ok\n");
        free(before);
        cr_assert_eq(curl(NULL, "http://127.0.0.1:%d/v1/exec", mport), 404);
        snprintf(cmd, sizeof(cmd), "%s/sandboxctl -s %s metrics | grep -qx 'sandboxd_up 1'", SANDBOXD_BINARY_DIR,
                 cfg.admin_socket);
        cr_assert_eq(system(cmd), 0, "sandboxctl metrics");
        teardown();
}

/* POST /mcp: the status; the body in *ret_body; the Mcp-Session-Id answered into sid (if any). */
static int mcp_post(const char *token, const char *sid, const char *json, bool sse, char **ret_body, char *ret_sid)
{
        char jpath[SBX_PATH_MAX + 16], hpath[SBX_PATH_MAX + 16], sidh[128] = "";
        FILE *f;
        int code;


        snprintf(hpath, sizeof(hpath), "%s/mcp.hdr", pki);
        put_file("mcp.json", json, jpath);
        if (sid)
                snprintf(sidh, sizeof(sidh), "-H 'Mcp-Session-Id: %s'", sid);
        code = curl(ret_body,
                    "-N -D %s -H 'Authorization: Bearer %s' %s -H 'Content-Type: application/json' "
                    "-H 'Accept: application/json%s' --data-binary @%s https://127.0.0.1:%d/mcp",
                    hpath, token, sidh, sse ? ", text/event-stream" : "", jpath, port);
        if (ret_sid) {
                char line[256];
                ret_sid[0] = '\0';
                f = fopen(hpath, "re");
                while (f && fgets(line, sizeof(line), f))
                        if (strncasecmp(line, "Mcp-Session-Id: ", 16) == 0)
                                sscanf(line + 16, "%64[0-9a-f]", ret_sid);
                if (f)
                        fclose(f);
        }
        return code;
}

Test(http, mcp_sessions_tools_and_isolation, .init = setup_tls, .fini = teardown)
{
        char sid[65], *body = NULL;

        /* no session and no 2026 envelope: 400; initialize: a session id */
        cr_assert_eq(mcp_post(tok_a, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}", false, &body,
                              NULL),
                     400);
        free(body);
        cr_assert_eq(
                mcp_post(tok_a, NULL,
                         "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                         "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"curl\",\"version\":\"1\"}}}",
                         false, &body, sid),
                200);
        cr_assert_eq(strlen(sid), 32, "Mcp-Session-Id: %s", sid);
        cr_assert(strstr(body, "\"protocolVersion\":\"2025-06-18\"") != NULL, "%s", body);
        free(body);
        cr_assert_eq(mcp_post(tok_a, sid, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", false,
                              &body, NULL),
                     202);
        free(body);
        cr_assert_eq(mcp_post(tok_a, sid, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}", false, &body,
                              NULL),
                     200);
        cr_assert(strstr(body, "\"name\":\"exec\"") != NULL, "%s", body);
        free(body);

        /* a tool call, streamed: progress, then the response */
        cr_assert_eq(mcp_post(tok_a, sid,
                              "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
                              "\"arguments\":{\"command\":\"echo from-mcp; sleep 0.5; echo more\"},"
                              "\"_meta\":{\"progressToken\":\"p3\"}}}",
                              true, &body, NULL),
                     200);
        cr_assert(strstr(body, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"") !=
                          NULL,
                  "%s", body);
        cr_assert(strstr(body, "data: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\"") != NULL, "%s", body);
        cr_assert(strstr(body, "from-mcp") != NULL, "%s", body);
        free(body);

        /* another user's token cannot use the session; an unknown id is 404 too */
        cr_assert_eq(mcp_post(tok_b, sid, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\"}", false, &body,
                              NULL),
                     404);
        free(body);
        cr_assert_eq(mcp_post(tok_a, "00000000000000000000000000000000",
                              "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\"}", false, &body, NULL),
                     404);
        free(body);

        /* the 2026-07-28 era needs no session */
        cr_assert_eq(mcp_post(tok_a, NULL,
                              "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
                              "\"arguments\":{\"session\":\"s9\",\"command\":\"echo modern\"},\"_meta\":{"
                              "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                              "\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
                              false, &body, NULL),
                     200);
        cr_assert(strstr(body, "modern") != NULL && strstr(body, "\"resultType\":\"complete\"") != NULL, "%s", body);
        free(body);

        /* DELETE ends it */
        cr_assert_eq(curl(NULL,
                          "-X DELETE -H 'Authorization: Bearer %s' -H 'Mcp-Session-Id: %s' https://127.0.0.1:%d/mcp",
                          tok_a, sid, port),
                     200);
        cr_assert_eq(mcp_post(tok_a, sid, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/list\"}", false, &body,
                              NULL),
                     404);
        free(body);
        /* no token, no MCP */
        cr_assert_eq(curl(NULL, "--data-binary '{}' https://127.0.0.1:%d/mcp", port), 401);
}

/* The tasks behind the MCP tasks extension, through the JSON API: per user,
 * capped, gone after their ttl. */
/* get_task on params p: whether the task is no longer working (*r, the reply, replaced each call) */
static bool task_ended(const char *p, cJSON **r)
{
        cJSON_Delete(*r);
        *r = NULL;
        cr_assert_eq(post(tok_a, "get_task", p, r), 200);
        return strcmp(apic_str(*r, "status"), "working") != 0;
}

Test(http, tasks_are_per_user_capped_and_expire, .init = setup_tls, .fini = teardown)
{
        cJSON *r = NULL;
        char p[256], exec_id[64], task_id[64];
        struct store_task old = {0};
        size_t n = 0;
        int code;

        cr_assert_eq(post(tok_a, "exec", "{\"session\": \"t1\", \"command\": \"sleep 30\", \"background\": true}", &r),
                     200);
        snprintf(exec_id, sizeof(exec_id), "%s", apic_str(r, "execution_id"));
        cJSON_Delete(r);
        snprintf(p, sizeof(p), "{\"session\": \"t1\", \"execution_id\": \"%s\", \"tool\": \"exec\"}", exec_id);
        cr_assert_eq(post(tok_a, "create_task", p, &r), 200);
        snprintf(task_id, sizeof(task_id), "%s", apic_str(r, "task_id"));
        cr_assert_str_eq(apic_str(r, "status"), "working");
        cr_assert_eq(apic_num(r, "ttl_ms"), 3600000);
        cJSON_Delete(r);

        /* bob: not his execution, not his task (404 as for an unknown one) */
        cr_assert_eq(post(tok_b, "create_task", p, &r), 404);
        cJSON_Delete(r);
        snprintf(p, sizeof(p), "{\"task_id\": \"%s\"}", task_id);
        cr_assert_eq(post(tok_b, "get_task", p, &r), 404);
        cJSON_Delete(r);
        cr_assert_eq(post(tok_b, "cancel_task", p, &r), 404);
        cJSON_Delete(r);
        cr_assert_eq(post(tok_a, "get_task", "{\"task_id\": \"../../etc\"}", &r), 404);
        cJSON_Delete(r);

        /* the cap: 64 live tasks per user, then busy (429) */
        snprintf(p, sizeof(p), "{\"session\": \"t1\", \"execution_id\": \"%s\", \"tool\": \"exec\"}", exec_id);
        for (int i = 1; i < 64; i++) {
                cr_assert_eq(post(tok_a, "create_task", p, NULL), 200, "task %d", i);
        }
        code = post(tok_a, "create_task", p, &r);
        cr_assert_eq(code, 429, "the 65th live task");
        cr_assert_str_eq(err_code(r), "busy");
        cJSON_Delete(r);

        /* cancel: the execution is cancelled, the task says so */
        snprintf(p, sizeof(p), "{\"task_id\": \"%s\"}", task_id);
        cr_assert_eq(post(tok_a, "cancel_task", p, &r), 200);
        cJSON_Delete(r);
        r = NULL;
        (void)TESTENV_WAIT_UNTIL(task_ended(p, &r), 20000);
        cr_assert_str_eq(apic_str(r, "status"), "cancelled");
        cJSON_Delete(r);

        /* expiry: a task past its ttl is not found, and purged */
        snprintf(old.task_id, sizeof(old.task_id), "%032d", 7);
        snprintf(old.user_id, sizeof(old.user_id), "alice");
        snprintf(old.session_id, sizeof(old.session_id), "t1");
        snprintf(old.execution_id, sizeof(old.execution_id), "%s", exec_id);
        snprintf(old.tool, sizeof(old.tool), "exec");
        old.ttl_ms = 1000;
        old.poll_interval_ms = 1000;
        old.created_at = sbx_wall_ms() - 5000;
        cr_assert_eq(store_task_add(d->store, &old, old.created_at, 1000, 1000), 0);
        snprintf(p, sizeof(p), "{\"task_id\": \"%s\"}", old.task_id);
        cr_assert_eq(post(tok_a, "get_task", p, &r), 404);
        cJSON_Delete(r);
        cr_assert_eq(store_task_purge(d->store, sbx_wall_ms()), 1);
        cr_assert_eq(store_task_count(d->store, "alice", sbx_wall_ms(), &n), 0);
        cr_assert_eq(n, 64);

        /* and an unknown Mcp-Session-Id is 404 for DELETE and GET too */
        cr_assert_eq(curl(NULL,
                          "-X DELETE -H 'Authorization: Bearer %s' -H 'Mcp-Session-Id: %032d' "
                          "https://127.0.0.1:%d/mcp",
                          tok_a, 1, port),
                     404);
        cr_assert_eq(curl(NULL, "-H 'Authorization: Bearer %s' -H 'Mcp-Session-Id: zz' https://127.0.0.1:%d/mcp", tok_a,
                          port),
                     404);
}

/* sandboxd-mcp --url against an mTLS daemon: served with the client
 * certificate, refused without it. */
Test(http, mcp_adapter_over_https_with_mtls)
{
        char out[SBX_PATH_MAX + 16], cmd_in[SBX_PATH_MAX + 16];
        char *body = NULL;

        (void)testenv_docker();
        make_pki();
        open_daemon(true, true);
        put_file("in.jsonl",
                 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                 "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n"
                 "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n"
                 "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
                 "\"arguments\":{\"command\":\"echo via-url\"}}}\n",
                 cmd_in);
        snprintf(out, sizeof(out), "%s/out.jsonl", pki);
        cr_assert_eq(sh("SANDBOXD_TOKEN=%s SANDBOXD_API_SOCKET=/nonexistent timeout 120 %s/sandboxd-mcp "
                        "--url https://127.0.0.1:%d --cacert %s/ca.pem --cert %s/client.pem --key %s/client.key "
                        "--session u1 --drain-ms 60000 <%s >%s 2>%s/mcp.log",
                        tok_a, SANDBOXD_BINARY_DIR, port, pki, pki, pki, cmd_in, out, pki),
                     0);
        {
                FILE *f = fopen(out, "re");
                body = calloc(1, 1 << 20);
                size_t n = f ? fread(body, 1, (1 << 20) - 1, f) : 0;
                body[n] = '\0';
                if (f)
                        fclose(f);
        }
        cr_assert(strstr(body, "\"name\":\"exec\"") != NULL, "tools/list: %s", body);
        cr_assert(strstr(body, "\"stdout\":\"via-url\\n\"") != NULL, "exec: %s", body);
        free(body);

        /* without the client certificate the daemon refuses: the call is a tool error */
        cr_assert_eq(sh("SANDBOXD_TOKEN=%s timeout 120 %s/sandboxd-mcp --url https://127.0.0.1:%d --cacert %s/ca.pem "
                        "--session u1 --drain-ms 60000 <%s >%s 2>%s/mcp.log",
                        tok_a, SANDBOXD_BINARY_DIR, port, pki, cmd_in, out, pki),
                     0);
        {
                FILE *f = fopen(out, "re");
                body = calloc(1, 1 << 20);
                size_t n = f ? fread(body, 1, (1 << 20) - 1, f) : 0;
                body[n] = '\0';
                if (f)
                        fclose(f);
        }
        cr_assert(strstr(body, "via-url") == NULL, "%s", body);
        cr_assert(strstr(body, "\"isError\":true") != NULL, "%s", body);
        cr_assert(strstr(body, "forbidden") != NULL, "%s", body);
        free(body);
        /* a plain http:// URL to a remote host is refused before any request */
        cr_assert_eq(sh("%s/sandboxd-mcp --url http://192.0.2.1:80 </dev/null >/dev/null 2>&1", SANDBOXD_BINARY_DIR) >>
                             8,
                     2);
        teardown();
}

/* The user's row in list_users' reply, or NULL. */
static const cJSON *user_row(const cJSON *r, const char *user)
{
        const cJSON *u;
        cJSON_ArrayForEach(u, cJSON_GetObjectItem(r, "users")) {
                if (strcmp(apic_str(u, "user"), user) == 0)
                        return u;
        }
        return NULL;
}

/* Issue 39: an operator token reads users and quotas, the pool, the nodes
 * and the daemon's health over HTTPS; every other token is refused. */
Test(http, operator_reads_users_pool_nodes_and_health, .init = setup_tls, .fini = teardown)
{
        static const char *const methods[] = {"list_users", "pool_status", "list_nodes", "daemon_health"};
        char tok_op[TOKEN_LEN + 1], tok_c[TOKEN_LEN + 1];
        struct sbx_error err = {0};
        const cJSON *u, *usage, *o;
        cJSON *r = NULL;
        double auth_failures;

        cr_assert_eq(token_create(d->store, "ops", TOKEN_ROLE_OPERATOR, tok_op, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(token_create(d->store, "carol", TOKEN_ROLE_CONNECTOR, tok_c, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(post(tok_a, "create_session", "{\"session\": \"ops1\"}", &r), 200);
        cJSON_Delete(r);
        cr_assert_eq(post(tok_op, "daemon_health", "{}", &r), 200);
        auth_failures = apic_num(cJSON_GetObjectItem(r, "counters"), "auth_failures"); /* process-wide */
        cJSON_Delete(r);

        /* tenants, agent or connector, are refused each, as an operator is refused exec */
        for (size_t i = 0; i < ELEMENTSOF(methods); i++) {
                cr_assert_eq(post(tok_a, methods[i], "{}", &r), 403, "%s", methods[i]);
                cr_assert_str_eq(err_code(r), "forbidden");
                cJSON_Delete(r);
                cr_assert_eq(post(tok_c, methods[i], "{}", &r), 403, "%s", methods[i]);
                cJSON_Delete(r);
        }
        cr_assert_eq(post(tok_op, "exec", "{\"session\": \"ops1\", \"command\": \"true\"}", &r), 403);
        cJSON_Delete(r);

        /* whoami: any token learns its own user and role, the console's first call */
        cr_assert_eq(post(tok_a, "whoami", "{}", &r), 200);
        cr_assert_str_eq(apic_str(r, "user"), "alice");
        cr_assert_str_eq(apic_str(r, "role"), "agent");
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(r, "operator")));
        cJSON_Delete(r);
        cr_assert_eq(post(tok_c, "whoami", "{}", &r), 200);
        cr_assert_str_eq(apic_str(r, "role"), "connector");
        cJSON_Delete(r);
        cr_assert_eq(post(tok_op, "whoami", "{}", &r), 200);
        cr_assert_str_eq(apic_str(r, "user"), "ops");
        cr_assert_str_eq(apic_str(r, "role"), "operator");
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "operator")));
        cJSON_Delete(r);

        /* users: alice with her one running session, bob with a token and none */
        cr_assert_eq(post(tok_op, "list_users", "{}", &r), 200);
        u = user_row(r, "alice");
        cr_assert_not_null(u, "alice is listed");
        usage = cJSON_GetObjectItem(u, "usage");
        cr_assert_eq(apic_num(usage, "sessions"), 1);
        cr_assert_eq(apic_num(usage, "live_sessions"), 1);
        cr_assert_gt(apic_num(usage, "memory_bytes"), 0, "her container's memory is counted");
        cr_assert_eq(apic_num(cJSON_GetObjectItem(u, "limits"), "max_sessions_per_user"), cfg.max_sessions_per_user);
        u = user_row(r, "bob");
        cr_assert_not_null(u, "bob (a token, no session) is listed");
        cr_assert_eq(apic_num(cJSON_GetObjectItem(u, "usage"), "sessions"), 0);
        cr_assert_eq(apic_num(cJSON_GetObjectItem(u, "usage"), "memory_bytes"), 0);
        cJSON_Delete(r);

        /* the pool as configured (off here), no nodes in one process */
        cr_assert_eq(post(tok_op, "pool_status", "{}", &r), 200);
        o = cJSON_GetObjectItem(r, "pool");
        cr_assert_eq(apic_num(o, "size"), cfg.pool_size);
        cr_assert_eq(apic_num(o, "ready"), 0);
        cJSON_Delete(r);
        cr_assert_eq(post(tok_op, "list_nodes", "{}", &r), 200);
        cr_assert(cJSON_IsArray(cJSON_GetObjectItem(r, "nodes")));
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r, "nodes")), 0);
        cJSON_Delete(r);

        /* health: the engine answers, alice's session is the one running */
        cr_assert_eq(post(tok_op, "daemon_health", "{}", &r), 200);
        cr_assert_str_eq(apic_str(r, "status"), "ok");
        cr_assert_str_eq(apic_str(r, "version"), SBX_VERSION);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "docker"), "ok")));
        o = cJSON_GetObjectItem(r, "sessions");
        cr_assert_eq(apic_num(o, "running"), 1);
        cr_assert_eq(apic_num(o, "total"), 1);
        cr_assert_not_null(cJSON_GetObjectItem(r, "pool"));
        /* the tenants' refusals were not failed authentications: none failed yet */
        cr_assert_eq(apic_num(cJSON_GetObjectItem(r, "counters"), "auth_failures"), auth_failures);
        cJSON_Delete(r);
        cr_assert_eq(post("sbx_0123456789abcdef", "daemon_health", "{}", NULL), 401);
        cr_assert_eq(post(tok_op, "daemon_health", "{}", &r), 200);
        cr_assert_eq(apic_num(cJSON_GetObjectItem(r, "counters"), "auth_failures"), auth_failures + 1);
        cJSON_Delete(r);
}
