/* cells.c — the run_cell rows (issue 25), `--only cells`:
 *   cell_roundtrip        run_cell `1+1` through the API on a warm python
 *                         context, against `docker exec <cid> python3 -c 1+1`
 *                         on the same container, sample for sample in turn;
 *   cell_jupyter_baseline a Jupyter round trip through jupyter_client inside
 *                         the same container (the path E2B's interpreter
 *                         takes), timed inside the container, in rounds
 *                         between rounds of cell_roundtrip;
 *   cell_roundtrip_vs_jupyter the cell_roundtrip samples against the
 *                         jupyter_client ones: what the daemon, the runner
 *                         and the bridge add to Jupyter's own round trip;
 *   cell_first_new_session the first cell of a new session with the warm
 *                         pool empty (container, runner and kernel start);
 *   cell_first_new_session_warm the same with the pool warm: its slot's
 *                         kernel was started ahead (POOL_CELLS_PRESTART);
 *                         scripts/bench.sh gives this run pool.size 2 and
 *                         pool.wait 0 (a drained pool sends a session cold);
 *   cell_kernel_idle_rss  the idle kernel's RSS (list_contexts). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define CELL_TIMEOUT_MS 120000

/* run_cell; the ms it took, or -1 (why says). */
static double timed_cell_p(struct bench *b, struct conn *c, const char *session, const char *code, const char *expect,
                           bool *ret_prestarted, char *why, size_t why_size)
{
        cJSON *p = cJSON_CreateObject(), *reply;
        const cJSON *res, *o;
        double t0 = bench_now_ms(), dt;
        bool ok = false;

        cJSON_AddStringToObject(p, "session", session);
        cJSON_AddStringToObject(p, "code", code);
        reply = api_call(c, b->token, "run_cell", p, CELL_TIMEOUT_MS);
        dt = bench_now_ms() - t0;
        res = reply_result(reply);
        const cJSON *outs = res ? cJSON_GetObjectItem(res, "outputs") : NULL;
        cJSON_ArrayForEach(o, outs) {
                const char *t = json_str(cJSON_GetObjectItem(o, "data"), "text/plain");
                if (t && strcmp(t, expect) == 0)
                        ok = true;
        }
        if (!ok) {
                reply_error(reply, why, why_size);
                if (res)
                        snprintf(why, why_size, "no %s in the outputs", expect);
        }
        if (ret_prestarted)
                *ret_prestarted = cJSON_IsTrue(cJSON_GetObjectItem(res, "prestarted"));
        cJSON_Delete(reply);
        return ok ? dt : -1;
}

static double timed_cell(struct bench *b, struct conn *c, const char *session, const char *code, const char *expect,
                         char *why, size_t why_size)
{
        return timed_cell_p(b, c, session, code, expect, NULL, why, why_size);
}

static double pool_ready(struct bench *b)
{
        cJSON *req = cJSON_CreateObject(), *r;
        cJSON_AddStringToObject(req, "cmd", "pool");
        r = admin_call(b->cfg.admin_socket, req, CALL_TIMEOUT_MS);
        double v = json_num(cJSON_GetObjectItemCaseSensitive(reply_result(r), "pool"), "ready", -1);
        cJSON_Delete(r);
        return v;
}

/* Wait (bounded: 120 s) until the pool holds pool.size ready slots, their
 * kernels started. */
static bool pool_full(struct bench *b)
{
        for (int i = 0; i < 1200; i++) {
                if (pool_ready(b) >= b->cfg.pool_size)
                        return true;
                usleep(100 * 1000);
        }
        return false;
}

