/* reqctx.c — the correlation id of the current request (reqctx.h): a
 * thread-local copy, set by the fronts and read by the log, the audit and
 * the events. No locks, no state shared between threads. */
#include "sandboxd/reqctx.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sandboxd/common.h"

static __thread char current[REQCTX_ID_MAX + 1];

static bool lower_hex(const char *s, size_t n, bool *ret_all_zero)
{
        bool zero = true;
        for (size_t i = 0; i < n; i++) {
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
                if (s[i] != '0')
                        zero = false;
        }
        if (ret_all_zero)
                *ret_all_zero = zero;
        return true;
}

bool reqctx_traceparent_parse(const char *s, char ret_trace[33])
{
        bool zero_trace, zero_parent;
        size_t n;

        if (!s)
                return false;
        n = strnlen(s, 512);
        if (n < REQCTX_TRACEPARENT_LEN || s[2] != '-' || s[35] != '-' || s[52] != '-')
                return false;
        if (!lower_hex(s, 2, NULL) || strncmp(s, "ff", 2) == 0)
                return false; /* version ff is invalid */
        /* version 00 is exactly 55 characters; a later version may append "-..." */
        if (strncmp(s, "00", 2) == 0 ? n != REQCTX_TRACEPARENT_LEN : n > REQCTX_TRACEPARENT_LEN && s[55] != '-')
                return false;
        if (!lower_hex(s + 3, 32, &zero_trace) || !lower_hex(s + 36, 16, &zero_parent) || !lower_hex(s + 53, 2, NULL))
                return false;
        if (zero_trace || zero_parent)
                return false;
        memcpy(ret_trace, s + 3, 32);
        ret_trace[32] = '\0';
        return true;
}

bool reqctx_request_id_valid(const char *s)
{
        size_t n;

        if (!s)
                return false;
        n = strnlen(s, REQCTX_ID_MAX + 1);
        if (n == 0 || n > REQCTX_ID_MAX)
                return false;
        for (; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
                      strchr("._:-", *s)))
                        return false;
        return true;
}

void reqctx_pick(const char *traceparent, const char *request_id, char ret[REQCTX_ID_MAX + 1])
{
        char trace[33];

        if (reqctx_traceparent_parse(traceparent, trace)) {
                memcpy(ret, trace, sizeof(trace));
                return;
        }
        if (reqctx_request_id_valid(request_id)) {
                sbx_strlcpy(ret, request_id, REQCTX_ID_MAX + 1);
                return;
        }
        if (sbx_random_hex(ret, 16) < 0) /* no randomness: still unique enough to follow a log */
                snprintf(ret, REQCTX_ID_MAX + 1, "%016llx%016llx", (unsigned long long)sbx_now_ms(),
                         (unsigned long long)(uintptr_t)ret);
}

void reqctx_set(const char *trace_id)
{
        if (!trace_id)
                trace_id = "";
        sbx_strlcpy(current, trace_id, sizeof(current));
}

void reqctx_clear(void)
{
        current[0] = '\0';
}

const char *reqctx_trace_id(void)
{
        return current;
}

int reqctx_traceparent(const char *trace_id, char ret[REQCTX_TRACEPARENT_LEN + 1])
{
        const char *t = trace_id ? trace_id : current;
        char span[17];
        bool zero;

        if (strlen(t) != 32 || !lower_hex(t, 32, &zero) || zero)
                return -EINVAL;
        if (sbx_random_hex(span, 8) < 0 || strcmp(span, "0000000000000000") == 0)
                snprintf(span, sizeof(span), "%016llx", (unsigned long long)sbx_now_ms() | 1);
        snprintf(ret, REQCTX_TRACEPARENT_LEN + 1, "00-%s-%s-01", t, span);
        return 0;
}
