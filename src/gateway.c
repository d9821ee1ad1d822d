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
 * Splicing follows libevent's sample/le-proxy.c: bytes read from one side
 * are moved (not copied) to the other side's output; when that holds
 * GATEWAY_BUF_HIGH bytes, reading stops until it drains below half. An EOF
 * is passed on as shutdown(SHUT_WR) once its bytes are written (half close),
 * and the pair is freed when both ways are done. */
#include "sandboxd/gateway.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandboxd/egress.h"
#include "sandboxd/log.h"
#include "sandboxd/runner_proto.h"

#define CMD_DEADLINE_MS 5000
#define PAIR_TIMEOUT_S 30      /* a host connection waits this long for the runner's data connection */
#define HELLO_TIMEOUT_S 30     /* a new fwd.sock connection must say what it is by then (as long as a
                                * forward waits for it: a starved loop must not drop a good one) */
#define UNIX_BACKLOG 4096      /* a burst of forwards opens as many data connections at once */
#define CTRL_OUT_MAX (256 * 1024) /* RP_FWD_OPEN frames queued for a runner */
#define HOST_BACKLOG 4096 /* a burst of clients must not overflow the accept queue (SYN-ACK retries take seconds) */

enum cmd_kind { CMD_OPEN, CMD_ENFORCE, CMD_DROP };

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
        bool sealed; /* CMD_ENFORCE: the session was private and is now closed */
        struct sbx_error err;
};

struct gw_sess;

struct gw_listen {
        struct gw_sess *s;
        int index; /* port index, or -1 for the unix sockets */
        int port;
        struct evconnlistener *l;
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

/* Forwards of one user across its sessions (forward_max_per_user). */
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
        bool sealed; /* the ratchet: never served again until dropped */
        int dirfd;   /* the runner directory, -1 without a runner */
        struct gw_listen egress, fwd;
        struct gw_listen *hosts;
        size_t n_hosts;
        struct bufferevent *ctrl; /* the runner's control connection */
        struct gw_fwd *fwds;
        size_t n_fwds;
        struct gw_pending *pending;
        size_t n_pending;
        uint32_t next_id;
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
        struct gw_sess *sessions;  /* loop thread only */
        struct gw_user *users;     /* loop thread only */
        size_t n_fwds;             /* loop thread only */
        atomic_size_t st_sessions, st_listeners, st_forwards;
};

/* ---- forwards ---- */

static void fwd_free(struct gw_fwd *f)
{
        struct gw_sess *s = f->s;

        for (int i = 0; i < 2; i++)
                if (f->b[i])
                        bufferevent_free(f->b[i]);
        if (f->timer)
                event_free(f->timer);
        if (f->prev)
                f->prev->next = f->next;
        else
                s->fwds = f->next;
        if (f->next)
                f->next->prev = f->prev;
        s->n_fwds--;
        s->u->fwds--;
        s->gw->n_fwds--;
        atomic_fetch_sub(&s->gw->st_forwards, 1);
        free(f);
}

/* Both ways done (EOF passed on and written): the pair goes. */
static void fwd_maybe_done(struct gw_fwd *f)
{
        for (int i = 0; i < 2; i++)
                if (!f->eof[i] || !f->shut[1 - i])
                        return;
        fwd_free(f);
}

/* Side i reached EOF and its bytes are all written to the other side:
 * pass the EOF on. */
static void fwd_pass_eof(struct gw_fwd *f, int i)
{
        int o = 1 - i;

        if (!f->eof[i] || f->shut[o] || evbuffer_get_length(bufferevent_get_output(f->b[o])) > 0)
                return;
        (void)shutdown(bufferevent_getfd(f->b[o]), SHUT_WR);
        f->shut[o] = true;
}

