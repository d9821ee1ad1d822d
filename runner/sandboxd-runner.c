/* sandboxd-runner — the process that lives in every sandbox container.
 *
 * Built static with musl; bind-mounted read-only at RP_BINARY_PATH and run
 * as the container's main process under Docker's init. It needs nothing
 * from the image: no shell, no libc, no interpreter.
 *
 * It connects to the daemon through the session directory (RP_SOCKET_DIR,
 * a read-only bind mount of a root-owned host directory) and reconnects
 * with backoff whenever the daemon is away. It starts executions on
 * request (see runner_proto.h), each under a shim of its own (runner_execution.c).
 *
 * Services (runner_svc.c) live under shims of their own the same way, and
 * workspace files (runner_files.c) are read and written confined to
 * /workspace; both are described in runner_proto.h.
 *
 * Two threads. The main one runs one poll loop: this file is the loop, the
 * connection (framing in and out, reconnecting) and reaping; executions,
 * with their durable output, are runner_execution.c, their processes and
 * terminals runner_proc.c. The network channels (runner_net.c) run on a
 * thread of their own, which blocks every signal and shares no state with
 * the loop. Blocking waits that SIGCHLD may interrupt restart with what is
 * left of their deadline (runner_io.c).
 *
 * The runner is non-dumpable (no ptrace, no /proc/<pid>/mem for the tenant's
 * uid). Tenant code runs as the same uid and can still kill it; the runner
 * is the container's main process, so its death stops the container and
 * the daemon recreates it on the next request.
 *
 * In a microVM (src/qemu/, docs/microvm.md) the channel is a virtio-serial
 * port instead of a socket: the guest's /init starts the runner with the
 * port's device (/dev/vport0p1) as its argument and --uid UID:GID. The port
 * is opened once, as root, and held for good (a port has one opener at a
 * time, so tenant code running as UID can never open it), then the runner
 * drops to UID:GID. The port named VMUX_PORT_NAME, opened the same way, carries
 * its egress.sock and fwd.sock connections as streams (vmux.h, runner_net.c).
 * A port does not close when the host side goes away: it
 * polls POLLHUP until the host is back, then says RP_HELLO again, as after
 * a reconnect. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <grp.h>
#include <time.h>
#include <unistd.h>

#include "runner_ext.h"
#include "sandboxd/runner_proto.h"
#include "vmux.h"

#define OUT_CAP (1024 * 1024) /* frames waiting for the daemon */

static int sock = -1;
static char *outbuf;
static size_t out_len, out_off;
static unsigned char *inbuf;
static size_t in_len;
static int sigpipe_fds[2] = {-1, -1};
static const char *sock_path = RP_SOCKET_DIR "/" RP_SOCKET_NAME;
static int port_fd = -1; /* a microVM's virtio-serial port, held for good; -1: a socket */

int runner_net_start(const char *dir); /* runner_net.c: the network channels, on their own thread */
int runner_net_start_vm(int fd);       /* the same in a microVM, over its net port (vmux.h) */

static void net_start(void)
{
        char dir[108];
        char *slash;

        snprintf(dir, sizeof(dir), "%s", sock_path);
        slash = strrchr(dir, '/');
        if (slash && slash != dir)
                *slash = '\0';
        (void)runner_net_start(dir); /* without it executions still run; the session has no network */
}

int64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void reconnect_step(int64_t now, bool (*connect_fn)(void), int64_t *next, int64_t *backoff, int64_t lo, int64_t hi)
{
        if (now < *next)
                return;
        if (connect_fn()) {
                *backoff = lo;
                return;
        }
        *next = now + *backoff;
        *backoff = *backoff * 2 > hi ? hi : *backoff * 2;
}

static void on_sigchld(int sig)
{
        int saved = errno;
        (void)sig;
        if (write(sigpipe_fds[1], "c", 1) < 0) {
        }
        errno = saved;
}

/* ---- outgoing frames ---- */

bool connected(void)
{
        return sock >= 0;
}

bool out_room(size_t n)
{
        return out_len + n <= OUT_CAP;
}

