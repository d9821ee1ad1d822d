/* egress.h — the daemon's egress proxy (issue 14, items 2-5).
 *
 * A sealed container (NetworkMode none) reaches the outside only through
 * its runner: the runner listens on 127.0.0.1:3128 inside the container
 * and passes each accepted connection, byte for byte, to the session's
 * egress.sock in its read-only runner directory. The gateway (which
 * listens on that socket) hands every accepted connection here. Its bytes
 * are an HTTP proxy client's: CONNECT host:port for TLS, or an
 * absolute-URI HTTP request. This module decides (default deny, the
 * allowlist, the SSRF guard), resolves, connects, records an audit row
 * and relays.
 *
 * Threads: egress_new starts the module's own loop thread; egress_accept
 * and egress_close_session may be called from any thread.
 *
 * STATUS: interface only. src/egress.c is a stub that refuses every
 * connection (deny all) until the egress proxy lands. */
#ifndef SANDBOXD_EGRESS_H
#define SANDBOXD_EGRESS_H

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct egress;
struct store;

int egress_new(const struct sbx_config *cfg, struct store *store, struct egress **ret, struct sbx_error *err);
/* Closes every tunnel and stops the thread. NULL is fine. */
void egress_free(struct egress *eg);

/* A connection the session's runner opened on its egress.sock. Takes
 * ownership of fd (closed on every path). Never blocks. */
void egress_accept(struct egress *eg, const char *user, const char *session, int fd);

/* The ratchet: close every open tunnel of the session and return only once
 * they are closed (bounded wait). Later connections of the session are
 * refused (the gateway stops listening on the session's egress.sock). */
void egress_close_session(struct egress *eg, const char *user, const char *session);

#endif
