/* qemu_rootfs.c — the session's image as the guest's root file system
 * (issue 38): an ext4 image made from the Docker image, read-only on a
 * second virtio-blk device, that the guest's runner mounts and chroots
 * into (runner/sandboxd-runner.c guest_root), so the image's python3, the
 * cell harness's matplotlib and the rest are there.
 *
 * Made once per image id, at its first use, into
 * {data_dir}/vm/rootfs/<hex of the id>.img (root's, 0644, never changed
 * again: every VM of that image maps it read-only, a memory snapshot's
 * forks included). Concurrent first uses wait on a lock file
 * (<hex>.lock, flock) and find it made. The steps run the Docker CLI, tar
 * and mkfs.ext4 with argv vectors (no shell; the image reference is
 * checked and passed after "--"):
 *   docker image inspect: the id and the image's Env;
 *   docker create (never started), docker export piped into tar -x in a
 *   fresh root-owned directory (GNU tar keeps links that leave the tree
 *   from being followed), docker rm -f;
 *   the mount points the guest needs (/workspace /tmp /proc /sys /dev,
 *   made only where the image has nothing of that name, never through a
 *   link) and /.sandboxd/env (the image's Env, NUL-separated);
 *   mkfs.ext4 -d into <hex>.img.new, sized from the tree, renamed in place.
 * The whole is bounded (QEMU_ROOTFS_TIMEOUT_MS); a failure says which step
 * and the caller boots the busybox guest instead, saying why. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qemu_internal.h"
#include "sandboxd/container.h"
#include "sandboxd/log.h"

#define ROOTFS_DIR "rootfs"
#define ROOTFS_OUT_MAX (64 * 1024) /* what the docker CLI prints that is read */
static const char *const docker_bin[] = {"/usr/bin/docker", "/usr/local/bin/docker", NULL};
static const char *const tar_bin[] = {"/usr/bin/tar", "/bin/tar", NULL};
static const char *const mkfs_bin[] = {"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4", NULL};
static const char *const rm_bin[] = {"/usr/bin/rm", "/bin/rm", NULL};

static const char *which(const char *const *c)
{
        for (; *c; c++)
                if (access(*c, X_OK) == 0)
                        return *c;
        return NULL;
}

/* A memfd's text, at most size - 1 bytes (the tail when tail). */
static void memfd_text(int fd, char *buf, size_t size, bool tail)
{
        off_t end = lseek(fd, 0, SEEK_END), from = 0;
        ssize_t n;

        if (tail && end > (off_t)size - 1)
                from = end - (off_t)size + 1;
        n = pread(fd, buf, size - 1, from);
        buf[n > 0 ? n : 0] = '\0';
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
                buf[--n] = '\0';
}

/* Start argv (no shell): stdin in_fd, stdout out_fd, stderr err_fd (-1: /dev/null each). */
static pid_t start(const struct qemu *q, char *const argv[], int in_fd, int out_fd, int err_fd)
{
        char host[SBX_PATH_MAX + 16], cfgdir[SBX_PATH_MAX + 16];
        pid_t pid;

        snprintf(host, sizeof(host), "DOCKER_HOST=unix://%s", q->docker_socket);
        /* the CLI reads no config of the daemon's user: a directory of its own, empty */
        snprintf(cfgdir, sizeof(cfgdir), "DOCKER_CONFIG=%s/" ROOTFS_DIR "/.docker", q->dir);
        char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", host, cfgdir, NULL};
        pid = fork();
        if (pid == 0) {
                int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
                if (nul < 0 || dup2(in_fd >= 0 ? in_fd : nul, 0) < 0 || dup2(out_fd >= 0 ? out_fd : nul, 1) < 0 ||
                    dup2(err_fd >= 0 ? err_fd : nul, 2) < 0)
                        _exit(126);
                execve(argv[0], argv, envp);
                _exit(127);
        }
        return pid < 0 ? -errno : pid;
}

/* Run argv until deadline; its stdout into out (NULL: dropped), the tail of its stderr into why. */
static int run(const struct qemu *q, char *const argv[], char *out, size_t out_size, char *why, size_t why_size,
               int64_t deadline)
{
        _cleanup_close_ int ofd = memfd_create("rootfs-out", MFD_CLOEXEC);
        _cleanup_close_ int efd = memfd_create("rootfs-err", MFD_CLOEXEC);
        pid_t pid;
        int r;

        if (ofd < 0 || efd < 0)
                return -errno;
        pid = start(q, argv, -1, out ? ofd : -1, efd);
        if (pid < 0)
                return (int)pid;
        r = sbx_wait_child(pid, deadline);
        if (out)
                memfd_text(ofd, out, out_size, false);
        memfd_text(efd, why, why_size, true);
        return r;
}

