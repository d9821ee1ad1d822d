/* api_pause.c — pause_session and resume_session (session.h, pause and
 * resume): type-check, call the session manager, format. A user reaches
 * only its own sessions (the token names the user), so another user's
 * session is as unknown as a name never used: not_found. Neither method
 * makes a session, and neither goes through the first-use spec (api.c).
 * No state, no locks. */
#include <errno.h>

#include "api_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/session.h"

static void add_state(struct api_req *q, cJSON *o)
{
        struct session_info info;

        if (session_get_info(q->d->sessions, q->tok.user, q->session, &info) < 0)
                return;
        jsonutil_add_lower(o, "state", session_state_to_string(info.state));
        cJSON_AddNumberToObject(o, "last_activity", (double)info.last_activity);
        if (info.paused_at)
                cJSON_AddNumberToObject(o, "paused_at", (double)info.paused_at);
        else
                cJSON_AddNullToObject(o, "paused_at");
        session_info_done(&info);
}

static int known(struct api_req *q, struct fronterr *e)
{
        struct session_info info;

        if (session_get_info(q->d->sessions, q->tok.user, q->session, &info) < 0)
                return fronterr_set(e, "not_found", "no session %s for this user", q->session);
        session_info_done(&info);
        return 0;
}

int api_m_pause_session(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        struct sbx_error err = {0};
        bool was = false, to_disk = false;
        int r;

        if (known(q, e) < 0 || jparam_bool(&q->args, "to_disk", false, &to_disk, e) < 0)
                return -1;
        /* to_disk: a microVM's memory saved and QEMU gone (engine_qemu.h); others pause in memory */
        r = session_pause(q->d->sessions, q->tok.user, q->session, to_disk ? "to_disk" : "request", &was, &err);
        if (r == -EOPNOTSUPP)
                return fronterr_set(e, "unavailable", "%s", err.msg);
        if (r == -ENOENT)
                return fronterr_set(e, "not_found", "no session %s for this user", q->session);
        if (r < 0)
                return fronterr_errno(e, r, &err, "cannot pause the session");
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "session", q->session);
        cJSON_AddBoolToObject(*ret, "paused", true);
        cJSON_AddBoolToObject(*ret, "already_paused", was);
        add_state(q, *ret);
        return 0;
}

int api_m_resume_session(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        struct sbx_error err = {0};
        bool was = false;
        int r;

        if (known(q, e) < 0)
                return -1;
        r = session_resume(q->d->sessions, q->tok.user, q->session, &was, &err);
        if (r == -ENOENT)
                return fronterr_set(e, "not_found", "%s", err.msg[0] ? err.msg : "no such session");
        if (r < 0)
                return fronterr_errno(e, r, &err, "cannot resume the session");
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "session", q->session);
        cJSON_AddBoolToObject(*ret, "resumed", was);
        add_state(q, *ret);
        return 0;
}
