/* runner_proto.h — the wire protocol between the daemon and sandboxd-runner.
 *
 * Shared by the daemon (src/runner*.c) and the in-container runner
 * (runner/sandboxd-runner.c, built static with musl): nothing here may need
 * more than the C library.
 *
 * Transport: a SOCK_STREAM unix socket. The daemon listens on
 * {data_dir}/runner/<key hash>/runner.sock on the host; the directory is
 * bind-mounted read-only at RP_SOCKET_DIR in the session's container and the
 * runner connects to it (reconnecting with backoff when the daemon is away).
 *
 * Framing: every frame is a 12-byte header in host byte order (both ends run
 * on the same kernel) followed by `len` payload bytes.
 *   len    payload bytes; the daemon refuses a runner frame past
 *          RP_MAX_FROM_RUNNER, the runner a daemon frame past RP_MAX_TO_RUNNER;
 *          either is a protocol error that closes the connection.
 *   type   enum rp_type
 *   flags  per type (RP_OUT_STDERR for RP_OUTPUT; RP_EXEC_* for RP_EXEC)
 *   tag    the execution the frame is about (0 for the connection itself);
 *          the daemon picks tags, unique per connection.
 *
 * Everything the runner sends is untrusted tenant input: the daemon checks
 * every length, every tag against the executions it started on that very
 * connection, and every field's range. Only the container's runner itself
 * may connect to runner.sock and fwd.sock (runner_peer.h: checked from
 * /proc at accept, nothing on the wire); tenant code is closed at once.
 *
 * Daemon -> runner
 *   RP_EXEC       payload: struct rp_exec, then NUL-terminated strings:
 *                 workdir, code_path ("" for none), argv[argc], env[envc],
 *                 then code_len raw bytes (written to code_path, 0600, before
 *                 the program starts; removed when it ends).
 *   RP_STDIN      raw bytes for the execution's stdin.
 *   RP_STDIN_EOF  close its stdin once the queued bytes are written.
 *   RP_SIGNAL     payload: uint32 signal; delivered to every process of the
 *                 execution's tree (its shim is a child subreaper, so
 *                 double-forked, setsid and `env -i` processes are in it).
 *                 SIGKILL freezes the tree first and repeats until none is left.
 *   RP_PING       heartbeat; answered with RP_PONG.
 *   RP_RESUME     re-adopt an execution the runner listed in RP_JOB after a
 *                 reconnect; payload: struct rp_offsets, the bytes of each
 *                 stream the daemon already has. Output resumes at
 *                 clamp(have, acked, produced) per stream (both ends compute
 *                 it from the RP_JOB figures), then RP_EXIT if it ended.
 *   RP_ACK        payload: struct rp_offsets: every byte of each stream
 *                 before these offsets is persisted; the runner frees them.
 *   RP_FORGET     the daemon recorded the end (or will never adopt it): the
 *                 runner drops the execution, killing its tree if it still
 *                 runs. Until then it keeps the execution, its exit status
 *                 and its unacknowledged output across reconnects.
 *   RP_RESIZE     payload: struct rp_winsize; a tty execution's window size.
 * Runner -> daemon
 *   RP_HELLO      payload: struct rp_hello then the version string.
 *   RP_STARTED    payload: uint32 pid of the execution's leader.
 *   RP_OUTPUT     output bytes (flags: RP_OUT_STDERR or stdout), at most
 *                 RP_CHUNK per frame.
 *   RP_STDIN_ACK  payload: uint32 bytes of stdin the process has taken.
 *   RP_EXIT       payload: struct rp_exit. The last frame about a tag.
 *   RP_FAILED     the execution could not start; payload: uint32 errno then
 *                 a message (not NUL-terminated). The last frame about a tag.
 *   RP_PONG       answer to RP_PING.
 *
 * The network channels (issue 14) are separate sockets in the same
 * directory, served by the daemon's gateway (gateway.h), never runner.sock:
 *   RP_EGRESS_SOCKET_NAME  egress.sock: each connection is one client of the
 *                 runner's proxy endpoint 127.0.0.1:RP_EGRESS_PORT, passed
 *                 byte for byte after one RP_EGRESS_FROM header (no other
 *                 framing). Absent for private sessions.
 *   RP_EGRESS_FROM runner -> daemon, first on each egress.sock connection,
 *                 len 0: whose client it is (issue 37 item 3), by process
 *                 (runner_net.c): flags RP_FROM_EXEC (tag = the execution's
 *                 tag), RP_FROM_NONE (a service or no execution: tag 0) or
 *                 RP_FROM_UNKNOWN (could not be attributed: tag 0), and
 *                 RP_FROM_NARROWED for an execution started with
 *                 RP_EXEC_NARROWED (its orphans, or one a restarted daemon
 *                 no longer knows, fail closed). The proxy trusts it only
 *                 from the verified runner.
 *   RP_FWD_SOCKET_NAME     fwd.sock: port forwards. The runner keeps one
 *                 control connection, opened with RP_FWD_HELLO; the daemon
 *                 sends RP_FWD_OPEN on it for each host connection; the
 *                 runner answers with a new connection to fwd.sock whose
 *                 first frame is RP_FWD_DATA (same tag and token) and whose
 *                 bytes after it are the forwarded stream, and connects that
 *                 to 127.0.0.1:<port> inside.
 *   RP_FWD_HELLO  runner -> daemon, empty; makes the connection the control.
 *   RP_FWD_OPEN   daemon -> runner, tag = forward id; struct rp_fwd_open.
 *   RP_FWD_DATA   runner -> daemon, tag = forward id; uint64 token.
 *   RP_JOB        right after RP_HELLO, one per execution the runner still
 *                 holds (running, or ended but not forgotten); payload:
 *                 struct rp_job.
 *   RP_JOBS_END   the RP_JOB list is complete (sent on every connect).
 *
 * Durable executions: the runner keeps each execution's output from the
 * last RP_ACK on (at most RP_RETAIN_CAP bytes per stream): it reads a pipe
 * only while that buffer has room, so while the daemon is away a process
 * that writes more blocks in write() instead of losing bytes. Output
 * frames go out only for executions started or resumed on the current
 * connection, in stream order, so a frame's offset is implicit.
 *
 * Terminals: RP_EXEC with RP_EXEC_TTY runs the execution on a new
 * pseudo-terminal (rows and cols in rp_exec.winsize); its output comes back
 * as stdout, RP_STDIN goes to the terminal and RP_STDIN_EOF sends ^D.
 *
 * Workspace files (types 20-23). One request in flight per tag; the runner
 * answers every request with exactly one RP_FILE_REPLY (same tag). Paths are
 * absolute, normalised, under /workspace; the runner resolves them itself,
 * refuses one that leads outside (EPERM) and opens only with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) below /workspace.
 *   RP_FILE_READ  payload: struct rp_file_req (offset, length <= RP_CHUNK),
 *                 then the path. Reply: the file's size, then the bytes.
 *   RP_FILE_WRITE flags RP_FW_BEGIN: struct rp_file_req (length = total
 *                 bytes), the path, then the first bytes; later frames are
 *                 more bytes; RP_FW_END (may be on the same frame) commits
 *                 (a temporary beside the target renamed over it). Reply
 *                 only after RP_FW_END, or at the first error.
 *   RP_FILE_LIST  payload: struct rp_file_req (offset = first entry index),
 *                 then the path. Reply: records (type byte 'f' 'd' 'l' 'o',
 *                 int64 size, uint16 name length, the name), `next` the index
 *                 to ask for next (0: done), RP_FR_TRUNCATED past
 *                 RP_FILE_LIST_MAX entries.
 *   RP_FILE_REPLY struct rp_file_reply then the data; err is a positive errno.
 *   RP_FILE_MKDIR (40) payload: struct rp_file_req (unused), then the path.
 *                 Makes the directory and its missing parents (0755, each
 *                 with mkdirat and opened O_NOFOLLOW); EEXIST when the path
 *                 exists already.
 *   RP_FILE_REMOVE (41) as MKDIR. Removes the path (a symlink itself, never
 *                 what it points to; a directory with everything below it,
 *                 walked with openat(O_NOFOLLOW) and unlinkat, at most
 *                 RP_REMOVE_DEPTH deep). /workspace itself is EINVAL.
 *   RP_FILE_MOVE (42) as MKDIR, then the destination path (both
 *                 NUL-terminated). renameat from the source's parent to the
 *                 destination's (made if missing): a symlink is moved as a
 *                 link, an existing destination file is replaced.
 *
 * Directory watchers (types 43-45, protocol 4; issue 36: E2B's WatchDir).
 *   RP_WATCH_START (43) daemon -> runner, tag = the watch (the daemon's
 *                 file tags); flags RP_WATCH_RECURSIVE; payload as
 *                 RP_FILE_MKDIR (struct rp_file_req, unused, then the path).
 *                 The directory is resolved and opened as for RP_FILE_LIST;
 *                 answered by one RP_FILE_REPLY (err: ENOTDIR, ENOENT, EPERM,
 *                 EMFILE past RP_WATCH_MAX watches, ENOSPC when the user's
 *                 inotify limits are reached).
 *   RP_WATCH_STOP (44) daemon -> runner, empty: forget the watch (no reply;
 *                 an unknown tag is ignored). A connection that closes
 *                 stops every watch the runner held.
 *   RP_WATCH_EVENT (45) runner -> daemon, tag = the watch: flags the kind
 *                 (E2B's EventType, 1 create .. 5 chmod) and the payload the
 *                 name relative to the watched directory (1..RP_WATCH_NAME_MAX
 *                 bytes, no NUL, not absolute); or flags RP_WATCH_LOST with
 *                 an empty payload: events were dropped (the runner's queue
 *                 or directory cap, or the kernel's queue, overflowed).
 *                 Sent only while the outgoing buffer has room: past that,
 *                 events wait in the watcher's bounded queue and overflow.
 *
 * Services (types 24-27). A service is named by its marker (the daemon's
 * "<name>-<start ms>"); the runner keeps up to RP_SVC_MAX of them, each under
 * a shim of its own (a child subreaper: the service's whole tree), output in
 * <dir>/stdout.log and stderr.log, the exit code in <dir>/exit.
 *   RP_SVC_START  payload: struct rp_svc_start, then NUL-terminated strings:
 *                 marker, dir, workdir, env[envc]; then cmd_len bytes of the
 *                 command (written to <dir>/run.sh and run with sh). Answered
 *                 by an RP_SVC_STATE with the same tag.
 *   RP_SVC_SIGNAL payload: uint32 signal, then the marker. Reaches every
 *                 process of the service's tree (SIGKILL: frozen, then killed
 *                 until none is left).
 *   RP_SVC_FORGET payload: the marker; the daemon has recorded its end.
 *   RP_SVC_STATE  payload: struct rp_svc_state, then the marker. Sent with
 *                 tag 0 whenever a service's state or listening ports change
 *                 (ports are polled every RP_SVC_PORT_POLL_MS while a service
 *                 runs), and for every service the runner still holds right
 *                 after each RP_HELLO.
 */
