/* Integration tests of run_cell and the interpreter contexts (issue 25)
 * against the real dockerd and the python image: state across cells, rich
 * outputs (HTML, PNG with the figure's size), tracebacks, interrupt and
 * kill on timeout, OOM, isolation between contexts and sessions, the
 * privacy ratchet, node, and a daemon restart. Every call goes through the
 * daemon's real API socket. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/daemon.h"
#include "sandboxd/fronts.h"
#include "sandboxd/pool.h"
#include "sandboxd/sha256.h"
#include "sandboxd/token.h"
#include "sandboxd/utf8.h"
#include "testenv.h"

TestSuite(cells, .timeout = 900);

static struct sbx_config cfg;
static struct daemon *d;
static char tok_a[TOKEN_LEN + 1], tok_b[TOKEN_LEN + 1], tok_conn[TOKEN_LEN + 1];

static const char *network_default; /* NULL: the config's */
static int pool_size;               /* the warm pool's size (0: off) */
static const char *prestart;        /* POOL_CELLS_PRESTART (NULL: the default) */
static bool keep_cfg;               /* cfg was filled by the setup (fixture_config and more) */

static void open_daemon(bool new_tokens)
{
        char dir[SBX_PATH_MAX];
        struct daemon_options opts = {.extra_labels = fixture_labels(), .sockets = true};
        struct sbx_error err = {0};

        if (new_tokens) {
                if (!keep_cfg)
                        fixture_config(&cfg);
                cfg.port_range_lo = 46500;
                cfg.port_range_hi = 46999;
                snprintf(cfg.image, sizeof(cfg.image), "%s", TESTENV_PYTHON_IMAGE);
                cfg.memory_bytes = 768 << 20; /* a kernel with pandas and matplotlib */
                cfg.pids_limit = 256;
                /* Not 1.5 s: the grace runs from the cancel, and an interrupt that
                 * comes before the kernel has begun the cell waits for it to begin;
                 * on two busy cores that took over 1.5 s once, and the kernel was
                 * killed (a hidden deadline). Only the SIGINT-ignoring cell waits
                 * it out. */
                cfg.cells_interrupt_grace_ms = 8000;
                cfg.cells_max_per_session = 2;
                if (network_default)
                        snprintf(cfg.network_default, sizeof(cfg.network_default), "%s", network_default);
                cfg.pool_size = pool_size;
                if (prestart)
                        snprintf(cfg.pool_cells_prestart, sizeof(cfg.pool_cells_prestart), "%s", prestart);
                snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
                snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/run/api.sock", dirname(dir));
                snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/run/admin.sock", dir);
        }
        (void)testenv_docker();
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        if (new_tokens) {
                cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_AGENT, tok_a, NULL, &err), 0, "%s", err.msg);
                cr_assert_eq(token_create(d->store, "bob", TOKEN_ROLE_AGENT, tok_b, NULL, &err), 0);
                cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_CONNECTOR, tok_conn, NULL, &err), 0);
        }
}

static void close_daemon(void)
{
        daemon_close(d);
        d = NULL;
}

static void setup(void)
{
        open_daemon(true);
}

static void teardown(void)
{
        close_daemon();
        testenv_cleanup();
}

/* run_cell; returns the whole reply (asserting it succeeded). */
static cJSON *cell_as(const char *tok, const char *session, const char *context, const char *code, int timeout_s)
{
        cJSON *p = cJSON_CreateObject(), *r;

        cJSON_AddStringToObject(p, "session", session);
        if (context)
                cJSON_AddStringToObject(p, "context", context);
        cJSON_AddStringToObject(p, "code", code);
        if (timeout_s)
                cJSON_AddNumberToObject(p, "timeout_seconds", timeout_s);
        r = apic_call(cfg.api_socket, tok, "run_cell", p);
        cr_assert_not_null(apic_result(r), "run_cell %s: %s", code, cJSON_PrintUnformatted(r));
        return r;
}

static cJSON *cell(const char *session, const char *context, const char *code, int timeout_s)
{
        return cell_as(tok_a, session, context, code, timeout_s);
}

/* The text/plain of the cell's execute_result, or NULL. */
static const char *result_text(const cJSON *res)
{
        const cJSON *o;
        cJSON_ArrayForEach(o, cJSON_GetObjectItem(res, "outputs")) {
                if (strcmp(apic_str(o, "type"), "execute_result") == 0)
                        return apic_str(cJSON_GetObjectItem(o, "data"), "text/plain");
        }
        return NULL;
}

static const cJSON *first_output_with(const cJSON *res, const char *mime)
{
        const cJSON *o;
        cJSON_ArrayForEach(o, cJSON_GetObjectItem(res, "outputs")) {
                if (cJSON_GetObjectItem(cJSON_GetObjectItem(o, "data"), mime))
                        return o;
        }
        return NULL;
}

static const char *lost_cause(const cJSON *res)
{
        const cJSON *l = cJSON_GetObjectItem(res, "state_lost");
        return l ? apic_str(l, "cause") : NULL;
}

