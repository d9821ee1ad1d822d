/* api_methods.c — the API method table and the methods about files,
 * services, the session and its policy (protocol in include/sandboxd/api.h),
 * with the parameter and formatting helpers the method files share
 * (api_internal.h); executions are api_executions.c's, the agent tools
 * api_agent.c's, tasks api_tasks.c's. Each method type-checks its
 * parameters, calls the module and formats the result. Every
 * method acts for the token's user only (q->tok.user) and within
 * params.session (q->session), both checked before it runs. No state and no
 * threads of its own; waiting and streaming are api.c's. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "sandboxd/audit.h"
#include "sandboxd/daemon.h"
#include "sandboxd/egress_rules.h"
#include "sandboxd/files.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/launch.h"
#include "sandboxd/privacy.h"
#include "sandboxd/secrets.h"
#include "sandboxd/service.h"
#include "sandboxd/store_egress.h"
#include "sandboxd/session.h"
#include "sandboxd/token.h"
#include "sandboxd/utf8.h"
#include "sandboxd/wsquota.h"


/* ---- parameters ---- */
/* params.network of an execution (egress_rules.h: egress_net_parse):
 * *ret the narrowing (malloc'd), or NULL for the session's egress. The
 * runner attributes each proxied connection to its execution and the proxy
 * narrows by it (docs/security.md, "Network policy per execution");
 * launch_exec refuses it for a bridge session (launch.h). */
int api_param_network_parse(struct api_req *q, struct egress_net **ret, struct fronterr *e)
{
        struct egress_net *net = malloc(sizeof(*net));
        struct sbx_error err = {0};
        int r;

        *ret = NULL;
        if (!net)
                return fronterr_set(e, "internal", "out of memory");
        r = egress_net_parse(cJSON_GetObjectItemCaseSensitive(q->params, "network"), net, &err);
        if (r < 0) {
                free(net);
                return fronterr_set(e, "bad_request", "params.%s%s", strncmp(err.msg, "network", 7) ? "network: " : "",
                                    err.msg);
        }
        if (!net->set) {
                free(net);
                return 0;
        }
        *ret = net;
        return 0;
}

/* The same, refused here for a bridge session (run_cell, which starts
 * without launch_exec). */
int api_param_network(struct api_req *q, struct egress_net **ret, struct fronterr *e)
{
        struct sbx_error err = {0};
        int r;

        if (api_param_network_parse(q, ret, e) < 0)
                return -1;
        r = launch_network_check(&q->d->launch, q->tok.user, q->session, *ret, &err);
        if (r < 0) {
                free(*ret);
                *ret = NULL;
                return fronterr_set(e, "unavailable", "%s", err.msg);
        }
        return 0;
}

/* params.<name>: "utf8" (default) or "base64". */
int api_param_encoding(struct api_req *q, const char *name, bool *ret_base64, struct fronterr *e)
{
        const char *s;
        if (jparam_string(&q->args, name, false, &s, e) < 0)
                return -1;
        if (!s || strcmp(s, "utf8") == 0 || strcmp(s, "utf-8") == 0)
                *ret_base64 = false;
        else if (strcmp(s, "base64") == 0)
                *ret_base64 = true;
        else
                return fronterr_set(e, "invalid", "params.%s must be \"utf8\" or \"base64\"", name);
        return 0;
}

/* A string param as bytes: decoded from base64 when encoding says so. */
int api_param_bytes(struct api_req *q, const char *name, bool required, bool base64, unsigned char **ret,
                    size_t *ret_len, struct fronterr *e)
{
        const char *s;

        if (jparam_string(&q->args, name, required, &s, e) < 0)
                return -1;
        if (!s) {
                *ret = NULL;
                *ret_len = 0;
                return 0;
        }
        if (base64) {
                if (base64_decode(s, strlen(s), ret, ret_len) < 0)
                        return fronterr_set(e, "invalid", "params.%s is not valid base64", name);
                return 0;
        }
        *ret_len = strlen(s);
        *ret = malloc(*ret_len + 1);
        if (!*ret)
                return fronterr_set(e, "internal", "out of memory");
        memcpy(*ret, s, *ret_len + 1);
        return 0;
}

/* ---- formatting ---- */

static void add_ports(cJSON *o, const char *key, const int *host_ports, size_t n, int base)
{
        cJSON *a = cJSON_AddArrayToObject(o, key);
        for (size_t i = 0; a && i < n; i++) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddNumberToObject(p, "container_port", base + (int)i);
                cJSON_AddNumberToObject(p, "host_port", host_ports[i]);
                cJSON_AddItemToArray(a, p);
        }
}

static cJSON *service_json(const struct service_info *s)
{
        cJSON *o = cJSON_CreateObject(), *a;
        if (!o)
                return NULL;
        cJSON_AddStringToObject(o, "name", s->name);
        jsonutil_add_lower(o, "state", service_state_to_string(s->state));
        if (s->pid > 0)
                cJSON_AddNumberToObject(o, "pid", s->pid);
        else
                cJSON_AddNullToObject(o, "pid");
        if (s->exit_code >= 0)
                cJSON_AddNumberToObject(o, "exit_code", s->exit_code);
        else
                cJSON_AddNullToObject(o, "exit_code");
        jsonutil_add_text(o, "command", s->command);
        jsonutil_add_text(o, "workdir", s->workdir);
        a = cJSON_AddArrayToObject(o, "ports");
        for (size_t i = 0; a && i < s->n_ports && i < SERVICE_MAX_PORTS; i++) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddNumberToObject(p, "container_port", s->ports[i].container_port);
                if (s->ports[i].host_port > 0)
                        cJSON_AddNumberToObject(p, "host_port", s->ports[i].host_port);
                else
                        cJSON_AddNullToObject(p, "host_port");
                cJSON_AddItemToArray(a, p);
        }
        cJSON_AddNumberToObject(o, "started_at", (double)s->started_at);
        if (s->stopped_at > 0)
                cJSON_AddNumberToObject(o, "stopped_at", (double)s->stopped_at);
        else
                cJSON_AddNullToObject(o, "stopped_at");
        jsonutil_add_text(o, "last_error", s->last_error);
        return o;
}

