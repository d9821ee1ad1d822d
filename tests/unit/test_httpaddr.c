/* Unit tests of how the HTTPS front counts client addresses for its caps
 * (http_addr_of, include/sandboxd/http.h): IPv4 whole, IPv6 by /64, an
 * IPv4-mapped IPv6 address as its IPv4 address. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>

#include "sandboxd/http.h"

static struct http_addr of(const char *text)
{
        struct sockaddr_storage ss = {0};
        struct http_addr a;

        if (strchr(text, ':')) {
                struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
                in6->sin6_family = AF_INET6;
                cr_assert_eq(inet_pton(AF_INET6, text, &in6->sin6_addr), 1, "%s", text);
        } else {
                struct sockaddr_in *in = (struct sockaddr_in *)&ss;
                in->sin_family = AF_INET;
                cr_assert_eq(inet_pton(AF_INET, text, &in->sin_addr), 1, "%s", text);
        }
        http_addr_of((struct sockaddr *)&ss, &a);
        return a;
}

static bool same(const char *x, const char *y)
{
        struct http_addr a = of(x), b = of(y);
        return http_addr_eq(&a, &b);
}

Test(httpaddr, ipv4_counts_whole)
{
        cr_assert(same("127.0.0.2", "127.0.0.2"));
        cr_assert(!same("127.0.0.2", "127.0.0.3"));
        cr_assert(!same("10.0.0.1", "10.0.1.1"));
}

Test(httpaddr, ipv6_counts_by_its_64)
{
        cr_assert(same("2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"), "one /64 is one client");
        cr_assert(!same("2001:db8:1:2::1", "2001:db8:1:3::1"), "the next /64 is another");
        cr_assert(!same("::1", "2001:db8::1"));
}

Test(httpaddr, ipv4_mapped_is_its_ipv4_address)
{
        cr_assert(same("::ffff:192.0.2.7", "192.0.2.7"));
        cr_assert(!same("::ffff:192.0.2.7", "::ffff:192.0.2.8"), "not the whole IPv4 space as one /64");
        cr_assert(!same("192.0.2.7", "2001:db8::1"));
}
