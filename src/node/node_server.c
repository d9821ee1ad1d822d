/* node_server.c — the control daemon's end of the node link (node.h):
 * listens on node_listen, authenticates each node agent (node_link.c),
 * runs each link on a thread of its own, sends it requests for the runner
 * hub (node_server_ops) and turns each stream it opens into a socketpair
 * whose other end goes to the hub, once the session's epoch is checked.
 * The egress proxy's connects go the other way: node_server_connect queues
 * one on the session's link (s->lock), whose thread opens the stream
 * (poll_fill) and writes the node's NF_CONNECTED result first on it.
 *
 * Threads: "sbx-node" accepts, calls hooks->up for a node that connected
 * (the hub opens its sessions again: requests, so never on a link thread)
 * and fences a node gone longer than node_fence; one "sbx-node-link" per
 * connected node runs nl_run.
 * Locks: s->lock guards the link list, the active link, the pending
 * requests and the fencing state; paired with s->cond (a request answered,
 * a node connected). A link's own lock (nl.lock) is taken under s->lock
 * (nl_queue), never the other way round. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "node_internal.h"
#include "sandboxd/log.h"

#define REFUSED_REPORT_MS 60000 /* one session's refused streams: one log line and audit row per minute */

struct ns_link {
        struct node_server *s;
        struct ns_link *next;
        pthread_t thread;
        int fd; /* until the handshake hands it to l */
        bool registered, done;
        bool running; /* nl_init done: nl_stop may be called (s->lock) */
        /* link thread: the last refused stream's session, so a runner that retries every second
         * is not an audit row a second */
        char refused_key[140];
        int64_t refused_ms;
        struct nl l;
        char name[NODE_NAME_MAX + 1];
        /* egress connects other threads asked for (s->lock), opened by the link thread */
        struct ns_connect *connects;
        size_t n_connects;
        uint32_t next_connect; /* s->lock */
};

struct ns_connect {
        struct ns_connect *next;
        uint32_t id; /* NODE_STREAM_CONTROL set */
        int fd;      /* the link's end of the socketpair */
        struct node_connect c;
};

struct ns_req {
        struct ns_req *next;
        uint32_t id;
        struct ns_link *link;
        bool done;
        int result;
        char text[SBX_PATH_MAX];
};

struct node_server {
        const struct sbx_config *cfg;
        struct node_server_hooks hooks;
        void *ud;
        struct nl_tls *tls;
        int lfd, port;
        int wake[2];
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool stop;
        struct ns_link *links;
        size_t n_links;
        struct ns_link *active;
        char binary[SBX_PATH_MAX];
        uint32_t next_req;
        struct ns_req *reqs;
        char up_name[NODE_NAME_MAX + 1]; /* a node connected: hooks->up due */
        int64_t down_since;              /* the active node went (monotonic ms); 0: not down */
        char down_name[NODE_NAME_MAX + 1];
        uint64_t refused;
        uint64_t lost;      /* links of registered nodes that ended */
        bool gateway_ready; /* hooks.gateway may be called (node_server_gateway_ready) */
};

static void wake_listener(struct node_server *s)
{
        if (write(s->wake[1], "w", 1) < 0) {
                /* full: due to wake */
        }
}

/* ---- frames from a node ---- */

static bool on_hello(struct ns_link *k, const struct node_hdr *h, const unsigned char *p)
{
        struct node_server *s = k->s;
        uint32_t proto;
        char bin[SBX_PATH_MAX];

        if (h->type != NF_HELLO || h->len < 4 || h->len - 4 >= sizeof(bin))
                return false;
        memcpy(&proto, p, 4);
        if (le32toh(proto) != NODE_PROTOCOL)
                return false;
        memcpy(bin, p + 4, h->len - 4);
        bin[h->len - 4] = '\0';
        if (strlen(bin) != h->len - 4 || (bin[0] && bin[0] != '/'))
                return false;
        k->l.hello = true;
        pthread_mutex_lock(&s->lock);
        if (s->cfg->node_name[0] && strcmp(s->cfg->node_name, k->name) != 0) {
                pthread_mutex_unlock(&s->lock);
                log_warn("node link: node %s connected, but this daemon serves node %s: it stays idle", k->name,
                         s->cfg->node_name);
                return true;
        }
        for (struct ns_link *o = s->links; o; o = o->next)
                if (o != k && o->registered && o->running && strcmp(o->name, k->name) == 0)
                        nl_stop(&o->l); /* the same node again: the new link wins */
        k->registered = true;
        s->active = k;
        sbx_strlcpy(s->binary, bin, sizeof(s->binary));
        sbx_strlcpy(s->up_name, k->name, sizeof(s->up_name));
        s->down_since = 0;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        log_info("node link: node %s connected", k->name);
        wake_listener(s);
        return true;
}

