/* stress_runner.c — the runner hub (hub.c, hub_ops.c) with fake
 * runners on its session sockets: the hub thread reads every connection
 * while worker threads start, wait for, forget and free executions, and a
 * reader asks for versions, services and counts.
 *
 * Each fake runner (one thread per session) says hello, lists no jobs, and
 * answers every RP_EXEC with RP_STARTED, one RP_OUTPUT and RP_EXIT, every
 * RP_PING with RP_PONG, every RP_SIGNAL with an RP_EXIT by that signal. The
 * runner of the last session hangs up after every few executions and comes
 * back, so executions are lost mid-flight there.
 *
 * What must hold: on the steady sessions every execution ends with exit 0
 * and its output delivered before the wait returned (the output counter is
 * a plain int written on the hub thread and read by the worker after
 * hub_exec_wait: ThreadSanitizer checks the hub orders the two); on the
 * flaky one an execution ends or is reported lost (-ECONNRESET), never
 * hangs past its wait. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandboxd/config.h"
#include "sandboxd/hub.h"
#include "sandboxd/hub_ops.h"
#include "sandboxd/runner_proto.h"
#include "stress.h"

#define SESSIONS 4 /* the last one is flaky */
#define WORKERS_PER_SESSION 2
#define FLAKY_EVERY 7 /* executions served per connection of the flaky runner */

static struct sbx_config cfg;
static struct hub *hub;
static char dirs[SESSIONS][SBX_PATH_MAX];
static bool stop;          /* atomic */
static int lost_reports;   /* atomic */
static int ended, dropped; /* atomic: executions that ended, that were lost with their connection */

static bool stopping(void)
{
        return __atomic_load_n(&stop, __ATOMIC_ACQUIRE);
}

static bool full_write(int fd, const void *buf, size_t len)
{
        const char *p = buf;
        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
                if (n <= 0)
                        return false;
                p += n;
                len -= (size_t)n;
        }
        return true;
}

static bool full_read(int fd, void *buf, size_t len)
{
        char *p = buf;
        while (len > 0) {
                ssize_t n = read(fd, p, len);
                if (n <= 0)
                        return false;
                p += n;
                len -= (size_t)n;
        }
        return true;
}

static bool frame(int fd, uint16_t type, uint32_t tag, const void *payload, size_t len)
{
        struct rp_hdr hdr = {.len = (uint32_t)len, .type = type, .tag = tag};
        return full_write(fd, &hdr, RP_HDR_LEN) && (len == 0 || full_write(fd, payload, len));
}

static int connect_runner(const char *dir)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct rp_hello hello = {.protocol = RP_PROTOCOL, .pid = 1};
        unsigned char buf[sizeof(hello) + 4];
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/" RP_SOCKET_NAME, dir);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                if (fd >= 0)
                        close(fd);
                return -1;
        }
        memcpy(buf, &hello, sizeof(hello));
        memcpy(buf + sizeof(hello), "fake", 4);
        if (!frame(fd, RP_HELLO, 0, buf, sizeof(buf)) || !frame(fd, RP_JOBS_END, 0, NULL, 0)) {
                close(fd);
                return -1;
        }
        return fd;
}

/* Serve one connection until the hub closes it, stop, or (flaky) it has
 * served `limit` executions. */
static void serve(int fd, int limit)
{
        int served = 0;

        while (!stopping() && (limit == 0 || served < limit)) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                unsigned char body[65536];
                struct rp_hdr hdr;
                int r = poll(&p, 1, 100);

                if (r == 0)
                        continue;
                if (r < 0 || !full_read(fd, &hdr, RP_HDR_LEN) || hdr.len > sizeof(body) ||
                    !full_read(fd, body, hdr.len))
                        return;
                if (hdr.type == RP_EXEC) {
                        uint32_t pid = 100 + hdr.tag;
                        struct rp_exit ex = {.exit_code = 0};
                        if (!frame(fd, RP_STARTED, hdr.tag, &pid, sizeof(pid)) ||
                            !frame(fd, RP_OUTPUT, hdr.tag, "out\n", 4) || !frame(fd, RP_EXIT, hdr.tag, &ex, sizeof(ex)))
                                return;
                        served++;
                } else if (hdr.type == RP_PING) {
                        if (!frame(fd, RP_PONG, 0, NULL, 0))
                                return;
                } else if (hdr.type == RP_SIGNAL && hdr.len == 4) {
                        uint32_t sig;
                        memcpy(&sig, body, 4);
                        struct rp_exit ex = {.exit_code = 128 + (int32_t)(sig & 63), .signal = (int32_t)(sig & 63)};
                        if (!frame(fd, RP_EXIT, hdr.tag, &ex, sizeof(ex)))
                                return;
                }
                /* RP_ACK, RP_FORGET, RP_STDIN*: nothing to answer */
        }
}

static void *fake_main(void *ud)
{
        int s = (int)(intptr_t)ud;

        while (!stopping()) {
                int fd = connect_runner(dirs[s]);
                if (fd < 0) {
                        sbx_sleep_ms(10); /* the hub is not listening yet: try again */
                        continue;
                }
                serve(fd, s == SESSIONS - 1 ? FLAKY_EVERY : 0);
                close(fd);
        }
        return NULL;
}

struct outcome {
        int bytes; /* written by the hub thread in on_output, read after the wait: plain on purpose */
};

