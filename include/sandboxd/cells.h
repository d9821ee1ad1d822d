/* cells.h — run_cell's interpreter contexts (issue 25): named, long-lived
 * interpreters in a session's container whose state (globals, imports, open
 * files, working directory) lasts from cell to cell.
 *
 * Shape. A context is a *kernel bridge* run as a runner job (hub.h) in
 * the session's container: under the session's uid, in its own process
 * group under a subreaper shim, inside the container's limits, exactly like
 * an execution. The bridge is a script the daemon carries embedded
 * (harness/kernel_bridge.py, harness/kernel_bridge.js) and hands to the
 * runner as the job's code file, so it always matches the daemon and needs
 * no bind mount and nothing baked into an image beyond the interpreters:
 *   python: the bridge starts the context's Jupyter kernel from its
 *           kernelspec with jupyter_client (python3 from ipykernel: IPython
 *           semantics, display(), %pip, !cmd, the matplotlib inline backend;
 *           any kernelspec an image installs works), and relays the kernel's
 *           iopub messages;
 *   node:   the bridge evaluates cells itself with node's REPL evaluator
 *           (top-level await, const redeclared across cells).
 * The daemon speaks JSON lines with the bridge over the job's stdin and
 * stdout (protocol in harness/kernel_bridge.py). Every line the bridge
 * sends is tenant input: lines are bounded, parsed as JSON, checked field by
 * field, and matched to the cell in flight; a cell's inline outputs are
 * capped at CELLS_OUTPUT_CAP_BYTES, the rest goes by reference: every cell is
 * spooled (cells_spool.h) under its execution_id and read by offset like an
 * execution (cells_execution), and cancel_execution of that id interrupts
 * it (cells_cancel). A warm pool slot may start the default context ahead
 * (cells_pool_slot).
 *
 * Honest state. Every result names the context's generation. A generation
 * ends when its interpreter dies (oom, killed, exited), is killed after a
 * timeout that an interrupt did not end (timeout), its container goes
 * (container_recreated, privacy_ratchet, stopped_while_paused: a paused session stopped past limits.paused_sessions or under memory pressure, evicted: the fair share of
 * limits.sessions), it idles past CELLS_IDLE_TIMEOUT_S
 * (idle_stop), or a restarted daemon cannot take its job back
 * (daemon_restart: kernels are runner jobs, expected and adopted after a
 * restart, and their bridge replays the last cell). The cell during
 * which it died and the next cell (which runs in a new generation) carry
 * state_lost {cause, generation}: a cell never runs silently in an empty
 * namespace. restart_context starts a new generation on request (no
 * state_lost). The contexts and their generations are in the store, so a
 * daemon that restarts knows which ones it lost.
 *
 * Time limits. A cell past its timeout is interrupted (SIGINT to the
 * kernel: KeyboardInterrupt, state kept); if it has not ended
 * CELLS_INTERRUPT_GRACE_MS later its context's whole tree is killed and the
 * result says state_lost timeout.
 *
 * Limits: CELLS_MAX_PER_SESSION contexts per session, CELLS_MAX_GLOBAL in
 * all; one cell at a time per context (another is refused busy).
 *
 * Threads: cells run on the caller's thread; one waiter thread per live
 * generation ("sbx-cellwait") waits on its runner job (acknowledging its
 * output and noticing its end); one reaper thread ("sbx-cellreap") stops
 * idle contexts; one adopter thread ("sbx-celladopt") takes the contexts'
 * jobs back after a restart. The engine's lock guards the context list and counts;
 * each context's lock guards its state and pairs with its condition
 * variable; its rx lock guards the runner handle and is held across the
 * (non-blocking) runner calls on it. The hub thread's output callback
 * takes only a context's lock. Never two context locks at once; the
 * engine lock may be taken before a context lock, never after. */
#ifndef SANDBOXD_CELLS_H
#define SANDBOXD_CELLS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct egress_secret;

struct store;
struct session_manager;
struct hub;
struct cells;

#define CELLS_NAME_MAX 64 /* a context name: 1-64 of [A-Za-z0-9_.-] */
#define CELLS_DEFAULT "default"
#define CELLS_MAX_VARS 500

/* Called on the caller's thread with each output of the cell as it comes
 * (a stream chunk, a display, an error): progress. */
typedef void (*cells_output_fn)(void *userdata, const cJSON *output);
/* Called on the caller's thread once the cell has its execution_id, before
 * it runs (a cancel_execution can name it from then on). */
