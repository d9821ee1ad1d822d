/* common.c — the error carrier, clocks, random ids, the removal of a tree,
 * the sparse copy of a file.
 * No state, no locks. */
#include "sandboxd/common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

DIR *sbx_opendir_dup(int fd)
{
        _cleanup_close_ int dup_fd = dup(fd);
        DIR *d;

        if (dup_fd < 0)
                return NULL;
        d = fdopendir(dup_fd);
        if (!d)
                return NULL;
        TAKE_FD(dup_fd); /* the stream owns it now */
        rewinddir(d);    /* a dup shares the offset an earlier reader left */
        return d;
}

int sbx_error_set(struct sbx_error *err, int code, int http_status, const char *fmt, ...)
{
        if (err) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
                va_end(ap);
                err->http_status = http_status;
        }
        return code;
}

void sbx_error_prefix(struct sbx_error *err, const char *fmt, ...)
{
        char prefix[512], old[sizeof(err->msg)];
        va_list ap;

        if (!err)
                return;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof(prefix), fmt, ap);
        va_end(ap);
        memcpy(old, err->msg, sizeof(old));
        snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old);
}

void closep(int *fd)
{
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}

bool sbx_strlcpy(char *dst, const char *src, size_t size)
{
        size_t n;

        if (size == 0)
                return false;
        if (!src)
                src = "";
        n = strlen(src);
        if (n >= size) {
                memcpy(dst, src, size - 1);
                dst[size - 1] = '\0';
                return false;
        }
        memcpy(dst, src, n + 1);
        return true;
}

int64_t sbx_now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sbx_wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timespec sbx_deadline_after(clockid_t clock, int64_t ms)
{
        struct timespec ts;
        clock_gettime(clock, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
        }
        return ts;
}

void sbx_sleep_ms(int64_t ms)
{
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static int fill_random(void *buf, size_t n)
{
        uint8_t *p = buf;
        while (n > 0) {
                ssize_t r = getrandom(p, n, 0);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += r;
                n -= (size_t)r;
        }
        return 0;
}

int sbx_listen_tcp(const char *ip, int port, struct sbx_error *err)
{
        struct addrinfo hints = {.ai_family = AF_UNSPEC,
                                 .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE};
        struct addrinfo *ai = NULL;
        char service[8];
        int fd, one = 1, r;

        snprintf(service, sizeof(service), "%d", port);
        r = getaddrinfo(ip, service, &hints, &ai);
        if (r != 0 || !ai)
                return sbx_error_set(err, -EINVAL, 0, "publish_ip %s: %s", ip, gai_strerror(r));
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd >= 0) {
                (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
                if (ai->ai_family == AF_INET6)
                        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        }
        if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SBX_LISTEN_BACKLOG) < 0) {
                r = -errno;
                if (fd >= 0)
                        close(fd);
                freeaddrinfo(ai);
                return sbx_error_set(err, r, 0, "cannot listen on %s:%d: %s", ip, port, strerror(-r));
        }
        freeaddrinfo(ai);
        return fd;
}

int sbx_uuid(char out[37])
{
        uint8_t b[16];
        int r = fill_random(b, sizeof(b));
        if (r < 0)
                return r;
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
                 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
        return 0;
}

int sbx_random_hex(char *out, size_t nbytes)
{
        uint8_t b[64];
        if (nbytes > sizeof(b))
                return -EINVAL;
        int r = fill_random(b, nbytes);
        if (r < 0)
                return r;
        for (size_t i = 0; i < nbytes; i++)
                snprintf(out + 2 * i, 3, "%02x", b[i]);
        return 0;
}

int sbx_rows_convert(void *rows, size_t n, size_t in_size, size_t out_size, void (*conv)(const void *row, void *out),
                     void *ret, size_t *ret_n)
{
        unsigned char *out = calloc(n + 1, out_size);

        if (!out) {
                free(rows);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++)
                conv((const unsigned char *)rows + i * in_size, out + i * out_size);
        free(rows);
        memcpy(ret, &out, sizeof(out)); /* ret is the caller's T **: no void ** aliasing */
        *ret_n = n;
        return 0;
}

/* ---- removing a tree ---- */

/* Empty directory `fd`: unlink what is not a directory, and hoist every
 * subdirectory up into `top` under a fresh name (renameat2 with
 * RENAME_NOREPLACE, so nothing is ever replaced). Returns how many
 * directories were hoisted, or -errno. */
static int empty_into(int top, int fd, unsigned long *counter)
{
        DIR *dir = sbx_opendir_dup(fd);
        struct dirent *de;
        int r = 0, hoisted = 0;

        if (!dir)
                return -errno;
        while ((de = readdir(dir))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                /* a symlink, file, fifo or socket goes by name: nothing is followed */
                if (unlinkat(fd, de->d_name, 0) == 0 || errno == ENOENT)
                        continue;
                if (errno != EISDIR) {
                        r = -errno;
                        continue;
                }
                if (unlinkat(fd, de->d_name, AT_REMOVEDIR) == 0)
                        continue;
                for (;;) {
                        char name[48];
                        snprintf(name, sizeof(name), ".sbx-purge-%lu", (*counter)++);
                        if (renameat2(fd, de->d_name, top, name, RENAME_NOREPLACE) == 0) {
                                hoisted++;
                                break;
                        }
                        if (errno != EEXIST) {
                                r = -errno;
                                break;
                        }
                }
        }
        closedir(dir);
        return r < 0 ? r : hoisted;
}

