/* bench.c — sandboxd-bench: sandboxd against plain Docker, in one run.
 *
 * Starts the real daemon (the binary given with --daemon, configured by the
 * SANDBOXD_* environment it inherits), talks to it over its API and admin
 * sockets exactly as a client would, and measures beside it, in the same run
 * and interleaved sample by sample, what a user scripting the docker CLI
 * would get: `docker run -d` with the hardening flags of src/container.c
 * (read from the same configuration the daemon loads) plus `docker exec`.
 *
 * Phases, in order (sizes for full / --quick):
 *   cold session        create + first exec of `true`   vs docker run -d + docker exec   (20 / 6 pairs)
 *   exec round trip     API exec `true` in a warm session vs docker exec CLI, same container (200 / 25)
 *   engine exec         the same three Engine API calls the daemon makes, no daemon (reference)
 *   http round trip     POST /v1/exec over HTTPS with keep-alive vs the API socket, in turn
 *                       (http.c)                                                   (200 / 50)
 *   run_code            python print(1)                                                 (50 / 10)
 *   noisy neighbour     exec round trip of one session while another fork-bombs, spins, writes
 *                       output at full speed, then all three; ratio to the same round trip with
 *                       the noisy session idle (noisy.c)                            (40 / 10 per part)
 *   RSS                 VmRSS of the daemon idle, then with S1 sessions          (S1 = 50 / 20)
 *   concurrency         S1 sessions x E execs at once: throughput, latency, errors, then the
 *                       same through the docker exec CLI                             (E = 20 / 10)
 *   detection           docker kill -> session ERROR on the admin socket            (10 / 3)
 *   teardown            docker kill of a baseline container with and without its published
 *                       ports (reference: what the detection waits for)             (10 / 3)
 *   RSS                 with S2 sessions, and the peak so far (VmHWM)             (S2 = 200 / 30)
 *   restart             destroy sessions down to R, SIGKILL the daemon, start it again: time to
 *                       both sockets answering and to its "reconciled:" log line (R = 100 / 30)
 *
 * --only restart: R sessions, then the restart phase alone.
 * --only cells: the run_cell rows (cells.c).
 * --only snapshot: snapshot and fork of a 100 MB and a 1 GB workspace (snapshot.c).
 * --only pause: the pause and resume rows (pause.c).
 * --only microvm: the microVM rows (microvm.c), not in the full run: they switch the bench user's
 * runtime.
 *
 * --only network: cold session, then S2 sessions with their port blocks
 * (the gateway's listeners) against the PSS of the docker-proxy processes
 * one baseline container with a published block costs, times S2.
 *
 * This file holds the phases and main; harness.c the daemon, socket and
 * baseline helpers they use; noisy.c the noisy neighbour; http.c the HTTPS round trip; util.c the
 * clients, processes and report.
 *
 * Threads: the main thread, plus short-lived workers in the concurrent
 * phases, each with its own socket connection, and an events-stream
 * watcher during detection; they share only series (locked), a mutex-
 * guarded watch slot and atomic counters.
 *
 * Over 800 lines: the driver and every row's measurement, each row a short
 * function beside its Docker baseline (harness.c, noisy.c, pool.c and
 * http.c hold the shared parts).
 */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static const struct sizes full_sizes = {20, 200, 50, 50, 20, 200, 10, 100, 3, 40, 200};
static const struct sizes quick_sizes = {6, 25, 10, 20, 10, 30, 3, 30, 1, 10, 50};

/* ---- phases ---- */

