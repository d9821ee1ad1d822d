/* gateway.h — the daemon's ends of a sealed container's network channels
 * (issue 14): egress.sock and fwd.sock in the session's read-only runner
 * directory, and the session's host port listeners.
 *
 * A sandbox container runs with NetworkMode none. Its ways out are:
 *   - egress: the runner listens on 127.0.0.1:RP_EGRESS_PORT inside and
 *     passes each connection to egress.sock; the gateway hands every
 *     accepted fd to the egress proxy (egress.h). Not served for private
 *     sessions, nor for bridge sessions (raw networking, operator's choice).
 *   - port forwards: the gateway listens on the session's host port block
 *     (publish_ip; over a node link the node listens on its own, see
 *     gateway_set_node_publish) and carries each connection through fwd.sock to the
 *     runner, which connects to 127.0.0.1:<CONTAINER_PORT_BASE + i> inside
 *     (protocol in runner_proto.h). No PortBindings, no docker-proxy.
 *
 * fwd.sock takes connections from the container's runner only
 * (hub_peer.h), checked at accept (by the node agent when the sockets
 * are a node's: gateway_set_node below): tenant code that dials it is closed
 * at once, so it can neither take the control connection over nor hold the
 * pending slots the runner's data connections need. egress.sock takes
 * anyone (it is the proxy the tenant reaches through the runner anyway),
 * but the proxy is told whether the peer is the runner: only the runner's
 * RP_EGRESS_FROM header names an execution (egress_accept_from; over a
 * node link never, the node does not check it).
 *
 * Everything arriving on the sockets is tenant input: frames are checked,
 * a data connection must name a forward the gateway opened (id and a random
 * token), unpaired connections time out, and forwards are capped per
 * session, per user and in total (GATEWAY_FORWARD_MAX_PER_SESSION,
 * GATEWAY_FORWARD_MAX_PER_USER, GATEWAY_FORWARD_MAX_TOTAL). Each
 * forwarded connection buffers at most GATEWAY_BUF_HIGH bytes per direction.
 *
 * Threads: one thread ("sbx-gateway") runs a libevent loop that owns every
 * socket and buffer. The public calls queue a command to it and wait
 * (bounded) for it to be done. */
#ifndef SANDBOXD_GATEWAY_H
#define SANDBOXD_GATEWAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

#define GATEWAY_BUF_HIGH (64 * 1024)

struct gateway;
struct egress;

/* Is the session private (the ratchet)? Must fail closed (true) when it
 * cannot tell. Called on the gateway thread. */
typedef bool (*gateway_private_fn)(const char *user, const char *session, void *userdata);

/* eg may be NULL (no egress: egress.sock is never served). */
int gateway_new(const struct sbx_config *cfg, struct egress *eg, struct gateway **ret, struct sbx_error *err);
/* Closes every socket and stops the thread. NULL is fine. */
void gateway_free(struct gateway *gw);

void gateway_set_private_check(struct gateway *gw, gateway_private_fn fn, void *userdata);
/* A host client connected to one of the session's published ports: told
 * on the gateway thread, before its forward waits for the runner (up to
 * 30 s), so a paused session can be resumed meanwhile. Must not block. */
typedef void (*gateway_wake_fn)(const char *user, const char *session, void *userdata);
void gateway_set_wake(struct gateway *gw, gateway_wake_fn fn, void *userdata);
/* True when the check says private (and when gw is NULL: fail closed). */
bool gateway_is_private(struct gateway *gw, const char *user, const char *session);

/* Serve the session: listen on its host ports (ports[n], on publish_ip),
 * on dir/fwd.sock, and on dir/egress.sock when egress is true. dir is the
 * session's runner directory (hub_prepare), NULL when the container
 * has no runner (then host connections are closed at once; with a runner, a
 * client that comes while the runner's control connection is away waits for
 * it, within the 30 s pairing deadline). Idempotent; a
 * changed port block moves the listeners. A private session gets nothing
 * (asked again on the gateway thread). -EADDRINUSE (err names the port)
 * when a host port is held by someone else: the caller takes another block. */
