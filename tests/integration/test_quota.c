/* Integration tests of the per-user quotas (issue 12 item 3) against the
 * real dockerd: live sessions per user, concurrent executions per user, the
 * fair share of the global execution cap (another user is served while one
 * is at a cap), the fair share of limits.sessions (another user is served by
 * stopping an idle session of the user holding the most, never one in use),
 * services per session, spool bytes per session, and the per-user overrides
 * through the admin socket and sandboxctl. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "apiclient.h"

#include "fixture.h"
#include "sandboxd/exec.h"
#include "sandboxd/quota.h"
#include "sandboxd/service.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "testenv.h"

TestSuite(quota, .timeout = 300);

static struct sbx_config cfg;
static struct daemon *d;

static void open_daemon(void)
{
        d = fixture_open(&cfg, false);
}

static int session_up(const char *user, const char *session, struct sbx_error *err)
{
        struct session *s;
        int r = session_acquire(d->sessions, user, session, &s, err);
        if (r == 0)
                session_release(s);
        return r;
}

static int start(const char *user, const char *session, const char *command, char id[37], struct sbx_error *err)
{
        struct exec_request req = {
                .user = user, .session = session, .command = command, .timeout_s = 120, .actor = "test"};
        return exec_start(d->exec, &req, id, err);
}

static void start_ok(const char *user, const char *session, const char *command, char id[37])
{
        struct sbx_error err = {0};
        cr_assert_eq(start(user, session, command, id, &err), 0, "%s:%s %s: %s", user, session, command, err.msg);
}

static void busy_naming(const char *user, const char *session, const char *cap)
{
        struct sbx_error err = {0};
        char id[37];
        cr_assert_eq(start(user, session, "true", id, &err), -EBUSY, "%s:%s was not refused (%s)", user, session,
                     err.msg);
        cr_assert_not_null(strstr(err.msg, cap), "%s:%s refused without naming %s: %s", user, session, cap, err.msg);
}

static void served(const char *user, const char *session)
{
        struct exec_request req = {.user = user, .session = session, .command = "echo served", .actor = "test"};
        struct exec_result res;
        struct sbx_error err = {0};

        cr_assert_eq(exec_run(d->exec, &req, &res, &err), 0, "%s:%s was not served: %s", user, session, err.msg);
        cr_assert_eq(res.state, EXEC_COMPLETED);
        cr_assert_eq(res.stdout_head_len, 7);
        cr_assert_eq(memcmp(res.stdout_head, "served\n", 7), 0);
        exec_result_done(&res);
}

static void cancel_all(const char *user, char ids[][37], size_t n)
{
        for (size_t i = 0; i < n; i++) {
                struct exec_result res;
                (void)exec_cancel(d->exec, user, ids[i], true, NULL);
                for (int k = 0; k < 60; k++) {
                        cr_assert_eq(exec_status(d->exec, user, ids[i], -1, -1, 0, 1000, &res, NULL), 0);
                        bool done = exec_state_is_final(res.state);
                        exec_result_done(&res);
                        if (done)
                                break;
                }
        }
}

Test(quota, live_sessions_per_user)
{
        struct sbx_error err = {0};

        fixture_config(&cfg);
        cfg.max_sessions_per_user = 2;
        open_daemon();
        cr_assert_eq(session_up("alice", "s1", &err), 0, "%s", err.msg);
        cr_assert_eq(session_up("alice", "s2", &err), 0, "%s", err.msg);
        cr_assert_eq(session_up("alice", "s3", &err), -EUSERS);
        cr_assert_not_null(strstr(err.msg, "max_sessions_per_user=2"), "%s", err.msg);
        /* a known session of alice's is still hers to use */
        cr_assert_eq(session_up("alice", "s1", &err), 0, "%s", err.msg);
        /* another user is served meanwhile */
        cr_assert_eq(session_up("bob", "b1", &err), 0, "%s", err.msg);
        served("bob", "b1");

        /* a stopped session that comes back counts again */
        cr_assert_eq(session_destroy(d->sessions, "alice", "s2", false, &err), 0, "%s", err.msg);
        cr_assert_eq(session_up("alice", "s3", &err), 0, "%s", err.msg);
        cr_assert_eq(session_up("alice", "s2", &err), -EUSERS, "s2 came back past the cap");
        cr_assert_not_null(strstr(err.msg, "max_sessions_per_user"), "%s", err.msg);
        daemon_close(d);
}

