/* Integration tests of pause and resume (issue 28) against the real
 * dockerd, its cgroup freezer and the python image: an idle session is
 * paused after pause_after and keeps its interpreter state while using no
 * CPU; any request resumes a paused session; a paused session stays paused
 * across a daemon SIGKILL and restart, then resumes with its state;
 * limits.paused_sessions stops the least recently used paused session, whose
 * context then reports state_lost stopped_while_paused; a pause of a
 * session the caller does not have is refused. Every call goes through the
 * daemon's real API socket. Ports 31500-31799. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <inttypes.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/cells.h"
#include "sandboxd/daemon.h"
#include "sandboxd/engine.h"
#include "sandboxd/fronts.h"
#include "sandboxd/quota.h"
#include "sandboxd/service.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
#include "testenv.h"

TestSuite(pause, .timeout = 900);

static struct sbx_config cfg;
static struct daemon *d;
static char tok_a[TOKEN_LEN + 1], tok_b[TOKEN_LEN + 1];

/* Set before open_daemon(true): the daemon's config is read-only once it runs. */
static int max_paused = 64;
static int64_t mem_floor;

static void open_daemon(bool fresh)
{
        char dir[SBX_PATH_MAX];
        struct daemon_options opts = {.extra_labels = fixture_labels(), .sockets = true};
        struct sbx_error err = {0};

        if (fresh) {
                fixture_config(&cfg);
                cfg.port_range_lo = 31500;
                cfg.port_range_hi = 31799;
                snprintf(cfg.image, sizeof(cfg.image), "%s", TESTENV_PYTHON_IMAGE);
                cfg.memory_bytes = 768 << 20; /* a kernel */
                cfg.pids_limit = 256;
                cfg.pool_size = 0;
                cfg.monitor_interval_ms = 200;
                cfg.runner_heartbeat_ms = 200; /* a frozen runner would be "lost" after 600 ms if judged */
                cfg.pause_after_s = 0;         /* each test sets its own */
                cfg.pause_min_mem_available_bytes = mem_floor;
                cfg.max_paused_sessions = max_paused;
                snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
                snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/run/api.sock", dirname(dir));
                snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/run/admin.sock", dir);
        }
        (void)testenv_docker();
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        if (fresh) {
                cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_AGENT, tok_a, NULL, &err), 0, "%s", err.msg);
                cr_assert_eq(token_create(d->store, "bob", TOKEN_ROLE_AGENT, tok_b, NULL, &err), 0, "%s", err.msg);
        }
}

static void close_daemon(void)
{
        daemon_close(d);
        d = NULL;
}

static void teardown(void)
{
        max_paused = 64;
        mem_floor = 0;
        close_daemon();
        testenv_cleanup();
}

static cJSON *call(const char *tok, const char *method, const char *session, const char *code)
{
        cJSON *p = cJSON_CreateObject();

        cJSON_AddStringToObject(p, "session", session);
        if (code)
                cJSON_AddStringToObject(p, "code", code);
        return apic_call(cfg.api_socket, tok, method, p);
}

/* run_cell, asserting it succeeded; the whole reply. */
static cJSON *cell(const char *session, const char *code)
{
        cJSON *r = call(tok_a, "run_cell", session, code);
        cr_assert_not_null(apic_result(r), "run_cell %s: %s", code, cJSON_PrintUnformatted(r));
        return r;
}

static const char *result_text(const cJSON *res)
{
        const cJSON *o;
        cJSON_ArrayForEach(o, cJSON_GetObjectItem(res, "outputs")) {
                if (strcmp(apic_str(o, "type"), "execute_result") == 0)
                        return apic_str(cJSON_GetObjectItem(o, "data"), "text/plain");
        }
        return NULL;
}

static const char *lost_cause(const cJSON *res)
{
        const cJSON *l = cJSON_GetObjectItem(res, "state_lost");
        return l ? apic_str(l, "cause") : NULL;
}