static void fwd_read(struct bufferevent *bev, void *ud)
{
        struct gw_side *sd = ud;
        struct gw_fwd *f = sd->f;
        struct bufferevent *dst = f->b[1 - sd->i];

        evbuffer_add_buffer(bufferevent_get_output(dst), bufferevent_get_input(bev));
        if (evbuffer_get_length(bufferevent_get_output(dst)) >= GATEWAY_BUF_HIGH)
                bufferevent_disable(bev, EV_READ); /* resumed by fwd_write once dst drains */
}

/* dst's output drained below its low watermark. */
static void fwd_write(struct bufferevent *dst, void *ud)
{
        struct gw_side *sd = ud;
        struct gw_fwd *f = sd->f;
        int src = 1 - sd->i;

        if (!f->eof[src])
                bufferevent_enable(f->b[src], EV_READ);
        else {
                fwd_pass_eof(f, src);
                fwd_maybe_done(f);
        }
}

static void fwd_event(struct bufferevent *bev, short what, void *ud)
{
        struct gw_side *sd = ud;
        struct gw_fwd *f = sd->f;

        if (what & BEV_EVENT_EOF) {
                f->eof[sd->i] = true;
                fwd_read(bev, ud); /* anything left */
                bufferevent_disable(bev, EV_READ);
                fwd_pass_eof(f, sd->i);
                fwd_maybe_done(f);
                return;
        }
        fwd_free(f); /* an error on either side ends both */
}

static void fwd_timeout(evutil_socket_t fd, short what, void *ud)
{
        struct gw_fwd *f = ud;
        if (!f->paired) {
                log_ctx(LOG_LEVEL_DEBUG, f->s->user, f->s->session, NULL,
                        "gateway: the runner did not answer forward %u in time", f->id);
                fwd_free(f);
        }
}

static void fwd_start(struct gw_fwd *f)
{
        f->paired = true;
        event_del(f->timer);
        for (int i = 0; i < 2; i++) {
                bufferevent_setcb(f->b[i], fwd_read, fwd_write, fwd_event, &f->side[i]);
                bufferevent_setwatermark(f->b[i], EV_WRITE, GATEWAY_BUF_HIGH / 2, 0);
                bufferevent_setwatermark(f->b[i], EV_READ, 0, GATEWAY_BUF_HIGH);
                bufferevent_enable(f->b[i], EV_READ | EV_WRITE);
        }
        /* bytes the runner sent right behind its RP_FWD_DATA frame */
        if (evbuffer_get_length(bufferevent_get_input(f->b[1])) > 0)
                fwd_read(f->b[1], &f->side[1]);
}

/* A host client on port index `index`. */
static void host_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *ud)
{
        struct gw_listen *gl = ud;
        struct gw_sess *s = gl->s;
        struct gateway *gw = s->gw;
        struct rp_fwd_open op = {.port = (uint32_t)(gw->cfg->container_port_base + gl->index)};
        struct rp_hdr hdr = {.len = sizeof(op), .type = RP_FWD_OPEN};
        struct gw_fwd *f;

        if (!s->ctrl || s->n_fwds >= (size_t)gw->cfg->forward_max_per_session ||
            s->u->fwds >= (size_t)gw->cfg->forward_max_per_user ||
            gw->n_fwds >= (size_t)gw->cfg->forward_max_total ||
            evbuffer_get_length(bufferevent_get_output(s->ctrl)) > CTRL_OUT_MAX) {
                evutil_closesocket(fd); /* no runner, or over a cap: refused at once */
                return;
        }
        f = calloc(1, sizeof(*f));
        if (!f) {
                evutil_closesocket(fd);
                return;
        }
        f->s = s;
        f->id = ++s->next_id ? s->next_id : ++s->next_id;
        if (getrandom(&f->token, sizeof(f->token), 0) != sizeof(f->token)) {
                free(f);
                evutil_closesocket(fd);
                return;
        }
        f->side[0] = (struct gw_side){f, 0};
        f->side[1] = (struct gw_side){f, 1};
        f->b[0] = bufferevent_socket_new(gw->base, fd, BEV_OPT_CLOSE_ON_FREE);
        f->timer = evtimer_new(gw->base, fwd_timeout, f);
        if (!f->b[0] || !f->timer) {
                if (f->b[0])
                        bufferevent_free(f->b[0]);
                else
                        evutil_closesocket(fd);
                if (f->timer)
                        event_free(f->timer);
                free(f);
                return;
        }
        f->next = s->fwds;
        if (s->fwds)
                s->fwds->prev = f;
        s->fwds = f;
        s->n_fwds++;
        s->u->fwds++;
        gw->n_fwds++;
        atomic_fetch_add(&gw->st_forwards, 1);
        struct timeval tv = {PAIR_TIMEOUT_S, 0};
        event_add(f->timer, &tv);
        hdr.tag = f->id;
        op.token = f->token;
        bufferevent_write(s->ctrl, &hdr, sizeof(hdr));
        bufferevent_write(s->ctrl, &op, sizeof(op));
}

