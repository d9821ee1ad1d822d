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

int snapcopy_file(int srcfd, int dstfd, bool *ret_reflinked, int64_t *ret_bytes)
{
        struct stat st;
        int r;

        *ret_reflinked = false;
        if (fstat(srcfd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        if (ioctl(dstfd, FICLONE, srcfd) == 0) {
                *ret_reflinked = true;
        } else {
                r = sbx_copy_sparse(srcfd, dstfd); /* its data extents only (common.h) */
                if (r < 0)
                        return r;
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
