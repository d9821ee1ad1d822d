/* admin.c — the admin socket front (protocol in include/sandboxd/admin.h):
 * file permissions set before the socket is reachable, a peer-credential
 * check on every connection, then one JSON command per line. Thin: it calls
 * the session manager, exec engine, services, privacy and token modules.
 *
 * Threads: "sbx-admin" accepts (listener.c); one worker per connection (at
 * most ADMIN_MAX_CONNS) answers its commands in order. No shared state
 * beyond the read-only server struct. */
#include "sandboxd/admin.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "listener.h"
#include "sandboxd/daemon.h"
#include "sandboxd/egress.h"
#include "sandboxd/egress_rules.h"
#include "sandboxd/exec.h"
#include "sandboxd/log.h"
#include "sandboxd/metrics.h"
#include "sandboxd/monitor.h"
#include "sandboxd/portpool.h"
#include "sandboxd/privacy.h"
#include "sandboxd/runtime.h"
#include "sandboxd/quota.h"
#include "sandboxd/reqguard.h"
#include "sandboxd/service.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
#include "sandboxd/pool.h"
#include "sandboxd/usage.h"
#include "sandboxd/utf8.h"
#include "sandboxd/wsquota.h"

#define ADMIN_MAX_CONNS 16
#define ADMIN_RECENT_EXECUTIONS 10
#define ADMIN_TOP_MAX 1000      /* sessions per top sample */
#define ADMIN_LOGS_DEFAULT 200  /* audit rows and log lines per session.logs */
#define ADMIN_LOGS_MAX 4096

struct admin_server {
        struct daemon *d;
        struct sockserver *ss;
        bool has_group;
        gid_t gid;
};

struct admin_req {
        struct admin_server *srv;
        struct daemon *d;
        const cJSON *args;
        char actor[48];
};

struct admin_err {
        const char *code;
        char msg[1024];
};

static void cjson_deletep(cJSON **p)
{
        cJSON_Delete(*p);
}

static int fail(struct admin_err *e, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct admin_err *e, const char *code, const char *fmt, ...)
{
        va_list ap;
        e->code = code;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
        va_end(ap);
        return -1;
}

static const char *errno_code(int r)
{
        switch (-r) {
        case EINVAL:
                return "invalid";
        case ENOENT:
                return "not_found";
        case EACCES:
        case EPERM:
                return "forbidden";
        case EBUSY:
                return "busy";
        case EDQUOT:
                return "quota_exceeded";
        case EEXIST:
        case EALREADY:
                return "conflict";
        case ECONNREFUSED:
        case ETIMEDOUT:
        case EIO:
                return "unavailable";
        default:
                return "internal";
        }
}

static int fail_errno(struct admin_err *e, int r, const struct sbx_error *err)
{
        return fail(e, errno_code(r), "%s", err && err->msg[0] ? err->msg : strerror(-r));
}

/* ---- arguments ---- */

static int a_string(struct admin_req *q, const char *name, bool required, const char **ret, struct admin_err *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->args, name);
        if (!v || cJSON_IsNull(v)) {
                if (required)
                        return fail(e, "bad_request", "%s is required", name);
                *ret = NULL;
                return 0;
        }
        if (!cJSON_IsString(v) || !v->valuestring)
                return fail(e, "bad_request", "%s must be a string", name);
        *ret = v->valuestring;
        return 0;
}

static int a_bool(struct admin_req *q, const char *name, bool *ret, struct admin_err *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->args, name);
        if (!v || cJSON_IsNull(v)) {
                *ret = false;
                return 0;
        }
        if (!cJSON_IsBool(v))
                return fail(e, "bad_request", "%s must be true or false", name);
        *ret = cJSON_IsTrue(v);
        return 0;
}

static int a_key(struct admin_req *q, const char **ret_user, const char **ret_session, struct admin_err *e)
{
        struct sbx_error err = {0};
        if (a_string(q, "user", true, ret_user, e) < 0 || a_string(q, "session", true, ret_session, e) < 0)
                return -1;
        if (session_key_check(*ret_user, *ret_session, &err) < 0)
                return fail(e, "invalid", "%s", err.msg);
        return 0;
}

/* ---- formatting ---- */

static void add_lower(cJSON *o, const char *key, const char *s)
{
        char buf[64];
        size_t i = 0;
        for (; s && s[i] && i + 1 < sizeof(buf); i++)
                buf[i] = (char)tolower((unsigned char)s[i]);
        buf[i] = '\0';
        cJSON_AddStringToObject(o, key, buf);
}

static void add_text(cJSON *o, const char *key, const char *s)
{
        if (s && *s) {
                _cleanup_free_ char *clean = utf8_sanitize(s, strlen(s));
                cJSON_AddStringToObject(o, key, clean ? clean : "");
        } else {
                cJSON_AddNullToObject(o, key);
        }
}

static void add_time(cJSON *o, const char *key, int64_t ms)
{
        if (ms > 0)
                cJSON_AddNumberToObject(o, key, (double)ms);
        else
                cJSON_AddNullToObject(o, key);
}

static cJSON *datasets_json(struct daemon *d, const char *user, const char *session)
{
        struct privacy_dataset *list = NULL;
        size_t n = 0;
        cJSON *a = cJSON_CreateArray();

        if (!a || !d->privacy || privacy_list(d->privacy, user, session, &list, &n) < 0)
                return a;
        for (size_t i = 0; i < n; i++) {
                cJSON *x = cJSON_CreateObject();
                add_text(x, "dataset", list[i].dataset);
                add_text(x, "source", list[i].source);
                add_time(x, "marked_at", list[i].marked_at);
                cJSON_AddItemToArray(a, x);
        }
        free(list);
        return a;
}

