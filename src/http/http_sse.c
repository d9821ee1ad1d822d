/* http_sse.c — the HTTP front's Server-Sent Events streams (part of
 * http.c's front door): a streamed request runs api_call on a worker thread
 * ("sbx-http-sse") whose progress events go through a bounded queue that
 * the connection's MHD thread drains into the response; /mcp streams use the
 * same queue (http_mcp.c).
 *
 * Locks: sse->lock guards the queue and the flags; a struct sse is freed by
 * the last of the worker and the response (refs). srv->lock guards the
 * count of live workers (http_server_stop waits on srv->cond for 0). */
#include "sandboxd/http.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandboxd/api_transport.h"
#include "http_internal.h"
#include "sandboxd/log.h"
#include "sandboxd/metrics.h"

#define SSE_MAX_QUEUE (1 << 20) /* output events queued for one stream; past it they are dropped */

struct sse {
        struct http_server *srv;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        int refs;  /* lock */
        char *buf; /* lock: SSE text not yet handed to MHD */
        size_t len, off;
        bool done;   /* lock: the final event is queued */
        bool closed; /* lock: the response is gone (client left or server stops) */
        uint64_t dropped;
        int fd; /* the connection's socket: polled only on its own thread */
        int64_t quiet_since;
        struct api_conn c;
        char peer[64]; /* c.peer_addr: the connection's own copy may go before the worker */
        struct token_info tok;
        char method[64];
        cJSON *params;
};

void http_sse_unref(struct sse *s)
{
        int left;

        pthread_mutex_lock(&s->lock);
        left = --s->refs;
        pthread_mutex_unlock(&s->lock);
        if (left > 0)
                return;
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        cJSON_Delete(s->params);
        free(s->buf);
        free(s);
}

void http_sse_push_text(struct sse *s, const char *event, const char *json, bool final)
{
        http_sse_push_event(s, -1, event, json, final);
}

void http_sse_push_event(struct sse *s, int64_t id, const char *event, const char *json, bool final)
{
        char idline[40] = "";
        size_t need;
        char *nb;

        if (id >= 0)
                snprintf(idline, sizeof(idline), "id: %lld\n", (long long)id);
        need = strlen(idline) + strlen("event: ") + strlen(event) + strlen("\ndata: ") + strlen(json) + 2;

        pthread_mutex_lock(&s->lock);
        if (s->closed || s->done || (!final && s->len - s->off + need > SSE_MAX_QUEUE)) {
                s->dropped++;
                goto out;
        }
        if (s->off > 0 && s->off == s->len)
                s->off = s->len = 0;
        nb = realloc(s->buf, s->len + need + 1);
        if (!nb)
                goto out;
        s->buf = nb;
        s->len += (size_t)snprintf(nb + s->len, need + 1, "%sevent: %s\ndata: %s\n\n", idline, event, json);
        pthread_cond_signal(&s->cond);
out:
        if (final) {
                s->done = true;
                pthread_cond_signal(&s->cond);
        }
        pthread_mutex_unlock(&s->lock);
}

static void sse_push(struct sse *s, const char *event, cJSON *data, bool final)
{
        _cleanup_free_ char *json = cJSON_PrintUnformatted(data);

        if (json)
                http_sse_push_text(s, event, json, final);
        else if (final)
                http_sse_push_text(s, event, "{}", final);
}

/* api.c's progress message {"id", "event": "output", "stream", "data"}. */
static void sse_send(struct api_conn *c, cJSON *msg)
{
        struct sse *s = c->transport;
        cJSON *o = cJSON_CreateObject();

        if (!o)
                return;
        cJSON_AddItemReferenceToObject(o, "stream", cJSON_GetObjectItemCaseSensitive(msg, "stream"));
        cJSON_AddItemReferenceToObject(o, "data", cJSON_GetObjectItemCaseSensitive(msg, "data"));
        sse_push(s, "output", o, false);
        cJSON_Delete(o);
}

static bool sse_gone(struct api_conn *c)
{
        struct sse *s = c->transport;
        bool closed;

        pthread_mutex_lock(&s->lock);
        closed = s->closed;
        pthread_mutex_unlock(&s->lock);
        return closed || http_stopping(s->srv);
}

static void *sse_worker(void *arg)
{
        struct sse *s = arg;
        struct http_server *srv = s->srv;
        struct fronterr e = {0};
        cJSON *result = NULL;
        int r;

        r = api_call(&s->c, &s->tok, NULL, s->method, s->params, &result, &e);
        if (r == 0) {
                sse_push(s, "result", result, true);
                cJSON_Delete(result);
        } else {
                cJSON *o = http_error_object(r < 0 ? e.code : "unavailable", r < 0 ? e.msg : "request abandoned",
                                             http_status_for_code(r < 0 ? e.code : "unavailable"));
                cJSON_AddStringToObject(o, "trace_id", s->c.trace_id);
                sse_push(s, "error", o, true);
                cJSON_Delete(o);
        }
        http_sse_unref(s);
        pthread_mutex_lock(&srv->lock);
        srv->sse_workers--;
        pthread_cond_broadcast(&srv->cond);
        pthread_mutex_unlock(&srv->lock);
        return NULL;
}

