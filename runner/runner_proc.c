/* runner_proc.c — the runner's processes (part of sandboxd-runner): the
 * process tree of a shim read from /proc and signalled whole, what a shim
 * and a leader do after fork (runner_execution.c forks them), and the
 * pseudo-terminals of RP_EXEC_TTY executions.
 *
 * Single-threaded (the main poll loop), except what runs in a forked child. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "runner_ext.h"
#include "runner_io.h"
#include "sandboxd/runner_proto.h"

#ifndef TIOCGPTPEER
#define TIOCGPTPEER 0x5441
#endif

#define MAX_PROCS 8192

/* ---- process trees ---- */

size_t proc_scan(pid_t *pid, pid_t *ppid, size_t max)
{
        DIR *d = opendir("/proc");
        struct dirent *de;
        size_t n = 0;

        if (!d)
                return 0;
        while ((de = readdir(d)) && n < max) {
                char path[300], buf[512], *p;
                int fd;
                ssize_t k;
                char state;
                int pp;

                if (de->d_name[0] < '1' || de->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                k = read(fd, buf, sizeof(buf) - 1);
                close(fd);
                if (k <= 0)
                        continue;
                buf[k] = '\0';
                p = strrchr(buf, ')');
                if (!p || sscanf(p + 1, " %c %d", &state, &pp) != 2 || state == 'Z' || state == 'X')
                        continue;
                pid[n] = (pid_t)atoi(de->d_name);
                ppid[n] = (pid_t)pp;
                n++;
        }
        closedir(d);
        return n;
}

/* Signal every descendant of root (not root itself); returns how many. */
static int tree_signal(pid_t root, int sig)
{
        static pid_t pid[MAX_PROCS], ppid[MAX_PROCS];
        static bool mark[MAX_PROCS];
        size_t n = proc_scan(pid, ppid, MAX_PROCS);
        int hits = 0;
        bool changed;

        memset(mark, 0, n * sizeof(mark[0]));
        do {
                changed = false;
                for (size_t i = 0; i < n; i++) {
                        if (mark[i])
                                continue;
                        bool under = ppid[i] == root;
                        for (size_t j = 0; !under && j < n; j++)
                                under = mark[j] && pid[j] == ppid[i];
                        if (under)
                                mark[i] = changed = true;
                }
        } while (changed);
        for (size_t i = 0; i < n; i++)
                if (mark[i] && kill(pid[i], sig) == 0)
                        hits++;
        return hits;
}

void tree_kill(pid_t root, int sig)
{
        if (sig != SIGKILL) {
                (void)tree_signal(root, sig);
                return;
        }
        /* Freeze, then kill, until a scan finds nobody: a process forking
         * between two scans is caught by the next one. */
        for (int round = 0; round < 64; round++) {
                if (tree_signal(root, SIGSTOP) == 0)
                        break;
                (void)tree_signal(root, SIGKILL);
        }
}

/* ---- shims, leaders, terminals ---- */

/* The shim: reap the leader, report, keep reaping the subtree. Never returns. */
void proc_shim_main(pid_t leader)
{
        struct {
                int status;
                struct rusage ru;
        } rep = {0};
        int st;
        pid_t p;

        for (;;) {
                p = waitpid(-1, &st, 0);
                if (p == leader) {
                        rep.status = st;
                        break;
                }
                if (p < 0 && errno != EINTR) {
                        rep.status = 255 << 8;
                        break;
                }
        }
        getrusage(RUSAGE_CHILDREN, &rep.ru);
        (void)rio_write_full(3, &rep, sizeof(rep)); /* a failure is the runner's short read */
        close(3);
        while (waitpid(-1, &st, 0) > 0 || errno == EINTR)
                ;
        _exit(0);
}

void proc_leader_exec(const char *workdir, char **argv, char **envp, bool tty)
{
        sigset_t none;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        (void)setpriority(PRIO_PROCESS, 0, 0); /* a microVM's runner runs at -10; the tenant never */
        setsid();
        if (tty)
                (void)ioctl(0, TIOCSCTTY, 0); /* the new session's controlling terminal */
        close(3);
        if (chdir(workdir) < 0) {
                dprintf(2, "sandboxd-runner: cannot enter %s: %s\n", workdir, strerror(errno));
                _exit(126);
        }
        execvpe(argv[0], argv, envp);
        dprintf(2, "sandboxd-runner: %s: %s\n", argv[0], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
}

/* ---- terminals ---- */

bool pty_winsize_ok(uint32_t rows, uint32_t cols)
{
        return rows >= 1 && rows <= RP_TTY_MAX_ROWS && cols >= 1 && cols <= RP_TTY_MAX_COLS;
}

/* A new pseudo-terminal from the container's /dev/ptmx: the master for the
 * runner, the slave for the execution (opened through the master, so no
 * path under /dev/pts is trusted). -1 with errno on failure. */
int pty_open(uint16_t rows, uint16_t cols, int *ret_master, int *ret_slave)
{
        struct winsize ws = {.ws_row = rows, .ws_col = cols};
        int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), sl = -1, saved;

        if (m < 0)
                return -1;
        if (unlockpt(m) < 0 || ioctl(m, TIOCSWINSZ, &ws) < 0)
                goto fail;
        sl = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (sl < 0) {
                /* kernels before 4.13: by name; /dev/pts is the container's devpts, which tenants cannot plant in */
                char *name = ptsname(m);
                if (!name || (sl = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0)
                        goto fail;
        }
        *ret_master = m;
        *ret_slave = sl;
        return 0;
fail:
        saved = errno;
        close(m);
        errno = saved;
        return -1;
}
