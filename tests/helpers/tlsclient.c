/* tlsclient.c — see tlsclient.h. */
#include "tlsclient.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandboxd/common.h"

#define HEAD_MAX 16384

struct tlsc {
        int fd;
        bool tls;
        gnutls_session_t s;
        gnutls_certificate_credentials_t cred;
};

void tlsc_close(struct tlsc *c)
{
        if (!c)
                return;
        if (c->s)
                gnutls_deinit(c->s);
        if (c->cred)
                gnutls_certificate_free_credentials(c->cred);
        if (c->fd >= 0)
                close(c->fd);
        free(c);
}

int tlsc_connect(const char *src, int port, bool tls, struct tlsc **ret)
{
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        struct timeval tv = {.tv_sec = TLSC_IO_TIMEOUT_S};
        struct tlsc *c = calloc(1, sizeof(*c));
        int r;

        if (!c)
                return -ENOMEM;
        c->tls = tls;
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0)
                goto fail_errno;
        (void)setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        (void)setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (src) {
                struct sockaddr_in b = {.sin_family = AF_INET};
                if (inet_pton(AF_INET, src, &b.sin_addr) != 1) {
                        tlsc_close(c);
                        return -EINVAL;
                }
                if (bind(c->fd, (struct sockaddr *)&b, sizeof(b)) < 0)
                        goto fail_errno;
        }
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) < 0)
                goto fail_errno;
        if (tls) {
                if (gnutls_certificate_allocate_credentials(&c->cred) < 0 ||
                    gnutls_init(&c->s, GNUTLS_CLIENT | GNUTLS_NO_SIGNAL) < 0 || gnutls_set_default_priority(c->s) < 0 ||
                    gnutls_credentials_set(c->s, GNUTLS_CRD_CERTIFICATE, c->cred) < 0) {
                        tlsc_close(c);
                        return -ENOMEM;
                }
                gnutls_transport_set_int(c->s, c->fd);
                gnutls_handshake_set_timeout(c->s, TLSC_IO_TIMEOUT_S * 1000);
                gnutls_record_set_timeout(c->s, TLSC_IO_TIMEOUT_S * 1000);
                do
                        r = gnutls_handshake(c->s);
                while (r < 0 && !gnutls_error_is_fatal(r) && r != GNUTLS_E_TIMEDOUT);
                if (r < 0) {
                        tlsc_close(c);
                        return -ECONNRESET;
                }
        }
        *ret = c;
        return 0;
fail_errno:
        r = -errno;
        tlsc_close(c);
        return r;
}

int tlsc_send(struct tlsc *c, const void *buf, size_t len)
{
        const char *p = buf;

        while (len > 0) {
                ssize_t n = c->tls ? gnutls_record_send(c->s, p, len) : send(c->fd, p, len, MSG_NOSIGNAL);
                if (n < 0 && (c->tls ? (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) : errno == EINTR))
                        continue;
                if (n <= 0)
                        return -EPIPE;
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

/* Some bytes, 0 at EOF, or a negative errno (a timeout included). */
static ssize_t recv_some(struct tlsc *c, char *buf, size_t size)
{
        for (;;) {
                ssize_t n = c->tls ? gnutls_record_recv(c->s, buf, size) : recv(c->fd, buf, size, 0);
                if (!c->tls)
                        return n < 0 ? -errno : n;
                if (n >= 0)
                        return n;
                if (n == GNUTLS_E_INTERRUPTED || n == GNUTLS_E_AGAIN)
                        continue;
                return n == GNUTLS_E_TIMEDOUT ? -ETIMEDOUT : -ECONNRESET;
        }
}

int tlsc_request(struct tlsc *c, const char *verb, const char *path, const char *token, const char *body,
                 char **ret_body)
{
        char head[HEAD_MAX], *end = NULL, *out;
        size_t len = 0, blen = body ? strlen(body) : 0, clen = 0, have;
        const char *cl;
        int n, status;

        n = snprintf(head, sizeof(head),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s%sContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     verb, path, token ? "Authorization: Bearer " : "", token ? token : "", token ? "\r\n" : "", blen);
        if (n < 0 || (size_t)n >= sizeof(head))
                return -E2BIG;
        if (tlsc_send(c, head, (size_t)n) < 0 || (blen && tlsc_send(c, body, blen) < 0))
                return -EPIPE;
        while (!end) {
                ssize_t k;
                if (len >= sizeof(head) - 1)
                        return -E2BIG;
                k = recv_some(c, head + len, sizeof(head) - 1 - len);
                if (k <= 0)
                        return k < 0 ? (int)k : -ECONNRESET;
                len += (size_t)k;
                head[len] = '\0';
                end = strstr(head, "\r\n\r\n");
        }
        if (sscanf(head, "HTTP/1.%*d %d", &status) != 1)
                return -EPROTO;
        for (cl = head; (cl = strchr(cl, '\n')) != NULL && cl < end;)
                if (strncasecmp(++cl, "Content-Length:", 15) == 0) {
                        clen = strtoul(cl + 15, NULL, 10);
                        break;
                }
        if (clen > (1u << 24))
                return -E2BIG;
        out = malloc(clen + 1);
        if (!out)
                return -ENOMEM;
        have = len - (size_t)(end + 4 - head);
        if (have > clen)
                have = clen; /* nothing is pipelined: more is not expected */
        memcpy(out, end + 4, have);
        while (have < clen) {
                ssize_t k = recv_some(c, out + have, clen - have);
                if (k <= 0) {
                        free(out);
                        return k < 0 ? (int)k : -ECONNRESET;
                }
                have += (size_t)k;
        }
        out[clen] = '\0';
        if (ret_body)
                *ret_body = out;
        else
                free(out);
        return status;
}

bool tlsc_closed_within(struct tlsc *c, int timeout_ms)
{
        int64_t until = sbx_now_ms() + timeout_ms;

        while (sbx_now_ms() < until) {
                struct pollfd p = {.fd = c->fd, .events = POLLIN};
                char buf[4096];
                int left = (int)(until - sbx_now_ms());
                ssize_t k;
                if (left <= 0)
                        break;
                if (!(c->tls && gnutls_record_check_pending(c->s)) && poll(&p, 1, left) <= 0)
                        continue;
                k = recv_some(c, buf, sizeof(buf));
                if (k == 0 || (k < 0 && k != -ETIMEDOUT && k != -EINTR && k != -EAGAIN))
                        return true;
        }
        return false;
}
