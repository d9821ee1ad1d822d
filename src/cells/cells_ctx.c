/* cells_ctx.c — interpreter contexts and their generations: finding and
 * making a context, holding it for one request, starting its bridge in the
 * session's container, sending it a line, ending it (kill, signal), the
 * waiter thread that sees a generation end, and the context's row in the
 * store. Locks: cells_internal.h. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cells_internal.h"
#include "sandboxd/audit.h"
#include "sandboxd/sha256.h"
#include "sandboxd/log.h"
#include "sandboxd/pool.h"
#include "sandboxd/hub.h"
#include "sandboxd/session.h"
#include "sandboxd/startline.h"
#include "sandboxd/store_cells.h"
#include "sandboxd/utf8.h"

bool cells_name_valid(const char *name)
{
        size_t n = name ? strlen(name) : 0;

        if (n == 0 || n > CELLS_NAME_MAX || name[0] == '.')
                return false;
        for (size_t i = 0; i < n; i++) {
                char ch = name[i];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                      ch == '-' || ch == '.'))
                        return false;
        }
        return true;
}

void cells_cond_init_mono(pthread_cond_t *cv)
{
        pthread_condattr_t a;
        pthread_condattr_init(&a);
        pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
        pthread_cond_init(cv, &a);
        pthread_condattr_destroy(&a);
}

/* Wait on cv until the monotonic deadline (ms); false once it passed. */
bool cells_wait_until(pthread_cond_t *cv, pthread_mutex_t *m, int64_t deadline)
{
        int64_t left = deadline - sbx_now_ms();
        if (left <= 0)
                return false;
        struct timespec ts = sbx_deadline_after(CLOCK_MONOTONIC, left > 250 ? 250 : left);
        (void)pthread_cond_timedwait(cv, m, &ts);
        return true;
}

/* ---- persistence ---- */

/* Write the context's row. Called with ctx->lock held (the store lock is a leaf). */
void cells_ctx_persist_locked(struct cell_ctx *x, bool live)
{
        struct store_context row = {0};

        if (x->deleted)
                return;
        sbx_strlcpy(row.user, x->user, sizeof(row.user));
        sbx_strlcpy(row.session, x->session, sizeof(row.session));
        sbx_strlcpy(row.name, x->name, sizeof(row.name));
        sbx_strlcpy(row.language, x->language, sizeof(row.language));
        row.generation = x->generation;
        row.execution_count = x->execution_count;
        row.runner_tag = x->tag;
        sbx_strlcpy(row.container_id, x->container_id, sizeof(row.container_id));
        sbx_strlcpy(row.state, live ? "live" : "lost", sizeof(row.state));
        sbx_strlcpy(row.lost_cause, x->lost_cause, sizeof(row.lost_cause));
        row.created_at = x->created_at;
        row.last_used = x->last_used;
        if (store_context_put(x->c->store, &row) < 0)
                log_warn("cells: cannot record context %s of %s:%s", x->name, x->user, x->session);
}


/* ---- generations ---- */

/* The loss to report, {cause, generation} (ctx->lock held): from now on
 * its cause is fixed, so every call that reports it says the same. */
cJSON *cells_lost_report_locked(struct cell_ctx *x)
{
        cJSON *l = cJSON_CreateObject();
        cJSON_AddStringToObject(l, "cause", x->lost_cause);
        cJSON_AddNumberToObject(l, "generation", (double)x->lost_generation);
        x->lost_reported = true;
        return l;
}

