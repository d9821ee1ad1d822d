/* portpool.c — the process-wide host port pool.
 *
 * [lo, hi] is cut into blocks of per_session consecutive ports; a trailing
 * remainder shorter than a block is never used. The in-memory array `blocks`
 * mirrors port_allocations: a block is busy when any of its ports is stored,
 * and it is "whole" when all of its ports belong to one session (the normal
 * case; anything else comes from a database written with another range or
 * block size, and such blocks are kept busy until their owner releases).
 * The store stays the final word: port_allocations.port is a primary key, so
 * a block the memory thinks free but the store holds fails to reserve and is
 * skipped.
 *
 * Whether something outside sandboxd holds a port is asked afresh at every
 * reservation (bind(2) without SO_REUSEADDR), never cached.
 *
 * Locking: p->lock guards blocks, cursor and used_blocks, and is held across
 * the bind probes and the store writes (a local sqlite call), never across a
 * Docker call or the keep() callback of portpool_release_unheld. */
#include "sandboxd/portpool.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandboxd/log.h"
#include "sandboxd/store.h"

#define PORTPOOL_KEY_MAX 64

struct owner {
        char user[PORTPOOL_KEY_MAX + 1];
        char session[PORTPOOL_KEY_MAX + 1];
};

struct block {
        struct owner *owner; /* NULL: free */
        bool whole;          /* every port of the block is stored for owner */
};

struct portpool {
        pthread_mutex_t lock;
        struct store *st;
        int lo, hi, per;
        size_t n_blocks;
        struct block *blocks;
        size_t used_blocks;
        size_t cursor; /* next block to try: recently freed ports are reused last */
};

static bool key_ok(const char *v)
{
        return v && *v && strlen(v) <= PORTPOOL_KEY_MAX;
}

static bool owner_is(const struct owner *o, const char *user, const char *session)
{
        return o && strcmp(o->user, user) == 0 && strcmp(o->session, session) == 0;
}

static int block_first_port(const struct portpool *p, size_t k)
{
        return p->lo + (int)k * p->per;
}

static void block_fill_ports(const struct portpool *p, size_t k, int *ret_ports)
{
        for (int i = 0; i < p->per; i++)
                ret_ports[i] = block_first_port(p, k) + i;
}

static int block_take(struct portpool *p, size_t k, const char *user, const char *session, bool whole)
{
        struct owner *o = calloc(1, sizeof(*o));

        if (!o)
                return -ENOMEM;
        sbx_strlcpy(o->user, user, sizeof(o->user));
        sbx_strlcpy(o->session, session, sizeof(o->session));
        p->blocks[k] = (struct block){.owner = o, .whole = whole};
        p->used_blocks++;
        return 0;
}

static void block_free(struct portpool *p, size_t k)
{
        if (!p->blocks[k].owner)
                return;
        free(p->blocks[k].owner);
        p->blocks[k] = (struct block){};
        p->used_blocks--;
}

/* Index of the session's whole block, or -1. */
static ssize_t find_block(const struct portpool *p, const char *user, const char *session)
{
        for (size_t k = 0; k < p->n_blocks; k++)
                if (p->blocks[k].whole && owner_is(p->blocks[k].owner, user, session))
                        return (ssize_t)k;
        return -1;
}

/* Rebuild the array from port_allocations. */
static int load_from_store(struct portpool *p, struct sbx_error *err)
{
        _cleanup_free_ struct store_port *rows = NULL;
        _cleanup_free_ int *counts = NULL;
        size_t n = 0;
        int r;

        r = store_ports_list(p->st, &rows, &n);
        if (r < 0)
                return sbx_error_set(err, r, 0, "loading port allocations: %s", strerror(-r));
        counts = calloc(p->n_blocks ? p->n_blocks : 1, sizeof(*counts));
        if (!counts)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");

        for (size_t i = 0; i < n; i++) {
                size_t k;

                if (rows[i].port < p->lo || rows[i].port >= block_first_port(p, p->n_blocks))
                        continue; /* outside the configured pool: the store keeps it until released */
                k = (size_t)(rows[i].port - p->lo) / (size_t)p->per;
                if (!p->blocks[k].owner) {
                        r = block_take(p, k, rows[i].user_id, rows[i].session_id, false);
                        if (r < 0)
                                return sbx_error_set(err, r, 0, "out of memory");
                        counts[k] = 1;
                } else if (counts[k] >= 0 && owner_is(p->blocks[k].owner, rows[i].user_id, rows[i].session_id)) {
                        counts[k]++;
                } else {
                        counts[k] = -1; /* shared by two sessions: busy, never whole */
                }
        }
        for (size_t k = 0; k < p->n_blocks; k++)
                p->blocks[k].whole = p->blocks[k].owner && counts[k] == p->per;
        return 0;
}

