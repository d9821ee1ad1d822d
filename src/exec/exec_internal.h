/* exec_internal.h — between the execution engine's files. Not a public
 * header (see sandboxd/exec.h for the contract).
 *
 *   exec.c          the engine: public API, lifecycle, an execution's
 *                   life (build, refs, persist, state), stdin, cancel
 *   exec_admit.c    admission: caps, per-user quotas, fair share, the
 *                   session's spool quota; registers an admitted execution
 *   exec_worker.c   the worker thread: an execution's run as named steps,
 *                   with the TERM -> KILL escalation as a small state
 *   exec_adopt.c    after a restart: executions the runner still runs
 *   exec_results.c  reading results: live or stored, spool files, lists
 *   exec_tasks.c    tasks: durable handles on one execution each (MCP tasks)
 *
 * Locks (the same in every file):
 *   e->lock   the registry of live executions (e->live), every execution's
 *             refs, and the worker count (paired with e->idle for shutdown).
 *   x->lock   an execution's state, counters and spool offsets; paired with
 *             x->cond, broadcast on every state change and output chunk so
 *             long-polls wake up.
 *   x->stdin_lock  guards the stdin queue (stdin_data/off/len/eof), the
 *             writes to the exec's stdin and the stream's teardown. Stdin
 *             is never written with a wait: the worker pumps the queue
 *             while it reads output, so a process that does not read its
 *             stdin never holds up its timeout, cancel or output.
 * Order: e->lock before x->lock; never a Docker call under either.
 *
 * A live execution stays in e->live until its worker has persisted the
 * final state; after that every read comes from the store and the spool. */
#ifndef SANDBOXD_EXEC_INTERNAL_H
#define SANDBOXD_EXEC_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/common.h"
#include "sandboxd/egress.h"
#include "sandboxd/exec.h"
#include "sandboxd/reqctx.h"
#include "sandboxd/hub.h"

struct engine_stream;
struct session;

struct execution {
        /* the session's attached secrets whose values are masked in the output
         * (exec_worker.c), read at the start; the last mask_max-1 bytes of each
         * stream are held back until more come or it ends */
        struct egress_secret *mask;
        size_t n_mask, mask_max;
        char *mask_tail[2];
        size_t mask_tail_len[2];
        pthread_mutex_t mask_lock; /* the tails: output (a runner's thread) and the end (the worker) */
        struct exec_registry *e;
        int refs;               /* e->lock */
        struct execution *next; /* e->live (e->lock) */

        /* fixed at creation */
        char id[37];
        char user[65];
        char session[65];
        char kind[16];
        char actor[96];
        char preview[161];
        char sha[65];
        char trace_id[REQCTX_ID_MAX + 1]; /* of the request that started it (reqctx.h); "" adopted */
        char workdir[1024];
        char **argv;
        char **env;
        void *stdin_data; /* the stdin queue: [stdin_off, stdin_len) not yet written (stdin_lock) */
        size_t stdin_len;
        size_t stdin_off;
        bool stdin_eof; /* close stdin once the queue is written (stdin_lock) */
        void *code;
        size_t code_len;
        char code_path[96];
        bool interactive;
        int timeout_s;
        int64_t created_at;
        exec_output_fn on_output;
        void *userdata;
        char spool[2][SBX_PATH_MAX + 64];

        pthread_mutex_t lock;
        pthread_cond_t cond;
        enum exec_state state;
        enum exec_cause cause;
        int exit_code;
        int start_error; /* -errno when it never ran */
        char error[512];
        char container_id[65];
        int64_t duration_ms;
        uint64_t total[2]; /* [0] stdout, [1] stderr */
        uint64_t spooled[2];
        uint64_t spool_budget; /* both streams together: its share of the session's spool quota */
        bool cancel;
        bool force;
        bool finished; /* final state persisted and audited */
        char via[16];
        bool have_usage;
        struct runner_exit usage;
        char image[256];
        char runtime[32];
        char runner_version[64];
        /* durable (runner) executions */
        uint32_t runner_tag;      /* 0 until the runner has it */
        int64_t started_wall;     /* unix ms it began running */
        int64_t deadline_wall;    /* unix ms of its timeout */
        bool adopting;            /* registered from the store after a restart */
        bool has_worker;          /* e->lock */
        bool detach;              /* the engine stops: leave it to the runner and the next daemon */
        struct hub_exec *rx_done; /* ended on the runner: forgotten there once the end is persisted */
        bool tty;
        int rows, cols;
        struct egress_net *network; /* its narrowing (NULL: none), for the runner's table */

