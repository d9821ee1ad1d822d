/* Integration tests of the admin socket and sandboxctl against the real
 * dockerd: every command, socket permissions, the peer-credential check,
 * admin_group, stale sockets. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <grp.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/exec.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
#include "testenv.h"

TestSuite(admin, .timeout = 600);

#define OTHER_UID 54321

static struct sbx_config cfg;
static struct daemon *d;

/* Sockets under <tmp>/run, with every directory on the way searchable, so a
 * refusal can only come from the socket itself. */
static void make_config(void)
{
        char dir[SBX_PATH_MAX];

        fixture_config(&cfg);
        /* a port range of this suite's own: suites run side by side */
        cfg.port_range_lo = 27500;
        cfg.port_range_hi = 27999;
        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        dirname(dir);
        cr_assert_eq(chmod(dir, 0755), 0);
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/run/api.sock", dir);
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/run/admin.sock", dir);
}

static int try_open(void)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};
        (void)testenv_docker();
        return fronts_open(&cfg, &opts, &d, &err);
}

static void open_daemon(void)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};
        (void)testenv_docker();
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
}

static void close_daemon(void)
{
        daemon_close(d);
        d = NULL;
}

static cJSON *admin(const char *line)
{
        return apic_admin(cfg.admin_socket, line);
}

static const cJSON *ok(cJSON *reply)
{
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(reply, "ok")), "%s", cJSON_PrintUnformatted(reply));
        return cJSON_GetObjectItem(reply, "result");
}

static const char *errcode(const cJSON *reply)
{
        return apic_str(cJSON_GetObjectItem(reply, "error"), "code");
}

/* In a child that dropped to uid/gid: connect to path and, if that works,
 * send line and read one reply line. Returns "ERRNO:<n>" or the reply. */
static char *as_user(uid_t uid, gid_t gid, const char *path, const char *line)
{
        int p[2];
        pid_t pid;
        char buf[4096];
        size_t got = 0;
        int status;

        cr_assert_eq(pipe(p), 0);
        pid = fork();
        if (pid < 0) /* no assertion may run in the child: Criterion would block it */
                cr_assert_fail("fork: %m");
        if (pid == 0) {
                struct sockaddr_un sa = {.sun_family = AF_UNIX};
                char out[4096];
                int fd, n = 0;
                close(p[0]);
                /* the daemon may refuse and close before our write: EPIPE, not a death by SIGPIPE */
                signal(SIGPIPE, SIG_IGN);
                if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
                        _exit(90);
                strncpy(sa.sun_path, path, sizeof(sa.sun_path) - 1);
                fd = socket(AF_UNIX, SOCK_STREAM, 0);
                if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                        n = snprintf(out, sizeof(out), "ERRNO:%d", errno);
                } else {
                        (void)!send(fd, line, strlen(line), MSG_NOSIGNAL); /* the refusal may close first: no SIGPIPE */
                        while (n < (int)sizeof(out) - 1) {
                                ssize_t k = read(fd, out + n, 1);
                                if (k <= 0 || out[n] == '\n')
                                        break;
                                n++;
                        }
                }
                (void)!write(p[1], out, (size_t)n);
                _exit(0);
        }
        close(p[1]);
        for (;;) {
                ssize_t k = read(p[0], buf + got, sizeof(buf) - 1 - got);
                if (k <= 0)
                        break;
                got += (size_t)k;
        }
        close(p[0]);
        buf[got] = '\0';
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed to drop privileges (status 0x%x)",
                  status);
        return strdup(buf);
}

