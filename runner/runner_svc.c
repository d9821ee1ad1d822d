/* runner_svc.c — services supervised by the runner (RP_SVC_*; see
 * runner_proto.h).
 *
 *   runner ─ shim (child subreaper) ─ leader `sh <dir>/run.sh` (setsid)
 *                                      └ every descendant, however it forks
 *
 * The shim tells the runner the leader's exact PID, waits for the leader,
 * then kills whatever of the tree is left (a service is its whole tree) and
 * exits with the leader's code (128+signal when killed), which the runner
 * reaps: that is the service's exit code, also written to <dir>/exit for
 * the docker exec fallback. A stop is the daemon's escalation: RP_SVC_SIGNAL
 * TERM, then KILL after the grace, both reaching the whole tree
 * (tree_kill).
 *
 * Ports: while a service runs, /proc/net/tcp and tcp6 of the container's
 * network namespace are read every RP_SVC_PORT_POLL_MS; only when the set
 * of listening sockets changed are the services' processes walked and
 * their socket inodes matched, and a service whose ports changed is pushed
 * to the daemon at once (RP_SVC_STATE). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runner_ext.h"
#include "runner_io.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#define MAX_LISTEN 4096
#define MAX_SCAN_PROCS 8192
#define MAX_FDS_PER_PROC 4096
#define SHIM_REPORT_MS 5000 /* a fork and a write: only a container at its pids limit takes long */

struct svc {
        bool used, running;
        char marker[RP_MARKER_MAX + 1];
        pid_t shim, leader;
        int dirfd;
        int exit_code;
        int64_t ended_at;
        uint32_t n_ports;
        uint16_t ports[RP_SVC_MAX_PORTS];
};

struct listen_sock {
        unsigned long inode;
        uint16_t port;
};

static struct svc svcs[RP_SVC_MAX];
static int64_t next_poll;
static bool force_scan;
static unsigned long last_inodes[MAX_LISTEN];
static size_t n_last;

/* ---- state to the daemon ---- */

static void push_state(const struct svc *s, uint32_t tag)
{
        struct rp_svc_state st = {.pid = (uint32_t)s->leader,
                                  .phase = s->running ? RP_SVC_RUNNING : RP_SVC_EXITED,
                                  .exit_code = s->running ? 0 : s->exit_code,
                                  .n_ports = s->n_ports};

        memcpy(st.ports, s->ports, sizeof(st.ports));
        send_frame(RP_SVC_STATE, 0, tag, &st, sizeof(st), s->marker, strlen(s->marker));
}

static void push_failed(uint32_t tag, const char *marker, size_t mlen, int err)
{
        struct rp_svc_state st = {.phase = RP_SVC_FAILED, .err = err};
        send_frame(RP_SVC_STATE, 0, tag, &st, sizeof(st), marker, mlen);
}

void svc_connected(void)
{
        for (int i = 0; i < RP_SVC_MAX; i++)
                if (svcs[i].used)
                        push_state(&svcs[i], 0);
}

static struct svc *svc_find(const char *marker, size_t mlen)
{
        for (int i = 0; i < RP_SVC_MAX; i++)
                if (svcs[i].used && strlen(svcs[i].marker) == mlen && memcmp(svcs[i].marker, marker, mlen) == 0)
                        return &svcs[i];
        return NULL;
}

static void svc_free(struct svc *s)
{
        if (s->dirfd >= 0)
                close(s->dirfd);
        memset(s, 0, sizeof(*s));
        s->dirfd = -1;
}

