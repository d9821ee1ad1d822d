/* hub.c — the runner hub: one thread (sbx-runner) that accepts and
 * reads every session's runner connection, checks and dispatches its
 * frames, pings it (heartbeat) and retires dropped channels; and writing
 * frames to a connection (see hub.h for the contract, runner_proto.h for
 * the wire format). The rest of the hub: per-session channels and their
 * directories in hub_chan.c, executions over a connection in
 * hub_exec.c, what a reconnected runner still holds (durable
 * executions) in hub_jobs.c, files and services in hub_ops.c; what
 * they share is in hub_internal.h.
 *
 * Locks (the same in every file of src/hub/):
 *   h->lock   the channel list, every channel's fds, connection state,
 *             refs, jobs and executions list, every execution's refs, and
 *             h->expect; paired with h->cond, broadcast when a runner
 *             connects and when it has listed its jobs.
 *   c->wlock  writes to a channel's connection (held across one frame, with
 *             a deadline; never taken while holding h->lock).
 *   x->lock   an execution's state; paired with x->cond.
 * Order: c->wlock before h->lock (briefly, to check the connection);
 * h->lock before x->lock.
 *
 * Only the hub thread reads connections, closes fds and frees channels, so
 * an epoll event never points at freed memory: a dropped channel is only
 * marked, and the thread retires it between two epoll batches. */
#include "sandboxd/hub.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hub_internal.h"
#include "sandboxd/log.h"

#define WRITE_DEADLINE_MS 2000
#define MAX_EVENTS 64
#define PING_RETRY_MS 100 /* a ping that could not go now is tried again after this */

/* Close a channel's connection: every execution on it is lost. Hub thread
 * only (it owns reads and closes). Takes h->lock. */
static void conn_close(struct hub *h, struct hub_chan *c, const char *why)
{
        pthread_mutex_lock(&h->lock);
        if (c->cfd < 0) {
                if (c->dead)
                        hub_end_detached_locked(c, true, 0);
                pthread_mutex_unlock(&h->lock);
                return;
        }
        (void)epoll_ctl(h->epfd, EPOLL_CTL_DEL, c->cfd, NULL);
        /* writers may hold the fd: shut it down now, close it under wlock */
        (void)shutdown(c->cfd, SHUT_RDWR);
        if (c->suspend && !c->dead) {
                /* the node link went, not the runner: its executions wait for it to come back */
                for (struct hub_exec *x = c->execs; x; x = x->next)
                        if (x->cfd == c->cfd)
                                hub_exec_set_cfd(x, -1);
                c->resume_until = sbx_now_ms() + h->cfg->node_fence_ms;
        } else {
                hub_end_detached_locked(c, true, 0);
        }
        c->suspend = false;
        for (struct hub_exec *x = c->execs; x; x = x->next)
                if (x->cfd == c->cfd)
                        hub_exec_end(x, true, -ECONNRESET, "the runner connection was lost", NULL);
        c->n_jobs = 0;
        c->jobs_complete = false;
        pthread_mutex_unlock(&h->lock);
        pthread_mutex_lock(&c->wlock);
        pthread_mutex_lock(&h->lock);
        uint64_t conn_id = c->conn_id;
        close(c->cfd);
        c->cfd = -1;
        c->hello = false;
        c->version[0] = '\0';
        c->in_len = 0;
        pthread_mutex_unlock(&h->lock);
        pthread_mutex_unlock(&c->wlock);
        hub_ops_closed(h->ops, c->user, c->session, conn_id);
        if (why)
                log_ctx(LOG_LEVEL_DEBUG, c->user, c->session, NULL, "runner connection closed: %s", why);
}

/* A runner that broke the protocol or stopped answering is treated like a
 * dead container (an orderly end of stream is the container's own death,
 * which the monitor sees). Hub thread. */