int portpool_new(struct store *st, int lo, int hi, int per_session, struct portpool **ret, struct sbx_error *err)
{
        struct portpool *p;
        int r;

        if (!st || !ret)
                return sbx_error_set(err, -EINVAL, 0, "portpool_new: bad arguments");
        if (lo < 1 || hi > 65535 || lo > hi)
                return sbx_error_set(err, -EINVAL, 0, "bad port range %d-%d (want 1 <= lo <= hi <= 65535)", lo, hi);
        if (per_session < 0 || per_session > hi - lo + 1)
                return sbx_error_set(err, -EINVAL, 0, "bad ports per session %d for range %d-%d (%d ports)",
                                     per_session, lo, hi, hi - lo + 1);

        p = calloc(1, sizeof(*p));
        if (!p)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        pthread_mutex_init(&p->lock, NULL);
        p->st = st;
        p->lo = lo;
        p->hi = hi;
        p->per = per_session;
        p->n_blocks = per_session > 0 ? (size_t)(hi - lo + 1) / (size_t)per_session : 0;
        if (p->n_blocks > 0) {
                p->blocks = calloc(p->n_blocks, sizeof(*p->blocks));
                if (!p->blocks) {
                        portpool_free(p);
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                }
                r = load_from_store(p, err);
                if (r < 0) {
                        portpool_free(p);
                        return r;
                }
        }
        *ret = p;
        return 0;
}

void portpool_free(struct portpool *p)
{
        if (!p)
                return;
        for (size_t k = 0; k < p->n_blocks && p->blocks; k++)
                free(p->blocks[k].owner);
        free(p->blocks);
        pthread_mutex_destroy(&p->lock);
        free(p);
}

int portpool_per_session(const struct portpool *p)
{
        return p->per; /* immutable after portpool_new */
}

/* Can we bind the port ourselves? Without SO_REUSEADDR, bind(2) fails with
 * EADDRINUSE for any socket on the port: a listener, a docker-proxy, an
 * outgoing connection using it as local port, even TIME_WAIT. Returns 1 if
 * held, 0 if free, -errno if the probe itself failed. */
static int probe_one(int family, const void *addr, socklen_t len)
{
        _cleanup_close_ int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0)
                return errno == EAFNOSUPPORT ? 0 : -errno; /* no IPv6 on this host: nothing can hold it */
        if (family == AF_INET6) {
                int one = 1;
                (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        }
        if (bind(fd, addr, len) == 0)
                return 0;
        return errno == EADDRINUSE ? 1 : 0;
}

