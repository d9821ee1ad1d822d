/* mcp.c — the MCP adapter's protocol core: line framing, JSON-RPC 2.0
 * validation, the two protocol eras (legacy initialize handshake and the
 * stateless 2026-07-28 per-request envelope), dispatch, and the registry of
 * tool calls in flight with their cancellation and progress.
 *
 * Threads: the reading thread calls mcp_feed / mcp_handle_line and answers
 * everything but tools/call itself. Each tools/call runs on its own detached
 * worker thread (mcp_tools.c) holding a reference on the adapter.
 *   - out_lock serializes output lines (and guards output_closed, orphaned);
 *   - lock guards the call list, the counters, the negotiated legacy version,
 *     the client log level, and each call's cancelled / api_fd / progress
 *     fields.
 * A cancel marks the call and shuts its API connection down; the worker,
 * woken, cancels the execution it started over a second connection.
 * lock may be taken before out_lock, never the other way round. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "mcp_internal.h"
#include "sandboxd/log.h"
#include "sandboxd/reqguard.h"
#include "sandboxd/session.h"
#include "sandboxd/utf8.h"

#define META_PROTOCOL_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CLIENT_CAPABILITIES "io.modelcontextprotocol/clientCapabilities"
#define META_CLIENT_INFO "io.modelcontextprotocol/clientInfo"
#define META_LOG_LEVEL "io.modelcontextprotocol/logLevel"
#define META_SERVER_INFO "io.modelcontextprotocol/serverInfo"

#define SERVER_NAME "sandboxd-mcp"
#define SERVER_TITLE "sandboxd"
#define TOOLS_TTL_MS 300000

static const char *const legacy_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};
static const int legacy_ranks[] = {MCP_REV_2025_11_25, MCP_REV_2025_06_18, MCP_REV_2025_03_26, MCP_REV_2024_11_05};
static const char *const log_levels[] = {"debug", "info", "notice", "warning", "error", "critical", "alert",
                                         "emergency"};

static const char instructions[] =
        "Each session has its own sandbox container; /workspace persists across container restarts. "
        "Use exec for shell commands and run_code for python, node or bash snippets. Long runs: pass "
        "background: true and follow them with get_execution (wait, stdout_offset, stderr_offset). "
        "Long-running servers: start_service, then session_info for the host ports.";

static const char *rank_version(int rank)
{
        for (size_t i = 0; i < ELEMENTSOF(legacy_ranks); i++)
                if (legacy_ranks[i] == rank)
                        return legacy_versions[i];
        return rank == MCP_REV_2026_07_28 ? MCP_MODERN_VERSION : MCP_LATEST_LEGACY_VERSION;
}

static int log_level_index(const char *s)
{
        for (size_t i = 0; s && i < ELEMENTSOF(log_levels); i++)
                if (strcmp(s, log_levels[i]) == 0)
                        return (int)i;
        return -1;
}

/* ---- the adapter ---- */

int mcp_new(const struct mcp_options *opt, struct mcp **ret, struct sbx_error *err)
{
        struct mcp *m;
        int r;

        if (!opt || (!opt->write && !opt->write_related))
                return sbx_error_set(err, -EINVAL, 0, "no output callback");
        if (opt->session && *opt->session && !session_id_valid(opt->session))
                return sbx_error_set(err, -EINVAL, 0,
                                     "invalid session '%.80s': 1-64 of [A-Za-z0-9_.-], not '.' or '..'",
                                     opt->session);
        r = mcp_tools_init();
        if (r < 0)
                return sbx_error_set(err, r, 0, "built-in tool schemas do not parse");
        m = calloc(1, sizeof(*m));
        if (!m)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        m->refs = 1;
        m->api_socket = strdup(opt->api_socket ? opt->api_socket : "");
        m->token = strdup(opt->token ? opt->token : "");
        if (!m->api_socket || !m->token) {
                free(m->api_socket);
                free(m->token);
                free(m);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        if (opt->session && *opt->session) {
                sbx_strlcpy(m->session, opt->session, sizeof(m->session));
        } else {
                char hex[13];
                r = sbx_random_hex(hex, 6);
                if (r < 0) {
                        free(m->api_socket);
                        free(m->token);
                        free(m);
                        return sbx_error_set(err, r, 0, "no randomness for a session name");
                }
                snprintf(m->session, sizeof(m->session), "mcp-%s", hex);
        }
        m->max_inflight = opt->max_inflight ? opt->max_inflight : MCP_MAX_INFLIGHT_DEFAULT;
        m->poll_wait_s = opt->poll_wait_s > 0 ? opt->poll_wait_s : 30;
        m->write = opt->write;
        m->write_related = opt->write_related;
        m->write_userdata = opt->write_userdata;
        m->client_log_level = -1;
        pthread_mutex_init(&m->out_lock, NULL);
        pthread_mutex_init(&m->lock, NULL);
        pthread_cond_init(&m->idle, NULL);
        *ret = m;
        return 0;
}

static void mcp_unref(struct mcp *m)
{
        if (!m || __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) > 0)
                return;
        pthread_mutex_destroy(&m->out_lock);
        pthread_mutex_destroy(&m->lock);
        pthread_cond_destroy(&m->idle);
        free(m->api_socket);
        free(m->token);
        free(m->rbuf);
        free(m);
}

