/* session.h — the session manager: the `user_id:session_id` key, the session
 * table in memory and in the store, the state machine
 * CREATING → RUNNING → STOPPED / ERROR, activity time, idle expiry, restart
 * reconciliation and session_acquire, which lazily creates (or recreates) the
 * session's hardened container. A RUNNING session may be PAUSED (pause and
 * resume: session_pause.c): its container exists with every process frozen
 * by the engine (the cgroup freezer), its memory kept; any request resumes
 * it first (session_acquire), so callers never see a frozen container.
 *
 * Sessions are reference-counted: session_acquire() hands out a
 * reference that also counts as an operation in progress (idle expiry skips
 * the session while one is held); give it back with session_release(). */
#ifndef SANDBOXD_SESSION_H
#define SANDBOXD_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"
#include "sandboxd/utf8.h"

struct engine;
struct store;
struct portpool;
struct session_manager;
struct session;

#define SESSION_KEY_MAX SBX_ID_MAX

enum session_state {
        SESSION_CREATING,
        SESSION_RUNNING,
        SESSION_STOPPED,
        SESSION_ERROR,
        SESSION_PAUSED, /* the container exists, frozen; counts against the session caps (memory) */
};
#define SESSION_STATE_COUNT 5

const char *session_state_to_string(enum session_state s);
int session_state_from_string(const char *s, enum session_state *ret);

/* session_id_valid(): utf8.h */
/* Both parts valid; otherwise -EINVAL with a message naming the bad part. */
int session_key_check(const char *user, const char *session, struct sbx_error *err);

/* Called after a session's container failed or was replaced, outside every
 * lock. cause is e.g. "exited with code 137", "oom_killed", "stopped",
 * "removed", "recreated", "privacy_ratchet", "idle_expired", "evicted" (the
 * fair share of limits.sessions), "destroyed". */
typedef void (*session_failure_fn)(const char *user, const char *session, const char *container_id, const char *cause,
                                   void *userdata);

/* Returns the network mode a session requires ("bridge" or "none"). The
 * privacy module installs one; the default returns cfg->network_default. */
typedef const char *(*session_network_policy_fn)(const char *user, const char *session, void *userdata);

/* Writes the OCI runtime ("runc" | "runsc") the next container of user gets, or fails
 * (then no container is made) with a message naming why that runtime cannot run. The
 * runtime module installs one; without one the engine's default runtime is used. */
typedef int (*session_runtime_fn)(const char *user, char ret_runtime[16], struct sbx_error *err, void *userdata);

/* Whether the session has work of its own under way besides requests in
 * progress: a running execution (adopted ones included) or an active
 * service. Called with no lock held; the daemon installs one. */
typedef bool (*session_busy_fn)(const char *user, const char *session, void *userdata);

/* extra_labels: NULL-terminated "k=v" labels added to every container (tests
 * use it for their run label); copied. */
int session_manager_new(const struct sbx_config *cfg, struct engine *d, struct store *st, struct portpool *pp,
                        const char *const *extra_labels, struct session_manager **ret, struct sbx_error *err);
/* Frees memory only: containers keep running (a restart adopts them). */
void session_manager_free(struct session_manager *m);

int session_register_failure_handler(struct session_manager *m, session_failure_fn fn, void *userdata);
/* Called before the daemon removes a session's container on purpose
 * (restore, idle expiry, the fair share's eviction, the privacy ratchet, a
 * paused session stopped, destroy), with the cause its failure handlers get
 * once it is gone, outside every lock: what the removal ends can tell why
 * before it sees the end itself (cells: one cause per lost generation). */
int session_register_teardown_notice(struct session_manager *m, session_failure_fn fn, void *userdata);
void session_set_network_policy(struct session_manager *m, session_network_policy_fn fn, void *userdata);
void session_set_runtime_policy(struct session_manager *m, session_runtime_fn fn, void *userdata);
/* Containers made from now on get the runner (when its binary is usable).
 * Set once, before the first container is made. */
