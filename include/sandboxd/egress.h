/* egress.h — the daemon's egress proxy (issue 14, items 2-5).
 *
 * A sealed container (NetworkMode none) reaches the outside only through
 * its runner: the runner listens on 127.0.0.1:3128 inside the container
 * and passes each accepted connection, byte for byte, to the session's
 * egress.sock in its read-only runner directory. The gateway (which
 * listens on that socket) hands every accepted connection here. Its bytes
 * are an HTTP proxy client's: CONNECT host:port for TLS, or an
 * absolute-URI HTTP request. This module decides (default deny, the
 * allowlist, the SSRF guard), resolves, connects (or has the session's
 * node agent connect: egress_set_connect_hook), records an audit row and
 * relays.
 *
 * Threads: egress_new starts the module's own loop thread; egress_accept
 * and egress_close_session may be called from any thread.
 *
 * Policy (docs/security.md, "The egress proxy"): default deny; the allowlist is the config's
 * egress_allow plus the additions per user and per session in the store
 * (egress_rules.h); the SSRF guard refuses loopback, private, link-local,
 * metadata and other special addresses (egress_policy.h) unless they are in
 * egress_allow_private. Every decision is a row of egress_log (blocked rows
 * rate-limited per session, with a count of those not written). */
#ifndef SANDBOXD_EGRESS_H
#define SANDBOXD_EGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"
#include "sandboxd/egress_policy.h" /* EGRESS_HOST_MAX */

struct egress;
struct store;

int egress_new(const struct sbx_config *cfg, struct store *store, struct egress **ret, struct sbx_error *err);
/* A blocked decision that is written to the log (the rate limit applies),
 * told to whoever publishes events (the daemon wires events_egress_blocked:
 * the proxy sits below the core and never calls it). Called on the proxy's
 * loop thread: it must not block. */
typedef void (*egress_blocked_fn)(const char *user, const char *session, const char *host, int port, const char *reason,
                                  void *userdata);
/* Set once, before the first connection; NULL: nobody is told. */
void egress_set_blocked_hook(struct egress *eg, egress_blocked_fn fn, void *userdata);
/* Where the proxy's outgoing connections leave from (node.h: a node agent
 * beside the session's container makes them). Called on the proxy's loop
 * thread for each judged address: must not block. 0 and *ret_fd, a
 * connected stream socket whose first 4 bytes (int32, host order) are the
 * connect's result (0 or -errno), then the upstream's bytes; or -errno at
 * once. */
typedef int (*egress_connect_fn)(const char *user, const char *session, const struct sockaddr *sa, socklen_t len,
                                 void *userdata, int *ret_fd);
/* Set once, before the first connection; NULL (the default): the proxy
 * connects itself. The decision (policy, lookup, the private-range guard)
 * stays the proxy's either way. */
void egress_set_connect_hook(struct egress *eg, egress_connect_fn fn, void *userdata);
/* Network policy per execution (issue 37 item 3; docs/security.md). The
 * runner names the execution a connection came from (RP_EGRESS_FROM, read
 * only when the peer of egress.sock is the verified runner: from_runner of
 * egress_accept_from); the proxy asks this hook for that execution's
 * narrowing from the daemon's own table. from is RP_FROM_EXEC (tag),
 * RP_FROM_NONE (a service: never narrowed) or RP_FROM_UNKNOWN (tag 0: the
 * narrowest of the session's running executions applies, i.e. refused
 * while any narrowed one runs). true and *ret (patterns; n_allow 0 is
 * "none") and ret_id (the execution's id, "" if not known) when narrowed.
 * Called on the proxy's loop thread: must not block. */
struct egress_net;
typedef bool (*egress_narrow_fn)(const char *user, const char *session, unsigned int from, uint32_t tag,
                                 struct egress_net *ret, char ret_id[40], void *userdata);
/* Set once, before the first connection; NULL: nothing is narrowed. */
void egress_set_narrow_hook(struct egress *eg, egress_narrow_fn fn, void *userdata);
/* Secrets (issue 37; docs/security.md "Secrets"). A session's attached
 * secrets as the proxy needs them: each placeholder (refused anywhere it
 * may not go), its hosts and header, and its value (NULL when it cannot be
 * opened: then the proxy never swaps it). Values are wiped when freed. */
