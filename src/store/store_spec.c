/* store_spec.c — the store's queries for a session's spec (table
 * session_spec, migration 0026): the labels and the resources it was
 * created with. Every query is keyed by the user, so one user's rows are
 * never visible to another (the metrics' count of labels reads them all).
 * Locking: the store lock (STORE_LOCK), as everywhere in the store. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/store.h"
#include "store_internal.h"

static char *col_dup(struct store_query *q, int col)
{
        const unsigned char *t = sqlite3_column_text(q->stmt, col);
        return t ? strdup((const char *)t) : NULL;
}

void store_session_spec_done(struct store_session_spec *o)
{
        if (!o)
                return;
        free(o->labels_json);
        o->labels_json = NULL;
}

/* Under the store lock. */
static int spec_get_locked(struct store *s, const char *user, const char *session, struct store_session_spec *ret)
{
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        r = sq_start(&q, s,
                     "SELECT labels_json, nano_cpus, memory, disk, created_at FROM session_spec "
                     "WHERE user_id = ?1 AND session_id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_step(&q);
        if (r <= 0)
                return r < 0 ? r : -ENOENT;
        memset(ret, 0, sizeof(*ret));
        ret->labels_json = col_dup(&q, 0);
        if (!ret->labels_json && sqlite3_column_type(q.stmt, 0) != SQLITE_NULL)
                return -ENOMEM;
        ret->nano_cpus = sq_col_int64(&q, 1);
        ret->memory = sq_col_int64(&q, 2);
        ret->disk = sq_col_int64(&q, 3);
        ret->created_at = sq_col_int64(&q, 4);
        return 0;
}

int store_session_spec_claim(struct store *s, const char *user, const char *session,
                             const struct store_session_spec *want, struct store_session_spec *ret, bool *ret_inserted)
{
        STORE_LOCK(s);
        int r;

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s,
                             "INSERT OR IGNORE INTO session_spec (user_id, session_id, labels_json, nano_cpus, memory, "
                             "disk, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
                if (r < 0)
                        return r;
                sq_text(&q, user);
                sq_text(&q, session);
                sq_text_opt(&q, want->labels_json);
                sq_int64(&q, want->nano_cpus);
                sq_int64(&q, want->memory);
                sq_int64(&q, want->disk);
                sq_int64(&q, want->created_at);
                r = sq_exec(&q);
                if (r < 0)
                        return r;
        }
        /* the same lock: nobody changed the row between the two statements */
        int k = spec_get_locked(s, user, session, ret);
        if (k < 0)
                return k;
        *ret_inserted = r > 0;
        return 0;
}

int store_session_spec_get(struct store *s, const char *user, const char *session, struct store_session_spec *ret)
{
        STORE_LOCK(s);

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        return spec_get_locked(s, user, session, ret);
}

int store_session_spec_delete(struct store *s, const char *user, const char *session)
{
        STORE_LOCK(s);

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        return store_exec_key(s, "DELETE FROM session_spec WHERE user_id = ?1 AND session_id = ?2", user, session);
}

void store_session_labels_free(struct store_session_labels *rows, size_t n)
{
        for (size_t i = 0; rows && i < n; i++)
                free(rows[i].labels_json);
        free(rows);
}

int store_session_labels_list(struct store *s, size_t limit, struct store_session_labels **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        struct store_session_labels *rows = NULL;
        size_t n = 0, cap = 0;
        int r;

        r = sq_start(&q, s,
                     "SELECT user_id, session_id, labels_json FROM session_spec WHERE labels_json IS NOT NULL "
                     "ORDER BY user_id, session_id LIMIT ?1");
        if (r < 0)
                return r;
        sq_int64(&q, (int64_t)limit);
        while ((r = sq_step(&q)) > 0) {
                struct store_session_labels *row = store_array_push((void **)&rows, &n, &cap, sizeof(*rows));
                if (!row) {
                        r = -ENOMEM;
                        break;
                }
                memset(row, 0, sizeof(*row));
                sq_col_text(&q, 0, row->user, sizeof(row->user));
                sq_col_text(&q, 1, row->session, sizeof(row->session));
                row->labels_json = col_dup(&q, 2);
                if (!row->labels_json) {
                        r = -ENOMEM;
                        break;
                }
        }
        if (r < 0) {
                store_session_labels_free(rows, n);
                return r;
        }
        *ret = rows;
        *ret_n = n;
        return 0;
}