/* ---- fwd.sock: control and data connections from the runner ---- */

static void pending_free(struct gw_pending *p)
{
        struct gw_sess *s = p->s;

        if (p->b)
                bufferevent_free(p->b);
        if (p->prev)
                p->prev->next = p->next;
        else
                s->pending = p->next;
        if (p->next)
                p->next->prev = p->prev;
        s->n_pending--;
        free(p);
}

static void ctrl_read(struct bufferevent *bev, void *ud)
{
        /* the runner has nothing more to say on the control connection */
        evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
}

static void ctrl_event(struct bufferevent *bev, short what, void *ud)
{
        struct gw_sess *s = ud;

        if (s->ctrl == bev) {
                bufferevent_free(bev);
                s->ctrl = NULL;
        }
}

static void pending_event(struct bufferevent *bev, short what, void *ud)
{
        pending_free(ud); /* EOF, error or the hello timeout before a complete first frame */
}

static void pending_read(struct bufferevent *bev, void *ud)
{
        struct gw_pending *p = ud;
        struct gw_sess *s = p->s;
        struct evbuffer *in = bufferevent_get_input(bev);
        struct rp_hdr hdr;
        uint64_t token;

        if (evbuffer_get_length(in) < RP_HDR_LEN)
                return;
        evbuffer_copyout(in, &hdr, sizeof(hdr));
        if (hdr.type == RP_FWD_HELLO && hdr.len == 0) {
                evbuffer_drain(in, RP_HDR_LEN);
                if (s->ctrl)
                        bufferevent_free(s->ctrl); /* a new runner (or a restarted one) takes over */
                s->ctrl = bev;
                p->b = NULL;
                pending_free(p);
                bufferevent_setcb(bev, ctrl_read, NULL, ctrl_event, s);
                bufferevent_set_timeouts(bev, NULL, NULL);
                bufferevent_setwatermark(bev, EV_READ, 0, 4096);
                bufferevent_enable(bev, EV_READ | EV_WRITE);
                return;
        }
        if (hdr.type != RP_FWD_DATA || hdr.len != sizeof(token)) {
                pending_free(p);
                return;
        }
        if (evbuffer_get_length(in) < RP_HDR_LEN + sizeof(token))
                return;
        evbuffer_drain(in, RP_HDR_LEN);
        evbuffer_remove(in, &token, sizeof(token));
        for (struct gw_fwd *f = s->fwds; f; f = f->next) {
                if (f->paired || f->id != hdr.tag)
                        continue;
                if (f->token != token)
                        break;
                f->b[1] = bev;
                p->b = NULL;
                pending_free(p);
                bufferevent_set_timeouts(bev, NULL, NULL);
                fwd_start(f);
                return;
        }
        pending_free(p); /* names no forward of this session */
}

