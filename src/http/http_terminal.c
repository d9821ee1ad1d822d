/* http_terminal.c — the console's terminal over a WebSocket (RFC 6455) on
 * the HTTPS front: GET /v1/terminal, upgraded through MHD's upgrade support
 * (MHD_ALLOW_UPGRADE, http.c), carrying a tty execution's output, input and
 * resizes. A thin translation: every act is an API method run through the
 * dispatcher as the token's user (exec, get_execution, send_stdin,
 * resize_terminal, cancel_execution), so the rules, limits and audit of any
 * execution hold.
 *
 * Before the upgrade (http_terminal_check, from request_begin): GET, Upgrade
 * websocket, Connection upgrade, Sec-WebSocket-Version 13, a valid key, the
 * subprotocol HTTP_TERMINAL_PROTOCOL offered, and an Origin, when the client
 * sends one (every browser does), of this very front (scheme and Host):
 * another origin is 403 and never upgraded. A non-browser client sends none
 * and cannot be a cross-site forgery.
 *
 * The token is never in the URL or a header: the first message, a text
 * frame {"type":"auth","token","session","rows","cols"}, must come within
 * TERM_AUTH_TIMEOUT_MS. A bad, expired or revoked token is closed with 4401,
 * any other refusal with 4000 + the HTTP status of its code (4403, 4404,
 * 4429...), so the console tells them apart.
 *
 * Then (client to server): binary frames are the shell's input, text frames
 * {"type":"resize","rows","cols"}. Server to client: {"type":"ready",
 * "execution_id","rows","cols"}, the output as binary frames, and at the end
 * {"type":"exit","state","exit_code"} and a 1000 close; {"type":"warning"}
 * when input or a resize was refused (the terminal goes on).
 *
 * Threads: per terminal, "sbx-http-term" (reads frames, runs the input and
 * resize methods, answers pings, ends the connection) and, once the shell
 * runs, "sbx-http-tout" (get_execution long-polls, output frames). Frames go
 * out under t->wlock, each write bounded by TERM_WRITE_TIMEOUT_S (a client
 * that does not read ends its terminal, no byte piles up in the daemon).
 * The first thread joins the second, closes the client's socket with
 * MHD_upgrade_action(CLOSE) as its last act, and frees t. Caps (term_lock):
 * TERM_MAX_TOTAL terminals at once, from the upgrade on, and
 * TERM_MAX_PER_USER per user once authenticated. http_terminal_stop ends
 * them all (a pipe each polls; gone() makes their API calls return) before
 * MHD_stop_daemon, which waits for every CLOSE. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/time.h>
#include <unistd.h>

#include "http_internal.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/log.h"
#include "sandboxd/metrics.h"
#include "sandboxd/reqguard.h"
#include "sandboxd/utf8.h"
#include "sandboxd/websocket.h"

#define TERM_MAX_TOTAL 64
#define TERM_MAX_PER_USER 8
#define TERM_MAX_MESSAGE (64 * 1024) /* a client's message: keys, a paste, a resize */
#define TERM_AUTH_TIMEOUT_MS 10000   /* the upgrade to the auth message */
#define TERM_PING_MS 30000           /* silence from the client this long: a ping */
#define TERM_IDLE_MS 75000           /* ... and this long: the client is gone */
#define TERM_CLOSE_WAIT_MS 2000      /* our close sent, the client's awaited */
#define TERM_WRITE_TIMEOUT_S 30
#define TERM_POLL_WAIT_S 10 /* a get_execution long-poll */
#define TERM_TIMEOUT_S 3600 /* the shell's limit (exec.timeout_max's default); refused: the default */
#define TERM_SHELL "exec \"${SHELL:-/bin/sh}\" -i"