static int phase_cold(struct bench *b)
{
        struct measurement *m = report_add(&b->rep, "cold_session", "ms");
        struct cpu cpu[2] = {{0}};
        struct series run_s, exec_s, create_s;
        long log_offset = file_size(b->log_path);
        struct conn c;
        int errors = 0;

        series_init(&run_s);
        series_init(&exec_s);
        series_init(&create_s);
        m->has_baseline = true;
        snprintf(m->baseline_desc, sizeof(m->baseline_desc),
                 "docker run -d (same image, hardening flags, %d published ports) + docker exec true",
                 b->cfg.ports_per_session);
        measurement_target(m, TARGET_RATIO_LE, 0.5, "<= 0.5x baseline"); /* issue 14: no published ports */
        if (conn_open(&c, b->cfg.api_socket) < 0)
                return -1;
        say("cold session: %d interleaved pairs", b->sz.cold);
        for (int i = 0; i < b->sz.cold; i++) {
                char name[32], why[512], id[128] = "", ws[SBX_PATH_MAX];
                double dt, run_ms, exec_ms;

                /* A then B, then B then A: neither side always goes first */
                for (int k = 0; k < 2; k++) {
                        if ((k == 0) == (i % 2 == 0)) {
                                struct cpu c0 = cpu_now(b), c1;
                                snprintf(name, sizeof(name), "cold%d", i);
                                dt = timed_exec(b, &c, name, "true", why, sizeof(why));
                                c1 = cpu_now(b);
                                cpu_add_delta(&cpu[0], &c0, &c1);
                                if (dt < 0) {
                                        say("cold session %s failed: %s", name, why);
                                        errors++;
                                } else {
                                        series_add(&m->s, dt);
                                }
                                (void)admin_destroy(b, name);
                        } else {
                                struct cpu c0, c1;
                                if (make_workspace(b, i, ws, sizeof(ws)) < 0)
                                        continue;
                                c0 = cpu_now(b);
                                if (baseline_run(b, ws, true, id, sizeof(id), &run_ms) < 0) {
                                        errors++;
                                        continue;
                                }
                                exec_ms = docker_exec_cli(b, id);
                                c1 = cpu_now(b);
                                cpu_add_delta(&cpu[1], &c0, &c1);
                                series_add(&run_s, run_ms);
                                if (exec_ms >= 0) {
                                        series_add(&m->base, run_ms + exec_ms);
                                        series_add(&exec_s, exec_ms);
                                } else
                                        errors++;
                                docker_rm(b, id);
                        }
                }
        }
        conn_close(&c);
        creation_spans(b->log_path, log_offset, "cold", &create_s);
        snprintf(m->note, sizeof(m->note),
                 "sandboxd: container creation (CREATING to RUNNING in the daemon's log, ms resolution) p50 %.0f "
                 "ms of it; baseline split: docker run -d p50 %.0f ms + docker exec p50 %.0f ms; CPU per cold "
                 "session, ms (daemon / dockerd / whole machine, which includes anything else running): sandboxd "
                 "%.0f / %.0f / %.0f, baseline - / %.0f / %.0f%s",
                 series_pct(&create_s, 50), series_pct(&run_s, 50), series_pct(&exec_s, 50), cpu[0].daemon / b->sz.cold,
                 cpu[0].dockerd / b->sz.cold, cpu[0].machine / b->sz.cold, cpu[1].dockerd / b->sz.cold,
                 cpu[1].machine / b->sz.cold, errors ? "; some samples failed" : "");
        series_done(&run_s);
        series_done(&exec_s);
        series_done(&create_s);
        return 0;
}

static int phase_exec(struct bench *b)
{
        struct measurement *m = report_add(&b->rep, "exec_roundtrip", "ms");
        struct measurement *eng = report_add(&b->rep, "engine_exec_reference", "ms");
        const char *argv[] = {"sh", "-c", "true", NULL};
        struct docker_exec_spec spec = {.cmd = argv};
        char cid[128], why[512];
        struct cpu cpu[3] = {{0}};
        struct conn c;
        int errors = 0, base_errors = 0;

        m->has_baseline = true;
        snprintf(m->baseline_desc, sizeof(m->baseline_desc), "docker exec <the session's own container> true (CLI)");
        /* issue 13: through the in-container runner, >= 10x faster than the CLI (and p50 <= 5 ms) */
        measurement_target(m, TARGET_RATIO_LE, 0.1, "<= 0.1x baseline (p50 <= 5 ms)");
        snprintf(eng->note, sizeof(eng->note),
                 "reference, no target: the three Engine API calls of the docker exec fallback (create, "
                 "attached start, inspect), made directly with the daemon's own Docker client on the same "
                 "container");
        if (conn_open(&c, b->cfg.api_socket) < 0)
                return -1;
        if (timed_exec(b, &c, "warm", "true", why, sizeof(why)) < 0 ||
            session_container(b, &c, "warm", cid, sizeof(cid)) < 0) {
                say("cannot create the warm session: %s", why);
                conn_close(&c);
                return -1;
        }
        say("exec round trip: %d interleaved pairs on container %.12s", b->sz.exec, cid);
        for (int i = 0; i < 3; i++) { /* warm-up, not counted */
                (void)timed_exec(b, &c, "warm", "true", why, sizeof(why));
                (void)docker_exec_cli(b, cid);
        }
        for (int i = 0; i < b->sz.exec; i++) {
                for (int k = 0; k < 3; k++) {
                        int which = (k + i) % 3; /* rotate the order */
                        struct cpu c0 = cpu_now(b), c1;
                        double dt;
                        if (which == 0) {
                                dt = timed_exec(b, &c, "warm", "true", why, sizeof(why));
                                if (dt < 0) {
                                        say("exec failed: %s", why);
                                        errors++;
                                } else {
                                        series_add(&m->s, dt);
                                }
                        } else if (which == 1) {
                                dt = docker_exec_cli(b, cid);
                                if (dt >= 0) {
                                        series_add(&m->base, dt);
                                } else {
                                        /* replaced under us (see the note): follow the session */
                                        base_errors++;
                                        (void)session_container(b, &c, "warm", cid, sizeof(cid));
                                }
                        } else {
                                struct docker_exec_result res;
                                double t0 = bench_now_ms();
                                if (docker_exec_run(b->engine, cid, &spec, NULL, 0, 0, 30000, &res, NULL) == 0) {
                                        series_add(&eng->s, bench_now_ms() - t0);
                                        docker_exec_result_done(&res);
                                }
                        }
                        c1 = cpu_now(b);
                        cpu_add_delta(&cpu[which], &c0, &c1);
                }
        }
        conn_close(&c);
        {
                double n = b->sz.exec;
                /* 10 ms clock ticks: per-sample deltas are coarse, their sum over n samples is not */
                snprintf(m->note, sizeof(m->note),
                         "CPU per exec, ms (daemon / dockerd / whole machine, which includes anything else running): "
                         "API %.1f / %.1f / %.1f; docker exec "
                         "CLI - / %.1f / %.1f; engine reference - / %.1f / %.1f%s",
                         cpu[0].daemon / n, cpu[0].dockerd / n, cpu[0].machine / n, cpu[1].dockerd / n,
                         cpu[1].machine / n, cpu[2].dockerd / n, cpu[2].machine / n,
                         errors || base_errors ? "; some samples failed" : "");
        }
        if (errors || base_errors)
                say("exec: %d failed sandboxd samples, %d failed baseline samples", errors, base_errors);
        return 0;
}

