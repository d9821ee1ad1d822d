/* egress_relay.c — an allowed egress tunnel's bytes: connect to the
 * judged addresses in turn (through the upstream proxy's CONNECT when one
 * is set; over a node link the node agent connects, and the stream it
 * gives back says the result in its first 4 bytes), then relay both ways with the le-proxy pattern: stop reading one
 * side while the other's output is over RELAY_HIGH, half-close on EOF.
 *
 * Threads and locks: loop thread only (egress.c). */
#include "sandboxd/egress.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandboxd/egress_policy.h"
#include "egress_internal.h"

#define RELAY_HIGH (256 * 1024) /* bytes buffered per direction before reading pauses */
#define RELAY_CHUNK (64 * 1024) /* largest single read or write */

static void relay_read(struct bufferevent *bev, void *arg);
static void relay_event(struct bufferevent *bev, short what, void *arg);

/* ---- relay ---- */

static struct bufferevent *other_side(struct tunnel *t, struct bufferevent *bev)
{
        return bev == t->cli ? t->up : t->cli;
}

static bool reads_done(const struct tunnel *t, const struct bufferevent *bev)
{
        if (bev == t->cli)
                return t->cli_eof || (!t->is_connect && t->body_done);
        return t->up_eof;
}

static void drained(struct bufferevent *bev, void *arg)
{
        struct tunnel *t = arg;
        struct bufferevent *src = other_side(t, bev);

        bufferevent_setcb(bev, relay_read, NULL, relay_event, t);
        bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
        if (src && !reads_done(t, src))
                bufferevent_enable(src, EV_READ);
}

/* Move what src has read to the other side. false: the tunnel is gone. */
static bool relay_move(struct tunnel *t, struct bufferevent *bev)
{
        struct bufferevent *dst = other_side(t, bev);
        struct evbuffer *src = bufferevent_get_input(bev), *out;
        size_t len = evbuffer_get_length(src);

        if (!dst || t->state != T_RELAY || len == 0)
                return true;
        out = bufferevent_get_output(dst);
        if (bev == t->cli && !t->is_connect) {
                /* forward the request body, and no byte past the end of the request */
                size_t fwd = 0;
                while (fwd < len && !t->body_done) {
                        struct evbuffer_ptr pos;
                        struct evbuffer_iovec v;
                        evbuffer_ptr_set(src, &pos, fwd, EVBUFFER_PTR_SET);
                        if (evbuffer_peek(src, -1, &pos, &v, 1) < 1)
                                break;
                        fwd += http_parser_execute(&t->parser, &egress_request_settings, v.iov_base, v.iov_len);
                        if (HTTP_PARSER_ERRNO(&t->parser) != HPE_OK && HTTP_PARSER_ERRNO(&t->parser) != HPE_PAUSED) {
                                egress_tunnel_finish(t, "bad_body");
                                return false;
                        }
                }
                evbuffer_remove_buffer(src, out, fwd);
                if (t->body_done) {
                        /* one request per connection: anything after it is dropped */
                        evbuffer_drain(src, evbuffer_get_length(src));
                        bufferevent_disable(bev, EV_READ);
                }
                len = fwd;
        } else {
                evbuffer_add_buffer(out, src);
        }
        if (bev == t->cli)
                t->bytes_up += (int64_t)len;
        else
                t->bytes_down += (int64_t)len;
        atomic_fetch_add(&t->s->bytes, (int64_t)len);
        t->last_activity = sbx_now_ms();
        if (egress_bytes_over(t)) {
                egress_tunnel_finish(t, "cap_bytes");
                return false;
        }
        if (evbuffer_get_length(out) >= RELAY_HIGH) {
                /* the other side is slow: stop reading until it drains to half */
                bufferevent_setcb(dst, relay_read, drained, relay_event, t);
                bufferevent_setwatermark(dst, EV_WRITE, RELAY_HIGH / 2, RELAY_HIGH);
                bufferevent_disable(bev, EV_READ);
        }
        return true;
}

static void relay_read(struct bufferevent *bev, void *arg)
{
        (void)relay_move(arg, bev);
}

/* Plain HTTP: the response ends with the upstream's EOF; close once written. */
static void finish_when_flushed(struct bufferevent *bev, void *arg)
{
        if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
                egress_tunnel_finish(arg, "closed");
}

/* CONNECT: after one side's EOF, shut the other's write half once its output
 * is written; the tunnel ends when both halves are shut. */
static void shut_when_flushed(struct bufferevent *bev, void *arg)
{
        struct tunnel *t = arg;

        if (evbuffer_get_length(bufferevent_get_output(bev)) > 0)
                return;
        bufferevent_setcb(bev, relay_read, NULL, relay_event, t);
        shutdown(bufferevent_getfd(bev), SHUT_WR);
        if (bev == t->cli)
                t->cli_shut = true;
        else
                t->up_shut = true;
        if (t->cli_shut && t->up_shut)
                egress_tunnel_finish(t, "closed");
}

