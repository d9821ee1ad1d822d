/* Integration tests of tenant isolation against the real dockerd: the
 * daemon runs as a child process (the sandboxd binary), so its memory can be
 * read from /proc and local peers of other uids can connect to it.
 *
 *   - executions end on time whatever they do with stdin (issue 12 item 1);
 *   - the fronts bound what an unauthenticated peer costs (item 2);
 *   - NUL and invalid UTF-8 are refused in every string parameter (item 7);
 *   - unauthenticated failures are rate-limited in the audit log (item 8). */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apiclient.h"
#include "sandboxd/common.h"
#include "sandboxd/config.h"
#include "sandboxd/reqguard.h"
#include "testenv.h"

TestSuite(isolation, .timeout = 600);

#define KILL_GRACE_MS 500

static pid_t daemon_pid = -1;
static char dir[SBX_PATH_MAX], api_sock[SBX_PATH_MAX], admin_sock[SBX_PATH_MAX], log_path[SBX_PATH_MAX];
static char tok_a[128], tok_b[128];

static void stop_daemon(void)
{
        if (daemon_pid > 0) {
                kill(daemon_pid, SIGTERM);
                (void)TESTENV_WAIT_UNTIL(waitpid(daemon_pid, NULL, WNOHANG) != 0, 15000);
                kill(daemon_pid, SIGKILL);
                (void)waitpid(daemon_pid, NULL, 0);
                daemon_pid = -1;
        }
}

static void print_log(void)
{
        char cmd[SBX_PATH_MAX + 32];
        snprintf(cmd, sizeof(cmd), "tail -n 30 %s >&2", log_path);
        (void)system(cmd);
}

static bool daemon_ready(void)
{
        int fd = apic_connect(admin_sock);
        if (fd < 0)
                return false;
        close(fd);
        return true;
}

static void make_token(const char *user, char *ret, size_t n)
{
        char line[256];
        cJSON *r;

        snprintf(line, sizeof(line), "{\"cmd\": \"token.create\", \"user\": \"%s\"}", user);
        r = apic_admin(admin_sock, line);
        cr_assert_not_null(apic_result(r), "token.create: %s", cJSON_PrintUnformatted(r));
        snprintf(ret, n, "%s", apic_str(apic_result(r), "token"));
        cJSON_Delete(r);
}

/* Start the sandboxd binary with the test settings plus extra "KEY=value"
 * environment entries (NULL-terminated), wait until its sockets answer and
 * make a token for alice and one for bob. */