void mcp_free(struct mcp *m)
{
        if (!m)
                return;
        pthread_mutex_lock(&m->out_lock);
        m->orphaned = true;
        pthread_mutex_unlock(&m->out_lock);
        mcp_unref(m);
}

int mcp_drain(struct mcp *m, int timeout_ms)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms >= 0 ? timeout_ms : 0);
        int r = 0;

        pthread_mutex_lock(&m->lock);
        while (m->inflight > 0 && r == 0)
                r = timeout_ms < 0 ? pthread_cond_wait(&m->idle, &m->lock)
                                   : pthread_cond_timedwait(&m->idle, &m->lock, &until);
        r = m->inflight > 0 ? -ETIMEDOUT : 0;
        pthread_mutex_unlock(&m->lock);
        return r;
}

size_t mcp_inflight(struct mcp *m)
{
        size_t n;

        pthread_mutex_lock(&m->lock);
        n = m->inflight;
        pthread_mutex_unlock(&m->lock);
        return n;
}

bool mcp_output_closed(struct mcp *m)
{
        bool closed;

        pthread_mutex_lock(&m->out_lock);
        closed = m->output_closed;
        pthread_mutex_unlock(&m->out_lock);
        return closed;
}

const char *mcp_default_session(struct mcp *m) { return m->session; }

/* ---- output ---- */

/* Serialize and write one message; takes msg. related is the id of the
 * request it answers or belongs to (progress, logs of a call), NULL for
 * none: a transport with several streams routes by it. */
static void send_msg(struct mcp *m, cJSON *msg, const cJSON *related)
{
        char *text;
        size_t n;

        if (!msg)
                return;
        text = cJSON_PrintUnformatted(msg);
        cJSON_Delete(msg);
        if (!text) {
                log_error("mcp: out of memory serializing a message");
                return;
        }
        n = strlen(text);
        text[n] = '\n'; /* cJSON escapes every control character: no raw newline inside */
        pthread_mutex_lock(&m->out_lock);
        if (!m->output_closed && !m->orphaned &&
            (m->write_related ? m->write_related(text, n + 1, related, m->write_userdata)
                              : m->write(text, n + 1, m->write_userdata)) < 0) {
                m->output_closed = true;
                log_info("mcp: output closed");
        }
        pthread_mutex_unlock(&m->out_lock);
        free(text);
}

static cJSON *envelope(const cJSON *id)
{
        cJSON *msg = cJSON_CreateObject();

        cJSON_AddStringToObject(msg, "jsonrpc", "2.0");
        if (id)
                cJSON_AddItemToObject(msg, "id", cJSON_Duplicate(id, true));
        return msg;
}

