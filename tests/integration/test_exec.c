/* Integration tests of the execution engine against the real dockerd. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "sandboxd/container.h"
#include "sandboxd/exec.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/utf8.h"
#include "testenv.h"

TestSuite(exec, .timeout = 600);

static struct sbx_config cfg;
static struct daemon *d;

static void open_daemon(const char *image, bool monitor)
{
        fixture_config(&cfg);
        if (image)
                snprintf(cfg.image, sizeof(cfg.image), "%s", image);
        cfg.exec_kill_grace_ms = 500;
        d = fixture_open(&cfg, monitor);
}

static void close_daemon(void)
{
        daemon_close(d);
        d = NULL;
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

static void start_sh(const char *session, const char *command, int timeout_s, char id[37])
{
        struct exec_request req = {
                .user = "u1", .session = session, .command = command, .timeout_s = timeout_s, .actor = "test"};
        struct sbx_error err = {0};
        cr_assert_eq(exec_start(d->exec, &req, id, &err), 0, "exec_start(%s): %s", command, err.msg);
}

static struct exec_result wait_end(const char *id)
{
        struct exec_result res;
        for (int i = 0; i < 120; i++) {
                cr_assert_eq(exec_status(d->exec, "u1", id, -1, -1, 0, 1000, &res, NULL), 0);
                if (exec_state_is_final(res.state))
                        return res;
                exec_result_done(&res);
        }
        cr_assert_fail("execution %s did not end", id);
        return res;
}

static void container_of(const char *session, char id[65])
{
        struct session_info info;
        cr_assert_eq(session_get_info(d->sessions, "u1", session, &info), 0);
        memcpy(id, info.container_id, 65);
        session_info_done(&info);
}

static int count_procs(const char *session, const char *pattern)
{
        char cid[65], script[256], *out = NULL;
        int n;
        container_of(session, cid);
        /* [s]leep keeps the grep itself out of the count */
        snprintf(script, sizeof(script), "ps -o pid,args | grep -c '%s' || true", pattern);
        fixture_sh(cid, script, &out);
        n = atoi(out ? out : "0");
        free(out);
        return n;
}

Test(exec, echo_exit_code_and_stderr_apart, .init = NULL)
{
        struct exec_result res;
        int64_t before = 0, after = 0;

        open_daemon(NULL, false);
        run_sh("s1", "echo out; echo err >&2; exit 3", 0, &res);
        cr_assert_eq(res.state, EXEC_COMPLETED);
        cr_assert_eq(res.cause, EXEC_CAUSE_EXITED);
        cr_assert_eq(res.exit_code, 3);
        cr_assert_eq(res.stdout_head_len, 4);
        cr_assert_eq(memcmp(res.stdout_head, "out\n", 4), 0);
        cr_assert_eq(res.stderr_head_len, 4);
        cr_assert_eq(memcmp(res.stderr_head, "err\n", 4), 0);
        cr_assert_not(res.truncated);
        cr_assert_eq(res.stdout_bytes, 4);
        cr_assert_geq(res.duration_ms, 0);
        cr_assert_eq(strlen(res.id), 36);
        exec_result_done(&res);

        store_audit_count(d->store, "u1", "s1", "exec", &before);
        run_sh("s1", "true", 0, &res);
        cr_assert_eq(res.exit_code, 0);
        exec_result_done(&res);
        store_audit_count(d->store, "u1", "s1", "exec", &after);
        cr_assert_eq(after, before + 1, "the execution was not audited");
        close_daemon();
}

