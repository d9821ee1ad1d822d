/* egress_tunnel.c — one egress connection from accept to its audit row
 * (egress.c's loop owns the sessions; egress_relay.c moves the bytes):
 * open or refuse a tunnel, its timer, the audit row for every decision
 * (blocked rows capped per session), the policy (allowlist, rate, bytes),
 * the name lookup (evdns, egress_resolve overrides first) and the decision
 * on a complete request head.
 *
 * Threads and locks: loop thread only, like every struct tunnel; the
 * counters it bumps are atomics read by egress_stats. */
#include "sandboxd/egress.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandboxd/egress_policy.h"
#include "sandboxd/log.h"
#include "sandboxd/store.h"
#include "sandboxd/store_egress.h"
#include "egress_internal.h"

#define LOG_WINDOW_MS 60000 /* blocked rows per session: at most LOG_BLOCKED_MAX a minute */
#define LOG_BLOCKED_MAX 60

static void head_read(struct bufferevent *bev, void *arg);

/* ---- audit ---- */

void egress_tunnel_record(struct tunnel *t, bool allowed, const char *reason)
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
                if (eg->on_blocked)
                        eg->on_blocked(s->user, s->session, t->host[0] ? t->host : "-", t->port, reason,
                                       eg->on_blocked_ud);
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

void egress_tunnel_free(struct tunnel *t)
{
        struct egress *eg = t->eg;

        egress_icpt_free(t);
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
                egress_tunnel_free(t);
}

static void close_after_flush_event(struct bufferevent *bev, short what, void *arg)
{
        egress_tunnel_free(arg);
}

/* Refuse: an error response to the client, then close once it is written. */
void egress_tunnel_refuse(struct tunnel *t, int status, const char *reason, const char *detail)
{
        static const struct {
                int status;
                const char *text;
        } texts[] = {
                {400, "Bad Request"},
                {403, "Forbidden"},
                {408, "Request Timeout"},
                {429, "Too Many Requests"},
                {431, "Request Header Fields Too Large"},
                {502, "Bad Gateway"},
                {503, "Service Unavailable"},
                {504, "Gateway Timeout"},
        };
        const char *text = "Error";
        char body[512];

        for (size_t i = 0; i < ELEMENTSOF(texts); i++)
                if (texts[i].status == status)
                        text = texts[i].text;
        if (snprintf(body, sizeof(body), "sandboxd egress: %s%s%s\n", reason, detail ? ": " : "",
                     detail ? detail : "") < 0)
                body[0] = '\0';
        egress_tunnel_refuse_body(t, status, text, reason, "text/plain", body);
}

void egress_tunnel_refuse_body(struct tunnel *t, int status, const char *phrase, const char *reason,
                               const char *content_type, const char *body)
{
        if (t->finished)
                return;
        t->finished = true;
        egress_tunnel_record(t, false, reason);
        dns_drop(t);
        if (t->up) {
                bufferevent_free(t->up);
                t->up = NULL;
        }
        if (t->timer)
                event_del(t->timer);
        if (!t->cli) {
                egress_tunnel_free(t);
                return;
        }
        bufferevent_disable(t->cli, EV_READ);
        evbuffer_add_printf(bufferevent_get_output(t->cli),
                            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                            "Connection: close\r\nX-Sandboxd-Egress: %s\r\n\r\n%s",
                            status, phrase, content_type, strlen(body), reason, body);
        bufferevent_setcb(t->cli, NULL, close_after_flush, close_after_flush_event, t);
        bufferevent_enable(t->cli, EV_WRITE);
}

/* The end of an allowed tunnel: its row, then close. */
void egress_tunnel_finish(struct tunnel *t, const char *reason)
{
        if (t->finished)
                return;
        t->finished = true;
        if (!t->row_done)
                egress_tunnel_record(t, true, reason);
        egress_tunnel_free(t);
}

void egress_tunnel_arm(struct tunnel *t, int ms)
{
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        evtimer_add(t->timer, &tv);
}

