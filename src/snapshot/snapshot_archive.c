/* snapshot_archive.c — a workspace tree as a zstd-compressed pax tar, and
 * back (libarchive: the only file that includes it; cmake/
 * check_boundaries.cmake holds it to that).
 *
 * libarchive's own disk reader and writer resolve paths against the working
 * directory, which a threaded daemon cannot change per call, so both walks
 * are ours and fd-relative: pack opens every entry with O_NOFOLLOW under its
 * parent's fd, unpack creates every entry under its parent's fd, which it
 * reached one component at a time with O_NOFOLLOW. libarchive only encodes
 * and decodes the stream. Sparse files stay sparse: pack finds the data
 * extents (SEEK_DATA/SEEK_HOLE on the fd it opened) and hands libarchive a
 * sparse map, so holes are neither read nor stored; unpack writes each data
 * block at its offset and leaves holes, and blocks of zeros, unwritten.
 * No state, no locks. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snapshot_internal.h"

#define IO_CHUNK (256 * 1024)

struct pack {
        struct archive *a;
        struct archive_entry *e;
        dev_t dev;
        int outfd;
        uint64_t max_bytes, max_out;
        unsigned chunks; /* written since the output's size was last checked */
        struct snaparchive_stats st;
        char *buf, *zero;
        struct sbx_error *err;
};

static int pack_fail(struct pack *p, const char *path, const char *what)
{
        return sbx_error_set(p->err, -EIO, 0, "snapshot: %s %s: %s", what, path, archive_error_string(p->a));
}

