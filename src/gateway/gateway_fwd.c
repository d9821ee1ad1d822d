/* gateway_fwd.c — the gateway's sockets (gateway.c owns the loop, the
 * sessions and the commands): a published port's host listener and the
 * splice of each forward with the runner's data connection, the session's
 * fwd.sock (the runner's control connection, data connections pairing by
 * id and token; the runner's only, hub_peer.h) and egress.sock (handed
 * to the egress proxy, saying whether the peer is the runner).
 *
 * Threads and locks: loop thread only; the stats are atomics. Splicing
 * follows libevent's sample/le-proxy.c: bytes read from one side are moved
 * (not copied) to the other side's output; when that holds
 * GATEWAY_BUF_HIGH bytes, reading stops until it drains below half. An EOF
 * is passed on as shutdown(SHUT_WR) once its bytes are written (half
 * close), and the pair is freed when both ways are done. */
#include "sandboxd/gateway.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandboxd/egress.h"
#include "sandboxd/log.h"
#include "sandboxd/runner_proto.h"
#include "gateway_internal.h"

/* The doubly linked lists of a session's forwards and pending connections. */
#define GW_LIST_PUSH(head, x)                                                                                          \
        do {                                                                                                           \
                (x)->next = (head);                                                                                    \
                if (head)                                                                                              \
                        (head)->prev = (x);                                                                            \
                (head) = (x);                                                                                          \
        } while (0)
#define GW_LIST_UNLINK(head, x)                                                                                        \
        do {                                                                                                           \
                if ((x)->prev)                                                                                         \
                        (x)->prev->next = (x)->next;                                                                   \
                else                                                                                                   \
                        (head) = (x)->next;                                                                            \
                if ((x)->next)                                                                                         \
                        (x)->next->prev = (x)->prev;                                                                   \
        } while (0)

#define PAIR_TIMEOUT_S 30 /* a host connection waits this long for the runner's data connection */
#define HELLO_TIMEOUT_S                                                                                                \
        30                        /* a new fwd.sock connection must say what it is by then (as long as a
                                * forward waits for it: a starved loop must not drop a good one) */
#define UNIX_BACKLOG 4096         /* a burst of forwards opens as many data connections at once */
#define CTRL_OUT_MAX (256 * 1024) /* RP_FWD_OPEN frames queued for a runner */

/* ---- forwards ---- */

void gateway_fwd_free(struct gw_fwd *f)
{
        struct gw_sess *s = f->s;

        for (int i = 0; i < 2; i++)
                if (f->b[i])
                        bufferevent_free(f->b[i]);
        if (f->timer)
                event_free(f->timer);
        GW_LIST_UNLINK(s->fwds, f);
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
        gateway_fwd_free(f);
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
        gateway_fwd_free(f); /* an error on either side ends both */
}

