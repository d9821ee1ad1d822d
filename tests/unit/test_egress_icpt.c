/* Host-side tests of an intercepted connection (egress_tls.c) over its
 * life rather than its first request: each request kept alive on it gets
 * its own audit row, and a package index page held for the policy's filter
 * is filtered off the loop thread (egress_filter.c), so that other
 * connections are served meanwhile; the filter pool's caps; a client that
 * goes while its page is being filtered. No container: a TCP front hands
 * each connection to egress_accept; the registry is a TLS server on
 * 127.0.0.1 here (certificates made with the openssl CLI), reached as
 * reg.test through egress.resolve. The filter's worker waits in a hook the
 * test releases, so ordering is asserted, never time; every wait has a
 * deadline. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "sandboxd/config.h"
#include "sandboxd/egress.h"
#include "sandboxd/store.h"
#include "sandboxd/store_egress.h"

#define WAIT_MS 30000
#define PAGE_VERSIONS 3000 /* the index page's files: some 200 KB, several reads and chunks */

static char tmpdir[256];
static struct store *st;
static struct egress *eg;
static int reg_lfd, reg_port, front_lfd[2], front_port[2];
static pthread_t reg_thread, front_thread[2];
static SSL_CTX *reg_ctx, *cli_ctx;

/* ---- the filter's hook: the worker waits here until the test releases it ---- */

static pthread_mutex_t hk_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hk_cond = PTHREAD_COND_INITIALIZER;
static int hk_entered, hk_left;
static bool hk_release;

static void deadline_in(struct timespec *ts, int ms)
{
        clock_gettime(CLOCK_REALTIME, ts);
        ts->tv_sec += ms / 1000;
}

static void hook(const char *user, const char *package, void *ud)
{
        struct timespec ts;

        deadline_in(&ts, WAIT_MS);
        pthread_mutex_lock(&hk_lock);
        hk_entered++;
        pthread_cond_broadcast(&hk_cond);
        while (!hk_release && pthread_cond_timedwait(&hk_cond, &hk_lock, &ts) != ETIMEDOUT)
                ;
        hk_left++;
        pthread_cond_broadcast(&hk_cond);
        pthread_mutex_unlock(&hk_lock);
}

static bool hook_wait(int *counter, int n)
{
        struct timespec ts;
        bool ok;

        deadline_in(&ts, WAIT_MS);
        pthread_mutex_lock(&hk_lock);
        while (*counter < n && pthread_cond_timedwait(&hk_cond, &hk_lock, &ts) != ETIMEDOUT)
                ;
        ok = *counter >= n;
        pthread_mutex_unlock(&hk_lock);
        return ok;
}

static void hook_open(void)
{
        pthread_mutex_lock(&hk_lock);
        hk_release = true;
        pthread_cond_broadcast(&hk_cond);
        pthread_mutex_unlock(&hk_lock);
}

/* ---- the registry: HTTP/1.1 over TLS, kept alive ---- */

static int listen_loopback(int *ret_port)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(sa);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

        cr_assert_geq(fd, 0);
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        cr_assert_eq(listen(fd, 128), 0);
        cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
        *ret_port = ntohs(sa.sin_port);
        return fd;
}

static char *page_make(size_t *ret_len)
{
        size_t cap = (size_t)PAGE_VERSIONS * 80 + 256, n = 0;
        char *p = malloc(cap);

        cr_assert_not_null(p);
        n += (size_t)snprintf(p + n, cap - n, "<html><body>\n");
        for (int i = 0; i < PAGE_VERSIONS; i++)
                n += (size_t)snprintf(p + n, cap - n, "<a href=\"/p/bigpkg-1.0.%d.tar.gz\">bigpkg-1.0.%d</a><br/>\n", i,
                                      i);
        n += (size_t)snprintf(p + n, cap - n, "<a href=\"/p/bigpkg-2.0.tar.gz\">bigpkg-2.0</a>\n</body></html>\n");
        *ret_len = n;
        return p;
}

