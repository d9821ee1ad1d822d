/* api_tasks.c — the API methods behind the MCP tasks extension
 * (io.modelcontextprotocol/tasks): create_task, get_task, cancel_task.
 *
 * A task is a durable handle on one execution that an MCP tool call
 * started; the exec module keeps them (exec_tasks.c: ownership, caps, expiry,
 * cancel). This file reads params and shows a task with its status, derived
 * from its execution's state each time it is read.
 *
 * These methods are registered through api_tasks_method_find (called by
 * api_method_find); get_task and cancel_task need no params.session. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/exec.h"
#include "sandboxd/log.h"
#include "sandboxd/store.h"

static int p_str(struct api_req *q, const char *name, size_t max, const char **ret, struct fronterr *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->params, name);

        if (!cJSON_IsString(v) || !v->valuestring[0])
                return fronterr_set(e, "bad_request", "params.%s must be a non-empty string", name);
        if (strlen(v->valuestring) > max)
                return fronterr_set(e, "invalid", "params.%s is too long", name);
        *ret = v->valuestring;
        return 0;
}

/* The task with its status, from the execution's current state. */
static cJSON *task_json(struct api_req *q, const struct store_task *t)
{
        struct exec_result res;
        struct sbx_error err = {0};
        const char *status, *msg = NULL;
        char buf[160];
        int64_t updated = t->updated_at;
        cJSON *o = cJSON_CreateObject();
        int r;

        r = exec_status(q->d->exec, q->tok.user, t->execution_id, API_OFFSET_NONE, API_OFFSET_NONE, 1, 0, &res, &err);
        if (r < 0) {
                status = "failed";
                msg = "the execution behind this task is gone";
                cJSON_AddNullToObject(o, "execution_state");
        } else {
                if (t->cancel_requested) {
                        /* accepted while it ran: cancelled for good, however it ended */
                        status = "cancelled";
                        snprintf(buf, sizeof(buf), "cancelled at the client's request (execution %s)", res.id);
                } else if (!exec_state_is_final(res.state)) {
                        status = "working";
                        snprintf(buf, sizeof(buf), "execution %s is %s", res.id, exec_state_to_string(res.state));
                } else if (res.state == EXEC_CANCELLED) {
                        status = "cancelled";
                        snprintf(buf, sizeof(buf), "execution %s was cancelled", res.id);
                } else {
                        /* ran to an end, even a failing one: the tool result says how */
                        status = "completed";
                        snprintf(buf, sizeof(buf), "execution %s ended: %s", res.id, exec_state_to_string(res.state));
                }
                msg = buf;
                if (exec_state_is_final(res.state) && res.created_at + res.duration_ms > updated)
                        updated = res.created_at + res.duration_ms;
                cJSON_AddStringToObject(o, "execution_state", exec_state_to_string(res.state));
                exec_result_done(&res);
        }
        cJSON_AddStringToObject(o, "task_id", t->task_id);
        cJSON_AddStringToObject(o, "session", t->session_id);
        cJSON_AddStringToObject(o, "execution_id", t->execution_id);
        cJSON_AddStringToObject(o, "tool", t->tool);
        cJSON_AddStringToObject(o, "status", status);
        cJSON_AddStringToObject(o, "status_message", msg);
        cJSON_AddNumberToObject(o, "ttl_ms", (double)t->ttl_ms);
        cJSON_AddNumberToObject(o, "poll_interval_ms", (double)t->poll_interval_ms);
        cJSON_AddNumberToObject(o, "created_at", (double)t->created_at);
        cJSON_AddNumberToObject(o, "updated_at", (double)updated);
        cJSON_AddNumberToObject(o, "expires_at", (double)t->expires_at);
        cJSON_AddBoolToObject(o, "cancel_requested", t->cancel_requested);
        return o;
}

static int m_create_task(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *exec_id, *tool;
        struct store_task t = {0};
        struct sbx_error err = {0};
        int r;

        if (p_str(q, "execution_id", sizeof(t.execution_id) - 1, &exec_id, e) < 0 ||
            p_str(q, "tool", sizeof(t.tool) - 1, &tool, e) < 0)
                return -1;
        r = exec_task_create(q->d->exec, q->tok.user, q->session, exec_id, tool, &t, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = task_json(q, &t);
        return 0;
}

static int own_task(struct api_req *q, struct store_task *t, struct fronterr *e)
{
        const char *id;
        struct sbx_error err = {0};
        int r;

        if (p_str(q, "task_id", 64, &id, e) < 0)
                return -1;
        r = exec_task_get(q->d->exec, q->tok.user, id, t, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        return 0;
}

static int m_get_task(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        struct store_task t;

        if (own_task(q, &t, e) < 0)
                return -1;
        *ret = task_json(q, &t);
        return 0;
}

/* A task already cancelled, or whose execution already ended, cannot be
 * cancelled (already_finished); otherwise the cancel is recorded, which makes
 * the task cancelled for good, and the execution is cancelled (exec_tasks.c). */
static int m_cancel_task(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        struct store_task t;
        struct sbx_error err = {0};
        int r;

        if (own_task(q, &t, e) < 0)
                return -1;
        r = exec_task_cancel(q->d->exec, q->tok.user, &t, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = task_json(q, &t);
        return 0;
}

/* The tasks methods, documented like api_methods.c's table (docs/api.md). */
// clang-format off
static const struct {
        struct api_method_doc doc;
        bool sessionless;
} task_methods[] = {
        {{"create_task", m_create_task,
          "{execution_id, tool: exec|run_code}",
          "a task: {task_id, session, execution_id, tool, status, status_message, execution_state, ttl_ms, poll_interval_ms, created_at, updated_at, expires_at, cancel_requested}",
          "Make an MCP task handle for a running execution, recorded in the store. A task lives an hour; a user holds at most 64 live ones (busy past that)."},
         false},
        {{"get_task", m_get_task,
          "{task_id}",
          "a task; status is working, completed, cancelled or failed (only when the execution is gone)",
          "Read a task and the state of the execution behind it (no params.session)."},
         true},
        {{"cancel_task", m_cancel_task,
          "{task_id}",
          "the task, cancelled from now on",
          "Cancel a task and its execution (no params.session); already_finished if it had ended or was cancelled."},
         true},
};
// clang-format on

api_method_fn api_tasks_method_find(const char *name)
{
        for (size_t i = 0; i < ELEMENTSOF(task_methods); i++)
                if (strcmp(task_methods[i].doc.name, name) == 0)
                        return task_methods[i].doc.fn;
        return NULL;
}

const struct api_method_doc *api_tasks_method_doc_at(size_t i)
{
        return i < ELEMENTSOF(task_methods) ? &task_methods[i].doc : NULL;
}

bool api_tasks_sessionless(const char *name)
{
        for (size_t i = 0; name && i < ELEMENTSOF(task_methods); i++)
                if (strcmp(task_methods[i].doc.name, name) == 0)
                        return task_methods[i].sessionless;
        return false;
}
