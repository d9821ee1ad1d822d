/* http_internal.h — what the HTTP front's files share: http.c (the
 * listener, requests, the JSON API, SSE streams) and http_mcp.c (MCP
 * Streamable HTTP at /mcp). Private to src/. */
#ifndef SANDBOXD_HTTP_INTERNAL_H
#define SANDBOXD_HTTP_INTERNAL_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "sandboxd/api_transport.h"
#include "sandboxd/http.h"

struct http_mcp_session;
struct term;

struct http_conn;


struct http_server {
        struct daemon *d;
        bool metrics; /* the metrics front: /metrics and /healthz, no token, loopback, no TLS */
        struct MHD_Daemon *mhd;
        char *cert, *key, *ca; /* PEM text, alive as long as mhd */
        int port;
        /* caps (http.c, checked as MHD accepts: on_accept) */
        int max_per_addr;          /* open connections per address */
        int max_unauth;            /* not yet authenticated, in all */
        int max_unauth_per_addr;   /* the same per address */
        int64_t auth_timeout_ms;   /* the reaper closes a connection unauthenticated this long */
        char start_error[256];     /* lock; MHD's last message (the reason when it does not start) */
        int64_t refusal_logged_at; /* the listening thread's: refusals are logged every 10 s at most */
        uint64_t refusals;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct http_conn *conns; /* lock */
        int sse_workers;         /* lock */
        bool stopping;           /* lock; read unlocked as a hint by the waits */
        pthread_t reaper;
        bool reaper_started;
        /* http_mcp.c: MCP sessions of the initialize era (mcp_lock) */
        pthread_mutex_t mcp_lock;
        struct http_mcp_session *mcp_sessions;
        size_t mcp_count;
        struct http_mcp_session *mcp_parked; /* stateless cores whose answer streams on (mcp_lock) */
};

/* One TCP connection (MHD's socket context), from its opening to its close. */
struct http_conn {
        struct http_server *srv;
        struct http_conn *next; /* srv->lock */
        int fd;
        int64_t opened_ms; /* lock */
        struct http_addr addr;
        bool authed;         /* atomic: a request on it has authenticated (set once) */
        bool evicted;        /* lock: shut down to make room; no longer counted */
        struct api_conn api; /* auth failures (the connection's thread) */
        char peer[64];
};

/* One request (MHD's con_cls). */
struct http_req {
        bool started;
        bool sse;
        int status; /* != 0: an error decided before the body was read */
        const char *code;
        char msg[256];
        char method[64];
        struct token_info tok;
        char *body;
        size_t len;
        bool too_large;
        bool mcp;            /* /mcp */
        bool events;         /* GET /v1/events (http_events.c) */
        bool console;        /* /console/... (http_console.c) */
        bool timeout_off;    /* the connection's idle limit is lifted while this request is answered */
        struct e2b_req *e2b; /* E2B's control API or envd (src/e2b/, e2b.h) */
        bool terminal;       /* GET /v1/terminal, a WebSocket (http_terminal.c) */
        struct term *term;   /* its connection once answered (a reference, dropped by on_completed) */
};

/* The console's terminal over a WebSocket (http_terminal.c). */
#define HTTP_TERMINAL_PROTOCOL "sandboxd.terminal.v1" /* the Sec-WebSocket-Protocol it speaks */
/* Whether the request may be upgraded: 0, or an HTTP status with *ret_code
 * and msg (403 for an Origin not of this front, before anything else). */
int http_terminal_check(struct http_server *srv, struct MHD_Connection *conn, const char *verb, const char **ret_code,
                        char *msg, size_t msg_size);
/* The 101 (or a refusal past the caps); *ret the reference of the request. */
enum MHD_Result http_terminal_request(struct http_server *srv, struct MHD_Connection *conn, struct http_conn *hc,
                                      struct term **ret);
/* The request is done: drop its reference (NULL: nothing). */
void http_terminal_done(struct term *t);
/* End every terminal (the server stops); MHD_stop_daemon then waits for their CLOSE. */
void http_terminal_stop(void);

/* The request's trace id (reqctx.h): its traceparent or X-Request-Id
 * header, else params.traceparent / params.request_id, else a fresh one. */
void http_trace_pick(struct MHD_Connection *conn, const cJSON *params, char ret[REQCTX_ID_MAX + 1]);
/* The reply names it: a traceparent header (when it is a W3C trace id) and
 * X-Request-Id. */
