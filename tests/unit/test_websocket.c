/* Unit tests of websocket: the accept key (RFC 6455's own example), the
 * server's frame header, and the reader on good and malformed client
 * frames: masks, fragmentation with control frames between fragments,
 * bytes arriving one at a time, and each refusal with its close code. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "sandboxd/websocket.h"

#define MAX 64

static const uint8_t mask[4] = {0x37, 0xfa, 0x21, 0x3d};

/* A client frame (masked unless unmasked) with b0 as its first byte (FIN,
 * RSV, opcode); len_form forces a longer length encoding (0: shortest). */
static size_t frame(uint8_t *out, uint8_t b0, const void *payload, size_t len, int len_form, bool unmasked)
{
        size_t n = 0;

        out[n++] = b0;
        if (len_form == 0 && len < 126) {
                out[n++] = (uint8_t)((unmasked ? 0 : 0x80) | len);
        } else if (len_form <= 126 && len <= 0xffff) {
                out[n++] = (uint8_t)((unmasked ? 0 : 0x80) | 126);
                out[n++] = (uint8_t)(len >> 8);
                out[n++] = (uint8_t)len;
        } else {
                out[n++] = (uint8_t)((unmasked ? 0 : 0x80) | 127);
                for (int i = 0; i < 8; i++)
                        out[n++] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
        }
        if (!unmasked) {
                memcpy(out + n, mask, 4);
                n += 4;
        }
        for (size_t i = 0; i < len; i++)
                out[n + i] = (uint8_t)(((const uint8_t *)payload)[i] ^ (unmasked ? 0 : mask[i & 3]));
        return n + len;
}

static struct websocket_reader r;

static void setup(void)
{
        cr_assert_eq(websocket_reader_init(&r, MAX), 0);
}

static void teardown(void)
{
        websocket_reader_done(&r);
}

/* Feed bytes and expect the reader to refuse them with code. */
static void expect_close(const uint8_t *buf, size_t n, int code)
{
        struct websocket_message m;

        cr_assert_eq(websocket_reader_feed(&r, buf, n), 0);
        cr_assert_eq(websocket_reader_next(&r, &m), -1);
        cr_assert_eq(r.close_code, code, "close code %d, expected %d", r.close_code, code);
}

