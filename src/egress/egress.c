/* egress.c — the daemon's egress proxy (egress.h): HTTP CONNECT and
 * absolute-URI HTTP requests from a session's runner, default deny, the
 * allowlist, the SSRF guard, caps, an audit row for every decision.
 *
 * libevent drives it: one event_base in the thread "sbx-egress", a
 * bufferevent per side of every connection, read high-watermarks and the
 * le-proxy pattern (stop reading one side while the other's output is over
 * RELAY_HIGH), so a connection holds at most a few hundred KiB however fast
 * either end is. http_parser (Debian libhttp-parser) parses the request head
 * and tracks where a request's body ends; the head's end is found first
 * (CRLF CRLF within egress_max_header) and exactly those bytes are fed to
 * the parser, so the bytes after it are the body or the tunnel's, unparsed.
 * Names are resolved with evdns (egress_resolve overrides first), and the
 * proxy connects to the very address it judged: no second lookup, no DNS
 * rebinding window. Plain HTTP is one request per connection: the request
 * goes upstream with `Connection: close` and the connection ends with the
 * response.
 *
 * This file is the loop and the sessions: the thread, the queues other
 * threads fill (accepted fds, ratchet closes), the per-session caps and the
 * statistics. egress_tunnel.c owns a connection from its head to its audit
 * row (policy, lookup, decision), egress_relay.c its bytes (connect and
 * relay), egress_http.c the request head's parsing and rewrite, egress_tls.c
 * interception and egress_filter.c the package index pages it filters off
 * this thread.
 *
 * Threads and locks: the loop thread owns every tunnel and the libevent
 * objects. egress_accept and egress_close_session (any thread) hand work
 * over through eg->lock (the queues) and an event activated across threads
 * (evthread_use_pthreads); egress_close_session waits on eg->done_cond.
 * eg->lock also guards the list of struct esess against readers of the
 * statistics; the counters themselves are atomics. The store is called from
 * the loop thread (an indexed lookup per connection, a row per decision). */
#include "sandboxd/egress.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <event2/util.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandboxd/egress_policy.h"
#include "sandboxd/log.h"
#include "sandboxd/utf8.h"
#include "sandboxd/store.h"
#include "sandboxd/store_egress.h"
#include "egress_internal.h"

#define MAX_PENDING 4096         /* accepted fds waiting for the loop */
#define SESSION_FORGET_MS 600000 /* a session with no tunnel this long is forgotten */
#define CLOSE_WAIT_MS 5000

static pthread_once_t evthread_once = PTHREAD_ONCE_INIT;
static int evthread_rc;

static void evthread_init(void)
{
        evthread_rc = evthread_use_pthreads();
}

/* ---- sessions ---- */

static struct esess *sess_find(struct egress *eg, const char *user, const char *session)
{
        for (struct esess *s = eg->sessions; s; s = s->next)
                if (strcmp(s->user, user) == 0 && strcmp(s->session, session) == 0)
                        return s;
        return NULL;
}

/* Loop thread only (it is the only one that adds or removes). */
static struct esess *sess_get(struct egress *eg, const char *user, const char *session)
{
        struct esess *s = sess_find(eg, user, session);

        if (s)
                return s;
        s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        sbx_strlcpy(s->user, user, sizeof(s->user));
        sbx_strlcpy(s->session, session, sizeof(s->session));
        s->last_used = sbx_now_ms();
        pthread_mutex_lock(&eg->lock);
        s->next = eg->sessions;
        eg->sessions = s;
        pthread_mutex_unlock(&eg->lock);
        return s;
}

/* Forget idle sessions that hold no tunnel and were not closed by the ratchet. */
static void sess_sweep(evutil_socket_t fd, short what, void *arg)
{
        struct egress *eg = arg;
        int64_t now = sbx_now_ms();

        pthread_mutex_lock(&eg->lock);
        for (struct esess **pp = &eg->sessions; *pp;) {
                struct esess *s = *pp;
                if (!s->tunnels && !s->closed && now - s->last_used > SESSION_FORGET_MS) {
                        *pp = s->next;
                        free(s);
                } else {
                        pp = &s->next;
                }
        }
        pthread_mutex_unlock(&eg->lock);
}

/* ---- accepting ---- */

/* Open connections of all the user's sessions (loop thread: the list is its own). */
static int user_open(struct egress *eg, const char *user)
{
        int n = 0;
        for (struct esess *s = eg->sessions; s; s = s->next)
                if (strcmp(s->user, user) == 0)
                        n += atomic_load(&s->n_open);
        return n;
}

