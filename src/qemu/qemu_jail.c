/* qemu_jail.c — QEMU's private mount namespace (issue 38, "a private mount
 * namespace with only what it needs").
 *
 * The forked child, still root and before it drops to the session's uid,
 * enters a mount namespace of its own (unshare CLONE_NEWNS, / made private
 * so nothing propagates back), mounts a small tmpfs on the VM's empty
 * `jail/` directory, binds into it what QEMU needs and pivots into it:
 *
 *   /usr (read-only) and the host's /bin /lib /lib64 /sbin (links into usr/
 *   where the host has them so, read-only binds otherwise), /etc/ld.so.cache,
 *   /proc, /dev/{null,zero,full,random,urandom} and /dev/kvm when KVM is
 *   used, /vmlinux (the guest kernel, read-only) and /vm (the VM's own
 *   directory: its initrd, run/, the channels' sockets).
 *
 * The session's disk, its RAM file and the image's root file system come as
 * descriptors (qemu_vm.c, child_exec), never as a directory: nothing of the
 * host's data directory, another session's VM or disk included, can be
 * named from inside. The tmpfs root is read-only once pivoted.
 *
 * Everything the child does is prepared here in the parent (paths, the
 * list of steps); qemu_jail_enter only makes system calls. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "qemu_internal.h"

static int step_add(struct qemu_jail *j, int kind, const char *src, const char *dst)
{
        struct qemu_jail_step *s;

        if (j->n >= QEMU_JAIL_STEPS)
                return -E2BIG;
        s = &j->steps[j->n++];
        s->kind = kind;
        s->src[0] = '\0';
        if (src && snprintf(s->src, sizeof(s->src), "%s", src) >= (int)sizeof(s->src))
                return -ENAMETOOLONG;
        size_t a = strlen(j->root), b = strlen(dst);
        if (a + b >= sizeof(s->dst))
                return -ENAMETOOLONG;
        memcpy(s->dst, j->root, a);
        memcpy(s->dst + a, dst, b + 1);
        return 0;
}

int qemu_jail_prepare(const struct qemu *q, const char *vm_dir, struct qemu_jail *j, struct sbx_error *err)
{
        static const char *const top[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
        static const char *const devs[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"};
        struct stat st;
        int r = 0;

        memset(j, 0, sizeof(*j));
        if (snprintf(j->root, sizeof(j->root), "%s/" QEMU_JAIL_DIR, vm_dir) >= (int)sizeof(j->root))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "the jail's path is too long");
        /* root's and empty: only the mount goes on it */
        if (mkdir(j->root, 0700) < 0 && errno != EEXIST)
                return sbx_error_set(err, -errno, 0, "cannot make %s: %m", j->root);
        if (lstat(j->root, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0)
                return sbx_error_set(err, -EEXIST, 0, "%s is not root's directory", j->root);
        if (strncmp(q->binary, "/usr/", 5) != 0)
                return sbx_error_set(err, -EINVAL, 0, "QEMU's jail has /usr only: %s is outside it", q->binary);
        r = step_add(j, QEMU_JAIL_MKDIR, NULL, "/usr");
        if (r == 0)
                r = step_add(j, QEMU_JAIL_BIND_RO, "/usr", "/usr");
        for (size_t i = 0; r == 0 && i < ELEMENTSOF(top); i++) {
                char link[64];
                ssize_t n;
                if (lstat(top[i], &st) < 0)
                        continue;
                if (S_ISLNK(st.st_mode)) {
                        n = readlink(top[i], link, sizeof(link) - 1);
                        if (n <= 0)
                                continue;
                        link[n] = '\0';
                        /* only a link into usr/ (merged /usr) is made again; anything else is bound */
                        if (strncmp(link, "usr/", 4) == 0 || strncmp(link, "/usr/", 5) == 0) {
                                r = step_add(j, QEMU_JAIL_SYMLINK, link, top[i]);
                                continue;
                        }
                }
                if (stat(top[i], &st) < 0 || !S_ISDIR(st.st_mode))
                        continue;
                r = step_add(j, QEMU_JAIL_MKDIR, NULL, top[i]);
                if (r == 0)
                        r = step_add(j, QEMU_JAIL_BIND_RO, top[i], top[i]);
        }
        if (r == 0)
                r = step_add(j, QEMU_JAIL_MKDIR, NULL, "/etc");
        if (r == 0 && stat("/etc/ld.so.cache", &st) == 0 && S_ISREG(st.st_mode)) {
                r = step_add(j, QEMU_JAIL_FILE, NULL, "/etc/ld.so.cache");
                if (r == 0)
                        r = step_add(j, QEMU_JAIL_BIND_RO, "/etc/ld.so.cache", "/etc/ld.so.cache");
        }
        if (r == 0)
                r = step_add(j, QEMU_JAIL_MKDIR, NULL, "/proc");
        if (r == 0)
                r = step_add(j, QEMU_JAIL_PROC, "/proc", "/proc");
        if (r == 0)
                r = step_add(j, QEMU_JAIL_MKDIR, NULL, "/dev");
        for (size_t i = 0; r == 0 && i <= ELEMENTSOF(devs); i++) {
                const char *dev = i < ELEMENTSOF(devs) ? devs[i] : q->kvm ? "/dev/kvm" : NULL;
                if (!dev || stat(dev, &st) < 0 || !S_ISCHR(st.st_mode))
                        continue;
                r = step_add(j, QEMU_JAIL_FILE, NULL, dev);
                if (r == 0)
                        r = step_add(j, QEMU_JAIL_BIND, dev, dev);
        }
        if (r == 0)
                r = step_add(j, QEMU_JAIL_FILE, NULL, QEMU_JAIL_KERNEL);
        if (r == 0)
                r = step_add(j, QEMU_JAIL_BIND_RO, q->kernel, QEMU_JAIL_KERNEL);
        if (r == 0)
                r = step_add(j, QEMU_JAIL_MKDIR, NULL, QEMU_JAIL_VM);
        if (r == 0)
                r = step_add(j, QEMU_JAIL_BIND, vm_dir, QEMU_JAIL_VM);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot plan QEMU's jail: %s", strerror(-r));
        return 0;
}

