/* Unit tests of reqguard: the counting scan, the token in a line's prefix,
 * the id an unauthenticated reply may echo, the per-peer audit limiter. */
#include <criterion/criterion.h>
#include <string.h>

#include "sandboxd/reqguard.h"

static enum reqguard_verdict scan(const char *s)
{
        return reqguard_scan(s, strlen(s), 10, 3);
}

Test(reqguard, scan_counts_values_and_depth)
{
        cr_assert_eq(scan("{\"a\":[1,2,3],\"b\":\"x\"}"), REQGUARD_OK);
        cr_assert_eq(scan("[[[1]]]"), REQGUARD_OK);
        cr_assert_eq(scan("[[[[1]]]]"), REQGUARD_TOO_DEEP);
        cr_assert_eq(scan("[1,2,3,4,5,6,7,8,9,10,11]"), REQGUARD_TOO_MANY_ELEMENTS);
        /* brackets and commas inside strings are text */
        cr_assert_eq(scan("{\"a\":\"[[[[,,,,,,,,,,,,]]]]\"}"), REQGUARD_OK);
        cr_assert_eq(scan("{\"a\":\"\\\"[[[[[\"}"), REQGUARD_OK);
}

Test(reqguard, scan_refuses_nul_and_invalid_utf8)
{
        static const char raw_nul[] = "{\"a\":\"x\0y\"}";

        cr_assert_eq(scan("{\"a\":\"x\\u0000y\"}"), REQGUARD_NUL);
        cr_assert_eq(scan("{\"x\\u0000\":1}"), REQGUARD_NUL);
        /* an escaped backslash followed by u0000 is text, not a NUL */
        cr_assert_eq(scan("{\"a\":\"\\\\u0000\"}"), REQGUARD_OK);
        cr_assert_eq(scan("{\"a\":\"\\u0001\"}"), REQGUARD_OK);
        cr_assert_eq(reqguard_scan(raw_nul, sizeof(raw_nul) - 1, 10, 3), REQGUARD_BAD_UTF8);
        cr_assert_eq(scan("{\"a\":\"\xc0\xaf\"}"), REQGUARD_BAD_UTF8);
        cr_assert_eq(scan("{\"a\":\"\xed\xa0\x80\"}"), REQGUARD_BAD_UTF8);
        cr_assert_eq(scan("{\"a\":\"h\xc3\xa9\"}"), REQGUARD_OK);
        cr_assert(reqguard_verdict_is_invalid(REQGUARD_NUL));
        cr_assert(!reqguard_verdict_is_invalid(REQGUARD_TOO_DEEP));
}

static bool prefix(const char *s, char *tok, size_t cap)
{
        return reqguard_prefix_token(s, strlen(s), tok, cap);
}

Test(reqguard, token_in_a_prefix)
{
        char tok[32];

        cr_assert(prefix("{\"id\":1,\"token\":\"sbx_abc\",\"params\":{\"x\":", tok, sizeof(tok)));
        cr_assert_str_eq(tok, "sbx_abc");
        cr_assert(prefix(" { \"id\" : [1,{\"a\":\"}\"}] , \"token\" : \"t\" ", tok, sizeof(tok)));
        cr_assert_str_eq(tok, "t");
        /* nested "token" members do not count */
        cr_assert(!prefix("{\"params\":{\"token\":\"t\"},\"id\":[0,0,0", tok, sizeof(tok)));
        /* cut off, escaped, too long, not first-level */
        cr_assert(!prefix("{\"id\":1,\"token\":\"sbx_a", tok, sizeof(tok)));
        cr_assert(!prefix("{\"id\":1,\"token\":\"a\\u0062\"", tok, sizeof(tok)));
        cr_assert(!prefix("{\"token\":\"0123456789012345678901234567890123456789\"", tok, sizeof(tok)));
        cr_assert(!prefix("[\"token\",\"t\"]", tok, sizeof(tok)));
        cr_assert(!prefix("{\"id\":[0,0,0,0", tok, sizeof(tok)));
}

Test(reqguard, reply_id_is_small)
{
        char big[300];
        cJSON *n = cJSON_CreateNumber(3), *s = cJSON_CreateString("abc"), *a = cJSON_CreateArray(), *l;

        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        l = cJSON_CreateString(big);
        cr_assert_eq(reqguard_reply_id(n), n);
        cr_assert_eq(reqguard_reply_id(s), s);
        cr_assert_null(reqguard_reply_id(a));
        cr_assert_null(reqguard_reply_id(l));
        cr_assert_null(reqguard_reply_id(NULL));
        cJSON_Delete(n);
        cJSON_Delete(s);
        cJSON_Delete(a);
        cJSON_Delete(l);
}

Test(reqguard, audit_limiter_per_peer)
{
        uint64_t suppressed = 99;
        int allowed = 0;

        for (int i = 0; i < 25; i++)
                allowed += reqguard_audit_allowed(4242, 1000, &suppressed);
        cr_assert_eq(allowed, REQGUARD_AUDIT_BURST);
        /* another peer has its own budget */
        cr_assert(reqguard_audit_allowed(4243, 1000, NULL));
        /* the next window: allowed again, with the count of those not written */
        cr_assert(reqguard_audit_allowed(4242, 1000 + REQGUARD_AUDIT_WINDOW_MS, &suppressed));
        cr_assert_eq(suppressed, 25 - REQGUARD_AUDIT_BURST);
}