static void *reg_conn(void *arg)
{
        SSL *ssl = arg;
        char buf[8192];

        if (SSL_accept(ssl) == 1)
                for (;;) {
                        int n = 0, r;
                        char method[8] = "", path[256] = "", head[256];
                        const char *body;
                        char *page = NULL;
                        size_t blen;
                        while (n < (int)sizeof(buf) - 1 && (r = SSL_read(ssl, buf + n, (int)sizeof(buf) - 1 - n)) > 0) {
                                n += r;
                                buf[n] = '\0';
                                if (strstr(buf, "\r\n\r\n"))
                                        break;
                        }
                        if (!strstr(buf, "\r\n\r\n") || sscanf(buf, "%7s %255s", method, path) != 2)
                                break;
                        if (strcmp(path, "/simple/bigpkg/") == 0) {
                                page = page_make(&blen);
                                body = page;
                        } else {
                                body = path;
                                blen = strlen(path);
                        }
                        snprintf(head, sizeof(head),
                                 "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %zu\r\n\r\n", blen);
                        if (SSL_write(ssl, head, (int)strlen(head)) <= 0 ||
                            (strcmp(method, "HEAD") != 0 && SSL_write(ssl, body, (int)blen) <= 0)) {
                                free(page);
                                break;
                        }
                        free(page);
                }
        SSL_shutdown(ssl);
        close(SSL_get_fd(ssl));
        SSL_free(ssl);
        return NULL;
}

static void *reg_serve(void *arg)
{
        for (;;) {
                int c = accept4(reg_lfd, NULL, NULL, SOCK_CLOEXEC);
                SSL *ssl;
                pthread_t t;
                if (c < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        return NULL;
                }
                ssl = SSL_new(reg_ctx);
                SSL_set_fd(ssl, c);
                if (pthread_create(&t, NULL, reg_conn, ssl) != 0) {
                        SSL_free(ssl);
                        close(c);
                } else {
                        pthread_detach(t);
                }
        }
}

/* What the gateway does; front 0 is alice's session s1, front 1 bob's s2. */
static void *front(void *arg)
{
        int i = (int)(intptr_t)arg;
        for (;;) {
                int c = accept4(front_lfd[i], NULL, NULL, SOCK_CLOEXEC);
                if (c < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        return NULL;
                }
                egress_accept(eg, i ? "bob" : "alice", i ? "s2" : "s1", c);
        }
}

/* ---- the session's CA (what secrets_ca.c makes in the daemon) ---- */

static char *slurp(const char *name)
{
        char path[400], *buf = calloc(1, 1 << 16);
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
        f = fopen(path, "r");
        if (!f || !buf || fread(buf, 1, (1 << 16) - 1, f) == 0) {
                if (f)
                        fclose(f);
                free(buf);
                return NULL;
        }
        fclose(f);
        return buf;
}

static int sec_attached(const char *user, const char *session, struct egress_secret **ret, size_t *ret_n, void *ud)
{
        *ret = NULL;
        *ret_n = 0;
        return 0;
}

static int sec_ca(const char *user, const char *session, char **ret_cert, char **ret_key, void *ud)
{
        *ret_cert = slurp("sca.pem");
        *ret_key = slurp("sca.key");
        if (*ret_cert && *ret_key)
                return 0;
        free(*ret_cert);
        free(*ret_key);
        return -ENOENT;
}

/* ---- fixture ---- */

static void set(struct sbx_config *cfg, const char *k, const char *v)
{
        struct sbx_error err = {0};
        cr_assert_eq(config_set(cfg, k, v, &err), 0, "%s: %s", k, err.msg);
}

