/* Integration tests of who may be a session's runner (real dockerd): tenant
 * code that dials runner.sock and speaks the runner's hello while the
 * daemon restarts is never taken for the runner, and tenant connections to
 * fwd.sock never lock the runner's forwards out (hub_peer.h). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "sandboxd/exec.h"
#include "sandboxd/service.h"
#include "sandboxd/session.h"
#include "testenv.h"

TestSuite(impostor, .timeout = 600);

#define RESTARTS 20

static struct sbx_config cfg;

/* Tenant code: dial runner.sock every 2 ms and say the runner's hello
 * (protocol 2, then an empty job list). A connection the daemon keeps is
 * served like a runner would: pings answered, and every execution sent to
 * it "runs" with forged output. It counts its dials, the connections the
 * daemon closed, and the frames it was sent (each is a win for it). */
static const char impostor_py[] =
        "import os, socket, struct, time\n"
        "def fr(t, p=b'', tag=0): return struct.pack('=IHHI', len(p), t, 0, tag) + p\n"
        "hello = fr(1, struct.pack('=II', 2, os.getpid()) + b'sandboxd-runner/1') + fr(14)\n"
        "dials = closed = won = 0\n"
        "def note():\n"
        "    with open('/workspace/impostor.tmp', 'w') as f: f.write('%d %d %d\\n' % (dials, closed, won))\n"
        "    os.rename('/workspace/impostor.tmp', '/workspace/impostor.stats')\n"
        "while True:\n"
        "    dials += 1\n"
        "    if dials % 50 == 1: note()\n"
        "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "    try:\n"
        "        s.connect('/run/sandboxd/runner.sock'); s.sendall(hello)\n"
        "    except OSError:\n"
        "        s.close(); time.sleep(0.002); continue\n"
        "    buf = b''\n"
        "    while True:\n"
        "        try: d = s.recv(65536)\n"
        "        except OSError: d = b''\n"
        "        if not d: break\n"
        "        buf += d\n"
        "        while len(buf) >= 12:\n"
        "            n, t, fl, tag = struct.unpack('=IHHI', buf[:12])\n"
        "            if len(buf) < 12 + n: break\n"
        "            buf = buf[12 + n:]\n"
        "            won += 1; note()\n"
        "            try:\n"
        "                if t == 11: s.sendall(fr(12))\n"
        "                elif t == 2: s.sendall(fr(3, struct.pack('=I', 4242), tag) + fr(4, b'forged\\n', tag) +\n"
        "                                       fr(9, struct.pack('=iiQQQ', 0, 0, 0, 0, 0), tag))\n"
        "            except OSError: pass\n"
        "    closed += 1\n"
        "    s.close(); time.sleep(0.002)\n";

struct round_result {
        int r, exit_code;
        char state[16], via[16], runtime[32], image[128];
        char out[64];
        char cid[65]; /* the session's container */
};

/* The child: one daemon on the shared data_dir. Round 0 starts the
 * impostor (a long execution: it outlives every restart). Each round then
 * runs its own echo, reports how it ran, and waits to be killed. No
 * assertion here. */
static void child_daemon(int fd, int round)
{
        struct round_result res = {0};
        struct daemon *cd;
        char cmd[64];

        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test, whatever fails there */
        cd = fixture_open(&cfg, false);
        if (round == 0) {
                char *setup = NULL;
                struct exec_request req = {.user = "u1",
                                           .session = "s1",
                                           .command = "exec python3 /workspace/impostor.py",
                                           .timeout_s = 3600,
                                           .actor = "test"};
                char id[37];
                if (asprintf(&setup, "cat > /workspace/impostor.py <<'EOF'\n%sEOF\n", impostor_py) < 0)
                        _exit(1);
                struct exec_request w = {.user = "u1", .session = "s1", .command = setup, .actor = "test"};
                struct exec_result wr;
                if (exec_run(cd->exec, &w, &wr, NULL) < 0)
                        _exit(2);
                exec_result_done(&wr);
                free(setup);
                if (exec_start(cd->exec, &req, id, NULL) < 0)
                        _exit(3);
        }
        snprintf(cmd, sizeof(cmd), "echo real-%d", round);
        struct exec_request req = {.user = "u1", .session = "s1", .command = cmd, .timeout_s = 60, .actor = "test"};
        struct exec_result er;
        struct sbx_error err = {0};
        res.r = exec_run(cd->exec, &req, &er, &err);
        if (res.r == 0) {
                struct session *s = NULL;
                if (session_acquire(cd->sessions, "u1", "s1", &s, NULL) == 0) {
                        session_container_id(s, res.cid);
                        session_release(s);
                }
                res.exit_code = er.exit_code;
                snprintf(res.state, sizeof(res.state), "%s", exec_state_to_string(er.state));
                snprintf(res.via, sizeof(res.via), "%s", er.via);
                snprintf(res.runtime, sizeof(res.runtime), "%s", er.runtime);
                snprintf(res.image, sizeof(res.image), "%s", er.image);
                snprintf(res.out, sizeof(res.out), "%.*s", (int)er.stdout_head_len, er.stdout_head);
                exec_result_done(&er);
        }
        (void)!write(fd, &res, sizeof(res));
        pause();
        _exit(0);
}

