/* node_server_ops.c — what the control daemon asks of its nodes, over the
 * links node_server.c keeps: one request answered within
 * NODE_REQ_TIMEOUT_MS (request_payload), where a new session goes
 * (choose_node: the connected node with the fewest sessions, or
 * node.name), the gateway's sockets and published ports (queued for a
 * session not placed yet, served once it is), the egress proxy's connects,
 * and the runner hub's node_ops (open, adopt, drop, rekey). Locks as
 * node_server.c's header says: the placement hooks are never called with
 * s->lock held. */
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
 * place containers itself): node.name; else its node if still connected
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