struct term {
        struct http_server *srv;
        struct http_conn *hc; /* alive until the CLOSE below */
        struct MHD_UpgradeResponseHandle *urh;
        int fd;
        char peer[64];
        char user[65];
        char session[65];
        char exec_id[37];
        struct token_info tok;
        struct websocket_reader rd;
        pthread_mutex_t wlock; /* frames out */
        bool write_failed;     /* wlock */
        bool close_sent;       /* wlock */
        bool closing;          /* atomic: the reader is ending; the output thread stops after its call */
        bool calls_end;        /* atomic: API calls in flight return (gone) */
        int refs;              /* term_lock: the request's (http_terminal_done) and the thread's */
        bool out_done;         /* atomic: the output thread sent the exit and its close */
        int wake[2];           /* the output thread wakes the reader when it ends */
        bool counted_user;     /* term_lock */
        struct term *next;     /* term_lock */
};

static pthread_mutex_t term_lock = PTHREAD_MUTEX_INITIALIZER;
static struct term *terms; /* term_lock */
static size_t term_count;  /* term_lock */
static pthread_once_t quit_once = PTHREAD_ONCE_INIT;
static int quit_pipe[2] = {-1, -1}; /* readable once http_terminal_stop ran */

static void quit_init(void)
{
        if (pipe2(quit_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
                quit_pipe[0] = quit_pipe[1] = -1;
}

void http_terminal_stop(void)
{
        pthread_once(&quit_once, quit_init);
        if (quit_pipe[1] >= 0)
                (void)!write(quit_pipe[1], "q", 1);
}

/* ---- before the upgrade ---- */

/* Whether the comma-separated header value has token (case-insensitive). */
static bool has_token(const char *value, const char *token)
{
        size_t n = strlen(token);

        for (const char *p = value; p && *p;) {
                while (*p == ' ' || *p == '\t' || *p == ',')
                        p++;
                const char *end = strchr(p, ',');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
                        len--;
                if (len == n && strncasecmp(p, token, n) == 0)
                        return true;
                p = end;
        }
        return false;
}

/* An Origin of this front: "<scheme>://<Host>", the scheme ours. */
static bool origin_ours(struct http_server *srv, const char *origin, const char *host)
{
        const char *scheme = srv->cert ? "https://" : "http://";
        size_t n = strlen(scheme);

        if (!host || !host[0] || strncasecmp(origin, scheme, n) != 0)
                return false;
        return strcasecmp(origin + n, host) == 0;
}

int http_terminal_check(struct http_server *srv, struct MHD_Connection *conn, const char *verb, const char **ret_code,
                        char *msg, size_t msg_size)
{
#define LOOK(h) MHD_lookup_connection_value(conn, MHD_HEADER_KIND, (h))
        const char *upgrade = LOOK(MHD_HTTP_HEADER_UPGRADE), *connection = LOOK(MHD_HTTP_HEADER_CONNECTION);
        const char *version = LOOK("Sec-WebSocket-Version"), *key = LOOK("Sec-WebSocket-Key");
        const char *proto = LOOK("Sec-WebSocket-Protocol"), *origin = LOOK("Origin"),
                   *host = LOOK(MHD_HTTP_HEADER_HOST);
#undef LOOK

        *ret_code = "bad_request";
        if (strcmp(verb, MHD_HTTP_METHOD_GET) != 0) {
                snprintf(msg, msg_size, "the terminal is a WebSocket: GET with Upgrade: websocket");
                return 405;
        }
        /* the foreign origin first: a page of another site learns nothing else */
        if (origin && !origin_ours(srv, origin, host)) {
                *ret_code = "forbidden";
                snprintf(msg, msg_size, "the terminal answers pages of this origin only");
                return 403;
        }
        if (!upgrade || strcasecmp(upgrade, "websocket") != 0 || !connection || !has_token(connection, "upgrade")) {
                snprintf(msg, msg_size, "the terminal is a WebSocket: GET with Upgrade: websocket");
                return 426;
        }
        if (!version || strcmp(version, "13") != 0) {
                snprintf(msg, msg_size, "Sec-WebSocket-Version must be 13");
                return 426;
        }
        if (!websocket_key_valid(key)) {
                snprintf(msg, msg_size, "Sec-WebSocket-Key must be base64 of 16 bytes");
                return 400;
        }
        if (!proto || !has_token(proto, HTTP_TERMINAL_PROTOCOL)) {
                snprintf(msg, msg_size, "Sec-WebSocket-Protocol must offer %s", HTTP_TERMINAL_PROTOCOL);
                return 400;
        }
        return 0;
}

/* ---- frames out ---- */

/* Header and payload in one write, so MHD's relay makes one TLS record of
 * them. */
static int send_all(int fd, const void *head, size_t head_len, const void *data, size_t len)
{
        struct iovec iov[2] = {{(void *)head, head_len}, {(void *)data, len}};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};

        while (iov[0].iov_len || iov[1].iov_len) {
                ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return -1; /* EAGAIN: SO_SNDTIMEO passed, the client does not read */
                for (int i = 0; i < 2 && n > 0; i++) {
                        size_t k = (size_t)n < iov[i].iov_len ? (size_t)n : iov[i].iov_len;
                        iov[i].iov_base = (char *)iov[i].iov_base + k;
                        iov[i].iov_len -= k;
                        n -= (ssize_t)k;
                }
                if (!iov[0].iov_len) {
                        mh.msg_iov = &iov[1];
                        mh.msg_iovlen = 1;
                }
        }
        return 0;
}

static int send_frame(struct term *t, enum websocket_opcode op, const void *data, size_t len)
{
        uint8_t h[WEBSOCKET_HEADER_MAX];
        size_t hl = websocket_frame_header(h, op, len);
        int r = -1;

        pthread_mutex_lock(&t->wlock);
        if (!t->write_failed && !t->close_sent) {
                r = send_all(t->fd, h, hl, data, len);
                if (r < 0)
                        t->write_failed = true;
                if (op == WEBSOCKET_CLOSE)
                        t->close_sent = true;
        }
        pthread_mutex_unlock(&t->wlock);
        return r;
}

static void send_json(struct term *t, cJSON *o)
{
        _cleanup_free_ char *s = o ? cJSON_PrintUnformatted(o) : NULL;

        cJSON_Delete(o);
        if (s)
                (void)send_frame(t, WEBSOCKET_TEXT, s, strlen(s));
}

static void send_close(struct term *t, int code, const char *reason)
{
        uint8_t buf[WEBSOCKET_CONTROL_MAX];
        size_t n = 0;

        if (code != WEBSOCKET_CLOSE_NO_STATUS) {
                buf[0] = (uint8_t)(code >> 8);
                buf[1] = (uint8_t)code;
                n = strlen(reason ? reason : "");
                if (n > sizeof(buf) - 2)
                        n = sizeof(buf) - 2;
                n -= utf8_incomplete_tail((const unsigned char *)reason, n);
                memcpy(buf + 2, reason ? reason : "", n);
                n += 2;
        }
        (void)send_frame(t, WEBSOCKET_CLOSE, buf, n);
}

/* {"type":"error"} and the close that goes with e's code. */
static void send_refusal(struct term *t, const struct fronterr *e)
{
        cJSON *o = cJSON_CreateObject();
        int status = http_status_for_code(e->code);

        cJSON_AddStringToObject(o, "type", "error");
        cJSON_AddStringToObject(o, "code", e->code ? e->code : "internal");
        jsonutil_add_text(o, "message", e->msg);
        send_json(t, o);
        send_close(t, status >= 400 && status <= 599 ? 4000 + status : WEBSOCKET_CLOSE_INTERNAL, e->code);
}

/* ---- the API, as the token's user ---- */

static void drop_progress(struct api_conn *c, cJSON *msg)
{
        (void)c;
        (void)msg;
}

static bool term_gone(struct api_conn *c)
{
        struct term *t = c->transport;
        return http_stopping(t->srv) || __atomic_load_n(&t->calls_end, __ATOMIC_ACQUIRE);
}

static void term_conn(struct term *t, struct api_conn *ret)
{
        memset(ret, 0, sizeof(*ret));
        ret->d = t->srv->d;
        ret->fd = -1;
        ret->peer_addr = t->peer;
        ret->send = drop_progress;
        ret->gone = term_gone;
        ret->transport = t;
        pthread_mutex_init(&ret->wlock, NULL);
}

/* method(params, taken) as the token's user: 0 with *ret, -1 with e. */
static int term_call(struct term *t, const char *method, cJSON *params, cJSON **ret, struct fronterr *e)
{
        struct api_conn c;
        int r;

        *ret = NULL;
        if (!params)
                return fronterr_set(e, "internal", "out of memory");
        term_conn(t, &c);
        r = api_call(&c, &t->tok, NULL, method, params, ret, e);
        cJSON_Delete(params);
        pthread_mutex_destroy(&c.wlock);
        if (r == 1)
                return fronterr_set(e, "unavailable", "the terminal closed");
        return r < 0 ? -1 : 0;
}

static cJSON *exec_params(struct term *t)
{
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "session", t->session);
        cJSON_AddStringToObject(p, "execution_id", t->exec_id);
        return p;
}

