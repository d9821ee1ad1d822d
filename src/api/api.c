/* api.c — the API socket front (protocol in include/sandboxd/api.h): accept,
 * read capped lines, parse with cJSON, authenticate the token, dispatch to
 * the methods (api_methods.c), write the replies and stream progress. No
 * logic of its own beyond that.
 *
 * Threads: "sbx-api" accepts (listener.c); each connection gets one worker
 * ("sbx-api-conn", at most connections.max in all, connections.max_per_uid
 * per peer uid, API_MAX_UNAUTHENTICATED_PER_UID of them before a token) that
 * answers its requests in order.
 *   c->wlock     serialises writes to one connection, and c->broken
 *   sinks_lock   guards the registry of streaming sinks and every sink's
 *                queue (sink->cond pairs with it)
 * An execution's output callback runs on the engine's worker thread; it only
 * appends to a bounded queue under sinks_lock (found by a numeric handle, so
 * a callback after the request is gone finds nothing and drops the bytes);
 * the connection's worker drains the queue and does the (blocking) writes.
 * A client that goes away mid-call never cancels anything: its executions
 * run on and stay readable by id. */
#include "sandboxd/api.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api_internal.h"
#include "listener.h"
#include "sandboxd/audit.h"
#include "sandboxd/events.h"
#include "sandboxd/daemon.h"
#include "sandboxd/exec.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/log.h"
#include "sandboxd/metrics.h"
#include "sandboxd/reqguard.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
#include "sandboxd/utf8.h"

#define API_MAX_AUTH_FAILURES 5  /* then the connection is closed */
#define SINK_MAX_BYTES (1 << 20) /* progress queued for one request; past it chunks are dropped */

/* ---- writing ---- */

static bool conn_broken(struct api_conn *c)
{
        pthread_mutex_lock(&c->wlock);
        bool b = c->broken;
        pthread_mutex_unlock(&c->wlock);
        return b;
}

/* Serialise obj as one line and send it; a failed write marks the
 * connection broken and later writes are skipped. */
static void conn_send(struct api_conn *c, cJSON *obj)
{
        char *text;
        size_t n;

        if (c->send) {
                c->send(c, obj);
                return;
        }
        text = cJSON_PrintUnformatted(obj);
        if (!text)
                return;
        n = strlen(text);
        text[n] = '\n'; /* overwrites the NUL: send the newline in the same write */
        pthread_mutex_lock(&c->wlock);
        if (!c->broken && listener_send_all(c->fd, text, n + 1) < 0)
                c->broken = true;
        pthread_mutex_unlock(&c->wlock);
        free(text);
}

static cJSON *reply_new(const cJSON *id)
{
        cJSON *o = cJSON_CreateObject();
        if (o)
                cJSON_AddItemToObject(o, "id", id ? cJSON_Duplicate(id, true) : cJSON_CreateNull());
        return o;
}

void api_send_event(struct api_req *q, const char *event, const cJSON *fields)
{
        cJSON *o = reply_new(q->id);
        const cJSON *it;

        if (!o)
                return;
        cJSON_AddStringToObject(o, "event", event);
        cJSON_ArrayForEach(it, fields)
                cJSON_AddItemToObject(o, it->string, cJSON_Duplicate(it, true));
        conn_send(q->c, o);
        cJSON_Delete(o);
}

/* trace_id: the request's (reqctx.h), or NULL before one was picked. */
static void send_error_traced(struct api_conn *c, const cJSON *id, const char *code, const char *msg,
                              const char *trace_id)
{
        cJSON *o = reply_new(id), *e;
        _cleanup_free_ char *clean = utf8_sanitize(msg, strlen(msg));

        if (!o)
                return;
        cJSON_AddFalseToObject(o, "ok");
        e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "code", code);
        cJSON_AddStringToObject(e, "message", clean ? clean : "");
        if (trace_id && *trace_id)
                cJSON_AddStringToObject(e, "trace_id", trace_id);
        conn_send(c, o);
        cJSON_Delete(o);
}

static void send_error(struct api_conn *c, const cJSON *id, const char *code, const char *msg)
{
        send_error_traced(c, id, code, msg, NULL);
}

static void send_result(struct api_conn *c, const cJSON *id, cJSON *result)
{
        cJSON *o = reply_new(id);
        if (!o) {
                cJSON_Delete(result);
                return;
        }
        cJSON_AddTrueToObject(o, "ok");
        cJSON_AddItemToObject(o, "result", result);
        conn_send(c, o);
        cJSON_Delete(o);
}

