/* Integration tests of the per-user quotas (issue 12 item 3) against the
 * real dockerd: live sessions per user, concurrent executions per user, the
 * fair share of the global execution cap; another user is served while one
 * is at a cap. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fixture.h"
#include "sandboxd/exec.h"
#include "sandboxd/session.h"
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
        int r = session_get_or_create(d->sessions, user, session, &s, err);
        if (r == 0)
                session_release(s);
        return r;
}

static int start(const char *user, const char *session, const char *command, char id[37], struct sbx_error *err)
{
        struct exec_request req = {.user = user, .session = session, .command = command, .timeout_s = 120,
                                   .actor = "test"};
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
        busy_naming("alice", "a1", "fair share of max_exec_global=4");
        busy_naming("bob", "b1", "max_exec_global=4");

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
