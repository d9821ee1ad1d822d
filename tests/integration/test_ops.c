/* Integration tests of the operator's views against the real dockerd:
 * `sandboxctl top` (admin sessions.top) and `sandboxctl logs` (session.logs). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/exec.h"
#include "sandboxd/session.h"
#include "testenv.h"

TestSuite(ops, .timeout = 300);

static struct sbx_config cfg;
static struct daemon *d;

static void open_daemon(void)
{
        fixture_config(&cfg);
        cfg.ports_per_session = 0; /* nothing published: no port range shared with other suites */
        d = fixture_open_sockets(&cfg);
}

static void create(const char *user, const char *session)
{
        struct session *s = NULL;
        struct sbx_error err = {0};
        cr_assert_eq(session_acquire(d->sessions, user, session, &s, &err), 0, "%s", err.msg);
        session_release(s);
}

/* Run sandboxctl; returns its exit status, stdout in *out (malloc'd). */
static int ctl(const char *args, char **out)
{
        char cmd[2048];
        FILE *p;
        size_t n = 0, cap = 1 << 20;
        int status;

        snprintf(cmd, sizeof(cmd), "%s/sandboxctl --socket '%s' %s 2>/dev/null", SANDBOXD_BINARY_DIR, cfg.admin_socket,
                 args);
        p = popen(cmd, "r");
        cr_assert_not_null(p);
        *out = malloc(cap);
        for (size_t k; (k = fread(*out + n, 1, cap - 1 - n, p)) > 0;)
                n += k;
        (*out)[n] = '\0';
        status = pclose(p);
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static const cJSON *find(const cJSON *top, const char *user, const char *session)
{
        const cJSON *o;
        cJSON_ArrayForEach(o, cJSON_GetObjectItem(top, "sessions")) {
                if (strcmp(apic_str(o, "user"), user) == 0 && strcmp(apic_str(o, "session"), session) == 0)
                        return o;
        }
        return NULL;
}

/* One `sandboxctl -j top --no-stream` frame, parsed. */
static cJSON *top_frame(const char *extra)
{
        char args[256], *out = NULL;
        cJSON *j;
        snprintf(args, sizeof(args), "-j top --no-stream --interval 0.5 %s", extra);
        cr_assert_eq(ctl(args, &out), 0, "sandboxctl %s: %s", args, out);
        j = cJSON_Parse(out);
        cr_assert_not_null(j, "not JSON: %s", out);
        free(out);
        return j;
}

static bool busy_seen(void *ud)
{
        cJSON *j = top_frame("");
        const cJSON *b = find(j, "alice", "busy");
        bool seen = b && cJSON_IsNumber(cJSON_GetObjectItem(b, "cpu_percent")) && apic_num(b, "cpu_percent") > 1;
        cJSON_Delete(j);
        return seen;
}

Test(ops, top)
{
        struct exec_request busy = {.user = "alice",
                                    .session = "busy",
                                    .command = "while :; do :; done",
                                    .timeout_s = 240,
                                    .actor = "test"};
        struct exec_request quick = {.user = "alice", .session = "idle", .command = "echo hi", .actor = "test"};
        struct exec_result res;
        struct sbx_error err = {0};
        char id[37], limit[32], *out = NULL;
        const cJSON *b, *i;
        cJSON *j;

        open_daemon();
        create("alice", "busy");
        create("alice", "idle");
        create("bob", "other");
        cr_assert_eq(exec_run(d->exec, &quick, &res, &err), 0, "%s", err.msg);
        exec_result_done(&res);
        cr_assert_eq(exec_start(d->exec, &busy, id, &err), 0, "%s", err.msg);

        /* CPU % comes from two samples: the busy loop shows up (predicate, generous deadline) */
        cr_assert_geq(fixture_wait(busy_seen, NULL, 90000), 0, "the busy session never showed CPU use");

        j = top_frame("");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "sessions")), 3);
        b = find(j, "alice", "busy");
        i = find(j, "alice", "idle");
        cr_assert(b && i && find(j, "bob", "other"));
        cr_assert_str_eq(apic_str(b, "state"), "running");
        cr_assert_eq(apic_num(b, "memory_limit"), (double)cfg.memory_bytes);
        cr_assert_gt(apic_num(b, "memory_usage"), 0);
        cr_assert_geq(apic_num(b, "pids"), 2, "the loop and its shell at least");
        cr_assert_eq(apic_num(b, "executions_running"), 1);
        cr_assert_eq(apic_num(i, "executions_running"), 0);
        cr_assert_eq(apic_num(i, "executions_total"), 1);
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(b, "egress_bytes")), "egress is not metered yet");
        cr_assert_eq(strlen(apic_str(b, "container_id")), 64);
        cJSON_Delete(j);

        j = top_frame("--user bob");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "sessions")), 1);
        cr_assert_not_null(find(j, "bob", "other"));
        cJSON_Delete(j);

        /* the table */
        cr_assert_eq(ctl("top --no-stream --interval 0.3", &out), 0);
        cr_assert_not_null(strstr(out, "MEM USAGE / LIMIT"), "%s", out);
        cr_assert_not_null(strstr(out, "busy"), "%s", out);
        snprintf(limit, sizeof(limit), "/ %.1fMiB", (double)cfg.memory_bytes / (1 << 20));
        cr_assert_not_null(strstr(out, limit), "the memory limit %s: %s", limit, out);
        cr_assert_not_null(strstr(out, "1/1"), "busy's executions, running/all: %s", out);
        free(out);
        cr_assert_eq(ctl("top --interval 0", &out), 2);
        free(out);
        cr_assert_eq(ctl("top --bogus", &out), 2);
        free(out);

        cr_assert_eq(exec_cancel(d->exec, "alice", id, true, &err), 0, "%s", err.msg);
        daemon_close(d);
        d = NULL;
}

