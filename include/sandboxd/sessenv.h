/* sessenv.h — the environment every execution and cell of a session starts
 * with, after the request's own (whose names win): the session's default env
 * (create_session's params.env), the placeholders of its attached secrets,
 * the package policy's index and registry (egress_pkg.h), and, when it has
 * secrets or an intercepted registry, the variables that make its programs
 * trust its CA (secrets_ca.h), whose bundle this writes into its runner
 * directory.
 * launch_exec (launch.h) calls this after acquiring the session, as does
 * run_cell's front; it reads the store, the secrets and the hub. */
#ifndef SANDBOXD_SESSENV_H
#define SANDBOXD_SESSENV_H

#include <stddef.h>

#include "sandboxd/common.h"

struct session_manager;
struct store;
struct secrets;
struct hub;
struct egress;

/* What it reads (borrowed). secrets NULL: no secrets configured here. */
struct sessenv {
        struct session_manager *sessions;
        struct store *store;
        struct secrets *secrets;
        struct hub *hub;
        struct egress *egress;
};

/* A NULL-terminated vector of NAME=value with room for max entries: env[i]
 * are borrowed or buf[i] (malloc'd, the caller frees buf[0..n)). */
struct sessenv_vec {
        const char **env;
        char **buf;
        size_t n, max;
};

/* Append user:session's environment to v, skipping names v already has.
 * The caller acquired the session first (session_acquire), so its runner
 * directory exists: the CA bundle goes there; this makes no container.
 * -E2BIG past v->max, -ENOMEM, or the store's error; err says. */
int sessenv_add(const struct sessenv *c, const char *user, const char *session, struct sessenv_vec *v,
                struct sbx_error *err);

#endif
