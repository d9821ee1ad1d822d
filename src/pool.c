/* pool.c — the warm pool (pool.h has the model and the claim protocol).
 *
 * Slot ids are 16 random hex digits from getrandom(2) after a "p": valid
 * session ids, so every path helper that takes (user, session) takes
 * ("@pool", slot) too. */
#include "sandboxd/pool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandboxd/container.h"
#include "sandboxd/docker.h"
#include "sandboxd/log.h"
#include "sandboxd/runner.h"
#include "sandboxd/session.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"

#define MAX_EXTRA 8
#define RUNNER_WAIT_MS 10000
#define BACKOFF_MS 5000

struct pool {
        const struct sbx_config *cfg;
        struct docker *docker;
        struct store *store;
        struct runner_hub *runner;
        char *labels[MAX_EXTRA + 2]; /* extra labels + sandboxd.pool=1, NULL-terminated */

        pthread_mutex_t lock;
        pthread_cond_t cond;
        pthread_t thread;
        bool started, stop, kick;
        pool_load_fn load;
        void *load_ud;
        char image_id[256];
        uint64_t claims, misses, created, failed;
        int64_t create_ms_total;
        bool creating;
};

static pool_test_hook_fn test_hook; /* tests only: see pool.h */

void pool_set_test_hook(pool_test_hook_fn fn) { test_hook = fn; }

static void hook(const char *stage)
{
        if (test_hook)
                test_hook(stage);
}

/* ---- slots on disk and in Docker ---- */

/* Remove everything of a slot: container, runner directory, workspace, uid, row (in that order, so a
 * crash in between leaves a row, or nothing pool_sweep_leftovers cannot find). */
static void slot_discard(const struct sbx_config *cfg, struct store *st, struct docker *d, struct runner_hub *h,
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
                runner_hub_drop(h, POOL_USER, slot);
        else
                (void)runner_hub_rekey(NULL, cfg, POOL_USER, slot, POOL_USER, slot, NULL);
        if (container_workspace_purge(cfg, POOL_USER, slot, &e) < 0)
                log_warn("pool: cannot purge the workspace of slot %s: %s", slot, e.msg);
        if (sessuid_lookup(st, POOL_USER, slot, &uid) == 0 && sessuid_release(st, POOL_USER, slot) == 0)
                container_identity_drop(cfg, uid);
        (void)store_pool_delete(st, slot);
}

static int open_ws_dir(const struct sbx_config *cfg, const char *user)
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

/* Steps 2 and 3 of the claim (pool.h), idempotent: restart recovery runs them again. */
static int finish_claim(const struct sbx_config *cfg, struct store *st, struct runner_hub *h,
                        const struct store_pool_slot *row, char ret_ws[SBX_PATH_MAX], uid_t *ret_uid,
                        struct sbx_error *err)
{
        _cleanup_close_ int pfd = -1, ufd = -1;
        struct stat st_slot;
        uid_t uid;
        int r;

        r = sessuid_lookup(st, POOL_USER, row->slot, &uid);
        if (r < 0)
                return sbx_error_set(err, r, 0, "slot %s has no uid", row->slot);
        pfd = open_ws_dir(cfg, POOL_USER);
        if (pfd >= 0 && fstatat(pfd, row->slot, &st_slot, AT_SYMLINK_NOFOLLOW) == 0) {
                /* the session's workspace: parents made as for any session, then the empty leaf
                 * gives way to the slot's directory */
                r = container_workspace_ensure(cfg, row->user_id, row->session_id, uid, ret_ws, err);
                if (r < 0)
                        return r;
                ufd = open_ws_dir(cfg, row->user_id);
                if (ufd < 0)
                        return sbx_error_set(err, ufd, 0, "cannot open the workspaces of %s", row->user_id);
                if (unlinkat(ufd, row->session_id, AT_REMOVEDIR) < 0 && errno != ENOENT)
                        return sbx_error_set(err, -errno, 0, "the workspace of %s:%s is not empty: %m", row->user_id,
                                             row->session_id);
                if (renameat2(pfd, row->slot, ufd, row->session_id, RENAME_NOREPLACE) < 0)
                        return sbx_error_set(err, -errno, 0, "cannot move slot %s to the workspace of %s:%s: %m",
                                             row->slot, row->user_id, row->session_id);
                hook("moved");
        } else {
                snprintf(ret_ws, SBX_PATH_MAX, "%s/workspaces/%s/%s", cfg->data_dir, row->user_id, row->session_id);
        }
        r = runner_hub_rekey(h, cfg, POOL_USER, row->slot, row->user_id, row->session_id, err);
        if (r < 0 && r != -ENOENT)
                return r;
        hook("rekeyed");
        r = store_pool_claim_commit(st, POOL_USER, row, sbx_wall_ms());
        if (r < 0)
                return sbx_error_set(err, r, 0, "recording the claim of slot %s: %s", row->slot, strerror(-r));
        *ret_uid = uid;
        return 0;
}

