/* Integration tests of the workspace disk quota (issue 12 item 4) against
 * the real dockerd and the real kernel:
 *   - loop: writing past the quota fails inside the container (ENOSPC) and
 *     write_file answers quota_exceeded naming workspace.quota (issue 34), for
 *     bytes and for inodes; usage is reported; another session and the
 *     store are unaffected; the workspace keeps its files and its limit
 *     across a recreation and a daemon restart; the image is unmounted and
 *     its loop device released when the container goes; restart and --gc
 *     unmount what a dead daemon left mounted; purge deletes the image.
 *   - measure: a session past its quota gets quota_exceeded for executions
 *     and writes, while another session is served.
 *
 * Every mount and loop device lives under this run's temp dir, whose name
 * carries the run id; testenv_cleanup unmounts them even when a test fails. */
#include <criterion/criterion.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/container.h"
#include "sandboxd/exec.h"
#include "sandboxd/files.h"
#include "sandboxd/gc.h"
#include "sandboxd/session.h"
#include "sandboxd/token.h"
#include "sandboxd/wsquota.h"
#include "testenv.h"

TestSuite(wsquota, .timeout = 300);

#define QUOTA (32 << 20)
#define INODES 2048

static struct sbx_config cfg;
static struct daemon *d;
static char tok[TOKEN_LEN + 1];

static void open_daemon(void)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};

        (void)testenv_docker();
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        cr_assert_eq(token_create(d->store, "u1", TOKEN_ROLE_AGENT, tok, NULL, &err), 0, "%s", err.msg);
}

static void setup(const char *mode, int64_t quota, int inodes)
{
        char dir[SBX_PATH_MAX];

        fixture_config(&cfg);
        cfg.ports_per_session = 0;
        snprintf(cfg.workspace_quota_mode, sizeof(cfg.workspace_quota_mode), "%s", mode);
        cfg.workspace_quota_bytes = quota;
        cfg.workspace_inodes = inodes;
        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/run/api.sock", dirname(dir));
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/admin.sock", dir);
        open_daemon();
}

/* Run `sh -c command` in session; its exit code, stdout+stderr heads into out. */
static int sh(const char *session, const char *command, char *out, size_t size)
{
        struct exec_request req = {
                .user = "u1", .session = session, .command = command, .timeout_s = 60, .actor = "test"};
        struct exec_result res;
        struct sbx_error err = {0};
        int code;

        cr_assert_eq(exec_run(d->exec, &req, &res, &err), 0, "exec_run(%s): %s", command, err.msg);
        cr_assert_eq(res.state, EXEC_COMPLETED, "%s: state %d (%s)", command, res.state, res.error);
        code = res.exit_code;
        if (out)
                snprintf(out, size, "%.*s%.*s", (int)res.stdout_head_len, res.stdout_head ? res.stdout_head : "",
                         (int)res.stderr_head_len, res.stderr_head ? res.stderr_head : "");
        exec_result_done(&res);
        return code;
}

static void ws_path(const char *session, char *buf, size_t size)
{
        snprintf(buf, size, "%s/workspaces/u1/%s", cfg.data_dir, session);
}

static void image_path(const char *session, char *buf, size_t size)
{
        snprintf(buf, size, "%s/workspace-images/u1/%s.ext4", cfg.data_dir, session);
}

/* Is path a mount point in /proc/self/mountinfo? */
static bool mounted(const char *path)
{
        char real[SBX_PATH_MAX], *line = NULL;
        size_t cap = 0;
        bool found = false;
        FILE *f;

        if (!realpath(path, real))
                return false;
        f = fopen("/proc/self/mountinfo", "re");
        cr_assert_not_null(f);
        while (!found && getline(&line, &cap, f) > 0) {
                char mp[SBX_PATH_MAX];
                if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 && strcmp(mp, real) == 0)
                        found = true;
        }
        free(line);
        fclose(f);
        return found;
}

/* Is a loop device backed by path (sysfs backing_file)? */
static bool loop_backed_by(const char *path)
{
        char real[SBX_PATH_MAX];
        bool found = false;

        if (!realpath(path, real))
                snprintf(real, sizeof(real), "%s", path);
        for (int i = 0; i < 256 && !found; i++) {
                char p[64], buf[SBX_PATH_MAX] = "";
                FILE *f;
                snprintf(p, sizeof(p), "/sys/block/loop%d/loop/backing_file", i);
                f = fopen(p, "re");
                if (!f)
                        continue;
                if (fgets(buf, sizeof(buf), f))
                        buf[strcspn(buf, "\n")] = '\0';
                fclose(f);
                /* a deleted backing file reads "<path> (deleted)" */
                found = strncmp(buf, real, strlen(real)) == 0;
        }
        return found;
}

static const char *wait_image;
static bool image_released(void *ud)
{
        (void)ud;
        return !loop_backed_by(wait_image);
}

static void assert_released(const char *session)
{
        char ws[SBX_PATH_MAX], img[SBX_PATH_MAX];

        ws_path(session, ws, sizeof(ws));
        image_path(session, img, sizeof(img));
        cr_assert_not(mounted(ws), "%s is still mounted", ws);
        wait_image = img;
        cr_assert_geq(fixture_wait(image_released, NULL, 20000), 0, "a loop device still holds %s", img);
}

