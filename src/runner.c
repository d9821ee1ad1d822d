/* runner.c — per-session runner sockets, connections and the executions
 * carried over them (see runner.h for the contract, runner_proto.h for the
 * wire format).
 *
 * Locks:
 *   h->lock   the channel list, every channel's fds, connection state,
 *             refs and executions list, and every execution's refs; paired
 *             with h->cond, broadcast when a runner connects.
 *   c->wlock  writes to a channel's connection (held across one frame, with
 *             a deadline; never with h->lock).
 *   x->lock   an execution's state; paired with x->cond.
 * Order: h->lock before x->lock. c->wlock is never held with either.
 *
 * Only the hub thread reads connections, closes fds and frees channels, so
 * an epoll event never points at freed memory: a dropped channel is only
 * marked, and the thread retires it between two epoll batches.
 *
 * Durable executions: after a restart the exec engine tells the hub which
 * (session, tag) it will adopt (h->expect, h->lock). A runner lists what it
 * holds right after its hello (c->jobs, h->lock); on the end of that list
 * the hub forgets every job nobody expects, and runner_exec_adopt() claims
 * the others. Output is acknowledged (RP_ACK) from the thread that waits
 * for the execution, never from the hub thread, once it is persisted. */
#include "sandboxd/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "runner_internal.h"
#include "sandboxd/log.h"
#include "sandboxd/sha256.h"

#define WRITE_DEADLINE_MS 2000
#define MAX_EVENTS 64
#define PING_RETRY_MS 100 /* a ping that could not go now is tried again after this */
#define ACK_EVERY (64 * 1024) /* unacknowledged bytes that wake the waiter to acknowledge them */

/* An execution a reconnected runner still holds, until claimed. */
struct runner_job {
        uint32_t tag;
        struct rp_job r;
};

/* An execution the exec engine will adopt after a restart. */
struct runner_expect {
        char user[65], session[65];
        uint32_t tag;
};

enum ep_kind { EP_LISTEN, EP_CONN };

struct runner_chan;

struct ep_ref {
        struct runner_chan *c;
        enum ep_kind kind;
};

struct runner_chan {
        struct runner_hub *h;
        struct runner_chan *next; /* h->chans */
        int refs;
        bool dead;
        char user[65], session[65];
        char dir[SBX_PATH_MAX];
        int dirfd, lfd, cfd;
        bool hello;
        bool ever_hello;      /* since the last prepare (a new container) */
        bool waited_in_vain;  /* a wait timed out before any runner came */
        int64_t last_rx;      /* monotonic ms of the last frame (heartbeat) */
        int64_t last_ping;
        char version[64];
        uint32_t next_tag;
        uint64_t conn_id; /* which connection: files and services (runner_ops.c) match it */
        struct ep_ref ep_listen, ep_conn;
        unsigned char *inbuf;
        size_t in_len;
        struct runner_exec *execs;
        pthread_mutex_t wlock;
        struct runner_job jobs[RP_MAX_JOBS]; /* listed by the runner after hello, not claimed yet */
        size_t n_jobs;
        bool jobs_complete; /* RP_JOBS_END arrived on this connection */
        bool refused_once;  /* a connection was refused before its hello (since the last prepare) */
};