int pool_recover_claims(const struct sbx_config *cfg, struct store *st, struct docker *d, struct sbx_error *err)
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
                if (finish_claim(cfg, st, NULL, &rows[i], ws, &uid, &e) == 0) {
                        log_ctx(LOG_LEVEL_INFO, rows[i].user_id, rows[i].session_id, rows[i].container_id,
                                "pool: finished the claim of slot %s a previous daemon began", rows[i].slot);
                        continue;
                }
                /* cannot be the session's (its workspace has content): the slot goes, the
                 * session takes the cold path on its next request */
                log_ctx(LOG_LEVEL_WARN, rows[i].user_id, rows[i].session_id, rows[i].container_id,
                        "pool: claim of slot %s undone: %s", rows[i].slot, e.msg);
                slot_discard(cfg, st, d, NULL, rows[i].slot, rows[i].container_id);
        }
        return 0;
}

size_t pool_sweep_leftovers(const struct sbx_config *cfg, struct store *st, bool dry_run)
{
        _cleanup_free_ struct store_uid *uids = NULL;
        struct store_pool_slot row;
        size_t n = 0, swept = 0;
        int pfd = open_ws_dir(cfg, POOL_USER);

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
                                (void)runner_hub_rekey(NULL, cfg, POOL_USER, names[i], POOL_USER, names[i], NULL);
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

int pool_reconcile(struct pool *p, struct sbx_error *err)
{
        char filter[128];
        const char *filters[] = {POOL_LABEL "=1", filter, NULL};
        _cleanup_free_ struct docker_container_summary *list = NULL;
        _cleanup_free_ struct store_pool_slot *rows = NULL;
        size_t n = 0, n_rows = 0, adopted = 0, removed = 0;
        int r;

        snprintf(filter, sizeof(filter), CONTAINER_LABEL_INSTANCE "=%s", p->cfg->instance);
        r = docker_container_list(p->docker, filters, true, &list, &n, err);
        if (r < 0)
                return r;
        r = store_pool_list(p->store, &rows, &n_rows);
        if (r < 0)
                return sbx_error_set(err, r, 0, "listing pool slots: %s", strerror(-r));
        for (size_t i = 0; i < n_rows; i++) {
                const struct store_pool_slot *row = &rows[i];
                const struct docker_container_summary *c = NULL;

                for (size_t j = 0; j < n; j++) {
                        const char *slot = docker_kv_get(list[j].labels, list[j].n_labels, CONTAINER_LABEL_SESSION);
                        if ((row->container_id[0] && strcmp(list[j].id, row->container_id) == 0) ||
                            (slot && strcmp(slot, row->slot) == 0))
                                c = &list[j];
                }
                /* ready slots beyond pool_size (lowered, or 0: off) go too */
                if (strcmp(row->state, "ready") == 0 && c && strcmp(c->state, "running") == 0 &&
                    strcmp(c->id, row->container_id) == 0 && adopted < (size_t)p->cfg->pool_size &&
                    runner_hub_adopt(p->runner, POOL_USER, row->slot) == 0) {
                        adopted++;
                        continue;
                }
                if (strcmp(row->state, "claiming") == 0)
                        continue; /* pool_recover_claims' */
                slot_discard(p->cfg, p->store, p->docker, p->runner, row->slot, c ? c->id : row->container_id);
                removed++;
        }
        removed += pool_sweep_leftovers(p->cfg, p->store, false);
        log_info("pool: %zu ready slot(s) adopted, %zu removed", adopted, removed);
        return 0;
}

/* ---- refill ---- */

static int resolve_image(struct pool *p, struct sbx_error *err)
{
        struct docker_image_info info;
        int r;

        if (p->image_id[0])
                return 0;
        r = docker_image_inspect(p->docker, p->cfg->image, &info, err);
        if (r < 0)
                return r;
        sbx_strlcpy(p->image_id, info.id, sizeof(p->image_id));
        return 0;
}

static int refill_one(struct pool *p, struct sbx_error *err)
{
        char slot[20], ws[SBX_PATH_MAX], runner_dir[SBX_PATH_MAX], id[65] = "";
        unsigned char rnd[8];
        struct container_params cp = {0};
        const char *runner_bin;
        uid_t uid;
        int r;

        r = resolve_image(p, err);
        if (r < 0)
                return r;
        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
                return sbx_error_set(err, -EIO, 0, "getrandom failed");
        snprintf(slot, sizeof(slot), "p%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
                 rnd[5], rnd[6], rnd[7]);
        r = store_pool_insert(p->store, slot, sbx_wall_ms());
        if (r < 0)
                return sbx_error_set(err, r, 0, "recording a pool slot: %s", strerror(-r));
        r = sessuid_get_or_assign(p->store, p->cfg, POOL_USER, slot, &uid, err);
        if (r == 0)
                r = container_workspace_ensure(p->cfg, POOL_USER, slot, uid, ws, err);
        if (r < 0)
                goto fail;
        runner_bin = runner_hub_binary(p->runner);
        if (runner_bin && runner_hub_prepare(p->runner, POOL_USER, slot, runner_dir, err) < 0)
                goto fail;
        cp.user = POOL_USER;
        cp.session = slot;
        cp.image = p->image_id;
        cp.network_mode = p->cfg->network_default;
        cp.workspace = ws;
        cp.uid = uid;
        cp.extra_labels = (const char *const *)p->labels;
        /* the proxy variables point at the runner's egress endpoint; egress.sock behind it
         * exists only once a session claimed the slot (gateway_open) */
        cp.egress_proxy = strcmp(cp.network_mode, "none") == 0 && runner_bin;
        cp.runner_binary = runner_bin;
        cp.runner_dir = runner_bin ? runner_dir : NULL;
        r = container_create_started(p->docker, p->cfg, &cp, id, err);
        if (r < 0)
                goto fail;
        if (runner_bin && !runner_hub_wait(p->runner, POOL_USER, slot, RUNNER_WAIT_MS)) {
                r = sbx_error_set(err, -ETIMEDOUT, 0, "the runner of pool slot %s did not connect", slot);
                goto fail;
        }
        (void)store_container_add(p->store, id, POOL_USER, slot, p->image_id, cp.network_mode, sbx_wall_ms());
        r = store_pool_set_ready(p->store, slot, id, p->image_id, cp.network_mode);
        if (r < 0) {
                sbx_error_set(err, r, 0, "marking pool slot %s ready: %s", slot, strerror(-r));
                goto fail;
        }
        log_debug("pool: slot %s ready (container %.12s)", slot, id);
        return 0;
fail:
        slot_discard(p->cfg, p->store, p->docker, p->runner, slot, id);
        return r;
}

static size_t count_slots(struct pool *p, size_t *ret_ready)
{
        _cleanup_free_ struct store_pool_slot *rows = NULL;
        size_t n = 0, ready = 0;

        if (store_pool_list(p->store, &rows, &n) < 0)
                n = 0;
        for (size_t i = 0; i < n; i++)
                if (strcmp(rows[i].state, "ready") == 0)
                        ready++;
        if (ret_ready)
                *ret_ready = ready;
        return n;
}

static void *refill_main(void *ud)
{
        struct pool *p = ud;

        /* low priority: a refill never takes CPU from serving requests */
        (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
        pthread_mutex_lock(&p->lock);
        while (!p->stop) {
                size_t slots, load = p->load ? p->load(p->load_ud) : 0;
                int wait_ms = 1000;

                pthread_mutex_unlock(&p->lock);
                slots = count_slots(p, NULL);
                pthread_mutex_lock(&p->lock);
                if (!p->stop && slots < (size_t)p->cfg->pool_size && slots + load < (size_t)p->cfg->max_sessions) {
                        struct sbx_error e = {0};
                        int64_t t0 = sbx_now_ms();
                        int r;

                        p->creating = true;
                        pthread_mutex_unlock(&p->lock);
                        r = refill_one(p, &e);
                        pthread_mutex_lock(&p->lock);
                        p->creating = false;
                        if (r == 0) {
                                p->created++;
                                p->create_ms_total += sbx_now_ms() - t0;
                                continue;
                        }
                        p->failed++;
                        log_warn("pool: refill failed: %s", e.msg);
                        wait_ms = BACKOFF_MS;
                }
                if (p->kick) {
                        p->kick = false;
                        continue;
                }
                struct timespec until = sbx_deadline_after(CLOCK_REALTIME, wait_ms);
                pthread_cond_timedwait(&p->cond, &p->lock, &until);
        }
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

/* ---- claims ---- */

bool pool_applies(struct pool *p, const char *user, const char *session, const char *network)
{
        _cleanup_close_ int ufd = -1, sfd = -1;
        uid_t uid;

        if (!p || p->cfg->pool_size <= 0 || strcmp(p->cfg->workspace_quota_mode, "loop") == 0 ||
            strcmp(p->cfg->workspace_quota_mode, "project") == 0 || strcmp(network, p->cfg->network_default) != 0 ||
            (strcmp(network, "none") != 0 && p->cfg->ports_per_session > 0) || !runner_hub_binary(p->runner))
                return false;
        bool private_data = true;
        if (store_private_any(p->store, user, session, &private_data) < 0 || private_data)
                return false; /* a private session never takes a container made ahead */
        if (sessuid_lookup(p->store, user, session, &uid) == 0)
                return false; /* it had a workspace once: its files keep their owner */
        ufd = open_ws_dir(p->cfg, user);
        if (ufd < 0)
                return true;
        sfd = openat(ufd, session, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0)
                return errno == ENOENT;
        DIR *d = fdopendir(sfd);
        if (!d)
                return false;
        sfd = -1;
        struct dirent *de;
        bool empty = true;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                        empty = false;
        closedir(d);
        return empty;
}

int pool_claim(struct pool *p, const char *user, const char *session, const char *network, struct pool_claim *ret,
               struct sbx_error *err)
{
        struct store_pool_slot row;
        int r;

        if (!p || p->cfg->pool_size <= 0)
                return -ENOENT;
        for (;;) {
                r = store_pool_claim_begin(p->store, user, session, &row);
                if (r < 0)
                        break;
                /* a live runner vouches for its container; a slot whose runner is gone is dropped */
                if (strcmp(row.network_mode, network) == 0 &&
                    (!runner_hub_binary(p->runner) || runner_hub_wait(p->runner, POOL_USER, row.slot, 0)))
                        break;
                log_ctx(LOG_LEVEL_WARN, user, session, row.container_id, "pool: slot %s is not usable, dropped",
                        row.slot);
                slot_discard(p->cfg, p->store, p->docker, p->runner, row.slot, row.container_id);
        }
        if (r == 0)
                hook("claiming");
        if (r == 0) {
                r = finish_claim(p->cfg, p->store, p->runner, &row, ret->workspace, &ret->uid, err);
                if (r < 0) {
                        /* the slot goes whole (a workspace it already moved stays the session's, and the
                         * cold path hands its files to the session's own uid): never two containers on
                         * one workspace, and nothing left 'claiming' */
                        slot_discard(p->cfg, p->store, p->docker, p->runner, row.slot, row.container_id);
                        r = r == -ENOENT ? -EIO : r;
                }
        }
        pthread_mutex_lock(&p->lock);
        if (r == 0)
                p->claims++;
        else
                p->misses++;
        p->kick = true;
        pthread_cond_signal(&p->cond);
        pthread_mutex_unlock(&p->lock);
        if (r < 0) {
                if (r != -ENOENT)
                        log_ctx(LOG_LEVEL_WARN, user, session, NULL, "pool: claim failed, cold path: %s",
                                err ? err->msg : strerror(-r));
                return r == -ENOENT ? r : -EAGAIN;
        }
        sbx_strlcpy(ret->container_id, row.container_id, sizeof(ret->container_id));
        sbx_strlcpy(ret->image, row.image, sizeof(ret->image));
        sbx_strlcpy(ret->network_mode, row.network_mode, sizeof(ret->network_mode));
        log_ctx(LOG_LEVEL_INFO, user, session, row.container_id, "pool: claimed slot %s", row.slot);
        return 0;
}

void pool_make_room(struct pool *p)
{
        struct store_pool_slot row;
        size_t load;

        if (!p || p->cfg->pool_size <= 0)
                return;
        pthread_mutex_lock(&p->lock);
        load = p->load ? p->load(p->load_ud) : 0;
        pthread_mutex_unlock(&p->lock);
        if (load + count_slots(p, NULL) <= (size_t)p->cfg->max_sessions)
                return;
        if (store_pool_evict_oldest(p->store, &row) < 0)
                return;
        log_info("pool: slot %s removed to make room for a session (max_sessions)", row.slot);
        slot_discard(p->cfg, p->store, p->docker, p->runner, row.slot, row.container_id);
}

/* ---- lifetime and stats ---- */

int pool_new(const struct sbx_config *cfg, struct docker *d, struct store *st, struct runner_hub *h,
             const char *const *extra_labels, struct pool **ret, struct sbx_error *err)
{
        struct pool *p = calloc(1, sizeof(*p));
        size_t k = 0;

        if (!p)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        p->cfg = cfg;
        p->docker = d;
        p->store = st;
        p->runner = h;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->cond, NULL);
        for (size_t i = 0; extra_labels && extra_labels[i] && k < MAX_EXTRA; i++)
                p->labels[k++] = strdup(extra_labels[i]);
        p->labels[k++] = strdup(POOL_LABEL "=1");
        for (size_t i = 0; i < k; i++)
                if (!p->labels[i]) {
                        pool_free(p);
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                }
        *ret = p;
        return 0;
}

void pool_set_load_fn(struct pool *p, pool_load_fn fn, void *userdata)
{
        pthread_mutex_lock(&p->lock);
        p->load = fn;
        p->load_ud = userdata;
        pthread_mutex_unlock(&p->lock);
}

int pool_start(struct pool *p, struct sbx_error *err)
{
        int r;

        if (p->cfg->pool_size <= 0)
                return 0;
        r = pthread_create(&p->thread, NULL, refill_main, p);
        if (r != 0)
                return sbx_error_set(err, -r, 0, "cannot start the pool thread: %s", strerror(r));
        pthread_setname_np(p->thread, "sbx-pool");
        p->started = true;
        return 0;
}

void pool_free(struct pool *p)
{
        if (!p)
                return;
        if (p->started) {
                pthread_mutex_lock(&p->lock);
                p->stop = true;
                pthread_cond_broadcast(&p->cond);
                pthread_mutex_unlock(&p->lock);
                pthread_join(p->thread, NULL);
        }
        for (size_t i = 0; p->labels[i]; i++)
                free(p->labels[i]);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->cond);
        free(p);
}

void pool_stats(struct pool *p, struct pool_stats *ret)
{
        memset(ret, 0, sizeof(*ret));
        if (!p)
                return;
        ret->size = p->cfg->pool_size;
        (void)count_slots(p, &ret->ready);
        pthread_mutex_lock(&p->lock);
        ret->creating = p->creating ? 1 : 0;
        ret->claims = p->claims;
        ret->misses = p->misses;
        ret->created = p->created;
        ret->failed = p->failed;
        ret->refill_per_s = p->create_ms_total > 0 ? (double)p->created * 1000.0 / (double)p->create_ms_total : 0;
        pthread_mutex_unlock(&p->lock);
}