/* Strings from the client may be anything; messages we build must stay valid UTF-8. */
static void send_error(struct mcp *m, const cJSON *id, int code, cJSON *data, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
static void send_error(struct mcp *m, const cJSON *id, int code, cJSON *data, const char *fmt, ...)
{
        char buf[1024];
        cJSON *msg, *e;
        char *clean;
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        clean = utf8_sanitize(buf, strlen(buf));
        msg = envelope(NULL);
        cJSON_AddItemToObject(msg, "id", id ? cJSON_Duplicate(id, true) : cJSON_CreateNull());
        e = cJSON_AddObjectToObject(msg, "error");
        cJSON_AddNumberToObject(e, "code", code);
        cJSON_AddStringToObject(e, "message", clean ? clean : "error");
        if (data)
                cJSON_AddItemToObject(e, "data", data);
        free(clean);
        log_debug("mcp: error %d: %s", code, buf);
        send_msg(m, msg, id);
}

static cJSON *server_info(void)
{
        cJSON *info = cJSON_CreateObject();

        cJSON_AddStringToObject(info, "name", SERVER_NAME);
        cJSON_AddStringToObject(info, "title", SERVER_TITLE);
        cJSON_AddStringToObject(info, "version", SBX_VERSION);
        return info;
}

static cJSON *capabilities(void)
{
        cJSON *caps = cJSON_CreateObject();
        cJSON *tools = cJSON_AddObjectToObject(caps, "tools");

        cJSON_AddFalseToObject(tools, "listChanged");
        cJSON_AddObjectToObject(caps, "logging");
        /* execution output by reference (mcp_resources.c) */
        cJSON *res = cJSON_AddObjectToObject(caps, "resources");
        cJSON_AddFalseToObject(res, "subscribe");
        cJSON_AddFalseToObject(res, "listChanged");
        return caps;
}

/* Send a result; takes result. Modern results carry resultType and serverInfo. */
static void send_result(struct mcp *m, const cJSON *id, cJSON *result, bool modern)
{
        cJSON *msg = envelope(id);

        if (modern) {
                cJSON *meta = cJSON_GetObjectItemCaseSensitive(result, "_meta");
                if (!cJSON_IsObject(meta))
                        meta = cJSON_AddObjectToObject(result, "_meta");
                cJSON_AddItemToObject(meta, META_SERVER_INFO, server_info());
                cJSON_AddStringToObject(result, "resultType", "complete");
        }
        cJSON_AddItemToObject(msg, "result", result);
        send_msg(m, msg, id);
}

static void send_notification(struct mcp *m, const char *method, cJSON *params, const cJSON *related)
{
        cJSON *msg = envelope(NULL);

        cJSON_AddStringToObject(msg, "method", method);
        cJSON_AddItemToObject(msg, "params", params);
        send_msg(m, msg, related);
}

/* ---- calls in flight ---- */

int mcp_call_attach(struct mcp_call *c, struct mcp_api *a)
{
        int r = 0;

        pthread_mutex_lock(&c->m->lock);
        if (c->cancelled)
                r = -ECANCELED;
        else
                c->api_fd = mcp_api_fd(a);
        pthread_mutex_unlock(&c->m->lock);
        return r;
}

void mcp_call_detach(struct mcp_call *c)
{
        pthread_mutex_lock(&c->m->lock);
        c->api_fd = -1;
        pthread_mutex_unlock(&c->m->lock);
}

bool mcp_call_cancelled(struct mcp_call *c)
{
        bool r;

        pthread_mutex_lock(&c->m->lock);
        r = c->cancelled;
        pthread_mutex_unlock(&c->m->lock);
        return r;
}

void mcp_call_progress(struct mcp_call *c, double progress, const char *message)
{
        struct mcp *m = c->m;
        cJSON *params;

        if (!c->progress_token)
                return;
        pthread_mutex_lock(&m->lock);
        if (c->cancelled || (c->progress_sent && progress <= c->progress)) {
                pthread_mutex_unlock(&m->lock);
                return;
        }
        c->progress = progress;
        c->progress_sent = true;
        params = cJSON_CreateObject();
        cJSON_AddItemToObject(params, "progressToken", cJSON_Duplicate(c->progress_token, true));
        cJSON_AddNumberToObject(params, "progress", progress);
        if (message && c->rank >= MCP_REV_2025_03_26)
                cJSON_AddStringToObject(params, "message", message);
        /* Sent under lock so progress values leave in increasing order. */
        send_notification(m, "notifications/progress", params, c->id);
        pthread_mutex_unlock(&m->lock);
}

void mcp_call_log(struct mcp_call *c, int level, const char *fmt, ...)
{
        struct mcp *m = c->m;
        char buf[1024];
        cJSON *params;
        char *clean;
        va_list ap;
        int want;

        pthread_mutex_lock(&m->lock);
        want = c->modern ? c->log_level : m->client_log_level;
        pthread_mutex_unlock(&m->lock);
        if (want < 0 || level < want)
                return;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        clean = utf8_sanitize(buf, strlen(buf));
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "level", log_levels[level]);
        cJSON_AddStringToObject(params, "logger", SERVER_NAME);
        cJSON_AddStringToObject(params, "data", clean ? clean : "");
        free(clean);
        send_notification(m, "notifications/message", params, c->id);
}

static void call_free(struct mcp_call *c)
{
        if (!c)
                return;
        cJSON_Delete(c->id);
        cJSON_Delete(c->args);
        cJSON_Delete(c->progress_token);
        free(c);
}

static cJSON *tool_result_json(const struct mcp_tool_result *r, int rank)
{
        cJSON *result = cJSON_CreateObject(), *content, *block;
        char *text = NULL;

        content = cJSON_AddArrayToObject(result, "content");
        block = cJSON_CreateObject();
        cJSON_AddStringToObject(block, "type", "text");
        if (r->text) {
                cJSON_AddStringToObject(block, "text", r->text);
        } else {
                text = r->structured ? cJSON_PrintUnformatted(r->structured) : NULL;
                cJSON_AddStringToObject(block, "text", text ? text : "");
                free(text);
        }
        cJSON_AddItemToArray(content, block);
        if (r->links && rank >= MCP_REV_2025_06_18) { /* resource_link came with 2025-06-18 */
                const cJSON *l;
                cJSON_ArrayForEach(l, r->links) cJSON_AddItemToArray(content, cJSON_Duplicate(l, true));
        }
        if (r->structured && rank >= MCP_REV_2025_06_18)
                cJSON_AddItemToObject(result, "structuredContent", cJSON_Duplicate(r->structured, true));
        if (r->is_error)
                cJSON_AddTrueToObject(result, "isError");
        return result;
}

static size_t printed_size(const cJSON *j)
{
        char *s = cJSON_PrintUnformatted(j);
        size_t n = s ? strlen(s) : SIZE_MAX;

        free(s);
        return n;
}

/* A tool result that fits in one output line: first without the text copy
 * of the structured content, then as an error asking for less. */
static cJSON *bounded_tool_result(const struct mcp_tool_result *r, int rank)
{
        const size_t budget = MCP_MAX_OUTPUT - 4096; /* room for the envelope */
        cJSON *res = tool_result_json(r, rank);
        size_t n = printed_size(res);
        char note[512];

        if (n <= budget)
                return res;
        cJSON_Delete(res);
        if (r->structured && rank >= MCP_REV_2025_06_18) {
                struct mcp_tool_result small = *r;
                snprintf(note, sizeof(note), "(%zu bytes of result: see structuredContent)", n);
                small.text = note;
                res = tool_result_json(&small, rank);
                if (printed_size(res) <= budget)
                        return res;
                cJSON_Delete(res);
        }
        struct mcp_tool_result err = {.is_error = true, .text = note};
        snprintf(note, sizeof(note),
                 "the result (%zu bytes) is over the %d-byte message limit: ask for less (read_file offset and "
                 "length, get_execution offsets, service_logs tail_lines)",
                 n, MCP_MAX_OUTPUT);
        log_warn("mcp: %s", note);
        return tool_result_json(&err, rank);
}

