/* Unit tests of a session's runner directory (hub_dir.c) as a node
 * agent opens it: one kubelet made first for a Pod's subPath (root's,
 * empty, its own mode) is taken and made 0755; a link in its place, or a
 * directory of another owner, is refused. Needs root (chown); skipped
 * without. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/hub_dir.h"
#include "sandboxd/runner_proto.h"

static char root[64];

static void cleanup(void)
{
        char cmd[128];
        if (!root[0])
                return;
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        (void)system(cmd);
}

static void setup(void)
{
        snprintf(root, sizeof(root), "/tmp/sbx-runnerdir-XXXXXX");
        cr_assert_not_null(mkdtemp(root));
}

TestSuite(runner_dir, .init = setup, .fini = cleanup);

static void entry(const char *session, char path[SBX_PATH_MAX])
{
        char hash[33];
        cr_assert_eq(hub_dir_key("u1", session, hash), 0);
        snprintf(path, SBX_PATH_MAX, "%s/%s", root, hash);
}

static int listen_on(const char *session)
{
        char path[SBX_PATH_MAX];
        struct sbx_error err = {0};
        int dfd = -1, lfd = -1;
        int r = hub_dir_listen(root, "u1", session, true, &dfd, &lfd, path, &err);
        if (r == 0) {
                close(dfd);
                close(lfd);
        }
        return r;
}

Test(runner_dir, a_directory_kubelet_made_first_is_taken_and_made_0755)
{
        char path[SBX_PATH_MAX], sock[SBX_PATH_MAX + 16];
        struct stat st;

        if (geteuid() != 0)
                cr_skip_test("needs root");
        entry("s1", path);
        cr_assert_eq(mkdir(path, 0750), 0); /* as kubelet makes a subPath */
        cr_assert_eq(listen_on("s1"), 0);
        cr_assert_eq(lstat(path, &st), 0);
        cr_assert_eq(st.st_mode & 07777, 0755, "mode %o", st.st_mode & 07777);
        snprintf(sock, sizeof(sock), "%s/" RP_SOCKET_NAME, path);
        cr_assert_eq(lstat(sock, &st), 0);
        cr_assert(S_ISSOCK(st.st_mode));
}

Test(runner_dir, a_link_or_another_owners_directory_is_refused)
{
        char path[SBX_PATH_MAX], elsewhere[SBX_PATH_MAX + 8];
        struct stat st;

        if (geteuid() != 0)
                cr_skip_test("needs root");
        snprintf(elsewhere, sizeof(elsewhere), "%s/else", root);
        cr_assert_eq(mkdir(elsewhere, 0755), 0);
        entry("s2", path);
        cr_assert_eq(symlink(elsewhere, path), 0);
        cr_assert_lt(listen_on("s2"), 0, "a link was followed");
        cr_assert_eq(lstat(elsewhere, &st), 0);
        snprintf(elsewhere + strlen(elsewhere), 8, "/%s", RP_SOCKET_NAME);
        cr_assert_neq(access(elsewhere, F_OK), 0, "a socket was made through the link");

        entry("s3", path);
        cr_assert_eq(mkdir(path, 0755), 0);
        cr_assert_eq(chown(path, 65534, 65534), 0);
        cr_assert_eq(listen_on("s3"), -EPERM, "another owner's directory was taken");
        cr_assert_eq(lstat(path, &st), 0);
        cr_assert_eq(st.st_uid, 65534, "its owner was changed");
}
