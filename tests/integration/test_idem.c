/* Integration tests of what agents ask for (issue 17, items 4 and 5) over the
 * real API socket and dockerd: idempotent retries (the same result, no second
 * execution — counted), concurrent duplicates, a retry after a daemon
 * restart, conflicts, the per-user key cap; get_execution wait: true and
 * list_executions completed_within_ms. */
#include <criterion/criterion.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/daemon.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
#include "testenv.h"

TestSuite(idem, .timeout = 600);

static struct sbx_config cfg;
static struct daemon *d;
static char tok_a[TOKEN_LEN + 1], tok_b[TOKEN_LEN + 1];

static void open_again(void)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};

        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
}

static void open_daemon(void)
{
        char dir[SBX_PATH_MAX];
        struct sbx_error err = {0};

        fixture_config(&cfg);
        cfg.port_range_lo = 29500; /* a range of this suite's own */
        cfg.port_range_hi = 29699;
        cfg.idempotency_max_keys = 5;
        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/run/api.sock", dirname(dir));
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/run/admin.sock", dir);
        cfg.exec_kill_grace_ms = 500;
        (void)testenv_docker();
        open_again();
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

static const cJSON *ok(const cJSON *reply)
{
        const cJSON *res = apic_result(reply);
        char *text = res ? NULL : cJSON_PrintUnformatted(reply);
        cr_assert_not_null(res, "%s", text);
        return res;
}

static void expect_code(cJSON *reply, const char *code)
{
        char *text = cJSON_PrintUnformatted(reply);
        cr_assert_str_eq(apic_code(reply), code, "%s", text);
        free(text);
        cJSON_Delete(reply);
}

/* How many of alice's executions in session s ran this exact command line. */
static int count_runs(const char *session, const char *preview)
{
        char params[256];
        cJSON *r;
        const cJSON *it;
        int n = 0;

        snprintf(params, sizeof(params), "{\"session\": \"%s\", \"limit\": 1000}", session);
        r = call(tok_a, "list_executions", params);
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(ok(r), "executions")) {
                const char *p = apic_str(it, "command_preview");
                if (p && strcmp(p, preview) == 0)
                        n++;
        }
        cJSON_Delete(r);
        return n;
}

/* A result as text without its trace_id: every reply names the trace id of
 * the request it answers (reqctx.h), a replay's its own. */
static char *result_text(const cJSON *result)
{
        cJSON *c = cJSON_Duplicate(result, true);
        char *t;

        cr_assert_not_null(c);
        cr_assert(cJSON_IsString(cJSON_GetObjectItem(c, "trace_id")), "a result names its trace_id");
        cJSON_DeleteItemFromObject(c, "trace_id");
        t = cJSON_PrintUnformatted(c);
        cJSON_Delete(c);
        return t;
}