Test(cells, state_rich_outputs_and_tracebacks, .init = setup, .fini = teardown)
{
        cJSON *r;
        const cJSON *res, *o;

        r = cell("s1", NULL, "x = 41", 0);
        res = apic_result(r);
        cr_assert_str_eq(apic_str(res, "context"), "default");
        cr_assert_eq(apic_num(res, "generation"), 1);
        cr_assert_null(cJSON_GetObjectItem(res, "state_lost"), "a first cell has nothing lost");
        cJSON_Delete(r);

        r = cell("s1", NULL, "x + 1", 0);
        res = apic_result(r);
        cr_assert_str_eq(result_text(res), "42", "%s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(res, "generation"), 1);
        cr_assert_eq(apic_num(res, "execution_count"), 2);
        cJSON_Delete(r);

        /* a DataFrame survives, and comes back as HTML and plain text */
        cJSON_Delete(
                cell("s1", NULL, "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']})", 0));
        r = cell("s1", NULL, "print(df.shape)\ndf", 0);
        res = apic_result(r);
        cr_assert_str_eq(apic_str(res, "stdout"), "(3, 2)\n", "%s", cJSON_PrintUnformatted(r));
        o = first_output_with(res, "text/html");
        cr_assert_not_null(o, "%s", cJSON_PrintUnformatted(r));
        cr_assert(strstr(apic_str(cJSON_GetObjectItem(o, "data"), "text/html"), "<table"));
        cr_assert(strstr(apic_str(cJSON_GetObjectItem(o, "data"), "text/plain"), "a  b"));
        cJSON_Delete(r);

        /* a figure left open comes back as a PNG of the figure's size (4x3 in at 100 dpi) */
        r = cell("s1", NULL,
                 "import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(4, 3), dpi=100)\nplt.plot([1, 3, 2])", 0);
        res = apic_result(r);
        o = first_output_with(res, "image/png");
        cr_assert_not_null(o, "%s", cJSON_PrintUnformatted(r));
        {
                const char *b64 = apic_str(cJSON_GetObjectItem(o, "data"), "image/png");
                unsigned char *png = NULL;
                size_t n = 0;
                uint32_t w, h;
                cr_assert_eq(base64_decode(b64, strlen(b64), &png, &n), 0);
                cr_assert_gt(n, 24);
                cr_assert_eq(memcmp(png, "\x89PNG\r\n\x1a\n", 8), 0);
                cr_assert_eq(memcmp(png + 12, "IHDR", 4), 0);
                memcpy(&w, png + 16, 4);
                memcpy(&h, png + 20, 4);
                /* the inline backend crops to the drawn area (bbox_inches=tight): at most the figure */
                cr_assert(ntohl(w) > 200 && ntohl(w) <= 400, "width %u", ntohl(w));
                cr_assert(ntohl(h) > 150 && ntohl(h) <= 300, "height %u", ntohl(h));
                free(png);
        }
        cJSON_Delete(r);

        /* an exception: a structured traceback, and the namespace is still there */
        r = cell("s1", NULL, "def f():\n    return 1 / 0\nf()", 0);
        res = apic_result(r);
        cr_assert_str_eq(apic_str(res, "status"), "error");
        o = cJSON_GetObjectItem(res, "error");
        cr_assert_not_null(o, "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(o, "name"), "ZeroDivisionError");
        cr_assert_str_eq(apic_str(o, "value"), "division by zero");
        cr_assert_gt(cJSON_GetArraySize(cJSON_GetObjectItem(o, "traceback")), 1);
        cJSON_Delete(r);

        /* get_variables recalls what the context holds */
        r = apic_call(cfg.api_socket, tok_a, "get_variables", apic_json("{\"session\": \"s1\"}"));
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        {
                bool saw_x = false, saw_df = false;
                cJSON_ArrayForEach(o, cJSON_GetObjectItem(res, "variables")) {
                        if (strcmp(apic_str(o, "name"), "x") == 0)
                                saw_x = strcmp(apic_str(o, "type"), "int") == 0 &&
                                        strcmp(apic_str(o, "repr"), "41") == 0;
                        if (strcmp(apic_str(o, "name"), "df") == 0)
                                saw_df = strcmp(apic_str(o, "type"), "DataFrame") == 0 &&
                                         strcmp(apic_str(o, "shape"), "(3, 2)") == 0;
                }
                cr_assert(saw_x && saw_df, "%s", cJSON_PrintUnformatted(r));
        }
        cJSON_Delete(r);

        /* list_contexts: language, generation, count, memory */
        r = apic_call(cfg.api_socket, tok_a, "list_contexts", apic_json("{\"session\": \"s1\"}"));
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        o = cJSON_GetArrayItem(cJSON_GetObjectItem(res, "contexts"), 0);
        cr_assert_str_eq(apic_str(o, "context"), "default");
        cr_assert_str_eq(apic_str(o, "language"), "python");
        cr_assert_eq(apic_num(o, "generation"), 1);
        cr_assert_eq(apic_num(o, "execution_count"), 6);
        cr_assert_gt(apic_num(o, "rss_kb"), 10000);
        cJSON_Delete(r);

        /* restart_context: a new generation on request, reported as no loss */
        r = apic_call(cfg.api_socket, tok_a, "restart_context", apic_json("{\"session\": \"s1\"}"));
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = cell("s1", NULL, "'x' in globals()", 0);
        res = apic_result(r);
        cr_assert_str_eq(result_text(res), "False");
        cr_assert_eq(apic_num(res, "generation"), 2);
        cr_assert_null(cJSON_GetObjectItem(res, "state_lost"));
        cJSON_Delete(r);
}

Test(cells, timeout_interrupts_and_keeps_state_or_kills, .init = setup, .fini = teardown)
{
        cJSON *r;
        const cJSON *res;

        cJSON_Delete(cell("s1", NULL, "y = 5", 0));
        r = cell("s1", NULL, "while True:\n    pass", 2);
        res = apic_result(r);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "timed_out")), "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(cJSON_GetObjectItem(res, "error"), "name"), "KeyboardInterrupt");
        cr_assert_null(cJSON_GetObjectItem(res, "state_lost"));
        cJSON_Delete(r);
        r = cell("s1", NULL, "y", 0);
        res = apic_result(r);
        cr_assert_str_eq(result_text(res), "5", "state kept after the interrupt: %s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(res, "generation"), 1);
        cJSON_Delete(r);

        /* a cell that ignores SIGINT: killed after the grace, and both results say so */
        r = cell("s1", NULL, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", 2);
        res = apic_result(r);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "timed_out")));
        cr_assert_str_eq(lost_cause(res), "timeout", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = cell("s1", NULL, "'y' in globals()", 0);
        res = apic_result(r);
        cr_assert_str_eq(lost_cause(res), "timeout", "%s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(apic_result(r) ? cJSON_GetObjectItem(res, "state_lost") : NULL, "generation"), 1);
        cr_assert_eq(apic_num(res, "generation"), 2);
        cr_assert_str_eq(result_text(res), "False");
        cJSON_Delete(r);
        /* reported once */
        r = cell("s1", NULL, "1", 0);
        cr_assert_null(cJSON_GetObjectItem(apic_result(r), "state_lost"));
        cJSON_Delete(r);
}

Test(cells, oom_is_reported_alike_on_the_cell_and_the_next, .init = setup, .fini = teardown)
{
        cJSON *r;
        const cJSON *res;

        cJSON_Delete(cell("s1", NULL, "z = 1", 0));
        /* far past the container's memory limit, every page touched: the
         * cell it kills and the next one give the one cause (cgroup v1 and v2) */
        r = cell("s1", NULL, "b = b'x' * (4 << 30)", 60);
        cr_assert_str_eq(lost_cause(apic_result(r)), "oom", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = cell("s1", NULL, "'z' in globals()", 0);
        res = apic_result(r);
        cr_assert_str_eq(lost_cause(res), "oom", "%s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(res, "generation"), 2);
        cr_assert_str_eq(result_text(res), "False");
        cJSON_Delete(r);
}

/* The variable named name in a get_variables result (NULL: not listed). */
static const cJSON *variable(const cJSON *res, const char *name)
{
        const cJSON *o;
        cJSON_ArrayForEach(o, cJSON_GetObjectItem(res, "variables")) {
                if (strcmp(apic_str(o, "name"), name) == 0)
                        return o;
        }
        return NULL;
}

/* get_variables lists what it can describe and marks, with the error's
 * type, what it cannot: one hostile object hides nothing else. */
Test(cells, get_variables_marks_what_it_cannot_describe_and_lists_the_rest, .init = setup, .fini = teardown)
{
        cJSON *r;
        const cJSON *res, *v;

        cJSON_Delete(cell("s1", NULL,
                          "class Bad:\n"
                          "    @property\n"
                          "    def shape(self):\n"
                          "        raise ValueError('no shape')\n"
                          "bad = Bad()\n"
                          "n = 41",
                          0));
        r = apic_call(cfg.api_socket, tok_a, "get_variables", apic_json("{\"session\": \"s1\"}"));
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        v = variable(res, "n");
        cr_assert(v && strcmp(apic_str(v, "repr"), "41") == 0 && !cJSON_GetObjectItem(v, "error"), "%s",
                  cJSON_PrintUnformatted(r));
        v = variable(res, "bad");
        cr_assert_not_null(v, "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(v, "type"), "Bad");
        cr_assert_str_eq(apic_str(v, "error"), "ValueError", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
}

/* An object whose __repr__ blocks is cut off by the kernel's deadline per
 * object; one that also turns that deadline off by the daemon's, which
 * interrupts the kernel. Either way get_variables answers and the
 * namespace lives on in the same generation. */
Test(cells, get_variables_interrupts_a_blocking_repr_and_keeps_the_namespace, .init = setup, .fini = teardown)
{
        cJSON *r;
        const cJSON *res, *v;

        cJSON_Delete(cell("s1", NULL,
                          "import signal, time\n"
                          "class Slow:\n"
                          "    def __repr__(self):\n"
                          "        time.sleep(3600)\n"
                          "class Stubborn:\n"
                          "    def __repr__(self):\n"
                          "        signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                          "        time.sleep(3600)\n"
                          "slow = Slow()\n"
                          "n = 41",
                          0));
        r = apic_call(cfg.api_socket, tok_a, "get_variables", apic_json("{\"session\": \"s1\"}"));
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cr_assert_not_null(variable(res, "n"), "%s", cJSON_PrintUnformatted(r));
        v = variable(res, "slow");
        cr_assert(v && strcmp(apic_str(v, "error"), "TimeoutError") == 0, "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        cJSON_Delete(cell("s1", NULL, "stubborn = Stubborn()", 0));
        r = apic_call(cfg.api_socket, tok_a, "get_variables", apic_json("{\"session\": \"s1\"}"));
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cr_assert_not_null(variable(res, "n"), "%s", cJSON_PrintUnformatted(r));
        v = variable(res, "stubborn");
        cr_assert(v && strcmp(apic_str(v, "error"), "KeyboardInterrupt") == 0, "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        r = cell("s1", NULL, "n + 1", 0);
        res = apic_result(r);
        cr_assert_str_eq(result_text(res), "42", "%s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(res, "generation"), 1);
        cr_assert_null(cJSON_GetObjectItem(res, "state_lost"));
        cJSON_Delete(r);
}

struct bg_cell {
        const char *code;
        cJSON *reply;
};

static void *bg_cell_main(void *p)
{
        struct bg_cell *b = p;
        cJSON *q = cJSON_CreateObject();

        cJSON_AddStringToObject(q, "session", "s1");
        cJSON_AddStringToObject(q, "code", b->code);
        cJSON_AddNumberToObject(q, "timeout_seconds", 600);
        b->reply = apic_call(cfg.api_socket, tok_a, "run_cell", q);
        return NULL;
}

/* The cell of bg_cell_main has started (its mark in the container's /tmp;
 * an exec, which leaves the context alone). */
static bool bg_cell_started(void *ud)
{
        cJSON *r = apic_call(cfg.api_socket, tok_a, "exec",
                             apic_json("{\"session\": \"s1\", \"command\": \"test -e /tmp/started && echo yes\"}"));
        bool started = apic_result(r) && strcmp(apic_str(apic_result(r), "stdout"), "yes\n") == 0;
        (void)ud;
        cJSON_Delete(r);
        return started;
}

/* A restore while a cell runs ends the generation once, for one reason:
 * the cell and the next one report the same cause. */
Test(cells, a_restore_during_a_cell_reports_one_cause_on_both, .init = setup, .fini = teardown)
{
        struct bg_cell b = {.code = "import time\nopen('/tmp/started', 'w').close()\ntime.sleep(600)"};
        char snap[64];
        cJSON *r;
        pthread_t t;

        cJSON_Delete(cell("s1", NULL, "z = 1", 0));
        r = apic_call(cfg.api_socket, tok_a, "snapshot_session", apic_json("{\"session\": \"s1\"}"));
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        snprintf(snap, sizeof(snap), "%s", apic_str(apic_result(r), "snapshot"));
        cJSON_Delete(r);
        cr_assert_eq(pthread_create(&t, NULL, bg_cell_main, &b), 0);
        cr_assert(testenv_wait_until(bg_cell_started, NULL, 60000), "the cell runs");
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "session", "s1");
        cJSON_AddStringToObject(p, "snapshot", snap);
        r = apic_call(cfg.api_socket, tok_a, "restore_session", p);
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        pthread_join(t, NULL);
        cr_assert_not_null(apic_result(b.reply), "%s", cJSON_PrintUnformatted(b.reply));
        cr_assert_str_eq(lost_cause(apic_result(b.reply)), "restored", "%s", cJSON_PrintUnformatted(b.reply));
        cJSON_Delete(b.reply);
        r = cell("s1", NULL, "'z' in globals()", 0);
        cr_assert_str_eq(lost_cause(apic_result(r)), "restored", "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(result_text(apic_result(r)), "False");
        cJSON_Delete(r);
}

Test(cells, contexts_and_sessions_are_isolated, .init = setup, .fini = teardown)
{
        cJSON *r;

        cJSON_Delete(cell("s1", "a", "v = 'a'", 0));
        cJSON_Delete(cell("s1", "b", "v = 'b'", 0));
        cJSON_Delete(cell_as(tok_b, "s1", "a", "v = 'bob'", 0));
        r = cell("s1", "a", "v", 0);
        cr_assert_str_eq(result_text(apic_result(r)), "'a'");
        cJSON_Delete(r);
        r = cell("s1", "b", "v", 0);
        cr_assert_str_eq(result_text(apic_result(r)), "'b'");
        cJSON_Delete(r);
        r = cell("s2", "a", "'v' in globals()", 0);
        cr_assert_str_eq(result_text(apic_result(r)), "False");
        cJSON_Delete(r);
        r = cell_as(tok_b, "s1", "a", "v", 0);
        cr_assert_str_eq(result_text(apic_result(r)), "'bob'");
        cJSON_Delete(r);
        /* bob cannot see alice's contexts */
        r = apic_call(cfg.api_socket, tok_b, "list_contexts", apic_json("{\"session\": \"s1\"}"));
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(apic_result(r), "contexts")), 1);
        cJSON_Delete(r);
        /* a third context is past CELLS_MAX_PER_SESSION (2 here) */
        r = apic_call(cfg.api_socket, tok_a, "run_cell",
                      apic_json("{\"session\": \"s1\", \"context\": \"c\", \"code\": \"1\"}"));
        cr_assert_str_eq(apic_code(r), "busy", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        /* delete_context ends it; the per-session cap counts what is left */
        r = apic_call(cfg.api_socket, tok_a, "delete_context", apic_json("{\"session\": \"s1\", \"context\": \"b\"}"));
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = cell("s1", "c", "'v' in globals()", 0);
        cr_assert_str_eq(result_text(apic_result(r)), "False");
        cJSON_Delete(r);
        r = apic_call(cfg.api_socket, tok_a, "list_contexts", apic_json("{\"session\": \"s1\"}"));
        {
                const cJSON *l = cJSON_GetObjectItem(apic_result(r), "contexts"), *o;
                cr_assert_eq(cJSON_GetArraySize(l), 2, "%s", cJSON_PrintUnformatted(r));
                cJSON_ArrayForEach(o, l)
                        cr_assert_str_neq(apic_str(o, "context"), "b");
        }
        cJSON_Delete(r);
}

static void setup_bridge(void)
{
        network_default = "bridge"; /* a networked container for the ratchet to take away */
        setup();
}

Test(cells, privacy_ratchet_reports_state_lost, .init = setup_bridge, .fini = teardown)
{
        cJSON *r;
        const cJSON *res;

        cJSON_Delete(cell("s1", NULL, "secret = 1", 0));
        r = apic_call(cfg.api_socket, tok_conn, "mark_private",
                      apic_json("{\"session\": \"s1\", \"dataset\": \"payroll\"}"));
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = cell("s1", NULL, "'secret' in globals()", 0);
        res = apic_result(r);
        cr_assert_str_eq(lost_cause(res), "privacy_ratchet", "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(result_text(res), "False");
        cJSON_Delete(r);
}

Test(cells, a_daemon_restart_keeps_the_context, .init = setup, .fini = teardown)
{
        cJSON *r;
        const cJSON *res;

        cJSON_Delete(cell("s1", NULL, "w = 1", 0));
        close_daemon();
        open_daemon(false); /* the runner kept the kernel: the new daemon adopts it */
        r = cell("s1", NULL, "w + 1", 0);
        res = apic_result(r);
        cr_assert_str_eq(result_text(res), "2", "%s", cJSON_PrintUnformatted(r));
        cr_assert_null(cJSON_GetObjectItem(res, "state_lost"));
        cr_assert_eq(apic_num(res, "generation"), 1);
        cJSON_Delete(r);
}

/* The child: a daemon that runs a cell which prints, sleeps and prints
 * again; it says when the first line is out and waits to be killed. */
static void child_daemon(int fd)
{
        struct daemon_options opts = {.extra_labels = fixture_labels(), .sockets = true};
        struct sbx_error err = {0};
        struct daemon *cd;
        cJSON *p, *ev;
        int api;

        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test, whatever fails there */
        if (fronts_open(&cfg, &opts, &cd, &err) < 0)
                _exit(1);
        cJSON_Delete(apic_call(cfg.api_socket, tok_a, "run_cell",
                               apic_json("{\"session\": \"s1\", \"code\": \"kept = 7\"}")));
        api = apic_connect(cfg.api_socket);
        p = apic_json(
                "{\"session\": \"s1\", \"stream\": true, "
                "\"code\": \"import time\\nprint('start', flush=True)\\ntime.sleep(4)\\nprint('done')\\n"
                "kept + 1\"}");
        apic_request(api, 1, tok_a, "run_cell", p);
        for (;;) {
                char *line = apic_read_line(api, 60000);
                if (!line)
                        _exit(2);
                ev = apic_json(line);
                free(line);
                if (ev && strcmp(apic_str(ev, "event") ?: "", "output") == 0)
                        break;
                cJSON_Delete(ev);
        }
        (void)!write(fd, "k", 1);
        pause();
        _exit(0);
}

Test(cells, a_cell_outlives_a_sigkilled_daemon_with_its_outputs, .fini = teardown)
{
        int pipefd[2];
        char k;
        pid_t pid;
        cJSON *r;
        const cJSON *res;

        network_default = NULL;
        fixture_config(&cfg);
        open_daemon(true); /* the tokens, then the child serves the same data */
        close_daemon();
        cr_assert_eq(pipe(pipefd), 0);
        pid = fork();
        if (pid < 0)
                cr_assert_fail("fork: %m");
        if (pid == 0)
                child_daemon(pipefd[1]);
        close(pipefd[1]);
        cr_assert_eq(read(pipefd[0], &k, 1), 1, "the child's cell did not start");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);

        open_daemon(false);
        r = apic_call(cfg.api_socket, tok_a, "last_cell", apic_json("{\"session\": \"s1\", \"wait_seconds\": 30}"));
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "complete")), "%s", cJSON_PrintUnformatted(r));
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "adopted")));
        cr_assert_str_eq(apic_str(res, "stdout"), "start\ndone\n", "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(result_text(res), "8");
        cJSON_Delete(r);
        /* and the context lives on in the same generation */
        r = cell("s1", NULL, "kept", 0);
        res = apic_result(r);
        cr_assert_str_eq(result_text(res), "7", "%s", cJSON_PrintUnformatted(r));
        cr_assert_null(cJSON_GetObjectItem(res, "state_lost"));
        cr_assert_eq(apic_num(res, "generation"), 1);
        cJSON_Delete(r);
}

Test(cells, node_context_keeps_state, .init = setup, .fini = teardown)
{
        cJSON *p, *r;
        const cJSON *res;

        p = apic_json("{\"session\": \"s1\", \"context\": \"js\", \"language\": \"node\", \"code\": \"const n = 40\"}");
        r = apic_call(cfg.api_socket, tok_a, "run_cell", p);
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(apic_result(r), "language"), "node");
        cJSON_Delete(r);
        /* top-level await, and const declared again in a later cell */
        r = cell("s1", "js", "const m = await Promise.resolve(2); console.log('sum'); n + m", 0);
        res = apic_result(r);
        cr_assert_str_eq(result_text(res), "42", "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(res, "stdout"), "sum\n");
        cJSON_Delete(r);
        r = cell("s1", "js", "const n = 1; n + m", 0);
        cr_assert_str_eq(result_text(apic_result(r)), "3", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        /* a busy loop is interrupted and the context lives on */
        r = cell("s1", "js", "while (true) {}", 2);
        res = apic_result(r);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "timed_out")), "%s", cJSON_PrintUnformatted(r));
        cr_assert_null(cJSON_GetObjectItem(res, "state_lost"), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = cell("s1", "js", "n", 0);
        cr_assert_str_eq(result_text(apic_result(r)), "1");
        cr_assert_eq(apic_num(apic_result(r), "generation"), 1);
        cJSON_Delete(r);
}

/* Start a streamed run_cell on a connection of its own and return that
 * connection once the cell's "started" event named it (*ret_id). */
static int cell_started(const char *session, const char *code, char ret_id[64])
{
        int fd = apic_connect(cfg.api_socket);
        cJSON *p = cJSON_CreateObject();

        cr_assert_geq(fd, 0);
        cJSON_AddStringToObject(p, "session", session);
        cJSON_AddStringToObject(p, "code", code);
        cJSON_AddTrueToObject(p, "stream");
        apic_request(fd, 1, tok_a, "run_cell", p);
        ret_id[0] = '\0';
        while (!ret_id[0]) {
                char *line = apic_read_line(fd, 120000);
                cr_assert_not_null(line, "no started event");
                cJSON *ev = cJSON_Parse(line);
                free(line);
                cr_assert_null(cJSON_GetObjectItem(ev, "ok"), "the cell ended before it started: %s",
                               cJSON_PrintUnformatted(ev));
                if (strcmp(apic_str(ev, "event"), "started") == 0)
                        snprintf(ret_id, 64, "%s", apic_str(ev, "execution_id"));
                cJSON_Delete(ev);
        }
        return fd;
}

static cJSON *cancel_as(const char *tok, const char *id, bool force)
{
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "session", "s1");
        cJSON_AddStringToObject(p, "execution_id", id);
        if (force)
                cJSON_AddTrueToObject(p, "force");
        return apic_call(cfg.api_socket, tok, "cancel_execution", p);
}

