/* listener.h — the socket plumbing the two socket fronts share (api/api.c,
 * admin/admin.c): binding a Unix socket safely, accepting with back-off,
 * reading capped lines and writing without SIGPIPE, and the served socket
 * (sockserver: an accept thread and one worker thread per connection, with
 * caps in total and per peer uid). Private to src/ (sandboxd_core's private
 * include directory). */
#ifndef SANDBOXD_LISTENER_H
#define SANDBOXD_LISTENER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "sandboxd/common.h"

struct listener {
        int fd;
        int wake[2]; /* a pipe: writing to it stops listener_accept */
        dev_t dev;   /* the socket file we created, so we unlink only ours */
        ino_t ino;
        char path[108];
};

/* Create the parent directory (0755) if needed, replace a stale socket file
 * (only if lstat says it is a socket and nothing answers connect; anything
 * else there is refused), bind in a private 0700 directory beside it, set
 * mode (and group gid unless (gid_t)-1) on the socket, rename it into place
 * and listen — so the socket is never reachable with looser permissions. */
int listener_open(struct listener *l, const char *path, mode_t mode, gid_t gid, struct sbx_error *err);
/* Close and unlink the socket file if it is still ours. Safe to call on a
 * zeroed or already closed listener. */
void listener_close(struct listener *l);
/* Wake every thread blocked in listener_accept or in a linereader given
 * listener_stop_fd(): the pipe is written once and never drained, so it
 * stays readable for every later poll too. */
void listener_wake(struct listener *l);
int listener_stop_fd(const struct listener *l);
bool listener_stopping(const struct listener *l);
/* Wait for a connection: 0 with *ret_fd (close-on-exec), or -ESHUTDOWN once
 * woken. Backs off (up to 1 s, waking early on a stop) on EMFILE, ENFILE,
 * ENOBUFS and ENOMEM rather than spinning. */
int listener_accept(struct listener *l, const char *what, int *ret_fd);

/* The peer's pid, uid and gid (SO_PEERCRED). */
int listener_peer(int fd, struct ucred *ret);

/* Send all of buf (MSG_NOSIGNAL: a closed peer gives -EPIPE, never a
 * signal). */
int listener_send_all(int fd, const void *buf, size_t len);

/* Line reading with a hard cap: never buffers more than max + 1 bytes. */
struct linereader {
        int fd;
        size_t max;
        char *buf;
        size_t len, cap;
        size_t consumed; /* bytes of buf already handed out as lines */
        bool eof;
};
void linereader_init(struct linereader *lr, int fd, size_t max);
void linereader_done(struct linereader *lr);
/* Next line without its '\n' (NUL-terminated in place, valid until the next
 * call): 1, or 0 at EOF (a final unterminated line is handed out first),
 * -E2BIG for a line over max, -ETIMEDOUT when no complete line arrived
 * within timeout_ms (-1: no limit), -ECANCELED when stop_fd (-1: none)
 * became readable, or -errno. */
int linereader_next(struct linereader *lr, char **ret_line, size_t *ret_len, int timeout_ms, int stop_fd);

/* A served socket: a listener, an accept thread and one detached worker
 * thread per connection (at most max_conns, at most max_per_uid from one
 * peer uid other than root, and of those at most max_unauth_per_uid (0: no
 * such cap) not yet marked with sockserver_authenticated; past any of them
 * a connection gets a one-line
 * {"ok":false,"error":{"code":"busy",...}} and is closed). The
 * worker runs fn(fd, peer, ud) and closes fd when it returns. Accepted fds
 * have a send timeout, so a peer that stops reading cannot block a writer
 * for ever.
 *   srv->lock guards the connection list and count. */
struct sockserver;
typedef void (*sockserver_fn)(struct sockserver *srv, int fd, const struct ucred *peer, void *ud);

int sockserver_start(const char *what, const char *thread_name, const char *path, mode_t mode, gid_t gid,
                     size_t max_conns, size_t max_per_uid, size_t max_unauth_per_uid, sockserver_fn fn, void *ud,
                     struct sockserver **ret, struct sbx_error *err);
/* The connection on fd (a worker's own) has authenticated: it no longer
 * counts against max_unauth_per_uid. */
void sockserver_authenticated(struct sockserver *srv, int fd);
/* Stop accepting, shut every connection down (workers see EOF or the stop
 * fd), wait for the workers to return, close and unlink. NULL is fine. */
void sockserver_stop(struct sockserver *srv);
/* Readable once the server stops: give it to linereader_next. */
int sockserver_stop_fd(struct sockserver *srv);
bool sockserver_stopping(struct sockserver *srv);

#endif
