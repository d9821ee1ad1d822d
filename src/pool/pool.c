/* pool.c — the warm pool (pool.h has the model, the claim protocol and the
 * waiting line).
 *
 * Slot ids are 16 random hex digits from getrandom(2) after a "p": valid
 * session ids, so every path helper that takes (user, session) takes
 * ("@pool", slot) too.
 *
 * Locking: p->lock guards the counters, the per-image state (waiting
 * lines, back-off) and the refill thread's state. The store is called
 * under it (its lock is a leaf), and so is the load function (it takes the
 * session manager's lock, never the other way round); Docker and the disk
 * never are. */
#include "sandboxd/pool.h"
#include "pool_internal.h"

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
#include "sandboxd/engine.h"
#include "sandboxd/log.h"
#include "sandboxd/hub.h"
#include "sandboxd/utf8.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"
#include "sandboxd/wsquota.h"

#define MAX_EXTRA 8
#define RUNNER_WAIT_MS 10000
#define BACKOFF_MS 5000

/* A claimant in an image's waiting line (on its own stack). */
struct waiter {
        struct waiter *next;
        const char *user, *session;
        int64_t since; /* sbx_now_ms when it joined the line */
        bool given;    /* the refill marked a slot 'claiming' for it: row */
        struct store_pool_slot row;
        pthread_cond_t cond;
};

struct pool_image {
        char ref[256];    /* the configured name */
        char id[256];     /* resolved at its first refill */
        int size;         /* pool.size, or its pool.images override */
        int64_t retry_at; /* sbx_now_ms: no refill and no waiting before, after a failed refill */
        struct waiter *head, *tail;
        size_t waiting;
};

struct pool {
        const struct sbx_config *cfg;
        struct engine *engine;
        struct store *store;
        struct hub *runner;
        char *labels[MAX_EXTRA + 2]; /* extra labels + sandboxd.pool=1, NULL-terminated */
        struct pool_image images[POOL_MAX_IMAGES];
        size_t n_images;
        int total_size;    /* sum of the images' sizes; 0: the pool is off */
        char ws_quota[64]; /* loop: "loop:<bytes>:<inodes>" every slot's image is made with */

        pthread_mutex_t lock;
        pthread_cond_t cond;
        pthread_t thread;
        bool started, stop, kick;
        pool_load_fn load;
        void *load_ud;
        pool_slot_fn slot_fn; /* with slot_ud and in_slot_fn: p->lock */
        void *slot_ud;
        int in_slot_fn;  /* calls under way; pool_set_slot_fn waits for none */
        size_t rr;       /* round robin of the refill over images */
        size_t in_claim; /* threads inside pool_claim; pool_free waits for none */
        uint64_t claims, misses, created, failed, waited, wait_expired;
        int64_t create_ms_total;
        bool creating;
};

static pool_test_hook_fn test_hook; /* tests only: see pool.h */

void pool_set_test_hook(pool_test_hook_fn fn)
{
        test_hook = fn;
}

void pool_hook(const char *stage)
{
        if (test_hook)
                test_hook(stage);
}


static struct pool_image *image_of(struct pool *p, const char *ref)
{
        for (size_t i = 0; ref && i < p->n_images; i++)
                if (strcmp(p->images[i].ref, ref) == 0)
                        return &p->images[i];
        return NULL;
}

struct slot_counts {
        size_t total; /* every row, of any image and state */
        size_t ready;
        size_t held[POOL_MAX_IMAGES]; /* every slot of the image: a claim given up puts its slot back */
        size_t ready_of[POOL_MAX_IMAGES];
        size_t creating_of[POOL_MAX_IMAGES];
};

