/* Unit tests of the hub's fence in this process (hub_chan.c,
 * hub.c): once a session's container is removed and the next prepared, the runner of
 * the earlier one (a lost Kubernetes node's Pod runs on and keeps dialling
 * the same session directory) is cut off and refused by its container,
 * with the refusal told once; the new container's runner is taken.
 *
 * The "containers" are fake runners of this process: each binds its
 * socket to an abstract name, and the test's peer check reads that name
 * (getpeername) to say which container's init it comes from. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandboxd/config.h"
#include "sandboxd/hub.h"
#include "sandboxd/hub_peer.h"
#include "sandboxd/runner_proto.h"

static struct sbx_config cfg;
static struct hub *h;
static char dir[SBX_PATH_MAX];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t epoch;
static int refusals;
static uint64_t refused_presented, refused_current;

static int epoch_fn(const char *user, const char *session, bool bump, uint64_t *ret, void *ud)
{
        (void)user;
        (void)session;
        (void)ud;
        pthread_mutex_lock(&lock);
        if (bump)
                epoch++;
        *ret = epoch;
        pthread_mutex_unlock(&lock);
        return 0;
}

static void refused_fn(const char *user, const char *session, uint64_t presented, uint64_t current, void *ud)
{
        (void)ud;
        cr_assert_str_eq(user, "u1");
        cr_assert_str_eq(session, "s1");
        pthread_mutex_lock(&lock);
        refusals++;
        refused_presented = presented;
        refused_current = current;
        pthread_mutex_unlock(&lock);
}

/* The container is the client's abstract socket name: "\0fence-<pid>-<container>". */
static int container_peer(int fd, int dirfd, const struct hub_peer *known, struct hub_peer *ret, const char **ret_why)
{
        struct sockaddr_un sa;
        socklen_t len = sizeof(sa);
        char name[64];
        int container = 0;

        (void)dirfd;
        (void)known;
        *ret_why = "no name";
        if (getpeername(fd, (struct sockaddr *)&sa, &len) < 0 || len <= offsetof(struct sockaddr_un, sun_path) + 1)
                return -EPERM;
        snprintf(name, sizeof(name), "%.*s", (int)(len - offsetof(struct sockaddr_un, sun_path) - 1), sa.sun_path + 1);
        if (sscanf(name, "fence-%*d-%d", &container) != 1)
                return -EPERM;
        /* the runner's pid differs per connection; its container's init is the container */
        *ret = (struct hub_peer){.pid = 1000 + container, .start = 1, .init_pid = 100 * container, .init_start = 7};
        return 0;
}

static void setup(void)
{
        struct sbx_error err = {0};
        char tmpl[] = "/tmp/sbx-runner-fence-XXXXXX";

        config_defaults(&cfg);
        cr_assert_not_null(mkdtemp(tmpl));
        snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s", tmpl);
        cfg.runner_heartbeat_ms = 60000;
        cr_assert_eq(hub_new(&cfg, &h, &err), 0, "%s", err.msg);
        hub_set_peer_check(h, container_peer);
        hub_set_epoch_fn(h, epoch_fn, NULL);
        hub_set_refused_fn(h, refused_fn, NULL);
        cr_assert_eq(hub_prepare(h, "u1", "s1", dir, &err), 0, "%s", err.msg);
}

static void teardown(void)
{
        char cmd[SBX_PATH_MAX + 16];

        hub_free(h);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cfg.data_dir);
        cr_assert_eq(system(cmd), 0);
}

TestSuite(hub_fence, .init = setup, .fini = teardown, .timeout = 60);

