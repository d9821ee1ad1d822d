/* sbx-statx.c — statx(2) without AT_NO_AUTOMOUNT where the kernel refuses the flag.
 *
 * gVisor's runsc in Debian 12 (0.0~20221219) answers EINVAL to every statx
 * that carries AT_NO_AUTOMOUNT, and coreutils 9.1 (ls, stat, cp, du, ...)
 * always passes it: under runsc, `ls /` failed with "Invalid argument" in
 * every session of this image. A sandbox has no automount points, so the
 * flag changes nothing in it; this wrapper asks again without it once the
 * kernel said EINVAL, and is otherwise the plain system call (runc's
 * sessions never see the retry). scripts/build-images.sh builds it on the
 * host against the same glibc (both Debian 12) and the image loads it
 * through /etc/ld.so.preload. Hand-written: no library does this, and it is
 * one function. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int statx(int dirfd, const char *restrict path, int flags, unsigned int mask, struct statx *restrict buf)
{
        long r = syscall(SYS_statx, dirfd, path, flags, mask, buf);

        if (r < 0 && errno == EINVAL && (flags & AT_NO_AUTOMOUNT))
                r = syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
        return (int)r;
}
