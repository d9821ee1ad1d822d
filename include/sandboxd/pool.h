/* pool.h — the warm pool (issue 15): containers made ahead so that a new
 * session's first command does not wait for create, start and the
 * sustained-start check.
 *
 * There is one pool per image sessions may use (image and each of images),
 * of pool.size slots or its pool.images override; slots of every image
 * together count against limits.sessions.
 *
 * A pool slot is a container of one image and the default runtime, made through
 * the same hardened spec and start check as every session's
 * (container_create_started), with its runner connected, its own workspace
 * {data_dir}/workspaces/@pool/<slot> bind-mounted as /workspace (in
 * workspace.quota_mode loop: its own image of workspace.quota mounted
 * there) and its own uid from sandbox_uid_range (session_uids row "@pool":<slot>). "@pool" is
 * no valid user id, so no tenant can name it. Its container carries the
 * label sandboxd.pool=1 besides the usual ones (user "@pool", session
 * <slot>). Slots count against limits.sessions: the pool refills only while
 * live sessions + slots stay below it.
 *
 * On Kubernetes a slot is a Pod, and in kubernetes.workspace = pvc also its own
 * PersistentVolumeClaim, named after the slot and made with the Pod.
 *
 * Claim protocol (store: pool_slots, migration 0017):
 *   1. one transaction marks the oldest 'ready' slot 'claiming' for
 *      user:session;
 *   2. where the engine can relabel (Kubernetes: engine_relabel, a merge
 *      patch), the slot's claim and Pod get the session's labels, and the
 *      claim's name goes on the slot's uid row (migration 0033), which step
 *      3 hands to the session: every later Pod of the session mounts it. A
 *      Pod gone, dead or being deleted fails here, before anything moves,
 *      and the session takes the cold path. Then the slot's directory is
 *      renamed to the session's workspace (the
 *      bind mount follows the directory) and its runner directory and
 *      channel are re-keyed to the session (hub_rekey);
 *   3. one transaction deletes the slot row, gives its uid to the session,
 *      records the container for the session and writes the session row
 *      RUNNING on it (store_pool_claim_commit).
 * Steps 2 and 3 are idempotent: after a SIGKILL anywhere, restart recovery
 * (pool_recover_claims, before sessions are loaded; over a node link too)
 * finishes every 'claiming' slot, so a slot is either still the pool's or wholly the
 * session's; 'creating' slots and ready ones whose container is gone are
 * removed with their directory, claim and uid (pool_reconcile); pool
 * containers no slot row names are orphans (session_reconcile, --gc), and
 * so are slot claims (pool_sweep_leftovers); --gc removes the slots of
 * images no longer pooled (pool_gc_unconfigured).
 *
 * Threads: one refill thread "sbx-pool" at nice 10 makes one container at a
 * time. A claim never waits for it: an empty pool is a miss and the caller
 * takes the cold path. The pool's lock guards the counters and the thread's
 * state; the store serialises claims. */
#ifndef SANDBOXD_POOL_H
#define SANDBOXD_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"
#include "sandboxd/container.h"

#define POOL_USER CONTAINER_POOL_USER
#define POOL_LABEL CONTAINER_LABEL_POOL

struct engine;
struct store;
struct hub;
struct pool;

#define POOL_MAX_IMAGES 32 /* images pooled at most (image first, then images in order) */

/* Live sessions right now (the pool keeps slots + sessions <= limits.sessions). */
typedef size_t (*pool_load_fn)(void *userdata);
/* A slot's life, for what runs in it besides the runner (cells.h: the
 * pre-started interpreter). user NULL: the slot's container runs and its
 * runner is connected; the slot becomes ready when this returns (refill
 * thread). user set: user:session claimed it (the claimant's thread). */
typedef void (*pool_slot_fn)(void *userdata, const char *slot, const char *container_id, const char *user,
                             const char *session);

int pool_new(const struct sbx_config *cfg, struct engine *d, struct store *st, struct hub *h,
             const char *const *extra_labels, struct pool **ret, struct sbx_error *err);
void pool_set_load_fn(struct pool *p, pool_load_fn fn, void *userdata);
/* Set (or, fn NULL, clear) the slot hook; waits for a call under way, so
 * after clearing it nothing calls the old one. NULL p is fine. */
void pool_set_slot_fn(struct pool *p, pool_slot_fn fn, void *userdata);
/* Start the refill thread (nothing when pool.size is 0). */
int pool_start(struct pool *p, struct sbx_error *err);
/* Stops the thread; containers stay (a restart adopts them). NULL is fine. */
void pool_free(struct pool *p);

