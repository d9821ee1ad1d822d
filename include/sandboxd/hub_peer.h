/* hub_peer.h — whether the process at the other end of a connection to
 * a session directory's socket (runner.sock, fwd.sock) is that container's
 * runner, and not tenant code that dialled the same socket.
 *
 * The socket is reachable only from the one container that mounts the
 * session directory; in it the runner and the tenant run as the same uid,
 * so a secret would be readable by both, and the peer's process ancestry
 * decides instead. The container runs Docker's init as PID 1 with the runner
 * as its command (container.c: HostConfig.Init, the runner as entrypoint),
 * and the runner is a child subreaper (so is every execution's and
 * service's shim): while it lives, no other process of the container is a
 * child of the init, and when it dies the init exits and the kernel kills
 * the rest. The peer (SO_PEERCRED: its pid as the daemon sees it) passes
 * when all of these hold:
 *   - it is one pid namespace below the daemon's (NSpid has two entries),
 *     and not traced;
 *   - its parent is that namespace's init (NSpid "<pid> 1", the same
 *     namespace);
 *   - its /run/sandboxd is this very session directory (device and inode)
 *     and it runs the binary mounted at /run/sandboxd-runner, both resolved
 *     in its own root without following any link: the container of this
 *     session, running the runner;
 *   - no other child of the init is older (the container's own /proc): the
 *     init's first child is the runner, anything the tenant could make the
 *     init adopt or fork came later;
 *   - it is the same live process after the reads (SO_PEERPIDFD where the
 *     kernel has it, the start time in any case): a pid reused meanwhile is
 *     not judged in the peer's place.
 * It needs the daemon in the pid namespace of dockerd (a peer it cannot
 * see has pid 0 and is refused) and root (it reads other processes' /proc).
 * Nothing new is asked of the runner: runners of containers started before
 * an upgrade pass the same way.
 *
 * gVisor: under runsc, SO_PEERCRED names the sandbox's own process
 * (/usr/bin/runsc, uid 0) for every process inside, so ancestry cannot tell
 * the runner from tenant code there. runsc sessions get no runner and no
 * session directory (session_container.c), so there is nothing to
 * impersonate; a runner under runsc would be refused (fails closed). */
#ifndef SANDBOXD_HUB_PEER_H
#define SANDBOXD_HUB_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The runner, by pid and start time (clock ticks after boot: a process is
 * unique by both), and its container's init the same way. */
struct hub_peer {
        pid_t pid; /* as the daemon sees it; 0: none */
        uint64_t start;
        pid_t init_pid;
        uint64_t init_start;
};

/* 0 when the peer of the connected unix socket fd is the runner of the
 * container that mounts dirfd (the session directory), with *ret its
 * identity; -EPERM (or -errno of a failed read) otherwise, with *ret_why
 * saying why (a static string). known: the runner this socket last
 * accepted (may be NULL or pid 0); the same live process passes at once,
 * and any other child of that runner's init is refused (the runner of that
 * container is known, even once it is dead and the init, held by a
 * debugger, has not exited). */
int hub_peer_verify(int fd, int dirfd, const struct hub_peer *known, struct hub_peer *ret, const char **ret_why);

/* The runner accepted last is also kept in the session directory (root's,
 * read-only in the container), so a restarted daemon knows it too. Not a
 * secret: numbers only, which the container may read. */
#define RUNNER_PEER_FILE ".runner-peer"
/* Read it: 0, -ENOENT, or -EPROTO for a file that does not parse. */
int hub_peer_load(int dirfd, struct hub_peer *ret);
/* Replace it (a temporary renamed over it). One writer per directory. */
int hub_peer_save(int dirfd, const struct hub_peer *peer);

/* The runners of a session's earlier containers, fenced by their init (the
 * hub, hub.h hub_set_refused_fn): a container its engine could not
 * kill (a lost Kubernetes node's Pod) may dial the same directory, and its
 * runner passes hub_peer_verify. Kept in the directory too, so a
 * restarted daemon and the gateway (fwd.sock) refuse them as well: one
 * "init_pid init_start epoch" a line, the newest last. */
#define RUNNER_FENCED_FILE ".runner-fenced"
#define RUNNER_FENCED_MAX 4 /* earlier containers remembered per session (the oldest goes first) */
struct hub_fence {
        pid_t init_pid;
        uint64_t init_start;
        uint64_t epoch; /* the session's epoch while that container was current */
};
/* Read the list: 0 (*ret_n may be 0), -ENOENT without one. */
int hub_fence_load(int dirfd, struct hub_fence ret[RUNNER_FENCED_MAX], size_t *ret_n);
/* Replace it (a temporary renamed over it). One writer per directory. */
int hub_fence_save(int dirfd, const struct hub_fence *list, size_t n);
/* Whether peer (as hub_peer_verify returned it) is the runner of a fenced
 * container of this directory; *ret_epoch (may be NULL) that container's epoch. */
bool hub_peer_fenced(int dirfd, const struct hub_peer *peer, uint64_t *ret_epoch);

#endif
