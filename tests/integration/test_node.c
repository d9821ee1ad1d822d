/* test_node.c — the node link (node.h) with `sandboxd node` as a separate
 * process on this host, over TLS on loopback: executions through it, a
 * node agent SIGKILLed and started again, a revoked certificate (and a
 * CRL that changes), and a stream from an old session epoch. Real dockerd,
 * real sqlite, real TLS (the openssl CLI makes the PKI). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "nodeenv.h"
#include "sandboxd/daemon.h"
#include "sandboxd/exec.h"
#include "sandboxd/metrics.h"
#include "sandboxd/node.h"
#include "sandboxd/privacy.h"
#include "sandboxd/hub.h"
#include "sandboxd/hub_dir.h"
#include "sandboxd/runner_proto.h"
#include "sandboxd/service.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/store_egress.h"
#include "testenv.h"

TestSuite(node, .timeout = 300);

static struct sbx_config cfg;
static struct daemon *d;
static char *pki;
static char node_dir[SBX_PATH_MAX];

static void open_with_node(void)
{
        fixture_config(&cfg);
        pki = nodeenv_pki();
        nodeenv_config_control(&cfg, pki);
        snprintf(node_dir, sizeof(node_dir), "%s/../node", cfg.data_dir);
        d = fixture_open(&cfg, false);
        cr_assert_not_null(d->node, "the daemon has no node link");
}

static bool connected(void *ud)
{
        (void)ud;
        return node_server_connected(d->node, NULL, 0);
}

static bool refused_once(void *ud)
{
        (void)ud;
        return node_server_refused(d->node) >= 1;
}

static void wait_final(const char *id, struct exec_result *res)
{
        for (int i = 0; i < 12; i++) {
                cr_assert_eq(exec_status(d->exec, "u1", id, -1, -1, 0, 10000, res, NULL), 0, "no execution %s", id);
                if (exec_state_is_final(res->state))
                        return;
                exec_result_done(res);
        }
        cr_assert_fail("execution %s did not end", id);
}

static bool stdout_has(const char *id, const char *needle)
{
        struct exec_result res;
        if (exec_status(d->exec, "u1", id, 0, -1, 1 << 20, 0, &res, NULL) < 0)
                return false;
        bool found =
                res.stdout_head_len > 0 && memmem(res.stdout_head, res.stdout_head_len, needle, strlen(needle)) != NULL;
        exec_result_done(&res);
        return found;
}

Test(node, exec_and_run_go_through_a_separate_node_agent)
{
        struct exec_result res;
        char hash[33], path[SBX_PATH_MAX];
        struct stat st;
        int code = -1;

        open_with_node();
        (void)nodeenv_start(&cfg, pki, "node1", node_dir);
        cr_assert(TESTENV_WAIT_UNTIL(connected(NULL), 30000), "the node agent never connected");
        char *out = fixture_run(d, "s1", "echo hello from the node", 0, &code);
        cr_assert_eq(code, 0);
        cr_assert_str_eq(out, "hello from the node\n");
        free(out);

        struct exec_request req = {.user = "u1", .session = "s1", .command = "echo again", .actor = "test"};
        cr_assert_eq(exec_run(d->exec, &req, &res, NULL), 0);
        cr_assert_str_eq(res.via, "runner", "the execution did not go through the runner: %s", res.via);
        exec_result_done(&res);

        /* the session's directory and socket are the node agent's, not the daemon's */
        cr_assert_eq(hub_dir_key("u1", "s1", hash), 0);
        snprintf(path, sizeof(path), "%s/runner/%s/" RP_SOCKET_NAME, node_dir, hash);
        cr_assert_eq(stat(path, &st), 0, "no runner socket in the node agent's directory");
        cr_assert(S_ISSOCK(st.st_mode));
        snprintf(path, sizeof(path), "%s/runner/%s", cfg.data_dir, hash);
        cr_assert_neq(stat(path, &st), 0, "the daemon made the session directory itself");
        daemon_close(d);
}

Test(node, executions_survive_a_node_agent_sigkilled_and_started_again)
{
        struct exec_request req = {.user = "u1",
                                   .session = "s1",
                                   .command =
                                           "echo before; while [ ! -e /workspace/go ]; do sleep 0.1; done; "
                                           "echo after",
                                   .actor = "test"};
        struct exec_result res;
        char id[37];
        int code = -1;

        open_with_node();
        pid_t pid = nodeenv_start(&cfg, pki, "node1", node_dir);
        cr_assert(TESTENV_WAIT_UNTIL(connected(NULL), 30000), "the node agent never connected");
        cr_assert_eq(exec_start(d->exec, &req, id, NULL), 0);
        cr_assert(TESTENV_WAIT_UNTIL(stdout_has(id, "before"), 30000), "the execution never printed");

        nodeenv_kill(pid, SIGKILL);
        cr_assert(TESTENV_WAIT_UNTIL(!connected(NULL), 30000), "the daemon never saw the node agent go");
        cr_assert(fixture_exec_running(d, "u1", id), "the execution ended when its node agent died");
        (void)nodeenv_start(&cfg, pki, "node1", node_dir);
        cr_assert(TESTENV_WAIT_UNTIL(connected(NULL), 30000), "the node agent never came back");

        /* a second execution reaches the same runner (through the new agent) and releases the first */
        char *out = fixture_run(d, "s1", "touch /workspace/go && echo released", 0, &code);
        cr_assert_eq(code, 0);
        cr_assert_str_eq(out, "released\n");
        free(out);
        wait_final(id, &res);
        cr_assert_eq(res.state, EXEC_COMPLETED, "state %s: %s", exec_state_to_string(res.state), res.error);
        cr_assert_eq(res.stdout_head_len, 13);
        cr_assert(memcmp(res.stdout_head, "before\nafter\n", 13) == 0, "stdout: %.*s", (int)res.stdout_head_len,
                  res.stdout_head);
        exec_result_done(&res);
        daemon_close(d);
}