/* Remove entry `name` of top, whatever it is; a directory's own
 * subdirectories are hoisted into top (empty_into) before it goes. */
static int remove_entry(int top, const char *name, unsigned long *counter)
{
        struct stat ts, ss;
        int sub, k;

        /* Linux says EISDIR for a directory (POSIX allows EPERM, which Linux
         * keeps for an immutable file: a real failure) */
        if (unlinkat(top, name, 0) == 0 || errno == ENOENT)
                return 0;
        if (errno != EISDIR)
                return -errno;
        if (unlinkat(top, name, AT_REMOVEDIR) == 0)
                return 0;
        if (errno != ENOTEMPTY && errno != EEXIST)
                return -errno;
        sub = openat(top, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0)
                return -errno;
        if (fstat(top, &ts) < 0 || fstat(sub, &ss) < 0)
                k = -errno;
        else if (ts.st_dev != ss.st_dev)
                k = -EBUSY; /* a mount point below: never emptied */
        else
                k = empty_into(top, sub, counter);
        close(sub);
        if (k < 0)
                return k;
        return unlinkat(top, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

int sbx_remove_tree_at(int top)
{
        unsigned long counter = 0, next = 0;

        for (;;) {
                DIR *dir = sbx_opendir_dup(top); /* rewound: the last pass left the offset at the end */
                struct dirent *de;
                int r = 0;
                bool any = false, progress = false;

                if (!dir)
                        return -errno;
                while ((de = readdir(dir))) {
                        int k;

                        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                                continue;
                        any = true;
                        k = remove_entry(top, de->d_name, &counter);
                        if (k == 0)
                                progress = true;
                        else
                                r = k;
                        while (next < counter) { /* drain what was hoisted */
                                char name[48];
                                snprintf(name, sizeof(name), ".sbx-purge-%lu", next++);
                                k = remove_entry(top, name, &counter);
                                if (k == 0)
                                        progress = true;
                                else
                                        r = k;
                        }
                }
                closedir(dir);
                if (!any)
                        return 0;
                if (!progress)
                        return r < 0 ? r : -ENOTEMPTY;
        }
}

#define COPY_CHUNK (1 << 20)

/* Copy [off, off + len) of in to the same place in out. */
static int copy_range(int in, int out, off_t off, off_t len)
{
        _cleanup_free_ char *buf = NULL; /* the plain way's, made on first need */

        while (len > 0) {
                loff_t a = off, b = off;
                size_t want = (size_t)(len < (1 << 30) ? len : (1 << 30));
                ssize_t n = copy_file_range(in, &a, out, &b, want, 0);
                if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL)) {
                        if (!buf && !(buf = malloc(COPY_CHUNK)))
                                return -ENOMEM;
                        n = pread(in, buf, want < COPY_CHUNK ? want : COPY_CHUNK, off);
                        if (n > 0) {
                                ssize_t w = pwrite(out, buf, (size_t)n, off);
                                if (w != n)
                                        return w < 0 ? -errno : -EIO;
                        }
                }
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        return 0; /* the file shrank: the rest is a hole */
                off += n;
                len -= n;
        }
        return 0;
}

int sbx_copy_sparse(int src, int dst)
{
        struct stat st;
        off_t data = 0, hole;
        int r;

        if (fstat(src, &st) < 0)
                return -errno;
        for (;;) {
                data = lseek(src, data, SEEK_DATA);
                if (data < 0) {
                        if (errno == ENXIO)
                                break; /* no data past here */
                        return -errno;
                }
                hole = lseek(src, data, SEEK_HOLE);
                if (hole < 0)
                        return -errno;
                r = copy_range(src, dst, data, hole - data);
                if (r < 0)
                        return r;
                data = hole;
        }
        return ftruncate(dst, st.st_size) < 0 ? -errno : 0;
}

int sbx_wait_child(pid_t pid, int64_t deadline)
{
        int status;

        for (;;) {
                pid_t w = waitpid(pid, &status, WNOHANG);
                if (w == pid)
                        return WIFEXITED(status) ? WEXITSTATUS(status) : -EINTR;
                if (w < 0 && errno != EINTR)
                        return -errno;
                if (sbx_now_ms() >= deadline) {
                        kill(pid, SIGKILL);
                        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) /* SIGKILL: it ends at once */
                                ;
                        return -ETIMEDOUT;
                }
                sbx_sleep_ms(20);
        }
}

bool sbx_env_key_valid(const char *kv)
{
        const char *eq = strchr(kv, '=');

        if (!eq || eq == kv || (kv[0] >= '0' && kv[0] <= '9'))
                return false;
        for (const char *p = kv; p < eq; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
                        return false;
        return true;
}
