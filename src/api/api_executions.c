/* api_executions.c — the API methods about executions (protocol in
 * include/sandboxd/api.h): exec, run_code, get_execution, send_stdin,
 * resize_terminal, cancel_execution and list_executions, with the
 * execution's JSON form and the reply that waits for (and streams) its end.
 * Every method acts for the token's user only (q->tok.user) and within
 * params.session (q->session). No state and no threads of its own; waiting
 * and streaming are api.c's, the other methods api_methods.c's. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/exec.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/launch.h"
#include "sandboxd/log.h"
#include "sandboxd/utf8.h"

#define API_MAX_ENV 256
#define API_LIST_MAX 1000
#define API_WAIT_MAX_S 60           /* the longest long-poll: get_execution wait: true */
#define STDIN_PENDING_WAIT_MS 60000 /* a pending execution may still be creating its container */

/* ---- parameters and formatting ---- */

/* params.wait: seconds (0 to API_WAIT_MAX_S), or true for the longest
 * wait and false for none, as the seeds' agents poll. */
static int p_wait(struct api_req *q, int64_t *ret, struct fronterr *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->params, "wait");

        if (cJSON_IsBool(v)) {
                *ret = cJSON_IsTrue(v) ? API_WAIT_MAX_S : 0;
                return 0;
        }
        if (v && !cJSON_IsNull(v) && !cJSON_IsNumber(v))
                return fronterr_set(e, "bad_request", "params.wait must be a number of seconds or a boolean");
        return jparam_int(&q->args, "wait", 0, API_WAIT_MAX_S, 0, ret, e);
}

/* head + "\n...[N bytes omitted]...\n" + tail, where N counts every byte
 * the two leave out (including bytes past the spool cap). */
static void add_stream(cJSON *o, const char *key, const char *head, size_t head_len, const char *tail, size_t tail_len,
                       uint64_t total, bool base64)
{
        uint64_t omitted = total > head_len + tail_len ? total - head_len - tail_len : 0;
        char marker[64] = "";
        size_t ml = 0, n;
        _cleanup_free_ char *buf = NULL;

        if (omitted > 0)
                ml = (size_t)snprintf(marker, sizeof(marker), "\n...[%" PRIu64 " bytes omitted]...\n", omitted);
        if (base64) {
                n = head_len + ml + tail_len;
                buf = malloc(n + 1);
                if (!buf)
                        return;
                memcpy(buf, head, head_len);
                memcpy(buf + head_len, marker, ml);
                memcpy(buf + head_len + ml, tail, tail_len);
                api_add_bytes(o, key, buf, n, true);
                return;
        }
        /* sanitised apart, so the marker stays intact between them */
        _cleanup_free_ char *h = utf8_sanitize(head ? head : "", head_len);
        _cleanup_free_ char *t = utf8_sanitize(tail ? tail : "", tail_len);
        if (!h || !t)
                return;
        if (asprintf(&buf, "%s%s%s", h, marker, t) < 0) {
                buf = NULL;
                return;
        }
        cJSON_AddStringToObject(o, key, buf);
}

static void add_exec_common(cJSON *o, const struct exec_result *r)
{
        cJSON_AddStringToObject(o, "execution_id", r->id);
        cJSON_AddStringToObject(o, "session", r->session);
        jsonutil_add_lower(o, "state", exec_state_to_string(r->state));
        if (r->exit_code >= 0 && r->cause == EXEC_CAUSE_EXITED)
                cJSON_AddNumberToObject(o, "exit_code", r->exit_code);
        else
                cJSON_AddNullToObject(o, "exit_code");
        jsonutil_add_text(o, "cause", exec_cause_to_string(r->cause));
        jsonutil_add_text(o, "error", r->error);
        cJSON_AddNumberToObject(o, "stdout_bytes", (double)r->stdout_bytes);
        cJSON_AddNumberToObject(o, "stderr_bytes", (double)r->stderr_bytes);
        cJSON_AddBoolToObject(o, "truncated", r->truncated);
        cJSON_AddNumberToObject(o, "duration_ms", (double)r->duration_ms);
        cJSON_AddNumberToObject(o, "created_at", (double)r->created_at);
        jsonutil_add_text(o, "via", r->via);
        cJSON_AddBoolToObject(o, "tty", r->tty);
        if (r->cpu_user_ms >= 0) {
                cJSON *u = cJSON_AddObjectToObject(o, "usage");
                cJSON_AddNumberToObject(u, "cpu_user_ms", (double)r->cpu_user_ms);
                cJSON_AddNumberToObject(u, "cpu_system_ms", (double)r->cpu_system_ms);
                cJSON_AddNumberToObject(u, "max_rss_kb", (double)r->max_rss_kb);
        } else {
                cJSON_AddNullToObject(o, "usage");
        }
        if (r->image[0]) {
                cJSON *p = cJSON_AddObjectToObject(o, "provenance");
                jsonutil_add_text(p, "image", r->image);
                jsonutil_add_text(p, "runtime", r->runtime);
                jsonutil_add_text(p, "runner_version", r->runner_version);
        } else {
                cJSON_AddNullToObject(o, "provenance");
        }
}