static bool on_resp(struct ns_link *k, const struct node_hdr *h, const unsigned char *p)
{
        struct node_server *s = k->s;
        int32_t res;

        if (h->len < 4 || h->len - 4 >= SBX_PATH_MAX)
                return false;
        memcpy(&res, p, 4);
        res = (int32_t)le32toh((uint32_t)res);
        if (res > 0 || res < -4095)
                return false;
        pthread_mutex_lock(&s->lock);
        for (struct ns_req *q = s->reqs; q; q = q->next)
                if (q->id == h->stream && q->link == k && !q->done) {
                        q->done = true;
                        q->result = res;
                        memcpy(q->text, p + 4, h->len - 4);
                        q->text[h->len - 4] = '\0';
                        pthread_cond_broadcast(&s->cond);
                        break;
                }
        pthread_mutex_unlock(&s->lock);
        return true; /* an answer nobody waits for any more (timed out) */
}

static bool on_open(struct ns_link *k, const struct node_hdr *h, const unsigned char *p)
{
        struct node_server *s = k->s;
        struct node_open o;
        uint64_t cur = 0;
        int sv[2];

        if (h->len != sizeof(o) || h->stream == 0 || nl_stream_find(&k->l, h->stream))
                return false;
        memcpy(&o, p, sizeof(o));
        o.kind = le32toh(o.kind);
        o.epoch = le64toh(o.epoch);
        o.port = le32toh(o.port);
        if (o.kind < NODE_STREAM_RUNNER || o.kind > NODE_STREAM_PUBLISHED || !nl_key_ok(o.user, sizeof(o.user)) ||
            !nl_key_ok(o.session, sizeof(o.session)) || (h->stream & NODE_STREAM_CONTROL) ||
            (o.kind == NODE_STREAM_PUBLISHED ? o.port == 0 || o.port > 65535 : o.port != 0))
                return false;
        if (!k->registered || s->hooks.epoch(s->ud, o.user, o.session, &cur) < 0 || o.epoch != cur) {
                char key[140];
                snprintf(key, sizeof(key), "%s:%s", o.user, o.session);
                int64_t now = sbx_now_ms();
                if (k->registered && o.epoch != cur &&
                    (strcmp(key, k->refused_key) != 0 || now - k->refused_ms >= REFUSED_REPORT_MS)) {
                        sbx_strlcpy(k->refused_key, key, sizeof(k->refused_key));
                        k->refused_ms = now;
                        log_ctx(LOG_LEVEL_WARN, o.user, o.session, NULL,
                                "node link: node %s presented epoch %" PRIu64 ", the session is at %" PRIu64
                                ": refused (fenced)",
                                k->name, o.epoch, cur);
                        s->hooks.refused(s->ud, k->name, o.user, o.session, o.epoch, cur);
                }
                return nl_send(&k->l, NF_CLOSE, h->stream, NULL, 0, NULL, 0) == 0;
        }
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
                return nl_send(&k->l, NF_CLOSE, h->stream, NULL, 0, NULL, 0) == 0;
        if (!nl_stream_add(&k->l, h->stream, sv[0], o.kind, o.user, o.session)) {
                close(sv[1]);
                return nl_send(&k->l, NF_CLOSE, h->stream, NULL, 0, NULL, 0) == 0;
        }
        pthread_mutex_lock(&s->lock);
        bool gw_ready = s->gateway_ready;
        pthread_mutex_unlock(&s->lock);
        if (o.kind == NODE_STREAM_RUNNER)
                s->hooks.runner(s->ud, o.user, o.session, sv[1]);
        else if (o.kind == NODE_STREAM_PUBLISHED && gw_ready && s->hooks.published)
                s->hooks.published(s->ud, o.user, o.session, (int)o.port, sv[1]);
        else if (o.kind != NODE_STREAM_PUBLISHED && gw_ready)
                s->hooks.gateway(s->ud, o.user, o.session, (int)o.kind, sv[1]);
        else
                close(sv[1]); /* a gateway socket an agent still served for an earlier daemon */
        return true;
}

