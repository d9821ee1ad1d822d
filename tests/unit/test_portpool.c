/* test_portpool.c — the port pool over a real store: blocks, exhaustion,
 * release, idempotence, persistence, outside holders, reconciliation.
 * Uses ports 24000-24199: below the kernel's ephemeral range (32768-60999),
 * so no outgoing connection of another test holds one in TIME-WAIT. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandboxd/portpool.h"
#include "sandboxd/store.h"

static char tmpdir[PATH_MAX];
static char dbpath[PATH_MAX];
static struct store *st;

static void setup(void)
{
        const char *base = getenv("TMPDIR");
        struct sbx_error err = {};

        snprintf(tmpdir, sizeof(tmpdir), "%s/sbx-portpool-XXXXXX", base && *base ? base : "/tmp");
        cr_assert_not_null(mkdtemp(tmpdir));
        snprintf(dbpath, sizeof(dbpath), "%s/test.db", tmpdir);
        cr_assert_eq(store_open(dbpath, &st, &err), 0, "%s", err.msg);
}

/* Remove the private temp dir and whatever sqlite left in it. */
static void rm_tmpdir(void)
{
        DIR *d = opendir(tmpdir);
        struct dirent *de;

        if (d) {
                while ((de = readdir(d)))
                        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                                unlinkat(dirfd(d), de->d_name, 0);
                closedir(d);
        }
        rmdir(tmpdir);
}

static void teardown(void)
{
        store_close(st);
        st = NULL;
        rm_tmpdir();
}

TestSuite(portpool, .init = setup, .fini = teardown);

static struct portpool *pool_new(int lo, int hi, int per)
{
        struct portpool *p = NULL;
        struct sbx_error err = {};

        cr_assert_eq(portpool_new(st, lo, hi, per, &p, &err), 0, "%s", err.msg);
        return p;
}

static size_t stored_ports(void)
{
        struct store_port *rows = NULL;
        size_t n = 0;

        cr_assert_eq(store_ports_list(st, &rows, &n), 0);
        free(rows);
        return n;
}

static void assert_block(const int *ports, int per, int lo)
{
        cr_assert_eq((ports[0] - lo) % per, 0, "block must start on a block boundary, got %d", ports[0]);
        for (int i = 1; i < per; i++)
                cr_assert_eq(ports[i], ports[0] + i);
}

Test(portpool, bad_ranges_refused)
{
        struct portpool *p = NULL;
        struct sbx_error err = {};

        cr_assert_eq(portpool_new(st, 24010, 24000, 5, &p, &err), -EINVAL);
        cr_assert_eq(portpool_new(st, 0, 24000, 5, &p, &err), -EINVAL);
        cr_assert_eq(portpool_new(st, 65530, 65536, 1, &p, &err), -EINVAL);
        cr_assert_eq(portpool_new(st, 24000, 24009, -1, &p, &err), -EINVAL);
        cr_assert_eq(portpool_new(st, 24000, 24003, 5, &p, &err), -EINVAL, "range smaller than one block");
        cr_assert_eq(portpool_new(NULL, 24000, 24009, 5, &p, &err), -EINVAL);
        cr_assert_null(p);

        /* The edges are fine. */
        cr_assert_eq(portpool_new(st, 24000, 24004, 5, &p, &err), 0, "%s", err.msg);
        portpool_free(p);
        cr_assert_eq(portpool_new(st, 65535, 65535, 1, &p, &err), 0, "%s", err.msg);
        portpool_free(p);
}

Test(portpool, zero_per_session_reserves_nothing)
{
        struct portpool *p = pool_new(24000, 24009, 0);
        size_t used = 9, total = 9;

        cr_assert_eq(portpool_per_session(p), 0);
        cr_assert_eq(portpool_reserve_block(p, "alice", "s1", NULL, NULL), 0);
        cr_assert_eq(stored_ports(), 0);
        portpool_usage(p, &used, &total);
        cr_assert_eq(used, 0);
        cr_assert_eq(total, 0);
        portpool_free(p);
}