static bool marker_ok(const char *m, size_t n)
{
        if (n == 0 || n > RP_MARKER_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (m[i] <= 0x20 || m[i] >= 0x7f || m[i] == '/')
                        return false;
        return true;
}

/* ---- start ---- */

/* The shim's end: the leader's code, once the rest of the tree is gone. */
static void shim_main(pid_t leader, int report)
{
        int st, code = 255;
        pid_t p;

        (void)rio_write_full(report, &leader, sizeof(leader)); /* a failure is the runner's EOF */
        close(report);
        for (;;) {
                p = waitpid(-1, &st, 0);
                if (p == leader) {
                        code = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 255;
                        break;
                }
                if (p < 0 && errno != EINTR)
                        break;
        }
        tree_kill(getpid(), SIGKILL);
        while (waitpid(-1, &st, 0) > 0 || errno == EINTR)
                ;
        _exit(code > 255 ? 255 : code);
}

static void leader_main(const char *workdir, char *const *argv, char *const *envp, int out, int err)
{
        sigset_t none;
        int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        setsid();
        if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
                _exit(125);
        syscall(SYS_close_range, 3u, ~0u, 0u);
        if (chdir(workdir) < 0) {
                dprintf(2, "sandboxd-runner: cannot enter %s: %s\n", workdir, strerror(errno));
                _exit(126);
        }
        execvpe(argv[0], argv, envp);
        dprintf(2, "sandboxd-runner: %s: %s\n", argv[0], strerror(errno));
        _exit(127);
}

/* The container's environment, minus what the request sets, then the request's. */
static char **merge_env(char **req, size_t n)
{
        extern char **environ;
        size_t base = 0, w = 0;
        char **envp;

        while (environ && environ[base])
                base++;
        envp = calloc(base + n + 1, sizeof(char *));
        if (!envp)
                return NULL;
        for (size_t b = 0; b < base; b++) {
                const char *eq = strchr(environ[b], '=');
                size_t kl = eq ? (size_t)(eq - environ[b]) + 1 : strlen(environ[b]);
                bool over = false;
                for (size_t e = 0; e < n && !over; e++)
                        over = strncmp(req[e], environ[b], kl) == 0;
                if (!over)
                        envp[w++] = environ[b];
        }
        for (size_t e = 0; e < n; e++)
                envp[w++] = req[e];
        return envp;
}

static struct svc *svc_slot(void)
{
        struct svc *old = NULL;

        for (int i = 0; i < RP_SVC_MAX; i++) {
                if (!svcs[i].used)
                        return &svcs[i];
                if (!svcs[i].running && (!old || svcs[i].ended_at < old->ended_at))
                        old = &svcs[i];
        }
        if (old)
                svc_free(old); /* an ended one the daemon never forgot */
        return old;
}

/* Returns 0 or a positive errno. */
static int svc_launch(struct svc *s, const char *dir, const char *workdir, char **env, size_t envc, const char *cmd,
                      size_t cmd_len)
{
        char rd[PATH_MAX], script[PATH_MAX + 16];
        char *argv[] = {"sh", script, NULL};
        char **envp = NULL;
        int missing, dfd = -1, fd, out = -1, err = -1, rep[2] = {-1, -1}, r;
        struct stat st;
        pid_t shim, leader = 0;

        if (workdir[0] != '/' || stat(workdir, &st) < 0 || !S_ISDIR(st.st_mode))
                return ENOENT;
        r = ws_resolve(dir, true, rd, sizeof(rd), &missing);
        if (r == 0)
                r = dfd = ws_open_dir(rd, missing, 0700);
        if (r < 0)
                return r == -ELOOP || r == -EXDEV ? EPERM : -r;
        (void)unlinkat(dfd, "exit", 0);
        fd = openat(dfd, "run.sh", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        r = fd < 0 ? -errno : rio_write_full(fd, cmd, cmd_len);
        if (fd >= 0)
                close(fd);
        out = openat(dfd, "stdout.log", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        err = openat(dfd, "stderr.log", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (r == 0 && (out < 0 || err < 0))
                r = -errno;
        snprintf(script, sizeof(script), "%s/run.sh", rd);
        envp = r == 0 ? merge_env(env, envc) : NULL;
        if (r == 0 && !envp)
                r = -ENOMEM;
        if (r == 0 && pipe2(rep, O_CLOEXEC) < 0)
                r = -errno;
        if (r < 0)
                goto done;
        shim = fork();
        if (shim < 0) {
                r = -errno;
                goto done;
        }
        if (shim == 0) {
                signal(SIGCHLD, SIG_DFL);
                prctl(PR_SET_CHILD_SUBREAPER, 1);
                leader = fork();
                if (leader == 0)
                        leader_main(workdir, argv, envp, out, err);
                /* the report pipe at 3, nothing of the runner's (socket, logs) */
                if (rep[1] != 3 && dup2(rep[1], 3) < 0)
                        _exit(125);
                syscall(SYS_close_range, 4u, ~0u, 0u);
                shim_main(leader < 0 ? 0 : leader, 3);
        }
        close(rep[1]);
        rep[1] = -1;
        /* SIGCHLD from any execution that ends meanwhile must not fail the start */
        r = rio_read_full(rep[0], &leader, sizeof(leader), SHIM_REPORT_MS);
        if (r == 0 && leader <= 0)
                r = -EIO;
        if (r < 0) {
                /* the leader first: once the shim is gone it would be ours, running untracked */
                tree_kill(shim, SIGKILL);
                kill(shim, SIGKILL);
                r = r == -EPIPE ? -EIO : r; /* reaped by the main loop: no slot names it */
                goto done;
        }
        s->used = s->running = true;
        s->shim = shim;
        runner_net_shim(shim, 0, false, true); /* a service: "no execution" */
        s->leader = leader;
        s->dirfd = dfd;
        dfd = -1;
        s->n_ports = 0;
        force_scan = true;
done:
        free(envp);
        for (int i = 0; i < 2; i++)
                if (rep[i] >= 0)
                        close(rep[i]);
        if (out >= 0)
                close(out);
        if (err >= 0)
                close(err);
        if (dfd >= 0)
                close(dfd);
        return -r;
}

static void svc_start(uint32_t tag, const unsigned char *p, size_t len)
{
        struct rp_svc_start hdr;
        const char *s, *end, *marker, *dir, *workdir;
        char **env = NULL;
        struct svc *sv;
        size_t mlen;
        int r;

        if (len < sizeof(hdr)) {
                push_failed(tag, "", 0, EINVAL);
                return;
        }
        memcpy(&hdr, p, sizeof(hdr));
        if (hdr.envc > RP_MAX_ARGS || hdr.cmd_len > len - sizeof(hdr)) {
                push_failed(tag, "", 0, EINVAL);
                return;
        }
        s = (const char *)p + sizeof(hdr);
        end = (const char *)p + len - hdr.cmd_len;
        env = calloc(hdr.envc + 1, sizeof(char *));
        if (!env) {
                push_failed(tag, "", 0, ENOMEM);
                return;
        }
        {
                const char **slots[3] = {&marker, &dir, &workdir};
                for (size_t k = 0; k < 3 + hdr.envc; k++) {
                        const char *z = s < end ? memchr(s, '\0', (size_t)(end - s)) : NULL;
                        if (!z) {
                                push_failed(tag, "", 0, EINVAL);
                                free(env);
                                return;
                        }
                        if (k < 3)
                                *slots[k] = s;
                        else
                                env[k - 3] = (char *)s;
                        s = z + 1;
                }
        }
        mlen = strlen(marker);
        if (!marker_ok(marker, mlen)) {
                push_failed(tag, "", 0, EINVAL);
                free(env);
                return;
        }
        sv = svc_find(marker, mlen);
        if (sv && sv->running) {
                push_state(sv, tag); /* a repeated start: the one that runs */
                free(env);
                return;
        }
        if (sv)
                svc_free(sv);
        sv = svc_slot();
        if (!sv) {
                push_failed(tag, marker, mlen, EBUSY);
                free(env);
                return;
        }
        memset(sv, 0, sizeof(*sv));
        sv->dirfd = -1;
        memcpy(sv->marker, marker, mlen + 1);
        r = svc_launch(sv, dir, workdir, env, hdr.envc, end, hdr.cmd_len);
        free(env);
        if (r != 0) {
                svc_free(sv);
                push_failed(tag, marker, mlen, r);
                return;
        }
        push_state(sv, tag);
}

/* ---- the end of a service ---- */

bool svc_reaped(pid_t pid, int status)
{
        for (int i = 0; i < RP_SVC_MAX; i++) {
                struct svc *s = &svcs[i];
                char buf[16];
                int fd, n;

                if (!s->used || !s->running || s->shim != pid)
                        continue;
                s->running = false;
                runner_net_shim(pid, 0, false, false);
                s->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                s->ended_at = now_ms();
                s->n_ports = 0;
                n = snprintf(buf, sizeof(buf), "%d\n", s->exit_code);
                fd = openat(s->dirfd, "exit", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd >= 0) {
                        (void)rio_write_full(fd, buf, (size_t)n);
                        close(fd);
                }
                force_scan = true;
                push_state(s, 0);
                return true;
        }
        return false;
}

/* ---- signal / forget ---- */

void svc_frame(const struct rp_hdr *h, const unsigned char *p)
{
        struct svc *s;

        if (h->type == RP_SVC_START) {
                svc_start(h->tag, p, h->len);
                return;
        }
        if (h->type == RP_SVC_SIGNAL) {
                uint32_t sig;
                if (h->len < 4)
                        return;
                memcpy(&sig, p, 4);
                s = svc_find((const char *)p + 4, h->len - 4);
                if (s && s->running && (sig == SIGTERM || sig == SIGKILL || sig == SIGINT || sig == SIGHUP))
                        tree_kill(s->shim, (int)sig);
                return;
        }
        s = svc_find((const char *)p, h->len); /* RP_SVC_FORGET */
        if (s && !s->running)
                svc_free(s);
}

/* ---- listening ports ---- */

static int ls_cmp(const void *a, const void *b)
{
        unsigned long x = ((const struct listen_sock *)a)->inode, y = ((const struct listen_sock *)b)->inode;
        return x < y ? -1 : x > y;
}

/* LISTEN sockets of /proc/net/tcp and tcp6, sorted by inode. */
static size_t read_listening(struct listen_sock *ls, size_t max)
{
        static const char *const files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
        size_t n = 0;

        for (size_t f = 0; f < 2; f++) {
                FILE *fp = fopen(files[f], "re");
                char line[512];

                if (!fp)
                        continue;
                if (!fgets(line, sizeof(line), fp)) { /* the header */
                        fclose(fp);
                        continue;
                }
                while (n < max && fgets(line, sizeof(line), fp)) {
                        char local[128];
                        unsigned st, port;
                        unsigned long inode;
                        char *colon;
                        /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
                        if (sscanf(line, " %*s %127s %*s %x %*s %*s %*s %*s %*s %lu", local, &st, &inode) != 3 ||
                            st != 0x0A || inode == 0)
                                continue;
                        colon = strrchr(local, ':');
                        if (!colon || sscanf(colon + 1, "%x", &port) != 1 || port == 0 || port > 65535)
                                continue;
                        ls[n].inode = inode;
                        ls[n].port = (uint16_t)port;
                        n++;
                }
                fclose(fp);
        }
        qsort(ls, n, sizeof(ls[0]), ls_cmp);
        return n;
}

struct pp {
        pid_t pid, ppid;
        int owner; /* index in svcs, -1 */
};

static int pp_cmp(const void *a, const void *b)
{
        pid_t x = ((const struct pp *)a)->pid, y = ((const struct pp *)b)->pid;
        return x < y ? -1 : x > y;
}

static void add_port(uint16_t *ports, uint32_t *n, uint16_t port)
{
        for (uint32_t i = 0; i < *n; i++)
                if (ports[i] == port)
                        return;
        if (*n < RP_SVC_MAX_PORTS)
                ports[(*n)++] = port;
}

static int u16_cmp(const void *a, const void *b)
{
        return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

/* Which service each listening socket belongs to: walk the processes of
 * every running service (descendants of its shim) and their fds. */
static void attribute(const struct listen_sock *ls, size_t nls)
{
        static pid_t pid[MAX_SCAN_PROCS], ppid[MAX_SCAN_PROCS];
        static struct pp procs[MAX_SCAN_PROCS];
        uint16_t ports[RP_SVC_MAX][RP_SVC_MAX_PORTS];
        uint32_t nports[RP_SVC_MAX] = {0};
        size_t n = proc_scan(pid, ppid, MAX_SCAN_PROCS);
        bool changed;

        for (size_t i = 0; i < n; i++) {
                procs[i] = (struct pp){pid[i], ppid[i], -1};
                for (int k = 0; k < RP_SVC_MAX; k++)
                        if (svcs[k].used && svcs[k].running && ppid[i] == svcs[k].shim)
                                procs[i].owner = k;
        }
        qsort(procs, n, sizeof(procs[0]), pp_cmp);
        do {
                changed = false;
                for (size_t i = 0; i < n; i++) {
                        struct pp key = {.pid = procs[i].ppid}, *parent;
                        if (procs[i].owner >= 0)
                                continue;
                        parent = bsearch(&key, procs, n, sizeof(procs[0]), pp_cmp);
                        if (parent && parent->owner >= 0) {
                                procs[i].owner = parent->owner;
                                changed = true;
                        }
                }
        } while (changed);

        for (size_t i = 0; i < n && nls > 0; i++) {
                char path[64];
                struct dirent *de;
                DIR *d;
                int seen = 0;

                if (procs[i].owner < 0)
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/fd", (int)procs[i].pid);
                d = opendir(path);
                if (!d)
                        continue; /* gone, or not ours to read */
                while ((de = readdir(d)) && seen++ < MAX_FDS_PER_PROC) {
                        char link[sizeof(path) + 256 + 2], target[64];
                        struct listen_sock key, *hit;
                        ssize_t k;
                        if (de->d_name[0] < '0' || de->d_name[0] > '9')
                                continue;
                        snprintf(link, sizeof(link), "%s/%s", path, de->d_name);
                        k = readlink(link, target, sizeof(target) - 1);
                        if (k <= 0)
                                continue;
                        target[k] = '\0';
                        if (sscanf(target, "socket:[%lu]", &key.inode) != 1)
                                continue;
                        hit = bsearch(&key, ls, nls, sizeof(ls[0]), ls_cmp);
                        if (hit)
                                add_port(ports[procs[i].owner], &nports[procs[i].owner], hit->port);
                }
                closedir(d);
        }
        for (int k = 0; k < RP_SVC_MAX; k++) {
                struct svc *s = &svcs[k];
                if (!s->used || !s->running)
                        continue;
                qsort(ports[k], nports[k], sizeof(uint16_t), u16_cmp);
                if (nports[k] != s->n_ports || memcmp(ports[k], s->ports, nports[k] * sizeof(uint16_t)) != 0) {
                        memset(s->ports, 0, sizeof(s->ports));
                        memcpy(s->ports, ports[k], nports[k] * sizeof(uint16_t));
                        s->n_ports = nports[k];
                        push_state(s, 0);
                }
        }
}

static bool any_running(void)
{
        for (int i = 0; i < RP_SVC_MAX; i++)
                if (svcs[i].used && svcs[i].running)
                        return true;
        return false;
}

int svc_timeout(int64_t now)
{
        if (!any_running())
                return -1;
        return next_poll > now ? (int)(next_poll - now) : 0;
}

void svc_tick(int64_t now)
{
        static struct listen_sock ls[MAX_LISTEN];
        size_t n;
        bool same;

        if (!any_running()) {
                n_last = 0;
                return;
        }
        if (now < next_poll)
                return;
        next_poll = now + RP_SVC_PORT_POLL_MS;
        n = read_listening(ls, MAX_LISTEN);
        same = !force_scan && n == n_last;
        for (size_t i = 0; same && i < n; i++)
                same = ls[i].inode == last_inodes[i];
        if (same)
                return; /* nothing started or stopped listening */
        force_scan = false;
        n_last = n;
        for (size_t i = 0; i < n; i++)
                last_inodes[i] = ls[i].inode;
        attribute(ls, n);
}
