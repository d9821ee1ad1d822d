/* node_agent.c — `sandboxd node`: the node part alone (node.h). It dials
 * the control daemon (node.connect) over mutually authenticated TLS, makes
 * and listens in the session directories the control opens under
 * {data_dir}/runner, checks every connection to a runner.sock where the
 * check means something (hub_peer.h: SO_PEERCRED and /proc of this
 * host), and relays each accepted runner connection as a stream, with the
 * session's epoch. It also listens on the sessions' published ports (its
 * own publish_ip, NODE_OP_PUBLISH), relaying each client as a stream, and
 * makes the egress proxy's connects (NF_OPEN from the control) to exactly
 * the address given, non-blocking, each with its deadline. A lost link is
 * dialled again with a backoff; the sessions and their listeners stay (a
 * runner that connects meanwhile waits in the backlog, and retries on its
 * own).
 *
 * The state of the link is in {data_dir}/link ("up NAME" or "down"), its
 * mtime refreshed every LINK_TOUCH_MS while the loop turns: what a
 * Kubernetes probe reads (deploy/kubernetes/node-agent.yaml).
 *
 * Threads: one. The link loop (nl_run) also polls the listeners and the
 * connects in flight (poll_fill / poll_ready; poll_fill ends those past
 * their deadline) and answers requests in its frame handler. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "node_internal.h"
#include "sandboxd/log.h"
#include "sandboxd/hub_dir.h"
#include "sandboxd/hub_peer.h"
#include "sandboxd/runner_proto.h"

#define IMPOSTOR_LOG_MS 60000
#define BACKOFF_MAX_MS 5000
#define LINK_TOUCH_MS 5000
#define LINK_FILE "link"

struct na_session {
        struct na_session *next;
        char user[65], session[65];
        uint64_t epoch;
        int dirfd, lfd;
        int egress_lfd, fwd_lfd; /* the gateway's sockets (NODE_OP_GATEWAY); -1: not served */
        struct na_pub {
                int port, fd;
        } * pubs; /* published ports (NODE_OP_PUBLISH), on this node's publish_ip */
        size_t n_pubs;
        struct hub_peer peer;
        uint64_t impostors, impostors_said;
        int64_t impostors_said_ms;
};

struct node_agent {
        const struct sbx_config *cfg;
        volatile sig_atomic_t *stop;
        char root[SBX_PATH_MAX];
        char binary[SBX_PATH_MAX];
        char link_path[SBX_PATH_MAX];
        int64_t link_touched_ms;
        struct na_session *sessions;
        size_t n_sessions;
        size_t n_pubs; /* published ports of all sessions */
        uint32_t next_stream;
        /* the egress proxy's connects in flight (NODE_STREAM_CONNECT) */
        struct na_connect {
                struct na_connect *next;
                uint32_t id;
                int fd;
                int64_t deadline; /* monotonic ms */
                char user[65], session[65];
        } * connects;
        size_t n_connects;
        /* poll_fill's order, for poll_ready: which session, which socket */
        struct na_polled {
                struct na_session *s;
                uint32_t kind;        /* NODE_STREAM_* */
                int port;             /* NODE_STREAM_PUBLISHED */
                struct na_connect *c; /* NODE_STREAM_CONNECT */
        } * polled;
        size_t n_polled;
};

static struct na_session *find(struct node_agent *a, const char *user, const char *session)
{
        for (struct na_session *s = a->sessions; s; s = s->next)
                if (strcmp(s->user, user) == 0 && strcmp(s->session, session) == 0)
                        return s;
        return NULL;
}

static void session_free(struct node_agent *a, struct na_session *s)
{
        for (struct na_session **pp = &a->sessions; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                        *pp = s->next;
                        a->n_sessions--;
                        break;
                }
        if (s->lfd >= 0)
                close(s->lfd);
        if (s->egress_lfd >= 0)
                close(s->egress_lfd);
        if (s->fwd_lfd >= 0)
                close(s->fwd_lfd);
        if (s->dirfd >= 0)
                close(s->dirfd);
        for (size_t i = 0; i < s->n_pubs; i++)
                close(s->pubs[i].fd);
        a->n_pubs -= s->n_pubs;
        free(s->pubs);
        free(s);
}

static bool has_dir(struct node_agent *a, const char *user, const char *session)
{
        char hash[33], path[SBX_PATH_MAX];
        struct stat st;

        return hub_dir_key(user, session, hash) == 0 &&
               snprintf(path, sizeof(path), "%s/%s", a->root, hash) < (int)sizeof(path) && lstat(path, &st) == 0 &&
               S_ISDIR(st.st_mode);
}

static const char *usable_binary(struct node_agent *a)
{
        struct stat st;
        if (stat(a->binary, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022) ||
            !(st.st_mode & 0001))
                return "";
        return a->binary;
}

