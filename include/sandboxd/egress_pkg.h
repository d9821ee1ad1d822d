/* egress_pkg.h — packages by policy (issue 37 item 2): the operator's
 * policy for PyPI and npm, and the pure decisions over it. No state, no
 * threads, no I/O but egress_pkg_load's one read: the egress proxy
 * (egress_packages.c) asks it about each request to a registry host, the
 * API asks it which index and registry an execution's pip and npm are
 * pointed at, and unit tests drive it directly.
 *
 * The policy file (egress.packages_file), JSON:
 *   {"default": {"pypi": {"index": "https://pypi.example/simple",
 *                         "file_hosts": ["files.example"],
 *                         "allow": ["*"], "deny": ["evil-*", "requests >=2.32"]},
 *                "npm":  {"registry": "https://npm.example/", "deny": ["left-pad"]}},
 *    "users": {"alice": {...the same shape...}}}
 * A user's entry replaces the default whole; a user with neither gets no
 * package policy (nothing intercepted for packages, pip and npm untouched).
 *
 * A rule is a name glob (fnmatch: * ? [..]; PyPI names compared after PEP
 * 503 normalization, npm names in lower case, "@scope/name" included) and
 * optionally a version range: clauses joined by commas, each an operator
 * (== != < <= > >= ~=, "==1.2.*" a prefix) and a version. Versions compare
 * by their numeric release (1.10 > 1.9), a pre-release (1.0a1, 1.0.0-rc.1)
 * below its release. A deny rule matches a request for a name it covers,
 * or, with a range, a request for a version in it (a file, a tarball, a
 * version document): metadata of a package with only some versions denied
 * stays readable, its denied files do not. Then, when the allow list is not
 * empty, the name must match one of its rules (and a named version its
 * range). */
#ifndef SANDBOXD_EGRESS_PKG_H
#define SANDBOXD_EGRESS_PKG_H

#include <stdbool.h>
#include <stddef.h>

#include "sandboxd/common.h"
#include "sandboxd/egress_policy.h"

#define EGRESS_PKG_NAME_MAX 215 /* npm's 214 and the NUL */
#define EGRESS_PKG_VERSION_MAX 128
#define EGRESS_PKG_RANGE_MAX 128
#define EGRESS_PKG_URL_MAX 512
#define EGRESS_PKG_RULES_MAX 1000 /* per list */
#define EGRESS_PKG_FILE_HOSTS_MAX 4
#define EGRESS_PKG_USERS_MAX 10000
#define EGRESS_PKG_FILE_MAX (4 << 20)

enum egress_pkg_eco { EGRESS_PKG_PYPI, EGRESS_PKG_NPM, EGRESS_PKG_N };

struct egress_pkg_rule {
        char name[EGRESS_PKG_NAME_MAX];   /* glob, normalized */
        char range[EGRESS_PKG_RANGE_MAX]; /* "" = every version */
};

struct egress_pkg_eco_policy {
        bool on;
        char url[EGRESS_PKG_URL_MAX]; /* as pip (PIP_INDEX_URL) or npm (npm_config_registry) is given it */
        bool https;
        char host[EGRESS_HOST_MAX];
        int port;
        char prefix[EGRESS_PKG_URL_MAX]; /* the URL's path, without its trailing slash */
        char file_hosts[EGRESS_PKG_FILE_HOSTS_MAX][EGRESS_HOST_MAX];
        size_t n_file_hosts;
        struct egress_pkg_rule *allow, *deny;
        size_t n_allow, n_deny;
};

struct egress_pkg_policy {
        struct egress_pkg_eco_policy eco[EGRESS_PKG_N];
};

struct egress_pkg_policies;

/* Parse json (the shape above) / read and parse path. Errors name the field. */
int egress_pkg_parse(const char *json, struct egress_pkg_policies **ret, struct sbx_error *err);
int egress_pkg_load(const char *path, struct egress_pkg_policies **ret, struct sbx_error *err);
void egress_pkg_free(struct egress_pkg_policies *p);

/* user's policy, else the default, else NULL (p NULL: NULL). */
const struct egress_pkg_policy *egress_pkg_for_user(const struct egress_pkg_policies *p, const char *user);

/* Which ecosystem's registry (or file host) host:port is, or -1. */
int egress_pkg_eco_for_host(const struct egress_pkg_policy *pol, const char *host, int port);

/* PyPI: lower case, each run of - _ . one '-' (PEP 503); npm: lower case. */
void egress_pkg_normalize(enum egress_pkg_eco eco, const char *in, char ret[EGRESS_PKG_NAME_MAX]);

/* <0, 0, >0 as a sorts before, with, after b (the order above). */
int egress_pkg_version_cmp(const char *a, const char *b);
/* Is version in range ("" is every version)? */
bool egress_pkg_version_in(const char *range, const char *version);
/* Check a range's syntax. */
bool egress_pkg_range_ok(const char *range);

/* The package (and version, "" when the request names none) a request
 * path on eco's registry or file host is for: 1 when it names one, 0 when
 * it is no package's (an index root, npm's /-/ endpoints), -1 when it
 * cannot be read (bad percent-encoding, a name of other characters). */
int egress_pkg_from_path(const struct egress_pkg_eco_policy *ep, enum egress_pkg_eco eco, const char *path, size_t len,
                         char ret_name[EGRESS_PKG_NAME_MAX], char ret_version[EGRESS_PKG_VERSION_MAX]);

/* May name (normalized) at version ("" = the package as a whole) be
 * fetched? false: *ret_why says which rule or "not on the allow list". */
bool egress_pkg_allowed(const struct egress_pkg_eco_policy *ep, const char *name, const char *version,
                        const char **ret_why);

/* ---- index pages (filtered so that pip and npm pick an allowed version) ---- */

#define EGRESS_PKG_PAGE_MAX (32 << 20) /* an index page or packument filtered whole in memory, at most */

/* Is path a package's index page on eco's registry (PyPI: <prefix>/NAME/,
 * PEP 503 or 691; npm: the packument <prefix>/NAME)? Its name then. */
bool egress_pkg_index_of(const struct egress_pkg_eco_policy *ep, enum egress_pkg_eco eco, const char *path, size_t len,
                         char ret_name[EGRESS_PKG_NAME_MAX]);
/* Does a rule with a version range match name (normalized)? Only then can
 * its index page hold a version the policy refuses. */
bool egress_pkg_has_ranges(const struct egress_pkg_eco_policy *ep, const char *name);
/* name's index page in[0, len) steered off the versions the policy
 * refuses, so that an install picks an allowed one and asking for a
 * refused one still names the policy: PyPI HTML (PEP 503) and JSON (PEP
 * 691): each refused file marked yanked (PEP 592: pip ignores it unless
 * pinned with ==) with "blocked by sandboxd package policy: NAME VERSION";
 * an npm packument: refused versions moved from "versions" to
 * "policyRestrictions" (npm-pick-manifest picks another, or fails E403
 * printing its message), their "time" entries and dist-tags dropped, and
 * "latest", when it was refused, made the newest allowed release. *ret
 * (malloc'd, *ret_len bytes, NUL-terminated) and how many files or
 * versions were refused; -EINVAL when JSON cannot be read, -E2BIG over
 * EGRESS_PKG_PAGE_MAX. */
int egress_pkg_filter_page(const struct egress_pkg_eco_policy *ep, enum egress_pkg_eco eco, const char *name, bool json,
                           const char *in, size_t len, char **ret, size_t *ret_len, size_t *ret_dropped);

#endif
