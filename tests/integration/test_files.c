/* Integration tests of workspace file I/O (files.h) against the real
 * dockerd: round trips, offsets, caps, path refusals and symlink escapes. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "sandboxd/files.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/hub.h"
#include "sandboxd/hub_ops.h"
#include "sandboxd/session.h"
#include "testenv.h"

TestSuite(files, .timeout = 600);

static struct sbx_config cfg;
static struct daemon *d;

static void config(void)
{
        fixture_config(&cfg);
        /* a port range of this suite's own: suites run side by side */
        cfg.port_range_lo = 28500;
        cfg.port_range_hi = 28999;
}

static void open_daemon(void)
{
        config();
        d = fixture_open(&cfg, false);
}

static void close_daemon(void)
{
        daemon_close(d);
        d = NULL;
}

static void write_ok(const char *session, const char *path, const void *data, size_t len)
{
        struct sbx_error err = {0};
        char norm[FILES_PATH_MAX];
        cr_assert_eq(files_write(&d->files, "u1", session, path, data, len, norm, &err), 0, "write %s: %s", path,
                     err.msg);
}

static struct files_read_result read_ok(const char *session, const char *path, uint64_t off, int64_t len)
{
        struct files_read_result r;
        struct sbx_error err = {0};
        cr_assert_eq(files_read(&d->files, "u1", session, path, off, len, &r, &err), 0, "read %s: %s", path, err.msg);
        return r;
}

static void container_of(const char *session, char id[65])
{
        struct session_info info;
        cr_assert_eq(session_get_info(d->sessions, "u1", session, &info), 0);
        memcpy(id, info.container_id, 65);
        session_info_done(&info);
}

static uint64_t hub_file_ops(void)
{
        uint64_t files, services;
        hub_ops_counts(d->runner, &files, &services);
        return files;
}

Test(files, normalize_paths)
{
        char out[FILES_PATH_MAX];
        struct {
                const char *in, *want;
        } ok[] = {
                {"a.txt", "/workspace/a.txt"}, {"./a//b/./c", "/workspace/a/b/c"},
                {"a/../b", "/workspace/b"},    {"/workspace", "/workspace"},
                {"/workspace/", "/workspace"}, {"/workspace/x/../y", "/workspace/y"},
                {".", "/workspace"},
        };
        const char *escapes[] = {"../x",
                                 "/etc/passwd",
                                 "/workspace/../etc",
                                 "a/../../x",
                                 "/workspacex",
                                 "/",
                                 "..",
                                 "/workspace/../workspace2/x",
                                 "/../workspace/../../etc"};

        for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
                cr_assert_eq(files_normalize(ok[i].in, out, NULL), 0, "%s refused", ok[i].in);
                cr_assert_str_eq(out, ok[i].want, "%s", ok[i].in);
        }
        for (size_t i = 0; i < ELEMENTSOF(escapes); i++)
                cr_assert_eq(files_normalize(escapes[i], out, NULL), -EPERM, "%s accepted", escapes[i]);
        cr_assert_eq(files_normalize("", out, NULL), -EINVAL);
        cr_assert_eq(files_normalize("a\nb", out, NULL), -EINVAL);
}