struct hub;
void session_set_hub(struct session_manager *m, struct hub *h);
/* The warm pool as sessions see it: a narrow table the daemon fills from
 * pool.h, so the session module never includes the pool (as it reaches the
 * network policy). `pool` is handed back to each call. */
struct session_warm_claim {
        char container_id[65];
        char image[256];
        char workspace[SBX_PATH_MAX];
};
struct session_pool_ops {
        /* Can user:session take a warm container at all (pool_applies)? */
        bool (*applies)(void *pool, const char *user, const char *session, const char *network);
        /* A ready container of image for user:session (pool_claim); -ENOENT: a miss. */
        int (*claim)(void *pool, const char *user, const char *session, const char *network, const char *image,
                     struct session_warm_claim *ret, struct sbx_error *err);
        /* Before a cold creation: give way to sessions (pool_make_room). */
        void (*make_room)(void *pool);
};
/* New sessions may take a warm pool container. Set once, before the first
 * request; ops NULL: no pool. */
void session_set_pool(struct session_manager *m, const struct session_pool_ops *ops, void *pool);
/* The session whose current container is container_id (a claimed pool
 * container still carries the pool's labels). -ENOENT if none. */
int session_find_container(struct session_manager *m, const char *container_id, char ret_user[SESSION_KEY_MAX + 1],
                           char ret_session[SESSION_KEY_MAX + 1]);
/* The network channels of sealed containers (gateway.h): every container
 * made from now on is served by gw, and session_enforce_network applies the
 * ratchet to it. Without one every session is served nothing. Set once,
 * before the first container is made. */
struct gateway;
void session_set_gateway(struct session_manager *m, struct gateway *gw);
/* A user's cap on live sessions (quota.h's max_sessions_per_user with its
 * overrides: the daemon wires quota_limits_get here, so the session module
 * never includes the quotas). Called with the manager's lock held: it may
 * take only a leaf lock. */
typedef int64_t (*session_user_cap_fn)(const char *user, void *userdata);
/* From now on; without one, the config's max_sessions_per_user. userdata
 * must outlive m. */
void session_set_user_cap(struct session_manager *m, session_user_cap_fn fn, void *userdata);
/* The fair share of limits.sessions stops only sessions fn calls idle (and
 * none with a request in progress). Set once, before the first request;
 * without one, only requests in progress make a session busy. */
void session_set_busy_check(struct session_manager *m, session_busy_fn fn, void *userdata);
/* Sessions stopped so far for the fair share of limits.sessions. */
uint64_t session_evictions(struct session_manager *m);
/* The configured network of sessions without private data. */
const char *session_default_network(struct session_manager *m);

/* Make sure (user, session) has a running, healthy container with the
 * network mode it requires, creating or recreating it on the same workspace
 * when needed, and count a user operation (activity time). On success
 * *ret holds a reference: pass it to session_release().
 *
 * A session that is not live is admitted against max_sessions_per_user
 * and limits.sessions (-EUSERS, "busy: ..." naming the cap). When only
 * limits.sessions refuses it, the fair share may make room: the users holding
 * the most live sessions, if that is at least two more than this user
 * holds, give up their least recently active idle session (RUNNING, no
 * request in progress, no running execution, no active service). It is
 * stopped with cause "evicted", its workspace kept; its next request
 * recreates it when there is room (session_share.c). */
int session_acquire(struct session_manager *m, const char *user, const char *session, struct session **ret,
                    struct sbx_error *err);
void session_release(struct session *s);

/* The running container's id, copied under the lock. */
void session_container_id(struct session *s, char ret_id[65]);

struct session_info {
        char user[SESSION_KEY_MAX + 1];
        char session[SESSION_KEY_MAX + 1];
        enum session_state state;
        char container_id[65];
        char image[256];
        char network_mode[16];
        char runtime[16];      /* of the current container ("" unknown: none yet, or the engine's default) */
        char accel[8];         /* runtime microvm: "kvm" or "tcg" (engine_microvm_accel); else "" */
        char rootfs_note[256]; /* runtime microvm: why its VM boots the busybox guest, not the image ("": it does
                                * not; session_get_info only) */
        char workspace[SBX_PATH_MAX];
        uid_t uid;  /* the session's host uid (sessuid.h); 0 while it has none */
        int *ports; /* host ports of the block (malloc'd, free with session_info_done) */
        size_t n_ports;
        char last_error[1024];
        char error_cause[128];
        int64_t created_at;    /* unix ms */
        int64_t last_activity; /* the last use: idle_timeout counts from it, paused or not */
        int64_t paused_at;     /* unix ms of the pause while PAUSED, else 0 */
        bool pooled;           /* the current container came from the warm pool */
};
void session_info_done(struct session_info *info);