Test(node, a_revoked_certificate_is_refused_and_the_crl_is_read_again_when_it_changes)
{
        open_with_node();
        pid_t bad = nodeenv_start(&cfg, pki, "node2", node_dir); /* revoked in crl.pem */
        cr_assert(TESTENV_WAIT_UNTIL(refused_once(NULL), 30000), "the revoked node was never refused");
        cr_assert_not(connected(NULL), "a revoked node agent was connected");
        nodeenv_kill(bad, SIGKILL);

        pid_t good = nodeenv_start(&cfg, pki, "node1", node_dir);
        cr_assert(TESTENV_WAIT_UNTIL(connected(NULL), 30000), "a valid node agent was refused");
        nodeenv_kill(good, SIGKILL);
        cr_assert(TESTENV_WAIT_UNTIL(!connected(NULL), 30000));

        /* node1 revoked now: the new CRL file is read at the next handshake */
        uint64_t before = node_server_refused(d->node);
        nodeenv_revoke(pki, "node1");
        good = nodeenv_start(&cfg, pki, "node1", node_dir);
        cr_assert(TESTENV_WAIT_UNTIL(node_server_refused(d->node) > before, 30000),
                  "a node revoked after the daemon started was never refused");
        cr_assert_not(connected(NULL), "a node revoked by the new CRL was connected");
        nodeenv_kill(good, SIGKILL);
        daemon_close(d);
}

/* A runner's hello, as the runner in a container sends it. */
static void send_hello(int fd)
{
        struct rp_hdr h = {.len = sizeof(struct rp_hello) + 4, .type = RP_HELLO};
        struct rp_hello hello = {.protocol = RP_PROTOCOL, .pid = 1};
        unsigned char buf[sizeof(h) + sizeof(hello) + 4];
        memcpy(buf, &h, sizeof(h));
        memcpy(buf + sizeof(h), &hello, sizeof(hello));
        memcpy(buf + sizeof(h) + sizeof(hello), "test", 4);
        cr_assert_eq(send(fd, buf, sizeof(buf), MSG_NOSIGNAL), (ssize_t)sizeof(buf));
}

static bool audit_has(const char *action)
{
        int64_t n = 0;
        return store_audit_count(d->store, "u1", "s9", action, &n) == 0 && n > 0;
}

static bool hub_connected(void *ud)
{
        (void)ud;
        return hub_wait(d->runner, "u1", "s9", 0);
}

Test(node, a_stream_from_an_old_epoch_is_refused_with_an_audit_row)
{
        struct sbx_config ncfg;
        struct node_client *nc = NULL;
        struct sbx_error err = {0};
        char dir[SBX_PATH_MAX];
        uint64_t epoch = 0;
        int sv[2];

        open_with_node();
        /* a bare node (node3) that answers every request and opens the streams the test asks for */
        nodeenv_config_node(&ncfg, &cfg, pki, "node3", node_dir);
        cr_assert_eq(node_client_connect(&ncfg, &nc, &err), 0, "%s", err.msg);
        cr_assert(TESTENV_WAIT_UNTIL(connected(NULL), 30000));
        /* a container made, then made again: two epochs */
        cr_assert_eq(hub_prepare(d->runner, "u1", "s9", dir, &err), 0, "%s", err.msg);
        cr_assert_eq(hub_prepare(d->runner, "u1", "s9", dir, &err), 0, "%s", err.msg);
        cr_assert_eq(store_epoch_get(d->store, "u1", "s9", &epoch), 0);
        cr_assert_eq(epoch, 2);

        /* the old epoch: refused, with an audit row, and the connection closed */
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        cr_assert_eq(node_client_open(nc, "u1", "s9", 1, sv[1]), 0);
        cr_assert(TESTENV_WAIT_UNTIL(audit_has("node_epoch_refused"), 30000), "no audit row for the old epoch");
        struct pollfd p = {.fd = sv[0], .events = POLLIN};
        char b;
        cr_assert_eq(poll(&p, 1, 30000), 1);
        cr_assert_eq(recv(sv[0], &b, 1, 0), 0, "the refused stream was not closed");
        close(sv[0]);
        cr_assert_not(hub_connected(NULL), "a runner from an old epoch is connected");

        /* the current epoch reaches the hub: a runner that says hello is connected */
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        cr_assert_eq(node_client_open(nc, "u1", "s9", 2, sv[1]), 0);
        send_hello(sv[0]);
        cr_assert(TESTENV_WAIT_UNTIL(hub_connected(NULL), 30000), "the runner of the current epoch never connected");
        close(sv[0]);
        daemon_close(d);
        node_client_free(nc);
}

/* One malformed frame from a node closes its link (and only it). */
static void malformed_closes_the_link(const void *frame, size_t len)
{
        struct sbx_config ncfg;
        struct node_client *nc = NULL;
        struct sbx_error err = {0};

        nodeenv_config_node(&ncfg, &cfg, pki, "node3", node_dir);
        cr_assert_eq(node_client_connect(&ncfg, &nc, &err), 0, "%s", err.msg);
        cr_assert(TESTENV_WAIT_UNTIL(connected(NULL), 30000));
        cr_assert_eq(node_client_send_raw(nc, frame, len), 0);
        cr_assert(TESTENV_WAIT_UNTIL(!connected(NULL), 30000), "the link outlived a malformed frame");
        node_client_free(nc);
}