static int respond(struct nl *l, uint32_t id, int result, const char *text)
{
        int32_t r = (int32_t)htole32((uint32_t)result);
        size_t n = text ? strnlen(text, SBX_PATH_MAX - 1) : 0;
        return nl_send(l, NF_RESP, id, &r, sizeof(r), text, n);
}

static int op_open(struct node_agent *a, const struct node_req *rq, bool adopt, char dir[SBX_PATH_MAX],
                   struct sbx_error *err)
{
        struct na_session *s = find(a, rq->user, rq->session);
        int dfd, lfd, r;

        if (s) {
                s->epoch = rq->epoch;
                char hash[33];
                if (hub_dir_key(s->user, s->session, hash) < 0)
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                snprintf(dir, SBX_PATH_MAX, "%s/%s", a->root, hash);
                return 0;
        }
        if (a->n_sessions >= NODE_MAX_SESSIONS)
                return sbx_error_set(err, -EMFILE, 0, "this node serves %d sessions already", NODE_MAX_SESSIONS);
        r = hub_dir_listen(a->root, rq->user, rq->session, !adopt, &dfd, &lfd, dir, err);
        if (r < 0)
                return r;
        s = calloc(1, sizeof(*s));
        if (!s) {
                close(dfd);
                close(lfd);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        sbx_strlcpy(s->user, rq->user, sizeof(s->user));
        sbx_strlcpy(s->session, rq->session, sizeof(s->session));
        s->epoch = rq->epoch;
        s->dirfd = dfd;
        s->lfd = lfd;
        s->egress_lfd = s->fwd_lfd = -1;
        (void)hub_peer_load(dfd, &s->peer); /* the runner an earlier agent (or daemon) accepted */
        s->next = a->sessions;
        a->sessions = s;
        a->n_sessions++;
        return 0;
}

/* Serve (or stop) one of the gateway's sockets in the session's directory. */
static int gw_socket(struct na_session *s, int *lfd, const char *name, bool on, struct sbx_error *err)
{
        if (on && *lfd < 0) {
                int r = hub_dir_listen_name(s->dirfd, name, lfd);
                if (r < 0)
                        return sbx_error_set(err, r, 0, "cannot listen on %s: %s", name, strerror(-r));
        } else if (!on && *lfd >= 0) {
                close(*lfd);
                *lfd = -1;
                (void)unlinkat(s->dirfd, name, 0);
        }
        return 0;
}

static int op_gateway(struct node_agent *a, const struct node_req *rq, struct sbx_error *err)
{
        struct na_session *s = find(a, rq->user, rq->session);
        int r;

        if (!s)
                return rq->flags ? sbx_error_set(err, -ENOENT, 0, "the node does not serve the session") : 0;
        r = gw_socket(s, &s->fwd_lfd, RP_FWD_SOCKET_NAME, rq->flags & NODE_GW_FWD, err);
        if (r == 0)
                r = gw_socket(s, &s->egress_lfd, RP_EGRESS_SOCKET_NAME, rq->flags & NODE_GW_EGRESS, err);
        return r;
}

/* Listen on this node's publish_ip:port (the gateway's host_listen, on the node). */
static int publish_listen(struct node_agent *a, int port, struct sbx_error *err)
{
        return sbx_listen_tcp(a->cfg->publish_ip, port, err);
}

/* Listen on exactly these ports for the session: the ones kept stay, new
 * ones open first (a port taken fails the request and changes nothing), then
 * the ones no longer wanted close. */
static int op_publish(struct node_agent *a, const struct node_req *rq, const unsigned char *p, struct sbx_error *err)
{
        struct na_session *s = find(a, rq->user, rq->session);
        size_t n = rq->flags;
        struct na_pub *next = NULL;
        int r = 0;

        if (!s)
                return n ? sbx_error_set(err, -ENOENT, 0, "the node does not serve the session") : 0;
        if (a->n_pubs - s->n_pubs + n > NODE_PUBLISH_MAX)
                return sbx_error_set(err, -EMFILE, 0, "this node publishes %d ports already", NODE_PUBLISH_MAX);
        if (n && !(next = calloc(n, sizeof(*next))))
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        for (size_t i = 0; i < n; i++) {
                uint32_t v;
                memcpy(&v, p + sizeof(*rq) + 4 * i, 4);
                next[i] = (struct na_pub){.port = (int)le32toh(v), .fd = -1};
                for (size_t j = 0; j < i; j++)
                        if (next[j].port == next[i].port)
                                r = sbx_error_set(err, -EINVAL, 0, "port %d twice", next[i].port);
                for (size_t j = 0; j < s->n_pubs && r == 0; j++)
                        if (s->pubs[j].port == next[i].port)
                                next[i].fd = s->pubs[j].fd;
                if (r == 0 && next[i].fd < 0) {
                        int fd = publish_listen(a, next[i].port, err);
                        if (fd < 0)
                                r = fd;
                        else
                                next[i].fd = fd;
                }
                if (r < 0) {
                        for (size_t j = 0; j <= i; j++) { /* the new ones go, the kept ones stay */
                                bool kept = false;
                                for (size_t k = 0; k < s->n_pubs; k++)
                                        kept |= s->pubs[k].fd == next[j].fd;
                                if (!kept && next[j].fd >= 0)
                                        close(next[j].fd);
                        }
                        free(next);
                        return r;
                }
        }
        for (size_t k = 0; k < s->n_pubs; k++) {
                bool kept = false;
                for (size_t j = 0; j < n; j++)
                        kept |= next[j].fd == s->pubs[k].fd;
                if (!kept)
                        close(s->pubs[k].fd);
        }
        a->n_pubs = a->n_pubs - s->n_pubs + n;
        free(s->pubs);
        s->pubs = next;
        s->n_pubs = n;
        return 0;
}

static bool on_req(struct node_agent *a, struct nl *l, const struct node_hdr *h, const unsigned char *p)
{
        struct node_req rq;
        struct sbx_error e = {0};
        char dir[SBX_PATH_MAX] = "";
        int r = 0;

        if (h->len < sizeof(rq) || h->stream == 0)
                return false;
        memcpy(&rq, p, sizeof(rq));
        rq.op = le32toh(rq.op);
        rq.flags = le32toh(rq.flags);
        rq.epoch = le64toh(rq.epoch);
        /* only a publish carries its ports after the struct, each 1-65535 */
        if (rq.op == NODE_OP_PUBLISH) {
                if (rq.flags > NODE_PUBLISH_PER_SESSION || h->len != sizeof(rq) + 4 * (size_t)rq.flags)
                        return false;
                for (uint32_t i = 0; i < rq.flags; i++) {
                        uint32_t v;
                        memcpy(&v, p + sizeof(rq) + 4 * i, 4);
                        if (le32toh(v) == 0 || le32toh(v) > 65535)
                                return false;
                }
        } else if (h->len != sizeof(rq)) {
                return false;
        }
        if (!nl_key_ok(rq.user, sizeof(rq.user)) || !nl_key_ok(rq.session, sizeof(rq.session)))
                return false;
        if (rq.op == NODE_OP_OPEN || rq.op == NODE_OP_ADOPT) {
                r = op_open(a, &rq, rq.op == NODE_OP_ADOPT, dir, &e);
        } else if (rq.op == NODE_OP_DROP) {
                struct na_session *s = find(a, rq.user, rq.session);
                if (s)
                        session_free(a, s);
                hub_dir_remove(a->root, rq.user, rq.session);
        } else if (rq.op == NODE_OP_REKEY) {
                if (!nl_key_ok(rq.user2, sizeof(rq.user2)) || !nl_key_ok(rq.session2, sizeof(rq.session2)))
                        return false;
                struct na_session *s = find(a, rq.user, rq.session), *old = find(a, rq.user2, rq.session2);
                /* renamed before (a restarted control daemon finishing a claim again): it stays served */
                bool done = old && !s && !has_dir(a, rq.user, rq.session);
                if (old && !done)
                        session_free(a, old); /* the target's stale one (an earlier container's) */
                r = hub_dir_rename(a->root, rq.user, rq.session, rq.user2, rq.session2, dir, &e);
                if (r == 0 && done)
                        old->epoch = rq.epoch;
                if (r == 0 && s) {
                        sbx_strlcpy(s->user, rq.user2, sizeof(s->user));
                        sbx_strlcpy(s->session, rq.session2, sizeof(s->session));
                        s->epoch = rq.epoch;
                }
        } else if (rq.op == NODE_OP_GATEWAY) {
                if (rq.flags & ~(NODE_GW_EGRESS | NODE_GW_FWD))
                        return false;
                r = op_gateway(a, &rq, &e);
        } else if (rq.op == NODE_OP_PUBLISH) {
                r = op_publish(a, &rq, p, &e);
        } else {
                return false;
        }
        return respond(l, h->stream, r, r < 0 ? e.msg : dir) == 0;
}

static int connected(struct nl *l, uint32_t id, int result)
{
        int32_t r = (int32_t)htole32((uint32_t)result);
        return nl_send(l, NF_CONNECTED, id, &r, sizeof(r), NULL, 0);
}

/* The connect is done (or failed): a stream, and its result to the control. */
static void connect_done(struct nl *l, uint32_t id, int fd, int result, const char *user, const char *session)
{
        if (result == 0 && !nl_stream_add(l, id, fd, NODE_STREAM_CONNECT, user, session))
                result = -EMFILE; /* fd closed */
        else if (result < 0)
                close(fd);
        (void)connected(l, id, result); /* a failure ends the loop */
}

/* NF_OPEN from the control: the egress proxy's connect to exactly this
 * address (it decided and resolved; nothing is looked up here). */
static bool on_connect(struct node_agent *a, struct nl *l, const struct node_hdr *h, const unsigned char *p)
{
        struct node_connect c;
        struct sockaddr_storage ss = {0};
        socklen_t sl;
        uint16_t family, port;
        int fd, r;

        if (h->len != sizeof(c) || !(h->stream & NODE_STREAM_CONTROL) || nl_stream_find(l, h->stream))
                return false;
        for (struct na_connect *q = a->connects; q; q = q->next)
                if (q->id == h->stream)
                        return false;
        memcpy(&c, p, sizeof(c));
        family = le16toh(c.family);
        port = le16toh(c.port);
        if (le32toh(c.kind) != NODE_STREAM_CONNECT || (family != 4 && family != 6) || port == 0 || c.pad[0] ||
            c.pad[1] || !nl_key_ok(c.user, sizeof(c.user)) || !nl_key_ok(c.session, sizeof(c.session)))
                return false;
        if (family == 4) {
                struct sockaddr_in *in = (struct sockaddr_in *)&ss;
                in->sin_family = AF_INET;
                in->sin_port = htons(port);
                memcpy(&in->sin_addr, c.addr, 4);
                sl = sizeof(*in);
        } else {
                struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons(port);
                memcpy(&in6->sin6_addr, c.addr, 16);
                sl = sizeof(*in6);
        }
        if (a->n_connects >= NODE_CONNECTS_MAX)
                return connected(l, h->stream, -EAGAIN) == 0;
        fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return connected(l, h->stream, -errno) == 0;
        do
                r = connect(fd, (struct sockaddr *)&ss, sl);
        while (r < 0 && errno == EINTR);
        if (r == 0 || errno != EINPROGRESS) {
                connect_done(l, h->stream, fd, r == 0 ? 0 : -errno, c.user, c.session);
                return true;
        }
        struct na_connect *q = calloc(1, sizeof(*q));
        if (!q) {
                close(fd);
                return connected(l, h->stream, -ENOMEM) == 0;
        }
        q->id = h->stream;
        q->fd = fd;
        q->deadline = sbx_now_ms() + NODE_CONNECT_TIMEOUT_MS;
        sbx_strlcpy(q->user, c.user, sizeof(q->user));
        sbx_strlcpy(q->session, c.session, sizeof(q->session));
        q->next = a->connects;
        a->connects = q;
        a->n_connects++;
        return true;
}

static void connect_free(struct node_agent *a, struct na_connect *q)
{
        for (struct na_connect **pp = &a->connects; *pp; pp = &(*pp)->next)
                if (*pp == q) {
                        *pp = q->next;
                        a->n_connects--;
                        break;
                }
        free(q);
}

static bool na_frame(struct nl *l, const struct node_hdr *h, const unsigned char *p, void *ud)
{
        struct node_agent *a = ud;

        if (h->type == NF_REQ)
                return on_req(a, l, h, p);
        if (h->type == NF_OPEN)
                return on_connect(a, l, h, p);
        return false;
}

/* {data_dir}/link says STATE (replaced whole: a probe never reads half). */
static void link_state(struct node_agent *a, const char *state)
{
        char tmp[SBX_PATH_MAX + 8];
        int fd, n = snprintf(tmp, sizeof(tmp), "%s.tmp", a->link_path);
        size_t len = strlen(state);

        if (n < 0 || (size_t)n >= sizeof(tmp))
                return;
        (void)unlink(tmp);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return;
        bool ok = write(fd, state, len) == (ssize_t)len && write(fd, "\n", 1) == 1;
        close(fd);
        if (!ok || rename(tmp, a->link_path) < 0)
                (void)unlink(tmp);
        a->link_touched_ms = sbx_now_ms();
}

/* The loop turns: the file's mtime says so, at most every LINK_TOUCH_MS. */
static void link_touch(struct node_agent *a)
{
        int64_t now = sbx_now_ms();

        if (now - a->link_touched_ms < LINK_TOUCH_MS)
                return;
        a->link_touched_ms = now;
        (void)utimensat(AT_FDCWD, a->link_path, NULL, AT_SYMLINK_NOFOLLOW);
}

static int na_poll_fill(struct nl *l, struct pollfd *pfd, int max, void *ud)
{
        struct node_agent *a = ud;
        size_t n = 0;

        link_touch(a);
        if (*a->stop) {
                nl_stop(l);
                return 0;
        }
        int64_t now = sbx_now_ms();
        for (struct na_connect *q = a->connects, *next; q; q = next) {
                next = q->next;
                if (now >= q->deadline) {
                        close(q->fd);
                        (void)connected(l, q->id, -ETIMEDOUT);
                        connect_free(a, q);
                        continue;
                }
                if ((int)n >= max || n >= a->n_polled)
                        return (int)n;
                a->polled[n] = (struct na_polled){.kind = NODE_STREAM_CONNECT, .c = q};
                pfd[n++] = (struct pollfd){.fd = q->fd, .events = POLLOUT};
        }
        for (struct na_session *s = a->sessions; s; s = s->next) {
                const int fds[3] = {s->lfd, s->egress_lfd, s->fwd_lfd};
                const uint32_t kinds[3] = {NODE_STREAM_RUNNER, NODE_STREAM_EGRESS, NODE_STREAM_FWD};
                for (int k = 0; k < 3; k++) {
                        if (fds[k] < 0)
                                continue;
                        if ((int)n >= max || n >= a->n_polled)
                                return (int)n;
                        a->polled[n] = (struct na_polled){.s = s, .kind = kinds[k]};
                        pfd[n++] = (struct pollfd){.fd = fds[k], .events = POLLIN};
                }
                for (size_t i = 0; i < s->n_pubs; i++) {
                        if ((int)n >= max || n >= a->n_polled)
                                return (int)n;
                        a->polled[n] =
                                (struct na_polled){.s = s, .kind = NODE_STREAM_PUBLISHED, .port = s->pubs[i].port};
                        pfd[n++] = (struct pollfd){.fd = s->pubs[i].fd, .events = POLLIN};
                }
        }
        return (int)n;
}

static void impostor_refused(struct na_session *s, int fd, const char *why)
{
        int64_t now = sbx_now_ms();

        close(fd);
        s->impostors++;
        if (s->impostors_said && now - s->impostors_said_ms < IMPOSTOR_LOG_MS)
                return;
        log_ctx(LOG_LEVEL_WARN, s->user, s->session, NULL,
                "refused %" PRIu64
                " connection(s) to the runner socket that did not come from the container's runner (last: %s)",
                s->impostors - s->impostors_said, why);
        s->impostors_said = s->impostors;
        s->impostors_said_ms = now;
}

#define ACCEPT_ROUNDS 64 /* connections taken per socket per wake-up: one session cannot hold the loop */

static void accept_conn(struct node_agent *a, struct nl *l, struct na_session *s, uint32_t kind, int port, int lfd)
{
        for (int round = 0; round < ACCEPT_ROUNDS; round++) {
                struct hub_peer peer;
                const char *why = "";
                int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0)
                        return;
                /* runner.sock and fwd.sock: only the runner Docker started, checked here beside the
                 * container; egress.sock is the proxy the tenant reaches through the runner anyway */
                const bool runner_only = kind == NODE_STREAM_RUNNER || kind == NODE_STREAM_FWD;
                if (runner_only && hub_peer_verify(fd, s->dirfd, &s->peer, &peer, &why) < 0) {
                        impostor_refused(s, fd, why);
                        continue;
                }
                if (runner_only && (peer.pid != s->peer.pid || peer.start != s->peer.start)) {
                        s->peer = peer;
                        if (hub_peer_save(s->dirfd, &peer) < 0)
                                log_ctx(LOG_LEVEL_WARN, s->user, s->session, NULL,
                                        "cannot record the runner in its directory");
                }
                /* the control's ids have NODE_STREAM_CONTROL set: ours never */
                a->next_stream = (a->next_stream + 1) & ~NODE_STREAM_CONTROL;
                if (a->next_stream == 0)
                        a->next_stream = 1;
                uint32_t id = a->next_stream;
                if (!nl_stream_add(l, id, fd, kind, s->user, s->session)) {
                        log_ctx(LOG_LEVEL_WARN, s->user, s->session, NULL,
                                "node agent: too many streams, a connection was closed");
                        continue;
                }
                struct node_open o = {.kind = htole32(kind),
                                      .port = htole32((uint32_t)port),
                                      .epoch = htole64(s->epoch)};
                sbx_strlcpy(o.user, s->user, sizeof(o.user));
                sbx_strlcpy(o.session, s->session, sizeof(o.session));
                if (nl_send(l, NF_OPEN, id, &o, sizeof(o), NULL, 0) < 0)
                        return; /* the loop finds the link broken */
        }
}

