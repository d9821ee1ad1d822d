/* hub_chan.c — a session's runner channel: its directory under
 * {data_dir}/runner (root 0755 in a root 0700 parent, bind-mounted
 * read-only into the session's container), the listening runner.sock in
 * it, and the calls that find, wait for, rename (warm pool claims) and drop
 * a channel. Sockets are bound through the directory fd, never a path a
 * container could have changed.
 *
 * Locks: h->lock for the channel list and a channel's fields (see
 * hub.c); no file system call under it. Only the hub thread frees a
 * channel: hub_drop and hub_rekey only mark one dead. */
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

#include "hub_internal.h"
#include "sandboxd/log.h"
#include "sandboxd/hub_dir.h"

struct hub_chan *hub_chan_find_locked(struct hub *h, const char *user, const char *session)
{
        for (struct hub_chan *c = h->chans; c; c = c->next)
                if (!c->dead && strcmp(c->user, user) == 0 && strcmp(c->session, session) == 0)
                        return c;
        return NULL;
}

const char *hub_binary(struct hub *h)
{
        struct stat st;

        if (h && h->node_ops)
                return h->node_ops->binary(h->node); /* it runs on the node: the node's check */
        /* root's own file, nobody else may change it: it runs in every container */
        if (!h || stat(h->binary, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022) ||
            !(st.st_mode & 0001))
                return NULL;
        return h->binary;
}

void hub_set_epoch_fn(struct hub *h, hub_epoch_fn fn, void *userdata)
{
        h->epoch_fn = fn;
        h->epoch_ud = userdata;
}

void hub_set_refused_fn(struct hub *h, hub_refused_fn fn, void *userdata)
{
        h->refused_fn = fn;
        h->refused_ud = userdata;
}

void hub_set_node(struct hub *h, const struct node_ops *ops, void *node)
{
        h->node_ops = ops;
        h->node = node;
}

bool hub_remote(const struct hub *h)
{
        return h && h->node_ops;
}

static int session_epoch(struct hub *h, const char *user, const char *session, bool bump, uint64_t *ret,
                         struct sbx_error *err)
{
        *ret = 0;
        if (!h->epoch_fn)
                return 0;
        int r = h->epoch_fn(user, session, bump, ret, h->epoch_ud);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot record the session's epoch: %s", strerror(-r));
        return 0;
}

/* A channel for (user, session) in dir; dirfd and lfd are -1 over a node
 * link. Returns the channel now listed (another thread's if it was
 * first: ours goes). */
static int chan_add(struct hub *h, const char *user, const char *session, const char *dir, int dirfd, int lfd,
                    struct sbx_error *err)
{
        struct hub_chan *c = calloc(1, sizeof(*c));

        if (c)
                c->inbuf = malloc(RP_HDR_LEN + RP_MAX_FROM_RUNNER);
        if (!c || !c->inbuf) {
                free(c);
                if (dirfd >= 0)
                        close(dirfd);
                if (lfd >= 0)
                        close(lfd);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        c->h = h;
        sbx_strlcpy(c->user, user, sizeof(c->user));
        sbx_strlcpy(c->session, session, sizeof(c->session));
        sbx_strlcpy(c->dir, dir, sizeof(c->dir));
        c->cfd = -1;
        c->dirfd = dirfd;
        c->lfd = lfd;
        c->ep_listen = (struct ep_ref){c, EP_LISTEN};
        c->ep_conn = (struct ep_ref){c, EP_CONN};
        pthread_mutex_init(&c->wlock, NULL);
        pthread_mutex_lock(&h->lock);
        if (hub_chan_find_locked(h, user, session)) {
                /* another thread prepared it meanwhile: it listens on the same socket file */
                pthread_mutex_unlock(&h->lock);
                hub_chan_free(c);
                return 0;
        }
        if (c->lfd >= 0) {
                struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->ep_listen};
                (void)epoll_ctl(h->epfd, EPOLL_CTL_ADD, c->lfd, &ev);
        }
        c->next = h->chans;
        h->chans = c;
        pthread_mutex_unlock(&h->lock);
        return 0;
}

