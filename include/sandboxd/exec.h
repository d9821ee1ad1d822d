/* exec.h — the execution engine: commands and code runs in a session's
 * container, sync or async, streamed, with stdin, cancel and timeouts.
 *
 * Every execution gets a UUID and a row in the store. Its stdout and stderr
 * are spooled apart to {data_dir}/executions/<id>.stdout / .stderr, each
 * capped at EXEC_OUTPUT_CAP_BYTES bytes (bytes past the cap are counted, not
 * kept). Results carry a bounded head and tail of each stream and the total
 * byte counts; the rest is readable by offset with exec_read_output().
 *
 * Paths: an execution runs on the session's in-container runner when it
 * is connected (hub.h), else through docker exec; results say which
 * (via) and, on the runner, the tree's usage.
 *
 * Process trees: on the runner each execution lives under its own child
 * subreaper, so timeout and cancel (SIGTERM, exec.kill_grace, then freeze
 * and SIGKILL until none is left) reach every descendant, env -i and setsid
 * ones included. On docker exec its processes carry SBX_EXEC_ID=<uuid> in
 * their environment and every process carrying it is signalled (a process
 * that wipes its environment escapes). Other executions are left alone.
 *
 * Limits: at most limits.exec_global running executions and
 * limits.exec_per_session per session. Past a cap the request is refused at
 * once with -EBUSY and a message naming the cap (it is not queued): an
 * agent learns immediately and can wait for its own executions.
 *
 * Stdin is queued and written only as the process reads it (never with a
 * wait), so stdin never holds up a timeout or cancel; send_stdin past 1 MiB
 * still unread is -EAGAIN.
 *
 * Threads: one worker thread ("sbx-exec") per running execution, bounded by
 * limits.exec_global. The engine's lock guards the registry and the counters;
 * each execution's lock guards its state and pairs with its condition
 * variable for long-polls. No lock is held across a Docker call. */
#ifndef SANDBOXD_EXEC_H
#define SANDBOXD_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct engine;
struct store;
struct session_manager;
struct quota;
struct exec_registry;

enum exec_state {
        EXEC_PENDING,
        EXEC_RUNNING,
        EXEC_COMPLETED, /* ran to its end; exit_code says how it went */
        EXEC_FAILED,    /* could not run to its end: container died, daemon restarted, OOM, Docker error */
        EXEC_CANCELLED,
        EXEC_TIMEOUT,
};
#define EXEC_STATE_COUNT 6

enum exec_cause {
        EXEC_CAUSE_NONE, /* still running */
        EXEC_CAUSE_EXITED,
        EXEC_CAUSE_TIMEOUT,
        EXEC_CAUSE_CANCELLED,
        EXEC_CAUSE_OOM,
        EXEC_CAUSE_CONTAINER_DIED,
        EXEC_CAUSE_DAEMON_RESTARTED,
        EXEC_CAUSE_ERROR, /* Docker refused to run it; see error */
};

#define EXEC_CAUSE_COUNT (EXEC_CAUSE_ERROR + 1)

/* Executions finished since the process started, for the metrics page (which
 * asks, as it asks every owner for its gauges): how many ended in each final
 * state with each cause, and their run times in the buckets of
 * exec_duration_bucket_ms (upper bounds in ms; the last count is the rest).
 * Each execution is counted once, before anyone can see it final. Relaxed
 * atomics: one counter may be read a moment ahead of another. */
#define EXEC_DURATION_BUCKETS 13
extern const int64_t exec_duration_bucket_ms[EXEC_DURATION_BUCKETS];
struct exec_totals {
        uint64_t finished[EXEC_STATE_COUNT][EXEC_CAUSE_COUNT];
        uint64_t bucket[EXEC_DURATION_BUCKETS + 1];
        uint64_t sum_ms;
};
void exec_totals(struct exec_totals *ret);

const char *exec_state_to_string(enum exec_state s);
int exec_state_from_string(const char *s, enum exec_state *ret);
const char *exec_cause_to_string(enum exec_cause c);
bool exec_state_is_final(enum exec_state s);

