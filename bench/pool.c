/* pool.c — the warm pool rows of sandboxd-bench (issue 15), run alone with
 * --only pool (scripts/bench.sh then starts the daemon with pool.size 4 and
 * pool.wait 0, so a drained pool is a cold path at once):
 *   - first_command_new_session: the API exec of `true` in a session that
 *     does not exist yet, with the pool full, against `docker run -d` plus
 *     `docker exec` of the same image and flags, sample for sample in turn;
 *   - first_command_new_session_cold: the same with the pool drained (only
 *     samples session_info reports as not pooled count);
 *   - pool_refill_rate: containers per second of refill work (stats).
 * Single-threaded: the main thread only. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define SAMPLES 12
#define COLD_SAMPLES 6

static cJSON *pool_stats_of(struct bench *b)
{
        cJSON *req = cJSON_CreateObject();
        cJSON_AddStringToObject(req, "cmd", "pool");
        return admin_call(b->cfg.admin_socket, req, CALL_TIMEOUT_MS);
}

static double pool_num(struct bench *b, const char *key)
{
        cJSON *r = pool_stats_of(b);
        double v = json_num(cJSON_GetObjectItemCaseSensitive(reply_result(r), "pool"), key, -1);
        cJSON_Delete(r);
        return v;
}

/* Wait (bounded) until the pool holds pool.size ready containers. */
static bool wait_full(struct bench *b)
{
        for (int i = 0; i < 1200; i++) {
                if (pool_num(b, "ready") >= b->cfg.pool_size)
                        return true;
                usleep(100 * 1000);
        }
        return false;
}

static bool pooled(struct conn *c, struct bench *b, const char *session)
{
        cJSON *p = cJSON_CreateObject(), *r;
        bool v;
        cJSON_AddStringToObject(p, "session", session);
        r = api_call(c, b->token, "session_info", p, CALL_TIMEOUT_MS);
        v = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply_result(r), "pooled"));
        cJSON_Delete(r);
        return v;
}

int phase_pool(struct bench *b)
{
        struct measurement *warm = report_add(&b->rep, "first_command_new_session", "ms");
        struct measurement *cold = report_add(&b->rep, "first_command_new_session_cold", "ms");
        struct measurement *rate = report_add(&b->rep, "pool_refill_rate", "containers/s");
        struct conn c = {.fd = -1};
        char why[512], name[32], ws[SBX_PATH_MAX], id[80];
        int errors = 0, not_pooled = 0;

        warm->has_baseline = true;
        snprintf(warm->baseline_desc, sizeof(warm->baseline_desc),
                 "docker run -d (same image and flags) + docker exec true, interleaved");
        measurement_target(warm, TARGET_P50_LE, 50, "p50 <= 50 ms (and >= 10x faster than the baseline)");
        if (b->cfg.pool_size <= 0) {
                snprintf(warm->note, sizeof(warm->note), "not measured: pool.size is 0 (scripts/bench.sh --only pool)");
                say("pool: skipped (pool.size 0)");
                return 0;
        }
        if (conn_open(&c, b->cfg.api_socket) < 0)
                return -1;
        say("pool: %d warm samples against docker run + exec, %d cold", SAMPLES, COLD_SAMPLES);
        for (int i = 0; i < SAMPLES; i++) {
                double dt, t0, run_ms;

                if (!wait_full(b)) {
                        say("pool: the pool did not fill");
                        errors++;
                        break;
                }
                snprintf(name, sizeof(name), "pw%d", i);
                dt = timed_exec(b, &c, name, "true", why, sizeof(why));
                if (dt < 0) {
                        say("pool: exec failed: %s", why);
                        errors++;
                } else if (pooled(&c, b, name)) {
                        series_add(&warm->s, dt);
                } else {
                        not_pooled++;
                }
                (void)admin_destroy(b, name);
                if (make_workspace(b, 1000 + i, ws, sizeof(ws)) < 0)
                        continue;
                t0 = bench_now_ms();
                if (baseline_run(b, ws, false, id, sizeof(id), &run_ms) == 0) {
                        if (docker_exec_cli(b, id) >= 0)
                                series_add(&warm->base, bench_now_ms() - t0);
                        docker_rm(b, id);
                }
        }
        /* cold: drain the pool first, then a new session finds it empty */
        for (int i = 0; i < COLD_SAMPLES; i++) {
                if (!wait_full(b))
                        break;
                for (int k = 0; k < b->cfg.pool_size; k++) {
                        snprintf(name, sizeof(name), "pd%d-%d", i, k);
                        (void)timed_exec(b, &c, name, "true", why, sizeof(why));
                }
                snprintf(name, sizeof(name), "pc%d", i);
                double dt = timed_exec(b, &c, name, "true", why, sizeof(why));
                if (dt >= 0 && !pooled(&c, b, name))
                        series_add(&cold->s, dt);
                for (int k = 0; k < b->cfg.pool_size; k++) {
                        snprintf(name, sizeof(name), "pd%d-%d", i, k);
                        (void)admin_destroy(b, name);
                }
                snprintf(name, sizeof(name), "pc%d", i);
                (void)admin_destroy(b, name);
        }
        series_add(&rate->s, pool_num(b, "refill_per_s"));
        snprintf(warm->note, sizeof(warm->note),
                 "API exec of true in a session that did not exist, pool.size %d full; %d sample(s) not pooled "
                 "(dropped), %d error(s)",
                 b->cfg.pool_size, not_pooled, errors);
        snprintf(cold->note, sizeof(cold->note),
                 "the same with the pool drained (create, start, sustained-start check, runner)");
        snprintf(rate->note, sizeof(rate->note), "containers made per second of refill work (one at a time, nice 10)");
        conn_close(&c);
        return errors ? -1 : 0;
}
