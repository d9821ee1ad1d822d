/* egress.c — the daemon's egress proxy (egress.h): HTTP CONNECT and
 * absolute-URI HTTP requests from a session's runner, default deny, the
 * allowlist, the SSRF guard, caps, an audit row for every decision.
 *
 * libevent drives it: one event_base in the thread "sbx-egress", a
 * bufferevent per side of every connection, read high-watermarks and the
 * le-proxy pattern (stop reading one side while the other's output is over
 * RELAY_HIGH), so a connection holds at most a few hundred KiB however fast
 * either end is. http_parser (Debian libhttp-parser) parses the request head
 * and tracks where a request's body ends; the head's end is found first
 * (CRLF CRLF within egress_max_header) and exactly those bytes are fed to
 * the parser, so the bytes after it are the body or the tunnel's, unparsed.
 * Names are resolved with evdns (egress_resolve overrides first), and the
 * proxy connects to the very address it judged: no second lookup, no DNS
 * rebinding window. Plain HTTP is one request per connection: the request
 * goes upstream with `Connection: close` and the connection ends with the
 * response.
 *
 * Threads and locks: the loop thread owns every tunnel and the libevent
 * objects. egress_accept and egress_close_session (any thread) hand work
 * over through eg->lock (the queues) and an event activated across threads
 * (evthread_use_pthreads); egress_close_session waits on eg->done_cond.
 * eg->lock also guards the list of struct esess against readers of the
 * statistics; the counters themselves are atomics. The store is called from
 * the loop thread (an indexed lookup per connection, a row per decision). */
#include "sandboxd/egress.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <event2/util.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandboxd/egress_policy.h"
#include "sandboxd/log.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/store_egress.h"
#include "egress_internal.h"

#define RELAY_HIGH (256 * 1024)   /* bytes buffered per direction before reading pauses */
#define RELAY_CHUNK (64 * 1024)  /* largest single read or write */
#define MAX_PENDING 4096          /* accepted fds waiting for the loop */
#define LOG_WINDOW_MS 60000       /* blocked rows per session: at most LOG_BLOCKED_MAX a minute */
#define LOG_BLOCKED_MAX 60
#define SESSION_FORGET_MS 600000  /* a session with no tunnel this long is forgotten */
#define CLOSE_WAIT_MS 5000

struct pending {
        struct pending *next;
        char user[65], session[65];
        int fd;
};

struct close_req {
        struct close_req *next;
        char user[65], session[65];
        uint64_t gen; /* done once eg->close_done >= gen */
        bool taken;
};

struct egress {
        struct sbx_config cfg;
        struct store *store;
        char **allow;
        size_t n_allow;
        struct egress_cidr *priv;
        size_t n_priv;
        struct egress_override *ovr;
        size_t n_ovr;
        char up_host[EGRESS_HOST_MAX];
        int up_port;

        struct event_base *base;
        struct evdns_base *dns;
        struct event *wake;
        struct event *sweep;
        pthread_t thread;
        bool started;

        pthread_mutex_t lock; /* pending, closes, stopping, sessions (the list) */
        pthread_cond_t done_cond;
        struct pending *pending, **pending_tail;
        size_t n_pending;
        struct close_req *closes; /* on the waiters' stacks; read only under the lock */
        uint64_t close_gen, close_done;
        bool stopping;
        struct esess *sessions;

        atomic_int n_open;
        atomic_uint_least64_t allowed, blocked;
};

static pthread_once_t evthread_once = PTHREAD_ONCE_INIT;
static int evthread_rc;

static void evthread_init(void) { evthread_rc = evthread_use_pthreads(); }

static void tunnel_finish(struct tunnel *t, const char *reason);
static void relay_read(struct bufferevent *bev, void *arg);
static void relay_event(struct bufferevent *bev, short what, void *arg);
static void head_read(struct bufferevent *bev, void *arg);
static void try_connect(struct tunnel *t);

/* ---- sessions ---- */

static struct esess *sess_find(struct egress *eg, const char *user, const char *session)
{
        for (struct esess *s = eg->sessions; s; s = s->next)
                if (strcmp(s->user, user) == 0 && strcmp(s->session, session) == 0)
                        return s;
        return NULL;
}

/* Loop thread only (it is the only one that adds or removes). */
static struct esess *sess_get(struct egress *eg, const char *user, const char *session)
{
        struct esess *s = sess_find(eg, user, session);

        if (s)
                return s;
        s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        sbx_strlcpy(s->user, user, sizeof(s->user));
        sbx_strlcpy(s->session, session, sizeof(s->session));
        s->last_used = sbx_now_ms();
        pthread_mutex_lock(&eg->lock);
        s->next = eg->sessions;
        eg->sessions = s;
        pthread_mutex_unlock(&eg->lock);
        return s;
}

/* Forget idle sessions that hold no tunnel and were not closed by the ratchet. */
static void sess_sweep(evutil_socket_t fd, short what, void *arg)
{
        struct egress *eg = arg;
        int64_t now = sbx_now_ms();

        pthread_mutex_lock(&eg->lock);
        for (struct esess **pp = &eg->sessions; *pp;) {
                struct esess *s = *pp;
                if (!s->tunnels && !s->closed && now - s->last_used > SESSION_FORGET_MS) {
                        *pp = s->next;
                        free(s);
                } else {
                        pp = &s->next;
                }
        }
        pthread_mutex_unlock(&eg->lock);
}

/* ---- audit ---- */