static void start_one(struct egress *eg, const struct pending *p)
{
        struct esess *s = sess_get(eg, p->user, p->session);
        bool private_ = true;

        if (!s) {
                close(p->fd);
                return;
        }
        s->last_used = sbx_now_ms();
        (void)store_private_any(eg->store, p->user, p->session, &private_);
        if (s->closed || private_) {
                egress_tunnel_refuse_fd(eg, s, p->fd, 403, "private",
                                        "the session holds private data: it has no egress");
                return;
        }
        if (atomic_load(&eg->n_open) >= eg->cfg.egress_max_tunnels) {
                egress_tunnel_refuse_fd(eg, s, p->fd, 503, "cap_global", "the daemon's egress tunnels are all in use");
                return;
        }
        if (atomic_load(&s->n_open) >= eg->cfg.egress_max_tunnels_per_session) {
                egress_tunnel_refuse_fd(eg, s, p->fd, 429, "cap_tunnels", "the session has too many open tunnels");
                return;
        }
        if (user_open(eg, p->user) >= eg->cfg.egress_max_tunnels_per_user) {
                egress_tunnel_refuse_fd(eg, s, p->fd, 429, "cap_user",
                                        "the user's sessions have too many open tunnels");
                return;
        }
        egress_tunnel_open(eg, s, p->fd, p->from_runner);
}

static void close_one(struct egress *eg, const char *user, const char *session)
{
        struct esess *s = sess_get(eg, user, session);

        if (!s)
                return;
        s->closed = true;
        while (s->tunnels) {
                struct tunnel *t = s->tunnels;
                if (t->finished) {
                        /* an error answer still being written: gone too */
                        egress_tunnel_free(t);
                        continue;
                }
                t->finished = true;
                egress_tunnel_record(t, t->state == T_RELAY, "ratchet");
                egress_tunnel_free(t);
        }
}

struct close_key {
        char user[65], session[65];
};

/* Take the waiting close requests (copies: the requests live on their
 * waiters' stacks) and run them; then wake the waiters. */
static void run_closes(struct egress *eg)
{
        struct close_key *keys = NULL;
        size_t n = 0, cap = 0;
        uint64_t upto = 0;

        pthread_mutex_lock(&eg->lock);
        for (struct close_req *c = eg->closes; c; c = c->next) {
                if (c->taken)
                        continue;
                if (n == cap) {
                        struct close_key *grown = realloc(keys, (cap ? cap * 2 : 8) * sizeof(*keys));
                        if (!grown) {
                                upto = 0; /* out of memory: the waiters time out and say so */
                                break;
                        }
                        keys = grown;
                        cap = cap ? cap * 2 : 8;
                }
                c->taken = true;
                sbx_strlcpy(keys[n].user, c->user, sizeof(keys[n].user));
                sbx_strlcpy(keys[n].session, c->session, sizeof(keys[n].session));
                n++;
                if (c->gen > upto)
                        upto = c->gen;
        }
        pthread_mutex_unlock(&eg->lock);
        for (size_t i = 0; i < n; i++)
                close_one(eg, keys[i].user, keys[i].session);
        free(keys);
        if (!n)
                return;
        pthread_mutex_lock(&eg->lock);
        /* every request up to `upto` was taken: generations grow, and the list is
         * walked whole each time */
        if (upto > eg->close_done)
                eg->close_done = upto;
        pthread_cond_broadcast(&eg->done_cond);
        pthread_mutex_unlock(&eg->lock);
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
        struct egress *eg = arg;
        struct pending *list;
        bool stopping;

        /* closes first: a connection queued before the ratchet is then refused too */
        run_closes(eg);
        pthread_mutex_lock(&eg->lock);
        list = eg->pending;
        eg->pending = NULL;
        eg->pending_tail = &eg->pending;
        eg->n_pending = 0;
        stopping = eg->stopping;
        pthread_mutex_unlock(&eg->lock);
        while (list) {
                struct pending *p = list;
                list = p->next;
                if (stopping)
                        close(p->fd);
                else
                        start_one(eg, p);
                free(p);
        }
        if (stopping) {
                for (struct esess *s = eg->sessions; s; s = s->next)
                        while (s->tunnels) {
                                struct tunnel *t = s->tunnels;
                                if (!t->finished) {
                                        t->finished = true;
                                        egress_tunnel_record(t, t->state == T_RELAY, "shutdown");
                                }
                                egress_tunnel_free(t);
                        }
                event_base_loopbreak(eg->base);
        }
}

