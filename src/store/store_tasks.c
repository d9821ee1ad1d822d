/* store_tasks.c — typed queries of the mcp_tasks table (migration 0013):
 * the durable handles of the MCP tasks extension. Every read is scoped to
 * a user and skips expired rows, so another user's task and an expired one
 * look exactly like an unknown one. Locking as in store.c: every function
 * holds the store lock for its whole duration. */
#include <errno.h>
#include <string.h>

#include "store_internal.h"

#define TASK_COLUMNS                                                                                                   \
        "task_id, user_id, session_id, execution_id, tool, ttl_ms, poll_interval_ms, created_at, updated_at, "         \
        "expires_at, cancel_requested"

static void task_from_row(struct store_query *q, struct store_task *row)
{
        memset(row, 0, sizeof(*row));
        sq_col_text(q, 0, row->task_id, sizeof(row->task_id));
        sq_col_text(q, 1, row->user_id, sizeof(row->user_id));
        sq_col_text(q, 2, row->session_id, sizeof(row->session_id));
        sq_col_text(q, 3, row->execution_id, sizeof(row->execution_id));
        sq_col_text(q, 4, row->tool, sizeof(row->tool));
        row->ttl_ms = sq_col_int64(q, 5);
        row->poll_interval_ms = sq_col_int64(q, 6);
        row->created_at = sq_col_int64(q, 7);
        row->updated_at = sq_col_int64(q, 8);
        row->expires_at = sq_col_int64(q, 9);
        row->cancel_requested = sq_col_int64(q, 10) != 0;
}

static int purge_locked(struct store *s, int64_t now_ms)
{
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, "DELETE FROM mcp_tasks WHERE expires_at <= ?1");

        if (r < 0)
                return r;
        sq_int64(&q, now_ms);
        return sq_exec(&q);
}

int store_task_purge(struct store *s, int64_t now_ms)
{
        STORE_LOCK(s);
        return purge_locked(s, now_ms);
}

int store_task_add(struct store *s, const struct store_task *row, int64_t now_ms, size_t max_per_user, size_t max_total)
{
        STORE_LOCK(s);
        struct store_tx tx = {0};
        int64_t mine = 0, all = 0;
        int r;

        if (!row || strlen(row->task_id) < 16 || !store_key_ok(row->user_id) || !store_key_ok(row->session_id) ||
            !row->execution_id[0] || !row->tool[0] || row->ttl_ms <= 0 || row->poll_interval_ms <= 0)
                return -EINVAL;
        r = store_tx_begin(s, &tx);
        if (r < 0)
                return r;
        r = purge_locked(s, now_ms);
        if (r < 0)
                goto out;
        {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s, "SELECT count(*), coalesce(sum(user_id = ?1), 0) FROM mcp_tasks");
                if (r < 0)
                        goto out;
                sq_text(&q, row->user_id);
                r = sq_step(&q);
                if (r < 0)
                        goto out;
                all = sq_col_int64(&q, 0);
                mine = sq_col_int64(&q, 1);
        }
        if ((size_t)mine >= max_per_user || (size_t)all >= max_total) {
                r = -EDQUOT;
                goto out;
        }
        {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s,
                             "INSERT INTO mcp_tasks (" TASK_COLUMNS
                             ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 0)");
                if (r < 0)
                        goto out;
                sq_text(&q, row->task_id);
                sq_text(&q, row->user_id);
                sq_text(&q, row->session_id);
                sq_text(&q, row->execution_id);
                sq_text(&q, row->tool);
                sq_int64(&q, row->ttl_ms);
                sq_int64(&q, row->poll_interval_ms);
                sq_int64(&q, row->created_at);
                sq_int64(&q, row->created_at);
                sq_int64(&q, row->created_at + row->ttl_ms);
                r = sq_exec(&q);
                if (r < 0)
                        goto out;
        }
        r = store_tx_commit(&tx);
out:
        store_tx_rollbackp(&tx);
        return r < 0 ? r : 0;
}

int store_task_get(struct store *s, const char *user, const char *task_id, int64_t now_ms, struct store_task *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!user || !task_id || !ret)
                return -EINVAL;
        r = sq_start(&q, s,
                     "SELECT " TASK_COLUMNS " FROM mcp_tasks WHERE task_id = ?1 AND user_id = ?2 AND expires_at > ?3");
        if (r < 0)
                return r;
        sq_text(&q, task_id);
        sq_text(&q, user);
        sq_int64(&q, now_ms);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOENT;
        task_from_row(&q, ret);
        return 0;
}

int store_task_mark_cancel(struct store *s, const char *user, const char *task_id, int64_t now_ms)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!user || !task_id)
                return -EINVAL;
        r = sq_start(&q, s,
                     "UPDATE mcp_tasks SET cancel_requested = 1, updated_at = ?3 "
                     "WHERE task_id = ?1 AND user_id = ?2 AND expires_at > ?3");
        if (r < 0)
                return r;
        sq_text(&q, task_id);
        sq_text(&q, user);
        sq_int64(&q, now_ms);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        return r == 0 ? -ENOENT : 0;
}

int store_task_count(struct store *s, const char *user, int64_t now_ms, size_t *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!ret)
                return -EINVAL;
        r = sq_start(&q, s, "SELECT count(*) FROM mcp_tasks WHERE (?1 IS NULL OR user_id = ?1) AND expires_at > ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_int64(&q, now_ms);
        r = sq_step(&q);
        if (r < 0)
                return r;
        *ret = (size_t)sq_col_int64(&q, 0);
        return 0;
}