struct runner_exec {
        struct runner_chan *c;
        struct runner_exec *next; /* c->execs (h->lock) */
        int refs;                 /* h->lock */
        uint32_t tag;
        int cfd; /* the connection it was started on */
        runner_output_fn on_output;
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

struct runner_hub {
        const struct sbx_config *cfg;
        char root[SBX_PATH_MAX];
        char binary[SBX_PATH_MAX];
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct runner_chan *chans;
        int epfd;
        int wake[2];
        bool stop;
        pthread_t thread;
        runner_lost_fn on_lost;
        void *lost_ud;
        struct runner_expect *expect; /* h->lock */
        size_t n_expect;
        uint64_t next_conn_id;
        struct runner_ops *ops; /* files and services (runner_ops.c) */
};

/* ---- helpers ---- */

/* 0, or -ENOMEM (libcrypto could not allocate): never an empty name. */
static int chan_key_hash(const char *user, const char *session, char out[33])
{
        char key[140], hex[65];
        int n = snprintf(key, sizeof(key), "%s:%s", user, session);
        if (sha256_hex(key, (size_t)n, hex) < 0)
                return -ENOMEM;
        memcpy(out, hex, 32);
        out[32] = '\0';
        return 0;
}

static struct runner_chan *chan_find_locked(struct runner_hub *h, const char *user, const char *session)
{
        for (struct runner_chan *c = h->chans; c; c = c->next)
                if (!c->dead && strcmp(c->user, user) == 0 && strcmp(c->session, session) == 0)
                        return c;
        return NULL;
}

static void exec_end(struct runner_exec *x, bool lost, int fail, const char *msg, const struct runner_exit *ex)
{
        pthread_mutex_lock(&x->lock);
        if (!x->ended) {
                x->ended = true;
                x->lost = lost;
                x->fail = fail;
                if (msg)
                        sbx_strlcpy(x->error, msg, sizeof(x->error));
                if (ex)
                        x->exit = *ex;
        }
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

/* Close a channel's connection: every execution on it is lost. Hub thread
 * only (it owns reads and closes). Takes h->lock. */
static void conn_close(struct runner_hub *h, struct runner_chan *c, const char *why)
{
        pthread_mutex_lock(&h->lock);
        if (c->cfd < 0) {
                pthread_mutex_unlock(&h->lock);
                return;
        }
        (void)epoll_ctl(h->epfd, EPOLL_CTL_DEL, c->cfd, NULL);
        /* writers may hold the fd: shut it down now, close it under wlock */
        (void)shutdown(c->cfd, SHUT_RDWR);
        for (struct runner_exec *x = c->execs; x; x = x->next)
                if (x->cfd == c->cfd)
                        exec_end(x, true, -ECONNRESET, "the runner connection was lost", NULL);
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
        runner_ops_closed(h->ops, c->user, c->session, conn_id);
        if (why)
                log_ctx(LOG_LEVEL_DEBUG, c->user, c->session, NULL, "runner connection closed: %s", why);
}

/* A runner that broke the protocol or stopped answering is treated like a
 * dead container (an orderly end of stream is the container's own death,
 * which the monitor sees). Hub thread. */
static void conn_fail(struct runner_hub *h, struct runner_chan *c, const char *cause, const char *why)
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

static int send_frame(struct runner_chan *c, int cfd, uint16_t type, uint16_t flags, uint32_t tag, const void *p1,
                      size_t n1, const void *p2, size_t n2)
{
        struct rp_hdr hdr = {.len = (uint32_t)(n1 + n2), .type = type, .flags = flags, .tag = tag};
        int64_t until = sbx_now_ms() + WRITE_DEADLINE_MS;
        int r;

        if (n1 + n2 > RP_MAX_TO_RUNNER)
                return -E2BIG;
        pthread_mutex_lock(&c->wlock);
        pthread_mutex_lock(&c->h->lock);
        bool same = c->cfd == cfd && cfd >= 0;
        pthread_mutex_unlock(&c->h->lock);
        if (!same)
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

/* A frame without payload (RP_PING, RP_FORGET) from the hub thread, which
 * must never wait on one runner: not for its write lock (a writer may hold
 * it up to WRITE_DEADLINE_MS against a runner that never reads) and not for
 * room in its socket. -EAGAIN when it cannot go now: a ping is due again
 * next heartbeat (silence is judged by last_rx), and a job not forgotten is
 * listed again at the runner's next connect. */
static int send_frame_nowait(struct runner_chan *c, int cfd, uint16_t type, uint32_t tag)
{
        struct rp_hdr hdr = {.len = 0, .type = type, .flags = 0, .tag = tag};
        ssize_t n;
        int r;

        if (pthread_mutex_trylock(&c->wlock) != 0)
                return -EAGAIN;
        pthread_mutex_lock(&c->h->lock);
        bool same = c->cfd == cfd && cfd >= 0;
        pthread_mutex_unlock(&c->h->lock);
        if (!same)
                r = -ECONNRESET;
        else {
                do
                        n = send(cfd, &hdr, sizeof(hdr), MSG_DONTWAIT | MSG_NOSIGNAL);
                while (n < 0 && errno == EINTR);
                if (n == (ssize_t)sizeof(hdr))
                        r = 0;
                else if (n < 0)
                        r = errno == EAGAIN ? -EAGAIN : -errno;
                else {
                        r = -EIO; /* a half-written header: the hub thread closes it */
                        (void)shutdown(cfd, SHUT_RDWR);
                }
        }
        pthread_mutex_unlock(&c->wlock);
        return r;
}

/* ---- frames from the runner (hub thread) ---- */

static struct runner_exec *exec_find_ref(struct runner_hub *h, struct runner_chan *c, uint32_t tag)
{
        struct runner_exec *x;

        pthread_mutex_lock(&h->lock);
        for (x = c->execs; x; x = x->next)
                if (x->tag == tag && x->cfd == c->cfd) {
                        x->refs++;
                        break;
                }
        pthread_mutex_unlock(&h->lock);
        return x;
}

static void exec_unref(struct runner_exec *x)
{
        struct runner_hub *h;
        bool last;

        if (!x)
                return;
        h = x->c->h;
        pthread_mutex_lock(&h->lock);
        last = --x->refs == 0;
        pthread_mutex_unlock(&h->lock);
        if (last) {
                pthread_mutex_destroy(&x->lock);
                pthread_cond_destroy(&x->cond);
                free(x);
        }
}

/* ---- durable executions: what a reconnected runner still holds ---- */

static bool expected_locked(struct runner_hub *h, const char *user, const char *session, uint32_t tag)
{
        for (size_t i = 0; i < h->n_expect; i++)
                if (h->expect[i].tag == tag && strcmp(h->expect[i].user, user) == 0 &&
                    strcmp(h->expect[i].session, session) == 0)
                        return true;
        return false;
}

static void unexpect_locked(struct runner_hub *h, const char *user, const char *session, uint32_t tag)
{
        for (size_t i = 0; i < h->n_expect; i++)
                if (h->expect[i].tag == tag && strcmp(h->expect[i].user, user) == 0 &&
                    strcmp(h->expect[i].session, session) == 0) {
                        h->expect[i] = h->expect[--h->n_expect];
                        return;
                }
}

/* RP_JOB: one execution the runner holds. Hub thread. */
static bool job_listed(struct runner_hub *h, struct runner_chan *c, const struct rp_hdr *hdr, const unsigned char *p)
{
        struct rp_job r;
        bool ok = true;

        if (hdr->len != sizeof(r) || hdr->tag == 0 || hdr->flags != 0)
                return false;
        memcpy(&r, p, sizeof(r));
        if ((r.flags & ~RP_JOB_EXITED) != 0)
                return false;
        for (int k = 0; k < 2; k++)
                if (r.acked[k] > r.produced[k] || r.produced[k] > (UINT64_C(1) << 62))
                        return false;
        pthread_mutex_lock(&h->lock);
        if (c->jobs_complete || c->n_jobs >= RP_MAX_JOBS)
                ok = false;
        for (size_t i = 0; ok && i < c->n_jobs; i++)
                ok = c->jobs[i].tag != hdr->tag;
        if (ok)
                c->jobs[c->n_jobs++] = (struct runner_job){.tag = hdr->tag, .r = r};
        pthread_mutex_unlock(&h->lock);
        return ok;
}

/* RP_JOBS_END: a job nobody will adopt is forgotten (its tree killed if it
 * still runs); the others wait for runner_exec_adopt(). Hub thread. */
static bool jobs_listed(struct runner_hub *h, struct runner_chan *c)
{
        uint32_t forget[RP_MAX_JOBS];
        size_t n = 0;
        int cfd;

        pthread_mutex_lock(&h->lock);
        if (c->jobs_complete) {
                pthread_mutex_unlock(&h->lock);
                return false;
        }
        c->jobs_complete = true;
        cfd = c->cfd;
        for (size_t i = 0; i < c->n_jobs;) {
                if (expected_locked(h, c->user, c->session, c->jobs[i].tag)) {
                        i++;
                        continue;
                }
                forget[n++] = c->jobs[i].tag;
                c->jobs[i] = c->jobs[--c->n_jobs];
        }
        pthread_cond_broadcast(&h->cond);
        pthread_mutex_unlock(&h->lock);
        for (size_t i = 0; i < n; i++)
                (void)send_frame_nowait(c, cfd, RP_FORGET, forget[i]);
        if (n)
                log_ctx(LOG_LEVEL_INFO, c->user, c->session, NULL,
                        "the runner held %zu executions nobody adopts: dropped", n);
        return true;
}

/* Returns false on a protocol error. Every field is checked here. */
static bool handle_frame(struct runner_hub *h, struct runner_chan *c, const struct rp_hdr *hdr,
                         const unsigned char *p)
{
        struct runner_exec *x = NULL;

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
                return job_listed(h, c, hdr, p);
        if (hdr->type == RP_JOBS_END)
                return hdr->len == 0 && jobs_listed(h, c);
        if (hdr->type >= RP_FILE_READ && hdr->type <= RP_SVC_STATE)
                return runner_ops_frame(h->ops, c->user, c->session, c->conn_id, hdr, p);
        if (hdr->tag == 0)
                return false;
        x = exec_find_ref(h, c, hdr->tag);
        if (!x)
                return true; /* an execution we forgot (freed or from before): its bytes go nowhere */
        bool ok = true;
        switch (hdr->type) {
        case RP_STARTED:
                ok = hdr->len == 4;
                break;
        case RP_OUTPUT:
                ok = hdr->len <= RP_CHUNK && (hdr->flags & ~RP_OUT_STDERR) == 0;
                if (ok && hdr->len > 0 && !x->ended) {
                        int k = (hdr->flags & RP_OUT_STDERR) ? 1 : 0;
                        runner_output_fn fn;
                        pthread_mutex_lock(&x->lock);
                        fn = x->on_output; /* NULL once freed: its userdata may be gone */
                        x->in_callback += fn != NULL;
                        pthread_mutex_unlock(&x->lock);
                        if (fn)
                                fn(x->userdata, k, p, hdr->len);
                        pthread_mutex_lock(&x->lock);
                        if (fn && --x->in_callback == 0)
                                pthread_cond_broadcast(&x->cond);
                        x->recv[k] += hdr->len; /* on_output has persisted it: it may be acknowledged */
                        if (x->recv[k] - x->acked[k] >= ACK_EVERY)
                                pthread_cond_broadcast(&x->cond);
                        pthread_mutex_unlock(&x->lock);
                }
                break;
        case RP_STDIN_ACK: {
                uint32_t n;
                ok = hdr->len == 4;
                if (!ok)
                        break;
                memcpy(&n, p, 4);
                pthread_mutex_lock(&x->lock);
                ok = x->stdin_acked + n <= x->stdin_sent;
                if (ok)
                        x->stdin_acked += n;
                pthread_cond_broadcast(&x->cond);
                pthread_mutex_unlock(&x->lock);
                break;
        }
        case RP_EXIT: {
                struct rp_exit e;
                struct runner_exit ex;
                ok = hdr->len == sizeof(e);
                if (!ok)
                        break;
                memcpy(&e, p, sizeof(e));
                ok = e.exit_code >= 0 && e.exit_code <= 255 && e.signal >= 0 && e.signal < 65;
                if (!ok)
                        break;
                ex = (struct runner_exit){.exit_code = e.exit_code,
                                          .signal = e.signal,
                                          .cpu_user_ms = e.utime_us / 1000,
                                          .cpu_system_ms = e.stime_us / 1000,
                                          .max_rss_kb = e.maxrss_kb};
                exec_end(x, false, 0, NULL, &ex);
                break;
        }
        case RP_FAILED: {
                char msg[200];
                uint32_t e;
                size_t n;
                ok = hdr->len >= 4;
                if (!ok)
                        break;
                memcpy(&e, p, 4);
                n = hdr->len - 4 < sizeof(msg) - 1 ? hdr->len - 4 : sizeof(msg) - 1;
                for (size_t i = 0; i < n; i++)
                        msg[i] = p[4 + i] >= 0x20 && p[4 + i] < 0x7f ? (char)p[4 + i] : '?';
                msg[n] = '\0';
                exec_end(x, false, e > 0 && e < 4096 ? -(int)e : -EIO, msg, NULL);
                break;
        }
        default:
                ok = false;
        }
        exec_unref(x);
        return ok;
}

/* Reads at most CONN_READ_ROUNDS buffers per call: the socket is level
 * triggered, so a runner that never pauses is read again on the next
 * epoll_wait, after the other sessions' events, instead of holding the hub. */
#define CONN_READ_ROUNDS 8

static void conn_read(struct runner_hub *h, struct runner_chan *c)
{
        for (int round = 0; round < CONN_READ_ROUNDS; round++) {
                size_t off = 0;
                ssize_t n = recv(c->cfd, c->inbuf + c->in_len, RP_HDR_LEN + RP_MAX_FROM_RUNNER - c->in_len,
                                 MSG_DONTWAIT);
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
                                conn_fail(h, c, "runner_protocol_error", "oversized frame");
                                return;
                        }
                        if (c->in_len - off < RP_HDR_LEN + hdr.len)
                                break;
                        if (!handle_frame(h, c, &hdr, c->inbuf + off + RP_HDR_LEN)) {
                                conn_fail(h, c, "runner_protocol_error", "invalid frame");
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

static void conn_accept(struct runner_hub *h, struct runner_chan *c)
{
        for (;;) {
                int fd = accept4(c->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0)
                        return; /* EAGAIN, or EMFILE: the next event retries */
                pthread_mutex_lock(&h->lock);
                if (c->cfd >= 0) {
                        /* one runner per session: a second connection is someone else */
                        pthread_mutex_unlock(&h->lock);
                        close(fd);
                        continue;
                }
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
                pthread_mutex_unlock(&h->lock);
        }
}

static void chan_free(struct runner_chan *c)
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
static void reap_dead(struct runner_hub *h)
{
        for (;;) {
                struct runner_chan *dead = NULL;
                pthread_mutex_lock(&h->lock);
                for (struct runner_chan **pp = &h->chans; *pp; pp = &(*pp)->next)
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
                for (struct runner_chan **pp = &h->chans; *pp; pp = &(*pp)->next)
                        if (*pp == dead) {
                                *pp = dead->next;
                                break;
                        }
                if (dead->lfd >= 0)
                        (void)epoll_ctl(h->epfd, EPOLL_CTL_DEL, dead->lfd, NULL);
                pthread_mutex_unlock(&h->lock);
                chan_free(dead);
        }
}

/* Ping every connected runner each heartbeat interval; one silent for
 * three intervals is treated like a dead container. Hub thread. */
static void heartbeat(struct runner_hub *h)
{
        int64_t now = sbx_now_ms(), every = h->cfg->runner_heartbeat_ms;

        for (;;) {
                struct runner_chan *late = NULL, *due = NULL;
                int cfd = -1;
                pthread_mutex_lock(&h->lock);
                for (struct runner_chan *c = h->chans; c && !late && !due; c = c->next) {
                        if (c->dead || c->cfd < 0)
                                continue;
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
                        conn_fail(h, late, "runner_unresponsive", "no heartbeat answer");
                else if (!due)
                        return;
                else if (send_frame_nowait(due, cfd, RP_PING, 0) == -EAGAIN) {
                        /* a writer holds it, or its socket is full: try again soon,
                         * so a long write does not cost a busy runner its pings */
                        pthread_mutex_lock(&h->lock);
                        due->last_ping = now - every + PING_RETRY_MS;
                        pthread_mutex_unlock(&h->lock);
                }
        }
}

static void *hub_main(void *ud)
{
        struct runner_hub *h = ud;
        struct epoll_event evs[MAX_EVENTS];

        pthread_setname_np(pthread_self(), "sbx-runner");
        for (;;) {
                int n = epoll_wait(h->epfd, evs, MAX_EVENTS, 250);
                pthread_mutex_lock(&h->lock);
                bool stop = h->stop;
                pthread_mutex_unlock(&h->lock);
                if (stop)
                        break;
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

static void hub_wake(struct runner_hub *h)
{
        if (write(h->wake[1], "w", 1) < 0) {
                /* the pipe is full: the thread is already due to wake */
        }
}

/* ---- public ---- */

int runner_hub_new(const struct sbx_config *cfg, struct runner_hub **ret, struct sbx_error *err)
{
        struct runner_hub *h = calloc(1, sizeof(*h));
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        int r;

        if (!h)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        h->cfg = cfg;
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
        pthread_cond_init(&h->cond, NULL);
        h->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (h->epfd < 0 || pipe2(h->wake, O_CLOEXEC | O_NONBLOCK) < 0 ||
            epoll_ctl(h->epfd, EPOLL_CTL_ADD, h->wake[0], &ev) < 0) {
                r = sbx_error_set(err, -errno, 0, "cannot set up the runner hub: %m");
                goto fail;
        }
        h->ops = runner_ops_new(h);
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
        runner_ops_free(h->ops);
        if (h->epfd >= 0)
                close(h->epfd);
        for (int i = 0; i < 2; i++)
                if (h->wake[i] >= 0)
                        close(h->wake[i]);
        pthread_mutex_destroy(&h->lock);
        pthread_cond_destroy(&h->cond);
        free(h);
        return r;
}

void runner_hub_free(struct runner_hub *h)
{
        if (!h)
                return;
        pthread_mutex_lock(&h->lock);
        h->stop = true;
        pthread_mutex_unlock(&h->lock);
        hub_wake(h);
        pthread_join(h->thread, NULL);
        while (h->chans) {
                struct runner_chan *c = h->chans;
                h->chans = c->next;
                if (c->cfd >= 0)
                        close(c->cfd);
                for (struct runner_exec *x = c->execs; x; x = x->next)
                        x->c = NULL; /* handles outliving the hub must not exist; be safe */
                chan_free(c);
        }
        runner_ops_free(h->ops);
        close(h->epfd);
        close(h->wake[0]);
        close(h->wake[1]);
        pthread_mutex_destroy(&h->lock);
        pthread_cond_destroy(&h->cond);
        free(h->expect);
        free(h);
}

const char *runner_hub_binary(struct runner_hub *h)
{
        struct stat st;

        /* root's own file, nobody else may change it: it runs in every container */
        if (!h || stat(h->binary, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022) ||
            !(st.st_mode & 0001))
                return NULL;
        return h->binary;
}

int runner_hub_prepare(struct runner_hub *h, const char *user, const char *session, char ret_dir[SBX_PATH_MAX],
                       struct sbx_error *err)
{
        _cleanup_close_ int root = -1, dfd = -1, lfd = -1;
        struct runner_chan *c;
        char hash[33], path[SBX_PATH_MAX], proc[64];
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct stat st;

        if (chan_key_hash(user, session, hash) < 0)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (snprintf(path, sizeof(path), "%s/%s", h->root, hash) >= (int)sizeof(path))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "runner directory path too long");
        pthread_mutex_lock(&h->lock);
        c = chan_find_locked(h, user, session);
        if (c) {
                c->waited_in_vain = false; /* a new container: its runner is worth waiting for */
                c->refused_once = false;
                c->ever_hello = c->hello;
        }
        pthread_mutex_unlock(&h->lock);
        if (c) {
                sbx_strlcpy(ret_dir, path, SBX_PATH_MAX);
                return 0;
        }

        root = open(h->root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root < 0)
                return sbx_error_set(err, -errno, 0, "cannot open %s: %m", h->root);
        if (mkdirat(root, hash, 0755) < 0 && errno != EEXIST)
                return sbx_error_set(err, -errno, 0, "cannot create %s: %m", path);
        dfd = openat(root, hash, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0 || fstat(dfd, &st) < 0)
                return sbx_error_set(err, -errno, 0, "cannot open %s: %m", path);
        if ((st.st_uid != 0 && fchown(dfd, 0, 0) < 0) || ((st.st_mode & 07777) != 0755 && fchmod(dfd, 0755) < 0))
                return sbx_error_set(err, -errno, 0, "cannot secure %s: %m", path);
        /* a stale socket from an earlier daemon; only root ever writes here */
        if (unlinkat(dfd, RP_SOCKET_NAME, 0) < 0 && errno != ENOENT)
                return sbx_error_set(err, -errno, 0, "cannot remove the stale socket in %s: %m", path);
        /* bind through the directory fd: no path is re-resolved, and the
         * length limit of sun_path does not depend on data_dir */
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d/" RP_SOCKET_NAME, dfd);
        sbx_strlcpy(sa.sun_path, proc, sizeof(sa.sun_path));
        lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return sbx_error_set(err, -errno, 0, "cannot bind the runner socket in %s: %m", path);
        if (fchmodat(dfd, RP_SOCKET_NAME, 0666, 0) < 0 || listen(lfd, 4) < 0)
                return sbx_error_set(err, -errno, 0, "cannot listen on the runner socket in %s: %m", path);

        c = calloc(1, sizeof(*c));
        if (c)
                c->inbuf = malloc(RP_HDR_LEN + RP_MAX_FROM_RUNNER);
        if (!c || !c->inbuf) {
                free(c);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        c->h = h;
        sbx_strlcpy(c->user, user, sizeof(c->user));
        sbx_strlcpy(c->session, session, sizeof(c->session));
        sbx_strlcpy(c->dir, path, sizeof(c->dir));
        c->cfd = -1;
        c->ep_listen = (struct ep_ref){c, EP_LISTEN};
        c->ep_conn = (struct ep_ref){c, EP_CONN};
        pthread_mutex_init(&c->wlock, NULL);
        pthread_mutex_lock(&h->lock);
        if (chan_find_locked(h, user, session)) {
                /* another thread prepared it meanwhile: ours goes (its socket file is the other's now? no:
                 * both bound the same name; the later bind replaced nothing because we unlinked first) */
                pthread_mutex_unlock(&h->lock);
                chan_free(c);
                sbx_strlcpy(ret_dir, path, SBX_PATH_MAX);
                return 0;
        }
        c->dirfd = TAKE_FD(dfd);
        c->lfd = TAKE_FD(lfd);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->ep_listen};
        (void)epoll_ctl(h->epfd, EPOLL_CTL_ADD, c->lfd, &ev);
        c->next = h->chans;
        h->chans = c;
        pthread_mutex_unlock(&h->lock);
        sbx_strlcpy(ret_dir, path, SBX_PATH_MAX);
        return 0;
}

int runner_hub_adopt(struct runner_hub *h, const char *user, const char *session)
{
        char hash[33], dir[SBX_PATH_MAX];
        _cleanup_close_ int root = -1;
        struct stat st;
        bool known;

        if (!h || !runner_hub_binary(h))
                return -ENOENT;
        pthread_mutex_lock(&h->lock);
        known = chan_find_locked(h, user, session) != NULL;
        pthread_mutex_unlock(&h->lock);
        if (known)
                return 0;
        if (chan_key_hash(user, session, hash) < 0)
                return -ENOMEM;
        root = open(h->root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root < 0 || fstatat(root, hash, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
                return -ENOENT;
        return runner_hub_prepare(h, user, session, dir, NULL);
}

int runner_hub_dir(struct runner_hub *h, const char *user, const char *session, char ret_dir[SBX_PATH_MAX])
{
        struct runner_chan *c;
        int r = -ENOENT;

        if (!h)
                return -ENOENT;
        pthread_mutex_lock(&h->lock);
        c = chan_find_locked(h, user, session);
        if (c) {
                sbx_strlcpy(ret_dir, c->dir, SBX_PATH_MAX);
                r = 0;
        }
        pthread_mutex_unlock(&h->lock);
        return r;
}

void runner_hub_set_lost_handler(struct runner_hub *h, runner_lost_fn fn, void *userdata)
{
        pthread_mutex_lock(&h->lock);
        h->on_lost = fn;
        h->lost_ud = userdata;
        pthread_mutex_unlock(&h->lock);
}

void runner_hub_drop(struct runner_hub *h, const char *user, const char *session)
{
        struct runner_chan *c;
        char hash[33];
        _cleanup_close_ int root = -1;

        if (!h)
                return;
        pthread_mutex_lock(&h->lock);
        c = chan_find_locked(h, user, session);
        if (c)
                c->dead = true;
        pthread_mutex_unlock(&h->lock);
        hub_wake(h);
        if (chan_key_hash(user, session, hash) < 0)
                return;
        root = open(h->root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root >= 0) {
                _cleanup_close_ int dfd = openat(root, hash, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (dfd >= 0) {
                        (void)unlinkat(dfd, RP_SOCKET_NAME, 0);
                        /* the gateway's (gateway_drop may come later) */
                        (void)unlinkat(dfd, RP_EGRESS_SOCKET_NAME, 0);
                        (void)unlinkat(dfd, RP_FWD_SOCKET_NAME, 0);
                }
                (void)unlinkat(root, hash, AT_REMOVEDIR);
        }
}

int runner_hub_rekey(struct runner_hub *h, const struct sbx_config *cfg, const char *from_user,
                     const char *from_session, const char *to_user, const char *to_session, struct sbx_error *err)
{
        char from[33], to[33], root_path[SBX_PATH_MAX];
        _cleanup_close_ int root = -1;
        struct runner_chan *c, *old;
        struct stat st;

        if (chan_key_hash(from_user, from_session, from) < 0 || chan_key_hash(to_user, to_session, to) < 0)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (h)
                sbx_strlcpy(root_path, h->root, sizeof(root_path));
        else if (snprintf(root_path, sizeof(root_path), "%s/runner", cfg->data_dir) >= (int)sizeof(root_path))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "runner directory path too long");
        root = open(root_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root < 0)
                return sbx_error_set(err, -errno, 0, "cannot open %s: %m", root_path);
        if (!h && strcmp(from, to) == 0) { /* the same key: remove the directory */
                _cleanup_close_ int dfd = openat(root, to, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (dfd >= 0)
                        (void)unlinkat(dfd, RP_SOCKET_NAME, 0);
                (void)unlinkat(root, to, AT_REMOVEDIR);
                return 0;
        }
        if (fstatat(root, from, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                if (!S_ISDIR(st.st_mode))
                        return sbx_error_set(err, -ENOTDIR, 0, "%s/%s is not a directory", root_path, from);
                /* the target's stale directory (an earlier container's runner) goes first */
                if (h)
                        runner_hub_drop(h, to_user, to_session);
                else {
                        _cleanup_close_ int dfd = openat(root, to, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (dfd >= 0)
                                (void)unlinkat(dfd, RP_SOCKET_NAME, 0);
                        (void)unlinkat(root, to, AT_REMOVEDIR);
                }
                if (renameat(root, from, root, to) < 0)
                        return sbx_error_set(err, -errno, 0, "cannot rename the runner directory %s to %s: %m", from,
                                             to);
        } else if (errno != ENOENT || fstatat(root, to, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                return sbx_error_set(err, -ENOENT, 0, "no runner directory for %s:%s", from_user, from_session);
        }
        if (!h)
                return 0;
        pthread_mutex_lock(&h->lock);
        old = chan_find_locked(h, to_user, to_session);
        if (old)
                old->dead = true; /* dropped above; reaped by the hub thread */
        c = chan_find_locked(h, from_user, from_session);
        if (c) {
                sbx_strlcpy(c->user, to_user, sizeof(c->user));
                sbx_strlcpy(c->session, to_session, sizeof(c->session));
                snprintf(c->dir, sizeof(c->dir), "%s/%s", h->root, to);
        }
        pthread_mutex_unlock(&h->lock);
        hub_wake(h);
        return 0;
}

bool runner_hub_wait(struct runner_hub *h, const char *user, const char *session, int timeout_ms)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms);
        bool ok = false;

        if (!h)
                return false;
        pthread_mutex_lock(&h->lock);
        for (;;) {
                struct runner_chan *c = chan_find_locked(h, user, session);
                if (!c)
                        break;
                if (c->cfd >= 0 && c->hello) {
                        ok = true;
                        break;
                }
                if (c->waited_in_vain && !c->ever_hello)
                        break; /* this container has no runner: do not make every request wait */
                if (timeout_ms <= 0)
                        break;
                if (pthread_cond_timedwait(&h->cond, &h->lock, &until) == ETIMEDOUT) {
                        c->waited_in_vain = true;
                        break;
                }
        }
        pthread_mutex_unlock(&h->lock);
        return ok;
}

bool runner_hub_version(struct runner_hub *h, const char *user, const char *session, char *ret, size_t size)
{
        bool ok = false;

        if (size)
                ret[0] = '\0';
        if (!h)
                return false;
        pthread_mutex_lock(&h->lock);
        struct runner_chan *c = chan_find_locked(h, user, session);
        if (c && c->cfd >= 0 && c->hello) {
                sbx_strlcpy(ret, c->version, size);
                ok = true;
        }
        pthread_mutex_unlock(&h->lock);
        return ok;
}

static bool tag_in_use_locked(struct runner_hub *h, struct runner_chan *c, uint32_t tag)
{
        for (struct runner_exec *x = c->execs; x; x = x->next)
                if (x->tag == tag)
                        return true;
        for (size_t i = 0; i < c->n_jobs; i++)
                if (c->jobs[i].tag == tag)
                        return true;
        return expected_locked(h, c->user, c->session, tag);
}

/* The RP_EXEC payload; malloc'd. */
static int build_exec_payload(const struct runner_exec_spec *spec, char **ret, size_t *ret_len)
{
        struct rp_exec hdr = {0};
        size_t len = sizeof(hdr), argc = 0, envc = 0;
        char *buf, *p;

        while (spec->argv[argc])
                argc++;
        while (spec->env && spec->env[envc])
                envc++;
        if (argc == 0 || argc > RP_MAX_ARGS || envc > RP_MAX_ARGS || spec->code_len > RP_MAX_TO_RUNNER)
                return -E2BIG;
        len += strlen(spec->workdir) + 1 + strlen(spec->code_path ? spec->code_path : "") + 1 + spec->code_len;
        for (size_t i = 0; i < argc; i++)
                len += strlen(spec->argv[i]) + 1;
        for (size_t i = 0; i < envc; i++)
                len += strlen(spec->env[i]) + 1;
        if (len > RP_MAX_TO_RUNNER)
                return -E2BIG;
        buf = malloc(len);
        if (!buf)
                return -ENOMEM;
        hdr.argc = (uint32_t)argc;
        hdr.envc = (uint32_t)envc;
        hdr.code_len = (uint32_t)spec->code_len;
        if (spec->tty) {
                if (spec->rows < 1 || spec->rows > RP_TTY_MAX_ROWS || spec->cols < 1 || spec->cols > RP_TTY_MAX_COLS) {
                        free(buf);
                        return -EINVAL;
                }
                hdr.winsize = (uint32_t)spec->rows << 16 | (uint32_t)spec->cols;
        }
        memcpy(buf, &hdr, sizeof(hdr));
        p = buf + sizeof(hdr);
        p = stpcpy(p, spec->workdir) + 1;
        p = stpcpy(p, spec->code_path ? spec->code_path : "") + 1;
        for (size_t i = 0; i < argc; i++)
                p = stpcpy(p, spec->argv[i]) + 1;
        for (size_t i = 0; i < envc; i++)
                p = stpcpy(p, spec->env[i]) + 1;
        if (spec->code_len)
                memcpy(p, spec->code, spec->code_len);
        *ret = buf;
        *ret_len = len;
        return 0;
}

int runner_exec_start(struct runner_hub *h, const char *user, const char *session,
                      const struct runner_exec_spec *spec, runner_output_fn on_output, void *userdata,
                      struct runner_exec **ret, struct sbx_error *err)
{
        _cleanup_free_ char *payload = NULL;
        struct runner_exec *x;
        struct runner_chan *c;
        size_t len;
        int r;

        if (!h)
                return sbx_error_set(err, -ENOTCONN, 0, "no runner");
        r = build_exec_payload(spec, &payload, &len);
        if (r == -EINVAL)
                return sbx_error_set(err, r, 0, "the terminal size must be 1..%d rows and 1..%d columns",
                                     RP_TTY_MAX_ROWS, RP_TTY_MAX_COLS);
        if (r < 0)
                return sbx_error_set(err, r, 0, "the request does not fit a runner frame");
        x = calloc(1, sizeof(*x));
        if (!x)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        pthread_mutex_init(&x->lock, NULL);
        pthread_cond_init(&x->cond, NULL);
        x->on_output = on_output;
        x->userdata = userdata;
        x->refs = 1;

        pthread_mutex_lock(&h->lock);
        c = chan_find_locked(h, user, session);
        if (!c || c->cfd < 0 || !c->hello) {
                pthread_mutex_unlock(&h->lock);
                pthread_mutex_destroy(&x->lock);
                pthread_cond_destroy(&x->cond);
                free(x);
                return sbx_error_set(err, -ENOTCONN, 0, "the session's runner is not connected");
        }
        x->c = c;
        x->cfd = c->cfd;
        do /* never a tag the runner may still hold from an earlier daemon */
                if (++c->next_tag == 0)
                        c->next_tag = 1;
        while (tag_in_use_locked(h, c, c->next_tag));
        x->tag = c->next_tag;
        x->next = c->execs;
        c->execs = x;
        c->refs++;
        pthread_mutex_unlock(&h->lock);

        r = send_frame(c, x->cfd, RP_EXEC, (spec->stdin_pipe ? RP_EXEC_STDIN : 0) | (spec->tty ? RP_EXEC_TTY : 0),
                       x->tag, payload, len, NULL, 0);
        if (r < 0) {
                runner_exec_free(x);
                return sbx_error_set(err, -ENOTCONN, 0, "cannot send the execution to the runner: %s",
                                     strerror(-r));
        }
        *ret = x;
        return 0;
}

/* Acknowledge what on_output has persisted. Caller holds x->lock; drops it
 * around the write. */
static void exec_ack_locked(struct runner_exec *x)
{
        struct rp_offsets o = {{x->recv[0], x->recv[1]}};

        x->acked[0] = x->recv[0];
        x->acked[1] = x->recv[1];
        pthread_mutex_unlock(&x->lock);
        (void)send_frame(x->c, x->cfd, RP_ACK, 0, x->tag, &o, sizeof(o), NULL, 0);
        pthread_mutex_lock(&x->lock);
}

int runner_exec_wait(struct runner_exec *x, int timeout_ms, struct runner_exit *ret, struct sbx_error *err)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms);
        int r;

        pthread_mutex_lock(&x->lock);
        while (!x->ended) {
                if (x->recv[0] - x->acked[0] >= ACK_EVERY || x->recv[1] - x->acked[1] >= ACK_EVERY) {
                        exec_ack_locked(x); /* the runner frees it and reads on */
                        continue;
                }
                if (timeout_ms <= 0 || pthread_cond_timedwait(&x->cond, &x->lock, &until) == ETIMEDOUT)
                        break;
        }
        /* an end needs no acknowledgement: RP_FORGET frees everything */
        if (!x->ended && (x->recv[0] != x->acked[0] || x->recv[1] != x->acked[1]))
                exec_ack_locked(x);
        if (!x->ended)
                r = -ETIMEDOUT;
        else if (x->lost)
                r = sbx_error_set(err, -ECONNRESET, 0, "%s", x->error);
        else if (x->fail < 0)
                r = sbx_error_set(err, x->fail, 0, "the runner could not start it: %s", x->error);
        else {
                *ret = x->exit;
                r = 0;
        }
        pthread_mutex_unlock(&x->lock);
        return r;
}

ssize_t runner_exec_write_stdin(struct runner_exec *x, const void *data, size_t len)
{
        size_t room;
        int r;

        pthread_mutex_lock(&x->lock);
        if (x->ended) {
                pthread_mutex_unlock(&x->lock);
                return -EPIPE;
        }
        room = RP_STDIN_WINDOW - (size_t)(x->stdin_sent - x->stdin_acked);
        if (len > room)
                len = room;
        if (len > RP_CHUNK)
                len = RP_CHUNK;
        x->stdin_sent += len;
        pthread_mutex_unlock(&x->lock);
        if (len == 0)
                return 0;
        r = send_frame(x->c, x->cfd, RP_STDIN, 0, x->tag, data, len, NULL, 0);
        return r < 0 ? r : (ssize_t)len;
}

int runner_exec_close_stdin(struct runner_exec *x)
{
        return send_frame(x->c, x->cfd, RP_STDIN_EOF, 0, x->tag, NULL, 0, NULL, 0);
}

int runner_exec_signal(struct runner_exec *x, int sig)
{
        uint32_t s = (uint32_t)sig;
        return send_frame(x->c, x->cfd, RP_SIGNAL, 0, x->tag, &s, sizeof(s), NULL, 0);
}

void runner_exec_free(struct runner_exec *x)
{
        struct runner_hub *h;
        struct runner_chan *c;

        if (!x)
                return;
        c = x->c;
        h = c->h;
        pthread_mutex_lock(&h->lock);
        for (struct runner_exec **pp = &c->execs; *pp; pp = &(*pp)->next)
                if (*pp == x) {
                        *pp = x->next;
                        break;
                }
        c->refs--;
        pthread_mutex_unlock(&h->lock);
        /* an execution left running (the daemon stops) still sends output:
         * no callback may run once the caller frees its userdata */
        pthread_mutex_lock(&x->lock);
        x->on_output = NULL;
        while (x->in_callback > 0)
                pthread_cond_wait(&x->cond, &x->lock);
        pthread_mutex_unlock(&x->lock);
        exec_unref(x);
}

/* ---- durable executions and terminals ---- */

void runner_hub_expect(struct runner_hub *h, const char *user, const char *session, uint32_t tag)
{
        struct runner_expect *p;

        if (!h || tag == 0)
                return;
        pthread_mutex_lock(&h->lock);
        if (!expected_locked(h, user, session, tag)) {
                p = realloc(h->expect, (h->n_expect + 1) * sizeof(*p));
                if (p) {
                        h->expect = p;
                        p = &h->expect[h->n_expect++];
                        memset(p, 0, sizeof(*p));
                        sbx_strlcpy(p->user, user, sizeof(p->user));
                        sbx_strlcpy(p->session, session, sizeof(p->session));
                        p->tag = tag;
                }
        }
        pthread_mutex_unlock(&h->lock);
}

void runner_hub_unexpect(struct runner_hub *h, const char *user, const char *session, uint32_t tag)
{
        if (!h)
                return;
        pthread_mutex_lock(&h->lock);
        unexpect_locked(h, user, session, tag);
        pthread_mutex_unlock(&h->lock);
}

int runner_exec_adopt(struct runner_hub *h, const char *user, const char *session, uint32_t tag,
                      const uint64_t have[2], runner_output_fn on_output, void *userdata, int timeout_ms,
                      struct runner_exec **ret, uint64_t ret_start[2], struct sbx_error *err)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms);
        struct rp_offsets o = {{have[0], have[1]}};
        struct runner_chan *c = NULL;
        struct runner_exec *x;
        struct rp_job job;
        size_t i;
        int r;

        if (!h || runner_hub_adopt(h, user, session) < 0)
                return sbx_error_set(err, -ENOENT, 0, "the session has no runner");
        pthread_mutex_lock(&h->lock);
        for (;;) {
                c = chan_find_locked(h, user, session);
                if (c && c->cfd >= 0 && c->hello && c->jobs_complete)
                        break;
                c = NULL;
                if (timeout_ms <= 0 || pthread_cond_timedwait(&h->cond, &h->lock, &until) == ETIMEDOUT)
                        break;
        }
        if (!c) {
                pthread_mutex_unlock(&h->lock);
                return sbx_error_set(err, -ETIMEDOUT, 0, "the session's runner has not come back");
        }
        for (i = 0; i < c->n_jobs && c->jobs[i].tag != tag; i++)
                ;
        if (i == c->n_jobs) {
                unexpect_locked(h, user, session, tag);
                pthread_mutex_unlock(&h->lock);
                return sbx_error_set(err, -ENOENT, 0, "the runner no longer holds it");
        }
        x = calloc(1, sizeof(*x));
        if (!x) {
                pthread_mutex_unlock(&h->lock);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        job = c->jobs[i].r;
        c->jobs[i] = c->jobs[--c->n_jobs];
        unexpect_locked(h, user, session, tag);
        pthread_mutex_init(&x->lock, NULL);
        pthread_cond_init(&x->cond, NULL);
        x->on_output = on_output;
        x->userdata = userdata;
        x->refs = 1;
        x->c = c;
        x->cfd = c->cfd;
        x->tag = tag;
        for (int k = 0; k < 2; k++) {
                /* the runner computes the same: it kept [acked, produced) */
                uint64_t at = have[k] < job.acked[k] ? job.acked[k] : have[k];
                x->recv[k] = x->acked[k] = at > job.produced[k] ? job.produced[k] : at;
        }
        x->next = c->execs;
        c->execs = x;
        c->refs++;
        pthread_mutex_unlock(&h->lock);

        r = send_frame(c, x->cfd, RP_RESUME, 0, tag, &o, sizeof(o), NULL, 0);
        if (r < 0) {
                runner_exec_free(x);
                return sbx_error_set(err, -ECONNRESET, 0, "the runner connection was lost");
        }
        ret_start[0] = x->recv[0];
        ret_start[1] = x->recv[1];
        *ret = x;
        return 0;
}

uint32_t runner_exec_tag(const struct runner_exec *x) { return x ? x->tag : 0; }

int runner_exec_forget(struct runner_exec *x)
{
        return send_frame(x->c, x->cfd, RP_FORGET, 0, x->tag, NULL, 0, NULL, 0);
}

int runner_exec_resize(struct runner_exec *x, int rows, int cols)
{
        struct rp_winsize w = {.rows = (uint16_t)rows, .cols = (uint16_t)cols};

        if (rows < 1 || rows > RP_TTY_MAX_ROWS || cols < 1 || cols > RP_TTY_MAX_COLS)
                return -EINVAL;
        return send_frame(x->c, x->cfd, RP_RESIZE, 0, x->tag, &w, sizeof(w), NULL, 0);
}

/* ---- for runner_ops.c ---- */

struct runner_ops *runner_hub_ops(struct runner_hub *h) { return h ? h->ops : NULL; }

int runner_hub_conn(struct runner_hub *h, const char *user, const char *session, uint64_t *ret)
{
        int r = -ENOTCONN;

        if (!h)
                return r;
        pthread_mutex_lock(&h->lock);
        struct runner_chan *c = chan_find_locked(h, user, session);
        if (c && c->cfd >= 0 && c->hello) {
                *ret = c->conn_id;
                r = 0;
        }
        pthread_mutex_unlock(&h->lock);
        return r;
}

int runner_hub_send(struct runner_hub *h, const char *user, const char *session, uint64_t conn, uint16_t type,
                    uint16_t flags, uint32_t tag, const void *p1, size_t n1, const void *p2, size_t n2)
{
        struct runner_chan *c;
        int cfd, r;

        pthread_mutex_lock(&h->lock);
        c = chan_find_locked(h, user, session);
        if (!c || c->cfd < 0 || !c->hello || c->conn_id != conn) {
                pthread_mutex_unlock(&h->lock);
                return -ENOTCONN;
        }
        cfd = c->cfd;
        c->refs++; /* reap_dead leaves it alone meanwhile */
        pthread_mutex_unlock(&h->lock);
        r = send_frame(c, cfd, type, flags, tag, p1, n1, p2, n2);
        pthread_mutex_lock(&h->lock);
        c->refs--;
        pthread_mutex_unlock(&h->lock);
        return r;
}
