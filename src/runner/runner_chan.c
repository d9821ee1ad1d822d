/* runner_chan.c — a session's runner channel: its directory under
 * {data_dir}/runner (root 0755 in a root 0700 parent, bind-mounted
 * read-only into the session's container), the listening runner.sock in
 * it, and the calls that find, wait for, rename (warm pool claims) and drop
 * a channel. Sockets are bound through the directory fd, never a path a
 * container could have changed.
 *
 * Locks: h->lock for the channel list and a channel's fields (see
 * runner.c); no file system call under it. Only the hub thread frees a
 * channel: runner_hub_drop and runner_hub_rekey only mark one dead. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "runner_internal.h"
#include "sandboxd/sha256.h"

/* 0, or -ENOMEM (libcrypto could not allocate): never an empty name. */
static int chan_key_hash(const char *user, const char *session, char out[33])
{
        char key[140], hex[65];
        int n = snprintf(key, sizeof(key), "%s:%s", user, session);
        if (sha256_hex(key, (size_t)n, hex) < 0)
                return -ENOMEM;
        memcpy(out, hex, 32);
        out[32] = '\0';
        return 0;
}

struct runner_chan *runner_chan_find_locked(struct runner_hub *h, const char *user, const char *session)
{
        for (struct runner_chan *c = h->chans; c; c = c->next)
                if (!c->dead && strcmp(c->user, user) == 0 && strcmp(c->session, session) == 0)
                        return c;
        return NULL;
}

const char *runner_hub_binary(struct runner_hub *h)
{
        struct stat st;

        /* root's own file, nobody else may change it: it runs in every container */
        if (!h || stat(h->binary, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022) ||
            !(st.st_mode & 0001))
                return NULL;
        return h->binary;
}

int runner_hub_prepare(struct runner_hub *h, const char *user, const char *session, char ret_dir[SBX_PATH_MAX],
                       struct sbx_error *err)
{
        _cleanup_close_ int root = -1, dfd = -1, lfd = -1;
        struct runner_chan *c;
        char hash[33], path[SBX_PATH_MAX], proc[64];
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct stat st;

        if (chan_key_hash(user, session, hash) < 0)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (snprintf(path, sizeof(path), "%s/%s", h->root, hash) >= (int)sizeof(path))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "runner directory path too long");
        pthread_mutex_lock(&h->lock);
        c = runner_chan_find_locked(h, user, session);
        if (c) {
                c->waited_in_vain = false; /* a new container: its runner is worth waiting for */
                c->refused_once = false;
                c->ever_hello = c->hello;
                c->frozen = false;
        }
        pthread_mutex_unlock(&h->lock);
        if (c) {
                sbx_strlcpy(ret_dir, path, SBX_PATH_MAX);
                return 0;
        }

        root = open(h->root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root < 0)
                return sbx_error_set(err, -errno, 0, "cannot open %s: %m", h->root);
        if (mkdirat(root, hash, 0755) < 0 && errno != EEXIST)
                return sbx_error_set(err, -errno, 0, "cannot create %s: %m", path);
        dfd = openat(root, hash, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0 || fstat(dfd, &st) < 0)
                return sbx_error_set(err, -errno, 0, "cannot open %s: %m", path);
        if ((st.st_uid != 0 && fchown(dfd, 0, 0) < 0) || ((st.st_mode & 07777) != 0755 && fchmod(dfd, 0755) < 0))
                return sbx_error_set(err, -errno, 0, "cannot secure %s: %m", path);
        /* a stale socket from an earlier daemon; only root ever writes here */
        if (unlinkat(dfd, RP_SOCKET_NAME, 0) < 0 && errno != ENOENT)
                return sbx_error_set(err, -errno, 0, "cannot remove the stale socket in %s: %m", path);
        /* bind through the directory fd: no path is re-resolved, and the
         * length limit of sun_path does not depend on data_dir */
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d/" RP_SOCKET_NAME, dfd);
        sbx_strlcpy(sa.sun_path, proc, sizeof(sa.sun_path));
        lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return sbx_error_set(err, -errno, 0, "cannot bind the runner socket in %s: %m", path);
        if (fchmodat(dfd, RP_SOCKET_NAME, 0666, 0) < 0 || listen(lfd, 4) < 0)
                return sbx_error_set(err, -errno, 0, "cannot listen on the runner socket in %s: %m", path);

        c = calloc(1, sizeof(*c));
        if (c)
                c->inbuf = malloc(RP_HDR_LEN + RP_MAX_FROM_RUNNER);
        if (!c || !c->inbuf) {
                free(c);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        c->h = h;
        sbx_strlcpy(c->user, user, sizeof(c->user));
        sbx_strlcpy(c->session, session, sizeof(c->session));
        sbx_strlcpy(c->dir, path, sizeof(c->dir));
        c->cfd = -1;
        c->ep_listen = (struct ep_ref){c, EP_LISTEN};
        c->ep_conn = (struct ep_ref){c, EP_CONN};
        pthread_mutex_init(&c->wlock, NULL);
        pthread_mutex_lock(&h->lock);
        if (runner_chan_find_locked(h, user, session)) {
                /* another thread prepared it meanwhile: ours goes (its socket file is the other's now? no:
                 * both bound the same name; the later bind replaced nothing because we unlinked first) */
                pthread_mutex_unlock(&h->lock);
                runner_chan_free(c);
                sbx_strlcpy(ret_dir, path, SBX_PATH_MAX);
                return 0;
        }
        c->dirfd = TAKE_FD(dfd);
        c->lfd = TAKE_FD(lfd);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->ep_listen};
        (void)epoll_ctl(h->epfd, EPOLL_CTL_ADD, c->lfd, &ev);
        c->next = h->chans;
        h->chans = c;
        pthread_mutex_unlock(&h->lock);
        sbx_strlcpy(ret_dir, path, SBX_PATH_MAX);
        return 0;
}

