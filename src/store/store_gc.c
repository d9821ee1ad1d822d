/* store_gc.c — the queries of the batch cleanup (gc.c, `sandboxd --gc`).
 *
 * gc runs in its own process beside a daemon that may be writing the same
 * rows, so every write here re-checks, in the same statement, the condition
 * gc decided on, and changes nothing (-ESTALE) when the row moved on: the
 * daemon always wins a race. Locking as in store.c: every function holds the
 * store lock for its whole duration. */
#include <errno.h>
#include <string.h>

#include "sandboxd/log.h"
#include "store_internal.h"

static bool opt_key_ok(const char *v)
{
        return v && strlen(v) <= STORE_KEY_MAX;
}

int store_gc_session_take_container(struct store *s, const char *user, const char *session, const char *container_id,
                                    int64_t last_activity_before, bool require_quiet, const char *cause, int64_t now_ms)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session) || !container_id || !*container_id || !cause)
                return -EINVAL;
        /* A RUNNING (or PAUSED) session is stopped (the time it stopped matters for
         * workspace retention); an ERROR one only loses its dead container
         * and keeps its error and its updated_at. */
        r = sq_start(&q, s,
                     "UPDATE sessions SET container_id = NULL, "
                     "state = CASE WHEN state IN ('RUNNING', 'PAUSED') THEN 'STOPPED' ELSE state END, "
                     "error_cause = CASE WHEN state IN ('RUNNING', 'PAUSED') THEN ?5 ELSE error_cause END, "
                     "updated_at = CASE WHEN state IN ('RUNNING', 'PAUSED') THEN ?6 ELSE updated_at END, "
                     "paused_at = 0 "
                     "WHERE user_id = ?1 AND session_id = ?2 AND container_id = ?3 "
                     "AND state IN ('RUNNING', 'PAUSED', 'ERROR') AND last_activity < ?4 "
                     "AND (?7 = 0 OR NOT EXISTS (SELECT 1 FROM executions e WHERE e.user_id = ?1 "
                     "AND e.session_id = ?2 AND e.state IN ('PENDING', 'RUNNING')))");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text(&q, container_id);
        sq_int64(&q, last_activity_before);
        sq_text(&q, cause);
        sq_int64(&q, now_ms);
        sq_int64(&q, require_quiet ? 1 : 0);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        return r > 0 ? 0 : -ESTALE;
}

int store_gc_session_forget(struct store *s, const char *user, const char *session, const char *container_id,
                            int64_t updated_at)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session) || !opt_key_ok(container_id))
                return -EINVAL;
        r = sq_start(&q, s,
                     "DELETE FROM sessions WHERE user_id = ?1 AND session_id = ?2 AND state = 'ERROR' "
                     "AND COALESCE(container_id, '') = ?3 AND updated_at = ?4");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text(&q, container_id);
        sq_int64(&q, updated_at);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        if (r == 0)
                return -ESTALE;
        sq_end(&q);
        /* create_session's options go with the session (issue 17) */
        r = store_exec_key(s, "DELETE FROM session_options WHERE user_id = ?1 AND session_id = ?2", user, session);
        if (r < 0)
                return r;
        /* and its labels and resources (issue 29) */
        return store_exec_key(s, "DELETE FROM session_spec WHERE user_id = ?1 AND session_id = ?2", user, session);
}

int store_gc_port_release(struct store *s, int port, const char *user, const char *session)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session) || port < 1 || port > 65535)
                return -EINVAL;
        r = sq_start(&q, s,
                     "DELETE FROM port_allocations WHERE port = ?1 AND user_id = ?2 AND session_id = ?3 "
                     "AND NOT EXISTS (SELECT 1 FROM sessions WHERE user_id = ?2 AND session_id = ?3 "
                     "AND state IN ('RUNNING', 'PAUSED', 'CREATING', 'ERROR'))");
        if (r < 0)
                return r;
        sq_int64(&q, port);
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        return r > 0 ? 0 : -ESTALE;
}

