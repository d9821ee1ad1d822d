/* mcp.c — the MCP adapter object and its input and output: the adapter's
 * life (mcp_new, references, mcp_free, mcp_drain), framing (mcp_feed splits
 * raw input into lines under MCP_MAX_LINE), the JSON-RPC 2.0 checks of one
 * line (mcp_handle_line, which hands requests and notifications to
 * mcp_methods.c), and writing messages (one line each, through the
 * transport's callback).
 *
 * Threads: the reading thread calls mcp_feed / mcp_handle_line; any thread
 * may write (worker threads answer their calls, mcp_calls.c).
 *   - out_lock serializes output lines (and guards output_closed, orphaned);
 *     it is taken last: the write callback runs under it and must not call
 *     back into the adapter;
 *   - lock (the calls, counters, negotiated version; see mcp_internal.h) may
 *     be held while writing, never taken while out_lock is held;
 *   - refs is atomic: the owner's reference plus one per call in flight, so
 *     the adapter outlives mcp_free until its last worker ends;
 *   - the line splitter (rbuf, rlen, discarding) is the reading thread's. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "mcp_internal.h"
#include "sandboxd/log.h"
#include "sandboxd/reqguard.h"
#include "sandboxd/session.h"
#include "sandboxd/utf8.h"

/* ---- the adapter ---- */

int mcp_new(const struct mcp_options *opt, struct mcp **ret, struct sbx_error *err)
{
        struct mcp *m;
        int r;

        if (!opt || (!opt->write && !opt->write_related))
                return sbx_error_set(err, -EINVAL, 0, "no output callback");
        if (opt->session && *opt->session && !session_id_valid(opt->session))
                return sbx_error_set(err, -EINVAL, 0,
                                     "invalid session '%.80s': 1-64 of [A-Za-z0-9_.-], not '.' or '..'", opt->session);
        r = mcp_tools_init();
        if (r < 0)
                return sbx_error_set(err, r, 0, "the built-in tool catalog (schemas/mcp_tools.json) is broken");
        m = calloc(1, sizeof(*m));
        if (!m)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        m->refs = 1;
        m->api_socket = strdup(opt->api_socket ? opt->api_socket : "");
        m->token = strdup(opt->token ? opt->token : "");
        if (!m->api_socket || !m->token) {
                free(m->api_socket);
                free(m->token);
                free(m);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        if (opt->session && *opt->session) {
                sbx_strlcpy(m->session, opt->session, sizeof(m->session));
        } else {
                char hex[13];
                r = sbx_random_hex(hex, 6);
                if (r < 0) {
                        free(m->api_socket);
                        free(m->token);
                        free(m);
                        return sbx_error_set(err, r, 0, "no randomness for a session name");
                }
                snprintf(m->session, sizeof(m->session), "mcp-%s", hex);
        }
        m->max_inflight = opt->max_inflight ? opt->max_inflight : MCP_MAX_INFLIGHT_DEFAULT;
        m->poll_wait_s = opt->poll_wait_s > 0 ? opt->poll_wait_s : 30;
        m->write = opt->write;
        m->write_related = opt->write_related;
        m->write_userdata = opt->write_userdata;
        m->client_log_level = -1;
        pthread_mutex_init(&m->out_lock, NULL);
        pthread_mutex_init(&m->lock, NULL);
        pthread_cond_init(&m->idle, NULL);
        *ret = m;
        return 0;
}

void mcp_unref(struct mcp *m)
{
        if (!m || __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) > 0)
                return;
        pthread_mutex_destroy(&m->out_lock);
        pthread_mutex_destroy(&m->lock);
        pthread_cond_destroy(&m->idle);
        free(m->api_socket);
        free(m->token);
        free(m->rbuf);
        free(m);
}

void mcp_free(struct mcp *m)
{
        if (!m)
                return;
        pthread_mutex_lock(&m->out_lock);
        m->orphaned = true;
        pthread_mutex_unlock(&m->out_lock);
        mcp_unref(m);
}

int mcp_drain(struct mcp *m, int timeout_ms)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms >= 0 ? timeout_ms : 0);
        int r = 0;

        pthread_mutex_lock(&m->lock);
        while (m->inflight > 0 && r == 0)
                r = timeout_ms < 0 ? pthread_cond_wait(&m->idle, &m->lock)
                                   : pthread_cond_timedwait(&m->idle, &m->lock, &until);
        r = m->inflight > 0 ? -ETIMEDOUT : 0;
        pthread_mutex_unlock(&m->lock);
        return r;
}

size_t mcp_inflight(struct mcp *m)
{
        return MCP_LOCKED(&m->lock, m->inflight);
}

bool mcp_output_closed(struct mcp *m)
{
        return MCP_LOCKED(&m->out_lock, m->output_closed);
}

const char *mcp_default_session(struct mcp *m)
{
        return m->session;
}

/* ---- output ---- */

/* Serialize and write one message; takes msg. related is the id of the
 * request it answers or belongs to (progress, logs of a call), NULL for
 * none: a transport with several streams routes by it. */
