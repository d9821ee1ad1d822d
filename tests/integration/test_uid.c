/* Integration tests of the host uid per session (issue 18 item 3) against
 * the real dockerd and kernel:
 *   - two sessions get different uids of sandbox_uid_range, which no host
 *     account or group holds; each workspace is 0700 and its own uid's;
 *   - through the API: write_file, read_file and exec work, a file exec
 *     makes is the session uid's on the host, `id -u` inside is the recorded
 *     uid and `whoami` names it;
 *   - a breakout as A's uid (a forked child that setresuid()s to it on the
 *     host) cannot open B's workspace, signal or trace B's processes, and
 *     still opens its own;
 *   - the uid survives a recreation (docker kill, next request) and a daemon
 *     restart; a purge releases it, and --gc releases one whose workspace is
 *     gone;
 *   - a workspace from before (the image's uid 1000, with a symlink planted
 *     to a host file) is handed over without following the symlink;
 *   - workspace.quota_mode loop: the mounted image's root is the uid's.
 * Everything carries this run's labels and lives under its temp dir. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/container.h"
#include "sandboxd/gc.h"
#include "sandboxd/session.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
#include "testenv.h"

TestSuite(uid, .timeout = 300);

static struct sbx_config cfg;
static struct daemon *d;
static char tok[TOKEN_LEN + 1];

static void open_daemon(void)
{
        struct sbx_error err = {0};

        d = fixture_open_sockets(&cfg);
        if (!tok[0])
                cr_assert_eq(token_create(d->store, "u1", TOKEN_ROLE_AGENT, tok, NULL, &err), 0, "%s", err.msg);
}

static void setup(void)
{
        fixture_config(&cfg);
        cfg.ports_per_session = 0;
        tok[0] = '\0';
        open_daemon();
}

static cJSON *call(const char *method, const char *params_json)
{
        cJSON *r = apic_call(cfg.api_socket, tok, method, apic_json(params_json));
        cr_assert_not_null(r, "no reply to %s", method);
        cr_assert_str_eq(apic_code(r), "", "%s %s: %s", method, params_json, cJSON_PrintUnformatted(r));
        return r;
}

/* exec through the API; stdout (malloc'd); asserts exit code 0. */
static char *api_sh(const char *session, const char *command)
{
        cJSON *params = cJSON_CreateObject(), *r;
        const cJSON *res;
        char *out;

        cJSON_AddStringToObject(params, "session", session);
        cJSON_AddStringToObject(params, "command", command);
        r = apic_call(cfg.api_socket, tok, "exec", params);
        res = apic_result(r);
        cr_assert_not_null(res, "exec %s: %s", command, r ? cJSON_PrintUnformatted(r) : "no reply");
        cr_assert_eq(apic_num(res, "exit_code"), 0, "exec %s: %s", command, cJSON_PrintUnformatted(r));
        out = strdup(apic_str(res, "stdout") ? apic_str(res, "stdout") : "");
        cJSON_Delete(r);
        return out;
}

static uid_t uid_of(const char *session)
{
        uid_t uid = 0;
        cr_assert_eq(sessuid_lookup(d->store, "u1", session, &uid), 0, "no uid recorded for u1:%s", session);
        return uid;
}

static void ws_path(const char *session, char *buf, size_t size)
{
        snprintf(buf, size, "%s/workspaces/u1/%s", cfg.data_dir, session);
}

static void assert_owned(const char *path, uid_t uid)
{
        struct stat st;
        cr_assert_eq(lstat(path, &st), 0, "%s: %s", path, strerror(errno));
        cr_assert_eq(st.st_uid, uid, "%s is owned by %u, not %u", path, (unsigned)st.st_uid, (unsigned)uid);
        cr_assert_eq(st.st_gid, (gid_t)uid, "%s has group %u, not %u", path, (unsigned)st.st_gid, (unsigned)uid);
}

/* In a child that became uid (and gid) on the host, as a breakout from a
 * container would land: 0 if every expectation held, else the check that
 * failed. Handles on both workspaces are taken as root first, so B's own
 * mode is what refuses, not only the closed parents. */
