/* sessenv.c — the environment every execution and cell of a session starts
 * with (sessenv.h). No state, no threads. */
#include "sandboxd/sessenv.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/egress.h"
#include "sandboxd/egress_pkg.h"
#include "sandboxd/hub.h"
#include "sandboxd/hub_dir.h"
#include "sandboxd/log.h"
#include "sandboxd/runner_proto.h"
#include "sandboxd/secrets.h"
#include "sandboxd/secrets_ca.h"
#include "sandboxd/session.h"
#include "sandboxd/store.h"

/* Append NAME=value unless v names NAME already (the request's own value wins). */
static int add(struct sessenv_vec *v, const char *name, const char *value, struct sbx_error *err)
{
        size_t nl = strlen(name);

        for (size_t i = 0; i < v->n; i++)
                if (strncmp(v->env[i], name, nl) == 0 && v->env[i][nl] == '=')
                        return 0;
        if (v->n >= v->max)
                return sbx_error_set(err, -E2BIG, 0, "params.env and the session's environment exceed %zu entries",
                                     v->max);
        if (asprintf(&v->buf[v->n], "%s=%s", name, value) < 0) {
                v->buf[v->n] = NULL;
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        v->env[v->n] = v->buf[v->n];
        v->n++;
        return 0;
}

/* A session with a secret attached trusts its own CA (secrets_ca.h): the
 * bundle goes into its runner directory (root's, mounted read-only, so
 * nothing in it was planted by the container) and the usual variables name
 * it. The caller acquired the session, so the directory exists (the hub
 * makes it with the container); without one there is no runner, no egress
 * proxy to intercept, and no bundle. */
static int add_ca(const struct sessenv *c, const char *user, const char *session, struct sessenv_vec *v,
                  struct sbx_error *err)
{
        static const char *const vars[] = {"SSL_CERT_FILE",  "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
                                           "CURL_CA_BUNDLE", "PIP_CERT",           "NPM_CONFIG_CAFILE"};
        char dir[SBX_PATH_MAX];
        _cleanup_free_ char *cert = NULL, *bundle = NULL;
        size_t len = 0;
        int r;

        if (!c->secrets)
                return 0;
        if (hub_dir(c->hub, user, session, dir) < 0 || dir[0] != '/')
                return 0;
        if (!hub_dir_has(dir, RUNNER_DIR_CA_BUNDLE)) {
                r = secrets_ca_get(c->secrets, c->store, user, session, &cert, NULL);
                if (r == 0)
                        r = secrets_ca_bundle(cert, &bundle, &len);
                if (r == 0)
                        r = hub_dir_put_file(dir, RUNNER_DIR_CA_BUNDLE, bundle, len, false);
                if (r < 0 && r != -EEXIST) {
                        log_ctx(LOG_LEVEL_WARN, user, session, NULL, "cannot write the session's CA bundle: %s",
                                strerror(-r));
                        return 0;
                }
        }
        for (size_t i = 0; i < ELEMENTSOF(vars); i++) {
                r = add(v, vars[i], RP_SOCKET_DIR "/" RUNNER_DIR_CA_BUNDLE, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

int sessenv_add(const struct sessenv *c, const char *user, const char *session, struct sessenv_vec *v,
                struct sbx_error *err)
{
        struct store_session_options o = {0};
        _cleanup_free_ struct store_session_secret *att = NULL;
        size_t n_att = 0;
        const struct egress_pkg_policy *pkg;
        cJSON *obj = NULL, *it;
        int r = 0;

        if (session_options_get(c->sessions, user, session, &o) == 0 && o.env_json)
                obj = cJSON_Parse(o.env_json);
        store_session_options_done(&o);
        cJSON_ArrayForEach(it, obj) {
                if (!cJSON_IsString(it) || !it->string)
                        continue;
                r = add(v, it->string, it->valuestring, err);
                if (r < 0)
                        break;
        }
        cJSON_Delete(obj);
        /* attached secrets (issue 37): their placeholders, never their values */
        if (r == 0 && (r = store_session_secret_list(c->store, user, session, &att, &n_att)) < 0)
                r = sbx_error_set(err, r, 0, "cannot read the session's secrets: %s", strerror(-r));
        for (size_t i = 0; r == 0 && i < n_att; i++)
                r = add(v, att[i].name, att[i].placeholder, err);
        /* the package policy (issue 37 item 2): pip and npm pointed at the operator's index and registry,
         * which the proxy intercepts with the session's CA like a secret's host */
        pkg = egress_packages_for(c->egress, user);
        if (r == 0 && pkg && pkg->eco[EGRESS_PKG_PYPI].on)
                r = add(v, "PIP_INDEX_URL", pkg->eco[EGRESS_PKG_PYPI].url, err);
        if (r == 0 && pkg && pkg->eco[EGRESS_PKG_NPM].on)
                r = add(v, "npm_config_registry", pkg->eco[EGRESS_PKG_NPM].url, err);
        if (r == 0 && (n_att > 0 || (pkg && ((pkg->eco[EGRESS_PKG_PYPI].on && pkg->eco[EGRESS_PKG_PYPI].https) ||
                                             (pkg->eco[EGRESS_PKG_NPM].on && pkg->eco[EGRESS_PKG_NPM].https)))))
                r = add_ca(c, user, session, v, err);
        return r;
}