/* Snapshot without side effects (no activity, no Docker). -ENOENT if unknown. */
int session_get_info(struct session_manager *m, const char *user, const char *session, struct session_info *ret);
/* ---- what a session was made with (session_record.c): its labels and
 * requested resources (the rules are sessspec.h's; fixed at creation) and its
 * options (image, default env, TTL). ---- */
struct store_session_spec;
struct store_session_options;
/* Record want for user's session id unless one is there: *ret_inserted says
 * which; -EEXIST (err says so) when the recorded one differs. */
int session_spec_record(struct session_manager *m, const char *user, const char *id,
                        const struct store_session_spec *want, bool *ret_inserted, struct sbx_error *err);
/* 0 when an existing session's recorded spec (none counts as empty) equals
 * want, -EEXIST (err says so) when it differs. */
int session_spec_check(struct session_manager *m, const char *user, const char *id,
                       const struct store_session_spec *want, struct sbx_error *err);
/* The recorded spec (free with store_session_spec_done); -ENOENT when none. */
int session_spec_get(struct session_manager *m, const char *user, const char *id, struct store_session_spec *ret);
/* Drop the recorded spec (a session that was never made, or is gone). */
void session_spec_forget(struct session_manager *m, const char *user, const char *id);
/* The recorded options (free with store_session_options_done); -ENOENT when none. */
int session_options_get(struct session_manager *m, const char *user, const char *id, struct store_session_options *ret);
/* Record what create_session makes id with: spec (NULL: none) replacing any
 * left by a call that made nothing, then opt (when it sets anything). On
 * failure nothing is left: -EEXIST, or the store's error; err says which. */
int session_record_made(struct session_manager *m, const char *user, const char *id,
                        const struct store_session_spec *spec, const struct store_session_options *opt,
                        bool *ret_spec_new, struct sbx_error *err);
/* Drop the recorded spec and options (the session was not made). */
void session_record_forget(struct session_manager *m, const char *user, const char *id);
/* Set (ttl_s > 0) or clear (0) the session's TTL, counted from now. */
int session_set_ttl(struct session_manager *m, const char *user, const char *id, int64_t ttl_s, struct sbx_error *err);
/* All known sessions, filtered by user and/or state (NULL = any). */
int session_list(struct session_manager *m, const char *user, const enum session_state *state,
                 struct session_info **ret, size_t *ret_n);
void session_info_list_free(struct session_info *list, size_t n);
/* The one user that has a session called id, into ret_user (size bytes):
 * an indexed lookup, not a scan. -ENOENT if nobody or more than one user has it. */
int session_owner(struct session_manager *m, const char *id, char *ret_user, size_t size);

/* Monitor entry: the container of (user, session) failed with cause. Marks
 * ERROR only if container_id is still the session's RUNNING container (a
 * later, more specific cause — stopped, removed — refines the first one).
 * Never creates anything and never counts as activity. Returns true if the
 * session changed. */
bool session_mark_failed(struct session_manager *m, const char *user, const char *session, const char *container_id,
                         const char *cause);

/* Make sure the session holds no container with more network than it now
 * requires: first the gateway closes a private session's listeners, egress
 * socket and tunnels (gateway_enforce: all a sealed container has); then a
 * networked (bridge) container of a session that requires "none" is
 * removed at once (services cleared with cause privacy_ratchet); the next
 * operation creates its successor. Waits for a creation in progress. */
int session_enforce_network(struct session_manager *m, const char *user, const char *session, struct sbx_error *err);

