/* egress_policy.c — allowlist patterns, host names, the SSRF guard, CIDR
 * lists and resolver overrides (egress_policy.h). Pure functions: no state,
 * no locks. Hand-written because each piece is a few lines over
 * inet_pton/inet_ntop; no Debian library does policy matching of this kind. */
#include "sandboxd/egress_policy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#define PATTERN_MAX 272

static bool is_sep(char c)
{
        return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Next list item of `list` from *pos into buf; false at the end. */
static bool next_item(const char *list, size_t *pos, char *buf, size_t size, bool *too_long)
{
        size_t i = *pos, n = 0;

        *too_long = false;
        while (list[i] && is_sep(list[i]))
                i++;
        if (!list[i]) {
                *pos = i;
                return false;
        }
        while (list[i] && !is_sep(list[i])) {
                if (n + 1 < size)
                        buf[n++] = list[i];
                else
                        *too_long = true;
                i++;
        }
        buf[n] = '\0';
        *pos = i;
        return true;
}

static bool name_ok(const char *s, size_t len)
{
        size_t label = 0;

        if (len == 0 || len > 253)
                return false;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c == '.') {
                        if (label == 0 || s[i - 1] == '-')
                                return false;
                        label = 0;
                        continue;
                }
                if (!(isalnum(c) || c == '-' || c == '_') || ++label > 63 || (c == '-' && label == 1))
                        return false;
        }
        return label > 0 && s[len - 1] != '-';
}

int egress_host_normalize(const char *in, size_t len, char ret[EGRESS_HOST_MAX])
{
        char buf[EGRESS_HOST_MAX];
        struct in6_addr a6;
        struct in_addr a4;

        if (!in || len == 0 || len >= sizeof(buf))
                return -EINVAL;
        if (in[0] == '[') {
                if (len < 3 || in[len - 1] != ']')
                        return -EINVAL;
                in++;
                len -= 2;
        }
        memcpy(buf, in, len);
        buf[len] = '\0';
        if (memchr(buf, '\0', len))
                return -EINVAL;
        if (strchr(buf, ':')) {
                if (inet_pton(AF_INET6, buf, &a6) != 1)
                        return -EINVAL;
                if (!inet_ntop(AF_INET6, &a6, ret, EGRESS_HOST_MAX))
                        return -EINVAL;
                return 0;
        }
        if (len > 1 && buf[len - 1] == '.')
                buf[--len] = '\0';
        if (!name_ok(buf, len))
                return -EINVAL;
        for (size_t i = 0; i < len; i++)
                buf[i] = (char)tolower((unsigned char)buf[i]);
        /* an IPv4 literal in its canonical dotted form (inet_pton refuses 0x.., octal, short forms) */
        if (inet_pton(AF_INET, buf, &a4) == 1 && !inet_ntop(AF_INET, &a4, buf, sizeof(buf)))
                return -EINVAL;
        memcpy(ret, buf, len + 1);
        return 0;
}

/* Split "host[:port|:*]" (host possibly "[v6]"): host span and port (0: the
 * default 80/443, -1: any). */
static int split_port(const char *p, size_t *ret_hostlen, int *ret_port)
{
        const char *colon;
        size_t len = strlen(p);

        if (p[0] == '[') {
                const char *close = strchr(p, ']');
                if (!close)
                        return -EINVAL;
                colon = close[1] == ':' ? close + 1 : NULL;
                if (!colon && close[1])
                        return -EINVAL;
        } else {
                colon = strrchr(p, ':');
                if (colon && strchr(p, ':') != colon)
                        return -EINVAL; /* a bare IPv6 literal: write it in brackets */
        }
        *ret_port = 0;
        *ret_hostlen = colon ? (size_t)(colon - p) : len;
        if (colon) {
                const char *v = colon + 1;
                char *end;
                long port;
                if (strcmp(v, "*") == 0) {
                        *ret_port = -1;
                        return 0;
                }
                if (!isdigit((unsigned char)*v))
                        return -EINVAL;
                errno = 0;
                port = strtol(v, &end, 10);
                if (errno || *end || port < 1 || port > 65535)
                        return -EINVAL;
                *ret_port = (int)port;
        }
        return 0;
}

