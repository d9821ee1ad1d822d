/* snapshot.c — workspace snapshots, restore and fork (snapshot.h): the
 * records (store_snapshot.h), the environment a snapshot carries, the
 * frozen point of a capture, and the restore of files into a session.
 * The copies themselves are snapshot_copy.c's (images) and
 * snapshot_archive.c's (trees).
 *
 * Paths: everything is reached from data_dir's fd one component at a time
 * with O_NOFOLLOW. {data_dir}/snapshots and everything below are root's,
 * 0700. State: the counters only (atomics). */
#include "sandboxd/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/audit.h"
#include "sandboxd/cells.h"
#include "sandboxd/engine.h"
#include "sandboxd/egress_rules.h"
#include "sandboxd/events.h"
#include "sandboxd/log.h"
#include "sandboxd/privacy.h"
#include "sandboxd/session.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"
#include "sandboxd/store_egress.h"
#include "sandboxd/wsquota.h"
#include "snapshot_internal.h"

#define SNAP_DIR "snapshots"
#define IMAGE_FILE "workspace.ext4"
#define ARCHIVE_FILE "workspace.tar.zst"

static _Atomic uint64_t n_taken, n_restored, n_forked, n_deleted, n_failed, n_bytes;

void snapshot_counters_get(struct snapshot_counters *ret)
{
        ret->taken = atomic_load(&n_taken);
        ret->restored = atomic_load(&n_restored);
        ret->forked = atomic_load(&n_forked);
        ret->deleted = atomic_load(&n_deleted);
        ret->failed = atomic_load(&n_failed);
        ret->bytes_written = atomic_load(&n_bytes);
}

bool snapshot_name_valid(const char *name)
{
        size_t n = name ? strlen(name) : 0;

        if (n == 0 || n > STORE_SNAPSHOT_NAME_MAX || name[0] == '.' || name[0] == '-' || strncmp(name, "snap-", 5) == 0)
                return false;
        for (size_t i = 0; i < n; i++) {
                char ch = name[i];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                      ch == '_' || ch == '-'))
                        return false;
        }
        return true;
}

static bool loop_mode(const struct sbx_config *cfg)
{
        return strcmp(cfg->workspace_quota_mode, "loop") == 0;
}

/* ---- paths ---- */

/* dirfd/name as a directory, never through a symlink; made root's 0700 when make. */
static int dir_at(int dirfd, const char *name, bool make)
{
        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && make) {
                if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
                        return -errno;
                fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        return fd < 0 ? -errno : fd;
}

/* {data_dir}/<top>/<user>, made when make. */
static int user_dir(const struct sbx_config *cfg, const char *top, const char *user, bool make)
{
        _cleanup_close_ int root = open(cfg->data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), t = -1;

        if (root < 0)
                return -errno;
        t = dir_at(root, top, make);
        if (t < 0)
                return t;
        return dir_at(t, user, make);
}

/* The snapshot's own directory. */
static int snap_dir(const struct sbx_config *cfg, const char *user, const char *id, bool make)
{
        _cleanup_close_ int u = user_dir(cfg, SNAP_DIR, user, make);

        if (u < 0)
                return u;
        return dir_at(u, id, make);
}

static void remove_files(const struct sbx_config *cfg, const char *user, const char *id)
{
        _cleanup_close_ int u = user_dir(cfg, SNAP_DIR, user, false);
        int r;

        if (u < 0)
                return;
        r = snapcopy_remove_at(u, id);
        if (r < 0)
                log_warn("snapshot %s of %s: cannot remove its files: %s", id, user, strerror(-r));
}

/* ---- the environment a snapshot carries ---- */

static cJSON *meta_build(const struct snapshot_ctx *c, const char *user, const char *session,
                         const struct session_info *info)
{
        cJSON *m = cJSON_CreateObject(), *a;
        struct store_session_options opt = {0};
        struct store_session_spec spec = {0};
        struct store_egress_rule *rules = NULL;
        struct engine_image_info img = {0};
        char image[256];
        size_t n = 0;

        if (!m)
                return NULL;
        sbx_strlcpy(image, c->cfg->image, sizeof(image));
        if (store_session_options_get(c->store, user, session, &opt) == 0) {
                if (opt.image[0])
                        sbx_strlcpy(image, opt.image, sizeof(image));
                if (opt.env_json) {
                        cJSON *env = cJSON_Parse(opt.env_json);
                        if (env)
                                cJSON_AddItemToObject(m, "env", env);
                }
        }
        store_session_options_done(&opt);
        cJSON_AddStringToObject(m, "image_name", opt.image[0] ? image : "");
        /* the image the session runs (its id), else the one its name resolves to now */
        if (info->image[0] && strncmp(info->image, "sha256:", 7) == 0)
                cJSON_AddStringToObject(m, "image_id", info->image);
        else if (engine_image_inspect(c->engine, image, &img, NULL) == 0)
                cJSON_AddStringToObject(m, "image_id", img.id);
        if (img.digest[0])
                cJSON_AddStringToObject(m, "image_digest", img.digest);
        cJSON_AddStringToObject(m, "runtime", info->runtime);
        cJSON_AddStringToObject(m, "workspace_mode", c->cfg->workspace_quota_mode);
        if (store_session_spec_get(c->store, user, session, &spec) == 0) {
                cJSON *labels = spec.labels_json ? cJSON_Parse(spec.labels_json) : NULL;
                if (labels)
                        cJSON_AddItemToObject(m, "labels", labels);
                cJSON *res = cJSON_AddObjectToObject(m, "resources");
                cJSON_AddNumberToObject(res, "nano_cpus", (double)spec.nano_cpus);
                cJSON_AddNumberToObject(res, "memory", (double)spec.memory);
                cJSON_AddNumberToObject(res, "disk", (double)spec.disk);
        }
        store_session_spec_done(&spec);
        a = cJSON_AddArrayToObject(m, "egress");
        if (store_egress_rules(c->store, user, session, &rules, &n) == 0)
                for (size_t i = 0; i < n; i++)
                        if (rules[i].session_id[0]) /* the session's own; the user-wide ones are the user's anyway */
                                cJSON_AddItemToArray(a, cJSON_CreateString(rules[i].pattern));
        free(rules);
        {
                struct store_egress_narrow *nw = malloc(sizeof(*nw));
                if (nw && store_egress_narrow_get(c->store, user, session, nw) > 0)
                        cJSON_AddItemToObject(m, "egress_narrowing", egress_narrow_json(nw));
                free(nw);
        }
        if (c->cells) {
                cJSON *ctxs = NULL, *it, *out = cJSON_AddArrayToObject(m, "contexts");
                if (cells_list(c->cells, user, session, &ctxs, NULL) == 0)
                        cJSON_ArrayForEach(it, ctxs) {
                                cJSON *x = cJSON_CreateObject();
                                cJSON_AddItemToObject(x, "context",
                                                      cJSON_Duplicate(cJSON_GetObjectItem(it, "context"), 1));
                                cJSON_AddItemToObject(x, "language",
                                                      cJSON_Duplicate(cJSON_GetObjectItem(it, "language"), 1));
                                cJSON_AddItemToObject(x, "generation",
                                                      cJSON_Duplicate(cJSON_GetObjectItem(it, "generation"), 1));
                                cJSON_AddItemToObject(x, "execution_count",
                                                      cJSON_Duplicate(cJSON_GetObjectItem(it, "execution_count"), 1));
                                /* the interpreter's job: a memory snapshot's forks take it back */
                                const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(it, "context"));
                                uint32_t tag = name ? cells_runner_tag(c->cells, user, session, name) : 0;
                                if (tag)
                                        cJSON_AddNumberToObject(x, "runner_tag", tag);
                                cJSON_AddItemToArray(out, x);
                        }
                cJSON_Delete(ctxs);
        }
        return m;
}

