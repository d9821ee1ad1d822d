/* gateway.c — per-session network channels of sealed containers (see
 * gateway.h for the contract, runner_proto.h for the fwd.sock frames).
 *
 * One libevent loop on the thread "sbx-gateway" owns every socket, buffer
 * and session record (struct gw_sess, struct gw_fwd): nothing here is
 * touched from another thread. Public calls queue a struct gw_cmd under
 * gw->lock, activate gw->cmd_ev (libevent's pthreads locking makes that
 * safe from any thread) and wait on the command's condition variable with
 * a deadline. A command is reference-counted (caller + loop), so a caller
 * that gives up never leaves the loop with freed memory.
 *
 * Locks: gw->lock guards the command queue, every command's state and the
 * private check; the loop holds it only to move commands. Stats are atomics.
 *
 * This file is the loop, the sessions and the commands; the sockets
 * themselves (listeners, forwards and their splicing, fwd.sock and
 * egress.sock) are in gateway_fwd.c. */
#include "sandboxd/gateway.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/egress.h"
#include "sandboxd/log.h"
#include "sandboxd/node.h"
#include "sandboxd/runner_proto.h"
#include "gateway_internal.h"

#define CMD_DEADLINE_MS 5000
#define GW_ATTACH_DIAL (-1) /* CMD_ATTACH of gateway_dial: a host end of a socketpair for a container port */

enum cmd_kind { CMD_OPEN, CMD_ENFORCE, CMD_DROP, CMD_ATTACH };

struct gw_cmd {
        struct gw_cmd *next;
        int refs; /* gw->lock */
        bool done;
        pthread_cond_t cond;
        enum cmd_kind kind;
        char user[65], session[65];
        char dir[SBX_PATH_MAX];
        bool has_dir, egress;
        int *ports;
        size_t n_ports;
        int result;
        bool sealed;                /* CMD_ENFORCE: the session was private and is now closed */
        int attach_kind, attach_fd; /* CMD_ATTACH: a connection from the node agent */
        int attach_port;            /* ... NODE_STREAM_PUBLISHED: the host port it came to */
        struct sbx_error err;
};

/* ---- sessions (loop thread) ---- */

static struct gw_sess *sess_find(struct gateway *gw, const char *user, const char *session)
{
        for (struct gw_sess *s = gw->sessions; s; s = s->next)
                if (strcmp(s->user, user) == 0 && strcmp(s->session, session) == 0)
                        return s;
        return NULL;
}

/* Close every channel of the session (its record stays). */
static void sess_close_all(struct gw_sess *s)
{
        for (size_t i = 0; i < s->n_hosts; i++)
                gateway_listen_close(&s->hosts[i]);
        free(s->hosts);
        s->hosts = NULL;
        s->n_hosts = 0;
        gateway_unix_close(s, &s->egress, RP_EGRESS_SOCKET_NAME);
        gateway_unix_close(s, &s->fwd, RP_FWD_SOCKET_NAME);
        while (s->fwds)
                gateway_fwd_free(s->fwds);
        while (s->pending)
                gateway_pending_free(s->pending);
        if (s->ctrl) {
                bufferevent_free(s->ctrl);
                s->ctrl = NULL;
        }
}

static struct gw_user *user_ref(struct gateway *gw, const char *user)
{
        struct gw_user *u;

        for (u = gw->users; u; u = u->next)
                if (strcmp(u->user, user) == 0)
                        break;
        if (!u) {
                u = calloc(1, sizeof(*u));
                if (!u)
                        return NULL;
                sbx_strlcpy(u->user, user, sizeof(u->user));
                u->next = gw->users;
                gw->users = u;
        }
        u->sessions++;
        return u;
}

static void user_unref(struct gateway *gw, struct gw_user *u)
{
        if (--u->sessions > 0)
                return;
        for (struct gw_user **pp = &gw->users; *pp; pp = &(*pp)->next)
                if (*pp == u) {
                        *pp = u->next;
                        break;
                }
        free(u);
}

static void sess_free(struct gateway *gw, struct gw_sess *s)
{
        sess_close_all(s);
        user_unref(gw, s->u);
        if (s->dirfd >= 0)
                close(s->dirfd);
        for (struct gw_sess **pp = &gw->sessions; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                        *pp = s->next;
                        break;
                }
        atomic_fetch_sub(&gw->st_sessions, 1);
        free(s);
}