/* ---- methods ---- */

int api_preflight_session(struct api_req *q, struct fronterr *e)
{
        struct session *s = NULL;
        struct sbx_error err = {0};
        int r = session_acquire(q->d->sessions, q->tok.user, q->session, &s, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, "the session's container is not available");
        session_release(s);
        return 0;
}

static int m_write_file(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *path;
        bool base64;
        _cleanup_free_ unsigned char *data = NULL;
        size_t len = 0;
        char norm[FILES_PATH_MAX];
        struct sbx_error err = {0};
        int r;

        if (jparam_string(&q->args, "path", true, &path, e) < 0 || api_param_encoding(q, "encoding", &base64, e) < 0 ||
            api_param_bytes(q, "content", true, base64, &data, &len, e) < 0)
                return -1;
        r = files_write(&q->d->files, q->tok.user, q->session, path, data, len, norm, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "path", norm);
        cJSON_AddNumberToObject(*ret, "bytes", (double)len);
        return 0;
}

static int m_read_file(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *path;
        int64_t offset, length;
        bool base64;
        struct files_read_result res;
        struct sbx_error err = {0};
        int r;

        if (jparam_string(&q->args, "path", true, &path, e) < 0 ||
            jparam_int(&q->args, "offset", 0, INT64_MAX / 4, 0, &offset, e) < 0 ||
            jparam_int(&q->args, "length", 0, INT64_MAX / 4, -1, &length, e) < 0 ||
            api_param_encoding(q, "encoding", &base64, e) < 0)
                return -1;
        r = files_read(&q->d->files, q->tok.user, q->session, path, (uint64_t)offset, length, &res, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "path", res.path);
        api_add_bytes(*ret, "content", res.data, res.len, base64);
        cJSON_AddStringToObject(*ret, "encoding", base64 ? "base64" : "utf8");
        if (!base64)
                cJSON_AddBoolToObject(*ret, "valid_utf8",
                                      utf8_is_valid(res.data, res.len) && memchr(res.data, '\0', res.len) == NULL);
        cJSON_AddNumberToObject(*ret, "offset", (double)offset);
        cJSON_AddNumberToObject(*ret, "bytes", (double)res.len);
        cJSON_AddNumberToObject(*ret, "size", (double)res.size);
        cJSON_AddBoolToObject(*ret, "eof", res.eof);
        files_read_result_done(&res);
        return 0;
}

static int m_list_files(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *path;
        char norm[FILES_PATH_MAX];
        struct files_entry *list = NULL;
        size_t n = 0;
        bool truncated = false;
        struct sbx_error err = {0};
        cJSON *a;
        int r;

        if (jparam_string(&q->args, "path", false, &path, e) < 0)
                return -1;
        r = files_list(&q->d->files, q->tok.user, q->session, path, norm, &list, &n, &truncated, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "path", norm);
        a = cJSON_AddArrayToObject(*ret, "entries");
        for (size_t i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                api_add_bytes(o, "name", list[i].name, strlen(list[i].name), false);
                cJSON_AddStringToObject(o, "type", files_type_to_string(list[i].type));
                cJSON_AddNumberToObject(o, "size", (double)list[i].size);
                cJSON_AddItemToArray(a, o);
        }
        cJSON_AddBoolToObject(*ret, "truncated", truncated);
        free(list);
        return 0;
}

static int need_services(struct api_req *q, struct fronterr *e)
{
        if (!q->d->services)
                return fronterr_set(e, "unavailable", "services are not available in this daemon");
        return 0;
}

