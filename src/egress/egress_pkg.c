/* egress_pkg.c — packages by policy (egress_pkg.h): the policy file, name
 * globs, version ranges and which package a registry URL is for. Pure
 * functions over a policy parsed once and read-only after: no locks.
 * fnmatch for the globs; the version order is the few lines PEP 440 and
 * semver agree on (no Debian C library parses both). Index pages (PEP 503
 * HTML, PEP 691 JSON, npm packuments) are rewritten here so that pip and
 * npm steer clear of refused versions (egress_pkg_filter_page). */
#include "sandboxd/egress_pkg.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

struct egress_pkg_policies {
        struct egress_pkg_policy def;
        bool has_def;
        char (*users)[65];
        struct egress_pkg_policy *per_user;
        size_t n;
};

static void eco_free(struct egress_pkg_eco_policy *e)
{
        free(e->allow);
        free(e->deny);
}

void egress_pkg_free(struct egress_pkg_policies *p)
{
        if (!p)
                return;
        for (size_t k = 0; k < EGRESS_PKG_N; k++)
                eco_free(&p->def.eco[k]);
        for (size_t i = 0; i < p->n; i++)
                for (size_t k = 0; k < EGRESS_PKG_N; k++)
                        eco_free(&p->per_user[i].eco[k]);
        free(p->users);
        free(p->per_user);
        free(p);
}

void egress_pkg_normalize(enum egress_pkg_eco eco, const char *in, char ret[EGRESS_PKG_NAME_MAX])
{
        size_t o = 0;

        for (size_t i = 0; in[i] && o + 1 < EGRESS_PKG_NAME_MAX; i++) {
                char c = (char)tolower((unsigned char)in[i]);
                if (eco == EGRESS_PKG_PYPI && (c == '-' || c == '_' || c == '.')) {
                        if (o == 0 || ret[o - 1] != '-')
                                ret[o++] = '-';
                        continue;
                }
                ret[o++] = c;
        }
        ret[o] = '\0';
}

/* ---- versions ---- */

/* The release's numbers (at most 16), and where what follows starts. */
static size_t release_of(const char *v, unsigned long long *nums, size_t *ret_n)
{
        size_t i = 0, n = 0;

        if (v[0] == 'v' || v[0] == 'V')
                i++;
        while (isdigit((unsigned char)v[i])) {
                unsigned long long x = 0;
                while (isdigit((unsigned char)v[i])) {
                        x = x * 10 + (unsigned long long)(v[i] - '0');
                        if (x > 1000000000000ULL)
                                x = 1000000000000ULL;
                        i++;
                }
                if (n < 16)
                        nums[n++] = x;
                if (v[i] != '.' || !isdigit((unsigned char)v[i + 1]))
                        break;
                i++;
        }
        *ret_n = n;
        return i;
}

/* A suffix that makes a pre-release: a letter or '-' first (1.0a1, 1.0.0-rc.1), not a build or post. */
static bool is_pre(const char *s)
{
        if (s[0] == '+' || s[0] == '\0')
                return false;
        if (strncasecmp(s, ".post", 5) == 0 || strncasecmp(s, "post", 4) == 0 || strncasecmp(s, ".dev", 4) == 0)
                return strncasecmp(s, ".dev", 4) == 0;
        return true;
}

int egress_pkg_version_cmp(const char *a, const char *b)
{
        unsigned long long na[16], nb[16];
        size_t ca, cb;
        const char *sa = a + release_of(a, na, &ca), *sb = b + release_of(b, nb, &cb);
        bool pa, pb;

        for (size_t i = 0; i < ca || i < cb; i++) {
                unsigned long long x = i < ca ? na[i] : 0, y = i < cb ? nb[i] : 0;
                if (x != y)
                        return x < y ? -1 : 1;
        }
        pa = is_pre(sa);
        pb = is_pre(sb);
        if (pa != pb)
                return pa ? -1 : 1;
        return strcasecmp(sa, sb) < 0 ? -1 : strcasecmp(sa, sb) > 0 ? 1 : 0;
}

static bool clause_holds(const char *c, size_t len, const char *version)
{
        static const char *const ops[] = {"===", "==", "!=", "<=", ">=", "~=", "<", ">", "="};
        char v[EGRESS_PKG_VERSION_MAX];
        const char *op = NULL;
        size_t ol = 0, vl;
        int cmp;

        while (len && (*c == ' ' || *c == '\t'))
                c++, len--;
        while (len && (c[len - 1] == ' ' || c[len - 1] == '\t'))
                len--;
        for (size_t i = 0; i < ELEMENTSOF(ops) && !op; i++)
                if (len >= strlen(ops[i]) && strncmp(c, ops[i], strlen(ops[i])) == 0) {
                        op = ops[i];
                        ol = strlen(op);
                }
        if (!op)
                return false;
        c += ol;
        len -= ol;
        while (len && (*c == ' ' || *c == '\t'))
                c++, len--;
        if (len == 0 || len >= sizeof(v))
                return false;
        memcpy(v, c, len);
        v[len] = '\0';
        vl = len;
        if ((strcmp(op, "==") == 0 || strcmp(op, "!=") == 0) && vl >= 2 && strcmp(v + vl - 2, ".*") == 0) {
                /* a prefix: ==1.2.* holds for 1.2 and 1.2.x */
                bool in = strncasecmp(version, v, vl - 2) == 0 && (version[vl - 2] == '\0' || version[vl - 2] == '.' ||
                                                                   !isdigit((unsigned char)version[vl - 2]));
                return op[0] == '=' ? in : !in;
        }
        if (strcmp(op, "===") == 0)
                return strcmp(version, v) == 0;
        cmp = egress_pkg_version_cmp(version, v);
        if (strcmp(op, "==") == 0 || strcmp(op, "=") == 0)
                return cmp == 0;
        if (strcmp(op, "!=") == 0)
                return cmp != 0;
        if (strcmp(op, "<") == 0)
                return cmp < 0;
        if (strcmp(op, "<=") == 0)
                return cmp <= 0;
        if (strcmp(op, ">") == 0)
                return cmp > 0;
        if (strcmp(op, ">=") == 0)
                return cmp >= 0;
        /* ~=: at least v, and the same release but for v's last number */
        {
                unsigned long long nv[16], nx[16];
                size_t cv, cx;
                (void)release_of(v, nv, &cv);
                (void)release_of(version, nx, &cx);
                if (cmp < 0 || cv < 2)
                        return false;
                for (size_t i = 0; i + 1 < cv; i++)
                        if ((i < cx ? nx[i] : 0) != nv[i])
                                return false;
                return true;
        }
}