static void count_slots(struct pool *p, struct slot_counts *c)
{
        _cleanup_free_ struct store_pool_slot *rows = NULL;
        size_t n = 0;

        memset(c, 0, sizeof(*c));
        if (store_pool_list(p->store, &rows, &n) < 0)
                n = 0;
        c->total = n;
        for (size_t i = 0; i < n; i++) {
                struct pool_image *img = image_of(p, rows[i].image_ref);
                bool ready = strcmp(rows[i].state, "ready") == 0, creating = strcmp(rows[i].state, "creating") == 0;
                c->ready += ready;
                if (!img)
                        continue;
                c->held[img - p->images]++;
                c->ready_of[img - p->images] += ready;
                c->creating_of[img - p->images] += creating;
        }
}

int pool_reconcile(struct pool *p, struct sbx_error *err)
{
        char filter[128];
        const char *filters[] = {POOL_LABEL "=1", filter, NULL};
        _cleanup_free_ struct engine_container_summary *list = NULL;
        _cleanup_free_ struct store_pool_slot *rows = NULL;
        size_t n = 0, n_rows = 0, adopted = 0, removed = 0, adopted_of[POOL_MAX_IMAGES] = {0};
        int r;

        snprintf(filter, sizeof(filter), CONTAINER_LABEL_INSTANCE "=%s", p->cfg->instance);
        r = engine_list(p->engine, filters, true, &list, &n, err);
        if (r < 0)
                return r;
        r = store_pool_list(p->store, &rows, &n_rows);
        if (r < 0)
                return sbx_error_set(err, r, 0, "listing pool slots: %s", strerror(-r));
        for (size_t i = 0; i < n_rows; i++) {
                const struct store_pool_slot *row = &rows[i];
                const struct engine_container_summary *c = NULL;
                struct pool_image *img = image_of(p, row->image_ref);

                for (size_t j = 0; j < n; j++) {
                        const char *slot = engine_label_get(list[j].labels, list[j].n_labels, CONTAINER_LABEL_SESSION);
                        if ((row->container_id[0] && strcmp(list[j].id, row->container_id) == 0) ||
                            (slot && strcmp(slot, row->slot) == 0))
                                c = &list[j];
                }
                /* kept: a ready slot whose container runs, of an image still pooled (up to its size: a pool
                 * made smaller or turned off gives the rest back), made for the quota in force, its
                 * workspace image still mounted (loop) */
                if (strcmp(row->state, "ready") == 0 && c && strcmp(c->state, "running") == 0 &&
                    strcmp(c->id, row->container_id) == 0 && img && adopted_of[img - p->images] < (size_t)img->size &&
                    strcmp(row->ws_quota, p->ws_quota) == 0 &&
                    (!p->ws_quota[0] || wsquota_mounted(p->cfg, POOL_USER, row->slot)) &&
                    hub_adopt(p->runner, POOL_USER, row->slot) == 0) {
                        adopted_of[img - p->images]++;
                        adopted++;
                        continue;
                }
                if (strcmp(row->state, "claiming") == 0)
                        continue; /* pool_recover_claims' */
                pool_slot_discard(p->cfg, p->store, p->engine, p->runner, row->slot, c ? c->id : row->container_id);
                removed++;
        }
        removed += pool_sweep_leftovers(p->cfg, p->store, p->engine, false);
        log_info("pool: %zu ready slot(s) adopted, %zu removed", adopted, removed);
        return 0;
}

/* ---- refill ---- */

static int resolve_image(struct pool *p, struct pool_image *img, struct sbx_error *err)
{
        struct engine_image_info info;
        int r;

        if (img->id[0])
                return 0;
        r = engine_image_inspect(p->engine, img->ref, &info, err);
        if (r < 0)
                return r;
        sbx_strlcpy(img->id, info.id, sizeof(img->id));
        return 0;
}

void pool_set_slot_fn(struct pool *p, pool_slot_fn fn, void *userdata)
{
        if (!p)
                return;
        pthread_mutex_lock(&p->lock);
        while (p->in_slot_fn > 0)
                pthread_cond_wait(&p->cond, &p->lock);
        p->slot_fn = fn;
        p->slot_ud = userdata;
        pthread_mutex_unlock(&p->lock);
}

