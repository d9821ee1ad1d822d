/* test_sdnotify.c — the readiness datagram: to a path, to an abstract socket, nothing when
 * NOTIFY_SOCKET is unset, an error for a malformed one. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandboxd/sdnotify.h"
#include "testenv.h"

/* A bound datagram socket at NAME (a path, or "@x" abstract); returns the fd. */
static int bind_dgram(const char *name)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        size_t n = strlen(name);
        int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

        cr_assert_geq(fd, 0);
        memcpy(sa.sun_path, name, n);
        if (name[0] == '@')
                sa.sun_path[0] = '\0';
        cr_assert_eq(bind(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)), 0,
                     "bind %s: %s", name, strerror(errno));
        return fd;
}

static void expect_datagram(int fd, const char *want)
{
        char buf[256];
        ssize_t k = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
        cr_assert_gt(k, 0, "no datagram: %s", strerror(errno));
        buf[k] = '\0';
        cr_expect_str_eq(buf, want);
}

Test(sdnotify, path_socket)
{
        char *dir = testenv_tmpdir(), path[4096];
        int fd;

        snprintf(path, sizeof(path), "%s/notify", dir);
        free(dir);
        fd = bind_dgram(path);
        setenv("NOTIFY_SOCKET", path, 1);
        cr_assert_eq(sdnotify_send("READY=1\nSTATUS=running"), 0);
        expect_datagram(fd, "READY=1\nSTATUS=running");
        close(fd);
        testenv_cleanup();
}

Test(sdnotify, abstract_socket)
{
        char name[64];
        int fd;

        snprintf(name, sizeof(name), "@sbx-notify-test-%d", (int)getpid());
        fd = bind_dgram(name);
        setenv("NOTIFY_SOCKET", name, 1);
        cr_assert_eq(sdnotify_send("STOPPING=1"), 0);
        expect_datagram(fd, "STOPPING=1");
        close(fd);
}

Test(sdnotify, unset_or_bad)
{
        unsetenv("NOTIFY_SOCKET");
        cr_expect_eq(sdnotify_send("READY=1"), 0, "no service manager: nothing to do");
        setenv("NOTIFY_SOCKET", "", 1);
        cr_expect_eq(sdnotify_send("READY=1"), 0);
        setenv("NOTIFY_SOCKET", "relative/path", 1);
        cr_expect_eq(sdnotify_send("READY=1"), -EINVAL);
        setenv("NOTIFY_SOCKET", "/nonexistent/dir/notify", 1);
        cr_expect_eq(sdnotify_send("READY=1"), -ENOENT);
}
