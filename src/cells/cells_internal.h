/* cells_internal.h — what the files of src/cells share: the context, the
 * engine and their constants. The contract and the thread and lock rules
 * are in include/sandboxd/cells.h; the bridge's half of the protocol is
 * harness/kernel_bridge.py. The module is split by what each part does:
 *   cells.c        the requests (run, last, interrupt, cancel, list,
 *                  restart, delete, variables) and the recent cells;
 *   cells_ctx.c    contexts and their generations (start, send, kill, the
 *                  waiter thread), persistence;
 *   cells_bridge.c the kernel bridge's JSON lines on the hub thread;
 *   cells_fate.c   the session's fate, idle reaping, adoption after a
 *                  restart, the warm pool's pre-started contexts, new/free;
 *   cells_spool.c  output kept by reference.
 *
 * Locks: engine lock (struct cells.lock) > context lock; a context's rx
 * lock is never held with its context lock. The hub thread
 * (cells_on_output) takes only a context lock. */
#ifndef SANDBOXD_CELLS_INTERNAL_H
#define SANDBOXD_CELLS_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "cells_spool.h"
#include "sandboxd/cells.h"
#include "sandboxd/hub.h"

/* The embedded bridges (harness_gen.c). */
extern const char cells_bridge_python[];
extern const char cells_bridge_node[];

#define CELLS_RUNNER_WAIT_MS 10000
#define CELLS_KILL_WAIT_MS 10000
#define CELLS_REAP_EVERY_MS 5000
#define CELLS_LINE_SLACK (64 * 1024) /* a line may exceed the output cap by this much */
#define CELLS_STDERR_LOG_MAX 512     /* bridge stderr bytes logged per chunk (debug) */
#define CELLS_VARS_TIMEOUT_MS 10000
#define CELLS_MAX_ENV 256
#define CELLS_ADOPT_WAIT_MS 30000     /* for a session's runner to come back after a restart */
#define CELLS_LINE_MAX_CAP (32 << 20) /* the longest bridge line (one output) we assemble */
#define CELLS_LINE_KEEP (64 * 1024)   /* a line buffer past this is freed once its line is read */
#define CELLS_OUTPUT_COST 512         /* inline bytes charged per output entry (its tree's nodes) */
#define CELLS_MAX_STUBS 256           /* by-reference entries in one result's outputs */
#define CELLS_STUB_VALUE_MAX 1024     /* MIME values a by-reference entry still carries inline */
#define CELLS_RECENT_MAX 64           /* cells whose spool is kept, in all */
#define CELLS_RECENT_PER_SESSION 8    /* ... and per session */
#define CELLS_CANCEL_SLACK_MS 5000
#define CELLS_REPLAY_GRACE_MS 2000 /* a replayed, ended cell frees its context within this */

_Static_assert(CELL_STREAMS == CELLS_STREAMS, "the streams of cells.h are those of cells_spool.h");

/* A pool slot's default context, started ahead (engine lock). */
struct prestart {
        struct prestart *next;
        char slot[65];
        struct cell_ctx *x;
};

/* A recent cell, by its execution_id: its spool stays readable until it
 * is pushed out (oldest first, per session and in all). Engine lock. */
struct cell_record {
        bool used, final;
        uint64_t seq;
        char id[37], user[65], session[65], context[CELLS_NAME_MAX + 1];
        char status[16];
        uint64_t total[CELL_STREAMS];
        bool truncated, lost;
        int64_t created_at, duration_ms;
        struct cell_spool_kept *kept; /* the ended cell's streams in memory (NULL: running, or files) */
};

enum ctx_phase {
        CTX_IDLE,     /* no generation runs (never started, or it ended) */
        CTX_STARTING, /* the bridge runs, its kernel not ready yet */
        CTX_READY,
};

struct cell_ctx {
        struct cells *c;
        struct cell_ctx *next; /* engine lock */
        int refs;              /* engine lock */
        char user[65], session[65], name[CELLS_NAME_MAX + 1];
        char language[16];
        int64_t created_at;

        pthread_mutex_t rx_lock; /* the runner handle; never with lock held */
        struct hub_exec *rx;