bool egress_pkg_version_in(const char *range, const char *version)
{
        const char *c = range;

        if (!range[0])
                return true;
        for (;;) {
                const char *e = strchr(c, ',');
                size_t len = e ? (size_t)(e - c) : strlen(c);
                if (!clause_holds(c, len, version))
                        return false;
                if (!e)
                        return true;
                c = e + 1;
        }
}

bool egress_pkg_range_ok(const char *range)
{
        const char *c = range;

        if (!range[0])
                return true;
        for (;;) {
                const char *e = strchr(c, ',');
                size_t len = e ? (size_t)(e - c) : strlen(c), i = 0;
                while (i < len && (c[i] == ' ' || c[i] == '\t'))
                        i++;
                while (i < len && strchr("=!<>~", c[i]))
                        i++;
                if (i == 0 || !strchr("=!<>~", c[i - 1]))
                        return false;
                while (i < len && (c[i] == ' ' || c[i] == '\t'))
                        i++;
                if (i >= len || !isalnum((unsigned char)c[i]))
                        return false;
                for (; i < len; i++)
                        if (!isalnum((unsigned char)c[i]) && !strchr(".-+*_ \t", c[i]))
                                return false;
                /* the operators themselves */
                {
                        char op[4] = {0};
                        size_t k = 0, j = 0;
                        while (j < len && (c[j] == ' ' || c[j] == '\t'))
                                j++;
                        while (j < len && k < 3 && strchr("=!<>~", c[j]))
                                op[k++] = c[j++];
                        if (strchr("=!<>~", c[j]) ||
                            !(strcmp(op, "==") == 0 || strcmp(op, "===") == 0 || strcmp(op, "!=") == 0 ||
                              strcmp(op, "<") == 0 || strcmp(op, "<=") == 0 || strcmp(op, ">") == 0 ||
                              strcmp(op, ">=") == 0 || strcmp(op, "~=") == 0 || strcmp(op, "=") == 0))
                                return false;
                }
                if (!e)
                        return true;
                c = e + 1;
        }
}

/* ---- names ---- */

static bool name_char_ok(char c)
{
        return isalnum((unsigned char)c) || strchr("-_.~@/", c);
}

static bool glob_char_ok(char c)
{
        return name_char_ok(c) || strchr("*?[]!", c);
}

static bool rule_matches(enum egress_pkg_eco eco, const struct egress_pkg_rule *r, const char *name)
{
        (void)eco;
        return fnmatch(r->name, name, 0) == 0;
}

bool egress_pkg_allowed(const struct egress_pkg_eco_policy *ep, const char *name, const char *version,
                        const char **ret_why)
{
        bool allowed;

        for (size_t i = 0; i < ep->n_deny; i++) {
                const struct egress_pkg_rule *r = &ep->deny[i];
                if (!rule_matches(EGRESS_PKG_PYPI, r, name))
                        continue;
                if (!r->range[0] || (version[0] && egress_pkg_version_in(r->range, version))) {
                        *ret_why = "deny";
                        return false;
                }
        }
        if (ep->n_allow == 0)
                return true;
        allowed = false;
        for (size_t i = 0; i < ep->n_allow && !allowed; i++) {
                const struct egress_pkg_rule *r = &ep->allow[i];
                allowed = rule_matches(EGRESS_PKG_PYPI, r, name) &&
                          (!r->range[0] || !version[0] || egress_pkg_version_in(r->range, version));
        }
        if (!allowed)
                *ret_why = "not on the allow list";
        return allowed;
}

/* ---- URLs ---- */

static int hexval(char c)
{
        return isdigit((unsigned char)c)    ? c - '0'
               : isxdigit((unsigned char)c) ? tolower((unsigned char)c) - 'a' + 10
                                            : -1;
}