/* ---- output ---- */

static void *output_main(void *arg)
{
        struct term *t = arg;
        int64_t off = 0;

        for (;;) {
                cJSON *p = exec_params(t), *res = NULL, *o;
                struct fronterr e = {0};
                const char *state, *b64;
                unsigned char *raw = NULL;
                size_t n = 0;
                double next, total;

                cJSON_AddNumberToObject(p, "wait", TERM_POLL_WAIT_S);
                cJSON_AddNumberToObject(p, "stdout_offset", (double)off);
                cJSON_AddStringToObject(p, "encoding", "base64");
                if (term_call(t, "get_execution", p, &res, &e) < 0) {
                        if (!__atomic_load_n(&t->closing, __ATOMIC_ACQUIRE))
                                send_refusal(t, &e);
                        break;
                }
                b64 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "stdout"));
                next = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "stdout_next_offset"));
                total = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "stdout_bytes"));
                state = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "state"));
                if (b64 && b64[0] && next > (double)off && base64_decode(b64, strlen(b64), &raw, &n) == 0) {
                        off = (int64_t)next;
                        if (n && send_frame(t, WEBSOCKET_BINARY, raw, n) < 0) {
                                free(raw);
                                cJSON_Delete(res);
                                break;
                        }
                }
                free(raw);
                if (state && strcmp(state, "running") != 0 && strcmp(state, "pending") != 0 && !(total > (double)off)) {
                        o = cJSON_CreateObject();
                        cJSON_AddStringToObject(o, "type", "exit");
                        cJSON_AddStringToObject(o, "state", state);
                        cJSON_AddItemToObject(o, "exit_code",
                                              cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(res, "exit_code"), 1));
                        send_json(t, o);
                        send_close(t, WEBSOCKET_CLOSE_NORMAL, "the shell ended");
                        cJSON_Delete(res);
                        break;
                }
                cJSON_Delete(res);
                if (__atomic_load_n(&t->closing, __ATOMIC_ACQUIRE))
                        break;
        }
        __atomic_store_n(&t->out_done, true, __ATOMIC_RELEASE);
        (void)!write(t->wake[1], "o", 1);
        return NULL;
}

