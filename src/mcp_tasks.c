/* mcp_tasks.c — the MCP tasks extension (io.modelcontextprotocol/tasks, SEP
 * 2663, for the 2026-07-28 era) in the protocol core, so both transports
 * (sandboxd-mcp over stdio, /mcp over HTTPS) serve it alike.
 *
 * A client declares the extension in the request's
 * _meta["io.modelcontextprotocol/clientCapabilities"].extensions; only then
 * may an answer be a task. An exec or run_code (without background) still
 * running after MCP_TASK_AFTER_S becomes one: the daemon records it
 * (create_task, durable in its store) and the call answers a
 * CreateTaskResult {resultType: "task", taskId, status, statusMessage,
 * createdAt, lastUpdatedAt, ttlMs, pollIntervalMs}. The execution runs on in
 * the daemon; the client follows it with
 *   tasks/get    {taskId} → the task, with `result` (the CallToolResult the
 *                call would have given) once completed, `error` if failed;
 *   tasks/cancel {taskId} → {} (cooperative: the execution is cancelled;
 *                one that already ended keeps its status);
 *   tasks/update {taskId, inputResponses} → {} (no task of ours ever needs
 *                input: the responses are ignored, as for unknown keys).
 * Tasks belong to the token's user (another user's id is "unknown task"),
 * live ttlMs (an hour) and are capped per user by the daemon (api_tasks.c).
 * There is no tasks/list or tasks/result in this extension.
 *
 * Threads: everything here runs on a call's worker thread (mcp.c). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "mcp_internal.h"
#include "sandboxd/log.h"

#define TASK_REQUEST_TIMEOUT_MS 60000

static void iso8601(cJSON *o, const char *key, const cJSON *ms)
{
        char buf[40], out[48];
        int64_t v = cJSON_IsNumber(ms) ? (int64_t)ms->valuedouble : 0;
        time_t sec = (time_t)(v / 1000);
        struct tm tm;

        gmtime_r(&sec, &tm);
        strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(out, sizeof(out), "%s.%03dZ", buf, (int)(v % 1000));
        cJSON_AddStringToObject(o, key, out);
}

static const char *str(const cJSON *o, const char *key)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) ? v->valuestring : "";
}

/* The extension's Task from the daemon's task object. */
static cJSON *task_from_api(const cJSON *t)
{
        cJSON *o = cJSON_CreateObject();
        const cJSON *ttl = cJSON_GetObjectItemCaseSensitive(t, "ttl_ms");
        const cJSON *poll = cJSON_GetObjectItemCaseSensitive(t, "poll_interval_ms");

        cJSON_AddStringToObject(o, "taskId", str(t, "task_id"));
        cJSON_AddStringToObject(o, "status", str(t, "status"));
        if (*str(t, "status_message"))
                cJSON_AddStringToObject(o, "statusMessage", str(t, "status_message"));
        iso8601(o, "createdAt", cJSON_GetObjectItemCaseSensitive(t, "created_at"));
        iso8601(o, "lastUpdatedAt", cJSON_GetObjectItemCaseSensitive(t, "updated_at"));
        cJSON_AddNumberToObject(o, "ttlMs", cJSON_IsNumber(ttl) ? ttl->valuedouble : 0);
        cJSON_AddNumberToObject(o, "pollIntervalMs", cJSON_IsNumber(poll) ? poll->valuedouble : 1000);
        return o;
}

int mcp_task_create(struct mcp_call *c, struct mcp_api *a, const char *exec_id, struct mcp_tool_result *r)
{
        struct mcp_api_error e = {0};
        cJSON *params = cJSON_CreateObject(), *res = NULL;
        int k;

        cJSON_AddStringToObject(params, "session", c->session);
        cJSON_AddStringToObject(params, "execution_id", exec_id);
        cJSON_AddStringToObject(params, "tool", c->tool);
        k = mcp_api_request(a, c->m->token, "create_task", params, TASK_REQUEST_TIMEOUT_MS, NULL, NULL, &res, &e);
        cJSON_Delete(params);
        if (k < 0) {
                log_info("mcp: execution %s stays in the foreground: no task (%s: %s)", exec_id, e.code, e.message);
                mcp_call_log(c, MCP_LOG_NOTICE, "no task for execution %s: %s", exec_id, e.message);
                return k;
        }
        r->raw = task_from_api(res);
        r->raw_type = "task";
        log_info("mcp: %s execution %s is task %s", c->tool, exec_id, str(res, "task_id"));
        cJSON_Delete(res);
        return 0;
}

