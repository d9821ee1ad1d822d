/* session_internal.h — what the pieces of the session manager share:
 *   session.c            the table, references, the manager, session_change_locked
 *   session_acquire.c    how a request gets a running session: it waits; one
 *                        step (resume, fail, admit, create) drives the transition
 *   session_state.c      the lifecycle's transitions (the table below) and their check
 *   session_container.c  making a session's container (image, uid, workspace, runner, ports)
 *   session_info.c       snapshots: session_get_info, session_list, session_counts, session_running
 *   session_stop.c       taking containers away: failures, the privacy ratchet, expiry, destroy
 *   session_reconcile.c  adopting containers after a restart
 *   session_share.c      admission against the session caps, and the fair
 *                        share of limits.sessions (which session gives way)
 *   session_pause.c      pause and resume, the idle pause, the paused caps
 *   session_record.c     what a session was made with (labels, resources,
 *                        options) as the store keeps it, for the fronts
 * Private to src/; other modules use sandboxd/session.h.
 *
 * Locks (every piece keeps them):
 *   m->lock   guards the hash table, every session's `refs` and `next`, the
 *             handler list and the resolved image id. Never held across a
 *             Docker call or together with a session lock taken after it
 *             (order: m->lock, then s->lock, and only for short copies).
 *   s->lock   guards every other field of a session. Never held across a
 *             Docker call either: a thread that must create, recreate or
 *             remove the container sets s->transitioning, drops the lock,
 *             does the Docker work, then retakes the lock, publishes the
 *             result and broadcasts s->cond. Others wait on s->cond, so for
 *             one key at most one container is ever being made.
 *
 * The store mirrors every state transition (written under s->lock: a local
 * sqlite write, not a Docker call), so a restart sees the last state.
 *
 * THE LIFECYCLE. A session is in one of five states; `transitioning` says
 * that one thread is between two of them, doing engine work without locks
 * (the others wait on s->cond):
 *
 *                 create              created               pause
 *   STOPPED ─────────────> CREATING ─────────> RUNNING ─────────> PAUSED
 *                            ^  │                 │   <─────────    │
 *                    create  │  │ create_failed   │ fail   resume   │ fail,
 *                            │  v                 v                 │ resume_failed
 *                           ERROR <───────────────┴─────────────────┘
 *
 *   stop, evict, destroy: any state -> STOPPED (destroy: then gone)
 *   adopt: any -> RUNNING | PAUSED, lost: any -> ERROR (a restart's reconciliation)
 *   create also from RUNNING or PAUSED (a container replaced: the ratchet, a failed check)
 *
 * Every change goes through session_change_locked(s, transition, to, ...),
 * which looks the (transition, from, to) up in the table (session_state.c),
 * refuses and logs one no row allows, and otherwise logs it, emits its event
 * and writes the row. The transitions and the functions that perform them:
 *
 *    transition      from                      to        performed by
 *    create          STOPPED ERROR RUNNING     CREATING  session_acquire (RUNNING: a
 *                    PAUSED CREATING                     container to replace, the ratchet's)
 *    created         CREATING                  RUNNING   session_acquire
 *    create_failed   CREATING                  ERROR     session_acquire
 *    fail            RUNNING PAUSED ERROR      ERROR     session_mark_failed (the monitor),
 *                                                        session_acquire (its check)
 *    pause           RUNNING                   PAUSED    session_pause
 *    resume          PAUSED                    RUNNING   session_resume_locked
 *    resume_failed   PAUSED                    ERROR     session_resume_locked
 *    stop            any                       STOPPED   session_hold, session_expire_idle,
 *                                                        session_expire_ttl, session_stop_paused,
 *                                                        session_enforce_network (the ratchet)
 *    evict           any                       STOPPED   session_evict (the fair share)
 *    destroy         any                       STOPPED   session_destroy (then gone)
 *    adopt           any                       RUNNING   session_reconcile
 *                                              PAUSED
 *    lost            any                       ERROR     session_reconcile */
#ifndef SANDBOXD_SESSION_INTERNAL_H
#define SANDBOXD_SESSION_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "sandboxd/config.h"
#include "sandboxd/session.h"

#define N_BUCKETS 1024
#define MAX_HANDLERS 8
#define MAX_EXTRA_LABELS 8

struct session {
        struct session_manager *mgr;
        char user[SESSION_KEY_MAX + 1];
        char id[SESSION_KEY_MAX + 1];
        struct session *next;       /* hash chain (m->lock) */
        struct session *next_by_id; /* chain of by_id, keyed by the id alone (m->lock) */
        int refs;                   /* (m->lock) */

        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool transitioning; /* one thread is changing the container */
        bool destroyed;     /* gone from the table: a waiter must not bring it back */
        int active_ops;     /* references handed out by session_acquire */
        uint64_t uses;      /* session_acquire calls served: the fair share's "not used since" check */
        bool persisted;     /* the store has a row */
        enum session_state state;
        char container_id[65];
        char image[256];
        char network_mode[16];
        char runtime[16]; /* of the current container, as its engine reports it */
        char workspace[SBX_PATH_MAX];
        char last_error[1024];
        char error_cause[128];
        int64_t created_at;
        int64_t last_activity;
        int64_t paused_at;     /* unix ms of the pause while PAUSED, else 0 */
        uint64_t oom_events;   /* of the current container */
        char ratchet_from[65]; /* networked container removed by the privacy ratchet, until its successor exists */
        bool pooled;           /* the current container came from the warm pool */
};