/* A runner of container n dials the session socket and says hello. */
static int dial(int container)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX}, me = {.sun_family = AF_UNIX};
        struct rp_hello hello = {.protocol = RP_PROTOCOL, .pid = 1};
        struct rp_hdr hdr = {.len = (uint32_t)sizeof(hello) + 4, .type = RP_HELLO};
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int n = snprintf(me.sun_path + 1, sizeof(me.sun_path) - 1, "fence-%d-%d", (int)getpid(), container);

        cr_assert_geq(fd, 0);
        cr_assert_eq(bind(fd, (struct sockaddr *)&me, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)), 0);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/" RP_SOCKET_NAME, dir);
        cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        /* a refused runner may find the socket closed under its hello: no assertion on these */
        (void)send(fd, &hdr, sizeof(hdr), MSG_NOSIGNAL);
        (void)send(fd, &hello, sizeof(hello), MSG_NOSIGNAL);
        (void)send(fd, "fake", 4, MSG_NOSIGNAL);
        return fd;
}

/* Whether the hub closed fd (within 5 s). */
static bool closed_by_hub(int fd)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        char b[256];

        for (int i = 0; i < 50; i++) {
                if (poll(&p, 1, 100) == 1) {
                        ssize_t n = read(fd, b, sizeof(b));
                        if (n == 0 || (n < 0 && errno == ECONNRESET))
                                return true;
                }
        }
        return false;
}

static int refusal_count(void)
{
        pthread_mutex_lock(&lock);
        int n = refusals;
        pthread_mutex_unlock(&lock);
        return n;
}

Test(hub_fence, a_new_container_fences_the_runner_of_the_old_one)
{
        struct sbx_error err = {0};
        char again[SBX_PATH_MAX];
        int a1, a2, a3, b;

        a1 = dial(1);
        cr_assert(hub_wait(h, "u1", "s1", 5000), "the first container's runner is taken");

        /* container 1 removed (its engine says), container 2 made: its runner has not come yet,
         * container 1's runs on */
        hub_fence_runner(h, "u1", "s1");
        cr_assert_eq(hub_prepare(h, "u1", "s1", again, &err), 0, "%s", err.msg);
        cr_assert_str_eq(again, dir, "the same session directory");
        cr_expect(closed_by_hub(a1), "the old runner's connection is closed by the fence");
        close(a1);
        /* it dials again, before the new runner comes: refused, once on the record */
        a2 = dial(1);
        cr_expect(closed_by_hub(a2), "the old runner is refused");
        close(a2);
        for (int i = 0; i < 500 && refusal_count() == 0; i++)
                usleep(10000); /* the hub closes, then tells */
        cr_expect_eq(refusal_count(), 1);
        cr_expect_eq(refused_presented, 1, "the old container's epoch");
        cr_expect_eq(refused_current, 2, "the session's epoch now");
        cr_expect_not(hub_wait(h, "u1", "s1", 0), "no runner serves the session");

        /* the new container's runner is taken */
        b = dial(2);
        cr_assert(hub_wait(h, "u1", "s1", 5000), "the new container's runner is taken");
        /* the old one, again: still refused, told once */
        a3 = dial(1);
        cr_expect(closed_by_hub(a3), "the old runner is refused while the new one serves");
        close(a3);
        cr_expect_eq(refusal_count(), 1, "one refusal on the record per old container");
        cr_expect(hub_wait(h, "u1", "s1", 0), "the new runner still serves");
        close(b);
}

