/* wsquota.c — the disk quota of session workspaces: loop-mounted ext4
 * images (loop), a bounded usage scan (measure, and the figures of off),
 * and the sweep that releases mounts nobody needs (restart, --gc).
 *
 * Stateless and lock-free: the kernel's mount table is the only state, and
 * callers serialise attach/detach per session. Every path is walked from
 * data_dir with O_NOFOLLOW, one level at a time; the image directory is
 * root's and never reaches a container. Loop devices are set up with
 * LO_FLAGS_AUTOCLEAR before the mount, so the device goes with the mount's
 * last reference and a failed mount leaves none behind. */
#include "sandboxd/wsquota.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandboxd/log.h"
#include "sandboxd/sessuid.h"

#define IMAGES_DIR "workspace-images"
#define MKFS_TIMEOUT_MS 60000
#define LOOP_TRIES 16
#define FULL_SLACK (256 * 1024) /* ext4 says ENOSPC with a few blocks left for its own metadata */
#define SCAN_MAX_DEPTH 256

static const char *const mkfs_paths[] = {"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4", NULL};

static bool usage_mounted(int ufd, const char *session, struct wsquota_usage *u);
static void usage_save(int iufd, const char *session, const struct wsquota_usage *u);

static bool mode_is(const struct sbx_config *cfg, const char *mode)
{
        return strcmp(cfg->workspace_quota_mode, mode) == 0;
}

static const char *mkfs_path(void)
{
        for (size_t i = 0; mkfs_paths[i]; i++)
                if (access(mkfs_paths[i], X_OK) == 0)
                        return mkfs_paths[i];
        return NULL;
}

/* Open dir `name` under dirfd, never through a symlink; with make, create it
 * root-owned with mode first. */
