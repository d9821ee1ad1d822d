/* api.c — the API socket front (protocol in include/sandboxd/api.h): accept,
 * read capped lines, parse and type-check with cJSON, authenticate the token,
 * call the modules, format the replies. No logic of its own beyond that.
 *
 * Threads: "sbx-api" accepts (listener.c); each connection gets one worker
 * ("sbx-api-conn", at most API_MAX_CONNS) that answers its requests in order.
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
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "listener.h"
#include "sandboxd/daemon.h"
#include "sandboxd/exec.h"
#include "sandboxd/files.h"
#include "sandboxd/log.h"
#include "sandboxd/privacy.h"
#include "sandboxd/service.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
#include "sandboxd/utf8.h"

#define API_MAX_CONNS 64
#define API_AUTH_TIMEOUT_MS 30000 /* a connection must authenticate within this */
#define API_MAX_AUTH_FAILURES 5   /* then the connection is closed */
#define API_MAX_ENV 256
#define API_LIST_MAX 1000
#define SINK_MAX_BYTES (1 << 20)  /* progress queued for one request; past it chunks are dropped */
#define WAIT_SLICE_MS 1000
#define STDIN_PENDING_WAIT_MS 60000 /* a pending execution may still be creating its container */
#define OFFSET_NONE (INT64_MAX / 2) /* an offset past any output: cheap status polls */

struct api_conn;

struct api_server {
        struct daemon *d;
        struct sockserver *ss;
};

/* One connection, on its worker's stack. */
struct api_conn {
        struct api_server *srv;
        int fd;
        struct ucred peer;
        pthread_mutex_t wlock;
        bool broken; /* wlock: a write failed, the peer is gone */
        int auth_failures;
        bool authenticated;
};

struct api_err {
        const char *code;
        char msg[1024];
};

struct req {
        struct api_conn *c;
        struct daemon *d;
        const cJSON *id;
        const cJSON *params;
        const char *method;
        struct token_info tok;
        char actor[48];
        const char *session;
};

static void cjson_deletep(cJSON **p)
{
        cJSON_Delete(*p);
}

/* ---- errors ---- */

static int fail(struct api_err *e, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct api_err *e, const char *code, const char *fmt, ...)
{
        va_list ap;
        e->code = code;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
        va_end(ap);
        return -1;
}

static const char *errno_code(int r)
{
        switch (-r) {
        case EINVAL:
        case EPERM:
        case ENOTDIR:
        case EISDIR:
        case ERANGE:
        case ENAMETOOLONG:
                return "invalid";
        case ENOENT:
        case ESRCH:
                return "not_found";
        case EACCES:
                return "forbidden";
        case EBUSY:
        case EUSERS:
        case ENOSPC:
        case EAGAIN:
        case EMFILE:
        case ENFILE:
                return "busy";
        case E2BIG:
        case EFBIG:
        case EMSGSIZE:
                return "too_large";
        case EEXIST:
        case EPIPE:
                return "conflict";
        case EALREADY:
                return "already_finished";
        case ECONNREFUSED:
        case ETIMEDOUT:
        case EIO:
        case ESHUTDOWN:
        case EHOSTUNREACH:
        case ENOTCONN:
        case ECONNRESET:
        case EPROTO:
                return "unavailable";
        default:
                return "internal";
        }
}

static int fail_errno(struct api_err *e, int r, const struct sbx_error *err, const char *what)
{
        return fail(e, errno_code(r), "%s", err && err->msg[0] ? err->msg : what ? what : strerror(-r));
}

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
        char *text = cJSON_PrintUnformatted(obj);
        size_t n;

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

static void send_error(struct api_conn *c, const cJSON *id, const char *code, const char *msg)
{
        cJSON *o = reply_new(id), *e;
        _cleanup_free_ char *clean = utf8_sanitize(msg, strlen(msg));

        if (!o)
                return;
        cJSON_AddFalseToObject(o, "ok");
        e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "code", code);
        cJSON_AddStringToObject(e, "message", clean ? clean : "");
        conn_send(c, o);
        cJSON_Delete(o);
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

/* ---- parameters ---- */

static int p_string(struct req *q, const char *name, bool required, const char **ret, struct api_err *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->params, name);
        if (!v || cJSON_IsNull(v)) {
                if (required)
                        return fail(e, "bad_request", "params.%s is required", name);
                *ret = NULL;
                return 0;
        }
        if (!cJSON_IsString(v) || !v->valuestring)
                return fail(e, "bad_request", "params.%s must be a string", name);
        *ret = v->valuestring;
        return 0;
}

static int p_int(struct req *q, const char *name, int64_t lo, int64_t hi, int64_t def, int64_t *ret,
                 struct api_err *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->params, name);
        double x;

        if (!v || cJSON_IsNull(v)) {
                *ret = def;
                return 0;
        }
        if (!cJSON_IsNumber(v))
                return fail(e, "bad_request", "params.%s must be a number", name);
        x = v->valuedouble;
        if (!isfinite(x) || x != floor(x))
                return fail(e, "bad_request", "params.%s must be an integer", name);
        if (x < (double)lo || x > (double)hi)
                return fail(e, "invalid", "params.%s must be between %" PRId64 " and %" PRId64, name, lo, hi);
        *ret = (int64_t)x;
        return 0;
}

static int p_bool(struct req *q, const char *name, bool def, bool *ret, struct api_err *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->params, name);
        if (!v || cJSON_IsNull(v)) {
                *ret = def;
                return 0;
        }
        if (!cJSON_IsBool(v))
                return fail(e, "bad_request", "params.%s must be true or false", name);
        *ret = cJSON_IsTrue(v);
        return 0;
}