void http_trace_headers(struct MHD_Response *resp, const char *trace_id);

/* A response with a JSON or text body (status counted in the metrics). */
enum MHD_Result http_queue_text(struct MHD_Connection *conn, int status, const char *type, char *text, bool close);
enum MHD_Result http_queue_error(struct MHD_Connection *conn, int status, const char *code, const char *msg,
                                 bool close);
/* The client closed its end; only on the connection's own thread. */
bool http_fd_gone(int fd);
bool http_stopping(struct http_server *srv);

/* An SSE stream: a bounded queue the connection's thread drains into the
 * response. http_sse_new gives the caller one reference; http_sse_response
 * takes another for the response (dropped when MHD is done with it). */
struct sse;
struct sse *http_sse_new(struct http_server *srv, int fd);
struct MHD_Response *http_sse_response(struct sse *s);
/* Queue "event: <event>\ndata: <json>\n\n"; final ends the stream after it.
 * Once the stream has ended, nothing more is queued. */
void http_sse_push_text(struct sse *s, const char *event, const char *json, bool final);
/* The same with an "id: <id>" line first (id >= 0; -1: none). */
void http_sse_push_event(struct sse *s, int64_t id, const char *event, const char *json, bool final);
/* Bytes queued and not yet taken by MHD (a producer's backpressure). */
size_t http_sse_pending(struct sse *s);
/* End the stream with no further event (what was queued still goes out). */
void http_sse_end(struct sse *s);
/* The response is gone (client left or server stopping). */
bool http_sse_closed(struct sse *s);
void http_sse_unref(struct sse *s);
/* {"error": {"code", "message"}}, or with status != 0 the flat
 * {"code", "message", "status"} of an SSE error event; msg is sanitised. */
cJSON *http_error_object(const char *code, const char *msg, int status);
/* Answer a streamed POST /v1/<method>: the response, and a worker running
 * api_call with params (taken) whose events it carries. */
enum MHD_Result http_sse_start(struct http_server *srv, struct MHD_Connection *conn, struct http_conn *hc,
                               struct http_req *rq, cJSON *params);

/* http_events.c: GET /v1/events, the caller's lifecycle events as SSE
 * (events.h), once the request is authenticated. */
enum MHD_Result http_events_request(struct http_server *srv, struct MHD_Connection *conn, struct http_conn *hc,
                                    struct http_req *rq);

/* http_console.c: the browser console's static files under /console/,
 * served without a token, under a strict Content-Security-Policy. */
bool http_console_claims(const char *url);
enum MHD_Result http_console_request(struct MHD_Connection *conn, const char *url, const char *verb);

/* http_mcp.c: /mcp (POST, GET, DELETE) once the request is authenticated
 * and its body read. */
enum MHD_Result http_mcp_request(struct http_server *srv, struct MHD_Connection *conn, struct http_conn *hc,
                                 struct http_req *rq, const char *verb);
/* End MCP sessions idle past their limit (the reaper, every second). */
void http_mcp_expire(struct http_server *srv);
/* End every MCP session (stopping). */
void http_mcp_stop(struct http_server *srv);
#define HTTP_MCP_SESSIONS_MAX 256     /* MCP sessions (initialize era), all users */
#define HTTP_MCP_SESSIONS_PER_USER 16 /* and per user */
/* The MCP session table, which http_mcp_request serves (and
 * tests/stress/stress_http_mcp.c drives directly); the rules on references
 * are in http_mcp.c's header. http_mcp_open makes a session of user and
 * links it, within the caps: 0 with the caller's reference in *ret,
 * -EUSERS when the caps are reached, or another -errno. */
int http_mcp_open(struct http_server *srv, const char *token, const char *user, struct http_mcp_session **ret,
                  struct sbx_error *err);
/* The linked session of that id and user, with a reference for the caller;
 * NULL if there is none. */
struct http_mcp_session *http_mcp_find(struct http_server *srv, const char *id, const char *user);
void http_mcp_release(struct http_server *srv, struct http_mcp_session *s);
const char *http_mcp_id(const struct http_mcp_session *s);
/* DELETE: unlink the session and end it. 0 for the one caller that did,
 * -ENOENT for every other (unknown, another user's, or ended already). */
int http_mcp_delete(struct http_server *srv, const char *id, const char *user);

#endif
