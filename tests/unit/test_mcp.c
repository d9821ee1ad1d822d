/* test_mcp.c — the MCP adapter's protocol core without a daemon: framing and
 * line caps, JSON-RPC validation and error codes, the legacy handshake for
 * every version, the 2026-07-28 envelope and server/discover, tools/list and
 * its schemas, argument validation, and — against a small fake API socket
 * (the one fault source a real daemon cannot script: exact timing of output
 * and of a cancel) — progress notifications and cancellation.
 *
 * Over 800 lines: one suite, because its cases share the adapter harness
 * and the fake API socket; each case is short.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "sandboxd/mcp.h"
#include "sandboxd/utf8.h"

/* ---- an output capture ---- */

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t out_cond = PTHREAD_COND_INITIALIZER;
static char **out_lines;
static size_t out_n, out_taken;

/* Runs on worker threads too: no asserts here, next_msg checks the framing. */
static int capture(const char *line, size_t len, void *ud)
{
        (void)ud;
        pthread_mutex_lock(&out_lock);
        out_lines = realloc(out_lines, (out_n + 1) * sizeof(*out_lines));
        out_lines[out_n] = strndup(line, len);
        out_n++;
        pthread_cond_broadcast(&out_cond);
        pthread_mutex_unlock(&out_lock);
        return 0;
}

static void capture_reset(void)
{
        pthread_mutex_lock(&out_lock);
        for (size_t i = 0; i < out_n; i++)
                free(out_lines[i]);
        free(out_lines);
        out_lines = NULL;
        out_n = out_taken = 0;
        pthread_mutex_unlock(&out_lock);
}

/* The next output message, waiting up to timeout_ms; NULL if none came. */
static cJSON *next_msg_wait(int timeout_ms)
{
        struct timespec until;
        cJSON *j = NULL;

        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&out_lock);
        while (out_taken == out_n)
                if (pthread_cond_timedwait(&out_cond, &out_lock, &until) != 0)
                        break;
        if (out_taken < out_n) {
                const char *line = out_lines[out_taken];
                size_t len = strlen(line);
                cr_assert(len > 0 && line[len - 1] == '\n', "every output line ends with a newline");
                cr_assert_null(memchr(line, '\n', len - 1), "no newline inside a message");
                j = cJSON_Parse(line);
                cr_assert_not_null(j, "output is JSON: %.200s", line);
                out_taken++;
        }
        pthread_mutex_unlock(&out_lock);
        return j;
}

static cJSON *next_msg(void)
{
        return next_msg_wait(0);
}

static size_t pending(void)
{
        size_t n;
        pthread_mutex_lock(&out_lock);
        n = out_n - out_taken;
        pthread_mutex_unlock(&out_lock);
        return n;
}

static struct mcp *m;

static struct mcp *adapter(const char *socket, const char *token)
{
        struct mcp_options o = {
                .api_socket = socket,
                .token = token,
                .session = "unit",
                .write = capture,
                .poll_wait_s = 1,
        };
        struct sbx_error err = {0};
        struct mcp *a = NULL;

        cr_assert_eq(mcp_new(&o, &a, &err), 0, "%s", err.msg);
        return a;
}

static void setup(void)
{
        capture_reset();
        m = adapter("/nonexistent/sandboxd-api.sock", "");
}

static void teardown(void)
{
        if (m) {
                mcp_drain(m, 10000);
                mcp_free(m);
                m = NULL;
        }
        capture_reset();
}

TestSuite(mcp, .init = setup, .fini = teardown);

static void send_line(const char *line)
{
        mcp_handle_line(m, line, strlen(line));
}

/* Send one line, expect exactly one reply, return it. */
static cJSON *ask(const char *line)
{
        cJSON *r;
        send_line(line);
        r = next_msg();
        cr_assert_not_null(r, "a reply to %s", line);
        cr_assert_eq(pending(), 0, "exactly one reply to %s", line);
        return r;
}

static int error_code(const cJSON *r)
{
        const cJSON *c = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "error"), "code");
        cr_assert(cJSON_IsNumber(c), "an error reply");
        return c->valueint;
}

static void assert_error(const char *line, int code, bool null_id)
{
        cJSON *r = ask(line);
        cr_assert_str_eq(cJSON_GetObjectItem(r, "jsonrpc")->valuestring, "2.0");
        cr_assert_eq(error_code(r), code, "code for %s", line);
        cr_assert(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "error"), "message")));
        if (null_id)
                cr_assert(cJSON_IsNull(cJSON_GetObjectItem(r, "id")), "id null for %s", line);
        else
                cr_assert(!cJSON_IsNull(cJSON_GetObjectItem(r, "id")), "id echoed for %s", line);
        cJSON_Delete(r);
}

static const cJSON *result_of(const cJSON *r)
{
        const cJSON *res = cJSON_GetObjectItem(r, "result");
        if (!cJSON_IsObject(res)) {
                /* formatted only on failure: --full-stats sends every message, and results can be megabytes */
                char *text = cJSON_PrintUnformatted(r);
                cr_assert_fail("a result, not %.300s", text);
        }
        return res;
}

#define ENVELOPE(v)                                                                                                    \
        "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"" v                                                  \
        "\","                                                                                                          \
        "\"io.modelcontextprotocol/clientCapabilities\":{},"                                                           \
        "\"io.modelcontextprotocol/clientInfo\":{\"name\":\"unit\",\"version\":\"1\"}}"

/* ---- lifecycle ---- */

Test(mcp, initialize_echoes_every_legacy_version)
{
        static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

        for (size_t i = 0; i < ELEMENTSOF(versions); i++) {
                char line[512];
                snprintf(line, sizeof(line),
                         "{\"jsonrpc\":\"2.0\",\"id\":%zu,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                         "\"%s\",\"capabilities\":{},\"clientInfo\":{\"name\":\"unit\",\"version\":\"1\"}}}",
                         i + 1, versions[i]);
                cJSON *r = ask(line);
                const cJSON *res = result_of(r);
                cr_assert_eq(cJSON_GetObjectItem(r, "id")->valueint, (int)i + 1);
                cr_assert_str_eq(cJSON_GetObjectItem(res, "protocolVersion")->valuestring, versions[i]);
                const cJSON *caps = cJSON_GetObjectItem(res, "capabilities");
                cr_assert(cJSON_IsObject(cJSON_GetObjectItem(caps, "tools")));
                cr_assert(cJSON_IsObject(cJSON_GetObjectItem(caps, "logging")));
                cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(res, "serverInfo"), "name")->valuestring,
                                 "sandboxd-mcp");
                cr_assert_null(cJSON_GetObjectItem(res, "resultType"), "no resultType in the legacy era");
                cJSON_Delete(r);
        }
        /* the initialized notification gets no answer */
        send_line("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
        cr_assert_eq(pending(), 0);
}