static void gc_services_list_row(struct store_query *q, void *p)
{
        struct store_gc_service *row = p;

        sq_col_text(q, 0, row->user_id, sizeof(row->user_id));
        sq_col_text(q, 1, row->session_id, sizeof(row->session_id));
        sq_col_text(q, 2, row->name, sizeof(row->name));
        sq_col_text(q, 3, row->container_id, sizeof(row->container_id));
        sq_col_text(q, 4, row->state, sizeof(row->state));
}

int store_gc_services_list(struct store *s, struct store_gc_service **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!ret || !ret_n)
                return -EINVAL;
        r = sq_start(&q, s,
                     "SELECT user_id, session_id, name, container_id, state FROM services "
                     "ORDER BY user_id, session_id, name");
        if (r < 0)
                return r;
        return SQ_COLLECT(&q, gc_services_list_row, ret, ret_n);
}

int store_gc_service_delete(struct store *s, const char *user, const char *session, const char *name,
                            const char *container_id, const char *state)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session) || !name || !opt_key_ok(container_id) || !state)
                return -EINVAL;
        r = sq_start(&q, s,
                     "DELETE FROM services WHERE user_id = ?1 AND session_id = ?2 AND name = ?3 "
                     "AND COALESCE(container_id, '') = ?4 AND state = ?5");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text(&q, name);
        sq_text(&q, container_id);
        sq_text(&q, state);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        return r > 0 ? 0 : -ESTALE;
}

static void gc_spools_list_row(struct store_query *q, void *p)
{
        struct store_gc_spool *row = p;

        sq_col_text(q, 0, row->id, sizeof(row->id));
        row->finished_at = sq_col_int64(q, 1);
}

int store_gc_spools_list(struct store *s, int64_t before_ms, int64_t after_finished_at, const char *after_id,
                         size_t limit, struct store_gc_spool **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!after_id || !ret || !ret_n || limit == 0)
                return -EINVAL;
        /* Keyset pagination on (finished_at, id): a dry run deletes nothing,
         * so "the next batch" cannot mean "what is left". */
        r = sq_start(&q, s,
                     "SELECT id, finished_at FROM executions WHERE spool_path IS NOT NULL "
                     "AND finished_at IS NOT NULL AND finished_at < ?1 "
                     "AND (finished_at > ?2 OR (finished_at = ?2 AND id > ?3)) "
                     "ORDER BY finished_at, id LIMIT ?4");
        if (r < 0)
                return r;
        sq_int64(&q, before_ms);
        sq_int64(&q, after_finished_at);
        sq_text(&q, after_id);
        sq_int64(&q, (int64_t)(limit > INT64_MAX ? INT64_MAX : limit));
        return SQ_COLLECT(&q, gc_spools_list_row, ret, ret_n);
}

int store_gc_spool_known(struct store *s, const char *id, bool *ret_known)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!id || !ret_known)
                return -EINVAL;
        r = sq_start(&q, s, "SELECT 1 FROM executions WHERE id = ?1 AND spool_path IS NOT NULL");
        if (r < 0)
                return r;
        sq_text(&q, id);
        r = sq_step(&q);
        if (r < 0)
                return r;
        *ret_known = r > 0;
        return 0;
}

int store_gc_session_last_seen(struct store *s, const char *user, const char *session, int64_t *ret_ms)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session) || !ret_ms)
                return -EINVAL;
        r = sq_start(&q, s,
                     "SELECT MAX(COALESCE((SELECT MAX(MAX(created_at, COALESCE(removed_at, 0))) FROM containers "
                     "WHERE user_id = ?1 AND session_id = ?2), 0), "
                     "COALESCE((SELECT MAX(MAX(created_at, COALESCE(finished_at, 0))) FROM executions "
                     "WHERE user_id = ?1 AND session_id = ?2), 0), "
                     "COALESCE((SELECT MAX(ts) FROM audit_log WHERE user_id = ?1 AND session_id = ?2 "
                     "AND COALESCE(actor, '') <> 'gc'), 0))");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_step(&q);
        if (r < 0)
                return r;
        *ret_ms = r > 0 ? sq_col_int64(&q, 0) : 0;
        return 0;
}

