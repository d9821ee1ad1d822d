/* mcp_tools.c — running the MCP tools: how each call becomes requests on
 * the daemon's API socket. The tools themselves (names, descriptions, input
 * and output schemas) are data: schemas/mcp_tools.json, loaded by
 * mcp_catalog.c.
 *
 * Every tool maps to the API method of the same name, with the call's session
 * added. exec and run_code without background are followed by the adapter
 * itself: the execution is started in the background (so its id is known at
 * once and a cancel can name it), then long-polled with get_execution until
 * it ends — with stdout/stderr offsets when the client asked for progress, so
 * new output becomes notifications/progress as it arrives. The daemon's
 * replies are made to conform to the advertised outputSchema.
 *
 * Threads: mcp_tool_run runs on the call's worker thread and touches only the
 * call, its own API connections and the read-only catalog; the call's shared
 * fields go through mcp_call_* (mcp_calls.c, under the adapter's lock). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "mcp_internal.h"
#include "sandboxd/log.h"
#include "sandboxd/utf8.h"

#define PROGRESS_MESSAGE_MAX 16384
#define REQUEST_TIMEOUT_MS 300000

/* ---- talking to the daemon ---- */

static void result_error(struct mcp_tool_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void result_error(struct mcp_tool_result *r, const char *fmt, ...)
{
        char buf[1400];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        cJSON_Delete(r->structured);
        r->structured = NULL;
        free(r->text);
        r->text = utf8_sanitize(buf, strlen(buf));
        r->is_error = true;
}

static int open_api(struct mcp_call *c, struct mcp_api **ret, struct mcp_tool_result *r)
{
        struct sbx_error err = {0};
        int k;

        if (!c->m->token[0]) {
                result_error(r, "no API token configured for sandboxd-mcp: set SANDBOXD_TOKEN or pass --token-file");
                return -EPERM;
        }
        k = mcp_api_open(c->m->api_socket, ret, &err);
        if (k < 0) {
                log_warn("mcp: %s", err.msg);
                mcp_call_log(c, MCP_LOG_WARNING, "%s", err.msg);
                result_error(r, "sandboxd is not reachable: %s", err.msg);
        }
        return k;
}

/* The call's trace context on one of its API requests (mcp_call_start). */
static void add_trace(struct mcp_call *c, cJSON *params)
{
        if (params && c->traceparent[0]) {
                cJSON_DeleteItemFromObjectCaseSensitive(params, "traceparent");
                cJSON_AddStringToObject(params, "traceparent", c->traceparent);
        }
}

static cJSON *api_params(struct mcp_call *c)
{
        cJSON *p = cJSON_Duplicate(c->args, true);

        if (!p)
                return NULL;
        add_trace(c, p);
        {
                /* a user-level tool names a session only when the caller did */
                const struct mcp_tool *t = mcp_tool_find(c->tool);
                if (t && t->user_level && !cJSON_GetObjectItemCaseSensitive(c->args, "session"))
                        return p;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(p, "session");
        cJSON_AddStringToObject(p, "session", c->session);
        return p;
}

static int wait_timeout_ms(const cJSON *params)
{
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(params, "wait");
        /* run_tests waits for its whole run: as long as the run may take */
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(params, "timeout_seconds");
        bool bg = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(params, "background"));
        int extra = cJSON_IsNumber(t) && !bg && t->valuedouble > 0 && t->valuedouble < 7 * 86400
                            ? (int)t->valuedouble * 1000
                            : 0;

        if (cJSON_IsTrue(w))
                return REQUEST_TIMEOUT_MS + extra + 60000;
        return REQUEST_TIMEOUT_MS + extra +
               (cJSON_IsNumber(w) && w->valuedouble > 0 && w->valuedouble <= 3600 ? (int)w->valuedouble * 1000 : 0);
}

static void api_failure(struct mcp_call *c, struct mcp_tool_result *r, int k, const struct mcp_api_error *e)
{
        if (k == -EREMOTEIO) {
                result_error(r, "%s: %s", e->code, e->message);
                return;
        }
        log_warn("mcp: %s: %s", c->tool, e->message);
        mcp_call_log(c, MCP_LOG_WARNING, "%s: %s", c->tool, e->message);
        result_error(r, "sandboxd: %s", e->message);
}

/* Shape a reply as the advertised outputSchema says; takes res. */
static void set_structured(const struct mcp_tool *t, struct mcp_tool_result *r, cJSON *res)
{
        const cJSON *sess = cJSON_GetObjectItemCaseSensitive(res, "session");

        /* output cut short: links to the whole of it (not for offset reads) */
        if (!cJSON_GetObjectItemCaseSensitive(res, "stdout_offset") && cJSON_IsString(sess))
                r->links = mcp_resource_links(sess->valuestring, res);
        if (cJSON_IsArray(res) && t->wrap) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddItemToObject(o, t->wrap, res);
                res = o;
        }
        if (!cJSON_IsObject(res)) {
                cJSON_Delete(res);
                res = cJSON_CreateObject();
        }
        mcp_schema_conform(t->output_schema, res);
        r->structured = res;
}

