/* exec_results.c — reading executions: one result (long-polled while it
 * runs, by offset or head and tail of each stream), lists, and the spool
 * files their output is kept in (see exec.h for the contract).
 *
 * A live execution is read from memory under x->lock (its row may lag
 * behind); one that has ended, from its row and its spool files, which
 * are the truth for what was kept when the row was written before the
 * daemon died. Locks: x->lock only, taken through a reference from
 * execution_find_ref (exec_internal.h); no file or store I/O under it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "exec_internal.h"
#include "sandboxd/events.h"
#include "sandboxd/store.h"

#define MAX_WAIT_MS 60000 /* the longest long-poll of exec_status */

void exec_result_done(struct exec_result *r)
{
        if (!r)
                return;
        free(r->stdout_head);
        free(r->stdout_tail);
        free(r->stderr_head);
        free(r->stderr_tail);
        r->stdout_head = r->stdout_tail = r->stderr_head = r->stderr_tail = NULL;
}

void exec_result_list_free(struct exec_result *list, size_t n)
{
        for (size_t i = 0; list && i < n; i++)
                exec_result_done(&list[i]);
        free(list);
}

/* Read up to len bytes at off from a spool file into a malloc'd buffer. */
static int read_spool(const char *path, uint64_t off, size_t len, char **ret, size_t *ret_len)
{
        _cleanup_close_ int fd = -1;
        char *buf = malloc(len + 1);
        size_t got = 0;

        if (!buf)
                return -ENOMEM;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        while (fd >= 0 && got < len) {
                ssize_t n = pread(fd, buf + got, len - got, (off_t)(off + got));
                if (n <= 0)
                        break;
                got += (size_t)n;
        }
        buf[got] = '\0';
        *ret = buf;
        *ret_len = got;
        return 0;
}

static void fill_output(struct exec_result *res, const char *spool_base_stdout, uint64_t spooled[2], int64_t offsets[2],
                        size_t max_bytes, size_t head_bytes)
{
        char path[2][SBX_PATH_MAX + 64];
        char **head[2] = {&res->stdout_head, &res->stderr_head};
        char **tail[2] = {&res->stdout_tail, &res->stderr_tail};
        size_t *head_len[2] = {&res->stdout_head_len, &res->stderr_head_len};
        size_t *tail_len[2] = {&res->stdout_tail_len, &res->stderr_tail_len};
        uint64_t *off_out[2] = {&res->stdout_offset, &res->stderr_offset};
        uint64_t totals[2] = {res->stdout_bytes, res->stderr_bytes};
        size_t base_len = strlen(spool_base_stdout);

        /* the stderr spool is the stdout path with its suffix swapped */
        snprintf(path[0], sizeof(path[0]), "%s", spool_base_stdout);
        snprintf(path[1], sizeof(path[1]), "%.*sstderr", (int)(base_len > 6 ? base_len - 6 : 0), spool_base_stdout);
        for (int k = 0; k < 2; k++) {
                if (totals[k] > spooled[k])
                        res->truncated = true;
                if (offsets[k] >= 0) {
                        uint64_t off = (uint64_t)offsets[k] < spooled[k] ? (uint64_t)offsets[k] : spooled[k];
                        size_t len = spooled[k] - off < max_bytes ? (size_t)(spooled[k] - off) : max_bytes;
                        *off_out[k] = off;
                        (void)read_spool(path[k], off, len, head[k], head_len[k]);
                        if (off + len < spooled[k])
                                res->truncated = true;
                        *tail[k] = calloc(1, 1);
                } else if (spooled[k] <= 2 * head_bytes) {
                        (void)read_spool(path[k], 0, (size_t)spooled[k], head[k], head_len[k]);
                        *tail[k] = calloc(1, 1);
                } else {
                        (void)read_spool(path[k], 0, head_bytes, head[k], head_len[k]);
                        (void)read_spool(path[k], spooled[k] - head_bytes, head_bytes, tail[k], tail_len[k]);
                        res->truncated = true;
                }
        }
}