static void send_msg(struct mcp *m, cJSON *msg, const cJSON *related)
{
        char *text;
        size_t n;

        if (!msg)
                return;
        text = cJSON_PrintUnformatted(msg);
        cJSON_Delete(msg);
        if (!text) {
                log_error("mcp: out of memory serializing a message");
                return;
        }
        n = strlen(text);
        text[n] = '\n'; /* cJSON escapes every control character: no raw newline inside */
        pthread_mutex_lock(&m->out_lock);
        if (!m->output_closed && !m->orphaned &&
            (m->write_related ? m->write_related(text, n + 1, related, m->write_userdata)
                              : m->write(text, n + 1, m->write_userdata)) < 0) {
                m->output_closed = true;
                log_info("mcp: output closed");
        }
        pthread_mutex_unlock(&m->out_lock);
        free(text);
}

static cJSON *envelope(const cJSON *id)
{
        cJSON *msg = cJSON_CreateObject();

        cJSON_AddStringToObject(msg, "jsonrpc", "2.0");
        if (id)
                cJSON_AddItemToObject(msg, "id", cJSON_Duplicate(id, true));
        return msg;
}

/* Strings from the client may be anything; messages we build must stay valid UTF-8. */
void mcp_send_error(struct mcp *m, const cJSON *id, int code, cJSON *data, const char *fmt, ...)
{
        char buf[1024];
        cJSON *msg, *e;
        char *clean;
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        clean = utf8_sanitize(buf, strlen(buf));
        msg = envelope(NULL);
        cJSON_AddItemToObject(msg, "id", id ? cJSON_Duplicate(id, true) : cJSON_CreateNull());
        e = cJSON_AddObjectToObject(msg, "error");
        cJSON_AddNumberToObject(e, "code", code);
        cJSON_AddStringToObject(e, "message", clean ? clean : "error");
        if (data)
                cJSON_AddItemToObject(e, "data", data);
        free(clean);
        log_debug("mcp: error %d: %s", code, buf);
        send_msg(m, msg, id);
}

cJSON *mcp_server_info(void)
{
        cJSON *info = cJSON_CreateObject();

        cJSON_AddStringToObject(info, "name", MCP_SERVER_NAME);
        cJSON_AddStringToObject(info, "title", MCP_SERVER_TITLE);
        cJSON_AddStringToObject(info, "version", SBX_VERSION);
        return info;
}

/* Send a result; takes result. Modern results carry resultType (type, else
 * "complete") and serverInfo. */
void mcp_send_result(struct mcp *m, const cJSON *id, cJSON *result, bool modern, const char *type)
{
        cJSON *msg = envelope(id);

        if (modern) {
                cJSON *meta = cJSON_GetObjectItemCaseSensitive(result, "_meta");
                if (!cJSON_IsObject(meta))
                        meta = cJSON_AddObjectToObject(result, "_meta");
                cJSON_AddItemToObject(meta, MCP_META_SERVER_INFO, mcp_server_info());
                cJSON_DeleteItemFromObjectCaseSensitive(result, "resultType");
                cJSON_AddStringToObject(result, "resultType", type ? type : "complete");
        }
        cJSON_AddItemToObject(msg, "result", result);
        send_msg(m, msg, id);
}

void mcp_send_notification(struct mcp *m, const char *method, cJSON *params, const cJSON *related)
{
        cJSON *msg = envelope(NULL);

        cJSON_AddStringToObject(msg, "method", method);
        cJSON_AddItemToObject(msg, "params", params);
        send_msg(m, msg, related);
}

/* ---- input ---- */

bool mcp_valid_id(const cJSON *id)
{
        if (cJSON_IsString(id))
                return true;
        return cJSON_IsNumber(id) && id->valuedouble == (double)(int64_t)id->valuedouble;
}