/* Finish every claim a previous daemon left half done. Run before the
 * session manager loads the session rows, with the runner hub already
 * wired to its node link (hub_set_node): step 2's runner directory
 * is re-keyed through the hub, so over a node agent it is the node's
 * directory that is renamed (hub_rekey). A claim that cannot be
 * finished (the session's workspace has files, the node cannot be reached)
 * is given up: its slot is removed. */
int pool_recover_claims(const struct sbx_config *cfg, struct store *st, struct engine *d, struct hub *h,
                        struct sbx_error *err);
/* After a restart: adopt ready slots whose container runs (at most their
 * image's size: a pool turned off or made smaller gives its containers
 * back; only those of the quota in force), remove the rest
 * (container, runner directory, workspace, uid, row), and slot directories
 * and uids no row names. */
int pool_reconcile(struct pool *p, struct sbx_error *err);
/* Slot directories under workspaces/@pool, "@pool" uids and (Kubernetes pvc
 * mode) slot claims of this instance that no slot row names: removed
 * (counted only with dry_run). --gc and pool_reconcile. A slot's row is
 * written before its claim and deleted after it, and a claim in flight has
 * lost its pool label, so a live daemon's slots are never taken. */
size_t pool_sweep_leftovers(const struct sbx_config *cfg, struct store *st, struct engine *d, bool dry_run);
/* --gc: ready slots of an image cfg no longer pools (not image or one of
 * images, pool size 0) are taken from the pool and removed whole (container,
 * runner directory, workspace and, on Kubernetes in pvc mode, the slot's
 * claim, uid, row). Counted only with dry_run. */
size_t pool_gc_unconfigured(const struct sbx_config *cfg, struct store *st, struct engine *d, bool dry_run);

struct pool_claim {
        char container_id[65];
        char image[256];
        char network_mode[16];
        char workspace[SBX_PATH_MAX];
        uid_t uid;
        bool waited; /* it came from the refill after a wait in line */
};
/* Give user:session a ready slot of image (the configured name), waiting in
 * line for the refill at most pool.wait when none is ready. The caller
 * checked that the pool applies (pool_applies). -ENOENT: none (a miss;
 * take the cold path), also when the session was marked private. */
int pool_claim(struct pool *p, const char *user, const char *session, const char *network, const char *image,
               struct pool_claim *ret, struct sbx_error *err);
/* Can user:session take a pool container at all? Not when the pool is off
 * (or workspace.quota_mode is project), not when it is private, already has
 * a uid or a non-empty workspace. */
bool pool_applies(struct pool *p, const char *user, const char *session, const char *network);

/* Before a cold creation: when live sessions (the new one included) and
 * slots together exceed limits.sessions, the oldest ready slot is removed, so
 * the pool gives way to sessions. */
void pool_make_room(struct pool *p);

struct pool_image_stats {
        char image[256];
        int size;
        size_t ready, waiting;
};
struct pool_stats {
        int size;              /* slots of every image together */
        size_t ready;          /* slots ready now */
        size_t waiting;        /* claims waiting in line now */
        uint64_t waited;       /* claims served by the refill after a wait */
        uint64_t wait_expired; /* waits that ended without a slot (cold path) */
        size_t creating;       /* 0 or 1 */
        uint64_t claims;       /* sessions served from the pool */
        uint64_t misses;       /* sessions that found it empty (cold path) */
        uint64_t created;      /* containers made by the refill thread */
        uint64_t failed;       /* refills that failed */
        double refill_per_s;   /* containers per second of refill work (created / time spent creating) */
        size_t n_images;
        struct pool_image_stats images[POOL_MAX_IMAGES];
};
void pool_stats(struct pool *p, struct pool_stats *ret);

/* Tests only: called at each step of a claim ("claiming": the slot is
 * marked, "moved": the workspace renamed (loop: its image and mount given
 * over), "rekeyed": the runner moved, "relabelled": the engine relabelled
 * the slot's Pod and claim), so a test can SIGKILL the daemon
 * there; and by the refill thread before each container it makes
 * ("refill"), so a test can hold the refill back. Process-wide; NULL: none. */
typedef void (*pool_test_hook_fn)(const char *stage);
void pool_set_test_hook(pool_test_hook_fn fn);

/* A warm pool slot starts the default run_cell context (a python kernel)
 * ahead, so a new session's first cell pays no interpreter start-up; tests
 * turn it off through the config field ("none"). */
#define POOL_CELLS_PRESTART "python"

#endif
