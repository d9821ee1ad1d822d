/* runner_net.c — the runner's network channels (issue 14), on a thread of
 * their own with their own epoll loop, apart from the execution loop in
 * sandboxd-runner.c (which only calls runner_net_start).
 *
 * The container has no interface but loopback. This thread:
 *   - listens on 127.0.0.1:RP_EGRESS_PORT (the HTTP(S)_PROXY of every
 *     sandbox process) and passes each connection byte for byte to
 *     RP_SOCKET_DIR/egress.sock, after one RP_EGRESS_FROM header saying
 *     which execution the client belongs to (egress_from: by process, never
 *     by environment); without that socket (a private session) the client
 *     is closed at once;
 *   - keeps a control connection to RP_SOCKET_DIR/fwd.sock (RP_FWD_HELLO)
 *     and, for each RP_FWD_OPEN, opens a data connection to fwd.sock
 *     (RP_FWD_DATA first) and splices it to 127.0.0.1:<port> inside.
 *
 * Hand-written rather than a library: the runner is a static musl binary
 * that must need nothing from the image, and the loop is small.
 *
 * Splicing is edge-triggered. Bytes are read into one shared scratch buffer
 * and written straight on; only what the other side does not take is kept
 * (at most SCRATCH bytes per direction), and a direction is not read again
 * until that is written. So an idle connection holds no buffer and a busy
 * one at most 2 x SCRATCH. Connections are capped at MAX_PAIRS; a pair that
 * still has work after PUMP_ROUNDS goes to the back of a run queue, so one
 * fast connection cannot starve the others. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "runner_ext.h"
#include "sandboxd/runner_proto.h"
#include "vmux.h"

#define MAX_PAIRS 4096
#define SCRATCH (64 * 1024)
#define PUMP_ROUNDS 16
#define CTRL_IN_MAX (RP_HDR_LEN + 64)

enum ep_kind { K_LISTEN, K_CTRL, K_END };

struct ep {
        enum ep_kind kind;
        struct pair *p;
        int i;
};

struct pair {
        int fd[2];
        char *pend[2]; /* read from fd[i], not yet written to fd[1-i] */
        size_t plen[2], poff[2];
        bool eof[2], shut[2], connecting[2];
        bool rd[2], wr[2]; /* edge-triggered readiness not yet used up */
        bool dead, queued;
        struct ep e[2];
        struct pair *next_run, *next_dead;
};

static char net_dir[108];
static struct vmux *vm_mux; /* in a microVM: the streams go over its net port (vmux.h) */
static int epfd = -1, lfd = -1, ctrl = -1;
static struct ep ep_listen = {K_LISTEN, NULL, 0}, ep_ctrl = {K_CTRL, NULL, 0};
static unsigned char ctrl_in[CTRL_IN_MAX];
static size_t ctrl_len;
static int n_pairs;
static struct pair *run_head, *run_tail, *dead_list;
static char scratch[SCRATCH];

static int64_t mono_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int unix_connect(const char *name)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd;

        /* a microVM: a stream to the daemon's gateway instead, refused at once without a host */
        if (vm_mux)
                return vmux_open(vm_mux, strcmp(name, RP_EGRESS_SOCKET_NAME) == 0 ? VMUX_KIND_EGRESS : VMUX_KIND_FWD);
        if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", net_dir, name) >= sizeof(sa.sun_path))
                return -1;
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -1;
        /* a unix connect completes at once or fails (EAGAIN: the daemon's backlog is full) */
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

static void pair_kill(struct pair *p)
{
        if (p->dead)
                return;
        p->dead = true;
        for (int i = 0; i < 2; i++)
                if (p->fd[i] >= 0) {
                        epoll_ctl(epfd, EPOLL_CTL_DEL, p->fd[i], NULL);
                        close(p->fd[i]);
                        p->fd[i] = -1;
                }
        p->next_dead = dead_list; /* freed after the epoll batch: events may still point at it */
        dead_list = p;
}

/* A pair takes both fds: they are closed if it cannot be made. */
static struct pair *pair_new(int fd0, int fd1, bool connecting1)
{
        struct pair *p;

