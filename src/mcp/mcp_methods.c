/* mcp_methods.c — the MCP methods: the two protocol eras (the legacy
 * initialize handshake, and the stateless 2026-07-28 per-request _meta
 * envelope, checked here), dispatch of every request and notification the
 * reading thread hands over (mcp.c), and the answers that need no daemon:
 * initialize, server/discover, ping, logging/setLevel, tools/list (from the
 * catalog, mcp_catalog.c), the resources/ methods (mcp_resources.c). A
 * tools/call is validated against its tool's inputSchema here and then
 * handed to a worker (mcp_calls.c); tasks/ requests likewise.
 *
 * Threads: the reading thread only. m->lock is taken briefly for the
 * negotiated version and the client log level; answers go out through
 * mcp_send_* (mcp.c), never with m->lock held. */
#include <stdio.h>
#include <string.h>

#include "mcp_internal.h"
#include "sandboxd/log.h"
#include "sandboxd/session.h"

#define META_PROTOCOL_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CLIENT_CAPABILITIES "io.modelcontextprotocol/clientCapabilities"
#define META_CLIENT_INFO "io.modelcontextprotocol/clientInfo"
#define META_LOG_LEVEL "io.modelcontextprotocol/logLevel"
#define TOOLS_TTL_MS 300000

static const char *const legacy_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};
static const int legacy_ranks[] = {MCP_REV_2025_11_25, MCP_REV_2025_06_18, MCP_REV_2025_03_26, MCP_REV_2024_11_05};
static const char *const log_levels[] = {"debug", "info",     "notice", "warning",
                                         "error", "critical", "alert",  "emergency"};

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

const char *mcp_log_level_name(int level)
{
        return level >= 0 && (size_t)level < ELEMENTSOF(log_levels) ? log_levels[level] : "debug";
}

static void send_result(struct mcp *m, const cJSON *id, cJSON *result, bool modern)
{
        mcp_send_result(m, id, result, modern, NULL);
}

static cJSON *capabilities(int rank)
{
        cJSON *caps = cJSON_CreateObject();
        cJSON *tools = cJSON_AddObjectToObject(caps, "tools");

        cJSON_AddFalseToObject(tools, "listChanged");
        cJSON_AddObjectToObject(caps, "logging");
        /* execution output by reference (mcp_resources.c) */
        cJSON *res = cJSON_AddObjectToObject(caps, "resources");
        cJSON_AddFalseToObject(res, "subscribe");
        cJSON_AddFalseToObject(res, "listChanged");
        if (rank == MCP_REV_2026_07_28) {
                cJSON_AddObjectToObject(cJSON_AddObjectToObject(caps, "extensions"), MCP_TASKS_EXTENSION);
        } else if (rank == MCP_REV_2025_11_25) {
                /* 2025-11-25's experimental tasks: tools/call may be one, tasks/cancel works; no tasks/list */
                cJSON *tasks = cJSON_AddObjectToObject(caps, "tasks");
                cJSON_AddObjectToObject(tasks, "cancel");
                cJSON_AddObjectToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(tasks, "requests"), "tools"),
                                        "call");
        }
        return caps;
}

static void handle_initialize(struct mcp *m, const struct mcp_req *q)
{
        const cJSON *pv = cJSON_GetObjectItemCaseSensitive(q->params, "protocolVersion");
        const cJSON *caps = cJSON_GetObjectItemCaseSensitive(q->params, "capabilities");
        const cJSON *info = cJSON_GetObjectItemCaseSensitive(q->params, "clientInfo");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(info, "name");
        int rank = MCP_REV_2025_11_25;
        cJSON *result;

        if (!cJSON_IsString(pv)) {
                mcp_send_error(m, q->id, MCP_INVALID_PARAMS, NULL,
                               "initialize: params.protocolVersion must be a string");
                return;
        }
        if (caps && !cJSON_IsObject(caps)) {
                mcp_send_error(m, q->id, MCP_INVALID_PARAMS, NULL, "initialize: params.capabilities must be an object");
                return;
        }
        if (info && !cJSON_IsObject(info)) {
                mcp_send_error(m, q->id, MCP_INVALID_PARAMS, NULL, "initialize: params.clientInfo must be an object");
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
                 cJSON_IsString(name) ? name->valuestring : "an unnamed client", pv->valuestring, rank_version(rank));

        result = cJSON_CreateObject();
        cJSON_AddStringToObject(result, "protocolVersion", rank_version(rank));
        cJSON_AddItemToObject(result, "capabilities", capabilities(rank));
        cJSON_AddItemToObject(result, "serverInfo", mcp_server_info());
        cJSON_AddStringToObject(result, "instructions", instructions);
        send_result(m, q->id, result, false);
}