/* ---- input ---- */

static bool size_ok(const cJSON *o, int *ret_rows, int *ret_cols)
{
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "rows"), *c = cJSON_GetObjectItemCaseSensitive(o, "cols");

        if (!cJSON_IsNumber(r) || !cJSON_IsNumber(c) || r->valuedouble < 1 || r->valuedouble > 1000 ||
            c->valuedouble < 1 || c->valuedouble > 1000 || r->valuedouble != (int)r->valuedouble ||
            c->valuedouble != (int)c->valuedouble)
                return false;
        *ret_rows = (int)r->valuedouble;
        *ret_cols = (int)c->valuedouble;
        return true;
}

static cJSON *parse_message(const struct websocket_message *m)
{
        cJSON *o;

        if (reqguard_scan((const char *)m->data, m->len, 16, 2) != REQGUARD_OK)
                return NULL;
        o = cJSON_ParseWithLength((const char *)m->data, m->len);
        if (!cJSON_IsObject(o)) {
                cJSON_Delete(o);
                return NULL;
        }
        return o;
}

static void warn(struct term *t, const struct fronterr *e)
{
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "warning");
        cJSON_AddStringToObject(o, "code", e->code ? e->code : "internal");
        jsonutil_add_text(o, "message", e->msg);
        send_json(t, o);
}

