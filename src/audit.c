/* audit.c — the core's audit call (audit.h): actions, the fronts and the
 * collectors record through here, so what an audit row holds and what a
 * failed write does is decided in one place: the current request's trace
 * id (reqctx.h) in its trace_id column, and the session's labels
 * (sessspec.h) as "labels" in its detail. And the one reader of a
 * session's rows as JSON, in pages, for the API and the admin socket.
 * No state, no threads. */
#include "sandboxd/audit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/jsonutil.h"
#include "sandboxd/log.h"
#include "sandboxd/reqctx.h"
#include "sandboxd/store.h"

/* detail_json with the session's labels added as "labels" (malloc'd), or
 * NULL when it has none (or the detail is not an object): then the detail
 * goes as given. Labels are bounded (sessspec.h), so the row stays so. */
static char *with_labels(struct store *st, const char *user, const char *session, const char *detail_json)
{
        struct store_session_spec spec = {0};
        cJSON *detail = NULL, *labels = NULL;
        char *out = NULL;

        if (!user || !session || !*user || !*session || store_session_spec_get(st, user, session, &spec) < 0)
                return NULL;
        if (!spec.labels_json)
                goto out;
        detail = detail_json ? cJSON_Parse(detail_json) : cJSON_CreateObject();
        labels = cJSON_Parse(spec.labels_json);
        if (!cJSON_IsObject(detail) || !labels || cJSON_GetObjectItemCaseSensitive(detail, "labels"))
                goto out;
        cJSON_AddItemToObject(detail, "labels", labels);
        labels = NULL;
        out = cJSON_PrintUnformatted(detail);
out:
        cJSON_Delete(labels);
        cJSON_Delete(detail);
        store_session_spec_done(&spec);
        return out;
}

int audit_record(struct store *st, const char *actor, const char *user, const char *session, const char *action,
                 const char *detail_json)
{
        char *labelled = with_labels(st, user, session, detail_json);
        int r = store_audit_traced(st, actor, user, session, action, labelled ? labelled : detail_json,
                                   reqctx_trace_id());

        free(labelled);

        if (r < 0)
                log_debug("audit: cannot record %s: %s", action ? action : "(none)", strerror(-r));
        return r;
}

int audit_record_json(struct store *st, const char *actor, const char *user, const char *session, const char *action,
                      cJSON *detail)
{
        char *json = detail ? cJSON_PrintUnformatted(detail) : NULL;
        int r = audit_record(st, actor, user, session, action, json);

        free(json);
        cJSON_Delete(detail);
        return r;
}

int audit_session_page(struct store *st, const char *user, const char *session, int64_t before_id, size_t limit,
                       cJSON **ret)
{
        struct store_audit_row *rows = NULL;
        size_t n = 0;
        cJSON *o, *a;
        int r;

        if (limit == 0 || limit >= 100000 || before_id < 0)
                return -EINVAL;
        /* one row more than asked says whether an older page exists */
        r = store_audit_page(st, user, session, before_id, limit + 1, &rows, &n);
        if (r < 0)
                return r;
        o = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(o, "audit");
        for (size_t i = n > limit ? 1 : 0; i < n; i++) {
                cJSON *row = cJSON_CreateObject(), *detail = rows[i].detail ? cJSON_Parse(rows[i].detail) : NULL;
                cJSON_AddNumberToObject(row, "id", (double)rows[i].id);
                cJSON_AddNumberToObject(row, "ts", (double)rows[i].ts);
                jsonutil_add_text(row, "actor", rows[i].actor);
                jsonutil_add_text(row, "action", rows[i].action);
                if (detail)
                        cJSON_AddItemToObject(row, "detail", detail);
                else
                        jsonutil_add_text(row, "detail", rows[i].detail);
                cJSON_AddItemToArray(a, row);
        }
        if (n > limit)
                cJSON_AddNumberToObject(o, "next_before", (double)rows[1].id);
        else
                cJSON_AddNullToObject(o, "next_before");
        store_audit_rows_free(rows, n);
        *ret = o;
        return 0;
}