void *cells_waiter_main(void *p)
{
        struct waiter_arg a = *(struct waiter_arg *)p;
        struct cell_ctx *x = a.x;
        struct runner_exit ex = {0};
        struct sbx_error err = {0};
        int r;
        bool stopping;

        free(p);
        for (;;) {
                r = hub_exec_wait(a.rx, 1000, &ex, &err);
                if (r != -ETIMEDOUT)
                        break;
                pthread_mutex_lock(&x->c->lock);
                stopping = x->c->stopping;
                pthread_mutex_unlock(&x->c->lock);
                if (stopping) {
                        /* the daemon stops: the job stays with the runner, the row stays live */
                        pthread_mutex_lock(&x->rx_lock);
                        x->rx = NULL;
                        pthread_mutex_unlock(&x->rx_lock);
                        hub_exec_free(a.rx);
                        pthread_mutex_lock(&x->lock);
                        x->waiter_done = true;
                        pthread_cond_broadcast(&x->cond);
                        pthread_mutex_unlock(&x->lock);
                        return NULL;
                }
        }
        pthread_mutex_lock(&x->rx_lock);
        x->rx = NULL;
        pthread_mutex_unlock(&x->rx_lock);
        if (r == 0)
                (void)hub_exec_forget(a.rx);
        hub_exec_free(a.rx);

        pthread_mutex_lock(&x->lock);
        if (x->generation == a.generation) {
                const char *cause;
                if (x->strong_cause[0])
                        cause = x->strong_cause;
                else if (x->kill_cause[0])
                        cause = x->kill_cause;
                else if (x->bridge_cause[0])
                        cause = x->bridge_cause;
                else if (r == 0 && ex.signal == SIGKILL)
                        cause = "killed";
                else if (r == 0)
                        cause = "exited";
                else
                        cause = "runner_lost";
                /* a cell that gave up waiting for this end reported it as killed already */
                if (!x->kill_silent && !(x->lost_reported && x->lost_generation == a.generation)) {
                        sbx_strlcpy(x->lost_cause, cause, sizeof(x->lost_cause));
                        x->lost_generation = a.generation;
                        x->lost_reported = false;
                }
                if (x->phase == CTX_STARTING && !x->start_error[0])
                        snprintf(x->start_error, sizeof(x->start_error), "the interpreter ended while starting (%s)",
                                 cause);
                x->phase = CTX_IDLE;
                x->waiter_done = true;
                x->adopting = false;
                if (x->adopt_busy)
                        x->adopt_busy = x->busy = false;
                cells_ctx_persist_locked(x, false);
                log_info("cells: %s:%s/%s generation %lld ended (%s)", x->user, x->session, x->name,
                         (long long)a.generation, cause);
        }
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        return NULL;
}

/* Send one JSON line to the bridge (never waits past deadline). */
int cells_ctx_send(struct cell_ctx *x, const cJSON *msg, int64_t deadline)
{
        char *s = cJSON_PrintUnformatted(msg);
        size_t len, off = 0;
        int r = 0;

        if (!s)
                return -ENOMEM;
        len = strlen(s);
        s[len] = '\0';
        char *line = realloc(s, len + 2);
        if (!line) {
                free(s);
                return -ENOMEM;
        }
        line[len++] = '\n';
        while (off < len) {
                ssize_t n;
                pthread_mutex_lock(&x->rx_lock);
                n = x->rx ? hub_exec_write_stdin(x->rx, line + off, len - off) : -ECONNRESET;
                pthread_mutex_unlock(&x->rx_lock);
                if (n < 0) {
                        r = (int)n;
                        break;
                }
                off += (size_t)n;
                if (off < len) {
                        if (sbx_now_ms() >= deadline) {
                                r = -ETIMEDOUT;
                                break;
                        }
                        sbx_sleep_ms(2);
                }
        }
        free(line);
        return r;
}

int cells_ctx_signal(struct cell_ctx *x, int sig)
{
        int r;
        pthread_mutex_lock(&x->rx_lock);
        r = x->rx ? hub_exec_signal(x->rx, sig) : -ESRCH;
        pthread_mutex_unlock(&x->rx_lock);
        return r;
}

/* Join the last generation's waiter (it has ended or is about to). */
void cells_ctx_join_waiter(struct cell_ctx *x)
{
        pthread_t t;
        bool has;

        pthread_mutex_lock(&x->lock);
        has = x->has_waiter;
        t = x->waiter;
        x->has_waiter = false;
        pthread_mutex_unlock(&x->lock);
        if (has)
                pthread_join(t, NULL);
}

/* End the current generation: SIGKILL its tree and wait for its waiter.
 * cause "" with silent: on request, nothing to report. */