/* Control frames may exceed OUT_CAP a little: they are few and small. */
void send_frame(uint16_t type, uint16_t flags, uint32_t tag, const void *p1, size_t n1, const void *p2, size_t n2)
{
        struct rp_hdr h = {.len = (uint32_t)(n1 + n2), .type = type, .flags = flags, .tag = tag};

        if (sock < 0 && type != RP_HELLO)
                return; /* nobody to tell; executions keep their own state */
        if (out_len + RP_HDR_LEN + n1 + n2 > OUT_CAP + 64 * 1024)
                return;
        memcpy(outbuf + out_len, &h, RP_HDR_LEN);
        out_len += RP_HDR_LEN;
        if (n1)
                memcpy(outbuf + out_len, p1, n1);
        out_len += n1;
        if (n2)
                memcpy(outbuf + out_len, p2, n2);
        out_len += n2;
}

size_t out_reply_room(void)
{
        size_t cap = OUT_CAP + 64 * 1024;
        return out_len + RP_HDR_LEN < cap ? cap - out_len - RP_HDR_LEN : 0;
}

void send_failed(uint32_t tag, int err, const char *msg)
{
        uint32_t e = (uint32_t)err;
        send_frame(RP_FAILED, 0, tag, &e, sizeof(e), msg, strlen(msg));
}

static void disconnect(void)
{
        if (sock >= 0 && sock != port_fd)
                close(sock);
        sock = -1;
        files_disconnected();
        watch_disconnected();
        /* A frame may be half-written: the next connection starts clean.
         * Executions keep their unacknowledged output and their exit. */
        out_len = out_off = 0;
        in_len = 0;
        exec_disconnected();
}

static void flush_out(void)
{
        while (sock >= 0 && out_off < out_len) {
                ssize_t n = write(sock, outbuf + out_off, out_len - out_off); /* non-blocking; SIGPIPE ignored */
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                disconnect();
                        return;
                }
                out_off += (size_t)n;
        }
        if (out_off == out_len)
                out_off = out_len = 0;
        else if (out_off > OUT_CAP / 2) {
                memmove(outbuf, outbuf + out_off, out_len - out_off);
                out_len -= out_off;
                out_off = 0;
        }
}

static void reap(void)
{
        int st;
        pid_t p;

        while ((p = waitpid(-1, &st, WNOHANG)) > 0)
                if (!svc_reaped(p, st))
                        exec_reaped(p);
}

/* ---- incoming frames ---- */

static void handle_frame(const struct rp_hdr *h, const unsigned char *p)
{
        switch (h->type) {
        case RP_EXEC:
        case RP_STDIN:
        case RP_STDIN_EOF:
        case RP_SIGNAL:
        case RP_RESUME:
        case RP_ACK:
        case RP_FORGET:
        case RP_RESIZE:
                exec_frame(h, p);
                break;
        case RP_PING:
                send_frame(RP_PONG, 0, 0, NULL, 0, NULL, 0);
                break;
        case RP_FILE_READ:
        case RP_FILE_WRITE:
        case RP_FILE_LIST:
        case RP_FILE_MKDIR:
        case RP_FILE_REMOVE:
        case RP_FILE_MOVE:
                files_frame(h, p);
                break;
        case RP_WATCH_START:
        case RP_WATCH_STOP:
                watch_frame(h, p);
                break;
        case RP_SVC_START:
        case RP_SVC_SIGNAL:
        case RP_SVC_FORGET:
                svc_frame(h, p);
                break;
        default:
                break; /* unknown frames are skipped: newer daemons may send more */
        }
}

static void read_sock(void)
{
        for (;;) {
                ssize_t n = read(sock, inbuf + in_len, RP_HDR_LEN + RP_MAX_TO_RUNNER - in_len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0) {
                        disconnect();
                        return;
                }
                in_len += (size_t)n;
                for (;;) {
                        struct rp_hdr h;
                        if (in_len < RP_HDR_LEN)
                                break;
                        memcpy(&h, inbuf, RP_HDR_LEN);
                        if (h.len > RP_MAX_TO_RUNNER) {
                                disconnect();
                                return;
                        }
                        if (in_len < RP_HDR_LEN + h.len)
                                break;
                        handle_frame(&h, inbuf + RP_HDR_LEN);
                        if (sock < 0)
                                return;
                        memmove(inbuf, inbuf + RP_HDR_LEN + h.len, in_len - RP_HDR_LEN - h.len);
                        in_len -= RP_HDR_LEN + h.len;
                }
        }
}