/* An interrupt that lands in ipykernel's own code around a cell (after its
 * execute_input, outside the cell's code) is swallowed by the kernel
 * ("KeyboardInterrupt caught in kernel"), which then sends no execute_reply,
 * only its idle status. The bridge used to wait for that reply until the
 * grace killed the kernel with its state. The test puts the kernel in that
 * window for sure: a handler of its own announces the cell, then waits
 * outside any cell code (the next cell gets the kernel's handler back). */
Test(cells, an_interrupt_the_kernel_swallows_still_ends_the_cell, .init = setup, .fini = teardown)
{
        static const char patch[] =
                "k = get_ipython().kernel\n"
                "orig = k.shell_handlers['execute_request']\n"
                "def held(stream, ident, parent):\n"
                "    import time\n"
                "    k.shell_handlers['execute_request'] = orig\n"
                "    k._publish_execute_input(parent['content']['code'], parent, k.execution_count)\n"
                "    while True:\n"
                "        time.sleep(0.05)\n"
                "k.shell_handlers['execute_request'] = held\n"
                "w = 7";
        char id[64];
        const cJSON *res;
        cJSON *r;
        int fd;

        r = cell("s1", NULL, patch, 0);
        cr_assert_str_eq(apic_str(apic_result(r), "status"), "ok", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        fd = cell_started("s1", "w = 8", id);
        r = cancel_as(tok_a, id, false);
        res = apic_result(r);
        cr_assert_str_eq(apic_str(res, "status"), "cancelled", "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(cJSON_GetObjectItem(res, "error"), "name"), "KeyboardInterrupt", "%s",
                         cJSON_PrintUnformatted(r));
        cr_assert_null(cJSON_GetObjectItem(res, "state_lost"), "the kernel was not killed: %s",
                       cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        cJSON_Delete(apic_reply(fd, 30000, NULL));
        close(fd);
        r = cell("s1", NULL, "w", 0);
        cr_assert_str_eq(result_text(apic_result(r)), "7", "state kept, the cell's code never ran: %s",
                         cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(apic_result(r), "generation"), 1);
        cJSON_Delete(r);
}

Test(cells, cancel_execution_interrupts_a_cell, .init = setup, .fini = teardown)
{
        char id[64];
        cJSON *r, *reply;
        const cJSON *res;
        int fd;

        cJSON_Delete(cell("s1", NULL, "w = 7", 0));
        fd = cell_started("s1", "import time\nwhile True:\n    time.sleep(0.05)", id);
        cr_assert_eq(strlen(id), 36, "%s", id);

        /* another user's cancel does not reach it */
        r = cancel_as(tok_b, id, false);
        cr_assert_str_eq(apic_code(r), "not_found", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        r = cancel_as(tok_a, id, false);
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(res, "execution_id"), id);
        cr_assert_str_eq(apic_str(res, "status"), "cancelled", "%s", cJSON_PrintUnformatted(r));
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "cancelled")));
        cr_assert_str_eq(apic_str(cJSON_GetObjectItem(res, "error"), "name"), "KeyboardInterrupt");
        cr_assert_null(cJSON_GetObjectItem(res, "state_lost"), "an interrupt keeps the state");
        cr_assert_null(cJSON_GetObjectItem(res, "timed_out"));
        cJSON_Delete(r);
        /* the run_cell call itself ends with the same result */
        reply = apic_reply(fd, 30000, NULL);
        cr_assert_str_eq(apic_str(apic_result(reply), "status"), "cancelled", "%s", cJSON_PrintUnformatted(reply));
        cr_assert_str_eq(apic_str(apic_result(reply), "execution_id"), id);
        cJSON_Delete(reply);
        close(fd);

        r = cell("s1", NULL, "w", 0);
        cr_assert_str_eq(result_text(apic_result(r)), "7", "state kept: %s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(apic_result(r), "generation"), 1);
        cJSON_Delete(r);
        /* an ended cell: already_finished */
        r = cancel_as(tok_a, id, false);
        cr_assert_str_eq(apic_code(r), "already_finished", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);

        /* force: no interrupt, no grace; the loss is reported as cancelled */
        fd = cell_started("s1",
                          "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n"
                          "    time.sleep(0.05)",
                          id);
        r = cancel_as(tok_a, id, true);
        res = apic_result(r);
        cr_assert_str_eq(apic_str(res, "status"), "cancelled", "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(lost_cause(res), "cancelled", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        cJSON_Delete(apic_reply(fd, 30000, NULL));
        close(fd);
        r = cell("s1", NULL, "'w' in globals()", 0);
        res = apic_result(r);
        cr_assert_str_eq(lost_cause(res), "cancelled", "%s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(res, "generation"), 2);
        cJSON_Delete(r);
}

/* get_execution of a cell from offset on, all of it: *ret_len bytes. */
static char *page_all(const char *id, const char *stream, uint64_t total, size_t *ret_len)
{
        char key[32], *all = malloc(total + 1);
        uint64_t off = 0;

        cr_assert_not_null(all);
        snprintf(key, sizeof(key), "%s_offset", stream);
        while (off < total) {
                cJSON *p = cJSON_CreateObject(), *r;
                const cJSON *res, *data;
                unsigned char *chunk = NULL;
                size_t n = 0;
                cJSON_AddStringToObject(p, "session", "s1");
                cJSON_AddStringToObject(p, "execution_id", id);
                cJSON_AddStringToObject(p, "encoding", "base64");
                cJSON_AddNumberToObject(p, key, (double)off);
                r = apic_call(cfg.api_socket, tok_a, "get_execution", p);
                res = apic_result(r);
                cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
                cr_assert_str_eq(apic_str(res, "state"), "completed");
                cr_assert_eq(apic_num(res, key), (double)off);
                data = cJSON_GetObjectItem(res, stream);
                cr_assert_eq(base64_decode(data->valuestring, strlen(data->valuestring), &chunk, &n), 0);
                cr_assert_gt(n, 0, "a page short of the total at %llu", (unsigned long long)off);
                cr_assert_leq(off + n, total);
                memcpy(all + off, chunk, n);
                off += n;
                free(chunk);
                cJSON_Delete(r);
        }
        all[off] = '\0';
        *ret_len = (size_t)off;
        return all;
}

/* A small cell's output stays in the daemon's memory (issue 34: a file per
 * cell, made and later unlinked, was a sixth of the daemon's CPU for a warm
 * 1+1) and reads back by offset all the same, after the cell ended. */
Test(cells, small_outputs_read_back_without_a_file, .init = setup, .fini = teardown)
{
        cJSON *r = cell("s1", NULL, "print('hi')\n1+1", 0), *p, *g;
        const cJSON *res = apic_result(r), *gr;
        char id[40], path[SBX_PATH_MAX + 64];
        struct stat st;

        cr_assert_str_eq(result_text(res), "2");
        snprintf(id, sizeof(id), "%s", apic_str(res, "execution_id"));
        cr_assert_eq(strlen(id), 36, "%s", cJSON_PrintUnformatted(r));
        for (int k = 0; k < 3; k++) {
                static const char *const names[] = {"stdout", "stderr", "outputs"};
                snprintf(path, sizeof(path), "%s/cells/%s.%s", cfg.data_dir, id, names[k]);
                cr_assert_neq(stat(path, &st), 0, "no spool file for a small stream: %s", path);
        }
        p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "session", "s1");
        cJSON_AddStringToObject(p, "execution_id", id);
        cJSON_AddNumberToObject(p, "stdout_offset", 0);
        cJSON_AddNumberToObject(p, "outputs_offset", 0);
        g = apic_call(cfg.api_socket, tok_a, "get_execution", p);
        gr = apic_result(g);
        cr_assert_not_null(gr, "%s", cJSON_PrintUnformatted(g));
        cr_assert_str_eq(apic_str(gr, "stdout"), "hi\n");
        cr_assert_not_null(strstr(apic_str(gr, "outputs"), "\"text/plain\":\"2\""), "%s", cJSON_PrintUnformatted(g));
        cJSON_Delete(g);
        /* from an offset inside the stream, as a reader paging it */
        p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "session", "s1");
        cJSON_AddStringToObject(p, "execution_id", id);
        cJSON_AddNumberToObject(p, "stdout_offset", 1);
        g = apic_call(cfg.api_socket, tok_a, "get_execution", p);
        cr_assert_str_eq(apic_str(apic_result(g), "stdout"), "i\n", "%s", cJSON_PrintUnformatted(g));
        cJSON_Delete(g);
        cJSON_Delete(r);
}