/* Monitor entry: an OOM kill happened inside the session's container while
 * it kept running. Counted so an execution killed by it can say "oom". */
void session_note_oom(struct session_manager *m, const char *user, const char *session, const char *container_id);
/* OOM kills noted for the session's current container so far. */
uint64_t session_oom_events(struct session *s);

/* (user, session, container_id) of every RUNNING or PAUSED session (a
 * container the monitor watches, a runner the daemon listens for), copied. */
struct session_ref {
        char user[SESSION_KEY_MAX + 1];
        char session[SESSION_KEY_MAX + 1];
        char container_id[65];
};
int session_running(struct session_manager *m, struct session_ref **ret, size_t *ret_n);

/* Stop sessions idle longer than idle_timeout: container removed, ports
 * released, state STOPPED, workspace kept. Returns how many. */
int session_expire_idle(struct session_manager *m, int64_t now_wall_ms);
/* Stop sessions whose TTL (create_session's ttl_seconds, in the store) is
 * over, as idle expiry does, busy or not, and forget the TTL. Returns how
 * many. */
int session_expire_ttl(struct session_manager *m, int64_t now_wall_ms);

/* Remove the container, release the ports, forget the session (store row,
 * services); the workspace is deleted only with purge, and the private
 * marks only once the workspace is verifiably gone: a failed purge returns
 * its error and leaves the marks, so the key stays private. A request
 * waiting on the session meanwhile gets -ENOENT, never a new container. */
int session_destroy(struct session_manager *m, const char *user, const char *session, bool purge,
                    struct sbx_error *err);

/* Reconcile the store with Docker after a (re)start: adopt running
 * containers of this instance that match a session (a paused one: the
 * session is PAUSED, its runner frozen, until a request resumes it), mark sessions whose
 * container is gone ERROR, remove this instance's containers that match no
 * session, remove an adopted container that has a network while its
 * session requires none (a mark recorded just before a crash), release
 * ports held by no container. Never touches containers of
 * other instances or without sandboxd labels. */
struct session_reconcile_report {
        size_t adopted; /* paused ones included */
        size_t paused;  /* adopted frozen: they stay PAUSED */
        size_t marked_error;
        size_t removed_orphans;
        size_t ports_released;
        size_t ratchet_removed; /* networked containers of private sessions */
};
int session_reconcile(struct session_manager *m, struct session_reconcile_report *ret, struct sbx_error *err);

/* Hold user:session for fn: no container is made, recreated or removed for
 * it until fn returns (requests wait, as for any transition). With stop,
 * its container is first removed, its ports released and its workspace
 * image unmounted (STOPPED with cause; the workspace kept), and fn gets ""
 * as the container; without, fn gets the running container's id ("" when
 * it has none). fn runs with no lock held and returns 0 or -errno, which
 * session_hold returns. -ENOENT: no such session. */
typedef int (*session_hold_fn)(void *ud, const char *container_id, struct sbx_error *err);
int session_hold(struct session_manager *m, const char *user, const char *session, bool stop, const char *cause,
                 session_hold_fn fn, void *ud, struct sbx_error *err);

/* Counts by state (indexed by enum session_state). */
void session_counts(struct session_manager *m, size_t counts[SESSION_STATE_COUNT]);

/* ---- pause and resume (session_pause.c) ----
 *
 * A pause freezes the session's container (engine_pause: the cgroup
 * freezer), memory kept, and tells the runner hub its runner is frozen (no
 * heartbeat is expected of it). A resume thaws it; every request resumes a
 * paused session first (session_acquire), so a caller never needs
 * to. A paused session stays live for limits.sessions and
 * max_sessions_per_user (it holds its memory) but runs nothing, so it
 * counts for no execution cap; its ports and channels stay bound. Both
 * survive a daemon restart: the engine's "paused" status is adopted by
 * session_reconcile. Every pause, resume and pause eviction is an audit
 * row, a metric and an event (session.paused, session.resumed). */

/* Whether something runs in the session that a freeze would stop mid-way
 * (an execution, a cell): the daemon installs one; then pause refuses
 * (-EBUSY) and the idle pause waits. Called with no lock held. */
