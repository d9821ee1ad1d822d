/* Unit tests of the daemon's side of runner files and services
 * (hub_ops.c) against a fake runner on the session socket: reports are
 * confined to their session, and every malformed one is a protocol error.
 * And the hub under floods (hub.c, hub_exec.c): a flooding runner
 * starves no other session, output is acknowledged without a waiting
 * thread, and a flooding session is read its budget per turn. */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandboxd/config.h"
#include "sandboxd/hub.h"
#include "sandboxd/hub_ops.h"
#include "sandboxd/runner_proto.h"

static struct sbx_config cfg;
static struct hub *h;
static char dir[SBX_PATH_MAX];
static pthread_mutex_t lost_lock = PTHREAD_MUTEX_INITIALIZER;
static int lost;
static char lost_cause[64];

static void on_lost(const char *user, const char *session, const char *cause, void *ud)
{
        (void)user;
        (void)session;
        (void)ud;
        pthread_mutex_lock(&lost_lock);
        lost++;
        snprintf(lost_cause, sizeof(lost_cause), "%s", cause);
        pthread_mutex_unlock(&lost_lock);
}

static int lost_count(void)
{
        pthread_mutex_lock(&lost_lock);
        int n = lost;
        pthread_mutex_unlock(&lost_lock);
        return n;
}

/* The fake runner is this host process, not a container's runner. */
static int any_peer(int fd, int dirfd, const struct hub_peer *known, struct hub_peer *ret, const char **ret_why)
{
        (void)fd;
        (void)dirfd;
        (void)known;
        (void)ret_why;
        *ret = (struct hub_peer){.pid = 1};
        return 0;
}

static void setup(void)
{
        struct sbx_error err = {0};
        char tmpl[] = "/tmp/sbx-runner-ops-XXXXXX";

        config_defaults(&cfg);
        cr_assert_not_null(mkdtemp(tmpl));
        snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s", tmpl);
        cfg.runner_heartbeat_ms = 60000;
        cr_assert_eq(hub_new(&cfg, &h, &err), 0, "%s", err.msg);
        hub_set_peer_check(h, any_peer);
        hub_set_lost_handler(h, on_lost, NULL);
        cr_assert_eq(hub_prepare(h, "u1", "s1", dir, &err), 0, "%s", err.msg);
}

static void teardown(void)
{
        char cmd[SBX_PATH_MAX + 16];

        hub_free(h);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cfg.data_dir);
        cr_assert_eq(system(cmd), 0);
}

TestSuite(hub_ops, .init = setup, .fini = teardown, .timeout = 60);

