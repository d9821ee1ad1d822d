/* http.c — the network front door (include/sandboxd/http.h): libmicrohttpd
 * with GnuTLS, bearer tokens, POST /v1/<method> through the API dispatcher
 * (api_call), and SSE for streamed executions. No logic of its own beyond
 * routing, authentication and formatting. SSE streams are http_sse.c, the
 * MCP endpoint http_mcp.c, the browser console's files http_console.c and its
 * terminal, a WebSocket, http_terminal.c.
 *
 * Threads: MHD's listening thread accepts (on_accept applies the caps
 * first); every connection gets one MHD thread (MHD_USE_THREAD_PER_CONNECTION,
 * at most connections.max), on which a request runs api_call directly. Every
 * wait is poll() (MHD_USE_POLL): select() would refuse any descriptor past
 * FD_SETSIZE, and a daemon with a few hundred sessions holds more than that
 * before it opens this front. An SSE request runs api_call on a worker
 * ("sbx-http-sse") that hands events to the connection's thread through a
 * struct sse: sse->lock guards its queue and flags, and it is freed by the
 * last of the worker and the response (refs). "sbx-http-reap" closes
 * connections that have not authenticated in time.
 *   srv->lock  guards the connection list (for on_accept and the reaper),
 *              each connection's opened_ms and evicted, and the count of
 *              live SSE workers (srv->cond: http_server_stop waits for 0). */
#include "sandboxd/http.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/api_transport.h"
#include "http_internal.h"
#include "sandboxd/config.h"
#include "sandboxd/daemon.h"
#include "sandboxd/e2b.h"
#include "sandboxd/log.h"
#include "sandboxd/metrics.h"
#include "sandboxd/reqguard.h"
#include "sandboxd/utf8.h"

#define HTTP_MAX_AUTH_FAILURES 5
#define PEM_MAX (1 << 20)

/* ---- helpers ---- */

int http_status_for_code(const char *code)
{
        static const struct {
                const char *code;
                int status;
        } map[] = {
                {"bad_request", 400}, {"invalid", 400},     {"unauthorized", 401},     {"forbidden", 403},
                {"not_found", 404},   {"conflict", 409},    {"already_finished", 409}, {"too_large", 413},
                {"busy", 429},        {"unavailable", 503},
        };
        for (size_t i = 0; code && i < ELEMENTSOF(map); i++)
                if (strcmp(map[i].code, code) == 0)
                        return map[i].status;
        return 500;
}

int http_parse_listen(const char *text, struct sockaddr_storage *ret, socklen_t *ret_len, bool *ret_loopback)
{
        char host[64];
        const char *colon, *port;
        struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM};
        struct addrinfo *ai = NULL;
        size_t hl;
        char *end;
        long p;

        if (text[0] == '[') {
                const char *close = strchr(text, ']');
                if (!close || close[1] != ':')
                        return -EINVAL;
                hl = (size_t)(close - text - 1);
                if (hl == 0 || hl >= sizeof(host))
                        return -EINVAL;
                memcpy(host, text + 1, hl);
                port = close + 2;
        } else {
                colon = strrchr(text, ':');
                if (!colon || colon == text || (size_t)(colon - text) >= sizeof(host))
                        return -EINVAL;
                hl = (size_t)(colon - text);
                memcpy(host, text, hl);
                port = colon + 1;
        }
        host[hl] = '\0';
        errno = 0;
        p = strtol(port, &end, 10);
        if (!*port || *end || errno || p < 0 || p > 65535)
                return -EINVAL;
        if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
                return -EINVAL;
        memcpy(ret, ai->ai_addr, ai->ai_addrlen);
        *ret_len = ai->ai_addrlen;
        freeaddrinfo(ai);
        if (ret->ss_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)ret;
                *ret_loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
        } else {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ret;
                *ret_loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
        }
        return 0;
}

static int read_pem(const char *key, const char *path, char **ret, struct sbx_error *err)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        struct stat st;
        char *buf;
        size_t got = 0;

        if (fd < 0)
                return sbx_error_set(err, -errno, 0, "%s: cannot open %s: %m", key, path);
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size > PEM_MAX)
                return sbx_error_set(err, -EINVAL, 0, "%s: %s is not a PEM file of at most 1 MiB", key, path);
        buf = malloc((size_t)st.st_size + 1);
        if (!buf)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        while (got < (size_t)st.st_size) {
                ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
                if (n <= 0) {
                        free(buf);
                        return sbx_error_set(err, n < 0 ? -errno : -EIO, 0, "%s: cannot read %s", key, path);
                }
                got += (size_t)n;
        }
        buf[got] = '\0';
        *ret = buf;
        return 0;
}