int egress_pattern_check(const char *pattern, bool allow_star, char *ret, size_t size, struct sbx_error *err)
{
        char host[EGRESS_HOST_MAX];
        size_t hlen;
        int port, n;

        if (!pattern || !*pattern || strlen(pattern) >= PATTERN_MAX || size < PATTERN_MAX)
                return sbx_error_set(err, -EINVAL, 0, "an egress pattern is 1-%d characters", PATTERN_MAX - 1);
        if (split_port(pattern, &hlen, &port) < 0 || hlen == 0)
                return sbx_error_set(err, -EINVAL, 0, "bad egress pattern '%.80s': host[:port|:*] expected", pattern);
        if (hlen == 1 && pattern[0] == '*') {
                if (!allow_star)
                        return sbx_error_set(err, -EINVAL, 0, "'*' (every host) may only be set in the config");
                snprintf(host, sizeof(host), "*");
        } else if (hlen > 2 && pattern[0] == '*' && pattern[1] == '.') {
                if (egress_host_normalize(pattern + 2, hlen - 2, host) < 0 || strchr(host, ':') ||
                    !strpbrk(host, "abcdefghijklmnopqrstuvwxyz"))
                        return sbx_error_set(err, -EINVAL, 0, "bad egress pattern '%.80s': *.suffix needs a name",
                                             pattern);
                memmove(host + 2, host, strlen(host) + 1);
                host[0] = '*';
                host[1] = '.';
        } else if (egress_host_normalize(pattern, hlen, host) < 0) {
                return sbx_error_set(err, -EINVAL, 0, "bad egress pattern '%.80s': not a host name or address",
                                     pattern);
        }
        if (strchr(host, ':'))
                n = port > 0 ? snprintf(ret, size, "[%s]:%d", host, port)
                             : snprintf(ret, size, port < 0 ? "[%s]:*" : "[%s]", host);
        else
                n = port > 0 ? snprintf(ret, size, "%s:%d", host, port)
                             : snprintf(ret, size, port < 0 ? "%s:*" : "%s", host);
        if (n < 0 || (size_t)n >= size)
                return sbx_error_set(err, -EINVAL, 0, "egress pattern too long");
        return 0;
}

bool egress_pattern_match(const char *pattern, const char *host, int port)
{
        size_t hlen, plen, n;
        int pport;

        if (!pattern || !host || split_port(pattern, &plen, &pport) < 0)
                return false;
        if (pport == 0 ? (port != 80 && port != 443) : (pport > 0 && pport != port))
                return false;
        if (pattern[0] == '[') /* [v6] */
                return plen - 2 == strlen(host) && strncmp(pattern + 1, host, plen - 2) == 0;
        if (plen == 1 && pattern[0] == '*')
                return true;
        hlen = strlen(host);
        if (plen > 2 && pattern[0] == '*' && pattern[1] == '.') {
                n = plen - 1; /* ".suffix" */
                return hlen > n && strncmp(host + hlen - n, pattern + 1, n) == 0 && !strchr(host, ':');
        }
        return plen == hlen && strncmp(pattern, host, plen) == 0;
}

void egress_strv_free(char **v, size_t n)
{
        for (size_t i = 0; v && i < n; i++)
                free(v[i]);
        free(v);
}

int egress_allow_parse(const char *list, bool allow_star, char ***ret, size_t *ret_n, struct sbx_error *err)
{
        char item[PATTERN_MAX + 8], canon[PATTERN_MAX];
        char **v = NULL;
        size_t n = 0, pos = 0;
        bool too_long;
        int r;

        while (list && next_item(list, &pos, item, sizeof(item), &too_long)) {
                char **grown;
                if (too_long) {
                        r = sbx_error_set(err, -EINVAL, 0, "an egress pattern is too long");
                        goto fail;
                }
                r = egress_pattern_check(item, allow_star, canon, sizeof(canon), err);
                if (r < 0)
                        goto fail;
                grown = realloc(v, (n + 1) * sizeof(*v));
                if (!grown || !(grown[n] = strdup(canon))) {
                        v = grown ? grown : v;
                        r = -ENOMEM;
                        goto fail;
                }
                v = grown;
                n++;
        }
        *ret = v;
        *ret_n = n;
        return 0;
fail:
        egress_strv_free(v, n);
        return r;
}

/* ---- addresses ---- */

static bool in4(uint32_t a, uint32_t net, int prefix)
{
        uint32_t mask = prefix == 0 ? 0 : 0xffffffffu << (32 - prefix);
        return (a & mask) == (net & mask);
}

