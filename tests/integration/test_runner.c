/* Integration tests of the in-container runner and its channel (real dockerd). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "sandboxd/exec.h"
#include "sandboxd/runner.h"
#include "sandboxd/session.h"
#include "testenv.h"

TestSuite(runner, .timeout = 300);

static struct sbx_config cfg;
static struct daemon *d;

static void open_daemon(const char *runner_binary)
{
        fixture_config(&cfg);
        cfg.exec_kill_grace_ms = 500;
        if (runner_binary)
                snprintf(cfg.runner_binary, sizeof(cfg.runner_binary), "%s", runner_binary);
        d = fixture_open(&cfg, false);
}

static void ensure_session(const char *session, char cid[65])
{
        struct session *s = NULL;
        struct sbx_error err = {0};
        cr_assert_eq(session_get_or_create(d->sessions, "u1", session, &s, &err), 0, "%s", err.msg);
        session_container_id(s, cid);
        session_release(s);
}

static int run_sh(const char *session, const char *command, int timeout_s, struct exec_result *res)
{
        struct exec_request req = {.user = "u1", .session = session, .command = command, .timeout_s = timeout_s,
                                   .actor = "test"};
        struct sbx_error err = {0};
        int r = exec_run(d->exec, &req, res, &err);
        cr_assert_eq(r, 0, "exec_run(%s): %s", command, err.msg);
        return r;
}

Test(runner, connects_over_a_read_only_session_directory)
{
        char cid[65], version[64], *out = NULL;
        struct stat st;
        char path[SBX_PATH_MAX + 64];

        open_daemon(NULL);
        cr_assert_not_null(runner_hub_binary(d->runner), "the runner binary was not built next to the tests");
        ensure_session("s1", cid);
        cr_assert(runner_hub_wait(d->runner, "u1", "s1", 20000), "the runner did not connect");
        cr_assert(runner_hub_version(d->runner, "u1", "s1", version, sizeof(version)));
        cr_assert_str_eq(version, RP_VERSION);

        /* the host side: root-owned, the parent closed to everyone else */
        snprintf(path, sizeof(path), "%s/runner", cfg.data_dir);
        cr_assert_eq(stat(path, &st), 0);
        cr_assert_eq(st.st_uid, 0);
        cr_assert_eq(st.st_mode & 07777, 0700);

        /* the container side: the runner is the main process under the init,
         * and nothing can be planted in the session directory */
        cr_assert_eq(fixture_sh(cid, "cat /proc/1/cmdline | tr '\\0' ' '; echo; cat /proc/self/status | "
                                     "grep -c x >/dev/null; ps -o pid,args | grep -c '[s]andboxd-runner'",
                                &out),
                     0);
        cr_assert(strstr(out, "/run/sandboxd-runner") != NULL, "the init does not run the runner: %s", out);
        free(out);
        out = NULL;
        cr_assert_neq(fixture_sh(cid, "touch /run/sandboxd/planted", NULL), 0, "the session directory is writable");
        cr_assert_neq(fixture_sh(cid, "rm -f /run/sandboxd/runner.sock && test ! -e /run/sandboxd/runner.sock", NULL),
                      0, "the socket could be removed");
        cr_assert_neq(fixture_sh(cid, "echo x > /run/sandboxd-runner", NULL), 0, "the runner binary is writable");
        daemon_close(d);
}

Test(runner, a_session_reaches_only_its_own_socket)
{
        char c1[65], c2[65], *out = NULL;

        open_daemon(NULL);
        ensure_session("s1", c1);
        ensure_session("s2", c2);
        cr_assert(runner_hub_wait(d->runner, "u1", "s1", 20000));
        cr_assert(runner_hub_wait(d->runner, "u1", "s2", 20000));
        /* one socket in each container's directory, and nothing else */
        cr_assert_eq(fixture_sh(c1, "ls -A /run/sandboxd", &out), 0);
        cr_assert_str_eq(out, "runner.sock\n");
        free(out);
        runner_hub_drop(d->runner, "u1", "s2");
        cr_assert(runner_hub_wait(d->runner, "u1", "s1", 1000), "dropping s2 affected s1");
        cr_assert(!runner_hub_wait(d->runner, "u1", "s2", 0));
        daemon_close(d);
}

Test(runner, without_the_binary_the_session_still_serves)
{
        struct exec_result res;
        char cid[65];

        open_daemon("/nonexistent/sandboxd-runner");
        cr_assert_null(runner_hub_binary(d->runner));
        ensure_session("s1", cid);
        cr_assert(!runner_hub_wait(d->runner, "u1", "s1", 0));
        run_sh("s1", "echo fallback", 0, &res);
        cr_assert_eq(res.exit_code, 0);
        cr_assert_eq(res.stdout_head_len, 9);
        cr_assert(memcmp(res.stdout_head, "fallback\n", 9) == 0);
        exec_result_done(&res);
        daemon_close(d);
}
