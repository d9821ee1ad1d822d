/* Host-side tests of the egress proxy (egress.h), no container: the test
 * hands one end of a socketpair (or of a TCP connection, for curl and
 * python) to egress_accept, as the gateway does with a runner's connection.
 * Upstreams are test servers on 127.0.0.1, reached by name through
 * egress.resolve and allowed through egress.allow_private=127.0.0.1/32:
 * an HTTP server that records what it was sent, a TCP echo server for
 * CONNECT, and (curl) an HTTPS server with a certificate made here.
 * Waits have deadlines; nothing asserts on time.
 *
 * Over 800 lines: one suite, because its cases share the upstream servers
 * and the socketpair harness; each case is short.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandboxd/config.h"
#include "sandboxd/egress.h"
#include "sandboxd/egress_rules.h"
#include "sandboxd/runner_proto.h"
#include "sandboxd/store.h"
#include "sandboxd/store_egress.h"

#define USER "alice"
#define SESS "s1"

static char tmpdir[256];
static struct store *st;
static struct egress *eg;
static struct sbx_config cfg;

/* ---- upstream servers ---- */

struct server {
        int fd;
        int port;
        bool echo;
        pthread_t thread;
};

static struct server http_up, echo_up;
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static char seen[8192]; /* the last request head (and body) the HTTP upstream read */

static int listen_loopback(int *ret_port)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(sa);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

        cr_assert_geq(fd, 0);
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        cr_assert_eq(listen(fd, 1024), 0);
        cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
        *ret_port = ntohs(sa.sin_port);
        return fd;
}

static void *serve_conn(void *arg)
{
        intptr_t packed = (intptr_t)arg;
        int fd = (int)(packed >> 1);
        bool echo = packed & 1;
        char buf[8192];
        size_t n = 0;
        ssize_t r;

        if (echo) {
                while ((r = read(fd, buf, sizeof(buf))) > 0)
                        if (write(fd, buf, (size_t)r) != r)
                                break;
                close(fd);
                return NULL;
        }
        /* the head, and the body of a POST (Content-Length) */
        while (n < sizeof(buf) - 1 && (r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0) {
                char *end, *cl;
                n += (size_t)r;
                buf[n] = '\0';
                end = strstr(buf, "\r\n\r\n");
                if (!end)
                        continue;
                cl = strcasestr(buf, "Content-Length: ");
                if (!cl || cl > end || n >= (size_t)(end + 4 - buf) + strtoul(cl + 16, NULL, 10))
                        break;
        }
        pthread_mutex_lock(&seen_lock);
        memcpy(seen, buf, n);
        seen[n] = '\0';
        pthread_mutex_unlock(&seen_lock);
        dprintf(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello");
        close(fd);
        return NULL;
}

static void *serve(void *arg)
{
        struct server *s = arg;
        for (;;) {
                int c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
                pthread_t t;
                if (c < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        return NULL; /* the listener was shut down */
                }
                if (pthread_create(&t, NULL, serve_conn, (void *)(((intptr_t)c << 1) | s->echo)) != 0)
                        close(c);
                else
                        pthread_detach(t);
        }
}

static void server_start(struct server *s, bool echo)
{
        s->echo = echo;
        s->fd = listen_loopback(&s->port);
        cr_assert_eq(pthread_create(&s->thread, NULL, serve, s), 0);
}

static void server_stop(struct server *s)
{
        if (s->fd <= 0)
                return;
        shutdown(s->fd, SHUT_RDWR);
        pthread_join(s->thread, NULL);
        close(s->fd);
        s->fd = 0;
}

/* ---- fixture ---- */

static void set(const char *k, const char *v)
{
        struct sbx_error err = {0};
        cr_assert_eq(config_set(&cfg, k, v, &err), 0, "%s: %s", k, err.msg);
}

static void rm_tmpdir(void)
{
        DIR *d = opendir(tmpdir);
        struct dirent *de;
        if (d) {
                while ((de = readdir(d)))
                        if (de->d_name[0] != '.')
                                unlinkat(dirfd(d), de->d_name, 0);
                closedir(d);
        }
        rmdir(tmpdir);
}

static void setup(void)
{
        const char *base = getenv("TMPDIR");
        char db[300];
        struct sbx_error err = {0};

        signal(SIGPIPE, SIG_IGN);
        snprintf(tmpdir, sizeof(tmpdir), "%s/sbx-egress-XXXXXX", base && *base ? base : "/tmp");
        cr_assert_not_null(mkdtemp(tmpdir));
        snprintf(db, sizeof(db), "%s/test.db", tmpdir);
        cr_assert_eq(store_open(db, &st, &err), 0, "%s", err.msg);
        server_start(&http_up, false);
        server_start(&echo_up, true);
        config_defaults(&cfg);
        set("egress.allow", "up.test:*, echo.test:*, *.wild.test:*, private.test:*, tls.test:*");
        set("egress.resolve",
            "up.test=127.0.0.1, echo.test=127.0.0.1, a.wild.test=127.0.0.1, tls.test=127.0.0.1, "
            "other.test=127.0.0.1, private.test=10.255.255.1");
        set("egress.allow_private", "127.0.0.1/32");
}

static void start(void)
{
        struct sbx_error err = {0};
        cr_assert_eq(egress_new(&cfg, st, &eg, &err), 0, "%s", err.msg);
}

static void teardown(void)
{
        egress_free(eg);
        eg = NULL;
        server_stop(&http_up);
        server_stop(&echo_up);
        store_close(st);
        st = NULL;
        rm_tmpdir();
}

TestSuite(egress, .init = setup, .fini = teardown, .timeout = 120);

/* ---- client helpers ---- */

static int proxy_conn_as(const char *session)
{
        int sv[2];
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        egress_accept(eg, USER, session, sv[1]);
        return sv[0];
}

static int proxy_conn(void)
{
        return proxy_conn_as(SESS);
}

static void send_all(int fd, const char *s, size_t n)
{
        while (n > 0) {
                ssize_t w = write(fd, s, n);
                cr_assert_gt(w, 0, "write: %s", strerror(errno));
                s += w;
                n -= (size_t)w;
        }
}

static void send_str(int fd, const char *s)
{
        send_all(fd, s, strlen(s));
}

/* Read until EOF or until `until` appears (NULL: EOF), within deadline_ms. */
static size_t recv_until(int fd, char *buf, size_t cap, const char *until, int deadline_ms)
{
        size_t n = 0;
        buf[0] = '\0';
        while (n < cap - 1) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                ssize_t r;
                if (poll(&p, 1, deadline_ms) <= 0)
                        break;
                r = read(fd, buf + n, cap - 1 - n);
                if (r <= 0)
                        break;
                n += (size_t)r;
                buf[n] = '\0';
                if (until && strstr(buf, until))
                        break;
        }
        return n;
}

/* Is the connection closed by the proxy (EOF or reset) within deadline_ms? */
static bool closed_within(int fd, int deadline_ms)
{
        char b[4096];
        for (;;) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                ssize_t r;
                if (poll(&p, 1, deadline_ms) <= 0)
                        return false;
                r = read(fd, b, sizeof(b));
                if (r <= 0)
                        return true;
        }
}