static void conn_fail(struct hub *h, struct hub_chan *c, const char *cause, const char *why)
{
        bool was_hello = c->hello, quiet; /* hello is written by this (the hub) thread only */

        /* a runner refused before its hello (another protocol version: a container
         * from before an upgrade) retries every second: say it once per container */
        pthread_mutex_lock(&h->lock);
        quiet = !was_hello && c->refused_once;
        if (!was_hello)
                c->refused_once = true;
        pthread_mutex_unlock(&h->lock);
        log_ctx(quiet ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARN, c->user, c->session, NULL, "runner disconnected: %s", why);
        conn_close(h, c, why);
        if (was_hello && h->on_lost)
                h->on_lost(c->user, c->session, cause, h->lost_ud);
}

/* Write one frame with a deadline. Caller holds c->wlock; fd is its cfd. */
static int write_all(int fd, const void *buf, size_t len, int64_t until)
{
        const char *p = buf;

        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN) {
                        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
                        int64_t left = until - sbx_now_ms();
                        if (left <= 0)
                                return -ETIMEDOUT;
                        (void)poll(&pfd, 1, (int)left);
                        continue;
                }
                if (n < 0)
                        return -errno;
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

/* Whether cfd is still the channel's connection (a writer holds c->wlock,
 * so it is not closed meanwhile). */
static bool conn_is(struct hub_chan *c, int cfd)
{
        pthread_mutex_lock(&c->h->lock);
        bool same = c->cfd == cfd && cfd >= 0;
        pthread_mutex_unlock(&c->h->lock);
        return same;
}

int hub_send_frame(struct hub_chan *c, int cfd, uint16_t type, uint16_t flags, uint32_t tag, const void *p1, size_t n1,
                   const void *p2, size_t n2)
{
        struct rp_hdr hdr = {.len = (uint32_t)(n1 + n2), .type = type, .flags = flags, .tag = tag};
        int64_t until = sbx_now_ms() + WRITE_DEADLINE_MS;
        int r;

        if (n1 + n2 > RP_MAX_TO_RUNNER)
                return -E2BIG;
        pthread_mutex_lock(&c->wlock);
        if (!conn_is(c, cfd))
                r = -ECONNRESET;
        else {
                r = write_all(cfd, &hdr, sizeof(hdr), until);
                if (r == 0 && n1)
                        r = write_all(cfd, p1, n1, until);
                if (r == 0 && n2)
                        r = write_all(cfd, p2, n2, until);
                if (r < 0)
                        (void)shutdown(cfd, SHUT_RDWR); /* a half-written frame: the hub thread closes it */
        }
        pthread_mutex_unlock(&c->wlock);
        return r;
}

/* A small frame (RP_PING, RP_FORGET, RP_ACK) from the hub thread, which
 * must never wait on one runner: not for its write lock (a writer may hold
 * it up to WRITE_DEADLINE_MS against a runner that never reads) and not for
 * room in its socket. -EAGAIN when it cannot go now: a ping is due again
 * next heartbeat (silence is judged by last_rx), a job not forgotten is
 * listed again at the runner's next connect, and an acknowledgement is left
 * to the thread that waits for the execution. One send of header and
 * payload: a unix stream socket takes a frame this small whole or not at
 * all. */
int hub_send_frame_nowait(struct hub_chan *c, int cfd, uint16_t type, uint32_t tag, const void *p, size_t n)
{
        unsigned char buf[RP_HDR_LEN + RP_NOWAIT_MAX];
        struct rp_hdr hdr = {.len = (uint32_t)n, .type = type, .flags = 0, .tag = tag};
        ssize_t sent;
        int r;

        if (n > RP_NOWAIT_MAX)
                return -E2BIG;
        memcpy(buf, &hdr, RP_HDR_LEN);
        if (n)
                memcpy(buf + RP_HDR_LEN, p, n);
        if (pthread_mutex_trylock(&c->wlock) != 0)
                return -EAGAIN;
        if (!conn_is(c, cfd))
                r = -ECONNRESET;
        else {
                do
                        sent = send(cfd, buf, RP_HDR_LEN + n, MSG_DONTWAIT | MSG_NOSIGNAL);
                while (sent < 0 && errno == EINTR);
                if (sent == (ssize_t)(RP_HDR_LEN + n))
                        r = 0;
                else if (sent < 0)
                        r = errno == EAGAIN ? -EAGAIN : -errno;
                else {
                        r = -EIO; /* a half-written frame: the hub thread closes it */
                        (void)shutdown(cfd, SHUT_RDWR);
                }
        }
        pthread_mutex_unlock(&c->wlock);
        return r;
}