static bool ask_private(struct gateway *gw, const char *user, const char *session)
{
        gateway_private_fn fn;
        void *ud;

        pthread_mutex_lock(&gw->lock);
        fn = gw->is_private;
        ud = gw->private_ud;
        pthread_mutex_unlock(&gw->lock);
        return fn ? fn(user, session, ud) : false;
}

static int do_open(struct gateway *gw, struct gw_cmd *c)
{
        struct gw_sess *s = sess_find(gw, c->user, c->session);
        int r;

        if (ask_private(gw, c->user, c->session)) {
                if (s) {
                        sess_close_all(s);
                        s->sealed = true;
                }
                return 0; /* a private session is served nothing */
        }
        if (s && s->sealed)
                return 0;
        if (!s) {
                s = calloc(1, sizeof(*s));
                if (!s || !(s->u = user_ref(gw, c->user))) {
                        free(s);
                        return sbx_error_set(&c->err, -ENOMEM, 0, "out of memory");
                }
                s->gw = gw;
                s->dirfd = -1;
                sbx_strlcpy(s->user, c->user, sizeof(s->user));
                sbx_strlcpy(s->session, c->session, sizeof(s->session));
                s->next = gw->sessions;
                gw->sessions = s;
                atomic_fetch_add(&gw->st_sessions, 1);
        }
        s->egress_on = c->egress && gw->eg;
        s->runner = c->has_dir;
        /* the runner directory: a new container may come with a re-made one; over a node
         * link the node listens there (gateway_open asks it) */
        if (c->has_dir && !gw->node_fn) {
                int dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                struct stat a, b;
                if (dfd < 0)
                        return sbx_error_set(&c->err, -errno, 0, "cannot open %s: %m", c->dir);
                if (s->dirfd >= 0 && fstat(s->dirfd, &a) == 0 && fstat(dfd, &b) == 0 && a.st_ino == b.st_ino &&
                    a.st_dev == b.st_dev) {
                        close(dfd);
                } else {
                        gateway_unix_close(s, &s->egress, RP_EGRESS_SOCKET_NAME);
                        gateway_unix_close(s, &s->fwd, RP_FWD_SOCKET_NAME);
                        if (s->dirfd >= 0)
                                close(s->dirfd);
                        s->dirfd = dfd;
                }
                r = gateway_unix_listen(s, &s->fwd, RP_FWD_SOCKET_NAME, gateway_fwd_sock_accept, &c->err);
                if (r < 0)
                        return r;
                if (c->egress && gw->eg)
                        r = gateway_unix_listen(s, &s->egress, RP_EGRESS_SOCKET_NAME, gateway_egress_sock_accept,
                                                &c->err);
                else
                        gateway_unix_close(s, &s->egress, RP_EGRESS_SOCKET_NAME);
                if (r < 0)
                        return r;
        }
        /* the host ports: keep what is unchanged, move the rest */
        bool same = s->n_hosts == c->n_ports;
        for (size_t i = 0; same && i < c->n_ports; i++)
                same = s->hosts[i].port == c->ports[i] && (s->hosts[i].l || s->hosts[i].remote);
        if (same) {
                for (size_t i = 0; i < s->n_hosts; i++)
                        if (s->hosts[i].l)
                                evconnlistener_enable(s->hosts[i].l); /* after an accept error */
                return 0;
        }
        for (size_t i = 0; i < s->n_hosts; i++)
                gateway_listen_close(&s->hosts[i]);
        free(s->hosts);
        s->n_hosts = 0;
        s->hosts = c->n_ports ? calloc(c->n_ports, sizeof(*s->hosts)) : NULL;
        if (c->n_ports && !s->hosts)
                return sbx_error_set(&c->err, -ENOMEM, 0, "out of memory");
        s->n_hosts = c->n_ports;
        for (size_t i = 0; i < c->n_ports; i++) {
                r = gateway_host_listen(s, &s->hosts[i], (int)i, c->ports[i], &c->err);
                if (r < 0) {
                        for (size_t j = 0; j < i; j++)
                                gateway_listen_close(&s->hosts[j]);
                        free(s->hosts);
                        s->hosts = NULL;
                        s->n_hosts = 0;
                        return r;
                }
        }
        return 0;
}

