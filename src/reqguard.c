/* reqguard.c — the checks a front makes on a request before trusting it
 * (see reqguard.h): a counting scan of JSON text, the token in a line's
 * prefix, the id an unauthenticated reply may echo, and the per-peer limiter
 * of audited authentication failures.
 *
 * Locks: audit_lock guards the limiter's table (a fixed array: a flood of
 * peers cannot grow it; the least recently started window is reused). The
 * rest is pure. */
#include "sandboxd/reqguard.h"

#include <pthread.h>
#include <string.h>

#include "sandboxd/utf8.h"

#define AUDIT_PEERS 64

static bool is_ws(char c)
{
        return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

enum reqguard_verdict reqguard_scan(const char *buf, size_t len, size_t max_elements, size_t max_depth)
{
        size_t elements = 0, depth = 0;
        bool in_string = false, nul = false;

        /* the size limits first: they decide whether the text may be parsed at all */
        for (size_t i = 0; i < len; i++) {
                char c = buf[i];
                if (in_string) {
                        if (c == '"')
                                in_string = false;
                        else if (c == '\\' && i + 1 < len) {
                                i++;
                                /* \u0000 is a NUL: cJSON would end the string there */
                                if (buf[i] == 'u' && i + 4 < len && memcmp(buf + i + 1, "0000", 4) == 0)
                                        nul = true;
                        }
                        continue;
                }
                switch (c) {
                case '"':
                        in_string = true;
                        break;
                case '[':
                case '{':
                        if (++depth > max_depth)
                                return REQGUARD_TOO_DEEP;
                        /* fall through */
                case ',':
                        /* every value but a container's first is preceded by a ',' */
                        if (++elements > max_elements)
                                return REQGUARD_TOO_MANY_ELEMENTS;
                        break;
                case ']':
                case '}':
                        if (depth > 0)
                                depth--;
                        break;
                default:
                        break;
                }
        }
        if (!utf8_is_valid(buf, len))
                return REQGUARD_BAD_UTF8;
        return nul ? REQGUARD_NUL : REQGUARD_OK;
}

const char *reqguard_verdict_message(enum reqguard_verdict v)
{
        switch (v) {
        case REQGUARD_OK:
                return "ok";
        case REQGUARD_TOO_MANY_ELEMENTS:
                return "the request has too many JSON values";
        case REQGUARD_TOO_DEEP:
                return "the request is nested too deeply";
        case REQGUARD_BAD_UTF8:
                return "the request is not valid UTF-8";
        case REQGUARD_NUL:
                return "a string in the request contains NUL (\\u0000)";
        }
        return "the request is refused";
}

bool reqguard_verdict_is_invalid(enum reqguard_verdict v)
{
        return v == REQGUARD_BAD_UTF8 || v == REQGUARD_NUL;
}

/* Index past the JSON string starting at buf[i] == '"', or 0 if it is cut
 * off; *ret_escaped says whether it holds a backslash. */
static size_t skip_string(const char *buf, size_t len, size_t i, bool *ret_escaped)
{
        bool escaped = false;

        for (i++; i < len; i++) {
                if (buf[i] == '\\') {
                        escaped = true;
                        i++;
                } else if (buf[i] == '"') {
                        if (ret_escaped)
                                *ret_escaped = escaped;
                        return i + 1;
                }
        }
        return 0;
}

/* Index past the JSON value starting at buf[i], or 0 if it is cut off. */
static size_t skip_value(const char *buf, size_t len, size_t i)
{
        size_t depth = 0;

        if (i >= len)
                return 0;
        if (buf[i] == '"')
                return skip_string(buf, len, i, NULL);
        if (buf[i] != '[' && buf[i] != '{') {
                while (i < len && buf[i] != ',' && buf[i] != '}' && buf[i] != ']' && !is_ws(buf[i]))
                        i++;
                return i < len ? i : 0;
        }
        while (i < len) {
                if (buf[i] == '"') {
                        i = skip_string(buf, len, i, NULL);
                        if (i == 0)
                                return 0;
                        continue;
                }
                if (buf[i] == '[' || buf[i] == '{')
                        depth++;
                else if ((buf[i] == ']' || buf[i] == '}') && --depth == 0)
                        return i + 1;
                i++;
        }
        return 0;
}

static size_t skip_ws(const char *buf, size_t len, size_t i)
{
        while (i < len && is_ws(buf[i]))
                i++;
        return i;
}

bool reqguard_prefix_token(const char *buf, size_t len, char *ret, size_t cap)
{
        size_t i = skip_ws(buf, len, 0);

        if (i >= len || buf[i] != '{')
                return false;
        for (i++;;) {
                size_t key, end;
                bool escaped = false;

                i = skip_ws(buf, len, i);
                if (i >= len || buf[i] != '"')
                        return false;
                key = i + 1;
                end = skip_string(buf, len, i, &escaped);
                if (end == 0)
                        return false;
                i = skip_ws(buf, len, end);
                if (i >= len || buf[i] != ':')
                        return false;
                i = skip_ws(buf, len, i + 1);
                if (!escaped && end - 1 - key == 5 && memcmp(buf + key, "token", 5) == 0) {
                        size_t vend;
                        if (i >= len || buf[i] != '"')
                                return false;
                        vend = skip_string(buf, len, i, &escaped);
                        if (vend == 0 || escaped || vend - i - 2 >= cap)
                                return false;
                        memcpy(ret, buf + i + 1, vend - i - 2);
                        ret[vend - i - 2] = '\0';
                        return true;
                }
                i = skip_value(buf, len, i);
                if (i == 0)
                        return false;
                i = skip_ws(buf, len, i);
                if (i >= len || buf[i] != ',')
                        return false;
                i++;
        }
}

const cJSON *reqguard_reply_id(const cJSON *id)
{
        if (!id || cJSON_IsNumber(id) || cJSON_IsBool(id) || cJSON_IsNull(id))
                return id;
        if (cJSON_IsString(id) && id->valuestring && strlen(id->valuestring) <= REQGUARD_MAX_ID_BYTES)
                return id;
        return NULL;
}

/* ---- the audit limiter ---- */

static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
        bool used;
        uid_t uid;
        int64_t window_start;
        unsigned count;
        uint64_t suppressed;
} audit_peers[AUDIT_PEERS];