/* The node's connect for the egress proxy ended: its result goes first on
 * the stream's fd (4 bytes into an empty socket: it never blocks), then the
 * upstream's bytes. */
static bool on_connected(struct ns_link *k, const struct node_hdr *h, const unsigned char *p)
{
        struct nl_stream *st = nl_stream_find(&k->l, h->stream);
        int32_t res;

        if (h->len != sizeof(res) || !(h->stream & NODE_STREAM_CONTROL))
                return false;
        memcpy(&res, p, sizeof(res));
        res = (int32_t)le32toh((uint32_t)res);
        if (res > 0 || res < -4095)
                return false;
        if (!st) /* the proxy gave up meanwhile: the node's end goes too */
                return res < 0 || nl_send(&k->l, NF_CLOSE, h->stream, NULL, 0, NULL, 0) == 0;
        if (st->kind != NODE_STREAM_CONNECT || !st->connecting)
                return false; /* twice, or for a stream that is no connect */
        st->connecting = false;
        if (send(st->fd, &res, sizeof(res), MSG_DONTWAIT | MSG_NOSIGNAL) != sizeof(res) && res == 0)
                return nl_send(&k->l, NF_CLOSE, h->stream, NULL, 0, NULL, 0) == 0;
        if (res == 0 && st->eof) /* our close went before the node had the stream: again */
                return nl_send(&k->l, NF_CLOSE, h->stream, NULL, 0, NULL, 0) == 0;
        if (res < 0) { /* the node has no stream: nothing more comes; ours goes once the proxy closes */
                st->peer_closed = true;
                (void)nl_stream_settle(&k->l, st); /* now, if the proxy has closed already */
        }
        return true;
}

static bool ns_frame(struct nl *l, const struct node_hdr *h, const unsigned char *p, void *ud)
{
        struct ns_link *k = ud;

        if (!l->hello)
                return on_hello(k, h, p);
        if (h->type == NF_RESP)
                return on_resp(k, h, p);
        if (h->type == NF_OPEN)
                return on_open(k, h, p);
        if (h->type == NF_CONNECTED)
                return on_connected(k, h, p);
        return false;
}

/* Link thread: the connects other threads queued become streams and NF_OPENs. */
static int ns_poll_fill(struct nl *l, struct pollfd *pfd, int max, void *ud)
{
        struct ns_link *k = ud;
        struct ns_connect *c;

        (void)pfd;
        (void)max;
        pthread_mutex_lock(&k->s->lock);
        c = k->connects;
        k->connects = NULL;
        k->n_connects = 0;
        pthread_mutex_unlock(&k->s->lock);
        while (c) {
                struct ns_connect *next = c->next;
                struct nl_stream *st = nl_stream_add(l, c->id, c->fd, NODE_STREAM_CONNECT, c->c.user, c->c.session);
                if (st) { /* else fd closed: the proxy reads an end of stream before any result */
                        st->connecting = true;
                        (void)nl_send(l, NF_OPEN, c->id, &c->c, sizeof(c->c), NULL, 0); /* a failure ends the loop */
                }
                free(c);
                c = next;
        }
        return 0;
}

static void ns_stream_gone(struct nl *l, struct nl_stream *st, bool link_down, void *ud)
{
        struct ns_link *k = ud;
        (void)l;
        if (link_down && st->kind == NODE_STREAM_RUNNER)
                k->s->hooks.suspend(k->s->ud, st->user, st->session);
}