static int phase_run_code(struct bench *b)
{
        struct measurement *m = report_add(&b->rep, "run_code_python", "ms");
        struct conn c;
        int errors = 0;

        snprintf(m->note, sizeof(m->note), "run_code {language: python, code: print(1)} in the warm session");
        measurement_target(m, TARGET_P50_LE, 40, "p50 <= 40 ms");
        if (conn_open(&c, b->cfg.api_socket) < 0)
                return -1;
        say("run_code python: %d samples", b->sz.run_code);
        for (int i = 0; i < b->sz.run_code + 2; i++) {
                cJSON *p = cJSON_CreateObject(), *reply;
                const cJSON *res;
                double t0 = bench_now_ms(), dt;
                cJSON_AddStringToObject(p, "session", "warm");
                cJSON_AddStringToObject(p, "language", "python");
                cJSON_AddStringToObject(p, "code", "print(1)");
                reply = api_call(&c, b->token, "run_code", p, CALL_TIMEOUT_MS);
                dt = bench_now_ms() - t0;
                res = reply_result(reply);
                if (!res || json_num(res, "exit_code", -1) != 0 || !json_str(res, "stdout") ||
                    strcmp(json_str(res, "stdout"), "1\n") != 0) {
                        char why[512];
                        reply_error(reply, why, sizeof(why));
                        say("run_code failed: %s", res ? "wrong output or exit code" : why);
                        errors++;
                } else if (i >= 2) { /* two warm-ups */
                        series_add(&m->s, dt);
                }
                cJSON_Delete(reply);
        }
        conn_close(&c);
        if (errors)
                snprintf(m->note + strlen(m->note), sizeof(m->note) - strlen(m->note), "; %d failed", errors);
        return 0;
}

/* --only network: the daemon with S2 sessions, every one with its block of
 * host ports served by the gateway (no docker-proxy), against what Docker's
 * publishing costs: the docker-proxy PSS of one baseline container with
 * the same block, times S2. */
static void phase_network_rss(struct bench *b, int sessions)
{
        struct measurement *m = report_add(&b->rep, "daemon_rss_with_port_listeners", "MB");
        long pss0 = 0, pss1 = 0, listen_kb;
        int procs0, procs1 = 0;
        char ws[SBX_PATH_MAX], id[128] = "";
        double run_ms, per_container_mb = -1;

        grow_sessions(b, 0, sessions, 8);
        series_add(&m->s, status_mb(b, "VmRSS"));
        listen_kb = 0;
        {
                char cmd[128], buf[32] = "";
                FILE *f;
                /* the daemon's own listening TCP sockets: the session blocks */
                snprintf(cmd, sizeof(cmd), "ss -Hltnp 2>/dev/null | grep -c 'pid=%d,' || true", (int)b->daemon);
                f = popen(cmd, "r");
                if (f && fgets(buf, sizeof(buf), f))
                        listen_kb = atol(buf);
                if (f)
                        pclose(f);
        }
        procs0 = procs_by_comm("docker-proxy", &pss0);
        if (make_workspace(b, 9999, ws, sizeof(ws)) == 0 && baseline_run(b, ws, true, id, sizeof(id), &run_ms) == 0) {
                sleep(1);
                procs1 = procs_by_comm("docker-proxy", &pss1);
                /* Docker starts one docker-proxy per published port (and family): a
                 * block costs ports_per_session of them at least */
                if (procs1 > procs0)
                        per_container_mb =
                                (double)(pss1 - pss0) / (procs1 - procs0) * b->cfg.ports_per_session * 1024 / 1e6;
                docker_rm(b, id);
        }
        m->has_baseline = per_container_mb > 0;
        if (m->has_baseline)
                series_add(&m->base, per_container_mb * sessions);
        snprintf(m->baseline_desc, sizeof(m->baseline_desc),
                 "docker-proxy PSS for the same blocks: the PSS of one docker-proxy process (measured on a `docker "
                 "run -p` container) x %d ports (%.2f MB per session) x %d sessions",
                 b->cfg.ports_per_session, per_container_mb, sessions);
        snprintf(m->note, sizeof(m->note),
                 "VmRSS of the daemon with %d sessions whose %d-port blocks it serves itself (%ld listening TCP "
                 "sockets of the daemon, no docker-proxy); the baseline is an estimate from the %d docker-proxy "
                 "processes that appeared for one published container",
                 sessions, b->cfg.ports_per_session, listen_kb, procs1 - procs0);
        say("daemon RSS with %d sessions and their port listeners: %.1f MB; docker-proxy PSS for the same: %.1f MB",
            sessions, status_mb(b, "VmRSS"), per_container_mb * sessions);
}