static void na_poll_ready(struct nl *l, struct pollfd *pfd, int n, void *ud)
{
        struct node_agent *a = ud;

        for (int i = 0; i < n; i++) {
                if (a->polled[i].kind == NODE_STREAM_CONNECT) {
                        if (!pfd[i].revents)
                                continue;
                        for (struct na_connect *q = a->connects; q; q = q->next) {
                                if (q != a->polled[i].c || q->fd != pfd[i].fd)
                                        continue;
                                int so = 0;
                                socklen_t sl = sizeof(so);
                                if (getsockopt(q->fd, SOL_SOCKET, SO_ERROR, &so, &sl) < 0)
                                        so = errno;
                                connect_done(l, q->id, q->fd, -so, q->user, q->session);
                                connect_free(a, q);
                                break;
                        }
                        continue;
                }
                if (!(pfd[i].revents & POLLIN))
                        continue;
                /* a request may have dropped it meanwhile: only sessions still listed */
                for (struct na_session *s = a->sessions; s; s = s->next) {
                        if (s != a->polled[i].s)
                                continue;
                        uint32_t kind = a->polled[i].kind;
                        int lfd = kind == NODE_STREAM_RUNNER   ? s->lfd
                                  : kind == NODE_STREAM_EGRESS ? s->egress_lfd
                                  : kind == NODE_STREAM_FWD    ? s->fwd_lfd
                                                               : -1;
                        for (size_t k = 0; kind == NODE_STREAM_PUBLISHED && k < s->n_pubs; k++)
                                if (s->pubs[k].port == a->polled[i].port)
                                        lfd = s->pubs[k].fd;
                        if (lfd >= 0 && lfd == pfd[i].fd)
                                accept_conn(a, l, s, kind, a->polled[i].port, lfd);
                        break;
                }
        }
}