/* params.<name>: "utf8" (default) or "base64". */
static int p_encoding(struct req *q, const char *name, bool *ret_base64, struct api_err *e)
{
        const char *s;
        if (p_string(q, name, false, &s, e) < 0)
                return -1;
        if (!s || strcmp(s, "utf8") == 0 || strcmp(s, "utf-8") == 0)
                *ret_base64 = false;
        else if (strcmp(s, "base64") == 0)
                *ret_base64 = true;
        else
                return fail(e, "invalid", "params.%s must be \"utf8\" or \"base64\"", name);
        return 0;
}

/* A string param as bytes: decoded from base64 when encoding says so. */
static int p_bytes(struct req *q, const char *name, bool required, bool base64, unsigned char **ret,
                   size_t *ret_len, struct api_err *e)
{
        const char *s;

        if (p_string(q, name, required, &s, e) < 0)
                return -1;
        if (!s) {
                *ret = NULL;
                *ret_len = 0;
                return 0;
        }
        if (base64) {
                if (base64_decode(s, strlen(s), ret, ret_len) < 0)
                        return fail(e, "invalid", "params.%s is not valid base64", name);
                return 0;
        }
        *ret_len = strlen(s);
        *ret = malloc(*ret_len + 1);
        if (!*ret)
                return fail(e, "internal", "out of memory");
        memcpy(*ret, s, *ret_len + 1);
        return 0;
}

/* ---- formatting ---- */

static void lower_into(char *dst, size_t size, const char *s)
{
        size_t i = 0;
        for (; s && s[i] && i + 1 < size; i++)
                dst[i] = (char)tolower((unsigned char)s[i]);
        dst[i] = '\0';
}

static void add_lower(cJSON *o, const char *key, const char *s)
{
        char buf[64];
        lower_into(buf, sizeof(buf), s);
        cJSON_AddStringToObject(o, key, buf);
}

static void add_text_or_null(cJSON *o, const char *key, const char *s)
{
        if (s && *s) {
                _cleanup_free_ char *clean = utf8_sanitize(s, strlen(s));
                cJSON_AddStringToObject(o, key, clean ? clean : "");
        } else {
                cJSON_AddNullToObject(o, key);
        }
}

/* Bytes as a JSON string: base64, or UTF-8 with invalid bytes replaced. */
static void add_bytes(cJSON *o, const char *key, const void *buf, size_t len, bool base64)
{
        _cleanup_free_ char *s = base64 ? base64_encode(buf, len) : utf8_sanitize(buf, len);
        cJSON_AddStringToObject(o, key, s ? s : "");
}

/* head + "\n...[N bytes omitted]...\n" + tail, where N counts every byte
 * the two leave out (including bytes past the spool cap). */
static void add_stream(cJSON *o, const char *key, const char *head, size_t head_len, const char *tail,
                       size_t tail_len, uint64_t total, bool base64)
{
        uint64_t omitted = total > head_len + tail_len ? total - head_len - tail_len : 0;
        char marker[64] = "";
        size_t ml = 0, n;
        _cleanup_free_ char *buf = NULL;

        if (omitted > 0)
                ml = (size_t)snprintf(marker, sizeof(marker), "\n...[%" PRIu64 " bytes omitted]...\n", omitted);
        if (base64) {
                n = head_len + ml + tail_len;
                buf = malloc(n + 1);
                if (!buf)
                        return;
                memcpy(buf, head, head_len);
                memcpy(buf + head_len, marker, ml);
                memcpy(buf + head_len + ml, tail, tail_len);
                add_bytes(o, key, buf, n, true);
                return;
        }
        /* sanitised apart, so the marker stays intact between them */
        _cleanup_free_ char *h = utf8_sanitize(head ? head : "", head_len);
        _cleanup_free_ char *t = utf8_sanitize(tail ? tail : "", tail_len);
        if (!h || !t)
                return;
        if (asprintf(&buf, "%s%s%s", h, marker, t) < 0) {
                buf = NULL;
                return;
        }
        cJSON_AddStringToObject(o, key, buf);
}

static void add_exec_common(cJSON *o, const struct exec_result *r)
{
        cJSON_AddStringToObject(o, "execution_id", r->id);
        cJSON_AddStringToObject(o, "session", r->session);
        add_lower(o, "state", exec_state_to_string(r->state));
        if (r->exit_code >= 0 && r->cause == EXEC_CAUSE_EXITED)
                cJSON_AddNumberToObject(o, "exit_code", r->exit_code);
        else
                cJSON_AddNullToObject(o, "exit_code");
        add_text_or_null(o, "cause", exec_cause_to_string(r->cause));
        add_text_or_null(o, "error", r->error);
        cJSON_AddNumberToObject(o, "stdout_bytes", (double)r->stdout_bytes);
        cJSON_AddNumberToObject(o, "stderr_bytes", (double)r->stderr_bytes);
        cJSON_AddBoolToObject(o, "truncated", r->truncated);
        cJSON_AddNumberToObject(o, "duration_ms", (double)r->duration_ms);
        cJSON_AddNumberToObject(o, "created_at", (double)r->created_at);
}