/* ---- formatting shared with the methods ---- */

void api_add_bytes(cJSON *o, const char *key, const void *buf, size_t len, bool base64)
{
        _cleanup_free_ char *s = base64 ? base64_encode(buf, len) : utf8_sanitize(buf, len);
        cJSON_AddStringToObject(o, key, s ? s : "");
}

/* ---- streaming sinks ---- */

struct api_sink {
        uint64_t handle;
        struct api_sink *next;
        pthread_cond_t cond;
        char *buf; /* records: stream (1 byte), length (4 bytes), data */
        size_t len;
        uint64_t dropped;
        /* owned by the connection worker alone: an incomplete UTF-8
         * sequence held back from the previous chunk of each stream */
        unsigned char carry[2][4];
        size_t carry_len[2];
};

static pthread_mutex_t sinks_lock = PTHREAD_MUTEX_INITIALIZER;
static struct api_sink *sinks;
static uint64_t sinks_next_handle = 1;

struct api_sink *api_sink_new(void)
{
        struct api_sink *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        pthread_cond_init(&s->cond, NULL);
        pthread_mutex_lock(&sinks_lock);
        s->handle = sinks_next_handle++;
        s->next = sinks;
        sinks = s;
        pthread_mutex_unlock(&sinks_lock);
        return s;
}

uint64_t api_sink_handle(const struct api_sink *s)
{
        return s->handle;
}

/* Unregister and free: a later callback for this handle finds nothing. */
void api_sink_free(struct api_sink *s)
{
        if (!s)
                return;
        pthread_mutex_lock(&sinks_lock);
        for (struct api_sink **pp = &sinks; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                        *pp = s->next;
                        break;
                }
        pthread_mutex_unlock(&sinks_lock);
        pthread_cond_destroy(&s->cond);
        free(s->buf);
        free(s);
}

/* The engine's output callback (on its worker thread): queue, never block. */
void api_sink_on_output(const char *exec_id, enum exec_stream stream, const void *data, size_t len, void *ud)
{
        uint64_t handle = (uint64_t)(uintptr_t)ud;

        pthread_mutex_lock(&sinks_lock);
        for (struct api_sink *s = sinks; s; s = s->next) {
                if (s->handle != handle)
                        continue;
                if (len > SINK_MAX_BYTES || s->len + 5 + len > SINK_MAX_BYTES) {
                        s->dropped += len;
                } else {
                        char *nb = realloc(s->buf, s->len + 5 + len);
                        if (!nb) {
                                s->dropped += len;
                                break;
                        }
                        s->buf = nb;
                        nb[s->len] = (char)(stream == EXEC_STDERR ? 1 : 0);
                        uint32_t l32 = (uint32_t)len;
                        memcpy(nb + s->len + 1, &l32, 4);
                        memcpy(nb + s->len + 5, data, len);
                        s->len += 5 + len;
                        pthread_cond_signal(&s->cond);
                }
                break;
        }
        pthread_mutex_unlock(&sinks_lock);
}

/* Where to cut buf so an incomplete trailing UTF-8 sequence waits for the
 * next chunk. */
static size_t utf8_cut(const unsigned char *buf, size_t len)
{
        for (size_t back = 1; back <= 3 && back <= len; back++) {
                unsigned char b = buf[len - back];
                if (b < 0x80)
                        return len;
                if (b >= 0xC0) {
                        size_t need = b < 0xE0 ? 2 : b < 0xF0 ? 3 : b < 0xF8 ? 4 : 1;
                        return back < need ? len - back : len;
                }
        }
        return len;
}

static void send_progress(struct api_req *q, struct api_sink *s, int stream, const unsigned char *data, size_t len)
{
        _cleanup_free_ unsigned char *joined = malloc(s->carry_len[stream] + len);
        size_t total, cut;
        cJSON *o;

        if (!joined)
                return;
        memcpy(joined, s->carry[stream], s->carry_len[stream]);
        memcpy(joined + s->carry_len[stream], data, len);
        total = s->carry_len[stream] + len;
        cut = utf8_cut(joined, total);
        s->carry_len[stream] = total - cut;
        memcpy(s->carry[stream], joined + cut, total - cut);
        if (cut == 0)
                return;
        o = reply_new(q->id);
        if (!o)
                return;
        cJSON_AddStringToObject(o, "event", "output");
        cJSON_AddStringToObject(o, "stream", stream ? "stderr" : "stdout");
        api_add_bytes(o, "data", joined, cut, false);
        conn_send(q->c, o);
        cJSON_Delete(o);
}

