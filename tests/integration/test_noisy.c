/* Integration test of noisy neighbours (issue 12 item 5) against the real
 * dockerd: one session fork-bombs and spins on every CPU it has while
 * another session keeps running its executions. No timed assertion: the
 * slowdown is a figure of the benchmark (scripts/bench.sh, noisy_neighbour);
 * here we check that the limits are in place, that the bomb really reached
 * its PID limit and never passed it, and that the neighbour is served. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "sandboxd/exec.h"
#include "sandboxd/session.h"
#include "testenv.h"

TestSuite(noisy, .timeout = 300);

#define PIDS_LIMIT 64

/* Four spinners first (they must exist before the bomb takes every PID),
 * then a classic fork bomb; `wait` is a builtin, so the shell needs no PID
 * of its own to keep the execution alive. Under bash (the python image):
 * bash retries a fork that fails, so the bomb stays at its limit; busybox
 * ash and dash give up at once and the bomb collapses within a second or
 * two, sooner than the PID count can be sampled on a loaded host. */
static const char bomb[] =
        "exec bash -c 'i=0; while [ $i -lt 4 ]; do (while :; do :; done) & i=$((i+1)); done; "
        "b() { b | b & }; b; wait'";

static struct sbx_config cfg;
static struct daemon *d;

static void run_ok(const char *session, const char *command)
{
        struct exec_request req = {
                .user = "u1", .session = session, .command = command, .timeout_s = 60, .actor = "test"};
        struct exec_result res;
        struct sbx_error err = {0};

        cr_assert_eq(exec_run(d->exec, &req, &res, &err), 0, "exec_run(%s): %s", command, err.msg);
        cr_assert_eq(res.state, EXEC_COMPLETED, "%s: state %d (%s)", command, res.state, res.error);
        cr_assert_eq(res.exit_code, 0, "%s: exit code %d", command, res.exit_code);
        cr_assert_eq(res.stdout_head_len, 3, "%s: %zu bytes of stdout", command, res.stdout_head_len);
        cr_assert_eq(memcmp(res.stdout_head, "ok\n", 3), 0);
        exec_result_done(&res);
}

static char noisy_id[65];

static bool bomb_at_limit(void *ud)
{
        struct docker_stats st = {0};
        uint64_t *peak = ud;

        if (docker_container_stats(testenv_docker(), noisy_id, &st, NULL) < 0)
                return false;
        if (st.pids > *peak)
                *peak = st.pids;
        return st.pids >= PIDS_LIMIT - 2;
}

static const char *bomb_exec;

static bool exec_ended(void *ud)
{
        struct exec_result res;
        bool done;

        (void)ud;
        if (exec_status(d->exec, "u1", bomb_exec, -1, -1, 0, 0, &res, NULL) < 0)
                return false;
        done = exec_state_is_final(res.state);
        exec_result_done(&res);
        return done;
}

Test(noisy, fork_bomb_and_cpu_spin_leave_the_neighbour_served)
{
        struct exec_request req = {.user = "u1", .session = "noisy", .command = bomb, .timeout_s = 120, .actor = "test"};
        struct docker_container_info info;
        struct exec_result res;
        struct sbx_error err = {0};
        char exec_id[37];
        uint64_t peak = 0;

        fixture_config(&cfg);
        snprintf(cfg.image, sizeof(cfg.image), "%s", TESTENV_PYTHON_IMAGE); /* bash, see bomb */
        cfg.pids_limit = PIDS_LIMIT;
        cfg.ports_per_session = 0; /* no port range shared with other suites */
        cfg.exec_kill_grace_ms = 500;
        d = fixture_open(&cfg, false);

        run_ok("quiet", "echo ok");
        run_ok("noisy", "echo ok");
        fixture_container_of(d, "u1", "noisy", noisy_id);

        /* the neighbour's weight is below the host's 1024; its limits stay */
        cr_assert_eq(docker_container_inspect(testenv_docker(), noisy_id, &info, NULL), 0);
        cr_assert_eq(info.cpu_shares, cfg.cpu_shares);
        cr_assert_lt(info.cpu_shares, 1024);
        cr_assert_eq(info.oom_score_adj, cfg.oom_score_adj);
        cr_assert_eq(info.pids_limit, PIDS_LIMIT);
        cr_assert_eq(info.memory, cfg.memory_bytes);
        cr_assert_eq(info.nano_cpus, cfg.nano_cpus);

        cr_assert_eq(exec_start(d->exec, &req, exec_id, &err), 0, "exec_start: %s", err.msg);
        cr_assert_geq(fixture_wait(bomb_at_limit, &peak, 60000), 0, "the bomb never reached its PID limit (peak %llu)",
                      (unsigned long long)peak);

        /* meanwhile the other session is served, and a new one can start */
        for (int i = 0; i < 5; i++)
                run_ok("quiet", "echo ok");
        run_ok("fresh", "echo ok");

        cr_assert_eq(exec_status(d->exec, "u1", exec_id, -1, -1, 0, 0, &res, NULL), 0);
        cr_assert_eq(res.state, EXEC_RUNNING, "the bomb ended early: state %d (%s)", res.state, res.error);
        exec_result_done(&res);
        (void)bomb_at_limit(&peak);
        cr_assert_leq(peak, PIDS_LIMIT, "the container passed its PID limit: %llu", (unsigned long long)peak);

        /* Cancel ends the execution (and frees its slot) even though a bomb
         * at its PID limit leaves no PID for the in-container kill sweep;
         * removing the session's container then ends the processes. */
        cr_assert_eq(exec_cancel(d->exec, "u1", exec_id, true, &err), 0, "cancel: %s", err.msg);
        bomb_exec = exec_id;
        cr_assert_geq(fixture_wait(exec_ended, NULL, 90000), 0, "the cancelled bomb's execution never ended");
        cr_assert_eq(session_destroy(d->sessions, "u1", "noisy", true, &err), 0, "destroy: %s", err.msg);
        cr_assert_eq(fixture_count_containers("u1", "noisy"), 0);
        run_ok("quiet", "echo ok");
        daemon_close(d);
}
