/* node.h — the link between the deciding part of sandboxd (sessions, the
 * store, quotas, policy, audit, the fronts) and the node part, which must
 * sit beside the containers: the session directories and the sockets in
 * them, where each container's runner connects (issue 26).
 *
 * The link is a table of operations the runner hub calls for a session's
 * channels (struct node_ops), a request for the gateway's sockets
 * (node_server_gateway), and calls back the other way: a connection the
 * node accepted from a session's runner, already checked to come from that
 * container's runner (hub_peer.h), handed to the hub as a connected fd
 * (hub_attach); one accepted on egress.sock or fwd.sock (the latter
 * checked the same way) handed to the gateway (gateway_attach); a client of
 * one of the session's published ports, which the node listens on with its
 * own publish_ip (node_server_publish), handed to the gateway as if its own
 * listener had accepted it (gateway_attach_published); and the egress
 * proxy's outgoing connections, which the node makes to the address the
 * proxy decided on (node_server_connect), so egress leaves from the node.
 * Two links exist:
 *   - in one process (the default): the hub makes the directories and
 *     listens itself; the ops table is not used at all, so the exec path is
 *     exactly what it was (no extra copy, no extra thread);
 *   - over TLS to `sandboxd node` (node.listen set): node_server_ops below.
 *     The node agent makes the directories, listens, checks the runner
 *     where SO_PEERCRED and /proc mean something, and relays every accepted
 *     connection's bytes over one TLS connection per node. The runner
 *     protocol (runner_proto.h) is unchanged: the hub reads the same frames
 *     from a socketpair whose other end the link relays.
 *
 * Many nodes. The control daemon serves any number of node agents, one
 * link per node name; each session is placed on one node (the store's
 * session_nodes, migration 0031, through the hooks node_of/place/placed)
 * and every request about it goes to that node. An engine that places
 * containers itself (Kubernetes) names the node (engine_inspect's node,
 * the Pod's spec.nodeName): the hub opens the directory there once the Pod
 * is bound (hub_prepare_on). Otherwise node_ops.open chooses
 * (NODE_OPEN_NEW): node.name, else the session's node while connected, else
 * the connected node with the fewest sessions.
 *
 * On Kubernetes a node agent runs with data_dir = {K8S_NODE_DIR}/<its node
 * name> (certificate CN = the node's name), and a session Pod mounts
 * hostPath {K8S_NODE_DIR} with subPathExpr
 * "$(SBX_NODE_NAME)/runner/<hub_dir_key>" and SBX_NODE_NAME from the
 * downward API (spec.nodeName). kubelet may make that directory before the
 * agent opens it: the agent accepts a root-owned directory (O_NOFOLLOW,
 * never a link) and makes it 0755.
 *
 * The link protocol (one TLS 1.3 connection, mutually authenticated: the
 * node agent dials the control daemon, both present a certificate of the
 * same CA (node.ca), the control checks node.crl on every handshake and
 * reloads it when the file changes, the node checks the control's name
 * NODE_CONTROL_NAME; the node's name is its certificate's common name).
 * Frames: struct node_hdr (little endian) then len bytes, len at most
 * NODE_MAX_FRAME; anything else closes the link with a log line.
 *   NF_HELLO  node→control, first: protocol, the runner binary's host path
 *   NF_PING / NF_PONG  either way; a link silent for 3 heartbeats is closed
 *   NF_REQ    control→node (stream = request id): struct node_req
 *   NF_RESP   node→control: int32 result (0 or -errno), then a path or message
 *   NF_OPEN   node→control: a stream (id chosen by the node, high bit
 *             clear) for a connection accepted on a session's socket
 *             (runner.sock, egress.sock, fwd.sock) or published port:
 *             struct node_open, with the session epoch the node was given;
 *             control→node: an egress connect (id with NODE_STREAM_CONTROL):
 *             struct node_connect
 *   NF_CONNECTED node→control: int32 result of a connect (0 or -errno); on
 *             0 the stream carries the upstream's bytes
 *   NF_DATA   either way: bytes of a stream
 *   NF_ACK    either way: uint32 bytes of a stream written out; a side
 *             never has more than NODE_WINDOW bytes of a stream unacknowledged
 *   NF_CLOSE  either way: no more bytes from this side (a half close: the
 *             other side shuts its fd's write half; the stream goes when
 *             both sides have closed)
 *
 * Fencing. Every session has an epoch (store, migration 0030): one more each
 * time its container is made (hub_prepare) or moved (a pool claim,
 * hub_rekey). The control gives the node the epoch with each session
 * it opens; the node presents it with every stream; a stream whose epoch is
 * not the session's current one is refused with an audit row
 * ("node_epoch_refused"); a stream about a session placed on another node
 * is refused too ("node_placement_refused"). A node whose link stays down
 * for node.fence fences the sessions placed on it, and only those: they
 * count as failed (their next request makes a new container, a new epoch),
 * and their executions end as lost. A link that
 * comes back within node.fence loses nothing: the hub keeps the executions
 * of the session's runner, and when the runner reconnects through the new
 * link and lists what it holds, they resume where their output stopped (the
 * same protocol as a daemon restart). */
