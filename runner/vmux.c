/* vmux.c — streams over one virtio-serial port (vmux.h has the protocol).
 *
 * One thread per vmux with one poll loop over the channel, a wake pipe and
 * every stream's local socket. Only the loop touches the streams and the
 * buffers; m->lock guards what vmux_open (another thread, the guest's) and
 * vmux_stop share with it: the opens queued, synced, stop and ended.
 *
 * Buffers are bounded: a stream holds at most VMUX_WINDOW bytes the peer
 * sent and its socket has not taken (the peer may not send more until it
 * is credited); the channel's output queue takes data only while it is
 * under COUT_DATA, control frames beside it (each stream has at most one
 * EOF and one CLOSE; credits are summed and sent when there is room). */
#include "vmux.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HDR ((size_t)sizeof(struct vmux_hdr))
#define COUT_DATA (256 * 1024) /* queued for the channel before streams stop being read */
#define COUT_CAP (COUT_DATA + HDR + VMUX_DATA_MAX + VMUX_BREAK + 64 + VMUX_STREAMS_MAX * 2 * HDR)
#define IN_CAP (HDR + VMUX_DATA_MAX)
#define CREDIT_AT (VMUX_WINDOW / 4)
#define PORT_RECHECK_MS 100 /* the guest: how often a port without a host is looked at again */

_Static_assert(sizeof(struct vmux_hdr) == 12, "the header is 12 bytes on the wire");

struct stream {
        uint32_t id;
        uint16_t kind;
        int fd;
        char *out; /* from the peer, for fd (VMUX_WINDOW) */
        size_t out_len;
        uint32_t credit;   /* bytes we may still send */
        uint32_t rwin;     /* bytes the peer may still send (what it was credited) */
        uint32_t consumed; /* written to fd, not yet credited back */
        bool local_eof;    /* fd said EOF (VMUX_EOF queued) */
        bool peer_eof;     /* the peer's VMUX_EOF */
        bool shut;         /* shutdown(fd, SHUT_WR) done */
};

struct pend {
        uint32_t id;
        uint16_t kind;
        int fd;
};

struct vmux {
        int chan;
        bool host;
        vmux_opened_fn opened;
        vmux_dropped_fn dropped_fn;
        void *ud;
        pthread_t thread;
        int wake[2];
        /* m->lock */
        pthread_mutex_t lock;
        bool stop, ended, synced;
        struct pend pend[VMUX_STREAMS_MAX];
        size_t n_pend, n_live; /* n_live: streams the loop holds */
        size_t n_conn;         /* of those, connections: all but the forward control stream */
        uint32_t fwd_ctl;      /* the live forward control stream's id (0: none) */
        /* the loop's: the guest's connections dropped since its last sync (its VMUX_DROPPED);
         * the host's: whether this sync's VMUX_DROPPED came */
        uint32_t dropped;
        bool dropped_seen;
        uint32_t next_id;
        /* the loop's */
        bool scanning, connected;
        uint64_t nonce;
        size_t scanned;
        unsigned char in[IN_CAP];
        size_t in_len;
        unsigned char *cout;
        size_t cout_len, cout_off;
        struct stream *st[VMUX_STREAMS_MAX];
        size_t n_st;
        uint32_t last_id;
};

/* ---- the channel's output ---- */

static void cout_frame(struct vmux *m, uint16_t type, uint16_t kind, uint32_t id, const void *p, size_t n)
{
        struct vmux_hdr h = {.len = (uint32_t)n, .type = type, .kind = kind, .id = id};

        if (m->cout_len + HDR + n > COUT_CAP)
                return; /* cannot happen within the bounds above */
        memcpy(m->cout + m->cout_len, &h, HDR);
        if (n)
                memcpy(m->cout + m->cout_len + HDR, p, n);
        m->cout_len += HDR + n;
}

static bool synced(struct vmux *m)
{
        pthread_mutex_lock(&m->lock);
        bool s = m->synced;
        pthread_mutex_unlock(&m->lock);
        return s;
}

static void set_synced(struct vmux *m, bool on)
{
        pthread_mutex_lock(&m->lock);
        m->synced = on;
        pthread_mutex_unlock(&m->lock);
}

