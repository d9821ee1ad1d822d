/* stress_node.c — the node link (src/node/): the control daemon's end
 * (node_server), a node agent (node_agent_run) and bare link clients, all
 * in one process over TLS on loopback, no Docker.
 *
 * Phase 1: a node agent serves requests (open, rekey, drop) that several
 * threads make at once, while a bare client opens runner streams from
 * several threads, each relaying more than a window of bytes both ways
 * (credit and ACK) and closing by halves; one stream in five presents an
 * old epoch and must be refused. Phase 2: the same streams go on while
 * other threads connect as hostile nodes, each sending one malformed frame,
 * and a node with a revoked certificate knocks. What must hold: every good
 * stream carries its bytes intact and ends cleanly, every refused one ends,
 * every clearly malformed frame closes its link, the good link survives
 * all of it, and stopping the server returns with no hook called after. */
#include <endian.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/config.h"
#include "sandboxd/log.h"
#include "sandboxd/node.h"
#include "stress.h"

#define STREAMERS 6
#define REQUESTERS 3
#define CONNECTORS 3
#define PUBLISH_BASE 27300 /* published ports: below the ephemeral range, 20 a requester */
#define HOSTILES 3
#define EPOCH 1
#define MAX_KEPT 256
#define HOSTILE_DATA_FRAMES 12 /* 720 KB of DATA on one stream */

static struct sbx_config ctl, agent_cfg, good_cfg, hostile_cfg, revoked_cfg;
static struct node_server *server;
static struct node_client *good;
static volatile sig_atomic_t agent_stop;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int delivered[STREAMERS]; /* the control's end of streamer i's current stream; -1: none yet */
static int kept[MAX_KEPT];       /* hostile streams' ends, closed at the end */
static size_t n_kept;
static int refused, suspended, ups, fences, hooks_after_stop; /* atomic */
static bool stopped;                                          /* atomic */

