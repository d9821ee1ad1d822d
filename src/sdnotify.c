/* sdnotify.c — systemd's notification protocol, written by hand.
 *
 * The protocol is one datagram of "KEY=VALUE\n" lines to the AF_UNIX socket in
 * $NOTIFY_SOCKET (a path, or "@name" for the abstract namespace); see
 * sd_notify(3). libsystemd's sd_notify() does the same, but linking libsystemd
 * (and on Debian 12 libsystemd-dev pulling a systemd upgrade onto the build
 * machine) for one sendto() is not worth it. Credentials passing, fd store
 * and the other extensions are not implemented: the daemon only says READY,
 * STOPPING and STATUS. No state, no locking. */
#include "sandboxd/sdnotify.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandboxd/common.h"

int sdnotify_send(const char *state)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        const char *path = getenv("NOTIFY_SOCKET");
        _cleanup_close_ int fd = -1;
        socklen_t len;
        size_t n;

        if (!path || !*path)
                return 0;
        n = strlen(path);
        if ((path[0] != '/' && path[0] != '@') || n < 2 || n >= sizeof(sa.sun_path))
                return -EINVAL;
        memcpy(sa.sun_path, path, n);
        if (sa.sun_path[0] == '@')
                sa.sun_path[0] = '\0'; /* abstract namespace */
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);

        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len) < 0)
                return -errno;
        return 0;
}
