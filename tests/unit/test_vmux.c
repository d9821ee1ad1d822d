/* Unit tests of runner/vmux.c, a microVM's net streams over one port, with a socketpair as the
 * port: bytes both ways with half closes, a stalled stream beside a live one, and a guest
 * that sends what it must not (the host resyncs and drops its streams). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandboxd/common.h"
#include "vmux.h"

#define DEADLINE_MS 20000

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int host_fd[16];
static uint16_t host_kind[16];
static int n_host;

static void opened(void *ud, uint16_t kind, int fd)
{
        (void)ud;
        pthread_mutex_lock(&mu);
        if (n_host < 16) {
                host_kind[n_host] = kind;
                host_fd[n_host++] = fd;
        } else {
                close(fd);
        }
        pthread_mutex_unlock(&mu);
}

/* The host end of the i-th stream the guest opened (blocking). */
static int host_stream(int i)
{
        int64_t until = sbx_now_ms() + DEADLINE_MS;

        for (;;) {
                pthread_mutex_lock(&mu);
                int fd = n_host > i ? host_fd[i] : -1;
                pthread_mutex_unlock(&mu);
                if (fd >= 0) {
                        fcntl(fd, F_SETFL, 0);
                        return fd;
                }
                cr_assert_lt(sbx_now_ms(), until, "the host never saw stream %d", i);
                poll(NULL, 0, 5);
        }
}

static struct vmux *host, *guest;

static void pair_up(void)
{
        int ch[2];

        n_host = 0;
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, ch), 0);
        host = vmux_start(ch[0], true, opened, NULL, NULL);
        guest = vmux_start(ch[1], false, NULL, NULL, NULL);
        cr_assert(host && guest);
}

/* A guest stream once the two are in sync (blocking). */
static int guest_stream(uint16_t kind)
{
        int64_t until = sbx_now_ms() + DEADLINE_MS;
        int fd;

        while ((fd = vmux_open(guest, kind)) < 0) {
                cr_assert_lt(sbx_now_ms(), until, "never in sync");
                poll(NULL, 0, 5);
        }
        fcntl(fd, F_SETFL, 0);
        return fd;
}

static void pair_down(void)
{
        vmux_stop(guest);
        vmux_stop(host);
        for (int i = 0; i < n_host; i++)
                close(host_fd[i]);
}

struct pump {
        int fd;
        size_t n;
        unsigned seed;
};

static void *writer(void *ud)
{
        struct pump *p = ud;
        char buf[8192];

        for (size_t off = 0; off < p->n;) {
                size_t k = p->n - off < sizeof(buf) ? p->n - off : sizeof(buf);
                for (size_t i = 0; i < k; i++)
                        buf[i] = (char)((off + i) * p->seed >> 3);
                ssize_t w = send(p->fd, buf, k, MSG_NOSIGNAL);
                if (w <= 0)
                        return (void *)1;
                off += (size_t)w;
        }
        shutdown(p->fd, SHUT_WR);
        return NULL;
}

/* Read to EOF; whether exactly n bytes of the writer's pattern came. */
static bool read_all(int fd, size_t n, unsigned seed)
{
        char buf[8192];
        size_t off = 0;

        for (;;) {
                ssize_t r = recv(fd, buf, sizeof(buf), 0);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        return r == 0 && off == n;
                for (ssize_t i = 0; i < r; i++)
                        if (buf[i] != (char)((off + (size_t)i) * seed >> 3))
                                return false;
                off += (size_t)r;
        }
}

Test(vmux, bytes_both_ways_with_half_closes)
{
        pthread_t t;
        struct pump up, down;

        pair_up();
        int g = guest_stream(VMUX_KIND_EGRESS), h = host_stream(0);
        cr_assert_eq(host_kind[0], VMUX_KIND_EGRESS);
        up = (struct pump){g, 3 * 1024 * 1024 + 17, 7};
        cr_assert_eq(pthread_create(&t, NULL, writer, &up), 0);
        cr_assert(read_all(h, up.n, up.seed), "guest to host");
        pthread_join(t, NULL);
        /* the guest's half close came through; the other way is still open */
        down = (struct pump){h, 1024 * 1024 + 3, 13};
        cr_assert_eq(pthread_create(&t, NULL, writer, &down), 0);
        cr_assert(read_all(g, down.n, down.seed), "host to guest");
        pthread_join(t, NULL);
        close(g);
        pair_down();
}