Test(admin, every_command)
{
        cJSON *r;
        const cJSON *res, *x;
        struct session *s = NULL;
        struct sbx_error err = {0};
        char token[128], token_id[64], line[512];
        int64_t audits = 0;

        make_config();
        open_daemon();

        r = admin("{\"cmd\": \"health\", \"id\": 9}");
        res = ok(r);
        cr_assert_str_eq(apic_str(res, "status"), "ok");
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(res, "docker"), "ok")));
        cr_assert_eq(apic_num(r, "id"), 9);
        cJSON_Delete(r);

        /* a session with an execution, to see in the listings */
        cr_assert_eq(session_acquire(d->sessions, "alice", "s1", &s, &err), 0, "%s", err.msg);
        session_release(s);
        {
                struct exec_request req = {.user = "alice", .session = "s1", .command = "echo hi", .actor = "test"};
                struct exec_result res2;
                cr_assert_eq(exec_run(d->exec, &req, &res2, &err), 0);
                exec_result_done(&res2);
        }

        r = admin("{\"cmd\": \"stats\"}");
        res = ok(r);
        cr_assert_eq(apic_num(cJSON_GetObjectItem(res, "sessions"), "running"), 1);
        cr_assert_eq(apic_num(cJSON_GetObjectItem(res, "sessions"), "total"), 1);
        cr_assert_eq(apic_num(cJSON_GetObjectItem(res, "ports"), "used"), cfg.ports_per_session);
        cr_assert_geq(apic_num(cJSON_GetObjectItem(res, "ports"), "total"), cfg.ports_per_session);
        cr_assert_eq(apic_num(res, "executions_running"), 0);
        cr_assert_not_null(apic_str(res, "docker_version"));
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(res, "monitor_last_poll"))); /* no monitor in this test */
        cJSON_Delete(r);

        r = admin("{\"cmd\": \"sessions.list\"}");
        res = ok(r);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(res, "sessions")), 1);
        x = cJSON_GetArrayItem(cJSON_GetObjectItem(res, "sessions"), 0);
        cr_assert_str_eq(apic_str(x, "user"), "alice");
        cr_assert_str_eq(apic_str(x, "state"), "running");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(x, "ports")), cfg.ports_per_session);
        cJSON_Delete(r);
        r = admin("{\"cmd\": \"sessions.list\", \"user\": \"bob\"}");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(ok(r), "sessions")), 0);
        cJSON_Delete(r);
        r = admin("{\"cmd\": \"sessions.list\", \"state\": \"stopped\"}");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(ok(r), "sessions")), 0);
        cJSON_Delete(r);
        r = admin("{\"cmd\": \"sessions.list\", \"state\": \"sleepy\"}");
        cr_assert_str_eq(errcode(r), "invalid");
        cJSON_Delete(r);

        r = admin("{\"cmd\": \"session.show\", \"user\": \"alice\", \"session\": \"s1\"}");
        res = ok(r);
        cr_assert_eq(strlen(apic_str(res, "container_id")), 64);
        cr_assert_not_null(strstr(apic_str(res, "workspace"), "/workspaces/alice/s1"));
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(res, "executions")), 1);
        cr_assert_str_eq(apic_str(cJSON_GetArrayItem(cJSON_GetObjectItem(res, "executions"), 0), "command_preview"),
                         "echo hi");
        cr_assert(cJSON_IsArray(cJSON_GetObjectItem(res, "services")));
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(res, "datasets")), 0);
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(res, "private")));
        cJSON_Delete(r);
        r = admin("{\"cmd\": \"session.show\", \"user\": \"alice\", \"session\": \"nope\"}");
        cr_assert_str_eq(errcode(r), "not_found");
        cJSON_Delete(r);
        r = admin("{\"cmd\": \"session.show\", \"user\": \"alice\"}");
        cr_assert_str_eq(errcode(r), "bad_request");
        cJSON_Delete(r);
        r = admin("{\"cmd\": \"session.show\", \"user\": \"../x\", \"session\": \"s1\"}");
        cr_assert_str_eq(errcode(r), "invalid");
        cJSON_Delete(r);

        r =
                admin("{\"cmd\": \"session.mark_private\", \"user\": \"alice\", \"session\": \"s1\", "
                      "\"dataset\": \"payroll\", \"source\": \"hr-db\"}");
        res = ok(r);
        cr_assert_str_eq(apic_str(res, "network_mode"), "none");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(res, "datasets")), 1);
        cJSON_Delete(r);
        r = admin("{\"cmd\": \"session.show\", \"user\": \"alice\", \"session\": \"s1\"}");
        res = ok(r);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "private")));
        cr_assert_str_eq(apic_str(cJSON_GetArrayItem(cJSON_GetObjectItem(res, "datasets"), 0), "source"), "hr-db");
        cJSON_Delete(r);

        r = admin("{\"cmd\": \"token.create\", \"user\": \"carol\", \"role\": \"connector\"}");
        res = ok(r);
        snprintf(token, sizeof(token), "%s", apic_str(res, "token"));
        snprintf(token_id, sizeof(token_id), "%s", apic_str(res, "id"));
        cr_assert_eq(strlen(token), TOKEN_LEN);
        cr_assert_eq(strncmp(token, "sbx_", 4), 0);
        cr_assert_str_eq(apic_str(res, "role"), "connector");
        cJSON_Delete(r);
        {
                struct token_info info;
                cr_assert_eq(token_verify(d->store, token, &info), 0);
                cr_assert_str_eq(info.user, "carol");
        }
        r = admin("{\"cmd\": \"token.create\", \"user\": \"dave\"}");
        cr_assert_str_eq(apic_str(ok(r), "role"), "agent");
        cJSON_Delete(r);
        r = admin("{\"cmd\": \"token.create\", \"user\": \"dave\", \"role\": \"root\"}");
        cr_assert_str_eq(errcode(r), "invalid");
        cJSON_Delete(r);
        r = admin("{\"cmd\": \"token.create\", \"user\": \"bad user\"}");
        cr_assert_str_eq(errcode(r), "invalid");
        cJSON_Delete(r);

        r = admin("{\"cmd\": \"token.list\"}");
        res = ok(r);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(res, "tokens")), 2);
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(res, "tokens")) {
                cr_assert_null(cJSON_GetObjectItem(x, "token"), "a secret is listed");
                char *text = cJSON_PrintUnformatted(x);
                cr_assert_null(strstr(text, token + 4), "a secret is listed");
                free(text);
        }
        cJSON_Delete(r);

        snprintf(line, sizeof(line), "{\"cmd\": \"token.revoke\", \"id\": \"%s\"}", token_id);
        r = admin(line);
        ok(r);
        cJSON_Delete(r);
        r = admin(line);
        cr_assert_str_eq(errcode(r), "conflict");
        cJSON_Delete(r);
        r = admin("{\"cmd\": \"token.revoke\", \"id\": \"nonexistent\"}");
        cr_assert_str_eq(errcode(r), "not_found");
        cJSON_Delete(r);
        {
                struct token_info info;
                cr_assert_eq(token_verify(d->store, token, &info), -EACCES);
        }

        r = admin("{\"cmd\": \"session.destroy\", \"user\": \"alice\", \"session\": \"s1\", \"purge\": true}");
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(ok(r), "purged")));
        cJSON_Delete(r);
        cr_assert_eq(fixture_count_containers("alice", "s1"), 0);
        {
                char ws[SBX_PATH_MAX + 64];
                snprintf(ws, sizeof(ws), "%s/workspaces/alice/s1", cfg.data_dir);
                cr_assert_neq(access(ws, F_OK), 0, "workspace not purged");
        }
        r = admin("{\"cmd\": \"sessions.list\"}");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(ok(r), "sessions")), 0);
        cJSON_Delete(r);

        /* mutations are audited */
        store_audit_count(d->store, NULL, NULL, "admin.token.create", &audits);
        cr_assert_eq(audits, 2);
        store_audit_count(d->store, NULL, NULL, "admin.token.revoke", &audits);
        cr_assert_eq(audits, 1);
        store_audit_count(d->store, "alice", "s1", "admin.session.destroy", &audits);
        cr_assert_eq(audits, 1);
        store_audit_count(d->store, "alice", "s1", "admin.session.mark_private", &audits);
        cr_assert_eq(audits, 1);

        /* clean errors for the malformed */
        r = admin("{\"cmd\": \"reboot\"}");
        cr_assert_str_eq(errcode(r), "bad_request");
        cJSON_Delete(r);
        r = admin("not json");
        cr_assert_str_eq(errcode(r), "bad_request");
        cJSON_Delete(r);
        r = admin("{\"cmd\": 5}");
        cr_assert_str_eq(errcode(r), "bad_request");
        cJSON_Delete(r);
        r = admin("{\"cmd\": \"session.destroy\", \"user\": \"a\", \"session\": \"b\", \"purge\": \"yes\"}");
        cr_assert_str_eq(errcode(r), "bad_request");
        cJSON_Delete(r);
        r = admin("{\"cmd\": \"health\"}");
        ok(r);
        cJSON_Delete(r);
        close_daemon();
}

