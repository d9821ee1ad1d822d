/* Unit tests of the workspace purge (container_workspace_purge): trees of
 * any depth go, no symlink is followed, and a failure is reported, never
 * passed over (the privacy ratchet drops a session's marks only after a
 * purge that succeeded). Needs root (a root-owned data_dir, chattr +i). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
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
