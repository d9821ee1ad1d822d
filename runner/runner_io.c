/* runner_io.c — blocking reads and writes of the runner that survive
 * signals (see runner_io.h). */
#include "runner_io.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

int64_t rio_now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int rio_read_full(int fd, void *buf, size_t n, int64_t timeout_ms)
{
        int64_t deadline = rio_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
        char *p = buf;
        size_t got = 0;

        while (got < n) {
                struct pollfd pfd = {.fd = fd, .events = POLLIN};
                int64_t left = deadline - rio_now_ms();
                ssize_t k;
                int r;

                /* past the deadline, bytes already there are still taken (poll with 0) */
                r = poll(&pfd, 1, left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left);
                if (r < 0 && errno == EINTR)
                        continue; /* left is computed again: a signal storm cannot stretch the wait */
                if (r < 0)
                        return -errno;
                if (r == 0)
                        return -ETIMEDOUT;
                k = read(fd, p + got, n - got);
                if (k < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (k < 0)
                        return -errno;
                if (k == 0)
                        return -EPIPE;
                got += (size_t)k;
        }
        return 0;
}

int rio_write_full(int fd, const void *buf, size_t n)
{
        const char *p = buf;

        while (n > 0) {
                ssize_t k = write(fd, p, n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (k == 0)
                        return -EIO;
                p += k;
                n -= (size_t)k;
        }
        return 0;
}