struct handler {
        session_failure_fn fn;
        void *userdata;
};

/* ---- session_worker.c: a background thread and its FIFO of jobs ---- */

struct session_job {
        struct session_job *next;
        /* Runs on the worker's thread and frees the job. stopping: the
         * worker is being stopped; the job lets go of what it holds, and
         * finishes only what must not be left half done. */
        void (*run)(struct session_job *job, bool stopping);
        char key[2 * (SESSION_KEY_MAX + 1)]; /* "" or a key queued once at most */
};

struct session_worker {
        const char *name; /* the thread's */
        size_t max;       /* queued jobs at most; 0: no cap */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct session_job *head, **tail; /* (lock) */
        size_t n;                         /* (lock) */
        bool started, stop;               /* (lock) */
        pthread_t thread;
};

void session_worker_init(struct session_worker *w, const char *name, size_t max);
void session_worker_destroy(struct session_worker *w);
/* Queue job (the thread starts on first use). -ESHUTDOWN stopping or no
 * thread, -EAGAIN the queue is full, -EEXIST a job of the same key is queued:
 * the job stays the caller's. */
int session_worker_post(struct session_worker *w, struct session_job *job);
/* Stop and join the thread, which runs each queued job with stopping set
 * first. Idempotent. */
void session_worker_stop(struct session_worker *w);

struct session_manager {
        const struct sbx_config *cfg;
        struct engine *engine;
        struct store *store;
        struct portpool *ports;
        char *extra_labels[MAX_EXTRA_LABELS + 1];

        pthread_mutex_t lock;
        struct session *buckets[N_BUCKETS];
        struct session *by_id[N_BUCKETS]; /* the same sessions keyed by id alone: session_owner */
        size_t n_sessions;
        struct handler handlers[MAX_HANDLERS];
        size_t n_handlers;
        struct handler notices[MAX_HANDLERS]; /* session_register_teardown_notice */
        size_t n_notices;
        session_network_policy_fn policy;
        void *policy_ud;
        session_runtime_fn runtime_fn; /* (m->lock) NULL: the engine's default runtime */
        void *runtime_ud;
        session_user_cap_fn user_cap_fn; /* (m->lock) NULL: max_sessions_per_user */
        void *user_cap_ud;
        char image_id[80];                       /* cfg->image resolved to its id, "" until first use */
        struct hub *runner;                      /* NULL: containers run without the runner */
        const struct session_pool_ops *pool_ops; /* NULL: no warm pool */
        void *pool;
        struct gateway *gateway; /* NULL: no listeners, every session counts as private */
        session_busy_fn busy_fn; /* (m->lock) NULL: only requests in progress make a session busy */
        void *busy_ud;
        uint64_t evictions;                    /* (m->lock) sessions stopped for the fair share */
        session_pause_block_fn pause_block_fn; /* (m->lock) NULL: only requests in progress block a pause */
        void *pause_block_ud;
        session_user_cap_fn paused_cap_fn; /* (m->lock) NULL: max_paused_sessions_per_user */
        void *paused_cap_ud;
        uint64_t pauses, resumes, pause_evictions; /* (m->lock) */
        /* the background threads (session_worker.c): sbx-resume, resumes for
         * callers that must not block (session_resume_async); sbx-evict, the
         * fair share's evictions off the requester's thread (session_stop.c) */
        struct session_worker resumer, evictor;
        /* session_retire: keys never made again (m->lock), a ring of
         * SESSION_RETIRED_MAX, allocated on first use */
        char (*retired)[2][SESSION_KEY_MAX + 1];
        size_t retired_n, retired_next;
};

/* Counts against the caps: has a container, or is getting one. Under s->lock. */
static inline bool session_live_locked(const struct session *s)
{
        return s->state == SESSION_RUNNING || s->state == SESSION_CREATING || s->state == SESSION_PAUSED ||
               s->transitioning;
}

/* ---- session_state.c ---- */

enum session_transition {
        SESSION_T_CREATE,
        SESSION_T_CREATED,
        SESSION_T_CREATE_FAILED,
        SESSION_T_FAIL,
        SESSION_T_PAUSE,
        SESSION_T_RESUME,
        SESSION_T_RESUME_FAILED,
        SESSION_T_STOP,
        SESSION_T_EVICT,
        SESSION_T_DESTROY,
        SESSION_T_ADOPT,
        SESSION_T_LOST,
};
#define SESSION_T_COUNT 12

