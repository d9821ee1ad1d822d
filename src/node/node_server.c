/* node_server.c — the control daemon's end of the node link (node.h):
 * listens on node_listen, authenticates each node agent (node_link.c),
 * runs each link on a thread of its own, sends it requests for the runner
 * hub (node_server_ops) and turns each stream it opens into a socketpair
 * whose other end goes to the hub, once the session's epoch is checked.
 * The egress proxy's connects go the other way: node_server_connect queues
 * one on the session's link (s->lock), whose thread opens the stream
 * (poll_fill) and writes the node's NF_CONNECTED result first on it.
 *
 * Many nodes: each node (a certificate's common name) has an entry in
 * s->nodes with its link while connected; a second connection of the same
 * name replaces the first. Every session is placed on one node (the store's
 * session_nodes, through hooks.node_of/place): requests about it go to that
 * node's link, and streams about it from any other node are refused.
 *
 * Threads: "sbx-node" accepts, calls hooks->up for each node that
 * connected (the hub opens that node's sessions again: requests, so never
 * on a link thread) and fences each node gone longer than node_fence; one
 * "sbx-node-link" per connected node runs nl_run.
 * Locks: s->lock guards the link list, the node entries, the pending
 * requests and the fencing state; paired with s->cond (a request answered,
 * a node connected). A link's own lock (nl.lock) is taken under s->lock
 * (nl_queue), never the other way round. The placement hooks (the store)
 * are never called with s->lock held (node.h): the session's node is read
 * before the lock is taken, the counts after it is let go. */
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

struct node_link {
        struct node_server *s;
        struct node_link *next;
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
        struct node_link *link;
        bool done;
        int result;
        char text[SBX_PATH_MAX];
};

/* A node known since start: connected now (link), or away since down_since. */
struct ns_node {
        char name[NODE_NAME_MAX + 1];
        struct node_link *link; /* registered and running; NULL: away */
        int64_t since;          /* wall ms: connected (link) or went away */
        int64_t down_since;     /* monotonic ms it went; 0: connected, or fenced already */
        bool up_due;            /* hooks->up to call */
        bool fenced;
};

/* The gateway's sockets and published ports asked for a session not placed
 * yet (its Pod not bound): served once it is (ops_open). */
struct ns_gw_pending {
        struct ns_gw_pending *next;
        char user[65], session[65];
        unsigned flags;
        bool has_ports; /* node_server_publish was asked: ports (n_ports) */
        int *ports;
        size_t n_ports;
};
#define NS_GW_PENDING_MAX NODE_MAX_SESSIONS

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
        struct node_link *links;
        size_t n_links;
        struct ns_node nodes[NODE_MAX_NODES];
        size_t n_nodes;
        size_t n_up; /* nodes with a link */
        char binary[SBX_PATH_MAX];
        uint32_t next_req;
        struct ns_req *reqs;
        uint64_t refused;
        uint64_t lost;      /* links of registered nodes that ended */
        bool gateway_ready; /* hooks.gateway may be called (node_server_gateway_ready) */
        struct ns_gw_pending *gw_pending;
        size_t n_gw_pending;
};

static void wake_listener(struct node_server *s)
{
        if (write(s->wake[1], "w", 1) < 0) {
                /* full: due to wake */
        }
}

static struct ns_node *node_find_locked(struct node_server *s, const char *name)
{
        for (size_t i = 0; i < s->n_nodes; i++)
                if (strcmp(s->nodes[i].name, name) == 0)
                        return &s->nodes[i];
        return NULL;
}

/* An entry for name: an existing one, a free one, or a fenced one forgotten. */
static struct ns_node *node_add_locked(struct node_server *s, const char *name)
{
        struct ns_node *n = node_find_locked(s, name);
        if (n)
                return n;
        if (s->n_nodes == NODE_MAX_NODES) {
                size_t i = 0;
                while (i < s->n_nodes && (s->nodes[i].link || !s->nodes[i].fenced))
                        i++;
                if (i == s->n_nodes)
                        return NULL;
                s->nodes[i] = s->nodes[--s->n_nodes];
        }
        n = &s->nodes[s->n_nodes++];
        memset(n, 0, sizeof(*n));
        sbx_strlcpy(n->name, name, sizeof(n->name));
        return n;
}