static void *call_thread(void *p)
{
        struct mcp_call *c = p, **pp;
        struct mcp *m = c->m;
        struct mcp_tool_result r = {0};
        bool cancelled;

        mcp_tool_run(c, &r);

        pthread_mutex_lock(&m->lock);
        for (pp = &m->calls; *pp; pp = &(*pp)->next)
                if (*pp == c) {
                        *pp = c->next;
                        break;
                }
        cancelled = c->cancelled;
        /* Answer before the call leaves the count, so mcp_drain returning
         * means every answer has been written. */
        if (!cancelled && !r.suppress)
                send_result(m, c->id, bounded_tool_result(&r, c->rank), c->modern);
        m->inflight--;
        pthread_cond_broadcast(&m->idle);
        pthread_mutex_unlock(&m->lock);

        log_debug("mcp: %s call done%s%s", c->tool, r.is_error ? " (error)" : "", cancelled ? " (cancelled)" : "");
        cJSON_Delete(r.structured);
        cJSON_Delete(r.links);
        free(r.text);
        call_free(c);
        mcp_unref(m);
        return NULL;
}

/* ---- requests ---- */

static bool valid_id(const cJSON *id)
{
        if (cJSON_IsString(id))
                return true;
        return cJSON_IsNumber(id) && id->valuedouble == (double)(int64_t)id->valuedouble;
}

struct req {
        const cJSON *id;
        const char *method;
        const cJSON *params; /* an object or NULL */
        bool modern;
        int rank;
        int log_level; /* modern: the envelope's logLevel; -1 none */
};

static void handle_initialize(struct mcp *m, const struct req *q)
{
        const cJSON *pv = cJSON_GetObjectItemCaseSensitive(q->params, "protocolVersion");
        const cJSON *caps = cJSON_GetObjectItemCaseSensitive(q->params, "capabilities");
        const cJSON *info = cJSON_GetObjectItemCaseSensitive(q->params, "clientInfo");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(info, "name");
        int rank = MCP_REV_2025_11_25;
        cJSON *result;

        if (!cJSON_IsString(pv)) {
                send_error(m, q->id, MCP_INVALID_PARAMS, NULL, "initialize: params.protocolVersion must be a string");
                return;
        }
        if (caps && !cJSON_IsObject(caps)) {
                send_error(m, q->id, MCP_INVALID_PARAMS, NULL, "initialize: params.capabilities must be an object");
                return;
        }
        if (info && !cJSON_IsObject(info)) {
                send_error(m, q->id, MCP_INVALID_PARAMS, NULL, "initialize: params.clientInfo must be an object");
                return;
        }
        /* Echo the client's version when we speak it, else offer our latest. */
        for (size_t i = 0; i < ELEMENTSOF(legacy_versions); i++)
                if (strcmp(pv->valuestring, legacy_versions[i]) == 0)
                        rank = legacy_ranks[i];
        pthread_mutex_lock(&m->lock);
        m->legacy_rank = rank;
        pthread_mutex_unlock(&m->lock);
        log_info("mcp: initialize from %.64s: client asked %.32s, using %s",
                 cJSON_IsString(name) ? name->valuestring : "an unnamed client", pv->valuestring,
                 rank_version(rank));

        result = cJSON_CreateObject();
        cJSON_AddStringToObject(result, "protocolVersion", rank_version(rank));
        cJSON_AddItemToObject(result, "capabilities", capabilities());
        cJSON_AddItemToObject(result, "serverInfo", server_info());
        cJSON_AddStringToObject(result, "instructions", instructions);
        send_result(m, q->id, result, false);
}

static void handle_discover(struct mcp *m, const struct req *q)
{
        cJSON *result = cJSON_CreateObject(), *versions;

        versions = cJSON_AddArrayToObject(result, "supportedVersions");
        cJSON_AddItemToArray(versions, cJSON_CreateString(MCP_MODERN_VERSION));
        cJSON_AddItemToObject(result, "capabilities", capabilities());
        cJSON_AddItemToObject(result, "serverInfo", server_info());
        cJSON_AddStringToObject(result, "instructions", instructions);
        cJSON_AddNumberToObject(result, "ttlMs", TOOLS_TTL_MS);
        cJSON_AddStringToObject(result, "cacheScope", "public");
        send_result(m, q->id, result, true);
}

static void handle_set_level(struct mcp *m, const struct req *q)
{
        const cJSON *level = cJSON_GetObjectItemCaseSensitive(q->params, "level");
        int i = cJSON_IsString(level) ? log_level_index(level->valuestring) : -1;

        if (i < 0) {
                send_error(m, q->id, MCP_INVALID_PARAMS, NULL,
                           "logging/setLevel: params.level must be one of debug, info, notice, warning, error, "
                           "critical, alert, emergency");
                return;
        }
        pthread_mutex_lock(&m->lock);
        m->client_log_level = i;
        pthread_mutex_unlock(&m->lock);
        send_result(m, q->id, cJSON_CreateObject(), false);
}