static void start_daemon(const char *const *extra_env)
{
        _cleanup_free_ char *tmp = testenv_tmpdir();
        char data[SBX_PATH_MAX + 8], bin[SBX_PATH_MAX];

        /* the Docker client in this process: the atexit cleanup removes the
         * containers of this instance only through it (the daemon is a child) */
        (void)testenv_docker();
        snprintf(dir, sizeof(dir), "%s", tmp);
        /* peers of other uids must reach the API socket */
        cr_assert_eq(chmod(dir, 0755), 0);
        snprintf(data, sizeof(data), "%s/data", dir);
        snprintf(api_sock, sizeof(api_sock), "%s/run/api.sock", dir);
        snprintf(admin_sock, sizeof(admin_sock), "%s/admin/admin.sock", dir);
        snprintf(log_path, sizeof(log_path), "%s/daemon.log", dir);
        snprintf(bin, sizeof(bin), "%s/sandboxd", SANDBOXD_BINARY_DIR);
        atexit(stop_daemon);

        daemon_pid = fork();
        cr_assert_geq(daemon_pid, 0);
        if (daemon_pid == 0) {
                int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                char *argv[] = {bin, NULL};
                (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (fd >= 0) {
                        dup2(fd, 1);
                        dup2(fd, 2);
                }
                setenv("SANDBOXD_DATA_DIR", data, 1);
                setenv("SANDBOXD_API_SOCKET", api_sock, 1);
                setenv("SANDBOXD_ADMIN_SOCKET", admin_sock, 1);
                setenv("SANDBOXD_INSTANCE", testenv_run_id(), 1);
                setenv("SANDBOXD_DOCKER_SOCKET", testenv_docker_socket(), 1);
                setenv("SANDBOXD_IMAGE", TESTENV_TEST_IMAGE, 1);
                setenv("SANDBOXD_MEMORY", "128m", 1);
                setenv("SANDBOXD_PIDS_LIMIT", "128", 1);
                setenv("SANDBOXD_PORT_RANGE", "30300-30799", 1);
                setenv("SANDBOXD_PORTS_PER_SESSION", "1", 1);
                setenv("SANDBOXD_NETWORK_DEFAULT", "none", 1);
                setenv("SANDBOXD_POOL_SIZE", "0", 1); /* the warm pool is off: containers are made lazily */
                setenv("SANDBOXD_LOG_LEVEL", "warn", 1);
                setenv("SANDBOXD_EXEC_KILL_GRACE", "500ms", 1);
                for (size_t i = 0; extra_env && extra_env[i]; i++)
                        putenv((char *)extra_env[i]);
                execv(bin, argv);
                _exit(127);
        }
        (void)TESTENV_WAIT_UNTIL(daemon_ready() || waitpid(daemon_pid, NULL, WNOHANG) == daemon_pid, 30000);
        if (!daemon_ready() && waitpid(daemon_pid, NULL, WNOHANG) != 0) {
                daemon_pid = -1;
                print_log();
                cr_assert_fail("the daemon exited at start");
        }
        cr_assert(daemon_ready(), "the daemon's admin socket never answered");
        make_token("alice", tok_a, sizeof(tok_a));
        make_token("bob", tok_b, sizeof(tok_b));
}

static cJSON *call(const char *token, const char *method, const char *params_json)
{
        return apic_call(api_sock, token, method, apic_json(params_json));
}

static const char *state_of(const char *token, const char *session, const char *id)
{
        static char state[32];
        char params[256];
        cJSON *r;

        snprintf(params, sizeof(params), "{\"session\": \"%s\", \"execution_id\": \"%s\"}", session, id);
        r = call(token, "get_execution", params);
        snprintf(state, sizeof(state), "%s",
                 apic_str(apic_result(r), "state") ? apic_str(apic_result(r), "state") : "?");
        cJSON_Delete(r);
        return state;
}

static bool is_final(const char *state)
{
        return strcmp(state, "running") != 0 && strcmp(state, "pending") != 0;
}

/* ---- item 1: executions end on time ---- */

#define PINS 10

static bool all_final(char *const ids[PINS])
{
        for (int i = 0; i < PINS; i++)
                if (!is_final(state_of(tok_a, "pin", ids[i])))
                        return false;
        return true;
}

/* A background exec of `sleep 100000` (it never reads stdin) given 2 MB of
 * stdin; returns its id (malloc'd). */
static char *start_pinned(const char *session, int timeout_s, bool interactive)
{
        static char big[2 << 20];
        cJSON *p = cJSON_CreateObject(), *r;
        char *id;

        memset(big, 'x', sizeof(big) - 1);
        cJSON_AddStringToObject(p, "session", session);
        cJSON_AddStringToObject(p, "command", "sleep 100000");
        cJSON_AddStringToObject(p, "stdin", big);
        cJSON_AddNumberToObject(p, "timeout_seconds", timeout_s);
        cJSON_AddBoolToObject(p, "background", true);
        cJSON_AddBoolToObject(p, "interactive", interactive);
        r = apic_call(api_sock, tok_a, "exec", p);
        cr_assert_not_null(apic_result(r), "exec: %s", cJSON_PrintUnformatted(r));
        id = strdup(apic_str(apic_result(r), "execution_id"));
        cJSON_Delete(r);
        return id;
}

/* Send a request without a token on fds[from..to) and count the answers:
 * refused for the missing token (the connection was held) or busy (a cap). */
static void tally_tokenless(const int *fds, int from, int to, int *ret_unauthorized, int *ret_busy)
{
        for (int i = from; i < to; i++)
                (void)apic_send(fds[i], "{\"id\":1}\n", 9);
        for (int i = from; i < to; i++) {
                char *line = apic_read_line(fds[i], 60000);
                if (line && strstr(line, "\"unauthorized\""))
                        (*ret_unauthorized)++;
                else if (line && strstr(line, "\"busy\""))
                        (*ret_busy)++;
                free(line);
        }
}

Test(isolation, stdin_never_pins_an_execution)
{
        static const char *const env[] = {"SANDBOXD_LIMITS_EXEC_GLOBAL=11", "SANDBOXD_LIMITS_EXEC_PER_SESSION=10",
                                          "SANDBOXD_LIMITS_EXEC_PER_USER=11", NULL};
        char *ids[PINS];
        int64_t started, until;
        cJSON *r;

        start_daemon(env);
        /* the container exists before the clock starts */
        r = call(tok_a, "exec", "{\"session\": \"pin\", \"command\": \"true\"}");
        cr_assert_str_eq(apic_code(r), "", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        started = sbx_now_ms();
        for (int i = 0; i < PINS; i++)
                ids[i] = start_pinned("pin", 2, false);
        /* meanwhile another user is served (the one slot left) */
        r = call(tok_b, "exec", "{\"session\": \"other\", \"command\": \"echo served\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "served\n", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        /* every one ends within timeout + grace + 5 s of its start */
        until = started + 2000 + KILL_GRACE_MS + 5000;
        (void)TESTENV_WAIT_UNTIL(all_final(ids), until - sbx_now_ms());
        for (int i = 0; i < PINS; i++) {
                const char *st = state_of(tok_a, "pin", ids[i]);
                cr_assert_str_eq(st, "timeout", "execution %d is %s after the deadline", i, st);
        }

        /* the slots are free again: ten more run at once for alice */
        for (int i = 0; i < PINS; i++) {
                free(ids[i]);
                ids[i] = start_pinned("pin", 60, false);
        }
        r = call(tok_a, "exec", "{\"session\": \"pin2\", \"command\": \"echo eleven\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "eleven\n", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        /* cancel (with and without force) ends them within grace + 5 s */
        for (int i = 0; i < PINS; i++) {
                char params[256];
                snprintf(params, sizeof(params), "{\"session\": \"pin\", \"execution_id\": \"%s\", \"force\": %s}",
                         ids[i], i % 2 ? "true" : "false");
                r = call(tok_a, "cancel_execution", params);
                cr_assert_str_eq(apic_str(apic_result(r), "state"), "cancelled", "%s", cJSON_PrintUnformatted(r));
                cJSON_Delete(r);
                free(ids[i]);
        }
        stop_daemon();
}

Test(isolation, send_stdin_to_a_process_not_reading_is_refused_not_blocked)
{
        static char chunk[512 << 10];
        char *id;
        const char *code = "";
        int sent = 0;
        cJSON *r;

        start_daemon(NULL);
        id = start_pinned("idle", 60, true);
        memset(chunk, 'y', sizeof(chunk) - 1);
        /* 2 MB already wait; each call answers at once, and one says busy */
        for (int i = 0; i < 8 && strcmp(code, "busy") != 0; i++) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "session", "idle");
                cJSON_AddStringToObject(p, "execution_id", id);
                cJSON_AddStringToObject(p, "data", chunk);
                r = apic_call(api_sock, tok_a, "send_stdin", p);
                code = apic_code(r);
                if (strcmp(code, "") == 0)
                        sent++;
                else
                        cr_assert_str_eq(code, "busy", "%s", cJSON_PrintUnformatted(r));
                if (strcmp(code, "busy") == 0) {
                        const cJSON *e = cJSON_GetObjectItem(r, "error");
                        cr_assert_not_null(strstr(apic_str(e, "message"), "not reading its stdin"));
                        code = "busy";
                }
                cJSON_Delete(r);
        }
        cr_assert_str_eq(code, "busy", "8 sends of 512 KiB to a process that reads nothing were all taken");
        cr_assert_str_eq(state_of(tok_a, "idle", id), "running");
        {
                char params[256];
                snprintf(params, sizeof(params), "{\"session\": \"idle\", \"execution_id\": \"%s\"}", id);
                r = call(tok_a, "cancel_execution", params);
                cr_assert_str_eq(apic_str(apic_result(r), "state"), "cancelled", "%s", cJSON_PrintUnformatted(r));
                cJSON_Delete(r);
        }
        free(id);
        stop_daemon();
}

/* ---- item 2: fronts an unauthenticated peer cannot exhaust ---- */

/* The daemon's peak resident set (VmHWM), in KiB. */
static long peak_rss_kib(void)
{
        char path[64], line[256];
        long kib = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)daemon_pid);
        f = fopen(path, "re");
        cr_assert_not_null(f);
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
                        break;
        fclose(f);
        cr_assert_gt(kib, 0);
        return kib;
}

