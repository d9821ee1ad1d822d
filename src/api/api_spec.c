/* api_spec.c — labels and requested resources on the API (issue 29):
 * recording them when a call creates a session (create_session, or the
 * first call of any session method that names them), refusing a later call
 * that asks for different ones, and showing them in session_info and
 * list_sessions. The rules are sessspec.h's; the row is the session
 * module's (session_spec_*, session.h). No state, no threads. */
#include <errno.h>
#include <string.h>

#include "api_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/quota.h"
#include "sandboxd/session.h"
#include "sandboxd/sessspec.h"
#include "sandboxd/store.h"

int api_spec_parse(struct api_req *q, struct store_session_spec *ret, bool *ret_given, struct fronterr *e)
{
        struct sbx_error err = {0};
        struct quota_limits lim;
        int r;

        r = sessspec_parse(q->params, ret, ret_given, &err);
        if (r < 0)
                return fronterr_set(e, "invalid", "%s", err.msg);
        if (!*ret_given)
                return 0;
        quota_limits_get(q->d->quota, &q->d->cfg, q->tok.user, &lim);
        r = sessspec_check(&q->d->cfg, &lim, ret, &err);
        if (r < 0) {
                store_session_spec_done(ret);
                return fronterr_set(e, "invalid", "%s", err.msg);
        }
        return 0;
}

int api_spec_record(struct api_req *q, const struct store_session_spec *want, bool *ret_inserted, struct fronterr *e)
{
        struct sbx_error err = {0};
        int r = session_spec_record(q->d->sessions, q->tok.user, q->session, want, ret_inserted, &err);

        return r < 0 ? fronterr_errno(e, r, &err, NULL) : 0;
}

int api_spec_first_use(struct api_req *q, bool *ret_recorded, struct fronterr *e)
{
        struct store_session_spec want = {0};
        struct session_info info;
        bool given, known;
        int r;

        *ret_recorded = false;
        if (!q->session || !*q->session)
                return 0;
        r = api_spec_parse(q, &want, &given, e);
        if (r < 0 || !given)
                return r;
        known = session_get_info(q->d->sessions, q->tok.user, q->session, &info) == 0;
        if (known) {
                struct sbx_error err = {0};

                session_info_done(&info);
                r = session_spec_check(q->d->sessions, q->tok.user, q->session, &want, &err);
                if (r < 0)
                        r = fronterr_errno(e, r, &err, NULL);
        } else {
                r = api_spec_record(q, &want, ret_recorded, e);
        }
        store_session_spec_done(&want);
        return r;
}

void api_spec_forget_unmade(struct api_req *q)
{
        struct session_info info;

        if (session_get_info(q->d->sessions, q->tok.user, q->session, &info) == 0) {
                session_info_done(&info);
                return;
        }
        session_spec_forget(q->d->sessions, q->tok.user, q->session);
}

void api_spec_add(struct api_req *q, const char *session, cJSON *o)
{
        struct store_session_spec spec = {0};
        bool have = session_spec_get(q->d->sessions, q->tok.user, session, &spec) == 0;

        sessspec_add_json(o, &q->d->cfg, have ? &spec : NULL);
        store_session_spec_done(&spec);
}

int api_spec_filter(struct api_req *q, cJSON **ret_filter, struct fronterr *e)
{
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(q->params, "labels");
        struct sbx_error err = {0};
        char *canon = NULL;

        *ret_filter = NULL;
        if (!f || cJSON_IsNull(f))
                return 0;
        if (sessspec_labels_parse(f, "params.labels", &canon, &err) < 0)
                return fronterr_set(e, "invalid", "%s", err.msg);
        *ret_filter = canon ? cJSON_Parse(canon) : NULL;
        free(canon);
        return 0;
}

bool api_spec_matches(struct api_req *q, const char *session, const cJSON *filter)
{
        struct store_session_spec spec = {0};
        bool ok;

        if (!filter)
                return true;
        if (session_spec_get(q->d->sessions, q->tok.user, session, &spec) < 0)
                return false;
        ok = sessspec_labels_match(spec.labels_json, filter);
        store_session_spec_done(&spec);
        return ok;
}

void api_spec_add_labels(struct api_req *q, const char *session, cJSON *o)
{
        struct store_session_spec spec = {0};
        cJSON *labels;

        if (session_spec_get(q->d->sessions, q->tok.user, session, &spec) == 0 && spec.labels_json &&
            (labels = cJSON_Parse(spec.labels_json)))
                cJSON_AddItemToObject(o, "labels", labels);
        store_session_spec_done(&spec);
}