/* The session's marks as [{dataset, source}] (NULL: none). */
static char *datasets_build(const struct snapshot_ctx *c, const char *user, const char *session)
{
        struct privacy_dataset *list = NULL;
        size_t n = 0;
        cJSON *a;
        char *s;

        if (!c->privacy || privacy_list(c->privacy, user, session, &list, &n) < 0 || n == 0) {
                free(list);
                return NULL;
        }
        a = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++) {
                cJSON *x = cJSON_CreateObject();
                cJSON_AddStringToObject(x, "dataset", list[i].dataset);
                cJSON_AddStringToObject(x, "source", list[i].source);
                cJSON_AddItemToArray(a, x);
        }
        free(list);
        s = cJSON_PrintUnformatted(a);
        cJSON_Delete(a);
        return s;
}

/* Record the snapshot's marks on user:session (before anything else of it). */
static int marks_apply(const struct snapshot_ctx *c, const struct store_snapshot *snap, const char *user,
                       const char *session, const char *actor, struct sbx_error *err)
{
        cJSON *a, *it;
        int r = 0;

        if (!snap->datasets_json)
                return 0;
        if (!c->privacy)
                return sbx_error_set(err, -EPERM, 0, "snapshot %s is private and this daemon keeps no marks", snap->id);
        a = cJSON_Parse(snap->datasets_json);
        cJSON_ArrayForEach(it, a) {
                const char *ds = cJSON_GetStringValue(cJSON_GetObjectItem(it, "dataset"));
                const char *src = cJSON_GetStringValue(cJSON_GetObjectItem(it, "source"));
                if (!ds)
                        continue;
                r = privacy_mark(c->privacy, user, session, ds, src ? src : "", actor, err);
                if (r < 0)
                        break;
        }
        cJSON_Delete(a);
        return r;
}

cJSON *snapshot_to_json(const struct store_snapshot *s)
{
        cJSON *o = cJSON_CreateObject(), *meta = cJSON_Parse(s->meta_json ? s->meta_json : "{}"), *names, *it;

        cJSON_AddStringToObject(o, "snapshot", s->id);
        if (s->name[0])
                cJSON_AddStringToObject(o, "name", s->name);
        else
                cJSON_AddNullToObject(o, "name");
        cJSON_AddStringToObject(o, "session", s->session);
        cJSON_AddStringToObject(o, "kind", s->kind);
        cJSON_AddStringToObject(o, "state", s->state);
        cJSON_AddNumberToObject(o, "bytes", (double)s->bytes);
        if (s->workspace_size > 0)
                cJSON_AddNumberToObject(o, "workspace_size", (double)s->workspace_size);
        else
                cJSON_AddNullToObject(o, "workspace_size");
        cJSON_AddBoolToObject(o, "private", s->private_);
        cJSON_AddNumberToObject(o, "created_at", (double)s->created_at);
        if (meta) {
                /* env values may be secrets: their names only */
                cJSON *env = cJSON_DetachItemFromObject(meta, "env");
                names = cJSON_AddArrayToObject(meta, "env_names");
                cJSON_ArrayForEach(it, env)
                        if (it->string)
                                cJSON_AddItemToArray(names, cJSON_CreateString(it->string));
                cJSON_Delete(env);
                cJSON_AddItemToObject(o, "environment", meta);
        }
        return o;
}

int snapshot_list_json(const struct snapshot_ctx *c, const char *user, const char *session, size_t max, cJSON **ret,
                       struct sbx_error *err)
{
        struct store_snapshot *list = NULL;
        size_t n = 0;
        int64_t count = 0, bytes = 0;
        cJSON *o, *a;
        int r;