        if (n_pairs >= MAX_PAIRS || !(p = calloc(1, sizeof(*p)))) {
                close(fd0);
                close(fd1);
                return NULL;
        }
        p->fd[0] = fd0;
        p->fd[1] = fd1;
        p->connecting[1] = connecting1;
        p->wr[0] = true;
        p->wr[1] = !connecting1;
        for (int i = 0; i < 2; i++) {
                struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = &p->e[i]};
                p->e[i] = (struct ep){K_END, p, i};
                if (epoll_ctl(epfd, EPOLL_CTL_ADD, p->fd[i], &ev) < 0) {
                        if (i == 1)
                                epoll_ctl(epfd, EPOLL_CTL_DEL, p->fd[0], NULL);
                        free(p);
                        close(fd0);
                        close(fd1);
                        return NULL;
                }
        }
        n_pairs++;
        return p;
}

/* Move bytes both ways until nothing moves or the round budget is spent.
 * Returns true if work may be left. */
static bool pair_pump(struct pair *p)
{
        for (int round = 0; round < PUMP_ROUNDS; round++) {
                bool progress = false;

                for (int j = 0; j < 2 && !p->dead; j++) {
                        int o = 1 - j;
                        ssize_t n, w;

                        if (p->plen[j] && !p->connecting[o] && p->wr[o]) {
                                w = send(p->fd[o], p->pend[j] + p->poff[j], p->plen[j] - p->poff[j], MSG_NOSIGNAL);
                                if (w > 0) {
                                        progress = true;
                                        p->poff[j] += (size_t)w;
                                        if (p->poff[j] == p->plen[j]) {
                                                free(p->pend[j]);
                                                p->pend[j] = NULL;
                                                p->plen[j] = p->poff[j] = 0;
                                        }
                                } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
                                        p->wr[o] = errno == EINTR;
                                } else {
                                        pair_kill(p);
                                        break;
                                }
                        }
                        if (!p->plen[j] && !p->eof[j] && p->rd[j]) {
                                n = recv(p->fd[j], scratch, sizeof(scratch), 0);
                                if (n > 0) {
                                        progress = true;
                                        w = 0;
                                        if (!p->connecting[o] && p->wr[o]) {
                                                w = send(p->fd[o], scratch, (size_t)n, MSG_NOSIGNAL);
                                                if (w < 0 && errno != EAGAIN && errno != EINTR) {
                                                        pair_kill(p);
                                                        break;
                                                }
                                                if (w < 0) {
                                                        p->wr[o] = false;
                                                        w = 0;
                                                }
                                        }
                                        if (w < n) {
                                                p->pend[j] = malloc((size_t)(n - w));
                                                if (!p->pend[j]) {
                                                        pair_kill(p);
                                                        break;
                                                }
                                                memcpy(p->pend[j], scratch + w, (size_t)(n - w));
                                                p->plen[j] = (size_t)(n - w);
                                        }
                                } else if (n == 0) {
                                        progress = true;
                                        p->eof[j] = true;
                                } else if (errno == EAGAIN) {
                                        p->rd[j] = false;
                                } else if (errno != EINTR) {
                                        pair_kill(p);
                                        break;
                                }
                        }
                        if (!p->dead && p->eof[j] && !p->plen[j] && !p->shut[o] && !p->connecting[o]) {
                                shutdown(p->fd[o], SHUT_WR); /* pass the half close on */
                                p->shut[o] = true;
                                progress = true;
                        }
                }
                if (p->dead)
                        return false;
                if (p->shut[0] && p->shut[1]) {
                        pair_kill(p);
                        return false;
                }
                if (!progress)
                        return false;
        }
        return true;
}

static void run_queue_add(struct pair *p)
{
        if (p->queued || p->dead)
                return;
        p->queued = true;
        p->next_run = NULL;
        if (run_tail)
                run_tail->next_run = p;
        else
                run_head = p;
        run_tail = p;
}

static void end_event(struct pair *p, int i, uint32_t events)
{
        if (p->dead)
                return;
        if (p->connecting[i] && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
                int e = 0;
                socklen_t len = sizeof(e);
                if (getsockopt(p->fd[i], SOL_SOCKET, SO_ERROR, &e, &len) < 0 || e != 0) {
                        pair_kill(p); /* nothing listens on that port inside */
                        return;
                }
                p->connecting[i] = false;
        }
        if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                p->rd[i] = true;
        if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
                p->wr[i] = true;
        if (pair_pump(p))
                run_queue_add(p);
}

/* ---- egress: 127.0.0.1:RP_EGRESS_PORT -> egress.sock ---- */

/* The shims of executions (tag) and services (tag 0), set by the main loop
 * (runner_net_shim), read here when a client is attributed. */