/* path up to ? or #, percent-decoded into ret (NUL-terminated); -1 on bad escapes, a NUL, or too long. */
static int path_decode(const char *path, size_t len, char *ret, size_t size)
{
        size_t o = 0;

        for (size_t i = 0; i < len && path[i] != '?' && path[i] != '#'; i++) {
                char c = path[i];
                if (c == '%') {
                        int h, l;
                        if (i + 2 >= len || (h = hexval(path[i + 1])) < 0 || (l = hexval(path[i + 2])) < 0)
                                return -1;
                        c = (char)(h * 16 + l);
                        i += 2;
                        if (c == '\0')
                                return -1;
                }
                if (o + 1 >= size)
                        return -1;
                ret[o++] = c;
        }
        ret[o] = '\0';
        return 0;
}

static bool ends_with(const char *s, size_t len, const char *suffix)
{
        size_t n = strlen(suffix);
        return len >= n && strncasecmp(s + len - n, suffix, n) == 0;
}

static int set_name(enum egress_pkg_eco eco, const char *s, size_t len, char *ret_name)
{
        char raw[EGRESS_PKG_NAME_MAX];

        if (len == 0 || len >= sizeof(raw))
                return -1;
        for (size_t i = 0; i < len; i++)
                if (!name_char_ok(s[i]))
                        return -1;
        memcpy(raw, s, len);
        raw[len] = '\0';
        egress_pkg_normalize(eco, raw, ret_name);
        return 0;
}

static int set_version(const char *s, size_t len, char *ret_version)
{
        if (len == 0 || len >= EGRESS_PKG_VERSION_MAX)
                return -1;
        for (size_t i = 0; i < len; i++)
                if (!isalnum((unsigned char)s[i]) && !strchr(".-+_!", s[i]))
                        return -1;
        memcpy(ret_version, s, len);
        ret_version[len] = '\0';
        return 0;
}

/* A PyPI distribution file's name and version: NAME-VER(-...)?.whl, NAME-VER.tar.gz &c. 1, or 0 when
 * it is no distribution file. */
static int pypi_file(const char *f, size_t len, char *ret_name, char *ret_version)
{
        static const char *const sdist[] = {".tar.gz", ".tar.bz2", ".tar.xz", ".zip", ".tgz", ".tar"};
        const char *dash;

        if (ends_with(f, len, ".metadata")) /* PEP 658: the file's metadata beside it */
                len -= strlen(".metadata");
        if (ends_with(f, len, ".whl") || ends_with(f, len, ".egg")) {
                const char *v, *e;
                dash = memchr(f, '-', len);
                if (!dash)
                        return -1;
                v = dash + 1;
                e = memchr(v, '-', len - (size_t)(v - f));
                if (!e)
                        e = f + len - 4;
                if (set_name(EGRESS_PKG_PYPI, f, (size_t)(dash - f), ret_name) < 0 ||
                    set_version(v, (size_t)(e - v), ret_version) < 0)
                        return -1;
                return 1;
        }
        for (size_t i = 0; i < ELEMENTSOF(sdist); i++) {
                if (!ends_with(f, len, sdist[i]))
                        continue;
                len -= strlen(sdist[i]);
                dash = NULL;
                for (size_t k = len; k > 0; k--)
                        if (f[k - 1] == '-') {
                                dash = f + k - 1;
                                break;
                        }
                if (!dash || set_name(EGRESS_PKG_PYPI, f, (size_t)(dash - f), ret_name) < 0 ||
                    set_version(dash + 1, len - (size_t)(dash + 1 - f), ret_version) < 0)
                        return -1;
                return 1;
        }
        return 0;
}

static int pypi_path(const struct egress_pkg_eco_policy *ep, const char *p, char *ret_name, char *ret_version)
{
        size_t pl = strlen(ep->prefix), len = strlen(p);
        const char *last = strrchr(p, '/');

        /* the index: <prefix>/<name>/ (PEP 503 HTML, PEP 691 JSON) */
        if (strncmp(p, ep->prefix, pl) == 0 && p[pl] == '/') {
                const char *n = p + pl + 1, *slash = strchr(n, '/');
                if (*n == '\0')
                        return 0;
                if (!slash || slash[1] == '\0')
                        return set_name(EGRESS_PKG_PYPI, n, slash ? (size_t)(slash - n) : strlen(n), ret_name) < 0 ? -1
                                                                                                                   : 1;
        }
        /* the JSON API: /pypi/<name>/json, /pypi/<name>/<version>/json */
        if (strncmp(p, "/pypi/", 6) == 0 && ends_with(p, len, "/json")) {
                const char *n = p + 6, *s1 = strchr(n, '/'), *s2;
                if (!s1 || set_name(EGRESS_PKG_PYPI, n, (size_t)(s1 - n), ret_name) < 0)
                        return -1;
                s2 = strchr(s1 + 1, '/');
                if (s2 && s2 != p + len - 5)
                        return -1;
                if (s2 && set_version(s1 + 1, (size_t)(s2 - s1 - 1), ret_version) < 0)
                        return -1;
                return 1;
        }
        if (!last || last[1] == '\0')
                return 0;
        return pypi_file(last + 1, strlen(last + 1), ret_name, ret_version);
}