/* The session's node ("" when it has none). */
static void node_of(struct node_server *s, const char *user, const char *session, char ret[NODE_NAME_MAX + 1])
{
        ret[0] = '\0';
        if (s->hooks.node_of(s->ud, user, session, ret) < 0)
                ret[0] = '\0';
}

/* The link of the node named name (a session's, node_of, read before the
 * lock: the store is not read under it), NULL if it is not connected (or
 * name is ""). Call with srv->lock held: the link stays valid while it is
 * (a link is freed only once it is no node's any more). A link's frames go
 * through nl_queue(&link->l, ...), under srv->lock as request() does. */
static struct node_link *link_of_node_locked(struct node_server *srv, const char *name)
{
        struct ns_node *n = name[0] ? node_find_locked(srv, name) : NULL;
        return n ? n->link : NULL;
}

/* ---- frames from a node ---- */

static bool on_hello(struct node_link *k, const struct node_hdr *h, const unsigned char *p)
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
        struct ns_node *n = node_add_locked(s, k->name);
        if (!n) {
                pthread_mutex_unlock(&s->lock);
                log_warn("node link: node %s connected, but %d nodes are known already: refused", k->name,
                         NODE_MAX_NODES);
                return false;
        }
        for (struct node_link *o = s->links; o; o = o->next)
                if (o != k && o->registered && o->running && strcmp(o->name, k->name) == 0)
                        nl_stop(&o->l); /* the same node again: the new link wins */
        k->registered = true;
        if (!n->link)
                s->n_up++;
        n->link = k;
        n->since = sbx_wall_ms();
        n->down_since = 0;
        n->fenced = false;
        n->up_due = true;
        sbx_strlcpy(s->binary, bin, sizeof(s->binary));
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        log_info("node link: node %s connected", k->name);
        wake_listener(s);
        return true;
}

static bool on_resp(struct node_link *k, const struct node_hdr *h, const unsigned char *p)
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

