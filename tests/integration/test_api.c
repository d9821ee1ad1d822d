/* Integration tests of the API socket against the real dockerd: a client
 * speaks the line protocol over the daemon's real socket.
 *
 * Over 800 lines: one suite, one case per API method family, sharing the
 * daemon fixture and the client.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <libgen.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/api.h"
#include "sandboxd/exec.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
#include "sandboxd/utf8.h"
#include "testenv.h"

TestSuite(api, .timeout = 600);

static struct sbx_config cfg;
static struct daemon *d;
static char tok_a[TOKEN_LEN + 1], tok_b[TOKEN_LEN + 1], tok_conn[TOKEN_LEN + 1];
static char id_a[TOKEN_ID_LEN + 1];

static int conn_cap; /* connections.max when set (the default is limits.sessions + 64) */

static void open_daemon_image(const char *image)
{
        char dir[SBX_PATH_MAX];
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};
        struct token_info info;

        fixture_config(&cfg);
        /* a port range of this suite's own: suites run side by side */
        cfg.port_range_lo = 28000;
        cfg.port_range_hi = 28499;
        if (image)
                snprintf(cfg.image, sizeof(cfg.image), "%s", image);
        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/run/api.sock", dirname(dir));
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/run/admin.sock", dir);
        cfg.exec_kill_grace_ms = 500;
        if (conn_cap)
                cfg.max_connections = conn_cap;
        (void)testenv_docker();
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_AGENT, tok_a, &info, &err), 0, "%s", err.msg);
        memcpy(id_a, info.id, sizeof(id_a));
        cr_assert_eq(token_create(d->store, "bob", TOKEN_ROLE_AGENT, tok_b, NULL, &err), 0);
        cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_CONNECTOR, tok_conn, NULL, &err), 0);
}

static void open_daemon(void)
{
        open_daemon_image(NULL);
}

static void close_daemon(void)
{
        daemon_close(d);
        d = NULL;
}

static cJSON *call(const char *token, const char *method, const char *params_json)
{
        return apic_call(cfg.api_socket, token, method, apic_json(params_json));
}

static void expect_code(cJSON *reply, const char *code, const char *what)
{
        cr_assert_str_eq(apic_code(reply), code, "%s: got %s", what, cJSON_PrintUnformatted(reply));
        cJSON_Delete(reply);
}

Test(api, socket_mode_and_exec_round_trip)
{
        struct stat st;
        cJSON *r;
        const cJSON *res;

        open_daemon();
        cr_assert_eq(lstat(cfg.api_socket, &st), 0);
        cr_assert(S_ISSOCK(st.st_mode));
        cr_assert_eq(st.st_mode & 07777, 0666);

        r = call(tok_a, "exec", "{\"session\": \"s1\", \"command\": \"echo hi; echo err >&2; exit 3\"}");
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(res, "state"), "completed");
        cr_assert_eq(apic_num(res, "exit_code"), 3);
        cr_assert_str_eq(apic_str(res, "cause"), "exited");
        cr_assert_str_eq(apic_str(res, "stdout"), "hi\n");
        cr_assert_str_eq(apic_str(res, "stderr"), "err\n");
        cr_assert_eq(apic_num(res, "stdout_bytes"), 3);
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(res, "truncated")));
        cr_assert_eq(strlen(apic_str(res, "execution_id")), 36);
        cr_assert_str_eq(apic_str(res, "session"), "s1");
        cJSON_Delete(r);

        /* the id is echoed, whatever JSON it is; requests on one connection answer in order */
        {
                int fd = apic_connect(cfg.api_socket);
                char buf[512];
                snprintf(buf, sizeof(buf),
                         "{\"id\": {\"x\": [1, \"two\"]}, \"token\": \"%s\", \"method\": \"exec\", "
                         "\"params\": {\"session\": \"s1\", \"command\": \"echo one\"}}\n",
                         tok_a);
                cr_assert_eq(apic_send(fd, buf, strlen(buf)), 0);
                apic_request(fd, 2, tok_a, "exec", apic_json("{\"session\": \"s1\", \"command\": \"echo two\"}"));
                r = apic_reply(fd, 60000, NULL);
                {
                        char *id = cJSON_PrintUnformatted(cJSON_GetObjectItem(r, "id"));
                        cr_assert_str_eq(id, "{\"x\":[1,\"two\"]}");
                        free(id);
                }
                cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "one\n");
                cJSON_Delete(r);
                r = apic_reply(fd, 60000, NULL);
                cr_assert_eq(apic_num(r, "id"), 2);
                cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "two\n");
                cJSON_Delete(r);
                close(fd);
        }

        /* env, workdir, stdin, base64 output */
        r = call(tok_a, "exec",
                 "{\"session\": \"s1\", \"command\": \"mkdir -p sub; cd sub; echo $FOO; pwd; cat\", "
                 "\"env\": {\"FOO\": \"bar\"}, \"stdin\": \"in\", \"encoding\": \"base64\"}");
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        {
                unsigned char *raw;
                size_t n;
                const char *want = "bar\n/workspace/sub\nin";
                cr_assert_eq(base64_decode(apic_str(res, "stdout"), strlen(apic_str(res, "stdout")), &raw, &n), 0);
                cr_assert_eq(n, strlen(want), "%.*s", (int)n, raw);
                cr_assert_eq(memcmp(raw, want, n), 0);
                free(raw);
        }
        cJSON_Delete(r);
        r = call(tok_a, "exec", "{\"session\": \"s1\", \"command\": \"pwd\", \"workdir\": \"sub\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "/workspace/sub\n");
        cJSON_Delete(r);

        /* invalid UTF-8 is replaced, never passed through */
        r = call(tok_a, "exec", "{\"session\": \"s1\", \"command\": \"printf 'a\\\\377b'\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"),
                         "a\xEF\xBF\xBD"
                         "b");
        cJSON_Delete(r);
        close_daemon();
}

