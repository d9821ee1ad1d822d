/* exec_worker.c — an execution's worker thread: from a built, admitted
 * execution to its final state, persisted and audited.
 *
 * run() is a sequence of named steps: open (the session's container, then
 * the runner, else a docker exec created in it), attach, running, pump
 * (output, stdin, deadline and cancel), reap (stragglers, exit code, was it
 * the container) and classify; then one of three ends: finished, failed to
 * run, or detached (the engine stops while the runner runs it: the next
 * daemon adopts it, exec_adopt.c). A cancel or a timeout walks the small
 * kill escalation KILL_NONE -> KILL_TERM -> KILL_HARD -> KILL_GAVE_UP the
 * same way on both paths; only how the signals are delivered differs (the
 * runner signals its process group; over docker exec, kill_script finds
 * the tree by its SBX_EXEC_ID marker).
 *
 * Locks: as in exec_internal.h. The worker holds no lock across a Docker
 * or runner call; x->lock for state and counters, x->stdin_lock for the
 * stdin queue and the stream or runner handle it is written to. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "exec_internal.h"
#include "sandboxd/audit.h"
#include "sandboxd/engine.h"
#include "sandboxd/log.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/utf8.h"

#define SLICE_MS 100
#define KILL_ROUNDS 10
#define READ_CHUNK (64 * 1024)
#define KILL_EXEC_MS 5000           /* one sweep of kill_script */
#define KILL_GIVE_UP_MS 5000        /* after SIGKILL is due: stop waiting for the end */
#define KILL_RESWEEP_MS 200         /* docker exec: SIGKILL again for processes started meanwhile */
#define RUNNER_CONNECT_WAIT_MS 3000 /* a new container's runner connects within milliseconds */

/* Signals every process whose environment carries SBX_EXEC_ID=$1 with $2,
 * prints how many. The tree is frozen (SIGSTOP) before the signal and thawed
 * after, so no process can react in between: a shell whose child dies first
 * would otherwise run its next command before its own signal reaches it.
 * The id is an argument, never part of the script text. */
static const char kill_script[] =
        "pids=''; for d in /proc/[0-9]*; do p=${d#/proc/}; [ \"$p\" = \"$$\" ] && continue; "
        "if tr '\\0' '\\n' 2>/dev/null < \"$d/environ\" | grep -qxF \"SBX_EXEC_ID=$1\"; then pids=\"$pids $p\"; fi; "
        "done; [ -z \"$pids\" ] && { echo 0; exit 0; }; "
        "kill -STOP $pids 2>/dev/null; kill -\"$2\" $pids 2>/dev/null; kill -CONT $pids 2>/dev/null; "
        "set -- $pids; echo $#";

/* Writes stdin to the file $1 (a path the daemon chose). */
static const char write_script[] = "umask 077; cat > \"$1\"";

static void on_raw_chunk(struct execution *x, int k, const char *buf, size_t n);

/* The output with each attached value replaced by its placeholder, across
 * chunks: (held tail + buf), every whole value masked, the last mask_max-1
 * bytes held back unless final (a value may continue in the next chunk). */
static void on_chunk_masked(struct execution *x, int k, const char *buf, size_t n, bool final)
{
        size_t total = x->mask_tail_len[k] + n, cur = 0, keep;
        char *w = malloc(total ? total : 1);

        if (!w) {
                /* no memory to mask: drop the chunk rather than pass a value */
                return;
        }
        if (x->mask_tail_len[k])
                memcpy(w, x->mask_tail[k], x->mask_tail_len[k]);
        if (n)
                memcpy(w + x->mask_tail_len[k], buf, n);
        x->mask_tail_len[k] = 0;
        for (;;) {
                size_t bi = 0;
                const char *best = egress_secret_find(x->mask, x->n_mask, w + cur, total - cur, &bi);
                if (!best)
                        break;
                if (best > w + cur)
                        on_raw_chunk(x, k, w + cur, (size_t)(best - (w + cur)));
                on_raw_chunk(x, k, x->mask[bi].placeholder, strlen(x->mask[bi].placeholder));
                cur = (size_t)(best - w) + x->mask[bi].value_len;
        }
        keep = final ? 0 : x->mask_max - 1;
        if (keep > total - cur)
                keep = total - cur;
        if (total - cur > keep)
                on_raw_chunk(x, k, w + cur, total - cur - keep);
        if (keep) {
                if (!x->mask_tail[k])
                        x->mask_tail[k] = malloc(x->mask_max);
                if (x->mask_tail[k]) {
                        memcpy(x->mask_tail[k], w + total - keep, keep);
                        x->mask_tail_len[k] = keep;
                }
        }
        explicit_bzero(w, total);
        free(w);
}