void http_trace_pick(struct MHD_Connection *conn, const cJSON *params, char ret[REQCTX_ID_MAX + 1])
{
        const char *tp = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "traceparent");
        const char *rid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-Id");
        char trace[33];

        if (!reqctx_traceparent_parse(tp, trace) && !reqctx_request_id_valid(rid)) {
                const cJSON *p =
                        cJSON_IsObject(params) ? cJSON_GetObjectItemCaseSensitive(params, "traceparent") : NULL;
                const cJSON *q = cJSON_IsObject(params) ? cJSON_GetObjectItemCaseSensitive(params, "request_id") : NULL;
                tp = cJSON_IsString(p) ? p->valuestring : NULL;
                rid = cJSON_IsString(q) ? q->valuestring : NULL;
        }
        reqctx_pick(tp, rid, ret);
}

void http_trace_headers(struct MHD_Response *resp, const char *trace_id)
{
        char tp[REQCTX_TRACEPARENT_LEN + 1];

        if (!trace_id || !*trace_id)
                return;
        if (reqctx_traceparent(trace_id, tp) == 0)
                MHD_add_response_header(resp, "traceparent", tp);
        MHD_add_response_header(resp, "X-Request-Id", trace_id);
}

/* http_queue_text, naming the request's trace (NULL: none). */
static enum MHD_Result queue_text_traced(struct MHD_Connection *conn, int status, const char *type, char *text,
                                         bool close, const char *trace_id)
{
        struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
        enum MHD_Result r;

        if (!resp) {
                free(text);
                return MHD_NO;
        }
        http_trace_headers(resp, trace_id);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        if (status == 401)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
        if (close)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
        r = MHD_queue_response(conn, (unsigned)status, resp);
        MHD_destroy_response(resp);
        metrics_http_status(status);
        return r;
}

enum MHD_Result http_queue_text(struct MHD_Connection *conn, int status, const char *type, char *text, bool close)
{
        return queue_text_traced(conn, status, type, text, close, NULL);
}

static enum MHD_Result queue_json_traced(struct MHD_Connection *conn, int status, cJSON *obj, bool close,
                                         const char *trace_id)
{
        char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
        cJSON_Delete(obj);
        if (!text)
                return MHD_NO;
        return queue_text_traced(conn, status, "application/json", text, close, trace_id);
}

static enum MHD_Result queue_json(struct MHD_Connection *conn, int status, cJSON *obj, bool close)
{
        return queue_json_traced(conn, status, obj, close, NULL);
}

cJSON *http_error_object(const char *code, const char *msg, int status)
{
        cJSON *o = cJSON_CreateObject(), *e;
        _cleanup_free_ char *clean = utf8_sanitize(msg, strlen(msg));

        if (!o)
                return NULL;
        e = status ? o : cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "code", code);
        cJSON_AddStringToObject(e, "message", clean ? clean : "");
        if (status)
                cJSON_AddNumberToObject(e, "status", status);
        return o;
}

enum MHD_Result http_queue_error(struct MHD_Connection *conn, int status, const char *code, const char *msg, bool close)
{
        return queue_json(conn, status, http_error_object(code, msg, 0), close);
}