Test(api, run_code_python)
{
        cJSON *r;
        const cJSON *res;

        open_daemon_image(TESTENV_PYTHON_IMAGE);
        r = call(tok_a, "run_code",
                 "{\"session\": \"py\", \"language\": \"python\", "
                 "\"code\": \"import sys\\nprint(6 * 7)\\nsys.exit(2)\"}");
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(res, "stdout"), "42\n");
        cr_assert_eq(apic_num(res, "exit_code"), 2);
        cJSON_Delete(r);
        r = call(tok_a, "run_code", "{\"session\": \"py\", \"language\": \"bash\", \"code\": \"echo $((1+2))\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "3\n", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        close_daemon();
}

Test(api, big_output_has_head_marker_tail)
{
        cJSON *r;
        const char *out;

        open_daemon();
        r = call(tok_a, "exec",
                 "{\"session\": \"s1\", \"command\": \"head -c 200000 /dev/zero | tr '\\\\0' x; echo END\"}");
        out = apic_str(apic_result(r), "stdout");
        cr_assert_not_null(out, "%s", cJSON_PrintUnformatted(r));
        cr_assert_not_null(strstr(out, "\n...["), "no marker");
        cr_assert_not_null(strstr(out, " bytes omitted]...\n"));
        cr_assert_eq(strncmp(out + strlen(out) - 4, "END\n", 4), 0, "tail missing");
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(apic_result(r), "truncated")));
        cr_assert_eq(apic_num(apic_result(r), "stdout_bytes"), 200004);
        cJSON_Delete(r);
        close_daemon();
}

Test(api, streaming_progress)
{
        int fd;
        cJSON *r, *progress, *ev;
        char all[256] = "";

        open_daemon();
        fd = apic_connect(cfg.api_socket);
        apic_request(fd, 7, tok_a, "exec",
                     apic_json("{\"session\": \"s1\", \"stream\": true, \"command\": "
                               "\"for i in 1 2 3; do echo line$i; sleep 0.3; done; echo oops >&2\"}"));
        r = apic_reply(fd, 60000, &progress);
        cr_assert_not_null(r);
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "line1\nline2\nline3\n");
        cr_assert_geq(cJSON_GetArraySize(progress), 2, "expected several progress events");
        cJSON_ArrayForEach(ev, progress) {
                cr_assert_eq(apic_num(ev, "id"), 7);
                cr_assert_str_eq(apic_str(ev, "event"), "output");
                if (strcmp(apic_str(ev, "stream"), "stdout") == 0)
                        strncat(all, apic_str(ev, "data"), sizeof(all) - strlen(all) - 1);
        }
        cr_assert_str_eq(all, "line1\nline2\nline3\n");
        cJSON_Delete(progress);
        cJSON_Delete(r);
        close(fd);
        close_daemon();
}