static void handle_discover(struct mcp *m, const struct mcp_req *q)
{
        cJSON *result = cJSON_CreateObject(), *versions;

        versions = cJSON_AddArrayToObject(result, "supportedVersions");
        cJSON_AddItemToArray(versions, cJSON_CreateString(MCP_MODERN_VERSION));
        cJSON_AddItemToObject(result, "capabilities", capabilities(MCP_REV_2026_07_28));
        cJSON_AddItemToObject(result, "serverInfo", mcp_server_info());
        cJSON_AddStringToObject(result, "instructions", instructions);
        cJSON_AddNumberToObject(result, "ttlMs", TOOLS_TTL_MS);
        cJSON_AddStringToObject(result, "cacheScope", "public");
        send_result(m, q->id, result, true);
}

static void handle_set_level(struct mcp *m, const struct mcp_req *q)
{
        const cJSON *level = cJSON_GetObjectItemCaseSensitive(q->params, "level");
        int i = cJSON_IsString(level) ? log_level_index(level->valuestring) : -1;

        if (i < 0) {
                mcp_send_error(m, q->id, MCP_INVALID_PARAMS, NULL,
                               "logging/setLevel: params.level must be one of debug, info, notice, warning, error, "
                               "critical, alert, emergency");
                return;
        }
        pthread_mutex_lock(&m->lock);
        m->client_log_level = i;
        pthread_mutex_unlock(&m->lock);
        send_result(m, q->id, cJSON_CreateObject(), false);
}

static void handle_tools_list(struct mcp *m, const struct mcp_req *q)
{
        cJSON *result = cJSON_CreateObject();

        cJSON_AddItemToObject(result, "tools", mcp_tools_list(q->rank));
        if (q->rank == MCP_REV_2025_11_25) {
                /* 2025-11-25's experimental tasks: the long-running tools may be called as tasks */
                cJSON *t;
                cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(result, "tools")) {
                        const cJSON *n = cJSON_GetObjectItemCaseSensitive(t, "name");
                        if (cJSON_IsString(n) &&
                            (strcmp(n->valuestring, "exec") == 0 || strcmp(n->valuestring, "run_code") == 0))
                                cJSON_AddStringToObject(cJSON_AddObjectToObject(t, "execution"), "taskSupport",
                                                        "optional");
                }
        }
        if (q->modern) {
                cJSON_AddNumberToObject(result, "ttlMs", TOOLS_TTL_MS);
                cJSON_AddStringToObject(result, "cacheScope", "public");
        }
        send_result(m, q->id, result, q->modern);
}

/* ---- resources: execution output by reference (mcp_resources.c) ---- */

/* 2026-07-28 results of the resources/ methods say how long they may be
 * cached, and for whom. Output is a user's own and may still grow. */
static void add_cache_hints(cJSON *result, const struct mcp_req *q, int ttl_ms, bool shared)
{
        if (!q->modern)
                return;
        cJSON_AddNumberToObject(result, "ttlMs", ttl_ms);
        cJSON_AddStringToObject(result, "cacheScope", shared ? "public" : "private");
}

static void handle_resources_read(struct mcp *m, const struct mcp_req *q)
{
        cJSON *result = NULL;
        char msg[1200];
        int code = MCP_INTERNAL_ERROR;

        if (mcp_resource_read(m, q->params, &result, &code, msg, sizeof(msg)) < 0) {
                mcp_send_error(m, q->id, code, NULL, "%s", msg);
                return;
        }
        add_cache_hints(result, q, 0, false);
        send_result(m, q->id, result, q->modern);
}

static void handle_resources_list(struct mcp *m, const struct mcp_req *q)
{
        cJSON *result = cJSON_CreateObject();

        /* nothing to list: outputs are reached through the links in results */
        cJSON_AddArrayToObject(result, "resources");
        add_cache_hints(result, q, 0, false);
        send_result(m, q->id, result, q->modern);
}

static void handle_resource_templates(struct mcp *m, const struct mcp_req *q)
{
        cJSON *result = cJSON_CreateObject();

        cJSON_AddItemToObject(result, "resourceTemplates", mcp_resource_templates());
        add_cache_hints(result, q, TOOLS_TTL_MS, true);
        send_result(m, q->id, result, q->modern);
}

/* The resources/ methods; false if method is none of them. */
static bool handle_resources(struct mcp *m, const struct mcp_req *q, const char *method)
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

