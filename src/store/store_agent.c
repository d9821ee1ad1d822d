/* store_agent.c — the store's queries for the agent tools (issue 17): the
 * per-user script cache (table scripts) and the options create_session gave a
 * session (table session_options), both from migration 0014. Every query is
 * keyed by the user, so one user's rows are never visible to another.
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

void store_script_done(struct store_script *row)
{
        if (!row)
                return;
        free(row->code);
        row->code = NULL;
}

/* Columns 0-5: name, content_hash, language, description, bytes, created_at. */
#define SCRIPT_COLS "name, content_hash, language, COALESCE(description, ''), bytes, created_at"

static void script_from_row(struct store_query *q, void *p)
{
        struct store_script *ret = p;

        memset(ret, 0, sizeof(*ret));
        sq_col_text(q, 0, ret->name, sizeof(ret->name));
        sq_col_text(q, 1, ret->content_hash, sizeof(ret->content_hash));
        sq_col_text(q, 2, ret->language, sizeof(ret->language));
        sq_col_text(q, 3, ret->description, sizeof(ret->description));
        ret->bytes = sq_col_int64(q, 4);
        ret->created_at = sq_col_int64(q, 5);
}

int store_script_add(struct store *s, const char *user, const struct store_script *row, int64_t max_count,
                     int64_t max_bytes, struct store_script *ret_existing)
{
        STORE_LOCK(s);
        _cleanup_(store_tx_rollbackp) struct store_tx tx = {0};
        int r;

        if (!store_key_ok(user) || !row->code)
                return -EINVAL;
        r = store_tx_begin(s, &tx);
        if (r < 0)
                return r;
        {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s, "SELECT " SCRIPT_COLS " FROM scripts WHERE user_id = ?1 AND content_hash = ?2");
                if (r < 0)
                        return r;
                sq_text(&q, user);
                sq_text(&q, row->content_hash);
                r = sq_step(&q);
                if (r < 0)
                        return r;
                if (r > 0) {
                        if (ret_existing)
                                script_from_row(&q, ret_existing);
                        return -EEXIST;
                }
        }
        {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM scripts WHERE user_id = ?1");
                if (r < 0)
                        return r;
                sq_text(&q, user);
                r = sq_step(&q);
                if (r <= 0)
                        return r < 0 ? r : -EIO;
                if (sq_col_int64(&q, 0) + 1 > max_count || sq_col_int64(&q, 1) + row->bytes > max_bytes)
                        return -EDQUOT;
        }
        {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s,
                             "INSERT INTO scripts (user_id, name, content_hash, language, description, code, bytes, "
                             "created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
                if (r < 0)
                        return r;
                sq_text(&q, user);
                sq_text(&q, row->name);
                sq_text(&q, row->content_hash);
                sq_text(&q, row->language);
                sq_text_opt(&q, row->description);
                sq_text(&q, row->code);
                sq_int64(&q, row->bytes);
                sq_int64(&q, row->created_at);
                r = sq_exec(&q);
                if (r < 0)
                        return r;
        }
        return store_tx_commit(&tx);
}

int store_script_get(struct store *s, const char *user, const char *name, struct store_script *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !name)
                return -EINVAL;
        r = sq_start(&q, s, "SELECT " SCRIPT_COLS ", code FROM scripts WHERE user_id = ?1 AND name = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, name);
        r = sq_step(&q);
        if (r <= 0)
                return r < 0 ? r : -ENOENT;
        script_from_row(&q, ret);
        ret->code = col_dup(&q, 6);
        return ret->code ? 0 : -ENOMEM;
}

int store_script_list(struct store *s, const char *user, const char *filter, size_t limit, struct store_script **ret,
                      size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user))
                return -EINVAL;
        /* instr(), not LIKE: the filter is a plain substring, no wildcards to escape */
        r = sq_start(&q, s,
                     "SELECT " SCRIPT_COLS
                     " FROM scripts WHERE user_id = ?1 AND (?2 IS NULL OR instr(name, ?2) > 0 "
                     "OR instr(COALESCE(description, ''), ?2) > 0) ORDER BY created_at DESC, name LIMIT ?3");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text_opt(&q, filter);
        sq_int64(&q, (int64_t)limit);
        return SQ_COLLECT(&q, script_from_row, ret, ret_n);
}

