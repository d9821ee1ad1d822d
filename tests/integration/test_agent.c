/* Integration tests of the agent tools (issue 17) through the API socket,
 * against the real dockerd and the python image (python3 and node):
 * run_tests in both languages (passing, failing, skipped, crashing suites),
 * the script cache (dedup, run by name, listing, clearing, the cap, other
 * users), and sessions as tools (create with env and TTL, exec, destroy
 * with and without purge). Lean: one daemon and one or two sessions per
 * test. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/daemon.h"
#include "sandboxd/quota.h"
#include "sandboxd/session.h"
#include "sandboxd/token.h"
#include "testenv.h"

TestSuite(agent, .timeout = 600);

static struct sbx_config cfg;
static struct daemon *d;
static char tok_a[TOKEN_LEN + 1], tok_b[TOKEN_LEN + 1];

static void open_daemon(int max_scripts)
{
        char dir[SBX_PATH_MAX];
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};

        fixture_config(&cfg);
        cfg.port_range_lo = 29700; /* this suite's own */
        cfg.port_range_hi = 30199;
        snprintf(cfg.image, sizeof(cfg.image), "%s", TESTENV_PYTHON_IMAGE);
        snprintf(cfg.images, sizeof(cfg.images), "%s", TESTENV_TEST_IMAGE);
        if (max_scripts > 0)
                cfg.max_scripts_per_user = max_scripts;
        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/run/api.sock", dirname(dir));
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/run/admin.sock", dir);
        cfg.exec_kill_grace_ms = 500;
        (void)testenv_docker();
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_AGENT, tok_a, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(token_create(d->store, "bob", TOKEN_ROLE_AGENT, tok_b, NULL, &err), 0, "%s", err.msg);
}

static void close_daemon(void)
{
        daemon_close(d);
        d = NULL;
}

/* params: a cJSON object built by the caller (consumed). */
static cJSON *callj(const char *token, const char *method, cJSON *params)
{
        return apic_call(cfg.api_socket, token, method, params);
}

static cJSON *call(const char *token, const char *method, const char *params_json)
{
        return callj(token, method, apic_json(params_json));
}

static cJSON *run_tests(const char *language, const char *code, const char *tests)
{
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "session", "t");
        cJSON_AddStringToObject(p, "language", language);
        if (code)
                cJSON_AddStringToObject(p, "code", code);
        cJSON_AddStringToObject(p, "tests", tests);
        return callj(tok_a, "run_tests", p);
}

static const cJSON *test_named(const cJSON *res, const char *name)
{
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(res, "tests")) {
                if (strcmp(apic_str(t, "name"), name) == 0)
                        return t;
        }
        return NULL;
}

static void expect_summary(const cJSON *res, int total, int passed, int failed, int skipped)
{
        const cJSON *s = cJSON_GetObjectItem(res, "summary");
        cr_assert_eq(apic_num(s, "total"), total, "%s", cJSON_PrintUnformatted(res));
        cr_assert_eq(apic_num(s, "passed"), passed, "%s", cJSON_PrintUnformatted(res));
        cr_assert_eq(apic_num(s, "failed"), failed, "%s", cJSON_PrintUnformatted(res));
        cr_assert_eq(apic_num(s, "skipped"), skipped, "%s", cJSON_PrintUnformatted(res));
}