static const char *v4_class(uint32_t a)
{
        static const struct {
                uint32_t net;
                int prefix;
                const char *why;
        } ranges[] = {
                {0xa9fea9fe, 32, "metadata"},   /* 169.254.169.254 */
                {0x00000000, 8, "unspecified"}, /* 0/8, "this network" */
                {0x0a000000, 8, "private"},     /* 10/8 */
                {0x64400000, 10, "cgnat"},      /* 100.64/10 */
                {0x7f000000, 8, "loopback"},    /* 127/8 */
                {0xa9fe0000, 16, "link_local"}, /* 169.254/16 */
                {0xac100000, 12, "private"},    /* 172.16/12 */
                {0xc0000000, 24, "reserved"},   /* 192.0.0/24, IETF protocol assignments */
                {0xc0a80000, 16, "private"},    /* 192.168/16 */
                {0xc6120000, 15, "reserved"},   /* 198.18/15, benchmarking */
                {0xe0000000, 4, "multicast"},   /* 224/4 */
                {0xf0000000, 4, "reserved"},    /* 240/4 and the broadcast address */
        };
        for (size_t i = 0; i < ELEMENTSOF(ranges); i++)
                if (in4(a, ranges[i].net, ranges[i].prefix))
                        return ranges[i].why;
        return NULL;
}

static uint32_t load4(const uint8_t *p)
{
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static bool prefix_eq(const uint8_t *a, const uint8_t *b, int bits)
{
        int full = bits / 8, rest = bits % 8;
        if (memcmp(a, b, (size_t)full) != 0)
                return false;
        return rest == 0 || ((a[full] ^ b[full]) & (0xff << (8 - rest))) == 0;
}

static const char *v6_class(const uint8_t *a)
{
        static const uint8_t zero[16] = {0};
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        static const uint8_t nat64[12] = {0x00, 0x64, 0xff, 0x9b};
        static const uint8_t metadata[16] = {0xfd, 0x00, 0x0e, 0xc2, [14] = 0x02, [15] = 0x54}; /* fd00:ec2::254 */

        if (memcmp(a, zero, 15) == 0)
                return a[15] == 1 ? "loopback" : "unspecified";
        if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0) {
                return v4_class(load4(a + 12));
        }
        if (memcmp(a, zero, 12) == 0)
                return "ipv4_compat";       /* ::a.b.c.d, deprecated; no host should need it */
        if (a[0] == 0x20 && a[1] == 0x02) { /* 6to4: 2002:AABB:CCDD::/48 */
                return v4_class(load4(a + 2));
        }
        if (memcmp(a, metadata, 16) == 0)
                return "metadata";
        if ((a[0] & 0xfe) == 0xfc)
                return "ula"; /* fc00::/7 */
        if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
                return "link_local"; /* fe80::/10 */
        if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)
                return "site_local"; /* fec0::/10 */
        if (a[0] == 0xff)
                return "multicast";
        if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0 && a[3] == 0)
                return "translated"; /* Teredo 2001::/32: the real peer is hidden */
        if (a[0] == 0x01 && a[1] == 0 && memcmp(a + 2, zero, 6) == 0)
                return "reserved"; /* 100::/64 discard */
        return NULL;
}