static int npm_path(const struct egress_pkg_eco_policy *ep, const char *p, char *ret_name, char *ret_version)
{
        size_t pl = strlen(ep->prefix);
        const char *n, *end, *rest, *base;
        size_t nl;

        if (strncmp(p, ep->prefix, pl) != 0 || p[pl] != '/')
                return 0; /* not under the registry: nothing npm asks for */
        n = p + pl + 1;
        if (*n == '\0' || strncmp(n, "-/", 2) == 0)
                return 0; /* the root, search, audit, login */
        if (*n == '@') {
                const char *s = strchr(n, '/');
                if (!s)
                        return -1;
                end = strchr(s + 1, '/');
        } else {
                end = strchr(n, '/');
        }
        if (!end)
                end = n + strlen(n);
        nl = (size_t)(end - n);
        if (set_name(EGRESS_PKG_NPM, n, nl, ret_name) < 0)
                return -1;
        rest = end;
        if (*rest == '\0' || strcmp(rest, "/") == 0)
                return 1; /* the packument */
        base = memrchr(n, '/', nl);
        base = base ? base + 1 : n;
        if (strncmp(rest, "/-/", 3) == 0) {
                /* the tarball: <name>/-/<basename>-<version>.tgz */
                const char *f = rest + 3;
                size_t bl = (size_t)(end - base), fl = strlen(f);
                if (fl > bl + 5 && strncasecmp(f, base, bl) == 0 && f[bl] == '-' && ends_with(f, fl, ".tgz"))
                        return set_version(f + bl + 1, fl - bl - 5, ret_version) < 0 ? -1 : 1;
                /* a file under one package named for another (or none): not read as the first's */
                return -1;
        }
        /* a version document: <name>/<version> (a dist-tag names no version) */
        rest++;
        if (isdigit((unsigned char)rest[0]) && !strchr(rest, '/'))
                return set_version(rest, strlen(rest), ret_version) < 0 ? -1 : 1;
        return 1;
}

int egress_pkg_from_path(const struct egress_pkg_eco_policy *ep, enum egress_pkg_eco eco, const char *path, size_t len,
                         char ret_name[EGRESS_PKG_NAME_MAX], char ret_version[EGRESS_PKG_VERSION_MAX])
{
        char p[2048];

        ret_name[0] = ret_version[0] = '\0';
        if (path_decode(path, len, p, sizeof(p)) < 0 || p[0] != '/' || strstr(p, "/../") || strstr(p, "//"))
                return -1;
        return eco == EGRESS_PKG_PYPI ? pypi_path(ep, p, ret_name, ret_version)
                                      : npm_path(ep, p, ret_name, ret_version);
}

/* ---- index pages ---- */

bool egress_pkg_index_of(const struct egress_pkg_eco_policy *ep, enum egress_pkg_eco eco, const char *path, size_t len,
                         char ret_name[EGRESS_PKG_NAME_MAX])
{
        char p[2048];
        size_t pl = strlen(ep->prefix);
        const char *n, *slash;

        if (path_decode(path, len, p, sizeof(p)) < 0 || strncmp(p, ep->prefix, pl) != 0 || p[pl] != '/')
                return false;
        n = p + pl + 1;
        if (eco == EGRESS_PKG_PYPI) {
                slash = strchr(n, '/');
                if (*n == '\0' || (slash && slash[1] != '\0'))
                        return false;
                return set_name(eco, n, slash ? (size_t)(slash - n) : strlen(n), ret_name) == 0;
        }
        if (*n == '\0' || strncmp(n, "-/", 2) == 0)
                return false;
        if (*n == '@') { /* @scope/name */
                const char *s = strchr(n, '/');
                if (!s)
                        return false;
                slash = strchr(s + 1, '/');
        } else {
                slash = strchr(n, '/');
        }
        if (slash && slash[1] != '\0')
                return false;
        return set_name(eco, n, slash ? (size_t)(slash - n) : strlen(n), ret_name) == 0;
}

bool egress_pkg_has_ranges(const struct egress_pkg_eco_policy *ep, const char *name)
{
        for (size_t i = 0; i < ep->n_deny; i++)
                if (ep->deny[i].range[0] && rule_matches(EGRESS_PKG_PYPI, &ep->deny[i], name))
                        return true;
        for (size_t i = 0; i < ep->n_allow; i++)
                if (ep->allow[i].range[0] && rule_matches(EGRESS_PKG_PYPI, &ep->allow[i], name))
                        return true;
        return false;
}

static const char *find_ci(const char *h, size_t hl, const char *needle)
{
        size_t nl = strlen(needle);

        for (size_t i = 0; i + nl <= hl; i++)
                if (strncasecmp(h + i, needle, nl) == 0)
                        return h + i;
        return NULL;
}

/* Does the anchor tag a[0, len) link a distribution file the policy refuses? Its name and version then. */
static bool anchor_refused(const struct egress_pkg_eco_policy *ep, const char *a, size_t len,
                           char name[EGRESS_PKG_NAME_MAX], char version[EGRESS_PKG_VERSION_MAX])
{
        char file[1024];
        const char *h = a, *v, *e, *last, *why;
        size_t vl;

        /* the href attribute: a space before it, then = and a value, quoted or not */
        for (;;) {
                h = find_ci(h, len - (size_t)(h - a), "href");
                if (!h)
                        return false;
                if (isspace((unsigned char)h[-1]))
                        break;
                h += 4;
        }
        v = h + 4;
        while (v < a + len && isspace((unsigned char)*v))
                v++;
        if (v >= a + len || *v != '=')
                return false;
        v++;
        while (v < a + len && isspace((unsigned char)*v))
                v++;
        if (v < a + len && (*v == '"' || *v == '\'')) {
                e = memchr(v + 1, *v, len - (size_t)(v + 1 - a));
                v++;
        } else {
                for (e = v; e < a + len && !isspace((unsigned char)*e) && *e != '>'; e++)
                        ;
        }
        if (!e)
                return false;
        vl = (size_t)(e - v);
        for (size_t i = 0; i < vl; i++)
                if (v[i] == '#' || v[i] == '?') {
                        vl = i;
                        break;
                }
        last = memrchr(v, '/', vl);
        if (last) {
                vl -= (size_t)(last + 1 - v);
                v = last + 1;
        }
        if (path_decode(v, vl, file, sizeof(file)) < 0 || pypi_file(file, strlen(file), name, version) != 1)
                return false; /* not a file read as one: its download is judged when it is asked for */
        return !egress_pkg_allowed(ep, name, version, &why);
}

