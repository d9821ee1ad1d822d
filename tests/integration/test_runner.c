/* Integration tests of the in-container runner and its channel (real dockerd). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "sandboxd/exec.h"
#include "sandboxd/hub.h"
#include "sandboxd/session.h"
#include "testenv.h"

TestSuite(runner, .timeout = 300);

static struct sbx_config cfg;
static struct daemon *d;
static int64_t memory_bytes;

static void open_daemon(const char *runner_binary)
{
        fixture_config(&cfg);
        if (memory_bytes)
                cfg.memory_bytes = memory_bytes;
        cfg.exec_kill_grace_ms = 500;
        if (runner_binary)
                snprintf(cfg.runner_binary, sizeof(cfg.runner_binary), "%s", runner_binary);
        d = fixture_open(&cfg, false);
}

static void ensure_session(const char *session, char cid[65])
{
        struct session *s = NULL;
        struct sbx_error err = {0};
        cr_assert_eq(session_acquire(d->sessions, "u1", session, &s, &err), 0, "%s", err.msg);
        session_container_id(s, cid);
        session_release(s);
}

static int run_sh(const char *session, const char *command, int timeout_s, struct exec_result *res)
{
        struct exec_request req = {
                .user = "u1", .session = session, .command = command, .timeout_s = timeout_s, .actor = "test"};
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
        cr_assert_not_null(hub_binary(d->runner), "the runner binary was not built next to the tests");
        ensure_session("s1", cid);
        cr_assert(hub_wait(d->runner, "u1", "s1", 20000), "the runner did not connect");
        cr_assert(hub_version(d->runner, "u1", "s1", version, sizeof(version)));
        cr_assert_str_eq(version, RP_VERSION);

        /* the host side: root-owned, the parent closed to everyone else */
        snprintf(path, sizeof(path), "%s/runner", cfg.data_dir);
        cr_assert_eq(stat(path, &st), 0);
        cr_assert_eq(st.st_uid, 0);
        cr_assert_eq(st.st_mode & 07777, 0700);

        /* the container side: the runner is the main process under the init,
         * and nothing can be planted in the session directory */
        cr_assert_eq(fixture_sh(cid,
                                "cat /proc/1/cmdline | tr '\\0' ' '; echo; cat /proc/self/status | "
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
        cr_assert(hub_wait(d->runner, "u1", "s1", 20000));
        cr_assert(hub_wait(d->runner, "u1", "s2", 20000));
        /* the session's own sockets (runner, and the gateway's) and the record of
         * which process is its runner (hub_peer.h), nothing else */
        cr_assert_eq(fixture_sh(c1, "ls -A /run/sandboxd | sort", &out), 0);
        cr_assert_str_eq(out, ".runner-peer\negress.sock\nfwd.sock\nrunner.sock\n");
        free(out);
        hub_drop(d->runner, "u1", "s2");
        cr_assert(hub_wait(d->runner, "u1", "s1", 1000), "dropping s2 affected s1");
        cr_assert(!hub_wait(d->runner, "u1", "s2", 0));
        daemon_close(d);
}

Test(runner, without_the_binary_the_session_still_serves)
{
        struct exec_result res;
        char cid[65];

        open_daemon("/nonexistent/sandboxd-runner");
        cr_assert_null(hub_binary(d->runner));
        ensure_session("s1", cid);
        cr_assert(!hub_wait(d->runner, "u1", "s1", 0));
        run_sh("s1", "echo fallback", 0, &res);
        cr_assert_eq(res.exit_code, 0);
        cr_assert_eq(res.stdout_head_len, 9);
        cr_assert(memcmp(res.stdout_head, "fallback\n", 9) == 0);
        exec_result_done(&res);
        daemon_close(d);
}

Test(runner, executions_run_on_the_runner_with_usage_and_provenance)
{
        struct exec_result res;
        char cid[65];

        memory_bytes = 768 << 20; /* room for the 200 MB below */
        open_daemon(NULL);
        ensure_session("s1", cid);
        cr_assert(hub_wait(d->runner, "u1", "s1", 20000));
        run_sh("s1", "echo out; echo err >&2; exit 3", 0, &res);
        cr_assert_str_eq(res.via, "runner");
        cr_assert_eq(res.state, EXEC_COMPLETED);
        cr_assert_eq(res.exit_code, 3);
        cr_assert_eq(res.stdout_head_len, 4);
        cr_assert(memcmp(res.stdout_head, "out\n", 4) == 0);
        cr_assert_eq(res.stderr_head_len, 4);
        cr_assert(memcmp(res.stderr_head, "err\n", 4) == 0);
        cr_assert_str_eq(res.runner_version, RP_VERSION);
        cr_assert(strncmp(res.image, "sha256:", 7) == 0, "image %s", res.image);
        cr_assert_geq(res.max_rss_kb, 1);
        cr_assert_geq(res.cpu_user_ms, 0);
        exec_result_done(&res);

        /* the tree's usage: a shell holding ~200 MB */
        run_sh("s1", "x=$(head -c 210000000 /dev/zero | tr '\\0' a); echo ${#x}", 0, &res);
        cr_assert_eq(res.exit_code, 0, "exit %d: %.*s", res.exit_code, (int)res.stderr_head_len, res.stderr_head);
        cr_assert_geq(res.max_rss_kb, 200000, "max_rss_kb %lld", (long long)res.max_rss_kb);
        exec_result_done(&res);

        /* the row keeps it all after the execution left memory */
        struct sbx_error err = {0};
        struct exec_request req = {.user = "u1", .session = "s1", .command = "true", .actor = "test"};
        char id[37];
        cr_assert_eq(exec_start(d->exec, &req, id, &err), 0, "%s", err.msg);
        for (int i = 0; i < 200; i++) {
                cr_assert_eq(exec_status(d->exec, "u1", id, -1, -1, 0, 1000, &res, NULL), 0);
                if (exec_state_is_final(res.state))
                        break;
                exec_result_done(&res);
        }
        cr_assert_str_eq(res.via, "runner");
        exec_result_done(&res);
        daemon_close(d);
}

static int count_sleepers(const char *cid)
{
        char *out = NULL;
        int n;
        fixture_sh(cid, "ps -o args | grep -c '^sleep 30[012]' || true", &out);
        n = atoi(out ? out : "0");
        free(out);
        return n;
}

Test(runner, timeout_kills_env_i_and_setsid_escapees)
{
        struct exec_result res;
        char cid[65];

        open_daemon(NULL);
        ensure_session("s1", cid);
        cr_assert(hub_wait(d->runner, "u1", "s1", 20000));
        run_sh("s1", "env -i sh -c 'sleep 301 &'; setsid sleep 302 & sleep 300", 2, &res);
        cr_assert_str_eq(res.via, "runner");
        cr_assert_eq(res.state, EXEC_TIMEOUT);
        exec_result_done(&res);
        cr_assert_eq(count_sleepers(cid), 0, "a process of the timed-out tree survived");

        /* a finished execution's background process lives on, like with docker exec */
        run_sh("s1", "sleep 300 >/dev/null 2>&1 &", 0, &res);
        cr_assert_eq(res.state, EXEC_COMPLETED);
        exec_result_done(&res);
        cr_assert_eq(count_sleepers(cid), 1);
        daemon_close(d);
}

/* The next request gets a new container whose runner serves it. */
static void assert_recreated_on_runner(const char *old_cid)
{
        struct exec_result res;
        char cid[65];

        run_sh("s1", "echo back", 0, &res);
        cr_assert_eq(res.state, EXEC_COMPLETED);
        cr_assert_str_eq(res.via, "runner");
        exec_result_done(&res);
        ensure_session("s1", cid);
        cr_assert_str_neq(old_cid, cid, "the container was not recreated");
}

Test(runner, a_runner_killed_by_tenant_code_recovers_on_the_next_request)
{
        struct exec_result res;
        char c1[65];

        open_daemon(NULL);
        ensure_session("s1", c1);
        cr_assert(hub_wait(d->runner, "u1", "s1", 20000));
        run_sh("s1",
               "for p in /proc/[0-9]*; do grep -q sandboxd-runner $p/cmdline 2>/dev/null && "
               "[ \"$(cat $p/comm)\" = sandboxd-runner ] && kill -9 ${p#/proc/}; done; sleep 5",
               0, &res);
        cr_assert_eq(res.state, EXEC_FAILED);
        cr_assert_eq(res.cause, EXEC_CAUSE_CONTAINER_DIED);
        exec_result_done(&res);
        assert_recreated_on_runner(c1);
        daemon_close(d);
}

struct cause_wait {
        const char *session;
        const char *cause;
};

static bool has_cause(void *ud)
{
        struct cause_wait *w = ud;
        struct session_info info;
        bool ok = false;
        if (session_get_info(d->sessions, "u1", w->session, &info) == 0) {
                ok = info.state == SESSION_ERROR && strcmp(info.error_cause, w->cause) == 0;
                session_info_done(&info);
        }
        return ok;
}

Test(runner, a_stopped_runner_misses_its_heartbeats_and_the_session_recovers)
{
        char c1[65];
        struct cause_wait w = {"s1", "hub_unresponsive"};

        fixture_config(&cfg);
        cfg.runner_heartbeat_ms = 300;
        d = fixture_open(&cfg, false);
        ensure_session("s1", c1);
        cr_assert(hub_wait(d->runner, "u1", "s1", 20000));
        /* tenant code (same uid) stops the runner: it can no longer answer */
        cr_assert_eq(fixture_sh(c1,
                                "for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = sandboxd-runner ] && "
                                "kill -STOP ${p#/proc/}; done; true",
                                NULL),
                     0);
        cr_assert_geq(fixture_wait(has_cause, &w, 30000), 0, "the silent runner was not detected");
        assert_recreated_on_runner(c1);
        daemon_close(d);
}

Test(runner, after_a_daemon_restart_the_runner_reconnects_and_serves)
{
        struct exec_result res;
        char c1[65], c2[65];

        open_daemon(NULL);
        ensure_session("s1", c1);
        run_sh("s1", "true", 0, &res);
        cr_assert_str_eq(res.via, "runner");
        exec_result_done(&res);
        daemon_close(d);
        d = fixture_open(&cfg, false); /* the same data_dir: the session is adopted */
        run_sh("s1", "echo again", 0, &res);
        cr_assert_str_eq(res.via, "runner", "the adopted container's runner did not reconnect");
        cr_assert_eq(res.stdout_head_len, 6);
        exec_result_done(&res);
        ensure_session("s1", c2);
        cr_assert_str_eq(c1, c2, "the container was replaced");
        daemon_close(d);
}

static int count_dir(const char *path)
{
        DIR *dir = opendir(path);
        struct dirent *de;
        int n = 0;
        if (!dir)
                return -1;
        while ((de = readdir(dir)))
                if (de->d_name[0] != '.')
                        n++;
        closedir(dir);
        return n;
}

static int threads_before;

static bool threads_settled(void *ud)
{
        (void)ud;
        return count_dir("/proc/self/task") <= threads_before;
}

Test(runner, a_thousand_sequential_execs_leak_no_fd_or_thread)
{
        struct exec_result res;
        char cid[65];
        int fds_before, fds_after;

        open_daemon(NULL);
        ensure_session("s1", cid);
        cr_assert(hub_wait(d->runner, "u1", "s1", 20000));
        for (int i = 0; i < 10; i++) { /* warm-up: the store's statements, the spool dir */
                run_sh("s1", "true", 0, &res);
                exec_result_done(&res);
        }
        (void)TESTENV_WAIT_UNTIL(fixture_count_threads("sbx-exec") == 0, 10000); /* the warm-up's workers end */
        threads_before = count_dir("/proc/self/task");
        fds_before = count_dir("/proc/self/fd");
        for (int i = 0; i < 1000; i++) {
                run_sh("s1", "echo $$", 0, &res);
                cr_assert_str_eq(res.via, "runner");
                cr_assert_eq(res.exit_code, 0);
                exec_result_done(&res);
        }
        cr_assert_geq(fixture_wait(threads_settled, NULL, 10000), 0, "threads: %d before, %d after", threads_before,
                      count_dir("/proc/self/task"));
        fds_after = count_dir("/proc/self/fd");
        cr_assert_leq(fds_after, fds_before, "fds: %d before, %d after", fds_before, fds_after);
        /* and the runner is still one process with nothing left behind */
        char *out = NULL;
        cr_assert_eq(fixture_sh(cid, "ps -o args | grep -c '^sh -c echo' || true", &out), 0);
        cr_assert_eq(atoi(out), 0, "leftover processes: %s", out);
        free(out);
        daemon_close(d);
}
