/* Integration tests of the PrivateData ratchet against the real dockerd.
 * No test sends a packet anywhere but loopback: the network is proven by
 * reading interfaces and /proc/net/route, its absence by a connect() that
 * fails at once with "network unreachable" (no route, so nothing leaves). */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "fixture.h"
#include "sandboxd/exec.h"
#include "sandboxd/privacy.h"
#include "sandboxd/service.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "testenv.h"

TestSuite(privacy, .timeout = 300);

static struct sbx_config cfg;
static struct daemon *d;

static struct exec_result sh(const char *session, const char *command)
{
        struct exec_request req = {.user = "u1", .session = session, .command = command, .actor = "test"};
        struct exec_result res;
        struct sbx_error err = {0};
        cr_assert_eq(exec_run(d->exec, &req, &res, &err), 0, "%s: %s", command, err.msg);
        return res;
}

static bool output_is(struct exec_result *r, const char *want)
{
        return r->stdout_head_len == strlen(want) && memcmp(r->stdout_head, want, r->stdout_head_len) == 0;
}

/* Interfaces other than lo, and the number of routes. */
static const char net_probe[] = "ls /sys/class/net | grep -vx lo | wc -l; tail -n +2 /proc/net/route | wc -l";

/* connect() to a TEST-NET-3 address (RFC 5737, never routed on the internet):
 * with no route it fails at once with ENETUNREACH and sends nothing. Only run
 * where the probe above shows no route. */
static const char unreachable_probe[] =
        "python3 -c \"import socket,errno\n"
        "s=socket.socket(); s.settimeout(2)\n"
        "try:\n s.connect(('203.0.113.1', 9)); print('connected')\n"
        "except OSError as e: print(errno.errorcode.get(e.errno, e.errno))\"";

static void open_daemon_network(const char *image, const char *network)
{
        fixture_config(&cfg);
        if (network)
                snprintf(cfg.network_default, sizeof(cfg.network_default), "%s", network);
        if (image)
                snprintf(cfg.image, sizeof(cfg.image), "%s", image);
        d = fixture_open(&cfg, false);
}

static void open_daemon(const char *image)
{
        open_daemon_network(image, NULL);
}

/* The default: a sealed container has nothing to take away but its
 * channels. Before the mark egress goes through the proxy (no interface);
 * after it the same container has no egress socket and no port block. */
Test(privacy, mark_takes_the_channels_of_a_sealed_container)
{
        struct exec_result r;
        struct sbx_error err = {0};
        struct session_info a, b;

        open_daemon(TESTENV_PYTHON_IMAGE);
        r = sh("q",
               "echo $HTTPS_PROXY; ls /run/sandboxd; "
               "ls /sys/class/net | grep -vxc lo || true");
        cr_assert(output_is(&r, "http://127.0.0.1:3128\negress.sock\nfwd.sock\nrunner.sock\n0\n"),
                  "before the mark: %.*s", (int)r.stdout_head_len, r.stdout_head);
        exec_result_done(&r);
        cr_assert_eq(session_get_info(d->sessions, "u1", "q", &a), 0);
        cr_assert_gt(a.n_ports, 0);
        cr_assert_eq(privacy_mark(d->privacy, "u1", "q", "customers.csv", "crm-connector", "test", &err), 0, "%s",
                     err.msg);
        r = sh("q", "ls /run/sandboxd");
        cr_assert(output_is(&r, "runner.sock\n"), "after the mark: %.*s", (int)r.stdout_head_len, r.stdout_head);
        exec_result_done(&r);
        r = sh("q", unreachable_probe);
        cr_assert(output_is(&r, "ENETUNREACH\n"), "connect: %.*s", (int)r.stdout_head_len, r.stdout_head);
        exec_result_done(&r);
        cr_assert_eq(session_get_info(d->sessions, "u1", "q", &b), 0);
        cr_assert_str_eq(a.container_id, b.container_id, "a sealed container needs no successor");
        cr_assert_str_eq(b.network_mode, "none");
        session_info_done(&a);
        session_info_done(&b);
        daemon_close(d);
}

/* network_default = bridge (sandboxd's own network): the ratchet removes
 * the networked container and its successor has none. */