struct growbuf {
        char *p;
        size_t len, cap;
        bool oom;
};

static void gb_add(struct growbuf *b, const char *s, size_t n)
{
        if (b->oom)
                return;
        if (b->len + n + 1 > b->cap) {
                size_t cap = (b->len + n + 1) * 2;
                char *np = realloc(b->p, cap);
                if (!np) {
                        b->oom = true;
                        return;
                }
                b->p = np;
                b->cap = cap;
        }
        memcpy(b->p + b->len, s, n);
        b->len += n;
        b->p[b->len] = '\0';
}

/* PEP 503: each refused file's anchor gets data-yanked (PEP 592) with the policy's message, unless it has one. */
static void filter_html(const struct egress_pkg_eco_policy *ep, const char *in, size_t len, struct growbuf *out,
                        size_t *ret_refused)
{
        char name[EGRESS_PKG_NAME_MAX], version[EGRESS_PKG_VERSION_MAX], attr[EGRESS_PKG_NAME_MAX + 128];
        size_t i = 0;

        while (i < len) {
                const char *a = in + i, *tag_end;
                for (;;) {
                        a = find_ci(a, len - (size_t)(a - in), "<a");
                        if (!a || a + 2 >= in + len || isspace((unsigned char)a[2]))
                                break;
                        a += 2;
                }
                tag_end = a ? memchr(a, '>', len - (size_t)(a - in)) : NULL;
                if (!a || !tag_end) {
                        gb_add(out, in + i, len - i);
                        break;
                }
                gb_add(out, in + i, (size_t)(a + 2 - (in + i)));
                if (anchor_refused(ep, a, (size_t)(tag_end - a), name, version) &&
                    !find_ci(a, (size_t)(tag_end - a), "data-yanked")) {
                        /* the name and version are of name_char_ok and set_version's characters: no quote */
                        int n = snprintf(attr, sizeof(attr),
                                         " data-yanked=\"blocked by sandboxd package policy: %s %s\"", name, version);
                        gb_add(out, attr, (size_t)n);
                        (*ret_refused)++;
                }
                i = (size_t)(a + 2 - in);
        }
}

/* PEP 691: each refused file gets "yanked": the policy's message. */
static void pypi_json_filter(const struct egress_pkg_eco_policy *ep, cJSON *root, size_t *ret_refused)
{
        cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files"), *it;
        const char *why;

        for (it = cJSON_IsArray(files) ? files->child : NULL; it; it = it->next) {
                const char *f = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "filename"));
                char n[EGRESS_PKG_NAME_MAX], v[EGRESS_PKG_VERSION_MAX], msg[EGRESS_PKG_NAME_MAX + 96];
                cJSON *y;
                if (!cJSON_IsObject(it) || !f || pypi_file(f, strlen(f), n, v) != 1 ||
                    egress_pkg_allowed(ep, n, v, &why))
                        continue;
                y = cJSON_GetObjectItemCaseSensitive(it, "yanked");
                if (y && !cJSON_IsFalse(y))
                        continue;
                snprintf(msg, sizeof(msg), "blocked by sandboxd package policy: %s %s", n, v);
                cJSON_DeleteItemFromObjectCaseSensitive(it, "yanked");
                cJSON_AddStringToObject(it, "yanked", msg);
                (*ret_refused)++;
        }
}

/* npm: refused versions move to policyRestrictions (npm-pick-manifest takes another, or fails with its
 * message: E403), their times and tags go, and "latest" becomes the newest allowed release. */
