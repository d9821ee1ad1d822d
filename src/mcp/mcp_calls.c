/* mcp_calls.c — the adapter's tool calls in flight: each tools/call (and
 * each tasks/ request, which also asks the daemon) is registered on the
 * adapter and runs on a detached worker thread of its own (mcp_tools.c,
 * mcp_tasks.c) holding a reference on the adapter; the worker answers its
 * call, unless the call was cancelled. A cancel (notifications/cancelled, or
 * mcp_cancel_all) marks the call and shuts its API connection down; the
 * worker, woken, cancels the execution it started over a second connection.
 * Progress and log notifications of a call go out from here too, and the
 * CallToolResult is cut down to fit one output line.
 *
 * Threads: m->lock guards the call list, m->inflight, and in each call the
 * fields mcp_internal.h marks (cancelled, api_fd, progress); the rest of a
 * call is its worker's. Answers and progress are written with m->lock held
 * (so mcp_drain returning means every answer is out, and progress values
 * leave in order): lock before out_lock, never the other way round. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "mcp_internal.h"
#include "sandboxd/log.h"
#include "sandboxd/utf8.h"

int mcp_call_attach(struct mcp_call *c, struct mcp_api *a)
{
        int r = 0;

        pthread_mutex_lock(&c->m->lock);
        if (c->cancelled)
                r = -ECANCELED;
        else
                c->api_fd = mcp_api_fd(a);
        pthread_mutex_unlock(&c->m->lock);
        return r;
}

void mcp_call_detach(struct mcp_call *c)
{
        pthread_mutex_lock(&c->m->lock);
        c->api_fd = -1;
        pthread_mutex_unlock(&c->m->lock);
}

bool mcp_call_cancelled(struct mcp_call *c)
{
        return MCP_LOCKED(&c->m->lock, c->cancelled);
}

void mcp_call_progress(struct mcp_call *c, double progress, const char *message)
{
        struct mcp *m = c->m;
        cJSON *params;

        if (!c->progress_token)
                return;
        pthread_mutex_lock(&m->lock);
        if (c->cancelled || (c->progress_sent && progress <= c->progress)) {
                pthread_mutex_unlock(&m->lock);
                return;
        }
        c->progress = progress;
        c->progress_sent = true;
        params = cJSON_CreateObject();
        cJSON_AddItemToObject(params, "progressToken", cJSON_Duplicate(c->progress_token, true));
        cJSON_AddNumberToObject(params, "progress", progress);
        if (message && c->rank >= MCP_REV_2025_03_26)
                cJSON_AddStringToObject(params, "message", message);
        /* Sent under lock so progress values leave in increasing order. */
        mcp_send_notification(m, "notifications/progress", params, c->id);
        pthread_mutex_unlock(&m->lock);
}

void mcp_call_log(struct mcp_call *c, int level, const char *fmt, ...)
{
        struct mcp *m = c->m;
        char buf[1024];
        cJSON *params;
        char *clean;
        va_list ap;
        int want;

        pthread_mutex_lock(&m->lock);
        want = c->modern ? c->log_level : m->client_log_level;
        pthread_mutex_unlock(&m->lock);
        if (want < 0 || level < want)
                return;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        clean = utf8_sanitize(buf, strlen(buf));
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "level", mcp_log_level_name(level));
        cJSON_AddStringToObject(params, "logger", MCP_SERVER_NAME);
        cJSON_AddStringToObject(params, "data", clean ? clean : "");
        free(clean);
        mcp_send_notification(m, "notifications/message", params, c->id);
}

static void call_free(struct mcp_call *c)
{
        if (!c)
                return;
        cJSON_Delete(c->id);
        cJSON_Delete(c->args);
        cJSON_Delete(c->progress_token);
        free(c);
}

static cJSON *result_json(const struct mcp_tool_result *r, int rank)
{
        cJSON *result = cJSON_CreateObject(), *content, *block;
        char *text = NULL;

        content = cJSON_AddArrayToObject(result, "content");
        block = cJSON_CreateObject();
        cJSON_AddStringToObject(block, "type", "text");
        if (r->text) {
                cJSON_AddStringToObject(block, "text", r->text);
        } else {
                text = r->structured ? cJSON_PrintUnformatted(r->structured) : NULL;
                cJSON_AddStringToObject(block, "text", text ? text : "");
                free(text);
        }
        cJSON_AddItemToArray(content, block);
        if (r->content) { /* image blocks: in every protocol version */
                const cJSON *b;
                cJSON_ArrayForEach(b, r->content)
                        cJSON_AddItemToArray(content, cJSON_Duplicate(b, true));
        }
        if (r->links && rank >= MCP_REV_2025_06_18) { /* resource_link came with 2025-06-18 */
                const cJSON *l;
                cJSON_ArrayForEach(l, r->links)
                        cJSON_AddItemToArray(content, cJSON_Duplicate(l, true));
        }
        if (r->structured && rank >= MCP_REV_2025_06_18)
                cJSON_AddItemToObject(result, "structuredContent", cJSON_Duplicate(r->structured, true));
        if (r->is_error)
                cJSON_AddTrueToObject(result, "isError");
        return result;
}

