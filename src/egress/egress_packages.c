/* egress_packages.c — packages by policy at the egress proxy (issue 37
 * item 2; egress_pkg.h has the policy and its decisions, docs/security.md
 * "Packages by policy"). A CONNECT to a registry host of the user's policy
 * (after the allowlist, the narrowing and the secrets said yes) is
 * intercepted like a secret's host (egress_tls.c, with the session's CA);
 * each request's target then names a package (a PEP 503/691 page, a file,
 * an npm packument or tarball) that the policy allows or refuses. A refusal
 * is a 403 whose status text and body say "blocked by sandboxd package
 * policy: NAME" (pip prints the status text, npm the text and the body's
 * "error"), audited as package_blocked:NAME@VERSION. A plain http://
 * registry is judged the same on its absolute-form request. pip's request
 * for a package's index page refused whole is answered 200 with a type
 * naming the policy instead (pip warns of that at its default level, of a
 * 403 only at debug). The index page of a package that a rule with a
 * version range matches is filtered (egress_tls.c holds the response
 * whole, egress_pkg_filter_page drops the refused versions off the loop
 * thread: egress_filter.c).
 *
 * Threads and locks: loop thread only; the policy is read-only. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sandboxd/log.h"
#include "egress_internal.h"

bool egress_packages_decide(struct tunnel *t, const char *path, size_t path_len)
{
        const struct egress_pkg_policy *pol = egress_pkg_for_user(t->eg->pkg, t->s->user);
        int k = egress_pkg_eco_for_host(pol, t->host, t->port);

        if (k < 0)
                return true;
        t->pkg_eco = k;
        t->pkg_policy = &pol->eco[k];
        if (!t->is_connect)
                return egress_packages_check(t, path, path_len);
        t->intercept = true;
        return true;
}

/* Is the request (its head in t->arena) pip's? Only to choose how a refusal reads. */
static bool from_pip(const struct tunnel *t)
{
        for (int i = 0; i < t->n_hdrs; i++) {
                const struct hdr *h = &t->hdrs[i];
                if (h->name_len == 10 && strncasecmp(t->arena + h->name, "User-Agent", 10) == 0)
                        return h->value_len >= 4 && strncmp(t->arena + h->value, "pip/", 4) == 0;
        }
        return false;
}

bool egress_packages_check(struct tunnel *t, const char *path, size_t path_len)
{
        const struct egress_pkg_eco_policy *ep = t->pkg_policy;
        char name[EGRESS_PKG_NAME_MAX], version[EGRESS_PKG_VERSION_MAX], reason[64], msg[400], body[600];
        const char *why = NULL;
        int r;

        if (t->pkg_eco < 0 || !ep)
                return true;
        r = egress_pkg_from_path(ep, (enum egress_pkg_eco)t->pkg_eco, path, path_len, name, version);
        if (r < 0) {
                egress_tunnel_refuse(t, 400, "bad_request", "a registry path that names no package readably");
                return false;
        }
        if (r == 0 || egress_pkg_allowed(ep, name, version, &why))
                return true;
        /* the name and version are of [A-Za-z0-9._~@/+!-] (egress_pkg_from_path): safe in a status line and JSON */
        snprintf(msg, sizeof(msg), "blocked by sandboxd package policy: %s%s%s", name, version[0] ? " " : "", version);
        snprintf(reason, sizeof(reason), "package_blocked:%s%s%s", name, version[0] ? "@" : "", version);
        snprintf(body, sizeof(body), "{\"error\":\"%s\",\"package\":\"%s\",\"version\":\"%s\",\"rule\":\"%s\"}\n", msg,
                 name, version, why);
        log_ctx(LOG_LEVEL_INFO, t->s->user, t->s->session, NULL, "egress: package %s%s%s refused (%s) on %s", name,
                version[0] ? " " : "", version, why, t->host);
        if (t->pkg_eco == EGRESS_PKG_PYPI && !version[0] && from_pip(t) &&
            egress_pkg_index_of(ep, EGRESS_PKG_PYPI, path, path_len, name)) {
                /* pip logs an index page's 4xx at debug level only, but warns at its default level of a page of
                 * another type, naming the type: the policy's message goes there (nothing is cached: no
                 * validator, no max-age) */
                char ctype[sizeof(msg) + 64];
                snprintf(ctype, sizeof(ctype), "application/x.sandboxd-blocked; reason=\"%s\"", msg);
                egress_tunnel_refuse_body(t, 200, "OK", reason, ctype, body);
                return false;
        }
        egress_tunnel_refuse_body(t, 403, msg, reason, "application/json", body);
        return false;
}

bool egress_packages_filter_wanted(struct tunnel *t, const char *path, size_t path_len,
                                   char ret_name[EGRESS_PKG_NAME_MAX])
{
        const struct egress_pkg_eco_policy *ep = t->pkg_policy;
        char name[EGRESS_PKG_NAME_MAX];

        if (t->pkg_eco < 0 || !ep || !egress_pkg_index_of(ep, (enum egress_pkg_eco)t->pkg_eco, path, path_len, name) ||
            !egress_pkg_has_ranges(ep, name))
                return false;
        memcpy(ret_name, name, sizeof(name));
        return true;
}

const struct egress_pkg_policy *egress_packages_for(struct egress *eg, const char *user)
{
        return eg ? egress_pkg_for_user(eg->pkg, user) : NULL;
}
