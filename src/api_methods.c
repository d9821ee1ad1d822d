/* api_methods.c — the API methods (protocol in include/sandboxd/api.h):
 * type-check each parameter, call the module, format the result. Every
 * method acts for the token's user only (q->tok.user) and within
 * params.session (q->session), both checked before it runs. No state and no
 * threads of its own; waiting and streaming are api.c's. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/egress_rules.h"
#include "sandboxd/exec.h"
#include "sandboxd/files.h"
#include "sandboxd/log.h"
#include "sandboxd/privacy.h"
#include "sandboxd/service.h"
#include "sandboxd/session.h"
#include "sandboxd/token.h"
#include "sandboxd/utf8.h"
#include "sandboxd/wsquota.h"

#define API_MAX_ENV 256
#define API_LIST_MAX 1000
#define API_WAIT_MAX_S 60 /* the longest long-poll: get_execution wait: true */
#define STDIN_PENDING_WAIT_MS 60000 /* a pending execution may still be creating its container */

/* ---- parameters ---- */

static int p_string(struct req *q, const char *name, bool required, const char **ret, struct api_err *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->params, name);
        if (!v || cJSON_IsNull(v)) {
                if (required)
                        return api_fail(e, "bad_request", "params.%s is required", name);
                *ret = NULL;
                return 0;
        }
        if (!cJSON_IsString(v) || !v->valuestring)
                return api_fail(e, "bad_request", "params.%s must be a string", name);
        *ret = v->valuestring;
        return 0;
}

static int p_int(struct req *q, const char *name, int64_t lo, int64_t hi, int64_t def, int64_t *ret,
                 struct api_err *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->params, name);
        double x;

        if (!v || cJSON_IsNull(v)) {
                *ret = def;
                return 0;
        }
        if (!cJSON_IsNumber(v))
                return api_fail(e, "bad_request", "params.%s must be a number", name);
        x = v->valuedouble;
        if (!isfinite(x) || x != floor(x))
                return api_fail(e, "bad_request", "params.%s must be an integer", name);
        if (x < (double)lo || x > (double)hi)
                return api_fail(e, "invalid", "params.%s must be between %" PRId64 " and %" PRId64, name, lo, hi);
        *ret = (int64_t)x;
        return 0;
}

static int p_bool(struct req *q, const char *name, bool def, bool *ret, struct api_err *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->params, name);
        if (!v || cJSON_IsNull(v)) {
                *ret = def;
                return 0;
        }
        if (!cJSON_IsBool(v))
                return api_fail(e, "bad_request", "params.%s must be true or false", name);
        *ret = cJSON_IsTrue(v);
        return 0;
}

/* params.wait: seconds (0 to API_WAIT_MAX_S), or true for the longest
 * wait and false for none, as the seeds' agents poll. */
static int p_wait(struct req *q, int64_t *ret, struct api_err *e)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->params, "wait");

        if (cJSON_IsBool(v)) {
                *ret = cJSON_IsTrue(v) ? API_WAIT_MAX_S : 0;
                return 0;
        }
        if (v && !cJSON_IsNull(v) && !cJSON_IsNumber(v))
                return api_fail(e, "bad_request", "params.wait must be a number of seconds or a boolean");
        return p_int(q, "wait", 0, API_WAIT_MAX_S, 0, ret, e);
}

/* params.<name>: "utf8" (default) or "base64". */
static int p_encoding(struct req *q, const char *name, bool *ret_base64, struct api_err *e)
{
        const char *s;
        if (p_string(q, name, false, &s, e) < 0)
                return -1;
        if (!s || strcmp(s, "utf8") == 0 || strcmp(s, "utf-8") == 0)
                *ret_base64 = false;
        else if (strcmp(s, "base64") == 0)
                *ret_base64 = true;
        else
                return api_fail(e, "invalid", "params.%s must be \"utf8\" or \"base64\"", name);
        return 0;
}

/* A string param as bytes: decoded from base64 when encoding says so. */
static int p_bytes(struct req *q, const char *name, bool required, bool base64, unsigned char **ret,
                   size_t *ret_len, struct api_err *e)
{
        const char *s;

        if (p_string(q, name, required, &s, e) < 0)
                return -1;
        if (!s) {
                *ret = NULL;
                *ret_len = 0;
                return 0;
        }
        if (base64) {
                if (base64_decode(s, strlen(s), ret, ret_len) < 0)
                        return api_fail(e, "invalid", "params.%s is not valid base64", name);
                return 0;
        }
        *ret_len = strlen(s);
        *ret = malloc(*ret_len + 1);
        if (!*ret)
                return api_fail(e, "internal", "out of memory");
        memcpy(*ret, s, *ret_len + 1);
        return 0;
}

