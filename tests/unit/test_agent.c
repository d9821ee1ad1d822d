/* Unit tests for the pure parts of the agent tools (issue 17): run_tests'
 * program and result reading (testrun.h), the script cache's names,
 * descriptions, dedup and caps (scripts.h, on a real store in a temp
 * directory), and the allowed-images check (config.h). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandboxd/config.h"
#include "sandboxd/scripts.h"
#include "sandboxd/store.h"
#include "sandboxd/testrun.h"

/* ---- testrun ---- */

#define M "SBXT-0123456789abcdef0123456789abcdef"

static struct testrun_report parse(const char *text)
{
        struct testrun_report r;
        cr_assert_eq(testrun_parse(M, text, strlen(text), &r), 0);
        return r;
}

Test(testrun, counts_passed_failed_skipped)
{
        struct testrun_report r = parse(
                M
                " {\"t\":\"start\"}\n" M
                " {\"t\":\"test\",\"name\":\"a\",\"passed\":true,\"skipped\":false,"
                "\"error\":null,\"duration_ms\":3}\n" M
                " {\"t\":\"test\",\"name\":\"b\",\"passed\":false,\"error\":\"AssertionError\",\"duration_ms\":1.7}\n" M
                " {\"t\":\"test\",\"name\":\"c\",\"passed\":true,\"skipped\":true,\"error\":\"skipped: x\"}\n" M
                " {\"t\":\"end\"}\n");

        cr_assert(r.started && r.ended);
        cr_assert_null(r.error);
        cr_assert_eq(r.total, 3);
        cr_assert_eq(r.passed, 1);
        cr_assert_eq(r.failed, 1);
        cr_assert_eq(r.skipped, 1);
        const cJSON *b = cJSON_GetArrayItem(r.tests, 1);
        cr_assert_str_eq(cJSON_GetObjectItem(b, "name")->valuestring, "b");
        cr_assert_str_eq(cJSON_GetObjectItem(b, "error")->valuestring, "AssertionError");
        cr_assert_eq(cJSON_GetObjectItem(b, "duration_ms")->valuedouble, 1);
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(r.tests, 0), "error")));
        testrun_report_done(&r);
}

Test(testrun, ignores_lines_without_the_marker_and_bad_records)
{
        struct testrun_report r =
                parse("SBXT-fake {\"t\":\"start\"}\n"
                      "noise " M " {\"t\":\"end\"}\n" M " {\"t\":\"start\"}\n" M "{\"t\":\"end\"}\n" /* no space */
                      M " not json\n" M " [1,2]\n" M " {\"t\":\"test\",\"name\":5,\"passed\":true}\n" M
                      " {\"t\":\"test\",\"name\":\"x\",\"passed\":\"yes\"}\n" M
                      " {\"t\":\"test\",\"name\":\"ok\",\"passed\":true,\"duration_ms\":-5}");

        cr_assert(r.started);
        cr_assert_not(r.ended);
        cr_assert_eq(r.total, 1);
        cr_assert_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(r.tests, 0), "duration_ms")->valuedouble, 0);
        testrun_report_done(&r);
}

Test(testrun, records_before_start_and_after_end_do_not_count)
{
        struct testrun_report r =
                parse(M " {\"t\":\"test\",\"name\":\"early\",\"passed\":true}\n" M " {\"t\":\"start\"}\n" M
                        " {\"t\":\"end\"}\n" M " {\"t\":\"test\",\"name\":\"late\",\"passed\":false}\n");
        cr_assert_eq(r.total, 0);
        cr_assert(r.ended);
        testrun_report_done(&r);
}

Test(testrun, crash_record_is_kept_and_cut)
{
        char *line = NULL;
        size_t big = TESTRUN_ERROR_MAX * 2;
        char *err = malloc(big + 1);
        memset(err, 'e', big);
        err[big] = '\0';
        cr_assert(asprintf(&line, M " {\"t\":\"start\"}\n" M " {\"t\":\"error\",\"error\":\"%s\"}\n", err) > 0);
        struct testrun_report r = parse(line);
        cr_assert_not_null(r.error);
        cr_assert_eq(strlen(r.error), TESTRUN_ERROR_MAX);
        cr_assert_eq(r.total, 0);
        testrun_report_done(&r);
        free(line);
        free(err);
}

