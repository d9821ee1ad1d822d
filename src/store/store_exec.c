/* store_exec.c — typed queries of the executions table. Locking as in
 * store.c: every function holds the store lock for its whole duration. */
#include <errno.h>
#include <string.h>

#include "store_internal.h"

/* ---- executions ---- */

#define EXEC_COLUMNS                                                                                                   \
        "id, user_id, session_id, container_id, kind, command_preview, command_sha256, state, cause, error, "          \
        "spool_path, exit_code, stdout_bytes, stderr_bytes, stdout_spooled, stderr_spooled, truncated, "               \
        "created_at, finished_at, duration_ms, via, cpu_user_ms, cpu_system_ms, max_rss_kb, image, runtime, "          \
        "runner_version, started_at, runner_tag, deadline_at, spool_budget, actor, interactive, tty"

static void exec_from_row(struct store_query *q, void *p)
{
        struct store_execution *row = p;

        memset(row, 0, sizeof(*row));
        sq_col_text(q, 0, row->id, sizeof(row->id));
        sq_col_text(q, 1, row->user_id, sizeof(row->user_id));
        sq_col_text(q, 2, row->session_id, sizeof(row->session_id));
        sq_col_text(q, 3, row->container_id, sizeof(row->container_id));
        sq_col_text(q, 4, row->kind, sizeof(row->kind));
        sq_col_text(q, 5, row->command_preview, sizeof(row->command_preview));
        sq_col_text(q, 6, row->command_sha256, sizeof(row->command_sha256));
        sq_col_text(q, 7, row->state, sizeof(row->state));
        sq_col_text(q, 8, row->cause, sizeof(row->cause));
        sq_col_text(q, 9, row->error, sizeof(row->error));
        sq_col_text(q, 10, row->spool_path, sizeof(row->spool_path));
        row->exit_code = sqlite3_column_type(q->stmt, 11) == SQLITE_NULL ? -1 : (int)sq_col_int64(q, 11);
        row->stdout_bytes = sq_col_int64(q, 12);
        row->stderr_bytes = sq_col_int64(q, 13);
        row->stdout_spooled = sq_col_int64(q, 14);
        row->stderr_spooled = sq_col_int64(q, 15);
        row->truncated = sq_col_int64(q, 16) != 0;
        row->created_at = sq_col_int64(q, 17);
        row->finished_at = sq_col_int64(q, 18);
        row->duration_ms = sq_col_int64(q, 19);
        sq_col_text(q, 20, row->via, sizeof(row->via));
        for (int i = 0; i < 3; i++) {
                int64_t *usage[] = {&row->cpu_user_ms, &row->cpu_system_ms, &row->max_rss_kb};
                *usage[i] = sqlite3_column_type(q->stmt, 21 + i) == SQLITE_NULL ? -1 : sq_col_int64(q, 21 + i);
        }
        sq_col_text(q, 24, row->image, sizeof(row->image));
        sq_col_text(q, 25, row->runtime, sizeof(row->runtime));
        sq_col_text(q, 26, row->runner_version, sizeof(row->runner_version));
        row->started_at = sq_col_int64(q, 27);
        row->runner_tag = (uint32_t)sq_col_int64(q, 28);
        row->deadline_at = sq_col_int64(q, 29);
        row->spool_budget = sq_col_int64(q, 30);
        sq_col_text(q, 31, row->actor, sizeof(row->actor));
        row->interactive = sq_col_int64(q, 32) != 0;
        row->tty = sq_col_int64(q, 33) != 0;
}

static void bind_usage(struct store_query *q, int64_t v)
{
        if (v >= 0)
                sq_int64(q, v);
        else
                sq_text(q, NULL);
}

int store_exec_put(struct store *s, const struct store_execution *row)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!row || !row->id[0] || !store_key_ok(row->user_id) || !store_key_ok(row->session_id))
                return -EINVAL;
        r = sq_start(
                &q, s,
                "INSERT INTO executions (" EXEC_COLUMNS
                ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
                "?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34) "
                "ON CONFLICT (id) DO UPDATE SET container_id = excluded.container_id, state = excluded.state, "
                "cause = excluded.cause, error = excluded.error, exit_code = excluded.exit_code, "
                "stdout_bytes = excluded.stdout_bytes, stderr_bytes = excluded.stderr_bytes, "
                "stdout_spooled = excluded.stdout_spooled, stderr_spooled = excluded.stderr_spooled, "
                "truncated = excluded.truncated, finished_at = excluded.finished_at, "
                "duration_ms = excluded.duration_ms, via = excluded.via, cpu_user_ms = excluded.cpu_user_ms, "
                "cpu_system_ms = excluded.cpu_system_ms, max_rss_kb = excluded.max_rss_kb, "
                "image = excluded.image, runtime = excluded.runtime, runner_version = excluded.runner_version, "
                "started_at = excluded.started_at, runner_tag = excluded.runner_tag, "
                "deadline_at = excluded.deadline_at, spool_budget = excluded.spool_budget");
        if (r < 0)
                return r;
        sq_text(&q, row->id);
        sq_text(&q, row->user_id);
        sq_text(&q, row->session_id);
        sq_text_opt(&q, row->container_id);
        sq_text(&q, row->kind);
        sq_text_opt(&q, row->command_preview);
        sq_text_opt(&q, row->command_sha256);
        sq_text(&q, row->state);
        sq_text_opt(&q, row->cause);
        sq_text_opt(&q, row->error);
        sq_text_opt(&q, row->spool_path);
        if (row->exit_code >= 0)
                sq_int64(&q, row->exit_code);
        else
                sq_text(&q, NULL);
        sq_int64(&q, row->stdout_bytes);
        sq_int64(&q, row->stderr_bytes);
        sq_int64(&q, row->stdout_spooled);
        sq_int64(&q, row->stderr_spooled);
        sq_int64(&q, row->truncated ? 1 : 0);
        sq_int64(&q, row->created_at);
        if (row->finished_at > 0)
                sq_int64(&q, row->finished_at);
        else
                sq_text(&q, NULL);
        sq_int64(&q, row->duration_ms);
        sq_text_opt(&q, row->via);
        bind_usage(&q, row->cpu_user_ms);
        bind_usage(&q, row->cpu_system_ms);
        bind_usage(&q, row->max_rss_kb);
        sq_text_opt(&q, row->image);
        sq_text_opt(&q, row->runtime);
        sq_text_opt(&q, row->runner_version);
        bind_usage(&q, row->started_at > 0 ? row->started_at : -1);
        bind_usage(&q, row->runner_tag ? (int64_t)row->runner_tag : -1);
        bind_usage(&q, row->deadline_at > 0 ? row->deadline_at : -1);
        sq_int64(&q, row->spool_budget);
        sq_text_opt(&q, row->actor);
        sq_int64(&q, row->interactive ? 1 : 0);
        sq_int64(&q, row->tty ? 1 : 0);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_exec_get(struct store *s, const char *id, struct store_execution *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!id || !ret)
                return -EINVAL;
        r = sq_start(&q, s, "SELECT " EXEC_COLUMNS " FROM executions WHERE id = ?1");
        if (r < 0)
                return r;
        sq_text(&q, id);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOENT;
        exec_from_row(&q, ret);
        return 0;
}