/* A full result (head and tail), or with offsets the chunk from each. */
static cJSON *exec_json(const struct exec_result *r, bool base64, bool out_offset, bool err_offset)
{
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return NULL;
        add_exec_common(o, r);
        cJSON_AddStringToObject(o, "encoding", base64 ? "base64" : "utf8");
        if (out_offset) {
                add_bytes(o, "stdout", r->stdout_head, r->stdout_head_len, base64);
                cJSON_AddNumberToObject(o, "stdout_offset", (double)r->stdout_offset);
                cJSON_AddNumberToObject(o, "stdout_next_offset", (double)(r->stdout_offset + r->stdout_head_len));
        } else {
                add_stream(o, "stdout", r->stdout_head, r->stdout_head_len, r->stdout_tail, r->stdout_tail_len,
                           r->stdout_bytes, base64);
        }
        if (err_offset) {
                add_bytes(o, "stderr", r->stderr_head, r->stderr_head_len, base64);
                cJSON_AddNumberToObject(o, "stderr_offset", (double)r->stderr_offset);
                cJSON_AddNumberToObject(o, "stderr_next_offset", (double)(r->stderr_offset + r->stderr_head_len));
        } else {
                add_stream(o, "stderr", r->stderr_head, r->stderr_head_len, r->stderr_tail, r->stderr_tail_len,
                           r->stderr_bytes, base64);
        }
        return o;
}

static void add_ports(cJSON *o, const char *key, const int *host_ports, size_t n, int base)
{
        cJSON *a = cJSON_AddArrayToObject(o, key);
        for (size_t i = 0; a && i < n; i++) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddNumberToObject(p, "container_port", base + (int)i);
                cJSON_AddNumberToObject(p, "host_port", host_ports[i]);
                cJSON_AddItemToArray(a, p);
        }
}

static cJSON *service_json(const struct service_info *s)
{
        cJSON *o = cJSON_CreateObject(), *a;
        if (!o)
                return NULL;
        cJSON_AddStringToObject(o, "name", s->name);
        add_lower(o, "state", service_state_to_string(s->state));
        if (s->pid > 0)
                cJSON_AddNumberToObject(o, "pid", s->pid);
        else
                cJSON_AddNullToObject(o, "pid");
        if (s->exit_code >= 0)
                cJSON_AddNumberToObject(o, "exit_code", s->exit_code);
        else
                cJSON_AddNullToObject(o, "exit_code");
        add_text_or_null(o, "command", s->command);
        add_text_or_null(o, "workdir", s->workdir);
        a = cJSON_AddArrayToObject(o, "ports");
        for (size_t i = 0; a && i < s->n_ports && i < SERVICE_MAX_PORTS; i++) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddNumberToObject(p, "container_port", s->ports[i].container_port);
                if (s->ports[i].host_port > 0)
                        cJSON_AddNumberToObject(p, "host_port", s->ports[i].host_port);
                else
                        cJSON_AddNullToObject(p, "host_port");
                cJSON_AddItemToArray(a, p);
        }
        cJSON_AddNumberToObject(o, "started_at", (double)s->started_at);
        if (s->stopped_at > 0)
                cJSON_AddNumberToObject(o, "stopped_at", (double)s->stopped_at);
        else
                cJSON_AddNullToObject(o, "stopped_at");
        add_text_or_null(o, "last_error", s->last_error);
        return o;
}

/* ---- streaming sinks ---- */