Test(admin, socket_mode_and_peer_check)
{
        struct stat st;
        char *reply;
        int64_t refused = 0;

        make_config();
        open_daemon();
        cr_assert_eq(lstat(cfg.admin_socket, &st), 0);
        cr_assert(S_ISSOCK(st.st_mode));
        cr_assert_eq(st.st_mode & 07777, 0600, "mode %o", st.st_mode & 07777);
        cr_assert_eq(st.st_uid, getuid());

        /* the path is reachable for anyone (the API socket beside it answers)... */
        reply = as_user(OTHER_UID, OTHER_UID, cfg.api_socket, "{}\n");
        cr_assert_null(strstr(reply, "ERRNO"), "API socket unreachable: %s", reply);
        free(reply);
        /* ...but the admin socket's mode refuses another uid at connect */
        reply = as_user(OTHER_UID, OTHER_UID, cfg.admin_socket, "{\"cmd\": \"health\"}\n");
        cr_assert_str_eq(reply, "ERRNO:13", "got %s", reply);
        free(reply);

        /* with the mode opened up, the peer-credential check still refuses */
        cr_assert_eq(chmod(cfg.admin_socket, 0666), 0);
        reply = as_user(OTHER_UID, OTHER_UID, cfg.admin_socket, "{\"cmd\": \"token.create\", \"user\": \"evil\"}\n");
        cr_assert_not_null(strstr(reply, "\"forbidden\""), "got %s", reply);
        cr_assert_null(strstr(reply, "sbx_"), "a token was made: %s", reply);
        free(reply);
        store_audit_count(d->store, NULL, NULL, "admin.refused", &refused);
        cr_assert_eq(refused, 1);
        {
                cJSON *r = admin("{\"cmd\": \"token.list\"}");
                cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(ok(r), "tokens")), 0);
                cJSON_Delete(r);
        }
        /* root is still served */
        {
                cJSON *r = admin("{\"cmd\": \"health\"}");
                ok(r);
                cJSON_Delete(r);
        }
        close_daemon();
        cr_assert_neq(access(cfg.admin_socket, F_OK), 0, "admin socket left behind");
}

