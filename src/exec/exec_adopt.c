/* exec_adopt.c — durable executions across a daemon restart.
 *
 * One the runner runs outlives the daemon. Its row keeps the runner's tag,
 * its deadline and its spool share; a daemon that stops (gracefully or
 * not) leaves it RUNNING, and the next one registers it as live at once in
 * exec_registry_recover (it holds its slots) and, from exec_registry_adopt, a
 * worker re-adopts it from the runner with its output from the last byte
 * of its spool files. The runner forgets an execution only after its end
 * is persisted here. Anything the runner cannot hand back ends FAILED
 * (daemon_restarted).
 *
 * Locks: as in exec_internal.h; e->lock to register and to pick the
 * executions still without a worker, x->lock for the state and counters,
 * x->stdin_lock for the runner handle. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec_internal.h"
#include "sandboxd/log.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"

#define ADOPT_WAIT_MS 30000 /* a running container's runner reconnects within about a second */

/* A live execution from a row the runner may still run. No worker yet. */
static int adopt_register(struct exec_registry *e, const struct store_execution *row)
{
        struct execution *x = execution_new(e, row->id); /* its reference is the registry's */

        if (!x)
                return -ENOMEM;
        sbx_strlcpy(x->user, row->user_id, sizeof(x->user));
        sbx_strlcpy(x->session, row->session_id, sizeof(x->session));
        sbx_strlcpy(x->kind, row->kind, sizeof(x->kind));
        sbx_strlcpy(x->actor, row->actor[0] ? row->actor : "unknown", sizeof(x->actor));
        sbx_strlcpy(x->preview, row->command_preview, sizeof(x->preview));
        sbx_strlcpy(x->sha, row->command_sha256, sizeof(x->sha));
        sbx_strlcpy(x->container_id, row->container_id, sizeof(x->container_id));
        sbx_strlcpy(x->via, "runner", sizeof(x->via));
        sbx_strlcpy(x->image, row->image, sizeof(x->image));
        sbx_strlcpy(x->runtime, row->runtime, sizeof(x->runtime));
        sbx_strlcpy(x->runner_version, row->runner_version, sizeof(x->runner_version));
        x->created_at = row->created_at;
        x->started_wall = row->started_at > 0 ? row->started_at : row->created_at;
        x->deadline_wall = row->deadline_at;
        x->spool_budget = row->spool_budget > 0 ? (uint64_t)row->spool_budget : 0;
        x->total[0] = (uint64_t)row->stdout_bytes;
        x->total[1] = (uint64_t)row->stderr_bytes;
        x->spooled[0] = (uint64_t)row->stdout_spooled; /* until its worker reads the files */
        x->spooled[1] = (uint64_t)row->stderr_spooled;
        x->interactive = row->interactive;
        x->tty = row->tty;
        x->runner_tag = row->runner_tag;
        x->exit_code = -1;
        x->state = EXEC_RUNNING;
        x->adopting = true;
        hub_expect(e->runner, x->user, x->session, x->runner_tag);
        pthread_mutex_lock(&e->lock);
        x->next = e->live;
        e->live = x;
        pthread_mutex_unlock(&e->lock);
        return 0;
}

/* The spools as they were left: output goes on after their last byte.
 * have[k]: the bytes of each stream the daemon had (kept or counted past
 * the cap), which the files show when the row lags behind them. */