#ifndef SANDBOXD_NODE_H
#define SANDBOXD_NODE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

#define NODE_PROTOCOL 1
#define NODE_HDR_LEN 12
#define NODE_MAX_FRAME (64 * 1024)
#define NODE_WINDOW (64 * 1024) /* unacknowledged bytes per stream and direction (as GATEWAY_BUF_HIGH) */
/* Streams per link: GATEWAY_FORWARD_MAX_TOTAL plus twice EGRESS_MAX_TUNNELS (an
 * egress tunnel is egress.sock's stream and the node's connect), per
 * session GATEWAY_FORWARD_MAX_PER_SESSION plus twice EGRESS_MAX_TUNNELS_PER_SESSION,
 * of the side's own config, each plus this (the runner's connections). */
#define NODE_STREAMS_SLACK 256
#define NODE_MAX_SESSIONS 65536         /* sessions one node agent serves */
#define NODE_MAX_LINKS 64               /* node agents connected (and handshaking) at once */
#define NODE_REQ_TIMEOUT_MS 10000       /* a request to the node answers within this */
#define NODE_HANDSHAKE_TIMEOUT_MS 10000 /* TLS handshake and hello */
#define NODE_WRITE_DEADLINE_MS 5000     /* one frame onto the link */
#define NODE_NAME_MAX 64
#define NODE_HEARTBEAT_MS 2000 /* link ping interval; a link silent for three is closed (node.fence is the knob) */
#define NODE_CONTROL_NAME "sandboxd-control" /* the name a node agent expects in the control's certificate */
#define NODE_MAX_NODES 256                   /* nodes known at once (a fenced one away is forgotten for a new one) */

enum node_frame {
        NF_HELLO = 1,
        NF_PING = 2,
        NF_PONG = 3,
        NF_REQ = 4,
        NF_RESP = 5,
        NF_OPEN = 6,
        NF_DATA = 7,
        NF_ACK = 8,
        NF_CLOSE = 9,
        NF_CONNECTED = 10, /* node→control: int32 result (0 or -errno) of a NODE_STREAM_CONNECT stream */
};

struct node_hdr {
        uint32_t len;
        uint16_t type;
        uint16_t flags;
        uint32_t stream;
};

enum node_op {
        NODE_OP_OPEN = 1,    /* make (or keep) the session's directory and listen in it */
        NODE_OP_ADOPT = 2,   /* the same, only if the directory exists (-ENOENT otherwise) */
        NODE_OP_DROP = 3,    /* stop listening, remove the directory */
        NODE_OP_REKEY = 4,   /* rename (user, session) to (user2, session2) */
        NODE_OP_GATEWAY = 5, /* listen (or stop) on egress.sock and fwd.sock: flags NODE_GW_* */
        NODE_OP_PUBLISH = 6, /* listen on publish_ip:port for exactly these ports: flags = how many
                              * (0: none), then that many uint32 ports after the struct */
};

#define NODE_PUBLISH_PER_SESSION 1000   /* ports_per_session's largest value */
#define NODE_PUBLISH_MAX 16384          /* published ports one node agent listens on */
#define NODE_CONNECTS_MAX 1024          /* egress connects in flight on one node agent */
#define NODE_CONNECT_TIMEOUT_MS 10000   /* a node's connect for the egress proxy */
#define NODE_STREAM_CONTROL 0x80000000u /* stream ids the control chooses (NF_OPEN to the node) */

#define NODE_GW_EGRESS 1u /* egress.sock: any connection (the proxy decides) */
#define NODE_GW_FWD 2u    /* fwd.sock: the runner's only (checked on the node) */

struct node_req {
        uint32_t op;
        uint32_t flags; /* NODE_OP_GATEWAY: NODE_GW_*; else 0 */
        uint64_t epoch; /* OPEN, ADOPT: of (user, session); REKEY: of (user2, session2) */
        char user[65], session[65], user2[65], session2[65];
};

enum node_stream_kind {
        NODE_STREAM_RUNNER = 1,
        NODE_STREAM_EGRESS = 2,
        NODE_STREAM_FWD = 3,
        NODE_STREAM_PUBLISHED = 4, /* a client of a published port (node_open.port) */
        NODE_STREAM_CONNECT = 5,   /* control→node: the egress proxy's connect (struct node_connect) */
};