static void handle_tools_call(struct mcp *m, const struct mcp_req *q)
{
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(q->params, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(q->params, "arguments");
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(q->params, "_meta");
        const cJSON *token = cJSON_GetObjectItemCaseSensitive(meta, "progressToken");
        const cJSON *session;
        const struct mcp_tool *tool;
        char msg[512];

        if (!cJSON_IsString(name)) {
                mcp_send_error(m, q->id, MCP_INVALID_PARAMS, NULL, "tools/call: params.name must be a string");
                return;
        }
        tool = mcp_tool_find(name->valuestring);
        if (!tool) {
                mcp_send_error(m, q->id, MCP_INVALID_PARAMS, NULL, "Unknown tool: %.100s", name->valuestring);
                return;
        }
        if (args && !cJSON_IsObject(args) && !cJSON_IsNull(args)) {
                mcp_send_error(m, q->id, MCP_INVALID_PARAMS, NULL, "tools/call: params.arguments must be an object");
                return;
        }
        if (!cJSON_IsObject(args))
                args = NULL;
        {
                cJSON *empty = args ? NULL : cJSON_CreateObject();
                bool ok = mcp_schema_validate(tool->input_schema, args ? args : empty, "arguments", msg, sizeof(msg));
                cJSON_Delete(empty);
                if (!ok) {
                        char text[600];
                        snprintf(text, sizeof(text), "invalid arguments for %s: %s", name->valuestring, msg);
                        mcp_send_tool_error(m, q, text);
                        return;
                }
        }
        session = cJSON_GetObjectItemCaseSensitive(args, "session");
        if (session && !session_id_valid(session->valuestring)) {
                mcp_send_tool_error(m, q, "invalid arguments: session must be 1-64 of [A-Za-z0-9_.-], not '.' or '..'");
                return;
        }
        if (!q->modern && q->tasks_ok && cJSON_GetObjectItemCaseSensitive(q->params, "task")) {
                /* 2025-11-25: a task-augmented call (params.task {ttl?}; our ttl is our own) */
                struct mcp_req tq = *q;
                if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(q->params, "task"))) {
                        mcp_send_error(m, q->id, MCP_INVALID_PARAMS, NULL, "tools/call: params.task must be an object");
                        return;
                }
                if (strcmp(name->valuestring, "exec") != 0 && strcmp(name->valuestring, "run_code") != 0) {
                        mcp_send_error(m, q->id, MCP_METHOD_NOT_FOUND, NULL, "%.64s cannot run as a task (taskSupport)",
                                       name->valuestring);
                        return;
                }
                tq.legacy_task = true;
                mcp_call_start(m, &tq, MCP_CALL_TOOL, name->valuestring, args,
                               session ? session->valuestring : m->session, token);
                return;
        }
        mcp_call_start(m, q, MCP_CALL_TOOL, name->valuestring, args, session ? session->valuestring : m->session,
                       token);
}

/* tasks/get, tasks/cancel, tasks/update: on a worker like a tool call
 * (they ask the daemon), for clients that declared the extension. */
