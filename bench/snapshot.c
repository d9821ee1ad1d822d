/* snapshot.c — the snapshot and fork rows (issue 28), `--only snapshot`:
 * for a workspace of 100 MB and one of 1 GB (incompressible bytes from
 * /dev/urandom: the archive's worst case),
 *   snapshot_<size>   snapshot_session of the live session (frozen for
 *                     the copy), against `cp -a` of the same workspace
 *                     directory on the host (plain Docker has no snapshot
 *                     of a bind mount: docker commit leaves volumes out);
 *   fork_<size>       fork_session {from: {session}} (snapshot, new
 *                     session, its container, the files in place),
 *                     against cp -a + docker run -d on the copy;
 *   first_command_forked_<size>  exec `true` in the fork just made,
 *                     against docker exec true in the baseline's copy.
 * Samples interleave with their baselines. Single-threaded. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define SNAP_TIMEOUT_MS 600000

static double timed_call(struct bench *b, struct conn *c, const char *method, cJSON *params, char *ret_id,
                         size_t id_size, char *why, size_t why_size)
{
        double t0 = bench_now_ms(), dt;
        cJSON *reply = api_call(c, b->token, method, params, SNAP_TIMEOUT_MS);
        const cJSON *res = reply_result(reply);

        dt = bench_now_ms() - t0;
        if (!res) {
                reply_error(reply, why, why_size);
                dt = -1;
        } else if (ret_id) {
                snprintf(ret_id, id_size, "%s", json_str(res, "snapshot") ? json_str(res, "snapshot") : "");
        }
        cJSON_Delete(reply);
        return dt;
}

static void delete_snapshot(struct bench *b, struct conn *c, const char *id)
{
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "snapshot", id);
        cJSON_Delete(api_call(c, b->token, "delete_snapshot", p, CALL_TIMEOUT_MS));
}

/* cp -a src dst (dst must not exist); ms, or -1. */
static double timed_cp(const char *src, const char *dst)
{
        char *argv[] = {"cp", "-a", (char *)src, (char *)dst, NULL};
        char err[256];
        double t0 = bench_now_ms();
        if (run_cmd(argv, NULL, 0, err, sizeof(err)) != 0) {
                say("snapshot: cp -a failed: %s", err);
                return -1;
        }
        return bench_now_ms() - t0;
}

static void rm_rf(const char *path)
{
        char *argv[] = {"rm", "-rf", (char *)path, NULL};
        (void)run_cmd(argv, NULL, 0, NULL, 0);
}

static int one_size(struct bench *b, struct conn *c, const char *label, long mb, int samples)
{
        char name[64], why[512], src[SBX_PATH_MAX], dst[SBX_PATH_MAX], cmd[128], id[80], cid[80], sid[64];
        struct measurement *snap, *fork, *first;
        int errors = 0;

        snprintf(name, sizeof(name), "snapshot_%s", label);
        snap = report_add(&b->rep, name, "ms");
        snprintf(name, sizeof(name), "fork_%s", label);
        fork = report_add(&b->rep, name, "ms");
        snprintf(name, sizeof(name), "first_command_forked_%s", label);
        first = report_add(&b->rep, name, "ms");
        snap->has_baseline = fork->has_baseline = first->has_baseline = true;
        snprintf(snap->baseline_desc, sizeof(snap->baseline_desc), "cp -a of the same workspace on the host");
        snprintf(fork->baseline_desc, sizeof(fork->baseline_desc),
                 "cp -a of the workspace + docker run -d on the copy (same image and flags)");
        snprintf(first->baseline_desc, sizeof(first->baseline_desc), "docker exec true in that container");

        snprintf(name, sizeof(name), "snap-%s", label);
        snprintf(cmd, sizeof(cmd), "head -c %ldM /dev/urandom > /workspace/blob && sync", mb);
        if (timed_exec(b, c, name, cmd, why, sizeof(why)) < 0) {
                say("snapshot: cannot fill %s: %s", name, why);
                return -1;
        }
        snprintf(src, sizeof(src), "%s/workspaces/%s/%s", b->cfg.data_dir, USER_NAME, name);
        for (int i = 0; i < samples; i++) {
                double dt, t0, run_ms;
                cJSON *p = cJSON_CreateObject(), *from;

                cJSON_AddStringToObject(p, "session", name);
                dt = timed_call(b, c, "snapshot_session", p, sid, sizeof(sid), why, sizeof(why));
                if (dt < 0) {
                        say("snapshot: snapshot_session failed: %s", why);
                        errors++;
                } else {
                        series_add(&snap->s, dt);
                        delete_snapshot(b, c, sid);
                }
                snprintf(dst, sizeof(dst), "%s/copy-%s-%d", b->ws_root, label, i);
                dt = timed_cp(src, dst);
                if (dt >= 0)
                        series_add(&snap->base, dt);
                rm_rf(dst);

                /* fork, then its first command */
                snprintf(id, sizeof(id), "fork-%s-%d", label, i);
                p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "session", id);
                from = cJSON_AddObjectToObject(p, "from");
                cJSON_AddStringToObject(from, "session", name);
                dt = timed_call(b, c, "fork_session", p, NULL, 0, why, sizeof(why));
                if (dt < 0) {
                        say("snapshot: fork_session failed: %s", why);
                        errors++;
                } else {
                        series_add(&fork->s, dt);
                        dt = timed_exec(b, c, id, "true", why, sizeof(why));
                        if (dt >= 0)
                                series_add(&first->s, dt);
                }
                (void)admin_destroy(b, id);
                /* the baseline: a copy and a container on it */
                snprintf(dst, sizeof(dst), "%s/fork-%s-%d", b->ws_root, label, i);
                t0 = bench_now_ms();
                if (timed_cp(src, dst) >= 0 && baseline_run(b, dst, false, cid, sizeof(cid), &run_ms) == 0) {
                        series_add(&fork->base, bench_now_ms() - t0);
                        dt = docker_exec_cli(b, cid);
                        if (dt >= 0)
                                series_add(&first->base, dt);
                        docker_rm(b, cid);
                }
                rm_rf(dst);
        }
        (void)admin_destroy(b, name);
        snprintf(snap->note, sizeof(snap->note),
                 "%ld MB of random bytes, session running (paused for the copy), workspace.quota_mode %s; %d error(s)",
                 mb, b->cfg.workspace_quota_mode, errors);
        snprintf(fork->note, sizeof(fork->note),
                 "fork_session from the live session: snapshot + new session + files in place (pool.size %d)",
                 b->cfg.pool_size);
        snprintf(first->note, sizeof(first->note), "API exec of true in the fork right after fork_session returned");
        return errors ? -1 : 0;
}

int phase_snapshot(struct bench *b)
{
        struct conn c = {.fd = -1};
        int r;

        if (conn_open(&c, b->cfg.api_socket) < 0)
                return -1;
        say("snapshot: 100 MB and 1 GB workspaces, snapshot and fork against cp -a (+ docker run)");
        r = one_size(b, &c, "100mb", 100, b->quick ? 2 : 4);
        if (one_size(b, &c, "1gb", 1024, b->quick ? 1 : 2) < 0)
                r = -1;
        conn_close(&c);
        return r;
}