static int npm_filter(const struct egress_pkg_eco_policy *ep, const char *name, cJSON *root, size_t *ret_refused)
{
        cJSON *versions = cJSON_GetObjectItemCaseSensitive(root, "versions");
        cJSON *tags = cJSON_GetObjectItemCaseSensitive(root, "dist-tags");
        cJSON *time = cJSON_GetObjectItemCaseSensitive(root, "time"), *it, *next, *restr = NULL, *rv = NULL;
        struct growbuf msg = {0};
        const char *why, *best = NULL;
        bool latest_gone = false;

        if (!cJSON_IsObject(versions))
                return 0;
        for (it = versions->child; it; it = next) {
                next = it->next;
                if (egress_pkg_allowed(ep, name, it->string, &why))
                        continue;
                if (!restr) {
                        cJSON_DeleteItemFromObjectCaseSensitive(root, "policyRestrictions");
                        restr = cJSON_AddObjectToObject(root, "policyRestrictions");
                        rv = restr ? cJSON_AddObjectToObject(restr, "versions") : NULL;
                        if (!rv)
                                return -ENOMEM;
                        gb_add(&msg, "blocked by sandboxd package policy: ", 36);
                        gb_add(&msg, name, strlen(name));
                }
                if (msg.len < 400) {
                        gb_add(&msg, *ret_refused ? ", " : " ", *ret_refused ? 2 : 1);
                        gb_add(&msg, it->string, strlen(it->string));
                } else if (msg.len < 405) {
                        gb_add(&msg, ", ...", 5);
                }
                cJSON_AddItemToObject(rv, it->string, cJSON_DetachItemViaPointer(versions, it));
                (*ret_refused)++;
        }
        if (!restr)
                return 0;
        if (msg.oom || !cJSON_AddStringToObject(restr, "message", msg.p)) {
                free(msg.p);
                return -ENOMEM;
        }
        free(msg.p);
        for (it = cJSON_IsObject(time) ? time->child : NULL; it; it = next) {
                next = it->next;
                if (cJSON_GetObjectItemCaseSensitive(rv, it->string))
                        cJSON_Delete(cJSON_DetachItemViaPointer(time, it));
        }
        for (it = cJSON_IsObject(tags) ? tags->child : NULL; it; it = next) {
                const char *v = cJSON_GetStringValue(it);
                next = it->next;
                if (!v || !cJSON_GetObjectItemCaseSensitive(versions, v)) {
                        latest_gone |= strcmp(it->string, "latest") == 0;
                        cJSON_Delete(cJSON_DetachItemViaPointer(tags, it));
                }
        }
        if (!latest_gone)
                return 0;
        /* npm takes "latest" when it satisfies the range: the newest allowed release, else the newest allowed */
        for (int pre = 0; pre < 2 && !best; pre++)
                for (it = versions->child; it; it = it->next)
                        if ((pre || !strchr(it->string, '-')) &&
                            (!best || egress_pkg_version_cmp(it->string, best) > 0))
                                best = it->string;
        if (best && !cJSON_AddStringToObject(tags, "latest", best))
                return -ENOMEM;
        return 0;
}

int egress_pkg_filter_page(const struct egress_pkg_eco_policy *ep, enum egress_pkg_eco eco, const char *name, bool json,
                           const char *in, size_t len, char **ret, size_t *ret_len, size_t *ret_refused)
{
        cJSON *root;
        char *out;
        size_t refused = 0;
        int r = 0;

        if (len > EGRESS_PKG_PAGE_MAX)
                return -E2BIG;
        if (eco == EGRESS_PKG_PYPI && !json) {
                struct growbuf b = {0};
                filter_html(ep, in, len, &b, &refused);
                gb_add(&b, "", 0);
                if (b.oom) {
                        free(b.p);
                        return -ENOMEM;
                }
                *ret = b.p;
                *ret_len = b.len;
                *ret_refused = refused;
                return 0;
        }
        root = cJSON_ParseWithLength(in, len);
        if (!cJSON_IsObject(root)) {
                cJSON_Delete(root);
                return -EINVAL;
        }
        if (eco == EGRESS_PKG_PYPI)
                pypi_json_filter(ep, root, &refused);
        else
                r = npm_filter(ep, name, root, &refused);
        out = r == 0 ? cJSON_PrintUnformatted(root) : NULL;
        cJSON_Delete(root);
        if (!out)
                return r < 0 ? r : -ENOMEM;
        *ret = out;
        *ret_len = strlen(out);
        *ret_refused = refused;
        return 0;
}

int egress_pkg_eco_for_host(const struct egress_pkg_policy *pol, const char *host, int port)
{
        if (!pol)
                return -1;
        for (int k = 0; k < EGRESS_PKG_N; k++) {
                const struct egress_pkg_eco_policy *e = &pol->eco[k];
                if (!e->on)
                        continue;
                if (strcasecmp(e->host, host) == 0 && e->port == port)
                        return k;
                for (size_t i = 0; i < e->n_file_hosts; i++)
                        if (strcasecmp(e->file_hosts[i], host) == 0 && port == (e->https ? 443 : 80))
                                return k;
        }
        return -1;
}

/* ---- the file ---- */

static int url_parse(const char *url, struct egress_pkg_eco_policy *e, const char *what, struct sbx_error *err)
{
        const char *h, *slash, *colon;
        size_t hl, n = strlen(url);

        if (n >= sizeof(e->url))
                return sbx_error_set(err, -EINVAL, 0, "%s is longer than %d bytes", what, EGRESS_PKG_URL_MAX - 1);
        if (strncmp(url, "https://", 8) == 0)
                e->https = true;
        else if (strncmp(url, "http://", 7) != 0)
                return sbx_error_set(err, -EINVAL, 0, "%s must start with https:// or http://", what);
        h = url + (e->https ? 8 : 7);
        slash = strchr(h, '/');
        if (!slash)
                slash = h + strlen(h);
        colon = memchr(h, ':', (size_t)(slash - h));
        hl = (size_t)((colon ? colon : slash) - h);
        if (memchr(h, '@', (size_t)(slash - h)) || strpbrk(url, "?# \t\r\n") ||
            egress_host_normalize(h, hl, e->host) < 0)
                return sbx_error_set(err, -EINVAL, 0, "%s: cannot read the host", what);
        e->port = e->https ? 443 : 80;
        if (colon) {
                char *end;
                long p = strtol(colon + 1, &end, 10);
                if (end != slash || p < 1 || p > 65535)
                        return sbx_error_set(err, -EINVAL, 0, "%s: bad port", what);
                e->port = (int)p;
        }
        snprintf(e->prefix, sizeof(e->prefix), "%s", slash);
        n = strlen(e->prefix);
        while (n > 0 && e->prefix[n - 1] == '/')
                e->prefix[--n] = '\0';
        snprintf(e->url, sizeof(e->url), "%s", url);
        return 0;
}

