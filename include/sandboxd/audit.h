/* audit.h — the one call every module and front records an audit row
 * through (the store keeps the rows; nothing outside the store and this
 * module calls store_audit). An audit row is best effort: a failure to
 * write one is logged at debug and never fails the action it describes.
 * A row carries the trace id of the request the thread serves (reqctx.h)
 * and, for a session with labels, those labels as "labels" in its detail. */
#ifndef SANDBOXD_AUDIT_H
#define SANDBOXD_AUDIT_H

#include <cjson/cJSON.h>

struct store;

/* Record action (required) by actor on user:session (each may be NULL);
 * detail_json is valid JSON or NULL. 0 or -errno (callers may ignore it). */
int audit_record(struct store *st, const char *actor, const char *user, const char *session, const char *action,
                 const char *detail_json);
/* The same with the detail as a cJSON tree, which it takes (and frees;
 * NULL is fine). */
int audit_record_json(struct store *st, const char *actor, const char *user, const char *session, const char *action,
                      cJSON *detail);

#endif