int hub_prepare(struct hub *h, const char *user, const char *session, char ret_dir[SBX_PATH_MAX], struct sbx_error *err)
{
        return hub_prepare_on(h, user, session, NULL, ret_dir, err);
}

int hub_prepare_on(struct hub *h, const char *user, const char *session, const char *node, char ret_dir[SBX_PATH_MAX],
                   struct sbx_error *err)
{
        struct hub_chan *c;
        char path[SBX_PATH_MAX];
        uint64_t epoch;
        int dfd = -1, lfd = -1, r;

        /* a new container of the session: a new epoch (node.h, fencing) */
        r = session_epoch(h, user, session, true, &epoch, err);
        if (r < 0)
                return r;
        if (!h->node_ops)
                pthread_mutex_lock(&h->open_lock);
        pthread_mutex_lock(&h->lock);
        c = hub_chan_find_locked(h, user, session);
        if (c) {
                c->waited_in_vain = false; /* a new container: its runner is worth waiting for */
                c->refused_once = false;
                c->ever_hello = c->fence_pending ? false : c->hello; /* a fenced runner is no longer this one */
                c->frozen = false;
                c->epoch = epoch;
                sbx_strlcpy(path, c->dir, sizeof(path));
        }
        pthread_mutex_unlock(&h->lock);
        if (h->node_ops) /* the node learns the new epoch, and listens again if it had restarted */
                r = h->node_ops->open(h->node, user, session, epoch, NODE_OPEN_NEW, node, path, err);
        else if (!c)
                r = hub_dir_listen(h->root, user, session, true, &dfd, &lfd, path, err);
        if (r == 0 && !c)
                r = chan_add(h, user, session, path, dfd, lfd, err);
        if (!h->node_ops)
                pthread_mutex_unlock(&h->open_lock);
        if (r < 0)
                return r;
        if (!c) {
                pthread_mutex_lock(&h->lock);
                c = hub_chan_find_locked(h, user, session);
                if (c)
                        c->epoch = epoch;
                pthread_mutex_unlock(&h->lock);
        }
        if (r == 0)
                sbx_strlcpy(ret_dir, path, SBX_PATH_MAX);
        return r;
}

void hub_fence_runner(struct hub *h, const char *user, const char *session)
{
        struct hub_chan *c;

        if (!h || h->node_ops) /* over a link the node checks epochs itself (node.h) */
                return;
        pthread_mutex_lock(&h->lock);
        c = hub_chan_find_locked(h, user, session);
        if (c)
                c->fence_pending = true;
        pthread_mutex_unlock(&h->lock);
        if (c)
                hub_wake(h); /* up before the next container exists */
}

int hub_adopt(struct hub *h, const char *user, const char *session)
{
        char dir[SBX_PATH_MAX];
        uint64_t epoch;
        int dfd = -1, lfd = -1, r;
        bool known;

        if (!h || !hub_binary(h))
                return -ENOENT;
        if (h->node_ops) {
                pthread_mutex_lock(&h->lock);
                known = hub_chan_find_locked(h, user, session) != NULL;
                pthread_mutex_unlock(&h->lock);
                if (known)
                        return 0;
                r = session_epoch(h, user, session, false, &epoch, NULL);
                if (r == 0)
                        r = h->node_ops->open(h->node, user, session, epoch, NODE_OPEN_ADOPT, NULL, dir, NULL);
                return r < 0 ? r : chan_add(h, user, session, dir, dfd, lfd, NULL);
        }
        /* every adopter after a restart calls this at once: one binds the socket (open_lock) */
        pthread_mutex_lock(&h->open_lock);
        pthread_mutex_lock(&h->lock);
        known = hub_chan_find_locked(h, user, session) != NULL;
        pthread_mutex_unlock(&h->lock);
        r = known ? 0 : hub_dir_listen(h->root, user, session, false, &dfd, &lfd, dir, NULL);
        if (r == 0 && !known)
                r = chan_add(h, user, session, dir, dfd, lfd, NULL);
        pthread_mutex_unlock(&h->open_lock);
        return r;
}

