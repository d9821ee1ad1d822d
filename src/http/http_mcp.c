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
 *     session (200 to the one DELETE that ended it, 404 to any other).
 *   - 2026-07-28 era: a request whose params._meta names the protocol
 *     version needs no session: it is served by a core made for it alone,
 *     freed with the answer (a streamed one is parked until the reaper sees
 *     it delivered, or its client gone: then its call is cancelled).
 *   - A request answers with one JSON body, or, for tools/call when the
 *     client accepts text/event-stream, an SSE stream carrying the call's
 *     progress and log notifications and then its response.
 *   - Notifications and responses from the client: 202.
 *
 * An MCP session's life (initialize era):
 *   - refs counts the list's reference, held while the session is linked in
 *     srv->mcp_sessions, plus one per request working on it (the initialize
 *     that made it, or a session_find). It changes under srv->mcp_lock only;
 *     whoever drops it to 0 frees the session (session_free).
 *   - Ending is unlink, then end. The session is unlinked from the list in
 *     the same srv->mcp_lock section that finds it, by DELETE
 *     (http_mcp_delete), the idle reaper (http_mcp_expire) or the stop
 *     (http_mcp_stop). Only that one caller takes over the list's reference:
 *     it ends the session (session_end) and then drops the reference. A
 *     session is unlinked once, so the list's reference is dropped once; a
 *     second DELETE finds nothing and gets 404.
 *   - session_end, under s->lock: ended is set, every streamed call gets its
 *     final event (a JSON-RPC error for its id, MCP_SESSION_TERMINATED), the
 *     server stream is closed, and the requests waiting for an answer are
 *     woken (they answer 404). Then, outside the lock, the calls in flight
 *     are cancelled (mcp_cancel_all), and the executions behind them with
 *     them. The client asked for the session to go, so its work goes too.
 *     This is what notifications/cancelled does.
 *   - A request that found the session before it was unlinked attaches
 *     nothing to it once it has ended (no route, no server stream: 404).
 *     After handing its line to the core it looks at ended again and, if it
 *     is set, cancels the calls. ended is set before session_end cancels, so
 *     every call is cancelled, by one or the other.
 *   - Streams hold no reference on the session (a struct sse is counted on
 *     its own). An open stream shows that its client is still there, so the
 *     reaper does not expire a session that has one.
 *
 * Locks: srv->mcp_lock guards the session list and count, the parked cores,
 * each session's refs and last_used. s->lock guards a session's routes,
 * server stream and ended; s->cond wakes requests waiting for their
 * response. The lock order is srv->mcp_lock, then s->lock, then sse->lock;
 * the core's callback (on_line) runs under the core's own locks and takes
 * s->lock. So no mcp_* function is called while holding srv->mcp_lock or
 * s->lock. */
#include <assert.h>
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

#define MCP_SESSION_IDLE_MS (30 * 60 * 1000)
#define MCP_SESSION_HEADER "Mcp-Session-Id"
#define MCP_SESSION_NOT_FOUND -32001
/* The final event of a streamed call whose session ended: JSON-RPC's range
 * for server errors, and the code the MCP SDKs use for a closed connection
 * (ConnectionClosed). */
#define MCP_SESSION_TERMINATED -32000

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
        bool ended;                /* lock: session_end (DELETE, expiry, stop) */
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
        if (s->ended) /* its streams got their final event; its waiters answer 404 */
                goto out;
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
out:
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

void http_mcp_release(struct http_server *srv, struct http_mcp_session *s)
{
        int left;

        if (!s)
                return;
        pthread_mutex_lock(&srv->mcp_lock);
        left = --s->refs;
        pthread_mutex_unlock(&srv->mcp_lock);
        assert(left >= 0);
        if (left == 0)
                session_free(s);
}

const char *http_mcp_id(const struct http_mcp_session *s)
{
        return s->id;
}

/* Under srv->mcp_lock: the caller takes over the list's reference. */
static void session_unlink_locked(struct http_server *srv, struct http_mcp_session **pp)
{
        struct http_mcp_session *s = *pp;

        *pp = s->next;
        s->next = NULL;
        srv->mcp_count--;
}

/* The final event of a streamed call: a JSON-RPC error for its request. */
static void route_terminate(struct route *r, const char *why)
{
        cJSON *o = cJSON_CreateObject(), *e;
        char *text = NULL;

        if (o && cJSON_AddStringToObject(o, "jsonrpc", "2.0")) {
                cJSON *id = cJSON_Parse(r->id);
                if (id)
                        cJSON_AddItemToObject(o, "id", id);
                e = cJSON_AddObjectToObject(o, "error");
                if (e) {
                        cJSON_AddNumberToObject(e, "code", MCP_SESSION_TERMINATED);
                        cJSON_AddStringToObject(e, "message", why);
                }
                text = cJSON_PrintUnformatted(o);
        }
        cJSON_Delete(o);
        /* without memory for the event, the stream still ends */
        http_sse_push_text(r->sse, "message", text ? text : "{}", true);
        free(text);
}