static void rss_point(struct bench *b, int sessions, bool target, const char *extra)
{
        char name[64];
        struct measurement *m;
        double v = status_mb(b, "VmRSS");
        long proxy_kb = 0;
        int proxies = procs_by_comm("docker-proxy", &proxy_kb);

        if (sessions)
                snprintf(name, sizeof(name), "daemon_rss_%d_sessions", sessions);
        else
                snprintf(name, sizeof(name), "daemon_rss_idle");
        m = report_add(&b->rep, name, "MB");
        series_add(&m->s, v);
        if (target)
                measurement_target(m, TARGET_P50_LE, 40, "<= 40 MB at 200 sessions");
        snprintf(m->note, sizeof(m->note),
                 "VmRSS of the daemon process alone (pid %d), %d live sessions: %.1f MB anonymous + %.1f MB "
                 "file-backed (shared libraries), %ld threads; outside the daemon the machine runs %d docker-proxy "
                 "processes (%.0f MB PSS together): Docker starts one per published port%s%s",
                 (int)b->daemon, sessions, status_mb(b, "RssAnon"), status_mb(b, "RssFile"),
                 proc_status_kb(b->daemon, "Threads"), proxies, (double)proxy_kb * 1024 / 1e6,
                 sessions && !target ? "; the 40 MB target is for 200 sessions, which this mode does not reach" : "",
                 extra ? extra : "");
        say("%s: %.1f MB", name, v);
}

/* The concurrent phase: every worker owns one session (and, for the API,
 * one connection); the baseline runs the docker exec CLI on the same
 * containers with the same concurrency. */
struct conc {
        struct bench *b;
        bool cli;
        int execs;
        char (*cids)[128];
        struct series *lat;
        int errors;
        pthread_barrier_t start;
};

struct conc_worker {
        struct conc *k;
        int index;
        pthread_t th;
};

static void *conc_main(void *ud)
{
        struct conc_worker *w = ud;
        struct conc *k = w->k;
        char name[32], why[512] = "";
        struct conn c = {.fd = -1};
        bool connected = k->cli || conn_open(&c, k->b->cfg.api_socket) == 0;

        snprintf(name, sizeof(name), "s%d", w->index);
        pthread_barrier_wait(&k->start);
        for (int i = 0; i < k->execs; i++) {
                double dt;
                if (k->cli)
                        dt = docker_exec_cli(k->b, k->cids[w->index]);
                else
                        dt = connected ? timed_exec(k->b, &c, name, "true", why, sizeof(why)) : -1;
                if (dt < 0) {
                        if (__atomic_add_fetch(&k->errors, 1, __ATOMIC_RELAXED) <= 5 && !k->cli)
                                say("concurrent exec in %s failed: %s", name, connected ? why : "cannot connect");
                } else {
                        series_add(k->lat, dt);
                }
        }
        if (!k->cli)
                conn_close(&c);
        return NULL;
}

/* One round of n workers x execs; returns the wall time in ms. */
static double conc_round(struct conc *k, int n)
{
        struct conc_worker *w = calloc((size_t)n, sizeof(*w));
        double t0;

        pthread_barrier_init(&k->start, NULL, (unsigned)n + 1);
        for (int i = 0; i < n; i++) {
                w[i] = (struct conc_worker){.k = k, .index = i};
                pthread_create(&w[i].th, NULL, conc_main, &w[i]);
        }
        pthread_barrier_wait(&k->start);
        t0 = bench_now_ms();
        for (int i = 0; i < n; i++)
                pthread_join(w[i].th, NULL);
        pthread_barrier_destroy(&k->start);
        free(w);
        return bench_now_ms() - t0;
}