        *ret = NULL;
        r = store_snapshot_list(c->store, user, max, &list, &n);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot list snapshots: %s", strerror(-r));
        if (user)
                (void)store_snapshot_usage(c->store, user, &count, &bytes);
        o = cJSON_CreateObject();
        a = o ? cJSON_AddArrayToObject(o, "snapshots") : NULL;
        for (size_t i = 0; a && i < n; i++) {
                cJSON *it;

                if (session && session[0] && strcmp(list[i].session, session) != 0)
                        continue;
                it = snapshot_to_json(&list[i]);
                if (!user)
                        cJSON_AddStringToObject(it, "user", list[i].user);
                cJSON_AddItemToArray(a, it);
                if (!user) {
                        count++;
                        bytes += list[i].bytes;
                }
        }
        store_snapshot_list_free(list, n);
        if (!a) {
                cJSON_Delete(o);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        cJSON_AddNumberToObject(o, "count", (double)count);
        cJSON_AddNumberToObject(o, "bytes", (double)bytes);
        *ret = o;
        return 0;
}

/* ---- capture ---- */

struct capture {
        const struct snapshot_ctx *c;
        const char *user, *session, *id;
        int outdir;   /* the snapshot's directory */
        bool image;   /* kind image (loop) */
        int64_t size; /* image: its size */
        int64_t bytes;
        int64_t room; /* bytes left of the user's limits.snapshot_bytes_per_user */
        bool reflinked;
        bool was_paused;
        bool memory; /* kind microvm: the VM's memory, devices and disk (engine.h: memory_capture) */
};

static int capture_files(struct capture *k, struct sbx_error *err)
{
        const struct sbx_config *cfg = k->c->cfg;
        int r;

        if (k->image) {
                _cleanup_close_ int u = user_dir(cfg, "workspace-images", k->user, false), src = -1, dst = -1;
                char name[SBX_ID_MAX + 8];
                struct stat st;

                snprintf(name, sizeof(name), "%s.ext4", k->session);
                if (u >= 0)
                        src = openat(u, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (src < 0 || fstat(src, &st) < 0)
                        return sbx_error_set(err, -ENOENT, 0, "the session has no workspace image yet");
                k->size = st.st_size;
                if ((int64_t)st.st_blocks * 512 > k->room)
                        return sbx_error_set(err, -EDQUOT, 0,
                                             "snapshot quota exceeded: the workspace image holds %lld bytes and "
                                             "%lld are left of limits.snapshot_bytes_per_user",
                                             (long long)st.st_blocks * 512, (long long)k->room);
                dst = openat(k->outdir, IMAGE_FILE, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (dst < 0)
                        return sbx_error_set(err, -errno, 0, "snapshot: cannot create its image: %m");
                r = snapcopy_file(src, dst, &k->reflinked, &k->bytes);
                if (r < 0)
                        return sbx_error_set(err, r, 0, "snapshot: cannot copy the workspace image: %s", strerror(-r));
                return 0;
        }
        _cleanup_close_ int u = user_dir(cfg, "workspaces", k->user, false), ws = -1, dst = -1;
        struct snaparchive_stats st;
        struct stat sb;

        if (u >= 0)
                ws = dir_at(u, k->session, false);
        if (ws < 0)
                return sbx_error_set(err, -ENOENT, 0, "the session has no workspace yet");
        dst = openat(k->outdir, ARCHIVE_FILE, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (dst < 0)
                return sbx_error_set(err, -errno, 0, "snapshot: cannot create its archive: %m");
        r = snaparchive_pack(ws, dst, (uint64_t)cfg->max_snapshot_bytes_per_user * 2, (uint64_t)k->room, &st, err);
        if (r < 0)
                return r;
        if (fsync(dst) < 0 || fstat(dst, &sb) < 0)
                return sbx_error_set(err, -errno, 0, "snapshot: cannot write its archive: %m");
        k->bytes = (int64_t)sb.st_size;
        return 0;
}

/* session_hold: freeze the container (unless it is frozen already), copy, thaw. */
static int capture_held(void *ud, const char *cid, struct sbx_error *err)
{
        struct capture *k = ud;
        struct engine *e = k->c->engine;
        struct engine_container_info info;
        bool paused_here = false;
        int r;

        if (k->memory) {
                /* QMP stop is the frozen point; the VM runs on after (a paused one stays paused) */
                if (!cid[0])
                        return sbx_error_set(err, -ESRCH, 409, "the session has no VM running: no memory to keep");
                return engine_memory_capture(e, cid, k->outdir, k->room, &k->bytes, err);
        }

        if (cid[0] && engine_inspect(e, cid, &info, NULL) == 0) {
                k->was_paused = strcmp(info.status, "paused") == 0;
                if (info.running && !k->was_paused && engine_can(e, ENGINE_CAP_PAUSE)) {
                        /* recorded first: a daemon that dies before the thaw thaws it at its start */
                        (void)store_snapshot_set_paused(k->c->store, k->user, k->id, cid);
                        r = engine_pause(e, cid, err);
                        if (r < 0) {
                                (void)store_snapshot_set_paused(k->c->store, k->user, k->id, NULL);
                                sbx_error_prefix(err, "snapshot: cannot freeze the session");
                                return r;
                        }
                        paused_here = true;
                }
        }
        if (k->image && wsquota_mounted(k->c->cfg, k->user, k->session)) {
                /* the frozen processes wrote into the page cache: into the image first */
                _cleanup_close_ int u = user_dir(k->c->cfg, "workspaces", k->user, false), ws = -1;
                if (u >= 0)
                        ws = dir_at(u, k->session, false);
                if (ws >= 0)
                        (void)syncfs(ws);
        }
        r = capture_files(k, err);
        if (paused_here) {
                struct sbx_error ue = {0};
                if (engine_unpause(e, cid, &ue) < 0)
                        log_ctx(LOG_LEVEL_ERROR, k->user, k->session, cid, "snapshot: cannot thaw the session: %s",
                                ue.msg);
                else
                        (void)store_snapshot_set_paused(k->c->store, k->user, k->id, NULL);
        }
        return r;
}

int snapshot_recover(const struct snapshot_ctx *c)
{
        struct store_snapshot_unfinished *list = NULL;
        size_t n = 0;
        int count = 0;

        if (store_snapshot_unfinished(c->store, 100000, &list, &n) < 0)
                return -EIO;
        for (size_t i = 0; i < n; i++) {
                struct sbx_error e = {0};
                if (list[i].paused[0] && engine_unpause(c->engine, list[i].paused, &e) < 0)
                        log_warn("snapshot %s of %s: cannot thaw container %.12s: %s", list[i].id, list[i].user,
                                 list[i].paused, e.msg);
                if (snapshot_purge(c->cfg, c->store, list[i].user, list[i].id) == 0)
                        count++;
                log_info("snapshot %s of %s: unfinished when the daemon stopped: removed%s", list[i].id, list[i].user,
                         list[i].paused[0] ? ", its container thawed" : "");
        }
        free(list);
        return count;
}

static int quota_error(const struct sbx_config *cfg, int64_t count, int64_t bytes, int64_t adding,
                       struct sbx_error *err)
{
        if (count >= cfg->max_snapshots_per_user)
                return sbx_error_set(err, -EDQUOT, 0,
                                     "snapshot quota exceeded: you hold %" PRId64
                                     " snapshots, limits.snapshots_per_user is %d; delete_snapshot one first",
                                     count, cfg->max_snapshots_per_user);
        return sbx_error_set(err, -EDQUOT, 0,
                             "snapshot quota exceeded: your snapshots take %" PRId64
                             " bytes%s, "
                             "limits.snapshot_bytes_per_user is %" PRId64 "; delete_snapshot some first",
                             bytes + adding, adding ? " with this one" : "", cfg->max_snapshot_bytes_per_user);
}

int snapshot_take(const struct snapshot_ctx *c, const char *user, const char *session, const char *name,
                  const char *actor, struct store_snapshot *ret, struct sbx_error *err)
{
        return snapshot_take_memory(c, user, session, name, false, actor, ret, err);
}

int snapshot_take_memory(const struct snapshot_ctx *c, const char *user, const char *session, const char *name,
                         bool memory, const char *actor, struct store_snapshot *ret, struct sbx_error *err)
{
        struct session_info info;
        struct store_snapshot row = {0};
        struct capture k = {
                .c = c, .user = user, .session = session, .outdir = -1, .image = loop_mode(c->cfg), .memory = memory};
        char hex[17];
        cJSON *meta, *detail;
        int64_t count = 0, bytes = 0;
        int r;

        if (name && !snapshot_name_valid(name))
                return sbx_error_set(err, -EINVAL, 0,
                                     "a snapshot name is 1-64 of [A-Za-z0-9._-], not starting with . or - or snap-");
        r = session_key_check(user, session, err);
        if (r < 0)
                return r;
        if (session_get_info(c->sessions, user, session, &info) < 0)
                return sbx_error_set(err, -ENOENT, 0, "no session %s", session);
        if (memory && strcmp(info.runtime, "microvm") != 0) {
                r = sbx_error_set(err, -EOPNOTSUPP, 0,
                                  "memory snapshots need runtime microvm; this session runs %s, whose snapshots keep "
                                  "files only (snapshot_session without memory)",
                                  info.runtime[0] ? info.runtime : "runc");
                session_info_done(&info);
                return r;
        }
        meta = meta_build(c, user, session, &info);
        session_info_done(&info);
        if (meta && memory)
                cJSON_AddBoolToObject(meta, "memory", true);
        if (!meta || sbx_random_hex(hex, 8) < 0) {
                cJSON_Delete(meta);
                return sbx_error_set(err, -ENOMEM, 0, "cannot describe the snapshot");
        }
        snprintf(row.id, sizeof(row.id), "snap-%s", hex);
        sbx_strlcpy(row.user, user, sizeof(row.user));
        sbx_strlcpy(row.session, session, sizeof(row.session));
        sbx_strlcpy(row.name, name ? name : "", sizeof(row.name));
        sbx_strlcpy(row.kind, memory ? "microvm" : k.image ? "image" : "archive", sizeof(row.kind));
        row.meta_json = cJSON_PrintUnformatted(meta);
        cJSON_Delete(meta);
        row.datasets_json = datasets_build(c, user, session);
        row.private_ = row.datasets_json != NULL;
        row.created_at = sbx_wall_ms();
        r = store_snapshot_reserve(c->store, &row, c->cfg->max_snapshots_per_user, c->cfg->max_snapshot_bytes_per_user,
                                   &count, &bytes);
        if (r == -EDQUOT)
                r = quota_error(c->cfg, count, bytes, 0, err);
        else if (r == -EEXIST)
                r = sbx_error_set(err, -EEXIST, 0, "you have a snapshot named %s already", name ? name : "");
        else if (r < 0)
                r = sbx_error_set(err, r, 0, "cannot record the snapshot: %s", strerror(-r));
        if (r < 0)
                goto fail_row;
        k.room = c->cfg->max_snapshot_bytes_per_user - bytes;
        k.id = row.id;
        k.outdir = snap_dir(c->cfg, user, row.id, true);
        if (k.outdir < 0) {
                r = sbx_error_set(err, k.outdir, 0, "cannot make the snapshot's directory: %s", strerror(-k.outdir));
                goto fail;
        }
        r = session_hold(c->sessions, user, session, false, NULL, capture_held, &k, err);
        if (r < 0)
                goto fail;
        if (store_snapshot_usage(c->store, user, &count, &bytes) == 0 &&
            bytes + k.bytes > c->cfg->max_snapshot_bytes_per_user) {
                r = quota_error(c->cfg, 0, bytes, k.bytes, err);
                goto fail;
        }
        /* the marks again: one made while the copy ran makes it private */
        free(row.datasets_json);
        row.datasets_json = datasets_build(c, user, session);
        row.private_ = row.datasets_json != NULL;
        r = store_snapshot_ready(c->store, user, row.id, k.bytes, k.image && !memory ? k.size : 0, row.datasets_json);
        if (r < 0) {
                r = sbx_error_set(err, r, 0, "cannot record the snapshot: %s", strerror(-r));
                goto fail;
        }
        close(k.outdir);
        atomic_fetch_add(&n_taken, 1);
        atomic_fetch_add(&n_bytes, (uint64_t)k.bytes);
        detail = cJSON_CreateObject();
        cJSON_AddStringToObject(detail, "snapshot", row.id);
        if (name)
                cJSON_AddStringToObject(detail, "name", name);
        cJSON_AddStringToObject(detail, "kind", row.kind);
        cJSON_AddNumberToObject(detail, "bytes", (double)k.bytes);
        cJSON_AddBoolToObject(detail, "reflink", k.reflinked);
        cJSON_AddBoolToObject(detail, "was_paused", k.was_paused);
        cJSON_AddBoolToObject(detail, "private", row.private_);
        {
                char *js = cJSON_PrintUnformatted(detail);
                events_emit(EVENT_SNAPSHOT_CREATED, user, session, js);
                free(js);
        }
        (void)audit_record_json(c->store, actor, user, session, "snapshot.create", detail);
        log_ctx(LOG_LEVEL_INFO, user, session, NULL, "snapshot %s taken (%s, %" PRId64 " bytes)", row.id, row.kind,
                k.bytes);
        store_snapshot_done(&row);
        return store_snapshot_get(c->store, user, row.id, ret) < 0
                       ? sbx_error_set(err, -EIO, 0, "the snapshot was taken but cannot be read back")
                       : 0;
fail:
        if (k.outdir >= 0)
                close(k.outdir);
        remove_files(c->cfg, user, row.id);
        (void)store_snapshot_delete(c->store, user, row.id);
fail_row:
        atomic_fetch_add(&n_failed, 1);
        store_snapshot_done(&row);
        return r;
}

/* ---- putting files into a session ---- */

/* A non-negative count from a stored number, 0 when absent or out of range. */
static int64_t count_of(const cJSON *v)
{
        return cJSON_IsNumber(v) && v->valuedouble > 0 && v->valuedouble < 9e18 ? (int64_t)v->valuedouble : 0;
}

struct fill {
        const struct snapshot_ctx *c;
        const struct store_snapshot *snap;
        const char *user, *session;
        uid_t uid;
        bool live;      /* the session's container runs on the workspace: fill it in place, frozen */
        bool take;      /* image: the snapshot is a fork's own, deleted after: its file is moved, not copied */
        size_t carried; /* a memory restore: the contexts that run on in the snapshot's guest */
};

static int open_snap_file(const struct fill *f, struct sbx_error *err)
{
        _cleanup_close_ int d = snap_dir(f->c->cfg, f->user, f->snap->id, false);
        int fd;

        if (d < 0)
                return sbx_error_set(err, -ENOENT, 0, "snapshot %s has lost its files", f->snap->id);
        fd = openat(d, strcmp(f->snap->kind, "image") == 0 ? IMAGE_FILE : ARCHIVE_FILE,
                    O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return sbx_error_set(err, -ENOENT, 0, "snapshot %s has lost its files", f->snap->id);
        return fd;
}

static uint64_t unpack_limit(const struct sbx_config *cfg)
{
        /* what a workspace may hold; without a quota, what a user's snapshots may */
        return cfg->workspace_quota_bytes > 0 ? (uint64_t)cfg->workspace_quota_bytes * 2
                                              : (uint64_t)cfg->max_snapshot_bytes_per_user * 2;
}

/* loop: the image file of the session, replaced whole (written beside, renamed). */
static int fill_image(const struct fill *f, struct sbx_error *err)
{
        _cleanup_close_ int src = open_snap_file(f, err), u = -1, dst = -1;
        char name[SBX_ID_MAX + 8], tmp[SBX_ID_MAX + 24];
        bool reflinked;
        int64_t bytes;
        int r;

        if (src < 0)
                return src;
        if (wsquota_mounted(f->c->cfg, f->user, f->session))
                return sbx_error_set(err, -EBUSY, 0, "the session's workspace is still mounted");
        u = user_dir(f->c->cfg, "workspace-images", f->user, true);
        if (u < 0)
                return sbx_error_set(err, u, 0, "cannot open the workspace images: %s", strerror(-u));
        snprintf(name, sizeof(name), "%s.ext4", f->session);
        if (f->take) {
                /* the same file system (data_dir): a rename, no second copy */
                _cleanup_close_ int d = snap_dir(f->c->cfg, f->user, f->snap->id, false);
                if (d >= 0 && renameat(d, IMAGE_FILE, u, name) == 0)
                        return 0;
        }
        snprintf(tmp, sizeof(tmp), ".%s.ext4.restore", f->session);
        (void)unlinkat(u, tmp, 0);
        dst = openat(u, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (dst < 0)
                return sbx_error_set(err, -errno, 0, "cannot create the workspace image: %m");
        r = snapcopy_file(src, dst, &reflinked, &bytes);
        if (r == 0 && renameat(u, tmp, u, name) < 0)
                r = -errno;
        if (r < 0) {
                (void)unlinkat(u, tmp, 0);
                return sbx_error_set(err, r, 0, "cannot write the workspace image: %s", strerror(-r));
        }
        return 0;
}

/* Not loop, session stopped: unpacked beside the workspace, then swapped in. */
static int fill_tree_swap(const struct fill *f, int src, struct sbx_error *err)
{
        _cleanup_close_ int u = user_dir(f->c->cfg, "workspaces", f->user, true), t = -1;
        char tmp[SBX_ID_MAX + 16];
        int r;

        if (u < 0)
                return sbx_error_set(err, u, 0, "cannot open the workspaces: %s", strerror(-u));
        snprintf(tmp, sizeof(tmp), ".restore-%s", f->session);
        r = snapcopy_remove_at(u, tmp);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot clear an earlier restore: %s", strerror(-r));
        t = dir_at(u, tmp, true);
        if (t < 0)
                return sbx_error_set(err, t, 0, "cannot make the restore directory: %s", strerror(-t));
        r = snaparchive_unpack(src, t, f->uid, unpack_limit(f->c->cfg), NULL, err);
        if (r == 0 && (fchown(t, f->uid, f->uid) < 0 || fchmod(t, 0700) < 0))
                r = sbx_error_set(err, -errno, 0, "cannot give the workspace to its uid: %m");
        if (r == 0 && renameat2(u, tmp, u, f->session, RENAME_EXCHANGE) < 0) {
                if (errno == ENOENT && renameat(u, tmp, u, f->session) == 0)
                        return 0;
                r = sbx_error_set(err, -errno, 0, "cannot swap the workspace in: %m");
        }
        (void)snapcopy_remove_at(u, tmp); /* the old tree, or what failed */
        return r;
}

/* Not loop, the container runs (a fork's fresh one): emptied and filled in place. */
static int fill_tree_live(const struct fill *f, int src, struct sbx_error *err)
{
        _cleanup_close_ int u = user_dir(f->c->cfg, "workspaces", f->user, false), ws = -1;
        int r;

        if (u >= 0)
                ws = dir_at(u, f->session, false);
        if (ws < 0)
                return sbx_error_set(err, -ENOENT, 0, "the session has no workspace");
        r = snapcopy_empty_dir(ws);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot empty the new workspace: %s", strerror(-r));
        return snaparchive_unpack(src, ws, f->uid, unpack_limit(f->c->cfg), NULL, err);
}

/* The snapshot's directory as a path (the engine opens it when the session's VM is made). */
static int snap_path(const struct sbx_config *cfg, const char *user, const char *id, char *buf, size_t size)
{
        int n = snprintf(buf, size, "%s/%s/%s/%s", cfg->data_dir, SNAP_DIR, user, id);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int64_t snapshot_dropped_connections(const struct sbx_config *cfg, const char *user, const char *snapshot_id)
{
        _cleanup_close_ int d = snap_dir(cfg, user, snapshot_id, false), fd = -1;
        char buf[24];
        ssize_t n = 0;

        if (d >= 0)
                fd = openat(d, ENGINE_MEMORY_CONNECTIONS, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0)
                n = read(fd, buf, sizeof(buf) - 1);
        buf[n > 0 ? n : 0] = '\0';
        long long v = strtoll(buf, NULL, 10);
        return v > 0 && v <= 1 << 20 ? (int64_t)v : 0;
}

/* kind microvm: the session's next VM boots from the snapshot (its disk, memory and devices). */
static int fill_memory(const struct fill *f, struct sbx_error *err)
{
        char path[SBX_PATH_MAX];

        if (snap_path(f->c->cfg, f->user, f->snap->id, path, sizeof(path)) < 0)
                return sbx_error_set(err, -ENAMETOOLONG, 0, "the snapshot's path is too long");
        return engine_memory_boot(f->c->engine, f->user, f->session, path, err);
}

/* A memory restore: the snapshot's running contexts take the session's over, their jobs kept
 * for its next VM (the snapshot's guest), as a fork's are (env_apply); the count. */
static size_t contexts_carry(const struct fill *f)
{
        cJSON *m = f->c->cells ? cJSON_Parse(f->snap->meta_json) : NULL, *it;
        size_t n = 0;

        cJSON_ArrayForEach(it, cJSON_GetObjectItem(m, "contexts")) {
                const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(it, "context"));
                const char *lang = cJSON_GetStringValue(cJSON_GetObjectItem(it, "language"));
                int64_t tag = count_of(cJSON_GetObjectItem(it, "runner_tag"));
                if (!name || !lang || tag <= 0 || tag > UINT32_MAX)
                        continue; /* no interpreter ran in it then: it reports state_lost restored */
                int r = cells_mark_carried(f->c->cells, f->user, f->session, name, lang,
                                           count_of(cJSON_GetObjectItem(it, "generation")),
                                           count_of(cJSON_GetObjectItem(it, "execution_count")), (uint32_t)tag);
                if (r == 0)
                        n++;
                else
                        log_ctx(LOG_LEVEL_WARN, f->user, f->session, NULL,
                                "context %s does not run on from snapshot %s (%s): it reports state_lost restored",
                                name, f->snap->id, strerror(-r));
        }
        cJSON_Delete(m);
        return n;
}

static int fill_held(void *ud, const char *cid, struct sbx_error *err)
{
        struct fill *f = ud;
        _cleanup_close_ int src = -1;

        if (strcmp(f->snap->kind, "microvm") == 0) {
                /* the session is stopped: its next VM is the snapshot's, its contexts with it */
                int r = fill_memory(f, err);
                if (r == 0)
                        f->carried = contexts_carry(f);
                return r;
        }

        (void)cid; /* a fork's fresh container: held, so no request reaches it until the files are in */
        if (strcmp(f->snap->kind, "image") == 0)
                return fill_image(f, err);
        src = open_snap_file(f, err);
        if (src < 0)
                return src;
        return f->live ? fill_tree_live(f, src, err) : fill_tree_swap(f, src, err);
}

static int snap_usable(const struct snapshot_ctx *c, const struct store_snapshot *s, struct sbx_error *err)
{
        if (strcmp(s->state, "ready") != 0)
                return sbx_error_set(err, -EBUSY, 0, "snapshot %s is still being taken", s->id);
        if (strcmp(s->kind, "microvm") == 0)
                return engine_can(c->engine, ENGINE_CAP_MEMORY_CAPTURE)
                               ? 0
                               : sbx_error_set(err, -EOPNOTSUPP, 0,
                                               "snapshot %s keeps a microVM's memory and this daemon runs none", s->id);
        if ((strcmp(s->kind, "image") == 0) != loop_mode(c->cfg))
                return sbx_error_set(
                        err, -EINVAL, 0,
                        "snapshot %s is kept as %s, which this daemon's workspace.quota_mode %s cannot restore", s->id,
                        s->kind, c->cfg->workspace_quota_mode);
        return 0;
}

int snapshot_restore(const struct snapshot_ctx *c, const char *user, const char *session, const char *snapshot,
                     const char *actor, struct store_snapshot *ret_snap, struct sbx_error *err)
{
        struct store_snapshot snap = {0};
        struct session_info info;
        struct fill f = {.c = c, .snap = &snap, .user = user, .session = session};
        cJSON *detail;
        int r;

        r = session_key_check(user, session, err);
        if (r < 0)
                return r;
        if (store_snapshot_get(c->store, user, snapshot, &snap) < 0)
                return sbx_error_set(err, -ENOENT, 0, "no snapshot %s", snapshot);
        r = snap_usable(c, &snap, err);
        if (r < 0)
                goto out;
        if (session_get_info(c->sessions, user, session, &info) < 0) {
                r = sbx_error_set(err, -ENOENT, 0, "no session %s", session);
                goto out;
        }
        session_info_done(&info);
        /* private from the first instant: the marks before the files */
        r = marks_apply(c, &snap, user, session, actor, err);
        if (r < 0)
                goto out;
        r = sessuid_get_or_assign(c->store, c->cfg, user, session, &f.uid, err);
        if (r < 0)
                goto out;
        r = session_hold(c->sessions, user, session, true, "restored", fill_held, &f, err);
        if (r < 0)
                goto out;
        if (f.carried > 0) {
                /* the carried contexts are taken back once the session runs: it runs now (the VM
                 * boots from the snapshot), so their next cell finds its interpreter */
                struct session *s = NULL;
                r = session_acquire(c->sessions, user, session, &s, err);
                if (r < 0) {
                        sbx_error_prefix(err, "the workspace and memory are restored; the session did not start");
                        goto out;
                }
                session_release(s);
        }
        atomic_fetch_add(&n_restored, 1);
        detail = cJSON_CreateObject();
        cJSON_AddStringToObject(detail, "snapshot", snap.id);
        cJSON_AddStringToObject(detail, "from_session", snap.session);
        cJSON_AddBoolToObject(detail, "private", snap.private_);
        if (strcmp(snap.kind, "microvm") == 0) {
                cJSON_AddNumberToObject(detail, "contexts_carried", (double)f.carried);
                cJSON_AddNumberToObject(detail, "dropped_connections",
                                        (double)snapshot_dropped_connections(c->cfg, user, snap.id));
        }
        {
                char *js = cJSON_PrintUnformatted(detail);
                events_emit(EVENT_SESSION_RESTORED, user, session, js);
                free(js);
        }
        (void)audit_record_json(c->store, actor, user, session, "snapshot.restore", detail);
        log_ctx(LOG_LEVEL_INFO, user, session, NULL, "workspace restored from snapshot %s", snap.id);
        if (ret_snap) {
                *ret_snap = snap;
                return 0;
        }
out:
        if (r < 0)
                atomic_fetch_add(&n_failed, 1);
        store_snapshot_done(&snap);
        return r;
}

/* ---- fork ---- */

/* The snapshotted session's own egress narrowing onto child, as it was
 * (it narrows only; what it allowed was allowed to that session then). */
static int narrowing_restore(struct store *st, const char *user, const char *child, const cJSON *o)
{
        _cleanup_free_ struct store_egress_narrow *n = calloc(1, sizeof(*n));
        const cJSON *it;

        if (!n)
                return -ENOMEM;
        n->allow_only = cJSON_IsTrue(cJSON_GetObjectItem(o, "only"));
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "allow"))
                if (cJSON_IsString(it) && n->n_allow < STORE_EGRESS_NARROW_MAX)
                        sbx_strlcpy(n->allow[n->n_allow++], it->valuestring, STORE_EGRESS_PATTERN_MAX);
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "deny"))
                if (cJSON_IsString(it) && n->n_deny < STORE_EGRESS_NARROW_MAX)
                        sbx_strlcpy(n->deny[n->n_deny++], it->valuestring, STORE_EGRESS_PATTERN_MAX);
        return store_egress_narrow_put(st, user, child, n, sbx_wall_ms());
}

/* What the child gets of the environment besides its marks. */
static int env_apply(const struct snapshot_ctx *c, const struct store_snapshot *snap, const char *user,
                     const char *child, const char *actor, struct sbx_error *err)
{
        cJSON *m = cJSON_Parse(snap->meta_json), *it, *x;
        struct store_session_options opt = {0};
        int r = 0;

        bool memory = strcmp(snap->kind, "microvm") == 0; /* its guest's processes come with it */

        if (!m)
                return sbx_error_set(err, -EINVAL, 0, "snapshot %s has no readable environment", snap->id);
        x = cJSON_GetObjectItem(m, "image_name");
        if (cJSON_IsString(x))
                sbx_strlcpy(opt.image, x->valuestring, sizeof(opt.image));
        x = cJSON_GetObjectItem(m, "env");
        if (cJSON_IsObject(x))
                opt.env_json = cJSON_PrintUnformatted(x);
        opt.created_at = sbx_wall_ms();
        if (opt.image[0] || opt.env_json)
                r = store_session_options_set(c->store, user, child, &opt);
        store_session_options_done(&opt);
        x = cJSON_GetObjectItem(m, "resources");
        /* an image copy is a disk of its own size: recorded as the session's disk, which also
         * keeps a warm slot (its own image) from being claimed for it */
        if (r == 0 &&
            (cJSON_IsObject(x) || cJSON_IsObject(cJSON_GetObjectItem(m, "labels")) || snap->workspace_size > 0)) {
                struct store_session_spec want = {0}, got = {0};
                bool inserted;
                cJSON *labels = cJSON_GetObjectItem(m, "labels");
                want.labels_json = cJSON_IsObject(labels) ? cJSON_PrintUnformatted(labels) : NULL;
                want.nano_cpus = count_of(cJSON_GetObjectItem(x, "nano_cpus"));
                want.memory = count_of(cJSON_GetObjectItem(x, "memory"));
                want.disk = count_of(cJSON_GetObjectItem(x, "disk"));
                if (want.disk == 0)
                        want.disk = snap->workspace_size > 0 ? snap->workspace_size : 0;
                want.created_at = sbx_wall_ms();
                r = store_session_spec_claim(c->store, user, child, &want, &got, &inserted);
                store_session_spec_done(&want);
                store_session_spec_done(&got);
        }
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(m, "egress"))
                if (r == 0 && cJSON_IsString(it))
                        r = store_egress_rule_add(c->store, user, child, it->valuestring, actor, sbx_wall_ms(),
                                                  (size_t)c->cfg->egress_max_rules);
        if (r == 0 && cJSON_IsObject(cJSON_GetObjectItem(m, "egress_narrowing")))
                r = narrowing_restore(c->store, user, child, cJSON_GetObjectItem(m, "egress_narrowing"));
        if (c->cells)
                cJSON_ArrayForEach(it, cJSON_GetObjectItem(m, "contexts")) {
                        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(it, "context"));
                        const char *lang = cJSON_GetStringValue(cJSON_GetObjectItem(it, "language"));
                        int64_t tag = count_of(cJSON_GetObjectItem(it, "runner_tag"));
                        /* a memory snapshot's interpreters are in its guest's memory: they run on */
                        if (name && lang && memory && tag > 0 && tag <= UINT32_MAX &&
                            cells_mark_carried(c->cells, user, child, name, lang,
                                               count_of(cJSON_GetObjectItem(it, "generation")),
                                               count_of(cJSON_GetObjectItem(it, "execution_count")),
                                               (uint32_t)tag) == 0)
                                continue;
                        if (name && lang)
                                (void)cells_mark_forked(c->cells, user, child, name, lang,
                                                        count_of(cJSON_GetObjectItem(it, "generation")),
                                                        count_of(cJSON_GetObjectItem(it, "execution_count")));
                }
        cJSON_Delete(m);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot record the new session's environment: %s", strerror(-r));
        return 0;
}

