/* Unit tests of egress_pkg (issue 37 item 2): the policy file, name
 * normalization and globs, version order and ranges, which package a
 * registry path is for, and the decision over allow and deny lists. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "sandboxd/egress_pkg.h"

static struct egress_pkg_policies *parse_ok(const char *json)
{
        struct egress_pkg_policies *p = NULL;
        struct sbx_error err = {0};
        cr_assert_eq(egress_pkg_parse(json, &p, &err), 0, "%s: %s", json, err.msg);
        return p;
}

static bool parse_fails(const char *json, const char *needle)
{
        struct egress_pkg_policies *p = NULL;
        struct sbx_error err = {0};
        int r = egress_pkg_parse(json, &p, &err);
        egress_pkg_free(p);
        if (r == 0)
                return false;
        cr_assert(strstr(err.msg, needle), "'%s' not in '%s'", needle, err.msg);
        return true;
}

Test(egress_pkg, names_normalize_per_ecosystem)
{
        char n[EGRESS_PKG_NAME_MAX];
        egress_pkg_normalize(EGRESS_PKG_PYPI, "Zope.Interface__x-_.Y", n);
        cr_assert_str_eq(n, "zope-interface-x-y");
        egress_pkg_normalize(EGRESS_PKG_NPM, "@Scope/Left_Pad.js", n);
        cr_assert_str_eq(n, "@scope/left_pad.js");
}

Test(egress_pkg, versions_order_and_ranges)
{
        cr_assert_lt(egress_pkg_version_cmp("1.9", "1.10"), 0);
        cr_assert_eq(egress_pkg_version_cmp("1.0", "1.0.0"), 0);
        cr_assert_lt(egress_pkg_version_cmp("1.0a1", "1.0"), 0);
        cr_assert_lt(egress_pkg_version_cmp("1.0.0-rc.1", "1.0.0"), 0);
        cr_assert_gt(egress_pkg_version_cmp("1.0.post1", "1.0"), 0);
        cr_assert_lt(egress_pkg_version_cmp("1.0.dev1", "1.0"), 0);
        cr_assert_gt(egress_pkg_version_cmp("2.0.0", "1.99.99"), 0);

        cr_assert(egress_pkg_version_in("", "0.1"));
        cr_assert(egress_pkg_version_in(">=2.0,<3", "2.5.1"));
        cr_assert_not(egress_pkg_version_in(">=2.0,<3", "3.0"));
        cr_assert_not(egress_pkg_version_in(">=2.0, <3", "1.9"));
        cr_assert(egress_pkg_version_in("==1.2.*", "1.2.7"));
        cr_assert(egress_pkg_version_in("==1.2.*", "1.2"));
        cr_assert_not(egress_pkg_version_in("==1.2.*", "1.20"));
        cr_assert(egress_pkg_version_in("!=1.2.*", "1.3"));
        cr_assert(egress_pkg_version_in("~=1.4.2", "1.4.9"));
        cr_assert_not(egress_pkg_version_in("~=1.4.2", "1.5.0"));
        cr_assert_not(egress_pkg_version_in("~=1.4.2", "1.4.1"));
        cr_assert(egress_pkg_version_in("== 2.0", "2.0.0"));
        cr_assert(egress_pkg_version_in("<=2.0", "2.0"));
        cr_assert(egress_pkg_version_in(">1", "1.0.1"));
        cr_assert(egress_pkg_version_in("!=1.0", "1.1"));

        const char *good[] = {"", ">=1", "<2.0,>=1.0", "==1.2.*", "~=1.4.2", "== 2", "===1.0-foo"};
        const char *bad[] = {"1.0", ">>1", "=>1", ">=", ">=1,", "<1;rm", "^1.2", ">=1 || <0"};
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
                cr_assert(egress_pkg_range_ok(good[i]), "'%s'", good[i]);
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                cr_assert_not(egress_pkg_range_ok(bad[i]), "'%s'", bad[i]);
}

static const char policy[] =
        "{\"default\": {\"pypi\": {\"index\": \"https://PyPI.test:8443/simple/\", \"file_hosts\": [\"files.test\"],"
        "                         \"deny\": [\"evil-*\", \"Requests >=2.32\", \"bad_pkg\"]},"
        "               \"npm\": {\"registry\": \"https://npm.test/\", \"allow\": [\"left-pad\", \"@ok/*\", "
        "\"lodash <5\"], \"deny\": [\"left-pad ==1.3.0\"]}},"
        " \"users\": {\"bob\": {\"npm\": {\"registry\": \"http://verdaccio.test:4873/npm\"}}}}";

Test(egress_pkg, the_policy_file_per_user_with_a_default)
{
        struct egress_pkg_policies *p = parse_ok(policy);
        const struct egress_pkg_policy *a = egress_pkg_for_user(p, "alice"), *b = egress_pkg_for_user(p, "bob");
        const struct egress_pkg_eco_policy *py = &a->eco[EGRESS_PKG_PYPI];

        cr_assert(py->on);
        cr_assert(py->https);
        cr_assert_str_eq(py->host, "pypi.test");
        cr_assert_eq(py->port, 8443);
        cr_assert_str_eq(py->prefix, "/simple");
        cr_assert_str_eq(py->url, "https://PyPI.test:8443/simple/");
        cr_assert_eq(py->n_deny, 3);
        cr_assert_str_eq(py->deny[1].name, "requests");
        cr_assert_str_eq(py->deny[1].range, ">=2.32");
        cr_assert_str_eq(py->deny[2].name, "bad-pkg");
        cr_assert_eq(egress_pkg_eco_for_host(a, "pypi.test", 8443), EGRESS_PKG_PYPI);
        cr_assert_eq(egress_pkg_eco_for_host(a, "pypi.test", 443), -1, "the index's port only");
        cr_assert_eq(egress_pkg_eco_for_host(a, "files.test", 443), EGRESS_PKG_PYPI);
        cr_assert_eq(egress_pkg_eco_for_host(a, "npm.test", 443), EGRESS_PKG_NPM);
        cr_assert_eq(egress_pkg_eco_for_host(a, "other.test", 443), -1);

        /* bob's entry replaces the default whole: no PyPI policy, his own registry */
        cr_assert_not(b->eco[EGRESS_PKG_PYPI].on);
        cr_assert(b->eco[EGRESS_PKG_NPM].on);
        cr_assert_not(b->eco[EGRESS_PKG_NPM].https);
        cr_assert_eq(b->eco[EGRESS_PKG_NPM].port, 4873);
        cr_assert_str_eq(b->eco[EGRESS_PKG_NPM].prefix, "/npm");
        cr_assert_null(egress_pkg_for_user(NULL, "alice"));
        egress_pkg_free(p);

        p = parse_ok("{\"users\": {\"carol\": {}}}");
        cr_assert_null(egress_pkg_for_user(p, "alice"), "no default: no policy");
        cr_assert_not_null(egress_pkg_for_user(p, "carol"));
        egress_pkg_free(p);

        cr_assert(parse_fails("[]", "not a JSON object"));
        cr_assert(parse_fails("{\"defaults\": {}}", "unknown key"));
        cr_assert(parse_fails("{\"default\": {\"cargo\": {}}}", "default.cargo: unknown key"));
        cr_assert(parse_fails("{\"default\": {\"pypi\": {}}}", "default.pypi.index (a URL) is required"));
        cr_assert(parse_fails("{\"default\": {\"pypi\": {\"index\": \"ftp://x/\"}}}", "https://"));
        cr_assert(parse_fails("{\"default\": {\"pypi\": {\"index\": \"https://u:p@x/\"}}}", "cannot read the host"));
        cr_assert(parse_fails("{\"default\": {\"pypi\": {\"index\": \"https://x:99999/\"}}}", "bad port"));
        cr_assert(parse_fails("{\"default\": {\"npm\": {\"registry\": \"https://x/\", \"deny\": [\"a;b\"]}}}",
                              "default.npm.deny"));
        cr_assert(parse_fails("{\"default\": {\"npm\": {\"registry\": \"https://x/\", \"deny\": [\"a ^1\"]}}}",
                              "a range is"));
        cr_assert(parse_fails("{\"users\": {\"bob\": {\"npm\": {\"registry\": \"https://x/\", \"allow\": \"a\"}}}}",
                              "users.bob.npm.allow must be an array"));
        cr_assert(parse_fails("{\"default\": {\"pypi\": {\"index\": \"https://x/\", \"file_hosts\": [\"a b\"]}}}",
                              "not a host name"));
}