/* Call the slot hook without the pool's lock. */
static void slot_hook(struct pool *p, const char *slot, const char *container_id, const char *user, const char *session)
{
        pool_slot_fn fn;
        void *ud;

        pthread_mutex_lock(&p->lock);
        fn = p->slot_fn;
        ud = p->slot_ud;
        if (fn)
                p->in_slot_fn++;
        pthread_mutex_unlock(&p->lock);
        if (!fn)
                return;
        fn(ud, slot, container_id, user, session);
        pthread_mutex_lock(&p->lock);
        if (--p->in_slot_fn == 0)
                pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
}

/* One slot of img, made without the pool's lock (img's ref and id are
 * written only here, by the refill thread). */
static int refill_one(struct pool *p, struct pool_image *img, struct sbx_error *err)
{
        char slot[20], ws[SBX_PATH_MAX], runner_dir[SBX_PATH_MAX], id[65] = "";
        unsigned char rnd[8];
        struct container_params cp = {0};
        const char *runner_bin;
        uid_t uid;
        int r;

        r = resolve_image(p, img, err);
        if (r < 0)
                return r;
        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
                return sbx_error_set(err, -EIO, 0, "getrandom failed");
        snprintf(slot, sizeof(slot), "p%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
                 rnd[5], rnd[6], rnd[7]);
        r = store_pool_insert(p->store, slot, img->ref, p->ws_quota, sbx_wall_ms());
        if (r < 0)
                return sbx_error_set(err, r, 0, "recording a pool slot: %s", strerror(-r));
        r = sessuid_get_or_assign(p->store, p->cfg, POOL_USER, slot, &uid, err);
        if (r == 0)
                r = container_workspace_ensure(p->cfg, POOL_USER, slot, uid, ws, err);
        if (r == 0) /* loop: the slot's own image of workspace.quota, mounted on its directory */
                r = wsquota_attach(p->cfg, POOL_USER, slot, err);
        if (r < 0)
                goto fail;
        runner_bin = hub_binary(p->runner);
        if (runner_bin && hub_prepare(p->runner, POOL_USER, slot, runner_dir, err) < 0)
                goto fail;
        cp.user = POOL_USER;
        cp.session = slot;
        cp.image = img->id;
        cp.network_mode = p->cfg->network_default;
        cp.workspace = ws;
        cp.uid = uid;
        cp.extra_labels = (const char *const *)p->labels;
        /* the proxy variables point at the runner's egress endpoint; egress.sock behind it
         * exists only once a session claimed the slot (gateway_open) */
        cp.egress_proxy = strcmp(cp.network_mode, "none") == 0 && runner_bin;
        cp.runner_binary = runner_bin;
        cp.runner_dir = runner_bin ? runner_dir : NULL;
        r = container_create_started(p->engine, p->cfg, &cp, id, err);
        if (r < 0)
                goto fail;
        if (runner_bin && !hub_wait(p->runner, POOL_USER, slot, RUNNER_WAIT_MS)) {
                r = sbx_error_set(err, -ETIMEDOUT, 0, "the runner of pool slot %s did not connect", slot);
                goto fail;
        }
        slot_hook(p, slot, id, NULL, NULL); /* the pre-started interpreter (cells.h), before it is ready */
        (void)store_container_add(p->store, id, POOL_USER, slot, img->id, cp.network_mode, sbx_wall_ms());
        r = store_pool_set_ready(p->store, slot, id, img->id, cp.network_mode);
        if (r < 0) {
                sbx_error_set(err, r, 0, "marking pool slot %s ready: %s", slot, strerror(-r));
                goto fail;
        }
        log_debug("pool: slot %s of %s ready (container %.12s)", slot, img->ref, id);
        return 0;
fail:
        pool_slot_discard(p->cfg, p->store, p->engine, p->runner, slot, id);
        return r;
}