static bool on_open(struct node_link *k, const struct node_hdr *h, const unsigned char *p)
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
        char placed[NODE_NAME_MAX + 1] = "";
        if (k->registered)
                node_of(s, o.user, o.session, placed);
        bool misplaced = k->registered && strcmp(placed, k->name) != 0;
        if (!k->registered || s->hooks.epoch(s->ud, o.user, o.session, &cur) < 0 || o.epoch != cur || misplaced) {
                /* an old epoch says more (a fenced incarnation) than the placement */
                misplaced = misplaced && o.epoch == cur;
                char key[140];
                snprintf(key, sizeof(key), "%s:%s:%d", o.user, o.session, misplaced);
                int64_t now = sbx_now_ms();
                if (k->registered && (o.epoch != cur || misplaced) &&
                    (strcmp(key, k->refused_key) != 0 || now - k->refused_ms >= REFUSED_REPORT_MS)) {
                        sbx_strlcpy(k->refused_key, key, sizeof(k->refused_key));
                        k->refused_ms = now;
                        if (misplaced)
                                log_ctx(LOG_LEVEL_WARN, o.user, o.session, NULL,
                                        "node link: node %s presented the session, which is placed on %s: "
                                        "refused (fenced)",
                                        k->name, placed[0] ? placed : "no node");
                        else
                                log_ctx(LOG_LEVEL_WARN, o.user, o.session, NULL,
                                        "node link: node %s presented epoch %" PRIu64 ", the session is at %" PRIu64
                                        ": refused (fenced)",
                                        k->name, o.epoch, cur);
                        s->hooks.refused(s->ud, k->name, o.user, o.session, o.epoch, cur, misplaced ? placed : NULL);
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
static bool on_connected(struct node_link *k, const struct node_hdr *h, const unsigned char *p)
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
        struct node_link *k = ud;

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
        struct node_link *k = ud;
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
        struct node_link *k = ud;
        (void)l;
        if (link_down && st->kind == NODE_STREAM_RUNNER)
                k->s->hooks.suspend(k->s->ud, st->user, st->session);
}

static const struct nl_handlers ns_handlers = {.frame = ns_frame,
                                               .poll_fill = ns_poll_fill,
                                               .stream_gone = ns_stream_gone};

static void *link_main(void *ud)
{
        struct node_link *k = ud;
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
        struct ns_node *n = k->registered ? node_find_locked(s, k->name) : NULL;
        if (n && n->link == k) {
                n->link = NULL;
                s->n_up--;
                n->since = sbx_wall_ms();
                n->down_since = sbx_now_ms();
                n->up_due = false;
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
                struct node_link *k = NULL;
                pthread_mutex_lock(&s->lock);
                for (struct node_link **pp = &s->links; *pp; pp = &(*pp)->next)
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
                char up[NODE_MAX_NODES][NODE_NAME_MAX + 1], fence[NODE_MAX_NODES][NODE_NAME_MAX + 1];
                size_t n_up = 0, n_fence = 0;
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
                for (size_t i = 0; i < s->n_nodes; i++) {
                        struct ns_node *n = &s->nodes[i];
                        if (n->link && n->up_due) {
                                sbx_strlcpy(up[n_up++], n->name, sizeof(up[0]));
                                n->up_due = false;
                        }
                        if (!n->link && n->down_since && sbx_now_ms() - n->down_since >= s->cfg->node_fence_ms) {
                                sbx_strlcpy(fence[n_fence++], n->name, sizeof(fence[0]));
                                n->down_since = 0;
                                n->fenced = true;
                        }
                }
                pthread_mutex_unlock(&s->lock);
                if (stop)
                        break;
                reap_links(s);
                for (size_t i = 0; i < n_fence; i++) {
                        log_warn("node link: node %s has been away for %d ms: its sessions are fenced", fence[i],
                                 s->cfg->node_fence_ms);
                        s->hooks.fence(s->ud, fence[i]);
                }
                for (size_t i = 0; i < n_up; i++)
                        s->hooks.up(s->ud, up[i], ready);
                if (!(p[0].revents & POLLIN))
                        continue;
                int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        continue; /* EMFILE and the like: the next round retries */
                struct node_link *k = calloc(1, sizeof(*k));
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
                struct node_link *k = s->links;
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
        while (s->gw_pending) {
                struct ns_gw_pending *g = s->gw_pending;
                s->gw_pending = g->next;
                free(g->ports);
                free(g);
        }
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

/* Wait (s->lock held) until name is connected, or any node when name is
 * empty, or until. NULL: none. */
static struct ns_node *wait_node_locked(struct node_server *s, const char *name, const struct timespec *until)
{
        for (;;) {
                if (s->stop)
                        return NULL;
                if (name[0]) {
                        struct ns_node *n = node_find_locked(s, name);
                        if (n && n->link)
                                return n;
                } else {
                        for (size_t i = 0; i < s->n_nodes; i++)
                                if (s->nodes[i].link)
                                        return &s->nodes[i];
                }
                if (!until || pthread_cond_timedwait(&s->cond, &s->lock, until) == ETIMEDOUT)
                        return NULL;
        }
}

bool node_server_wait(struct node_server *s, int timeout_ms)
{
        return node_server_wait_node(s, "", timeout_ms);
}

bool node_server_wait_node(struct node_server *s, const char *name, int timeout_ms)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms);

        pthread_mutex_lock(&s->lock);
        bool ok = wait_node_locked(s, name ? name : "", &until) != NULL;
        pthread_mutex_unlock(&s->lock);
        return ok;
}

bool node_server_connected(struct node_server *s, char *ret_name, size_t size)
{
        pthread_mutex_lock(&s->lock);
        struct ns_node *n = wait_node_locked(s, "", NULL);
        if (n && ret_name)
                sbx_strlcpy(ret_name, n->name, size);
        pthread_mutex_unlock(&s->lock);
        return n != NULL;
}

bool node_server_node_connected(struct node_server *s, const char *name)
{
        pthread_mutex_lock(&s->lock);
        struct ns_node *n = node_find_locked(s, name);
        bool ok = n && n->link;
        pthread_mutex_unlock(&s->lock);
        return ok;
}

int node_server_list(struct node_server *s, struct node_status **ret, size_t *ret_n)
{
        pthread_mutex_lock(&s->lock);
        size_t n = s->n_nodes;
        struct node_status *v = calloc(n ? n : 1, sizeof(*v));
        if (!v) {
                pthread_mutex_unlock(&s->lock);
                return -ENOMEM;
        }
        int64_t now = sbx_now_ms(), wall = sbx_wall_ms();
        for (size_t i = 0; i < n; i++) {
                const struct ns_node *x = &s->nodes[i];
                sbx_strlcpy(v[i].name, x->name, sizeof(v[i].name));
                v[i].connected = x->link != NULL;
                v[i].fenced = x->fenced;
                v[i].since_ms = x->since;
                if (x->link)
                        v[i].heartbeat_ms = wall - (now - __atomic_load_n(&x->link->l.last_rx, __ATOMIC_RELAXED));
        }
        pthread_mutex_unlock(&s->lock);
        *ret = v;
        *ret_n = n;
        return 0;
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
        struct node_link *k = NULL;
        for (size_t i = 0; i < s->n_nodes && !k; i++) /* the first node connected */
                k = s->nodes[i].link;
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

/* One request to the node named node, answered within NODE_REQ_TIMEOUT_MS;
 * wait: a node not connected yet is waited for within the same deadline
 * (else -EHOSTUNREACH at once: the hub's walks over many sessions must not
 * wait for each session of a node that is away). extra (extra_len bytes)
 * follows the struct in the frame. */
static int request_payload(struct node_server *s, const char *node, bool wait, const struct node_req *rq,
                           const void *extra, size_t extra_len, char ret_text[SBX_PATH_MAX], struct sbx_error *err)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, NODE_REQ_TIMEOUT_MS);
        struct ns_req q = {0};
        struct node_req w = *rq;
        int r;

        if (!node[0])
                return sbx_error_set(err, -EHOSTUNREACH, 0, "the session is placed on no node");
        w.op = htole32(w.op);
        w.flags = htole32(w.flags);
        w.epoch = htole64(w.epoch);
        pthread_mutex_lock(&s->lock);
        struct ns_node *n = wait_node_locked(s, node, wait ? &until : NULL);
        if (!n) {
                pthread_mutex_unlock(&s->lock);
                return sbx_error_set(err, -EHOSTUNREACH, 0, "node %s is not connected", node);
        }
        q.id = ++s->next_req ? s->next_req : ++s->next_req;
        q.link = n->link;
        r = nl_queue(&q.link->l, NF_REQ, q.id, &w, sizeof(w), extra, extra_len);
        if (r < 0) {
                pthread_mutex_unlock(&s->lock);
                return sbx_error_set(err, r, 0, "cannot reach node %s: %s", node, strerror(-r));
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
                return sbx_error_set(err, -ETIMEDOUT, 0, "node %s did not answer in time", node);
        if (q.result < 0)
                return sbx_error_set(err, q.result, 0, "node %s: %s", node, q.text);
        if (ret_text)
                sbx_strlcpy(ret_text, q.text, SBX_PATH_MAX);
        return 0;
}

static int request(struct node_server *s, const char *node, bool wait, const struct node_req *rq,
                   char ret_text[SBX_PATH_MAX], struct sbx_error *err)
{
        return request_payload(s, node, wait, rq, NULL, 0, ret_text, err);
}

/* The pending entry of a session not placed yet, made if create (NULL when
 * there is none, or no room). s->lock held. */
static struct ns_gw_pending *gw_pending_find_locked(struct node_server *s, const char *user, const char *session,
                                                    bool create)
{
        struct ns_gw_pending *g;

        for (g = s->gw_pending; g; g = g->next)
                if (strcmp(g->user, user) == 0 && strcmp(g->session, session) == 0)
                        return g;
        if (!create || s->n_gw_pending >= NS_GW_PENDING_MAX)
                return NULL;
        g = calloc(1, sizeof(*g));
        if (!g)
                return NULL;
        sbx_strlcpy(g->user, user, sizeof(g->user));
        sbx_strlcpy(g->session, session, sizeof(g->session));
        g->next = s->gw_pending;
        s->gw_pending = g;
        s->n_gw_pending++;
        return g;
}

/* Take the session's pending entry out (the caller frees it and its
 * ports); NULL when there is none. s->lock held. */
static struct ns_gw_pending *gw_pending_take_locked(struct node_server *s, const char *user, const char *session)
{
        for (struct ns_gw_pending **pp = &s->gw_pending; *pp; pp = &(*pp)->next) {
                struct ns_gw_pending *g = *pp;
                if (strcmp(g->user, user) == 0 && strcmp(g->session, session) == 0) {
                        *pp = g->next;
                        s->n_gw_pending--;
                        return g;
                }
        }
        return NULL;
}

static void gw_pending_free(struct ns_gw_pending *g)
{
        if (g)
                free(g->ports);
        free(g);
}

/* Remember the gateway flags of a session not placed yet; flags 0 (the
 * sockets closed, the session going) forgets the entry, its ports too.
 * s->lock held. */
static void gw_pending_locked(struct node_server *s, const char *user, const char *session, unsigned flags)
{
        if (!flags) {
                gw_pending_free(gw_pending_take_locked(s, user, session));
                return;
        }
        struct ns_gw_pending *g = gw_pending_find_locked(s, user, session, true);
        if (g)
                g->flags = flags;
}

int node_server_publish(struct node_server *s, const char *user, const char *session, const int *ports, size_t n,
                        struct sbx_error *err)
{
        struct node_req rq = {.op = NODE_OP_PUBLISH, .flags = (uint32_t)n};
        uint32_t wire[NODE_PUBLISH_PER_SESSION];
        char node[NODE_NAME_MAX + 1];

        if (n > NODE_PUBLISH_PER_SESSION)
                return sbx_error_set(err, -E2BIG, 0, "at most %d published ports a session", NODE_PUBLISH_PER_SESSION);
        for (size_t i = 0; i < n; i++) {
                if (ports[i] <= 0 || ports[i] > 65535)
                        return sbx_error_set(err, -EINVAL, 0, "port %d out of range", ports[i]);
                wire[i] = htole32((uint32_t)ports[i]);
        }
        node_of(s, user, session, node);
        if (!node[0]) { /* not placed yet (a Pod kube-scheduler has still to bind): published once it is */
                int *copy = n ? malloc(n * sizeof(*copy)) : NULL;
                if (n && !copy)
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                if (n)
                        memcpy(copy, ports, n * sizeof(*copy));
                pthread_mutex_lock(&s->lock);
                struct ns_gw_pending *g = gw_pending_find_locked(s, user, session, n > 0);
                if (g) {
                        free(g->ports);
                        g->ports = copy;
                        g->n_ports = n;
                        g->has_ports = true;
                        copy = NULL;
                }
                pthread_mutex_unlock(&s->lock);
                free(copy);
                return g || !n ? 0 : sbx_error_set(err, -EAGAIN, 0, "too many sessions wait for their node");
        }
        sbx_strlcpy(rq.user, user, sizeof(rq.user));
        sbx_strlcpy(rq.session, session, sizeof(rq.session));
        return request_payload(s, node, n > 0, &rq, wire, n * sizeof(wire[0]), NULL, err);
}

int node_server_connect(struct node_server *s, const char *user, const char *session, const struct sockaddr *sa,
                        socklen_t len, int *ret_fd)
{
        struct ns_connect *c;
        struct node_link *k;
        char node[NODE_NAME_MAX + 1];
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
        node_of(s, user, session, node);
        pthread_mutex_lock(&s->lock);
        k = link_of_node_locked(s, node);
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

/* Where a new container of the session goes (an engine that does not
 * place containers itself): node_name; else its node if still connected
 * (a session keeps its node while it can); else the connected node with the
 * fewest sessions (counted in the store, after the lock: placement is never
 * read under it). A node is waited for within NODE_REQ_TIMEOUT_MS. */
static int choose_node(struct node_server *s, const char *user, const char *session, char ret[NODE_NAME_MAX + 1],
                       struct sbx_error *err)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, NODE_REQ_TIMEOUT_MS);
        char cur[NODE_NAME_MAX + 1], up[NODE_MAX_NODES][NODE_NAME_MAX + 1];
        size_t n_up = 0, best = 0;

        if (s->cfg->node_name[0]) {
                sbx_strlcpy(ret, s->cfg->node_name, NODE_NAME_MAX + 1);
                return 0;
        }
        node_of(s, user, session, cur);
        pthread_mutex_lock(&s->lock);
        struct ns_node *n = cur[0] ? node_find_locked(s, cur) : NULL;
        if (n && n->link) {
                pthread_mutex_unlock(&s->lock);
                sbx_strlcpy(ret, cur, NODE_NAME_MAX + 1);
                return 0;
        }
        if (!wait_node_locked(s, "", &until)) {
                pthread_mutex_unlock(&s->lock);
                return sbx_error_set(err, -EHOSTUNREACH, 0, "no node agent is connected");
        }
        for (size_t i = 0; i < s->n_nodes; i++)
                if (s->nodes[i].link)
                        sbx_strlcpy(up[n_up++], s->nodes[i].name, NODE_NAME_MAX + 1);
        pthread_mutex_unlock(&s->lock);
        for (size_t i = 0; i < n_up; i++) {
                size_t c = s->hooks.placed(s->ud, up[i]);
                if (i == 0 || c < best) {
                        best = c;
                        sbx_strlcpy(ret, up[i], NODE_NAME_MAX + 1);
                }
        }
        return 0;
}