static int port_held_outside(int port)
{
        struct sockaddr_in any = {.sin_family = AF_INET,
                                  .sin_port = htons((uint16_t)port),
                                  .sin_addr.s_addr = htonl(INADDR_ANY)};
        struct sockaddr_in loop = {.sin_family = AF_INET,
                                   .sin_port = htons((uint16_t)port),
                                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        struct sockaddr_in6 any6 = {.sin6_family = AF_INET6,
                                    .sin6_port = htons((uint16_t)port),
                                    .sin6_addr = IN6ADDR_ANY_INIT};
        int r;

        r = probe_one(AF_INET, &any, sizeof(any));
        if (r == 0)
                r = probe_one(AF_INET, &loop, sizeof(loop));
        if (r == 0)
                r = probe_one(AF_INET6, &any6, sizeof(any6)); /* docker-proxy also listens on [::] */
        return r;
}

/* 1 if any port of block k is held outside sandboxd, 0 if none, -errno. */
static int block_held_outside(const struct portpool *p, size_t k)
{
        for (int i = 0; i < p->per; i++) {
                int r = port_held_outside(block_first_port(p, k) + i);
                if (r != 0)
                        return r;
        }
        return 0;
}

int portpool_reserve_block(struct portpool *p, const char *user, const char *session, int *ret_ports,
                           struct sbx_error *err)
{
        _cleanup_free_ int *ports = NULL;
        size_t held = 0, taken_in_store = 0;
        ssize_t mine;
        int r;

        if (!key_ok(user) || !key_ok(session) || (p->per > 0 && !ret_ports))
                return sbx_error_set(err, -EINVAL, 0, "portpool_reserve_block: bad arguments");
        if (p->per == 0)
                return 0;

        ports = calloc((size_t)p->per, sizeof(*ports));
        if (!ports)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");

        pthread_mutex_lock(&p->lock);
        mine = find_block(p, user, session);
        if (mine >= 0) {
                /* The store rows may have been released by another process (--gc):
                 * record them again, or, if something else holds one now, give the
                 * block up and take a new one. */
                block_fill_ports(p, (size_t)mine, ret_ports);
                r = store_ports_ensure(p->st, ret_ports, (size_t)p->per, user, session, sbx_wall_ms());
                if (r != -EADDRINUSE) {
                        if (r < 0)
                                sbx_error_set(err, r, 0, "re-recording ports: %s", strerror(-r));
                        goto out;
                }
                block_free(p, (size_t)mine);
        }

        for (size_t i = 0; i < p->n_blocks; i++) {
                size_t k = (p->cursor + i) % p->n_blocks;

                if (p->blocks[k].owner)
                        continue;
                r = block_held_outside(p, k);
                if (r < 0) {
                        sbx_error_set(err, r, 0, "probing ports %d-%d: %s", block_first_port(p, k),
                                      block_first_port(p, k) + p->per - 1, strerror(-r));
                        goto out;
                }
                if (r > 0) {
                        held++;
                        continue;
                }
                block_fill_ports(p, k, ports);
                r = store_ports_reserve(p->st, ports, (size_t)p->per, user, session, sbx_wall_ms());
                if (r == -EADDRINUSE) {
                        taken_in_store++; /* written by another process or an older layout */
                        continue;
                }
                if (r < 0) {
                        sbx_error_set(err, r, 0, "reserving ports %d-%d: %s", ports[0], ports[p->per - 1],
                                      strerror(-r));
                        goto out;
                }
                r = block_take(p, k, user, session, true);
                if (r < 0) {
                        /* Undo just these ports: the session may hold others from an older layout. */
                        for (int j = 0; j < p->per; j++)
                                (void)store_ports_release_port(p->st, ports[j]);
                        sbx_error_set(err, r, 0, "out of memory");
                        goto out;
                }
                p->cursor = (k + 1) % p->n_blocks;
                memcpy(ret_ports, ports, (size_t)p->per * sizeof(*ports));
                goto out;
        }

        log_debug("portpool: exhausted (%zu blocks busy, %zu held outside, %zu taken in store)", p->used_blocks, held,
                  taken_in_store);
        r = sbx_error_set(err, -ENOSPC, 0,
                          "port pool exhausted: all %zu blocks of %d ports in %d-%d are in use or held by other "
                          "processes",
                          p->n_blocks, p->per, p->lo, p->hi);
out:
        pthread_mutex_unlock(&p->lock);
        return r;
}

int portpool_set_container(struct portpool *p, const char *user, const char *session, const char *container_id)
{
        int r;

        if (!key_ok(user) || !key_ok(session))
                return -EINVAL;
        pthread_mutex_lock(&p->lock);
        r = store_ports_set_container(p->st, user, session, container_id);
        pthread_mutex_unlock(&p->lock);
        return r;
}

int portpool_lookup(struct portpool *p, const char *user, const char *session, int *ret_ports)
{
        ssize_t k;

        if (!key_ok(user) || !key_ok(session))
                return -EINVAL;
        pthread_mutex_lock(&p->lock);
        k = find_block(p, user, session);
        if (k >= 0)
                block_fill_ports(p, (size_t)k, ret_ports);
        pthread_mutex_unlock(&p->lock);
        return k >= 0 ? 0 : -ENOENT;
}

/* With p->lock held. Returns the number of ports deleted from the store. */
static int release_locked(struct portpool *p, const char *user, const char *session)
{
        int r = store_ports_release(p->st, user, session);

        if (r < 0)
                return r; /* memory unchanged: the ports stay reserved, which is the safe side */
        for (size_t k = 0; k < p->n_blocks; k++)
                if (owner_is(p->blocks[k].owner, user, session))
                        block_free(p, k);
        return r;
}

int portpool_release(struct portpool *p, const char *user, const char *session)
{
        int r;

        if (!key_ok(user) || !key_ok(session))
                return -EINVAL;
        pthread_mutex_lock(&p->lock);
        r = release_locked(p, user, session);
        pthread_mutex_unlock(&p->lock);
        return r < 0 ? r : 0;
}

static int cmp_port_owner(const void *a, const void *b)
{
        const struct store_port *x = a, *y = b;
        int c = strcmp(x->user_id, y->user_id);

        return c != 0 ? c : strcmp(x->session_id, y->session_id);
}

int portpool_release_unheld(struct portpool *p, bool (*keep)(const char *user, const char *session, void *ud), void *ud)
{
        _cleanup_free_ struct store_port *rows = NULL;
        size_t n = 0;
        int r, released = 0;

        if (!keep)
                return -EINVAL;
        /* The store, not the array, lists the owners: it also knows ports
         * outside the current range. keep() runs unlocked (it may ask Docker). */
        pthread_mutex_lock(&p->lock);
        r = store_ports_list(p->st, &rows, &n);
        pthread_mutex_unlock(&p->lock);
        if (r < 0)
                return r;

        if (n > 0)
                qsort(rows, n, sizeof(*rows), cmp_port_owner);
        for (size_t i = 0; i < n; i++) {
                if (i > 0 && cmp_port_owner(&rows[i - 1], &rows[i]) == 0)
                        continue; /* one call per session, not per port */
                if (keep(rows[i].user_id, rows[i].session_id, ud))
                        continue;
                pthread_mutex_lock(&p->lock);
                r = release_locked(p, rows[i].user_id, rows[i].session_id);
                pthread_mutex_unlock(&p->lock);
                if (r < 0)
                        return r;
                released += r;
        }
        return released;
}

void portpool_usage(struct portpool *p, size_t *ret_used, size_t *ret_total)
{
        pthread_mutex_lock(&p->lock);
        if (ret_used)
                *ret_used = p->used_blocks * (size_t)p->per;
        if (ret_total)
                *ret_total = p->n_blocks * (size_t)p->per;
        pthread_mutex_unlock(&p->lock);
}