static cJSON *session_json(struct daemon *d, const struct session_info *s)
{
        cJSON *o = cJSON_CreateObject(), *ports;

        cJSON_AddStringToObject(o, "user", s->user);
        cJSON_AddStringToObject(o, "session", s->session);
        add_lower(o, "state", session_state_to_string(s->state));
        add_text(o, "container_id", s->container_id);
        add_text(o, "image", s->image);
        add_text(o, "network_mode", s->network_mode);
        add_text(o, "runtime", s->runtime);
        if (s->uid)
                cJSON_AddNumberToObject(o, "uid", (double)s->uid); /* the session's host uid (sessuid.h) */
        else
                cJSON_AddNullToObject(o, "uid");
        cJSON_AddBoolToObject(o, "private", d->privacy && privacy_is_private(d->privacy, s->user, s->session));
        ports = cJSON_AddArrayToObject(o, "ports");
        for (size_t i = 0; i < s->n_ports; i++) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddNumberToObject(p, "container_port", d->cfg.container_port_base + (int)i);
                cJSON_AddNumberToObject(p, "host_port", s->ports[i]);
                cJSON_AddItemToArray(ports, p);
        }
        add_time(o, "created_at", s->created_at);
        add_time(o, "last_activity", s->last_activity);
        add_text(o, "last_error", s->last_error);
        add_text(o, "error_cause", s->error_cause);
        return o;
}

static void audit(struct admin_req *q, const char *user, const char *session, const char *cmd, cJSON *detail)
{
        char action[64], *json = detail ? cJSON_PrintUnformatted(detail) : NULL;

        snprintf(action, sizeof(action), "admin.%s", cmd);
        (void)store_audit(q->d->store, q->actor, user, session, action, json);
        free(json);
        cJSON_Delete(detail);
}

/* ---- commands ---- */

typedef int (*cmd_fn)(struct admin_req *q, cJSON **ret, struct admin_err *e);

static int c_health(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        char version[64];
        struct sbx_error err = {0};
        int r = daemon_docker_version(q->d, version, sizeof(version), &err);
        cJSON *docker;

        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "status", r == 0 ? "ok" : "degraded");
        cJSON_AddStringToObject(*ret, "version", SBX_VERSION);
        cJSON_AddNumberToObject(*ret, "uptime_s", (double)((sbx_wall_ms() - q->d->started_at) / 1000));
        docker = cJSON_AddObjectToObject(*ret, "docker");
        cJSON_AddBoolToObject(docker, "ok", r == 0);
        if (r == 0)
                cJSON_AddStringToObject(docker, "version", version);
        else
                add_text(docker, "error", err.msg[0] ? err.msg : strerror(-r));
        return 0;
}

/* The warm pool's numbers (pool.h): stats and sandboxctl pool. */
static void add_pool(cJSON *o, struct pool *pl)
{
        struct pool_stats ps;
        cJSON *p = cJSON_AddObjectToObject(o, "pool");

        pool_stats(pl, &ps);
        cJSON_AddNumberToObject(p, "size", ps.size);
        cJSON_AddNumberToObject(p, "ready", (double)ps.ready);
        cJSON_AddNumberToObject(p, "creating", (double)ps.creating);
        cJSON_AddNumberToObject(p, "claims", (double)ps.claims);
        cJSON_AddNumberToObject(p, "misses", (double)ps.misses);
        cJSON_AddNumberToObject(p, "created", (double)ps.created);
        cJSON_AddNumberToObject(p, "failed", (double)ps.failed);
        cJSON_AddNumberToObject(p, "refill_per_s", ps.refill_per_s);
        cJSON_AddNumberToObject(p, "waiting", (double)ps.waiting);
        cJSON_AddNumberToObject(p, "waited", (double)ps.waited);
        cJSON_AddNumberToObject(p, "wait_expired", (double)ps.wait_expired);
        cJSON *imgs = cJSON_AddArrayToObject(p, "images");
        for (size_t i = 0; imgs && i < ps.n_images; i++) {
                cJSON *io = cJSON_CreateObject();
                cJSON_AddStringToObject(io, "image", ps.images[i].image);
                cJSON_AddNumberToObject(io, "size", ps.images[i].size);
                cJSON_AddNumberToObject(io, "ready", (double)ps.images[i].ready);
                cJSON_AddNumberToObject(io, "waiting", (double)ps.images[i].waiting);
                cJSON_AddItemToArray(imgs, io);
        }
}

static int c_pool(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        (void)e;
        *ret = cJSON_CreateObject();
        add_pool(*ret, q->d->pool);
        return 0;
}