/* The session's newest egress rows, once at least `want` exist (5 s at most). */
static size_t rows(struct store_egress_entry **ret, size_t want)
{
        size_t n = 0;
        for (int i = 0; i < 500; i++) {
                *ret = NULL;
                cr_assert_eq(store_egress_log_list(st, USER, SESS, 1000, ret, &n), 0);
                if (n >= want)
                        return n;
                free(*ret);
                usleep(10000);
        }
        *ret = NULL;
        return 0;
}

/* ---- tests ---- */

Test(egress, http_request_is_rewritten_and_recorded)
{
        char req[512], buf[4096];
        struct store_egress_entry *r;
        int fd;

        start();
        fd = proxy_conn();
        snprintf(req, sizeof(req),
                 "GET http://up.test:%d/path?q=1 HTTP/1.1\r\nHost: attacker.example\r\nProxy-Connection: keep-alive\r\n"
                 "Connection: keep-alive, X-Drop\r\nX-Drop: 1\r\nX-Keep: yes\r\nProxy-Authorization: Basic Zm9v\r\n\r\n",
                 http_up.port);
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0, "got: %s", buf);
        cr_assert(strstr(buf, "\r\n\r\nhello"));
        pthread_mutex_lock(&seen_lock);
        cr_assert(strncmp(seen, "GET /path?q=1 HTTP/1.1\r\n", 24) == 0, "origin-form expected: %s", seen);
        snprintf(req, sizeof(req), "Host: up.test:%d\r\n", http_up.port);
        cr_assert(strstr(seen, req), "Host comes from the target: %s", seen);
        cr_assert_null(strstr(seen, "attacker.example"));
        cr_assert_null(strcasestr(seen, "Proxy-"), "hop-by-hop headers are dropped: %s", seen);
        cr_assert_null(strstr(seen, "X-Drop"), "headers named by Connection are dropped");
        cr_assert(strstr(seen, "X-Keep: yes\r\n"));
        cr_assert(strstr(seen, "Connection: close\r\n"));
        pthread_mutex_unlock(&seen_lock);

        cr_assert_eq(rows(&r, 1), 1);
        cr_assert_str_eq(r[0].decision, "allowed");
        cr_assert_str_eq(r[0].host, "up.test");
        cr_assert_eq(r[0].port, http_up.port);
        cr_assert_str_eq(r[0].method, "GET");
        cr_assert_str_eq(r[0].address, "127.0.0.1");
        cr_assert_gt(r[0].bytes_up, 0);
        cr_assert_geq(r[0].bytes_down, (int64_t)strlen(buf));
        free(r);
}

Test(egress, post_body_goes_through_and_nothing_after_it)
{
        char req[512], buf[4096];
        int fd;

        start();
        fd = proxy_conn();
        snprintf(req, sizeof(req),
                 "POST http://up.test:%d/submit HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello worldGET /smuggled "
                 "HTTP/1.1\r\n\r\n",
                 http_up.port);
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0, "got: %s", buf);
        pthread_mutex_lock(&seen_lock);
        cr_assert(strstr(seen, "\r\n\r\nhello world"), "the body arrives: %s", seen);
        cr_assert_null(strstr(seen, "smuggled"), "bytes after the request are not forwarded");
        pthread_mutex_unlock(&seen_lock);
}

