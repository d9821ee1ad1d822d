/* egress_internal.h — what the egress proxy's files share: egress.c (the
 * loop, sessions, queues), egress_tunnel.c (a connection's life, policy,
 * lookup, audit), egress_relay.c (connect and relay) and egress_http.c (the
 * request head: parsing and the upstream rewrite). The per-connection state
 * is the loop thread's only; struct egress's lock rules are in egress.c. */
#ifndef SANDBOXD_EGRESS_INTERNAL_H
#define SANDBOXD_EGRESS_INTERNAL_H

#include <event2/buffer.h>
#include <http_parser.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "sandboxd/config.h"
#include "sandboxd/egress.h"
#include "sandboxd/egress_pkg.h"
#include "sandboxd/egress_policy.h"

#define MAX_HEADERS 100
#define MAX_ADDRS 8

struct pending {
        struct pending *next;
        char user[65], session[65];
        int fd;
        bool from_runner;
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
        egress_blocked_fn on_blocked; /* set before the first connection (egress_set_blocked_hook) */
        void *on_blocked_ud;
        egress_connect_fn connect_fn; /* set before the first connection (egress_set_connect_hook) */
        void *connect_ud;
        egress_narrow_fn narrow_fn; /* set before the first connection (egress_set_narrow_hook) */
        void *narrow_ud;
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

        struct egress_secrets_ops sec_ops; /* set before the first connection (egress_set_secrets_ops) */
        void *sec_ud;
        struct egress_tls *tls;            /* egress_tls.c: TLS contexts and leaf certificates, loop thread only */
        struct egress_pkg_policies *pkg;   /* egress.packages_file, read-only after egress_new (egress_packages.c) */
        struct egress_filter *filter;      /* egress_filter.c: index pages filtered off the loop, made with the first */
        egress_filter_hook_fn filter_hook; /* set before the first connection (egress_set_filter_hook) */
        void *filter_hook_ud;
};

enum tstate { T_HEAD, T_RESOLVE, T_CONNECT, T_PROXY_HS, T_RELAY };

struct esess {
        struct esess *next;
        char user[65], session[65];
        struct tunnel *tunnels;
        atomic_int n_open;
        atomic_int_least64_t bytes;
        atomic_uint_least64_t allowed, blocked;
        int64_t window_start;
        int window_count;
        int64_t log_window_start;
        int log_window_rows;
        int64_t suppressed;
        int64_t last_used;
        bool closed; /* the ratchet ran: every later connection is refused */
};

struct hdr {
        uint32_t name, name_len, value, value_len; /* offsets into t->arena */
};

struct dns_ctx {
        struct tunnel *t; /* NULL once the tunnel is gone */
        bool proxy;
};

struct tunnel {
        struct egress *eg;
        struct esess *s;
        struct tunnel *prev, *next;
        struct bufferevent *cli, *up;
        struct event *timer;
        enum tstate state;
        http_parser parser;
        bool is_connect, head_done, body_done, cli_eof, up_eof, cli_shut, up_shut, finished;
        char method[16];
        char host[EGRESS_HOST_MAX];
        int port;
        char *arena; /* url and headers, at most egress_max_header bytes */
        size_t arena_len, arena_cap;
        uint32_t url, url_len;
        struct hdr hdrs[MAX_HEADERS];
        int n_hdrs;
        bool in_value;
        struct dns_ctx *dns;
        struct evdns_getaddrinfo_request *dns_req;
        struct sockaddr_storage addrs[MAX_ADDRS];
        socklen_t addr_lens[MAX_ADDRS];
        int n_addrs, next_addr;
        char address[64];
        int64_t started_wall, started, last_activity;
        int64_t bytes_up, bytes_down;
        /* whose connection (egress_exec.c): RP_EGRESS_FROM, believed only from the runner */
        bool from_runner, from_read, from_narrowed;
        uint16_t from;
        uint32_t from_tag;
        /* secrets (issue 37; egress_tls.c): the session's attachments while this request needs them */
        struct egress_secret *secrets;
        size_t n_secrets;
        bool intercept;    /* a CONNECT to a host an attached secret names: TLS is terminated here */
        struct icpt *icpt; /* the intercepted connection's state */
        /* an intercepted connection kept alive (egress_tls.c): the idle deadline between its requests
         * (0: egress_idle_timeout_ms), and whether the request now going upstream asks to keep it */
        int idle_ms;
        bool up_keep;
        bool row_done; /* the last request's row is written, none for the connection's end (icpt_next) */
        /* packages by policy (egress_packages.c): the registry this CONNECT goes to, or -1 */
        int pkg_eco;
        const struct egress_pkg_eco_policy *pkg_policy;
        struct egress_filter_job *icpt_job; /* its index page in the filter's pool (egress_filter.c), or NULL */
};

