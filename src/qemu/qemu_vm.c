/* qemu_vm.c — one microVM's life (engine_qemu.h): its initramfs with the
 * runner appended, the session's ext4 disk, QEMU exec'd in its jail, the
 * runner channel handed to the hub, QMP for stop/cont/quit, the end.
 *
 * QEMU is not the daemon's child: it is forked twice (setsid between), so
 * it outlives the daemon and is found again by its pid and start time in
 * the state file. Every wait here has a deadline; no lock is held across
 * one (q->lock is qemu_engine.c's, for the state files). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "qemu_internal.h"
#include "sandboxd/container.h"
#include "sandboxd/log.h"
#include "sandboxd/runner_proto.h"
#include "sandboxd/sha256.h"

extern char **environ;

#define QEMU_DEFAULT_BINARY "/usr/bin/qemu-system-x86_64"
#define QEMU_DISK_DEFAULT (INT64_C(1) << 30)
#define QEMU_BOOT_TIMEOUT_MS 120000 /* TCG on a loaded 2-core host: 2-20 s measured */
#define QEMU_RUNNER_MAX (64 << 20)
#define QEMU_MKFS_TIMEOUT_MS 60000
#define QEMU_QMP_TIMEOUT_S 5
#define QEMU_KILL_WAIT_MS 10000
#define QEMU_SPAWN_FDS 6           /* what QEMU gets from 3 on: child_exec */
#define QEMU_ADOPT_WAIT_MS 15000   /* a live guest's runner says RP_HELLO within its 1 s redial backoff */
#define QEMU_CHANNEL "runner.sock" /* in the VM's directory (root's): the runner channel's socket */

int qemu_setup(struct qemu *q, const struct engine_qemu_config *cfg, struct sbx_error *err)
{
        struct stat st;
        int fd;

        if (!cfg->guest_dir || !cfg->guest_dir[0])
                return sbx_error_set(err, -ENOENT, 0, "no guest directory");
        if (strchr(cfg->guest_dir, ',')) /* the VM's own files go as /proc/self/fd paths; the kernel does not */
                return sbx_error_set(err, -EINVAL, 0, "QEMU's options cannot name a path with a comma");
        sbx_strlcpy(q->binary, cfg->qemu_binary ? cfg->qemu_binary : QEMU_DEFAULT_BINARY, sizeof(q->binary));
        if (access(q->binary, X_OK) < 0)
                return sbx_error_set(err, -ENOENT, 0, "no QEMU at %s (apt-get install qemu-system-x86)", q->binary);
        if (snprintf(q->kernel, sizeof(q->kernel), "%s/vmlinux", cfg->guest_dir) >= (int)sizeof(q->kernel) ||
            snprintf(q->initrd, sizeof(q->initrd), "%s/initrd.gz", cfg->guest_dir) >= (int)sizeof(q->initrd) ||
            snprintf(q->dir, sizeof(q->dir), "%s/vm", cfg->data_dir) >= (int)sizeof(q->dir) ||
            snprintf(q->disks, sizeof(q->disks), "%s/vm/disks", cfg->data_dir) >= (int)sizeof(q->disks))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "the guest's or the data directory's path is too long");
        if (stat(q->kernel, &st) < 0 || stat(q->initrd, &st) < 0)
                return sbx_error_set(err, -ENOENT, 0, "no guest in %s (scripts/build-vm.sh builds it)", cfg->guest_dir);
        if (cfg->docker_socket)
                sbx_strlcpy(q->docker_socket, cfg->docker_socket, sizeof(q->docker_socket));
        q->disk_bytes = cfg->disk_bytes > 0 ? cfg->disk_bytes : QEMU_DISK_DEFAULT;
        q->boot_timeout_ms = cfg->boot_timeout_ms > 0 ? cfg->boot_timeout_ms : QEMU_BOOT_TIMEOUT_MS;
        /* KVM where the device opens; a host whose KVM cannot run this guest (PVM) has none here
         * (scripts/build-vm.sh --probe tells) */
        fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
        q->kvm = fd >= 0;
        if (fd >= 0)
                close(fd);
        return 0; /* the directories come with the first VM (q_create) */
}

/* ---- the process ---- */

