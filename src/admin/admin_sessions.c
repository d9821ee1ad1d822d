/* admin_sessions.c — the admin commands about the daemon and its sessions
 * (admin.h): health, stats, pool, metrics, sessions.list/top, session.show/
 * destroy/mark_private/logs and user.runtime. Each checks its arguments,
 * calls the module and formats the reply; no state, no threads (the
 * connection's worker runs it). */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <string.h>

#include "sandboxd/audit.h"
#include "sandboxd/container.h"
#include "sandboxd/daemon.h"
#include "sandboxd/engine.h"
#include "sandboxd/egress.h"
#include "sandboxd/egress_rules.h"
#include "sandboxd/exec.h"
#include "sandboxd/fronterr.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/log.h"
#include "sandboxd/metrics.h"
#include "sandboxd/monitor.h"
#include "sandboxd/node.h"
#include "sandboxd/opsview.h"
#include "sandboxd/portpool.h"
#include "sandboxd/privacy.h"
#include "sandboxd/runtime.h"
#include "sandboxd/service.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/pool.h"
#include "sandboxd/usage.h"
#include "sandboxd/wsquota.h"

#include "admin_internal.h"

#define ADMIN_RECENT_EXECUTIONS 10
#define ADMIN_TOP_MAX 1000 /* sessions per top sample */

static cJSON *datasets_json(struct daemon *d, const char *user, const char *session)
{
        struct privacy_dataset *list = NULL;
        size_t n = 0;
        cJSON *a = cJSON_CreateArray();

        if (!a || !d->privacy || privacy_list(d->privacy, user, session, &list, &n) < 0)
                return a;
        for (size_t i = 0; i < n; i++) {
                cJSON *x = cJSON_CreateObject();
                jsonutil_add_text(x, "dataset", list[i].dataset);
                jsonutil_add_text(x, "source", list[i].source);
                jsonutil_add_time(x, "marked_at", list[i].marked_at);
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
        jsonutil_add_lower(o, "state", session_state_to_string(s->state));
        jsonutil_add_text(o, "container_id", s->container_id);
        jsonutil_add_text(o, "image", s->image);
        jsonutil_add_text(o, "network_mode", s->network_mode);
        jsonutil_add_text(o, "runtime", s->runtime);
        if (s->accel[0]) /* a microVM's: kvm or tcg */
                cJSON_AddStringToObject(o, "accel", s->accel);
        if (s->rootfs_note[0]) /* a microVM on the busybox guest: why not the image (session.show) */
                cJSON_AddStringToObject(o, "rootfs_note", s->rootfs_note);
        char node[NODE_NAME_MAX + 1];
        daemon_session_node(d, s->user, s->session, node, sizeof(node));
        jsonutil_add_text(o, "node", node); /* the node agent serving it (node.listen); null in one process */
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
        jsonutil_add_time(o, "created_at", s->created_at);
        jsonutil_add_time(o, "last_activity", s->last_activity);
        jsonutil_add_time(o, "paused_at", s->paused_at);
        jsonutil_add_text(o, "last_error", s->last_error);
        jsonutil_add_text(o, "error_cause", s->error_cause);
        return o;
}

int admin_c_health(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        (void)e;
        *ret = opsview_health(q->d);
        return 0;
}

int admin_c_pool(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        (void)e;
        *ret = cJSON_CreateObject();
        opsview_add_pool(*ret, q->d->pool);
        return 0;
}

int admin_c_nodes_list(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        int r = opsview_nodes(q->d, ret);
        return r < 0 ? fronterr_errno(e, r, NULL, "cannot list the nodes") : 0;
}

int admin_c_stats(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        (void)e;
        *ret = opsview_stats(q->d);
        return 0;
}

/* The Prometheus text of metrics.listen's /metrics (sandboxctl metrics). */
int admin_c_metrics(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        _cleanup_free_ char *text = NULL;

        if (metrics_render(&q->d->metrics_ctx, &text) < 0)
                return fronterr_set(e, "internal", "out of memory");
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "text", text);
        return 0;
}