/* Send text (as much as the daemon takes before it closes) and a newline,
 * then return its one reply, or NULL if it closed without one. */
static cJSON *send_raw(const char *text, size_t len)
{
        int fd = apic_connect(api_sock);
        cJSON *r = NULL;
        char *line;

        cr_assert_geq(fd, 0);
        (void)apic_send(fd, text, len);
        (void)apic_send(fd, "\n", 1);
        line = apic_read_line(fd, 30000);
        if (line)
                r = cJSON_Parse(line);
        free(line);
        close(fd);
        return r;
}

/* {"id":[0,0,0,...]} of about n bytes; with token, the token leads. */
static char *zeros_line(size_t n, const char *token, size_t *ret_len)
{
        char *s = malloc(n + 256);
        size_t len;

        cr_assert_not_null(s);
        if (token)
                len = (size_t)sprintf(s, "{\"token\":\"%s\",\"method\":\"list_sessions\",\"id\":[0", token);
        else
                len = (size_t)sprintf(s, "{\"id\":[0");
        while (len < n) {
                memcpy(s + len, ",0", 2);
                len += 2;
        }
        memcpy(s + len, "]}", 2);
        len += 2;
        s[len] = '\0';
        *ret_len = len;
        return s;
}

/* ... and of n nested arrays */
static char *nested_line(size_t n, const char *token, size_t *ret_len)
{
        char *s = malloc(2 * n + 256);
        size_t len;

        cr_assert_not_null(s);
        if (token)
                len = (size_t)sprintf(s, "{\"token\":\"%s\",\"method\":\"list_sessions\",\"id\":", token);
        else
                len = (size_t)sprintf(s, "{\"id\":");
        memset(s + len, '[', n);
        len += n;
        memset(s + len, ']', n);
        len += n;
        s[len++] = '}';
        s[len] = '\0';
        *ret_len = len;
        return s;
}

