/* jsonl_client.c — connect, send a line, read a capped line by a deadline
 * (jsonl_client.h). No state, no threads: an fd belongs to its caller.
 *
 * Reads peek before they take: MSG_PEEK shows what has arrived, and only
 * the bytes up to and including the '\n' are then taken, so a reply line
 * never swallows the start of the next one (the tests interleave raw reads
 * with these, and the adapter reads progress lines one at a time). */
#include "sandboxd/jsonl_client.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define JSONL_CHUNK 65536

int jsonl_connect(const char *path, struct sbx_error *err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct timeval tv = {.tv_sec = JSONL_SEND_TIMEOUT_S};
        int64_t deadline = sbx_now_ms() + JSONL_SEND_TIMEOUT_S * 1000;
        int fd;

        if (!path || !*path)
                return sbx_error_set(err, -EINVAL, 0, "no socket path");
        if (!sbx_strlcpy(sa.sun_path, path, sizeof(sa.sun_path)))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "socket path too long: %s", path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return sbx_error_set(err, -errno, 0, "socket: %s", strerror(errno));
        /* a Unix connect to a full backlog, and a send to a peer that stops
         * reading, wait at most this long */
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int64_t left = deadline - sbx_now_ms();
                int e = errno == EAGAIN ? ETIMEDOUT : errno;
                /* a connect with a send timeout is never restarted after a signal; a
                 * Unix one that was cut short may be tried again, for what is left */
                if (e == EINTR && left > 0) {
                        struct timeval rest = {.tv_sec = left / 1000, .tv_usec = (left % 1000) * 1000};
                        (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &rest, sizeof(rest));
                        continue;
                }
                close(fd);
                return sbx_error_set(err, -(e == EINTR ? ETIMEDOUT : e), 0, "cannot connect to %s: %s", path,
                                     strerror(e == EINTR ? ETIMEDOUT : e));
        }
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)); /* the sends' own */
        return fd;
}

int jsonl_send_raw(int fd, const void *buf, size_t len)
{
        const char *p = buf;

        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return errno == EAGAIN ? -ETIMEDOUT : -errno; /* EAGAIN: the send timeout passed */
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

int jsonl_send(int fd, const cJSON *msg)
{
        char *text = cJSON_PrintUnformatted(msg);
        size_t n;
        int r;

        if (!text)
                return -ENOMEM;
        n = strlen(text);
        text[n] = '\n'; /* compact JSON has no raw newline; the NUL becomes the line's end */
        r = jsonl_send_raw(fd, text, n + 1);
        free(text);
        return r;
}

int jsonl_read_line(int fd, size_t max, int timeout_ms, char **ret_line, size_t *ret_len)
{
        int64_t deadline = sbx_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, cap = 0;

        for (;;) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                int64_t left = deadline - sbx_now_ms();
                size_t want, take;
                ssize_t k;
                char *nl;
                int r;

                if (cap - len < JSONL_CHUNK + 1) {
                        size_t ncap = cap ? cap * 2 : JSONL_CHUNK + 1;
                        char *nb;
                        if (ncap > max + JSONL_CHUNK + 2)
                                ncap = max + JSONL_CHUNK + 2;
                        if (ncap <= cap)
                                return -EMSGSIZE;
                        nb = realloc(buf, ncap);
                        if (!nb)
                                return -ENOMEM;
                        buf = nb;
                        cap = ncap;
                }
                if (left <= 0)
                        return -ETIMEDOUT;
                r = poll(&p, 1, left > 60000 ? 60000 : (int)left);
                if (r < 0 && errno != EINTR)
                        return -errno;
                if (r <= 0)
                        continue;
                want = cap - len - 1;
                k = recv(fd, buf + len, want, MSG_PEEK | MSG_DONTWAIT);
                if (k < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        return -ECONNRESET;
                nl = memchr(buf + len, '\n', (size_t)k);
                take = nl ? (size_t)(nl - (buf + len)) + 1 : (size_t)k;
                k = recv(fd, buf + len, take, MSG_DONTWAIT); /* what the peek showed is there */
                if (k < 0)
                        return -errno;
                len += (size_t)k;
                if (nl && (size_t)k == take) {
                        len--; /* the '\n' */
                        if (len > max)
                                return -EMSGSIZE;
                        buf[len] = '\0';
                        *ret_len = len;
                        *ret_line = TAKE_PTR(buf);
                        return 0;
                }
                if (len > max)
                        return -EMSGSIZE;
        }
}

int jsonl_read(int fd, size_t max, int timeout_ms, cJSON **ret)
{
        _cleanup_free_ char *line = NULL;
        size_t len;
        cJSON *o;
        int r = jsonl_read_line(fd, max, timeout_ms, &line, &len);

        if (r < 0)
                return r;
        o = cJSON_ParseWithLength(line, len);
        if (!cJSON_IsObject(o)) {
                cJSON_Delete(o);
                return -EBADMSG;
        }
        *ret = o;
        return 0;
}

int jsonl_call(const char *path, const cJSON *req, size_t max, int timeout_ms, cJSON **ret_reply, struct sbx_error *err)
{
        _cleanup_close_ int fd = jsonl_connect(path, err);
        int r;

        if (fd < 0)
                return fd;
        r = jsonl_send(fd, req);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot send to %s: %s", path, strerror(-r));
        r = jsonl_read(fd, max, timeout_ms, ret_reply);
        if (r < 0)
                return sbx_error_set(err, r, 0, "%s",
                                     r == -ECONNRESET  ? "the daemon closed the connection without a reply"
                                     : r == -ETIMEDOUT ? "no reply from the daemon in time"
                                     : r == -EMSGSIZE  ? "the reply is too long"
                                     : r == -EBADMSG   ? "unreadable reply"
                                                       : strerror(-r));
        return 0;
}