typedef void (*cells_start_fn)(void *userdata, const char *execution_id);

/* A cell's streams by reference, in this order: stdout, stderr, outputs
 * (every output that is not stream text, one JSON line each). */
#define CELLS_STREAMS 3

struct egress_net;
struct cells_request {
        const char *user;
        const char *session;
        const char *context;  /* NULL: CELLS_DEFAULT */
        const char *language; /* "python" | "node"; NULL: the context's, python for a new one */
        const char *code;
        int timeout_s;          /* 0: exec.timeout_default; capped at exec.timeout_max */
        const char *const *env; /* "K=V", NULL-terminated: the environment of a context it starts */
        /* "K=V", NULL-terminated: the session's environment every execution gets (secrets'
         * placeholders, the CA and package variables; issue 37), set in the interpreter before
         * the cell whenever it differs from what that interpreter was given (a warm pool slot's
         * kernel started before the session had any). NULL: none */
        const char *const *session_env;
        /* the values of the session's attached secrets (egress.h), masked as their placeholders in
         * the cell's outputs and spool; read only during cells_run. NULL: none */
        const struct egress_secret *mask;
        size_t n_mask;
        const char *actor; /* for the audit log: "token:<id>", ... */
        /* the cell's network narrowing (egress_rules.h; NULL or not set: the session's egress):
         * the kernel serving it is narrowed from the cell's start to its end */
        const struct egress_net *network;
        cells_output_fn on_output;
        cells_start_fn on_start;
        void *userdata;
};

/* A recent cell seen as an execution (get_execution on its id): the
 * streams' totals and, for each offset >= 0 asked, up to max bytes from it. */
struct cells_execution_view {
        char id[37];
        char context[CELLS_NAME_MAX + 1];
        char status[16]; /* "running" until it ends, then run_cell's status */
        bool final, truncated, dropped;
        int64_t created_at, duration_ms;
        uint64_t total[CELLS_STREAMS];
        uint64_t offset[CELLS_STREAMS];
        char *data[CELLS_STREAMS]; /* malloc'd (NULL: not asked or nothing there) */
        size_t len[CELLS_STREAMS];
};

int cells_new(const struct sbx_config *cfg, struct store *st, struct session_manager *sm, struct hub *hub,
              struct cells **ret, struct sbx_error *err);
/* Stops the threads. Interpreters are left to their runners (their rows
 * stay live: the next daemon adopts them). NULL is fine. */
void cells_free(struct cells *c);

/* Run one cell; *ret is the result object (see docs/api.md, "Stateful interpreters"). Refusals
 * (bad input, caps, busy, no runner) are -errno with err. */
int cells_run(struct cells *c, const struct cells_request *req, cJSON **ret, struct sbx_error *err);
/* The session's contexts: an array of {context, language, generation,
 * execution_count, state, rss_kb, last_used, pending_state_lost}. */
int cells_list(struct cells *c, const char *user, const char *session, cJSON **ret, struct sbx_error *err);
/* A new generation, now (the old one is killed). */
int cells_restart(struct cells *c, const char *user, const char *session, const char *context, cJSON **ret,
                  struct sbx_error *err);
int cells_delete(struct cells *c, const char *user, const char *session, const char *context, struct sbx_error *err);
/* {context, generation, variables: [{name, type, repr, shape?}]} (at most
 * CELLS_MAX_VARS, reprs short). */
int cells_variables(struct cells *c, const char *user, const char *session, const char *context, cJSON **ret,
                    struct sbx_error *err);
/* The context's last cell: the result run_cell gave, or, for a cell that
 * was running when the daemon restarted, its outputs as the bridge
 * replayed them (waiting up to wait_ms for its end; complete says whether
 * it ended, adopted that it outlived the daemon). -ENOENT when no cell ran
 * since the daemon started. */
int cells_last(struct cells *c, const char *user, const char *session, const char *context, int wait_ms, cJSON **ret,
               struct sbx_error *err);
/* Interrupt the cell running in the context (SIGINT; state kept); the
 * running run_cell then applies the interrupt grace as on a timeout.
 * -EALREADY when no cell runs. */
int cells_interrupt(struct cells *c, const char *user, const char *session, const char *context, struct sbx_error *err);