static void side_eof(struct tunnel *t, struct bufferevent *bev)
{
        struct bufferevent *dst = other_side(t, bev);

        bufferevent_disable(bev, EV_READ);
        if (!t->is_connect) {
                if (bev == t->cli) {
                        t->cli_eof = true;
                        if (!t->body_done) /* gone before its request was whole */
                                egress_tunnel_finish(t, "client_gone");
                        return;
                }
                t->up_eof = true;
                bufferevent_setcb(dst, NULL, finish_when_flushed, relay_event, t);
                bufferevent_enable(dst, EV_WRITE);
                finish_when_flushed(dst, t);
                return;
        }
        if (bev == t->cli)
                t->cli_eof = true;
        else
                t->up_eof = true;
        bufferevent_setcb(dst, relay_read, shut_when_flushed, relay_event, t);
        bufferevent_setwatermark(dst, EV_WRITE, 0, 0);
        bufferevent_enable(dst, EV_WRITE);
        shut_when_flushed(dst, t);
}

static void relay_event(struct bufferevent *bev, short what, void *arg)
{
        struct tunnel *t = arg;

        if (what & BEV_EVENT_EOF) {
                /* what is still in its input goes first */
                if (relay_move(t, bev))
                        side_eof(t, bev);
                return;
        }
        if (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
                egress_tunnel_finish(t, bev == t->cli ? "client_error" : "upstream_error");
}

static void start_relay(struct tunnel *t)
{
        t->state = T_RELAY;
        t->last_activity = sbx_now_ms();
        event_del(t->timer);
        egress_tunnel_arm(t, t->eg->cfg.egress_idle_timeout_ms);
        bufferevent_setwatermark(t->cli, EV_READ, 0, RELAY_HIGH);
        bufferevent_setwatermark(t->up, EV_READ, 0, RELAY_HIGH);
        /* libevent reads 16 KiB at a time by default: fewer, larger syscalls */
        bufferevent_set_max_single_read(t->cli, RELAY_CHUNK);
        bufferevent_set_max_single_read(t->up, RELAY_CHUNK);
        bufferevent_set_max_single_write(t->cli, RELAY_CHUNK);
        bufferevent_set_max_single_write(t->up, RELAY_CHUNK);
        bufferevent_setcb(t->cli, relay_read, NULL, relay_event, t);
        bufferevent_setcb(t->up, relay_read, NULL, relay_event, t);
        bufferevent_enable(t->up, EV_READ | EV_WRITE);
        bufferevent_enable(t->cli, EV_WRITE);
        if (!(t->body_done && !t->is_connect))
                bufferevent_enable(t->cli, EV_READ);
        if (t->is_connect)
                evbuffer_add_printf(bufferevent_get_output(t->cli), "HTTP/1.1 200 Connection established\r\n\r\n");
        /* bytes that came after the head (a body, an early TLS hello), and
         * those an upstream proxy sent right behind its answer */
        if (relay_move(t, t->cli))
                (void)relay_move(t, t->up);
}

/* The destination is connected (or the upstream proxy agreed): go. */
static void upstream_ready(struct tunnel *t)
{
        if (t->intercept) { /* a host a secret goes to: TLS ends here (egress_tls.c) */
                free(t->arena);
                t->arena = NULL;
                egress_icpt_start(t);
                return;
        }
        if (!t->is_connect) {
                const char *path = "/";
                size_t path_len = 1;
                (void)egress_http_target(t, &path, &path_len);
                egress_http_write_head(t, bufferevent_get_output(t->up), t->eg->up_port != 0, path, path_len);
                t->bytes_up += (int64_t)evbuffer_get_length(bufferevent_get_output(t->up));
        }
        free(t->arena); /* the head is gone upstream; the parser keeps no pointer into it */
        t->arena = NULL;
        start_relay(t);
}

/* The upstream proxy's answer to our CONNECT: its head, then its tunnel. */
static void proxy_hs_read(struct bufferevent *bev, void *arg)
{
        struct tunnel *t = arg;
        struct evbuffer *in = bufferevent_get_input(bev);
        struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
        http_parser p;
        http_parser_settings none = {0};
        char *head;
        size_t n;

        if (end.pos < 0) {
                if (evbuffer_get_length(in) > (size_t)t->eg->cfg.egress_max_header_bytes)
                        egress_tunnel_refuse(t, 502, "upstream_proxy", "its answer is too large");
                return;
        }
        n = (size_t)end.pos + 4;
        head = (char *)evbuffer_pullup(in, (ssize_t)n);
        http_parser_init(&p, HTTP_RESPONSE);
        (void)http_parser_execute(&p, &none, head, n);
        if (p.status_code < 200 || p.status_code > 299) {
                char detail[64];
                snprintf(detail, sizeof(detail), "the upstream proxy answered %u", p.status_code);
                egress_tunnel_refuse(t, 502, "upstream_proxy", detail);
                return;
        }
        evbuffer_drain(in, n);
        if (t->intercept)
                egress_icpt_start(t);
        else
                start_relay(t);
}

static void connect_event(struct bufferevent *bev, short what, void *arg)
{
        struct tunnel *t = arg;

        if (what & BEV_EVENT_CONNECTED) {
                if (!t->eg->up_port || !t->is_connect) {
                        upstream_ready(t);
                        return;
                }
                t->state = T_PROXY_HS;
                evbuffer_add_printf(bufferevent_get_output(bev),
                                    strchr(t->host, ':') ? "CONNECT [%s]:%d HTTP/1.1\r\nHost: [%s]:%d\r\n\r\n"
                                                         : "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n",
                                    t->host, t->port, t->host, t->port);
                bufferevent_setcb(bev, proxy_hs_read, NULL, connect_event, t);
                bufferevent_enable(bev, EV_READ | EV_WRITE);
                return;
        }
        if (what & (BEV_EVENT_ERROR | BEV_EVENT_EOF)) {
                int e = EVUTIL_SOCKET_ERROR();
                if (t->state == T_CONNECT && t->next_addr < t->n_addrs) {
                        bufferevent_free(t->up);
                        t->up = NULL;
                        egress_try_connect(t);
                        return;
                }
                egress_tunnel_refuse(t, 502, t->state == T_PROXY_HS ? "upstream_proxy" : "connect_failed",
                                     e ? evutil_socket_error_to_string(e) : "closed");
        }
}

/* Over a node (egress_set_connect_hook): the connect's result comes first
 * on the stream, 4 bytes; what follows is the upstream's and stays in the
 * input for the relay. */
static void node_result_read(struct bufferevent *bev, void *arg)
{
        struct tunnel *t = arg;
        struct evbuffer *in = bufferevent_get_input(bev);
        int32_t res;

        if (evbuffer_get_length(in) < sizeof(res))
                return;
        evbuffer_remove(in, &res, sizeof(res));
        bufferevent_setwatermark(bev, EV_READ, 0, 0);
        if (res == 0) {
                connect_event(bev, BEV_EVENT_CONNECTED, t);
                return;
        }
        if (res > 0 || res < -4095)
                res = -EPROTO;
        if (t->next_addr < t->n_addrs) {
                bufferevent_free(t->up);
                t->up = NULL;
                egress_try_connect(t);
                return;
        }
        egress_tunnel_refuse(t, 502, "connect_failed", strerror((int)-res));
}

static void node_result_event(struct bufferevent *bev, short what, void *arg)
{
        struct tunnel *t = arg;

        /* an end before the result: the node link went, or the node refused the stream */
        if (t->next_addr < t->n_addrs) {
                bufferevent_free(t->up);
                t->up = NULL;
                egress_try_connect(t);
                return;
        }
        egress_tunnel_refuse(t, 502, "connect_failed", "the node link closed the connection");
}

static void try_connect_node(struct tunnel *t, struct sockaddr *sa, socklen_t len)
{
        int fd = -1;
        int r = t->eg->connect_fn(t->s->user, t->s->session, sa, len, t->eg->connect_ud, &fd);

        t->next_addr++;
        if (r < 0) {
                if (t->next_addr < t->n_addrs)
                        egress_try_connect(t);
                else
                        egress_tunnel_refuse(t, 502, "connect_failed", strerror(-r));
                return;
        }
        t->up = bufferevent_socket_new(t->eg->base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (!t->up) {
                close(fd);
                egress_tunnel_refuse(t, 503, "internal", "out of memory");
                return;
        }
        bufferevent_setcb(t->up, node_result_read, NULL, node_result_event, t);
        bufferevent_setwatermark(t->up, EV_READ, sizeof(int32_t), 0);
        bufferevent_enable(t->up, EV_READ);
}

void egress_try_connect(struct tunnel *t)
{
        struct sockaddr *sa;
        int fd;

        t->state = T_CONNECT;
        if (t->next_addr >= t->n_addrs) {
                egress_tunnel_refuse(t, 502, "connect_failed", t->host);
                return;
        }
        sa = (struct sockaddr *)&t->addrs[t->next_addr];
        egress_addr_string(sa, t->address, sizeof(t->address));
        if (t->eg->connect_fn) {
                try_connect_node(t, sa, t->addr_lens[t->next_addr]);
                return;
        }
        fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                egress_tunnel_refuse(t, 503, "connect_failed", strerror(errno));
                return;
        }
        t->up = bufferevent_socket_new(t->eg->base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (!t->up) {
                close(fd);
                egress_tunnel_refuse(t, 503, "internal", "out of memory");
                return;
        }
        bufferevent_setcb(t->up, NULL, NULL, connect_event, t);
        if (bufferevent_socket_connect(t->up, sa, (int)t->addr_lens[t->next_addr++]) < 0) {
                /* the event callback is not called for an immediate failure */
                bufferevent_free(t->up);
                t->up = NULL;
                egress_try_connect(t);
        }
}