Test(exec, bad_input_is_refused)
{
        struct exec_request req = {.user = "u1", .session = "s1", .command = "true"};
        struct sbx_error err = {0};
        char id[37];
        const char *bad_dirs[] = {"../etc", "/etc", "/workspace/../etc", "a/../../x", "/workspacex"};
        const char *bad_env[] = {"1X=1", NULL};
        const char *reserved_env[] = {"SBX_EXEC_ID=x", NULL};

        open_daemon(NULL, false);
        for (size_t i = 0; i < sizeof(bad_dirs) / sizeof(bad_dirs[0]); i++) {
                req.workdir = bad_dirs[i];
                cr_assert_eq(exec_start(d->exec, &req, id, &err), -EINVAL, "workdir %s accepted", bad_dirs[i]);
                cr_assert_not_null(strstr(err.msg, "workspace"), "%s", err.msg);
        }
        req.workdir = NULL;
        req.env = bad_env;
        cr_assert_eq(exec_start(d->exec, &req, id, &err), -EINVAL);
        req.env = reserved_env;
        cr_assert_eq(exec_start(d->exec, &req, id, &err), -EINVAL);
        req.env = NULL;
        char *big = malloc((size_t)cfg.max_command_bytes + 2);
        memset(big, 'x', (size_t)cfg.max_command_bytes + 1);
        big[cfg.max_command_bytes + 1] = '\0';
        req.command = big;
        cr_assert_eq(exec_start(d->exec, &req, id, &err), -E2BIG);
        free(big);
        req.command = "true";
        req.session = "../x";
        cr_assert_eq(exec_start(d->exec, &req, id, &err), -EINVAL);
        req.session = "s1";
        req.timeout_s = cfg.exec_timeout_max_s + 1;
        cr_assert_eq(exec_start(d->exec, &req, id, &err), -EINVAL);

        /* a relative workdir inside the workspace works */
        struct exec_result res;
        run_sh("s1", "mkdir -p sub/dir", 0, &res);
        exec_result_done(&res);
        struct exec_request ok = {.user = "u1", .session = "s1", .command = "pwd", .workdir = "sub/./dir"};
        cr_assert_eq(exec_run(d->exec, &ok, &res, &err), 0, "%s", err.msg);
        cr_assert_eq(memcmp(res.stdout_head, "/workspace/sub/dir\n", res.stdout_head_len), 0);
        exec_result_done(&res);
        close_daemon();
}

Test(exec, timeout_kills_the_whole_tree_but_not_other_executions)
{
        struct exec_result res;
        char other[37];

        open_daemon(NULL, false);
        start_sh("tree", "exec sleep 1500", 0, other);
        cr_assert(TESTENV_WAIT_UNTIL(fixture_exec_running(d, "u1", other) && count_procs("tree", "[s]leep 1500") == 1,
                                     30000),
                  "the other execution never ran");
        run_sh("tree",
               "echo started; sleep 1001 & setsid sleep 1002 & (sh -c 'sleep 1003 & wait') & "
               "nohup sleep 1004 >/dev/null 2>&1 & sleep 1005",
               2, &res);
        cr_assert_eq(res.state, EXEC_TIMEOUT);
        cr_assert_eq(res.cause, EXEC_CAUSE_TIMEOUT);
        cr_assert_eq(memcmp(res.stdout_head, "started\n", 8), 0, "partial output lost");
        exec_result_done(&res);
        cr_assert_eq(count_procs("tree", "[s]leep 100"), 0, "a process of the timed-out tree survived");
        cr_assert_eq(count_procs("tree", "[s]leep 1500"), 1, "another execution was killed");
        cr_assert_eq(exec_cancel(d->exec, "u1", other, false, NULL), 0);
        res = wait_end(other);
        cr_assert_eq(res.state, EXEC_CANCELLED);
        exec_result_done(&res);
        close_daemon();
}

Test(exec, cancel_and_cancel_after_end)
{
        char id[37];
        struct exec_result res;
        struct sbx_error err = {0};

        open_daemon(NULL, false);
        start_sh("c", "echo before; trap '' TERM; sleep 300", 0, id);
        /* cancel once it has started (the container may take a while to come up) */
        for (int i = 0; i < 60; i++) {
                cr_assert_eq(exec_status(d->exec, "u1", id, 0, 0, 0, 1000, &res, NULL), 0);
                bool started = res.stdout_bytes >= 7;
                exec_result_done(&res);
                if (started)
                        break;
        }
        /* past the trap: the shell set it before it ran sleep */
        (void)TESTENV_WAIT_UNTIL(count_procs("c", "[s]leep 300") == 1, 10000);
        cr_assert_eq(exec_cancel(d->exec, "u1", id, false, &err), 0, "%s", err.msg);
        res = wait_end(id);
        cr_assert_eq(res.state, EXEC_CANCELLED);
        cr_assert_eq(res.cause, EXEC_CAUSE_CANCELLED);
        cr_assert_eq(memcmp(res.stdout_head, "before\n", 7), 0);
        exec_result_done(&res);
        cr_assert_eq(count_procs("c", "[s]leep 300"), 0);
        cr_assert_eq(exec_cancel(d->exec, "u1", id, false, &err), -EALREADY);
        cr_assert_not_null(strstr(err.msg, "CANCELLED"), "%s", err.msg);
        cr_assert_eq(exec_cancel(d->exec, "other-user", id, false, &err), -ENOENT, "cross-user cancel");
        close_daemon();
}