Test(idem, retries_answer_without_running_again)
{
        cJSON *r1, *r2;
        const cJSON *a, *b;
        char *t1, *t2;

        open_daemon();

        /* exec: the retry is the first call's execution, byte for byte */
        r1 = call(tok_a, "exec",
                  "{\"session\": \"s\", \"command\": \"echo run $$ $(date +%s%N)\", "
                  "\"idempotency_key\": \"req-1\"}");
        r2 = call(tok_a, "exec",
                  "{\"idempotency_key\": \"req-1\", \"command\": \"echo run $$ $(date +%s%N)\", "
                  "\"session\": \"s\"}"); /* same request, members in another order */
        a = ok(r1);
        b = ok(r2);
        cr_assert_str_eq(apic_str(a, "execution_id"), apic_str(b, "execution_id"));
        cr_assert_str_eq(apic_str(a, "stdout"), apic_str(b, "stdout"));
        cr_assert_eq(count_runs("s", "echo run $$ $(date +%s%N)"), 1, "the retry ran nothing");
        cJSON_Delete(r1);
        cJSON_Delete(r2);

        /* the same key with a different request: conflict, and nothing runs */
        expect_code(call(tok_a, "exec",
                         "{\"session\": \"s\", \"command\": \"echo other\", \"idempotency_key\": \"req-1\"}"),
                    "conflict");
        cr_assert_eq(count_runs("s", "echo other"), 0);
        /* another session is another request too */
        expect_code(call(tok_a, "exec",
                         "{\"session\": \"s2\", \"command\": \"echo run $$ $(date +%s%N)\", "
                         "\"idempotency_key\": \"req-1\"}"),
                    "conflict");
        /* keys are per user: bob's req-1 is his own */
        r1 = call(tok_b, "exec", "{\"session\": \"s\", \"command\": \"echo bob\", \"idempotency_key\": \"req-1\"}");
        cr_assert_str_eq(apic_str(ok(r1), "stdout"), "bob\n");
        cJSON_Delete(r1);
        /* and per method: write_file may use req-1 as well */
        r1 = call(tok_a, "write_file",
                  "{\"session\": \"s\", \"path\": \"f.txt\", \"content\": \"one\", "
                  "\"idempotency_key\": \"req-1\"}");
        r2 = call(tok_a, "write_file",
                  "{\"session\": \"s\", \"path\": \"f.txt\", \"content\": \"one\", "
                  "\"idempotency_key\": \"req-1\"}");
        t1 = result_text(ok(r1));
        t2 = result_text(ok(r2));
        cr_assert_str_eq(t1, t2);
        free(t1);
        free(t2);
        cJSON_Delete(r1);
        cJSON_Delete(r2);
        expect_code(call(tok_a, "write_file",
                         "{\"session\": \"s\", \"path\": \"f.txt\", \"content\": \"two\", "
                         "\"idempotency_key\": \"req-1\"}"),
                    "conflict");
        r1 = call(tok_a, "read_file", "{\"session\": \"s\", \"path\": \"f.txt\"}");
        cr_assert_str_eq(apic_str(ok(r1), "content"), "one", "the conflicting write did not happen");
        cJSON_Delete(r1);

        /* keys are checked: charset, length, type, and only where they mean something */
        expect_code(call(tok_a, "exec", "{\"session\": \"s\", \"command\": \"true\", \"idempotency_key\": \"a b\"}"),
                    "invalid");
        expect_code(call(tok_a, "exec", "{\"session\": \"s\", \"command\": \"true\", \"idempotency_key\": \"\"}"),
                    "invalid");
        {
                char params[512], key[200];
                memset(key, 'k', 129);
                key[129] = '\0';
                snprintf(params, sizeof(params),
                         "{\"session\": \"s\", \"command\": \"true\", \"idempotency_key\": \"%s\"}", key);
                expect_code(call(tok_a, "exec", params), "invalid");
        }
        expect_code(call(tok_a, "exec", "{\"session\": \"s\", \"command\": \"true\", \"idempotency_key\": 7}"),
                    "bad_request");
        expect_code(call(tok_a, "read_file", "{\"session\": \"s\", \"path\": \"f.txt\", \"idempotency_key\": \"k\"}"),
                    "invalid");
        /* a call that fails before running leaves no key: the retry runs */
        expect_code(call(tok_a, "exec",
                         "{\"session\": \"s\", \"command\": \"true\", \"timeout_seconds\": -1, "
                         "\"idempotency_key\": \"bad-first\"}"),
                    "invalid");

        /* the per-user cap (5 here): alice holds req-1 twice (exec, write_file); 3 more fit */
        for (int i = 0; i < 3; i++) {
                char params[200];
                snprintf(params, sizeof(params),
                         "{\"session\": \"s\", \"path\": \"c%d\", \"content\": \"x\", \"idempotency_key\": \"cap-%d\"}",
                         i, i);
                r1 = call(tok_a, "write_file", params);
                ok(r1);
                cJSON_Delete(r1);
        }
        expect_code(call(tok_a, "write_file",
                         "{\"session\": \"s\", \"path\": \"c9\", \"content\": \"x\", "
                         "\"idempotency_key\": \"cap-9\"}"),
                    "quota_exceeded");
        /* a retry of a key already held still answers at the cap, and calls without a key still run */
        r1 = call(tok_a, "write_file",
                  "{\"session\": \"s\", \"path\": \"c0\", \"content\": \"x\", "
                  "\"idempotency_key\": \"cap-0\"}");
        ok(r1);
        cJSON_Delete(r1);
        r1 = call(tok_a, "write_file", "{\"session\": \"s\", \"path\": \"c9\", \"content\": \"x\"}");
        ok(r1);
        cJSON_Delete(r1);

        /* past the window (pruned as --gc does) the key is free again: a new execution */
        cr_assert_gt(store_idem_prune(d->store, sbx_wall_ms() + (int64_t)cfg.idempotency_window_s * 1000 + 1, false),
                     0);
        r1 = call(tok_a, "exec",
                  "{\"session\": \"s\", \"command\": \"echo run $$ $(date +%s%N)\", "
                  "\"idempotency_key\": \"req-1\"}");
        ok(r1);
        cJSON_Delete(r1);
        cr_assert_eq(count_runs("s", "echo run $$ $(date +%s%N)"), 2);
        close_daemon();
}

