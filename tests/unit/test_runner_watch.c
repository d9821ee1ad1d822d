/* Unit tests of the runner's directory watcher (runner/runner_watch.c) on a
 * temporary directory: E2B's kinds and relative names, recursion into
 * directories that exist and that are made later, a directory moved away
 * unwatched, a symlink to a directory outside never followed, and the
 * queue's cap saying it overflowed. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner_watch.h"

static char root[64], outside[64];
static int rootfd = -1;

static void setup(void)
{
        snprintf(root, sizeof(root), "/tmp/rwatch-XXXXXX");
        snprintf(outside, sizeof(outside), "/tmp/rwatch-out-XXXXXX");
        cr_assert_not_null(mkdtemp(root));
        cr_assert_not_null(mkdtemp(outside));
        rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        cr_assert_geq(rootfd, 0);
}

static void teardown(void)
{
        char cmd[200];

        if (rootfd >= 0)
                close(rootfd);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", root, outside);
        (void)!system(cmd);
}

static void put(const char *rel, const char *text)
{
        char p[256];
        FILE *f;

        snprintf(p, sizeof(p), "%s/%s", root, rel);
        f = fopen(p, "w");
        cr_assert_not_null(f, "%s", p);
        fputs(text, f);
        fclose(f);
}

static void mkd(const char *rel)
{
        char p[256];
        snprintf(p, sizeof(p), "%s/%s", root, rel);
        cr_assert_eq(mkdir(p, 0755), 0, "%s", p);
}

/* Read what is there (the kernel has queued every event of a finished
 * syscall) and take it. */
static size_t drain(struct rwatch *w, struct rwatch_event *ev, size_t max)
{
        struct pollfd p = {.fd = rwatch_fd(w), .events = POLLIN};

        (void)poll(&p, 1, 1000);
        cr_assert_eq(rwatch_read(w), 0);
        return rwatch_take(w, ev, max);
}

static bool has(const struct rwatch_event *ev, size_t n, enum rwatch_kind kind, const char *name)
{
        for (size_t i = 0; i < n; i++)
                if (ev[i].kind == kind && strcmp(ev[i].name, name) == 0)
                        return true;
        return false;
}

static struct rwatch_event ev[64];

Test(runner_watch, kinds_and_names, .init = setup, .fini = teardown)
{
        struct rwatch *w;
        char a[256], b[256];
        size_t n;

        cr_assert_eq(rwatch_open(rootfd, false, &w), 0);
        put("f.txt", "x");
        snprintf(a, sizeof(a), "%s/f.txt", root);
        snprintf(b, sizeof(b), "%s/g.txt", root);
        cr_assert_eq(chmod(a, 0600), 0);
        cr_assert_eq(rename(a, b), 0);
        cr_assert_eq(unlink(b), 0);
        n = drain(w, ev, 64);
        cr_assert(has(ev, n, RWATCH_CREATE, "f.txt"));
        cr_assert(has(ev, n, RWATCH_WRITE, "f.txt"));
        cr_assert(has(ev, n, RWATCH_CHMOD, "f.txt"));
        cr_assert(has(ev, n, RWATCH_RENAME, "f.txt"));
        cr_assert(has(ev, n, RWATCH_CREATE, "g.txt"));
        cr_assert(has(ev, n, RWATCH_REMOVE, "g.txt"));
        cr_assert(!rwatch_overflowed(w));
        rwatch_close(w);
}

Test(runner_watch, not_recursive_sees_only_its_children, .init = setup, .fini = teardown)
{
        struct rwatch *w;
        size_t n;

        mkd("sub");
        cr_assert_eq(rwatch_open(rootfd, false, &w), 0);
        cr_assert_eq(rwatch_dirs(w), 1);
        put("sub/inner.txt", "x");
        put("top.txt", "x");
        n = drain(w, ev, 64);
        cr_assert(has(ev, n, RWATCH_CREATE, "top.txt"));
        cr_assert(!has(ev, n, RWATCH_CREATE, "sub/inner.txt"));
        rwatch_close(w);
}

Test(runner_watch, recursive_existing_and_new_directories, .init = setup, .fini = teardown)
{
        struct rwatch *w;
        size_t n;

        mkd("a");
        mkd("a/b");
        cr_assert_eq(rwatch_open(rootfd, true, &w), 0);
        cr_assert_eq(rwatch_dirs(w), 3);
        put("a/b/deep.txt", "x");
        n = drain(w, ev, 64);
        cr_assert(has(ev, n, RWATCH_CREATE, "a/b/deep.txt"));
        /* made after the watch began: watched from its creation on */
        mkd("new");
        n = drain(w, ev, 64);
        cr_assert(has(ev, n, RWATCH_CREATE, "new"));
        cr_assert_eq(rwatch_dirs(w), 4);
        put("new/later.txt", "x");
        n = drain(w, ev, 64);
        cr_assert(has(ev, n, RWATCH_CREATE, "new/later.txt"), "%zu events", n);
        rwatch_close(w);
}

Test(runner_watch, moved_directory_is_watched_at_its_new_path, .init = setup, .fini = teardown)
{
        struct rwatch *w;
        char a[256], b[256];
        size_t n;

        mkd("old");
        cr_assert_eq(rwatch_open(rootfd, true, &w), 0);
        snprintf(a, sizeof(a), "%s/old", root);
        snprintf(b, sizeof(b), "%s/moved", root);
        cr_assert_eq(rename(a, b), 0);
        n = drain(w, ev, 64);
        cr_assert(has(ev, n, RWATCH_RENAME, "old"));
        cr_assert(has(ev, n, RWATCH_CREATE, "moved"));
        put("moved/x.txt", "x");
        n = drain(w, ev, 64);
        cr_assert(has(ev, n, RWATCH_CREATE, "moved/x.txt"));
        cr_assert(!has(ev, n, RWATCH_CREATE, "old/x.txt"));
        rwatch_close(w);
}

Test(runner_watch, symlink_to_outside_is_not_followed, .init = setup, .fini = teardown)
{
        struct rwatch *w;
        char link[256], target[256];
        FILE *f;
        size_t n;

        snprintf(link, sizeof(link), "%s/out", root);
        cr_assert_eq(symlink(outside, link), 0);
        cr_assert_eq(rwatch_open(rootfd, true, &w), 0);
        cr_assert_eq(rwatch_dirs(w), 1, "the link's target is not watched");
        snprintf(target, sizeof(target), "%s/secret.txt", outside);
        f = fopen(target, "w");
        cr_assert_not_null(f);
        fclose(f);
        n = drain(w, ev, 64);
        cr_assert_eq(n, 0, "an event from outside: %s", n ? ev[0].name : "");
        rwatch_close(w);
}

Test(runner_watch, queue_cap_overflows, .init = setup, .fini = teardown)
{
        struct rwatch *w;
        char name[32];
        size_t total = 0, n;

        cr_assert_eq(rwatch_open(rootfd, false, &w), 0);
        for (int i = 0; i < RWATCH_QUEUE_MAX / 2 + 10; i++) {
                snprintf(name, sizeof(name), "f%d", i);
                put(name, "x"); /* a create and a write each */
        }
        (void)drain(w, ev, 0);
        cr_assert(rwatch_overflowed(w));
        cr_assert(!rwatch_overflowed(w), "the flag clears once read");
        while ((n = rwatch_take(w, ev, 64)) > 0)
                total += n;
        cr_assert_eq(total, RWATCH_QUEUE_MAX);
        rwatch_close(w);
}