int snapshot_fork(const struct snapshot_ctx *c, const char *user, const char *from_session, const char *from_snapshot,
                  const char *to_session, const char *actor, char ret_snapshot[STORE_SNAPSHOT_ID_MAX + 1],
                  struct sbx_error *err)
{
        struct store_snapshot snap = {0};
        struct session_info info;
        struct session *s = NULL;
        struct fill f = {.c = c, .snap = &snap, .user = user, .session = to_session};
        char temp_id[STORE_SNAPSHOT_ID_MAX + 1] = "";
        bool made = false;
        cJSON *detail;
        int r;

        r = session_key_check(user, to_session, err);
        if (r < 0)
                return r;
        if (session_get_info(c->sessions, user, to_session, &info) == 0) {
                session_info_done(&info);
                return sbx_error_set(err, -EEXIST, 0, "session %s exists: fork into a new name", to_session);
        }
        if (from_session) {
                r = snapshot_take(c, user, from_session, NULL, actor, &snap, err);
                if (r < 0)
                        return r;
                sbx_strlcpy(temp_id, snap.id, sizeof(temp_id));
        } else if (store_snapshot_get(c->store, user, from_snapshot, &snap) < 0) {
                return sbx_error_set(err, -ENOENT, 0, "no snapshot %s", from_snapshot);
        }
        r = snap_usable(c, &snap, err);
        if (r < 0)
                goto out;
        /* private from the first instant: the marks before the session has anything */
        r = marks_apply(c, &snap, user, to_session, actor, err);
        if (r == 0)
                r = env_apply(c, &snap, user, to_session, actor, err);
        if (r < 0)
                goto out;
        if (strcmp(snap.kind, "image") == 0) {
                /* loop: the image is in place before the first container mounts it */
                f.take = temp_id[0] != '\0';
                r = fill_image(&f, err);
                if (r < 0)
                        goto out;
        } else if (strcmp(snap.kind, "microvm") == 0) {
                /* its first VM boots from the snapshot: processes, /tmp and disk where they were */
                r = fill_memory(&f, err);
                if (r < 0)
                        goto out;
        }
        r = session_acquire(c->sessions, user, to_session, &s, err);
        made = session_get_info(c->sessions, user, to_session, &info) == 0;
        if (made)
                session_info_done(&info);
        if (r < 0)
                goto out;
        session_release(s);
        if (strcmp(snap.kind, "archive") == 0) {
                /* the container (maybe a warm one: the session had no uid before, so the
                 * pool could serve it) has an empty workspace: filled frozen, as its uid */
                f.live = true;
                r = sessuid_lookup(c->store, user, to_session, &f.uid);
                if (r < 0) {
                        r = sbx_error_set(err, r, 0, "the new session has no uid: %s", strerror(-r));
                        goto out;
                }
                r = session_hold(c->sessions, user, to_session, false, NULL, fill_held, &f, err);
                if (r < 0)
                        goto out;
        }
        atomic_fetch_add(&n_forked, 1);
        detail = cJSON_CreateObject();
        cJSON_AddStringToObject(detail, "snapshot", snap.id);
        cJSON_AddStringToObject(detail, "from_session", snap.session);
        cJSON_AddBoolToObject(detail, "private", snap.private_);
        if (strcmp(snap.kind, "microvm") == 0)
                cJSON_AddNumberToObject(detail, "dropped_connections",
                                        (double)snapshot_dropped_connections(c->cfg, user, snap.id));
        {
                char *js = cJSON_PrintUnformatted(detail);
                events_emit(EVENT_SESSION_FORKED, user, to_session, js);
                free(js);
        }
        (void)audit_record_json(c->store, actor, user, to_session, "session.fork", detail);
        log_ctx(LOG_LEVEL_INFO, user, to_session, NULL, "session forked from %s (snapshot %s)", snap.session, snap.id);
        if (ret_snapshot)
                sbx_strlcpy(ret_snapshot, snap.id, STORE_SNAPSHOT_ID_MAX + 1);
out:
        if (r < 0) {
                struct sbx_error de = {0};
                atomic_fetch_add(&n_failed, 1);
                if (strcmp(snap.kind, "microvm") == 0)
                        engine_memory_boot_cancel(c->engine, user, to_session);
                if (made && session_destroy(c->sessions, user, to_session, true, &de) < 0)
                        log_ctx(LOG_LEVEL_WARN, user, to_session, NULL, "fork failed and its session stays: %s",
                                de.msg);
                if (!made) {
                        (void)store_session_options_delete(c->store, user, to_session);
                        (void)store_session_spec_delete(c->store, user, to_session);
                }
        }
        if (temp_id[0]) {
                remove_files(c->cfg, user, temp_id);
                (void)store_snapshot_delete(c->store, user, temp_id);
        }
        store_snapshot_done(&snap);
        return r;
}

