/* http_mcp.c — MCP Streamable HTTP at /mcp: the same protocol core as
 * sandboxd-mcp (mcp*.c, the tools from mcp_catalog.c, calling the API socket with
 * the request's bearer token) behind a thin transport that routes each
 * output line to the HTTP response of the request it belongs to
 * (mcp_options.write_related).
 *
 *   - Initialize era: POST initialize creates an MCP session (its id in the
 *     Mcp-Session-Id response header; its default sandbox session is
 *     "mcp-<random>", which a tool's `session` argument overrides). Later
 *     requests carry the header; an unknown id, or one of another user, is
 *     404. GET opens the session's server stream (SSE); DELETE ends the
 *     session and cancels its calls in flight.
 *   - 2026-07-28 era: a request whose params._meta names the protocol
 *     version needs no session: it is served by a core made for it alone,
 *     freed with the answer (a streamed one is parked until the reaper sees
 *     it delivered, or its client gone: then its call is cancelled).
 *   - A request answers with one JSON body, or, for tools/call when the
 *     client accepts text/event-stream, an SSE stream carrying the call's
 *     progress and log notifications and then its response.
 *   - Notifications and responses from the client: 202.
 *
 * Locking: srv->mcp_lock guards the session list, each session's refs and
 * last_used. s->lock guards a session's routes and server stream; s->cond
 * wakes requests waiting for their response. The core's callback (on_line)
 * takes s->lock only. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/log.h"
#include "sandboxd/mcp.h"

#define MCP_SESSIONS_MAX 256
#define MCP_SESSIONS_PER_USER 16
#define MCP_SESSION_IDLE_MS (30 * 60 * 1000)
#define MCP_SESSION_HEADER "Mcp-Session-Id"
#define MCP_SESSION_NOT_FOUND -32001

/* A request waiting for its response. */
struct route {
        char *id;        /* the request id as JSON text */
        struct sse *sse; /* streamed; else the response is kept in response */
        char *response;
        bool done;
        struct route *next;
};

struct http_mcp_session {
        struct http_mcp_session *next; /* srv->mcp_lock */
        int refs;                      /* srv->mcp_lock */
        int64_t last_used;             /* srv->mcp_lock */
        char id[33];
        char user[65];
        struct mcp *m;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct route *routes;      /* lock */
        struct sse *server_stream; /* lock: GET */
        bool ended;                /* lock: DELETE or expiry */
};

/* The core builds every response as {"jsonrpc":"2.0","id":...} and every
 * notification as {"jsonrpc":"2.0","method":...} (mcp.c envelope). */
static bool is_response(const char *line, size_t len)
{
        static const char prefix[] = "{\"jsonrpc\":\"2.0\",\"id\":";
        return len >= sizeof(prefix) - 1 && memcmp(line, prefix, sizeof(prefix) - 1) == 0;
}

static void route_free(struct route *r)
{
        if (!r)
                return;
        if (r->sse)
                http_sse_unref(r->sse);
        free(r->id);
        free(r->response);
        free(r);
}

static int on_line(const char *line, size_t len, const cJSON *related, void *ud)
{
        struct http_mcp_session *s = ud;
        _cleanup_free_ char *rid = related ? cJSON_PrintUnformatted(related) : NULL;
        char *text = strndup(line, len && line[len - 1] == '\n' ? len - 1 : len);
        bool response = is_response(line, len);
        struct route **pp, *r = NULL;

        if (!text)
                return 0;
        pthread_mutex_lock(&s->lock);
        for (pp = &s->routes; rid && *pp; pp = &(*pp)->next)
                if (strcmp((*pp)->id, rid) == 0) {
                        r = *pp;
                        break;
                }
        if (r && r->sse) {
                http_sse_push_text(r->sse, "message", text, response);
                if (response) { /* the stream is complete: nobody waits for this route */
                        *pp = r->next;
                        route_free(r);
                }
        } else if (r && response) {
                r->response = text;
                text = NULL;
                r->done = true;
                pthread_cond_broadcast(&s->cond);
        } else if (!r && s->server_stream) {
                http_sse_push_text(s->server_stream, "message", text, false);
        }
        pthread_mutex_unlock(&s->lock);
        free(text);
        return 0;
}

static int session_new(struct http_server *srv, const char *token, const char *user, const char *default_session,
                       struct http_mcp_session **ret, struct sbx_error *err)
{
        struct http_mcp_session *s = calloc(1, sizeof(*s));
        struct mcp_options o = {.api_socket = srv->d->cfg.api_socket, .token = token, .session = default_session};
        int r;