static int pack_header(struct pack *p, const char *path, const struct stat *st, mode_t type, int64_t size,
                       const char *link)
{
        if (type != AE_IFREG) /* pack_file has set the size and the map already */
                archive_entry_clear(p->e);
        archive_entry_set_pathname(p->e, path);
        archive_entry_set_filetype(p->e, type);
        archive_entry_set_perm(p->e, st->st_mode & 07777);
        archive_entry_set_size(p->e, size);
        archive_entry_set_mtime(p->e, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
        if (link)
                archive_entry_set_symlink(p->e, link);
        if (++p->st.entries > SNAP_MAX_ENTRIES)
                return sbx_error_set(p->err, -EFBIG, 0, "snapshot: the workspace has more than %d entries",
                                     SNAP_MAX_ENTRIES);
        if (archive_write_header(p->a, p->e) != ARCHIVE_OK)
                return pack_fail(p, path, "cannot write the header of");
        return 0;
}

/* The data extents of fd (size bytes) as e's sparse map, and the bytes they
 * hold. A file without holes gets no map (a plain entry); past
 * SNAP_MAX_EXTENTS extents neither (its holes are stored as zeros, which
 * unpack leaves as holes again). */
static int64_t pack_extents(int fd, int64_t size, struct archive_entry *e)
{
        int64_t data = 0, total = 0;
        unsigned n = 0;

        archive_entry_sparse_clear(e);
        while (data < size) {
                off_t at = lseek(fd, data, SEEK_DATA), end;
                if (at < 0)
                        break; /* ENXIO: holes to the end; anything else: read it all */
                end = lseek(fd, at, SEEK_HOLE);
                if (end < 0 || end > size)
                        end = size;
                if (++n > SNAP_MAX_EXTENTS) {
                        archive_entry_sparse_clear(e);
                        return size;
                }
                archive_entry_sparse_add_entry(e, at, end - at);
                total += end - at;
                data = end;
        }
        if (total == size) {
                archive_entry_sparse_clear(e);
                return size;
        }
        if (n == 0) /* all hole: a map that says so */
                archive_entry_sparse_add_entry(e, 0, 0);
        return total;
}

/* Write len bytes of fd from off (zeros past its end: the header promised them). */
static int pack_data(struct pack *p, int fd, const char *path, int64_t off, int64_t len)
{
        while (len > 0) {
                ssize_t n = pread(fd, p->buf, (size_t)(len < IO_CHUNK ? len : IO_CHUNK), off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return sbx_error_set(p->err, -errno, 0, "snapshot: cannot read %s: %m", path);
                if (n == 0) { /* shrank */
                        n = len < IO_CHUNK ? len : IO_CHUNK;
                        memset(p->buf, 0, (size_t)n);
                }
                if (archive_write_data(p->a, p->buf, (size_t)n) != n)
                        return pack_fail(p, path, "cannot write");
                off += n;
                len -= n;
                if (++p->chunks >= 32) { /* every 8 MiB read: the quota left, before the disk fills */
                        struct stat os;
                        p->chunks = 0;
                        if (fstat(p->outfd, &os) == 0 && (uint64_t)os.st_size > p->max_out)
                                return sbx_error_set(p->err, -EDQUOT, 0,
                                                     "snapshot quota exceeded: the copy passed the %llu bytes "
                                                     "left of limits.snapshot_bytes_per_user",
                                                     (unsigned long long)p->max_out);
                }
        }
        return 0;
}

/* A hole of len bytes: the pax writer skips it, so zeros that are never read or stored. */
static int pack_hole(struct pack *p, const char *path, int64_t len)
{
        while (len > 0) {
                ssize_t n = len < IO_CHUNK ? len : IO_CHUNK;
                if (archive_write_data(p->a, p->zero, (size_t)n) != n)
                        return pack_fail(p, path, "cannot write");
                len -= n;
        }
        return 0;
}

static int pack_file(struct pack *p, int dirfd, const char *name, const char *path, const struct stat *st0)
{
        _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
        struct stat st;
        int64_t data, at = 0, off, len;
        int r;

        if (fd < 0)
                return errno == ENOENT ? 0 : sbx_error_set(p->err, -errno, 0, "snapshot: cannot open %s: %m", path);
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_ino != st0->st_ino)
                return 0; /* replaced under us: not what was listed */
        archive_entry_clear(p->e);
        archive_entry_set_size(p->e, st.st_size); /* before the map, which libarchive checks against it */
        data = pack_extents(fd, st.st_size, p->e);
        if (p->st.bytes + (uint64_t)data > p->max_bytes)
                return sbx_error_set(p->err, -EFBIG, 0, "snapshot: the workspace holds more than %llu bytes",
                                     (unsigned long long)p->max_bytes);
        r = pack_header(p, path, &st, AE_IFREG, st.st_size, NULL);
        if (r < 0)
                return r;
        if (archive_entry_sparse_reset(p->e) == 0) {
                r = pack_data(p, fd, path, 0, st.st_size);
        } else {
                while (r == 0 && archive_entry_sparse_next(p->e, &off, &len) == ARCHIVE_OK) {
                        r = pack_hole(p, path, off - at);
                        if (r == 0)
                                r = pack_data(p, fd, path, off, len);
                        at = off + len;
                }
                if (r == 0)
                        r = pack_hole(p, path, st.st_size - at);
        }
        if (r < 0)
                return r;
        p->st.bytes += (uint64_t)data;
        return 0;
}

static int pack_dir(struct pack *p, int dirfd, const char *prefix, int depth)
{
        DIR *d;
        struct dirent *de;
        char path[SNAP_PATH_MAX];
        int r = 0, dfd;

        if (depth > SNAP_MAX_DEPTH)
                return sbx_error_set(p->err, -EFBIG, 0, "snapshot: the workspace is deeper than %d levels",
                                     SNAP_MAX_DEPTH);
        dfd = dup(dirfd);
        if (dfd < 0 || !(d = fdopendir(dfd))) {
                r = -errno;
                if (dfd >= 0)
                        close(dfd);
                return sbx_error_set(p->err, r, 0, "snapshot: cannot read directory %s: %s", prefix[0] ? prefix : ".",
                                     strerror(-r));
        }
        while (r == 0 && (de = readdir(d))) {
                struct stat st;
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "/" : "", de->d_name) >=
                    (int)sizeof(path)) {
                        r = sbx_error_set(p->err, -ENAMETOOLONG, 0, "snapshot: a path is longer than %d bytes",
                                          SNAP_PATH_MAX);
                        break;
                }
                if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue; /* gone meanwhile */
                if (S_ISREG(st.st_mode)) {
                        r = pack_file(p, dirfd, de->d_name, path, &st);
                } else if (S_ISLNK(st.st_mode)) {
                        char target[SNAP_PATH_MAX];
                        ssize_t n = readlinkat(dirfd, de->d_name, target, sizeof(target) - 1);
                        if (n < 0)
                                continue;
                        target[n] = '\0';
                        r = pack_header(p, path, &st, AE_IFLNK, 0, target);
                } else if (S_ISDIR(st.st_mode) && st.st_dev == p->dev) {
                        int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub < 0)
                                continue;
                        r = pack_header(p, path, &st, AE_IFDIR, 0, NULL);
                        if (r == 0)
                                r = pack_dir(p, sub, path, depth + 1);
                        close(sub);
                } else {
                        p->st.skipped++; /* devices, FIFOs, sockets, mount points */
                }
        }
        closedir(d);
        return r;
}

int snaparchive_pack(int dirfd, int outfd, uint64_t max_bytes, uint64_t max_out, struct snaparchive_stats *ret_stats,
                     struct sbx_error *err)
{
        struct pack p = {.max_bytes = max_bytes, .max_out = max_out, .outfd = outfd, .err = err};
        struct stat st;
        int r;