static void rpc_error(struct mcp_tool_result *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void rpc_error(struct mcp_tool_result *r, int code, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(r->rpc_message, sizeof(r->rpc_message), fmt, ap);
        va_end(ap);
        r->rpc_code = code;
}

static void api_error(struct mcp_tool_result *r, const char *task_id, const struct mcp_api_error *e)
{
        if (strcmp(e->code, "not_found") == 0)
                rpc_error(r, MCP_INVALID_PARAMS, "Unknown task: %.64s", task_id);
        else
                rpc_error(r, MCP_INTERNAL_ERROR, "sandboxd: %s: %.200s", e->code, e->message);
}

/* The final CallToolResult of a completed task, from its execution. */
static cJSON *task_result(struct mcp_call *c, struct mcp_api *a, const cJSON *t, struct mcp_api_error *e)
{
        struct mcp_tool_result tr = {0};
        cJSON *params = cJSON_CreateObject(), *res = NULL, *out;
        int k;

        cJSON_AddStringToObject(params, "session", str(t, "session"));
        cJSON_AddStringToObject(params, "execution_id", str(t, "execution_id"));
        k = mcp_api_request(a, c->m->token, "get_execution", params, TASK_REQUEST_TIMEOUT_MS, NULL, NULL, &res, e);
        cJSON_Delete(params);
        if (k < 0)
                return NULL;
        mcp_tool_execution_result(str(t, "tool"), res, &tr);
        out = mcp_tool_result_json(&tr, c->rank);
        cJSON_Delete(tr.structured);
        free(tr.text);
        return out;
}

void mcp_task_run(struct mcp_call *c, struct mcp_tool_result *r)
{
        const char *task_id = str(c->args, "taskId");
        const char *method = strcmp(c->tool, "tasks/cancel") == 0 ? "cancel_task" : "get_task";
        struct mcp_api *a = NULL;
        struct mcp_api_error e = {0};
        struct sbx_error err = {0};
        cJSON *params, *res = NULL;
        int k;

        if (mcp_api_open(c->m->api_socket, &a, &err) < 0) {
                rpc_error(r, MCP_INTERNAL_ERROR, "sandboxd is not reachable: %.200s", err.msg);
                return;
        }
        if (mcp_call_attach(c, a) < 0) {
                r->suppress = true;
                goto out;
        }
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "task_id", task_id);
        k = mcp_api_request(a, c->m->token, method, params, TASK_REQUEST_TIMEOUT_MS, NULL, NULL, &res, &e);
        cJSON_Delete(params);
        if (k < 0) {
                api_error(r, task_id, &e);
                goto out;
        }
        if (strcmp(c->tool, "tasks/get") != 0) {
                /* tasks/cancel and tasks/update: an empty acknowledgement */
                if (strcmp(c->tool, "tasks/cancel") == 0)
                        log_info("mcp: task %s cancel requested", task_id);
                r->raw = cJSON_CreateObject();
                goto out;
        }
        r->raw = task_from_api(res);
        if (strcmp(str(res, "status"), "completed") == 0) {
                cJSON *result = task_result(c, a, res, &e);
                if (!result) {
                        cJSON_Delete(r->raw);
                        r->raw = NULL;
                        api_error(r, task_id, &e);
                        goto out;
                }
                cJSON_AddItemToObject(r->raw, "result", result);
        } else if (strcmp(str(res, "status"), "failed") == 0) {
                cJSON *er = cJSON_AddObjectToObject(r->raw, "error");
                cJSON_AddNumberToObject(er, "code", MCP_INTERNAL_ERROR);
                cJSON_AddStringToObject(er, "message", *str(res, "status_message") ? str(res, "status_message")
                                                                                   : "the task failed");
        }
out:
        mcp_call_detach(c);
        cJSON_Delete(res);
        mcp_api_close(a);
}