Test(cells, large_outputs_come_back_by_reference, .init = setup, .fini = teardown)
{
        cJSON *r;
        const cJSON *res, *o, *ref = NULL, *img_ref = NULL;
        const char *id;
        char *all;
        size_t n;

        /* 20 MiB of text, past CELLS_OUTPUT_CAP_BYTES (4 MiB) */
        r = cell("s1", NULL,
                 "import sys\nsys.stdout.write('0123456789abcdef' * (20 << 16))\nprint('end', file=sys.stderr)", 120);
        res = apic_result(r);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "truncated")));
        cr_assert_null(cJSON_GetObjectItem(res, "output_dropped"), "nothing lost");
        cr_assert_eq(apic_num(res, "stdout_bytes"), 20 << 20);
        cr_assert_str_eq(apic_str(res, "stderr"), "end\n");
        cr_assert(strstr(apic_str(res, "stdout"), "bytes omitted"));
        cJSON_ArrayForEach(o, cJSON_GetObjectItem(res, "outputs"))
                if (cJSON_GetObjectItem(o, "by_reference"))
                        ref = cJSON_GetObjectItem(o, "by_reference");
        cr_assert_not_null(ref, "%.2000s", cJSON_PrintUnformatted(res));
        cr_assert_str_eq(apic_str(ref, "stream"), "stdout");
        id = apic_str(res, "execution_id");
        all = page_all(id, "stdout", 20 << 20, &n);
        cr_assert_eq(n, 20 << 20);
        for (size_t i = 0; i < n; i++)
                if (all[i] != "0123456789abcdef"[i % 16])
                        cr_assert_fail("byte %zu is %c", i, all[i]);
        free(all);
        cJSON_Delete(r);

        /* a 6 MiB image (8 MiB of base64): by reference, whole in the outputs stream */
        r = cell("s1", NULL,
                 "import os, hashlib\nfrom IPython.display import Image, display\nb = os.urandom(6 << 20)\n"
                 "display(Image(data=b, format='png'))\nprint(hashlib.sha256(b).hexdigest())",
                 120);
        res = apic_result(r);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "truncated")), "%.2000s", cJSON_PrintUnformatted(res));
        cJSON_ArrayForEach(o, cJSON_GetObjectItem(res, "outputs"))
                if (cJSON_GetObjectItem(o, "by_reference"))
                        img_ref = o;
        cr_assert_not_null(img_ref, "%.2000s", cJSON_PrintUnformatted(res));
        cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(img_ref, "omitted"), 0)->valuestring, "image/png");
        cr_assert(strstr(apic_str(cJSON_GetObjectItem(img_ref, "data"), "text/plain"), "Image"),
                  "the small values stay");
        {
                const cJSON *br = cJSON_GetObjectItem(img_ref, "by_reference");
                char want[65] = "", got[65];
                unsigned char *png = NULL;
                size_t pn = 0;
                cJSON *line;
                cr_assert_str_eq(apic_str(br, "stream"), "outputs");
                cr_assert_eq(apic_num(br, "offset"), 0);
                all = page_all(apic_str(res, "execution_id"), "outputs", (uint64_t)apic_num(res, "outputs_bytes"), &n);
                cr_assert_eq(n, (size_t)apic_num(br, "bytes"));
                line = cJSON_Parse(all);
                cr_assert_not_null(line);
                const char *b64 = apic_str(cJSON_GetObjectItem(line, "data"), "image/png");
                cr_assert_eq(base64_decode(b64, strlen(b64), &png, &pn), 0);
                cr_assert_eq(pn, 6 << 20);
                sha256_hex(png, pn, got);
                sscanf(apic_str(res, "stdout"), "%64s", want);
                cr_assert_str_eq(got, want, "the image comes back whole");
                free(png);
                cJSON_Delete(line);
                free(all);
        }
        cJSON_Delete(r);
}