Test(mcp, initialize_with_unknown_version_offers_the_latest)
{
        cJSON *r =
                ask("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                    "\"2023-01-01\",\"capabilities\":{},\"clientInfo\":{\"name\":\"x\",\"version\":\"0\"}}}");
        cr_assert_str_eq(cJSON_GetObjectItem(result_of(r), "protocolVersion")->valuestring, "2025-11-25");
        cr_assert_str_eq(cJSON_GetObjectItem(r, "id")->valuestring, "a");
        cJSON_Delete(r);
        /* an initialize naming the stateless version without its envelope is a legacy handshake too */
        r = ask("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                "\"2026-07-28\",\"capabilities\":{}}}");
        cr_assert_str_eq(cJSON_GetObjectItem(result_of(r), "protocolVersion")->valuestring, "2025-11-25");
        cJSON_Delete(r);
        /* and so is one whose envelope names a legacy version */
        r = ask("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                "\"2025-06-18\",\"capabilities\":{}," ENVELOPE("2025-06-18") "}}");
        cr_assert_str_eq(cJSON_GetObjectItem(result_of(r), "protocolVersion")->valuestring, "2025-06-18");
        cJSON_Delete(r);
}

Test(mcp, initialize_bad_params)
{
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}}", MCP_INVALID_PARAMS,
                     false);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}", MCP_INVALID_PARAMS, false);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":7}}",
                     MCP_INVALID_PARAMS, false);
        assert_error(
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                "\"2025-11-25\",\"capabilities\":[]}}",
                MCP_INVALID_PARAMS, false);
}

Test(mcp, ping_and_set_level)
{
        cJSON *r = ask("{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}");
        cr_assert_eq(cJSON_GetArraySize(result_of(r)), 0);
        cJSON_Delete(r);
        r = ask("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"warning\"}}");
        result_of(r);
        cJSON_Delete(r);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"loud\"}}",
                     MCP_INVALID_PARAMS, false);
}

/* ---- 2026-07-28 ---- */

Test(mcp, discover)
{
        cJSON *r = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{" ENVELOPE(
                "2026-07-28") "}}");
        const cJSON *res = result_of(r), *v = cJSON_GetObjectItem(res, "supportedVersions");
        cr_assert(cJSON_IsArray(v));
        cr_assert_eq(cJSON_GetArraySize(v), 1);
        cr_assert_str_eq(cJSON_GetArrayItem(v, 0)->valuestring, "2026-07-28");
        cr_assert(cJSON_IsObject(cJSON_GetObjectItem(cJSON_GetObjectItem(res, "capabilities"), "tools")));
        cr_assert_str_eq(cJSON_GetObjectItem(res, "resultType")->valuestring, "complete");
        cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(res, "ttlMs")));
        cr_assert_str_eq(cJSON_GetObjectItem(res, "cacheScope")->valuestring, "public");
        const cJSON *meta = cJSON_GetObjectItem(res, "_meta");
        const cJSON *info = cJSON_GetObjectItem(meta, "io.modelcontextprotocol/serverInfo");
        cr_assert_str_eq(cJSON_GetObjectItem(info, "name")->valuestring, "sandboxd-mcp");
        cJSON_Delete(r);
}

#define TASKS_ENVELOPE                                                                                                 \
        "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","                                       \
        "\"io.modelcontextprotocol/clientCapabilities\":{\"extensions\":{\"io.modelcontextprotocol/tasks\":{}}}}"

Test(mcp, tasks_extension_negotiation)
{
        cJSON *r = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{" ENVELOPE(
                "2026-07-28") "}}");
        const cJSON *ext = cJSON_GetObjectItem(cJSON_GetObjectItem(result_of(r), "capabilities"), "extensions");
        cr_assert(cJSON_IsObject(cJSON_GetObjectItem(ext, "io.modelcontextprotocol/tasks")));
        cJSON_Delete(r);
        /* the legacy handshake advertises no extension: 2025-11-25 its own tasks, older versions none */
        r = ask("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                "\"2025-11-25\"}}");
        const cJSON *caps = cJSON_GetObjectItem(result_of(r), "capabilities");
        cr_assert_null(cJSON_GetObjectItem(caps, "extensions"));
        cr_assert(cJSON_IsObject(cJSON_GetObjectItem(
                cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(caps, "tasks"), "requests"), "tools"),
                "call")));
        cJSON_Delete(r);
        /* 2025-11-25: only exec and run_code run as tasks, and params.task is an object */
        assert_error(
                "{\"jsonrpc\":\"2.0\",\"id\":20,\"method\":\"tools/call\",\"params\":{\"name\":\"read_file\","
                "\"arguments\":{\"path\":\"x\"},\"task\":{}}}",
                MCP_METHOD_NOT_FOUND, false);
        assert_error(
                "{\"jsonrpc\":\"2.0\",\"id\":21,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
                "\"arguments\":{\"command\":\"true\"},\"task\":5}}",
                MCP_INVALID_PARAMS, false);
        r = ask("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                "\"2025-06-18\"}}");
        cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(result_of(r), "capabilities"), "tasks"));
        cJSON_Delete(r);
        /* a tasks/ method without the extension declared: -32021 naming it */
        r = ask("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tasks/get\",\"params\":{\"taskId\":\"ab\"," ENVELOPE(
                "2026-07-28") "}}");
        cr_assert_eq(error_code(r), MCP_MISSING_CLIENT_CAPABILITY);
        const cJSON *data = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "error"), "data");
        cr_assert(cJSON_IsObject(
                cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(data, "requiredCapabilities"), "extensions"),
                                    "io.modelcontextprotocol/tasks")));
        cJSON_Delete(r);
        /* no taskId, or not a string: invalid params; the legacy era has no tasks/ methods */
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tasks/get\",\"params\":{" TASKS_ENVELOPE "}}",
                     MCP_INVALID_PARAMS, false);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tasks/cancel\",\"params\":{\"taskId\":7," TASKS_ENVELOPE
                     "}}",
                     MCP_INVALID_PARAMS, false);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tasks/get\",\"params\":{\"taskId\":\"ab\"}}",
                     MCP_METHOD_NOT_FOUND, false);
        /* a well-formed one with no daemon behind: an internal error, answered from the worker */
        send_line("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tasks/get\",\"params\":{\"taskId\":\"ab\"," TASKS_ENVELOPE
                  "}}");
        r = next_msg_wait(10000);
        cr_assert_not_null(r);
        cr_assert_eq(error_code(r), MCP_INTERNAL_ERROR);
        cr_assert_eq(cJSON_GetObjectItem(r, "id")->valueint, 7);
        cJSON_Delete(r);
}

Test(mcp, unsupported_stateless_version)
{
        cJSON *r =
                ask("{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/list\",\"params\":{" ENVELOPE("2099-01-01") "}}");
        cr_assert_eq(error_code(r), MCP_UNSUPPORTED_PROTOCOL_VERSION);
        const cJSON *data = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "error"), "data");
        cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(data, "supported"), 0)->valuestring, "2026-07-28");
        cr_assert_str_eq(cJSON_GetObjectItem(data, "requested")->valuestring, "2099-01-01");
        cr_assert_eq(cJSON_GetObjectItem(r, "id")->valueint, 9);
        cJSON_Delete(r);
        /* a legacy version named in the envelope is not one we speak statelessly */
        r = ask("{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"server/discover\",\"params\":{" ENVELOPE(
                "2025-11-25") "}}");
        cr_assert_eq(error_code(r), MCP_UNSUPPORTED_PROTOCOL_VERSION);
        cJSON_Delete(r);
}