Test(agent, run_tests_python)
{
        cJSON *r;
        const cJSON *res, *t;

        open_daemon(0);
        /* passing, failing and skipped, functions and a TestCase; the tests print a forged record */
        r = run_tests("python", "def add(a, b):\n    return a + b\n",
                      "import unittest\n"
                      "print('SBXT-0000 {\"t\": \"test\", \"name\": \"forged\", \"passed\": true}')\n"
                      "def test_add():\n    assert add(2, 3) == 5\n"
                      "def test_wrong():\n    assert add(2, 2) == 5\n"
                      "@unittest.skip('not today')\ndef test_later():\n    pass\n"
                      "class TestAdd(unittest.TestCase):\n"
                      "    def test_zero(self):\n        self.assertEqual(add(0, 0), 0)\n"
                      "    @unittest.skip('no')\n    def test_skipped(self):\n        pass\n"
                      "    def test_error(self):\n        raise ValueError('boom')\n");
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(res, "success")));
        expect_summary(res, 6, 2, 2, 2);
        cr_assert_null(test_named(res, "forged"), "printed text is not a result");
        t = test_named(res, "test_wrong");
        cr_assert_not_null(t);
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(t, "passed")));
        cr_assert_not_null(strstr(apic_str(t, "error"), "AssertionError"), "%s", apic_str(t, "error"));
        cr_assert_not_null(strstr(apic_str(t, "error"), "add(2, 2) == 5"), "the failing line is shown");
        t = test_named(res, "TestAdd.test_error");
        cr_assert_not_null(t);
        cr_assert_not_null(strstr(apic_str(t, "error"), "ValueError: boom"));
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(test_named(res, "TestAdd.test_zero"), "passed")));
        cr_assert_not_null(strstr(apic_str(res, "output"), "SBXT-0000"), "what the tests print is output");
        cJSON_Delete(r);

        /* all passing */
        r = run_tests("python", NULL, "def test_one():\n    assert 1 + 1 == 2\n");
        res = apic_result(r);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "success")), "%s", cJSON_PrintUnformatted(r));
        expect_summary(res, 1, 1, 0, 0);
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(res, "error")));
        cJSON_Delete(r);

        /* a crash before any test ran */
        r = run_tests("python", "def broken(:\n    pass\n", "def test_x():\n    assert True\n");
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(res, "success")));
        expect_summary(res, 0, 0, 0, 0);
        cr_assert_not_null(strstr(apic_str(res, "error"), "SyntaxError"), "%s", cJSON_PrintUnformatted(res));
        cJSON_Delete(r);
        close_daemon();
}

Test(agent, run_tests_node)
{
        cJSON *r;
        const cJSON *res, *t;

        open_daemon(0);
        r = run_tests("node", "function add(a, b) { return a + b; }\n",
                      "const test = require('node:test');\nconst assert = require('node:assert');\n"
                      "console.log('chatter');\n"
                      "test('adds', () => { assert.strictEqual(add(1, 2), 3); });\n"
                      "test('wrong', () => { assert.strictEqual(add(1, 2), 4); });\n"
                      "test('later', { skip: true }, () => {});\n"
                      "test('group', async (t) => { await t.test('inner', () => {}); });\n");
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(res, "success")));
        expect_summary(res, 4, 2, 1, 1);
        t = test_named(res, "wrong");
        cr_assert_not_null(t);
        cr_assert_not_null(strstr(apic_str(t, "error"), "3 !== 4"), "%s", apic_str(t, "error"));
        cr_assert_not_null(test_named(res, "group > inner"));
        cr_assert_not_null(strstr(apic_str(res, "output"), "chatter"));
        cJSON_Delete(r);

        r = run_tests("node", NULL,
                      "import test from 'node:test';\nimport assert from 'node:assert';\n"
                      "test('esm', () => assert.ok(true));\n");
        res = apic_result(r);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "success")), "%s", cJSON_PrintUnformatted(r));
        expect_summary(res, 1, 1, 0, 0);
        cJSON_Delete(r);

        r = run_tests("node", NULL, "const test = require('node:test');\nthrow new Error('boom at load');\n");
        res = apic_result(r);
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(res, "success")), "%s", cJSON_PrintUnformatted(r));
        expect_summary(res, 0, 0, 0, 0);
        cr_assert_not_null(strstr(apic_str(res, "error"), "boom at load"), "%s", cJSON_PrintUnformatted(res));
        cJSON_Delete(r);
        close_daemon();
}