static int c_stats(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        size_t counts[4] = {0}, used = 0, total = 0;
        char version[64] = "";
        cJSON *s, *p;
        int64_t last;

        session_counts(q->d->sessions, counts);
        portpool_usage(q->d->ports, &used, &total);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "version", SBX_VERSION);
        cJSON_AddNumberToObject(*ret, "started_at", (double)q->d->started_at);
        cJSON_AddNumberToObject(*ret, "uptime_s", (double)((sbx_wall_ms() - q->d->started_at) / 1000));
        if (daemon_docker_version(q->d, version, sizeof(version), NULL) == 0)
                cJSON_AddStringToObject(*ret, "docker_version", version);
        else
                cJSON_AddNullToObject(*ret, "docker_version");
        s = cJSON_AddObjectToObject(*ret, "sessions");
        cJSON_AddNumberToObject(s, "creating", (double)counts[SESSION_CREATING]);
        cJSON_AddNumberToObject(s, "running", (double)counts[SESSION_RUNNING]);
        cJSON_AddNumberToObject(s, "stopped", (double)counts[SESSION_STOPPED]);
        cJSON_AddNumberToObject(s, "error", (double)counts[SESSION_ERROR]);
        cJSON_AddNumberToObject(s, "total", (double)(counts[0] + counts[1] + counts[2] + counts[3]));
        cJSON_AddNumberToObject(*ret, "executions_running", (double)exec_running_count(q->d->exec, NULL, NULL));
        p = cJSON_AddObjectToObject(*ret, "ports");
        cJSON_AddNumberToObject(p, "used", (double)used);
        cJSON_AddNumberToObject(p, "total", (double)total);
        last = q->d->monitor ? monitor_last_poll(q->d->monitor) : 0;
        add_time(*ret, "monitor_last_poll", last);
        add_pool(*ret, q->d->pool);
        {
                struct egress_stats es;
                egress_stats(q->d->egress, &es);
                p = cJSON_AddObjectToObject(*ret, "egress");
                cJSON_AddNumberToObject(p, "allowed", (double)es.allowed);
                cJSON_AddNumberToObject(p, "blocked", (double)es.blocked);
                cJSON_AddNumberToObject(p, "open", es.open);
        }
        return 0;
}

/* The Prometheus text of metrics_listen's /metrics (sandboxctl metrics). */
static int c_metrics(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        _cleanup_free_ char *text = NULL;

        if (metrics_render(&q->d->metrics_ctx, &text) < 0)
                return fail(e, "internal", "out of memory");
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "text", text);
        return 0;
}

static int c_sessions_list(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        const char *user, *state_s;
        enum session_state state;
        struct session_info *list = NULL;
        size_t n = 0;
        cJSON *a;
        int r;

        if (a_string(q, "user", false, &user, e) < 0 || a_string(q, "state", false, &state_s, e) < 0)
                return -1;
        if (state_s) {
                char up[16];
                size_t i = 0;
                for (; state_s[i] && i + 1 < sizeof(up); i++)
                        up[i] = (char)toupper((unsigned char)state_s[i]);
                up[i] = '\0';
                if (session_state_from_string(up, &state) < 0)
                        return fail(e, "invalid", "state must be creating, running, stopped or error");
        }
        r = session_list(q->d->sessions, user, state_s ? &state : NULL, &list, &n);
        if (r < 0)
                return fail_errno(e, r, NULL);
        *ret = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(*ret, "sessions");
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToArray(a, session_json(q->d, &list[i]));
        session_info_list_free(list, n);
        return 0;
}

static cJSON *services_json(struct daemon *d, const char *user, const char *session)
{
        struct service_info *list = NULL;
        size_t n = 0;
        cJSON *a = cJSON_CreateArray();

        if (!a || !d->services || service_list(d->services, user, session, &list, &n) < 0)
                return a;
        for (size_t i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject(), *ports;
                cJSON_AddStringToObject(o, "name", list[i].name);
                add_lower(o, "state", service_state_to_string(list[i].state));
                if (list[i].pid > 0)
                        cJSON_AddNumberToObject(o, "pid", list[i].pid);
                else
                        cJSON_AddNullToObject(o, "pid");
                if (list[i].exit_code >= 0)
                        cJSON_AddNumberToObject(o, "exit_code", list[i].exit_code);
                else
                        cJSON_AddNullToObject(o, "exit_code");
                add_text(o, "command", list[i].command);
                ports = cJSON_AddArrayToObject(o, "ports");
                for (size_t k = 0; k < list[i].n_ports && k < SERVICE_MAX_PORTS; k++) {
                        cJSON *p = cJSON_CreateObject();
                        cJSON_AddNumberToObject(p, "container_port", list[i].ports[k].container_port);
                        if (list[i].ports[k].host_port > 0)
                                cJSON_AddNumberToObject(p, "host_port", list[i].ports[k].host_port);
                        else
                                cJSON_AddNullToObject(p, "host_port");
                        cJSON_AddItemToArray(ports, p);
                }
                add_time(o, "started_at", list[i].started_at);
                add_time(o, "stopped_at", list[i].stopped_at);
                add_text(o, "last_error", list[i].last_error);
                cJSON_AddItemToArray(a, o);
        }
        free(list);
        return a;
}

static cJSON *executions_json(struct daemon *d, const char *user, const char *session)
{
        struct exec_result *list = NULL;
        size_t n = 0;
        cJSON *a = cJSON_CreateArray();

        if (!a || exec_list(d->exec, user, session, 0, ADMIN_RECENT_EXECUTIONS, &list, &n) < 0)
                return a;
        for (size_t i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "execution_id", list[i].id);
                add_lower(o, "state", exec_state_to_string(list[i].state));
                add_text(o, "cause", exec_cause_to_string(list[i].cause));
                if (list[i].exit_code >= 0)
                        cJSON_AddNumberToObject(o, "exit_code", list[i].exit_code);
                else
                        cJSON_AddNullToObject(o, "exit_code");
                add_text(o, "command_preview", list[i].command_preview);
                add_time(o, "created_at", list[i].created_at);
                cJSON_AddNumberToObject(o, "duration_ms", (double)list[i].duration_ms);
                add_text(o, "error", list[i].error);
                cJSON_AddItemToArray(a, o);
        }
        exec_result_list_free(list, n);
        return a;
}

