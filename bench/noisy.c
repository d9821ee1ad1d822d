/* noisy.c — the noisy_neighbour phase of sandboxd-bench (issue 12 item 5).
 *
 * One session ("noisy") fork-bombs, spins on every CPU it may use, writes
 * output as fast as it can (1 GiB per `head`), or does all three at once,
 * while another session ("quiet") measures its API exec round trip of
 * `true`. Each is a ratio to the quiet session's round trip measured in the
 * same run with the noisy session alive but idle, taken before each noisy
 * part and once after the last, so a machine that gets busier or quieter
 * over the phase weighs on both sides. The noise runs as background
 * executions; a fork bomb at its PID limit cannot be cancelled from inside
 * its container (no PID is left for the kill sweep), so each part ends by
 * destroying the noisy session.
 *
 * Single-threaded: the main thread only. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define NOISY "noisy"
#define QUIET "quiet"
#define RAMP_TIMEOUT_MS 60000

static const char spin[] = "for i in 1 2 3 4 5 6 7 8; do (while :; do :; done) & done; wait";
static const char output[] = "i=0; while [ $i -lt 64 ]; do head -c 1073741824 /dev/zero; i=$((i+1)); done";
static const char bomb[] = "b() { b | b & }; b; wait";

struct noise {
        const char *name;
        const char *what;
        bool spin, output, bomb;
};

static const struct noise noises[] = {
        {"noisy_fork_bomb", "a fork bomb (held at pids_limit)", false, false, true},
        {"noisy_cpu_spin", "8 shell loops spinning (the container may use `cpus` CPUs)", true, false, false},
        {"noisy_output", "stdout at full speed: 1 GiB per head -c, repeated", false, true, false},
        {"noisy_neighbour", "all three at once: spin, output, then the fork bomb", true, true, true},
};

/* Start cmd as a background execution in the noisy session; its id into ret. */
static int start_noise(struct bench *b, struct conn *c, const char *cmd, char *ret, size_t size)
{
        cJSON *p = cJSON_CreateObject(), *reply;
        const char *id;
        int r = -1;

        cJSON_AddStringToObject(p, "session", NOISY);
        cJSON_AddStringToObject(p, "command", cmd);
        cJSON_AddBoolToObject(p, "background", true);
        cJSON_AddNumberToObject(p, "timeout_seconds", 1800);
        reply = api_call(c, b->token, "exec", p, CALL_TIMEOUT_MS);
        id = json_str(reply_result(reply), "execution_id");
        if (id) {
                snprintf(ret, size, "%s", id);
                r = 0;
        } else {
                char why[256];
                reply_error(reply, why, sizeof(why));
                say("noisy: cannot start noise: %s", why);
        }
        cJSON_Delete(reply);
        return r;
}

/* stdout bytes an execution has produced so far (-1 if unknown). */
static double exec_stdout_bytes(struct bench *b, struct conn *c, const char *id)
{
        cJSON *p = cJSON_CreateObject(), *reply;
        double n;

        cJSON_AddStringToObject(p, "session", NOISY);
        cJSON_AddStringToObject(p, "execution_id", id);
        reply = api_call(c, b->token, "get_execution", p, CALL_TIMEOUT_MS);
        n = json_num(reply_result(reply), "stdout_bytes", -1);
        cJSON_Delete(reply);
        return n;
}

/* Wait (bounded) until the noisy container holds nearly all its PIDs. */
static int wait_bomb(struct bench *b, const char *cid)
{
        double until = bench_now_ms() + RAMP_TIMEOUT_MS;
        struct docker_stats st = {0};

        while (bench_now_ms() < until) {
                if (docker_container_stats(b->engine, cid, &st, NULL) == 0 && (int64_t)st.pids >= b->cfg.pids_limit - 2)
                        return (int)st.pids;
                usleep(200000);
        }
        say("noisy: the fork bomb did not reach its PID limit (%d of %d)", (int)st.pids, (int)b->cfg.pids_limit);
        return -1;
}

static void quiet_samples(struct bench *b, struct conn *c, int n, struct series *s, int *errors)
{
        char why[512];

        for (int i = 0; i < n; i++) {
                double dt = timed_exec(b, c, QUIET, "true", why, sizeof(why));
                if (dt < 0) {
                        say("noisy: quiet exec failed: %s", why);
                        (*errors)++;
                } else {
                        series_add(s, dt);
                }
        }
}