#ifndef SANDBOXD_RUNNER_PROTO_H
#define SANDBOXD_RUNNER_PROTO_H

#include <stdint.h>

#define RP_VERSION "sandboxd-runner/1"
/* 2: durable executions (RP_JOB, RP_RESUME, RP_ACK, RP_FORGET), tty; 3: RP_FILE_MKDIR, RP_FILE_REMOVE,
 * RP_FILE_MOVE (a runner of 2 would skip them and leave the call to time out: it is refused at its hello,
 * and its container's files go through docker exec) */
/* 4: RP_WATCH_START, RP_WATCH_STOP, RP_WATCH_EVENT (a runner of 3 would leave a watch unanswered) */
#define RP_PROTOCOL 4
#define RP_SOCKET_DIR "/run/sandboxd"
#define RP_SOCKET_NAME "runner.sock"
#define RP_BINARY_PATH "/run/sandboxd-runner"
#define RP_EGRESS_SOCKET_NAME "egress.sock"
#define RP_FWD_SOCKET_NAME "fwd.sock"
#define RP_EGRESS_PORT 3128

#define RP_HDR_LEN 12
#define RP_CHUNK (32 * 1024)
#define RP_MAX_FROM_RUNNER (RP_CHUNK + 256)
#define RP_MAX_TO_RUNNER (2 * 1024 * 1024)
#define RP_MAX_ARGS 4096
#define RP_STDIN_WINDOW (256 * 1024) /* stdin bytes in flight per execution */
#define RP_RETAIN_CAP (256 * 1024)   /* unacknowledged output the runner keeps per stream */
#define RP_MAX_JOBS 256              /* executions one runner holds at a time */
#define RP_TTY_MAX_ROWS 1000
#define RP_TTY_MAX_COLS 1000