void qemu_now_rfc3339(char ret[40])
{
        time_t t = time(NULL);
        struct tm tm;

        gmtime_r(&t, &tm);
        strftime(ret, 40, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* QEMU's state letter and start time (clock ticks after boot), from /proc. */
static int proc_stat(pid_t pid, char *ret_state, uint64_t *ret_start)
{
        char path[64], buf[1024];
        int fd, n;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        n = (int)read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return -EIO;
        buf[n] = '\0';
        char *p = strrchr(buf, ')'); /* the name may hold anything but ends at the last ')' */
        if (!p || p[1] != ' ')
                return -EPROTO;
        *ret_state = p[2];
        p += 2;
        for (int field = 3; field < 22; field++) { /* starttime is field 22 */
                p = strchr(p, ' ');
                if (!p)
                        return -EPROTO;
                p++;
        }
        *ret_start = strtoull(p, NULL, 10);
        return 0;
}

bool qemu_vm_alive(const struct qemu_vm *vm)
{
        char state;
        uint64_t start;

        if (vm->pid <= 0 || proc_stat(vm->pid, &state, &start) < 0 || start != vm->pid_start)
                return false;
        if (state == 'Z' || state == 'X') {
                (void)waitpid(vm->pid, NULL, WNOHANG); /* ours only if the daemon became its reaper */
                return false;
        }
        return true;
}

static bool wait_gone(const struct qemu_vm *vm, int timeout_ms)
{
        int64_t deadline = sbx_now_ms() + timeout_ms;

        while (qemu_vm_alive(vm)) {
                if (sbx_now_ms() >= deadline)
                        return false;
                sbx_sleep_ms(20);
        }
        return true;
}

/* ---- QMP ---- */

/* Read lines until one holds "return" (0) or "error" (-EIO); events are skipped. */
static int qmp_reply(int fd, char *buf, size_t size, const char *want)
{
        size_t len = 0;

        for (;;) {
                char *nl;
                while ((nl = memchr(buf, '\n', len))) {
                        *nl = '\0';
                        if (strstr(buf, want))
                                return 0;
                        if (strstr(buf, "\"error\""))
                                return -EIO;
                        len -= (size_t)(nl + 1 - buf);
                        memmove(buf, nl + 1, len);
                }
                if (len == size - 1)
                        return -EPROTO; /* a line longer than any reply QEMU sends */
                ssize_t n = read(fd, buf + len, size - 1 - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n == 0 ? -ECONNRESET : -errno;
                len += (size_t)n;
        }
}

int qemu_qmp(struct qemu *q, const struct qemu_vm *vm, const char *command, struct sbx_error *err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct timeval tv = {.tv_sec = QEMU_QMP_TIMEOUT_S};
        char path[SBX_PATH_MAX], line[128], buf[8192];
        struct stat st;
        _cleanup_close_ int fd = -1;
        int r;

        if (qemu_vm_path(q, vm->id, "run/qmp.sock", path, sizeof(path)) < 0 || strlen(path) >= sizeof(sa.sun_path))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "the QMP socket's path is too long");
        /* QEMU's own directory: only a socket of the VM's uid is spoken to, never a link */
        if (lstat(path, &st) < 0 || !S_ISSOCK(st.st_mode) || st.st_uid != vm->uid)
                return sbx_error_set(err, -ENOENT, 0, "VM %s has no QMP socket", vm->id);
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return sbx_error_set(err, -errno, 0, "socket: %m");
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return sbx_error_set(err, -errno, 0, "cannot reach VM %s's QMP: %m", vm->id);
        r = qmp_reply(fd, buf, sizeof(buf), "\"QMP\"");
        if (r == 0) {
                static const char caps[] = "{\"execute\":\"qmp_capabilities\"}\n";
                r = write(fd, caps, sizeof(caps) - 1) == (ssize_t)(sizeof(caps) - 1) ? 0 : -EIO;
        }
        if (r == 0)
                r = qmp_reply(fd, buf, sizeof(buf), "\"return\"");
        if (r == 0) {
                int n = snprintf(line, sizeof(line), "{\"execute\":\"%s\"}\n", command);
                r = write(fd, line, (size_t)n) == n ? 0 : -EIO;
        }
        if (r == 0)
                r = qmp_reply(fd, buf, sizeof(buf), "\"return\"");
        if (r < 0)
                return sbx_error_set(err, r == -EAGAIN ? -ETIMEDOUT : r, 0, "QMP %s on VM %s failed: %s", command,
                                     vm->id, strerror(-r));
        return 0;
}

/* ---- what a VM is made of ---- */

int qemu_disk_path(const struct qemu *q, const char *user, const char *session, char *buf, size_t size)
{
        char key[2 * SBX_PATH_MAX], hex[65];
        int n = snprintf(key, sizeof(key), "%s/%s", user, session);

        if (n < 0 || (size_t)n >= sizeof(key) || sha256_hex(key, (size_t)n, hex) < 0)
                return -EINVAL;
        n = snprintf(buf, size, "%s/%s.img", q->disks, hex);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* Run argv (no shell) and wait for it, within timeout_ms. */
static int run_tool(char *const argv[], int timeout_ms)
{
        posix_spawn_file_actions_t fa;
        int64_t deadline = sbx_now_ms() + timeout_ms;
        pid_t pid;
        int st, r;

        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (r != 0)
                return -r;
        for (;;) {
                pid_t w = waitpid(pid, &st, WNOHANG);
                if (w == pid)
                        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
                if (w < 0 && errno != EINTR)
                        return -errno;
                if (sbx_now_ms() >= deadline) {
                        kill(pid, SIGKILL);
                        (void)waitpid(pid, &st, 0);
                        return -ETIMEDOUT;
                }
                sbx_sleep_ms(20);
        }
}

/* The session's workspace image: made once (sparse, ext4, the uid's root,
 * seeded from the host workspace), kept for every VM of the session. */
static int disk_ensure(struct qemu *q, struct qemu_vm *vm, const struct engine_spec *spec, struct sbx_error *err)
{
        const char *user = qemu_vm_label(vm, CONTAINER_LABEL_USER),
                   *session = qemu_vm_label(vm, CONTAINER_LABEL_SESSION);
        char owner[64];
        struct stat st;
        int fd, r;

        if (!user || !session)
                return sbx_error_set(err, -EINVAL, 0, "a microVM needs the session's labels");
        if (qemu_disk_path(q, user, session, vm->disk, sizeof(vm->disk)) < 0)
                return sbx_error_set(err, -EINVAL, 0, "no disk path for the session");
        if (lstat(vm->disk, &st) == 0)
                return S_ISREG(st.st_mode) && st.st_uid == vm->uid
                               ? 0
                               : sbx_error_set(err, -EEXIST, 0, "%s is not the session's disk", vm->disk);
        fd = open(vm->disk, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return sbx_error_set(err, -errno, 0, "cannot make %s: %m", vm->disk);
        r = ftruncate(fd, q->disk_bytes) < 0 || fchown(fd, vm->uid, vm->gid) < 0 ? -errno : 0;
        close(fd);
        if (r == 0) {
                snprintf(owner, sizeof(owner), "root_owner=%u:%u", (unsigned)vm->uid, (unsigned)vm->gid);
                char *argv[] = {"mkfs.ext4", "-q", "-F", "-E", owner, "-d", (char *)spec->workspace, vm->disk, NULL};
                if (!spec->workspace) {
                        argv[5] = vm->disk;
                        argv[6] = NULL;
                }
                r = run_tool(argv, QEMU_MKFS_TIMEOUT_MS);
        }
        if (r < 0) {
                (void)unlink(vm->disk);
                return sbx_error_set(err, r, 0, "cannot make the session's ext4 image: %s", strerror(-r));
        }
        return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return -EIO;
                p = (const char *)p + w;
                n -= (size_t)w;
        }
        return 0;
}

/* One newc cpio entry (name, mode, data), padded to 4 bytes. */
static int cpio_entry(int fd, const char *name, unsigned mode, const void *data, size_t len)
{
        static const char zeros[4];
        char h[111];
        size_t nlen = strlen(name) + 1;

        snprintf(h, sizeof(h), "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X", 1u, mode, 0u, 0u, 1u, 0u,
                 (unsigned)len, 0u, 0u, 0u, 0u, (unsigned)nlen, 0u);
        if (write_all(fd, h, 110) < 0 || write_all(fd, name, nlen) < 0 ||
            write_all(fd, zeros, (4 - (110 + nlen) % 4) % 4) < 0 || write_all(fd, data, len) < 0 ||
            write_all(fd, zeros, (4 - len % 4) % 4) < 0)
                return -EIO;
        return 0;
}

static int read_file(const char *path, size_t max, char **ret, size_t *ret_len)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        char *buf;
        size_t len = 0;

        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > max)
                return -EFBIG;
        buf = malloc((size_t)st.st_size + 1);
        if (!buf)
                return -ENOMEM;
        while (len < (size_t)st.st_size) {
                ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);
                if (n <= 0) {
                        free(buf);
                        return -EIO;
                }
                len += (size_t)n;
        }
        *ret = buf;
        *ret_len = len;
        return 0;
}