/* The impostor's counters, read through docker exec (never the runner). */
static void impostor_stats(const char *cid, long *dials, long *closed, long *won)
{
        char *out = NULL;
        *dials = *closed = *won = -1;
        if (fixture_sh(cid, "cat /workspace/impostor.stats 2>/dev/null", &out) == 0 && out)
                (void)sscanf(out, "%ld %ld %ld", dials, closed, won);
        free(out);
}

static bool impostor_dialing(void *ud)
{
        long dials, closed, won;
        impostor_stats(ud, &dials, &closed, &won);
        return dials > 0;
}

Test(impostor, a_tenant_dialing_runner_sock_through_20_restarts_is_never_the_runner)
{
        char cid[65] = "", image[128] = "";
        long dials = 0, closed = 0, won = 0;

        (void)testenv_docker(); /* the atexit cleanup of this run's containers, in this process */
        fixture_config(&cfg);
        snprintf(cfg.image, sizeof(cfg.image), "%s", TESTENV_PYTHON_IMAGE);
        cfg.memory_bytes = 256 << 20;
        for (int round = 0; round <= RESTARTS; round++) {
                struct round_result res;
                int pipefd[2];
                pid_t pid;

                cr_assert_eq(pipe(pipefd), 0);
                pid = fork(); /* this process never starts a thread: each daemon is a child */
                cr_assert_geq(pid, 0, "fork: %m");
                if (pid == 0)
                        child_daemon(pipefd[1], round);
                close(pipefd[1]);
                ssize_t n = read(pipefd[0], &res, sizeof(res));
                close(pipefd[0]);
                kill(pid, SIGKILL); /* the next round restarts it on the same data_dir */
                waitpid(pid, NULL, 0);
                cr_assert_eq(n, (ssize_t)sizeof(res), "round %d: the child daemon died", round);
                cr_assert_eq(res.r, 0, "round %d: exec_run failed (%d)", round, res.r);
                if (round == 0) {
                        /* the container is up: its impostor dials before the first restart */
                        snprintf(cid, sizeof(cid), "%s", res.cid);
                        cr_assert_eq(strlen(cid), 64, "the session's container: '%s'", cid);
                        cr_assert(TESTENV_WAIT_UNTIL(impostor_dialing(cid), 20000), "the impostor never dialed");
                        snprintf(image, sizeof(image), "%s", res.image);
                        cr_assert(image[0], "round 0 has no image in its provenance");
                }
                char want[32];
                snprintf(want, sizeof(want), "real-%d\n", round);
                cr_assert_str_eq(res.cid, cid, "round %d: another container", round);
                cr_assert_str_eq(res.out, want, "round %d: stdout '%s' (via %s), not the real command's", round,
                                 res.out, res.via);
                cr_assert_str_eq(res.state, "COMPLETED", "round %d", round);
                cr_assert_eq(res.exit_code, 0, "round %d", round);
                cr_assert_str_eq(res.via, "runner", "round %d", round);
                cr_assert_str_eq(res.runtime, "runc", "round %d", round);
                cr_assert_str_eq(res.image, image, "round %d: image %s, was %s", round, res.image, image);
                impostor_stats(cid, &dials, &closed, &won);
                cr_assert_eq(won, 0, "round %d: the impostor was sent %ld frames", round, won);
        }
        /* it really reached the daemon: connections it made were closed on it */
        cr_assert(TESTENV_WAIT_UNTIL((impostor_stats(cid, &dials, &closed, &won), dials > 100), 20000),
                  "the impostor dialed %ld times", dials);
        cr_log_info("the impostor dialed %ld times; the daemon closed %ld of them and sent it %ld frames", dials,
                    closed, won);
        cr_assert_gt(closed, 0, "no dial reached a listening daemon (%ld dials)", dials);
        cr_assert_eq(won, 0);
}

/* Tenant code that keeps 16 connections to fwd.sock open that never say
 * what they are (each closed one dialled again 2 ms later): on main they
 * held every pending slot, so the runner's data connections were refused
 * and no forward went through. */
