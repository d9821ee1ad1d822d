/* Integration tests of workspace snapshots, restore and fork (issue 28),
 * through the API socket, against the real dockerd:
 *   - snapshot, change, restore: the files are back byte for byte, with
 *     their modes, symlinks as symlinks, owned by the session's uid; a
 *     symlink planted to a host path is kept as a symlink and never
 *     followed, on the way in or out;
 *   - fork: the child's files are the parent's, a write in either is not
 *     seen by the other, uids, containers and ports are distinct, the
 *     parent's interpreter contexts report state_lost forked in the child;
 *   - a private parent gives a private child, whose one container never
 *     had a network; a private snapshot restored makes its session private;
 *   - the quotas (count, bytes) give a clear error; names are checked;
 *   - --gc removes snapshots past gc.snapshot_retention and keeps the rest;
 *   - loop mode: the copy is a sparse image of the same size, and the
 *     fork's workspace keeps the size limit;
 *   - a fork is served from the warm pool; a session already paused stays
 *     paused; a copy a daemon stop cut short is removed and its session
 *     thawed at the next start;
 *   - a workspace deeper than the 256 levels a snapshot keeps is a client
 *     error (too_large) naming 256, over the API and MCP (issue 34);
 *   - a 1 GiB sparse file stays sparse (its st_blocks) through snapshot,
 *     restore and fork, in loop mode and in the archive's modes, and reads
 *     back the same (issue 34).
 * Ports 31800-32199 are this suite's own. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/daemon.h"
#include "sandboxd/engine.h"
#include "sandboxd/gc.h"
#include "sandboxd/pool.h"
#include "sandboxd/session.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"
#include "sandboxd/store_snapshot.h"
#include "sandboxd/token.h"
#include "testenv.h"

TestSuite(snapshot, .timeout = 600);

static struct sbx_config cfg;
static struct daemon *d;
static char tok[TOKEN_LEN + 1], tok_conn[TOKEN_LEN + 1];
static int max_snapshots = 20;                        /* limits.snapshots_per_user of the next setup */
static int64_t max_snapshot_bytes = INT64_C(1) << 34; /* limits.snapshot_bytes_per_user */
static int pool_size;                                 /* pool.size of the next setup */

static void setup_with(const char *mode, const char *network, const char *image)
{
        char dir[SBX_PATH_MAX];
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};

        fixture_config(&cfg);
        cfg.port_range_lo = 31800; /* this suite's own */
        cfg.port_range_hi = 32199;
        cfg.ports_per_session = 2;
        cfg.max_snapshots_per_user = max_snapshots;
        cfg.max_snapshot_bytes_per_user = max_snapshot_bytes;
        cfg.pool_size = pool_size;
        snprintf(cfg.workspace_quota_mode, sizeof(cfg.workspace_quota_mode), "%s", mode);
        if (strcmp(mode, "loop") == 0) {
                cfg.workspace_quota_bytes = 24 << 20;
                cfg.workspace_inodes = 4096;
        }
        if (network)
                snprintf(cfg.network_default, sizeof(cfg.network_default), "%s", network);
        if (image)
                snprintf(cfg.image, sizeof(cfg.image), "%s", image);
        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/run/api.sock", dirname(dir));
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/admin.sock", dir);
        (void)testenv_docker();
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        cr_assert_eq(token_create(d->store, "u1", TOKEN_ROLE_AGENT, tok, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(token_create(d->store, "u1", TOKEN_ROLE_CONNECTOR, tok_conn, NULL, &err), 0, "%s", err.msg);
}

/* The same daemon again on the same data (a restart). */
static void reopen(void)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};

        daemon_close(d);
        d = NULL;
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open again: %s", err.msg);
}

static void setup(const char *mode)
{
        setup_with(mode, NULL, NULL);
}

static void teardown(void)
{
        daemon_close(d);
        d = NULL;
        testenv_cleanup();
}

static cJSON *call(const char *method, const char *session, cJSON *params)
{
        if (!params)
                params = cJSON_CreateObject();
        if (session)
                cJSON_AddStringToObject(params, "session", session);
        return apic_call(cfg.api_socket, tok, method, params);
}

/* The call succeeds: its result (freed with *keep). */
static const cJSON *ok(cJSON *reply, cJSON **keep)
{
        cr_assert_not_null(reply, "no reply");
        cr_assert_str_eq(apic_code(reply), "", "%s", cJSON_PrintUnformatted(reply));
        *keep = reply;
        return apic_result(reply);
}

/* The call fails with code and its message holds needle. */
static void refused(cJSON *reply, const char *code, const char *needle)
{
        const cJSON *msg;

        cr_assert_not_null(reply, "no reply");
        cr_assert_str_eq(apic_code(reply), code, "%s", cJSON_PrintUnformatted(reply));
        msg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(reply, "error"), "message");
        cr_assert(cJSON_IsString(msg));
        cr_assert_not_null(strstr(msg->valuestring, needle), "\"%s\" not in: %s", needle, msg->valuestring);
        cJSON_Delete(reply);
}

