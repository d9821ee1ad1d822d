/* store_ops.c — read-only queries for the operator's views (sandboxctl top and logs) and
 * for a session's owner (the API's session_audit): a session's audit rows, in pages, and
 * its execution count. Locking: the store lock, per call. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"

void store_audit_rows_free(struct store_audit_row *rows, size_t n)
{
        for (size_t i = 0; rows && i < n; i++)
                free(rows[i].detail);
        free(rows);
}

int store_audit_list(struct store *s, const char *user, const char *session, size_t limit, struct store_audit_row **ret,
                     size_t *ret_n)
{
        return store_audit_page(s, user, session, 0, limit, ret, ret_n);
}

int store_audit_page(struct store *s, const char *user, const char *session, int64_t before_id, size_t limit,
                     struct store_audit_row **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        struct store_audit_row *rows;
        size_t n = 0;
        int r;

        if (!store_key_ok(user) || !store_key_ok(session) || limit == 0 || limit > 100000 || before_id < 0)
                return -EINVAL;
        rows = calloc(limit, sizeof(*rows));
        if (!rows)
                return -ENOMEM;
        /* the newest `limit` rows (before before_id), returned oldest first */
        r = sq_start(&q, s,
                     "SELECT id, ts, actor, action, detail FROM (SELECT * FROM audit_log "
                     "WHERE user_id = ?1 AND session_id = ?2 AND (?4 = 0 OR id < ?4) ORDER BY id DESC LIMIT ?3) "
                     "ORDER BY id");
        if (r < 0)
                goto fail;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_int64(&q, (int64_t)limit);
        sq_int64(&q, before_id);
        while (n < limit && (r = sq_step(&q)) > 0) {
                const unsigned char *detail = sqlite3_column_text(q.stmt, 4);
                rows[n].id = sq_col_int64(&q, 0);
                rows[n].ts = sq_col_int64(&q, 1);
                sq_col_text(&q, 2, rows[n].actor, sizeof(rows[n].actor));
                sq_col_text(&q, 3, rows[n].action, sizeof(rows[n].action));
                if (detail && !(rows[n].detail = strdup((const char *)detail))) {
                        r = -ENOMEM;
                        goto fail;
                }
                n++;
        }
        if (r < 0)
                goto fail;
        *ret = rows;
        *ret_n = n;
        return 0;
fail:
        store_audit_rows_free(rows, n);
        return r;
}

int store_exec_count(struct store *s, const char *user, const char *session, int64_t *ret_count)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        r = sq_start(&q, s, "SELECT COUNT(*) FROM executions WHERE user_id = ?1 AND session_id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_step(&q);
        if (r < 0)
                return r;
        *ret_count = r > 0 ? sq_col_int64(&q, 0) : 0;
        return 0;
}

int store_user_runtime_get(struct store *s, const char *user, char ret[16])
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user))
                return -EINVAL;
        r = sq_start(&q, s, "SELECT runtime FROM user_policy WHERE user_id = ?1 AND runtime IS NOT NULL");
        if (r < 0)
                return r;
        sq_text(&q, user);
        r = sq_step(&q);
        if (r < 0)
                return r;
        ret[0] = '\0';
        if (r > 0)
                sq_col_text(&q, 0, ret, 16);
        return 0;
}

int store_user_runtime_set(struct store *s, const char *user, const char *runtime, int64_t now_ms)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user))
                return -EINVAL;
        r = sq_start(&q, s,
                     "INSERT INTO user_policy (user_id, runtime, updated_at) VALUES (?1, ?2, ?3) "
                     "ON CONFLICT (user_id) DO UPDATE SET runtime = excluded.runtime, updated_at = excluded.updated_at");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text_opt(&q, runtime);
        sq_int64(&q, now_ms);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}