static int from(const struct egress_pkg_eco_policy *ep, enum egress_pkg_eco eco, const char *path, char *name,
                char *version)
{
        return egress_pkg_from_path(ep, eco, path, strlen(path), name, version);
}

Test(egress_pkg, which_package_a_path_is_for)
{
        struct egress_pkg_policies *p = parse_ok(policy);
        const struct egress_pkg_policy *a = egress_pkg_for_user(p, "alice");
        const struct egress_pkg_eco_policy *py = &a->eco[EGRESS_PKG_PYPI], *npm = &a->eco[EGRESS_PKG_NPM];
        char n[EGRESS_PKG_NAME_MAX], v[EGRESS_PKG_VERSION_MAX];

        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "/simple/", n, v), 0, "the index root");
        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "/simple/Evil_Thing/", n, v), 1);
        cr_assert_str_eq(n, "evil-thing");
        cr_assert_str_eq(v, "");
        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "/simple/evil%2Dthing?format=json", n, v), 1);
        cr_assert_str_eq(n, "evil-thing");
        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "/packages/ab/cd/Requests-2.32.3-py3-none-any.whl#sha256=00", n, v), 1);
        cr_assert_str_eq(n, "requests");
        cr_assert_str_eq(v, "2.32.3");
        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "/f/requests-2.31.0-py3-none-any.whl.metadata", n, v), 1);
        cr_assert_str_eq(v, "2.31.0");
        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "/f/zope.interface-6.1.tar.gz", n, v), 1);
        cr_assert_str_eq(n, "zope-interface");
        cr_assert_str_eq(v, "6.1");
        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "/f/python-dateutil-2.9.0.zip", n, v), 1);
        cr_assert_str_eq(n, "python-dateutil");
        cr_assert_str_eq(v, "2.9.0");
        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "/pypi/Requests/2.0/json", n, v), 1);
        cr_assert_str_eq(n, "requests");
        cr_assert_str_eq(v, "2.0");
        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "/pypi/requests/json", n, v), 1);
        cr_assert_str_eq(v, "");
        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "/static/style.css", n, v), 0);
        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "/simple/a%2", n, v), -1, "a cut escape");
        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "/simple/a%00b/", n, v), -1, "a NUL");
        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "/simple/a%22b/", n, v), -1, "a quote");
        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "/simple/../x/", n, v), -1);
        cr_assert_eq(from(py, EGRESS_PKG_PYPI, "http://pypi.test/simple/x/", n, v), -1, "not origin form");

        cr_assert_eq(from(npm, EGRESS_PKG_NPM, "/left-pad", n, v), 1);
        cr_assert_str_eq(n, "left-pad");
        cr_assert_str_eq(v, "");
        cr_assert_eq(from(npm, EGRESS_PKG_NPM, "/left-pad/-/left-pad-1.3.0.tgz", n, v), 1);
        cr_assert_str_eq(v, "1.3.0");
        cr_assert_eq(from(npm, EGRESS_PKG_NPM, "/@ok%2fthing", n, v), 1);
        cr_assert_str_eq(n, "@ok/thing");
        cr_assert_eq(from(npm, EGRESS_PKG_NPM, "/@ok/thing/-/thing-2.0.0-beta.1.tgz", n, v), 1);
        cr_assert_str_eq(n, "@ok/thing");
        cr_assert_str_eq(v, "2.0.0-beta.1");
        cr_assert_eq(from(npm, EGRESS_PKG_NPM, "/lodash/4.17.21", n, v), 1);
        cr_assert_str_eq(v, "4.17.21");
        cr_assert_eq(from(npm, EGRESS_PKG_NPM, "/lodash/latest", n, v), 1);
        cr_assert_str_eq(v, "", "a dist-tag names no version");
        cr_assert_eq(from(npm, EGRESS_PKG_NPM, "/-/npm/v1/security/advisories/bulk", n, v), 0);
        cr_assert_eq(from(npm, EGRESS_PKG_NPM, "/", n, v), 0);
        cr_assert_eq(from(npm, EGRESS_PKG_NPM, "/@scopeonly", n, v), -1);
        cr_assert_eq(from(npm, EGRESS_PKG_NPM, "/okpkg/-/badpkg-1.0.0.tgz", n, v), -1,
                     "a tarball under another package's name");
        egress_pkg_free(p);
}