struct sink {
        uint64_t handle;
        struct sink *next;
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
static struct sink *sinks;
static uint64_t sinks_next_handle = 1;

static struct sink *sink_new(void)
{
        struct sink *s = calloc(1, sizeof(*s));
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

/* Unregister and free: a later callback for this handle finds nothing. */
static void sink_free(struct sink *s)
{
        if (!s)
                return;
        pthread_mutex_lock(&sinks_lock);
        for (struct sink **pp = &sinks; *pp; pp = &(*pp)->next)
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
static void sink_on_output(const char *exec_id, enum exec_stream stream, const void *data, size_t len, void *ud)
{
        uint64_t handle = (uint64_t)(uintptr_t)ud;

        pthread_mutex_lock(&sinks_lock);
        for (struct sink *s = sinks; s; s = s->next) {
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

static void send_progress(struct req *q, struct sink *s, int stream, const unsigned char *data, size_t len)
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
        add_bytes(o, "data", joined, cut, false);
        conn_send(q->c, o);
        cJSON_Delete(o);
}

/* Send what is queued, waiting up to wait_ms for something to arrive. */
static void sink_drain(struct req *q, struct sink *s, int wait_ms)
{
        char *buf;
        size_t len;

        pthread_mutex_lock(&sinks_lock);
        if (s->len == 0 && wait_ms > 0) {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_sec += wait_ms / 1000;
                until.tv_nsec += (long)(wait_ms % 1000) * 1000000;
                if (until.tv_nsec >= 1000000000) {
                        until.tv_sec++;
                        until.tv_nsec -= 1000000000;
                }
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
        if (conn_broken(c))
                return true;
        return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR));
}

static bool should_abandon(struct req *q)
{
        return sockserver_stopping(q->c->srv->ss) || peer_gone(q->c);
}

/* Wait for the execution to end, streaming its output if s. 1 ended,
 * 0 abandoned (the client left or the server stops), <0 error. */
static int wait_final(struct req *q, const char *id, struct sink *s, int64_t max_ms, struct api_err *e)
{
        int64_t until = max_ms >= 0 ? sbx_now_ms() + max_ms : INT64_MAX;

        for (;;) {
                struct exec_result r;
                struct sbx_error err = {0};
                int64_t left = until - sbx_now_ms();
                int slice = left < WAIT_SLICE_MS ? (int)(left > 0 ? left : 0) : WAIT_SLICE_MS;
                int rc;
                bool final;

                if (s)
                        sink_drain(q, s, slice < 250 ? slice : 250);
                rc = exec_status(q->d->exec, q->tok.user, id, OFFSET_NONE, OFFSET_NONE, 1, s ? 0 : slice, &r, &err);
                if (rc < 0)
                        return fail_errno(e, rc, &err, NULL);
                final = exec_state_is_final(r.state);
                exec_result_done(&r);
                if (final) {
                        if (s)
                                sink_drain(q, s, 0); /* the engine calls back no more once final */
                        return 1;
                }
                if (sbx_now_ms() >= until)
                        return 1; /* not final, but the caller's wait is over */
                if (should_abandon(q))
                        return 0;
        }
}

/* The execution, which must be the caller's and in the request's session. */
static int own_execution(struct req *q, const char *id, struct exec_result *ret, struct api_err *e)
{
        struct sbx_error err = {0};
        int r = exec_status(q->d->exec, q->tok.user, id, OFFSET_NONE, OFFSET_NONE, 1, 0, ret, &err);
        if (r < 0)
                return fail_errno(e, r, &err, NULL);
        if (strcmp(ret->session, q->session) != 0) {
                exec_result_done(ret);
                return fail(e, "not_found", "no execution %s in session %s", id, q->session);
        }
        return 0;
}

/* ---- methods ---- */

/* 0 with a result, <0 with e filled, 1 for "send nothing" (client gone). */
typedef int (*method_fn)(struct req *q, cJSON **ret, struct api_err *e);

static int preflight_session(struct req *q, struct api_err *e)
{
        struct session *s = NULL;
        struct sbx_error err = {0};
        int r = session_get_or_create(q->d->sessions, q->tok.user, q->session, &s, &err);
        if (r < 0)
                return fail_errno(e, r, &err, "the session's container is not available");
        session_release(s);
        return 0;
}

static int run_execution(struct req *q, enum exec_language lang, cJSON **ret, struct api_err *e)
{
        const char *command = NULL, *code = NULL, *workdir = NULL, *stdin_s = NULL;
        int64_t timeout;
        bool background, interactive, stream, base64;
        const cJSON *env_obj = cJSON_GetObjectItemCaseSensitive(q->params, "env");
        const char *env[API_MAX_ENV + 1] = {0};
        char *env_buf[API_MAX_ENV] = {0};
        size_t n_env = 0;
        struct sink *sink = NULL;
        struct sbx_error err = {0};
        struct exec_result res;
        char id[37];
        int r = -1;

        if (lang == EXEC_LANG_NONE) {
                if (p_string(q, "command", true, &command, e) < 0)
                        return -1;
        } else if (p_string(q, "code", true, &code, e) < 0) {
                return -1;
        }
        if (p_int(q, "timeout_seconds", 0, q->d->cfg.exec_timeout_max_s, 0, &timeout, e) < 0 ||
            p_string(q, "workdir", false, &workdir, e) < 0 || p_string(q, "stdin", false, &stdin_s, e) < 0 ||
            p_bool(q, "background", false, &background, e) < 0 ||
            p_bool(q, "interactive", false, &interactive, e) < 0 || p_bool(q, "stream", false, &stream, e) < 0 ||
            p_encoding(q, "encoding", &base64, e) < 0)
                return -1;
        if (env_obj && !cJSON_IsNull(env_obj)) {
                const cJSON *it;
                if (!cJSON_IsObject(env_obj))
                        return fail(e, "bad_request", "params.env must be an object of strings");
                cJSON_ArrayForEach(it, env_obj) {
                        if (!cJSON_IsString(it) || !it->string)
                                { r = fail(e, "bad_request", "params.env values must be strings"); goto out; }
                        if (n_env >= API_MAX_ENV)
                                { r = fail(e, "too_large", "params.env has more than %d entries", API_MAX_ENV); goto out; }
                        if (asprintf(&env_buf[n_env], "%s=%s", it->string, it->valuestring) < 0) {
                                env_buf[n_env] = NULL;
                                r = fail(e, "internal", "out of memory");
                                goto out;
                        }
                        env[n_env] = env_buf[n_env];
                        n_env++;
                }
        }

        if (preflight_session(q, e) < 0)
                goto out;
        if (stream && !background) {
                sink = sink_new();
                if (!sink) {
                        r = fail(e, "internal", "out of memory");
                        goto out;
                }
        }
        struct exec_request req = {
                .user = q->tok.user,
                .session = q->session,
                .command = command,
                .language = lang,
                .code = code,
                .timeout_s = (int)timeout,
                .workdir = workdir,
                .env = n_env ? env : NULL,
                .stdin_data = stdin_s,
                .stdin_len = stdin_s ? strlen(stdin_s) : 0,
                .interactive = interactive,
                .actor = q->actor,
                .on_output = sink ? sink_on_output : NULL,
                .userdata = sink ? (void *)(uintptr_t)sink->handle : NULL,
        };
        r = exec_start(q->d->exec, &req, id, &err);
        if (r < 0) {
                r = fail_errno(e, r, &err, NULL);
                goto out;
        }
        if (!background) {
                r = wait_final(q, id, sink, -1, e);
                if (r <= 0) {
                        if (r == 0)
                                log_ctx(LOG_LEVEL_INFO, q->tok.user, q->session, NULL,
                                        "api: client left during execution %s; it runs on", id);
                        r = r == 0 ? 1 : r;
                        goto out;
                }
        }
        r = exec_status(q->d->exec, q->tok.user, id, background ? OFFSET_NONE : -1, background ? OFFSET_NONE : -1,
                        background ? 1 : 0, 0, &res, &err);
        if (r < 0) {
                r = fail_errno(e, r, &err, NULL);
                goto out;
        }
        if (background) {
                *ret = cJSON_CreateObject();
                cJSON_AddStringToObject(*ret, "execution_id", id);
                add_lower(*ret, "state", exec_state_to_string(res.state));
        } else if (res.state == EXEC_FAILED && res.cause == EXEC_CAUSE_ERROR) {
                r = fail(e, "unavailable", "execution %s could not run: %s", id, res.error);
        } else {
                *ret = exec_json(&res, base64, false, false);
        }
        exec_result_done(&res);
out:
        sink_free(sink);
        for (size_t i = 0; i < n_env; i++)
                free(env_buf[i]);
        return r;
}

static int m_exec(struct req *q, cJSON **ret, struct api_err *e)
{
        return run_execution(q, EXEC_LANG_NONE, ret, e);
}

static int m_run_code(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *language;
        enum exec_language lang;

        if (p_string(q, "language", true, &language, e) < 0)
                return -1;
        if (strcmp(language, "python") == 0 || strcmp(language, "python3") == 0)
                lang = EXEC_LANG_PYTHON;
        else if (strcmp(language, "node") == 0 || strcmp(language, "javascript") == 0)
                lang = EXEC_LANG_NODE;
        else if (strcmp(language, "bash") == 0)
                lang = EXEC_LANG_BASH;
        else
                return fail(e, "invalid", "params.language must be python, node or bash");
        return run_execution(q, lang, ret, e);
}

static int m_get_execution(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *id;
        int64_t wait_s, out_off, err_off;
        bool base64;
        struct exec_result res;
        struct sbx_error err = {0};
        int64_t until;
        int r;

        if (p_string(q, "execution_id", true, &id, e) < 0 || p_int(q, "wait", 0, 60, 0, &wait_s, e) < 0 ||
            p_int(q, "stdout_offset", 0, INT64_MAX / 4, -1, &out_off, e) < 0 ||
            p_int(q, "stderr_offset", 0, INT64_MAX / 4, -1, &err_off, e) < 0 ||
            p_encoding(q, "encoding", &base64, e) < 0)
                return -1;
        if (own_execution(q, id, &res, e) < 0)
                return -1;
        exec_result_done(&res);

        /* Long-poll in slices so a departed client or a stop is noticed. */
        until = sbx_now_ms() + wait_s * 1000;
        for (;;) {
                int64_t left = until - sbx_now_ms();
                int slice = left <= 0 ? 0 : left < WAIT_SLICE_MS ? (int)left : WAIT_SLICE_MS;
                bool done;

                r = exec_status(q->d->exec, q->tok.user, id, out_off, err_off, 0, slice, &res, &err);
                if (r < 0)
                        return fail_errno(e, r, &err, NULL);
                done = exec_state_is_final(res.state) || slice == 0 ||
                       (out_off >= 0 && res.stdout_head_len > 0) || (err_off >= 0 && res.stderr_head_len > 0);
                if (done)
                        break;
                exec_result_done(&res);
                if (should_abandon(q))
                        return 1;
        }
        *ret = exec_json(&res, base64, out_off >= 0, err_off >= 0);
        exec_result_done(&res);
        return 0;
}

static int m_send_stdin(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *id;
        bool eof, base64;
        _cleanup_free_ unsigned char *data = NULL;
        size_t len = 0;
        struct exec_result res;
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "execution_id", true, &id, e) < 0 || p_bool(q, "eof", false, &eof, e) < 0 ||
            p_encoding(q, "encoding", &base64, e) < 0 || p_bytes(q, "data", false, base64, &data, &len, e) < 0)
                return -1;
        if (own_execution(q, id, &res, e) < 0)
                return -1;
        /* Right after a background start the execution may not be attached
         * yet: wait for it rather than refuse the first bytes. */
        for (int i = 0; res.state == EXEC_PENDING && i < STDIN_PENDING_WAIT_MS / 50; i++) {
                exec_result_done(&res);
                sbx_sleep_ms(50);
                if (should_abandon(q))
                        return 1;
                if (own_execution(q, id, &res, e) < 0)
                        return -1;
        }
        exec_result_done(&res);
        r = exec_send_stdin(q->d->exec, q->tok.user, id, data, len, eof, &err);
        if (r < 0)
                return fail_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "execution_id", id);
        cJSON_AddNumberToObject(*ret, "bytes", (double)len);
        cJSON_AddBoolToObject(*ret, "eof", eof);
        return 0;
}