Test(vmux, a_stalled_stream_does_not_hold_up_another)
{
        pthread_t t;
        struct pump stalled;
        char b[4];

        pair_up();
        int g1 = guest_stream(VMUX_KIND_FWD), h1 = host_stream(0);
        int g2 = guest_stream(VMUX_KIND_FWD), h2 = host_stream(1);
        /* far more than the window and both sockets hold: it stalls until h1 is read */
        stalled = (struct pump){g1, 4 * 1024 * 1024, 3};
        cr_assert_eq(pthread_create(&t, NULL, writer, &stalled), 0);
        for (int i = 0; i < 50; i++) {
                cr_assert_eq(send(g2, "ping", 4, MSG_NOSIGNAL), 4);
                cr_assert_eq(recv(h2, b, 4, MSG_WAITALL), 4, "round %d", i);
                cr_assert_eq(send(h2, b, 4, MSG_NOSIGNAL), 4);
                cr_assert_eq(recv(g2, b, 4, MSG_WAITALL), 4, "round %d", i);
        }
        cr_assert(read_all(h1, stalled.n, stalled.seed), "the stalled stream, read at last");
        pthread_join(t, NULL);
        close(g1);
        close(g2);
        pair_down();
}

/* The test plays the guest on the raw channel. */
static void frame_out(int fd, uint16_t type, uint16_t kind, uint32_t id, const void *p, uint32_t n)
{
        struct vmux_hdr h = {.len = n, .type = type, .kind = kind, .id = id};
        cr_assert_eq(send(fd, &h, sizeof(h), MSG_NOSIGNAL), (ssize_t)sizeof(h));
        if (n)
                cr_assert_eq(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Skip to the host's VMUX_SYNC and answer it. */
static void sync_as_guest(int fd)
{
        struct vmux_hdr want = {.len = 8, .type = VMUX_SYNC};
        unsigned char win[sizeof(want)];
        uint64_t nonce;
        size_t have = 0;
        int64_t until = sbx_now_ms() + DEADLINE_MS;

        for (;;) {
                unsigned char c;
                cr_assert_lt(sbx_now_ms(), until, "no VMUX_SYNC from the host");
                if (recv(fd, &c, 1, 0) != 1)
                        continue;
                if (have == sizeof(win)) {
                        memmove(win, win + 1, sizeof(win) - 1);
                        have--;
                }
                win[have++] = c;
                if (have == sizeof(win) && memcmp(win, &want, sizeof(want)) == 0)
                        break;
        }
        cr_assert_eq(recv(fd, &nonce, sizeof(nonce), MSG_WAITALL), (ssize_t)sizeof(nonce));
        frame_out(fd, VMUX_SYNC_ACK, 0, 0, &nonce, sizeof(nonce));
}

/* Whether the host end fd was closed (EOF) within the deadline. */
static bool closed_soon(int fd)
{
        int64_t until = sbx_now_ms() + DEADLINE_MS;
        char b[65536];

        while (sbx_now_ms() < until) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, 1000) != 1)
                        continue;
                ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno == ECONNRESET))
                        return true; /* what it had buffered, then the end */
        }
        return false;
}

