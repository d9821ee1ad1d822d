/* hub_dir.c — a session's runner directory and its listening socket
 * (hub_dir.h). Only root writes in it: the container mounts it
 * read-only, so nothing found in it was planted there, but every call
 * still opens relative to a directory fd without following links. */
#include "sandboxd/hub_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandboxd/hub_peer.h"
#include "sandboxd/runner_proto.h"
#include "sandboxd/sha256.h"

int hub_dir_key(const char *user, const char *session, char ret[33])
{
        char key[140], hex[65];
        int n = snprintf(key, sizeof(key), "%s:%s", user, session);
        if (sha256_hex(key, (size_t)n, hex) < 0)
                return -ENOMEM;
        memcpy(ret, hex, 32);
        ret[32] = '\0';
        return 0;
}

int hub_dir_listen(const char *root_path, const char *user, const char *session, bool create, int *ret_dirfd,
                   int *ret_lfd, char ret_path[SBX_PATH_MAX], struct sbx_error *err)
{
        _cleanup_close_ int root = -1, dfd = -1, lfd = -1;
        char hash[33], path[SBX_PATH_MAX], proc[64];
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct stat st;

        if (hub_dir_key(user, session, hash) < 0)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (snprintf(path, sizeof(path), "%s/%s", root_path, hash) >= (int)sizeof(path))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "runner directory path too long");
        root = open(root_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root < 0)
                return sbx_error_set(err, -errno, 0, "cannot open %s: %m", root_path);
        if (!create && (fstatat(root, hash, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)))
                return sbx_error_set(err, -ENOENT, 0, "no runner directory for the session");
        if (create && mkdirat(root, hash, 0755) < 0 && errno != EEXIST)
                return sbx_error_set(err, -errno, 0, "cannot create %s: %m", path);
        /* It may exist already: made by kubelet for a Pod's subPathExpr before the node agent opened it
         * (root's, empty, its mode kubelet's). Never a link, never anyone else's. */
        dfd = openat(root, hash, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0 || fstat(dfd, &st) < 0)
                return sbx_error_set(err, -errno, 0, "cannot open %s: %m", path);
        if (st.st_uid != 0)
                return sbx_error_set(err, -EPERM, 0, "%s is not root's (uid %u): refused", path, (unsigned)st.st_uid);
        if ((st.st_mode & 07777) != 0755 && fchmod(dfd, 0755) < 0)
                return sbx_error_set(err, -errno, 0, "cannot secure %s: %m", path);
        if (unlinkat(dfd, RP_SOCKET_NAME, 0) < 0 && errno != ENOENT)
                return sbx_error_set(err, -errno, 0, "cannot remove the stale socket in %s: %m", path);
        /* bind through the directory fd: no path is re-resolved, and the
         * length limit of sun_path does not depend on the root */
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d/" RP_SOCKET_NAME, dfd);
        sbx_strlcpy(sa.sun_path, proc, sizeof(sa.sun_path));
        lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return sbx_error_set(err, -errno, 0, "cannot bind the runner socket in %s: %m", path);
        if (fchmodat(dfd, RP_SOCKET_NAME, 0666, 0) < 0 || listen(lfd, 4) < 0)
                return sbx_error_set(err, -errno, 0, "cannot listen on the runner socket in %s: %m", path);
        *ret_dirfd = TAKE_FD(dfd);
        *ret_lfd = TAKE_FD(lfd);
        sbx_strlcpy(ret_path, path, SBX_PATH_MAX);
        return 0;
}

int hub_dir_listen_name(int dirfd, const char *name, int *ret_lfd)
{
        _cleanup_close_ int lfd = -1;
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        char proc[128];

        if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
                return -errno;
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d/%s", dirfd, name);
        sbx_strlcpy(sa.sun_path, proc, sizeof(sa.sun_path));
        lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || fchmodat(dirfd, name, 0666, 0) < 0 ||
            listen(lfd, SOMAXCONN) < 0)
                return -errno;
        *ret_lfd = TAKE_FD(lfd);
        return 0;
}

static void remove_at(int root, const char *hash)
{
        _cleanup_close_ int dfd = openat(root, hash, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd >= 0) {
                (void)unlinkat(dfd, RP_SOCKET_NAME, 0);
                (void)unlinkat(dfd, RUNNER_PEER_FILE, 0);
                (void)unlinkat(dfd, RP_EGRESS_SOCKET_NAME, 0);
                (void)unlinkat(dfd, RP_FWD_SOCKET_NAME, 0);
                (void)unlinkat(dfd, RUNNER_DIR_CA_BUNDLE, 0);
                (void)unlinkat(dfd, RUNNER_DIR_CA_BUNDLE ".tmp", 0);
        }
        (void)unlinkat(root, hash, AT_REMOVEDIR);
}

int hub_dir_put_file(const char *dir, const char *name, const void *data, size_t len, bool replace)
{
        _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        _cleanup_close_ int fd = -1;
        char tmp[128];
        const char *p = data;
        struct stat st;

        if (dfd < 0)
                return -errno;
        if (!replace && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
                return -EEXIST;
        snprintf(tmp, sizeof(tmp), "%s.tmp", name);
        (void)unlinkat(dfd, tmp, 0);
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        while (len > 0) {
                ssize_t k = write(fd, p, len);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0) {
                        int r = k < 0 ? -errno : -EIO;
                        (void)unlinkat(dfd, tmp, 0);
                        return r;
                }
                p += k;
                len -= (size_t)k;
        }
        if (fchmod(fd, 0644) < 0 || renameat(dfd, tmp, dfd, name) < 0) {
                int r = -errno;
                (void)unlinkat(dfd, tmp, 0);
                return r;
        }
        return 0;
}

bool hub_dir_has(const char *dir, const char *name)
{
        _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;

        return dfd >= 0 && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

void hub_dir_remove(const char *root_path, const char *user, const char *session)
{
        _cleanup_close_ int root = open(root_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        char hash[33];

        if (root >= 0 && hub_dir_key(user, session, hash) == 0)
                remove_at(root, hash);
}

int hub_dir_rename(const char *root_path, const char *from_user, const char *from_session, const char *to_user,
                   const char *to_session, char ret_path[SBX_PATH_MAX], struct sbx_error *err)
{
        _cleanup_close_ int root = -1;
        char from[33], to[33];
        struct stat st;

        if (hub_dir_key(from_user, from_session, from) < 0 || hub_dir_key(to_user, to_session, to) < 0)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        root = open(root_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root < 0)
                return sbx_error_set(err, -errno, 0, "cannot open %s: %m", root_path);
        if (fstatat(root, from, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                if (!S_ISDIR(st.st_mode))
                        return sbx_error_set(err, -ENOTDIR, 0, "%s/%s is not a directory", root_path, from);
                if (strcmp(from, to) != 0) {
                        remove_at(root, to);
                        if (renameat(root, from, root, to) < 0)
                                return sbx_error_set(err, -errno, 0, "cannot rename %s to %s: %m", from, to);
                }
        } else if (errno != ENOENT || fstatat(root, to, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                return sbx_error_set(err, -ENOENT, 0, "no runner directory for %s:%s", from_user, from_session);
        }
        if (ret_path && snprintf(ret_path, SBX_PATH_MAX, "%s/%s", root_path, to) >= SBX_PATH_MAX)
                return sbx_error_set(err, -ENAMETOOLONG, 0, "runner directory path too long");
        return 0;
}