/* The guest's initramfs: build-vm.sh's, then a second archive with the
 * daemon's runner (the kernel unpacks concatenated archives; the second
 * must start on a 4-byte boundary, zeros before it are skipped). */
static int initrd_make(struct qemu *q, const struct qemu_vm *vm, const char *runner, struct sbx_error *err)
{
        char path[SBX_PATH_MAX];
        _cleanup_free_ char *base = NULL, *bin = NULL;
        size_t base_len, bin_len;
        static const char zeros[4];
        int fd, r;

        r = read_file(q->initrd, QEMU_RUNNER_MAX, &base, &base_len);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot read %s: %s", q->initrd, strerror(-r));
        r = read_file(runner, QEMU_RUNNER_MAX, &bin, &bin_len);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot read the runner %s: %s", runner, strerror(-r));
        if (qemu_vm_path(q, vm->id, "initrd", path, sizeof(path)) < 0)
                return sbx_error_set(err, -ENAMETOOLONG, 0, "path too long");
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                return sbx_error_set(err, -errno, 0, "cannot make %s: %m", path);
        r = write_all(fd, base, base_len);
        if (r == 0)
                r = write_all(fd, zeros, (4 - base_len % 4) % 4);
        if (r == 0)
                r = cpio_entry(fd, "sandboxd-runner", 0100755, bin, bin_len);
        if (r == 0)
                r = cpio_entry(fd, "TRAILER!!!", 0, NULL, 0);
        if (close(fd) < 0 && r == 0)
                r = -errno;
        return r < 0 ? sbx_error_set(err, r, 0, "cannot write %s", path) : 0;
}

