/* egress_bench.c — what the egress proxy adds (issue 14, Speed): per plain
 * HTTP request (p50/p95 of a fresh connection, request and response, to a
 * loopback upstream) and in throughput (MB/s through a CONNECT tunnel),
 * each against a direct loopback connection to the same upstream, in the
 * same run. Host-side: clients connect to a TCP front that hands each
 * connection to egress_accept, as the gateway hands egress.sock's; the
 * container's runner hop (127.0.0.1:3128 -> egress.sock) is not included.
 *
 * Usage: sandboxd-egress-bench [--requests N] [--megabytes M]
 * Prints one JSON object on stdout. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandboxd/config.h"
#include "sandboxd/egress.h"
#include "sandboxd/store.h"

static struct egress *eg;
static size_t source_bytes;

static int listen_loopback(int *ret_port)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(sa);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1024) < 0 ||
            getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
                perror("listen");
                exit(1);
        }
        *ret_port = ntohs(sa.sin_port);
        return fd;
}

static int connect_port(int port)
{
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                perror("connect");
                exit(1);
        }
        return fd;
}

/* Upstream: a request head in, a 5-byte answer out (http), or source_bytes
 * out (source); one connection at a time is all the bench needs. */
static void *upstream(void *arg)
{
        int lfd = (int)(intptr_t)arg & 0xffff, source = (int)((intptr_t)arg >> 16);
        static char buf[1 << 16];

        for (;;) {
                int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                size_t n = 0;
                if (c < 0)
                        return NULL;
                if (source) {
                        for (size_t sent = 0; sent < source_bytes;) {
                                ssize_t w =
                                        write(c, buf,
                                              sizeof(buf) < source_bytes - sent ? sizeof(buf) : source_bytes - sent);
                                if (w <= 0)
                                        break;
                                sent += (size_t)w;
                        }
                } else {
                        ssize_t r;
                        while ((r = read(c, buf + n, sizeof(buf) - 1 - n)) > 0) {
                                n += (size_t)r;
                                buf[n] = '\0';
                                if (strstr(buf, "\r\n\r\n"))
                                        break;
                        }
                        dprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
                }
                close(c);
        }
}

static void *front(void *arg)
{
        int lfd = (int)(intptr_t)arg;
        for (;;) {
                int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0)
                        return NULL;
                egress_accept(eg, "bench", "s", c);
        }
}

static size_t drain(int fd)
{
        static char buf[1 << 16];
        size_t total = 0;
        ssize_t r;
        while ((r = read(fd, buf, sizeof(buf))) > 0)
                total += (size_t)r;
        return total;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
        qsort(v, (size_t)n, sizeof(*v), cmp_double);
        return v[(int)(p * (n - 1))];
}