/* Under p->lock: can a refill still bring img a slot? Not while img backs
 * off after a failure, nor when slots and live sessions fill limits.sessions
 * (unless one of img is being made already). */
static bool refill_can_come(struct pool *p, struct pool_image *img)
{
        struct slot_counts c;
        size_t load;

        if (!p->started || p->stop || img->size <= 0 || sbx_now_ms() < img->retry_at)
                return false;
        count_slots(p, &c);
        if (c.creating_of[img - p->images] > 0)
                return true;
        load = p->load ? p->load(p->load_ud) : 0;
        return c.total + load < (size_t)p->cfg->max_sessions;
}

/* Under p->lock: give the ready slots of img to its waiting line, first come first served. */
static void serve_waiters(struct pool *p, struct pool_image *img)
{
        while (img->head) {
                struct waiter *w = img->head;
                if (store_pool_claim_begin(p->store, w->user, w->session, img->ref, p->ws_quota, &w->row) < 0)
                        return;
                img->head = w->next;
                if (!img->head)
                        img->tail = NULL;
                img->waiting--;
                w->given = true;
                pthread_cond_signal(&w->cond);
        }
}

/* Under p->lock: the waiters of img look again at whether a refill can come (and leave if not). */
static void wake_waiters(struct pool_image *img)
{
        for (struct waiter *w = img->head; w; w = w->next)
                pthread_cond_signal(&w->cond);
}

/* Under p->lock: the image the refill makes a slot of next, or NULL. The
 * image of the earliest waiter first (claims are served in arrival order),
 * then the images below their size in turn (round robin). */
static struct pool_image *pick_image(struct pool *p, const struct slot_counts *c, size_t load, int64_t now)
{
        struct pool_image *best = NULL;

        if (c->total + load >= (size_t)p->cfg->max_sessions)
                return NULL;
        for (size_t i = 0; i < p->n_images; i++) {
                struct pool_image *img = &p->images[i];
                /* a waiter with a slot on its way needs no second one */
                if (img->head && now >= img->retry_at && c->creating_of[i] < img->waiting &&
                    (!best || img->head->since < best->head->since))
                        best = img;
        }
        if (best)
                return best;
        for (size_t k = 0; k < p->n_images; k++) {
                size_t i = (p->rr + k) % p->n_images;
                if (c->held[i] < (size_t)p->images[i].size && now >= p->images[i].retry_at) {
                        p->rr = i + 1;
                        return &p->images[i];
                }
        }
        return NULL;
}

