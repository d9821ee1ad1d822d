/* harness.c — what the phases of sandboxd-bench stand on: the daemon under
 * test (start, stop, readiness), its API and admin sockets (token, exec,
 * session info, destroy, creating many sessions at once), the plain-Docker
 * baseline (docker run -d with the flags of src/container.c, docker exec,
 * docker rm), CPU accounting and reading the daemon's log. grow_sessions()
 * runs workers that share only a locked cursor and atomic counters. */
#include "harness.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the daemon ---- */

static void write_pidfile(struct bench *b)
{
        FILE *f;
        if (!b->pid_path)
                return;
        f = fopen(b->pid_path, "we");
        if (f) {
                fprintf(f, "%d\n", (int)b->daemon);
                fclose(f);
        }
}

static bool admin_healthy(struct bench *b)
{
        cJSON *req = cJSON_CreateObject(), *reply;
        bool ok;
        cJSON_AddStringToObject(req, "cmd", "health");
        reply = admin_call(b->cfg.admin_socket, req, 2000);
        ok = reply_ok(reply);
        cJSON_Delete(reply);
        return ok;
}

/* Any authenticated reply from the API socket (session_info of a known
 * session touches no Docker); before a token exists, any reply at all. */
static bool api_answers(struct bench *b, const char *session)
{
        struct conn c;
        cJSON *p, *reply;
        bool ok;

        if (conn_open(&c, b->cfg.api_socket) < 0)
                return false;
        p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "session", session);
        reply = api_call(&c, b->token[0] ? b->token : NULL, "session_info", p, 2000);
        ok = b->token[0] ? reply_ok(reply) : reply != NULL;
        cJSON_Delete(reply);
        conn_close(&c);
        return ok;
}

/* Start the daemon and wait until both sockets answer; returns ms from the
 * spawn to that point, or -1. */
double daemon_start(struct bench *b, const char *probe_session)
{
        double t0 = bench_now_ms();

        b->daemon = daemon_spawn(b->daemon_bin, b->log_path);
        if (b->daemon < 0) {
                say("cannot start %s: %s", b->daemon_bin, strerror((int)-b->daemon));
                return -1;
        }
        write_pidfile(b);
        while (bench_now_ms() - t0 < READY_TIMEOUT_MS) {
                int status;
                if (waitpid(b->daemon, &status, WNOHANG) == b->daemon) {
                        say("the daemon exited during start (status %d); see %s", status, b->log_path);
                        b->daemon = 0;
                        return -1;
                }
                if (admin_healthy(b) && api_answers(b, probe_session))
                        return bench_now_ms() - t0;
                usleep(2000);
        }
        say("the daemon did not answer within %d s; see %s", READY_TIMEOUT_MS / 1000, b->log_path);
        return -1;
}

void daemon_stop(struct bench *b, int sig)
{
        if (b->daemon <= 0)
                return;
        kill(b->daemon, sig);
        while (waitpid(b->daemon, NULL, 0) < 0 && errno == EINTR)
                ;
        b->daemon = 0;
}

int create_token(struct bench *b)
{
        cJSON *req = cJSON_CreateObject(), *reply;
        const char *tok;
        char e[512];

        cJSON_AddStringToObject(req, "cmd", "token.create");
        cJSON_AddStringToObject(req, "user", USER_NAME);
        cJSON_AddStringToObject(req, "role", "agent");
        reply = admin_call(b->cfg.admin_socket, req, 10000);
        tok = json_str(reply_result(reply), "token");
        if (!tok) {
                reply_error(reply, e, sizeof(e));
                say("token.create failed: %s", e);
                cJSON_Delete(reply);
                return -1;
        }
        snprintf(b->token, sizeof(b->token), "%s", tok);
        cJSON_Delete(reply);
        return 0;
}

double status_mb(struct bench *b, const char *key)
{
        long kb = proc_status_kb(b->daemon, key);
        return kb < 0 ? NAN : (double)kb * 1024.0 / 1e6;
}

struct cpu cpu_now(struct bench *b)
{
        return (struct cpu){proc_cpu_ms(b->daemon), b->dockerd > 0 ? proc_cpu_ms(b->dockerd) : NAN, system_busy_ms()};
}

