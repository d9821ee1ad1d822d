/* node_internal.h — between the node link's files. Not a public header.
 *
 *   node_link.c    TLS (contexts, the CA and CRL store reloaded when the
 *                  CRL file changes), frames, and the relay loop one link
 *                  runs on its own thread
 *   node_server.c  the control daemon's end: listener, links, requests
 *   node_agent.c   the node agent: session directories, listeners, the
 *                  runner check, dialling the control daemon
 *
 * A link (struct nl) is owned by the one thread that runs nl_run: only it
 * reads or writes the TLS connection and the streams' fds. Other threads
 * queue frames (nl_queue) under nl->lock and wake it. */
#ifndef SANDBOXD_NODE_INTERNAL_H
#define SANDBOXD_NODE_INTERNAL_H

#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "sandboxd/node.h"

struct nl_tls {
        SSL_CTX *ctx;
        bool server;
        char ca[SBX_PATH_MAX], crl[SBX_PATH_MAX];
        pthread_mutex_t lock;
        X509_STORE *store; /* CA (+ CRL); NULL: the CRL does not load: refuse */
        struct timespec crl_mtime;
        ino_t crl_ino;
        off_t crl_size;
        bool loaded;
};

int nl_tls_new(const struct sbx_config *cfg, bool server, struct nl_tls **ret, struct sbx_error *err);
void nl_tls_free(struct nl_tls *t);
/* A handshake on the connected socket fd (made non-blocking), within
 * NODE_HANDSHAKE_TIMEOUT_MS. Server: the peer's common name in
 * ret_name. Client: the peer must be named expect_name. */
int nl_tls_handshake(struct nl_tls *t, int fd, const char *expect_name, SSL **ret_ssl, char ret_name[NODE_NAME_MAX + 1],
                     struct sbx_error *err);

struct nl_stream {
        uint32_t id;
        int fd;
        uint32_t kind;
        char user[65], session[65];
        int64_t credit;     /* bytes we may still send the peer */
        unsigned char *out; /* from the peer, for fd (at most NODE_WINDOW; grown on demand) */
        size_t out_len, out_cap;
        uint32_t unacked; /* written to fd, not acknowledged to the peer yet */
        bool peer_closed; /* NF_CLOSE came: shut fd's write side once out is written */
        bool shut;        /* ... done */
        bool eof;         /* fd said end of stream: NF_CLOSE sent (a half close) */
        bool connecting;  /* control: a NODE_STREAM_CONNECT waiting for its NF_CONNECTED */
        struct nl_stream *next;
};

struct nl_qframe {
        struct nl_qframe *next;
        size_t len; /* header + payload, in buf */
        unsigned char buf[];
};

struct nl;

struct nl_handlers {
        /* A frame that is not about a stream's bytes (HELLO, PING handled
         * here; REQ, RESP, OPEN go to the side). False: a protocol error. */
        bool (*frame)(struct nl *l, const struct node_hdr *h, const unsigned char *p, void *ud);
        /* Extra fds to poll (the agent's listeners): fill up to max, return
         * how many. */
        int (*poll_fill)(struct nl *l, struct pollfd *pfd, int max, void *ud);
        void (*poll_ready)(struct nl *l, struct pollfd *pfd, int n, void *ud);
        /* A stream is going (closed either way, or the link ends). */
        void (*stream_gone)(struct nl *l, struct nl_stream *st, bool link_down, void *ud);
};

struct nl {
        SSL *ssl;
        int fd;
        char peer[NODE_NAME_MAX + 1];
        int heartbeat_ms;
        const struct nl_handlers *hd;
        void *ud;
        unsigned char *in;
        size_t in_len;
        unsigned char *wbuf;
        struct nl_stream *streams;
        size_t n_streams;
        size_t max_streams, max_per_session; /* from the side's config (nl_init) */
        int64_t last_rx, last_ping;
        bool hello; /* the first frame from the node came */
        /* other threads */
        pthread_mutex_t lock;
        struct nl_qframe *q, **q_tail;
        size_t q_bytes;
        bool stop;
        int wake[2];
};

int nl_init(struct nl *l, SSL *ssl, int fd, const struct sbx_config *cfg, const struct nl_handlers *hd, void *ud);
/* Closes every stream (stream_gone with link_down), the TLS connection
 * and the socket. */
void nl_destroy(struct nl *l);
/* Run until the link fails or nl_stop; why it ended in ret_why. */
void nl_run(struct nl *l, const char **ret_why);
void nl_stop(struct nl *l);
/* Loop thread only: one frame now. */
int nl_send(struct nl *l, uint16_t type, uint32_t stream, const void *p1, size_t n1, const void *p2, size_t n2);
/* Any thread: queue one frame for the loop thread. -ENOBUFS when too much
 * is queued (a link that does not drain). */
int nl_queue(struct nl *l, uint16_t type, uint32_t stream, const void *p1, size_t n1, const void *p2, size_t n2);
/* Loop thread: a new stream over fd (taken). NULL past the limits (fd closed). */
struct nl_stream *nl_stream_add(struct nl *l, uint32_t id, int fd, uint32_t kind, const char *user,
                                const char *session);
struct nl_stream *nl_stream_find(struct nl *l, uint32_t id);
size_t nl_streams_of(struct nl *l, const char *user, const char *session);
/* Loop thread: free the stream if both halves are closed and its bytes
 * written (peer_closed and eof); shut fd's write half once peer_closed and
 * nothing waits. True if it went. */
bool nl_stream_settle(struct nl *l, struct nl_stream *s);

/* OpenSSL writes to the socket with write(2), not send(MSG_NOSIGNAL): a
 * peer gone raises SIGPIPE. Every thread that runs a link blocks it (a
 * signal pending on a thread that blocks it does nothing). */
void nl_block_sigpipe(void);

/* Both strings NUL-terminated within their arrays and valid key syntax. */
bool nl_key_ok(const char *s, size_t size);

#endif
