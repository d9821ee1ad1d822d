/* qemu_gc.c — what the microVM engine leaves on the host that nothing
 * else removes (issue 38): VM cgroups without their VM (qemu_cgroup.c's
 * sweep) and the images' root file systems that nothing uses any more.
 *
 * A root file system {data_dir}/vm/rootfs/<hex>.img (about 1 GiB for the
 * python image) is made once per image id and kept (qemu_rootfs.c). One
 * goes when all of these hold:
 *   - no VM of this data directory names it in its state file (a live or
 *     paused session's VM, one paused to disk, one being booted: q_create
 *     writes the state before the boot);
 *   - no memory snapshot names it ({data_dir}/snapshots/<user>/<id>/rootfs,
 *     qemu_mem.c: its forks boot with it);
 *   - it was last used more than ENGINE_MICROVM_ROOTFS_GC_AGE_S ago (its mtime:
 *     qemu_rootfs_get touches it at every use);
 *   - its per-image lock (<hex>.lock, qemu_rootfs.c) is free: nobody is
 *     making it or waiting for it. The lock is held across the check and the
 *     unlink, so a first use that starts meanwhile waits and makes it again.
 * A make that a crash cut short (<hex>.img.new) goes by the same rules. A
 * session that is stopped and uses the image later makes it again (one
 * export, 17-47 s here). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qemu_internal.h"
#include "sandboxd/engine.h"
#include "sandboxd/log.h"

/* Whether a file of the text names the root file system hex (its path ends /<hex>.img). */
static bool names_hex(const char *text, const char *hex)
{
        char want[80];

        snprintf(want, sizeof(want), "/%s.img", hex);
        return strstr(text, want) != NULL;
}

static bool file_names_hex(int dfd, const char *name, const char *hex)
{
        char buf[SBX_PATH_MAX + 1];
        int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        ssize_t n;

        if (fd < 0)
                return false;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return false;
        buf[n] = '\0';
        return names_hex(buf, hex);
}

