/* store_privacy.c — typed queries of private_datasets. There is no query
 * that deletes a mark on its own: only store_session_delete() with
 * drop_private (destroying the session together with its workspace) removes
 * them. */
#include <errno.h>
#include <string.h>

#include "store_internal.h"

int store_private_add(struct store *s, const char *user, const char *session, const char *dataset, const char *source,
                      int64_t now_ms, bool *ret_inserted)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session) || !dataset || !*dataset)
                return -EINVAL;
        r = sq_start(&q, s,
                     "INSERT INTO private_datasets (user_id, session_id, dataset, source, marked_at) "
                     "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (user_id, session_id, dataset) DO NOTHING");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text(&q, dataset);
        sq_text_opt(&q, source);
        sq_int64(&q, now_ms);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        if (ret_inserted)
                *ret_inserted = r > 0;
        return 0;
}

int store_private_any(struct store *s, const char *user, const char *session, bool *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, "SELECT 1 FROM private_datasets WHERE user_id = ?1 AND session_id = ?2 LIMIT 1");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_step(&q);
        if (r < 0)
                return r;
        *ret = r > 0;
        return 0;
}

static void private_list_row(struct store_query *q, void *p)
{
        struct store_private *row = p;

        sq_col_text(q, 0, row->dataset, sizeof(row->dataset));
        sq_col_text(q, 1, row->source, sizeof(row->source));
        row->marked_at = sq_col_int64(q, 2);
}

int store_private_list(struct store *s, const char *user, const char *session, struct store_private **ret,
                       size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s,
                         "SELECT dataset, source, marked_at FROM private_datasets WHERE user_id = ?1 AND "
                         "session_id = ?2 ORDER BY marked_at, dataset");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        return SQ_COLLECT(&q, private_list_row, ret, ret_n);
}