static void put(int fd, uint16_t type, uint32_t tag, const void *p1, size_t n1, const void *p2, size_t n2)
{
        struct rp_hdr hdr = {.len = (uint32_t)(n1 + n2), .type = type, .tag = tag};
        cr_assert_eq(write(fd, &hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
        if (n1)
                cr_assert_eq(write(fd, p1, n1), (ssize_t)n1);
        if (n2)
                cr_assert_eq(write(fd, p2, n2), (ssize_t)n2);
}

/* A fake runner: connected, hello sent, and the hub has seen it. */
static int fake_runner(void)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct rp_hello hello = {.protocol = RP_PROTOCOL, .pid = 1};
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/" RP_SOCKET_NAME, dir);
        for (int i = 0; i < 100 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0; i++)
                usleep(10000);
        put(fd, RP_HELLO, 0, &hello, sizeof(hello), "fake", 4);
        cr_assert(hub_wait(h, "u1", "s1", 5000), "the hub did not take the fake runner");
        return fd;
}

static bool wait_for(bool (*pred)(void))
{
        for (int i = 0; i < 500; i++) {
                if (pred())
                        return true;
                usleep(10000);
        }
        return false;
}

static bool have_web(void)
{
        return hub_svc_get(h, "u1", "s1", "web-1", NULL);
}

Test(hub_ops, a_report_lands_in_its_own_session_only)
{
        struct rp_svc_state st = {.pid = 42, .phase = RP_SVC_RUNNING, .n_ports = 2, .ports = {8000, 8001}};
        struct hub_svc_state got;
        int fd = fake_runner();

        put(fd, RP_SVC_STATE, 0, &st, sizeof(st), "web-1", 5);
        cr_assert(wait_for(have_web), "the report never arrived");
        cr_assert(hub_svc_get(h, "u1", "s1", "web-1", &got));
        cr_assert_eq(got.pid, 42);
        cr_assert_eq(got.n_ports, 2);
        cr_assert_eq(got.ports[1], 8001);
        cr_assert_not(hub_svc_get(h, "u1", "s2", "web-1", NULL), "a report reached another session");
        cr_assert_not(hub_svc_get(h, "u2", "s1", "web-1", NULL), "a report reached another user");
        /* the connection goes: so do its reports */
        close(fd);
        for (int i = 0; i < 500 && hub_svc_get(h, "u1", "s1", "web-1", NULL); i++)
                usleep(10000);
        cr_assert_not(hub_svc_get(h, "u1", "s1", "web-1", NULL));
        cr_assert_eq(lost_count(), 0, "an orderly close is not a protocol error");
}

static int lost_target;
static bool lost_reached(void)
{
        return lost_count() >= lost_target;
}

Test(hub_ops, malformed_reports_close_the_connection)
{
        struct rp_svc_state ok = {.pid = 42, .phase = RP_SVC_RUNNING, .n_ports = 1, .ports = {8000}};
        struct rp_svc_state bad[8];
        const char *markers[8] = {"a-1", "a-1", "a-1", "a-1", "a-1", "has space", "a/b", ""};
        char long_marker[RP_MARKER_MAX + 2];

        for (size_t i = 0; i < 8; i++)
                bad[i] = ok;
        bad[0].ports[0] = 0;                   /* port 0 */
        bad[1].pid = 0;                        /* no pid */
        bad[2].n_ports = RP_SVC_MAX_PORTS + 1; /* too many ports */
        bad[3].phase = RP_SVC_EXITED;
        bad[3].exit_code = 300; /* exit code out of range */
        bad[4].phase = 9;       /* no such phase */
        bad[6].pid = 5000000;   /* past PID_MAX_LIMIT */
        for (size_t i = 0; i < 8; i++) {
                int fd = fake_runner();
                put(fd, RP_SVC_STATE, 0, &bad[i], sizeof(bad[i]), markers[i], strlen(markers[i]));
                lost_target = (int)i + 1;
                cr_assert(wait_for(lost_reached), "bad report %zu was accepted", i);
                close(fd);
        }
        cr_assert_str_eq(lost_cause, "hub_protocol_error");

        /* a marker past RP_MARKER_MAX, a failure without a request, a reply
         * with an errno past 4095, a daemon-to-runner type */
        memset(long_marker, 'x', sizeof(long_marker));
        struct rp_svc_state failed = {.phase = RP_SVC_FAILED, .err = EIO};
        struct rp_file_reply rep = {.err = 5000};
        uint32_t sig = 9;
        int fd = fake_runner();
        put(fd, RP_SVC_STATE, 0, &ok, sizeof(ok), long_marker, sizeof(long_marker));
        lost_target = 9;
        cr_assert(wait_for(lost_reached));
        close(fd);
        fd = fake_runner();
        put(fd, RP_SVC_STATE, 0, &failed, sizeof(failed), "a-1", 3);
        lost_target = 10;
        cr_assert(wait_for(lost_reached));
        close(fd);
        fd = fake_runner();
        put(fd, RP_FILE_REPLY, 7, &rep, sizeof(rep), NULL, 0);
        lost_target = 11;
        cr_assert(wait_for(lost_reached));
        close(fd);
        fd = fake_runner();
        put(fd, RP_SVC_SIGNAL, 0, &sig, sizeof(sig), "a-1", 3);
        lost_target = 12;
        cr_assert(wait_for(lost_reached));
        close(fd);
        cr_assert_not(hub_svc_get(h, "u1", "s1", "a-1", NULL), "a rejected report was kept");
}

/* A fake runner that answers a read with more bytes than were asked for. */
static void *oversharing_runner(void *ud)
{
        int fd = *(int *)ud;
        unsigned char buf[RP_HDR_LEN + 4096];
        struct rp_hdr hdr;
        struct rp_file_reply rep = {.size = 100};
        char data[100];

        if (read(fd, buf, sizeof(buf)) < (ssize_t)RP_HDR_LEN)
                return NULL;
        memcpy(&hdr, buf, RP_HDR_LEN);
        memset(data, 'z', sizeof(data));
        put(fd, RP_FILE_REPLY, hdr.tag, &rep, sizeof(rep), data, sizeof(data));
        return NULL;
}

Test(hub_ops, a_reply_past_the_request_is_refused)
{
        char buf[16];
        size_t len = 0;
        uint64_t size = 0;
        pthread_t t;
        int fd = fake_runner();

        cr_assert_eq(pthread_create(&t, NULL, oversharing_runner, &fd), 0);
        cr_assert_eq(hub_file_read(h, "u1", "s1", "/workspace/x", 0, 10, buf, &len, &size, 5000), -EIO);
        pthread_join(t, NULL);
        /* and nobody answering is a timeout, not a hang */
        cr_assert_eq(hub_file_read(h, "u1", "s1", "/workspace/x", 0, 10, buf, &len, &size, 200), -ETIMEDOUT);
        close(fd);
        cr_assert_eq(hub_file_read(h, "u1", "s2", "/workspace/x", 0, 10, buf, &len, &size, 200), -ENOTCONN);
}

/* A runner connected for session sess of user on hub (prepared here), hello sent. */
static int fake_runner_on(struct hub *hub, const char *user, const char *sess)
{
        struct sbx_error err = {0};
        char d[SBX_PATH_MAX];
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct rp_hello hello = {.protocol = RP_PROTOCOL, .pid = 1};
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        cr_assert_eq(hub_prepare(hub, user, sess, d, &err), 0, "%s", err.msg);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/" RP_SOCKET_NAME, d);
        for (int i = 0; i < 100 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0; i++)
                usleep(10000);
        put(fd, RP_HELLO, 0, &hello, sizeof(hello), "fake", 4);
        return fd;
}

static volatile int flood_stop;

/* Valid frames (RP_PONG) as fast as the socket takes them, until told to stop. */
static void *flooding_runner(void *ud)
{
        static struct rp_hdr frames[8192];
        int fd = *(int *)ud;

        for (size_t i = 0; i < sizeof(frames) / sizeof(frames[0]); i++)
                frames[i] = (struct rp_hdr){.type = RP_PONG};
        while (!flood_stop)
                if (write(fd, frames, sizeof(frames)) < 0)
                        break;
        return NULL;
}

/* One runner sending without pause must not keep the hub thread from the
 * other sessions' runners. */
Test(hub_ops, a_flooding_runner_does_not_starve_the_others)
{
        int fd = fake_runner(), fd2;
        pthread_t t;
        bool served;

        cr_assert_eq(pthread_create(&t, NULL, flooding_runner, &fd), 0);
        usleep(100000); /* the hub is busy with the flood by now */
        fd2 = fake_runner_on(h, "u1", "s2");
        served = hub_wait(h, "u1", "s2", 5000);
        flood_stop = 1;
        shutdown(fd, SHUT_RDWR);
        pthread_join(t, NULL);
        close(fd);
        close(fd2);
        cr_assert(served, "another session's runner was not served while one runner flooded the hub");
        cr_assert_eq(lost_count(), 0, "valid frames are not a protocol error");
}

struct stuck {
        struct hub *hub;
        int fd;
};

/* Keeps a runner that never reads alive: a pong every 50 ms. */
static void *pong_only_runner(void *ud)
{
        struct stuck *st = ud;
        struct rp_hdr pong = {.type = RP_PONG};

        while (!flood_stop) {
                if (write(st->fd, &pong, sizeof(pong)) < 0)
                        break;
                usleep(50000);
        }
        return NULL;
}

/* Fills the stuck runner's socket: the writer holds its write lock until
 * its deadline. */
static void *big_writer(void *ud)
{
        struct stuck *st = ud;
        size_t len = 32u << 20;
        char *data = calloc(1, len);

        if (data)
                (void)hub_file_write(st->hub, "u9", "s1", "/workspace/big", data, len, 10000);
        free(data);
        return NULL;
}

/* A runner that never reads, while the daemon writes to it, must not keep
 * the hub thread (its heartbeat) from the other sessions' runners. */
Test(hub_ops, a_runner_that_never_reads_does_not_block_the_hub)
{
        struct sbx_config cfg2 = cfg;
        struct sbx_error err = {0};
        struct hub *hub = NULL;
        char tmpl[] = "/tmp/sbx-runner-ops2-XXXXXX", cmd[SBX_PATH_MAX + 16];
        struct stuck st;
        pthread_t keep, writer;
        bool served;
        int fd2;

        cr_assert_not_null(mkdtemp(tmpl));
        snprintf(cfg2.data_dir, sizeof(cfg2.data_dir), "%s", tmpl);
        cfg2.runner_heartbeat_ms = 100;
        cr_assert_eq(hub_new(&cfg2, &hub, &err), 0, "%s", err.msg);
        hub_set_peer_check(hub, any_peer);
        st.hub = hub;
        st.fd = fake_runner_on(hub, "u9", "s1");
        cr_assert(hub_wait(hub, "u9", "s1", 5000));
        flood_stop = 0;
        cr_assert_eq(pthread_create(&keep, NULL, pong_only_runner, &st), 0);
        cr_assert_eq(pthread_create(&writer, NULL, big_writer, &st), 0);
        usleep(300000); /* the writer is stuck and a ping has come due */
        fd2 = fake_runner_on(hub, "u9", "s2");
        served = hub_wait(hub, "u9", "s2", 1000); /* the writer's deadline is 2 s */
        flood_stop = 1;
        pthread_join(writer, NULL);
        pthread_join(keep, NULL);
        close(st.fd);
        close(fd2);
        hub_free(hub);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpl);
        cr_assert_eq(system(cmd), 0);
        cr_assert(served, "the hub thread waited on a runner that never reads");
}