Test(quota, executions_per_user_and_another_user_served)
{
        char ids[3][37];

        fixture_config(&cfg);
        cfg.max_exec_global = 10;
        cfg.max_exec_per_session = 5;
        cfg.max_exec_per_user = 3;
        open_daemon();
        /* across two sessions: the cap is the user's, not a session's */
        start_ok("alice", "a1", "sleep 120", ids[0]);
        start_ok("alice", "a1", "sleep 120", ids[1]);
        start_ok("alice", "a2", "sleep 120", ids[2]);
        busy_naming("alice", "a2", "max_exec_per_user=3");
        busy_naming("alice", "a3", "max_exec_per_user=3");
        served("bob", "b1");

        /* an ended execution gives its slot back at once */
        cancel_all("alice", ids, 1);
        start_ok("alice", "a2", "sleep 120", ids[0]);
        cancel_all("alice", ids, 3);
        daemon_close(d);
}

Test(quota, fair_share_of_the_global_cap)
{
        char a[4][37], b[2][37];

        fixture_config(&cfg);
        cfg.max_exec_global = 4;
        cfg.max_exec_per_session = 4;
        cfg.max_exec_per_user = 4;
        open_daemon();
        /* alone, alice may use the whole pool but one */
        start_ok("alice", "a1", "sleep 120", a[0]);
        start_ok("alice", "a1", "sleep 120", a[1]);
        start_ok("alice", "a1", "sleep 120", a[2]);
        /* bob takes the last slot; alice is past her share of 2 and is told so */
        start_ok("bob", "b1", "sleep 120", b[0]);
        busy_naming("alice", "a1", "fair share of limits.exec_global=4");
        busy_naming("bob", "b1", "limits.exec_global=4");

        /* as alice's end, bob gets up to his share, alice no more than hers */
        cancel_all("alice", a, 2);
        start_ok("bob", "b1", "sleep 120", b[1]);
        busy_naming("bob", "b1", "fair share");
        start_ok("alice", "a1", "sleep 120", a[3]);
        busy_naming("alice", "a1", "fair share");
        cancel_all("alice", &a[2], 2);
        cancel_all("bob", b, 2);
        daemon_close(d);
}

/* ---- the fair share of limits.sessions ---- */

/* `command` as user:session, asserting it completed; its stdout (malloc'd). */
static char *run_as(const char *user, const char *session, const char *command)
{
        struct exec_request req = {.user = user, .session = session, .command = command, .actor = "test"};
        struct exec_result res;
        struct sbx_error err = {0};
        char *out;

        cr_assert_eq(exec_run(d->exec, &req, &res, &err), 0, "%s:%s %s: %s", user, session, command, err.msg);
        cr_assert_eq(res.state, EXEC_COMPLETED, "%s:%s %s", user, session, command);
        out = strndup(res.stdout_head, res.stdout_head_len);
        exec_result_done(&res);
        return out;
}

static struct session_info info_of(const char *user, const char *session)
{
        struct session_info info;
        cr_assert_eq(session_get_info(d->sessions, user, session, &info), 0, "%s:%s unknown", user, session);
        session_info_done(&info);
        return info;
}

static void assert_running(const char *user, const char *session)
{
        struct session_info info = info_of(user, session);
        cr_assert_eq(info.state, SESSION_RUNNING, "%s:%s is %s (%s)", user, session,
                     session_state_to_string(info.state), info.last_error);
}

static bool stopped(const char *user, const char *session)
{
        return info_of(user, session).state == SESSION_STOPPED;
}

/* The fair share stops its victim off the requester's thread: the
 * eviction ends soon after the request it made room for was served. */
static void assert_evicted(const char *user, const char *session)
{
        cr_assert(TESTENV_WAIT_UNTIL(stopped(user, session), 60000), "%s:%s never gave way", user, session);
        struct session_info info = info_of(user, session);
        cr_assert_eq(info.state, SESSION_STOPPED, "%s:%s is %s", user, session, session_state_to_string(info.state));
        cr_assert_str_eq(info.error_cause, "evicted");
        cr_assert_not_null(strstr(info.last_error, "evicted: fair_share"), "%s", info.last_error);
        cr_assert_null(strstr(info.last_error, "bob"), "the evicted tenant learns who took its place: %s",
                       info.last_error);
        cr_assert_eq(fixture_count_containers(user, session), 0, "%s:%s still has a container", user, session);
}