static void hook_runner(void *ud, const char *user, const char *session, int fd)
{
        int i;
        (void)ud;
        (void)user;
        if (__atomic_load_n(&stopped, __ATOMIC_SEQ_CST))
                __atomic_add_fetch(&hooks_after_stop, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_lock(&lock);
        if (sscanf(session, "s%d", &i) == 1 && i >= 0 && i < STREAMERS && delivered[i] < 0) {
                delivered[i] = fd;
                pthread_cond_broadcast(&cond);
        } else if (n_kept < MAX_KEPT) {
                kept[n_kept++] = fd; /* a hostile node's: kept open, so only its link's end ends it */
        } else {
                close(fd);
        }
        pthread_mutex_unlock(&lock);
}

static void hook_gateway(void *ud, const char *user, const char *session, int kind, int fd)
{
        (void)ud, (void)user, (void)session, (void)kind;
        close(fd);
}

/* A client of a published port: it is told the port, then the end. */
static void hook_published(void *ud, const char *user, const char *session, int port, int fd)
{
        char b[16];
        int n = snprintf(b, sizeof(b), "%d\n", port);
        (void)ud, (void)user, (void)session;
        if (__atomic_load_n(&stopped, __ATOMIC_SEQ_CST))
                __atomic_add_fetch(&hooks_after_stop, 1, __ATOMIC_SEQ_CST);
        STRESS_CHECK(write(fd, b, (size_t)n) == n, "published: write");
        close(fd);
}

static void hook_suspend(void *ud, const char *user, const char *session)
{
        (void)ud, (void)user, (void)session;
        __atomic_add_fetch(&suspended, 1, __ATOMIC_SEQ_CST);
}

static void hook_up(void *ud, const char *node, bool ready)
{
        (void)ud, (void)node, (void)ready;
        __atomic_add_fetch(&ups, 1, __ATOMIC_SEQ_CST);
}

static void hook_fence(void *ud, const char *node)
{
        (void)ud, (void)node;
        __atomic_add_fetch(&fences, 1, __ATOMIC_SEQ_CST);
}

static int hook_epoch(void *ud, const char *user, const char *session, uint64_t *ret)
{
        (void)ud, (void)user, (void)session;
        *ret = EPOCH;
        return 0;
}

static void hook_refused(void *ud, const char *node, const char *user, const char *session, uint64_t presented,
                         uint64_t current, const char *placed)
{
        (void)ud, (void)node, (void)user, (void)session;
        STRESS_CHECK(placed || presented != current, "refused a current epoch %llu", (unsigned long long)current);
        __atomic_add_fetch(&refused, 1, __ATOMIC_SEQ_CST);
}

/* Placement, fixed by name: the streamers' sessions (s*) on the bare
 * client (node2), the hostile nodes' (h*) on hostile, the requests' on the
 * agent (node1). */
static int hook_node_of(void *ud, const char *user, const char *session, char ret[NODE_NAME_MAX + 1])
{
        (void)ud, (void)user;
        snprintf(ret, NODE_NAME_MAX + 1, "%s",
                 session[0] == 's'                 ? "node2"
                 : session[0] == 'h'               ? "hostile"
                 : strcmp(session, "revoked") == 0 ? "revoked"
                                                   : "node1");
        return 0;
}

static int hook_place(void *ud, const char *user, const char *session, const char *node)
{
        (void)ud, (void)user, (void)session, (void)node;
        return 0;
}

static size_t hook_placed(void *ud, const char *node)
{
        (void)ud, (void)node;
        return 0;
}

static const struct node_server_hooks hooks = {
        .runner = hook_runner,
        .gateway = hook_gateway,
        .suspend = hook_suspend,
        .up = hook_up,
        .fence = hook_fence,
        .epoch = hook_epoch,
        .refused = hook_refused,
        .published = hook_published,
        .node_of = hook_node_of,
        .place = hook_place,
        .placed = hook_placed,
};

/* ---- PKI (the openssl CLI, as tests/helpers/nodeenv.c) ---- */

#define KEY "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"

static void sh(const char *dir, const char *script)
{
        char cmd[2048];
        snprintf(cmd, sizeof(cmd), "cd '%s' && { %s ; } >/dev/null 2>&1", dir, script);
        if (system(cmd) != 0) {
                fprintf(stderr, "stress_node: failed: %s\n", script);
                exit(2);
        }
}

static void make_pki(const char *dir)
{
        static const char *names[] = {"sandboxd-control", "node1", "node2", "hostile", "revoked"};
        FILE *f;
        char path[SBX_PATH_MAX];

        sh(dir, "openssl req -x509 " KEY
                " -keyout ca.key -out ca.pem -days 2 -subj /CN=stress-node-ca "
                "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign");
        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                char script[1024];
                snprintf(script, sizeof(script),
                         "openssl req " KEY
                         " -keyout %s.key -out %s.csr -subj /CN=%s && "
                         "openssl x509 -req -in %s.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out %s.pem",
                         names[i], names[i], names[i], names[i], names[i]);
                sh(dir, script);
        }
        snprintf(path, sizeof(path), "%s/ca.cnf", dir);
        f = fopen(path, "w");
        if (!f)
                exit(2);
        fprintf(f,
                "[ ca ]\ndefault_ca = ca_default\n[ ca_default ]\ndatabase = index.txt\ncrlnumber = crlnumber\n"
                "default_md = sha256\ndefault_crl_days = 2\ncertificate = ca.pem\nprivate_key = ca.key\n");
        fclose(f);
        sh(dir,
           "touch index.txt && echo 1000 > crlnumber && openssl ca -config ca.cnf -batch -revoke revoked.pem && "
           "openssl ca -config ca.cnf -gencrl -out crl.pem");
}

static void node_cfg(struct sbx_config *c, const char *pki, const char *name)
{
        config_defaults(c);
        snprintf(c->node_connect, sizeof(c->node_connect), "127.0.0.1:%d", node_server_port(server));
        snprintf(c->node_cert, sizeof(c->node_cert), "%s/%s.pem", pki, name);
        snprintf(c->node_key, sizeof(c->node_key), "%s/%s.key", pki, name);
        snprintf(c->node_ca, sizeof(c->node_ca), "%s/ca.pem", pki);
        snprintf(c->node_crl, sizeof(c->node_crl), "%s/crl.pem", pki);
        c->node_heartbeat_ms = 200;
}

