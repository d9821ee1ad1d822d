/* node_server.c — the control daemon's end of the node link (node.h):
 * listens on node.listen, authenticates each node agent (node_link.c),
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
 * on a link thread) and fences each node gone longer than node.fence; one
 * "sbx-node-link" per connected node runs nl_run.
 * Locks: s->lock guards the link list, the node entries, the pending
 * requests and the fencing state; paired with s->cond (a request answered,
 * a node connected). A link's own lock (nl.lock) is taken under s->lock
 * (nl_queue), never the other way round. The placement hooks (the store)
 * are never called with s->lock held (node.h): the session's node is read
 * before the lock is taken, the counts after it is let go.
 *
 * This file keeps the links (listening, the handshake, a thread per node,
 * the streams a node opens, fencing); node_server_ops.c what is asked of a
 * node over them; node_server_internal.h the state both share. */
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

#include "node_server_internal.h"
#include "sandboxd/log.h"

#define REFUSED_REPORT_MS 60000 /* one session's refused streams: one log line and audit row per minute */

static void wake_listener(struct node_server *s)
{
        if (write(s->wake[1], "w", 1) < 0) {
                /* full: due to wake */
        }
}

struct ns_node *node_find_locked(struct node_server *s, const char *name)
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
void node_of(struct node_server *s, const char *user, const char *session, char ret[NODE_NAME_MAX + 1])
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
struct node_link *link_of_node_locked(struct node_server *srv, const char *name)
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
                return sbx_error_set(err, -EINVAL, 0, "node.listen must be host:port");
        memcpy(host, hostport, (size_t)(colon - hostport));
        host[colon - hostport] = '\0';
        if (host[0] == '[' && host[strlen(host) - 1] == ']') {
                memmove(host, host + 1, strlen(host));
                host[strlen(host) - 1] = '\0';
        }
        if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
                return sbx_error_set(err, -EINVAL, 0, "node.listen %s does not resolve", hostport);
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
                int r = sbx_error_set(err, -errno, 0, "cannot listen on node.listen %s: %m", hostport);
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
                /* a link still in its handshake stops at its deadline. nl_stop under
                 * s->lock: its thread clears running under it before nl_destroy, so a
                 * link seen running is not being destroyed (checked, then stopped
                 * outside the lock, it was: TSan, stress_node) */
                pthread_mutex_lock(&s->lock);
                if (k->running && !k->done)
                        nl_stop(&k->l);
                pthread_mutex_unlock(&s->lock);
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

struct ns_node *wait_node_locked(struct node_server *s, const char *name, const struct timespec *until)
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