static const struct nl_handlers ns_handlers = {.frame = ns_frame,
                                               .poll_fill = ns_poll_fill,
                                               .stream_gone = ns_stream_gone};

static void *link_main(void *ud)
{
        struct ns_link *k = ud;
        struct node_server *s = k->s;
        struct sbx_error e = {0};
        const char *why = "";
        SSL *ssl = NULL;

        pthread_setname_np(pthread_self(), "sbx-node-link");
        nl_block_sigpipe();
        int r = nl_tls_handshake(s->tls, k->fd, NULL, &ssl, k->name, &e);
        if (r == 0 && strcmp(k->name, s->cfg->node_control_name) == 0) {
                /* the control daemon's own certificate is no node's */
                SSL_free(ssl);
                r = sbx_error_set(&e, -EACCES, 0, "a certificate named %s (the control daemon's) is no node's",
                                  k->name);
        }
        if (r < 0) {
                log_warn("node link: a node was refused: %s", e.msg);
                close(k->fd);
                pthread_mutex_lock(&s->lock);
                s->refused++;
                k->done = true;
                pthread_mutex_unlock(&s->lock);
                wake_listener(s);
                return NULL;
        }
        if (nl_init(&k->l, ssl, k->fd, s->cfg, &ns_handlers, k) < 0) {
                why = "out of memory";
        } else {
                pthread_mutex_lock(&s->lock);
                bool stop = s->stop;
                k->running = true;
                pthread_mutex_unlock(&s->lock);
                if (stop)
                        nl_stop(&k->l);
                nl_run(&k->l, &why);
        }
        pthread_mutex_lock(&s->lock);
        k->running = false; /* nl_destroy below: nobody may nl_stop it now */
        /* no new request goes to it; the waiting ones end now */
        for (struct ns_req *q = s->reqs; q; q = q->next)
                if (q->link == k && !q->done) {
                        q->done = true;
                        q->result = -ECONNRESET;
                }
        while (k->connects) { /* never opened: their proxies read an end of stream */
                struct ns_connect *c = k->connects;
                k->connects = c->next;
                close(c->fd);
                free(c);
        }
        k->n_connects = 0;
        if (s->active == k) {
                s->active = NULL;
                s->down_since = sbx_now_ms();
                sbx_strlcpy(s->down_name, k->name, sizeof(s->down_name));
        }
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        if (k->registered) {
                log_warn("node link: node %s disconnected: %s", k->name, why);
                pthread_mutex_lock(&s->lock);
                s->lost++;
                pthread_mutex_unlock(&s->lock);
        }
        nl_destroy(&k->l); /* runner streams: suspended, then closed */
        pthread_mutex_lock(&s->lock);
        k->done = true;
        pthread_mutex_unlock(&s->lock);
        wake_listener(s);
        return NULL;
}

/* Join and free finished links. Listener thread. */
static void reap_links(struct node_server *s)
{
        for (;;) {
                struct ns_link *k = NULL;
                pthread_mutex_lock(&s->lock);
                for (struct ns_link **pp = &s->links; *pp; pp = &(*pp)->next)
                        if ((*pp)->done) {
                                k = *pp;
                                *pp = k->next;
                                s->n_links--;
                                break;
                        }
                pthread_mutex_unlock(&s->lock);
                if (!k)
                        return;
                pthread_join(k->thread, NULL);
                free(k);
        }
}