/* ---- streams ---- */

static void nonblock(int fd)
{
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int wait_delivered(int i)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, 10000);
        int fd;

        pthread_mutex_lock(&lock);
        while (delivered[i] < 0 && pthread_cond_timedwait(&cond, &lock, &until) != ETIMEDOUT)
                ;
        fd = delivered[i];
        delivered[i] = -1;
        pthread_mutex_unlock(&lock);
        return fd;
}

/* Until fd reads end of stream (true) or the deadline (false). */
static bool wait_eof(int fd, int timeout_ms)
{
        int64_t end = sbx_now_ms() + timeout_ms;
        char b[4096];

        for (;;) {
                int64_t left = end - sbx_now_ms();
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (left <= 0 || poll(&p, 1, (int)left) <= 0)
                        return false;
                ssize_t n = read(fd, b, sizeof(b));
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                        return true;
        }
}

static unsigned char pattern(size_t k, int i)
{
        return (unsigned char)(k * 31 + (size_t)i * 7);
}

/* size bytes from the node's end (a) to the control's (b), echoed back
 * from b to a, then a half close each way. */
static bool relay(int i, int a, int b, size_t size)
{
        unsigned char *mid = malloc(size + 1), buf[16384];
        size_t sent = 0, in = 0, out = 0, got = 0;
        bool a_shut = false, b_shut = false, b_eof = false, a_eof = false, ok = true;
        int64_t end = sbx_now_ms() + 30000;

        if (!mid)
                return false;
        nonblock(a);
        nonblock(b);
        while (!a_eof) {
                if (sent == size && !a_shut) {
                        (void)shutdown(a, SHUT_WR);
                        a_shut = true;
                }
                struct pollfd p[2] = {{.fd = a, .events = (short)(POLLIN | (sent < size ? POLLOUT : 0))},
                                      {.fd = b, .events = (short)((b_eof ? 0 : POLLIN) | (out < in ? POLLOUT : 0))}};
                int64_t left = end - sbx_now_ms();
                if (left <= 0 || poll(p, 2, (int)left) < 0) {
                        STRESS_CHECK(false, "stream s%d stalled: sent %zu, relayed %zu/%zu, back %zu of %zu (%d%d%d)",
                                     i, sent, in, out, got, size, a_shut, b_eof, b_shut);
                        ok = false;
                        break;
                }
                if (p[0].revents & POLLOUT) {
                        size_t n = size - sent < sizeof(buf) ? size - sent : sizeof(buf);
                        for (size_t k = 0; k < n; k++)
                                buf[k] = pattern(sent + k, i);
                        ssize_t w = write(a, buf, n);
                        if (w > 0)
                                sent += (size_t)w;
                }
                if (sent == size && !a_shut) {
                        (void)shutdown(a, SHUT_WR);
                        a_shut = true;
                }
                if (p[1].revents & (POLLIN | POLLHUP)) {
                        ssize_t r = read(b, mid + in, size - in ? size - in : 1);
                        if (r == 0)
                                b_eof = true;
                        else if (r > 0)
                                in += (size_t)r;
                }
                if (out < in) {
                        ssize_t w = write(b, mid + out, in - out);
                        if (w > 0)
                                out += (size_t)w;
                }
                if (b_eof && out == in && !b_shut) {
                        (void)shutdown(b, SHUT_WR);
                        b_shut = true;
                }
                if (p[0].revents & (POLLIN | POLLHUP)) {
                        ssize_t r = read(a, buf, sizeof(buf));
                        if (r == 0) {
                                a_eof = true;
                        } else if (r > 0) {
                                for (ssize_t k = 0; k < r && ok; k++)
                                        if (buf[k] != pattern(got + (size_t)k, i)) {
                                                STRESS_CHECK(false, "stream s%d: byte %zu differs", i, got + (size_t)k);
                                                ok = false;
                                        }
                                got += (size_t)r;
                        }
                }
        }
        STRESS_CHECK(!ok || got == size, "stream s%d: %zu of %zu bytes came back", i, got, size);
        free(mid);
        return ok && got == size;
}