static int open_spools_append(struct execution *x, uint64_t have[2])
{
        for (int k = 0; k < 2; k++) {
                struct stat st;
                x->spool_fd[k] = open(x->spool[k], O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (x->spool_fd[k] < 0 || fstat(x->spool_fd[k], &st) < 0)
                        return -errno;
                x->spooled[k] = (uint64_t)st.st_size;
                have[k] = x->total[k] > x->spooled[k] ? x->total[k] : x->spooled[k];
        }
        return 0;
}

/* Is the container the execution ran in still the session's, and running? */
static bool adopt_container_alive(struct execution *x)
{
        struct session_info info;
        bool ok;

        if (session_get_info(x->e->sessions, x->user, x->session, &info) < 0)
                return false;
        ok = info.state == SESSION_RUNNING && strcmp(info.container_id, x->container_id) == 0;
        session_info_done(&info);
        return ok;
}

/* An adopted execution that cannot be followed: FAILED, daemon_restarted. */
static void adopt_give_up(struct execution *x, const char *why)
{
        hub_unexpect(x->e->runner, x->user, x->session, x->runner_tag);
        pthread_mutex_lock(&x->lock);
        snprintf(x->error, sizeof(x->error), "the daemon restarted while it ran and %s", why);
        x->duration_ms = sbx_wall_ms() - x->started_wall;
        x->state = EXEC_FAILED; /* recorded before a waiter wakes: a list by state agrees with it */
        x->cause = EXEC_CAUSE_DAEMON_RESTARTED;
        pthread_mutex_unlock(&x->lock);
        execution_persist(x);
        execution_set_state(x, EXEC_FAILED, EXEC_CAUSE_DAEMON_RESTARTED);
        log_ctx(LOG_LEVEL_WARN, x->user, x->session, x->container_id, "execution %s: %s", x->id, x->error);
        execution_persist(x);
        exec_audit(x);
        exec_forget_on_runner(x);
        exec_mark_finished(x);
}

/* The worker of an execution adopted after a restart. */
void exec_adopt_run(struct execution *x)
{
        struct exec_registry *e = x->e;
        struct hub_exec *rx = NULL;
        struct sbx_error err = {0};
        uint64_t have[2] = {0, 0}, from[2];
        int64_t until = sbx_now_ms() + ADOPT_WAIT_MS, now_wall, now;
        char why[300] = "";
        int r;

        pthread_mutex_lock(&x->lock);
        r = open_spools_append(x, have);
        pthread_mutex_unlock(&x->lock);
        if (r < 0)
                snprintf(why, sizeof(why), "its output spool cannot be opened: %s", strerror(-r));
        while (!why[0]) {
                if (exec_read_detach(x)) {
                        exec_mark_finished(x); /* still RUNNING for the next daemon */
                        return;
                }
                if (!adopt_container_alive(x)) {
                        snprintf(why, sizeof(why), "its container stopped while the daemon was away");
                        break;
                }
                r = hub_exec_adopt(e->runner, x->user, x->session, x->runner_tag, have, exec_on_runner_output, x, 250,
                                   &rx, from, &err);
                if (r == 0)
                        break;
                if (r != -ETIMEDOUT)
                        snprintf(why, sizeof(why), "%s", err.msg);
                else if (sbx_now_ms() >= until)
                        snprintf(why, sizeof(why), "its runner did not come back within %d s", ADOPT_WAIT_MS / 1000);
        }
        if (why[0]) {
                adopt_give_up(x, why);
                return;
        }
        pthread_mutex_lock(&x->lock);
        x->total[0] = from[0]; /* past what the spool holds: bytes counted past the cap */
        x->total[1] = from[1];
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        pthread_mutex_lock(&x->stdin_lock);
        x->rx = rx;
        x->stdin_eof = !x->interactive; /* its stdin queue went with the daemon that had it */
        pthread_mutex_unlock(&x->stdin_lock);
        log_ctx(LOG_LEVEL_INFO, x->user, x->session, x->container_id,
                "execution %s adopted from the runner at stdout %" PRIu64 ", stderr %" PRIu64, x->id, from[0], from[1]);

        now_wall = sbx_wall_ms();
        now = sbx_now_ms();
        r = exec_runner_loop(x, NULL, 0, rx, now - (now_wall - x->started_wall), now + (x->deadline_wall - now_wall),
                             &err);
        if (r == -ESHUTDOWN) {
                execution_persist(x);
                exec_mark_finished(x);
                return;
        }
        if (r < 0) {
                pthread_mutex_lock(&x->lock);
                snprintf(x->error, sizeof(x->error), "the daemon restarted while it ran and %s", err.msg);
                x->duration_ms = sbx_wall_ms() - x->started_wall;
                pthread_mutex_unlock(&x->lock);
                execution_set_state(x, EXEC_FAILED, EXEC_CAUSE_DAEMON_RESTARTED);
        }
        execution_persist(x);
        exec_audit(x);
        exec_forget_on_runner(x);
        exec_mark_finished(x);
}

void exec_registry_adopt(struct exec_registry *e)
{
        for (;;) {
                struct execution *x = NULL;
                int r;

                pthread_mutex_lock(&e->lock);
                for (struct execution *y = e->live; y && !x; y = y->next)
                        if (y->adopting && !y->has_worker)
                                x = y;
                if (x) {
                        x->has_worker = true;
                        x->refs++; /* the worker's */
                        e->workers++;
                }
                pthread_mutex_unlock(&e->lock);
                if (!x)
                        return;
                r = exec_worker_start(x);
                if (r < 0) { /* not left RUNNING, holding its slots until shutdown */
                        char why[120];

                        snprintf(why, sizeof(why), "no worker thread could be started for it: %s", strerror(-r));
                        adopt_give_up(x, why);
                        exec_worker_done(x);
                }
        }
}

int exec_registry_recover(struct exec_registry *e, size_t *ret_failed)
{
        const char *cause = exec_cause_to_string(EXEC_CAUSE_DAEMON_RESTARTED);
        _cleanup_free_ struct store_execution *rows = NULL;
        size_t n = 0, n_rows = 0, adopted = 0;
        int r;

        if (!e->runner) /* nothing can hold an execution across the restart */
                r = store_exec_fail_unfinished(e->store, cause, "the daemon restarted while it ran", sbx_wall_ms(), &n);
        else
                r = store_exec_fail_unadoptable(e->store, cause,
                                                "the daemon restarted while it ran (not on the runner)", sbx_wall_ms(),
                                                &n);
        if (r == 0 && n > 0)
                log_info("%zu executions were running when the daemon stopped: marked FAILED (daemon_restarted)", n);
        if (r == 0 && e->runner && store_exec_list_adoptable(e->store, &rows, &n_rows) == 0)
                for (size_t i = 0; i < n_rows; i++)
                        if (adopt_register(e, &rows[i]) == 0)
                                adopted++;
        if (adopted)
                log_info("%zu executions were running on their runners when the daemon stopped: adopting them",
                         adopted);
        if (ret_failed)
                *ret_failed = n;
        return r;
}