Test(ops, logs)
{
        struct exec_request quick = {.user = "carol", .session = "s1", .command = "echo hi", .actor = "test"};
        struct exec_result res;
        struct sbx_error err = {0};
        char *out = NULL;
        cJSON *j, *r;
        const cJSON *audit, *log;

        open_daemon();
        create("carol", "s1");
        create("dave", "s2");
        cr_assert_eq(exec_run(d->exec, &quick, &res, &err), 0, "%s", err.msg);
        exec_result_done(&res);
        r = apic_admin(cfg.admin_socket,
                       "{\"cmd\":\"session.mark_private\",\"user\":\"carol\",\"session\":\"s1\",\"dataset\":\"crm\"}");
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        cr_assert_eq(ctl("logs carol s1", &out), 0);
        cr_assert_not_null(strstr(out, "audit exec"), "%s", out);
        cr_assert_not_null(strstr(out, "audit admin.session.mark_private"), "%s", out);
        cr_assert_not_null(strstr(out, "session marked private (dataset crm)"), "the daemon's log line: %s", out);
        free(out);

        cr_assert_eq(ctl("-j logs carol s1", &out), 0);
        j = cJSON_Parse(out);
        cr_assert_not_null(j, "%s", out);
        audit = cJSON_GetObjectItem(j, "audit");
        log = cJSON_GetObjectItem(j, "log");
        cr_assert_geq(cJSON_GetArraySize(audit), 3, "exec, privacy.mark, admin.session.mark_private");
        cr_assert_geq(cJSON_GetArraySize(log), 1);
        cr_assert_str_eq(apic_str(cJSON_GetArrayItem(log, 0), "session_id"), "s1");
        cr_assert_str_eq(apic_str(cJSON_GetArrayItem(audit, cJSON_GetArraySize(audit) - 1), "action"),
                         "admin.session.mark_private", "oldest first, the newest last");
        cJSON_Delete(j);
        free(out);

        cr_assert_eq(ctl("-j logs carol s1 --limit 1", &out), 0);
        j = cJSON_Parse(out);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "audit")), 1);
        cJSON_Delete(j);
        free(out);

        /* another session's view holds nothing of carol's */
        cr_assert_eq(ctl("logs dave s2", &out), 0);
        cr_assert_null(strstr(out, "crm"), "%s", out);
        cr_assert_null(strstr(out, "audit exec"), "%s", out);
        free(out);

        cr_assert_eq(ctl("logs carol", &out), 2);
        free(out);
        cr_assert_eq(ctl("logs carol s1 --limit 0", &out), 2);
        free(out);
        cr_assert_eq(ctl("logs 'bad user!' s1", &out), 1, "the daemon refuses an invalid key");
        free(out);
        daemon_close(d);
        d = NULL;
}