static void streamer(int i, void *ud)
{
        int rounds = *(int *)ud;
        char session[16];

        snprintf(session, sizeof(session), "s%d", i);
        for (int r = 0; r < rounds; r++) {
                int sv[2];
                bool stale = r % 5 == 4;
                STRESS_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
                STRESS_CHECK(node_client_open(good, "u", session, stale ? EPOCH + 6 : EPOCH, sv[1]) == 0, "open");
                if (stale) {
                        /* refused: the control closes it, the node's end sees the end */
                        STRESS_CHECK(wait_eof(sv[0], 10000), "s%d: a stream of an old epoch was not closed", i);
                        close(sv[0]);
                        continue;
                }
                int b = wait_delivered(i);
                STRESS_CHECK(b >= 0, "s%d round %d: the stream never reached the control's hook", i, r);
                if (b >= 0) {
                        (void)relay(i, sv[0], b, (size_t)(r * 37 + i) % 3 == 0 ? 0 : 150000 + (size_t)r * 1013);
                        close(b);
                }
                close(sv[0]);
        }
}

/* ---- published ports and egress connects, made by the agent ---- */

static int tcp_connect(int port)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

/* Publish two ports of session a, reach each through the agent, then
 * publish none: refused as soon as the answer is in. */
static void publish_round(int i, int r, const char *a)
{
        int ports[2] = {PUBLISH_BASE + i * 20 + (r % 10) * 2, PUBLISH_BASE + i * 20 + (r % 10) * 2 + 1};
        struct sbx_error e = {0};
        int rc = node_server_publish(server, "u", a, ports, 2, &e);

        STRESS_CHECK(rc == 0, "publish %s: %s", a, e.msg);
        for (int k = 0; k < 2 && rc == 0; k++) {
                char want[16], got[16] = "";
                int fd = tcp_connect(ports[k]);
                STRESS_CHECK(fd >= 0, "published port %d: %s", ports[k], strerror(-fd));
                if (fd < 0)
                        continue;
                snprintf(want, sizeof(want), "%d\n", ports[k]);
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, 10000) == 1)
                        (void)!read(fd, got, sizeof(got) - 1);
                STRESS_CHECK(strcmp(got, want) == 0, "published port %d: the control's hook said %s", ports[k], got);
                close(fd);
        }
        rc = node_server_publish(server, "u", a, NULL, 0, &e);
        STRESS_CHECK(rc == 0, "unpublish %s: %s", a, e.msg);
        int fd = tcp_connect(ports[0]);
        STRESS_CHECK(fd == -ECONNREFUSED, "port %d still accepts once unpublished (%d)", ports[0], fd);
        if (fd >= 0)
                close(fd);
}

static int echo_lfd, echo_port, closed_port;

static void *echo_conn(void *ud)
{
        int fd = (int)(intptr_t)ud;
        char b[16384];
        ssize_t n;
        while ((n = read(fd, b, sizeof(b))) > 0)
                if (write(fd, b, (size_t)n) != n)
                        break;
        close(fd);
        return NULL;
}

static void *echo_main(void *ud)
{
        (void)ud;
        for (;;) {
                int fd = accept4(echo_lfd, NULL, NULL, SOCK_CLOEXEC);
                pthread_t t;
                if (fd < 0)
                        return NULL; /* shut down at the end */
                if (pthread_create(&t, NULL, echo_conn, (void *)(intptr_t)fd) == 0)
                        pthread_detach(t);
                else
                        close(fd);
        }
}

/* The egress proxy's connects: through the agent to the echo server (more
 * than a window each way, bytes intact, closed by halves), and to a port
 * nobody listens on (its errno comes back). */
