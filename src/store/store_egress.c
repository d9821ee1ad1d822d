/* store_egress.c — typed queries of egress_rules and egress_log (migration
 * 0012). Callers validate patterns and hosts; this file only bounds
 * lengths and scopes. Locking: the store lock, per query. */
#include <errno.h>
#include <string.h>

#include "sandboxd/store_egress.h"
#include "store_internal.h"

static const char *scope(const char *session)
{
        return session ? session : "";
}

static bool rule_args_ok(const char *user, const char *session, const char *pattern)
{
        return store_key_ok(user) && (!session || !*session || store_key_ok(session)) && pattern && *pattern &&
               strlen(pattern) < STORE_EGRESS_PATTERN_MAX;
}

int store_egress_rule_add(struct store *s, const char *user, const char *session, const char *pattern,
                          const char *actor, int64_t now_ms, size_t max_rules)
{
        STORE_LOCK(s);
        struct store_tx tx __attribute__((cleanup(store_tx_rollbackp))) = {0};
        int64_t have = 0;
        int r;

        if (!rule_args_ok(user, session, pattern))
                return -EINVAL;
        r = store_tx_begin(s, &tx);
        if (r < 0)
                return r;
        {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s, "SELECT COUNT(*) FROM egress_rules WHERE user_id = ?1 AND session_id = ?2");
                if (r < 0)
                        return r;
                sq_text(&q, user);
                sq_text(&q, scope(session));
                r = sq_step(&q);
                if (r < 0)
                        return r;
                have = r > 0 ? sq_col_int64(&q, 0) : 0;
        }
        {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s,
                             "INSERT INTO egress_rules (user_id, session_id, pattern, actor, created_at) "
                             "SELECT ?1, ?2, ?3, ?4, ?5 WHERE ?6 OR EXISTS (SELECT 1 FROM egress_rules WHERE "
                             "user_id = ?1 AND session_id = ?2 AND pattern = ?3) "
                             "ON CONFLICT (user_id, session_id, pattern) DO NOTHING");
                if (r < 0)
                        return r;
                sq_text(&q, user);
                sq_text(&q, scope(session));
                sq_text(&q, pattern);
                sq_text_opt(&q, actor);
                sq_int64(&q, now_ms);
                sq_int64(&q, (size_t)have < max_rules);
                r = sq_exec(&q);
                if (r < 0)
                        return r;
        }
        {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s,
                             "SELECT 1 FROM egress_rules WHERE user_id = ?1 AND session_id = ?2 AND pattern = ?3");
                if (r < 0)
                        return r;
                sq_text(&q, user);
                sq_text(&q, scope(session));
                sq_text(&q, pattern);
                r = sq_step(&q);
                if (r < 0)
                        return r;
                if (r == 0)
                        return -EDQUOT;
        }
        return store_tx_commit(&tx);
}

int store_egress_rule_remove(struct store *s, const char *user, const char *session, const char *pattern)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!rule_args_ok(user, session, pattern))
                return -EINVAL;
        r = sq_start(&q, s, "DELETE FROM egress_rules WHERE user_id = ?1 AND session_id = ?2 AND pattern = ?3");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, scope(session));
        sq_text(&q, pattern);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        return r > 0 ? 0 : -ENOENT;
}

int store_egress_rules(struct store *s, const char *user, const char *session, struct store_egress_rule **ret,
                       size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        _cleanup_free_ struct store_egress_rule *rows = NULL;
        size_t n = 0, cap = 0;
        int r;

        if (!store_key_ok(user) || (session && *session && !store_key_ok(session)))
                return -EINVAL;
        r = sq_start(&q, s,
                     "SELECT session_id, pattern, created_at FROM egress_rules WHERE user_id = ?1 AND "
                     "(session_id = '' OR session_id = ?2) ORDER BY session_id, pattern");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session && *session ? session : "");
        while ((r = sq_step(&q)) > 0) {
                struct store_egress_rule *row = store_array_push((void **)&rows, &n, &cap, sizeof(*rows));
                if (!row)
                        return -ENOMEM;
                sbx_strlcpy(row->user_id, user, sizeof(row->user_id));
                sq_col_text(&q, 0, row->session_id, sizeof(row->session_id));
                sq_col_text(&q, 1, row->pattern, sizeof(row->pattern));
                row->created_at = sq_col_int64(&q, 2);
        }
        if (r < 0)
                return r;
        *ret = TAKE_PTR(rows);
        *ret_n = n;
        return 0;
}

