/* audit.h — the one call every module and front records an audit row
 * through (the store keeps the rows; nothing outside the store and this
 * module calls store_audit). An audit row is best effort: a failure to
 * write one is logged at debug and never fails the action it describes.
 * A row carries the trace id of the request the thread serves (reqctx.h)
 * and, for a session with labels, those labels as "labels" in its detail. */
#ifndef SANDBOXD_AUDIT_H
#define SANDBOXD_AUDIT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

struct store;

/* Rows a page of the API's session_audit holds at most. */
#define AUDIT_PAGE_MAX 500

/* Record action (required) by actor on user:session (each may be NULL);
 * detail_json is valid JSON or NULL. 0 or -errno (callers may ignore it). */
int audit_record(struct store *st, const char *actor, const char *user, const char *session, const char *action,
                 const char *detail_json);
/* The same with the detail as a cJSON tree, which it takes (and frees;
 * NULL is fine). */
int audit_record_json(struct store *st, const char *actor, const char *user, const char *session, const char *action,
                      cJSON *detail);

/* A page of user:session's audit rows for whoever may read that session (its
 * owner through the API's session_audit, an admin through sandboxctl logs):
 * {audit: [{id, ts, actor, action, detail}], next_before: id | null}, the newest
 * `limit` (1-100000) rows older than before_id (0: from the newest),
 * oldest first; next_before is the before_id of the next older page, null when
 * there is none. detail is the row's JSON (a string if it does not parse). A
 * caller has checked that the asker owns user:session. 0 or -errno. */
int audit_session_page(struct store *st, const char *user, const char *session, int64_t before_id, size_t limit,
                       cJSON **ret);

#endif
