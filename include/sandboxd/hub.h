/* hub.h — the daemon's side of the in-container runner: one unix socket
 * per session, the connection from that session's sandboxd-runner, and
 * executions carried over it (protocol: runner_proto.h). Workspace files
 * and services ride the same connection: hub_ops.h.
 *
 * Each session gets {data_dir}/runner/<hash of user:session>/ : the parent
 * {data_dir}/runner is root 0700, so no other host user reaches any of it;
 * the session directory is root 0755 and holds runner.sock (0666), the
 * gateway's sockets and RUNNER_PEER_FILE (which process is the runner:
 * hub_peer.h). It
 * is bind-mounted read-only at RP_SOCKET_DIR in that session's container
 * alone, so the container can connect but never plant or replace anything,
 * and a socket reaches exactly one session.
 *
 * Over a node link (node.h, hub_set_node) the directory, the socket
 * and the runner check are the node agent's: each accepted connection
 * comes in through hub_attach, and the frames are the same.
 *
 * Everything the runner sends is untrusted tenant input: frames are size
 * capped, tags must name an execution started on that very connection, and
 * lengths and fields are checked before use. A protocol error closes the
 * connection; its executions end as lost (the caller decides what that
 * means). One connection per session at a time, and only from the
 * container's runner itself (hub_peer.h): tenant code that dials the
 * socket is refused at accept.
 *
 * Threads: one hub thread ("sbx-runner") accepts and reads every
 * connection (epoll) and calls the output callbacks. Fairness: it reads at
 * most RUNNER_READ_ROUNDS buffers from one connection per turn, so a runner
 * that never pauses is read again only after every other ready connection
 * had its turn; and it acknowledges output itself (a write that never
 * waits), so a flood costs no other thread a wake-up per frame. Callers
 * start, feed, signal and wait for executions from their own threads. The hub's lock
 * guards the channel list, each channel's connection state and its
 * executions; each execution's lock guards its state (paired with its
 * condition variable). Writes to a connection hold that channel's write
 * lock only, with a deadline. */
#ifndef SANDBOXD_HUB_H
#define SANDBOXD_HUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"
#include "sandboxd/hub_peer.h"
#include "sandboxd/runner_proto.h"

struct hub;
struct hub_exec;

/* Receive buffers (each up to RP_HDR_LEN + RP_MAX_FROM_RUNNER bytes) the hub
 * reads from one connection per turn of its loop. */
#define RUNNER_READ_ROUNDS 8

/* Start the hub thread. The runner binary is cfg->runner_binary, or
 * sandboxd-runner next to the running executable when that is empty. */
int hub_new(const struct sbx_config *cfg, struct hub **ret, struct sbx_error *err);
/* Stops the thread, closes every socket. Containers keep running. NULL is fine. */
void hub_free(struct hub *h);

/* Host path of the runner binary if it is usable (a root-owned regular file
 * nobody else may write), else NULL: containers then run without a runner
 * and executions use docker exec. Checked on every call (cheap). */
const char *hub_binary(struct hub *h);

/* Make (or re-make after a restart) the session directory and listen in it.
 * Idempotent. *ret_dir is the host directory to bind-mount read-only. */
int hub_prepare(struct hub *h, const char *user, const char *session, char ret_dir[SBX_PATH_MAX],
                struct sbx_error *err);
/* The same on the node named node (an engine that places containers
 * itself said where: kube-scheduler); NULL: as hub_prepare. Only
 * over a node link; in one process node is ignored. */
int hub_prepare_on(struct hub *h, const char *user, const char *session, const char *node, char ret_dir[SBX_PATH_MAX],
                   struct sbx_error *err);
/* After a daemon restart: listen again for a session whose directory
 * exists (its container was made with a runner, which reconnects on its
 * own). 0 when listening, -ENOENT when the session never had a runner. */
int hub_adopt(struct hub *h, const char *user, const char *session);

/* The session's runner directory while the hub listens for it, else -ENOENT. */
int hub_dir(struct hub *h, const char *user, const char *session, char ret_dir[SBX_PATH_MAX]);

/* Called on the hub thread when a runner that had said hello broke the
 * protocol ("hub_protocol_error") or missed its heartbeats for three
 * RUNNER_HEARTBEAT_MS intervals ("hub_unresponsive"). */
typedef void (*hub_lost_fn)(const char *user, const char *session, const char *cause, void *userdata);
void hub_set_lost_handler(struct hub *h, hub_lost_fn fn, void *userdata);

/* Who may be a session's runner: hub_peer_verify (hub_peer.h) unless
 * replaced here, which only tests whose fake runner is a host process do,
 * before the first hub_prepare. A connection it refuses is closed at
 * once: it never takes the runner's place nor makes the runner wait. */
typedef int (*hub_peer_fn)(int fd, int dirfd, const struct hub_peer *known, struct hub_peer *ret, const char **ret_why);
void hub_set_peer_check(struct hub *h, hub_peer_fn fn);

/* Stop listening for the session and remove its directory. */
void hub_drop(struct hub *h, const char *user, const char *session);

