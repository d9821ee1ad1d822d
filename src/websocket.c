/* websocket.c — RFC 6455 framing for a server (websocket.h): the accept key
 * (SHA-1 from libcrypto) and a bounded reader of a client's frames. Pure and
 * single-threaded: one reader belongs to one connection's thread. Memory per
 * reader: two buffers of max_message (+ a header), allocated once. */
#include "sandboxd/websocket.h"

#include <errno.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/utf8.h"

#define WEBSOCKET_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define WEBSOCKET_KEY_LEN 24 /* base64 of 16 bytes */

bool websocket_key_valid(const char *key)
{
        unsigned char *raw = NULL;
        size_t n = 0;
        bool ok;

        if (!key || strlen(key) != WEBSOCKET_KEY_LEN)
                return false;
        if (base64_decode(key, WEBSOCKET_KEY_LEN, &raw, &n) < 0)
                return false;
        ok = n == 16;
        free(raw);
        return ok;
}

int websocket_accept_key(const char *key, char ret[WEBSOCKET_ACCEPT_LEN + 1])
{
        char buf[WEBSOCKET_KEY_LEN + sizeof(WEBSOCKET_GUID)];
        unsigned char digest[SHA_DIGEST_LENGTH];
        char *b64;

        if (!websocket_key_valid(key))
                return -EINVAL;
        memcpy(buf, key, WEBSOCKET_KEY_LEN);
        memcpy(buf + WEBSOCKET_KEY_LEN, WEBSOCKET_GUID, sizeof(WEBSOCKET_GUID) - 1);
        SHA1((const unsigned char *)buf, WEBSOCKET_KEY_LEN + sizeof(WEBSOCKET_GUID) - 1, digest);
        b64 = base64_encode(digest, sizeof(digest));
        if (!b64)
                return -ENOMEM;
        if (strlen(b64) != WEBSOCKET_ACCEPT_LEN) {
                free(b64);
                return -EINVAL;
        }
        memcpy(ret, b64, WEBSOCKET_ACCEPT_LEN + 1);
        free(b64);
        return 0;
}

size_t websocket_frame_header(uint8_t ret[WEBSOCKET_HEADER_MAX], enum websocket_opcode op, uint64_t len)
{
        ret[0] = (uint8_t)(0x80 | (op & 0x0f));
        if (len < 126) {
                ret[1] = (uint8_t)len;
                return 2;
        }
        if (len <= 0xffff) {
                ret[1] = 126;
                ret[2] = (uint8_t)(len >> 8);
                ret[3] = (uint8_t)len;
                return 4;
        }
        ret[1] = 127;
        for (int i = 0; i < 8; i++)
                ret[2 + i] = (uint8_t)(len >> (56 - 8 * i));
        return 10;
}

int websocket_reader_init(struct websocket_reader *r, size_t max_message)
{
        memset(r, 0, sizeof(*r));
        r->max_message = max_message;
        /* a whole frame always fits: a data frame up to the cap, a control frame up to 125 */
        r->in_cap = (max_message > WEBSOCKET_CONTROL_MAX ? max_message : WEBSOCKET_CONTROL_MAX) + WEBSOCKET_HEADER_MAX;
        r->in = malloc(r->in_cap);
        r->msg = malloc(max_message ? max_message : 1);
        if (!r->in || !r->msg) {
                websocket_reader_done(r);
                return -ENOMEM;
        }
        return 0;
}

void websocket_reader_done(struct websocket_reader *r)
{
        if (!r)
                return;
        free(r->in);
        free(r->msg);
        r->in = r->msg = NULL;
        r->in_len = r->in_cap = 0;
}

/* Drop what the last message used (its pointers are dead from here). */
static void reader_settle(struct websocket_reader *r)
{
        if (r->in_skip) {
                memmove(r->in, r->in + r->in_skip, r->in_len - r->in_skip);
                r->in_len -= r->in_skip;
                r->in_skip = 0;
        }
        if (r->msg_taken) {
                r->msg_len = 0;
                r->msg_taken = false;
        }
}

uint8_t *websocket_reader_space(struct websocket_reader *r, size_t *ret_len)
{
        reader_settle(r);
        *ret_len = r->in_cap - r->in_len;
        return r->in + r->in_len;
}

void websocket_reader_commit(struct websocket_reader *r, size_t n)
{
        r->in_len += n <= r->in_cap - r->in_len ? n : r->in_cap - r->in_len;
}

int websocket_reader_feed(struct websocket_reader *r, const void *buf, size_t n)
{
        size_t room;
        uint8_t *p = websocket_reader_space(r, &room);

        if (n > room)
                return -ENOBUFS;
        memcpy(p, buf, n);
        r->in_len += n;
        return 0;
}

static int fail(struct websocket_reader *r, int code)
{
        r->close_code = code;
        return -1;
}