Test(wsquota, loop_limits_bytes_and_files_and_survives_recreation_and_restart)
{
        char out[4096], ws[SBX_PATH_MAX], img[SBX_PATH_MAX], cid[65];
        struct wsquota_usage u;
        struct stat st;
        cJSON *r;

        setup("loop", QUOTA, INODES);
        ws_path("a", ws, sizeof(ws));
        image_path("a", img, sizeof(img));

        cr_assert_eq(sh("a", "echo kept > /workspace/marker && id -u && stat -c '%u %a' /workspace", out, sizeof(out)),
                     0, "%s", out);
        cr_assert(mounted(ws), "the workspace image is not mounted on %s", ws);
        cr_assert(loop_backed_by(img));
        cr_assert_null(strstr(out, "lost+found"));

        /* bytes: the kernel refuses the write inside the container */
        cr_assert_neq(sh("a", "dd if=/dev/zero of=/workspace/big bs=1M count=64", out, sizeof(out)), 0,
                      "a 64 MiB write into a 32 MiB workspace succeeded");
        cr_assert_not_null(strstr(out, "No space left"), "%s", out);
        wsquota_usage(&cfg, "u1", "a", &u);
        cr_assert(u.known && u.mounted);
        /* the limit is what files can fill: the image less ext4's journal and tables */
        cr_assert_leq(u.bytes_limit, QUOTA);
        cr_assert_gt(u.bytes_limit, QUOTA / 2);
        cr_assert_gt(u.bytes_used, 20 << 20, "usage %llu", (unsigned long long)u.bytes_used);
        cr_assert_leq(u.bytes_used, u.bytes_limit);
        cr_assert(u.over, "full, yet not over: %llu of %llu bytes", (unsigned long long)u.bytes_used,
                  (unsigned long long)u.bytes_limit);
        /* write_file into the full workspace: quota_exceeded naming the bound (it was unavailable, EIO) */
        {
                static char chunk[1 << 20];
                struct sbx_error err = {0};
                char where[FILES_PATH_MAX];
                cr_assert_eq(files_write(&d->files, "u1", "a", "/workspace/more", chunk, sizeof(chunk), where, &err),
                             -EDQUOT, "%s", err.msg);
                cr_assert_not_null(strstr(err.msg, "workspace.quota"), "%s", err.msg);
        }
        /* the bytes landed in the image, never on the host's file system */
        cr_assert_eq(stat(img, &st), 0);
        cr_assert_leq((long long)st.st_blocks * 512, (long long)QUOTA);

        /* inodes: free the space, then run out of files */
        cr_assert_eq(sh("a", "rm /workspace/big", out, sizeof(out)), 0, "%s", out);
        cr_assert_eq(sh("a", "i=0; while [ $i -lt 4000 ]; do echo -n > /workspace/f$i || exit 3; i=$((i+1)); done", out,
                        sizeof(out)),
                     3, "4000 files fit in a workspace of %d inodes: %s", INODES, out);
        cr_assert_not_null(strstr(out, "No space left"), "%s", out);
        wsquota_usage(&cfg, "u1", "a", &u);
        cr_assert_geq(u.inodes_used + 16, u.inodes_limit, "%llu of %llu", (unsigned long long)u.inodes_used,
                      (unsigned long long)u.inodes_limit);
        cr_assert_eq(sh("a", "rm -f /workspace/f*", out, sizeof(out)), 0, "%s", out);

        /* another session, the store and session_info are unaffected */
        cr_assert_eq(sh("b", "echo fine > /workspace/x && cat /workspace/x", out, sizeof(out)), 0, "%s", out);
        cr_assert_str_eq(out, "fine\n");
        r = apic_call(cfg.api_socket, tok, "session_info", apic_json("{\"session\": \"a\"}"));
        cr_assert_not_null(apic_result(r), "session_info: %s", cJSON_PrintUnformatted(r));
        {
                const cJSON *wu = cJSON_GetObjectItem(apic_result(r), "workspace_usage");
                cr_assert_str_eq(apic_str(wu, "mode"), "loop");
                cr_assert_eq(apic_num(wu, "bytes_limit"), (double)u.bytes_limit);
                cr_assert_gt(apic_num(wu, "bytes_used"), 0);
                cr_assert_gt(apic_num(wu, "inodes_limit"), 0);
        }
        cJSON_Delete(r);

        /* recreation: the container goes, the files and the limit stay */
        fixture_container_of(d, "u1", "a", cid);
        cr_assert_eq(docker_container_remove(testenv_docker(), cid, true, NULL), 0);
        cr_assert_eq(sh("a", "cat /workspace/marker", out, sizeof(out)), 0, "%s", out);
        cr_assert_str_eq(out, "kept\n");
        cr_assert_neq(sh("a", "dd if=/dev/zero of=/workspace/big bs=1M count=64", out, sizeof(out)), 0);
        cr_assert_eq(sh("a", "rm /workspace/big", out, sizeof(out)), 0, "%s", out);

        /* daemon restart: the running container is adopted with its mount */
        daemon_close(d);
        open_daemon();
        cr_assert(mounted(ws));
        cr_assert_eq(sh("a", "cat /workspace/marker", out, sizeof(out)), 0, "%s", out);
        cr_assert_str_eq(out, "kept\n");
        {
                uint64_t limit = u.bytes_limit;
                wsquota_usage(&cfg, "u1", "a", &u);
                cr_assert_eq(u.bytes_limit, limit, "the limit changed across the restart");
        }

        /* the container goes for good: unmounted, the loop device released,
         * usage still read (saved at the unmount) */
        {
                struct wsquota_usage was;
                wsquota_usage(&cfg, "u1", "a", &was);
                cr_assert_eq(session_destroy(d->sessions, "u1", "a", false, NULL), 0);
                assert_released("a");
                wsquota_usage(&cfg, "u1", "a", &u);
                cr_assert(u.known && !u.mounted);
                cr_assert_eq(u.bytes_limit, was.bytes_limit, "unmounted, the limit reads differently");
                cr_assert_eq(u.bytes_used, was.bytes_used);
                cr_assert_eq(u.inodes_limit, was.inodes_limit);
        }

        /* back again on the same workspace, then purged with its image */
        cr_assert_eq(sh("a", "cat /workspace/marker", out, sizeof(out)), 0, "%s", out);
        cr_assert_eq(session_destroy(d->sessions, "u1", "a", true, NULL), 0);
        assert_released("a");
        cr_assert_neq(stat(img, &st), 0, "the image outlived the purge");
        cr_assert_eq(session_destroy(d->sessions, "u1", "b", true, NULL), 0);
        assert_released("b");
        daemon_close(d);
}

