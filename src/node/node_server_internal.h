/* node_server_internal.h — what node_server.c (the links: listening,
 * authenticating, one thread per node, the streams they open) and
 * node_server_ops.c (what is asked of a node: requests, placement, the
 * gateway, the runner hub's node_ops) share: the server's state and the few
 * functions that cross. Locks as node_server.c's header says. */
#ifndef SANDBOXD_NODE_SERVER_INTERNAL_H
#define SANDBOXD_NODE_SERVER_INTERNAL_H

#include "node_internal.h"

struct node_link {
        struct node_server *s;
        struct node_link *next;
        pthread_t thread;
        int fd; /* until the handshake hands it to l */
        bool registered, done;
        bool running; /* nl_init done: nl_stop may be called (s->lock) */
        /* link thread: the last refused stream's session, so a runner that retries every second
         * is not an audit row a second */
        char refused_key[140];
        int64_t refused_ms;
        struct nl l;
        char name[NODE_NAME_MAX + 1];
        /* egress connects other threads asked for (s->lock), opened by the link thread */
        struct ns_connect *connects;
        size_t n_connects;
        uint32_t next_connect; /* s->lock */
};

struct ns_connect {
        struct ns_connect *next;
        uint32_t id; /* NODE_STREAM_CONTROL set */
        int fd;      /* the link's end of the socketpair */
        struct node_connect c;
};

struct ns_req {
        struct ns_req *next;
        uint32_t id;
        struct node_link *link;
        bool done;
        int result;
        char text[SBX_PATH_MAX];
};

/* A node known since start: connected now (link), or away since down_since. */
struct ns_node {
        char name[NODE_NAME_MAX + 1];
        struct node_link *link; /* registered and running; NULL: away */
        int64_t since;          /* wall ms: connected (link) or went away */
        int64_t down_since;     /* monotonic ms it went; 0: connected, or fenced already */
        bool up_due;            /* hooks->up to call */
        bool fenced;
};

/* The gateway's sockets and published ports asked for a session not placed
 * yet (its Pod not bound): served once it is (ops_open). */
struct ns_gw_pending {
        struct ns_gw_pending *next;
        char user[65], session[65];
        unsigned flags;
        bool has_ports; /* node_server_publish was asked: ports (n_ports) */
        int *ports;
        size_t n_ports;
};
#define NS_GW_PENDING_MAX NODE_MAX_SESSIONS

struct node_server {
        const struct sbx_config *cfg;
        struct node_server_hooks hooks;
        void *ud;
        struct nl_tls *tls;
        int lfd, port;
        int wake[2];
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool stop;
        struct node_link *links;
        size_t n_links;
        struct ns_node nodes[NODE_MAX_NODES];
        size_t n_nodes;
        size_t n_up; /* nodes with a link */
        char binary[SBX_PATH_MAX];
        uint32_t next_req;
        struct ns_req *reqs;
        uint64_t refused;
        uint64_t lost;      /* links of registered nodes that ended */
        bool gateway_ready; /* hooks.gateway may be called (node_server_gateway_ready) */
        struct ns_gw_pending *gw_pending;
        size_t n_gw_pending;
};

/* ---- node_server.c ---- */

struct ns_node *node_find_locked(struct node_server *s, const char *name);
/* The session's node (the store's placement, read with no lock held); "" if none. */
void node_of(struct node_server *s, const char *user, const char *session, char ret[NODE_NAME_MAX + 1]);
struct node_link *link_of_node_locked(struct node_server *srv, const char *name);
/* Wait (s->lock held) until name is connected, or any node when name is
 * empty, or until. NULL: none. */
struct ns_node *wait_node_locked(struct node_server *s, const char *name, const struct timespec *until);

#endif
