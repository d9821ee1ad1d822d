/* Integration tests of labels, per-session resources and correlation
 * (issue 29), through the API socket and plain HTTP on loopback, against
 * the real dockerd:
 *   - a label filter returns exactly the matching sessions (never another
 *     user's); labels show in session_info, on the container
 *     (sandboxd.label.<key>) and in the session's audit rows;
 *   - bad keys, bad or oversize values and too many labels are refused,
 *     naming the key, and create nothing; labels fixed at the first use;
 *   - cpu and memory asked for are the container's cgroup limits (docker
 *     inspect and /sys/fs/cgroup inside), kept when the container is
 *     recreated; more than the user's maximum is refused naming the limit;
 *   - a traceparent (or request id) shows up in the result, in the daemon's
 *     log lines and in the audit rows of that request, also those its exec
 *     worker writes; over HTTP in the response headers;
 *   - /metrics never shows a series twice, whatever the values tenants
 *     give (one equal to the name of the overflow bucket, values that
 *     differ only in case) and a key listed twice (issue 34). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <libgen.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/daemon.h"
#include "sandboxd/http.h"
#include "sandboxd/quota.h"
#include "sandboxd/token.h"
#include "testenv.h"

TestSuite(labels, .timeout = 600);

static struct sbx_config cfg;
static struct daemon *d;
static char tok_a[TOKEN_LEN + 1], tok_b[TOKEN_LEN + 1];
static char log_path[SBX_PATH_MAX + 16];
static const char *label_keys = "team"; /* metrics.label_keys of the next open_daemon */
static int label_values_max = 1;        /* METRICS_LABEL_VALUES_MAX */

#define TRACE_ID "4bf92f3577b34da6a3ce929d0e0e4736"
#define TRACEPARENT "00-" TRACE_ID "-00f067aa0ba902b7-01"

static void open_daemon(void)
{
        char dir[SBX_PATH_MAX];
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};
        int fd;

        fixture_config(&cfg);
        cfg.port_range_lo = 31300; /* this suite's own, below the ephemeral range */
        cfg.port_range_hi = 31499;
        cfg.memory_bytes = 256 << 20; /* the maximum a session may ask for, by default */
        snprintf(cfg.log_level, sizeof(cfg.log_level), "info");
        snprintf(cfg.http_listen, sizeof(cfg.http_listen), "127.0.0.1:0"); /* plain HTTP: loopback only */
        snprintf(cfg.metrics_listen, sizeof(cfg.metrics_listen), "127.0.0.1:0");
        snprintf(cfg.metrics_label_keys, sizeof(cfg.metrics_label_keys), "%s", label_keys);
        cfg.metrics_label_values_max = label_values_max;
        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/run/api.sock", dirname(dir));
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/admin.sock", dir);
        /* the daemon's log lines (stderr) go to a file this test reads */
        snprintf(log_path, sizeof(log_path), "%s/daemon.log", dir);
        fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        cr_assert_geq(fd, 0);
        cr_assert_eq(dup2(fd, STDERR_FILENO), STDERR_FILENO);
        close(fd);
        (void)testenv_docker();
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_AGENT, tok_a, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(token_create(d->store, "bob", TOKEN_ROLE_AGENT, tok_b, NULL, &err), 0, "%s", err.msg);
}

static void close_daemon(void)
{
        daemon_close(d);
        d = NULL;
}

static cJSON *call(const char *token, const char *method, const char *params_json)
{
        return apic_call(cfg.api_socket, token, method, apic_json(params_json));
}

/* The call succeeds; its result (the reply is freed with *keep). */
static const cJSON *ok(cJSON *reply, cJSON **keep)
{
        cr_assert_not_null(reply, "no reply");
        cr_assert_str_eq(apic_code(reply), "", "%s", cJSON_PrintUnformatted(reply));
        *keep = reply;
        return apic_result(reply);
}

