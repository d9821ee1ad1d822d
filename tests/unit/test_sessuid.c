/* The session uid module without Docker: the range's config checks, the
 * host-account check (passwd, group, subordinate ids), assignment round the
 * range through the store, and handing a tree over (run as root, like the
 * rest of the suite). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/config.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"
#include "testenv.h"

TestSuite(sessuid);

Test(sessuid, range_is_validated)
{
        struct sbx_config cfg;
        struct sbx_error err = {0};

        config_defaults(&cfg);
        cr_assert_eq(cfg.sandbox_uid_lo, 200000);
        cr_assert_eq(cfg.sandbox_uid_hi, 299999);
        cr_assert_eq(config_set(&cfg, "sandbox_uid_range", "0-100", &err), -EINVAL, "root's uid accepted");
        cr_assert_eq(config_set(&cfg, "sandbox_uid_range", "300000-200000", &err), -EINVAL);
        cr_assert_eq(config_set(&cfg, "sandbox_uid_range", "200000-4294967295", &err), -EINVAL);
        cr_assert_eq(config_set(&cfg, "sandbox_uid_range", "1000000-1000009", &err), 0, "%s", err.msg);
        cr_assert_eq(cfg.sandbox_uid_lo, 1000000);
        cr_assert_eq(cfg.sandbox_uid_hi, 1000009);
}

Test(sessuid, host_accounts_and_subordinate_ids_are_checked)
{
        struct sbx_config cfg;
        struct sbx_error err = {0};
        char *dir = testenv_tmpdir(), file[512];
        FILE *f;

        config_defaults(&cfg);
        cfg.sandbox_uid_lo = 65000;
        cfg.sandbox_uid_hi = 66000;
        cr_assert_eq(sessuid_check_host(&cfg, &err), -EEXIST);
        cr_assert_not_null(strstr(err.msg, "65534"), "%s", err.msg);

        snprintf(file, sizeof(file), "%s/subuid", dir);
        f = fopen(file, "w");
        cr_assert_not_null(f);
        fputs("# comment\nalice:100000:65536\nbob:165536:65536\n", f);
        fclose(f);
        cr_assert_eq(sessuid_check_subid_file(file, 231072, 299999, &err), 0, "%s", err.msg);
        cr_assert_eq(sessuid_check_subid_file(file, 200000, 299999, &err), -EEXIST);
        cr_assert_not_null(strstr(err.msg, "bob"), "%s", err.msg);
        cr_assert_eq(sessuid_check_subid_file(file, 1000, 100000, &err), -EEXIST);
        cr_assert_not_null(strstr(err.msg, "alice"), "%s", err.msg);
        snprintf(file, sizeof(file), "%s/none", dir);
        cr_assert_eq(sessuid_check_subid_file(file, 1000, 2000, &err), 0);
        free(dir);
}

Test(sessuid, assigned_round_the_range_kept_and_exhausted)
{
        char *dir = testenv_tmpdir(), db[512];
        struct store *st;
        struct sbx_error err = {0};
        int64_t a, b, c, again, x;

        snprintf(db, sizeof(db), "%s/s.db", dir);
        cr_assert_eq(store_open(db, &st, &err), 0, "%s", err.msg);
        cr_assert_eq(store_uid_get(st, "u", "a", &x), -ENOENT);
        cr_assert_eq(store_uid_assign(st, "u", "a", 5000, 5002, 1, &a), 0);
        cr_assert_eq(store_uid_assign(st, "u", "b", 5000, 5002, 1, &b), 0);
        cr_assert_eq(a, 5000);
        cr_assert_eq(b, 5001);
        cr_assert_eq(store_uid_assign(st, "u", "a", 5000, 5002, 1, &again), 0);
        cr_assert_eq(again, a, "a second assignment gave another uid");
        /* a released uid comes back last: the range goes round */
        cr_assert_eq(store_uid_release(st, "u", "a"), 0);
        cr_assert_eq(store_uid_assign(st, "u", "c", 5000, 5002, 1, &c), 0);
        cr_assert_eq(c, 5002);
        cr_assert_eq(store_uid_assign(st, "u", "d", 5000, 5002, 1, &x), 0);
        cr_assert_eq(x, 5000, "wrapped to %lld", (long long)x);
        cr_assert_eq(store_uid_assign(st, "u", "e", 5000, 5002, 1, &x), -ENOSPC);
        /* gc keeps the uid of a live session */
        cr_assert_eq(store_gc_uid_release(st, "u", "b", 4999), -ESTALE);
        cr_assert_eq(store_gc_uid_release(st, "u", "b", b), 0);
        store_close(st);
        free(dir);
}

Test(sessuid, a_tree_is_handed_over_without_following_anything)
{
        char *dir = testenv_tmpdir(), p[512], target[512];
        struct sessuid_own_stats stats;
        struct stat st;
        int fd;

        if (geteuid() != 0)
                cr_skip_test("needs root");
        snprintf(p, sizeof(p), "%s/ws", dir);
        cr_assert_eq(mkdir(p, 0700), 0);
        cr_assert_eq(chown(p, 1000, 1000), 0);
        snprintf(p, sizeof(p), "%s/ws/d", dir);
        cr_assert_eq(mkdir(p, 0700), 0);
        cr_assert_eq(chown(p, 1000, 0), 0); /* gid root: kept */
        snprintf(target, sizeof(target), "%s/target", dir);
        fd = open(target, O_WRONLY | O_CREAT, 0600);
        cr_assert_geq(fd, 0);
        close(fd);
        cr_assert_eq(chown(target, 1000, 1000), 0);
        snprintf(p, sizeof(p), "%s/ws/d/link", dir);
        cr_assert_eq(symlink(target, p), 0);
        cr_assert_eq(lchown(p, 1000, 1000), 0);

        snprintf(p, sizeof(p), "%s/ws", dir);
        fd = open(p, O_RDONLY | O_DIRECTORY);
        cr_assert_geq(fd, 0);
        cr_assert_eq(sessuid_own_tree(fd, 200123, &stats), 0);
        close(fd);
        cr_assert_eq(stats.visited, 2);
        cr_assert_eq(stats.changed, 2);
        cr_assert_not(stats.cut);
        cr_assert_eq(stat(p, &st), 0);
        cr_assert(st.st_uid == 200123 && st.st_gid == 200123);
        snprintf(p, sizeof(p), "%s/ws/d", dir);
        cr_assert_eq(lstat(p, &st), 0);
        cr_assert(st.st_uid == 200123 && st.st_gid == 0, "%u:%u", st.st_uid, st.st_gid);
        snprintf(p, sizeof(p), "%s/ws/d/link", dir);
        cr_assert_eq(lstat(p, &st), 0);
        cr_assert(st.st_uid == 200123 && st.st_gid == 200123);
        cr_assert_eq(stat(target, &st), 0);
        cr_assert(st.st_uid == 1000 && st.st_gid == 1000, "the symlink was followed");
        free(dir);
}