Test(node, a_malformed_frame_closes_the_link)
{
        /* little endian: len, type, flags, stream */
        static const unsigned char oversized[12] = {0x01, 0x00, 0x01, 0x00, NF_DATA, 0, 0, 0, 1, 0, 0, 0};
        static const unsigned char unknown_type[12] = {0, 0, 0, 0, 99, 0, 0, 0, 0, 0, 0, 0};
        static const unsigned char flags_set[12] = {0, 0, 0, 0, NF_PING, 0, 1, 0, 0, 0, 0, 0};
        static const unsigned char short_open[16] = {4, 0, 0, 0, NF_OPEN, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0};

        open_with_node();
        malformed_closes_the_link(oversized, sizeof(oversized)); /* 65537 bytes announced */
        malformed_closes_the_link(unknown_type, sizeof(unknown_type));
        malformed_closes_the_link(flags_set, sizeof(flags_set));
        malformed_closes_the_link(short_open, sizeof(short_open));
        daemon_close(d);
}

/* A frame of type, stream and payload as a node would put it on the link. */
static size_t frame(unsigned char *buf, uint16_t type, uint32_t stream, const void *p, uint32_t len)
{
        struct node_hdr h = {.len = htole32(len), .type = htole16(type), .stream = htole32(stream)};
        memcpy(buf, &h, NODE_HDR_LEN);
        memcpy(buf + NODE_HDR_LEN, p, len);
        return NODE_HDR_LEN + len;
}

static size_t published_open(unsigned char *buf, uint32_t kind, uint32_t port, uint32_t stream)
{
        struct node_open o = {.kind = htole32(kind), .port = htole32(port), .epoch = htole64(1)};
        snprintf(o.user, sizeof(o.user), "u1");
        snprintf(o.session, sizeof(o.session), "s1");
        return frame(buf, NF_OPEN, stream, &o, sizeof(o));
}

Test(node, malformed_published_streams_and_connect_results_close_the_link)
{
        unsigned char buf[NODE_HDR_LEN + 256];
        int32_t ok = 0;
        uint64_t big = 0;

        open_with_node();
        /* a published port's stream: port 0, past 65535; a port on a stream of another kind */
        malformed_closes_the_link(buf, published_open(buf, NODE_STREAM_PUBLISHED, 0, 7));
        malformed_closes_the_link(buf, published_open(buf, NODE_STREAM_PUBLISHED, 70000, 7));
        malformed_closes_the_link(buf, published_open(buf, NODE_STREAM_RUNNER, 8000, 7));
        /* a node opens no connect, nor any stream with an id of the control's */
        malformed_closes_the_link(buf, published_open(buf, NODE_STREAM_CONNECT, 0, 7));
        malformed_closes_the_link(buf, published_open(buf, NODE_STREAM_RUNNER, 0, NODE_STREAM_CONTROL | 7));
        /* a connect's result: oversized, for a stream id of the node's, or positive */
        malformed_closes_the_link(buf, frame(buf, NF_CONNECTED, NODE_STREAM_CONTROL | 1, &big, sizeof(big)));
        malformed_closes_the_link(buf, frame(buf, NF_CONNECTED, 7, &ok, sizeof(ok)));
        int32_t positive = (int32_t)htole32(5);
        malformed_closes_the_link(buf, frame(buf, NF_CONNECTED, NODE_STREAM_CONTROL | 1, &positive, sizeof(positive)));
        daemon_close(d);
}

static bool fenced(void *ud)
{
        int64_t n = 0;
        (void)ud;
        return store_audit_count(d->store, NULL, NULL, "node_fenced", &n) == 0 && n > 0;
}

Test(node, a_node_gone_past_node_fence_fences_its_sessions)
{
        /* timeout_s: the test's own bound, not exec.timeout_default (a hidden deadline under load) */
        struct exec_request req = {
                .user = "u1", .session = "s1", .command = "echo before; sleep 600", .timeout_s = 600, .actor = "test"};
        struct exec_result res;
        uint64_t epoch_before = 0, epoch_after = 0;
        char id[37];

        fixture_config(&cfg);
        pki = nodeenv_pki();
        nodeenv_config_control(&cfg, pki);
        cfg.node_fence_ms = 2000;
        snprintf(node_dir, sizeof(node_dir), "%s/../node", cfg.data_dir);
        d = fixture_open(&cfg, false);
        pid_t pid = nodeenv_start(&cfg, pki, "node1", node_dir);
        cr_assert(TESTENV_WAIT_UNTIL(connected(NULL), 30000), "the node agent never connected");
        cr_assert_eq(exec_start(d->exec, &req, id, NULL), 0);
        cr_assert(TESTENV_WAIT_UNTIL(stdout_has(id, "before"), 30000), "the execution never printed");
        cr_assert_eq(store_epoch_get(d->store, "u1", "s1", &epoch_before), 0);

        nodeenv_kill(pid, SIGKILL); /* and never back */
        cr_assert(TESTENV_WAIT_UNTIL(fenced(NULL), 30000), "no node_fenced audit row");
        wait_final(id, &res);
        cr_assert_eq(res.state, EXEC_FAILED, "state %s", exec_state_to_string(res.state));
        exec_result_done(&res);
        cr_assert_eq(store_epoch_get(d->store, "u1", "s1", &epoch_after), 0);
        cr_assert_gt(epoch_after, epoch_before, "the fenced session kept its epoch");
        daemon_close(d);
}

/* ---- the published ports and the egress proxy's connects are the node's ---- */

/* The inode of the TCP socket with this local address (and, if rport, this
 * remote port) in state st (0A: listening, 01: established), or 0. */