static void *listen_main(void *ud)
{
        struct node_server *s = ud;

        pthread_setname_np(pthread_self(), "sbx-node");
        for (;;) {
                struct pollfd p[2] = {{.fd = s->lfd, .events = POLLIN}, {.fd = s->wake[0], .events = POLLIN}};
                char up[NODE_NAME_MAX + 1] = "", fence[NODE_NAME_MAX + 1] = "";
                bool ready;

                (void)poll(p, 2, 500);
                if (p[1].revents) {
                        char b[64];
                        while (read(s->wake[0], b, sizeof(b)) > 0)
                                ;
                }
                pthread_mutex_lock(&s->lock);
                bool stop = s->stop;
                ready = s->gateway_ready;
                if (s->up_name[0]) {
                        sbx_strlcpy(up, s->up_name, sizeof(up));
                        s->up_name[0] = '\0';
                }
                if (!s->active && s->down_since && sbx_now_ms() - s->down_since >= s->cfg->node_fence_ms) {
                        sbx_strlcpy(fence, s->down_name, sizeof(fence));
                        s->down_since = 0;
                }
                pthread_mutex_unlock(&s->lock);
                if (stop)
                        break;
                reap_links(s);
                if (up[0])
                        s->hooks.up(s->ud, up, ready);
                if (fence[0]) {
                        log_warn("node link: node %s has been away for %d ms: its sessions are fenced", fence,
                                 s->cfg->node_fence_ms);
                        s->hooks.fence(s->ud, fence);
                }
                if (!(p[0].revents & POLLIN))
                        continue;
                int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        continue; /* EMFILE and the like: the next round retries */
                struct ns_link *k = calloc(1, sizeof(*k));
                pthread_mutex_lock(&s->lock);
                if (!k || s->n_links >= NODE_MAX_LINKS) {
                        pthread_mutex_unlock(&s->lock);
                        log_warn("node link: too many node connections, one refused");
                        free(k);
                        close(fd);
                        continue;
                }
                k->s = s;
                k->fd = fd;
                if (pthread_create(&k->thread, NULL, link_main, k) != 0) {
                        pthread_mutex_unlock(&s->lock);
                        free(k);
                        close(fd);
                        continue;
                }
                k->next = s->links;
                s->links = k;
                s->n_links++;
                pthread_mutex_unlock(&s->lock);
        }
        return NULL;
}

/* ---- public ---- */

static int listen_on(const char *hostport, int *ret_port, struct sbx_error *err)
{
        char host[128];
        const char *colon = strrchr(hostport, ':');
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
        int fd, one = 1;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);

        if (!colon || (size_t)(colon - hostport) >= sizeof(host))
                return sbx_error_set(err, -EINVAL, 0, "node_listen must be host:port");
        memcpy(host, hostport, (size_t)(colon - hostport));
        host[colon - hostport] = '\0';
        if (host[0] == '[' && host[strlen(host) - 1] == ']') {
                memmove(host, host + 1, strlen(host));
                host[strlen(host) - 1] = '\0';
        }
        if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
                return sbx_error_set(err, -EINVAL, 0, "node_listen %s does not resolve", hostport);
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
                int r = sbx_error_set(err, -errno, 0, "cannot listen on node_listen %s: %m", hostport);
                if (fd >= 0)
                        close(fd);
                freeaddrinfo(ai);
                return r;
        }
        freeaddrinfo(ai);
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
                *ret_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                           : ((struct sockaddr_in *)&ss)->sin_port);
        return fd;
}

int node_server_new(const struct sbx_config *cfg, const struct node_server_hooks *hooks, void *ud,
                    struct node_server **ret, struct sbx_error *err)
{
        struct node_server *s = calloc(1, sizeof(*s));
        int r;

        if (!s)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        s->cfg = cfg;
        s->hooks = *hooks;
        s->ud = ud;
        s->lfd = s->wake[0] = s->wake[1] = -1;
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->cond, NULL);
        r = nl_tls_new(cfg, true, &s->tls, err);
        if (r < 0)
                goto fail;
        r = listen_on(cfg->node_listen, &s->port, err);
        if (r < 0)
                goto fail;
        s->lfd = r;
        if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
                r = sbx_error_set(err, -errno, 0, "pipe: %m");
                goto fail;
        }
        r = -pthread_create(&s->thread, NULL, listen_main, s);
        if (r < 0) {
                sbx_error_set(err, r, 0, "cannot start the node link thread");
                goto fail;
        }
        log_info("node link: listening on %s (TLS, node certificates of %s%s%s)", cfg->node_listen, cfg->node_ca,
                 cfg->node_crl[0] ? ", CRL " : "", cfg->node_crl);
        *ret = s;
        return 0;