enum exec_language {
        EXEC_LANG_NONE, /* a shell command */
        EXEC_LANG_PYTHON,
        EXEC_LANG_NODE,
        EXEC_LANG_BASH,
};

enum exec_stream {
        EXEC_STDOUT = 1,
        EXEC_STDERR = 2,
};

/* Called on the execution's worker thread for each chunk as it arrives.
 * Must not block for long, and must not call back into the engine for the
 * same execution with a wait. */
typedef void (*exec_output_fn)(const char *exec_id, enum exec_stream stream, const void *data, size_t len,
                               void *userdata);

#define EXEC_ARGV_MAX 4096     /* = RP_MAX_ARGS */
#define EXEC_TTY_MAX_ROWS 1000 /* = RP_TTY_MAX_ROWS */
#define EXEC_TTY_MAX_COLS 1000
#define EXEC_TTY_TERM "xterm-256color" /* a tty execution's TERM unless its env names one */

struct egress_net;
struct exec_request {
        const char *user;
        const char *session;
        const char *command;         /* shell command (language NONE) */
        const char *const *argv;     /* or a program and its arguments, exec'd as they are (language NONE,
                                        command NULL; NULL-terminated, 1..EXEC_ARGV_MAX) */
        enum exec_language language; /* or code in this language */
        const char *code;
        size_t code_len;        /* 0 = strlen(code) */
        int timeout_s;          /* 0 = exec.timeout_default; capped at exec.timeout_max */
        const char *workdir;    /* NULL = /workspace; relative paths are under /workspace */
        const char *const *env; /* "K=V", NULL-terminated; keys must be [A-Za-z_][A-Za-z0-9_]* */
        const void *stdin_data; /* fed at start (may be NULL) */
        size_t stdin_len;
        bool interactive;  /* keep stdin open for exec_send_stdin() until EOF */
        bool tty;          /* on a pseudo-terminal (runner only; implies interactive); output is stdout */
        int rows, cols;    /* its size; 0 = 24 x 80 */
        const char *actor; /* for the audit log: "token:<id>", "admin", ... */
        /* the execution's network narrowing (egress_rules.h; NULL or not set: the session's
         * egress); it needs the session's runner: no docker exec fallback (-ENOTSUP) */
        const struct egress_net *network;
        exec_output_fn on_output;
        void *userdata;
};

/* A view of one execution. Strings are malloc'd: free with exec_result_done. */
struct exec_result {
        char id[37];
        char user[65];
        char session[65];
        enum exec_state state;
        enum exec_cause cause;
        int exit_code; /* -1 unless it exited */
        char error[512];
        int64_t created_at; /* unix ms */
        int64_t duration_ms;
        uint64_t stdout_bytes; /* total produced, including any past the cap */
        uint64_t stderr_bytes;
        bool truncated; /* head/tail below are not the whole output, or the spool cap dropped bytes */
        /* Output: with offsets (exec_status) the bytes from that offset on, up
         * to max_bytes; without (exec_run) head + "\n...\n" marker-free
         * concatenation is avoided: head and tail are given apart. Raw bytes,
         * not NUL-safe as strings: use the lengths. */
        char *stdout_head, *stdout_tail;
        size_t stdout_head_len, stdout_tail_len;
        char *stderr_head, *stderr_tail;
        size_t stderr_head_len, stderr_tail_len;
        uint64_t stdout_offset; /* where stdout_head starts (0 for a full result) */
        uint64_t stderr_offset;
        char command_preview[161];
        char via[16]; /* "runner" | "docker_exec" | "" (never ran) */
        bool tty;     /* it runs on a pseudo-terminal (its output is the terminal's, as stdout) */
        /* usage of the whole tree, from the rusage of its reaped processes
         * (runner only; -1 when unknown) */
        int64_t cpu_user_ms, cpu_system_ms, max_rss_kb;
        /* provenance */
        char image[256];
        char runtime[32];
        char runner_version[64]; /* "" unless via the runner */
        /* Its end is recorded: the final row and the audit row are written
         * (an execution's state turns final a moment before). Waiters that
         * answer "it ended" wait for this, so what they answer is in the
         * store and the audit log too. Always true for a result read from
         * the store. */
        bool recorded;
};
void exec_result_done(struct exec_result *r);

