/* pause.c — the pause and resume rows (issue 28), `--only pause` and in the
 * full run:
 *   session_pause          pause_session through the API on a session
 *                          with a live python context (its kernel frozen
 *                          with it), against the Engine API's
 *                          POST /containers/{id}/pause of a plain
 *                          `docker run -d` container with the same flags;
 *   session_resume         resume_session, against POST .../unpause;
 *   first_command_after_resume  an exec `true` on the paused session:
 *                          the transparent resume plus the command,
 *                          against unpause + `docker exec true`;
 *   e2b_resume_documented  not measured: the figure E2B's documentation
 *                          gives for resuming a paused sandbox (about 1 s),
 *                          printed as the reference beside ours.
 * Samples alternate: ours, then the baseline's, so both see the same load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define PAUSE_SESSION "pausebench"

double timed_session_call(struct bench *b, struct conn *c, const char *method, const char *session, char *why,
                          size_t why_size)
{
        cJSON *p = cJSON_CreateObject(), *reply;
        double t0 = bench_now_ms(), dt;

        cJSON_AddStringToObject(p, "session", session);
        reply = api_call(c, b->token, method, p, CALL_TIMEOUT_MS);
        dt = bench_now_ms() - t0;
        if (!reply_result(reply)) {
                reply_error(reply, why, why_size);
                dt = -1;
        }
        cJSON_Delete(reply);
        return dt;
}

static double timed_call(struct bench *b, struct conn *c, const char *method, char *why, size_t why_size)
{
        return timed_session_call(b, c, method, PAUSE_SESSION, why, why_size);
}

double timed_engine(struct bench *b, const char *id, bool pause)
{
        struct sbx_error err = {0};
        double t0 = bench_now_ms();
        int r = pause ? docker_container_pause(b->engine, id, &err) : docker_container_unpause(b->engine, id, &err);
        if (r < 0) {
                say("docker %s failed: %s", pause ? "pause" : "unpause", err.msg);
                return -1;
        }
        return bench_now_ms() - t0;
}

int phase_pause(struct bench *b)
{
        struct measurement *mp = report_add(&b->rep, "session_pause", "ms");
        struct measurement *mr = report_add(&b->rep, "session_resume", "ms");
        struct measurement *mf = report_add(&b->rep, "first_command_after_resume", "ms");
        struct measurement *e2b = report_add(&b->rep, "e2b_resume_documented", "ms");
        int n = b->quick ? 10 : 40, errors = 0;
        char why[512], ws[SBX_PATH_MAX], id[80] = "";
        double run_ms;
        struct conn c;
        cJSON *p, *reply;

        mp->has_baseline = mr->has_baseline = mf->has_baseline = true;
        snprintf(mp->baseline_desc, sizeof(mp->baseline_desc), "Engine API POST /containers/{id}/pause");
        snprintf(mr->baseline_desc, sizeof(mr->baseline_desc), "Engine API POST /containers/{id}/unpause");
        snprintf(mf->baseline_desc, sizeof(mf->baseline_desc), "POST .../unpause, then docker exec <id> true");
        snprintf(mp->note, sizeof(mp->note),
                 "pause_session on a session with a live python context (cgroup freezer; runner told, audit row, "
                 "event)");
        snprintf(mr->note, sizeof(mr->note), "resume_session; reference: E2B documents about 1 s to resume a sandbox");
        snprintf(mf->note, sizeof(mf->note),
                 "exec true on a paused session: the transparent resume and the command; reference: E2B about 1 s "
                 "for the resume alone");
        snprintf(e2b->note, sizeof(e2b->note),
                 "not measured: E2B's documentation gives about 1 s to resume a paused sandbox (memory kept); "
                 "printed as the reference for session_resume and first_command_after_resume");
        series_add(&e2b->s, 1000);

        if (conn_open(&c, b->cfg.api_socket) < 0)
                return -1;
        p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "session", PAUSE_SESSION);
        cJSON_AddStringToObject(p, "code", "x = 1");
        reply = api_call(&c, b->token, "run_cell", p, CALL_TIMEOUT_MS);
        if (!reply_result(reply)) {
                reply_error(reply, why, sizeof(why));
                say("pause: no context in the session (%s); the rows measure the container alone", why);
        }
        cJSON_Delete(reply);
        if (make_workspace(b, 2000, ws, sizeof(ws)) < 0 || baseline_run(b, ws, false, id, sizeof(id), &run_ms) < 0)
                id[0] = '\0';
        say("pause: %d pause/resume cycles, then %d first commands after a resume, each against plain Docker", n, n);
        for (int i = 0; i < n; i++) {
                double a = timed_call(b, &c, "pause_session", why, sizeof(why));
                double pa = id[0] ? timed_engine(b, id, true) : -1;
                double r = a >= 0 ? timed_call(b, &c, "resume_session", why, sizeof(why)) : -1;
                double ua = pa >= 0 ? timed_engine(b, id, false) : -1;
                if (a < 0 || r < 0) {
                        say("pause/resume failed: %s", why);
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
        for (int i = 0; i < n; i++) {
                if (timed_call(b, &c, "pause_session", why, sizeof(why)) < 0) {
                        errors++;
                        continue;
                }
                double f = timed_exec(b, &c, PAUSE_SESSION, "true", why, sizeof(why));
                if (f < 0) {
                        say("first command after resume failed: %s", why);
                        errors++;
                } else
                        series_add(&mf->s, f);
                if (id[0] && timed_engine(b, id, true) >= 0) {
                        double t0 = bench_now_ms();
                        if (timed_engine(b, id, false) >= 0 && docker_exec_cli(b, id) >= 0)
                                series_add(&mf->base, bench_now_ms() - t0);
                }
        }
        if (id[0])
                docker_rm(b, id);
        (void)admin_destroy(b, PAUSE_SESSION);
        conn_close(&c);
        if (errors)
                snprintf(mp->note + strlen(mp->note), sizeof(mp->note) - strlen(mp->note), "; %d failed", errors);
        return 0;
}