/* x still 1, in the same generation, nothing lost. */
static void assert_x_is_1(const char *session)
{
        cJSON *r = cell(session, "x");
        const cJSON *res = apic_result(r);
        cr_assert_str_eq(result_text(res) ?: "(none)", "1", "%s", cJSON_PrintUnformatted(r));
        cr_assert_null(cJSON_GetObjectItem(res, "state_lost"), "%s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(res, "generation"), 1);
        cJSON_Delete(r);
}

static enum session_state state_of(const char *user, const char *session)
{
        struct session_info info;
        enum session_state st;

        if (session_get_info(d->sessions, user, session, &info) < 0)
                return (enum session_state) - 1;
        st = info.state;
        session_info_done(&info);
        return st;
}

static void engine_status(const char *id, char ret[16])
{
        struct engine_container_info info;
        cr_assert_eq(engine_inspect(testenv_engine(), id, &info, NULL), 0);
        snprintf(ret, 16, "%s", info.status);
}

/* The container's cgroup CPU time in ns: the cgroup v1 cpuacct file (this
 * host), else the engine's stats. */
static uint64_t cpu_ns(const char *id)
{
        char path[256];
        unsigned long long v = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/sys/fs/cgroup/cpuacct/docker/%s/cpuacct.usage", id);
        f = fopen(path, "re");
        if (f) {
                cr_assert_eq(fscanf(f, "%llu", &v), 1);
                fclose(f);
                return v;
        }
        struct engine_stats st;
        cr_assert_eq(engine_stats(testenv_engine(), id, &st, NULL), 0, "no cgroup file and no stats for %s", id);
        return st.cpu_total_ns;
}

static int audit_count(const char *action, const char *session)
{
        struct store_audit_row *rows = NULL;
        size_t n = 0;
        int k = 0;

        cr_assert_eq(store_audit_list(d->store, "alice", session, 500, &rows, &n), 0);
        for (size_t i = 0; i < n; i++)
                k += strcmp(rows[i].action, action) == 0;
        store_audit_rows_free(rows, n);
        return k;
}

/* How many events of type alice's log holds. */
static int count_events(const char *type)
{
        cJSON *ev = apic_call(cfg.api_socket, tok_a, "events", apic_json("{\"since\": 0, \"limit\": 1000}"));
        const cJSON *x;
        int k = 0;

        cJSON_ArrayForEach(x, cJSON_GetObjectItem(apic_result(ev), "events"))
                k += strcmp(apic_str(x, "type"), type) == 0;
        cJSON_Delete(ev);
        return k;
}

/* The context keeps a thread that wakes every 5 ms: the container uses CPU
 * as long as it is not frozen. */
static const char spinner[] =
        "import threading, time\n"
        "def _tick():\n"
        "    while True:\n"
        "        sum(range(2000)); time.sleep(0.005)\n"
        "threading.Thread(target=_tick, daemon=True).start()\n"
        "x = 1\n";

Test(pause, an_idle_session_is_paused_keeps_x_and_uses_no_cpu, .fini = teardown)
{
        char cid[65], status[16];
        uint64_t a, b;

        open_daemon(true); /* pause_after 0: not yet, first show that it uses CPU */
        cJSON_Delete(cell("s1", spinner));
        fixture_container_of(d, "alice", "s1", cid);
        a = cpu_ns(cid);
        sbx_sleep_ms(1000); /* time passing on purpose: the running spinner must use CPU in it */
        b = cpu_ns(cid);
        cr_assert_gt(b, a, "the spinner used no CPU while running (%" PRIu64 " -> %" PRIu64 ")", a, b);

        /* the one setting changed in a running daemon (session_pause_idle reads it atomically) */
        __atomic_store_n(&d->cfg.pause_after_s, 1, __ATOMIC_SEQ_CST);
        cr_assert(TESTENV_WAIT_UNTIL(state_of("alice", "s1") == SESSION_PAUSED, 60000),
                  "the idle session was not paused (state %s)", session_state_to_string(state_of("alice", "s1")));
        engine_status(cid, status);
        cr_assert_str_eq(status, "paused");
        /* the row is written just after the state changes, on the monitor's thread */
        cr_assert(TESTENV_WAIT_UNTIL(audit_count("session.paused", "s1") == 1, 30000));
        a = cpu_ns(cid);
        sbx_sleep_ms(1500); /* time passing on purpose: the frozen spinner must use no CPU in it */
        b = cpu_ns(cid);
        cr_assert_eq(b, a, "a paused session used CPU: %" PRIu64 " -> %" PRIu64 " ns", a, b);

        __atomic_store_n(&d->cfg.pause_after_s, 0, __ATOMIC_SEQ_CST); /* no second pause under the check */
        assert_x_is_1("s1");
        cr_assert_eq(state_of("alice", "s1"), SESSION_RUNNING);
        engine_status(cid, status);
        cr_assert_str_eq(status, "running");
        cr_assert_eq(audit_count("session.resumed", "s1"), 1);
}

Test(pause, any_request_resumes_a_paused_session, .fini = teardown)
{
        cJSON *r;
        char cid[65], status[16];
        struct session_pause_stats st;

        open_daemon(true);
        cJSON_Delete(cell("s2", "x = 1"));
        fixture_container_of(d, "alice", "s2", cid);
        r = call(tok_a, "pause_session", "s2", NULL);
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(apic_result(r), "state"), "paused");
        cr_assert(apic_num(apic_result(r), "paused_at") > 0);
        cJSON_Delete(r);
        engine_status(cid, status);
        cr_assert_str_eq(status, "paused");
        /* a second pause is harmless */
        r = call(tok_a, "pause_session", "s2", NULL);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(apic_result(r), "already_paused")), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        /* listing does not resume it; the session shows as paused */
        r = call(tok_a, "list_contexts", "s2", NULL);
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        cr_assert_eq(state_of("alice", "s2"), SESSION_PAUSED);
        r = apic_call(cfg.api_socket, tok_a, "list_sessions", NULL);
        cr_assert_str_eq(apic_str(cJSON_GetArrayItem(cJSON_GetObjectItem(apic_result(r), "sessions"), 0), "state"),
                         "paused", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        /* a plain command resumes it */
        r = apic_call(cfg.api_socket, tok_a, "exec", apic_json("{\"session\": \"s2\", \"command\": \"echo thawed\"}"));
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "thawed\n", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        cr_assert_eq(state_of("alice", "s2"), SESSION_RUNNING);
        engine_status(cid, status);
        cr_assert_str_eq(status, "running");
        assert_x_is_1("s2");

        /* and so does resume_session, which says whether it was paused */
        cJSON_Delete(call(tok_a, "pause_session", "s2", NULL));
        r = call(tok_a, "resume_session", "s2", NULL);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(apic_result(r), "resumed")), "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(apic_result(r), "state"), "running");
        cJSON_Delete(r);
        session_pause_stats(d->sessions, &st);
        cr_assert_eq(st.pauses, 2);
        cr_assert_eq(st.resumes, 2);
        cr_assert_eq(audit_count("session.paused", "s2"), 2);
        cr_assert_eq(audit_count("session.resumed", "s2"), 2);

        /* the operator's side: sandboxctl pauses, lists paused sessions, counts, resumes */
        char *out = NULL;
        cr_assert_eq(fixture_sandboxctl(SANDBOXD_BINARY_DIR, cfg.admin_socket, "pause alice s2", &out), 0, "%s", out);
        cr_assert_not_null(strstr(out, "alice:s2 is paused"), "%s", out);
        free(out);
        cr_assert_eq(fixture_sandboxctl(SANDBOXD_BINARY_DIR, cfg.admin_socket, "sessions --state paused", &out), 0);
        cr_assert_not_null(strstr(out, "s2"), "%s", out);
        cr_assert_not_null(strstr(out, "paused since"), "%s", out);
        free(out);
        cr_assert_eq(fixture_sandboxctl(SANDBOXD_BINARY_DIR, cfg.admin_socket, "metrics", &out), 0);
        cr_assert_not_null(strstr(out, "sandboxd_session_pauses_total 3\n"), "%s", out);
        cr_assert_not_null(strstr(out, "sandboxd_sessions{state=\"paused\"} 1\n"), "%s", out);
        free(out);
        cr_assert_eq(fixture_sandboxctl(SANDBOXD_BINARY_DIR, cfg.admin_socket, "resume alice s2", &out), 0, "%s", out);
        cr_assert_not_null(strstr(out, "alice:s2 is running (resumed)"), "%s", out);
        free(out);
        cr_assert_eq(state_of("alice", "s2"), SESSION_RUNNING);
        /* and each of them is an event of the user's (written by the event log's own thread) */
        cr_assert(TESTENV_WAIT_UNTIL(count_events("session.paused") == 3 && count_events("session.resumed") == 3,
                                     30000),
                  "events: %d paused, %d resumed", count_events("session.paused"), count_events("session.resumed"));
}