static void record(struct tunnel *t, bool allowed, const char *reason)
{
        struct egress *eg = t->eg;
        struct esess *s = t->s;
        struct store_egress_entry row = {0};
        int64_t now = sbx_now_ms();

        if (allowed) {
                atomic_fetch_add(&eg->allowed, 1);
                atomic_fetch_add(&s->allowed, 1);
        } else {
                atomic_fetch_add(&eg->blocked, 1);
                atomic_fetch_add(&s->blocked, 1);
                /* a tenant can produce blocked decisions as fast as it connects:
                 * write at most LOG_BLOCKED_MAX a minute, and count the rest */
                if (now - s->log_window_start >= LOG_WINDOW_MS) {
                        s->log_window_start = now;
                        s->log_window_rows = 0;
                }
                if (s->log_window_rows >= LOG_BLOCKED_MAX) {
                        s->suppressed++;
                        return;
                }
                s->log_window_rows++;
        }
        row.ts = t->started_wall;
        sbx_strlcpy(row.host, t->host[0] ? t->host : "-", sizeof(row.host));
        row.port = t->port;
        sbx_strlcpy(row.method, t->method[0] ? t->method : "-", sizeof(row.method));
        sbx_strlcpy(row.decision, allowed ? "allowed" : "blocked", sizeof(row.decision));
        sbx_strlcpy(row.reason, reason, sizeof(row.reason));
        sbx_strlcpy(row.address, t->address, sizeof(row.address));
        row.bytes_up = t->bytes_up;
        row.bytes_down = t->bytes_down;
        row.duration_ms = now - t->started;
        row.suppressed = s->suppressed;
        if (store_egress_log_add(eg->store, s->user, s->session, &row) == 0)
                s->suppressed = 0;
        else
                log_ctx(LOG_LEVEL_WARN, s->user, s->session, NULL, "egress: cannot write an audit row");
}

/* ---- tunnels ---- */

/* Forget a pending lookup: its callback (which frees the context) then
 * finds no tunnel. */
static void dns_drop(struct tunnel *t)
{
        struct evdns_getaddrinfo_request *req = t->dns_req;

        if (!t->dns)
                return;
        t->dns->t = NULL;
        t->dns = NULL;
        t->dns_req = NULL;
        if (req)
                evdns_getaddrinfo_cancel(req);
}

static void tunnel_free(struct tunnel *t)
{
        struct egress *eg = t->eg;

        dns_drop(t);
        if (t->s) {
                if (t->prev)
                        t->prev->next = t->next;
                else
                        t->s->tunnels = t->next;
                if (t->next)
                        t->next->prev = t->prev;
                atomic_fetch_sub(&t->s->n_open, 1);
                t->s->last_used = sbx_now_ms();
        }
        atomic_fetch_sub(&eg->n_open, 1);
        /* libevent may close the fds a little later (finalizers): the peers see
         * the end now, which the ratchet promises */
        if (t->cli) {
                shutdown(bufferevent_getfd(t->cli), SHUT_RDWR);
                bufferevent_free(t->cli);
        }
        if (t->up) {
                shutdown(bufferevent_getfd(t->up), SHUT_RDWR);
                bufferevent_free(t->up);
        }
        if (t->timer)
                event_free(t->timer);
        free(t->arena);
        free(t);
}

static void close_after_flush(struct bufferevent *bev, void *arg)
{
        struct tunnel *t = arg;
        if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
                tunnel_free(t);
}

static void close_after_flush_event(struct bufferevent *bev, short what, void *arg)
{
        tunnel_free(arg);
}

/* Refuse: an error response to the client, then close once it is written. */
static void tunnel_refuse(struct tunnel *t, int status, const char *reason, const char *detail)
{
        static const struct {
                int status;
                const char *text;
        } texts[] = {
                {400, "Bad Request"}, {403, "Forbidden"}, {408, "Request Timeout"}, {429, "Too Many Requests"},
                {431, "Request Header Fields Too Large"}, {502, "Bad Gateway"}, {503, "Service Unavailable"},
                {504, "Gateway Timeout"},
        };
        const char *text = "Error";
        char body[512];
        int n;

        if (t->finished)
                return;
        t->finished = true;
        record(t, false, reason);
        dns_drop(t);
        if (t->up) {
                bufferevent_free(t->up);
                t->up = NULL;
        }
        if (t->timer)
                event_del(t->timer);
        for (size_t i = 0; i < ELEMENTSOF(texts); i++)
                if (texts[i].status == status)
                        text = texts[i].text;
        n = snprintf(body, sizeof(body), "sandboxd egress: %s%s%s\n", reason, detail ? ": " : "", detail ? detail : "");
        if (n < 0 || (size_t)n >= sizeof(body))
                n = (int)strlen(body);
        if (!t->cli) {
                tunnel_free(t);
                return;
        }
        bufferevent_disable(t->cli, EV_READ);
        evbuffer_add_printf(bufferevent_get_output(t->cli),
                            "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                            "Connection: close\r\nX-Sandboxd-Egress: %s\r\n\r\n%.*s",
                            status, text, n, reason, n, body);
        bufferevent_setcb(t->cli, NULL, close_after_flush, close_after_flush_event, t);
        bufferevent_enable(t->cli, EV_WRITE);
}

/* The end of an allowed tunnel: its row, then close. */
static void tunnel_finish(struct tunnel *t, const char *reason)
{
        if (t->finished)
                return;
        t->finished = true;
        record(t, true, reason);
        tunnel_free(t);
}

static void arm(struct tunnel *t, int ms)
{
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        evtimer_add(t->timer, &tv);
}

static void tunnel_timer(evutil_socket_t fd, short what, void *arg)
{
        struct tunnel *t = arg;
        int64_t idle;

        switch (t->state) {
        case T_HEAD:
                tunnel_refuse(t, 408, "header_timeout", "the request head did not arrive in time");
                return;
        case T_RESOLVE:
        case T_CONNECT:
        case T_PROXY_HS:
                tunnel_refuse(t, 504, "connect_timeout", t->host);
                return;
        case T_RELAY:
                idle = sbx_now_ms() - t->last_activity;
                if (idle >= t->eg->cfg.egress_idle_timeout_ms)
                        tunnel_finish(t, "idle_timeout");
                else
                        arm(t, (int)(t->eg->cfg.egress_idle_timeout_ms - idle));
                return;
        }
}

/* ---- policy ---- */

