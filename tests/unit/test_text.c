/* Unit tests for SHA-256, UTF-8 repair and base64. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/sha256.h"
#include "sandboxd/utf8.h"

Test(sha256, known_vectors)
{
        char hex[65];
        sha256_hex("", 0, hex);
        cr_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        sha256_hex("abc", 3, hex);
        cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        sha256_hex(two, strlen(two), hex);
        cr_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
        /* a million 'a's, fed in odd-sized pieces */
        struct sha256 c;
        uint8_t d[32];
        char chunk[997];
        memset(chunk, 'a', sizeof(chunk));
        sha256_init(&c);
        size_t left = 1000000;
        while (left) {
                size_t k = left < sizeof(chunk) ? left : sizeof(chunk);
                sha256_update(&c, chunk, k);
                left -= k;
        }
        sha256_final(&c, d);
        cr_assert_eq(d[0], 0xcd);
        cr_assert_eq(d[1], 0xc7);
        cr_assert_eq(d[31], 0xd0);
}

Test(utf8, valid_text_is_unchanged)
{
        const char *s = "plain ascii, café, 日本, 🎉";
        char *o = utf8_sanitize(s, strlen(s));
        cr_assert(utf8_is_valid(s, strlen(s)));
        cr_assert_str_eq(o, s);
        free(o);
}

Test(utf8, invalid_bytes_become_replacement_characters)
{
        const char bad[] =
                "a\xff"
                "b\xc3"
                "\x28"
                "c\xe2\x82"
                "d\xed\xa0\x80"
                "e\xc0\xaf"
                "f\x00g";
        char *o = utf8_sanitize(bad, sizeof(bad) - 1);
        cr_assert_not(utf8_is_valid(bad, sizeof(bad) - 1));
        cr_assert(utf8_is_valid(o, strlen(o)));
        cr_assert_str_eq(o,
                         "a\xef\xbf\xbd"
                         "b\xef\xbf\xbd(c\xef\xbf\xbd"
                         "d\xef\xbf\xbd"
                         "e\xef\xbf\xbd"
                         "f\xef\xbf\xbdg");
        free(o);
        /* a sequence cut at the end of a buffer */
        o = utf8_sanitize("ok\xe6\x97", 4);
        cr_assert_str_eq(o, "ok\xef\xbf\xbd");
        free(o);
}

Test(base64, round_trip_and_errors)
{
        const unsigned char bin[] = {0, 1, 2, 0xfe, 0xff, 'x', 0x80};
        for (size_t n = 0; n <= sizeof(bin); n++) {
                char *e = base64_encode(bin, n);
                unsigned char *d;
                size_t dl;
                cr_assert_eq(strlen(e) % 4, 0);
                cr_assert_eq(base64_decode(e, strlen(e), &d, &dl), 0);
                cr_assert_eq(dl, n);
                cr_assert_eq(memcmp(d, bin, n), 0);
                free(e);
                free(d);
        }
        char *e = base64_encode("hello", 5);
        cr_assert_str_eq(e, "aGVsbG8=");
        free(e);
        unsigned char *d;
        size_t dl;
        cr_assert_eq(base64_decode("aGV*bG8=", 8, &d, &dl), -EINVAL);
        cr_assert_eq(base64_decode("aG=Vs", 5, &d, &dl), -EINVAL);
}