Test(testrun, invalid_utf8_in_names_is_repaired)
{
        struct testrun_report r =
                parse(M " {\"t\":\"start\"}\n" M " {\"t\":\"test\",\"name\":\"bad\xff\xfe\",\"passed\":true}\n");
        /* cJSON keeps the bytes; the report must not */
        if (r.total == 1) {
                const char *n = cJSON_GetObjectItem(cJSON_GetArrayItem(r.tests, 0), "name")->valuestring;
                cr_assert_null(strchr(n, '\xff'));
        }
        testrun_report_done(&r);
}

Test(testrun, program_carries_a_fresh_marker_and_no_raw_tenant_text)
{
        char m1[TESTRUN_MARKER_MAX], m2[TESTRUN_MARKER_MAX];
        char *p1 = NULL, *p2 = NULL;
        size_t n1, n2;
        struct sbx_error err = {0};
        const char *tests = "def test_x():\n    assert \"\\\")\" != 1  # \"); zq_tenant_text\n";

        cr_assert_eq(testrun_program(TESTRUN_PYTHON, NULL, tests, m1, &p1, &n1, &err), 0, "%s", err.msg);
        cr_assert_eq(testrun_program(TESTRUN_NODE, "x", "t", m2, &p2, &n2, &err), 0);
        cr_assert_str_neq(m1, m2);
        cr_assert_eq(strncmp(m1, "SBXT-", 5), 0);
        cr_assert_eq(strlen(m1), 5 + 32);
        cr_assert_not_null(strstr(p1, m1));
        cr_assert_null(strstr(p1, "zq_tenant_text"), "tests travel base64-encoded");
        cr_assert_not_null(strstr(p1, "_sbx_main(\""));
        cr_assert_not_null(strstr(p2, "sbxMain(\""));
        cr_assert_eq(strlen(p1), n1);
        cr_assert_eq(testrun_program(TESTRUN_PYTHON, NULL, "", m1, &p1, &n1, &err), -EINVAL);
        free(p1);
        free(p2);
}

Test(testrun, languages)
{
        enum testrun_language l;
        cr_assert_eq(testrun_language_from_string("python", &l), 0);
        cr_assert_eq(l, TESTRUN_PYTHON);
        cr_assert_eq(testrun_language_from_string("javascript", &l), 0);
        cr_assert_eq(l, TESTRUN_NODE);
        cr_assert_eq(testrun_language_from_string("bash", &l), -EINVAL);
}

/* ---- script names and descriptions ---- */

Test(scripts, names_have_their_shape)
{
        char name[SCRIPTS_NAME_MAX];

        scripts_name("python", "0123456789abcdef0000", 1700000000123, name);
        cr_assert_str_eq(name, "script-20231114T221320Z-0123456789ab.py");
        cr_assert(scripts_name_valid(name));
        scripts_name("node", "ffffffffffffffff", 0, name);
        cr_assert_str_eq(name, "script-19700101T000000Z-ffffffffffff.js");
        cr_assert(scripts_name_valid(name));
        cr_assert_not(scripts_name_valid("script-20231114T221320Z-0123456789ab.exe"));
        cr_assert_not(scripts_name_valid("script-20231114T221320Z-0123456789AB.py"));
        cr_assert_not(scripts_name_valid("../etc/passwd"));
        cr_assert_not(scripts_name_valid("script-20231114T221320Z-0123456789ab.py.py"));
        cr_assert_not(scripts_name_valid(NULL));
}