Test(wsquota, restart_and_gc_unmount_what_a_dead_daemon_left)
{
        char ws[SBX_PATH_MAX], path[SBX_PATH_MAX];
        struct gc_options opts = {0};
        struct gc_report rep;
        struct sbx_error err = {0};

        setup("loop", 16 << 20, 1024);
        /* a daemon that died between removing a container and unmounting */
        cr_assert_eq(container_workspace_ensure(&cfg, "u1", "ghost", (uid_t)cfg.sandbox_uid_lo, path, &err), 0, "%s",
                     err.msg);
        cr_assert_eq(wsquota_attach(&cfg, "u1", "ghost", &err), 0, "%s", err.msg);
        ws_path("ghost", ws, sizeof(ws));
        cr_assert(mounted(ws));
        daemon_close(d);
        open_daemon(); /* reconciliation sweeps */
        assert_released("ghost");

        cr_assert_eq(wsquota_attach(&cfg, "u1", "ghost", &err), 0, "%s", err.msg);
        cr_assert(mounted(ws));
        cr_assert_eq(gc_run(&cfg, &opts, &rep, &err), 0, "gc: %s", err.msg);
        gc_report_done(&rep);
        assert_released("ghost");
        daemon_close(d);
}

Test(wsquota, measure_refuses_work_past_the_quota)
{
        char out[4096];
        char path[FILES_PATH_MAX];
        struct sbx_error err = {0};
        struct exec_request req = {.user = "u1", .session = "m", .command = "true", .timeout_s = 30, .actor = "test"};
        char id[37];
        struct wsquota_usage u;
        cJSON *r;

        setup("measure", 16 << 20, 1024);
        cr_assert_eq(sh("m", "dd if=/dev/zero of=/workspace/big bs=1M count=20 2>&1", out, sizeof(out)), 0, "%s", out);
        wsquota_usage(&cfg, "u1", "m", &u);
        cr_assert(u.known && u.over, "20 MiB in a 16 MiB workspace is not over: %llu",
                  (unsigned long long)u.bytes_used);

        cr_assert_eq(exec_start(d->exec, &req, id, &err), -EDQUOT, "an execution past the quota started");
        cr_assert_not_null(strstr(err.msg, "quota"), "%s", err.msg);
        cr_assert_eq(files_write(&d->files, "u1", "m", "/workspace/y", "z", 1, path, &err), -EDQUOT);
        r = apic_call(cfg.api_socket, tok, "exec", apic_json("{\"session\": \"m\", \"command\": \"true\"}"));
        cr_assert_str_eq(apic_code(r), "quota_exceeded", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = apic_call(cfg.api_socket, tok, "session_info", apic_json("{\"session\": \"m\"}"));
        {
                const cJSON *wu = cJSON_GetObjectItem(apic_result(r), "workspace_usage");
                cr_assert_str_eq(apic_str(wu, "mode"), "measure");
                cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(wu, "over")));
        }
        cJSON_Delete(r);

        /* another session is served */
        cr_assert_eq(sh("n", "echo ok", out, sizeof(out)), 0);
        cr_assert_str_eq(out, "ok\n");
        cr_assert_eq(session_destroy(d->sessions, "u1", "m", true, NULL), 0);
        cr_assert_eq(session_destroy(d->sessions, "u1", "n", true, NULL), 0);
        daemon_close(d);
}