Test(mcp, stateless_envelope_validation)
{
        /* clientCapabilities missing */
        assert_error(
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
                "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"}}}",
                MCP_INVALID_PARAMS, false);
        /* version not a string */
        assert_error(
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
                "\"io.modelcontextprotocol/protocolVersion\":1,"
                "\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
                MCP_INVALID_PARAMS, false);
        /* clientInfo malformed */
        assert_error(
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
                "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                "\"io.modelcontextprotocol/clientCapabilities\":{},"
                "\"io.modelcontextprotocol/clientInfo\":\"me\"}}}",
                MCP_INVALID_PARAMS, false);
        /* a bad log level */
        assert_error(
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
                "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                "\"io.modelcontextprotocol/clientCapabilities\":{},"
                "\"io.modelcontextprotocol/logLevel\":\"chatty\"}}}",
                MCP_INVALID_PARAMS, false);
        /* _meta not an object */
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"_meta\":3}}",
                     MCP_INVALID_PARAMS, false);
        /* server/discover without the envelope */
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{}}", MCP_INVALID_PARAMS,
                     false);
}

Test(mcp, stateless_era_has_no_handshake_methods)
{
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{" ENVELOPE("2026-07-28") "}}",
                     MCP_METHOD_NOT_FOUND, false);
        assert_error(
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"logging/setLevel\",\"params\":{"
                "\"level\":\"info\"," ENVELOPE("2026-07-28") "}}",
                MCP_METHOD_NOT_FOUND, false);
        assert_error(
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                "\"2026-07-28\"," ENVELOPE("2026-07-28") "}}",
                MCP_METHOD_NOT_FOUND, false);
}

/* ---- tools/list ---- */

static const char *const expected_tools[] = {
        "exec",
        "run_code",
        "run_cell",
        "list_contexts",
        "restart_context",
        "delete_context",
        "get_variables",
        "interrupt_cell",
        "last_cell",
        "get_execution",
        "send_stdin",
        "resize_terminal",
        "cancel_execution",
        "list_executions",
        "write_file",
        "read_file",
        "list_files",
        "start_service",
        "stop_service",
        "list_services",
        "service_logs",
        "session_info",
        /* agent tools (issue 17) */
        "run_tests",
        "list_scripts",
        "clear_scripts",
        "create_session",
        "destroy_session",
        "pause_session",
        "resume_session",
        "list_sessions",
        "snapshot_session",
        "list_snapshots",
        "delete_snapshot",
        "restore_session",
        "fork_session",
};

static const cJSON *find_tool(const cJSON *tools, const char *name)
{
        const cJSON *t;
        cJSON_ArrayForEach(t, tools)
                if (strcmp(cJSON_GetObjectItem(t, "name")->valuestring, name) == 0)
                        return t;
        return NULL;
}

static const cJSON *schema_props(const cJSON *tools, const char *tool, const char *which)
{
        return cJSON_GetObjectItem(cJSON_GetObjectItem(find_tool(tools, tool), which), "properties");
}

Test(mcp, tools_list_has_every_tool_with_schemas)
{
        cJSON *r = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}");
        const cJSON *tools = cJSON_GetObjectItem(result_of(r), "tools");

        cr_assert_eq(cJSON_GetArraySize(tools), (int)ELEMENTSOF(expected_tools));
        cr_assert_eq(mcp_tool_count(), ELEMENTSOF(expected_tools));
        for (size_t i = 0; i < ELEMENTSOF(expected_tools); i++) {
                const cJSON *t = find_tool(tools, expected_tools[i]);
                cr_assert_not_null(t, "tool %s listed", expected_tools[i]);
                cr_assert_str_eq(mcp_tool_name(i), expected_tools[i]);
                cr_assert(cJSON_IsString(cJSON_GetObjectItem(t, "description")));
                cr_assert(cJSON_IsString(cJSON_GetObjectItem(t, "title")));
                const cJSON *in = cJSON_GetObjectItem(t, "inputSchema");
                const cJSON *out = cJSON_GetObjectItem(t, "outputSchema");
                cr_assert_str_eq(cJSON_GetObjectItem(in, "type")->valuestring, "object", "%s in", expected_tools[i]);
                cr_assert_str_eq(cJSON_GetObjectItem(out, "type")->valuestring, "object", "%s out", expected_tools[i]);
                /* the user-level tools (issue 17) act on the user, not on one session */
                bool user_level = strcmp(expected_tools[i], "list_scripts") == 0 ||
                                  strcmp(expected_tools[i], "clear_scripts") == 0 ||
                                  strcmp(expected_tools[i], "list_sessions") == 0 ||
                                  strcmp(expected_tools[i], "delete_snapshot") == 0;
                cr_assert(user_level ||
                                  cJSON_IsObject(cJSON_GetObjectItem(cJSON_GetObjectItem(in, "properties"), "session")),
                          "%s takes session", expected_tools[i]);
                cr_assert(!user_level || !cJSON_GetObjectItem(cJSON_GetObjectItem(in, "properties"), "session"),
                          "%s takes no session", expected_tools[i]);
                cr_assert(cJSON_IsObject(cJSON_GetObjectItem(t, "annotations")));
        }
        /* the argument names the tools are documented with */
        static const struct {
                const char *tool;
                const char *args;
        } args[] = {
                {"exec", "command timeout_seconds workdir env stdin background"},
                {"run_code", "language code timeout_seconds background"},
                {"get_execution", "execution_id wait stdout_offset stderr_offset"},
                {"send_stdin", "execution_id data eof"},
                {"cancel_execution", "execution_id force"},
                {"resize_terminal", "execution_id rows cols"},
                {"exec", "tty rows cols"},
                {"list_executions", "states limit"},
                {"write_file", "path content encoding"},
                {"read_file", "path offset length"},
                {"list_files", "path"},
                {"start_service", "name command workdir"},
                {"stop_service", "name"},
                {"service_logs", "name tail_lines"},
        };
        for (size_t i = 0; i < ELEMENTSOF(args); i++) {
                const cJSON *props = schema_props(tools, args[i].tool, "inputSchema");
                char buf[128], *save = NULL;
                snprintf(buf, sizeof(buf), "%s", args[i].args);
                for (char *a = strtok_r(buf, " ", &save); a; a = strtok_r(NULL, " ", &save))
                        cr_assert_not_null(cJSON_GetObjectItem(props, a), "%s takes %s", args[i].tool, a);
        }
        /* execution results and session_info carry the documented fields */
        const cJSON *eo = schema_props(tools, "exec", "outputSchema");
        static const char *const exec_fields[] = {"execution_id", "state",      "exit_code",    "cause",
                                                  "stdout",       "stderr",     "stdout_bytes", "stderr_bytes",
                                                  "truncated",    "duration_ms"};
        for (size_t i = 0; i < ELEMENTSOF(exec_fields); i++)
                cr_assert_not_null(cJSON_GetObjectItem(eo, exec_fields[i]), "exec output has %s", exec_fields[i]);
        const cJSON *so = schema_props(tools, "session_info", "outputSchema");
        static const char *const session_fields[] = {"state", "network_mode", "private", "ports"};
        for (size_t i = 0; i < ELEMENTSOF(session_fields); i++)
                cr_assert_not_null(cJSON_GetObjectItem(so, session_fields[i]), "session_info: %s", session_fields[i]);
        cJSON_Delete(r);
}