        if (!s)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->cond, NULL);
        s->refs = 1;
        snprintf(s->user, sizeof(s->user), "%s", user);
        o.write_related = on_line;
        o.write_userdata = s;
        r = sbx_random_hex(s->id, 16);
        if (r == 0)
                r = mcp_new(&o, &s->m, err);
        if (r < 0) {
                pthread_mutex_destroy(&s->lock);
                pthread_cond_destroy(&s->cond);
                free(s);
                return r;
        }
        *ret = s;
        return 0;
}

/* The last reference: the core first (no callback after mcp_free returns). */
static void session_free(struct http_mcp_session *s)
{
        mcp_free(s->m);
        while (s->routes) {
                struct route *r = s->routes;
                s->routes = r->next;
                route_free(r);
        }
        if (s->server_stream)
                http_sse_unref(s->server_stream);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
}

static void session_release(struct http_server *srv, struct http_mcp_session *s)
{
        int left;

        if (!s)
                return;
        pthread_mutex_lock(&srv->mcp_lock);
        left = --s->refs;
        pthread_mutex_unlock(&srv->mcp_lock);
        if (left == 0)
                session_free(s);
}

/* Unlink (under srv->mcp_lock) and end: calls cancelled, waiters woken. */
static void session_end_locked(struct http_server *srv, struct http_mcp_session *s)
{
        for (struct http_mcp_session **pp = &srv->mcp_sessions; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                        *pp = s->next;
                        srv->mcp_count--;
                        break;
                }
        mcp_cancel_all(s->m);
        pthread_mutex_lock(&s->lock);
        s->ended = true;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
}

static struct http_mcp_session *session_find(struct http_server *srv, const char *id, const char *user)
{
        struct http_mcp_session *s;

        pthread_mutex_lock(&srv->mcp_lock);
        for (s = srv->mcp_sessions; s; s = s->next)
                if (strcmp(s->id, id) == 0 && strcmp(s->user, user) == 0) {
                        s->refs++;
                        s->last_used = sbx_now_ms();
                        break;
                }
        pthread_mutex_unlock(&srv->mcp_lock);
        return s;
}

/* A parked stateless core is over once its answer went out (on_line dropped
 * the route) or its client left (the stream closed: its call is cancelled). */
static bool parked_over(struct http_mcp_session *s)
{
        bool over;

        pthread_mutex_lock(&s->lock);
        over = !s->routes || (s->routes->sse && http_sse_closed(s->routes->sse));
        pthread_mutex_unlock(&s->lock);
        return over;
}

static void parked_reap(struct http_server *srv, bool all)
{
        for (;;) {
                struct http_mcp_session *s, **pp;
                pthread_mutex_lock(&srv->mcp_lock);
                for (pp = &srv->mcp_parked; (s = *pp); pp = &s->next)
                        if (all || parked_over(s)) {
                                *pp = s->next;
                                break;
                        }
                pthread_mutex_unlock(&srv->mcp_lock);
                if (!s)
                        return;
                mcp_cancel_all(s->m); /* nothing if the answer went out */
                session_free(s);
        }
}

void http_mcp_expire(struct http_server *srv)
{
        struct http_mcp_session *gone[16];
        size_t n = 0;
        int64_t now = sbx_now_ms();

        parked_reap(srv, false);
        pthread_mutex_lock(&srv->mcp_lock);
        for (struct http_mcp_session *s = srv->mcp_sessions, *next; s && n < ELEMENTSOF(gone); s = next) {
                next = s->next;
                if (s->refs == 1 && now - s->last_used > MCP_SESSION_IDLE_MS) {
                        session_end_locked(srv, s);
                        gone[n++] = s;
                }
        }
        pthread_mutex_unlock(&srv->mcp_lock);
        for (size_t i = 0; i < n; i++) {
                log_info("http: MCP session %.8s… of %s expired (idle)", gone[i]->id, gone[i]->user);
                session_release(srv, gone[i]);
        }
}

void http_mcp_stop(struct http_server *srv)
{
        parked_reap(srv, true);
        for (;;) {
                struct http_mcp_session *s;
                pthread_mutex_lock(&srv->mcp_lock);
                s = srv->mcp_sessions;
                if (s)
                        session_end_locked(srv, s);
                pthread_mutex_unlock(&srv->mcp_lock);
                if (!s)
                        return;
                session_release(srv, s);
        }
}

static enum MHD_Result queue_rpc_error(struct MHD_Connection *conn, int status, int code, const char *msg)
{
        cJSON *o = cJSON_CreateObject(), *e;
        char *text;

        cJSON_AddStringToObject(o, "jsonrpc", "2.0");
        cJSON_AddNullToObject(o, "id");
        e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddNumberToObject(e, "code", code);
        cJSON_AddStringToObject(e, "message", msg);
        text = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        return text ? http_queue_text(conn, status, "application/json", text, false) : MHD_NO;
}

