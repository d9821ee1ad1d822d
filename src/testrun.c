/* testrun.c — run_tests' program and the reading of its results (see
 * testrun.h). Pure functions: no state, no threads, no I/O. The harnesses
 * themselves are harness/run_tests.{py,js}, embedded by
 * cmake/embed.cmake. */
#include "sandboxd/testrun.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/utf8.h"

extern const char testrun_harness_python[];
extern const char testrun_harness_node[];

int testrun_language_from_string(const char *s, enum testrun_language *ret)
{
        if (!s)
                return -EINVAL;
        if (strcmp(s, "python") == 0 || strcmp(s, "python3") == 0)
                *ret = TESTRUN_PYTHON;
        else if (strcmp(s, "node") == 0 || strcmp(s, "javascript") == 0)
                *ret = TESTRUN_NODE;
        else
                return -EINVAL;
        return 0;
}

int testrun_program(enum testrun_language lang, const char *code, const char *tests,
                    char ret_marker[TESTRUN_MARKER_MAX], char **ret_program, size_t *ret_len, struct sbx_error *err)
{
        _cleanup_free_ char *c64 = NULL, *t64 = NULL;
        char marker[TESTRUN_MARKER_MAX], hex[33];
        char *prog = NULL;
        int n;

        if (!tests || !*tests)
                return sbx_error_set(err, -EINVAL, 0, "tests are empty");
        if (sbx_random_hex(hex, 16) < 0)
                return sbx_error_set(err, -EIO, 0, "no randomness for the run's marker");
        snprintf(marker, sizeof(marker), "SBXT-%s", hex);
        c64 = base64_encode(code ? code : "", code ? strlen(code) : 0);
        t64 = base64_encode(tests, strlen(tests));
        if (!c64 || !t64)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (lang == TESTRUN_PYTHON)
                n = asprintf(&prog, "%s\n_sbx_main(\"%s\", \"%s\", \"%s\")\n", testrun_harness_python, marker, c64,
                             t64);
        else
                n = asprintf(&prog, "%s\nsbxMain(\"%s\", \"%s\", \"%s\");\n", testrun_harness_node, marker, c64, t64);
        if (n < 0)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        memcpy(ret_marker, marker, sizeof(marker));
        *ret_program = prog;
        *ret_len = (size_t)n;
        return 0;
}

/* A record's string, cut to max bytes (on a character boundary) and made
 * valid UTF-8; NULL when absent or not a string. */
static char *clean_string(const cJSON *v, size_t max)
{
        size_t n;

        if (!cJSON_IsString(v) || !v->valuestring)
                return NULL;
        n = strlen(v->valuestring);
        if (n > max) {
                n = max;
                while (n > 0 && ((unsigned char)v->valuestring[n] & 0xC0) == 0x80)
                        n--;
        }
        return utf8_sanitize(v->valuestring, n);
}

static void add_test(struct testrun_report *r, const cJSON *rec)
{
        const cJSON *passed = cJSON_GetObjectItemCaseSensitive(rec, "passed");
        const cJSON *skipped = cJSON_GetObjectItemCaseSensitive(rec, "skipped");
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(rec, "duration_ms");
        _cleanup_free_ char *name = clean_string(cJSON_GetObjectItemCaseSensitive(rec, "name"), TESTRUN_NAME_MAX);
        _cleanup_free_ char *error = clean_string(cJSON_GetObjectItemCaseSensitive(rec, "error"), TESTRUN_ERROR_MAX);
        bool ok, skip;
        double d = 0;
        cJSON *t;

        if (!name || !cJSON_IsBool(passed) || (skipped && !cJSON_IsBool(skipped)))
                return; /* not a record the harness writes */
        skip = cJSON_IsTrue(skipped);
        ok = cJSON_IsTrue(passed) || skip;
        if (cJSON_IsNumber(ms) && isfinite(ms->valuedouble) && ms->valuedouble > 0)
                d = ms->valuedouble < 1e12 ? (double)(int64_t)ms->valuedouble : 1e12;
        r->total++;
        if (skip)
                r->skipped++;
        else if (ok)
                r->passed++;
        else
                r->failed++;
        if (r->total > TESTRUN_MAX_TESTS) {
                r->truncated = true;
                return;
        }
        t = cJSON_CreateObject();
        if (!t)
                return;
        cJSON_AddStringToObject(t, "name", name);
        cJSON_AddBoolToObject(t, "passed", ok);
        cJSON_AddBoolToObject(t, "skipped", skip);
        if (error && *error && !ok)
                cJSON_AddStringToObject(t, "error", error);
        else if (error && *error && skip)
                cJSON_AddStringToObject(t, "error", error);
        else
                cJSON_AddNullToObject(t, "error");
        cJSON_AddNumberToObject(t, "duration_ms", d);
        cJSON_AddItemToArray(r->tests, t);
}

static void handle_record(struct testrun_report *r, const char *json, size_t len)
{
        cJSON *rec = cJSON_ParseWithLength(json, len);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rec, "t");

        if (!cJSON_IsObject(rec) || !cJSON_IsString(t) || r->ended)
                goto out;
        if (strcmp(t->valuestring, "start") == 0) {
                r->started = true;
        } else if (strcmp(t->valuestring, "test") == 0 && r->started) {
                add_test(r, rec);
        } else if (strcmp(t->valuestring, "end") == 0 && r->started) {
                r->ended = true;
        } else if (strcmp(t->valuestring, "error") == 0 && r->started && !r->error) {
                r->error = clean_string(cJSON_GetObjectItemCaseSensitive(rec, "error"), TESTRUN_ERROR_MAX);
                if (!r->error)
                        r->error = strdup("the test run crashed");
        }
out:
        cJSON_Delete(rec);
}

int testrun_parse(const char *marker, const char *buf, size_t len, struct testrun_report *ret)
{
        struct testrun_report r = {0};
        size_t ml = strlen(marker);

        r.tests = cJSON_CreateArray();
        if (!r.tests)
                return -ENOMEM;
        for (size_t i = 0; i < len;) {
                const char *line = buf + i, *nl = memchr(line, '\n', len - i);
                size_t n = nl ? (size_t)(nl - line) : len - i;

                i += n + 1;
                if (n > TESTRUN_LINE_MAX || n < ml + 1 || memcmp(line, marker, ml) != 0 || line[ml] != ' ')
                        continue;
                handle_record(&r, line + ml + 1, n - ml - 1);
        }
        *ret = r;
        return 0;
}

void testrun_report_done(struct testrun_report *r)
{
        if (!r)
                return;
        free(r->error);
        cJSON_Delete(r->tests);
        r->error = NULL;
        r->tests = NULL;
}