/* In the forked child, root, before the uid drops: system calls only. 0 or -errno. */
int qemu_jail_enter(const struct qemu_jail *j)
{
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return -errno;
        if (mount("sandboxd-qemu", j->root, "tmpfs", MS_NOSUID, "mode=0755,size=1m,nr_inodes=256") < 0)
                return -errno;
        for (size_t i = 0; i < j->n; i++) {
                const struct qemu_jail_step *s = &j->steps[i];
                int fd;

                switch (s->kind) {
                case QEMU_JAIL_MKDIR:
                        if (mkdir(s->dst, 0755) < 0)
                                return -errno;
                        break;
                case QEMU_JAIL_FILE:
                        fd = open(s->dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
                        if (fd < 0)
                                return -errno;
                        close(fd);
                        break;
                case QEMU_JAIL_SYMLINK:
                        if (symlink(s->src, s->dst) < 0)
                                return -errno;
                        break;
                case QEMU_JAIL_PROC:
                        if (mount(s->src, s->dst, NULL, MS_BIND | MS_REC, NULL) < 0)
                                return -errno;
                        break;
                case QEMU_JAIL_BIND:
                case QEMU_JAIL_BIND_RO:
                        if (mount(s->src, s->dst, NULL, MS_BIND, NULL) < 0)
                                return -errno;
                        if (s->kind == QEMU_JAIL_BIND_RO &&
                            mount(NULL, s->dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) <
                                    0)
                                return -errno;
                        break;
                default:
                        return -EINVAL;
                }
        }
        /* the tmpfs becomes / and the host's tree goes */
        if (chdir(j->root) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 ||
            chdir("/") < 0)
                return -errno;
        if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, NULL) < 0)
                return -errno;
        return 0;
}