int admin_c_sessions_list(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user, *state_s;
        enum session_state state;
        struct session_info *list = NULL;
        size_t n = 0;
        cJSON *a;
        int r;

        if (jparam_string(&q->argv, "user", false, &user, e) < 0 ||
            jparam_string(&q->argv, "state", false, &state_s, e) < 0)
                return -1;
        if (state_s) {
                char up[16];
                size_t i = 0;
                for (; state_s[i] && i + 1 < sizeof(up); i++)
                        up[i] = (char)toupper((unsigned char)state_s[i]);
                up[i] = '\0';
                if (session_state_from_string(up, &state) < 0)
                        return fronterr_set(e, "invalid", "state must be creating, running, paused, stopped or error");
        }
        r = session_list(q->d->sessions, user, state_s ? &state : NULL, &list, &n);
        if (r < 0)
                return fronterr_errno(e, r, NULL, NULL);
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
                jsonutil_add_lower(o, "state", service_state_to_string(list[i].state));
                if (list[i].pid > 0)
                        cJSON_AddNumberToObject(o, "pid", list[i].pid);
                else
                        cJSON_AddNullToObject(o, "pid");
                if (list[i].exit_code >= 0)
                        cJSON_AddNumberToObject(o, "exit_code", list[i].exit_code);
                else
                        cJSON_AddNullToObject(o, "exit_code");
                jsonutil_add_text(o, "command", list[i].command);
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
                jsonutil_add_time(o, "started_at", list[i].started_at);
                jsonutil_add_time(o, "stopped_at", list[i].stopped_at);
                jsonutil_add_text(o, "last_error", list[i].last_error);
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
                jsonutil_add_lower(o, "state", exec_state_to_string(list[i].state));
                jsonutil_add_text(o, "cause", exec_cause_to_string(list[i].cause));
                if (list[i].exit_code >= 0)
                        cJSON_AddNumberToObject(o, "exit_code", list[i].exit_code);
                else
                        cJSON_AddNullToObject(o, "exit_code");
                jsonutil_add_text(o, "command_preview", list[i].command_preview);
                jsonutil_add_time(o, "created_at", list[i].created_at);
                cJSON_AddNumberToObject(o, "duration_ms", (double)list[i].duration_ms);
                jsonutil_add_text(o, "error", list[i].error);
                cJSON_AddItemToArray(a, o);
        }
        exec_result_list_free(list, n);
        return a;
}

int admin_c_session_show(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user, *session;
        struct session_info info;
        int r;

        if (admin_arg_key(q, &user, &session, e) < 0)
                return -1;
        r = session_get_info(q->d->sessions, user, session, &info);
        if (r == -ENOENT)
                return fronterr_set(e, "not_found", "no session %s:%s", user, session);
        if (r < 0)
                return fronterr_errno(e, r, NULL, NULL);
        *ret = session_json(q->d, &info);
        jsonutil_add_text(*ret, "workspace", info.workspace);
        {
                struct wsquota_usage u;
                wsquota_usage(&q->d->cfg, user, session, &u);
                cJSON_AddItemToObject(*ret, "workspace_usage", wsquota_usage_to_json(&u));
        }
        cJSON_AddItemToObject(*ret, "datasets", datasets_json(q->d, user, session));
        cJSON_AddItemToObject(*ret, "egress",
                              egress_rules_policy_json(q->d->store, q->d->privacy, &q->d->cfg, user, session));
        cJSON_AddItemToObject(*ret, "services", services_json(q->d, user, session));
        cJSON_AddItemToObject(*ret, "executions", executions_json(q->d, user, session));
        session_info_done(&info);
        return 0;
}

