/* admin.c — the admin socket front (protocol in include/sandboxd/admin.h):
 * file permissions set before the socket is reachable, a peer-credential
 * check on every connection, then one JSON command per line. This file
 * holds the socket, the command table and the helpers the commands share
 * (admin_internal.h); the commands are in admin_sessions.c (health, stats,
 * sessions, logs, runtime) and admin_ops.c (tokens, quotas, egress). Thin:
 * they call the session manager, exec engine, services, privacy, quota and
 * token modules.
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
#include "sandboxd/audit.h"
#include "sandboxd/daemon.h"
#include "sandboxd/fronterr.h"
#include "sandboxd/jsonl_client.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/log.h"
#include "sandboxd/reqguard.h"
#include "sandboxd/session.h"
#include "sandboxd/usage.h"
#include "sandboxd/utf8.h"

#include "admin_internal.h"

#define ADMIN_MAX_CONNS 16

int admin_arg_key(struct admin_req *q, const char **ret_user, const char **ret_session, struct fronterr *e)
{
        struct sbx_error err = {0};
        if (jparam_string(&q->argv, "user", true, ret_user, e) < 0 ||
            jparam_string(&q->argv, "session", true, ret_session, e) < 0)
                return -1;
        if (session_key_check(*ret_user, *ret_session, &err) < 0)
                return fronterr_set(e, "invalid", "%s", err.msg);
        return 0;
}

int admin_arg_user(struct admin_req *q, const char **ret, struct fronterr *e)
{
        if (jparam_string(&q->argv, "user", true, ret, e) < 0)
                return -1;
        if (!session_id_valid(*ret))
                return fronterr_set(e, "invalid", "invalid user_id: must be 1-64 characters of [A-Za-z0-9_.-]");
        return 0;
}

int admin_arg_limit(struct admin_req *q, const char *name, int def, int max, int *ret, struct fronterr *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->args, name);
        if (!v || cJSON_IsNull(v)) {
                *ret = def;
                return 0;
        }
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > max || v->valuedouble != (int)v->valuedouble)
                return fronterr_set(e, "bad_request", "%s must be an integer from 1 to %d", name, max);
        *ret = (int)v->valuedouble;
        return 0;
}

void admin_audit(struct admin_req *q, const char *user, const char *session, const char *cmd, cJSON *detail)
{
        char action[64];

        snprintf(action, sizeof(action), "admin.%s", cmd);
        (void)audit_record_json(q->d->store, q->actor, user, session, action, detail);
}

/* ---- formatting ---- */

static const struct {
        const char *name;
        admin_cmd_fn fn;
} commands[] = {
        {"health", admin_c_health},
        {"stats", admin_c_stats},
        {"pool", admin_c_pool},
        {"nodes.list", admin_c_nodes_list},
        {"list_nodes", admin_c_nodes_list}, /* the same, by the name issue 26's notes give it */
        {"metrics", admin_c_metrics},
        {"sessions.list", admin_c_sessions_list},
        {"sessions.top", admin_c_sessions_top},
        {"session.show", admin_c_session_show},
        {"session.destroy", admin_c_session_destroy},
        {"session.mark_private", admin_c_session_mark_private},
        {"session.pause", admin_c_session_pause},
        {"session.resume", admin_c_session_resume},
        {"session.logs", admin_c_session_logs},
        {"user.runtime", admin_c_user_runtime},
        {"token.create", admin_c_token_create},
        {"token.revoke", admin_c_token_revoke},
        {"token.list", admin_c_token_list},
        {"quota.show", admin_c_quota_show},
        {"quota.set", admin_c_quota_set},
        {"quota.unset", admin_c_quota_unset},
        {"quota.list", admin_c_quota_list},
        {"egress.log", admin_c_egress_log},
        {"egress.policy", admin_c_egress_policy},
        {"egress.allow", admin_c_egress_allow},
        {"egress.deny", admin_c_egress_deny},
        {"snapshots.list", admin_c_snapshots_list},
        {"snapshot.delete", admin_c_snapshot_delete},
        {"secret.set", admin_c_secret_set},
        {"secret.list", admin_c_secret_list},
        {"secret.delete", admin_c_secret_delete},
};

/* ---- connections ---- */