static void setup(void)
{
        const char *base = getenv("TMPDIR");
        char cmd[2048], path[400], opt[400];
        struct sbx_config cfg;
        struct sbx_error err = {0};
        FILE *f;

        signal(SIGPIPE, SIG_IGN);
        snprintf(tmpdir, sizeof(tmpdir), "%s/sbx-egicpt-XXXXXX", base && *base ? base : "/tmp");
        cr_assert_not_null(mkdtemp(tmpdir));
        snprintf(cmd, sizeof(cmd),
                 "cd %s && { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
                 "-subj /CN=upca -keyout upca.key -out upca.pem && "
                 "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=reg.test "
                 "-keyout up.key -out up.csr && printf 'subjectAltName=DNS:reg.test\\n' > ext && "
                 "openssl x509 -req -in up.csr -CA upca.pem -CAkey upca.key -CAcreateserial -days 1 -extfile ext "
                 "-out up.pem && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
                 "-subj /CN=sca -addext basicConstraints=critical,CA:TRUE -keyout sca.key -out sca.pem; }"
                 " >/dev/null 2>&1",
                 tmpdir);
        cr_assert_eq(system(cmd), 0, "openssl");
        snprintf(path, sizeof(path), "%s/upca.pem", tmpdir);
        setenv("SSL_CERT_FILE", path, 1); /* the proxy trusts the registry as it would a system CA */

        reg_ctx = SSL_CTX_new(TLS_server_method());
        snprintf(path, sizeof(path), "%s/up.pem", tmpdir);
        cr_assert_eq(SSL_CTX_use_certificate_chain_file(reg_ctx, path), 1);
        snprintf(path, sizeof(path), "%s/up.key", tmpdir);
        cr_assert_eq(SSL_CTX_use_PrivateKey_file(reg_ctx, path, SSL_FILETYPE_PEM), 1);
        cli_ctx = SSL_CTX_new(TLS_client_method());
        snprintf(path, sizeof(path), "%s/sca.pem", tmpdir);
        cr_assert_eq(SSL_CTX_load_verify_locations(cli_ctx, path, NULL), 1);
        SSL_CTX_set_verify(cli_ctx, SSL_VERIFY_PEER, NULL);
        reg_lfd = listen_loopback(&reg_port);
        cr_assert_eq(pthread_create(&reg_thread, NULL, reg_serve, NULL), 0);

        /* the policy: bigpkg 2.0 refused, so its index page is filtered (a rule with a range) */
        snprintf(path, sizeof(path), "%s/packages.json", tmpdir);
        f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f,
                "{\"default\": {\"pypi\": {\"index\": \"https://reg.test:%d/simple/\", \"deny\": [\"bigpkg >=2\"]}}}\n",
                reg_port);
        fclose(f);

        snprintf(cmd, sizeof(cmd), "%s/test.db", tmpdir);
        cr_assert_eq(store_open(cmd, &st, &err), 0, "%s", err.msg);
        config_defaults(&cfg);
        snprintf(opt, sizeof(opt), "reg.test:%d", reg_port);
        set(&cfg, "egress.allow", opt);
        set(&cfg, "egress.resolve", "reg.test=127.0.0.1");
        set(&cfg, "egress.allow_private", "127.0.0.1/32");
        set(&cfg, "egress.packages_file", path);
        cr_assert_eq(egress_new(&cfg, st, &eg, &err), 0, "%s", err.msg);
        egress_set_secrets_ops(eg, &(struct egress_secrets_ops){.attached = sec_attached, .ca = sec_ca}, NULL);
        egress_set_filter_hook(eg, hook, NULL);
        for (int i = 0; i < 2; i++) {
                front_lfd[i] = listen_loopback(&front_port[i]);
                cr_assert_eq(pthread_create(&front_thread[i], NULL, front, (void *)(intptr_t)i), 0);
        }
}

static void teardown(void)
{
        hook_open(); /* a worker still in the hook (a failed case) goes on */
        egress_free(eg);
        eg = NULL;
        for (int i = 0; i < 2; i++) {
                shutdown(front_lfd[i], SHUT_RDWR);
                pthread_join(front_thread[i], NULL);
                close(front_lfd[i]);
        }
        shutdown(reg_lfd, SHUT_RDWR);
        pthread_join(reg_thread, NULL);
        close(reg_lfd);
        SSL_CTX_free(reg_ctx);
        SSL_CTX_free(cli_ctx);
        store_close(st);
        st = NULL;
        {
                char cmd[400];
                snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
                (void)system(cmd);
        }
}

TestSuite(egress_icpt, .init = setup, .fini = teardown, .timeout = 120);