Test(quota, fair_share_of_sessions_stops_the_least_recently_active_idle_one)
{
        struct store_audit_row *rows = NULL;
        struct sbx_error err = {0};
        int64_t audits = 0;
        size_t n = 0;
        char *out;

        fixture_config(&cfg);
        cfg.max_sessions = 4; /* max_sessions_per_user stays at its default, 100 */
        open_daemon();
        /* alice fills the host; a2 holds her file and is the least recently active */
        cr_assert_eq(session_up("alice", "a1", &err), 0, "%s", err.msg);
        free(run_as("alice", "a2", "echo kept > f"));
        cr_assert_eq(session_up("alice", "a3", &err), 0, "%s", err.msg);
        cr_assert_eq(session_up("alice", "a4", &err), 0, "%s", err.msg);
        cr_assert_eq(session_up("alice", "a1", &err), 0, "%s", err.msg); /* a1 active again: a2 is the oldest */

        /* bob is served: a2 gave way, alice's others run on */
        cr_assert_eq(session_up("bob", "b1", &err), 0, "bob was not served on a host full of idle sessions: %s",
                     err.msg);
        served("bob", "b1");
        assert_evicted("alice", "a2");
        assert_running("alice", "a1");
        assert_running("alice", "a3");
        assert_running("alice", "a4");
        cr_assert_eq(session_evictions(d->sessions), 1);
        cr_assert(TESTENV_WAIT_UNTIL(store_audit_count(d->store, "alice", "a2", "session.evicted", &audits) == 0 &&
                                             audits == 1,
                                     10000));
        cr_assert_eq(store_audit_count(d->store, "alice", "a2", "session.evicted", &audits), 0);
        cr_assert_eq(audits, 1);
        cr_assert_eq(store_audit_list(d->store, "alice", "a2", 100, &rows, &n), 0);
        cr_assert_gt(n, 0);
        cr_assert_str_eq(rows[n - 1].action, "session.evicted");
        cr_assert_not_null(rows[n - 1].detail);
        cr_assert_not_null(strstr(rows[n - 1].detail, "\"for_user\":\"bob\""), "%s", rows[n - 1].detail);
        store_audit_rows_free(rows, n);

        /* alice, holding three to bob's one, takes nothing back from him */
        cr_assert_eq(session_up("alice", "a2", &err), -EUSERS, "alice took bob's slot back");
        cr_assert_not_null(strstr(err.msg, "limits.sessions=4"), "%s", err.msg);
        cr_assert_eq(session_evictions(d->sessions), 1);
        assert_running("bob", "b1");

        /* with room again, a2's next request recreates it on the same workspace */
        cr_assert_eq(session_destroy(d->sessions, "bob", "b1", true, &err), 0, "%s", err.msg);
        out = run_as("alice", "a2", "cat f");
        cr_assert_str_eq(out, "kept\n", "the evicted session's workspace was not kept");
        free(out);
        assert_running("alice", "a2");
        cr_assert_str_eq(info_of("alice", "a2").error_cause, "");
        daemon_close(d);
}

/* A teardown notice that holds the victim's eviction until the requester
 * it made room for was served (or 60 s passed): on the requester's thread,
 * the request could not be served before the notice returned. */
struct held_eviction {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool served, held, served_while_held;
};

static void hold_eviction(const char *user, const char *session, const char *cid, const char *cause, void *ud)
{
        struct held_eviction *h = ud;
        struct timespec until;

        (void)user, (void)session, (void)cid;
        if (strcmp(cause, "evicted") != 0)
                return;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 60;
        pthread_mutex_lock(&h->lock);
        h->held = true;
        while (!h->served && pthread_cond_timedwait(&h->cond, &h->lock, &until) == 0)
                ;
        h->served_while_held = h->served;
        pthread_mutex_unlock(&h->lock);
}

