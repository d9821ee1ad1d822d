/* pool_slot.c — a warm-pool slot on disk and in the engine: discarding one,
 * steps 2 and 3 of a claim (relabelling its Pod and claim where the engine
 * can, moving the slot's workspace, or in loop mode its image, to the
 * session, and re-keying its runner directory and uid), the recovery of
 * claims a crash interrupted, the sweep of leftovers no slot row names and
 * --gc of slots of images no longer pooled. pool.c has the pool itself
 * (refill, waiting line, claim).
 *
 * Locking: none of its own. Everything here runs outside the pool's lock
 * (Docker and the disk never run under it) and is idempotent, so restart
 * recovery can run a step again. */
#include "pool_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/container.h"
#include "sandboxd/engine.h"
#include "sandboxd/log.h"
#include "sandboxd/hub.h"
#include "sandboxd/utf8.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"
#include "sandboxd/wsquota.h"

/* Remove everything of a slot: container, runner directory, workspace, the engine's claim, uid, row (in
 * that order, so a crash in between leaves a row, or nothing pool_sweep_leftovers cannot find). */
void pool_slot_discard(const struct sbx_config *cfg, struct store *st, struct engine *d, struct hub *h,
                       const char *slot, const char *container_id)
{
        struct sbx_error e = {0};
        uid_t uid;

        if (container_id && container_id[0] && container_remove(d, container_id, &e) < 0) {
                log_warn("pool: cannot remove container %.12s of slot %s: %s", container_id, slot, e.msg);
                return; /* the row stays: the next reconcile tries again */
        }
        if (container_id && container_id[0])
                (void)store_container_removed(st, container_id, "pool_discarded", sbx_wall_ms());
        if (h)
                hub_drop(h, POOL_USER, slot);
        else
                (void)hub_rekey(NULL, cfg, POOL_USER, slot, POOL_USER, slot, NULL);
        if (wsquota_purge(cfg, POOL_USER, slot, &e) < 0 || container_workspace_purge(cfg, POOL_USER, slot, &e) < 0)
                log_warn("pool: cannot purge the workspace of slot %s: %s", slot, e.msg);
        /* the engine's part (Kubernetes pvc mode: the slot's own claim, named after the slot) */
        if (d && engine_workspace_drop(d, cfg->instance, POOL_USER, slot, NULL, &e) < 0) {
                log_warn("pool: cannot delete the workspace claim of slot %s: %s", slot, e.msg);
                return; /* the row stays: the next reconcile (or --gc) tries again */
        }
        if (sessuid_lookup(st, POOL_USER, slot, &uid) == 0 && sessuid_release(st, POOL_USER, slot) == 0)
                container_identity_drop(cfg, uid);
        (void)store_pool_delete(st, slot);
}