static void *loop_main(void *arg)
{
        struct egress *eg = arg;

        (void)pthread_setname_np(pthread_self(), "sbx-egress");
        event_base_dispatch(eg->base);
        return NULL;
}

/* ---- public ---- */

static void egress_free_config(struct egress *eg)
{
        egress_pkg_free(eg->pkg);
        egress_strv_free(eg->allow, eg->n_allow);
        free(eg->priv);
        free(eg->ovr);
}

int egress_new(const struct sbx_config *cfg, struct store *store, struct egress **ret, struct sbx_error *err)
{
        struct egress *eg;
        struct timeval sweep = {60, 0};
        int r;

        pthread_once(&evthread_once, evthread_init);
        if (evthread_rc < 0)
                return sbx_error_set(err, -ENOSYS, 0, "egress: libevent has no pthreads support");
        eg = calloc(1, sizeof(*eg));
        if (!eg)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        eg->cfg = *cfg;
        eg->store = store;
        eg->pending_tail = &eg->pending;
        pthread_mutex_init(&eg->lock, NULL);
        pthread_cond_init(&eg->done_cond, NULL);
        r = egress_allow_parse(cfg->egress_allow, true, &eg->allow, &eg->n_allow, err);
        if (r == 0)
                r = egress_cidrs_parse(cfg->egress_allow_private, &eg->priv, &eg->n_priv, err);
        if (r == 0)
                r = egress_overrides_parse(cfg->egress_resolve, &eg->ovr, &eg->n_ovr, err);
        if (r == 0 && cfg->egress_upstream_proxy[0])
                r = egress_upstream_parse(cfg->egress_upstream_proxy, eg->up_host, &eg->up_port, err);
        if (r == 0 && cfg->egress_packages_file[0])
                r = egress_pkg_load(cfg->egress_packages_file, &eg->pkg, err);
        if (r < 0)
                goto fail;
        eg->base = event_base_new();
        if (!eg->base) {
                r = sbx_error_set(err, -ENOMEM, 0, "egress: cannot create the event loop");
                goto fail;
        }
        /* A resolver from /etc/resolv.conf; without one, only literals and egress_resolve work. */
        eg->dns = evdns_base_new(eg->base, EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_DISABLE_WHEN_INACTIVE |
                                                   EVDNS_BASE_NAMESERVERS_NO_DEFAULT);
        if (!eg->dns)
                eg->dns = evdns_base_new(eg->base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
        eg->wake = event_new(eg->base, -1, EV_PERSIST, wake_cb, eg);
        eg->sweep = event_new(eg->base, -1, EV_PERSIST, sess_sweep, eg);
        if (!eg->wake || !eg->sweep || event_add(eg->wake, NULL) < 0 || event_add(eg->sweep, &sweep) < 0) {
                r = sbx_error_set(err, -ENOMEM, 0, "egress: cannot create the loop's events");
                goto fail;
        }
        r = -pthread_create(&eg->thread, NULL, loop_main, eg);
        if (r < 0) {
                sbx_error_set(err, r, 0, "egress: cannot start its thread");
                goto fail;
        }
        eg->started = true;
        *ret = eg;
        return 0;
fail:
        egress_free(eg);
        return r;
}

void egress_free(struct egress *eg)
{
        if (!eg)
                return;
        if (eg->started) {
                pthread_mutex_lock(&eg->lock);
                eg->stopping = true;
                pthread_mutex_unlock(&eg->lock);
                event_active(eg->wake, EV_READ, 0);
                pthread_join(eg->thread, NULL);
        }
        for (struct pending *p = eg->pending, *next; p; p = next) {
                next = p->next;
                close(p->fd);
                free(p);
        }
        for (struct esess *s = eg->sessions, *next; s; s = next) {
                next = s->next;
                free(s);
        }
        egress_filter_free(eg); /* its workers' event is on the base */
        if (eg->wake)
                event_free(eg->wake);
        if (eg->sweep)
                event_free(eg->sweep);
        if (eg->dns)
                evdns_base_free(eg->dns, 0);
        if (eg->base)
                event_base_free(eg->base);
        egress_tls_free(eg->tls);
        egress_free_config(eg);
        pthread_cond_destroy(&eg->done_cond);
        pthread_mutex_destroy(&eg->lock);
        free(eg);
}

void egress_accept(struct egress *eg, const char *user, const char *session, int fd)
{
        egress_accept_from(eg, user, session, fd, false);
}

void egress_accept_from(struct egress *eg, const char *user, const char *session, int fd, bool from_runner)
{
        struct pending *p;

        if (fd < 0)
                return;
        if (!eg || !session_id_valid(user) || !session_id_valid(session) || evutil_make_socket_nonblocking(fd) < 0) {
                close(fd);
                return;
        }
        p = calloc(1, sizeof(*p));
        if (!p) {
                close(fd);
                return;
        }
        sbx_strlcpy(p->user, user, sizeof(p->user));
        sbx_strlcpy(p->session, session, sizeof(p->session));
        p->fd = fd;
        p->from_runner = from_runner;
        pthread_mutex_lock(&eg->lock);
        if (eg->stopping || eg->n_pending >= MAX_PENDING) {
                pthread_mutex_unlock(&eg->lock);
                close(fd);
                free(p);
                return;
        }
        *eg->pending_tail = p;
        eg->pending_tail = &p->next;
        eg->n_pending++;
        pthread_mutex_unlock(&eg->lock);
        event_active(eg->wake, EV_READ, 0);
}

void egress_close_session(struct egress *eg, const char *user, const char *session)
{
        struct close_req req = {0};
        struct timespec deadline;
        bool done;

        if (!eg || !user || !session)
                return;
        sbx_strlcpy(req.user, user, sizeof(req.user));
        sbx_strlcpy(req.session, session, sizeof(req.session));
        deadline = sbx_deadline_after(CLOCK_REALTIME, CLOSE_WAIT_MS);
        pthread_mutex_lock(&eg->lock);
        if (eg->stopping) {
                pthread_mutex_unlock(&eg->lock);
                return;
        }
        req.gen = ++eg->close_gen;
        req.next = eg->closes;
        eg->closes = &req;
        pthread_mutex_unlock(&eg->lock);
        event_active(eg->wake, EV_READ, 0);
        pthread_mutex_lock(&eg->lock);
        while (eg->close_done < req.gen)
                if (pthread_cond_timedwait(&eg->done_cond, &eg->lock, &deadline) == ETIMEDOUT)
                        break;
        done = eg->close_done >= req.gen;
        for (struct close_req **pp = &eg->closes; *pp; pp = &(*pp)->next)
                if (*pp == &req) {
                        *pp = req.next;
                        break;
                }
        pthread_mutex_unlock(&eg->lock);
        if (!done)
                log_ctx(LOG_LEVEL_WARN, user, session, NULL, "egress: tunnels not confirmed closed in time");
}

void egress_stats(struct egress *eg, struct egress_stats *ret)
{
        *ret = (struct egress_stats){0};
        if (!eg)
                return;
        ret->allowed = atomic_load(&eg->allowed);
        ret->blocked = atomic_load(&eg->blocked);
        ret->open = atomic_load(&eg->n_open);
}

int egress_session_stats(struct egress *eg, const char *user, const char *session, struct egress_stats *ret)
{
        struct esess *s;
        int r = -ENOENT;

        *ret = (struct egress_stats){0};
        if (!eg || !user || !session)
                return -ENOENT;
        pthread_mutex_lock(&eg->lock);
        s = sess_find(eg, user, session);
        if (s) {
                ret->allowed = atomic_load(&s->allowed);
                ret->blocked = atomic_load(&s->blocked);
                ret->open = atomic_load(&s->n_open);
                ret->bytes = atomic_load(&s->bytes);
                r = 0;
        }
        pthread_mutex_unlock(&eg->lock);
        return r;
}

void egress_set_connect_hook(struct egress *eg, egress_connect_fn fn, void *userdata)
{
        if (!eg)
                return;
        eg->connect_fn = fn;
        eg->connect_ud = userdata;
}

void egress_set_narrow_hook(struct egress *eg, egress_narrow_fn fn, void *userdata)
{
        if (!eg)
                return;
        eg->narrow_fn = fn;
        eg->narrow_ud = userdata;
}

void egress_set_blocked_hook(struct egress *eg, egress_blocked_fn fn, void *userdata)
{
        if (!eg)
                return;
        eg->on_blocked = fn;
        eg->on_blocked_ud = userdata;
}