Test(files, text_binary_and_offsets)
{
        struct files_read_result r;
        unsigned char bin[256 * 3];
        char norm[FILES_PATH_MAX];

        open_daemon();
        write_ok("s1", "hello.txt", "hello, world\n", 13);
        r = read_ok("s1", "/workspace/hello.txt", 0, -1);
        cr_assert_eq(r.len, 13);
        cr_assert_eq(memcmp(r.data, "hello, world\n", 13), 0);
        cr_assert_eq(r.size, 13);
        cr_assert(r.eof);
        cr_assert_str_eq(r.path, "/workspace/hello.txt");
        files_read_result_done(&r);

        /* every byte value, NULs and newlines included */
        for (size_t i = 0; i < sizeof(bin); i++)
                bin[i] = (unsigned char)(i * 7);
        write_ok("s1", "deep/er/bin.dat", bin, sizeof(bin));
        r = read_ok("s1", "deep/er/bin.dat", 0, -1);
        cr_assert_eq(r.len, sizeof(bin));
        cr_assert_eq(memcmp(r.data, bin, sizeof(bin)), 0);
        files_read_result_done(&r);

        write_ok("s1", "digits", "0123456789", 10);
        r = read_ok("s1", "digits", 3, 4);
        cr_assert_eq(r.len, 4);
        cr_assert_eq(memcmp(r.data, "3456", 4), 0);
        cr_assert_not(r.eof);
        cr_assert_eq(r.size, 10);
        files_read_result_done(&r);
        r = read_ok("s1", "digits", 8, 100);
        cr_assert_eq(r.len, 2);
        cr_assert_eq(memcmp(r.data, "89", 2), 0);
        cr_assert(r.eof);
        files_read_result_done(&r);
        r = read_ok("s1", "digits", 50, 10);
        cr_assert_eq(r.len, 0);
        cr_assert(r.eof);
        files_read_result_done(&r);
        r = read_ok("s1", "digits", 0, 0);
        cr_assert_eq(r.len, 0);
        cr_assert_eq(r.size, 10);
        files_read_result_done(&r);

        /* replace, and an empty file */
        write_ok("s1", "digits", "x", 1);
        r = read_ok("s1", "digits", 0, -1);
        cr_assert_eq(r.len, 1);
        cr_assert_eq(r.data[0], 'x');
        files_read_result_done(&r);
        write_ok("s1", "empty", "", 0);
        r = read_ok("s1", "empty", 0, -1);
        cr_assert_eq(r.len, 0);
        cr_assert_eq(r.size, 0);
        files_read_result_done(&r);

        /* the file is the sandbox user's, in the workspace on the host too */
        {
                char host[SBX_PATH_MAX + 64];
                struct stat st;
                snprintf(host, sizeof(host), "%s/workspaces/u1/s1/deep/er/bin.dat", cfg.data_dir);
                cr_assert_eq(stat(host, &st), 0, "%s missing on the host", host);
                uid_t uid = 0;
                cr_assert_eq(sessuid_lookup(d->store, "u1", "s1", &uid), 0);
                cr_assert_eq(st.st_uid, uid, "owned by %u, not the session's uid %u", (unsigned)st.st_uid,
                             (unsigned)uid);
                cr_assert_eq(st.st_size, (off_t)sizeof(bin));
        }
        (void)norm;
        close_daemon();
}

Test(files, large_file_is_read_in_chunks)
{
        size_t n = (size_t)(2.5 * 1024 * 1024);
        unsigned char *buf = malloc(n);
        struct files_read_result r;
        uint32_t x = 12345;

        for (size_t i = 0; i < n; i++) {
                x = x * 1103515245u + 12345u;
                buf[i] = (unsigned char)(x >> 16);
        }
        open_daemon();
        write_ok("s1", "big.bin", buf, n);
        r = read_ok("s1", "big.bin", 0, -1);
        cr_assert_eq(r.len, n);
        cr_assert_eq(memcmp(r.data, buf, n), 0);
        cr_assert(r.eof);
        files_read_result_done(&r);
        r = read_ok("s1", "big.bin", 1048000, 100000);
        cr_assert_eq(r.len, 100000);
        cr_assert_eq(memcmp(r.data, buf + 1048000, 100000), 0);
        files_read_result_done(&r);
        cr_assert_eq(hub_file_ops(), 3, "not through the runner"); /* 2.5 MB: several frames each way */
        free(buf);
        close_daemon();
}

