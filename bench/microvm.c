/* microvm.c — the microVM rows (issue 38, docs/microvm.md), `--only microvm`
 * (not in the full run: it switches the bench user's runtime):
 *   microvm_cold_first_command  exec `true` on a new session whose runtime
 *                          is microvm: the disk image, QEMU, the guest's
 *                          boot (TCG, or KVM where /dev/kvm opens) and the
 *                          runner's hello, then the command; against
 *                          `docker run -d` + `docker exec true` with the
 *                          same flags as a session container;
 *   microvm_pause, microvm_resume  pause_session / resume_session on a
 *                          microvm session (QMP stop / cont), against the
 *                          Engine API's pause / unpause of a plain container;
 *   microvm_memory_snapshot, microvm_clone_first_command, microvm_clone_idle_pss
 *   and _rss, microvm_pause_to_disk, microvm_resume_from_disk: memory that
 *                          lasts (src/qemu/qemu_mem.c), the clones against
 *                          `docker run -d` + `docker exec true`;
 *   microvm_forward_get    a GET of a 64 KiB file from a service in the guest
 *                          (busybox httpd) through the session's port block
 *                          on 127.0.0.1 (the gateway, the net port's stream,
 *                          the guest's runner), a new connection each, against
 *                          the same GET from python's http.server in a plain
 *                          container through `docker run -p`.
 * Samples alternate: ours, then the baseline's, so both see the same load. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "sandboxd/engine_qemu.h"

static int set_runtime(struct bench *b, const char *runtime)
{
        cJSON *req = cJSON_CreateObject(), *r;
        int rc;

        cJSON_AddStringToObject(req, "cmd", "user.runtime");
        cJSON_AddStringToObject(req, "user", USER_NAME);
        cJSON_AddStringToObject(req, "runtime", runtime);
        r = admin_call(b->cfg.admin_socket, req, CALL_TIMEOUT_MS);
        rc = reply_result(r) ? 0 : -1;
        cJSON_Delete(r);
        return rc;
}

#define MEM_SESSION "mem0"

static double timed_params(struct bench *b, struct conn *c, const char *method, cJSON *params, char *ret_snap,
                           size_t size, char *why, size_t why_size)
{
        double t0 = bench_now_ms(), dt;
        cJSON *reply = api_call(c, b->token, method, params, 600000);
        const cJSON *res = reply_result(reply);

        dt = bench_now_ms() - t0;
        if (!res) {
                reply_error(reply, why, why_size);
                dt = -1;
        } else if (ret_snap) {
                snprintf(ret_snap, size, "%s", json_str(res, "snapshot") ? json_str(res, "snapshot") : "");
        }
        cJSON_Delete(reply);
        return dt;
}

/* The Pss and Rss (MiB) of the QEMU of session's VM, from its state file's pid. */
static int vm_memory(struct bench *b, struct conn *c, const char *session, double *ret_pss, double *ret_rss)
{
        char id[128], path[SBX_PATH_MAX + 160], buf[8192];
        FILE *f;
        size_t n;
        cJSON *j;
        int pid = 0;

        if (session_container(b, c, session, id, sizeof(id)) < 0)
                return -1;
        snprintf(path, sizeof(path), "%s/vm/%s/state", b->cfg.data_dir, id);
        if (!(f = fopen(path, "r")))
                return -1;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        if ((j = cJSON_Parse(buf))) {
                pid = cJSON_IsNumber(cJSON_GetObjectItem(j, "pid")) ? cJSON_GetObjectItem(j, "pid")->valueint : 0;
                cJSON_Delete(j);
        }
        snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", pid);
        if (pid <= 0 || !(f = fopen(path, "r")))
                return -1;
        *ret_pss = *ret_rss = -1;
        while (fgets(buf, sizeof(buf), f)) {
                long kb;
                if (sscanf(buf, "Pss: %ld kB", &kb) == 1)
                        *ret_pss = kb / 1024.0;
                else if (sscanf(buf, "Rss: %ld kB", &kb) == 1)
                        *ret_rss = kb / 1024.0;
        }
        fclose(f);
        return *ret_pss >= 0 && *ret_rss >= 0 ? 0 : -1;
}