Test(exec, async_offsets_see_output_piece_by_piece)
{
        char id[37], ack[64];
        struct exec_result res, touched;
        int64_t off = 0;
        int reads_with_data = 0, lines = 0;
        char all[256] = "";

        open_daemon(NULL, false);
        /* Each line waits for the test to acknowledge the one before (a file
         * a second execution creates), so the pieces are set by the test, not
         * by how the scheduler spaces a sleep: every read sees exactly one. */
        start_sh("a",
                 "for i in 1 2 3 4 5; do echo line$i; "
                 "while [ ! -e /tmp/ack$i ]; do sleep 0.05; done; done",
                 0, id);
        for (int i = 0; i < 100 && lines < 5; i++) { /* 100 x 2 s: a hang guard */
                cr_assert_eq(exec_status(d->exec, "u1", id, off, 0, 0, 2000, &res, NULL), 0);
                if (res.stdout_head_len > 0) {
                        reads_with_data++;
                        strncat(all, res.stdout_head, res.stdout_head_len);
                        off += (int64_t)res.stdout_head_len;
                }
                exec_result_done(&res);
                int n = 0;
                for (const char *c = all; *c; c++)
                        n += *c == '\n';
                if (n > lines) {
                        lines = n;
                        snprintf(ack, sizeof(ack), "touch /tmp/ack%d", lines);
                        run_sh("a", ack, 0, &touched);
                        exec_result_done(&touched);
                }
        }
        res = wait_end(id);
        cr_assert_eq(res.state, EXEC_COMPLETED);
        exec_result_done(&res);
        cr_assert_str_eq(all, "line1\nline2\nline3\nline4\nline5\n");
        cr_assert_eq(reads_with_data, 5, "output did not arrive piece by piece (%d reads)", reads_with_data);
        close_daemon();
}

/* A list is filtered on the state it shows: one that a waiter has just seen
 * end is listed under its final state, and under no other, though the
 * worker writes its row a moment later. */
Test(exec, list_filters_on_the_state_it_shows)
{
        struct exec_result res, *list;
        size_t n;
        char id[37];
        int missed = 0, stale = 0;

        open_daemon(NULL, false);
        for (int round = 0; round < 40; round++) {
                start_sh("lst", "true", 0, id);
                res = wait_end(id); /* wakes as the state turns final */
                cr_assert_eq(res.state, EXEC_COMPLETED);
                exec_result_done(&res);
                cr_assert_eq(exec_list(d->exec, "u1", "lst", 1u << EXEC_COMPLETED, 100, &list, &n), 0);
                bool found = false;
                for (size_t i = 0; i < n; i++)
                        found |= strcmp(list[i].id, id) == 0;
                missed += !found;
                exec_result_list_free(list, n);
                cr_assert_eq(exec_list(d->exec, "u1", "lst", 1u << EXEC_RUNNING | 1u << EXEC_PENDING, 100, &list, &n),
                             0);
                for (size_t i = 0; i < n; i++)
                        stale += strcmp(list[i].id, id) == 0;
                exec_result_list_free(list, n);
        }
        cr_assert_eq(missed, 0, "%d of 40 ended executions missing from the list of completed ones", missed);
        cr_assert_eq(stale, 0, "%d of 40 ended executions listed as running", stale);
        close_daemon();
}