static void fwd_sock_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *ud)
{
        struct gw_listen *gl = ud;
        struct gw_sess *s = gl->s;
        struct gw_pending *p;
        struct timeval tv = {HELLO_TIMEOUT_S, 0};

        /* connections not yet known: as many as forwards may wait for one */
        if (s->n_pending >= (size_t)s->gw->cfg->forward_max_per_session || !(p = calloc(1, sizeof(*p)))) {
                evutil_closesocket(fd);
                return;
        }
        p->s = s;
        p->b = bufferevent_socket_new(s->gw->base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (!p->b) {
                evutil_closesocket(fd);
                free(p);
                return;
        }
        p->next = s->pending;
        if (s->pending)
                s->pending->prev = p;
        s->pending = p;
        s->n_pending++;
        bufferevent_setcb(p->b, pending_read, NULL, pending_event, p);
        bufferevent_setwatermark(p->b, EV_READ, RP_HDR_LEN, RP_HDR_LEN + 64);
        bufferevent_set_timeouts(p->b, &tv, NULL);
        bufferevent_enable(p->b, EV_READ);
}

static void egress_sock_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *ud)
{
        struct gw_listen *gl = ud;
        struct gw_sess *s = gl->s;

        if (s->gw->eg && !s->sealed)
                egress_accept(s->gw->eg, s->user, s->session, fd); /* takes the fd */
        else
                evutil_closesocket(fd);
}

/* EMFILE and friends: stop accepting for a moment rather than spin. */
static void listen_error(struct evconnlistener *l, void *ud)
{
        struct gw_listen *gl = ud;
        int e = EVUTIL_SOCKET_ERROR();

        log_ctx(LOG_LEVEL_WARN, gl->s->user, gl->s->session, NULL, "gateway: accept failed: %s", strerror(e));
        evconnlistener_disable(l);
        struct timeval tv = {1, 0};
        event_add(gl->s->gw->resume_ev, &tv); /* then every listener is enabled again */
}

static void resume_listeners(evutil_socket_t fd, short what, void *ud)
{
        struct gateway *gw = ud;

        for (struct gw_sess *s = gw->sessions; s; s = s->next) {
                for (size_t i = 0; i < s->n_hosts; i++)
                        if (s->hosts[i].l)
                                evconnlistener_enable(s->hosts[i].l);
                if (s->fwd.l)
                        evconnlistener_enable(s->fwd.l);
                if (s->egress.l)
                        evconnlistener_enable(s->egress.l);
        }
}

/* ---- listeners ---- */

static void listen_close(struct gw_listen *gl)
{
        if (gl->l) {
                evconnlistener_free(gl->l);
                gl->l = NULL;
                if (gl->index >= 0)
                        atomic_fetch_sub(&gl->s->gw->st_listeners, 1);
        }
}