static bool host_allowed(struct tunnel *t)
{
        struct store_egress_rule *rules = NULL;
        size_t n = 0;
        bool ok = false;

        for (size_t i = 0; i < t->eg->n_allow && !ok; i++)
                ok = egress_pattern_match(t->eg->allow[i], t->host, t->port);
        if (!ok && store_egress_rules(t->eg->store, t->s->user, t->s->session, &rules, &n) == 0)
                for (size_t i = 0; i < n && !ok; i++)
                        ok = egress_pattern_match(rules[i].pattern, t->host, t->port);
        free(rules);
        return ok;
}

static bool rate_ok(struct tunnel *t)
{
        struct esess *s = t->s;
        int64_t now = sbx_now_ms();

        if (now - s->window_start >= 60000) {
                s->window_start = now;
                s->window_count = 0;
        }
        return ++s->window_count <= t->eg->cfg.egress_conns_per_minute;
}

static bool bytes_over(struct tunnel *t)
{
        int64_t cap = t->eg->cfg.egress_max_bytes_per_session;
        return cap > 0 && atomic_load(&t->s->bytes) >= cap;
}

/* Keep the addresses the guard allows (a literal, an override or DNS's).
 * Returns the refusing class when none is left. */
static const char *set_addrs(struct tunnel *t, const struct sockaddr *const *sas, const socklen_t *lens, size_t n,
                             int port, bool guard)
{
        const char *why = "no_address";

        t->n_addrs = t->next_addr = 0;
        for (size_t i = 0; i < n && t->n_addrs < MAX_ADDRS; i++) {
                const char *cls;
                if (sas[i]->sa_family != AF_INET && sas[i]->sa_family != AF_INET6)
                        continue;
                cls = guard ? egress_addr_forbidden(sas[i]) : NULL;
                if (cls && !egress_cidrs_contain(t->eg->priv, t->eg->n_priv, sas[i])) {
                        why = cls;
                        continue;
                }
                memcpy(&t->addrs[t->n_addrs], sas[i], lens[i]);
                if (sas[i]->sa_family == AF_INET)
                        ((struct sockaddr_in *)&t->addrs[t->n_addrs])->sin_port = htons((uint16_t)port);
                else
                        ((struct sockaddr_in6 *)&t->addrs[t->n_addrs])->sin6_port = htons((uint16_t)port);
                t->addr_lens[t->n_addrs++] = lens[i];
        }
        return t->n_addrs ? NULL : why;
}

static void resolved(struct tunnel *t, int errcode, struct evutil_addrinfo *res, bool proxy)
{
        const struct sockaddr *sas[MAX_ADDRS * 2];
        socklen_t lens[MAX_ADDRS * 2];
        size_t n = 0;
        const char *why;

        if (errcode) {
                tunnel_refuse(t, 502, "resolve_failed", evutil_gai_strerror(errcode));
                return;
        }
        for (struct evutil_addrinfo *ai = res; ai && n < ELEMENTSOF(sas); ai = ai->ai_next) {
                sas[n] = ai->ai_addr;
                lens[n++] = (socklen_t)ai->ai_addrlen;
        }
        /* the operator's upstream proxy is trusted wherever it is */
        why = set_addrs(t, sas, lens, n, proxy ? t->eg->up_port : t->port, !proxy);
        if (why) {
                char detail[EGRESS_HOST_MAX + 64];
                snprintf(detail, sizeof(detail), "%s resolves to a %s address", t->host, why);
                tunnel_refuse(t, 403, "private_address", detail);
                return;
        }
        try_connect(t);
}

static void dns_done(int errcode, struct evutil_addrinfo *res, void *arg)
{
        struct dns_ctx *ctx = arg;
        struct tunnel *t = ctx->t;
        bool proxy = ctx->proxy;

        if (t) {
                t->dns = NULL;
                t->dns_req = NULL;
        }
        free(ctx);
        if (t && !t->finished && errcode != EVUTIL_EAI_CANCEL)
                resolved(t, errcode, res, proxy);
        if (res)
                evutil_freeaddrinfo(res);
}

/* Resolve name (the destination, or the upstream proxy): a literal or an
 * override at once, else evdns. */
static void resolve(struct tunnel *t, const char *name, bool proxy)
{
        struct egress *eg = t->eg;
        struct evutil_addrinfo hints = {0}, *res = NULL;
        struct dns_ctx *ctx;
        struct evdns_getaddrinfo_request *req;

        t->state = T_RESOLVE;
        for (size_t i = 0; i < eg->n_ovr; i++)
                if (strcmp(eg->ovr[i].name, name) == 0) {
                        const struct sockaddr *sa = (const struct sockaddr *)&eg->ovr[i].addr;
                        struct evutil_addrinfo ai = {.ai_family = sa->sa_family, .ai_addr = (struct sockaddr *)sa,
                                                     .ai_addrlen = eg->ovr[i].len};
                        resolved(t, 0, &ai, proxy);
                        return;
                }
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = EVUTIL_AI_NUMERICHOST;
        if (evutil_getaddrinfo(name, NULL, &hints, &res) == 0) {
                resolved(t, 0, res, proxy);
                evutil_freeaddrinfo(res);
                return;
        }
        if (!eg->dns) {
                tunnel_refuse(t, 502, "resolve_failed", "no resolver");
                return;
        }
        ctx = calloc(1, sizeof(*ctx));
        if (!ctx) {
                tunnel_refuse(t, 503, "internal", "out of memory");
                return;
        }
        ctx->t = t;
        ctx->proxy = proxy;
        t->dns = ctx;
        hints.ai_flags = 0;
        /* the callback may run before this returns (hosts file): it clears t->dns */
        req = evdns_getaddrinfo(eg->dns, name, NULL, &hints, dns_done, ctx);
        if (t->dns == ctx)
                t->dns_req = req;
}

/* ---- relay ---- */

static struct bufferevent *other_side(struct tunnel *t, struct bufferevent *bev)
{
        return bev == t->cli ? t->up : t->cli;
}