#define MAX_SHIMS (RP_MAX_JOBS + RP_SVC_MAX)
#define MAX_PROCS 8192
#define MAX_HOLDERS 16
static pthread_mutex_t shim_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
        pid_t pid;
        uint32_t tag;
        bool narrowed;
} shims[MAX_SHIMS];
static pid_t scan_pid[MAX_PROCS], scan_ppid[MAX_PROCS];

void runner_net_shim(pid_t shim, uint32_t tag, bool narrowed, bool add)
{
        int free_slot = -1;

        pthread_mutex_lock(&shim_lock);
        for (int i = 0; i < MAX_SHIMS; i++) {
                if (shims[i].pid == shim) {
                        shims[i].pid = 0;
                        if (free_slot < 0)
                                free_slot = i;
                } else if (shims[i].pid == 0 && free_slot < 0) {
                        free_slot = i;
                }
        }
        if (add && free_slot >= 0) {
                shims[free_slot].pid = shim;
                shims[free_slot].tag = tag;
                shims[free_slot].narrowed = narrowed;
        }
        pthread_mutex_unlock(&shim_lock);
}

/* The inode of the socket whose local end is addr:port and remote end
 * 127.0.0.1:RP_EGRESS_PORT (the client of an accepted connection), 0 if
 * none. The listener is IPv4 only, so /proc/net/tcp is enough. */
static unsigned long client_inode(const struct sockaddr_in *peer)
{
        FILE *f = fopen("/proc/net/tcp", "re");
        char line[512];
        unsigned long inode = 0;

        if (!f)
                return 0;
        while (!inode && fgets(line, sizeof(line), f)) {
                unsigned int lip, lport, rip, rport;
                unsigned long ino;
                if (sscanf(line, " %*u: %8X:%4X %8X:%4X %*X %*s %*s %*s %*u %*u %lu", &lip, &lport, &rip, &rport,
                           &ino) == 5 &&
                    lip == peer->sin_addr.s_addr && lport == ntohs(peer->sin_port) && rport == RP_EGRESS_PORT &&
                    rip == htonl(INADDR_LOOPBACK))
                        inode = ino;
        }
        fclose(f);
        return inode;
}

/* Up to max processes (not the runner) holding socket:[inode]. */
static size_t socket_holders(unsigned long inode, pid_t *ret, size_t max)
{
        char want[64], path[64], link[64];
        DIR *d = opendir("/proc"), *fdd;
        struct dirent *de, *fe;
        size_t n = 0;
        int wlen = snprintf(want, sizeof(want), "socket:[%lu]", inode);

        if (!d)
                return 0;
        while ((de = readdir(d)) && n < max) {
                pid_t pid = (pid_t)atoi(de->d_name);
                if (pid <= 1 || pid == getpid())
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
                fdd = opendir(path);
                if (!fdd)
                        continue; /* gone, or not dumpable: not a holder we can see */
                while ((fe = readdir(fdd))) {
                        ssize_t k;
                        if (fe->d_name[0] < '0' || fe->d_name[0] > '9')
                                continue;
                        snprintf(path, sizeof(path), "/proc/%d/fd/%.16s", (int)pid, fe->d_name);
                        k = readlink(path, link, sizeof(link));
                        if (k == wlen && memcmp(link, want, (size_t)k) == 0) {
                                ret[n++] = pid;
                                break;
                        }
                }
                closedir(fdd);
        }
        closedir(d);
        return n;
}

/* Walk pid's parents to a shim: 1 and its tag (0: a service's) and
 * whether it was started narrowed, or 0
 * when none is on the way (the runner, the init, a parent already gone). */
static int shim_of(pid_t pid, size_t n_procs, uint32_t *ret_tag, bool *ret_narrowed)
{
        for (int depth = 0; depth < MAX_PROCS && pid > 1 && pid != getpid(); depth++) {
                size_t k;
                int found = 0;
                pthread_mutex_lock(&shim_lock);
                for (int i = 0; i < MAX_SHIMS && !found; i++)
                        if (shims[i].pid == pid) {
                                *ret_tag = shims[i].tag;
                                *ret_narrowed = shims[i].narrowed;
                                found = 1;
                        }
                pthread_mutex_unlock(&shim_lock);
                if (found)
                        return 1;
                for (k = 0; k < n_procs && scan_pid[k] != pid; k++)
                        ;
                if (k == n_procs)
                        return 0;
                pid = scan_ppid[k];
        }
        return 0;
}