/* Memory that lasts (qemu_mem.c): a memory snapshot of vm0, clones of it to their first command,
 * what an idle clone costs, and a pause to disk and back. */
static int memory_rows(struct bench *b, struct conn *c, const char *accel, int n_forks)
{
        struct measurement *ms = report_add(&b->rep, "microvm_memory_snapshot", "ms");
        struct measurement *mf = report_add(&b->rep, "microvm_clone_first_command", "ms");
        struct measurement *mpss = report_add(&b->rep, "microvm_clone_idle_pss", "MiB");
        struct measurement *mrss = report_add(&b->rep, "microvm_clone_idle_rss", "MiB");
        struct measurement *md = report_add(&b->rep, "microvm_pause_to_disk", "ms");
        struct measurement *mu = report_add(&b->rep, "microvm_resume_from_disk", "ms");
        int nf = n_forks < 2 ? 2 : n_forks * 2, nd = b->quick ? 3 : 10, errors = 0;
        char why[512], snap[80] = "", name[32], ws[SBX_PATH_MAX], bid[80];
        double run_ms, ex;

        snprintf(ms->note, sizeof(ms->note),
                 "%s: snapshot_session {with_memory: true} of a running microvm session "
                 "(256 MiB guest; QMP stop, x-ignore-shared state, RAM and disk copied, cont)",
                 accel);
        {
                /* its own session, made with a 256 MiB guest (params.memory on its first call) */
                cJSON *p = cJSON_CreateObject(), *reply;
                bool ok;
                cJSON_AddStringToObject(p, "session", MEM_SESSION);
                cJSON_AddStringToObject(p, "command", "true");
                cJSON_AddStringToObject(p, "memory", "256m");
                reply = api_call(c, b->token, "exec", p, CALL_TIMEOUT_MS);
                ok = reply_result(reply) != NULL;
                if (!ok)
                        reply_error(reply, why, sizeof(why));
                cJSON_Delete(reply);
                if (!ok) {
                        say("microvm: the 256 MiB session failed: %s", why);
                        return 1;
                }
        }
        snprintf(mf->note, sizeof(mf->note),
                 "%s: fork_session from that snapshot (RAM mapped private from a sealed memfd, "
                 "-incoming, runner's hello) then exec true",
                 accel);
        mf->has_baseline = true;
        snprintf(mf->baseline_desc, sizeof(mf->baseline_desc), "docker run -d, then docker exec <id> true");
        snprintf(mpss->note, sizeof(mpss->note), "%s: QEMU's Pss per idle clone (%d clones of one snapshot)", accel,
                 nf);
        snprintf(mrss->note, sizeof(mrss->note), "%s: QEMU's Rss per idle clone (pages shared counted whole)", accel);
        snprintf(md->note, sizeof(md->note), "%s: pause_session {to_disk: true}: stop, save, QEMU quits", accel);
        snprintf(mu->note, sizeof(mu->note), "%s: resume_session of it: QEMU -incoming, the runner's hello", accel);
        for (int i = 0; i < nd + 1; i++) {
                cJSON *p = cJSON_CreateObject();
                char s2[80];
                cJSON_AddStringToObject(p, "session", MEM_SESSION);
                cJSON_AddBoolToObject(p, "with_memory", true);
                double t = timed_params(b, c, "snapshot_session", p, s2, sizeof(s2), why, sizeof(why));
                if (t < 0) {
                        say("microvm: memory snapshot failed: %s", why);
                        return errors + 1;
                }
                if (i == 0) {
                        snprintf(snap, sizeof(snap), "%s", s2); /* the one the clones come from */
                        continue;
                }
                series_add(&ms->s, t);
                p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "snapshot", s2);
                cJSON_Delete(api_call(c, b->token, "delete_snapshot", p, CALL_TIMEOUT_MS));
        }
        for (int i = 0; i < nf; i++) {
                cJSON *p = cJSON_CreateObject(), *from;
                snprintf(name, sizeof(name), "clone%d", i);
                cJSON_AddStringToObject(p, "session", name);
                from = cJSON_AddObjectToObject(p, "from");
                cJSON_AddStringToObject(from, "snapshot", snap);
                double t = timed_params(b, c, "fork_session", p, NULL, 0, why, sizeof(why));
                double t2 = t >= 0 ? timed_exec(b, c, name, "true", why, sizeof(why)) : -1;
                if (t < 0 || t2 < 0) {
                        say("microvm: clone failed: %s", why);
                        errors++;
                        continue;
                }
                series_add(&mf->s, t + t2);
                if (make_workspace(b, 3200 + i, ws, sizeof(ws)) == 0 &&
                    baseline_run(b, ws, false, bid, sizeof(bid), &run_ms) == 0) {
                        if ((ex = docker_exec_cli(b, bid)) >= 0)
                                series_add(&mf->base, run_ms + ex);
                        docker_rm(b, bid);
                }
        }
        sleep(2); /* idle: what the clones hold once their first commands are done */
        for (int i = 0; i < nf; i++) {
                double pss, rss;
                snprintf(name, sizeof(name), "clone%d", i);
                if (vm_memory(b, c, name, &pss, &rss) == 0) {
                        series_add(&mpss->s, pss);
                        series_add(&mrss->s, rss);
                }
                (void)admin_destroy(b, name);
        }
        for (int i = 0; i < nd; i++) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "session", MEM_SESSION);
                cJSON_AddBoolToObject(p, "to_disk", true);
                double t = timed_params(b, c, "pause_session", p, NULL, 0, why, sizeof(why));
                double r = t >= 0 ? timed_session_call(b, c, "resume_session", MEM_SESSION, why, sizeof(why)) : -1;
                if (t < 0 || r < 0) {
                        say("microvm: pause to disk failed: %s", why);
                        errors++;
                        continue;
                }
                series_add(&md->s, t);
                series_add(&mu->s, r);
        }
        {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "snapshot", snap);
                cJSON_Delete(api_call(c, b->token, "delete_snapshot", p, CALL_TIMEOUT_MS));
        }
        (void)admin_destroy(b, MEM_SESSION);
        return errors;
}