Test(exec, wait_long_poll_returns_when_output_arrives)
{
        char id[37];
        struct exec_result res;

        open_daemon(NULL, false);
        start_sh("w", "sleep 1; echo done; sleep 30", 0, id);
        /* the wait outlasts the execution: had the output not woken it, the
         * end would have, and the state would not be RUNNING */
        cr_assert_eq(exec_status(d->exec, "u1", id, 0, 0, 0, 60000, &res, NULL), 0);
        cr_assert_eq(res.state, EXEC_RUNNING, "the long-poll did not wake on output");
        cr_assert_eq(res.stdout_head_len, 5, "returned without the new output");
        exec_result_done(&res);
        /* without new output, a short wait times out and reports RUNNING */
        cr_assert_eq(exec_status(d->exec, "u1", id, 5, 0, 0, 300, &res, NULL), 0);
        cr_assert_eq(res.state, EXEC_RUNNING);
        cr_assert_eq(res.stdout_head_len, 0);
        exec_result_done(&res);
        exec_cancel(d->exec, "u1", id, true, NULL);
        res = wait_end(id);
        exec_result_done(&res);
        close_daemon();
}

Test(exec, ten_megabytes_stay_bounded_and_readable_by_offset)
{
        struct exec_result res;
        uint64_t total = 10 * 1024 * 1024, off = 0;
        char id[37];

        open_daemon(NULL, false);
        run_sh("big", "head -c 10485760 /dev/zero | tr '\\0' x; echo tail-marker >&2", 0, &res);
        cr_assert_eq(res.stdout_bytes, total);
        cr_assert(res.truncated);
        cr_assert_eq(res.stdout_head_len, (size_t)cfg.exec_result_head_bytes);
        cr_assert_eq(res.stdout_tail_len, (size_t)cfg.exec_result_head_bytes);
        cr_assert_eq(res.stderr_head_len, 12);
        memcpy(id, res.id, 37);
        exec_result_done(&res);
        while (off < total) {
                cr_assert_eq(exec_status(d->exec, "u1", id, (int64_t)off, -1, 1 << 20, 0, &res, NULL), 0);
                cr_assert_gt(res.stdout_head_len, 0, "no progress at offset %lu", (unsigned long)off);
                for (size_t i = 0; i < res.stdout_head_len; i++)
                        cr_assert_eq(res.stdout_head[i], 'x');
                off += res.stdout_head_len;
                exec_result_done(&res);
        }
        cr_assert_eq(off, total);
        close_daemon();
}

Test(exec, output_cap_counts_what_it_drops)
{
        struct exec_result res;

        fixture_config(&cfg);
        cfg.exec_output_cap_bytes = 4096;
        d = fixture_open(&cfg, false);
        run_sh("cap", "head -c 100000 /dev/zero", 0, &res);
        cr_assert_eq(res.stdout_bytes, 100000);
        cr_assert(res.truncated);
        cr_assert_eq(res.stdout_head_len, 4096);
        exec_result_done(&res);
        close_daemon();
}

Test(exec, invalid_utf8_is_kept_as_bytes)
{
        struct exec_result res;

        open_daemon(NULL, false);
        run_sh("utf", "printf 'a\\377\\376b\\303'", 0, &res);
        cr_assert_eq(res.stdout_head_len, 5);
        cr_assert_eq(memcmp(res.stdout_head,
                            "a\xff\xfe"
                            "b\xc3",
                            5),
                     0);
        char *clean = utf8_sanitize(res.stdout_head, res.stdout_head_len);
        cr_assert(utf8_is_valid(clean, strlen(clean)));
        cr_assert_str_eq(clean,
                         "a\xef\xbf\xbd\xef\xbf\xbd"
                         "b\xef\xbf\xbd");
        free(clean);
        exec_result_done(&res);
        close_daemon();
}

Test(exec, concurrency_caps_refuse_with_busy)
{
        char ids[4][37], id[37];
        struct exec_request req = {.user = "u1", .command = "sleep 60"};
        struct sbx_error err = {0};
        struct exec_result res;

        fixture_config(&cfg);
        cfg.max_exec_per_session = 2;
        cfg.max_exec_global = 3;
        d = fixture_open(&cfg, false);
        start_sh("capA", "sleep 60", 0, ids[0]);
        start_sh("capA", "sleep 60", 0, ids[1]);
        req.session = "capA";
        cr_assert_eq(exec_start(d->exec, &req, id, &err), -EBUSY);
        cr_assert_not_null(strstr(err.msg, "limits.exec_per_session"), "%s", err.msg);
        start_sh("capB", "sleep 60", 0, ids[2]);
        req.session = "capC";
        cr_assert_eq(exec_start(d->exec, &req, id, &err), -EBUSY);
        cr_assert_not_null(strstr(err.msg, "limits.exec_global"), "%s", err.msg);
        for (int i = 0; i < 3; i++) {
                exec_cancel(d->exec, "u1", ids[i], true, NULL);
                res = wait_end(ids[i]);
                exec_result_done(&res);
        }
        /* capacity is back */
        start_sh("capC", "true", 0, id);
        res = wait_end(id);
        cr_assert_eq(res.state, EXEC_COMPLETED);
        exec_result_done(&res);
        close_daemon();
}