int store_gc_private_forget(struct store *s, const char *user, const char *session)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        r = sq_start(&q, s,
                     "DELETE FROM private_datasets WHERE user_id = ?1 AND session_id = ?2 "
                     "AND NOT EXISTS (SELECT 1 FROM sessions WHERE user_id = ?1 AND session_id = ?2)");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        return sq_exec(&q);
}

int store_gc_audit_prune(struct store *s, int64_t before_ms, bool dry_run)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        r = sq_start(&q, s,
                     dry_run ? "SELECT COUNT(*) FROM audit_log WHERE ts < ?1" : "DELETE FROM audit_log WHERE ts < ?1");
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

static int count_one(struct store *s, const char *sql, int64_t *ret)
{
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, sql);

        if (r < 0)
                return r;
        r = sq_step(&q);
        if (r < 0)
                return r;
        *ret = r > 0 ? sq_col_int64(&q, 0) : 0;
        return 0;
}

int store_gc_stats(struct store *s, struct store_gc_stats *ret)
{
        STORE_LOCK(s);
        struct store_gc_stats st = {0};
        const struct {
                const char *sql;
                int64_t *out;
        } queries[] = {
                {"SELECT COUNT(*) FROM sessions", &st.sessions},
                {"SELECT COUNT(*) FROM port_allocations", &st.ports},
                {"SELECT COUNT(*) FROM services", &st.services},
                {"SELECT COUNT(*) FROM executions", &st.executions},
                {"SELECT COUNT(*) FROM executions WHERE spool_path IS NOT NULL", &st.spools},
                {"SELECT COUNT(*) FROM private_datasets", &st.private_datasets},
                {"SELECT COUNT(*) FROM containers", &st.containers},
                {"SELECT COUNT(*) FROM containers WHERE removed_at IS NULL", &st.containers_live},
                {"SELECT COUNT(*) FROM audit_log", &st.audit},
                {"PRAGMA page_size", &st.page_size},
                {"PRAGMA page_count", &st.page_count},
                {"PRAGMA freelist_count", &st.freelist_count},
        };
        int r;

        if (!ret)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(queries); i++) {
                r = count_one(s, queries[i].sql, queries[i].out);
                if (r < 0)
                        return r;
        }
        *ret = st;
        return 0;
}

int store_gc_schema_check(const char *path, int *ret_have, int *ret_want)
{
        const struct store_migration *migs;
        sqlite3 *db = NULL;
        sqlite3_stmt *q = NULL;
        size_t n = 0;
        int have = 0, rc, r = 0;

        if (!path || !ret_have || !ret_want)
                return -EINVAL;
        migs = store_builtin_migrations(&n);
        /* Read-write without CREATE: a read-only connection to a WAL database
         * may leave -wal and -shm files behind; this one reads and closes like
         * any other connection, which leaves none. */
        rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL);
        if (rc != SQLITE_OK) {
                r = rc == SQLITE_CANTOPEN ? -ENOENT : -EIO;
                goto out;
        }
        sqlite3_busy_timeout(db, 5000);
        rc = sqlite3_prepare_v2(db, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations", -1, &q, NULL);
        if (rc == SQLITE_OK) {
                rc = sqlite3_step(q);
                if (rc == SQLITE_ROW)
                        have = sqlite3_column_int(q, 0);
                else if (rc != SQLITE_DONE)
                        r = rc == SQLITE_BUSY ? -EBUSY : -EIO;
        } else if (!strstr(sqlite3_errmsg(db), "no such table")) {
                r = rc == SQLITE_BUSY ? -EBUSY : rc == SQLITE_NOTADB ? -EPROTO : -EIO;
        }
out:
        if (r < 0)
                log_debug("store: schema check of %s: %s", path, db ? sqlite3_errmsg(db) : "cannot open");
        sqlite3_finalize(q);
        sqlite3_close(db);
        if (r < 0)
                return r;
        *ret_have = have;
        *ret_want = n ? migs[n - 1].version : 0;
        return 0;
}