static void on_chunk(struct execution *x, int k, const char *buf, size_t n)
{
        if (x->mask_max == 0) {
                on_raw_chunk(x, k, buf, n);
                return;
        }
        pthread_mutex_lock(&x->mask_lock);
        on_chunk_masked(x, k, buf, n, false);
        pthread_mutex_unlock(&x->mask_lock);
}

/* The held-back tails, at the end of the output. */
static void mask_flush(struct execution *x)
{
        if (x->mask_max == 0)
                return;
        pthread_mutex_lock(&x->mask_lock);
        for (int k = 0; k < 2; k++)
                if (x->mask_tail_len[k])
                        on_chunk_masked(x, k, NULL, 0, true);
        pthread_mutex_unlock(&x->mask_lock);
}

static void on_raw_chunk(struct execution *x, int k, const char *buf, size_t n)
{
        uint64_t cap = (uint64_t)x->e->cfg->exec_output_cap_bytes;

        pthread_mutex_lock(&x->lock);
        x->total[k] += n;
        if (x->spool_budget < x->spooled[0] + x->spooled[1] + cap - x->spooled[k]) /* the session's quota is nearer */
                cap = x->spooled[k] + (x->spool_budget > x->spooled[0] + x->spooled[1]
                                               ? x->spool_budget - x->spooled[0] - x->spooled[1]
                                               : 0);
        if (x->spooled[k] < cap && x->spool_fd[k] >= 0) {
                size_t keep = cap - x->spooled[k] < n ? (size_t)(cap - x->spooled[k]) : n;
                ssize_t w = pwrite(x->spool_fd[k], buf, keep, (off_t)x->spooled[k]);
                if (w > 0)
                        x->spooled[k] += (uint64_t)w;
        }
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        if (x->on_output)
                x->on_output(x->id, k == 0 ? EXEC_STDOUT : EXEC_STDERR, buf, n, x->userdata);
}

/* Signal the execution's whole tree; returns how many were signalled. */
static int kill_tree(struct execution *x, const char *sig)
{
        const char *argv[] = {"sh", "-c", kill_script, "sbx-kill", x->id, sig, NULL};
        _cleanup_free_ char *out = NULL;
        int code = -1, r;

        r = exec_internal(x->e, x->container_id, argv, NULL, 0, KILL_EXEC_MS, &code, &out, NULL, NULL);
        if (r < 0 || code != 0)
                return r < 0 ? r : -EIO;
        return out ? atoi(out) : 0;
}

static void kill_until_gone(struct execution *x)
{
        int64_t until = sbx_now_ms() + KILL_EXEC_MS;

        for (int i = 0; i < KILL_ROUNDS && sbx_now_ms() < until; i++)
                if (kill_tree(x, "KILL") <= 0)
                        return;
}

bool exec_stdin_pump_locked(struct execution *x)
{
        bool pending = false;

        while ((x->stream || x->rx) && !x->stdin_closed && x->stdin_off < x->stdin_len) {
                const char *p = (char *)x->stdin_data + x->stdin_off;
                size_t left = x->stdin_len - x->stdin_off;
                ssize_t n = x->rx ? hub_exec_write_stdin(x->rx, p, left)
                                  : engine_stream_write_some(x->e->engine, x->stream, p, left);
                if (n == 0) {
                        pending = true;
                        break;
                }
                if (n < 0)
                        x->stdin_closed = true; /* it closed its stdin or is gone: the rest can never be read */
                else
                        x->stdin_off += (size_t)n;
        }
        if (!pending) {
                free(x->stdin_data);
                x->stdin_data = NULL;
                x->stdin_off = x->stdin_len = 0;
        }
        if (!pending && x->stdin_eof && (x->stream || x->rx) && !x->stdin_closed) {
                if (x->rx)
                        (void)hub_exec_close_stdin(x->rx);
                else
                        (void)engine_stream_close_write(x->e->engine, x->stream);
                x->stdin_closed = true;
        }
        return pending;
}