typedef bool (*session_pause_block_fn)(const char *user, const char *session, void *userdata);
void session_set_pause_check(struct session_manager *m, session_pause_block_fn fn, void *userdata);
/* A user's cap on paused sessions (quota.h's max_paused_sessions_per_user
 * with its overrides); without one, the config's. Called with no lock
 * held. userdata must outlive m. */
void session_set_paused_cap(struct session_manager *m, session_user_cap_fn fn, void *userdata);

/* Pause a RUNNING session. reason: "request" (pause_session) or "idle"
 * (pause_after). Idempotent on a PAUSED one (*ret_was_paused true).
 * -ENOENT unknown, -EINVAL not RUNNING, -EBUSY a request or execution in
 * progress, -EOPNOTSUPP the engine cannot pause; err says which. Past
 * limits.paused_sessions the least recently used paused sessions are stopped
 * (session_enforce_paused). ret_was_paused may be NULL. */
int session_pause(struct session_manager *m, const char *user, const char *session, const char *reason,
                  bool *ret_was_paused, struct sbx_error *err);
/* Resume a known session: a PAUSED one is thawed, a stopped one started
 * again (session_acquire without creating a new key). -ENOENT
 * unknown. *ret_was_paused: it was PAUSED (may be NULL). */
int session_resume(struct session_manager *m, const char *user, const char *session, bool *ret_was_paused,
                   struct sbx_error *err);
/* Resume a paused session in the background, for a caller that must not
 * block (the gateway's thread, when a host client reaches a published
 * port): queued (at most SESSION_RESUME_QUEUE keys, duplicates merged) for
 * the thread "sbx-resume", started on first use. Nothing when it is not
 * paused. */
#define SESSION_RESUME_QUEUE 64
void session_resume_async(struct session_manager *m, const char *user, const char *session);
/* Stop (and join) sbx-resume: queued resumes are dropped. Idempotent; the
 * daemon calls it before the runner hub goes, session_manager_free again. */
void session_resume_async_stop(struct session_manager *m);
/* Stop (and join) "sbx-evict", the thread that stops the sessions the fair
 * share of limits.sessions chose, off the requester's thread: the queued ones
 * are finished first. Idempotent; the daemon calls it before the runner hub
 * goes, session_manager_free again. */
void session_evictions_stop(struct session_manager *m);
/* Never make (user, session) again: a later session_acquire of the
 * key, once it is gone from the table, is -ENOENT. For keys that are never
 * reused (an E2B sandbox's id): retired before its destroy, a request that
 * raced the destroy cannot bring the session back. The last
 * SESSION_RETIRED_MAX keys are kept, in memory. */
#define SESSION_RETIRED_MAX 4096
/* While the host's MemAvailable is below this, paused sessions are stopped,
 * least recently used first (session_enforce_paused). */
#define SESSION_PAUSE_MIN_MEM_AVAILABLE (INT64_C(512) << 20)
int session_retire(struct session_manager *m, const char *user, const char *session);
/* Whether the session is PAUSED now (false: unknown). */
bool session_is_paused(struct session_manager *m, const char *user, const char *session);
/* Monitor entry: pause RUNNING sessions unused for pause_after (0: off)
 * with nothing running in them. Returns how many. */
int session_pause_idle(struct session_manager *m, int64_t now_wall_ms);
/* Monitor entry (and after each pause): past limits.paused_sessions (in all),
 * max_paused_sessions_per_user, or while the host's MemAvailable is below
 * SESSION_PAUSE_MIN_MEM_AVAILABLE, stop the least recently used paused sessions
 * (container removed, workspace kept, cause "stopped_while_paused": their
 * interpreter contexts report state_lost stopped_while_paused). Returns
 * how many. */
int session_enforce_paused(struct session_manager *m);
/* Counters since start: pauses, resumes, pause evictions. */
struct session_pause_stats {
        uint64_t pauses, resumes, evictions;
};
void session_pause_stats(struct session_manager *m, struct session_pause_stats *ret);

#endif
