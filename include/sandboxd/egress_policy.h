/* egress_policy.h — the egress proxy's pure policy pieces: allowlist
 * patterns, host name checks, the SSRF guard over addresses, CIDR lists and
 * the static resolver overrides. No state, no threads, no I/O: the proxy
 * (egress.c) and the admin and API fronts share them, and unit tests drive
 * them directly.
 *
 * Pattern syntax (egress_allow, per-user and per-session additions):
 *   host             exactly that name, ports 80 and 443
 *   *.suffix         any name ending in .suffix (not suffix itself), 80 and 443
 *   ...:PORT         that port only;   ...:*  any port
 *   1.2.3.4, [::1]   an address literal, matched exactly
 *   *  or  *:PORT    every name (config only: the fronts refuse it)
 * Names are compared in lower case, without a trailing dot. */
#ifndef SANDBOXD_EGRESS_POLICY_H
#define SANDBOXD_EGRESS_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "sandboxd/common.h"

#define EGRESS_HOST_MAX 254 /* 253 characters and the NUL */

/* Check a pattern (syntax above). allow_star: whether `*` alone may be used.
 * On success writes the canonical form (lower case) into ret (size >= 272). */
int egress_pattern_check(const char *pattern, bool allow_star, char *ret, size_t size, struct sbx_error *err);

/* Does the canonical pattern allow host (canonical, egress_host_normalize) at port? */
bool egress_pattern_match(const char *pattern, const char *host, int port);

/* Validate and canonicalize a destination host as a client named it: a DNS
 * name (letters, digits, '-', '_', dots; labels 1-63; at most 253) or an
 * address literal (IPv6 with or without brackets). Lower-cases, drops a
 * trailing dot, writes IPv6 without brackets in inet_ntop form. */
int egress_host_normalize(const char *in, size_t len, char ret[EGRESS_HOST_MAX]);

/* Split a list of patterns (commas and/or blanks) and check each (config:
 * allow_star true). On success *ret is a malloc'd array of malloc'd strings. */
int egress_allow_parse(const char *list, bool allow_star, char ***ret, size_t *ret_n, struct sbx_error *err);
void egress_strv_free(char **v, size_t n);

struct egress_cidr {
        int family; /* AF_INET | AF_INET6 */
        uint8_t addr[16];
        int prefix;
};
/* "10.0.0.0/8, 127.0.0.1/32, fd00::/8, 192.168.1.5" (no prefix: one address). */
int egress_cidrs_parse(const char *list, struct egress_cidr **ret, size_t *ret_n, struct sbx_error *err);
/* Is the address (an IPv4-mapped IPv6 one also as its IPv4) inside any? */
bool egress_cidrs_contain(const struct egress_cidr *v, size_t n, const struct sockaddr *sa);

/* The SSRF guard: NULL for a public unicast address, else the class that
 * refuses it ("loopback", "private", "link_local", "metadata", "unspecified",
 * "multicast", "reserved", "cgnat", "ula", "site_local", "ipv4_compat",
 * "translated" ...). IPv4-mapped, NAT64 (64:ff9b::/96) and 6to4 addresses are
 * judged by the IPv4 address inside. */
const char *egress_addr_forbidden(const struct sockaddr *sa);

struct egress_override {
        char name[EGRESS_HOST_MAX];
        struct sockaddr_storage addr; /* port 0 */
        socklen_t len;
};
/* "name=ip, name2=ip2" (egress_resolve). */
int egress_overrides_parse(const char *list, struct egress_override **ret, size_t *ret_n, struct sbx_error *err);

/* "http://host:port" (egress_upstream_proxy): host (name or literal) and port. */
int egress_upstream_parse(const char *url, char host[EGRESS_HOST_MAX], int *ret_port, struct sbx_error *err);

/* Text form of an address (inet_ntop), "" on failure. */
void egress_addr_string(const struct sockaddr *sa, char *ret, size_t size);

#endif