/* ---- output floods: acknowledged by the hub, and fair to the other sessions ---- */

/* The next frame from the daemon on fd, its payload (up to cap bytes) in p;
 * false at end of stream or when none came within 10 s. */
static bool get_frame(int fd, struct rp_hdr *hdr, void *p, size_t cap)
{
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        size_t got = 0, want = sizeof(*hdr);
        char *dst = (char *)hdr;

        for (int part = 0; part < 2; part++) {
                while (got < want) {
                        ssize_t n;
                        if (poll(&pfd, 1, 10000) != 1)
                                return false;
                        n = read(fd, dst + got, want - got);
                        if (n <= 0)
                                return false;
                        got += (size_t)n;
                }
                if (part == 0) {
                        cr_assert_leq(hdr->len, cap, "a frame of %u bytes from the daemon", hdr->len);
                        dst = p;
                        got = 0;
                        want = hdr->len;
                }
        }
        return true;
}

/* Start an execution on the runner of user/sess (fd) and take its RP_EXEC:
 * the execution's tag. */
static uint32_t start_on(const char *sess, int fd, hub_output_fn fn, void *ud, struct hub_exec **ret)
{
        const char *argv[] = {"true", NULL};
        struct hub_exec_spec spec = {.workdir = "/workspace", .argv = argv};
        struct sbx_error err = {0};
        static char payload[4096];
        struct rp_hdr hdr;

        cr_assert_eq(hub_exec_start(h, "u1", sess, &spec, fn, ud, ret, &err), 0, "%s", err.msg);
        cr_assert(get_frame(fd, &hdr, payload, sizeof(payload)));
        cr_assert_eq(hdr.type, RP_EXEC);
        return hdr.tag;
}

