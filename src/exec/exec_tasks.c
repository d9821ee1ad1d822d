/* exec_tasks.c — tasks: durable handles on one execution each (the MCP tasks
 * extension's, io.modelcontextprotocol/tasks; the mcp_tasks table, migration
 * 0013). The fronts show them (api_tasks.c); this file makes, reads and
 * cancels them, so no front reaches the store for them.
 *
 * A task's status is derived from its execution's state each time it is
 * read, so nothing keeps it up to date. Tasks belong to a user: another
 * user's task id is -ENOENT, exactly like an unknown or expired one. Each
 * user holds at most EXEC_TASKS_PER_USER live tasks (EXEC_TASKS_MAX in all);
 * a task lives EXEC_TASK_TTL_MS from its creation, and expired rows are
 * deleted at the next creation (and by `sandboxd --gc`). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "exec_internal.h"
#include "sandboxd/log.h"
#include "sandboxd/store.h"

bool exec_task_id_valid(const char *id)
{
        size_t n = id ? strlen(id) : 0;

        if (n != 32)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
                        return false;
        return true;
}

int exec_task_create(struct exec_registry *e, const char *user, const char *session, const char *execution_id,
                     const char *tool, struct store_task *ret, struct sbx_error *err)
{
        struct store_task t = {0};
        struct exec_result res;
        int r;

        if (strcmp(tool, "exec") != 0 && strcmp(tool, "run_code") != 0)
                return sbx_error_set(err, -EINVAL, 0, "params.tool must be exec or run_code");
        if (strlen(execution_id) >= sizeof(t.execution_id))
                return sbx_error_set(err, -EINVAL, 0, "params.execution_id is too long");
        r = exec_status(e, user, execution_id, EXEC_OFFSET_NONE, EXEC_OFFSET_NONE, 1, 0, &res, err);
        if (r < 0)
                return r;
        r = strcmp(res.session, session);
        exec_result_done(&res);
        if (r != 0)
                return sbx_error_set(err, -ENOENT, 0, "no execution %s in session %s", execution_id, session);

        if (sbx_random_hex(t.task_id, 16) < 0)
                return sbx_error_set(err, -ENOMEM, 0, "no randomness for a task id");
        snprintf(t.user_id, sizeof(t.user_id), "%s", user);
        snprintf(t.session_id, sizeof(t.session_id), "%s", session);
        snprintf(t.execution_id, sizeof(t.execution_id), "%s", execution_id);
        snprintf(t.tool, sizeof(t.tool), "%s", tool);
        t.ttl_ms = EXEC_TASK_TTL_MS;
        t.poll_interval_ms = EXEC_TASK_POLL_MS;
        t.created_at = t.updated_at = sbx_wall_ms();
        t.expires_at = t.created_at + t.ttl_ms;
        r = store_task_add(e->store, &t, t.created_at, EXEC_TASKS_PER_USER, EXEC_TASKS_MAX);
        if (r == -EDQUOT)
                return sbx_error_set(err, -EBUSY, 0,
                                     "too many live tasks (at most %d per user): follow or cancel some first",
                                     EXEC_TASKS_PER_USER);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot record the task: %s", strerror(-r));
        *ret = t;
        return 0;
}

int exec_task_get(struct exec_registry *e, const char *user, const char *task_id, struct store_task *ret,
                  struct sbx_error *err)
{
        int r;

        if (!exec_task_id_valid(task_id))
                return sbx_error_set(err, -ENOENT, 0, "no task %.64s", task_id ? task_id : "");
        r = store_task_get(e->store, user, task_id, sbx_wall_ms(), ret);
        if (r == -ENOENT)
                return sbx_error_set(err, r, 0, "no task %s", task_id);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot read the task: %s", strerror(-r));
        return 0;
}

int exec_task_cancel(struct exec_registry *e, const char *user, struct store_task *t, struct sbx_error *err)
{
        struct exec_result res;
        struct sbx_error cerr = {0};
        int r;

        if (t->cancel_requested)
                return sbx_error_set(err, -EALREADY, 0, "task %s is already cancelled", t->task_id);
        if (exec_status(e, user, t->execution_id, EXEC_OFFSET_NONE, EXEC_OFFSET_NONE, 1, 0, &res, &cerr) == 0) {
                bool final = exec_state_is_final(res.state);
                exec_result_done(&res);
                if (final)
                        return sbx_error_set(err, -EALREADY, 0, "task %s has already ended", t->task_id);
        }
        r = store_task_mark_cancel(e->store, user, t->task_id, sbx_wall_ms());
        if (r < 0 && r != -ENOENT)
                return sbx_error_set(err, r, 0, "cannot record the cancel: %s", strerror(-r));
        t->cancel_requested = true;
        cerr = (struct sbx_error){0};
        r = exec_cancel(e, user, t->execution_id, false, &cerr);
        if (r < 0 && r != -ENOENT && r != -EALREADY)
                log_ctx(LOG_LEVEL_WARN, user, t->session_id, NULL, "exec: cancel of task %s: %s", t->task_id,
                        cerr.msg[0] ? cerr.msg : strerror(-r));
        return 0;
}