int qemu_vm_prepare(struct qemu *q, struct qemu_vm *vm, const struct engine_spec *spec, struct sbx_error *err)
{
        char run[SBX_PATH_MAX];
        int r;

        if (qemu_vm_path(q, vm->id, "run", run, sizeof(run)) < 0)
                return sbx_error_set(err, -ENAMETOOLONG, 0, "path too long");
        /* QEMU's own: its QMP socket and the console (the VM's directory stays root's) */
        if (mkdir(run, 0700) < 0 || chown(run, vm->uid, vm->gid) < 0)
                return sbx_error_set(err, -errno, 0, "cannot make %s: %m", run);
        r = initrd_make(q, vm, spec->runner_binary, err);
        if (r < 0)
                return r;
        return disk_ensure(q, vm, spec, err);
}

int qemu_disk_drop(struct qemu *q, const char *user, const char *session, struct sbx_error *err)
{
        char path[SBX_PATH_MAX];

        if (qemu_disk_path(q, user, session, path, sizeof(path)) < 0)
                return sbx_error_set(err, -EINVAL, 0, "no disk path for the session");
        if (unlink(path) < 0 && errno != ENOENT)
                return sbx_error_set(err, -errno, 0, "cannot remove %s: %m", path);
        return 0;
}

void qemu_vm_dir_remove(struct qemu *q, const char *id)
{
        static const char *const files[] = {"run/qmp.sock", "run/console.log", "run/qemu.log", "initrd",
                                            "state",        "state.tmp",       QEMU_MEM_SAVED, QEMU_MEM_SAVED_RAM,
                                            QEMU_CHANNEL,   QEMU_NET_CHANNEL};
        char path[SBX_PATH_MAX];

        /* unlink never follows a link; QEMU's uid may have made nothing else in run/ that
         * rmdir would need gone (if it did, the directory stays, and says so to --gc) */
        for (size_t i = 0; i < ELEMENTSOF(files); i++)
                if (qemu_vm_path(q, id, files[i], path, sizeof(path)) == 0)
                        (void)unlink(path);
        if (qemu_vm_path(q, id, "run", path, sizeof(path)) == 0)
                (void)rmdir(path);
        if (qemu_vm_path(q, id, QEMU_JAIL_DIR, path, sizeof(path)) == 0) /* qemu_jail.c's mount point, empty */
                (void)rmdir(path);
        /* a cgroup that cannot go yet keeps the (empty) directory: qemu_cgroup_sweep comes back to both */
        if (qemu_cgroup_remove(id) && qemu_vm_path(q, id, NULL, path, sizeof(path)) == 0)
                (void)rmdir(path);
}

/* The last tail_lines lines (< 0: all) of a file of QEMU's run directory, at most 64 KiB. */
static int run_file_tail(struct qemu *q, const struct qemu_vm *vm, const char *name, int tail_lines, char **ret_text,
                         struct sbx_error *err)
{
        char path[SBX_PATH_MAX];
        _cleanup_close_ int fd = -1;
        struct stat st;
        size_t cap = 65536, len = 0;
        char *buf;

        if (qemu_vm_path(q, vm->id, name, path, sizeof(path)) < 0)
                return sbx_error_set(err, -ENAMETOOLONG, 0, "path too long");
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                return sbx_error_set(err, -ENOENT, 0, "VM %s has no %s", vm->id, name);
        if (st.st_size > (off_t)cap)
                (void)lseek(fd, st.st_size - (off_t)cap, SEEK_SET);
        buf = malloc(cap + 1);
        if (!buf)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        for (ssize_t n; len < cap && (n = read(fd, buf + len, cap - len)) > 0;)
                len += (size_t)n;
        buf[len] = '\0';
        if (tail_lines >= 0) {
                size_t i = len;
                int lines = 0;
                if (i > 0 && buf[i - 1] == '\n')
                        i--;
                while (i > 0 && tail_lines > 0) {
                        if (buf[i - 1] == '\n' && ++lines == tail_lines)
                                break;
                        i--;
                }
                if (tail_lines == 0)
                        i = len;
                memmove(buf, buf + i, len - i + 1);
        }
        *ret_text = buf;
        return 0;
}

int qemu_vm_console(struct qemu *q, const struct qemu_vm *vm, int tail_lines, char **ret_text, struct sbx_error *err)
{
        return run_file_tail(q, vm, "run/console.log", tail_lines, ret_text, err);
}

/* ---- the runner channel ---- */

/* A channel's socket (the runner channel's, the net port's), bound and listening by the daemon
 * in the VM's directory (root's, 0711: QEMU's uid can neither swap nor reach it by name);
 * QEMU gets the listening descriptor as a chardev (server=on) and accepts one connection at a
 * time, again after each ends, so a restarted daemon dials the same socket. */
int qemu_sock_listen(int vmfd, const char *name, struct sbx_error *err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd;

        snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", vmfd, name);
        if (unlinkat(vmfd, name, 0) < 0 && errno != ENOENT)
                return sbx_error_set(err, -errno, 0, "cannot replace %s: %m", name);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return sbx_error_set(err, -errno, 0, "socket: %m");
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || fchmodat(vmfd, name, 0600, 0) < 0 ||
            listen(fd, 1) < 0) {
                int r = -errno;
                close(fd);
                return sbx_error_set(err, r, 0, "cannot listen on %s: %s", name, strerror(-r));
        }
        return fd;
}

