/* mcp_resources.c — large outputs by reference (issue 17 item 6). A tool
 * result whose output was cut (truncated: true) carries resource_link
 * content items to the whole of each stream, which resources/read serves in
 * pages, in both protocol eras:
 *
 *   sandboxd://sessions/<session>/executions/<execution_id>/<stdout|stderr|outputs>[?offset=<n>]
 *
 * (outputs: a run_cell cell's non-stream outputs, one JSON line each; a
 * cell's execution_id is read with get_execution like an execution's).
 *
 * Every read is a get_execution on the API socket with the caller's token,
 * so the daemon's tenant checks apply unchanged: another user's execution,
 * or one outside the named session, is "Resource not found".
 *
 * Paging, within the spec: resources/read takes only a uri, so the page is
 * part of it. A read returns at most MCP_RESOURCE_PAGE bytes from offset (0
 * when absent), cut back to a UTF-8 character boundary, as text when the
 * page is valid UTF-8 without NUL, else as a base64 blob. The content's
 * _meta says where it is: sandboxd/offset, sandboxd/next_offset,
 * sandboxd/total_bytes, sandboxd/eof, and sandboxd/next, the uri of the
 * next page (absent at the end). Pages of a still running execution end
 * where its output ends so far.
 *
 * No threads or state of its own; reads run on the adapter's reading thread
 * (each API request is bounded by RESOURCE_TIMEOUT_MS). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_internal.h"
#include "sandboxd/session.h"
#include "sandboxd/utf8.h"

#define URI_PREFIX "sandboxd://sessions/"
#define RESOURCE_TIMEOUT_MS 30000
#define OFFSET_PAST_ALL 1e15 /* the other stream's offset: past any output, so none comes back */
#define META_PREFIX "sandboxd/"
/* get_execution requests per page (each returns up to 2 × EXEC_RESULT_HEAD_BYTES) */
#define PAGE_MAX_REQUESTS 256

struct res_uri {
        char session[65];
        char id[65];
        const char *stream; /* "stdout" | "stderr" | "outputs" (a cell's) */
        uint64_t offset;
};

/* Parse a sandboxd resource uri; false for anything else. */
static bool parse_uri(const char *uri, struct res_uri *ret)
{
        const char *p = uri, *slash, *q;
        size_t n;

        if (!uri || strlen(uri) > 512 || strncmp(p, URI_PREFIX, strlen(URI_PREFIX)) != 0)
                return false;
        p += strlen(URI_PREFIX);
        slash = strchr(p, '/');
        n = slash ? (size_t)(slash - p) : 0;
        if (!slash || n == 0 || n >= sizeof(ret->session))
                return false;
        memcpy(ret->session, p, n);
        ret->session[n] = '\0';
        if (!session_id_valid(ret->session))
                return false;
        p = slash + 1;
        if (strncmp(p, "executions/", 11) != 0)
                return false;
        p += 11;
        slash = strchr(p, '/');
        n = slash ? (size_t)(slash - p) : 0;
        if (!slash || n == 0 || n >= sizeof(ret->id))
                return false;
        memcpy(ret->id, p, n);
        ret->id[n] = '\0';
        for (size_t i = 0; i < n; i++) /* execution ids are UUIDs */
                if (!((ret->id[i] >= '0' && ret->id[i] <= '9') || (ret->id[i] >= 'a' && ret->id[i] <= 'f') ||
                      (ret->id[i] >= 'A' && ret->id[i] <= 'F') || ret->id[i] == '-'))
                        return false;
        p = slash + 1;
        q = strchr(p, '?');
        n = q ? (size_t)(q - p) : strlen(p);
        if (n == 6 && strncmp(p, "stdout", 6) == 0)
                ret->stream = "stdout";
        else if (n == 6 && strncmp(p, "stderr", 6) == 0)
                ret->stream = "stderr";
        else if (n == 7 && strncmp(p, "outputs", 7) == 0)
                ret->stream = "outputs"; /* a run_cell cell's other outputs, one JSON line each */
        else
                return false;
        ret->offset = 0;
        if (q) {
                char *end;
                if (strncmp(q, "?offset=", 8) != 0 || q[8] < '0' || q[8] > '9')
                        return false;
                errno = 0;
                unsigned long long v = strtoull(q + 8, &end, 10);
                if (errno || *end || v > (1ULL << 50))
                        return false;
                ret->offset = v;
        }
        return true;
}

static void format_uri(char *buf, size_t size, const char *session, const char *id, const char *stream, uint64_t offset)
{
        if (offset)
                snprintf(buf, size, URI_PREFIX "%s/executions/%s/%s?offset=%" PRIu64, session, id, stream, offset);
        else
                snprintf(buf, size, URI_PREFIX "%s/executions/%s/%s", session, id, stream);
}

static double num_or(const cJSON *o, const char *key, double def)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsNumber(v) ? v->valuedouble : def;
}