Test(egress, connect_tunnel_relays_both_ways)
{
        char req[256], buf[4096], big[200000];
        struct store_egress_entry *r;
        size_t got = 0;
        int fd;

        start();
        fd = proxy_conn();
        snprintf(req, sizeof(req), "CONNECT echo.test:%d HTTP/1.1\r\nHost: echo.test:%d\r\n\r\n", echo_up.port,
                 echo_up.port);
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), "\r\n\r\n", 10000);
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0, "got: %s", buf);
        /* more than one relay buffer, both ways, through the echo */
        memset(big, 'x', sizeof(big));
        for (size_t off = 0; off < sizeof(big);) {
                struct pollfd p[1] = {{.fd = fd, .events = POLLIN | POLLOUT}};
                cr_assert_gt(poll(p, 1, 10000), 0);
                if (p[0].revents & POLLIN) {
                        ssize_t n = read(fd, buf, sizeof(buf));
                        cr_assert_gt(n, 0);
                        got += (size_t)n;
                }
                if (p[0].revents & POLLOUT) {
                        ssize_t w = write(fd, big + off, sizeof(big) - off > 8192 ? 8192 : sizeof(big) - off);
                        cr_assert_gt(w, 0);
                        off += (size_t)w;
                }
        }
        shutdown(fd, SHUT_WR);
        while (got < sizeof(big)) {
                size_t n = recv_until(fd, buf, sizeof(buf), NULL, 10000);
                if (n == 0)
                        break;
                got += n;
        }
        cr_assert_eq(got, sizeof(big), "every byte came back");
        cr_assert(closed_within(fd, 10000), "the half-close travels and the tunnel ends");
        close(fd);
        cr_assert_eq(rows(&r, 1), 1);
        cr_assert_str_eq(r[0].method, "CONNECT");
        cr_assert_str_eq(r[0].decision, "allowed");
        cr_assert_str_eq(r[0].reason, "closed");
        cr_assert_geq(r[0].bytes_up, (int64_t)sizeof(big));
        cr_assert_geq(r[0].bytes_down, (int64_t)sizeof(big));
        free(r);
}

Test(egress, name_not_on_the_list_gets_403_and_a_row)
{
        char buf[4096];
        struct store_egress_entry *r;
        int fd;

        start();
        fd = proxy_conn();
        send_str(fd, "CONNECT other.test:443 HTTP/1.1\r\n\r\n");
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 403", 12) == 0, "got: %s", buf);
        cr_assert(strstr(buf, "not_allowed"));
        cr_assert_eq(rows(&r, 1), 1);
        cr_assert_str_eq(r[0].decision, "blocked");
        cr_assert_str_eq(r[0].reason, "not_allowed");
        cr_assert_str_eq(r[0].host, "other.test");
        cr_assert_eq(r[0].port, 443);
        free(r);
        /* the admin view: egress.log's JSON, newest first */
        int rc = 0;
        cJSON *a = egress_rules_log_json(st, USER, SESS, 10, &rc);
        cr_assert_not_null(a);
        cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 0), "reason")->valuestring, "not_allowed");
        cJSON_Delete(a);
        struct egress_stats es;
        egress_stats(eg, &es);
        cr_assert_eq(es.blocked, 1);
}

Test(egress, session_and_user_additions_widen_the_list)
{
        char buf[4096], req[256];
        int fd;

        start();
        snprintf(req, sizeof(req), "GET http://other.test:%d/ HTTP/1.1\r\n\r\n", http_up.port);
        cr_assert_eq(egress_rules_change(st, &cfg, USER, SESS, "other.test:*", false, "test", NULL), 0);
        fd = proxy_conn();
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0, "a session addition allows: %s", buf);
        fd = proxy_conn_as("s2");
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 403", 12) == 0, "not for another session: %s", buf);
        cr_assert_eq(egress_rules_change(st, &cfg, USER, NULL, "other.test:*", false, "test", NULL), 0);
        fd = proxy_conn_as("s2");
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0, "a user addition allows every session: %s", buf);
        cr_assert_lt(egress_rules_change(st, &cfg, USER, NULL, "*", false, "test", NULL), 0, "no allow-all");
}

Test(egress, allowed_name_resolving_to_loopback_is_refused_without_allow_private)
{
        char buf[4096], req[256];
        struct store_egress_entry *r;
        int fd;

        set("egress.allow_private", "");
        start();
        fd = proxy_conn();
        snprintf(req, sizeof(req), "GET http://up.test:%d/ HTTP/1.1\r\n\r\n", http_up.port);
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 403", 12) == 0, "no SSRF: %s", buf);
        cr_assert(strstr(buf, "loopback"), "%s", buf);
        /* a private range, and address literals, the same */
        const char *targets[] = {"CONNECT private.test:443", "CONNECT 127.0.0.1:80", "CONNECT [::1]:80",
                                 "CONNECT [::ffff:127.0.0.1]:80", "CONNECT 169.254.169.254:80"};
        for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
                fd = proxy_conn();
                send_str(fd, targets[i]);
                send_str(fd, " HTTP/1.1\r\n\r\n");
                recv_until(fd, buf, sizeof(buf), NULL, 10000);
                close(fd);
                cr_assert(strncmp(buf, "HTTP/1.1 403", 12) == 0, "%s: %s", targets[i], buf);
        }
        cr_assert_eq(rows(&r, 6), 6);
        cr_assert_str_eq(r[5].reason, "private_address");
        free(r);
}

