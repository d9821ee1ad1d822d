/* qemu_mem.c — a microVM's memory kept (issue 38 item 3): guest RAM in a
 * file, the devices' state by migration, and VMs booted from both.
 *
 * - Every VM's RAM is a memory-backend-file mapped shared, a file on tmpfs
 *   (/dev/shm/sandboxd-vm-<hash of the VM directory>/<id>.ram: the daemon
 *   makes it, root's directory, the file the VM's uid's, handed to QEMU as
 *   fd 6; RAM in a file on ext4 makes the guest fail under TCG here: its
 *   /init powers off, measured with QEMU 7.2): the file is the RAM, so a
 *   save (QMP stop, then migrate with x-ignore-shared
 *   to an fd: QEMU 7.2 has no file: URI and exec: dies under -sandbox
 *   spawn=deny) writes the devices' state only, a few hundred KiB.
 * - A memory snapshot (engine_qemu_mem_snapshot) is that state, a sparse copy
 *   of the RAM file (the frozen RAM) and a copy of the workspace disk, taken with
 *   the VM stopped, into a directory the caller owns (the snapshot's).
 * - A VM made for a session that engine_qemu_mem_expect named boots from
 *   such a directory: QEMU -incoming defer, its RAM the frozen RAM mapped
 *   private (copy-on-write), the state fed through QMP getfd, then the guest
 *   runs on where it stood. The frozen RAM goes to QEMU as a sealed memfd
 *   (F_SEAL_WRITE: QEMU 7.2's memory-backend-file opens its file O_RDWR, and
 *   a fork must not be able to write the pages its siblings share); one
 *   memfd per frozen file, kept while the file exists, so every fork of a
 *   snapshot maps the same pages.
 * - The guest's runner believes its channel is still the one it had: the
 *   daemon sends it a frame past RP_MAX_TO_RUNNER, the protocol error that
 *   makes the runner drop the connection, and on a port say RP_HELLO again
 *   (runner/sandboxd-runner.c); frames it had queued before are skipped here
 *   up to that RP_HELLO, which the hub then reads first.
 *
 * Locks: q->lock guards q->pending and q->frozen; never held across QMP or
 * a copy. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "qemu_internal.h"
#include "sandboxd/container.h"
#include "sandboxd/log.h"
#include "sandboxd/runner_proto.h"
#include "sandboxd/sha256.h"

#define MEM_TIMEOUT_MS 60000 /* a save or a load: a few MiB of state and a wait for QEMU */
#define QMP_LINE_MAX 16384

/* ---- QMP with fds ---- */

struct qmp {
        int fd;
        size_t len;
        char buf[QMP_LINE_MAX];
};

static void qmp_close(struct qmp *m)
{
        if (m->fd >= 0)
                close(m->fd);
        m->fd = -1;
}