static bool stdin_pump(struct execution *x)
{
        pthread_mutex_lock(&x->stdin_lock);
        bool pending = exec_stdin_pump_locked(x);
        pthread_mutex_unlock(&x->stdin_lock);
        return pending;
}

/* Open both spool files (O_CLOEXEC, 0600, truncated). */
static int open_spools(struct execution *x)
{
        for (int k = 0; k < 2; k++) {
                if (x->spool_fd[k] >= 0)
                        continue; /* opened by a runner attempt that fell back */
                x->spool_fd[k] = open(x->spool[k], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (x->spool_fd[k] < 0)
                        return -errno;
        }
        return 0;
}

void exec_audit(struct execution *x)
{
        cJSON *d = cJSON_CreateObject();
        _cleanup_free_ char *preview = utf8_sanitize(x->preview, strlen(x->preview));
        char *json;

        pthread_mutex_lock(&x->lock);
        cJSON_AddStringToObject(d, "execution_id", x->id);
        cJSON_AddStringToObject(d, "kind", x->kind);
        cJSON_AddStringToObject(d, "preview", preview ? preview : "");
        cJSON_AddStringToObject(d, "sha256", x->sha);
        cJSON_AddStringToObject(d, "state", exec_state_to_string(x->state));
        cJSON_AddStringToObject(d, "cause", exec_cause_to_string(x->cause));
        if (x->exit_code >= 0)
                cJSON_AddNumberToObject(d, "exit_code", x->exit_code);
        else
                cJSON_AddNullToObject(d, "exit_code");
        cJSON_AddNumberToObject(d, "duration_ms", (double)x->duration_ms);
        cJSON_AddStringToObject(d, "container_id", x->container_id);
        pthread_mutex_unlock(&x->lock);
        json = cJSON_PrintUnformatted(d);
        (void)audit_record(x->e->store, x->actor[0] ? x->actor : "unknown", x->user, x->session, "exec", json);
        free(json);
        cJSON_Delete(d);
}

/* In the session's container: write the code file (run_code), create the exec. */
static int prepare(struct execution *x, char exec_id[65], struct sbx_error *err)
{
        struct exec_registry *e = x->e;
        struct engine_exec_spec spec = {0};
        int r;

        if (x->code) {
                const char *wargv[] = {"sh", "-c", write_script, "sbx-write", x->code_path, NULL};
                int code = -1;
                r = exec_internal(e, x->container_id, wargv, x->code, x->code_len, e->cfg->docker_timeout_ms, &code,
                                  NULL, NULL, err);
                if (r < 0)
                        return r;
                if (code != 0)
                        return sbx_error_set(err, -EIO, 0, "cannot write the code file in the container (exit %d)",
                                             code);
        }
        spec.cmd = (const char *const *)x->argv;
        spec.env = (const char *const *)x->env;
        spec.workdir = x->workdir;
        spec.attach_stdin = x->interactive || x->stdin_len > 0;
        return engine_exec_create(e->engine, x->container_id, &spec, exec_id, err);
}

bool exec_read_detach(struct execution *x)
{
        pthread_mutex_lock(&x->lock);
        bool r = x->detach;
        pthread_mutex_unlock(&x->lock);
        return r;
}

/* ---- the kill escalation ---- */

/* Where a cancel or a timeout stands. Forced cancel skips KILL_TERM. */
enum kill_phase {
        KILL_NONE,    /* nobody asked for its end */
        KILL_TERM,    /* SIGTERM sent; SIGKILL at kill_at, or at once on a forced cancel */
        KILL_HARD,    /* SIGKILL sent; waiting for the end until give_up_at */
        KILL_GAVE_UP, /* no end by give_up_at: stop waiting for it */
};

struct kill_escalation {
        enum kill_phase phase;
        enum exec_cause why; /* past KILL_NONE: EXEC_CAUSE_CANCELLED or EXEC_CAUSE_TIMEOUT */
        int64_t kill_at, give_up_at, last_sweep;
};

/* How a path delivers the signals. */
struct kill_ops {
        void (*first)(struct execution *x, bool hard); /* SIGTERM, or SIGKILL when hard */
        void (*kill)(struct execution *x);             /* SIGKILL */
        bool resweep;                                  /* in KILL_HARD, SIGKILL again every KILL_RESWEEP_MS */
};

static void read_cancel(struct execution *x, bool *ret_cancel, bool *ret_force)
{
        pthread_mutex_lock(&x->lock);
        *ret_cancel = x->cancel;
        *ret_force = x->force;
        pthread_mutex_unlock(&x->lock);
}

/* One step of the escalation, between two reads: returns the phase. */
static enum kill_phase kill_step(struct execution *x, struct kill_escalation *k, int64_t deadline,
                                 const struct kill_ops *ops)
{
        int64_t now = sbx_now_ms();
        bool want_cancel, want_force;

        read_cancel(x, &want_cancel, &want_force);
        switch (k->phase) {
        case KILL_NONE:
                if (!want_cancel && now < deadline)
                        break;
                k->why = want_cancel ? EXEC_CAUSE_CANCELLED : EXEC_CAUSE_TIMEOUT;
                k->phase = want_force ? KILL_HARD : KILL_TERM;
                ops->first(x, want_force);
                k->last_sweep = sbx_now_ms();
                k->kill_at = k->last_sweep + x->e->cfg->exec_kill_grace_ms;
                k->give_up_at = k->kill_at + KILL_GIVE_UP_MS;
                break;
        case KILL_TERM:
                if (want_force || now >= k->kill_at) {
                        k->phase = KILL_HARD;
                        ops->kill(x);
                        k->last_sweep = sbx_now_ms();
                }
                break;
        case KILL_HARD:
                if (now >= k->give_up_at)
                        k->phase = KILL_GAVE_UP;
                else if (ops->resweep && now - k->last_sweep >= KILL_RESWEEP_MS) {
                        /* a process that did not exist yet at the last sweep
                         * (the exec was still starting) is caught now */
                        ops->kill(x);
                        k->last_sweep = sbx_now_ms();
                }
                break;
        case KILL_GAVE_UP:
                break;
        }
        return k->phase;
}

/* Over docker exec: the tree found by its marker (kill_script). */
static void exec_fallback_first(struct execution *x, bool hard)
{
        (void)kill_tree(x, hard ? "KILL" : "TERM");
}

static const struct kill_ops fallback_kill = {.first = exec_fallback_first, .kill = kill_until_gone, .resweep = true};

/* On the runner: its shim's process group. */
static void runner_first(struct execution *x, bool hard)
{
        struct hub_exec *rx;

        pthread_mutex_lock(&x->stdin_lock);
        rx = x->rx;
        pthread_mutex_unlock(&x->stdin_lock);
        if (rx)
                (void)hub_exec_signal(rx, hard ? SIGKILL : SIGTERM);
}

static void runner_kill(struct execution *x)
{
        runner_first(x, true);
}

static const struct kill_ops runner_kill_ops = {.first = runner_first, .kill = runner_kill, .resweep = false};

/* How it ended, in order of precedence: cancelled, timed out (why, from
 * the kill escalation), the container died, else its own exit. */
static void set_final_state(struct execution *x, struct session *s, uint64_t oom_before, enum exec_cause why,
                            bool container_died, bool sigkilled)
{
        mask_flush(x);
        if (why == EXEC_CAUSE_CANCELLED)
                execution_set_state(x, EXEC_CANCELLED, EXEC_CAUSE_CANCELLED);
        else if (why == EXEC_CAUSE_TIMEOUT)
                execution_set_state(x, EXEC_TIMEOUT, EXEC_CAUSE_TIMEOUT);
        else if (container_died)
                execution_set_state(x, EXEC_FAILED, EXEC_CAUSE_CONTAINER_DIED);
        else if (sigkilled) {
                /* SIGKILL we did not send: an OOM kill if the engine reported one meanwhile
                 * (an execution adopted after a restart has no count from before: s is NULL) */
                bool oom = false;
                for (int i = 0; s && i < 30 && !oom; i++) {
                        oom = session_oom_events(s) > oom_before;
                        if (!oom)
                                sbx_sleep_ms(10);
                }
                execution_set_state(x, oom ? EXEC_FAILED : EXEC_COMPLETED, oom ? EXEC_CAUSE_OOM : EXEC_CAUSE_EXITED);
        } else
                execution_set_state(x, EXEC_COMPLETED, EXEC_CAUSE_EXITED);
}

/* Where it runs: the session's image (by id) and the container runtime. */
static void provenance(struct execution *x)
{
        struct session_info info;

        if (session_get_info(x->e->sessions, x->user, x->session, &info) < 0)
                return;
        pthread_mutex_lock(&x->lock);
        sbx_strlcpy(x->image, info.image, sizeof(x->image));
        /* the session's container as Docker reports it; "" only before its first use: runc */
        sbx_strlcpy(x->runtime, info.runtime[0] ? info.runtime : "runc", sizeof(x->runtime));
        pthread_mutex_unlock(&x->lock);
        session_info_done(&info);
}

/* ---- the runner path ---- */

void exec_on_runner_output(void *ud, int stream, const void *data, size_t len)
{
        on_chunk(ud, stream, data, len);
}

/* The runner path: the session's runner starts the execution in its own
 * process group and session under a subreaper shim, so a signal reaches
 * its whole tree. -ENOTCONN when no runner is connected (the caller falls
 * back to docker exec); any other result is final and the state is set. */
static int run_via_runner(struct execution *x, struct session *s, uint64_t oom_before, struct sbx_error *err)
{
        struct exec_registry *e = x->e;
        struct hub_exec_spec spec = {
                .workdir = x->workdir,
                .code_path = x->code ? x->code_path : NULL,
                .code = x->code,
                .code_len = x->code_len,
                .argv = (const char *const *)x->argv,
                .env = (const char *const *)x->env + 1, /* no tree marker: the runner's shim is the tree */
                .stdin_pipe = x->interactive || x->stdin_len > 0,
                .tty = x->tty,
                .rows = x->rows,
                .cols = x->cols,
                .network = x->network,
                .network_id = x->id,
        };
        struct hub_exec *rx = NULL;
        int64_t start;
        int r;

        (void)hub_adopt(e->runner, x->user, x->session); /* after a restart: listen again */
        if (!hub_wait(e->runner, x->user, x->session, RUNNER_CONNECT_WAIT_MS))
                return -ENOTCONN;
        if (open_spools(x) < 0)
                return sbx_error_set(err, -EIO, 0, "cannot open the output spool: %m");
        r = hub_exec_start(e->runner, x->user, x->session, &spec, exec_on_runner_output, x, &rx, err);
        if (r < 0)
                return r;
        pthread_mutex_lock(&x->lock);
        (void)hub_version(e->runner, x->user, x->session, x->runner_version, sizeof(x->runner_version));
        pthread_mutex_unlock(&x->lock);
        pthread_mutex_lock(&x->stdin_lock);
        x->rx = rx;
        x->stdin_sent = x->stdin_len;
        x->stdin_eof = !x->interactive && x->stdin_len > 0;
        pthread_mutex_unlock(&x->stdin_lock);
        start = sbx_now_ms();
        pthread_mutex_lock(&x->lock);
        sbx_strlcpy(x->via, "runner", sizeof(x->via));
        x->runner_tag = hub_exec_tag(rx);
        x->started_wall = sbx_wall_ms();
        x->deadline_wall = x->started_wall + (int64_t)x->timeout_s * 1000;
        pthread_mutex_unlock(&x->lock);

        execution_set_state(x, EXEC_RUNNING, EXEC_CAUSE_NONE);
        execution_persist(x); /* with the runner's tag: from now on it survives the daemon */
        return exec_runner_loop(x, s, oom_before, rx, start, start + (int64_t)x->timeout_s * 1000, err);
}

/* The runner handle is gone from the execution: no more stdin. */
static void drop_runner_handle(struct execution *x)
{
        pthread_mutex_lock(&x->stdin_lock);
        x->rx = NULL;
        x->stdin_closed = true;
        pthread_mutex_unlock(&x->stdin_lock);
}

int exec_runner_loop(struct execution *x, struct session *s, uint64_t oom_before, struct hub_exec *rx, int64_t start,
                     int64_t deadline, struct sbx_error *err)
{
        enum { ENDED, LOST, DETACHED } end;
        struct kill_escalation kill = {.phase = KILL_NONE};
        struct runner_exit ex = {0};
        int r;

        for (;;) {
                struct sbx_error werr = {0};
                bool stdin_pending;

                if (exec_read_detach(x)) {
                        end = DETACHED;
                        break;
                }
                if (kill_step(x, &kill, deadline, &runner_kill_ops) == KILL_GAVE_UP) {
                        end = LOST; /* the runner does not answer: treat it like a dead container */
                        break;
                }
                stdin_pending = kill.phase == KILL_NONE && stdin_pump(x);
                r = hub_exec_wait(rx, stdin_pending ? 10 : SLICE_MS, &ex, &werr);
                if (r == 0) {
                        end = ENDED;
                        break;
                }
                if (r == -ETIMEDOUT)
                        continue;
                if (r == -ECONNRESET) {
                        end = LOST;
                        break;
                }
                /* the runner could not start it (no such workdir, fork failed, ...) */
                drop_runner_handle(x);
                hub_exec_free(rx);
                return sbx_error_set(err, r, 0, "%s", werr.msg);
        }

        drop_runner_handle(x);
        if (end == ENDED)
                x->rx_done = rx; /* forgotten by the runner once its end is persisted */
        else
                hub_exec_free(rx);
        if (end == DETACHED)
                return -ESHUTDOWN;

        pthread_mutex_lock(&x->lock);
        x->exit_code = end == LOST ? -1 : ex.exit_code;
        x->have_usage = end != LOST;
        x->usage = ex;
        x->duration_ms = sbx_now_ms() - start;
        pthread_mutex_unlock(&x->lock);
        set_final_state(x, s, oom_before, kill.why, end == LOST, end != LOST && ex.signal == SIGKILL);
        return 0;
}


/* The end is persisted: the runner may drop the execution. */
void exec_forget_on_runner(struct execution *x)
{
        if (!x->rx_done)
                return;
        (void)hub_exec_forget(x->rx_done);
        hub_exec_free(x->rx_done);
        x->rx_done = NULL;
}

void exec_mark_finished(struct execution *x)
{
        pthread_mutex_lock(&x->lock);
        x->finished = true;
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

/* The worker: get the session's container, start, pump output, enforce the
 * deadline and cancel, then classify how it ended. */

/* ---- the worker of a new execution, step by step ---- */

/* What the steps of one run share. */
struct run {
        struct execution *x;
        struct session *s; /* held from step_open to the end */
        struct sbx_error err;
        char exec_id[65]; /* the docker exec */
        int64_t start, deadline;
        uint64_t oom_before;
        struct kill_escalation kill;
        bool container_died;
        int exit_code;
};

#define RAN_ON_RUNNER 1

/* Step 1: the session's container; the runner runs it if it is connected
 * (RAN_ON_RUNNER: its final state is set; -ESHUTDOWN: detached), else a
 * docker exec is created in it (0). A container can vanish between the
 * session check and the exec (the privacy ratchet, an external kill): then
 * check the session again, once. */
static int step_open(struct run *c)
{
        struct execution *x = c->x;
        struct exec_registry *e = x->e;
        int r;

        for (int attempt = 0;; attempt++) {
                r = session_acquire(e->sessions, x->user, x->session, &c->s, &c->err);
                if (r < 0)
                        return r;
                session_container_id(c->s, x->container_id);
                c->oom_before = session_oom_events(c->s);
                provenance(x);
                r = run_via_runner(x, c->s, c->oom_before, &c->err);
                if (r == 0)
                        return RAN_ON_RUNNER;
                if (r == -ESHUTDOWN)
                        return r;
                if (r == -ENOTCONN && x->tty)
                        r = sbx_error_set(&c->err, -ENOTSUP, 0,
                                          "a terminal (tty) needs the session's runner, which is not connected; "
                                          "docker exec runs no terminal here");
                if (r == -ENOTCONN && x->network)
                        r = sbx_error_set(&c->err, -ENOTSUP, 0,
                                          "params.network needs the session's runner, which is not connected; "
                                          "docker exec cannot narrow an execution's network");
                if (r != -ENOTCONN)
                        return r;
                r = prepare(x, c->exec_id, &c->err);
                if (r == 0 || attempt > 0 || (r != -ENOENT && r != -EBUSY))
                        return r;
                session_release(c->s);
                c->s = NULL;
        }
}

/* Step 2: the spools, and the exec started with its streams attached. */
static int step_attach(struct run *c)
{
        struct execution *x = c->x;
        struct engine_stream *stream = NULL;
        int r;

        if (open_spools(x) < 0)
                return sbx_error_set(&c->err, -EIO, 0, "cannot open the output spool: %m");
        r = engine_exec_attach(x->e->engine, c->exec_id, &stream, &c->err);
        pthread_mutex_lock(&x->stdin_lock);
        x->stream = stream;
        pthread_mutex_unlock(&x->stdin_lock);
        return r;
}

/* Step 3: RUNNING, persisted; its clock starts. */
static void step_running(struct run *c)
{
        struct execution *x = c->x;

        c->start = sbx_now_ms();
        c->deadline = c->start + (int64_t)x->timeout_s * 1000;
        pthread_mutex_lock(&x->lock);
        sbx_strlcpy(x->via, "docker_exec", sizeof(x->via));
        pthread_mutex_unlock(&x->lock);
        execution_set_state(x, EXEC_RUNNING, EXEC_CAUSE_NONE);
        execution_persist(x);

        pthread_mutex_lock(&x->stdin_lock);
        x->stdin_sent = x->stdin_len;
        x->stdin_eof = !x->interactive && x->stdin_len > 0;
        pthread_mutex_unlock(&x->stdin_lock);
}

/* Step 4: output into the spools, stdin in as the process takes it, the
 * kill escalation on deadline or cancel; until the stream ends, breaks
 * (the container died under us), or the escalation gives up. */
static void step_pump(struct run *c)
{
        struct execution *x = c->x;
        char buf[READ_CHUNK];

        for (;;) {
                enum engine_stream_kind kind;
                ssize_t n;
                bool stdin_pending;

                if (kill_step(x, &c->kill, c->deadline, &fallback_kill) == KILL_GAVE_UP)
                        return; /* the stream did not close: stop waiting for it */
                /* stdin goes in as the process takes it, between reads */
                stdin_pending = c->kill.phase == KILL_NONE && stdin_pump(x);
                n = engine_stream_read(x->e->engine, x->stream, &kind, buf, sizeof(buf), stdin_pending ? 0 : SLICE_MS);
                if (n == -ETIMEDOUT && stdin_pending) {
                        (void)engine_stream_wait(x->e->engine, x->stream, true, SLICE_MS);
                        continue;
                }
                if (n > 0) {
                        if (kind == ENGINE_STREAM_STDOUT || kind == ENGINE_STREAM_STDERR)
                                on_chunk(x, kind == ENGINE_STREAM_STDOUT ? 0 : 1, buf, (size_t)n);
                        continue;
                }
                if (n == 0)
                        return;
                if (n != -ETIMEDOUT) {
                        c->container_died = true; /* the connection broke under us */
                        return;
                }
        }
}

/* Step 5: no straggler survives a kill; the stream goes; the exit code;
 * and, for a death by signal nobody sent, whether the container died. */
static void step_reap(struct run *c)
{
        struct execution *x = c->x;
        struct exec_registry *e = x->e;
        struct engine_exec_info info;
        bool killing = c->kill.phase != KILL_NONE;
        int r = -1;

        if (killing)
                kill_until_gone(x); /* setsid'd and backgrounded ones included */
        pthread_mutex_lock(&x->stdin_lock);
        engine_stream_free(x->e->engine, x->stream);
        x->stream = NULL;
        x->stdin_closed = true;
        pthread_mutex_unlock(&x->stdin_lock);

        for (int i = 0; i < 20; i++) {
                r = engine_exec_inspect(e->engine, c->exec_id, &info, NULL);
                if (r < 0 || !info.running)
                        break;
                sbx_sleep_ms(10);
        }
        c->exit_code = r == 0 && !info.running ? info.exit_code : -1;
        pthread_mutex_lock(&x->lock);
        x->exit_code = c->exit_code;
        pthread_mutex_unlock(&x->lock);
        if (!killing && (r < 0 || c->exit_code < 0 || c->exit_code >= 128)) {
                /* Killed by a signal: was it the whole container? Docker may still
                 * report it running for a moment, but it can no longer run anything. */
                struct engine_container_info ci;
                const char *probe[] = {"true", NULL};
                int code = -1;
                if (engine_inspect(e->engine, x->container_id, &ci, NULL) < 0 || !ci.running ||
                    exec_internal(e, x->container_id, probe, NULL, 0, 5000, &code, NULL, NULL, NULL) < 0 || code != 0)
                        c->container_died = true;
        }
}

/* Step 6: its final state; the code file goes. */
static void step_classify(struct run *c)
{
        struct execution *x = c->x;

        pthread_mutex_lock(&x->lock);
        x->duration_ms = sbx_now_ms() - c->start;
        pthread_mutex_unlock(&x->lock);
        set_final_state(x, c->s, c->oom_before, c->kill.why, c->container_died, c->exit_code == 137);
        if (x->code) {
                const char *rargv[] = {"rm", "-f", x->code_path, NULL};
                (void)exec_internal(x->e, x->container_id, rargv, NULL, 0, 5000, NULL, NULL, NULL, NULL);
        }
}

/* The end of a run that reached a final state. */
static void finish(struct run *c)
{
        execution_persist(c->x);
        exec_audit(c->x);
        exec_forget_on_runner(c->x);
        session_release(c->s);
        exec_mark_finished(c->x);
}

/* The end of a run that could not start (r: why). */
static void finish_failed(struct run *c, int r)
{
        struct execution *x = c->x;

        pthread_mutex_lock(&x->lock);
        x->start_error = r;
        snprintf(x->error, sizeof(x->error), "%s", c->err.msg[0] ? c->err.msg : strerror(-r));
        x->duration_ms = sbx_now_ms() - c->start;
        pthread_mutex_unlock(&x->lock);
        mask_flush(x);
        execution_set_state(x, EXEC_FAILED, EXEC_CAUSE_ERROR);
        log_ctx(LOG_LEVEL_WARN, x->user, x->session, x->container_id[0] ? x->container_id : NULL,
                "execution %s could not run: %s", x->id, x->error);
        finish(c);
}

/* The engine stops while the runner runs it: RUNNING, with what it
 * produced so far; the next daemon adopts it. */
static void finish_detached(struct run *c)
{
        mask_flush(c->x);
        execution_persist(c->x);
        session_release(c->s);
        exec_mark_finished(c->x);
}

static void run(struct execution *x)
{
        struct run c = {.x = x, .start = sbx_now_ms(), .kill = {.phase = KILL_NONE}};
        int r = step_open(&c);

        if (r == RAN_ON_RUNNER) {
                finish(&c);
                return;
        }
        if (r == -ESHUTDOWN) {
                finish_detached(&c);
                return;
        }
        if (r == 0)
                r = step_attach(&c);
        if (r < 0) {
                finish_failed(&c, r);
                return;
        }
        step_running(&c);
        step_pump(&c);
        step_reap(&c);
        step_classify(&c);
        finish(&c);
}

/* What ends every worker, and an adopted execution that got none: off the
 * live list, its slot freed, long-polls woken, the worker's reference dropped. */
void exec_worker_done(struct execution *x)
{
        struct exec_registry *e = x->e;

        pthread_mutex_lock(&e->lock);
        for (struct execution **pp = &e->live; *pp; pp = &(*pp)->next)
                if (*pp == x) {
                        *pp = x->next;
                        x->refs--;
                        break;
                }
        pthread_mutex_unlock(&e->lock);
        /* wake long-polls that now have to read from the store */
        pthread_mutex_lock(&x->lock);
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        /* The worker still counts until its last reference is gone:
         * execution_free reads x->e, which exec_registry_free frees as soon
         * as the count reaches 0. */
        execution_unref(x);
        pthread_mutex_lock(&e->lock);
        e->workers--;
        pthread_cond_broadcast(&e->idle);
        pthread_mutex_unlock(&e->lock);
}

static void *worker_main(void *ud)
{
        struct execution *x = ud;

        pthread_setname_np(pthread_self(), "sbx-exec");
        reqctx_set(x->trace_id); /* its log lines and audit rows follow the request that started it */
        if (x->adopting)
                exec_adopt_run(x);
        else
                run(x);
        exec_worker_done(x);
        return NULL;
}

int exec_worker_start(struct execution *x)
{
        pthread_attr_t attr;
        pthread_t t;
        int r;

        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        r = -pthread_create(&t, &attr, worker_main, x);
        pthread_attr_destroy(&attr);
        return r;
}
