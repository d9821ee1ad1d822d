/* store_session.c — the store's session rows, the containers made for them
 * and the host ports they hold (reserve, ensure, release, list).
 *
 * Locking: the store lock, per call (STORE_LOCK); a multi-statement change
 * runs in one transaction (store_tx). See store.c for the rules. */
#include "sandboxd/store.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/log.h"
#include "store_internal.h"

/* ---- sessions ---- */

#define SESSION_COLUMNS                                                                                                \
        "user_id, session_id, state, container_id, image, network_mode, last_error, error_cause, created_at, "         \
        "updated_at, last_activity, paused_at"

static void session_from_row(struct store_query *q, void *p)
{
        struct store_session *row = p;

        memset(row, 0, sizeof(*row));
        sq_col_text(q, 0, row->user_id, sizeof(row->user_id));
        sq_col_text(q, 1, row->session_id, sizeof(row->session_id));
        sq_col_text(q, 2, row->state, sizeof(row->state));
        sq_col_text(q, 3, row->container_id, sizeof(row->container_id));
        sq_col_text(q, 4, row->image, sizeof(row->image));
        sq_col_text(q, 5, row->network_mode, sizeof(row->network_mode));
        sq_col_text(q, 6, row->last_error, sizeof(row->last_error));
        sq_col_text(q, 7, row->error_cause, sizeof(row->error_cause));
        row->created_at = sq_col_int64(q, 8);
        row->updated_at = sq_col_int64(q, 9);
        row->last_activity = sq_col_int64(q, 10);
        row->paused_at = sq_col_int64(q, 11);
}

int store_session_put(struct store *s, const struct store_session *row)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!row || !store_key_ok(row->user_id) || !store_key_ok(row->session_id))
                return -EINVAL;
        /* An upsert, not INSERT OR REPLACE: REPLACE deletes the old row first,
         * which would fire ON DELETE actions of any future foreign key. */
        r = sq_start(&q, s,
                     "INSERT INTO sessions (" SESSION_COLUMNS
                     ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) "
                     "ON CONFLICT (user_id, session_id) DO UPDATE SET state = excluded.state, "
                     "container_id = excluded.container_id, image = excluded.image, "
                     "network_mode = excluded.network_mode, last_error = excluded.last_error, "
                     "error_cause = excluded.error_cause, created_at = excluded.created_at, "
                     "updated_at = excluded.updated_at, last_activity = excluded.last_activity, "
                     "paused_at = excluded.paused_at");
        if (r < 0)
                return r;
        sq_text(&q, row->user_id);
        sq_text(&q, row->session_id);
        sq_text(&q, row->state);
        sq_text_opt(&q, row->container_id);
        sq_text_opt(&q, row->image);
        sq_text_opt(&q, row->network_mode);
        sq_text_opt(&q, row->last_error);
        sq_text_opt(&q, row->error_cause);
        sq_int64(&q, row->created_at);
        sq_int64(&q, row->updated_at);
        sq_int64(&q, row->last_activity);
        sq_int64(&q, row->paused_at);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_session_get(struct store *s, const char *user, const char *session, struct store_session *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!user || !session || !ret)
                return -EINVAL;
        r = sq_start(&q, s, "SELECT " SESSION_COLUMNS " FROM sessions WHERE user_id = ?1 AND session_id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOENT;
        session_from_row(&q, ret);
        return 0;
}

int store_session_delete(struct store *s, const char *user, const char *session, bool drop_private)
{
        /* Everything that belongs to the session's live state; containers,
         * executions and audit_log are history and stay. The private marks go
         * only with the workspace (drop_private): a workspace that outlives its
         * session row still holds whatever private data entered it, so a
         * session later made on it must come back without a network. */
        static const char *const deletes[] = {
                "DELETE FROM port_allocations WHERE user_id = ?1 AND session_id = ?2",
                "DELETE FROM services WHERE user_id = ?1 AND session_id = ?2",
                "DELETE FROM sessions WHERE user_id = ?1 AND session_id = ?2",
        };
        static const char drop_marks[] = "DELETE FROM private_datasets WHERE user_id = ?1 AND session_id = ?2";
        STORE_LOCK(s);
        _cleanup_(store_tx_rollbackp) struct store_tx tx = {};
        int r, deleted = 0;

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        r = store_tx_begin(s, &tx);
        if (r < 0)
                return r;
        for (size_t i = 0; i < ELEMENTSOF(deletes) + 1; i++) {
                _cleanup_(sq_end) struct store_query q = {};
                const char *sql = i == 0 ? drop_marks : deletes[i - 1];
                if (i == 0 && !drop_private)
                        continue;
                r = sq_start(&q, s, sql);
                if (r < 0)
                        return r;
                sq_text(&q, user);
                sq_text(&q, session);
                r = sq_exec(&q);
                if (r < 0)
                        return r;
                deleted = r; /* the last statement is the session row */
        }
        r = store_tx_commit(&tx);
        if (r < 0)
                return r;
        return deleted > 0 ? 0 : -ENOENT;
}

int store_session_list(struct store *s, const char *user, const char *state, struct store_session **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!ret || !ret_n)
                return -EINVAL;
        r = sq_start(&q, s,
                     "SELECT " SESSION_COLUMNS
                     " FROM sessions WHERE (?1 IS NULL OR user_id = ?1) "
                     "AND (?2 IS NULL OR state = ?2) ORDER BY user_id, session_id");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, state);
        return SQ_COLLECT(&q, session_from_row, ret, ret_n);
}