/* Whether a VM's state or a memory snapshot names hex; an unreadable tree counts as naming it. */
static bool in_use(struct qemu *q, const char *hex)
{
        char snaps[SBX_PATH_MAX];
        DIR *d;
        struct dirent *de;
        bool used = false;

        d = opendir(q->dir);
        if (!d)
                return errno != ENOENT;
        while (!used && (de = readdir(d))) {
                struct qemu_vm vm;
                if (engine_qemu_id(de->d_name) && qemu_state_load(q, de->d_name, &vm) == 0 && vm.rootfs[0] &&
                    names_hex(vm.rootfs, hex))
                        used = true;
        }
        closedir(d);
        if (used)
                return true;
        /* {data_dir}/snapshots: q->dir is {data_dir}/vm */
        size_t len = strlen(q->dir);
        if (len < 3 || strcmp(q->dir + len - 3, "/vm") != 0 ||
            snprintf(snaps, sizeof(snaps), "%.*s/snapshots", (int)(len - 3), q->dir) >= (int)sizeof(snaps))
                return true;
        int sfd = open(snaps, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0)
                return errno != ENOENT;
        DIR *users = fdopendir(sfd);
        if (!users) {
                close(sfd);
                return true;
        }
        while (!used && (de = readdir(users))) {
                if (de->d_name[0] == '.')
                        continue;
                int ufd = openat(dirfd(users), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                DIR *ids = ufd >= 0 ? fdopendir(ufd) : NULL;
                struct dirent *ie;
                if (!ids) {
                        if (ufd >= 0)
                                close(ufd);
                        continue;
                }
                while (!used && (ie = readdir(ids))) {
                        if (ie->d_name[0] == '.')
                                continue;
                        int xfd = openat(dirfd(ids), ie->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (xfd < 0)
                                continue;
                        used = file_names_hex(xfd, QEMU_MEM_ROOTFS, hex);
                        close(xfd);
                }
                closedir(ids);
        }
        closedir(users);
        return used;
}

/* rootfs/<hex>.img or <hex>.img.new: hex, or false */
static bool rootfs_name(const char *name, char hex[65], bool *ret_partial)
{
        size_t n = strspn(name, "0123456789abcdef");

        if (n != 64)
                return false;
        if (strcmp(name + 64, ".img") == 0)
                *ret_partial = false;
        else if (strcmp(name + 64, ".img.new") == 0)
                *ret_partial = true;
        else
                return false;
        memcpy(hex, name, 64);
        hex[64] = '\0';
        return true;
}

static void rootfs_sweep(struct qemu *q, const struct engine_microvm_gc *o)
{
        char dir[SBX_PATH_MAX];
        int64_t now = o->now_ms ? o->now_ms / 1000 : (int64_t)time(NULL);
        struct dirent *de;
        DIR *d;

        snprintf(dir, sizeof(dir), "%s/rootfs", q->dir);
        d = opendir(dir);
        if (!d)
                return;
        while ((de = readdir(d))) {
                char hex[65], lock[80], reason[128];
                bool partial;
                struct stat st;

                if (!rootfs_name(de->d_name, hex, &partial))
                        continue;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                        continue;
                if (now - (int64_t)st.st_mtime < ENGINE_MICROVM_ROOTFS_GC_AGE_S)
                        continue;
                /* the image's lock: a maker or a waiter holds it; held by gc until the unlink */
                snprintf(lock, sizeof(lock), "%s.lock", hex);
                int lfd = openat(dirfd(d), lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (lfd < 0)
                        continue;
                if (flock(lfd, LOCK_EX | LOCK_NB) < 0) {
                        close(lfd);
                        if (o->note)
                                o->note(o->ud, ENGINE_MICROVM_GC_ROOTFS, de->d_name, 0, "being made", -EBUSY);
                        continue;
                }
                if (in_use(q, hex) || (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                                       now - (int64_t)st.st_mtime < ENGINE_MICROVM_ROOTFS_GC_AGE_S)) {
                        close(lfd);
                        continue;
                }
                snprintf(reason, sizeof(reason), "%s, unused for %" PRId64 " s or more",
                         partial ? "a make cut short" : "no session, VM or memory snapshot uses it",
                         (int64_t)ENGINE_MICROVM_ROOTFS_GC_AGE_S);
                int r = o->dry_run ? 0 : unlinkat(dirfd(d), de->d_name, 0) < 0 ? -errno : 0;
                close(lfd);
                if (o->note)
                        o->note(o->ud, ENGINE_MICROVM_GC_ROOTFS, de->d_name, (uint64_t)st.st_blocks * 512, reason, r);
        }
        closedir(d);
}

struct cg_ctx {
        const struct engine_microvm_gc *o;
};

static void cg_note(void *ud, const char *path, int r)
{
        const struct engine_microvm_gc *o = ((struct cg_ctx *)ud)->o;

        if (o->note)
                o->note(o->ud, ENGINE_MICROVM_GC_CGROUP, path, 0, "a VM cgroup without its VM", r);
}

int engine_qemu_gc_run(struct engine *e, const struct engine_microvm_gc *o)
{
        struct qemu *q = qemu_of(e);
        struct cg_ctx c = {.o = o};

        if (!q)
                return -EOPNOTSUPP;
        (void)qemu_cgroup_sweep(q->dir, o->dry_run, cg_note, &c);
        if (o->rootfs)
                rootfs_sweep(q, o);
        return 0;
}

int engine_qemu_rootfs_note(struct engine *e, const char *id, char *buf, size_t size)
{
        struct qemu *q = qemu_of(e);
        struct qemu_vm vm;
        int r;

        if (size)
                buf[0] = '\0';
        if (!q || !engine_qemu_id(id))
                return -EOPNOTSUPP;
        r = qemu_state_load(q, id, &vm);
        if (r < 0)
                return r;
        sbx_strlcpy(buf, vm.rootfs_note, size);
        return 0;
}