Test(quota, fair_share_serves_the_request_while_the_victim_is_still_being_stopped)
{
        struct held_eviction h = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false, false};
        struct sbx_error err = {0};
        char *out;

        fixture_config(&cfg);
        cfg.max_sessions = 2;
        open_daemon();
        cr_assert_eq(session_register_teardown_notice(d->sessions, hold_eviction, &h), 0);
        free(run_as("alice", "a1", "echo kept > f"));
        cr_assert_eq(session_up("alice", "a2", &err), 0, "%s", err.msg);

        cr_assert_eq(session_up("bob", "b1", &err), 0, "%s", err.msg);
        pthread_mutex_lock(&h.lock);
        h.served = true;
        pthread_cond_broadcast(&h.cond);
        pthread_mutex_unlock(&h.lock);
        served("bob", "b1");
        assert_evicted("alice", "a1");
        cr_assert(h.held, "the eviction told no teardown notice");
        cr_assert(h.served_while_held, "bob was served only after alice's container was stopped");
        assert_running("alice", "a2");

        /* nothing of the evicted session is lost */
        cr_assert_eq(session_destroy(d->sessions, "bob", "b1", true, &err), 0, "%s", err.msg);
        out = run_as("alice", "a1", "cat f");
        cr_assert_str_eq(out, "kept\n", "the evicted session's workspace was not kept");
        free(out);
        daemon_close(d);
}

Test(quota, fair_share_of_sessions_stops_nothing_in_use)
{
        struct sbx_error err = {0};
        char ids[3][37];

        fixture_config(&cfg);
        cfg.max_sessions = 4;
        open_daemon();
        /* every session of alice's is in use: an execution, or a service */
        start_ok("alice", "a1", "sleep 120", ids[0]);
        start_ok("alice", "a2", "sleep 120", ids[1]);
        cr_assert_eq(service_start(d->services, "alice", "a3", "web", "sleep 1000", NULL, NULL, &err), 0, "%s",
                     err.msg);
        start_ok("alice", "a4", "sleep 120", ids[2]);
        for (size_t i = 0; i < 3; i++)
                cr_assert(TESTENV_WAIT_UNTIL(fixture_exec_running(d, "alice", ids[i]), 60000),
                          "execution %zu never ran", i);

        cr_assert_eq(session_up("bob", "b1", &err), -EUSERS, "bob was served by stopping a session in use");
        cr_assert_not_null(strstr(err.msg, "busy"), "%s", err.msg);
        cr_assert_not_null(strstr(err.msg, "limits.sessions=4"), "%s", err.msg);
        cr_assert_eq(session_evictions(d->sessions), 0);
        for (size_t i = 0; i < 3; i++)
                cr_assert(fixture_exec_running(d, "alice", ids[i]), "execution %zu was touched", i);
        assert_running("alice", "a1");
        assert_running("alice", "a3");
        /* bob's refused first request leaves no session behind */
        cr_assert_eq(session_get_info(d->sessions, "bob", "b1", &(struct session_info){0}), -ENOENT);

        /* the service stopped, a3 is idle (though a1 is older): it gives way, no execution is touched */
        cr_assert_eq(service_stop(d->services, "alice", "a3", "web", NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(session_up("bob", "b1", &err), 0, "%s", err.msg);
        assert_evicted("alice", "a3");
        for (size_t i = 0; i < 3; i++)
                cr_assert(fixture_exec_running(d, "alice", ids[i]), "execution %zu was touched", i);
        cancel_all("alice", ids, 3);
        daemon_close(d);
}

struct arrival {
        const char *user;
        int r;
        struct sbx_error err;
};

static void *arrive(void *ud)
{
        struct arrival *a = ud;
        a->r = session_up(a->user, "s", &a->err);
        return NULL;
}

Test(quota, fair_share_of_sessions_serves_two_users_arriving_at_once)
{
        struct arrival a[2] = {{.user = "bob"}, {.user = "carol"}};
        struct session_info *list = NULL;
        struct sbx_error err = {0};
        pthread_t th[2];
        size_t n = 0, running = 0;

        fixture_config(&cfg);
        cfg.max_sessions = 4;
        open_daemon();
        for (int i = 0; i < 4; i++) {
                char id[8];
                snprintf(id, sizeof(id), "a%d", i);
                cr_assert_eq(session_up("alice", id, &err), 0, "%s", err.msg);
        }
        for (int i = 0; i < 2; i++)
                cr_assert_eq(pthread_create(&th[i], NULL, arrive, &a[i]), 0);
        for (int i = 0; i < 2; i++)
                pthread_join(th[i], NULL);
        for (int i = 0; i < 2; i++)
                cr_assert_eq(a[i].r, 0, "%s was not served: %s", a[i].user, a[i].err.msg);
        /* two of alice's gave way, one each (each a moment after its user was served) */
        cr_assert(TESTENV_WAIT_UNTIL(session_evictions(d->sessions) == 2, 60000), "%llu evictions",
                  (unsigned long long)session_evictions(d->sessions));
        cr_assert_eq(session_list(d->sessions, "alice", NULL, &list, &n), 0);
        for (size_t i = 0; i < n; i++)
                running += list[i].state == SESSION_RUNNING;
        session_info_list_free(list, n);
        cr_assert_eq(running, 2);
        served("bob", "s");
        served("carol", "s");
        daemon_close(d);
}

/* ---- overrides, services, spools ---- */

static void open_with_sockets(void)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};
        char dir[SBX_PATH_MAX];

        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        dirname(dir);
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/run/api.sock", dir);
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/run/admin.sock", dir);
        (void)testenv_docker();
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
}