/* Hand the runner directory and channel of (from_user, from_session) to
 * (to_user, to_session): the directory is renamed (the container's bind
 * mount follows it) and the live channel, connection included, is keyed by
 * the new name. A warm pool claim (pool.h) uses it. Idempotent: when the
 * old directory is gone and the new one exists it is done. h may be NULL
 * (restart recovery, before the hub runs): then only the directory moves,
 * under {data_dir}/runner. A directory the target already had (a runner of
 * an earlier container of that session) is replaced. With h NULL and the
 * same key on both sides the directory is removed (a discarded pool slot). */
int hub_rekey(struct hub *h, const struct sbx_config *cfg, const char *from_user, const char *from_session,
              const char *to_user, const char *to_session, struct sbx_error *err);

/* Wait up to timeout_ms for the session's runner to be connected. True if
 * it is. False at once without a channel, and for a container whose
 * runner never came although a wait already timed out (no runner in it). */
bool hub_wait(struct hub *h, const char *user, const char *session, int timeout_ms);

/* The session's container is paused (frozen) or thawed again: a frozen
 * runner is neither pinged nor declared hub_unresponsive; on thaw its
 * heartbeat clock starts afresh. Callers that need it resume the session
 * first (session_acquire). h may be NULL. */
void hub_set_frozen(struct hub *h, const char *user, const char *session, bool frozen);

/* The connected runner's version string ("" when none). */
bool hub_version(struct hub *h, const char *user, const char *session, char *ret, size_t size);

struct egress_net;
struct hub_exec_spec {
        const char *workdir;   /* absolute */
        const char *code_path; /* NULL: no code file */
        const void *code;
        size_t code_len;
        const char *const *argv; /* NULL-terminated */
        const char *const *env;  /* "K=V", NULL-terminated; added to the container's */
        bool stdin_pipe;         /* else stdin is /dev/null */
        bool tty;                /* on a new pseudo-terminal (stdin, stdout, stderr); output is stdout */
        int rows, cols;          /* its size (tty): 1..RP_TTY_MAX_ROWS, 1..RP_TTY_MAX_COLS */
        /* its network narrowing (egress_rules.h; NULL or not set: the session's egress) and the
         * execution id its refusals are audited under (hub_narrowing) */
        const struct egress_net *network;
        const char *network_id;
};

struct runner_exit {
        int exit_code; /* 128+signal when killed */
        int signal;
        uint64_t cpu_user_ms;
        uint64_t cpu_system_ms;
        uint64_t max_rss_kb;
};

/* Called on the hub thread for each output chunk (stream 0 stdout, 1
 * stderr). Must not block for long. */
typedef void (*hub_output_fn)(void *userdata, int stream, const void *data, size_t len);

/* Send an execution to the session's runner. -ENOTCONN if none is
 * connected, -E2BIG if the request does not fit one frame. */
int hub_exec_start(struct hub *h, const char *user, const char *session, const struct hub_exec_spec *spec,
                   hub_output_fn on_output, void *userdata, struct hub_exec **ret, struct sbx_error *err);
/* Wait up to timeout_ms for the end: 0 and *ret when it exited,
 * -ETIMEDOUT while it runs, -ECONNRESET if the connection was lost,
 * another -errno (with err) if the runner could not start it.
 * While it waits it acknowledges (RP_ACK) the output on_output has
 * returned from, so the runner may free it: every 64 KiB, and at the end of
 * a wait that timed out. Call it from one thread at a time. */
int hub_exec_wait(struct hub_exec *x, int timeout_ms, struct runner_exit *ret, struct sbx_error *err);
/* Hand stdin to the runner, never waiting: returns how many bytes were
 * taken (0 while RP_STDIN_WINDOW bytes are still unread by the process),
 * or -errno. */
ssize_t hub_exec_write_stdin(struct hub_exec *x, const void *data, size_t len);
int hub_exec_close_stdin(struct hub_exec *x);
/* Narrow x's network from now on (net set), or stop (NULL): a kernel
 * serving one narrowed cell (id: the cell's execution id). -ENOMEM. */
int hub_exec_set_network(struct hub_exec *x, const struct egress_net *net, const char *id);
/* The egress proxy's question (egress.h, egress_narrow_fn): true and the
 * narrowing (and the execution id) of the session's execution tag
 * (from RP_FROM_EXEC), or for an unattributed connection (RP_FROM_UNKNOWN)
 * "none" as soon as any execution of the session is narrowed. Any thread;
 * takes the hub's lock briefly. */
bool hub_narrowing(struct hub *h, const char *user, const char *session, unsigned int from, uint32_t tag,
                   struct egress_net *ret, char ret_id[40]);
/* Signal the execution's whole tree (SIGTERM, SIGKILL, ...). */
int hub_exec_signal(struct hub_exec *x, int sig);
/* Forget it (the process is not touched). NULL is fine. The runner keeps
 * the execution (and its unacknowledged output and exit) until
 * hub_exec_forget(): a daemon that stops before can adopt it again. */