static void end_on(int fd, uint32_t tag, struct hub_exec *x)
{
        struct rp_exit e = {0};
        struct runner_exit ex;
        struct sbx_error err = {0};

        put(fd, RP_EXIT, tag, &e, sizeof(e), NULL, 0);
        cr_assert_eq(hub_exec_wait(x, 10000, &ex, &err), 0, "%s", err.msg);
        hub_exec_free(x);
}

static atomic_ullong flood_bytes; /* delivered to the flooding execution's callback */

static void count_output(void *ud, int stream, const void *data, size_t len)
{
        (void)ud;
        (void)stream;
        (void)data;
        atomic_fetch_add(&flood_bytes, len);
}

/* The runner keeps at most RP_RETAIN_CAP unacknowledged bytes per stream
 * and stops reading its pipe when they are full. The hub acknowledges what
 * it delivered as it goes, with no thread waiting for the execution (its
 * waiter is not woken per frame to do it). */
Test(hub_ops, output_is_acknowledged_with_no_thread_waiting)
{
        static char chunk[RP_CHUNK];
        const uint64_t total = 64 * RP_CHUNK;
        struct hub_exec *x = NULL;
        struct rp_offsets o = {{0, 0}};
        struct rp_hdr hdr;
        int fd = fake_runner(), acks = 0;
        uint32_t tag, pid = 7;

        atomic_store(&flood_bytes, 0);
        tag = start_on("s1", fd, count_output, NULL, &x);
        put(fd, RP_STARTED, tag, &pid, sizeof(pid), NULL, 0);
        for (uint64_t sent = 0; sent < total; sent += RP_CHUNK)
                put(fd, RP_OUTPUT, tag, chunk, sizeof(chunk), NULL, 0);
        /* nobody calls hub_exec_wait meanwhile */
        while (o.off[0] + RP_RETAIN_CAP / 2 < total) {
                cr_assert(get_frame(fd, &hdr, &o, sizeof(o)),
                          "after %d acknowledgement(s) the runner still holds %" PRIu64 " of %" PRIu64
                          " bytes unacknowledged",
                          acks, total - o.off[0], total);
                cr_assert_eq(hdr.type, RP_ACK);
                cr_assert_eq(hdr.tag, tag);
                acks++;
        }
        cr_assert_leq(o.off[0], atomic_load(&flood_bytes), "acknowledged past what was delivered");
        end_on(fd, tag, x);
        close(fd);
}