static int c_session_show(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        const char *user, *session;
        struct session_info info;
        int r;

        if (a_key(q, &user, &session, e) < 0)
                return -1;
        r = session_get_info(q->d->sessions, user, session, &info);
        if (r == -ENOENT)
                return fail(e, "not_found", "no session %s:%s", user, session);
        if (r < 0)
                return fail_errno(e, r, NULL);
        *ret = session_json(q->d, &info);
        add_text(*ret, "workspace", info.workspace);
        {
                struct wsquota_usage u;
                wsquota_usage(&q->d->cfg, user, session, &u);
                cJSON_AddItemToObject(*ret, "workspace_usage", wsquota_usage_to_json(&u));
        }
        cJSON_AddItemToObject(*ret, "datasets", datasets_json(q->d, user, session));
        cJSON_AddItemToObject(*ret, "egress", egress_rules_policy_json(q->d->store, q->d->privacy, &q->d->cfg, user, session));
        cJSON_AddItemToObject(*ret, "services", services_json(q->d, user, session));
        cJSON_AddItemToObject(*ret, "executions", executions_json(q->d, user, session));
        session_info_done(&info);
        return 0;
}

static int c_session_destroy(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        const char *user, *session;
        bool purge = false;
        struct sbx_error err = {0};
        cJSON *detail;
        int r;

        if (a_key(q, &user, &session, e) < 0 || a_bool(q, "purge", &purge, e) < 0)
                return -1;
        r = session_destroy(q->d->sessions, user, session, purge, &err);
        if (r < 0)
                return fail_errno(e, r, &err);
        detail = cJSON_CreateObject();
        cJSON_AddBoolToObject(detail, "purge", purge);
        audit(q, user, session, "session.destroy", detail);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", user);
        cJSON_AddStringToObject(*ret, "session", session);
        cJSON_AddBoolToObject(*ret, "purged", purge);
        return 0;
}

static int c_session_mark_private(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        const char *user, *session, *dataset, *source;
        struct sbx_error err = {0};
        cJSON *detail;
        int r;

        if (a_key(q, &user, &session, e) < 0 || a_string(q, "dataset", true, &dataset, e) < 0 ||
            a_string(q, "source", false, &source, e) < 0)
                return -1;
        if (!q->d->privacy)
                return fail(e, "unavailable", "privacy marks are not available in this daemon");
        r = privacy_mark(q->d->privacy, user, session, dataset, source, q->actor, &err);
        if (r < 0)
                return fail_errno(e, r, &err);
        detail = cJSON_CreateObject();
        add_text(detail, "dataset", dataset);
        add_text(detail, "source", source);
        audit(q, user, session, "session.mark_private", detail);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", user);
        cJSON_AddStringToObject(*ret, "session", session);
        cJSON_AddItemToObject(*ret, "datasets", datasets_json(q->d, user, session));
        cJSON_AddStringToObject(*ret, "network_mode", privacy_required_network(q->d->privacy, user, session));
        return 0;
}

static int c_token_create(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        const char *user, *role_s;
        enum token_role role = TOKEN_ROLE_AGENT;
        char token[TOKEN_LEN + 1];
        struct token_info info;
        struct sbx_error err = {0};
        cJSON *detail;
        int r;

        if (a_string(q, "user", true, &user, e) < 0 || a_string(q, "role", false, &role_s, e) < 0)
                return -1;
        if (role_s && token_role_from_string(role_s, &role) < 0)
                return fail(e, "invalid", "role must be agent or connector");
        r = token_create(q->d->store, user, role, token, &info, &err);
        if (r < 0)
                return fail_errno(e, r, &err);
        detail = cJSON_CreateObject();
        cJSON_AddStringToObject(detail, "token_id", info.id);
        cJSON_AddStringToObject(detail, "role", token_role_to_string(role));
        audit(q, user, NULL, "token.create", detail);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "token", token);
        cJSON_AddStringToObject(*ret, "id", info.id);
        cJSON_AddStringToObject(*ret, "user", info.user);
        cJSON_AddStringToObject(*ret, "role", token_role_to_string(info.role));
        explicit_bzero(token, sizeof(token));
        return 0;
}

static int c_token_revoke(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        const char *id;
        struct sbx_error err = {0};
        cJSON *detail;
        int r;

        if (a_string(q, "id", true, &id, e) < 0)
                return -1;
        r = token_revoke(q->d->store, id, &err);
        if (r < 0)
                return fail_errno(e, r, &err);
        detail = cJSON_CreateObject();
        cJSON_AddStringToObject(detail, "token_id", id);
        audit(q, NULL, NULL, "token.revoke", detail);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "id", id);
        cJSON_AddTrueToObject(*ret, "revoked");
        return 0;
}

static int c_token_list(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        struct token_info *list = NULL;
        size_t n = 0;
        cJSON *a;
        int r = token_list(q->d->store, &list, &n);

        if (r < 0)
                return fail_errno(e, r, NULL);
        *ret = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(*ret, "tokens");
        for (size_t i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "id", list[i].id);
                cJSON_AddStringToObject(o, "user", list[i].user);
                cJSON_AddStringToObject(o, "role", token_role_to_string(list[i].role));
                add_time(o, "created_at", list[i].created_at);
                add_time(o, "revoked_at", list[i].revoked_at);
                cJSON_AddItemToArray(a, o);
        }
        free(list);
        return 0;
}