static int unix_listen(struct gw_sess *s, struct gw_listen *gl, const char *name, evconnlistener_cb cb,
                       struct sbx_error *err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd;

        if (gl->l)
                return 0;
        /* only root writes in the directory: whatever is there is ours from an earlier daemon */
        if (unlinkat(s->dirfd, name, 0) < 0 && errno != ENOENT)
                return sbx_error_set(err, -errno, 0, "cannot remove the stale %s: %m", name);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", s->dirfd, name);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return sbx_error_set(err, -errno, 0, "socket: %m");
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || fchmodat(s->dirfd, name, 0666, 0) < 0 ||
            listen(fd, UNIX_BACKLOG) < 0) {
                int r = -errno;
                close(fd);
                return sbx_error_set(err, r, 0, "cannot listen on %s: %s", name, strerror(-r));
        }
        gl->s = s;
        gl->index = -1;
        /* backlog 0: already listening (-1 would make libevent listen() again with 128) */
        gl->l = evconnlistener_new(s->gw->base, cb, gl, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
        if (!gl->l) {
                close(fd);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        evconnlistener_set_error_cb(gl->l, listen_error);
        return 0;
}

static void unix_close(struct gw_sess *s, struct gw_listen *gl, const char *name)
{
        listen_close(gl);
        if (s->dirfd >= 0)
                (void)unlinkat(s->dirfd, name, 0);
}

static int host_listen(struct gw_sess *s, struct gw_listen *gl, int index, int port, struct sbx_error *err)
{
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE};
        struct addrinfo *ai = NULL;
        char service[8];
        int fd, one = 1, r;

        snprintf(service, sizeof(service), "%d", port);
        r = getaddrinfo(s->gw->cfg->publish_ip, service, &hints, &ai);
        if (r != 0 || !ai)
                return sbx_error_set(err, -EINVAL, 0, "publish_ip %s: %s", s->gw->cfg->publish_ip, gai_strerror(r));
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd >= 0) {
                /* TIME_WAIT of our own earlier forwards must not block a re-listen */
                (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
                if (ai->ai_family == AF_INET6)
                        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        }
        if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, HOST_BACKLOG) < 0) {
                r = -errno;
                if (fd >= 0)
                        close(fd);
                freeaddrinfo(ai);
                return sbx_error_set(err, r, 0, "cannot listen on %s:%d: %s", s->gw->cfg->publish_ip, port,
                                     strerror(-r));
        }
        freeaddrinfo(ai);
        gl->s = s;
        gl->index = index;
        gl->port = port;
        /* backlog 0: already listening (-1 would make libevent listen() again with 128) */
        gl->l = evconnlistener_new(s->gw->base, host_accept, gl, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0,
                                   fd);
        if (!gl->l) {
                close(fd);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        evconnlistener_set_error_cb(gl->l, listen_error);
        atomic_fetch_add(&s->gw->st_listeners, 1);
        return 0;
}

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
                listen_close(&s->hosts[i]);
        free(s->hosts);
        s->hosts = NULL;
        s->n_hosts = 0;
        unix_close(s, &s->egress, RP_EGRESS_SOCKET_NAME);
        unix_close(s, &s->fwd, RP_FWD_SOCKET_NAME);
        while (s->fwds)
                fwd_free(s->fwds);
        while (s->pending)
                pending_free(s->pending);
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
        /* the runner directory: a new container may come with a re-made one */
        if (c->has_dir) {
                int dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                struct stat a, b;
                if (dfd < 0)
                        return sbx_error_set(&c->err, -errno, 0, "cannot open %s: %m", c->dir);
                if (s->dirfd >= 0 && fstat(s->dirfd, &a) == 0 && fstat(dfd, &b) == 0 && a.st_ino == b.st_ino &&
                    a.st_dev == b.st_dev) {
                        close(dfd);
                } else {
                        unix_close(s, &s->egress, RP_EGRESS_SOCKET_NAME);
                        unix_close(s, &s->fwd, RP_FWD_SOCKET_NAME);
                        if (s->dirfd >= 0)
                                close(s->dirfd);
                        s->dirfd = dfd;
                }
                r = unix_listen(s, &s->fwd, RP_FWD_SOCKET_NAME, fwd_sock_accept, &c->err);
                if (r < 0)
                        return r;
                if (c->egress && gw->eg)
                        r = unix_listen(s, &s->egress, RP_EGRESS_SOCKET_NAME, egress_sock_accept, &c->err);
                else
                        unix_close(s, &s->egress, RP_EGRESS_SOCKET_NAME);
                if (r < 0)
                        return r;
        }
        /* the host ports: keep what is unchanged, move the rest */
        bool same = s->n_hosts == c->n_ports;
        for (size_t i = 0; same && i < c->n_ports; i++)
                same = s->hosts[i].port == c->ports[i] && s->hosts[i].l;
        if (same) {
                for (size_t i = 0; i < s->n_hosts; i++)
                        evconnlistener_enable(s->hosts[i].l); /* after an accept error */
                return 0;
        }
        for (size_t i = 0; i < s->n_hosts; i++)
                listen_close(&s->hosts[i]);
        free(s->hosts);
        s->n_hosts = 0;
        s->hosts = c->n_ports ? calloc(c->n_ports, sizeof(*s->hosts)) : NULL;
        if (c->n_ports && !s->hosts)
                return sbx_error_set(&c->err, -ENOMEM, 0, "out of memory");
        s->n_hosts = c->n_ports;
        for (size_t i = 0; i < c->n_ports; i++) {
                r = host_listen(s, &s->hosts[i], (int)i, c->ports[i], &c->err);
                if (r < 0) {
                        for (size_t j = 0; j < i; j++)
                                listen_close(&s->hosts[j]);
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
        }
}

