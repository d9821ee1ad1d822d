/* store_service.c — typed queries of the services table. */
#include <errno.h>
#include <string.h>

#include "store_internal.h"

#define SERVICE_COLUMNS                                                                                                \
        "user_id, session_id, name, container_id, command, workdir, state, pid, exit_code, ports, last_error, "        \
        "started_at, stopped_at"

static void service_from_row(struct store_query *q, struct store_service *row)
{
        memset(row, 0, sizeof(*row));
        sq_col_text(q, 0, row->user_id, sizeof(row->user_id));
        sq_col_text(q, 1, row->session_id, sizeof(row->session_id));
        sq_col_text(q, 2, row->name, sizeof(row->name));
        sq_col_text(q, 3, row->container_id, sizeof(row->container_id));
        sq_col_text(q, 4, row->command, sizeof(row->command));
        sq_col_text(q, 5, row->workdir, sizeof(row->workdir));
        sq_col_text(q, 6, row->state, sizeof(row->state));
        row->pid = (int)sq_col_int64(q, 7);
        row->exit_code = sqlite3_column_type(q->stmt, 8) == SQLITE_NULL ? -1 : (int)sq_col_int64(q, 8);
        sq_col_text(q, 9, row->ports, sizeof(row->ports));
        sq_col_text(q, 10, row->last_error, sizeof(row->last_error));
        row->started_at = sq_col_int64(q, 11);
        row->stopped_at = sq_col_int64(q, 12);
}

int store_service_put(struct store *s, const struct store_service *row)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!row || !store_key_ok(row->user_id) || !store_key_ok(row->session_id) || !store_key_ok(row->name))
                return -EINVAL;
        r = sq_start(&q, s,
                     "INSERT INTO services (" SERVICE_COLUMNS
                     ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
                     "?11, ?12, ?13) ON CONFLICT (user_id, session_id, name) DO UPDATE SET "
                     "container_id = excluded.container_id, command = excluded.command, workdir = excluded.workdir, "
                     "state = excluded.state, pid = excluded.pid, exit_code = excluded.exit_code, "
                     "ports = excluded.ports, last_error = excluded.last_error, started_at = excluded.started_at, "
                     "stopped_at = excluded.stopped_at");
        if (r < 0)
                return r;
        sq_text(&q, row->user_id);
        sq_text(&q, row->session_id);
        sq_text(&q, row->name);
        sq_text_opt(&q, row->container_id);
        sq_text(&q, row->command);
        sq_text_opt(&q, row->workdir);
        sq_text(&q, row->state);
        sq_int64(&q, row->pid);
        if (row->exit_code >= 0)
                sq_int64(&q, row->exit_code);
        else
                sq_text(&q, NULL);
        sq_text_opt(&q, row->ports);
        sq_text_opt(&q, row->last_error);
        sq_int64(&q, row->started_at);
        sq_int64(&q, row->stopped_at);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_service_get(struct store *s, const char *user, const char *session, const char *name,
                      struct store_service *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s,
                         "SELECT " SERVICE_COLUMNS
                         " FROM services WHERE user_id = ?1 AND session_id = ?2 AND name = ?3");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text(&q, name);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOENT;
        service_from_row(&q, ret);
        return 0;
}

static void service_list_row(struct store_query *q, void *p)
{
        struct store_service *row = p;

        service_from_row(q, row);
}

int store_service_list(struct store *s, const char *user, const char *session, bool active_only,
                       struct store_service **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s,
                         "SELECT " SERVICE_COLUMNS
                         " FROM services WHERE (?1 IS NULL OR user_id = ?1) AND "
                         "(?2 IS NULL OR session_id = ?2) AND "
                         "(?3 = 0 OR state IN ('STARTING', 'RUNNING', 'STOPPING')) "
                         "ORDER BY user_id, session_id, name");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_int64(&q, active_only ? 1 : 0);
        return SQ_COLLECT(&q, service_list_row, ret, ret_n);
}