Test(exec, exec_after_external_kill_recreates_the_container)
{
        struct exec_result res;
        char cid[65], cid2[65], cli[128];

        open_daemon(NULL, false);
        run_sh("k", "echo keep > /workspace/k.txt", 0, &res);
        exec_result_done(&res);
        container_of("k", cid);
        snprintf(cli, sizeof(cli), "kill %s", cid);
        cr_assert_eq(fixture_docker_cli(cli), 0);
        run_sh("k", "cat /workspace/k.txt", 0, &res);
        cr_assert_eq(res.exit_code, 0);
        cr_assert_eq(memcmp(res.stdout_head, "keep\n", 5), 0);
        exec_result_done(&res);
        container_of("k", cid2);
        cr_assert_str_neq(cid, cid2);
        close_daemon();
}

Test(exec, container_death_mid_execution_keeps_partial_output)
{
        char id[37], cid[65], cli[128];
        struct exec_result res;

        open_daemon(NULL, false);
        start_sh("die", "echo partial; sleep 60", 0, id);
        for (int i = 0; i < 50; i++) {
                cr_assert_eq(exec_status(d->exec, "u1", id, 0, 0, 0, 200, &res, NULL), 0);
                bool seen = res.stdout_head_len > 0;
                exec_result_done(&res);
                if (seen)
                        break;
        }
        container_of("die", cid);
        snprintf(cli, sizeof(cli), "kill %s", cid);
        cr_assert_eq(fixture_docker_cli(cli), 0);
        res = wait_end(id);
        cr_assert_eq(res.state, EXEC_FAILED, "state %s cause %s exit %d", exec_state_to_string(res.state),
                     exec_cause_to_string(res.cause), res.exit_code);
        cr_assert_eq(res.cause, EXEC_CAUSE_CONTAINER_DIED);
        cr_assert_eq(memcmp(res.stdout_head, "partial\n", 8), 0);
        exec_result_done(&res);
        close_daemon();
}

Test(exec, oom_kill_of_an_execution_says_oom)
{
        struct exec_result res;

        fixture_config(&cfg);
        cfg.memory_bytes = 32 << 20;
        d = fixture_open(&cfg, true);
        run_sh("oom", "echo warmup", 0, &res);
        exec_result_done(&res);
        fixture_wait_monitor_events(d); /* the OOM event is seen */
        run_sh("oom", "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo never", 0, &res);
        cr_assert_eq(res.state, EXEC_FAILED, "state %s exit %d", exec_state_to_string(res.state), res.exit_code);
        cr_assert_eq(res.cause, EXEC_CAUSE_OOM, "cause %s", exec_cause_to_string(res.cause));
        exec_result_done(&res);
        close_daemon();
}

