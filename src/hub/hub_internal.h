/* hub_internal.h — between the runner hub's files. Not a public header.
 *
 *   hub.c       the hub thread: connections, frames in and out, heartbeat
 *   hub_chan.c  a session's channel: directory, socket, wait, rename, drop
 *   hub_exec.c  executions over a connection
 *   hub_jobs.c  durable executions a reconnected runner still holds
 *   hub_ops.c   files and services over the same connections; it uses
 *                  only the last section (hub_conn, hub_send)
 *
 * The lock rules are in hub.c's header. */
#ifndef SANDBOXD_HUB_INTERNAL_H
#define SANDBOXD_HUB_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandboxd/node.h"
#include "sandboxd/hub.h"
#include "sandboxd/hub_ops.h"
#include "sandboxd/hub_peer.h"
#include "sandboxd/runner_proto.h"

/* An execution a reconnected runner still holds, until claimed. */
struct hub_job {
        uint32_t tag;
        struct rp_job r;
};

/* An execution the exec engine will adopt after a restart. */
struct hub_expect {
        char user[65], session[65];
        uint32_t tag;
};

enum ep_kind { EP_LISTEN, EP_CONN };

struct hub_chan;

struct ep_ref {
        struct hub_chan *c;
        enum ep_kind kind;
};

struct hub_chan {
        struct hub *h;
        struct hub_chan *next; /* h->chans */
        int refs;
        bool dead;
        char user[65], session[65];
        char dir[SBX_PATH_MAX];
        int dirfd, lfd, cfd;
        bool hello;
        bool ever_hello;     /* since the last prepare (a new container) */
        bool waited_in_vain; /* a wait timed out before any runner came */
        bool frozen;         /* its container is paused: no heartbeat is expected (hub_set_frozen) */
        int64_t last_rx;     /* monotonic ms of the last frame (heartbeat) */
        int64_t last_ping;
        char version[64];
        uint32_t next_tag;
        uint64_t conn_id; /* which connection: files and services (hub_ops.c) match it */
        struct ep_ref ep_listen, ep_conn;
        unsigned char *inbuf;
        size_t in_len;
        struct hub_exec *execs;
        pthread_mutex_t wlock;
        struct hub_job jobs[RP_MAX_JOBS]; /* listed by the runner after hello, not claimed yet */
        size_t n_jobs;
        bool jobs_complete; /* RP_JOBS_END arrived on this connection */
        bool refused_once;  /* a connection was refused before its hello (since the last prepare) */
        /* hub thread only: who may connect (hub_peer.h) */
        struct hub_peer peer; /* the runner accepted last */
        uint64_t peer_epoch;  /* the session's epoch when it was accepted */
        /* the runners of the session's earlier containers (their inits), refused by epoch: a
         * container its engine could not kill (a lost Kubernetes node) keeps dialling */
        struct hub_fenced {
                struct hub_fence f;
                uint64_t refused; /* connections refused from it */
        } fenced[RUNNER_FENCED_MAX];
        size_t n_fenced;
        bool fenced_loaded; /* the list kept in the session directory was read (hub.c) */
        /* h->lock: the session's container was removed (hub_fence_runner): the hub thread
         * fences the runner it knew before accepting any other */
        bool fence_pending;
        uint64_t epoch;            /* the session's epoch, as the last prepare made it (0: not known) */
        uint64_t impostors;        /* connections refused as not the runner */
        uint64_t impostors_said;   /* of them, the count last logged */
        int64_t impostors_said_ms; /* when (monotonic) */
        /* over a node link (node.h): h->lock */
        bool suspend;         /* the link under the connection went: keep its executions */
        int64_t resume_until; /* detached executions (cfd -1) wait for the runner until then */
};

struct hub_exec {
        struct hub_chan *c;
        struct hub_exec *next; /* c->execs (h->lock) */
        int refs;              /* h->lock */
        uint32_t tag;
        struct egress_net *net; /* h->lock: its narrowing (NULL: none; hub_narrowing) */
        char net_id[40];
        int cfd; /* the connection it is on (-1: detached, waiting for the runner to come back);
                  * written under h->lock, read with hub_exec_cfd() */
        hub_output_fn on_output;
        void *userdata;

        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool ended, lost;
        int fail;
        char error[256];
        struct runner_exit exit;
        uint64_t stdin_sent, stdin_acked;
        uint64_t recv[2];  /* stream offsets: delivered to on_output (persisted by it) */
        uint64_t acked[2]; /* what RP_ACK said last */
        int in_callback;   /* on_output calls under way (x->lock) */
};