/* A message of the running shell's: 0, or -1 to end with a 1008/1003 close. */
static int on_message(struct term *t, const struct websocket_message *m)
{
        struct fronterr e = {0};
        cJSON *p, *res = NULL;

        if (m->op == WEBSOCKET_BINARY) {
                _cleanup_free_ char *b64 = m->len ? base64_encode(m->data, m->len) : NULL;
                if (!m->len)
                        return 0;
                if (!b64)
                        return -1;
                p = exec_params(t);
                cJSON_AddStringToObject(p, "data", b64);
                cJSON_AddStringToObject(p, "encoding", "base64");
                if (term_call(t, "send_stdin", p, &res, &e) < 0)
                        warn(t, &e);
                cJSON_Delete(res);
                return 0;
        }
        _cleanup_(cjson_freep) cJSON *o = parse_message(m);
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "type"));
        int rows, cols;

        if (!type || strcmp(type, "resize") != 0 || !size_ok(o, &rows, &cols)) {
                send_close(t, WEBSOCKET_CLOSE_POLICY, "expected {\"type\":\"resize\",\"rows\",\"cols\"} or input");
                return -1;
        }
        p = exec_params(t);
        cJSON_AddNumberToObject(p, "rows", rows);
        cJSON_AddNumberToObject(p, "cols", cols);
        if (term_call(t, "resize_terminal", p, &res, &e) < 0)
                warn(t, &e);
        cJSON_Delete(res);
        return 0;
}

/* ---- the connection ---- */

/* The first message: the token, then the shell. 0 with the output thread
 * started, -1 when the connection ends (its close sent). */