/* Whose client c is (RP_EGRESS_FROM flags and tag): the processes holding
 * its socket, each walked up to its shim; holders in different executions,
 * or none found, are RP_FROM_UNKNOWN (the daemon fails closed on it). */
static uint16_t egress_from(int c, uint32_t *ret_tag)
{
        struct sockaddr_in peer;
        socklen_t len = sizeof(peer);
        pid_t holders[MAX_HOLDERS];
        unsigned long inode;
        size_t n, n_procs;
        bool have = false, narrowed = false;

        *ret_tag = 0;
        if (getpeername(c, (struct sockaddr *)&peer, &len) < 0 || peer.sin_family != AF_INET ||
            !(inode = client_inode(&peer)) || !(n = socket_holders(inode, holders, MAX_HOLDERS)))
                return RP_FROM_UNKNOWN;
        n_procs = proc_scan(scan_pid, scan_ppid, MAX_PROCS);
        for (size_t i = 0; i < n; i++) {
                uint32_t tag = 0;
                if (!shim_of(holders[i], n_procs, &tag, &narrowed) || (have && tag != *ret_tag)) {
                        *ret_tag = 0;
                        return RP_FROM_UNKNOWN;
                }
                *ret_tag = tag;
                have = true;
        }
        return *ret_tag ? RP_FROM_EXEC | (narrowed ? RP_FROM_NARROWED : 0) : RP_FROM_NONE;
}

static void egress_listen(void)
{
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons(RP_EGRESS_PORT),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &ep_listen};
        int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

        if (fd < 0)
                return;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4096) < 0 ||
            epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                close(fd);
                return;
        }
        lfd = fd;
}

static void egress_accept(void)
{
        for (int k = 0; k < 64; k++) {
                int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), d;
                struct pair *p;

                if (c < 0)
                        return; /* EAGAIN, or EMFILE: the backlog waits for the next round */
                d = unix_connect(RP_EGRESS_SOCKET_NAME);
                if (d < 0) {
                        close(c); /* no egress for this session: refused at once */
                        continue;
                }
                struct rp_hdr from = {.type = RP_EGRESS_FROM};
                from.flags = egress_from(c, &from.tag);
                /* a fresh socket's buffer takes these few bytes at once */
                if (send(d, &from, sizeof(from), MSG_NOSIGNAL) != (ssize_t)sizeof(from)) {
                        close(c);
                        close(d);
                        continue;
                }
                p = pair_new(c, d, false);
                if (!p)
                        continue;
                end_event(p, 0, EPOLLIN | EPOLLOUT);
                if (!p->dead)
                        end_event(p, 1, EPOLLIN | EPOLLOUT);
        }
}

/* ---- port forwards: fwd.sock ---- */

static void ctrl_close(void)
{
        if (ctrl >= 0) {
                epoll_ctl(epfd, EPOLL_CTL_DEL, ctrl, NULL);
                close(ctrl);
                ctrl = -1;
        }
        ctrl_len = 0;
}

static bool ctrl_connect(void)
{
        struct rp_hdr hello = {.len = 0, .type = RP_FWD_HELLO};
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = &ep_ctrl};
        int fd = unix_connect(RP_FWD_SOCKET_NAME);

        if (fd < 0)
                return false;
        if (send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello) ||
            epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                close(fd);
                return false;
        }
        ctrl = fd;
        ctrl_len = 0;
        return true;
}

