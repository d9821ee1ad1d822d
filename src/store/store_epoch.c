/* store_epoch.c — typed queries of session_epochs (migration 0030): a
 * session's fencing epoch (node.h). Never decreases. */
#include <errno.h>

#include "store_internal.h"

int store_epoch_get(struct store *s, const char *user, const char *session, uint64_t *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        r = sq_start(&q, s, "SELECT epoch FROM session_epochs WHERE user_id = ?1 AND session_id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_step(&q);
        if (r < 0)
                return r;
        *ret = r > 0 ? (uint64_t)sq_col_int64(&q, 0) : 0;
        return 0;
}

int store_epoch_bump(struct store *s, const char *user, const char *session, int64_t now_ms, uint64_t *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        r = sq_start(&q, s,
                     "INSERT INTO session_epochs (user_id, session_id, epoch, updated_at) VALUES (?1, ?2, 1, ?3) "
                     "ON CONFLICT (user_id, session_id) DO UPDATE SET epoch = epoch + 1, updated_at = ?3 "
                     "RETURNING epoch");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_int64(&q, now_ms);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r == 0)
                return -EIO;
        if (ret)
                *ret = (uint64_t)sq_col_int64(&q, 0);
        return 0;
}