static int open_dir_at(int dirfd, const char *name, bool make, mode_t mode)
{
        if (make && mkdirat(dirfd, name, mode) < 0 && errno != EEXIST)
                return -errno;
        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* {data_dir}/<top>/<user>: an fd, or -errno. */
static int open_user_dir(const struct sbx_config *cfg, const char *top, const char *user, bool make)
{
        _cleanup_close_ int root = -1, t = -1;

        root = open(cfg->data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
                return -errno;
        t = open_dir_at(root, top, make, 0700);
        if (t < 0)
                return t;
        return open_dir_at(t, user, make, 0700);
}

/* Is ufd/session a mount point (on another device than its parent)? */
static bool is_mounted_at(int ufd, const char *session)
{
        struct stat parent, st;

        return fstat(ufd, &parent) == 0 && fstatat(ufd, session, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
               S_ISDIR(st.st_mode) && st.st_dev != parent.st_dev;
}

static bool dir_is_empty(int fd)
{
        int dup_fd = dup(fd);
        DIR *d;
        struct dirent *de;
        bool empty = true;

        if (dup_fd < 0)
                return false;
        d = fdopendir(dup_fd);
        if (!d) {
                close(dup_fd);
                return false;
        }
        while (empty && (de = readdir(d)))
                empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
        closedir(d);
        return empty;
}

/* Run argv (no shell) with stdio on /dev/null; its exit status, or -errno.
 * Killed past timeout_ms. */
static int run_tool(char *const argv[], int timeout_ms)
{
        int64_t until = sbx_now_ms() + timeout_ms;
        pid_t pid = fork();

        if (pid < 0)
                return -errno;
        if (pid == 0) {
                int null = open("/dev/null", O_RDWR);
                if (null >= 0) {
                        dup2(null, 0);
                        dup2(null, 1);
                        dup2(null, 2);
                }
                execv(argv[0], argv);
                _exit(127);
        }
        return sbx_wait_child(pid, until);
}

/* Make {images}/<user>/<session>.ext4: a sparse file of workspace.quota
 * bytes, formatted under a temporary name and renamed into place, so a
 * crash never leaves a half-made image under the real name. */
static int make_image(const struct sbx_config *cfg, int ifd, const char *user, const char *session, uid_t uid,
                      gid_t gid, int64_t bytes, struct sbx_error *err)
{
        char tmp[96], final[96], path[SBX_PATH_MAX + 128], inodes[32], owner[128];
        const char *mkfs = mkfs_path();
        _cleanup_close_ int fd = -1;
        int r;

        if (!mkfs)
                return sbx_error_set(err, -ENOENT, 0, "mkfs.ext4 not found (install e2fsprogs)");
        snprintf(tmp, sizeof(tmp), ".%s.ext4.new", session);
        snprintf(final, sizeof(final), "%s.ext4", session);
        (void)unlinkat(ifd, tmp, 0);
        fd = openat(ifd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return sbx_error_set(err, -errno, 0, "cannot create the workspace image: %m");
        if (ftruncate(fd, bytes > 0 ? bytes : cfg->workspace_quota_bytes) < 0) {
                r = -errno;
                (void)unlinkat(ifd, tmp, 0);
                return sbx_error_set(err, r, 0, "cannot size the workspace image: %s", strerror(-r));
        }
        snprintf(path, sizeof(path), "%s/" IMAGES_DIR "/%s/%s", cfg->data_dir, user, tmp);
        snprintf(inodes, sizeof(inodes), "%d", cfg->workspace_inodes);
        snprintf(owner, sizeof(owner), "root_owner=%u:%u,nodiscard", (unsigned)uid, (unsigned)gid);
        {
                /* -m 0: no blocks reserved for root; a 4 MiB journal keeps the
                 * overhead of small workspaces small. */
                char *argv[] = {(char *)mkfs,    "-q", "-F", "-m", "0", "-N", inodes, "-J", "size=4", "-E", owner, "-L",
                                "sbx-workspace", path, NULL};
                r = run_tool(argv, MKFS_TIMEOUT_MS);
        }
        if (r != 0) {
                (void)unlinkat(ifd, tmp, 0);
                return sbx_error_set(err, r < 0 ? r : -EIO, 0, "mkfs.ext4 of the workspace image failed (%s)",
                                     r < 0 ? strerror(-r) : "non-zero exit");
        }
        if (fsync(fd) < 0 || renameat(ifd, tmp, ifd, final) < 0) {
                r = -errno;
                (void)unlinkat(ifd, tmp, 0);
                return sbx_error_set(err, r, 0, "cannot put the workspace image in place: %s", strerror(-r));
        }
        return 0;
}

/* Attach img to a free loop device with autoclear; its fd (the caller mounts
 * it and closes it), or -errno. */
static int loop_attach(int img, const char *user, const char *session, char ret_dev[32])
{
        _cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        int r = -EBUSY;

        if (ctl < 0)
                return -errno;
        for (int i = 0; i < LOOP_TRIES; i++) {
                struct loop_config lc = {.fd = (uint32_t)img};
                int n = ioctl(ctl, LOOP_CTL_GET_FREE);
                int fd;

                if (n < 0)
                        return -errno;
                snprintf(ret_dev, 32, "/dev/loop%d", n);
                fd = open(ret_dev, O_RDWR | O_CLOEXEC);
                if (fd < 0)
                        return -errno;
                lc.info.lo_flags = LO_FLAGS_AUTOCLEAR;
                snprintf((char *)lc.info.lo_file_name, sizeof(lc.info.lo_file_name), "sandboxd:%s/%s", user, session);
                if (ioctl(fd, LOOP_CONFIGURE, &lc) == 0)
                        return fd;
                r = -errno;
                close(fd);
                if (r != -EBUSY)
                        return r; /* another process took that device: try the next free one */
        }
        return r;
}

int wsquota_attach(const struct sbx_config *cfg, const char *user, const char *session, struct sbx_error *err)
{
        return wsquota_attach_sized(cfg, user, session, 0, err);
}

int wsquota_attach_sized(const struct sbx_config *cfg, const char *user, const char *session, int64_t bytes,
                         struct sbx_error *err)
{
        _cleanup_close_ int ufd = -1, wfd = -1, iufd = -1, img = -1, loop = -1, root = -1;
        char dev[32], target[64], image[96];
        struct stat st;
        int r;

        if (!mode_is(cfg, "loop"))
                return 0;
        ufd = open_user_dir(cfg, "workspaces", user, false);
        if (ufd < 0)
                return sbx_error_set(err, ufd, 0, "cannot open the workspaces of %s: %s", user, strerror(-ufd));
        if (is_mounted_at(ufd, session))
                return 0;
        wfd = open_dir_at(ufd, session, false, 0);
        if (wfd < 0 || fstat(wfd, &st) < 0)
                return sbx_error_set(err, wfd < 0 ? wfd : -errno, 0, "cannot open the workspace %s:%s", user, session);
        iufd = open_user_dir(cfg, IMAGES_DIR, user, true);
        if (iufd < 0)
                return sbx_error_set(err, iufd, 0, "cannot open %s/" IMAGES_DIR "/%s: %s", cfg->data_dir, user,
                                     strerror(-iufd));
        snprintf(image, sizeof(image), "%s.ext4", session);
        img = openat(iufd, image, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (img < 0 && errno == ENOENT) {
                /* Files from before loop mode would be hidden under the mount. */
                if (!dir_is_empty(wfd))
                        return sbx_error_set(err, -ENOTEMPTY, 0,
                                             "workspace %s:%s holds files from before workspace.quota_mode loop; "
                                             "move them out (or purge the session) first",
                                             user, session);
                r = make_image(cfg, iufd, user, session, st.st_uid, st.st_gid, bytes, err);
                if (r < 0)
                        return r;
                img = openat(iufd, image, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        }
        if (img < 0)
                return sbx_error_set(err, -errno, 0, "cannot open the workspace image of %s:%s: %m", user, session);
        loop = loop_attach(img, user, session, dev);
        if (loop < 0)
                return sbx_error_set(err, loop, 0, "cannot set up a loop device for %s:%s: %s", user, session,
                                     strerror(-loop));
        /* Underneath the mount the directory is root's: if the mount is
         * ever missing, a container finds /workspace it cannot write. */
        if (fchown(wfd, 0, 0) < 0 || fchmod(wfd, 0700) < 0)
                return sbx_error_set(err, -errno, 0, "cannot close the workspace mount point: %m");
        snprintf(target, sizeof(target), "/proc/self/fd/%d", wfd);
        if (mount(dev, target, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, "errors=remount-ro") < 0) {
                r = -errno;
                (void)fchown(wfd, st.st_uid, st.st_gid);
                return sbx_error_set(err, r, 0, "cannot mount the workspace image of %s:%s: %s", user, session,
                                     strerror(-r));
        }
        /* The mounted root: the session's uid, the owner container_workspace_ensure
         * chose. An image from before per-session uids moves over whole. */
        root = open_dir_at(ufd, session, false, 0);
        if (root >= 0) {
                struct sessuid_own_stats own = {0};
                r = sessuid_own_tree(root, st.st_uid, &own);
                if (own.changed > 0 || own.cut)
                        log_ctx(own.cut ? LOG_LEVEL_WARN : LOG_LEVEL_INFO, user, session, NULL,
                                "workspace image given to uid %u: %" PRIu64 " entries changed owner%s",
                                (unsigned)st.st_uid, own.changed, own.cut ? " (stopped at the walk's bound)" : "");
        }
        if (root < 0 || r < 0 || fchmod(root, 0700) < 0) {
                r = root < 0 ? root : r < 0 ? r : -errno;
                (void)wsquota_detach(cfg, user, session, NULL);
                return sbx_error_set(err, r, 0, "cannot prepare the mounted workspace: %s", strerror(-r));
        }
        (void)unlinkat(root, "lost+found", AT_REMOVEDIR); /* empty on a fresh image; a tenant need not see it */
        log_ctx(LOG_LEVEL_DEBUG, user, session, NULL, "workspace image mounted on %s", dev);
        return 0;
}

bool wsquota_mounted(const struct sbx_config *cfg, const char *user, const char *session)
{
        _cleanup_close_ int ufd = -1;

        if (!mode_is(cfg, "loop"))
                return false;
        ufd = open_user_dir(cfg, "workspaces", user, false);
        return ufd >= 0 && is_mounted_at(ufd, session);
}

/* Unmount {workspaces}/<user>/<session>, lazily if something holds it; no
 * figures saved (wsquota_detach's job). */
static int unmount_at(const struct sbx_config *cfg, int ufd, const char *user, const char *session,
                      struct sbx_error *err)
{
        char path[SBX_PATH_MAX + 160];

        snprintf(path, sizeof(path), "%s/workspaces/%s/%s", cfg->data_dir, user, session);
        for (int i = 0; i < 8 && is_mounted_at(ufd, session); i++) {
                if (umount2(path, UMOUNT_NOFOLLOW) == 0)
                        continue;
                if (errno == EBUSY && umount2(path, UMOUNT_NOFOLLOW | MNT_DETACH) == 0)
                        continue;
                return sbx_error_set(err, -errno, 0, "cannot unmount the workspace of %s:%s: %m", user, session);
        }
        return 0;
}

int wsquota_claim(const struct sbx_config *cfg, const char *from_user, const char *from_session, const char *to_user,
                  const char *to_session, struct sbx_error *err)
{
        _cleanup_close_ int fufd = -1, tufd = -1, fifd = -1, tifd = -1, src = -1, dst = -1;
        char from_img[96], to_img[96], src_path[64], dst_path[64];

        if (!mode_is(cfg, "loop"))
                return 0;
        fufd = open_user_dir(cfg, "workspaces", from_user, false);
        tufd = open_user_dir(cfg, "workspaces", to_user, false);
        fifd = open_user_dir(cfg, IMAGES_DIR, from_user, true);
        tifd = open_user_dir(cfg, IMAGES_DIR, to_user, true);
        if (fufd < 0 || tufd < 0 || fifd < 0 || tifd < 0)
                return sbx_error_set(err, -EIO, 0, "cannot open the workspace directories of %s:%s", to_user,
                                     to_session);
        /* 1. the image file: the slot's becomes the session's */
        snprintf(from_img, sizeof(from_img), "%s.ext4", from_session);
        snprintf(to_img, sizeof(to_img), "%s.ext4", to_session);
        if (faccessat(fifd, from_img, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
                if (renameat2(fifd, from_img, tifd, to_img, RENAME_NOREPLACE) < 0)
                        return sbx_error_set(err, errno == EEXIST ? -ENOTEMPTY : -errno, 0,
                                             "cannot give the image of %s to %s:%s: %m", from_session, to_user,
                                             to_session);
        } else if (faccessat(tifd, to_img, F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
                return sbx_error_set(err, -ENOENT, 0, "neither %s nor %s:%s has the slot's image", from_session,
                                     to_user, to_session);
        }
        /* 2. the session's mount point: a bind of the mounted file system */
        if (!is_mounted_at(tufd, to_session)) {
                struct stat st;

                if (!is_mounted_at(fufd, from_session))
                        return sbx_error_set(err, -ENOENT, 0, "the file system of %s is mounted nowhere", from_session);
                dst = open_dir_at(tufd, to_session, false, 0);
                src = open_dir_at(fufd, from_session, false, 0);
                if (dst < 0 || src < 0 || fstat(dst, &st) < 0)
                        return sbx_error_set(err, -EIO, 0, "cannot open the workspace of %s:%s", to_user, to_session);
                if (!dir_is_empty(dst))
                        return sbx_error_set(err, -ENOTEMPTY, 0, "the workspace of %s:%s holds files", to_user,
                                             to_session);
                if (fchown(dst, 0, 0) < 0 || fchmod(dst, 0700) < 0)
                        return sbx_error_set(err, -errno, 0, "cannot close the workspace mount point: %m");
                snprintf(src_path, sizeof(src_path), "/proc/self/fd/%d", src);
                snprintf(dst_path, sizeof(dst_path), "/proc/self/fd/%d", dst);
                if (mount(src_path, dst_path, NULL, MS_BIND, NULL) < 0) {
                        int r = -errno;
                        (void)fchown(dst, st.st_uid, st.st_gid);
                        return sbx_error_set(err, r, 0, "cannot mount the workspace of %s:%s: %s", to_user, to_session,
                                             strerror(-r));
                }
        }
        /* 3. the slot's mount point goes (the container holds its own mount) */
        return unmount_at(cfg, fufd, from_user, from_session, err);
}

int wsquota_detach(const struct sbx_config *cfg, const char *user, const char *session, struct sbx_error *err)
{
        _cleanup_close_ int ufd = -1;

        if (!mode_is(cfg, "loop"))
                return 0;
        ufd = open_user_dir(cfg, "workspaces", user, false);
        if (ufd < 0)
                return ufd == -ENOENT ? 0 : sbx_error_set(err, ufd, 0, "cannot open the workspaces of %s", user);
        if (is_mounted_at(ufd, session)) {
                struct wsquota_usage u = {0};
                _cleanup_close_ int iufd = open_user_dir(cfg, IMAGES_DIR, user, false);
                if (iufd >= 0 && usage_mounted(ufd, session, &u))
                        usage_save(iufd, session, &u);
        }
        /* a stacked mount (it should never be) goes too; a host process still holding it: lazily */
        return unmount_at(cfg, ufd, user, session, err);
}

int wsquota_purge(const struct sbx_config *cfg, const char *user, const char *session, struct sbx_error *err)
{
        _cleanup_close_ int iufd = -1;
        char image[96];
        int r;

        if (!mode_is(cfg, "loop"))
                return 0;
        r = wsquota_detach(cfg, user, session, err);
        if (r < 0)
                return r;
        iufd = open_user_dir(cfg, IMAGES_DIR, user, false);
        if (iufd < 0)
                return iufd == -ENOENT ? 0 : sbx_error_set(err, iufd, 0, "cannot open the images of %s", user);
        snprintf(image, sizeof(image), "%s.ext4", session);
        if (unlinkat(iufd, image, 0) < 0 && errno != ENOENT)
                return sbx_error_set(err, -errno, 0, "cannot delete the workspace image of %s:%s: %m", user, session);
        snprintf(image, sizeof(image), "%s.usage", session);
        (void)unlinkat(iufd, image, 0);
        return 0;
}

/* ---- usage ---- */

struct scan {
        uint64_t bytes, inodes;
        uint64_t max_bytes, max_inodes; /* stop once past either: over is all we need to know */
        bool cut;                       /* too deep, or stopped past a limit: figures are a lower bound */
};

/* du-like: allocated bytes and entries under dirfd, never following a
 * symlink and never leaving the file system. */
static void scan_at(int dirfd, dev_t dev, int depth, struct scan *sc)
{
        DIR *d;
        struct dirent *de;
        int fd;

        if (depth > SCAN_MAX_DEPTH) {
                sc->cut = true;
                return;
        }
        fd = dup(dirfd);
        if (fd < 0 || !(d = fdopendir(fd))) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        while ((de = readdir(d)) && !sc->cut) {
                struct stat st;
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                sc->inodes++;
                sc->bytes += (uint64_t)st.st_blocks * 512;
                if (sc->inodes > sc->max_inodes || sc->bytes > sc->max_bytes)
                        sc->cut = true;
                if (S_ISDIR(st.st_mode) && st.st_dev == dev) {
                        int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub >= 0) {
                                scan_at(sub, dev, depth + 1, sc);
                                close(sub);
                        }
                }
        }
        closedir(d);
}

/* Figures from a mounted file system's statvfs: the limit is what files
 * can fill (the image less ext4's journal and inode tables), used is what a
 * tenant can no longer write (ext4's small metadata reserve counts as used). */
static bool usage_mounted(int ufd, const char *session, struct wsquota_usage *u)
{
        _cleanup_close_ int fd = openat(ufd, session, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct statvfs sv;

        if (fd < 0 || fstatvfs(fd, &sv) < 0 || sv.f_bavail > sv.f_blocks || sv.f_ffree > sv.f_files)
                return false;
        u->bytes_limit = (uint64_t)sv.f_blocks * sv.f_frsize;
        u->bytes_used = (uint64_t)(sv.f_blocks - sv.f_bavail) * sv.f_frsize;
        u->inodes_limit = sv.f_files;
        u->inodes_used = sv.f_files - sv.f_ffree;
        return true;
}

/* The figures of an unmounted workspace: written at each unmount to
 * {images}/<user>/<session>.usage (root's), so they read the same as while
 * mounted. */
static void usage_save(int iufd, const char *session, const struct wsquota_usage *u)
{
        char tmp[96], final[96], line[128];
        int fd, n;

        snprintf(tmp, sizeof(tmp), ".%s.usage.new", session);
        snprintf(final, sizeof(final), "%s.usage", session);
        n = snprintf(line, sizeof(line), "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", u->bytes_used,
                     u->bytes_limit, u->inodes_used, u->inodes_limit);
        fd = openat(iufd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return;
        if (write(fd, line, (size_t)n) != n || close(fd) < 0 || renameat(iufd, tmp, iufd, final) < 0)
                (void)unlinkat(iufd, tmp, 0);
}

static bool usage_load(int iufd, const char *session, struct wsquota_usage *u)
{
        char name[96], line[128];
        _cleanup_close_ int fd = -1;
        ssize_t n;

        snprintf(name, sizeof(name), "%s.usage", session);
        fd = openat(iufd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || (n = read(fd, line, sizeof(line) - 1)) <= 0)
                return false;
        line[n] = '\0';
        return sscanf(line, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, &u->bytes_used, &u->bytes_limit,
                      &u->inodes_used, &u->inodes_limit) == 4;
}

static uint32_t le32(const unsigned char *p)
{
        return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Figures from an unmounted image's ext4 superblock when no saved figures
 * exist (its counters are exact after a clean unmount; the limit is the
 * whole image, metadata included). */
static bool usage_image(int img, uint64_t image_bytes, struct wsquota_usage *u)
{
        unsigned char sb[1024];
        uint64_t blocks, free_blocks, bsize;

        if (pread(img, sb, sizeof(sb), 1024) != (ssize_t)sizeof(sb) || sb[56] != 0x53 || sb[57] != 0xEF)
                return false;
        bsize = UINT64_C(1024) << le32(sb + 24);
        blocks = le32(sb + 4);
        free_blocks = le32(sb + 12);
        if (bsize > 65536 || free_blocks > blocks)
                return false;
        u->bytes_limit = image_bytes;
        u->bytes_used = image_bytes - free_blocks * bsize;
        u->inodes_limit = le32(sb + 0);
        u->inodes_used = u->inodes_limit - le32(sb + 16);
        return true;
}

void wsquota_usage(const struct sbx_config *cfg, const char *user, const char *session, struct wsquota_usage *ret)
{
        struct wsquota_usage u = {0};
        _cleanup_close_ int ufd = -1;

        sbx_strlcpy(u.mode, cfg->workspace_quota_mode, sizeof(u.mode));
        ufd = open_user_dir(cfg, "workspaces", user, false);
        if (mode_is(cfg, "loop")) {
                _cleanup_close_ int iufd = open_user_dir(cfg, IMAGES_DIR, user, false), img = -1;
                char image[96];
                struct stat st;

                snprintf(image, sizeof(image), "%s.ext4", session);
                if (iufd >= 0)
                        img = openat(iufd, image, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (img >= 0 && fstat(img, &st) == 0) {
                        u.mounted = ufd >= 0 && is_mounted_at(ufd, session);
                        u.known = u.mounted
                                          ? usage_mounted(ufd, session, &u)
                                          : usage_load(iufd, session, &u) || usage_image(img, (uint64_t)st.st_size, &u);
                } else {
                        /* no image yet: nothing written, the limit it will get */
                        u.known = true;
                        u.bytes_limit = (uint64_t)cfg->workspace_quota_bytes;
                        u.inodes_limit = (uint64_t)cfg->workspace_inodes;
                }
        } else if (mode_is(cfg, "measure")) {
                /* The scan is bounded by the quota itself: it stops once past it. */
                struct scan sc = {.max_bytes = (uint64_t)cfg->workspace_quota_bytes,
                                  .max_inodes = (uint64_t)cfg->workspace_inodes};
                _cleanup_close_ int wfd = ufd >= 0 ? open_dir_at(ufd, session, false, 0) : -1;
                struct stat st;

                if (wfd >= 0 && fstat(wfd, &st) == 0) {
                        scan_at(wfd, st.st_dev, 0, &sc);
                        u.known = true;
                } else if (wfd == -ENOENT || ufd == -ENOENT) {
                        u.known = true; /* no workspace yet */
                }
                u.bytes_used = sc.bytes;
                u.inodes_used = sc.inodes;
                u.bytes_limit = (uint64_t)cfg->workspace_quota_bytes;
                u.inodes_limit = (uint64_t)cfg->workspace_inodes;
                if (sc.cut)
                        u.over = true; /* too deep or past a limit */
        }
        /* off (and project, refused at start): no limit, and no scan a tenant
         * could make expensive; usage is not measured. */
        if (u.known && ((u.bytes_limit && u.bytes_used + (mode_is(cfg, "loop") ? FULL_SLACK : 0) >= u.bytes_limit) ||
                        (u.inodes_limit && u.inodes_used >= u.inodes_limit)))
                u.over = true;
        *ret = u;
}

int wsquota_admit(const struct sbx_config *cfg, const char *user, const char *session, struct sbx_error *err)
{
        struct wsquota_usage u;

        if (!mode_is(cfg, "measure"))
                return 0;
        wsquota_usage(cfg, user, session, &u);
        if (!u.over)
                return 0;
        return sbx_error_set(err, -EDQUOT, 0,
                             "workspace over its quota: %" PRIu64 " of %" PRIu64 " bytes, %" PRIu64 " of %" PRIu64
                             " files; new executions and writes are refused until it shrinks (or the session is "
                             "destroyed)",
                             u.bytes_used, u.bytes_limit, u.inodes_used, u.inodes_limit);
}

cJSON *wsquota_usage_to_json(const struct wsquota_usage *u)
{
        cJSON *o = cJSON_CreateObject();

        if (!o)
                return NULL;
        cJSON_AddStringToObject(o, "mode", u->mode);
        if (u->known) {
                cJSON_AddNumberToObject(o, "bytes_used", (double)u->bytes_used);
                cJSON_AddNumberToObject(o, "inodes_used", (double)u->inodes_used);
        } else {
                cJSON_AddNullToObject(o, "bytes_used");
                cJSON_AddNullToObject(o, "inodes_used");
        }
        if (u->bytes_limit)
                cJSON_AddNumberToObject(o, "bytes_limit", (double)u->bytes_limit);
        else
                cJSON_AddNullToObject(o, "bytes_limit");
        if (u->inodes_limit)
                cJSON_AddNumberToObject(o, "inodes_limit", (double)u->inodes_limit);
        else
                cJSON_AddNullToObject(o, "inodes_limit");
        cJSON_AddBoolToObject(o, "over", u->over);
        if (strcmp(u->mode, "loop") == 0)
                cJSON_AddBoolToObject(o, "mounted", u->mounted);
        return o;
}

/* ---- configuration and the sweep ---- */

int wsquota_check_config(const struct sbx_config *cfg, struct sbx_error *err)
{
        if (mode_is(cfg, "project"))
                return sbx_error_set(err, -EOPNOTSUPP, 0,
                                     "workspace.quota_mode project is not supported by this build (it needs ext4 or "
                                     "XFS project quotas on data_dir, which this daemon does not manage yet): use "
                                     "loop (an ext4 image per workspace) or measure");
        if (mode_is(cfg, "loop")) {
                if (!mkfs_path())
                        return sbx_error_set(err, -ENOENT, 0,
                                             "workspace.quota_mode loop needs mkfs.ext4 (Debian package e2fsprogs)");
                if (access("/dev/loop-control", R_OK | W_OK) < 0)
                        return sbx_error_set(err, -errno, 0,
                                             "workspace.quota_mode loop needs /dev/loop-control (root and the loop "
                                             "module): %m");
        }
        return 0;
}

static bool plain_name(const char *s)
{
        return *s && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* Undo mountinfo's octal escapes (\040 for a space, ...) in place. */
static void unescape(char *s)
{
        char *w = s;

        for (; *s; s++) {
                if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' &&
                    s[3] <= '7') {
                        *w++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
                        s += 3;
                } else {
                        *w++ = *s;
                }
        }
        *w = '\0';
}

int wsquota_sweep(const struct sbx_config *cfg, wsquota_keep_fn keep, void *ud)
{
        char real[PATH_MAX], prefix[PATH_MAX + 16], *line = NULL;
        size_t cap = 0, plen;
        FILE *f;
        int count = 0;

        if (!realpath(cfg->data_dir, real))
                return errno == ENOENT ? 0 : -errno;
        plen = (size_t)snprintf(prefix, sizeof(prefix), "%s/workspaces/", real);
        f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return -errno;
        /* Collect first: unmounting while reading mountinfo skews the read. */
        char(*found)[2][SBX_PATH_MAX] = NULL;
        size_t n = 0;
        while (getline(&line, &cap, f) > 0) {
                char *save = NULL, *mp = NULL, *tok = strtok_r(line, " ", &save), *slash;
                for (int i = 0; tok && i < 4; i++)
                        tok = strtok_r(NULL, " ", &save);
                mp = tok; /* the fifth field */
                if (!mp)
                        continue;
                unescape(mp);
                if (strncmp(mp, prefix, plen) != 0)
                        continue;
                slash = strchr(mp + plen, '/');
                if (!slash || strchr(slash + 1, '/') || !slash[1] || slash == mp + plen)
                        continue;
                *slash = '\0';
                void *grown = realloc(found, (n + 1) * sizeof(*found));
                if (!grown)
                        break;
                found = grown;
                sbx_strlcpy(found[n][0], mp + plen, SBX_PATH_MAX);
                sbx_strlcpy(found[n][1], slash + 1, SBX_PATH_MAX);
                n++;
        }
        free(line);
        fclose(f);
        for (size_t i = 0; i < n; i++) {
                struct sbx_error e = {0};
                /* the same workspace may be listed twice (stacked): detach takes all */
                if (i > 0 && strcmp(found[i][0], found[i - 1][0]) == 0 && strcmp(found[i][1], found[i - 1][1]) == 0)
                        continue;
                if (keep && keep(found[i][0], found[i][1], ud))
                        continue;
                if (plain_name(found[i][0]) && plain_name(found[i][1]) &&
                    wsquota_detach(cfg, found[i][0], found[i][1], &e) == 0)
                        count++;
                else if (e.msg[0])
                        log_ctx(LOG_LEVEL_WARN, found[i][0], found[i][1], NULL, "workspace sweep: %s", e.msg);
        }
        free(found);
        return count;
}
