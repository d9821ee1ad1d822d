/* store_events.h — the store's event log (migration 0027): append, read after
 * an id (all users or one), bounds, prune, and the cursors of readers that
 * follow the log (the webhook sender). Typed queries only;
 * src/store/store_events.c runs the SQL. Errors as in store.h. */
#ifndef SANDBOXD_STORE_EVENTS_H
#define SANDBOXD_STORE_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store;

#define STORE_EVENT_TYPE_MAX 32
#define STORE_EVENT_TRACE_MAX 65  /* REQCTX_ID_MAX + 1 */
#define STORE_EVENT_DATA_MAX 4096 /* bytes of the JSON data object */

struct store_event {
        int64_t id; /* assigned by store_events_append */
        int64_t ts; /* unix ms */
        char type[STORE_EVENT_TYPE_MAX];
        char user_id[65];
        char session_id[65]; /* "" when the event is about no one session */
        char trace_id[STORE_EVENT_TRACE_MAX];
        char *data; /* malloc'd JSON object text (never NULL in a row read back) */
};

/* Free the data of n rows, then the array. NULL is fine. */
void store_events_free(struct store_event *rows, size_t n);

/* Append n events in one transaction, in order; each gets its id (increasing,
 * never reused) in rows[i].id. All or nothing. */
int store_events_append(struct store *s, struct store_event *rows, size_t n);
/* At most limit events with id > after_id, oldest first: of user, or of
 * everyone with user NULL. malloc'd array (free with store_events_free). */
int store_events_after(struct store *s, const char *user, int64_t after_id, size_t limit, struct store_event **ret,
                       size_t *ret_n);
/* The oldest id still in the log and the newest id ever given (0 for none):
 * with an empty log, *ret_oldest is newest + 1. */
int store_events_bounds(struct store *s, int64_t *ret_oldest, int64_t *ret_newest);
/* Delete events older than before_ms, and the oldest past the newest
 * max_count. Returns how many (that would go, with dry_run), or -errno. */
int store_events_prune(struct store *s, int64_t max_count, int64_t before_ms, bool dry_run);

/* A reader's cursor: -ENOENT when it has none yet. */
int store_event_cursor_get(struct store *s, const char *name, int64_t *ret);
int store_event_cursor_set(struct store *s, const char *name, int64_t last_id, int64_t now_ms);

#endif
