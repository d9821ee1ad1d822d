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