static int rules_parse(enum egress_pkg_eco eco, const cJSON *a, struct egress_pkg_rule **ret, size_t *ret_n,
                       const char *what, struct sbx_error *err)
{
        const cJSON *it;
        size_t n = 0;

        if (!a)
                return 0;
        if (!cJSON_IsArray(a))
                return sbx_error_set(err, -EINVAL, 0, "%s must be an array of strings", what);
        if (cJSON_GetArraySize(a) > EGRESS_PKG_RULES_MAX)
                return sbx_error_set(err, -EINVAL, 0, "%s has more than %d rules", what, EGRESS_PKG_RULES_MAX);
        *ret = calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof(**ret));
        if (!*ret)
                return -ENOMEM;
        cJSON_ArrayForEach(it, a) {
                const char *s = cJSON_GetStringValue(it), *op;
                struct egress_pkg_rule *r = &(*ret)[n];
                char raw[EGRESS_PKG_NAME_MAX];
                size_t nl;

                if (!s)
                        return sbx_error_set(err, -EINVAL, 0, "%s must be an array of strings", what);
                while (*s == ' ')
                        s++;
                op = s + strcspn(s, "<>=!~ \t");
                nl = (size_t)(op - s);
                if (nl == 0 || nl >= sizeof(raw))
                        return sbx_error_set(err, -EINVAL, 0, "%s: \"%.64s\" names no package", what, s);
                for (size_t i = 0; i < nl; i++)
                        if (!glob_char_ok(s[i]))
                                return sbx_error_set(err, -EINVAL, 0,
                                                     "%s: \"%.64s\": a name is letters, digits, "
                                                     "- _ . ~ @ / and the glob's * ? [ ]",
                                                     what, s);
                memcpy(raw, s, nl);
                raw[nl] = '\0';
                egress_pkg_normalize(eco, raw, r->name);
                while (*op == ' ' || *op == '\t')
                        op++;
                if (strlen(op) >= sizeof(r->range) || !egress_pkg_range_ok(op))
                        return sbx_error_set(err, -EINVAL, 0,
                                             "%s: \"%.64s\": a range is clauses joined by commas, each one of == != "
                                             "< <= > >= ~= and a version",
                                             what, s);
                snprintf(r->range, sizeof(r->range), "%s", op);
                n++;
        }
        *ret_n = n;
        return 0;
}

static int eco_parse(enum egress_pkg_eco eco, const cJSON *o, struct egress_pkg_eco_policy *e, const char *where,
                     struct sbx_error *err)
{
        static const char *const url_key[] = {"index", "registry"}, *const eco_key[] = {"pypi", "npm"};
        char what[160];
        const cJSON *u, *fh, *it;
        int r;

        if (!o)
                return 0;
        snprintf(what, sizeof(what), "%s.%s", where, eco_key[eco]);
        if (!cJSON_IsObject(o))
                return sbx_error_set(err, -EINVAL, 0, "%s must be an object", what);
        cJSON_ArrayForEach(it, o) {
                if (strcmp(it->string, url_key[eco]) != 0 && strcmp(it->string, "allow") != 0 &&
                    strcmp(it->string, "deny") != 0 && strcmp(it->string, "file_hosts") != 0)
                        return sbx_error_set(err, -EINVAL, 0, "%s.%s: unknown key", what, it->string);
        }
        u = cJSON_GetObjectItemCaseSensitive(o, url_key[eco]);
        if (!cJSON_GetStringValue(u))
                return sbx_error_set(err, -EINVAL, 0, "%s.%s (a URL) is required", what, url_key[eco]);
        snprintf(what, sizeof(what), "%s.%s.%s", where, eco_key[eco], url_key[eco]);
        r = url_parse(u->valuestring, e, what, err);
        if (r < 0)
                return r;
        fh = cJSON_GetObjectItemCaseSensitive(o, "file_hosts");
        snprintf(what, sizeof(what), "%s.%s.file_hosts", where, eco_key[eco]);
        if (fh && (!cJSON_IsArray(fh) || cJSON_GetArraySize(fh) > EGRESS_PKG_FILE_HOSTS_MAX))
                return sbx_error_set(err, -EINVAL, 0, "%s must be an array of at most %d host names", what,
                                     EGRESS_PKG_FILE_HOSTS_MAX);
        cJSON_ArrayForEach(it, fh) {
                const char *s = cJSON_GetStringValue(it);
                if (!s || egress_host_normalize(s, strlen(s), e->file_hosts[e->n_file_hosts]) < 0)
                        return sbx_error_set(err, -EINVAL, 0, "%s: not a host name", what);
                e->n_file_hosts++;
        }
        snprintf(what, sizeof(what), "%s.%s.allow", where, eco_key[eco]);
        r = rules_parse(eco, cJSON_GetObjectItemCaseSensitive(o, "allow"), &e->allow, &e->n_allow, what, err);
        snprintf(what, sizeof(what), "%s.%s.deny", where, eco_key[eco]);
        if (r == 0)
                r = rules_parse(eco, cJSON_GetObjectItemCaseSensitive(o, "deny"), &e->deny, &e->n_deny, what, err);
        if (r == 0)
                e->on = true;
        return r;
}