Test(exec, running_execution_survives_as_daemon_restarted)
{
        int pipefd[2];
        char id[37] = "";
        pid_t pid;
        struct exec_result res;

        fixture_config(&cfg);
        cr_assert_eq(pipe(pipefd), 0);
        pid = fork();
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test, whatever fails there */
                struct daemon *cd = fixture_open(&cfg, false);
                struct exec_request req = {.user = "u1", .session = "rs", .command = "echo partial; sleep 120"};
                char cid[37];
                if (exec_start(cd->exec, &req, cid, NULL) < 0)
                        _exit(1);
                for (int i = 0; i < 100; i++) {
                        struct exec_result r;
                        exec_status(cd->exec, "u1", cid, 0, 0, 0, 200, &r, NULL);
                        bool seen = r.stdout_head_len > 0;
                        exec_result_done(&r);
                        if (seen)
                                break;
                }
                (void)!write(pipefd[1], cid, 37);
                pause();
                _exit(0);
        }
        close(pipefd[1]);
        cr_assert_eq(read(pipefd[0], id, 37), 37);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        /* the runner would keep it running for the next daemon: only a container
         * that died meanwhile leaves it daemon_restarted */
        {
                char cmd[512];
                snprintf(cmd, sizeof(cmd),
                         "kill $(docker ps -q --filter label=" CONTAINER_LABEL_INSTANCE
                         "=%s "
                         "--filter label=" CONTAINER_LABEL_SESSION "=rs)",
                         cfg.instance);
                cr_assert_eq(fixture_docker_cli(cmd), 0);
        }

        d = fixture_open(&cfg, false);
        cr_assert_eq(exec_status(d->exec, "u1", id, -1, -1, 0, 30000, &res, NULL), 0);
        cr_assert_eq(res.state, EXEC_FAILED);
        cr_assert_eq(res.cause, EXEC_CAUSE_DAEMON_RESTARTED);
        cr_assert_eq(memcmp(res.stdout_head, "partial\n", 8), 0);
        exec_result_done(&res);
        struct exec_result *list;
        size_t n;
        cr_assert_eq(exec_list(d->exec, "u1", "rs", 1u << EXEC_FAILED, 10, &list, &n), 0);
        cr_assert_eq(n, 1);
        cr_assert_str_eq(list[0].id, id);
        exec_result_list_free(list, n);
        cr_assert_eq(exec_list(d->exec, "u1", "rs", 1u << EXEC_RUNNING, 10, &list, &n), 0);
        cr_assert_eq(n, 0);
        exec_result_list_free(list, n);
        close_daemon();
}

static int count_dir(const char *path)
{
        DIR *dir = opendir(path);
        int n = 0;
        while (dir && readdir(dir))
                n++;
        if (dir)
                closedir(dir);
        return n;
}

static long rss_kb(void)
{
        FILE *f = fopen("/proc/self/status", "r");
        char line[256];
        long kb = 0;
        while (f && fgets(line, sizeof(line), f))
                if (strncmp(line, "VmRSS:", 6) == 0)
                        kb = atol(line + 6);
        if (f)
                fclose(f);
        return kb;
}

Test(exec, thousand_sequential_execs_leak_nothing)
{
        struct exec_result res;
        int fds0, fds1, th0, th1;
        long rss0, rss1;

        open_daemon(NULL, false);
        for (int i = 0; i < 50; i++) { /* warm up: caches, handles, allocator arenas */
                run_sh("leak", "true", 0, &res);
                exec_result_done(&res);
        }
        (void)TESTENV_WAIT_UNTIL(fixture_count_threads("sbx-exec") == 0, 10000); /* the warm-up's workers end */
        fds0 = count_dir("/proc/self/fd");
        th0 = count_dir("/proc/self/task");
        rss0 = rss_kb();
        for (int i = 0; i < 1000; i++) {
                run_sh("leak", "true", 0, &res);
                cr_assert_eq(res.exit_code, 0);
                exec_result_done(&res);
        }
        /* detached workers finish unwinding */
        (void)TESTENV_WAIT_UNTIL(count_dir("/proc/self/fd") <= fds0 && count_dir("/proc/self/task") <= th0, 10000);
        fds1 = count_dir("/proc/self/fd");
        th1 = count_dir("/proc/self/task");
        rss1 = rss_kb();
        fprintf(stderr, "1000 execs: fds %d -> %d, threads %d -> %d, RSS %ld -> %ld kB\n", fds0, fds1, th0, th1, rss0,
                rss1);
        cr_assert_eq(fds1, fds0, "file descriptors leaked");
        cr_assert_eq(th1, th0, "threads leaked");
        cr_assert_lt(rss1 - rss0, 8 * 1024, "RSS grew by %ld kB", rss1 - rss0);
        close_daemon();
}

/* ---- with the real CodeAct image ---- */

static void run_code(const char *session, enum exec_language lang, const char *code, struct exec_result *res)
{
        struct exec_request req = {.user = "u1", .session = session, .language = lang, .code = code, .actor = "test"};
        struct sbx_error err = {0};
        cr_assert_eq(exec_run(d->exec, &req, res, &err), 0, "run_code: %s", err.msg);
}