/* The call fails with code, and its message holds each of the NULL-terminated needles. */
static void refused(cJSON *reply, const char *code, ...)
{
        const cJSON *msg;
        va_list ap;

        cr_assert_not_null(reply, "no reply");
        cr_assert_str_eq(apic_code(reply), code, "%s", cJSON_PrintUnformatted(reply));
        msg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(reply, "error"), "message");
        cr_assert(cJSON_IsString(msg));
        va_start(ap, code);
        for (const char *n = va_arg(ap, const char *); n; n = va_arg(ap, const char *))
                cr_expect_not_null(strstr(msg->valuestring, n), "\"%s\" not in: %s", n, msg->valuestring);
        va_end(ap);
        cJSON_Delete(reply);
}

/* The sessions list_sessions returns for filter_json, as "a,b," in list order. */
static void listed(const char *token, const char *params_json, char *buf, size_t size)
{
        cJSON *keep;
        const cJSON *res = ok(call(token, "list_sessions", params_json), &keep), *it;
        buf[0] = '\0';
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(res, "sessions")) {
                strncat(buf, apic_str(it, "session"), size - strlen(buf) - 2);
                strcat(buf, ",");
        }
        cJSON_Delete(keep);
}

/* Sorted comma list: names are given in sorted order by the test. */
static bool has_exactly(const char *got, const char *const *want)
{
        size_t n = 0;
        char copy[1024], *save = NULL;

        snprintf(copy, sizeof(copy), "%s", got);
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                bool found = false;
                for (size_t i = 0; want[i]; i++)
                        found |= strcmp(want[i], t) == 0;
                if (!found)
                        return false;
                n++;
        }
        for (size_t i = 0; want[i]; i++)
                if (!strstr(got, want[i]))
                        return false;
        size_t w = 0;
        while (want[w])
                w++;
        return n == w;
}

static char *docker_out(const char *fmt, const char *id)
{
        char cmd[512];
        char *buf = calloc(1, 4096);
        FILE *p;
        size_t n;

        snprintf(cmd, sizeof(cmd), "docker inspect -f '%s' %s 2>/dev/null", fmt, id);
        p = popen(cmd, "r");
        cr_assert_not_null(p);
        n = fread(buf, 1, 4095, p);
        buf[n] = '\0';
        pclose(p);
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
                buf[--n] = '\0';
        return buf;
}