/* ---- formatting ---- */

static void lower_into(char *dst, size_t size, const char *s)
{
        size_t i = 0;
        for (; s && s[i] && i + 1 < size; i++)
                dst[i] = (char)tolower((unsigned char)s[i]);
        dst[i] = '\0';
}

static void add_lower(cJSON *o, const char *key, const char *s)
{
        char buf[64];
        lower_into(buf, sizeof(buf), s);
        cJSON_AddStringToObject(o, key, buf);
}

static void add_text_or_null(cJSON *o, const char *key, const char *s)
{
        if (s && *s) {
                _cleanup_free_ char *clean = utf8_sanitize(s, strlen(s));
                cJSON_AddStringToObject(o, key, clean ? clean : "");
        } else {
                cJSON_AddNullToObject(o, key);
        }
}

/* head + "\n...[N bytes omitted]...\n" + tail, where N counts every byte
 * the two leave out (including bytes past the spool cap). */
static void add_stream(cJSON *o, const char *key, const char *head, size_t head_len, const char *tail,
                       size_t tail_len, uint64_t total, bool base64)
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
        add_lower(o, "state", exec_state_to_string(r->state));
        if (r->exit_code >= 0 && r->cause == EXEC_CAUSE_EXITED)
                cJSON_AddNumberToObject(o, "exit_code", r->exit_code);
        else
                cJSON_AddNullToObject(o, "exit_code");
        add_text_or_null(o, "cause", exec_cause_to_string(r->cause));
        add_text_or_null(o, "error", r->error);
        cJSON_AddNumberToObject(o, "stdout_bytes", (double)r->stdout_bytes);
        cJSON_AddNumberToObject(o, "stderr_bytes", (double)r->stderr_bytes);
        cJSON_AddBoolToObject(o, "truncated", r->truncated);
        cJSON_AddNumberToObject(o, "duration_ms", (double)r->duration_ms);
        cJSON_AddNumberToObject(o, "created_at", (double)r->created_at);
        add_text_or_null(o, "via", r->via);
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
                add_text_or_null(p, "image", r->image);
                add_text_or_null(p, "runtime", r->runtime);
                add_text_or_null(p, "runner_version", r->runner_version);
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

static void add_ports(cJSON *o, const char *key, const int *host_ports, size_t n, int base)
{
        cJSON *a = cJSON_AddArrayToObject(o, key);
        for (size_t i = 0; a && i < n; i++) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddNumberToObject(p, "container_port", base + (int)i);
                cJSON_AddNumberToObject(p, "host_port", host_ports[i]);
                cJSON_AddItemToArray(a, p);
        }
}

static cJSON *service_json(const struct service_info *s)
{
        cJSON *o = cJSON_CreateObject(), *a;
        if (!o)
                return NULL;
        cJSON_AddStringToObject(o, "name", s->name);
        add_lower(o, "state", service_state_to_string(s->state));
        if (s->pid > 0)
                cJSON_AddNumberToObject(o, "pid", s->pid);
        else
                cJSON_AddNullToObject(o, "pid");
        if (s->exit_code >= 0)
                cJSON_AddNumberToObject(o, "exit_code", s->exit_code);
        else
                cJSON_AddNullToObject(o, "exit_code");
        add_text_or_null(o, "command", s->command);
        add_text_or_null(o, "workdir", s->workdir);
        a = cJSON_AddArrayToObject(o, "ports");
        for (size_t i = 0; a && i < s->n_ports && i < SERVICE_MAX_PORTS; i++) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddNumberToObject(p, "container_port", s->ports[i].container_port);
                if (s->ports[i].host_port > 0)
                        cJSON_AddNumberToObject(p, "host_port", s->ports[i].host_port);
                else
                        cJSON_AddNullToObject(p, "host_port");
                cJSON_AddItemToArray(a, p);
        }
        cJSON_AddNumberToObject(o, "started_at", (double)s->started_at);
        if (s->stopped_at > 0)
                cJSON_AddNumberToObject(o, "stopped_at", (double)s->stopped_at);
        else
                cJSON_AddNullToObject(o, "stopped_at");
        add_text_or_null(o, "last_error", s->last_error);
        return o;
}