Test(admin, admin_group)
{
        struct group *g = getgrnam("daemon");
        struct stat st;
        char *reply;

        cr_assert_not_null(g, "no group named daemon on this system");
        make_config();
        snprintf(cfg.admin_group, sizeof(cfg.admin_group), "daemon");
        open_daemon();
        cr_assert_eq(lstat(cfg.admin_socket, &st), 0);
        cr_assert_eq(st.st_mode & 07777, 0660, "mode %o", st.st_mode & 07777);
        cr_assert_eq(st.st_gid, g->gr_gid);

        reply = as_user(OTHER_UID, g->gr_gid, cfg.admin_socket, "{\"cmd\": \"health\"}\n");
        cr_assert_not_null(strstr(reply, "\"ok\":true"), "group member refused: %s", reply);
        free(reply);
        reply = as_user(OTHER_UID, OTHER_UID, cfg.admin_socket, "{\"cmd\": \"health\"}\n");
        cr_assert_str_eq(reply, "ERRNO:13", "non-member got in: %s", reply);
        free(reply);
        close_daemon();

        snprintf(cfg.admin_group, sizeof(cfg.admin_group), "no-such-group-sbx");
        cr_assert_eq(try_open(), -EINVAL);
}

Test(admin, stale_socket_is_replaced_other_files_are_not)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        char dir[SBX_PATH_MAX], target[SBX_PATH_MAX + 16];
        struct stat st;
        cJSON *r;
        int fd;
        FILE *f;

        make_config();
        snprintf(dir, sizeof(dir), "%s", cfg.admin_socket);
        dirname(dir);
        cr_assert_eq(mkdir(dir, 0755), 0);

        /* a socket nobody listens on (a crashed daemon's) */
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", cfg.admin_socket);
        cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        close(fd);
        cr_assert_eq(chmod(cfg.admin_socket, 0666), 0);
        open_daemon();
        cr_assert_eq(lstat(cfg.admin_socket, &st), 0);
        cr_assert_eq(st.st_mode & 07777, 0600, "the stale socket's mode survived");
        r = admin("{\"cmd\": \"health\"}");
        ok(r);
        cJSON_Delete(r);
        close_daemon();

        /* a regular file is never replaced */
        f = fopen(cfg.admin_socket, "w");
        fputs("keep me", f);
        fclose(f);
        cr_assert_eq(try_open(), -EEXIST);
        cr_assert_eq(lstat(cfg.admin_socket, &st), 0);
        cr_assert(S_ISREG(st.st_mode));
        cr_assert_eq(st.st_size, 7);
        unlink(cfg.admin_socket);

        /* nor is a symlink, nor what it points to */
        snprintf(target, sizeof(target), "%s/target", dir);
        f = fopen(target, "w");
        fputs("x", f);
        fclose(f);
        cr_assert_eq(symlink(target, cfg.admin_socket), 0);
        cr_assert_eq(try_open(), -EEXIST);
        cr_assert_eq(lstat(cfg.admin_socket, &st), 0);
        cr_assert(S_ISLNK(st.st_mode));
        cr_assert_eq(stat(target, &st), 0);
        cr_assert(S_ISREG(st.st_mode));
        unlink(cfg.admin_socket);

        /* and the socket directory is made 0755 when missing */
        make_config();
        open_daemon();
        snprintf(dir, sizeof(dir), "%s", cfg.admin_socket);
        cr_assert_eq(stat(dirname(dir), &st), 0);
        cr_assert_eq(st.st_mode & 0777, 0755);
        close_daemon();
}