int exec_registry_new(const struct sbx_config *cfg, struct engine *d, struct store *st, struct session_manager *sm,
                      struct exec_registry **ret, struct sbx_error *err);
/* Per-user limits (max_exec_per_user and its overrides) come from q from
 * now on; without one, from the config. q must outlive the engine. */
void exec_set_quota(struct exec_registry *e, struct quota *q);
/* Run executions on the session's runner when one is connected (else
 * docker exec). Set once, before the first execution. */
struct hub;
void exec_registry_set_runner(struct exec_registry *e, struct hub *h);
/* Mask the values of a session's attached secrets in its executions'
 * output (issue 37, item 4; a second line of defence: the sandbox holds only
 * placeholders). Set once, before the first execution; NULL: no masking. */
struct secrets;
void exec_registry_set_secrets(struct exec_registry *e, const struct secrets *s);
/* After a restart. Executions the session's runner may still run (RUNNING
 * with a runner tag) are registered as live at once — they hold their
 * slots and caps, and exec_status waits on them — and re-adopted by
 * exec_registry_adopt(). The others still PENDING or RUNNING are marked
 * FAILED with cause daemon_restarted (their output so far stays readable).
 * Call it before the runner hub listens (hub_expect). */
int exec_registry_recover(struct exec_registry *e, size_t *ret_failed);
/* Start re-adopting what exec_registry_recover registered (after the
 * sessions are reconciled): each resumes its output from the last byte of
 * its spool and keeps its deadline. One whose container is gone, or whose
 * runner does not come back within 30 s, ends FAILED (daemon_restarted). */
void exec_registry_adopt(struct exec_registry *e);
/* Joins the workers, frees. NULL is fine. Executions on a runner are left
 * running there (their rows stay RUNNING for the next daemon to adopt);
 * those on docker exec are cancelled. */
void exec_registry_free(struct exec_registry *e);

/* Start an execution; writes its id at once. Refusals (bad input, caps,
 * session errors) happen before anything runs and return -errno + err. */
int exec_start(struct exec_registry *e, const struct exec_request *req, char ret_id[37], struct sbx_error *err);

/* Start and wait for the end; *ret is a full result (head and tail). */
int exec_run(struct exec_registry *e, const struct exec_request *req, struct exec_result *ret, struct sbx_error *err);

/* Status of an execution of `user` (other users' ids are -ENOENT). Waits up
 * to wait_ms (capped at 60 s) for it to end or for output past the offsets.
 * With offsets >= 0 the result carries up to max_bytes of each stream from
 * those offsets in *_head (tail empty); with offsets < 0 head and tail. */
int exec_status(struct exec_registry *e, const char *user, const char *id, int64_t stdout_offset, int64_t stderr_offset,
                size_t max_bytes, int wait_ms, struct exec_result *ret, struct sbx_error *err);

/* Executions of user (and session if non-NULL), newest first, whose state
 * is in states_mask (bit 1<<state; 0 = all), at most limit. */
int exec_list(struct exec_registry *e, const char *user, const char *session, unsigned states_mask, size_t limit,
              struct exec_result **ret, size_t *ret_n);
/* The same, only executions that ended within the last within_ms (-1 = any,
 * as exec_list), the most recently ended first. The end is recorded in wall
 * time (rows outlive the daemon and the host's uptime), so the cutoff is
 * taken on the same clock here, never by the caller. */
int exec_list_finished(struct exec_registry *e, const char *user, const char *session, unsigned states_mask,
                       int64_t within_ms, size_t limit, struct exec_result **ret, size_t *ret_n);
void exec_result_list_free(struct exec_result *list, size_t n);