static int m_cancel_execution(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *id;
        bool force;
        struct exec_result res;
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "execution_id", true, &id, e) < 0 || p_bool(q, "force", false, &force, e) < 0)
                return -1;
        if (own_execution(q, id, &res, e) < 0)
                return -1;
        exec_result_done(&res);
        r = exec_cancel(q->d->exec, q->tok.user, id, force, &err);
        if (r < 0)
                return fail_errno(e, r, &err, NULL);
        /* Give the kill its grace period so the reply can say how it ended. */
        r = wait_final(q, id, NULL, q->d->cfg.exec_kill_grace_ms + 5000, e);
        if (r <= 0)
                return r == 0 ? 1 : r;
        r = exec_status(q->d->exec, q->tok.user, id, -1, -1, 0, 0, &res, &err);
        if (r < 0)
                return fail_errno(e, r, &err, NULL);
        *ret = exec_json(&res, false, false, false);
        exec_result_done(&res);
        return 0;
}

static int m_list_executions(struct req *q, cJSON **ret, struct api_err *e)
{
        const cJSON *states = cJSON_GetObjectItemCaseSensitive(q->params, "states"), *it;
        struct exec_result *list = NULL;
        unsigned mask = 0;
        size_t n = 0;
        int64_t limit;
        cJSON *a;
        int r;

        if (p_int(q, "limit", 1, API_LIST_MAX, 50, &limit, e) < 0)
                return -1;
        if (states && !cJSON_IsNull(states)) {
                if (!cJSON_IsArray(states))
                        return fail(e, "bad_request", "params.states must be an array of strings");
                cJSON_ArrayForEach(it, states) {
                        char up[32];
                        enum exec_state st;
                        if (!cJSON_IsString(it))
                                return fail(e, "bad_request", "params.states must be an array of strings");
                        sbx_strlcpy(up, it->valuestring, sizeof(up));
                        for (char *p = up; *p; p++)
                                *p = (char)toupper((unsigned char)*p);
                        if (exec_state_from_string(up, &st) < 0)
                                return fail(e, "invalid", "unknown execution state \"%.32s\"", it->valuestring);
                        mask |= 1u << st;
                }
        }
        r = exec_list(q->d->exec, q->tok.user, q->session, mask, (size_t)limit, &list, &n);
        if (r < 0)
                return fail_errno(e, r, NULL, "cannot list executions");
        *ret = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(*ret, "executions");
        for (size_t i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                add_exec_common(o, &list[i]);
                add_text_or_null(o, "command_preview", list[i].command_preview);
                cJSON_AddItemToArray(a, o);
        }
        exec_result_list_free(list, n);
        return 0;
}