static int as_uid(uid_t uid, int ufd, const char *own, const char *other, pid_t other_pid)
{
        pid_t pid = fork();
        int status;

        cr_assert_geq(pid, 0);
        if (pid == 0) {
                int fd, own_fd = openat(ufd, own, O_PATH | O_DIRECTORY | O_CLOEXEC),
                        other_fd = openat(ufd, other, O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (own_fd < 0 || other_fd < 0 || setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 ||
                    setresuid(uid, uid, uid) < 0)
                        _exit(1);
                fd = openat(other_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd >= 0 || errno != EACCES)
                        _exit(2); /* the other session's workspace, even with a handle on it */
                fd = openat(ufd, other, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd >= 0 || errno != EACCES)
                        _exit(3); /* ... or by name */
                fd = openat(own_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd < 0)
                        _exit(4); /* its own workspace */
                close(fd);
                if (kill(other_pid, 0) == 0 || errno != EPERM)
                        _exit(5); /* signal the other session's init */
                if (ptrace(PTRACE_ATTACH, other_pid, NULL, NULL) == 0 || errno != EPERM)
                        _exit(6); /* trace it */
                _exit(0);
        }
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFEXITED(status));
        return WEXITSTATUS(status);
}

Test(uid, two_sessions_own_uids_api_works_and_a_breakout_reaches_nothing_else)
{
        char wa[SBX_PATH_MAX], wb[SBX_PATH_MAX], host[SBX_PATH_MAX + 32], cid_b[65], *out;
        struct docker_container_info info;
        uid_t a, b;
        cJSON *r;
        int ufd;

        setup();
        r = call("write_file", "{\"session\": \"a\", \"path\": \"notes/a.txt\", \"content\": \"from a\\n\"}");
        cJSON_Delete(r);
        r = call("write_file", "{\"session\": \"b\", \"path\": \"b.txt\", \"content\": \"from b\\n\"}");
        cJSON_Delete(r);
        r = call("read_file", "{\"session\": \"a\", \"path\": \"notes/a.txt\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "content"), "from a\n");
        cJSON_Delete(r);

        a = uid_of("a");
        b = uid_of("b");
        cr_assert_neq(a, b, "two sessions share uid %u", (unsigned)a);
        cr_assert(a >= (uid_t)cfg.sandbox_uid_lo && a <= (uid_t)cfg.sandbox_uid_hi);
        cr_assert(b >= (uid_t)cfg.sandbox_uid_lo && b <= (uid_t)cfg.sandbox_uid_hi);
        /* no host account or group holds them */
        cr_assert_null(getpwuid(a));
        cr_assert_null(getpwuid(b));
        cr_assert_null(getgrgid((gid_t)a));
        cr_assert_null(getgrgid((gid_t)b));

        /* inside: the recorded uid, with a name; what exec makes is the uid's on the host */
        out = api_sh("a", "id -u; id -g; whoami; echo $HOME; echo made > /workspace/by-exec");
        {
                char want[128];
                snprintf(want, sizeof(want), "%u\n%u\nsandbox\n/workspace\n", (unsigned)a, (unsigned)a);
                cr_assert_str_eq(out, want);
        }
        free(out);
        ws_path("a", wa, sizeof(wa));
        ws_path("b", wb, sizeof(wb));
        snprintf(host, sizeof(host), "%s/by-exec", wa);
        assert_owned(host, a);
        snprintf(host, sizeof(host), "%s/notes/a.txt", wa);
        assert_owned(host, a);
        snprintf(host, sizeof(host), "%s/b.txt", wb);
        assert_owned(host, b);
        /* each workspace: 0700 and its own session's */
        assert_owned(wa, a);
        assert_owned(wb, b);
        {
                struct stat st;
                cr_assert_eq(stat(wa, &st), 0);
                cr_assert_eq(st.st_mode & 07777, 0700);
                cr_assert_eq(stat(wb, &st), 0);
                cr_assert_eq(st.st_mode & 07777, 0700);
        }

        /* every workspace sits in root's closed directories */
        {
                struct stat st;
                snprintf(host, sizeof(host), "%s/workspaces", cfg.data_dir);
                cr_assert_eq(stat(host, &st), 0);
                cr_assert(st.st_uid == 0 && (st.st_mode & 07777) == 0700, "%s: %o", host, st.st_mode & 07777);
                snprintf(host, sizeof(host), "%s/workspaces/u1", cfg.data_dir);
                cr_assert_eq(stat(host, &st), 0);
                cr_assert(st.st_uid == 0 && (st.st_mode & 07777) == 0700, "%s: %o", host, st.st_mode & 07777);
        }

        /* a breakout from A: B's workspace, B's processes */
        fixture_container_of(d, "u1", "b", cid_b);
        cr_assert_eq(docker_container_inspect(testenv_docker(), cid_b, &info, NULL), 0);
        cr_assert_gt(info.pid, 0);
        {
                char status[64], line[256];
                FILE *f;
                unsigned real = 0;
                snprintf(status, sizeof(status), "/proc/%d/status", info.pid);
                f = fopen(status, "re");
                cr_assert_not_null(f);
                while (fgets(line, sizeof(line), f))
                        if (sscanf(line, "Uid: %u", &real) == 1)
                                break;
                fclose(f);
                cr_assert_eq(real, (unsigned)b, "B's init runs as %u on the host, not B's uid %u", real, (unsigned)b);
        }
        snprintf(host, sizeof(host), "%s/workspaces/u1", cfg.data_dir);
        ufd = open(host, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        cr_assert_geq(ufd, 0);
        {
                char cid_a[65];
                struct docker_container_info ia;
                int k = as_uid(a, ufd, "a", "b", info.pid);
                cr_assert_eq(k, 0,
                             "as A's uid, check %d of the breakout failed (1 setup, 2 B's workspace opened, "
                             "3 the same by name, 4 own refused, 5 B signalled, 6 B traced)",
                             k);
                fixture_container_of(d, "u1", "a", cid_a);
                cr_assert_eq(docker_container_inspect(testenv_docker(), cid_a, &ia, NULL), 0);
                k = as_uid(b, ufd, "b", "a", ia.pid);
                cr_assert_eq(k, 0, "as B's uid, check %d failed", k);
        }
        close(ufd);
        daemon_close(d);
}

static void expect_id(const char *session, uid_t uid)
{
        char *out = api_sh(session, "id -u");
        cr_assert_eq((uid_t)strtoul(out, NULL, 10), uid, "id -u says %s, the recorded uid is %u", out, (unsigned)uid);
        free(out);
}

static bool exists(const char *path)
{
        struct stat st;
        return lstat(path, &st) == 0;
}

Test(uid, kept_across_recreation_and_restart_released_by_purge_and_gc)
{
        char cid[65], cid2[65], cmd[128], ws[SBX_PATH_MAX], ident[SBX_PATH_MAX + 32];
        struct sbx_error err = {0};
        struct gc_report rep;
        uid_t a, none;
        int64_t ghost;

        setup();
        cr_assert_eq(sessuid_lookup(d->store, "u1", "a", &none), -ENOENT, "a uid before the first container");
        free(api_sh("a", "echo kept > /workspace/f"));
        a = uid_of("a");
        expect_id("a", a);

        /* recreation: the container dies, the next request makes another under the same uid */
        fixture_container_of(d, "u1", "a", cid);
        snprintf(cmd, sizeof(cmd), "kill %s", cid);
        cr_assert_eq(fixture_docker_cli(cmd), 0);
        expect_id("a", a);
        fixture_container_of(d, "u1", "a", cid2);
        cr_assert_str_neq(cid, cid2, "the killed container was not replaced");
        cr_assert_eq(uid_of("a"), a);

        /* a daemon restart: the store remembers */
        daemon_close(d);
        open_daemon();
        cr_assert_eq(uid_of("a"), a);
        expect_id("a", a);
        /* another session does not get it, and a destroy that keeps the workspace keeps the uid */
        free(api_sh("b", "true"));
        cr_assert_neq(uid_of("b"), a);
        cr_assert_eq(session_destroy(d->sessions, "u1", "a", false, &err), 0, "%s", err.msg);
        cr_assert_eq(uid_of("a"), a);
        expect_id("a", a);
        {
                char *out = api_sh("a", "cat /workspace/f");
                cr_assert_str_eq(out, "kept\n");
                free(out);
        }

        /* purge: the workspace goes, and the uid with it (and its identity files) */
        snprintf(ident, sizeof(ident), "%s/identities/%u.passwd", cfg.data_dir, (unsigned)a);
        cr_assert(exists(ident));
        cr_assert_eq(session_destroy(d->sessions, "u1", "a", true, &err), 0, "%s", err.msg);
        ws_path("a", ws, sizeof(ws));
        cr_assert_not(exists(ws));
        cr_assert_eq(sessuid_lookup(d->store, "u1", "a", &none), -ENOENT, "the purged session keeps uid %u",
                     (unsigned)none);
        cr_assert_not(exists(ident));
        /* handed out round the range: the next new session does not get the released uid back */
        free(api_sh("c", "true"));
        cr_assert_neq(uid_of("c"), a);

        /* --gc: a uid whose workspace is gone (a daemon that died between purge and release) */
        cr_assert_eq(store_uid_assign(d->store, "u1", "ghost", cfg.sandbox_uid_lo, cfg.sandbox_uid_hi, sbx_wall_ms(),
                                      &ghost),
                     0);
        cr_assert_eq(gc_run(&cfg, &(struct gc_options){.dry_run = false}, &rep, &err), 0, "%s", err.msg);
        cr_assert_eq(rep.kinds[GC_UIDS].count, 1, "gc released %llu uids",
                     (unsigned long long)rep.kinds[GC_UIDS].count);
        gc_report_done(&rep);
        cr_assert_eq(sessuid_lookup(d->store, "u1", "ghost", &none), -ENOENT);
        /* ... and never one whose workspace exists */
        (void)uid_of("b");
        (void)uid_of("c");
        daemon_close(d);
}

Test(uid, a_workspace_from_before_is_handed_over_without_following_symlinks)
{
        char ws[SBX_PATH_MAX], p[SBX_PATH_MAX + 64], outside[SBX_PATH_MAX];
        struct stat st;
        uid_t a;
        int fd;

        setup();
        /* what an older daemon left: the image's uid 1000 owns it, a tenant planted a
         * symlink to a host file, and root owns one entry */
        ws_path("old", ws, sizeof(ws));
        snprintf(p, sizeof(p), "%s/workspaces", cfg.data_dir);
        cr_assert(mkdir(cfg.data_dir, 0711) == 0 || errno == EEXIST);
        cr_assert(mkdir(p, 0700) == 0 || errno == EEXIST);
        snprintf(p, sizeof(p), "%s/workspaces/u1", cfg.data_dir);
        cr_assert(mkdir(p, 0700) == 0 || errno == EEXIST);
        cr_assert_eq(mkdir(ws, 0700), 0);
        cr_assert_eq(chown(ws, 1000, 1000), 0);
        snprintf(p, sizeof(p), "%s/sub", ws);
        cr_assert_eq(mkdir(p, 0755), 0);
        cr_assert_eq(chown(p, 1000, 1000), 0);
        snprintf(p, sizeof(p), "%s/sub/file", ws);
        fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
        cr_assert_geq(fd, 0);
        close(fd);
        cr_assert_eq(chown(p, 1000, 1000), 0);
        snprintf(p, sizeof(p), "%s/rootfile", ws);
        fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
        cr_assert_geq(fd, 0);
        close(fd);
        snprintf(outside, sizeof(outside), "%s/outside", cfg.data_dir);
        fd = open(outside, O_WRONLY | O_CREAT | O_EXCL, 0600);
        cr_assert_geq(fd, 0);
        close(fd);
        cr_assert_eq(chown(outside, 1000, 1000), 0); /* even a target the old uid owns stays as it is */
        snprintf(p, sizeof(p), "%s/sub/link", ws);
        cr_assert_eq(symlink(outside, p), 0);
        cr_assert_eq(lchown(p, 1000, 1000), 0);

        {
                char *out = api_sh("old", "id -u; cat /workspace/sub/file && touch /workspace/sub/new && echo ok");
                a = uid_of("old");
                char want[64];
                snprintf(want, sizeof(want), "%u\nok\n", (unsigned)a);
                cr_assert_str_eq(out, want);
                free(out);
        }
        assert_owned(ws, a);
        snprintf(p, sizeof(p), "%s/sub", ws);
        assert_owned(p, a);
        snprintf(p, sizeof(p), "%s/sub/file", ws);
        assert_owned(p, a);
        snprintf(p, sizeof(p), "%s/sub/link", ws);
        assert_owned(p, a); /* the link itself */
        cr_assert_eq(stat(outside, &st), 0);
        cr_assert_eq(st.st_uid, 1000, "the symlink was followed: its target now belongs to %u", (unsigned)st.st_uid);
        snprintf(p, sizeof(p), "%s/rootfile", ws);
        cr_assert_eq(lstat(p, &st), 0);
        cr_assert_eq(st.st_uid, 0, "a root-owned entry was given away");
        daemon_close(d);
}

Test(uid, loop_mode_image_root_is_the_session_uid)
{
        char ws[SBX_PATH_MAX], *out, want[64];
        uid_t a;

        fixture_config(&cfg);
        cfg.ports_per_session = 0;
        snprintf(cfg.workspace_quota_mode, sizeof(cfg.workspace_quota_mode), "loop");
        cfg.workspace_quota_bytes = 16 << 20;
        cfg.workspace_inodes = 1024;
        tok[0] = '\0';
        open_daemon();
        out = api_sh("a", "id -u; stat -c %u /workspace; touch /workspace/x && stat -c %u /workspace/x");
        a = uid_of("a");
        snprintf(want, sizeof(want), "%u\n%u\n%u\n", (unsigned)a, (unsigned)a, (unsigned)a);
        cr_assert_str_eq(out, want);
        free(out);
        ws_path("a", ws, sizeof(ws));
        assert_owned(ws, a); /* the mounted image's root, seen from the host */
        {
                struct sbx_error err = {0};
                cr_assert_eq(session_destroy(d->sessions, "u1", "a", true, &err), 0, "%s", err.msg);
        }
        daemon_close(d);
}

Test(uid, python_node_and_pip_know_the_session_user)
{
        char *out, want[256];
        uid_t a;

        fixture_config(&cfg);
        cfg.ports_per_session = 0;
        snprintf(cfg.image, sizeof(cfg.image), "%s", TESTENV_PYTHON_IMAGE);
        tok[0] = '\0';
        open_daemon();
        out = api_sh("py",
                     "whoami; python3 -c 'import getpass, os, pwd, site; "
                     "print(getpass.getuser(), pwd.getpwuid(os.getuid()).pw_dir, os.path.expanduser(\"~\"), "
                     "site.getuserbase())'; "
                     "node -e 'const os = require(\"os\"); console.log(os.userInfo().username, os.homedir())'");
        a = uid_of("py");
        (void)a;
        snprintf(want, sizeof(want), "sandbox\nsandbox /workspace /workspace /workspace/.local\nsandbox /workspace\n");
        cr_assert_str_eq(out, want);
        free(out);
        daemon_close(d);
}

Test(uid, the_daemon_refuses_a_range_a_host_account_holds)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true};
        struct sbx_error err = {0};
        struct daemon *x = NULL;

        fixture_config(&cfg);
        cfg.sandbox_uid_lo = 60000; /* nobody, 65534, is in every passwd database */
        cfg.sandbox_uid_hi = 70000;
        cr_assert_eq(daemon_open(&cfg, &opts, &x, &err), -EEXIST, "the daemon started: %s", err.msg);
        cr_assert_null(x);
        cr_assert_not_null(strstr(err.msg, "sandbox_uid_range 60000-70000"), "%s", err.msg);
        cr_assert_not_null(strstr(err.msg, "65534"), "%s", err.msg);
}

Test(uid, a_container_from_before_per_session_uids_is_replaced_at_restart)
{
        char cid[65], cid2[65], cause[64] = "";
        struct session_info info;
        uid_t a;

        setup();
        free(api_sh("old", "true"));
        fixture_container_of(d, "u1", "old", cid);
        /* what an older daemon left: a running container, and no uid recorded for its session */
        cr_assert_eq(store_uid_release(d->store, "u1", "old"), 0);
        daemon_close(d);
        open_daemon();
        cr_assert_eq(session_get_info(d->sessions, "u1", "old", &info), 0);
        cr_assert_eq(info.state, SESSION_ERROR);
        snprintf(cause, sizeof(cause), "%s", info.error_cause);
        session_info_done(&info);
        cr_assert_str_eq(cause, "uid_per_session");
        cr_assert_eq(fixture_count_containers("u1", "old"), 0, "the old container was kept");
        free(api_sh("old", "true")); /* the next request: a container under the session's own uid */
        a = uid_of("old");
        expect_id("old", a);
        fixture_container_of(d, "u1", "old", cid2);
        cr_assert_str_neq(cid, cid2);
        daemon_close(d);
}