static bool reads_done(const struct tunnel *t, const struct bufferevent *bev)
{
        if (bev == t->cli)
                return t->cli_eof || (!t->is_connect && t->body_done);
        return t->up_eof;
}

static void drained(struct bufferevent *bev, void *arg)
{
        struct tunnel *t = arg;
        struct bufferevent *src = other_side(t, bev);

        bufferevent_setcb(bev, relay_read, NULL, relay_event, t);
        bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
        if (src && !reads_done(t, src))
                bufferevent_enable(src, EV_READ);
}

/* Move what src has read to the other side. false: the tunnel is gone. */
static bool relay_move(struct tunnel *t, struct bufferevent *bev)
{
        struct bufferevent *dst = other_side(t, bev);
        struct evbuffer *src = bufferevent_get_input(bev), *out;
        size_t len = evbuffer_get_length(src);

        if (!dst || t->state != T_RELAY || len == 0)
                return true;
        out = bufferevent_get_output(dst);
        if (bev == t->cli && !t->is_connect) {
                /* forward the request body, and no byte past the end of the request */
                size_t fwd = 0;
                while (fwd < len && !t->body_done) {
                        struct evbuffer_ptr pos;
                        struct evbuffer_iovec v;
                        evbuffer_ptr_set(src, &pos, fwd, EVBUFFER_PTR_SET);
                        if (evbuffer_peek(src, -1, &pos, &v, 1) < 1)
                                break;
                        fwd += http_parser_execute(&t->parser, &egress_request_settings, v.iov_base, v.iov_len);
                        if (HTTP_PARSER_ERRNO(&t->parser) != HPE_OK && HTTP_PARSER_ERRNO(&t->parser) != HPE_PAUSED) {
                                tunnel_finish(t, "bad_body");
                                return false;
                        }
                }
                evbuffer_remove_buffer(src, out, fwd);
                if (t->body_done) {
                        /* one request per connection: anything after it is dropped */
                        evbuffer_drain(src, evbuffer_get_length(src));
                        bufferevent_disable(bev, EV_READ);
                }
                len = fwd;
        } else {
                evbuffer_add_buffer(out, src);
        }
        if (bev == t->cli)
                t->bytes_up += (int64_t)len;
        else
                t->bytes_down += (int64_t)len;
        atomic_fetch_add(&t->s->bytes, (int64_t)len);
        t->last_activity = sbx_now_ms();
        if (bytes_over(t)) {
                tunnel_finish(t, "cap_bytes");
                return false;
        }
        if (evbuffer_get_length(out) >= RELAY_HIGH) {
                /* the other side is slow: stop reading until it drains to half */
                bufferevent_setcb(dst, relay_read, drained, relay_event, t);
                bufferevent_setwatermark(dst, EV_WRITE, RELAY_HIGH / 2, RELAY_HIGH);
                bufferevent_disable(bev, EV_READ);
        }
        return true;
}

static void relay_read(struct bufferevent *bev, void *arg)
{
        (void)relay_move(arg, bev);
}

/* Plain HTTP: the response ends with the upstream's EOF; close once written. */
static void finish_when_flushed(struct bufferevent *bev, void *arg)
{
        if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
                tunnel_finish(arg, "closed");
}

/* CONNECT: after one side's EOF, shut the other's write half once its output
 * is written; the tunnel ends when both halves are shut. */
static void shut_when_flushed(struct bufferevent *bev, void *arg)
{
        struct tunnel *t = arg;

        if (evbuffer_get_length(bufferevent_get_output(bev)) > 0)
                return;
        bufferevent_setcb(bev, relay_read, NULL, relay_event, t);
        shutdown(bufferevent_getfd(bev), SHUT_WR);
        if (bev == t->cli)
                t->cli_shut = true;
        else
                t->up_shut = true;
        if (t->cli_shut && t->up_shut)
                tunnel_finish(t, "closed");
}

static void side_eof(struct tunnel *t, struct bufferevent *bev)
{
        struct bufferevent *dst = other_side(t, bev);

        bufferevent_disable(bev, EV_READ);
        if (!t->is_connect) {
                if (bev == t->cli) {
                        t->cli_eof = true;
                        if (!t->body_done) /* gone before its request was whole */
                                tunnel_finish(t, "client_gone");
                        return;
                }
                t->up_eof = true;
                bufferevent_setcb(dst, NULL, finish_when_flushed, relay_event, t);
                bufferevent_enable(dst, EV_WRITE);
                finish_when_flushed(dst, t);
                return;
        }
        if (bev == t->cli)
                t->cli_eof = true;
        else
                t->up_eof = true;
        bufferevent_setcb(dst, relay_read, shut_when_flushed, relay_event, t);
        bufferevent_setwatermark(dst, EV_WRITE, 0, 0);
        bufferevent_enable(dst, EV_WRITE);
        shut_when_flushed(dst, t);
}