        pthread_mutex_t stdin_lock;
        struct engine_stream *stream;
        struct hub_exec *rx; /* set instead of stream when the runner runs it (stdin_lock) */
        bool stdin_closed;
        uint64_t stdin_sent;
        int spool_fd[2];
};

struct exec_registry {
        const struct sbx_config *cfg;
        struct engine *engine;
        struct store *store;
        struct session_manager *sessions;
        struct quota *quota; /* per-user limits; NULL: the config defaults */
        struct hub *runner;
        const struct secrets *secrets; /* values masked in output (exec_registry_set_secrets) */
        char spool_dir[SBX_PATH_MAX + 16];

        pthread_mutex_t lock;
        pthread_cond_t idle;
        struct execution *live;
        size_t workers;
        bool closing;
};

/* ---- exec.c: an execution's life ---- */

/* A new execution with one reference (the caller's), its locks set up and
 * its spool paths named after id; everything else zero. NULL: no memory. */
struct execution *execution_new(struct exec_registry *e, const char *id);
void execution_unref(struct execution *x); /* NULL is fine; takes e->lock */
void execution_unrefp(struct execution **x);
/* The live execution id (of user, unless NULL), with a reference; NULL if
 * it is not live. Takes e->lock. */
struct execution *execution_find_ref(struct exec_registry *e, const char *user, const char *id);
/* Write the execution's row as it stands now. Takes x->lock. */
void execution_persist(struct execution *x);
/* Set the state (counted in the metrics when final) and wake waiters. */
void execution_set_state(struct execution *x, enum exec_state st, enum exec_cause cause);
enum exec_cause exec_cause_from_string(const char *s);

/* ---- exec_admit.c ---- */

/* Admit x (built, not registered) and register it as live with the
 * registry's and the worker's references, e->workers counted: or refuse it
 * with the cap or quota it would pass. Takes e->lock; store and file I/O
 * outside it. */
int exec_admit(struct exec_registry *e, struct execution *x, struct sbx_error *err);
/* Undo exec_admit's registration (its worker could not start). */
void exec_admit_undo(struct exec_registry *e, struct execution *x);

/* ---- exec_worker.c ---- */

/* Start x's worker thread, detached; x->refs and e->workers already count
 * it. The thread runs run() or, for an adopted execution, exec_adopt_run(). */
int exec_worker_start(struct execution *x);
void exec_worker_done(struct execution *x);
/* The runner's output callback (userdata: the execution). */
void exec_on_runner_output(void *ud, int stream, const void *data, size_t len);
/* Wait for an execution on the runner (new, or adopted after a restart;
 * start and deadline are monotonic ms): stdin, deadline and cancel, then
 * how it ended (s may be NULL: no OOM count from before). -ESHUTDOWN when
 * the engine stops first: the execution is left to the runner, its row
 * RUNNING for the next daemon. */
int exec_runner_loop(struct execution *x, struct session *s, uint64_t oom_before, struct hub_exec *rx, int64_t start,
                     int64_t deadline, struct sbx_error *err);
/* Whether the engine stops, leaving the execution to its runner. */
bool exec_read_detach(struct execution *x);
/* Write what the process takes of the stdin queue now, never waiting; close
 * stdin once the queue is written and EOF was asked for. Under stdin_lock.
 * True while bytes are still waiting for the process to read them. */
bool exec_stdin_pump_locked(struct execution *x);
/* The end: audit row, the runner may forget it, waiters of exec_run wake. */
void exec_audit(struct execution *x);
void exec_forget_on_runner(struct execution *x);
void exec_mark_finished(struct execution *x);

/* ---- exec_adopt.c ---- */

/* The worker of an execution adopted after a restart. */
void exec_adopt_run(struct execution *x);

/* The execution.finished event of x, now final (events.h); under x->lock. In exec_results.c. */
void exec_note_final(struct execution *x);
/* Count a final state in exec_totals (exec.h). In exec_results.c. */
void exec_count_final(enum exec_state st, enum exec_cause cause, int64_t duration_ms);

#endif