static void result_from_live(struct execution *x, struct exec_result *res, uint64_t spooled[2])
{
        memset(res, 0, sizeof(*res));
        res->recorded = x->finished;
        memcpy(res->id, x->id, sizeof(res->id));
        sbx_strlcpy(res->user, x->user, sizeof(res->user));
        sbx_strlcpy(res->session, x->session, sizeof(res->session));
        sbx_strlcpy(res->command_preview, x->preview, sizeof(res->command_preview));
        sbx_strlcpy(res->error, x->error, sizeof(res->error));
        res->state = x->state;
        res->cause = x->cause;
        res->exit_code = x->exit_code;
        res->created_at = x->created_at;
        res->duration_ms = exec_state_is_final(x->state) ? x->duration_ms : sbx_wall_ms() - x->created_at;
        res->stdout_bytes = x->total[0];
        res->stderr_bytes = x->total[1];
        spooled[0] = x->spooled[0];
        spooled[1] = x->spooled[1];
        sbx_strlcpy(res->via, x->via, sizeof(res->via));
        res->tty = x->tty;
        res->cpu_user_ms = x->have_usage ? (int64_t)x->usage.cpu_user_ms : -1;
        res->cpu_system_ms = x->have_usage ? (int64_t)x->usage.cpu_system_ms : -1;
        res->max_rss_kb = x->have_usage ? (int64_t)x->usage.max_rss_kb : -1;
        sbx_strlcpy(res->image, x->image, sizeof(res->image));
        sbx_strlcpy(res->runtime, x->runtime, sizeof(res->runtime));
        sbx_strlcpy(res->runner_version, x->runner_version, sizeof(res->runner_version));
}

static void result_from_row(const struct store_execution *row, struct exec_result *res, uint64_t spooled[2])
{
        memset(res, 0, sizeof(*res));
        res->recorded = true;
        sbx_strlcpy(res->id, row->id, sizeof(res->id));
        sbx_strlcpy(res->user, row->user_id, sizeof(res->user));
        sbx_strlcpy(res->session, row->session_id, sizeof(res->session));
        sbx_strlcpy(res->command_preview, row->command_preview, sizeof(res->command_preview));
        sbx_strlcpy(res->error, row->error, sizeof(res->error));
        (void)exec_state_from_string(row->state, &res->state);
        res->cause = exec_cause_from_string(row->cause);
        res->exit_code = row->exit_code;
        res->created_at = row->created_at;
        res->duration_ms = row->duration_ms;
        res->stdout_bytes = (uint64_t)row->stdout_bytes;
        res->stderr_bytes = (uint64_t)row->stderr_bytes;
        spooled[0] = (uint64_t)row->stdout_spooled;
        spooled[1] = (uint64_t)row->stderr_spooled;
        sbx_strlcpy(res->via, row->via, sizeof(res->via));
        res->tty = row->tty;
        res->cpu_user_ms = row->cpu_user_ms;
        res->cpu_system_ms = row->cpu_system_ms;
        res->max_rss_kb = row->max_rss_kb;
        sbx_strlcpy(res->image, row->image, sizeof(res->image));
        sbx_strlcpy(res->runtime, row->runtime, sizeof(res->runtime));
        sbx_strlcpy(res->runner_version, row->runner_version, sizeof(res->runner_version));
}

/* A row written before the daemon died may lag behind its spool: the files
 * are the truth for what was kept. */
static void spool_sizes(const char *stdout_spool, struct exec_result *res, uint64_t spooled[2])
{
        size_t n = strlen(stdout_spool);
        char path[SBX_PATH_MAX + 64];
        uint64_t *totals[2] = {&res->stdout_bytes, &res->stderr_bytes};
        struct stat st;

        if (n < 6)
                return;
        for (int k = 0; k < 2; k++) {
                snprintf(path, sizeof(path), "%.*s%s", (int)(n - 6), stdout_spool, k ? "stderr" : "stdout");
                if (stat(path, &st) == 0 && (uint64_t)st.st_size > spooled[k])
                        spooled[k] = (uint64_t)st.st_size;
                if (*totals[k] < spooled[k])
                        *totals[k] = spooled[k];
        }
}