/* ---- the client ---- */

struct conn {
        int fd;
        SSL *ssl;
};

/* CONNECT reg.test through front i, then TLS trusting the session's CA. */
static struct conn conn_open(int i)
{
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)front_port[i]),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        struct timeval tv = {WAIT_MS / 1000, 0};
        struct conn c;
        char req[128], head[256] = "";
        size_t n = 0;

        c.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert_geq(c.fd, 0);
        setsockopt(c.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)); /* every read has a deadline */
        cr_assert_eq(connect(c.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        snprintf(req, sizeof(req), "CONNECT reg.test:%d HTTP/1.1\r\nHost: reg.test:%d\r\n\r\n", reg_port, reg_port);
        cr_assert_eq(write(c.fd, req, strlen(req)), (ssize_t)strlen(req));
        while (n < sizeof(head) - 1 && !strstr(head, "\r\n\r\n")) {
                cr_assert_eq(read(c.fd, head + n, 1), 1, "the CONNECT's answer");
                head[++n] = '\0';
        }
        cr_assert(strncmp(head, "HTTP/1.1 200", 12) == 0, "%s", head);
        c.ssl = SSL_new(cli_ctx);
        SSL_set_fd(c.ssl, c.fd);
        SSL_set_tlsext_host_name(c.ssl, "reg.test");
        SSL_set1_host(c.ssl, "reg.test");
        cr_assert_eq(SSL_connect(c.ssl), 1, "TLS with the session's CA");
        return c;
}

static void conn_close(struct conn *c)
{
        SSL_free(c->ssl);
        close(c->fd);
}

static void send_req(struct conn *c, const char *method, const char *path)
{
        char req[512];
        snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: reg.test:%d\r\nUser-Agent: test\r\n\r\n", method, path,
                 reg_port);
        cr_assert_eq(SSL_write(c->ssl, req, (int)strlen(req)), (int)strlen(req));
}

/* One byte at a time: slow, but the response's end is exactly where it is. */
static int get_byte(struct conn *c)
{
        unsigned char b;
        return SSL_read(c->ssl, &b, 1) == 1 ? b : -1;
}

static void get_line(struct conn *c, char *buf, size_t cap)
{
        size_t n = 0;
        int b;
        while ((b = get_byte(c)) >= 0 && n < cap - 1) {
                buf[n++] = (char)b;
                if (b == '\n')
                        break;
        }
        buf[n] = '\0';
}

/* A response: its status, and its body (malloc'd) unless head_only. */
static int get_resp(struct conn *c, bool head_only, char **ret_body, size_t *ret_len)
{
        char line[1024];
        int status = 0;
        long long clen = -1;
        bool chunked = false;
        size_t n = 0, cap = 1 << 16;
        char *body = malloc(cap);

        cr_assert_not_null(body);
        get_line(c, line, sizeof(line));
        cr_assert_eq(sscanf(line, "HTTP/1.1 %d", &status), 1, "a status line: '%s'", line);
        for (;;) {
                get_line(c, line, sizeof(line));
                cr_assert_neq(line[0], '\0', "the head ends");
                if (strcmp(line, "\r\n") == 0)
                        break;
                if (strncasecmp(line, "Content-Length:", 15) == 0)
                        clen = atoll(line + 15);
                if (strncasecmp(line, "Transfer-Encoding: chunked", 26) == 0)
                        chunked = true;
        }
        while (!head_only) {
                long long want = clen;
                if (chunked) {
                        get_line(c, line, sizeof(line));
                        want = strtoll(line, NULL, 16);
                        if (want == 0) {
                                get_line(c, line, sizeof(line));
                                break;
                        }
                }
                cr_assert_geq(want, 0, "a body's length");
                for (long long i = 0; i < want; i++) {
                        int b = get_byte(c);
                        cr_assert_geq(b, 0, "the body is cut");
                        if (n + 1 >= cap)
                                cr_assert_not_null(body = realloc(body, cap *= 2));
                        body[n++] = (char)b;
                }
                if (!chunked)
                        break;
                get_line(c, line, sizeof(line));
        }
        body[n] = '\0';
        *ret_body = body;
        *ret_len = n;
        return status;
}