Test(api, background_get_execution_and_stdin)
{
        cJSON *r;
        const cJSON *res;
        char id[64];

        open_daemon();
        /* It ends only once the test lets it (a file a second exec creates),
         * not after a sleep that a loaded host could outlast before the reply. */
        r = call(tok_a, "exec",
                 "{\"session\": \"s1\", \"command\": "
                 "\"echo start; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo done\", \"background\": true}");
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        snprintf(id, sizeof(id), "%s", apic_str(res, "execution_id"));
        cr_assert(strcmp(apic_str(res, "state"), "running") == 0 || strcmp(apic_str(res, "state"), "pending") == 0);
        cJSON_Delete(r);
        r = call(tok_a, "exec", "{\"session\": \"s1\", \"command\": \"touch /tmp/go\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "state"), "completed", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        {
                char p[256];
                snprintf(p, sizeof(p), "{\"session\": \"s1\", \"execution_id\": \"%s\", \"wait\": 30}", id);
                r = call(tok_a, "get_execution", p);
                res = apic_result(r);
                cr_assert_str_eq(apic_str(res, "state"), "completed", "%s", cJSON_PrintUnformatted(r));
                cr_assert_str_eq(apic_str(res, "stdout"), "start\ndone\n");
                cJSON_Delete(r);

                snprintf(p, sizeof(p), "{\"session\": \"s1\", \"execution_id\": \"%s\", \"stdout_offset\": 6}", id);
                r = call(tok_a, "get_execution", p);
                res = apic_result(r);
                cr_assert_str_eq(apic_str(res, "stdout"), "done\n");
                cr_assert_eq(apic_num(res, "stdout_offset"), 6);
                cr_assert_eq(apic_num(res, "stdout_next_offset"), 11);
                cJSON_Delete(r);

                /* finished: cancel says so */
                snprintf(p, sizeof(p), "{\"session\": \"s1\", \"execution_id\": \"%s\"}", id);
                expect_code(call(tok_a, "cancel_execution", p), "already_finished", "cancel finished");
        }

        /* interactive stdin over a second connection */
        r = call(tok_a, "exec",
                 "{\"session\": \"s1\", \"command\": \"read x; echo got:$x\", \"background\": true, "
                 "\"interactive\": true}");
        snprintf(id, sizeof(id), "%s", apic_str(apic_result(r), "execution_id"));
        cJSON_Delete(r);
        {
                char p[256];
                snprintf(p, sizeof(p),
                         "{\"session\": \"s1\", \"execution_id\": \"%s\", \"data\": \"hello\\n\", "
                         "\"eof\": true}",
                         id);
                r = call(tok_a, "send_stdin", p);
                cr_assert_str_eq(apic_code(r), "", "%s", cJSON_PrintUnformatted(r));
                cr_assert_eq(apic_num(apic_result(r), "bytes"), 6);
                cJSON_Delete(r);
                snprintf(p, sizeof(p), "{\"session\": \"s1\", \"execution_id\": \"%s\", \"wait\": 30}", id);
                r = call(tok_a, "get_execution", p);
                cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "got:hello\n");
                cJSON_Delete(r);
        }

        /* cancel a running one */
        r = call(tok_a, "exec", "{\"session\": \"s1\", \"command\": \"sleep 60\", \"background\": true}");
        snprintf(id, sizeof(id), "%s", apic_str(apic_result(r), "execution_id"));
        cJSON_Delete(r);
        {
                char p[256];
                snprintf(p, sizeof(p), "{\"session\": \"s1\", \"execution_id\": \"%s\"}", id);
                r = call(tok_a, "cancel_execution", p);
                cr_assert_str_eq(apic_str(apic_result(r), "state"), "cancelled", "%s", cJSON_PrintUnformatted(r));
                cJSON_Delete(r);
        }
        r = call(tok_a, "list_executions", "{\"session\": \"s1\", \"states\": [\"cancelled\"]}");
        {
                const cJSON *list = cJSON_GetObjectItem(apic_result(r), "executions");
                cr_assert_eq(cJSON_GetArraySize(list), 1);
                cr_assert_str_eq(apic_str(cJSON_GetArrayItem(list, 0), "execution_id"), id);
        }
        cJSON_Delete(r);
        close_daemon();
}

Test(api, files_round_trip)
{
        cJSON *r;
        const cJSON *res, *e;
        bool saw = false;

        open_daemon();
        r = call(tok_a, "write_file",
                 "{\"session\": \"s1\", \"path\": \"notes/a.txt\", \"content\": \"h\\u00e9llo\\n\"}");
        cr_assert_str_eq(apic_code(r), "", "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(apic_result(r), "path"), "/workspace/notes/a.txt");
        cr_assert_eq(apic_num(apic_result(r), "bytes"), 7);
        cJSON_Delete(r);
        r = call(tok_a, "read_file", "{\"session\": \"s1\", \"path\": \"/workspace/notes/a.txt\"}");
        res = apic_result(r);
        cr_assert_str_eq(apic_str(res, "content"), "h\xC3\xA9llo\n");
        cr_assert_eq(apic_num(res, "size"), 7);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "eof")));
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "valid_utf8")));
        cJSON_Delete(r);

        /* binary through base64, read back with an offset; as text it is flagged */
        r = call(tok_a, "write_file",
                 "{\"session\": \"s1\", \"path\": \"b.bin\", \"content\": \"AP8BAg==\", "
                 "\"encoding\": \"base64\"}");
        cr_assert_eq(apic_num(apic_result(r), "bytes"), 4);
        cJSON_Delete(r);
        r = call(tok_a, "read_file",
                 "{\"session\": \"s1\", \"path\": \"b.bin\", \"offset\": 1, \"length\": 2, "
                 "\"encoding\": \"base64\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "content"), "/wE=");
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(apic_result(r), "eof")));
        cJSON_Delete(r);
        r = call(tok_a, "read_file", "{\"session\": \"s1\", \"path\": \"b.bin\"}");
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(apic_result(r), "valid_utf8")));
        cJSON_Delete(r);

        r = call(tok_a, "list_files", "{\"session\": \"s1\"}");
        res = apic_result(r);
        cr_assert_str_eq(apic_str(res, "path"), "/workspace");
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(res, "entries"))
                if (strcmp(apic_str(e, "name"), "notes") == 0) {
                        cr_assert_str_eq(apic_str(e, "type"), "dir");
                        saw = true;
                }
        cr_assert(saw);
        cJSON_Delete(r);

        expect_code(call(tok_a, "read_file", "{\"session\": \"s1\", \"path\": \"../../etc/passwd\"}"), "invalid",
                    "escape");
        expect_code(call(tok_a, "read_file", "{\"session\": \"s1\", \"path\": \"nope\"}"), "not_found", "missing");
        expect_code(call(tok_a, "write_file",
                         "{\"session\": \"s1\", \"path\": \"x\", \"content\": \"%%%\", "
                         "\"encoding\": \"base64\"}"),
                    "invalid", "bad base64");
        close_daemon();
}