        if (fstat(dirfd, &st) < 0)
                return sbx_error_set(err, -errno, 0, "snapshot: cannot stat the workspace: %m");
        p.dev = st.st_dev;
        p.a = archive_write_new();
        p.e = archive_entry_new();
        p.buf = malloc(IO_CHUNK);
        p.zero = calloc(1, IO_CHUNK);
        if (!p.a || !p.e || !p.buf || !p.zero) {
                r = sbx_error_set(err, -ENOMEM, 0, "out of memory");
                goto out;
        }
        if (archive_write_set_format_pax_restricted(p.a) != ARCHIVE_OK ||
            archive_write_add_filter_zstd(p.a) != ARCHIVE_OK ||
            /* level 1: the session is frozen while this runs (about twice level 3's speed) */
            archive_write_set_filter_option(p.a, "zstd", "compression-level", "1") != ARCHIVE_OK ||
            archive_write_open_fd(p.a, outfd) != ARCHIVE_OK) {
                r = sbx_error_set(err, -EIO, 0, "snapshot: cannot start the archive: %s", archive_error_string(p.a));
                goto out;
        }
        r = pack_dir(&p, dirfd, "", 0);
        if (r == 0 && archive_write_close(p.a) != ARCHIVE_OK)
                r = sbx_error_set(err, -EIO, 0, "snapshot: cannot finish the archive: %s", archive_error_string(p.a));
        if (r == 0 && ret_stats)
                *ret_stats = p.st;
out:
        if (p.a)
                archive_write_free(p.a);
        archive_entry_free(p.e);
        free(p.buf);
        free(p.zero);
        return r;
}

/* ---- unpack ---- */

/* Split path into its parent's fd (walked from root, directories made as
 * uid's 0700 where missing) and its last component. Refuses absolute
 * paths, empty, "." and ".." components. The fd is the caller's. */
static int walk_parent(int root, const char *path, uid_t uid, int *ret_fd, const char **ret_name)
{
        char buf[SNAP_PATH_MAX], *save = NULL, *tok, *next;
        int fd, depth = 0;
        size_t len = strlen(path);

        while (len > 0 && path[len - 1] == '/') /* "dir/" names dir */
                len--;
        if (len == 0 || len >= sizeof(buf) || path[0] == '/')
                return -EINVAL;
        memcpy(buf, path, len);
        buf[len] = '\0';
        fd = dup(root);
        if (fd < 0)
                return -errno;
        tok = strtok_r(buf, "/", &save);
        while (tok) {
                next = strtok_r(NULL, "/", &save);
                /* depth counts the directories walked, as pack does: a file at pack's deepest level unpacks */
                if (strcmp(tok, ".") == 0 || strcmp(tok, "..") == 0 || (next && ++depth > SNAP_MAX_DEPTH)) {
                        close(fd);
                        return -EINVAL;
                }
                if (!next) {
                        *ret_fd = fd;
                        *ret_name = path + (tok - buf);
                        return 0;
                }
                int sub = openat(fd, tok, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub < 0 && errno == ENOENT) {
                        if (mkdirat(fd, tok, 0700) < 0 && errno != EEXIST) {
                                close(fd);
                                return -errno;
                        }
                        sub = openat(fd, tok, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub >= 0 && fchown(sub, uid, uid) < 0) {
                                close(sub);
                                sub = -1;
                        }
                }
                close(fd);
                if (sub < 0)
                        return -errno; /* ELOOP/ENOTDIR: a symlink or a file on the way */
                fd = sub;
                tok = next;
        }
        close(fd);
        return -EINVAL;
}

static bool all_zero(const void *p, size_t n)
{
        const unsigned char *b = p;
        return n == 0 || (b[0] == 0 && memcmp(b, b + 1, n - 1) == 0);
}

static int unpack_entry(struct archive *a, struct archive_entry *e, int root, uid_t uid, uint64_t max_bytes,
                        struct snaparchive_stats *st, struct sbx_error *err)
{
        const char *path = archive_entry_pathname(e), *name;
        mode_t type = archive_entry_filetype(e), perm = archive_entry_perm(e) & 01777; /* no setuid, setgid */
        _cleanup_close_ int pfd = -1, fd = -1;
        int r;