enum rp_type {
        RP_HELLO = 1,
        RP_EXEC = 2,
        RP_STARTED = 3,
        RP_OUTPUT = 4,
        RP_STDIN = 5,
        RP_STDIN_EOF = 6,
        RP_STDIN_ACK = 7,
        RP_SIGNAL = 8,
        RP_EXIT = 9,
        RP_FAILED = 10,
        RP_PING = 11,
        RP_PONG = 12,
        /* 30-39: network channels (fwd.sock) */
        RP_FWD_HELLO = 30,
        RP_FWD_OPEN = 31,
        RP_FWD_DATA = 32,
        RP_EGRESS_FROM = 33, /* egress.sock */
        RP_JOB = 13,
        RP_JOBS_END = 14,
        RP_RESUME = 15,
        RP_ACK = 16,
        RP_FORGET = 17,
        RP_RESIZE = 18,
        RP_FILE_READ = 20,
        RP_FILE_WRITE = 21,
        RP_FILE_LIST = 22,
        RP_FILE_REPLY = 23,
        RP_SVC_START = 24,
        RP_SVC_SIGNAL = 25,
        RP_SVC_FORGET = 26,
        RP_SVC_STATE = 27,
        /* 40-42: more workspace files, answered by RP_FILE_REPLY */
        RP_FILE_MKDIR = 40,
        RP_FILE_REMOVE = 41,
        RP_FILE_MOVE = 42,
        /* 43-45: directory watchers (protocol 4) */
        RP_WATCH_START = 43,
        RP_WATCH_STOP = 44,
        RP_WATCH_EVENT = 45,
};

