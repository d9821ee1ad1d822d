/* e2b_internal.h — what the E2B front's files share: e2b.c (routing, keys,
 * the control API) and e2b_envd.c (the in-sandbox protocol). Private to
 * src/e2b/. */
#ifndef SANDBOXD_E2B_INTERNAL_H
#define SANDBOXD_E2B_INTERNAL_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "sandboxd/e2b.h"
#include "sandboxd/fronterr.h"
#include "sandboxd/token.h"

#define E2B_SESSION_PREFIX "e2b-"
/* the longest path segment a route takes ({sec}: E2B's secret names) */
#define E2B_SEGMENT_MAX 128
/* the one user inside an E2B sandbox here: every command and file operation runs as it */
#define E2B_USER "user"
/* The label of a sandbox created with network.allowPublicTraffic false
 * (value "private"; metadata cannot set it): its getHost traffic needs the
 * access token. */
#define E2B_TRAFFIC_LABEL "e2b.traffic"

struct e2b_route;

struct e2b_req {
        struct daemon *d;
        struct api_conn c;
        struct token_info tok;
        const struct e2b_route *route;
        char sandbox[E2B_ID_MAX + 1];                          /* the route's {id}, or E2b-Sandbox-Id */
        char context[E2B_ID_MAX + 1];                          /* the code interpreter's {ctx} */
        char snapshot[E2B_ID_MAX + 1];                         /* a template route's {snap} */
        char secret[E2B_SEGMENT_MAX + 1];                      /* a secret route's {sec} */
        char session[sizeof(E2B_SESSION_PREFIX) + E2B_ID_MAX]; /* "e2b-" + sandbox */
        int status;                                            /* != 0: answered from the headers */
        char msg[256];
        bool authed;
        char *body;
        size_t len, max;
        bool too_large;
        /* getHost(port) traffic (e2b_proxy.c) */
        int proxy_port; /* 0: not proxied */
        int pfd;        /* the connection into the container, -1 none */
        bool req_chunked, pfail, slot, head_request;
        bool upgrade;        /* the client asked for an Upgrade (a WebSocket) */
        struct relay *relay; /* its relay once the container answered 101 */
};

/* One route: the verb, the path ({id}: a sandbox id), whether it is envd's
 * (routed by E2b-Sandbox-Id, authenticated by the access token), its body
 * cap, the handler, and the core calls it makes (api_call methods), for
 * the reader: the table is the whole translation. */
struct e2b_route {
        const char *verb;
        const char *path;
        int port; /* 0: the control API; else E2b-Sandbox-Port (envd's, the code interpreter's) */
        size_t body_max;
        enum MHD_Result (*run)(struct e2b_req *q, struct MHD_Connection *conn);
        const char *core;
};

/* api_call as the request's user; params taken. 0 with *ret, -1 with e. */
int e2b_call(struct e2b_req *q, const char *method, cJSON *params, cJSON **ret, struct fronterr *e);
/* buf as a JSON object, bounded (reqguard) before parsing; an empty buf is
 * {}. NULL with e: bad_request, or too_large past reqguard's bounds. */
cJSON *e2b_parse_object(const char *buf, size_t len, struct fronterr *e);
/* The sandbox's session exists (for this user): no call creates it again. */
bool e2b_session_exists(struct e2b_req *q);
/* Replies. */
enum MHD_Result e2b_reply_json(struct MHD_Connection *conn, int status, cJSON *body);
enum MHD_Result e2b_reply_raw(struct MHD_Connection *conn, int status, const char *type, void *data, size_t len);
/* E2B's error body {"code": status, "message"}. */
enum MHD_Result e2b_reply_error(struct MHD_Connection *conn, int status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* A core error as E2B's (its code's status). */
enum MHD_Result e2b_reply_fronterr(struct MHD_Connection *conn, const struct fronterr *e);

/* 200 with the JSON array out (consumed) and, when next is not empty, the
 * x-next-token header with which the SDK's paginators ask for more. */
enum MHD_Result e2b_reply_page(struct MHD_Connection *conn, cJSON *out, const char *next);
/* Every member of o is one of names (NULL-ended); else the first that is not. */
const char *e2b_unknown_member(const cJSON *o, const char *const *names);
/* RFC 3339 of unix ms into o[key] (null when ms is not after 1970). */
void e2b_add_time(cJSON *o, const char *key, double ms);

/* Answer from the headers: status and message (e2b_respond sends them). */
void e2b_decide(struct e2b_req *q, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The token is the access token of q->sandbox for the user it names (set in q->tok.user). */
bool e2b_access_check(struct e2b_req *q, const char *token);

/* e2b_proxy.c: getHost(port) traffic. begin routes q->sandbox's port
 * (e2b_decide on any refusal) and sends the request's head; body streams a
 * piece of its body; respond reads the answer's head and streams the rest;
 * free releases what begin took (NULL-safe on a request never proxied). */
void e2b_proxy_begin(struct e2b_req *q, struct MHD_Connection *conn, const char *url, const char *verb, int port);
void e2b_proxy_body(struct e2b_req *q, const char *data, size_t n);
int e2b_proxy_respond(struct e2b_req *q, struct MHD_Connection *conn);
void e2b_proxy_free(struct e2b_req *q);

/* e2b_envd.c: the envd routes' handlers. */
enum MHD_Result e2b_envd_health(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_download(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_upload(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_start(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_connect(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_list(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_send_input(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_send_signal(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_update(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_close_stdin(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_stat(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_list_dir(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_make_dir(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_remove(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_move(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_watch_dir(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_create_watcher(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_get_watcher_events(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_envd_remove_watcher(struct e2b_req *q, struct MHD_Connection *conn);
/* Stop the CreateWatcher watchers of a session (killed: they can never
 * be polled again, and their watches count against the hub's caps). */
void e2b_envd_watchers_forget(const char *user, const char *session);
/* Stop every CreateWatcher watcher (the server stops, before the hub goes). */
void e2b_envd_watchers_stop(void);

/* e2b_secrets.c: E2B's /secrets on sandboxd's secrets (secrets.h). */
enum MHD_Result e2b_secret_list(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_secret_create(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_secret_get(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_secret_update(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_secret_delete(struct e2b_req *q, struct MHD_Connection *conn);
/* E2B's secret name as the store's (upper case); false with why naming the broken rule. */
bool e2b_secret_name(const char *in, char out[65], char *why, size_t why_size);
/* network.rules ({domain: [{transform: {headers: {Name: "... ${e2b.secrets.NAME} ..."}}}]}) as
 * attach_secret's params, one per secret ({name, hosts, header, template}), in *ret; NULL, or
 * why not (each secret known, each header naming one, each domain a host name, the caps). */
const char *e2b_rules_parse(struct e2b_req *q, const cJSON *rules, cJSON **ret, char *why, size_t why_size);
/* attach_secret for each of attach on q->session; replace: detach the rules' attachments first. */
int e2b_rules_apply(struct e2b_req *q, const cJSON *attach, bool replace, struct fronterr *e);

/* e2b_jupyter.c: the code interpreter's API (port 49999). */
enum MHD_Result e2b_jupyter_execute(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_jupyter_create(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_jupyter_list(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_jupyter_restart(struct e2b_req *q, struct MHD_Connection *conn);
enum MHD_Result e2b_jupyter_remove(struct e2b_req *q, struct MHD_Connection *conn);

#endif