/* `sh -c script` in session, which must exit 0; its stdout (malloc'd). */
static char *sh(const char *session, const char *script)
{
        cJSON *p = cJSON_CreateObject(), *keep;
        const cJSON *res;
        char *out;

        cJSON_AddStringToObject(p, "command", script);
        cJSON_AddNumberToObject(p, "timeout_seconds", 120);
        res = ok(call("exec", session, p), &keep);
        cr_assert_eq(apic_num(res, "exit_code"), 0, "%s: %s", script, cJSON_PrintUnformatted(keep));
        out = strdup(apic_str(res, "stdout"));
        cJSON_Delete(keep);
        return out;
}

/* Every entry under /workspace: type, path, mode, and a file's hash or a link's target. */
#define MANIFEST                                                                                                       \
        "cd /workspace && find . -mindepth 1 | LC_ALL=C sort | while read -r f; do "                                   \
        "if [ -L \"$f\" ]; then echo \"L $f -> $(readlink \"$f\")\"; "                                                 \
        "elif [ -d \"$f\" ]; then echo \"D $f $(stat -c %a \"$f\")\"; "                                                \
        "else echo \"F $f $(stat -c '%a %s' \"$f\") $(sha256sum < \"$f\" | cut -c1-64)\"; fi; done"

static char *manifest(const char *session)
{
        return sh(session, MANIFEST);
}

/* snapshot_session: the new snapshot's id (static buffer per call site). */
static void take(const char *session, const char *name, char id[64])
{
        cJSON *p = cJSON_CreateObject(), *keep;
        const cJSON *res;

        if (name)
                cJSON_AddStringToObject(p, "name", name);
        res = ok(call("snapshot_session", session, p), &keep);
        snprintf(id, 64, "%s", apic_str(res, "snapshot"));
        cr_assert(strncmp(id, "snap-", 5) == 0, "%s", cJSON_PrintUnformatted(keep));
        cr_assert_str_eq(apic_str(res, "state"), "ready");
        cJSON_Delete(keep);
}

static void restore(const char *session, const char *id)
{
        cJSON *p = cJSON_CreateObject(), *keep;
        const cJSON *res;

        cJSON_AddStringToObject(p, "snapshot", id);
        res = ok(call("restore_session", session, p), &keep);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "restored")));
        cr_assert_str_eq(apic_str(res, "state"), "stopped");
        cJSON_Delete(keep);
}

/* fork_session from {key: value} into child; the result (freed with *keep). */
static const cJSON *fork_from(const char *key, const char *value, const char *child, cJSON **keep)
{
        cJSON *p = cJSON_CreateObject(), *from = cJSON_AddObjectToObject(p, "from");

        cJSON_AddStringToObject(from, key, value);
        return ok(call("fork_session", child, p), keep);
}

static uid_t uid_of(const char *session)
{
        uid_t uid = 0;
        cr_assert_eq(sessuid_lookup(d->store, "u1", session, &uid), 0, "no uid for %s", session);
        return uid;
}

static bool dir_is_empty(const char *path)
{
        char cmd[SBX_PATH_MAX + 32];
        snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s')\"", path);
        return system(cmd) == 0;
}

/* Everything a test makes under the workspace: a tree with modes, a
 * binary file, an empty one, a nested symlink and one to a host path. */
static void populate(const char *session, const char *victim)
{
        char script[2048];

        snprintf(script, sizeof(script),
                 "cd /workspace && mkdir -p d/e/f && printf 'alpha\\n' > d/a.txt && chmod 640 d/a.txt && "
                 "head -c 300000 /dev/urandom > bin && chmod 700 bin && : > empty && chmod 750 d/e && "
                 "ln -s d/a.txt link && ln -s ../../a.txt d/e/f/up && ln -s '%s/host-file' out && "
                 "printf 'deep\\n' > d/e/f/deep.txt",
                 victim);
        free(sh(session, script));
}