static volatile int output_stop;

struct flood {
        int fd;
        uint32_t tag;
};

/* RP_OUTPUT frames of RP_CHUNK bytes as fast as the socket takes them. */
static void *output_flood(void *ud)
{
        static char frames[4][RP_HDR_LEN + RP_CHUNK];
        struct flood *f = ud;

        for (int i = 0; i < 4; i++) {
                struct rp_hdr hdr = {.len = RP_CHUNK, .type = RP_OUTPUT, .tag = f->tag};
                memcpy(frames[i], &hdr, sizeof(hdr));
        }
        while (!output_stop)
                if (write(f->fd, frames, sizeof(frames)) < 0)
                        break;
        return NULL;
}

static atomic_ullong flood_at_quiet; /* flood_bytes when the quiet session's frame was delivered */
static atomic_bool quiet_seen;

static void quiet_output(void *ud, int stream, const void *data, size_t len)
{
        (void)ud;
        (void)stream;
        (void)data;
        (void)len;
        atomic_store(&flood_at_quiet, atomic_load(&flood_bytes));
        atomic_store(&quiet_seen, true);
}

static bool flood_going(void)
{
        return atomic_load(&flood_bytes) >= 64 * RP_CHUNK;
}

static bool quiet_delivered(void)
{
        return atomic_load(&quiet_seen);
}

/* While one session's runner floods output without pause, another
 * session's frame is delivered within two turns of the hub: counted in the
 * flood's bytes delivered meanwhile, at most what is left of the turn under
 * way and one more (RUNNER_READ_ROUNDS buffers each), plus the one partial
 * buffer read before. A hub that read a connection until it ran dry would
 * deliver the flood for as long as the writer keeps up. */
Test(hub_ops, a_flooding_session_gets_its_budget_per_turn_and_no_more)
{
        const uint64_t buffer = RP_HDR_LEN + RP_MAX_FROM_RUNNER, bound = (2 * RUNNER_READ_ROUNDS + 1) * buffer;
        struct hub_exec *xa = NULL, *xb = NULL;
        struct flood f;
        pthread_t t;
        uint64_t before, meanwhile;
        bool delivered;
        int fdb;

        atomic_store(&flood_bytes, 0);
        atomic_store(&quiet_seen, false);
        f.fd = fake_runner();
        f.tag = start_on("s1", f.fd, count_output, NULL, &xa);
        fdb = fake_runner_on(h, "u1", "s2");
        cr_assert(hub_wait(h, "u1", "s2", 5000));
        uint32_t tb = start_on("s2", fdb, quiet_output, NULL, &xb);
        output_stop = 0;
        cr_assert_eq(pthread_create(&t, NULL, output_flood, &f), 0);
        cr_assert(wait_for(flood_going), "the flood never reached the hub");
        before = atomic_load(&flood_bytes);
        put(fdb, RP_OUTPUT, tb, "x", 1, NULL, 0);
        delivered = wait_for(quiet_delivered);
        meanwhile = atomic_load(&flood_at_quiet) - before;
        output_stop = 1;
        end_on(fdb, tb, xb);
        shutdown(f.fd, SHUT_RDWR);
        pthread_join(t, NULL);
        hub_exec_free(xa);
        close(f.fd);
        close(fdb);
        cr_assert(delivered, "the quiet session's output was never delivered during the flood");
        cr_assert_leq(meanwhile, bound,
                      "the hub delivered %" PRIu64
                      " bytes of the flood before the other session's frame (at most %" PRIu64
                      ": two turns of %d buffers)",
                      meanwhile, bound, RUNNER_READ_ROUNDS);
        cr_assert_eq(lost_count(), 0);
}