struct node_open {
        uint32_t kind;
        uint32_t port; /* NODE_STREAM_PUBLISHED: the published port it came to; else 0 */
        uint64_t epoch;
        char user[65], session[65];
};

/* NF_OPEN control→node (stream id with NODE_STREAM_CONTROL set): connect
 * to exactly this address (no lookup: the proxy decided and resolved),
 * non-blocking within NODE_CONNECT_TIMEOUT_MS, then NF_CONNECTED. */
struct node_connect {
        uint32_t kind;   /* NODE_STREAM_CONNECT */
        uint16_t family; /* 4 (IPv4, addr[0..3]) or 6 (IPv6) */
        uint16_t port;   /* 1-65535 */
        uint8_t addr[16];
        char user[65], session[65];
        uint8_t pad[2]; /* zero */
};

/* ---- the link interface (what the runner hub calls) ---- */

enum node_open_mode {
        NODE_OPEN_NEW = 1,   /* a new container (hub_prepare): placed (again) here */
        NODE_OPEN_AGAIN = 2, /* the node came back (hub_reopen): on the session's node */
        NODE_OPEN_ADOPT = 3, /* after a restart, only if the directory exists (-ENOENT otherwise) */
};

struct node_ops {
        /* The runner binary's path on the node if usable, else NULL. */
        const char *(*binary)(void *node);
        /* NODE_OP_OPEN / NODE_OP_ADOPT: *ret_dir is the node's directory to
         * bind-mount. where: the node the engine put the container on
         * (kube-scheduler), or NULL: NODE_OPEN_NEW chooses (node.name, else
         * the session's node while connected, else the connected node with
         * the fewest sessions); the others use the session's node. The
         * session is placed on that node (the store) before it listens. */
        int (*open)(void *node, const char *user, const char *session, uint64_t epoch, enum node_open_mode mode,
                    const char *where, char ret_dir[SBX_PATH_MAX], struct sbx_error *err);
        void (*drop)(void *node, const char *user, const char *session);
        int (*rekey)(void *node, const char *from_user, const char *from_session, const char *to_user,
                     const char *to_session, uint64_t epoch, char ret_dir[SBX_PATH_MAX], struct sbx_error *err);
        /* Whether the session is placed on the node named name. */
        bool (*placed_on)(void *node, const char *user, const char *session, const char *name);
};

/* ---- the control daemon's end (node.listen) ---- */

struct node_server;

struct node_server_hooks {
        /* A runner connection the node accepted and checked, epoch checked
         * too: fd is connected (a socketpair end), the callee owns it. */
        void (*runner)(void *ud, const char *user, const char *session, int fd);
        /* The same for the gateway's sockets (kind NODE_STREAM_EGRESS or
         * NODE_STREAM_FWD): gateway_attach. */
        void (*gateway)(void *ud, const char *user, const char *session, int kind, int fd);
        /* The link under the session's runner connection is gone: the
         * connection closes next, its executions should wait for the runner
         * to come back (hub_suspend). */
        void (*suspend)(void *ud, const char *user, const char *session);
        /* A node agent (re)connected: open every session again (called on a
         * thread of the server's that may make requests); gateway_ready: the
         * daemon is open (node_server_gateway_ready was called). */
        void (*up)(void *ud, const char *node, bool gateway_ready);
        /* The node stayed away for node.fence: fence its sessions. */
        void (*fence)(void *ud, const char *node);
        /* The session's current epoch. */
        int (*epoch)(void *ud, const char *user, const char *session, uint64_t *ret);
        /* A stream from an old epoch (placed NULL), or about a session placed
         * on another node (placed: that node, "" for none), was refused
         * (write the audit row). */
        void (*refused)(void *ud, const char *node, const char *user, const char *session, uint64_t presented,
                        uint64_t current, const char *placed);
        /* A client the node accepted on one of the session's published
         * ports (node_server_publish), epoch checked: gateway_attach_published.
         * The callee owns fd. NULL: such streams are closed. */
        void (*published)(void *ud, const char *user, const char *session, int port, int fd);
        /* Placement (the store's session_nodes): the session's node ("" for
         * none) in ret; place it on node ("": forget it); how many sessions
         * are placed on node. Never called with the server's lock held. */
        int (*node_of)(void *ud, const char *user, const char *session, char ret[NODE_NAME_MAX + 1]);
        int (*place)(void *ud, const char *user, const char *session, const char *node);
        size_t (*placed)(void *ud, const char *node);
};

/* A node known to the control daemon (node_server_list). */
struct node_status {
        char name[NODE_NAME_MAX + 1];
        bool connected;
        bool fenced;          /* away past node.fence: its sessions were fenced */
        int64_t since_ms;     /* wall ms: connected at, or went away at */
        int64_t heartbeat_ms; /* wall ms of the last frame from it (connected only) */
};