Test(snapshot, restore_puts_the_files_back_byte_for_byte, .fini = teardown)
{
        char id[64], *before, *after, *changed, victim_file[SBX_PATH_MAX], host[SBX_PATH_MAX];
        char *victim = testenv_tmpdir();
        struct stat st;
        uid_t uid;

        setup("off");
        populate("s", victim);
        before = manifest("s");
        cr_assert_not_null(strstr(before, "L ./out -> "), "%s", before);
        take("s", "first", id);
        /* the copy is the daemon's, outside every workspace */
        snprintf(host, sizeof(host), "%s/snapshots/u1/%s/workspace.tar.zst", cfg.data_dir, id);
        cr_assert_eq(stat(host, &st), 0, "%s", host);
        cr_assert_eq(st.st_uid, 0);

        /* changes of every kind, and a directory replaced by a symlink to a host directory */
        free(sh("s",
                "cd /workspace && rm -rf d/e && printf 'changed' > d/a.txt && chmod 777 d/a.txt && "
                "head -c 1000 /dev/urandom > bin && rm link && mkdir link && touch new && rm out && "
                "echo x > out"));
        {
                char script[SBX_PATH_MAX + 64];
                snprintf(script, sizeof(script), "cd /workspace && rm -rf d && ln -s '%s' d", victim);
                free(sh("s", script));
        }
        changed = manifest("s");
        cr_assert_str_neq(changed, before);
        free(changed);

        restore("s", "first"); /* by name */
        {
                cJSON *keep;
                const cJSON *res = ok(call("session_info", "s", NULL), &keep);
                cr_assert_str_eq(apic_str(res, "state"), "stopped", "until the next request makes its container");
                cJSON_Delete(keep);
        }
        after = manifest("s");
        cr_assert_str_eq(after, before, "restored:\n%s\nwanted:\n%s", after, before);
        /* nothing went through the planted symlinks */
        cr_assert(dir_is_empty(victim), "restore wrote into %s", victim);
        snprintf(victim_file, sizeof(victim_file), "%s/host-file", victim);
        cr_assert_neq(lstat(victim_file, &st), 0);
        /* the files are the session's uid's; no setuid came back */
        uid = uid_of("s");
        snprintf(host, sizeof(host), "%s/workspaces/u1/s/d/e/f/deep.txt", cfg.data_dir);
        cr_assert_eq(lstat(host, &st), 0);
        cr_assert_eq(st.st_uid, uid);
        snprintf(host, sizeof(host), "%s/workspaces/u1/s/out", cfg.data_dir);
        cr_assert_eq(lstat(host, &st), 0);
        cr_assert(S_ISLNK(st.st_mode), "out is a symlink again");
        cr_assert_eq(st.st_uid, uid);
        free(before);
        free(after);
        free(victim);
}

/* A setuid bit and an archive entry outside the tree never come back. */
Test(snapshot, restore_drops_setuid_bits, .fini = teardown)
{
        char id[64], host[SBX_PATH_MAX];
        struct stat st;

        setup("off");
        free(sh("s", "cd /workspace && echo hi > su && chmod 4755 su && mkdir sg && chmod 2775 sg"));
        take("s", NULL, id);
        restore("s", id);
        free(sh("s", "true"));
        snprintf(host, sizeof(host), "%s/workspaces/u1/s/su", cfg.data_dir);
        cr_assert_eq(lstat(host, &st), 0);
        cr_assert_eq(st.st_mode & 07777, 0755, "mode %o", st.st_mode & 07777);
        snprintf(host, sizeof(host), "%s/workspaces/u1/s/sg", cfg.data_dir);
        cr_assert_eq(lstat(host, &st), 0);
        cr_assert_eq(st.st_mode & 07777, 0775, "mode %o", st.st_mode & 07777);
}

static bool context_lost_forked(const cJSON *contexts, const char *name)
{
        const cJSON *c;
        cJSON_ArrayForEach(c, contexts) {
                const cJSON *lost = cJSON_GetObjectItem(c, "pending_state_lost");
                if (strcmp(apic_str(c, "context"), name) == 0)
                        return lost && strcmp(apic_str(lost, "cause"), "forked") == 0;
        }
        return false;
}

Test(snapshot, fork_copies_the_files_and_then_diverges, .fini = teardown)
{
        char *p_files, *c_files, *p_id, *c_id, *victim = testenv_tmpdir();
        struct session_info pi, ci;
        cJSON *keep, *p;
        const cJSON *res;

        setup_with("off", NULL, TESTENV_PYTHON_IMAGE);
        populate("parent", victim);
        p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "code", "x = 41");
        cJSON_AddStringToObject(p, "context", "main");
        ok(call("run_cell", "parent", p), &keep);
        cJSON_Delete(keep);
        p_files = manifest("parent");

        res = fork_from("session", "parent", "child", &keep);
        cr_assert_str_eq(apic_str(res, "session"), "child");
        cr_assert_str_eq(apic_str(res, "state_lost"), "forked");
        cr_assert_str_eq(apic_str(cJSON_GetObjectItem(res, "forked_from"), "session"), "parent");
        cJSON_Delete(keep);
        c_files = manifest("child");
        cr_assert_str_eq(c_files, p_files, "child:\n%s\nparent:\n%s", c_files, p_files);
        free(c_files);

        /* a write in either is not seen by the other */
        free(sh("parent", "echo from-parent > /workspace/p-only && echo p > /workspace/d/a.txt"));
        free(sh("child", "echo from-child > /workspace/c-only"));
        c_files = sh("child", "cat /workspace/d/a.txt; ls /workspace/p-only 2>&1 || true");
        cr_assert_str_eq(c_files, "alpha\nls: cannot access '/workspace/p-only': No such file or directory\n", "%s",
                         c_files);
        free(c_files);
        c_files = sh("parent", "ls /workspace/c-only 2>&1 || true");
        cr_assert_not_null(strstr(c_files, "No such file"), "%s", c_files);
        free(c_files);

        /* own uid, container and ports: nothing shared but the copied files */
        p_id = sh("parent", "id -u");
        c_id = sh("child", "id -u");
        cr_assert_str_neq(p_id, c_id);
        cr_assert_neq(uid_of("parent"), uid_of("child"));
        cr_assert_eq(session_get_info(d->sessions, "u1", "parent", &pi), 0);
        cr_assert_eq(session_get_info(d->sessions, "u1", "child", &ci), 0);
        cr_assert_str_neq(pi.container_id, ci.container_id);
        cr_assert_gt(ci.n_ports, 0);
        for (size_t i = 0; i < pi.n_ports; i++)
                for (size_t j = 0; j < ci.n_ports; j++)
                        cr_assert_neq(pi.ports[i], ci.ports[j], "port %d shared", pi.ports[i]);
        session_info_done(&pi);
        session_info_done(&ci);

        /* the parent's context is named in the child, its state reported lost, never silently fresh */
        res = ok(call("list_contexts", "child", NULL), &keep);
        cr_assert(context_lost_forked(cJSON_GetObjectItem(res, "contexts"), "main"), "%s",
                  cJSON_PrintUnformatted(keep));
        cJSON_Delete(keep);
        p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "code", "y = 1");
        cJSON_AddStringToObject(p, "context", "main");
        res = ok(call("run_cell", "child", p), &keep);
        cr_assert_str_eq(apic_str(cJSON_GetObjectItem(res, "state_lost"), "cause"), "forked", "%s",
                         cJSON_PrintUnformatted(keep));
        cJSON_Delete(keep);

        /* from a live session the snapshot is made and not kept */
        res = ok(call("list_snapshots", NULL, NULL), &keep);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(res, "snapshots")), 0, "%s", cJSON_PrintUnformatted(keep));
        cJSON_Delete(keep);
        /* a name in use is a conflict, and a fork into itself is refused */
        p = cJSON_CreateObject();
        cJSON_AddStringToObject(cJSON_AddObjectToObject(p, "from"), "session", "parent");
        refused(call("fork_session", "child", p), "conflict", "exists");
        p = cJSON_CreateObject();
        cJSON_AddStringToObject(cJSON_AddObjectToObject(p, "from"), "session", "parent");
        refused(call("fork_session", "parent", p), "invalid", "itself");
        free(p_files);
        free(p_id);
        free(c_id);
        free(victim);
}

