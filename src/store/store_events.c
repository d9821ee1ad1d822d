/* store_events.c — typed queries of the event log (migration 0027): append,
 * read after an id, bounds, prune, reader cursors. Locking as in store.c:
 * every function holds the store lock for its whole duration, so an append
 * of several events is seen whole or not at all. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/store_events.h"
#include "store_internal.h"

void store_events_free(struct store_event *rows, size_t n)
{
        if (!rows)
                return;
        for (size_t i = 0; i < n; i++)
                free(rows[i].data);
        free(rows);
}

int store_events_append(struct store *s, struct store_event *rows, size_t n)
{
        STORE_LOCK(s);
        _cleanup_(store_tx_rollbackp) struct store_tx tx = {};
        int r;

        if (!rows)
                return -EINVAL;
        for (size_t i = 0; i < n; i++)
                if (!rows[i].type[0] || !store_key_ok(rows[i].user_id))
                        return -EINVAL;
        r = store_tx_begin(s, &tx);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s,
                             "INSERT INTO events (ts, type, user_id, session_id, trace_id, data) "
                             "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
                if (r < 0)
                        return r;
                sq_int64(&q, rows[i].ts);
                sq_text(&q, rows[i].type);
                sq_text(&q, rows[i].user_id);
                sq_text(&q, rows[i].session_id);
                sq_text(&q, rows[i].trace_id);
                sq_text(&q, rows[i].data ? rows[i].data : "{}");
                r = sq_exec(&q);
                if (r < 0)
                        return r;
                rows[i].id = (int64_t)sqlite3_last_insert_rowid(s->db);
        }
        return store_tx_commit(&tx);
}

int store_events_after(struct store *s, const char *user, int64_t after_id, size_t limit, struct store_event **ret,
                       size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        struct store_event *rows = NULL;
        size_t n = 0, cap = 0;
        int r;

        if (!ret || !ret_n || (user && !store_key_ok(user)))
                return -EINVAL;
        /* two statements rather than "?1 IS NULL OR": each keeps its index */
        if (user)
                r = sq_start(&q, s,
                             "SELECT id, ts, type, user_id, session_id, trace_id, data FROM events "
                             "WHERE user_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3");
        else
                r = sq_start(&q, s,
                             "SELECT id, ts, type, user_id, session_id, trace_id, data FROM events "
                             "WHERE id > ?1 ORDER BY id LIMIT ?2");
        if (r < 0)
                return r;
        if (user)
                sq_text(&q, user);
        sq_int64(&q, after_id);
        sq_int64(&q, (int64_t)limit);
        while ((r = sq_step(&q)) > 0) {
                struct store_event *row = store_array_push((void **)&rows, &n, &cap, sizeof(*rows));
                const unsigned char *data;

                if (!row) {
                        r = -ENOMEM;
                        break;
                }
                memset(row, 0, sizeof(*row));
                row->id = sq_col_int64(&q, 0);
                row->ts = sq_col_int64(&q, 1);
                sq_col_text(&q, 2, row->type, sizeof(row->type));
                sq_col_text(&q, 3, row->user_id, sizeof(row->user_id));
                sq_col_text(&q, 4, row->session_id, sizeof(row->session_id));
                sq_col_text(&q, 5, row->trace_id, sizeof(row->trace_id));
                data = sqlite3_column_text(q.stmt, 6);
                row->data = strdup(data ? (const char *)data : "{}");
                if (!row->data) {
                        r = -ENOMEM;
                        break;
                }
        }
        if (r < 0) {
                store_events_free(rows, n);
                return r;
        }
        *ret = rows;
        *ret_n = n;
        return 0;
}

int store_events_bounds(struct store *s, int64_t *ret_oldest, int64_t *ret_newest)
{
        STORE_LOCK(s);
        int64_t oldest = 0, newest = 0;
        int r;

        {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s, "SELECT coalesce(min(id), 0) FROM events");
                if (r < 0)
                        return r;
                r = sq_step(&q);
                if (r < 0)
                        return r;
                oldest = sq_col_int64(&q, 0);
        }
        {
                /* AUTOINCREMENT keeps the newest id ever given here, even once its row is gone */
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s, "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'events'");
                if (r < 0)
                        return r;
                r = sq_step(&q);
                if (r < 0)
                        return r;
                newest = sq_col_int64(&q, 0);
        }
        *ret_oldest = oldest ? oldest : newest + 1;
        *ret_newest = newest;
        return 0;
}

int store_events_prune(struct store *s, int64_t max_count, int64_t before_ms, bool dry_run)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (max_count < 0)
                return -EINVAL;
        if (dry_run)
                r = sq_start(&q, s,
                             "SELECT count(*) FROM events WHERE ts < ?1 OR "
                             "id <= (SELECT coalesce(max(id), 0) FROM events) - ?2");
        else
                r = sq_start(&q, s,
                             "DELETE FROM events WHERE ts < ?1 OR "
                             "id <= (SELECT coalesce(max(id), 0) FROM events) - ?2");
        if (r < 0)
                return r;
        sq_int64(&q, before_ms);
        sq_int64(&q, max_count);
        if (!dry_run)
                return sq_exec(&q);
        r = sq_step(&q);
        return r < 0 ? r : (int)sq_col_int64(&q, 0);
}

int store_event_cursor_get(struct store *s, const char *name, int64_t *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, "SELECT last_id FROM event_cursors WHERE name = ?1");

        if (r < 0)
                return r;
        sq_text(&q, name);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOENT;
        *ret = sq_col_int64(&q, 0);
        return 0;
}

int store_event_cursor_set(struct store *s, const char *name, int64_t last_id, int64_t now_ms)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(
                &q, s,
                "INSERT INTO event_cursors (name, last_id, updated_at) VALUES (?1, ?2, ?3) "
                "ON CONFLICT (name) DO UPDATE SET last_id = excluded.last_id, updated_at = excluded.updated_at");

        if (r < 0)
                return r;
        sq_text(&q, name);
        sq_int64(&q, last_id);
        sq_int64(&q, now_ms);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}
