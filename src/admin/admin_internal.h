/* admin_internal.h — what the admin front's files share: admin.c (the
 * socket, the peer check, the command table, argument and formatting
 * helpers), admin_sessions.c (health, stats, sessions, logs, runtime) and
 * admin_ops.c (tokens, quotas, egress). Private to src/. */
#ifndef SANDBOXD_ADMIN_INTERNAL_H
#define SANDBOXD_ADMIN_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandboxd/fronterr.h"
#include "sandboxd/jsonutil.h"

#define ADMIN_LOGS_DEFAULT 200 /* audit rows and log lines per session.logs and egress.log */
#define ADMIN_LOGS_MAX 4096

struct daemon;
struct sockserver;

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
        struct jparams argv; /* args, for the typed getters */
        char actor[48];
};

/* A command: 0 with *ret, <0 with e filled. */
typedef int (*admin_cmd_fn)(struct admin_req *q, cJSON **ret, struct fronterr *e);

/* ---- helpers (admin.c) ---- */
/* args.user and args.session, both required and a valid session key. */
int admin_arg_key(struct admin_req *q, const char **ret_user, const char **ret_session, struct fronterr *e);
/* args.user, required and a valid id. */
int admin_arg_user(struct admin_req *q, const char **ret, struct fronterr *e);
/* args.<name>: an integer from 1 to max (def when absent). */
int admin_arg_limit(struct admin_req *q, const char *name, int def, int max, int *ret, struct fronterr *e);
/* Audit "admin.<cmd>" by the peer (detail is taken). */
void admin_audit(struct admin_req *q, const char *user, const char *session, const char *cmd, cJSON *detail);
/* Times, text and lower-cased names: jsonutil.h. */

/* ---- admin_sessions.c ---- */
int admin_c_health(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_metrics(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_pool(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_nodes_list(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_session_destroy(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_session_logs(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_session_pause(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_session_resume(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_session_mark_private(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_session_show(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_sessions_list(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_sessions_top(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_stats(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_user_runtime(struct admin_req *q, cJSON **ret, struct fronterr *e);

/* ---- admin_ops.c ---- */
int admin_c_egress_allow(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_egress_deny(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_egress_log(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_egress_policy(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_quota_list(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_quota_set(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_quota_show(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_quota_unset(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_token_create(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_token_list(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_token_revoke(struct admin_req *q, cJSON **ret, struct fronterr *e);
/* admin_snapshots.c (issue 28) */
int admin_c_snapshots_list(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_snapshot_delete(struct admin_req *q, cJSON **ret, struct fronterr *e);
/* secrets (issue 37): admin_secrets.c */
int admin_c_secret_set(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_secret_list(struct admin_req *q, cJSON **ret, struct fronterr *e);
int admin_c_secret_delete(struct admin_req *q, cJSON **ret, struct fronterr *e);

#endif