Test(egress_pkg, allow_and_deny_with_versions)
{
        struct egress_pkg_policies *p = parse_ok(policy);
        const struct egress_pkg_policy *a = egress_pkg_for_user(p, "alice");
        const struct egress_pkg_eco_policy *py = &a->eco[EGRESS_PKG_PYPI], *npm = &a->eco[EGRESS_PKG_NPM];
        const char *why = NULL;

        /* PyPI: no allow list, so everything not denied */
        cr_assert(egress_pkg_allowed(py, "numpy", "", &why));
        cr_assert_not(egress_pkg_allowed(py, "evil-thing", "", &why));
        cr_assert_str_eq(why, "deny");
        cr_assert_not(egress_pkg_allowed(py, "bad-pkg", "1.0", &why), "normalized in the rule too");
        cr_assert(egress_pkg_allowed(py, "requests", "", &why), "a version rule leaves the metadata readable");
        cr_assert(egress_pkg_allowed(py, "requests", "2.31.0", &why));
        cr_assert_not(egress_pkg_allowed(py, "requests", "2.32.3", &why));
        cr_assert(egress_pkg_allowed(py, "evil", "", &why), "evil-* needs the dash");

        /* npm: an allow list */
        cr_assert(egress_pkg_allowed(npm, "left-pad", "", &why));
        cr_assert(egress_pkg_allowed(npm, "left-pad", "1.2.0", &why));
        cr_assert_not(egress_pkg_allowed(npm, "left-pad", "1.3.0", &why), "a denied version of an allowed package");
        cr_assert(egress_pkg_allowed(npm, "@ok/thing", "9.9.9", &why));
        cr_assert(egress_pkg_allowed(npm, "lodash", "", &why));
        cr_assert(egress_pkg_allowed(npm, "lodash", "4.17.21", &why));
        cr_assert_not(egress_pkg_allowed(npm, "lodash", "5.0.0", &why), "outside the allow rule's range");
        cr_assert_str_eq(why, "not on the allow list");
        cr_assert_not(egress_pkg_allowed(npm, "express", "", &why));
        cr_assert_not(egress_pkg_allowed(npm, "@other/thing", "", &why));
        egress_pkg_free(p);
}

