/* Integration tests of the privacy ratchet on every path (issue 12 item 6),
 * against the real dockerd:
 *   - a purge that fails leaves the session private; one that succeeds
 *     removes a tree hidden 300 directories deep and follows no symlink;
 *   - a destroy racing with requests never gives the key a network while
 *     private data can be reached;
 *   - a daemon killed (SIGKILL) between recording a mark and removing the
 *     networked container: after the restart the session never shows
 *     "bridge" again.
 * Networks are only looked at (interfaces, inspect); nothing is sent. The
 * sessions use network_default = bridge (sandboxd's own network), the one
 * mode in which the ratchet has a networked container to remove. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "sandboxd/container.h"
#include "sandboxd/exec.h"
#include "sandboxd/privacy.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "testenv.h"

static struct sbx_config cfg;
static struct daemon *d;
static char pinned[SBX_PATH_MAX + 64]; /* a file made immutable, unpinned at the end */

static void set_immutable(const char *path, bool on)
{
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), flags = 0;
        if (fd < 0)
                return;
        if (ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
                flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
                (void)ioctl(fd, FS_IOC_SETFLAGS, &flags);
        }
        close(fd);
}

static void unpin(void)
{
        if (pinned[0])
                set_immutable(pinned, false);
        pinned[0] = '\0';
}

/* A file of the workspace that no purge can delete until unpin(). */
static void pin(const char *workspace, const char *name)
{
        struct stat st;
        snprintf(pinned, sizeof(pinned), "%s/%s", workspace, name);
        set_immutable(pinned, true);
        cr_assert_eq(stat(pinned, &st), 0);
        cr_assert_eq(unlink(pinned), -1, "chattr +i did not hold on %s", pinned);
}

TestSuite(ratchet, .timeout = 300, .fini = unpin);

static struct exec_result sh(const char *session, const char *command)
{
        struct exec_request req = {.user = "alice", .session = session, .command = command, .actor = "test"};
        struct exec_result res;
        struct sbx_error err = {0};
        cr_assert_eq(exec_run(d->exec, &req, &res, &err), 0, "%s: %s", command, err.msg);
        return res;
}

static bool output_is(struct exec_result *r, const char *want)
{
        return r->stdout_head_len == strlen(want) && memcmp(r->stdout_head, want, r->stdout_head_len) == 0;
}

static void expect_output(const char *session, const char *command, const char *want)
{
        struct exec_result r = sh(session, command);
        cr_assert(output_is(&r, want), "%s: expected %s, got %.*s", command, want, (int)r.stdout_head_len,
                  r.stdout_head);
        exec_result_done(&r);
}

static void expect_network(const char *session, const char *mode)
{
        struct session_info info;
        cr_assert_eq(session_get_info(d->sessions, "alice", session, &info), 0);
        cr_assert_str_eq(info.network_mode, mode, "%s shows %s", session, info.network_mode);
        session_info_done(&info);
}

static void workspace_of(const char *session, char ret[SBX_PATH_MAX])
{
        struct sbx_error err = {0};
        cr_assert_eq(container_workspace_ensure(&cfg, "alice", session, (uid_t)cfg.sandbox_uid_lo, ret, &err), 0, "%s",
                     err.msg);
}

static bool exists(const char *path)
{
        struct stat st;
        return lstat(path, &st) == 0;
}

/* Interfaces other than lo, seen from inside. */
#define NET_PROBE "ls /sys/class/net | grep -vxc lo || true"

/* 300 directories deep, as the tenant of the issue did it. */
#define HIDE_DEEP                                                                                                      \
        "p=/workspace; i=0; while [ $i -lt 300 ]; do p=$p/d; i=$((i+1)); done; mkdir -p $p && "                        \
        "echo secret > $p/hidden && echo secret > /workspace/top && echo ok"