/* One column of the first row of sql (test constants only) over the daemon's store. */
static char *store_text(const char *sql)
{
        char db[SBX_PATH_MAX + 16];
        sqlite3 *h;
        sqlite3_stmt *st;
        char *out = NULL;

        snprintf(db, sizeof(db), "%s/sandboxd.db", cfg.data_dir);
        cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        sqlite3_busy_timeout(h, 5000);
        cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
                out = strdup((const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        sqlite3_close(h);
        return out;
}

static char *read_log(void)
{
        FILE *f = fopen(log_path, "re");
        char *buf = calloc(1, 8 << 20);
        size_t n = f ? fread(buf, 1, (8 << 20) - 1, f) : 0;
        if (f)
                fclose(f);
        buf[n] = '\0';
        return buf;
}

Test(labels, filter_returns_exactly_the_matching_sessions, .init = open_daemon, .fini = close_daemon)
{
        char got[1024], id[65];
        cJSON *keep;
        const cJSON *res;
        char *v;

        res = ok(call(tok_a, "create_session", "{\"session\":\"a1\",\"labels\":{\"team\":\"x\",\"run\":\"1\"}}"),
                 &keep);
        cr_assert_str_eq(apic_str(cJSON_GetObjectItemCaseSensitive(res, "labels"), "team"), "x");
        cJSON_Delete(keep);
        cJSON_Delete(ok(call(tok_a, "create_session",
                             "{\"session\":\"a2\",\"labels\":{\"team\":\"x\",\"run\":\"2\","
                             "\"example.com/task\":\"t-9\"}}"),
                        &keep)
                             ? keep
                             : NULL);
        cJSON_Delete(ok(call(tok_a, "create_session", "{\"session\":\"a3\",\"labels\":{\"team\":\"y\"}}"), &keep)
                             ? keep
                             : NULL);
        cJSON_Delete(ok(call(tok_a, "create_session", "{\"session\":\"a4\"}"), &keep) ? keep : NULL);
        cJSON_Delete(ok(call(tok_b, "create_session", "{\"session\":\"b1\",\"labels\":{\"team\":\"x\"}}"), &keep)
                             ? keep
                             : NULL);

        listed(tok_a, "{\"labels\":{\"team\":\"x\"}}", got, sizeof(got));
        cr_expect(has_exactly(got, (const char *const[]){"a1", "a2", NULL}), "team=x: %s", got);
        listed(tok_a, "{\"labels\":{\"team\":\"x\",\"run\":\"2\"}}", got, sizeof(got));
        cr_expect(has_exactly(got, (const char *const[]){"a2", NULL}), "team=x,run=2: %s", got);
        listed(tok_a, "{\"labels\":{\"example.com/task\":\"t-9\"}}", got, sizeof(got));
        cr_expect(has_exactly(got, (const char *const[]){"a2", NULL}), "prefixed key: %s", got);
        listed(tok_a, "{\"labels\":{\"team\":\"X\"}}", got, sizeof(got));
        cr_expect_str_eq(got, "", "values match exactly: %s", got);
        listed(tok_a, "{\"labels\":{\"team\":\"z\"}}", got, sizeof(got));
        cr_expect_str_eq(got, "", "no session has team=z: %s", got);
        listed(tok_a, "{}", got, sizeof(got));
        cr_expect(has_exactly(got, (const char *const[]){"a1", "a2", "a3", "a4", NULL}), "no filter: %s", got);
        listed(tok_b, "{\"labels\":{\"team\":\"x\"}}", got, sizeof(got));
        cr_expect(has_exactly(got, (const char *const[]){"b1", NULL}), "bob sees his own only: %s", got);
        refused(call(tok_a, "list_sessions", "{\"labels\":{\"Team\":\"x\"}}"), "invalid", "Team", NULL);

        /* on the container, for docker ps --filter label=sandboxd.label.team=x */
        fixture_container_of(d, "alice", "a1", id);
        v = docker_out(
                "{{index .Config.Labels \"sandboxd.label.team\"}}/{{index .Config.Labels \"sandboxd.label.run\"}}", id);
        cr_expect_str_eq(v, "x/1");
        free(v);

        /* in /metrics: team is the only key counted, and one value at most: the rest is "other" */
        {
                char *body = NULL, cmd[256];
                FILE *p;
                snprintf(cmd, sizeof(cmd), "curl -sS --max-time 30 http://127.0.0.1:%d/metrics",
                         http_server_port(d->metrics));
                p = popen(cmd, "r");
                body = calloc(1, 1 << 20);
                fread(body, 1, (1 << 20) - 1, p);
                pclose(p);
                cr_expect_not_null(strstr(body, "sandboxd_sessions_by_label{key=\"team\",value=\"x\"} 3\n"), "%s",
                                   body);
                cr_expect_not_null(strstr(body, "sandboxd_sessions_by_label{key=\"team\",value=\"(other)\"} 1\n"), "%s",
                                   body);
                cr_expect_null(strstr(body, "key=\"run\""), "run is not in metrics_label_keys");
                free(body);
        }

        /* an audit row of the session carries its labels (destroy_session writes one) */
        cJSON_Delete(ok(call(tok_a, "destroy_session", "{\"session\":\"a1\"}"), &keep) ? keep : NULL);
        v = store_text(
                "SELECT detail FROM audit_log WHERE user_id = 'alice' AND session_id = 'a1' AND "
                "action = 'session.destroy'");
        cr_assert_not_null(v);
        cr_expect_not_null(strstr(v, "\"labels\":{\"run\":\"1\",\"team\":\"x\"}"), "%s", v);
        free(v);
        listed(tok_a, "{\"labels\":{\"team\":\"x\"}}", got, sizeof(got));
        cr_expect(has_exactly(got, (const char *const[]){"a2", NULL}), "after destroy: %s", got);
}

Test(labels, bad_labels_are_refused_naming_the_key, .init = open_daemon, .fini = close_daemon)
{
        static const struct {
                const char *labels, *needle;
        } bad[] = {
                {"{\"Team\":\"x\"}", "Team"},                   /* upper case key */
                {"{\"a b\":\"x\"}", "a b"},                     /* space */
                {"{\"-x\":\"x\"}", "-x"},                       /* must start alphanumeric */
                {"{\"x-\":\"x\"}", "x-"},                       /* and end so */
                {"{\"bad_prefix_/x\":\"v\"}", "bad_prefix_/x"}, /* not a DNS prefix */
                {"{\"k\":\"has space\"}", "params.labels.k"},
                {"{\"k\":\"semi;colon\"}", "params.labels.k"},
                {"{\"k\":\"\\u00e9t\\u00e9\"}", "params.labels.k"},
                {"{\"k\":\"a\\nb\"}", "params.labels.k"},
                {"{\"k\":1}", "params.labels.k"},
                {"{\"k\":\"0123456789012345678901234567890123456789012345678901234567890123\"}", "params.labels.k"},
                {"{\"k0123456789012345678901234567890123456789012345678901234567890123\":\"v\"}", "k0123"},
                {"[\"k\"]", "params.labels"},
                {"{\"a\":\"1\",\"b\":\"1\",\"c\":\"1\",\"d\":\"1\",\"e\":\"1\",\"f\":\"1\",\"g\":\"1\",\"h\":\"1\","
                 "\"i\":\"1\",\"j\":\"1\",\"k\":\"1\",\"l\":\"1\",\"m\":\"1\",\"n\":\"1\",\"o\":\"1\",\"p\":\"1\","
                 "\"q\":\"1\"}",
                 "more than 16 labels"},
        };
        char params[1024], got[256];
        cJSON *keep;

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                snprintf(params, sizeof(params), "{\"session\":\"s%zu\",\"labels\":%s}", i, bad[i].labels);
                refused(call(tok_a, "create_session", params), "invalid", bad[i].needle, NULL);
                /* on first use too */
                snprintf(params, sizeof(params),
                         "{\"session\":\"f%zu\",\"path\":\"x\",\"content\":\"1\",\"labels\":%s}", i, bad[i].labels);
                refused(call(tok_a, "write_file", params), "invalid", bad[i].needle, NULL);
        }
        listed(tok_a, "{}", got, sizeof(got));
        cr_expect_str_eq(got, "", "nothing was created: %s", got);

        /* the limits themselves are fine: 63 characters, a 253-character-bounded DNS prefix, 16 labels */
        cJSON_Delete(ok(call(tok_a, "create_session",
                             "{\"session\":\"edge\",\"labels\":{"
                             "\"k\":\"012345678901234567890123456789012345678901234567890123456789012\","
                             "\"app.kubernetes.io/name\":\"A_b.c-D\",\"empty\":\"\"}}"),
                        &keep)
                             ? keep
                             : NULL);
        listed(tok_a, "{\"labels\":{\"empty\":\"\"}}", got, sizeof(got));
        cr_expect_str_eq(got, "edge,");
}

Test(labels, first_use_fixes_the_labels, .init = open_daemon, .fini = close_daemon)
{
        char got[256];
        cJSON *keep;
        const cJSON *res;

        /* a session made by its first call, not create_session */
        cJSON_Delete(ok(call(tok_a, "write_file",
                             "{\"session\":\"lazy\",\"path\":\"a.txt\",\"content\":\"1\",\"labels\":{\"run\":\"r1\"}}"),
                        &keep)
                             ? keep
                             : NULL);
        res = ok(call(tok_a, "session_info", "{\"session\":\"lazy\"}"), &keep);
        cr_expect_str_eq(apic_str(cJSON_GetObjectItemCaseSensitive(res, "labels"), "run"), "r1");
        cJSON_Delete(keep);
        /* the same again, or none: fine; others: conflict, and nothing changes */
        cJSON_Delete(
                ok(call(tok_a, "read_file", "{\"session\":\"lazy\",\"path\":\"a.txt\",\"labels\":{\"run\":\"r1\"}}"),
                   &keep)
                        ? keep
                        : NULL);
        cJSON_Delete(ok(call(tok_a, "read_file", "{\"session\":\"lazy\",\"path\":\"a.txt\"}"), &keep) ? keep : NULL);
        refused(call(tok_a, "read_file", "{\"session\":\"lazy\",\"path\":\"a.txt\",\"labels\":{\"run\":\"r2\"}}"),
                "conflict", "fixed at creation", NULL);
        refused(call(tok_a, "create_session", "{\"session\":\"lazy\",\"labels\":{\"run\":\"r2\"}}"), "conflict", NULL);
        listed(tok_a, "{\"labels\":{\"run\":\"r1\"}}", got, sizeof(got));
        cr_expect_str_eq(got, "lazy,");
        /* a session made without labels has none: asking for some later is a conflict */
        cJSON_Delete(ok(call(tok_a, "create_session", "{\"session\":\"plain\"}"), &keep) ? keep : NULL);
        refused(call(tok_a, "session_info", "{\"session\":\"plain\",\"labels\":{\"run\":\"r1\"}}"), "conflict", NULL);
}

static void expect_limits(const char *session, const char *memory, const char *nano_cpus)
{
        char id[65], *v, *out = NULL;

        fixture_container_of(d, "alice", session, id);
        v = docker_out("{{.HostConfig.Memory}} {{.HostConfig.MemorySwap}} {{.HostConfig.NanoCpus}}", id);
        char want[128];
        snprintf(want, sizeof(want), "%s %s %s", memory, memory, nano_cpus);
        cr_expect_str_eq(v, want, "docker inspect of %s", session);
        free(v);
        /* and the kernel's own view, from inside (cgroup v2, or v1's files): the memory limit and the
         * CFS quota per 100 ms period */
        cr_assert_eq(fixture_sh(id,
                                "cd /sys/fs/cgroup && if [ -f memory.max ]; then cat memory.max; "
                                "cut -d' ' -f1 cpu.max; else cat memory/memory.limit_in_bytes cpu/cpu.cfs_quota_us; fi",
                                &out),
                     0, "%s", out ? out : "");
        snprintf(want, sizeof(want), "%s\n%lld\n", memory, atoll(nano_cpus) / 10000);
        cr_expect_str_eq(out, want, "cgroup of %s", session);
        free(out);
}

Test(labels, requested_resources_are_the_cgroup_limits_and_survive_recreation, .init = open_daemon,
     .fini = close_daemon)
{
        char id[65], cmd[128];
        cJSON *keep;
        const cJSON *res;

        res = ok(call(tok_a, "create_session", "{\"session\":\"r\",\"cpu\":0.5,\"memory\":\"192m\"}"), &keep);
        cr_expect_eq(apic_num(cJSON_GetObjectItemCaseSensitive(res, "resources"), "memory"), 192 << 20);
        cr_expect_eq(apic_num(cJSON_GetObjectItemCaseSensitive(res, "resources"), "cpu"), 0.5);
        cJSON_Delete(keep);
        expect_limits("r", "201326592", "500000000");
        /* a session that asks nothing has the config's */
        cJSON_Delete(ok(call(tok_a, "create_session", "{\"session\":\"dflt\"}"), &keep) ? keep : NULL);
        expect_limits("dflt", "268435456", "1000000000");

        /* the container dies: the next use recreates it with the same limits */
        fixture_container_of(d, "alice", "r", id);
        snprintf(cmd, sizeof(cmd), "rm -f %s >/dev/null", id);
        cr_assert_eq(fixture_docker_cli(cmd), 0);
        res = ok(call(tok_a, "exec", "{\"session\":\"r\",\"command\":\"echo back\"}"), &keep);
        cr_expect_str_eq(apic_str(res, "stdout"), "back\n");
        cJSON_Delete(keep);
        {
                char id2[65];
                fixture_container_of(d, "alice", "r", id2);
                cr_assert_str_neq(id, id2, "a new container");
        }
        expect_limits("r", "201326592", "500000000");
}

Test(labels, more_than_the_maximum_is_refused_naming_the_limit, .init = open_daemon, .fini = close_daemon)
{
        struct sbx_error err = {0};
        char got[256];

        refused(call(tok_a, "create_session", "{\"session\":\"m\",\"memory\":\"1g\"}"), "invalid",
                "memory 1g exceeds this user's maximum 256m (max_session_memory)", NULL);
        refused(call(tok_a, "create_session", "{\"session\":\"m\",\"cpu\":\"2\"}"), "invalid",
                "cpu 2 exceeds this user's maximum 1 (max_session_cpus)", NULL);
        refused(call(tok_a, "exec", "{\"session\":\"m\",\"command\":\"true\",\"memory\":1073741824}"), "invalid",
                "max_session_memory", NULL);
        refused(call(tok_a, "create_session", "{\"session\":\"m\",\"disk\":\"1g\"}"), "invalid",
                "workspace.quota_mode loop", NULL);
        refused(call(tok_a, "create_session", "{\"session\":\"m\",\"memory\":\"1x\"}"), "invalid", "params.memory",
                NULL);
        refused(call(tok_a, "create_session", "{\"session\":\"m\",\"memory\":1000}"), "invalid", "out of range", NULL);
        refused(call(tok_a, "create_session", "{\"session\":\"m\",\"cpu\":-1}"), "invalid", "params.cpu", NULL);
        /* a per-user override, in force at once */
        cr_assert_eq(quota_set(d->quota, "alice", "max_session_memory", 128 << 20, &err), 0, "%s", err.msg);
        refused(call(tok_a, "create_session", "{\"session\":\"m\",\"memory\":\"192m\"}"), "invalid",
                "memory 192m exceeds this user's maximum 128m (max_session_memory)", NULL);
        cr_assert_eq(quota_set(d->quota, "alice", "max_session_cpus", 250, &err), 0, "%s", err.msg);
        refused(call(tok_a, "create_session", "{\"session\":\"m\",\"cpu\":\"500m\"}"), "invalid",
                "cpu 0.5 exceeds this user's maximum 0.25 (max_session_cpus)", NULL);
        /* bob keeps the defaults */
        {
                cJSON *keep;
                cJSON_Delete(ok(call(tok_b, "create_session", "{\"session\":\"m\",\"memory\":\"192m\"}"), &keep)
                                     ? keep
                                     : NULL);
        }
        listed(tok_a, "{}", got, sizeof(got));
        cr_expect_str_eq(got, "", "nothing was created for alice: %s", got);
}

Test(labels, traceparent_in_result_log_lines_and_audit_rows, .init = open_daemon, .fini = close_daemon)
{
        char *log, *v, needle[128];
        cJSON *keep;
        const cJSON *res;

        res = ok(call(tok_a, "create_session", "{\"session\":\"t\",\"traceparent\":\"" TRACEPARENT "\"}"), &keep);
        cr_expect_str_eq(apic_str(res, "trace_id"), TRACE_ID);
        cJSON_Delete(keep);
        /* an exec: its audit row is written by the execution's own worker thread */
        res = ok(call(tok_a, "exec",
                      "{\"session\":\"t\",\"command\":\"echo hi\",\"traceparent\":\"00-"
                      "0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}"),
                 &keep);
        cr_expect_str_eq(apic_str(res, "trace_id"), "0af7651916cd43dd8448eb211c80319c");
        cJSON_Delete(keep);
        v = store_text(
                "SELECT trace_id FROM audit_log WHERE user_id = 'alice' AND session_id = 't' AND "
                "action = 'exec'");
        cr_expect_str_eq(v ? v : "(none)", "0af7651916cd43dd8448eb211c80319c");
        free(v);
        /* a request id instead, and the destroy's audit row */
        res = ok(call(tok_a, "destroy_session", "{\"session\":\"t\",\"request_id\":\"req-42.a:b\"}"), &keep);
        cr_expect_str_eq(apic_str(res, "trace_id"), "req-42.a:b");
        cJSON_Delete(keep);
        v = store_text(
                "SELECT trace_id FROM audit_log WHERE user_id = 'alice' AND session_id = 't' AND "
                "action = 'session.destroy'");
        cr_expect_str_eq(v ? v : "(none)", "req-42.a:b");
        free(v);

        log = read_log();
        snprintf(needle, sizeof(needle), "\"trace_id\":\"%s\"", TRACE_ID);
        cr_expect_not_null(strstr(log, needle), "no log line carries %s:\n%s", TRACE_ID, log);
        cr_expect_not_null(strstr(log, "api: create_session"), "%s", log);
        {
                /* the line that names the call carries the trace */
                const char *line = strstr(log, "api: create_session");
                const char *eol = line ? strchr(line, '\n') : NULL;
                const char *tr = line ? strstr(line, needle) : NULL;
                cr_expect(tr && eol && tr < eol, "the api line has no trace id");
        }
        cr_expect_not_null(strstr(log, "\"trace_id\":\"req-42.a:b\""));
        free(log);

        /* invalid values are ignored: a fresh id, never the bad one, and the call works */
        static const char *const bad[] = {
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01", /* all-zero trace id */
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", /* upper case */
                "00-" TRACE_ID "-0000000000000000-01",                     /* all-zero parent */
                "ff-" TRACE_ID "-00f067aa0ba902b7-01",                     /* version ff */
                "00-" TRACE_ID "-00f067aa0ba902b7-01-extra",               /* 00 is exactly 55 */
                "garbage",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char params[256];
                const char *got;
                snprintf(params, sizeof(params), "{\"traceparent\":\"%s\"}", bad[i]);
                res = ok(call(tok_a, "list_sessions", params), &keep);
                got = apic_str(res, "trace_id");
                cr_expect_eq(strlen(got), 32, "%s", got);
                cr_expect_str_neq(got, TRACE_ID);
                cr_expect(strspn(got, "0123456789abcdef") == 32, "%s", got);
                cJSON_Delete(keep);
        }
        refused(call(tok_a, "session_info", "{\"session\":\"!\",\"traceparent\":\"" TRACEPARENT "\"}"), "invalid",
                NULL);
}

/* A request over HTTP with headers: the body's and the headers' trace ids. */
static char *http_post(const char *headers, const char *method, const char *body, char **ret_headers)
{
        char cmd[2048], hpath[SBX_PATH_MAX + 32];
        FILE *p, *f;
        char *out = calloc(1, 1 << 16), *hs = calloc(1, 1 << 16);
        size_t n;

        snprintf(hpath, sizeof(hpath), "%s/headers", cfg.data_dir);
        snprintf(cmd, sizeof(cmd),
                 "curl -sS --max-time 60 -D %s -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' "
                 "%s --data-binary '%s' http://127.0.0.1:%d/v1/%s",
                 hpath, tok_a, headers, body, http_server_port(d->http), method);
        p = popen(cmd, "r");
        cr_assert_not_null(p);
        n = fread(out, 1, (1 << 16) - 1, p);
        out[n] = '\0';
        pclose(p);
        f = fopen(hpath, "re");
        cr_assert_not_null(f);
        n = fread(hs, 1, (1 << 16) - 1, f);
        hs[n] = '\0';
        fclose(f);
        *ret_headers = hs;
        return out;
}

Test(labels, traceparent_over_http_headers, .init = open_daemon, .fini = close_daemon)
{
        char *hs = NULL, *body;
        cJSON *o;

        body = http_post("-H 'traceparent: " TRACEPARENT "'", "list_sessions", "{}", &hs);
        o = cJSON_Parse(body);
        cr_assert_not_null(o, "%s", body);
        cr_expect_str_eq(apic_str(o, "trace_id"), TRACE_ID);
        cr_expect_not_null(strcasestr(hs, "traceparent: 00-" TRACE_ID "-"), "%s", hs);
        cr_expect_null(strstr(hs, TRACEPARENT), "a span of our own, not the caller's: %s", hs);
        cr_expect_not_null(strcasestr(hs, "X-Request-Id: " TRACE_ID), "%s", hs);
        cJSON_Delete(o);
        free(body);
        free(hs);

        /* X-Request-Id alone, and on an error too */
        body = http_post("-H 'X-Request-Id: job-7'", "session_info", "{\"session\":\"!\"}", &hs);
        o = cJSON_Parse(body);
        cr_assert_not_null(o, "%s", body);
        cr_expect_str_eq(apic_str(cJSON_GetObjectItemCaseSensitive(o, "error"), "trace_id"), "job-7", "%s", body);
        cr_expect_not_null(strcasestr(hs, "X-Request-Id: job-7"), "%s", hs);
        cr_expect_null(strcasestr(hs, "traceparent:"), "a request id is not a W3C trace id: %s", hs);
        cJSON_Delete(o);
        free(body);
        free(hs);
}

/* GET /metrics (malloc'd). */
static char *scrape(void)
{
        char *body = calloc(1, 1 << 20), cmd[256];
        size_t n;
        FILE *p;

        snprintf(cmd, sizeof(cmd), "curl -sS --max-time 30 http://127.0.0.1:%d/metrics", http_server_port(d->metrics));
        p = popen(cmd, "r");
        cr_assert_not_null(p);
        n = fread(body, 1, (1 << 20) - 1, p);
        body[n] = '\0';
        cr_assert_eq(pclose(p), 0);
        return body;
}

/* Every sample line of the exposition names a series (name and labels, up
 * to the value) no other line names; *ret_n: how many. */
static void series_unique(const char *body, size_t *ret_n)
{
        char **seen = NULL;
        size_t n = 0;

        for (const char *line = body; *line;) {
                const char *end = strchr(line, '\n'), *sp;
                size_t len = end ? (size_t)(end - line) : strlen(line);
                if (len > 0 && line[0] != '#') {
                        sp = memrchr(line, ' ', len);
                        cr_assert_not_null(sp, "%.*s", (int)len, line);
                        char *key = strndup(line, (size_t)(sp - line));
                        for (size_t i = 0; i < n; i++)
                                cr_assert_str_neq(seen[i], key, "series %s twice in:\n%s", key, body);
                        seen = realloc(seen, (n + 1) * sizeof(*seen));
                        seen[n++] = key;
                }
                line += len + (end ? 1 : 0);
        }
        for (size_t i = 0; i < n; i++)
                free(seen[i]);
        free(seen);
        *ret_n = n;
}

static void open_daemon_many_values(void)
{
        label_keys = "team, team,example.com/task";
        label_values_max = 3;
        open_daemon();
}

/* A tenant's value equal to the overflow bucket's name was a second series
 * of the same name and labels (Prometheus refuses the scrape). */
Test(labels, no_tenant_value_makes_a_metrics_series_twice, .init = open_daemon_many_values, .fini = close_daemon)
{
        /* in key order, the first three values are kept: other, Other, x; y overflows */
        static const char *const sessions[][2] = {{"a1", "other"}, {"a2", "Other"}, {"a3", "x"}, {"a4", "y"}};
        char params[256], *body, *v;
        size_t n = 0;
        cJSON *keep;

        for (size_t i = 0; i < sizeof(sessions) / sizeof(sessions[0]); i++) {
                snprintf(params, sizeof(params),
                         "{\"session\":\"%s\",\"labels\":{\"team\":\"%s\",\"example.com/task\":\"other\"}}",
                         sessions[i][0], sessions[i][1]);
                cJSON_Delete(ok(call(tok_a, "create_session", params), &keep) ? keep : NULL);
        }
        body = scrape();
        series_unique(body, &n);
        cr_assert_gt(n, 20, "%s", body);
        for (size_t i = 0; i < 3; i++) {
                char want[128];
                snprintf(want, sizeof(want), "sandboxd_sessions_by_label{key=\"team\",value=\"%s\"} 1\n",
                         sessions[i][1]);
                cr_expect_not_null(strstr(body, want), "%s in:\n%s", want, body);
        }
        v = strstr(body, "sandboxd_sessions_by_label{key=\"team\",value=\"(other)\"} ");
        cr_expect_not_null(v, "the overflow bucket: %s", body);
        cr_expect(v && strncmp(strchr(v, '}') + 2, "1\n", 2) == 0, "y alone overflows: %s", body);
        cr_expect_not_null(strstr(body, "sandboxd_sessions_by_label{key=\"example.com/task\",value=\"other\"} 4\n"),
                           "%s", body);
        free(body);
}