void cpu_add_delta(struct cpu *acc, const struct cpu *t0, const struct cpu *t1)
{
        acc->daemon += t1->daemon - t0->daemon;
        acc->dockerd += t1->dockerd - t0->dockerd;
        acc->machine += t1->machine - t0->machine;
}

/* ---- sessions through the API ---- */

/* exec `true` and require exit code 0; returns the round trip in ms or -1. */
double timed_exec(struct bench *b, struct conn *c, const char *session, const char *cmd, char *why, size_t why_size)
{
        double t0 = bench_now_ms(), dt;
        cJSON *reply = api_exec(c, b->token, session, cmd, CALL_TIMEOUT_MS);
        const cJSON *res = reply_result(reply);

        dt = bench_now_ms() - t0;
        if (!res || json_num(res, "exit_code", -1) != 0) {
                if (!res)
                        reply_error(reply, why, why_size);
                else
                        snprintf(why, why_size, "state %s, exit code %g, stderr %.200s",
                                 json_str(res, "state") ? json_str(res, "state") : "?", json_num(res, "exit_code", -1),
                                 json_str(res, "stderr") ? json_str(res, "stderr") : "");
                dt = -1;
        }
        cJSON_Delete(reply);
        return dt;
}

int session_container(struct bench *b, struct conn *c, const char *session, char *ret_id, size_t size)
{
        cJSON *p = cJSON_CreateObject(), *reply;
        const char *id;
        int r = -1;

        cJSON_AddStringToObject(p, "session", session);
        reply = api_call(c, b->token, "session_info", p, CALL_TIMEOUT_MS);
        id = json_str(reply_result(reply), "container_id");
        if (id) {
                snprintf(ret_id, size, "%s", id);
                r = 0;
        }
        cJSON_Delete(reply);
        return r;
}

const char *admin_session_state(struct bench *b, const char *session, char *buf, size_t size)
{
        cJSON *req = cJSON_CreateObject(), *reply;
        const char *st;

        cJSON_AddStringToObject(req, "cmd", "session.show");
        cJSON_AddStringToObject(req, "user", USER_NAME);
        cJSON_AddStringToObject(req, "session", session);
        reply = admin_call(b->cfg.admin_socket, req, 10000);
        st = json_str(reply_result(reply), "state");
        snprintf(buf, size, "%s", st ? st : "");
        cJSON_Delete(reply);
        return buf;
}

int admin_destroy(struct bench *b, const char *session)
{
        cJSON *req = cJSON_CreateObject(), *reply;
        int r;

        cJSON_AddStringToObject(req, "cmd", "session.destroy");
        cJSON_AddStringToObject(req, "user", USER_NAME);
        cJSON_AddStringToObject(req, "session", session);
        cJSON_AddBoolToObject(req, "purge", true);
        reply = admin_call(b->cfg.admin_socket, req, CALL_TIMEOUT_MS);
        r = reply_ok(reply) ? 0 : -1;
        cJSON_Delete(reply);
        return r;
}

/* Bring bulk sessions s0..s{n-1} to life, `workers` creations at a time. */
struct grow {
        struct bench *b;
        bool destroy;
        int next, upto;
        int errors;
        pthread_mutex_t lock;
};

static void *grow_main(void *ud)
{
        struct grow *g = ud;
        struct conn c;

        if (conn_open(&c, g->b->cfg.api_socket) < 0) {
                __atomic_add_fetch(&g->errors, 1, __ATOMIC_RELAXED);
                return NULL;
        }
        for (;;) {
                char name[32], why[512];
                int i;
                pthread_mutex_lock(&g->lock);
                i = g->next < g->upto ? g->next++ : -1;
                pthread_mutex_unlock(&g->lock);
                if (i < 0)
                        break;
                snprintf(name, sizeof(name), "s%d", i);
                if (g->destroy ? admin_destroy(g->b, name) < 0
                               : timed_exec(g->b, &c, name, "true", why, sizeof(why)) < 0) {
                        say("%s session %s failed%s%s", g->destroy ? "destroying" : "creating", name,
                            g->destroy ? "" : ": ", g->destroy ? "" : why);
                        __atomic_add_fetch(&g->errors, 1, __ATOMIC_RELAXED);
                }
        }
        conn_close(&c);
        return NULL;
}