static int a_limit(struct admin_req *q, const char *name, int def, int max, int *ret, struct admin_err *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->args, name);
        if (!v || cJSON_IsNull(v)) {
                *ret = def;
                return 0;
        }
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > max || v->valuedouble != (int)v->valuedouble)
                return fail(e, "bad_request", "%s must be an integer from 1 to %d", name, max);
        *ret = (int)v->valuedouble;
        return 0;
}

/* Live sessions with their usage; the client turns two samples into CPU % (like docker stats). */
static int c_sessions_top(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        struct usage_row *rows = NULL;
        size_t n = 0;
        const char *user;
        cJSON *a;
        int r;

        if (a_string(q, "user", false, &user, e) < 0)
                return -1;
        r = usage_collect(&(struct usage_ctx){.sessions = q->d->sessions, .docker = q->d->docker, .exec = q->d->exec,
                                              .store = q->d->store},
                          user, ADMIN_TOP_MAX, &rows, &n);
        if (r < 0)
                return fail_errno(e, r, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddNumberToObject(*ret, "sampled_at", (double)sbx_wall_ms());
        cJSON_AddNumberToObject(*ret, "cpus_per_session", (double)q->d->cfg.nano_cpus / 1e9);
        a = cJSON_AddArrayToObject(*ret, "sessions");
        for (size_t i = 0; i < n; i++) {
                const struct usage_row *u = &rows[i];
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "user", u->user);
                cJSON_AddStringToObject(o, "session", u->session);
                add_lower(o, "state", session_state_to_string(u->state));
                add_text(o, "container_id", u->container_id);
                add_text(o, "network_mode", u->network_mode);
                if (u->has_stats) {
                        cJSON_AddNumberToObject(o, "cpu_total_ns", (double)u->cpu_total_ns);
                        cJSON_AddNumberToObject(o, "memory_usage", (double)u->memory_usage);
                        cJSON_AddNumberToObject(o, "memory_limit", (double)u->memory_limit);
                        cJSON_AddNumberToObject(o, "pids", (double)u->pids);
                } else {
                        cJSON_AddNullToObject(o, "cpu_total_ns");
                        cJSON_AddNullToObject(o, "memory_usage");
                        cJSON_AddNullToObject(o, "memory_limit");
                        cJSON_AddNullToObject(o, "pids");
                }
                cJSON_AddNumberToObject(o, "sampled_at", (double)u->sampled_at);
                cJSON_AddNumberToObject(o, "executions_running", (double)u->executions_running);
                cJSON_AddNumberToObject(o, "executions_total", (double)u->executions_total);
                {
                        struct egress_stats es;
                        if (egress_session_stats(q->d->egress, u->user, u->session, &es) == 0)
                                cJSON_AddNumberToObject(o, "egress_bytes", (double)es.bytes);
                        else
                                cJSON_AddNullToObject(o, "egress_bytes");
                }
                cJSON_AddItemToArray(a, o);
        }
        free(rows);
        return 0;
}

/* A session's audit rows (persistent) and the daemon's log lines that named it (the
 * recent ones this process still holds). */
static int c_session_logs(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        struct store_audit_row *rows = NULL;
        char **lines = NULL;
        size_t n_rows = 0, n_lines = 0;
        const char *user, *session;
        cJSON *a;
        int limit = 0, r;

        if (a_key(q, &user, &session, e) < 0 || a_limit(q, "limit", ADMIN_LOGS_DEFAULT, ADMIN_LOGS_MAX, &limit, e) < 0)
                return -1;
        r = store_audit_list(q->d->store, user, session, (size_t)limit, &rows, &n_rows);
        if (r < 0)
                return fail_errno(e, r, NULL);
        r = log_session_lines(user, session, (size_t)limit, &lines, &n_lines);
        if (r < 0) {
                store_audit_rows_free(rows, n_rows);
                return fail_errno(e, r, NULL);
        }
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", user);
        cJSON_AddStringToObject(*ret, "session", session);
        a = cJSON_AddArrayToObject(*ret, "audit");
        for (size_t i = 0; i < n_rows; i++) {
                cJSON *o = cJSON_CreateObject(), *detail = rows[i].detail ? cJSON_Parse(rows[i].detail) : NULL;
                cJSON_AddNumberToObject(o, "id", (double)rows[i].id);
                cJSON_AddNumberToObject(o, "ts", (double)rows[i].ts);
                add_text(o, "actor", rows[i].actor);
                add_text(o, "action", rows[i].action);
                if (detail)
                        cJSON_AddItemToObject(o, "detail", detail);
                else
                        add_text(o, "detail", rows[i].detail);
                cJSON_AddItemToArray(a, o);
        }
        a = cJSON_AddArrayToObject(*ret, "log");
        for (size_t i = 0; i < n_lines; i++) {
                cJSON *line = cJSON_Parse(lines[i]);
                if (line)
                        cJSON_AddItemToArray(a, line);
        }
        store_audit_rows_free(rows, n_rows);
        log_lines_free(lines, n_lines);
        return 0;
}