static int phase_concurrency(struct bench *b)
{
        int n = b->sz.conc_sessions, total = n * b->sz.conc_execs;
        char name[64];
        struct measurement *lat, *thr, *err;
        struct conc api = {.b = b, .execs = b->sz.conc_execs}, cli = {.b = b, .cli = true, .execs = b->sz.conc_execs};
        char(*cids)[128] = calloc((size_t)n, sizeof(*cids));
        double wall, wall_cli;
        struct cpu c0, c1, cpu_api = {0}, cpu_cli = {0};
        struct conn c;

        snprintf(name, sizeof(name), "concurrent_exec_%dx%d", n, api.execs);
        lat = report_add(&b->rep, name, "ms");
        lat->has_baseline = true;
        snprintf(lat->baseline_desc, sizeof(lat->baseline_desc),
                 "%d threads each running the docker exec CLI %d times on the same containers", n, api.execs);
        api.lat = &lat->s;
        cli.lat = &lat->base;
        cli.cids = cids;
        if (conn_open(&c, b->cfg.api_socket) < 0) {
                free(cids);
                return -1;
        }
        for (int i = 0; i < n; i++) {
                snprintf(name, sizeof(name), "s%d", i);
                (void)session_container(b, &c, name, cids[i], sizeof(cids[i]));
        }
        conn_close(&c);

        say("concurrency: %d sessions x %d execs, all at once (API, then the CLI baseline)", n, api.execs);
        c0 = cpu_now(b);
        wall = conc_round(&api, n);
        c1 = cpu_now(b);
        cpu_add_delta(&cpu_api, &c0, &c1);
        say("concurrency: API %.1f exec/s, %d errors", (double)(total - api.errors) / (wall / 1000), api.errors);
        c0 = cpu_now(b);
        wall_cli = conc_round(&cli, n);
        c1 = cpu_now(b);
        cpu_add_delta(&cpu_cli, &c0, &c1);
        say("concurrency: CLI %.1f exec/s, %d errors", (double)(total - cli.errors) / (wall_cli / 1000), cli.errors);
        free(cids);

        snprintf(lat->note, sizeof(lat->note),
                 "latency of each exec `true` while %d sessions exec at once; CPU per exec, ms (daemon / dockerd "
                 "/ whole machine): API %.1f / %.1f / %.1f, CLI - / %.1f / %.1f; the machine was busy %.0f%% "
                 "(API) and %.0f%% (CLI) of its %ld CPUs",
                 n, cpu_api.daemon / total, cpu_api.dockerd / total, cpu_api.machine / total, cpu_cli.dockerd / total,
                 cpu_cli.machine / total, 100 * cpu_api.machine / (wall * (double)sysconf(_SC_NPROCESSORS_ONLN)),
                 100 * cpu_cli.machine / (wall_cli * (double)sysconf(_SC_NPROCESSORS_ONLN)),
                 sysconf(_SC_NPROCESSORS_ONLN));
        thr = report_add(&b->rep, "concurrent_throughput", "exec/s");
        series_add(&thr->s, (double)(total - api.errors) / (wall / 1000));
        thr->has_baseline = true;
        series_add(&thr->base, (double)(total - cli.errors) / (wall_cli / 1000));
        snprintf(thr->baseline_desc, sizeof(thr->baseline_desc), "the same execs through the docker exec CLI");
        snprintf(thr->note, sizeof(thr->note), "%d execs in %.2f s (CLI: %.2f s, %d errors)", total, wall / 1000,
                 wall_cli / 1000, cli.errors);
        err = report_add(&b->rep, "concurrent_errors", "count");
        series_add(&err->s, api.errors);
        measurement_target(err, TARGET_EQ, 0, "0 errors");
        if (n != 50 || api.execs != 20)
                snprintf(err->note, sizeof(err->note), "--quick: %d sessions x %d execs instead of 50 x 20", n,
                         api.execs);
        return 0;
}

/* A client of the events stream doing what the daemon's die handler does:
 * on the die event of the watched container, inspect it. */
struct watch {
        struct bench *b;
        volatile bool stop;
        pthread_mutex_t lock;
        char target[128];
        double die_at, inspected_at; /* monotonic ms; 0 until seen */
};

static int watch_event(const struct docker_event *ev, void *ud)
{
        struct watch *w = ud;
        bool mine;

        pthread_mutex_lock(&w->lock);
        mine = w->target[0] && strcmp(ev->id, w->target) == 0 && strcmp(ev->action, "die") == 0;
        pthread_mutex_unlock(&w->lock);
        if (mine) {
                struct docker_container_info info;
                double t = bench_now_ms(), t2;
                (void)docker_container_inspect(w->b->engine, ev->id, &info, NULL);
                t2 = bench_now_ms();
                pthread_mutex_lock(&w->lock);
                w->die_at = t;
                w->inspected_at = t2;
                pthread_mutex_unlock(&w->lock);
        }
        return w->stop;
}

static void *watch_main(void *ud)
{
        struct watch *w = ud;
        char inst[128];
        const char *filters[] = {inst, NULL}, *actions[] = {"die", NULL};

        snprintf(inst, sizeof(inst), "sandboxd.instance=%s", w->b->cfg.instance);
        (void)docker_events_follow(w->b->engine, filters, actions, watch_event, w, &w->stop, 0, NULL);
        return NULL;
}