int hub_dir(struct hub *h, const char *user, const char *session, char ret_dir[SBX_PATH_MAX])
{
        struct hub_chan *c;
        int r = -ENOENT;

        if (!h)
                return -ENOENT;
        pthread_mutex_lock(&h->lock);
        c = hub_chan_find_locked(h, user, session);
        if (c) {
                sbx_strlcpy(ret_dir, c->dir, SBX_PATH_MAX);
                r = 0;
        }
        pthread_mutex_unlock(&h->lock);
        return r;
}

void hub_drop(struct hub *h, const char *user, const char *session)
{
        struct hub_chan *c;

        if (!h)
                return;
        pthread_mutex_lock(&h->lock);
        c = hub_chan_find_locked(h, user, session);
        if (c)
                c->dead = true;
        pthread_mutex_unlock(&h->lock);
        hub_wake(h);
        if (h->node_ops)
                h->node_ops->drop(h->node, user, session);
        else
                hub_dir_remove(h->root, user, session); /* the gateway's sockets too (gateway_drop may come later) */
}

int hub_rekey(struct hub *h, const struct sbx_config *cfg, const char *from_user, const char *from_session,
              const char *to_user, const char *to_session, struct sbx_error *err)
{
        char root_path[SBX_PATH_MAX], path[SBX_PATH_MAX];
        struct hub_chan *c, *old;
        uint64_t epoch = 0;
        int r;

        if (h)
                sbx_strlcpy(root_path, h->root, sizeof(root_path));
        else if (snprintf(root_path, sizeof(root_path), "%s/runner", cfg->data_dir) >= (int)sizeof(root_path))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "runner directory path too long");
        if (!h && strcmp(from_user, to_user) == 0 && strcmp(from_session, to_session) == 0) {
                hub_dir_remove(root_path, to_user, to_session); /* the same key: remove the directory */
                return 0;
        }
        if (h) {
                /* the session moves to another container: a new epoch */
                r = session_epoch(h, to_user, to_session, true, &epoch, err);
                if (r < 0)
                        return r;
                pthread_mutex_lock(&h->lock);
                old = hub_chan_find_locked(h, to_user, to_session);
                if (old)
                        old->dead = true; /* the target's stale channel (an earlier container's runner) */
                pthread_mutex_unlock(&h->lock);
        }
        if (h && h->node_ops)
                r = h->node_ops->rekey(h->node, from_user, from_session, to_user, to_session, epoch, path, err);
        else
                r = hub_dir_rename(root_path, from_user, from_session, to_user, to_session, path, err);
        if (r < 0 || !h)
                return r;
        pthread_mutex_lock(&h->lock);
        c = hub_chan_find_locked(h, from_user, from_session);
        if (c) {
                sbx_strlcpy(c->user, to_user, sizeof(c->user));
                sbx_strlcpy(c->session, to_session, sizeof(c->session));
                sbx_strlcpy(c->dir, path, sizeof(c->dir));
        }
        pthread_mutex_unlock(&h->lock);
        hub_wake(h);
        return 0;
}

/* The keys of every live channel, copied under h->lock so the caller can
 * call out (the node, the store, the lost handler) without it. A failed
 * allocation stops the walk and keeps what was gathered. */
struct chan_key {
        char user[65], session[65];
};

static size_t chan_keys_locked(struct hub *h, struct chan_key **ret)
{
        struct chan_key *keys = NULL;
        size_t n = 0, cap = 0;

        for (struct hub_chan *c = h->chans; c; c = c->next) {
                if (c->dead)
                        continue;
                if (n == cap) {
                        struct chan_key *k = realloc(keys, (cap ? cap * 2 : 16) * sizeof(*k));
                        if (!k)
                                break;
                        keys = k;
                        cap = cap ? cap * 2 : 16;
                }
                memcpy(keys[n].user, c->user, sizeof(c->user));
                memcpy(keys[n].session, c->session, sizeof(c->session));
                n++;
        }
        *ret = keys;
        return n;
}