static enum MHD_Result queue_with_session(struct MHD_Connection *conn, struct MHD_Response *resp, int status,
                                          const struct http_mcp_session *s, bool announce)
{
        enum MHD_Result ret;

        if (announce)
                MHD_add_response_header(resp, MCP_SESSION_HEADER, s->id);
        ret = MHD_queue_response(conn, (unsigned)status, resp);
        MHD_destroy_response(resp);
        return ret;
}

/* Feed one request to the core and answer with its response. */
static enum MHD_Result answer(struct http_server *srv, struct MHD_Connection *conn, struct http_conn *hc,
                              struct http_req *rq, struct http_mcp_session *s, const cJSON *id, bool stream,
                              bool announce)
{
        struct route *r = calloc(1, sizeof(*r));
        struct MHD_Response *resp;
        char *text = NULL;

        if (!r || !(r->id = cJSON_PrintUnformatted(id))) {
                free(r);
                return queue_rpc_error(conn, 503, MCP_INTERNAL_ERROR, "out of memory");
        }
        if (stream && !(r->sse = http_sse_new(srv, hc->fd))) {
                route_free(r);
                return queue_rpc_error(conn, 503, MCP_INTERNAL_ERROR, "out of memory");
        }
        resp = stream ? http_sse_response(r->sse) : NULL;
        if (stream && !resp) {
                route_free(r);
                return queue_rpc_error(conn, 503, MCP_INTERNAL_ERROR, "out of memory");
        }
        pthread_mutex_lock(&s->lock);
        r->next = s->routes;
        s->routes = r;
        pthread_mutex_unlock(&s->lock);

        mcp_handle_line(s->m, rq->body, rq->len);
        if (stream) /* on_line completes the stream and drops the route */
                return queue_with_session(conn, resp, 200, s, announce);

        pthread_mutex_lock(&s->lock);
        while (!r->done && !s->ended && !http_stopping(srv) && !http_fd_gone(hc->fd)) {
                struct timespec until = sbx_deadline_after(CLOCK_REALTIME, 500);
                (void)pthread_cond_timedwait(&s->cond, &s->lock, &until);
        }
        for (struct route **pp = &s->routes; *pp; pp = &(*pp)->next)
                if (*pp == r) {
                        *pp = r->next;
                        break;
                }
        if (r->done) {
                text = r->response;
                r->response = NULL;
        }
        pthread_mutex_unlock(&s->lock);
        route_free(r);
        if (!text)
                return s->ended ? queue_rpc_error(conn, 404, MCP_SESSION_NOT_FOUND, "the MCP session ended")
                                : MHD_NO; /* the client left, or the server stops */
        resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(text);
                return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        return queue_with_session(conn, resp, 200, s, announce);
}

static bool is_modern(const cJSON *msg)
{
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");
        return cJSON_GetObjectItemCaseSensitive(meta, "io.modelcontextprotocol/protocolVersion") != NULL;
}

static enum MHD_Result post(struct http_server *srv, struct MHD_Connection *conn, struct http_conn *hc,
                            struct http_req *rq, const char *sid, const char *token)
{
        _cleanup_(cjson_freep) cJSON *msg = NULL;
        struct http_mcp_session *s = NULL;
        const cJSON *method, *id;
        bool initialize, stream = false, announce = false, registered = true;
        struct sbx_error err = {0};
        enum MHD_Result ret;

        if (rq->too_large)
                return queue_rpc_error(conn, 413, MCP_INVALID_REQUEST, "the message is too large");
        msg = cJSON_ParseWithLength(rq->body ? rq->body : "", rq->len);
        if (!msg)
                return queue_rpc_error(conn, 400, MCP_PARSE_ERROR, "malformed JSON");
        if (!cJSON_IsObject(msg))
                return queue_rpc_error(conn, 400, MCP_INVALID_REQUEST, "one JSON-RPC message per POST (no batches)");
        method = cJSON_GetObjectItemCaseSensitive(msg, "method");
        id = cJSON_GetObjectItemCaseSensitive(msg, "id");
        initialize = cJSON_IsString(method) && strcmp(method->valuestring, "initialize") == 0;