/* First cells of new sessions with the pool warm, then with it drained. */
static void first_cells_pooled(struct bench *b, struct conn *c, struct measurement *warm, struct measurement *cold,
                               int n, int *errors)
{
        char why[512], session[48];
        int not_prestarted = 0;

        for (int i = 0; i < n && pool_full(b); i++) {
                bool pre = false;
                snprintf(session, sizeof(session), "cellwarm%d", i);
                double dt = timed_cell_p(b, c, session, "1+1", "2", &pre, why, sizeof(why));
                if (dt < 0) {
                        say("warm first cell failed: %s", why);
                        (*errors)++;
                } else if (pre)
                        series_add(&warm->s, dt);
                else
                        not_prestarted++;
                (void)admin_destroy(b, session);
        }
        for (int i = 0; i < n && pool_full(b); i++) {
                for (int k = 0; k < b->cfg.pool_size; k++) { /* drain it: these sessions take the slots */
                        snprintf(session, sizeof(session), "celldrain%d-%d", i, k);
                        (void)timed_cell(b, c, session, "1", "1", why, sizeof(why));
                }
                bool pre = true;
                snprintf(session, sizeof(session), "cellcold%d", i);
                double dt = timed_cell_p(b, c, session, "1+1", "2", &pre, why, sizeof(why));
                if (dt < 0) {
                        say("cold first cell failed: %s", why);
                        (*errors)++;
                } else if (!pre)
                        series_add(&cold->s, dt);
                for (int k = 0; k < b->cfg.pool_size; k++) {
                        snprintf(session, sizeof(session), "celldrain%d-%d", i, k);
                        (void)admin_destroy(b, session);
                }
                (void)admin_destroy(b, session);
                snprintf(session, sizeof(session), "cellcold%d", i);
                (void)admin_destroy(b, session);
        }
        if (not_prestarted)
                snprintf(warm->note + strlen(warm->note), sizeof(warm->note) - strlen(warm->note),
                         "; %d sample(s) found no kernel ahead", not_prestarted);
}

static double docker_exec_python(struct bench *b, const char *id)
{
        char *argv[] = {(char *)b->docker, "exec", (char *)id, "python3", "-c", "1+1", NULL};
        char err[512];
        double t0 = bench_now_ms();
        if (run_cmd(argv, NULL, 0, err, sizeof(err)) != 0) {
                say("docker exec python3 failed: %s", err);
                return -1;
        }
        return bench_now_ms() - t0;
}

/* In the container: a kernel started with jupyter_client, n round trips of
 * 1+1 (execute, wait for its idle status and reply), one ms figure a line. */
static const char jupyter_script[] =
        "import os, sys, time\n"
        "os.environ.setdefault('JUPYTER_RUNTIME_DIR', '/tmp/bench-jupyter')\n"
        "os.environ['IPYTHONDIR'] = '/tmp/bench-ipython'\n"
        "os.environ['JUPYTER_PLATFORM_DIRS'] = '1'\n"
        "from jupyter_client.manager import start_new_kernel\n"
        "km, kc = start_new_kernel(kernel_name='python3', stdout=open(os.devnull, 'w'), stderr=open(os.devnull, 'w'))\n"
        "for i in range(int(sys.argv[1])):\n"
        "    t0 = time.perf_counter()\n"
        "    kc.execute_interactive('1+1', timeout=30, output_hook=lambda m: None)\n"
        "    print('%.3f' % ((time.perf_counter() - t0) * 1000))\n"
        "km.shutdown_kernel(now=True)\n";

static void jupyter_baseline(struct bench *b, const char *id, struct measurement *m, int n)
{
        char count[16];
        char *out = malloc(1 << 16);
        char err[512];
        snprintf(count, sizeof(count), "%d", n + 3);
        char *argv[] = {(char *)b->docker, "exec", (char *)id, "python3", "-c", (char *)jupyter_script, count, NULL};

        if (!out)
                return;
        if (run_cmd(argv, out, 1 << 16, err, sizeof(err)) != 0) {
                say("jupyter_client baseline failed: %s", err);
                free(out);
                return;
        }
        int i = 0;
        for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
                if (i++ >= 3) /* warm-ups */
                        series_add(&m->s, atof(line));
        free(out);
}