Test(privacy, mark_recreates_without_network_and_keeps_the_workspace)
{
        struct exec_result r;
        struct sbx_error err = {0};
        struct session_info a, b;
        int64_t marks = 0, ratchets = 0;

        open_daemon_network(TESTENV_PYTHON_IMAGE, "bridge");
        r = sh("p", net_probe);
        cr_assert(output_is(&r, "1\n2\n") || output_is(&r, "1\n1\n") || output_is(&r, "1\n3\n"),
                  "before the mark: expected eth0 and a default route, got %.*s", (int)r.stdout_head_len,
                  r.stdout_head);
        exec_result_done(&r);
        r = sh("p", "grep -q '^eth0\t00000000' /proc/net/route && echo default-route");
        cr_assert(output_is(&r, "default-route\n"));
        exec_result_done(&r);
        r = sh("p", "echo secret-before > /workspace/before.txt");
        exec_result_done(&r);
        cr_assert_eq(service_start(d->services, "u1", "p", "svc", "sleep 1000", NULL, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(session_get_info(d->sessions, "u1", "p", &a), 0);
        cr_assert_str_eq(a.network_mode, "bridge");

        cr_assert_eq(privacy_mark(d->privacy, "u1", "p", "customers.csv", "crm-connector", "test", &err), 0, "%s",
                     err.msg);
        cr_assert(privacy_is_private(d->privacy, "u1", "p"));

        r = sh("p", net_probe);
        cr_assert(output_is(&r, "0\n0\n"), "after the mark: %.*s", (int)r.stdout_head_len, r.stdout_head);
        exec_result_done(&r);
        r = sh("p", unreachable_probe);
        cr_assert(output_is(&r, "ENETUNREACH\n"), "connect: %.*s", (int)r.stdout_head_len, r.stdout_head);
        exec_result_done(&r);
        r = sh("p", "cat /workspace/before.txt && echo more >> /workspace/before.txt && echo writable");
        cr_assert(output_is(&r, "secret-before\nwritable\n"), "%.*s", (int)r.stdout_head_len, r.stdout_head);
        exec_result_done(&r);

        cr_assert_eq(session_get_info(d->sessions, "u1", "p", &b), 0);
        cr_assert_str_neq(a.container_id, b.container_id);
        cr_assert_str_eq(b.network_mode, "none");
        cr_assert_eq(b.n_ports, 0, "a private session keeps a port block it cannot publish");
        session_info_done(&a);
        session_info_done(&b);

        struct service_info *list;
        size_t n;
        cr_assert_eq(service_list(d->services, "u1", "p", &list, &n), 0);
        cr_assert_eq(n, 1);
        cr_assert_eq(list[0].state, SERVICE_FAILED);
        cr_assert_not_null(strstr(list[0].last_error, "privacy_ratchet"), "%s", list[0].last_error);
        free(list);

        store_audit_count(d->store, "u1", "p", "privacy.mark", &marks);
        store_audit_count(d->store, "u1", "p", "privacy.ratchet", &ratchets);
        cr_assert_eq(marks, 1);
        cr_assert_eq(ratchets, 1);

        /* marking twice is harmless */
        cr_assert_eq(privacy_mark(d->privacy, "u1", "p", "customers.csv", "crm-connector", "test", &err), 0);
        store_audit_count(d->store, "u1", "p", "privacy.mark", &marks);
        cr_assert_eq(marks, 1);
        struct privacy_dataset *ds;
        cr_assert_eq(privacy_list(d->privacy, "u1", "p", &ds, &n), 0);
        cr_assert_eq(n, 1);
        cr_assert_str_eq(ds[0].dataset, "customers.csv");
        cr_assert_str_eq(ds[0].source, "crm-connector");
        free(ds);
        daemon_close(d);
}

Test(privacy, survives_restart_and_a_changed_default)
{
        struct exec_result r;
        struct sbx_error err = {0};
        struct session_info info;

        open_daemon(NULL);
        r = sh("keep", "true");
        exec_result_done(&r);
        cr_assert_eq(privacy_mark(d->privacy, "u1", "keep", "ds", NULL, "test", &err), 0, "%s", err.msg);
        r = sh("keep", "true");
        exec_result_done(&r);
        daemon_close(d);

        snprintf(cfg.network_default, sizeof(cfg.network_default), "bridge");
        d = fixture_open(&cfg, false);
        r = sh("keep", "ls /sys/class/net | grep -vxc lo || true");
        cr_assert(output_is(&r, "0\n"), "%.*s", (int)r.stdout_head_len, r.stdout_head);
        exec_result_done(&r);
        cr_assert_eq(session_get_info(d->sessions, "u1", "keep", &info), 0);
        cr_assert_str_eq(info.network_mode, "none");
        session_info_done(&info);
        daemon_close(d);
}

Test(privacy, a_session_marked_before_its_container_starts_without_network)
{
        struct exec_result r;
        struct sbx_error err = {0};
        int64_t ratchets = 0;

        open_daemon(NULL);
        cr_assert_eq(privacy_mark(d->privacy, "u1", "early", "ds", "src", "test", &err), 0, "%s", err.msg);
        r = sh("early", "ls /sys/class/net | grep -vxc lo || true");
        cr_assert(output_is(&r, "0\n"));
        exec_result_done(&r);
        store_audit_count(d->store, "u1", "early", "privacy.ratchet", &ratchets);
        cr_assert_eq(ratchets, 0, "no networked container ever existed");
        /* bad marks */
        cr_assert_eq(privacy_mark(d->privacy, "u1", "early", "", NULL, "test", &err), -EINVAL);
        cr_assert_eq(privacy_mark(d->privacy, "u1", "early", "bad\nname", NULL, "test", &err), -EINVAL);
        cr_assert_eq(privacy_mark(d->privacy, "u1", "../x", "ds", NULL, "test", &err), -EINVAL);
        daemon_close(d);
}

struct racer {
        bool before;   /* started before the mark, still in flight when it came */
        int64_t ended; /* monotonic ms when exec_run returned */
        int state;
        int interfaces; /* non-lo interfaces it saw, -1 if it did not complete */
};

static void *racer_main(void *ud)
{
        struct racer *rc = ud;
        struct exec_request req = {.user = "u1",
                                   .session = "race",
                                   .actor = "test",
                                   .command = rc->before ? "sleep 2; ls /sys/class/net | grep -vxc lo || true"
                                                         : "ls /sys/class/net | grep -vxc lo || true"};
        struct exec_result res;

        rc->interfaces = -1;
        if (exec_run(d->exec, &req, &res, NULL) == 0) {
                rc->state = res.state;
                if (res.state == EXEC_COMPLETED)
                        rc->interfaces = atoi(res.stdout_head);
                exec_result_done(&res);
        }
        rc->ended = sbx_now_ms();
        return NULL;
}

Test(privacy, no_execution_that_starts_after_the_mark_sees_a_network)
{
        pthread_t t[15];
        struct racer rc[15] = {0};
        struct exec_result r;
        struct sbx_error err = {0};
        int64_t marked;

        fixture_config(&cfg);
        snprintf(cfg.network_default, sizeof(cfg.network_default), "bridge"); /* a network to see */
        cfg.max_exec_per_session = 15;
        cfg.max_exec_global = 20;
        cfg.max_exec_per_user = 15;
        d = fixture_open(&cfg, false);
        r = sh("race", "true");
        exec_result_done(&r);
        for (int i = 0; i < 10; i++) { /* ten in flight when the mark arrives */
                rc[i].before = true;
                pthread_create(&t[i], NULL, racer_main, &rc[i]);
        }
        (void)TESTENV_WAIT_UNTIL(exec_running_count(d->exec, "u1", "race") == 10, 10000);
        cr_assert_eq(privacy_mark(d->privacy, "u1", "race", "ds", "src", "test", &err), 0, "%s", err.msg);
        marked = sbx_now_ms();
        for (int i = 10; i < 15; i++)
                pthread_create(&t[i], NULL, racer_main, &rc[i]);
        for (int i = 0; i < 15; i++)
                pthread_join(t[i], NULL);
        for (int i = 10; i < 15; i++)
                cr_assert_eq(rc[i].interfaces, 0, "exec %d started after the mark and saw %d interfaces (state %d)", i,
                             rc[i].interfaces, rc[i].state);
        /* the in-flight ones look at the network 2 s after they started: if the
         * mark had returned by then, none may have seen one */
        for (int i = 0; i < 10; i++)
                if (rc[i].interfaces > 0)
                        cr_assert_lt(rc[i].ended, marked, "exec %d saw a network after the mark returned", i);
        daemon_close(d);
}

Test(privacy, destroy_without_purge_keeps_the_mark_with_the_workspace)
{
        struct exec_result r;
        struct sbx_error err = {0};

        open_daemon(NULL);
        r = sh("kept", "echo private-data > /workspace/p.txt");
        exec_result_done(&r);
        cr_assert_eq(privacy_mark(d->privacy, "u1", "kept", "ds", NULL, "test", &err), 0, "%s", err.msg);
        cr_assert_eq(session_destroy(d->sessions, "u1", "kept", false, &err), 0, "%s", err.msg);
        /* the same key again, on the same surviving workspace: still no network */
        r = sh("kept", "cat /workspace/p.txt; ls /sys/class/net | grep -vxc lo || true");
        cr_assert(output_is(&r, "private-data\n0\n"), "%.*s", (int)r.stdout_head_len, r.stdout_head);
        exec_result_done(&r);
        /* destroying with the workspace forgets the mark too */
        cr_assert_eq(session_destroy(d->sessions, "u1", "kept", true, &err), 0, "%s", err.msg);
        cr_assert_not(privacy_is_private(d->privacy, "u1", "kept"));
        daemon_close(d);
}