static void handle_tools_list(struct mcp *m, const struct req *q)
{
        cJSON *result = cJSON_CreateObject();

        cJSON_AddItemToObject(result, "tools", mcp_tools_list(q->rank));
        if (q->modern) {
                cJSON_AddNumberToObject(result, "ttlMs", TOOLS_TTL_MS);
                cJSON_AddStringToObject(result, "cacheScope", "public");
        }
        send_result(m, q->id, result, q->modern);
}

/* ---- resources: execution output by reference (mcp_resources.c) ---- */

/* 2026-07-28 results of the resources/ methods say how long they may be
 * cached, and for whom. Output is a user's own and may still grow. */
static void add_cache_hints(cJSON *result, const struct req *q, int ttl_ms, bool shared)
{
        if (!q->modern)
                return;
        cJSON_AddNumberToObject(result, "ttlMs", ttl_ms);
        cJSON_AddStringToObject(result, "cacheScope", shared ? "public" : "private");
}

static void handle_resources_read(struct mcp *m, const struct req *q)
{
        cJSON *result = NULL;
        char msg[1200];
        int code = MCP_INTERNAL_ERROR;

        if (mcp_resource_read(m, q->params, &result, &code, msg, sizeof(msg)) < 0) {
                send_error(m, q->id, code, NULL, "%s", msg);
                return;
        }
        add_cache_hints(result, q, 0, false);
        send_result(m, q->id, result, q->modern);
}

static void handle_resources_list(struct mcp *m, const struct req *q)
{
        cJSON *result = cJSON_CreateObject();

        /* nothing to list: outputs are reached through the links in results */
        cJSON_AddArrayToObject(result, "resources");
        add_cache_hints(result, q, 0, false);
        send_result(m, q->id, result, q->modern);
}

static void handle_resource_templates(struct mcp *m, const struct req *q)
{
        cJSON *result = cJSON_CreateObject();

        cJSON_AddItemToObject(result, "resourceTemplates", mcp_resource_templates());
        add_cache_hints(result, q, TOOLS_TTL_MS, true);
        send_result(m, q->id, result, q->modern);
}

/* The resources/ methods; false if method is none of them. */
static bool handle_resources(struct mcp *m, const struct req *q, const char *method)
{
        if (strcmp(method, "resources/read") == 0)
                handle_resources_read(m, q);
        else if (strcmp(method, "resources/list") == 0)
                handle_resources_list(m, q);
        else if (strcmp(method, "resources/templates/list") == 0)
                handle_resource_templates(m, q);
        else
                return false;
        return true;
}

/* An input validation error: a tool result the model can read and correct. */
static void send_tool_error(struct mcp *m, const struct req *q, const char *text)
{
        struct mcp_tool_result r = {.text = (char *)text, .is_error = true};

        send_result(m, q->id, tool_result_json(&r, q->rank), q->modern);
}

static void handle_tools_call(struct mcp *m, const struct req *q)
{
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(q->params, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(q->params, "arguments");
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(q->params, "_meta");
        const cJSON *token = cJSON_GetObjectItemCaseSensitive(meta, "progressToken");
        const cJSON *session;
        const struct mcp_tool *tool;
        struct mcp_call *c, *it;
        char msg[512];
        pthread_attr_t attr;
        pthread_t th;
        int r;

        if (!cJSON_IsString(name)) {
                send_error(m, q->id, MCP_INVALID_PARAMS, NULL, "tools/call: params.name must be a string");
                return;
        }
        tool = mcp_tool_find(name->valuestring);
        if (!tool) {
                send_error(m, q->id, MCP_INVALID_PARAMS, NULL, "Unknown tool: %.100s", name->valuestring);
                return;
        }
        if (args && !cJSON_IsObject(args) && !cJSON_IsNull(args)) {
                send_error(m, q->id, MCP_INVALID_PARAMS, NULL, "tools/call: params.arguments must be an object");
                return;
        }
        if (!cJSON_IsObject(args))
                args = NULL;
        {
                cJSON *empty = args ? NULL : cJSON_CreateObject();
                bool ok = mcp_schema_validate(mcp_tool_input_schema(tool), args ? args : empty, "arguments", msg,
                                              sizeof(msg));
                cJSON_Delete(empty);
                if (!ok) {
                        char text[600];
                        snprintf(text, sizeof(text), "invalid arguments for %s: %s", name->valuestring, msg);
                        send_tool_error(m, q, text);
                        return;
                }
        }
        session = cJSON_GetObjectItemCaseSensitive(args, "session");
        if (session && !session_id_valid(session->valuestring)) {
                send_tool_error(m, q, "invalid arguments: session must be 1-64 of [A-Za-z0-9_.-], not '.' or '..'");
                return;
        }

        c = calloc(1, sizeof(*c));
        if (!c) {
                send_error(m, q->id, MCP_INTERNAL_ERROR, NULL, "out of memory");
                return;
        }
        c->m = m;
        c->id = cJSON_Duplicate(q->id, true);
        sbx_strlcpy(c->tool, name->valuestring, sizeof(c->tool));
        c->args = args ? cJSON_Duplicate(args, true) : cJSON_CreateObject();
        sbx_strlcpy(c->session, session ? session->valuestring : m->session, sizeof(c->session));
        if (valid_id(token)) /* a progress token is a string or an integer, like an id */
                c->progress_token = cJSON_Duplicate(token, true);
        c->rank = q->rank;
        c->modern = q->modern;
        c->log_level = q->log_level;
        c->api_fd = -1;
        if (!c->id || !c->args) {
                call_free(c);
                send_error(m, q->id, MCP_INTERNAL_ERROR, NULL, "out of memory");
                return;
        }

        pthread_mutex_lock(&m->lock);
        for (it = m->calls; it; it = it->next)
                if (cJSON_Compare(it->id, q->id, true))
                        break;
        if (it) {
                pthread_mutex_unlock(&m->lock);
                call_free(c);
                send_error(m, q->id, MCP_INVALID_REQUEST, NULL, "a request with this id is still in flight");
                return;
        }
        if (m->inflight >= m->max_inflight) {
                pthread_mutex_unlock(&m->lock);
                call_free(c);
                snprintf(msg, sizeof(msg), "busy: %zu tool calls are already in flight; wait for one to finish",
                         m->max_inflight);
                send_tool_error(m, q, msg);
                return;
        }
        c->next = m->calls;
        m->calls = c;
        m->inflight++;
        __atomic_add_fetch(&m->refs, 1, __ATOMIC_ACQ_REL);
        pthread_mutex_unlock(&m->lock);

        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        r = pthread_create(&th, &attr, call_thread, c);
        pthread_attr_destroy(&attr);
        if (r != 0) {
                struct mcp_call **pp;
                pthread_mutex_lock(&m->lock);
                for (pp = &m->calls; *pp; pp = &(*pp)->next)
                        if (*pp == c) {
                                *pp = c->next;
                                break;
                        }
                m->inflight--;
                pthread_cond_broadcast(&m->idle);
                pthread_mutex_unlock(&m->lock);
                call_free(c);
                __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL); /* the caller still holds its own */
                send_tool_error(m, q, "busy: cannot start a worker thread");
                return;
        }
        log_debug("mcp: %s call started (session %s)", name->valuestring, session ? session->valuestring : m->session);
}