Test(snapshot, fork_from_a_snapshot_has_its_files_not_later_ones, .fini = teardown)
{
        char id[64], *snap_files, *files;
        cJSON *keep;

        setup("off");
        free(sh("a", "echo one > /workspace/f"));
        snap_files = manifest("a");
        take("a", "v1", id);
        free(sh("a", "echo two > /workspace/f && echo more > /workspace/g"));
        fork_from("snapshot", id, "b", &keep);
        cJSON_Delete(keep);
        files = manifest("b");
        cr_assert_str_eq(files, snap_files);
        free(files);
        free(snap_files);
        /* snapshot names and ids are the user's own */
        refused(call("fork_session", "c", apic_json("{\"from\": {\"snapshot\": \"snap-0000000000000000\"}}")),
                "not_found", "no snapshot");
}

static bool pool_full(void *ud)
{
        struct pool_stats ps;
        (void)ud;
        pool_stats(d->pool, &ps);
        return ps.ready == (size_t)ps.size;
}

/* A fork takes a warm container when one is ready: the files arrive in its
 * workspace while it is frozen. */
Test(snapshot, fork_is_served_from_the_warm_pool, .fini = teardown)
{
        char *p_files, *c_files;
        cJSON *keep;
        const cJSON *res;

        pool_size = 1;
        setup("off");
        pool_size = 0;
        free(sh("wp", "mkdir -p /workspace/x && echo warm > /workspace/x/f && ln -s x/f /workspace/l"));
        p_files = manifest("wp");
        cr_assert_geq(fixture_wait(pool_full, NULL, 120000), 0, "the pool did not fill");
        res = fork_from("session", "wp", "wc", &keep);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "pooled")), "%s", cJSON_PrintUnformatted(keep));
        cJSON_Delete(keep);
        c_files = manifest("wc");
        cr_assert_str_eq(c_files, p_files);
        cr_assert_neq(uid_of("wp"), uid_of("wc"));
        free(c_files);
        free(p_files);
}

static bool container_has_network(const char *id)
{
        struct engine_container_info info;
        cr_assert_eq(engine_inspect(d->engine, id, &info, NULL), 0, "inspect %s", id);
        return info.has_network || strcmp(info.network_mode, "none") != 0;
}