void mcp_handle_line(struct mcp *m, const char *line, size_t len)
{
        const char *end = NULL;
        const cJSON *jsonrpc, *method, *id, *params;
        enum reqguard_verdict verdict;
        cJSON *msg;
        size_t i;

        if (len && line[len - 1] == '\r')
                len--;
        for (i = 0; i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'); i++)
                ;
        if (i == len)
                return; /* blank lines are not messages */
        if (memchr(line, '\0', len)) {
                mcp_send_error(m, NULL, MCP_PARSE_ERROR, NULL, "Parse error: NUL byte in message");
                return;
        }
        /* bounded before parsing (see reqguard.h) */
        verdict = reqguard_scan(line, len, REQGUARD_MAX_ELEMENTS, REQGUARD_MAX_DEPTH);
        if (!reqguard_verdict_is_invalid(verdict) && verdict != REQGUARD_OK) {
                mcp_send_error(m, NULL, MCP_INVALID_REQUEST, NULL, "%s", reqguard_verdict_message(verdict));
                return;
        }
        msg = cJSON_ParseWithLengthOpts(line, len, &end, false);
        if (msg && end) {
                while (end < line + len && (*end == ' ' || *end == '\t' || *end == '\r'))
                        end++;
                if (end != line + len) {
                        cJSON_Delete(msg);
                        msg = NULL;
                }
        }
        if (!msg) {
                mcp_send_error(m, NULL, MCP_PARSE_ERROR, NULL, "Parse error: not a JSON text");
                return;
        }
        if (cJSON_IsArray(msg)) {
                mcp_send_error(m, NULL, MCP_INVALID_REQUEST, NULL, "Invalid Request: batches are not supported");
                goto out;
        }
        if (!cJSON_IsObject(msg)) {
                mcp_send_error(m, NULL, MCP_INVALID_REQUEST, NULL, "Invalid Request: a message must be a JSON object");
                goto out;
        }
        jsonrpc = cJSON_GetObjectItemCaseSensitive(msg, "jsonrpc");
        method = cJSON_GetObjectItemCaseSensitive(msg, "method");
        id = cJSON_GetObjectItemCaseSensitive(msg, "id");
        params = cJSON_GetObjectItemCaseSensitive(msg, "params");
        if (!method &&
            (cJSON_GetObjectItemCaseSensitive(msg, "result") || cJSON_GetObjectItemCaseSensitive(msg, "error"))) {
                /* A response: we never send requests, so there is nothing to match. */
                log_debug("mcp: ignoring a response from the client");
                goto out;
        }
        if (verdict != REQGUARD_OK && method) {
                /* strict strings: a NUL would truncate an argument, invalid UTF-8 is no JSON text */
                mcp_send_error(m, mcp_valid_id(id) ? id : NULL, MCP_INVALID_PARAMS, NULL, "%s",
                               reqguard_verdict_message(verdict));
                goto out;
        }
        if (!cJSON_IsString(jsonrpc) || strcmp(jsonrpc->valuestring, "2.0") != 0) {
                mcp_send_error(m, mcp_valid_id(id) ? id : NULL, MCP_INVALID_REQUEST, NULL,
                               "Invalid Request: jsonrpc must be \"2.0\"");
                goto out;
        }
        if (!cJSON_IsString(method)) {
                mcp_send_error(m, mcp_valid_id(id) ? id : NULL, MCP_INVALID_REQUEST, NULL,
                               "Invalid Request: method must be a string");
                goto out;
        }
        if (!id) {
                mcp_methods_notification(m, method->valuestring, params);
                goto out;
        }
        if (!mcp_valid_id(id)) {
                mcp_send_error(m, NULL, MCP_INVALID_REQUEST, NULL,
                               "Invalid Request: id must be a string or an integer");
                goto out;
        }
        mcp_methods_request(m, id, method->valuestring, params);
out:
        cJSON_Delete(msg);
}

/* ---- framing ---- */

void mcp_feed(struct mcp *m, const void *data, size_t len)
{
        const char *p = data, *end = p + len;

        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t n = (size_t)((nl ? nl : end) - p);

                if (m->discarding) {
                        if (nl)
                                m->discarding = false;
                        p += n + (nl ? 1 : 0);
                        continue;
                }
                if (m->rlen + n > MCP_MAX_LINE) {
                        /* Answer now and drop the rest of the line as it streams by. */
                        mcp_send_error(m, NULL, MCP_PARSE_ERROR, NULL, "Parse error: message longer than %d bytes",
                                       MCP_MAX_LINE);
                        m->rlen = 0;
                        m->discarding = !nl;
                        if (m->rcap > 65536) {
                                free(m->rbuf);
                                m->rbuf = NULL;
                                m->rcap = 0;
                        }
                        p += n + (nl ? 1 : 0);
                        continue;
                }
                if (nl && m->rlen == 0) {
                        mcp_handle_line(m, p, n); /* the common case: no copy */
                        p += n + 1;
                        continue;
                }
                if (m->rlen + n > m->rcap) {
                        size_t cap = m->rcap ? m->rcap : 65536;
                        char *b;
                        while (cap < m->rlen + n)
                                cap *= 2;
                        if (cap > MCP_MAX_LINE)
                                cap = MCP_MAX_LINE;
                        b = realloc(m->rbuf, cap);
                        if (!b) {
                                mcp_send_error(m, NULL, MCP_INTERNAL_ERROR, NULL, "out of memory reading a message");
                                m->rlen = 0;
                                m->discarding = !nl;
                                p += n + (nl ? 1 : 0);
                                continue;
                        }
                        m->rbuf = b;
                        m->rcap = cap;
                }
                memcpy(m->rbuf + m->rlen, p, n);
                m->rlen += n;
                p += n;
                if (nl) {
                        mcp_handle_line(m, m->rbuf, m->rlen);
                        m->rlen = 0;
                        p++;
                        if (m->rcap > 1024 * 1024) {
                                free(m->rbuf);
                                m->rbuf = NULL;
                                m->rcap = 0;
                        }
                }
        }
}

void mcp_feed_eof(struct mcp *m)
{
        if (m->rlen && !m->discarding)
                mcp_handle_line(m, m->rbuf, m->rlen);
        m->rlen = 0;
        m->discarding = false;
}