/* Mark a call cancelled and wake its worker out of its read; the worker
 * then cancels the execution it started. Under m->lock. */
static void cancel_call_locked(struct mcp_call *c, const char *why)
{
        if (c->cancelled)
                return;
        c->cancelled = true;
        if (c->api_fd >= 0)
                shutdown(c->api_fd, SHUT_RDWR);
        log_info("mcp: %s call cancelled %.200s", c->tool, why);
}

static void handle_cancelled(struct mcp *m, const cJSON *params)
{
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(params, "requestId");
        const cJSON *reason = cJSON_GetObjectItemCaseSensitive(params, "reason");
        struct mcp_call *c;

        if (!rid)
                return;
        pthread_mutex_lock(&m->lock);
        for (c = m->calls; c; c = c->next)
                if (cJSON_Compare(c->id, rid, true))
                        break;
        if (c)
                cancel_call_locked(c, cJSON_IsString(reason) ? reason->valuestring : "by the client");
        pthread_mutex_unlock(&m->lock);
}

void mcp_cancel_all(struct mcp *m)
{
        pthread_mutex_lock(&m->lock);
        for (struct mcp_call *c = m->calls; c; c = c->next)
                cancel_call_locked(c, "(the MCP session ended)");
        pthread_mutex_unlock(&m->lock);
}

static bool modern_claim_valid(const cJSON *meta)
{
        const cJSON *pv = cJSON_GetObjectItemCaseSensitive(meta, META_PROTOCOL_VERSION);
        const cJSON *info = cJSON_GetObjectItemCaseSensitive(meta, META_CLIENT_INFO);
        const cJSON *level = cJSON_GetObjectItemCaseSensitive(meta, META_LOG_LEVEL);

        return cJSON_IsString(pv) && strcmp(pv->valuestring, MCP_MODERN_VERSION) == 0 &&
               cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(meta, META_CLIENT_CAPABILITIES)) &&
               (!info || (cJSON_IsObject(info) && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(info, "name")) &&
                          cJSON_IsString(cJSON_GetObjectItemCaseSensitive(info, "version")))) &&
               (!level || (cJSON_IsString(level) && log_level_index(level->valuestring) >= 0));
}

/* The 2026-07-28 envelope: returns 0 (valid, version supported), or sends the
 * error and returns -1. */