Test(pause, pause_is_refused_for_unknown_sessions_and_while_a_cell_runs, .fini = teardown)
{
        cJSON *r;
        int api;

        open_daemon(true);
        cJSON_Delete(cell("s3", "x = 1"));
        r = call(tok_a, "pause_session", "nope", NULL);
        cr_assert_str_eq(apic_code(r) ?: "(ok)", "not_found", "%s", cJSON_PrintUnformatted(r));
        cr_assert_not_null(strstr(cJSON_PrintUnformatted(r), "no session nope"));
        cJSON_Delete(r);
        /* bob's token reaches bob's sessions only: alice's s3 is not his */
        r = call(tok_b, "pause_session", "s3", NULL);
        cr_assert_str_eq(apic_code(r) ?: "(ok)", "not_found", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_b, "resume_session", "s3", NULL);
        cr_assert_str_eq(apic_code(r) ?: "(ok)", "not_found", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        cr_assert_eq(state_of("alice", "s3"), SESSION_RUNNING);
        cr_assert_eq(state_of("bob", "s3"), (enum session_state) - 1, "bob got a session by asking");

        /* a running cell would be frozen mid-way: busy */
        api = apic_connect(cfg.api_socket);
        apic_request(api, 1, tok_a, "run_cell",
                     apic_json("{\"session\": \"s3\", \"code\": \"import time\\ntime.sleep(3)\\nx\"}"));
        cr_assert(TESTENV_WAIT_UNTIL(cells_session_busy(d->cells, "alice", "s3"), 30000), "the cell did not start");
        r = call(tok_a, "pause_session", "s3", NULL);
        cr_assert_str_eq(apic_code(r) ?: "(ok)", "busy", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        cJSON_Delete(apic_reply(api, 60000, NULL));
        close(api);
        cr_assert_eq(state_of("alice", "s3"), SESSION_RUNNING);
}

/* The child: a daemon that sets x and pauses the session, says so, and
 * waits to be killed. */
static void child_daemon(int fd)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .sockets = true};
        struct sbx_error err = {0};
        struct daemon *cd;
        cJSON *r;

        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test, whatever fails there */
        if (fronts_open(&cfg, &opts, &cd, &err) < 0)
                _exit(1);
        r = call(tok_a, "run_cell", "s4", "x = 1");
        if (!apic_result(r))
                _exit(2);
        cJSON_Delete(r);
        r = call(tok_a, "pause_session", "s4", NULL);
        if (!apic_result(r))
                _exit(3);
        cJSON_Delete(r);
        (void)!write(fd, "k", 1);
        pause();
        _exit(0);
}

