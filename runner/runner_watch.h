/* runner_watch.h — a directory watcher for E2B's WatchDir (issue 36): one
 * inotify instance over a directory the caller opened (confined to
 * /workspace by runner_files.c's ws_open), and with recursive every
 * directory below it, including those made later. Events are E2B's kinds
 * with the name relative to the watched directory, queued up to
 * RWATCH_QUEUE_MAX; past it they are dropped and the watcher says it
 * overflowed (as the kernel's own IN_Q_OVERFLOW). At most RWATCH_DIRS_MAX
 * directories per watcher: one past it is not watched, and said so the same
 * way. Pure libc, single-threaded: it belongs to the runner's main loop. */
#ifndef SANDBOXD_RUNNER_WATCH_H
#define SANDBOXD_RUNNER_WATCH_H

#include <stdbool.h>
#include <stddef.h>

#define RWATCH_QUEUE_MAX 1024
#define RWATCH_DIRS_MAX 1024
#define RWATCH_DEPTH_MAX 64
#define RWATCH_NAME_MAX 4096

/* E2B's filesystem.EventType, with its numbers */
enum rwatch_kind {
        RWATCH_CREATE = 1,
        RWATCH_WRITE = 2,
        RWATCH_REMOVE = 3,
        RWATCH_RENAME = 4,
        RWATCH_CHMOD = 5,
};

struct rwatch_event {
        enum rwatch_kind kind;
        char name[RWATCH_NAME_MAX]; /* relative to the watched directory */
};

struct rwatch;

/* Watch the directory dirfd refers to (the fd stays the caller's). 0 with
 * *ret, or a negative errno (ENOTDIR, EMFILE, ENOSPC: the user's inotify
 * limits). */
int rwatch_open(int dirfd, bool recursive, struct rwatch **ret);
/* The fd to poll for POLLIN. */
int rwatch_fd(const struct rwatch *w);
/* Read what the kernel has (never blocks) into the queue. 0, or -errno. */
int rwatch_read(struct rwatch *w);
/* Take up to max queued events, oldest first: how many. */
size_t rwatch_take(struct rwatch *w, struct rwatch_event *out, size_t max);
/* Events were lost since the last call (the queue or the directory cap was
 * full, or the kernel's queue overflowed); clears the flag. */
bool rwatch_overflowed(struct rwatch *w);
/* Directories watched now. */
size_t rwatch_dirs(const struct rwatch *w);
void rwatch_close(struct rwatch *w);

#endif
