/* hub_peer.c — is the peer of a session socket that container's runner
 * (the rules and why they suffice: hub_peer.h). Reads /proc only, never
 * Docker: it runs on the hub and gateway threads, at every connection.
 * Paths inside the container are resolved with openat2 in the peer's own
 * root, never following a link the tenant could have planted. No state, no
 * locks. */
#include "sandboxd/hub_peer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "sandboxd/common.h"
#include "sandboxd/runner_proto.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5 */
#endif

/* The container's /proc holds at most pids_limit processes (config.c caps it at 1 << 20). */
#define SCAN_MAX (1 << 20)

struct proc_stat {
        pid_t ppid;
        uint64_t start;
};

/* Read a small /proc file below dfd, NUL-terminated. */
static int read_small(int dfd, const char *name, char *buf, size_t size)
{
        _cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        size_t len = 0;

        if (fd < 0)
                return -errno;
        while (len < size - 1) {
                ssize_t n = read(fd, buf + len, size - 1 - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        buf[len] = '\0';
        return (int)len;
}

/* Fields 4 (ppid) and 22 (starttime) of /proc/<pid>/stat; the command
 * name (field 2) may hold spaces and parentheses: fields start after the
 * last ')'. */
static int read_stat(int dfd, const char *name, struct proc_stat *ret)
{
        char buf[1024], *p, *end;
        long long ppid = -1;
        unsigned long long start = 0;
        int r = read_small(dfd, name, buf, sizeof(buf));

        if (r < 0)
                return r;
        p = strrchr(buf, ')');
        if (!p)
                return -EPROTO;
        p++;
        for (int field = 3; field <= 22; field++) {
                while (*p == ' ')
                        p++;
                if (!*p)
                        return -EPROTO;
                if (field == 4)
                        ppid = strtoll(p, &end, 10);
                else if (field == 22)
                        start = strtoull(p, &end, 10);
                else
                        end = strchr(p, ' ');
                if (!end || end == p)
                        return -EPROTO;
                p = end;
        }
        if (ppid < 0)
                return -EPROTO;
        ret->ppid = (pid_t)ppid;
        ret->start = start;
        return 0;
}

/* NSpid (the pid in each namespace from ours down: n entries, the last in
 * its own) and whether TracerPid is 0. */
static int read_status(int dfd, int *ret_levels, long *ret_last, bool *ret_traced)
{
        char buf[4096], *line;
        int r = read_small(dfd, "status", buf, sizeof(buf));
        bool have_ns = false, have_tracer = false;

        if (r < 0)
                return r;
        for (line = buf; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
                if (strncmp(line, "TracerPid:", 10) == 0) {
                        *ret_traced = strtol(line + 10, NULL, 10) != 0;
                        have_tracer = true;
                } else if (strncmp(line, "NSpid:", 6) == 0) {
                        char *p = line + 6, *end;
                        int levels = 0;
                        long last = -1;
                        for (;;) {
                                long v = strtol(p, &end, 10);
                                if (end == p)
                                        break;
                                levels++;
                                last = v;
                                p = end;
                                if (*p == '\n' || !*p)
                                        break;
                        }
                        *ret_levels = levels;
                        *ret_last = last;
                        have_ns = true;
                }
        }
        return have_ns && have_tracer ? 0 : -EPROTO;
}

static int open_in_root(int root, const char *path, int flags)
{
        struct open_how how = {
                .flags = (uint64_t)(flags | O_CLOEXEC),
                .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        long fd;

        do
                fd = syscall(SYS_openat2, root, path, &how, sizeof(how));
        while (fd < 0 && errno == EINTR);
        return fd < 0 ? -errno : (int)fd;
}

static bool same_file(const struct stat *a, const struct stat *b)
{
        return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Whether child (ns pid, start) is the oldest child of the init in the
 * container's /proc. Entries that vanish while read are skipped. */
static int oldest_child(int root, long nspid, uint64_t start, const char **why)
{
        _cleanup_close_ int pfd = open_in_root(root, "proc", O_RDONLY | O_DIRECTORY);
        struct statfs sfs;
        struct proc_stat st;
        char name[32];
        DIR *dir;
        int r = 0, seen = 0;

        if (pfd < 0 || fstatfs(pfd, &sfs) < 0 || sfs.f_type != PROC_SUPER_MAGIC) {
                *why = "the container has no /proc to tell the init's children apart";
                return -EPERM;
        }
        /* its /proc is its pid namespace's: the peer is there under its ns pid */
        snprintf(name, sizeof(name), "%ld/stat", nspid);
        if (read_stat(pfd, name, &st) < 0 || st.ppid != 1 || st.start != start) {
                *why = "the container's /proc is not its pid namespace's";
                return -EPERM;
        }
        int dfd = fcntl(pfd, F_DUPFD_CLOEXEC, 3);
        if (dfd < 0 || !(dir = fdopendir(dfd))) {
                if (dfd >= 0)
                        close(dfd);
                *why = "cannot list the container's /proc";
                return -EPERM;
        }
        for (struct dirent *de; (de = readdir(dir));) {
                char *end;
                long pid = strtol(de->d_name, &end, 10);
                if (*end || end == de->d_name || pid == nspid || pid <= 1)
                        continue;
                if (++seen > SCAN_MAX) {
                        *why = "too many processes in the container to judge";
                        r = -EPERM;
                        break;
                }
                snprintf(name, sizeof(name), "%ld/stat", pid);
                if (read_stat(pfd, name, &st) < 0 || st.ppid != 1)
                        continue;
                /* the same tick: pids count up from the init, so the lower came first */
                if (st.start < start || (st.start == start && pid < nspid)) {
                        *why = "an older child of the container's init exists: the peer is not the runner";
                        r = -EPERM;
                        break;
                }
        }
        closedir(dir);
        return r;
}

int hub_peer_verify(int fd, int dirfd, const struct hub_peer *known, struct hub_peer *ret, const char **ret_why)
{
        struct ucred cred;
        socklen_t len = sizeof(cred);
        _cleanup_close_ int pidfd = -1, proc = -1, pproc = -1, root = -1, dir = -1, bin = -1;
        struct proc_stat st, pst = {0}, again;
        struct stat a, b;
        char path[64];
        int levels = 0, plevels = 0, r;
        long nspid = -1, pnspid = -1;
        bool traced = true, ptraced; /* the init's tracer is not judged: only its children are */
        const char *why = NULL;

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
                why = "no peer credentials";
                r = -errno;
                goto refuse;
        }
        if (cred.pid <= 0) {
                why = "the peer is not in a pid namespace the daemon sees (run sandboxd in dockerd's)";
                r = -EPERM;
                goto refuse;
        }
        len = sizeof(int);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) < 0)
                pidfd = -1; /* before Linux 6.5: the start time alone tells a reused pid */
        snprintf(path, sizeof(path), "/proc/%d", (int)cred.pid);
        proc = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (proc < 0 || read_stat(proc, "stat", &st) < 0) {
                why = "the peer is gone";
                r = -ESRCH;
                goto refuse;
        }
        if (known && known->pid == cred.pid && known->start == st.start) {
                pst.start = known->init_start;
                goto alive; /* the runner accepted before (a process is its pid and start time) */
        }

        r = -EPERM;
        snprintf(path, sizeof(path), "/proc/%d", (int)st.ppid);
        pproc = st.ppid > 0 ? open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (pproc < 0 || read_stat(pproc, "stat", &pst) < 0) {
                why = "the peer's parent is gone";
                goto refuse;
        }
        if (known && known->pid > 0 && known->init_pid == st.ppid && known->init_start == pst.start) {
                /* a child of the same init that is not the runner accepted before:
                 * whatever became of that one, this is someone else */
                why = "the container's runner is known, and this is another process";
                goto refuse;
        }
        if (read_status(proc, &levels, &nspid, &traced) < 0 || levels != 2) {
                why = "the peer is not one pid namespace below the daemon";
                goto refuse;
        }
        if (traced) {
                why = "the peer is traced";
                goto refuse;
        }
        if (read_status(pproc, &plevels, &pnspid, &ptraced) < 0 || plevels != 2 || pnspid != 1) {
                why = "the peer's parent is not its container's init";
                goto refuse;
        }
        if (fstatat(proc, "ns/pid", &a, 0) < 0 || fstatat(pproc, "ns/pid", &b, 0) < 0 || !same_file(&a, &b)) {
                why = "the peer's parent is the init of another pid namespace";
                goto refuse;
        }
        root = openat(proc, "root", O_PATH | O_DIRECTORY | O_CLOEXEC);
        dir = root >= 0 ? open_in_root(root, RP_SOCKET_DIR + 1, O_PATH | O_DIRECTORY) : -1;
        if (dir < 0 || fstat(dir, &a) < 0 || fstat(dirfd, &b) < 0 || !same_file(&a, &b)) {
                why = "the peer's " RP_SOCKET_DIR " is not this session's directory";
                goto refuse;
        }
        bin = open_in_root(root, RP_BINARY_PATH + 1, O_PATH);
        if (bin < 0 || fstat(bin, &a) < 0 || fstatat(proc, "exe", &b, 0) < 0 || !same_file(&a, &b)) {
                why = "the peer does not run " RP_BINARY_PATH;
                goto refuse;
        }
        r = oldest_child(root, nspid, st.start, &why);
        if (r < 0)
                goto refuse;
alive:
        /* everything above was read from the peer itself, not a pid reused meanwhile */
        r = -ESRCH;
        why = "the peer is gone";
        if (read_stat(proc, "stat", &again) < 0 || again.ppid != st.ppid || again.start != st.start)
                goto refuse;
        if (pidfd >= 0 && syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) < 0)
                goto refuse;
        *ret = (struct hub_peer){.pid = cred.pid, .start = st.start, .init_pid = st.ppid, .init_start = pst.start};
        return 0;
refuse:
        *ret_why = why;
        return r;
}