/* A full result (head and tail), or with offsets the chunk from each. */
static cJSON *exec_json(const struct exec_result *r, bool base64, bool out_offset, bool err_offset)
{
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return NULL;
        add_exec_common(o, r);
        cJSON_AddStringToObject(o, "encoding", base64 ? "base64" : "utf8");
        if (out_offset) {
                api_add_bytes(o, "stdout", r->stdout_head, r->stdout_head_len, base64);
                cJSON_AddNumberToObject(o, "stdout_offset", (double)r->stdout_offset);
                cJSON_AddNumberToObject(o, "stdout_next_offset", (double)(r->stdout_offset + r->stdout_head_len));
        } else {
                add_stream(o, "stdout", r->stdout_head, r->stdout_head_len, r->stdout_tail, r->stdout_tail_len,
                           r->stdout_bytes, base64);
        }
        if (err_offset) {
                api_add_bytes(o, "stderr", r->stderr_head, r->stderr_head_len, base64);
                cJSON_AddNumberToObject(o, "stderr_offset", (double)r->stderr_offset);
                cJSON_AddNumberToObject(o, "stderr_next_offset", (double)(r->stderr_offset + r->stderr_head_len));
        } else {
                add_stream(o, "stderr", r->stderr_head, r->stderr_head_len, r->stderr_tail, r->stderr_tail_len,
                           r->stderr_bytes, base64);
        }
        return o;
}