int node_server_gateway(struct node_server *s, const char *user, const char *session, unsigned flags,
                        struct sbx_error *err)
{
        struct node_req rq = {.op = NODE_OP_GATEWAY, .flags = flags};
        char name[NODE_NAME_MAX + 1] = "", placed[NODE_NAME_MAX + 1];

        node_of(s, user, session, placed);
        pthread_mutex_lock(&s->lock);
        if (!placed[0]) {
                /* not placed yet (a Pod kube-scheduler has still to bind): served once it is */
                gw_pending_locked(s, user, session, flags);
                pthread_mutex_unlock(&s->lock);
                return 0;
        }
        struct node_link *k = link_of_node_locked(s, placed);
        if (k)
                sbx_strlcpy(name, k->name, sizeof(name));
        pthread_mutex_unlock(&s->lock);
        if (!name[0]) /* nothing to stop where nothing is served */
                return flags ? sbx_error_set(err, -EHOSTUNREACH, 0, "the session's node is not connected") : 0;
        sbx_strlcpy(rq.user, user, sizeof(rq.user));
        sbx_strlcpy(rq.session, session, sizeof(rq.session));
        return request(s, name, false, &rq, NULL, err);
}

static const char *ops_binary(void *node)
{
        struct node_server *s = node;
        if (!node_server_wait(s, NODE_REQ_TIMEOUT_MS))
                return NULL;
        return s->binary[0] ? s->binary : NULL;
}