static int check_envelope(struct mcp *m, const cJSON *id, const cJSON *meta, struct req *q)
{
        const cJSON *pv = cJSON_GetObjectItemCaseSensitive(meta, META_PROTOCOL_VERSION);
        const cJSON *caps = cJSON_GetObjectItemCaseSensitive(meta, META_CLIENT_CAPABILITIES);
        const cJSON *info = cJSON_GetObjectItemCaseSensitive(meta, META_CLIENT_INFO);
        const cJSON *level = cJSON_GetObjectItemCaseSensitive(meta, META_LOG_LEVEL);
        cJSON *data, *sup;

        if (!cJSON_IsString(pv)) {
                send_error(m, id, MCP_INVALID_PARAMS, NULL,
                           "Invalid _meta envelope: " META_PROTOCOL_VERSION " must be a string");
                return -1;
        }
        if (!cJSON_IsObject(caps)) {
                send_error(m, id, MCP_INVALID_PARAMS, NULL,
                           "Invalid _meta envelope: " META_CLIENT_CAPABILITIES " %s",
                           caps ? "must be an object" : "is missing");
                return -1;
        }
        if (info && (!cJSON_IsObject(info) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(info, "name")) ||
                     !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(info, "version")))) {
                send_error(m, id, MCP_INVALID_PARAMS, NULL,
                           "Invalid _meta envelope: " META_CLIENT_INFO " must be an object with name and version");
                return -1;
        }
        if (level && (!cJSON_IsString(level) || log_level_index(level->valuestring) < 0)) {
                send_error(m, id, MCP_INVALID_PARAMS, NULL,
                           "Invalid _meta envelope: " META_LOG_LEVEL " must be a logging level");
                return -1;
        }
        if (strcmp(pv->valuestring, MCP_MODERN_VERSION) != 0) {
                data = cJSON_CreateObject();
                sup = cJSON_AddArrayToObject(data, "supported");
                cJSON_AddItemToArray(sup, cJSON_CreateString(MCP_MODERN_VERSION));
                cJSON_AddStringToObject(data, "requested", pv->valuestring);
                send_error(m, id, MCP_UNSUPPORTED_PROTOCOL_VERSION, data, "Unsupported protocol version: %.64s",
                           pv->valuestring);
                return -1;
        }
        q->modern = true;
        q->rank = MCP_REV_2026_07_28;
        q->log_level = level ? log_level_index(level->valuestring) : -1;
        return 0;
}

static void handle_request(struct mcp *m, const cJSON *id, const char *method, const cJSON *params)
{
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");
        struct req q = {.id = id, .method = method, .params = params, .log_level = -1};

        if (params && !cJSON_IsObject(params)) {
                send_error(m, id, MCP_INVALID_PARAMS, NULL, "%.100s: params must be an object", method);
                return;
        }
        if (meta && !cJSON_IsObject(meta)) {
                send_error(m, id, MCP_INVALID_PARAMS, NULL, "%.100s: params._meta must be an object", method);
                return;
        }
        /* initialize is the legacy handshake unless it carries a valid
         * stateless envelope (as the SDKs classify it), which then makes it
         * an unknown method of that era. */
        if (cJSON_GetObjectItemCaseSensitive(meta, META_PROTOCOL_VERSION) &&
            (strcmp(method, "initialize") != 0 || modern_claim_valid(meta))) {
                if (check_envelope(m, id, meta, &q) < 0)
                        return;
                log_debug("mcp: %.100s (" MCP_MODERN_VERSION ")", method);
                if (strcmp(method, "server/discover") == 0)
                        handle_discover(m, &q);
                else if (strcmp(method, "tools/list") == 0)
                        handle_tools_list(m, &q);
                else if (strcmp(method, "tools/call") == 0)
                        handle_tools_call(m, &q);
                else if (!handle_resources(m, &q, method))
                        send_error(m, id, MCP_METHOD_NOT_FOUND, NULL, "Method not found: %.100s", method);
                return;
        }

        pthread_mutex_lock(&m->lock);
        q.rank = m->legacy_rank ? m->legacy_rank : MCP_REV_2025_11_25;
        pthread_mutex_unlock(&m->lock);
        log_debug("mcp: %.100s (%s)", method, rank_version(q.rank));
        if (strcmp(method, "initialize") == 0)
                handle_initialize(m, &q);
        else if (strcmp(method, "ping") == 0)
                send_result(m, id, cJSON_CreateObject(), false);
        else if (strcmp(method, "tools/list") == 0)
                handle_tools_list(m, &q);
        else if (strcmp(method, "tools/call") == 0)
                handle_tools_call(m, &q);
        else if (strcmp(method, "logging/setLevel") == 0)
                handle_set_level(m, &q);
        else if (handle_resources(m, &q, method))
                ;
        else if (strcmp(method, "server/discover") == 0)
                send_error(m, id, MCP_INVALID_PARAMS, NULL,
                           "server/discover needs the " MCP_MODERN_VERSION " _meta envelope (" META_PROTOCOL_VERSION
                           ", " META_CLIENT_CAPABILITIES ")");
        else
                send_error(m, id, MCP_METHOD_NOT_FOUND, NULL, "Method not found: %.100s", method);
}

static void handle_notification(struct mcp *m, const char *method, const cJSON *params)
{
        if (strcmp(method, "notifications/cancelled") == 0)
                handle_cancelled(m, params);
        else if (strcmp(method, "notifications/initialized") == 0)
                log_debug("mcp: client initialized");
        else
                log_debug("mcp: ignoring notification %.100s", method);
}

