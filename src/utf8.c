/* utf8.c — UTF-8 validation and repair, base64. Stateless. */
#include "sandboxd/utf8.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t utf8_valid_prefix(const unsigned char *s, size_t len)
{
        unsigned char c;

        if (len == 0)
                return 0;
        c = s[0];
        if (c >= 0x01 && c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf)
                return len >= 2 && (s[1] & 0xc0) == 0x80 ? 2 : 0;
        if (c >= 0xe0 && c <= 0xef) {
                if (len < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80)
                        return 0;
                if (c == 0xe0 && s[1] < 0xa0) /* overlong */
                        return 0;
                if (c == 0xed && s[1] >= 0xa0) /* surrogate */
                        return 0;
                return 3;
        }
        if (c >= 0xf0 && c <= 0xf4) {
                if (len < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80)
                        return 0;
                if (c == 0xf0 && s[1] < 0x90) /* overlong */
                        return 0;
                if (c == 0xf4 && s[1] >= 0x90) /* past U+10FFFF */
                        return 0;
                return 4;
        }
        return 0; /* NUL, continuation byte, 0xc0/0xc1, 0xf5.. */
}

bool utf8_is_valid(const void *buf, size_t len)
{
        const unsigned char *s = buf;
        for (size_t i = 0; i < len;) {
                size_t k = utf8_valid_prefix(s + i, len - i);
                if (k == 0)
                        return false;
                i += k;
        }
        return true;
}

size_t utf8_incomplete_tail(const unsigned char *s, size_t len)
{
        for (size_t i = 1; i <= 3 && i <= len; i++) {
                unsigned char b = s[len - i];
                size_t need;
                if (b < 0x80)
                        return 0;
                if ((b & 0xC0) == 0x80)
                        continue; /* a continuation byte: look further back */
                need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
                return need > i ? i : 0;
        }
        return 0;
}

char *utf8_sanitize(const void *buf, size_t len)
{
        const unsigned char *s = buf;
        char *out = malloc(len * 3 + 1), *o = out; /* each bad byte becomes at most 3 bytes */

        if (!out)
                return NULL;
        for (size_t i = 0; i < len;) {
                size_t k = utf8_valid_prefix(s + i, len - i);
                if (k > 0) {
                        memcpy(o, s + i, k);
                        o += k;
                        i += k;
                        continue;
                }
                /* one U+FFFD for the bad lead byte and the continuation bytes that follow it */
                memcpy(o, "\xef\xbf\xbd", 3);
                o += 3;
                i++;
                while (i < len && (s[i] & 0xc0) == 0x80 && utf8_valid_prefix(s + i, len - i) == 0)
                        i++;
        }
        *o = '\0';
        return out;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *base64_encode(const void *buf, size_t len)
{
        const unsigned char *s = buf;
        char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;

        if (!out)
                return NULL;
        for (size_t i = 0; i < len; i += 3) {
                uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < len ? (uint32_t)s[i + 1] << 8 : 0) |
                             (i + 2 < len ? s[i + 2] : 0);
                *o++ = b64[v >> 18];
                *o++ = b64[(v >> 12) & 63];
                *o++ = i + 1 < len ? b64[(v >> 6) & 63] : '=';
                *o++ = i + 2 < len ? b64[v & 63] : '=';
        }
        *o = '\0';
        return out;
}

static int b64_value(char c)
{
        const char *p = c ? strchr(b64, c) : NULL;
        return p ? (int)(p - b64) : -1;
}

int base64_decode(const char *s, size_t len, unsigned char **ret, size_t *ret_len)
{
        unsigned char *out, *o;
        uint32_t acc = 0;
        int bits = 0;
        size_t pad = 0;

        /* ignore ASCII whitespace; padding only at the end */
        out = malloc(len / 4 * 3 + 3);
        if (!out)
                return -ENOMEM;
        o = out;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                int v;
                if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
                        continue;
                if (c == '=') {
                        pad++;
                        continue;
                }
                if (pad > 0 || (v = b64_value(c)) < 0) {
                        free(out);
                        return -EINVAL;
                }
                acc = acc << 6 | (uint32_t)v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        *o++ = (unsigned char)(acc >> bits);
                }
        }
        if (pad > 2 || bits >= 6) {
                free(out);
                return -EINVAL;
        }
        *ret = out;
        *ret_len = (size_t)(o - out);
        return 0;
}