static size_t rows_of(const char *user, const char *session, struct store_egress_entry **ret)
{
        size_t n = 0;
        cr_assert_eq(store_egress_log_list(st, user, session, 500, ret, &n), 0);
        return n;
}

/* Poll the store until session has want rows: the last is written when the connection ends, on the loop. */
static size_t rows_wait(const char *user, const char *session, size_t want, struct store_egress_entry **ret)
{
        struct timespec ts = {0, 10 * 1000 * 1000};
        size_t n = 0;

        for (int i = 0; i < WAIT_MS / 10; i++) {
                n = rows_of(user, session, ret);
                if (n >= want)
                        return n;
                free(*ret);
                *ret = NULL;
                nanosleep(&ts, NULL);
        }
        return rows_of(user, session, ret);
}

/* Poll the store until session has a row with reason. */
static bool reason_wait(const char *user, const char *session, const char *reason)
{
        struct timespec ts = {0, 10 * 1000 * 1000};

        for (int i = 0; i < WAIT_MS / 10; i++) {
                struct store_egress_entry *r = NULL;
                size_t n = rows_of(user, session, &r);
                bool seen = false;
                for (size_t k = 0; k < n && !seen; k++)
                        seen = strcmp(r[k].reason, reason) == 0;
                free(r);
                if (seen)
                        return true;
                nanosleep(&ts, NULL);
        }
        return false;
}

Test(egress_icpt, each_request_on_a_kept_alive_connection_has_its_own_row)
{
        struct conn c = conn_open(0);
        struct store_egress_entry *r = NULL;
        char *body;
        size_t len, n, gets = 0, heads = 0;

        send_req(&c, "GET", "/simple/one/");
        cr_assert_eq(get_resp(&c, false, &body, &len), 200);
        cr_assert_str_eq(body, "/simple/one/");
        free(body);
        send_req(&c, "HEAD", "/simple/two/");
        cr_assert_eq(get_resp(&c, true, &body, &len), 200);
        free(body);
        send_req(&c, "GET", "/simple/three/");
        cr_assert_eq(get_resp(&c, false, &body, &len), 200);
        cr_assert_str_eq(body, "/simple/three/");
        free(body);
        /* three rows once each response is out; the close between two requests adds none */
        n = rows_wait("alice", "s1", 3, &r);
        cr_assert_eq(n, 3, "one row a request, got %zu", n);
        free(r);
        conn_close(&c);
        /* then another connection, which takes several turns of the loop (CONNECT, two handshakes): the
         * first one's close, sent before it, is handled by then, and a row of its own would make five */
        c = conn_open(0);
        send_req(&c, "GET", "/simple/four/");
        cr_assert_eq(get_resp(&c, false, &body, &len), 200);
        free(body);
        conn_close(&c);
        n = rows_wait("alice", "s1", 4, &r);
        cr_assert_eq(n, 4, "the first connection's close wrote no row of its own: %zu rows", n);
        for (size_t i = 0; i < n; i++) {
                cr_assert_str_eq(r[i].host, "reg.test");
                cr_assert_str_eq(r[i].decision, "allowed");
                cr_assert_str_eq(r[i].reason, "intercepted");
                cr_assert_gt(r[i].bytes_up, 0, "row %zu: its own request's bytes", i);
                /* the response's head and body as the upstream sent them: this request's alone */
                cr_assert(r[i].bytes_down > 0 && r[i].bytes_down < 4096, "row %zu: %lld bytes down", i,
                          (long long)r[i].bytes_down);
                if (strcmp(r[i].method, "HEAD") == 0)
                        heads++;
                else if (strcmp(r[i].method, "GET") == 0)
                        gets++;
        }
        cr_assert_eq(gets, 3);
        cr_assert_eq(heads, 1);
        free(r);
}