Test(isolation, an_unauthenticated_peer_cannot_spend_the_daemons_memory)
{
        long before, after;
        size_t len;
        char *s, *big_id;
        cJSON *r;

        start_daemon(NULL);
        before = peak_rss_kib();

        /* 6 MB unauthenticated: refused after a few KiB, never parsed */
        s = zeros_line(6 << 20, NULL, &len);
        r = send_raw(s, len);
        cr_assert_not_null(r, "no reply to an over-long unauthenticated line");
        cr_assert_str_eq(apic_code(r), "bad_request", "%s", cJSON_PrintUnformatted(r));
        cr_assert_not_null(strstr(apic_str(cJSON_GetObjectItem(r, "error"), "message"), "unauthenticated"));
        cJSON_Delete(r);
        free(s);

        /* deep nesting, unauthenticated and small: refused before parsing */
        s = nested_line(2000, NULL, &len);
        r = send_raw(s, len);
        cr_assert_str_eq(apic_code(r), "too_large", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        free(s);

        /* with a good token leading, a large first line is read, but its
         * values and nesting are still capped before parsing */
        s = zeros_line(6 << 20, tok_a, &len);
        r = send_raw(s, len);
        cr_assert_str_eq(apic_code(r), "too_large", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        free(s);
        s = nested_line(3 << 20, tok_a, &len);
        r = send_raw(s, len);
        cr_assert_str_eq(apic_code(r), "too_large", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        free(s);

        /* a good token that does not lead does not open the large line */
        s = zeros_line(1 << 20, NULL, &len);
        memcpy(s + len - 1, ",\"token\":\"", 10);
        len += 9;
        len += (size_t)sprintf(s + len, "%s\"}", tok_a);
        r = send_raw(s, len);
        cr_assert_str_eq(apic_code(r), "bad_request", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        free(s);

        /* an unauthenticated reply does not echo a large id */
        big_id = malloc(2048);
        memset(big_id, 'i', 2047);
        big_id[2047] = '\0';
        s = malloc(4096);
        len = (size_t)snprintf(s, 4096, "{\"id\":\"%s\",\"token\":\"nope\",\"method\":\"list_sessions\"}", big_id);
        r = send_raw(s, len);
        cr_assert_str_eq(apic_code(r), "unauthorized", "%s", cJSON_PrintUnformatted(r));
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(r, "id")), "a 2 KiB unauthenticated id was echoed");
        cJSON_Delete(r);
        free(s);
        free(big_id);

        after = peak_rss_kib();
        fprintf(stderr, "isolation: daemon peak RSS %ld KiB -> %ld KiB (+%ld KiB)\n", before, after, after - before);
        cr_assert_lt(after - before, 50 * 1024, "peak RSS grew by %ld KiB", after - before);

        /* the daemon still serves */
        r = call(tok_b, "list_executions", "{\"session\": \"probe\"}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        stop_daemon();
}

#define IDLE_CONNS 70

/* 70 idle connections from uid nobody (a child that drops to it): the
 * per-uid cap keeps slots for everyone else, and the rest of nobody's
 * connections get busy at once. */
Test(isolation, one_local_user_cannot_take_every_connection)
{
        /* a long auth deadline, so that only the per-uid cap can save the slots */
        static const char *const env[] = {"SANDBOXD_CONNECTIONS_AUTH_TIMEOUT=120s", "SANDBOXD_CONNECTIONS_MAX=64",
                                          "SANDBOXD_CONNECTIONS_MAX_PER_UID=16", NULL};
        struct passwd *pw = getpwnam("nobody");
        int report[2], go[2];
        int counts[2] = {0, 0};
        pid_t child;
        cJSON *r;
        char c = 0;

        cr_assert_not_null(pw, "no user nobody");
        cr_assert_eq(getuid(), 0, "this test needs root to become nobody");
        start_daemon(env);
        cr_assert_eq(pipe2(report, O_CLOEXEC), 0);
        cr_assert_eq(pipe2(go, O_CLOEXEC), 0);
        child = fork();
        cr_assert_geq(child, 0);
        if (child == 0) {
                int fds[IDLE_CONNS], res[2] = {0, 0};
                (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
                        _exit(2);
                /* hold every connection open, then ask once on each: a held
                 * connection answers unauthorized, a turned away one said busy */
                for (int i = 0; i < IDLE_CONNS; i++) {
                        fds[i] = apic_connect(api_sock);
                        if (fds[i] < 0)
                                _exit(3);
                }
                tally_tokenless(fds, 0, IDLE_CONNS, &res[0], &res[1]);
                if (write(report[1], res, sizeof(res)) != sizeof(res))
                        _exit(4);
                (void)read(go[0], &c, 1);
                _exit(0);
        }
        close(report[1]);
        close(go[0]);
        cr_assert_eq(read(report[0], counts, sizeof(counts)), (ssize_t)sizeof(counts), "the nobody child failed");
        fprintf(stderr, "isolation: nobody holds %d idle connections, %d were refused busy\n", counts[0], counts[1]);
        cr_assert_eq(counts[0], 16, "nobody holds %d connections, not its cap of 16", counts[0]);
        cr_assert_eq(counts[1], IDLE_CONNS - 16);

        /* item 8: nobody's 16 failed authentications were written at most
         * REQGUARD_AUDIT_BURST times (all came well within one window) */
        {
                char db[SBX_PATH_MAX + 32];
                sqlite3 *h = NULL;
                sqlite3_stmt *q = NULL;
                long long rows = -1;

                snprintf(db, sizeof(db), "file:%s/data/sandboxd.db?mode=ro", dir);
                cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL), SQLITE_OK);
                sqlite3_busy_timeout(h, 10000);
                cr_assert_eq(sqlite3_prepare_v2(h,
                                                "SELECT COUNT(*) FROM audit_log WHERE action = 'auth.fail' AND "
                                                "actor = 'peer:uid=' || ?1",
                                                -1, &q, NULL),
                             SQLITE_OK);
                sqlite3_bind_int64(q, 1, (sqlite3_int64)pw->pw_uid);
                if (sqlite3_step(q) == SQLITE_ROW)
                        rows = sqlite3_column_int64(q, 0);
                sqlite3_finalize(q);
                sqlite3_close(h);
                fprintf(stderr, "isolation: 16 failed authentications of nobody, %lld audit rows\n", rows);
                cr_assert(rows >= 1 && rows <= REQGUARD_AUDIT_BURST, "%lld auth.fail rows for 16 failures", rows);
        }

        /* while they are held, another uid is served */
        r = call(tok_b, "list_executions", "{\"session\": \"probe\"}");
        cr_assert_not_null(apic_result(r), "another uid was not served: %s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        (void)write(go[1], "x", 1);
        close(go[1]);
        close(report[0]);
        (void)waitpid(child, NULL, 0);
        stop_daemon();
}

#define AGENT_CONNS 100
#define PREAUTH_CONNS 40

/* Issue 24: with the defaults, one local uid running many agents holds a
 * connection for each (the per-uid cap is limits.sessions, not 16), while
 * connections that have not shown a token are capped per uid (32): uid
 * nobody authenticates AGENT_CONNS connections, all answered, then opens
 * PREAUTH_CONNS idle ones, of which 32 are held and the rest turned away. */
Test(isolation, one_uid_runs_many_agents_but_few_unauthenticated_connections)
{
        static const char *const env[] = {"SANDBOXD_CONNECTIONS_AUTH_TIMEOUT=120s", NULL};
        struct passwd *pw = getpwnam("nobody");
        int report[2], go[2];
        int counts[3] = {0, 0, 0};
        pid_t child;
        char c = 0;
        cJSON *r;

        cr_assert_not_null(pw, "no user nobody");
        cr_assert_eq(getuid(), 0, "this test needs root to become nobody");
        start_daemon(env);
        cr_assert_eq(pipe2(report, O_CLOEXEC), 0);
        cr_assert_eq(pipe2(go, O_CLOEXEC), 0);
        child = fork();
        cr_assert_geq(child, 0);
        if (child == 0) {
                int fds[AGENT_CONNS + PREAUTH_CONNS], res[3] = {0, 0, 0};
                (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
                        _exit(2);
                for (int i = 0; i < AGENT_CONNS; i++) {
                        cJSON *a;
                        fds[i] = apic_connect(api_sock);
                        if (fds[i] < 0)
                                _exit(3);
                        apic_request(fds[i], 1, tok_a, "list_sessions", cJSON_CreateObject());
                        a = apic_reply(fds[i], 60000, NULL);
                        res[0] += a && apic_code(a)[0] == '\0';
                        cJSON_Delete(a);
                }
                /* idle ones, then one line on each: held ones say unauthorized, turned away ones said busy */
                for (int i = AGENT_CONNS; i < AGENT_CONNS + PREAUTH_CONNS; i++) {
                        fds[i] = apic_connect(api_sock);
                        if (fds[i] < 0)
                                _exit(4);
                }
                tally_tokenless(fds, AGENT_CONNS, AGENT_CONNS + PREAUTH_CONNS, &res[1], &res[2]);
                if (write(report[1], res, sizeof(res)) != sizeof(res))
                        _exit(5);
                (void)read(go[0], &c, 1);
                _exit(0);
        }
        close(report[1]);
        close(go[0]);
        cr_assert_eq(read(report[0], counts, sizeof(counts)), (ssize_t)sizeof(counts), "the nobody child failed");
        fprintf(stderr, "isolation: nobody's %d agents answered; of %d idle connections %d held, %d busy\n", counts[0],
                PREAUTH_CONNS, counts[1], counts[2]);
        cr_assert_eq(counts[0], AGENT_CONNS, "%d of nobody's %d authenticated connections answered", counts[0],
                     AGENT_CONNS);
        cr_assert_eq(counts[1], 32, "nobody holds %d unauthenticated connections, not its cap of 32", counts[1]);
        cr_assert_eq(counts[2], PREAUTH_CONNS - 32);

        /* while they are held, another uid is served */
        r = call(tok_b, "list_executions", "{\"session\": \"probe\"}");
        cr_assert_not_null(apic_result(r), "another uid was not served: %s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        (void)write(go[1], "x", 1);
        close(go[1]);
        close(report[0]);
        (void)waitpid(child, NULL, 0);
        stop_daemon();
}

/* ---- item 7: strict strings ---- */

static const char *const methods[] = {
        "exec",         "run_code",     "get_execution", "send_stdin",    "cancel_execution", "list_executions",
        "write_file",   "read_file",    "list_files",    "start_service", "stop_service",     "list_services",
        "service_logs", "session_info", "mark_private",
};
/* every string parameter any method takes, and an env name and value */
static const char *const str_params[] = {
        "session", "command", "code",   "language", "content", "data",   "dataset",  "encoding",  "execution_id",
        "name",    "path",    "source", "stdin",    "workdir", "stream", "env.name", "env.value",
};

/* One request line with bad in parameter p (the others are plausible). */
static size_t bad_request_line(char *buf, size_t size, const char *method, const char *p, const char *bad)
{
        char v[64];

        snprintf(v, sizeof(v), "\"x%sy\"", bad);
        if (strcmp(p, "env.name") == 0)
                return (size_t)
                        snprintf(buf, size,
                                 "{\"id\":7,\"token\":\"%s\",\"method\":\"%s\",\"params\":{\"session\":\"strict\","
                                 "\"command\":\"true\",\"env\":{%s:\"v\"}}}\n",
                                 tok_a, method, v);
        if (strcmp(p, "env.value") == 0)
                return (size_t)
                        snprintf(buf, size,
                                 "{\"id\":7,\"token\":\"%s\",\"method\":\"%s\",\"params\":{\"session\":\"strict\","
                                 "\"command\":\"true\",\"env\":{\"K\":%s}}}\n",
                                 tok_a, method, v);
        return (size_t)snprintf(
                buf, size,
                "{\"id\":7,\"token\":\"%s\",\"method\":\"%s\",\"params\":{\"session\":\"strict\",\"%s\":%s}}\n", tok_a,
                method, p, v);
}

Test(isolation, nul_and_invalid_utf8_are_refused_in_every_string_parameter)
{
        /* a NUL as JSON writes it, a raw NUL (\x01 stands for it below), a lone continuation
         * byte, an overlong '/', a surrogate */
        static const char *const bads[] = {"\\u0000", "\\u0000tail", "\x01", "\x80", "\xc0\xaf", "\xed\xa0\x80"};
        char line[1024];
        int fd, tried = 0;
        cJSON *r;

        start_daemon(NULL);
        fd = apic_connect(api_sock);
        cr_assert_geq(fd, 0);
        for (size_t m = 0; m < ELEMENTSOF(methods); m++)
                for (size_t p = 0; p < ELEMENTSOF(str_params); p++)
                        for (size_t b = 0; b < ELEMENTSOF(bads); b++) {
                                size_t len = bad_request_line(line, sizeof(line), methods[m], str_params[p], bads[b]);
                                char *reply, *nul = memchr(line, '\x01', len);
                                if (nul)
                                        *nul = '\0';
                                cr_assert_eq(apic_send(fd, line, len), 0);
                                reply = apic_read_line(fd, 30000);
                                cr_assert_not_null(reply, "%s %s: no reply", methods[m], str_params[p]);
                                r = cJSON_Parse(reply);
                                cr_assert_str_eq(apic_code(r), "invalid", "%s params.%s with bad string %zu: %s",
                                                 methods[m], str_params[p], b, reply);
                                cJSON_Delete(r);
                                free(reply);
                                tried++;
                        }
        close(fd);
        fprintf(stderr, "isolation: %d requests with a NUL or invalid UTF-8 all refused with invalid\n", tried);

        /* the session id that would have been truncated was never created */
        r = call(tok_a, "list_executions", "{\"session\": \"x\"}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        /* the admin socket too: a user id holding a NUL is not cut short */
        r = apic_admin(admin_sock, "{\"cmd\": \"token.create\", \"user\": \"carol\\u0000evil\"}");
        cr_assert_str_eq(apic_code(r), "invalid", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = apic_admin(admin_sock, "{\"cmd\": \"token.create\", \"user\": \"carol\xff\"}");
        cr_assert_str_eq(apic_code(r), "invalid", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        stop_daemon();
}

/* The daemon's end of fd is closed: EOF within a generous deadline. */
static bool closed_by_daemon(int fd)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        char c;

        return poll(&p, 1, 60000) == 1 && read(fd, &c, 1) == 0;
}

/* An idle authenticated connection and a silent unauthenticated one are
 * both closed by the daemon (after a line saying why). */
Test(isolation, idle_and_unauthenticated_connections_are_closed)
{
        static const char *const env[] = {"SANDBOXD_CONNECTIONS_AUTH_TIMEOUT=1s",
                                          "SANDBOXD_CONNECTIONS_IDLE_TIMEOUT=1s", NULL};
        int authed, silent;
        char *line;
        cJSON *r;

        start_daemon(env);
        authed = apic_connect(api_sock);
        silent = apic_connect(api_sock);
        cr_assert_geq(authed, 0);
        cr_assert_geq(silent, 0);
        apic_request(authed, 1, tok_a, "list_executions", apic_json("{\"session\": \"idle\"}"));
        r = apic_reply(authed, 30000, NULL);
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        line = apic_read_line(authed, 60000);
        cr_assert_not_null(line, "an idle authenticated connection was never closed");
        cr_assert_not_null(strstr(line, "connections.idle_timeout"), "%s", line);
        free(line);
        cr_assert(closed_by_daemon(authed), "the idle connection stayed open");

        line = apic_read_line(silent, 60000);
        cr_assert_not_null(line, "a silent unauthenticated connection was never closed");
        cr_assert_not_null(strstr(line, "\"unauthorized\""), "%s", line);
        free(line);
        cr_assert(closed_by_daemon(silent), "the unauthenticated connection stayed open");
        close(authed);
        close(silent);
        stop_daemon();
}