static int start(struct term *t, const struct websocket_message *m, pthread_t *ret_out)
{
        struct fronterr e = {0};
        struct api_conn c;
        cJSON *p, *res = NULL, *o;
        const char *token, *session, *id;
        int rows, cols, r;
        bool over = false;

        _cleanup_(cjson_freep) cJSON *auth = m->op == WEBSOCKET_TEXT ? parse_message(m) : NULL;
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(auth, "type"));
        token = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(auth, "token"));
        session = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(auth, "session"));
        if (!type || strcmp(type, "auth") != 0 || !token || !session || !size_ok(auth, &rows, &cols)) {
                send_close(t, WEBSOCKET_CLOSE_POLICY,
                           "the first message is {\"type\":\"auth\",\"token\",\"session\",\"rows\",\"cols\"}");
                return -1;
        }
        term_conn(t, &c);
        r = api_authenticate(&c, token, "exec", &t->tok, &e);
        pthread_mutex_destroy(&c.wlock);
        if (r < 0) {
                send_refusal(t, &e);
                return -1;
        }
        __atomic_store_n(&t->hc->authed, true, __ATOMIC_RELAXED); /* out of the unauthenticated budget */
        if (!session_id_valid(session)) {
                fronterr_set(&e, "bad_request", "session must be a session name");
                send_refusal(t, &e);
                return -1;
        }
        sbx_strlcpy(t->user, t->tok.user, sizeof(t->user));
        sbx_strlcpy(t->session, session, sizeof(t->session));

        pthread_mutex_lock(&term_lock);
        {
                size_t mine = 0;
                for (struct term *x = terms; x; x = x->next)
                        mine += x->counted_user && strcmp(x->user, t->user) == 0;
                if (mine >= TERM_MAX_PER_USER)
                        over = true;
                else
                        t->counted_user = true;
        }
        pthread_mutex_unlock(&term_lock);
        if (over) {
                fronterr_set(&e, "busy", "%d terminals of this user are open already", TERM_MAX_PER_USER);
                send_refusal(t, &e);
                return -1;
        }

        for (int attempt = 0; attempt < 2; attempt++) {
                p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "session", t->session);
                cJSON_AddStringToObject(p, "command", TERM_SHELL);
                cJSON_AddBoolToObject(p, "tty", true);
                cJSON_AddNumberToObject(p, "rows", rows);
                cJSON_AddNumberToObject(p, "cols", cols);
                cJSON_AddBoolToObject(p, "background", true);
                if (attempt == 0)
                        cJSON_AddNumberToObject(p, "timeout_seconds", TERM_TIMEOUT_S);
                r = term_call(t, "exec", p, &res, &e);
                /* a daemon whose exec.timeout_max is lower: its default limit */
                if (r == 0 || attempt == 1 || !strstr(e.msg, "timeout_seconds"))
                        break;
        }
        if (r < 0) {
                send_refusal(t, &e);
                return -1;
        }
        id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "execution_id"));
        if (!id || !sbx_strlcpy(t->exec_id, id, sizeof(t->exec_id))) {
                cJSON_Delete(res);
                fronterr_set(&e, "internal", "exec answered no execution id");
                send_refusal(t, &e);
                return -1;
        }
        cJSON_Delete(res);
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "ready");
        cJSON_AddStringToObject(o, "execution_id", t->exec_id);
        cJSON_AddNumberToObject(o, "rows", rows);
        cJSON_AddNumberToObject(o, "cols", cols);
        send_json(t, o);
        if (pthread_create(ret_out, NULL, output_main, t) != 0) {
                fronterr_set(&e, "unavailable", "no thread for the terminal's output");
                send_refusal(t, &e);
                return -1;
        }
        (void)pthread_setname_np(*ret_out, "sbx-http-tout");
        return 0;
}

/* Drop a reference; the last frees t and gives its slot back. */
static void term_put(struct term *t)
{
        pthread_mutex_lock(&term_lock);
        if (--t->refs > 0) {
                pthread_mutex_unlock(&term_lock);
                return;
        }
        for (struct term **pp = &terms; *pp; pp = &(*pp)->next)
                if (*pp == t) {
                        *pp = t->next;
                        break;
                }
        term_count--;
        pthread_mutex_unlock(&term_lock);
        websocket_reader_done(&t->rd);
        if (t->wake[0] >= 0)
                close(t->wake[0]);
        if (t->wake[1] >= 0)
                close(t->wake[1]);
        pthread_mutex_destroy(&t->wlock);
        free(t);
}

