/* node_link.c — the node link's TLS and its relay loop (node.h for the
 * protocol, node_internal.h for who owns what).
 *
 * TLS: OpenSSL's libssl (libcurl links it already), TLS 1.3 only, a peer
 * certificate required both ways. The CA and the CRL are one X509_STORE
 * handed to each new connection (SSL_set1_verify_cert_store): before every
 * handshake the CRL file is stat'ed and, if it changed, loaded again; a CRL
 * that does not load refuses every handshake until it does (fails closed).
 *
 * The loop: poll on the TLS socket, the wake pipe, every stream's fd (read
 * while the peer has given credit, write while bytes from the peer wait)
 * and whatever the side adds (the agent's listeners). Frames are checked
 * for size before anything is buffered; a stream's peer that sends past
 * the credit it was given, or a frame for a stream that does not exist in
 * a way that cannot be a race, closes the link.
 *
 * Locks: l->lock guards the queue of frames other threads hand in (q) and
 * stop. Everything else of a link belongs to its loop thread. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node_internal.h"
#include "sandboxd/log.h"

#define NL_QUEUE_MAX (4 * 1024 * 1024) /* bytes other threads may queue on one link */
#define NL_READ_CHUNK (16 * 1024)

bool nl_key_ok(const char *s, size_t size)
{
        size_t n = strnlen(s, size);
        if (n == 0 || n >= size)
                return false;
        for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)s[i];
                if (!(ch >= 'a' && ch <= 'z') && !(ch >= 'A' && ch <= 'Z') && !(ch >= '0' && ch <= '9') && ch != '-' &&
                    ch != '_' && ch != '.' && ch != '@')
                        return false;
        }
        return true;
}

/* ---- TLS ---- */

static const char *ssl_errstr(void)
{
        static __thread char buf[256];
        unsigned long e = ERR_get_error();
        if (!e)
                return "unknown TLS error";
        ERR_error_string_n(e, buf, sizeof(buf));
        ERR_clear_error();
        return buf;
}

/* Under t->lock: a new store when the CRL file changed (or at first). */
static void tls_reload_locked(struct nl_tls *t)
{
        struct stat st = {0};
        X509_STORE *store;

        if (t->crl[0] && stat(t->crl, &st) < 0) {
                if (t->store || !t->loaded)
                        log_error("node link: cannot read the CRL %s: %m; refusing every node until it can be read",
                                  t->crl);
                X509_STORE_free(t->store);
                t->store = NULL;
                t->loaded = true;
                return;
        }
        if (t->loaded && t->store &&
            (!t->crl[0] || (st.st_mtim.tv_sec == t->crl_mtime.tv_sec && st.st_mtim.tv_nsec == t->crl_mtime.tv_nsec &&
                            st.st_ino == t->crl_ino && st.st_size == t->crl_size)))
                return;
        t->loaded = true;
        t->crl_mtime = st.st_mtim;
        t->crl_ino = st.st_ino;
        t->crl_size = st.st_size;
        store = X509_STORE_new();
        if (!store || X509_STORE_load_file(store, t->ca) != 1) {
                log_error("node link: cannot load the CA %s: %s", t->ca, ssl_errstr());
                goto fail;
        }
        if (t->crl[0]) {
                X509_LOOKUP *lk = X509_STORE_add_lookup(store, X509_LOOKUP_file());
                if (!lk || X509_load_crl_file(lk, t->crl, X509_FILETYPE_PEM) <= 0) {
                        log_error("node link: cannot load the CRL %s: %s; refusing every node until it loads", t->crl,
                                  ssl_errstr());
                        goto fail;
                }
                X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
                log_info("node link: CRL %s loaded", t->crl);
        }
        X509_STORE_free(t->store);
        t->store = store;
        return;
fail:
        X509_STORE_free(store);
        X509_STORE_free(t->store);
        t->store = NULL;
}