/* ---- streams ---- */

static struct stream *find(struct vmux *m, uint32_t id)
{
        for (size_t i = 0; i < m->n_st; i++)
                if (m->st[i]->id == id)
                        return m->st[i];
        return NULL;
}

static void stream_free(struct vmux *m, struct stream *s, bool tell)
{
        if (tell)
                cout_frame(m, VMUX_CLOSE, 0, s->id, NULL, 0);
        for (size_t i = 0; i < m->n_st; i++)
                if (m->st[i] == s) {
                        m->st[i] = m->st[--m->n_st];
                        break;
                }
        close(s->fd);
        pthread_mutex_lock(&m->lock);
        m->n_live = m->n_st;
        if (m->fwd_ctl == s->id)
                m->fwd_ctl = 0;
        else
                m->n_conn--;
        pthread_mutex_unlock(&m->lock);
        free(s->out);
        free(s);
}

static struct stream *stream_new(struct vmux *m, uint32_t id, uint16_t kind, int fd)
{
        struct stream *s = m->n_st < VMUX_STREAMS_MAX ? calloc(1, sizeof(*s)) : NULL;

        if (s)
                s->out = malloc(VMUX_WINDOW);
        if (!s || !s->out) {
                if (s)
                        free(s);
                close(fd);
                return NULL;
        }
        s->id = id;
        s->kind = kind;
        s->fd = fd;
        s->credit = s->rwin = VMUX_WINDOW;
        m->st[m->n_st++] = s;
        pthread_mutex_lock(&m->lock);
        m->n_live = m->n_st;
        /* the runner dials its forward control connection before any data one (it opens those
         * only when the control asks), so a forward stream while none is live is the control */
        if (kind == VMUX_KIND_FWD && m->fwd_ctl == 0)
                m->fwd_ctl = id;
        else
                m->n_conn++;
        pthread_mutex_unlock(&m->lock);
        return s;
}

/* Every stream goes, the opens queued too (an earlier connection's). */
static void drop_all(struct vmux *m)
{
        if (!m->host) {
                pthread_mutex_lock(&m->lock);
                if (m->dropped < UINT32_MAX - VMUX_STREAMS_MAX)
                        m->dropped += (uint32_t)m->n_conn;
                pthread_mutex_unlock(&m->lock);
        }
        while (m->n_st)
                stream_free(m, m->st[0], false);
        pthread_mutex_lock(&m->lock);
        for (size_t i = 0; i < m->n_pend; i++)
                close(m->pend[i].fd);
        m->n_pend = 0;
        pthread_mutex_unlock(&m->lock);
}

/* Both ways done: the stream goes without a word (the peer ends it the same way). */
static void maybe_done(struct vmux *m, struct stream *s)
{
        if (s->local_eof && s->peer_eof && s->shut && !s->out_len)
                stream_free(m, s, false);
}

/* ---- sync ---- */

