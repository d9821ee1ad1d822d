/* store_uid.c — the session_uids table (migration 0008): the host uid each
 * session's processes run as, handed out from sandbox_uid_range and kept
 * while the session's workspace exists (sessuid.h says why and when).
 * Locking: the store lock, per call; an assignment is one IMMEDIATE
 * transaction, so a daemon and `sandboxd --gc` sharing the file never hand
 * out one uid twice (the UNIQUE constraint on uid backs that up). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"

static int uid_get_locked(struct store *s, const char *user, const char *session, int64_t *ret_uid)
{
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, "SELECT uid FROM session_uids WHERE user_id = ?1 AND session_id = ?2");

        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOENT;
        *ret_uid = sq_col_int64(&q, 0);
        return 0;
}

int store_uid_get(struct store *s, const char *user, const char *session, int64_t *ret_uid)
{
        STORE_LOCK(s);

        if (!store_key_ok(user) || !store_key_ok(session) || !ret_uid)
                return -EINVAL;
        return uid_get_locked(s, user, session, ret_uid);
}

/* The first uid of [lo, hi] no row holds, going round the range from the
 * one after the last handed out (session_uid_cursor): candidates are lo,
 * cursor + 1 and one past each held uid (the UNIQUE index on uid answers
 * every probe). */
static int uid_free_locked(struct store *s, int64_t lo, int64_t hi, int64_t *ret_uid)
{
        _cleanup_(sq_end) struct store_query q = {}, next = {};
        /* the usual case, one probe: the uid after the last one handed out is free */
        int r = sq_start(&next, s,
                         "SELECT last_uid + 1 FROM session_uid_cursor WHERE id = 1 AND last_uid + 1 BETWEEN ?1 AND ?2 "
                         "AND NOT EXISTS (SELECT 1 FROM session_uids WHERE uid = last_uid + 1)");

        if (r < 0)
                return r;
        sq_int64(&next, lo);
        sq_int64(&next, hi);
        r = sq_step(&next);
        if (r < 0)
                return r;
        if (r > 0) {
                *ret_uid = sq_col_int64(&next, 0);
                return 0;
        }
        r = sq_start(&q, s,
                     "WITH cur(v) AS (SELECT COALESCE((SELECT last_uid FROM session_uid_cursor WHERE id = 1), ?1 - 1)) "
                     "SELECT c FROM (SELECT ?1 AS c UNION ALL SELECT v + 1 FROM cur UNION ALL "
                     "SELECT uid + 1 FROM session_uids WHERE uid >= ?1 AND uid < ?2) "
                     "WHERE c BETWEEN ?1 AND ?2 AND NOT EXISTS (SELECT 1 FROM session_uids WHERE uid = c) "
                     "ORDER BY c <= (SELECT v FROM cur), c LIMIT 1");

        if (r < 0)
                return r;
        sq_int64(&q, lo);
        sq_int64(&q, hi);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOSPC;
        *ret_uid = sq_col_int64(&q, 0);
        return 0;
}

static int uid_cursor_set_locked(struct store *s, int64_t uid)
{
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s,
                         "INSERT INTO session_uid_cursor (id, last_uid) VALUES (1, ?1) "
                         "ON CONFLICT (id) DO UPDATE SET last_uid = excluded.last_uid");

        if (r < 0)
                return r;
        sq_int64(&q, uid);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_uid_assign(struct store *s, const char *user, const char *session, int64_t lo, int64_t hi, int64_t now_ms,
                     int64_t *ret_uid)
{
        STORE_LOCK(s);
        _cleanup_(store_tx_rollbackp) struct store_tx tx = {};
        int64_t uid;
        int r;

        if (!store_key_ok(user) || !store_key_ok(session) || !ret_uid || lo < 1 || hi < lo)
                return -EINVAL;
        r = store_tx_begin(s, &tx);
        if (r < 0)
                return r;
        r = uid_get_locked(s, user, session, &uid);
        if (r == -ENOENT) {
                _cleanup_(sq_end) struct store_query q = {};

                r = uid_free_locked(s, lo, hi, &uid);
                if (r < 0)
                        return r;
                r = sq_start(&q, s,
                             "INSERT INTO session_uids (user_id, session_id, uid, assigned_at) VALUES (?1, ?2, ?3, ?4)");
                if (r < 0)
                        return r;
                sq_text(&q, user);
                sq_text(&q, session);
                sq_int64(&q, uid);
                sq_int64(&q, now_ms);
                r = sq_exec(&q);
                if (r >= 0)
                        r = uid_cursor_set_locked(s, uid);
        }
        if (r < 0)
                return r;
        r = store_tx_commit(&tx);
        if (r < 0)
                return r;
        *ret_uid = uid;
        return 0;
}

int store_uid_release(struct store *s, const char *user, const char *session)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        r = sq_start(&q, s, "DELETE FROM session_uids WHERE user_id = ?1 AND session_id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_exec(&q);
        return r < 0 ? r : r > 0 ? 0 : -ENOENT;
}

static void uid_list_row(struct store_query *q, void *p)
{
        struct store_uid *row = p;

        sq_col_text(q, 0, row->user_id, sizeof(row->user_id));
        sq_col_text(q, 1, row->session_id, sizeof(row->session_id));
        row->uid = sq_col_int64(q, 2);
        row->assigned_at = sq_col_int64(q, 3);
}

int store_uid_list(struct store *s, struct store_uid **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        r = sq_start(&q, s, "SELECT user_id, session_id, uid, assigned_at FROM session_uids ORDER BY uid");
        if (r < 0)
                return r;
        return SQ_COLLECT(&q, uid_list_row, ret, ret_n);
}

int store_gc_uid_release(struct store *s, const char *user, const char *session, int64_t uid)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        /* The daemon writes CREATING before it looks the uid up, so a session
         * coming alive meanwhile keeps its uid. */
        r = sq_start(&q, s,
                     "DELETE FROM session_uids WHERE user_id = ?1 AND session_id = ?2 AND uid = ?3 "
                     "AND NOT EXISTS (SELECT 1 FROM sessions WHERE user_id = ?1 AND session_id = ?2 "
                     "AND state IN ('RUNNING', 'PAUSED', 'CREATING'))");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_int64(&q, uid);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        return r > 0 ? 0 : -ESTALE;
}

int store_uid_claim_get(struct store *s, const char *user, const char *session, char ret[STORE_CLAIM_MAX])
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        r = sq_start(&q, s,
                     "SELECT workspace_claim FROM session_uids WHERE user_id = ?1 AND session_id = ?2 "
                     "AND workspace_claim IS NOT NULL AND workspace_claim != ''");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_step(&q);
        if (r <= 0)
                return r < 0 ? r : -ENOENT;
        sq_col_text(&q, 0, ret, STORE_CLAIM_MAX);
        return 0;
}

int store_uid_claim_set(struct store *s, const char *user, const char *session, const char *claim)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session) || (claim && strlen(claim) >= STORE_CLAIM_MAX))
                return -EINVAL;
        r = sq_start(&q, s, "UPDATE session_uids SET workspace_claim = ?3 WHERE user_id = ?1 AND session_id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text_opt(&q, claim);
        r = sq_exec(&q);
        return r < 0 ? r : r > 0 ? 0 : -ENOENT;
}