static int run_workers(struct bench *b, bool destroy, int from, int upto, int workers)
{
        struct grow g = {.b = b, .destroy = destroy, .next = from, .upto = upto};
        pthread_t th[16];
        double t0 = bench_now_ms();

        if (upto <= from)
                return 0;
        pthread_mutex_init(&g.lock, NULL);
        if (workers > (int)ELEMENTSOF(th))
                workers = (int)ELEMENTSOF(th);
        for (int i = 0; i < workers; i++)
                pthread_create(&th[i], NULL, grow_main, &g);
        for (int i = 0; i < workers; i++)
                pthread_join(th[i], NULL);
        pthread_mutex_destroy(&g.lock);
        say("sessions s%d..s%d %s in %.1f s (%d at a time, %d errors)", from, upto - 1, destroy ? "destroyed" : "ready",
            (bench_now_ms() - t0) / 1000, workers, g.errors);
        return g.errors;
}

int grow_sessions(struct bench *b, int from, int upto, int workers)
{
        int r = run_workers(b, false, from, upto, workers);
        if (upto > b->sessions_alive)
                b->sessions_alive = upto;
        return r;
}

int shrink_sessions(struct bench *b, int from, int upto, int workers)
{
        int r = run_workers(b, true, from, upto, workers);
        if (from < b->sessions_alive)
                b->sessions_alive = from;
        return r;
}

/* ---- the plain-Docker baseline ---- */

/* `docker run -d` with every flag src/container.c gives a session container,
 * the same published block size, image and workspace layout. */
int baseline_run(struct bench *b, const char *ws, bool publish, char *ret_id, size_t size, double *ret_ms)
{
        char *argv[128];
        char label[128], user[32], pids[32], mem[32], cpus[32], shares[32], oom[32], tmpfs[160], vol[SBX_PATH_MAX + 32],
                err[1024];
        char ports[64][80];
        int n = 0, r;
        double t0;

        argv[n++] = (char *)b->docker;
        argv[n++] = "run";
        argv[n++] = "-d";
        snprintf(label, sizeof(label), "sandboxd.bench=%s", b->bench_id);
        argv[n++] = "--label";
        argv[n++] = label;
        argv[n++] = "--init";
        argv[n++] = "--read-only";
        argv[n++] = "--cap-drop";
        argv[n++] = "ALL";
        argv[n++] = "--security-opt";
        argv[n++] = "no-new-privileges:true";
        snprintf(user, sizeof(user), "%d:%d", b->cfg.sandbox_uid_hi,
                 b->cfg.sandbox_uid_hi); /* a uid of the range, as sessions get */
        argv[n++] = "--user";
        argv[n++] = user;
        snprintf(pids, sizeof(pids), "%" PRId64, b->cfg.pids_limit);
        argv[n++] = "--pids-limit";
        argv[n++] = pids;
        snprintf(mem, sizeof(mem), "%" PRId64, b->cfg.memory_bytes);
        argv[n++] = "--memory";
        argv[n++] = mem;
        argv[n++] = "--memory-swap";
        argv[n++] = mem;
        snprintf(cpus, sizeof(cpus), "%.3f", (double)b->cfg.nano_cpus / 1e9);
        argv[n++] = "--cpus";
        argv[n++] = cpus;
        snprintf(shares, sizeof(shares), "%d", b->cfg.cpu_shares);
        argv[n++] = "--cpu-shares";
        argv[n++] = shares;
        snprintf(oom, sizeof(oom), "%d", b->cfg.oom_score_adj);
        argv[n++] = "--oom-score-adj";
        argv[n++] = oom;
        snprintf(tmpfs, sizeof(tmpfs), "/tmp:rw,noexec,nosuid,nodev,size=%" PRId64, b->cfg.tmpfs_bytes);
        argv[n++] = "--tmpfs";
        argv[n++] = tmpfs;
        snprintf(vol, sizeof(vol), "%s:/workspace:rw", ws);
        argv[n++] = "-v";
        argv[n++] = vol;
        argv[n++] = "-w";
        argv[n++] = "/workspace";
        argv[n++] = "-e";
        argv[n++] = "HOME=/workspace";
        argv[n++] = "--hostname";
        argv[n++] = "sandbox";
        /* the baseline keeps what a docker CLI user does: Docker's default
         * bridge and -p, whatever the daemon's own network_default is */
        argv[n++] = "--network";
        argv[n++] = BASELINE_NETWORK;
        if (publish)
                for (int i = 0; i < b->cfg.ports_per_session && i < 64; i++) {
                        snprintf(ports[i], sizeof(ports[i]), "%s:%d:%d", b->cfg.publish_ip, b->base_port + i,
                                 b->cfg.container_port_base + i);
                        argv[n++] = "-p";
                        argv[n++] = ports[i];
                }
        argv[n++] = b->cfg.image;
        argv[n] = NULL;
        if (publish)
                b->base_port += b->cfg.ports_per_session;

        t0 = bench_now_ms();
        r = run_cmd(argv, ret_id, size, err, sizeof(err));
        *ret_ms = bench_now_ms() - t0;
        if (r != 0 || !ret_id[0]) {
                say("docker run failed (%d): %s", r, err);
                return -1;
        }
        return 0;
}