Test(files, size_caps)
{
        struct sbx_error err = {0};
        struct files_read_result r;
        char *buf;

        config();
        cfg.max_file_bytes = 64 * 1024;
        d = fixture_open(&cfg, false);
        buf = calloc(1, (size_t)cfg.max_file_bytes + 1);
        memset(buf, 'a', (size_t)cfg.max_file_bytes + 1);
        cr_assert_eq(files_write(&d->files, "u1", "s1", "big", buf, (size_t)cfg.max_file_bytes + 1, NULL, &err),
                     -EFBIG);
        cr_assert_not_null(strstr(err.msg, "limits.file_size"), "%s", err.msg);
        write_ok("s1", "big", buf, (size_t)cfg.max_file_bytes);

        /* a file made bigger inside the container is read at most the cap at a time */
        {
                char cid[65];
                container_of("s1", cid);
                cr_assert_eq(fixture_sh(cid, "head -c 200000 /dev/zero > /workspace/huge", NULL), 0);
        }
        r = read_ok("s1", "huge", 0, -1);
        cr_assert_eq(r.len, (size_t)cfg.max_file_bytes);
        cr_assert_eq(r.size, 200000);
        cr_assert_not(r.eof);
        files_read_result_done(&r);
        r = read_ok("s1", "huge", 190000, -1);
        cr_assert_eq(r.len, 10000);
        cr_assert(r.eof);
        files_read_result_done(&r);
        free(buf);
        close_daemon();
}

Test(files, refusals)
{
        struct sbx_error err = {0};
        struct files_read_result r;
        struct files_entry *list = NULL;
        size_t n = 0;
        bool trunc;
        const char *bad[] = {"../x", "/etc/passwd", "/workspace/../etc", "../../../../etc/shadow"};
        char cid[65];

        open_daemon();
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                cr_assert_eq(files_read(&d->files, "u1", "s1", bad[i], 0, -1, &r, &err), -EPERM, "read %s", bad[i]);
                cr_assert_eq(files_write(&d->files, "u1", "s1", bad[i], "x", 1, NULL, &err), -EPERM, "write %s",
                             bad[i]);
                cr_assert_eq(files_list(&d->files, "u1", "s1", bad[i], NULL, &list, &n, &trunc, &err), -EPERM,
                             "list %s", bad[i]);
        }
        cr_assert_eq(files_read(&d->files, "u1", "s1", "missing.txt", 0, -1, &r, &err), -ENOENT);
        cr_assert_eq(files_read(&d->files, "u1", "s1", "/workspace", 0, -1, &r, &err), -EISDIR);
        cr_assert_eq(files_write(&d->files, "u1", "s1", "/workspace", "x", 1, NULL, &err), -EISDIR);
        write_ok("s1", "dir/file", "x", 1);
        cr_assert_eq(files_read(&d->files, "u1", "s1", "dir", 0, -1, &r, &err), -EISDIR);
        cr_assert_eq(files_write(&d->files, "u1", "s1", "dir", "x", 1, NULL, &err), -EISDIR);
        cr_assert_eq(files_write(&d->files, "u1", "s1", "dir/file/sub", "x", 1, NULL, &err), -ENOTDIR, "%s", err.msg);
        cr_assert_eq(files_list(&d->files, "u1", "s1", "dir/file", NULL, &list, &n, &trunc, &err), -ENOTDIR);
        cr_assert_eq(files_list(&d->files, "u1", "s1", "nothere", NULL, &list, &n, &trunc, &err), -ENOENT);

        /* a FIFO would block a reader: refused, not hung */
        container_of("s1", cid);
        cr_assert_eq(fixture_sh(cid, "mkfifo /workspace/fifo", NULL), 0);
        cr_assert_eq(files_read(&d->files, "u1", "s1", "fifo", 0, -1, &r, &err), -EINVAL, "%s", err.msg);
        /* bad session keys never reach a container */
        cr_assert_eq(files_read(&d->files, "u1", "../s", "x", 0, -1, &r, &err), -EINVAL);
        close_daemon();
}