/* The host: everything dropped, then the break and a new nonce. */
static void host_resync(struct vmux *m)
{
        drop_all(m);
        set_synced(m, false);
        m->scanning = true;
        m->scanned = 0;
        m->in_len = 0;
        m->last_id = 0;
        m->dropped_seen = false;
        m->cout_len = m->cout_off = 0; /* a frame cut short here is ended by the break */
        if (getrandom(&m->nonce, sizeof(m->nonce), 0) != (ssize_t)sizeof(m->nonce))
                m->nonce ^= (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull + (uintptr_t)m;
        memset(m->cout, 0xff, VMUX_BREAK);
        m->cout_len = VMUX_BREAK;
        cout_frame(m, VMUX_SYNC, 0, 0, &m->nonce, sizeof(m->nonce));
}

/* The guest: out of step (no host, or a frame it cannot take): drop
 * everything and wait for the host's VMUX_SYNC, which may follow in what was
 * read already (keep_input) or come on the next connection. */
static void guest_lost(struct vmux *m, bool keep_input)
{
        drop_all(m);
        set_synced(m, false);
        m->scanning = true;
        if (!keep_input)
                m->in_len = 0;
        m->cout_len = m->cout_off = 0;
}

static void protocol_error(struct vmux *m)
{
        if (m->host)
                host_resync(m); /* what the guest sent so far is of no use */
        else
                guest_lost(m, true);
}

/* ---- frames from the peer ---- */

/* One whole frame (header h, payload p). false: a protocol error. */
static bool frame(struct vmux *m, const struct vmux_hdr *h, const unsigned char *p)
{
        struct stream *s = h->type == VMUX_SYNC || h->type == VMUX_SYNC_ACK ? NULL : find(m, h->id);

        if (h->kind != 0 && h->type != VMUX_OPEN)
                return false;
        switch (h->type) {
        case VMUX_SYNC:
                if (m->host || h->len != sizeof(m->nonce) || h->id != 0)
                        return false;
                drop_all(m);
                m->cout_len = m->cout_off = 0;
                memcpy(&m->nonce, p, sizeof(m->nonce));
                cout_frame(m, VMUX_SYNC_ACK, 0, 0, &m->nonce, sizeof(m->nonce));
                if (m->dropped) {
                        /* what the host before (or the guest this memory came from) had open */
                        cout_frame(m, VMUX_DROPPED, 0, 0, &m->dropped, sizeof(m->dropped));
                        m->dropped = 0;
                }
                set_synced(m, true);
                return true;
        case VMUX_DROPPED: {
                uint32_t n;
                if (!m->host || h->len != sizeof(n) || h->id != 0 || m->dropped_seen)
                        return false;
                memcpy(&n, p, sizeof(n));
                m->dropped_seen = true;
                if (m->dropped_fn && n > 0)
                        m->dropped_fn(m->ud, n);
                return true;
        }
        case VMUX_OPEN: {
                int sv[2];
                if (!m->host || h->len != 0 || (h->kind != VMUX_KIND_EGRESS && h->kind != VMUX_KIND_FWD) ||
                    h->id <= m->last_id)
                        return false;
                m->last_id = h->id;
                if (m->n_st >= VMUX_STREAMS_MAX ||
                    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0) {
                        cout_frame(m, VMUX_CLOSE, 0, h->id, NULL, 0); /* refused: the guest's client is closed */
                        return true;
                }
                if (!stream_new(m, h->id, h->kind, sv[0])) {
                        close(sv[1]);
                        cout_frame(m, VMUX_CLOSE, 0, h->id, NULL, 0);
                        return true;
                }
                m->opened(m->ud, h->kind, sv[1]); /* takes it */
                return true;
        }
        case VMUX_DATA:
                if (h->len == 0)
                        return false;
                if (!s)
                        return true; /* a stream this end closed: its last bytes */
                if (s->peer_eof || h->len > s->rwin || s->out_len + h->len > VMUX_WINDOW)
                        return false; /* past the window it was given */
                s->rwin -= h->len;
                memcpy(s->out + s->out_len, p, h->len);
                s->out_len += h->len;
                return true;
        case VMUX_CREDIT: {
                uint32_t v;
                if (h->len != sizeof(v))
                        return false;
                memcpy(&v, p, sizeof(v));
                if (!s)
                        return true;
                if (v == 0 || (uint64_t)s->credit + v > VMUX_WINDOW)
                        return false;
                s->credit += v;
                return true;
        }
        case VMUX_EOF:
                if (h->len != 0)
                        return false;
                if (!s)
                        return true;
                if (s->peer_eof)
                        return false;
                s->peer_eof = true;
                if (!s->out_len && !s->shut) {
                        shutdown(s->fd, SHUT_WR);
                        s->shut = true;
                }
                maybe_done(m, s);
                return true;
        case VMUX_CLOSE:
                if (h->len != 0)
                        return false;
                if (s)
                        stream_free(m, s, false);
                return true;
        default:
                return false;
        }
}

/* What the sync pattern is: the host waits for VMUX_SYNC_ACK with its nonce (header and
 * nonce), the guest for a VMUX_SYNC header (the frame parser then takes the nonce). */
static size_t sync_pattern(struct vmux *m, unsigned char pat[HDR + 8])
{
        struct vmux_hdr h = {.len = 8, .type = m->host ? VMUX_SYNC_ACK : VMUX_SYNC};

        memcpy(pat, &h, HDR);
        if (!m->host)
                return HDR;
        memcpy(pat + HDR, &m->nonce, 8);
        return HDR + 8;
}

static void consume(struct vmux *m, size_t n)
{
        memmove(m->in, m->in + n, m->in_len - n);
        m->in_len -= n;
}

/* Take what m->in holds. */
static void parse(struct vmux *m)
{
        for (;;) {
                if (m->scanning) {
                        unsigned char pat[HDR + 8];
                        size_t pl = sync_pattern(m, pat), k;
                        bool found = false;

                        for (k = 0; k + pl <= m->in_len; k++)
                                if (memcmp(m->in + k, pat, pl) == 0) {
                                        found = true;
                                        break;
                                }
                        if (!found) {
                                size_t drop = m->in_len >= pl ? m->in_len - (pl - 1) : 0;
                                consume(m, drop);
                                m->scanned += drop;
                                if (m->host && m->scanned > VMUX_SCAN_MAX)
                                        host_resync(m); /* never answered: start again */
                                return;
                        }
                        consume(m, k);
                        m->scanning = false;
                        if (m->host) {
                                consume(m, pl);
                                set_synced(m, true);
                        }
                        continue;
                }
                struct vmux_hdr h;
                if (m->in_len < HDR)
                        return;
                memcpy(&h, m->in, HDR);
                if (h.len > VMUX_DATA_MAX) {
                        protocol_error(m);
                        continue;
                }
                if (m->in_len < HDR + h.len)
                        return;
                if (!frame(m, &h, m->in + HDR)) {
                        protocol_error(m);
                        continue;
                }
                consume(m, HDR + h.len);
        }
}

/* ---- the loop ---- */

static ssize_t chan_write(struct vmux *m, const void *p, size_t n)
{
        return m->host ? send(m->chan, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : write(m->chan, p, n);
}

/* false: the channel is gone (host: the VM ended; guest: the host went). */
static bool chan_flush(struct vmux *m)
{
        while (m->cout_off < m->cout_len) {
                ssize_t w = chan_write(m, m->cout + m->cout_off, m->cout_len - m->cout_off);
                if (w > 0) {
                        m->cout_off += (size_t)w;
                        continue;
                }
                if (w < 0 && (errno == EAGAIN || errno == EINTR))
                        break;
                return false;
        }
        if (m->cout_off == m->cout_len)
                m->cout_off = m->cout_len = 0;
        else if (m->cout_off >= COUT_DATA / 4) { /* what is sent goes, so new data finds room (copied at most 4x) */
                memmove(m->cout, m->cout + m->cout_off, m->cout_len - m->cout_off);
                m->cout_len -= m->cout_off;
                m->cout_off = 0;
        }
        return true;
}

/* false: the channel is gone. */
static bool chan_read(struct vmux *m)
{
        for (int rounds = 0; rounds < 64; rounds++) {
                ssize_t n = read(m->chan, m->in + m->in_len, IN_CAP - m->in_len);
                if (n > 0) {
                        m->in_len += (size_t)n;
                        parse(m);
                        continue;
                }
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return true;
                return false;
        }
        return true;
}

static bool can_read(struct vmux *m, const struct stream *s)
{
        return synced(m) && !s->local_eof && s->credit > 0 && m->cout_len < COUT_DATA;
}

static void stream_read(struct vmux *m, struct stream *s)
{
        while (can_read(m, s)) {
                size_t want = s->credit < VMUX_DATA_MAX ? s->credit : VMUX_DATA_MAX;
                ssize_t n = recv(s->fd, m->cout + m->cout_len + HDR, want, MSG_DONTWAIT);
                if (n > 0) {
                        struct vmux_hdr h = {.len = (uint32_t)n, .type = VMUX_DATA, .id = s->id};
                        memcpy(m->cout + m->cout_len, &h, HDR);
                        m->cout_len += HDR + (size_t)n;
                        s->credit -= (uint32_t)n;
                        continue;
                }
                if (n == 0) {
                        s->local_eof = true;
                        cout_frame(m, VMUX_EOF, 0, s->id, NULL, 0);
                        maybe_done(m, s);
                        return;
                }
                if (errno != EAGAIN && errno != EINTR)
                        stream_free(m, s, true);
                return;
        }
}

static void stream_write(struct vmux *m, struct stream *s)
{
        while (s->out_len) {
                ssize_t w = send(s->fd, s->out, s->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w > 0) {
                        memmove(s->out, s->out + w, s->out_len - (size_t)w);
                        s->out_len -= (size_t)w;
                        s->consumed += (uint32_t)w;
                        continue;
                }
                if (w < 0 && (errno == EAGAIN || errno == EINTR))
                        return;
                stream_free(m, s, true); /* its socket is gone */
                return;
        }
        if (s->peer_eof && !s->shut) {
                shutdown(s->fd, SHUT_WR);
                s->shut = true;
        }
        maybe_done(m, s);
}

/* Credits summed since the last, when worth a frame and the channel has room. */
static void credits(struct vmux *m)
{
        for (size_t i = 0; i < m->n_st && m->cout_len < COUT_DATA; i++) {
                struct stream *s = m->st[i];
                if (s->consumed && (s->consumed >= CREDIT_AT || !s->out_len) && !s->peer_eof) {
                        cout_frame(m, VMUX_CREDIT, 0, s->id, &s->consumed, sizeof(s->consumed));
                        s->rwin += s->consumed;
                        s->consumed = 0;
                }
        }
}

/* The guest: the opens vmux_open queued, now on the channel. */
static void take_opens(struct vmux *m)
{
        struct pend p[VMUX_STREAMS_MAX];
        size_t n;

        pthread_mutex_lock(&m->lock);
        n = m->n_pend;
        memcpy(p, m->pend, n * sizeof(p[0]));
        m->n_pend = 0;
        pthread_mutex_unlock(&m->lock);
        for (size_t i = 0; i < n; i++) {
                if (!synced(m) || !stream_new(m, p[i].id, p[i].kind, p[i].fd)) {
                        if (!synced(m))
                                close(p[i].fd);
                        continue;
                }
                cout_frame(m, VMUX_OPEN, p[i].kind, p[i].id, NULL, 0);
        }
}

/* The guest's port: whether a host is on the other side (no POLLHUP). */
static bool port_connected(int fd)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        return poll(&p, 1, 0) >= 0 && !(p.revents & POLLHUP);
}

static void *loop(void *ud)
{
        struct vmux *m = ud;
        sigset_t all;
        struct pollfd *pfd = calloc(2 + VMUX_STREAMS_MAX, sizeof(*pfd));
        struct stream **who = calloc(VMUX_STREAMS_MAX, sizeof(*who));

        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, NULL);
        if (m->host)
                host_resync(m);
        else
                guest_lost(m, false);
        for (;;) {
                nfds_t n = 0, ns;
                int timeout = -1;

                pthread_mutex_lock(&m->lock);
                bool stop = m->stop;
                pthread_mutex_unlock(&m->lock);
                if (stop || !pfd || !who)
                        break;
                if (!m->host && !m->connected) {
                        m->connected = port_connected(m->chan);
                        if (!m->connected)
                                timeout = PORT_RECHECK_MS;
                }
                if (!m->host)
                        take_opens(m);
                credits(m);
                pfd[n++] = (struct pollfd){.fd = m->wake[0], .events = POLLIN};
                pfd[n++] = (struct pollfd){.fd = m->host || m->connected ? m->chan : -1,
                                           .events = POLLIN | (m->cout_len > m->cout_off ? POLLOUT : 0)};
                ns = 0;
                for (size_t i = 0; i < m->n_st; i++) {
                        struct stream *s = m->st[i];
                        short ev = (can_read(m, s) ? POLLIN : 0) | (s->out_len ? POLLOUT : 0);
                        who[ns++] = s;
                        pfd[n++] = (struct pollfd){.fd = ev ? s->fd : -1, .events = ev};
                }
                if (poll(pfd, n, timeout) < 0 && errno != EINTR)
                        break;
                if (pfd[0].revents) {
                        char b[64];
                        while (read(m->wake[0], b, sizeof(b)) > 0)
                                ;
                }
                if (pfd[1].revents) {
                        bool ok = true;
                        if (!m->host && (pfd[1].revents & POLLHUP))
                                ok = false;
                        if (ok && (pfd[1].revents & (POLLIN | POLLERR | POLLHUP)))
                                ok = chan_read(m);
                        if (!ok && m->host)
                                break; /* QEMU closed the channel: the VM is gone */
                        if (!ok) {
                                m->connected = false; /* the host went: everything starts again */
                                guest_lost(m, false);
                        }
                }
                /* the streams polled: those still there (a frame above may have ended some) */
                for (nfds_t i = 0; i < ns; i++) {
                        struct stream *s = who[i];
                        short re = pfd[2 + i].revents;
                        if (!re)
                                continue;
                        bool live = false; /* by pointer: s may be freed */
                        for (size_t k = 0; k < m->n_st && !live; k++)
                                live = m->st[k] == s;
                        if (!live)
                                continue;
                        size_t before = m->n_st;
                        if (re & (POLLOUT | POLLERR | POLLHUP))
                                stream_write(m, s);
                        if (m->n_st == before && (re & (POLLIN | POLLERR | POLLHUP)))
                                stream_read(m, s);
                }
                if ((m->host || m->connected) && !chan_flush(m)) {
                        if (m->host)
                                break;
                        m->connected = false;
                        guest_lost(m, false);
                }
        }
        drop_all(m);
        free(pfd);
        free(who);
        pthread_mutex_lock(&m->lock);
        m->ended = true;
        m->synced = false;
        pthread_mutex_unlock(&m->lock);
        return NULL;
}