/* The client closed its end (FIN or reset); only on the connection's thread. */
bool http_fd_gone(int fd)
{
        struct pollfd p = {.fd = fd, .events = POLLRDHUP};
        return fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

bool http_stopping(struct http_server *srv)
{
        return __atomic_load_n(&srv->stopping, __ATOMIC_RELAXED);
}

/* ---- synchronous requests: api_call on the connection's thread ---- */

static void drop_progress(struct api_conn *c, cJSON *msg)
{
}

static bool sync_gone(struct api_conn *c)
{
        struct http_conn *hc = c->transport;
        return http_stopping(hc->srv) || http_fd_gone(hc->fd);
}

/* ---- requests ---- */

static bool client_cert_ok(struct MHD_Connection *conn)
{
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
        gnutls_session_t tls;
        unsigned status = 0;

        if (!ci || !ci->tls_session)
                return false;
        tls = (gnutls_session_t)ci->tls_session;
        if (gnutls_certificate_type_get(tls) != GNUTLS_CRT_X509)
                return false;
        return gnutls_certificate_verify_peers2(tls, &status) == 0 && status == 0;
}

static bool method_name_ok(const char *m)
{
        size_t n = strlen(m);
        if (n == 0 || n >= 64)
                return false;
        for (; *m; m++)
                if (!((*m >= 'a' && *m <= 'z') || *m == '_' || (*m >= '0' && *m <= '9')))
                        return false;
        return true;
}

/* First call of a request: everything that can be decided from the headers. */
static void request_begin(struct http_server *srv, struct MHD_Connection *conn, struct http_conn *hc,
                          struct http_req *rq, const char *url, const char *verb)
{
        const char *auth, *len, *accept;
        struct fronterr e = {0};

#define FAIL(st, c, ...)                                                                                               \
        do {                                                                                                           \
                rq->status = (st);                                                                                     \
                rq->code = (c);                                                                                        \
                snprintf(rq->msg, sizeof(rq->msg), __VA_ARGS__);                                                       \
                return;                                                                                                \
        } while (0)

        if (srv->ca && !client_cert_ok(conn))
                FAIL(403, "forbidden", "a client certificate signed by the configured CA is required");
        if (strcmp(url, "/healthz") == 0) {
                rq->status = 200;
                return;
        }
        if (http_console_claims(url)) { /* static files, no token (http_console.c) */
                rq->console = true;
                return;
        }
        if (e2b_claims(srv->d, conn, url)) { /* E2B's paths and headers: its own auth and caps (e2b.h) */
                struct api_conn c = hc->api;
                c.send = drop_progress;
                c.gone = sync_gone;
                c.transport = hc;
                if (e2b_begin(srv->d, &c, conn, url, verb, &rq->e2b) < 0)
                        FAIL(503, "unavailable", "out of memory");
                hc->api.auth_failures = e2b_auth_failures(rq->e2b);
                if (e2b_authenticated(rq->e2b))
                        __atomic_store_n(&hc->authed, true, __ATOMIC_RELAXED);
                return;
        }
        if (strcmp(url, "/v1/terminal") == 0) { /* a WebSocket: its token comes in its first message */
                int st = http_terminal_check(srv, conn, verb, &rq->code, rq->msg, sizeof(rq->msg));
                rq->terminal = st == 0;
                rq->status = st;
                return;
        }
        rq->mcp = strcmp(url, "/mcp") == 0;
        rq->events = strcmp(url, "/v1/events") == 0 && strcmp(verb, MHD_HTTP_METHOD_GET) == 0; /* http_events.c */
        if (!rq->mcp && strncmp(url, "/v1/", 4) != 0)
                FAIL(404, "not_found", "no such path; the API is POST /v1/<method>, MCP is /mcp");
        if (rq->mcp ? strcmp(verb, MHD_HTTP_METHOD_POST) != 0 && strcmp(verb, MHD_HTTP_METHOD_GET) != 0 &&
                              strcmp(verb, MHD_HTTP_METHOD_DELETE) != 0
                    : strcmp(verb, MHD_HTTP_METHOD_POST) != 0 && !rq->events)
                FAIL(405, "bad_request", rq->mcp ? "use POST, GET or DELETE" : "use POST");

        auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (auth && strncasecmp(auth, "Bearer ", 7) == 0)
                auth += 7;
        else
                auth = NULL;
        if (api_authenticate(&hc->api, auth, strcmp(url, "/mcp") == 0 ? "mcp" : url + 4, &rq->tok, &e) < 0)
                FAIL(http_status_for_code(e.code), e.code, "%s", e.msg);
        __atomic_store_n(&hc->authed, true, __ATOMIC_RELAXED); /* out of the unauthenticated budget */

        if (rq->mcp)
                snprintf(rq->method, sizeof(rq->method), "mcp");
        else if (!method_name_ok(url + 4) || !api_method_exists(url + 4))
                FAIL(404, "not_found", "unknown method");
        else
                snprintf(rq->method, sizeof(rq->method), "%s", url + 4);
        len = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (len && strtoull(len, NULL, 10) > API_MAX_LINE)
                FAIL(413, "too_large", "the body is larger than %d bytes", API_MAX_LINE);
        accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
        rq->sse = accept && strstr(accept, "text/event-stream") &&
                  (rq->mcp || strcmp(rq->method, "exec") == 0 || strcmp(rq->method, "run_code") == 0);
#undef FAIL
}

static enum MHD_Result request_run(struct http_server *srv, struct MHD_Connection *conn, struct http_conn *hc,
                                   struct http_req *rq)
{
        cJSON *params, *result = NULL;
        struct fronterr e = {0};
        struct api_conn c;
        enum reqguard_verdict verdict;
        int r;

        if (rq->too_large)
                return http_queue_error(conn, 413, "too_large", "the body is larger than API_MAX_LINE", true);
        /* bounded before parsing, and strict strings, as on the API socket (reqguard.h) */
        verdict = reqguard_scan(rq->body, rq->len, REQGUARD_MAX_ELEMENTS, REQGUARD_MAX_DEPTH);
        if (verdict != REQGUARD_OK)
                return reqguard_verdict_is_invalid(verdict)
                               ? http_queue_error(conn, 400, "invalid", reqguard_verdict_message(verdict), false)
                               : http_queue_error(conn, 413, "too_large", reqguard_verdict_message(verdict), false);
        params = rq->len ? cJSON_ParseWithLength(rq->body, rq->len) : cJSON_CreateObject();
        if (!params || !cJSON_IsObject(params)) {
                cJSON_Delete(params);
                return http_queue_error(conn, 400, "bad_request",
                                        params ? "the body must be a JSON object (the params)" : "malformed JSON",
                                        false);
        }
        if (rq->sse)
                return http_sse_start(srv, conn, hc, rq, params);

        c = hc->api;
        c.send = drop_progress;
        c.gone = sync_gone;
        c.transport = hc;
        http_trace_pick(conn, params, c.trace_id);
        r = api_call(&c, &rq->tok, NULL, rq->method, params, &result, &e);
        cJSON_Delete(params);
        if (r == 1)
                return MHD_NO; /* the client left: close */
        if (r < 0) {
                cJSON *o = http_error_object(e.code, e.msg, 0);
                cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(o, "error"), "trace_id", c.trace_id);
                return queue_json_traced(conn, http_status_for_code(e.code), o, false, c.trace_id);
        }
        return queue_json_traced(conn, 200, result, false, c.trace_id);
}