static void reply(int fd, const cJSON *id, cJSON *result, const struct fronterr *e)
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
                jsonutil_add_text(err, "message", e && e->msg[0] ? e->msg : "internal error");
        }
        (void)jsonl_send(fd, o);
        cJSON_Delete(o);
}

static void handle_line(struct admin_req *q, int fd, const char *line, size_t len)
{
        _cleanup_(cjson_freep) cJSON *root = NULL;
        enum reqguard_verdict verdict = reqguard_scan(line, len, REQGUARD_MAX_ELEMENTS, REQGUARD_MAX_DEPTH);
        const cJSON *cmd, *id;
        struct fronterr e = {0};
        cJSON *result = NULL;

        if (verdict != REQGUARD_OK) {
                /* bounded before parsing; strict strings: nothing is truncated at a NUL */
                fronterr_set(&e, reqguard_verdict_is_invalid(verdict) ? "invalid" : "too_large", "%s",
                             reqguard_verdict_message(verdict));
                reply(fd, NULL, NULL, &e);
                return;
        }
        root = cJSON_ParseWithLength(line, len);
        if (!root || !cJSON_IsObject(root)) {
                fronterr_set(&e, "bad_request", root ? "a command must be a JSON object" : "malformed JSON");
                reply(fd, NULL, NULL, &e);
                return;
        }
        id = cJSON_GetObjectItemCaseSensitive(root, "id");
        cmd = cJSON_GetObjectItemCaseSensitive(root, "cmd");
        if (!cJSON_IsString(cmd) || !cmd->valuestring) {
                fronterr_set(&e, "bad_request", "cmd must be a string");
                reply(fd, id, NULL, &e);
                return;
        }
        q->args = root;
        q->argv = (struct jparams){.obj = root, .prefix = ""};
        for (size_t i = 0; i < ELEMENTSOF(commands); i++) {
                if (strcmp(commands[i].name, cmd->valuestring) != 0)
                        continue;
                /* top polls every few seconds: keep it out of the info log */
                log_ctx(strcmp(cmd->valuestring, "sessions.top") == 0 ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO, NULL, NULL,
                        NULL, "admin: %s (%s)", commands[i].name, q->actor);
                if (commands[i].fn(q, &result, &e) < 0 || !result) {
                        cJSON_Delete(result);
                        if (!e.code)
                                fronterr_set(&e, "internal", "out of memory");
                        reply(fd, id, NULL, &e);
                } else {
                        reply(fd, id, result, NULL);
                }
                return;
        }
        _cleanup_free_ char *name = utf8_sanitize(cmd->valuestring, strnlen(cmd->valuestring, 64));
        fronterr_set(&e, "bad_request", "unknown command \"%s\"", name ? name : "");
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
                struct fronterr e = {0};
                char detail[128];
                uint64_t suppressed = 0;
                fronterr_set(&e, "forbidden", "uid %u may not use the admin socket", (unsigned)peer->uid);
                /* Recorded before it is answered: whoever sees the refusal
                 * finds it in the audit log. A peer that keeps trying must
                 * not grow the log without bound. */
                if (reqguard_audit_allowed(peer->uid, sbx_now_ms(), &suppressed)) {
                        snprintf(detail, sizeof(detail),
                                 "{\"peer_uid\":%u,\"peer_pid\":%d,\"suppressed_before\":%" PRIu64 "}",
                                 (unsigned)peer->uid, (int)peer->pid, suppressed);
                        (void)audit_record(srv->d->store, q.actor, NULL, NULL, "admin.refused", detail);
                        log_warn("admin: refused uid %u (pid %d)", (unsigned)peer->uid, (int)peer->pid);
                }
                reply(fd, NULL, NULL, &e);
                return;
        }
        linereader_init(&lr, fd, ADMIN_MAX_LINE);
        for (;;) {
                char *line;
                size_t len;
                int r = linereader_next(&lr, &line, &len, srv->d->cfg.connection_idle_timeout_ms,
                                        sockserver_stop_fd(ss));
                if (r == -E2BIG) {
                        struct fronterr e = {0};
                        fronterr_set(&e, "bad_request", "command line longer than %d bytes; closing", ADMIN_MAX_LINE);
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
                             (size_t)config_max_connections_per_uid(&d->cfg), 0, serve, srv, &srv->ss, err);
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
