/* e2b_jupyter.c — E2B's code interpreter (port 49999 of a sandbox: the
 * @e2b/code-interpreter SDK's runCode and contexts) on the HTTPS front, on
 * run_cell's stateful interpreters (cells.h). /execute answers one JSON
 * line per output, as E2B's does (stdout, stderr, result with its MIME
 * bundle, error with its traceback, number_of_executions,
 * end_of_execution): the headers at once, each output's line as it comes
 * (cell_worker below). A context id is its sandboxd
 * context's name, "py"/"js" and hex, so its language is in its name; the
 * default contexts are "default" (python) and "default-js". No state. */
#include <pthread.h>
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
 * body starts the cell on a worker thread ("sbx-e2b-cell") that runs
 * run_cell with stream: its outputs become lines as they come (the SDK's
 * onStdout, onStderr and onResult fire while the cell runs), then the
 * error, number_of_executions and end_of_execution once it has ended. The
 * connection's thread hands the lines to MHD; when the response goes, it
 * joins the worker, so the cell never outlives its connection's thread (as
 * before the worker: http_server_stop waits for those). The lines queued
 * are bounded by what run_cell streams (CELLS_OUTPUT_CAP_BYTES inline). */
struct cell {
        struct e2b_req q;       /* the worker's copy: its api_conn sends to the cell */
        struct api_conn client; /* the connection's own, for its gone() on that thread */
        char peer[64];          /* q.c.peer_addr: the connection's copy is not the worker's */
        cJSON *params;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        char *buf; /* lock: lines not yet handed to MHD */
        size_t len, off;
        bool started, done, had_error; /* done: lock */
        bool closed;                   /* lock: the response is gone */
        pthread_t worker;
};

static void cell_add(struct cell *c, cJSON *o)
{
        pthread_mutex_lock(&c->lock);
        if (c->off > 0 && c->off == c->len)
                c->off = c->len = 0;
        add_line(&c->buf, &c->len, o);
        pthread_cond_signal(&c->cond);
        pthread_mutex_unlock(&c->lock);
}

/* api.c's progress of a streamed run_cell: {"event": "output", "stream",
 * "data"} for stream text, {"event": "display", "output"} for the rest. */
static void cell_send(struct api_conn *conn, cJSON *msg)
{
        struct cell *c = conn->transport;
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "event"));
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(msg, "output");
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(out, "type"));
        cJSON *o;

        if (ev && strcmp(ev, "output") == 0) {
                const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "stream"));
                o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "type", name && strcmp(name, "stderr") == 0 ? "stderr" : "stdout");
                cJSON_AddStringToObject(o, "text",
                                        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "data")) ?: "");
                cell_add(c, o);
        } else if (ev && strcmp(ev, "display") == 0 && type) {
                if (strcmp(type, "display_data") == 0 || strcmp(type, "execute_result") == 0) {
                        cell_add(c, result_line(out, strcmp(type, "execute_result") == 0));
                } else if (strcmp(type, "error") == 0) {
                        c->had_error = true; /* the worker's own thread */
                        cell_add(c, error_line(out));
                }
        }
}

static bool cell_gone(struct api_conn *conn)
{
        struct cell *c = conn->transport;
        bool closed;

        pthread_mutex_lock(&c->lock);
        closed = c->closed;
        pthread_mutex_unlock(&c->lock);
        return closed;
}

static void cell_end(struct cell *c)
{
        cJSON *o = cJSON_CreateObject();

        cJSON_AddStringToObject(o, "type", "end_of_execution");
        cell_add(c, o);
        pthread_mutex_lock(&c->lock);
        c->done = true;
        pthread_cond_signal(&c->cond);
        pthread_mutex_unlock(&c->lock);
}

static void cell_fail(struct cell *c, const char *code, const char *msg)
{
        cJSON *o = cJSON_CreateObject();

        cJSON_AddStringToObject(o, "type", "error");
        cJSON_AddStringToObject(o, "name", code ? code : "internal");
        jsonutil_add_text(o, "value", msg ? msg : "");
        cJSON_AddStringToObject(o, "traceback", "");
        cell_add(c, o);
        cell_end(c);
}

static void *cell_worker(void *arg)
{
        struct cell *c = arg;
        struct fronterr e = {0};
        cJSON *res = NULL, *o;
        const cJSON *err;
        cJSON *params = c->params;

        c->params = NULL; /* e2b_call takes them */
        if (e2b_call(&c->q, "run_cell", params, &res, &e) < 0) {
                cell_fail(c, e.code, e.msg);
                return NULL;
        }
        err = cJSON_GetObjectItemCaseSensitive(res, "error");
        if (!c->had_error && cJSON_IsObject(err))
                cell_add(c, error_line(err));
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "number_of_executions");
        cJSON_AddNumberToObject(o, "execution_count",
                                cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "execution_count")));
        cell_add(c, o);
        cJSON_Delete(res);
        cell_end(c);
        return NULL;
}

/* MHD pulls the lines on the connection's thread: block until there is
 * one, the cell has ended, or the client left. */
static ssize_t cell_read(void *cls, uint64_t pos, char *buf, size_t max)
{
        struct cell *c = cls;
        ssize_t n;

        (void)pos;
        pthread_mutex_lock(&c->lock);
        if (!c->started) {
                c->started = true;
                if (pthread_create(&c->worker, NULL, cell_worker, c) != 0) {
                        c->started = false;
                        pthread_mutex_unlock(&c->lock);
                        cell_fail(c, "unavailable", "cannot start the cell now");
                        pthread_mutex_lock(&c->lock);
                } else {
                        pthread_setname_np(c->worker, "sbx-e2b-cell");
                }
        }
        for (;;) {
                if (c->off < c->len) {
                        size_t k = c->len - c->off < max ? c->len - c->off : max;
                        memcpy(buf, c->buf + c->off, k);
                        c->off += k;
                        n = (ssize_t)k;
                        break;
                }
                if (c->done) {
                        n = MHD_CONTENT_READER_END_OF_STREAM;
                        break;
                }
                if (c->client.gone && c->client.gone(&c->client)) {
                        n = MHD_CONTENT_READER_END_WITH_ERROR;
                        break;
                }
                struct timespec until = sbx_deadline_after(CLOCK_REALTIME, 500);
                (void)pthread_cond_timedwait(&c->cond, &c->lock, &until);
        }
        pthread_mutex_unlock(&c->lock);
        return n;
}

static void cell_free(void *cls)
{
        struct cell *c = cls;

        pthread_mutex_lock(&c->lock);
        c->closed = true;
        pthread_mutex_unlock(&c->lock);
        if (c->started)
                pthread_join(c->worker, NULL);
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->cond);
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
        cJSON_AddTrueToObject(params, "stream");
        if (cJSON_IsObject(env) && env->child)
                cJSON_AddItemToObject(params, "env", cJSON_Duplicate(env, true));
        cell = calloc(1, sizeof(*cell));
        if (!cell) {
                cJSON_Delete(params);
                return MHD_NO;
        }
        pthread_mutex_init(&cell->lock, NULL);
        pthread_cond_init(&cell->cond, NULL);
        cell->q = *q;
        cell->q.body = NULL; /* the copy owns nothing of the request */
        cell->client = q->c;
        cell->q.c.send = cell_send;
        cell->q.c.gone = cell_gone;
        cell->q.c.transport = cell;
        snprintf(cell->peer, sizeof(cell->peer), "%s", q->c.peer_addr ? q->c.peer_addr : "");
        cell->q.c.peer_addr = q->c.peer_addr ? cell->peer : NULL;
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