static void connector(int i, void *ud)
{
        int rounds = *(int *)ud;
        char session[16];

        snprintf(session, sizeof(session), "c%d", i);
        for (int r = 0; r < rounds; r++) {
                bool refused_port = r % 3 == 2;
                struct sockaddr_in sa = {.sin_family = AF_INET,
                                         .sin_port = htons((uint16_t)(refused_port ? closed_port : echo_port))};
                int32_t res = 1;
                int fd = -1;
                sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                int rc = node_server_connect(server, "u", session, (struct sockaddr *)&sa, sizeof(sa), &fd);
                STRESS_CHECK(rc == 0, "connect %s: %d", session, rc);
                if (rc < 0)
                        continue;
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, 15000) == 1 && read(fd, &res, sizeof(res)) != sizeof(res))
                        res = 1;
                if (refused_port) {
                        STRESS_CHECK(res == -ECONNREFUSED, "connect to a closed port: %d", res);
                        STRESS_CHECK(wait_eof(fd, 10000), "a failed connect's stream did not end");
                        close(fd);
                        continue;
                }
                STRESS_CHECK(res == 0, "connect %s to the echo server: %d", session, res);
                if (res == 0) {
                        size_t size = 100000 + (size_t)r * 997, sent = 0, got = 0;
                        unsigned char buf[8192];
                        int64_t end = sbx_now_ms() + 30000;
                        bool shut = false, eof = false;
                        nonblock(fd);
                        while (!eof && sbx_now_ms() < end) {
                                struct pollfd q = {.fd = fd, .events = (short)(POLLIN | (sent < size ? POLLOUT : 0))};
                                if (poll(&q, 1, 1000) < 0)
                                        break;
                                if (q.revents & POLLOUT) {
                                        size_t n = size - sent < sizeof(buf) ? size - sent : sizeof(buf);
                                        for (size_t k = 0; k < n; k++)
                                                buf[k] = pattern(sent + k, i + 100);
                                        ssize_t w = write(fd, buf, n);
                                        if (w > 0)
                                                sent += (size_t)w;
                                }
                                if (sent == size && !shut) {
                                        (void)shutdown(fd, SHUT_WR);
                                        shut = true;
                                }
                                if (q.revents & (POLLIN | POLLHUP)) {
                                        ssize_t n = read(fd, buf, sizeof(buf));
                                        if (n == 0)
                                                eof = true;
                                        for (ssize_t k = 0; k < n; k++)
                                                if (buf[k] != pattern(got + (size_t)k, i + 100)) {
                                                        STRESS_CHECK(false, "connect %s: byte %zu differs", session,
                                                                     got + (size_t)k);
                                                        eof = true;
                                                        break;
                                                }
                                        if (n > 0)
                                                got += (size_t)n;
                                }
                        }
                        STRESS_CHECK(got == size && eof, "connect %s: %zu of %zu bytes came back", session, got, size);
                }
                close(fd);
        }
}

/* ---- requests (the runner hub's calls), answered by the agent ---- */

static void requester(int i, void *ud)
{
        int rounds = *(int *)ud;

        for (int r = 0; r < rounds; r++) {
                char a[32], b[32], dir[SBX_PATH_MAX];
                struct sbx_error e = {0};
                snprintf(a, sizeof(a), "r%d-%d", i, r);
                snprintf(b, sizeof(b), "q%d-%d", i, r);
                int rc = node_server_ops.open(server, "u", a, EPOCH, NODE_OPEN_NEW, NULL, dir, &e);
                STRESS_CHECK(rc == 0, "open %s: %s", a, e.msg);
                rc = node_server_ops.open(server, "u", a, EPOCH, NODE_OPEN_ADOPT, NULL, dir, &e);
                STRESS_CHECK(rc == 0, "adopt %s: %s", a, e.msg);
                publish_round(i, r, a);
                rc = node_server_ops.rekey(server, "u", a, "u", b, EPOCH + 1, dir, &e);
                STRESS_CHECK(rc == 0, "rekey %s: %s", a, e.msg);
                rc = node_server_ops.rekey(server, "u", a, "u", b, EPOCH + 1, dir, &e); /* again: idempotent */
                STRESS_CHECK(rc == 0, "rekey %s again: %s", a, e.msg);
                rc = node_server_ops.open(server, "u", a, EPOCH, NODE_OPEN_ADOPT, NULL, dir, &e);
                STRESS_CHECK(rc == -ENOENT, "adopt of the renamed %s: %d", a, rc);
                node_server_ops.drop(server, "u", b);
                rc = node_server_gateway(server, "u", b, 0, &e);
                STRESS_CHECK(rc == 0, "gateway off %s: %s", b, e.msg);
        }
}