static int ctl(const char *args, char **out)
{
        return fixture_sandboxctl(SANDBOXD_BINARY_DIR, cfg.admin_socket, args, out);
}

static void ctl_ok(const char *args, const char *expect)
{
        char *out = NULL;
        cr_assert_eq(ctl(args, &out), 0, "sandboxctl %s: %s", args, out);
        cr_assert_not_null(strstr(out, expect), "sandboxctl %s: no '%s' in:\n%s", args, expect, out);
        free(out);
}

Test(quota, overrides_through_sandboxctl_and_the_admin_socket_survive_a_restart)
{
        char ids[3][37], *out = NULL;
        cJSON *r;

        fixture_config(&cfg);
        cfg.max_exec_per_user = 2;
        open_with_sockets();
        ctl_ok("quota set alice max_exec_per_user 1", "max_exec_per_user          1 (override)");
        ctl_ok("quota set alice max_sessions_per_user 3", "max_sessions_per_user      3 (override)");
        start_ok("alice", "a1", "sleep 120", ids[0]);
        busy_naming("alice", "a2", "max_exec_per_user=1");
        /* bob keeps the default */
        start_ok("bob", "b1", "sleep 120", ids[1]);
        start_ok("bob", "b1", "sleep 120", ids[2]);
        busy_naming("bob", "b1", "max_exec_per_user=2");
        ctl_ok("quota show alice", "executions running:        1");
        ctl_ok("quota list", "alice                max_exec_per_user          1");

        /* bad input is refused, not stored */
        cr_assert_eq(ctl("quota set alice max_everything 3", &out), 1, "%s", out);
        free(out);
        cr_assert_eq(ctl("quota set alice max_exec_per_user -1", &out), 2, "%s", out);
        free(out);
        r = apic_admin(cfg.admin_socket,
                       "{\"cmd\": \"quota.set\", \"user\": \"../alice\", "
                       "\"key\": \"max_exec_per_user\", \"value\": 9}");
        cr_assert_str_eq(apic_code(r), "invalid", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = apic_admin(cfg.admin_socket,
                       "{\"cmd\": \"quota.set\", \"user\": \"alice\", "
                       "\"key\": \"max_exec_per_user\", \"value\": 1.5}");
        cr_assert_str_eq(apic_code(r), "bad_request", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        cancel_all("alice", ids, 1);
        cancel_all("bob", &ids[1], 2);

        /* the overrides live in the store: a restart keeps them */
        daemon_close(d);
        open_with_sockets();
        r = apic_admin(cfg.admin_socket, "{\"cmd\": \"quota.show\", \"user\": \"alice\"}");
        cr_assert_eq(apic_num(cJSON_GetObjectItem(apic_result(r), "limits"), "max_exec_per_user"), 1, "%s",
                     cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        start_ok("alice", "a1", "sleep 120", ids[0]);
        busy_naming("alice", "a1", "max_exec_per_user=1");

        /* unset: back to the default at once */
        ctl_ok("quota unset alice max_exec_per_user", "max_exec_per_user          2\n");
        start_ok("alice", "a1", "sleep 120", ids[1]);
        ctl_ok("quota unset alice", "max_sessions_per_user      100\n");
        cancel_all("alice", ids, 2);
        daemon_close(d);
}

Test(quota, services_per_session_follow_the_users_quota)
{
        struct sbx_error err = {0};

        fixture_config(&cfg);
        cfg.max_services_per_session = 2;
        open_daemon();
        cr_assert_eq(quota_set(d->quota, "alice", "max_services_per_session", 1, &err), 0, "%s", err.msg);
        cr_assert_eq(service_start(d->services, "alice", "s", "one", "sleep 1000", NULL, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(service_start(d->services, "alice", "s", "two", "sleep 1000", NULL, NULL, &err), -EUSERS);
        cr_assert_not_null(strstr(err.msg, "max_services_per_session=1"), "%s", err.msg);
        /* bob gets the default */
        cr_assert_eq(service_start(d->services, "bob", "s", "one", "sleep 1000", NULL, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(service_start(d->services, "bob", "s", "two", "sleep 1000", NULL, NULL, &err), 0, "%s", err.msg);
        daemon_close(d);
}

/* Bytes in every spool file of this daemon (one session writes here). */
static long long spool_bytes_on_disk(void)
{
        char dir[SBX_PATH_MAX + 16], path[SBX_PATH_MAX + 300];
        long long sum = 0;
        struct dirent *de;
        struct stat st;
        DIR *dp;

        snprintf(dir, sizeof(dir), "%s/executions", cfg.data_dir);
        dp = opendir(dir);
        cr_assert_not_null(dp);
        while ((de = readdir(dp)))
                if (de->d_name[0] != '.' && snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) > 0 &&
                    stat(path, &st) == 0)
                        sum += st.st_size;
        closedir(dp);
        return sum;
}

static struct exec_result run_out(const char *session, const char *command)
{
        struct exec_request req = {.user = "alice", .session = session, .command = command, .actor = "test"};
        struct exec_result res;
        struct sbx_error err = {0};
        cr_assert_eq(exec_run(d->exec, &req, &res, &err), 0, "%s: %s", command, err.msg);
        cr_assert_eq(res.state, EXEC_COMPLETED, "%s", command);
        return res;
}

Test(quota, spool_bytes_per_session)
{
        struct exec_result a, b, c, again;

        fixture_config(&cfg);
        cfg.exec_output_cap_bytes = 4096;
        cfg.max_spool_per_session_bytes = 10000;
        open_daemon();

        /* one execution: each stream capped, both within the session's quota */
        a = run_out("s", "head -c 9000 /dev/zero; head -c 9000 /dev/zero >&2");
        cr_assert(a.truncated);
        cr_assert_eq(a.stdout_bytes, 9000);
        cr_assert_leq(spool_bytes_on_disk(), 10000);

        /* the next ones make room by removing the oldest output, never more than the quota */
        b = run_out("s", "head -c 3000 /dev/zero | tr '\\0' b");
        cr_assert_leq(spool_bytes_on_disk(), 10000);
        c = run_out("s", "head -c 3000 /dev/zero | tr '\\0' c");
        cr_assert_leq(spool_bytes_on_disk(), 10000);
        cr_assert_eq(exec_status(d->exec, "alice", c.id, 0, 0, 3000, 0, &again, NULL), 0);
        cr_assert_eq(again.stdout_head_len, 3000, "the newest output was not kept");
        cr_assert_eq(again.stdout_head[2999], 'c');
        exec_result_done(&again);

        /* a quota below one execution's full output: that execution gets what there is */
        cr_assert_eq(quota_set(d->quota, "alice", "max_spool_per_session", 5000, NULL), 0);
        exec_result_done(&a);
        a = run_out("s", "head -c 4000 /dev/zero; head -c 4000 /dev/zero >&2");
        cr_assert(a.truncated, "8000 bytes of output fit in a 5000-byte quota");
        cr_assert_leq(spool_bytes_on_disk(), 5000);
        exec_result_done(&a);
        exec_result_done(&b);
        exec_result_done(&c);
        daemon_close(d);
}