static void cancel_behind(struct mcp_call *c, const char *execution_id);

/* run_cell's streamed outputs as progress notifications (the client gave a
 * progress token): stream text as it is, other outputs by their type. */
struct cell_progress {
        struct mcp_call *c;
        double n;
        bool forward;          /* the client gave a progress token */
        char execution_id[64]; /* from the "started" event: what a cancel names */
};

static void on_cell_event(const cJSON *ev, void *ud)
{
        struct cell_progress *p = ud;
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(ev, "data");
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(ev, "output");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(out, "type");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(ev, "execution_id");
        char msg[PROGRESS_MESSAGE_MAX];

        if (cJSON_IsString(id) && !p->execution_id[0]) {
                snprintf(p->execution_id, sizeof(p->execution_id), "%s", id->valuestring);
                return;
        }
        if (!p->forward)
                return;
        if (cJSON_IsString(data))
                snprintf(msg, sizeof(msg), "%s", data->valuestring);
        else if (cJSON_IsString(type))
                snprintf(msg, sizeof(msg), "[%s]", type->valuestring);
        else
                return;
        p->n += 1;
        mcp_call_progress(p->c, p->n, msg);
}

static void run_passthrough(struct mcp_call *c, const struct mcp_tool *t, struct mcp_tool_result *r)
{
        struct cell_progress cp = {.c = c, .forward = c->progress_token != NULL};
        /* a cell always streams: its "started" event names it for a cancel */
        bool cell_stream = strcmp(t->name, "run_cell") == 0;
        struct mcp_api *a = NULL;
        struct mcp_api_error e = {0};
        cJSON *params, *res = NULL;
        int k;

        if (open_api(c, &a, r) < 0)
                return;
        params = api_params(c);
        if (!params || mcp_call_attach(c, a) < 0) {
                r->suppress = params != NULL;
                if (!params)
                        result_error(r, "out of memory");
                goto out;
        }
        if (strcmp(t->name, "read_file") == 0) {
                const cJSON *len = cJSON_GetObjectItemCaseSensitive(params, "length");
                if (!cJSON_IsNumber(len) || len->valuedouble > MCP_READ_FILE_MAX) {
                        cJSON_DeleteItemFromObjectCaseSensitive(params, "length");
                        cJSON_AddNumberToObject(params, "length", MCP_READ_FILE_MAX);
                }
        }
        if (cell_stream)
                cJSON_AddTrueToObject(params, "stream");
        k = mcp_api_request(a, c->m->token, t->name, params, wait_timeout_ms(params),
                            cell_stream ? on_cell_event : NULL, &cp, &res, &e);
        mcp_call_detach(c);
        if (mcp_call_cancelled(c)) {
                r->suppress = true;
                cJSON_Delete(res);
                if (cell_stream && cp.execution_id[0] && k != 0)
                        cancel_behind(c, cp.execution_id); /* interrupt the cell, as exec's tools do */
                goto out;
        }
        if (k < 0) {
                api_failure(c, r, k, &e);
                goto out;
        }
        set_structured(t, r, res);
        if (strcmp(t->name, "run_cell") == 0 || strcmp(t->name, "last_cell") == 0)
                mcp_cell_content(r);
out:
        cJSON_Delete(params);
        mcp_api_close(a);
}