cJSON *mcp_resource_links(const char *session, const cJSON *structured)
{
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(structured, "execution_id");
        static const char *const streams[] = {"stdout", "stderr", "outputs"}; /* outputs: cells only */
        cJSON *links;

        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(structured, "truncated")) || !cJSON_IsString(id) ||
            !session_id_valid(session))
                return NULL;
        links = cJSON_CreateArray();
        for (size_t i = 0; links && i < ELEMENTSOF(streams); i++) {
                char uri[300], key[32], name[128], desc[160];
                double bytes;
                cJSON *l;

                snprintf(key, sizeof(key), "%s_bytes", streams[i]);
                bytes = num_or(structured, key, 0);
                if (bytes <= 0)
                        continue;
                format_uri(uri, sizeof(uri), session, id->valuestring, streams[i], 0);
                snprintf(name, sizeof(name), "%s of execution %.64s", streams[i], id->valuestring);
                snprintf(desc, sizeof(desc),
                         "The whole %s (%.0f bytes), read in pages with resources/read (see _meta sandboxd/next).",
                         streams[i], bytes);
                l = cJSON_CreateObject();
                cJSON_AddStringToObject(l, "type", "resource_link");
                cJSON_AddStringToObject(l, "uri", uri);
                cJSON_AddStringToObject(l, "name", name);
                cJSON_AddStringToObject(l, "description", desc);
                cJSON_AddStringToObject(l, "mimeType", i == 2 ? "application/x-ndjson" : "text/plain");
                cJSON_AddNumberToObject(l, "size", bytes);
                cJSON_AddItemToArray(links, l);
        }
        return links;
}

cJSON *mcp_resource_templates(void)
{
        cJSON *list = cJSON_CreateArray(), *t = cJSON_CreateObject();

        cJSON_AddStringToObject(t, "uriTemplate", URI_PREFIX "{session}/executions/{execution_id}/{stream}");
        cJSON_AddStringToObject(t, "name", "execution-output");
        cJSON_AddStringToObject(t, "title", "Output of an execution");
        cJSON_AddStringToObject(t, "description",
                                "The whole stdout or stderr of an execution, in pages: append ?offset=<n> "
                                "(or follow _meta sandboxd/next).");
        cJSON_AddStringToObject(t, "mimeType", "text/plain");
        cJSON_AddItemToArray(list, t);
        return list;
}

/* Bytes of one stream from u->offset, at most MCP_RESOURCE_PAGE, in *buf;
 * *ret_drained when the last read found nothing more, and *ret_final when
 * that read also saw the execution ended (so nothing more will come). */
static int read_page(struct mcp *m, const struct res_uri *u, unsigned char **ret_buf, size_t *ret_len,
                     uint64_t *ret_total, bool *ret_final, bool *ret_drained, int *ret_code, char *msg, size_t msg_size)
{
        struct mcp_api *a = NULL;
        struct sbx_error err = {0};
        char key[32];
        cJSON *params;
        unsigned char *buf = NULL;
        size_t len = 0;
        uint64_t off = u->offset;
        int r = 0;

        *ret_code = MCP_INTERNAL_ERROR;
        if (mcp_api_open(m->api_socket, &a, &err) < 0) {
                snprintf(msg, msg_size, "sandboxd is not reachable: %s", err.msg);
                return -1;
        }
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", u->session);
        cJSON_AddStringToObject(params, "execution_id", u->id);
        cJSON_AddStringToObject(params, "encoding", "base64");
        /* the other streams: past any output, so none comes back */
        cJSON_AddNumberToObject(params, "stdout_offset", OFFSET_PAST_ALL);
        cJSON_AddNumberToObject(params, "stderr_offset", OFFSET_PAST_ALL);
        if (strcmp(u->stream, "outputs") == 0)
                cJSON_AddNumberToObject(params, "outputs_offset", 0);
        snprintf(key, sizeof(key), "%s_offset", u->stream);
        *ret_drained = false;
        for (int i = 0; i < PAGE_MAX_REQUESTS; i++) {
                struct mcp_api_error e = {0};
                cJSON *res = NULL;
                const cJSON *data;
                unsigned char *chunk = NULL;
                size_t n = 0;
                int k;

                cJSON_ReplaceItemInObjectCaseSensitive(params, key, cJSON_CreateNumber((double)off));
                k = mcp_api_request(a, m->token, "get_execution", params, RESOURCE_TIMEOUT_MS, NULL, NULL, &res, &e);
                if (k < 0) {
                        if (k == -EREMOTEIO && (strcmp(e.code, "not_found") == 0 || strcmp(e.code, "invalid") == 0 ||
                                                strcmp(e.code, "bad_request") == 0))
                                *ret_code = MCP_RESOURCE_NOT_FOUND;
                        snprintf(msg, msg_size, "%s: %s", e.code, e.message);
                        r = -1;
                        break;
                }
                data = cJSON_GetObjectItemCaseSensitive(res, u->stream);
                if (cJSON_IsString(data) && *data->valuestring &&
                    base64_decode(data->valuestring, strlen(data->valuestring), &chunk, &n) < 0)
                        n = 0;
                snprintf(key, sizeof(key), "%s_bytes", u->stream);
                *ret_total = (uint64_t)num_or(res, key, 0);
                snprintf(key, sizeof(key), "%s_offset", u->stream);
                *ret_final = mcp_execution_final(res);
                if (n > MCP_RESOURCE_PAGE - len)
                        n = MCP_RESOURCE_PAGE - len;
                if (n > 0) {
                        unsigned char *nb = realloc(buf, len + n);
                        if (!nb) {
                                free(chunk);
                                cJSON_Delete(res);
                                snprintf(msg, msg_size, "out of memory");
                                r = -1;
                                break;
                        }
                        buf = nb;
                        memcpy(buf + len, chunk, n);
                        len += n;
                        off += n;
                }
                free(chunk);
                cJSON_Delete(res);
                if (n == 0) {
                        *ret_drained = true;
                        break;
                }
                if (len >= MCP_RESOURCE_PAGE)
                        break;
        }
        cJSON_Delete(params);
        mcp_api_close(a);
        if (r < 0) {
                free(buf);
                return -1;
        }
        *ret_buf = buf;
        *ret_len = len;
        return 0;
}