struct racer {
        const char *params;
        cJSON *reply;
};

static void *race(void *p)
{
        struct racer *r = p;
        r->reply = call(tok_a, "exec", r->params);
        return NULL;
}

Test(idem, concurrent_duplicates_and_a_retry_while_running)
{
        struct racer racers[3];
        pthread_t th[3];
        const char *params =
                "{\"session\": \"s\", \"command\": \"sleep 2; echo raced\", \"idempotency_key\": \"race\"}";
        cJSON *r1, *r2;
        char id[64];

        open_daemon();
        /* the session exists first, so the three race on the key, not on creating it */
        r1 = call(tok_a, "exec", "{\"session\": \"s\", \"command\": \"true\"}");
        ok(r1);
        cJSON_Delete(r1);
        for (int i = 0; i < 3; i++) {
                racers[i] = (struct racer){.params = params};
                cr_assert_eq(pthread_create(&th[i], NULL, race, &racers[i]), 0);
        }
        for (int i = 0; i < 3; i++)
                pthread_join(th[i], NULL);
        for (int i = 0; i < 3; i++) {
                const cJSON *res = ok(racers[i].reply);
                cr_assert_str_eq(apic_str(res, "stdout"), "raced\n");
                cr_assert_str_eq(apic_str(res, "execution_id"), apic_str(ok(racers[0].reply), "execution_id"));
        }
        for (int i = 0; i < 3; i++)
                cJSON_Delete(racers[i].reply);
        cr_assert_eq(count_runs("s", "sleep 2; echo raced"), 1, "three concurrent duplicates ran once");

        /* background: a retry while it still runs gets its id and state, and starts nothing */
        r1 = call(tok_a, "exec",
                  "{\"session\": \"s\", \"command\": \"sleep 3; echo bg\", \"background\": true, "
                  "\"idempotency_key\": \"bg\"}");
        r2 = call(tok_a, "exec",
                  "{\"session\": \"s\", \"command\": \"sleep 3; echo bg\", \"background\": true, "
                  "\"idempotency_key\": \"bg\"}");
        snprintf(id, sizeof(id), "%s", apic_str(ok(r1), "execution_id"));
        cr_assert_str_eq(apic_str(ok(r2), "execution_id"), id);
        cr_assert(strcmp(apic_str(ok(r2), "state"), "pending") == 0 ||
                          strcmp(apic_str(ok(r2), "state"), "running") == 0,
                  "still running: %s", apic_str(ok(r2), "state"));
        cJSON_Delete(r1);
        cJSON_Delete(r2);
        cr_assert_eq(count_runs("s", "sleep 3; echo bg"), 1);

        /* wait: true is the longest wait: it returns the end */
        {
                char params2[160];
                snprintf(params2, sizeof(params2), "{\"session\": \"s\", \"execution_id\": \"%s\", \"wait\": true}",
                         id);
                r1 = call(tok_a, "get_execution", params2);
                cr_assert_str_eq(apic_str(ok(r1), "state"), "completed");
                cr_assert_str_eq(apic_str(ok(r1), "stdout"), "bg\n");
                cJSON_Delete(r1);
                snprintf(params2, sizeof(params2), "{\"session\": \"s\", \"execution_id\": \"%s\", \"wait\": false}",
                         id);
                r1 = call(tok_a, "get_execution", params2);
                ok(r1);
                cJSON_Delete(r1);
                snprintf(params2, sizeof(params2), "{\"session\": \"s\", \"execution_id\": \"%s\", \"wait\": \"x\"}",
                         id);
                expect_code(call(tok_a, "get_execution", params2), "bad_request");
                snprintf(params2, sizeof(params2), "{\"session\": \"s\", \"execution_id\": \"%s\", \"wait\": 61}", id);
                expect_code(call(tok_a, "get_execution", params2), "invalid");
        }
        close_daemon();
}