Test(mcp, tools_list_follows_the_negotiated_version)
{
        cJSON *r =
                ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                    "\"2024-11-05\",\"capabilities\":{}}}");
        cJSON_Delete(r);
        r = ask("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{}}");
        const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(result_of(r), "tools"), 0);
        cr_assert(cJSON_IsObject(cJSON_GetObjectItem(t, "inputSchema")));
        cr_assert_null(cJSON_GetObjectItem(t, "outputSchema"), "2024-11-05 has no outputSchema");
        cr_assert_null(cJSON_GetObjectItem(t, "annotations"), "2024-11-05 has no annotations");
        cJSON_Delete(r);

        /* a stateless request is governed by its own envelope, whatever was negotiated */
        r = ask("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":{" ENVELOPE("2026-07-28") "}}");
        const cJSON *res = result_of(r);
        t = cJSON_GetArrayItem(cJSON_GetObjectItem(res, "tools"), 0);
        cr_assert(cJSON_IsObject(cJSON_GetObjectItem(t, "outputSchema")));
        cr_assert_str_eq(cJSON_GetObjectItem(res, "resultType")->valuestring, "complete");
        cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(res, "ttlMs")));
        cr_assert(cJSON_IsString(cJSON_GetObjectItem(res, "cacheScope")));
        cJSON_Delete(r);
}

/* ---- malformed input ---- */

Test(mcp, malformed_lines)
{
        assert_error("not json", MCP_PARSE_ERROR, true);
        assert_error("{", MCP_PARSE_ERROR, true);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"} trailing", MCP_PARSE_ERROR, true);
        assert_error("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", MCP_INVALID_REQUEST, true);
        assert_error("[]", MCP_INVALID_REQUEST, true);
        assert_error("42", MCP_INVALID_REQUEST, true);
        assert_error("\"ping\"", MCP_INVALID_REQUEST, true);
        assert_error("null", MCP_INVALID_REQUEST, true);
        assert_error("{\"id\":1,\"method\":\"ping\"}", MCP_INVALID_REQUEST, false);
        assert_error("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", MCP_INVALID_REQUEST, false);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}", MCP_INVALID_REQUEST, false);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1}", MCP_INVALID_REQUEST, false);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":{\"a\":1},\"method\":\"ping\"}", MCP_INVALID_REQUEST, true);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", MCP_INVALID_REQUEST, true);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", MCP_INVALID_REQUEST, true);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"ping\"}", MCP_INVALID_REQUEST, true);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[1]}", MCP_INVALID_PARAMS, false);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":\"x\"}", MCP_INVALID_PARAMS, false);

        /* invalid UTF-8 is refused (strict strings), in a message that stays valid UTF-8 */
        cJSON *r = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}");
        cr_assert_eq(error_code(r), MCP_INVALID_PARAMS);
        const char *msg = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "error"), "message")->valuestring;
        cr_assert(utf8_is_valid(msg, strlen(msg)));
        cJSON_Delete(r);

        /* a NUL inside the line */
        static const char nul[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\0x";
        mcp_handle_line(m, nul, sizeof(nul) - 1);
        r = next_msg();
        cr_assert_eq(error_code(r), MCP_PARSE_ERROR);
        cJSON_Delete(r);

        /* deep nesting is refused, not recursed into */
        char *deep = malloc(200010);
        memset(deep, '[', 100000);
        memset(deep + 100000, ']', 100000);
        deep[200000] = '\0';
        mcp_handle_line(m, deep, 200000);
        free(deep);
        r = next_msg();
        cr_assert_not_null(r);
        cJSON_Delete(r);

        /* blank lines and CRLF */
        send_line("");
        send_line("   ");
        send_line("\r");
        cr_assert_eq(pending(), 0);
        r = ask("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}\r");
        result_of(r);
        cJSON_Delete(r);
}

Test(mcp, unknown_methods_and_notifications)
{
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/subscribe\"}", MCP_METHOD_NOT_FOUND, false);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"prompts/list\",\"params\":{}}",
                     MCP_METHOD_NOT_FOUND, false);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"completion/complete\",\"params\":{" ENVELOPE(
                             "2026-07-28") "}}",
                     MCP_METHOD_NOT_FOUND, false);
        /* notifications never get answers, known or not, well-formed or not */
        send_line("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/whatever\",\"params\":{}}");
        send_line("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":77}}");
        send_line("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":7}");
        send_line("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\"}");
        /* responses from the client are not requests */
        send_line("{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}");
        send_line("{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":1,\"message\":\"x\"}}");
        cr_assert_eq(pending(), 0);
}

/* Resources: advertised, listed (empty), a template, and reads of uris
 * that are not an execution's output refused as not found, in both eras. */
Test(mcp, resources_without_a_daemon)
{
        static const char *const bad[] = {
                "file:///etc/passwd",
                "sandboxd://sessions/../executions/00000000-0000-0000-0000-000000000000/stdout",
                "sandboxd://sessions/s/executions/x;y/stdout",
                "sandboxd://sessions/s/executions/0a-1/stdin",
                "sandboxd://sessions/s/executions/0a-1/stdout?offset=-1",
                "sandboxd://sessions/s/executions/0a-1/stdout?offset=1x",
                "sandboxd://sessions/s/executions/0a-1/stdout?session=other",
        };
        cJSON *r =
                ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                    "\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"unit\",\"version\":\"1\"}}}");
        cr_assert(cJSON_IsObject(cJSON_GetObjectItem(cJSON_GetObjectItem(result_of(r), "capabilities"), "resources")));
        cJSON_Delete(r);
        r = ask("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"resources/list\"}");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(result_of(r), "resources")), 0);
        cJSON_Delete(r);
        r = ask("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"resources/templates/list\"}");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(result_of(r), "resourceTemplates")), 1);
        cJSON_Delete(r);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char line[512];
                snprintf(line, sizeof(line),
                         "{\"jsonrpc\":\"2.0\",\"id\":%zu,\"method\":\"resources/read\",\"params\":{\"uri\":\"%s\"}}",
                         10 + i, bad[i]);
                assert_error(line, MCP_RESOURCE_NOT_FOUND, false);
        }
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":30,\"method\":\"resources/read\",\"params\":{\"uri\":5}}",
                     MCP_INVALID_PARAMS, false);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":31,\"method\":\"resources/read\",\"params\":{\"uri\":\"x\"," ENVELOPE(
                             "2026-07-28") "}}",
                     MCP_RESOURCE_NOT_FOUND, false);
}

