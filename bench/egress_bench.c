/* egress_bench.c — what the egress proxy adds (issue 14, Speed): per plain
 * HTTP request (p50/p95 of a fresh connection, request and response, to a
 * loopback upstream) and in throughput (MB/s through a CONNECT tunnel),
 * each against a direct loopback connection to the same upstream, in the
 * same run. And what interception adds (issue 37, Speed): an HTTPS request
 * with a secret's placeholder through an intercepted CONNECT (two TLS
 * handshakes, the swap) against the same request through a plain CONNECT
 * (one handshake, end to end), p50 of each, interleaved; and a 100 MB
 * download the same two ways (MB/s, the median of 3 each, interleaved:
 * the intercepted one is decrypted, masked and encrypted again); and
 * requests on one kept-alive HTTPS connection (the first, with its
 * handshakes, left out), intercepted against plain, p50 per request; the CAs are made
 * with the openssl CLI in a temporary directory. Host-side: clients connect to a TCP front that hands each
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

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "sandboxd/config.h"
#include "sandboxd/egress.h"
#include "sandboxd/store.h"

static struct egress *eg;
static size_t source_bytes;
static char tmpdir[] = "/tmp/sbx-egress-bench-XXXXXX";
#define PLACEHOLDER "sbx_ph_0123456789abcdef0123456789abcdef"
#define VALUE "bench-secret-value"
#define DOWNLOAD_MB 100 /* issue 37, Speed: a 100 MB intercepted download against a plain CONNECT's */
#define DOWNLOAD_RUNS 3
#define KEEPALIVE_PER_CONN 50 /* requests on one kept-alive connection (interception keeps at most 100) */

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

/* Front: fd in the low 16 bits; bit 16 set: the session with the secret. */
static void *front(void *arg)
{
        int lfd = (int)(intptr_t)arg & 0xffff;
        const char *session = ((intptr_t)arg >> 16) ? "sec" : "s";
        for (;;) {
                int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0)
                        return NULL;
                egress_accept(eg, "bench", session, c);
        }
}

/* ---- interception (issue 37) ---- */

static char *slurp(const char *name)
{
        char path[256], *buf = calloc(1, 1 << 16);
        FILE *f;
        snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
        f = fopen(path, "r");
        if (!f || !buf || fread(buf, 1, (1 << 16) - 1, f) == 0)
                exit(1);
        fclose(f);
        return buf;
}

static int sec_attached(const char *user, const char *session, struct egress_secret **ret, size_t *ret_n, void *ud)
{
        struct egress_secret *v;
        *ret = NULL;
        *ret_n = 0;
        if (strcmp(session, "sec") != 0)
                return 0;
        v = calloc(1, sizeof(*v));
        v->value = (unsigned char *)strdup(VALUE);
        v->value_len = strlen(VALUE);
        snprintf(v->name, sizeof(v->name), "B");
        snprintf(v->placeholder, sizeof(v->placeholder), PLACEHOLDER);
        snprintf(v->hosts[0], sizeof(v->hosts[0]), "tls.bench");
        v->n_hosts = 1;
        *ret = v;
        *ret_n = 1;
        return 0;
}

static int sec_ca(const char *user, const char *session, char **ret_cert, char **ret_key, void *ud)
{
        *ret_cert = slurp("sca.pem");
        *ret_key = slurp("sca.key");
        return 0;
}

/* One request head into buf (NUL-terminated): false at the connection's end. */
static bool read_head(SSL *ssl, char *buf, size_t cap)
{
        int n = 0, r;

        buf[0] = '\0';
        while (n < (int)cap - 1 && (r = SSL_read(ssl, buf + n, (int)cap - 1 - n)) > 0) {
                n += r;
                buf[n] = '\0';
                if (strstr(buf, "\r\n\r\n"))
                        return true;
        }
        return false;
}