static cJSON *run_code(const char *token, const char *language, const char *code)
{
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "session", "c");
        cJSON_AddStringToObject(p, "language", language);
        cJSON_AddStringToObject(p, "code", code);
        return callj(token, "run_code", p);
}

Test(agent, script_cache)
{
        cJSON *r, *p;
        const cJSON *res, *cached;
        char name[96];

        open_daemon(3);
        r = run_code(tok_a, "python", "# Say the answer\nprint(6 * 7)\n");
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cached = cJSON_GetObjectItem(res, "cached");
        cr_assert(cJSON_IsObject(cached), "%s", cJSON_PrintUnformatted(r));
        snprintf(name, sizeof(name), "%s", apic_str(cached, "name"));
        cr_assert_eq(strncmp(name, "script-", 7), 0);
        cr_assert_eq(strcmp(name + strlen(name) - 3, ".py"), 0);
        cr_assert_str_eq(apic_str(cached, "description"), "Say the answer");
        cr_assert_eq(strlen(apic_str(cached, "content_hash")), 64);
        cJSON_Delete(r);

        /* the same code again: the same entry, not a second one */
        r = run_code(tok_a, "python", "# Say the answer\nprint(6 * 7)\n");
        cr_assert_str_eq(apic_str(cJSON_GetObjectItem(apic_result(r), "cached"), "name"), name);
        cJSON_Delete(r);
        /* a failure and cache: false save nothing */
        r = run_code(tok_a, "python", "raise SystemExit(3)\n");
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(apic_result(r), "cached")), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_a, "run_code",
                 "{\"session\": \"c\", \"language\": \"bash\", \"code\": \"echo x\", "
                 "\"cache\": false}");
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(apic_result(r), "cached")), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        /* run by name */
        p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "session", "c");
        cJSON_AddStringToObject(p, "script", name);
        r = callj(tok_a, "run_code", cJSON_Duplicate(p, true));
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "42\n", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        /* another user: invisible, and not runnable */
        r = callj(tok_b, "run_code", p);
        cr_assert_str_eq(apic_code(r), "not_found", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_b, "list_scripts", "{}");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(apic_result(r), "scripts")), 0, "%s",
                     cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        /* listing and its filter */
        r = run_code(tok_a, "node", "// Print two\nconsole.log(2)\n");
        cr_assert(cJSON_IsObject(cJSON_GetObjectItem(apic_result(r), "cached")), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_a, "list_scripts", "{}");
        res = apic_result(r);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(res, "scripts")), 2, "%s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(res, "count"), 2);
        cJSON_Delete(r);
        r = call(tok_a, "list_scripts", "{\"filter\": \"answer\"}");
        res = apic_result(r);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(res, "scripts")), 1);
        cr_assert_str_eq(apic_str(cJSON_GetArrayItem(cJSON_GetObjectItem(res, "scripts"), 0), "name"), name);
        cJSON_Delete(r);

        /* the cap (3 scripts): the fourth is refused with a reason, the run itself succeeds */
        r = run_code(tok_a, "bash", "echo three\n");
        cr_assert(cJSON_IsObject(cJSON_GetObjectItem(apic_result(r), "cached")));
        cJSON_Delete(r);
        r = run_code(tok_a, "bash", "echo four\n");
        res = apic_result(r);
        cr_assert_str_eq(apic_str(res, "stdout"), "four\n");
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(res, "cached")), "%s", cJSON_PrintUnformatted(r));
        cr_assert_not_null(strstr(apic_str(res, "cache_error"), "full"));
        cJSON_Delete(r);

        /* clearing: one by name, then everything */
        p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "name", name);
        r = callj(tok_b, "clear_scripts", cJSON_Duplicate(p, true));
        cr_assert_str_eq(apic_code(r), "not_found", "bob cannot remove alice's script");
        cJSON_Delete(r);
        r = callj(tok_a, "clear_scripts", p);
        cr_assert_eq(apic_num(apic_result(r), "removed"), 1, "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_a, "clear_scripts", "{}");
        cr_assert_eq(apic_num(apic_result(r), "removed"), 2, "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_a, "list_scripts", "{}");
        cr_assert_eq(apic_num(apic_result(r), "count"), 0);
        cJSON_Delete(r);

        /* the caps are per-user quotas: an override of 1 */
        cr_assert_eq(quota_set(d->quota, "alice", "max_scripts_per_user", 1, NULL), 0);
        r = run_code(tok_a, "bash", "echo one\n");
        cr_assert(cJSON_IsObject(cJSON_GetObjectItem(apic_result(r), "cached")), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = run_code(tok_a, "bash", "echo two\n");
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(apic_result(r), "cached")), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        close_daemon();
}

/* The session's state as list_sessions says, "" when absent. */
static void listed_state(const char *token, const char *session, char *ret, size_t size)
{
        cJSON *r = call(token, "list_sessions", "{}");
        const cJSON *s;

        ret[0] = '\0';
        cJSON_ArrayForEach(s, cJSON_GetObjectItem(apic_result(r), "sessions")) {
                if (strcmp(apic_str(s, "session"), session) == 0)
                        snprintf(ret, size, "%s", apic_str(s, "state"));
        }
        cJSON_Delete(r);
}

struct racer {
        const char *env;
        cJSON *reply;
};

static void *create_racer(void *ud)
{
        struct racer *r = ud;
        char p[256];

        snprintf(p, sizeof(p), "{\"session\": \"race\", \"env\": {\"WHO\": \"%s\"}}", r->env);
        r->reply = call(tok_a, "create_session", p);
        return NULL;
}

/* Two create_session calls for one name at once: one makes it, the other
 * is a conflict, and the session's environment is the winner's. */
Test(agent, concurrent_create_session_for_one_name)
{
        struct racer rs[2] = {{.env = "first"}, {.env = "second"}};
        pthread_t t[2];
        int won = -1, conflicts = 0;
        cJSON *r;
        char expect[32];

        open_daemon(0);
        for (int i = 0; i < 2; i++)
                cr_assert_eq(pthread_create(&t[i], NULL, create_racer, &rs[i]), 0);
        for (int i = 0; i < 2; i++)
                pthread_join(t[i], NULL);
        for (int i = 0; i < 2; i++) {
                if (apic_result(rs[i].reply))
                        won = i;
                else if (strcmp(apic_code(rs[i].reply), "conflict") == 0)
                        conflicts++;
        }
        cr_assert_geq(won, 0, "%s / %s", cJSON_PrintUnformatted(rs[0].reply), cJSON_PrintUnformatted(rs[1].reply));
        cr_assert_eq(conflicts, 1, "%s / %s", cJSON_PrintUnformatted(rs[0].reply), cJSON_PrintUnformatted(rs[1].reply));
        r = call(tok_a, "exec", "{\"session\": \"race\", \"command\": \"echo $WHO\"}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        snprintf(expect, sizeof(expect), "%s\n", rs[won].env);
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), expect);
        cJSON_Delete(r);
        for (int i = 0; i < 2; i++)
                cJSON_Delete(rs[i].reply);
        close_daemon();
}