#define RP_OUT_STDERR 1u
#define RP_EXEC_STDIN 1u    /* keep a stdin pipe (else stdin is /dev/null) */
#define RP_EXEC_TTY 2u      /* run on a pseudo-terminal (stdin, stdout and stderr are it) */
#define RP_EXEC_NARROWED 4u /* its network is narrowed: RP_EGRESS_FROM says so for as long as its processes live */
#define RP_FROM_EXEC 1u     /* RP_EGRESS_FROM flags */
#define RP_FROM_NONE 2u
#define RP_FROM_UNKNOWN 3u
#define RP_FROM_KIND 0xffu
#define RP_FROM_NARROWED 0x100u /* with RP_FROM_EXEC: started with RP_EXEC_NARROWED */
#define RP_JOB_EXITED 1u        /* rp_job.flags: its leader ended and its output is complete */

struct rp_hdr {
        uint32_t len;
        uint16_t type;
        uint16_t flags;
        uint32_t tag;
};

struct rp_hello {
        uint32_t protocol; /* RP_PROTOCOL */
        uint32_t pid;      /* the runner's pid in the container */
};

struct rp_exec {
        uint32_t argc; /* 1..RP_MAX_ARGS */
        uint32_t envc; /* 0..RP_MAX_ARGS */
        uint32_t code_len;
        uint32_t winsize; /* RP_EXEC_TTY: rows << 16 | cols, each 1..RP_TTY_MAX_*; else 0 */
};

struct rp_offsets {
        uint64_t off[2]; /* [0] stdout, [1] stderr */
};

struct rp_job {
        uint64_t produced[2]; /* bytes of each stream read from the process so far */
        uint64_t acked[2];    /* the last RP_ACK: the runner keeps [acked, produced) */
        uint32_t pid;         /* its shim */
        uint32_t flags;       /* RP_JOB_EXITED */
};

struct rp_winsize {
        uint16_t rows;
        uint16_t cols;
};

struct rp_exit {
        int32_t exit_code; /* 0..255; 128+signal when killed by a signal */
        int32_t signal;    /* the signal that killed the leader, or 0 */
        uint64_t utime_us; /* rusage of the reaped tree */
        uint64_t stime_us;
        uint64_t maxrss_kb;
};

struct rp_fwd_open {
        uint32_t port; /* 1..65535: connect to 127.0.0.1:port inside */
        uint32_t reserved;
        uint64_t token; /* echoed in RP_FWD_DATA */
};

#define RP_WATCH_RECURSIVE 1u  /* RP_WATCH_START flags */
#define RP_WATCH_LOST 0x100u   /* RP_WATCH_EVENT flags: events were dropped */
#define RP_WATCH_KIND_MAX 5    /* RP_WATCH_EVENT kinds 1..5 */
#define RP_WATCH_NAME_MAX 4096 /* bytes of an event's name */
#define RP_WATCH_MAX 64        /* watches one runner holds */

#define RP_FW_BEGIN 1u
#define RP_FW_END 2u
#define RP_FR_TRUNCATED 1u
#define RP_FILE_LIST_MAX 1000
#define RP_REMOVE_DEPTH 256 /* directories deep a remove goes */
#define RP_MARKER_MAX 127   /* bytes of a service marker */
#define RP_SVC_MAX 64       /* services a runner holds (running or not yet forgotten) */
#define RP_SVC_MAX_PORTS 16
#define RP_SVC_PORT_POLL_MS 50

struct rp_file_req {
        uint64_t offset;
        uint64_t length;
};

struct rp_file_reply {
        int32_t err;    /* 0 or a positive errno */
        uint32_t flags; /* RP_FR_* */
        uint64_t size;  /* READ: the file's size; WRITE: bytes written */
        uint32_t next;  /* LIST: the next index to ask for, 0 when done */
        uint32_t reserved;
};

struct rp_svc_start {
        uint32_t envc; /* 0..RP_MAX_ARGS */
        uint32_t cmd_len;
};

enum rp_svc_phase {
        RP_SVC_RUNNING = 1,
        RP_SVC_EXITED = 2,
        RP_SVC_FAILED = 3, /* could not start; err says why */
};

struct rp_svc_state {
        uint32_t pid;                     /* the service's leader (its own session and group) */
        uint32_t phase;                   /* enum rp_svc_phase */
        int32_t exit_code;                /* EXITED: 0..255, 128+signal when killed */
        int32_t err;                      /* FAILED: a positive errno */
        uint32_t n_ports;                 /* 0..RP_SVC_MAX_PORTS */
        uint16_t ports[RP_SVC_MAX_PORTS]; /* TCP ports its processes listen on */
};

#endif
