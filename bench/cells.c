/* cells.c — the run_cell rows (issue 25), `--only cells`:
 *   cell_roundtrip        run_cell `1+1` through the API on a warm python
 *                         context, against `docker exec <cid> python3 -c 1+1`
 *                         on the same container, sample for sample in turn;
 *   cell_jupyter_baseline a Jupyter round trip through jupyter_client inside
 *                         the same container (the path E2B's interpreter
 *                         takes), timed inside the container;
 *   cell_first_new_session the first cell of a new session (container and
 *                         kernel start; the pool is off in this run);
 *   cell_kernel_idle_rss  the idle kernel's RSS (list_contexts). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define CELL_TIMEOUT_MS 120000

/* run_cell; the ms it took, or -1 (why says). */
static double timed_cell(struct bench *b, struct conn *c, const char *session, const char *code, const char *expect,
                         char *why, size_t why_size)
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
        cJSON_Delete(reply);
        return ok ? dt : -1;
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
        struct measurement *rt = report_add(&b->rep, "cell_roundtrip", "ms");
        struct measurement *jb = report_add(&b->rep, "cell_jupyter_baseline", "ms");
        struct measurement *first = report_add(&b->rep, "cell_first_new_session", "ms");
        struct measurement *rss = report_add(&b->rep, "cell_kernel_idle_rss", "MB");
        int n = b->quick ? 30 : 200, n_first = b->quick ? 2 : 5, errors = 0;
        char why[512], cid[80], session[32];
        struct conn c;

        rt->has_baseline = true;
        snprintf(rt->baseline_desc, sizeof(rt->baseline_desc), "docker exec <that container> python3 -c 1+1");
        snprintf(rt->note, sizeof(rt->note), "run_cell 1+1 on the warm default python context of one session");
        measurement_target(rt, TARGET_P50_LE, 5, "p50 <= 5 ms");
        snprintf(jb->note, sizeof(jb->note),
                 "execute 1+1 through jupyter_client's execute_interactive inside the same container (no daemon)");
        snprintf(first->note, sizeof(first->note),
                 "run_cell 1+1 in a new session with the pool off: container, runner and kernel start");
        snprintf(rss->note, sizeof(rss->note), "VmRSS of the idle python kernel (list_contexts rss_kb)");
        if (conn_open(&c, b->cfg.api_socket) < 0)
                return -1;
        say("cells: first cell of %d new sessions", n_first);
        for (int i = 0; i < n_first; i++) {
                snprintf(session, sizeof(session), "cellnew%d", i);
                double dt = timed_cell(b, &c, session, "1+1", "2", why, sizeof(why));
                if (dt < 0) {
                        say("first cell failed: %s", why);
                        errors++;
                } else
                        series_add(&first->s, dt);
                if (i > 0)
                        (void)admin_destroy(b, session);
        }
        if (session_container(b, &c, "cellnew0", cid, sizeof(cid)) < 0) {
                conn_close(&c);
                return -1;
        }
        say("cells: %d round trips on a warm context, against docker exec python3", n);
        for (int i = 0; i < n + 2; i++) {
                double a = timed_cell(b, &c, "cellnew0", "1+1", "2", why, sizeof(why));
                double d = i % 5 == 0 ? docker_exec_python(b, cid) : -1; /* the CLI is slow: a fifth as many */
                if (a < 0) {
                        say("cell failed: %s", why);
                        errors++;
                } else if (i >= 2)
                        series_add(&rt->s, a);
                if (d >= 0 && i >= 2)
                        series_add(&rt->base, d);
        }
        say("cells: jupyter_client baseline in the same container");
        jupyter_baseline(b, cid, jb, n);
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
