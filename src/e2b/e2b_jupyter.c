/* e2b_jupyter.c — E2B's code interpreter (port 49999 of a sandbox: the
 * @e2b/code-interpreter SDK's runCode and contexts) on the HTTPS front, on
 * run_cell's stateful interpreters (cells.h). /execute answers one JSON
 * line per output, as E2B's does (stdout, stderr, result with its MIME
 * bundle, error with its traceback, number_of_executions,
 * end_of_execution): the headers at once, the lines once the cell has
 * ended. A context id is its sandboxd
 * context's name, "py"/"js" and hex, so its language is in its name; the
 * default contexts are "default" (python) and "default-js". No state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2b_internal.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/metrics.h"

#define E2B_CONTEXT_DEFAULT "default"
#define E2B_CONTEXT_DEFAULT_JS "default-js"

/* E2B's language names onto run_cell's: "python" or "node"; NULL: none. */
static const char *language_of(const char *l)
{
        if (!l || !*l || strcmp(l, "python") == 0 || strcmp(l, "py") == 0)
                return "python";
        if (strcmp(l, "javascript") == 0 || strcmp(l, "js") == 0 || strcmp(l, "node") == 0)
                return "node";
        return NULL;
}

static cJSON *body(struct e2b_req *q, struct MHD_Connection *conn, enum MHD_Result *ans)
{
        struct fronterr e = {0};
        cJSON *o = e2b_parse_object(q->body, q->len, &e);

        if (!o)
                *ans = e2b_reply_fronterr(conn, &e);
        return o;
}

static bool context_id_valid(const char *s)
{
        size_t n = s ? strlen(s) : 0;

        if (strcmp(s ? s : "", E2B_CONTEXT_DEFAULT) == 0 || strcmp(s ? s : "", E2B_CONTEXT_DEFAULT_JS) == 0)
                return true;
        if (n < 3 || n > E2B_ID_MAX || (strncmp(s, "py", 2) != 0 && strncmp(s, "js", 2) != 0))
                return false;
        for (size_t i = 2; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'f') || (s[i] >= '0' && s[i] <= '9')))
                        return false;
        return true;
}

static const char *context_language(const char *id)
{
        return strncmp(id, "js", 2) == 0 || strcmp(id, E2B_CONTEXT_DEFAULT_JS) == 0 ? "node" : "python";
}

static void add_line(char **buf, size_t *len, cJSON *o)
{
        char *text = cJSON_PrintUnformatted(o), *nb;
        size_t n = text ? strlen(text) : 0;

        cJSON_Delete(o);
        if (!text)
                return;
        nb = realloc(*buf, *len + n + 2);
        if (nb) {
                memcpy(nb + *len, text, n);
                nb[*len + n] = '\n';
                nb[*len + n + 1] = '\0';
                *buf = nb;
                *len += n + 1;
        }
        free(text);
}

/* A display_data / execute_result bundle as E2B's result line. */
static cJSON *result_line(const cJSON *out, bool main)
{
        static const struct {
                const char *mime, *field;
        } map[] = {
                {"text/plain", "text"},        {"text/html", "html"},
                {"text/markdown", "markdown"}, {"image/svg+xml", "svg"},
                {"image/png", "png"},          {"image/jpeg", "jpeg"},
                {"application/pdf", "pdf"},    {"text/latex", "latex"},
                {"application/json", "json"},  {"application/javascript", "javascript"},
        };
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(out, "data"), *m;
        cJSON *o = cJSON_CreateObject(), *extra = NULL;

        cJSON_AddStringToObject(o, "type", "result");
        cJSON_ArrayForEach(m, data) {
                size_t i = 0;
                while (i < ELEMENTSOF(map) && strcmp(map[i].mime, m->string) != 0)
                        i++;
                if (i < ELEMENTSOF(map)) {
                        cJSON_AddItemToObject(o, map[i].field, cJSON_Duplicate(m, true));
                } else {
                        if (!extra)
                                extra = cJSON_AddObjectToObject(o, "extra");
                        cJSON_AddItemToObject(extra, m->string, cJSON_Duplicate(m, true));
                }
        }
        cJSON_AddBoolToObject(o, "is_main_result", main);
        return o;
}

static cJSON *error_line(const cJSON *err)
{
        const cJSON *tb = cJSON_GetObjectItemCaseSensitive(err, "traceback"), *t;
        cJSON *o = cJSON_CreateObject();
        size_t n = 0;
        char *text;

        cJSON_AddStringToObject(o, "type", "error");
        cJSON_AddStringToObject(o, "name",
                                cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "name"))
                                        ?: cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "ename"))
                                                   ?: "Error");
        cJSON_AddStringToObject(o, "value",
                                cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "value"))
                                        ?: cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "evalue"))
                                                   ?: "");
        if (cJSON_IsString(tb)) {
                cJSON_AddStringToObject(o, "traceback", tb->valuestring);
                return o;
        }
        cJSON_ArrayForEach(t, tb)
                if (cJSON_IsString(t))
                        n += strlen(t->valuestring) + 1;
        text = calloc(1, n + 1);
        if (text)
                cJSON_ArrayForEach(t, tb)
                        if (cJSON_IsString(t)) {
                                strcat(text, t->valuestring);
                                strcat(text, "\n");
                        }
        cJSON_AddStringToObject(o, "traceback", text ? text : "");
        free(text);
        return o;
}