static void handle_tasks(struct mcp *m, const struct mcp_req *q)
{
        const cJSON *tid = cJSON_GetObjectItemCaseSensitive(q->params, "taskId");
        cJSON *data, *ext;

        if (!q->tasks_ok && !q->modern) {
                mcp_send_error(m, q->id, MCP_METHOD_NOT_FOUND, NULL, "Method not found: %.32s (tasks need 2025-11-25)",
                               q->method);
                return;
        }
        if (!q->tasks_ok) {
                data = cJSON_CreateObject();
                ext = cJSON_AddObjectToObject(cJSON_AddObjectToObject(data, "requiredCapabilities"), "extensions");
                cJSON_AddObjectToObject(ext, MCP_TASKS_EXTENSION);
                mcp_send_error(m, q->id, MCP_MISSING_CLIENT_CAPABILITY, data,
                               "Missing required client capability: the " MCP_TASKS_EXTENSION " extension");
                return;
        }
        if (!cJSON_IsString(tid) || !*tid->valuestring || strlen(tid->valuestring) > 64) {
                mcp_send_error(m, q->id, MCP_INVALID_PARAMS, NULL, "%.32s: params.taskId must be a task id", q->method);
                return;
        }
        mcp_call_start(m, q, MCP_CALL_TASK, q->method, q->params, m->session, NULL);
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
static int check_envelope(struct mcp *m, const cJSON *id, const cJSON *meta, struct mcp_req *q)
{
        const cJSON *pv = cJSON_GetObjectItemCaseSensitive(meta, META_PROTOCOL_VERSION);
        const cJSON *caps = cJSON_GetObjectItemCaseSensitive(meta, META_CLIENT_CAPABILITIES);
        const cJSON *info = cJSON_GetObjectItemCaseSensitive(meta, META_CLIENT_INFO);
        const cJSON *level = cJSON_GetObjectItemCaseSensitive(meta, META_LOG_LEVEL);
        cJSON *data, *sup;

        if (!cJSON_IsString(pv)) {
                mcp_send_error(m, id, MCP_INVALID_PARAMS, NULL,
                               "Invalid _meta envelope: " META_PROTOCOL_VERSION " must be a string");
                return -1;
        }
        if (!cJSON_IsObject(caps)) {
                mcp_send_error(m, id, MCP_INVALID_PARAMS, NULL,
                               "Invalid _meta envelope: " META_CLIENT_CAPABILITIES " %s",
                               caps ? "must be an object" : "is missing");
                return -1;
        }
        if (info && (!cJSON_IsObject(info) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(info, "name")) ||
                     !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(info, "version")))) {
                mcp_send_error(m, id, MCP_INVALID_PARAMS, NULL,
                               "Invalid _meta envelope: " META_CLIENT_INFO " must be an object with name and version");
                return -1;
        }
        if (level && (!cJSON_IsString(level) || log_level_index(level->valuestring) < 0)) {
                mcp_send_error(m, id, MCP_INVALID_PARAMS, NULL,
                               "Invalid _meta envelope: " META_LOG_LEVEL " must be a logging level");
                return -1;
        }
        if (strcmp(pv->valuestring, MCP_MODERN_VERSION) != 0) {
                data = cJSON_CreateObject();
                sup = cJSON_AddArrayToObject(data, "supported");
                cJSON_AddItemToArray(sup, cJSON_CreateString(MCP_MODERN_VERSION));
                cJSON_AddStringToObject(data, "requested", pv->valuestring);
                mcp_send_error(m, id, MCP_UNSUPPORTED_PROTOCOL_VERSION, data, "Unsupported protocol version: %.64s",
                               pv->valuestring);
                return -1;
        }
        q->modern = true;
        q->rank = MCP_REV_2026_07_28;
        q->log_level = level ? log_level_index(level->valuestring) : -1;
        q->tasks_ok =
                cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(caps, "extensions"),
                                                                MCP_TASKS_EXTENSION));
        return 0;
}

void mcp_methods_request(struct mcp *m, const cJSON *id, const char *method, const cJSON *params)
{
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");
        struct mcp_req q = {.id = id, .method = method, .params = params, .log_level = -1};

        if (params && !cJSON_IsObject(params)) {
                mcp_send_error(m, id, MCP_INVALID_PARAMS, NULL, "%.100s: params must be an object", method);
                return;
        }
        if (meta && !cJSON_IsObject(meta)) {
                mcp_send_error(m, id, MCP_INVALID_PARAMS, NULL, "%.100s: params._meta must be an object", method);
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
                else if (strcmp(method, "tasks/get") == 0 || strcmp(method, "tasks/cancel") == 0 ||
                         strcmp(method, "tasks/update") == 0)
                        handle_tasks(m, &q);
                else if (!handle_resources(m, &q, method))
                        mcp_send_error(m, id, MCP_METHOD_NOT_FOUND, NULL, "Method not found: %.100s", method);
                return;
        }

        pthread_mutex_lock(&m->lock);
        q.rank = m->legacy_rank ? m->legacy_rank : MCP_REV_2025_11_25;
        pthread_mutex_unlock(&m->lock);
        q.tasks_ok = q.rank == MCP_REV_2025_11_25;
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
        else if (strcmp(method, "tasks/get") == 0 || strcmp(method, "tasks/result") == 0 ||
                 strcmp(method, "tasks/cancel") == 0)
                handle_tasks(m, &q);
        else if (handle_resources(m, &q, method))
                ;
        else if (strcmp(method, "server/discover") == 0)
                mcp_send_error(m, id, MCP_INVALID_PARAMS, NULL,
                               "server/discover needs the " MCP_MODERN_VERSION " _meta envelope (" META_PROTOCOL_VERSION
                               ", " META_CLIENT_CAPABILITIES ")");
        else
                mcp_send_error(m, id, MCP_METHOD_NOT_FOUND, NULL, "Method not found: %.100s", method);
}

void mcp_methods_notification(struct mcp *m, const char *method, const cJSON *params)
{
        if (strcmp(method, "notifications/cancelled") == 0)
                mcp_call_cancel_request(m, params);
        else if (strcmp(method, "notifications/initialized") == 0)
                log_debug("mcp: client initialized");
        else
                log_debug("mcp: ignoring notification %.100s", method);
}