/* Feed stdin of a running interactive execution; eof closes it once the
 * queue is written. Never waits: -EAGAIN when more than 1 MiB sent earlier
 * is still unread by the process. */
int exec_send_stdin(struct exec_registry *e, const char *user, const char *id, const void *data, size_t len, bool eof,
                    struct sbx_error *err);

/* A tty execution's new window size (its programs get SIGWINCH). -EINVAL
 * if it has no terminal or the size is out of range, -EALREADY if it ended. */
int exec_resize(struct exec_registry *e, const char *user, const char *id, int rows, int cols, struct sbx_error *err);

/* Cancel: SIGTERM, grace, SIGKILL of the execution's tree (force: SIGKILL
 * at once). A finished execution gives -EALREADY naming its state. */
int exec_cancel(struct exec_registry *e, const char *user, const char *id, bool force, struct sbx_error *err);

/* Running executions, globally and for one session (for stats and caps). */
size_t exec_running_count(struct exec_registry *e, const char *user, const char *session);
/* Executions the store records for one session, ended or not. */
int exec_count_recorded(struct exec_registry *e, const char *user, const char *session, int64_t *ret);

/* Resolve a workdir lexically under /workspace (NULL or "" is /workspace;
 * relative paths are under it); -EINVAL if it leaves /workspace. */
int exec_workdir_resolve(const char *in, char out[1024], struct sbx_error *err);

/* Run a helper command in a session's container as part of the daemon's own
 * work (services, files): not audited as a user execution, not capped. */
int exec_internal(struct exec_registry *e, const char *container_id, const char *const *argv, const void *stdin_data,
                  size_t stdin_len, int timeout_ms, int *ret_exit, char **ret_out, size_t *ret_out_len,
                  struct sbx_error *err);

/* Constants that were config keys: the protocol's own sizes. */
/* Bytes of the head and of the tail of each stream returned inline. */
#define EXEC_RESULT_HEAD_BYTES (INT64_C(32) << 10)
/* The largest command or code body: a program larger is a file to write. */
#define EXEC_MAX_COMMAND_BYTES (INT64_C(256) << 10)
/* Bytes of stdin per execution; more is a file to write. */
#define EXEC_MAX_STDIN_BYTES (INT64_C(16) << 20)
/* Bytes of each stream spooled per execution; the rest is counted and
 * dropped (max_spool_per_session bounds a session's disk). */
#define EXEC_OUTPUT_CAP_BYTES (INT64_C(64) << 20)

/* ---- tasks (exec_tasks.c): durable handles on one execution each, the MCP
 * tasks extension's. A user's task is another user's -ENOENT. ---- */
struct store_task;
/* An offset past any output: a status read that returns no bytes. */
#define EXEC_OFFSET_NONE (INT64_MAX / 2)
#define EXEC_TASK_TTL_MS (60 * 60 * 1000) /* a task lives this long from its creation */
#define EXEC_TASK_POLL_MS 1000            /* the poll interval it suggests */
#define EXEC_TASKS_PER_USER 64            /* live tasks per user */
#define EXEC_TASKS_MAX 4096               /* live tasks in all */
/* Whether id looks like a task id (32 lowercase hex). */
bool exec_task_id_valid(const char *id);
/* A task on user's execution_id, which must be in session; tool is "exec" or
 * "run_code". -EINVAL, -ENOENT (no such execution there), -EBUSY (the caps). */
int exec_task_create(struct exec_registry *e, const char *user, const char *session, const char *execution_id,
                     const char *tool, struct store_task *ret, struct sbx_error *err);
/* User's live task task_id (-ENOENT: unknown, expired, another user's, or malformed). */
int exec_task_get(struct exec_registry *e, const char *user, const char *task_id, struct store_task *ret,
                  struct sbx_error *err);
/* Cancel task t (read by exec_task_get): -EALREADY when it already was, or its
 * execution has ended; else the cancel is recorded (for good) and the
 * execution cancelled. */
int exec_task_cancel(struct exec_registry *e, const char *user, struct store_task *t, struct sbx_error *err);

#endif