Test(egress_pkg, index_pages_lose_the_refused_versions)
{
        struct egress_pkg_policies *p = parse_ok(policy);
        const struct egress_pkg_policy *a = egress_pkg_for_user(p, "alice");
        const struct egress_pkg_eco_policy *py = &a->eco[EGRESS_PKG_PYPI], *npm = &a->eco[EGRESS_PKG_NPM];
        static const char html[] =
                "<html><body>\n"
                "<a href=\"../../packages/requests-2.31.0-py3-none-any.whl#sha256=aa\">requests-2.31.0-py3-none-any.whl"
                "</a><br/>\n"
                "<A data-dist-info-metadata=\"sha256=bb\" HREF='/p/requests-2.32.3-py3-none-any.whl'>x</A><br/>\n"
                "<a href=\"/p/requests-2.32.3.tar.gz\">requests-2.32.3.tar.gz</a>\n"
                "<a href=\"/p/requests-2.30%2B1.tar.gz\">local</a>\n"
                "<a name=\"x\">no href</a></body></html>\n";
        static const char json[] =
                "{\"meta\":{\"api-version\":\"1.1\"},\"name\":\"requests\",\"versions\":[\"2.31.0\","
                "\"2.32.3\"],\"files\":[{\"filename\":\"requests-2.31.0.tar.gz\"},"
                "{\"filename\":\"requests-2.32.3-py3-none-any.whl\"}]}";
        static const char pack[] =
                "{\"name\":\"left-pad\",\"dist-tags\":{\"latest\":\"1.3.0\",\"beta\":\"1.3.0\","
                "\"old\":\"1.1.0\"},\"versions\":{\"1.1.0\":{},\"1.2.0\":{},\"1.2.1-rc.1\":{},"
                "\"1.3.0\":{}},\"time\":{\"created\":\"x\",\"1.3.0\":\"y\",\"1.2.0\":\"z\"}}";
        char name[EGRESS_PKG_NAME_MAX], *out = NULL;
        size_t out_len = 0, dropped = 0;
        cJSON *j;

        cr_assert(egress_pkg_index_of(py, EGRESS_PKG_PYPI, "/simple/Requests/", strlen("/simple/Requests/"), name));
        cr_assert_str_eq(name, "requests");
        cr_assert_not(egress_pkg_index_of(py, EGRESS_PKG_PYPI, "/simple/", strlen("/simple/"), name));
        cr_assert_not(egress_pkg_index_of(py, EGRESS_PKG_PYPI, "/packages/requests-2.31.0.tar.gz",
                                          strlen("/packages/requests-2.31.0.tar.gz"), name));
        cr_assert(egress_pkg_index_of(npm, EGRESS_PKG_NPM, "/@ok%2fthing", strlen("/@ok%2fthing"), name));
        cr_assert_str_eq(name, "@ok/thing");
        cr_assert(egress_pkg_index_of(npm, EGRESS_PKG_NPM, "/left-pad", strlen("/left-pad"), name));
        cr_assert_not(egress_pkg_index_of(npm, EGRESS_PKG_NPM, "/left-pad/1.2.0", strlen("/left-pad/1.2.0"), name));
        cr_assert_not(egress_pkg_index_of(npm, EGRESS_PKG_NPM, "/left-pad/-/left-pad-1.2.0.tgz",
                                          strlen("/left-pad/-/left-pad-1.2.0.tgz"), name));
        cr_assert(egress_pkg_has_ranges(py, "requests"));
        cr_assert_not(egress_pkg_has_ranges(py, "numpy"), "nothing to filter: its page streams through");
        cr_assert(egress_pkg_has_ranges(npm, "lodash"), "an allow rule's range counts too");

        /* PEP 503: the refused files are yanked with the policy's message, the rest stays byte for byte */
        cr_assert_eq(egress_pkg_filter_page(py, EGRESS_PKG_PYPI, "requests", false, html, strlen(html), &out, &out_len,
                                            &dropped),
                     0);
        cr_assert_eq(out_len, strlen(out));
        cr_assert_eq(dropped, 2, "%s", out);
        cr_assert_str_eq(out,
                         "<html><body>\n"
                         "<a href=\"../../packages/requests-2.31.0-py3-none-any.whl#sha256=aa\">requests-2.31.0-py3-"
                         "none-any.whl</a><br/>\n"
                         "<A data-yanked=\"blocked by sandboxd package policy: requests 2.32.3\" "
                         "data-dist-info-metadata=\"sha256=bb\" HREF='/p/requests-2.32.3-py3-none-any.whl'>x</A><br/>\n"
                         "<a data-yanked=\"blocked by sandboxd package policy: requests 2.32.3\" "
                         "href=\"/p/requests-2.32.3.tar.gz\">requests-2.32.3.tar.gz</a>\n"
                         "<a href=\"/p/requests-2.30%2B1.tar.gz\">local</a>\n"
                         "<a name=\"x\">no href</a></body></html>\n");
        free(out);

        /* PEP 691 */
        cr_assert_eq(egress_pkg_filter_page(py, EGRESS_PKG_PYPI, "requests", true, json, strlen(json), &out, &out_len,
                                            &dropped),
                     0);
        cr_assert_eq(dropped, 1);
        cr_assert_str_eq(out,
                         "{\"meta\":{\"api-version\":\"1.1\"},\"name\":\"requests\",\"versions\":[\"2.31.0\","
                         "\"2.32.3\"],\"files\":[{\"filename\":\"requests-2.31.0.tar.gz\"},"
                         "{\"filename\":\"requests-2.32.3-py3-none-any.whl\",\"yanked\":\"blocked by sandboxd "
                         "package policy: requests 2.32.3\"}]}");
        free(out);

        /* npm: the denied version goes to policyRestrictions, its time and tags go; latest is the newest allowed
         * release */
        cr_assert_eq(egress_pkg_filter_page(npm, EGRESS_PKG_NPM, "left-pad", true, pack, strlen(pack), &out, &out_len,
                                            &dropped),
                     0);
        j = cJSON_Parse(out);
        cr_assert_not_null(j, "%s", out);
        cr_assert_eq(dropped, 1);
        cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "versions"), "1.3.0"), "%s", out);
        cr_assert_not_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "versions"), "1.2.1-rc.1"), "%s", out);
        cr_assert_not_null(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "policyRestrictions"),
                                                                   "versions"),
                                               "1.3.0"),
                           "%s", out);
        cr_assert_str_eq(cJSON_GetStringValue(
                                 cJSON_GetObjectItem(cJSON_GetObjectItem(j, "policyRestrictions"), "message")),
                         "blocked by sandboxd package policy: left-pad 1.3.0");
        cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "time"), "1.3.0"), "%s", out);
        cr_assert_not_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "time"), "1.2.0"), "%s", out);
        cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "dist-tags"), "beta"), "%s", out);
        cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "dist-tags"), "latest")),
                         "1.2.0", "%s", out);
        cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "dist-tags"), "old")),
                         "1.1.0");
        cJSON_Delete(j);
        free(out);

        cr_assert_eq(egress_pkg_filter_page(npm, EGRESS_PKG_NPM, "left-pad", true, "[1", 2, &out, &out_len, &dropped),
                     -EINVAL);
        egress_pkg_free(p);
}