Test(pause, a_paused_session_survives_a_sigkilled_daemon_and_resumes, .fini = teardown)
{
        int pipefd[2], status_code;
        char k, cid[65], status[16];
        pid_t pid;

        open_daemon(true); /* the tokens, then the child serves the same data */
        close_daemon();
        cr_assert_eq(pipe(pipefd), 0);
        pid = fork();
        cr_assert_geq(pid, 0, "fork: %m");
        if (pid == 0)
                child_daemon(pipefd[1]);
        close(pipefd[1]);
        cr_assert_eq(read(pipefd[0], &k, 1), 1, "the child did not pause its session");
        kill(pid, SIGKILL);
        waitpid(pid, &status_code, 0);
        close(pipefd[0]);

        open_daemon(false);
        cr_assert_eq(state_of("alice", "s4"), SESSION_PAUSED, "after the restart: %s",
                     session_state_to_string(state_of("alice", "s4")));
        fixture_container_of(d, "alice", "s4", cid);
        engine_status(cid, status);
        cr_assert_str_eq(status, "paused");
        /* the first request resumes it, and the kernel the runner kept is adopted */
        assert_x_is_1("s4");
        cr_assert_eq(state_of("alice", "s4"), SESSION_RUNNING);
        engine_status(cid, status);
        cr_assert_str_eq(status, "running");
}