static bool try_connect(void)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct rp_hello hello = {.protocol = RP_PROTOCOL, .pid = (uint32_t)getpid()};
        int fd;

        if (port_fd >= 0) {
                struct pollfd p = {.fd = port_fd, .events = POLLIN};
                char junk[4096];

                if (poll(&p, 1, 0) < 0 || (p.revents & POLLHUP))
                        return false; /* no host on the other side yet */
                /* what an earlier host connection left unread: the daemon says nothing before RP_HELLO */
                while (read(port_fd, junk, sizeof(junk)) > 0)
                        ;
                fd = port_fd;
                goto hello;
        }
        if (strlen(sock_path) >= sizeof(sa.sun_path))
                return false;
        strcpy(sa.sun_path, sock_path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return false;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                close(fd);
                return false;
        }
        fcntl(fd, F_SETFL, O_NONBLOCK);
hello:
        sock = fd;
        out_len = out_off = 0;
        send_frame(RP_HELLO, 0, 0, &hello, sizeof(hello), RP_VERSION, strlen(RP_VERSION));
        exec_connected();
        svc_connected();
        return true;
}

/* In a microVM: the session's PID limit, sbx.nproc=N on the guest kernel's command line
 * (src/qemu/), as RLIMIT_NPROC of the uid the runner drops to, so that every process of the
 * session (the runner's own included, as a container's pids cgroup counts it) is within it. */
static void guest_nproc(void)
{
        char buf[1024], *p;
        int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

        if (fd >= 0)
                close(fd);
        if (n <= 0)
                return;
        buf[n] = '\0';
        p = strstr(buf, " sbx.nproc=");
        if (!p)
                return;
        long v = strtol(p + strlen(" sbx.nproc="), NULL, 10);
        if (v > 0) {
                struct rlimit rl = {.rlim_cur = (rlim_t)v, .rlim_max = (rlim_t)v};
                (void)setrlimit(RLIMIT_NPROC, &rl);
        }
}

/* In a microVM: the virtio-serial port named name (/sys/class/virtio-ports/vportNpM/name),
 * opened as root and held for good like the runner's own; -1 when there is none. */
static int guest_port(const char *name)
{
        DIR *d = opendir("/sys/class/virtio-ports");
        struct dirent *de;
        int fd = -1;

        if (!d)
                return -1;
        while (fd < 0 && (de = readdir(d))) {
                char path[300], buf[64];
                int nf;
                ssize_t n;
                if (strncmp(de->d_name, "vport", 5) != 0 || strchr(de->d_name, '/'))
                        continue;
                snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", de->d_name);
                nf = open(path, O_RDONLY | O_CLOEXEC);
                n = nf >= 0 ? read(nf, buf, sizeof(buf) - 1) : -1;
                if (nf >= 0)
                        close(nf);
                if (n <= 0)
                        continue;
                buf[n] = '\0';
                buf[strcspn(buf, "\n")] = '\0';
                if (strcmp(buf, name) != 0)
                        continue;
                snprintf(path, sizeof(path), "/dev/%s", de->d_name);
                fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        }
        closedir(d);
        return fd;
}

/* In a microVM whose session has egress (sbx.egress=1 on the kernel command line): the
 * proxy variables a container's environment has (container.c), for every execution. */