int nl_tls_new(const struct sbx_config *cfg, bool server, struct nl_tls **ret, struct sbx_error *err)
{
        struct nl_tls *t = calloc(1, sizeof(*t));

        if (!t)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (!cfg->node_cert[0] || !cfg->node_key[0] || !cfg->node_ca[0]) {
                free(t);
                return sbx_error_set(err, -EINVAL, 0, "the node link needs node.cert, node.key and node.ca");
        }
        t->server = server;
        pthread_mutex_init(&t->lock, NULL);
        sbx_strlcpy(t->ca, cfg->node_ca, sizeof(t->ca));
        sbx_strlcpy(t->crl, cfg->node_crl, sizeof(t->crl));
        t->ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
        if (!t->ctx || SSL_CTX_set_min_proto_version(t->ctx, TLS1_3_VERSION) != 1 ||
            SSL_CTX_use_certificate_chain_file(t->ctx, cfg->node_cert) != 1 ||
            SSL_CTX_use_PrivateKey_file(t->ctx, cfg->node_key, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(t->ctx) != 1) {
                int r = sbx_error_set(err, -EINVAL, 0, "node link: cannot load %s / %s: %s", cfg->node_cert,
                                      cfg->node_key, ssl_errstr());
                nl_tls_free(t);
                return r;
        }
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        SSL_CTX_set_session_cache_mode(t->ctx, SSL_SESS_CACHE_OFF); /* every handshake sees the CRL */
        SSL_CTX_set_num_tickets(t->ctx, 0);
        pthread_mutex_lock(&t->lock);
        tls_reload_locked(t);
        bool ok = t->store != NULL;
        pthread_mutex_unlock(&t->lock);
        if (!ok) {
                nl_tls_free(t);
                return sbx_error_set(err, -EINVAL, 0, "node link: cannot load node.ca %s or node.crl %s", cfg->node_ca,
                                     cfg->node_crl);
        }
        *ret = t;
        return 0;
}

void nl_tls_free(struct nl_tls *t)
{
        if (!t)
                return;
        SSL_CTX_free(t->ctx);
        X509_STORE_free(t->store);
        pthread_mutex_destroy(&t->lock);
        free(t);
}

static int wait_fd(int fd, short ev, int64_t until)
{
        struct pollfd p = {.fd = fd, .events = ev};
        int64_t left = until - sbx_now_ms();
        if (left <= 0)
                return -ETIMEDOUT;
        int n = poll(&p, 1, (int)left);
        if (n < 0 && errno != EINTR)
                return -errno;
        return 0;
}

int nl_tls_handshake(struct nl_tls *t, int fd, const char *expect_name, SSL **ret_ssl, char ret_name[NODE_NAME_MAX + 1],
                     struct sbx_error *err)
{
        int64_t until = sbx_now_ms() + NODE_HANDSHAKE_TIMEOUT_MS;
        X509_STORE *store;
        SSL *ssl;
        int r;

        pthread_mutex_lock(&t->lock);
        tls_reload_locked(t);
        store = t->store;
        if (store)
                X509_STORE_up_ref(store);
        pthread_mutex_unlock(&t->lock);
        if (!store)
                return sbx_error_set(err, -EACCES, 0, "the CA or CRL does not load: refused");
        int one = 1;
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        /* small frames both ways (a runner's request, its answer): Nagle with delayed
         * acknowledgements would hold each for tens of milliseconds */
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        ssl = SSL_new(t->ctx);
        if (!ssl || SSL_set_fd(ssl, fd) != 1 || SSL_set1_verify_cert_store(ssl, store) != 1) {
                X509_STORE_free(store);
                SSL_free(ssl);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        X509_STORE_free(store); /* the SSL holds its own reference */
        if (!t->server && expect_name && SSL_set1_host(ssl, expect_name) != 1) {
                SSL_free(ssl);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        for (;;) {
                ERR_clear_error();
                r = t->server ? SSL_accept(ssl) : SSL_connect(ssl);
                if (r == 1)
                        break;
                int e = SSL_get_error(ssl, r);
                short ev = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
                long vr = SSL_get_verify_result(ssl);
                if (!ev || wait_fd(fd, ev, until) < 0) {
                        r = sbx_error_set(err, ev ? -ETIMEDOUT : -EACCES, 0, "TLS handshake failed: %s%s%s",
                                          ev ? "timed out" : ssl_errstr(), vr != X509_V_OK ? ": " : "",
                                          vr != X509_V_OK ? X509_verify_cert_error_string(vr) : "");
                        SSL_free(ssl);
                        return r;
                }
        }
        X509 *peer = SSL_get1_peer_certificate(ssl);
        char cn[NODE_NAME_MAX + 2] = "";
        if (!peer || SSL_get_verify_result(ssl) != X509_V_OK ||
            X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, sizeof(cn)) <= 0 ||
            !nl_key_ok(cn, NODE_NAME_MAX + 1)) {
                X509_free(peer);
                SSL_free(ssl);
                return sbx_error_set(err, -EACCES, 0, "the peer's certificate has no usable common name");
        }
        X509_free(peer);
        sbx_strlcpy(ret_name, cn, NODE_NAME_MAX + 1);
        *ret_ssl = ssl;
        return 0;
}

/* ---- frames ---- */

static int ssl_write_all(struct nl *l, const unsigned char *p, size_t len)
{
        int64_t until = sbx_now_ms() + NODE_WRITE_DEADLINE_MS;

        while (len > 0) {
                ERR_clear_error();
                int n = SSL_write(l->ssl, p, (int)len);
                if (n > 0) {
                        p += n;
                        len -= (size_t)n;
                        continue;
                }
                int e = SSL_get_error(l->ssl, n);
                short ev = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
                if (!ev)
                        return -EIO;
                int r = wait_fd(l->fd, ev, until);
                if (r < 0)
                        return r;
        }
        return 0;
}

static size_t frame_pack(unsigned char *buf, uint16_t type, uint32_t stream, const void *p1, size_t n1, const void *p2,
                         size_t n2)
{
        uint32_t len = htole32((uint32_t)(n1 + n2)), st = htole32(stream);
        uint16_t ty = htole16(type), fl = 0;

        memcpy(buf, &len, 4);
        memcpy(buf + 4, &ty, 2);
        memcpy(buf + 6, &fl, 2);
        memcpy(buf + 8, &st, 4);
        if (n1)
                memcpy(buf + NODE_HDR_LEN, p1, n1);
        if (n2)
                memcpy(buf + NODE_HDR_LEN + n1, p2, n2);
        return NODE_HDR_LEN + n1 + n2;
}

int nl_send(struct nl *l, uint16_t type, uint32_t stream, const void *p1, size_t n1, const void *p2, size_t n2)
{
        if (n1 + n2 > NODE_MAX_FRAME)
                return -E2BIG;
        return ssl_write_all(l, l->wbuf, frame_pack(l->wbuf, type, stream, p1, n1, p2, n2));
}

int nl_queue(struct nl *l, uint16_t type, uint32_t stream, const void *p1, size_t n1, const void *p2, size_t n2)
{
        struct nl_qframe *f;

        if (n1 + n2 > NODE_MAX_FRAME)
                return -E2BIG;
        f = malloc(sizeof(*f) + NODE_HDR_LEN + n1 + n2);
        if (!f)
                return -ENOMEM;
        f->next = NULL;
        f->len = frame_pack(f->buf, type, stream, p1, n1, p2, n2);
        pthread_mutex_lock(&l->lock);
        if (l->stop || l->q_bytes + f->len > NL_QUEUE_MAX) {
                bool stopped = l->stop;
                pthread_mutex_unlock(&l->lock);
                free(f);
                return stopped ? -ENOTCONN : -ENOBUFS;
        }
        *l->q_tail = f;
        l->q_tail = &f->next;
        l->q_bytes += f->len;
        pthread_mutex_unlock(&l->lock);
        if (write(l->wake[1], "w", 1) < 0) {
                /* full: the loop is due to wake anyway */
        }
        return 0;
}

/* ---- streams ---- */

struct nl_stream *nl_stream_find(struct nl *l, uint32_t id)
{
        for (struct nl_stream *s = l->streams; s; s = s->next)
                if (s->id == id)
                        return s;
        return NULL;
}

size_t nl_streams_of(struct nl *l, const char *user, const char *session)
{
        size_t n = 0;
        for (struct nl_stream *s = l->streams; s; s = s->next)
                if (strcmp(s->user, user) == 0 && strcmp(s->session, session) == 0)
                        n++;
        return n;
}

struct nl_stream *nl_stream_add(struct nl *l, uint32_t id, int fd, uint32_t kind, const char *user, const char *session)
{
        struct nl_stream *s;

        if (l->n_streams >= l->max_streams || nl_streams_of(l, user, session) >= l->max_per_session ||
            nl_stream_find(l, id)) {
                close(fd);
                return NULL;
        }
        s = calloc(1, sizeof(*s));
        if (!s) {
                close(fd);
                return NULL;
        }
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        s->id = id;
        s->fd = fd;
        s->kind = kind;
        s->credit = NODE_WINDOW;
        sbx_strlcpy(s->user, user, sizeof(s->user));
        sbx_strlcpy(s->session, session, sizeof(s->session));
        s->next = l->streams;
        l->streams = s;
        l->n_streams++;
        return s;
}

static void stream_free(struct nl *l, struct nl_stream *s, bool link_down)
{
        for (struct nl_stream **pp = &l->streams; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                        *pp = s->next;
                        break;
                }
        l->n_streams--;
        if (l->hd->stream_gone)
                l->hd->stream_gone(l, s, link_down, l->ud);
        if (s->fd >= 0)
                close(s->fd);
        free(s->out);
        free(s);
}

/* Write what waits for the stream's fd; acknowledge it in quarters of the window. */
static int stream_flush(struct nl *l, struct nl_stream *s)
{
        size_t off = 0;

        while (off < s->out_len) {
                ssize_t n = send(s->fd, s->out + off, s->out_len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n <= 0) {
                        s->out_len = 0;
                        return -EPIPE;
                }
                off += (size_t)n;
                s->unacked += (uint32_t)n;
        }
        if (off) {
                memmove(s->out, s->out + off, s->out_len - off);
                s->out_len -= off;
        }
        if (s->out_len == 0 && s->out_cap > NL_READ_CHUNK) {
                /* a thousand idle forwards hold no window each */
                free(s->out);
                s->out = NULL;
                s->out_cap = 0;
        }
        if (s->unacked >= NODE_WINDOW / 4 || (s->unacked && s->out_len == 0)) {
                uint32_t a = htole32(s->unacked);
                int r = nl_send(l, NF_ACK, s->id, &a, sizeof(a), NULL, 0);
                if (r < 0)
                        return r;
                s->unacked = 0;
        }
        return 0;
}

/* The stream's fd is readable: relay up to the credit. -EIO: the link
 * failed. An end of stream is a half close: NF_CLOSE tells the peer, which
 * shuts its fd's write side; bytes still come the other way. */
static int stream_read(struct nl *l, struct nl_stream *s)
{
        unsigned char buf[NL_READ_CHUNK];
        size_t want = s->credit < (int64_t)sizeof(buf) ? (size_t)s->credit : sizeof(buf);
        ssize_t n;

        if (want == 0 || s->eof)
                return 0;
        do
                n = recv(s->fd, buf, want, MSG_DONTWAIT);
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno == EAGAIN)
                return 0;
        if (n <= 0) {
                s->eof = true;
                return nl_send(l, NF_CLOSE, s->id, NULL, 0, NULL, 0) < 0 ? -EIO : 0;
        }
        s->credit -= n;
        return nl_send(l, NF_DATA, s->id, buf, (size_t)n, NULL, 0) < 0 ? -EIO : 0;
}

/* Both halves closed and everything written: the stream goes. True if it went. */
bool nl_stream_settle(struct nl *l, struct nl_stream *s)
{
        if (s->peer_closed && s->out_len == 0 && !s->shut) {
                (void)shutdown(s->fd, SHUT_WR);
                s->shut = true;
        }
        if (s->eof && s->shut) {
                stream_free(l, s, false);
                return true;
        }
        return false;
}

/* fd failed (a write refused): tell the peer once, drop the stream. */
static void stream_abort(struct nl *l, struct nl_stream *s)
{
        if (!s->eof)
                (void)nl_send(l, NF_CLOSE, s->id, NULL, 0, NULL, 0);
        stream_free(l, s, false);
}

/* A frame about a stream's bytes. False: a protocol error. */
static bool stream_frame(struct nl *l, const struct node_hdr *h, const unsigned char *p)
{
        struct nl_stream *s = nl_stream_find(l, h->stream);

        if (h->type == NF_DATA) {
                if (!s) /* closed on our side meanwhile: its bytes go nowhere */
                        return h->len > 0;
                if (h->len == 0 || s->out_len + h->len > NODE_WINDOW || s->peer_closed)
                        return false; /* past the credit it was given, or after its close */
                if (s->out_len + h->len > s->out_cap) {
                        size_t cap = s->out_cap ? s->out_cap * 2 : NL_READ_CHUNK;
                        while (cap < s->out_len + h->len)
                                cap *= 2;
                        if (cap > NODE_WINDOW)
                                cap = NODE_WINDOW;
                        unsigned char *grown = realloc(s->out, cap);
                        if (!grown) {
                                stream_abort(l, s);
                                return true;
                        }
                        s->out = grown;
                        s->out_cap = cap;
                }
                memcpy(s->out + s->out_len, p, h->len);
                s->out_len += h->len;
                if (stream_flush(l, s) == -EPIPE)
                        stream_abort(l, s);
                return true;
        }
        if (h->type == NF_ACK) {
                uint32_t a;
                if (h->len != sizeof(a))
                        return false;
                if (!s)
                        return true;
                memcpy(&a, p, sizeof(a));
                a = le32toh(a);
                if (s->credit + a > NODE_WINDOW)
                        return false;
                s->credit += a;
                return true;
        }
        /* NF_CLOSE: the peer's half */
        if (h->len != 0)
                return false;
        if (s) {
                if (s->peer_closed)
                        return false;
                s->peer_closed = true;
                (void)nl_stream_settle(l, s);
        }
        return true;
}

static bool link_frame(struct nl *l, const struct node_hdr *h, const unsigned char *p)
{
        if (h->type == NF_PING)
                return h->len == 0 && nl_send(l, NF_PONG, 0, NULL, 0, NULL, 0) == 0;
        if (h->type == NF_PONG)
                return h->len == 0;
        if (h->type == NF_DATA || h->type == NF_ACK || h->type == NF_CLOSE)
                return stream_frame(l, h, p);
        return l->hd->frame(l, h, p, l->ud);
}

/* Read what TLS has; take whole frames. <0: the link is over. */
static int link_read(struct nl *l, const char **why)
{
        for (int round = 0; round < 16; round++) {
                ERR_clear_error();
                int n = SSL_read(l->ssl, l->in + l->in_len, (int)(NODE_HDR_LEN + NODE_MAX_FRAME - l->in_len));
                if (n <= 0) {
                        int e = SSL_get_error(l->ssl, n);
                        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
                                return 0;
                        *why = e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL ? "the peer closed the link"
                                                                                    : ssl_errstr();
                        return -EIO;
                }
                l->in_len += (size_t)n;
                __atomic_store_n(&l->last_rx, sbx_now_ms(), __ATOMIC_RELAXED); /* read by node_server_list */
                size_t off = 0;
                for (;;) {
                        struct node_hdr h;
                        uint32_t v32;
                        uint16_t v16;
                        if (l->in_len - off < NODE_HDR_LEN)
                                break;
                        memcpy(&v32, l->in + off, 4);
                        h.len = le32toh(v32);
                        memcpy(&v16, l->in + off + 4, 2);
                        h.type = le16toh(v16);
                        memcpy(&v16, l->in + off + 6, 2);
                        h.flags = le16toh(v16);
                        memcpy(&v32, l->in + off + 8, 4);
                        h.stream = le32toh(v32);
                        if (h.len > NODE_MAX_FRAME || h.flags != 0) {
                                *why = "malformed frame (oversized or unknown flags)";
                                return -EPROTO;
                        }
                        if (l->in_len - off < NODE_HDR_LEN + h.len)
                                break;
                        if (!link_frame(l, &h, l->in + off + NODE_HDR_LEN)) {
                                static __thread char msg[96];
                                snprintf(msg, sizeof(msg), "malformed or unexpected frame (type %u, %" PRIu32 " bytes)",
                                         h.type, h.len);
                                *why = msg;
                                return -EPROTO;
                        }
                        off += NODE_HDR_LEN + h.len;
                }
                if (off) {
                        memmove(l->in, l->in + off, l->in_len - off);
                        l->in_len -= off;
                }
                if (!SSL_pending(l->ssl))
                        return 0;
        }
        return 0;
}

void nl_block_sigpipe(void)
{
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
}

int nl_init(struct nl *l, SSL *ssl, int fd, const struct sbx_config *cfg, const struct nl_handlers *hd, void *ud)
{
        memset(l, 0, sizeof(*l));
        l->ssl = ssl;
        l->fd = fd;
        l->heartbeat_ms = cfg->node_heartbeat_ms;
        /* an egress tunnel over a node is two streams: egress.sock's and the node's connect */
        l->max_streams = (size_t)cfg->forward_max_total + 2 * (size_t)cfg->egress_max_tunnels + NODE_STREAMS_SLACK;
        l->max_per_session = (size_t)cfg->forward_max_per_session + 2 * (size_t)cfg->egress_max_tunnels_per_session +
                             NODE_STREAMS_SLACK;
        l->hd = hd;
        l->ud = ud;
        l->wake[0] = l->wake[1] = -1;
        l->q_tail = &l->q;
        l->in = malloc(NODE_HDR_LEN + NODE_MAX_FRAME);
        l->wbuf = malloc(NODE_HDR_LEN + NODE_MAX_FRAME);
        pthread_mutex_init(&l->lock, NULL);
        if (!l->in || !l->wbuf || pipe2(l->wake, O_CLOEXEC | O_NONBLOCK) < 0)
                return -ENOMEM;
        l->last_rx = l->last_ping = sbx_now_ms();
        return 0;
}

void nl_destroy(struct nl *l)
{
        while (l->streams)
                stream_free(l, l->streams, true);
        while (l->q) {
                struct nl_qframe *f = l->q;
                l->q = f->next;
                free(f);
        }
        if (l->ssl) {
                (void)SSL_shutdown(l->ssl);
                SSL_free(l->ssl);
        }
        if (l->fd >= 0)
                close(l->fd);
        for (int i = 0; i < 2; i++)
                if (l->wake[i] >= 0)
                        close(l->wake[i]);
        free(l->in);
        free(l->wbuf);
        pthread_mutex_destroy(&l->lock);
}

void nl_stop(struct nl *l)
{
        pthread_mutex_lock(&l->lock);
        l->stop = true;
        pthread_mutex_unlock(&l->lock);
        if (write(l->wake[1], "w", 1) < 0) {
                /* full: due to wake */
        }
}


void nl_run(struct nl *l, const char **ret_why)
{
        /* streams, the listeners (three a session, the published ports), connects in flight */
        const size_t poll_max =
                l->max_streams + 3 * (size_t)NODE_MAX_SESSIONS + NODE_PUBLISH_MAX + NODE_CONNECTS_MAX + 2;
        struct pollfd *pfd = calloc(poll_max, sizeof(*pfd));
        struct nl_stream **who = calloc(poll_max, sizeof(*who));
        const char *why = "stopped";

        if (!pfd || !who) {
                why = "out of memory";
                goto out;
        }
        for (;;) {
                int n = 0, extra_at, extra_n, timeout = 250;
                struct nl_qframe *q;

                pthread_mutex_lock(&l->lock);
                bool stop = l->stop;
                q = l->q;
                l->q = NULL;
                l->q_tail = &l->q;
                l->q_bytes = 0;
                pthread_mutex_unlock(&l->lock);
                if (stop)
                        break;
                for (bool failed = false; q;) {
                        struct nl_qframe *f = q;
                        q = f->next;
                        if (!failed && ssl_write_all(l, f->buf, f->len) < 0)
                                failed = true;
                        free(f);
                        if (failed && !q) {
                                why = "cannot write to the link (deadline)";
                                goto out;
                        }
                }
                int64_t now = sbx_now_ms();
                if (now - l->last_rx > 3 * (int64_t)l->heartbeat_ms) {
                        why = "no heartbeat from the peer";
                        goto out;
                }
                if (now - l->last_ping >= l->heartbeat_ms) {
                        l->last_ping = now;
                        if (nl_send(l, NF_PING, 0, NULL, 0, NULL, 0) < 0) {
                                why = "cannot write to the link (deadline)";
                                goto out;
                        }
                }
                pfd[n++] = (struct pollfd){.fd = l->fd, .events = POLLIN};
                pfd[n++] = (struct pollfd){.fd = l->wake[0], .events = POLLIN};
                for (struct nl_stream *s = l->streams; s && (size_t)n < l->max_streams; s = s->next) {
                        short ev = 0;
                        if (!s->eof && s->credit > 0)
                                ev |= POLLIN;
                        if (s->out_len)
                                ev |= POLLOUT;
                        who[n] = s;
                        pfd[n++] = (struct pollfd){.fd = ev ? s->fd : -1, .events = ev};
                }
                extra_at = n;
                extra_n = l->hd->poll_fill ? l->hd->poll_fill(l, pfd + n, (int)poll_max - n, l->ud) : 0;
                n += extra_n;
                if (SSL_pending(l->ssl))
                        timeout = 0;
                if (poll(pfd, (nfds_t)n, timeout) < 0 && errno != EINTR) {
                        why = "poll failed";
                        goto out;
                }
                if (pfd[1].revents) {
                        char b[64];
                        while (read(l->wake[0], b, sizeof(b)) > 0)
                                ;
                }
                if (pfd[0].revents || SSL_pending(l->ssl)) {
                        if (link_read(l, &why) < 0)
                                goto out;
                }
                /* streams: who[] may hold one freed by a frame above; look each up again */
                for (int i = 2; i < extra_at; i++) {
                        if (!pfd[i].revents || pfd[i].fd < 0)
                                continue;
                        struct nl_stream *s = NULL;
                        for (struct nl_stream *t = l->streams; t; t = t->next)
                                if (t == who[i] && t->fd == pfd[i].fd)
                                        s = t;
                        if (!s)
                                continue;
                        if (s->out_len && stream_flush(l, s) == -EPIPE) {
                                stream_abort(l, s);
                                continue;
                        }
                        if ((pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) && !s->eof && stream_read(l, s) < 0) {
                                why = "cannot write to the link (deadline)";
                                goto out;
                        }
                        (void)nl_stream_settle(l, s);
                }
                if (extra_n && l->hd->poll_ready)
                        l->hd->poll_ready(l, pfd + extra_at, extra_n, l->ud);
        }
out:
        free(pfd);
        free(who);
        *ret_why = why;
}