Test(pause, past_max_paused_sessions_the_oldest_is_stopped_and_says_so, .fini = teardown)
{
        cJSON *r;
        const cJSON *c;
        struct session_info info;

        max_paused = 1;
        open_daemon(true);
        cJSON_Delete(cell("old", "x = 1"));
        cJSON_Delete(cell("new", "x = 1"));
        cJSON_Delete(call(tok_a, "pause_session", "old", NULL));
        cr_assert_eq(state_of("alice", "old"), SESSION_PAUSED);
        r = call(tok_a, "pause_session", "new", NULL);
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        /* the least recently used paused session gave way, its workspace kept */
        cr_assert_eq(state_of("alice", "new"), SESSION_PAUSED);
        cr_assert_eq(state_of("alice", "old"), SESSION_STOPPED);
        cr_assert_eq(session_get_info(d->sessions, "alice", "old", &info), 0);
        cr_assert_str_eq(info.error_cause, "stopped_while_paused");
        cr_assert_not_null(strstr(info.last_error, "limits.paused_sessions=1"), "%s", info.last_error);
        session_info_done(&info);
        cr_assert_eq(audit_count("session.pause_evicted", "old"), 1);

        /* list_contexts says so before the next cell, and the cell says so too */
        r = call(tok_a, "list_contexts", "old", NULL);
        c = cJSON_GetArrayItem(cJSON_GetObjectItem(apic_result(r), "contexts"), 0);
        cr_assert_not_null(c, "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(cJSON_GetObjectItem(c, "pending_state_lost"), "cause") ?: "(none)",
                         "stopped_while_paused", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = cell("old", "'x' in dir()");
        cr_assert_str_eq(lost_cause(apic_result(r)) ?: "(none)", "stopped_while_paused", "%s",
                         cJSON_PrintUnformatted(r));
        cr_assert_str_eq(result_text(apic_result(r)) ?: "(none)", "False", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        /* the survivor kept its state */
        assert_x_is_1("new");

        /* idle_timeout counts from the last use, paused or not: a paused session past it is stopped */
        char cid[65];
        fixture_container_of(d, "alice", "new", cid);
        cJSON_Delete(call(tok_a, "pause_session", "new", NULL));
        cr_assert_eq(state_of("alice", "new"), SESSION_PAUSED);
        /* "old" runs again since its last cell: both are past it */
        cr_assert_eq(session_expire_idle(d->sessions, sbx_wall_ms() + (d->cfg.idle_timeout_s + 1) * 1000LL), 2);
        cr_assert_eq(state_of("alice", "new"), SESSION_STOPPED);
        struct engine_container_info ci;
        cr_assert_eq(engine_inspect(testenv_engine(), cid, &ci, NULL), -ENOENT, "the paused container was left behind");
}

Test(pause, per_user_caps_and_memory_pressure_stop_paused_sessions, .fini = teardown)
{
        struct sbx_error err = {0};
        struct session_info info;
        cJSON *r;

        open_daemon(true);
        /* alice's own cap, an override of the quota (bob keeps the default, 16) */
        cr_assert_eq(quota_set(d->quota, "alice", "max_paused_sessions_per_user", 1, &err), 0, "%s", err.msg);
        cJSON_Delete(cell("a1", "x = 1"));
        cJSON_Delete(cell("a2", "x = 1"));
        r = call(tok_b, "run_cell", "b1", "x = 1");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        cJSON_Delete(call(tok_b, "pause_session", "b1", NULL));
        cJSON_Delete(call(tok_a, "pause_session", "a1", NULL));
        cJSON_Delete(call(tok_a, "pause_session", "a2", NULL));
        /* alice's older one gave way; bob's, under his own cap, did not */
        cr_assert_eq(state_of("alice", "a1"), SESSION_STOPPED);
        cr_assert_eq(state_of("alice", "a2"), SESSION_PAUSED);
        cr_assert_eq(state_of("bob", "b1"), SESSION_PAUSED);
        cr_assert_eq(session_get_info(d->sessions, "alice", "a1", &info), 0);
        cr_assert_str_eq(info.error_cause, "stopped_while_paused");
        cr_assert_not_null(strstr(info.last_error, "max_paused_sessions_per_user=1"), "%s", info.last_error);
        session_info_done(&info);

        /* memory pressure: a floor no host reaches, so MemAvailable is below it */
        close_daemon(); /* the config is read-only while it runs: a restart takes the new floor */
        cfg.pause_min_mem_available_bytes = INT64_C(1) << 44;
        open_daemon(false);
        /* the monitor's first round or this call, whichever comes first */
        (void)session_enforce_paused(d->sessions);
        cr_assert(TESTENV_WAIT_UNTIL(state_of("alice", "a2") == SESSION_STOPPED &&
                                             state_of("bob", "b1") == SESSION_STOPPED,
                                     30000),
                  "a2 %s, b1 %s", session_state_to_string(state_of("alice", "a2")),
                  session_state_to_string(state_of("bob", "b1")));
        cr_assert_eq(state_of("alice", "a2"), SESSION_STOPPED);
        cr_assert_eq(state_of("bob", "b1"), SESSION_STOPPED);
        cr_assert_eq(session_get_info(d->sessions, "bob", "b1", &info), 0);
        cr_assert_str_eq(info.error_cause, "stopped_while_paused");
        cr_assert_not_null(strstr(info.last_error, "memory pressure"), "%s", info.last_error);
        session_info_done(&info);
        r = call(tok_b, "run_cell", "b1", "x");
        cr_assert_str_eq(lost_cause(apic_result(r)) ?: "(none)", "stopped_while_paused", "%s",
                         cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        struct session_pause_stats st;
        session_pause_stats(d->sessions, &st); /* counted since this daemon started */
        cr_assert_eq(st.evictions, 2);
}

/* GET / on 127.0.0.1:port, waiting up to 60 s for the answer; the HTTP
 * status or -1. */
static int http_get(int port)
{
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        struct timeval tv = {60, 0};
        char buf[512] = "";
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), status = -1;

        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
                const char *req = "GET / HTTP/1.0\r\nHost: localhost\r\n\r\n";
                (void)!write(fd, req, strlen(req));
                if (read(fd, buf, sizeof(buf) - 1) > 12)
                        sscanf(buf, "HTTP/%*s %d", &status);
        }
        close(fd);
        return status;
}

static int service_host_port(const char *session, const char *name)
{
        struct service_info *list = NULL;
        size_t n = 0;
        int port = 0;

        if (service_list(d->services, "alice", session, &list, &n) < 0)
                return 0;
        for (size_t i = 0; i < n; i++)
                if (strcmp(list[i].name, name) == 0 && list[i].n_ports > 0)
                        port = list[i].ports[0].host_port;
        free(list);
        return port;
}

Test(pause, a_client_on_a_published_port_resumes_a_paused_session, .fini = teardown)
{
        struct service_info info;
        struct sbx_error err = {0};
        int port = 0;

        open_daemon(true);
        cr_assert_eq(service_start(d->services, "alice", "web", "http", "python3 -m http.server 8000", NULL, &info,
                                   &err),
                     0, "%s", err.msg);
        cr_assert(TESTENV_WAIT_UNTIL((port = service_host_port("web", "http")) > 0, 30000), "port never detected");
        cr_assert_eq(http_get(port), 200);
        cJSON_Delete(call(tok_a, "pause_session", "web", NULL));
        cr_assert_eq(state_of("alice", "web"), SESSION_PAUSED);
        /* the forward waits for the frozen runner; the gateway asks for a resume meanwhile */
        cr_assert_eq(http_get(port), 200);
        cr_assert(TESTENV_WAIT_UNTIL(state_of("alice", "web") == SESSION_RUNNING, 30000));
        /* the row is written just after the state changes, on the sbx-resume thread */
        cr_assert(TESTENV_WAIT_UNTIL(audit_count("session.resumed", "web") == 1, 30000));
}
