/* utf8.c — UTF-8 validation and repair; base64 over libcrypto. Stateless. */
#include "sandboxd/utf8.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/common.h"

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

/* Base64 is libcrypto's (EVP_EncodeBlock / EVP_DecodeBlock); only the rules
 * around it are ours: whitespace anywhere is ignored, '=' may only end the
 * text (at most two), missing padding is accepted, and a lone trailing
 * character (6 bits, not a byte) is an error. EVP_DecodeBlock takes whole
 * 4-character groups, so the text is compacted and padded first. The
 * functions take int lengths: large buffers go through in chunks. */
#define B64_CHUNK (3 * 4 * 1024 * 1024) /* input bytes per EVP_EncodeBlock call */

char *base64_encode(const void *buf, size_t len)
{
        const unsigned char *s = buf;
        char *out, *o;

        if (len > (SIZE_MAX - 1) / 4 * 3 - 3)
                return NULL;
        out = malloc((len + 2) / 3 * 4 + 1);
        if (!out)
                return NULL;
        o = out;
        *o = '\0';
        for (size_t i = 0; i < len; i += B64_CHUNK) {
                size_t k = len - i < B64_CHUNK ? len - i : B64_CHUNK;
                o += EVP_EncodeBlock((unsigned char *)o, s + i, (int)k);
        }
        return out;
}

int base64_decode(const char *s, size_t len, unsigned char **ret, size_t *ret_len)
{
        _cleanup_free_ char *text = NULL;
        unsigned char *out;
        size_t n = 0, pad = 0, total = 0;

        text = malloc(len + 4);
        if (!text)
                return -ENOMEM;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
                        continue;
                if (c == '=') {
                        pad++;
                        continue;
                }
                if (pad > 0)
                        return -EINVAL; /* data after padding */
                text[n++] = c;
        }
        if (pad > 2 || n % 4 == 1)
                return -EINVAL;
        size_t groups = (n + 3) / 4, tail = groups * 4 - n; /* '=' to add: 0, 1 or 2 */
        memset(text + n, '=', tail);
        out = malloc(groups * 3 + 1);
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < groups * 4; i += B64_CHUNK / 3 * 4) {
                size_t k = groups * 4 - i < B64_CHUNK / 3 * 4 ? groups * 4 - i : B64_CHUNK / 3 * 4;
                int m = EVP_DecodeBlock(out + total, (const unsigned char *)text + i, (int)k);
                /* -1: a character outside the alphabet; fewer bytes: EVP trimmed
                 * trailing '-' (its end-of-data mark), which is no base64 either */
                if (m < 0 || (size_t)m != k / 4 * 3) {
                        free(out);
                        return -EINVAL;
                }
                total += (size_t)m;
        }
        *ret = out;
        *ret_len = total - tail; /* EVP_DecodeBlock counts the padding as zero bytes */
        return 0;
}

bool session_id_valid(const char *id)
{
        size_t n;

        if (!id)
                return false;
        n = strnlen(id, SBX_ID_MAX + 1);
        if (n == 0 || n > SBX_ID_MAX || strcmp(id, ".") == 0 || strcmp(id, "..") == 0)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = id[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                      c == '.' || c == '-'))
                        return false;
        }
        return true;
}
