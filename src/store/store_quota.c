/* store_quota.c — typed queries of the user_quotas table (per-user
 * overrides of the quota defaults). Locking as in store.c: every function
 * holds the store lock for its whole duration. */
#include <errno.h>
#include <string.h>

#include "store_internal.h"

int store_quota_set(struct store *s, const char *user, const char *key, int64_t value, int64_t now_ms)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !key || !*key)
                return -EINVAL;
        r = sq_start(&q, s,
                     "INSERT INTO user_quotas (user_id, key, value, set_at) VALUES (?1, ?2, ?3, ?4) "
                     "ON CONFLICT (user_id, key) DO UPDATE SET value = excluded.value, set_at = excluded.set_at");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, key);
        sq_int64(&q, value);
        sq_int64(&q, now_ms);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_quota_unset(struct store *s, const char *user, const char *key)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user))
                return -EINVAL;
        r = sq_start(&q, s, "DELETE FROM user_quotas WHERE user_id = ?1 AND (?2 IS NULL OR key = ?2)");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, key);
        r = sq_exec(&q);
        return r;
}

static void quota_list_row(struct store_query *q, void *p)
{
        struct store_quota *row = p;

        sq_col_text(q, 0, row->user_id, sizeof(row->user_id));
        sq_col_text(q, 1, row->key, sizeof(row->key));
        row->value = sq_col_int64(q, 2);
}

int store_quota_list(struct store *s, struct store_quota **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, "SELECT user_id, key, value FROM user_quotas ORDER BY user_id, key");

        if (r < 0)
                return r;
        return SQ_COLLECT(&q, quota_list_row, ret, ret_n);
}

int store_quota_spool_usage(struct store *s, const char *user, const char *session, int64_t *ret_bytes,
                            char ret_oldest[37])
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        /* Ended executions only: a live one is counted by the exec engine. A
         * cleared spool has its byte counts zeroed, so it adds nothing. */
        r = sq_start(&q, s,
                     "SELECT COALESCE(SUM(stdout_spooled + stderr_spooled), 0), "
                     "(SELECT id FROM executions WHERE user_id = ?1 AND session_id = ?2 AND spool_path IS NOT NULL "
                     " AND state IN ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT') "
                     " AND stdout_spooled + stderr_spooled > 0 ORDER BY created_at, id LIMIT 1) "
                     "FROM executions WHERE user_id = ?1 AND session_id = ?2 AND spool_path IS NOT NULL "
                     "AND state IN ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT')");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_step(&q);
        if (r < 0)
                return r;
        *ret_bytes = r > 0 ? sq_col_int64(&q, 0) : 0;
        ret_oldest[0] = '\0';
        if (r > 0)
                sq_col_text(&q, 1, ret_oldest, 37);
        return 0;
}