/* ---- public ---- */

struct vmux *vmux_start(int chan, bool host, vmux_opened_fn opened, vmux_dropped_fn dropped, void *ud)
{
        struct vmux *m = calloc(1, sizeof(*m));

        if (!m || !(m->cout = malloc(COUT_CAP)) || pipe2(m->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
                if (m)
                        free(m->cout);
                free(m);
                close(chan);
                return NULL;
        }
        m->chan = chan;
        fcntl(chan, F_SETFL, fcntl(chan, F_GETFL) | O_NONBLOCK); /* the loop never blocks on it */
        m->host = host;
        m->opened = opened;
        m->dropped_fn = dropped;
        m->ud = ud;
        pthread_mutex_init(&m->lock, NULL);
        if (pthread_create(&m->thread, NULL, loop, m) != 0) {
                pthread_mutex_destroy(&m->lock);
                close(m->wake[0]);
                close(m->wake[1]);
                free(m->cout);
                free(m);
                close(chan);
                return NULL;
        }
        return m;
}

int vmux_open(struct vmux *m, uint16_t kind)
{
        int sv[2];

        if (!m)
                return -1;
        pthread_mutex_lock(&m->lock);
        if (!m->synced || m->ended || m->n_pend + m->n_live >= VMUX_STREAMS_MAX ||
            socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0) {
                pthread_mutex_unlock(&m->lock);
                return -1;
        }
        m->pend[m->n_pend++] = (struct pend){.id = ++m->next_id ? m->next_id : ++m->next_id, .kind = kind, .fd = sv[0]};
        pthread_mutex_unlock(&m->lock);
        (void)!write(m->wake[1], "o", 1);
        return sv[1];
}

size_t vmux_connections(struct vmux *m)
{
        pthread_mutex_lock(&m->lock);
        size_t n = m->n_conn;
        pthread_mutex_unlock(&m->lock);
        return n;
}

bool vmux_ended(struct vmux *m)
{
        pthread_mutex_lock(&m->lock);
        bool e = m->ended;
        pthread_mutex_unlock(&m->lock);
        return e;
}

void vmux_stop(struct vmux *m)
{
        if (!m)
                return;
        pthread_mutex_lock(&m->lock);
        m->stop = true;
        pthread_mutex_unlock(&m->lock);
        (void)!write(m->wake[1], "s", 1);
        pthread_join(m->thread, NULL);
        pthread_mutex_destroy(&m->lock);
        close(m->wake[0]);
        close(m->wake[1]);
        close(m->chan);
        free(m->cout);
        free(m);
}