int exec_status(struct exec_registry *e, const char *user, const char *id, int64_t stdout_offset, int64_t stderr_offset,
                size_t max_bytes, int wait_ms, struct exec_result *ret, struct sbx_error *err)
{
        struct execution *x = execution_find_ref(e, user, id);
        int64_t offsets[2] = {stdout_offset, stderr_offset};
        uint64_t spooled[2];
        char spool[SBX_PATH_MAX + 64];

        if (wait_ms > MAX_WAIT_MS)
                wait_ms = MAX_WAIT_MS;
        if (max_bytes == 0 || max_bytes > (size_t)e->cfg->exec_result_head_bytes * 2)
                max_bytes = (size_t)e->cfg->exec_result_head_bytes * 2;
        if (x) {
                struct timespec until = sbx_deadline_after(CLOCK_REALTIME, wait_ms);
                pthread_mutex_lock(&x->lock);
                /* long-poll: until its end is recorded (finish(): the final row
                 * and the audit row), or output past the caller's offsets arrives */
                while (wait_ms > 0 && !x->finished &&
                       !(stdout_offset >= 0 && x->spooled[0] > (uint64_t)stdout_offset) &&
                       !(stderr_offset >= 0 && x->spooled[1] > (uint64_t)stderr_offset))
                        if (pthread_cond_timedwait(&x->cond, &x->lock, &until) == ETIMEDOUT)
                                break;
                result_from_live(x, ret, spooled);
                pthread_mutex_unlock(&x->lock);
                sbx_strlcpy(spool, x->spool[0], sizeof(spool));
                execution_unref(x);
        } else {
                struct store_execution row;
                int r = store_exec_get(e->store, id, &row);
                if (r < 0 || strcmp(row.user_id, user) != 0)
                        return sbx_error_set(err, -ENOENT, 0, "no execution %s", id);
                result_from_row(&row, ret, spooled);
                sbx_strlcpy(spool, row.spool_path, sizeof(spool));
                spool_sizes(spool, ret, spooled);
        }
        fill_output(ret, spool, spooled, offsets, max_bytes, (size_t)e->cfg->exec_result_head_bytes);
        return 0;
}

int exec_list(struct exec_registry *e, const char *user, const char *session, unsigned states_mask, size_t limit,
              struct exec_result **ret, size_t *ret_n)
{
        return exec_list_finished(e, user, session, states_mask, -1, limit, ret, ret_n);
}

/* Does r belong in a list of states_mask (0: all) that ended at or after
 * finished_since_ms (-1: any)? The same test as the store's query, on the
 * state the list will show. */
static bool list_wants(const struct exec_result *r, unsigned states_mask, int64_t finished_since_ms)
{
        if (states_mask && !(states_mask & (1u << r->state)))
                return false;
        return finished_since_ms < 0 ||
               (exec_state_is_final(r->state) && r->created_at + r->duration_ms >= finished_since_ms);
}

/* Newest first: by end for a list of recent ends, else by start (the store's order). */
static int by_created_desc(const void *a, const void *b)
{
        const struct exec_result *x = a, *y = b;
        return x->created_at < y->created_at ? 1 : x->created_at > y->created_at ? -1 : strcmp(x->id, y->id);
}

static int by_finished_desc(const void *a, const void *b)
{
        const struct exec_result *x = a, *y = b;
        int64_t fx = x->created_at + x->duration_ms, fy = y->created_at + y->duration_ms;
        return fx < fy ? 1 : fx > fy ? -1 : strcmp(x->id, y->id);
}