/* ---- tools/call without a daemon ---- */

static cJSON *call_and_wait(const char *line)
{
        cJSON *r;
        send_line(line);
        cr_assert_eq(mcp_drain(m, 10000), 0);
        r = next_msg();
        cr_assert_not_null(r, "a reply to %s", line);
        return r;
}

static const char *tool_text(const cJSON *r)
{
        const cJSON *c = cJSON_GetObjectItem(result_of(r), "content");
        cr_assert_eq(cJSON_GetArraySize(c), 1);
        cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(c, 0), "type")->valuestring, "text");
        return cJSON_GetObjectItem(cJSON_GetArrayItem(c, 0), "text")->valuestring;
}

static bool is_error(const cJSON *r)
{
        return cJSON_IsTrue(cJSON_GetObjectItem(result_of(r), "isError"));
}

Test(mcp, tools_call_protocol_errors)
{
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"rm_rf\"}}",
                     MCP_INVALID_PARAMS, false);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{}}", MCP_INVALID_PARAMS,
                     false);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\"}", MCP_INVALID_PARAMS, false);
        assert_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":1}}",
                     MCP_INVALID_PARAMS, false);
        assert_error(
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
                "\"arguments\":[\"ls\"]}}",
                MCP_INVALID_PARAMS, false);
}

Test(mcp, tools_call_argument_errors_are_tool_errors)
{
        static const struct {
                const char *args;
                const char *needle;
        } cases[] = {
                {"{\"argv\":[]}", "arguments.argv: must have at least 1"},
                {"{\"argv\":[\"ls\",7]}", "arguments.argv[1]: expected string"},
                {"{\"command\":5}", "arguments.command: expected string"},
                {"{\"command\":\"\"}", "arguments.command: must be at least 1"},
                {"{\"command\":\"ls\",\"timeout_seconds\":0}", "timeout_seconds: must be at least 1"},
                {"{\"command\":\"ls\",\"timeout_seconds\":1.5}", "timeout_seconds: expected integer"},
                {"{\"command\":\"ls\",\"env\":{\"A\":1}}", "arguments.env.A: expected string"},
                {"{\"command\":\"ls\",\"bogus\":1}", "arguments.bogus: is not a known property"},
                /* the schema's pattern is enforced, not only advertised */
                {"{\"command\":\"ls\",\"session\":\"../etc\"}", "arguments.session: must match the pattern"},
                {"{\"command\":\"ls\",\"idempotency_key\":\"a b\"}", "arguments.idempotency_key: must match"},
                {"{\"command\":\"ls\",\"idempotency_key\":\"\"}", "arguments.idempotency_key: must match"},
                {"{\"command\":\"ls\",\"session\":\"..\"}", "session must be"},
                {"{\"command\":\"ls\",\"session\":7}", "arguments.session: expected string"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char line[512];
                snprintf(line, sizeof(line),
                         "{\"jsonrpc\":\"2.0\",\"id\":%zu,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
                         "\"arguments\":%s}}",
                         i, cases[i].args);
                cJSON *r = ask(line);
                cr_assert(is_error(r), "%s is a tool error", cases[i].args);
                cr_assert_not_null(strstr(tool_text(r), cases[i].needle), "'%s' mentions '%s'", tool_text(r),
                                   cases[i].needle);
                cr_assert_null(cJSON_GetObjectItem(result_of(r), "structuredContent"));
                cJSON_Delete(r);
        }
        cJSON *r =
                ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"run_code\","
                    "\"arguments\":{\"language\":\"cobol\",\"code\":\"x\"}}}");
        cr_assert(is_error(r));
        cr_assert_not_null(strstr(tool_text(r), "must be one of"));
        cJSON_Delete(r);
}

Test(mcp, tools_call_without_token_or_daemon)
{
        cJSON *r = call_and_wait(
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
                "\"session_info\",\"arguments\":{}}}");
        cr_assert(is_error(r));
        cr_assert_not_null(strstr(tool_text(r), "no API token"), "%s", tool_text(r));
        cJSON_Delete(r);

        mcp_free(m);
        m = adapter("/nonexistent/sandboxd-api.sock", "sbx_test");
        r = call_and_wait(
                "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
                "\"arguments\":{\"command\":\"true\"}}}");
        cr_assert(is_error(r));
        cr_assert_not_null(strstr(tool_text(r), "not reachable"), "%s", tool_text(r));
        cr_assert_eq(cJSON_GetObjectItem(r, "id")->valueint, 2);
        cJSON_Delete(r);
}

/* ---- framing ---- */

Test(mcp, feed_splits_lines_across_chunks)
{
        const char *two =
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n"
                "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\r\n\n";
        for (const char *p = two; *p; p++)
                mcp_feed(m, p, 1);
        cJSON *a = next_msg(), *b = next_msg();
        cr_assert_eq(cJSON_GetObjectItem(a, "id")->valueint, 1);
        cr_assert_eq(cJSON_GetObjectItem(b, "id")->valueint, 2);
        cr_assert_eq(pending(), 0);
        cJSON_Delete(a);
        cJSON_Delete(b);
        /* an unterminated last line is still handled at end of input */
        const char *last = "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}";
        mcp_feed(m, last, strlen(last));
        cr_assert_eq(pending(), 0);
        mcp_feed_eof(m);
        a = next_msg();
        cr_assert_eq(cJSON_GetObjectItem(a, "id")->valueint, 3);
        cJSON_Delete(a);
}

Test(mcp, overlong_line_is_one_parse_error)
{
        const char *head = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"pad\":\"";
        const char *tail = "\"}}";
        char chunk[65536];
        size_t sent;

        /* exactly MCP_MAX_LINE bytes: accepted */
        memset(chunk, 'a', sizeof(chunk));
        mcp_feed(m, head, strlen(head));
        sent = strlen(head);
        while (sent < MCP_MAX_LINE - strlen(tail)) {
                size_t n = MCP_MAX_LINE - strlen(tail) - sent;
                n = n < sizeof(chunk) ? n : sizeof(chunk);
                mcp_feed(m, chunk, n);
                sent += n;
        }
        mcp_feed(m, tail, strlen(tail));
        mcp_feed(m, "\n", 1);
        cJSON *r = next_msg();
        cr_assert_eq(cJSON_GetObjectItem(r, "id")->valueint, 1, "a line of exactly the cap is served");
        result_of(r);
        cJSON_Delete(r);

        /* one byte more: a parse error as soon as the cap is crossed, then the
         * rest of the line is skipped and the next line served */
        mcp_feed(m, head, strlen(head));
        sent = strlen(head);
        while (sent <= MCP_MAX_LINE) {
                mcp_feed(m, chunk, sizeof(chunk));
                sent += sizeof(chunk);
        }
        r = next_msg();
        cr_assert_not_null(r, "the error comes before the line ends");
        cr_assert_eq(error_code(r), MCP_PARSE_ERROR);
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(r, "id")));
        cJSON_Delete(r);
        for (int i = 0; i < 64; i++)
                mcp_feed(m, chunk, sizeof(chunk)); /* still the same line: no more errors */
        mcp_feed(m, tail, strlen(tail));
        const char *next = "\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n";
        mcp_feed(m, next, strlen(next));
        r = next_msg();
        cr_assert_eq(cJSON_GetObjectItem(r, "id")->valueint, 2);
        cJSON_Delete(r);
        cr_assert_eq(pending(), 0);
}