/* Send what is queued, waiting up to wait_ms for something to arrive. */
static void sink_drain(struct api_req *q, struct api_sink *s, int wait_ms)
{
        char *buf;
        size_t len;

        pthread_mutex_lock(&sinks_lock);
        if (s->len == 0 && wait_ms > 0) {
                struct timespec until = sbx_deadline_after(CLOCK_REALTIME, wait_ms);
                (void)pthread_cond_timedwait(&s->cond, &sinks_lock, &until);
        }
        buf = s->buf;
        len = s->len;
        s->buf = NULL;
        s->len = 0;
        pthread_mutex_unlock(&sinks_lock);

        /* coalesce runs of one stream into one progress line */
        for (size_t i = 0; i < len;) {
                int stream = buf[i];
                size_t start, run = 0;
                _cleanup_free_ unsigned char *acc = NULL;

                start = i;
                while (i < len && buf[i] == stream) {
                        uint32_t l32;
                        memcpy(&l32, buf + i + 1, 4);
                        run += l32;
                        i += 5 + l32;
                }
                acc = malloc(run ? run : 1);
                if (!acc)
                        break;
                run = 0;
                for (size_t j = start; j < i;) {
                        uint32_t l32;
                        memcpy(&l32, buf + j + 1, 4);
                        memcpy(acc + run, buf + j + 5, l32);
                        run += l32;
                        j += 5 + l32;
                }
                send_progress(q, s, stream, acc, run);
        }
        free(buf);
}

/* ---- waiting ---- */

/* The client closed its end (POLLHUP: both directions; a half-close that
 * still waits for the reply is fine). */
static bool peer_gone(struct api_conn *c)
{
        struct pollfd p = {.fd = c->fd, .events = 0};
        if (c->gone)
                return c->gone(c);
        if (conn_broken(c))
                return true;
        return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR));
}

bool api_should_abandon(struct api_req *q)
{
        return (q->c->srv && sockserver_stopping(q->c->srv->ss)) || peer_gone(q->c);
}

int api_wait_final(struct api_req *q, const char *id, struct api_sink *s, int64_t max_ms, struct fronterr *e)
{
        int64_t until = max_ms >= 0 ? sbx_now_ms() + max_ms : INT64_MAX;
        bool ending = false; /* final, its end not recorded yet: wait for that, not for output */

        for (;;) {
                struct exec_result r;
                struct sbx_error err = {0};
                int64_t left = until - sbx_now_ms();
                int slice = left < API_WAIT_SLICE_MS ? (int)(left > 0 ? left : 0) : API_WAIT_SLICE_MS;
                int rc;
                bool final;

                if (s && !ending)
                        sink_drain(q, s, slice < 250 ? slice : 250);
                rc = exec_status(q->d->exec, q->tok.user, id, API_OFFSET_NONE, API_OFFSET_NONE, 1,
                                 s && !ending ? 0 : slice, &r, &err);
                if (rc < 0)
                        return fronterr_errno(e, rc, &err, NULL);
                /* "it ended" only once its rows are written: a caller that then
                 * reads the audit log or list_executions finds it there */
                final = exec_state_is_final(r.state) && r.recorded;
                ending = exec_state_is_final(r.state);
                exec_result_done(&r);
                if (final) {
                        if (s)
                                sink_drain(q, s, 0); /* the engine calls back no more once final */
                        return 1;
                }
                if (sbx_now_ms() >= until)
                        return 1; /* not final, but the caller's wait is over */
                if (api_should_abandon(q))
                        return 0;
        }
}

/* ---- requests ---- */