Test(snapshot, private_parent_gives_a_private_child, .fini = teardown)
{
        char id[64], cid[65];
        cJSON *keep;
        const cJSON *res, *it;

        setup_with("off", "bridge", NULL);
        free(sh("pp", "echo secret > /workspace/s"));
        free(sh("plain", "echo plain > /workspace/p"));
        {
                struct session_info i;
                cr_assert_eq(session_get_info(d->sessions, "u1", "plain", &i), 0);
                cr_assert_str_eq(i.network_mode, "bridge", "the default network is there to lose");
                session_info_done(&i);
        }
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "session", "pp");
        cJSON_AddStringToObject(p, "dataset", "customers.csv");
        ok(apic_call(cfg.api_socket, tok_conn, "mark_private", p), &keep);
        cJSON_Delete(keep);

        take("pp", "secret", id);
        res = ok(call("list_snapshots", "pp", NULL), &keep);
        it = cJSON_GetArrayItem(cJSON_GetObjectItem(res, "snapshots"), 0);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(it, "private")), "%s", cJSON_PrintUnformatted(keep));
        cJSON_Delete(keep);

        res = fork_from("snapshot", "secret", "kid", &keep);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "private")), "%s", cJSON_PrintUnformatted(keep));
        cr_assert_str_eq(apic_str(res, "network_mode"), "none");
        cJSON_Delete(keep);
        /* its one container never had a network */
        cr_assert_eq(fixture_count_containers("u1", "kid"), 1);
        fixture_container_of(d, "u1", "kid", cid);
        cr_assert(!container_has_network(cid));

        /* a session restored from a private snapshot is private before its next container */
        restore("plain", "secret");
        res = ok(call("session_info", "plain", NULL), &keep);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "private")));
        cr_assert_str_eq(apic_str(res, "network_mode"), "none");
        free(sh("plain", "true")); /* its next container */
        fixture_container_of(d, "u1", "plain", cid);
        cr_assert(!container_has_network(cid));
        cJSON_Delete(keep);
}

Test(snapshot, quota_exceeded_is_a_clear_error, .fini = teardown)
{
        char id[64];
        cJSON *keep;
        const cJSON *res;

        max_snapshots = 3;
        max_snapshot_bytes = 500000;
        setup("off");
        /* random bytes do not compress: each copy takes about 200 kB */
        free(sh("q", "head -c 200000 /dev/urandom > /workspace/r"));
        take("q", "one", id);
        take("q", NULL, id);
        refused(call("snapshot_session", "q", NULL), "quota_exceeded", "limits.snapshot_bytes_per_user");
        res = ok(call("list_snapshots", NULL, NULL), &keep);
        cr_assert_eq(apic_num(res, "count"), 2, "the refused copy is gone: %s", cJSON_PrintUnformatted(keep));
        cJSON_Delete(keep);
        refused(call("snapshot_session", "q", apic_json("{\"name\": \"one\"}")), "conflict", "one");
        /* deleting one makes room; then the count is the limit */
        ok(call("delete_snapshot", NULL, apic_json("{\"snapshot\": \"one\"}")), &keep);
        cJSON_Delete(keep);
        free(sh("q", "echo small > /workspace/r"));
        take("q", NULL, id);
        take("q", NULL, id);
        refused(call("snapshot_session", "q", NULL), "quota_exceeded", "limits.snapshots_per_user is 3");
        res = ok(call("list_snapshots", NULL, NULL), &keep);
        cr_assert_eq(apic_num(res, "count"), 3);
        cr_assert_eq(apic_num(res, "max_count"), 3);
        cJSON_Delete(keep);
        /* names are checked */
        refused(call("snapshot_session", "q", apic_json("{\"name\": \"../x\"}")), "invalid", "params.name");
        refused(call("restore_session", "q", apic_json("{\"snapshot\": \"/etc\"}")), "invalid", "snapshot");
}

Test(snapshot, gc_prunes_old_snapshots_and_keeps_the_rest, .fini = teardown)
{
        char old_id[64], new_id[64], path[SBX_PATH_MAX];
        struct gc_options opts = {0};
        struct gc_report rep;
        struct sbx_error err = {0};
        struct store_snapshot a, b;
        struct stat st;

        setup("off");
        free(sh("g", "echo g > /workspace/g"));
        take("g", "old", old_id);
        take("g", "new", new_id);
        cr_assert_eq(store_snapshot_get(d->store, "u1", old_id, &a), 0);
        cr_assert_eq(store_snapshot_get(d->store, "u1", new_id, &b), 0);
        cr_assert_gt(b.created_at, a.created_at);
        {
                /* the operator sees both, per user */
                char *out = NULL;
                cr_assert_eq(fixture_sandboxctl(SANDBOXD_BINARY_DIR, cfg.admin_socket, "snapshots u1", &out), 0, "%s",
                             out);
                cr_assert_not_null(strstr(out, old_id), "%s", out);
                cr_assert_not_null(strstr(out, new_id), "%s", out);
                cr_assert_not_null(strstr(out, "2 snapshots"), "%s", out);
                free(out);
        }
        /* the clock gc judges by: the old one just past gc.snapshot_retention, the new one not */
        cfg.snapshot_retention_s = 3600;
        opts.now_ms = a.created_at + 3600 * 1000LL + 1;
        store_snapshot_done(&a);
        store_snapshot_done(&b);
        cr_assert_eq(gc_run(&cfg, &opts, &rep, &err), 0, "%s", err.msg);
        cr_assert_eq(rep.kinds[GC_SNAPSHOTS].count, 1);
        gc_report_done(&rep);
        cr_assert_eq(store_snapshot_get(d->store, "u1", old_id, &a), -ENOENT);
        cr_assert_eq(store_snapshot_get(d->store, "u1", new_id, &b), 0);
        store_snapshot_done(&b);
        snprintf(path, sizeof(path), "%s/snapshots/u1/%s", cfg.data_dir, old_id);
        cr_assert_neq(stat(path, &st), 0, "the old one's files are gone");
        snprintf(path, sizeof(path), "%s/snapshots/u1/%s/workspace.tar.zst", cfg.data_dir, new_id);
        cr_assert_eq(stat(path, &st), 0, "the new one's files stay");
        /* -1 keeps them forever */
        cfg.snapshot_retention_s = -1;
        opts.now_ms = sbx_wall_ms() + 3650LL * 86400 * 1000;
        cr_assert_eq(gc_run(&cfg, &opts, &rep, &err), 0, "%s", err.msg);
        cr_assert_eq(rep.kinds[GC_SNAPSHOTS].count, 0);
        gc_report_done(&rep);
}

