/* api_events.c — the events method: the caller's lifecycle events
 * (include/sandboxd/events.h) by polling, for clients without SSE (the API
 * socket, sandboxctl, plain HTTP clients). GET /v1/events is the stream.
 *
 *   events {since?, limit?} -> {"events": [event...], "next": id, "gap": bool, "oldest_id": id}
 * since: the last id the caller has (0: the whole log); without it nothing
 * is returned and next is the log's newest id, the point to poll from.
 * limit: 1-1000 (100). gap: since is older than the log, so events in
 * between are lost; the events returned start at the oldest still kept.
 * A user only ever reads its own events. No state, no locks. */
#include <errno.h>

#include "api_internal.h"
#include "sandboxd/events.h"

#define API_EVENTS_LIMIT_MAX 1000

int api_m_events(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        struct event **evs = NULL;
        size_t n = 0;
        int64_t since, limit, oldest, next;
        bool gap;
        cJSON *o, *arr;
        int r;

        if (jparam_int(&q->args, "since", 0, INT64_MAX / 2, -1, &since, e) < 0 ||
            jparam_int(&q->args, "limit", 1, API_EVENTS_LIMIT_MAX, 100, &limit, e) < 0)
                return -1;
        r = events_read(q->tok.role == TOKEN_ROLE_OPERATOR ? NULL : q->tok.user, since, (size_t)limit, &evs, &n, &gap,
                        &oldest, &next);
        if (r == -ENODEV)
                return fronterr_set(e, "unavailable", "the event log is not available in this daemon");
        if (r < 0)
                return fronterr_errno(e, r, NULL, "cannot read the event log");
        o = cJSON_CreateObject();
        arr = cJSON_AddArrayToObject(o, "events");
        for (size_t i = 0; o && arr && i < n; i++) {
                _cleanup_free_ char *text = event_to_json(evs[i]);
                cJSON *item = text ? cJSON_Parse(text) : NULL;
                if (item)
                        cJSON_AddItemToArray(arr, item);
        }
        events_free_array(evs, n);
        if (!o || !arr) {
                cJSON_Delete(o);
                return fronterr_set(e, "internal", "out of memory");
        }
        cJSON_AddNumberToObject(o, "next", (double)next);
        cJSON_AddBoolToObject(o, "gap", gap);
        cJSON_AddNumberToObject(o, "oldest_id", (double)oldest);
        *ret = o;
        return 0;
}