/* The execution, which must be the caller's and in the request's session. */
static int own_execution(struct api_req *q, const char *id, struct exec_result *ret, struct fronterr *e)
{
        struct sbx_error err = {0};
        int r = exec_status(q->d->exec, q->tok.user, id, API_OFFSET_NONE, API_OFFSET_NONE, 1, 0, ret, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        if (strcmp(ret->session, q->session) != 0) {
                exec_result_done(ret);
                return fronterr_set(e, "not_found", "no execution %s in session %s", id, q->session);
        }
        return 0;
}


/* After the start: background gives the id and state at once; otherwise
 * wait for the end (streaming into sink if any), then the full result. *res
 * (zeroed by the caller, who frees it) keeps what the answer was made of. */
static int execution_reply(struct api_req *q, const char *id, bool background, bool base64, struct api_sink *sink,
                           struct exec_result *res, cJSON **ret, struct fronterr *e)
{
        struct sbx_error err = {0};
        int r;

        if (!background) {
                r = api_wait_final(q, id, sink, -1, e);
                if (r <= 0) {
                        if (r == 0)
                                log_ctx(LOG_LEVEL_INFO, q->tok.user, q->session, NULL,
                                        "api: client left during execution %s; it runs on", id);
                        return r == 0 ? 1 : r;
                }
        }
        {
                /* background: the state only (cheap); otherwise the full result */
                int64_t off = background ? API_OFFSET_NONE : -1;
                r = exec_status(q->d->exec, q->tok.user, id, off, off, background ? 1 : 0, 0, res, &err);
        }
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        if (background) {
                *ret = cJSON_CreateObject();
                cJSON_AddStringToObject(*ret, "execution_id", id);
                jsonutil_add_lower(*ret, "state", exec_state_to_string(res->state));
        } else if (res->state == EXEC_FAILED && res->cause == EXEC_CAUSE_ERROR) {
                r = fronterr_set(e, "unavailable", "execution %s could not run: %s", id, res->error);
        } else {
                *ret = exec_json(res, base64, false, false);
        }
        return r;
}

/* run_code's answer to a run it waited for: what the script cache saved. */
static void add_cached(struct api_req *q, bool background, const struct exec_result *res, cJSON *ret)
{
        if (ret && !background)
                api_agent_add_cached(q, res, ret, true);
}

int api_execution_reply(struct api_req *q, const char *id, cJSON **ret, struct fronterr *e)
{
        struct exec_result res = {0};
        bool background, base64;
        int r;

        if (jparam_bool(&q->args, "background", false, &background, e) < 0 ||
            api_param_encoding(q, "encoding", &base64, e) < 0)
                return -1;
        if (own_execution(q, id, &res, e) < 0)
                return -1;
        exec_result_done(&res);
        res = (struct exec_result){0};
        r = execution_reply(q, id, background, base64, NULL, &res, ret, e);
        if (r == 0 && strcmp(q->method, "run_code") == 0)
                add_cached(q, background, &res, *ret);
        exec_result_done(&res);
        return r;
}

/* params.argv: an array of 1..EXEC_ARGV_MAX strings, borrowed into a
 * NULL-terminated vector (exec_start checks the words themselves). */
static int param_argv(const cJSON *a, const char ***ret, struct fronterr *e)
{
        int n = cJSON_GetArraySize(a), i = 0;
        const cJSON *it;
        const char **v;

        if (!cJSON_IsArray(a) || n < 1 || n > EXEC_ARGV_MAX)
                return fronterr_set(e, "bad_request", "params.argv must be an array of 1 to %d strings", EXEC_ARGV_MAX);
        v = calloc((size_t)n + 1, sizeof(*v));
        if (!v)
                return fronterr_set(e, "internal", "out of memory");
        cJSON_ArrayForEach(it, a) {
                if (!cJSON_IsString(it)) {
                        free(v);
                        return fronterr_set(e, "bad_request", "params.argv must be an array of strings");
                }
                v[i++] = it->valuestring;
        }
        *ret = v;
        return 0;
}

/* An exec or run_code call as its parameters say, each read and checked
 * once: the launch request (launch.h) and how to answer. */
struct exec_call {
        struct launch_request launch;
        const char *env[API_MAX_ENV + 1];
        char *env_buf[API_MAX_ENV];
        const char **argv;          /* malloc'd vector (its words are params') */
        struct egress_net *network; /* malloc'd, or NULL: the session's egress */
        bool background, stream, base64;
        struct api_sink *sink;  /* stream and not background: its output as it comes */
        struct exec_result res; /* what the reply was made of */
};

/* params.env: an object of strings, the request's own variables. */
static int param_env(const cJSON *o, struct sessenv_vec *v, struct fronterr *e)
{
        const cJSON *it;

        if (!o || cJSON_IsNull(o))
                return 0;
        if (!cJSON_IsObject(o))
                return fronterr_set(e, "bad_request", "params.env must be an object of strings");
        cJSON_ArrayForEach(it, o) {
                if (!cJSON_IsString(it) || !it->string)
                        return fronterr_set(e, "bad_request", "params.env values must be strings");
                if (v->n >= v->max)
                        return fronterr_set(e, "too_large", "params.env has more than %zu entries", v->max);
                if (asprintf(&v->buf[v->n], "%s=%s", it->string, it->valuestring) < 0) {
                        v->buf[v->n] = NULL;
                        return fronterr_set(e, "internal", "out of memory");
                }
                v->env[v->n] = v->buf[v->n];
                v->n++;
        }
        return 0;
}

/* Every parameter of exec (lang NONE) or run_code (code_override: a saved
 * script's code) into c, in the order the API has always checked them. */
static int parse_exec_call(struct api_req *q, enum exec_language lang, const char *code_override, struct exec_call *c,
                           struct fronterr *e)
{
        struct exec_request *x = &c->launch.exec;
        const cJSON *argv_obj = cJSON_GetObjectItemCaseSensitive(q->params, "argv");
        const char *stdin_s = NULL;
        int64_t timeout, rows, cols;

        c->launch.env = (struct sessenv_vec){c->env, c->env_buf, 0, API_MAX_ENV};
        *x = (struct exec_request){.user = q->tok.user, .session = q->session, .language = lang, .actor = q->actor};
        if (cJSON_IsNull(argv_obj))
                argv_obj = NULL;
        if (lang == EXEC_LANG_NONE) {
                if (jparam_string(&q->args, "command", argv_obj == NULL, &x->command, e) < 0)
                        return -1;
                if (argv_obj && (x->command || param_argv(argv_obj, &c->argv, e) < 0))
                        return x->command ? fronterr_set(e, "bad_request",
                                                         "params.command and params.argv exclude each other")
                                          : -1;
                x->argv = c->argv;
        } else if (code_override) {
                x->code = code_override;
        } else if (jparam_string(&q->args, "code", true, &x->code, e) < 0) {
                return -1;
        }
        if (jparam_int(&q->args, "timeout_seconds", 0, q->d->cfg.exec_timeout_max_s, 0, &timeout, e) < 0 ||
            jparam_string(&q->args, "workdir", false, &x->workdir, e) < 0 ||
            jparam_string(&q->args, "stdin", false, &stdin_s, e) < 0 ||
            jparam_bool(&q->args, "background", false, &c->background, e) < 0 ||
            jparam_bool(&q->args, "interactive", false, &x->interactive, e) < 0 ||
            jparam_bool(&q->args, "stream", false, &c->stream, e) < 0 ||
            api_param_encoding(q, "encoding", &c->base64, e) < 0 ||
            jparam_bool(&q->args, "tty", false, &x->tty, e) < 0 ||
            jparam_int(&q->args, "rows", 1, EXEC_TTY_MAX_ROWS, 24, &rows, e) < 0 ||
            jparam_int(&q->args, "cols", 1, EXEC_TTY_MAX_COLS, 80, &cols, e) < 0 ||
            api_param_network_parse(q, &c->network, e) < 0)
                return -1;
        x->timeout_s = (int)timeout;
        x->stdin_data = stdin_s;
        x->stdin_len = stdin_s ? strlen(stdin_s) : 0;
        x->rows = (int)rows;
        x->cols = (int)cols;
        x->network = c->network;
        return param_env(cJSON_GetObjectItemCaseSensitive(q->params, "env"), &c->launch.env, e);
}

/* exec and run_code up to the start: the parameters, the sink, one launch
 * (launch.h). */
static int start_call(struct api_req *q, enum exec_language lang, const char *code_override, struct exec_call *c,
                      char id[37], struct fronterr *e)
{
        struct sbx_error err = {0};
        int r = parse_exec_call(q, lang, code_override, c, e);

        if (r < 0)
                return r;
        if (c->stream && !c->background) {
                c->sink = api_sink_new();
                if (!c->sink)
                        return fronterr_set(e, "internal", "out of memory");
                c->launch.exec.on_output = api_sink_on_output;
                c->launch.exec.userdata = (void *)(uintptr_t)api_sink_handle(c->sink);
        }
        r = launch_exec(&q->d->launch, &c->launch, id, &err);
        return r < 0 ? fronterr_errno(e, r, &err, NULL) : 0;
}

static void exec_call_done(struct exec_call *c)
{
        api_sink_free(c->sink);
        launch_request_done(&c->launch);
        free(c->argv);
        free(c->network);
        exec_result_done(&c->res);
}

int api_m_exec(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        struct exec_call c = {0};
        char id[37];
        int r = start_call(q, EXEC_LANG_NONE, NULL, &c, id, e);

        if (r == 0) {
                api_idem_bind_execution(q, id);
                r = execution_reply(q, id, c.background, c.base64, c.sink, &c.res, ret, e);
        }
        exec_call_done(&c);
        return r;
}

/* run_code: an exec of code (code_override: a saved script's), with the
 * script cache around it (cache: remember the code for a run that passes). */
static int run_code(struct api_req *q, enum exec_language lang, const char *code_override, bool cache, cJSON **ret,
                    struct fronterr *e)
{
        struct exec_call c = {0};
        char id[37];
        int r = start_call(q, lang, code_override, &c, id, e);

        if (r == 0) {
                if (cache)
                        api_agent_note_run(q, id, lang, c.launch.exec.code);
                api_idem_bind_execution(q, id);
                r = execution_reply(q, id, c.background, c.base64, c.sink, &c.res, ret, e);
                if (r == 0)
                        add_cached(q, c.background, &c.res, *ret);
        }
        exec_call_done(&c);
        return r;
}

int api_m_run_code(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *language, *script, *code;
        enum exec_language lang;
        bool cache;

        if (jparam_string(&q->args, "script", false, &script, e) < 0 ||
            jparam_bool(&q->args, "cache", true, &cache, e) < 0)
                return -1;
        if (script) {
                /* a saved script: its own language and code */
                _cleanup_free_ char *saved = NULL;
                int r;
                if (jparam_string(&q->args, "code", false, &code, e) < 0)
                        return -1;
                if (code)
                        return fronterr_set(e, "invalid", "params.code and params.script exclude each other");
                if (api_agent_script_code(q, script, &lang, &saved, e) < 0)
                        return -1;
                r = run_code(q, lang, saved, cache, ret, e);
                return r;
        }
        if (jparam_string(&q->args, "language", true, &language, e) < 0)
                return -1;
        if (strcmp(language, "python") == 0 || strcmp(language, "python3") == 0)
                lang = EXEC_LANG_PYTHON;
        else if (strcmp(language, "node") == 0 || strcmp(language, "javascript") == 0)
                lang = EXEC_LANG_NODE;
        else if (strcmp(language, "bash") == 0)
                lang = EXEC_LANG_BASH;
        else
                return fronterr_set(e, "invalid", "params.language must be python, node or bash");
        return run_code(q, lang, NULL, cache, ret, e);
}

int api_m_get_execution(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *id;
        int64_t wait_s, out_off, err_off, outputs_off;
        bool base64;
        struct exec_result res;
        struct sbx_error err = {0};
        int64_t until;
        int r;

        if (jparam_string(&q->args, "execution_id", true, &id, e) < 0 || p_wait(q, &wait_s, e) < 0 ||
            jparam_int(&q->args, "stdout_offset", 0, INT64_MAX / 4, -1, &out_off, e) < 0 ||
            jparam_int(&q->args, "stderr_offset", 0, INT64_MAX / 4, -1, &err_off, e) < 0 ||
            jparam_int(&q->args, "outputs_offset", 0, INT64_MAX / 4, -1, &outputs_off, e) < 0 ||
            api_param_encoding(q, "encoding", &base64, e) < 0)
                return -1;
        {
                /* a run_cell cell is read the same way (outputs_offset: its other outputs) */
                const int64_t offs[3] = {out_off, err_off, outputs_off};
                r = api_cell_execution(q, id, offs, base64, wait_s, ret, e);
                if (r <= 0)
                        return r;
        }
        if (own_execution(q, id, &res, e) < 0)
                return -1;
        exec_result_done(&res);

        /* Long-poll in slices so a departed client or a stop is noticed. */
        until = sbx_now_ms() + wait_s * 1000;
        for (;;) {
                int64_t left = until - sbx_now_ms();
                int slice = left <= 0 ? 0 : left < API_WAIT_SLICE_MS ? (int)left : API_WAIT_SLICE_MS;
                bool done;

                r = exec_status(q->d->exec, q->tok.user, id, out_off, err_off, 0, slice, &res, &err);
                if (r < 0)
                        return fronterr_errno(e, r, &err, NULL);
                done = exec_state_is_final(res.state) || slice == 0 || (out_off >= 0 && res.stdout_head_len > 0) ||
                       (err_off >= 0 && res.stderr_head_len > 0);
                if (done)
                        break;
                exec_result_done(&res);
                if (api_should_abandon(q))
                        return 1;
        }
        *ret = exec_json(&res, base64, out_off >= 0, err_off >= 0);
        if (*ret)
                api_agent_add_cached(q, &res, *ret, false);
        exec_result_done(&res);
        return 0;
}

int api_m_send_stdin(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *id;
        bool eof, base64;
        _cleanup_free_ unsigned char *data = NULL;
        size_t len = 0;
        struct exec_result res;
        struct sbx_error err = {0};
        int r;

        if (jparam_string(&q->args, "execution_id", true, &id, e) < 0 ||
            jparam_bool(&q->args, "eof", false, &eof, e) < 0 || api_param_encoding(q, "encoding", &base64, e) < 0 ||
            api_param_bytes(q, "data", false, base64, &data, &len, e) < 0)
                return -1;
        if (own_execution(q, id, &res, e) < 0)
                return -1;
        /* Right after a background start the execution may not be attached
         * yet: wait for it rather than refuse the first bytes. */
        for (int i = 0; res.state == EXEC_PENDING && i < STDIN_PENDING_WAIT_MS / 50; i++) {
                exec_result_done(&res);
                sbx_sleep_ms(50);
                if (api_should_abandon(q))
                        return 1;
                if (own_execution(q, id, &res, e) < 0)
                        return -1;
        }
        exec_result_done(&res);
        r = exec_send_stdin(q->d->exec, q->tok.user, id, data, len, eof, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "execution_id", id);
        cJSON_AddNumberToObject(*ret, "bytes", (double)len);
        cJSON_AddBoolToObject(*ret, "eof", eof);
        return 0;
}

int api_m_resize_terminal(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *id;
        int64_t rows, cols;
        struct exec_result res;
        struct sbx_error err = {0};
        int r;

        if (jparam_string(&q->args, "execution_id", true, &id, e) < 0 ||
            jparam_int(&q->args, "rows", 1, EXEC_TTY_MAX_ROWS, -1, &rows, e) < 0 ||
            jparam_int(&q->args, "cols", 1, EXEC_TTY_MAX_COLS, -1, &cols, e) < 0)
                return -1;
        if (rows < 0 || cols < 0)
                return fronterr_set(e, "bad_request", "params.rows and params.cols are required");
        if (own_execution(q, id, &res, e) < 0)
                return -1;
        exec_result_done(&res);
        r = exec_resize(q->d->exec, q->tok.user, id, (int)rows, (int)cols, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "execution_id", id);
        cJSON_AddNumberToObject(*ret, "rows", (double)rows);
        cJSON_AddNumberToObject(*ret, "cols", (double)cols);
        return 0;
}

int api_m_cancel_execution(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const char *id;
        bool force;
        struct exec_result res;
        struct sbx_error err = {0};
        int r;

        if (jparam_string(&q->args, "execution_id", true, &id, e) < 0 ||
            jparam_bool(&q->args, "force", false, &force, e) < 0)
                return -1;
        r = api_cell_cancel(q, id, force, ret, e); /* a run_cell cell's id: interrupt it */
        if (r <= 0)
                return r;
        if (own_execution(q, id, &res, e) < 0)
                return -1;
        exec_result_done(&res);
        r = exec_cancel(q->d->exec, q->tok.user, id, force, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        /* Give the kill its grace period so the reply can say how it ended. */
        r = api_wait_final(q, id, NULL, q->d->cfg.exec_kill_grace_ms + 5000, e);
        if (r <= 0)
                return r == 0 ? 1 : r;
        r = exec_status(q->d->exec, q->tok.user, id, -1, -1, 0, 0, &res, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = exec_json(&res, false, false, false);
        exec_result_done(&res);
        return 0;
}

int api_m_list_executions(struct api_req *q, cJSON **ret, struct fronterr *e)
{
        const cJSON *states = cJSON_GetObjectItemCaseSensitive(q->params, "states"), *it;
        struct exec_result *list = NULL;
        unsigned mask = 0;
        size_t n = 0;
        int64_t limit, within_ms;
        cJSON *a;
        int r;

        if (jparam_int(&q->args, "limit", 1, API_LIST_MAX, 50, &limit, e) < 0 ||
            jparam_int(&q->args, "completed_within_ms", 0, INT64_C(86400000) * 3650, -1, &within_ms, e) < 0)
                return -1;
        if (states && !cJSON_IsNull(states)) {
                if (!cJSON_IsArray(states))
                        return fronterr_set(e, "bad_request", "params.states must be an array of strings");
                cJSON_ArrayForEach(it, states) {
                        char up[32];
                        enum exec_state st;
                        if (!cJSON_IsString(it))
                                return fronterr_set(e, "bad_request", "params.states must be an array of strings");
                        sbx_strlcpy(up, it->valuestring, sizeof(up));
                        for (char *p = up; *p; p++)
                                *p = (char)toupper((unsigned char)*p);
                        if (exec_state_from_string(up, &st) < 0)
                                return fronterr_set(e, "invalid", "unknown execution state \"%.32s\"", it->valuestring);
                        mask |= 1u << st;
                }
        }
        /* completed_within_ms: only executions that ended that recently */
        r = exec_list_finished(q->d->exec, q->tok.user, q->session, mask, within_ms, (size_t)limit, &list, &n);
        if (r < 0)
                return fronterr_errno(e, r, NULL, "cannot list executions");
        *ret = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(*ret, "executions");
        for (size_t i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                add_exec_common(o, &list[i]);
                jsonutil_add_text(o, "command_preview", list[i].command_preview);
                cJSON_AddItemToArray(a, o);
        }
        exec_result_list_free(list, n);
        return 0;
}

void api_add_stream(cJSON *o, const char *key, const struct exec_result *r, enum exec_stream stream)
{
        if (stream == EXEC_STDOUT)
                add_stream(o, key, r->stdout_head, r->stdout_head_len, r->stdout_tail, r->stdout_tail_len,
                           r->stdout_bytes, false);
        else
                add_stream(o, key, r->stderr_head, r->stderr_head_len, r->stderr_tail, r->stderr_tail_len,
                           r->stderr_bytes, false);
}