/* The metrics front: GET only, no body, no token (loopback only). */
static enum MHD_Result metrics_request(struct http_server *srv, struct MHD_Connection *conn, const char *url,
                                       const char *verb, void **con_cls)
{
        char version[64];
        char *text = NULL;

        if (strcmp(verb, MHD_HTTP_METHOD_GET) != 0 && strcmp(verb, MHD_HTTP_METHOD_HEAD) != 0)
                return http_queue_text(conn, 405, "text/plain", strdup("use GET\n"), true);
        if (strcmp(url, "/metrics") == 0) {
                if (metrics_render(&srv->d->metrics_ctx, &text) < 0)
                        return http_queue_text(conn, 503, "text/plain", strdup("out of memory\n"), false);
                return http_queue_text(conn, 200, "text/plain; version=0.0.4; charset=utf-8", text, false);
        }
        if (strcmp(url, "/healthz") == 0) {
                if (daemon_engine_version(srv->d, version, sizeof(version), NULL) < 0)
                        return http_queue_text(conn, 503, "text/plain", strdup("docker unreachable\n"), false);
                return http_queue_text(conn, 200, "text/plain", strdup("ok\n"), false);
        }
        return http_queue_text(conn, 404, "text/plain", strdup("not found: /metrics or /healthz\n"), false);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *verb,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
        struct http_server *srv = cls;
        struct http_req *rq = *con_cls;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        struct http_conn *hc = ci ? ci->socket_context : NULL;

        if (!hc)
                return MHD_NO;
        if (srv->metrics)
                return metrics_request(srv, conn, url, verb, con_cls);
        if (!rq) {
                rq = calloc(1, sizeof(*rq));
                if (!rq)
                        return MHD_NO;
                *con_cls = rq;
                request_begin(srv, conn, hc, rq, url, verb);
                if (rq->console)
                        return http_console_request(conn, url, verb);
                if (rq->terminal)
                        return http_terminal_request(srv, conn, hc, &rq->term);
                if (rq->e2b && e2b_decided(rq->e2b))
                        return (enum MHD_Result)e2b_respond(rq->e2b, conn,
                                                            hc->api.auth_failures >= HTTP_MAX_AUTH_FAILURES);
                if (rq->status == 200)
                        return http_queue_text(conn, 200, "text/plain", strdup("ok\n"), false);
                if (rq->status) {
                        bool close = rq->status == 403 || hc->api.auth_failures >= HTTP_MAX_AUTH_FAILURES ||
                                     rq->status == 413;
                        return http_queue_error(conn, rq->status, rq->code, rq->msg, close);
                }
                return MHD_YES;
        }
        if (*upload_size && rq->e2b) {
                e2b_body(rq->e2b, upload, *upload_size);
                *upload_size = 0;
                if (e2b_decided(rq->e2b)) /* past its cap: answered now and closed, the rest never read */
                        return (enum MHD_Result)e2b_respond(rq->e2b, conn, true);
                return MHD_YES;
        }
        if (*upload_size) {
                if (!rq->too_large && rq->len + *upload_size <= API_MAX_LINE) {
                        char *nb = realloc(rq->body, rq->len + *upload_size);
                        if (nb) {
                                memcpy(nb + rq->len, upload, *upload_size);
                                rq->body = nb;
                                rq->len += *upload_size;
                        } else {
                                rq->too_large = true;
                        }
                } else {
                        rq->too_large = true; /* discard the rest: memory stays bounded */
                        free(rq->body);
                        rq->body = NULL;
                        rq->len = 0;
                }
                *upload_size = 0;
                return MHD_YES;
        }
        /* The idle limit guards the request's arrival; the answer may take as
         * long as the method does (on_completed restores the limit). */
        (void)MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
        rq->timeout_off = true;
        if (rq->e2b)
                return (enum MHD_Result)e2b_respond(rq->e2b, conn, false);
        if (rq->mcp)
                return http_mcp_request(srv, conn, hc, rq, verb);
        if (rq->events)
                return http_events_request(srv, conn, hc, rq);
        return request_run(srv, conn, hc, rq);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
        struct http_server *srv = cls;
        struct http_req *rq = *con_cls;

        if (!rq)
                return;
        if (rq->timeout_off)
                (void)MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
                                                (unsigned)srv->d->cfg.http_timeout_s);
        e2b_req_free(rq->e2b);
        http_terminal_done(rq->term);
        free(rq->body);
        free(rq);
        *con_cls = NULL;
}