static bool pool_full(void)
{
        struct pool_stats ps;
        pool_stats(d->pool, &ps);
        return ps.ready == (size_t)ps.size;
}

static void setup_pool(void)
{
        pool_size = 1;
        open_daemon(true);
}

static void setup_pool_no_prestart(void)
{
        pool_size = 1;
        prestart = "none";
        open_daemon(true);
}

/* The first cell of a session that claimed a warm slot: its kernel, started
 * ahead in the slot, is the session's default context, generation 1. */
Test(cells, a_warm_slot_starts_the_default_context_ahead, .init = setup_pool, .fini = teardown)
{
        cJSON *r, *e;
        const cJSON *res;
        char uid_cell[32];

        cr_assert(TESTENV_WAIT_UNTIL(pool_full(), 120000), "the pool filled");
        r = apic_call(cfg.api_socket, tok_a, "list_contexts", apic_json("{\"session\": \"warm\"}"));
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(apic_result(r), "contexts")), 0,
                     "no context before the session: %s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = cell("warm", NULL, "import os\nstr(os.getuid()) + ' ' + os.getcwd()", 0);
        res = apic_result(r);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "prestarted")), "%s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(res, "generation"), 1);
        cr_assert_eq(apic_num(res, "execution_count"), 1);
        cr_assert_null(cJSON_GetObjectItem(res, "state_lost"));
        snprintf(uid_cell, sizeof(uid_cell), "%s", result_text(res));
        cJSON_Delete(r);
        /* the session's uid and workspace, as an exec sees them */
        e = apic_call(cfg.api_socket, tok_a, "exec",
                      apic_json("{\"session\": \"warm\", \"command\": \"echo \\\"'$(id -u) $PWD'\\\"\"}"));
        cr_assert_not_null(apic_result(e), "%s", cJSON_PrintUnformatted(e));
        cr_assert(strncmp(apic_str(apic_result(e), "stdout"), uid_cell, strlen(uid_cell)) == 0, "%s vs %s", uid_cell,
                  cJSON_PrintUnformatted(e));
        cJSON_Delete(e);
        /* the state lasts, in the same generation */
        cJSON_Delete(cell("warm", NULL, "k = 3", 0));
        r = cell("warm", NULL, "k * 14", 0);
        cr_assert_str_eq(result_text(apic_result(r)), "42");
        cr_assert_eq(apic_num(apic_result(r), "generation"), 1);
        cJSON_Delete(r);
        r = apic_call(cfg.api_socket, tok_a, "list_contexts", apic_json("{\"session\": \"warm\"}"));
        res = cJSON_GetArrayItem(cJSON_GetObjectItem(apic_result(r), "contexts"), 0);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "prestarted")), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        pool_size = 0;
}

