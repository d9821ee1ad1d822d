/* runner_ext.h — what the parts of sandboxd-runner share (internal to the
 * runner binary): the main loop and framing in sandboxd-runner.c, workspace
 * files in runner_files.c, services in runner_svc.c. All single-threaded:
 * everything runs on the one poll loop. */
#ifndef SANDBOXD_RUNNER_EXT_H
#define SANDBOXD_RUNNER_EXT_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandboxd/runner_proto.h"

/* sandboxd-runner.c */
int64_t now_ms(void);
/* Queue a frame for the daemon (dropped when not connected). */
void send_frame(uint16_t type, uint16_t flags, uint32_t tag, const void *p1, size_t n1, const void *p2, size_t n2);
/* Bytes a reply may still take in the outgoing buffer. */
size_t out_reply_room(void);
/* Signal every descendant of root; SIGKILL freezes and repeats until none is left. */
void tree_kill(pid_t root, int sig);
/* Up to max (pid, ppid) pairs of live processes in the container. */
size_t proc_scan(pid_t *pid, pid_t *ppid, size_t max);

/* runner_files.c */
void files_frame(const struct rp_hdr *h, const unsigned char *p);
void files_disconnected(void); /* drop half-written files */
/* Resolve path (absolute, under /workspace) the way the tenant's own tools
 * would, refusing (-EPERM) as soon as it leads outside /workspace; missing
 * components are allowed only when allow_missing (then *ret_missing is the
 * index in ret where the first missing component starts, else -1). */
int ws_resolve(const char *path, bool allow_missing, char *ret, size_t size, int *ret_missing);
/* Open (O_DIRECTORY) the directory ret of ws_resolve, making what is missing
 * (mode). Returns an fd or -errno. */
int ws_open_dir(const char *resolved, int missing, mode_t mode);
/* openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) of a resolved path below
 * /workspace; an O_NOFOLLOW walk where the kernel lacks openat2. */
int ws_open(const char *resolved, int flags, mode_t mode);

/* runner_svc.c */
void svc_frame(const struct rp_hdr *h, const unsigned char *p);
void svc_connected(void);              /* after RP_HELLO: every held service's state */
bool svc_reaped(pid_t pid, int status); /* true if pid was a service's shim */
int svc_timeout(int64_t now);          /* ms until svc_tick has work, -1 for none */
void svc_tick(int64_t now);

#endif