int phase_noisy(struct bench *b)
{
        struct measurement *m[ELEMENTSOF(noises)];
        struct series base;
        struct conn c, nc;
        char why[512], cid[128];
        int n = b->sz.noisy, errors = 0;

        if (conn_open(&c, b->cfg.api_socket) < 0)
                return -1;
        if (conn_open(&nc, b->cfg.api_socket) < 0) {
                conn_close(&c);
                return -1;
        }
        series_init(&base);
        say("noisy neighbour: %d quiet execs per part, %zu parts", n, ELEMENTSOF(noises));
        if (timed_exec(b, &c, QUIET, "true", why, sizeof(why)) < 0) {
                say("noisy: cannot start the quiet session: %s", why);
                goto out;
        }
        for (size_t k = 0; k < ELEMENTSOF(noises); k++) {
                const struct noise *z = &noises[k];
                char out_id[64] = "", id[64];
                double t0, t1, out0 = 0, out1 = 0;
                struct cpu c0, c1, d = {0};
                int pids = -1;

                m[k] = report_add(&b->rep, z->name, "ms");
                m[k]->has_baseline = true;
                snprintf(m[k]->baseline_desc, sizeof(m[k]->baseline_desc),
                         "the same API exec of true in the same session, noisy session idle (same run)");
                measurement_target(m[k], TARGET_RATIO_LE, 1.5, "p50 <= 1.5x without the noise");
                if (timed_exec(b, &nc, NOISY, "true", why, sizeof(why)) < 0 ||
                    session_container(b, &nc, NOISY, cid, sizeof(cid)) < 0) {
                        say("noisy: cannot start the noisy session: %s", why);
                        errors++;
                        continue;
                }
                quiet_samples(b, &c, n / 2, &base, &errors);
                if ((z->spin && start_noise(b, &nc, spin, id, sizeof(id)) < 0) ||
                    (z->output && start_noise(b, &nc, output, out_id, sizeof(out_id)) < 0) ||
                    (z->bomb && start_noise(b, &nc, bomb, id, sizeof(id)) < 0)) {
                        errors++;
                        (void)admin_destroy(b, NOISY);
                        continue;
                }
                if (z->bomb)
                        pids = wait_bomb(b, cid);
                else
                        sleep(1); /* let the spinners and the stream get going */
                if (z->output)
                        out0 = exec_stdout_bytes(b, &nc, out_id);
                t0 = bench_now_ms();
                c0 = cpu_now(b);
                quiet_samples(b, &c, n, &m[k]->s, &errors);
                c1 = cpu_now(b);
                t1 = bench_now_ms();
                cpu_add_delta(&d, &c0, &c1);
                if (z->output)
                        out1 = exec_stdout_bytes(b, &nc, out_id);
                if (admin_destroy(b, NOISY) < 0) {
                        say("noisy: cannot destroy the noisy session");
                        errors++;
                }
                snprintf(m[k]->note, sizeof(m[k]->note),
                         "%s in one session while another measures exec true; PIDs in the noisy container %d "
                         "(limit %d); CPU share of the whole machine while measured: daemon %.0f%%, dockerd %.0f%%, "
                         "all %.0f%% of %ld CPUs",
                         z->what, pids, (int)b->cfg.pids_limit, 100 * d.daemon / (t1 - t0), 100 * d.dockerd / (t1 - t0),
                         100 * d.machine / (t1 - t0), sysconf(_SC_NPROCESSORS_ONLN));
                if (z->output && out1 > out0) {
                        size_t len = strlen(m[k]->note);
                        snprintf(m[k]->note + len, sizeof(m[k]->note) - len,
                                 "; output absorbed meanwhile: %.0f MB/s (%.2f GB in %.1f s), the daemon's CPU "
                                 "%.2f ms per MB of it",
                                 (out1 - out0) / 1e6 / ((t1 - t0) / 1000), (out1 - out0) / 1e9, (t1 - t0) / 1000,
                                 d.daemon / ((out1 - out0) / 1e6));
                }
                if (errors) {
                        size_t len = strlen(m[k]->note);
                        snprintf(m[k]->note + len, sizeof(m[k]->note) - len, "; %d failures so far", errors);
                }
        }
        quiet_samples(b, &c, n / 2, &base, &errors);
        for (size_t k = 0; k < ELEMENTSOF(noises); k++)
                for (size_t i = 0; i < base.n; i++)
                        series_add(&m[k]->base, base.v[i]);
out:
        series_done(&base);
        conn_close(&nc);
        conn_close(&c);
        (void)admin_destroy(b, QUIET);
        return errors ? -1 : 0;
}