/* The execution, which must be the caller's and in the request's session. */
static int own_execution(struct req *q, const char *id, struct exec_result *ret, struct api_err *e)
{
        struct sbx_error err = {0};
        int r = exec_status(q->d->exec, q->tok.user, id, API_OFFSET_NONE, API_OFFSET_NONE, 1, 0, ret, &err);
        if (r < 0)
                return api_fail_errno(e, r, &err, NULL);
        if (strcmp(ret->session, q->session) != 0) {
                exec_result_done(ret);
                return api_fail(e, "not_found", "no execution %s in session %s", id, q->session);
        }
        return 0;
}

/* ---- methods ---- */

static int preflight_session(struct req *q, struct api_err *e)
{
        struct session *s = NULL;
        struct sbx_error err = {0};
        int r = session_get_or_create(q->d->sessions, q->tok.user, q->session, &s, &err);
        if (r < 0)
                return api_fail_errno(e, r, &err, "the session's container is not available");
        session_release(s);
        return 0;
}

/* After the start: background gives the id and state at once; otherwise
 * wait for the end (streaming into sink if any), then the full result. */
static int execution_reply(struct req *q, const char *id, bool background, bool base64, bool cached,
                           struct api_sink *sink, cJSON **ret, struct api_err *e)
{
        struct exec_result res;
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
                r = exec_status(q->d->exec, q->tok.user, id, off, off, background ? 1 : 0, 0, &res, &err);
        }
        if (r < 0)
                return api_fail_errno(e, r, &err, NULL);
        if (background) {
                *ret = cJSON_CreateObject();
                cJSON_AddStringToObject(*ret, "execution_id", id);
                add_lower(*ret, "state", exec_state_to_string(res.state));
        } else if (res.state == EXEC_FAILED && res.cause == EXEC_CAUSE_ERROR) {
                r = api_fail(e, "unavailable", "execution %s could not run: %s", id, res.error);
        } else {
                *ret = exec_json(&res, base64, false, false);
                if (*ret && cached)
                        api_agent_add_cached(q, &res, *ret, true); /* run_code: what the cache saved */
        }
        exec_result_done(&res);
        return r;
}

int api_execution_reply(struct req *q, const char *id, cJSON **ret, struct api_err *e)
{
        struct exec_result res;
        bool background, base64;

        if (p_bool(q, "background", false, &background, e) < 0 || p_encoding(q, "encoding", &base64, e) < 0)
                return -1;
        if (own_execution(q, id, &res, e) < 0)
                return -1;
        exec_result_done(&res);
        return execution_reply(q, id, background, base64, strcmp(q->method, "run_code") == 0, NULL, ret, e);
}