void cells_ctx_kill(struct cell_ctx *x, const char *cause, bool silent)
{
        int64_t deadline = sbx_now_ms() + CELLS_KILL_WAIT_MS;

        pthread_mutex_lock(&x->lock);
        if (x->phase == CTX_IDLE) {
                pthread_mutex_unlock(&x->lock);
                cells_ctx_join_waiter(x);
                return;
        }
        sbx_strlcpy(x->kill_cause, cause, sizeof(x->kill_cause));
        x->kill_silent = silent;
        pthread_mutex_unlock(&x->lock);
        (void)cells_ctx_signal(x, SIGKILL);
        pthread_mutex_lock(&x->lock);
        while (!x->waiter_done && cells_wait_until(&x->cond, &x->lock, deadline))
                ;
        bool ended = x->waiter_done;
        pthread_mutex_unlock(&x->lock);
        if (ended)
                cells_ctx_join_waiter(x);
        else
                log_warn("cells: %s:%s/%s did not end %d ms after SIGKILL", x->user, x->session, x->name,
                         CELLS_KILL_WAIT_MS);
}

_Static_assert(CELLS_STARTS_MAX <= STARTLINE_SLOTS_MAX, "the start line holds CELLS_STARTS_MAX");
static struct startline kernel_starts =
        STARTLINE_INIT("interpreter starts", CELLS_STARTS_MAX, CELLS_STARTS_PER_USER, CELLS_START_QUEUE_MS);

static int ctx_start_in_line(struct cell_ctx *x, const char *container_id, const char *const *envv,
                             struct sbx_error *err);

/* Start a new generation (ctx busy, phase IDLE); waits its turn in the
 * start line, then for the kernel. */
int cells_ctx_start(struct cell_ctx *x, const char *container_id, const char *const *env, struct sbx_error *err)
{
        struct cells *c = x->c;
        char cell_dir[128], start_to[64], out_cap[64];
        const char *envv[CELLS_MAX_ENV + 4];
        size_t n_env = 0;
        int64_t waited = 0;
        int r;

        for (size_t i = 0; env && env[i]; i++) {
                if (n_env >= CELLS_MAX_ENV)
                        return sbx_error_set(err, -E2BIG, 0, "more than %d environment variables", CELLS_MAX_ENV);
                if (!sbx_env_key_valid(env[i]))
                        return sbx_error_set(err, -EINVAL, 0, "environment names must be [A-Za-z_][A-Za-z0-9_]*");
                envv[n_env++] = env[i];
        }
        snprintf(cell_dir, sizeof(cell_dir), "SBX_CELL_DIR=/tmp/sbx-cell-%s", x->name);
        snprintf(start_to, sizeof(start_to), "SBX_CELL_START_TIMEOUT=%d", c->cfg->cells_start_timeout_ms / 1000);
        /* the kernel sends at most this per stream and cell (kernel_bridge.py) */
        snprintf(out_cap, sizeof(out_cap), "SBX_CELL_OUTPUT_CAP=%" PRId64, c->cfg->exec_output_cap_bytes);
        envv[n_env++] = cell_dir;
        envv[n_env++] = start_to;
        envv[n_env++] = out_cap;
        envv[n_env] = NULL;

        (void)hub_adopt(c->hub, x->user, x->session);
        if (!hub_wait(c->hub, x->user, x->session, CELLS_RUNNER_WAIT_MS))
                return sbx_error_set(
                        err, -ENOTCONN, 0,
                        "the session's runner is not connected: run_cell needs it (no docker exec fallback)");
        cells_ctx_join_waiter(x);
        r = startline_take(&kernel_starts, x->user, &waited, err);
        if (r < 0)
                return r;
        if (waited > 1000)
                log_info("cells: %s:%s/%s waited %lld ms in the start line", x->user, x->session, x->name,
                         (long long)waited);
        r = ctx_start_in_line(x, container_id, envv, err);
        startline_give(&kernel_starts, x->user);
        return r;
}

/* cells_ctx_start's part in the start line: the bridge's job and the wait for its kernel. */
static int ctx_start_in_line(struct cell_ctx *x, const char *container_id, const char *const *envv,
                             struct sbx_error *err)
{
        struct cells *c = x->c;
        bool py = strcmp(x->language, "python") == 0;
        char code_path[128];
        const char *argv_py[] = {"python3", "-I", code_path, "python3", NULL};
        const char *argv_node[] = {"node", "--expose-internals", code_path, NULL};
        struct hub_exec *rx = NULL;
        struct waiter_arg *wa;
        int64_t deadline, t0;
        int r;