static const struct nl_handlers na_handlers = {.frame = na_frame,
                                               .poll_fill = na_poll_fill,
                                               .poll_ready = na_poll_ready};

/* A TCP connection to node.connect within the deadline, or -errno. */
static int dial(const char *hostport, int timeout_ms, struct sbx_error *err)
{
        char host[128];
        const char *colon = strrchr(hostport, ':');
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
        int fd, r;

        if (!colon || (size_t)(colon - hostport) >= sizeof(host))
                return sbx_error_set(err, -EINVAL, 0, "node.connect must be host:port");
        memcpy(host, hostport, (size_t)(colon - hostport));
        host[colon - hostport] = '\0';
        if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
                return sbx_error_set(err, -EHOSTUNREACH, 0, "%s does not resolve", hostport);
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
                freeaddrinfo(ai);
                return sbx_error_set(err, -errno, 0, "socket: %m");
        }
        r = connect(fd, ai->ai_addr, ai->ai_addrlen);
        freeaddrinfo(ai);
        if (r < 0 && errno == EINPROGRESS) {
                struct pollfd p = {.fd = fd, .events = POLLOUT};
                int so = 0;
                socklen_t sl = sizeof(so);
                if (poll(&p, 1, timeout_ms) <= 0)
                        so = ETIMEDOUT;
                else
                        (void)getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl);
                r = so ? -1 : 0;
                errno = so;
        }
        if (r < 0) {
                r = sbx_error_set(err, -errno, 0, "cannot connect to %s: %m", hostport);
                close(fd);
                return r;
        }
        return fd;
}