/* code_override: run_code {script} (the saved script's code). */
static int run_execution_code(struct req *q, enum exec_language lang, const char *code_override, bool cache,
                              cJSON **ret, struct api_err *e)
{
        const char *command = NULL, *code = NULL, *workdir = NULL, *stdin_s = NULL;
        int64_t timeout, rows, cols;
        bool background, interactive, stream, base64, tty;
        const cJSON *env_obj = cJSON_GetObjectItemCaseSensitive(q->params, "env");
        const char *env[API_MAX_ENV + 1] = {0};
        char *env_buf[API_MAX_ENV] = {0};
        size_t n_env = 0;
        struct api_sink *sink = NULL;
        struct sbx_error err = {0};
        char id[37];
        int r = -1;

        if (lang == EXEC_LANG_NONE) {
                if (p_string(q, "command", true, &command, e) < 0)
                        return -1;
        } else if (code_override) {
                code = code_override;
        } else if (p_string(q, "code", true, &code, e) < 0) {
                return -1;
        }
        if (p_int(q, "timeout_seconds", 0, q->d->cfg.exec_timeout_max_s, 0, &timeout, e) < 0 ||
            p_string(q, "workdir", false, &workdir, e) < 0 || p_string(q, "stdin", false, &stdin_s, e) < 0 ||
            p_bool(q, "background", false, &background, e) < 0 ||
            p_bool(q, "interactive", false, &interactive, e) < 0 || p_bool(q, "stream", false, &stream, e) < 0 ||
            p_encoding(q, "encoding", &base64, e) < 0 || p_bool(q, "tty", false, &tty, e) < 0 ||
            p_int(q, "rows", 1, EXEC_TTY_MAX_ROWS, 24, &rows, e) < 0 || p_int(q, "cols", 1, EXEC_TTY_MAX_COLS, 80, &cols, e) < 0)
                return -1;
        if (env_obj && !cJSON_IsNull(env_obj)) {
                const cJSON *it;
                if (!cJSON_IsObject(env_obj))
                        return api_fail(e, "bad_request", "params.env must be an object of strings");
                cJSON_ArrayForEach(it, env_obj) {
                        if (!cJSON_IsString(it) || !it->string) {
                                r = api_fail(e, "bad_request", "params.env values must be strings");
                                goto out;
                        }
                        if (n_env >= API_MAX_ENV) {
                                r = api_fail(e, "too_large", "params.env has more than %d entries", API_MAX_ENV);
                                goto out;
                        }
                        if (asprintf(&env_buf[n_env], "%s=%s", it->string, it->valuestring) < 0) {
                                env_buf[n_env] = NULL;
                                r = api_fail(e, "internal", "out of memory");
                                goto out;
                        }
                        env[n_env] = env_buf[n_env];
                        n_env++;
                }
        }

        if (api_agent_default_env(q, env, env_buf, &n_env, API_MAX_ENV, e) < 0)
                goto out;
        if (preflight_session(q, e) < 0)
                goto out;
        if (stream && !background) {
                sink = api_sink_new();
                if (!sink) {
                        r = api_fail(e, "internal", "out of memory");
                        goto out;
                }
        }
        struct exec_request req = {
                .user = q->tok.user,
                .session = q->session,
                .command = command,
                .language = lang,
                .code = code,
                .timeout_s = (int)timeout,
                .workdir = workdir,
                .env = n_env ? env : NULL,
                .stdin_data = stdin_s,
                .stdin_len = stdin_s ? strlen(stdin_s) : 0,
                .interactive = interactive,
                .tty = tty,
                .rows = (int)rows,
                .cols = (int)cols,
                .actor = q->actor,
                .on_output = sink ? api_sink_on_output : NULL,
                .userdata = sink ? (void *)(uintptr_t)api_sink_handle(sink) : NULL,
        };
        r = exec_start(q->d->exec, &req, id, &err);
        if (r < 0) {
                r = api_fail_errno(e, r, &err, NULL);
                goto out;
        }
        if (cache)
                api_agent_note_run(q, id, lang, code);
        api_idem_bind_execution(q, id);
        r = execution_reply(q, id, background, base64, lang != EXEC_LANG_NONE, sink, ret, e);
out:
        api_sink_free(sink);
        for (size_t i = 0; i < n_env; i++)
                free(env_buf[i]);
        return r;
}

static int m_exec(struct req *q, cJSON **ret, struct api_err *e)
{
        return run_execution_code(q, EXEC_LANG_NONE, NULL, false, ret, e);
}

static int m_run_code(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *language, *script, *code;
        enum exec_language lang;
        bool cache;

        if (p_string(q, "script", false, &script, e) < 0 || p_bool(q, "cache", true, &cache, e) < 0)
                return -1;
        if (script) {
                /* a saved script: its own language and code */
                _cleanup_free_ char *saved = NULL;
                int r;
                if (p_string(q, "code", false, &code, e) < 0)
                        return -1;
                if (code)
                        return api_fail(e, "invalid", "params.code and params.script exclude each other");
                if (api_agent_script_code(q, script, &lang, &saved, e) < 0)
                        return -1;
                r = run_execution_code(q, lang, saved, cache, ret, e);
                return r;
        }
        if (p_string(q, "language", true, &language, e) < 0)
                return -1;
        if (strcmp(language, "python") == 0 || strcmp(language, "python3") == 0)
                lang = EXEC_LANG_PYTHON;
        else if (strcmp(language, "node") == 0 || strcmp(language, "javascript") == 0)
                lang = EXEC_LANG_NODE;
        else if (strcmp(language, "bash") == 0)
                lang = EXEC_LANG_BASH;
        else
                return api_fail(e, "invalid", "params.language must be python, node or bash");
        return run_execution_code(q, lang, NULL, cache, ret, e);
}