        pthread_mutex_lock(&x->lock);
        snprintf(code_path, sizeof(code_path), "/tmp/sbx-cell-%s-%lld.%s", x->name, (long long)x->generation + 1,
                 py ? "py" : "js");
        x->phase = CTX_STARTING;
        x->generation++;
        x->kill_cause[0] = x->strong_cause[0] = x->bridge_cause[0] = x->start_error[0] = '\0';
        x->kill_silent = false;
        x->waiter_done = false;
        x->execution_count = 0;
        x->kernel_pid = -1;
        x->cur_id = 0;
        sbx_strlcpy(x->container_id, container_id, sizeof(x->container_id));
        pthread_mutex_unlock(&x->lock);
        x->line_len = 0; /* no output arrives before the job starts */
        x->line_skip = false;

        const char *src = py ? cells_bridge_python : cells_bridge_node;
        struct hub_exec_spec spec = {
                .workdir = "/workspace",
                .code_path = code_path,
                .code = src,
                .code_len = strlen(src),
                .argv = py ? argv_py : argv_node,
                .env = envv,
                .stdin_pipe = true,
        };
        r = hub_exec_start(c->hub, x->user, x->session, &spec, cells_on_output, x, &rx, err);
        if (r < 0) {
                pthread_mutex_lock(&x->lock);
                x->phase = CTX_IDLE;
                pthread_mutex_unlock(&x->lock);
                return r;
        }
        pthread_mutex_lock(&x->rx_lock);
        x->rx = rx;
        pthread_mutex_unlock(&x->rx_lock);
        wa = malloc(sizeof(*wa));
        if (!wa) {
                r = -ENOMEM;
        } else {
                *wa = (struct waiter_arg){.x = x, .rx = rx, .generation = x->generation};
                pthread_mutex_lock(&x->lock);
                x->tag = hub_exec_tag(rx);
                r = -pthread_create(&x->waiter, NULL, cells_waiter_main, wa);
                x->has_waiter = r == 0;
                pthread_mutex_unlock(&x->lock);
                if (r < 0)
                        free(wa);
        }
        if (r < 0) {
                pthread_mutex_lock(&x->rx_lock);
                x->rx = NULL;
                pthread_mutex_unlock(&x->rx_lock);
                (void)hub_exec_signal(rx, SIGKILL);
                hub_exec_free(rx);
                pthread_mutex_lock(&x->lock);
                x->phase = CTX_IDLE;
                pthread_mutex_unlock(&x->lock);
                return sbx_error_set(err, r, 0, "cannot start the context's waiter");
        }
        pthread_setname_np(x->waiter, "sbx-cellwait");

        t0 = sbx_now_ms();
        deadline = t0 + c->cfg->cells_start_timeout_ms + 5000;
        pthread_mutex_lock(&x->lock);
        cells_ctx_persist_locked(x, true);
        while (x->phase == CTX_STARTING && !x->start_error[0] && cells_wait_until(&x->cond, &x->lock, deadline))
                ;
        if (x->phase == CTX_READY) {
                pthread_mutex_unlock(&x->lock);
                log_info("cells: %s:%s/%s generation %lld ready in %lld ms (%s, kernel pid %d)", x->user, x->session,
                         x->name, (long long)x->generation, (long long)(sbx_now_ms() - t0), x->language, x->kernel_pid);
                return 0;
        }
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", x->start_error[0] ? x->start_error : "the interpreter did not start in time");
        pthread_mutex_unlock(&x->lock);
        cells_ctx_kill(x, "", true);
        return sbx_error_set(err, -EIO, 0, "the %s context could not start: %s", x->language, msg);
}

/* ---- contexts ---- */

void cells_ctx_unref(struct cell_ctx *x)
{
        struct cells *c;
        bool last;

        if (!x)
                return;
        c = x->c;
        pthread_mutex_lock(&c->lock);
        last = --x->refs == 0;
        pthread_mutex_unlock(&c->lock);
        if (!last)
                return;
        cells_ctx_join_waiter(x);
        cJSON_Delete(x->outputs);
        cJSON_Delete(x->vars);
        cJSON_Delete(x->last_result);
        free(x->line);
        free(x->env_sent);
        pthread_mutex_destroy(&x->lock);
        pthread_mutex_destroy(&x->rx_lock);
        pthread_cond_destroy(&x->cond);
        free(x);
}