/* An /execute answer: the headers go at once, and MHD's first call for the
 * body runs the cell on the connection's thread (the SDK's request timeout
 * covers only the wait for the headers, as E2B's server answers them at
 * once). */
struct cell {
        struct e2b_req q; /* a copy: MHD frees the request before the response */
        cJSON *params;
        char *buf;
        size_t len, off;
        bool ran;
};

static void cell_run(struct cell *c)
{
        struct fronterr e = {0};
        cJSON *res = NULL, *o;
        const cJSON *out, *err;
        bool had_error = false;

        c->ran = true;
        if (e2b_call(&c->q, "run_cell", c->params, &res, &e) < 0) {
                c->params = NULL; /* taken */
                o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "type", "error");
                cJSON_AddStringToObject(o, "name", e.code ? e.code : "internal");
                jsonutil_add_text(o, "value", e.msg);
                cJSON_AddStringToObject(o, "traceback", "");
                add_line(&c->buf, &c->len, o);
                o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "type", "end_of_execution");
                add_line(&c->buf, &c->len, o);
                return;
        }
        c->params = NULL;
        cJSON_ArrayForEach(out, cJSON_GetObjectItemCaseSensitive(res, "outputs")) {
                const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(out, "type"));
                if (!type)
                        continue;
                if (strcmp(type, "stream") == 0) {
                        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(out, "name"));
                        o = cJSON_CreateObject();
                        cJSON_AddStringToObject(o, "type", name && strcmp(name, "stderr") == 0 ? "stderr" : "stdout");
                        cJSON_AddStringToObject(o, "text",
                                                cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(out, "text"))
                                                        ?: "");
                        add_line(&c->buf, &c->len, o);
                } else if (strcmp(type, "display_data") == 0 || strcmp(type, "execute_result") == 0) {
                        add_line(&c->buf, &c->len, result_line(out, strcmp(type, "execute_result") == 0));
                } else if (strcmp(type, "error") == 0) {
                        add_line(&c->buf, &c->len, error_line(out));
                        had_error = true;
                }
        }
        err = cJSON_GetObjectItemCaseSensitive(res, "error");
        if (!had_error && cJSON_IsObject(err))
                add_line(&c->buf, &c->len, error_line(err));
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "number_of_executions");
        cJSON_AddNumberToObject(o, "execution_count",
                                cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "execution_count")));
        add_line(&c->buf, &c->len, o);
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "end_of_execution");
        add_line(&c->buf, &c->len, o);
        cJSON_Delete(res);
}

static ssize_t cell_read(void *cls, uint64_t pos, char *buf, size_t max)
{
        struct cell *c = cls;
        size_t k;

        (void)pos;
        if (!c->ran)
                cell_run(c);
        if (c->off == c->len)
                return c->buf ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
        k = c->len - c->off < max ? c->len - c->off : max;
        memcpy(buf, c->buf + c->off, k);
        c->off += k;
        return (ssize_t)k;
}

static void cell_free(void *cls)
{
        struct cell *c = cls;

        cJSON_Delete(c->params);
        free(c->buf);
        free(c);
}