fail:
        nl_tls_free(s->tls);
        if (s->lfd >= 0)
                close(s->lfd);
        for (int i = 0; i < 2; i++)
                if (s->wake[i] >= 0)
                        close(s->wake[i]);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
        return r;
}

void node_server_stop(struct node_server *s)
{
        if (!s)
                return;
        pthread_mutex_lock(&s->lock);
        bool stopped = s->stop;
        s->stop = true;
        pthread_cond_broadcast(&s->cond); /* requests waiting for a node give up */
        pthread_mutex_unlock(&s->lock);
        if (stopped)
                return;
        wake_listener(s);
        pthread_join(s->thread, NULL);
        for (;;) {
                pthread_mutex_lock(&s->lock);
                struct ns_link *k = s->links;
                if (k)
                        s->links = k->next;
                pthread_mutex_unlock(&s->lock);
                if (!k)
                        break;
                /* a link still in its handshake stops at its deadline */
                pthread_mutex_lock(&s->lock);
                bool running = k->running && !k->done;
                pthread_mutex_unlock(&s->lock);
                if (running)
                        nl_stop(&k->l);
                pthread_join(k->thread, NULL);
                free(k);
        }
}

void node_server_free(struct node_server *s)
{
        if (!s)
                return;
        node_server_stop(s);
        close(s->lfd);
        close(s->wake[0]);
        close(s->wake[1]);
        nl_tls_free(s->tls);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
}

void node_server_gateway_ready(struct node_server *s)
{
        pthread_mutex_lock(&s->lock);
        s->gateway_ready = true;
        pthread_mutex_unlock(&s->lock);
}

bool node_server_wait(struct node_server *s, int timeout_ms)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms);
        bool ok;

        pthread_mutex_lock(&s->lock);
        while (!s->active && !s->stop && pthread_cond_timedwait(&s->cond, &s->lock, &until) != ETIMEDOUT)
                ;
        ok = s->active != NULL;
        pthread_mutex_unlock(&s->lock);
        return ok;
}

bool node_server_connected(struct node_server *s, char *ret_name, size_t size)
{
        pthread_mutex_lock(&s->lock);
        bool ok = s->active != NULL;
        if (ok && ret_name)
                sbx_strlcpy(ret_name, s->active->name, size);
        pthread_mutex_unlock(&s->lock);
        return ok;
}

int node_server_port(struct node_server *s)
{
        return s->port;
}

uint64_t node_server_refused(struct node_server *s)
{
        pthread_mutex_lock(&s->lock);
        uint64_t n = s->refused;
        pthread_mutex_unlock(&s->lock);
        return n;
}

uint64_t node_server_links_lost(struct node_server *s)
{
        pthread_mutex_lock(&s->lock);
        uint64_t n = s->lost;
        pthread_mutex_unlock(&s->lock);
        return n;
}

int node_server_send_raw(struct node_server *s, const void *buf, size_t len)
{
        struct nl_qframe *f = malloc(sizeof(*f) + len);
        int r = -EHOSTUNREACH;

        if (!f)
                return -ENOMEM;
        f->next = NULL;
        f->len = len;
        memcpy(f->buf, buf, len);
        pthread_mutex_lock(&s->lock);
        struct ns_link *k = s->active;
        if (k && k->running) {
                pthread_mutex_lock(&k->l.lock);
                *k->l.q_tail = f;
                k->l.q_tail = &f->next;
                k->l.q_bytes += len;
                pthread_mutex_unlock(&k->l.lock);
                if (write(k->l.wake[1], "w", 1) < 0) {
                        /* full: due to wake */
                }
                f = NULL;
                r = 0;
        }
        pthread_mutex_unlock(&s->lock);
        free(f);
        return r;
}

/* Under s->lock: the link serving (user, session); with one node, the one connected. */
static struct ns_link *link_of_session_locked(struct node_server *s, const char *user, const char *session)
{
        (void)user;
        (void)session;
        return s->active;
}

struct node_link *node_server_link_of_session(struct node_server *srv, const char *user, const char *session)
{
        pthread_mutex_lock(&srv->lock);
        struct ns_link *k = link_of_session_locked(srv, user, session);
        pthread_mutex_unlock(&srv->lock);
        return (struct node_link *)k;
}

