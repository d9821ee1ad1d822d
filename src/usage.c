/* usage.c — the live usage of sessions for `sandboxctl top`: the session list, then one
 * Docker stats call per container (one-shot), then the execution counts. No state of its
 * own; the session list is a copy, so no lock is held across the Docker calls. */
#include "sandboxd/usage.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/engine.h"
#include "sandboxd/exec.h"
#include "sandboxd/store.h"

static int row_cmp(const void *a, const void *b)
{
        const struct usage_row *x = a, *y = b;
        int c = strcmp(x->user, y->user);
        return c ? c : strcmp(x->session, y->session);
}

int usage_collect(const struct usage_ctx *c, const char *user, size_t max, struct usage_row **ret, size_t *ret_n)
{
        static const enum session_state live[] = {SESSION_RUNNING, SESSION_PAUSED, SESSION_CREATING};
        struct usage_row *rows = NULL;
        size_t n = 0;

        if (max == 0)
                return -EINVAL;
        for (size_t k = 0; k < ELEMENTSOF(live); k++) {
                struct session_info *list = NULL;
                size_t m = 0, take;
                struct usage_row *grown;
                int r = session_list(c->sessions, user, &live[k], &list, &m);

                if (r < 0) {
                        free(rows);
                        return r;
                }
                take = m < max - n ? m : max - n;
                grown = realloc(rows, (n + take + 1) * sizeof(*rows));
                if (!grown) {
                        session_info_list_free(list, m);
                        free(rows);
                        return -ENOMEM;
                }
                rows = grown;
                for (size_t i = 0; i < take; i++) {
                        struct usage_row *u = &rows[n++];
                        memset(u, 0, sizeof(*u));
                        sbx_strlcpy(u->user, list[i].user, sizeof(u->user));
                        sbx_strlcpy(u->session, list[i].session, sizeof(u->session));
                        sbx_strlcpy(u->container_id, list[i].container_id, sizeof(u->container_id));
                        sbx_strlcpy(u->network_mode, list[i].network_mode, sizeof(u->network_mode));
                        u->state = list[i].state;
                }
                session_info_list_free(list, m);
        }
        for (size_t i = 0; i < n; i++) {
                struct usage_row *u = &rows[i];
                struct engine_stats st;

                if (u->container_id[0] && engine_stats(c->engine, u->container_id, &st, NULL) == 0) {
                        u->has_stats = true;
                        u->cpu_total_ns = st.cpu_total_ns;
                        u->memory_usage = st.memory_usage;
                        u->memory_limit = st.memory_limit;
                        u->pids = st.pids;
                }
                u->sampled_at = sbx_wall_ms();
                u->executions_running = exec_running_count(c->exec, u->user, u->session);
                if (store_exec_count(c->store, u->user, u->session, &u->executions_total) < 0)
                        u->executions_total = -1;
        }
        if (n > 1)
                qsort(rows, n, sizeof(*rows), row_cmp);
        *ret = rows;
        *ret_n = n;
        return 0;
}