static int m_write_file(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *path;
        bool base64;
        _cleanup_free_ unsigned char *data = NULL;
        size_t len = 0;
        char norm[FILES_PATH_MAX];
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "path", true, &path, e) < 0 || p_encoding(q, "encoding", &base64, e) < 0 ||
            p_bytes(q, "content", true, base64, &data, &len, e) < 0)
                return -1;
        r = files_write(q->d, q->tok.user, q->session, path, data, len, norm, &err);
        if (r < 0)
                return fail_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "path", norm);
        cJSON_AddNumberToObject(*ret, "bytes", (double)len);
        return 0;
}

static int m_read_file(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *path;
        int64_t offset, length;
        bool base64;
        struct files_read_result res;
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "path", true, &path, e) < 0 || p_int(q, "offset", 0, INT64_MAX / 4, 0, &offset, e) < 0 ||
            p_int(q, "length", 0, INT64_MAX / 4, -1, &length, e) < 0 || p_encoding(q, "encoding", &base64, e) < 0)
                return -1;
        r = files_read(q->d, q->tok.user, q->session, path, (uint64_t)offset, length, &res, &err);
        if (r < 0)
                return fail_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "path", res.path);
        add_bytes(*ret, "content", res.data, res.len, base64);
        cJSON_AddStringToObject(*ret, "encoding", base64 ? "base64" : "utf8");
        if (!base64)
                cJSON_AddBoolToObject(*ret, "valid_utf8", utf8_is_valid(res.data, res.len) &&
                                                                  memchr(res.data, '\0', res.len) == NULL);
        cJSON_AddNumberToObject(*ret, "offset", (double)offset);
        cJSON_AddNumberToObject(*ret, "bytes", (double)res.len);
        cJSON_AddNumberToObject(*ret, "size", (double)res.size);
        cJSON_AddBoolToObject(*ret, "eof", res.eof);
        files_read_result_done(&res);
        return 0;
}

static int m_list_files(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *path;
        char norm[FILES_PATH_MAX];
        struct files_entry *list = NULL;
        size_t n = 0;
        bool truncated = false;
        struct sbx_error err = {0};
        cJSON *a;
        int r;

        if (p_string(q, "path", false, &path, e) < 0)
                return -1;
        r = files_list(q->d, q->tok.user, q->session, path, norm, &list, &n, &truncated, &err);
        if (r < 0)
                return fail_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "path", norm);
        a = cJSON_AddArrayToObject(*ret, "entries");
        for (size_t i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                add_bytes(o, "name", list[i].name, strlen(list[i].name), false);
                cJSON_AddStringToObject(o, "type", files_type_to_string(list[i].type));
                cJSON_AddNumberToObject(o, "size", (double)list[i].size);
                cJSON_AddItemToArray(a, o);
        }
        cJSON_AddBoolToObject(*ret, "truncated", truncated);
        free(list);
        return 0;
}

static int need_services(struct req *q, struct api_err *e)
{
        if (!q->d->services)
                return fail(e, "unavailable", "services are not available in this daemon");
        return 0;
}

static int m_start_service(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *name, *command, *workdir;
        struct service_info info;
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "name", true, &name, e) < 0 || p_string(q, "command", true, &command, e) < 0 ||
            p_string(q, "workdir", false, &workdir, e) < 0 || need_services(q, e) < 0)
                return -1;
        r = service_start(q->d->services, q->tok.user, q->session, name, command, workdir, &info, &err);
        if (r < 0)
                return fail_errno(e, r, &err, NULL);
        *ret = service_json(&info);
        return 0;
}

static int m_stop_service(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *name;
        struct service_info info;
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "name", true, &name, e) < 0 || need_services(q, e) < 0)
                return -1;
        r = service_stop(q->d->services, q->tok.user, q->session, name, &info, &err);
        if (r < 0)
                return fail_errno(e, r, &err, NULL);
        *ret = service_json(&info);
        return 0;
}