/* Returns false on a protocol error. Every field is checked here or by
 * the handler the frame goes to (jobs, files and services, executions). */
static bool handle_frame(struct hub *h, struct hub_chan *c, const struct rp_hdr *hdr, const unsigned char *p)
{
        if (!c->hello) {
                struct rp_hello hello;
                size_t vlen;
                if (hdr->type != RP_HELLO || hdr->len < sizeof(hello) || hdr->len > sizeof(hello) + 63)
                        return false;
                memcpy(&hello, p, sizeof(hello));
                if (hello.protocol != RP_PROTOCOL)
                        return false;
                vlen = hdr->len - sizeof(hello);
                for (size_t i = 0; i < vlen; i++)
                        if (p[sizeof(hello) + i] < 0x20 || p[sizeof(hello) + i] > 0x7e)
                                return false;
                pthread_mutex_lock(&h->lock);
                memcpy(c->version, p + sizeof(hello), vlen);
                c->version[vlen] = '\0';
                c->hello = true;
                c->ever_hello = true;
                pthread_cond_broadcast(&h->cond);
                pthread_mutex_unlock(&h->lock);
                log_ctx(LOG_LEVEL_DEBUG, c->user, c->session, NULL, "runner connected: %s (pid %" PRIu32 ")",
                        c->version, hello.pid);
                return true;
        }
        if (hdr->type == RP_PONG)
                return hdr->len == 0;
        if (hdr->type == RP_JOB)
                return hub_job_listed(h, c, hdr, p);
        if (hdr->type == RP_JOBS_END) {
                if (hdr->len != 0)
                        return false;
                hub_jobs_resume_detached(h, c); /* before the rest is forgotten */
                return hub_jobs_listed(h, c);
        }
        if ((hdr->type >= RP_FILE_READ && hdr->type <= RP_SVC_STATE) || hdr->type == RP_WATCH_EVENT)
                return hub_ops_frame(h->ops, c->user, c->session, c->conn_id, hdr, p);
        return hub_exec_on_frame(h, c, hdr, p);
}

/* Reads at most RUNNER_READ_ROUNDS buffers per call: the socket is level
 * triggered, so a runner that never pauses is read again on the next
 * epoll_wait, after the other sessions' events, instead of holding the hub. */

static void conn_read(struct hub *h, struct hub_chan *c)
{
        for (int round = 0; round < RUNNER_READ_ROUNDS; round++) {
                size_t off = 0;
                ssize_t n =
                        recv(c->cfd, c->inbuf + c->in_len, RP_HDR_LEN + RP_MAX_FROM_RUNNER - c->in_len, MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0) {
                        conn_close(h, c, n == 0 ? "end of stream" : strerror(errno));
                        return;
                }
                c->in_len += (size_t)n;
                c->last_rx = sbx_now_ms();
                /* frames are taken from off on and the rest moved down once:
                 * not once per frame (a buffer of tiny frames was quadratic) */
                for (;;) {
                        struct rp_hdr hdr;
                        if (c->in_len - off < RP_HDR_LEN)
                                break;
                        memcpy(&hdr, c->inbuf + off, RP_HDR_LEN);
                        if (hdr.len > RP_MAX_FROM_RUNNER) {
                                conn_fail(h, c, "hub_protocol_error", "oversized frame");
                                return;
                        }
                        if (c->in_len - off < RP_HDR_LEN + hdr.len)
                                break;
                        if (!handle_frame(h, c, &hdr, c->inbuf + off + RP_HDR_LEN)) {
                                conn_fail(h, c, "hub_protocol_error", "invalid frame");
                                return;
                        }
                        off += RP_HDR_LEN + hdr.len;
                }
                if (off) {
                        memmove(c->inbuf, c->inbuf + off, c->in_len - off);
                        c->in_len -= off;
                }
        }
}