int store_session_touch(struct store *s, const char *user, const char *session, int64_t now_ms)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!user || !session)
                return -EINVAL;
        /* MAX: two racing touches must not move activity backwards. */
        r = sq_start(&q, s,
                     "UPDATE sessions SET last_activity = MAX(last_activity, ?3) "
                     "WHERE user_id = ?1 AND session_id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_int64(&q, now_ms);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        return r > 0 ? 0 : -ENOENT;
}

/* ---- containers ---- */

int store_container_add(struct store *s, const char *container_id, const char *user, const char *session,
                        const char *image, const char *network_mode, int64_t now_ms)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!container_id || !*container_id || !store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        r = sq_start(&q, s,
                     "INSERT INTO containers (container_id, user_id, session_id, image, network_mode, created_at) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
        if (r < 0)
                return r;
        sq_text(&q, container_id);
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text_opt(&q, image);
        sq_text_opt(&q, network_mode);
        sq_int64(&q, now_ms);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_container_removed(struct store *s, const char *container_id, const char *cause, int64_t now_ms)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!container_id)
                return -EINVAL;
        r = sq_start(&q, s, "UPDATE containers SET removed_at = ?2, end_cause = ?3 WHERE container_id = ?1");
        if (r < 0)
                return r;
        sq_text(&q, container_id);
        sq_int64(&q, now_ms);
        sq_text_opt(&q, cause);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        return r > 0 ? 0 : -ENOENT;
}

/* ---- port allocations ---- */

/* Insert rows for ports[0..n) in one transaction. A port already recorded
 * is -EADDRINUSE (and nothing is inserted) unless ours_ok and the row is
 * (user, session)'s own. */
static int ports_insert(struct store *s, const int *ports, size_t n, const char *user, const char *session,
                        int64_t now_ms, bool ours_ok)
{
        _cleanup_(store_tx_rollbackp) struct store_tx tx = {};
        int r = store_tx_begin(s, &tx);

        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                _cleanup_(sq_end) struct store_query q = {};
                _cleanup_(sq_end) struct store_query o = {};
                r = sq_start(&q, s,
                             "INSERT INTO port_allocations (port, user_id, session_id, reserved_at) "
                             "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (port) DO NOTHING");
                if (r < 0)
                        return r;
                sq_int64(&q, ports[i]);
                sq_text(&q, user);
                sq_text(&q, session);
                sq_int64(&q, now_ms);
                r = sq_exec(&q);
                if (r < 0)
                        return r;
                if (r > 0)
                        continue;
                if (!ours_ok)
                        return -EADDRINUSE; /* the cleanup rolls back the earlier inserts */
                r = sq_start(&o, s,
                             "SELECT 1 FROM port_allocations WHERE port = ?1 AND user_id = ?2 AND session_id = ?3");
                if (r < 0)
                        return r;
                sq_int64(&o, ports[i]);
                sq_text(&o, user);
                sq_text(&o, session);
                r = sq_step(&o);
                if (r < 0)
                        return r;
                if (r == 0)
                        return -EADDRINUSE;
        }
        return store_tx_commit(&tx);
}

int store_ports_reserve(struct store *s, const int *ports, size_t n, const char *user, const char *session,
                        int64_t now_ms)
{
        STORE_LOCK(s);

        if ((n > 0 && !ports) || !store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        for (size_t i = 0; i < n; i++)
                if (ports[i] < 1 || ports[i] > 65535)
                        return -EINVAL;
        if (n == 0)
                return 0;
        return ports_insert(s, ports, n, user, session, now_ms, false);
}

int store_ports_ensure(struct store *s, const int *ports, size_t n, const char *user, const char *session,
                       int64_t now_ms)
{
        STORE_LOCK(s);

        if (!store_key_ok(user) || !store_key_ok(session) || (n > 0 && !ports))
                return -EINVAL;
        return ports_insert(s, ports, n, user, session, now_ms, true);
}

int store_ports_set_container(struct store *s, const char *user, const char *session, const char *container_id)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!user || !session)
                return -EINVAL;
        r = sq_start(&q, s, "UPDATE port_allocations SET container_id = ?3 WHERE user_id = ?1 AND session_id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text_opt(&q, container_id);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        return r > 0 ? 0 : -ENOENT;
}

int store_ports_release(struct store *s, const char *user, const char *session)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!user || !session)
                return -EINVAL;
        r = sq_start(&q, s, "DELETE FROM port_allocations WHERE user_id = ?1 AND session_id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        return sq_exec(&q);
}

int store_ports_release_port(struct store *s, int port)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        r = sq_start(&q, s, "DELETE FROM port_allocations WHERE port = ?1");
        if (r < 0)
                return r;
        sq_int64(&q, port);
        r = sq_exec(&q);
        if (r < 0)
                return r;
        return r > 0 ? 0 : -ENOENT;
}

static void port_row(struct store_query *q, void *p)
{
        struct store_port *row = p;

        row->port = (int)sq_col_int64(q, 0);
        sq_col_text(q, 1, row->user_id, sizeof(row->user_id));
        sq_col_text(q, 2, row->session_id, sizeof(row->session_id));
        sq_col_text(q, 3, row->container_id, sizeof(row->container_id));
}

int store_ports_list(struct store *s, struct store_port **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!ret || !ret_n)
                return -EINVAL;
        r = sq_start(&q, s, "SELECT port, user_id, session_id, container_id FROM port_allocations ORDER BY port");
        if (r < 0)
                return r;
        return SQ_COLLECT(&q, port_row, ret, ret_n);
}