static int ops_open(void *node, const char *user, const char *session, uint64_t epoch, enum node_open_mode mode,
                    const char *where, char ret_dir[SBX_PATH_MAX], struct sbx_error *err)
{
        struct node_server *s = node;
        struct node_req rq = {.op = mode == NODE_OPEN_ADOPT ? NODE_OP_ADOPT : NODE_OP_OPEN, .epoch = epoch};
        char name[NODE_NAME_MAX + 1] = "";
        bool guessed = false;
        int r;

        if (where && where[0]) {
                sbx_strlcpy(name, where, sizeof(name)); /* the engine placed it (kube-scheduler) */
        } else if (mode == NODE_OPEN_NEW) {
                r = choose_node(s, user, session, name, err);
                if (r < 0)
                        return r;
        } else {
                node_of(s, user, session, name);
                /* a session from before placements were kept (0031): the node there was, if it has it */
                guessed = !name[0];
                if (!name[0] && s->cfg->node_name[0])
                        sbx_strlcpy(name, s->cfg->node_name, sizeof(name));
                else if (!name[0] && !node_server_connected(s, name, sizeof(name)))
                        return sbx_error_set(err, -EHOSTUNREACH, 0, "no node agent is connected");
        }
        /* placed before the node listens: its first stream must find it there */
        r = s->hooks.place(s->ud, user, session, name);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot record the session's node: %s", strerror(-r));
        sbx_strlcpy(rq.user, user, sizeof(rq.user));
        sbx_strlcpy(rq.session, session, sizeof(rq.session));
        r = request(s, name, mode == NODE_OPEN_NEW, &rq, ret_dir, err);
        if (r < 0 && guessed)
                (void)s->hooks.place(s->ud, user, session, ""); /* not there after all */
        if (r < 0 || mode != NODE_OPEN_NEW)
                return r;
        pthread_mutex_lock(&s->lock);
        struct ns_gw_pending *g = gw_pending_take_locked(s, user, session);
        pthread_mutex_unlock(&s->lock);
        if (g && g->flags) /* asked for before the session had its node */
                r = node_server_gateway(s, user, session, g->flags, err);
        if (g && g->has_ports && r == 0)
                r = node_server_publish(s, user, session, g->ports, g->n_ports, err);
        gw_pending_free(g);
        return r;
}