Test(snapshot, loop_mode_keeps_the_size_limit, .fini = teardown)
{
        char id[64], path[SBX_PATH_MAX], *files, *df;
        struct stat st;
        cJSON *keep;
        const cJSON *res;

        setup("loop");
        free(sh("l",
                "head -c 4000000 /dev/urandom > /workspace/big && mkdir /workspace/d && ln -s big /workspace/d/ln"));
        files = manifest("l");
        res = ok(call("snapshot_session", "l", NULL), &keep);
        snprintf(id, sizeof(id), "%s", apic_str(res, "snapshot"));
        cr_assert_str_eq(apic_str(res, "kind"), "image");
        cr_assert_eq(apic_num(res, "workspace_size"), 24 << 20);
        cr_assert_lt(apic_num(res, "bytes"), 24 << 20, "a sparse copy: %s", cJSON_PrintUnformatted(keep));
        cJSON_Delete(keep);
        snprintf(path, sizeof(path), "%s/snapshots/u1/%s/workspace.ext4", cfg.data_dir, id);
        cr_assert_eq(stat(path, &st), 0);
        cr_assert_eq(st.st_size, 24 << 20);
        cr_assert_lt(st.st_blocks * 512, st.st_size, "sparse");

        fork_from("snapshot", id, "lc", &keep);
        cJSON_Delete(keep);
        df = sh("lc", "cat /workspace/big | sha256sum | cut -c1-64");
        free(df);
        {
                char *cf = manifest("lc");
                cr_assert_str_eq(cf, files);
                free(cf);
        }
        /* the child's file system is the same size: writing past the limit fails */
        df = sh("lc", "head -c 40000000 /dev/zero > /workspace/fill 2>/dev/null; echo $?");
        cr_assert_str_neq(df, "0\n", "wrote 40 MB into a 24 MB workspace");
        free(df);

        /* restore in loop mode: the image replaced, the files back */
        free(sh("l", "rm /workspace/big && echo new > /workspace/n"));
        restore("l", id);
        df = manifest("l");
        cr_assert_str_eq(df, files);
        free(df);
        /* a fork of the live session takes its image (moved out of the passing snapshot) */
        fork_from("session", "l", "lf", &keep);
        cJSON_Delete(keep);
        df = manifest("lf");
        cr_assert_str_eq(df, files);
        free(df);
        df = sh("lf", "df -k /workspace | tail -1 | awk '{print $2}'");
        cr_assert_lt(atol(df), 24 * 1024, "the fork's file system is the 24 MB one: %s", df);
        cr_assert_gt(atol(df), 16 * 1024, "%s", df);
        free(df);
        res = ok(call("list_snapshots", NULL, NULL), &keep);
        cr_assert_eq(apic_num(res, "count"), 1, "only the one taken by name: %s", cJSON_PrintUnformatted(keep));
        cJSON_Delete(keep);
        free(files);
}

/* A daemon that died in the middle of a copy: the next start removes the
 * unfinished snapshot and thaws the container the copy had frozen. */
Test(snapshot, a_copy_cut_short_is_cleared_and_its_session_thawed, .fini = teardown)
{
        struct store_snapshot row = {0}, got;
        struct engine_container_info info;
        char cid[65], path[SBX_PATH_MAX];
        int64_t count, bytes;
        struct stat st;

        setup("off");
        free(sh("cut", "echo x > /workspace/x"));
        fixture_container_of(d, "u1", "cut", cid);
        /* what snapshot_take leaves at the moment it froze the session */
        snprintf(row.id, sizeof(row.id), "snap-00000000000000cc");
        snprintf(row.user, sizeof(row.user), "u1");
        snprintf(row.session, sizeof(row.session), "cut");
        snprintf(row.kind, sizeof(row.kind), "archive");
        row.created_at = sbx_wall_ms();
        cr_assert_eq(store_snapshot_reserve(d->store, &row, 10, INT64_C(1) << 40, &count, &bytes), 0);
        cr_assert_eq(store_snapshot_set_paused(d->store, "u1", row.id, cid), 0);
        snprintf(path, sizeof(path), "%s/snapshots", cfg.data_dir);
        cr_assert_eq(mkdir(path, 0700), 0);
        snprintf(path, sizeof(path), "%s/snapshots/u1", cfg.data_dir);
        cr_assert_eq(mkdir(path, 0700), 0);
        snprintf(path, sizeof(path), "%s/snapshots/u1/%s", cfg.data_dir, row.id);
        cr_assert_eq(mkdir(path, 0700), 0);
        cr_assert_eq(engine_pause(d->engine, cid, NULL), 0);
        cr_assert_eq(engine_inspect(d->engine, cid, &info, NULL), 0);
        cr_assert_str_eq(info.status, "paused");

        reopen();
        cr_assert_eq(engine_inspect(d->engine, cid, &info, NULL), 0);
        cr_assert_str_eq(info.status, "running", "thawed at the start");
        cr_assert_eq(store_snapshot_get(d->store, "u1", row.id, &got), -ENOENT);
        cr_assert_neq(stat(path, &st), 0, "its directory is gone");
        free(sh("cut", "cat /workspace/x"));
}

