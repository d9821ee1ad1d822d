/* store_token.c — typed queries of the api_tokens table. Only digests of
 * tokens are ever stored. Locking as in store.c: every function holds the
 * store lock for its whole duration. */
#include <errno.h>
#include <string.h>

#include "store_internal.h"

#define TOKEN_COLUMNS "id, user_id, role, token_sha256, created_at, revoked_at"

static void token_from_row(struct store_query *q, void *p)
{
        struct store_token *row = p;

        memset(row, 0, sizeof(*row));
        sq_col_text(q, 0, row->id, sizeof(row->id));
        sq_col_text(q, 1, row->user_id, sizeof(row->user_id));
        sq_col_text(q, 2, row->role, sizeof(row->role));
        sq_col_text(q, 3, row->token_sha256, sizeof(row->token_sha256));
        row->created_at = sq_col_int64(q, 4);
        row->revoked_at = sqlite3_column_type(q->stmt, 5) == SQLITE_NULL ? 0 : sq_col_int64(q, 5);
}

int store_token_add(struct store *s, const struct store_token *row)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!row || !row->id[0] || !store_key_ok(row->user_id) || strlen(row->token_sha256) != 64)
                return -EINVAL;
        r = sq_start(&q, s,
                     "INSERT INTO api_tokens (id, user_id, role, token_sha256, created_at) VALUES (?1, ?2, ?3, ?4, ?5)");
        if (r < 0)
                return r;
        sq_text(&q, row->id);
        sq_text(&q, row->user_id);
        sq_text(&q, row->role);
        sq_text(&q, row->token_sha256);
        sq_int64(&q, row->created_at);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_token_get_by_digest(struct store *s, const char *sha256_hex, struct store_token *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!sha256_hex || !ret)
                return -EINVAL;
        r = sq_start(&q, s, "SELECT " TOKEN_COLUMNS " FROM api_tokens WHERE token_sha256 = ?1");
        if (r < 0)
                return r;
        sq_text(&q, sha256_hex);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOENT;
        token_from_row(&q, ret);
        return 0;
}

int store_token_revoke(struct store *s, const char *id, int64_t now_ms)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!id || !*id)
                return -EINVAL;
        r = sq_start(&q, s, "SELECT revoked_at FROM api_tokens WHERE id = ?1");
        if (r < 0)
                return r;
        sq_text(&q, id);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOENT;
        if (sqlite3_column_type(q.stmt, 0) != SQLITE_NULL)
                return -EALREADY;
        sq_end(&q);

        r = sq_start(&q, s, "UPDATE api_tokens SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL");
        if (r < 0)
                return r;
        sq_text(&q, id);
        sq_int64(&q, now_ms);
        r = sq_exec(&q);
        return r < 0 ? r : r == 0 ? -EALREADY : 0;
}

int store_token_list(struct store *s, struct store_token **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!ret || !ret_n)
                return -EINVAL;
        r = sq_start(&q, s, "SELECT " TOKEN_COLUMNS " FROM api_tokens ORDER BY created_at, rowid");
        if (r < 0)
                return r;
        return SQ_COLLECT(&q, token_from_row, ret, ret_n);
}