/* TLS upstream: a request head in (its Authorization must hold the value), 5 bytes out. */
static void *tls_upstream(void *arg)
{
        int lfd = (int)(intptr_t)arg;
        static const char ka[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        char cert[256], key[256], buf[4096];
        SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

        snprintf(cert, sizeof(cert), "%s/up.pem", tmpdir);
        snprintf(key, sizeof(key), "%s/up.key", tmpdir);
        if (!ctx || SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
            SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
                exit(1);
        for (;;) {
                int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                SSL *ssl = SSL_new(ctx);
                if (c < 0)
                        return NULL;
                SSL_set_fd(ssl, c);
                if (SSL_accept(ssl) == 1) {
                        /* GET /ka is kept alive: the next request on it */
                        while (read_head(ssl, buf, sizeof(buf)) && strncmp(buf, "GET /ka ", 8) == 0 &&
                               SSL_write(ssl, ka, (int)sizeof(ka) - 1) > 0)
                                ;
                        if (!strstr(buf, "\r\n\r\n") || strncmp(buf, "GET /ka ", 8) == 0)
                                goto done;
                        const char *ok =
                                strstr(buf, "Bearer " VALUE) || strstr(buf, "Bearer " PLACEHOLDER)
                                        ? "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
                                        : "HTTP/1.1 401 No\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                        if (strncmp(buf, "GET /big ", 9) == 0) {
                                /* the download: DOWNLOAD_MB of bytes no value is in */
                                static char chunk[64 * 1024];
                                char head[128];
                                memset(chunk, 'd', sizeof(chunk));
                                snprintf(head, sizeof(head),
                                         "HTTP/1.1 200 OK\r\nContent-Length: %lld\r\nConnection: close\r\n\r\n",
                                         (long long)DOWNLOAD_MB << 20);
                                SSL_write(ssl, head, (int)strlen(head));
                                for (long long left = (long long)DOWNLOAD_MB << 20; left > 0;
                                     left -= (long long)sizeof(chunk))
                                        if (SSL_write(ssl, chunk, (int)sizeof(chunk)) <= 0)
                                                break;
                                ok = "";
                        }
                        if (*ok)
                                SSL_write(ssl, ok, (int)strlen(ok));
done:
                        SSL_shutdown(ssl);
                }
                SSL_free(ssl);
                close(c);
        }
}

/* A CONNECT to tls.bench on front_port, then TLS over it (the client
 * trusting ctx's CA) and the request for path; exits on a failure. */
static SSL *https_request(int front_port, int tls_port, SSL_CTX *ctx, const char *path, int *ret_fd)
{
        char req[512], head[256];
        size_t n = 0;
        int fd;
        SSL *ssl;

        fd = connect_port(front_port);
        snprintf(req, sizeof(req), "CONNECT tls.bench:%d HTTP/1.1\r\n\r\n", tls_port);
        if (write(fd, req, strlen(req)) < 0)
                exit(1);
        while (n < sizeof(head) - 1) {
                if (read(fd, head + n, 1) != 1)
                        exit(1);
                head[++n] = '\0';
                if (strstr(head, "\r\n\r\n"))
                        break;
        }
        ssl = SSL_new(ctx);
        SSL_set_fd(ssl, fd);
        SSL_set_tlsext_host_name(ssl, "tls.bench");
        SSL_set1_host(ssl, "tls.bench");
        if (SSL_connect(ssl) != 1) {
                ERR_print_errors_fp(stderr);
                exit(1);
        }
        snprintf(req, sizeof(req),
                 "GET %s HTTP/1.1\r\nHost: tls.bench:%d\r\nAuthorization: Bearer " PLACEHOLDER "\r\n\r\n", path,
                 tls_port);
        SSL_write(ssl, req, (int)strlen(req));
        *ret_fd = fd;
        return ssl;
}

static double since_ms(const struct timespec *a)
{
        struct timespec b;
        clock_gettime(CLOCK_MONOTONIC, &b);
        return (double)((b.tv_sec - a->tv_sec) * 1000000000LL + (b.tv_nsec - a->tv_nsec)) / 1e6;
}

/* One HTTPS request through a CONNECT on front_port, the client trusting ca; its time, or exit. */
static double https_ms(int front_port, int tls_port, SSL_CTX *ctx)
{
        struct timespec a;
        char buf[4096];
        int fd, r, got = 0;
        SSL *ssl;
        double ms;

        clock_gettime(CLOCK_MONOTONIC, &a);
        ssl = https_request(front_port, tls_port, ctx, "/", &fd);
        while ((r = SSL_read(ssl, buf + got, (int)sizeof(buf) - 1 - got)) > 0)
                got += r;
        buf[got] = '\0';
        SSL_free(ssl);
        close(fd);
        ms = since_ms(&a);
        if (!strstr(buf, "hello")) {
                fprintf(stderr, "egress bench: no answer over HTTPS: %s\n", buf);
                exit(1);
        }
        return ms;
}

/* Read one response to GET /ka (Content-Length: 5 from the upstream, chunked through interception). */
static void ka_response(SSL *ssl)
{
        char buf[1024];
        int got = 0, r;

        for (;;) {
                char *end;
                if ((r = SSL_read(ssl, buf + got, (int)sizeof(buf) - 1 - got)) <= 0) {
                        fprintf(stderr, "egress bench: a kept-alive connection ended\n");
                        exit(1);
                }
                got += r;
                buf[got] = '\0';
                end = strstr(buf, "\r\n\r\n");
                if (!end)
                        continue;
                if (strstr(buf, "chunked") ? got >= 5 && strcmp(buf + got - 5, "0\r\n\r\n") == 0
                                           : got >= (int)(end + 4 - buf) + 5)
                        return;
        }
}

/* Requests 2..n on one kept-alive HTTPS connection through a CONNECT on
 * front_port (the first pays the handshakes): each one's time into ms. */
static void https_keepalive_ms(int front_port, int tls_port, SSL_CTX *ctx, int n, double *ms)
{
        char req[512];
        int fd;
        SSL *ssl = https_request(front_port, tls_port, ctx, "/ka", &fd);

        ka_response(ssl);
        snprintf(req, sizeof(req),
                 "GET /ka HTTP/1.1\r\nHost: tls.bench:%d\r\nAuthorization: Bearer " PLACEHOLDER "\r\n\r\n", tls_port);
        for (int i = 0; i < n - 1; i++) {
                struct timespec a;
                clock_gettime(CLOCK_MONOTONIC, &a);
                if (SSL_write(ssl, req, (int)strlen(req)) <= 0)
                        exit(1);
                ka_response(ssl);
                ms[i] = since_ms(&a);
        }
        SSL_free(ssl);
        close(fd);
}

/* MB/s of one DOWNLOAD_MB download over HTTPS through a CONNECT on front_port. */
static double https_download_mb_s(int front_port, int tls_port, SSL_CTX *ctx)
{
        struct timespec a;
        static char buf[64 * 1024];
        size_t got = 0;
        int fd, r;
        SSL *ssl;
        double ms;

        clock_gettime(CLOCK_MONOTONIC, &a);
        ssl = https_request(front_port, tls_port, ctx, "/big", &fd);
        while ((r = SSL_read(ssl, buf, (int)sizeof(buf))) > 0)
                got += (size_t)r;
        SSL_free(ssl);
        close(fd);
        ms = since_ms(&a);
        if (got < (size_t)DOWNLOAD_MB << 20) {
                fprintf(stderr, "egress bench: the HTTPS download was cut at %zu bytes\n", got);
                exit(1);
        }
        return (double)got / (1 << 20) / (ms / 1000);
}

static SSL_CTX *client_ctx(const char *ca)
{
        char path[256];
        SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
        snprintf(path, sizeof(path), "%s/%s", tmpdir, ca);
        if (!ctx || SSL_CTX_load_verify_locations(ctx, path, NULL) != 1)
                exit(1);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        return ctx;
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
        int requests = 500, megabytes = 512, http_port, src_port, front_port, hl, sl, fl, tls_port, sec_port, tl, scl;
        char *dir = tmpdir, db[128], opt[1536], req[256], creq[256];
        double *plain_tls, *swapped_tls, dl_plain[DOWNLOAD_RUNS], dl_icpt[DOWNLOAD_RUNS], *ka_plain, *ka_icpt;
        int ka_n = 0;
        SSL_CTX *up_ctx, *sess_ctx;
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
        if (!mkdtemp(tmpdir))
                return 1;
        snprintf(db, sizeof(db), "%s/bench.db", dir);
        if (store_open(db, &st, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        /* the upstream's CA and certificate, and the session's CA (what secrets_ca.c makes in the daemon) */
        snprintf(opt, sizeof(opt),
                 "cd %s && { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
                 "-subj /CN=upca -keyout upca.key -out upca.pem && "
                 "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=tls.bench "
                 "-keyout up.key -out up.csr && printf 'subjectAltName=DNS:tls.bench\\n' > ext && "
                 "openssl x509 -req -in up.csr -CA upca.pem -CAkey upca.key -CAcreateserial -days 1 -extfile ext "
                 "-out up.pem && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
                 "-subj /CN=sca -addext basicConstraints=critical,CA:TRUE -keyout sca.key -out sca.pem; }"
                 " >/dev/null 2>&1",
                 dir);
        if (system(opt) != 0) {
                fprintf(stderr, "egress bench: openssl failed\n");
                return 1;
        }
        snprintf(opt, sizeof(opt), "%s/upca.pem", dir);
        setenv("SSL_CERT_FILE", opt, 1); /* the proxy trusts the upstream as a system CA */
        hl = listen_loopback(&http_port);
        sl = listen_loopback(&src_port);
        fl = listen_loopback(&front_port);
        tl = listen_loopback(&tls_port);
        scl = listen_loopback(&sec_port);
        pthread_create(&t, NULL, upstream, (void *)(intptr_t)hl);
        pthread_create(&t, NULL, upstream, (void *)(intptr_t)(sl | (1 << 16)));
        pthread_create(&t, NULL, tls_upstream, (void *)(intptr_t)tl);
        config_defaults(&cfg);
        snprintf(opt, sizeof(opt), "up.bench:%d, src.bench:%d, tls.bench:%d", http_port, src_port, tls_port);
        cfg.egress_conns_per_minute = 10000000; /* EGRESS_CONNS_PER_MINUTE would cap the bench's connections */
        if (config_set(&cfg, "egress.allow", opt, &err) < 0 ||
            config_set(&cfg, "egress.resolve", "up.bench=127.0.0.1, src.bench=127.0.0.1, tls.bench=127.0.0.1", &err) <
                    0 ||
            config_set(&cfg, "egress.allow_private", "127.0.0.1/32", &err) < 0 || egress_new(&cfg, st, &eg, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        egress_set_secrets_ops(eg, &(struct egress_secrets_ops){.attached = sec_attached, .ca = sec_ca}, NULL);
        pthread_create(&t, NULL, front, (void *)(intptr_t)fl);
        pthread_create(&t, NULL, front, (void *)(intptr_t)(scl | (1 << 16)));

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
        plain_tls = calloc((size_t)requests, sizeof(double));
        swapped_tls = calloc((size_t)requests, sizeof(double));
        up_ctx = client_ctx("upca.pem");
        sess_ctx = client_ctx("sca.pem");
        for (int i = 0; i < requests; i++) { /* interleaved, as above */
                plain_tls[i] = https_ms(front_port, tls_port, up_ctx);
                swapped_tls[i] = https_ms(sec_port, tls_port, sess_ctx);
        }
        /* kept alive: KEEPALIVE_PER_CONN requests a connection (the interception's bound is 100), interleaved */
        ka_plain = calloc((size_t)requests + KEEPALIVE_PER_CONN, sizeof(double));
        ka_icpt = calloc((size_t)requests + KEEPALIVE_PER_CONN, sizeof(double));
        for (; ka_n < requests; ka_n += KEEPALIVE_PER_CONN - 1) {
                https_keepalive_ms(front_port, tls_port, up_ctx, KEEPALIVE_PER_CONN, ka_plain + ka_n);
                https_keepalive_ms(sec_port, tls_port, sess_ctx, KEEPALIVE_PER_CONN, ka_icpt + ka_n);
        }
        for (int i = 0; i < DOWNLOAD_RUNS; i++) { /* interleaved; the median of each */
                dl_plain[i] = https_download_mb_s(front_port, tls_port, up_ctx);
                dl_icpt[i] = https_download_mb_s(sec_port, tls_port, sess_ctx);
        }
        printf("{\"egress_http_requests\": %d, \"direct_p50_ms\": %.3f, \"direct_p95_ms\": %.3f, "
               "\"proxied_p50_ms\": %.3f, \"proxied_p95_ms\": %.3f, \"added_p50_ms\": %.3f, "
               "\"tunnel_megabytes\": %d, \"direct_mb_s\": %.0f, \"proxied_mb_s\": %.0f, "
               "\"https_connect_p50_ms\": %.3f, \"https_intercepted_p50_ms\": %.3f, \"intercept_added_p50_ms\": %.3f, "
               "\"https_download_megabytes\": %d, \"https_connect_mb_s\": %.0f, \"https_intercepted_mb_s\": %.0f, "
               "\"intercept_throughput_ratio\": %.2f, \"https_keepalive_requests\": %d, "
               "\"https_keepalive_connect_p50_ms\": %.3f, \"https_keepalive_intercepted_p50_ms\": %.3f, "
               "\"keepalive_intercept_added_p50_ms\": %.3f}\n",
               requests, pct(direct, requests, 0.5), pct(direct, requests, 0.95), pct(proxied, requests, 0.5),
               pct(proxied, requests, 0.95), pct(proxied, requests, 0.5) - pct(direct, requests, 0.5), megabytes,
               mb_direct, mb_proxied, pct(plain_tls, requests, 0.5), pct(swapped_tls, requests, 0.5),
               pct(swapped_tls, requests, 0.5) - pct(plain_tls, requests, 0.5), DOWNLOAD_MB,
               pct(dl_plain, DOWNLOAD_RUNS, 0.5), pct(dl_icpt, DOWNLOAD_RUNS, 0.5),
               pct(dl_icpt, DOWNLOAD_RUNS, 0.5) / pct(dl_plain, DOWNLOAD_RUNS, 0.5), ka_n, pct(ka_plain, ka_n, 0.5),
               pct(ka_icpt, ka_n, 0.5), pct(ka_icpt, ka_n, 0.5) - pct(ka_plain, ka_n, 0.5));
        fflush(stdout);
        egress_free(eg);
        store_close(st);
        snprintf(opt, sizeof(opt), "rm -rf %s", dir);
        if (system(opt) != 0)
                return 1;
        _exit(0); /* the upstream and front threads block in accept */
}