/* ---- delete and gc ---- */

int snapshot_delete(const struct snapshot_ctx *c, const char *user, const char *snapshot, const char *actor,
                    struct sbx_error *err)
{
        struct store_snapshot snap = {0};
        cJSON *detail;

        if (store_snapshot_get(c->store, user, snapshot, &snap) < 0)
                return sbx_error_set(err, -ENOENT, 0, "no snapshot %s", snapshot);
        remove_files(c->cfg, user, snap.id);
        if (store_snapshot_delete(c->store, user, snap.id) < 0) {
                store_snapshot_done(&snap);
                return sbx_error_set(err, -ENOENT, 0, "no snapshot %s", snapshot);
        }
        atomic_fetch_add(&n_deleted, 1);
        detail = cJSON_CreateObject();
        cJSON_AddStringToObject(detail, "snapshot", snap.id);
        cJSON_AddNumberToObject(detail, "bytes", (double)snap.bytes);
        {
                char *js = cJSON_PrintUnformatted(detail);
                events_emit(EVENT_SNAPSHOT_DELETED, user, snap.session, js);
                free(js);
        }
        (void)audit_record_json(c->store, actor, user, snap.session, "snapshot.delete", detail);
        store_snapshot_done(&snap);
        return 0;
}

int snapshot_purge(const struct sbx_config *cfg, struct store *st, const char *user, const char *id)
{
        _cleanup_close_ int u = user_dir(cfg, SNAP_DIR, user, false);
        int r = 0;

        if (u >= 0)
                r = snapcopy_remove_at(u, id);
        else if (u != -ENOENT)
                r = u;
        if (r < 0)
                return r;
        r = store_snapshot_delete(st, user, id);
        return r == -ENOENT ? 0 : r;
}
