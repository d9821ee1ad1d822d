/* apiclient.c — see apiclient.h. The transport is the daemon's own
 * client (jsonl_client.h); this adds the tests' assertions. */
#include "apiclient.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "sandboxd/api.h"
#include "sandboxd/common.h"
#include "sandboxd/jsonl_client.h"

int apic_connect(const char *path)
{
        return jsonl_connect(path, NULL);
}

int apic_send(int fd, const void *buf, size_t len)
{
        return jsonl_send_raw(fd, buf, len);
}

char *apic_read_line(int fd, int timeout_ms)
{
        char *line = NULL;
        size_t len;

        /* jsonl_read_line never takes a byte past the '\n': later lines stay in the socket */
        return jsonl_read_line(fd, API_MAX_REPLY, timeout_ms, &line, &len) == 0 ? line : NULL;
}

void apic_request(int fd, int id, const char *token, const char *method, cJSON *params)
{
        cJSON *o = cJSON_CreateObject();

        cJSON_AddNumberToObject(o, "id", id);
        if (token)
                cJSON_AddStringToObject(o, "token", token);
        cJSON_AddStringToObject(o, "method", method);
        if (params)
                cJSON_AddItemToObject(o, "params", params);
        cr_assert_eq(jsonl_send(fd, o), 0);
        cJSON_Delete(o);
}

cJSON *apic_reply(int fd, int timeout_ms, cJSON **ret_progress)
{
        if (ret_progress)
                *ret_progress = cJSON_CreateArray();
        for (;;) {
                char *line = apic_read_line(fd, timeout_ms);
                cJSON *o;
                if (!line)
                        return NULL;
                o = cJSON_Parse(line);
                cr_assert_not_null(o, "unparseable reply line: %.200s", line);
                free(line);
                if (cJSON_GetObjectItemCaseSensitive(o, "ok"))
                        return o;
                if (ret_progress)
                        cJSON_AddItemToArray(*ret_progress, o);
                else
                        cJSON_Delete(o);
        }
}

cJSON *apic_call(const char *path, const char *token, const char *method, cJSON *params)
{
        int fd = apic_connect(path);
        cJSON *r;

        cr_assert_geq(fd, 0, "connect %s: %s", path, strerror(-fd));
        apic_request(fd, 1, token, method, params);
        r = apic_reply(fd, 120000, NULL);
        close(fd);
        cr_assert_not_null(r, "no reply to %s", method);
        return r;
}

const char *apic_code(const cJSON *reply)
{
        const cJSON *e;
        if (!reply)
                return "?";
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok")))
                return "";
        e = cJSON_GetObjectItemCaseSensitive(reply, "error");
        e = cJSON_GetObjectItemCaseSensitive(e, "code");
        return cJSON_IsString(e) ? e->valuestring : "?";
}

const cJSON *apic_result(const cJSON *reply)
{
        if (!reply || !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok")))
                return NULL;
        return cJSON_GetObjectItemCaseSensitive(reply, "result");
}

const char *apic_str(const cJSON *o, const char *key)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

double apic_num(const cJSON *o, const char *key)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsNumber(v) ? v->valuedouble : -12345;
}

cJSON *apic_admin(const char *path, const char *json_line)
{
        int fd = apic_connect(path);
        char *line;
        cJSON *r;

        cr_assert_geq(fd, 0, "connect %s: %s", path, strerror(-fd));
        cr_assert_eq(apic_send(fd, json_line, strlen(json_line)), 0);
        cr_assert_eq(apic_send(fd, "\n", 1), 0);
        line = apic_read_line(fd, 120000);
        close(fd);
        cr_assert_not_null(line, "no reply to %s", json_line);
        r = cJSON_Parse(line);
        cr_assert_not_null(r, "unparseable: %s", line);
        free(line);
        return r;
}

cJSON *apic_json(const char *text)
{
        cJSON *o = cJSON_Parse(text);
        cr_assert_not_null(o, "bad test JSON: %s", text);
        return o;
}
