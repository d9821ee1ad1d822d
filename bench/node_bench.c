/* node_bench.c — the exec round trip through the in-process node link
 * against a separate `sandboxd node` over TLS on loopback (issue 26,
 * Speed). Two daemons at once, each with its own instance, data directory
 * and session: A runs its node part in process (the default), B listens on
 * node.listen and a `sandboxd node` child dials it. Samples alternate
 * between A and B (the order rotates), so both see the same machine load.
 * One sample is exec_run of `true` through the library (no API socket): the
 * request, the runner round trip and the recorded end, what the link
 * changes.
 *
 * Usage: sandboxd-node-bench --pki DIR --daemon PATH [--samples N] [--port P] [--id ID]
 *   instances bench-ID-node-a and bench-ID-node-b (the caller's sweep finds them)
 *   DIR holds ca.pem, sandboxd-control.{pem,key} and node1.{pem,key}
 *   (scripts/bench.sh makes them). Prints one JSON object on stdout. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandboxd/config.h"
#include "sandboxd/daemon.h"
#include "sandboxd/engine_docker.h"
#include "sandboxd/exec.h"
#include "sandboxd/node.h"

static double now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
        int i = (int)(p / 100.0 * (n - 1) + 0.5);
        return n ? v[i] : -1;
}

static double one_exec(struct daemon *d, const char *session)
{
        struct exec_request req = {.user = "bench", .session = session, .command = "true", .actor = "bench"};
        struct exec_result res;
        struct sbx_error err = {0};
        double t0 = now_ms();
        if (exec_run(d->exec, &req, &res, &err) < 0) {
                fprintf(stderr, "node-bench: exec failed: %s\n", err.msg);
                return -1;
        }
        double dt = now_ms() - t0;
        bool ok = res.exit_code == 0 && strcmp(res.via, "runner") == 0;
        if (!ok)
                fprintf(stderr, "node-bench: exit %d via %s\n", res.exit_code, res.via);
        exec_result_done(&res);
        return ok ? dt : -1;
}

static void base_config(struct sbx_config *cfg, const char *tmp, const char *name, const char *id)
{
        config_defaults(cfg);
        snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s/%s", tmp, name);
        snprintf(cfg->instance, sizeof(cfg->instance), "bench-%s-node-%s", id, name);
        snprintf(cfg->log_level, sizeof(cfg->log_level), "warn");
        cfg->pool_size = 0;
        cfg->port_range_lo = 15600;
        cfg->port_range_hi = 15999;
        if (strcmp(name, "b") == 0) {
                cfg->port_range_lo = 16000;
                cfg->port_range_hi = 16399;
        }
        const char *image = getenv("SANDBOXD_IMAGE");
        if (image && *image)
                snprintf(cfg->image, sizeof(cfg->image), "%s", image);
}

int main(int argc, char **argv)
{
        static const struct option opts[] = {{"pki", required_argument, NULL, 'k'},
                                             {"daemon", required_argument, NULL, 'd'},
                                             {"samples", required_argument, NULL, 'n'},
                                             {"port", required_argument, NULL, 'p'},
                                             {"id", required_argument, NULL, 'i'},
                                             {0}};
        const char *pki = NULL, *bin = NULL, *run_id = NULL;
        int samples = 200, port = 21990, c;
        char tmp[] = "/tmp/sandboxd-node-bench-XXXXXX", id[32], conf[SBX_PATH_MAX + 32];
        struct sbx_config ca, cb;
        struct daemon *a = NULL, *b = NULL;
        struct daemon_options dopts = {0};
        struct sbx_error err = {0};
        int rc = 1;
        pid_t agent = -1;

        while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                if (c == 'k')
                        pki = optarg;
                else if (c == 'd')
                        bin = optarg;
                else if (c == 'n')
                        samples = atoi(optarg);
                else if (c == 'p')
                        port = atoi(optarg);
                else if (c == 'i')
                        run_id = optarg;
                else
                        return 2;
        }
        if (!pki || !bin || samples < 1) {
                fprintf(stderr, "usage: sandboxd-node-bench --pki DIR --daemon PATH [--samples N] [--port P]\n");
                return 2;
        }
        signal(SIGPIPE, SIG_IGN);
        if (!mkdtemp(tmp) || engine_docker_global_init() < 0)
                return 1;
        snprintf(id, sizeof(id), "%.31s", run_id ? run_id : "local");
        base_config(&ca, tmp, "a", id);
        base_config(&cb, tmp, "b", id);
        snprintf(cb.node_listen, sizeof(cb.node_listen), "127.0.0.1:%d", port);
        snprintf(cb.node_cert, sizeof(cb.node_cert), "%s/sandboxd-control.pem", pki);
        snprintf(cb.node_key, sizeof(cb.node_key), "%s/sandboxd-control.key", pki);
        snprintf(cb.node_ca, sizeof(cb.node_ca), "%s/ca.pem", pki);
        mkdir(ca.data_dir, 0711);
        mkdir(cb.data_dir, 0711);
        if (daemon_open(&ca, &dopts, &a, &err) < 0 || daemon_open(&cb, &dopts, &b, &err) < 0) {
                fprintf(stderr, "node-bench: %s\n", err.msg);
                goto out;
        }
        snprintf(conf, sizeof(conf), "%s/node.conf", tmp);
        FILE *f = fopen(conf, "w");
        if (!f)
                goto out;
        fprintf(f,
                "node.connect = %s\nnode.cert = %s/node1.pem\nnode.key = %s/node1.key\nnode.ca = %s/ca.pem\n"
                "data_dir = %s/node\nlog_level = warn\n",
                cb.node_listen, pki, pki, pki, tmp);
        fclose(f);
        agent = fork();
        if (agent == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                execl(bin, bin, "node", "--config", conf, (char *)NULL);
                _exit(127);
        }
        if (agent < 0 || !node_server_wait(b->node, 30000)) {
                fprintf(stderr, "node-bench: the node agent did not connect\n");
                goto out;
        }
        double *va = calloc((size_t)samples, sizeof(double)), *vb = calloc((size_t)samples, sizeof(double));
        int na = 0, nb = 0;
        if (!va || !vb)
                goto out;
        /* the containers, then a warm-up not counted */
        for (int i = 0; i < 4; i++)
                if (one_exec(a, "warm") < 0 || one_exec(b, "warm") < 0)
                        goto out;
        fprintf(stderr, "node-bench: %d interleaved samples\n", samples);
        for (int i = 0; i < samples; i++) {
                double x, y;
                if (i % 2) {
                        x = one_exec(a, "warm");
                        y = one_exec(b, "warm");
                } else {
                        y = one_exec(b, "warm");
                        x = one_exec(a, "warm");
                }
                if (x >= 0)
                        va[na++] = x;
                if (y >= 0)
                        vb[nb++] = y;
        }
        qsort(va, (size_t)na, sizeof(double), cmp);
        qsort(vb, (size_t)nb, sizeof(double), cmp);
        printf("{\"exec_roundtrip_in_process\": {\"unit\": \"ms\", \"n\": %d, \"p50\": %.2f, \"p90\": %.2f, \"p99\": "
               "%.2f},\n \"exec_roundtrip_node_tls\": {\"unit\": \"ms\", \"n\": %d, \"p50\": %.2f, \"p90\": %.2f, "
               "\"p99\": %.2f},\n \"note\": \"exec_run of true through the library, one warm session per daemon, "
               "samples interleaved; node_tls: a separate sandboxd node over TLS 1.3 on loopback\"}\n",
               na, pct(va, na, 50), pct(va, na, 90), pct(va, na, 99), nb, pct(vb, nb, 50), pct(vb, nb, 90),
               pct(vb, nb, 99));
        rc = na == samples && nb == samples ? 0 : 1;
        free(va);
        free(vb);
out:
        daemon_close(a);
        daemon_close(b);
        if (agent > 0) {
                kill(agent, SIGTERM);
                waitpid(agent, NULL, 0);
        }
        {
                char cmd[512];
                snprintf(cmd, sizeof(cmd),
                         "docker ps -aq --filter label=sandboxd.instance=%s --filter label=sandboxd.managed=1 | "
                         "xargs -r docker rm -f >/dev/null; docker ps -aq --filter label=sandboxd.instance=%s | "
                         "xargs -r docker rm -f >/dev/null; rm -rf '%s'",
                         ca.instance, cb.instance, tmp);
                if (system(cmd) != 0)
                        fprintf(stderr, "node-bench: cleanup of %s incomplete\n", tmp);
        }
        engine_docker_global_cleanup();
        return rc;
}