Test(api, auth_errors_are_refused_and_audited)
{
        int64_t before = 0, after = 0;
        struct sbx_error err = {0};
        char bad[TOKEN_LEN + 1];
        cJSON *r;
        int fd;

        open_daemon();
        store_audit_count(d->store, NULL, NULL, "auth.fail", &before);
        expect_code(call(NULL, "exec", "{\"session\": \"s1\", \"command\": \"true\"}"), "unauthorized", "missing");
        expect_code(call("", "exec", "{\"session\": \"s1\", \"command\": \"true\"}"), "unauthorized", "empty");
        memcpy(bad, tok_a, sizeof(bad));
        bad[TOKEN_LEN - 1] = bad[TOKEN_LEN - 1] == 'a' ? 'b' : 'a';
        expect_code(call(bad, "exec", "{\"session\": \"s1\", \"command\": \"true\"}"), "unauthorized", "wrong");
        expect_code(call("sbx_short", "session_info", "{\"session\": \"s1\"}"), "unauthorized", "malformed");
        {
                /* a token of the wrong type */
                fd = apic_connect(cfg.api_socket);
                const char *line = "{\"id\": 1, \"token\": 42, \"method\": \"exec\", \"params\": {}}\n";
                apic_send(fd, line, strlen(line));
                r = apic_reply(fd, 10000, NULL);
                expect_code(r, "unauthorized", "numeric token");
                close(fd);
        }
        /* works, then revoked → refused */
        r = call(tok_a, "session_info", "{\"session\": \"s1\"}");
        cr_assert_str_eq(apic_code(r), "");
        cr_assert_str_eq(apic_str(apic_result(r), "user"), "alice");
        cJSON_Delete(r);
        cr_assert_eq(token_revoke(d->store, id_a, &err), 0);
        expect_code(call(tok_a, "session_info", "{\"session\": \"s1\"}"), "unauthorized", "revoked");
        store_audit_count(d->store, NULL, NULL, "auth.fail", &after);
        cr_assert_eq(after, before + 6, "auth failures audited: %ld → %ld", (long)before, (long)after);

        /* five failures close the connection */
        fd = apic_connect(cfg.api_socket);
        for (int i = 0; i < 5; i++) {
                apic_request(fd, i, bad, "session_info", apic_json("{\"session\": \"s1\"}"));
                r = apic_reply(fd, 10000, NULL);
                expect_code(r, "unauthorized", "repeat");
        }
        cr_assert_null(apic_read_line(fd, 5000), "the connection stayed open");
        close(fd);
        close_daemon();
}