static void fwd_timeout(evutil_socket_t fd, short what, void *ud)
{
        struct gw_fwd *f = ud;
        if (!f->paired) {
                log_ctx(LOG_LEVEL_DEBUG, f->s->user, f->s->session, NULL,
                        "gateway: the runner did not answer forward %u in time", f->id);
                gateway_fwd_free(f);
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

/* Ask the runner, on its control connection, to open the forward's data
 * connection. */
static void fwd_send_open(struct gw_fwd *f)
{
        struct rp_fwd_open op = {.port = f->port, .token = f->token};
        struct rp_hdr hdr = {.len = sizeof(op), .type = RP_FWD_OPEN, .tag = f->id};

        bufferevent_write(f->s->ctrl, &hdr, sizeof(hdr));
        bufferevent_write(f->s->ctrl, &op, sizeof(op));
        f->opened = true;
}

/* The runner's control connection went (or another took its place): an
 * open it had may be lost with it, so every forward not paired yet asks
 * again on the next one. */
static void fwd_opens_lost(struct gw_sess *s)
{
        for (struct gw_fwd *f = s->fwds; f; f = f->next)
                if (!f->paired)
                        f->opened = false;
}

/* The runner's control connection is (back) up: the clients that came
 * meanwhile get their opens now (each still within its pairing deadline; a
 * second data connection for a forward already paired finds no token). */
static void fwd_open_waiting(struct gw_sess *s)
{
        for (struct gw_fwd *f = s->fwds; f; f = f->next)
                if (!f->opened && !f->paired)
                        fwd_send_open(f);
}

/* A host client on port index `index`. */
static void host_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *ud)
{
        gateway_host_take(ud, fd);
}

void gateway_host_take(struct gw_listen *gl, evutil_socket_t fd)
{
        gateway_fwd_take(gl->s, fd, gl->s->gw->cfg->container_port_base + gl->index);
}

void gateway_fwd_take(struct gw_sess *s, evutil_socket_t fd, int port)
{
        struct gateway *gw = s->gw;
        struct gw_fwd *f;

        if (!s->runner || s->n_fwds >= (size_t)gw->cfg->forward_max_per_session ||
            s->u->fwds >= (size_t)gw->cfg->forward_max_per_user || gw->n_fwds >= (size_t)gw->cfg->forward_max_total ||
            (s->ctrl && evbuffer_get_length(bufferevent_get_output(s->ctrl)) > CTRL_OUT_MAX)) {
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
        GW_LIST_PUSH(s->fwds, f);
        s->n_fwds++;
        s->u->fwds++;
        gw->n_fwds++;
        atomic_fetch_add(&gw->st_forwards, 1);
        struct timeval tv = {PAIR_TIMEOUT_S, 0};
        event_add(f->timer, &tv);
        f->port = (uint32_t)port;
        /* no control connection (the runner redials it after a restart, a claim, a thaw): the client
         * waits for it within the pairing deadline, and the open goes when it comes (fwd_open_waiting) */
        if (s->ctrl)
                fwd_send_open(f);
        /* a paused session's runner reads the open once thawed: ask for that now */
        pthread_mutex_lock(&gw->lock);
        gateway_wake_fn wake = gw->wake;
        void *wake_ud = gw->wake_ud;
        pthread_mutex_unlock(&gw->lock);
        if (wake)
                wake(s->user, s->session, wake_ud);
}

/* ---- fwd.sock: control and data connections from the runner ---- */

void gateway_pending_free(struct gw_pending *p)
{
        struct gw_sess *s = p->s;

        if (p->b)
                bufferevent_free(p->b);
        GW_LIST_UNLINK(s->pending, p);
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
                fwd_opens_lost(s);
        }
}

static void pending_event(struct bufferevent *bev, short what, void *ud)
{
        gateway_pending_free(ud); /* EOF, error or the hello timeout before a complete first frame */
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
                if (s->ctrl) {
                        bufferevent_free(s->ctrl); /* a new runner (or a restarted one) takes over */
                        fwd_opens_lost(s);
                }
                s->ctrl = bev;
                p->b = NULL;
                gateway_pending_free(p);
                bufferevent_setcb(bev, ctrl_read, NULL, ctrl_event, s);
                bufferevent_set_timeouts(bev, NULL, NULL);
                bufferevent_setwatermark(bev, EV_READ, 0, 4096);
                bufferevent_enable(bev, EV_READ | EV_WRITE);
                fwd_open_waiting(s);
                return;
        }
        if (hdr.type != RP_FWD_DATA || hdr.len != sizeof(token)) {
                gateway_pending_free(p);
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
                gateway_pending_free(p);
                bufferevent_set_timeouts(bev, NULL, NULL);
                fwd_start(f);
                return;
        }
        gateway_pending_free(p); /* names no forward of this session */
}

#define IMPOSTOR_LOG_MS 60000 /* refused connections of one session are logged at most this often */

/* Only the container's runner may open the control or a data connection:
 * tenant code that dials fwd.sock would otherwise take the control over
 * (and with it the session's forwards) or hold the pending slots the
 * runner's data connections need. Refused at once, logged once a minute. */
/* Whether the peer of fd is the session's runner (hub_peer.h), and why not. */
static bool peer_is_runner(struct gw_sess *s, evutil_socket_t fd, const char **ret_why)
{
        struct hub_peer peer;

        *ret_why = "";
        if (s->dirfd < 0)
                return false;
        if (s->peer.pid == 0) /* the runner the hub (or an earlier daemon) recorded */
                (void)hub_peer_load(s->dirfd, &s->peer);
        if (hub_peer_verify(fd, s->dirfd, &s->peer, &peer, ret_why) < 0)
                return false;
        /* a runner, but of a container the session left (a lost node's Pod runs on): the hub
         * fenced it and keeps the list in the directory; the audit row is the hub's */
        if (hub_peer_fenced(s->dirfd, &peer, NULL)) {
                *ret_why = "the runner of an earlier container of the session (fenced)";
                return false;
        }
        s->peer = peer;
        return true;
}

