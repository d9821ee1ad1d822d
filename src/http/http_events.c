/* http_events.c — GET /v1/events (part of http.c's front door): the
 * caller's lifecycle events (include/sandboxd/events.h) as Server-Sent
 * Events. Each event goes out as
 *   id: <id>\nevent: <type>\ndata: <the event object>\n\n
 * The stream starts after the Last-Event-ID header (or ?since=<id>; 0 is
 * the whole log), or from now on without either. A resume point older than
 * the log starts with a `gap` event; a reader slower than EVENTS_SUB_QUEUE
 * events gets a final `overflow` event and the stream ends: it reconnects
 * with Last-Event-ID and misses nothing the log still holds.
 *
 * Threads: one worker per stream ("sbx-http-evt", counted in
 * srv->sse_workers like http_sse.c's) reads the subscription and pushes into
 * the stream's bounded queue, pausing while more than HTTP_EVENTS_HIGH bytes
 * wait for a slow client (the subscription's ring then overflows: memory
 * stays bounded). It ends when the client leaves or the server stops. */
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http_internal.h"
#include "sandboxd/events.h"
#include "sandboxd/log.h"
#include "sandboxd/metrics.h"

#define HTTP_EVENTS_HIGH (256 * 1024) /* bytes queued for the client before the worker waits */
#define HTTP_EVENTS_WAIT_MS 500

struct evstream {
        struct http_server *srv;
        struct sse *sse;
        struct events_sub *sub;
};

static void *events_worker(void *arg)
{
        struct evstream *es = arg;
        struct http_server *srv = es->srv;
        struct sse *s = es->sse;

        while (!http_sse_closed(s) && !http_stopping(srv)) {
                struct event *ev = NULL;
                int r;

                if (http_sse_pending(s) > HTTP_EVENTS_HIGH) {
                        usleep(50 * 1000); /* the client drains; the ring fills meanwhile, bounded */
                        continue;
                }
                r = events_sub_next(es->sub, HTTP_EVENTS_WAIT_MS, &ev);
                if (r == 0)
                        continue;
                if (r == 1) {
                        _cleanup_free_ char *json = event_to_json(ev);
                        if (json)
                                http_sse_push_event(s, ev->id, ev->type, json, false);
                        event_unref(ev);
                        continue;
                }
                if (r == -EPIPE) {
                        char data[96];
                        snprintf(data, sizeof(data),
                                 "{\"last_event_id\":%lld,\"message\":\"too slow: reconnect with Last-Event-ID\"}",
                                 (long long)events_sub_last_id(es->sub));
                        http_sse_push_event(s, events_sub_last_id(es->sub), EVENT_OVERFLOW, data, true);
                } else if (r != -ESHUTDOWN) {
                        cJSON *o = http_error_object("unavailable", "cannot read the event log now; reconnect", 503);
                        _cleanup_free_ char *json = o ? cJSON_PrintUnformatted(o) : NULL;
                        cJSON_Delete(o);
                        http_sse_push_text(s, "error", json ? json : "{}", true);
                }
                break;
        }
        http_sse_end(s);
        events_sub_close(es->sub);
        http_sse_unref(s);
        free(es);
        pthread_mutex_lock(&srv->lock);
        srv->sse_workers--;
        pthread_cond_broadcast(&srv->cond);
        pthread_mutex_unlock(&srv->lock);
        return NULL;
}

/* A decimal id >= 0: 0 and the value, or -EINVAL. */
static int parse_id(const char *text, int64_t *ret)
{
        char *end;
        long long v;

        if (!text || !*text || strlen(text) > 19)
                return -EINVAL;
        errno = 0;
        v = strtoll(text, &end, 10);
        if (errno || *end || v < 0 || text[0] == '-' || text[0] == '+' || text[0] == ' ')
                return -EINVAL;
        *ret = v;
        return 0;
}

enum MHD_Result http_events_request(struct http_server *srv, struct MHD_Connection *conn, struct http_conn *hc,
                                    struct http_req *rq)
{
        const char *last = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Last-Event-ID");
        const char *since = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "since");
        struct evstream *es;
        struct MHD_Response *resp;
        pthread_attr_t attr;
        pthread_t t;
        int64_t after = -1;
        enum MHD_Result ret;
        int r;

        if (rq->len > 0)
                return http_queue_error(conn, 400, "bad_request", "GET /v1/events takes no body", false);
        if ((last && *last && parse_id(last, &after) < 0) || (!(last && *last) && since && parse_id(since, &after) < 0))
                return http_queue_error(conn, 400, "invalid",
                                        "Last-Event-ID and since must be an event id (a decimal number >= 0)", false);
        es = calloc(1, sizeof(*es));
        if (!es)
                return http_queue_error(conn, 503, "unavailable", "out of memory", false);
        es->srv = srv;
        r = events_subscribe(rq->tok.role == TOKEN_ROLE_OPERATOR ? NULL : rq->tok.user, after,
                             &es->sub); /* NULL: all */
        if (r < 0) {
                free(es);
                if (r == -EUSERS) {
                        char msg[128];
                        snprintf(msg, sizeof(msg), "too many event streams (at most %d per user, %d in all)",
                                 EVENTS_SUBS_PER_USER, EVENTS_SUBS_MAX);
                        return http_queue_error(conn, 429, "busy", msg, false);
                }
                return http_queue_error(conn, 503, "unavailable", "the event log is not available", false);
        }
        es->sse = http_sse_new(srv, hc->fd);
        resp = es->sse ? http_sse_response(es->sse) : NULL;
        if (!resp) {
                if (es->sse)
                        http_sse_unref(es->sse);
                events_sub_close(es->sub);
                free(es);
                return http_queue_error(conn, 503, "unavailable", "out of memory", false);
        }
        pthread_mutex_lock(&srv->lock);
        srv->sse_workers++;
        pthread_mutex_unlock(&srv->lock);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, events_worker, es) != 0) {
                pthread_attr_destroy(&attr);
                pthread_mutex_lock(&srv->lock);
                srv->sse_workers--;
                pthread_mutex_unlock(&srv->lock);
                MHD_destroy_response(resp); /* drops the response's ref */
                http_sse_unref(es->sse);    /* and the worker's */
                events_sub_close(es->sub);
                free(es);
                return http_queue_error(conn, 503, "unavailable", "cannot start a stream now", false);
        }
        pthread_attr_destroy(&attr);
        pthread_setname_np(t, "sbx-http-evt");
        ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        metrics_http_status(200);
        return ret;
}
