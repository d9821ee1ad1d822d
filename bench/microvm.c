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
 *                          Engine API's pause / unpause of a plain container.
 * Samples alternate: ours, then the baseline's, so both see the same load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
        (void)admin_destroy(b, "vm0");
        conn_close(&c);
        (void)set_runtime(b, "default");
        if (errors)
                snprintf(mc->note + strlen(mc->note), sizeof(mc->note) - strlen(mc->note), "; %d failed", errors);
        return 0;
}