/* User A's token never reaches user B's sessions or executions. */
Test(api, cross_tenant_isolation)
{
        cJSON *r;
        char b_exec[64], b_container[80], p[512];
        const char *by_id[] = {"get_execution", "cancel_execution", "send_stdin"};

        open_daemon();
        /* bob: a running execution and a file in session "shared" */
        r = call(tok_b, "write_file", "{\"session\": \"shared\", \"path\": \"secret.txt\", \"content\": \"B-secret\"}");
        cr_assert_str_eq(apic_code(r), "");
        cJSON_Delete(r);
        r = call(tok_b, "exec",
                 "{\"session\": \"shared\", \"command\": \"sleep 30\", \"background\": true, "
                 "\"interactive\": true}");
        snprintf(b_exec, sizeof(b_exec), "%s", apic_str(apic_result(r), "execution_id"));
        cJSON_Delete(r);
        r = call(tok_b, "session_info", "{\"session\": \"shared\"}");
        snprintf(b_container, sizeof(b_container), "%s", apic_str(apic_result(r), "container_id"));
        cr_assert_eq(strlen(b_container), 64);
        cJSON_Delete(r);

        /* alice, by id, through every method that takes one, in her session of that name and in others */
        const char *sessions[] = {"shared", "other"};
        for (size_t s = 0; s < ELEMENTSOF(sessions); s++)
                for (size_t i = 0; i < ELEMENTSOF(by_id); i++) {
                        snprintf(p, sizeof(p),
                                 "{\"session\": \"%s\", \"execution_id\": \"%s\", \"data\": \"x\", "
                                 "\"force\": true}",
                                 sessions[s], b_exec);
                        expect_code(call(tok_a, by_id[i], p), "not_found", by_id[i]);
                }
        /* a "user" param is not a way in */
        snprintf(p, sizeof(p), "{\"session\": \"shared\", \"user\": \"bob\", \"execution_id\": \"%s\"}", b_exec);
        expect_code(call(tok_a, "get_execution", p), "not_found", "user param");
        r = call(tok_a, "list_executions", "{\"session\": \"shared\", \"user\": \"bob\"}");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(apic_result(r), "executions")), 0);
        cJSON_Delete(r);

        /* alice's "shared" is her own: no B file, another container */
        expect_code(call(tok_a, "read_file", "{\"session\": \"shared\", \"path\": \"secret.txt\", \"user\": \"bob\"}"),
                    "not_found", "B's file");
        r = call(tok_a, "session_info", "{\"session\": \"shared\", \"user\": \"bob\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "user"), "alice");
        cr_assert_str_neq(apic_str(apic_result(r), "container_id"), b_container);
        cJSON_Delete(r);
        r = call(tok_a, "write_file", "{\"session\": \"shared\", \"path\": \"secret.txt\", \"content\": \"A-data\"}");
        cJSON_Delete(r);
        r = call(tok_a, "read_file", "{\"session\": \"shared\", \"path\": \"secret.txt\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "content"), "A-data");
        cJSON_Delete(r);
        r = call(tok_a, "exec", "{\"session\": \"shared\", \"command\": \"cat /workspace/secret.txt; ls /workspace\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "A-datasecret.txt\n");
        cJSON_Delete(r);
        r = call(tok_a, "list_files", "{\"session\": \"shared\", \"path\": \"../../bob/shared\"}");
        cr_assert_str_eq(apic_code(r), "invalid");
        cJSON_Delete(r);

        /* bob's things are untouched: his execution still runs, his file holds his data */
        r = call(tok_b, "read_file", "{\"session\": \"shared\", \"path\": \"secret.txt\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "content"), "B-secret");
        cJSON_Delete(r);
        snprintf(p, sizeof(p), "{\"session\": \"shared\", \"execution_id\": \"%s\"}", b_exec);
        r = call(tok_b, "get_execution", p);
        cr_assert_str_eq(apic_str(apic_result(r), "state"), "running");
        cJSON_Delete(r);
        /* and even bob reaches his execution only in its own session */
        snprintf(p, sizeof(p), "{\"session\": \"other\", \"execution_id\": \"%s\"}", b_exec);
        expect_code(call(tok_b, "get_execution", p), "not_found", "B in another session");
        snprintf(p, sizeof(p), "{\"session\": \"shared\", \"execution_id\": \"%s\", \"force\": true}", b_exec);
        r = call(tok_b, "cancel_execution", p);
        cr_assert_str_eq(apic_str(apic_result(r), "state"), "cancelled");
        cJSON_Delete(r);
        close_daemon();
}

Test(api, mark_private_needs_connector)
{
        cJSON *r;

        open_daemon();
        expect_code(call(tok_a, "mark_private", "{\"session\": \"p1\", \"dataset\": \"hr-salaries\"}"), "forbidden",
                    "agent mark");
        r = call(tok_a, "session_info", "{\"session\": \"p1\"}");
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(apic_result(r), "private")));
        cJSON_Delete(r);
        r = call(tok_conn, "mark_private", "{\"session\": \"p1\", \"dataset\": \"hr-salaries\", \"source\": \"s3\"}");
        cr_assert_str_eq(apic_code(r), "", "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(apic_result(r), "network_mode"), "none");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(apic_result(r), "datasets")), 1);
        cJSON_Delete(r);
        /* the agent of the same user sees it, and its commands now run without network */
        r = call(tok_a, "exec", "{\"session\": \"p1\", \"command\": \"ls /sys/class/net\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "lo\n", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_a, "session_info", "{\"session\": \"p1\"}");
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(apic_result(r), "private")));
        cr_assert_str_eq(apic_str(apic_result(r), "network_mode"), "none");
        cJSON_Delete(r);
        /* bob's session of the same name is not private */
        r = call(tok_b, "session_info", "{\"session\": \"p1\"}");
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(apic_result(r), "private")));
        cJSON_Delete(r);
        close_daemon();
}