static int m_list_services(struct req *q, cJSON **ret, struct api_err *e)
{
        struct service_info *list = NULL;
        size_t n = 0;
        cJSON *a;
        int r;

        if (need_services(q, e) < 0)
                return -1;
        r = service_list(q->d->services, q->tok.user, q->session, &list, &n);
        if (r < 0)
                return fail_errno(e, r, NULL, "cannot list services");
        *ret = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(*ret, "services");
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToArray(a, service_json(&list[i]));
        free(list);
        return 0;
}

static int m_service_logs(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *name;
        int64_t tail;
        _cleanup_free_ char *out = NULL, *errs = NULL;
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "name", true, &name, e) < 0 || p_int(q, "tail_lines", 1, 10000, 100, &tail, e) < 0 ||
            need_services(q, e) < 0)
                return -1;
        r = service_logs(q->d->services, q->tok.user, q->session, name, (int)tail, &out, &errs, &err);
        if (r < 0)
                return fail_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "name", name);
        add_bytes(*ret, "stdout", out ? out : "", out ? strlen(out) : 0, false);
        add_bytes(*ret, "stderr", errs ? errs : "", errs ? strlen(errs) : 0, false);
        return 0;
}

static void add_datasets(cJSON *o, struct daemon *d, const char *user, const char *session)
{
        struct privacy_dataset *list = NULL;
        size_t n = 0;
        cJSON *a = cJSON_AddArrayToObject(o, "datasets");

        if (!d->privacy || privacy_list(d->privacy, user, session, &list, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                cJSON *x = cJSON_CreateObject();
                add_bytes(x, "dataset", list[i].dataset, strlen(list[i].dataset), false);
                add_text_or_null(x, "source", list[i].source);
                cJSON_AddNumberToObject(x, "marked_at", (double)list[i].marked_at);
                cJSON_AddItemToArray(a, x);
        }
        free(list);
}

static int m_session_info(struct req *q, cJSON **ret, struct api_err *e)
{
        struct session_info info;
        int r = session_get_info(q->d->sessions, q->tok.user, q->session, &info);

        if (r == -ENOENT) {
                /* First contact: create it, as any other call would. */
                if (preflight_session(q, e) < 0)
                        return -1;
                r = session_get_info(q->d->sessions, q->tok.user, q->session, &info);
        }
        if (r < 0)
                return fail_errno(e, r, NULL, "cannot read the session");
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", info.user);
        cJSON_AddStringToObject(*ret, "session", info.session);
        add_lower(*ret, "state", session_state_to_string(info.state));
        add_text_or_null(*ret, "network_mode", info.network_mode);
        cJSON_AddBoolToObject(*ret, "private",
                              q->d->privacy && privacy_is_private(q->d->privacy, q->tok.user, q->session));
        add_datasets(*ret, q->d, q->tok.user, q->session);
        add_ports(*ret, "ports", info.ports, info.n_ports, q->d->cfg.container_port_base);
        add_text_or_null(*ret, "container_id", info.container_id);
        add_text_or_null(*ret, "image", info.image);
        cJSON_AddNumberToObject(*ret, "created_at", (double)info.created_at);
        cJSON_AddNumberToObject(*ret, "last_activity", (double)info.last_activity);
        add_text_or_null(*ret, "last_error", info.last_error);
        add_text_or_null(*ret, "error_cause", info.error_cause);
        session_info_done(&info);
        return 0;
}

static int m_mark_private(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *dataset, *source;
        struct sbx_error err = {0};
        int r;

        if (q->tok.role != TOKEN_ROLE_CONNECTOR)
                return fail(e, "forbidden", "mark_private needs a connector token; this token's role is %s",
                            token_role_to_string(q->tok.role));
        if (p_string(q, "dataset", true, &dataset, e) < 0 || p_string(q, "source", false, &source, e) < 0)
                return -1;
        if (!q->d->privacy)
                return fail(e, "unavailable", "privacy marks are not available in this daemon");
        r = privacy_mark(q->d->privacy, q->tok.user, q->session, dataset, source, q->actor, &err);
        if (r < 0)
                return fail_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "session", q->session);
        add_datasets(*ret, q->d, q->tok.user, q->session);
        cJSON_AddStringToObject(*ret, "network_mode",
                                privacy_required_network(q->d->privacy, q->tok.user, q->session));
        return 0;
}

static const struct {
        const char *name;
        method_fn fn;
} methods[] = {
        {"exec", m_exec},
        {"run_code", m_run_code},
        {"get_execution", m_get_execution},
        {"send_stdin", m_send_stdin},
        {"cancel_execution", m_cancel_execution},
        {"list_executions", m_list_executions},
        {"write_file", m_write_file},
        {"read_file", m_read_file},
        {"list_files", m_list_files},
        {"start_service", m_start_service},
        {"stop_service", m_stop_service},
        {"list_services", m_list_services},
        {"service_logs", m_service_logs},
        {"session_info", m_session_info},
        {"mark_private", m_mark_private},
};

/* ---- requests ---- */