int store_script_delete(struct store *s, const char *user, const char *name, int64_t *ret_removed)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user))
                return -EINVAL;
        r = sq_start(&q, s, "DELETE FROM scripts WHERE user_id = ?1 AND (?2 IS NULL OR name = ?2)");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text_opt(&q, name);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        if (ret_removed)
                *ret_removed = r;
        return 0;
}

int store_script_usage(struct store *s, const char *user, int64_t *ret_count, int64_t *ret_bytes)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user))
                return -EINVAL;
        r = sq_start(&q, s, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM scripts WHERE user_id = ?1");
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

/* ---- session options ---- */

void store_session_options_done(struct store_session_options *o)
{
        if (!o)
                return;
        free(o->env_json);
        o->env_json = NULL;
}

int store_session_options_set(struct store *s, const char *user, const char *session,
                              const struct store_session_options *o)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        r = sq_start(&q, s,
                     "INSERT OR REPLACE INTO session_options (user_id, session_id, image, env_json, expires_at, "
                     "created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text_opt(&q, o->image);
        sq_text_opt(&q, o->env_json);
        if (o->expires_at > 0)
                sq_int64(&q, o->expires_at);
        else
                sq_text(&q, NULL);
        sq_int64(&q, o->created_at);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_session_options_get(struct store *s, const char *user, const char *session, struct store_session_options *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        r = sq_start(&q, s,
                     "SELECT COALESCE(image, ''), env_json, COALESCE(expires_at, 0), created_at FROM session_options "
                     "WHERE user_id = ?1 AND session_id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_step(&q);
        if (r <= 0)
                return r < 0 ? r : -ENOENT;
        memset(ret, 0, sizeof(*ret));
        sq_col_text(&q, 0, ret->image, sizeof(ret->image));
        ret->env_json = col_dup(&q, 1);
        ret->expires_at = sq_col_int64(&q, 2);
        ret->created_at = sq_col_int64(&q, 3);
        return 0;
}

int store_session_options_delete(struct store *s, const char *user, const char *session)
{
        STORE_LOCK(s);

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        return store_exec_key(s, "DELETE FROM session_options WHERE user_id = ?1 AND session_id = ?2", user, session);
}

int store_session_options_clear_ttl(struct store *s, const char *user, const char *session)
{
        STORE_LOCK(s);

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        return store_exec_key(s, "UPDATE session_options SET expires_at = NULL WHERE user_id = ?1 AND session_id = ?2",
                              user, session);
}

int store_session_options_expired(struct store *s, int64_t now_ms, size_t limit, char (**ret_users)[65],
                                  char (**ret_sessions)[65], size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        char(*users)[65] = NULL, (*sessions)[65] = NULL;
        size_t n = 0, cap_u = 0, cap_s = 0, n_s = 0;
        int r;

        r = sq_start(&q, s,
                     "SELECT user_id, session_id FROM session_options WHERE expires_at IS NOT NULL AND "
                     "expires_at <= ?1 ORDER BY expires_at LIMIT ?2");
        if (r < 0)
                return r;
        sq_int64(&q, now_ms);
        sq_int64(&q, (int64_t)limit);
        while ((r = sq_step(&q)) > 0) {
                char *u = store_array_push((void **)&users, &n, &cap_u, 65);
                char *ss = store_array_push((void **)&sessions, &n_s, &cap_s, 65);
                if (!u || !ss) {
                        r = -ENOMEM;
                        break;
                }
                sq_col_text(&q, 0, u, 65);
                sq_col_text(&q, 1, ss, 65);
        }
        if (r < 0 || n != n_s) {
                free(users);
                free(sessions);
                return r < 0 ? r : -ENOMEM;
        }
        *ret_users = users;
        *ret_sessions = sessions;
        *ret_n = n;
        return 0;
}