/* Request head callbacks: url and headers into t->arena, head_done,
 * body_done (which pauses the parser: later bytes are not this request's). */
extern const http_parser_settings egress_request_settings;

/* Host and port from the request target into t (CONNECT: authority form;
 * else an absolute http:// URI, whose path and query come back in
 * ret_path). NULL, or the reason it cannot be used. */
const char *egress_http_target(struct tunnel *t, const char **ret_path, size_t *ret_path_len);

/* The request head as it goes upstream: origin-form (absolute form when
 * `absolute`, for an upstream proxy), Host from the target, hop-by-hop
 * headers dropped, Connection: close. */
void egress_http_write_head(struct tunnel *t, struct evbuffer *out, bool absolute, const char *path, size_t path_len);

/* The first attached placeholder in buf[0, len): its index in
 * t->secrets, or -1; *ret_at its offset. */
int egress_placeholder_find(const struct tunnel *t, const char *buf, size_t len, size_t *ret_at);
/* Does the request head as parsed (target, header names and values) hold
 * an attached placeholder? */
bool egress_http_head_has_placeholder(const struct tunnel *t);
/* An intercepted request's head as it goes upstream (egress_tls.c): the
 * target as sent, hop-by-hop headers dropped, Accept-Encoding: identity,
 * Connection: close unless t->up_keep, and each placeholder replaced by its value where it
 * may be: sni, the Host header and t->host agree, the secret names
 * t->host, and names this header if it names one. NULL when out holds
 * the head; otherwise (also a placeholder in the target or in a header's
 * name) the reason to refuse, with a detail that never holds a placeholder
 * or a value. */
const char *egress_http_write_swapped(struct tunnel *t, struct evbuffer *out, const char *sni, char *ret_detail,
                                      size_t detail_size);
/* An intercepted request's body (after its head) and an intercepted
 * response: egress_tls.c's callbacks behind http_parser. */
extern const http_parser_settings egress_icpt_body_settings;
extern const http_parser_settings egress_icpt_response_settings;
int egress_icpt_on_body(http_parser *p, const char *at, size_t len);
int egress_icpt_on_request_done(http_parser *p);
int egress_icpt_on_response_head(http_parser *p);
int egress_icpt_on_response_body(http_parser *p, const char *at, size_t len);
int egress_icpt_on_response_done(http_parser *p);

/* ---- egress_tls.c (secrets: interception) ---- */

/* After the policy allowed t: its session's attachments. A placeholder in
 * the request head is refused (false: t is refused); a CONNECT to a host
 * an attached secret names is intercepted (t->intercept). */
bool egress_secrets_decide(struct tunnel *t);
/* The intercepted tunnel's upstream is connected: TLS to it (verified),
 * then the 200 and TLS to the client with a leaf of the session's CA. */
void egress_icpt_start(struct tunnel *t);
/* Release what interception holds (egress_tunnel_free). */
void egress_icpt_free(struct tunnel *t);
void egress_tls_free(struct egress_tls *tls);

/* ---- egress_packages.c (packages by policy) ---- */

/* After the secrets' decision: a CONNECT to a registry host of the user's
 * package policy is intercepted (t->pkg_eco); a plain http:// request to
 * one is judged now (path: its origin form). false: t was refused. */
bool egress_packages_decide(struct tunnel *t, const char *path, size_t path_len);
/* An intercepted request's target (origin form) on t->pkg_eco's registry:
 * false when it is refused (a denied package: 403, audited). */