bool reqguard_audit_allowed(uid_t uid, int64_t now_ms, uint64_t *ret_suppressed)
{
        ssize_t found = -1, free_slot = -1;
        size_t slot, oldest = 0;
        bool allowed;

        pthread_mutex_lock(&audit_lock);
        for (size_t i = 0; i < AUDIT_PEERS && found < 0; i++) {
                if (audit_peers[i].used && audit_peers[i].uid == uid)
                        found = (ssize_t)i;
                else if (!audit_peers[i].used && free_slot < 0)
                        free_slot = (ssize_t)i;
                else if (audit_peers[i].used && audit_peers[i].window_start < audit_peers[oldest].window_start)
                        oldest = i;
        }
        if (found >= 0) {
                slot = (size_t)found;
        } else {
                /* a new peer; with the table full, the oldest window is forgotten */
                slot = free_slot >= 0 ? (size_t)free_slot : oldest;
                audit_peers[slot].used = true;
                audit_peers[slot].uid = uid;
                audit_peers[slot].window_start = now_ms;
                audit_peers[slot].count = 0;
                audit_peers[slot].suppressed = 0;
        }
        if (now_ms - audit_peers[slot].window_start >= REQGUARD_AUDIT_WINDOW_MS) {
                audit_peers[slot].window_start = now_ms;
                audit_peers[slot].count = 0;
        }
        allowed = audit_peers[slot].count < REQGUARD_AUDIT_BURST;
        if (allowed) {
                audit_peers[slot].count++;
                if (ret_suppressed)
                        *ret_suppressed = audit_peers[slot].suppressed;
                audit_peers[slot].suppressed = 0;
        } else {
                audit_peers[slot].suppressed++;
        }
        pthread_mutex_unlock(&audit_lock);
        return allowed;
}
