/* runner_ext.h — what the parts of sandboxd-runner share (internal to the
 * runner binary): the main loop and framing in sandboxd-runner.c,
 * executions in runner_execution.c, their processes and terminals in
 * runner_proc.c, workspace files in runner_files.c, services in
 * runner_svc.c, directory watches for E2B's WatchDir in runner_watches.c
 * (over runner_watch.c's watcher, header runner_watch.h), all on the main
 * thread's one poll loop. The network
 * channels (runner_net.c) run on a second thread with an epoll loop of its
 * own: it shares no state with these (only the pure reconnect_step) and
 * blocks every signal, so SIGCHLD always reaches the main loop. */
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
/* Once *next has come: connect_fn(); on success the backoff restarts at lo,
 * on failure the next try is *backoff away and the backoff doubles up to hi.
 * (Pure: the network thread uses it too.) */
void reconnect_step(int64_t now, bool (*connect_fn)(void), int64_t *next, int64_t *backoff, int64_t lo, int64_t hi);
/* Queue a frame for the daemon (dropped when not connected). */
void send_frame(uint16_t type, uint16_t flags, uint32_t tag, const void *p1, size_t n1, const void *p2, size_t n2);
/* Bytes a reply may still take in the outgoing buffer. */
size_t out_reply_room(void);
/* A daemon is connected. */
bool connected(void);
/* Room for n more bytes of output frames (below OUT_CAP). */
bool out_room(size_t n);
/* RP_FAILED for tag: err and a message. */
void send_failed(uint32_t tag, int err, const char *msg);

/* runner_proc.c */
/* Signal every descendant of root; SIGKILL freezes and repeats until none is left. */
void tree_kill(pid_t root, int sig);
/* Up to max (pid, ppid) pairs of live processes in the container. */
size_t proc_scan(pid_t *pid, pid_t *ppid, size_t max);
/* In the forked shim: reap the leader, report on fd 3, keep reaping the subtree. Never returns. */
void proc_shim_main(pid_t leader);
/* In the forked leader: own session (the terminal's, with tty), workdir, exec. Never returns. */
void proc_leader_exec(const char *workdir, char **argv, char **envp, bool tty);
bool pty_winsize_ok(uint32_t rows, uint32_t cols);
/* A new pseudo-terminal from the container's /dev/ptmx: the master for the
 * runner, the slave for the execution (opened through the master, so no
 * path under /dev/pts is trusted). -1 with errno on failure. */
int pty_open(uint16_t rows, uint16_t cols, int *ret_master, int *ret_slave);

/* runner_execution.c */
struct job;
/* One polled fd of an execution: output k (0, 1), its status (2) or stdin (3). */
struct exec_pollref {
        struct job *j;
        int what;
};
#define EXEC_POLL_MAX (4 * RP_MAX_JOBS)
void exec_init(void);
/* RP_EXEC, RP_STDIN(_EOF), RP_SIGNAL, RP_RESUME, RP_ACK, RP_FORGET, RP_RESIZE. */
void exec_frame(const struct rp_hdr *h, const unsigned char *p);
void exec_connected(void);    /* after RP_HELLO: RP_JOB for every execution held */
void exec_disconnected(void); /* keep output and exits for the next connection */
void exec_reaped(pid_t pid);  /* pid was reaped: if it was a shim, its job knows */
/* The executions' fds to poll (at most EXEC_POLL_MAX) and the drain deadline
 * into *timeout; exec_poll_ready for each that has revents. */
nfds_t exec_poll_fill(struct pollfd *pfd, struct exec_pollref *who, int64_t now, int64_t *timeout);
void exec_poll_ready(const struct exec_pollref *who, const struct pollfd *pfd);
void exec_tick(void); /* send output and exits the loop gathered */

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

/* runner_watches.c */
void watch_frame(const struct rp_hdr *h, const unsigned char *p); /* RP_WATCH_START, RP_WATCH_STOP */
void watch_disconnected(void);                                    /* every watch ends with the connection */
nfds_t watch_poll_fill(struct pollfd *pfd);                       /* at most RP_WATCH_MAX */
void watch_poll_ready(const struct pollfd *pfd, nfds_t n);
void watch_tick(void); /* send queued events while the outgoing buffer has room */

/* runner_net.c */
/* shim runs an execution (tag; narrowed: RP_EXEC_NARROWED) or a service
 * (tag 0): its descendants' proxy connections are attributed to it (add
 * false: it is gone). Any thread. */
void runner_net_shim(pid_t shim, uint32_t tag, bool narrowed, bool add);

/* runner_svc.c */
void svc_frame(const struct rp_hdr *h, const unsigned char *p);
void svc_connected(void);               /* after RP_HELLO: every held service's state */
bool svc_reaped(pid_t pid, int status); /* true if pid was a service's shim */
int svc_timeout(int64_t now);           /* ms until svc_tick has work, -1 for none */
void svc_tick(int64_t now);

#endif