static int phase_detection(struct bench *b)
{
        struct measurement *m = report_add(&b->rep, "detection_latency", "ms");
        struct measurement *after = report_add(&b->rep, "detection_after_exit", "ms");
        struct measurement *ev = report_add(&b->rep, "die_event_received", "ms");
        struct measurement *insp = report_add(&b->rep, "inspect_after_die", "ms");
        struct watch w = {.b = b};
        struct series cli;
        pthread_t watcher;
        struct conn c;
        int misses = 0;

        measurement_target(m, TARGET_P50_LE, 1000, "p50 <= 1000 ms");
        series_init(&cli);
        pthread_mutex_init(&w.lock, NULL);
        if (conn_open(&c, b->cfg.api_socket) < 0)
                return -1;
        pthread_create(&watcher, NULL, watch_main, &w);
        usleep(300000); /* let the events stream connect */
        say("detection: %d kills", b->sz.detect);
        for (int i = 0; i < b->sz.detect; i++) {
                char name[32], cid[128], state[32], why[512];
                char *argv[] = {(char *)b->docker, "kill", cid, NULL};
                double t0, t1 = -1;
                pid_t kill_pid;

                snprintf(name, sizeof(name), "s%d", i);
                if (session_container(b, &c, name, cid, sizeof(cid)) < 0) {
                        misses++;
                        continue;
                }
                pthread_mutex_lock(&w.lock);
                snprintf(w.target, sizeof(w.target), "%s", cid);
                w.die_at = w.inspected_at = 0;
                pthread_mutex_unlock(&w.lock);

                /* The CLI returns only once Docker has finished tearing the container
                 * down, so poll while it runs, not after. */
                t0 = bench_now_ms();
                kill_pid = spawn_quiet(argv);
                if (kill_pid < 0) {
                        misses++;
                        continue;
                }
                while (bench_now_ms() - t0 < 30000) {
                        if (strcasecmp(admin_session_state(b, name, state, sizeof(state)), "error") == 0) {
                                t1 = bench_now_ms();
                                break;
                        }
                        usleep(2000);
                }
                if (wait_exit(kill_pid) == 0)
                        series_add(&cli, bench_now_ms() - t0); /* an upper bound once t1 is past */
                if (t1 < 0) {
                        misses++;
                } else {
                        struct docker_container_info info;
                        int64_t wall1 = bench_wall_ms() - (int64_t)(bench_now_ms() - t1);
                        series_add(&m->s, t1 - t0);
                        /* the old container is still there until the next use replaces it */
                        if (docker_container_inspect(b->engine, cid, &info, NULL) == 0) {
                                int64_t fin = rfc3339_ms(info.finished_at);
                                if (fin > 0)
                                        series_add(&after->s, (double)(wall1 - fin));
                        }
                }
                for (int k = 0; k < 300; k++) { /* the watcher's inspect may still be blocked */
                        double d, in;
                        pthread_mutex_lock(&w.lock);
                        d = w.die_at;
                        in = w.inspected_at;
                        pthread_mutex_unlock(&w.lock);
                        if (in > 0) {
                                series_add(&ev->s, d - t0);
                                series_add(&insp->s, in - d);
                                break;
                        }
                        usleep(10000);
                }
                /* bring it back for the later phases (the next use recreates it) */
                if (timed_exec(b, &c, name, "true", why, sizeof(why)) < 0)
                        say("recreating %s failed: %s", name, why);
        }
        w.stop = true;
        pthread_join(watcher, NULL);
        pthread_mutex_destroy(&w.lock);
        conn_close(&c);
        snprintf(m->note, sizeof(m->note),
                 "from spawning `docker kill` (CLI) to session.show saying error, polled every 2 ms while the "
                 "CLI runs; the CLI itself returned after p50 %.0f ms (it waits for Docker's teardown)%s",
                 series_pct(&cli, 50), misses ? "; some kills were not detected within 30 s" : "");
        snprintf(after->note, sizeof(after->note),
                 "reference: from the container's State.FinishedAt (the engine's exit time) to session.show "
                 "saying error");
        snprintf(ev->note, sizeof(ev->note),
                 "reference: from spawning `docker kill` to the die event reaching a client of the events "
                 "stream (the bench's own, filtered like the daemon's)");
        snprintf(insp->note, sizeof(insp->note),
                 "reference: how long a container inspect issued on receipt of that die event takes, which is "
                 "what the daemon's die handler does before it marks the session");
        series_done(&cli);
        return misses ? -1 : 0;
}

/* What the published ports cost when a container dies: docker kill of a
 * baseline container with the session's port block, and without any,
 * interleaved. The CLI returns once Docker has torn the container down,
 * which is also when an inspect issued on its die event returns. */
static int phase_teardown(struct bench *b)
{
        struct measurement *m = report_add(&b->rep, "docker_kill_teardown", "ms");

        m->has_baseline = true;
        snprintf(m->baseline_desc, sizeof(m->baseline_desc),
                 "the same container without published ports (--network %s, no -p)", BASELINE_NETWORK);
        snprintf(m->note, sizeof(m->note),
                 "reference, plain Docker: `docker kill` of a baseline container with its %d published ports, "
                 "until the CLI returns (Docker has torn the container down)",
                 b->cfg.ports_per_session);
        say("teardown: %d interleaved pairs of docker kill with and without published ports", b->sz.detect);
        for (int i = 0; i < b->sz.detect; i++)
                for (int k = 0; k < 2; k++) {
                        bool publish = (k == 0) == (i % 2 == 0);
                        char id[128] = "", ws[SBX_PATH_MAX];
                        char *argv[] = {(char *)b->docker, "kill", id, NULL};
                        double run_ms, t0;
                        if (make_workspace(b, 1000 + 2 * i + k, ws, sizeof(ws)) < 0 ||
                            baseline_run(b, ws, publish, id, sizeof(id), &run_ms) < 0)
                                continue;
                        usleep(300000); /* let it settle, as a session container would have */
                        t0 = bench_now_ms();
                        if (run_cmd(argv, NULL, 0, NULL, 0) == 0)
                                series_add(publish ? &m->s : &m->base, bench_now_ms() - t0);
                        docker_rm(b, id);
                }
        return 0;
}