Test(portpool, reserve_until_exhausted)
{
        /* 53 ports, 5 per block: 10 blocks, 3 trailing ports never used. */
        struct portpool *p = pool_new(24000, 24052, 5);
        struct sbx_error err = {};
        bool taken[10] = {};
        int ports[5];
        size_t used, total;

        portpool_usage(p, &used, &total);
        cr_assert_eq(used, 0);
        cr_assert_eq(total, 50);

        for (int i = 0; i < 10; i++) {
                char session[16];
                snprintf(session, sizeof(session), "s%d", i);
                cr_assert_eq(portpool_reserve_block(p, "alice", session, ports, &err), 0, "%s", err.msg);
                assert_block(ports, 5, 24000);
                cr_assert_leq(ports[4], 24049);
                cr_assert_not(taken[(ports[0] - 24000) / 5], "block handed out twice");
                taken[(ports[0] - 24000) / 5] = true;
        }

        memset(ports, 0x7f, sizeof(ports));
        cr_assert_eq(portpool_reserve_block(p, "alice", "one-too-many", ports, &err), -ENOSPC);
        cr_assert_not_null(strstr(err.msg,
                                  "port pool exhausted: all 10 blocks of 5 ports in 24000-24052 are in use "
                                  "or held by other processes"),
                           "%s", err.msg);
        cr_assert_eq(ports[0], 0x7f7f7f7f, "ret_ports untouched on failure");
        cr_assert_eq(stored_ports(), 50, "nothing reserved for the failed session");
        cr_assert_eq(portpool_lookup(p, "alice", "one-too-many", ports), -ENOENT);
        portpool_usage(p, &used, &total);
        cr_assert_eq(used, 50);
        portpool_free(p);
}

Test(portpool, release_frees_block)
{
        struct portpool *p = pool_new(24000, 24009, 5);
        int a[5], b[5], c[5];

        cr_assert_eq(portpool_reserve_block(p, "alice", "s1", a, NULL), 0);
        cr_assert_eq(portpool_reserve_block(p, "alice", "s2", b, NULL), 0);
        cr_assert_eq(portpool_reserve_block(p, "alice", "s3", c, NULL), -ENOSPC);

        cr_assert_eq(portpool_release(p, "alice", "s1"), 0);
        cr_assert_eq(portpool_lookup(p, "alice", "s1", c), -ENOENT);
        cr_assert_eq(stored_ports(), 5);
        cr_assert_eq(portpool_release(p, "alice", "s1"), 0, "releasing twice is a no-op");

        cr_assert_eq(portpool_reserve_block(p, "alice", "s3", c, NULL), 0);
        cr_assert_eq(memcmp(a, c, sizeof(a)), 0, "the freed block is the only free one");
        cr_assert_eq(stored_ports(), 10);
        portpool_free(p);
}

Test(portpool, reserve_is_idempotent)
{
        struct portpool *p = pool_new(24000, 24019, 5);
        int a[5], again[5], look[5];
        size_t used;

        cr_assert_eq(portpool_reserve_block(p, "alice", "s1", a, NULL), 0);
        cr_assert_eq(portpool_reserve_block(p, "alice", "s1", again, NULL), 0);
        cr_assert_eq(memcmp(a, again, sizeof(a)), 0);
        cr_assert_eq(portpool_lookup(p, "alice", "s1", look), 0);
        cr_assert_eq(memcmp(a, look, sizeof(a)), 0);
        portpool_usage(p, &used, NULL);
        cr_assert_eq(used, 5);
        cr_assert_eq(stored_ports(), 5);

        /* Same session id under another user is another session. */
        cr_assert_eq(portpool_reserve_block(p, "bob", "s1", again, NULL), 0);
        cr_assert_neq(a[0], again[0]);
        portpool_free(p);
}