int hub_peer_load(int dirfd, struct hub_peer *ret)
{
        char buf[128];
        long long pid, init_pid;
        unsigned long long start, init_start;
        int r = read_small(dirfd, RUNNER_PEER_FILE, buf, sizeof(buf));

        if (r < 0)
                return r;
        if (sscanf(buf, "%lld %llu %lld %llu", &pid, &start, &init_pid, &init_start) != 4 || pid <= 0 ||
            init_pid <= 0 || pid > INT32_MAX || init_pid > INT32_MAX)
                return -EPROTO;
        *ret = (struct hub_peer){.pid = (pid_t)pid,
                                 .start = start,
                                 .init_pid = (pid_t)init_pid,
                                 .init_start = init_start};
        return 0;
}

int hub_peer_save(int dirfd, const struct hub_peer *peer)
{
        static const char tmp[] = RUNNER_PEER_FILE ".tmp";
        char buf[128];
        int n = snprintf(buf, sizeof(buf), "%d %llu %d %llu\n", (int)peer->pid, (unsigned long long)peer->start,
                         (int)peer->init_pid, (unsigned long long)peer->init_start);
        _cleanup_close_ int fd = -1;

        (void)unlinkat(dirfd, tmp, 0);
        fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        if (write(fd, buf, (size_t)n) != n) {
                int r = errno ? -errno : -EIO;
                (void)unlinkat(dirfd, tmp, 0);
                return r;
        }
        if (renameat(dirfd, tmp, dirfd, RUNNER_PEER_FILE) < 0) {
                int r = -errno;
                (void)unlinkat(dirfd, tmp, 0);
                return r;
        }
        return 0;
}