static void cmd_cb(evutil_socket_t fd, short what, void *ud)
{
        struct gateway *gw = ud;

        for (;;) {
                struct gw_cmd *c;
                bool last;

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
                last = --c->refs == 0;
                pthread_mutex_unlock(&gw->lock);
                if (last) {
                        pthread_cond_destroy(&c->cond);
                        free(c->ports);
                        free(c);
                }
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
        bool last;
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
        last = --c->refs == 0;
        pthread_mutex_unlock(&gw->lock);
        if (last) {
                pthread_cond_destroy(&c->cond);
                free(c->ports);
                free(c);
        }
        return r;
}

/* ---- public ---- */

static int threads_ok = -1;
static void init_threads(void) { threads_ok = evthread_use_pthreads(); }

int gateway_new(const struct sbx_config *cfg, struct egress *eg, struct gateway **ret, struct sbx_error *err)
{
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        struct gateway *gw;
        struct rlimit rl;
        int r;

        pthread_once(&once, init_threads);
        if (threads_ok < 0)
                return sbx_error_set(err, -ENOSYS, 0, "libevent has no pthreads support");
        /* every forward holds two descriptors: take what the hard limit allows */
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
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
                gw->resume_ev = evtimer_new(gw->base, resume_listeners, gw);
        }
        if (!gw->base || !gw->cmd_ev || !gw->resume_ev) {
                r = sbx_error_set(err, -ENOMEM, 0, "cannot set up the gateway's event loop");
                goto fail;
        }
        r = -pthread_create(&gw->thread, NULL, gw_main, gw);
        if (r < 0) {
                sbx_error_set(err, r, 0, "cannot start the gateway thread: %s", strerror(-r));
                goto fail;
        }
        *ret = gw;
        return 0;
fail:
        if (gw->resume_ev)
                event_free(gw->resume_ev);
        if (gw->cmd_ev)
                event_free(gw->cmd_ev);
        if (gw->base)
                event_base_free(gw->base);
        pthread_mutex_destroy(&gw->lock);
        free(gw);
        return r;
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
        event_free(gw->resume_ev);
        event_free(gw->cmd_ev);
        event_base_free(gw->base);
        pthread_mutex_destroy(&gw->lock);
        free(gw);
}

void gateway_set_private_check(struct gateway *gw, gateway_private_fn fn, void *userdata)
{
        pthread_mutex_lock(&gw->lock);
        gw->is_private = fn;
        gw->private_ud = userdata;
        pthread_mutex_unlock(&gw->lock);
}

bool gateway_is_private(struct gateway *gw, const char *user, const char *session)
{
        return !gw || ask_private(gw, user, session);
}

int gateway_open(struct gateway *gw, const char *user, const char *session, const char *dir, const int *ports,
                 size_t n, bool egress, struct sbx_error *err)
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
        return cmd_run(gw, c, err, NULL);
}

void gateway_enforce(struct gateway *gw, const char *user, const char *session)
{
        struct gw_cmd *c;
        bool sealed = false;

        if (!gw || !(c = cmd_new(CMD_ENFORCE, user, session)))
                return;
        if (cmd_run(gw, c, NULL, &sealed) < 0)
                log_ctx(LOG_LEVEL_WARN, user, session, NULL, "gateway: the ratchet could not be applied in time");
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