static void audit_auth_failure(struct api_conn *c, const char *reason, const char *method)
{
        cJSON *d;
        char actor[80];
        uint64_t suppressed = 0;

        metrics_auth_failure(); /* every one, audited or not */
        /* a peer that keeps failing must not grow the audit log without bound
         * (network peers, which have no uid, share one budget) */
        if (!reqguard_audit_allowed(c->peer_addr ? (uid_t)-1 : c->peer.uid, sbx_now_ms(), &suppressed))
                return;
        d = cJSON_CreateObject();
        if (suppressed > 0)
                cJSON_AddNumberToObject(d, "suppressed_before", (double)suppressed);
        if (c->peer_addr) {
                snprintf(actor, sizeof(actor), "peer:%s", c->peer_addr);
                cJSON_AddStringToObject(d, "peer_addr", c->peer_addr);
        } else {
                snprintf(actor, sizeof(actor), "peer:uid=%u", (unsigned)c->peer.uid);
                cJSON_AddNumberToObject(d, "peer_uid", c->peer.uid);
                cJSON_AddNumberToObject(d, "peer_pid", c->peer.pid);
        }
        cJSON_AddStringToObject(d, "reason", reason);
        if (method) {
                _cleanup_free_ char *m = utf8_sanitize(method, strnlen(method, 64));
                cJSON_AddStringToObject(d, "method", m ? m : "");
        }
        (void)audit_record_json(c->d->store, actor, NULL, NULL, "auth.fail", d);
        if (c->peer_addr)
                log_warn("api: authentication failed from %s: %s", c->peer_addr, reason);
        else
                log_warn("api: authentication failed from uid %u pid %d: %s", (unsigned)c->peer.uid, (int)c->peer.pid,
                         reason);
}

int api_authenticate(struct api_conn *c, const char *token, const char *method, struct token_info *ret,
                     struct fronterr *e)
{
        int r;

        if (!token || !*token) {
                c->auth_failures++;
                audit_auth_failure(c, "missing token", method);
                return fronterr_set(e, "unauthorized", "a token is required");
        }
        r = token_verify(c->d->store, token, ret);
        if (r == -EACCES) {
                c->auth_failures++;
                audit_auth_failure(c, "unknown or revoked token", method);
                return fronterr_set(e, "unauthorized", "the token is unknown or revoked");
        }
        if (r < 0)
                return fronterr_set(e, "unavailable", "cannot check the token now; retry");
        c->authenticated = true;
        return 0;
}

static int call_traced(struct api_conn *c, const struct token_info *tok, const cJSON *id, const char *method,
                       const cJSON *params, cJSON **ret_result, struct fronterr *e);