Test(scripts, description_from_the_leading_comment)
{
        char d[SCRIPTS_DESCRIPTION_MAX + 1];

        scripts_description("python",
                            "#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\n# Sum two numbers\n#  "
                            "and print it\n\nprint(1+2)\n",
                            d);
        cr_assert_str_eq(d, "Sum two numbers and print it");
        scripts_description("python", "print(1)\n# not leading\n", d);
        cr_assert_str_eq(d, "");
        scripts_description("node", "// Fetch a page\nconsole.log(1)\n", d);
        cr_assert_str_eq(d, "Fetch a page");
        scripts_description("node", "/**\n * Parse CSV\n * quickly\n */\nx()\n", d);
        cr_assert_str_eq(d, "Parse CSV quickly");
        scripts_description("bash", "# list files\nls\n", d);
        cr_assert_str_eq(d, "list files");

        char *long_comment = malloc(2000);
        strcpy(long_comment, "# ");
        for (int i = 0; i < 600; i++)
                strcat(long_comment, "\xc3\xa9"); /* é: a cut must not split it */
        strcat(long_comment, "\n");
        scripts_description("python", long_comment, d);
        cr_assert_leq(strlen(d), SCRIPTS_DESCRIPTION_MAX);
        cr_assert_eq(strlen(d) % 2, 0);
        free(long_comment);
}

Test(config, images_allowed)
{
        struct sbx_config cfg;

        config_defaults(&cfg);
        snprintf(cfg.image, sizeof(cfg.image), "sandboxd/python:latest");
        snprintf(cfg.images, sizeof(cfg.images), " sandboxd/test:latest , other:1");
        cr_assert(config_image_allowed(&cfg, "sandboxd/python:latest"));
        cr_assert(config_image_allowed(&cfg, "sandboxd/test:latest"));
        cr_assert(config_image_allowed(&cfg, "other:1"));
        cr_assert_not(config_image_allowed(&cfg, "other"));
        cr_assert_not(config_image_allowed(&cfg, "sandboxd/test"));
        cr_assert_not(config_image_allowed(&cfg, ""));
}

/* ---- the cache on a real store ---- */

static char tmpdir[PATH_MAX];
static struct store *st;
static struct sbx_config cfg;
static struct scripts *sc;

static void setup(void)
{
        const char *base = getenv("TMPDIR");
        char db[PATH_MAX + 16];
        struct sbx_error err = {0};

        snprintf(tmpdir, sizeof(tmpdir), "%s/sbx-agent-XXXXXX", base && *base ? base : "/tmp");
        cr_assert_not_null(mkdtemp(tmpdir));
        snprintf(db, sizeof(db), "%s/test.db", tmpdir);
        cr_assert_eq(store_open(db, &st, &err), 0, "%s", err.msg);
        config_defaults(&cfg);
        cfg.max_scripts_per_user = 3;
        cfg.max_script_bytes_per_user = 1000;
        cr_assert_eq(scripts_new(&cfg, st, NULL, &sc), 0);
}

static void teardown(void)
{
        DIR *d;
        struct dirent *de;

        scripts_free(sc);
        store_close(st);
        if ((d = opendir(tmpdir))) {
                while ((de = readdir(d)))
                        if (de->d_name[0] != '.')
                                unlinkat(dirfd(d), de->d_name, 0);
                closedir(d);
        }
        rmdir(tmpdir);
}

TestSuite(cache, .init = setup, .fini = teardown);

Test(cache, same_code_is_saved_once)
{
        struct store_script a, b;
        struct sbx_error err = {0};
        struct store_script *list = NULL;
        size_t n = 0;

        cr_assert_eq(scripts_save(sc, "alice", "python", "# hello\nprint(1)\n", &a, &err), 0, "%s", err.msg);
        cr_assert_str_eq(a.description, "hello");
        cr_assert(scripts_name_valid(a.name));
        cr_assert_eq(scripts_save(sc, "alice", "python", "# hello\nprint(1)\n", &b, &err), 1);
        cr_assert_str_eq(b.name, a.name);
        cr_assert_str_eq(b.content_hash, a.content_hash);
        cr_assert_eq(store_script_list(st, "alice", NULL, 100, &list, &n), 0);
        cr_assert_eq(n, 1);
        free(list);
}