        pthread_mutex_t lock;
        pthread_cond_t cond; /* any change below */
        enum ctx_phase phase;
        int64_t generation; /* the current (or last) generation; 0 before the first */
        int64_t execution_count;
        char container_id[65];
        uint32_t tag;
        uint64_t oom_at_start; /* the session's OOM kills when this generation started */
        pthread_t waiter;
        bool has_waiter;
        bool waiter_done;      /* the current generation's waiter saw its end */
        char kill_cause[32];   /* why we ended it ourselves ("" when we did not) */
        bool kill_silent;      /* ended on request (restart, delete): nothing to report */
        char strong_cause[32]; /* from the session (privacy_ratchet, container_recreated, idle_stop) */
        char bridge_cause[32]; /* the bridge's "dead" report */
        char lost_cause[32];   /* the loss the next cell reports ("" = none) */
        int64_t lost_generation;
        bool lost_reported; /* lost_cause went out (a cell, list_contexts): it no longer changes */
        char start_error[256];
        int kernel_pid;
        int64_t last_used; /* unix ms */
        bool busy;         /* a cell or a variables request holds the context */
        bool interrupt_requested;
        bool cancel_requested, cancel_force; /* cancel_execution of the cell in flight */
        char exec_id[37];                    /* the cell in flight ("" between cells) */
        const struct egress_secret *mask;    /* the cell's values to mask (cells_request), NULL between cells */
        size_t n_mask;
        size_t mask_max;    /* the longest value: a stream's last mask_max-1 bytes wait for the next chunk */
        char *mask_tail[2]; /* stdout, stderr: text held back (a value may go on in the next chunk) */
        size_t mask_tail_len[2];
        char *env_sent; /* the session env last set in this generation's interpreter */
        int64_t env_generation;
        struct cell_spool *spool; /* its output by reference (NULL: none) */
        int stubs;                /* by-reference entries in outputs */
        bool dropped;             /* output not kept anywhere (a line past line_max) */
        /* after a daemon restart (adopted job): lines are ignored until the
         * bridge's replay_begin; the replayed cell holds the context (busy)
         * until it is done or the interpreter ends */
        bool adopting, adopted_cell, adopt_busy;
        bool adopt_pending;   /* the adopter has yet to take its job back */
        bool carried;         /* from a memory snapshot (cells_mark_carried): adopted once its session runs */
        char carry_cause[16]; /* a carried job that cannot be taken back: "forked" or "restored" */
        bool deleted;         /* no longer listed: its row is gone and stays gone (or not listed yet: a pool slot's) */
        int64_t prestarted_generation; /* started ahead in a pool slot (cells_pool_slot) */
        cJSON *last_result;            /* the last cell's result, for last_cell */
        /* the request in flight */
        uint64_t next_id, cur_id;
        cJSON *outputs;
        size_t out_bytes;
        bool truncated, done;
        int64_t done_count;
        char done_status[16];
        cJSON *vars;
        int64_t rss_kb;
        /* line assembly (hub thread) */
        char *line;
        size_t line_len, line_cap;
        bool line_skip;
};

struct cells {
        const struct sbx_config *cfg;
        struct store *store;
        struct session_manager *sessions;
        struct hub *hub;
        pthread_mutex_t lock;
        pthread_cond_t cond; /* the reaper's sleep */
        struct cell_ctx *list;
        size_t n;
        bool stopping;
        pthread_t reaper;
        bool has_reaper;
        pthread_t adopter;
        bool has_adopter;
        char spool_dir[SBX_PATH_MAX + 16];
        bool spool_ok;
        struct prestart *prestarts; /* pool slots' default contexts, not listed yet */
        struct cell_record recent[CELLS_RECENT_MAX];
        uint64_t recent_seq;
};

struct waiter_arg {
        struct cell_ctx *x;
        struct hub_exec *rx;
        int64_t generation;
};

void cells_cond_init_mono(pthread_cond_t *cv);
int cells_ctx_acquire(struct cell_ctx *x, struct sbx_error *err);
struct cell_ctx *cells_ctx_alloc(struct cells *c, const char *user, const char *session, const char *name,
                                 const char *language);
int cells_ctx_ensure(struct cell_ctx *x, const char *const *env, cJSON **ret_lost, struct sbx_error *err);
int cells_ctx_get(struct cells *c, const char *user, const char *session, const char *name, const char *language,
                  bool create, struct cell_ctx **ret, struct sbx_error *err);
void cells_ctx_join_waiter(struct cell_ctx *x);
void cells_ctx_kill(struct cell_ctx *x, const char *cause, bool silent);
void cells_ctx_persist_locked(struct cell_ctx *x, bool live);
void cells_ctx_release(struct cell_ctx *x);
int cells_ctx_send(struct cell_ctx *x, const cJSON *msg, int64_t deadline);
int cells_ctx_signal(struct cell_ctx *x, int sig);
int cells_ctx_start(struct cell_ctx *x, const char *container_id, const char *const *env, struct sbx_error *err);
void cells_ctx_unlist(struct cells *c, struct cell_ctx *x);
void cells_ctx_unref(struct cell_ctx *x);
struct cell_ctx *cells_find_locked(struct cells *c, const char *user, const char *session, const char *name);
void cells_records_drop(struct cells *c, const char *user, const char *session, const char *context);
const char *cells_str_of(const cJSON *o, const char *key);
bool cells_wait_until(pthread_cond_t *cv, pthread_mutex_t *m, int64_t deadline);
void *cells_waiter_main(void *p);
void cells_on_output(void *ud, int stream, const void *data, size_t len);
cJSON *cells_lost_report_locked(struct cell_ctx *x);
/* The stream text held back for a value split across chunks, out now
 * (masked) as the cell's output: the cell ended, or other output follows. */
void cells_mask_flush_locked(struct cell_ctx *x);

#endif