/* Listen on cfg->node_listen (TLS with node.cert, node.key, node.ca,
 * node.crl). Starts the listener thread. */
int node_server_new(const struct sbx_config *cfg, const struct node_server_hooks *hooks, void *ud,
                    struct node_server **ret, struct sbx_error *err);
/* Closes every link and stops the threads: no hook is called after it
 * returns, and requests fail at once (-EHOSTUNREACH). NULL is fine. */
void node_server_stop(struct node_server *s);
/* Stops it if need be and frees it. NULL is fine. */
void node_server_free(struct node_server *s);
/* The ops over this server's links (node = the server). Each request goes to
 * the session's node (placement: node_ops.open). */
extern const struct node_ops node_server_ops;
/* Ask the node to serve (or stop serving) the session's egress.sock and
 * fwd.sock (flags NODE_GW_*; 0: neither, sockets removed). */
int node_server_gateway(struct node_server *s, const char *user, const char *session, unsigned flags,
                        struct sbx_error *err);
/* Ask the node to listen on its own publish_ip for exactly these ports of
 * the session (n 0: none), each client coming back through
 * hooks.published. -EADDRINUSE (err names the port) when one is taken on
 * the node. At most NODE_PUBLISH_PER_SESSION ports. */
int node_server_publish(struct node_server *s, const char *user, const char *session, const int *ports, size_t n,
                        struct sbx_error *err);
/* The egress proxy's connect, made by the session's node: to exactly sa
 * (AF_INET or AF_INET6, a port set), within NODE_CONNECT_TIMEOUT_MS. Never
 * waits: *ret_fd is a connected unix socket whose first 4 bytes (an int32
 * in host order) are the result, 0 or -errno, and then, on 0, the
 * upstream's bytes; what is written to it goes upstream. An end of stream
 * before the result: the link went (take it as -ECONNRESET). */
int node_server_connect(struct node_server *s, const char *user, const char *session, const struct sockaddr *sa,
                        socklen_t len, int *ret_fd);
/* hooks.gateway may be called from now on (streams of the gateway's
 * sockets before it are closed). */
void node_server_gateway_ready(struct node_server *s);
/* Whether any node is connected now; one's name in ret_name. */
bool node_server_connected(struct node_server *s, char *ret_name, size_t size);
/* Whether the node named name is connected now. */
bool node_server_node_connected(struct node_server *s, const char *name);
/* Wait up to timeout_ms for any node to be connected. */
bool node_server_wait(struct node_server *s, int timeout_ms);
/* Wait up to timeout_ms for the node named name ("": any). */
bool node_server_wait_node(struct node_server *s, const char *name, int timeout_ms);
/* Every node known since start (malloc'd array). */
int node_server_list(struct node_server *s, struct node_status **ret, size_t *ret_n);
/* The TCP port node.listen is bound to (useful with port 0). */
int node_server_port(struct node_server *s);
/* Handshakes refused (bad or revoked certificate) since start. */
uint64_t node_server_refused(struct node_server *s);
/* Links of connected nodes that ended since start. */
uint64_t node_server_links_lost(struct node_server *s);
/* For tests: bytes onto the connected node's link as they are (a
 * malformed request, say). -EHOSTUNREACH with no node connected. */
int node_server_send_raw(struct node_server *s, const void *buf, size_t len);

/* ---- the node agent (`sandboxd node`) ---- */

/* Serve the node part: dial cfg->node_connect, serve the sessions the
 * control opens, relay their runner connections; dial again (backing off)
 * when the link goes, until *stop. Returns 0 on stop, -errno when it cannot
 * start (a missing certificate, say). */
int node_agent_run(const struct sbx_config *cfg, volatile sig_atomic_t *stop, struct sbx_error *err);

/* ---- for tests: a bare link client (a node agent that does nothing by
 * itself). ---- */
struct node_client;
int node_client_connect(const struct sbx_config *cfg, struct node_client **ret, struct sbx_error *err);
/* Open a stream as a node would for an accepted connection (fd: the
 * node's end, taken), presenting epoch. The client relays it. */
int node_client_open(struct node_client *c, const char *user, const char *session, uint64_t epoch, int fd);
/* How many requests of op (NODE_OP_*) about (user, session) it was sent
 * (among the last 64 requests). */
size_t node_client_requests(struct node_client *c, uint32_t op, const char *user, const char *session);
/* Bytes onto the link as they are (a malformed frame, say). */
int node_client_send_raw(struct node_client *c, const void *buf, size_t len);
/* Wait up to timeout_ms for the link to end (the control closed it). */
bool node_client_closed(struct node_client *c, int timeout_ms);
void node_client_free(struct node_client *c);

#endif