int pool_open_ws_dir(const struct sbx_config *cfg, const char *user)
{
        char path[SBX_PATH_MAX];
        _cleanup_close_ int ws = -1;

        snprintf(path, sizeof(path), "%s/workspaces", cfg->data_dir);
        ws = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (ws < 0)
                return -errno;
        int fd = openat(ws, user, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* Step 2 in loop mode: the slot's image and mount become the session's
 * (wsquota_claim), then the slot's empty mount point goes. */
static int move_loop_workspace(const struct sbx_config *cfg, int pfd, const struct store_pool_slot *row, uid_t uid,
                               char ret_ws[SBX_PATH_MAX], struct sbx_error *err)
{
        int r = container_workspace_ensure(cfg, row->user_id, row->session_id, uid, ret_ws, err);

        if (r == 0)
                r = wsquota_claim(cfg, POOL_USER, row->slot, row->user_id, row->session_id, err);
        if (r < 0)
                return r;
        if (unlinkat(pfd, row->slot, AT_REMOVEDIR) < 0 && errno != ENOENT)
                return sbx_error_set(err, -errno, 0, "cannot remove the mount point of slot %s: %m", row->slot);
        return 0;
}

/* Step 2 otherwise: the session's empty leaf gives way to the slot's directory (the bind mount follows). */
static int move_workspace(const struct sbx_config *cfg, int pfd, const struct store_pool_slot *row, uid_t uid,
                          char ret_ws[SBX_PATH_MAX], struct sbx_error *err)
{
        _cleanup_close_ int ufd = -1;
        int r = container_workspace_ensure(cfg, row->user_id, row->session_id, uid, ret_ws, err);

        if (r < 0)
                return r;
        ufd = pool_open_ws_dir(cfg, row->user_id);
        if (ufd < 0)
                return sbx_error_set(err, ufd, 0, "cannot open the workspaces of %s", row->user_id);
        if (unlinkat(ufd, row->session_id, AT_REMOVEDIR) < 0 && errno != ENOENT)
                return sbx_error_set(err, -errno, 0, "the workspace of %s:%s is not empty: %m", row->user_id,
                                     row->session_id);
        if (renameat2(pfd, row->slot, ufd, row->session_id, RENAME_NOREPLACE) < 0)
                return sbx_error_set(err, -errno, 0, "cannot move slot %s to the workspace of %s:%s: %m", row->slot,
                                     row->user_id, row->session_id);
        return 0;
}

/* Step 2's first part where the engine can relabel (Kubernetes): the slot's
 * Pod and its claim carry the session's labels from now on, and the claim's
 * name goes on the slot's uid row, which the commit hands to the session.
 * First, so a Pod that died or is going is found before anything moves:
 * -ENOENT, and the claim takes the cold path. */
static int relabel_slot(struct store *st, struct engine *d, const struct store_pool_slot *row, struct sbx_error *err)
{
        const struct engine_label set[] = {{CONTAINER_LABEL_USER, row->user_id},
                                           {CONTAINER_LABEL_SESSION, row->session_id},
                                           {POOL_LABEL, NULL}};
        char claim[ENGINE_CLAIM_MAX] = "";
        struct sbx_error e = {0};
        int r;

        if (!d)
                return 0;
        r = engine_relabel(d, row->container_id, set, ELEMENTSOF(set), claim, &e);
        if (r == -EOPNOTSUPP)
                return 0; /* Docker: the container keeps the pool's labels, the store says whose it is */
        if (r < 0) {
                if (err)
                        *err = e;
                sbx_error_prefix(err, "slot %s", row->slot);
                return r;
        }
        if (claim[0] && (r = store_uid_claim_set(st, POOL_USER, row->slot, claim)) < 0)
                return sbx_error_set(err, r, 0, "recording the claim of slot %s: %s", row->slot, strerror(-r));
        pool_hook("relabelled");
        return 0;
}

/* Steps 2 and 3 of the claim (pool.h), idempotent: restart recovery runs them again. */
int pool_finish_claim(const struct sbx_config *cfg, struct store *st, struct engine *d, struct hub *h,
                      const struct store_pool_slot *row, char ret_ws[SBX_PATH_MAX], uid_t *ret_uid,
                      struct sbx_error *err)
{
        _cleanup_close_ int pfd = -1;
        struct stat st_slot;
        uid_t uid;
        int r;

        r = sessuid_lookup(st, POOL_USER, row->slot, &uid);
        if (r < 0)
                return sbx_error_set(err, r, 0, "slot %s has no uid", row->slot);
        r = relabel_slot(st, d, row, err);
        if (r < 0)
                return r;
        pfd = pool_open_ws_dir(cfg, POOL_USER);
        if (pfd >= 0 && fstatat(pfd, row->slot, &st_slot, AT_SYMLINK_NOFOLLOW) == 0) {
                r = row->ws_quota[0] ? move_loop_workspace(cfg, pfd, row, uid, ret_ws, err)
                                     : move_workspace(cfg, pfd, row, uid, ret_ws, err);
                if (r < 0)
                        return r;
                pool_hook("moved");
        } else {
                snprintf(ret_ws, SBX_PATH_MAX, "%s/workspaces/%s/%s", cfg->data_dir, row->user_id, row->session_id);
        }
        r = hub_rekey(h, cfg, POOL_USER, row->slot, row->user_id, row->session_id, err);
        if (r < 0 && r != -ENOENT)
                return r;
        pool_hook("rekeyed");
        r = store_pool_claim_commit(st, POOL_USER, row, sbx_wall_ms());
        if (r < 0)
                return sbx_error_set(err, r, 0, "recording the claim of slot %s: %s", row->slot, strerror(-r));
        *ret_uid = uid;
        return 0;
}

int pool_recover_claims(const struct sbx_config *cfg, struct store *st, struct engine *d, struct hub *h,
                        struct sbx_error *err)
{
        _cleanup_free_ struct store_pool_slot *rows = NULL;
        size_t n = 0;
        int r = store_pool_list(st, &rows, &n);

        if (r < 0)
                return sbx_error_set(err, r, 0, "listing pool slots: %s", strerror(-r));
        for (size_t i = 0; i < n; i++) {
                char ws[SBX_PATH_MAX];
                struct sbx_error e = {0};
                uid_t uid;

                if (strcmp(rows[i].state, "claiming") != 0)
                        continue;
                /* through the hub: over a node link the runner directory is the node's */
                if (pool_finish_claim(cfg, st, d, h, &rows[i], ws, &uid, &e) == 0) {
                        log_ctx(LOG_LEVEL_INFO, rows[i].user_id, rows[i].session_id, rows[i].container_id,
                                "pool: finished the claim of slot %s a previous daemon began", rows[i].slot);
                        continue;
                }
                /* cannot be the session's (its workspace has content): the slot goes, the
                 * session takes the cold path on its next request */
                log_ctx(LOG_LEVEL_WARN, rows[i].user_id, rows[i].session_id, rows[i].container_id,
                        "pool: claim of slot %s undone: %s", rows[i].slot, e.msg);
                pool_slot_discard(cfg, st, d, h, rows[i].slot, rows[i].container_id);
        }
        return 0;
}

/* Slot claims of this instance no row names (a daemon that lost its store, a row deleted by hand). */
static size_t sweep_claims(const struct sbx_config *cfg, struct store *st, struct engine *d, bool dry_run)
{
        char inst[160];
        const char *filters[] = {POOL_LABEL "=1", inst, NULL};
        _cleanup_free_ struct engine_claim_summary *list = NULL;
        struct store_pool_slot row;
        struct sbx_error e = {0};
        size_t n = 0, swept = 0;

        snprintf(inst, sizeof(inst), CONTAINER_LABEL_INSTANCE "=%s", cfg->instance);
        if (!d || engine_claim_list(d, filters, &list, &n, &e) < 0) {
                if (d)
                        log_warn("pool: cannot list the slots' claims: %s", e.msg);
                return 0;
        }
        for (size_t i = 0; i < n; i++) {
                const char *slot = engine_label_get(list[i].labels, list[i].n_labels, CONTAINER_LABEL_SESSION);
                if (slot && session_id_valid(slot) && store_pool_get(st, slot, &row) == 0)
                        continue;
                swept++;
                if (dry_run)
                        continue;
                log_info("pool: removing the leftover slot claim %s", list[i].name);
                if (engine_workspace_drop(d, cfg->instance, POOL_USER, slot ? slot : "-", list[i].name, &e) < 0)
                        log_warn("pool: cannot delete the leftover slot claim %s: %s", list[i].name, e.msg);
        }
        return swept;
}

size_t pool_sweep_leftovers(const struct sbx_config *cfg, struct store *st, struct engine *d, bool dry_run)
{
        _cleanup_free_ struct store_uid *uids = NULL;
        struct store_pool_slot row;
        size_t n = 0, swept = sweep_claims(cfg, st, d, dry_run);
        int pfd = pool_open_ws_dir(cfg, POOL_USER);

        if (pfd >= 0) {
                DIR *dir = fdopendir(pfd);
                struct dirent *de;
                char **names = NULL;
                size_t nn = 0;

                while (dir && (de = readdir(dir))) {
                        if (!session_id_valid(de->d_name) || store_pool_get(st, de->d_name, &row) == 0)
                                continue;
                        char **g = realloc(names, (nn + 1) * sizeof(*names));
                        if (!g)
                                break;
                        names = g;
                        if ((names[nn] = strdup(de->d_name)))
                                nn++;
                }
                if (dir)
                        closedir(dir);
                else
                        close(pfd);
                for (size_t i = 0; i < nn; i++) {
                        swept++;
                        if (!dry_run) {
                                log_info("pool: removing the leftover slot directory %s", names[i]);
                                (void)hub_rekey(NULL, cfg, POOL_USER, names[i], POOL_USER, names[i], NULL);
                                if (wsquota_purge(cfg, POOL_USER, names[i], NULL) == 0)
                                        (void)container_workspace_purge(cfg, POOL_USER, names[i], NULL);
                        }
                        free(names[i]);
                }
                free(names);
        }
        if (store_uid_list(st, &uids, &n) == 0)
                for (size_t i = 0; i < n; i++) {
                        if (strcmp(uids[i].user_id, POOL_USER) != 0 ||
                            store_pool_get(st, uids[i].session_id, &row) == 0)
                                continue;
                        swept++;
                        if (!dry_run && sessuid_release(st, POOL_USER, uids[i].session_id) == 0)
                                container_identity_drop(cfg, (uid_t)uids[i].uid);
                }
        return swept;
}

size_t pool_gc_unconfigured(const struct sbx_config *cfg, struct store *st, struct engine *d, bool dry_run)
{
        _cleanup_free_ struct store_pool_slot *rows = NULL;
        char refs[POOL_MAX_IMAGES][256];
        size_t n = 0, n_refs = config_image_list(cfg, refs, POOL_MAX_IMAGES), removed = 0;
        bool off = strcmp(cfg->workspace_quota_mode, "project") == 0;

        if (store_pool_list(st, &rows, &n) < 0)
                return 0;
        for (size_t i = 0; i < n; i++) {
                struct store_pool_slot row;
                bool pooled = false;

                if (strcmp(rows[i].state, "ready") != 0)
                        continue; /* 'claiming': restart recovery's; 'creating': a refill under way */
                for (size_t j = 0; !off && j < n_refs; j++)
                        pooled |= strcmp(refs[j], rows[i].image_ref) == 0 && config_pool_size_for(cfg, refs[j]) > 0;
                if (pooled)
                        continue;
                removed++;
                if (dry_run)
                        continue;
                /* taken from the pool first, so a daemon cannot claim it while it goes */
                if (store_pool_evict(st, rows[i].slot, &row) < 0) {
                        removed--;
                        continue;
                }
                log_info("pool: removing slot %s of %s, an image no longer pooled", row.slot, row.image_ref);
                pool_slot_discard(cfg, st, d, NULL, row.slot, row.container_id);
        }
        return removed;
}