/* End an unlinked session (its list reference held by the caller): see the
 * file's header. */
static void session_end(struct http_mcp_session *s, const char *why)
{
        pthread_mutex_lock(&s->lock);
        s->ended = true;
        for (struct route **pp = &s->routes; *pp;) {
                struct route *r = *pp;
                if (!r->sse) { /* a waiter: it removes its route itself */
                        pp = &r->next;
                        continue;
                }
                *pp = r->next;
                route_terminate(r, why);
                route_free(r);
        }
        if (s->server_stream) {
                http_sse_end(s->server_stream);
                http_sse_unref(s->server_stream);
                s->server_stream = NULL;
        }
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        mcp_cancel_all(s->m);
}

static bool session_ended(struct http_mcp_session *s)
{
        bool ended;

        pthread_mutex_lock(&s->lock);
        ended = s->ended;
        pthread_mutex_unlock(&s->lock);
        return ended;
}

/* Under srv->mcp_lock: a stream of the session is still open to its client. */
static bool session_streaming(struct http_mcp_session *s)
{
        bool open = false;

        pthread_mutex_lock(&s->lock);
        for (struct route *r = s->routes; r && !open; r = r->next)
                open = r->sse && !http_sse_closed(r->sse);
        if (s->server_stream && !http_sse_closed(s->server_stream))
                open = true;
        pthread_mutex_unlock(&s->lock);
        return open;
}

static struct http_mcp_session **session_lookup_locked(struct http_server *srv, const char *id, const char *user)
{
        struct http_mcp_session **pp;

        for (pp = &srv->mcp_sessions; *pp; pp = &(*pp)->next)
                if (strcmp((*pp)->id, id) == 0 && strcmp((*pp)->user, user) == 0)
                        return pp;
        return NULL;
}

struct http_mcp_session *http_mcp_find(struct http_server *srv, const char *id, const char *user)
{
        struct http_mcp_session **pp, *s = NULL;

        pthread_mutex_lock(&srv->mcp_lock);
        pp = session_lookup_locked(srv, id, user);
        if (pp) {
                s = *pp;
                s->refs++;
                s->last_used = sbx_now_ms();
        }
        pthread_mutex_unlock(&srv->mcp_lock);
        return s;
}

int http_mcp_open(struct http_server *srv, const char *token, const char *user, struct http_mcp_session **ret,
                  struct sbx_error *err)
{
        struct http_mcp_session *s;
        size_t mine = 0;
        bool full;
        int r;

        r = session_new(srv, token, user, NULL, &s, err);
        if (r < 0)
                return r;
        /* the caps are checked where the session is linked: concurrent initializes cannot pass them together */
        pthread_mutex_lock(&srv->mcp_lock);
        for (struct http_mcp_session *x = srv->mcp_sessions; x; x = x->next)
                mine += strcmp(x->user, user) == 0;
        full = srv->mcp_count >= HTTP_MCP_SESSIONS_MAX || mine >= HTTP_MCP_SESSIONS_PER_USER;
        if (!full) {
                s->refs = 2; /* the list's and the caller's */
                s->last_used = sbx_now_ms();
                s->next = srv->mcp_sessions;
                srv->mcp_sessions = s;
                srv->mcp_count++;
        }
        pthread_mutex_unlock(&srv->mcp_lock);
        if (full) {
                session_free(s);
                return sbx_error_set(err, -EUSERS, 0, "too many MCP sessions: DELETE one you no longer use");
        }
        *ret = s;
        return 0;
}