        if (!path)
                return sbx_error_set(err, -EINVAL, 0, "snapshot: an entry without a name");
        if (archive_entry_hardlink(e))
                return sbx_error_set(err, -EINVAL, 0, "snapshot: refused hardlink %s", path);
        if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
                return sbx_error_set(err, -EINVAL, 0, "snapshot: refused %s: not a file, directory or symlink", path);
        if (++st->entries > SNAP_MAX_ENTRIES)
                return sbx_error_set(err, -EFBIG, 0, "snapshot: more than %d entries", SNAP_MAX_ENTRIES);
        r = walk_parent(root, path, uid, &pfd, &name);
        if (r < 0)
                return sbx_error_set(err, r, 0, "snapshot: refused path %s: %s", path, strerror(-r));
        /* name is within path, which walk_parent cut at the trailing slashes only in its copy */
        char last[256];
        size_t n = strcspn(name, "/");
        if (n == 0 || n >= sizeof(last))
                return sbx_error_set(err, -EINVAL, 0, "snapshot: refused path %s", path);
        memcpy(last, name, n);
        last[n] = '\0';
        if (type == AE_IFDIR) {
                if (mkdirat(pfd, last, 0700) < 0 && errno != EEXIST)
                        return sbx_error_set(err, -errno, 0, "snapshot: cannot make %s: %m", path);
                fd = openat(pfd, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 || fchown(fd, uid, uid) < 0 || fchmod(fd, perm) < 0)
                        return sbx_error_set(err, -errno, 0, "snapshot: cannot set up %s: %m", path);
                return 0;
        }
        if (type == AE_IFLNK) {
                const char *target = archive_entry_symlink(e);
                if (!target || symlinkat(target, pfd, last) < 0 ||
                    fchownat(pfd, last, uid, uid, AT_SYMLINK_NOFOLLOW) < 0)
                        return sbx_error_set(err, -errno ? -errno : -EINVAL, 0, "snapshot: cannot make symlink %s: %m",
                                             path);
                return 0;
        }
        fd = openat(pfd, last, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 || fchown(fd, uid, uid) < 0)
                return sbx_error_set(err, -errno, 0, "snapshot: cannot create %s: %m", path);
        for (;;) {
                const void *blk;
                size_t got;
                la_int64_t off;
                int k = archive_read_data_block(a, &blk, &got, &off);
                if (k == ARCHIVE_EOF)
                        break;
                if (k != ARCHIVE_OK && k != ARCHIVE_WARN)
                        return sbx_error_set(err, -EIO, 0, "snapshot: cannot read %s: %s", path,
                                             archive_error_string(a));
                if ((st->bytes += got) > max_bytes)
                        return sbx_error_set(err, -EFBIG, 0, "snapshot: more than %llu bytes of files",
                                             (unsigned long long)max_bytes);
                if (all_zero(blk, got))
                        continue; /* a hole (the size is set below) */
                for (size_t done = 0; done < got;) {
                        ssize_t w = pwrite(fd, (const char *)blk + done, got - done, off + (off_t)done);
                        if (w < 0 && errno == EINTR)
                                continue;
                        if (w < 0)
                                return sbx_error_set(err, -errno, 0, "snapshot: cannot write %s: %m", path);
                        done += (size_t)w;
                }
        }
        if (ftruncate(fd, archive_entry_size(e)) < 0)
                return sbx_error_set(err, -errno, 0, "snapshot: cannot size %s: %m", path);
        struct timespec ts[2] = {{.tv_sec = archive_entry_mtime(e), .tv_nsec = archive_entry_mtime_nsec(e)}};
        ts[1] = ts[0];
        if (fchmod(fd, perm) < 0 || futimens(fd, ts) < 0)
                return sbx_error_set(err, -errno, 0, "snapshot: cannot set up %s: %m", path);
        return 0;
}

int snaparchive_unpack(int infd, int dirfd, uid_t uid, uint64_t max_bytes, struct snaparchive_stats *ret_stats,
                       struct sbx_error *err)
{
        struct archive *a = archive_read_new();
        struct archive_entry *e;
        struct snaparchive_stats st = {0};
        int r = 0, k;

        if (!a) {
                r = sbx_error_set(err, -ENOMEM, 0, "out of memory");
                goto out;
        }
        if (archive_read_support_format_tar(a) != ARCHIVE_OK || archive_read_support_filter_zstd(a) != ARCHIVE_OK ||
            archive_read_open_fd(a, infd, IO_CHUNK) != ARCHIVE_OK) {
                r = sbx_error_set(err, -EIO, 0, "snapshot: cannot open the archive: %s", archive_error_string(a));
                goto out;
        }
        while (r == 0 && (k = archive_read_next_header(a, &e)) != ARCHIVE_EOF) {
                if (k != ARCHIVE_OK && k != ARCHIVE_WARN) {
                        r = sbx_error_set(err, -EIO, 0, "snapshot: a damaged archive: %s", archive_error_string(a));
                        break;
                }
                r = unpack_entry(a, e, dirfd, uid, max_bytes, &st, err);
        }
        if (r == 0 && ret_stats)
                *ret_stats = st;
out:
        if (a)
                archive_read_free(a);
        return r;
}