/* params.<name> as a string, or NULL. */
static const char *param_text(const cJSON *params, const char *name)
{
        const cJSON *v = cJSON_IsObject(params) ? cJSON_GetObjectItemCaseSensitive(params, name) : NULL;
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

int api_call(struct api_conn *c, const struct token_info *tok, const cJSON *id, const char *method, const cJSON *params,
             cJSON **ret_result, struct fronterr *e)
{
        int r;

        if (!c->trace_id[0])
                reqctx_pick(param_text(params, "traceparent"), param_text(params, "request_id"), c->trace_id);
        reqctx_set(c->trace_id);
        r = call_traced(c, tok, id, method, params, ret_result, e);
        if (r == 0 && cJSON_IsObject(*ret_result)) {
                cJSON_DeleteItemFromObjectCaseSensitive(*ret_result, "trace_id");
                cJSON_AddStringToObject(*ret_result, "trace_id", c->trace_id);
        }
        reqctx_clear();
        return r;
}

static int call_traced(struct api_conn *c, const struct token_info *tok, const cJSON *id, const char *method,
                       const cJSON *params, cJSON **ret_result, struct fronterr *e)
{
        struct api_req q = {.c = c, .d = c->d, .id = id, .method = method, .tok = *tok};
        cJSON *result = NULL;
        api_method_fn fn;
        const cJSON *s;
        bool spec_recorded = false;
        int r;

        snprintf(q.actor, sizeof(q.actor), "token:%s", q.tok.id);
        if (!method)
                return fronterr_set(e, "bad_request", "method must be a string");
        fn = api_method_find(method);
        if (!fn) {
                _cleanup_free_ char *m = utf8_sanitize(method, strnlen(method, 64));
                return fronterr_set(e, "bad_request", "unknown method \"%s\"", m ? m : "");
        }
        /* an operator token reads, across users, and does nothing else (token.h) */
        if (q.tok.role == TOKEN_ROLE_OPERATOR && !api_method_operator(method))
                return fronterr_set(e, "forbidden",
                                    "an operator token may call list_sessions, events, list_users, pool_status, "
                                    "list_nodes, daemon_health and whoami only");
        if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
                return fronterr_set(e, "bad_request", "params must be an object");
        q.params = params && cJSON_IsObject(params) ? params : NULL;
        q.args = (struct jparams){.obj = q.params, .prefix = "params."};
        s = cJSON_GetObjectItemCaseSensitive(q.params, "session");
        if ((!s || cJSON_IsNull(s)) && (api_method_user_level(method) || api_tasks_sessionless(method)))
                s = NULL; /* acts on the user; create_session names one itself */
        else if (!s || cJSON_IsNull(s))
                return fronterr_set(e, "bad_request", "params.session is required");
        if (!s)
                q.session = "";
        else if (!cJSON_IsString(s) || !s->valuestring)
                return fronterr_set(e, "bad_request", "params.session must be a string");
        else if (!session_id_valid(s->valuestring))
                return fronterr_set(e, "invalid", "params.session must be 1-64 characters of [A-Za-z0-9_.-]");
        else
                q.session = s->valuestring;
        if (c->peer_addr)
                log_ctx(LOG_LEVEL_INFO, q.tok.user, q.session, NULL, "api: %s (token %s, peer %s)", q.method, q.tok.id,
                        c->peer_addr);
        else
                log_ctx(LOG_LEVEL_INFO, q.tok.user, q.session, NULL, "api: %s (token %s, peer uid %u pid %d)", q.method,
                        q.tok.id, (unsigned)c->peer.uid, (int)c->peer.pid);

        /* labels and resources named on a session's first use apply to it (api_spec.c) */
        if (q.session[0] && !api_method_user_level(method) && !api_tasks_sessionless(method) &&
            strcmp(method, "destroy_session") != 0 && strcmp(method, "pause_session") != 0 &&
            strcmp(method, "resume_session") != 0 && api_spec_first_use(&q, &spec_recorded, e) < 0)
                return -1;
        r = api_idem_call(&q, fn, &result, e);
        if (spec_recorded)
                api_spec_forget_unmade(&q); /* kept only if the call made the session */
        if (r == 1) {
                cJSON_Delete(result);
                return 1; /* the client is gone */
        }
        if (r < 0) {
                cJSON_Delete(result);
                events_request_refused(q.tok.user, q.session, q.method, e->code, e->msg);
                if (!e->code)
                        e->code = "internal";
                if (!e->msg[0])
                        snprintf(e->msg, sizeof(e->msg), "internal error");
                return -1;
        }
        if (!result)
                return fronterr_set(e, "internal", "out of memory");
        *ret_result = result;
        return 0;
}

static void handle_line(struct api_conn *c, const char *line, size_t len)
{
        _cleanup_(cjson_freep) cJSON *root = NULL;
        const cJSON *id, *token, *method;
        struct token_info tok;
        struct fronterr e = {0};
        cJSON *result = NULL;
        enum reqguard_verdict verdict;
        int r;

        /* bounded before it is parsed: values and nesting, not only bytes */
        verdict = reqguard_scan(line, len, REQGUARD_MAX_ELEMENTS, REQGUARD_MAX_DEPTH);
        if (verdict == REQGUARD_TOO_MANY_ELEMENTS || verdict == REQGUARD_TOO_DEEP) {
                send_error(c, NULL, "too_large", reqguard_verdict_message(verdict));
                return;
        }
        root = cJSON_ParseWithLength(line, len);
        if (!root || !cJSON_IsObject(root)) {
                send_error(c, NULL, "bad_request", root ? "a request must be a JSON object" : "malformed JSON");
                return;
        }
        /* until the token verifies, only a small id is echoed */
        id = reqguard_reply_id(cJSON_GetObjectItemCaseSensitive(root, "id"));
        token = cJSON_GetObjectItemCaseSensitive(root, "token");
        method = cJSON_GetObjectItemCaseSensitive(root, "method");

        /* Authenticate before saying anything else about the request. */
        r = api_authenticate(c, cJSON_IsString(token) ? token->valuestring : NULL,
                             cJSON_IsString(method) ? method->valuestring : NULL, &tok, &e);
        if (r == 0) {
                id = cJSON_GetObjectItemCaseSensitive(root, "id");
                /* strict strings: never a silently truncated id, path, name or value */
                if (verdict != REQGUARD_OK)
                        r = fronterr_set(&e, "invalid", "%s", reqguard_verdict_message(verdict));
        }
        c->trace_id[0] = '\0'; /* each request names its own (params.traceparent) */
        if (r == 0)
                r = api_call(c, &tok, id, cJSON_IsString(method) ? method->valuestring : NULL,
                             cJSON_GetObjectItemCaseSensitive(root, "params"), &result, &e);
        if (r == 1)
                return;
        if (r < 0)
                send_error_traced(c, id, e.code, e.msg, c->trace_id);
        else
                send_result(c, id, result);
}

/* ---- connections ---- */

/* A first line longer than the pre-authentication cap is read on only when
 * its prefix carries a token that verifies. */
static bool prefix_authenticates(struct api_conn *c, const struct linereader *lr)
{
        char token[256];
        struct token_info info;

        return reqguard_prefix_token(lr->buf, lr->len, token, sizeof(token)) &&
               token_verify(c->d->store, token, &info) == 0;
}

static void serve(struct sockserver *ss, int fd, const struct ucred *peer, void *ud)
{
        struct api_server *srv = ud;
        const struct sbx_config *cfg = &srv->d->cfg;
        struct api_conn conn = {.srv = srv, .d = srv->d, .fd = fd, .peer = *peer};
        struct api_conn *c = &conn;
        struct linereader lr;
        /* until its first good token, a connection has a short deadline from its opening */
        int64_t auth_deadline = sbx_now_ms() + cfg->auth_timeout_ms;
        bool prefix_ok = false;

        pthread_mutex_init(&c->wlock, NULL);
        linereader_init(&lr, fd, REQGUARD_PREAUTH_LINE);
        for (;;) {
                char *line;
                size_t len;
                int64_t left = auth_deadline - sbx_now_ms();
                bool idle = c->authenticated || prefix_ok;
                int r = linereader_next(&lr, &line, &len,
                                        idle       ? cfg->connection_idle_timeout_ms
                                        : left > 0 ? (int)left
                                                   : 0,
                                        sockserver_stop_fd(ss));
                if (r == -E2BIG && !idle && prefix_authenticates(c, &lr)) {
                        /* a large first request whose leading token verifies: read on */
                        prefix_ok = true;
                        lr.max = API_MAX_LINE;
                        continue;
                }
                if (r == -E2BIG) {
                        send_error(c, NULL, "bad_request",
                                   idle ? "request line longer than API_MAX_LINE; closing"
                                        : "an unauthenticated request is limited to 4 KiB (send the token before "
                                          "large fields); closing");
                        break;
                }
                if (r == -ETIMEDOUT) {
                        send_error(c, NULL, idle ? "unavailable" : "unauthorized",
                                   idle ? "no request in connections.idle_timeout; closing"
                                        : "no authenticated request in time; closing");
                        break;
                }
                if (r <= 0)
                        break;
                while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
                        line[--len] = '\0';
                if (len == 0)
                        continue;
                handle_line(c, line, len);
                if (c->authenticated && lr.max != API_MAX_LINE) {
                        lr.max = API_MAX_LINE;
                        sockserver_authenticated(ss, fd); /* out of the per-uid budget before a token */
                }
                prefix_ok = false;
                if (c->auth_failures >= API_MAX_AUTH_FAILURES || conn_broken(c))
                        break;
        }
        linereader_done(&lr);
        pthread_mutex_destroy(&c->wlock);
}

int api_server_start(struct daemon *d, struct api_server **ret, struct sbx_error *err)
{
        struct api_server *srv = calloc(1, sizeof(*srv));
        int r;

        if (!srv)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        srv->d = d;
        /* every request carries a token: the socket itself is open to all */
        r = sockserver_start("API", "sbx-api", d->cfg.api_socket, 0666, (gid_t)-1,
                             (size_t)config_max_connections(&d->cfg), (size_t)config_max_connections_per_uid(&d->cfg),
                             (size_t)d->cfg.max_unauthenticated_per_uid, serve, srv, &srv->ss, err);
        if (r < 0) {
                free(srv);
                return r;
        }
        log_info("API socket listening on %s", d->cfg.api_socket);
        *ret = srv;
        return 0;
}

void api_server_stop(struct api_server *srv)
{
        if (!srv)
                return;
        sockserver_stop(srv->ss);
        free(srv);
}

bool api_method_exists(const char *name)
{
        return api_method_find(name) != NULL;
}