Test(portpool, persisted_across_restart)
{
        struct portpool *p = pool_new(24000, 24019, 5);
        struct sbx_error err = {};
        int a[5], b[5], look[5], fresh[5], last[5];

        cr_assert_eq(portpool_reserve_block(p, "alice", "s1", a, NULL), 0);
        cr_assert_eq(portpool_reserve_block(p, "bob", "s1", b, NULL), 0);
        cr_assert_eq(portpool_set_container(p, "alice", "s1", "cid-a"), 0);
        portpool_free(p);

        /* A new pool, and even a new connection, sees the same blocks. */
        store_close(st);
        cr_assert_eq(store_open(dbpath, &st, &err), 0, "%s", err.msg);
        p = pool_new(24000, 24019, 5);
        cr_assert_eq(portpool_lookup(p, "alice", "s1", look), 0);
        cr_assert_eq(memcmp(a, look, sizeof(a)), 0);
        cr_assert_eq(portpool_lookup(p, "bob", "s1", look), 0);
        cr_assert_eq(memcmp(b, look, sizeof(b)), 0);

        cr_assert_eq(portpool_reserve_block(p, "carol", "s1", fresh, NULL), 0);
        cr_assert_neq(fresh[0], a[0]);
        cr_assert_neq(fresh[0], b[0]);
        cr_assert_eq(portpool_reserve_block(p, "dave", "s1", last, NULL), 0);
        cr_assert_eq(portpool_reserve_block(p, "erin", "s1", look, NULL), -ENOSPC, "no double allocation");
        cr_assert_eq(stored_ports(), 20);
        portpool_free(p);
}

Test(portpool, set_container_recorded)
{
        struct portpool *p = pool_new(24000, 24009, 5);
        struct store_port *rows = NULL;
        size_t n = 0;
        int a[5];

        cr_assert_eq(portpool_set_container(p, "alice", "s1", "cid"), -ENOENT);
        cr_assert_eq(portpool_reserve_block(p, "alice", "s1", a, NULL), 0);
        cr_assert_eq(portpool_set_container(p, "alice", "s1", "cid"), 0);
        cr_assert_eq(store_ports_list(st, &rows, &n), 0);
        cr_assert_eq(n, 5);
        for (size_t i = 0; i < n; i++)
                cr_assert_str_eq(rows[i].container_id, "cid");
        free(rows);
        portpool_free(p);
}

static int listen_on(uint32_t addr, int port)
{
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(addr)};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        cr_assert_geq(fd, 0);
        cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "port %d: %s", port, strerror(errno));
        cr_assert_eq(listen(fd, 1), 0);
        return fd;
}

Test(portpool, block_held_outside_is_skipped_and_rechecked)
{
        struct portpool *p = pool_new(24100, 24109, 5); /* blocks 24100.. and 24105.. */
        struct sbx_error err = {};
        int fd, a[5], b[5];

        fd = listen_on(INADDR_LOOPBACK, 24102);
        cr_assert_eq(portpool_reserve_block(p, "alice", "s1", a, &err), 0, "%s", err.msg);
        cr_assert_eq(a[0], 24105, "the block with the held port is skipped");
        cr_assert_eq(portpool_reserve_block(p, "alice", "s2", b, &err), -ENOSPC);
        cr_assert_eq(stored_ports(), 5);

        close(fd); /* never accepted anything: no TIME_WAIT left behind */
        cr_assert_eq(portpool_reserve_block(p, "alice", "s2", b, &err), 0, "not cached: %s", err.msg);
        cr_assert_eq(b[0], 24100);
        portpool_free(p);
}

Test(portpool, wildcard_listener_is_seen_too)
{
        struct portpool *p = pool_new(24110, 24119, 5);
        int fd, a[5];

        fd = listen_on(INADDR_ANY, 24110);
        cr_assert_eq(portpool_reserve_block(p, "alice", "s1", a, NULL), 0);
        cr_assert_eq(a[0], 24115);
        close(fd);
        portpool_free(p);
}

struct keep_ctx {
        int calls;
};

static bool keep_odd(const char *user, const char *session, void *ud)
{
        struct keep_ctx *k = ud;

        k->calls++;
        return strcmp(session, "s1") == 0 || strcmp(session, "s3") == 0;
}

Test(portpool, release_unheld_releases_exactly_the_rest)
{
        struct portpool *p = pool_new(24000, 24049, 5);
        struct keep_ctx k = {};
        int ports[5];
        size_t used;

        for (int i = 1; i <= 4; i++) {
                char session[8];
                snprintf(session, sizeof(session), "s%d", i);
                cr_assert_eq(portpool_reserve_block(p, "alice", session, ports, NULL), 0);
        }
        cr_assert_eq(portpool_release_unheld(p, keep_odd, &k), 10);
        cr_assert_eq(k.calls, 4, "one keep() call per session");

        cr_assert_eq(portpool_lookup(p, "alice", "s1", ports), 0);
        cr_assert_eq(portpool_lookup(p, "alice", "s3", ports), 0);
        cr_assert_eq(portpool_lookup(p, "alice", "s2", ports), -ENOENT);
        cr_assert_eq(portpool_lookup(p, "alice", "s4", ports), -ENOENT);
        cr_assert_eq(stored_ports(), 10);
        portpool_usage(p, &used, NULL);
        cr_assert_eq(used, 10);

        k.calls = 0;
        cr_assert_eq(portpool_release_unheld(p, keep_odd, &k), 0);
        cr_assert_eq(k.calls, 2);
        portpool_free(p);
}