/* A session already paused (pause_session's state) is copied as it is and
 * stays paused; the snapshot says so. */
Test(snapshot, a_paused_session_stays_paused, .fini = teardown)
{
        struct engine_container_info info;
        char cid[65];
        cJSON *keep;
        const cJSON *res;

        setup("off");
        free(sh("pz", "echo frozen > /workspace/f"));
        fixture_container_of(d, "u1", "pz", cid);
        cr_assert_eq(engine_pause(d->engine, cid, NULL), 0);
        res = ok(call("snapshot_session", "pz", apic_json("{\"name\": \"while-paused\"}")), &keep);
        cr_assert_str_eq(apic_str(res, "state"), "ready");
        cJSON_Delete(keep);
        cr_assert_eq(engine_inspect(d->engine, cid, &info, NULL), 0);
        cr_assert_str_eq(info.status, "paused", "the snapshot left it paused");
        {
                /* its audit row says the copy found it paused */
                struct store_audit_row *rows = NULL;
                size_t n = 0, found = 0;
                cr_assert_eq(store_audit_list(d->store, "u1", "pz", 100, &rows, &n), 0);
                for (size_t i = 0; i < n; i++)
                        if (strcmp(rows[i].action, "snapshot.create") == 0 && rows[i].detail &&
                            strstr(rows[i].detail, "\"was_paused\":true"))
                                found++;
                store_audit_rows_free(rows, n);
                cr_assert_eq(found, 1);
        }
        cr_assert_eq(engine_unpause(d->engine, cid, NULL), 0);
        fork_from("snapshot", "while-paused", "pz2", &keep);
        cJSON_Delete(keep);
        char *out = sh("pz2", "cat /workspace/f");
        cr_assert_str_eq(out, "frozen\n");
        free(out);
}

/* ---- issue 34: bounds answered as client errors, sparse files ---- */

/* `mkdir` n levels of d/ under /workspace/deep (which it empties first). */
static void make_deep(const char *session, int n)
{
        char script[256];

        snprintf(script, sizeof(script),
                 "rm -rf /workspace/deep && mkdir /workspace/deep && cd /workspace/deep && "
                 "i=0; while [ $i -lt %d ]; do mkdir d && cd d || exit 1; i=$((i+1)); done; echo leaf > f",
                 n - 1);
        free(sh(session, script));
}

/* One tools/call through sandboxd-mcp (stdio, over the API socket): its output. */
static char *mcp_call(const char *session, const char *tool, const char *args)
{
        char dir[SBX_PATH_MAX], in[SBX_PATH_MAX + 16], out[SBX_PATH_MAX + 16], cmd[4 * SBX_PATH_MAX];
        char *body = calloc(1, 1 << 20);
        FILE *f;
        size_t n;

        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        snprintf(in, sizeof(in), "%s/mcp-in.jsonl", dirname(dir));
        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        snprintf(out, sizeof(out), "%s/mcp-out.jsonl", dirname(dir));
        f = fopen(in, "we");
        cr_assert_not_null(f);
        fprintf(f,
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n"
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
                "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
                "\"arguments\":%s}}\n",
                tool, args);
        fclose(f);
        snprintf(cmd, sizeof(cmd),
                 "SANDBOXD_TOKEN=%s SANDBOXD_API_SOCKET=%s timeout 300 %s/sandboxd-mcp --session %s "
                 "--drain-ms 240000 <%s >%s 2>/dev/null",
                 tok, cfg.api_socket, SANDBOXD_BINARY_DIR, session, in, out);
        cr_assert_eq(system(cmd), 0, "%s", cmd);
        f = fopen(out, "re");
        cr_assert_not_null(f);
        n = fread(body, 1, (1 << 20) - 1, f);
        body[n] = '\0';
        fclose(f);
        return body;
}

/* 256 levels are kept; one more is too_large, naming the bound, on every
 * front (it was internal, HTTP 500), and nothing is left of the attempt. */