static double request_ms(int port, const char *req)
{
        struct timespec a, b;
        int64_t t;
        int fd;

        clock_gettime(CLOCK_MONOTONIC, &a);
        fd = connect_port(port);
        if (write(fd, req, strlen(req)) < 0)
                exit(1);
        (void)drain(fd);
        close(fd);
        clock_gettime(CLOCK_MONOTONIC, &b);
        t = (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
        return (double)t / 1e6;
}

static double megabytes_per_s(int port, const char *connect_req)
{
        struct timespec a, b;
        char head[256];
        size_t got;
        int fd;

        clock_gettime(CLOCK_MONOTONIC, &a);
        fd = connect_port(port);
        if (connect_req) {
                size_t n = 0;
                if (write(fd, connect_req, strlen(connect_req)) < 0)
                        exit(1);
                while (n < sizeof(head) - 1) { /* the proxy's 200, byte by byte up to its blank line */
                        if (read(fd, head + n, 1) != 1)
                                exit(1);
                        head[++n] = '\0';
                        if (strstr(head, "\r\n\r\n"))
                                break;
                }
        }
        got = drain(fd);
        close(fd);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (got != source_bytes) {
                fprintf(stderr, "egress bench: got %zu of %zu bytes\n", got, source_bytes);
                exit(1);
        }
        return (double)got / (1 << 20) / ((double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9);
}

int main(int argc, char **argv)
{
        int requests = 500, megabytes = 512, http_port, src_port, front_port, hl, sl, fl;
        char dir[] = "/tmp/sbx-egress-bench-XXXXXX", db[128], opt[512], req[256], creq[256];
        struct sbx_config cfg;
        struct sbx_error err = {0};
        struct store *st;
        pthread_t t;
        double *direct, *proxied, mb_direct, mb_proxied;

        for (int i = 1; i + 1 < argc; i += 2) {
                if (strcmp(argv[i], "--requests") == 0)
                        requests = atoi(argv[i + 1]);
                else if (strcmp(argv[i], "--megabytes") == 0)
                        megabytes = atoi(argv[i + 1]);
        }
        if (requests < 10 || megabytes < 1) {
                fprintf(stderr, "usage: sandboxd-egress-bench [--requests N>=10] [--megabytes M>=1]\n");
                return 2;
        }
        signal(SIGPIPE, SIG_IGN);
        source_bytes = (size_t)megabytes << 20;
        if (!mkdtemp(dir))
                return 1;
        snprintf(db, sizeof(db), "%s/bench.db", dir);
        if (store_open(db, &st, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        hl = listen_loopback(&http_port);
        sl = listen_loopback(&src_port);
        fl = listen_loopback(&front_port);
        pthread_create(&t, NULL, upstream, (void *)(intptr_t)hl);
        pthread_create(&t, NULL, upstream, (void *)(intptr_t)(sl | (1 << 16)));
        config_defaults(&cfg);
        snprintf(opt, sizeof(opt), "up.bench:%d, src.bench:%d", http_port, src_port);
        cfg.egress_conns_per_minute = 10000000; /* EGRESS_CONNS_PER_MINUTE would cap the bench's connections */
        if (config_set(&cfg, "egress.allow", opt, &err) < 0 ||
            config_set(&cfg, "egress.resolve", "up.bench=127.0.0.1, src.bench=127.0.0.1", &err) < 0 ||
            config_set(&cfg, "egress.allow_private", "127.0.0.1/32", &err) < 0 || egress_new(&cfg, st, &eg, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        pthread_create(&t, NULL, front, (void *)(intptr_t)fl);

        direct = calloc((size_t)requests, sizeof(double));
        proxied = calloc((size_t)requests, sizeof(double));
        snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: up.bench:%d\r\nConnection: close\r\n\r\n", http_port);
        snprintf(creq, sizeof(creq), "GET http://up.bench:%d/ HTTP/1.1\r\nHost: up.bench:%d\r\n\r\n", http_port,
                 http_port);
        for (int i = 0; i < requests; i++) { /* interleaved, so load changes hit both alike */
                direct[i] = request_ms(http_port, req);
                proxied[i] = request_ms(front_port, creq);
        }
        snprintf(creq, sizeof(creq), "CONNECT src.bench:%d HTTP/1.1\r\n\r\n", src_port);
        mb_direct = megabytes_per_s(src_port, NULL);
        mb_proxied = megabytes_per_s(front_port, creq);
        printf("{\"egress_http_requests\": %d, \"direct_p50_ms\": %.3f, \"direct_p95_ms\": %.3f, "
               "\"proxied_p50_ms\": %.3f, \"proxied_p95_ms\": %.3f, \"added_p50_ms\": %.3f, "
               "\"tunnel_megabytes\": %d, \"direct_mb_s\": %.0f, \"proxied_mb_s\": %.0f}\n",
               requests, pct(direct, requests, 0.5), pct(direct, requests, 0.95), pct(proxied, requests, 0.5),
               pct(proxied, requests, 0.95), pct(proxied, requests, 0.5) - pct(direct, requests, 0.5), megabytes,
               mb_direct, mb_proxied);
        fflush(stdout);
        egress_free(eg);
        store_close(st);
        snprintf(opt, sizeof(opt), "rm -rf %s", dir);
        if (system(opt) != 0)
                return 1;
        _exit(0); /* the upstream and front threads block in accept */
}