static bool close_code_sendable(int code)
{
        /* RFC 6455 §7.4: 1004-1006 and 1015 are never sent; 1012-1014 are IANA's since */
        if (code >= 1000 && code <= 1014)
                return code != 1004 && code != 1005 && code != 1006;
        return code >= 3000 && code <= 4999;
}

int websocket_reader_next(struct websocket_reader *r, struct websocket_message *ret)
{
        for (;;) {
                const uint8_t *h;
                size_t hl = 2, avail;
                uint64_t len;
                bool fin, masked, control;
                enum websocket_opcode op;
                uint8_t *payload;

                reader_settle(r);
                h = r->in;
                avail = r->in_len;
                if (avail < 2)
                        return 0;
                fin = h[0] & 0x80;
                op = (enum websocket_opcode)(h[0] & 0x0f);
                masked = h[1] & 0x80;
                len = h[1] & 0x7f;
                if (h[0] & 0x70)
                        return fail(r, WEBSOCKET_CLOSE_PROTOCOL); /* RSV1-3: no extension was agreed */
                if (op != WEBSOCKET_CONTINUATION && op != WEBSOCKET_TEXT && op != WEBSOCKET_BINARY &&
                    op != WEBSOCKET_CLOSE && op != WEBSOCKET_PING && op != WEBSOCKET_PONG)
                        return fail(r, WEBSOCKET_CLOSE_PROTOCOL);
                if (!masked)
                        return fail(r, WEBSOCKET_CLOSE_PROTOCOL); /* §5.1: a client masks every frame */
                control = op & 0x08;
                if (control && (!fin || len > WEBSOCKET_CONTROL_MAX))
                        return fail(r, WEBSOCKET_CLOSE_PROTOCOL);
                if (len == 126) {
                        if (avail < 4)
                                return 0;
                        len = (uint64_t)h[2] << 8 | h[3];
                        hl = 4;
                        if (len < 126)
                                return fail(r, WEBSOCKET_CLOSE_PROTOCOL); /* not the shortest form */
                } else if (len == 127) {
                        if (avail < 10)
                                return 0;
                        len = 0;
                        for (int i = 0; i < 8; i++)
                                len = len << 8 | h[2 + i];
                        hl = 10;
                        if (len >> 63 || len <= 0xffff)
                                return fail(r, WEBSOCKET_CLOSE_PROTOCOL);
                }
                if (op == WEBSOCKET_CONTINUATION && !r->in_message)
                        return fail(r, WEBSOCKET_CLOSE_PROTOCOL);
                if ((op == WEBSOCKET_TEXT || op == WEBSOCKET_BINARY) && r->in_message)
                        return fail(r, WEBSOCKET_CLOSE_PROTOCOL);
                /* checked before the payload arrives: a frame past the cap is never buffered */
                if (!control && len > r->max_message - r->msg_len)
                        return fail(r, WEBSOCKET_CLOSE_TOO_BIG);
                if (avail < hl + 4 || avail - hl - 4 < len)
                        return 0;
                payload = r->in + hl + 4;
                for (uint64_t i = 0; i < len; i++)
                        payload[i] ^= h[hl + (i & 3)];
                r->in_skip = hl + 4 + (size_t)len;

                if (control) {
                        memset(ret, 0, sizeof(*ret));
                        ret->op = op;
                        ret->data = payload;
                        ret->len = (size_t)len;
                        if (op == WEBSOCKET_CLOSE) {
                                if (len == 1)
                                        return fail(r, WEBSOCKET_CLOSE_PROTOCOL);
                                ret->code = WEBSOCKET_CLOSE_NO_STATUS;
                                if (len >= 2) {
                                        ret->code = payload[0] << 8 | payload[1];
                                        if (!close_code_sendable(ret->code))
                                                return fail(r, WEBSOCKET_CLOSE_PROTOCOL);
                                        if (!utf8_is_valid(payload + 2, (size_t)len - 2))
                                                return fail(r, WEBSOCKET_CLOSE_BAD_DATA);
                                        ret->data = payload + 2;
                                        ret->len = (size_t)len - 2;
                                }
                        }
                        return 1;
                }
                if (op != WEBSOCKET_CONTINUATION) {
                        r->in_message = true;
                        r->msg_op = op;
                        r->msg_len = 0;
                }
                memcpy(r->msg + r->msg_len, payload, (size_t)len);
                r->msg_len += (size_t)len;
                if (!fin)
                        continue;
                r->in_message = false;
                if (r->msg_op == WEBSOCKET_TEXT && !utf8_is_valid(r->msg, r->msg_len))
                        return fail(r, WEBSOCKET_CLOSE_BAD_DATA);
                memset(ret, 0, sizeof(*ret));
                ret->op = r->msg_op;
                ret->data = r->msg;
                ret->len = r->msg_len;
                r->msg_taken = true;
                return 1;
        }
}