Test(cells, a_warm_slot_without_prestart_starts_the_context_on_demand, .init = setup_pool_no_prestart, .fini = teardown)
{
        cJSON *r;

        cr_assert(TESTENV_WAIT_UNTIL(pool_full(), 120000), "the pool filled");
        r = cell("warm", NULL, "1 + 1", 0);
        cr_assert_null(cJSON_GetObjectItem(apic_result(r), "prestarted"), "%s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(apic_result(r), "generation"), 1);
        cJSON_Delete(r);
        pool_size = 0;
        prestart = NULL;
}

/* What the platform writes (the kernel's runtime files, caches, pip's user
 * site made ahead) stays out of the workspace: a new session that claims a
 * slot with a kernel started ahead finds it empty, and so after a cell. */
Test(cells, a_warm_slot_leaves_the_workspace_empty, .init = setup_pool, .fini = teardown)
{
        const char *ls = "{\"session\": \"warm\", \"command\": \"ls -A /workspace\"}";
        cJSON *r;

        cr_assert(TESTENV_WAIT_UNTIL(pool_full(), 120000), "the pool filled");
        pool_size = 0;
        r = apic_call(cfg.api_socket, tok_a, "exec", apic_json(ls));
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = cell("warm", NULL, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n1 + 1", 0);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(apic_result(r), "prestarted")), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = apic_call(cfg.api_socket, tok_a, "exec", apic_json(ls));
        cr_assert_str_eq(apic_str(apic_result(r), "stdout"), "", "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
}

/* A new session whose first cell is node: the python kernel its slot
 * started ahead gives way, nothing is reported lost. */
Test(cells, a_warm_slot_gives_way_to_a_node_context, .init = setup_pool, .fini = teardown)
{
        cJSON *r;

        cr_assert(TESTENV_WAIT_UNTIL(pool_full(), 120000), "the pool filled");
        r = apic_call(cfg.api_socket, tok_a, "run_cell",
                      apic_json("{\"session\": \"warm\", \"language\": \"node\", \"code\": \"40 + 2\"}"));
        cr_assert_str_eq(result_text(apic_result(r)), "42", "%s", cJSON_PrintUnformatted(r));
        cr_assert_str_eq(apic_str(apic_result(r), "language"), "node");
        cr_assert_null(cJSON_GetObjectItem(apic_result(r), "state_lost"));
        cr_assert_null(cJSON_GetObjectItem(apic_result(r), "prestarted"));
        cr_assert_eq(apic_num(apic_result(r), "generation"), 1);
        cJSON_Delete(r);
        pool_size = 0;
        prestart = NULL;
}

/* A PEP 503 index on the host's loopback, one python process: it builds a
 * wheel by hand (a zip with METADATA, WHEEL and RECORD), serves the
 * directory with http.server on 127.0.0.1 and prints its port. */
static const char index_py[] =
        "import base64, hashlib, http.server, os, sys, zipfile\n"
        "root = sys.argv[1]\n"
        "files = {'sbxdemo/__init__.py': b'ANSWER = 42\\n',\n"
        "         'sbxdemo-1.0.dist-info/METADATA': b'Metadata-Version: 2.1\\nName: sbxdemo\\nVersion: 1.0\\n',\n"
        "         'sbxdemo-1.0.dist-info/WHEEL': b'Wheel-Version: 1.0\\nGenerator: hand\\nRoot-Is-Purelib: "
        "true\\nTag: py3-none-any\\n'}\n"
        "rec = ''.join('%s,sha256=%s,%d\\n' % (n, base64.urlsafe_b64encode(hashlib.sha256(b).digest())"
        ".rstrip(b'=').decode(), len(b)) for n, b in files.items())\n"
        "files['sbxdemo-1.0.dist-info/RECORD'] = (rec + 'sbxdemo-1.0.dist-info/RECORD,,\\n').encode()\n"
        "os.makedirs(root + '/simple/sbxdemo')\n"
        "with zipfile.ZipFile(root + '/simple/sbxdemo/sbxdemo-1.0-py3-none-any.whl', 'w') as z:\n"
        "    for n, b in files.items(): z.writestr(n, b)\n"
        "open(root + '/simple/index.html', 'w').write('<a href=\"sbxdemo/\">sbxdemo</a>')\n"
        "open(root + '/simple/sbxdemo/index.html', 'w').write("
        "'<a href=\"sbxdemo-1.0-py3-none-any.whl\">sbxdemo-1.0-py3-none-any.whl</a>')\n"
        "os.chdir(root)\n"
        "h = http.server.ThreadingHTTPServer(('127.0.0.1', 0), http.server.SimpleHTTPRequestHandler)\n"
        "print(h.server_address[1], flush=True)\n"
        "h.serve_forever()\n";

static pid_t index_pid = -1;
static char index_dir[SBX_PATH_MAX];

static int index_start(void)
{
        char script[SBX_PATH_MAX + 16], root[SBX_PATH_MAX + 16];
        int pfd[2], port = 0;
        FILE *f;

        snprintf(index_dir, sizeof(index_dir), "/tmp/sbx-pipindex-XXXXXX");
        cr_assert_not_null(mkdtemp(index_dir));
        snprintf(script, sizeof(script), "%s/index.py", index_dir);
        snprintf(root, sizeof(root), "%s/www", index_dir);
        f = fopen(script, "w");
        cr_assert_not_null(f);
        fputs(index_py, f);
        fclose(f);
        cr_assert_eq(pipe(pfd), 0);
        index_pid = fork();
        cr_assert_geq(index_pid, 0);
        if (index_pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                dup2(pfd[1], 1);
                close(pfd[0]);
                execlp("python3", "python3", script, root, (char *)NULL);
                _exit(127);
        }
        close(pfd[1]);
        f = fdopen(pfd[0], "r");
        cr_assert(f && fscanf(f, "%d", &port) == 1 && port > 0, "the index did not start");
        fclose(f);
        return port;
}

static void index_stop(void)
{
        char cmd[SBX_PATH_MAX + 16];

        if (index_pid > 0) {
                kill(index_pid, SIGKILL);
                waitpid(index_pid, NULL, 0);
                index_pid = -1;
        }
        if (index_dir[0]) {
                snprintf(cmd, sizeof(cmd), "rm -rf '%s'", index_dir);
                (void)system(cmd);
                index_dir[0] = '\0';
        }
}

static void setup_egress(void)
{
        struct sbx_error err = {0};

        fixture_config(&cfg);
        cr_assert_eq(config_set(&cfg, "egress.allow", "pypi.test:*", &err), 0, "%s", err.msg);
        cr_assert_eq(config_set(&cfg, "egress.resolve", "pypi.test=127.0.0.1", &err), 0, "%s", err.msg);
        cr_assert_eq(config_set(&cfg, "egress.allow_private", "127.0.0.1/32", &err), 0, "%s", err.msg);
        keep_cfg = true;
        open_daemon(true);
}

static void teardown_egress(void)
{
        index_stop();
        teardown();
}

/* %pip install from an index on the host's loopback, reached through the
 * sealed container's egress proxy (pypi.test resolves to 127.0.0.1 in the
 * daemon, allowed), into the session user's site; the next cell imports it. */
Test(cells, pip_install_from_a_loopback_index_through_the_egress_proxy, .init = setup_egress, .fini = teardown_egress)
{
        char code[256];
        cJSON *r;
        const cJSON *res;
        int port = index_start();

        snprintf(code, sizeof(code),
                 "%%pip install --index-url http://pypi.test:%d/simple --trusted-host pypi.test sbxdemo", port);
        r = cell("s1", NULL, code, 120);
        res = apic_result(r);
        cr_assert(strstr(apic_str(res, "stdout"), "Successfully installed sbxdemo-1.0"), "%s",
                  cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = cell("s1", NULL, "import sbxdemo\nsbxdemo.ANSWER", 0);
        res = apic_result(r);
        cr_assert_str_eq(result_text(res), "42", "%s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(res, "generation"), 1, "the same kernel imports it");
        cJSON_Delete(r);
}

/* A figure of the daemon's memory (this process: the daemon runs in it)
 * from /proc/self/status, kB: RssAnon, VmRSS, VmHWM. */
static long status_kb(const char *key)
{
        FILE *f = fopen("/proc/self/status", "r");
        char line[256];
        size_t n = strlen(key);
        long kb = -1;

        cr_assert_not_null(f);
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, key, n) == 0 && line[n] == ':' && sscanf(line + n + 1, "%ld", &kb) == 1)
                        break;
        fclose(f);
        return kb;
}

/* Issue 34: a context that displayed one large output (a 30 MiB bridge
 * line) keeps nothing of it once the cell has ended: 4 contexts that each
 * did held about 146 MB of the daemon's memory for as long as they lived
 * (the buffer each grew for its largest line, and what the allocator kept
 * of the copies). */
Test(cells, idle_contexts_keep_no_large_output, .init = setup, .fini = teardown)
{
        static const char *const where[][2] = {{"s1", "a"}, {"s1", "b"}, {"s2", "a"}, {"s2", "b"}};
        const int n = (int)(sizeof(where) / sizeof(where[0]));
        long before, after, rss, peak;
        cJSON *r;

        for (int i = 0; i < n; i++) /* the contexts and their kernels first: not what is measured */
                cJSON_Delete(cell(where[i][0], where[i][1], "1", 120));
        cJSON_Delete(cell("s1", "a", "'warm' * 1000", 120));
        before = status_kb("RssAnon");
        {
                FILE *f = fopen("/proc/self/clear_refs", "w"); /* "5": VmHWM starts again from VmRSS */
                cr_assert_not_null(f);
                fputs("5", f);
                fclose(f);
        }
        rss = status_kb("VmRSS");
        for (int i = 0; i < n; i++) {
                r = cell(where[i][0], where[i][1],
                         "from IPython.display import display\n"
                         "display({'text/plain': 'x' * (30 << 20)}, raw=True)\n",
                         180);
                const cJSON *res = apic_result(r);
                cr_assert_str_eq(apic_str(res, "status"), "ok", "%.2000s", cJSON_PrintUnformatted(r));
                cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "truncated")), "by reference");
                cr_assert_null(cJSON_GetObjectItem(res, "output_dropped"), "kept whole");
                cr_assert_gt(apic_num(res, "outputs_bytes"), 30 << 20);
                cJSON_Delete(r);
        }
        after = status_kb("RssAnon");
        peak = status_kb("VmHWM") - rss;
        cr_log_info("daemon RssAnon %ld kB before, %ld kB after %d idle contexts each displayed 30 MiB; peak +%ld kB",
                    before, after, n, peak);
        /* a context's idle cost is its last result (small here): was 38 MB each */
        cr_assert_lt(after - before, 8 * 1024, "the idle contexts hold %ld kB more", after - before);
        /* one line in flight: two copies while it is parsed, one after (was four: line, tree, bundle, print) */
        cr_assert_lt(peak, 80 * 1024, "a 30 MiB line in flight cost %ld kB", peak);
}