/* A user's runtime: read it, or set (runc | runsc) or reset ("default") the override. */
static int c_user_runtime(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        const char *user, *name;
        char effective[RUNTIME_NAME_MAX], over[16];
        struct sbx_error err = {0};
        int r;

        if (a_string(q, "user", true, &user, e) < 0 || a_string(q, "runtime", false, &name, e) < 0)
                return -1;
        if (!session_id_valid(user))
                return fail(e, "invalid", "user must be 1-64 characters of [A-Za-z0-9_.-]");
        if (name) {
                r = runtime_set_user(q->d->runtime, user, name, &err);
                if (r < 0)
                        return fail_errno(e, r, &err);
                cJSON *detail = cJSON_CreateObject();
                cJSON_AddStringToObject(detail, "runtime", name);
                audit(q, user, NULL, "user.runtime", detail);
        }
        r = runtime_for_user(q->d->runtime, user, effective);
        if (r == 0)
                r = store_user_runtime_get(q->d->store, user, over);
        if (r < 0)
                return fail_errno(e, r, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", user);
        cJSON_AddStringToObject(*ret, "runtime", effective);
        add_text(*ret, "override", over);
        cJSON_AddStringToObject(*ret, "default", q->d->cfg.runtime);
        /* can it run here? (a warning, not a refusal: the operator may register runsc later) */
        err = (struct sbx_error){0};
        if (runtime_check(q->d->runtime, effective, &err) < 0)
                add_text(*ret, "unavailable", err.msg);
        else
                cJSON_AddNullToObject(*ret, "unavailable");
        cJSON_AddStringToObject(*ret, "applies_to", "containers created from now on (new sessions and recreations)");
        return 0;
}

/* ---- quotas ---- */

static cJSON *quota_json(struct daemon *d, const char *user)
{
        struct quota_limits lim;
        struct store_quota *rows = NULL;
        struct session_info *list = NULL;
        size_t n = 0, live = 0;
        cJSON *o = cJSON_CreateObject(), *l, *ov, *u;

        quota_limits_get(d->quota, &d->cfg, user, &lim);
        cJSON_AddStringToObject(o, "user", user);
        l = cJSON_AddObjectToObject(o, "limits");
        cJSON_AddNumberToObject(l, "max_sessions_per_user", (double)lim.sessions);
        cJSON_AddNumberToObject(l, "max_exec_per_user", (double)lim.execs);
        cJSON_AddNumberToObject(l, "max_services_per_session", (double)lim.services);
        cJSON_AddNumberToObject(l, "max_spool_per_session", (double)lim.spool_bytes);
        cJSON_AddNumberToObject(l, "max_scripts_per_user", (double)lim.scripts);
        cJSON_AddNumberToObject(l, "max_script_bytes_per_user", (double)lim.script_bytes);
        ov = cJSON_AddObjectToObject(o, "overrides");
        if (d->quota && quota_overrides(d->quota, user, &rows, &n) == 0)
                for (size_t i = 0; i < n; i++)
                        cJSON_AddNumberToObject(ov, rows[i].key, (double)rows[i].value);
        free(rows);
        u = cJSON_AddObjectToObject(o, "usage");
        if (session_list(d->sessions, user, NULL, &list, &n) == 0)
                for (size_t i = 0; i < n; i++)
                        live += list[i].state == SESSION_RUNNING || list[i].state == SESSION_CREATING;
        session_info_list_free(list, n);
        cJSON_AddNumberToObject(u, "live_sessions", (double)live);
        cJSON_AddNumberToObject(u, "executions_running", (double)exec_running_count(d->exec, user, NULL));
        return o;
}

static int a_user(struct admin_req *q, const char **ret, struct admin_err *e)
{
        if (a_string(q, "user", true, ret, e) < 0)
                return -1;
        if (!session_id_valid(*ret))
                return fail(e, "invalid", "invalid user_id: must be 1-64 characters of [A-Za-z0-9_.-]");
        return 0;
}

static int c_quota_show(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        const char *user;

        if (a_user(q, &user, e) < 0)
                return -1;
        *ret = quota_json(q->d, user);
        return 0;
}

static int c_quota_set(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->args, "value");
        const char *user, *key;
        struct sbx_error err = {0};
        cJSON *detail;
        int r;

        if (a_user(q, &user, e) < 0 || a_string(q, "key", true, &key, e) < 0)
                return -1;
        /* a double holds every integer up to 2^53 exactly: more than any quota's range */
        if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int64_t)v->valuedouble)
                return fail(e, "bad_request", "value must be an integer");
        r = quota_set(q->d->quota, user, key, (int64_t)v->valuedouble, &err);
        if (r < 0)
                return fail_errno(e, r, &err);
        detail = cJSON_CreateObject();
        cJSON_AddStringToObject(detail, "key", key);
        cJSON_AddNumberToObject(detail, "value", v->valuedouble);
        audit(q, user, NULL, "quota.set", detail);
        *ret = quota_json(q->d, user);
        return 0;
}

static int c_quota_unset(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        const char *user, *key;
        struct sbx_error err = {0};
        cJSON *detail;
        int r;

        if (a_user(q, &user, e) < 0 || a_string(q, "key", false, &key, e) < 0)
                return -1;
        r = quota_unset(q->d->quota, user, key, &err);
        if (r < 0)
                return fail_errno(e, r, &err);
        detail = cJSON_CreateObject();
        add_text(detail, "key", key ? key : "*");
        audit(q, user, NULL, "quota.unset", detail);
        *ret = quota_json(q->d, user);
        cJSON_AddNumberToObject(*ret, "removed", r);
        return 0;
}

