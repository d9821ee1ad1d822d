/* common.h — small shared helpers: the error carrier, cleanup attributes,
 * ownership hand-off and bounded string copies. Every module includes it. */
#ifndef SANDBOXD_COMMON_H
#define SANDBOXD_COMMON_H

#include <dirent.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>

#define SBX_VERSION "0.1.0"

/* Where a caller needs more than a negative errno: Docker's HTTP status and
 * the engine's own message, or a human sentence naming what went wrong.
 * Optional everywhere; functions accept NULL. */
struct sbx_error {
        int http_status; /* 0 when the failure did not come from an HTTP reply */
        char msg[1024];
};

/* Fill *err (if non-NULL) with a formatted message; returns `code` so callers
 * can `return sbx_error_set(err, -EINVAL, 0, "...")`. */
int sbx_error_set(struct sbx_error *err, int code, int http_status, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

/* Prefix an existing message with more context ("creating container: ..."). */
void sbx_error_prefix(struct sbx_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Hand ownership on: returns the pointer and NULLs the variable, so a cleanup
 * attribute on the variable does not free it. */
#define TAKE_PTR(p)                                                                                                    \
        ({                                                                                                             \
                __typeof__(p) _p_ = (p);                                                                               \
                (p) = NULL;                                                                                            \
                _p_;                                                                                                   \
        })

#define TAKE_FD(fd)                                                                                                    \
        ({                                                                                                             \
                int _fd_ = (fd);                                                                                       \
                (fd) = -1;                                                                                             \
                _fd_;                                                                                                  \
        })

static inline void freep(void *p)
{
        free(*(void **)p);
}
void closep(int *fd);

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

/* A directory stream over a dup of fd (fd stays the caller's), rewound to
 * the start; NULL with errno set. */
DIR *sbx_opendir_dup(int fd);

/* Remove everything under the directory top (top itself stays), never
 * following a symlink and never entering another mount (a mount point
 * below: -EBUSY), at any depth: a directory is emptied by unlinking its
 * non-directories and moving its subdirectories up into top under the
 * names .sbx-purge-0, -1, ... (a queue that needs no memory: the counter
 * says how far it goes), then removed. No recursion, so a tree thousands
 * of levels deep costs no stack and no fds, and no path is ever built (no
 * PATH_MAX). Entries are moved, never copied, so this ends; a pass that
 * removes nothing fails instead (-ENOTEMPTY, or the last error). */
int sbx_remove_tree_at(int top);

/* Copy src's data extents into dst at the same offsets (SEEK_DATA/SEEK_HOLE,
 * so holes stay holes) with copy_file_range, or pread/pwrite where it cannot
 * (another file system, a memfd), then truncate dst to src's size. dst is
 * not synced: that is the caller's. 0 or -errno. */
int sbx_copy_sparse(int src, int dst);

/* Reap child pid: its exit status (a signal's end: -EINTR), or -errno; past
 * deadline (sbx_now_ms) it is SIGKILLed, reaped and -ETIMEDOUT said. Polled
 * every 20 ms: there is no waitpid with a timeout. */
int sbx_wait_child(pid_t pid, int64_t deadline);

/* Whether kv is NAME=value with NAME a portable environment name
 * ([A-Za-z_][A-Za-z0-9_]*). */
bool sbx_env_key_valid(const char *kv);

/* strlcpy-like: always NUL-terminates, returns true if it fit. */
bool sbx_strlcpy(char *dst, const char *src, size_t size);

/* Monotonic and wall clocks in milliseconds. */
int64_t sbx_now_ms(void);
int64_t sbx_wall_ms(void);

/* The absolute time ms milliseconds from now on clock (for timed waits). */
struct timespec sbx_deadline_after(clockid_t clock, int64_t ms);

/* Sleep for ms milliseconds (restarts on EINTR). */
void sbx_sleep_ms(int64_t ms);

/* Generate a random RFC 4122 v4 UUID into out (37 bytes). Returns 0 or -errno. */
/* A TCP socket listening on ip:port (a numeric address; IPv6 only v6),
 * non-blocking, close-on-exec, SO_REUSEADDR (TIME_WAIT of earlier
 * connections must not block a re-listen), with a backlog of
 * SBX_LISTEN_BACKLOG (a burst of clients must not overflow the accept queue:
 * SYN-ACK retries take seconds). The fd, or -errno with err set. */
#define SBX_LISTEN_BACKLOG 4096
int sbx_listen_tcp(const char *ip, int port, struct sbx_error *err);

int sbx_uuid(char out[37]);

/* Random hex string of 2*nbytes chars into out (out must hold 2*nbytes+1). */
int sbx_random_hex(char *out, size_t nbytes);

/* A list call's last step: *ret (ret is a T **) becomes a fresh array of
 * n + 1 zeroed T of out_size bytes (never NULL on success, even for n == 0),
 * element i made from rows[i] (n elements of in_size bytes) by conv, and
 * *ret_n n. rows is freed either way. 0 or -ENOMEM (nothing written). */
int sbx_rows_convert(void *rows, size_t n, size_t in_size, size_t out_size, void (*conv)(const void *row, void *out),
                     void *ret, size_t *ret_n);

#endif