static void sleep_ms(struct node_agent *a, int ms, volatile sig_atomic_t *stop)
{
        for (int left = ms; left > 0 && !*stop; left -= 100) {
                link_touch(a);
                struct timespec ts = {0, (left < 100 ? left : 100) * 1000000L};
                nanosleep(&ts, NULL);
        }
}

int node_agent_run(const struct sbx_config *cfg, volatile sig_atomic_t *stop, struct sbx_error *err)
{
        struct node_agent a = {.cfg = cfg, .stop = stop};
        struct nl_tls *tls = NULL;
        int backoff = 100, r;

        if (!cfg->node_connect[0])
                return sbx_error_set(err, -EINVAL, 0, "sandboxd node needs node.connect (the control daemon)");
        nl_block_sigpipe();
        r = nl_tls_new(cfg, false, &tls, err);
        if (r < 0)
                return r;
        snprintf(a.root, sizeof(a.root), "%s/runner", cfg->data_dir);
        if ((mkdir(cfg->data_dir, 0700) < 0 && errno != EEXIST) || (mkdir(a.root, 0700) < 0 && errno != EEXIST)) {
                r = sbx_error_set(err, -errno, 0, "cannot create %s: %m", a.root);
                nl_tls_free(tls);
                return r;
        }
        (void)chmod(a.root, 0700);
        snprintf(a.link_path, sizeof(a.link_path), "%s/" LINK_FILE, cfg->data_dir);
        link_state(&a, "down");
        if (cfg->runner_binary[0]) {
                sbx_strlcpy(a.binary, cfg->runner_binary, sizeof(a.binary));
        } else {
                char exe[SBX_PATH_MAX];
                ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
                exe[n > 0 ? n : 0] = '\0';
                char *slash = strrchr(exe, '/');
                if (slash)
                        *slash = '\0';
                snprintf(a.binary, sizeof(a.binary), "%s/sandboxd-runner", exe);
        }
        /* three sockets a session, the published ports, the connects in flight */
        a.n_polled = 3 * (size_t)NODE_MAX_SESSIONS + NODE_PUBLISH_MAX + NODE_CONNECTS_MAX;
        a.polled = calloc(a.n_polled, sizeof(*a.polled));
        if (!a.polled) {
                nl_tls_free(tls);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        log_info("node agent: serving %s, control at %s", a.root, cfg->node_connect);
        while (!*stop) {
                struct sbx_error e = {0};
                char name[NODE_NAME_MAX + 1];
                const char *why = "";
                SSL *ssl = NULL;
                int fd = dial(cfg->node_connect, NODE_HANDSHAKE_TIMEOUT_MS, &e);

                if (fd >= 0 && nl_tls_handshake(tls, fd, cfg->node_control_name, &ssl, name, &e) < 0) {
                        close(fd);
                        fd = -1;
                }
                if (fd < 0) {
                        log_warn("node agent: %s (again in %d ms)", e.msg, backoff);
                        sleep_ms(&a, backoff, stop);
                        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
                        continue;
                }
                struct nl l;
                if (nl_init(&l, ssl, fd, cfg, &na_handlers, &a) < 0) {
                        nl_destroy(&l);
                        sleep_ms(&a, backoff, stop);
                        continue;
                }
                const char *bin = usable_binary(&a);
                uint32_t proto = htole32(NODE_PROTOCOL);
                if (nl_send(&l, NF_HELLO, 0, &proto, sizeof(proto), bin, strlen(bin)) < 0) {
                        nl_destroy(&l);
                        sleep_ms(&a, backoff, stop);
                        continue;
                }
                log_info("node agent: connected to %s (%s)", cfg->node_connect, name);
                char state[NODE_NAME_MAX + 8];
                snprintf(state, sizeof(state), "up %s", name);
                link_state(&a, state);
                backoff = 100;
                nl_run(&l, &why);
                nl_destroy(&l);
                link_state(&a, "down");
                while (a.connects) { /* their streams were the link's */
                        close(a.connects->fd);
                        connect_free(&a, a.connects);
                }
                if (!*stop)
                        log_warn("node agent: link to %s lost: %s", cfg->node_connect, why);
        }
        while (a.sessions)
                session_free(&a, a.sessions);
        free(a.polled);
        nl_tls_free(tls);
        return 0;
}

/* ---- for tests: a bare client ---- */

struct node_client {
        struct nl l;
        pthread_t thread;
        uint32_t next;
        pthread_mutex_t lock;
        struct {
                int fd;
                uint32_t id;
                struct node_open o;
        } pending[8];
        size_t n_pending;
        volatile sig_atomic_t stop;
        pthread_cond_t cond; /* with lock: done */
        bool done;           /* the link ended */
        struct {             /* the requests it was sent, the last NC_SEEN_MAX (lock) */
                uint32_t op;
                char user[65], session[65];
        } seen[64];
        size_t n_seen;
};
#define NC_SEEN_MAX 64

/* Every request succeeds, naming a directory that does not exist: the
 * control's hub then has a channel that only this client's streams feed. */
static bool nc_frame(struct nl *l, const struct node_hdr *h, const unsigned char *p, void *ud)
{
        struct node_client *c = ud;
        struct node_req rq;

        if (h->type != NF_REQ || h->len != sizeof(rq))
                return false;
        memcpy(&rq, p, sizeof(rq));
        rq.user[sizeof(rq.user) - 1] = rq.session[sizeof(rq.session) - 1] = '\0';
        pthread_mutex_lock(&c->lock);
        size_t i = c->n_seen++ % NC_SEEN_MAX;
        c->seen[i].op = le32toh(rq.op);
        memcpy(c->seen[i].user, rq.user, sizeof(rq.user));
        memcpy(c->seen[i].session, rq.session, sizeof(rq.session));
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        return respond(l, h->stream, 0, "/nonexistent/sandboxd-node-client") == 0;
}

static int nc_poll_fill(struct nl *l, struct pollfd *pfd, int max, void *ud)
{
        struct node_client *c = ud;
        (void)pfd;
        (void)max;
        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < c->n_pending; i++) {
                if (nl_stream_add(l, c->pending[i].id, c->pending[i].fd, NODE_STREAM_RUNNER, c->pending[i].o.user,
                                  c->pending[i].o.session))
                        (void)nl_send(l, NF_OPEN, c->pending[i].id, &c->pending[i].o, sizeof(c->pending[i].o), NULL, 0);
        }
        c->n_pending = 0;
        pthread_mutex_unlock(&c->lock);
        return 0;
}