static bool state_in(const char *state, const char *const *states)
{
        if (!states)
                return true;
        for (size_t i = 0; states[i]; i++)
                if (strcmp(states[i], state) == 0)
                        return true;
        return false;
}

/* The rows q yields whose state is in states, at most limit. Store lock held. */
static int exec_rows(struct store_query *q, const char *const *states, size_t limit, struct store_execution **ret,
                     size_t *ret_n)
{
        _cleanup_free_ struct store_execution *rows = NULL;
        size_t n = 0, cap = 0;
        int r = 0;

        while (n < limit && (r = sq_step(q)) > 0) {
                struct store_execution row;
                exec_from_row(q, &row);
                if (!state_in(row.state, states))
                        continue;
                struct store_execution *slot = store_array_push((void **)&rows, &n, &cap, sizeof(*rows));
                if (!slot)
                        return -ENOMEM;
                *slot = row;
        }
        if (r < 0)
                return r;
        *ret = TAKE_PTR(rows);
        *ret_n = n;
        return 0;
}

int store_exec_list(struct store *s, const char *user, const char *session, const char *const *states, size_t limit,
                    struct store_execution **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!user || !ret || !ret_n)
                return -EINVAL;
        /* The state filter is applied here rather than in SQL so the statement
         * stays one fixed, cached text. */
        r = sq_start(&q, s,
                     "SELECT " EXEC_COLUMNS
                     " FROM executions WHERE user_id = ?1 AND (?2 IS NULL OR session_id = ?2) "
                     "ORDER BY created_at DESC, id");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        return exec_rows(&q, states, limit, ret, ret_n);
}

int store_exec_list_finished(struct store *s, const char *user, const char *session, const char *const *states,
                             int64_t since_ms, size_t limit, struct store_execution **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!user || !ret || !ret_n)
                return -EINVAL;
        r = sq_start(&q, s,
                     "SELECT " EXEC_COLUMNS
                     " FROM executions WHERE user_id = ?1 AND finished_at >= ?3 AND "
                     "(?2 IS NULL OR session_id = ?2) ORDER BY finished_at DESC, id");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_int64(&q, since_ms);
        return exec_rows(&q, states, limit, ret, ret_n);
}

int store_exec_fail_unfinished(struct store *s, const char *cause, const char *error, int64_t now_ms, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        r = sq_start(&q, s,
                     "UPDATE executions SET state = 'FAILED', cause = ?1, error = ?2, finished_at = ?3, "
                     "duration_ms = MAX(0, ?3 - created_at) WHERE state IN ('PENDING', 'RUNNING')");
        if (r < 0)
                return r;
        sq_text(&q, cause);
        sq_text(&q, error);
        sq_int64(&q, now_ms);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        if (ret_n)
                *ret_n = (size_t)r;
        return 0;
}

int store_exec_fail_unadoptable(struct store *s, const char *cause, const char *error, int64_t now_ms, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        r = sq_start(&q, s,
                     "UPDATE executions SET state = 'FAILED', cause = ?1, error = ?2, finished_at = ?3, "
                     "duration_ms = MAX(0, ?3 - created_at) WHERE state IN ('PENDING', 'RUNNING') AND "
                     "(state = 'PENDING' OR runner_tag IS NULL)");
        if (r < 0)
                return r;
        sq_text(&q, cause);
        sq_text(&q, error);
        sq_int64(&q, now_ms);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        if (ret_n)
                *ret_n = (size_t)r;
        return 0;
}

int store_exec_list_adoptable(struct store *s, struct store_execution **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        r = sq_start(&q, s,
                     "SELECT " EXEC_COLUMNS
                     " FROM executions WHERE state = 'RUNNING' AND runner_tag IS NOT NULL "
                     "ORDER BY created_at, id");
        if (r < 0)
                return r;
        return SQ_COLLECT(&q, exec_from_row, ret, ret_n);
}

int store_exec_clear_spool(struct store *s, const char *id)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s,
                         "UPDATE executions SET spool_path = NULL, stdout_spooled = 0, stderr_spooled = 0 "
                         "WHERE id = ?1");
        if (r < 0)
                return r;
        sq_text(&q, id);
        r = sq_exec(&q);
        return r < 0 ? r : r == 0 ? -ENOENT : 0;
}