static const char fwd_squatter_py[] =
        "import socket, time, os\n"
        "conns = []; dials = closed = loops = 0\n"
        "while True:\n"
        "    while len(conns) < 16:\n"
        "        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "        try: s.connect('/run/sandboxd/fwd.sock')\n"
        "        except OSError: s.close(); break\n"
        "        s.setblocking(False); conns.append(s); dials += 1\n"
        "    for s in conns[:]:\n"
        "        try: gone = s.recv(1) == b''\n"
        "        except BlockingIOError: gone = False\n"
        "        except OSError: gone = True\n"
        "        if gone: closed += 1; conns.remove(s); s.close()\n"
        "    loops += 1\n"
        "    if loops % 50 == 1:\n"
        "        with open('/workspace/squatter.tmp', 'w') as f: f.write('%d %d\\n' % (dials, closed))\n"
        "        os.rename('/workspace/squatter.tmp', '/workspace/squatter.stats')\n"
        "    time.sleep(0.002)\n";

static const char echo_server[] =
        "python3 -c \"import asyncio\n"
        "async def h(r,w):\n"
        " while True:\n"
        "  b=await r.read(4096)\n"
        "  if not b: break\n"
        "  w.write(b); await w.drain()\n"
        " w.close()\n"
        "async def m():\n"
        " s=await asyncio.start_server(h,'127.0.0.1',8000)\n"
        " await s.serve_forever()\n"
        "asyncio.run(m())\"";

static struct daemon *d;

/* "ping" echoed through a new forward on *(int *)ud, each wait bounded. */
static bool echo_answers(void *ud)
{
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t) * (int *)ud),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        char buf[4];
        size_t got = 0;

        if (fd < 0)
                return false;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && send(fd, "ping", 4, MSG_NOSIGNAL) == 4)
                while (got < 4) {
                        struct pollfd p = {.fd = fd, .events = POLLIN};
                        ssize_t n;
                        if (poll(&p, 1, 5000) <= 0 || (n = read(fd, buf + got, 4 - got)) <= 0)
                                break;
                        got += (size_t)n;
                }
        close(fd);
        return got == 4 && memcmp(buf, "ping", 4) == 0;
}

static void squatter_stats(const char *cid, long *dials, long *closed)
{
        char *out = NULL;
        *dials = *closed = -1;
        if (fixture_sh(cid, "cat /workspace/squatter.stats 2>/dev/null", &out) == 0 && out)
                (void)sscanf(out, "%ld %ld", dials, closed);
        free(out);
}

static bool squatting(void *ud)
{
        long dials, closed;
        squatter_stats(ud, &dials, &closed);
        return dials >= 16;
}

Test(impostor, tenant_connections_to_fwd_sock_never_lock_the_forwards_out)
{
        struct exec_request req = {.user = "u1",
                                   .session = "s1",
                                   .command = "exec python3 /workspace/squatter.py",
                                   .timeout_s = 600,
                                   .actor = "test"};
        struct sbx_error err = {0};
        struct session_info info;
        char cid[65], id[37], *setup = NULL;
        long dials, closed;
        int port;

        fixture_config(&cfg);
        snprintf(cfg.image, sizeof(cfg.image), "%s", TESTENV_PYTHON_IMAGE);
        cfg.memory_bytes = 256 << 20;
        cfg.forward_max_per_session = 4; /* the pending slots of fwd.sock: as many */
        d = fixture_open(&cfg, false);
        cr_assert_neq(asprintf(&setup, "cat > /workspace/squatter.py <<'EOF'\n%sEOF\n", fwd_squatter_py), -1);
        free(fixture_run(d, "s1", setup, 60, NULL));
        free(setup);
        fixture_container_of(d, "u1", "s1", cid);
        cr_assert_eq(service_start(d->services, "u1", "s1", "echo", echo_server, NULL, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(session_get_info(d->sessions, "u1", "s1", &info), 0);
        cr_assert_gt(info.n_ports, 0, "the session has no port block");
        port = info.ports[0];
        session_info_done(&info);
        cr_assert(testenv_wait_until(echo_answers, &port, 30000), "the echo server never answered on port %d", port);

        cr_assert_eq(exec_start(d->exec, &req, id, NULL), 0);
        cr_assert(testenv_wait_until(squatting, cid, 20000), "the squatter never held its 16 connections");
        for (int i = 0; i < 20; i++)
                cr_assert(echo_answers(&port), "forward %d was not served while tenant code dialled fwd.sock", i);
        /* its counters are written every 50 rounds of its loop */
        cr_assert(TESTENV_WAIT_UNTIL((squatter_stats(cid, &dials, &closed), closed > 0), 20000),
                  "none of its %ld connections was refused", dials);
        cr_log_info("the squatter dialed fwd.sock %ld times, %ld were closed on it", dials, closed);
        daemon_close(d);
}