/* The next line QEMU sent (NUL-terminated in m->buf, consumed at the next call). */
static int qmp_line(struct qmp *m, size_t *consumed)
{
        if (*consumed) {
                m->len -= *consumed;
                memmove(m->buf, m->buf + *consumed, m->len);
                *consumed = 0;
        }
        for (;;) {
                char *nl = memchr(m->buf, '\n', m->len);
                if (nl) {
                        *nl = '\0';
                        *consumed = (size_t)(nl + 1 - m->buf);
                        return 0;
                }
                if (m->len == sizeof(m->buf) - 1)
                        return -EPROTO;
                ssize_t n = read(m->fd, m->buf + m->len, sizeof(m->buf) - 1 - m->len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n == 0 ? -ECONNRESET : errno == EAGAIN ? -ETIMEDOUT : -errno;
                m->len += (size_t)n;
        }
}

/* Send one command (with pass_fd as SCM_RIGHTS when >= 0) and read to its
 * reply, events skipped; the reply line into ret (may be NULL). */
static int qmp_call(struct qmp *m, const char *cmd, int pass_fd, char *ret, size_t size)
{
        size_t len = strlen(cmd), consumed = 0;
        struct iovec iov = {.iov_base = (void *)cmd, .iov_len = len};
        union {
                struct cmsghdr h;
                char b[CMSG_SPACE(sizeof(int))];
        } ctl = {0};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        int r;

        if (pass_fd >= 0) {
                msg.msg_control = ctl.b;
                msg.msg_controllen = sizeof(ctl.b);
                struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
        }
        if (sendmsg(m->fd, &msg, MSG_NOSIGNAL) != (ssize_t)len)
                return -EIO;
        for (;;) {
                r = qmp_line(m, &consumed);
                if (r < 0)
                        return r;
                if (strstr(m->buf, "\"event\""))
                        continue;
                if (ret)
                        sbx_strlcpy(ret, m->buf, size);
                r = strstr(m->buf, "\"return\"") ? 0 : strstr(m->buf, "\"error\"") ? -EIO : -EPROTO;
                m->len -= consumed;
                memmove(m->buf, m->buf + consumed, m->len);
                return r;
        }
}

/* Connect to the VM's QMP (retried until deadline: a QEMU just started makes its socket soon). */
static int qmp_open(struct qemu *q, const struct qemu_vm *vm, int64_t deadline, struct qmp *m, struct sbx_error *err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct timeval tv = {.tv_sec = 10};
        char path[SBX_PATH_MAX];
        size_t consumed = 0;
        struct stat st;
        int r;

        m->fd = -1;
        m->len = 0;
        if (qemu_vm_path(q, vm->id, "run/qmp.sock", path, sizeof(path)) < 0 || strlen(path) >= sizeof(sa.sun_path))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "the QMP socket's path is too long");
        strcpy(sa.sun_path, path);
        for (;;) {
                /* only a socket of the VM's uid is spoken to, never a link */
                if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_uid == vm->uid) {
                        m->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                        if (m->fd < 0)
                                return sbx_error_set(err, -errno, 0, "socket: %m");
                        if (connect(m->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
                                break;
                        qmp_close(m);
                }
                if (sbx_now_ms() >= deadline || !qemu_vm_alive(vm))
                        return sbx_error_set(err, -ETIMEDOUT, 0, "VM %s has no QMP socket", vm->id);
                sbx_sleep_ms(5);
        }
        (void)setsockopt(m->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        (void)setsockopt(m->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        r = qmp_line(m, &consumed); /* the greeting */
        if (r == 0 && !strstr(m->buf, "\"QMP\""))
                r = -EPROTO;
        if (r == 0) {
                m->len -= consumed;
                memmove(m->buf, m->buf + consumed, m->len);
                r = qmp_call(m, "{\"execute\":\"qmp_capabilities\"}\n", -1, NULL, 0);
        }
        if (r < 0) {
                qmp_close(m);
                return sbx_error_set(err, r, 0, "VM %s's QMP: %s", vm->id, strerror(-r));
        }
        return 0;
}

static const char CAPS_IGNORE_SHARED[] =
        "{\"execute\":\"migrate-set-capabilities\",\"arguments\":{\"capabilities\":"
        "[{\"capability\":\"x-ignore-shared\",\"state\":true}]}}\n";

/* Migrate the stopped VM's state into state_fd and wait for it to complete. */
static int qmp_save(struct qmp *m, const struct qemu_vm *vm, int state_fd, struct sbx_error *err)
{
        char reply[QMP_LINE_MAX];
        int64_t deadline = sbx_now_ms() + MEM_TIMEOUT_MS;
        int r;

        r = qmp_call(m, "{\"execute\":\"stop\"}\n", -1, reply, sizeof(reply));
        if (r == 0)
                r = qmp_call(m, CAPS_IGNORE_SHARED, -1, reply, sizeof(reply));
        if (r == 0)
                r = qmp_call(m, "{\"execute\":\"getfd\",\"arguments\":{\"fdname\":\"sbxmem\"}}\n", state_fd, reply,
                             sizeof(reply));
        if (r == 0)
                r = qmp_call(m, "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"fd:sbxmem\"}}\n", -1, reply,
                             sizeof(reply));
        while (r == 0) {
                r = qmp_call(m, "{\"execute\":\"query-migrate\"}\n", -1, reply, sizeof(reply));
                if (r < 0 || strstr(reply, "\"completed\""))
                        break;
                if (strstr(reply, "\"failed\"") || strstr(reply, "\"cancelled\""))
                        r = -EIO;
                else if (sbx_now_ms() >= deadline)
                        r = -ETIMEDOUT;
                else
                        sbx_sleep_ms(2);
        }
        if (r < 0)
                return sbx_error_set(err, r, 0, "VM %s: saving its memory failed (%s): %.300s", vm->id, strerror(-r),
                                     reply);
        return 0;
}

/* ---- files ---- */

/* A file of the VM's uid (QEMU made it, or it is the session's disk): never a link, never another's. */
static int open_uid_file(const char *path, uid_t uid)
{
        struct stat st;
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != uid || st.st_nlink != 1) {
                close(fd);
                return -EPERM;
        }
        return fd;
}

/* A sparse copy of srcfd as dirfd/name; with sync, on disk before it returns (else the
 * caller's sync_at does that later). */
static int copy_into(int srcfd, int dirfd, const char *name, mode_t mode, bool sync)
{
        _cleanup_close_ int dst = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        int r;

        if (dst < 0)
                return -errno;
        r = sbx_copy_sparse(srcfd, dst);
        if (r == 0 && sync && fsync(dst) < 0)
                r = -errno;
        return r;
}

static int sync_at(int dirfd, const char *name)
{
        _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

        return fd < 0 || fsync(fd) < 0 ? -errno : 0;
}

static int64_t allocated(int dirfd, const char *name)
{
        struct stat st;

        return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? (int64_t)st.st_blocks * 512 : 0;
}

/* ---- the RAM file ---- */

/* /dev/shm/sandboxd-vm-<16 hex of the VM directory>: root's, 0700, never a link. */
static int shm_dir(const struct qemu *q, char *buf, size_t size)
{
        char hex[65];
        struct stat st;

        if (sha256_hex(q->dir, strlen(q->dir), hex) < 0)
                return -EINVAL;
        snprintf(buf, size, "/dev/shm/sandboxd-vm-%.16s", hex);
        if (mkdir(buf, 0700) < 0 && errno != EEXIST)
                return -errno;
        if (lstat(buf, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 0077))
                return -EPERM;
        return 0;
}

static int ram_path(const struct qemu *q, const char *id, char *buf, size_t size)
{
        char dir[128];
        int r = shm_dir(q, dir, sizeof(dir));

        if (r < 0)
                return r;
        return snprintf(buf, size, "%s/%s.ram", dir, id) >= (int)size ? -ENAMETOOLONG : 0;
}

void qemu_mem_ram_drop(struct qemu *q, const char *id)
{
        char path[SBX_PATH_MAX];

        if (ram_path(q, id, path, sizeof(path)) == 0) {
                (void)unlink(path);
                *strrchr(path, '/') = '\0';
                (void)rmdir(path); /* the last VM's: the directory goes too (ram_make makes it again) */
        }
}

/* The VM's RAM file, made anew (empty: a cold boot; from its save: a resume), the VM's uid's. */
static int ram_make(struct qemu *q, const struct qemu_vm *vm, int from)
{
        char path[SBX_PATH_MAX];
        int fd, r;

        r = ram_path(q, vm->id, path, sizeof(path));
        if (r < 0)
                return r;
        (void)unlink(path);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno == ENOENT && ram_path(q, vm->id, path, sizeof(path)) == 0) /* a drop's rmdir between */
                fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        r = from >= 0 ? sbx_copy_sparse(from, fd) : 0;
        if (r == 0 && fchown(fd, vm->uid, vm->gid) < 0)
                r = -errno;
        if (r < 0) {
                close(fd);
                (void)unlink(path);
                return r;
        }
        return fd;
}

/* ---- the snapshot ---- */

int qemu_mem_snapshot(struct qemu *q, const char *id, int dirfd, int64_t room, int64_t *ret_bytes,
                      struct sbx_error *err)
{
        struct qemu_vm vm;
        struct qmp m = {.fd = -1};
        char ram[SBX_PATH_MAX];
        _cleanup_close_ int ramfd = -1, diskfd = -1, statefd = -1;
        struct stat rs, ds;
        int r;

        r = qemu_state_load(q, id, &vm);
        if (r < 0)
                return sbx_error_set(err, r, 0, "no VM %s", id);
        if (!qemu_vm_alive(&vm) || !qemu_booted(q, id))
                return sbx_error_set(err, -ESRCH, 409, "VM %s is not running: nothing in memory to keep", id);
        if (vm.ram_private)
                return sbx_error_set(err, -EOPNOTSUPP, 0,
                                     "this session was made from a memory snapshot: its memory cannot be "
                                     "snapshotted again yet (docs/microvm.md)");
        if (ram_path(q, id, ram, sizeof(ram)) < 0)
                return sbx_error_set(err, -ENAMETOOLONG, 0, "no RAM file path");
        ramfd = open_uid_file(ram, vm.uid);
        diskfd = open_uid_file(vm.disk, vm.uid);
        if (ramfd < 0 || diskfd < 0)
                return sbx_error_set(err, -ENOENT, 0, "VM %s keeps no RAM file or disk to copy", id);
        if (fstat(ramfd, &rs) < 0 || fstat(diskfd, &ds) < 0)
                return sbx_error_set(err, -errno, 0, "stat: %m");
        /* the copies take what the sources hold now, and the state a little more */
        if ((int64_t)(rs.st_blocks + ds.st_blocks) * 512 > room)
                return sbx_error_set(err, -EDQUOT, 0,
                                     "snapshot quota exceeded: the VM's memory and disk hold %lld bytes and %lld "
                                     "are left of limits.snapshot_bytes_per_user",
                                     (long long)(rs.st_blocks + ds.st_blocks) * 512, (long long)room);
        statefd = openat(dirfd, QEMU_MEM_STATE, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (statefd < 0)
                return sbx_error_set(err, -errno, 0, "cannot create the memory state: %m");
        int64_t t[5];
        t[0] = sbx_now_ms();
        r = qmp_open(q, &vm, sbx_now_ms() + 5000, &m, err);
        if (r < 0)
                return r;
        t[1] = sbx_now_ms();
        r = qmp_save(&m, &vm, statefd, err);
        t[2] = t[3] = sbx_now_ms();
        /* stopped: QEMU flushed the disk, the RAM file stands still */
        if (r == 0) {
                /* what the guest holds open through its net port: no VM from this carries it */
                char num[24];
                int fd = openat(dirfd, ENGINE_MEMORY_CONNECTIONS, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                0600);
                int n = snprintf(num, sizeof(num), "%zu\n", qemu_net_connections(q, id));
                if (fd < 0 || write(fd, num, (size_t)n) != n)
                        r = sbx_error_set(err, -EIO, 0, "cannot record the VM's open connections");
                if (fd >= 0)
                        close(fd);
        }
        if (r == 0) {
                /* into the page cache while stopped; written back after the guest runs on */
                r = copy_into(ramfd, dirfd, QEMU_MEM_RAM, 0400, false);
                t[3] = sbx_now_ms();
                if (r == 0)
                        r = copy_into(diskfd, dirfd, QEMU_MEM_DISK, 0600, false);
                if (r < 0)
                        sbx_error_set(err, r, 0, "cannot copy the VM's memory or disk: %s", strerror(-r));
        }
        if (r == 0 && fsync(statefd) < 0)
                r = sbx_error_set(err, -errno, 0, "cannot write the memory state: %m");
        if (r == 0 && vm.rootfs[0]) {
                /* the VM's root file system: every VM from this snapshot has the same disk (the
                 * session's image may be gone from Docker by then; the cached file never changes) */
                int fd = openat(dirfd, QEMU_MEM_ROOTFS, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                size_t n = strlen(vm.rootfs);
                if (fd < 0 || write(fd, vm.rootfs, n) != (ssize_t)n || fsync(fd) < 0)
                        r = sbx_error_set(err, -EIO, 0, "cannot record the VM's root file system");
                if (fd >= 0)
                        close(fd);
        }
        if (!vm.paused) {
                char reply[512];
                int c = qmp_call(&m, "{\"execute\":\"cont\"}\n", -1, reply, sizeof(reply));
                if (c < 0 && r == 0)
                        r = sbx_error_set(err, c, 0, "VM %s did not run on after its snapshot: %s", id, reply);
        }
        qmp_close(&m);
        int64_t t_cont = sbx_now_ms();
        /* the snapshot is whole only once its copies are on disk (the caller marks it ready after) */
        if (r == 0 && (sync_at(dirfd, QEMU_MEM_RAM) < 0 || sync_at(dirfd, QEMU_MEM_DISK) < 0))
                r = sbx_error_set(err, -errno, 0, "cannot write the VM's memory or disk: %m");
        if (r < 0)
                return r;
        t[4] = sbx_now_ms();
        log_ctx(LOG_LEVEL_INFO, qemu_vm_label(&vm, CONTAINER_LABEL_USER), qemu_vm_label(&vm, CONTAINER_LABEL_SESSION),
                id,
                "microvm: memory snapshot: QMP %lld ms, stop and state %lld ms, RAM copied %lld ms, disk copied "
                "and cont %lld ms (the guest stood %lld ms), written back %lld ms",
                (long long)(t[1] - t[0]), (long long)(t[2] - t[1]), (long long)(t[3] - t[2]),
                (long long)(t_cont - t[3]), (long long)(t_cont - t[1]), (long long)(t[4] - t_cont));
        *ret_bytes =
                allocated(dirfd, QEMU_MEM_STATE) + allocated(dirfd, QEMU_MEM_RAM) + allocated(dirfd, QEMU_MEM_DISK);
        return 0;
}

/* ---- pause to disk ---- */

int qemu_mem_pause_to_disk(struct qemu *q, const char *id, struct sbx_error *err)
{
        struct qemu_vm vm;
        struct qmp m = {.fd = -1};
        char path[SBX_PATH_MAX];
        _cleanup_close_ int statefd = -1;
        int r;

        r = qemu_state_load(q, id, &vm);
        if (r < 0)
                return sbx_error_set(err, r, 0, "no VM %s", id);
        if (vm.saved)
                return 0;
        if (!qemu_vm_alive(&vm) || !qemu_booted(q, id) || !vm.paused)
                return sbx_error_set(err, -EBUSY, 409, "VM %s is not paused", id);
        if (vm.ram_private)
                return sbx_error_set(err, -EOPNOTSUPP, 0,
                                     "VM %s runs on a snapshot's frozen RAM: it stays paused in memory", id);
        if (qemu_vm_path(q, id, QEMU_MEM_SAVED, path, sizeof(path)) < 0)
                return sbx_error_set(err, -ENAMETOOLONG, 0, "path too long");
        /* root's, in the VM's own (root's) directory; QEMU writes it through the fd only */
        statefd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (statefd < 0)
                return sbx_error_set(err, -errno, 0, "cannot create %s: %m", path);
        r = qmp_open(q, &vm, sbx_now_ms() + 5000, &m, err);
        if (r == 0)
                r = qmp_save(&m, &vm, statefd, err);
        qmp_close(&m);
        if (r == 0 && fsync(statefd) < 0)
                r = sbx_error_set(err, -errno, 0, "cannot write %s: %m", path);
        if (r < 0) {
                (void)unlink(path);
                return r;
        }
        /* the state is whole: QEMU may go; its RAM, from tmpfs to the VM's directory */
        r = qemu_vm_kill(q, &vm, 5000, err);
        if (r < 0)
                return r;
        qemu_booted_set(q, id, false);
        {
                char ram[SBX_PATH_MAX];
                _cleanup_close_ int src = -1, dir = -1;
                if (ram_path(q, id, ram, sizeof(ram)) == 0)
                        src = open_uid_file(ram, vm.uid);
                if (qemu_vm_path(q, id, NULL, path, sizeof(path)) == 0)
                        dir = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (dir >= 0)
                        (void)unlinkat(dir, QEMU_MEM_SAVED_RAM, 0);
                r = src >= 0 && dir >= 0 ? copy_into(src, dir, QEMU_MEM_SAVED_RAM, 0600, true) : -ENOENT;
                if (r < 0) {
                        /* QEMU is gone and its RAM cannot be kept: the session starts again */
                        if (dir >= 0)
                                (void)unlinkat(dir, QEMU_MEM_SAVED, 0);
                        return sbx_error_set(err, r, 0, "VM %s: cannot keep its RAM: %s", id, strerror(-r));
                }
                qemu_mem_ram_drop(q, id);
        }
        r = qemu_state_load(q, id, &vm);
        if (r == 0) {
                vm.saved = true;
                vm.paused = true;
                r = qemu_state_save(q, &vm);
        }
        return r < 0 ? sbx_error_set(err, r, 0, "cannot record VM %s's state: %s", id, strerror(-r)) : 0;
}

void qemu_mem_saved_drop(struct qemu *q, struct qemu_vm *vm)
{
        char path[SBX_PATH_MAX];

        if (qemu_vm_path(q, vm->id, QEMU_MEM_SAVED, path, sizeof(path)) == 0)
                (void)unlink(path);
        if (qemu_vm_path(q, vm->id, QEMU_MEM_SAVED_RAM, path, sizeof(path)) == 0)
                (void)unlink(path);
        vm->saved = false;
        (void)qemu_state_save(q, vm);
}

void qemu_mem_booted(struct qemu *q, struct qemu_vm *vm)
{
        vm->incoming[0] = '\0';
        if (vm->saved)
                qemu_mem_saved_drop(q, vm); /* saves the state */
        else
                (void)qemu_state_save(q, vm);
}

/* ---- expected boots ---- */

int qemu_mem_expect(struct qemu *q, const char *user, const char *session, const char *dir, struct sbx_error *err)
{
        struct stat st;
        int r = 0;

        if (!dir || strlen(dir) >= sizeof(q->pending[0].dir) || strlen(user) >= sizeof(q->pending[0].user) ||
            strlen(session) >= sizeof(q->pending[0].session))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "the memory snapshot's path is too long");
        if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0)
                return sbx_error_set(err, -ENOENT, 0, "no memory snapshot at %s", dir);
        pthread_mutex_lock(&q->lock);
        size_t i;
        for (i = 0; i < q->n_pending; i++)
                if (strcmp(q->pending[i].user, user) == 0 && strcmp(q->pending[i].session, session) == 0)
                        break;
        if (i == QEMU_PENDING_MAX)
                r = -EBUSY;
        else {
                sbx_strlcpy(q->pending[i].user, user, sizeof(q->pending[i].user));
                sbx_strlcpy(q->pending[i].session, session, sizeof(q->pending[i].session));
                sbx_strlcpy(q->pending[i].dir, dir, sizeof(q->pending[i].dir));
                if (i == q->n_pending)
                        q->n_pending++;
        }
        pthread_mutex_unlock(&q->lock);
        return r < 0 ? sbx_error_set(err, r, 0, "too many sessions are being made from memory snapshots") : 0;
}

void qemu_mem_unexpect(struct qemu *q, const char *user, const char *session, char ret_dir[SBX_PATH_MAX])
{
        if (ret_dir)
                ret_dir[0] = '\0';
        pthread_mutex_lock(&q->lock);
        for (size_t i = 0; i < q->n_pending; i++)
                if (strcmp(q->pending[i].user, user) == 0 && strcmp(q->pending[i].session, session) == 0) {
                        if (ret_dir)
                                sbx_strlcpy(ret_dir, q->pending[i].dir, SBX_PATH_MAX);
                        q->pending[i] = q->pending[--q->n_pending];
                        break;
                }
        pthread_mutex_unlock(&q->lock);
}

int qemu_mem_claim(struct qemu *q, struct qemu_vm *vm, struct sbx_error *err)
{
        const char *user = qemu_vm_label(vm, CONTAINER_LABEL_USER),
                   *session = qemu_vm_label(vm, CONTAINER_LABEL_SESSION);
        char dir[SBX_PATH_MAX], disk[SBX_PATH_MAX], tmp[SBX_PATH_MAX + 16];
        _cleanup_close_ int d = -1, src = -1, ramfd = -1;
        struct stat st;
        int r;

        if (!user || !session)
                return 0;
        qemu_mem_unexpect(q, user, session, dir);
        if (!dir[0])
                return 0;
        d = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (d >= 0) {
                src = openat(d, QEMU_MEM_DISK, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                ramfd = openat(d, QEMU_MEM_RAM, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (src < 0 || ramfd < 0 || fstat(ramfd, &st) < 0 ||
            faccessat(d, QEMU_MEM_STATE, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
                return sbx_error_set(err, -ENOENT, 0, "the memory snapshot at %s has lost its files", dir);
        /* the guest's RAM is the frozen file's size, whatever the session's limit says now */
        vm->memory = (int64_t)st.st_size;
        /* its devices are the snapshot's: the same root file system, or none */
        vm->rootfs[0] = vm->rootfs_note[0] = '\0';
        {
                _cleanup_close_ int rf = openat(d, QEMU_MEM_ROOTFS, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                ssize_t n = rf >= 0 ? read(rf, vm->rootfs, sizeof(vm->rootfs) - 1) : 0;
                vm->rootfs[n > 0 ? n : 0] = '\0';
                if (vm->rootfs[0] && access(vm->rootfs, R_OK) < 0)
                        return sbx_error_set(err, -ENOENT, 0, "the memory snapshot's root file system %s is gone",
                                             vm->rootfs);
        }
        sbx_strlcpy(vm->incoming, dir, sizeof(vm->incoming));
        vm->ram_private = true;
        /* the snapshot's disk, the session's from now on: beside, then renamed over */
        if (qemu_disk_path(q, user, session, disk, sizeof(disk)) < 0)
                return sbx_error_set(err, -EINVAL, 0, "no disk path for the session");
        int64_t t0 = sbx_now_ms();
        snprintf(tmp, sizeof(tmp), "%s.restore", disk);
        (void)unlink(tmp);
        _cleanup_close_ int dst = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (dst < 0)
                return sbx_error_set(err, -errno, 0, "cannot make %s: %m", tmp);
        r = sbx_copy_sparse(src, dst);
        if (r == 0 && fchown(dst, vm->uid, vm->gid) < 0)
                r = -errno;
        if (r == 0 && rename(tmp, disk) < 0)
                r = -errno;
        if (r < 0) {
                (void)unlink(tmp);
                return sbx_error_set(err, r, 0, "cannot put the snapshot's disk in place: %s", strerror(-r));
        }
        log_ctx(LOG_LEVEL_INFO, user, session, vm->id, "microvm: from memory: the snapshot's disk copied in %lld ms",
                (long long)(sbx_now_ms() - t0));
        return 0;
}

/* ---- frozen RAM, shared ---- */

/* A sealed memfd with the frozen RAM file's contents: one per file (by device and inode), kept
 * while the file has a name; a dup of it to the caller. */
/* With q->lock: the frozen RAM of deleted snapshots let go (the forks that map it keep their pages). */
static void frozen_sweep_locked(struct qemu *q)
{
        struct stat fs;

        for (size_t i = 0; i < q->n_frozen;) {
                struct qemu_frozen *f = &q->frozen[i];
                if (fstat(f->src, &fs) < 0 || fs.st_nlink == 0) {
                        close(f->src);
                        close(f->memfd);
                        *f = q->frozen[--q->n_frozen];
                        continue;
                }
                i++;
        }
}

void qemu_mem_sweep(struct qemu *q)
{
        pthread_mutex_lock(&q->lock);
        frozen_sweep_locked(q);
        pthread_mutex_unlock(&q->lock);
}

static int frozen_memfd(struct qemu *q, int ramfd)
{
        struct stat st;
        int fd = -1, r;

        if (fstat(ramfd, &st) < 0)
                return -errno;
        pthread_mutex_lock(&q->lock);
        frozen_sweep_locked(q);
        for (size_t i = 0; i < q->n_frozen && fd < 0; i++)
                if (q->frozen[i].dev == st.st_dev && q->frozen[i].ino == st.st_ino)
                        fd = fcntl(q->frozen[i].memfd, F_DUPFD_CLOEXEC, 3);
        pthread_mutex_unlock(&q->lock);
        if (fd >= 0)
                return fd;
        /* made outside the lock: two first forks at once make two, the second is kept uncached */
        int64_t t0 = sbx_now_ms();
        int mfd = memfd_create("sbx-frozen-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (mfd < 0)
                return -errno;
        r = sbx_copy_sparse(ramfd, mfd);
        if (r == 0 && fcntl(mfd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
                r = -errno;
        if (r < 0) {
                close(mfd);
                return r;
        }
        log_info("microvm: a snapshot's frozen RAM (%lld MiB) read into its shared memfd in %lld ms",
                 (long long)(st.st_size >> 20), (long long)(sbx_now_ms() - t0));
        pthread_mutex_lock(&q->lock);
        if (q->n_frozen < QEMU_FROZEN_MAX) {
                struct qemu_frozen *f = &q->frozen[q->n_frozen];
                f->src = fcntl(ramfd, F_DUPFD_CLOEXEC, 3);
                f->memfd = fcntl(mfd, F_DUPFD_CLOEXEC, 3);
                f->dev = st.st_dev;
                f->ino = st.st_ino;
                if (f->src >= 0 && f->memfd >= 0)
                        q->n_frozen++;
                else {
                        if (f->src >= 0)
                                close(f->src);
                        if (f->memfd >= 0)
                                close(f->memfd);
                }
        }
        pthread_mutex_unlock(&q->lock);
        return mfd;
}

void qemu_mem_free(struct qemu *q)
{
        for (size_t i = 0; i < q->n_frozen; i++) {
                close(q->frozen[i].src);
                close(q->frozen[i].memfd);
        }
        q->n_frozen = 0;
}

/* ---- booting from memory ---- */

int qemu_mem_args(struct qemu *q, const struct qemu_vm *vm, int64_t mib, char *obj, size_t size, int *ret_ramfd,
                  struct sbx_error *err)
{
        *ret_ramfd = -1;
        if (vm->incoming[0] && vm->ram_private) {
                _cleanup_close_ int d = open(vm->incoming, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), ramfd = -1;
                if (d >= 0)
                        ramfd = openat(d, QEMU_MEM_RAM, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (ramfd < 0)
                        return sbx_error_set(err, -ENOENT, 0, "the memory snapshot at %s has lost its RAM",
                                             vm->incoming);
                int fd = frozen_memfd(q, ramfd);
                if (fd < 0)
                        return sbx_error_set(err, fd, 0, "cannot map the frozen RAM: %s", strerror(-fd));
                *ret_ramfd = fd;
                /* fd 6 in QEMU; private: the guest's writes are its own, the file's pages everyone's */
                snprintf(obj, size, "memory-backend-file,id=ram,size=%" PRId64 "M,mem-path=/proc/self/fd/6,share=off",
                         mib);
                return 0;
        }
        /* its own RAM, shared: a cold boot's empty, a resume's from its save */
        char path[SBX_PATH_MAX];
        _cleanup_close_ int from = -1;
        if (vm->saved) {
                if (qemu_vm_path(q, vm->id, QEMU_MEM_SAVED_RAM, path, sizeof(path)) == 0)
                        from = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC); /* root's, the VM's directory */
                if (from < 0)
                        return sbx_error_set(err, -ENOENT, 0, "VM %s was paused to disk and its RAM is gone", vm->id);
        }
        int fd = ram_make(q, vm, from);
        if (fd < 0)
                return sbx_error_set(err, fd, 0, "cannot make VM %s's RAM file: %s", vm->id, strerror(-fd));
        *ret_ramfd = fd;
        snprintf(obj, size, "memory-backend-file,id=ram,size=%" PRId64 "M,mem-path=/proc/self/fd/6,share=on", mib);
        return 0;
}

/* Skip what the runner had queued before the reset, up to its RP_HELLO (left unread for the hub). */
static int await_hello(int chan, int64_t deadline, const struct qemu_vm *vm)
{
        unsigned char junk[4096];

        while (sbx_now_ms() < deadline && qemu_vm_alive(vm)) {
                struct pollfd p = {.fd = chan, .events = POLLIN};
                struct rp_hdr h;
                if (poll(&p, 1, 500) <= 0)
                        continue;
                if (!(p.revents & POLLIN))
                        return -ECONNRESET;
                ssize_t n = recv(chan, &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);
                if (n < (ssize_t)sizeof(h)) {
                        sbx_sleep_ms(2); /* a header still on its way */
                        continue;
                }
                if (h.type == RP_HELLO)
                        return 0;
                if (h.len > RP_MAX_FROM_RUNNER)
                        return 0; /* not a frame: the hub's framing says so */
                size_t left = sizeof(h) + h.len;
                while (left > 0 && sbx_now_ms() < deadline) {
                        n = read(chan, junk, left < sizeof(junk) ? left : sizeof(junk));
                        if (n > 0)
                                left -= (size_t)n;
                        else if (n < 0 && errno == EAGAIN)
                                (void)poll(&p, 1, 100);
                        else
                                return -ECONNRESET;
                }
        }
        return -ETIMEDOUT;
}

int qemu_mem_incoming(struct qemu *q, struct qemu_vm *vm, int chan, int64_t deadline, struct sbx_error *err)
{
        struct qmp m = {.fd = -1};
        char reply[QMP_LINE_MAX], path[SBX_PATH_MAX];
        _cleanup_close_ int d = -1, statefd = -1;
        int r;

        if (vm->incoming[0]) {
                d = open(vm->incoming, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (d >= 0)
                        statefd = openat(d, QEMU_MEM_STATE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        } else if (qemu_vm_path(q, vm->id, QEMU_MEM_SAVED, path, sizeof(path)) == 0) {
                statefd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC); /* root's, in the VM's own directory */
        }
        if (statefd < 0)
                return sbx_error_set(err, -ENOENT, 0, "VM %s: no memory state to load", vm->id);
        /* where the time goes (docs/microvm.md): QEMU's start to its QMP, the state in, cont, the
         * runner's hello */
        int64_t t[5];
        t[0] = sbx_now_ms();
        r = qmp_open(q, vm, deadline, &m, err);
        if (r < 0)
                return r;
        t[1] = sbx_now_ms();
        r = qmp_call(&m, CAPS_IGNORE_SHARED, -1, reply, sizeof(reply));
        if (r == 0)
                r = qmp_call(&m, "{\"execute\":\"getfd\",\"arguments\":{\"fdname\":\"sbxmem\"}}\n", statefd, reply,
                             sizeof(reply));
        if (r == 0)
                r = qmp_call(&m, "{\"execute\":\"migrate-incoming\",\"arguments\":{\"uri\":\"fd:sbxmem\"}}\n", -1,
                             reply, sizeof(reply));
        /* the state is in once QEMU leaves inmigrate; it then stands as the source did when saved
         * (stopped: the save began with stop), so cont */
        while (r == 0) {
                r = qmp_call(&m, "{\"execute\":\"query-status\"}\n", -1, reply, sizeof(reply));
                if (r < 0 || !strstr(reply, "\"inmigrate\""))
                        break;
                if (sbx_now_ms() >= deadline)
                        r = -ETIMEDOUT;
                else
                        sbx_sleep_ms(1);
        }
        t[2] = sbx_now_ms();
        if (r == 0 && !strstr(reply, "\"running\": true"))
                r = qmp_call(&m, "{\"execute\":\"cont\"}\n", -1, reply, sizeof(reply));
        qmp_close(&m);
        t[3] = sbx_now_ms();
        if (r < 0)
                return sbx_error_set(err, r, 0, "VM %s: loading its memory failed (%s): %.300s", vm->id, strerror(-r),
                                     reply);
        /* the reset: a header no daemon frame may carry (RP_MAX_TO_RUNNER), so the runner starts over */
        struct rp_hdr reset = {.len = RP_MAX_TO_RUNNER + 1, .type = RP_PING};
        if (write(chan, &reset, sizeof(reset)) != (ssize_t)sizeof(reset))
                return sbx_error_set(err, -EIO, 0, "VM %s: its runner channel is closed", vm->id);
        r = await_hello(chan, deadline, vm);
        if (r < 0)
                return sbx_error_set(err, r, 0, "VM %s: its runner did not say hello after the restore: %s", vm->id,
                                     strerror(-r));
        t[4] = sbx_now_ms();
        log_ctx(LOG_LEVEL_INFO, qemu_vm_label(vm, CONTAINER_LABEL_USER), qemu_vm_label(vm, CONTAINER_LABEL_SESSION),
                vm->id, "microvm: from memory: QMP up %lld ms, state in %lld ms, cont %lld ms, runner hello %lld ms",
                (long long)(t[1] - t[0]), (long long)(t[2] - t[1]), (long long)(t[3] - t[2]), (long long)(t[4] - t[3]));
        return 0;
}

/* ---- the public face (engine_qemu.h) ---- */

int engine_qemu_mem_snapshot(struct engine *e, const char *id, int dirfd, int64_t room, int64_t *ret_bytes,
                             struct sbx_error *err)
{
        struct qemu *q = qemu_of(e);

        if (!q || !engine_qemu_id(id))
                return sbx_error_set(err, -EOPNOTSUPP, 0, "memory snapshots need runtime microvm");
        return qemu_mem_snapshot(q, id, dirfd, room, ret_bytes, err);
}

int engine_qemu_mem_expect(struct engine *e, const char *user, const char *session, const char *dir,
                           struct sbx_error *err)
{
        struct qemu *q = qemu_of(e);

        if (!q)
                return sbx_error_set(err, -EOPNOTSUPP, 0, "memory snapshots need runtime microvm");
        return qemu_mem_expect(q, user, session, dir, err);
}

void engine_qemu_mem_unexpect(struct engine *e, const char *user, const char *session)
{
        struct qemu *q = qemu_of(e);

        if (q)
                qemu_mem_unexpect(q, user, session, NULL);
}

int engine_qemu_pause_to_disk(struct engine *e, const char *id, struct sbx_error *err)
{
        struct qemu *q = qemu_of(e);

        if (!q || !engine_qemu_id(id))
                return sbx_error_set(err, -EOPNOTSUPP, 0, "only a microVM pauses to disk");
        return qemu_mem_pause_to_disk(q, id, err);
}