Test(ratchet, a_failed_purge_leaves_the_session_private_and_a_good_one_follows_no_symlink)
{
        struct sbx_error err = {0};
        char ws[SBX_PATH_MAX], canary[SBX_PATH_MAX + 32], cmd[SBX_PATH_MAX + 128];

        fixture_config(&cfg);
        snprintf(cfg.network_default, sizeof(cfg.network_default), "bridge"); /* a networked container to take away */
        d = fixture_open(&cfg, false);
        expect_output("p", HIDE_DEEP, "ok\n");
        /* symlinks out of the workspace, to a host directory the test owns */
        snprintf(canary, sizeof(canary), "%s/canary", cfg.data_dir);
        cr_assert_eq(mkdir(canary, 0755), 0);
        snprintf(cmd, sizeof(cmd), "%s/keep", canary);
        cr_assert_eq(close(open(cmd, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)), 0);
        snprintf(cmd, sizeof(cmd), "ln -s %s /workspace/out && ln -s %s/keep /workspace/d/d/out_file && echo ok",
                 canary, canary);
        expect_output("p", cmd, "ok\n");
        expect_network("p", "bridge");
        cr_assert_eq(privacy_mark(d->privacy, "alice", "p", "ds", "src", "test", &err), 0, "%s", err.msg);

        /* the purge fails: the marks stay, and the key only ever gets "none" */
        workspace_of("p", ws);
        pin(ws, "top");
        cr_assert_lt(session_destroy(d->sessions, "alice", "p", true, &err), 0, "the purge cannot have succeeded");
        cr_assert(privacy_is_private(d->privacy, "alice", "p"), "a failed purge dropped the marks");
        expect_output("p", NET_PROBE, "0\n");
        expect_output("p", "cat /workspace/top", "secret\n");
        expect_network("p", "none");

        /* now it can go: 300 deep is no obstacle and the symlinks' targets stay */
        unpin();
        cr_assert_eq(session_destroy(d->sessions, "alice", "p", true, &err), 0, "%s", err.msg);
        cr_assert_not(exists(ws), "the workspace survived its purge");
        snprintf(cmd, sizeof(cmd), "%s/keep", canary);
        cr_assert(exists(cmd), "the purge followed a symlink out of the workspace");
        cr_assert_not(privacy_is_private(d->privacy, "alice", "p"), "the marks outlived a workspace that is gone");
        daemon_close(d);
}

struct racer {
        const char *session;
        volatile bool *stop;
        int served, refused;       /* served: atomic, the test waits on it */
        int networked_with_secret; /* saw a network and the private file at once */
        int networked;             /* saw a network at all */
};

static void *racer_main(void *ud)
{
        struct racer *rc = ud;
        /* A short timeout: an exec whose container is removed under it by the
         * destroy may otherwise wait for Docker's stream until its timeout
         * (seen with Docker 20.10: the attached stream does not always end). */
        struct exec_request req = {.user = "alice",
                                   .session = rc->session,
                                   .actor = "test",
                                   .timeout_s = 5,
                                   .command = NET_PROBE "; if test -e /workspace/secret; then echo secret; fi"};

        while (!*rc->stop) {
                struct exec_result res;
                struct sbx_error err = {0};
                if (exec_run(d->exec, &req, &res, &err) < 0) {
                        if (rc->refused++ < 3)
                                cr_log_info("%s: refused: %s", rc->session, err.msg);
                        continue;
                }
                /* a probe that ran prints a count first (an exec Docker failed to
                 * start, its container removed under it, prints Docker's error) */
                if (res.state == EXEC_COMPLETED && res.exit_code == 0 && res.stdout_head_len > 1 &&
                    res.stdout_head[0] >= '0' && res.stdout_head[0] <= '9' && res.stdout_head[1] == '\n') {
                        bool net = res.stdout_head[0] != '0';
                        __atomic_add_fetch(&rc->served, 1, __ATOMIC_RELAXED);
                        rc->networked += net;
                        rc->networked_with_secret += net && memmem(res.stdout_head, res.stdout_head_len, "secret", 6);
                }
                exec_result_done(&res);
        }
        return NULL;
}

/* Every racer has been served more often than before[i]. */
static bool all_served_past(struct racer rc[4], const int before[4])
{
        for (int i = 0; i < 4; i++)
                if (__atomic_load_n(&rc[i].served, __ATOMIC_RELAXED) <= before[i])
                        return false;
        return true;
}