static int phase_restart(struct bench *b)
{
        struct measurement *ready = report_add(&b->rep, "restart_ready", "ms");
        struct measurement *rec = report_add(&b->rep, "restart_reconciled", "ms");
        char last[4096] = "";
        int n = b->sz.restart_sessions;

        say("restart: %d x SIGKILL + start with %d sessions", b->sz.restart, n);
        for (int i = 0; i < b->sz.restart; i++) {
                long off;
                int64_t wall0, rec_ms;
                double dt;

                daemon_stop(b, SIGKILL);
                off = file_size(b->log_path);
                wall0 = bench_wall_ms();
                dt = daemon_start(b, "s0");
                if (dt < 0)
                        return -1;
                series_add(&ready->s, dt);
                rec_ms = find_reconciled(b->log_path, off, last, sizeof(last));
                if (rec_ms >= 0)
                        series_add(&rec->s, (double)(rec_ms - wall0));
                else
                        say("no \"reconciled:\" line in %s after the restart", b->log_path);
        }
        snprintf(ready->note, sizeof(ready->note),
                 "SIGKILL with %d sessions alive, then from exec of the daemon until the admin socket answers "
                 "health and the API socket answers session_info",
                 n);
        {
                char *msg = strstr(last, "\"msg\":\"");
                char *end = msg ? strchr(msg + 7, '"') : NULL;
                if (end)
                        *end = '\0';
                snprintf(rec->note, sizeof(rec->note),
                         "from exec of the daemon to the timestamp of its log line (ms resolution): %s",
                         msg ? msg + 7 : "(not found)");
        }
        return 0;
}

/* ---- main ---- */

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: sandboxd-bench [--quick] --daemon BIN --bench-id ID [--json PATH] [--log FILE]\n"
                "                      [--pidfile FILE] [--baseline-port N] [--docker CLI]\n"
                "                      [--only noisy|http|network|pool|restart|cells|snapshot|pause|microvm]\n"
                "                      [--http-ca FILE]\n"
                "\n"
                "Starts BIN (configured by the SANDBOXD_* environment, which this program reads\n"
                "too) and measures it against plain docker run / docker exec. Meant to be run by\n"
                "scripts/bench.sh, which prepares that environment and cleans up afterwards.\n"
                "Baseline containers are labelled sandboxd.bench=ID. --only noisy runs the noisy\n"
                "neighbour phase alone, --only http the HTTPS round trip alone, --only pool the warm pool rows, --only restart the restart phase alone. --http-ca: the CA of\n"
                "the daemon's HTTPS certificate (its http.listen); without it there is no HTTPS row.\n");
}