#define IMPOSTOR_LOG_MS 60000 /* refused connections of one session are logged at most this often */

/* Tenant code dialling runner.sock is refused: logged at once the first
 * time, then once a minute with the count, so a loop cannot flood the log. */
static void impostor_refused(struct hub_chan *c, int fd, const char *why)
{
        int64_t now = sbx_now_ms();

        close(fd);
        c->impostors++;
        if (c->impostors_said && now - c->impostors_said_ms < IMPOSTOR_LOG_MS)
                return;
        log_ctx(LOG_LEVEL_WARN, c->user, c->session, NULL,
                "refused %" PRIu64
                " connection(s) to the runner socket that did not come from the container's "
                "runner (last: %s)",
                c->impostors - c->impostors_said, why);
        c->impostors_said = c->impostors;
        c->impostors_said_ms = now;
}

/* Make fd the channel's connection. Under h->lock. -EBUSY if it has one. */
static int conn_install_locked(struct hub *h, struct hub_chan *c, int fd)
{
        if (c->cfd >= 0)
                return -EBUSY;
        c->cfd = fd;
        c->conn_id = ++h->next_conn_id;
        c->hello = false;
        c->n_jobs = 0;
        c->jobs_complete = false;
        c->last_rx = c->last_ping = sbx_now_ms();
        c->in_len = 0;
        c->next_tag = 0;
        /* tags differ from any an earlier daemon used, whose executions may still run */
        if (getrandom(&c->next_tag, sizeof(c->next_tag), 0) != sizeof(c->next_tag))
                c->next_tag = (uint32_t)sbx_now_ms();
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = &c->ep_conn};
        (void)epoll_ctl(h->epfd, EPOLL_CTL_ADD, fd, &ev);
        return 0;
}

/* The fence outlives the daemon: the list is kept in the session directory
 * (hub_peer.h), so a restarted daemon, and the gateway's fwd.sock, refuse
 * the same runners. Hub thread. */
static void fenced_save(struct hub_chan *c)
{
        struct hub_fence list[RUNNER_FENCED_MAX];

        for (size_t i = 0; i < c->n_fenced; i++)
                list[i] = c->fenced[i].f;
        if (hub_fence_save(c->dirfd, list, c->n_fenced) < 0)
                log_ctx(LOG_LEVEL_WARN, c->user, c->session, NULL,
                        "cannot record the fenced runners in the session directory: a restarted daemon would not "
                        "know them");
}