/* Whether list_executions {completed_within_ms: within} lists done and running. */
static void listed_within(const char *within, const char *done, const char *running, bool *ret_done, bool *ret_running)
{
        char params[128];
        const cJSON *it;
        cJSON *r;

        *ret_done = *ret_running = false;
        snprintf(params, sizeof(params), "{\"session\": \"s\", \"completed_within_ms\": %s}", within);
        r = call(tok_a, "list_executions", params);
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(ok(r), "executions")) {
                *ret_done |= strcmp(apic_str(it, "execution_id"), done) == 0;
                *ret_running |= strcmp(apic_str(it, "execution_id"), running) == 0;
        }
        cJSON_Delete(r);
}

/* The window is wall time, the clock an execution's end is recorded in.
 * Issue 24: it was taken from CLOCK_MONOTONIC, the host's uptime: on a host
 * up for less than the window the cutoff went negative, which means "no
 * filter", and the running one was listed; on any other host the cutoff
 * was in 1970, and every execution that ever ended was "recent". The
 * largest window (3650 days) and a window of 0 show both on any host. */
Test(idem, completed_within_ms)
{
        cJSON *r;
        char running[64], done[64], params[160];
        bool saw_done, saw_running;
        int64_t ended_at;

        open_daemon();
        r = call(tok_a, "exec", "{\"session\": \"s\", \"command\": \"echo quick\"}");
        snprintf(done, sizeof(done), "%s", apic_str(ok(r), "execution_id"));
        cJSON_Delete(r);
        r = call(tok_a, "exec", "{\"session\": \"s\", \"command\": \"sleep 60\", \"background\": true}");
        snprintf(running, sizeof(running), "%s", apic_str(ok(r), "execution_id"));
        cJSON_Delete(r);

        listed_within("600000", done, running, &saw_done, &saw_running);
        cr_assert(saw_done, "a recently completed execution is listed");
        cr_assert_not(saw_running, "a running one is not");
        listed_within("315360000000", done, running, &saw_done, &saw_running);
        cr_assert(saw_done, "within 3650 days: the completed one is listed");
        cr_assert_not(saw_running, "within 3650 days: a running one is not (the window is longer than the uptime)");

        /* a window of 0 once the wall clock has passed its end: no longer recent */
        snprintf(params, sizeof(params), "{\"session\": \"s\", \"execution_id\": \"%s\"}", done);
        r = call(tok_a, "get_execution", params);
        cr_assert_str_eq(apic_str(ok(r), "state"), "completed");
        ended_at = (int64_t)cJSON_GetObjectItem(ok(r), "created_at")->valuedouble +
                   (int64_t)cJSON_GetObjectItem(ok(r), "duration_ms")->valuedouble;
        cJSON_Delete(r);
        cr_assert(TESTENV_WAIT_UNTIL(sbx_wall_ms() > ended_at, 10000), "the wall clock passed %lld",
                  (long long)ended_at);
        listed_within("0", done, running, &saw_done, &saw_running);
        cr_assert_not(saw_done, "within 0 ms: what ended before now is not listed");
        cr_assert_not(saw_running);

        /* without the filter the running one is there */
        cr_assert_eq(count_runs("s", "sleep 60"), 1);
        expect_code(call(tok_a, "list_executions", "{\"session\": \"s\", \"completed_within_ms\": -5}"), "invalid");
        snprintf(params, sizeof(params), "{\"session\": \"s\", \"execution_id\": \"%s\", \"force\": true}", running);
        r = call(tok_a, "cancel_execution", params);
        cJSON_Delete(r);
        close_daemon();
}