/* ---- connection caps (on_accept) ---- */

void http_addr_of(const struct sockaddr *sa, struct http_addr *ret)
{
        memset(ret, 0, sizeof(*ret));
        if (sa->sa_family == AF_INET) {
                ret->family = 4;
                memcpy(ret->bytes, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        } else if (sa->sa_family == AF_INET6) {
                const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
                if (IN6_IS_ADDR_V4MAPPED(a)) { /* an IPv4 client of a dual-stack socket: the whole address */
                        ret->family = 4;
                        memcpy(ret->bytes, a->s6_addr + 12, 4);
                } else {
                        ret->family = 6;
                        memcpy(ret->bytes, a->s6_addr, 8); /* the /64 */
                }
        }
}

bool http_addr_eq(const struct http_addr *a, const struct http_addr *b)
{
        return a->family == b->family && memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

static int unauth_cmp(const void *pa, const void *pb)
{
        const struct http_conn *a = *(struct http_conn *const *)pa, *b = *(struct http_conn *const *)pb;
        int c = a->addr.family != b->addr.family ? (a->addr.family < b->addr.family ? -1 : 1)
                                                 : memcmp(a->addr.bytes, b->addr.bytes, sizeof(a->addr.bytes));
        if (c)
                return c;
        return a->opened_ms < b->opened_ms ? -1 : a->opened_ms > b->opened_ms;
}

/* With the unauthenticated budget spent: the oldest unauthenticated
 * connection of the address holding the most of them, if that address holds
 * more than `mine` (the newcomer's), else NULL. Under srv->lock. */
static struct http_conn *eviction_victim(struct http_server *srv, size_t n_unauth, size_t mine)
{
        _cleanup_free_ struct http_conn **v = calloc(n_unauth ? n_unauth : 1, sizeof(*v));
        struct http_conn *best = NULL;
        size_t n = 0, best_n = mine;

        if (!v)
                return NULL;
        for (struct http_conn *hc = srv->conns; hc && n < n_unauth; hc = hc->next)
                if (!hc->evicted && hc->fd >= 0 && !__atomic_load_n(&hc->authed, __ATOMIC_RELAXED))
                        v[n++] = hc;
        qsort(v, n, sizeof(*v), unauth_cmp);
        for (size_t i = 0, j; i < n; i = j) {
                for (j = i + 1; j < n && http_addr_eq(&v[i]->addr, &v[j]->addr);)
                        j++;
                /* v[i] is the group's oldest; among equal groups the older goes */
                if (j - i > best_n || (best && j - i == best_n && v[i]->opened_ms < best->opened_ms)) {
                        best = v[i];
                        best_n = j - i;
                }
        }
        return best;
}

#define REFUSAL_LOG_MS 10000

/* A flood of refused connections must not flood the log (listening thread only). */
static void log_ratelimited_refusal(struct http_server *srv, const char *host, const char *why)
{
        int64_t now = sbx_now_ms();

        srv->refusals++;
        if (srv->refusal_logged_at && now - srv->refusal_logged_at < REFUSAL_LOG_MS)
                return;
        log_warn("http: refusing connections: %s (%s; %" PRIu64 " refused since the last such line)", why, host,
                 srv->refusals);
        srv->refusal_logged_at = now;
        srv->refusals = 0;
}

/* MHD's accept policy, on the listening thread before the connection is set
 * up (so in order with on_connection's list). Every new connection starts
 * unauthenticated: the caps per address, then the unauthenticated budget
 * per address and in all (which may displace someone else's). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *sa, socklen_t len)
{
        struct http_server *srv = cls;
        struct http_conn *victim = NULL;
        struct http_addr me;
        size_t mine = 0, mine_unauth = 0, unauth = 0;
        const char *why = NULL;

        if (!sa || len < (socklen_t)sizeof(sa->sa_family))
                return MHD_NO;
        http_addr_of(sa, &me);
        pthread_mutex_lock(&srv->lock);
        for (struct http_conn *hc = srv->conns; hc; hc = hc->next) {
                bool same;
                if (hc->evicted)
                        continue;
                same = http_addr_eq(&hc->addr, &me);
                mine += same;
                if (!__atomic_load_n(&hc->authed, __ATOMIC_RELAXED)) {
                        unauth++;
                        mine_unauth += same;
                }
        }
        if (mine >= (size_t)srv->max_per_addr)
                why = "limits.sessions connections from this address open";
        else if (mine_unauth >= (size_t)srv->max_unauth_per_addr)
                why = "HTTP_MAX_UNAUTHENTICATED_PER_ADDRESS not authenticated yet";
        else if (unauth >= (size_t)srv->max_unauth) {
                victim = eviction_victim(srv, unauth, mine_unauth);
                if (!victim)
                        why = "HTTP_MAX_UNAUTHENTICATED not authenticated yet";
                else {
                        victim->evicted = true;
                        (void)shutdown(victim->fd, SHUT_RDWR);
                }
        }
        if (victim)
                log_debug("http: closing %s, not authenticated yet, to make room for a less busy address",
                          victim->peer);
        pthread_mutex_unlock(&srv->lock);
        if (why) {
                char host[INET6_ADDRSTRLEN] = "?";
                (void)getnameinfo(sa, len, host, sizeof(host), NULL, 0, NI_NUMERICHOST);
                log_ratelimited_refusal(srv, host, why);
                return MHD_NO;
        }
        return MHD_YES;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
        struct http_server *srv = cls;
        struct http_conn *hc = *socket_context;

        if (code == MHD_CONNECTION_NOTIFY_STARTED) {
                const union MHD_ConnectionInfo *fdi = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
                const union MHD_ConnectionInfo *ai = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
                char host[INET6_ADDRSTRLEN] = "?", port[8] = "?";

                hc = calloc(1, sizeof(*hc));
                if (!hc)
                        return; /* on_request refuses a connection without a context */
                hc->srv = srv;
                hc->fd = fdi ? fdi->connect_fd : -1;
                hc->opened_ms = sbx_now_ms();
                if (ai && ai->client_addr)
                        http_addr_of(ai->client_addr, &hc->addr);
                if (ai && ai->client_addr)
                        (void)getnameinfo(ai->client_addr,
                                          ai->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                                                 : sizeof(struct sockaddr_in),
                                          host, sizeof(host), port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
                snprintf(hc->peer, sizeof(hc->peer), "ip=%s port=%s", host, port);
                hc->api.d = srv->d;
                hc->api.fd = -1;
                hc->api.peer_addr = hc->peer;
                pthread_mutex_lock(&srv->lock);
                hc->next = srv->conns;
                srv->conns = hc;
                pthread_mutex_unlock(&srv->lock);
                *socket_context = hc;
                return;
        }
        if (!hc)
                return;
        /* MHD closes the socket after this returns: the reaper never sees a reused fd */
        pthread_mutex_lock(&srv->lock);
        for (struct http_conn **pp = &srv->conns; *pp; pp = &(*pp)->next)
                if (*pp == hc) {
                        *pp = hc->next;
                        break;
                }
        pthread_mutex_unlock(&srv->lock);
        free(hc);
        *socket_context = NULL;
}

/* Connections that have not authenticated within HTTP_IDLE_TIMEOUT_S of opening
 * are shut down, however slowly they keep sending (slowloris). */
static void *reaper_main(void *arg)
{
        struct http_server *srv = arg;
        int64_t preauth_ms = srv->auth_timeout_ms;

        pthread_mutex_lock(&srv->lock);
        while (!srv->stopping) {
                struct timespec until = sbx_deadline_after(CLOCK_REALTIME, preauth_ms < 2000 ? 250 : 1000);
                int64_t now = sbx_now_ms();

                for (struct http_conn *hc = srv->conns; hc; hc = hc->next)
                        if (!__atomic_load_n(&hc->authed, __ATOMIC_RELAXED) && !hc->evicted &&
                            now - hc->opened_ms > preauth_ms && hc->fd >= 0) {
                                log_info("http: closing %s: no authenticated request within %" PRId64 " ms", hc->peer,
                                         preauth_ms);
                                (void)shutdown(hc->fd, SHUT_RDWR);
                                hc->opened_ms = INT64_MAX / 2; /* once */
                        }
                (void)pthread_cond_timedwait(&srv->cond, &srv->lock, &until);
                pthread_mutex_unlock(&srv->lock);
                http_mcp_expire(srv);
                pthread_mutex_lock(&srv->lock);
        }
        pthread_mutex_unlock(&srv->lock);
        return NULL;
}

/* MHD's messages: at debug (most are a client's doing), and the last one
 * kept for the error when the daemon does not start. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
        struct http_server *srv = cls;
        char buf[512];

        vsnprintf(buf, sizeof(buf), fmt, ap);
        buf[strcspn(buf, "\n")] = '\0';
        log_debug("http: %s", buf);
        pthread_mutex_lock(&srv->lock);
        snprintf(srv->start_error, sizeof(srv->start_error), "%s", buf);
        pthread_mutex_unlock(&srv->lock);
}

static int server_start(struct daemon *d, const char *key, const char *listen, bool metrics, struct http_server **ret,
                        struct sbx_error *err)
{
        const struct sbx_config *cfg = &d->cfg;
        struct http_server *srv;
        struct sockaddr_storage addr;
        socklen_t alen;
        bool loopback, tls;
        struct MHD_OptionItem opts[16];
        size_t n = 0;
        /* poll(), not select(): no ceiling at FD_SETSIZE on the listening
         * socket or any connection (MHD takes poll or select with a thread
         * per connection, never epoll); upgrades for E2B's getHost(port)
         * WebSockets (e2b_proxy.c), which nothing else answers with */
        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                         MHD_USE_ERROR_LOG | MHD_ALLOW_UPGRADE;
        int max_conns = config_max_connections(cfg);
        const union MHD_DaemonInfo *info;
        int r;

        *ret = NULL;
        if (!listen[0])
                return 0;
        if (http_parse_listen(listen, &addr, &alen, &loopback) < 0)
                return sbx_error_set(err, -EINVAL, 0, "%s: '%s' is not a numeric host:port ([v6]:port for IPv6)", key,
                                     listen);
        tls = !metrics && cfg->tls_cert[0] != '\0';
        if (metrics && !loopback)
                return sbx_error_set(err, -EINVAL, 0, "%s %s is not loopback: metrics are served on loopback only", key,
                                     listen);
        if (!tls && !loopback)
                return sbx_error_set(err, -EINVAL, 0,
                                     "%s %s is not loopback: set http.tls_cert and http.tls_key (plain HTTP is "
                                     "allowed on loopback only)",
                                     key, listen);
        srv = calloc(1, sizeof(*srv));
        if (!srv)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        srv->d = d;
        srv->metrics = metrics;
        srv->max_per_addr = config_http_max_per_address(cfg);
        /* below the total, so people without a token never hold every slot */
        srv->max_unauth = cfg->http_max_unauthenticated < max_conns / 2 ? cfg->http_max_unauthenticated
                                                                        : (max_conns / 2 > 0 ? max_conns / 2 : 1);
        srv->max_unauth_per_addr = cfg->http_max_unauthenticated_per_address;
        srv->auth_timeout_ms = cfg->auth_timeout_ms;
        pthread_mutex_init(&srv->lock, NULL);
        pthread_mutex_init(&srv->mcp_lock, NULL);
        pthread_cond_init(&srv->cond, NULL);
        if (MHD_is_feature_supported(MHD_FEATURE_POLL) != MHD_YES) {
                r = sbx_error_set(err, -ENOTSUP, 0, "%s: this libmicrohttpd has no poll() support", key);
                goto fail;
        }
        if (tls) {
                r = read_pem("tls_cert", cfg->tls_cert, &srv->cert, err);
                if (r == 0)
                        r = read_pem("tls_key", cfg->tls_key, &srv->key, err);
                if (r == 0 && cfg->tls_client_ca[0])
                        r = read_pem("tls_client_ca", cfg->tls_client_ca, &srv->ca, err);
                if (r < 0)
                        goto fail;
                flags |= MHD_USE_TLS;
                opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, srv->cert};
                opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, srv->key};
                if (srv->ca)
                        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, srv->ca};
        }
        if (addr.ss_family == AF_INET6)
                flags |= MHD_USE_IPv6;
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, &addr};
        if (metrics) {
                opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, HTTP_METRICS_MAX_CONNS, NULL};
                opts[n++] =
                        (struct MHD_OptionItem){MHD_OPTION_PER_IP_CONNECTION_LIMIT, HTTP_METRICS_MAX_PER_PEER, NULL};
        } else {
                opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, (intptr_t)max_conns, NULL};
                /* per address (IPv6 by /64) and the unauthenticated budget: on_accept */
        }
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)cfg->http_timeout_s, NULL};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_MEMORY_LIMIT, HTTP_MAX_HEADERS, NULL};
        /* every session's agent may reconnect at once after a restart */
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024, NULL};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};

        srv->mhd = MHD_start_daemon(flags, 0, metrics ? NULL : on_accept, srv, on_request, srv, MHD_OPTION_ARRAY, opts,
                                    MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION,
                                    on_connection, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv, MHD_OPTION_END);
        if (!srv->mhd) {
                /* MHD says why (its logger kept the line): the address, the
                 * certificate or key, a thread, a descriptor */
                pthread_mutex_lock(&srv->lock);
                r = sbx_error_set(err, -EADDRNOTAVAIL, 0, "%s: cannot serve HTTP%s on %s: %s", key, tls ? "S" : "",
                                  listen, srv->start_error[0] ? srv->start_error : "libmicrohttpd gave no reason");
                pthread_mutex_unlock(&srv->lock);
                goto fail;
        }
        info = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
        srv->port = info ? info->port : 0;
        /* the metrics front has no authentication to wait for: its idle limit is enough */
        if (!metrics && pthread_create(&srv->reaper, NULL, reaper_main, srv) != 0) {
                r = sbx_error_set(err, -EAGAIN, 0, "cannot start the HTTP reaper thread");
                goto fail;
        }
        if (!metrics) {
                srv->reaper_started = true;
                pthread_setname_np(srv->reaper, "sbx-http-reap");
        }
        if (metrics)
                log_info("metrics listening on %s (port %d): /metrics, /healthz", listen, srv->port);
        else if (tls)
                log_info(
                        "HTTPS listening on %s (port %d)%s; at most %d connections, %d per address, %d of them "
                        "not authenticated yet (%d per address)",
                        listen, srv->port, srv->ca ? ", client certificates required" : "", max_conns,
                        srv->max_per_addr, srv->max_unauth, srv->max_unauth_per_addr);
        else
                log_warn("HTTP listening on %s (port %d) WITHOUT TLS: allowed because the address is loopback", listen,
                         srv->port);
        *ret = srv;
        return 0;
