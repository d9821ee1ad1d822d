/* store_snapshot.c — the store's queries for workspace snapshots (table
 * snapshots, migration 0029; store_snapshot.h). The quota check and the
 * insert of store_snapshot_reserve run under one hold of the store lock,
 * so two snapshots of one user cannot both pass the last free place.
 * Locking: the store lock (STORE_LOCK), as everywhere in the store. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/store_snapshot.h"
#include "store_internal.h"

#define COLS                                                                                                           \
        "id, user_id, session_id, COALESCE(name, ''), kind, state, bytes, workspace_size, meta_json, datasets_json, "  \
        "private, created_at"

void store_snapshot_done(struct store_snapshot *s)
{
        if (!s)
                return;
        free(s->meta_json);
        free(s->datasets_json);
        s->meta_json = s->datasets_json = NULL;
}

void store_snapshot_list_free(struct store_snapshot *list, size_t n)
{
        for (size_t i = 0; list && i < n; i++)
                store_snapshot_done(&list[i]);
        free(list);
}

static int read_row(struct store_query *q, struct store_snapshot *ret)
{
        const unsigned char *t;

        memset(ret, 0, sizeof(*ret));
        sq_col_text(q, 0, ret->id, sizeof(ret->id));
        sq_col_text(q, 1, ret->user, sizeof(ret->user));
        sq_col_text(q, 2, ret->session, sizeof(ret->session));
        sq_col_text(q, 3, ret->name, sizeof(ret->name));
        sq_col_text(q, 4, ret->kind, sizeof(ret->kind));
        sq_col_text(q, 5, ret->state, sizeof(ret->state));
        ret->bytes = sq_col_int64(q, 6);
        ret->workspace_size = sq_col_int64(q, 7);
        t = sqlite3_column_text(q->stmt, 8);
        ret->meta_json = strdup(t ? (const char *)t : "{}");
        t = sqlite3_column_text(q->stmt, 9);
        ret->datasets_json = t ? strdup((const char *)t) : NULL;
        ret->private_ = sq_col_int64(q, 10) != 0;
        ret->created_at = sq_col_int64(q, 11);
        if (!ret->meta_json || (t && !ret->datasets_json)) {
                store_snapshot_done(ret);
                return -ENOMEM;
        }
        return 0;
}

static int usage_locked(struct store *s, const char *user, int64_t *ret_count, int64_t *ret_bytes)
{
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        r = sq_start(&q, s, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM snapshots WHERE user_id = ?1");
        if (r < 0)
                return r;
        sq_text(&q, user);
        r = sq_step(&q);
        if (r <= 0)
                return r < 0 ? r : -EIO;
        *ret_count = sq_col_int64(&q, 0);
        *ret_bytes = sq_col_int64(&q, 1);
        return 0;
}

int store_snapshot_usage(struct store *s, const char *user, int64_t *ret_count, int64_t *ret_bytes)
{
        STORE_LOCK(s);

        if (!store_key_ok(user))
                return -EINVAL;
        return usage_locked(s, user, ret_count, ret_bytes);
}

int store_snapshot_reserve(struct store *s, const struct store_snapshot *row, int64_t max_count, int64_t max_bytes,
                           int64_t *ret_count, int64_t *ret_bytes)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int64_t count, bytes;
        int r;

        if (!store_key_ok(row->user) || !store_key_ok(row->session))
                return -EINVAL;
        r = usage_locked(s, row->user, &count, &bytes);
        if (r < 0)
                return r;
        *ret_count = count;
        *ret_bytes = bytes;
        if (count >= max_count || bytes >= max_bytes)
                return -EDQUOT;
        r = sq_start(&q, s,
                     "INSERT INTO snapshots (id, user_id, session_id, name, kind, state, bytes, workspace_size, "
                     "meta_json, datasets_json, private, created_at) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, 'creating', 0, ?6, ?7, ?8, ?9, ?10)");
        if (r < 0)
                return r;
        sq_text(&q, row->id);
        sq_text(&q, row->user);
        sq_text(&q, row->session);
        sq_text_opt(&q, row->name);
        sq_text(&q, row->kind);
        sq_int64(&q, row->workspace_size);
        sq_text(&q, row->meta_json ? row->meta_json : "{}");
        sq_text_opt(&q, row->datasets_json);
        sq_int64(&q, row->private_ ? 1 : 0);
        sq_int64(&q, row->created_at);
        r = sq_exec(&q);
        if (r == -EEXIST || r == -EBUSY)
                return r;
        return r < 0 ? r : 0;
}

int store_snapshot_ready(struct store *s, const char *user, const char *id, int64_t bytes, int64_t workspace_size,
                         const char *datasets_json)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        r = sq_start(&q, s,
                     "UPDATE snapshots SET state = 'ready', bytes = ?3, workspace_size = ?4, datasets_json = ?5, "
                     "private = ?5 IS NOT NULL WHERE user_id = ?1 AND id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, id);
        sq_int64(&q, bytes);
        sq_int64(&q, workspace_size);
        sq_text_opt(&q, datasets_json);
        r = sq_exec(&q);
        return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

int store_snapshot_get(struct store *s, const char *user, const char *id_or_name, struct store_snapshot *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user))
                return -EINVAL;
        r = sq_start(&q, s, "SELECT " COLS " FROM snapshots WHERE user_id = ?1 AND (id = ?2 OR name = ?2)");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, id_or_name);
        r = sq_step(&q);
        if (r <= 0)
                return r < 0 ? r : -ENOENT;
        return read_row(&q, ret);
}

static int list_rows(struct store_query *q, size_t limit, struct store_snapshot **ret, size_t *ret_n)
{
        struct store_snapshot *list = NULL;
        size_t n = 0, cap = 0;
        int r = 0;

        while (n < limit && (r = sq_step(q)) > 0) {
                struct store_snapshot *row = store_array_push((void **)&list, &n, &cap, sizeof(*list));
                if (!row || read_row(q, row) < 0) {
                        if (row)
                                n--;
                        store_snapshot_list_free(list, n);
                        return -ENOMEM;
                }
        }
        if (n < limit && r < 0) {
                store_snapshot_list_free(list, n);
                return r;
        }
        *ret = list;
        *ret_n = n;
        return 0;
}

int store_snapshot_list(struct store *s, const char *user, size_t limit, struct store_snapshot **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (user && !store_key_ok(user))
                return -EINVAL;
        r = sq_start(&q, s,
                     "SELECT " COLS
                     " FROM snapshots WHERE ?1 IS NULL OR user_id = ?1 "
                     "ORDER BY created_at DESC, id");
        if (r < 0)
                return r;
        sq_text(&q, user);
        return list_rows(&q, limit, ret, ret_n);
}

int store_snapshot_list_older(struct store *s, int64_t before_ms, int64_t stale_ms, size_t limit,
                              struct store_snapshot **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        r = sq_start(&q, s,
                     "SELECT " COLS
                     " FROM snapshots WHERE created_at < ?1 OR (state = 'creating' AND created_at < ?2) "
                     "ORDER BY created_at, id");
        if (r < 0)
                return r;
        sq_int64(&q, before_ms);
        sq_int64(&q, stale_ms);
        return list_rows(&q, limit, ret, ret_n);
}

int store_snapshot_delete(struct store *s, const char *user, const char *id)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user))
                return -EINVAL;
        r = sq_start(&q, s, "DELETE FROM snapshots WHERE user_id = ?1 AND id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, id);
        r = sq_exec(&q);
        return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

int store_snapshot_set_paused(struct store *s, const char *user, const char *id, const char *container_id)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        r = sq_start(&q, s, "UPDATE snapshots SET paused = ?3 WHERE user_id = ?1 AND id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, id);
        sq_text_opt(&q, container_id);
        r = sq_exec(&q);
        return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

int store_snapshot_unfinished(struct store *s, size_t limit, struct store_snapshot_unfinished **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        struct store_snapshot_unfinished *list = NULL;
        size_t n = 0, cap = 0;
        int r;

        r = sq_start(&q, s,
                     "SELECT user_id, id, COALESCE(paused, '') FROM snapshots WHERE state = 'creating' ORDER BY id");
        if (r < 0)
                return r;
        while (n < limit && (r = sq_step(&q)) > 0) {
                struct store_snapshot_unfinished *row = store_array_push((void **)&list, &n, &cap, sizeof(*list));
                if (!row) {
                        free(list);
                        return -ENOMEM;
                }
                sq_col_text(&q, 0, row->user, sizeof(row->user));
                sq_col_text(&q, 1, row->id, sizeof(row->id));
                sq_col_text(&q, 2, row->paused, sizeof(row->paused));
        }
        if (r < 0 && n < limit) {
                free(list);
                return r;
        }
        *ret = list;
        *ret_n = n;
        return 0;
}