static void *term_main(void *arg)
{
        struct term *t = arg;
        pthread_t out;
        bool started = false, peer_closed = false, draining = false;
        int64_t opened = sbx_now_ms(), heard = opened, pinged = 0, close_due = 0;

        pthread_once(&quit_once, quit_init);
        while (!peer_closed && !__atomic_load_n(&t->write_failed, __ATOMIC_RELAXED)) {
                struct pollfd pf[3] = {{.fd = t->fd, .events = POLLIN},
                                       {.fd = quit_pipe[0], .events = POLLIN},
                                       {.fd = t->wake[0], .events = POLLIN}};
                struct websocket_message m;
                int64_t now = sbx_now_ms(), due;
                size_t room;
                uint8_t *space;
                ssize_t n;
                int k;

                bool closed_by_us;
                pthread_mutex_lock(&t->wlock);
                closed_by_us = t->close_sent;
                pthread_mutex_unlock(&t->wlock);
                if (closed_by_us && !close_due)
                        close_due = now + TERM_CLOSE_WAIT_MS;
                due = !started ? opened + TERM_AUTH_TIMEOUT_MS : heard + (pinged ? TERM_IDLE_MS : TERM_PING_MS);
                if (close_due && close_due < due)
                        due = close_due;
                if (now >= due) {
                        if (close_due || !started || pinged)
                                break;
                        (void)send_frame(t, WEBSOCKET_PING, "", 0);
                        pinged = now;
                        continue;
                }
                if (poll(pf, 3, (int)(due - now)) < 0 && errno != EINTR)
                        break;
                if (pf[1].revents) {
                        send_close(t, WEBSOCKET_CLOSE_GOING_AWAY, "the daemon stops");
                        break;
                }
                if (pf[2].revents) {
                        char c;
                        (void)!read(t->wake[0], &c, 1);
                        continue; /* the output ended: its close is out (close_due), or it failed */
                }
                if (!pf[0].revents)
                        continue;
                if (draining) {
                        /* our close is out for a fault: what the client still sends is read and
                         * dropped until its close or TERM_CLOSE_WAIT_MS (closing on unread bytes
                         * would reset the connection before the client read our close) */
                        uint8_t scratch[4096];
                        n = recv(t->fd, scratch, sizeof(scratch), MSG_DONTWAIT);
                        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                                continue;
                        if (n <= 0)
                                break;
                        continue;
                }
                space = websocket_reader_space(&t->rd, &room);
                n = room ? recv(t->fd, space, room, MSG_DONTWAIT) : 0;
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        continue;
                if (n <= 0)
                        break;
                websocket_reader_commit(&t->rd, (size_t)n);
                heard = sbx_now_ms();
                pinged = 0;
                while ((k = websocket_reader_next(&t->rd, &m)) == 1) {
                        if (m.op == WEBSOCKET_CLOSE) {
                                send_close(t, m.code == WEBSOCKET_CLOSE_NO_STATUS ? WEBSOCKET_CLOSE_NORMAL : m.code,
                                           "");
                                peer_closed = true;
                                break;
                        }
                        if (m.op == WEBSOCKET_PING) {
                                (void)send_frame(t, WEBSOCKET_PONG, m.data, m.len);
                                continue;
                        }
                        if (m.op == WEBSOCKET_PONG || close_due)
                                continue; /* closing: data is dropped */
                        if (!started) {
                                if (start(t, &m, &out) < 0) {
                                        draining = true;
                                        break;
                                }
                                started = true;
                        } else if (on_message(t, &m) < 0) {
                                draining = true;
                                break;
                        }
                }
                if (k < 0) {
                        send_close(t, t->rd.close_code, "malformed frame");
                        draining = true;
                }
        }
        __atomic_store_n(&t->closing, true, __ATOMIC_RELEASE);
        if (started) {
                if (!__atomic_load_n(&t->out_done, __ATOMIC_ACQUIRE)) {
                        /* the shell goes with its terminal (the output's long-poll then returns) */
                        struct fronterr e = {0};
                        cJSON *p = exec_params(t), *res = NULL;
                        cJSON_AddBoolToObject(p, "force", true);
                        (void)term_call(t, "cancel_execution", p, &res, &e);
                        cJSON_Delete(res);
                }
                __atomic_store_n(&t->calls_end, true, __ATOMIC_RELEASE);
                pthread_join(out, NULL);
        }
        pthread_mutex_lock(&term_lock);
        t->counted_user = false;
        pthread_mutex_unlock(&term_lock);
        (void)MHD_upgrade_action(t->urh, MHD_UPGRADE_ACTION_CLOSE);
        term_put(t);
        return NULL;
}