int mcp_resource_read(struct mcp *m, const cJSON *params, cJSON **ret_result, int *ret_code, char *msg, size_t msg_size)
{
        const cJSON *uri = cJSON_GetObjectItemCaseSensitive(params, "uri");
        struct res_uri u;
        _cleanup_free_ unsigned char *buf = NULL;
        size_t len = 0;
        uint64_t total = 0, next;
        bool final = false, drained = false, eof;
        cJSON *result, *contents, *item, *meta;
        char next_uri[300];

        if (!cJSON_IsString(uri)) {
                *ret_code = MCP_INVALID_PARAMS;
                snprintf(msg, msg_size, "resources/read: params.uri must be a string");
                return -1;
        }
        if (!parse_uri(uri->valuestring, &u)) {
                *ret_code = MCP_RESOURCE_NOT_FOUND;
                snprintf(msg, msg_size,
                         "Resource not found: expected " URI_PREFIX
                         "<session>/executions/<id>/<stdout|stderr|outputs>"
                         "[?offset=<n>]");
                return -1;
        }
        if (!m->token[0]) {
                *ret_code = MCP_INTERNAL_ERROR;
                snprintf(msg, msg_size, "no API token configured for sandboxd-mcp");
                return -1;
        }
        if (read_page(m, &u, &buf, &len, &total, &final, &drained, ret_code, msg, msg_size) < 0)
                return -1;
        if (!drained) /* more follows: the page ends on a character boundary */
                len -= utf8_incomplete_tail(buf, len);
        next = u.offset + len;
        /* the end: the execution had ended when a read found nothing more */
        eof = final && drained;

        result = cJSON_CreateObject();
        contents = cJSON_AddArrayToObject(result, "contents");
        item = cJSON_CreateObject();
        cJSON_AddStringToObject(item, "uri", uri->valuestring);
        if (utf8_is_valid(buf, len) && (!len || !memchr(buf, '\0', len))) {
                char *text = malloc(len + 1);
                if (!text) {
                        cJSON_Delete(result);
                        cJSON_Delete(item);
                        *ret_code = MCP_INTERNAL_ERROR;
                        snprintf(msg, msg_size, "out of memory");
                        return -1;
                }
                if (len)
                        memcpy(text, buf, len);
                text[len] = '\0';
                cJSON_AddStringToObject(item, "mimeType", "text/plain");
                cJSON_AddStringToObject(item, "text", text);
                free(text);
        } else {
                _cleanup_free_ char *b64 = base64_encode(buf, len);
                cJSON_AddStringToObject(item, "mimeType", "application/octet-stream");
                cJSON_AddStringToObject(item, "blob", b64 ? b64 : "");
        }
        meta = cJSON_AddObjectToObject(item, "_meta");
        cJSON_AddNumberToObject(meta, META_PREFIX "offset", (double)u.offset);
        cJSON_AddNumberToObject(meta, META_PREFIX "bytes", (double)len);
        cJSON_AddNumberToObject(meta, META_PREFIX "next_offset", (double)next);
        cJSON_AddNumberToObject(meta, META_PREFIX "total_bytes", (double)total);
        cJSON_AddBoolToObject(meta, META_PREFIX "eof", eof);
        if (!eof) {
                format_uri(next_uri, sizeof(next_uri), u.session, u.id, u.stream, next);
                cJSON_AddStringToObject(meta, META_PREFIX "next", next_uri);
        }
        cJSON_AddItemToArray(contents, item);
        *ret_result = result;
        return 0;
}