static void *refill_main(void *ud)
{
        struct pool *p = ud;

        /* low priority: a refill never takes CPU from serving requests */
        (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
        pthread_mutex_lock(&p->lock);
        while (!p->stop) {
                struct slot_counts c;
                struct pool_image *img;
                int64_t now = sbx_now_ms(), wait_ms = 1000;
                size_t load;

                count_slots(p, &c);
                load = p->load ? p->load(p->load_ud) : 0;
                img = pick_image(p, &c, load, now);
                if (img) {
                        struct sbx_error e = {0};
                        int r;

                        p->creating = true;
                        pthread_mutex_unlock(&p->lock);
                        pool_hook("refill");
                        r = refill_one(p, img, &e);
                        pthread_mutex_lock(&p->lock);
                        p->creating = false;
                        if (r == 0) {
                                p->created++;
                                p->create_ms_total += sbx_now_ms() - now;
                                serve_waiters(p, img);
                                continue;
                        }
                        p->failed++;
                        img->retry_at = sbx_now_ms() + BACKOFF_MS;
                        log_warn("pool: refill of %s failed: %s", img->ref, e.msg);
                        wake_waiters(img); /* no slot comes for them now: the cold path */
                        continue;
                }
                /* nothing to make: waiters for whom none can come leave (limits.sessions reached) */
                for (size_t i = 0; i < p->n_images; i++) {
                        wake_waiters(&p->images[i]);
                        if (p->images[i].retry_at > now && p->images[i].retry_at - now < wait_ms)
                                wait_ms = p->images[i].retry_at - now;
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

        if (!p || p->total_size <= 0 || strcmp(network, p->cfg->network_default) != 0 ||
            (strcmp(network, "none") != 0 && p->cfg->ports_per_session > 0) || !hub_binary(p->runner))
                return false;
        bool private_data = true;
        if (store_private_any(p->store, user, session, &private_data) < 0 || private_data)
                return false; /* a private session never takes a container made ahead */
        if (sessuid_lookup(p->store, user, session, &uid) == 0)
                return false; /* it had a workspace once: its files keep their owner */
        ufd = pool_open_ws_dir(p->cfg, user);
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

/* Under p->lock: may a claimant that found img dry wait in its line? Only
 * while a refill can come, the line is shorter than img's size, and the
 * refill (one container at a time, at its measured pace) can be expected
 * to reach this claimant within pool.wait. */
static bool can_wait(struct pool *p, struct pool_image *img)
{
        if (p->cfg->pool_wait_ms <= 0 || img->waiting >= (size_t)img->size)
                return false;
        if (p->created > 0 &&
            (int64_t)(img->waiting + 1) * (p->create_ms_total / (int64_t)p->created) > p->cfg->pool_wait_ms)
                return false;
        return refill_can_come(p, img);
}

/* Under p->lock: wait in img's line until the refill gives this claimant a
 * slot (marked 'claiming' for it: ret), pool.wait passes, or no refill can
 * come any more. -ENOENT: no slot, the cold path. */
static int wait_in_line(struct pool *p, struct pool_image *img, const char *user, const char *session,
                        struct store_pool_slot *ret)
{
        struct waiter w = {.user = user, .session = session, .since = sbx_now_ms()};
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, p->cfg->pool_wait_ms);
        int64_t end = w.since + p->cfg->pool_wait_ms;

        pthread_cond_init(&w.cond, NULL);
        if (img->tail)
                img->tail->next = &w;
        else
                img->head = &w;
        img->tail = &w;
        img->waiting++;
        p->kick = true;
        pthread_cond_signal(&p->cond); /* the refill looks at the line now */
        while (!w.given && sbx_now_ms() < end && refill_can_come(p, img))
                pthread_cond_timedwait(&w.cond, &p->lock, &until);
        if (!w.given) {
                struct waiter **pp = &img->head, *prev = NULL;
                while (*pp && *pp != &w) {
                        prev = *pp;
                        pp = &(*pp)->next;
                }
                if (*pp) {
                        *pp = w.next;
                        if (img->tail == &w)
                                img->tail = prev;
                        img->waiting--;
                }
                p->wait_expired++;
        } else {
                p->waited++;
        }
        pthread_cond_destroy(&w.cond);
        if (!w.given)
                return -ENOENT;
        *ret = w.row;
        return 0;
}

int pool_claim(struct pool *p, const char *user, const char *session, const char *network, const char *image,
               struct pool_claim *ret, struct sbx_error *err)
{
        struct pool_image *img = p ? image_of(p, image) : NULL;
        struct store_pool_slot row;
        bool waited = false, private_data;
        int r;

        if (!img || img->size <= 0)
                return -ENOENT;
        pthread_mutex_lock(&p->lock);
        if (p->stop) {
                pthread_mutex_unlock(&p->lock);
                return -ENOENT;
        }
        p->in_claim++;
        pthread_mutex_unlock(&p->lock);
        for (;;) {
                pthread_mutex_lock(&p->lock);
                /* arrival order: nobody passes a claimant already in line */
                r = img->head ? -ENOENT : store_pool_claim_begin(p->store, user, session, img->ref, p->ws_quota, &row);
                if (r == -ENOENT && !waited && can_wait(p, img)) {
                        waited = true;
                        r = wait_in_line(p, img, user, session, &row);
                }
                pthread_mutex_unlock(&p->lock);
                if (r < 0)
                        break;
                /* marked private meanwhile (while it waited, say): the slot goes back untouched and the
                 * session takes the cold path, so a private session never takes a container made ahead */
                private_data = true;
                if (store_private_any(p->store, user, session, &private_data) < 0 || private_data) {
                        (void)store_pool_claim_undo(p->store, row.slot);
                        pthread_mutex_lock(&p->lock);
                        serve_waiters(p, img);
                        pthread_mutex_unlock(&p->lock);
                        r = -ENOENT;
                        break;
                }
                /* a live runner vouches for its container; a slot whose runner is gone is dropped */
                if (strcmp(row.network_mode, network) == 0 &&
                    (!hub_binary(p->runner) || hub_wait(p->runner, POOL_USER, row.slot, 0)))
                        break;
                log_ctx(LOG_LEVEL_WARN, user, session, row.container_id, "pool: slot %s is not usable, dropped",
                        row.slot);
                pool_slot_discard(p->cfg, p->store, p->engine, p->runner, row.slot, row.container_id);
        }
        if (r == 0) {
                pool_hook("claiming");
                r = pool_finish_claim(p->cfg, p->store, p->engine, p->runner, &row, ret->workspace, &ret->uid, err);
                if (r < 0) {
                        /* the slot goes whole (a workspace it already moved stays the session's, and the
                         * cold path hands its files to the session's own uid): never two containers on
                         * one workspace, and nothing left 'claiming' */
                        pool_slot_discard(p->cfg, p->store, p->engine, p->runner, row.slot, row.container_id);
                        r = r == -ENOENT ? -EIO : r;
                }
        }
        if (r < 0 && r != -ENOENT)
                log_ctx(LOG_LEVEL_WARN, user, session, NULL, "pool: claim failed, cold path: %s",
                        err ? err->msg : strerror(-r));
        if (r == 0) {
                sbx_strlcpy(ret->container_id, row.container_id, sizeof(ret->container_id));
                sbx_strlcpy(ret->image, row.image, sizeof(ret->image));
                sbx_strlcpy(ret->network_mode, row.network_mode, sizeof(ret->network_mode));
                ret->waited = waited;
                log_ctx(LOG_LEVEL_INFO, user, session, row.container_id, "pool: claimed slot %s of %s%s", row.slot,
                        img->ref, waited ? " after waiting for the refill" : "");
                slot_hook(p, row.slot, row.container_id, user, session);
        }
        pthread_mutex_lock(&p->lock);
        if (r == 0)
                p->claims++;
        else
                p->misses++;
        p->kick = true;
        if (--p->in_claim == 0 && p->stop)
                pthread_cond_broadcast(&p->cond); /* pool_free waits for the claims under way */
        else
                pthread_cond_signal(&p->cond);
        pthread_mutex_unlock(&p->lock); /* p may be gone from here on (pool_free) */
        return r == 0 ? 0 : r == -ENOENT ? r : -EAGAIN;
}

void pool_make_room(struct pool *p)
{
        struct store_pool_slot row;
        struct slot_counts c;
        size_t load;

        if (!p || p->total_size <= 0)
                return;
        pthread_mutex_lock(&p->lock);
        load = p->load ? p->load(p->load_ud) : 0;
        count_slots(p, &c);
        pthread_mutex_unlock(&p->lock);
        if (load + c.total <= (size_t)p->cfg->max_sessions)
                return;
        if (store_pool_evict_oldest(p->store, &row) < 0)
                return;
        log_info("pool: slot %s removed to make room for a session (limits.sessions)", row.slot);
        pool_slot_discard(p->cfg, p->store, p->engine, p->runner, row.slot, row.container_id);
}

/* ---- lifetime and stats ---- */

int pool_new(const struct sbx_config *cfg, struct engine *d, struct store *st, struct hub *h,
             const char *const *extra_labels, struct pool **ret, struct sbx_error *err)
{
        struct pool *p = calloc(1, sizeof(*p));
        char refs[POOL_MAX_IMAGES][256];
        size_t k = 0;

        if (!p)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        p->cfg = cfg;
        p->engine = d;
        p->store = st;
        p->runner = h;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->cond, NULL);
        p->n_images = config_image_list(cfg, refs, POOL_MAX_IMAGES);
        for (size_t i = 0; i < p->n_images; i++) {
                sbx_strlcpy(p->images[i].ref, refs[i], sizeof(p->images[i].ref));
                p->images[i].size = config_pool_size_for(cfg, refs[i]);
                p->total_size += p->images[i].size;
        }
        /* project quotas are refused at start (wsquota_check_config); were they not, a project id is set per
         * directory and could not follow a rename: no pool */
        if (strcmp(cfg->workspace_quota_mode, "project") == 0)
                p->total_size = 0;
        if (strcmp(cfg->workspace_quota_mode, "loop") == 0)
                snprintf(p->ws_quota, sizeof(p->ws_quota), "loop:%lld:%d", (long long)cfg->workspace_quota_bytes,
                         cfg->workspace_inodes);
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

        if (p->total_size <= 0)
                return 0;
        pthread_mutex_lock(&p->lock);
        p->started = true; /* before the thread: claims may wait from now on */
        pthread_mutex_unlock(&p->lock);
        r = pthread_create(&p->thread, NULL, refill_main, p);
        if (r != 0) {
                pthread_mutex_lock(&p->lock);
                p->started = false;
                pthread_mutex_unlock(&p->lock);
                return sbx_error_set(err, -r, 0, "cannot start the pool thread: %s", strerror(r));
        }
        pthread_setname_np(p->thread, "sbx-pool");
        return 0;
}

void pool_free(struct pool *p)
{
        if (!p)
                return;
        pthread_mutex_lock(&p->lock);
        p->stop = true;
        pthread_cond_broadcast(&p->cond);
        for (size_t i = 0; i < p->n_images; i++)
                wake_waiters(&p->images[i]);
        while (p->in_claim > 0) /* a waiter leaves at once (refill_can_come is false now) */
                pthread_cond_wait(&p->cond, &p->lock);
        bool started = p->started;
        pthread_mutex_unlock(&p->lock);
        if (started)
                pthread_join(p->thread, NULL);
        for (size_t i = 0; p->labels[i]; i++)
                free(p->labels[i]);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->cond);
        free(p);
}

void pool_stats(struct pool *p, struct pool_stats *ret)
{
        struct slot_counts c;

        memset(ret, 0, sizeof(*ret));
        if (!p)
                return;
        ret->size = p->total_size;
        pthread_mutex_lock(&p->lock);
        count_slots(p, &c);
        ret->ready = c.ready;
        ret->creating = p->creating ? 1 : 0;
        ret->claims = p->claims;
        ret->misses = p->misses;
        ret->created = p->created;
        ret->failed = p->failed;
        ret->waited = p->waited;
        ret->wait_expired = p->wait_expired;
        ret->refill_per_s = p->create_ms_total > 0 ? (double)p->created * 1000.0 / (double)p->create_ms_total : 0;
        ret->n_images = p->n_images;
        for (size_t i = 0; i < p->n_images; i++) {
                sbx_strlcpy(ret->images[i].image, p->images[i].ref, sizeof(ret->images[i].image));
                ret->images[i].size = p->total_size > 0 ? p->images[i].size : 0;
                ret->images[i].ready = c.ready_of[i];
                ret->images[i].waiting = p->images[i].waiting;
                ret->waiting += p->images[i].waiting;
        }
        pthread_mutex_unlock(&p->lock);
}