void hub_exec_free(struct hub_exec *x);

/* ---- durable executions (protocol: RP_JOB, RP_RESUME, RP_ACK, RP_FORGET) ----
 *
 * A runner keeps every execution, with its output from the last
 * acknowledgement on and its exit status, until the daemon forgets it; it
 * survives the daemon's restart or SIGKILL. A daemon that starts again
 * says which executions it will adopt (hub_expect, before any
 * runner connects); when a runner connects it lists what it holds, and
 * every execution nobody expects is forgotten (killed if it still runs). */

/* The tag of an execution (persisted with it, to adopt it after a restart). */
uint32_t hub_exec_tag(const struct hub_exec *x);
/* The daemon recorded its end: the runner may drop it. */
int hub_exec_forget(struct hub_exec *x);
void hub_expect(struct hub *h, const char *user, const char *session, uint32_t tag);
void hub_unexpect(struct hub *h, const char *user, const char *session, uint32_t tag);
/* Take over execution `tag` of the session's runner: waits up to timeout_ms
 * for the runner to connect and list what it holds. have[k]: the bytes of
 * each stream the caller already has; on_output gets what follows, from
 * ret_start[k] (have[k] unless the runner had already dropped bytes the
 * caller acknowledged but did not keep: output past its cap). -ETIMEDOUT
 * while no runner listed its executions, -ENOENT if it does not hold this
 * one (the expectation is dropped either way except on -ETIMEDOUT). */
int hub_exec_adopt(struct hub *h, const char *user, const char *session, uint32_t tag, const uint64_t have[2],
                   hub_output_fn on_output, void *userdata, int timeout_ms, struct hub_exec **ret,
                   uint64_t ret_start[2], struct sbx_error *err);

/* ---- the node link (node.h) ---- */

struct node_ops;

/* The session's epoch: bump true makes it one more (a new container, or a
 * move) and says the new one. 0 or -errno. */
typedef int (*hub_epoch_fn)(const char *user, const char *session, bool bump, uint64_t *ret, void *userdata);
/* Set once, before the first hub_prepare. Epochs grow with every
 * prepare (a new container) and rekey (a move), whatever the link. */
void hub_set_epoch_fn(struct hub *h, hub_epoch_fn fn, void *userdata);
/* In this process (no node link), a session's directory may be reached by
 * the runner of an earlier container that its engine could not kill (a lost
 * Kubernetes node: the Pod is deleted, its containers run on until the
 * kubelet is back). hub_fence_runner, called once the session's
 * container was removed (before the next one's hub_prepare, which
 * moves the epoch), fences the runner known so far: its connection is
 * closed, and a later connection from that container (its init) is
 * refused, whatever the peer check says; the list is kept in the session
 * directory (hub_peer.h), for a restarted daemon and the gateway.
 * The refused fn is told the first refusal of each such container, from the
 * hub thread: the epoch that container had and the session's now. Set once,
 * before the hub serves. No-op over a node link (the node checks epochs). */
void hub_fence_runner(struct hub *h, const char *user, const char *session);
typedef void (*hub_refused_fn)(const char *user, const char *session, uint64_t presented, uint64_t current,
                               void *userdata);
void hub_set_refused_fn(struct hub *h, hub_refused_fn fn, void *userdata);
/* The node part is across a link: directories and sockets are the node's
 * (ops), runner connections come in through hub_attach. Set once,
 * before the first hub_prepare. Without it the hub makes the
 * directories and listens itself (the in-process link: direct calls). */
void hub_set_node(struct hub *h, const struct node_ops *ops, void *node);
/* Whether the session directories are across a node link (hub_set_node). */
bool hub_remote(const struct hub *h);
/* A connection the node accepted on the session's runner.sock and checked
 * (hub_peer.h). Takes fd. -ENOENT without a channel, -EBUSY when a
 * runner is connected already (one per session): fd is closed. */
int hub_attach(struct hub *h, const char *user, const char *session, int fd);
/* The link under the session's runner connection went: when the
 * connection closes, its executions wait (up to node.fence) for the runner
 * to come back through a new link instead of ending as lost. */
void hub_suspend(struct hub *h, const char *user, const char *session);
/* A node (re)connected: open the directory of every session placed on it
 * (node NULL: of every session) on it again. */
void hub_reopen(struct hub *h, const char *node);
/* The node is gone for good: every detached execution of the sessions
 * placed on it (node NULL: of all sessions) ends as lost and each of those
 * sessions with a runner channel is reported lost ("node_lost") to the lost
 * handler; their epochs grow, so the node is refused if it comes back with
 * the old one. Returns how many sessions were fenced. */
size_t hub_fence(struct hub *h, const char *node);

/* A tty execution's new window size (the runner sends SIGWINCH). -EINVAL
 * out of range. */
int hub_exec_resize(struct hub_exec *x, int rows, int cols);

/* Runner ping interval; silent for three of them counts as a dead
 * container. 2 s finds a dead runner in 6 s at a negligible cost. */
#define RUNNER_HEARTBEAT_MS 2000

#endif