int qemu_sock_connect(int vmfd, const char *name, int *ret_fd)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct stat st;
        _cleanup_close_ int fd = -1;

        /* root's socket in root's directory: never a link, never one QEMU's uid made */
        if (fstatat(vmfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISSOCK(st.st_mode) || st.st_uid != 0)
                return -ENOENT;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", vmfd, name);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return -errno; /* a listening socket's backlog takes it at once, accepted or not */
        *ret_fd = fd;
        fd = -1;
        return 0;
}

/* Dial the VM's runner channel and wait, until deadline and while QEMU lives, for the guest
 * runner's first frame: it must be RP_HELLO (peeked, left for the hub). -EPROTO: something
 * else came first (bytes of an earlier connection): a new connection starts clean. */
static int channel_dial(const struct qemu_vm *vm, int vmfd, int64_t deadline, int *ret_fd)
{
        _cleanup_close_ int fd = -1;
        int r = qemu_sock_connect(vmfd, QEMU_CHANNEL, &fd);

        if (r < 0)
                return r;
        for (;;) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                struct rp_hdr h;
                int64_t left = deadline - sbx_now_ms();

                if (left <= 0 || !qemu_vm_alive(vm))
                        return -ETIMEDOUT;
                if (poll(&p, 1, left < 1000 ? (int)left : 1000) <= 0)
                        continue;
                ssize_t n = recv(fd, &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                        return -ECONNRESET; /* QEMU closed it: another connection holds the channel */
                if (n < (ssize_t)RP_HDR_LEN) {
                        sbx_sleep_ms(5); /* the rest of the header is on its way */
                        continue;
                }
                if (h.type != RP_HELLO || h.len < sizeof(struct rp_hello) || h.len > sizeof(struct rp_hello) + 63)
                        return -EPROTO;
                *ret_fd = fd;
                fd = -1;
                return 0;
        }
}

int qemu_vm_adopt(struct qemu *q, const struct qemu_vm *vm, struct sbx_error *err)
{
        const char *user = qemu_vm_label(vm, CONTAINER_LABEL_USER),
                   *session = qemu_vm_label(vm, CONTAINER_LABEL_SESSION);
        struct engine_qemu_runner runner;
        char dir[SBX_PATH_MAX];
        int64_t deadline = sbx_now_ms() + QEMU_ADOPT_WAIT_MS;
        int fd = -1, r = -EPROTO;

        pthread_mutex_lock(&q->lock);
        runner = q->runner;
        pthread_mutex_unlock(&q->lock);
        if (!runner.attach || !user || !session || !vm->listening)
                return sbx_error_set(err, -EINVAL, 0, "VM %s cannot be adopted (no hub, labels or channel)", vm->id);
        if (qemu_vm_path(q, vm->id, NULL, dir, sizeof(dir)) < 0)
                return sbx_error_set(err, -ENAMETOOLONG, 0, "path too long");
        _cleanup_close_ int vmfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (vmfd < 0)
                return sbx_error_set(err, -errno, 0, "cannot open VM %s's directory: %m", vm->id);
        pthread_mutex_lock(&q->adopt_lock);
        if (qemu_booted(q, vm->id)) { /* another caller adopted it meanwhile */
                pthread_mutex_unlock(&q->adopt_lock);
                return 0;
        }
        for (int attempt = 0; attempt < 3 && r == -EPROTO; attempt++)
                r = channel_dial(vm, vmfd, deadline, &fd);
        if (r == 0) {
                r = runner.attach(runner.ud, user, session, fd); /* the hub owns fd from here */
                if (r == 0)
                        qemu_booted_set(q, vm->id, true);
        }
        pthread_mutex_unlock(&q->adopt_lock);
        if (r == 0) {
                int nr = qemu_net_attach(q, vm, vmfd);
                if (nr < 0)
                        log_ctx(LOG_LEVEL_WARN, user, session, vm->id, "microVM: no egress or forwards: %s",
                                strerror(-nr));
        }
        if (r < 0)
                return sbx_error_set(err, r, 0, "VM %s still runs but its runner did not answer when dialled again: %s",
                                     vm->id, strerror(-r));
        return 0;
}

/* ---- boot and end ---- */

int qemu_vm_kill(struct qemu *q, struct qemu_vm *vm, int timeout_ms, struct sbx_error *err)
{
        if (!qemu_vm_alive(vm))
                return 0;
        if (timeout_ms > 0 && qemu_qmp(q, vm, "quit", NULL) == 0 && wait_gone(vm, timeout_ms))
                goto gone;
        if (kill(vm->pid, SIGKILL) < 0 && errno != ESRCH)
                return sbx_error_set(err, -errno, 0, "cannot kill VM %s: %m", vm->id);
        if (!wait_gone(vm, QEMU_KILL_WAIT_MS))
                return sbx_error_set(err, -ETIMEDOUT, 0, "VM %s outlived SIGKILL", vm->id);
gone:;
        struct qemu_vm now;
        if (qemu_state_load(q, vm->id, &now) == 0) {
                qemu_now_rfc3339(now.finished_at);
                now.paused = false;
                (void)qemu_state_save(q, &now);
        }
        return 0;
}

