/* gateway_internal.h — what gateway.c (the loop, sessions, commands) and
 * gateway_fwd.c (listeners, forwards, fwd.sock and egress.sock) share.
 * Everything here belongs to the loop thread except the atomics and what
 * gateway.c's header says gw->lock guards. */
#ifndef SANDBOXD_GATEWAY_INTERNAL_H
#define SANDBOXD_GATEWAY_INTERNAL_H

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sandboxd/gateway.h"
#include "sandboxd/hub_peer.h"

struct gw_cmd;

struct gw_sess;

struct gw_listen {
        struct gw_sess *s;
        int index; /* port index, or -1 for the unix sockets */
        int port;
        struct evconnlistener *l;
        bool remote; /* the node listens for it (gateway_set_node_publish); l stays NULL */
};

struct gw_side {
        struct gw_fwd *f;
        int i; /* 0: host client, 1: the runner's data connection */
};

struct gw_fwd {
        struct gw_sess *s;
        struct gw_fwd *next, *prev; /* s->fwds */
        uint32_t id;
        uint64_t token;
        uint32_t port; /* the container port it goes to */
        bool opened;   /* RP_FWD_OPEN written to the runner's control connection */
        bool paired;
        bool eof[2];
        bool shut[2]; /* shutdown(SHUT_WR) done on side i */
        struct bufferevent *b[2];
        struct gw_side side[2];
        struct event *timer; /* pairing deadline */
};

/* A fwd.sock connection that has not said what it is yet. */
struct gw_pending {
        struct gw_sess *s;
        struct gw_pending *next, *prev;
        struct bufferevent *b;
};

/* Forwards of one user across its sessions (GATEWAY_FORWARD_MAX_PER_USER). */
struct gw_user {
        struct gw_user *next;
        char user[65];
        size_t sessions, fwds;
};

struct gw_sess {
        struct gateway *gw;
        struct gw_sess *next;
        struct gw_user *u;
        char user[65], session[65];
        bool sealed;    /* the ratchet: never served again until dropped */
        bool egress_on; /* egress served (over a node link: the node listens, gateway_attach hands in) */
        int dirfd;      /* the runner directory, -1 without a runner */
        bool runner;    /* the container has a runner (gateway_open's dir): a client waits for its ctrl */
        struct gw_listen egress, fwd;
        struct gw_listen *hosts;
        size_t n_hosts;
        struct bufferevent *ctrl; /* the runner's control connection */
        struct gw_fwd *fwds;
        size_t n_fwds;
        struct gw_pending *pending;
        size_t n_pending;
        uint32_t next_id;
        /* fwd.sock takes the container's runner only (hub_peer.h) */
        struct hub_peer peer;      /* the runner accepted last */
        uint64_t impostors;        /* connections refused as not the runner */
        uint64_t impostors_said;   /* of them, the count last logged */
        int64_t impostors_said_ms; /* when (monotonic) */
};

struct gateway {
        const struct sbx_config *cfg;
        struct egress *eg;
        struct event_base *base;
        struct event *cmd_ev;
        struct event *resume_ev; /* re-enables listeners paused by an accept error */
        pthread_t thread;
        pthread_mutex_t lock;
        struct gw_cmd *cmds, **cmds_tail;
        bool stop;
        gateway_private_fn is_private;
        void *private_ud;
        gateway_wake_fn wake; /* (lock) a host client arrived: resume a paused session */
        void *wake_ud;
        gateway_node_fn node_fn; /* the sockets are a node agent's (node.h); set once before use */
        void *node_ud;
        gateway_publish_fn publish_fn; /* the host listeners are the node's; set once before use */
        void *publish_ud;
        struct gw_sess *sessions; /* loop thread only */
        struct gw_user *users;    /* loop thread only */
        size_t n_fwds;            /* loop thread only */
        atomic_size_t st_sessions, st_listeners, st_forwards;
};

/* ---- gateway_fwd.c ---- */

/* Free a forward (both sides) or a fwd.sock connection not known yet. */
void gateway_fwd_free(struct gw_fwd *f);
void gateway_pending_free(struct gw_pending *p);
/* Listener callbacks for the session's fwd.sock and egress.sock. */
void gateway_fwd_sock_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *ud);
void gateway_egress_sock_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *ud);
/* A fwd.sock connection whose peer is known to be the runner (checked
 * here, or on the node): wait for its first frame. Takes fd. */
void gateway_fwd_sock_take(struct gw_sess *s, evutil_socket_t fd);
/* gw->resume_ev: enable every listener an accept error paused. */
void gateway_resume_listeners(evutil_socket_t fd, short what, void *ud);
void gateway_listen_close(struct gw_listen *gl);
/* Listen on the unix socket `name` in the session's runner directory
 * (mode 0666, a stale one removed first), or on publish_ip:port for port
 * index `index`. */
int gateway_unix_listen(struct gw_sess *s, struct gw_listen *gl, const char *name, evconnlistener_cb cb,
                        struct sbx_error *err);
void gateway_unix_close(struct gw_sess *s, struct gw_listen *gl, const char *name);
int gateway_host_listen(struct gw_sess *s, struct gw_listen *gl, int index, int port, struct sbx_error *err);
/* A client of the host port gl (accepted here, or by the node). Takes fd. */
void gateway_host_take(struct gw_listen *gl, evutil_socket_t fd);
/* A client for container port `port` (1..65535) of s, within the caps,
 * through the runner as a published port's. Takes fd. */
void gateway_fwd_take(struct gw_sess *s, evutil_socket_t fd, int port);

#endif