int http_mcp_delete(struct http_server *srv, const char *id, const char *user)
{
        struct http_mcp_session **pp, *s = NULL;

        pthread_mutex_lock(&srv->mcp_lock);
        pp = session_lookup_locked(srv, id, user);
        if (pp) {
                s = *pp;
                session_unlink_locked(srv, pp);
        }
        pthread_mutex_unlock(&srv->mcp_lock);
        if (!s)
                return -ENOENT;
        session_end(s, "the MCP session was terminated (DELETE): this call was cancelled");
        log_info("http: MCP session %.8s… of %s ended by DELETE", s->id, s->user);
        http_mcp_release(srv, s); /* the list's */
        return 0;
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
        struct http_mcp_session *gone[16], *s, **pp;
        size_t n = 0;
        int64_t now = sbx_now_ms();

        parked_reap(srv, false);
        pthread_mutex_lock(&srv->mcp_lock);
        for (pp = &srv->mcp_sessions; (s = *pp) && n < ELEMENTSOF(gone);) {
                /* refs == 1: only the list holds it, no request is working on it */
                if (s->refs != 1 || now - s->last_used <= MCP_SESSION_IDLE_MS) {
                        pp = &s->next;
                } else if (session_streaming(s)) {
                        s->last_used = now; /* its client is still reading */
                        pp = &s->next;
                } else {
                        session_unlink_locked(srv, pp);
                        gone[n++] = s;
                }
        }
        pthread_mutex_unlock(&srv->mcp_lock);
        for (size_t i = 0; i < n; i++) {
                session_end(gone[i], "the MCP session expired (idle)");
                log_info("http: MCP session %.8s… of %s expired (idle)", gone[i]->id, gone[i]->user);
                http_mcp_release(srv, gone[i]);
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
                        session_unlink_locked(srv, &srv->mcp_sessions);
                pthread_mutex_unlock(&srv->mcp_lock);
                if (!s)
                        return;
                session_end(s, "the server is stopping");
                http_mcp_release(srv, s);
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
        bool ended;

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
        ended = s->ended;
        if (!ended) {
                r->next = s->routes;
                s->routes = r;
        }
        pthread_mutex_unlock(&s->lock);
        if (ended) { /* DELETEd since this request found it */
                if (resp)
                        MHD_destroy_response(resp);
                route_free(r);
                return queue_rpc_error(conn, 404, MCP_SESSION_NOT_FOUND, "the MCP session ended");
        }

        mcp_handle_line(s->m, rq->body, rq->len);
        if (session_ended(s)) /* it ended meanwhile: what this line started is cancelled too */
                mcp_cancel_all(s->m);
        if (stream) /* on_line (or session_end) completes the stream and drops the route */
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
        ended = s->ended;
        pthread_mutex_unlock(&s->lock);
        route_free(r);
        if (!text)
                return ended ? queue_rpc_error(conn, 404, MCP_SESSION_NOT_FOUND, "the MCP session ended")
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
        int r;

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
                r = http_mcp_open(srv, token, rq->tok.user, &s, &err);
                if (r < 0)
                        return queue_rpc_error(conn, r == -EUSERS ? 429 : 503, MCP_INTERNAL_ERROR, err.msg);
                announce = true;
                log_info("http: MCP session %.8s… opened by %s (token %s)", s->id, rq->tok.user, rq->tok.id);
        } else if (sid) {
                s = http_mcp_find(srv, sid, rq->tok.user);
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
                http_mcp_release(srv, s);
        }
        return ret;
}

/* GET: the session's server stream (one per session; a new one replaces a closed one). */
static enum MHD_Result get(struct http_server *srv, struct MHD_Connection *conn, struct http_conn *hc,
                           struct http_mcp_session *s)
{
        struct sse *st = NULL, *old = NULL;
        struct MHD_Response *resp;
        int status = 200;

        pthread_mutex_lock(&s->lock);
        if (s->ended) {
                status = 404; /* DELETEd since this request found it */
        } else if (s->server_stream && !http_sse_closed(s->server_stream)) {
                status = 409;
        } else {
                old = s->server_stream;
                st = s->server_stream = http_sse_new(srv, hc->fd);
        }
        pthread_mutex_unlock(&s->lock);
        if (old)
                http_sse_unref(old);
        if (status == 404)
                return queue_rpc_error(conn, 404, MCP_SESSION_NOT_FOUND, "the MCP session ended");
        if (status == 409)
                return queue_rpc_error(conn, 409, MCP_INVALID_REQUEST, "this session's stream is open");
        resp = st ? http_sse_response(st) : NULL;
        if (!resp)
                return queue_rpc_error(conn, 503, MCP_INTERNAL_ERROR, "out of memory");
        return queue_with_session(conn, resp, 200, s, false);
}

enum MHD_Result http_mcp_request(struct http_server *srv, struct MHD_Connection *conn, struct http_conn *hc,
                                 struct http_req *rq, const char *verb)
{
        const char *sid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MCP_SESSION_HEADER);
        const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        struct http_mcp_session *s;
        enum MHD_Result ret;

        if (strcmp(verb, MHD_HTTP_METHOD_POST) == 0)
                return post(srv, conn, hc, rq, sid, auth + 7 /* authenticated: "Bearer " is there */);
        if (!sid)
                return queue_rpc_error(conn, 400, MCP_INVALID_REQUEST, "an Mcp-Session-Id header is required");
        if (strcmp(verb, MHD_HTTP_METHOD_DELETE) == 0) {
                if (http_mcp_delete(srv, sid, rq->tok.user) < 0)
                        return queue_rpc_error(conn, 404, MCP_SESSION_NOT_FOUND, "unknown or ended Mcp-Session-Id");
                return http_queue_text(conn, 200, "application/json", strdup(""), false);
        }
        s = http_mcp_find(srv, sid, rq->tok.user);
        if (!s)
                return queue_rpc_error(conn, 404, MCP_SESSION_NOT_FOUND, "unknown or ended Mcp-Session-Id");
        ret = get(srv, conn, hc, s);
        http_mcp_release(srv, s);
        return ret;
}