Test(websocket, accept_key_is_the_rfcs_example)
{
        char acc[WEBSOCKET_ACCEPT_LEN + 1];

        cr_assert_eq(websocket_accept_key("dGhlIHNhbXBsZSBub25jZQ==", acc), 0);
        cr_assert_str_eq(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        cr_assert(!websocket_key_valid("dGhlIHNhbXBsZSBub25jZQ"));   /* 22 characters */
        cr_assert(!websocket_key_valid("dGhlIHNhbXBsZSBub25jZSE=")); /* 17 bytes */
        cr_assert(!websocket_key_valid("dGhlIHNhbXBsZSBub25jZ!=="));
        cr_assert(!websocket_key_valid(NULL));
        cr_assert_eq(websocket_accept_key("short", acc), -EINVAL);
}

Test(websocket, server_header_lengths)
{
        uint8_t h[WEBSOCKET_HEADER_MAX];

        cr_assert_eq(websocket_frame_header(h, WEBSOCKET_BINARY, 5), 2);
        cr_assert_eq(h[0], 0x82);
        cr_assert_eq(h[1], 5);
        cr_assert_eq(websocket_frame_header(h, WEBSOCKET_TEXT, 126), 4);
        cr_assert_eq(h[1], 126);
        cr_assert_eq(h[2] << 8 | h[3], 126);
        cr_assert_eq(websocket_frame_header(h, WEBSOCKET_BINARY, 70000), 10);
        cr_assert_eq(h[1], 127);
        cr_assert_eq(h[7] << 16 | h[8] << 8 | h[9], 70000);
}

Test(websocket, masked_text_one_byte_at_a_time, .init = setup, .fini = teardown)
{
        uint8_t buf[128];
        size_t n = frame(buf, 0x81, "hello", 5, 0, false);
        struct websocket_message m;

        for (size_t i = 0; i < n - 1; i++) {
                cr_assert_eq(websocket_reader_feed(&r, buf + i, 1), 0);
                cr_assert_eq(websocket_reader_next(&r, &m), 0, "a message after %zu of %zu bytes", i + 1, n);
        }
        cr_assert_eq(websocket_reader_feed(&r, buf + n - 1, 1), 0);
        cr_assert_eq(websocket_reader_next(&r, &m), 1);
        cr_assert_eq(m.op, WEBSOCKET_TEXT);
        cr_assert_eq(m.len, 5);
        cr_assert_eq(memcmp(m.data, "hello", 5), 0);
        cr_assert_eq(websocket_reader_next(&r, &m), 0);
}

Test(websocket, fragments_with_a_ping_between, .init = setup, .fini = teardown)
{
        uint8_t buf[256];
        size_t n = 0;
        struct websocket_message m;

        n += frame(buf + n, 0x02, "ab", 2, 0, false);   /* binary, not final */
        n += frame(buf + n, 0x89, "p", 1, 0, false);    /* ping between fragments */
        n += frame(buf + n, 0x00, "cd", 2, 126, false); /* continuation, 16-bit form is refused below */
        cr_assert_eq(websocket_reader_feed(&r, buf, n), 0);
        cr_assert_eq(websocket_reader_next(&r, &m), 1);
        cr_assert_eq(m.op, WEBSOCKET_PING);
        cr_assert_eq(m.len, 1);
        cr_assert_eq(m.data[0], 'p');
        /* "cd" in the 16-bit form is not the shortest: refused */
        cr_assert_eq(websocket_reader_next(&r, &m), -1);
        cr_assert_eq(r.close_code, WEBSOCKET_CLOSE_PROTOCOL);
}

Test(websocket, fragments_joined, .init = setup, .fini = teardown)
{
        uint8_t buf[256];
        size_t n = 0;
        struct websocket_message m;

        n += frame(buf + n, 0x01, "he", 2, 0, false);
        n += frame(buf + n, 0x8a, "", 0, 0, false); /* an unasked pong between */
        n += frame(buf + n, 0x00, "l", 1, 0, false);
        n += frame(buf + n, 0x80, "lo", 2, 0, false);
        n += frame(buf + n, 0x82, "\x00\xff", 2, 0, false);
        cr_assert_eq(websocket_reader_feed(&r, buf, n), 0);
        cr_assert_eq(websocket_reader_next(&r, &m), 1);
        cr_assert_eq(m.op, WEBSOCKET_PONG);
        cr_assert_eq(websocket_reader_next(&r, &m), 1);
        cr_assert_eq(m.op, WEBSOCKET_TEXT);
        cr_assert_eq(m.len, 5);
        cr_assert_eq(memcmp(m.data, "hello", 5), 0);
        cr_assert_eq(websocket_reader_next(&r, &m), 1);
        cr_assert_eq(m.op, WEBSOCKET_BINARY);
        cr_assert_eq(m.len, 2);
        cr_assert_eq(m.data[1], 0xff);
        cr_assert_eq(websocket_reader_next(&r, &m), 0);
}

Test(websocket, close_with_code_and_reason, .init = setup, .fini = teardown)
{
        uint8_t buf[64];
        struct websocket_message m;
        size_t n = frame(buf, 0x88,
                         "\x03\xe8"
                         "bye",
                         5, 0, false);

        cr_assert_eq(websocket_reader_feed(&r, buf, n), 0);
        cr_assert_eq(websocket_reader_next(&r, &m), 1);
        cr_assert_eq(m.op, WEBSOCKET_CLOSE);
        cr_assert_eq(m.code, 1000);
        cr_assert_eq(m.len, 3);
        n = frame(buf, 0x88, "", 0, 0, false);
        cr_assert_eq(websocket_reader_feed(&r, buf, n), 0);
        cr_assert_eq(websocket_reader_next(&r, &m), 1);
        cr_assert_eq(m.code, WEBSOCKET_CLOSE_NO_STATUS);
}

Test(websocket, unmasked_is_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[64];
        expect_close(buf, frame(buf, 0x81, "hi", 2, 0, true), WEBSOCKET_CLOSE_PROTOCOL);
}

Test(websocket, reserved_bits_are_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[64];
        expect_close(buf, frame(buf, 0xc1, "hi", 2, 0, false), WEBSOCKET_CLOSE_PROTOCOL); /* RSV1 */
}

Test(websocket, unknown_opcodes_are_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[64];
        expect_close(buf, frame(buf, 0x83, "hi", 2, 0, false), WEBSOCKET_CLOSE_PROTOCOL);
}

Test(websocket, unknown_control_opcode_is_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[64];
        expect_close(buf, frame(buf, 0x8b, "", 0, 0, false), WEBSOCKET_CLOSE_PROTOCOL);
}

Test(websocket, fragmented_control_is_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[64];
        expect_close(buf, frame(buf, 0x09, "p", 1, 0, false), WEBSOCKET_CLOSE_PROTOCOL);
}

Test(websocket, full_ping_fits_a_small_reader, .init = setup, .fini = teardown)
{
        uint8_t buf[300], payload[WEBSOCKET_CONTROL_MAX];
        struct websocket_message m;

        memset(payload, 'p', sizeof(payload));
        cr_assert_eq(websocket_reader_feed(&r, buf, frame(buf, 0x89, payload, sizeof(payload), 0, false)), 0);
        cr_assert_eq(websocket_reader_next(&r, &m), 1);
        cr_assert_eq(m.op, WEBSOCKET_PING);
        cr_assert_eq(m.len, WEBSOCKET_CONTROL_MAX);
}

Test(websocket, long_control_is_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[300], payload[126] = {0};
        /* a 126-byte ping, refused from its header alone (2 + 2 length bytes) */
        (void)frame(buf, 0x89, payload, sizeof(payload), 0, false);
        expect_close(buf, 4, WEBSOCKET_CLOSE_PROTOCOL);
}

Test(websocket, continuation_without_a_message_is_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[64];
        expect_close(buf, frame(buf, 0x80, "x", 1, 0, false), WEBSOCKET_CLOSE_PROTOCOL);
}

Test(websocket, new_message_inside_one_is_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[64];
        size_t n = frame(buf, 0x01, "a", 1, 0, false);
        n += frame(buf + n, 0x81, "b", 1, 0, false);
        expect_close(buf, n, WEBSOCKET_CLOSE_PROTOCOL);
}

Test(websocket, non_minimal_length_is_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[64];
        expect_close(buf, frame(buf, 0x82, "abc", 3, 127, false), WEBSOCKET_CLOSE_PROTOCOL);
}

Test(websocket, top_bit_of_64_bit_length_is_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[16] = {0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 1};
        expect_close(buf, 10, WEBSOCKET_CLOSE_PROTOCOL);
}

Test(websocket, oversized_frame_is_refused_from_its_header, .init = setup, .fini = teardown)
{
        /* 16 MiB announced; only the header is sent: refused before any payload */
        uint8_t buf[16] = {0x82, 0xff, 0, 0, 0, 0, 0x01, 0, 0, 0};
        expect_close(buf, 10, WEBSOCKET_CLOSE_TOO_BIG);
}

Test(websocket, fragments_past_the_cap_are_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[512], part[40];
        size_t n;

        struct websocket_message m;

        memset(part, 'x', sizeof(part));
        n = frame(buf, 0x02, part, sizeof(part), 0, false);
        cr_assert_eq(websocket_reader_feed(&r, buf, n), 0);
        cr_assert_eq(websocket_reader_next(&r, &m), 0); /* joined, waiting for the rest */
        /* the second fragment's header alone: 80 > MAX 64 */
        expect_close(buf, frame(buf, 0x00, part, sizeof(part), 0, false) - sizeof(part) - 4, WEBSOCKET_CLOSE_TOO_BIG);
}

Test(websocket, invalid_utf8_text_is_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[64];
        expect_close(buf, frame(buf, 0x81, "\xc0\xaf", 2, 0, false), WEBSOCKET_CLOSE_BAD_DATA);
}

Test(websocket, text_split_inside_a_character_is_whole, .init = setup, .fini = teardown)
{
        uint8_t buf[64];
        size_t n = frame(buf, 0x01, "h\xc3", 2, 0, false);
        struct websocket_message m;

        n += frame(buf + n, 0x80, "\xa9", 1, 0, false);
        cr_assert_eq(websocket_reader_feed(&r, buf, n), 0);
        cr_assert_eq(websocket_reader_next(&r, &m), 1);
        cr_assert_eq(m.len, 3);
}

Test(websocket, bad_close_payloads_are_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[64];
        expect_close(buf, frame(buf, 0x88, "\x03", 1, 0, false), WEBSOCKET_CLOSE_PROTOCOL);
}

Test(websocket, reserved_close_code_is_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[64];
        expect_close(buf, frame(buf, 0x88, "\x03\xed", 2, 0, false), WEBSOCKET_CLOSE_PROTOCOL); /* 1005 */
}

Test(websocket, close_reason_not_utf8_is_refused, .init = setup, .fini = teardown)
{
        uint8_t buf[64];
        expect_close(buf, frame(buf, 0x88, "\x03\xe8\xff", 3, 0, false), WEBSOCKET_CLOSE_BAD_DATA);
}

Test(websocket, room_is_bounded, .init = setup, .fini = teardown)
{
        /* MAX is below a control frame's 125: the room is for the larger */
        uint8_t big[WEBSOCKET_CONTROL_MAX + WEBSOCKET_HEADER_MAX + 1] = {0};
        size_t room;

        cr_assert_eq(websocket_reader_feed(&r, big, sizeof(big)), -ENOBUFS);
        websocket_reader_space(&r, &room);
        cr_assert_eq(room, WEBSOCKET_CONTROL_MAX + WEBSOCKET_HEADER_MAX);
}

/* Random bytes in random pieces (a fixed seed, so a failure repeats): the
 * reader never reads or writes out of bounds (run under the sanitizers in
 * CI), never takes more than its room, and every message it hands out fits
 * the cap; a refusal names one of the three codes. */
Test(websocket, random_input_is_handled, .init = setup, .fini = teardown)
{
        unsigned seed = 12345;

        for (int round = 0; round < 2000; round++) {
                struct websocket_message m;
                bool ended = false;

                websocket_reader_done(&r);
                cr_assert_eq(websocket_reader_init(&r, MAX), 0);
                for (int step = 0; step < 20 && !ended; step++) {
                        uint8_t chunk[40];
                        size_t room, n = (size_t)(rand_r(&seed) % sizeof(chunk));
                        int k;

                        for (size_t i = 0; i < n; i++)
                                chunk[i] = (uint8_t)rand_r(&seed);
                        if (step == 0 && n)
                                chunk[0] &= 0x8f; /* often a valid first byte, so parsing goes deeper */
                        if (step == 0 && n > 1)
                                chunk[1] |= 0x80;
                        websocket_reader_space(&r, &room);
                        if (n > room)
                                n = room;
                        cr_assert_eq(websocket_reader_feed(&r, chunk, n), 0);
                        while ((k = websocket_reader_next(&r, &m)) == 1)
                                cr_assert_leq(m.len, (m.op & 0x08) ? WEBSOCKET_CONTROL_MAX : MAX);
                        if (k < 0) {
                                cr_assert(r.close_code == WEBSOCKET_CLOSE_PROTOCOL ||
                                          r.close_code == WEBSOCKET_CLOSE_BAD_DATA ||
                                          r.close_code == WEBSOCKET_CLOSE_TOO_BIG);
                                ended = true;
                        }
                }
        }
}