/* ---- following an execution ---- */

static bool state_is(const cJSON *res, const char *state)
{
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(res, "state");

        return cJSON_IsString(s) && strcasecmp(s->valuestring, state) == 0;
}

bool mcp_execution_final(const cJSON *res)
{
        return state_is(res, "COMPLETED") || state_is(res, "FAILED") || state_is(res, "CANCELLED") ||
               state_is(res, "TIMEOUT");
}

static bool execution_failed(const cJSON *res)
{
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(res, "exit_code");

        if (!state_is(res, "COMPLETED"))
                return true;
        return !cJSON_IsNumber(code) || code->valuedouble != 0;
}

/* Carry an incomplete UTF-8 sequence at the end of a chunk into the next. */
struct text_stream {
        unsigned char carry[4];
        size_t carry_len;
};

/* Append the text of new bytes to *buf (bounded by PROGRESS_MESSAGE_MAX). */
static void text_append(struct text_stream *ts, const unsigned char *data, size_t len, char **buf, size_t *blen,
                        uint64_t *dropped)
{
        unsigned char *joined;
        size_t n = ts->carry_len + len, tail, keep;
        char *clean;

        joined = malloc(n ? n : 1);
        if (!joined)
                return;
        memcpy(joined, ts->carry, ts->carry_len);
        if (len)
                memcpy(joined + ts->carry_len, data, len);
        tail = utf8_incomplete_tail(joined, n);
        memcpy(ts->carry, joined + n - tail, tail);
        ts->carry_len = tail;
        n -= tail;
        keep = *blen < PROGRESS_MESSAGE_MAX ? PROGRESS_MESSAGE_MAX - *blen : 0;
        if (n > keep) {
                *dropped += n - keep;
                /* back up to a character boundary */
                while (keep > 0 && (joined[keep] & 0xC0) == 0x80)
                        keep--;
                n = keep;
        }
        clean = utf8_sanitize(joined, n);
        free(joined);
        if (!clean)
                return;
        size_t cl = strlen(clean);
        char *b = realloc(*buf, *blen + cl + 1);
        if (b) {
                memcpy(b + *blen, clean, cl + 1);
                *buf = b;
                *blen += cl;
        }
        free(clean);
}

static size_t decode_stream(const cJSON *res, const char *key, unsigned char **ret)
{
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(res, key);
        size_t n = 0;

        *ret = NULL;
        if (!cJSON_IsString(s) || !*s->valuestring)
                return 0;
        if (base64_decode(s->valuestring, strlen(s->valuestring), ret, &n) < 0) {
                *ret = NULL;
                return 0;
        }
        return n;
}

static uint64_t next_offset(const cJSON *res, const char *key, uint64_t fallback)
{
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(res, key);

        return cJSON_IsNumber(n) && n->valuedouble >= 0 ? (uint64_t)n->valuedouble : fallback;
}

/* One request on a connection of its own, not attached to the call: as
 * mcp_api_request, or the error of reaching the daemon (code "transport"). */
static int request_once(struct mcp *m, const char *method, const cJSON *params, cJSON **ret_res,
                        struct mcp_api_error *e)
{
        struct mcp_api *a = NULL;
        struct sbx_error err = {0};
        int k = mcp_api_open(m->api_socket, &a, &err);

        if (k < 0) {
                snprintf(e->code, sizeof(e->code), "transport");
                snprintf(e->message, sizeof(e->message), "%s", err.msg);
                return k;
        }
        k = mcp_api_request(a, m->token, method, params, REQUEST_TIMEOUT_MS, NULL, NULL, ret_res, e);
        mcp_api_close(a);
        return k;
}

/* Ask the daemon to cancel the call's execution, on a second connection. */
static void cancel_behind(struct mcp_call *c, const char *execution_id)
{
        struct mcp_api_error e = {0};
        cJSON *params = cJSON_CreateObject(), *res = NULL;

        cJSON_AddStringToObject(params, "session", c->session);
        cJSON_AddStringToObject(params, "execution_id", execution_id);
        add_trace(c, params);
        if (request_once(c->m, "cancel_execution", params, &res, &e) < 0 && strcmp(e.code, "already_finished") != 0)
                log_warn("mcp: cannot cancel execution %s: %s: %s", execution_id, e.code, e.message);
        else
                log_info("mcp: execution %s cancelled at the client's request", execution_id);
        cJSON_Delete(res);
        cJSON_Delete(params);
}