static int m_start_service(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *name, *command, *workdir;
        struct service_info info;
        struct sbx_error err = {0};
        int r;

        if (jparam_string(&q->args, "name", true, &name, e) < 0 ||
            jparam_string(&q->args, "command", true, &command, e) < 0 ||
            jparam_string(&q->args, "workdir", false, &workdir, e) < 0 || need_services(q, e) < 0)
                return -1;
        r = service_start(q->d->services, q->tok.user, q->session, name, command, workdir, &info, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = service_json(&info);
        return 0;
}

static int m_stop_service(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *name;
        struct service_info info;
        struct sbx_error err = {0};
        int r;

        if (jparam_string(&q->args, "name", true, &name, e) < 0 || need_services(q, e) < 0)
                return -1;
        r = service_stop(q->d->services, q->tok.user, q->session, name, &info, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = service_json(&info);
        return 0;
}

static int m_list_services(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        struct service_info *list = NULL;
        size_t n = 0;
        cJSON *a;
        int r;

        if (need_services(q, e) < 0)
                return -1;
        r = service_list(q->d->services, q->tok.user, q->session, &list, &n);
        if (r < 0)
                return fronterr_errno(e, r, NULL, "cannot list services");
        *ret = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(*ret, "services");
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToArray(a, service_json(&list[i]));
        free(list);
        return 0;
}

static int m_service_logs(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *name;
        int64_t tail;
        _cleanup_free_ char *out = NULL, *errs = NULL;
        struct sbx_error err = {0};
        int r;

        if (jparam_string(&q->args, "name", true, &name, e) < 0 ||
            jparam_int(&q->args, "tail_lines", 1, 10000, 100, &tail, e) < 0 || need_services(q, e) < 0)
                return -1;
        r = service_logs(q->d->services, q->tok.user, q->session, name, (int)tail, &out, &errs, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "name", name);
        api_add_bytes(*ret, "stdout", out ? out : "", out ? strlen(out) : 0, false);
        api_add_bytes(*ret, "stderr", errs ? errs : "", errs ? strlen(errs) : 0, false);
        return 0;
}

static void add_datasets(cJSON *o, struct daemon *d, const char *user, const char *session)
{
        struct privacy_dataset *list = NULL;
        size_t n = 0;
        cJSON *a = cJSON_AddArrayToObject(o, "datasets");

        if (!d->privacy || privacy_list(d->privacy, user, session, &list, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                cJSON *x = cJSON_CreateObject();
                api_add_bytes(x, "dataset", list[i].dataset, strlen(list[i].dataset), false);
                jsonutil_add_text(x, "source", list[i].source);
                cJSON_AddNumberToObject(x, "marked_at", (double)list[i].marked_at);
                cJSON_AddItemToArray(a, x);
        }
        free(list);
}

/* "workspace_usage": the workspace's use of its disk quota. */
static void add_workspace_usage(cJSON *o, const struct sbx_config *cfg, const char *user, const char *session)
{
        struct wsquota_usage u;

        wsquota_usage(cfg, user, session, &u);
        cJSON_AddItemToObject(o, "workspace_usage", wsquota_usage_to_json(&u));
}

/* The session's own audit rows, newest page first: only ever the token's user's
 * rows (the key is q->tok.user), read from the store; a session is never made. */
static int m_session_audit(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        int64_t limit, before;
        int r;

        if (jparam_int(&q->args, "limit", 1, AUDIT_PAGE_MAX, 100, &limit, e) < 0 ||
            jparam_int(&q->args, "before", 0, INT64_C(1) << 53, 0, &before, e) < 0)
                return -1;
        r = audit_session_page(q->d->store, q->tok.user, q->session, before, (size_t)limit, ret);
        if (r < 0)
                return fronterr_errno(e, r, NULL, "cannot read the session's audit rows");
        cJSON_AddStringToObject(*ret, "session", q->session);
        return 0;
}

static int m_session_info(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        struct session_info info;
        int r = session_get_info(q->d->sessions, q->tok.user, q->session, &info);

        if (r == -ENOENT) {
                /* First contact: create it, as any other call would. */
                if (api_preflight_session(q, e) < 0)
                        return -1;
                r = session_get_info(q->d->sessions, q->tok.user, q->session, &info);
        }
        if (r < 0)
                return fronterr_errno(e, r, NULL, "cannot read the session");
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", info.user);
        cJSON_AddStringToObject(*ret, "session", info.session);
        jsonutil_add_lower(*ret, "state", session_state_to_string(info.state));
        jsonutil_add_text(*ret, "network_mode", info.network_mode);
        jsonutil_add_text(*ret, "runtime", info.runtime);
        if (info.accel[0]) /* a microVM's: kvm or tcg */
                cJSON_AddStringToObject(*ret, "accel", info.accel);
        if (info.rootfs_note[0]) /* a microVM on the busybox guest: why not the image */
                cJSON_AddStringToObject(*ret, "rootfs_note", info.rootfs_note);
        cJSON_AddBoolToObject(*ret, "pooled", info.pooled);
        cJSON_AddBoolToObject(*ret, "private",
                              q->d->privacy && privacy_is_private(q->d->privacy, q->tok.user, q->session));
        add_datasets(*ret, q->d, q->tok.user, q->session);
        add_ports(*ret, "ports", info.ports, info.n_ports, q->d->cfg.container_port_base);
        jsonutil_add_text(*ret, "container_id", info.container_id);
        jsonutil_add_text(*ret, "image", info.image);
        char node[65];
        daemon_session_node(q->d, info.user, info.session, node, sizeof(node));
        jsonutil_add_text(*ret, "node", node); /* the node agent serving it; null in one process */
        cJSON_AddNumberToObject(*ret, "created_at", (double)info.created_at);
        cJSON_AddNumberToObject(*ret, "last_activity", (double)info.last_activity);
        jsonutil_add_text(*ret, "last_error", info.last_error);
        jsonutil_add_text(*ret, "error_cause", info.error_cause);
        if (info.paused_at)
                cJSON_AddNumberToObject(*ret, "paused_at", (double)info.paused_at);
        add_workspace_usage(*ret, &q->d->cfg, q->tok.user, q->session);
        api_spec_add(q, q->session, *ret); /* labels and resources (issue 29) */
        cJSON_AddItemToObject(*ret, "egress",
                              egress_rules_policy_json(q->d->store, q->d->privacy, &q->d->cfg, q->tok.user,
                                                       q->session));
        session_info_done(&info);
        return 0;
}

/* A connector adds (or, with remove, takes back) an egress pattern for this
 * session, or with scope "user" for every session of its user. */
static int m_egress_allow(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *pattern, *scope;
        struct sbx_error err = {0};
        bool remove = false, user_wide;
        int r;

        if (q->tok.role != TOKEN_ROLE_CONNECTOR)
                return fronterr_set(e, "forbidden", "egress_allow needs a connector token; this token's role is %s",
                                    token_role_to_string(q->tok.role));
        if (jparam_string(&q->args, "pattern", true, &pattern, e) < 0 ||
            jparam_string(&q->args, "scope", false, &scope, e) < 0 ||
            jparam_bool(&q->args, "remove", false, &remove, e) < 0)
                return -1;
        if (scope && strcmp(scope, "session") != 0 && strcmp(scope, "user") != 0)
                return fronterr_set(e, "invalid", "scope must be session or user");
        user_wide = scope && strcmp(scope, "user") == 0;
        r = egress_rules_change(q->d->store, &q->d->cfg, q->tok.user, user_wide ? NULL : q->session, pattern, remove,
                                q->actor, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = egress_rules_policy_json(q->d->store, q->d->privacy, &q->d->cfg, q->tok.user, q->session);
        if (!*ret)
                return fronterr_set(e, "internal", "out of memory");
        cJSON_AddStringToObject(*ret, "session", q->session);
        return 0;
}

/* One array member of patterns into dst (at most STORE_EGRESS_NARROW_MAX). */
static int narrow_list(struct api_req *q, const char *name, char (*dst)[STORE_EGRESS_PATTERN_MAX], size_t *ret_n,
                       struct fronterr *e)
{
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(q->args.obj, name), *it;

        *ret_n = 0;
        if (!a || cJSON_IsNull(a))
                return 0;
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > STORE_EGRESS_NARROW_MAX)
                return fronterr_set(e, "invalid", "params.%s must be an array of at most %d host patterns", name,
                                    STORE_EGRESS_NARROW_MAX);
        cJSON_ArrayForEach(it, a) {
                if (!cJSON_IsString(it) || !sbx_strlcpy(dst[*ret_n], it->valuestring, STORE_EGRESS_PATTERN_MAX))
                        return fronterr_set(e, "invalid", "params.%s holds host patterns (strings of at most %d)", name,
                                            STORE_EGRESS_PATTERN_MAX - 1);
                (*ret_n)++;
        }
        return 0;
}

/* Any token narrows its own session's egress (never widens it: egress_rules.h). */
static int m_narrow_egress(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        static const char *const known[] = {"session", "allow", "deny", "only", NULL};
        _cleanup_free_ struct store_egress_narrow *n = calloc(1, sizeof(*n));
        struct session_info info;
        struct sbx_error err = {0};
        const cJSON *it;
        const char *mode;
        int r;

        if (!n)
                return fronterr_set(e, "internal", "out of memory");
        cJSON_ArrayForEach(it, q->args.obj) {
                size_t i = 0;
                while (known[i] && strcmp(known[i], it->string) != 0)
                        i++;
                if (!known[i])
                        return fronterr_set(e, "invalid", "params.%.64s is not a member of narrow_egress", it->string);
        }
        if (narrow_list(q, "allow", n->allow, &n->n_allow, e) < 0 ||
            narrow_list(q, "deny", n->deny, &n->n_deny, e) < 0 ||
            jparam_bool(&q->args, "only", n->n_allow > 0, &n->allow_only, e) < 0)
                return -1;
        r = session_get_info(q->d->sessions, q->tok.user, q->session, &info);
        if (r < 0)
                return fronterr_errno(e, r, NULL, "no such session");
        session_info_done(&info);
        mode = egress_rules_mode(q->d->privacy, &q->d->cfg, q->tok.user, q->session);
        if (strcmp(mode, "bridge") == 0)
                return fronterr_set(e, "conflict",
                                    "this daemon gives sessions raw networking (network_default bridge): their egress "
                                    "does not pass the proxy, so a narrowing could not be enforced");
        r = egress_narrow_set(q->d->store, &q->d->cfg, q->tok.user, q->session, n, q->actor, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = egress_rules_policy_json(q->d->store, q->d->privacy, &q->d->cfg, q->tok.user, q->session);
        if (!*ret)
                return fronterr_set(e, "internal", "out of memory");
        cJSON_AddStringToObject(*ret, "session", q->session);
        return 0;
}

static int m_mark_private(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *dataset, *source;
        struct sbx_error err = {0};
        int r;

        if (q->tok.role != TOKEN_ROLE_CONNECTOR)
                return fronterr_set(e, "forbidden", "mark_private needs a connector token; this token's role is %s",
                                    token_role_to_string(q->tok.role));
        if (jparam_string(&q->args, "dataset", true, &dataset, e) < 0 ||
            jparam_string(&q->args, "source", false, &source, e) < 0)
                return -1;
        if (!q->d->privacy)
                return fronterr_set(e, "unavailable", "privacy marks are not available in this daemon");
        r = privacy_mark(q->d->privacy, q->tok.user, q->session, dataset, source, q->actor, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "session", q->session);
        add_datasets(*ret, q->d, q->tok.user, q->session);
        cJSON_AddStringToObject(*ret, "network_mode", privacy_required_network(q->d->privacy, q->tok.user, q->session));
        return 0;
}

/* Secrets (issue 37): the user's, write-only. Setting and deleting one is a
 * connector's act, as egress_allow is: the agent runs the code the secret is
 * kept from. */
static int m_set_secret(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        if (q->tok.role != TOKEN_ROLE_CONNECTOR)
                return fronterr_set(e, "forbidden", "set_secret needs a connector token; this token's role is %s",
                                    token_role_to_string(q->tok.role));
        return secrets_front_set(q->d->secrets, q->d->store, q->tok.user, &q->args, q->actor, ret, e);
}

static int m_delete_secret(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        if (q->tok.role != TOKEN_ROLE_CONNECTOR)
                return fronterr_set(e, "forbidden", "delete_secret needs a connector token; this token's role is %s",
                                    token_role_to_string(q->tok.role));
        return secrets_front_delete(q->d->store, q->tok.user, &q->args, q->actor, ret, e);
}

/* Attaching releases the secret to the session's egress (to its hosts):
 * a connector's act. Detaching only narrows: any token of the user. */
static int m_attach_secret(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        struct session_info info;

        if (q->tok.role != TOKEN_ROLE_CONNECTOR)
                return fronterr_set(e, "forbidden", "attach_secret needs a connector token; this token's role is %s",
                                    token_role_to_string(q->tok.role));
        if (q->session && *q->session && session_get_info(q->d->sessions, q->tok.user, q->session, &info) < 0)
                return fronterr_set(e, "not_found", "no session %s", q->session);
        if (q->session && *q->session)
                session_info_done(&info);
        return secrets_front_attach(q->d->store, q->tok.user, q->session, &q->args, q->actor, ret, e);
}

static int m_detach_secret(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        return secrets_front_detach(q->d->store, q->tok.user, q->session, &q->args, q->actor, ret, e);
}

static int m_list_secrets(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        return secrets_front_list(q->d->store, q->tok.user, ret, e);
}

/* The method table. Each method carries its documentation: params (the
 * shape of params, "?" for optional), returns and what it does. docs/api.md
 * is generated from this table (src/bin/sandboxd-apidoc.c), and the build
 * fails when a method has no description. */
// clang-format off
static const struct api_method_doc methods_doc[] = {
        {"exec", api_m_exec,
         "{command | argv: [strings], timeout_seconds?, workdir?, env?: {K: V}, stdin?, background?, interactive?, stream?, encoding?, tty?, rows?, cols?, network?, idempotency_key?}",
         "an execution result; with background: {execution_id, state} at once",
         "Run a shell command (sh -c) in the session's container, or with argv a program and its arguments exec'd as they are (no shell). With tty: true it runs on a pseudo-terminal the runner opens (rows and cols 1-1000, default 24 x 80); refused with unavailable when the session's runner is not connected."},
        {"run_code", api_m_run_code,
         "{language: python|node|bash, code | script: NAME, timeout_seconds?, workdir?, env?, stdin?, background?, interactive?, stream?, encoding?, cache?, network?, idempotency_key?}",
         "an execution result, with cached (the script cache's entry, or null) and cache_error when the cache refused it",
         "Run code in a language's interpreter, or a script saved in the user's script cache. A run that exits 0 is saved to the cache unless cache is false."},
        {"get_execution", api_m_get_execution,
         "{execution_id, wait?: seconds 0-60 | true | false, stdout_offset?, stderr_offset?, encoding?: utf8|base64}",
         "an execution result (tty: it runs on a terminal); with an offset, the bytes from it and stdout_next_offset / stderr_next_offset",
         "Read an execution's state and output. wait long-polls until it ends or, with an offset, until output past it arrives. A run_cell cell's execution_id is read the same way (kind cell, its context and status; outputs_offset pages its non-stream outputs)."},
        {"send_stdin", api_m_send_stdin,
         "{execution_id, data, encoding?, eof?}",
         "{execution_id, bytes, eof}",
         "Queue bytes for an interactive execution's stdin; eof closes it. Never waits: past 1 MiB still unread by the process it is busy."},
        {"cancel_execution", api_m_cancel_execution,
         "{execution_id, force?}",
         "the execution result, after waiting up to the kill grace + 5 s for the end",
         "Stop an execution and every process it started: SIGTERM to the tree, then SIGKILL after exec.kill_grace (at once with force). A cell's id interrupts the cell (force: kills its context) and answers the cell's result."},
        {"resize_terminal", api_m_resize_terminal,
         "{execution_id, rows: 1-1000, cols: 1-1000}",
         "{execution_id, rows, cols}",
         "Change a tty execution's window size; its programs get SIGWINCH."},
        {"list_executions", api_m_list_executions,
         "{states?: [...], limit?: 1-1000 (50), completed_within_ms?}",
         "{executions: [result without stdout and stderr, plus command_preview]}",
         "List the session's executions, newest first; with completed_within_ms only those that ended that recently, the most recently ended first."},
        {"run_cell", api_m_run_cell,
         "{code, language?: python|node, context?, timeout_seconds?, env?, stream?, network?}",
         "{context, language, generation, execution_count, status: ok|error|timeout|died, outputs: [...], stdout, stderr, error?, state_lost?: {cause, generation}, timed_out?, truncated?, duration_ms, session}",
         "Run a cell in a stateful interpreter context (a Jupyter kernel for python, the bridge's own for node): variables, imports and open files stay for the next cell. Outputs include images (image/png base64). With stream: true, output arrives as events while the cell runs. A cell sees the session's environment as an exec does (attached secrets' placeholders, the CA and package-policy variables; env? applies when the context starts and wins), also in a kernel a warm pool slot started ahead; attached secrets' values are masked as their placeholders in its outputs."},
        {"list_contexts", api_m_list_contexts,
         "{}",
         "{contexts: [{context, language, generation, execution_count, state: idle|busy|stopped, rss_kb, last_used, pending_state_lost?}]}",
         "List the session's interpreter contexts."},
        {"restart_context", api_m_restart_context,
         "{context?}",
         "the context, in a new generation",
         "Restart a context's interpreter on request: a new, empty generation (no state_lost is reported)."},
        {"delete_context", api_m_delete_context,
         "{context?}",
         "{context, deleted}",
         "Stop a context's interpreter and forget the context."},
        {"get_variables", api_m_get_variables,
         "{context?}",
         "{context, generation, variables: [{name, type, repr, shape?, error?}]}",
         "The variables of a python context's namespace (at most 500, reprs cut at 160 characters); error: the "
         "type of what describing one raised (TimeoutError past its deadline)."},
        {"interrupt_cell", api_m_interrupt_cell,
         "{context?}",
         "{interrupted}",
         "Interrupt the context's running cell as a timeout would; the state is kept. already_finished when no cell runs."},
        {"last_cell", api_m_last_cell,
         "{context?, wait_seconds?: 0-60}",
         "the last cell's result, plus complete (and adopted for a cell that outlived a daemon restart)",
         "Give the context's last cell again, waiting up to wait_seconds for the end of one that still runs."},
        {"write_file", m_write_file,
         "{path, content, encoding?: utf8|base64, idempotency_key?}",
         "{path, bytes}",
         "Write a file under /workspace, making missing parents. A path that leads outside /workspace, lexically or through a symlink, is refused."},
        {"read_file", m_read_file,
         "{path, offset?, length?, encoding?}",
         "{path, content, encoding, valid_utf8, offset, bytes, size, eof}",
         "Read a file under /workspace, at most min(limits.file_size, 4 MiB) per call; page with offset."},
        {"list_files", m_list_files,
         "{path?}",
         "{path, entries: [{name, type: file|dir|symlink|other, size}], truncated}",
         "List a directory under /workspace (default: /workspace itself)."},
        {"start_service", m_start_service,
         "{name, command, workdir?, idempotency_key?}",
         "a service: {name, state, pid, exit_code, command, workdir, ports: [{container_port, host_port}], started_at, stopped_at, last_error}",
         "Start a long-running process (a server) supervised by the runner; its listening ports are found and forwarded to the session's host port block."},
        {"stop_service", m_stop_service,
         "{name}",
         "a service",
         "Stop a service and its whole process tree: SIGTERM, then SIGKILL after SERVICE_STOP_GRACE_MS."},
        {"list_services", m_list_services,
         "{}",
         "{services: [service]}",
         "List the session's services with their state and ports."},
        {"service_logs", m_service_logs,
         "{name, tail_lines?: 1-10000 (100)}",
         "{name, stdout, stderr}",
         "The last lines a service wrote to stdout and stderr."},
        {"session_info", m_session_info,
         "{}",
         "{user, session, state, network_mode, private, datasets, ports, container_id, image, node, labels, resources, workspace_usage, egress, ...}",
         "The session's state, container, ports, privacy marks, labels, resources, disk usage and effective egress policy."},
        {"session_audit", m_session_audit,
         "{before?: id, limit?: 1-500 (100)}",
         "{session, audit: [{id, ts, actor, action, detail}], next_before: id | null}",
         "The session's audit rows (what was done to it and by whom: executions, files, egress decisions, pauses, snapshots), the newest limit of them older than before, oldest first; next_before pages further back (null: no older rows). Rows stay after the session is destroyed, until gc.audit_retention; never creates the session."},
        {"mark_private", m_mark_private,
         "{dataset, source?}",
         "{session, datasets, network_mode}",
         "Connector tokens only. Mark private data on the session: it loses every way out (egress, port forwards) before the call returns, for good."},
        {"egress_allow", m_egress_allow,
         "{pattern, scope?: session|user (session), remove?}",
         "the session's egress policy (as in session_info), session",
         "Connector tokens only. Add (or with remove, take back) an egress allowlist pattern for the session or for every session of the user."},
        {"narrow_egress", m_narrow_egress,
         "{allow?: [pattern], deny?: [pattern], only?: bool (true with allow)}",
         "the session's egress policy (as in session_info, with narrowing), session",
         "Narrow the session's own egress, replacing its narrowing ({} removes it): an allow pattern passes, else with only nothing does (only alone: no egress), else a deny pattern is refused. Never widens: each allow pattern must be allowed to the session already (forbidden, naming it, if not). Kept across restarts; forks and snapshots carry it."},
        /* secrets (issue 37) */
        {"set_secret", m_set_secret,
         "{name: [A-Z_][A-Z0-9_]{0,63}, value, hosts: [hostname, ...], header?}",
         "{name, stored}",
         "Connector tokens only. Store (or replace: a new version) one of the user's secrets, sealed at rest (no params.session): the value (1-8192 bytes; no NUL, CR or LF) is never returned, logged or audited, and may only be sent to hosts (1-8 hostnames; no address, no wildcard), in header if named. At most 64 per user. unavailable unless the operator set secrets_key_file."},
        {"list_secrets", m_list_secrets,
         "{}",
         "{secrets: [{name, hosts, header, created_at, updated_at, id, version}], count, max_count}",
         "The user's secrets by name, with their hosts, times, stable id (sec_ + 24 hex, E2B's secretID) and version (1 when made, one more per new value); never their values (no params.session). A secret made through E2B's /secrets has no hosts ([]) (docs/e2b.md \"Secrets\")."},
        {"delete_secret", m_delete_secret,
         "{name}",
         "{name, deleted}",
         "Connector tokens only. Delete one of the user's secrets (no params.session); it is detached from every session."},
        {"attach_secret", m_attach_secret,
         "{name, hosts?, header?, template?}",
         "{session, name, secrets: [name, ...]}",
         "Connector tokens only. Attach one of the user's secrets to the session: its executions get name=placeholder in their environment (a random sbx_ph_ + 32 hex, per session and attachment), never the value. The egress proxy puts the value in place of the placeholder in a request header (or Basic auth) of an HTTPS request to one of the secret's hosts, intercepting TLS with a CA of the session's own (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, CURL_CA_BUNDLE, PIP_CERT and NPM_CONFIG_CAFILE name its bundle in the executions); the placeholder sent anywhere else is refused (403, audited secret_refused), and the value coming back is replaced by the placeholder. With a rule (hosts, header and template together; E2B's network.rules): the rule's hosts take the place of the secret's, and the proxy sets header on each HTTPS request to them, in place of the sandbox's, its value the template (at most 512 bytes of printable ASCII) with ${secret}, which it holds exactly once, replaced by the value through the same swap and checks; never Host, a hop-by-hop or a body's framing header. At most 16 per session; create_session {secrets} attaches at creation. A fork or a restore starts with none."},
        {"detach_secret", m_detach_secret,
         "{name}",
         "{session, name, secrets: [name, ...]}",
         "Detach a secret from the session: later executions no longer get its placeholder."},
        {"events", api_m_events, /* api_events.c */
         "{since?, limit?}",
         "{events: [{id, type, user, session, ts, trace_id, data}], next, gap}",
         "Poll the user's own lifecycle events after an id (no params.session). GET /v1/events streams the same events as SSE."},
        /* agent tools (issue 17): api_agent.c */
        {"run_tests", api_m_run_tests,
         "{language: python|node, tests, code?, timeout_seconds?, network?, idempotency_key?}",
         "{success, summary: {total, passed, failed, skipped}, tests: [{name, passed, skipped, error, duration_ms}], tests_truncated, output, duration_ms, error, execution_id, language}",
         "Run a test file (plain test_* functions and unittest for python, node:test for node) against optional code, as one execution, and return a result per test."},
        {"list_scripts", api_m_list_scripts,
         "{filter?, limit?: 1-1000 (100)}",
         "{scripts: [{name, content_hash, language, description, bytes, created_at}], count, bytes, max_count, max_bytes}",
         "List the user's saved scripts, newest first (no params.session); filter is a substring of the name or description."},
        {"clear_scripts", api_m_clear_scripts,
         "{name?}",
         "{removed}",
         "Remove one saved script, or all of the user's (no params.session)."},
        {"create_session", api_m_create_session,
         "{session?, ttl_seconds?, image?, env?: {K: V}, labels?: {K: V}, cpu?, memory?, disk?, secrets?: [name, ...], idempotency_key?}",
         "session_info plus {expires_at, env_names, image_name, secrets}",
         "Start a session now, with its image, default environment, TTL, labels, resources and attached secrets (connector tokens only; see attach_secret); without session a name s-<12 hex> is made. A session that exists already is a conflict."},
        {"destroy_session", api_m_destroy_session,
         "{session, purge?}",
         "{session, destroyed, purged, cancelled_executions}",
         "Cancel the session's executions, remove its container and release its ports; with purge, delete its workspace too."},
        {"set_session_ttl", api_m_set_session_ttl,
         "{session, ttl_seconds: 0-session_ttl_max}",
         "{session, expires_at, ...}",
         "Set the session's TTL to ttl_seconds from now (0: none), as create_session's: when it runs out the session is stopped (its workspace kept; a later call starts it again)."},
        {"pause_session", api_m_pause_session, /* api_pause.c */
         "{session, to_disk?}",
         "{session, paused, already_paused, state: paused, last_activity, paused_at}",
         "Freeze every process of the session (the cgroup freezer; a microVM: QMP stop), keeping its memory: interpreter contexts, services and files stay as they are, and it uses no CPU. With to_disk (microvm sessions; an idle pause does it too) the VM's memory is saved and QEMU ends: the resume boots it from the save, every process where it was. Any later call to the session resumes it first. Refused (busy) while an execution or a cell runs."},
        {"resume_session", api_m_resume_session,
         "{session}",
         "{session, resumed, state: running, last_activity, paused_at: null}",
         "Thaw a paused session (or start a stopped one again). Rarely needed: every call that uses the session resumes it first."},
        {"list_sessions", api_m_list_sessions,
         "{labels?: {K: V}, session?}",
         "{sessions: [{session, user, state, image, runtime, executions, executions_running, node, labels, resources, created_at, last_activity, expires_at, ...}]}",
         "List the user's own sessions (an operator token: every user's); labels keeps the sessions that have all of them; session lists only that one (none when unknown), looked up by index, and never creates it."},
        /* operator reads (issue 39): api_ops.c */
        {"list_users", api_m_list_users,
         "{}",
         "{users: [{user, limits: {max_sessions_per_user, max_exec_per_user, max_services_per_session, max_spool_per_session, max_scripts_per_user, max_script_bytes_per_user, max_paused_sessions_per_user, max_session_cpus, max_session_memory, max_session_disk}, overrides: {key: value}, usage: {sessions, live_sessions, paused_sessions, executions_running, memory_bytes, cpu_total_ns}}], sessions: [{user, session, state, memory_bytes, memory_limit, cpu_total_ns, pids, executions_running}]}",
         "Operator tokens only (no params.session). Every user with a live token, a session or a quota override, by name, with the limits in force (the config's, or the user's overrides), their sessions and running executions, and the memory and CPU time their live containers use now (null when the engine cannot say), as sandboxctl quota.show and top; sessions gives the same figures per live session (at most 1,000)."},
        {"pool_status", api_m_pool_status,
         "{}",
         "{pool: {size, ready, creating, claims, misses, created, failed, refill_per_s, waiting, waited, wait_expired, images: [{image, size, ready, waiting}]}}",
         "Operator tokens only (no params.session). The warm pool: its target size, containers ready and being made, and how many were claimed, missed and waited for, as sandboxctl pool."},
        {"list_nodes", api_m_list_nodes,
         "{}",
         "{nodes: [{name, connected, fenced, since, sessions, last_heartbeat}]}",
         "Operator tokens only (no params.session). The node agents and the sessions placed on each, as sandboxctl nodes.list; empty when the daemon runs its containers itself."},
        {"daemon_health", api_m_daemon_health,
         "{}",
         "{status: ok|degraded, version, started_at, uptime_s, docker: {ok, version | error}, docker_version, engine: {name, capabilities, unenforced}, sessions: {creating, running, stopped, error, paused, total}, executions_running, ports: {used, total}, monitor_last_poll, pool, egress: {allowed, blocked, open}, counters: {auth_failures, engine_api_errors, events_written, events_dropped, event_overflows}}",
         "Operator tokens only (no params.session). The daemon's health: whether the container engine answers (what /healthz says), its version and uptime, the counts sandboxctl stats shows and the error counters of /metrics."},
        {"whoami", api_m_whoami,
         "{}",
         "{user, token_id, role: agent|connector|operator, operator}",
         "The calling token's user, id and role (no params.session; any token, an operator's too): what a client such as the console may offer it."},
        /* snapshots, restore and fork (issue 28): api_snapshot.c */
        {"snapshot_session", api_m_snapshot_session,
         "{name?, with_memory?}",
         "{snapshot, name, session, kind: image|archive|microvm, state, bytes, workspace_size, private, created_at, environment: {image_name, image_id, runtime, env_names, egress, labels, resources, contexts, workspace_mode}}",
         "Save the session's workspace, taken at a frozen point (the container is paused for the copy; a paused session stays paused), with what recreates its environment and its privacy marks. Counts against limits.snapshots_per_user and limits.snapshot_bytes_per_user (quota_exceeded). With with_memory: true (a microvm session only; not params.memory, which every call reads as the session's memory limit; others are refused, saying so) the VM's processes and memory are kept too (kind microvm): restore_session and fork_session from it bring them back where they were."},
        {"list_snapshots", api_m_list_snapshots,
         "{session?}",
         "{snapshots: [as snapshot_session], count, bytes, max_count, max_bytes}",
         "List the user's snapshots, newest first; with session only those taken of it."},
        {"delete_snapshot", api_m_delete_snapshot,
         "{snapshot: id | name}",
         "{snapshot, deleted}",
         "Delete one of the user's snapshots and its files (no params.session)."},
        {"restore_session", api_m_restore_session,
         "{snapshot: id | name}",
         "{session, snapshot, restored, state: stopped|running, private, dropped_connections?}",
         "Stop the session (its processes end; contexts report state_lost restored) and put its workspace back from one of the user's snapshots, byte for byte; the next request starts its container. A private snapshot's marks are put on the session first. From a microvm memory snapshot the guest's processes come back too, and the contexts that ran an interpreter then run on in it, variables as they were (the session starts at once: state running); dropped_connections says how many connections the snapshot's guest had open, which the restored VM does not carry (event session.connections_dropped)."},
        {"fork_session", api_m_fork_session,
         "{from: {session} | {snapshot: id | name}, session}",
         "session_info of the new session, plus forked_from and state_lost: forked (not from a microvm memory snapshot; from one, dropped_connections: the connections its guest had open, which the fork does not carry)",
         "Make the new session params.session of the same user from a snapshot, or from a live session (snapshotted first; that snapshot is not kept). It gets its own uid, ports and channels, the snapshot's image, env, egress additions, labels, resources and privacy marks (a private source gives a private session from the start), and is served from the warm pool where it can be. Files only: its interpreter contexts report state_lost forked; from a microvm session's memory snapshot (snapshot_session with_memory) its guest's processes and interpreter contexts run on, variables kept."},
};
// clang-format on

api_method_fn api_method_find(const char *name)
{
        for (size_t i = 0; i < ELEMENTSOF(methods_doc); i++)
                if (strcmp(methods_doc[i].name, name) == 0)
                        return methods_doc[i].fn;
        return api_tasks_method_find(name);
}

const struct api_method_doc *api_method_doc_at(size_t i)
{
        if (i < ELEMENTSOF(methods_doc))
                return &methods_doc[i];
        return api_tasks_method_doc_at(i - ELEMENTSOF(methods_doc));
}

/* ---- agent tools (issue 17): what api_agent.c shares ---- */

int api_m_session_info(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        return m_session_info(q, ret, e);
}

bool api_method_user_level(const char *name)
{
        return strcmp(name, "list_sessions") == 0 || strcmp(name, "events") == 0 || strcmp(name, "list_scripts") == 0 ||
               strcmp(name, "clear_scripts") == 0 || strcmp(name, "create_session") == 0 ||
               strcmp(name, "list_snapshots") == 0 || strcmp(name, "delete_snapshot") == 0 ||
               strcmp(name, "set_secret") == 0 || strcmp(name, "list_secrets") == 0 ||
               strcmp(name, "delete_secret") == 0 || api_method_operator(name);
}

bool api_method_operator(const char *name)
{
        return strcmp(name, "list_sessions") == 0 || strcmp(name, "events") == 0 || strcmp(name, "list_users") == 0 ||
               strcmp(name, "pool_status") == 0 || strcmp(name, "list_nodes") == 0 ||
               strcmp(name, "daemon_health") == 0 || strcmp(name, "whoami") == 0;
}