/* A reference the CLI takes as an image and never as an option: name[:tag][@digest] or an id. */
static bool image_ref_valid(const char *s)
{
        size_t n = strlen(s);

        if (n == 0 || n > 255 || s[0] == '-')
                return false;
        for (; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
                      strchr("._-/:@", *s)))
                        return false;
        return true;
}

static pthread_mutex_t tree_lock = PTHREAD_MUTEX_INITIALIZER; /* nftw has no user data */
static int64_t tree_bytes, tree_inodes;

static int tree_count(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)path;
        (void)flag;
        (void)ftw;
        tree_bytes += (int64_t)st->st_blocks * 512;
        tree_inodes++;
        return 0;
}

/* A directory name in root (the tree's fd) the guest mounts on: made when absent; a link or a
 * file there is refused (mounting through it would leave the tree). */
static int mount_point(int root, const char *name, mode_t mode)
{
        struct stat st;

        if (mkdirat(root, name, mode) == 0)
                (void)fchmodat(root, name, mode, 0); /* past the daemon's umask */
        else if (errno != EEXIST)
                return -errno;
        if (fstatat(root, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static int write_env(int root, const cJSON *env)
{
        const cJSON *e;
        int fd, r = 0;

        fd = openat(root, ".sandboxd/env", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        cJSON_ArrayForEach(e, env) {
                if (!cJSON_IsString(e) || !sbx_env_key_valid(e->valuestring) || strlen(e->valuestring) > 4096)
                        continue; /* not K=V: the image's config is not the guest's business */
                size_t n = strlen(e->valuestring) + 1;
                if (write(fd, e->valuestring, n) != (ssize_t)n) {
                        r = -EIO;
                        break;
                }
        }
        if (close(fd) < 0 && r == 0)
                r = -errno;
        return r;
}

/* rm -rf of a work tree (root's, made here; rm never follows links out of it), not waited
 * for: a tree of the python image's 30000 files took 70 s on a busy disk. Forked twice, so
 * init reaps it. */
static void tree_drop(const char *rm, const char *tree)
{
        char *const argv[] = {(char *)rm, "-rf", "--one-file-system", "--", (char *)tree, NULL};
        pid_t c = fork();

        if (c == 0) {
                if (setsid() < 0 || fork() != 0)
                        _exit(0);
                int nul = open("/dev/null", O_RDWR);
                if (nul >= 0) {
                        dup2(nul, 0);
                        dup2(nul, 1);
                        dup2(nul, 2);
                }
                execve(argv[0], argv, (char *const[]){"PATH=/usr/bin:/bin", NULL});
                _exit(127);
        }
        while (c > 0 && waitpid(c, NULL, 0) < 0 && errno == EINTR)
                ;
}

/* The work trees of hex that a daemon killed while making it left (the lock is held). */
static void trees_sweep(const char *rm, const char *dir, const char *hex)
{
        char prefix[96], path[SBX_PATH_MAX + 300];
        DIR *d = opendir(dir);
        struct dirent *de;

        snprintf(prefix, sizeof(prefix), ".work-%s-", hex);
        while (d && (de = readdir(d)))
                if (strncmp(de->d_name, prefix, strlen(prefix)) == 0 &&
                    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) < (int)sizeof(path))
                        tree_drop(rm, path);
        if (d)
                closedir(d);
}

/* The steps between the lock and the rename; path: the image to make. */
static int make(struct qemu *q, const char *image, const char *hex, const cJSON *env, const char *instance,
                const char *path, int64_t deadline, struct sbx_error *err)
{
        const char *docker = which(docker_bin), *tar = which(tar_bin), *mkfs = which(mkfs_bin), *rm = which(rm_bin);
        char work[SBX_PATH_MAX], root[SBX_PATH_MAX + 8], tmp[SBX_PATH_MAX + 8], cid[128] = "", why[512] = "";
        char label_i[320], size[32], inodes[32];
        int r, p[2];

        if (!docker || !tar || !mkfs || !rm)
                return sbx_error_set(err, -ENOENT, 0, "needs the docker CLI, tar and mkfs.ext4");
        snprintf(work, sizeof(work), "%s/" ROOTFS_DIR, q->dir);
        trees_sweep(rm, work, hex);
        snprintf(work, sizeof(work), "%s/" ROOTFS_DIR "/.work-%s-XXXXXX", q->dir, hex);
        if (!mkdtemp(work))
                return sbx_error_set(err, -errno, 0, "cannot make a work directory: %m");
        snprintf(root, sizeof(root), "%s/root", work);
        snprintf(tmp, sizeof(tmp), "%s.new", path);
        if (mkdir(root, 0755) < 0 || chmod(root, 0755) < 0) {
                r = sbx_error_set(err, -errno, 0, "cannot make %s: %m", root);
                goto out;
        }
        snprintf(label_i, sizeof(label_i), CONTAINER_LABEL_INSTANCE "=%s", instance ? instance : "");
        {
                char *const argv[] = {(char *)docker,
                                      "create",
                                      "--network",
                                      "none",
                                      "--label",
                                      "sandboxd.rootfs=1",
                                      "--label",
                                      label_i,
                                      "--",
                                      (char *)image,
                                      "/.sandboxd-never-started",
                                      NULL};
                r = run(q, argv, cid, sizeof(cid), why, sizeof(why), deadline);
        }
        cid[strcspn(cid, "\r\n")] = '\0';
        if (r != 0 || strlen(cid) < 12 || strspn(cid, "0123456789abcdef") != strlen(cid)) {
                r = sbx_error_set(err, r < 0 ? r : -EIO, 0, "docker create: %s", r == -ETIMEDOUT ? "timed out" : why);
                goto out;
        }
        if (pipe2(p, O_CLOEXEC) < 0) {
                r = sbx_error_set(err, -errno, 0, "pipe: %m");
                goto rm;
        }
        {
                /* docker export into tar -x: --numeric-owner, the image's owners as numbers (and,
                 * as root, its modes); GNU tar makes links that leave the tree last, as
                 * placeholders until then, so nothing is written through them */
                char *const targv[] = {(char *)tar, "-x", "--numeric-owner", "-C", root, "-f", "-", NULL};
                char *const eargv[] = {(char *)docker, "export", "--", cid, NULL};
                char twhy[256] = "";
                _cleanup_close_ int tefd = memfd_create("rootfs-tar", MFD_CLOEXEC);
                _cleanup_close_ int eefd = memfd_create("rootfs-export", MFD_CLOEXEC);
                pid_t tp = tefd < 0 || eefd < 0 ? -EMFILE : start(q, targv, p[0], -1, tefd);
                pid_t ep = tp < 0 ? tp : start(q, eargv, -1, p[1], eefd);
                close(p[0]);
                close(p[1]);
                int re = ep < 0 ? (int)ep : sbx_wait_child(ep, deadline);
                int rt = tp < 0 ? (int)tp : sbx_wait_child(tp, deadline);
                if (eefd >= 0)
                        memfd_text(eefd, why, sizeof(why), true);
                if (tefd >= 0)
                        memfd_text(tefd, twhy, sizeof(twhy), true);
                if (re != 0 || rt != 0) {
                        r = sbx_error_set(err,
                                          re < 0   ? re
                                          : rt < 0 ? rt
                                                   : -EIO,
                                          0, "docker export | tar -x: %s%s%s",
                                          re == -ETIMEDOUT || rt == -ETIMEDOUT ? "timed out " : "", why, twhy);
                        goto rm;
                }
        }
        {
                _cleanup_close_ int rfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                static const char *const points[] = {"workspace", "tmp", "proc", "sys", "dev", ".sandboxd"};
                if (rfd < 0) {
                        r = sbx_error_set(err, -errno, 0, "cannot open %s: %m", root);
                        goto rm;
                }
                for (size_t i = 0; i < ELEMENTSOF(points); i++) {
                        r = mount_point(rfd, points[i], i == 1 ? 01777 : 0755);
                        if (r < 0) {
                                sbx_error_set(err, r, 0, "the image's /%s: %s", points[i], strerror(-r));
                                goto rm;
                        }
                }
                r = write_env(rfd, env);
                if (r < 0) {
                        sbx_error_set(err, r, 0, "cannot write the image's env: %s", strerror(-r));
                        goto rm;
                }
        }
        pthread_mutex_lock(&tree_lock);
        tree_bytes = tree_inodes = 0;
        r = nftw(root, tree_count, 32, FTW_PHYS | FTW_MOUNT) < 0 ? -errno : 0;
        int64_t used = tree_bytes, n_inodes = tree_inodes;
        pthread_mutex_unlock(&tree_lock);
        if (r < 0) {
                sbx_error_set(err, r, 0, "cannot walk %s: %s", root, strerror(-r));
                goto rm;
        }
        /* ext4's own (inode tables, directories' blocks, no journal) on top of the files' blocks */
        int64_t bytes = used + used / 5 + n_inodes * 512 + (INT64_C(64) << 20);
        snprintf(size, sizeof(size), "%" PRId64 "k", (bytes + 4095) / 4096 * 4);
        snprintf(inodes, sizeof(inodes), "%" PRId64, n_inodes + n_inodes / 5 + 1024);
        (void)unlink(tmp);
        {
                char *const argv[] = {(char *)mkfs, "-q",           "-F",      "-t", "ext4",
                                      "-O",         "^has_journal", "-m",      "0",  "-N",
                                      inodes,       "-L",           "sbxroot", "-E", "root_owner=0:0,nodiscard",
                                      "-d",         root,           tmp,       size, NULL};
                r = run(q, argv, NULL, 0, why, sizeof(why), deadline);
        }
        if (r != 0) {
                r = sbx_error_set(err, r < 0 ? r : -EIO, 0, "mkfs.ext4 -d: %s", r == -ETIMEDOUT ? "timed out" : why);
                (void)unlink(tmp);
                goto rm;
        }
        {
                _cleanup_close_ int fd = open(tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 || fchmod(fd, 0644) < 0 || fsync(fd) < 0 || rename(tmp, path) < 0) {
                        r = sbx_error_set(err, -errno, 0, "cannot put %s in place: %m", path);
                        (void)unlink(tmp);
                        goto rm;
                }
        }
        log_info("microvm: the root file system of %s made: %s, %" PRId64 " MiB of files, %" PRId64 " inodes", image,
                 path, used >> 20, n_inodes);
        r = 0;
rm:
        if (cid[0]) {
                char *const argv[] = {(char *)docker, "rm", "-f", "--", cid, NULL};
                char w2[256];
                /* its own deadline: a timed-out export must not leave the container behind */
                if (run(q, argv, NULL, 0, w2, sizeof(w2), sbx_now_ms() + 60000) != 0)
                        log_warn("microvm: cannot remove the export container %s: %s", cid, w2);
        }
out:
        tree_drop(rm, work);
        return r;
}

/* A made root file system in use again: its mtime says so to --gc (qemu_gc.c), which removes only
 * one unused for ENGINE_MICROVM_ROOTFS_GC_AGE_S and re-reads the mtime under the image's lock; the touch is
 * made under that lock (shared), so gc either sees it or removed the file before (then: -ENOENT,
 * and the caller makes it again). */
static int rootfs_touch(const char *dir, const char *hex, const char *path)
{
        char lock[SBX_PATH_MAX + 80];
        int64_t deadline = sbx_now_ms() + QEMU_CG_LOCK_MS;
        struct stat st;
        int r;

        snprintf(lock, sizeof(lock), "%s/%s.lock", dir, hex);
        _cleanup_close_ int lfd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (lfd < 0)
                return -errno;
        /* a maker holds it for minutes: then the file is not there yet and the caller waits as a maker */
        while (flock(lfd, LOCK_SH | LOCK_NB) < 0) {
                if ((errno != EWOULDBLOCK && errno != EINTR) || sbx_now_ms() >= deadline)
                        return -EWOULDBLOCK;
                sbx_sleep_ms(20);
        }
        r = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? 0 : -ENOENT;
        if (r == 0)
                (void)utimensat(AT_FDCWD, path, NULL, 0);
        return r; /* the lock goes with lfd */
}

int qemu_rootfs_get(struct qemu *q, const char *image, const char *instance, char ret_path[SBX_PATH_MAX],
                    struct sbx_error *err)
{
        const char *docker = which(docker_bin);
        int64_t deadline = sbx_now_ms() + QEMU_ROOTFS_TIMEOUT_MS;
        char dir[SBX_PATH_MAX], lock[SBX_PATH_MAX + 80], out[ROOTFS_OUT_MAX], why[512] = "", hex[72];
        _cleanup_close_ int lfd = -1;
        struct stat st;
        cJSON *j = NULL, *env;
        int r;

        if (!image || !image_ref_valid(image))
                return sbx_error_set(err, -EINVAL, 0, "not an image reference the microVM takes");
        /* an id already made: no Docker needed (the image may be gone from it since) */
        snprintf(dir, sizeof(dir), "%s/" ROOTFS_DIR, q->dir);
        if (strncmp(image, "sha256:", 7) == 0 && strlen(image) == 7 + 64 &&
            strspn(image + 7, "0123456789abcdef") == 64 &&
            snprintf(ret_path, SBX_PATH_MAX, "%s/%s.img", dir, image + 7) < SBX_PATH_MAX &&
            rootfs_touch(dir, image + 7, ret_path) == 0)
                return 0;
        if (!docker || !q->docker_socket[0])
                return sbx_error_set(err, -ENOENT, 0, "no docker CLI or Docker socket to export the image with");
        {
                char *const argv[] = {
                        (char *)docker, "image",       "inspect", "--format", "{{json .Id}} {{json .Config.Env}}",
                        "--",           (char *)image, NULL};
                r = run(q, argv, out, sizeof(out), why, sizeof(why), deadline);
        }
        if (r != 0)
                return sbx_error_set(err, r < 0 ? r : -ENOENT, 0, "docker image inspect %s: %s", image,
                                     r == -ETIMEDOUT ? "timed out" : why);
        {
                /* "sha256:<64 hex>" [env...] */
                const char *id = strstr(out, "\"sha256:");
                if (!id || strlen(id) < 8 + 64 + 1 || strspn(id + 8, "0123456789abcdef") != 64 || id[8 + 64] != '"')
                        return sbx_error_set(err, -EIO, 0, "docker image inspect %s: no image id", image);
                memcpy(hex, id + 8, 64);
                hex[64] = '\0';
                j = cJSON_Parse(id + 8 + 64 + 1);
        }
        env = j && cJSON_IsArray(j) ? j : NULL;
        snprintf(dir, sizeof(dir), "%s/" ROOTFS_DIR, q->dir);
        if ((mkdir(q->dir, 0711) < 0 && errno != EEXIST) || (mkdir(dir, 0711) < 0 && errno != EEXIST)) {
                r = sbx_error_set(err, -errno, 0, "cannot make %s: %m", dir);
                goto done;
        }
        if (snprintf(ret_path, SBX_PATH_MAX, "%s/%s.img", dir, hex) >= SBX_PATH_MAX) {
                r = sbx_error_set(err, -ENAMETOOLONG, 0, "path too long");
                goto done;
        }
        r = 0;
        if (rootfs_touch(dir, hex, ret_path) == 0)
                goto done;
        /* one maker per image: another thread's or daemon's first use holds it until the image is there */
        snprintf(lock, sizeof(lock), "%s/%s.lock", dir, hex);
        lfd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (lfd < 0) {
                r = sbx_error_set(err, -errno, 0, "cannot open %s: %m", lock);
                goto done;
        }
        while (flock(lfd, LOCK_EX | LOCK_NB) < 0) {
                if (errno != EWOULDBLOCK && errno != EINTR) {
                        r = sbx_error_set(err, -errno, 0, "cannot lock %s: %m", lock);
                        goto done;
                }
                if (sbx_now_ms() >= deadline) {
                        r = sbx_error_set(err, -ETIMEDOUT, 0, "the root file system of %s is still being made", image);
                        goto done;
                }
                sbx_sleep_ms(100); /* flock has no timed wait: the holder is making it */
        }
        if (stat(ret_path, &st) == 0 && S_ISREG(st.st_mode)) {
                (void)utimensat(AT_FDCWD, ret_path, NULL, 0);
                goto done; /* made by the holder we waited for */
        }
        {
                int64_t t0 = sbx_now_ms();
                r = make(q, image, hex, env, instance, ret_path, deadline, err);
                if (r == 0)
                        log_info("microvm: %s's root file system took %" PRId64 " ms", image, sbx_now_ms() - t0);
                else if (r == -ETIMEDOUT || sbx_now_ms() >= deadline)
                        r = sbx_error_set(err, -ETIMEDOUT, 0, "making the root file system of %s took over %d s (%s)",
                                          image, QEMU_ROOTFS_TIMEOUT_MS / 1000, err ? err->msg : "");
        }
        /* the lock file stays: a waiter holding it open must lock the one the next maker locks */
done:
        cJSON_Delete(j);
        if (r < 0)
                ret_path[0] = '\0';
        return r;
}