bool egress_packages_check(struct tunnel *t, const char *path, size_t path_len);
/* Is the allowed request's target the index page of a package whose
 * versions the policy tells apart (egress_pkg_has_ranges)? Then its
 * response is filtered (egress_pkg_filter_page); ret_name the package. */
bool egress_packages_filter_wanted(struct tunnel *t, const char *path, size_t path_len,
                                   char ret_name[EGRESS_PKG_NAME_MAX]);

/* ---- egress_filter.c (index pages filtered off the loop) ---- */

struct egress_filter_job {
        struct egress_filter_job *next;
        struct tunnel *t; /* NULL once the tunnel is gone (under the pool's lock) */
        char user[65];
        const struct egress_pkg_eco_policy *ep;
        enum egress_pkg_eco eco;
        char name[EGRESS_PKG_NAME_MAX];
        bool json;
        struct evbuffer *in; /* the held page: the worker's from submit */
        /* egress_pkg_filter_page's result */
        int r;
        char *out;
        size_t out_len, dropped;
};

/* Hand j (its ep, eco, name, json and in set; j is the pool's from here)
 * to a worker for t: 0, -EBUSY past the pool's caps (global, per user), or
 * -ENOMEM (j is then still the caller's). */
int egress_filter_submit(struct tunnel *t, struct egress_filter_job *j);
/* t goes: its job, if any, is dropped when done (egress_tunnel_free). */
void egress_filter_detach(struct tunnel *t);
/* Stop the workers and free the pool (egress_free, after the loop). */
void egress_filter_free(struct egress *eg);
/* The filtered page of t's job, on the loop thread (egress_tls.c). */
void egress_icpt_filtered(struct tunnel *t, struct egress_filter_job *j);

/* ---- egress_tunnel.c ---- */

/* A new tunnel on fd for session s, reading its request head (the caller
 * checked the caps); egress_tunnel_refuse_fd answers status and closes
 * (s NULL: out of memory, no row). */
void egress_tunnel_open(struct egress *eg, struct esess *s, int fd, bool from_runner);
void egress_tunnel_refuse_fd(struct egress *eg, struct esess *s, int fd, int status, const char *reason,
                             const char *detail);
/* The audit row (and counters) for t's decision; blocked rows are capped per session. */
void egress_tunnel_record(struct tunnel *t, bool allowed, const char *reason);
/* Unlink from its session and free everything (any state). */
void egress_tunnel_free(struct tunnel *t);
/* Refuse: an error response to the client, then close once it is written. */
void egress_tunnel_refuse(struct tunnel *t, int status, const char *reason, const char *detail);
/* The same with the status line's text and a body of the caller's
 * (content_type, body), which a client prints (pip, npm). */
void egress_tunnel_refuse_body(struct tunnel *t, int status, const char *phrase, const char *reason,
                               const char *content_type, const char *body);
/* The end of an allowed tunnel: its row (none when an intercepted
 * connection ends between two requests: icpt_next wrote the last one), then
 * close. */
void egress_tunnel_finish(struct tunnel *t, const char *reason);
/* (Re)arm t's timer ms from now. */
void egress_tunnel_arm(struct tunnel *t, int ms);
/* t's session is over egress_max_bytes_per_session. */
bool egress_bytes_over(struct tunnel *t);

/* ---- egress_exec.c (network policy per execution) ---- */

/* Read the RP_EGRESS_FROM header at the start of in, once: 1 when done (or
 * there is none: a client that is not the runner's), 0 to wait for more,
 * -1 when it is malformed (refused). */
int egress_exec_from(struct tunnel *t, struct evbuffer *in);
/* Whether t's host passes the session's own narrowing, then that of the
 * execution it came from; if not, the audit reason ("narrowed:session",
 * "narrowed:<execution id>") and a detail. */
bool egress_exec_allowed(struct tunnel *t, char *ret_reason, size_t reason_size, char *ret_detail, size_t detail_size);

/* ---- egress_relay.c ---- */

/* Connect to t's next judged address (or refuse once none is left). */
void egress_try_connect(struct tunnel *t);

#endif