static const struct nl_handlers nc_handlers = {.frame = nc_frame, .poll_fill = nc_poll_fill};

static void *nc_main(void *ud)
{
        struct node_client *c = ud;
        const char *why;
        nl_block_sigpipe();
        nl_run(&c->l, &why);
        pthread_mutex_lock(&c->lock);
        c->done = true;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        return NULL;
}

int node_client_connect(const struct sbx_config *cfg, struct node_client **ret, struct sbx_error *err)
{
        struct nl_tls *tls = NULL;
        struct node_client *c;
        char name[NODE_NAME_MAX + 1];
        SSL *ssl = NULL;
        int fd, r;

        r = nl_tls_new(cfg, false, &tls, err);
        if (r < 0)
                return r;
        fd = dial(cfg->node_connect, NODE_HANDSHAKE_TIMEOUT_MS, err);
        if (fd < 0) {
                nl_tls_free(tls);
                return fd;
        }
        r = nl_tls_handshake(tls, fd, cfg->node_control_name, &ssl, name, err);
        nl_tls_free(tls); /* the SSL keeps its context */
        if (r < 0) {
                close(fd);
                return r;
        }
        c = calloc(1, sizeof(*c));
        if (!c || nl_init(&c->l, ssl, fd, cfg, &nc_handlers, c) < 0) {
                if (c)
                        nl_destroy(&c->l);
                free(c);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        pthread_mutex_init(&c->lock, NULL);
        pthread_cond_init(&c->cond, NULL);
        uint32_t proto = htole32(NODE_PROTOCOL);
        if (nl_send(&c->l, NF_HELLO, 0, &proto, sizeof(proto), NULL, 0) < 0 ||
            pthread_create(&c->thread, NULL, nc_main, c) != 0) {
                nl_destroy(&c->l);
                free(c);
                return sbx_error_set(err, -EIO, 0, "cannot start the link");
        }
        *ret = c;
        return 0;
}

int node_client_open(struct node_client *c, const char *user, const char *session, uint64_t epoch, int fd)
{
        pthread_mutex_lock(&c->lock);
        if (c->n_pending == sizeof(c->pending) / sizeof(c->pending[0])) {
                pthread_mutex_unlock(&c->lock);
                close(fd);
                return -ENOBUFS;
        }
        c->pending[c->n_pending].fd = fd;
        c->pending[c->n_pending].id = ++c->next;
        c->pending[c->n_pending].o = (struct node_open){.kind = htole32(NODE_STREAM_RUNNER), .epoch = htole64(epoch)};
        sbx_strlcpy(c->pending[c->n_pending].o.user, user, 65);
        sbx_strlcpy(c->pending[c->n_pending].o.session, session, 65);
        c->n_pending++;
        pthread_mutex_unlock(&c->lock);
        if (write(c->l.wake[1], "w", 1) < 0) {
                /* due to wake */
        }
        return 0;
}

int node_client_send_raw(struct node_client *c, const void *buf, size_t len)
{
        struct nl_qframe *f = malloc(sizeof(*f) + len);

        if (!f)
                return -ENOMEM;
        f->next = NULL;
        f->len = len;
        memcpy(f->buf, buf, len);
        pthread_mutex_lock(&c->l.lock);
        *c->l.q_tail = f;
        c->l.q_tail = &f->next;
        c->l.q_bytes += len;
        pthread_mutex_unlock(&c->l.lock);
        if (write(c->l.wake[1], "w", 1) < 0) {
                /* due to wake */
        }
        return 0;
}

size_t node_client_requests(struct node_client *c, uint32_t op, const char *user, const char *session)
{
        size_t n = 0;

        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < c->n_seen && i < NC_SEEN_MAX; i++)
                n += c->seen[i].op == op && strcmp(c->seen[i].user, user) == 0 &&
                     strcmp(c->seen[i].session, session) == 0;
        pthread_mutex_unlock(&c->lock);
        return n;
}

bool node_client_closed(struct node_client *c, int timeout_ms)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms);
        bool done;

        pthread_mutex_lock(&c->lock);
        while (!c->done && pthread_cond_timedwait(&c->cond, &c->lock, &until) != ETIMEDOUT)
                ;
        done = c->done;
        pthread_mutex_unlock(&c->lock);
        return done;
}

void node_client_free(struct node_client *c)
{
        if (!c)
                return;
        nl_stop(&c->l);
        pthread_join(c->thread, NULL);
        for (size_t i = 0; i < c->n_pending; i++)
                close(c->pending[i].fd);
        nl_destroy(&c->l);
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->cond);
        free(c);
}