        if (initialize) {
                if (sid)
                        return queue_rpc_error(conn, 400, MCP_INVALID_REQUEST,
                                               "initialize must not carry an Mcp-Session-Id");
                pthread_mutex_lock(&srv->mcp_lock);
                size_t mine = 0;
                for (struct http_mcp_session *x = srv->mcp_sessions; x; x = x->next)
                        mine += strcmp(x->user, rq->tok.user) == 0;
                bool full = srv->mcp_count >= MCP_SESSIONS_MAX || mine >= MCP_SESSIONS_PER_USER;
                pthread_mutex_unlock(&srv->mcp_lock);
                if (full)
                        return queue_rpc_error(conn, 429, MCP_INTERNAL_ERROR,
                                               "too many MCP sessions: DELETE one you no longer use");
                if (session_new(srv, token, rq->tok.user, NULL, &s, &err) < 0)
                        return queue_rpc_error(conn, 503, MCP_INTERNAL_ERROR, err.msg);
                pthread_mutex_lock(&srv->mcp_lock);
                s->refs = 2; /* the list's and ours */
                s->last_used = sbx_now_ms();
                s->next = srv->mcp_sessions;
                srv->mcp_sessions = s;
                srv->mcp_count++;
                pthread_mutex_unlock(&srv->mcp_lock);
                announce = true;
                log_info("http: MCP session %.8s… opened by %s (token %s)", s->id, rq->tok.user, rq->tok.id);
        } else if (sid) {
                s = session_find(srv, sid, rq->tok.user);
                if (!s)
                        return queue_rpc_error(conn, 404, MCP_SESSION_NOT_FOUND,
                                               "unknown or ended Mcp-Session-Id: initialize again");
        } else if (is_modern(msg)) {
                /* stateless: a core for this request alone; the sandbox session comes from the tool's
                 * argument, else the user's "mcp" session */
                if (session_new(srv, token, rq->tok.user, "mcp", &s, &err) < 0)
                        return queue_rpc_error(conn, 503, MCP_INTERNAL_ERROR, err.msg);
                registered = false;
        } else {
                return queue_rpc_error(conn, 400, MCP_INVALID_REQUEST,
                                       "an Mcp-Session-Id header is required (initialize first), or the "
                                       "2026-07-28 _meta envelope");
        }

        if (!cJSON_IsString(method) || !id || cJSON_IsNull(id)) {
                /* a notification (cancellations among them) or a response: nothing to wait for */
                mcp_handle_line(s->m, rq->body, rq->len);
                ret = http_queue_text(conn, 202, "application/json", strdup(""), false);
        } else {
                stream = rq->sse && strcmp(method->valuestring, "tools/call") == 0;
                ret = answer(srv, conn, hc, rq, s, id, stream, announce);
        }
        if (!registered && stream) {
                /* the answer streams on after this returns: the reaper frees the core */
                pthread_mutex_lock(&srv->mcp_lock);
                s->next = srv->mcp_parked;
                srv->mcp_parked = s;
                pthread_mutex_unlock(&srv->mcp_lock);
        } else if (!registered) {
                mcp_cancel_all(s->m); /* the client left before the answer: nothing stays behind */
                session_free(s);
        } else {
                session_release(srv, s);
        }
        return ret;
}

enum MHD_Result http_mcp_request(struct http_server *srv, struct MHD_Connection *conn, struct http_conn *hc,
                                 struct http_req *rq, const char *verb)
{
        const char *sid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MCP_SESSION_HEADER);
        const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        struct http_mcp_session *s;

        if (strcmp(verb, MHD_HTTP_METHOD_POST) == 0)
                return post(srv, conn, hc, rq, sid, auth + 7 /* authenticated: "Bearer " is there */);
        if (!sid)
                return queue_rpc_error(conn, 400, MCP_INVALID_REQUEST, "an Mcp-Session-Id header is required");
        s = session_find(srv, sid, rq->tok.user);
        if (!s)
                return queue_rpc_error(conn, 404, MCP_SESSION_NOT_FOUND, "unknown or ended Mcp-Session-Id");
        if (strcmp(verb, MHD_HTTP_METHOD_DELETE) == 0) {
                pthread_mutex_lock(&srv->mcp_lock);
                if (!s->ended)
                        session_end_locked(srv, s);
                pthread_mutex_unlock(&srv->mcp_lock);
                log_info("http: MCP session %.8s… of %s ended by DELETE", s->id, s->user);
                session_release(srv, s); /* ours */
                session_release(srv, s); /* the list's */
                return http_queue_text(conn, 200, "application/json", strdup(""), false);
        }
        /* GET: the server stream (one per session; a new one replaces a closed one) */
        {
                struct sse *st = NULL, *old = NULL;
                struct MHD_Response *resp;
                enum MHD_Result ret;

                pthread_mutex_lock(&s->lock);
                if (s->server_stream && !http_sse_closed(s->server_stream)) {
                        pthread_mutex_unlock(&s->lock);
                        session_release(srv, s);
                        return queue_rpc_error(conn, 409, MCP_INVALID_REQUEST, "this session's stream is open");
                }
                old = s->server_stream;
                st = s->server_stream = http_sse_new(srv, hc->fd);
                pthread_mutex_unlock(&s->lock);
                if (old)
                        http_sse_unref(old);
                resp = st ? http_sse_response(st) : NULL;
                if (!resp) {
                        session_release(srv, s);
                        return queue_rpc_error(conn, 503, MCP_INTERNAL_ERROR, "out of memory");
                }
                ret = MHD_queue_response(conn, 200, resp);
                MHD_destroy_response(resp);
                session_release(srv, s);
                return ret;
        }
}
