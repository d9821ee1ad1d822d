/* mcp_api.c — the adapter's client for the daemon's API socket (api.h): one
 * Unix stream connection, one request at a time, line-delimited JSON with
 * every reply line bounded by API_MAX_REPLY; the transport is
 * jsonl_client.h, shared with sandboxctl and the tests. Given an https://
 * URL instead of a socket path, every call goes to mcp_api_https.c (the same requests as
 * POST /v1/<method>).
 *
 * Threads: a connection belongs to one thread. The only cross-thread use is
 * shutdown(2) on its fd (mcp_api_fd) to wake a request blocked in read, which
 * then fails with -ECONNRESET; the owner still closes the fd. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "mcp_internal.h"
#include "sandboxd/api.h"
#include "sandboxd/jsonl_client.h"
#include "sandboxd/mcp.h"

struct mcp_api {
        struct mcp_https *https; /* an https:// URL instead of a socket (mcp_api_https.c) */
        int fd;
        unsigned long next_id;
};

int mcp_api_open(const char *socket_path, struct mcp_api **ret, struct sbx_error *err)
{
        struct mcp_api *a;
        int fd;

        if (!socket_path || !*socket_path)
                return sbx_error_set(err, -EINVAL, 0, "no API socket configured");
        if (mcp_https_is_url(socket_path)) {
                struct mcp_https *h;
                int r = mcp_https_open(socket_path, &h, err);
                if (r < 0)
                        return r;
                a = calloc(1, sizeof(*a));
                if (!a) {
                        mcp_https_close(h);
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                }
                a->https = h;
                a->fd = -1;
                *ret = a;
                return 0;
        }
        fd = jsonl_connect(socket_path, NULL);
        if (fd == -ENAMETOOLONG)
                return sbx_error_set(err, fd, 0, "API socket path too long: %s", socket_path);
        if (fd < 0)
                return sbx_error_set(err, fd, 0, "cannot connect to sandboxd at %s: %s", socket_path, strerror(-fd));
        a = calloc(1, sizeof(*a));
        if (!a) {
                close(fd);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        a->fd = fd;
        a->next_id = 1;
        *ret = a;
        return 0;
}

void mcp_api_close(struct mcp_api *a)
{
        if (!a)
                return;
        if (a->fd >= 0)
                close(a->fd);
        mcp_https_close(a->https);
        free(a);
}

int mcp_api_fd(struct mcp_api *a)
{
        return !a ? -1 : a->https ? mcp_https_fd(a->https) : a->fd;
}

static void set_err(struct mcp_api_error *err, const char *code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void set_err(struct mcp_api_error *err, const char *code, const char *fmt, ...)
{
        va_list ap;

        if (!err)
                return;
        sbx_strlcpy(err->code, code, sizeof(err->code));
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
}

int mcp_api_request(struct mcp_api *a, const char *token, const char *method, const cJSON *params, int timeout_ms,
                    mcp_api_event_fn on_event, void *userdata, cJSON **ret_result, struct mcp_api_error *err)
{
        unsigned long id;
        int64_t deadline;
        cJSON *req;
        int r;

        if (a && a->https)
                return mcp_https_request(a->https, token, method, params, timeout_ms, ret_result, err);
        if (!a || a->fd < 0) {
                set_err(err, "transport", "not connected to sandboxd");
                return -ENOTCONN;
        }
        id = a->next_id++;
        req = cJSON_CreateObject();
        if (!req || !cJSON_AddNumberToObject(req, "id", (double)id) ||
            !cJSON_AddStringToObject(req, "token", token ? token : "") ||
            !cJSON_AddStringToObject(req, "method", method) ||
            !cJSON_AddItemToObject(req, "params", params ? cJSON_Duplicate(params, true) : cJSON_CreateObject())) {
                cJSON_Delete(req);
                set_err(err, "transport", "out of memory");
                return -ENOMEM;
        }
        r = jsonl_send(a->fd, req);
        cJSON_Delete(req);
        if (r < 0) {
                set_err(err, "transport", "sending to sandboxd: %s", strerror(-r));
                return r;
        }

        deadline = sbx_now_ms() + (timeout_ms > 0 ? timeout_ms : 300000);
        for (;;) {
                char *line = NULL;
                size_t len = 0;
                cJSON *msg, *rid, *ok;

                int64_t left = deadline - sbx_now_ms();
                r = left > 0 ? jsonl_read_line(a->fd, API_MAX_REPLY, left > INT32_MAX ? INT32_MAX : (int)left, &line,
                                               &len)
                             : -ETIMEDOUT;
                if (r < 0) {
                        set_err(err, "transport", "%s",
                                r == -ECONNRESET  ? "sandboxd closed the connection"
                                : r == -ETIMEDOUT ? "no reply from sandboxd in time"
                                : r == -EMSGSIZE  ? "reply from sandboxd too long"
                                                  : strerror(-r));
                        return r;
                }
                msg = cJSON_ParseWithLength(line, len);
                free(line);
                if (!cJSON_IsObject(msg)) {
                        cJSON_Delete(msg);
                        set_err(err, "transport", "malformed reply from sandboxd");
                        return -EBADMSG;
                }
                rid = cJSON_GetObjectItemCaseSensitive(msg, "id");
                if (!cJSON_IsNumber(rid) || (unsigned long)rid->valuedouble != id) {
                        /* A reply to nothing we asked (e.g. id null for a line the
                         * daemon could not parse) still ends the exchange. */
                        const cJSON *e = cJSON_GetObjectItemCaseSensitive(msg, "error");
                        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
                        set_err(err, "transport", "unexpected reply from sandboxd%s%s", cJSON_IsString(m) ? ": " : "",
                                cJSON_IsString(m) ? m->valuestring : "");
                        cJSON_Delete(msg);
                        return -EBADMSG;
                }
                if (cJSON_GetObjectItemCaseSensitive(msg, "event")) {
                        if (on_event)
                                on_event(msg, userdata);
                        cJSON_Delete(msg);
                        continue;
                }
                ok = cJSON_GetObjectItemCaseSensitive(msg, "ok");
                if (cJSON_IsTrue(ok)) {
                        cJSON *result = cJSON_DetachItemFromObjectCaseSensitive(msg, "result");
                        cJSON_Delete(msg);
                        *ret_result = result ? result : cJSON_CreateObject();
                        return *ret_result ? 0 : -ENOMEM;
                }
                {
                        const cJSON *e = cJSON_GetObjectItemCaseSensitive(msg, "error");
                        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");
                        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
                        set_err(err, cJSON_IsString(c) ? c->valuestring : "internal", "%s",
                                cJSON_IsString(m) ? m->valuestring : "request failed");
                }
                cJSON_Delete(msg);
                return -EREMOTEIO;
        }
}