Test(vmux, a_guest_out_of_line_is_resynced_and_loses_its_streams)
{
        int ch[2];
        char big[VMUX_DATA_MAX];
        struct timeval tv = {20, 0};

        n_host = 0;
        memset(big, 'x', sizeof(big));
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ch), 0);
        setsockopt(ch[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        host = vmux_start(ch[0], true, opened, NULL, NULL);
        cr_assert_not_null(host);

        /* past the window: h is never read, so once its socket is full no credit comes, and a
         * guest that sends on regardless (4 MiB) overruns what it was given */
        sync_as_guest(ch[1]);
        frame_out(ch[1], VMUX_OPEN, VMUX_KIND_EGRESS, 1, NULL, 0);
        int h = host_stream(0);
        for (int i = 0; i < 256; i++)
                frame_out(ch[1], VMUX_DATA, 0, 1, big, sizeof(big));
        cr_assert(closed_soon(h), "the stream outlived a guest that overran its window");

        /* a reused id, after a new sync */
        sync_as_guest(ch[1]);
        frame_out(ch[1], VMUX_OPEN, VMUX_KIND_FWD, 5, NULL, 0);
        h = host_stream(1);
        frame_out(ch[1], VMUX_OPEN, VMUX_KIND_FWD, 5, NULL, 0);
        cr_assert(closed_soon(h), "a reused stream id was taken");

        /* an unknown kind, and a header too long to be one */
        sync_as_guest(ch[1]);
        frame_out(ch[1], VMUX_OPEN, VMUX_KIND_FWD, 1, NULL, 0);
        h = host_stream(2);
        frame_out(ch[1], VMUX_OPEN, 9, 2, NULL, 0);
        cr_assert(closed_soon(h), "an unknown kind was taken");
        sync_as_guest(ch[1]);
        frame_out(ch[1], VMUX_OPEN, VMUX_KIND_FWD, 1, NULL, 0);
        h = host_stream(3);
        struct vmux_hdr huge = {.len = 0xffffffffu, .type = VMUX_DATA, .id = 1};
        cr_assert_eq(send(ch[1], &huge, sizeof(huge), MSG_NOSIGNAL), (ssize_t)sizeof(huge));
        cr_assert(closed_soon(h), "a frame longer than the maximum was taken");

        /* and it serves again after the next sync */
        sync_as_guest(ch[1]);
        frame_out(ch[1], VMUX_OPEN, VMUX_KIND_EGRESS, 1, NULL, 0);
        h = host_stream(4);
        frame_out(ch[1], VMUX_DATA, 0, 1, "abc", 3);
        char b[3];
        cr_assert_eq(recv(h, b, 3, MSG_WAITALL), 3);
        cr_assert_eq(memcmp(b, "abc", 3), 0);
        vmux_stop(host);
        close(ch[1]);
        for (int i = 0; i < n_host; i++)
                close(host_fd[i]);
}

static uint32_t dropped_total;
static int dropped_calls;

static void dropped(void *ud, uint32_t count)
{
        (void)ud;
        pthread_mutex_lock(&mu);
        dropped_total += count;
        dropped_calls++;
        pthread_mutex_unlock(&mu);
}

static bool dropped_is(uint32_t want)
{
        int64_t until = sbx_now_ms() + DEADLINE_MS;

        while (sbx_now_ms() < until) {
                pthread_mutex_lock(&mu);
                bool ok = dropped_total == want;
                pthread_mutex_unlock(&mu);
                if (ok)
                        return true;
                poll(NULL, 0, 5);
        }
        return false;
}

/* What cannot be carried is counted: the host counts its connections (the runner's forward
 * control stream, the first forward stream while none is live, is not one), and the guest's
 * VMUX_DROPPED after a sync reaches the dropped callback, once per sync. */
Test(vmux, connections_counted_and_drops_reported)
{
        int ch[2];
        struct timeval tv = {20, 0};

        n_host = 0;
        dropped_total = 0;
        dropped_calls = 0;
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ch), 0);
        setsockopt(ch[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        host = vmux_start(ch[0], true, opened, dropped, NULL);
        cr_assert_not_null(host);

        sync_as_guest(ch[1]);
        uint32_t n = 3;
        frame_out(ch[1], VMUX_DROPPED, 0, 0, &n, sizeof(n));
        cr_assert(dropped_is(3), "the guest's report did not reach the callback");
        frame_out(ch[1], VMUX_OPEN, VMUX_KIND_FWD, 1, NULL, 0);    /* the control */
        frame_out(ch[1], VMUX_OPEN, VMUX_KIND_FWD, 2, NULL, 0);    /* a forwarded connection */
        frame_out(ch[1], VMUX_OPEN, VMUX_KIND_EGRESS, 3, NULL, 0); /* an egress client */
        int h = host_stream(2);
        cr_assert_eq(vmux_connections(host), 2);
        /* the data stream ends: one connection left */
        frame_out(ch[1], VMUX_CLOSE, 0, 2, NULL, 0);
        int64_t until = sbx_now_ms() + DEADLINE_MS;
        while (vmux_connections(host) != 1 && sbx_now_ms() < until)
                poll(NULL, 0, 5);
        cr_assert_eq(vmux_connections(host), 1);

        /* a second report in one sync is a protocol error: resynced, its streams dropped */
        frame_out(ch[1], VMUX_DROPPED, 0, 0, &n, sizeof(n));
        cr_assert(closed_soon(h), "a second VMUX_DROPPED in one sync was taken");
        until = sbx_now_ms() + DEADLINE_MS;
        while (vmux_connections(host) != 0 && sbx_now_ms() < until)
                poll(NULL, 0, 5);
        cr_assert_eq(vmux_connections(host), 0);
        /* the next sync may report again */
        sync_as_guest(ch[1]);
        n = 2;
        frame_out(ch[1], VMUX_DROPPED, 0, 0, &n, sizeof(n));
        cr_assert(dropped_is(5));
        cr_assert_eq(dropped_calls, 2);
        vmux_stop(host);
        close(ch[1]);
        for (int i = 0; i < n_host; i++)
                close(host_fd[i]);
}
