/* Unit tests of egress_policy: patterns and their ports, host names, the
 * SSRF guard over every special range, CIDR lists, resolver overrides. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "sandboxd/egress_policy.h"
#include "sandboxd/egress_rules.h"

static const char *canon(const char *p, bool star)
{
        static char buf[300];
        return egress_pattern_check(p, star, buf, sizeof(buf), NULL) == 0 ? buf : NULL;
}

Test(egress_policy, patterns_are_checked_and_canonical)
{
        cr_assert_str_eq(canon("PyPI.org", false), "pypi.org");
        cr_assert_str_eq(canon("*.Example.com:8443", false), "*.example.com:8443");
        cr_assert_str_eq(canon("github.com.:*", false), "github.com:*");
        cr_assert_str_eq(canon("[::1]:443", false), "[::1]:443");
        cr_assert_str_eq(canon("10.0.0.1", false), "10.0.0.1");
        cr_assert_str_eq(canon("*", true), "*");
        cr_assert_null(canon("*", false), "only the config may allow every host");
        const char *bad[] = {"",     "a b", "host:0", "host:65536", "host:x",     "*.",      "*.1.2.3", "a..b",
                             "-:80", "::1", "[::1",   "evil/path",  "host:80:90", "*.*.com", "a\"b",    "x:"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                cr_assert_null(canon(bad[i], true), "'%s' must be refused", bad[i]);
        char longname[400];
        memset(longname, 'a', sizeof(longname) - 1);
        longname[sizeof(longname) - 1] = '\0';
        cr_assert_null(canon(longname, false));
}

Test(egress_policy, matching_names_and_ports)
{
        cr_assert(egress_pattern_match("pypi.org", "pypi.org", 443));
        cr_assert(egress_pattern_match("pypi.org", "pypi.org", 80));
        cr_assert_not(egress_pattern_match("pypi.org", "pypi.org", 22), "no port: 80 and 443 only");
        cr_assert_not(egress_pattern_match("pypi.org", "evilpypi.org", 443));
        cr_assert_not(egress_pattern_match("pypi.org", "pypi.org.evil.com", 443));
        cr_assert(egress_pattern_match("*.example.com", "a.b.example.com", 443));
        cr_assert_not(egress_pattern_match("*.example.com", "example.com", 443), "*.suffix is subdomains only");
        cr_assert_not(egress_pattern_match("*.example.com", "badexample.com", 443));
        cr_assert(egress_pattern_match("host:8080", "host", 8080));
        cr_assert_not(egress_pattern_match("host:8080", "host", 443));
        cr_assert(egress_pattern_match("host:*", "host", 22));
        cr_assert(egress_pattern_match("[::1]:443", "::1", 443));
        cr_assert_not(egress_pattern_match("[::1]:443", "::2", 443));
        cr_assert(egress_pattern_match("*", "anything.test", 443));
}

Test(egress_policy, host_names_are_normalized)
{
        char h[EGRESS_HOST_MAX];
        cr_assert_eq(egress_host_normalize("WWW.Example.COM.", 16, h), 0);
        cr_assert_str_eq(h, "www.example.com");
        cr_assert_eq(egress_host_normalize("[0:0::1]", 8, h), 0);
        cr_assert_str_eq(h, "::1");
        cr_assert_lt(egress_host_normalize("a b", 3, h), 0);
        cr_assert_lt(egress_host_normalize("a\0b", 3, h), 0, "a NUL inside a name");
        cr_assert_lt(egress_host_normalize("", 0, h), 0);
        cr_assert_lt(egress_host_normalize("a%2fb", 5, h), 0);
}

static const char *cls(const char *ip)
{
        struct sockaddr_storage ss = {0};
        if (strchr(ip, ':')) {
                struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
                s6->sin6_family = AF_INET6;
                cr_assert_eq(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
        } else {
                struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
                s4->sin_family = AF_INET;
                cr_assert_eq(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
        }
        return egress_addr_forbidden((struct sockaddr *)&ss);
}

Test(egress_policy, ssrf_guard_refuses_special_addresses)
{
        const char *refused[] = {"127.0.0.1",
                                 "127.255.0.9",
                                 "10.1.2.3",
                                 "172.16.0.1",
                                 "172.31.255.255",
                                 "192.168.1.1",
                                 "100.64.0.1",
                                 "100.127.255.255",
                                 "169.254.169.254",
                                 "169.254.1.1",
                                 "0.0.0.0",
                                 "224.0.0.1",
                                 "239.255.255.250",
                                 "255.255.255.255",
                                 "240.0.0.1",
                                 "::",
                                 "::1",
                                 "fc00::1",
                                 "fd00:ec2::254",
                                 "fe80::1",
                                 "fec0::1",
                                 "ff02::1",
                                 "::ffff:127.0.0.1",
                                 "::ffff:10.0.0.1",
                                 "::ffff:169.254.169.254",
                                 "::127.0.0.1",
                                 "64:ff9b::a00:1",
                                 "2002:a00:1::1",
                                 "2001:0:1::1"};
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
                cr_assert_not_null(cls(refused[i]), "%s must be refused", refused[i]);
        cr_assert_str_eq(cls("169.254.169.254"), "metadata");
        cr_assert_str_eq(cls("fd00:ec2::254"), "metadata");
        cr_assert_str_eq(cls("::ffff:127.0.0.1"), "loopback");
        const char *public_[] = {"1.1.1.1",         "8.8.8.8",        "172.32.0.1",      "100.128.0.1",
                                 "2606:4700::1111", "::ffff:1.1.1.1", "64:ff9b::101:101"};
        for (size_t i = 0; i < sizeof(public_) / sizeof(public_[0]); i++)
                cr_assert_null(cls(public_[i]), "%s is public", public_[i]);
}

Test(egress_policy, cidr_lists)
{
        struct egress_cidr *v = NULL;
        size_t n = 0;
        struct sockaddr_in s4 = {.sin_family = AF_INET};
        struct sockaddr_in6 s6 = {.sin6_family = AF_INET6};

        cr_assert_eq(egress_cidrs_parse("127.0.0.1/32, 10.0.0.0/8 fd00::/8", &v, &n, NULL), 0);
        cr_assert_eq(n, 3);
        inet_pton(AF_INET, "127.0.0.1", &s4.sin_addr);
        cr_assert(egress_cidrs_contain(v, n, (struct sockaddr *)&s4));
        inet_pton(AF_INET, "127.0.0.2", &s4.sin_addr);
        cr_assert_not(egress_cidrs_contain(v, n, (struct sockaddr *)&s4));
        inet_pton(AF_INET, "10.200.0.1", &s4.sin_addr);
        cr_assert(egress_cidrs_contain(v, n, (struct sockaddr *)&s4));
        inet_pton(AF_INET6, "::ffff:127.0.0.1", &s6.sin6_addr);
        cr_assert(egress_cidrs_contain(v, n, (struct sockaddr *)&s6), "a mapped address is judged as its IPv4");
        inet_pton(AF_INET6, "fd12::1", &s6.sin6_addr);
        cr_assert(egress_cidrs_contain(v, n, (struct sockaddr *)&s6));
        free(v);
        cr_assert_lt(egress_cidrs_parse("10.0.0.0/33", &v, &n, NULL), 0);
        cr_assert_lt(egress_cidrs_parse("10.0.0.0/", &v, &n, NULL), 0);
        cr_assert_lt(egress_cidrs_parse("nonsense", &v, &n, NULL), 0);
        cr_assert_eq(egress_cidrs_parse("", &v, &n, NULL), 0);
        cr_assert_eq(n, 0);
        free(v);
}

Test(egress_policy, overrides_and_upstream)
{
        struct egress_override *o = NULL;
        size_t n = 0;
        char host[EGRESS_HOST_MAX];
        int port = 0;

        cr_assert_eq(egress_overrides_parse("Mirror.Internal=10.0.0.5, v6.test=::1", &o, &n, NULL), 0);
        cr_assert_eq(n, 2);
        cr_assert_str_eq(o[0].name, "mirror.internal");
        cr_assert_eq(o[1].addr.ss_family, AF_INET6);
        free(o);
        cr_assert_lt(egress_overrides_parse("name=notanip", &o, &n, NULL), 0);
        cr_assert_lt(egress_overrides_parse("=1.2.3.4", &o, &n, NULL), 0);
        cr_assert_eq(egress_upstream_parse("http://proxy.corp:3128", host, &port, NULL), 0);
        cr_assert_str_eq(host, "proxy.corp");
        cr_assert_eq(port, 3128);
        cr_assert_lt(egress_upstream_parse("https://proxy.corp:3128", host, &port, NULL), 0);
        cr_assert_lt(egress_upstream_parse("http://proxy.corp", host, &port, NULL), 0);
        cr_assert_lt(egress_upstream_parse("http://proxy.corp:3128/path", host, &port, NULL), 0);
}

static int net_parse(const char *json, struct egress_net *n)
{
        cJSON *v = json ? cJSON_Parse(json) : NULL;
        struct sbx_error err = {0};
        int r;

        cr_assert(!json || v, "bad test json %s", json);
        r = egress_net_parse(v, n, &err);
        cJSON_Delete(v);
        return r;
}

Test(egress_policy, network_per_execution_is_parsed_strictly)
{
        static struct egress_net n;

        cr_assert_eq(net_parse(NULL, &n), 0);
        cr_assert(!n.set);
        cr_assert_eq(net_parse("null", &n), 0);
        cr_assert(!n.set);
        cr_assert_eq(net_parse("\"none\"", &n), 0);
        cr_assert(n.set);
        cr_assert_eq(n.n_allow, 0);
        cr_assert_eq(net_parse("{\"allow\": [\"PyPI.org\", \"*.npmjs.org:443\"]}", &n), 0);
        cr_assert(n.set);
        cr_assert_eq(n.n_allow, 2);
        cr_assert_str_eq(n.allow[0], "pypi.org");
        cr_assert_str_eq(n.allow[1], "*.npmjs.org:443");
        const char *bad[] = {
                "5",
                "true",
                "\"None\"",
                "\"all\"",
                "[\"a.com\"]",
                "{}",
                "{\"allow\": \"a.com\"}",
                "{\"allow\": []}",
                "{\"allow\": [1]}",
                "{\"allow\": [null]}",
                "{\"allow\": [\"*\"]}",
                "{\"allow\": [\"a b\"]}",
                "{\"allow\": [\"a.com:0\"]}",
                "{\"allow\": [\"a.com\"], \"deny\": []}",
                "{\"Allow\": [\"a.com\"]}",
                "{\"allow\": [\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\","
                "\"o\",\"p\",\"q\"]}"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                cr_assert_eq(net_parse(bad[i], &n), -EINVAL, "%s must be refused", bad[i]);
}