int main(int argc, char **argv)
{
        static const struct option opts[] = {
                {"quick", no_argument, NULL, 'q'},
                {"daemon", required_argument, NULL, 'd'},
                {"json", required_argument, NULL, 'j'},
                {"log", required_argument, NULL, 'l'},
                {"pidfile", required_argument, NULL, 'p'},
                {"bench-id", required_argument, NULL, 'b'},
                {"baseline-port", required_argument, NULL, 'P'},
                {"docker", required_argument, NULL, 'D'},
                {"only", required_argument, NULL, 'o'},
                {"help", no_argument, NULL, 'h'},
                {"http-ca", required_argument, NULL, 'C'},
                {0},
        };
        struct bench b = {.docker = "docker", .json_path = "bench/results.json"};
        struct sbx_error err = {0};
        double t_start = bench_now_ms(), dt;
        char log_default[SBX_PATH_MAX + 16];
        int c, rc = 0, s1, s2;
        bool only_noisy = false, only_http = false, only_network = false, only_pool = false, only_restart = false,
             only_cells = false, only_snapshot = false, only_pause = false, only_microvm = false;

        while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (c) {
                case 'q':
                        b.quick = true;
                        break;
                case 'd':
                        b.daemon_bin = optarg;
                        break;
                case 'j':
                        b.json_path = optarg;
                        break;
                case 'l':
                        b.log_path = optarg;
                        break;
                case 'p':
                        b.pid_path = optarg;
                        break;
                case 'b':
                        b.bench_id = optarg;
                        break;
                case 'P':
                        b.base_port = atoi(optarg);
                        break;
                case 'D':
                        b.docker = optarg;
                        break;
                case 'C':
                        b.http_ca = optarg;
                        break;
                case 'o':
                        if (strcmp(optarg, "noisy") == 0)
                                only_noisy = true;
                        else if (strcmp(optarg, "http") == 0)
                                only_http = true;
                        else if (strcmp(optarg, "network") == 0)
                                only_network = true;
                        else if (strcmp(optarg, "pool") == 0)
                                only_pool = true;
                        else if (strcmp(optarg, "restart") == 0)
                                only_restart = true;
                        else if (strcmp(optarg, "cells") == 0)
                                only_cells = true;
                        else if (strcmp(optarg, "snapshot") == 0)
                                only_snapshot = true;
                        else if (strcmp(optarg, "pause") == 0)
                                only_pause = true;
                        else if (strcmp(optarg, "microvm") == 0)
                                only_microvm = true;
                        else {
                                usage(stderr);
                                return 2;
                        }
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (!b.daemon_bin || !b.bench_id) {
                usage(stderr);
                return 2;
        }
        if (config_load(NULL, &b.cfg, &err) < 0) {
                say("invalid configuration: %s", err.msg);
                return 2;
        }
        b.sz = b.quick ? quick_sizes : full_sizes;
        s1 = b.sz.conc_sessions;
        s2 = b.sz.rss_sessions;
        if (b.cfg.max_sessions < s2 + 2 ||
            (b.cfg.port_range_hi - b.cfg.port_range_lo + 1) / (b.cfg.ports_per_session ? b.cfg.ports_per_session : 1) <
                    s2 + 2 ||
            b.cfg.max_exec_global < s1 || b.cfg.max_exec_per_session < 1) {
                say("the daemon's configuration is too small for %d sessions and %d concurrent execs "
                    "(limits.sessions %d, port_range %d-%d, limits.exec_global %d)",
                    s2, s1, b.cfg.max_sessions, b.cfg.port_range_lo, b.cfg.port_range_hi, b.cfg.max_exec_global);
                return 2;
        }
        if (!b.base_port)
                b.base_port = b.cfg.port_range_hi + 1;
        if (!b.log_path) {
                snprintf(log_default, sizeof(log_default), "%s/daemon.log", b.cfg.data_dir);
                b.log_path = log_default;
        }
        snprintf(b.ws_root, sizeof(b.ws_root), "%s/baseline-workspaces", b.cfg.data_dir);
        signal(SIGPIPE, SIG_IGN);
        curl_global_init(CURL_GLOBAL_ALL);
        b.engine = docker_new(b.cfg.docker_socket, 30000);
        if (!b.engine || docker_negotiate(b.engine, &err) < 0) {
                say("cannot reach Docker: %s", err.msg);
                return 1;
        }
        b.dockerd = pidfile_read("/var/run/docker.pid");
        mkdir(b.cfg.data_dir, 0711);
        if (mkdir(b.ws_root, 0711) < 0 && errno != EEXIST) {
                say("cannot create %s: %m", b.ws_root);
                return 1;
        }
        b.rep.mode = b.quick ? "quick" : "full";
        b.rep.machine = machine_info(&b);
        b.rep.config = config_info(&b);

        dt = daemon_start(&b, "s0");
        if (dt < 0)
                return 1;
        say("daemon pid %d answering after %.0f ms (instance %s, image %s)", (int)b.daemon, dt, b.cfg.instance,
            b.cfg.image);
        if (create_token(&b) < 0) {
                rc = 1;
                goto out;
        }
        sleep(1);
        rss_point(&b, 0, false, NULL);

        if (only_snapshot) {
                if (phase_snapshot(&b) < 0)
                        rc = 1;
                goto out;
        }
        if (only_cells) {
                if (phase_cells(&b) < 0)
                        rc = 1;
                goto out;
        }
        if (only_pause) {
                if (phase_pause(&b) < 0)
                        rc = 1;
                goto out;
        }
        if (only_microvm) {
                if (phase_microvm(&b) < 0)
                        rc = 1;
                goto out;
        }
        if (only_noisy || only_http || only_pool) {
                if ((only_noisy ? phase_noisy(&b) : only_pool ? phase_pool(&b) : phase_http(&b)) < 0)
                        rc = 1;
                goto out;
        }
        if (only_restart) {
                grow_sessions(&b, 0, b.sz.restart_sessions, 8);
                if (phase_restart(&b) < 0)
                        rc = 1;
                goto out;
        }
        if (only_network) {
                if (phase_cold(&b) < 0)
                        rc = 1;
                else
                        phase_network_rss(&b, s2);
                goto out;
        }
        if (phase_cold(&b) < 0 || phase_exec(&b) < 0 || phase_http(&b) < 0 || phase_run_code(&b) < 0 ||
            phase_noisy(&b) < 0 || phase_pause(&b) < 0) {
                rc = 1;
                goto out;
        }
        (void)admin_destroy(&b, "warm"); /* from here on the bulk sessions s0.. are all there is */
        grow_sessions(&b, 0, s1, 8);
        rss_point(&b, s1, false, NULL);
        phase_concurrency(&b);
        if (phase_detection(&b) < 0)
                rc = 1;
        phase_teardown(&b);
        /* RSS at S2 from the process that went through everything above */
        grow_sessions(&b, s1, s2, 8);
        rss_point(&b, s2, s2 == 200, NULL);
        {
                struct measurement *peak = report_add(&b.rep, "daemon_rss_peak", "MB");
                series_add(&peak->s, status_mb(&b, "VmHWM"));
                snprintf(peak->note, sizeof(peak->note),
                         "VmHWM of the daemon process before the restart phase: the most it held at any point of "
                         "the cold, exec, concurrency (%d connections at once), detection and RSS phases",
                         s1);
        }
        shrink_sessions(&b, b.sz.restart_sessions, s2, 8);
        if (phase_restart(&b) < 0) {
                rc = 1;
                goto out;
        }

out:
        daemon_stop(&b, SIGTERM);
        b.rep.wall_s = (bench_now_ms() - t_start) / 1000;
        report_print(&b.rep, stdout);
        {
                char *mj = cJSON_PrintUnformatted(b.rep.machine);
                printf("machine: %s\n", mj ? mj : "?");
                free(mj);
        }
        printf("wall time: %.0f s (%s mode)\n", b.rep.wall_s, b.rep.mode);
        if (report_write_json(&b.rep, b.json_path) < 0) {
                say("cannot write %s: %m", b.json_path);
                rc = 1;
        } else {
                printf("results written to %s\n", b.json_path);
        }
        report_done(&b.rep);
        docker_free(b.engine);
        curl_global_cleanup();
        return rc;
}