/* ---- the schema subset ---- */

Test(mcp_schema, validate_and_conform)
{
        cJSON *schema = cJSON_Parse(
                "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":1},"
                "\"b\":{\"type\":[\"string\",\"null\"]},\"c\":{\"type\":\"array\",\"items\":"
                "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":"
                "[\"x\"]}},\"d\":{\"type\":\"boolean\"}},\"required\":[\"a\",\"b\",\"d\"]}");
        char msg[256];
        cJSON *v = cJSON_Parse("{\"a\":2,\"b\":null,\"d\":true,\"c\":[{\"x\":1}]}");

        cr_assert(mcp_schema_validate(schema, v, "v", msg, sizeof(msg)), "%s", msg);
        cJSON_Delete(v);
        v = cJSON_Parse("{\"a\":0,\"b\":null,\"d\":true}");
        cr_assert_not(mcp_schema_validate(schema, v, "v", msg, sizeof(msg)));
        cr_assert_str_eq(msg, "v.a: must be at least 1");
        cJSON_Delete(v);

        v = cJSON_Parse("{\"a\":\"two\",\"c\":[{\"x\":\"no\"},{\"x\":3},5],\"extra\":1}");
        cr_assert(mcp_schema_conform(schema, v));
        cr_assert(mcp_schema_validate(schema, v, "v", msg, sizeof(msg)), "conformed: %s", msg);
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(v, "b")), "a nullable required field becomes null");
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(v, "d")));
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(v, "c")), 2, "the bare 5 is dropped");
        cr_assert_not_null(cJSON_GetObjectItem(v, "extra"), "unknown fields pass through");
        cJSON_Delete(v);
        cJSON_Delete(schema);
}

/* anyOf branches (one type each) and pattern: enforced and conformed to. */
Test(mcp_schema, any_of_and_pattern)
{
        cJSON *schema = cJSON_Parse(
                "{\"type\":\"object\",\"properties\":{\"n\":{\"anyOf\":[{\"type\":\"integer\",\"maximum\":60},"
                "{\"type\":\"boolean\"}]},\"s\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]},"
                "\"k\":{\"type\":\"string\",\"pattern\":\"^[A-Za-z0-9._:-]{1,8}$\"}},\"required\":[\"s\"]}");
        char msg[256], longk[5000];
        cJSON *v;

        v = cJSON_Parse("{\"n\":true,\"s\":null,\"k\":\"a.b:c-1\"}");
        cr_assert(mcp_schema_validate(schema, v, "v", msg, sizeof(msg)), "%s", msg);
        cJSON_Delete(v);
        v = cJSON_Parse("{\"n\":5,\"s\":\"x\"}");
        cr_assert(mcp_schema_validate(schema, v, "v", msg, sizeof(msg)), "%s", msg);
        cJSON_Delete(v);
        v = cJSON_Parse("{\"n\":61,\"s\":null}");
        cr_assert_not(mcp_schema_validate(schema, v, "v", msg, sizeof(msg)));
        cr_assert_str_eq(msg, "v.n: must be at most 60", "the branch of the value's type explains");
        cJSON_Delete(v);
        v = cJSON_Parse("{\"n\":\"x\",\"s\":null}");
        cr_assert_not(mcp_schema_validate(schema, v, "v", msg, sizeof(msg)));
        cr_assert_str_eq(msg, "v.n: expected integer or boolean, got a string");
        cJSON_Delete(v);
        v = cJSON_Parse("{\"s\":7}");
        cr_assert_not(mcp_schema_validate(schema, v, "v", msg, sizeof(msg)));
        cJSON_Delete(v);
        static const char *const bad[] = {"a b", "", "123456789", "ab/", "x\ny"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                v = cJSON_CreateObject();
                cJSON_AddNullToObject(v, "s");
                cJSON_AddStringToObject(v, "k", bad[i]);
                cr_assert_not(mcp_schema_validate(schema, v, "v", msg, sizeof(msg)), "'%s' must not match", bad[i]);
                cr_assert_not_null(strstr(msg, "must match the pattern"), "%s", msg);
                cJSON_Delete(v);
        }
        /* a long input is refused without running the regex on it */
        memset(longk, 'a', sizeof(longk) - 1);
        longk[sizeof(longk) - 1] = '\0';
        v = cJSON_CreateObject();
        cJSON_AddNullToObject(v, "s");
        cJSON_AddStringToObject(v, "k", longk);
        cr_assert_not(mcp_schema_validate(schema, v, "v", msg, sizeof(msg)));
        cJSON_Delete(v);

        /* conform: a value of no branch goes; a missing nullable one becomes null */
        v = cJSON_Parse("{\"n\":\"x\"}");
        cr_assert(mcp_schema_conform(schema, v));
        cr_assert_null(cJSON_GetObjectItem(v, "n"));
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(v, "s")));
        cJSON_Delete(v);
        cJSON_Delete(schema);
}

/* ---- against a fake API socket: progress and cancellation ---- */

struct fake {
        char dir[PATH_MAX];
        char path[PATH_MAX];
        int lfd;
        pthread_t thread;
        pthread_mutex_t lock;
        bool cancelled; /* cancel_execution arrived */
        int polls;      /* get_execution requests */
        bool hold;      /* hold get_execution until cancelled */
        int bad;        /* requests that were not what the adapter should send */
        char last_token[128];
};

static struct fake fk;

static void fake_reply(int fd, const cJSON *id, cJSON *result)
{
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "id", cJSON_Duplicate(id, true));
        cJSON_AddTrueToObject(o, "ok");
        cJSON_AddItemToObject(o, "result", result);
        char *s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        (void)!write(fd, s, strlen(s));
        (void)!write(fd, "\n", 1);
        free(s);
}

static cJSON *fake_exec(const char *state, const char *out_b64, uint64_t off, uint64_t next)
{
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "execution_id", "ex-1");
        cJSON_AddStringToObject(r, "state", state);
        if (strcmp(state, "completed") == 0)
                cJSON_AddNumberToObject(r, "exit_code", 3);
        else
                cJSON_AddNullToObject(r, "exit_code");
        cJSON_AddStringToObject(r, "stdout", out_b64 ? out_b64 : "head...tail");
        cJSON_AddStringToObject(r, "stderr", "");
        cJSON_AddNumberToObject(r, "stdout_bytes", (double)next);
        cJSON_AddNumberToObject(r, "stderr_bytes", 0);
        cJSON_AddFalseToObject(r, "truncated");
        cJSON_AddNumberToObject(r, "duration_ms", 5);
        if (out_b64) {
                cJSON_AddNumberToObject(r, "stdout_offset", (double)off);
                cJSON_AddNumberToObject(r, "stdout_next_offset", (double)next);
                cJSON_AddNumberToObject(r, "stderr_offset", 0);
                cJSON_AddNumberToObject(r, "stderr_next_offset", 0);
        }
        return r;
}