Test(hub_fence, a_restarted_daemon_refuses_the_same_runner)
{
        struct sbx_error err = {0};
        struct hub *h2 = NULL;
        int a1, a2, b;

        a1 = dial(1);
        cr_assert(hub_wait(h, "u1", "s1", 5000));
        hub_fence_runner(h, "u1", "s1");
        cr_assert_eq(hub_prepare(h, "u1", "s1", dir, &err), 0, "%s", err.msg);
        cr_assert(closed_by_hub(a1), "fenced");
        close(a1);
        b = dial(2);
        cr_assert(hub_wait(h, "u1", "s1", 5000));
        close(b);
        /* the list in the directory, which the gateway's fwd.sock checks too */
        {
                int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                struct hub_peer old = {.pid = 1001, .start = 1, .init_pid = 100, .init_start = 7};
                struct hub_peer cur = {.pid = 1002, .start = 1, .init_pid = 200, .init_start = 7};
                uint64_t e = 0;
                cr_assert_geq(dfd, 0);
                cr_expect(hub_peer_fenced(dfd, &old, &e), "container 1 is fenced in " RUNNER_FENCED_FILE);
                cr_expect_eq(e, 1);
                cr_expect_not(hub_peer_fenced(dfd, &cur, NULL), "container 2 is not");
                close(dfd);
        }
        hub_free(h);
        h = NULL;

        /* the daemon again, over the same directories: it adopts the session's channel */
        snprintf(cfg.runner_binary, sizeof(cfg.runner_binary), "/bin/sh"); /* root's: adopt needs a binary */
        cr_assert_eq(hub_new(&cfg, &h2, &err), 0, "%s", err.msg);
        h = h2; /* teardown frees it */
        hub_set_peer_check(h, container_peer);
        hub_set_epoch_fn(h, epoch_fn, NULL);
        hub_set_refused_fn(h, refused_fn, NULL);
        cr_assert_eq(hub_adopt(h, "u1", "s1"), 0);
        a2 = dial(1);
        cr_expect(closed_by_hub(a2), "the old container's runner is still refused after the restart");
        close(a2);
        b = dial(2);
        cr_expect(hub_wait(h, "u1", "s1", 5000), "the current container's runner is taken");
        close(b);
}

/* A prepare alone (a claimed pool container is served under its session's
 * key) is not a new container: its runner stays. */
Test(hub_fence, a_prepare_alone_fences_nothing)
{
        struct sbx_error err = {0};
        struct pollfd p;
        int a;

        a = dial(1);
        cr_assert(hub_wait(h, "u1", "s1", 5000));
        cr_assert_eq(hub_prepare(h, "u1", "s1", dir, &err), 0, "%s", err.msg);
        p = (struct pollfd){.fd = a, .events = POLLIN};
        cr_expect_eq(poll(&p, 1, 500), 0, "the runner's connection stays open");
        cr_expect(hub_wait(h, "u1", "s1", 0), "and it serves the session");
        cr_expect_eq(refusal_count(), 0);
        close(a);
}

/* After a restart every adopter (sessions, cells, executions, files, services) calls
 * hub_adopt for the same session at once: one of them binds the socket, and the
 * channel kept listens on the socket the path names. (Each binding its own, one
 * unlinked the other's file and the channel kept could be one no runner reaches:
 * "its runner did not come back", seen in CI.) */
#define ADOPTERS 8

static pthread_barrier_t adopt_barrier;

static void *adopter(void *p)
{
        (void)p;
        pthread_barrier_wait(&adopt_barrier);
        return (void *)(intptr_t)hub_adopt(h, "u1", "s1");
}

Test(hub_fence, concurrent_adopters_after_a_restart_listen_on_one_socket)
{
        struct sbx_error err = {0};

        snprintf(cfg.runner_binary, sizeof(cfg.runner_binary), "/bin/sh"); /* root's: adopt needs a binary */
        for (int round = 0; round < 40; round++) {
                pthread_t t[ADOPTERS];
                int b;

                hub_free(h);
                h = NULL;
                cr_assert_eq(hub_new(&cfg, &h, &err), 0, "%s", err.msg);
                hub_set_peer_check(h, container_peer);
                hub_set_epoch_fn(h, epoch_fn, NULL);
                hub_set_refused_fn(h, refused_fn, NULL);
                pthread_barrier_init(&adopt_barrier, NULL, ADOPTERS);
                for (int i = 0; i < ADOPTERS; i++)
                        cr_assert_eq(pthread_create(&t[i], NULL, adopter, NULL), 0);
                for (int i = 0; i < ADOPTERS; i++) {
                        void *r;
                        pthread_join(t[i], &r);
                        cr_assert_eq((intptr_t)r, 0, "round %d: hub_adopt: %s", round, strerror(-(int)(intptr_t)r));
                }
                pthread_barrier_destroy(&adopt_barrier);
                b = dial(1); /* asserts that the socket file is one the hub listens on */
                cr_assert(hub_wait(h, "u1", "s1", 5000), "round %d: the runner is taken", round);
                close(b);
        }
}