double docker_exec_cli(struct bench *b, const char *id)
{
        char *argv[] = {(char *)b->docker, "exec", (char *)id, "true", NULL};
        char err[512];
        double t0 = bench_now_ms();
        int r = run_cmd(argv, NULL, 0, err, sizeof(err));
        double dt = bench_now_ms() - t0;
        if (r != 0) {
                say("docker exec failed (%d): %s", r, err);
                return -1;
        }
        return dt;
}

void docker_rm(struct bench *b, const char *id)
{
        char *argv[] = {(char *)b->docker, "rm", "-f", (char *)id, NULL};
        (void)run_cmd(argv, NULL, 0, NULL, 0);
}

int make_workspace(struct bench *b, int i, char *ret, size_t size)
{
        snprintf(ret, size, "%s/%d", b->ws_root, i);
        if (mkdir(ret, 0700) < 0 && errno != EEXIST)
                return -1;
        return chown(ret, (uid_t)b->cfg.sandbox_uid_hi, (gid_t)b->cfg.sandbox_uid_hi);
}

long file_size(const char *path)
{
        struct stat st;
        return stat(path, &st) == 0 ? (long)st.st_size : 0;
}

/* "2026-11-21T12:39:16.795527650Z" (UTC) as unix ms; -1 if unparsable. */
int64_t rfc3339_ms(const char *s)
{
        struct tm tm = {0};
        const char *rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
        int64_t ms;

        if (!rest)
                return -1;
        ms = (int64_t)timegm(&tm) * 1000;
        if (*rest == '.') {
                int digits = 0, frac = 0;
                for (rest++; *rest >= '0' && *rest <= '9'; rest++)
                        if (digits < 3) {
                                frac = frac * 10 + (*rest - '0');
                                digits++;
                        }
                while (digits++ < 3)
                        frac *= 10;
                ms += frac;
        }
        return ms;
}

/* From the daemon's log past offset: for each session whose name starts
 * with prefix, ms from "STOPPED -> CREATING" to "CREATING -> RUNNING". */
void creation_spans(const char *log_path, long offset, const char *prefix, struct series *ret)
{
        FILE *f = fopen(log_path, "re");
        char line[4096], names[64][32];
        int64_t start[64];
        int n = 0;

        if (!f)
                return;
        fseek(f, offset, SEEK_SET);
        while (fgets(line, sizeof(line), f)) {
                char *ts = strstr(line, "\"ts\":\""), *sess = strstr(line, "\"session_id\":\"");
                char name[32];
                int64_t ms;
                bool begin = strstr(line, "STOPPED -> CREATING") != NULL;
                bool end = strstr(line, "CREATING -> RUNNING") != NULL;
                if ((!begin && !end) || !ts || !sess || sscanf(sess + 14, "%31[^\"]", name) != 1 ||
                    strncmp(name, prefix, strlen(prefix)) != 0)
                        continue;
                ms = rfc3339_ms(ts + 6);
                if (begin && n < 64) {
                        snprintf(names[n], sizeof(names[n]), "%s", name);
                        start[n++] = ms;
                } else if (end) {
                        for (int i = 0; i < n; i++)
                                if (strcmp(names[i], name) == 0) {
                                        series_add(ret, (double)(ms - start[i]));
                                        break;
                                }
                }
        }
        fclose(f);
}