/* One connection: answers until the peer goes. The script: exec starts
 * "ex-1"; polls with offsets return "h\xc3" (a cut é), then "\xa9llo", then
 * completion with exit 3; unless hold, where polls block until a cancel. */
static void *fake_conn(void *p)
{
        int fd = (int)(intptr_t)p;
        static __thread char buf[65536];
        size_t len = 0;

        for (;;) {
                ssize_t k = read(fd, buf + len, sizeof(buf) - len - 1);
                if (k <= 0)
                        break;
                len += (size_t)k;
                char *nl;
                while ((nl = memchr(buf, '\n', len))) {
                        *nl = '\0';
                        cJSON *q = cJSON_Parse(buf);
                        memmove(buf, nl + 1, len - (size_t)(nl + 1 - buf));
                        len -= (size_t)(nl + 1 - buf);
                        if (!q)
                                continue;
                        const cJSON *id = cJSON_GetObjectItem(q, "id");
                        const char *method = cJSON_GetObjectItem(q, "method")->valuestring;
                        const cJSON *params = cJSON_GetObjectItem(q, "params");
                        pthread_mutex_lock(&fk.lock);
                        snprintf(fk.last_token, sizeof(fk.last_token), "%s",
                                 cJSON_GetObjectItem(q, "token")->valuestring);
                        pthread_mutex_unlock(&fk.lock);
                        if (strcmp(method, "exec") == 0) {
                                const cJSON *s = cJSON_GetObjectItem(params, "session");
                                if (!cJSON_IsTrue(cJSON_GetObjectItem(params, "background")) || !cJSON_IsString(s) ||
                                    strcmp(s->valuestring, "unit") != 0)
                                        __atomic_add_fetch(&fk.bad, 1, __ATOMIC_RELAXED);
                                cJSON *r = cJSON_CreateObject();
                                cJSON_AddStringToObject(r, "execution_id", "ex-1");
                                cJSON_AddStringToObject(r, "state", "running");
                                fake_reply(fd, id, r);
                        } else if (strcmp(method, "get_execution") == 0) {
                                const cJSON *off = cJSON_GetObjectItem(params, "stdout_offset");
                                pthread_mutex_lock(&fk.lock);
                                fk.polls++;
                                bool hold = fk.hold;
                                pthread_mutex_unlock(&fk.lock);
                                if (hold) {
                                        /* like a long-poll: block until the adapter gives up on us */
                                        char c;
                                        while (read(fd, &c, 1) > 0)
                                                ;
                                        cJSON_Delete(q);
                                        goto out;
                                }
                                if (!off)
                                        fake_reply(fd, id, fake_exec("completed", NULL, 0, 6));
                                else if (off->valueint == 0)
                                        fake_reply(fd, id, fake_exec("running", "aMM=", 0, 2)); /* "h\xc3" */
                                else if (off->valueint == 2)
                                        fake_reply(fd, id, fake_exec("running", "qWxsbw==", 2, 6)); /* "\xa9llo" */
                                else
                                        fake_reply(fd, id, fake_exec("completed", "", 6, 6));
                        } else if (strcmp(method, "service_logs") == 0) {
                                /* tail_lines × 1000 bytes of log: a reply as large as we like */
                                size_t n = (size_t)cJSON_GetObjectItem(params, "tail_lines")->valueint * 1000;
                                char *big = malloc(n + 1);
                                memset(big, 'x', n);
                                big[n] = '\0';
                                cJSON *r = cJSON_CreateObject();
                                cJSON_AddStringToObject(r, "name", "web");
                                cJSON_AddStringToObject(r, "stdout", big);
                                cJSON_AddStringToObject(r, "stderr", "");
                                free(big);
                                fake_reply(fd, id, r);
                        } else if (strcmp(method, "cancel_execution") == 0) {
                                const cJSON *x = cJSON_GetObjectItem(params, "execution_id");
                                if (!cJSON_IsString(x) || strcmp(x->valuestring, "ex-1") != 0)
                                        __atomic_add_fetch(&fk.bad, 1, __ATOMIC_RELAXED);
                                pthread_mutex_lock(&fk.lock);
                                fk.cancelled = true;
                                pthread_mutex_unlock(&fk.lock);
                                fake_reply(fd, id, fake_exec("cancelled", NULL, 0, 0));
                        }
                        cJSON_Delete(q);
                }
        }
out:
        close(fd);
        return NULL;
}

static void *fake_accept(void *p)
{
        (void)p;
        for (;;) {
                int fd = accept(fk.lfd, NULL, NULL);
                pthread_t t;
                if (fd < 0)
                        return NULL;
                pthread_create(&t, NULL, fake_conn, (void *)(intptr_t)fd);
                pthread_detach(t);
        }
}