static int m_get_execution(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *id;
        int64_t wait_s, out_off, err_off;
        bool base64;
        struct exec_result res;
        struct sbx_error err = {0};
        int64_t until;
        int r;

        if (p_string(q, "execution_id", true, &id, e) < 0 || p_wait(q, &wait_s, e) < 0 ||
            p_int(q, "stdout_offset", 0, INT64_MAX / 4, -1, &out_off, e) < 0 ||
            p_int(q, "stderr_offset", 0, INT64_MAX / 4, -1, &err_off, e) < 0 ||
            p_encoding(q, "encoding", &base64, e) < 0)
                return -1;
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
                        return api_fail_errno(e, r, &err, NULL);
                done = exec_state_is_final(res.state) || slice == 0 ||
                       (out_off >= 0 && res.stdout_head_len > 0) || (err_off >= 0 && res.stderr_head_len > 0);
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

static int m_send_stdin(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *id;
        bool eof, base64;
        _cleanup_free_ unsigned char *data = NULL;
        size_t len = 0;
        struct exec_result res;
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "execution_id", true, &id, e) < 0 || p_bool(q, "eof", false, &eof, e) < 0 ||
            p_encoding(q, "encoding", &base64, e) < 0 || p_bytes(q, "data", false, base64, &data, &len, e) < 0)
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
                return api_fail_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "execution_id", id);
        cJSON_AddNumberToObject(*ret, "bytes", (double)len);
        cJSON_AddBoolToObject(*ret, "eof", eof);
        return 0;
}

static int m_resize_terminal(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *id;
        int64_t rows, cols;
        struct exec_result res;
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "execution_id", true, &id, e) < 0 || p_int(q, "rows", 1, EXEC_TTY_MAX_ROWS, -1, &rows, e) < 0 ||
            p_int(q, "cols", 1, EXEC_TTY_MAX_COLS, -1, &cols, e) < 0)
                return -1;
        if (rows < 0 || cols < 0)
                return api_fail(e, "bad_request", "params.rows and params.cols are required");
        if (own_execution(q, id, &res, e) < 0)
                return -1;
        exec_result_done(&res);
        r = exec_resize(q->d->exec, q->tok.user, id, (int)rows, (int)cols, &err);
        if (r < 0)
                return api_fail_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "execution_id", id);
        cJSON_AddNumberToObject(*ret, "rows", (double)rows);
        cJSON_AddNumberToObject(*ret, "cols", (double)cols);
        return 0;
}

static int m_cancel_execution(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *id;
        bool force;
        struct exec_result res;
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "execution_id", true, &id, e) < 0 || p_bool(q, "force", false, &force, e) < 0)
                return -1;
        if (own_execution(q, id, &res, e) < 0)
                return -1;
        exec_result_done(&res);
        r = exec_cancel(q->d->exec, q->tok.user, id, force, &err);
        if (r < 0)
                return api_fail_errno(e, r, &err, NULL);
        /* Give the kill its grace period so the reply can say how it ended. */
        r = api_wait_final(q, id, NULL, q->d->cfg.exec_kill_grace_ms + 5000, e);
        if (r <= 0)
                return r == 0 ? 1 : r;
        r = exec_status(q->d->exec, q->tok.user, id, -1, -1, 0, 0, &res, &err);
        if (r < 0)
                return api_fail_errno(e, r, &err, NULL);
        *ret = exec_json(&res, false, false, false);
        exec_result_done(&res);
        return 0;
}

static int m_list_executions(struct req *q, cJSON **ret, struct api_err *e)
{
        const cJSON *states = cJSON_GetObjectItemCaseSensitive(q->params, "states"), *it;
        struct exec_result *list = NULL;
        unsigned mask = 0;
        size_t n = 0;
        int64_t limit, within_ms;
        cJSON *a;
        int r;

        if (p_int(q, "limit", 1, API_LIST_MAX, 50, &limit, e) < 0 ||
            p_int(q, "completed_within_ms", 0, INT64_C(86400000) * 3650, -1, &within_ms, e) < 0)
                return -1;
        if (states && !cJSON_IsNull(states)) {
                if (!cJSON_IsArray(states))
                        return api_fail(e, "bad_request", "params.states must be an array of strings");
                cJSON_ArrayForEach(it, states) {
                        char up[32];
                        enum exec_state st;
                        if (!cJSON_IsString(it))
                                return api_fail(e, "bad_request", "params.states must be an array of strings");
                        sbx_strlcpy(up, it->valuestring, sizeof(up));
                        for (char *p = up; *p; p++)
                                *p = (char)toupper((unsigned char)*p);
                        if (exec_state_from_string(up, &st) < 0)
                                return api_fail(e, "invalid", "unknown execution state \"%.32s\"", it->valuestring);
                        mask |= 1u << st;
                }
        }
        /* completed_within_ms: only executions that ended that recently */
        r = exec_list_finished(q->d->exec, q->tok.user, q->session, mask,
                               within_ms >= 0 ? sbx_now_ms() - within_ms : -1, (size_t)limit, &list, &n);
        if (r < 0)
                return api_fail_errno(e, r, NULL, "cannot list executions");
        *ret = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(*ret, "executions");
        for (size_t i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                add_exec_common(o, &list[i]);
                add_text_or_null(o, "command_preview", list[i].command_preview);
                cJSON_AddItemToArray(a, o);
        }
        exec_result_list_free(list, n);
        return 0;
}

