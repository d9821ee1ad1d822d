/* api_cells.c — run_cell and the interpreter contexts (issue 25) on the
 * API: run_cell, list_contexts, restart_context, delete_context,
 * get_variables, interrupt_cell, last_cell. Parameters are checked here; the contexts
 * are cells.c's. Every method acts for the token's user and params.session
 * only. run_cell with params.stream sends each output as it comes:
 * {"event": "output", "stream", "data"} for stream text (as exec does) and
 * {"event": "display", "output": {...}} for the rest. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "sandboxd/cells.h"
#include "sandboxd/daemon.h"

#define API_CELL_MAX_ENV 256

static void on_cell_output(void *ud, const cJSON *o)
{
        struct api_req *q = ud;
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");

        if (cJSON_IsString(type) && strcmp(type->valuestring, "stream") == 0) {
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
                const cJSON *text = cJSON_GetObjectItemCaseSensitive(o, "text");
                cJSON *ev = cJSON_CreateObject();
                cJSON_AddItemToObject(ev, "stream", cJSON_Duplicate(name, true));
                cJSON_AddItemToObject(ev, "data", cJSON_Duplicate(text, true));
                api_send_event(q, "output", ev); /* the shape exec's progress has */
                cJSON_Delete(ev);
                return;
        }
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddItemToObject(ev, "output", cJSON_Duplicate(o, true));
        api_send_event(q, "display", ev);
        cJSON_Delete(ev);
}

static int p_context(struct api_req *q, const char **ret, struct fronterr *e)
{
        if (jparam_string(&q->args, "context", false, ret, e) < 0)
                return -1;
        if (*ret && !cells_name_valid(*ret))
                return fronterr_set(e, "invalid", "params.context must be 1-%d of [A-Za-z0-9_.-]", CELLS_NAME_MAX);
        return 0;
}

int api_m_run_cell(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *code, *language, *context;
        const cJSON *env_obj = cJSON_GetObjectItemCaseSensitive(q->params, "env"), *it;
        const char *env[API_CELL_MAX_ENV + 1] = {0};
        char *env_buf[API_CELL_MAX_ENV] = {0};
        size_t n_env = 0;
        int64_t timeout;
        bool stream;
        struct sbx_error err = {0};
        int r = -1;

        if (jparam_string(&q->args, "code", true, &code, e) < 0 ||
            jparam_string(&q->args, "language", false, &language, e) < 0 || p_context(q, &context, e) < 0 ||
            jparam_int(&q->args, "timeout_seconds", 0, q->d->cfg.exec_timeout_max_s, 0, &timeout, e) < 0 ||
            jparam_bool(&q->args, "stream", false, &stream, e) < 0)
                return -1;
        if (language && strcmp(language, "python3") == 0)
                language = "python";
        if (language && (strcmp(language, "javascript") == 0 || strcmp(language, "js") == 0))
                language = "node";
        if (language && strcmp(language, "python") != 0 && strcmp(language, "node") != 0)
                return fronterr_set(e, "invalid", "params.language must be python or node");
        if (env_obj && !cJSON_IsNull(env_obj)) {
                if (!cJSON_IsObject(env_obj))
                        return fronterr_set(e, "bad_request", "params.env must be an object of strings");
                cJSON_ArrayForEach(it, env_obj) {
                        if (!cJSON_IsString(it)) {
                                r = fronterr_set(e, "bad_request", "params.env values must be strings");
                                goto out;
                        }
                        if (n_env >= API_CELL_MAX_ENV) {
                                r = fronterr_set(e, "too_large", "params.env has more than %d entries",
                                                 API_CELL_MAX_ENV);
                                goto out;
                        }
                        if (asprintf(&env_buf[n_env], "%s=%s", it->string, it->valuestring) < 0) {
                                env_buf[n_env] = NULL;
                                r = fronterr_set(e, "internal", "out of memory");
                                goto out;
                        }
                        env[n_env] = env_buf[n_env];
                        n_env++;
                }
        }
        {
                struct cells_request req = {
                        .user = q->tok.user,
                        .session = q->session,
                        .context = context,
                        .language = language,
                        .code = code,
                        .timeout_s = (int)timeout,
                        .env = n_env ? env : NULL,
                        .actor = q->actor,
                        .on_output = stream ? on_cell_output : NULL,
                        .userdata = q,
                };
                r = cells_run(q->d->cells, &req, ret, &err);
                if (r < 0)
                        r = fronterr_errno(e, r, &err, "run_cell");
                else {
                        cJSON_AddStringToObject(*ret, "session", q->session);
                        r = 0;
                }
        }
out:
        for (size_t i = 0; i < n_env; i++)
                free(env_buf[i]);
        return r;
}

int api_m_list_contexts(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        struct sbx_error err = {0};
        cJSON *a = NULL;
        int r = cells_list(q->d->cells, q->tok.user, q->session, &a, &err);

        if (r < 0)
                return fronterr_errno(e, r, &err, "list_contexts");
        *ret = cJSON_CreateObject();
        cJSON_AddItemToObject(*ret, "contexts", a);
        return 0;
}

int api_m_restart_context(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *context;
        struct sbx_error err = {0};
        int r;

        if (p_context(q, &context, e) < 0)
                return -1;
        r = cells_restart(q->d->cells, q->tok.user, q->session, context, ret, &err);
        return r < 0 ? fronterr_errno(e, r, &err, "restart_context") : 0;
}

int api_m_delete_context(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *context;
        struct sbx_error err = {0};
        int r;

        if (p_context(q, &context, e) < 0)
                return -1;
        r = cells_delete(q->d->cells, q->tok.user, q->session, context, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, "delete_context");
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "context", context ? context : CELLS_DEFAULT);
        cJSON_AddTrueToObject(*ret, "deleted");
        return 0;
}

int api_m_get_variables(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *context;
        struct sbx_error err = {0};
        int r;

        if (p_context(q, &context, e) < 0)
                return -1;
        r = cells_variables(q->d->cells, q->tok.user, q->session, context, ret, &err);
        return r < 0 ? fronterr_errno(e, r, &err, "get_variables") : 0;
}

int api_m_last_cell(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *context;
        int64_t wait_s;
        struct sbx_error err = {0};
        int r;

        if (p_context(q, &context, e) < 0 || jparam_int(&q->args, "wait_seconds", 0, 60, 0, &wait_s, e) < 0)
                return -1;
        r = cells_last(q->d->cells, q->tok.user, q->session, context, (int)wait_s * 1000, ret, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, "last_cell");
        cJSON_AddStringToObject(*ret, "session", q->session);
        return 0;
}

int api_m_interrupt_cell(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *context;
        struct sbx_error err = {0};
        int r;

        if (p_context(q, &context, e) < 0)
                return -1;
        r = cells_interrupt(q->d->cells, q->tok.user, q->session, context, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, "interrupt_cell");
        *ret = cJSON_CreateObject();
        cJSON_AddTrueToObject(*ret, "interrupted");
        return 0;
}