struct cell_ctx *cells_find_locked(struct cells *c, const char *user, const char *session, const char *name)
{
        for (struct cell_ctx *x = c->list; x; x = x->next)
                if (strcmp(x->user, user) == 0 && strcmp(x->session, session) == 0 && strcmp(x->name, name) == 0)
                        return x;
        return NULL;
}

struct cell_ctx *cells_ctx_alloc(struct cells *c, const char *user, const char *session, const char *name,
                                 const char *language)
{
        struct cell_ctx *x = calloc(1, sizeof(*x));
        if (!x)
                return NULL;
        x->c = c;
        x->refs = 1; /* the list's */
        sbx_strlcpy(x->user, user, sizeof(x->user));
        sbx_strlcpy(x->session, session, sizeof(x->session));
        sbx_strlcpy(x->name, name, sizeof(x->name));
        sbx_strlcpy(x->language, language, sizeof(x->language));
        x->created_at = x->last_used = sbx_wall_ms();
        x->next_id = 1;
        x->kernel_pid = -1;
        x->rss_kb = -1;
        pthread_mutex_init(&x->lock, NULL);
        pthread_mutex_init(&x->rx_lock, NULL);
        cells_cond_init_mono(&x->cond);
        return x;
}

/* The context, with a reference; created (within the caps) when create. */
int cells_ctx_get(struct cells *c, const char *user, const char *session, const char *name, const char *language,
                  bool create, struct cell_ctx **ret, struct sbx_error *err)
{
        struct cell_ctx *x;
        size_t in_session = 0;

        if (!cells_name_valid(name))
                return sbx_error_set(err, -EINVAL, 0, "a context name is 1-%d of [A-Za-z0-9_.-]", CELLS_NAME_MAX);
        pthread_mutex_lock(&c->lock);
        x = cells_find_locked(c, user, session, name);
        if (x) {
                x->refs++;
                pthread_mutex_unlock(&c->lock);
                if (language && strcmp(language, x->language) != 0) {
                        /* the python kernel a warm slot started ahead, never used:
                         * the first cell asks for another language, so it goes */
                        pthread_mutex_lock(&x->lock);
                        bool fresh = x->prestarted_generation && x->generation == x->prestarted_generation &&
                                     x->execution_count == 0 && !x->busy;
                        if (fresh)
                                x->busy = true;
                        pthread_mutex_unlock(&x->lock);
                        if (fresh) {
                                cells_ctx_kill(x, "", true);
                                pthread_mutex_lock(&x->lock);
                                sbx_strlcpy(x->language, language, sizeof(x->language));
                                x->generation = x->prestarted_generation = 0;
                                x->lost_cause[0] = '\0';
                                x->busy = false;
                                cells_ctx_persist_locked(x, false);
                                pthread_mutex_unlock(&x->lock);
                                *ret = x;
                                return 0;
                        }
                        sbx_error_set(err, -EINVAL, 0, "context %s is a %s context (use another context name)", name,
                                      x->language);
                        cells_ctx_unref(x);
                        return -EINVAL;
                }
                *ret = x;
                return 0;
        }
        if (!create) {
                pthread_mutex_unlock(&c->lock);
                return sbx_error_set(err, -ENOENT, 0, "no context %s in this session", name);
        }
        for (struct cell_ctx *y = c->list; y; y = y->next)
                if (strcmp(y->user, user) == 0 && strcmp(y->session, session) == 0)
                        in_session++;
        if (in_session >= (size_t)c->cfg->cells_max_per_session || c->n >= (size_t)c->cfg->cells_max_global) {
                pthread_mutex_unlock(&c->lock);
                return sbx_error_set(err, -EBUSY, 0,
                                     in_session >= (size_t)c->cfg->cells_max_per_session
                                             ? "this session already has %d contexts (CELLS_MAX_PER_SESSION): "
                                               "delete_context one"
                                             : "the daemon holds its maximum of %d contexts (CELLS_MAX_GLOBAL)",
                                     in_session >= (size_t)c->cfg->cells_max_per_session ? c->cfg->cells_max_per_session
                                                                                         : c->cfg->cells_max_global);
        }
        x = cells_ctx_alloc(c, user, session, name, language ? language : "python");
        if (!x) {
                pthread_mutex_unlock(&c->lock);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        x->next = c->list;
        c->list = x;
        c->n++;
        x->refs++;
        pthread_mutex_unlock(&c->lock);
        *ret = x;
        return 0;
}

int cells_ctx_acquire(struct cell_ctx *x, struct sbx_error *err)
{
        int64_t deadline = sbx_now_ms() + CELLS_ADOPT_WAIT_MS + 5000;

        /* a paused session is resumed before anything waits on its kernel:
         * a frozen bridge answers nothing, and a job to adopt after a restart
         * waits for the thaw (adopter_main) */
        if (session_is_paused(x->c->sessions, x->user, x->session)) {
                int r = session_resume(x->c->sessions, x->user, x->session, NULL, err);
                if (r < 0)
                        return r;
        }

        pthread_mutex_lock(&x->lock);
        /* after a restart, until the context's job is adopted and its replay in */
        while ((x->adopt_pending || (x->adopting && !x->waiter_done)) && cells_wait_until(&x->cond, &x->lock, deadline))
                ;
        /* the replay of a cell that had ended comes at once: a caller that
         * waited for the adoption should not find it still holding the
         * context (a cell that still runs keeps it: busy, as before) */
        int64_t replay = sbx_now_ms() + CELLS_REPLAY_GRACE_MS;
        while (x->adopted_cell && x->adopt_busy && !x->waiter_done &&
               cells_wait_until(&x->cond, &x->lock, replay < deadline ? replay : deadline))
                ;
        if (x->busy) {
                pthread_mutex_unlock(&x->lock);
                return sbx_error_set(err, -EBUSY, 0, "a cell is already running in context %s%s", x->name,
                                     x->adopt_busy ? " (it outlived a daemon restart: last_cell waits for its end)"
                                                   : "");
        }
        x->busy = true;
        pthread_mutex_unlock(&x->lock);
        return 0;
}

void cells_ctx_release(struct cell_ctx *x)
{
        pthread_mutex_lock(&x->lock);
        x->busy = false;
        x->interrupt_requested = false;
        x->cur_id = 0;
        x->last_used = sbx_wall_ms();
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

/* Make sure a generation runs in the session's current container (ctx
 * busy). *ret_lost gets the loss to report (a copy), if any. */
int cells_ctx_ensure(struct cell_ctx *x, const char *const *env, cJSON **ret_lost, struct sbx_error *err)
{
        struct session *s = NULL;
        char cid[65];
        int r = session_acquire(x->c->sessions, x->user, x->session, &s, err);
        bool ready;
        uint64_t ooms;

        if (r < 0)
                return r;
        session_container_id(s, cid);
        ooms = session_oom_events(s);
        session_release(s);

        pthread_mutex_lock(&x->lock);
        /* the bridge reads the OOM kills itself (cgroup v1 and v2), but one
         * that killed the bridge looks like any SIGKILL: the engine's OOM
         * event since the generation started says what it was, unless the
         * cause went out already (one cause per generation) */
        if (x->lost_cause[0] && !x->lost_reported && x->lost_generation == x->generation && ooms > x->oom_at_start &&
            (strcmp(x->lost_cause, "killed") == 0 || strcmp(x->lost_cause, "exited") == 0 ||
             strcmp(x->lost_cause, "runner_lost") == 0))
                sbx_strlcpy(x->lost_cause, "oom", sizeof(x->lost_cause));
        ready = x->phase == CTX_READY;
        if (ready && strcmp(cid, x->container_id) != 0)
                sbx_strlcpy(x->strong_cause, "container_recreated", sizeof(x->strong_cause));
        pthread_mutex_unlock(&x->lock);
        if (ready && strcmp(cid, x->container_id) != 0) {
                cells_ctx_kill(x, "container_recreated", false);
                ready = false;
        }
        pthread_mutex_lock(&x->lock);
        if (x->lost_cause[0])
                *ret_lost = cells_lost_report_locked(x);
        pthread_mutex_unlock(&x->lock);
        if (ready)
                return 0;
        pthread_mutex_lock(&x->lock);
        x->oom_at_start = ooms;
        pthread_mutex_unlock(&x->lock);
        r = cells_ctx_start(x, cid, env, err);
        if (r == 0) {
                pthread_mutex_lock(&x->lock);
                x->lost_cause[0] = '\0'; /* reported by this call */
                cells_ctx_persist_locked(x, true);
                pthread_mutex_unlock(&x->lock);
        }
        return r;
}
