/* sessenv.c — the environment every execution and cell of a session starts
 * with (sessenv.h). No state, no threads. */
#include "sandboxd/sessenv.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
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

/* What a session's environment is made of, read in one pass before any of
 * it is appended (gather), so that composing it (compose) reads nothing. */
struct parts {
        cJSON *defaults;                  /* create_session's params.env, or NULL */
        struct store_session_secret *att; /* the attached secrets (malloc'd) */
        size_t n_att;
        const char *pip_index, *npm_registry; /* the package policy's, or NULL */
        bool ca;                              /* the CA bundle is in the runner directory */
};

static void parts_done(struct parts *p)
{
        cJSON_Delete(p->defaults);
        free(p->att);
}

/* A session with a secret attached trusts its own CA (secrets_ca.h): the
 * bundle goes into its runner directory (root's, mounted read-only, so
 * nothing in it was planted by the container) and the usual variables name
 * it. The caller acquired the session, so the directory exists (the hub
 * makes it with the container); without one there is no runner, no egress
 * proxy to intercept, and no bundle. True when the bundle is there. */
static bool ca_bundle(const struct sessenv *c, const char *user, const char *session)
{
        char dir[SBX_PATH_MAX];
        _cleanup_free_ char *cert = NULL, *bundle = NULL;
        size_t len = 0;
        int r;

        if (!c->secrets || hub_dir(c->hub, user, session, dir) < 0 || dir[0] != '/')
                return false;
        if (hub_dir_has(dir, RUNNER_DIR_CA_BUNDLE))
                return true;
        r = secrets_ca_get(c->secrets, c->store, user, session, &cert, NULL);
        if (r == 0)
                r = secrets_ca_bundle(cert, &bundle, &len);
        if (r == 0)
                r = hub_dir_put_file(dir, RUNNER_DIR_CA_BUNDLE, bundle, len, false);
        if (r < 0 && r != -EEXIST) {
                log_ctx(LOG_LEVEL_WARN, user, session, NULL, "cannot write the session's CA bundle: %s", strerror(-r));
                return false;
        }
        return true;
}

static int gather(const struct sessenv *c, const char *user, const char *session, struct parts *p,
                  struct sbx_error *err)
{
        /* the package policy (issue 37 item 2): pip and npm pointed at the operator's index and registry,
         * which the proxy intercepts with the session's CA like a secret's host */
        const struct egress_pkg_policy *pkg = egress_packages_for(c->egress, user);
        const struct egress_pkg_eco_policy *pypi = pkg ? &pkg->eco[EGRESS_PKG_PYPI] : NULL;
        const struct egress_pkg_eco_policy *npm = pkg ? &pkg->eco[EGRESS_PKG_NPM] : NULL;
        struct store_session_options o = {0};
        int r;

        p->pip_index = pypi && pypi->on ? pypi->url : NULL;
        p->npm_registry = npm && npm->on ? npm->url : NULL;
        if (store_session_options_get(c->store, user, session, &o) == 0 && o.env_json)
                p->defaults = cJSON_Parse(o.env_json);
        store_session_options_done(&o);
        /* attached secrets (issue 37): their placeholders, never their values */
        r = store_session_secret_list(c->store, user, session, &p->att, &p->n_att);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot read the session's secrets: %s", strerror(-r));
        if (p->n_att > 0 || (pypi && pypi->on && pypi->https) || (npm && npm->on && npm->https))
                p->ca = ca_bundle(c, user, session);
        return 0;
}

static int compose(const struct parts *p, struct sessenv_vec *v, struct sbx_error *err)
{
        static const char *const ca_vars[] = {"SSL_CERT_FILE",  "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
                                              "CURL_CA_BUNDLE", "PIP_CERT",           "NPM_CONFIG_CAFILE"};
        const cJSON *it;
        int r = 0;

        cJSON_ArrayForEach(it, p->defaults) {
                if (cJSON_IsString(it) && it->string && (r = add(v, it->string, it->valuestring, err)) < 0)
                        return r;
        }
        for (size_t i = 0; i < p->n_att; i++)
                if ((r = add(v, p->att[i].name, p->att[i].placeholder, err)) < 0)
                        return r;
        if (p->pip_index && (r = add(v, "PIP_INDEX_URL", p->pip_index, err)) < 0)
                return r;
        if (p->npm_registry && (r = add(v, "npm_config_registry", p->npm_registry, err)) < 0)
                return r;
        for (size_t i = 0; p->ca && i < ELEMENTSOF(ca_vars); i++)
                if ((r = add(v, ca_vars[i], RP_SOCKET_DIR "/" RUNNER_DIR_CA_BUNDLE, err)) < 0)
                        return r;
        return 0;
}

int sessenv_add(const struct sessenv *c, const char *user, const char *session, struct sessenv_vec *v,
                struct sbx_error *err)
{
        struct parts p = {0};
        int r = gather(c, user, session, &p, err);

        if (r == 0)
                r = compose(&p, v, err);
        parts_done(&p);
        return r;
}