static void ops_drop(void *node, const char *user, const char *session)
{
        struct node_server *s = node;
        struct node_req rq = {.op = NODE_OP_DROP};
        struct sbx_error e = {0};
        char name[NODE_NAME_MAX + 1];

        pthread_mutex_lock(&s->lock);
        gw_pending_locked(s, user, session, 0);
        pthread_mutex_unlock(&s->lock);
        node_of(s, user, session, name);
        if (!name[0])
                return;
        sbx_strlcpy(rq.user, user, sizeof(rq.user));
        sbx_strlcpy(rq.session, session, sizeof(rq.session));
        if (request(s, name, false, &rq, NULL, &e) < 0)
                log_ctx(LOG_LEVEL_WARN, user, session, NULL, "cannot drop the session on its node: %s", e.msg);
        (void)s->hooks.place(s->ud, user, session, "");
}

static int ops_rekey(void *node, const char *from_user, const char *from_session, const char *to_user,
                     const char *to_session, uint64_t epoch, char ret_dir[SBX_PATH_MAX], struct sbx_error *err)
{
        struct node_server *s = node;
        struct node_req rq = {.op = NODE_OP_REKEY, .epoch = epoch};
        char name[NODE_NAME_MAX + 1];
        int r;

        /* the slot's node; once moved (a claim finished again after a restart), the target's */
        node_of(s, from_user, from_session, name);
        if (!name[0])
                node_of(s, to_user, to_session, name);
        if (!name[0] && s->cfg->node_name[0])
                sbx_strlcpy(name, s->cfg->node_name, sizeof(name));
        else if (!name[0] && !node_server_connected(s, name, sizeof(name)))
                return sbx_error_set(err, -EHOSTUNREACH, 0, "no node agent is connected");
        r = s->hooks.place(s->ud, to_user, to_session, name);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot record the session's node: %s", strerror(-r));
        sbx_strlcpy(rq.user, from_user, sizeof(rq.user));
        sbx_strlcpy(rq.session, from_session, sizeof(rq.session));
        sbx_strlcpy(rq.user2, to_user, sizeof(rq.user2));
        sbx_strlcpy(rq.session2, to_session, sizeof(rq.session2));
        /* pool recovery: the claim's node is waited for */
        r = request(s, name, true, &rq, ret_dir, err);
        if (r == 0 && (strcmp(from_user, to_user) != 0 || strcmp(from_session, to_session) != 0))
                (void)s->hooks.place(s->ud, from_user, from_session, "");
        return r;
}

static bool ops_placed_on(void *node, const char *user, const char *session, const char *name)
{
        char cur[NODE_NAME_MAX + 1];
        node_of(node, user, session, cur);
        return strcmp(cur, name) == 0;
}

const struct node_ops node_server_ops = {
        .binary = ops_binary,
        .open = ops_open,
        .drop = ops_drop,
        .rekey = ops_rekey,
        .placed_on = ops_placed_on,
};