enum MHD_Result e2b_jupyter_execute(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *b = body(q, conn, &ans);
        const cJSON *code, *ctx, *lang, *env;
        const char *language, *context;
        struct cell *cell;
        struct MHD_Response *resp;
        enum MHD_Result r;
        cJSON *params;

        if (!b)
                return ans;
        code = cJSON_GetObjectItemCaseSensitive(b, "code");
        ctx = cJSON_GetObjectItemCaseSensitive(b, "context_id");
        lang = cJSON_GetObjectItemCaseSensitive(b, "language");
        env = cJSON_GetObjectItemCaseSensitive(b, "env_vars");
        if (!cJSON_IsString(code))
                return e2b_reply_error(conn, 400, "code is required (a string)");
        if (ctx && !cJSON_IsNull(ctx) && !(cJSON_IsString(ctx) && context_id_valid(ctx->valuestring)))
                return e2b_reply_error(conn, 404, "context not found");
        if (lang && !cJSON_IsNull(lang) && !(cJSON_IsString(lang) && language_of(lang->valuestring)))
                return e2b_reply_error(conn, 400, "language %.32s is not supported here (python, javascript)",
                                       cJSON_IsString(lang) ? lang->valuestring : "?");
        if (env && !cJSON_IsNull(env) && !cJSON_IsObject(env))
                return e2b_reply_error(conn, 400, "env_vars must be an object of strings");
        if (cJSON_IsString(ctx)) {
                context = ctx->valuestring;
                language = context_language(context);
        } else {
                language = language_of(cJSON_GetStringValue(lang));
                context = strcmp(language, "node") == 0 ? E2B_CONTEXT_DEFAULT_JS : E2B_CONTEXT_DEFAULT;
        }
        if (!e2b_session_exists(q))
                return e2b_reply_error(conn, 502, "sandbox %s not found", q->sandbox);
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddStringToObject(params, "code", code->valuestring);
        cJSON_AddStringToObject(params, "context", context);
        cJSON_AddStringToObject(params, "language", language);
        if (cJSON_IsObject(env) && env->child)
                cJSON_AddItemToObject(params, "env", cJSON_Duplicate(env, true));
        cell = calloc(1, sizeof(*cell));
        if (!cell) {
                cJSON_Delete(params);
                return MHD_NO;
        }
        cell->q = *q;
        cell->q.body = NULL; /* the copy owns nothing of the request */
        cell->params = params;
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, cell_read, cell, cell_free);
        if (!resp) {
                cell_free(cell);
                return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-ndjson");
        r = MHD_queue_response(conn, 200, resp);
        MHD_destroy_response(resp);
        metrics_http_status(200);
        return r;
}

static cJSON *context_object(const char *id)
{
        cJSON *o = cJSON_CreateObject();

        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "language", strcmp(context_language(id), "node") == 0 ? "javascript" : "python");
        cJSON_AddStringToObject(o, "cwd", "/home/user");
        return o;
}

enum MHD_Result e2b_jupyter_create(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *b = body(q, conn, &ans);
        const cJSON *lang, *cwd;
        const char *language;
        char id[E2B_ID_MAX + 1], hex[25];

        if (!b)
                return ans;
        lang = cJSON_GetObjectItemCaseSensitive(b, "language");
        cwd = cJSON_GetObjectItemCaseSensitive(b, "cwd");
        if (lang && !cJSON_IsNull(lang) && !(cJSON_IsString(lang) && language_of(lang->valuestring)))
                return e2b_reply_error(conn, 400, "language is not supported here (python, javascript)");
        if (cwd && !cJSON_IsNull(cwd) &&
            !(cJSON_IsString(cwd) &&
              (strcmp(cwd->valuestring, "/home/user") == 0 || strcmp(cwd->valuestring, "/workspace") == 0)))
                return e2b_reply_error(conn, 400, "a context's cwd can only be /home/user here");
        if (!e2b_session_exists(q))
                return e2b_reply_error(conn, 502, "sandbox %s not found", q->sandbox);
        language = language_of(cJSON_GetStringValue(lang));
        if (sbx_random_hex(hex, 12) < 0)
                return e2b_reply_error(conn, 500, "no randomness for a context id");
        snprintf(id, sizeof(id), "%s%s", strcmp(language, "node") == 0 ? "js" : "py", hex);
        return e2b_reply_json(conn, 200, context_object(id));
}

enum MHD_Result e2b_jupyter_list(struct e2b_req *q, struct MHD_Connection *conn)
{
        struct fronterr e = {0};
        cJSON *params, *res = NULL, *c, *out;

        if (!e2b_session_exists(q))
                return e2b_reply_error(conn, 502, "sandbox %s not found", q->sandbox);
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        if (e2b_call(q, "list_contexts", params, &res, &e) < 0)
                return e2b_reply_fronterr(conn, &e);
        out = cJSON_CreateArray();
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(res, "contexts")) {
                const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "context"));
                if (name && context_id_valid(name))
                        cJSON_AddItemToArray(out, context_object(name));
        }
        cJSON_Delete(res);
        return e2b_reply_json(conn, 200, out);
}

static enum MHD_Result context_call(struct e2b_req *q, struct MHD_Connection *conn, const char *method)
{
        struct fronterr e = {0};
        cJSON *params, *res = NULL;

        if (!context_id_valid(q->context))
                return e2b_reply_error(conn, 404, "context not found");
        if (!e2b_session_exists(q))
                return e2b_reply_error(conn, 502, "sandbox %s not found", q->sandbox);
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddStringToObject(params, "context", q->context);
        if (e2b_call(q, method, params, &res, &e) < 0)
                return e2b_reply_fronterr(conn, &e);
        cJSON_Delete(res);
        return e2b_reply_raw(conn, 204, NULL, NULL, 0);
}

enum MHD_Result e2b_jupyter_restart(struct e2b_req *q, struct MHD_Connection *conn)
{
        return context_call(q, conn, "restart_context");
}

enum MHD_Result e2b_jupyter_remove(struct e2b_req *q, struct MHD_Connection *conn)
{
        return context_call(q, conn, "delete_context");
}