/* ---- hostile nodes ---- */

static size_t frame(unsigned char *buf, uint32_t len, uint16_t type, uint32_t stream)
{
        struct node_hdr h = {.len = htole32(len), .type = htole16(type), .stream = htole32(stream)};
        memcpy(buf, &h, NODE_HDR_LEN);
        return NODE_HDR_LEN;
}

/* One malformed frame (kind k) after the hello; must_close: the link must end. */
static size_t hostile_frame(int k, unsigned char *buf, size_t cap, bool *must_close)
{
        size_t n = 0;
        struct node_open o = {.kind = htole32(NODE_STREAM_RUNNER), .epoch = htole64(EPOCH)};

        *must_close = true;
        switch (k % 10) {
        case 0: /* longer than a frame may be */
                n = frame(buf, NODE_MAX_FRAME + 1, NF_DATA, 1);
                break;
        case 1: /* no such type */
                n = frame(buf, 0, 99, 0);
                break;
        case 2: /* an OPEN of the wrong size */
                n = frame(buf, 3, NF_OPEN, 5);
                memset(buf + n, 'x', 3);
                n += 3;
                break;
        case 3: /* an OPEN whose names are not strings */
                memset(o.user, 'a', sizeof(o.user));
                memset(o.session, 'b', sizeof(o.session));
                n = frame(buf, sizeof(o), NF_OPEN, 7);
                memcpy(buf + n, &o, sizeof(o));
                n += sizeof(o);
                break;
        case 4: /* bytes past the credit of a stream it opened */
                snprintf(o.user, sizeof(o.user), "u");
                snprintf(o.session, sizeof(o.session), "h%d", k);
                n = frame(buf, sizeof(o), NF_OPEN, 9);
                memcpy(buf + n, &o, sizeof(o));
                n += sizeof(o);
                /* more than the window and the kept socket's buffer together (nobody reads it) */
                for (int j = 0; j < HOSTILE_DATA_FRAMES && n + NODE_HDR_LEN + 60000 <= cap; j++) {
                        n += frame(buf + n, 60000, NF_DATA, 9);
                        memset(buf + n, 'd', 60000);
                        n += 60000;
                }
                break;
        case 5: /* all ones */
                memset(buf, 0xff, 64);
                n = 64;
                break;
        case 6: /* a second hello */
                n = frame(buf, 4, NF_HELLO, 0);
                memset(buf + n, 0, 4);
                n += 4;
                *must_close = false; /* not asserted: only that nothing breaks */
                break;
        case 7: /* an answer to no request */
                n = frame(buf, 4, NF_RESP, 4242);
                memset(buf + n, 0, 4);
                n += 4;
                *must_close = false;
                break;
        case 8: /* bytes and credit for no stream */
                n = frame(buf, 10, NF_DATA, 31337);
                memset(buf + n, 'z', 10);
                n += 10;
                n += frame(buf + n, 4, NF_ACK, 31338);
                memset(buf + n, 0xff, 4);
                n += 4;
                *must_close = false;
                break;
        default: /* half a header, then nothing */
                n = frame(buf, 0, NF_PING, 0) - 5;
                *must_close = false;
                break;
        }
        return n;
}