Test(egress_icpt, a_page_being_filtered_holds_no_other_connection)
{
        struct conn held = conn_open(0), other;
        char *body;
        size_t len;

        /* alice's index page is held whole and goes to the filter's worker, which waits in the hook */
        send_req(&held, "GET", "/simple/bigpkg/");
        cr_assert(hook_wait(&hk_entered, 1), "the page reached the filter");
        /* meanwhile the loop serves another tenant's new connection, and another request of alice's */
        other = conn_open(1);
        send_req(&other, "GET", "/simple/small/");
        cr_assert_eq(get_resp(&other, false, &body, &len), 200);
        cr_assert_str_eq(body, "/simple/small/");
        free(body);
        conn_close(&other);
        other = conn_open(0);
        send_req(&other, "GET", "/simple/other/");
        cr_assert_eq(get_resp(&other, false, &body, &len), 200);
        free(body);
        conn_close(&other);
        pthread_mutex_lock(&hk_lock);
        cr_assert_eq(hk_left, 0, "served while the page was still being filtered");
        pthread_mutex_unlock(&hk_lock);

        hook_open();
        cr_assert_eq(get_resp(&held, false, &body, &len), 200);
        cr_assert(strstr(body,
                         "<a data-yanked=\"blocked by sandboxd package policy: bigpkg 2.0\" "
                         "href=\"/p/bigpkg-2.0.tar.gz\">"),
                  "the refused version is yanked");
        cr_assert_null(strstr(body, "data-yanked=\"blocked by sandboxd package policy: bigpkg 1.0"));
        cr_assert(strstr(body, "bigpkg-1.0.2999.tar.gz") && strstr(body, "</html>\n"), "the page is whole");
        free(body);
        /* the connection is still kept alive after a filtered page */
        send_req(&held, "GET", "/simple/after/");
        cr_assert_eq(get_resp(&held, false, &body, &len), 200);
        cr_assert_str_eq(body, "/simple/after/");
        free(body);
        conn_close(&held);
}

Test(egress_icpt, the_filter_pool_is_capped_per_user_and_a_client_may_leave)
{
        struct conn a1 = conn_open(0), a2 = conn_open(0), a3, b1;
        struct linger lg = {1, 0};
        char *body;
        size_t len;

        /* two of alice's pages fill her share (both workers wait in the hook) */
        send_req(&a1, "GET", "/simple/bigpkg/");
        send_req(&a2, "GET", "/simple/bigpkg/");
        cr_assert(hook_wait(&hk_entered, 2), "both pages reached the filter");
        /* a third is refused, not queued */
        a3 = conn_open(0);
        send_req(&a3, "GET", "/simple/bigpkg/");
        cr_assert_eq(get_resp(&a3, false, &body, &len), 503);
        cr_assert(strstr(body, "filter_busy"), "%s", body);
        free(body);
        conn_close(&a3);
        /* bob's page is queued behind them: it is answered once a worker is free */
        b1 = conn_open(1);
        send_req(&b1, "GET", "/simple/bigpkg/");
        /* a1's client goes (a reset) while its page is in the pool: the tunnel goes, its job is dropped */
        setsockopt(a1.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        conn_close(&a1);
        cr_assert(reason_wait("alice", "s1", "filter_busy"), "the refusal is audited");
        hook_open();
        cr_assert_eq(get_resp(&a2, false, &body, &len), 200);
        cr_assert(strstr(body, "bigpkg 2.0"));
        free(body);
        cr_assert_eq(get_resp(&b1, false, &body, &len), 200);
        cr_assert(strstr(body, "bigpkg 2.0"));
        free(body);
        conn_close(&a2);
        conn_close(&b1);
        cr_assert(hook_wait(&hk_left, 3), "three pages were filtered, a1's or not");
        /* every tunnel went, a1's too */
        for (int i = 0; i < WAIT_MS / 10; i++) {
                struct egress_stats es;
                struct timespec ts = {0, 10 * 1000 * 1000};
                egress_stats(eg, &es);
                if (es.open == 0)
                        break;
                nanosleep(&ts, NULL);
        }
        {
                struct egress_stats es;
                egress_stats(eg, &es);
                cr_assert_eq(es.open, 0, "%d tunnels left open", es.open);
        }
}