static void run_cmd(struct gateway *gw, struct gw_cmd *c)
{
        struct gw_sess *s;

        switch (c->kind) {
        case CMD_OPEN:
                c->result = do_open(gw, c);
                break;
        case CMD_ENFORCE:
                s = sess_find(gw, c->user, c->session);
                if (ask_private(gw, c->user, c->session)) {
                        c->sealed = true;
                        if (s) {
                                sess_close_all(s);
                                s->sealed = true;
                        }
                }
                break;
        case CMD_DROP:
                s = sess_find(gw, c->user, c->session);
                if (s)
                        sess_free(gw, s);
                break;
        case CMD_ATTACH:
                s = sess_find(gw, c->user, c->session);
                if (!s || s->sealed || (c->attach_kind == NODE_STREAM_EGRESS && !s->egress_on)) {
                        evutil_closesocket(c->attach_fd);
                } else if (c->attach_kind == GW_ATTACH_DIAL) {
                        gateway_fwd_take(s, c->attach_fd, c->attach_port);
                } else if (c->attach_kind == NODE_STREAM_PUBLISHED) {
                        struct gw_listen *gl = NULL;
                        for (size_t i = 0; i < s->n_hosts && !gl; i++)
                                if (s->hosts[i].remote && s->hosts[i].port == c->attach_port)
                                        gl = &s->hosts[i];
                        if (gl)
                                gateway_host_take(gl, c->attach_fd); /* as if our listener accepted it */
                        else
                                evutil_closesocket(c->attach_fd); /* a port moved or closed meanwhile */
                } else if (c->attach_kind == NODE_STREAM_EGRESS)
                        egress_accept(gw->eg, s->user, s->session, c->attach_fd); /* takes the fd */
                else
                        gateway_fwd_sock_take(s, c->attach_fd); /* the node checked the runner */
                break;
        }
}

/* Drop one reference to c, with gw->lock held; unlocks. The last frees it. */
static void cmd_unref_unlock(struct gateway *gw, struct gw_cmd *c)
{
        bool last = --c->refs == 0;

        pthread_mutex_unlock(&gw->lock);
        if (last) {
                pthread_cond_destroy(&c->cond);
                free(c->ports);
                free(c);
        }
}

static void cmd_cb(evutil_socket_t fd, short what, void *ud)
{
        struct gateway *gw = ud;

        for (;;) {
                struct gw_cmd *c;

                pthread_mutex_lock(&gw->lock);
                c = gw->cmds;
                if (c) {
                        gw->cmds = c->next;
                        if (!gw->cmds)
                                gw->cmds_tail = &gw->cmds;
                }
                pthread_mutex_unlock(&gw->lock);
                if (!c)
                        break;
                run_cmd(gw, c);
                pthread_mutex_lock(&gw->lock);
                c->done = true;
                pthread_cond_broadcast(&c->cond);
                cmd_unref_unlock(gw, c);
        }
        pthread_mutex_lock(&gw->lock);
        if (gw->stop)
                event_base_loopbreak(gw->base);
        pthread_mutex_unlock(&gw->lock);
}

static void *gw_main(void *ud)
{
        struct gateway *gw = ud;

        sigset_t pipe;

        pthread_setname_np(pthread_self(), "sbx-gateway");
        /* libevent writes with writev: a peer gone must be EPIPE here, never a signal */
        sigemptyset(&pipe);
        sigaddset(&pipe, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &pipe, NULL);
        event_base_loop(gw->base, EVLOOP_NO_EXIT_ON_EMPTY);
        while (gw->sessions)
                sess_free(gw, gw->sessions);
        return NULL;
}

static struct gw_cmd *cmd_new(enum cmd_kind kind, const char *user, const char *session)
{
        struct gw_cmd *c = calloc(1, sizeof(*c));

        if (!c)
                return NULL;
        c->kind = kind;
        c->refs = 2;
        pthread_cond_init(&c->cond, NULL);
        sbx_strlcpy(c->user, user ? user : "", sizeof(c->user));
        sbx_strlcpy(c->session, session ? session : "", sizeof(c->session));
        return c;
}

/* Queue c, wait for the loop to run it (bounded), drop the caller's
 * reference. Returns the command's result, or -ETIMEDOUT. */
static int cmd_run(struct gateway *gw, struct gw_cmd *c, struct sbx_error *err, bool *ret_sealed)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, CMD_DEADLINE_MS);
        int r;

        pthread_mutex_lock(&gw->lock);
        *gw->cmds_tail = c;
        gw->cmds_tail = &c->next;
        pthread_mutex_unlock(&gw->lock);
        event_active(gw->cmd_ev, EV_READ, 0);
        pthread_mutex_lock(&gw->lock);
        while (!c->done)
                if (pthread_cond_timedwait(&c->cond, &gw->lock, &until) == ETIMEDOUT)
                        break;
        r = c->done ? c->result : -ETIMEDOUT;
        if (c->done && r < 0 && err)
                *err = c->err;
        if (!c->done && err)
                sbx_error_set(err, -ETIMEDOUT, 0, "the gateway did not answer in time");
        if (ret_sealed)
                *ret_sealed = c->done && c->sealed;
        cmd_unref_unlock(gw, c);
        return r;
}