static void raw_line_gets(int fd, const char *line, const char *code)
{
        cJSON *r;
        cr_assert_eq(apic_send(fd, line, strlen(line)), 0);
        cr_assert_eq(apic_send(fd, "\n", 1), 0);
        r = apic_reply(fd, 30000, NULL);
        cr_assert_not_null(r, "no reply to %s", line);
        cr_assert_str_eq(apic_code(r), code, "%s → %s", line, cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
}

Test(api, malformed_input_gets_clean_errors)
{
        int fd;
        char line[1024];
        cJSON *r;

        open_daemon();
        fd = apic_connect(cfg.api_socket);
        raw_line_gets(fd, "{not json", "bad_request");
        raw_line_gets(fd, "[1, 2]", "bad_request");
        raw_line_gets(fd, "\"str\"", "bad_request");
        raw_line_gets(fd, "null", "bad_request");
        /* the same connection still serves after each */
#define REQ(params, method)                                                                                            \
        (snprintf(line, sizeof(line), "{\"id\":1,\"token\":\"%s\",\"method\":\"%s\",\"params\":%s}", tok_a, method,    \
                  params),                                                                                             \
         line)
        raw_line_gets(fd, REQ("{\"session\":\"s1\"}", "no_such_method"), "bad_request");
        raw_line_gets(fd, REQ("{\"session\":\"s1\"}", "__proto__"), "bad_request");
        raw_line_gets(fd, REQ("\"x\"", "exec"), "bad_request");
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"command\":5}", "exec"), "bad_request");
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"command\":\"true\",\"timeout_seconds\":\"10\"}", "exec"),
                      "bad_request");
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"command\":\"true\",\"timeout_seconds\":1.5}", "exec"),
                      "bad_request");
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"command\":\"true\",\"timeout_seconds\":-1}", "exec"), "invalid");
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"command\":\"true\",\"timeout_seconds\":1e300}", "exec"),
                      "invalid");
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"command\":\"true\",\"background\":\"yes\"}", "exec"),
                      "bad_request");
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"command\":\"true\",\"env\":[1]}", "exec"), "bad_request");
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"command\":\"true\",\"env\":{\"A\":1}}", "exec"), "bad_request");
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"command\":\"true\",\"env\":{\"1A\":\"x\"}}", "exec"), "invalid");
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"command\":\"true\",\"workdir\":\"/etc\"}", "exec"), "invalid");
        raw_line_gets(fd, REQ("{\"session\":\"../x\",\"command\":\"true\"}", "exec"), "invalid");
        raw_line_gets(fd, REQ("{\"session\":42}", "session_info"), "bad_request");
        raw_line_gets(fd, REQ("{}", "session_info"), "bad_request");
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"states\":\"running\"}", "list_executions"), "bad_request");
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"states\":[\"sleepy\"]}", "list_executions"), "invalid");
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"language\":\"cobol\",\"code\":\"x\"}", "run_code"), "invalid");
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"execution_id\":\"nope\"}", "get_execution"), "not_found");
        raw_line_gets(fd,
                      REQ("{\"session\":\"s1\",\"path\":\"a\",\"encoding\":\"latin1\",\"content\":\"\"}", "write_file"),
                      "invalid");
        /* network per execution (issue 37 item 3): a bad shape is bad_request; a valid narrowing
         * runs (what it enforces: test_egress.c) */
        {
                static const char *const bad[] = {
                        "5",
                        "\"all\"",
                        "[\"example.com\"]",
                        "{}",
                        "{\"allow\":\"example.com\"}",
                        "{\"allow\":[]}",
                        "{\"allow\":[5]}",
                        "{\"allow\":[\"*\"]}",
                        "{\"allow\":[\"bad host!\"]}",
                        "{\"allow\":[\"example.com:99999\"]}",
                        "{\"allow\":[\"example.com\"],\"deny\":[]}",
                        "{\"allow\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\","
                        "\"n\",\"o\",\"p\",\"q\"]}",
                };
                char params[512];
                for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                        snprintf(params, sizeof(params), "{\"session\":\"s1\",\"command\":\"true\",\"network\":%s}",
                                 bad[i]);
                        raw_line_gets(fd, REQ(params, "exec"), "bad_request");
                }
                raw_line_gets(fd, REQ("{\"session\":\"s1\",\"command\":\"true\",\"network\":\"none\"}", "exec"), "");
                raw_line_gets(fd,
                              REQ("{\"session\":\"s1\",\"command\":\"true\",\"network\":{\"allow\":[\"Example.COM:443\","
                                  "\"*.pypi.org\"]}}",
                                  "exec"),
                              "");
                raw_line_gets(fd,
                              REQ("{\"session\":\"s1\",\"language\":\"python\",\"tests\":\"t.py\",\"network\":\"x\"}",
                                  "run_tests"),
                              "bad_request");
                raw_line_gets(fd, REQ("{\"session\":\"s1\",\"command\":\"true\",\"network\":null}", "exec"), "");
        }
        raw_line_gets(fd, REQ("{\"session\":\"s1\",\"command\":\"true\"}", "exec"), "");
        close(fd);

        /* a line over the cap: bad_request, then the connection is closed */
        {
                size_t n = API_MAX_LINE + 100;
                char *big = malloc(n);
                memset(big, 'x', n);
                big[0] = '{';
                fd = apic_connect(cfg.api_socket);
                (void)apic_send(fd, big, n); /* the server may stop reading early */
                r = apic_reply(fd, 30000, NULL);
                cr_assert_str_eq(apic_code(r), "bad_request");
                cJSON_Delete(r);
                cr_assert_null(apic_read_line(fd, 5000));
                close(fd);
                free(big);
        }

        /* a little fuzz: random bytes and mangled requests */
        {
                static const char alphabet[] = "{}[]\":,0123456789abc\\ntruefalsenull \x01\xff\x00";
                unsigned x = 777;
                fd = apic_connect(cfg.api_socket);
                for (int i = 0; i < 300; i++) {
                        size_t len = 0;
                        char buf[256];
                        if (i % 3 == 0) {
                                /* a valid request with bytes flipped */
                                len = (size_t)snprintf(buf, sizeof(buf),
                                                       "{\"id\":%d,\"token\":\"%s\",\"method\":\"list_executions\","
                                                       "\"params\":{\"session\":\"f\"}}",
                                                       i, tok_a);
                                for (int k = 0; k < 3; k++) {
                                        x = x * 1103515245u + 12345u;
                                        buf[(x >> 8) % len] = (char)((x >> 16) & 0xff);
                                }
                        } else {
                                len = 1 + (x >> 4) % 150;
                                for (size_t k = 0; k < len; k++) {
                                        x = x * 1103515245u + 12345u;
                                        buf[k] = alphabet[(x >> 16) % (sizeof(alphabet) - 1)];
                                }
                        }
                        for (size_t k = 0; k < len; k++)
                                if (buf[k] == '\n')
                                        buf[k] = ' ';
                        buf[len++] = '\n';
                        if (apic_send(fd, buf, len) < 0) {
                                /* hung up after 5 failed authentications: go on with a new connection */
                                close(fd);
                                fd = apic_connect(cfg.api_socket);
                                cr_assert_eq(apic_send(fd, buf, len), 0);
                        }
                        len--;
                        /* blank lines are skipped; everything else gets exactly one reply */
                        bool blank = true;
                        for (size_t k = 0; k < len; k++)
                                if (buf[k] != ' ' && buf[k] != '\t' && buf[k] != '\r')
                                        blank = false;
                        if (blank)
                                continue;
                        r = apic_reply(fd, 30000, NULL);
                        if (!r) {
                                /* only after 5 failed authentications may the daemon hang up */
                                close(fd);
                                fd = apic_connect(cfg.api_socket);
                                cr_assert_geq(fd, 0);
                                continue;
                        }
                        cJSON_Delete(r);
                }
                close(fd);
        }
        /* the daemon still serves */
        r = call(tok_a, "exec", "{\"session\": \"s1\", \"command\": \"echo alive\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "alive\n");
        cJSON_Delete(r);
        close_daemon();
}