/* Allocations written under another layout (here: 2 ports of a 5-port block)
 * keep the block busy but are not a block the session can look up. */
Test(portpool, foreign_layout_block_stays_busy_until_released)
{
        const int old[] = {24001, 24002, 24500 /* outside the range now */};
        struct portpool *p;
        int ports[5];
        size_t used;

        cr_assert_eq(store_ports_reserve(st, old, 3, "old", "s1", 1), 0);
        p = pool_new(24000, 24009, 5);
        portpool_usage(p, &used, NULL);
        cr_assert_eq(used, 5);
        cr_assert_eq(portpool_lookup(p, "old", "s1", ports), -ENOENT);

        cr_assert_eq(portpool_reserve_block(p, "alice", "s1", ports, NULL), 0);
        cr_assert_eq(ports[0], 24005);
        cr_assert_eq(portpool_reserve_block(p, "alice", "s2", ports, NULL), -ENOSPC);

        cr_assert_eq(portpool_release(p, "old", "s1"), 0);
        cr_assert_eq(stored_ports(), 5, "the out-of-range port is released too");
        cr_assert_eq(portpool_reserve_block(p, "alice", "s2", ports, NULL), 0);
        cr_assert_eq(ports[0], 24000);
        portpool_free(p);
}

Test(portpool, bad_keys_refused)
{
        struct portpool *p = pool_new(24000, 24009, 5);
        char longid[70];
        int ports[5];

        memset(longid, 'x', 65);
        longid[65] = '\0';
        cr_assert_eq(portpool_reserve_block(p, "", "s1", ports, NULL), -EINVAL);
        cr_assert_eq(portpool_reserve_block(p, "alice", NULL, ports, NULL), -EINVAL);
        cr_assert_eq(portpool_reserve_block(p, longid, "s1", ports, NULL), -EINVAL);
        cr_assert_eq(stored_ports(), 0);
        portpool_free(p);
}

/* ---- threads ---- */

enum { THREADS = 8, PER_THREAD = 4 };

struct racer {
        struct portpool *p;
        int id;
        int first[PER_THREAD];
        int failures;
};

static void *racer_main(void *arg)
{
        struct racer *rc = arg;

        for (int i = 0; i < PER_THREAD; i++) {
                char session[16];
                int ports[3];

                snprintf(session, sizeof(session), "t%d-%d", rc->id, i);
                if (portpool_reserve_block(rc->p, "alice", session, ports, NULL) < 0)
                        rc->failures++;
                else
                        rc->first[i] = ports[0];
        }
        return NULL;
}

Test(portpool, concurrent_reservations_never_collide)
{
        struct portpool *p = pool_new(24000, 24000 + THREADS * PER_THREAD * 3 - 1, 3);
        pthread_t th[THREADS];
        struct racer rc[THREADS];
        bool seen[THREADS * PER_THREAD] = {};
        size_t used, total;

        for (int i = 0; i < THREADS; i++) {
                rc[i] = (struct racer){.p = p, .id = i};
                cr_assert_eq(pthread_create(&th[i], NULL, racer_main, &rc[i]), 0);
        }
        for (int i = 0; i < THREADS; i++)
                cr_assert_eq(pthread_join(th[i], NULL), 0);
        for (int i = 0; i < THREADS; i++) {
                cr_assert_eq(rc[i].failures, 0);
                for (int j = 0; j < PER_THREAD; j++) {
                        int k = (rc[i].first[j] - 24000) / 3;
                        cr_assert_not(seen[k], "block %d handed out twice", k);
                        seen[k] = true;
                }
        }
        portpool_usage(p, &used, &total);
        cr_assert_eq(used, total);
        cr_assert_eq(stored_ports(), total);
        portpool_free(p);
}