static int m_write_file(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *path;
        bool base64;
        _cleanup_free_ unsigned char *data = NULL;
        size_t len = 0;
        char norm[FILES_PATH_MAX];
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "path", true, &path, e) < 0 || p_encoding(q, "encoding", &base64, e) < 0 ||
            p_bytes(q, "content", true, base64, &data, &len, e) < 0)
                return -1;
        r = files_write(&q->d->files, q->tok.user, q->session, path, data, len, norm, &err);
        if (r < 0)
                return api_fail_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "path", norm);
        cJSON_AddNumberToObject(*ret, "bytes", (double)len);
        return 0;
}

static int m_read_file(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *path;
        int64_t offset, length;
        bool base64;
        struct files_read_result res;
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "path", true, &path, e) < 0 || p_int(q, "offset", 0, INT64_MAX / 4, 0, &offset, e) < 0 ||
            p_int(q, "length", 0, INT64_MAX / 4, -1, &length, e) < 0 || p_encoding(q, "encoding", &base64, e) < 0)
                return -1;
        r = files_read(&q->d->files, q->tok.user, q->session, path, (uint64_t)offset, length, &res, &err);
        if (r < 0)
                return api_fail_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "path", res.path);
        api_add_bytes(*ret, "content", res.data, res.len, base64);
        cJSON_AddStringToObject(*ret, "encoding", base64 ? "base64" : "utf8");
        if (!base64)
                cJSON_AddBoolToObject(*ret, "valid_utf8", utf8_is_valid(res.data, res.len) &&
                                                                  memchr(res.data, '\0', res.len) == NULL);
        cJSON_AddNumberToObject(*ret, "offset", (double)offset);
        cJSON_AddNumberToObject(*ret, "bytes", (double)res.len);
        cJSON_AddNumberToObject(*ret, "size", (double)res.size);
        cJSON_AddBoolToObject(*ret, "eof", res.eof);
        files_read_result_done(&res);
        return 0;
}

static int m_list_files(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *path;
        char norm[FILES_PATH_MAX];
        struct files_entry *list = NULL;
        size_t n = 0;
        bool truncated = false;
        struct sbx_error err = {0};
        cJSON *a;
        int r;

        if (p_string(q, "path", false, &path, e) < 0)
                return -1;
        r = files_list(&q->d->files, q->tok.user, q->session, path, norm, &list, &n, &truncated, &err);
        if (r < 0)
                return api_fail_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "path", norm);
        a = cJSON_AddArrayToObject(*ret, "entries");
        for (size_t i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                api_add_bytes(o, "name", list[i].name, strlen(list[i].name), false);
                cJSON_AddStringToObject(o, "type", files_type_to_string(list[i].type));
                cJSON_AddNumberToObject(o, "size", (double)list[i].size);
                cJSON_AddItemToArray(a, o);
        }
        cJSON_AddBoolToObject(*ret, "truncated", truncated);
        free(list);
        return 0;
}

static int need_services(struct req *q, struct api_err *e)
{
        if (!q->d->services)
                return api_fail(e, "unavailable", "services are not available in this daemon");
        return 0;
}

static int m_start_service(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *name, *command, *workdir;
        struct service_info info;
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "name", true, &name, e) < 0 || p_string(q, "command", true, &command, e) < 0 ||
            p_string(q, "workdir", false, &workdir, e) < 0 || need_services(q, e) < 0)
                return -1;
        r = service_start(q->d->services, q->tok.user, q->session, name, command, workdir, &info, &err);
        if (r < 0)
                return api_fail_errno(e, r, &err, NULL);
        *ret = service_json(&info);
        return 0;
}

static int m_stop_service(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *name;
        struct service_info info;
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "name", true, &name, e) < 0 || need_services(q, e) < 0)
                return -1;
        r = service_stop(q->d->services, q->tok.user, q->session, name, &info, &err);
        if (r < 0)
                return api_fail_errno(e, r, &err, NULL);
        *ret = service_json(&info);
        return 0;
}