Test(files, list_entries)
{
        struct files_entry *list = NULL;
        size_t n = 0;
        bool trunc = true;
        char cid[65], path[FILES_PATH_MAX];
        struct sbx_error err = {0};

        open_daemon();
        write_ok("s1", "b.txt", "12345", 5);
        write_ok("s1", "a dir/inner", "x", 1);
        write_ok("s1", ".hidden", "hh", 2);
        write_ok("s1", "-dash", "d", 1);
        container_of("s1", cid);
        cr_assert_eq(fixture_sh(cid,
                                "cd /workspace && ln -s b.txt link && mkfifo pipe && "
                                "touch \"$(printf 'new\\nline')\"",
                                NULL),
                     0);
        cr_assert_eq(files_list(&d->files, "u1", "s1", NULL, path, &list, &n, &trunc, &err), 0, "%s", err.msg);
        cr_assert_str_eq(path, "/workspace");
        cr_assert_not(trunc);
        /* sorted by name: "-dash" ".hidden" "a dir" "b.txt" "link" "new\nline" "pipe" */
        cr_assert_eq(n, 7, "%zu entries", n);
        cr_assert_str_eq(list[0].name, "-dash");
        cr_assert_str_eq(list[1].name, ".hidden");
        cr_assert_eq(list[1].type, FILES_FILE);
        cr_assert_eq(list[1].size, 2);
        cr_assert_str_eq(list[2].name, "a dir");
        cr_assert_eq(list[2].type, FILES_DIR);
        cr_assert_str_eq(list[3].name, "b.txt");
        cr_assert_eq(list[3].type, FILES_FILE);
        cr_assert_eq(list[3].size, 5);
        cr_assert_str_eq(list[4].name, "link");
        cr_assert_eq(list[4].type, FILES_SYMLINK);
        cr_assert_str_eq(list[5].name, "new\nline");
        cr_assert_str_eq(list[6].name, "pipe");
        cr_assert_eq(list[6].type, FILES_OTHER);
        free(list);

        cr_assert_eq(files_list(&d->files, "u1", "s1", "a dir", path, &list, &n, &trunc, &err), 0);
        cr_assert_eq(n, 1);
        cr_assert_str_eq(list[0].name, "inner");
        cr_assert_str_eq(path, "/workspace/a dir");
        free(list);

        /* more than the cap: truncated */
        cr_assert_eq(fixture_sh(cid,
                                "mkdir /workspace/many && cd /workspace/many && i=0; "
                                "while [ $i -lt 1005 ]; do : > f$i; i=$((i+1)); done",
                                NULL),
                     0);
        cr_assert_eq(files_list(&d->files, "u1", "s1", "many", path, &list, &n, &trunc, &err), 0);
        cr_assert_eq(n, FILES_LIST_MAX);
        cr_assert(trunc);
        free(list);
        close_daemon();
}

/* The heart of it: symlinks planted by the tenant never lead the daemon
 * outside the workspace, and a host file is never read or modified. */