/* GET /f from 127.0.0.1:port on a new connection: ms to the whole reply (want bytes of body
 * at least), -1 when it falls short. */
static double timed_get(int port, size_t want)
{
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        static const char req[] = "GET /f HTTP/1.0\r\n\r\n";
        struct timeval tv = {30, 0};
        char buf[16384];
        size_t got = 0;
        double t0 = bench_now_ms();
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0)
                return -1;
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) != (ssize_t)sizeof(req) - 1) {
                close(fd);
                return -1;
        }
        for (;;) {
                ssize_t n = recv(fd, buf, sizeof(buf), 0);
                if (n <= 0)
                        break;
                got += (size_t)n;
        }
        close(fd);
        return got >= want ? bench_now_ms() - t0 : -1;
}

#define FWD_FILE_BYTES 65536

/* microvm_forward_get on session vm0 (a running microVM), against a plain container's -p. */
static int forward_rows(struct bench *b, struct conn *c, const char *accel, int n)
{
        struct measurement *m = report_add(&b->rep, "microvm_forward_get", "ms");
        char why[512], ws[SBX_PATH_MAX + 16], path[SBX_PATH_MAX + 32], id[80] = "";
        cJSON *p, *reply;
        int port = 0, base_port, errors = 0;

        m->has_baseline = true;
        snprintf(m->baseline_desc, sizeof(m->baseline_desc),
                 "GET of the same file from python3 -m http.server in docker run -p, 127.0.0.1");
        snprintf(m->note, sizeof(m->note),
                 "%s: GET of %d bytes from busybox httpd in the guest through the port block, a new connection each",
                 accel, FWD_FILE_BYTES);
        if (timed_exec(b, c, "vm0", "mkdir -p /workspace/www && head -c 65536 /dev/zero > /workspace/www/f", why,
                       sizeof(why)) < 0) {
                say("microvm: forward: %s", why);
                return 1;
        }
        p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "session", "vm0");
        cJSON_AddStringToObject(p, "name", "web");
        cJSON_AddStringToObject(p, "command", "httpd -f -p 8000 -h /workspace/www");
        reply = api_call(c, b->token, "start_service", p, CALL_TIMEOUT_MS);
        cJSON_Delete(reply);
        p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "session", "vm0");
        reply = api_call(c, b->token, "session_info", p, CALL_TIMEOUT_MS);
        const cJSON *ports = cJSON_GetObjectItem(reply_result(reply), "ports"), *it;
        cJSON_ArrayForEach(it, ports)
                if (cJSON_GetNumberValue(cJSON_GetObjectItem(it, "container_port")) == 8000)
                        port = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(it, "host_port"));
        cJSON_Delete(reply);
        /* the baseline: the same file, python's server in a plain container published with -p */
        base_port = b->base_port;
        if (make_workspace(b, 3200, ws, sizeof(ws)) == 0) {
                snprintf(path, sizeof(path), "%s/www", ws);
                if (mkdir(path, 0755) == 0 || errno == EEXIST) {
                        snprintf(path, sizeof(path), "%s/www/f", ws);
                        FILE *f = fopen(path, "w");
                        if (f) {
                                for (int i = 0; i < FWD_FILE_BYTES; i++)
                                        fputc(0, f);
                                fclose(f);
                                chmod(path, 0644);
                        }
                }
                if (baseline_run(b, ws, true, id, sizeof(id), &(double){0}) == 0) {
                        char *argv[] = {
                                (char *)b->docker, "exec",           "-d", id, "python3", "-m", "http.server", "8000",
                                "--directory",     "/workspace/www", NULL};
                        if (run_cmd(argv, NULL, 0, why, sizeof(why)) != 0)
                                say("microvm: forward baseline: %s", why);
                }
        }
        /* both servers answer before any sample (a bounded wait for each to listen) */
        for (int i = 0; i < 300 && port > 0 && timed_get(port, FWD_FILE_BYTES) < 0; i++)
                usleep(100 * 1000);
        for (int i = 0; i < 300 && id[0] && timed_get(base_port, FWD_FILE_BYTES) < 0; i++)
                usleep(100 * 1000);
        if (port <= 0)
                say("microvm: forward: the session has no port for 8000");
        for (int i = 0; i < n && port > 0; i++) {
                double a = timed_get(port, FWD_FILE_BYTES), z = id[0] ? timed_get(base_port, FWD_FILE_BYTES) : -1;
                if (a < 0)
                        errors++;
                else
                        series_add(&m->s, a);
                if (z >= 0)
                        series_add(&m->base, z);
        }
        if (id[0])
                docker_rm(b, id);
        if (errors)
                snprintf(m->note + strlen(m->note), sizeof(m->note) - strlen(m->note), "; %d failed", errors);
        return errors ? 1 : 0;
}