static void guest_egress_env(void)
{
        char buf[1024];
        int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        static const char *const proxy[] = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"};

        if (fd >= 0)
                close(fd);
        if (n <= 0)
                return;
        buf[n] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
        strcat(buf, " ");
        if (!strstr(buf, " sbx.egress=1 "))
                return;
        for (size_t i = 0; i < sizeof(proxy) / sizeof(proxy[0]); i++)
                setenv(proxy[i], "http://127.0.0.1:3128", 1);
        setenv("NO_PROXY", "localhost,127.0.0.1", 1);
        setenv("no_proxy", "localhost,127.0.0.1", 1);
}
_Static_assert(RP_EGRESS_PORT == 3128, "the proxy variables name the egress port");

/* In a microVM whose VM has the session's image as a second disk (src/qemu/qemu_rootfs.c: the
 * virtio-blk serial "sbxroot", read-only ext4): mount it read-only on /newroot, the workspace
 * (mounted by /init on /workspace), a fresh tmpfs on /tmp, /proc, /sys and /dev in it, chroot
 * into it, and take the image's environment (its /.sandboxd/env, NUL-separated K=V), so that
 * every process of the session runs in the image: python3, the cell harness's libraries.
 * Before the uid drops; the port is open already. Anything failing before the chroot leaves
 * the busybox guest as it was, saying why on the console (the VM's console.log). */