static size_t printed_size(const cJSON *j)
{
        char *s = cJSON_PrintUnformatted(j);
        size_t n = s ? strlen(s) : SIZE_MAX;

        free(s);
        return n;
}

/* A tool result that fits in one output line: first without the text copy
 * of the structured content, then as an error asking for less. */
cJSON *mcp_tool_result_json(const struct mcp_tool_result *r, int rank)
{
        const size_t budget = MCP_MAX_OUTPUT - 4096; /* room for the envelope */
        cJSON *res = result_json(r, rank);
        size_t n = printed_size(res);
        char note[512];

        if (n <= budget)
                return res;
        cJSON_Delete(res);
        if (r->structured && rank >= MCP_REV_2025_06_18) {
                struct mcp_tool_result small = *r;
                snprintf(note, sizeof(note), "(%zu bytes of result: see structuredContent)", n);
                small.text = note;
                res = result_json(&small, rank);
                if (printed_size(res) <= budget)
                        return res;
                cJSON_Delete(res);
        }
        struct mcp_tool_result err = {.is_error = true, .text = note};
        snprintf(note, sizeof(note),
                 "the result (%zu bytes) is over the %d-byte message limit: ask for less (read_file offset and "
                 "length, get_execution offsets, service_logs tail_lines)",
                 n, MCP_MAX_OUTPUT);
        log_warn("mcp: %s", note);
        return result_json(&err, rank);
}

static void *call_thread(void *p)
{
        struct mcp_call *c = p, **pp;
        struct mcp *m = c->m;
        struct mcp_tool_result r = {0};
        bool cancelled;

        if (c->kind == MCP_CALL_TASK)
                mcp_task_run(c, &r);
        else
                mcp_tool_run(c, &r);

        pthread_mutex_lock(&m->lock);
        for (pp = &m->calls; *pp; pp = &(*pp)->next)
                if (*pp == c) {
                        *pp = c->next;
                        break;
                }
        cancelled = c->cancelled;
        /* Answer before the call leaves the count, so mcp_drain returning
         * means every answer has been written. */
        if (cancelled || r.suppress)
                ;
        else if (r.rpc_code) {
                mcp_send_error(m, c->id, r.rpc_code, r.rpc_data, "%s", r.rpc_message);
                r.rpc_data = NULL;
        } else if (r.raw) {
                mcp_send_result(m, c->id, r.raw, c->modern, r.raw_type);
                r.raw = NULL;
        } else {
                mcp_send_result(m, c->id, mcp_tool_result_json(&r, c->rank), c->modern, NULL);
        }
        m->inflight--;
        pthread_cond_broadcast(&m->idle);
        pthread_mutex_unlock(&m->lock);

        log_debug("mcp: %s call done%s%s", c->tool, r.is_error ? " (error)" : "", cancelled ? " (cancelled)" : "");
        cJSON_Delete(r.structured);
        cJSON_Delete(r.raw);
        cJSON_Delete(r.rpc_data);
        cJSON_Delete(r.links);
        cJSON_Delete(r.content);
        free(r.text);
        call_free(c);
        mcp_unref(m);
        return NULL;
}

/* An input validation error: a tool result the model can read and correct. */
void mcp_send_tool_error(struct mcp *m, const struct mcp_req *q, const char *text)
{
        struct mcp_tool_result r = {.text = (char *)text, .is_error = true};

        mcp_send_result(m, q->id, mcp_tool_result_json(&r, q->rank), q->modern, NULL);
}

static void refuse_call(struct mcp *m, const struct mcp_req *q, enum mcp_call_kind kind, const char *why)
{
        if (kind == MCP_CALL_TOOL)
                mcp_send_tool_error(m, q, why);
        else
                mcp_send_error(m, q->id, MCP_INTERNAL_ERROR, NULL, "%s", why);
}