static unsigned long tcp_inode(const char *ip, int port, int rport, const char *st)
{
        struct in_addr a;
        char want[32], line[512];
        unsigned long inode = 0;
        FILE *f = fopen("/proc/net/tcp", "re");

        cr_assert_not_null(f);
        cr_assert_eq(inet_pton(AF_INET, ip, &a), 1);
        snprintf(want, sizeof(want), "%08X:%04X", a.s_addr, port);
        while (!inode && fgets(line, sizeof(line), f)) {
                char local[64], remote[64], state[8];
                unsigned long ino;
                if (sscanf(line, " %*d: %63s %63s %7s %*s %*s %*s %*s %*s %lu", local, remote, state, &ino) != 4)
                        continue;
                int rp = (int)strtol(strchr(remote, ':') + 1, NULL, 16);
                if (strcmp(local, want) == 0 && strcmp(state, st) == 0 && (!rport || rp == rport))
                        inode = ino;
        }
        fclose(f);
        return inode;
}

/* Whether process pid holds socket inode among its descriptors. */
static bool owns_socket(pid_t pid, unsigned long inode)
{
        char dir[64], path[384], link[128], want[64];
        struct dirent *e;
        bool found = false;
        DIR *dp;

        snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
        snprintf(want, sizeof(want), "socket:[%lu]", inode);
        dp = opendir(dir);
        if (!dp)
                return false;
        while (!found && (e = readdir(dp))) {
                ssize_t n;
                snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
                n = readlink(path, link, sizeof(link) - 1);
                if (n <= 0)
                        continue;
                link[n] = '\0';
                found = strcmp(link, want) == 0;
        }
        closedir(dp);
        return found;
}

static int connect_to(const char *ip, int port)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        cr_assert_eq(inet_pton(AF_INET, ip, &sa.sin_addr), 1);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

struct http_probe {
        const char *ip;
        int port;
};

static bool http_answers(void *ud)
{
        struct http_probe *p = ud;
        static const char req[] = "GET / HTTP/1.0\r\n\r\n";
        char buf[16] = "";
        size_t got = 0;
        int fd = connect_to(p->ip, p->port);

        if (fd < 0)
                return false;
        if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)sizeof(req) - 1) {
                while (got < 12) {
                        struct pollfd pf = {.fd = fd, .events = POLLIN};
                        ssize_t n;
                        if (poll(&pf, 1, 2000) <= 0 || (n = read(fd, buf + got, 12 - got)) <= 0)
                                break;
                        got += (size_t)n;
                }
        }
        close(fd);
        return strncmp(buf, "HTTP/1.0 200", 12) == 0;
}

static int session_port(const char *session)
{
        struct session_info info;
        cr_assert_eq(session_get_info(d->sessions, "u1", session, &info), 0);
        cr_assert_gt(info.n_ports, 0, "the session has no port block");
        int port = info.ports[0];
        session_info_done(&info);
        return port;
}

/* cfg made by fixture_config (and then changed) already */
static pid_t open_with_node_publishing(void)
{
        snprintf(cfg.image, sizeof(cfg.image), "%s", TESTENV_PYTHON_IMAGE);
        snprintf(cfg.network_default, sizeof(cfg.network_default), "none");
        snprintf(cfg.publish_ip, sizeof(cfg.publish_ip), "127.0.0.1");
        cfg.memory_bytes = 256 << 20;
        pki = nodeenv_pki();
        nodeenv_config_control(&cfg, pki);
        snprintf(node_dir, sizeof(node_dir), "%s/../node", cfg.data_dir);
        d = fixture_open(&cfg, false);
        cr_assert_not_null(d->node, "the daemon has no node link");
        /* the node's own address: a published port must answer there, not on the control's */
        pid_t pid = nodeenv_start_conf(&cfg, pki, "node1", node_dir, "publish_ip = 127.0.0.3\n");
        cr_assert(TESTENV_WAIT_UNTIL(connected(NULL), 30000), "the node agent never connected");
        return pid;
}

Test(node, a_published_port_listens_on_the_node_agent_and_comes_back_after_a_sigkill)
{
        struct sbx_error err = {0};
        int code = -1;

        fixture_config(&cfg);
        pid_t agent = open_with_node_publishing();
        free(fixture_run(d, "p", "true", 0, &code));
        cr_assert_eq(code, 0);
        cr_assert_eq(service_start(d->services, "u1", "p", "web", "python3 -m http.server 8000 --bind 127.0.0.1", NULL,
                                   NULL, &err),
                     0, "%s", err.msg);
        int port = session_port("p");
        struct http_probe on_node = {"127.0.0.3", port};
        cr_assert_geq(fixture_wait(http_answers, &on_node, 30000), 0, "nothing answered on 127.0.0.3:%d", port);

        /* the listening socket is the node agent's, and nobody listens on the control's publish_ip */
        unsigned long ino = tcp_inode("127.0.0.3", port, 0, "0A");
        cr_assert_neq(ino, 0, "no socket listens on 127.0.0.3:%d", port);
        cr_assert(owns_socket(agent, ino), "the listener on 127.0.0.3:%d is not the node agent's", port);
        cr_assert_not(owns_socket(getpid(), ino), "the control daemon holds the node's listener");
        cr_assert_eq(tcp_inode("127.0.0.1", port, 0, "0A"), 0, "the control daemon listens on 127.0.0.1:%d", port);

        /* the node agent SIGKILLed and started again: the port comes back on it */
        nodeenv_kill(agent, SIGKILL);
        cr_assert(TESTENV_WAIT_UNTIL(!connected(NULL), 30000), "the daemon never saw the node agent go");
        agent = nodeenv_start_conf(&cfg, pki, "node1", node_dir, "publish_ip = 127.0.0.3\n");
        cr_assert(TESTENV_WAIT_UNTIL(connected(NULL), 30000), "the node agent never came back");
        cr_assert_geq(fixture_wait(http_answers, &on_node, 30000), 0, "port %d did not come back on the node", port);
        ino = tcp_inode("127.0.0.3", port, 0, "0A");
        cr_assert(ino != 0 && owns_socket(agent, ino), "the restarted agent does not hold 127.0.0.3:%d", port);

        /* closing the forward (the ratchet) closes the node's listener before it returns */
        cr_assert_eq(privacy_mark(d->privacy, "u1", "p", "customers.csv", "crm", "test", &err), 0, "%s", err.msg);
        int fd = connect_to("127.0.0.3", port);
        if (fd >= 0)
                close(fd);
        cr_assert_eq(fd, -ECONNREFUSED, "127.0.0.3:%d still accepts after mark_private", port);
        cr_assert_eq(tcp_inode("127.0.0.3", port, 0, "0A"), 0, "the node still listens on %d", port);
        daemon_close(d);
}

