/* admin_ops.c — the admin commands an operator changes policy with
 * (admin.h): tokens, per-user quotas and the egress allowlist. Each checks
 * its arguments, calls the module, audits the change and formats the
 * reply; no state, no threads (the connection's worker runs it). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <string.h>

#include "sandboxd/daemon.h"
#include "sandboxd/egress.h"
#include "sandboxd/egress_rules.h"
#include "sandboxd/exec.h"
#include "sandboxd/fronterr.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/metrics.h"
#include "sandboxd/opsview.h"
#include "sandboxd/quota.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
#include "sandboxd/usage.h"

#include "admin_internal.h"

int admin_c_token_create(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user, *role_s, *format;
        enum token_role role = TOKEN_ROLE_AGENT;
        char token[TOKEN_LEN + 1];
        struct token_info info;
        struct sbx_error err = {0};
        cJSON *detail;
        int r;

        if (jparam_string(&q->argv, "user", true, &user, e) < 0 ||
            jparam_string(&q->argv, "role", false, &role_s, e) < 0 ||
            jparam_string(&q->argv, "format", false, &format, e) < 0)
                return -1;
        if (role_s && token_role_from_string(role_s, &role) < 0)
                return fronterr_set(e, "invalid", "role must be agent, connector or operator");
        if (format && strcmp(format, "sbx") != 0 && strcmp(format, "e2b") != 0)
                return fronterr_set(e, "invalid", "format must be sbx or e2b (E2B's key spelling, docs/e2b.md)");
        r = token_create(q->d->store, user, role, token, &info, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        if (format && strcmp(format, "e2b") == 0)
                (void)token_respell(token, TOKEN_PREFIX_E2B);
        detail = cJSON_CreateObject();
        cJSON_AddStringToObject(detail, "token_id", info.id);
        cJSON_AddStringToObject(detail, "role", token_role_to_string(role));
        admin_audit(q, user, NULL, "token.create", detail);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "token", token);
        cJSON_AddStringToObject(*ret, "id", info.id);
        cJSON_AddStringToObject(*ret, "user", info.user);
        cJSON_AddStringToObject(*ret, "role", token_role_to_string(info.role));
        explicit_bzero(token, sizeof(token));
        return 0;
}

int admin_c_token_revoke(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *id;
        struct sbx_error err = {0};
        cJSON *detail;
        int r;

        if (jparam_string(&q->argv, "id", true, &id, e) < 0)
                return -1;
        r = token_revoke(q->d->store, id, &err);
        /* revoked already: a conflict with the token's state (the table's
         * EALREADY is an execution that has ended) */
        if (r == -EALREADY)
                return fronterr_set(e, "conflict", "%s", err.msg);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        detail = cJSON_CreateObject();
        cJSON_AddStringToObject(detail, "token_id", id);
        admin_audit(q, NULL, NULL, "token.revoke", detail);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "id", id);
        cJSON_AddTrueToObject(*ret, "revoked");
        return 0;
}

int admin_c_token_list(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        struct token_info *list = NULL;
        size_t n = 0;
        cJSON *a;
        int r = token_list(q->d->store, &list, &n);

        if (r < 0)
                return fronterr_errno(e, r, NULL, NULL);
        *ret = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(*ret, "tokens");
        for (size_t i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "id", list[i].id);
                cJSON_AddStringToObject(o, "user", list[i].user);
                cJSON_AddStringToObject(o, "role", token_role_to_string(list[i].role));
                jsonutil_add_time(o, "created_at", list[i].created_at);
                jsonutil_add_time(o, "revoked_at", list[i].revoked_at);
                cJSON_AddItemToArray(a, o);
        }
        free(list);
        return 0;
}

/* ---- quotas ---- */

int admin_c_quota_show(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user;

        if (admin_arg_user(q, &user, e) < 0)
                return -1;
        *ret = opsview_quota(q->d, user);
        return 0;
}

int admin_c_quota_set(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->args, "value");
        const char *user, *key;
        struct sbx_error err = {0};
        cJSON *detail;
        int r;

        if (admin_arg_user(q, &user, e) < 0 || jparam_string(&q->argv, "key", true, &key, e) < 0)
                return -1;
        /* a double holds every integer up to 2^53 exactly: more than any quota's range */
        if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int64_t)v->valuedouble)
                return fronterr_set(e, "bad_request", "value must be an integer");
        r = quota_set(q->d->quota, user, key, (int64_t)v->valuedouble, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        detail = cJSON_CreateObject();
        cJSON_AddStringToObject(detail, "key", key);
        cJSON_AddNumberToObject(detail, "value", v->valuedouble);
        admin_audit(q, user, NULL, "quota.set", detail);
        *ret = opsview_quota(q->d, user);
        return 0;
}