static void hostile(int i, void *ud)
{
        int rounds = *(int *)ud;
        size_t cap = HOSTILE_DATA_FRAMES * (NODE_HDR_LEN + 60000) + 1024;
        unsigned char *buf = malloc(cap);

        for (int r = 0; r < rounds && buf; r++) {
                struct node_client *c = NULL;
                struct sbx_error e = {0};
                bool must_close;
                int sv[2];

                if (i == 0 && r % 3 == 2) { /* a revoked certificate: refused (in the handshake, or at once after) */
                        if (node_client_connect(&revoked_cfg, &c, &e) == 0) {
                                STRESS_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
                                (void)node_client_open(c, "u", "revoked", EPOCH, sv[1]);
                                STRESS_CHECK(node_client_closed(c, 10000), "a revoked certificate's link lives on");
                                close(sv[0]);
                                node_client_free(c);
                        }
                        continue;
                }
                if (node_client_connect(&hostile_cfg, &c, &e) < 0) {
                        STRESS_CHECK(false, "hostile node %d: %s", i, e.msg);
                        continue;
                }
                /* a stream of its own, whose control end is kept: its node end ends only with the link */
                STRESS_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
                char session[16];
                snprintf(session, sizeof(session), "h%d", i);
                (void)node_client_open(c, "u", session, EPOCH, sv[1]);
                size_t n = hostile_frame(i * 7 + r, buf, cap, &must_close);
                STRESS_CHECK(node_client_send_raw(c, buf, n) == 0, "send_raw");
                bool ended = node_client_closed(c, must_close ? 10000 : 300);
                STRESS_CHECK(!must_close || ended, "frame kind %d did not close the link", (i * 7 + r) % 10);
                close(sv[0]);
                node_client_free(c);
        }
        free(buf);
}

struct phase {
        int stream_rounds, other_rounds;
        void (*other)(int i, void *ud);
};

static void phase_fn(int i, void *ud)
{
        struct phase *p = ud;
        if (i < STREAMERS)
                streamer(i, &p->stream_rounds);
        else
                p->other(i - STREAMERS, &p->other_rounds);
}

static void on_usr1(int sig)
{
        (void)sig;
        agent_stop = 1;
}

static void *agent_main(void *ud)
{
        struct sbx_error e = {0};
        (void)ud;
        STRESS_CHECK(node_agent_run(&agent_cfg, &agent_stop, &e) == 0, "node agent: %s", e.msg);
        return NULL;
}