/* ---- public ---- */

static int threads_ok = -1;
static void init_threads(void)
{
        threads_ok = evthread_use_pthreads();
}

/* The loop's objects and the struct (the thread is not running). */
static void gw_release(struct gateway *gw)
{
        if (gw->resume_ev)
                event_free(gw->resume_ev);
        if (gw->cmd_ev)
                event_free(gw->cmd_ev);
        if (gw->base)
                event_base_free(gw->base);
        pthread_mutex_destroy(&gw->lock);
        free(gw);
}

int gateway_new(const struct sbx_config *cfg, struct egress *eg, struct gateway **ret, struct sbx_error *err)
{
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        struct gateway *gw;
        int r;

        pthread_once(&once, init_threads);
        if (threads_ok < 0)
                return sbx_error_set(err, -ENOSYS, 0, "libevent has no pthreads support");
        /* every forward holds two descriptors: daemon_open has raised RLIMIT_NOFILE to the hard limit */
        gw = calloc(1, sizeof(*gw));
        if (!gw)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        gw->cfg = cfg;
        gw->eg = eg;
        gw->cmds_tail = &gw->cmds;
        pthread_mutex_init(&gw->lock, NULL);
        gw->base = event_base_new();
        if (gw->base) {
                gw->cmd_ev = event_new(gw->base, -1, 0, cmd_cb, gw);
                gw->resume_ev = evtimer_new(gw->base, gateway_resume_listeners, gw);
        }
        if (!gw->base || !gw->cmd_ev || !gw->resume_ev) {
                gw_release(gw);
                return sbx_error_set(err, -ENOMEM, 0, "cannot set up the gateway's event loop");
        }
        r = -pthread_create(&gw->thread, NULL, gw_main, gw);
        if (r < 0)
                gw_release(gw);
        else
                *ret = gw;
        return r < 0 ? sbx_error_set(err, r, 0, "cannot start the gateway thread: %s", strerror(-r)) : 0;
}

void gateway_free(struct gateway *gw)
{
        if (!gw)
                return;
        pthread_mutex_lock(&gw->lock);
        gw->stop = true;
        pthread_mutex_unlock(&gw->lock);
        event_active(gw->cmd_ev, EV_READ, 0);
        pthread_join(gw->thread, NULL);
        /* commands queued after the stop: nobody runs them; their callers time out */
        gw_release(gw);
}

void gateway_set_private_check(struct gateway *gw, gateway_private_fn fn, void *userdata)
{
        pthread_mutex_lock(&gw->lock);
        gw->is_private = fn;
        gw->private_ud = userdata;
        pthread_mutex_unlock(&gw->lock);
}

void gateway_set_wake(struct gateway *gw, gateway_wake_fn fn, void *userdata)
{
        pthread_mutex_lock(&gw->lock);
        gw->wake = fn;
        gw->wake_ud = userdata;
        pthread_mutex_unlock(&gw->lock);
}

bool gateway_is_private(struct gateway *gw, const char *user, const char *session)
{
        return !gw || ask_private(gw, user, session);
}