int gateway_open(struct gateway *gw, const char *user, const char *session, const char *dir, const int *ports, size_t n,
                 bool egress, struct sbx_error *err);

/* The ratchet: if the session is private, close its host listeners, its
 * forwards and both sockets (unlinked) and its egress tunnels
 * (egress_close_session) before returning; the session is never served
 * again until gateway_drop. No-op for a session that is not private. */
void gateway_enforce(struct gateway *gw, const char *user, const char *session);

/* Stop serving the session (its block was released or it is gone): close
 * everything, unlink its sockets. NULL gw is fine. */
void gateway_drop(struct gateway *gw, const char *user, const char *session);

/* ---- over a node link (node.h) ----
 * The session's egress.sock and fwd.sock are then the node agent's: it
 * listens (asked through fn: flags NODE_GW_EGRESS | NODE_GW_FWD, 0 to stop
 * and remove them), checks fwd.sock's peer on its host, and each accepted
 * connection comes back through gateway_attach. The host port listeners
 * are the node's too once gateway_set_node_publish is set: the node
 * listens on its own publish_ip, and each client comes back through
 * gateway_attach_published, taken exactly as a client of a listener here
 * (the caps, the wake of a paused session, the runner's RP_FWD_OPEN). */
typedef int (*gateway_node_fn)(const char *user, const char *session, unsigned flags, void *userdata,
                               struct sbx_error *err);
/* Set once, before the first gateway_open. */
void gateway_set_node(struct gateway *gw, gateway_node_fn fn, void *userdata);
/* A connection the node accepted on the session's egress.sock (kind
 * NODE_STREAM_EGRESS) or fwd.sock (NODE_STREAM_FWD, the runner's). Takes
 * fd; never waits for the gateway thread. */
void gateway_attach(struct gateway *gw, const char *user, const char *session, int kind, int fd);
/* Listen on exactly these host ports of the session on the node (n 0:
 * none); -EADDRINUSE as gateway_open. */
typedef int (*gateway_publish_fn)(const char *user, const char *session, const int *ports, size_t n, void *userdata,
                                  struct sbx_error *err);
/* Set once, before the first gateway_open. */
void gateway_set_node_publish(struct gateway *gw, gateway_publish_fn fn, void *userdata);
/* A client the node accepted on the session's published port `port`.
 * Takes fd; never waits for the gateway thread. A port the session does
 * not publish (any more) closes it. */
void gateway_attach_published(struct gateway *gw, const char *user, const char *session, int port, int fd);

/* A connection to 127.0.0.1:port inside the session's container (E2B's
 * getHost traffic, e2b_proxy.c), through fwd.sock and the runner as a
 * published port's client, within the same caps: *ret_fd is the caller's
 * end of a socketpair (O_CLOEXEC, blocking) whose other end the gateway
 * thread splices. A session not served (unknown, private, no runner, over a
 * cap) or a port nothing listens on reads as an EOF before any byte. Never
 * waits for the gateway thread; wakes a paused session as a published
 * port's client does. */
int gateway_dial(struct gateway *gw, const char *user, const char *session, int port, int *ret_fd);

struct gateway_stats {
        size_t sessions;  /* served */
        size_t listeners; /* host port listeners */
        size_t forwards;  /* open forwarded connections */
};
void gateway_get_stats(struct gateway *gw, struct gateway_stats *ret);

/* Open port-forwarded connections per session, per user and in all: each
 * holds two fds; the caps sit well below the daemon's fd limit. */
#define GATEWAY_FORWARD_MAX_PER_SESSION 2048
#define GATEWAY_FORWARD_MAX_PER_USER 4096
#define GATEWAY_FORWARD_MAX_TOTAL 16384

#endif