static void fenced_load(struct hub_chan *c)
{
        struct hub_fence list[RUNNER_FENCED_MAX];
        size_t n = 0;

        if (c->fenced_loaded)
                return;
        c->fenced_loaded = true;
        if (hub_fence_load(c->dirfd, list, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++)
                c->fenced[c->n_fenced++] = (struct hub_fenced){.f = list[i]};
}

/* c's session had its container removed (hub_fence_runner): the
 * runner known so far belongs to that container, and is fenced by its init
 * (pid and start time): its connection closes, and whatever that container
 * dials later is refused. Hub thread. */
static void fence_apply(struct hub *h, struct hub_chan *c)
{
        uint64_t epoch;
        bool pending;

        pthread_mutex_lock(&h->lock);
        pending = c->fence_pending;
        c->fence_pending = false;
        epoch = c->epoch;
        pthread_mutex_unlock(&h->lock);
        if (c->dirfd >= 0)
                fenced_load(c);
        if (!pending)
                return;
        if (c->peer.pid == 0) /* after a restart: the runner an earlier daemon knew */
                (void)hub_peer_load(c->dirfd, &c->peer);
        if (c->peer.pid != 0) {
                if (c->n_fenced == RUNNER_FENCED_MAX) {
                        memmove(&c->fenced[0], &c->fenced[1], (RUNNER_FENCED_MAX - 1) * sizeof(c->fenced[0]));
                        c->n_fenced--;
                }
                c->fenced[c->n_fenced++] =
                        (struct hub_fenced){.f.init_pid = c->peer.init_pid,
                                            .f.init_start = c->peer.init_start,
                                            .f.epoch = c->peer_epoch ? c->peer_epoch : (epoch ? epoch - 1 : 0)};
                c->peer = (struct hub_peer){0};
                c->peer_epoch = 0;
                (void)unlinkat(c->dirfd, RUNNER_PEER_FILE, 0);
                fenced_save(c);
        }
        if (c->cfd >= 0) {
                log_ctx(LOG_LEVEL_INFO, c->user, c->session, NULL,
                        "the runner of the session's removed container (epoch %" PRIu64 ") is fenced", epoch);
                conn_close(h, c, "fenced: the session has a new container");
        }
}

/* A fenced container's runner dialled: refused, on the record once per container. */
static void fenced_refused(struct hub *h, struct hub_chan *c, int fd, struct hub_fenced *f)
{
        uint64_t now = 0;

        close(fd);
        if (f->refused++ > 0)
                return;
        pthread_mutex_lock(&h->lock);
        now = c->epoch;
        pthread_mutex_unlock(&h->lock);
        log_ctx(LOG_LEVEL_WARN, c->user, c->session, NULL,
                "refused the runner of an earlier container (epoch %" PRIu64 ", the session is at %" PRIu64
                "): its engine could not kill it (a lost node?)",
                f->f.epoch, now);
        if (h->refused_fn)
                h->refused_fn(c->user, c->session, f->f.epoch, now, h->refused_ud);
}

static struct hub_fenced *fenced_find(struct hub_chan *c, const struct hub_peer *peer)
{
        for (size_t i = 0; i < c->n_fenced; i++)
                if (c->fenced[i].f.init_pid == peer->init_pid && c->fenced[i].f.init_start == peer->init_start)
                        return &c->fenced[i];
        return NULL;
}

static void conn_accept(struct hub *h, struct hub_chan *c)
{
        fence_apply(h, c); /* before any connection is judged */
        for (;;) {
                struct hub_peer peer;
                const char *why = "";
                int fd = accept4(c->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0)
                        return; /* EAGAIN, or EMFILE: the next event retries */
                /* only the runner Docker started: tenant code in the container is
                 * refused here, before it can take the slot or make the runner wait */
                pthread_mutex_lock(&h->lock);
                hub_peer_fn check = h->peer_check;
                pthread_mutex_unlock(&h->lock);
                if (c->peer.pid == 0) /* after a restart: the runner an earlier daemon knew */
                        (void)hub_peer_load(c->dirfd, &c->peer);
                if (check(fd, c->dirfd, &c->peer, &peer, &why) < 0) {
                        impostor_refused(c, fd, why);
                        continue;
                }
                /* a runner, but of an earlier container of the session: fenced by its epoch */
                struct hub_fenced *fenced = fenced_find(c, &peer);
                if (fenced) {
                        fenced_refused(h, c, fd, fenced);
                        continue;
                }
                if (peer.pid != c->peer.pid || peer.start != c->peer.start) {
                        pthread_mutex_lock(&h->lock);
                        c->peer_epoch = c->epoch;
                        pthread_mutex_unlock(&h->lock);
                        c->peer = peer;
                        if (hub_peer_save(c->dirfd, &peer) < 0)
                                log_ctx(LOG_LEVEL_WARN, c->user, c->session, NULL,
                                        "cannot record the runner in its directory: a restarted daemon checks it "
                                        "by its ancestry alone");
                }
                pthread_mutex_lock(&h->lock);
                int r = conn_install_locked(h, c, fd);
                pthread_mutex_unlock(&h->lock);
                if (r < 0)
                        close(fd); /* one runner per session: a second connection is someone else */
        }
}

int hub_attach(struct hub *h, const char *user, const char *session, int fd)
{
        int r = -ENOENT;

        pthread_mutex_lock(&h->lock);
        struct hub_chan *c = hub_chan_find_locked(h, user, session);
        if (c)
                r = conn_install_locked(h, c, fd);
        pthread_mutex_unlock(&h->lock);
        if (r < 0) {
                log_ctx(LOG_LEVEL_DEBUG, user, session, NULL, "a runner connection from the node was closed: %s",
                        r == -EBUSY ? "a runner is connected already" : "no channel");
                close(fd);
        }
        return r;
}

void hub_suspend(struct hub *h, const char *user, const char *session)
{
        pthread_mutex_lock(&h->lock);
        struct hub_chan *c = hub_chan_find_locked(h, user, session);
        if (c && c->cfd >= 0)
                c->suspend = true;
        pthread_mutex_unlock(&h->lock);
}

void hub_chan_free(struct hub_chan *c)
{
        if (c->lfd >= 0)
                close(c->lfd);
        if (c->dirfd >= 0)
                close(c->dirfd);
        free(c->inbuf);
        pthread_mutex_destroy(&c->wlock);
        free(c);
}

/* Retire dropped channels that nobody references any more. Hub thread. */
static void reap_dead(struct hub *h)
{
        for (;;) {
                struct hub_chan *dead = NULL;
                pthread_mutex_lock(&h->lock);
                for (struct hub_chan **pp = &h->chans; *pp; pp = &(*pp)->next)
                        if ((*pp)->dead) {
                                dead = *pp;
                                break;
                        }
                pthread_mutex_unlock(&h->lock);
                if (!dead)
                        return;
                conn_close(h, dead, NULL);
                pthread_mutex_lock(&h->lock);
                if (dead->refs > 0 || dead->execs) {
                        pthread_mutex_unlock(&h->lock);
                        return; /* an execution handle still points at it: next pass */
                }
                for (struct hub_chan **pp = &h->chans; *pp; pp = &(*pp)->next)
                        if (*pp == dead) {
                                *pp = dead->next;
                                break;
                        }
                if (dead->lfd >= 0)
                        (void)epoll_ctl(h->epfd, EPOLL_CTL_DEL, dead->lfd, NULL);
                pthread_mutex_unlock(&h->lock);
                hub_chan_free(dead);
        }
}

/* Ping every connected runner each heartbeat interval; one silent for
 * three intervals is treated like a dead container, unless its container
 * is paused (frozen): then it is neither pinged nor judged. Hub thread. */
static void heartbeat(struct hub *h)
{
        int64_t now = sbx_now_ms(), every = h->cfg->runner_heartbeat_ms;

        pthread_mutex_lock(&h->lock);
        for (struct hub_chan *c = h->chans; c; c = c->next)
                hub_end_detached_locked(c, false, now);
        pthread_mutex_unlock(&h->lock);

        for (;;) {
                struct hub_chan *late = NULL, *due = NULL;
                int cfd = -1;
                pthread_mutex_lock(&h->lock);
                for (struct hub_chan *c = h->chans; c && !late && !due; c = c->next) {
                        if (c->dead || c->cfd < 0 || c->frozen)
                                continue; /* a frozen runner cannot answer: it is not lost */
                        if (now - c->last_rx > 3 * every)
                                late = c;
                        else if (c->hello && now - c->last_ping >= every) {
                                due = c;
                                cfd = c->cfd;
                                c->last_ping = now;
                        }
                }
                pthread_mutex_unlock(&h->lock);
                if (late)
                        conn_fail(h, late, "hub_unresponsive", "no heartbeat answer");
                else if (!due)
                        return;
                else if (hub_send_frame_nowait(due, cfd, RP_PING, 0, NULL, 0) == -EAGAIN) {
                        /* a writer holds it, or its socket is full: try again soon,
                         * so a long write does not cost a busy runner its pings */
                        pthread_mutex_lock(&h->lock);
                        due->last_ping = now - every + PING_RETRY_MS;
                        pthread_mutex_unlock(&h->lock);
                }
        }
}

/* Every fence a prepare asked for since the last round. Hub thread (which
 * alone frees channels: c stays valid unlocked). */
static void fence_all(struct hub *h)
{
        for (;;) {
                struct hub_chan *c = NULL;
                pthread_mutex_lock(&h->lock);
                for (struct hub_chan *x = h->chans; x && !c; x = x->next)
                        if (!x->dead && x->fence_pending)
                                c = x;
                pthread_mutex_unlock(&h->lock);
                if (!c)
                        return;
                fence_apply(h, c);
        }
}

static void *hub_main(void *ud)
{
        struct hub *h = ud;
        struct epoll_event evs[MAX_EVENTS];

        pthread_setname_np(pthread_self(), "sbx-runner");
        for (;;) {
                int n = epoll_wait(h->epfd, evs, MAX_EVENTS, 250);
                pthread_mutex_lock(&h->lock);
                bool stop = h->stop;
                pthread_mutex_unlock(&h->lock);
                if (stop)
                        break;
                fence_all(h); /* before any event: an old runner's frame is not read after its fence */
                for (int i = 0; i < n; i++) {
                        struct ep_ref *ref = evs[i].data.ptr;
                        if (!ref) {
                                char b[64];
                                while (read(h->wake[0], b, sizeof(b)) > 0)
                                        ;
                                continue;
                        }
                        if (ref->c->dead)
                                continue;
                        if (ref->kind == EP_LISTEN)
                                conn_accept(h, ref->c);
                        else if (ref->c->cfd >= 0)
                                conn_read(h, ref->c);
                }
                reap_dead(h);
                heartbeat(h);
        }
        return NULL;
}

void hub_wake(struct hub *h)
{
        if (write(h->wake[1], "w", 1) < 0) {
                /* the pipe is full: the thread is already due to wake */
        }
}

/* ---- public ---- */

int hub_new(const struct sbx_config *cfg, struct hub **ret, struct sbx_error *err)
{
        struct hub *h = calloc(1, sizeof(*h));
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        int r;

        if (!h)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        h->cfg = cfg;
        h->peer_check = hub_peer_verify;
        h->wake[0] = h->wake[1] = -1;
        snprintf(h->root, sizeof(h->root), "%s/runner", cfg->data_dir);
        if (cfg->runner_binary[0]) {
                sbx_strlcpy(h->binary, cfg->runner_binary, sizeof(h->binary));
        } else {
                char exe[SBX_PATH_MAX];
                ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
                char *slash;
                exe[n > 0 ? n : 0] = '\0';
                slash = strrchr(exe, '/');
                if (slash)
                        *slash = '\0';
                snprintf(h->binary, sizeof(h->binary), "%s/sandboxd-runner", exe);
        }
        if (mkdir(h->root, 0700) < 0 && errno != EEXIST) {
                r = sbx_error_set(err, -errno, 0, "cannot create %s: %m", h->root);
                free(h); /* after the message: it names h->root */
                return r;
        }
        (void)chmod(h->root, 0700);
        pthread_mutex_init(&h->lock, NULL);
        pthread_mutex_init(&h->open_lock, NULL);
        pthread_cond_init(&h->cond, NULL);
        h->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (h->epfd < 0 || pipe2(h->wake, O_CLOEXEC | O_NONBLOCK) < 0 ||
            epoll_ctl(h->epfd, EPOLL_CTL_ADD, h->wake[0], &ev) < 0) {
                r = sbx_error_set(err, -errno, 0, "cannot set up the runner hub: %m");
                goto fail;
        }
        h->ops = hub_ops_new(h);
        if (!h->ops) {
                r = sbx_error_set(err, -ENOMEM, 0, "out of memory");
                goto fail;
        }
        r = -pthread_create(&h->thread, NULL, hub_main, h);
        if (r < 0) {
                sbx_error_set(err, r, 0, "cannot start the runner thread: %s", strerror(-r));
                goto fail;
        }
        *ret = h;
        return 0;
fail:
        hub_ops_free(h->ops);
        if (h->epfd >= 0)
                close(h->epfd);
        for (int i = 0; i < 2; i++)
                if (h->wake[i] >= 0)
                        close(h->wake[i]);
        pthread_mutex_destroy(&h->lock);
        pthread_mutex_destroy(&h->open_lock);
        pthread_cond_destroy(&h->cond);
        free(h);
        return r;
}

void hub_free(struct hub *h)
{
        if (!h)
                return;
        pthread_mutex_lock(&h->lock);
        h->stop = true;
        pthread_mutex_unlock(&h->lock);
        hub_wake(h);
        pthread_join(h->thread, NULL);
        while (h->chans) {
                struct hub_chan *c = h->chans;
                h->chans = c->next;
                if (c->cfd >= 0)
                        close(c->cfd);
                for (struct hub_exec *x = c->execs; x; x = x->next)
                        x->c = NULL; /* handles outliving the hub must not exist; be safe */
                hub_chan_free(c);
        }
        hub_ops_free(h->ops);
        close(h->epfd);
        close(h->wake[0]);
        close(h->wake[1]);
        pthread_mutex_destroy(&h->lock);
        pthread_mutex_destroy(&h->open_lock);
        pthread_cond_destroy(&h->cond);
        free(h->expect);
        free(h);
}

void hub_set_lost_handler(struct hub *h, hub_lost_fn fn, void *userdata)
{
        pthread_mutex_lock(&h->lock);
        h->on_lost = fn;
        h->lost_ud = userdata;
        pthread_mutex_unlock(&h->lock);
}

void hub_set_peer_check(struct hub *h, hub_peer_fn fn)
{
        pthread_mutex_lock(&h->lock);
        h->peer_check = fn;
        pthread_mutex_unlock(&h->lock);
}

/* ---- for hub_ops.c ---- */

struct hub_ops *hub_ops(struct hub *h)
{
        return h ? h->ops : NULL;
}

int hub_conn(struct hub *h, const char *user, const char *session, uint64_t *ret)
{
        int r = -ENOTCONN;

        if (!h)
                return r;
        pthread_mutex_lock(&h->lock);
        struct hub_chan *c = hub_chan_find_locked(h, user, session);
        if (c && c->cfd >= 0 && c->hello) {
                *ret = c->conn_id;
                r = 0;
        }
        pthread_mutex_unlock(&h->lock);
        return r;
}

int hub_send(struct hub *h, const char *user, const char *session, uint64_t conn, uint16_t type, uint16_t flags,
             uint32_t tag, const void *p1, size_t n1, const void *p2, size_t n2)
{
        struct hub_chan *c;
        int cfd, r;

        pthread_mutex_lock(&h->lock);
        c = hub_chan_find_locked(h, user, session);
        if (!c || c->cfd < 0 || !c->hello || c->conn_id != conn) {
                pthread_mutex_unlock(&h->lock);
                return -ENOTCONN;
        }
        cfd = c->cfd;
        c->refs++; /* reap_dead leaves it alone meanwhile */
        pthread_mutex_unlock(&h->lock);
        r = hub_send_frame(c, cfd, type, flags, tag, p1, n1, p2, n2);
        pthread_mutex_lock(&h->lock);
        c->refs--;
        pthread_mutex_unlock(&h->lock);
        return r;
}
