/* listener.c — Unix socket plumbing shared by the API and admin fronts:
 * safe bind (stale-socket replacement, permissions before the socket is
 * reachable), accept with EMFILE back-off, capped line reading, sends
 * that never raise SIGPIPE, and the served socket (sockserver): an accept
 * thread that caps connections in total and per peer uid (SO_PEERCRED),
 * one worker thread per connection. What a request may cost before its
 * peer is trusted is reqguard.h's. */
#include "listener.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandboxd/config.h"
#include "sandboxd/jsonl_client.h"
#include "sandboxd/log.h"

/* mkdir -p with mode 0755 for missing components; existing ones are left as
 * they are. */
static int make_parents(const char *dir)
{
        char buf[SBX_PATH_MAX];

        if (!sbx_strlcpy(buf, dir, sizeof(buf)))
                return -ENAMETOOLONG;
        for (char *p = buf + 1;; p++) {
                if (*p == '/' || *p == '\0') {
                        char c = *p;
                        *p = '\0';
                        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                                return -errno;
                        *p = c;
                        if (!c)
                                break;
                }
        }
        return 0;
}

static int unix_addr(const char *path, struct sockaddr_un *sa)
{
        memset(sa, 0, sizeof(*sa));
        sa->sun_family = AF_UNIX;
        return sbx_strlcpy(sa->sun_path, path, sizeof(sa->sun_path)) ? 0 : -ENAMETOOLONG;
}