static void run_exec(struct mcp_call *c, const struct mcp_tool *t, struct mcp_tool_result *r)
{
        const cJSON *bg = cJSON_GetObjectItemCaseSensitive(c->args, "background");
        struct text_stream out_ts = {0}, err_ts = {0};
        struct mcp_api *a = NULL;
        struct mcp_api_error e = {0};
        cJSON *params = NULL, *res = NULL, *poll = NULL;
        const cJSON *idj;
        char id[64];
        uint64_t so = 0, se = 0;
        bool follow_output = c->progress_token != NULL;
        bool may_task = c->tasks_ok; /* a task once it has run MCP_TASK_AFTER_S */
        int64_t started;
        int k, quick = 0;

        if (cJSON_IsTrue(bg) && !c->legacy_task) {
                run_passthrough(c, t, r);
                return;
        }
        if (open_api(c, &a, r) < 0)
                return;
        params = api_params(c);
        if (!params) {
                result_error(r, "out of memory");
                goto out;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(params, "background");
        cJSON_AddTrueToObject(params, "background");

        /* Not attached to the call: cutting the start short (it may include
         * creating the container) could leave an execution we cannot name.
         * A cancel that came meanwhile is honoured right after. */
        k = mcp_api_request(a, c->m->token, t->name, params, REQUEST_TIMEOUT_MS, NULL, NULL, &res, &e);
        if (k < 0) {
                if (mcp_call_cancelled(c))
                        r->suppress = true;
                else
                        api_failure(c, r, k, &e);
                goto out;
        }
        idj = cJSON_GetObjectItemCaseSensitive(res, "execution_id");
        if (!cJSON_IsString(idj) || !*idj->valuestring) {
                result_error(r, "sandboxd: the reply to %s carries no execution_id", t->name);
                goto out;
        }
        sbx_strlcpy(id, idj->valuestring, sizeof(id));
        log_info("mcp: %s started execution %s (session %s)", t->name, id, c->session);
        mcp_call_log(c, MCP_LOG_INFO, "execution %s started", id);
        {
                char note[96];
                snprintf(note, sizeof(note), "execution %s started", id);
                mcp_call_progress(c, 0, note);
        }

        if (c->legacy_task) {
                /* 2025-11-25: asked as a task, answered as one at once (or refused) */
                if (mcp_task_create(c, a, id, r) < 0) {
                        cancel_behind(c, id);
                        r->rpc_code = MCP_INTERNAL_ERROR;
                        snprintf(r->rpc_message, sizeof(r->rpc_message),
                                 "cannot make a task now (too many live tasks?): call without params.task");
                }
                goto out;
        }
        started = sbx_now_ms();
        poll = cJSON_CreateObject();
        cJSON_AddStringToObject(poll, "session", c->session);
        cJSON_AddStringToObject(poll, "execution_id", id);
        add_trace(c, poll);
        cJSON_AddNumberToObject(poll, "wait", may_task ? MCP_TASK_AFTER_S : c->m->poll_wait_s);
        if (follow_output) {
                cJSON_AddStringToObject(poll, "encoding", "base64");
                cJSON_AddNumberToObject(poll, "stdout_offset", 0);
                cJSON_AddNumberToObject(poll, "stderr_offset", 0);
        }
        for (;;) {
                int64_t t0 = sbx_now_ms();
                unsigned char *ob = NULL, *eb = NULL;
                size_t on = 0, en = 0;
                bool final;

                cJSON_Delete(res);
                res = NULL;
                if (mcp_call_attach(c, a) < 0) {
                        cancel_behind(c, id);
                        r->suppress = true;
                        goto out;
                }
                k = mcp_api_request(a, c->m->token, "get_execution", poll, wait_timeout_ms(poll), NULL, NULL, &res, &e);
                mcp_call_detach(c);
                if (mcp_call_cancelled(c)) {
                        cancel_behind(c, id);
                        r->suppress = true;
                        goto out;
                }
                if (k < 0) {
                        if (k == -EREMOTEIO)
                                result_error(r, "%s: %s (execution %s)", e.code, e.message, id);
                        else
                                result_error(r,
                                             "lost sandboxd while following execution %s (%s); it may still be "
                                             "running: use get_execution",
                                             id, e.message);
                        goto out;
                }
                final = mcp_execution_final(res);
                if (may_task && !final && sbx_now_ms() - started >= MCP_TASK_AFTER_S * 1000 - 50) {
                        /* Long: hand the client a task instead (else go on in the foreground). */
                        if (mcp_task_create(c, a, id, r) == 0)
                                goto out;
                        may_task = false;
                        cJSON_ReplaceItemInObjectCaseSensitive(poll, "wait", cJSON_CreateNumber(c->m->poll_wait_s));
                }
                if (!follow_output) {
                        if (final)
                                break;
                        continue;
                }
                on = decode_stream(res, "stdout", &ob);
                en = decode_stream(res, "stderr", &eb);
                if (on || en) {
                        char *msg = NULL;
                        size_t mlen = 0;
                        uint64_t dropped = 0;
                        so = next_offset(res, "stdout_next_offset", so + on);
                        se = next_offset(res, "stderr_next_offset", se + en);
                        cJSON_ReplaceItemInObjectCaseSensitive(poll, "stdout_offset", cJSON_CreateNumber((double)so));
                        cJSON_ReplaceItemInObjectCaseSensitive(poll, "stderr_offset", cJSON_CreateNumber((double)se));
                        text_append(&out_ts, ob, on, &msg, &mlen, &dropped);
                        text_append(&err_ts, eb, en, &msg, &mlen, &dropped);
                        if (dropped) {
                                char note[64];
                                snprintf(note, sizeof(note), "\n...[%llu more bytes]", (unsigned long long)dropped);
                                char *b = realloc(msg, mlen + strlen(note) + 1);
                                if (b) {
                                        msg = b;
                                        strcpy(msg + mlen, note);
                                }
                        }
                        mcp_call_progress(c, (double)(so + se), msg ? msg : "");
                        free(msg);
                        quick = 0;
                } else if (!final && sbx_now_ms() - t0 < 200) {
                        /* Nothing new yet no wait either (e.g. output past the
                         * spool cap): do not spin. */
                        if (++quick > 2)
                                sbx_sleep_ms(250);
                }
                free(ob);
                free(eb);
                if (final && !on && !en)
                        break;
        }
        if (follow_output) {
                /* The result proper: head and tail of each stream. */
                cJSON_Delete(res);
                res = NULL;
                cJSON_DeleteItemFromObjectCaseSensitive(poll, "stdout_offset");
                cJSON_DeleteItemFromObjectCaseSensitive(poll, "stderr_offset");
                cJSON_DeleteItemFromObjectCaseSensitive(poll, "encoding");
                cJSON_ReplaceItemInObjectCaseSensitive(poll, "wait", cJSON_CreateNumber(0));
                k = mcp_api_request(a, c->m->token, "get_execution", poll, REQUEST_TIMEOUT_MS, NULL, NULL, &res, &e);
                if (k < 0) {
                        result_error(r, "%s: %s (execution %s)", e.code, e.message, id);
                        goto out;
                }
        }
        r->is_error = execution_failed(res);
        set_structured(t, r, res);
        res = NULL;
out:
        cJSON_Delete(res);
        cJSON_Delete(poll);
        cJSON_Delete(params);
        mcp_api_close(a);
}

void mcp_tool_execution_result(const char *tool, cJSON *res, struct mcp_tool_result *r)
{
        const struct mcp_tool *t = mcp_tool_find(tool);

        if (!t) {
                cJSON_Delete(res);
                result_error(r, "unknown tool %s", tool);
                return;
        }
        r->is_error = execution_failed(res);
        set_structured(t, r, res);
}

void mcp_tool_run(struct mcp_call *c, struct mcp_tool_result *r)
{
        const struct mcp_tool *t = mcp_tool_find(c->tool);

        if (!t) {
                result_error(r, "unknown tool %s", c->tool);
                return;
        }
        if (t->follow)
                run_exec(c, t, r);
        else
                run_passthrough(c, t, r);
}