Test(api, disconnect_mid_exec_keeps_execution)
{
        int fd;
        cJSON *r;
        const cJSON *list, *e;
        char id[64] = "", p[256];

        open_daemon();
        fd = apic_connect(cfg.api_socket);
        apic_request(
                fd, 1, tok_a, "exec",
                apic_json("{\"session\": \"s1\", \"stream\": true, \"command\": \"echo begin; sleep 2; echo end\"}"));
        {
                /* the first progress event proves the execution runs */
                char *first = apic_read_line(fd, 60000);
                cr_assert_not_null(first);
                cr_assert_not_null(strstr(first, "\"event\":\"output\""), "%s", first);
                free(first);
        }
        close(fd); /* gone mid-call */

        r = call(tok_a, "list_executions", "{\"session\": \"s1\"}");
        list = cJSON_GetObjectItem(apic_result(r), "executions");
        cr_assert_eq(cJSON_GetArraySize(list), 1);
        e = cJSON_GetArrayItem(list, 0);
        snprintf(id, sizeof(id), "%s", apic_str(e, "execution_id"));
        cr_assert(strcmp(apic_str(e, "state"), "running") == 0 || strcmp(apic_str(e, "state"), "pending") == 0,
                  "state %s", apic_str(e, "state"));
        cJSON_Delete(r);

        snprintf(p, sizeof(p), "{\"session\": \"s1\", \"execution_id\": \"%s\", \"wait\": 30}", id);
        r = call(tok_a, "get_execution", p);
        cr_assert_str_eq(apic_str(apic_result(r), "state"), "completed");
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "begin\nend\n");
        cJSON_Delete(r);
        close_daemon();
}

Test(api, connection_cap_and_stale_socket)
{
        int fds[64], fd;
        char *line;
        cJSON *r;

        conn_cap = 64; /* the cap at work; the defaults' scale is test_httpscale's */
        open_daemon();
        for (int i = 0; i < 64; i++) {
                fds[i] = apic_connect(cfg.api_socket);
                cr_assert_geq(fds[i], 0);
        }
        /* no wait: the accept thread takes connections in order, so this 65th
         * meets the cap whatever its pace */
        fd = apic_connect(cfg.api_socket);
        line = apic_read_line(fd, 10000);
        cr_assert_not_null(line);
        r = cJSON_Parse(line);
        cr_assert_str_eq(apic_code(r), "busy");
        cJSON_Delete(r);
        free(line);
        close(fd);
        for (int i = 0; i < 64; i++)
                close(fds[i]);
        /* until the daemon has seen the closes, a call may still meet the cap */
        r = NULL;
        (void)TESTENV_WAIT_UNTIL((cJSON_Delete(r), r = call(tok_a, "session_info", "{\"session\": \"s1\"}"),
                                  strcmp(apic_code(r), "busy") != 0),
                                 10000);
        cr_assert_str_eq(apic_code(r), "");
        cJSON_Delete(r);

        /* a second server on a live socket is refused, and the live one goes on */
        {
                struct api_server *srv2 = NULL;
                struct sbx_error err = {0};
                cr_assert_eq(api_server_start(d, &srv2, &err), -EADDRINUSE, "%s", err.msg);
                cr_assert_not_null(strstr(err.msg, "in use"), "%s", err.msg);
                r = call(tok_a, "session_info", "{\"session\": \"s1\"}");
                cr_assert_str_eq(apic_code(r), "");
                cJSON_Delete(r);
        }
        /* closed: the socket file is removed */
        close_daemon();
        cr_assert_neq(access(cfg.api_socket, F_OK), 0, "socket left behind");
}

static int count_fds(void)
{
        int n = 0;
        char p[64];
        for (int fd = 0; fd < 4096; fd++) {
                snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
                if (access(p, F_OK) == 0)
                        n = fd + 1;
        }
        return n;
}