#define EGRESS_SECRET_HOSTS 8
#define EGRESS_INJECT_MAX 600 /* STORE_SECRET_TEMPLATE_MAX */
struct egress_secret {
        char name[65];
        char placeholder[40];
        char header[65]; /* "" = any header */
        char hosts[EGRESS_SECRET_HOSTS][EGRESS_HOST_MAX];
        /* a rule's (E2B's network.rules): header's value, its placeholder in it, set by the proxy on
         * requests to hosts in place of the sandbox's; "" = no rule */
        char inject[EGRESS_INJECT_MAX];
        size_t n_hosts;
        unsigned char *value; /* malloc'd, NUL-terminated */
        size_t value_len;
};
void egress_secrets_free(struct egress_secret *v, size_t n);
/* The earliest value of v[0..n) in buf[0..len) (values NULL or empty are skipped): its
 * place, its index in *ret_i; NULL when none is there. What every mask runs (the
 * proxy's response bodies, executions' and cells' output). */
const char *egress_secret_find(const struct egress_secret *v, size_t n, const char *buf, size_t len, size_t *ret_i);
struct egress_secrets_ops {
        /* The session's attachments (malloc'd array; n 0 when none). */
        int (*attached)(const char *user, const char *session, struct egress_secret **ret, size_t *ret_n, void *ud);
        /* The session's CA, made on first use: certificate and key, PEM, malloc'd (the key wiped by the caller). */
        int (*ca)(const char *user, const char *session, char **ret_cert_pem, char **ret_key_pem, void *ud);
};
/* Set once, before the first connection; without it nothing is intercepted
 * and no placeholder is looked for. Called on the proxy's loop thread. */
void egress_set_secrets_ops(struct egress *eg, const struct egress_secrets_ops *ops, void *userdata);
/* The user's package policy (egress.packages_file; egress_pkg.h), or NULL:
 * read-only for the daemon's life, any thread. */
struct egress_pkg_policy;
const struct egress_pkg_policy *egress_packages_for(struct egress *eg, const char *user);
/* Tests only: fn(user, package) runs on the index page filter's worker
 * just before a held page is filtered (off the loop thread). Set before
 * the first connection. */
typedef void (*egress_filter_hook_fn)(const char *user, const char *package, void *userdata);
void egress_set_filter_hook(struct egress *eg, egress_filter_hook_fn fn, void *userdata);
/* Closes every tunnel and stops the thread. NULL is fine. */
void egress_free(struct egress *eg);

/* A connection the session's runner opened on its egress.sock. Takes
 * ownership of fd (closed on every path). Never blocks. */
void egress_accept(struct egress *eg, const char *user, const char *session, int fd);
/* The same, saying whether the peer is the session's verified runner
 * (hub_peer.h): only then is its RP_EGRESS_FROM header believed. */
void egress_accept_from(struct egress *eg, const char *user, const char *session, int fd, bool from_runner);

/* The ratchet: close every open tunnel of the session and return only once
 * they are closed (bounded wait). Later connections of the session are
 * refused (the gateway stops listening on the session's egress.sock). */
void egress_close_session(struct egress *eg, const char *user, const char *session);

struct egress_stats {
        uint64_t allowed, blocked; /* decisions since the daemon started */
        int open;                  /* connections open now (tunnels and those being decided) */
        int64_t bytes;             /* per session only: bytes both ways since the daemon started */
};
/* The daemon's counters. eg NULL gives zeros. */
void egress_stats(struct egress *eg, struct egress_stats *ret);
/* One session's counters; -ENOENT when the proxy has not seen it lately. */
int egress_session_stats(struct egress *eg, const char *user, const char *session, struct egress_stats *ret);

/* Constants that were config keys: the proxy's own bounds. */
#define EGRESS_MAX_HEADER_BYTES (16 << 10) /* a request head larger is not a proxy request */
#define EGRESS_HEADER_TIMEOUT_MS 10000     /* the whole request head within this */
#define EGRESS_CONNECT_TIMEOUT_MS 10000    /* resolving and connecting upstream */
#define EGRESS_IDLE_TIMEOUT_MS 300000      /* a tunnel with no byte either way */
#define EGRESS_CONNS_PER_MINUTE 600        /* new connections per session per minute */
/* Open tunnels per session <= per user <= in all: a few fds each. */
#define EGRESS_MAX_TUNNELS_PER_SESSION 256
#define EGRESS_MAX_TUNNELS_PER_USER 1024
#define EGRESS_MAX_TUNNELS 4096

#endif