Test(egress, caps_per_session)
{
        char buf[4096], req[256];
        int fds[2], fd;

        cfg.egress_max_tunnels_per_session = 2; /* constants in the daemon; the fields stay */
        cfg.egress_max_tunnels_per_user = 3;
        cfg.egress_conns_per_minute = 3;
        start();
        snprintf(req, sizeof(req), "CONNECT echo.test:%d HTTP/1.1\r\n\r\n", echo_up.port);
        for (int i = 0; i < 2; i++) {
                fds[i] = proxy_conn();
                send_str(fds[i], req);
                recv_until(fds[i], buf, sizeof(buf), "\r\n\r\n", 10000);
                cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0, "tunnel %d: %s", i, buf);
        }
        fd = proxy_conn();
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 429", 12) == 0 && strstr(buf, "cap_tunnels"), "third: %s", buf);
        fd = proxy_conn_as("s2");
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), "\r\n\r\n", 10000);
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0, "another session is not affected: %s", buf);
        {
                /* the user's cap (3): a third session's tunnel is one too many */
                int fd3 = proxy_conn_as("s3");
                recv_until(fd3, buf, sizeof(buf), NULL, 10000);
                close(fd3);
                cr_assert(strncmp(buf, "HTTP/1.1 429", 12) == 0 && strstr(buf, "cap_user"), "s3: %s", buf);
        }
        close(fd);
        close(fds[0]);
        close(fds[1]);
        /* the two tunnels are gone (their rows say so), then the rate: 2 of 3 are used */
        struct store_egress_entry *r;
        cr_assert_geq(rows(&r, 3), 3);
        free(r);
        fd = proxy_conn();
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), "\r\n\r\n", 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0, "third of the minute: %s", buf);
        fd = proxy_conn();
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 429", 12) == 0 && strstr(buf, "cap_rate"), "fourth: %s", buf);
}

Test(egress, byte_cap_ends_the_tunnel)
{
        char buf[65536], req[256];
        struct store_egress_entry *r;
        int fd;

        set("egress.max_bytes_per_session", "64k");
        start();
        fd = proxy_conn();
        snprintf(req, sizeof(req), "CONNECT echo.test:%d HTTP/1.1\r\n\r\n", echo_up.port);
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), "\r\n\r\n", 10000);
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0);
        memset(buf, 'y', sizeof(buf));
        for (int i = 0; i < 8; i++) {
                /* the proxy closes; writes may then fail */
                if (write(fd, buf, sizeof(buf)) < 0)
                        break;
                (void)recv_until(fd, buf, sizeof(buf), NULL, 200);
        }
        cr_assert(closed_within(fd, 10000));
        close(fd);
        cr_assert_geq(rows(&r, 1), 1);
        cr_assert_str_eq(r[0].reason, "cap_bytes");
        free(r);
        fd = proxy_conn();
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 429", 12) == 0, "the session's bytes are used up: %.40s", buf);
}

Test(egress, close_session_closes_open_tunnels_and_refuses_new_ones)
{
        char buf[4096], req[256];
        struct store_egress_entry *r;
        int fd, other;

        start();
        snprintf(req, sizeof(req), "CONNECT echo.test:%d HTTP/1.1\r\n\r\n", echo_up.port);
        fd = proxy_conn();
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), "\r\n\r\n", 10000);
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0);
        other = proxy_conn_as("s2");
        send_str(other, req);
        recv_until(other, buf, sizeof(buf), "\r\n\r\n", 10000);
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0);

        egress_close_session(eg, USER, SESS);
        /* closed before egress_close_session returned: the EOF is already there */
        {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                cr_assert_eq(poll(&p, 1, 0), 1, "the tunnel is closed when close_session returns");
        }
        cr_assert(closed_within(fd, 1000));
        close(fd);
        send_str(other, "ping");
        recv_until(other, buf, sizeof(buf), "ping", 10000);
        cr_assert_str_eq(buf, "ping", "another session's tunnel lives on");
        close(other);

        fd = proxy_conn();
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 403", 12) == 0, "a new request fails at once: %s", buf);
        cr_assert_geq(rows(&r, 2), 2);
        cr_assert_str_eq(r[0].reason, "private");
        cr_assert_str_eq(r[1].reason, "ratchet");
        cr_assert_str_eq(r[1].decision, "allowed");
        free(r);
}