static void audit_auth_failure(struct api_conn *c, const char *reason, const char *method)
{
        cJSON *d = cJSON_CreateObject();
        char actor[48], *json;

        snprintf(actor, sizeof(actor), "peer:uid=%u", (unsigned)c->peer.uid);
        cJSON_AddNumberToObject(d, "peer_uid", c->peer.uid);
        cJSON_AddNumberToObject(d, "peer_pid", c->peer.pid);
        cJSON_AddStringToObject(d, "reason", reason);
        if (method) {
                _cleanup_free_ char *m = utf8_sanitize(method, strnlen(method, 64));
                cJSON_AddStringToObject(d, "method", m ? m : "");
        }
        json = cJSON_PrintUnformatted(d);
        (void)store_audit(c->srv->d->store, actor, NULL, NULL, "auth.fail", json);
        free(json);
        cJSON_Delete(d);
        log_warn("api: authentication failed from uid %u pid %d: %s", (unsigned)c->peer.uid, (int)c->peer.pid,
                 reason);
}

static void handle_line(struct api_conn *c, const char *line, size_t len)
{
        _cleanup_(cjson_deletep) cJSON *root = NULL;
        struct req q = {.c = c, .d = c->srv->d};
        const cJSON *token, *method, *params;
        struct api_err e = {0};
        cJSON *result = NULL;
        method_fn fn = NULL;
        int r;

        root = cJSON_ParseWithLength(line, len);
        if (!root || !cJSON_IsObject(root)) {
                send_error(c, NULL, "bad_request", root ? "a request must be a JSON object" : "malformed JSON");
                return;
        }
        q.id = cJSON_GetObjectItemCaseSensitive(root, "id");
        token = cJSON_GetObjectItemCaseSensitive(root, "token");
        method = cJSON_GetObjectItemCaseSensitive(root, "method");
        params = cJSON_GetObjectItemCaseSensitive(root, "params");
        q.method = cJSON_IsString(method) ? method->valuestring : NULL;

        /* Authenticate before saying anything else about the request. */
        if (!cJSON_IsString(token) || !token->valuestring || !*token->valuestring) {
                c->auth_failures++;
                audit_auth_failure(c, "missing token", q.method);
                send_error(c, q.id, "unauthorized", "a token is required");
                return;
        }
        r = token_verify(c->srv->d->store, token->valuestring, &q.tok);
        if (r < 0) {
                c->auth_failures++;
                if (r == -EACCES) {
                        audit_auth_failure(c, "unknown or revoked token", q.method);
                        send_error(c, q.id, "unauthorized", "the token is unknown or revoked");
                } else {
                        send_error(c, q.id, "unavailable", "cannot check the token now; retry");
                }
                return;
        }
        c->authenticated = true;
        snprintf(q.actor, sizeof(q.actor), "token:%s", q.tok.id);

        if (!q.method) {
                send_error(c, q.id, "bad_request", "method must be a string");
                return;
        }
        for (size_t i = 0; i < ELEMENTSOF(methods); i++)
                if (strcmp(methods[i].name, q.method) == 0)
                        fn = methods[i].fn;
        if (!fn) {
                _cleanup_free_ char *m = utf8_sanitize(q.method, strnlen(q.method, 64));
                snprintf(e.msg, sizeof(e.msg), "unknown method \"%s\"", m ? m : "");
                send_error(c, q.id, "bad_request", e.msg);
                return;
        }
        if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params)) {
                send_error(c, q.id, "bad_request", "params must be an object");
                return;
        }
        q.params = params && cJSON_IsObject(params) ? params : NULL;
        {
                const char *session = NULL;
                if (p_string(&q, "session", true, &session, &e) < 0) {
                        send_error(c, q.id, e.code, e.msg);
                        return;
                }
                if (!session_id_valid(session)) {
                        send_error(c, q.id, "invalid", "params.session must be 1-64 characters of [A-Za-z0-9_.-]");
                        return;
                }
                q.session = session;
        }
        log_ctx(LOG_LEVEL_INFO, q.tok.user, q.session, NULL, "api: %s (token %s, peer uid %u pid %d)", q.method,
                q.tok.id, (unsigned)c->peer.uid, (int)c->peer.pid);

        r = fn(&q, &result, &e);
        if (r == 1) {
                cJSON_Delete(result);
                return; /* the client is gone */
        }
        if (r < 0) {
                cJSON_Delete(result);
                send_error(c, q.id, e.code ? e.code : "internal", e.msg[0] ? e.msg : "internal error");
                return;
        }
        if (!result)
                send_error(c, q.id, "internal", "out of memory");
        else
                send_result(c, q.id, result);
}

/* ---- connections ---- */

static void serve(struct sockserver *ss, int fd, const struct ucred *peer, void *ud)
{
        struct api_server *srv = ud;
        struct api_conn conn = {.srv = srv, .fd = fd, .peer = *peer};
        struct api_conn *c = &conn;
        struct linereader lr;

        pthread_mutex_init(&c->wlock, NULL);
        linereader_init(&lr, fd, API_MAX_LINE);
        for (;;) {
                char *line;
                size_t len;
                int r = linereader_next(&lr, &line, &len, c->authenticated ? -1 : API_AUTH_TIMEOUT_MS,
                                        sockserver_stop_fd(ss));
                if (r == -E2BIG) {
                        send_error(c, NULL, "bad_request", "request line longer than API_MAX_LINE; closing");
                        break;
                }
                if (r == -ETIMEDOUT) {
                        send_error(c, NULL, "unauthorized", "no authenticated request in time; closing");
                        break;
                }
                if (r <= 0)
                        break;
                while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
                        line[--len] = '\0';
                if (len == 0)
                        continue;
                handle_line(c, line, len);
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
        r = sockserver_start("API", "sbx-api", d->cfg.api_socket, 0666, (gid_t)-1, API_MAX_CONNS, serve, srv,
                             &srv->ss, err);
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