fail:
        http_server_stop(srv);
        return r;
}

int http_server_start(struct daemon *d, struct http_server **ret, struct sbx_error *err)
{
        return server_start(d, "http_listen", d->cfg.http_listen, false, ret, err);
}

int http_metrics_start(struct daemon *d, struct http_server **ret, struct sbx_error *err)
{
        return server_start(d, "metrics_listen", d->cfg.metrics_listen, true, ret, err);
}

int http_server_port(const struct http_server *s)
{
        return s ? s->port : 0;
}

void http_server_stop(struct http_server *srv)
{
        if (!srv)
                return;
        pthread_mutex_lock(&srv->lock);
        __atomic_store_n(&srv->stopping, true, __ATOMIC_RELAXED);
        pthread_cond_broadcast(&srv->cond);
        pthread_mutex_unlock(&srv->lock);
        if (srv->reaper_started)
                pthread_join(srv->reaper, NULL);
        /* every wait in a handler polls srv->stopping: the connection threads end;
         * an upgraded one's waits for its relay, ended here (the API front's) */
        if (srv->mhd && !srv->metrics) {
                e2b_proxy_stop();
                http_terminal_stop();
        }
        if (srv->mhd)
                MHD_stop_daemon(srv->mhd);
        pthread_mutex_lock(&srv->lock);
        while (srv->sse_workers > 0)
                pthread_cond_wait(&srv->cond, &srv->lock);
        pthread_mutex_unlock(&srv->lock);
        http_mcp_stop(srv);
        pthread_mutex_destroy(&srv->lock);
        pthread_mutex_destroy(&srv->mcp_lock);
        pthread_cond_destroy(&srv->cond);
        free(srv->cert);
        if (srv->key) {
                explicit_bzero(srv->key, strlen(srv->key));
                free(srv->key);
        }
        free(srv->ca);
        free(srv);
}