int phase_cells(struct bench *b)
{
        size_t at = b->rep.n; /* report_add may move the rows: pointers are taken after */
        (void)report_add(&b->rep, "cell_roundtrip", "ms");
        (void)report_add(&b->rep, "cell_jupyter_baseline", "ms");
        (void)report_add(&b->rep, "cell_roundtrip_vs_jupyter", "ms");
        (void)report_add(&b->rep, "cell_first_new_session", "ms");
        (void)report_add(&b->rep, "cell_first_new_session_warm", "ms");
        (void)report_add(&b->rep, "cell_kernel_idle_rss", "MB");
        struct measurement *rt = &b->rep.m[at], *jb = &b->rep.m[at + 1], *vs = &b->rep.m[at + 2];
        struct measurement *first = &b->rep.m[at + 3], *warm = &b->rep.m[at + 4], *rss = &b->rep.m[at + 5];
        int n = b->quick ? 30 : 200, n_first = b->quick ? 2 : 5, errors = 0;
        int rounds = b->quick ? 2 : 4; /* cells and jupyter_client in turn: both see the same load */
        char why[512], cid[80], session[32];
        struct conn c;

        rt->has_baseline = true;
        snprintf(rt->baseline_desc, sizeof(rt->baseline_desc), "docker exec <that container> python3 -c 1+1");
        snprintf(rt->note, sizeof(rt->note), "run_cell 1+1 on the warm default python context of one session");
        measurement_target(rt, TARGET_P50_LE, 5, "p50 <= 5 ms");
        snprintf(jb->note, sizeof(jb->note),
                 "execute 1+1 through jupyter_client's execute_interactive inside the same container (no daemon), "
                 "%d rounds between the cells' own",
                 rounds);
        vs->has_baseline = true;
        snprintf(vs->baseline_desc, sizeof(vs->baseline_desc), "cell_jupyter_baseline (the same run)");
        snprintf(vs->note, sizeof(vs->note), "cell_roundtrip's samples against jupyter_client's in the same container");
        measurement_target(vs, TARGET_DIFF_LE, 1.5, "p50 <= jupyter p50 + 1.5 ms");
        snprintf(first->note, sizeof(first->note),
                 "run_cell 1+1 in a new session, the warm pool empty: container, runner and kernel start");
        snprintf(warm->note, sizeof(warm->note),
                 "run_cell 1+1 in a new session, the warm pool full: the slot's kernel was started ahead");
        measurement_target(warm, TARGET_P50_LE, 100, "p50 <= 100 ms");
        snprintf(rss->note, sizeof(rss->note), "VmRSS of the idle python kernel (list_contexts rss_kb)");
        if (conn_open(&c, b->cfg.api_socket) < 0)
                return -1;
        /* a connection has connections.auth_timeout for its first authenticated request:
         * make it now, before the minutes the pool takes to fill */
        cJSON_Delete(api_call(&c, b->token, "list_sessions", NULL, CALL_TIMEOUT_MS));
        if (b->cfg.pool_size > 0) {
                say("cells: first cell of new sessions, pool warm then drained (pool_size %d)", b->cfg.pool_size);
                first_cells_pooled(b, &c, warm, first, n_first, &errors);
        } else
                snprintf(warm->note, sizeof(warm->note), "not measured: pool.size is 0");
        say("cells: first cell of %d new sessions", n_first);
        for (int i = 0; i < n_first; i++) {
                snprintf(session, sizeof(session), "cellnew%d", i);
                double dt = timed_cell(b, &c, session, "1+1", "2", why, sizeof(why));
                if (dt < 0) {
                        say("first cell failed: %s", why);
                        errors++;
                } else if (b->cfg.pool_size == 0) /* pooled: measured above */
                        series_add(&first->s, dt);
                if (i > 0)
                        (void)admin_destroy(b, session);
        }
        if (session_container(b, &c, "cellnew0", cid, sizeof(cid)) < 0) {
                conn_close(&c);
                return -1;
        }
        say("cells: %d round trips on a warm context, against docker exec python3 and jupyter_client", n);
        for (int k = 0; k < rounds; k++) {
                for (int i = 0; i < n / rounds + 2; i++) {
                        double a = timed_cell(b, &c, "cellnew0", "1+1", "2", why, sizeof(why));
                        double d = i % 5 == 0 ? docker_exec_python(b, cid) : -1; /* the CLI is slow: a fifth as many */
                        if (a < 0) {
                                say("cell failed: %s", why);
                                errors++;
                        } else if (i >= 2) {
                                series_add(&rt->s, a);
                                series_add(&vs->s, a);
                        }
                        if (d >= 0 && i >= 2)
                                series_add(&rt->base, d);
                }
                jupyter_baseline(b, cid, jb, n / rounds);
        }
        for (size_t i = 0; i < jb->s.n; i++)
                series_add(&vs->base, jb->s.v[i]);
        {
                cJSON *p = cJSON_CreateObject(), *reply;
                cJSON_AddStringToObject(p, "session", "cellnew0");
                reply = api_call(&c, b->token, "list_contexts", p, CELL_TIMEOUT_MS);
                const cJSON *ctx = cJSON_GetArrayItem(cJSON_GetObjectItem(reply_result(reply), "contexts"), 0);
                double kb = json_num(ctx, "rss_kb", -1);
                if (kb > 0)
                        series_add(&rss->s, kb / 1024);
                cJSON_Delete(reply);
        }
        (void)admin_destroy(b, "cellnew0");
        conn_close(&c);
        if (errors)
                snprintf(rt->note + strlen(rt->note), sizeof(rt->note) - strlen(rt->note), "; %d failed", errors);
        return 0;
}
