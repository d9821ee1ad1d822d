/* Unit tests of the snapshot archive (src/snapshot/snapshot_archive.c):
 * hostile archives are refused without anything written outside the
 * target (absolute paths, "..", hardlinks, device nodes, a path through a
 * symlink), setuid and setgid bits are dropped, everything is given to the
 * target uid; packing stores a symlink as a symlink and never reads what it
 * points to; sparse files keep their holes both ways (issue 34); 256 levels
 * pack and unpack, 257 are too_large (-EFBIG). Real files in a temp
 * directory; no Docker. */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/snapshot/snapshot_internal.h"
#include "sandboxd/snapshot.h"

#define UID 54321

static char root[64];

static void mk_root(void)
{
        snprintf(root, sizeof(root), "/tmp/sbx-snaparch-XXXXXX");
        cr_assert_not_null(mkdtemp(root));
}

static void rm_root(void)
{
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        (void)system(cmd);
}

TestSuite(snaparchive, .init = mk_root, .fini = rm_root);

struct entry {
        const char *path;
        mode_t type; /* AE_IFREG, AE_IFDIR, AE_IFLNK, AE_IFCHR */
        mode_t perm;
        const char *data_or_link;
        const char *hardlink;
};

/* An archive of the entries, zstd pax, in root/<name>; its fd (read). */
static int write_archive(const char *name, const struct entry *es, size_t n)
{
        char path[128];
        struct archive *a = archive_write_new();
        struct archive_entry *e = archive_entry_new();
        int fd;

        snprintf(path, sizeof(path), "%s/%s", root, name);
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        cr_assert_geq(fd, 0);
        cr_assert_eq(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
        cr_assert_eq(archive_write_add_filter_zstd(a), ARCHIVE_OK);
        cr_assert_eq(archive_write_open_fd(a, fd), ARCHIVE_OK);
        for (size_t i = 0; i < n; i++) {
                size_t len = es[i].type == AE_IFREG && es[i].data_or_link ? strlen(es[i].data_or_link) : 0;
                archive_entry_clear(e);
                archive_entry_set_pathname(e, es[i].path);
                archive_entry_set_filetype(e, es[i].type);
                archive_entry_set_perm(e, es[i].perm);
                archive_entry_set_size(e, (la_int64_t)len);
                if (es[i].type == AE_IFLNK)
                        archive_entry_set_symlink(e, es[i].data_or_link);
                if (es[i].hardlink) {
                        archive_entry_set_hardlink(e, es[i].hardlink);
                        archive_entry_set_size(e, 0);
                        len = 0;
                }
                cr_assert_eq(archive_write_header(a, e), ARCHIVE_OK, "%s", archive_error_string(a));
                if (len)
                        cr_assert_eq(archive_write_data(a, es[i].data_or_link, len), (la_ssize_t)len);
        }
        cr_assert_eq(archive_write_close(a), ARCHIVE_OK);
        archive_write_free(a);
        archive_entry_free(e);
        cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
        return fd;
}

static int target_dir(const char *name)
{
        char path[128];
        snprintf(path, sizeof(path), "%s/%s", root, name);
        cr_assert_eq(mkdir(path, 0700), 0);
        return open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static bool exists(const char *rel)
{
        char path[256];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", root, rel);
        return lstat(path, &st) == 0;
}

static int unpack(const struct entry *es, size_t n, struct sbx_error *err)
{
        int in = write_archive("a.tar.zst", es, n), out = target_dir("t");
        int r = snaparchive_unpack(in, out, UID, 1 << 20, NULL, err);
        close(in);
        close(out);
        return r;
}

Test(snaparchive, dotdot_is_refused_and_writes_nothing_outside)
{
        struct entry es[] = {{"ok.txt", AE_IFREG, 0644, "fine", NULL}, {"../evil", AE_IFREG, 0644, "x", NULL}};
        struct sbx_error err = {0};

        cr_assert_eq(unpack(es, 2, &err), -EINVAL);
        cr_assert_not_null(strstr(err.msg, "../evil"), "%s", err.msg);
        cr_assert(!exists("evil"));
}

Test(snaparchive, absolute_paths_are_refused)
{
        struct entry es[] = {{"/tmp/sbx-snaparch-abs", AE_IFREG, 0644, "x", NULL}};
        struct sbx_error err = {0};

        cr_assert_eq(unpack(es, 1, &err), -EINVAL);
        cr_assert_neq(access("/tmp/sbx-snaparch-abs", F_OK), 0);
}

Test(snaparchive, hardlinks_and_devices_are_refused)
{
        struct entry hl[] = {{"a", AE_IFREG, 0644, "x", NULL}, {"b", AE_IFREG, 0644, NULL, "/etc/passwd"}};
        struct entry dev[] = {{"null", AE_IFCHR, 0666, NULL, NULL}};
        struct sbx_error err = {0};

        cr_assert_eq(unpack(hl, 2, &err), -EINVAL);
        cr_assert_not_null(strstr(err.msg, "hardlink"), "%s", err.msg);
        rm_root();
        mk_root();
        cr_assert_eq(unpack(dev, 1, &err), -EINVAL);
        cr_assert(!exists("t/null"));
}

/* A symlink to a directory outside, then a file "through" it: never followed. */
Test(snaparchive, a_path_through_a_symlink_is_refused)
{
        char outside[128], link_target[160];
        struct sbx_error err = {0};

        snprintf(outside, sizeof(outside), "%s/outside", root);
        cr_assert_eq(mkdir(outside, 0700), 0);
        snprintf(link_target, sizeof(link_target), "%s", outside);
        struct entry es[] = {{"l", AE_IFLNK, 0777, link_target, NULL}, {"l/planted", AE_IFREG, 0644, "x", NULL}};
        int r = unpack(es, 2, &err);
        cr_assert(r == -ENOTDIR || r == -ELOOP, "%d: %s", r, err.msg); /* O_NOFOLLOW|O_DIRECTORY on a symlink */
        cr_assert(!exists("outside/planted"));
        cr_assert(exists("t/l"));
}

Test(snaparchive, modes_kept_setuid_dropped_owner_is_the_target_uid)
{
        struct entry es[] = {
                {"d/", AE_IFDIR, 02750, NULL, NULL},
                {"d/su", AE_IFREG, 04755, "#!/bin/sh\n", NULL},
                {"d/plain", AE_IFREG, 0640, "data", NULL},
                {"ln", AE_IFLNK, 0777, "d/plain", NULL},
        };
        struct sbx_error err = {0};
        char path[256], target[64];
        struct stat st;
        ssize_t n;

        cr_assert_eq(unpack(es, 4, &err), 0, "%s", err.msg);
        snprintf(path, sizeof(path), "%s/t/d", root);
        cr_assert_eq(lstat(path, &st), 0);
        cr_assert_eq(st.st_mode & 07777, 0750);
        cr_assert_eq(st.st_uid, UID);
        snprintf(path, sizeof(path), "%s/t/d/su", root);
        cr_assert_eq(lstat(path, &st), 0);
        cr_assert_eq(st.st_mode & 07777, 0755);
        cr_assert_eq(st.st_uid, UID);
        snprintf(path, sizeof(path), "%s/t/d/plain", root);
        cr_assert_eq(lstat(path, &st), 0);
        cr_assert_eq(st.st_mode & 07777, 0640);
        cr_assert_eq(st.st_size, 4);
        snprintf(path, sizeof(path), "%s/t/ln", root);
        cr_assert_eq(lstat(path, &st), 0);
        cr_assert(S_ISLNK(st.st_mode));
        cr_assert_eq(st.st_uid, UID);
        n = readlink(path, target, sizeof(target) - 1);
        cr_assert_eq(n, 7);
        target[n] = '\0';
        cr_assert_str_eq(target, "d/plain");
}

/* Packing: a symlink to a secret is stored as the link, never the secret. */
Test(snaparchive, pack_stores_symlinks_not_their_targets)
{
        char path[256], secret[128];
        struct snaparchive_stats st;
        struct sbx_error err = {0};
        int src, out, back;

        snprintf(secret, sizeof(secret), "%s/secret", root);
        FILE *f = fopen(secret, "we");
        cr_assert_not_null(f);
        fputs("TOPSECRET-BYTES", f);
        fclose(f);
        src = target_dir("src");
        cr_assert_eq(symlinkat(secret, src, "leak"), 0);
        cr_assert_eq(mkfifoat(src, "fifo", 0600), 0);
        snprintf(path, sizeof(path), "%s/out.tar.zst", root);
        out = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        cr_assert_eq(snaparchive_pack(src, out, 1 << 20, 1 << 20, &st, &err), 0, "%s", err.msg);
        cr_assert_eq(st.entries, 1);
        cr_assert_eq(st.bytes, 0, "no file data: the link's target was not read");
        cr_assert_eq(st.skipped, 1, "the FIFO is left out");
        cr_assert_eq(lseek(out, 0, SEEK_SET), 0);
        back = target_dir("back");
        cr_assert_eq(snaparchive_unpack(out, back, UID, 1 << 20, NULL, &err), 0, "%s", err.msg);
        snprintf(path, sizeof(path), "%s/back/leak", root);
        struct stat sb;
        cr_assert_eq(lstat(path, &sb), 0);
        cr_assert(S_ISLNK(sb.st_mode));
        close(src);
        close(out);
        close(back);
}

/* A file of size bytes under dirfd with "x" written at each of offsets (a sparse file). */
static void sparse_file(int dirfd, const char *name, off_t size, const off_t *offsets, size_t n)
{
        int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        cr_assert_geq(fd, 0);
        cr_assert_eq(ftruncate(fd, size), 0);
        for (size_t i = 0; i < n; i++)
                cr_assert_eq(pwrite(fd, "x", 1, offsets[i]), 1);
        close(fd);
}

static void same_file(const char *a, const char *b, blkcnt_t max_blocks)
{
        char cmd[512];
        struct stat sa, sb;
        cr_assert_eq(stat(a, &sa), 0);
        cr_assert_eq(stat(b, &sb), 0);
        cr_assert_eq(sa.st_size, sb.st_size, "%s", b);
        cr_assert_leq(sb.st_blocks, max_blocks, "%s: %lld blocks", b, (long long)sb.st_blocks);
        snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
        cr_assert_eq(system(cmd), 0, "%s differs", b);
}

Test(snaparchive, sparse_files_keep_their_holes)
{
        const off_t G = (off_t)1 << 30, mid[] = {G / 2}, ends[] = {0, G - 1};
        char path[256], a[256], b[256];
        struct snaparchive_stats st;
        struct sbx_error err = {0};
        int src = target_dir("src"), out, back;
        static const char *const names[] = {"middle", "ends", "holes", "zeros"};

        sparse_file(src, "middle", G, mid, 1);
        sparse_file(src, "ends", G, ends, 2);
        sparse_file(src, "holes", G, NULL, 0);
        {
                /* written zeros: stored as data, left as a hole when unpacked */
                static char zeros[1 << 20];
                int fd = openat(src, "zeros", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                cr_assert_eq(write(fd, zeros, sizeof(zeros)), (ssize_t)sizeof(zeros));
                close(fd);
        }
        snprintf(path, sizeof(path), "%s/out.tar.zst", root);
        out = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        /* 1 MiB of data allowed: the holes' 3 GiB are not counted */
        cr_assert_eq(snaparchive_pack(src, out, 2 << 20, 2 << 20, &st, &err), 0, "%s", err.msg);
        cr_assert_lt(st.bytes, (2 << 20), "%llu", (unsigned long long)st.bytes);
        cr_assert_lt(lseek(out, 0, SEEK_END), 1 << 20);
        cr_assert_eq(lseek(out, 0, SEEK_SET), 0);
        back = target_dir("back");
        cr_assert_eq(snaparchive_unpack(out, back, UID, 2 << 20, NULL, &err), 0, "%s", err.msg);
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                snprintf(a, sizeof(a), "%s/src/%s", root, names[i]);
                snprintf(b, sizeof(b), "%s/back/%s", root, names[i]);
                same_file(a, b, 256); /* 128 KiB at most, of 1 GiB */
        }
        close(src);
        close(out);
        close(back);
}

/* n levels of directories under dirfd, a file in the deepest. */
static void deep_tree(int dirfd, int n)
{
        int fd = dup(dirfd);
        for (int i = 0; i < n; i++) {
                int sub;
                cr_assert_eq(mkdirat(fd, "d", 0755), 0);
                sub = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                close(fd);
                fd = sub;
        }
        cr_assert_eq(close(openat(fd, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644)), 0);
        close(fd);
}

Test(snaparchive, depth_256_round_trips_and_257_is_too_large)
{
        char path[256];
        struct sbx_error err = {0};
        int src = target_dir("src"), deeper = target_dir("deeper"), out, back;

        deep_tree(src, 256);
        snprintf(path, sizeof(path), "%s/out.tar.zst", root);
        out = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        cr_assert_eq(snaparchive_pack(src, out, 1 << 20, 1 << 20, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(lseek(out, 0, SEEK_SET), 0);
        back = target_dir("back");
        cr_assert_eq(snaparchive_unpack(out, back, UID, 1 << 20, NULL, &err), 0, "%s", err.msg);
        cr_assert(exists("back/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d"));
        close(out);
        deep_tree(deeper, 257);
        out = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        err = (struct sbx_error){0};
        cr_assert_eq(snaparchive_pack(deeper, out, 1 << 20, 1 << 20, NULL, &err), -EFBIG);
        cr_assert_not_null(strstr(err.msg, "256"), "%s", err.msg);
        close(out);
        close(src);
        close(deeper);
        close(back);
}

Test(snaparchive, names)
{
        cr_assert(snapshot_name_valid("before-refactor_2.v1"));
        cr_assert(!snapshot_name_valid(""));
        cr_assert(!snapshot_name_valid("../x"));
        cr_assert(!snapshot_name_valid(".hidden"));
        cr_assert(!snapshot_name_valid("-opt"));
        cr_assert(!snapshot_name_valid("snap-0123"));
        cr_assert(!snapshot_name_valid("a/b"));
        cr_assert(!snapshot_name_valid("x y"));
        cr_assert(!snapshot_name_valid("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")); /* 65 */
}