int main(void)
{
        const char *tmp = stress_tmpdir();
        char pki[SBX_PATH_MAX];
        struct sbx_error e = {0};
        pthread_t agent;
        int stream_rounds = stress_n(10), req_rounds = stress_n(20);

        log_set_level(getenv("STRESS_NODE_LOG") ? LOG_LEVEL_WARN : LOG_LEVEL_ERROR); /* hostile frames: warn */
        signal(SIGPIPE, SIG_IGN);
        sigaction(SIGUSR1, &(struct sigaction){.sa_handler = on_usr1}, NULL); /* no SA_RESTART: poll returns */
        for (int i = 0; i < STREAMERS; i++)
                delivered[i] = -1;
        snprintf(pki, sizeof(pki), "%s/pki", tmp);
        if (mkdir(pki, 0700) < 0)
                return 2;
        make_pki(pki);

        config_defaults(&ctl);
        snprintf(ctl.node_listen, sizeof(ctl.node_listen), "127.0.0.1:0");
        snprintf(ctl.node_cert, sizeof(ctl.node_cert), "%s/sandboxd-control.pem", pki);
        snprintf(ctl.node_key, sizeof(ctl.node_key), "%s/sandboxd-control.key", pki);
        snprintf(ctl.node_ca, sizeof(ctl.node_ca), "%s/ca.pem", pki);
        snprintf(ctl.node_crl, sizeof(ctl.node_crl), "%s/crl.pem", pki);
        snprintf(ctl.node_name, sizeof(ctl.node_name), "%s", "");
        ctl.node_heartbeat_ms = 200;
        ctl.node_fence_ms = 300; /* a hostile node that was active and went: fenced, concurrently */
        if (node_server_new(&ctl, &hooks, NULL, &server, &e) < 0) {
                fprintf(stderr, "stress_node: %s\n", e.msg);
                return 2;
        }
        node_server_gateway_ready(server); /* published ports reach hook_published */
        node_cfg(&good_cfg, pki, "node2");
        node_cfg(&hostile_cfg, pki, "hostile");
        node_cfg(&revoked_cfg, pki, "revoked");
        node_cfg(&agent_cfg, pki, "node1");
        snprintf(agent_cfg.data_dir, sizeof(agent_cfg.data_dir), "%s/agent", tmp);

        /* the bare client (node2: the streams' sessions) and the agent (node1: the requests') at once */
        STRESS_CHECK(node_client_connect(&good_cfg, &good, &e) == 0, "good client: %s", e.msg);
        STRESS_CHECK(good != NULL, "no good client");
        if (!good)
                return stress_done("stress_node");
        pthread_create(&agent, NULL, agent_main, NULL);
        {
                int64_t end = sbx_now_ms() + 20000;
                while (!node_server_node_connected(server, "node1") && sbx_now_ms() < end)
                        (void)poll(NULL, 0, 20);
                STRESS_CHECK(node_server_node_connected(server, "node1"), "the node agent did not connect");
        }

        /* phase 1: requests to the agent and streams through the bare client, at once */
        struct phase p = {.stream_rounds = stream_rounds, .other_rounds = req_rounds, .other = requester};
        stress_threads(STREAMERS + REQUESTERS, phase_fn, &p);
        /* phase 1b: the egress proxy's connects through the agent, with the streams */
        {
                struct sockaddr_in sa = {.sin_family = AF_INET};
                socklen_t sl = sizeof(sa);
                pthread_t echo;
                sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                int cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                echo_lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                /* a port bound but never listened on: a connect to it is refused */
                STRESS_CHECK(bind(cfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
                                     getsockname(cfd, (struct sockaddr *)&sa, &sl) == 0,
                             "closed port");
                closed_port = ntohs(sa.sin_port);
                sa.sin_port = 0;
                STRESS_CHECK(bind(echo_lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(echo_lfd, 64) == 0 &&
                                     getsockname(echo_lfd, (struct sockaddr *)&sa, &sl) == 0,
                             "echo server");
                echo_port = ntohs(sa.sin_port);
                pthread_create(&echo, NULL, echo_main, NULL);
                p = (struct phase){.stream_rounds = stream_rounds, .other_rounds = stress_n(12), .other = connector};
                stress_threads(STREAMERS + CONNECTORS, phase_fn, &p);
                (void)shutdown(echo_lfd, SHUT_RDWR);
                pthread_join(echo, NULL);
                close(echo_lfd);
                close(cfd);
        }
        /* phase 2: streams on while hostile nodes come and go (each one the active node a moment) */
        p = (struct phase){.stream_rounds = stream_rounds, .other_rounds = stress_n(10), .other = hostile};
        stress_threads(STREAMERS + HOSTILES, phase_fn, &p);
        if (stream_rounds >= 5)
                STRESS_CHECK(__atomic_load_n(&refused, __ATOMIC_SEQ_CST) > 0, "no stream of an old epoch refused");
        if (p.other_rounds >= 3)
                STRESS_CHECK(node_server_refused(server) > 0, "the revoked certificate's handshake was not refused");

        node_client_free(good);
        pthread_kill(agent, SIGUSR1); /* as sandboxd node stops: the flag set by a signal on its thread */
        pthread_join(agent, NULL);
        node_server_stop(server);
        __atomic_store_n(&stopped, true, __ATOMIC_SEQ_CST);
        node_server_free(server);
        STRESS_CHECK(__atomic_load_n(&hooks_after_stop, __ATOMIC_SEQ_CST) == 0, "a hook was called after the stop");
        for (size_t i = 0; i < n_kept; i++)
                close(kept[i]);
        printf("stress_node: %d streams refused, %d suspended, %d up, %d fenced\n", refused, suspended, ups, fences);
        return stress_done("stress_node");
}