const char *egress_addr_forbidden(const struct sockaddr *sa)
{
        if (!sa)
                return "unspecified";
        if (sa->sa_family == AF_INET)
                return v4_class(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
        if (sa->sa_family == AF_INET6)
                return v6_class(((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr);
        return "unspecified";
}

int egress_cidrs_parse(const char *list, struct egress_cidr **ret, size_t *ret_n, struct sbx_error *err)
{
        struct egress_cidr *v = NULL;
        char item[80];
        size_t n = 0, pos = 0;
        bool too_long;

        while (list && next_item(list, &pos, item, sizeof(item), &too_long)) {
                struct egress_cidr c = {0}, *grown;
                char *slash = strchr(item, '/');
                long prefix = -1;

                if (slash) {
                        char *end;
                        *slash = '\0';
                        errno = 0;
                        prefix = strtol(slash + 1, &end, 10);
                        if (errno || *end || end == slash + 1)
                                prefix = -2;
                }
                if (!too_long && inet_pton(AF_INET, item, c.addr) == 1) {
                        c.family = AF_INET;
                        c.prefix = prefix == -1 ? 32 : (int)prefix;
                } else if (!too_long && inet_pton(AF_INET6, item, c.addr) == 1) {
                        c.family = AF_INET6;
                        c.prefix = prefix == -1 ? 128 : (int)prefix;
                } else {
                        free(v);
                        return sbx_error_set(err, -EINVAL, 0, "bad address in a CIDR list: '%.64s'", item);
                }
                if (prefix < -1 || c.prefix < 0 || c.prefix > (c.family == AF_INET ? 32 : 128)) {
                        free(v);
                        return sbx_error_set(err, -EINVAL, 0, "bad prefix length in a CIDR list: '%.64s'", item);
                }
                grown = realloc(v, (n + 1) * sizeof(*v));
                if (!grown) {
                        free(v);
                        return -ENOMEM;
                }
                v = grown;
                v[n++] = c;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

bool egress_cidrs_contain(const struct egress_cidr *v, size_t n, const struct sockaddr *sa)
{
        uint8_t a[16];
        int family;

        if (!sa)
                return false;
        if (sa->sa_family == AF_INET) {
                memcpy(a, &((const struct sockaddr_in *)sa)->sin_addr, 4);
                family = AF_INET;
        } else if (sa->sa_family == AF_INET6) {
                static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
                memcpy(a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
                family = AF_INET6;
                if (memcmp(a, mapped, 12) == 0) {
                        memmove(a, a + 12, 4);
                        family = AF_INET;
                }
        } else {
                return false;
        }
        for (size_t i = 0; i < n; i++)
                if (v[i].family == family && prefix_eq(a, v[i].addr, v[i].prefix))
                        return true;
        return false;
}

int egress_overrides_parse(const char *list, struct egress_override **ret, size_t *ret_n, struct sbx_error *err)
{
        struct egress_override *v = NULL;
        char item[EGRESS_HOST_MAX + 64];
        size_t n = 0, pos = 0;
        bool too_long;

        while (list && next_item(list, &pos, item, sizeof(item), &too_long)) {
                struct egress_override o = {0}, *grown;
                char *eq = strchr(item, '=');
                struct sockaddr_in *s4 = (struct sockaddr_in *)&o.addr;
                struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&o.addr;
                const char *ip;

                if (too_long || !eq || egress_host_normalize(item, (size_t)(eq - item), o.name) < 0) {
                        free(v);
                        return sbx_error_set(err, -EINVAL, 0, "bad egress_resolve entry '%.80s': name=ip expected",
                                             item);
                }
                ip = eq + 1;
                if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
                        s4->sin_family = AF_INET;
                        o.len = sizeof(*s4);
                } else if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1) {
                        s6->sin6_family = AF_INET6;
                        o.len = sizeof(*s6);
                } else {
                        free(v);
                        return sbx_error_set(err, -EINVAL, 0, "bad egress_resolve address '%.64s'", ip);
                }
                grown = realloc(v, (n + 1) * sizeof(*v));
                if (!grown) {
                        free(v);
                        return -ENOMEM;
                }
                v = grown;
                v[n++] = o;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

int egress_upstream_parse(const char *url, char host[EGRESS_HOST_MAX], int *ret_port, struct sbx_error *err)
{
        const char *p = url;
        size_t hlen;
        int port;

        if (!url || strncmp(url, "http://", 7) != 0)
                return sbx_error_set(err, -EINVAL, 0, "egress_upstream_proxy must be http://host:port");
        p += 7;
        hlen = strcspn(p, "/");
        if (p[hlen] && strcmp(p + hlen, "/") != 0)
                return sbx_error_set(err, -EINVAL, 0, "egress_upstream_proxy takes no path");
        {
                char buf[EGRESS_HOST_MAX + 16];
                size_t h;
                if (hlen >= sizeof(buf))
                        return sbx_error_set(err, -EINVAL, 0, "egress_upstream_proxy: host too long");
                memcpy(buf, p, hlen);
                buf[hlen] = '\0';
                if (split_port(buf, &h, &port) < 0 || port <= 0 || egress_host_normalize(buf, h, host) < 0)
                        return sbx_error_set(err, -EINVAL, 0, "egress_upstream_proxy must be http://host:port");
        }
        *ret_port = port;
        return 0;
}

void egress_addr_string(const struct sockaddr *sa, char *ret, size_t size)
{
        const void *a = NULL;

        ret[0] = '\0';
        if (sa && sa->sa_family == AF_INET)
                a = &((const struct sockaddr_in *)sa)->sin_addr;
        else if (sa && sa->sa_family == AF_INET6)
                a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (a && !inet_ntop(sa->sa_family, a, ret, (socklen_t)size))
                ret[0] = '\0';
}