/* MHD's upgrade handler, on the connection's thread once the 101 is out. */
static void term_upgraded(void *cls, struct MHD_Connection *conn, void *req_cls, const char *extra_in,
                          size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
        struct term *t = cls;
        struct timeval tv = {.tv_sec = TERM_WRITE_TIMEOUT_S};
        pthread_attr_t attr;
        pthread_t th;
        int e = -1;

        (void)conn;
        (void)req_cls;
        t->fd = sock;
        t->urh = urh;
        pthread_mutex_lock(&term_lock);
        t->refs++; /* the thread's (or the fail path's) */
        pthread_mutex_unlock(&term_lock);
        (void)fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) & ~O_NONBLOCK);
        /* keystrokes and their echo are small frames each way: without this, Nagle holds
         * a frame until the client's delayed ACK of the one before (about 40 ms) */
        if (t->hc->fd >= 0)
                (void)setsockopt(t->hc->fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
        (void)setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (extra_in_size && websocket_reader_feed(&t->rd, extra_in, extra_in_size) < 0)
                goto fail;
        if (pthread_attr_init(&attr) != 0)
                goto fail;
        (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        e = pthread_create(&th, &attr, term_main, t);
        pthread_attr_destroy(&attr);
        if (e != 0)
                goto fail;
        (void)pthread_setname_np(th, "sbx-http-term");
        return;
fail:
        log_warn("http: terminal: cannot start (%s)", e > 0 ? strerror(e) : "no memory");
        (void)MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        term_put(t);
}

void http_terminal_done(struct term *t)
{
        if (t)
                term_put(t);
}

enum MHD_Result http_terminal_request(struct http_server *srv, struct MHD_Connection *conn, struct http_conn *hc,
                                      struct term **ret)
{
        const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-WebSocket-Key");
        char accept[WEBSOCKET_ACCEPT_LEN + 1];
        struct MHD_Response *resp;
        struct term *t;
        enum MHD_Result r;

        if (websocket_accept_key(key, accept) < 0)
                return http_queue_error(conn, 400, "bad_request", "Sec-WebSocket-Key must be base64 of 16 bytes", true);
        t = calloc(1, sizeof(*t));
        if (!t)
                return MHD_NO;
        t->srv = srv;
        t->hc = hc;
        t->fd = -1;
        t->wake[0] = t->wake[1] = -1;
        sbx_strlcpy(t->peer, hc->peer, sizeof(t->peer));
        pthread_mutex_init(&t->wlock, NULL);
        if (websocket_reader_init(&t->rd, TERM_MAX_MESSAGE) < 0 || pipe2(t->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
                websocket_reader_done(&t->rd);
                if (t->wake[0] >= 0) {
                        close(t->wake[0]);
                        close(t->wake[1]);
                }
                pthread_mutex_destroy(&t->wlock);
                free(t);
                return http_queue_error(conn, 503, "unavailable", "out of memory", true);
        }
        pthread_mutex_lock(&term_lock);
        if (term_count >= TERM_MAX_TOTAL) {
                pthread_mutex_unlock(&term_lock);
                websocket_reader_done(&t->rd);
                close(t->wake[0]);
                close(t->wake[1]);
                pthread_mutex_destroy(&t->wlock);
                free(t);
                return http_queue_error(conn, 503, "busy", "too many terminals are open; try again later", true);
        }
        term_count++;
        t->refs = 1; /* the request's: *ret, until on_completed */
        t->next = terms;
        terms = t;
        pthread_mutex_unlock(&term_lock);

        *ret = t;
        resp = MHD_create_response_for_upgrade(term_upgraded, t);
        if (!resp)
                return MHD_NO; /* on_completed drops the request's reference */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
        MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
        MHD_add_response_header(resp, "Sec-WebSocket-Protocol", HTTP_TERMINAL_PROTOCOL);
        r = MHD_queue_response(conn, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
        MHD_destroy_response(resp);
        metrics_http_status(MHD_HTTP_SWITCHING_PROTOCOLS);
        return r;
}