static int c_quota_list(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        struct store_quota *rows = NULL;
        size_t n = 0;
        cJSON *a, *defaults;
        int r = quota_overrides(q->d->quota, NULL, &rows, &n);

        if (r < 0)
                return fail_errno(e, r, NULL);
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

/* ---- egress (README "Egress") ---- */

/* The session's egress rows, newest first. */
static int c_egress_log(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        const char *user, *session;
        int limit = 0, r = 0;
        cJSON *rows;

        if (a_key(q, &user, &session, e) < 0 || a_limit(q, "limit", ADMIN_LOGS_DEFAULT, ADMIN_LOGS_MAX, &limit, e) < 0)
                return -1;
        rows = egress_rules_log_json(q->d->store, user, session, (size_t)limit, &r);
        if (!rows)
                return fail_errno(e, r < 0 ? r : -ENOMEM, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", user);
        cJSON_AddStringToObject(*ret, "session", session);
        cJSON_AddItemToObject(*ret, "entries", rows);
        return 0;
}

/* The effective policy of user (and session, if given). */
static int c_egress_policy(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        const char *user, *session;

        if (a_user(q, &user, e) < 0 || a_string(q, "session", false, &session, e) < 0)
                return -1;
        if (session && !session_id_valid(session))
                return fail(e, "invalid", "invalid session_id: must be 1-64 characters of [A-Za-z0-9_.-]");
        *ret = egress_rules_policy_json(q->d->store, q->d->privacy, &q->d->cfg, user, session);
        if (!*ret)
                return fail(e, "internal", "out of memory");
        cJSON_AddStringToObject(*ret, "user", user);
        add_text(*ret, "session", session);
        return 0;
}

static int egress_change(struct admin_req *q, cJSON **ret, struct admin_err *e, bool remove)
{
        const char *user, *session, *pattern;
        struct sbx_error err = {0};
        int r;

        if (a_user(q, &user, e) < 0 || a_string(q, "session", false, &session, e) < 0 ||
            a_string(q, "pattern", true, &pattern, e) < 0)
                return -1;
        r = egress_rules_change(q->d->store, &q->d->cfg, user, session, pattern, remove, q->actor, &err);
        if (r < 0)
                return fail_errno(e, r, &err);
        return c_egress_policy(q, ret, e);
}

static int c_egress_allow(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        return egress_change(q, ret, e, false);
}

static int c_egress_deny(struct admin_req *q, cJSON **ret, struct admin_err *e)
{
        return egress_change(q, ret, e, true);
}

static const struct {
        const char *name;
        cmd_fn fn;
} commands[] = {
        {"health", c_health},
        {"stats", c_stats},
        {"pool", c_pool},
        {"metrics", c_metrics},
        {"sessions.list", c_sessions_list},
        {"sessions.top", c_sessions_top},
        {"session.show", c_session_show},
        {"session.destroy", c_session_destroy},
        {"session.mark_private", c_session_mark_private},
        {"session.logs", c_session_logs},
        {"user.runtime", c_user_runtime},
        {"token.create", c_token_create},
        {"token.revoke", c_token_revoke},
        {"token.list", c_token_list},
        {"quota.show", c_quota_show},
        {"quota.set", c_quota_set},
        {"quota.unset", c_quota_unset},
        {"quota.list", c_quota_list},
        {"egress.log", c_egress_log},
        {"egress.policy", c_egress_policy},
        {"egress.allow", c_egress_allow},
        {"egress.deny", c_egress_deny},
};

/* ---- connections ---- */

static void send_line(int fd, cJSON *o)
{
        char *text = cJSON_PrintUnformatted(o);
        size_t n;

        if (!text)
                return;
        n = strlen(text);
        text[n] = '\n';
        (void)listener_send_all(fd, text, n + 1);
        free(text);
}

static void reply(int fd, const cJSON *id, cJSON *result, const struct admin_err *e)
{
        cJSON *o = cJSON_CreateObject();

        if (!o) {
                cJSON_Delete(result);
                return;
        }
        if (id)
                cJSON_AddItemToObject(o, "id", cJSON_Duplicate(id, true));
        if (result) {
                cJSON_AddTrueToObject(o, "ok");
                cJSON_AddItemToObject(o, "result", result);
        } else {
                cJSON *err;
                cJSON_AddFalseToObject(o, "ok");
                err = cJSON_AddObjectToObject(o, "error");
                cJSON_AddStringToObject(err, "code", e && e->code ? e->code : "internal");
                add_text(err, "message", e && e->msg[0] ? e->msg : "internal error");
        }
        send_line(fd, o);
        cJSON_Delete(o);
}

static void handle_line(struct admin_req *q, int fd, const char *line, size_t len)
{
        _cleanup_(cjson_deletep) cJSON *root = NULL;
        enum reqguard_verdict verdict = reqguard_scan(line, len, REQGUARD_MAX_ELEMENTS, REQGUARD_MAX_DEPTH);
        const cJSON *cmd, *id;
        struct admin_err e = {0};
        cJSON *result = NULL;

        if (verdict != REQGUARD_OK) {
                /* bounded before parsing; strict strings: nothing is truncated at a NUL */
                fail(&e, reqguard_verdict_is_invalid(verdict) ? "invalid" : "too_large", "%s",
                     reqguard_verdict_message(verdict));
                reply(fd, NULL, NULL, &e);
                return;
        }
        root = cJSON_ParseWithLength(line, len);
        if (!root || !cJSON_IsObject(root)) {
                fail(&e, "bad_request", root ? "a command must be a JSON object" : "malformed JSON");
                reply(fd, NULL, NULL, &e);
                return;
        }
        id = cJSON_GetObjectItemCaseSensitive(root, "id");
        cmd = cJSON_GetObjectItemCaseSensitive(root, "cmd");
        if (!cJSON_IsString(cmd) || !cmd->valuestring) {
                fail(&e, "bad_request", "cmd must be a string");
                reply(fd, id, NULL, &e);
                return;
        }
        q->args = root;
        for (size_t i = 0; i < ELEMENTSOF(commands); i++) {
                if (strcmp(commands[i].name, cmd->valuestring) != 0)
                        continue;
                /* top polls every few seconds: keep it out of the info log */
                log_ctx(strcmp(cmd->valuestring, "sessions.top") == 0 ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO, NULL, NULL, NULL, "admin: %s (%s)",
                        commands[i].name, q->actor);
                if (commands[i].fn(q, &result, &e) < 0 || !result) {
                        cJSON_Delete(result);
                        if (!e.code)
                                fail(&e, "internal", "out of memory");
                        reply(fd, id, NULL, &e);
                } else {
                        reply(fd, id, result, NULL);
                }
                return;
        }
        _cleanup_free_ char *name = utf8_sanitize(cmd->valuestring, strnlen(cmd->valuestring, 64));
        fail(&e, "bad_request", "unknown command \"%s\"", name ? name : "");
        reply(fd, id, NULL, &e);
}

static bool peer_allowed(struct admin_server *srv, const struct ucred *peer)
{
        struct passwd pw, *pwp = NULL;
        struct group gr, *grp = NULL;
        char buf[16384];

        if (peer->uid == 0 || peer->uid == getuid())
                return true;
        if (!srv->has_group)
                return false;
        if (peer->gid == srv->gid)
                return true;
        if (getpwuid_r(peer->uid, &pw, buf, sizeof(buf) / 2, &pwp) != 0 || !pwp)
                return false;
        if (getgrgid_r(srv->gid, &gr, buf + sizeof(buf) / 2, sizeof(buf) / 2, &grp) != 0 || !grp)
                return false;
        for (char **m = grp->gr_mem; m && *m; m++)
                if (strcmp(*m, pwp->pw_name) == 0)
                        return true;
        return false;
}

static void serve(struct sockserver *ss, int fd, const struct ucred *peer, void *ud)
{
        struct admin_server *srv = ud;
        struct admin_req q = {.srv = srv, .d = srv->d};
        struct linereader lr;

        snprintf(q.actor, sizeof(q.actor), "admin:uid=%u", (unsigned)peer->uid);
        if (!peer_allowed(srv, peer)) {
                struct admin_err e = {0};
                char detail[128];
                uint64_t suppressed = 0;
                fail(&e, "forbidden", "uid %u may not use the admin socket", (unsigned)peer->uid);
                reply(fd, NULL, NULL, &e);
                /* a peer that keeps trying must not grow the audit log without bound */
                if (!reqguard_audit_allowed(peer->uid, sbx_now_ms(), &suppressed))
                        return;
                snprintf(detail, sizeof(detail), "{\"peer_uid\":%u,\"peer_pid\":%d,\"suppressed_before\":%" PRIu64 "}",
                         (unsigned)peer->uid, (int)peer->pid, suppressed);
                (void)store_audit(srv->d->store, q.actor, NULL, NULL, "admin.refused", detail);
                log_warn("admin: refused uid %u (pid %d)", (unsigned)peer->uid, (int)peer->pid);
                return;
        }
        linereader_init(&lr, fd, ADMIN_MAX_LINE);
        for (;;) {
                char *line;
                size_t len;
                int r = linereader_next(&lr, &line, &len, srv->d->cfg.connection_idle_timeout_ms,
                                        sockserver_stop_fd(ss));
                if (r == -E2BIG) {
                        struct admin_err e = {0};
                        fail(&e, "bad_request", "command line longer than %d bytes; closing", ADMIN_MAX_LINE);
                        reply(fd, NULL, NULL, &e);
                        break;
                }
                if (r <= 0)
                        break;
                while (len > 0 && isspace((unsigned char)line[len - 1]))
                        line[--len] = '\0';
                if (len > 0)
                        handle_line(&q, fd, line, len);
        }
        linereader_done(&lr);
}

int admin_server_start(struct daemon *d, struct admin_server **ret, struct sbx_error *err)
{
        struct admin_server *srv = calloc(1, sizeof(*srv));
        mode_t mode = 0600;
        gid_t gid = (gid_t)-1;
        int r;

        if (!srv)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        srv->d = d;
        if (d->cfg.admin_group[0]) {
                struct group gr, *grp = NULL;
                char buf[16384];
                if (getgrnam_r(d->cfg.admin_group, &gr, buf, sizeof(buf), &grp) != 0 || !grp) {
                        free(srv);
                        return sbx_error_set(err, -EINVAL, 0, "admin_group %s does not exist", d->cfg.admin_group);
                }
                srv->has_group = true;
                srv->gid = gid = grp->gr_gid;
                mode = 0660;
        }
        r = sockserver_start("admin", "sbx-admin", d->cfg.admin_socket, mode, gid, ADMIN_MAX_CONNS,
                             (size_t)d->cfg.max_connections_per_uid, serve, srv, &srv->ss, err);
        if (r < 0) {
                free(srv);
                return r;
        }
        log_info("admin socket listening on %s (mode %04o)", d->cfg.admin_socket, (unsigned)mode);
        *ret = srv;
        return 0;
}

void admin_server_stop(struct admin_server *srv)
{
        if (!srv)
                return;
        sockserver_stop(srv->ss);
        free(srv);
}