Test(agent, sessions_as_tools)
{
        cJSON *r;
        const cJSON *res;
        char state[32], generated[72];

        open_daemon(0);
        /* an image the operator does not allow */
        r = call(tok_a, "create_session", "{\"session\": \"bad\", \"image\": \"debian:latest\"}");
        cr_assert_str_eq(apic_code(r), "invalid", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_a, "create_session", "{\"session\": \"bad\", \"env\": {\"1X\": \"v\"}}");
        cr_assert_str_eq(apic_code(r), "invalid", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        r = call(tok_a, "create_session",
                 "{\"session\": \"w\", \"ttl_seconds\": 3600, "
                 "\"env\": {\"GREETING\": \"hello there\"}}");
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(res, "state"), "running");
        cr_assert(apic_num(res, "expires_at") > 0);
        cJSON_Delete(r);
        r = call(tok_a, "create_session", "{\"session\": \"w\"}");
        cr_assert_str_eq(apic_code(r), "conflict");
        cJSON_Delete(r);

        /* the default environment, and the request's own value winning */
        r = call(tok_a, "exec", "{\"session\": \"w\", \"command\": \"echo \\\"$GREETING\\\" > note; cat note\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "hello there\n", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_a, "exec",
                 "{\"session\": \"w\", \"command\": \"echo $GREETING\", \"env\": {\"GREETING\": \"x\"}}");
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "x\n");
        cJSON_Delete(r);

        listed_state(tok_a, "w", state, sizeof(state));
        cr_assert_str_eq(state, "running");
        listed_state(tok_b, "w", state, sizeof(state));
        cr_assert_str_eq(state, "", "bob does not see alice's sessions");

        /* destroy (no purge) with an execution running: cancelled, workspace kept */
        r = call(tok_a, "exec", "{\"session\": \"w\", \"command\": \"sleep 300\", \"background\": true}");
        cr_assert_not_null(apic_result(r));
        cJSON_Delete(r);
        r = call(tok_b, "destroy_session", "{\"session\": \"w\"}");
        cr_assert_str_eq(apic_code(r), "not_found");
        cJSON_Delete(r);
        r = call(tok_a, "destroy_session", "{\"session\": \"w\"}");
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(res, "cancelled_executions"), 1);
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(res, "purged")));
        cJSON_Delete(r);
        cr_assert_eq(fixture_count_containers("alice", "w"), 0);
        listed_state(tok_a, "w", state, sizeof(state));
        cr_assert_str_eq(state, "");

        r = call(tok_a, "create_session", "{\"session\": \"w\"}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_a, "exec", "{\"session\": \"w\", \"command\": \"cat note; echo \\\"[$GREETING]\\\"\"}");
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "hello there\n[]\n",
                         "the workspace stayed, the old env did not: %s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        /* destroy with purge: the workspace goes */
        r = call(tok_a, "destroy_session", "{\"session\": \"w\", \"purge\": true}");
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(apic_result(r), "purged")), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_a, "exec", "{\"session\": \"w\", \"command\": \"ls note 2>&1 || echo gone\"}");
        cr_assert_not_null(strstr(apic_str(apic_result(r), "stdout"), "gone"), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        /* a generated name, another allowed image, and a TTL that ends it */
        r = call(tok_a, "create_session", "{\"ttl_seconds\": 1, \"image\": \"" TESTENV_TEST_IMAGE "\"}");
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        snprintf(generated, sizeof(generated), "%s", apic_str(res, "session"));
        cr_assert_eq(strncmp(generated, "s-", 2), 0);
        cJSON_Delete(r);
        {
                char cid[65], *out = NULL;
                fixture_container_of(d, "alice", generated, cid);
                (void)fixture_sh(cid, "test -x /bin/busybox && ! command -v python3 && echo busybox", &out);
                cr_assert_not_null(strstr(out, "busybox"), "the session runs the image it asked for: %s", out);
                free(out);
        }
        usleep(1200 * 1000); /* not a wait: ages the session past its 1 s TTL */
        cr_assert_eq(session_expire_ttl(d->sessions, sbx_wall_ms()), 1);
        listed_state(tok_a, generated, state, sizeof(state));
        cr_assert_str_eq(state, "stopped");
        cr_assert_eq(fixture_count_containers("alice", generated), 0);
        cr_assert_eq(session_expire_ttl(d->sessions, sbx_wall_ms()), 0, "a TTL ends a session once");
        r = callj(tok_a, "destroy_session", cJSON_CreateObject());
        cr_assert_str_eq(apic_code(r), "bad_request");
        cJSON_Delete(r);
        close_daemon();
}