/* The live channels' keys of the sessions placed on node (NULL: all). The
 * placement is asked with no hub lock held (it is the store). */
static size_t chan_keys_of(struct hub *h, const char *node, struct chan_key **ret)
{
        struct chan_key *keys = NULL;
        size_t n, kept = 0;

        pthread_mutex_lock(&h->lock);
        n = chan_keys_locked(h, &keys);
        pthread_mutex_unlock(&h->lock);
        for (size_t i = 0; i < n; i++)
                if (!node || !h->node_ops || h->node_ops->placed_on(h->node, keys[i].user, keys[i].session, node))
                        keys[kept++] = keys[i];
        *ret = keys;
        return kept;
}

void hub_reopen(struct hub *h, const char *node)
{
        struct chan_key *keys = NULL;
        size_t n, failed = 0;

        if (!h || !h->node_ops)
                return;
        n = chan_keys_of(h, node, &keys);
        for (size_t i = 0; i < n; i++) {
                char dir[SBX_PATH_MAX];
                uint64_t epoch;
                struct sbx_error e = {0};
                if (session_epoch(h, keys[i].user, keys[i].session, false, &epoch, &e) < 0 ||
                    h->node_ops->open(h->node, keys[i].user, keys[i].session, epoch, NODE_OPEN_AGAIN, NULL, dir, &e) <
                            0) {
                        log_ctx(LOG_LEVEL_WARN, keys[i].user, keys[i].session, NULL,
                                "cannot open the session on its node again: %s", e.msg);
                        failed++;
                }
        }
        if (n)
                log_info("node link: %zu sessions opened on node %s again (%zu failed)", n - failed,
                         node ? node : "(any)", failed);
        free(keys);
}

size_t hub_fence(struct hub *h, const char *node)
{
        struct chan_key *keys = NULL;
        size_t n;

        if (!h)
                return 0;
        n = chan_keys_of(h, node, &keys);
        pthread_mutex_lock(&h->lock);
        for (size_t i = 0; i < n; i++) {
                struct hub_chan *c = hub_chan_find_locked(h, keys[i].user, keys[i].session);
                if (c)
                        hub_end_detached_locked(c, true, 0);
        }
        hub_lost_fn lost = h->on_lost;
        void *lost_ud = h->lost_ud;
        pthread_mutex_unlock(&h->lock);
        for (size_t i = 0; i < n; i++) {
                uint64_t epoch;
                (void)session_epoch(h, keys[i].user, keys[i].session, true, &epoch, NULL);
                if (lost)
                        lost(keys[i].user, keys[i].session, "node_lost", lost_ud);
        }
        free(keys);
        return n;
}

bool hub_wait(struct hub *h, const char *user, const char *session, int timeout_ms)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms);
        bool ok = false;

        if (!h)
                return false;
        pthread_mutex_lock(&h->lock);
        for (;;) {
                struct hub_chan *c = hub_chan_find_locked(h, user, session);
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

void hub_set_frozen(struct hub *h, const char *user, const char *session, bool frozen)
{
        if (!h)
                return;
        pthread_mutex_lock(&h->lock);
        struct hub_chan *c = hub_chan_find_locked(h, user, session);
        if (c) {
                c->frozen = frozen;
                /* thawed: its silence while frozen was not its fault */
                if (!frozen)
                        c->last_rx = c->last_ping = sbx_now_ms();
        }
        pthread_mutex_unlock(&h->lock);
}

bool hub_version(struct hub *h, const char *user, const char *session, char *ret, size_t size)
{
        bool ok = false;

        if (size)
                ret[0] = '\0';
        if (!h)
                return false;
        pthread_mutex_lock(&h->lock);
        struct hub_chan *c = hub_chan_find_locked(h, user, session);
        if (c && c->cfd >= 0 && c->hello) {
                sbx_strlcpy(ret, c->version, size);
                ok = true;
        }
        pthread_mutex_unlock(&h->lock);
        return ok;
}