int gateway_open(struct gateway *gw, const char *user, const char *session, const char *dir, const int *ports, size_t n,
                 bool egress, struct sbx_error *err)
{
        struct gw_cmd *c;

        if (!gw)
                return 0;
        c = cmd_new(CMD_OPEN, user, session);
        if (!c || (n && !(c->ports = malloc(n * sizeof(int))))) {
                if (c)
                        pthread_cond_destroy(&c->cond);
                free(c);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        if (dir) {
                c->has_dir = true;
                sbx_strlcpy(c->dir, dir, sizeof(c->dir));
        }
        if (n)
                memcpy(c->ports, ports, n * sizeof(int));
        c->n_ports = n;
        c->egress = egress;
        int r = cmd_run(gw, c, err, NULL);
        if (r == 0 && gw->node_fn && dir) {
                /* the node serves the sockets; a private session none (asked again here) */
                unsigned flags = 0;
                bool priv = ask_private(gw, user, session);
                if (!priv)
                        flags = NODE_GW_FWD | (egress && gw->eg ? NODE_GW_EGRESS : 0);
                r = gw->node_fn(user, session, flags, gw->node_ud, err);
                /* and the host ports: exactly this block, none for a private session */
                if (r == 0 && gw->publish_fn)
                        r = gw->publish_fn(user, session, ports, priv ? 0 : n, gw->publish_ud, err);
        }
        return r;
}

void gateway_set_node_publish(struct gateway *gw, gateway_publish_fn fn, void *userdata)
{
        gw->publish_fn = fn;
        gw->publish_ud = userdata;
}

void gateway_attach_published(struct gateway *gw, const char *user, const char *session, int port, int fd)
{
        struct gw_cmd *c = gw ? cmd_new(CMD_ATTACH, user, session) : NULL;

        if (!c) {
                close(fd);
                return;
        }
        c->refs = 1; /* the loop's alone: nobody waits */
        c->attach_kind = NODE_STREAM_PUBLISHED;
        c->attach_fd = fd;
        c->attach_port = port;
        pthread_mutex_lock(&gw->lock);
        *gw->cmds_tail = c;
        gw->cmds_tail = &c->next;
        pthread_mutex_unlock(&gw->lock);
        event_active(gw->cmd_ev, EV_READ, 0);
}

int gateway_dial(struct gateway *gw, const char *user, const char *session, int port, int *ret_fd)
{
        struct gw_cmd *c;
        int sv[2];

        if (!gw || port < 1 || port > 65535)
                return -EINVAL;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        c = cmd_new(CMD_ATTACH, user, session);
        if (!c) {
                close(sv[0]);
                close(sv[1]);
                return -ENOMEM;
        }
        c->refs = 1; /* the loop's alone: nobody waits */
        c->attach_kind = GW_ATTACH_DIAL;
        c->attach_fd = sv[1];
        c->attach_port = port;
        pthread_mutex_lock(&gw->lock);
        *gw->cmds_tail = c;
        gw->cmds_tail = &c->next;
        pthread_mutex_unlock(&gw->lock);
        event_active(gw->cmd_ev, EV_READ, 0);
        *ret_fd = sv[0];
        return 0;
}

void gateway_set_node(struct gateway *gw, gateway_node_fn fn, void *userdata)
{
        gw->node_fn = fn;
        gw->node_ud = userdata;
}

void gateway_attach(struct gateway *gw, const char *user, const char *session, int kind, int fd)
{
        struct gw_cmd *c = gw ? cmd_new(CMD_ATTACH, user, session) : NULL;

        if (!c) {
                close(fd);
                return;
        }
        c->refs = 1; /* the loop's alone: nobody waits */
        c->attach_kind = kind;
        c->attach_fd = fd;
        pthread_mutex_lock(&gw->lock);
        *gw->cmds_tail = c;
        gw->cmds_tail = &c->next;
        pthread_mutex_unlock(&gw->lock);
        event_active(gw->cmd_ev, EV_READ, 0);
}

void gateway_enforce(struct gateway *gw, const char *user, const char *session)
{
        struct gw_cmd *c;
        bool sealed = false;

        if (!gw || !(c = cmd_new(CMD_ENFORCE, user, session)))
                return;
        if (cmd_run(gw, c, NULL, &sealed) < 0)
                log_ctx(LOG_LEVEL_WARN, user, session, NULL, "gateway: the ratchet could not be applied in time");
        if (sealed && gw->node_fn) /* the node stops serving both sockets and removes them */
                (void)gw->node_fn(user, session, 0, gw->node_ud, NULL);
        if (sealed && gw->publish_fn) /* and closes the host ports */
                (void)gw->publish_fn(user, session, NULL, 0, gw->publish_ud, NULL);
        /* outside the loop: this waits for the egress thread to close the tunnels */
        if (sealed && gw->eg)
                egress_close_session(gw->eg, user, session);
}

void gateway_drop(struct gateway *gw, const char *user, const char *session)
{
        struct gw_cmd *c;

        if (!gw || !(c = cmd_new(CMD_DROP, user, session)))
                return;
        (void)cmd_run(gw, c, NULL, NULL);
        if (gw->node_fn)
                (void)gw->node_fn(user, session, 0, gw->node_ud, NULL);
        if (gw->publish_fn)
                (void)gw->publish_fn(user, session, NULL, 0, gw->publish_ud, NULL);
        if (gw->eg)
                egress_close_session(gw->eg, user, session);
}

void gateway_get_stats(struct gateway *gw, struct gateway_stats *ret)
{
        *ret = (struct gateway_stats){0};
        if (!gw)
                return;
        ret->sessions = atomic_load(&gw->st_sessions);
        ret->listeners = atomic_load(&gw->st_listeners);
        ret->forwards = atomic_load(&gw->st_forwards);
}