/* MHD pulls the stream on the connection's thread: block until there is
 * something, the worker is done, or the client left. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
        struct sse *s = cls;
        ssize_t n = 0;

        pthread_mutex_lock(&s->lock);
        for (;;) {
                if (s->off < s->len) {
                        size_t k = s->len - s->off < max ? s->len - s->off : max;
                        memcpy(buf, s->buf + s->off, k);
                        s->off += k;
                        s->quiet_since = sbx_now_ms();
                        n = (ssize_t)k;
                        break;
                }
                if (s->done) {
                        n = MHD_CONTENT_READER_END_OF_STREAM;
                        break;
                }
                if (http_stopping(s->srv) || http_fd_gone(s->fd)) {
                        n = MHD_CONTENT_READER_END_WITH_ERROR;
                        break;
                }
                if (sbx_now_ms() - s->quiet_since >= HTTP_SSE_KEEPALIVE_MS) {
                        static const char ka[] = ": keep-alive\n\n";
                        size_t k = sizeof(ka) - 1 < max ? sizeof(ka) - 1 : max;
                        memcpy(buf, ka, k);
                        s->quiet_since = sbx_now_ms();
                        n = (ssize_t)k;
                        break;
                }
                struct timespec until = sbx_deadline_after(CLOCK_REALTIME, 500);
                (void)pthread_cond_timedwait(&s->cond, &s->lock, &until);
        }
        pthread_mutex_unlock(&s->lock);
        return n;
}

static void sse_response_free(void *cls)
{
        struct sse *s = cls;

        pthread_mutex_lock(&s->lock);
        s->closed = true;
        pthread_mutex_unlock(&s->lock);
        http_sse_unref(s);
}

struct sse *http_sse_new(struct http_server *srv, int fd)
{
        struct sse *s = calloc(1, sizeof(*s));

        if (!s)
                return NULL;
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->cond, NULL);
        s->srv = srv;
        s->refs = 1;
        s->fd = fd;
        s->quiet_since = sbx_now_ms();
        return s;
}

struct MHD_Response *http_sse_response(struct sse *s)
{
        struct MHD_Response *resp;

        pthread_mutex_lock(&s->lock);
        s->refs++;
        pthread_mutex_unlock(&s->lock);
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, s, sse_response_free);
        if (!resp) {
                http_sse_unref(s);
                return NULL;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        return resp;
}

void http_sse_end(struct sse *s)
{
        pthread_mutex_lock(&s->lock);
        s->done = true;
        pthread_cond_signal(&s->cond);
        pthread_mutex_unlock(&s->lock);
}

size_t http_sse_pending(struct sse *s)
{
        size_t n;

        pthread_mutex_lock(&s->lock);
        n = s->len - s->off;
        pthread_mutex_unlock(&s->lock);
        return n;
}

bool http_sse_closed(struct sse *s)
{
        bool closed;

        pthread_mutex_lock(&s->lock);
        closed = s->closed;
        pthread_mutex_unlock(&s->lock);
        return closed;
}

enum MHD_Result http_sse_start(struct http_server *srv, struct MHD_Connection *conn, struct http_conn *hc,
                               struct http_req *rq, cJSON *params)
{
        struct sse *s = http_sse_new(srv, hc->fd);
        struct MHD_Response *resp;
        pthread_attr_t attr;
        pthread_t t;
        enum MHD_Result ret;

        if (!s) {
                cJSON_Delete(params);
                return http_queue_error(conn, 503, "unavailable", "out of memory", false);
        }
        s->c = hc->api; /* the worker's reference is http_sse_new's; the response takes its own */
        s->c.send = sse_send;
        s->c.gone = sse_gone;
        s->c.transport = s;
        snprintf(s->peer, sizeof(s->peer), "%s", hc->peer);
        s->c.peer_addr = s->peer;
        s->tok = rq->tok;
        snprintf(s->method, sizeof(s->method), "%s", rq->method);
        /* the client asked for a stream: the method streams its progress */
        cJSON_DeleteItemFromObjectCaseSensitive(params, "stream");
        cJSON_AddTrueToObject(params, "stream");
        s->params = params;
        http_trace_pick(conn, params, s->c.trace_id); /* named in the headers, before the worker runs */

        resp = http_sse_response(s);
        if (!resp) {
                http_sse_unref(s);
                return http_queue_error(conn, 503, "unavailable", "out of memory", false);
        }
        http_trace_headers(resp, s->c.trace_id);

        pthread_mutex_lock(&srv->lock);
        srv->sse_workers++;
        pthread_mutex_unlock(&srv->lock);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, sse_worker, s) != 0) {
                pthread_attr_destroy(&attr);
                pthread_mutex_lock(&srv->lock);
                srv->sse_workers--;
                pthread_mutex_unlock(&srv->lock);
                MHD_destroy_response(resp); /* drops the response's ref */
                http_sse_unref(s);          /* and the worker's */
                return http_queue_error(conn, 503, "unavailable", "cannot start a stream now", false);
        }
        pthread_attr_destroy(&attr);
        pthread_setname_np(t, "sbx-http-sse");
        ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        metrics_http_status(200);
        return ret;
}