Test(snapshot, a_workspace_deeper_than_256_levels_is_a_client_error_naming_it, .fini = teardown)
{
        char id[64], *out, *sum;
        cJSON *keep;
        const cJSON *res;

        setup("off");
        make_deep("deep", 256);
        sum = sh("deep", "find /workspace/deep | wc -l");
        take("deep", "at-the-bound", id);
        make_deep("deep", 257);
        refused(call("snapshot_session", "deep", NULL), "too_large", "256");
        refused(call("fork_session", "deep2", apic_json("{\"from\": {\"session\": \"deep\"}}")), "too_large", "256");
        out = mcp_call("deep", "snapshot_session", "{}");
        cr_assert_not_null(strstr(out, "\"isError\":true"), "%s", out);
        cr_assert_not_null(strstr(out, "too_large: "), "%s", out);
        cr_assert_not_null(strstr(out, "256"), "%s", out);
        cr_assert_null(strstr(out, "internal"), "%s", out);
        free(out);
        res = ok(call("list_snapshots", NULL, NULL), &keep);
        cr_assert_eq(apic_num(res, "count"), 1, "only the one at the bound: %s", cJSON_PrintUnformatted(keep));
        cJSON_Delete(keep);
        /* the one at the bound restores whole, over the deeper tree, which goes entirely
         * (it stayed behind as .restore-deep, and the next restore failed as internal) */
        restore("deep", id);
        out = sh("deep", "find /workspace/deep | wc -l");
        cr_assert_str_eq(out, sum);
        free(out);
        {
                char path[SBX_PATH_MAX + 64];
                struct stat st;
                snprintf(path, sizeof(path), "%s/workspaces/u1/.restore-deep", cfg.data_dir);
                cr_assert_neq(lstat(path, &st), 0, "the old tree is gone: %s", path);
        }
        make_deep("deep", 300);
        restore("deep", id);
        restore("deep", id);
        free(sum);
}

#define SPARSE_SIZE (INT64_C(1) << 30)
/* A 1 GiB file of holes but for 3 blocks: at its start, its middle and its end. */
#define SPARSE_MAKE                                                                                                    \
        "cd /workspace && truncate -s 1G sparse && printf head | dd of=sparse conv=notrunc 2>/dev/null && "            \
        "printf middle | dd of=sparse bs=1 seek=536870912 conv=notrunc 2>/dev/null && "                                \
        "printf tail | dd of=sparse bs=1 seek=1073741820 conv=notrunc 2>/dev/null && sync"
/* size, 512-byte blocks allocated, and a hash of the content */
#define SPARSE_STAT "cd /workspace && stat -c '%s %b' sparse && sha256sum < sparse | cut -c1-64"

/* The file's size, hash and allocation in session: the size and hash are
 * the original's and at most max_blocks 512-byte blocks are allocated. */
static void sparse_kept(const char *session, const char *want_hash, long long max_blocks)
{
        char *out = sh(session, SPARSE_STAT), hash[65] = "";
        long long size = 0, blocks = -1;

        cr_assert_eq(sscanf(out, "%lld %lld %64s", &size, &blocks, hash), 3, "%s", out);
        cr_assert_eq(size, SPARSE_SIZE, "%s: %s", session, out);
        cr_assert_str_eq(hash, want_hash, "%s reads back the same", session);
        cr_assert_leq(blocks, max_blocks, "%s: the file stays sparse: %s", session, out);
        free(out);
}

static void sparse_round_trip(const char *mode)
{
        char id[64], *out, hash[65] = "";
        long long size = 0, blocks = -1, max_blocks;
        cJSON *keep;
        const cJSON *res;

        setup(mode);
        free(sh("sp", SPARSE_MAKE));
        out = sh("sp", SPARSE_STAT);
        cr_assert_eq(sscanf(out, "%lld %lld %64s", &size, &blocks, hash), 3, "%s", out);
        free(out);
        cr_assert_eq(size, SPARSE_SIZE);
        cr_assert_lt(blocks, 4096, "the file system makes sparse files: %lld blocks", blocks);
        /* 3 data blocks: whatever the block size, far below a MiB (2048 blocks) */
        max_blocks = blocks > 64 ? blocks : 64;

        res = ok(call("snapshot_session", "sp", apic_json("{\"name\": \"sparse\"}")), &keep);
        snprintf(id, sizeof(id), "%s", apic_str(res, "snapshot"));
        if (strcmp(mode, "loop") != 0) /* an image's copy is bounded by its size anyway */
                cr_assert_lt(apic_num(res, "bytes"), 1 << 20, "the archive of a sparse GiB: %s",
                             cJSON_PrintUnformatted(keep));
        cJSON_Delete(keep);
        /* restore over a changed workspace */
        free(sh("sp", "rm /workspace/sparse && echo changed > /workspace/other"));
        restore("sp", id);
        sparse_kept("sp", hash, max_blocks);
        /* fork from the snapshot, and from the live session */
        fork_from("snapshot", id, "sp-a", &keep);
        cJSON_Delete(keep);
        sparse_kept("sp-a", hash, max_blocks);
        fork_from("session", "sp", "sp-b", &keep);
        cJSON_Delete(keep);
        sparse_kept("sp-b", hash, max_blocks);
}

Test(snapshot, a_sparse_file_stays_sparse_through_snapshot_restore_and_fork, .fini = teardown)
{
        sparse_round_trip("off");
}

Test(snapshot, a_sparse_file_stays_sparse_in_loop_mode, .fini = teardown)
{
        sparse_round_trip("loop");
}
