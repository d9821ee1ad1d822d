/* store_cells.c — the store's queries for run_cell's interpreter contexts
 * (store_cells.h, migration 0025). Every query is keyed by user and
 * session. Locking: the store lock (STORE_LOCK), as everywhere in the
 * store. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/store_cells.h"
#include "store_internal.h"

int store_context_put(struct store *s, const struct store_context *row)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(row->user) || !store_key_ok(row->session) || !row->name[0])
                return -EINVAL;
        r = sq_start(&q, s,
                     "INSERT OR REPLACE INTO contexts (user_id, session_id, name, language, generation, "
                     "execution_count, runner_tag, container_id, state, lost_cause, created_at, last_used) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)");
        if (r < 0)
                return r;
        sq_text(&q, row->user);
        sq_text(&q, row->session);
        sq_text(&q, row->name);
        sq_text(&q, row->language);
        sq_int64(&q, row->generation);
        sq_int64(&q, row->execution_count);
        sq_int64(&q, row->runner_tag);
        sq_text(&q, row->container_id);
        sq_text(&q, row->state);
        sq_text(&q, row->lost_cause);
        sq_int64(&q, row->created_at);
        sq_int64(&q, row->last_used);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_context_delete(struct store *s, const char *user, const char *session, const char *name)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, "DELETE FROM contexts WHERE user_id = ?1 AND session_id = ?2 AND name = ?3");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text(&q, name);
        r = sq_exec(&q);
        return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

int store_context_delete_session(struct store *s, const char *user, const char *session)
{
        STORE_LOCK(s);
        return store_exec_key(s, "DELETE FROM contexts WHERE user_id = ?1 AND session_id = ?2", user, session);
}

int store_context_list(struct store *s, const char *user, const char *session, struct store_context **ret,
                       size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        struct store_context *list = NULL, *tmp;
        size_t n = 0, cap = 0;
        int r;

        r = sq_start(&q, s,
                     "SELECT user_id, session_id, name, language, generation, execution_count, runner_tag, "
                     "container_id, state, lost_cause, created_at, last_used FROM contexts "
                     "WHERE (?1 IS NULL OR user_id = ?1) AND (?2 IS NULL OR session_id = ?2) "
                     "ORDER BY user_id, session_id, name");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, user ? session : NULL);
        while ((r = sq_step(&q)) > 0) {
                if (n == cap) {
                        cap = cap ? cap * 2 : 8;
                        tmp = realloc(list, cap * sizeof(*list));
                        if (!tmp) {
                                free(list);
                                return -ENOMEM;
                        }
                        list = tmp;
                }
                struct store_context *c = &list[n++];
                memset(c, 0, sizeof(*c));
                sq_col_text(&q, 0, c->user, sizeof(c->user));
                sq_col_text(&q, 1, c->session, sizeof(c->session));
                sq_col_text(&q, 2, c->name, sizeof(c->name));
                sq_col_text(&q, 3, c->language, sizeof(c->language));
                c->generation = sq_col_int64(&q, 4);
                c->execution_count = sq_col_int64(&q, 5);
                c->runner_tag = (uint32_t)sq_col_int64(&q, 6);
                sq_col_text(&q, 7, c->container_id, sizeof(c->container_id));
                sq_col_text(&q, 8, c->state, sizeof(c->state));
                sq_col_text(&q, 9, c->lost_cause, sizeof(c->lost_cause));
                c->created_at = sq_col_int64(&q, 10);
                c->last_used = sq_col_int64(&q, 11);
        }
        if (r < 0) {
                free(list);
                return r;
        }
        *ret = list;
        *ret_n = n;
        return 0;
}