static void relay_event(struct bufferevent *bev, short what, void *arg)
{
        struct tunnel *t = arg;

        if (what & BEV_EVENT_EOF) {
                /* what is still in its input goes first */
                if (relay_move(t, bev))
                        side_eof(t, bev);
                return;
        }
        if (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
                tunnel_finish(t, bev == t->cli ? "client_error" : "upstream_error");
}

static void start_relay(struct tunnel *t)
{
        t->state = T_RELAY;
        t->last_activity = sbx_now_ms();
        event_del(t->timer);
        arm(t, t->eg->cfg.egress_idle_timeout_ms);
        bufferevent_setwatermark(t->cli, EV_READ, 0, RELAY_HIGH);
        bufferevent_setwatermark(t->up, EV_READ, 0, RELAY_HIGH);
        /* libevent reads 16 KiB at a time by default: fewer, larger syscalls */
        bufferevent_set_max_single_read(t->cli, RELAY_CHUNK);
        bufferevent_set_max_single_read(t->up, RELAY_CHUNK);
        bufferevent_set_max_single_write(t->cli, RELAY_CHUNK);
        bufferevent_set_max_single_write(t->up, RELAY_CHUNK);
        bufferevent_setcb(t->cli, relay_read, NULL, relay_event, t);
        bufferevent_setcb(t->up, relay_read, NULL, relay_event, t);
        bufferevent_enable(t->up, EV_READ | EV_WRITE);
        bufferevent_enable(t->cli, EV_WRITE);
        if (!(t->body_done && !t->is_connect))
                bufferevent_enable(t->cli, EV_READ);
        if (t->is_connect)
                evbuffer_add_printf(bufferevent_get_output(t->cli), "HTTP/1.1 200 Connection established\r\n\r\n");
        /* bytes that came after the head (a body, an early TLS hello), and
         * those an upstream proxy sent right behind its answer */
        if (relay_move(t, t->cli))
                (void)relay_move(t, t->up);
}

/* The destination is connected (or the upstream proxy agreed): go. */
static void upstream_ready(struct tunnel *t)
{
        if (!t->is_connect) {
                const char *path = "/";
                size_t path_len = 1;
                (void)egress_http_target(t, &path, &path_len);
                egress_http_write_head(t, bufferevent_get_output(t->up), t->eg->up_port != 0, path, path_len);
                t->bytes_up += (int64_t)evbuffer_get_length(bufferevent_get_output(t->up));
        }
        free(t->arena); /* the head is gone upstream; the parser keeps no pointer into it */
        t->arena = NULL;
        start_relay(t);
}

/* The upstream proxy's answer to our CONNECT: its head, then its tunnel. */
static void proxy_hs_read(struct bufferevent *bev, void *arg)
{
        struct tunnel *t = arg;
        struct evbuffer *in = bufferevent_get_input(bev);
        struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
        http_parser p;
        http_parser_settings none = {0};
        char *head;
        size_t n;

        if (end.pos < 0) {
                if (evbuffer_get_length(in) > (size_t)t->eg->cfg.egress_max_header_bytes)
                        tunnel_refuse(t, 502, "upstream_proxy", "its answer is too large");
                return;
        }
        n = (size_t)end.pos + 4;
        head = (char *)evbuffer_pullup(in, (ssize_t)n);
        http_parser_init(&p, HTTP_RESPONSE);
        (void)http_parser_execute(&p, &none, head, n);
        if (p.status_code < 200 || p.status_code > 299) {
                char detail[64];
                snprintf(detail, sizeof(detail), "the upstream proxy answered %u", p.status_code);
                tunnel_refuse(t, 502, "upstream_proxy", detail);
                return;
        }
        evbuffer_drain(in, n);
        start_relay(t);
}

static void connect_event(struct bufferevent *bev, short what, void *arg)
{
        struct tunnel *t = arg;

        if (what & BEV_EVENT_CONNECTED) {
                if (!t->eg->up_port || !t->is_connect) {
                        upstream_ready(t);
                        return;
                }
                t->state = T_PROXY_HS;
                evbuffer_add_printf(bufferevent_get_output(bev), strchr(t->host, ':')
                                    ? "CONNECT [%s]:%d HTTP/1.1\r\nHost: [%s]:%d\r\n\r\n"
                                    : "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n",
                                    t->host, t->port, t->host, t->port);
                bufferevent_setcb(bev, proxy_hs_read, NULL, connect_event, t);
                bufferevent_enable(bev, EV_READ | EV_WRITE);
                return;
        }
        if (what & (BEV_EVENT_ERROR | BEV_EVENT_EOF)) {
                int e = EVUTIL_SOCKET_ERROR();
                if (t->state == T_CONNECT && t->next_addr < t->n_addrs) {
                        bufferevent_free(t->up);
                        t->up = NULL;
                        try_connect(t);
                        return;
                }
                tunnel_refuse(t, 502, t->state == T_PROXY_HS ? "upstream_proxy" : "connect_failed",
                              e ? evutil_socket_error_to_string(e) : "closed");
        }
}

static void try_connect(struct tunnel *t)
{
        struct sockaddr *sa;
        int fd;

        t->state = T_CONNECT;
        if (t->next_addr >= t->n_addrs) {
                tunnel_refuse(t, 502, "connect_failed", t->host);
                return;
        }
        sa = (struct sockaddr *)&t->addrs[t->next_addr];
        egress_addr_string(sa, t->address, sizeof(t->address));
        fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                tunnel_refuse(t, 503, "connect_failed", strerror(errno));
                return;
        }
        t->up = bufferevent_socket_new(t->eg->base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (!t->up) {
                close(fd);
                tunnel_refuse(t, 503, "internal", "out of memory");
                return;
        }
        bufferevent_setcb(t->up, NULL, NULL, connect_event, t);
        if (bufferevent_socket_connect(t->up, sa, (int)t->addr_lens[t->next_addr++]) < 0) {
                /* the event callback is not called for an immediate failure */
                bufferevent_free(t->up);
                t->up = NULL;
                try_connect(t);
        }
}

/* The head is complete: decide. */
static void decide(struct tunnel *t)
{
        const char *path, *why;
        size_t path_len;

        bufferevent_disable(t->cli, EV_READ);
        t->is_connect = t->parser.method == HTTP_CONNECT;
        sbx_strlcpy(t->method, http_method_str(t->parser.method), sizeof(t->method));
        why = egress_http_target(t, &path, &path_len);
        if (why) {
                tunnel_refuse(t, 400, why,
                              strcmp(why, "scheme") == 0 ? "https:// goes through CONNECT"
                              : strcmp(why, "not_absolute") == 0 ? "a proxy request names an absolute http:// URI"
                                                                 : "cannot read the request target");
                return;
        }
        if (!host_allowed(t)) {
                char detail[EGRESS_HOST_MAX + 64];
                snprintf(detail, sizeof(detail), "%s:%d is not on this session's allowlist", t->host, t->port);
                tunnel_refuse(t, 403, "not_allowed", detail);
                return;
        }
        if (!rate_ok(t)) {
                tunnel_refuse(t, 429, "cap_rate", "too many new connections this minute (egress_conns_per_minute)");
                return;
        }
        if (bytes_over(t)) {
                tunnel_refuse(t, 429, "cap_bytes", "the session's egress bytes are used up");
                return;
        }
        event_del(t->timer);
        arm(t, t->eg->cfg.egress_connect_timeout_ms);
        if (t->eg->up_port) {
                /* the corporate proxy resolves the name; an address literal is still guarded here */
                struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_flags = EVUTIL_AI_NUMERICHOST}, *res;
                if (evutil_getaddrinfo(t->host, NULL, &hints, &res) == 0) {
                        const char *cls = egress_addr_forbidden(res->ai_addr);
                        bool exempt = egress_cidrs_contain(t->eg->priv, t->eg->n_priv, res->ai_addr);
                        evutil_freeaddrinfo(res);
                        if (cls && !exempt) {
                                tunnel_refuse(t, 403, "private_address", t->host);
                                return;
                        }
                }
                resolve(t, t->eg->up_host, true);
                return;
        }
        resolve(t, t->host, false);
}