/* The forked child's part: the session's uid, QEMU's fds (0-2; 3 the
 * runner channel; 4 the VM's directory and 5 the session's disk, O_PATH, so
 * that QEMU reaches its files through /proc/self/fd whatever the modes of the
 * directories above them and its jail; 6 a snapshot's frozen RAM when fds[3] >= 0; 7 the
 * net channel, qemu_net.c; 8 the image's root file system, read-only, when
 * fds[5] >= 0), its private mount namespace (qemu_jail.c) while still root,
 * then exec. Only async-signal-safe calls. */
static void child_exec(const struct qemu_vm *vm, const int fds[QEMU_SPAWN_FDS], const int cg[QEMU_CG_MAX],
                       const struct qemu_jail *jail, char *const argv[])
{
        sigset_t none;
        int hi[QEMU_SPAWN_FDS] = {-1, -1, -1, -1, -1, -1}, nul, lfd;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        /* into QEMU's cgroup while still root (qemu_cgroup.c): "0" is the writer itself */
        for (int i = 0; i < QEMU_CG_MAX; i++)
                if (cg[i] >= 0 && write(cg[i], "0", 1) != 1)
                        _exit(125);
        for (int i = 0; i < QEMU_SPAWN_FDS; i++)
                if ((i < 3 || fds[i] >= 0) && (hi[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10)) < 0)
                        _exit(126);
        if (qemu_jail_enter(jail) < 0)
                _exit(124);
        if (setgroups(0, NULL) < 0 || setgid(vm->gid) < 0 || setuid(vm->uid) < 0 ||
            prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                _exit(126);
        /* opened as the uid, in its own directory: a link it planted leads nowhere it cannot go */
        nul = open("/dev/null", O_RDWR | O_CLOEXEC);
        lfd = openat(hi[1], "run/qemu.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (nul < 0 || lfd < 0 || dup2(nul, 0) < 0 || dup2(nul, 1) < 0 || dup2(lfd, 2) < 0)
                _exit(126);
        /* fds[i] becomes 3 + i; an optional one absent leaves its number closed */
        for (int i = 0; i < QEMU_SPAWN_FDS; i++)
                if (hi[i] >= 0 ? dup2(hi[i], 3 + i) < 0 : close(3 + i) < 0 && errno != EBADF)
                        _exit(126);
        syscall(SYS_close_range, 3u + QEMU_SPAWN_FDS, ~0u, 0u);
        execv(argv[0], argv);
        _exit(127);
}

/* QEMU, twice forked so that it outlives the daemon; its pid. */
static pid_t spawn(const struct qemu_vm *vm, const int fds[QEMU_SPAWN_FDS], const int cg[QEMU_CG_MAX],
                   const struct qemu_jail *jail, char *const argv[])
{
        int pp[2];
        pid_t c, g = -1;

        if (pipe2(pp, O_CLOEXEC) < 0)
                return -errno;
        c = fork();
        if (c < 0) {
                close(pp[0]);
                close(pp[1]);
                return -errno;
        }
        if (c == 0) {
                pid_t gc = -1;
                if (setsid() >= 0)
                        gc = fork();
                if (gc == 0)
                        child_exec(vm, fds, cg, jail, argv);
                (void)!write(pp[1], &gc, sizeof(gc));
                _exit(gc > 0 ? 0 : 1);
        }
        close(pp[1]);
        if (read(pp[0], &g, sizeof(g)) != (ssize_t)sizeof(g))
                g = -1;
        close(pp[0]);
        while (waitpid(c, NULL, 0) < 0 && errno == EINTR)
                ;
        return g > 0 ? g : -ECHILD;
}

int qemu_vm_boot(struct qemu *q, struct qemu_vm *vm, struct sbx_error *err)
{
        const char *user = qemu_vm_label(vm, CONTAINER_LABEL_USER),
                   *session = qemu_vm_label(vm, CONTAINER_LABEL_SESSION);
        char dir[SBX_PATH_MAX], append[320], mem[32], smp[16], drive[SBX_PATH_MAX + 64];
        char ramobj[SBX_PATH_MAX + 128]; /* qemu_mem.c: the guest's RAM in a file */
        const char *disk = strrchr(vm->disk, '/');
        struct engine_qemu_runner runner;
        bool incoming = vm->incoming[0] || vm->saved; /* qemu_mem.c: booted from a memory save */
        int lfd, cfd = -1, r, ramfd = -1;
        int64_t mib = vm->memory > 0 ? vm->memory >> 20 : 512, cpus = (vm->nano_cpus + 999999999) / 1000000000;

        pthread_mutex_lock(&q->lock);
        runner = q->runner;
        pthread_mutex_unlock(&q->lock);
        if (!runner.attach || !runner.wait || !user || !session)
                return sbx_error_set(err, -EINVAL, 0, "the microVM engine has no runner hub or the VM no session");
        if (qemu_vm_path(q, vm->id, NULL, dir, sizeof(dir)) < 0 || !disk)
                return sbx_error_set(err, -ENAMETOOLONG, 0, "path too long");
        snprintf(append, sizeof(append),
                 "console=ttyS0 quiet lpj=4000000 tsc_early_khz=2000000 panic=-1 reboot=t sbx.uid=%u sbx.gid=%u",
                 (unsigned)vm->uid, (unsigned)vm->gid);
        /* the session's PID limit, for the guest's runner (RLIMIT_NPROC of the uid) */
        if (vm->pids_limit > 0) {
                size_t n = strlen(append);
                snprintf(append + n, sizeof(append) - n, " sbx.nproc=%" PRId64, vm->pids_limit);
        }
        /* the session has egress: the guest's runner sets the proxy variables */
        if (vm->egress) {
                size_t n = strlen(append);
                snprintf(append + n, sizeof(append) - n, " sbx.egress=1");
        }
        snprintf(mem, sizeof(mem), "%" PRId64, mib < 128 ? 128 : mib);
        snprintf(smp, sizeof(smp), "%" PRId64, cpus < 1 ? 1 : cpus > 16 ? 16 : cpus);
        /* the session's disk itself (fd 5), never its directory: the other sessions' disks are there */
        snprintf(drive, sizeof(drive), "file=/proc/self/fd/5,if=none,id=ws,format=raw");
        r = qemu_mem_args(q, vm, mib < 128 ? 128 : mib, ramobj, sizeof(ramobj), &ramfd, err);
        if (r < 0)
                return r;
        char *argv[64] = {q->binary, "-M", "microvm,x-option-roms=off,rtc=off,memory-backend=ram", "-object", ramobj,
                          "-accel",
                          /* TCG's translation cache, capped inside QEMU's cgroup (qemu_cgroup.c) */
                          q->kvm ? "kvm" : "tcg,tb-size=" QEMU_CG_TB_MIB, "-cpu",
                          q->kvm ? "host,-arch-capabilities" : "max", "-m", mem, "-smp", smp, "-nodefaults",
                          "-no-user-config", "-display", "none", "-no-reboot", "-nic", "none", "-kernel",
                          QEMU_JAIL_KERNEL, "-initrd", "/proc/self/fd/4/initrd", "-append", append, "-drive", drive,
                          "-device", "virtio-blk-device,drive=ws", "-device", "virtio-serial-device", "-chardev",
                          /* the runner channel: a socket that listens (qemu_sock_listen), so that a
                           * restarted daemon dials the same VM again (qemu_vm_adopt) */
                          "socket,id=runner,fd=3,server=on,wait=off", "-device",
                          "virtserialport,chardev=runner,name=sandboxd.runner", "-chardev",
                          /* egress and forwards, multiplexed (qemu_net.c); after the runner's
                           * port, which stays /dev/vport0p1 */
                          "socket,id=net,fd=7,server=on,wait=off", "-device",
                          "virtserialport,chardev=net,name=" QEMU_NET_PORT_NAME, "-serial",
                          "file:/proc/self/fd/4/run/console.log", "-qmp",
                          "unix:/proc/self/fd/4/run/qmp.sock,server=on,wait=off", "-sandbox",
                          "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny", NULL};
        size_t argc = 0;
        while (argv[argc])
                argc++;
        if (vm->rootfs[0]) {
                /* the image's root file system, read-only, after the workspace (vda): vdb, which
                 * the guest's runner finds by its serial (qemu_rootfs.c, the runner's guest_root) */
                argv[argc++] = "-drive";
                argv[argc++] = "file=/proc/self/fd/8,if=none,id=root,format=raw,readonly=on";
                argv[argc++] = "-device";
                argv[argc++] = "virtio-blk-device,drive=root,serial=" QEMU_ROOTFS_SERIAL;
        }
        if (incoming) {
                argv[argc++] = "-incoming";
                argv[argc++] = "defer";
        }
        argv[argc] = NULL;
        _cleanup_close_ int rootfd = -1;
        if (vm->rootfs[0]) {
                rootfd = open(vm->rootfs, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (rootfd < 0) {
                        int e = -errno;
                        if (ramfd >= 0)
                                close(ramfd);
                        return sbx_error_set(err, e, 0, "cannot open the root file system %s: %s", vm->rootfs,
                                             strerror(-e));
                }
        }

        _cleanup_close_ int vmfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        _cleanup_close_ int dfd = open(vm->disk, O_PATH | O_CLOEXEC | O_NOFOLLOW);
        _cleanup_close_ int ramfd_owned = ramfd;
        if (vmfd < 0 || dfd < 0)
                return sbx_error_set(err, -errno, 0, "cannot open VM %s's directory or disk: %m", vm->id);
        _cleanup_free_ struct qemu_jail *jail = malloc(sizeof(*jail));
        if (!jail)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        r = qemu_jail_prepare(q, dir, jail, err);
        if (r < 0)
                return r;
        int cg[QEMU_CG_MAX];
        /* a sweep (qemu_cgroup_sweep) waits until QEMU is in its cgroup */
        int cglock = qemu_cgroup_lock(false, QEMU_CG_LOCK_MS);
        (void)qemu_cgroup_make(vm, (mib < 128 ? 128 : mib) << 20, cg, vm->cgroup_note, sizeof(vm->cgroup_note));
        lfd = qemu_sock_listen(vmfd, QEMU_CHANNEL, err);
        int nfd = lfd < 0 ? -1 : qemu_sock_listen(vmfd, QEMU_NET_CHANNEL, err);
        if (lfd >= 0 && nfd < 0) {
                close(lfd);
                lfd = nfd;
        }
        pid_t pid =
                lfd < 0 ? lfd
                        : spawn(vm, (const int[QEMU_SPAWN_FDS]){lfd, vmfd, dfd, ramfd, nfd, rootfd}, cg, jail, argv);
        for (int i = 0; i < QEMU_CG_MAX; i++)
                if (cg[i] >= 0)
                        close(cg[i]);
        if (cglock >= 0)
                close(cglock);
        if (lfd < 0)
                return lfd;
        close(lfd); /* QEMU's alone from here: only it accepts on the channels */
        close(nfd);
        if (pid < 0)
                return sbx_error_set(err, (int)pid, 0, "cannot start QEMU: %s", strerror((int)-pid));
        char state;
        vm->pid = pid;
        if (proc_stat(pid, &state, &vm->pid_start) < 0)
                vm->pid_start = 0; /* gone already: alive never matches */
        vm->paused = false;
        vm->listening = true;
        vm->net = true;
        qemu_now_rfc3339(vm->started_at);
        vm->finished_at[0] = '\0';
        r = qemu_state_save(q, vm);
        if (r < 0) {
                kill(pid, SIGKILL);
                return sbx_error_set(err, r, 0, "cannot record VM %s: %s", vm->id, strerror(-r));
        }
        /* The channel goes to the hub once the guest's runner has spoken (its RP_HELLO waits in
         * the socket): the hub's heartbeat would give up on a guest still booting. Started
         * means the runner answers, as a container's start check expects it to run. */
        int64_t deadline = sbx_now_ms() + q->boot_timeout_ms;
        if (incoming) {
                /* qemu_mem.c: the guest's state goes in and it runs on; told to start over, its
                 * runner says hello again on the channel */
                struct sbx_error ie = {0};
                int ir = qemu_sock_connect(vmfd, QEMU_CHANNEL, &cfd);
                if (ir == 0)
                        ir = qemu_mem_incoming(q, vm, cfd, deadline, &ie);
                else
                        sbx_error_set(&ie, ir, 0, "cannot dial VM %s's runner channel: %s", vm->id, strerror(-ir));
                if (ir < 0) {
                        _cleanup_free_ char *ql = NULL;
                        if (cfd >= 0)
                                close(cfd);
                        (void)qemu_vm_kill(q, vm, 0, NULL);
                        if (run_file_tail(q, vm, "run/qemu.log", 3, &ql, NULL) < 0)
                                ql = NULL;
                        return sbx_error_set(err, ir, 0, "%s; QEMU: %s", ie.msg, ql && *ql ? ql : "(nothing)");
                }
                qemu_mem_booted(q, vm);
                r = 0;
        } else {
                r = channel_dial(vm, vmfd, deadline, &cfd);
        }
        if (r == 0) {
                r = runner.attach(runner.ud, user, session, cfd); /* the hub owns it from here */
                if (r < 0) {
                        (void)qemu_vm_kill(q, vm, 0, NULL);
                        return sbx_error_set(err, r, 0, "the runner hub refused VM %s's channel: %s", vm->id,
                                             strerror(-r));
                }
                qemu_booted_set(q, vm->id, true);
                /* egress and forwards: the guest's runner syncs on it when it comes up */
                int nr = qemu_net_attach(q, vm, vmfd);
                if (nr < 0)
                        log_ctx(LOG_LEVEL_WARN, user, session, vm->id, "microVM: no egress or forwards: %s",
                                strerror(-nr));
                while (sbx_now_ms() < deadline && qemu_vm_alive(vm))
                        if (runner.wait(runner.ud, user, session, 1000))
                                return 0;
                qemu_net_detach(q, vm->id);
                qemu_booted_set(q, vm->id, false);
        }
        _cleanup_free_ char *tail = NULL, *qlog = NULL;
        bool died = !qemu_vm_alive(vm);
        (void)qemu_vm_kill(q, vm, 0, NULL);
        if (qemu_vm_console(q, vm, 5, &tail, NULL) < 0)
                tail = NULL;
        if (run_file_tail(q, vm, "run/qemu.log", 3, &qlog, NULL) < 0) /* QEMU's own complaints */
                qlog = NULL;
        return sbx_error_set(err, -EIO, 0, "VM %s %s before its runner answered; console: %s; QEMU: %s", vm->id,
                             died ? "exited" : "took too long", tail && *tail ? tail : "(none)",
                             qlog && *qlog ? qlog : "(nothing)");
}