int store_egress_log_add(struct store *s, const char *user, const char *session, const struct store_egress_entry *row)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session) || !row)
                return -EINVAL;
        r = sq_start(&q, s,
                     "INSERT INTO egress_log (user_id, session_id, ts, host, port, method, decision, reason, "
                     "address, bytes_up, bytes_down, duration_ms, suppressed) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_int64(&q, row->ts);
        sq_text(&q, row->host);
        sq_int64(&q, row->port);
        sq_text(&q, row->method);
        sq_text(&q, row->decision);
        sq_text(&q, row->reason);
        sq_text_opt(&q, row->address);
        sq_int64(&q, row->bytes_up);
        sq_int64(&q, row->bytes_down);
        sq_int64(&q, row->duration_ms);
        sq_int64(&q, row->suppressed);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

static void egress_log_list_row(struct store_query *q, void *p)
{
        struct store_egress_entry *row = p;

        row->id = sq_col_int64(q, 0);
        row->ts = sq_col_int64(q, 1);
        sq_col_text(q, 2, row->host, sizeof(row->host));
        row->port = (int)sq_col_int64(q, 3);
        sq_col_text(q, 4, row->method, sizeof(row->method));
        sq_col_text(q, 5, row->decision, sizeof(row->decision));
        sq_col_text(q, 6, row->reason, sizeof(row->reason));
        sq_col_text(q, 7, row->address, sizeof(row->address));
        row->bytes_up = sq_col_int64(q, 8);
        row->bytes_down = sq_col_int64(q, 9);
        row->duration_ms = sq_col_int64(q, 10);
        row->suppressed = sq_col_int64(q, 11);
}

int store_egress_log_list(struct store *s, const char *user, const char *session, size_t limit,
                          struct store_egress_entry **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session) || limit < 1 || limit > 100000)
                return -EINVAL;
        r = sq_start(&q, s,
                     "SELECT id, ts, host, port, method, decision, reason, address, bytes_up, bytes_down, "
                     "duration_ms, suppressed FROM egress_log WHERE user_id = ?1 AND session_id = ?2 "
                     "ORDER BY id DESC LIMIT ?3");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_int64(&q, (int64_t)limit);
        return SQ_COLLECT(&q, egress_log_list_row, ret, ret_n);
}

int store_gc_egress_prune(struct store *s, int64_t before_ms, bool dry_run)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s,
                         dry_run ? "SELECT COUNT(*) FROM egress_log WHERE ts < ?1"
                                 : "DELETE FROM egress_log WHERE ts < ?1");

        if (r < 0)
                return r;
        sq_int64(&q, before_ms);
        if (!dry_run)
                return sq_exec(&q);
        r = sq_step(&q);
        if (r < 0)
                return r;
        return r > 0 ? (int)sq_col_int64(&q, 0) : 0;
}

/* ---- a session's narrowing (migration 0039) ---- */

static int narrow_row(struct store *s, const char *user, const char *session, const char *kind, const char *pattern,
                      int64_t now_ms)
{
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s,
                         "INSERT INTO egress_narrowing (user_id, session_id, kind, pattern, created_at) "
                         "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING");

        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text(&q, kind);
        sq_text(&q, pattern);
        sq_int64(&q, now_ms);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_egress_narrow_put(struct store *s, const char *user, const char *session, const struct store_egress_narrow *n,
                            int64_t now_ms)
{
        STORE_LOCK(s);
        struct store_tx tx __attribute__((cleanup(store_tx_rollbackp))) = {0};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session) || n->n_allow > STORE_EGRESS_NARROW_MAX ||
            n->n_deny > STORE_EGRESS_NARROW_MAX)
                return -EINVAL;
        r = store_tx_begin(s, &tx);
        if (r < 0)
                return r;
        r = store_exec_key(s, "DELETE FROM egress_narrowing WHERE user_id = ?1 AND session_id = ?2", user, session);
        if (r < 0)
                return r;
        if (n->allow_only && (r = narrow_row(s, user, session, "only", "", now_ms)) < 0)
                return r;
        for (size_t i = 0; i < n->n_allow; i++)
                if ((r = narrow_row(s, user, session, "allow", n->allow[i], now_ms)) < 0)
                        return r;
        for (size_t i = 0; i < n->n_deny; i++)
                if ((r = narrow_row(s, user, session, "deny", n->deny[i], now_ms)) < 0)
                        return r;
        return store_tx_commit(&tx);
}

int store_egress_narrow_get(struct store *s, const char *user, const char *session, struct store_egress_narrow *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        char kind[8];
        bool any = false;
        int r;

        memset(ret, 0, sizeof(*ret));
        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        r = sq_start(&q, s,
                     "SELECT kind, pattern FROM egress_narrowing WHERE user_id = ?1 AND session_id = ?2 "
                     "ORDER BY kind, pattern");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        while ((r = sq_step(&q)) > 0) {
                any = true;
                sq_col_text(&q, 0, kind, sizeof(kind));
                if (strcmp(kind, "only") == 0)
                        ret->allow_only = true;
                else if (strcmp(kind, "allow") == 0 && ret->n_allow < STORE_EGRESS_NARROW_MAX)
                        sq_col_text(&q, 1, ret->allow[ret->n_allow++], STORE_EGRESS_PATTERN_MAX);
                else if (strcmp(kind, "deny") == 0 && ret->n_deny < STORE_EGRESS_NARROW_MAX)
                        sq_col_text(&q, 1, ret->deny[ret->n_deny++], STORE_EGRESS_PATTERN_MAX);
        }
        if (r < 0)
                return r;
        return any ? 1 : 0;
}

int store_egress_narrow_drop(struct store *s, const char *user, const char *session)
{
        STORE_LOCK(s);

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        return store_exec_key(s, "DELETE FROM egress_narrowing WHERE user_id = ?1 AND session_id = ?2", user, session);
}