int admin_c_quota_unset(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user, *key;
        struct sbx_error err = {0};
        cJSON *detail;
        int r;

        if (admin_arg_user(q, &user, e) < 0 || jparam_string(&q->argv, "key", false, &key, e) < 0)
                return -1;
        r = quota_unset(q->d->quota, user, key, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        detail = cJSON_CreateObject();
        jsonutil_add_text(detail, "key", key ? key : "*");
        admin_audit(q, user, NULL, "quota.unset", detail);
        *ret = opsview_quota(q->d, user);
        cJSON_AddNumberToObject(*ret, "removed", r);
        return 0;
}

int admin_c_quota_list(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        struct store_quota *rows = NULL;
        size_t n = 0;
        cJSON *a, *defaults;
        int r = quota_overrides(q->d->quota, NULL, &rows, &n);

        if (r < 0)
                return fronterr_errno(e, r, NULL, NULL);
        *ret = cJSON_CreateObject();
        defaults = cJSON_AddObjectToObject(*ret, "defaults");
        cJSON_AddNumberToObject(defaults, "max_sessions_per_user", q->d->cfg.max_sessions_per_user);
        cJSON_AddNumberToObject(defaults, "max_exec_per_user", q->d->cfg.max_exec_per_user);
        cJSON_AddNumberToObject(defaults, "max_services_per_session", q->d->cfg.max_services_per_session);
        cJSON_AddNumberToObject(defaults, "max_spool_per_session", (double)q->d->cfg.max_spool_per_session_bytes);
        a = cJSON_AddArrayToObject(*ret, "overrides");
        for (size_t i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "user", rows[i].user_id);
                cJSON_AddStringToObject(o, "key", rows[i].key);
                cJSON_AddNumberToObject(o, "value", (double)rows[i].value);
                cJSON_AddItemToArray(a, o);
        }
        free(rows);
        return 0;
}

/* ---- egress (docs/security.md, "The egress proxy and the SSRF guard") ---- */

/* The session's egress rows, newest first. */
int admin_c_egress_log(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user, *session;
        int limit = 0, r = 0;
        cJSON *rows;

        if (admin_arg_key(q, &user, &session, e) < 0 ||
            admin_arg_limit(q, "limit", ADMIN_LOGS_DEFAULT, ADMIN_LOGS_MAX, &limit, e) < 0)
                return -1;
        rows = egress_rules_log_json(q->d->store, user, session, (size_t)limit, &r);
        if (!rows)
                return fronterr_errno(e, r < 0 ? r : -ENOMEM, NULL, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", user);
        cJSON_AddStringToObject(*ret, "session", session);
        cJSON_AddItemToObject(*ret, "entries", rows);
        return 0;
}

/* The effective policy of user (and session, if given). */
int admin_c_egress_policy(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user, *session;

        if (admin_arg_user(q, &user, e) < 0 || jparam_string(&q->argv, "session", false, &session, e) < 0)
                return -1;
        if (session && !session_id_valid(session))
                return fronterr_set(e, "invalid", "invalid session_id: must be 1-64 characters of [A-Za-z0-9_.-]");
        *ret = egress_rules_policy_json(q->d->store, q->d->privacy, &q->d->cfg, user, session);
        if (!*ret)
                return fronterr_set(e, "internal", "out of memory");
        cJSON_AddStringToObject(*ret, "user", user);
        jsonutil_add_text(*ret, "session", session);
        return 0;
}

static int egress_change(struct admin_req *q, cJSON **ret, struct fronterr *e, bool remove)
{
        const char *user, *session, *pattern;
        struct sbx_error err = {0};
        int r;

        if (admin_arg_user(q, &user, e) < 0 || jparam_string(&q->argv, "session", false, &session, e) < 0 ||
            jparam_string(&q->argv, "pattern", true, &pattern, e) < 0)
                return -1;
        r = egress_rules_change(q->d->store, &q->d->cfg, user, session, pattern, remove, q->actor, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        return admin_c_egress_policy(q, ret, e);
}

int admin_c_egress_allow(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        return egress_change(q, ret, e, false);
}

int admin_c_egress_deny(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        return egress_change(q, ret, e, true);
}