Test(exec, run_code_in_python_node_and_bash)
{
        struct exec_result res;

        open_daemon(TESTENV_PYTHON_IMAGE, false);
        run_code("code", EXEC_LANG_PYTHON, "import numpy\nprint(int(numpy.arange(4).sum()))\n", &res);
        cr_assert_eq(res.exit_code, 0, "%.*s", (int)res.stderr_head_len, res.stderr_head);
        cr_assert_eq(memcmp(res.stdout_head, "6\n", 2), 0);
        exec_result_done(&res);
        /* shell metacharacters in code are data, never a command line */
        run_code("code", EXEC_LANG_PYTHON, "print(\"$(echo hi) ' ; `id` && rm -rf /\")", &res);
        cr_assert_eq(res.stdout_head_len, 32);
        cr_assert_eq(memcmp(res.stdout_head, "$(echo hi) ' ; `id` && rm -rf /\n", 32), 0);
        exec_result_done(&res);
        run_code("code", EXEC_LANG_NODE, "console.log(6 * 7)", &res);
        cr_assert_eq(memcmp(res.stdout_head, "42\n", 3), 0);
        exec_result_done(&res);
        run_code("code", EXEC_LANG_BASH, "a=(x y z); echo ${#a[@]} $((2**10))", &res);
        cr_assert_eq(memcmp(res.stdout_head, "3 1024\n", 7), 0);
        exec_result_done(&res);
        run_code("code", EXEC_LANG_PYTHON, "import sys\nsys.exit(4)", &res);
        cr_assert_eq(res.exit_code, 4);
        exec_result_done(&res);
        close_daemon();
}

Test(exec, stdin_round_trip_with_python_input)
{
        struct exec_request req = {.user = "u1",
                                   .session = "in",
                                   .language = EXEC_LANG_PYTHON,
                                   .code = "name = input()\nprint('hello ' + name)\nprint(input()[::-1])",
                                   .interactive = true,
                                   .actor = "test"};
        struct sbx_error err = {0};
        char id[37];
        struct exec_result res;

        open_daemon(TESTENV_PYTHON_IMAGE, false);
        cr_assert_eq(exec_start(d->exec, &req, id, &err), 0, "%s", err.msg);
        /* wait until it runs, then answer its prompts */
        for (int i = 0; i < 100; i++) {
                cr_assert_eq(exec_status(d->exec, "u1", id, 0, 0, 0, 100, &res, NULL), 0);
                bool running = res.state == EXEC_RUNNING;
                exec_result_done(&res);
                if (running)
                        break;
        }
        cr_assert_eq(exec_send_stdin(d->exec, "u1", id, "world\n", 6, false, &err), 0, "%s", err.msg);
        cr_assert_eq(exec_send_stdin(d->exec, "u1", id, "abc\n", 4, true, &err), 0, "%s", err.msg);
        res = wait_end(id);
        cr_assert_eq(res.exit_code, 0, "%.*s", (int)res.stderr_head_len, res.stderr_head);
        cr_assert_eq(res.stdout_head_len, 16);
        cr_assert_eq(memcmp(res.stdout_head, "hello world\ncba\n", 16), 0);
        exec_result_done(&res);
        cr_assert_eq(exec_send_stdin(d->exec, "u1", id, "late", 4, false, &err), -EALREADY);
        close_daemon();
}

Test(exec, cancel_stops_the_shell_before_its_next_command)
{
        char id[37];
        struct exec_result res;

        /* Killing the child first would let the shell run `echo never`: the
         * whole tree must take its signal at once. Repeated to catch the race. */
        open_daemon(NULL, false);
        for (int i = 0; i < 5; i++) {
                start_sh("order", "echo started; sleep 60; echo never", 0, id);
                for (int k = 0; k < 100; k++) {
                        cr_assert_eq(exec_status(d->exec, "u1", id, 0, 0, 0, 200, &res, NULL), 0);
                        bool seen = res.stdout_head_len > 0;
                        exec_result_done(&res);
                        if (seen)
                                break;
                }
                cr_assert_eq(exec_cancel(d->exec, "u1", id, false, NULL), 0);
                res = wait_end(id);
                cr_assert_eq(res.state, EXEC_CANCELLED);
                cr_assert_eq(res.stdout_head_len, 8, "round %d: %.*s", i, (int)res.stdout_head_len, res.stdout_head);
                exec_result_done(&res);
        }
        close_daemon();
}