/* Run sandboxctl; returns its exit status, stdout in *out (malloc'd). */
static int ctl(const char *args, char **out)
{
        char cmd[2048];
        FILE *p;
        size_t n = 0, cap = 65536;
        int status;

        snprintf(cmd, sizeof(cmd), "%s/sandboxctl --socket '%s' %s 2>/dev/null", SANDBOXD_BINARY_DIR, cfg.admin_socket,
                 args);
        p = popen(cmd, "r");
        cr_assert_not_null(p);
        *out = malloc(cap);
        for (;;) {
                size_t k = fread(*out + n, 1, cap - 1 - n, p);
                if (k == 0)
                        break;
                n += k;
        }
        (*out)[n] = '\0';
        status = pclose(p);
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(admin, sandboxctl)
{
        char *out, id[64] = "", args[256];
        struct session *s = NULL;
        struct sbx_error err = {0};
        cJSON *j;

        make_config();
        open_daemon();
        cr_assert_eq(ctl("health", &out), 0);
        cr_assert_not_null(strstr(out, "status:  ok"), "%s", out);
        free(out);
        cr_assert_eq(ctl("--json stats", &out), 0);
        j = cJSON_Parse(out);
        cr_assert_not_null(j, "%s", out);
        cr_assert_eq(apic_num(cJSON_GetObjectItem(j, "sessions"), "total"), 0);
        cJSON_Delete(j);
        free(out);

        cr_assert_eq(ctl("token create erin connector", &out), 0);
        cr_assert_not_null(strstr(out, "token:  sbx_"), "%s", out);
        sscanf(strstr(out, "id:") + 3, "%63s", id);
        free(out);
        cr_assert_eq(ctl("token list", &out), 0);
        cr_assert_not_null(strstr(out, id), "%s", out);
        cr_assert_not_null(strstr(out, "connector"), "%s", out);
        free(out);
        snprintf(args, sizeof(args), "token revoke %s", id);
        cr_assert_eq(ctl(args, &out), 0);
        free(out);
        cr_assert_eq(ctl(args, &out), 1, "revoking twice is an error");
        free(out);

        cr_assert_eq(session_acquire(d->sessions, "erin", "work", &s, &err), 0, "%s", err.msg);
        session_release(s);
        cr_assert_eq(ctl("sessions", &out), 0);
        cr_assert_not_null(strstr(out, "erin"), "%s", out);
        cr_assert_not_null(strstr(out, "running"), "%s", out);
        free(out);
        cr_assert_eq(ctl("sessions --state stopped", &out), 0);
        cr_assert_not_null(strstr(out, "(no sessions)"), "%s", out);
        free(out);
        cr_assert_eq(ctl("show erin work", &out), 0);
        cr_assert_not_null(strstr(out, "session:       erin:work"), "%s", out);
        free(out);
        cr_assert_eq(ctl("mark-private erin work payroll hr", &out), 0);
        cr_assert_not_null(strstr(out, "private (network none)"), "%s", out);
        free(out);
        cr_assert_eq(ctl("destroy erin work --purge", &out), 0);
        cr_assert_not_null(strstr(out, "destroyed erin:work"), "%s", out);
        free(out);
        cr_assert_eq(ctl("show erin work", &out), 1);
        free(out);

        cr_assert_eq(ctl("frobnicate", &out), 2);
        free(out);
        cr_assert_eq(ctl("show onlyuser", &out), 2);
        free(out);
        close_daemon();
        cr_assert_eq(ctl("health", &out), 3, "no daemon: unreachable");
        free(out);
}

/* The engine seam (engine.h): stats names the engine, what it can enforce,
 * and which of the config's settings it leaves out (Docker: none). */
Test(admin, stats_name_the_engine_and_what_it_leaves_out)
{
        const cJSON *res, *en, *caps, *it;
        bool pids = false;
        cJSON *r;

        make_config();
        open_daemon();
        r = admin("{\"cmd\": \"stats\"}");
        res = ok(r);
        en = cJSON_GetObjectItem(res, "engine");
        cr_assert_not_null(en, "stats has no engine");
        cr_assert_str_eq(apic_str(en, "name"), "docker");
        caps = cJSON_GetObjectItem(en, "capabilities");
        /* Docker enforces every capability; the memory capture is the microVMs', offered beside it
         * where QEMU and the guest are installed (engine.microvm) */
        bool vms = cJSON_GetObjectItem(en, "microvm") != NULL, mem = false;
        cr_assert_eq(cJSON_GetArraySize(caps), vms ? 13 : 12, "Docker enforces every capability (microvm: %d)", vms);
        cJSON_ArrayForEach(it, caps) {
                pids = pids || strcmp(it->valuestring, "pids_limit") == 0;
                mem = mem || strcmp(it->valuestring, "memory_capture") == 0;
        }
        cr_assert(pids);
        cr_assert_eq(mem, vms, "memory_capture is there exactly when the microVMs are");
        cr_assert(cJSON_IsArray(cJSON_GetObjectItem(en, "unenforced")));
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(en, "unenforced")), 0);
        cJSON_Delete(r);
        close_daemon();
}