int exec_list_finished(struct exec_registry *e, const char *user, const char *session, unsigned states_mask,
                       int64_t within_ms, size_t limit, struct exec_result **ret, size_t *ret_n)
{
        /* finished_at is created_at (wall) + duration: CLOCK_MONOTONIC here took the
         * host's uptime for a date, and listed running ones when uptime < within_ms */
        int64_t finished_since_ms = within_ms < 0 ? -1 : sbx_wall_ms() - within_ms;
        _cleanup_free_ struct store_execution *rows = NULL;
        _cleanup_free_ struct execution **live = NULL;
        const char *states[EXEC_STATE_COUNT + 1] = {0};
        struct exec_result *out;
        size_t n = 0, n_states = 0, n_live = 0, n_out = 0;
        int r;

        if (within_ms >= 0 && finished_since_ms < 0)
                finished_since_ms = 0;
        if (!limit)
                limit = 100;
        /* A live execution is shown as it stands now, and its row may lag
         * behind (the worker writes the final row after the state is set and
         * the waiters are told). The list is filtered on what it shows: the
         * live ones are taken with a reference first, then the rows (as many
         * more as there are live ones, which the filter may drop), then the
         * live ones whose row does not match yet are added. */
        pthread_mutex_lock(&e->lock);
        for (struct execution *x = e->live; x; x = x->next)
                n_live++;
        live = calloc(n_live + 1, sizeof(*live));
        n_live = 0;
        for (struct execution *x = e->live; live && x; x = x->next)
                if (strcmp(x->user, user) == 0 && (!session || strcmp(x->session, session) == 0)) {
                        x->refs++;
                        live[n_live++] = x;
                }
        pthread_mutex_unlock(&e->lock);
        if (!live)
                return -ENOMEM;

        for (int i = 0; i < EXEC_STATE_COUNT; i++)
                if (states_mask & (1u << i))
                        states[n_states++] = exec_state_to_string((enum exec_state)i);
        if (finished_since_ms >= 0)
                r = store_exec_list_finished(e->store, user, session, states_mask ? states : NULL, finished_since_ms,
                                             limit + n_live, &rows, &n);
        else
                r = store_exec_list(e->store, user, session, states_mask ? states : NULL, limit + n_live, &rows, &n);
        out = r < 0 ? NULL : calloc(n + n_live + 1, sizeof(*out));
        if (r == 0 && !out)
                r = -ENOMEM;
        for (size_t i = 0; out && i < n + n_live; i++) {
                struct execution *x = NULL;
                uint64_t spooled[2];

                if (i < n) {
                        for (size_t j = 0; j < n_live && !x; j++)
                                if (live[j] && strcmp(live[j]->id, rows[i].id) == 0) {
                                        x = live[j];
                                        live[j] = NULL; /* listed by its row: not again below */
                                }
                } else if ((x = live[i - n]))
                        live[i - n] = NULL;
                else
                        continue;
                if (x) {
                        pthread_mutex_lock(&x->lock);
                        result_from_live(x, &out[n_out], spooled);
                        pthread_mutex_unlock(&x->lock);
                        execution_unref(x);
                } else
                        result_from_row(&rows[i], &out[n_out], spooled);
                if (list_wants(&out[n_out], states_mask, finished_since_ms))
                        n_out++;
                else
                        exec_result_done(&out[n_out]);
        }
        for (size_t j = 0; j < n_live; j++)
                execution_unref(live[j]);
        if (r < 0)
                return r;
        qsort(out, n_out, sizeof(*out), finished_since_ms >= 0 ? by_finished_desc : by_created_desc);
        for (size_t i = limit; i < n_out; i++)
                exec_result_done(&out[i]);
        *ret = out;
        *ret_n = n_out < limit ? n_out : limit;
        return 0;
}

void exec_note_final(struct execution *x)
{
        events_execution_finished(x->user, x->session, x->id, exec_state_to_string(x->state),
                                  exec_cause_to_string(x->cause), x->exit_code, x->duration_ms);
}

/* ---- totals (exec_totals) ---- */

const int64_t exec_duration_bucket_ms[EXEC_DURATION_BUCKETS] = {10,   25,   50,    100,   250,   500,   1000,
                                                                2500, 5000, 10000, 30000, 60000, 300000};
static struct exec_totals totals; /* relaxed atomics */

void exec_count_final(enum exec_state st, enum exec_cause cause, int64_t duration_ms)
{
        size_t b = 0;

        if ((unsigned)st >= EXEC_STATE_COUNT || (unsigned)cause >= EXEC_CAUSE_COUNT)
                return;
        if (duration_ms < 0)
                duration_ms = 0;
        __atomic_add_fetch(&totals.finished[st][cause], 1, __ATOMIC_RELAXED);
        while (b < EXEC_DURATION_BUCKETS && duration_ms > exec_duration_bucket_ms[b])
                b++;
        __atomic_add_fetch(&totals.bucket[b], 1, __ATOMIC_RELAXED); /* cumulated by the reader */
        __atomic_add_fetch(&totals.sum_ms, (uint64_t)duration_ms, __ATOMIC_RELAXED);
}

void exec_totals(struct exec_totals *ret)
{
        for (size_t i = 0; i < EXEC_STATE_COUNT; i++)
                for (size_t j = 0; j < EXEC_CAUSE_COUNT; j++)
                        ret->finished[i][j] = __atomic_load_n(&totals.finished[i][j], __ATOMIC_RELAXED);
        for (size_t b = 0; b <= EXEC_DURATION_BUCKETS; b++)
                ret->bucket[b] = __atomic_load_n(&totals.bucket[b], __ATOMIC_RELAXED);
        ret->sum_ms = __atomic_load_n(&totals.sum_ms, __ATOMIC_RELAXED);
}