static int policy_parse(const cJSON *o, struct egress_pkg_policy *pol, const char *where, struct sbx_error *err)
{
        const cJSON *it;
        int r;

        if (!cJSON_IsObject(o))
                return sbx_error_set(err, -EINVAL, 0, "%s must be an object", where);
        cJSON_ArrayForEach(it, o) {
                if (strcmp(it->string, "pypi") != 0 && strcmp(it->string, "npm") != 0)
                        return sbx_error_set(err, -EINVAL, 0, "%s.%s: unknown key (pypi, npm)", where, it->string);
        }
        r = eco_parse(EGRESS_PKG_PYPI, cJSON_GetObjectItemCaseSensitive(o, "pypi"), &pol->eco[EGRESS_PKG_PYPI], where,
                      err);
        if (r == 0)
                r = eco_parse(EGRESS_PKG_NPM, cJSON_GetObjectItemCaseSensitive(o, "npm"), &pol->eco[EGRESS_PKG_NPM],
                              where, err);
        return r;
}

int egress_pkg_parse(const char *json, struct egress_pkg_policies **ret, struct sbx_error *err)
{
        cJSON *root = cJSON_Parse(json);
        const cJSON *def, *users, *it;
        struct egress_pkg_policies *p = NULL;
        int r = 0;

        if (!cJSON_IsObject(root)) {
                r = sbx_error_set(err, -EINVAL, 0, "the package policy is not a JSON object");
                goto out;
        }
        cJSON_ArrayForEach(it, root) {
                if (strcmp(it->string, "default") != 0 && strcmp(it->string, "users") != 0) {
                        r = sbx_error_set(err, -EINVAL, 0, "%s: unknown key (default, users)", it->string);
                        goto out;
                }
        }
        p = calloc(1, sizeof(*p));
        if (!p) {
                r = -ENOMEM;
                goto out;
        }
        def = cJSON_GetObjectItemCaseSensitive(root, "default");
        if (def) {
                r = policy_parse(def, &p->def, "default", err);
                if (r < 0)
                        goto out;
                p->has_def = true;
        }
        users = cJSON_GetObjectItemCaseSensitive(root, "users");
        if (users && (!cJSON_IsObject(users) || cJSON_GetArraySize(users) > EGRESS_PKG_USERS_MAX)) {
                r = sbx_error_set(err, -EINVAL, 0, "users must be an object of at most %d users", EGRESS_PKG_USERS_MAX);
                goto out;
        }
        if (users) {
                size_t n = (size_t)cJSON_GetArraySize(users);
                p->users = calloc(n + 1, sizeof(*p->users));
                p->per_user = calloc(n + 1, sizeof(*p->per_user));
                if (!p->users || !p->per_user) {
                        r = -ENOMEM;
                        goto out;
                }
        }
        cJSON_ArrayForEach(it, users) {
                char where[96];
                if (strlen(it->string) == 0 || strlen(it->string) >= sizeof(p->users[0])) {
                        r = sbx_error_set(err, -EINVAL, 0, "users: a user name is 1-64 bytes");
                        goto out;
                }
                snprintf(where, sizeof(where), "users.%s", it->string);
                snprintf(p->users[p->n], sizeof(p->users[0]), "%s", it->string);
                p->n++; /* counted before the parse: a half-parsed entry is freed with the rest */
                r = policy_parse(it, &p->per_user[p->n - 1], where, err);
                if (r < 0)
                        goto out;
        }
        *ret = p;
        p = NULL;
out:
        egress_pkg_free(p);
        cJSON_Delete(root);
        return r;
}

int egress_pkg_load(const char *path, struct egress_pkg_policies **ret, struct sbx_error *err)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC), r;
        struct stat st;
        char *buf;
        ssize_t n;

        if (fd < 0)
                return sbx_error_set(err, -errno, 0, "%s: %s", path, strerror(errno));
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > EGRESS_PKG_FILE_MAX) {
                close(fd);
                return sbx_error_set(err, -EINVAL, 0, "%s: not a regular file of at most %d bytes", path,
                                     EGRESS_PKG_FILE_MAX);
        }
        buf = malloc((size_t)st.st_size + 1);
        if (!buf) {
                close(fd);
                return -ENOMEM;
        }
        n = read(fd, buf, (size_t)st.st_size);
        close(fd);
        if (n != st.st_size) {
                free(buf);
                return sbx_error_set(err, -EIO, 0, "%s: short read", path);
        }
        buf[n] = '\0';
        r = egress_pkg_parse(buf, ret, err);
        free(buf);
        if (r < 0)
                sbx_error_prefix(err, "%s", path);
        return r;
}

const struct egress_pkg_policy *egress_pkg_for_user(const struct egress_pkg_policies *p, const char *user)
{
        if (!p)
                return NULL;
        for (size_t i = 0; i < p->n; i++)
                if (strcmp(p->users[i], user) == 0)
                        return &p->per_user[i];
        return p->has_def ? &p->def : NULL;
}
