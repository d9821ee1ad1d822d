/* store_node.c — typed queries of session_nodes (migration 0031): the node
 * each session is placed on (node.h, many nodes). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"

int store_node_get(struct store *s, const char *user, const char *session, char *ret, size_t size)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session) || size == 0)
                return -EINVAL;
        r = sq_start(&q, s, "SELECT node FROM session_nodes WHERE user_id = ?1 AND session_id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r > 0)
                sq_col_text(&q, 0, ret, size);
        else
                ret[0] = '\0';
        return 0;
}

int store_node_set(struct store *s, const char *user, const char *session, const char *node, int64_t now_ms)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session) || !node)
                return -EINVAL;
        if (!node[0])
                r = sq_start(&q, s, "DELETE FROM session_nodes WHERE user_id = ?1 AND session_id = ?2");
        else
                r = sq_start(&q, s,
                             "INSERT INTO session_nodes (user_id, session_id, node, placed_at) VALUES (?1, ?2, ?3, ?4) "
                             "ON CONFLICT (user_id, session_id) DO UPDATE SET node = ?3, placed_at = ?4 "
                             "WHERE node <> ?3");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        if (node[0]) {
                sq_text(&q, node);
                sq_int64(&q, now_ms);
        }
        r = sq_step(&q);
        return r < 0 ? r : 0;
}

int store_node_count(struct store *s, const char *node, uint64_t *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, "SELECT COUNT(*) FROM session_nodes WHERE node = ?1");

        if (r < 0)
                return r;
        sq_text(&q, node);
        r = sq_step(&q);
        if (r < 0)
                return r;
        *ret = r > 0 ? (uint64_t)sq_col_int64(&q, 0) : 0;
        return 0;
}

int store_node_counts(struct store *s, struct store_node_count **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        struct store_node_count *v = NULL;
        size_t n = 0, cap = 0;
        int r;

        r = sq_start(&q, s, "SELECT node, COUNT(*) FROM session_nodes GROUP BY node ORDER BY node");
        if (r < 0)
                return r;
        while ((r = sq_step(&q)) > 0) {
                if (n == cap) {
                        struct store_node_count *w = realloc(v, (cap ? cap * 2 : 8) * sizeof(*v));
                        if (!w) {
                                free(v);
                                return -ENOMEM;
                        }
                        v = w;
                        cap = cap ? cap * 2 : 8;
                }
                sq_col_text(&q, 0, v[n].node, sizeof(v[n].node));
                v[n].sessions = (uint64_t)sq_col_int64(&q, 1);
                n++;
        }
        if (r < 0) {
                free(v);
                return r;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}