static void head_read(struct bufferevent *bev, void *arg)
{
        struct tunnel *t = arg;
        struct evbuffer *in = bufferevent_get_input(bev);
        size_t cap = (size_t)t->eg->cfg.egress_max_header_bytes, n, got;
        struct evbuffer_ptr end;
        char *head;

        if (t->state != T_HEAD)
                return;
        end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
        if (end.pos < 0) {
                if (evbuffer_get_length(in) > cap)
                        tunnel_refuse(t, 431, "header_too_large", "the request head exceeds egress_max_header");
                return;
        }
        n = (size_t)end.pos + 4;
        if (n > cap) {
                tunnel_refuse(t, 431, "header_too_large", "the request head exceeds egress_max_header");
                return;
        }
        head = (char *)evbuffer_pullup(in, (ssize_t)n);
        /* the target and headers are copied out of the head: never more than it */
        t->arena = malloc(n);
        if (!head || !t->arena) {
                tunnel_refuse(t, 503, "internal", "out of memory");
                return;
        }
        t->arena_cap = n;
        got = http_parser_execute(&t->parser, &egress_request_settings, head, n);
        if ((HTTP_PARSER_ERRNO(&t->parser) != HPE_OK && HTTP_PARSER_ERRNO(&t->parser) != HPE_PAUSED) ||
            !t->head_done) {
                tunnel_refuse(t, t->n_hdrs >= MAX_HEADERS ? 431 : 400, "bad_request",
                              t->head_done || HTTP_PARSER_ERRNO(&t->parser) != HPE_OK
                                      ? http_errno_description(HTTP_PARSER_ERRNO(&t->parser))
                                      : "incomplete request head (CRLF line endings are required)");
                return;
        }
        if (t->parser.method == HTTP_CONNECT || t->parser.upgrade)
                t->body_done = true; /* the rest is the tunnel's, or not ours */
        (void)got;
        evbuffer_drain(in, n);
        if (HTTP_PARSER_ERRNO(&t->parser) == HPE_PAUSED)
                http_parser_pause(&t->parser, 0);
        decide(t);
}

static void head_event(struct bufferevent *bev, short what, void *arg)
{
        struct tunnel *t = arg;

        /* the client left before its request was decided: nothing to answer;
         * a row only if it had sent part of a request */
        t->finished = true;
        if (t->state != T_HEAD || evbuffer_get_length(bufferevent_get_input(bev)) > 0)
                record(t, false, t->state == T_HEAD ? "incomplete_request" : "client_gone");
        tunnel_free(t);
}

/* ---- accepting ---- */