int runner_hub_adopt(struct runner_hub *h, const char *user, const char *session)
{
        char hash[33], dir[SBX_PATH_MAX];
        _cleanup_close_ int root = -1;
        struct stat st;
        bool known;

        if (!h || !runner_hub_binary(h))
                return -ENOENT;
        pthread_mutex_lock(&h->lock);
        known = runner_chan_find_locked(h, user, session) != NULL;
        pthread_mutex_unlock(&h->lock);
        if (known)
                return 0;
        if (chan_key_hash(user, session, hash) < 0)
                return -ENOMEM;
        root = open(h->root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root < 0 || fstatat(root, hash, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
                return -ENOENT;
        return runner_hub_prepare(h, user, session, dir, NULL);
}

int runner_hub_dir(struct runner_hub *h, const char *user, const char *session, char ret_dir[SBX_PATH_MAX])
{
        struct runner_chan *c;
        int r = -ENOENT;

        if (!h)
                return -ENOENT;
        pthread_mutex_lock(&h->lock);
        c = runner_chan_find_locked(h, user, session);
        if (c) {
                sbx_strlcpy(ret_dir, c->dir, SBX_PATH_MAX);
                r = 0;
        }
        pthread_mutex_unlock(&h->lock);
        return r;
}

void runner_hub_drop(struct runner_hub *h, const char *user, const char *session)
{
        struct runner_chan *c;
        char hash[33];
        _cleanup_close_ int root = -1;

        if (!h)
                return;
        pthread_mutex_lock(&h->lock);
        c = runner_chan_find_locked(h, user, session);
        if (c)
                c->dead = true;
        pthread_mutex_unlock(&h->lock);
        runner_hub_wake(h);
        if (chan_key_hash(user, session, hash) < 0)
                return;
        root = open(h->root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root >= 0) {
                _cleanup_close_ int dfd = openat(root, hash, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (dfd >= 0) {
                        (void)unlinkat(dfd, RP_SOCKET_NAME, 0);
                        (void)unlinkat(dfd, RUNNER_PEER_FILE, 0);
                        /* the gateway's (gateway_drop may come later) */
                        (void)unlinkat(dfd, RP_EGRESS_SOCKET_NAME, 0);
                        (void)unlinkat(dfd, RP_FWD_SOCKET_NAME, 0);
                }
                (void)unlinkat(root, hash, AT_REMOVEDIR);
        }
}

int runner_hub_rekey(struct runner_hub *h, const struct sbx_config *cfg, const char *from_user,
                     const char *from_session, const char *to_user, const char *to_session, struct sbx_error *err)
{
        char from[33], to[33], root_path[SBX_PATH_MAX];
        _cleanup_close_ int root = -1;
        struct runner_chan *c, *old;
        struct stat st;

        if (chan_key_hash(from_user, from_session, from) < 0 || chan_key_hash(to_user, to_session, to) < 0)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (h)
                sbx_strlcpy(root_path, h->root, sizeof(root_path));
        else if (snprintf(root_path, sizeof(root_path), "%s/runner", cfg->data_dir) >= (int)sizeof(root_path))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "runner directory path too long");
        root = open(root_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root < 0)
                return sbx_error_set(err, -errno, 0, "cannot open %s: %m", root_path);
        if (!h && strcmp(from, to) == 0) { /* the same key: remove the directory */
                _cleanup_close_ int dfd = openat(root, to, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (dfd >= 0) {
                        (void)unlinkat(dfd, RP_SOCKET_NAME, 0);
                        (void)unlinkat(dfd, RUNNER_PEER_FILE, 0);
                }
                (void)unlinkat(root, to, AT_REMOVEDIR);
                return 0;
        }
        if (fstatat(root, from, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                if (!S_ISDIR(st.st_mode))
                        return sbx_error_set(err, -ENOTDIR, 0, "%s/%s is not a directory", root_path, from);
                /* the target's stale directory (an earlier container's runner) goes first */
                if (h)
                        runner_hub_drop(h, to_user, to_session);
                else {
                        _cleanup_close_ int dfd = openat(root, to, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (dfd >= 0) {
                                (void)unlinkat(dfd, RP_SOCKET_NAME, 0);
                                (void)unlinkat(dfd, RUNNER_PEER_FILE, 0);
                        }
                        (void)unlinkat(root, to, AT_REMOVEDIR);
                }
                if (renameat(root, from, root, to) < 0)
                        return sbx_error_set(err, -errno, 0, "cannot rename the runner directory %s to %s: %m", from,
                                             to);
        } else if (errno != ENOENT || fstatat(root, to, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                return sbx_error_set(err, -ENOENT, 0, "no runner directory for %s:%s", from_user, from_session);
        }
        if (!h)
                return 0;
        pthread_mutex_lock(&h->lock);
        old = runner_chan_find_locked(h, to_user, to_session);
        if (old)
                old->dead = true; /* dropped above; reaped by the hub thread */
        c = runner_chan_find_locked(h, from_user, from_session);
        if (c) {
                sbx_strlcpy(c->user, to_user, sizeof(c->user));
                sbx_strlcpy(c->session, to_session, sizeof(c->session));
                snprintf(c->dir, sizeof(c->dir), "%s/%s", h->root, to);
        }
        pthread_mutex_unlock(&h->lock);
        runner_hub_wake(h);
        return 0;
}

bool runner_hub_wait(struct runner_hub *h, const char *user, const char *session, int timeout_ms)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms);
        bool ok = false;

        if (!h)
                return false;
        pthread_mutex_lock(&h->lock);
        for (;;) {
                struct runner_chan *c = runner_chan_find_locked(h, user, session);
                if (!c)
                        break;
                if (c->cfd >= 0 && c->hello) {
                        ok = true;
                        break;
                }
                if (c->waited_in_vain && !c->ever_hello)
                        break; /* this container has no runner: do not make every request wait */
                if (timeout_ms <= 0)
                        break;
                if (pthread_cond_timedwait(&h->cond, &h->lock, &until) == ETIMEDOUT) {
                        c->waited_in_vain = true;
                        break;
                }
        }
        pthread_mutex_unlock(&h->lock);
        return ok;
}

void runner_hub_set_frozen(struct runner_hub *h, const char *user, const char *session, bool frozen)
{
        if (!h)
                return;
        pthread_mutex_lock(&h->lock);
        struct runner_chan *c = runner_chan_find_locked(h, user, session);
        if (c) {
                c->frozen = frozen;
                /* thawed: its silence while frozen was not its fault */
                if (!frozen)
                        c->last_rx = c->last_ping = sbx_now_ms();
        }
        pthread_mutex_unlock(&h->lock);
}

bool runner_hub_version(struct runner_hub *h, const char *user, const char *session, char *ret, size_t size)
{
        bool ok = false;

        if (size)
                ret[0] = '\0';
        if (!h)
                return false;
        pthread_mutex_lock(&h->lock);
        struct runner_chan *c = runner_chan_find_locked(h, user, session);
        if (c && c->cfd >= 0 && c->hello) {
                sbx_strlcpy(ret, c->version, size);
                ok = true;
        }
        pthread_mutex_unlock(&h->lock);
        return ok;
}