struct hub {
        const struct sbx_config *cfg;
        char root[SBX_PATH_MAX];
        char binary[SBX_PATH_MAX];
        pthread_mutex_t lock;
        pthread_cond_t cond;
        /* Held from the look-up of a session's channel to its chan_add when its socket is
         * bound here (no node link): two threads binding the same socket file (the
         * adopters after a restart all call hub_adopt) would each unlink the other's, and
         * the channel kept could listen on a socket no path reaches. Taken before lock. */
        pthread_mutex_t open_lock;
        struct hub_chan *chans;
        int epfd;
        int wake[2];
        bool stop;
        pthread_t thread;
        hub_lost_fn on_lost;
        void *lost_ud;
        struct hub_expect *expect; /* h->lock */
        size_t n_expect;
        uint64_t next_conn_id;
        struct hub_ops *ops;             /* files and services (hub_ops.c) */
        hub_peer_fn peer_check;          /* h->lock; hub_peer_verify unless a test replaced it */
        const struct node_ops *node_ops; /* the node over a link (node.h); NULL: this process */
        void *node;
        hub_epoch_fn epoch_fn; /* session epochs (fencing); NULL: none */
        void *epoch_ud;
        hub_refused_fn refused_fn; /* a fenced runner dialled (audit); NULL: none */
        void *refused_ud;
};

static inline int hub_exec_cfd(const struct hub_exec *x)
{
        return __atomic_load_n(&x->cfd, __ATOMIC_ACQUIRE);
}
static inline void hub_exec_set_cfd(struct hub_exec *x, int cfd)
{
        __atomic_store_n(&x->cfd, cfd, __ATOMIC_RELEASE);
}

/* ---- hub.c ---- */

/* Write one frame to cfd if it is still c's connection (-ECONNRESET if
 * not), with a deadline; takes c->wlock. */
int hub_send_frame(struct hub_chan *c, int cfd, uint16_t type, uint16_t flags, uint32_t tag, const void *p1, size_t n1,
                   const void *p2, size_t n2);
/* A frame of at most RP_NOWAIT_MAX payload bytes that never waits
 * (-EAGAIN: not now). Hub thread. */
#define RP_NOWAIT_MAX 64
int hub_send_frame_nowait(struct hub_chan *c, int cfd, uint16_t type, uint32_t tag, const void *p, size_t n);
/* Wake the hub thread (a channel was marked dead, or renamed). */
void hub_wake(struct hub *h);
void hub_chan_free(struct hub_chan *c);

/* ---- hub_chan.c ---- */

/* The live (not dead) channel of the session, or NULL. Under h->lock. */
struct hub_chan *hub_chan_find_locked(struct hub *h, const char *user, const char *session);

/* ---- hub_exec.c ---- */

/* A handle with one reference, on no channel yet. NULL: no memory. */
struct hub_exec *hub_exec_new(hub_output_fn on_output, void *userdata);
/* Put x on c's current connection under tag. Under h->lock. */
void hub_exec_link_locked(struct hub_chan *c, struct hub_exec *x, uint32_t tag);
/* Drop a reference taken under h->lock (x->refs++). */
void hub_exec_unref(struct hub_exec *x);
/* The end of an execution (the first one counts); wakes its waiter. */
void hub_exec_end(struct hub_exec *x, bool lost, int fail, const char *msg, const struct runner_exit *ex);
/* A frame about one execution, from the hub thread with no lock held.
 * False: a protocol error. */
bool hub_exec_on_frame(struct hub *h, struct hub_chan *c, const struct rp_hdr *hdr, const unsigned char *p);

/* ---- hub_jobs.c ---- */

/* A new connection's runner listed its jobs: executions detached when the
 * node link under the last one went resume on it (RP_RESUME from where
 * their output stopped), or end as lost if it no longer holds them. Hub
 * thread, no lock held. */
void hub_jobs_resume_detached(struct hub *h, struct hub_chan *c);
/* End the channel's detached executions as lost (all, or those past their
 * resume deadline). Under h->lock. */
void hub_end_detached_locked(struct hub_chan *c, bool all, int64_t now);

/* Whether the exec engine will adopt (session, tag). Under h->lock. */
bool hub_expected_locked(struct hub *h, const char *user, const char *session, uint32_t tag);
/* RP_JOB and RP_JOBS_END, on the hub thread. False: a protocol error. */
bool hub_job_listed(struct hub *h, struct hub_chan *c, const struct rp_hdr *hdr, const unsigned char *p);
bool hub_jobs_listed(struct hub *h, struct hub_chan *c);

/* ---- for hub_ops.c ---- */


struct hub_ops *hub_ops(struct hub *h);
/* The id of the session's live connection (-ENOTCONN without one). */
int hub_conn(struct hub *h, const char *user, const char *session, uint64_t *ret);
/* One frame on that very connection; -ENOTCONN if it is no longer the live one. */
int hub_send(struct hub *h, const char *user, const char *session, uint64_t conn, uint16_t type, uint16_t flags,
             uint32_t tag, const void *p1, size_t n1, const void *p2, size_t n2);

/* hub_ops.c, called by hub.c */
struct hub_ops *hub_ops_new(struct hub *h);
void hub_ops_free(struct hub_ops *o); /* NULL is fine */
/* A frame of types RP_FILE_READ..RP_SVC_STATE or RP_WATCH_EVENT from the runner, on the hub
 * thread with no lock held. False: a protocol error. */
bool hub_ops_frame(struct hub_ops *o, const char *user, const char *session, uint64_t conn, const struct rp_hdr *hdr,
                   const unsigned char *p);
/* The connection went: its requests end with -ECONNRESET, its services'
 * reports are forgotten (the runner repeats them on its next hello). */
void hub_ops_closed(struct hub_ops *o, const char *user, const char *session, uint64_t conn);

#endif
