/* Unit tests of the runner's credential check (hub_peer.c) without
 * Docker: a "container" made here with a pid and a mount namespace of its
 * own, its init as PID 1, the session directory bind-mounted at
 * /run/sandboxd, this test binary at /run/sandboxd-runner and a /proc of
 * its own. The init's first child is the runner; its younger sibling, its
 * own child (tenant code) and this host process are not. Needs root
 * (namespaces, mounts); skipped without. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandboxd/hub_peer.h"

static char dir[64], other[64];

/* Even after a failed assertion: the temporary directories and what is in them. */
static void cleanup(void)
{
        char cmd[160];
        if (dir[0] && other[0]) {
                snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dir, other);
                (void)!system(cmd);
        }
}

TestSuite(hub_peer, .fini = cleanup, .timeout = 60);

/* Connect to the session socket through the container's mount, then wait
 * until the host has judged (it closes the connection). No assertion here:
 * this runs in the container's processes. */
static void dial_and_wait(void)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX, .sun_path = "/run/sandboxd/runner.sock"};
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        char b;

        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                _exit(10);
        while (read(fd, &b, 1) > 0)
                ;
        close(fd);
}

/* PID 1 of the container: the runner first, which dials, then has a child
 * (tenant code) dial; then a younger sibling of the runner dials. */
static void container_init(void)
{
        int go[2];
        pid_t runner, tenant, younger, late;
        char exe[4096];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

        if (n <= 0)
                _exit(19);
        exe[n] = '\0';

        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 || mount("tmpfs", "/run", "tmpfs", 0, NULL) < 0 ||
            mkdir("/run/sandboxd", 0755) < 0 || mount(dir, "/run/sandboxd", NULL, MS_BIND, NULL) < 0)
                _exit(20);
        int f = open("/run/sandboxd-runner", O_CREAT | O_WRONLY | O_CLOEXEC, 0755);
        if (f < 0 || mount(exe, "/run/sandboxd-runner", NULL, MS_BIND, NULL) < 0)
                _exit(21);
        close(f);
        if (mount("proc", "/proc", "proc", 0, NULL) < 0)
                _exit(22);
        if (pipe(go) < 0)
                _exit(23);
        runner = fork();
        if (runner == 0) {
                close(go[0]);
                dial_and_wait();
                tenant = fork();
                if (tenant == 0) {
                        dial_and_wait();
                        _exit(0);
                }
                waitpid(tenant, NULL, 0);
                (void)!write(go[1], "y", 1); /* now the younger sibling, while the runner still lives */
                pause();
                _exit(0);
        }
        close(go[1]);
        char b;
        if (read(go[0], &b, 1) != 1)
                _exit(24);
        younger = fork();
        if (younger == 0) {
                dial_and_wait();
                _exit(0);
        }
        waitpid(younger, NULL, 0);
        /* the runner dies and this init, unlike Docker's, lives on (as if held by a
         * debugger): a later child is then the oldest */
        kill(runner, SIGKILL);
        waitpid(runner, NULL, 0);
        late = fork();
        if (late == 0) {
                dial_and_wait();
                _exit(0);
        }
        waitpid(late, NULL, 0);
        _exit(0);
}

static int accept_one(int lfd)
{
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        cr_assert_eq(poll(&p, 1, 20000), 1, "nobody dialled");
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        cr_assert_geq(fd, 0);
        return fd;
}

Test(hub_peer, only_the_first_child_of_the_containers_init_is_the_runner_for_good)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct hub_peer peer = {0}, known;
        const char *why = NULL;
        int lfd, dfd, odfd, fd, sp[2], status;
        pid_t c;

        if (geteuid() != 0)
                cr_skip_test("needs root: namespaces and mounts");
        snprintf(dir, sizeof(dir), "/tmp/sbx-peer-XXXXXX");
        snprintf(other, sizeof(other), "/tmp/sbx-peer-XXXXXX");
        cr_assert_not_null(mkdtemp(dir));
        cr_assert_not_null(mkdtemp(other));
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/runner.sock", dir);
        lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        cr_assert_eq(chmod(sa.sun_path, 0666), 0);
        cr_assert_eq(listen(lfd, 8), 0);
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        odfd = open(other, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        cr_assert(dfd >= 0 && odfd >= 0);

        /* this host process, on a socket pair */
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
        cr_assert_eq(hub_peer_verify(sp[0], dfd, NULL, &peer, &why), -EPERM, "a host process passed");
        cr_log_info("host process: %s", why);
        close(sp[0]);
        close(sp[1]);

        c = fork();
        cr_assert_geq(c, 0);
        if (c == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (unshare(CLONE_NEWNS | CLONE_NEWPID) < 0)
                        _exit(30);
                pid_t init = fork(); /* PID 1 of the new namespace */
                if (init == 0) {
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        container_init();
                }
                int st = 1;
                waitpid(init, &st, 0);
                _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 40);
        }

        /* the runner: passes, for this directory only */
        fd = accept_one(lfd);
        cr_assert_eq(hub_peer_verify(fd, odfd, NULL, &peer, &why), -EPERM, "passed for another directory");
        cr_log_info("another directory: %s", why);
        cr_assert_eq(hub_peer_verify(fd, dfd, NULL, &peer, &why), 0, "the runner was refused: %s", why);
        cr_assert_gt(peer.pid, 0);
        cr_assert_gt(peer.start, 0);
        /* what a restarted daemon reads back from the session directory */
        cr_assert_eq(hub_peer_load(dfd, &known), -ENOENT);
        cr_assert_eq(hub_peer_save(dfd, &peer), 0);
        cr_assert_eq(hub_peer_load(dfd, &known), 0);
        cr_assert(known.pid == peer.pid && known.start == peer.start && known.init_pid == peer.init_pid &&
                  known.init_start == peer.init_start && known.init_pid > 0);
        cr_assert_eq(hub_peer_verify(fd, dfd, &known, &peer, &why), 0, "the known runner was refused: %s", why);
        cr_assert_eq(peer.pid, known.pid);
        close(fd);

        /* its child: tenant code, even with the runner's identity known */
        fd = accept_one(lfd);
        cr_assert_eq(hub_peer_verify(fd, dfd, &known, &peer, &why), -EPERM, "the runner's child passed");
        cr_log_info("the runner's child: %s", why);
        close(fd);

        /* a younger child of the init: not the runner either, known or not */
        fd = accept_one(lfd);
        cr_assert_eq(hub_peer_verify(fd, dfd, NULL, &peer, &why), -EPERM, "a younger child of the init passed");
        cr_assert(strstr(why, "older child"), "refused for another reason: %s", why);
        cr_assert_eq(hub_peer_verify(fd, dfd, &known, &peer, &why), -EPERM, "a younger child of the init passed");
        cr_assert(strstr(why, "is known"), "refused for another reason: %s", why);
        close(fd);

        /* a child of the init after the runner died: only knowing the runner tells */
        fd = accept_one(lfd);
        cr_assert_eq(hub_peer_verify(fd, dfd, &known, &peer, &why), -EPERM, "a child after the runner passed");
        cr_assert(strstr(why, "is known"), "refused for another reason: %s", why);
        cr_assert_eq(hub_peer_verify(fd, dfd, NULL, &peer, &why), 0, "%s", why);
        close(fd);

        cr_assert_eq(waitpid(c, &status, 0), c);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the container failed: %d", status);
        close(lfd);
        close(dfd);
        close(odfd);
}