static bool fwd_peer_ok(struct gw_sess *s, evutil_socket_t fd)
{
        const char *why = "";
        int64_t now;

        if (peer_is_runner(s, fd, &why))
                return true;
        s->impostors++;
        now = sbx_now_ms();
        if (!s->impostors_said || now - s->impostors_said_ms >= IMPOSTOR_LOG_MS) {
                log_ctx(LOG_LEVEL_WARN, s->user, s->session, NULL,
                        "gateway: refused %" PRIu64
                        " connection(s) to fwd.sock that did not come from the "
                        "container's runner (last: %s)",
                        s->impostors - s->impostors_said, why);
                s->impostors_said = s->impostors;
                s->impostors_said_ms = now;
        }
        return false;
}

void gateway_fwd_sock_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *ud)
{
        struct gw_listen *gl = ud;
        struct gw_sess *s = gl->s;

        if (!fwd_peer_ok(s, fd)) {
                evutil_closesocket(fd);
                return;
        }
        gateway_fwd_sock_take(s, fd);
}

void gateway_fwd_sock_take(struct gw_sess *s, evutil_socket_t fd)
{
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
        GW_LIST_PUSH(s->pending, p);
        s->n_pending++;
        bufferevent_setcb(p->b, pending_read, NULL, pending_event, p);
        bufferevent_setwatermark(p->b, EV_READ, RP_HDR_LEN, RP_HDR_LEN + 64);
        bufferevent_set_timeouts(p->b, &tv, NULL);
        bufferevent_enable(p->b, EV_READ);
}

void gateway_egress_sock_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *ud)
{
        struct gw_listen *gl = ud;
        struct gw_sess *s = gl->s;

        const char *why;

        /* any process of the container may dial egress.sock: only the runner's header names an
         * execution (egress_exec.c); anyone else's connection is unattributed */
        if (s->gw->eg && !s->sealed)
                egress_accept_from(s->gw->eg, s->user, s->session, fd, peer_is_runner(s, fd, &why)); /* takes fd */
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

void gateway_resume_listeners(evutil_socket_t fd, short what, void *ud)
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

void gateway_listen_close(struct gw_listen *gl)
{
        if (gl->l) {
                evconnlistener_free(gl->l);
                gl->l = NULL;
                if (gl->index >= 0)
                        atomic_fetch_sub(&gl->s->gw->st_listeners, 1);
        } else if (gl->remote) { /* the node closes it (gateway_open, drop, enforce tell it) */
                gl->remote = false;
                atomic_fetch_sub(&gl->s->gw->st_listeners, 1);
        }
}

int gateway_unix_listen(struct gw_sess *s, struct gw_listen *gl, const char *name, evconnlistener_cb cb,
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

void gateway_unix_close(struct gw_sess *s, struct gw_listen *gl, const char *name)
{
        gateway_listen_close(gl);
        if (s->dirfd >= 0)
                (void)unlinkat(s->dirfd, name, 0);
}

int gateway_host_listen(struct gw_sess *s, struct gw_listen *gl, int index, int port, struct sbx_error *err)
{
        if (s->gw->publish_fn) { /* the node listens: gateway_open asks it once this is recorded */
                gl->s = s;
                gl->index = index;
                gl->port = port;
                gl->remote = true;
                atomic_fetch_add(&s->gw->st_listeners, 1);
                return 0;
        }
        int fd = sbx_listen_tcp(s->gw->cfg->publish_ip, port, err);
        if (fd < 0)
                return fd;
        gl->s = s;
        gl->index = index;
        gl->port = port;
        /* backlog 0: already listening (-1 would make libevent listen() again with 128) */
        gl->l = evconnlistener_new(s->gw->base, host_accept, gl, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
        if (!gl->l) {
                close(fd);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        evconnlistener_set_error_cb(gl->l, listen_error);
        atomic_fetch_add(&s->gw->st_listeners, 1);
        return 0;
}