struct session_transition_row {
        const char *name;
        unsigned from, to; /* masks of 1 << enum session_state */
        const char *by;    /* the functions that perform it */
};

/* The table's row of t, or NULL. */
const struct session_transition_row *session_transition_row(enum session_transition t);
/* Whether t may take a session from `from` to `to`. */
bool session_transition_allowed(enum session_transition t, enum session_state from, enum session_state to);

/* ---- session.c ---- */

/* Change s's state by transition t (with an optional cause and error text):
 * checked against the table, logged, its event emitted, the row written.
 * Under s->lock. -EPERM (logged, nothing changed) when no row allows it. */
int session_change_locked(struct session *s, enum session_transition t, enum session_state to, const char *cause,
                          const char *error);
/* Take s out of the table (drops the table's reference). Under m->lock. */
void session_unlink_locked(struct session_manager *m, struct session *s);
/* Drop a reference; the last one frees s. Takes m->lock: never call it under m->lock. */
void session_unref(struct session *s);
/* The same under m->lock (and under no session's lock but another's). */
void session_unref_locked(struct session *s);
/* Find the session, or make it (from its store row if there is one) when
 * create is set and the caps admit one more; a new reference in *ret. */
int session_lookup_ref(struct session_manager *m, const char *user, const char *id, bool create, struct session **ret,
                       struct sbx_error *err);
/* References to every session in a malloc'd array; give them back with session_refs_free. */
int session_all_refs(struct session_manager *m, struct session ***ret, size_t *ret_n);
void session_refs_free(struct session **list, size_t n);
/* The network mode the policy requires of the session now ("bridge" | "none"). */
const char *session_required_network(struct session_manager *m, const char *user, const char *id);
/* Tell every failure handler; outside every lock. */
void session_call_handlers(struct session_manager *m, const char *user, const char *id, const char *container_id,
                           const char *cause);
/* Tell every teardown notice, before the container goes; outside every lock. */
void session_call_notices(struct session_manager *m, const char *user, const char *id, const char *container_id,
                          const char *cause);

/* ---- session_share.c ---- */

/* May one more session of `user` become live? Under m->lock; skip (whose
 * lock the caller may hold) is not counted. -EUSERS naming the cap;
 * *ret_full tells that limits.sessions alone refused it. */
int session_admit_locked(struct session_manager *m, const struct session *skip, const char *user, bool *ret_full,
                         struct sbx_error *err);
/* Could the fair share make room for `user` (a user holding at least two
 * more live sessions has one that looks idle)? Under m->lock. */
bool session_share_possible_locked(struct session_manager *m, const char *user);
/* Admit s, which is not live, to become live, making room by the fair
 * share when only limits.sessions refuses it. Called and returns with s->lock
 * held (dropped meanwhile; no other lock held). 1: s became live meanwhile
 * (look again); 0: admitted, s->transitioning set, and *ret_victim NULL
 * or a claimed session (its transitioning set, a reference held) whose
 * container the caller takes away with session_evict before making its own;
 * -EUSERS: refused, err says why. */
int session_admit(struct session_manager *m, struct session *s, struct session **ret_victim, struct sbx_error *err);

/* ---- session_stop.c ---- */

/* Stop v, claimed by session_admit for the fair share: container removed,
 * ports released, STOPPED with cause "evicted", workspace kept; an audit
 * row and the eviction counted. for_user is who it gave way to (audit
 * only). -EUSERS if the container cannot be removed (v is left as it was). */
int session_evict(struct session_manager *m, struct session *v, const char *for_user, struct sbx_error *err);

/* Hand v, claimed by session_admit, to the evictor thread, which stops it
 * as session_evict does while the requester goes on making its own
 * container (for a moment one more than limits.sessions runs). The reference
 * moves to the queue. -errno when it cannot be queued (no thread, stopping):
 * the caller evicts v itself. */
int session_evict_async(struct session_manager *m, struct session *v, const char *for_user);

/* ---- session_pause.c ---- */

/* Thaw s, PAUSED with a container, for a request. Called and returns with
 * s->lock held (dropped meanwhile, inside s's transition). 0: RUNNING
 * again (the caller validates it as any running session); -errno: the
 * container could not be thawed (gone: the caller's checks replace it). */
int session_resume_locked(struct session *s, const char *reason);

/* ---- session_stop.c (for session_pause.c) ---- */

/* Stop a PAUSED s (container removed, ports released, workspace kept)
 * with cause and message. 1 stopped, 0 not (no longer paused, or busy). */
int session_stop_paused(struct session_manager *m, struct session *s, const char *cause, const char *msg);

/* ---- session_container.c ---- */

/* Replace old_id (if any) by a new container of s: runtime, image, uid,
 * workspace, runner, port block and gateway. Inside s's transition, without
 * locks; *network may turn "none" (gVisor). */
int session_make_container(struct session *s, const char *old_id, const char **network, char ret_id[65],
                           char ret_image[256], char ret_workspace[SBX_PATH_MAX], char ret_runtime[16],
                           struct sbx_error *err);

#endif