int phase_microvm(struct bench *b)
{
        const char *accel = access("/dev/kvm", R_OK | W_OK) == 0 ? "KVM" : "TCG";
        struct measurement *mc = report_add(&b->rep, "microvm_cold_first_command", "ms");
        struct measurement *mp = report_add(&b->rep, "microvm_pause", "ms");
        struct measurement *mr = report_add(&b->rep, "microvm_resume", "ms");
        int n_cold = b->quick ? 2 : 5, n = b->quick ? 10 : 30, errors = 0;
        char why[512], ws[SBX_PATH_MAX], id[80] = "", name[32];
        struct conn c;

        if (access(ENGINE_QEMU_GUEST_DIR "/vmlinux", R_OK) < 0 || access("/usr/bin/qemu-system-x86_64", X_OK) < 0) {
                say("microvm: skipped: no QEMU or no guest in " ENGINE_QEMU_GUEST_DIR " (scripts/build-vm.sh)");
                return 0;
        }
        mc->has_baseline = mp->has_baseline = mr->has_baseline = true;
        snprintf(mc->baseline_desc, sizeof(mc->baseline_desc), "docker run -d, then docker exec <id> true");
        snprintf(mp->baseline_desc, sizeof(mp->baseline_desc), "Engine API POST /containers/{id}/pause");
        snprintf(mr->baseline_desc, sizeof(mr->baseline_desc), "Engine API POST /containers/{id}/unpause");
        snprintf(mc->note, sizeof(mc->note), "%s: exec true on a new microvm session (disk, QEMU, boot, hello)", accel);
        snprintf(mp->note, sizeof(mp->note), "%s: pause_session on a microvm session (QMP stop)", accel);
        snprintf(mr->note, sizeof(mr->note), "%s: resume_session on a microvm session (QMP cont)", accel);
        if (set_runtime(b, "microvm") < 0) {
                say("microvm: the daemon refused runtime microvm");
                return -1;
        }
        if (conn_open(&c, b->cfg.api_socket) < 0)
                return -1;
        say("microvm (%s): %d cold sessions, then %d pause/resume cycles, each against plain Docker", accel, n_cold, n);
        for (int i = 0; i < n_cold; i++) {
                double run_ms, ex;
                char bid[80];

                snprintf(name, sizeof(name), "vm%d", i);
                double t = timed_exec(b, &c, name, "true", why, sizeof(why));
                if (t < 0) {
                        say("microvm: first command failed: %s", why);
                        errors++;
                } else
                        series_add(&mc->s, t);
                if (make_workspace(b, 3000 + i, ws, sizeof(ws)) == 0 &&
                    baseline_run(b, ws, false, bid, sizeof(bid), &run_ms) == 0) {
                        if ((ex = docker_exec_cli(b, bid)) >= 0)
                                series_add(&mc->base, run_ms + ex);
                        docker_rm(b, bid);
                }
                if (i > 0)
                        (void)admin_destroy(b, name);
        }
        if (make_workspace(b, 3100, ws, sizeof(ws)) < 0 || baseline_run(b, ws, false, id, sizeof(id), &(double){0}) < 0)
                id[0] = '\0';
        for (int i = 0; i < n; i++) {
                double a = timed_session_call(b, &c, "pause_session", "vm0", why, sizeof(why));
                double pa = id[0] ? timed_engine(b, id, true) : -1;
                double r = a >= 0 ? timed_session_call(b, &c, "resume_session", "vm0", why, sizeof(why)) : -1;
                double ua = pa >= 0 ? timed_engine(b, id, false) : -1;
                if (a < 0 || r < 0) {
                        say("microvm: pause/resume failed: %s", why);
                        errors++;
                        continue;
                }
                series_add(&mp->s, a);
                series_add(&mr->s, r);
                if (pa >= 0)
                        series_add(&mp->base, pa);
                if (ua >= 0)
                        series_add(&mr->base, ua);
        }
        if (id[0])
                docker_rm(b, id);
        errors += forward_rows(b, &c, accel, n * 3);
        errors += memory_rows(b, &c, accel, n_cold);
        (void)admin_destroy(b, "vm0");
        conn_close(&c);
        (void)set_runtime(b, "default");
        if (errors)
                snprintf(mc->note + strlen(mc->note), sizeof(mc->note) - strlen(mc->note), "; %d failed", errors);
        return 0;
}