/* ts "2026-11-21T12:35:33.123Z" of the first "reconciled:" line at or after
 * offset in the log, as unix ms; -1 if none. */
int64_t find_reconciled(const char *log_path, long offset, char *line_out, size_t size)
{
        FILE *f = fopen(log_path, "re");
        char line[4096];
        int64_t ms = -1;

        if (!f)
                return -1;
        fseek(f, offset, SEEK_SET);
        while (fgets(line, sizeof(line), f)) {
                char *ts = strstr(line, "\"ts\":\"");
                struct tm tm = {0};
                int msec = 0;
                if (!strstr(line, "reconciled:") || !ts)
                        continue;
                ts += 6;
                if (!strptime(ts, "%Y-%m-%dT%H:%M:%S", &tm) || sscanf(ts + 19, ".%3d", &msec) != 1)
                        continue;
                ms = (int64_t)timegm(&tm) * 1000 + msec;
                snprintf(line_out, size, "%s", line);
                break;
        }
        fclose(f);
        return ms;
}


/* ---- machine and config ---- */

cJSON *machine_info(struct bench *b)
{
        cJSON *o = cJSON_CreateObject();
        struct utsname u;
        struct sysinfo si;
        char line[512], ver[128] = "";
        char *argv[] = {(char *)b->docker, "version", "--format", "{{.Server.Version}}", NULL};
        FILE *f;

        cJSON_AddNumberToObject(o, "nproc", (double)sysconf(_SC_NPROCESSORS_ONLN));
        if (sysinfo(&si) == 0)
                cJSON_AddNumberToObject(o, "memory_gib",
                                        round((double)si.totalram * si.mem_unit / (1 << 30) * 10) / 10);
        if (uname(&u) == 0) {
                cJSON_AddStringToObject(o, "kernel", u.release);
                cJSON_AddStringToObject(o, "arch", u.machine);
        }
        f = fopen("/proc/cpuinfo", "re");
        while (f && fgets(line, sizeof(line), f)) {
                char *colon = strchr(line, ':');
                if (strncmp(line, "model name", 10) == 0 && colon) {
                        line[strcspn(line, "\n")] = '\0';
                        cJSON_AddStringToObject(o, "cpu", colon + 2);
                        break;
                }
        }
        if (f)
                fclose(f);
        f = fopen("/etc/debian_version", "re");
        if (f && fgets(line, sizeof(line), f)) {
                line[strcspn(line, "\n")] = '\0';
                cJSON_AddStringToObject(o, "debian", line);
        }
        if (f)
                fclose(f);
        if (run_cmd(argv, ver, sizeof(ver), NULL, 0) == 0)
                cJSON_AddStringToObject(o, "docker", ver);
        return o;
}

cJSON *config_info(struct bench *b)
{
        cJSON *o = cJSON_CreateObject();
        char range[32];
        cJSON_AddStringToObject(o, "image", b->cfg.image);
        cJSON_AddNumberToObject(o, "ports_per_session", b->cfg.ports_per_session);
        snprintf(range, sizeof(range), "%d-%d", b->cfg.port_range_lo, b->cfg.port_range_hi);
        cJSON_AddStringToObject(o, "port_range", range);
        cJSON_AddNumberToObject(o, "max_sessions", b->cfg.max_sessions);
        cJSON_AddNumberToObject(o, "max_exec_global", b->cfg.max_exec_global);
        cJSON_AddNumberToObject(o, "max_exec_per_session", b->cfg.max_exec_per_session);
        cJSON_AddNumberToObject(o, "monitor_interval_ms", b->cfg.monitor_interval_ms);
        cJSON_AddNumberToObject(o, "memory_bytes", (double)b->cfg.memory_bytes);
        cJSON_AddNumberToObject(o, "cpus", (double)b->cfg.nano_cpus / 1e9);
        cJSON_AddNumberToObject(o, "pids_limit", (double)b->cfg.pids_limit);
        cJSON_AddStringToObject(o, "network", b->cfg.network_default);
        cJSON_AddStringToObject(o, "baseline_network", BASELINE_NETWORK);
        cJSON_AddStringToObject(o, "log_level", b->cfg.log_level);
        return o;
}