/* The daemon is SIGKILLed in the middle (a child process serves the
 * sockets), then started again: the keys are still there, and the retry
 * answers from the first call's execution. */
Test(idem, retry_after_a_daemon_restart)
{
        cJSON *r1, *r2;
        char id[64], *w1, *w2, ready;
        int pipefd[2];
        pid_t pid;

        open_daemon(); /* the tokens */
        close_daemon();
        cr_assert_eq(pipe(pipefd), 0);
        pid = fork();
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
                close(pipefd[0]);
                open_again();
                (void)!write(pipefd[1], "r", 1);
                for (;;)
                        pause();
        }
        close(pipefd[1]);
        cr_assert_eq(read(pipefd[0], &ready, 1), 1, "the child daemon came up");
        close(pipefd[0]);

        r1 = call(tok_a, "exec",
                  "{\"session\": \"s\", \"command\": \"sleep 3; echo survived\", \"background\": true, "
                  "\"idempotency_key\": \"restart-exec\"}");
        snprintf(id, sizeof(id), "%s", apic_str(ok(r1), "execution_id"));
        cJSON_Delete(r1);
        r1 = call(tok_a, "write_file",
                  "{\"session\": \"s\", \"path\": \"r.txt\", \"content\": \"first\", "
                  "\"idempotency_key\": \"restart-write\"}");
        w1 = result_text(ok(r1));
        cJSON_Delete(r1);

        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        open_again();

        r2 = call(tok_a, "exec",
                  "{\"session\": \"s\", \"command\": \"sleep 3; echo survived\", \"background\": true, "
                  "\"idempotency_key\": \"restart-exec\"}");
        cr_assert_str_eq(apic_str(ok(r2), "execution_id"), id, "the key outlived the daemon");
        cJSON_Delete(r2);
        cr_assert_eq(count_runs("s", "sleep 3; echo survived"), 1, "the retry after the restart ran nothing");
        {
                /* the execution it names is the first one, followed to its end:
                 * completed where the runner kept it through the restart,
                 * else failed with daemon_restarted — never run a second time */
                char params[160];
                const char *state;
                snprintf(params, sizeof(params), "{\"session\": \"s\", \"execution_id\": \"%s\", \"wait\": true}", id);
                r2 = call(tok_a, "get_execution", params);
                state = apic_str(ok(r2), "state");
                cr_assert(strcmp(state, "completed") == 0 ||
                                  (strcmp(state, "failed") == 0 &&
                                   strcmp(apic_str(ok(r2), "cause"), "daemon_restarted") == 0),
                          "%s", cJSON_PrintUnformatted(r2));
                cJSON_Delete(r2);
        }
        r2 = call(tok_a, "write_file",
                  "{\"session\": \"s\", \"path\": \"r.txt\", \"content\": \"first\", "
                  "\"idempotency_key\": \"restart-write\"}");
        w2 = result_text(ok(r2));
        cr_assert_str_eq(w1, w2);
        cJSON_Delete(r2);
        free(w1);
        free(w2);
        expect_code(call(tok_a, "write_file",
                         "{\"session\": \"s\", \"path\": \"r.txt\", \"content\": \"second\", "
                         "\"idempotency_key\": \"restart-write\"}"),
                    "conflict");
        close_daemon();
}
