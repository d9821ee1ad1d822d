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
#include "sandboxd/egress.h"
#include "sandboxd/secrets_ca.h"

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

static void on_cell_start(void *ud, const char *execution_id)
{
        struct api_req *q = ud;
        cJSON *ev = cJSON_CreateObject();

        cJSON_AddStringToObject(ev, "execution_id", execution_id);
        api_send_event(q, "started", ev);
        cJSON_Delete(ev);
}

int api_cell_cancel(struct api_req *q, const char *id, bool force, cJSON **ret, struct fronterr *e)
{
        struct sbx_error err = {0};
        int wait_ms = q->d->cfg.cells_interrupt_grace_ms + 15000; /* interrupt, grace, kill */
        int r = cells_cancel(q->d->cells, q->tok.user, q->session, id, force, wait_ms, ret, &err);

        if (r == -ENOENT)
                return 1;
        if (r < 0)
                return fronterr_errno(e, r, &err, "cancel_execution");
        cJSON_AddStringToObject(*ret, "session", q->session);
        return 0;
}

int api_cell_execution(struct api_req *q, const char *id, const int64_t offsets[3], bool base64, int64_t wait_s,
                       cJSON **ret, struct fronterr *e)
{
        struct cells_execution_view v;
        struct sbx_error err = {0};
        int64_t until = sbx_now_ms() + wait_s * 1000;
        size_t max = (size_t)q->d->cfg.exec_result_head_bytes * 2;
        cJSON *o;
        int r;

        for (;;) {
                bool more = false;
                r = cells_execution(q->d->cells, q->tok.user, q->session, id, offsets, max, &v, &err);
                if (r == -ENOENT)
                        return 1;
                if (r < 0)
                        return fronterr_errno(e, r, &err, "get_execution");
                for (int k = 0; k < CELLS_STREAMS; k++)
                        more = more || v.len[k] > 0;
                if (v.final || more || sbx_now_ms() >= until)
                        break;
                cells_execution_view_done(&v);
                if (api_should_abandon(q))
                        return -1;
                sbx_sleep_ms(100);
        }
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "execution_id", v.id);
        cJSON_AddStringToObject(o, "session", q->session);
        cJSON_AddStringToObject(o, "kind", "cell");
        cJSON_AddStringToObject(o, "context", v.context);
        /* the states of an execution, so that pollers and the MCP pages read it */
        cJSON_AddStringToObject(o, "state",
                                !v.final                                                           ? "running"
                                : strcmp(v.status, "cancelled") == 0                               ? "cancelled"
                                : strcmp(v.status, "timeout") == 0                                 ? "timeout"
                                : strcmp(v.status, "died") == 0 || strcmp(v.status, "failed") == 0 ? "failed"
                                                                                                   : "completed");
        cJSON_AddStringToObject(o, "status", v.status);
        cJSON_AddBoolToObject(o, "truncated", v.truncated);
        if (v.dropped)
                cJSON_AddTrueToObject(o, "output_dropped");
        cJSON_AddNumberToObject(o, "duration_ms", (double)v.duration_ms);
        cJSON_AddNumberToObject(o, "created_at", (double)v.created_at);
        cJSON_AddStringToObject(o, "encoding", base64 ? "base64" : "utf8");
        for (int k = 0; k < CELLS_STREAMS; k++) {
                static const char *const names[CELLS_STREAMS] = {"stdout", "stderr", "outputs"};
                char key[40];
                snprintf(key, sizeof(key), "%s_bytes", names[k]);
                cJSON_AddNumberToObject(o, key, (double)v.total[k]);
                if (offsets[k] < 0)
                        continue;
                api_add_bytes(o, names[k], v.data[k] ? v.data[k] : "", v.len[k], base64);
                snprintf(key, sizeof(key), "%s_offset", names[k]);
                cJSON_AddNumberToObject(o, key, (double)v.offset[k]);
                snprintf(key, sizeof(key), "%s_next_offset", names[k]);
                cJSON_AddNumberToObject(o, key, (double)(v.offset[k] + v.len[k]));
        }
        cells_execution_view_done(&v);
        *ret = o;
        return 0;
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
        size_t n_env = 0, n_req;
        struct egress_secret *mask = NULL;
        size_t n_mask = 0;
        int64_t timeout;
        bool stream;
        _cleanup_free_ struct egress_net *net = NULL;
        struct sbx_error err = {0};
        int r = -1;

        if (jparam_string(&q->args, "code", true, &code, e) < 0 ||
            jparam_string(&q->args, "language", false, &language, e) < 0 || p_context(q, &context, e) < 0 ||
            jparam_int(&q->args, "timeout_seconds", 0, q->d->cfg.exec_timeout_max_s, 0, &timeout, e) < 0 ||
            jparam_bool(&q->args, "stream", false, &stream, e) < 0 || api_param_network(q, &net, e) < 0)
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
        /* the session's environment, as an exec of it gets (issue 37): after the request's own,
         * which wins; and its secrets' values, masked in the cell's outputs */
        n_req = n_env;
        /* with secrets on, the session first: its runner directory takes the CA bundle (sessenv.h);
         * without, the cell acquires it as ever (cells.h) */
        if (q->d->secrets && (r = api_preflight_session(q, e)) < 0)
                goto out;
        r = api_agent_default_env(q, env, env_buf, &n_env, API_CELL_MAX_ENV, e);
        if (r < 0)
                goto out;
        env[n_env] = NULL;
        if (q->d->secrets &&
            secrets_egress_attached(q->d->secrets, q->d->store, q->tok.user, q->session, &mask, &n_mask) < 0) {
                r = fronterr_set(e, "internal", "cannot read the session's secrets");
                goto out;
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
                        .session_env = n_env > n_req ? env + n_req : NULL,
                        .mask = mask,
                        .n_mask = n_mask,
                        .actor = q->actor,
                        .network = net,
                        .on_output = stream ? on_cell_output : NULL,
                        .on_start = stream ? on_cell_start : NULL,
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
        egress_secrets_free(mask, n_mask);
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
