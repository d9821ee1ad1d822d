/* snapshot_copy.c — the snapshot module's file work that needs no archive:
 * copying a workspace image (a reflink, else its data extents only, so a
 * sparse image stays sparse) and removing trees without following symlinks.
 * Every call works on fds the caller opened; nothing is resolved by path
 * beyond one component. No state, no locks. */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snapshot_internal.h"

#define COPY_CHUNK (1 << 20)

static int copy_range(int in, int out, off_t off, off_t len)
{
        _cleanup_free_ char *buf = NULL; /* the plain way's, made on first need */

        while (len > 0) {
                loff_t a = off, b = off;
                ssize_t n = copy_file_range(in, &a, out, &b, (size_t)(len < (1 << 30) ? len : (1 << 30)), 0);
                if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL)) {
                        if (!buf && !(buf = malloc(COPY_CHUNK)))
                                return -ENOMEM;
                        n = pread(in, buf, (size_t)(len < COPY_CHUNK ? len : COPY_CHUNK), off);
                        if (n > 0 && pwrite(out, buf, (size_t)n, off) != n)
                                return errno ? -errno : -EIO;
                }
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        return 0; /* the file shrank: the rest is a hole */
                off += n;
                len -= n;
        }
        return 0;
}

int snapcopy_file(int srcfd, int dstfd, bool *ret_reflinked, int64_t *ret_bytes)
{
        struct stat st;
        off_t data = 0, hole;
        int r;

        *ret_reflinked = false;
        if (fstat(srcfd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        if (ioctl(dstfd, FICLONE, srcfd) == 0) {
                *ret_reflinked = true;
        } else {
                for (;;) {
                        data = lseek(srcfd, data, SEEK_DATA);
                        if (data < 0) {
                                if (errno == ENXIO)
                                        break; /* no data past here */
                                return -errno;
                        }
                        hole = lseek(srcfd, data, SEEK_HOLE);
                        if (hole < 0)
                                return -errno;
                        r = copy_range(srcfd, dstfd, data, hole - data);
                        if (r < 0)
                                return r;
                        data = hole;
                }
                if (ftruncate(dstfd, st.st_size) < 0)
                        return -errno;
        }
        if (fsync(dstfd) < 0)
                return -errno;
        if (fstat(dstfd, &st) < 0)
                return -errno;
        *ret_bytes = (int64_t)st.st_blocks * 512;
        return 0;
}

int snapcopy_empty_dir(int dirfd)
{
        return sbx_remove_tree_at(dirfd);
}

int snapcopy_remove_at(int dirfd, const char *name)
{
        struct stat st;
        int sub, r;

        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode))
                return unlinkat(dirfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
        sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0)
                return -errno;
        r = snapcopy_empty_dir(sub);
        close(sub);
        if (r == 0 && unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                r = -errno;
        return r;
}
