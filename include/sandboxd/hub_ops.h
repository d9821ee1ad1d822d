/* hub_ops.h — workspace files and services carried by a session's
 * runner (protocol: runner_proto.h, types 20-27). The daemon's half lives
 * in src/hub/hub_ops.c beside the hub (hub.c); files.c and service.c are
 * the callers, and fall back to docker exec when these return -ENOTCONN.
 *
 * Every reply is untrusted tenant input: lengths, errnos, pids, ports and
 * markers are range-checked on the hub thread (a bad one is a protocol
 * error that closes the connection), a reply is matched to a request made
 * on that very connection, and a service report only ever lands in its own
 * session's cache.
 *
 * Locks: the ops lock guards the pending requests and the services cache
 * (paired with a condition variable broadcast on every reply and report).
 * It is a leaf: never held across a send or a callback. */
#ifndef SANDBOXD_HUB_OPS_H
#define SANDBOXD_HUB_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/runner_proto.h"

struct hub;

/* ---- files (paths: normalised, absolute, under /workspace) ---- */

/* Read up to length bytes from offset into buf (several round trips of at
 * most RP_CHUNK). *ret_size is the file's size. -errno as the runner found
 * it (-ENOENT, -EISDIR, -EINVAL for a non-regular file, -EACCES, -EPERM for
 * a path that leads outside /workspace), -ENOTCONN without a runner,
 * -ETIMEDOUT past timeout_ms. */
int hub_file_read(struct hub *h, const char *user, const char *session, const char *path, uint64_t offset,
                  size_t length, char *buf, size_t *ret_len, uint64_t *ret_size, int timeout_ms);
/* Write data as the file's whole content (parents made, a temporary renamed
 * over the target), in frames that fit RP_MAX_TO_RUNNER. */
int hub_file_write(struct hub *h, const char *user, const char *session, const char *path, const void *data, size_t len,
                   int timeout_ms);
/* type: 'f' 'd' 'l' 'o'; name is not NUL-terminated (1..255 bytes, no '/'). */
typedef void (*hub_entry_fn)(void *ud, char type, int64_t size, const char *name, size_t name_len);
int hub_file_list(struct hub *h, const char *user, const char *session, const char *path, hub_entry_fn fn, void *ud,
                  bool *ret_truncated, int timeout_ms);

/* A change (RP_FILE_MKDIR, RP_FILE_REMOVE, or RP_FILE_MOVE of path to
 * path2) done by the runner, confined as above: -EEXIST, -ENOENT,
 * -ENOTDIR, -EPERM, -EINVAL for /workspace itself, -ENOTCONN, -ETIMEDOUT. */
int hub_file_change(struct hub *h, const char *user, const char *session, uint16_t type, const char *path,
                    const char *path2, int timeout_ms);

/* ---- directory watches (RP_WATCH_*; E2B's WatchDir) ----
 *
 * A watch lives on the session's connection: when that closes (the
 * container stopped, was removed or its runner went) the watch ends and
 * hub_watch_take says -ECONNRESET. Its events wait in a queue of at most
 * HUB_WATCH_QUEUE events and HUB_WATCH_QUEUE_BYTES bytes of names; past it
 * they are dropped and the next take says lost, so a runner that floods
 * never grows the daemon. At most HUB_WATCH_PER_SESSION watches per session,
 * HUB_WATCH_PER_USER per user (so one tenant's sessions cannot hold every
 * watch) and HUB_WATCH_GLOBAL in the process. */
#define HUB_WATCH_QUEUE 512
#define HUB_WATCH_QUEUE_BYTES (64 * 1024)
#define HUB_WATCH_PER_SESSION 16
#define HUB_WATCH_PER_USER 64
#define HUB_WATCH_GLOBAL 256

struct hub_watch;
struct hub_watch_event {
        int kind;   /* E2B's EventType: 1 create, 2 write, 3 remove, 4 rename, 5 chmod */
        char *name; /* relative to the watched directory, NUL-terminated (no NUL inside) */
};