/* A socket file at path: stale (nothing answers) → removed; live → -EADDRINUSE. */
static int clear_stale(const char *path, struct sbx_error *err)
{
        struct sockaddr_un sa;
        struct stat st;
        _cleanup_close_ int fd = -1;

        if (lstat(path, &st) < 0) {
                if (errno == ENOENT)
                        return 0;
                return sbx_error_set(err, -errno, 0, "cannot stat %s: %m", path);
        }
        if (!S_ISSOCK(st.st_mode))
                return sbx_error_set(err, -EEXIST, 0, "%s exists and is not a socket; refusing to replace it", path);
        if (unix_addr(path, &sa) < 0)
                return sbx_error_set(err, -ENAMETOOLONG, 0, "socket path %s is too long", path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return sbx_error_set(err, -errno, 0, "socket: %m");
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
                return sbx_error_set(err, -EADDRINUSE, 0, "%s is in use: another process answers on it", path);
        if (errno != ECONNREFUSED)
                return sbx_error_set(err, -errno, 0, "cannot probe the existing socket %s: %m", path);
        if (unlink(path) < 0 && errno != ENOENT)
                return sbx_error_set(err, -errno, 0, "cannot remove the stale socket %s: %m", path);
        log_info("removed stale socket %s", path);
        return 0;
}

int listener_open(struct listener *l, const char *path, mode_t mode, gid_t gid, struct sbx_error *err)
{
        char dirbuf[SBX_PATH_MAX], basebuf[SBX_PATH_MAX], tmpdir[SBX_PATH_MAX + 32], tmpsock[SBX_PATH_MAX + 40];
        struct sockaddr_un sa;
        struct stat st;
        int r;

        memset(l, 0, sizeof(*l));
        l->fd = l->wake[0] = l->wake[1] = -1;
        if (!path || path[0] != '/')
                return sbx_error_set(err, -EINVAL, 0, "socket path must be absolute");
        if (!sbx_strlcpy(l->path, path, sizeof(l->path)))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "socket path %s is longer than %zu bytes", path,
                                     sizeof(l->path) - 1);
        sbx_strlcpy(dirbuf, path, sizeof(dirbuf));
        sbx_strlcpy(basebuf, path, sizeof(basebuf));
        const char *dir = dirname(dirbuf), *base = basename(basebuf);

        r = make_parents(dir);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot create the socket directory %s: %s", dir, strerror(-r));
        r = clear_stale(path, err);
        if (r < 0)
                return r;

        /* Bind inside a fresh 0700 directory, fix the mode and group, then
         * rename into place: nobody can connect before the permissions hold,
         * and no process-wide umask games are needed. */
        snprintf(tmpdir, sizeof(tmpdir), "%s/.%s.XXXXXX", dir, base);
        if (!mkdtemp(tmpdir))
                return sbx_error_set(err, -errno, 0, "cannot create a temporary directory in %s: %m", dir);
        snprintf(tmpsock, sizeof(tmpsock), "%s/s", tmpdir);
        if (unix_addr(tmpsock, &sa) < 0) {
                r = sbx_error_set(err, -ENAMETOOLONG, 0, "socket path %s is too long to bind safely", path);
                goto fail;
        }
        if (pipe2(l->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
                r = sbx_error_set(err, -errno, 0, "pipe: %m");
                goto fail;
        }
        l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (l->fd < 0) {
                r = sbx_error_set(err, -errno, 0, "socket: %m");
                goto fail;
        }
        if (bind(l->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                r = sbx_error_set(err, -errno, 0, "cannot bind %s: %m", tmpsock);
                goto fail;
        }
        if (chmod(tmpsock, mode) < 0) {
                r = sbx_error_set(err, -errno, 0, "cannot chmod the socket: %m");
                goto fail;
        }
        if (gid != (gid_t)-1 && chown(tmpsock, (uid_t)-1, gid) < 0) {
                r = sbx_error_set(err, -errno, 0, "cannot give the socket to group %u: %m", (unsigned)gid);
                goto fail;
        }
        if (rename(tmpsock, path) < 0) {
                r = sbx_error_set(err, -errno, 0, "cannot move the socket to %s: %m", path);
                goto fail;
        }
        (void)rmdir(tmpdir);
        if (lstat(path, &st) == 0) {
                l->dev = st.st_dev;
                l->ino = st.st_ino;
        }
        if (listen(l->fd, 128) < 0) {
                r = sbx_error_set(err, -errno, 0, "cannot listen on %s: %m", path);
                listener_close(l);
                return r;
        }
        return 0;
fail:
        (void)unlink(tmpsock);
        (void)rmdir(tmpdir);
        closep(&l->fd);
        closep(&l->wake[0]);
        closep(&l->wake[1]);
        return r;
}

void listener_close(struct listener *l)
{
        struct stat st;

        if (!l)
                return;
        if (l->fd >= 0) {
                closep(&l->fd);
                if (lstat(l->path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == l->dev && st.st_ino == l->ino)
                        (void)unlink(l->path);
        }
        closep(&l->wake[0]);
        closep(&l->wake[1]);
}

void listener_wake(struct listener *l)
{
        if (l && l->wake[1] >= 0) {
                ssize_t n = write(l->wake[1], "x", 1);
                (void)n;
        }
}

int listener_stop_fd(const struct listener *l)
{
        return l->wake[0];
}

bool listener_stopping(const struct listener *l)
{
        struct pollfd p = {.fd = l->wake[0], .events = POLLIN};
        return l->wake[0] >= 0 && poll(&p, 1, 0) > 0;
}

int listener_accept(struct listener *l, const char *what, int *ret_fd)
{
        int backoff = 0;

        for (;;) {
                struct pollfd p[2] = {{.fd = l->fd, .events = POLLIN}, {.fd = l->wake[0], .events = POLLIN}};
                int fd, e;

                if (poll(p, 2, -1) < 0 && errno != EINTR)
                        return -errno;
                if (p[1].revents)
                        return -ESHUTDOWN;
                if (!(p[0].revents & POLLIN))
                        continue;
                fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
                if (fd >= 0) {
                        *ret_fd = fd;
                        return 0;
                }
                e = errno;
                if (e == EINTR || e == EAGAIN || e == ECONNABORTED || e == EPROTO)
                        continue;
                /* Out of descriptors or memory: the listening socket stays
                 * readable, so wait (on the stop pipe only) instead of spinning. */
                backoff = backoff ? (backoff * 2 > 1000 ? 1000 : backoff * 2) : 50;
                if (backoff == 50 || backoff == 1000)
                        log_warn("%s: accept failed (%s); backing off %d ms", what, strerror(e), backoff);
                if (poll(&p[1], 1, backoff) > 0)
                        return -ESHUTDOWN;
        }
}

int listener_peer(int fd, struct ucred *ret)
{
        socklen_t len = sizeof(*ret);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, ret, &len) < 0)
                return -errno;
        return 0;
}

int listener_send_all(int fd, const void *buf, size_t len)
{
        return jsonl_send_raw(fd, buf, len); /* one send loop: jsonl_client.c's */
}

void linereader_init(struct linereader *lr, int fd, size_t max)
{
        memset(lr, 0, sizeof(*lr));
        lr->fd = fd;
        lr->max = max;
}

void linereader_done(struct linereader *lr)
{
        free(lr->buf);
        lr->buf = NULL;
        lr->len = lr->cap = lr->consumed = 0;
}

int linereader_next(struct linereader *lr, char **ret_line, size_t *ret_len, int timeout_ms, int stop_fd)
{
        int64_t deadline = timeout_ms >= 0 ? sbx_now_ms() + timeout_ms : 0;

        if (lr->consumed > 0) {
                memmove(lr->buf, lr->buf + lr->consumed, lr->len - lr->consumed);
                lr->len -= lr->consumed;
                lr->consumed = 0;
        }
        for (size_t scanned = 0;;) {
                char *nl = lr->len > scanned ? memchr(lr->buf + scanned, '\n', lr->len - scanned) : NULL;
                struct pollfd p[2] = {{.fd = lr->fd, .events = POLLIN}, {.fd = stop_fd, .events = POLLIN}};
                int wait = -1, n_poll;
                ssize_t n;

                if (nl) {
                        size_t line_len = (size_t)(nl - lr->buf);
                        if (line_len > lr->max)
                                return -E2BIG;
                        *nl = '\0';
                        lr->consumed = line_len + 1;
                        *ret_line = lr->buf;
                        *ret_len = line_len;
                        return 1;
                }
                scanned = lr->len;
                if (lr->len > lr->max)
                        return -E2BIG;
                if (lr->eof) {
                        if (lr->len == 0)
                                return 0;
                        lr->buf[lr->len] = '\0';
                        lr->consumed = lr->len;
                        *ret_line = lr->buf;
                        *ret_len = lr->len;
                        return 1;
                }
                if (timeout_ms >= 0) {
                        int64_t left = deadline - sbx_now_ms();
                        if (left <= 0)
                                return -ETIMEDOUT;
                        wait = (int)left;
                }
                n_poll = stop_fd >= 0 ? 2 : 1;
                if (poll(p, (nfds_t)n_poll, wait) < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n_poll == 2 && p[1].revents)
                        return -ECANCELED;
                if (!p[0].revents)
                        continue;
                /* room for max + 1 bytes (a full line and its '\n') and a NUL */
                if (lr->cap - lr->len < 2) {
                        size_t want = lr->cap ? lr->cap * 2 : 4096;
                        char *nb;
                        if (want > lr->max + 2)
                                want = lr->max + 2;
                        if (want <= lr->cap)
                                return -E2BIG;
                        nb = realloc(lr->buf, want);
                        if (!nb)
                                return -ENOMEM;
                        lr->buf = nb;
                        lr->cap = want;
                }
                n = read(lr->fd, lr->buf + lr->len, lr->cap - lr->len - 1);
                if (n < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        lr->eof = true;
                lr->len += (size_t)n;
        }
}

/* ---- served sockets ---- */

#define SEND_TIMEOUT_S 30

struct sockserver_conn {
        struct sockserver *srv;
        struct sockserver_conn *next; /* srv->lock */
        int fd;
        struct ucred peer;
        bool authed; /* srv->lock: sockserver_authenticated */
};

struct sockserver {
        struct listener l;
        char what[32];
        char thread_name[16];
        size_t max_conns;
        size_t max_per_uid;
        size_t max_unauth_per_uid; /* 0: max_per_uid alone */
        sockserver_fn fn;
        void *ud;
        pthread_t accept_thread;
        bool accept_started;
        pthread_mutex_t lock;
        pthread_cond_t cond; /* n_conns reached 0 */
        struct sockserver_conn *conns;
        size_t n_conns;
        /* the accept thread's alone: refusals are logged at most every
         * REFUSAL_LOG_MS, with how many there were since */
        int64_t refusal_logged_at;
        uint64_t refusals;
};

#define REFUSAL_LOG_MS 10000

/* A flood of refused connections must not flood the log either. */
static void log_refusal(struct sockserver *srv, const char *why, uid_t uid)
{
        int64_t now = sbx_now_ms();

        srv->refusals++;
        if (srv->refusal_logged_at && now - srv->refusal_logged_at < REFUSAL_LOG_MS)
                return;
        log_warn("%s: refusing connections: %s (uid %u; %" PRIu64 " refused since the last such line)", srv->what, why,
                 (unsigned)uid, srv->refusals);
        srv->refusal_logged_at = now;
        srv->refusals = 0;
}

static void conn_finish(struct sockserver_conn *c)
{
        struct sockserver *srv = c->srv;

        pthread_mutex_lock(&srv->lock);
        for (struct sockserver_conn **pp = &srv->conns; *pp; pp = &(*pp)->next)
                if (*pp == c) {
                        *pp = c->next;
                        break;
                }
        srv->n_conns--;
        pthread_cond_broadcast(&srv->cond);
        pthread_mutex_unlock(&srv->lock);
        closep(&c->fd);
        free(c);
}

static void *conn_main(void *ud)
{
        struct sockserver_conn *c = ud;
        char name[16];

        snprintf(name, sizeof(name), "%.10s-conn", c->srv->thread_name);
        pthread_setname_np(pthread_self(), name);
        c->srv->fn(c->srv, c->fd, &c->peer, c->srv->ud);
        conn_finish(c);
        return NULL;
}

static void refuse(int fd, const char *msg)
{
        char line[256];
        int n = snprintf(line, sizeof(line),
                         "{\"id\":null,\"ok\":false,\"error\":{\"code\":\"busy\",\"message\":\"%s\"}}\n", msg);
        (void)send(fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        close(fd);
}

static void *accept_main(void *ud)
{
        struct sockserver *srv = ud;

        pthread_setname_np(pthread_self(), srv->thread_name);
        for (;;) {
                struct timeval tv = {.tv_sec = SEND_TIMEOUT_S};
                struct sockserver_conn *c;
                pthread_attr_t attr;
                pthread_t t;
                int fd, r;

                /* unknown unless the kernel says: never uid 0 by default */
                struct ucred peer = {.pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1};
                size_t mine = 0, mine_unauth = 0;

                if (listener_accept(&srv->l, srv->what, &fd) < 0)
                        break;
                (void)listener_peer(fd, &peer);
                pthread_mutex_lock(&srv->lock);
                for (struct sockserver_conn *o = srv->conns; o; o = o->next)
                        if (o->peer.uid == peer.uid) {
                                mine++;
                                mine_unauth += !o->authed;
                        }
                if (srv->n_conns >= srv->max_conns) {
                        pthread_mutex_unlock(&srv->lock);
                        log_refusal(srv, "connections.max open", peer.uid);
                        refuse(fd, "too many connections; retry later");
                        continue;
                }
                /* one local user cannot take every slot (root, who could stop the daemon anyway, is not capped) */
                if (peer.uid != 0 && mine >= srv->max_per_uid) {
                        pthread_mutex_unlock(&srv->lock);
                        log_refusal(srv, "this uid has connections.max_per_uid open", peer.uid);
                        refuse(fd, "too many connections from this uid; retry later");
                        continue;
                }
                /* nor can it hold many before it shows a token (the auth deadline ends each) */
                if (peer.uid != 0 && srv->max_unauth_per_uid && mine_unauth >= srv->max_unauth_per_uid) {
                        pthread_mutex_unlock(&srv->lock);
                        log_refusal(srv, "this uid has API_MAX_UNAUTHENTICATED_PER_UID open", peer.uid);
                        refuse(fd, "too many unauthenticated connections from this uid; retry later");
                        continue;
                }
                c = calloc(1, sizeof(*c));
                if (!c) {
                        pthread_mutex_unlock(&srv->lock);
                        refuse(fd, "out of memory");
                        continue;
                }
                c->srv = srv;
                c->fd = fd;
                c->peer = peer;
                (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
                c->next = srv->conns;
                srv->conns = c;
                srv->n_conns++;
                pthread_mutex_unlock(&srv->lock);

                pthread_attr_init(&attr);
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                r = pthread_create(&t, &attr, conn_main, c);
                pthread_attr_destroy(&attr);
                if (r != 0) {
                        /* conn_finish closes fd: send the refusal first */
                        static const char msg[] =
                                "{\"id\":null,\"ok\":false,\"error\":{\"code\":\"busy\","
                                "\"message\":\"cannot start a worker\"}}\n";
                        (void)send(fd, msg, sizeof(msg) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                        conn_finish(c);
                }
        }
        return NULL;
}

int sockserver_start(const char *what, const char *thread_name, const char *path, mode_t mode, gid_t gid,
                     size_t max_conns, size_t max_per_uid, size_t max_unauth_per_uid, sockserver_fn fn, void *ud,
                     struct sockserver **ret, struct sbx_error *err)
{
        struct sockserver *srv = calloc(1, sizeof(*srv));
        int r;

        if (!srv)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        sbx_strlcpy(srv->what, what, sizeof(srv->what));
        sbx_strlcpy(srv->thread_name, thread_name, sizeof(srv->thread_name));
        srv->max_conns = max_conns;
        srv->max_per_uid = max_per_uid;
        srv->max_unauth_per_uid = max_unauth_per_uid;
        srv->fn = fn;
        srv->ud = ud;
        pthread_mutex_init(&srv->lock, NULL);
        pthread_cond_init(&srv->cond, NULL);
        r = listener_open(&srv->l, path, mode, gid, err);
        if (r < 0) {
                sbx_error_prefix(err, "%s socket", what);
                sockserver_stop(srv);
                return r;
        }
        r = -pthread_create(&srv->accept_thread, NULL, accept_main, srv);
        if (r < 0) {
                sockserver_stop(srv);
                return sbx_error_set(err, r, 0, "cannot start the %s thread: %s", what, strerror(-r));
        }
        srv->accept_started = true;
        *ret = srv;
        return 0;
}

void sockserver_stop(struct sockserver *srv)
{
        if (!srv)
                return;
        listener_wake(&srv->l);
        if (srv->accept_started)
                pthread_join(srv->accept_thread, NULL);
        pthread_mutex_lock(&srv->lock);
        for (struct sockserver_conn *c = srv->conns; c; c = c->next)
                (void)shutdown(c->fd, SHUT_RDWR);
        while (srv->n_conns > 0)
                pthread_cond_wait(&srv->cond, &srv->lock);
        pthread_mutex_unlock(&srv->lock);
        listener_close(&srv->l);
        pthread_cond_destroy(&srv->cond);
        pthread_mutex_destroy(&srv->lock);
        free(srv);
}

void sockserver_authenticated(struct sockserver *srv, int fd)
{
        pthread_mutex_lock(&srv->lock);
        for (struct sockserver_conn *c = srv->conns; c; c = c->next)
                if (c->fd == fd)
                        c->authed = true;
        pthread_mutex_unlock(&srv->lock);
}

int sockserver_stop_fd(struct sockserver *srv)
{
        return listener_stop_fd(&srv->l);
}

bool sockserver_stopping(struct sockserver *srv)
{
        return listener_stopping(&srv->l);
}