static int m_list_services(struct req *q, cJSON **ret, struct api_err *e)
{
        struct service_info *list = NULL;
        size_t n = 0;
        cJSON *a;
        int r;

        if (need_services(q, e) < 0)
                return -1;
        r = service_list(q->d->services, q->tok.user, q->session, &list, &n);
        if (r < 0)
                return api_fail_errno(e, r, NULL, "cannot list services");
        *ret = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(*ret, "services");
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToArray(a, service_json(&list[i]));
        free(list);
        return 0;
}

static int m_service_logs(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *name;
        int64_t tail;
        _cleanup_free_ char *out = NULL, *errs = NULL;
        struct sbx_error err = {0};
        int r;

        if (p_string(q, "name", true, &name, e) < 0 || p_int(q, "tail_lines", 1, 10000, 100, &tail, e) < 0 ||
            need_services(q, e) < 0)
                return -1;
        r = service_logs(q->d->services, q->tok.user, q->session, name, (int)tail, &out, &errs, &err);
        if (r < 0)
                return api_fail_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "name", name);
        api_add_bytes(*ret, "stdout", out ? out : "", out ? strlen(out) : 0, false);
        api_add_bytes(*ret, "stderr", errs ? errs : "", errs ? strlen(errs) : 0, false);
        return 0;
}

static void add_datasets(cJSON *o, struct daemon *d, const char *user, const char *session)
{
        struct privacy_dataset *list = NULL;
        size_t n = 0;
        cJSON *a = cJSON_AddArrayToObject(o, "datasets");

        if (!d->privacy || privacy_list(d->privacy, user, session, &list, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                cJSON *x = cJSON_CreateObject();
                api_add_bytes(x, "dataset", list[i].dataset, strlen(list[i].dataset), false);
                add_text_or_null(x, "source", list[i].source);
                cJSON_AddNumberToObject(x, "marked_at", (double)list[i].marked_at);
                cJSON_AddItemToArray(a, x);
        }
        free(list);
}

/* "workspace_usage": the workspace's use of its disk quota. */
static void add_workspace_usage(cJSON *o, const struct sbx_config *cfg, const char *user, const char *session)
{
        struct wsquota_usage u;

        wsquota_usage(cfg, user, session, &u);
        cJSON_AddItemToObject(o, "workspace_usage", wsquota_usage_to_json(&u));
}

static int m_session_info(struct req *q, cJSON **ret, struct api_err *e)
{
        struct session_info info;
        int r = session_get_info(q->d->sessions, q->tok.user, q->session, &info);

        if (r == -ENOENT) {
                /* First contact: create it, as any other call would. */
                if (preflight_session(q, e) < 0)
                        return -1;
                r = session_get_info(q->d->sessions, q->tok.user, q->session, &info);
        }
        if (r < 0)
                return api_fail_errno(e, r, NULL, "cannot read the session");
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "user", info.user);
        cJSON_AddStringToObject(*ret, "session", info.session);
        add_lower(*ret, "state", session_state_to_string(info.state));
        add_text_or_null(*ret, "network_mode", info.network_mode);
        add_text_or_null(*ret, "runtime", info.runtime);
        cJSON_AddBoolToObject(*ret, "pooled", info.pooled);
        cJSON_AddBoolToObject(*ret, "private",
                              q->d->privacy && privacy_is_private(q->d->privacy, q->tok.user, q->session));
        add_datasets(*ret, q->d, q->tok.user, q->session);
        add_ports(*ret, "ports", info.ports, info.n_ports, q->d->cfg.container_port_base);
        add_text_or_null(*ret, "container_id", info.container_id);
        add_text_or_null(*ret, "image", info.image);
        cJSON_AddNumberToObject(*ret, "created_at", (double)info.created_at);
        cJSON_AddNumberToObject(*ret, "last_activity", (double)info.last_activity);
        add_text_or_null(*ret, "last_error", info.last_error);
        add_text_or_null(*ret, "error_cause", info.error_cause);
        add_workspace_usage(*ret, &q->d->cfg, q->tok.user, q->session);
        cJSON_AddItemToObject(*ret, "egress",
                              egress_rules_policy_json(q->d->store, q->d->privacy, &q->d->cfg, q->tok.user, q->session));
        session_info_done(&info);
        return 0;
}

/* A connector adds (or, with remove, takes back) an egress pattern for this
 * session, or with scope "user" for every session of its user. */
