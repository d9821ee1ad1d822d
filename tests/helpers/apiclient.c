/* apiclient.c — see apiclient.h. */
#include "apiclient.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandboxd/common.h"

int apic_connect(const char *path)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0)
                return -errno;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int e = errno;
                close(fd);
                return -e;
        }
        return fd;
}

int apic_send(int fd, const void *buf, size_t len)
{
        const char *p = buf;
        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

char *apic_read_line(int fd, int timeout_ms)
{
        size_t len = 0, cap = 4096;
        char *buf = malloc(cap);
        int64_t until = sbx_now_ms() + timeout_ms;

        /* byte by byte is slow but keeps later lines in the socket for the next call */
        for (;;) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                int64_t left = until - sbx_now_ms();
                char ch;
                ssize_t n;

                if (left <= 0 || poll(&p, 1, (int)left) <= 0)
                        break;
                n = read(fd, &ch, 1);
                if (n <= 0)
                        break;
                if (ch == '\n') {
                        buf[len] = '\0';
                        return buf;
                }
                if (len + 2 > cap) {
                        cap *= 2;
                        buf = realloc(buf, cap);
                }
                buf[len++] = ch;
        }
        free(buf);
        return NULL;
}

void apic_request(int fd, int id, const char *token, const char *method, cJSON *params)
{
        cJSON *o = cJSON_CreateObject();
        char *text;

        cJSON_AddNumberToObject(o, "id", id);
        if (token)
                cJSON_AddStringToObject(o, "token", token);
        cJSON_AddStringToObject(o, "method", method);
        if (params)
                cJSON_AddItemToObject(o, "params", params);
        text = cJSON_PrintUnformatted(o);
        cr_assert_eq(apic_send(fd, text, strlen(text)), 0);
        cr_assert_eq(apic_send(fd, "\n", 1), 0);
        free(text);
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