Test(egress, private_mark_in_the_store_refuses_after_a_restart)
{
        char buf[4096];
        int fd;

        cr_assert_eq(store_private_add(st, USER, SESS, "hr", NULL, 1, NULL), 0);
        start(); /* a fresh proxy: only the store knows */
        fd = proxy_conn();
        /* refused at once, before the request is read: the write may find the
         * connection closed already (EPIPE), the answer is there all the same */
        (void)send(fd, "CONNECT echo.test:1 HTTP/1.1\r\n\r\n", 32, MSG_NOSIGNAL);
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 403", 12) == 0 && strstr(buf, "private"), "%s", buf);
}

Test(egress, malformed_requests_get_clear_errors)
{
        static const struct {
                const char *req;
                const char *status;
        } cases[] = {
                {"\x01\x02garbage\x7f\r\n\r\n", "HTTP/1.1 400"},
                {"GET /relative HTTP/1.1\r\nHost: up.test\r\n\r\n", "HTTP/1.1 400"},
                {"GET https://up.test/ HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},
                {"CONNECT up.test HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},
                {"CONNECT user@up.test:80 HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},
                {"CONNECT bad_host!:80 HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},
                {"GET http://up.test:0/ HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},
                {"GET http://up.test/ HTTP/1.1\r\nBad Header\r\n\r\n", "HTTP/1.1 400"},
        };
        char buf[4096];

        start();
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                int fd = proxy_conn();
                send_str(fd, cases[i].req);
                recv_until(fd, buf, sizeof(buf), NULL, 10000);
                close(fd);
                cr_assert(strncmp(buf, cases[i].status, 12) == 0, "case %zu: got '%.60s'", i, buf);
        }
}

Test(egress, huge_head_is_refused_with_431)
{
        char buf[4096], line[1024];
        int fd;

        start();
        fd = proxy_conn();
        send_str(fd, "GET http://up.test/ HTTP/1.1\r\n");
        memset(line, 'a', sizeof(line));
        memcpy(line, "X-Pad: ", 7);
        line[sizeof(line) - 2] = '\r';
        line[sizeof(line) - 1] = '\n';
        /* 64 KiB of headers against the 16 KiB cap; the proxy stops reading once over */
        for (int i = 0; i < 64; i++)
                if (write(fd, line, sizeof(line)) < 0)
                        break;
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 431", 12) == 0, "got '%.60s'", buf);
        struct egress_stats es;
        egress_stats(eg, &es);
        cr_assert_eq(es.open, 0, "nothing is left open");
}

Test(egress, slow_head_times_out_with_408)
{
        char buf[4096];
        int fd;

        cfg.egress_header_timeout_ms = 300;
        start();
        fd = proxy_conn();
        send_str(fd, "GET http://up.test/ HTTP/1.1\r\nX-Slow: ");
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 408", 12) == 0, "got '%.60s'", buf);
}

Test(egress, blocked_rows_are_rate_limited_with_a_count)
{
        char buf[1024];
        struct store_egress_entry *r;
        size_t n;
        struct egress_stats es;

        start();
        for (int i = 0; i < 80; i++) {
                int fd = proxy_conn();
                send_str(fd, "CONNECT nope.test:443 HTTP/1.1\r\n\r\n");
                recv_until(fd, buf, sizeof(buf), NULL, 10000);
                close(fd);
                cr_assert(strncmp(buf, "HTTP/1.1 403", 12) == 0);
        }
        egress_stats(eg, &es);
        cr_assert_eq(es.blocked, 80, "every decision is counted");
        n = rows(&r, 60);
        cr_assert_eq(n, 60, "at most 60 blocked rows a minute per session, got %zu", n);
        free(r);
}

/* ---- real clients: curl and python urllib through a TCP front ---- */

/* What the gateway does: every connection accepted here goes to egress_accept. */
static void *front(void *arg)
{
        int lfd = (int)(intptr_t)arg;
        for (;;) {
                int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        return NULL;
                }
                egress_accept(eg, USER, SESS, c);
        }
}

static int run(const char *cmd, char *out, size_t cap)
{
        FILE *f = popen(cmd, "r");
        size_t n;
        cr_assert_not_null(f);
        n = fread(out, 1, cap - 1, f);
        out[n] = '\0';
        return pclose(f);
}

Test(egress, curl_and_python_reach_http_and_https_upstreams)
{
        static const char server_py[] =
                "import http.server, ssl, sys\n"
                "class H(http.server.BaseHTTPRequestHandler):\n"
                "    def do_GET(self):\n"
                "        b = b'tls-hello'\n"
                "        self.send_response(200); self.send_header('Content-Length', str(len(b)))\n"
                "        self.end_headers(); self.wfile.write(b)\n"
                "    def log_message(self, *a): pass\n"
                "s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)\n"
                "c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain(sys.argv[1], sys.argv[2])\n"
                "s.socket = c.wrap_socket(s.socket, server_side=True)\n"
                "print(s.server_address[1], flush=True)\n"
                "s.serve_forever()\n";
        char cmd[2048], out[4096], path[400];
        pthread_t ft;
        int lfd, lport, tls_port = 0, rc;
        pid_t pid;
        int pipefd[2];
        FILE *f;

        start();
        lfd = listen_loopback(&lport);
        cr_assert_eq(pthread_create(&ft, NULL, front, (void *)(intptr_t)lfd), 0);

        /* a certificate for tls.test, made now */
        snprintf(cmd, sizeof(cmd),
                 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=tls.test "
                 "-addext subjectAltName=DNS:tls.test -keyout %s/key.pem -out %s/cert.pem 2>&1",
                 tmpdir, tmpdir);
        cr_assert_eq(run(cmd, out, sizeof(out)), 0, "openssl: %s", out);
        snprintf(path, sizeof(path), "%s/server.py", tmpdir);
        f = fopen(path, "w");
        cr_assert_not_null(f);
        fputs(server_py, f);
        fclose(f);
        cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                char k[400], c[400];
                dup2(pipefd[1], 1);
                snprintf(c, sizeof(c), "%s/cert.pem", tmpdir);
                snprintf(k, sizeof(k), "%s/key.pem", tmpdir);
                execlp("python3", "python3", path, c, k, (char *)NULL);
                _exit(127);
        }
        close(pipefd[1]);
        f = fdopen(pipefd[0], "r");
        cr_assert(fscanf(f, "%d", &tls_port) == 1 && tls_port > 0, "the HTTPS upstream did not start");

        /* curl: plain HTTP (absolute URI) and HTTPS (CONNECT) */
        snprintf(cmd, sizeof(cmd), "curl -sS --max-time 20 -x http://127.0.0.1:%d http://up.test:%d/x 2>&1", lport,
                 http_up.port);
        rc = run(cmd, out, sizeof(out));
        cr_assert(rc == 0 && strcmp(out, "hello") == 0, "curl http: rc %d: %s", rc, out);
        snprintf(cmd, sizeof(cmd),
                 "curl -sS --max-time 20 -x http://127.0.0.1:%d --cacert %s/cert.pem https://tls.test:%d/ 2>&1", lport,
                 tmpdir, tls_port);
        rc = run(cmd, out, sizeof(out));
        cr_assert(rc == 0 && strcmp(out, "tls-hello") == 0, "curl https: rc %d: %s", rc, out);
        snprintf(cmd, sizeof(cmd),
                 "curl -sS --max-time 20 -o /dev/null -w '%%{http_code}' -x http://127.0.0.1:%d "
                 "http://blocked.test/ 2>&1",
                 lport);
        run(cmd, out, sizeof(out));
        cr_assert_str_eq(out, "403", "curl sees the refusal");

        /* python urllib, from the environment's proxy variables */
        snprintf(cmd, sizeof(cmd),
                 "HTTP_PROXY=http://127.0.0.1:%d HTTPS_PROXY=http://127.0.0.1:%d python3 -c \""
                 "import ssl, urllib.request as u; c = ssl.create_default_context(cafile='%s/cert.pem'); "
                 "print(u.urlopen('http://up.test:%d/', timeout=20).read().decode(), "
                 "u.urlopen('https://tls.test:%d/', timeout=20, context=c).read().decode())\" 2>&1",
                 lport, lport, tmpdir, http_up.port, tls_port);
        rc = run(cmd, out, sizeof(out));
        cr_assert(rc == 0 && strcmp(out, "hello tls-hello\n") == 0, "python: rc %d: %s", rc, out);

        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        fclose(f);
        shutdown(lfd, SHUT_RDWR);
        pthread_join(ft, NULL);
        close(lfd);
}

/* egress.upstream_proxy: this proxy (A) sends allowed traffic through
 * another (B, a second instance standing in for a corporate proxy). */
static struct egress *eg_b;

static void *front_b(void *arg)
{
        int lfd = (int)(intptr_t)arg;
        for (;;) {
                int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        return NULL;
                }
                egress_accept(eg_b, "corp", "proxy", c);
        }
}

Test(egress, upstream_proxy_carries_connect_and_plain_http)
{
        struct sbx_config cfg_b = cfg;
        struct sbx_error err = {0};
        char opt[128], req[256], buf[4096];
        pthread_t ft;
        int lfd, lport, fd;

        /* B: the corporate proxy, allowing the loopback upstreams */
        cr_assert_eq(egress_new(&cfg_b, st, &eg_b, &err), 0, "%s", err.msg);
        lfd = listen_loopback(&lport);
        cr_assert_eq(pthread_create(&ft, NULL, front_b, (void *)(intptr_t)lfd), 0);
        /* A: no private addresses at all; the names go to B unresolved */
        set("egress.allow_private", "");
        snprintf(opt, sizeof(opt), "http://corp.test:%d", lport);
        set("egress.upstream_proxy", opt);
        set("egress.resolve", "corp.test=127.0.0.1");
        start();

        fd = proxy_conn();
        snprintf(req, sizeof(req), "CONNECT echo.test:%d HTTP/1.1\r\n\r\n", echo_up.port);
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), "\r\n\r\n", 10000);
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0, "through B: %s", buf);
        send_str(fd, "via-b");
        recv_until(fd, buf, sizeof(buf), "via-b", 10000);
        cr_assert_str_eq(buf, "via-b");
        close(fd);

        fd = proxy_conn();
        snprintf(req, sizeof(req), "GET http://up.test:%d/p HTTP/1.1\r\n\r\n", http_up.port);
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0 && strstr(buf, "hello"), "plain HTTP through B: %s", buf);
        pthread_mutex_lock(&seen_lock);
        cr_assert(strncmp(seen, "GET /p HTTP/1.1\r\n", 17) == 0, "B rewrote A's absolute form: %s", seen);
        pthread_mutex_unlock(&seen_lock);

        /* A still decides: a name off A's list never reaches B */
        fd = proxy_conn();
        send_str(fd, "CONNECT nope.test:443 HTTP/1.1\r\n\r\n");
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 403", 12) == 0, "%s", buf);
        /* and B's refusal comes back as a 502 */
        fd = proxy_conn();
        send_str(fd, "CONNECT a.wild.test:1 HTTP/1.1\r\n\r\n");
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        cr_assert(strncmp(buf, "HTTP/1.1 502", 12) == 0 && strstr(buf, "upstream_proxy"), "%s", buf);

        shutdown(lfd, SHUT_RDWR);
        pthread_join(ft, NULL);
        close(lfd);
        egress_free(eg_b);
}

