/* testrun.h — run_tests (issue 17): the program that runs a tenant's tests
 * inside its container, and the reading of its results.
 *
 * The program is the project's own harness (harness/run_tests.py or .js,
 * embedded at build time) followed by one line that calls it with a
 * per-run marker and the code and tests, base64-encoded (so no tenant byte
 * is ever parsed as program text of the harness). It runs as an ordinary
 * run_code execution: caps, timeouts and audit apply. The harness keeps the
 * execution's stdout as its result channel, "<marker> <json>" per line,
 * and sends everything the tests print to stderr.
 *
 * testrun_parse reads that channel back. It trusts nothing: lines without
 * the marker, malformed JSON and wrong types are skipped; names and errors
 * are cut to size and made valid UTF-8; at most TESTRUN_MAX_TESTS tests. */
#ifndef SANDBOXD_TESTRUN_H
#define SANDBOXD_TESTRUN_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "sandboxd/common.h"

#define TESTRUN_MARKER_MAX 48
#define TESTRUN_MAX_TESTS 10000
#define TESTRUN_NAME_MAX 512
#define TESTRUN_ERROR_MAX 4096
#define TESTRUN_LINE_MAX (64 * 1024)
#define TESTRUN_RESULTS_MAX (8 << 20) /* bytes of the result channel read back at most */

enum testrun_language {
        TESTRUN_PYTHON,
        TESTRUN_NODE,
};

/* "python" or "node" (and their aliases python3, javascript). */
int testrun_language_from_string(const char *s, enum testrun_language *ret);

/* The program to run for these tests (code may be NULL). *ret_program is
 * malloc'd; ret_marker receives the run's marker. */
int testrun_program(enum testrun_language lang, const char *code, const char *tests,
                    char ret_marker[TESTRUN_MARKER_MAX], char **ret_program, size_t *ret_len, struct sbx_error *err);

struct testrun_report {
        bool started; /* the harness ran */
        bool ended;   /* it ran every test */
        char *error;  /* a crash before any test ran (malloc'd), or NULL */
        size_t total, passed, failed, skipped;
        bool truncated; /* more than TESTRUN_MAX_TESTS tests: the rest are counted only */
        cJSON *tests;   /* [{name, passed, skipped, error, duration_ms}] */
};

/* Read the records carrying marker from buf (the execution's stdout). */
int testrun_parse(const char *marker, const char *buf, size_t len, struct testrun_report *ret);
void testrun_report_done(struct testrun_report *r);

#endif