static void on_output(void *ud, int stream, const void *data, size_t len)
{
        struct outcome *o = ud;
        (void)stream;
        (void)data;
        o->bytes += (int)len;
}

static void on_lost(const char *user, const char *session, const char *cause, void *ud)
{
        (void)user;
        (void)session;
        (void)cause;
        (void)ud;
        __atomic_add_fetch(&lost_reports, 1, __ATOMIC_RELAXED);
}

static void worker(int t, void *ud)
{
        int s = t % (SESSIONS + 1);
        int rounds = stress_n(600);
        const char *argv[] = {"true", NULL};
        struct hub_exec_spec spec = {.workdir = "/workspace", .argv = argv};
        char session[16];

        (void)ud;
        if (s == SESSIONS) { /* the reader */
                for (int k = 0; k < rounds * 4; k++) {
                        char version[64], dir[SBX_PATH_MAX];
                        uint64_t files, services;
                        snprintf(session, sizeof(session), "s%d", k % SESSIONS);
                        (void)hub_version(hub, "u1", session, version, sizeof(version));
                        (void)hub_dir(hub, "u1", session, dir);
                        (void)hub_svc_get(hub, "u1", session, "web-1", NULL);
                        hub_ops_counts(hub, &files, &services);
                        sbx_sleep_ms(1); /* paces the reader */
                }
                return;
        }
        snprintf(session, sizeof(session), "s%d", s);
        for (int k = 0; k < rounds; k++) {
                struct sbx_error err = {0};
                struct hub_exec *x = NULL;
                struct runner_exit ex;
                struct outcome o = {0};
                int r;

                r = hub_exec_start(hub, "u1", session, &spec, on_output, &o, &x, &err);
                if (r == -ENOTCONN) {
                        STRESS_CHECK(s == SESSIONS - 1 || k == 0, "%s: runner gone: %s", session, err.msg);
                        (void)hub_wait(hub, "u1", session, 5000);
                        continue;
                }
                STRESS_CHECK(r == 0, "%s: start: %d %s", session, r, err.msg);
                if (r < 0)
                        continue;
                if (k % 10 == 3)
                        (void)hub_exec_signal(x, SIGTERM);
                r = hub_exec_wait(x, 10000, &ex, &err);
                if (s == SESSIONS - 1) {
                        STRESS_CHECK(r == 0 || r == -ECONNRESET, "%s: wait: %d %s", session, r, err.msg);
                } else {
                        STRESS_CHECK(r == 0, "%s: wait: %d %s", session, r, err.msg);
                        STRESS_CHECK(r < 0 || ex.exit_code == 0 || ex.signal == SIGTERM, "%s: exit %d", session,
                                     ex.exit_code);
                        STRESS_CHECK(r < 0 || ex.signal != 0 || o.bytes == 4, "%s: %d bytes of output before the end",
                                     session, o.bytes);
                }
                __atomic_add_fetch(r == 0 ? &ended : &dropped, 1, __ATOMIC_RELAXED);
                if (r == 0)
                        (void)hub_exec_forget(x);
                hub_exec_free(x);
        }
}

/* The fakes are threads of this host process, not a container's runner. */
static int any_peer(int fd, int dirfd, const struct hub_peer *known, struct hub_peer *ret, const char **ret_why)
{
        (void)fd;
        (void)dirfd;
        (void)known;
        (void)ret_why;
        *ret = (struct hub_peer){.pid = 1};
        return 0;
}

int main(void)
{
        struct sbx_error err = {0};
        pthread_t fakes[SESSIONS];

        config_defaults(&cfg);
        snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s", stress_tmpdir());
        cfg.runner_heartbeat_ms = 1000; /* the fakes' PONGs race the workers' frames */
        if (hub_new(&cfg, &hub, &err) < 0) {
                fprintf(stderr, "stress_runner: hub: %s\n", err.msg);
                return 2;
        }
        hub_set_lost_handler(hub, on_lost, NULL);
        hub_set_peer_check(hub, any_peer);
        for (int s = 0; s < SESSIONS; s++) {
                char session[16];
                snprintf(session, sizeof(session), "s%d", s);
                if (hub_prepare(hub, "u1", session, dirs[s], &err) < 0) {
                        fprintf(stderr, "stress_runner: prepare %s: %s\n", session, err.msg);
                        return 2;
                }
                pthread_create(&fakes[s], NULL, fake_main, (void *)(intptr_t)s);
        }
        for (int s = 0; s < SESSIONS; s++) {
                char session[16];
                snprintf(session, sizeof(session), "s%d", s);
                STRESS_CHECK(hub_wait(hub, "u1", session, 10000), "the fake runner of %s never came", session);
        }
        stress_threads(SESSIONS * WORKERS_PER_SESSION + 1, worker, NULL);
        printf("stress_runner: %d executions ended, %d lost with the flaky runner's connection\n", ended, dropped);
        STRESS_CHECK(ended > 0, "no execution ended");
        STRESS_CHECK(__atomic_load_n(&lost_reports, __ATOMIC_RELAXED) == 0, "%d protocol errors or missed heartbeats",
                     lost_reports);
        __atomic_store_n(&stop, true, __ATOMIC_RELEASE);
        for (int s = 0; s < SESSIONS; s++)
                pthread_join(fakes[s], NULL);
        hub_free(hub);
        return stress_done("stress_runner");
}