int hub_fence_load(int dirfd, struct hub_fence ret[RUNNER_FENCED_MAX], size_t *ret_n)
{
        char buf[RUNNER_FENCED_MAX * 80 + 1], *line, *save = NULL;
        size_t n = 0;
        int r = read_small(dirfd, RUNNER_FENCED_FILE, buf, sizeof(buf));

        if (r < 0)
                return r;
        for (line = strtok_r(buf, "\n", &save); line && n < RUNNER_FENCED_MAX; line = strtok_r(NULL, "\n", &save)) {
                long long pid;
                unsigned long long start, epoch;
                if (sscanf(line, "%lld %llu %llu", &pid, &start, &epoch) == 3 && pid > 0 && pid <= INT32_MAX)
                        ret[n++] = (struct hub_fence){.init_pid = (pid_t)pid, .init_start = start, .epoch = epoch};
        }
        *ret_n = n;
        return 0;
}

int hub_fence_save(int dirfd, const struct hub_fence *list, size_t n)
{
        static const char tmp[] = RUNNER_FENCED_FILE ".tmp";
        char buf[RUNNER_FENCED_MAX * 80];
        size_t len = 0;
        _cleanup_close_ int fd = -1;

        for (size_t i = 0; i < n && i < RUNNER_FENCED_MAX; i++)
                len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%d %llu %llu\n", (int)list[i].init_pid,
                                        (unsigned long long)list[i].init_start, (unsigned long long)list[i].epoch);
        (void)unlinkat(dirfd, tmp, 0);
        fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        if (write(fd, buf, len) != (ssize_t)len || renameat(dirfd, tmp, dirfd, RUNNER_FENCED_FILE) < 0) {
                int r = errno ? -errno : -EIO;
                (void)unlinkat(dirfd, tmp, 0);
                return r;
        }
        return 0;
}

bool hub_peer_fenced(int dirfd, const struct hub_peer *peer, uint64_t *ret_epoch)
{
        struct hub_fence list[RUNNER_FENCED_MAX];
        size_t n = 0;

        if (hub_fence_load(dirfd, list, &n) < 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (list[i].init_pid == peer->init_pid && list[i].init_start == peer->init_start) {
                        if (ret_epoch)
                                *ret_epoch = list[i].epoch;
                        return true;
                }
        return false;
}