static void fwd_open(uint32_t tag, const struct rp_fwd_open *op)
{
        struct rp_hdr hdr = {.len = sizeof(op->token), .type = RP_FWD_DATA, .tag = tag};
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        unsigned char first[RP_HDR_LEN + sizeof(op->token)];
        struct pair *p;
        int d, t;
        bool connecting = false;

        if (op->port < 1 || op->port > 65535)
                return;
        d = unix_connect(RP_FWD_SOCKET_NAME);
        if (d < 0)
                return; /* the daemon's host client times out */
        memcpy(first, &hdr, RP_HDR_LEN);
        memcpy(first + RP_HDR_LEN, &op->token, sizeof(op->token));
        /* a fresh socket's buffer takes these few bytes at once */
        if (send(d, first, sizeof(first), MSG_NOSIGNAL) != (ssize_t)sizeof(first)) {
                close(d);
                return;
        }
        sa.sin_port = htons((uint16_t)op->port);
        t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (t >= 0 && connect(t, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                if (errno == EINPROGRESS)
                        connecting = true;
                else {
                        close(t);
                        t = -1;
                }
        }
        if (t < 0) {
                close(d); /* nothing listens there: the daemon closes the host client */
                return;
        }
        p = pair_new(d, t, connecting);
        if (!p)
                return;
        end_event(p, 0, EPOLLIN | EPOLLOUT);
}

static void ctrl_read(void)
{
        for (;;) {
                ssize_t n = recv(ctrl, ctrl_in + ctrl_len, sizeof(ctrl_in) - ctrl_len, 0);
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                        ctrl_close();
                        return;
                }
                if (n < 0) {
                        if (errno == EAGAIN)
                                return;
                        continue;
                }
                ctrl_len += (size_t)n;
                for (;;) {
                        struct rp_hdr h;
                        if (ctrl_len < RP_HDR_LEN)
                                break;
                        memcpy(&h, ctrl_in, sizeof(h));
                        if (h.type != RP_FWD_OPEN || h.len != sizeof(struct rp_fwd_open)) {
                                ctrl_close(); /* not our protocol: start over */
                                return;
                        }
                        if (ctrl_len < RP_HDR_LEN + h.len)
                                break;
                        struct rp_fwd_open op;
                        memcpy(&op, ctrl_in + RP_HDR_LEN, sizeof(op));
                        memmove(ctrl_in, ctrl_in + RP_HDR_LEN + h.len, ctrl_len - RP_HDR_LEN - h.len);
                        ctrl_len -= RP_HDR_LEN + h.len;
                        fwd_open(h.tag, &op);
                }
        }
}

/* ---- the loop ---- */

static void *net_main(void *ud __attribute__((unused)))
{
        sigset_t all;
        int64_t next_ctrl = 0, next_listen = 0, backoff = 50;

        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, NULL); /* SIGCHLD and the rest go to the main loop */
        for (;;) {
                struct epoll_event evs[128];
                int64_t now = mono_ms();
                int timeout = 1000, n;

                if (lfd < 0 && now >= next_listen) {
                        egress_listen();
                        next_listen = now + 2000;
                }
                if (ctrl < 0)
                        reconnect_step(now, ctrl_connect, &next_ctrl, &backoff, 50, 2000);
                if (ctrl < 0 && next_ctrl - now < timeout)
                        timeout = next_ctrl - now > 0 ? (int)(next_ctrl - now) : 0;
                if (run_head)
                        timeout = 0;
                n = epoll_wait(epfd, evs, 128, timeout);
                for (int k = 0; k < n; k++) {
                        struct ep *e = evs[k].data.ptr;
                        if (e->kind == K_LISTEN)
                                egress_accept();
                        else if (e->kind == K_CTRL) {
                                if (ctrl >= 0)
                                        ctrl_read();
                        } else
                                end_event(e->p, e->i, evs[k].events);
                }
                /* one more round for each pair that still had work */
                struct pair *q = run_head;
                run_head = run_tail = NULL;
                while (q) {
                        struct pair *next = q->next_run;
                        q->queued = false;
                        if (!q->dead && pair_pump(q))
                                run_queue_add(q);
                        q = next;
                }
                while (dead_list) {
                        struct pair *p = dead_list;
                        dead_list = p->next_dead; /* never queued by now: the pass above dropped it */
                        free(p->pend[0]);
                        free(p->pend[1]);
                        free(p);
                        n_pairs--;
                }
        }
        return NULL;
}

static int net_thread(void);

/* Start the network thread; dir is the runner directory (RP_SOCKET_DIR). */
int runner_net_start(const char *dir);
int runner_net_start(const char *dir)
{
        if (strlen(dir) >= sizeof(net_dir))
                return -1;
        strcpy(net_dir, dir);
        return net_thread();
}

/* In a microVM: the same thread, its egress.sock and fwd.sock connections streams over the
 * virtio-serial port fd (VMUX_PORT_NAME, held for good; vmux.h). */
int runner_net_start_vm(int fd);
int runner_net_start_vm(int fd)
{
        vm_mux = vmux_start(fd, false, NULL, NULL, NULL);
        return vm_mux ? net_thread() : -1;
}

static int net_thread(void)
{
        pthread_t t;
        pthread_attr_t attr;

        epfd = epoll_create1(EPOLL_CLOEXEC);
        if (epfd < 0)
                return -1;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, net_main, NULL) != 0)
                return -1;
        return 0;
}