/* ---- network policy per execution (issue 37 item 3) ---- */

/* The daemon's table, as the hook answers: execution tag 7 ("exec-7") is narrowed to
 * echo.test and runs, so an unattributed connection is refused. */
static bool narrow_hook(const char *user, const char *session, unsigned int from, uint32_t tag, struct egress_net *ret,
                        char ret_id[40], void *ud)
{
        (void)user;
        (void)session;
        (void)ud;
        if (from == RP_FROM_EXEC && tag != 7)
                return false;
        memset(ret, 0, sizeof(*ret));
        ret->set = true;
        if (from == RP_FROM_EXEC) {
                ret->n_allow = 1;
                snprintf(ret->allow[0], sizeof(ret->allow[0]), "echo.test:*");
        }
        snprintf(ret_id, 40, "exec-7");
        return true;
}

/* A connection with an RP_EGRESS_FROM header, from the runner or not; the reply's first line. */
static void from_conn(bool runner, uint16_t flags, uint32_t tag, uint16_t type, const char *host, int port, char *buf,
                      size_t cap)
{
        struct rp_hdr h = {.len = 0, .type = type, .flags = flags, .tag = tag};
        char req[256];
        int sv[2];

        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        egress_accept_from(eg, USER, SESS, sv[1], runner);
        send_all(sv[0], (const char *)&h, sizeof(h));
        snprintf(req, sizeof(req), "CONNECT %s:%d HTTP/1.1\r\n\r\n", host, port);
        send_str(sv[0], req);
        recv_until(sv[0], buf, cap, "\r\n", 10000);
        close(sv[0]);
}