/* One request to the session's node, answered within NODE_REQ_TIMEOUT_MS
 * (a node not connected yet is waited for within the same deadline);
 * extra (n bytes) follows the struct in the frame. */
static int request_payload(struct node_server *s, const struct node_req *rq, const void *extra, size_t n,
                           char ret_text[SBX_PATH_MAX], struct sbx_error *err)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, NODE_REQ_TIMEOUT_MS);
        struct ns_req q = {0};
        struct node_req w = *rq;
        int r;

        w.op = htole32(w.op);
        w.flags = htole32(w.flags);
        w.epoch = htole64(w.epoch);
        pthread_mutex_lock(&s->lock);
        while (!link_of_session_locked(s, rq->user, rq->session) && !s->stop &&
               pthread_cond_timedwait(&s->cond, &s->lock, &until) != ETIMEDOUT)
                ;
        q.link = link_of_session_locked(s, rq->user, rq->session);
        if (!q.link || s->stop) {
                pthread_mutex_unlock(&s->lock);
                return sbx_error_set(err, -EHOSTUNREACH, 0, "no node agent is connected");
        }
        q.id = ++s->next_req ? s->next_req : ++s->next_req;
        r = nl_queue(&q.link->l, NF_REQ, q.id, &w, sizeof(w), extra, n);
        if (r < 0) {
                pthread_mutex_unlock(&s->lock);
                return sbx_error_set(err, r, 0, "cannot reach the node agent: %s", strerror(-r));
        }
        q.next = s->reqs;
        s->reqs = &q;
        while (!q.done && pthread_cond_timedwait(&s->cond, &s->lock, &until) != ETIMEDOUT)
                ;
        for (struct ns_req **pp = &s->reqs; *pp; pp = &(*pp)->next)
                if (*pp == &q) {
                        *pp = q.next;
                        break;
                }
        pthread_mutex_unlock(&s->lock);
        if (!q.done)
                return sbx_error_set(err, -ETIMEDOUT, 0, "the node agent did not answer in time");
        if (q.result < 0)
                return sbx_error_set(err, q.result, 0, "node agent: %s", q.text);
        if (ret_text)
                sbx_strlcpy(ret_text, q.text, SBX_PATH_MAX);
        return 0;
}

static int request(struct node_server *s, const struct node_req *rq, char ret_text[SBX_PATH_MAX], struct sbx_error *err)
{
        return request_payload(s, rq, NULL, 0, ret_text, err);
}

int node_server_publish(struct node_server *s, const char *user, const char *session, const int *ports, size_t n,
                        struct sbx_error *err)
{
        struct node_req rq = {.op = NODE_OP_PUBLISH, .flags = (uint32_t)n};
        uint32_t wire[NODE_PUBLISH_PER_SESSION];

        if (n > NODE_PUBLISH_PER_SESSION)
                return sbx_error_set(err, -E2BIG, 0, "at most %d published ports a session", NODE_PUBLISH_PER_SESSION);
        for (size_t i = 0; i < n; i++) {
                if (ports[i] <= 0 || ports[i] > 65535)
                        return sbx_error_set(err, -EINVAL, 0, "port %d out of range", ports[i]);
                wire[i] = htole32((uint32_t)ports[i]);
        }
        sbx_strlcpy(rq.user, user, sizeof(rq.user));
        sbx_strlcpy(rq.session, session, sizeof(rq.session));
        return request_payload(s, &rq, wire, n * sizeof(wire[0]), NULL, err);
}

