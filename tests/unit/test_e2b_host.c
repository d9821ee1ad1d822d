/* test_e2b_host.c — getHost(port) names (e2b.h): e2b_host_target and
 * e2b_port_parse accept exactly {port}-{20 of [a-z0-9]}.{domain}. */
#include <criterion/criterion.h>
#include <string.h>

#include "sandboxd/e2b.h"

#define ID "abcdefghij0123456789"

Test(e2b_host, routes_a_well_formed_name)
{
        char id[E2B_ID_MAX + 1] = "";

        cr_assert_eq(e2b_host_target("sbx.test", "8123-" ID ".sbx.test", id), 8123);
        cr_assert_str_eq(id, ID);
        cr_assert_eq(e2b_host_target("sbx.test", "1-" ID ".SBX.Test:8443", id), 1);
        cr_assert_eq(e2b_host_target("sbx.test", "65535-" ID ".sbx.test.", id), 65535);
}

Test(e2b_host, refuses_everything_else)
{
        static const char *const bad[] = {
                "08123-" ID ".sbx.test",            /* leading zero */
                "0-" ID ".sbx.test",                /* port 0 */
                "65536-" ID ".sbx.test",            /* past 65535 */
                "+80-" ID ".sbx.test",              /* a sign */
                "80-" ID "x.sbx.test",              /* 21 characters */
                "80-ABCDEFGHIJ0123456789.sbx.test", /* upper case id */
                "80-" ID ".evil.sbx.test",          /* a label too many */
                "80-" ID ".sbx.testx",              /* another domain */
                "80-" ID "sbx.test",                /* no dot */
                "80" ID ".sbx.test",                /* no dash */
                "80-" ID ".sbx.test:0",             /* a bad front port */
                "80-" ID ".sbx.test:",              /* an empty one */
                "sbx.test",
                "",
        };
        char id[E2B_ID_MAX + 1] = "unchanged";

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                cr_expect_eq(e2b_host_target("sbx.test", bad[i], id), 0, "%s", bad[i]);
        cr_expect_str_eq(id, "unchanged");
        cr_expect_eq(e2b_host_target("", "80-" ID ".sbx.test", id), 0, "an empty domain is off");
        cr_expect_eq(e2b_host_target("sbx.test", NULL, id), 0);
}

Test(e2b_host, port_parse)
{
        cr_expect_eq(e2b_port_parse("49983", 5), 49983);
        cr_expect_eq(e2b_port_parse("123456", 6), 0);
        cr_expect_eq(e2b_port_parse("", 0), 0);
        cr_expect_eq(e2b_port_parse("8a", 2), 0);
}