/* Issue 34: a cell that prints more than a GiB in a tight loop leaves its
 * kernel alive (it was OOM-killed at 0.5-1 GiB, holding all of it: the
 * kernel buffered what it printed until the cell's end, and its queues grew
 * while the bridge was behind), and the result says what was not kept. */
Test(cells, an_output_flood_leaves_the_kernel_alive, .init = setup, .fini = teardown)
{
        cJSON *r;
        const cJSON *res;

        cJSON_Delete(cell("s1", NULL, "z = 1", 120));
        r = cell("s1", NULL,
                 "import sys\ns = 'y' * 65535 + '\\n'\nfor i in range(17 * 1024): sys.stdout.write(s)\nprint('end')",
                 600);
        res = apic_result(r);
        cr_assert_str_eq(apic_str(res, "status"), "ok", "status %s, error %.1000s, stderr %.1000s, state_lost %.200s",
                         apic_str(res, "status"), cJSON_PrintUnformatted(cJSON_GetObjectItem(res, "error")),
                         apic_str(res, "stderr"), cJSON_PrintUnformatted(cJSON_GetObjectItem(res, "state_lost")));
        cr_assert_null(cJSON_GetObjectItem(res, "state_lost"));
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "truncated")));
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(res, "output_dropped")), "what was not kept is reported");
        cr_assert_geq(apic_num(res, "stdout_bytes"), cfg.exec_output_cap_bytes, "kept up to the spool's cap");
        cr_assert_not_null(strstr(apic_str(res, "stderr"), "characters of stdout dropped in the kernel"),
                           "the kernel says how much it dropped: %s", apic_str(res, "stderr"));
        cJSON_Delete(r);
        r = cell("s1", NULL, "z", 120);
        res = apic_result(r);
        cr_assert_null(cJSON_GetObjectItem(res, "state_lost"), "%s", cJSON_PrintUnformatted(r));
        cr_assert_eq(apic_num(res, "generation"), 1);
        cr_assert_str_eq(result_text(res), "1");
        cJSON_Delete(r);
}

