/* store_idem.c — idempotency keys (migration 0015): claim, bind, finish,
 * release, prune. A key is claimed by a UNIQUE insert under the store lock,
 * so of two concurrent requests with one key exactly one claims it; the
 * other sees the claimed row. Locking: the store lock, per call. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"

#define IDEM_COLUMNS "request_hash, state, execution_id, result, created_at, expires_at"

void store_idem_done(struct store_idem *row)
{
        if (!row)
                return;
        free(row->result);
        row->result = NULL;
}

static int idem_from_row(struct store_query *q, struct store_idem *row)
{
        const unsigned char *res;

        memset(row, 0, sizeof(*row));
        sq_col_text(q, 0, row->request_hash, sizeof(row->request_hash));
        sq_col_text(q, 1, row->state, sizeof(row->state));
        sq_col_text(q, 2, row->execution_id, sizeof(row->execution_id));
        res = sqlite3_column_text(q->stmt, 3);
        if (res) {
                row->result = strdup((const char *)res);
                if (!row->result)
                        return -ENOMEM;
        }
        row->created_at = sq_col_int64(q, 4);
        row->expires_at = sq_col_int64(q, 5);
        return 0;
}

static int idem_get_locked(struct store *s, const char *user, const char *method, const char *key,
                           struct store_idem *ret)
{
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s,
                         "SELECT " IDEM_COLUMNS
                         " FROM idempotency_keys WHERE user_id = ?1 AND method = ?2 AND "
                         "idem_key = ?3");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, method);
        sq_text(&q, key);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOENT;
        return idem_from_row(&q, ret);
}

static bool idem_args_ok(const char *user, const char *method, const char *key)
{
        return store_key_ok(user) && method && *method && strlen(method) < 64 && key && *key &&
               strlen(key) <= STORE_IDEM_KEY_MAX;
}

int store_idem_claim(struct store *s, const char *user, const char *method, const char *key, const char *hash,
                     int64_t now_ms, int64_t expires_at, int64_t max_keys, struct store_idem *ret)
{
        STORE_LOCK(s);
        int r;

        if (!idem_args_ok(user, method, key) || !hash || !ret)
                return -EINVAL;
        {
                /* the user's expired keys go first: they neither answer nor count */
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s, "DELETE FROM idempotency_keys WHERE user_id = ?1 AND expires_at <= ?2");
                if (r < 0)
                        return r;
                sq_text(&q, user);
                sq_int64(&q, now_ms);
                r = sq_exec(&q);
                if (r < 0)
                        return r;
        }
        r = idem_get_locked(s, user, method, key, ret);
        if (r != -ENOENT)
                return r < 0 ? r : 0;
        if (max_keys > 0) {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s, "SELECT COUNT(*) FROM idempotency_keys WHERE user_id = ?1");
                if (r < 0)
                        return r;
                sq_text(&q, user);
                r = sq_step(&q);
                if (r < 0)
                        return r;
                if (r > 0 && sq_col_int64(&q, 0) >= max_keys)
                        return -EDQUOT;
        }
        {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s,
                             "INSERT INTO idempotency_keys (user_id, method, idem_key, request_hash, state, "
                             "created_at, expires_at) VALUES (?1, ?2, ?3, ?4, 'PENDING', ?5, ?6)");
                if (r < 0)
                        return r;
                sq_text(&q, user);
                sq_text(&q, method);
                sq_text(&q, key);
                sq_text(&q, hash);
                sq_int64(&q, now_ms);
                sq_int64(&q, expires_at);
                r = sq_exec(&q);
        }
        if (r == -EEXIST) /* cannot happen under the lock; the constraint is the guarantee */
                return idem_get_locked(s, user, method, key, ret) < 0 ? -EEXIST : 0;
        if (r < 0)
                return r;
        return 1;
}

int store_idem_get(struct store *s, const char *user, const char *method, const char *key, struct store_idem *ret)
{
        STORE_LOCK(s);

        if (!idem_args_ok(user, method, key) || !ret)
                return -EINVAL;
        return idem_get_locked(s, user, method, key, ret);
}

int store_idem_set_execution(struct store *s, const char *user, const char *method, const char *key,
                             const char *execution_id)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!idem_args_ok(user, method, key) || !execution_id)
                return -EINVAL;
        r = sq_start(&q, s,
                     "UPDATE idempotency_keys SET execution_id = ?4, state = 'DONE' WHERE user_id = ?1 AND "
                     "method = ?2 AND idem_key = ?3");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, method);
        sq_text(&q, key);
        sq_text(&q, execution_id);
        r = sq_exec(&q);
        return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

int store_idem_finish(struct store *s, const char *user, const char *method, const char *key, const char *result)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!idem_args_ok(user, method, key) || !result)
                return -EINVAL;
        r = sq_start(&q, s,
                     "UPDATE idempotency_keys SET result = ?4, state = 'DONE' WHERE user_id = ?1 AND method = ?2 "
                     "AND idem_key = ?3");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, method);
        sq_text(&q, key);
        sq_text(&q, result);
        r = sq_exec(&q);
        return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

int store_idem_release(struct store *s, const char *user, const char *method, const char *key)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!idem_args_ok(user, method, key))
                return -EINVAL;
        r = sq_start(&q, s,
                     "DELETE FROM idempotency_keys WHERE user_id = ?1 AND method = ?2 AND idem_key = ?3 AND "
                     "state = 'PENDING'");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, method);
        sq_text(&q, key);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_idem_reset_pending(struct store *s)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, "DELETE FROM idempotency_keys WHERE state = 'PENDING'");

        if (r < 0)
                return r;
        return sq_exec(&q);
}

int store_idem_prune(struct store *s, int64_t now_ms, bool dry_run)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s,
                         dry_run ? "SELECT COUNT(*) FROM idempotency_keys WHERE expires_at <= ?1"
                                 : "DELETE FROM idempotency_keys WHERE expires_at <= ?1");

        if (r < 0)
                return r;
        sq_int64(&q, now_ms);
        if (!dry_run)
                return sq_exec(&q);
        r = sq_step(&q);
        if (r < 0)
                return r;
        return r > 0 ? (int)sq_col_int64(&q, 0) : 0;
}