void mcp_handle_line(struct mcp *m, const char *line, size_t len)
{
        const char *end = NULL;
        const cJSON *jsonrpc, *method, *id, *params;
        enum reqguard_verdict verdict;
        cJSON *msg;
        size_t i;

        if (len && line[len - 1] == '\r')
                len--;
        for (i = 0; i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'); i++)
                ;
        if (i == len)
                return; /* blank lines are not messages */
        if (memchr(line, '\0', len)) {
                send_error(m, NULL, MCP_PARSE_ERROR, NULL, "Parse error: NUL byte in message");
                return;
        }
        /* bounded before parsing (see reqguard.h) */
        verdict = reqguard_scan(line, len, REQGUARD_MAX_ELEMENTS, REQGUARD_MAX_DEPTH);
        if (!reqguard_verdict_is_invalid(verdict) && verdict != REQGUARD_OK) {
                send_error(m, NULL, MCP_INVALID_REQUEST, NULL, "%s", reqguard_verdict_message(verdict));
                return;
        }
        msg = cJSON_ParseWithLengthOpts(line, len, &end, false);
        if (msg && end) {
                while (end < line + len && (*end == ' ' || *end == '\t' || *end == '\r'))
                        end++;
                if (end != line + len) {
                        cJSON_Delete(msg);
                        msg = NULL;
                }
        }
        if (!msg) {
                send_error(m, NULL, MCP_PARSE_ERROR, NULL, "Parse error: not a JSON text");
                return;
        }
        if (cJSON_IsArray(msg)) {
                send_error(m, NULL, MCP_INVALID_REQUEST, NULL, "Invalid Request: batches are not supported");
                goto out;
        }
        if (!cJSON_IsObject(msg)) {
                send_error(m, NULL, MCP_INVALID_REQUEST, NULL, "Invalid Request: a message must be a JSON object");
                goto out;
        }
        jsonrpc = cJSON_GetObjectItemCaseSensitive(msg, "jsonrpc");
        method = cJSON_GetObjectItemCaseSensitive(msg, "method");
        id = cJSON_GetObjectItemCaseSensitive(msg, "id");
        params = cJSON_GetObjectItemCaseSensitive(msg, "params");
        if (!method &&
            (cJSON_GetObjectItemCaseSensitive(msg, "result") || cJSON_GetObjectItemCaseSensitive(msg, "error"))) {
                /* A response: we never send requests, so there is nothing to match. */
                log_debug("mcp: ignoring a response from the client");
                goto out;
        }
        if (verdict != REQGUARD_OK && method) {
                /* strict strings: a NUL would truncate an argument, invalid UTF-8 is no JSON text */
                send_error(m, valid_id(id) ? id : NULL, MCP_INVALID_PARAMS, NULL, "%s",
                           reqguard_verdict_message(verdict));
                goto out;
        }
        if (!cJSON_IsString(jsonrpc) || strcmp(jsonrpc->valuestring, "2.0") != 0) {
                send_error(m, valid_id(id) ? id : NULL, MCP_INVALID_REQUEST, NULL,
                           "Invalid Request: jsonrpc must be \"2.0\"");
                goto out;
        }
        if (!cJSON_IsString(method)) {
                send_error(m, valid_id(id) ? id : NULL, MCP_INVALID_REQUEST, NULL,
                           "Invalid Request: method must be a string");
                goto out;
        }
        if (!id) {
                handle_notification(m, method->valuestring, params);
                goto out;
        }
        if (!valid_id(id)) {
                send_error(m, NULL, MCP_INVALID_REQUEST, NULL, "Invalid Request: id must be a string or an integer");
                goto out;
        }
        handle_request(m, id, method->valuestring, params);
out:
        cJSON_Delete(msg);
}

/* ---- framing ---- */

void mcp_feed(struct mcp *m, const void *data, size_t len)
{
        const char *p = data, *end = p + len;

        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t n = (size_t)((nl ? nl : end) - p);

                if (m->discarding) {
                        if (nl)
                                m->discarding = false;
                        p += n + (nl ? 1 : 0);
                        continue;
                }
                if (m->rlen + n > MCP_MAX_LINE) {
                        /* Answer now and drop the rest of the line as it streams by. */
                        send_error(m, NULL, MCP_PARSE_ERROR, NULL, "Parse error: message longer than %d bytes",
                                   MCP_MAX_LINE);
                        m->rlen = 0;
                        m->discarding = !nl;
                        if (m->rcap > 65536) {
                                free(m->rbuf);
                                m->rbuf = NULL;
                                m->rcap = 0;
                        }
                        p += n + (nl ? 1 : 0);
                        continue;
                }
                if (nl && m->rlen == 0) {
                        mcp_handle_line(m, p, n); /* the common case: no copy */
                        p += n + 1;
                        continue;
                }
                if (m->rlen + n > m->rcap) {
                        size_t cap = m->rcap ? m->rcap : 65536;
                        char *b;
                        while (cap < m->rlen + n)
                                cap *= 2;
                        if (cap > MCP_MAX_LINE)
                                cap = MCP_MAX_LINE;
                        b = realloc(m->rbuf, cap);
                        if (!b) {
                                send_error(m, NULL, MCP_INTERNAL_ERROR, NULL, "out of memory reading a message");
                                m->rlen = 0;
                                m->discarding = !nl;
                                p += n + (nl ? 1 : 0);
                                continue;
                        }
                        m->rbuf = b;
                        m->rcap = cap;
                }
                memcpy(m->rbuf + m->rlen, p, n);
                m->rlen += n;
                p += n;
                if (nl) {
                        mcp_handle_line(m, m->rbuf, m->rlen);
                        m->rlen = 0;
                        p++;
                        if (m->rcap > 1024 * 1024) {
                                free(m->rbuf);
                                m->rbuf = NULL;
                                m->rcap = 0;
                        }
                }
        }
}

void mcp_feed_eof(struct mcp *m)
{
        if (m->rlen && !m->discarding)
                mcp_handle_line(m, m->rbuf, m->rlen);
        m->rlen = 0;
        m->discarding = false;
}