Test(egress, the_runners_header_names_the_execution_whose_narrowing_applies)
{
        char buf[4096];
        struct store_egress_entry *r;
        size_t n;
        bool row = false;

        start();
        egress_set_narrow_hook(eg, narrow_hook, NULL);
        from_conn(true, RP_FROM_EXEC, 7, RP_EGRESS_FROM, "echo.test", echo_up.port, buf, sizeof(buf));
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0, "in the narrowing: %s", buf);
        from_conn(true, RP_FROM_EXEC, 7, RP_EGRESS_FROM, "up.test", http_up.port, buf, sizeof(buf));
        cr_assert(strncmp(buf, "HTTP/1.1 403", 12) == 0, "outside it: %s", buf);
        /* another execution, not narrowed; a service */
        from_conn(true, RP_FROM_EXEC, 8, RP_EGRESS_FROM, "up.test", http_up.port, buf, sizeof(buf));
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0, "%s", buf);
        from_conn(true, RP_FROM_NONE, 0, RP_EGRESS_FROM, "up.test", http_up.port, buf, sizeof(buf));
        cr_assert(strncmp(buf, "HTTP/1.1 200", 12) == 0, "%s", buf);
        /* the same header from a peer that is not the runner: unattributed, refused while tag 7 runs */
        from_conn(false, RP_FROM_NONE, 0, RP_EGRESS_FROM, "up.test", http_up.port, buf, sizeof(buf));
        cr_assert(strncmp(buf, "HTTP/1.1 403", 12) == 0, "a forged header: %s", buf);
        /* started narrowed, no longer in the table (an orphan, an adopted execution): nothing */
        from_conn(true, RP_FROM_EXEC | RP_FROM_NARROWED, 9, RP_EGRESS_FROM, "echo.test", echo_up.port, buf,
                  sizeof(buf));
        cr_assert(strncmp(buf, "HTTP/1.1 403", 12) == 0, "%s", buf);
        /* malformed: another type, an unknown kind, a tag with "no execution" */
        from_conn(true, RP_FROM_EXEC, 7, RP_FWD_DATA, "echo.test", echo_up.port, buf, sizeof(buf));
        cr_assert(strncmp(buf, "HTTP/1.1 400", 12) == 0, "%s", buf);
        from_conn(true, 9, 7, RP_EGRESS_FROM, "echo.test", echo_up.port, buf, sizeof(buf));
        cr_assert(strncmp(buf, "HTTP/1.1 400", 12) == 0, "%s", buf);
        from_conn(false, RP_FROM_NONE, 7, RP_EGRESS_FROM, "echo.test", echo_up.port, buf, sizeof(buf));
        cr_assert(strncmp(buf, "HTTP/1.1 400", 12) == 0, "%s", buf);
        n = rows(&r, 7);
        for (size_t i = 0; i < n; i++)
                row |= strcmp(r[i].host, "up.test") == 0 && strcmp(r[i].reason, "narrowed:exec-7") == 0;
        free(r);
        cr_assert(row, "the refusal's row names the execution");
}

