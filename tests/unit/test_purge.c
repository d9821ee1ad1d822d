/* Unit tests of the workspace purge (container_workspace_purge): trees of
 * any depth go, no symlink is followed, and a failure is reported, never
 * passed over (the privacy ratchet drops a session's marks only after a
 * purge that succeeded). Needs root (a root-owned data_dir, chattr +i).
 * And the base file copy both snapshots and the microVM's memory use
 * (sbx_copy_sparse): data where the source has data, holes where it has
 * holes, by copy_file_range or by pread/pwrite into a memfd. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/config.h"
#include "sandboxd/container.h"

static char root[64];
static char immutable[SBX_PATH_MAX + 64];

static void set_immutable(const char *path, bool on)
{
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), flags = 0;
        cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
        cr_assert_eq(ioctl(fd, FS_IOC_GETFLAGS, &flags), 0, "%s", strerror(errno));
        flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
        cr_assert_eq(ioctl(fd, FS_IOC_SETFLAGS, &flags), 0, "chattr: %s", strerror(errno));
        close(fd);
}

static void teardown(void)
{
        char cmd[128];
        if (immutable[0])
                set_immutable(immutable, false);
        if (root[0]) {
                snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
                (void)system(cmd);
        }
}

static void setup(void)
{
        strcpy(root, "/tmp/sbx-purge-XXXXXX");
        cr_assert_not_null(mkdtemp(root));
        immutable[0] = '\0';
}

TestSuite(purge, .init = setup, .fini = teardown);

static void make_config(struct sbx_config *cfg, char ws[SBX_PATH_MAX])
{
        struct sbx_error err = {0};
        config_defaults(cfg);
        snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s/data", root);
        cr_assert_eq(container_workspace_ensure(cfg, "alice", "s1", (uid_t)cfg->sandbox_uid_lo, ws, &err), 0, "%s",
                     err.msg);
}

static bool exists(const char *path)
{
        struct stat st;
        return lstat(path, &st) == 0;
}

Test(purge, deep_tree_with_symlinks_out_goes_and_nothing_outside_is_touched)
{
        struct sbx_config cfg;
        struct sbx_error err = {0};
        char ws[SBX_PATH_MAX], canary[SBX_PATH_MAX + 32], canary_file[SBX_PATH_MAX + 64];
        int fd, sub;

        make_config(&cfg, ws);
        snprintf(canary, sizeof(canary), "%s/canary", root);
        cr_assert_eq(mkdir(canary, 0755), 0);
        snprintf(canary_file, sizeof(canary_file), "%s/keep", canary);
        cr_assert_eq(close(open(canary_file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)), 0);

        /* 2100 levels: past PATH_MAX as a path (4200 bytes), and past any recursion
         * limit; symlinks at several depths point out of the workspace */
        fd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        cr_assert_geq(fd, 0);
        for (int i = 0; i < 2100; i++) {
                if (i % 500 == 0) {
                        cr_assert_eq(symlinkat(canary, fd, "out"), 0);
                        cr_assert_eq(symlinkat(canary_file, fd, "out_file"), 0);
                        close(openat(fd, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0000));
                }
                cr_assert_eq(mkdirat(fd, "d", i % 700 == 3 ? 0000 : 0755), 0, "level %d: %s", i, strerror(errno));
                sub = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                cr_assert_geq(sub, 0);
                close(fd);
                fd = sub;
        }
        close(openat(fd, "secret", O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
        close(fd);

        cr_assert_eq(container_workspace_purge(&cfg, "alice", "s1", &err), 0, "%s", err.msg);
        cr_assert_not(exists(ws), "the workspace is still there");
        cr_assert(exists(canary_file), "a symlink was followed out of the workspace");
        /* purging what is gone already is fine */
        cr_assert_eq(container_workspace_purge(&cfg, "alice", "s1", &err), 0, "%s", err.msg);
}

Test(purge, a_file_that_cannot_go_fails_the_purge)
{
        struct sbx_config cfg;
        struct sbx_error err = {0};
        char ws[SBX_PATH_MAX], dir[SBX_PATH_MAX + 16];

        make_config(&cfg, ws);
        snprintf(dir, sizeof(dir), "%s/a", ws);
        cr_assert_eq(mkdir(dir, 0755), 0);
        snprintf(immutable, sizeof(immutable), "%s/a/pinned", ws);
        cr_assert_eq(close(open(immutable, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)), 0);
        set_immutable(immutable, true);

        cr_assert_lt(container_workspace_purge(&cfg, "alice", "s1", &err), 0, "the purge claimed success");
        cr_assert_not_null(strstr(err.msg, "cannot delete workspace"), "%s", err.msg);
        cr_assert(exists(immutable));

        set_immutable(immutable, false);
        immutable[0] = '\0';
        cr_assert_eq(container_workspace_purge(&cfg, "alice", "s1", &err), 0, "%s", err.msg);
        cr_assert_not(exists(ws));
}

/* A sparse source: 1 MiB of data at 0, 4 KiB at 5 MiB, a hole to 12 MiB. */
static int sparse_source(const char *path)
{
        static char a[1 << 20], b[4096];
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

        cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
        for (size_t i = 0; i < sizeof(a); i++)
                a[i] = (char)(i * 7 + 1);
        memset(b, 'x', sizeof(b));
        cr_assert_eq(pwrite(fd, a, sizeof(a), 0), (ssize_t)sizeof(a));
        cr_assert_eq(pwrite(fd, b, sizeof(b), 5 << 20), (ssize_t)sizeof(b));
        cr_assert_eq(ftruncate(fd, 12 << 20), 0);
        return fd;
}

static void expect_same(int src, int dst)
{
        struct stat s, d;
        char *x = malloc(12 << 20), *y = malloc(12 << 20);

        cr_assert(x && y);
        cr_assert_eq(fstat(src, &s), 0);
        cr_assert_eq(fstat(dst, &d), 0);
        cr_assert_eq(d.st_size, s.st_size, "size %lld, want %lld", (long long)d.st_size, (long long)s.st_size);
        cr_assert_eq(pread(src, x, 12 << 20, 0), 12 << 20);
        cr_assert_eq(pread(dst, y, 12 << 20, 0), 12 << 20);
        cr_assert_eq(memcmp(x, y, 12 << 20), 0, "the copy differs");
        /* the 7 MiB hole at the end stayed a hole (with room for the file system's rounding) */
        cr_assert_lt((long long)d.st_blocks * 512, 4LL << 20, "%lld bytes allocated", (long long)d.st_blocks * 512);
        free(x);
        free(y);
}

Test(purge, copy_sparse_copies_the_data_and_keeps_the_holes)
{
        char src_path[SBX_PATH_MAX], dst_path[SBX_PATH_MAX];
        int src, dst, mfd;

        snprintf(src_path, sizeof(src_path), "%s/src", root);
        snprintf(dst_path, sizeof(dst_path), "%s/dst", root);
        src = sparse_source(src_path);

        /* a file beside it: copy_file_range; over a longer file: truncated to the source's size */
        dst = open(dst_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        cr_assert_geq(dst, 0);
        cr_assert_eq(ftruncate(dst, 20 << 20), 0);
        cr_assert_eq(sbx_copy_sparse(src, dst), 0);
        expect_same(src, dst);

        /* a memfd, where copy_file_range from another file system cannot: pread/pwrite */
        mfd = memfd_create("sbx-test-copy", MFD_CLOEXEC);
        cr_assert_geq(mfd, 0, "%s", strerror(errno));
        cr_assert_eq(sbx_copy_sparse(src, mfd), 0);
        expect_same(src, mfd);

        /* and back out of the memfd */
        cr_assert_eq(ftruncate(dst, 0), 0);
        cr_assert_eq(sbx_copy_sparse(mfd, dst), 0);
        expect_same(src, dst);

        /* an empty source gives an empty file */
        cr_assert_eq(ftruncate(src, 0), 0);
        cr_assert_eq(sbx_copy_sparse(src, dst), 0);
        struct stat st;
        cr_assert_eq(fstat(dst, &st), 0);
        cr_assert_eq(st.st_size, 0);
        close(mfd);
        close(dst);
        close(src);
}