static double cpu_seconds(void)
{
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
               (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Out of descriptors, the accept thread backs off instead of spinning on a
 * listening socket that stays readable, and serves again once fds free up. */
Test(api, accept_backs_off_on_emfile)
{
        struct rlimit old, low;
        struct pollfd pfd;
        int p[2], go[2];
        pid_t pid;
        double cpu0, cpu1;
        char buf[256] = "";
        ssize_t n;
        int status;

        open_daemon();
        cr_assert_eq(pipe(go), 0); /* the parent's limit is low: the client may connect */
        cr_assert_eq(pipe(p), 0);  /* the client connected ("c"), then the reply it read */
        cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);

        /* the client lives in a child, with a descriptor table of its own */
        pid = fork();
        if (pid < 0) /* no assertion may run in the child: Criterion would block it */
                cr_assert_fail("fork: %m");
        if (pid == 0) {
                struct sockaddr_un sa = {.sun_family = AF_UNIX};
                struct pollfd gp = {.fd = go[0], .events = POLLIN};
                char line[256];
                int fd, k = 0;
                close(p[0]);
                close(go[1]);
                snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", cfg.api_socket);
                fd = socket(AF_UNIX, SOCK_STREAM, 0);
                if (poll(&gp, 1, 30000) != 1) /* the parent lowers its limit first */
                        _exit(4);
                if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                        _exit(3);
                (void)!write(p[1], "c", 1);
                (void)!write(fd, "{}\n", 3);
                while (k < (int)sizeof(line) - 1 && read(fd, line + k, 1) == 1 && line[k] != '\n')
                        k++;
                (void)!write(p[1], line, (size_t)k);
                _exit(0);
        }
        close(p[1]); /* the highest: no hole below the limit */
        low = old;
        low.rlim_cur = (rlim_t)count_fds(); /* every new descriptor fails with EMFILE */
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
        cr_assert_eq(write(go[1], "g", 1), 1);
        pfd = (struct pollfd){.fd = p[0], .events = POLLIN};
        cr_assert(poll(&pfd, 1, 30000) == 1 && read(p[0], buf, 1) == 1 && buf[0] == 'c', "the client never connected");
        cpu0 = cpu_seconds();
        sbx_sleep_ms(1500); /* not a wait: the window in which a spinning accept loop would burn CPU */
        cpu1 = cpu_seconds();
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
        /* a spinning accept loop burns a whole core for the 1.5 s */
        cr_assert_lt(cpu1 - cpu0, 0.15, "accept loop spun: %.2f s of CPU in 1.5 s", cpu1 - cpu0);

        n = read(p[0], buf, sizeof(buf) - 1);
        cr_assert_gt(n, 0, "the waiting client was never served");
        buf[n] = '\0';
        cr_assert_not_null(strstr(buf, "\"unauthorized\""), "%s", buf);
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        close(p[0]);
        close(go[0]);
        close(go[1]);
        close_daemon();
}

static bool service_logged(const char *token, const char *session, const char *name, const char *want)
{
        char params[256];
        cJSON *r;
        bool logged;

        snprintf(params, sizeof(params), "{\"session\": \"%s\", \"name\": \"%s\", \"tail_lines\": 10}", session, name);
        r = call(token, "service_logs", params);
        logged = apic_result(r) && strstr(apic_str(apic_result(r), "stdout"), want);
        cJSON_Delete(r);
        return logged;
}

Test(api, services_through_the_socket)
{
        cJSON *r;
        const cJSON *res;
        bool logged = false;

        open_daemon();
        r = call(tok_a, "start_service",
                 "{\"session\": \"svc\", \"name\": \"web\", "
                 "\"command\": \"echo hello-from-service; sleep 120\"}");
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(res, "name"), "web");
        cr_assert(strcmp(apic_str(res, "state"), "starting") == 0 || strcmp(apic_str(res, "state"), "running") == 0,
                  "state %s", apic_str(res, "state"));
        cr_assert_gt(apic_num(res, "pid"), 0);
        cr_assert(cJSON_IsArray(cJSON_GetObjectItem(res, "ports")));
        cJSON_Delete(r);

        expect_code(call(tok_a, "start_service", "{\"session\": \"svc\", \"name\": \"web\", \"command\": \"true\"}"),
                    "conflict", "same name twice");
        expect_code(call(tok_a, "start_service", "{\"session\": \"svc\", \"name\": \"../x\", \"command\": \"true\"}"),
                    "invalid", "bad name");
        expect_code(call(tok_a, "stop_service", "{\"session\": \"svc\", \"name\": \"nope\"}"), "not_found", "unknown");
        /* another user's session of the same name has no such service */
        r = call(tok_b, "list_services", "{\"session\": \"svc\"}");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(apic_result(r), "services")), 0);
        cJSON_Delete(r);
        expect_code(call(tok_b, "service_logs", "{\"session\": \"svc\", \"name\": \"web\"}"), "not_found", "B logs");

        r = call(tok_a, "list_services", "{\"session\": \"svc\"}");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(apic_result(r), "services")), 1);
        cJSON_Delete(r);
        logged = TESTENV_WAIT_UNTIL(service_logged(tok_a, "svc", "web", "hello-from-service"), 10000);
        cr_assert(logged, "the service's output never showed in its logs");

        r = call(tok_a, "stop_service", "{\"session\": \"svc\", \"name\": \"web\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "state"), "stopped", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        close_daemon();
}