int node_server_connect(struct node_server *s, const char *user, const char *session, const struct sockaddr *sa,
                        socklen_t len, int *ret_fd)
{
        struct ns_connect *c;
        struct ns_link *k;
        int sv[2];

        if (!nl_key_ok(user, 65) || !nl_key_ok(session, 65))
                return -EINVAL;
        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->c.kind = htole32(NODE_STREAM_CONNECT);
        if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
                c->c.family = htole16(4);
                c->c.port = htole16(ntohs(in->sin_port));
                memcpy(c->c.addr, &in->sin_addr, 4);
        } else if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
                c->c.family = htole16(6);
                c->c.port = htole16(ntohs(in6->sin6_port));
                memcpy(c->c.addr, &in6->sin6_addr, 16);
        } else {
                free(c);
                return -EAFNOSUPPORT;
        }
        if (le16toh(c->c.port) == 0) {
                free(c);
                return -EINVAL;
        }
        sbx_strlcpy(c->c.user, user, sizeof(c->c.user));
        sbx_strlcpy(c->c.session, session, sizeof(c->c.session));
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0) {
                int r = -errno;
                free(c);
                return r;
        }
        c->fd = sv[0];
        pthread_mutex_lock(&s->lock);
        k = link_of_session_locked(s, user, session);
        if (!k || s->stop || !k->running || k->n_connects >= NODE_CONNECTS_MAX) {
                int r = !k || s->stop || !k->running ? -EHOSTUNREACH : -EAGAIN;
                pthread_mutex_unlock(&s->lock);
                close(sv[0]);
                close(sv[1]);
                free(c);
                return r;
        }
        k->next_connect = (k->next_connect + 1) & ~NODE_STREAM_CONTROL;
        if (k->next_connect == 0)
                k->next_connect = 1;
        c->id = NODE_STREAM_CONTROL | k->next_connect;
        c->next = k->connects;
        k->connects = c;
        k->n_connects++;
        if (write(k->l.wake[1], "w", 1) < 0) { /* under the lock: k->running, so not destroyed yet */
                /* full: due to wake */
        }
        pthread_mutex_unlock(&s->lock);
        *ret_fd = sv[1];
        return 0;
}

int node_server_gateway(struct node_server *s, const char *user, const char *session, unsigned flags,
                        struct sbx_error *err)
{
        struct node_req rq = {.op = NODE_OP_GATEWAY, .flags = flags};
        sbx_strlcpy(rq.user, user, sizeof(rq.user));
        sbx_strlcpy(rq.session, session, sizeof(rq.session));
        return request(s, &rq, NULL, err);
}

static const char *ops_binary(void *node)
{
        struct node_server *s = node;
        if (!node_server_wait(s, NODE_REQ_TIMEOUT_MS))
                return NULL;
        return s->binary[0] ? s->binary : NULL;
}

static int ops_open(void *node, const char *user, const char *session, uint64_t epoch, bool adopt,
                    char ret_dir[SBX_PATH_MAX], struct sbx_error *err)
{
        struct node_req rq = {.op = adopt ? NODE_OP_ADOPT : NODE_OP_OPEN, .epoch = epoch};
        sbx_strlcpy(rq.user, user, sizeof(rq.user));
        sbx_strlcpy(rq.session, session, sizeof(rq.session));
        return request(node, &rq, ret_dir, err);
}

static void ops_drop(void *node, const char *user, const char *session)
{
        struct node_req rq = {.op = NODE_OP_DROP};
        struct sbx_error e = {0};
        sbx_strlcpy(rq.user, user, sizeof(rq.user));
        sbx_strlcpy(rq.session, session, sizeof(rq.session));
        if (request(node, &rq, NULL, &e) < 0)
                log_ctx(LOG_LEVEL_WARN, user, session, NULL, "cannot drop the session on its node: %s", e.msg);
}

static int ops_rekey(void *node, const char *from_user, const char *from_session, const char *to_user,
                     const char *to_session, uint64_t epoch, char ret_dir[SBX_PATH_MAX], struct sbx_error *err)
{
        struct node_req rq = {.op = NODE_OP_REKEY, .epoch = epoch};
        sbx_strlcpy(rq.user, from_user, sizeof(rq.user));
        sbx_strlcpy(rq.session, from_session, sizeof(rq.session));
        sbx_strlcpy(rq.user2, to_user, sizeof(rq.user2));
        sbx_strlcpy(rq.session2, to_session, sizeof(rq.session2));
        return request(node, &rq, ret_dir, err);
}

const struct node_ops node_server_ops = {
        .binary = ops_binary,
        .open = ops_open,
        .drop = ops_drop,
        .rekey = ops_rekey,
};