int admin_c_session_destroy(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user, *session;
        bool purge = false;
        struct sbx_error err = {0};
        cJSON *detail;
        int r;

        if (admin_arg_key(q, &user, &session, e) < 0 || jparam_bool(&q->argv, "purge", false, &purge, e) < 0)
                return -1;
        r = session_destroy(q->d->sessions, user, session, purge, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        detail = cJSON_CreateObject();
        cJSON_AddBoolToObject(detail, "purge", purge);
        admin_audit(q, user, session, "session.destroy", detail);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", user);
        cJSON_AddStringToObject(*ret, "session", session);
        cJSON_AddBoolToObject(*ret, "purged", purge);
        return 0;
}

/* session.pause / session.resume: what pause_session and resume_session do, for an operator. */
int admin_c_session_pause(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user, *session;
        struct sbx_error err = {0};
        bool was = false;
        int r;

        if (admin_arg_key(q, &user, &session, e) < 0)
                return -1;
        r = session_pause(q->d->sessions, user, session, "admin", &was, &err);
        if (r == -EOPNOTSUPP)
                return fronterr_set(e, "unavailable", "%s", err.msg);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        admin_audit(q, user, session, "session.pause", NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", user);
        cJSON_AddStringToObject(*ret, "session", session);
        cJSON_AddBoolToObject(*ret, "already_paused", was);
        return 0;
}

int admin_c_session_resume(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user, *session;
        struct sbx_error err = {0};
        bool was = false;
        int r;

        if (admin_arg_key(q, &user, &session, e) < 0)
                return -1;
        r = session_resume(q->d->sessions, user, session, &was, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        admin_audit(q, user, session, "session.resume", NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", user);
        cJSON_AddStringToObject(*ret, "session", session);
        cJSON_AddBoolToObject(*ret, "resumed", was);
        return 0;
}

int admin_c_session_mark_private(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user, *session, *dataset, *source;
        struct sbx_error err = {0};
        cJSON *detail;
        int r;

        if (admin_arg_key(q, &user, &session, e) < 0 || jparam_string(&q->argv, "dataset", true, &dataset, e) < 0 ||
            jparam_string(&q->argv, "source", false, &source, e) < 0)
                return -1;
        if (!q->d->privacy)
                return fronterr_set(e, "unavailable", "privacy marks are not available in this daemon");
        r = privacy_mark(q->d->privacy, user, session, dataset, source, q->actor, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        detail = cJSON_CreateObject();
        jsonutil_add_text(detail, "dataset", dataset);
        jsonutil_add_text(detail, "source", source);
        admin_audit(q, user, session, "session.mark_private", detail);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", user);
        cJSON_AddStringToObject(*ret, "session", session);
        cJSON_AddItemToObject(*ret, "datasets", datasets_json(q->d, user, session));
        cJSON_AddStringToObject(*ret, "network_mode", privacy_required_network(q->d->privacy, user, session));
        return 0;
}

/* Live sessions with their usage; the client turns two samples into CPU % (like docker stats). */
int admin_c_sessions_top(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        struct usage_row *rows = NULL;
        size_t n = 0;
        const char *user;
        cJSON *a;
        int r;

        if (jparam_string(&q->argv, "user", false, &user, e) < 0)
                return -1;
        r = usage_collect(&(struct usage_ctx){.sessions = q->d->sessions,
                                              .engine = q->d->engine,
                                              .exec = q->d->exec,
                                              .store = q->d->store},
                          user, ADMIN_TOP_MAX, &rows, &n);
        if (r < 0)
                return fronterr_errno(e, r, NULL, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddNumberToObject(*ret, "sampled_at", (double)sbx_wall_ms());
        cJSON_AddNumberToObject(*ret, "cpus_per_session", (double)q->d->cfg.nano_cpus / 1e9);
        a = cJSON_AddArrayToObject(*ret, "sessions");
        for (size_t i = 0; i < n; i++) {
                const struct usage_row *u = &rows[i];
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "user", u->user);
                cJSON_AddStringToObject(o, "session", u->session);
                jsonutil_add_lower(o, "state", session_state_to_string(u->state));
                jsonutil_add_text(o, "container_id", u->container_id);
                jsonutil_add_text(o, "network_mode", u->network_mode);
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
int admin_c_session_logs(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        cJSON *page = NULL, *a;
        char **lines = NULL;
        size_t n_lines = 0;
        const char *user, *session;
        int limit = 0, r;

        if (admin_arg_key(q, &user, &session, e) < 0 ||
            admin_arg_limit(q, "limit", ADMIN_LOGS_DEFAULT, ADMIN_LOGS_MAX, &limit, e) < 0)
                return -1;
        r = audit_session_page(q->d->store, user, session, 0, (size_t)limit, &page);
        if (r < 0)
                return fronterr_errno(e, r, NULL, NULL);
        r = log_session_lines(user, session, (size_t)limit, &lines, &n_lines);
        if (r < 0) {
                cJSON_Delete(page);
                return fronterr_errno(e, r, NULL, NULL);
        }
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", user);
        cJSON_AddStringToObject(*ret, "session", session);
        cJSON_AddItemToObject(*ret, "audit", cJSON_DetachItemFromObjectCaseSensitive(page, "audit"));
        cJSON_Delete(page);
        a = cJSON_AddArrayToObject(*ret, "log");
        for (size_t i = 0; i < n_lines; i++) {
                cJSON *line = cJSON_Parse(lines[i]);
                if (line)
                        cJSON_AddItemToArray(a, line);
        }
        log_lines_free(lines, n_lines);
        return 0;
}

/* A user's runtime: read it, or set (runc | runsc) or reset ("default") the override. */
int admin_c_user_runtime(struct admin_req *q, cJSON **ret, struct fronterr *e)
{
        const char *user, *name;
        char effective[RUNTIME_NAME_MAX], over[RUNTIME_NAME_MAX];
        struct sbx_error err = {0};
        int r;

        if (jparam_string(&q->argv, "user", true, &user, e) < 0 ||
            jparam_string(&q->argv, "runtime", false, &name, e) < 0)
                return -1;
        if (!session_id_valid(user))
                return fronterr_set(e, "invalid", "user must be 1-64 characters of [A-Za-z0-9_.-]");
        if (name) {
                r = runtime_set_user(q->d->runtime, user, name, &err);
                if (r < 0)
                        return fronterr_errno(e, r, &err, NULL);
                cJSON *detail = cJSON_CreateObject();
                cJSON_AddStringToObject(detail, "runtime", name);
                admin_audit(q, user, NULL, "user.runtime", detail);
        }
        r = runtime_for_user(q->d->runtime, user, effective, over);
        if (r < 0)
                return fronterr_errno(e, r, NULL, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", user);
        cJSON_AddStringToObject(*ret, "runtime", effective);
        jsonutil_add_text(*ret, "override", over);
        cJSON_AddStringToObject(*ret, "default", q->d->cfg.runtime);
        /* can it run here? (a warning, not a refusal: the operator may register runsc later) */
        err = (struct sbx_error){0};
        if (runtime_check(q->d->runtime, effective, &err) < 0)
                jsonutil_add_text(*ret, "unavailable", err.msg);
        else
                cJSON_AddNullToObject(*ret, "unavailable");
        cJSON_AddStringToObject(*ret, "applies_to", "containers created from now on (new sessions and recreations)");
        return 0;
}
