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
 * The 2025-11-25 era had tasks of its own (experimental, the shape the 1.x
 * SDK's client.experimental.tasks speaks), served here too on the same
 * daemon tasks: initialize advertises capabilities.tasks {cancel,
 * requests.tools.call}, tools/list marks exec and run_code
 * execution.taskSupport "optional"; a tools/call with params.task answers
 * {task: Task} at once (Task with ttl and pollInterval); tasks/get → the
 * Task; tasks/result → waits for the end, then the CallToolResult with
 * _meta["io.modelcontextprotocol/related-task"]; tasks/cancel → the Task,
 * now cancelled for good (-32602 for a task that already ended). No
 * tasks/list.
 *
 * Threads: everything here runs on a call's worker thread (mcp_calls.c). */
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

/* The Task from the daemon's task object: the extension's (ttlMs,
 * pollIntervalMs) or, for 2025-11-25, the experimental one (ttl, pollInterval). */
static cJSON *task_from_api(const cJSON *t, bool modern)
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
        cJSON_AddNumberToObject(o, modern ? "ttlMs" : "ttl", cJSON_IsNumber(ttl) ? ttl->valuedouble : 0);
        cJSON_AddNumberToObject(o, modern ? "pollIntervalMs" : "pollInterval",
                                cJSON_IsNumber(poll) ? poll->valuedouble : 1000);
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
        if (c->modern) {
                r->raw = task_from_api(res, true);
                r->raw_type = "task";
        } else {
                r->raw = cJSON_CreateObject();
                cJSON_AddItemToObject(r->raw, "task", task_from_api(res, false));
        }
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
        cJSON_Delete(tr.links);
        cJSON_Delete(tr.content);
        free(tr.text);
        return out;
}

/* 2025-11-25 tasks/result: wait (long-polling the execution) until the task
 * ends, then answer what the call would have, tagged with its task. Takes t. */
static void legacy_result(struct mcp_call *c, struct mcp_api *a, const char *task_id, cJSON *t,
                          struct mcp_tool_result *r)
{
        struct mcp_api_error e = {0};
        cJSON *params, *res = NULL, *result;
        int k;

        while (strcmp(str(t, "status"), "working") == 0) {
                params = cJSON_CreateObject();
                cJSON_AddStringToObject(params, "session", str(t, "session"));
                cJSON_AddStringToObject(params, "execution_id", str(t, "execution_id"));
                cJSON_AddNumberToObject(params, "wait", 30);
                k = mcp_api_request(a, c->m->token, "get_execution", params, 30000 + TASK_REQUEST_TIMEOUT_MS, NULL,
                                    NULL, &res, &e);
                cJSON_Delete(params);
                cJSON_Delete(res);
                res = NULL;
                if (mcp_call_cancelled(c)) {
                        r->suppress = true;
                        cJSON_Delete(t);
                        return;
                }
                params = cJSON_CreateObject();
                cJSON_AddStringToObject(params, "task_id", task_id);
                if (k == 0)
                        k = mcp_api_request(a, c->m->token, "get_task", params, TASK_REQUEST_TIMEOUT_MS, NULL, NULL,
                                            &res, &e);
                cJSON_Delete(params);
                if (k < 0) {
                        api_error(r, task_id, &e);
                        cJSON_Delete(t);
                        return;
                }
                cJSON_Delete(t);
                t = res;
                res = NULL;
        }
        if (strcmp(str(t, "status"), "failed") == 0) {
                rpc_error(r, MCP_INTERNAL_ERROR, "%.200s", str(t, "status_message"));
                cJSON_Delete(t);
                return;
        }
        /* completed, or cancelled: the execution's own result says how it ended */
        result = task_result(c, a, t, &e);
        cJSON_Delete(t);
        if (!result) {
                api_error(r, task_id, &e);
                return;
        }
        cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(result, "_meta"),
                                                        "io.modelcontextprotocol/related-task"),
                                "taskId", task_id);
        r->raw = result;
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
        if (k == -EREMOTEIO && strcmp(e.code, "already_finished") == 0) {
                /* the extension acknowledges anyway; 2025-11-25 refuses a terminal task */
                if (c->modern)
                        r->raw = cJSON_CreateObject();
                else
                        rpc_error(r, MCP_INVALID_PARAMS, "task %.64s has already ended", task_id);
                goto out;
        }
        if (k < 0) {
                api_error(r, task_id, &e);
                goto out;
        }
        if (strcmp(c->tool, "tasks/cancel") == 0)
                log_info("mcp: task %s cancelled", task_id);
        if (c->modern && strcmp(c->tool, "tasks/get") != 0) {
                /* tasks/cancel and tasks/update: an empty acknowledgement */
                r->raw = cJSON_CreateObject();
                goto out;
        }
        if (!c->modern) {
                /* tasks/get and tasks/cancel: the Task; tasks/result: the call's own answer */
                if (strcmp(c->tool, "tasks/result") == 0) {
                        legacy_result(c, a, task_id, res, r);
                        res = NULL;
                } else
                        r->raw = task_from_api(res, false);
                goto out;
        }
        r->raw = task_from_api(res, true);
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
                cJSON_AddStringToObject(er, "message",
                                        *str(res, "status_message") ? str(res, "status_message") : "the task failed");
        }
out:
        mcp_call_detach(c);
        cJSON_Delete(res);
        mcp_api_close(a);
}