static void fake_setup(void)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        const char *base = getenv("TMPDIR");

        capture_reset();
        memset(&fk, 0, sizeof(fk));
        pthread_mutex_init(&fk.lock, NULL);
        snprintf(fk.dir, sizeof(fk.dir), "%s/sbx-mcp-XXXXXX", base && *base ? base : "/tmp");
        cr_assert_not_null(mkdtemp(fk.dir));
        snprintf(fk.path, sizeof(fk.path), "%s/api.sock", fk.dir);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", fk.path);
        fk.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert_eq(bind(fk.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        cr_assert_eq(listen(fk.lfd, 16), 0);
        pthread_create(&fk.thread, NULL, fake_accept, NULL);
        m = adapter(fk.path, "sbx_fake");
}

static void fake_teardown(void)
{
        cr_assert_eq(__atomic_load_n(&fk.bad, __ATOMIC_RELAXED), 0, "the adapter sent what the API expects");
        if (m) {
                mcp_drain(m, 10000);
                mcp_free(m);
                m = NULL;
        }
        shutdown(fk.lfd, SHUT_RDWR);
        close(fk.lfd);
        pthread_join(fk.thread, NULL);
        unlink(fk.path);
        rmdir(fk.dir);
        capture_reset();
}

TestSuite(mcp_fake, .init = fake_setup, .fini = fake_teardown, .timeout = 30);

Test(mcp_fake, progress_follows_output_in_order)
{
        cJSON *r;
        double last = -1;
        char text[64] = "";

        send_line(
                "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
                "\"arguments\":{\"command\":\"slow\"},\"_meta\":{\"progressToken\":\"tok\"}}}");
        for (;;) {
                r = next_msg_wait(10000);
                cr_assert_not_null(r, "a message");
                if (cJSON_GetObjectItem(r, "id"))
                        break;
                cr_assert_str_eq(cJSON_GetObjectItem(r, "method")->valuestring, "notifications/progress");
                const cJSON *pp = cJSON_GetObjectItem(r, "params");
                cr_assert_str_eq(cJSON_GetObjectItem(pp, "progressToken")->valuestring, "tok");
                double pr = cJSON_GetObjectItem(pp, "progress")->valuedouble;
                cr_assert_gt(pr, last, "progress increases");
                last = pr;
                const char *msg = cJSON_GetObjectItem(pp, "message")->valuestring;
                if (pr > 0)
                        strncat(text, msg, sizeof(text) - strlen(text) - 1);
                else
                        cr_assert_not_null(strstr(msg, "ex-1"), "the first progress names the execution");
                cJSON_Delete(r);
        }
        cr_assert_str_eq(text, "h\xc3\xa9llo", "a UTF-8 character cut between chunks arrives whole");
        cr_assert_eq(last, 6);
        /* the final result: exit 3 is an error result with the structured execution */
        cr_assert_eq(cJSON_GetObjectItem(r, "id")->valueint, 7);
        cr_assert(is_error(r));
        const cJSON *sc = cJSON_GetObjectItem(result_of(r), "structuredContent");
        cr_assert_str_eq(cJSON_GetObjectItem(sc, "execution_id")->valuestring, "ex-1");
        cr_assert_eq(cJSON_GetObjectItem(sc, "exit_code")->valueint, 3);
        cr_assert_str_eq(cJSON_GetObjectItem(sc, "stdout")->valuestring, "head...tail");
        cr_assert_str_eq(fk.last_token, "sbx_fake");
        cJSON_Delete(r);
}

Test(mcp_fake, without_progress_token_no_notifications)
{
        send_line(
                "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
                "\"arguments\":{\"command\":\"quiet\"}}}");
        cJSON *r = next_msg_wait(10000);
        cr_assert_eq(cJSON_GetObjectItem(r, "id")->valueint, 8, "the first message is the result");
        cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(result_of(r), "structuredContent"), "exit_code")->valueint,
                     3);
        cJSON_Delete(r);
}

Test(mcp_fake, cancel_stops_the_execution_and_the_answer)
{
        pthread_mutex_lock(&fk.lock);
        fk.hold = true;
        pthread_mutex_unlock(&fk.lock);
        send_line(
                "{\"jsonrpc\":\"2.0\",\"id\":\"c1\",\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
                "\"arguments\":{\"command\":\"sleep 100\"}}}");
        for (int i = 0; i < 200; i++) {
                pthread_mutex_lock(&fk.lock);
                int polls = fk.polls;
                pthread_mutex_unlock(&fk.lock);
                if (polls > 0)
                        break;
                usleep(10000);
        }
        cr_assert_eq(mcp_inflight(m), 1);
        send_line(
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"c1\","
                "\"reason\":\"user\"}}");
        cr_assert_eq(mcp_drain(m, 10000), 0, "the call ends promptly");
        pthread_mutex_lock(&fk.lock);
        cr_assert(fk.cancelled, "cancel_execution reached the daemon");
        pthread_mutex_unlock(&fk.lock);
        cr_assert_eq(pending(), 0, "a cancelled request gets no response");
        /* the adapter still serves */
        cJSON *r = ask("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
        cJSON_Delete(r);
}

Test(mcp_fake, duplicate_id_in_flight_is_refused)
{
        pthread_mutex_lock(&fk.lock);
        fk.hold = true;
        pthread_mutex_unlock(&fk.lock);
        send_line(
                "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
                "\"arguments\":{\"command\":\"sleep 100\"}}}");
        cJSON *r =
                ask("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
                    "\"arguments\":{\"command\":\"sleep 100\"}}}");
        cr_assert_eq(error_code(r), MCP_INVALID_REQUEST);
        cJSON_Delete(r);
        send_line("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":5}}");
        cr_assert_eq(mcp_drain(m, 10000), 0);
}

Test(mcp_fake, results_stay_under_the_output_limit)
{
        cJSON *r;
        const cJSON *sc;

        /* 5 MB of log: with its text copy the message would pass 8 MiB, so the
         * text becomes a note and structuredContent carries the logs */
        send_line(
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"service_logs\","
                "\"arguments\":{\"name\":\"web\",\"tail_lines\":5000}}}");
        r = next_msg_wait(20000);
        cr_assert_not_null(r);
        cr_assert_not(is_error(r));
        sc = cJSON_GetObjectItem(result_of(r), "structuredContent");
        cr_assert_eq(strlen(cJSON_GetObjectItem(sc, "stdout")->valuestring), 5000000);
        cr_assert_not_null(strstr(tool_text(r), "see structuredContent"));
        cJSON_Delete(r);

        /* 9 MB cannot fit at all: an error result asking for less */
        send_line(
                "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"service_logs\","
                "\"arguments\":{\"name\":\"web\",\"tail_lines\":9000}}}");
        r = next_msg_wait(20000);
        cr_assert_not_null(r);
        cr_assert(is_error(r));
        cr_assert_not_null(strstr(tool_text(r), "tail_lines"));
        cJSON_Delete(r);
}

Test(mcp_fake, calls_in_flight_are_capped)
{
        struct mcp_options o = {
                .api_socket = fk.path, .token = "t", .session = "unit", .write = capture, .max_inflight = 1};
        struct sbx_error err = {0};

        mcp_free(m);
        cr_assert_eq(mcp_new(&o, &m, &err), 0);
        pthread_mutex_lock(&fk.lock);
        fk.hold = true;
        pthread_mutex_unlock(&fk.lock);
        send_line(
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
                "\"arguments\":{\"command\":\"sleep 100\"}}}");
        cJSON *r =
                ask("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
                    "\"arguments\":{\"command\":\"true\"}}}");
        cr_assert(is_error(r));
        cr_assert_not_null(strstr(tool_text(r), "busy"));
        cJSON_Delete(r);
        send_line("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":1}}");
        cr_assert_eq(mcp_drain(m, 10000), 0);
}

/* --url: plain http:// only to a loopback host, judged on the URL's real
 * host (userinfo and look-alike names do not pass). */
Test(mcp, plain_http_url_only_to_a_real_loopback_host)
{
        static const char *const ok[] = {"http://127.0.0.1:8443/", "http://127.1.2.3",
                                         "http://localhost:8443",  "http://localhost",
                                         "http://[::1]:8443/mcp",  "https://sandbox.example:8443"};
        static const char *const bad[] = {"http://127.0.0.1@evil.example/", "http://localhost:80@evil.example/",
                                          "http://127.evil.example/",       "http://[::1]@evil.example/",
                                          "http://localhost.evil.example/", "http://user@localhost/"};

        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
                struct sbx_error err = {0};
                cr_expect_eq(mcp_https_check_url(ok[i], &err), 0, "%s refused: %s", ok[i], err.msg);
        }
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct sbx_error err = {0};
                cr_expect_eq(mcp_https_check_url(bad[i], &err), -EINVAL, "%s accepted", bad[i]);
        }
}