/* Register a call and start its worker thread, which answers it. */
void mcp_call_start(struct mcp *m, const struct mcp_req *q, enum mcp_call_kind kind, const char *name,
                    const cJSON *args, const char *session, const cJSON *token)
{
        struct mcp_call *c, *it;
        char msg[512];
        pthread_attr_t attr;
        pthread_t th;
        int r;

        c = calloc(1, sizeof(*c));
        if (!c) {
                mcp_send_error(m, q->id, MCP_INTERNAL_ERROR, NULL, "out of memory");
                return;
        }
        c->m = m;
        c->kind = kind;
        c->tasks_ok = q->tasks_ok && q->modern;
        c->legacy_task = q->legacy_task;
        c->id = cJSON_Duplicate(q->id, true);
        sbx_strlcpy(c->tool, name, sizeof(c->tool));
        c->args = args ? cJSON_Duplicate(args, true) : cJSON_CreateObject();
        sbx_strlcpy(c->session, session, sizeof(c->session));
        if (mcp_valid_id(token)) /* a progress token is a string or an integer, like an id */
                c->progress_token = cJSON_Duplicate(token, true);
        c->rank = q->rank;
        c->modern = q->modern;
        c->log_level = q->log_level;
        c->api_fd = -1;
        {
                /* the W3C trace context MCP clients send in _meta: every API request of the call names it */
                const cJSON *tp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(q->params, "_meta"),
                                                                   "traceparent");
                char trace[33];
                if (cJSON_IsString(tp) && reqctx_traceparent_parse(tp->valuestring, trace))
                        sbx_strlcpy(c->traceparent, tp->valuestring, sizeof(c->traceparent));
        }
        if (!c->id || !c->args) {
                call_free(c);
                mcp_send_error(m, q->id, MCP_INTERNAL_ERROR, NULL, "out of memory");
                return;
        }

        pthread_mutex_lock(&m->lock);
        for (it = m->calls; it; it = it->next)
                if (cJSON_Compare(it->id, q->id, true))
                        break;
        if (it) {
                pthread_mutex_unlock(&m->lock);
                call_free(c);
                mcp_send_error(m, q->id, MCP_INVALID_REQUEST, NULL, "a request with this id is still in flight");
                return;
        }
        if (m->inflight >= m->max_inflight) {
                pthread_mutex_unlock(&m->lock);
                call_free(c);
                snprintf(msg, sizeof(msg), "busy: %zu tool calls are already in flight; wait for one to finish",
                         m->max_inflight);
                refuse_call(m, q, kind, msg);
                return;
        }
        c->next = m->calls;
        m->calls = c;
        m->inflight++;
        __atomic_add_fetch(&m->refs, 1, __ATOMIC_ACQ_REL);
        pthread_mutex_unlock(&m->lock);

        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        r = pthread_create(&th, &attr, call_thread, c);
        pthread_attr_destroy(&attr);
        if (r != 0) {
                struct mcp_call **pp;
                pthread_mutex_lock(&m->lock);
                for (pp = &m->calls; *pp; pp = &(*pp)->next)
                        if (*pp == c) {
                                *pp = c->next;
                                break;
                        }
                m->inflight--;
                pthread_cond_broadcast(&m->idle);
                pthread_mutex_unlock(&m->lock);
                call_free(c);
                __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL); /* the caller still holds its own */
                refuse_call(m, q, kind, "busy: cannot start a worker thread");
                return;
        }
        log_debug("mcp: %s call started (session %s)", name, session);
}

/* Mark a call cancelled and wake its worker out of its read; the worker
 * then cancels the execution it started. Under m->lock. */
static void cancel_call_locked(struct mcp_call *c, const char *why)
{
        if (c->cancelled)
                return;
        c->cancelled = true;
        if (c->api_fd >= 0)
                shutdown(c->api_fd, SHUT_RDWR);
        log_info("mcp: %s call cancelled %.200s", c->tool, why);
}

void mcp_call_cancel_request(struct mcp *m, const cJSON *params)
{
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(params, "requestId");
        const cJSON *reason = cJSON_GetObjectItemCaseSensitive(params, "reason");
        struct mcp_call *c;

        if (!rid)
                return;
        pthread_mutex_lock(&m->lock);
        for (c = m->calls; c; c = c->next)
                if (cJSON_Compare(c->id, rid, true))
                        break;
        if (c)
                cancel_call_locked(c, cJSON_IsString(reason) ? reason->valuestring : "by the client");
        pthread_mutex_unlock(&m->lock);
}

void mcp_cancel_all(struct mcp *m)
{
        pthread_mutex_lock(&m->lock);
        for (struct mcp_call *c = m->calls; c; c = c->next)
                cancel_call_locked(c, "(the MCP session ended)");
        pthread_mutex_unlock(&m->lock);
}