Test(files, symlink_escapes)
{
        struct sbx_error err = {0};
        struct files_read_result r;
        struct files_entry *list = NULL;
        size_t n = 0;
        bool trunc;
        char cid[65], secret[SBX_PATH_MAX + 32], script[2 * SBX_PATH_MAX];
        char buf[64] = "";
        struct stat before, after;
        FILE *f;

        open_daemon();
        /* a file only the host has, at an absolute host path */
        snprintf(secret, sizeof(secret), "%s/secret.txt", cfg.data_dir);
        f = fopen(secret, "w");
        cr_assert_not_null(f);
        fputs("HOST-SECRET\n", f);
        fclose(f);
        cr_assert_eq(stat(secret, &before), 0);

        write_ok("s1", "ok.txt", "fine", 4);
        container_of("s1", cid);
        snprintf(script, sizeof(script),
                 "cd /workspace && ln -s /etc evil && ln -s / root && ln -s '%s' hostlink && "
                 "ln -s '%s' hostdir && ln -s /etc/passwd passwd && ln -s ok.txt inside && "
                 "ln -s ../../etc up && ln -s /nonexistent/x dangling && ln -s /tmp/newfile tmpnew && "
                 "mkdir sub && ln -s .. sub/parent",
                 secret, cfg.data_dir);
        cr_assert_eq(fixture_sh(cid, script, NULL), 0);

        const char *reads[] = {"evil/passwd",
                               "root/etc/passwd",
                               "hostlink",
                               "hostdir/secret.txt",
                               "passwd",
                               "up/passwd",
                               "sub/parent/../etc/passwd",
                               "sub/parent/evil/hostname"};
        for (size_t i = 0; i < ELEMENTSOF(reads); i++) {
                int rc = files_read(&d->files, "u1", "s1", reads[i], 0, -1, &r, &err);
                cr_assert(rc == -EPERM || rc == -ENOENT, "read %s gave %d", reads[i], rc);
                if (rc == 0)
                        files_read_result_done(&r);
        }
        const char *writes[] = {"evil/x", "root/tmp/x", "hostlink", "hostdir/secret.txt", "hostdir/new.txt",  "passwd",
                                "up/x",   "dangling",   "tmpnew",   "evil/newdir/x",      "sub/parent/evil/x"};
        for (size_t i = 0; i < ELEMENTSOF(writes); i++) {
                int rc = files_write(&d->files, "u1", "s1", writes[i], "PWNED", 5, NULL, &err);
                cr_assert(rc == -EPERM || rc == -ENOENT, "write %s gave %d (%s)", writes[i], rc, err.msg);
        }
        const char *lists[] = {"evil", "root", "hostdir", "up", "sub/parent/evil"};
        for (size_t i = 0; i < ELEMENTSOF(lists); i++) {
                int rc = files_list(&d->files, "u1", "s1", lists[i], NULL, &list, &n, &trunc, &err);
                cr_assert(rc == -EPERM || rc == -ENOENT, "list %s gave %d", lists[i], rc);
        }

        /* the host file is untouched, and nothing appeared beside it */
        cr_assert_eq(stat(secret, &after), 0);
        cr_assert_eq(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
        cr_assert_eq(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
        cr_assert_eq(after.st_ino, before.st_ino);
        f = fopen(secret, "r");
        cr_assert_not_null(fgets(buf, sizeof(buf), f));
        fclose(f);
        cr_assert_str_eq(buf, "HOST-SECRET\n");
        {
                char p[SBX_PATH_MAX + 32];
                snprintf(p, sizeof(p), "%s/new.txt", cfg.data_dir);
                cr_assert_neq(access(p, F_OK), 0, "a file was created on the host");
        }
        /* nor in the container outside the workspace */
        cr_assert_neq(fixture_sh(cid, "test -e /tmp/newfile", NULL), 0);

        /* symlinks that stay inside work, and are listed as symlinks */
        r = read_ok("s1", "inside", 0, -1);
        cr_assert_eq(r.len, 4);
        cr_assert_eq(memcmp(r.data, "fine", 4), 0);
        files_read_result_done(&r);
        r = read_ok("s1", "sub/parent/ok.txt", 0, -1);
        cr_assert_eq(r.len, 4);
        files_read_result_done(&r);
        write_ok("s1", "inside", "changed", 7);
        r = read_ok("s1", "ok.txt", 0, -1);
        cr_assert_eq(r.len, 7, "writing through an inside link writes its target");
        files_read_result_done(&r);
        cr_assert_eq(files_list(&d->files, "u1", "s1", "", NULL, &list, &n, &trunc, &err), 0);
        for (size_t i = 0; i < n; i++)
                if (strcmp(list[i].name, "evil") == 0 || strcmp(list[i].name, "hostlink") == 0)
                        cr_assert_eq(list[i].type, FILES_SYMLINK, "%s", list[i].name);
        free(list);
        cr_assert_geq(hub_file_ops(), 25, "these calls did not go through the runner");
        close_daemon();
}

/* Through the runner: symlinks to / and to /proc/self/root, `..` escapes
 * through links, and a path through a symlinked directory that stays inside. */
Test(files, runner_confines_to_the_workspace)
{
        struct sbx_error err = {0};
        struct files_read_result r;
        struct files_entry *list = NULL;
        size_t n = 0;
        bool trunc;
        char cid[65];
        uint64_t before;

        open_daemon();
        write_ok("s1", "real/data.txt", "inside", 6);
        container_of("s1", cid);
        cr_assert(hub_wait(d->runner, "u1", "s1", 20000), "the runner did not connect");
        cr_assert_eq(fixture_sh(cid,
                                "cd /workspace && ln -s / slash && ln -s /proc/self/root procroot && "
                                "ln -s /proc/self/cwd proccwd && ln -s .. up && mkdir -p a/b && "
                                "ln -s ../../.. a/b/top && ln -s real linkdir && ln -s /workspace/real abslink",
                                NULL),
                     0);
        before = hub_file_ops();

        const char *escapes[] = {"slash/etc/passwd", "procroot/etc/passwd", "proccwd/etc/passwd",
                                 "up/etc/passwd",    "a/b/top/etc/passwd",  "slash",
                                 "procroot"};
        for (size_t i = 0; i < ELEMENTSOF(escapes); i++) {
                int rc = files_read(&d->files, "u1", "s1", escapes[i], 0, -1, &r, &err);
                cr_assert_eq(rc, -EPERM, "read %s gave %d (%s)", escapes[i], rc, err.msg);
                rc = files_write(&d->files, "u1", "s1", escapes[i], "x", 1, NULL, &err);
                cr_assert(rc == -EPERM, "write %s gave %d (%s)", escapes[i], rc, err.msg);
                rc = files_list(&d->files, "u1", "s1", escapes[i], NULL, &list, &n, &trunc, &err);
                cr_assert_eq(rc, -EPERM, "list %s gave %d (%s)", escapes[i], rc, err.msg);
        }
        /* writes that would make directories through those links make nothing */
        cr_assert_eq(files_write(&d->files, "u1", "s1", "slash/tmp/sbx-new/x", "x", 1, NULL, &err), -EPERM);
        cr_assert_eq(files_write(&d->files, "u1", "s1", "a/b/top/tmp/x", "x", 1, NULL, &err), -EPERM);
        cr_assert_neq(fixture_sh(cid, "test -e /tmp/sbx-new || test -e /tmp/x", NULL), 0);

        /* through a symlinked directory that stays inside: read, write, list */
        r = read_ok("s1", "linkdir/data.txt", 0, -1);
        cr_assert_eq(r.len, 6);
        cr_assert_eq(memcmp(r.data, "inside", 6), 0);
        files_read_result_done(&r);
        write_ok("s1", "linkdir/new.txt", "via link", 8);
        r = read_ok("s1", "real/new.txt", 0, -1);
        cr_assert_eq(r.len, 8, "the write through the link landed elsewhere");
        files_read_result_done(&r);
        r = read_ok("s1", "abslink/new.txt", 0, -1); /* an absolute link into /workspace */
        cr_assert_eq(r.len, 8);
        files_read_result_done(&r);
        cr_assert_eq(files_list(&d->files, "u1", "s1", "linkdir", NULL, &list, &n, &trunc, &err), 0, "%s", err.msg);
        cr_assert_eq(n, 2);
        cr_assert_str_eq(list[0].name, "data.txt");
        cr_assert_str_eq(list[1].name, "new.txt");
        free(list);
        /* and a link that climbs out and back stays refused, not re-rooted */
        cr_assert_eq(files_read(&d->files, "u1", "s1", "up/workspace/real/data.txt", 0, -1, &r, &err), -EPERM);

        cr_assert_gt(hub_file_ops(), before, "the runner did not serve these calls");
        close_daemon();
}

/* files_mkdir, files_remove and files_move: the same answers on either
 * path, and a link the container planted is never followed. */
static void change_ops(const char *cid)
{
        struct sbx_error err = {0};
        struct files_read_result r;

        cr_assert_eq(fixture_sh(cid, "mkdir -p /tmp/out/d && echo k > /tmp/out/keep && ln -s /tmp/out /workspace/ln",
                                NULL),
                     0);
        cr_assert_eq(files_mkdir(&d->files, "u1", "s1", "m/n/o", &err), 0, "%s", err.msg);
        cr_assert_eq(files_mkdir(&d->files, "u1", "s1", "m/n/o", &err), -EEXIST);
        cr_assert_eq(files_mkdir(&d->files, "u1", "s1", "/workspace", &err), -EEXIST);
        write_ok("s1", "m/n/o/f", "x", 1);
        cr_assert_eq(files_move(&d->files, "u1", "s1", "m", "p/q", &err), 0, "%s", err.msg);
        r = read_ok("s1", "p/q/n/o/f", 0, -1);
        cr_assert_eq(r.len, 1);
        files_read_result_done(&r);
        cr_assert_eq(files_move(&d->files, "u1", "s1", "nope", "z", &err), -ENOENT);
        cr_assert_eq(files_remove(&d->files, "u1", "s1", "p", &err), 0, "%s", err.msg);
        cr_assert_neq(fixture_sh(cid, "test -e /workspace/p", NULL), 0);
        cr_assert_eq(files_remove(&d->files, "u1", "s1", "/workspace", &err), -EINVAL);
        cr_assert_eq(files_move(&d->files, "u1", "s1", "/workspace", "x", &err), -EINVAL);

        const char *through[] = {"ln/keep", "ln/d"};
        for (size_t i = 0; i < ELEMENTSOF(through); i++) {
                int rc = files_remove(&d->files, "u1", "s1", through[i], &err);
                cr_assert_eq(rc, -EPERM, "remove %s gave %d (%s)", through[i], rc, err.msg);
        }
        cr_assert_eq(files_mkdir(&d->files, "u1", "s1", "ln/made", &err), -EPERM, "%s", err.msg);
        cr_assert_eq(files_move(&d->files, "u1", "s1", "ln/keep", "stolen", &err), -EPERM, "%s", err.msg);
        cr_assert_eq(files_move(&d->files, "u1", "s1", "ln", "ln/d/x", &err), -EPERM, "%s", err.msg);
        cr_assert_eq(fixture_sh(cid,
                                "test -e /tmp/out/keep && test -d /tmp/out/d && ! test -e /tmp/out/made && "
                                "! test -e /workspace/stolen",
                                NULL),
                     0, "a change went through the planted link");
        /* the link itself is the container's: removed as a link */
        cr_assert_eq(files_remove(&d->files, "u1", "s1", "ln", &err), 0, "%s", err.msg);
        cr_assert_eq(fixture_sh(cid, "test -e /tmp/out/keep && ! test -L /workspace/ln", NULL), 0);
}

Test(files, make_remove_move_through_the_runner)
{
        char cid[65];
        uint64_t before;

        open_daemon();
        write_ok("s1", "seed", "x", 1);
        container_of("s1", cid);
        cr_assert(hub_wait(d->runner, "u1", "s1", 20000), "the runner did not connect");
        before = hub_file_ops();
        change_ops(cid);
        cr_assert_gt(hub_file_ops(), before, "the runner did not serve these calls");
        close_daemon();
}

/* Without a runner the same calls go through docker exec, with the same answers. */
Test(files, docker_exec_fallback)
{
        struct sbx_error err = {0};
        struct files_read_result r;
        struct files_entry *list = NULL;
        size_t n = 0;
        bool trunc;
        char cid[65];

        config();
        snprintf(cfg.runner_binary, sizeof(cfg.runner_binary), "/nonexistent/sandboxd-runner");
        d = fixture_open(&cfg, false);
        write_ok("s1", "dir/a.txt", "fallback", 8);
        r = read_ok("s1", "dir/a.txt", 2, -1);
        cr_assert_eq(r.len, 6);
        cr_assert_eq(memcmp(r.data, "llback", 6), 0);
        files_read_result_done(&r);
        cr_assert_eq(files_list(&d->files, "u1", "s1", "dir", NULL, &list, &n, &trunc, &err), 0, "%s", err.msg);
        cr_assert_eq(n, 1);
        free(list);
        container_of("s1", cid);
        cr_assert_eq(fixture_sh(cid, "ln -s / /workspace/slash", NULL), 0);
        cr_assert_eq(files_read(&d->files, "u1", "s1", "slash/etc/passwd", 0, -1, &r, &err), -EPERM);
        change_ops(cid);
        cr_assert_eq(hub_file_ops(), 0, "a runner served calls although none was mounted");
        close_daemon();
}