/* ---- a cell sees its session's environment, and its secrets masked (issue 37) ---- */

#define CELL_SECRET "sbx-cell-secret-value-5c2e81f0"

static void setup_pool_secrets(void)
{
        char dir[SBX_PATH_MAX];
        FILE *f;

        fixture_config(&cfg);
        keep_cfg = true;
        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        /* beside data_dir, never in it */
        snprintf(cfg.secrets_key_file, sizeof(cfg.secrets_key_file), "%s/secrets.key", dirname(dir));
        f = fopen(cfg.secrets_key_file, "w");
        cr_assert_not_null(f);
        fputs("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n", f);
        fclose(f);
        cr_assert_eq(chmod(cfg.secrets_key_file, 0600), 0);
        pool_size = 1;
        open_daemon(true);
}

static char *cell_stdout(const cJSON *res)
{
        const cJSON *o;
        size_t n = 0;
        char *s = calloc(1, 1);

        cJSON_ArrayForEach(o, cJSON_GetObjectItem(res, "outputs")) {
                const char *t = apic_str(o, "type");
                if (strcmp(t, "stream") == 0 || strcmp(t, "error") == 0) {
                        const char *txt = strcmp(t, "stream") == 0 ? apic_str(o, "text") : apic_str(o, "value");
                        s = realloc(s, n + strlen(txt) + 1);
                        memcpy(s + n, txt, strlen(txt) + 1);
                        n += strlen(txt);
                }
        }
        return s;
}

/* The text of a cell's stream outputs of one name, in order. */
static char *cell_stream_text(const cJSON *res, const char *name)
{
        const cJSON *o;
        size_t n = 0;
        char *s = calloc(1, 1);

        cJSON_ArrayForEach(o, cJSON_GetObjectItem(res, "outputs")) {
                const char *type = apic_str(o, "type"), *nm = apic_str(o, "name"), *txt = apic_str(o, "text");
                if (!type || !nm || !txt || strcmp(type, "stream") != 0 || strcmp(nm, name) != 0)
                        continue;
                s = realloc(s, n + strlen(txt) + 1);
                memcpy(s + n, txt, strlen(txt) + 1);
                n += strlen(txt);
        }
        return s;
}

/* The warm slot's kernel started before the session had a secret: its
 * first cell still sees the placeholder and the CA variables an exec of the
 * session sees, and the value, printed or raised, comes back masked; a
 * node context (started on demand) too. */
Test(cells, a_cell_sees_the_session_env_and_its_secrets_masked, .init = setup_pool_secrets, .fini = teardown)
{
        cJSON *r, *e;
        char *out, *text, want[256], ph[64];

        cr_assert(TESTENV_WAIT_UNTIL(pool_full(), 120000), "the pool filled");
        r = apic_call(cfg.api_socket, tok_conn, "set_secret",
                      apic_json("{\"name\":\"GH\",\"value\":\"" CELL_SECRET "\",\"hosts\":[\"api.test\"]}"));
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = apic_call(cfg.api_socket, tok_conn, "create_session",
                      apic_json("{\"session\":\"sec\",\"secrets\":[\"GH\"]}"));
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        e = apic_call(cfg.api_socket, tok_a, "exec", apic_json("{\"session\":\"sec\",\"command\":\"printf %s $GH\"}"));
        cr_assert_not_null(apic_result(e), "%s", cJSON_PrintUnformatted(e));
        snprintf(ph, sizeof(ph), "%s", apic_str(apic_result(e), "stdout"));
        cJSON_Delete(e);
        cr_assert_eq(strncmp(ph, "sbx_ph_", 7), 0, "%s", ph);

        r = cell("sec", NULL,
                 "import os\nprint(os.environ.get('GH'), os.environ.get('SSL_CERT_FILE'))\n"
                 "v = 'sbx-cell-secret-' + 'value-5c2e81f0'\nprint('v=' + v)\nv",
                 0);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(apic_result(r), "prestarted")), "%s", cJSON_PrintUnformatted(r));
        text = cJSON_PrintUnformatted(r);
        cr_assert_null(strstr(text, CELL_SECRET), "the value reached the cell's result: %s", text);
        free(text);
        out = cell_stdout(apic_result(r));
        snprintf(want, sizeof(want), "%s /run/sandboxd/ca-bundle.pem\nv=%s\n", ph, ph);
        cr_assert_str_eq(out, want);
        free(out);
        snprintf(want, sizeof(want), "'%s'", ph);
        cr_assert_str_eq(result_text(apic_result(r)), want);
        cJSON_Delete(r);

        /* a subprocess of the kernel inherits it; an error's text is masked too */
        r = cell("sec", NULL,
                 "import subprocess\nprint(subprocess.run(['sh', '-c', 'echo $GH'], capture_output=True, "
                 "text=True).stdout, end='')\nraise ValueError(v)",
                 0);
        out = cell_stdout(apic_result(r));
        snprintf(want, sizeof(want), "%s\n%s", ph, ph);
        cr_assert_str_eq(out, want);
        free(out);
        text = cJSON_PrintUnformatted(r);
        cr_assert_null(strstr(text, CELL_SECRET), "the value reached the cell's result: %s", text);
        free(text);
        cJSON_Delete(r);

        /* a value printed in pieces, each flushed (a stream message, a protocol line of its own), is masked
         * across them: on stdout, on stderr, and cut inside a multi-byte character's neighbourhood */
        r = cell("sec", NULL,
                 "import sys\nfor p in ['a:sbx-cell-secret-', 'val', 'ue-5c2e81f0', ':\u00e9\\n']:\n"
                 "    sys.stdout.write(p); sys.stdout.flush()\n"
                 "for p in ['sbx-cell-secr', 'et-value-5c2e81f0\\n']:\n"
                 "    sys.stderr.write(p); sys.stderr.flush()\n"
                 "sys.stdout.write('sbx-cell-secret-value-5c2e81'); sys.stdout.flush()",
                 0);
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        text = cJSON_PrintUnformatted(r);
        cr_assert_null(strstr(text, CELL_SECRET), "the value reached the cell's result: %s", text);
        free(text);
        /* per stream: the kernel may interleave stdout and stderr messages in another order */
        out = cell_stream_text(apic_result(r), "stdout");
        snprintf(want, sizeof(want), "a:%s:\u00e9\nsbx-cell-secret-value-5c2e81", ph);
        cr_assert_str_eq(out, want, "%s", out);
        free(out);
        out = cell_stream_text(apic_result(r), "stderr");
        snprintf(want, sizeof(want), "%s\n", ph);
        cr_assert_str_eq(out, want, "%s", out);
        free(out);
        cJSON_Delete(r);

        /* a node context, started on demand */
        {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "session", "sec");
                cJSON_AddStringToObject(p, "context", "js");
                cJSON_AddStringToObject(p, "language", "node");
                cJSON_AddStringToObject(p, "code",
                                        "console.log(process.env.GH + ' sbx-cell-secret-' + "
                                        "'value-5c2e81f0')");
                r = apic_call(cfg.api_socket, tok_a, "run_cell", p);
        }
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        out = cell_stdout(apic_result(r));
        snprintf(want, sizeof(want), "%s %s\n", ph, ph);
        cr_assert_str_eq(out, want);
        free(out);
        cJSON_Delete(r);
        cJSON_Delete(
                apic_call(cfg.api_socket, tok_a, "destroy_session", apic_json("{\"session\":\"sec\",\"purge\":true}")));
        keep_cfg = false;
        pool_size = 0;
}
