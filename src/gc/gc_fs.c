/* gc_fs.c — the filesystem half of `sandboxd --gc` (gc.c has the rules
 * and the run): execution spools past gc.execution_retention, workspace images
 * left mounted, workspaces past gc.workspace_retention (moved into
 * {data_dir}/gc-trash, re-checked, then deleted) and what an interrupted run
 * left there, and the session uids whose workspace is gone.
 *
 * Every walk is relative to a directory fd with O_NOFOLLOW, so a symlink a
 * container planted in its workspace is never followed; hand-written rather
 * than fts(3), which works by path and so can be steered between its checks.
 *
 * Threads and locks: none; gc is one thread (gc.c says how it stays out of
 * the daemon's way). */
#include "sandboxd/gc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/container.h"
#include "sandboxd/engine.h"
#include "sandboxd/log.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/wsquota.h"

#include "gc_internal.h"

#define SPOOL_BATCH 512
#define WALK_MAX_DEPTH 256
#define TRASH_DIR "gc-trash"

/* ---- walking directories ---- */

static bool uuid_ok(const char *s, size_t len)
{
        if (len != 36)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '-'))
                        return false;
        }
        return true;
}

static uint64_t file_bytes_at(int dfd, const char *name)
{
        struct stat st;
        if (dfd < 0 || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                return 0;
        return (uint64_t)st.st_size;
}

/* Bytes of the regular files and symlinks under dfd/name; never follows a
 * symlink and stops descending past WALK_MAX_DEPTH (an undercount then). */
static uint64_t tree_bytes_at(int dfd, const char *name, int depth)
{
        struct stat st;
        struct dirent *e;
        uint64_t sum = 0;
        DIR *d;
        int fd;

        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return 0;
        if (!S_ISDIR(st.st_mode))
                return S_ISREG(st.st_mode) || S_ISLNK(st.st_mode) ? (uint64_t)st.st_size : 0;
        if (depth >= WALK_MAX_DEPTH)
                return 0;
        fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return 0;
        d = fdopendir(fd);
        if (!d) {
                close(fd);
                return 0;
        }
        while ((e = readdir(d)))
                if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                        sum += tree_bytes_at(dirfd(d), e->d_name, depth + 1);
        closedir(d);
        return sum;
}

/* Names of the subdirectories of dfd that are valid session/user ids (read
 * in full first: entries are moved away while we go). NULL-terminated. */
static char **list_id_dirs(int dfd)
{
        DIR *d = sbx_opendir_dup(dfd);
        char **names = NULL;
        size_t n = 0, cap = 0;
        struct dirent *e;

        if (!d)
                return NULL;
        while ((e = readdir(d))) {
                struct stat st;
                if (!session_id_valid(e->d_name) || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    !S_ISDIR(st.st_mode))
                        continue;
                if (n + 2 > cap) {
                        size_t c = cap ? cap * 2 : 16;
                        char **p = realloc(names, c * sizeof(*names));
                        if (!p)
                                break;
                        names = p;
                        cap = c;
                }
                names[n] = strdup(e->d_name);
                if (names[n])
                        n++;
        }
        closedir(d);
        if (!names)
                names = calloc(1, sizeof(*names));
        if (names)
                names[n] = NULL;
        return names;
}

static void names_free(char **names)
{
        for (size_t i = 0; names && names[i]; i++)
                free(names[i]);
        free(names);
}

static int open_dir_at(int dfd, const char *name)
{
        return openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* ---- execution spools ---- */

static int unlink_spool(int dfd, const char *name)
{
        if (dfd < 0 || unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
                return 0;
        return -errno;
}

void gc_spools(struct gc *g)
{
        int64_t before = g->now - (int64_t)g->cfg->execution_retention_s * 1000;
        int64_t after_at = 0;
        char after_id[37] = "", dir[SBX_PATH_MAX + 16], reason[256], a[32], b[32], name[64], msg[300];
        _cleanup_close_ int dfd = -1;
        int r;

        snprintf(dir, sizeof(dir), "%s/executions", g->cfg->data_dir);
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        gc_fmt_age((int64_t)g->cfg->execution_retention_s * 1000, b, sizeof(b));

        for (;;) {
                _cleanup_free_ struct store_gc_spool *page = NULL;
                size_t n = 0;

                r = store_gc_spools_list(g->st, before, after_at, after_id, SPOOL_BATCH, &page, &n);
                if (!gc_listed(g, GC_SPOOLS, "listing executions", r))
                        break;
                for (size_t k = 0; k < n; k++) {
                        const char *id = page[k].id;
                        uint64_t bytes;

                        after_at = page[k].finished_at;
                        sbx_strlcpy(after_id, id, sizeof(after_id));
                        /* Our own ids only: the file names are built from them. */
                        if (!uuid_ok(id, strlen(id)))
                                continue;
                        snprintf(name, sizeof(name), "%s.stdout", id);
                        bytes = file_bytes_at(dfd, name);
                        snprintf(name, sizeof(name), "%s.stderr", id);
                        bytes += file_bytes_at(dfd, name);
                        gc_fmt_age(g->now - page[k].finished_at, a, sizeof(a));
                        snprintf(reason, sizeof(reason), "finished %s ago (gc.execution_retention %s)", a, b);
                        if (!g->dry_run) {
                                snprintf(name, sizeof(name), "%s.stdout", id);
                                r = unlink_spool(dfd, name);
                                snprintf(name, sizeof(name), "%s.stderr", id);
                                if (r == 0)
                                        r = unlink_spool(dfd, name);
                                if (r < 0) {
                                        snprintf(msg, sizeof(msg), "unlink %s/%s: %s", dir, name, strerror(-r));
                                        gc_note_failed(g, GC_SPOOLS, id, NULL, NULL, reason, msg);
                                        continue;
                                }
                                r = store_exec_clear_spool(g->st, id);
                                if (r < 0 && r != -ENOENT) {
                                        snprintf(msg, sizeof(msg), "files deleted, store: %s", strerror(-r));
                                        gc_note_failed(g, GC_SPOOLS, id, NULL, NULL, reason, msg);
                                        continue;
                                }
                        }
                        gc_note_done(g, GC_SPOOLS, id, NULL, NULL, bytes, reason);
                }
                if (n < SPOOL_BATCH)
                        break;
        }

        /* Spool files no execution row holds (a crash between the file and
         * the row, a restored backup): same retention, by mtime. */
        if (dfd >= 0) {
                struct dirent *e;
                DIR *d = sbx_opendir_dup(dfd);

                while (d && (e = readdir(d))) {
                        size_t len = strlen(e->d_name);
                        struct stat st;
                        bool known = true;
                        char id[37];

                        if (len != 43 ||
                            (strcmp(e->d_name + 36, ".stdout") != 0 && strcmp(e->d_name + 36, ".stderr") != 0) ||
                            !uuid_ok(e->d_name, 36))
                                continue;
                        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
                            (int64_t)st.st_mtim.tv_sec * 1000 >= before)
                                continue;
                        memcpy(id, e->d_name, 36);
                        id[36] = '\0';
                        if (store_gc_spool_known(g->st, id, &known) < 0 || known)
                                continue;
                        gc_fmt_age(g->now - (int64_t)st.st_mtim.tv_sec * 1000, a, sizeof(a));
                        snprintf(reason, sizeof(reason), "no execution holds it; last written %s ago", a);
                        if (!g->dry_run && unlinkat(dirfd(d), e->d_name, 0) < 0 && errno != ENOENT) {
                                snprintf(msg, sizeof(msg), "unlink %s/%s: %m", dir, e->d_name);
                                gc_note_failed(g, GC_SPOOLS, e->d_name, NULL, NULL, reason, msg);
                                continue;
                        }
                        gc_note_done(g, GC_SPOOLS, e->d_name, NULL, NULL, (uint64_t)st.st_size, reason);
                }
                if (d)
                        closedir(d);
        }
}

/* ---- workspace images (workspace.quota_mode loop) ---- */

/* Keep a mounted workspace whose session has a container or a live row
 * (RUNNING, CREATING, ERROR: the daemon may be giving it one); the row is
 * read fresh, so the daemon's latest word counts. */
static bool mount_needed(const char *user, const char *session, void *ud)
{
        struct gc *g = ud;
        struct store_session fresh;

        if (gc_has_container(g, user, session))
                return true;
        if (store_session_get(g->st, user, session, &fresh) < 0)
                return false;
        return state_live(fresh.state) || streq(fresh.state, "ERROR");
}

/* Unmount images the daemon left mounted for sessions that no longer have a
 * container (a daemon that died between the two). A dry run unmounts nothing. */
void gc_mounts(struct gc *g)
{
        int r;

        if (g->dry_run || strcmp(g->cfg->workspace_quota_mode, "loop") != 0)
                return;
        r = wsquota_sweep(g->cfg, mount_needed, g);
        if (r > 0)
                log_info("gc: %d workspace image(s) of sessions without a container unmounted", r);
        else if (r < 0)
                log_warn("gc: cannot read the mount table: %s", strerror(-r));
}

/* ---- workspaces ---- */

/* Is (user, session) still as dead as gc saw it? expect is the row gc
 * judged by, NULL when it saw none. 1 yes, 0 no (it came alive or
 * changed), -errno when it cannot tell. */
static int still_dead(struct gc *g, const char *user, const char *session, const struct store_session *expect,
                      struct sbx_error *err)
{
        char f1[128], f2[128], f3[128], f4[128];
        const char *filters[] = {f1, f2, f3, f4, NULL};
        struct engine_container_summary *list = NULL;
        struct store_session fresh;
        size_t n = 0;
        int r;

        r = store_session_get(g->st, user, session, &fresh);
        if (r < 0 && r != -ENOENT)
                return sbx_error_set(err, r, 0, "reading the session: %s", strerror(-r));
        if (r == 0 && (!expect || state_live(fresh.state) || fresh.updated_at != expect->updated_at ||
                       !streq(fresh.state, expect->state)))
                return 0;
        snprintf(f1, sizeof(f1), CONTAINER_LABEL_MANAGED "=1");
        snprintf(f2, sizeof(f2), CONTAINER_LABEL_INSTANCE "=%s", g->cfg->instance);
        snprintf(f3, sizeof(f3), CONTAINER_LABEL_USER "=%s", user);
        snprintf(f4, sizeof(f4), CONTAINER_LABEL_SESSION "=%s", session);
        r = engine_list(g->engine, filters, true, &list, &n, err);
        free(list);
        if (r < 0)
                return r;
        return n == 0;
}

/* mkdir -p of a relative path under dfd, each level 0700 and never through
 * a symlink. Returns an fd of the last level. */
static int make_dirs_at(int dfd, const char *const *parts)
{
        int fd = dup(dfd);

        for (size_t i = 0; fd >= 0 && parts[i]; i++) {
                int next;
                if (mkdirat(fd, parts[i], 0700) < 0 && errno != EEXIST) {
                        close(fd);
                        return -1;
                }
                next = open_dir_at(fd, parts[i]);
                close(fd);
                fd = next;
        }
        return fd;
}

/* rmdir dfd/parts[0]/parts[1]/... from the deepest level up, stopping at the
 * first that is not empty. */
static void remove_empty_dirs(const char *root, const char *const *parts, size_t n)
{
        char path[SBX_PATH_MAX * 2];

        for (size_t k = n; k > 0; k--) {
                int len = snprintf(path, sizeof(path), "%s", root);
                for (size_t i = 0; i < k && len > 0 && (size_t)len < sizeof(path); i++)
                        len += snprintf(path + len, sizeof(path) - (size_t)len, "/%s", parts[i]);
                if (len <= 0 || (size_t)len >= sizeof(path) || rmdir(path) < 0)
                        return;
        }
}

/* Delete {trash_root}/workspaces/<user>/<session> with the container
 * module's purge (it takes a data_dir; the trash root is one). */
static int purge_in_trash(struct gc *g, const char *trash_root, const char *user, const char *session,
                          struct sbx_error *err)
{
        struct sbx_config tcfg = *g->cfg;

        if (!sbx_strlcpy(tcfg.data_dir, trash_root, sizeof(tcfg.data_dir)))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "trash path too long");
        return container_workspace_purge(&tcfg, user, session, err);
}

/* The run's trash root {data_dir}/gc-trash/run-<pid>-<ms>, made on first use. */
static const char *trash_root(struct gc *g)
{
        char run[64];
        _cleanup_close_ int data = -1, fd = -1;

        if (g->trash[0])
                return g->trash;
        snprintf(run, sizeof(run), "run-%d-%" PRId64, (int)getpid(), sbx_wall_ms());
        data = open(g->cfg->data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (data < 0)
                return NULL;
        fd = make_dirs_at(data, (const char *const[]){TRASH_DIR, run, NULL});
        if (fd < 0)
                return NULL;
        if (snprintf(g->trash, sizeof(g->trash), "%s/" TRASH_DIR "/%s", g->cfg->data_dir, run) >=
            (int)sizeof(g->trash)) {
                g->trash[0] = '\0';
                return NULL;
        }
        return g->trash;
}

/* Move the workspace into the trash, make sure its session is still dead,
 * delete it. 0 done, -ESTALE the session came alive (workspace left or put
 * back in place), other -errno failed (err says why). */
/* The engine's part of a workspace (Kubernetes: the session's claim, which a
 * warm pool claim may have named after its slot: the uid's row says). */
static int drop_engine_workspace(struct gc *g, const char *user, const char *session, struct sbx_error *err)
{
        char claim[STORE_CLAIM_MAX];
        bool own = store_uid_claim_get(g->st, user, session, claim) == 0;

        return engine_workspace_drop(g->engine, g->cfg->instance, user, session, own ? claim : NULL, err);
}

static int purge_workspace(struct gc *g, int ufd, const char *user, const char *session,
                           const struct store_session *expect, struct sbx_error *err)
{
        _cleanup_close_ int tfd = -1, troot = -1;
        const char *root;
        int r;

        r = still_dead(g, user, session, expect, err);
        if (r <= 0)
                return r < 0 ? r : -ESTALE;
        r = wsquota_detach(g->cfg, user, session, err); /* a mount point cannot be moved */
        if (r < 0)
                return r;
        root = trash_root(g);
        if (root) {
                troot = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (troot >= 0)
                        tfd = make_dirs_at(troot, (const char *const[]){"workspaces", user, NULL});
        }
        if (tfd < 0 || renameat2(ufd, session, tfd, session, RENAME_NOREPLACE) < 0) {
                if (tfd >= 0 && errno == ENOENT)
                        return 0; /* someone deleted it already */
                if (tfd >= 0 && errno != EXDEV)
                        return sbx_error_set(err, -errno, 0, "moving the workspace into %s: %m", root);
                /* No trash on this file system: delete in place (the checks above just passed). */
                r = container_workspace_purge(g->cfg, user, session, err);
                if (r == 0)
                        r = wsquota_purge(g->cfg, user, session, err);
                return r < 0 ? r : drop_engine_workspace(g, user, session, err);
        }
        r = still_dead(g, user, session, expect, err);
        if (r <= 0) {
                if (renameat2(tfd, session, ufd, session, RENAME_NOREPLACE) < 0)
                        return sbx_error_set(
                                err, -errno, 0,
                                "the session came alive while its workspace was moved to %s/workspaces/%s/%s "
                                "and it cannot be put back: %m",
                                root, user, session);
                return r < 0 ? r : -ESTALE;
        }
        r = purge_in_trash(g, root, user, session, err);
        remove_empty_dirs(root, (const char *const[]){"workspaces", user}, 2);
        if (r == 0)
                r = wsquota_purge(g->cfg, user, session, err); /* its image, once the workspace is gone */
        if (r == 0)                                            /* the engine's part (Kubernetes: the session's claim) */
                r = drop_engine_workspace(g, user, session, err);
        if (r < 0)
                return r;
        if (!expect)
                (void)store_gc_private_forget(g->st, user, session);
        return 0;
}

static void gc_workspace(struct gc *g, int ufd, const char *user, const char *session, int64_t before)
{
        ssize_t i = gc_find_row(g, user, session);
        const struct store_session *row = i >= 0 ? &g->rows[i] : NULL;
        const struct store_session *expect = row && !g->row_gone[i] ? row : NULL;
        struct sbx_error err = {0};
        char reason[256], id[160], a[32], b[32];
        int64_t ended = 0;
        uint64_t bytes;
        struct stat st;
        int r;

        if (expect && state_live(expect->state))
                return;
        if (gc_has_container(g, user, session))
                return;
        if (row) {
                ended = row->updated_at > row->last_activity ? row->updated_at : row->last_activity;
        } else {
                if (store_gc_session_last_seen(g->st, user, session, &ended) < 0)
                        return;
                if (fstatat(ufd, session, &st, AT_SYMLINK_NOFOLLOW) == 0 && (int64_t)st.st_mtim.tv_sec * 1000 > ended)
                        ended = (int64_t)st.st_mtim.tv_sec * 1000;
        }
        if (ended >= before)
                return;
        gc_fmt_age(g->now - ended, a, sizeof(a));
        gc_fmt_age((int64_t)g->cfg->workspace_retention_s * 1000, b, sizeof(b));
        if (expect)
                snprintf(reason, sizeof(reason), "session %s for %s (gc.workspace_retention %s)", expect->state, a, b);
        else
                snprintf(reason, sizeof(reason), "session gone for %s (gc.workspace_retention %s)", a, b);
        snprintf(id, sizeof(id), "%s/%s", user, session);
        bytes = tree_bytes_at(ufd, session, 0);
        if (!g->dry_run) {
                r = purge_workspace(g, ufd, user, session, expect, &err);
                if (r == -ESTALE) {
                        gc_note_kept(g, GC_WORKSPACES, id, user, session, "the session came alive");
                        return;
                }
                if (r < 0) {
                        gc_note_failed(g, GC_WORKSPACES, id, user, session, reason, err.msg);
                        return;
                }
                gc_audit_remove(g, user, session, GC_WORKSPACES, id, reason);
        }
        gc_note_done(g, GC_WORKSPACES, id, user, session, bytes, reason);
}

/* Purge {trash}/<run>/workspaces/<user>/<session> for every run a previous,
 * interrupted gc left behind: nobody owns it any more. */
static void gc_leftover_run(struct gc *g, int tfd, const char *dir, const char *run)
{
        _cleanup_close_ int rfd = open_dir_at(tfd, run), ws = -1;
        char root[SBX_PATH_MAX * 2], id[160];
        const char *reason = "left in gc-trash by an interrupted gc";
        char **users;

        if (rfd < 0)
                return;
        snprintf(root, sizeof(root), "%s/%s", dir, run);
        ws = open_dir_at(rfd, "workspaces");
        users = ws >= 0 ? list_id_dirs(ws) : NULL;
        for (size_t u = 0; users && users[u]; u++) {
                _cleanup_close_ int ufd = open_dir_at(ws, users[u]);
                char **sessions = ufd >= 0 ? list_id_dirs(ufd) : NULL;

                for (size_t s = 0; sessions && sessions[s]; s++) {
                        struct sbx_error err = {0};
                        uint64_t bytes = tree_bytes_at(ufd, sessions[s], 0);

                        snprintf(id, sizeof(id), "%s/%s", users[u], sessions[s]);
                        if (!g->dry_run && purge_in_trash(g, root, users[u], sessions[s], &err) < 0) {
                                gc_note_failed(g, GC_WORKSPACES, id, users[u], sessions[s], reason, err.msg);
                                continue;
                        }
                        gc_note_done(g, GC_WORKSPACES, id, users[u], sessions[s], bytes, reason);
                }
                names_free(sessions);
        }
        if (!g->dry_run) {
                for (size_t u = 0; users && users[u]; u++)
                        remove_empty_dirs(root, (const char *const[]){"workspaces", users[u]}, 2);
                remove_empty_dirs(root, (const char *const[]){"workspaces"}, 1);
                (void)rmdir(root);
        }
        names_free(users);
}

static void gc_leftover_trash(struct gc *g)
{
        char dir[SBX_PATH_MAX + 16];
        _cleanup_close_ int tfd = -1;
        char **runs = NULL;
        size_t n = 0;
        struct dirent *e;
        DIR *d;

        snprintf(dir, sizeof(dir), "%s/" TRASH_DIR, g->cfg->data_dir);
        tfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        d = sbx_opendir_dup(tfd);
        if (!d)
                return;
        while ((e = readdir(d))) {
                char **p;
                if (strncmp(e->d_name, "run-", 4) != 0 || !(p = realloc(runs, (n + 2) * sizeof(*runs))))
                        continue;
                runs = p;
                if ((runs[n] = strdup(e->d_name)))
                        runs[++n] = NULL;
        }
        closedir(d);
        for (size_t i = 0; i < n; i++)
                gc_leftover_run(g, tfd, dir, runs[i]);
        names_free(runs);
}

void gc_workspaces(struct gc *g)
{
        int64_t before = g->now - (int64_t)g->cfg->workspace_retention_s * 1000;
        char dir[SBX_PATH_MAX + 16];
        _cleanup_close_ int wfd = -1;
        char **users;

        gc_leftover_trash(g); /* decided by an earlier run, whatever the retention now */
        if (g->cfg->workspace_retention_s < 0)
                return; /* keep forever */
        snprintf(dir, sizeof(dir), "%s/workspaces", g->cfg->data_dir);
        wfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (wfd < 0)
                return;
        users = list_id_dirs(wfd);
        for (size_t u = 0; users && users[u]; u++) {
                _cleanup_close_ int ufd = open_dir_at(wfd, users[u]);
                char **sessions = ufd >= 0 ? list_id_dirs(ufd) : NULL;

                for (size_t s = 0; sessions && sessions[s]; s++)
                        gc_workspace(g, ufd, users[u], sessions[s], before);
                names_free(sessions);
        }
        names_free(users);
        if (g->trash[0]) {
                (void)rmdir(g->trash);
                snprintf(dir, sizeof(dir), "%s/" TRASH_DIR, g->cfg->data_dir);
                (void)rmdir(dir);
        }
}

/* ---- session uids ---- */

/* Did this run delete (or, dry, decide to delete) the workspace user/session? */
static bool workspace_taken(struct gc *g, const char *id)
{
        for (size_t i = 0; i < g->rep->n_items; i++)
                if (g->rep->items[i].kind == GC_WORKSPACES && !g->rep->items[i].failed &&
                    strcmp(g->rep->items[i].id, id) == 0)
                        return true;
        return false;
}

/* A uid is the session's while its workspace exists (sessuid.h): one whose
 * workspace is gone (this run purged it, the daemon died between a purge and
 * the release, or an operator deleted it), of a session that is not live and
 * has no container, goes back to the range. */
void gc_uids(struct gc *g)
{
        _cleanup_free_ struct store_uid *rows = NULL;
        size_t n = 0;
        char reason[160], id[160], path[SBX_PATH_MAX + 160];
        struct stat st;
        int r;

        if (!gc_listed(g, GC_UIDS, "listing session uids", store_uid_list(g->st, &rows, &n)))
                return;
        for (size_t k = 0; k < n; k++) {
                const struct store_uid *u = &rows[k];
                ssize_t i = gc_find_row(g, u->user_id, u->session_id);
                bool taken;

                if (i >= 0 && !g->row_gone[i] && state_live(g->rows[i].state))
                        continue;
                if (gc_has_container(g, u->user_id, u->session_id) || !session_id_valid(u->user_id) ||
                    !session_id_valid(u->session_id))
                        continue;
                snprintf(id, sizeof(id), "%s/%s", u->user_id, u->session_id);
                snprintf(path, sizeof(path), "%s/workspaces/%s", g->cfg->data_dir, id);
                /* a real run deleted what it purged; a dry run only noted it */
                taken = false;
                if (lstat(path, &st) == 0 || errno != ENOENT) {
                        taken = g->dry_run && g->rep->kinds[GC_WORKSPACES].count > 0 && workspace_taken(g, id);
                        if (!taken)
                                continue;
                }
                snprintf(reason, sizeof(reason), "uid %" PRId64 ": %s", u->uid,
                         taken ? "its workspace was purged by this run" : "its workspace does not exist");
                snprintf(id, sizeof(id), "%" PRId64, u->uid);
                if (!g->dry_run) {
                        r = store_gc_uid_release(g->st, u->user_id, u->session_id, u->uid);
                        if (!gc_store_changed(g, GC_UIDS, id, u->user_id, u->session_id, reason,
                                              "its session is live again", r))
                                continue;
                        if (u->uid > 0 && u->uid <= INT32_MAX)
                                container_identity_drop(g->cfg, (uid_t)u->uid);
                }
                gc_note_done(g, GC_UIDS, id, u->user_id, u->session_id, 0, reason);
        }
}