/* A loopback upstream that notes who connected to it: the client end's
 * owner is looked up while the connection is open, then it answers. */
struct upstream {
        int lfd, port;
        pid_t agent;
        bool accepted, agent_owns, control_owns;
};

static void *upstream_main(void *ud)
{
        struct upstream *u = ud;
        struct sockaddr_in peer;
        socklen_t sl = sizeof(peer);
        struct pollfd pf = {.fd = u->lfd, .events = POLLIN};
        static const char resp[] = "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        char buf[4096];

        if (poll(&pf, 1, 120000) != 1)
                return NULL;
        int fd = accept4(u->lfd, (struct sockaddr *)&peer, &sl, SOCK_CLOEXEC);
        if (fd < 0)
                return NULL;
        u->accepted = true;
        unsigned long ino = tcp_inode("127.0.0.1", ntohs(peer.sin_port), u->port, "01");
        u->agent_owns = ino && owns_socket(u->agent, ino);
        u->control_owns = ino && owns_socket(getpid(), ino);
        pf.fd = fd;
        if (poll(&pf, 1, 30000) == 1 && read(fd, buf, sizeof(buf)) > 0)
                (void)!write(fd, resp, sizeof(resp) - 1);
        close(fd);
        return NULL;
}

Test(node, egress_connects_leave_from_the_node_agent_and_the_control_still_decides)
{
        struct sbx_error err = {0};
        struct store_egress_entry *rows = NULL;
        size_t n = 0;
        bool blocked_seen = false;
        struct upstream u = {0};
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t sl = sizeof(sa);
        pthread_t th;
        char cmd[1024];
        int code = -1;

        fixture_config(&cfg);
        cr_assert_eq(config_set(&cfg, "egress.allow", "up.test:*", &err), 0);
        cr_assert_eq(config_set(&cfg, "egress.resolve", "up.test=127.0.0.1, blocked.test=127.0.0.1", &err), 0);
        cr_assert_eq(config_set(&cfg, "egress.allow_private", "127.0.0.1/32", &err), 0);
        u.agent = open_with_node_publishing();
        u.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert_eq(bind(u.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        cr_assert_eq(listen(u.lfd, 8), 0);
        cr_assert_eq(getsockname(u.lfd, (struct sockaddr *)&sa, &sl), 0);
        u.port = ntohs(sa.sin_port);
        cr_assert_eq(pthread_create(&th, NULL, upstream_main, &u), 0);

        /* a port bound but not listening: the node's connect is refused, and says so */
        int closed = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sa.sin_port = 0;
        sl = sizeof(sa);
        cr_assert_eq(bind(closed, (struct sockaddr *)&sa, sizeof(sa)), 0);
        cr_assert_eq(getsockname(closed, (struct sockaddr *)&sa, &sl), 0);
        snprintf(cmd, sizeof(cmd),
                 "curl -s --max-time 60 http://up.test:%d/; echo; "
                 "curl -s --max-time 60 -o /dev/null -w '%%{http_code}' http://blocked.test:%d/; echo; "
                 "curl -s --max-time 60 -o /dev/null -w '%%{http_code}' http://up.test:%d/; echo",
                 u.port, u.port, ntohs(sa.sin_port));
        char *out = fixture_run(d, "e", cmd, 120, &code);
        pthread_join(th, NULL);
        close(u.lfd);
        close(closed);
        cr_assert_str_eq(out, "hello\n403\n502\n", "exit %d", code);
        free(out);
        cr_assert(u.accepted, "the upstream saw no connection");
        cr_assert(u.agent_owns, "the upstream's client is not the node agent's socket");
        cr_assert_not(u.control_owns, "the control daemon connected to the upstream itself");

        /* the control decided both, and wrote their rows */
        cr_assert_eq(store_egress_log_list(d->store, "u1", "e", 100, &rows, &n), 0);
        bool refused_seen = false;
        for (size_t i = 0; i < n; i++) {
                if (strcmp(rows[i].host, "blocked.test") == 0 && strcmp(rows[i].decision, "blocked") == 0)
                        blocked_seen = true;
                if (strcmp(rows[i].host, "up.test") == 0 && strcmp(rows[i].reason, "connect_failed") == 0)
                        refused_seen = true;
        }
        free(rows);
        cr_assert(blocked_seen, "the blocked request has no row");
        cr_assert(refused_seen, "the connect the node could not make has no connect_failed row");
        daemon_close(d);
}

/* ---- the node agent's side: malformed requests from the control close the link ---- */

static pid_t agent_pid;

static bool agent_link_lost_after(void *ud)
{
        return node_server_links_lost(d->node) > *(uint64_t *)ud;
}

/* frame to the node agent: its link ends (the agent dials again), the agent lives on */
static void node_drops_link_on(const void *buf, size_t len)
{
        uint64_t lost = node_server_links_lost(d->node);

        cr_assert(TESTENV_WAIT_UNTIL(connected(NULL), 30000), "the node agent is not connected");
        cr_assert_eq(node_server_send_raw(d->node, buf, len), 0);
        cr_assert(TESTENV_WAIT_UNTIL(agent_link_lost_after(&lost), 30000),
                  "the node agent kept a link that sent it a malformed frame");
        cr_assert_eq(kill(agent_pid, 0), 0, "the node agent died of a malformed frame");
}

static size_t publish_req(unsigned char *buf, uint32_t count, const uint32_t *ports, size_t n_ports)
{
        struct node_req rq = {.op = htole32(NODE_OP_PUBLISH), .flags = htole32(count)};
        unsigned char payload[sizeof(rq) + 4 * 1100];
        snprintf(rq.user, sizeof(rq.user), "u1");
        snprintf(rq.session, sizeof(rq.session), "s1");
        memcpy(payload, &rq, sizeof(rq));
        for (size_t i = 0; i < n_ports; i++) {
                uint32_t v = htole32(ports[i]);
                memcpy(payload + sizeof(rq) + 4 * i, &v, 4);
        }
        return frame(buf, NF_REQ, 41, payload, (uint32_t)(sizeof(rq) + 4 * n_ports));
}

static size_t connect_open(unsigned char *buf, uint32_t stream, uint16_t family, uint16_t port, uint8_t pad,
                           uint32_t len)
{
        struct node_connect c = {.kind = htole32(NODE_STREAM_CONNECT),
                                 .family = htole16(family),
                                 .port = htole16(port)};
        c.addr[0] = 127;
        c.addr[3] = 1;
        c.pad[1] = pad;
        snprintf(c.user, sizeof(c.user), "u1");
        snprintf(c.session, sizeof(c.session), "s1");
        return frame(buf, NF_OPEN, stream, &c, len);
}

Test(node, malformed_publish_and_connect_requests_close_the_node_agents_link)
{
        static unsigned char buf[NODE_HDR_LEN + sizeof(struct node_req) + 4 * 1100];
        static uint32_t ports[1001];
        const uint32_t cs = NODE_STREAM_CONTROL | 9;

        for (size_t i = 0; i < 1001; i++)
                ports[i] = 30000 + (uint32_t)i;
        open_with_node();
        agent_pid = nodeenv_start(&cfg, pki, "node1", node_dir);
        /* a publish whose count and ports disagree, past the cap, or with a port out of range */
        node_drops_link_on(buf, publish_req(buf, 2, ports, 1));
        node_drops_link_on(buf, publish_req(buf, 1001, ports, 1001));
        node_drops_link_on(buf, publish_req(buf, 1, (const uint32_t[]){0}, 1));
        node_drops_link_on(buf, publish_req(buf, 1, (const uint32_t[]){70000}, 1));
        /* a connect of another family, to port 0, on a node's stream id, short, or with padding set */
        node_drops_link_on(buf, connect_open(buf, cs, 5, 80, 0, sizeof(struct node_connect)));
        node_drops_link_on(buf, connect_open(buf, cs, 4, 0, 0, sizeof(struct node_connect)));
        node_drops_link_on(buf, connect_open(buf, 9, 4, 80, 0, sizeof(struct node_connect)));
        node_drops_link_on(buf, connect_open(buf, cs, 4, 80, 0, sizeof(struct node_connect) - 2));
        node_drops_link_on(buf, connect_open(buf, cs, 4, 80, 1, sizeof(struct node_connect)));
        cr_assert(TESTENV_WAIT_UNTIL(connected(NULL), 30000), "the node agent did not come back");
        daemon_close(d);
}

/* ---- many nodes ---- */

static const char *const two[] = {"node1", "node3"}; /* node2 is revoked */
static char agents_base[SBX_PATH_MAX];

static bool both_connected(void *ud)
{
        (void)ud;
        return node_server_node_connected(d->node, "node1") && node_server_node_connected(d->node, "node3");
}

/* The node the session is placed on (asserted to be one of the two). */
static const char *placed(const char *session)
{
        static char name[2][NODE_NAME_MAX + 1];
        static int k;
        char *n = name[k++ % 2];
        cr_assert_eq(store_node_get(d->store, "u1", session, n, NODE_NAME_MAX + 1), 0);
        cr_assert(strcmp(n, "node1") == 0 || strcmp(n, "node3") == 0, "session %s placed on '%s'", session, n);
        return n;
}

/* The session's runner socket is in its own node's data_dir (and, not_elsewhere, not in the other's). */
static void assert_dir_on(const char *session, const char *node, bool not_elsewhere)
{
        char hash[33], path[SBX_PATH_MAX];
        struct stat st;

        cr_assert_eq(hub_dir_key("u1", session, hash), 0);
        for (size_t i = 0; i < 2; i++) {
                snprintf(path, sizeof(path), "%s/%s/runner/%s/" RP_SOCKET_NAME, agents_base, two[i], hash);
                bool there = stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
                if (!not_elsewhere && strcmp(two[i], node) != 0)
                        continue; /* a killed agent's directory stays behind */
                cr_assert_eq(there, strcmp(two[i], node) == 0, "session %s: runner socket %s under %s's data_dir",
                             session, there ? "found" : "missing", two[i]);
        }
}

static void open_with_two_nodes(int fence_ms, pid_t pids[2])
{
        fixture_config(&cfg);
        pki = nodeenv_pki();
        nodeenv_config_control(&cfg, pki);
        if (fence_ms)
                cfg.node_fence_ms = fence_ms;
        snprintf(agents_base, sizeof(agents_base), "%s/../agents", cfg.data_dir);
        d = fixture_open_sockets(&cfg);
        cr_assert(mkdir(agents_base, 0700) == 0 || errno == EEXIST, "mkdir %s: %m", agents_base);
        nodeenv_start_n(&cfg, pki, two, 2, agents_base, pids);
        cr_assert(TESTENV_WAIT_UNTIL(both_connected(NULL), 30000), "the two node agents never connected");
}

Test(node, sessions_spread_over_two_node_agents)
{
        static const char *sessions[] = {"s1", "s2", "s3", "s4"};
        pid_t pids[2];
        int on[2] = {0, 0};

        open_with_two_nodes(0, pids);
        for (size_t i = 0; i < 4; i++) {
                char cmd[64], want[64];
                int code = -1;
                snprintf(cmd, sizeof(cmd), "echo hello from %s", sessions[i]);
                snprintf(want, sizeof(want), "hello from %s\n", sessions[i]);
                char *out = fixture_run(d, sessions[i], cmd, 0, &code);
                cr_assert_eq(code, 0);
                cr_assert_str_eq(out, want);
                free(out);
                const char *n = placed(sessions[i]);
                on[strcmp(n, "node1") == 0 ? 0 : 1]++;
                assert_dir_on(sessions[i], n, true);
        }
        cr_assert(on[0] == 2 && on[1] == 2, "sessions not spread: %d on node1, %d on node3", on[0], on[1]);

        /* operators see the nodes: sandboxctl nodes, the session list, the metrics */
        char *out = NULL, *text = NULL;
        cr_assert_eq(fixture_sandboxctl(SANDBOXD_BINARY_DIR, cfg.admin_socket, "nodes", &out), 0, "%s", out);
        for (size_t i = 0; i < 2; i++) {
                char *line = strstr(out, two[i]);
                cr_assert_not_null(line, "sandboxctl nodes has no %s: %s", two[i], out);
                char state[16];
                double placed = -1;
                cr_assert_eq(sscanf(line + strlen(two[i]), " %15s %*s %*s %lf", state, &placed), 2, "%s", line);
                cr_assert_str_eq(state, "connected");
                cr_assert_eq(placed, 2, "%s: %g sessions", two[i], placed);
        }
        free(out);
        cr_assert_eq(fixture_sandboxctl(SANDBOXD_BINARY_DIR, cfg.admin_socket, "sessions", &out), 0, "%s", out);
        cr_assert(strstr(out, "(node node1)") && strstr(out, "(node node3)"), "sessions without their node: %s", out);
        free(out);
        cr_assert_eq(metrics_render(&d->metrics_ctx, &text), 0);
        cr_assert(strstr(text, "sandboxd_nodes_connected 2\n"), "%s", text);
        cr_assert(strstr(text, "sandboxd_node_sessions{node=\"node1\"} 2\n"), "%s", text);
        cr_assert(strstr(text, "sandboxd_node_sessions{node=\"node3\"} 2\n"), "%s", text);
        free(text);
        daemon_close(d);
}

static bool audit_any(const char *user, const char *session, const char *action)
{
        int64_t n = 0;
        return store_audit_count(d->store, user, session, action, &n) == 0 && n > 0;
}

Test(node, a_node_gone_past_node_fence_fences_only_its_own_sessions)
{
        struct exec_request lost = {
                .user = "u1", .session = "s1", .command = "echo before; sleep 600", .timeout_s = 600, .actor = "t"};
        struct exec_request kept = {.user = "u1",
                                    .session = "s2",
                                    .command =
                                            "echo before; while [ ! -e /workspace/go ]; do sleep 0.1; done; "
                                            "echo after",
                                    .timeout_s = 600,
                                    .actor = "t"};
        struct exec_result res;
        uint64_t epoch_before = 0, epoch_after = 0;
        char lost_id[37], kept_id[37], victim[NODE_NAME_MAX + 1], survivor[NODE_NAME_MAX + 1];
        pid_t pids[2];
        int code = -1;

        open_with_two_nodes(3000, pids);
        free(fixture_run(d, "s1", "true", 0, &code));
        free(fixture_run(d, "s2", "true", 0, &code));
        snprintf(victim, sizeof(victim), "%s", placed("s1"));
        snprintf(survivor, sizeof(survivor), "%s", placed("s2"));
        cr_assert_str_neq(victim, survivor, "both sessions on %s", victim);
        cr_assert_eq(exec_start(d->exec, &lost, lost_id, NULL), 0);
        cr_assert_eq(exec_start(d->exec, &kept, kept_id, NULL), 0);
        cr_assert(TESTENV_WAIT_UNTIL(stdout_has(lost_id, "before"), 30000), "the execution never printed");
        cr_assert(TESTENV_WAIT_UNTIL(stdout_has(kept_id, "before"), 30000), "the execution never printed");
        cr_assert_eq(store_epoch_get(d->store, "u1", "s1", &epoch_before), 0);
        uint64_t kept_epoch = 0, kept_epoch_after = 0;
        cr_assert_eq(store_epoch_get(d->store, "u1", "s2", &kept_epoch), 0);

        nodeenv_kill(pids[strcmp(victim, "node1") == 0 ? 0 : 1], SIGKILL); /* and kept down */
        cr_assert(TESTENV_WAIT_UNTIL(audit_any(NULL, NULL, "node_fenced"), 30000), "no node_fenced audit row");
        wait_final(lost_id, &res);
        cr_assert_eq(res.state, EXEC_FAILED, "state %s", exec_state_to_string(res.state));
        exec_result_done(&res);
        /* the other node's session and its execution are untouched */
        cr_assert(fixture_exec_running(d, "u1", kept_id), "the surviving node's execution ended");
        cr_assert_eq(store_epoch_get(d->store, "u1", "s2", &kept_epoch_after), 0);
        cr_assert_eq(kept_epoch_after, kept_epoch, "the surviving node's session was fenced");
        char *out = fixture_run(d, "s2", "touch /workspace/go && echo released", 0, &code);
        cr_assert_eq(code, 0);
        cr_assert_str_eq(out, "released\n");
        free(out);
        wait_final(kept_id, &res);
        cr_assert_eq(res.state, EXEC_COMPLETED, "state %s: %s", exec_state_to_string(res.state), res.error);
        cr_assert_eq(res.stdout_head_len, 13);
        cr_assert(memcmp(res.stdout_head, "before\nafter\n", 13) == 0, "stdout: %.*s", (int)res.stdout_head_len,
                  res.stdout_head);
        exec_result_done(&res);

        /* the fenced session's next request: a new container on the surviving node, a new epoch */
        out = fixture_run(d, "s1", "echo moved", 0, &code);
        cr_assert_eq(code, 0);
        cr_assert_str_eq(out, "moved\n");
        free(out);
        cr_assert_str_eq(placed("s1"), survivor);
        assert_dir_on("s1", survivor, false);
        cr_assert_eq(store_epoch_get(d->store, "u1", "s1", &epoch_after), 0);
        cr_assert_gt(epoch_after, epoch_before, "the fenced session kept its epoch");

        /* the dead node back, presenting its old session: its old epoch, and the current one (the
         * session is placed elsewhere now): both refused, with audit rows */
        struct sbx_config ncfg;
        struct node_client *nc = NULL;
        struct sbx_error err = {0};
        int sv[2];
        char b;
        nodeenv_config_node(&ncfg, &cfg, pki, victim, agents_base);
        cr_assert_eq(node_client_connect(&ncfg, &nc, &err), 0, "%s", err.msg);
        cr_assert(TESTENV_WAIT_UNTIL(node_server_node_connected(d->node, victim), 30000));
        for (int i = 0; i < 2; i++) {
                cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
                cr_assert_eq(node_client_open(nc, "u1", "s1", i == 0 ? epoch_before : epoch_after, sv[1]), 0);
                if (i == 1)
                        send_hello(sv[0]);
                struct pollfd p = {.fd = sv[0], .events = POLLIN};
                cr_assert_eq(poll(&p, 1, 30000), 1);
                cr_assert_eq(recv(sv[0], &b, 1, 0), 0, "the refused stream was not closed");
                close(sv[0]);
        }
        cr_assert(TESTENV_WAIT_UNTIL(audit_any("u1", "s1", "node_epoch_refused"), 30000),
                  "no audit row for the old epoch");
        cr_assert(TESTENV_WAIT_UNTIL(audit_any("u1", "s1", "node_placement_refused"), 30000),
                  "no audit row for a session placed on another node");
        /* the session still runs where it moved */
        out = fixture_run(d, "s1", "echo still", 0, &code);
        cr_assert_eq(code, 0);
        cr_assert_str_eq(out, "still\n");
        free(out);
        daemon_close(d);
        node_client_free(nc);
}

struct seen {
        struct node_client *nc;
        uint32_t op;
        const char *session;
};

static bool client_was_sent(void *ud)
{
        struct seen *w = ud;
        return node_client_requests(w->nc, w->op, "u1", w->session) > 0;
}

Test(node, a_node_that_comes_back_is_told_only_its_own_sessions)
{
        struct sbx_config ncfg;
        struct node_client *nc = NULL;
        struct sbx_error err = {0};
        char mine[8], theirs[8], node[NODE_NAME_MAX + 1];
        pid_t pids[2];
        int code = -1;

        open_with_two_nodes(0, pids); /* node.fence 30 s: nothing is fenced here */
        free(fixture_run(d, "s1", "true", 0, &code));
        free(fixture_run(d, "s2", "true", 0, &code));
        snprintf(node, sizeof(node), "%s", placed("s1"));
        cr_assert_str_neq(node, placed("s2"), "both sessions on %s", node);
        snprintf(mine, sizeof(mine), "s1");
        snprintf(theirs, sizeof(theirs), "s2");

        /* s1's node goes; a node of its name comes back (a bare one, that records what it is told) */
        nodeenv_kill(pids[strcmp(node, "node1") == 0 ? 0 : 1], SIGKILL);
        cr_assert(TESTENV_WAIT_UNTIL(!node_server_node_connected(d->node, node), 30000));
        nodeenv_config_node(&ncfg, &cfg, pki, node, agents_base);
        cr_assert_eq(node_client_connect(&ncfg, &nc, &err), 0, "%s", err.msg);
        /* its session opened on it again, then its gateway sockets served again (after the reopen) */
        struct seen open = {nc, NODE_OP_OPEN, mine}, gw = {nc, NODE_OP_GATEWAY, mine};
        cr_assert(TESTENV_WAIT_UNTIL(client_was_sent(&open), 30000), "its own session was not opened again");
        cr_assert(TESTENV_WAIT_UNTIL(client_was_sent(&gw), 30000), "its own session's sockets were not served again");
        /* and nothing about the other node's session */
        cr_assert_eq(node_client_requests(nc, NODE_OP_OPEN, "u1", theirs), 0, "the other node's session was opened");
        cr_assert_eq(node_client_requests(nc, NODE_OP_GATEWAY, "u1", theirs), 0,
                     "the other node's session's sockets were asked for");
        /* the other node's session still runs where it is */
        char *out = fixture_run(d, theirs, "echo untouched", 0, &code);
        cr_assert_eq(code, 0);
        cr_assert_str_eq(out, "untouched\n");
        free(out);
        daemon_close(d);
        node_client_free(nc);
}