static void guest_root(void)
{
        char dev[64] = "", serial[32], path[96];
        DIR *d = opendir("/sys/block");
        struct dirent *de;

        while (d && (de = readdir(d))) {
                if (strncmp(de->d_name, "vd", 2) != 0 || strlen(de->d_name) > 8)
                        continue;
                snprintf(path, sizeof(path), "/sys/block/%s/serial", de->d_name);
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                ssize_t n = fd >= 0 ? read(fd, serial, sizeof(serial) - 1) : -1;
                if (fd >= 0)
                        close(fd);
                serial[n > 0 ? n : 0] = '\0';
                serial[strcspn(serial, "\n")] = '\0';
                if (strcmp(serial, "sbxroot") == 0)
                        snprintf(dev, sizeof(dev), "/dev/%s", de->d_name);
        }
        if (d)
                closedir(d);
        if (!dev[0])
                return; /* no image: the busybox guest */
        static const struct {
                const char *src, *target, *type;
                unsigned long flags;
                const char *data;
        } m[] = {
                {NULL, "/newroot", "ext4", MS_RDONLY | MS_NOSUID | MS_NODEV, NULL},
                {"/workspace", "/newroot/workspace", NULL, MS_BIND, NULL},
                {"tmp", "/newroot/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777"},
                {"proc", "/newroot/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL},
                {"sys", "/newroot/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL},
                {"/dev", "/newroot/dev", NULL, MS_BIND | MS_REC, NULL},
        };
        (void)mkdir("/newroot", 0755);
        for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
                if (mount(m[i].src ? m[i].src : dev, m[i].target, m[i].type, m[i].flags, m[i].data) < 0) {
                        fprintf(stderr, "sandboxd-runner: no root file system: mount %s: %s\n", m[i].target,
                                strerror(errno));
                        if (i > 0)
                                (void)umount2("/newroot", MNT_DETACH);
                        return;
                }
        }
        if (chdir("/newroot") < 0 || chroot(".") < 0 || chdir("/workspace") < 0) {
                fprintf(stderr, "sandboxd-runner: cannot enter the root file system: %s\n", strerror(errno));
                return; /* half entered: the session's execs will say what they lack */
        }
        /* the image's environment replaces /init's (PATH=/bin of busybox) */
        int fd = open("/.sandboxd/env", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        static char env[64 * 1024];
        ssize_t n = fd >= 0 ? read(fd, env, sizeof(env) - 1) : -1;
        if (fd >= 0)
                close(fd);
        if (n > 0) {
                env[n] = '\0';
                clearenv();
                for (char *p = env; p < env + n; p += strlen(p) + 1)
                        if (strchr(p, '='))
                                putenv(p); /* env is static: putenv keeps the pointer */
        }
        fprintf(stderr, "sandboxd-runner: root file system %s\n", dev);
}

int main(int argc, char **argv)
{
        int net_fd = -1;

        struct sigaction sa = {0};
        int64_t next_connect = 0, backoff = 5;

        if (argc > 1 && strcmp(argv[1], "--version") == 0) {
                printf("%s\n", RP_VERSION);
                return 0;
        }
        if (argc > 3 && strcmp(argv[1], "--uid") == 0) {
                unsigned uid, gid;

                if (sscanf(argv[2], "%u:%u", &uid, &gid) != 2 || uid == 0 || gid == 0)
                        return 2;
                sock_path = argv[3];
                port_fd = open(sock_path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
                /* named by the host with the runner's port, which /init waited for */
                for (int i = 0; i < 20 && (net_fd = guest_port(VMUX_PORT_NAME)) < 0; i++)
                        usleep(50 * 1000);
                guest_nproc();
                guest_root(); /* the image's environment first: the proxy's variables win */
                guest_egress_env();
                /* ahead of the tenant's processes (proc_leader_exec puts them back at 0): a fork
                 * bomb on one TCG vCPU must not starve the heartbeat */
                (void)setpriority(PRIO_PROCESS, 0, -10);
                if (port_fd < 0 || setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
                        return 1;
        } else if (argc > 1) {
                sock_path = argv[1];
        }
        prctl(PR_SET_DUMPABLE, 0);
        prctl(PR_SET_CHILD_SUBREAPER, 1);
        outbuf = malloc(OUT_CAP + 64 * 1024 + RP_HDR_LEN + RP_CHUNK);
        inbuf = malloc(RP_HDR_LEN + RP_MAX_TO_RUNNER);
        if (!outbuf || !inbuf || pipe2(sigpipe_fds, O_CLOEXEC | O_NONBLOCK) < 0)
                return 1;
        exec_init();
        signal(SIGPIPE, SIG_IGN);
        sa.sa_handler = on_sigchld;
        sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
        sigaction(SIGCHLD, &sa, NULL);
        if (port_fd < 0)
                net_start();
        else if (net_fd >= 0)
                (void)runner_net_start_vm(net_fd); /* egress and forwards over the net port */

        for (;;) {
                struct pollfd pfd[2 + EXEC_POLL_MAX + RP_WATCH_MAX];
                struct exec_pollref who[EXEC_POLL_MAX];
                nfds_t n = 0, nj, nw;
                int64_t now = now_ms(), timeout = 1000;

                if (sock < 0)
                        reconnect_step(now, try_connect, &next_connect, &backoff, 5, 1000);
                if (sock < 0 && next_connect - now < timeout)
                        timeout = next_connect - now > 0 ? next_connect - now : 0;
                pfd[n++] = (struct pollfd){.fd = sigpipe_fds[0], .events = POLLIN};
                if (sock >= 0)
                        pfd[n++] = (struct pollfd){.fd = sock, .events = POLLIN | (out_len > out_off ? POLLOUT : 0)};
                nj = exec_poll_fill(pfd + n, who, now, &timeout);
                nw = watch_poll_fill(pfd + n + nj);
                {
                        int t = svc_timeout(now);
                        if (t >= 0 && t < timeout)
                                timeout = t;
                }
                if (poll(pfd, n + nj + nw, (int)timeout) < 0 && errno != EINTR)
                        return 1;
                /* the daemon's frames first: they may end executions polled below */
                for (nfds_t i = 0; i < n; i++) {
                        if (!pfd[i].revents)
                                continue;
                        if (pfd[i].fd == sigpipe_fds[0]) {
                                char b[64];
                                while (read(sigpipe_fds[0], b, sizeof(b)) > 0)
                                        ;
                                reap();
                        } else if (pfd[i].fd == sock) {
                                if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR))
                                        read_sock();
                                if (sock >= 0 && (pfd[i].revents & POLLOUT))
                                        flush_out();
                        }
                }
                for (nfds_t i = 0; i < nj; i++)
                        if (pfd[n + i].revents)
                                exec_poll_ready(&who[i], &pfd[n + i]);
                /* watches the daemon's frames above stopped are no longer polled: only live fds match */
                watch_poll_ready(pfd + n + nj, nw);
                reap();
                exec_tick();
                svc_tick(now_ms());
                watch_tick();
                flush_out();
        }
}