static void refuse_fd(struct egress *eg, struct esess *s, int fd, int status, const char *reason,
                      const char *detail)
{
        struct tunnel *t = calloc(1, sizeof(*t));

        if (!t) {
                close(fd);
                return;
        }
        t->eg = eg;
        t->s = s;
        t->started = sbx_now_ms();
        t->started_wall = sbx_wall_ms();
        atomic_fetch_add(&eg->n_open, 1);
        if (s) {
                atomic_fetch_add(&s->n_open, 1);
                t->next = s->tunnels;
                if (s->tunnels)
                        s->tunnels->prev = t;
                s->tunnels = t;
        }
        t->cli = bufferevent_socket_new(eg->base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (!t->cli)
                close(fd);
        if (!s) {
                /* no session entry (out of memory): nothing to record */
                t->finished = true;
                tunnel_free(t);
                return;
        }
        tunnel_refuse(t, status, reason, detail);
}

/* Open connections of all the user's sessions (loop thread: the list is its own). */
static int user_open(struct egress *eg, const char *user)
{
        int n = 0;
        for (struct esess *s = eg->sessions; s; s = s->next)
                if (strcmp(s->user, user) == 0)
                        n += atomic_load(&s->n_open);
        return n;
}

static void start_one(struct egress *eg, const struct pending *p)
{
        struct esess *s = sess_get(eg, p->user, p->session);
        bool private_ = true;
        struct tunnel *t;

        if (!s) {
                close(p->fd);
                return;
        }
        s->last_used = sbx_now_ms();
        (void)store_private_any(eg->store, p->user, p->session, &private_);
        if (s->closed || private_) {
                refuse_fd(eg, s, p->fd, 403, "private", "the session holds private data: it has no egress");
                return;
        }
        if (atomic_load(&eg->n_open) >= eg->cfg.egress_max_tunnels) {
                refuse_fd(eg, s, p->fd, 503, "cap_global", "the daemon's egress tunnels are all in use");
                return;
        }
        if (atomic_load(&s->n_open) >= eg->cfg.egress_max_tunnels_per_session) {
                refuse_fd(eg, s, p->fd, 429, "cap_tunnels", "the session has too many open tunnels");
                return;
        }
        if (user_open(eg, p->user) >= eg->cfg.egress_max_tunnels_per_user) {
                refuse_fd(eg, s, p->fd, 429, "cap_user", "the user's sessions have too many open tunnels");
                return;
        }
        t = calloc(1, sizeof(*t));
        if (!t) {
                close(p->fd);
                return;
        }
        t->eg = eg;
        t->s = s;
        t->started = sbx_now_ms();
        t->started_wall = sbx_wall_ms();
        t->next = s->tunnels;
        if (s->tunnels)
                s->tunnels->prev = t;
        s->tunnels = t;
        atomic_fetch_add(&s->n_open, 1);
        atomic_fetch_add(&eg->n_open, 1);
        http_parser_init(&t->parser, HTTP_REQUEST);
        t->parser.data = t;
        t->timer = evtimer_new(eg->base, tunnel_timer, t);
        t->cli = bufferevent_socket_new(eg->base, p->fd, BEV_OPT_CLOSE_ON_FREE);
        if (!t->cli)
                close(p->fd);
        if (!t->timer || !t->cli) {
                t->finished = true;
                tunnel_free(t);
                return;
        }
        /* at most the head cap (plus one read) is buffered before the head is judged */
        bufferevent_setwatermark(t->cli, EV_READ, 0, (size_t)eg->cfg.egress_max_header_bytes + 1);
        bufferevent_setcb(t->cli, head_read, NULL, head_event, t);
        bufferevent_enable(t->cli, EV_READ);
        arm(t, eg->cfg.egress_header_timeout_ms);
}

static void close_one(struct egress *eg, const char *user, const char *session)
{
        struct esess *s = sess_get(eg, user, session);

        if (!s)
                return;
        s->closed = true;
        while (s->tunnels) {
                struct tunnel *t = s->tunnels;
                if (t->finished) {
                        /* an error answer still being written: gone too */
                        tunnel_free(t);
                        continue;
                }
                t->finished = true;
                record(t, t->state == T_RELAY, "ratchet");
                tunnel_free(t);
        }
}

struct close_key {
        char user[65], session[65];
};

/* Take the waiting close requests (copies: the requests live on their
 * waiters' stacks) and run them; then wake the waiters. */
static void run_closes(struct egress *eg)
{
        struct close_key *keys = NULL;
        size_t n = 0, cap = 0;
        uint64_t upto = 0;

        pthread_mutex_lock(&eg->lock);
        for (struct close_req *c = eg->closes; c; c = c->next) {
                if (c->taken)
                        continue;
                if (n == cap) {
                        struct close_key *grown = realloc(keys, (cap ? cap * 2 : 8) * sizeof(*keys));
                        if (!grown) {
                                upto = 0; /* out of memory: the waiters time out and say so */
                                break;
                        }
                        keys = grown;
                        cap = cap ? cap * 2 : 8;
                }
                c->taken = true;
                sbx_strlcpy(keys[n].user, c->user, sizeof(keys[n].user));
                sbx_strlcpy(keys[n].session, c->session, sizeof(keys[n].session));
                n++;
                if (c->gen > upto)
                        upto = c->gen;
        }
        pthread_mutex_unlock(&eg->lock);
        for (size_t i = 0; i < n; i++)
                close_one(eg, keys[i].user, keys[i].session);
        free(keys);
        if (!n)
                return;
        pthread_mutex_lock(&eg->lock);
        /* every request up to `upto` was taken: generations grow, and the list is
         * walked whole each time */
        if (upto > eg->close_done)
                eg->close_done = upto;
        pthread_cond_broadcast(&eg->done_cond);
        pthread_mutex_unlock(&eg->lock);
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
        struct egress *eg = arg;
        struct pending *list;
        bool stopping;

        /* closes first: a connection queued before the ratchet is then refused too */
        run_closes(eg);
        pthread_mutex_lock(&eg->lock);
        list = eg->pending;
        eg->pending = NULL;
        eg->pending_tail = &eg->pending;
        eg->n_pending = 0;
        stopping = eg->stopping;
        pthread_mutex_unlock(&eg->lock);
        while (list) {
                struct pending *p = list;
                list = p->next;
                if (stopping)
                        close(p->fd);
                else
                        start_one(eg, p);
                free(p);
        }
        if (stopping) {
                for (struct esess *s = eg->sessions; s; s = s->next)
                        while (s->tunnels) {
                                struct tunnel *t = s->tunnels;
                                if (!t->finished) {
                                        t->finished = true;
                                        record(t, t->state == T_RELAY, "shutdown");
                                }
                                tunnel_free(t);
                        }
                event_base_loopbreak(eg->base);
        }
}

static void *loop_main(void *arg)
{
        struct egress *eg = arg;

        (void)pthread_setname_np(pthread_self(), "sbx-egress");
        event_base_dispatch(eg->base);
        return NULL;
}

/* ---- public ---- */

static void egress_free_config(struct egress *eg)
{
        egress_strv_free(eg->allow, eg->n_allow);
        free(eg->priv);
        free(eg->ovr);
}

int egress_new(const struct sbx_config *cfg, struct store *store, struct egress **ret, struct sbx_error *err)
{
        struct egress *eg;
        struct timeval sweep = {60, 0};
        int r;

        pthread_once(&evthread_once, evthread_init);
        if (evthread_rc < 0)
                return sbx_error_set(err, -ENOSYS, 0, "egress: libevent has no pthreads support");
        eg = calloc(1, sizeof(*eg));
        if (!eg)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        eg->cfg = *cfg;
        eg->store = store;
        eg->pending_tail = &eg->pending;
        pthread_mutex_init(&eg->lock, NULL);
        pthread_cond_init(&eg->done_cond, NULL);
        r = egress_allow_parse(cfg->egress_allow, true, &eg->allow, &eg->n_allow, err);
        if (r == 0)
                r = egress_cidrs_parse(cfg->egress_allow_private, &eg->priv, &eg->n_priv, err);
        if (r == 0)
                r = egress_overrides_parse(cfg->egress_resolve, &eg->ovr, &eg->n_ovr, err);
        if (r == 0 && cfg->egress_upstream_proxy[0])
                r = egress_upstream_parse(cfg->egress_upstream_proxy, eg->up_host, &eg->up_port, err);
        if (r < 0)
                goto fail;
        eg->base = event_base_new();
        if (!eg->base) {
                r = sbx_error_set(err, -ENOMEM, 0, "egress: cannot create the event loop");
                goto fail;
        }
        /* A resolver from /etc/resolv.conf; without one, only literals and egress_resolve work. */
        eg->dns = evdns_base_new(eg->base, EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_DISABLE_WHEN_INACTIVE |
                                                   EVDNS_BASE_NAMESERVERS_NO_DEFAULT);
        if (!eg->dns)
                eg->dns = evdns_base_new(eg->base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
        eg->wake = event_new(eg->base, -1, EV_PERSIST, wake_cb, eg);
        eg->sweep = event_new(eg->base, -1, EV_PERSIST, sess_sweep, eg);
        if (!eg->wake || !eg->sweep || event_add(eg->wake, NULL) < 0 || event_add(eg->sweep, &sweep) < 0) {
                r = sbx_error_set(err, -ENOMEM, 0, "egress: cannot create the loop's events");
                goto fail;
        }
        r = -pthread_create(&eg->thread, NULL, loop_main, eg);
        if (r < 0) {
                sbx_error_set(err, r, 0, "egress: cannot start its thread");
                goto fail;
        }
        eg->started = true;
        *ret = eg;
        return 0;
fail:
        egress_free(eg);
        return r;
}

void egress_free(struct egress *eg)
{
        if (!eg)
                return;
        if (eg->started) {
                pthread_mutex_lock(&eg->lock);
                eg->stopping = true;
                pthread_mutex_unlock(&eg->lock);
                event_active(eg->wake, EV_READ, 0);
                pthread_join(eg->thread, NULL);
        }
        for (struct pending *p = eg->pending, *next; p; p = next) {
                next = p->next;
                close(p->fd);
                free(p);
        }
        for (struct esess *s = eg->sessions, *next; s; s = next) {
                next = s->next;
                free(s);
        }
        if (eg->wake)
                event_free(eg->wake);
        if (eg->sweep)
                event_free(eg->sweep);
        if (eg->dns)
                evdns_base_free(eg->dns, 0);
        if (eg->base)
                event_base_free(eg->base);
        egress_free_config(eg);
        pthread_cond_destroy(&eg->done_cond);
        pthread_mutex_destroy(&eg->lock);
        free(eg);
}

void egress_accept(struct egress *eg, const char *user, const char *session, int fd)
{
        struct pending *p;

        if (fd < 0)
                return;
        if (!eg || !session_id_valid(user) || !session_id_valid(session) || evutil_make_socket_nonblocking(fd) < 0) {
                close(fd);
                return;
        }
        p = calloc(1, sizeof(*p));
        if (!p) {
                close(fd);
                return;
        }
        sbx_strlcpy(p->user, user, sizeof(p->user));
        sbx_strlcpy(p->session, session, sizeof(p->session));
        p->fd = fd;
        pthread_mutex_lock(&eg->lock);
        if (eg->stopping || eg->n_pending >= MAX_PENDING) {
                pthread_mutex_unlock(&eg->lock);
                close(fd);
                free(p);
                return;
        }
        *eg->pending_tail = p;
        eg->pending_tail = &p->next;
        eg->n_pending++;
        pthread_mutex_unlock(&eg->lock);
        event_active(eg->wake, EV_READ, 0);
}

void egress_close_session(struct egress *eg, const char *user, const char *session)
{
        struct close_req req = {0};
        struct timespec deadline;
        bool done;

        if (!eg || !user || !session)
                return;
        sbx_strlcpy(req.user, user, sizeof(req.user));
        sbx_strlcpy(req.session, session, sizeof(req.session));
        deadline = sbx_deadline_after(CLOCK_REALTIME, CLOSE_WAIT_MS);
        pthread_mutex_lock(&eg->lock);
        if (eg->stopping) {
                pthread_mutex_unlock(&eg->lock);
                return;
        }
        req.gen = ++eg->close_gen;
        req.next = eg->closes;
        eg->closes = &req;
        pthread_mutex_unlock(&eg->lock);
        event_active(eg->wake, EV_READ, 0);
        pthread_mutex_lock(&eg->lock);
        while (eg->close_done < req.gen)
                if (pthread_cond_timedwait(&eg->done_cond, &eg->lock, &deadline) == ETIMEDOUT)
                        break;
        done = eg->close_done >= req.gen;
        for (struct close_req **pp = &eg->closes; *pp; pp = &(*pp)->next)
                if (*pp == &req) {
                        *pp = req.next;
                        break;
                }
        pthread_mutex_unlock(&eg->lock);
        if (!done)
                log_ctx(LOG_LEVEL_WARN, user, session, NULL, "egress: tunnels not confirmed closed in time");
}

void egress_stats(struct egress *eg, struct egress_stats *ret)
{
        *ret = (struct egress_stats){0};
        if (!eg)
                return;
        ret->allowed = atomic_load(&eg->allowed);
        ret->blocked = atomic_load(&eg->blocked);
        ret->open = atomic_load(&eg->n_open);
}

int egress_session_stats(struct egress *eg, const char *user, const char *session, struct egress_stats *ret)
{
        struct esess *s;
        int r = -ENOENT;

        *ret = (struct egress_stats){0};
        if (!eg || !user || !session)
                return -ENOENT;
        pthread_mutex_lock(&eg->lock);
        s = sess_find(eg, user, session);
        if (s) {
                ret->allowed = atomic_load(&s->allowed);
                ret->blocked = atomic_load(&s->blocked);
                ret->open = atomic_load(&s->n_open);
                ret->bytes = atomic_load(&s->bytes);
                r = 0;
        }
        pthread_mutex_unlock(&eg->lock);
        return r;
}