/* GET http://host:<http_up>/ through the proxy as USER:SESS: its status line. */
static bool get_status(const char *host, const char *want)
{
        char buf[4096], req[256];
        int fd = proxy_conn();

        snprintf(req, sizeof(req), "GET http://%s:%d/ HTTP/1.1\r\n\r\n", host, http_up.port);
        send_str(fd, req);
        recv_until(fd, buf, sizeof(buf), NULL, 10000);
        close(fd);
        return strncmp(buf, want, strlen(want)) == 0;
}

Test(egress, a_sessions_own_narrowing_narrows_never_widens_and_a_restart_keeps_it)
{
        struct store_egress_narrow *n = calloc(1, sizeof(*n));
        struct sbx_error err = {0};
        static const char *const covered[] = {"up.test:8080", "a.wild.test", "*.b.wild.test:*", "up.test"};
        static const char *const widening[] = {"other.test", "wild.test", "*.test", "up.test.evil"};
        struct store_egress_entry *r;

        cr_assert_not_null(n);
        for (size_t i = 0; i < ELEMENTSOF(covered); i++) {
                memset(n, 0, sizeof(*n));
                sbx_strlcpy(n->allow[n->n_allow++], covered[i], STORE_EGRESS_PATTERN_MAX);
                cr_assert_eq(egress_narrow_set(st, &cfg, USER, SESS, n, "test", &err), 0, "%s: %s", covered[i],
                             err.msg);
        }
        for (size_t i = 0; i < ELEMENTSOF(widening); i++) {
                memset(n, 0, sizeof(*n));
                sbx_strlcpy(n->allow[n->n_allow++], widening[i], STORE_EGRESS_PATTERN_MAX);
                cr_assert_eq(egress_narrow_set(st, &cfg, USER, SESS, n, "test", &err), -EACCES, "%s", widening[i]);
                cr_assert(strstr(err.msg, widening[i]), "%s", err.msg);
        }
        /* a connector's session addition is the operator's policy too */
        cr_assert_eq(egress_rules_change(st, &cfg, USER, SESS, "other.test:*", false, "test", NULL), 0);
        memset(n, 0, sizeof(*n));
        n->allow_only = true;
        sbx_strlcpy(n->allow[n->n_allow++], "UP.test:*", STORE_EGRESS_PATTERN_MAX);
        sbx_strlcpy(n->allow[n->n_allow++], "other.test:*", STORE_EGRESS_PATTERN_MAX);
        cr_assert_eq(egress_narrow_set(st, &cfg, USER, SESS, n, "test", &err), 0, "%s", err.msg);
        cr_assert_str_eq(n->allow[0], "up.test:*", "made canonical");

        start(); /* a fresh proxy, as after a restart: only the store knows */
        cr_assert(get_status("up.test", "HTTP/1.1 200"));
        cr_assert(get_status("other.test", "HTTP/1.1 200"));
        cr_assert(get_status("echo.test", "HTTP/1.1 403"), "allowed by the operator, not by the narrowing");
        size_t nr = rows(&r, 3), blocked = 0;
        for (size_t i = 0; i < nr; i++)
                if (strcmp(r[i].decision, "blocked") == 0) {
                        blocked++;
                        cr_assert_str_eq(r[i].reason, "narrowed:session");
                        cr_assert_str_eq(r[i].host, "echo.test");
                }
        cr_assert_eq(blocked, 1);
        free(r);

        memset(n, 0, sizeof(*n)); /* replaced: only up.test refused */
        sbx_strlcpy(n->deny[n->n_deny++], "up.test:*", STORE_EGRESS_PATTERN_MAX);
        cr_assert_eq(egress_narrow_set(st, &cfg, USER, SESS, n, "test", &err), 0, "%s", err.msg);
        cr_assert(get_status("up.test", "HTTP/1.1 403"));
        cr_assert(get_status("echo.test", "HTTP/1.1 200"));
        n->allow_only = true; /* only, nothing allowed: no egress */
        n->n_deny = 0;
        cr_assert_eq(egress_narrow_set(st, &cfg, USER, SESS, n, "test", &err), 0, "%s", err.msg);
        cr_assert(get_status("echo.test", "HTTP/1.1 403"));
        cr_assert(get_status("other.test", "HTTP/1.1 403"));

        memset(n, 0, sizeof(*n)); /* nothing in it: removed */
        cr_assert_eq(egress_narrow_set(st, &cfg, USER, SESS, n, "test", &err), 0, "%s", err.msg);
        cr_assert_eq(store_egress_narrow_get(st, USER, SESS, n), 0);
        cr_assert(get_status("up.test", "HTTP/1.1 200"));
        free(n);
}
