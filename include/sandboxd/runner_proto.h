/* runner_proto.h — the wire protocol between the daemon and sandboxd-runner.
 *
 * Shared by the daemon (src/runner.c) and the in-container runner
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
 * connection, and every field's range.
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
 *                 byte for byte (no framing). Absent for private sessions.
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
 */
#ifndef SANDBOXD_RUNNER_PROTO_H
#define SANDBOXD_RUNNER_PROTO_H

#include <stdint.h>

#define RP_VERSION "sandboxd-runner/1"
#define RP_PROTOCOL 1
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
};

#define RP_OUT_STDERR 1u
#define RP_EXEC_STDIN 1u /* keep a stdin pipe (else stdin is /dev/null) */

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
        uint32_t reserved;
};

struct rp_exit {
        int32_t exit_code;   /* 0..255; 128+signal when killed by a signal */
        int32_t signal;      /* the signal that killed the leader, or 0 */
        uint64_t utime_us;   /* rusage of the reaped tree */
        uint64_t stime_us;
        uint64_t maxrss_kb;
};

struct rp_fwd_open {
        uint32_t port;     /* 1..65535: connect to 127.0.0.1:port inside */
        uint32_t reserved;
        uint64_t token;    /* echoed in RP_FWD_DATA */
};

#endif