/* cancel_execution of a cell by its execution_id: interrupted as on a
 * timeout (force: its context is killed at once, state_lost cancelled),
 * then *ret is its result once it ended (waiting up to wait_ms; else
 * {execution_id, status: running, cancelled}). -ENOENT when the id is no
 * cell of the session (it may be an execution), -EALREADY when it ended. */
int cells_cancel(struct cells *c, const char *user, const char *session, const char *execution_id, bool force,
                 int wait_ms, cJSON **ret, struct sbx_error *err);
/* One of the session's recent cells (its last 8; 64 in all) by
 * execution_id: -ENOENT when it is not one. */
int cells_execution(struct cells *c, const char *user, const char *session, const char *execution_id,
                    const int64_t offsets[CELLS_STREAMS], size_t max, struct cells_execution_view *ret,
                    struct sbx_error *err);
void cells_execution_view_done(struct cells_execution_view *v);

/* The warm pool's slot hook (pool.h, pool_slot_fn; userdata the cells).
 * A slot made starts its default python context ahead (POOL_CELLS_PRESTART;
 * an image without a kernel just has none); the session that claims the
 * slot gets it as its default context, generation 1, already running, and
 * its cells say prestarted. A slot discarded takes its kernel with its
 * container. */
void cells_pool_slot(void *userdata, const char *slot, const char *container_id, const char *user, const char *session);

bool cells_name_valid(const char *name);
/* A context of a forked session (snapshot.h): recorded with the parent's
 * name, language, generation and count and no interpreter, so list_contexts
 * shows pending_state_lost and the next cell reports state_lost {cause:
 * "forked"} instead of starting fresh in silence. -EEXIST: it has one. */
int cells_mark_forked(struct cells *c, const char *user, const char *session, const char *name, const char *language,
                      int64_t generation, int64_t execution_count);
/* The runner's tag of the job that runs the context's interpreter (0: none runs): a memory
 * snapshot records it, since the job is in the VM's memory. */
uint32_t cells_runner_tag(struct cells *c, const char *user, const char *session, const char *name);
/* A session made from a memory snapshot (a microVM's fork or restore, snapshot.h): its context
 * name runs on in the job runner_tag that came with the guest's memory, so it is taken back as
 * after a daemon restart (the hub is told to keep the job; the adopter takes it and the next
 * cell runs in the same interpreter, its variables there), instead of state_lost "forked". An
 * existing context of that name (a restore) is replaced once its generation ended with the
 * removed VM (-EBUSY when it is still held after CELLS_KILL_WAIT_MS). */
int cells_mark_carried(struct cells *c, const char *user, const char *session, const char *name, const char *language,
                       int64_t generation, int64_t execution_count, uint32_t runner_tag);
/* A cell (or a variables request) of one of the session's contexts is
 * running: the fair share of limits.sessions does not stop such a session. */
bool cells_session_busy(struct cells *c, const char *user, const char *session);

/* Constants that were config keys. */
/* Interpreter contexts per session and in all: each holds a kernel process
 * and its memory inside the sandbox's limit. */
#define CELLS_MAX_PER_SESSION 4
#define CELLS_MAX_GLOBAL 64
/* A context unused this long is stopped (state_lost idle_stop). */
#define CELLS_IDLE_TIMEOUT_S (2 * 3600)
/* After SIGINT a cell has this long to come back before its interpreter is
 * restarted (state_lost timeout). */
#define CELLS_INTERRUPT_GRACE_MS 3000
/* An interpreter starts within this. A cold python kernel takes about
 * 2.3 CPU seconds (3 s alone on 2 cores), but its container's cgroup shares
 * the CPU with every busy sandbox: beside 100 of them it ran past 65 s. The
 * start line below keeps at most CELLS_STARTS_MAX starts waiting on it. */
#define CELLS_START_TIMEOUT_MS 180000
/* The interpreter start line (startline.h): kernels starting at once, of
 * them one user's while another user waits, and how long a start waits its
 * turn before it is refused busy. A hundred python kernels started at once
 * on 2 cores ran past CELLS_START_TIMEOUT_MS; in line each takes a second or
 * two. A cell's timeout counts from when its kernel is ready, never in line. */
#define CELLS_STARTS_MAX 4
#define CELLS_STARTS_PER_USER 2
#define CELLS_START_QUEUE_MS 300000
/* Output one cell returns inline; the rest by reference. */
#define CELLS_OUTPUT_CAP_BYTES (INT64_C(4) << 20)

#endif