static int m_egress_allow(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *pattern, *scope;
        struct sbx_error err = {0};
        bool remove = false, user_wide;
        int r;

        if (q->tok.role != TOKEN_ROLE_CONNECTOR)
                return api_fail(e, "forbidden", "egress_allow needs a connector token; this token's role is %s",
                                token_role_to_string(q->tok.role));
        if (p_string(q, "pattern", true, &pattern, e) < 0 || p_string(q, "scope", false, &scope, e) < 0 ||
            p_bool(q, "remove", false, &remove, e) < 0)
                return -1;
        if (scope && strcmp(scope, "session") != 0 && strcmp(scope, "user") != 0)
                return api_fail(e, "invalid", "scope must be session or user");
        user_wide = scope && strcmp(scope, "user") == 0;
        r = egress_rules_change(q->d->store, &q->d->cfg, q->tok.user, user_wide ? NULL : q->session, pattern, remove,
                                q->actor, &err);
        if (r < 0)
                return api_fail_errno(e, r, &err, NULL);
        *ret = egress_rules_policy_json(q->d->store, q->d->privacy, &q->d->cfg, q->tok.user, q->session);
        if (!*ret)
                return api_fail(e, "internal", "out of memory");
        cJSON_AddStringToObject(*ret, "session", q->session);
        return 0;
}

static int m_mark_private(struct req *q, cJSON **ret, struct api_err *e)
{
        const char *dataset, *source;
        struct sbx_error err = {0};
        int r;

        if (q->tok.role != TOKEN_ROLE_CONNECTOR)
                return api_fail(e, "forbidden", "mark_private needs a connector token; this token's role is %s",
                            token_role_to_string(q->tok.role));
        if (p_string(q, "dataset", true, &dataset, e) < 0 || p_string(q, "source", false, &source, e) < 0)
                return -1;
        if (!q->d->privacy)
                return api_fail(e, "unavailable", "privacy marks are not available in this daemon");
        r = privacy_mark(q->d->privacy, q->tok.user, q->session, dataset, source, q->actor, &err);
        if (r < 0)
                return api_fail_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "session", q->session);
        add_datasets(*ret, q->d, q->tok.user, q->session);
        cJSON_AddStringToObject(*ret, "network_mode",
                                privacy_required_network(q->d->privacy, q->tok.user, q->session));
        return 0;
}

static const struct {
        const char *name;
        api_method_fn fn;
} methods[] = {
        {"exec", m_exec},
        {"run_code", m_run_code},
        {"get_execution", m_get_execution},
        {"send_stdin", m_send_stdin},
        {"cancel_execution", m_cancel_execution},
        {"resize_terminal", m_resize_terminal},
        {"list_executions", m_list_executions},
        {"write_file", m_write_file},
        {"read_file", m_read_file},
        {"list_files", m_list_files},
        {"start_service", m_start_service},
        {"stop_service", m_stop_service},
        {"list_services", m_list_services},
        {"service_logs", m_service_logs},
        {"session_info", m_session_info},
        {"mark_private", m_mark_private},
        {"egress_allow", m_egress_allow},
        /* agent tools (issue 17): api_agent.c */
        {"run_tests", api_m_run_tests},
        {"list_scripts", api_m_list_scripts},
        {"clear_scripts", api_m_clear_scripts},
        {"create_session", api_m_create_session},
        {"destroy_session", api_m_destroy_session},
        {"list_sessions", api_m_list_sessions},
};

api_method_fn api_method_find(const char *name)
{
        for (size_t i = 0; i < ELEMENTSOF(methods); i++)
                if (strcmp(methods[i].name, name) == 0)
                        return methods[i].fn;
        return api_tasks_method_find(name);
}

/* ---- agent tools (issue 17): what api_agent.c shares ---- */

int api_param_string(struct req *q, const char *name, bool required, const char **ret, struct api_err *e)
{
        return p_string(q, name, required, ret, e);
}

int api_param_int(struct req *q, const char *name, int64_t lo, int64_t hi, int64_t def, int64_t *ret,
                  struct api_err *e)
{
        return p_int(q, name, lo, hi, def, ret, e);
}

int api_param_bool(struct req *q, const char *name, bool def, bool *ret, struct api_err *e)
{
        return p_bool(q, name, def, ret, e);
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

int api_m_session_info(struct req *q, cJSON **ret, struct api_err *e)
{
        return m_session_info(q, ret, e);
}

bool api_method_user_level(const char *name)
{
        return strcmp(name, "list_sessions") == 0 || strcmp(name, "list_scripts") == 0 ||
               strcmp(name, "clear_scripts") == 0 || strcmp(name, "create_session") == 0;
}