Test(cache, another_users_scripts_are_invisible)
{
        struct store_script a, got;
        struct sbx_error err = {0};
        struct store_script *list = NULL;
        size_t n = 9;
        int64_t removed = -1;

        cr_assert_eq(scripts_save(sc, "alice", "bash", "echo secret\n", &a, &err), 0);
        cr_assert_eq(store_script_get(st, "bob", a.name, &got), -ENOENT);
        cr_assert_eq(store_script_list(st, "bob", NULL, 100, &list, &n), 0);
        cr_assert_eq(n, 0);
        free(list);
        cr_assert_eq(store_script_delete(st, "bob", NULL, &removed), 0);
        cr_assert_eq(removed, 0);
        cr_assert_eq(store_script_get(st, "alice", a.name, &got), 0);
        cr_assert_str_eq(got.code, "echo secret\n");
        store_script_done(&got);
        /* the same code is bob's own copy, not a pointer to alice's */
        struct store_script bb;
        cr_assert_eq(scripts_save(sc, "bob", "bash", "echo secret\n", &bb, &err), 0);
}

Test(cache, caps_count_and_bytes)
{
        struct store_script s;
        struct sbx_error err = {0};
        char big[1200];
        int64_t removed = 0;

        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        cr_assert_eq(scripts_save(sc, "carol", "python", big, &s, &err), -EDQUOT);
        cr_assert_not_null(strstr(err.msg, "full"));
        cr_assert_eq(scripts_save(sc, "carol", "python", "print(1)", &s, &err), 0);
        cr_assert_eq(scripts_save(sc, "carol", "python", "print(2)", &s, &err), 0);
        cr_assert_eq(scripts_save(sc, "carol", "python", "print(3)", &s, &err), 0);
        cr_assert_eq(scripts_save(sc, "carol", "python", "print(4)", &s, &err), -EDQUOT);
        /* a duplicate of a saved one is still found when full */
        cr_assert_eq(scripts_save(sc, "carol", "python", "print(3)", &s, &err), 1);
        cr_assert_eq(store_script_delete(st, "carol", s.name, &removed), 0);
        cr_assert_eq(removed, 1);
        cr_assert_eq(scripts_save(sc, "carol", "python", "print(4)", &s, &err), 0);
}

Test(cache, settle_saves_only_successes_of_the_same_user)
{
        struct store_script s;
        struct sbx_error err = {0};

        scripts_note_run(sc, "dave", "11111111-1111-1111-1111-111111111111", "python", "print('ok')");
        scripts_note_run(sc, "dave", "22222222-2222-2222-2222-222222222222", "python", "raise SystemExit(1)");
        cr_assert_eq(scripts_settle(sc, "eve", "11111111-1111-1111-1111-111111111111", true, &s, &err), -ENOENT);
        cr_assert_eq(scripts_settle(sc, "dave", "22222222-2222-2222-2222-222222222222", false, &s, &err), -ENOENT);
        cr_assert_eq(scripts_settle(sc, "dave", "11111111-1111-1111-1111-111111111111", true, &s, &err), 0);
        char first[96];
        snprintf(first, sizeof(first), "%s", s.name);
        /* asked again (get_execution after run_code): the same answer */
        cr_assert_eq(scripts_settle(sc, "dave", "11111111-1111-1111-1111-111111111111", true, &s, &err), 0);
        cr_assert_str_eq(s.name, first);
        cr_assert_eq(scripts_settle(sc, "dave", "33333333-3333-3333-3333-333333333333", true, &s, &err), -ENOENT);
}

Test(cache, filter_matches_name_or_description)
{
        struct store_script s;
        struct sbx_error err = {0};
        struct store_script *list = NULL;
        size_t n = 0;

        cr_assert_eq(scripts_save(sc, "fay", "python", "# parse 100% of it_\nprint(1)", &s, &err), 0);
        cr_assert_eq(scripts_save(sc, "fay", "node", "// other\nconsole.log(2)", &s, &err), 0);
        cr_assert_eq(store_script_list(st, "fay", "100%", 100, &list, &n), 0);
        cr_assert_eq(n, 1, "a %% in the filter is a plain character");
        free(list);
        cr_assert_eq(store_script_list(st, "fay", ".js", 100, &list, &n), 0);
        cr_assert_eq(n, 1);
        cr_assert_str_eq(list[0].language, "node");
        free(list);
}