static void tunnel_timer(evutil_socket_t fd, short what, void *arg)
{
        struct tunnel *t = arg;
        int64_t idle, limit;

        switch (t->state) {
        case T_HEAD:
                egress_tunnel_refuse(t, 408, "header_timeout", "the request head did not arrive in time");
                return;
        case T_RESOLVE:
        case T_CONNECT:
        case T_PROXY_HS:
                egress_tunnel_refuse(t, 504, "connect_timeout", t->host);
                return;
        case T_RELAY:
                idle = sbx_now_ms() - t->last_activity;
                limit = t->idle_ms > 0 ? t->idle_ms : t->eg->cfg.egress_idle_timeout_ms;
                if (idle >= limit)
                        egress_tunnel_finish(t, "idle_timeout");
                else
                        egress_tunnel_arm(t, (int)(limit - idle));
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

bool egress_bytes_over(struct tunnel *t)
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
                egress_tunnel_refuse(t, 502, "resolve_failed", evutil_gai_strerror(errcode));
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
                egress_tunnel_refuse(t, 403, "private_address", detail);
                return;
        }
        egress_try_connect(t);
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
                        struct evutil_addrinfo ai = {.ai_family = sa->sa_family,
                                                     .ai_addr = (struct sockaddr *)sa,
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
                egress_tunnel_refuse(t, 502, "resolve_failed", "no resolver");
                return;
        }
        ctx = calloc(1, sizeof(*ctx));
        if (!ctx) {
                egress_tunnel_refuse(t, 503, "internal", "out of memory");
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

/* The execution's own narrowing (egress_exec.c), after the session's allowlist. */
static bool narrow_ok(struct tunnel *t)
{
        char reason[64], detail[EGRESS_HOST_MAX + 128];

        if (egress_exec_allowed(t, reason, sizeof(reason), detail, sizeof(detail)))
                return true;
        egress_tunnel_refuse(t, 403, reason, detail);
        return false;
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
                egress_tunnel_refuse(t, 400, why,
                                     strcmp(why, "scheme") == 0 ? "https:// goes through CONNECT"
                                     : strcmp(why, "not_absolute") == 0
                                             ? "a proxy request names an absolute http:// URI"
                                             : "cannot read the request target");
                return;
        }
        if (!host_allowed(t)) {
                char detail[EGRESS_HOST_MAX + 64];
                snprintf(detail, sizeof(detail), "%s:%d is not on this session's allowlist", t->host, t->port);
                egress_tunnel_refuse(t, 403, "not_allowed", detail);
                return;
        }
        if (!narrow_ok(t))
                return;
        if (!egress_secrets_decide(t))
                return;
        if (!egress_packages_decide(t, path, path_len))
                return;
        if (!rate_ok(t)) {
                egress_tunnel_refuse(t, 429, "cap_rate",
                                     "too many new connections this minute (egress_conns_per_minute)");
                return;
        }
        if (egress_bytes_over(t)) {
                egress_tunnel_refuse(t, 429, "cap_bytes", "the session's egress bytes are used up");
                return;
        }
        event_del(t->timer);
        egress_tunnel_arm(t, t->eg->cfg.egress_connect_timeout_ms);
        if (t->eg->up_port) {
                /* the corporate proxy resolves the name; an address literal is still guarded here */
                struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_flags = EVUTIL_AI_NUMERICHOST}, *res;
                if (evutil_getaddrinfo(t->host, NULL, &hints, &res) == 0) {
                        const char *cls = egress_addr_forbidden(res->ai_addr);
                        bool exempt = egress_cidrs_contain(t->eg->priv, t->eg->n_priv, res->ai_addr);
                        evutil_freeaddrinfo(res);
                        if (cls && !exempt) {
                                egress_tunnel_refuse(t, 403, "private_address", t->host);
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
        int r;

        if (t->state != T_HEAD)
                return;
        r = egress_exec_from(t, in);
        if (r == 0)
                return;
        if (r < 0) {
                egress_tunnel_refuse(t, 400, "bad_request", "malformed RP_EGRESS_FROM header");
                return;
        }
        end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
        if (end.pos < 0) {
                if (evbuffer_get_length(in) > cap)
                        egress_tunnel_refuse(t, 431, "header_too_large", "the request head exceeds egress_max_header");
                return;
        }
        n = (size_t)end.pos + 4;
        if (n > cap) {
                egress_tunnel_refuse(t, 431, "header_too_large", "the request head exceeds egress_max_header");
                return;
        }
        head = (char *)evbuffer_pullup(in, (ssize_t)n);
        /* the target and headers are copied out of the head: never more than it */
        t->arena = malloc(n);
        if (!head || !t->arena) {
                egress_tunnel_refuse(t, 503, "internal", "out of memory");
                return;
        }
        t->arena_cap = n;
        got = http_parser_execute(&t->parser, &egress_request_settings, head, n);
        if ((HTTP_PARSER_ERRNO(&t->parser) != HPE_OK && HTTP_PARSER_ERRNO(&t->parser) != HPE_PAUSED) || !t->head_done) {
                egress_tunnel_refuse(t, t->n_hdrs >= MAX_HEADERS ? 431 : 400, "bad_request",
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
                egress_tunnel_record(t, false, t->state == T_HEAD ? "incomplete_request" : "client_gone");
        egress_tunnel_free(t);
}

/* ---- accepting ---- */

/* A tunnel counted and linked into its session (s may be NULL); closes fd
 * when out of memory. */
static struct tunnel *tunnel_new(struct egress *eg, struct esess *s, int fd)
{
        struct tunnel *t = calloc(1, sizeof(*t));

        if (!t) {
                close(fd);
                return NULL;
        }
        t->eg = eg;
        t->s = s;
        t->pkg_eco = -1;
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
        return t;
}

void egress_tunnel_refuse_fd(struct egress *eg, struct esess *s, int fd, int status, const char *reason,
                             const char *detail)
{
        struct tunnel *t = tunnel_new(eg, s, fd);

        if (!t)
                return;
        t->cli = bufferevent_socket_new(eg->base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (!t->cli)
                close(fd);
        if (!s) {
                /* no session entry (out of memory): nothing to record */
                t->finished = true;
                egress_tunnel_free(t);
                return;
        }
        egress_tunnel_refuse(t, status, reason, detail);
}

/* A new tunnel on fd for session s, reading its request head (the caps
 * were checked by the caller). */
void egress_tunnel_open(struct egress *eg, struct esess *s, int fd, bool from_runner)
{
        struct tunnel *t = tunnel_new(eg, s, fd);

        if (!t)
                return;
        t->from_runner = from_runner;
        http_parser_init(&t->parser, HTTP_REQUEST);
        t->parser.data = t;
        t->timer = evtimer_new(eg->base, tunnel_timer, t);
        t->cli = bufferevent_socket_new(eg->base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (!t->cli)
                close(fd);
        if (!t->timer || !t->cli) {
                t->finished = true;
                egress_tunnel_free(t);
                return;
        }
        /* at most the head cap (plus one read) is buffered before the head is judged */
        bufferevent_setwatermark(t->cli, EV_READ, 0, (size_t)eg->cfg.egress_max_header_bytes + 1);
        bufferevent_setcb(t->cli, head_read, NULL, head_event, t);
        bufferevent_enable(t->cli, EV_READ);
        egress_tunnel_arm(t, eg->cfg.egress_header_timeout_ms);
}