/* Watch path (a directory under /workspace), with recursive everything
 * below it. -EMFILE past HUB_WATCH_PER_SESSION, -EDQUOT past
 * HUB_WATCH_PER_USER, -ENFILE past
 * HUB_WATCH_GLOBAL, the runner's -ENOENT, -ENOTDIR, -EPERM, -ENOSPC,
 * -ENOTCONN, -ETIMEDOUT. */
int hub_watch_start(struct hub *h, const char *user, const char *session, const char *path, bool recursive,
                    int timeout_ms, struct hub_watch **ret);
/* Wait up to timeout_ms for an event, then take up to max (names malloc'd:
 * hub_watch_events_free). The count (0 on timeout), or -ECONNRESET once the
 * watch ended with its connection. *ret_lost: events were dropped since the
 * last take. */
int hub_watch_take(struct hub_watch *w, struct hub_watch_event *out, size_t max, int timeout_ms, bool *ret_lost);
void hub_watch_events_free(struct hub_watch_event *ev, size_t n);
/* The watch ended with its connection (what hub_watch_take says as
 * -ECONNRESET once its queue is read), without taking anything. It still
 * counts against the caps until hub_watch_stop. */
bool hub_watch_ended(struct hub_watch *w);
/* Stop it (RP_WATCH_STOP) and free it. NULL is fine. */
void hub_watch_stop(struct hub_watch *w);
/* Watches open now (tests). */
size_t hub_watch_count(struct hub *h);

/* ---- services ---- */

struct hub_svc_state {
        char marker[RP_MARKER_MAX + 1];
        int pid;
        enum rp_svc_phase phase;
        int exit_code; /* RP_SVC_EXITED */
        int err;       /* RP_SVC_FAILED: a positive errno */
        size_t n_ports;
        int ports[RP_SVC_MAX_PORTS];
};

struct hub_svc_spec {
        const char *marker;     /* 1..RP_MARKER_MAX printable bytes, no '/' or space */
        const char *dir;        /* under /workspace: run.sh, stdout.log, stderr.log, exit */
        const char *workdir;    /* absolute */
        const char *const *env; /* "K=V", NULL-terminated; added to the container's */
        const char *command;    /* run with sh */
        size_t command_len;
};

/* Start a service under the runner; *ret is its first state (RUNNING with
 * its pid, or FAILED with err: ENOENT for a missing workdir). */
int hub_svc_start(struct hub *h, const char *user, const char *session, const struct hub_svc_spec *spec, int timeout_ms,
                  struct hub_svc_state *ret);
/* Signal the service's whole tree (SIGTERM, SIGKILL, ...). */
int hub_svc_signal(struct hub *h, const char *user, const char *session, const char *marker, int sig);
/* The daemon recorded the service's end: the runner and the cache drop it. */
void hub_svc_forget(struct hub *h, const char *user, const char *session, const char *marker);
/* The latest report for marker from the session's live runner. */
bool hub_svc_get(struct hub *h, const char *user, const char *session, const char *marker, struct hub_svc_state *ret);
/* Every report held for the session (malloc'd array). */
int hub_svc_states(struct hub *h, const char *user, const char *session, struct hub_svc_state **ret, size_t *ret_n);
/* Wait up to timeout_ms for marker to be reported ended. True if it is
 * (*ret then holds its end); false on timeout or a lost connection. */
bool hub_svc_wait_end(struct hub *h, const char *user, const char *session, const char *marker, int timeout_ms,
                      struct hub_svc_state *ret);
/* Called on the hub thread after each report of a session's services (a
 * state or its ports changed). Must not block: hand the work over. */
typedef void (*hub_svc_fn)(void *ud, const char *user, const char *session);
void hub_svc_set_handler(struct hub *h, hub_svc_fn fn, void *ud);

/* How many file operations and service starts went through runners (tests). */
void hub_ops_counts(struct hub *h, uint64_t *ret_files, uint64_t *ret_services);

#endif