/* Racers exec in the session while it is destroyed with purge. */
static void race_destroy(const char *session, bool purge_fails, struct racer rc[4])
{
        volatile bool stop = false;
        struct sbx_error err = {0};
        pthread_t t[4];
        char ws[SBX_PATH_MAX];
        int r;

        expect_output(session, "echo data > /workspace/secret && echo ok", "ok\n");
        /* enough files that the purge takes a while */
        expect_output(session,
                      "mkdir /workspace/many && cd /workspace/many && i=0; while [ $i -lt 400 ]; do "
                      ": > f$i; i=$((i+1)); done; echo ok",
                      "ok\n");
        cr_assert_eq(privacy_mark(d->privacy, "alice", session, "ds", "src", "test", &err), 0, "%s", err.msg);
        workspace_of(session, ws);
        if (purge_fails)
                pin(ws, "secret");
        for (int i = 0; i < 4; i++) {
                rc[i] = (struct racer){.session = session, .stop = &stop};
                cr_assert_eq(pthread_create(&t[i], NULL, racer_main, &rc[i]), 0);
        }
        /* until every racer has been served once in the private session */
        int before[4] = {0};
        (void)TESTENV_WAIT_UNTIL(all_served_past(rc, before), 60000);
        r = session_destroy(d->sessions, "alice", session, true, &err);
        if (purge_fails)
                cr_assert_lt(r, 0, "the purge cannot have succeeded");
        else
                cr_assert_eq(r, 0, "%s", err.msg);
        /* and until every racer has been served again after the destroy */
        for (int i = 0; i < 4; i++)
                before[i] = __atomic_load_n(&rc[i].served, __ATOMIC_RELAXED);
        (void)TESTENV_WAIT_UNTIL(all_served_past(rc, before), 60000);
        stop = true;
        for (int i = 0; i < 4; i++)
                pthread_join(t[i], NULL);
        unpin();
}

Test(ratchet, a_destroy_racing_with_requests_never_gives_private_data_a_network)
{
        struct racer rc[4];
        int served = 0, networked = 0;

        fixture_config(&cfg);
        snprintf(cfg.network_default, sizeof(cfg.network_default), "bridge"); /* a networked container to take away */
        cfg.max_exec_per_user = 8;
        d = fixture_open(&cfg, false);

        /* the purge fails: the key stays private, no request ever sees a network */
        race_destroy("fails", true, rc);
        for (int i = 0; i < 4; i++) {
                cr_assert_eq(rc[i].networked, 0, "racer %d saw a network on a private key", i);
                served += rc[i].served;
        }
        cr_assert(privacy_is_private(d->privacy, "alice", "fails"));
        expect_network("fails", "none");

        /* the purge succeeds: a later request may make a fresh session with a
         * network, but never on what was private */
        race_destroy("works", false, rc);
        for (int i = 0; i < 4; i++) {
                cr_assert_eq(rc[i].networked_with_secret, 0, "racer %d saw a network and the private file", i);
                served += rc[i].served;
                networked += rc[i].networked;
        }
        cr_log_info("after a purge that worked, %d execs ran in a fresh networked session", networked);
        cr_log_info("racers served %d execs", served);
        daemon_close(d);
}

Test(ratchet, sigkill_between_mark_and_removal_then_restart_never_shows_bridge)
{
        struct docker_container_info info;
        struct session_info si;
        struct session *s;
        struct sbx_error err = {0};
        char cid[65];
        int status;
        pid_t pid;

        fixture_config(&cfg);
        snprintf(cfg.network_default, sizeof(cfg.network_default), "bridge"); /* a networked container to take away */
        d = fixture_open(&cfg, false);
        cr_assert_eq(session_acquire(d->sessions, "alice", "k", &s, &err), 0, "%s", err.msg);
        session_container_id(s, cid);
        session_release(s);
        expect_network("k", "bridge");
        daemon_close(d); /* containers keep running */

        /* A daemon that records the mark (privacy_mark's first, durable step)
         * and is killed before it can remove the networked container. */
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true};
                struct daemon *c = NULL;
                if (daemon_open(&cfg, &opts, &c, NULL) < 0 ||
                    store_private_add(c->store, "alice", "k", "ds", "src", sbx_wall_ms(), NULL) < 0)
                        _exit(3);
                kill(getpid(), SIGKILL);
                _exit(4);
        }
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child did not die by SIGKILL (%d)", status);
        cr_assert_eq(docker_container_inspect(testenv_docker(), cid, &info, NULL), 0);
        cr_assert(info.running && info.has_network, "the crash did not leave the networked container behind");

        /* The restart removes it before anything can use it. */
        d = fixture_open(&cfg, false);
        cr_assert_eq(docker_container_inspect(testenv_docker(), cid, &info, NULL), -ENOENT,
                     "the networked container of a private session survived the restart");
        expect_network("k", "none");
        cr_assert_eq(session_get_info(d->sessions, "alice", "k", &si), 0);
        cr_assert_str_eq(si.container_id, "");
        session_info_done(&si);
        expect_output("k", NET_PROBE, "0\n");
        expect_network("k", "none");
        daemon_close(d);
}
