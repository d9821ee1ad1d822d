/* store_cells.h — the store's rows for run_cell's interpreter contexts
 * (issue 25; table contexts, migration 0025). Every query is keyed by the
 * user and session, so one session's contexts are never visible to another.
 * Only the cells module (src/cells/) calls these. */
#ifndef SANDBOXD_STORE_CELLS_H
#define SANDBOXD_STORE_CELLS_H

#include <stddef.h>
#include <stdint.h>

struct store;

#define STORE_CONTEXT_NAME_MAX 64

struct store_context {
        char user[65];
        char session[65];
        char name[STORE_CONTEXT_NAME_MAX + 1];
        char language[16];
        int64_t generation;
        int64_t execution_count;
        uint32_t runner_tag;
        char container_id[65];
        char state[16]; /* "live" | "lost" */
        char lost_cause[32];
        int64_t created_at; /* unix ms */
        int64_t last_used;
};

/* Insert or replace the row of (user, session, name). */
int store_context_put(struct store *s, const struct store_context *row);
/* -ENOENT when there was none. */
int store_context_delete(struct store *s, const char *user, const char *session, const char *name);
/* Every context of the session (session NULL: of every session of user;
 * user NULL too: every context), malloc'd. */
int store_context_list(struct store *s, const char *user, const char *session, struct store_context **ret,
                       size_t *ret_n);
/* Drop every context of a session (destroyed). */
int store_context_delete_session(struct store *s, const char *user, const char *session);

#endif
