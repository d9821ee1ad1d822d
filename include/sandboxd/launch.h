/* launch.h — one execution's way from a front to its start, in one call.
 * A front (the API's exec, run_code and run_tests, and through them HTTPS
 * /v1/exec, MCP and E2B's process.Start) reads and checks its parameters
 * once into a struct launch_request, then launch_exec does the preflight
 * and the start:
 *
 *   network narrowing   refused for a bridge session (egress_rules.h: the
 *                       privacy ratchet decides the mode)
 *   session_acquire     the session running (created, resumed), released
 *   sessenv_add         the session's default env after the request's own
 *   exec_start          admitted, registered, started (exec.h)
 *
 * It never waits for the execution to end: the front replies (and streams)
 * as it likes. */
#ifndef SANDBOXD_LAUNCH_H
#define SANDBOXD_LAUNCH_H

#include "sandboxd/common.h"
#include "sandboxd/exec.h"
#include "sandboxd/sessenv.h"

struct sbx_config;
struct privacy;

/* What it uses (borrowed; the daemon fills it once its modules exist). */
struct launch_ctx {
        const struct sbx_config *cfg;
        struct privacy *privacy;
        struct exec_registry *exec;
        struct sessenv env; /* the session's default env: sessions, store, secrets, hub, egress */
};

/* An execution as a front parsed it. exec.env is set by launch_exec from
 * env: the caller's vector, whose first env.n entries are the request's own
 * (they win over the session's); launch_request_done frees env.buf. */
struct launch_request {
        struct exec_request exec;
        struct sessenv_vec env;
};

/* The preflight and the start above; ret_id the execution's id. Errors are
 * -errno with err set: -EHOSTUNREACH for a narrowing on a bridge session,
 * the session's, the environment's (-E2BIG past env.max) or exec_start's. */
int launch_exec(const struct launch_ctx *c, struct launch_request *lr, char ret_id[37], struct sbx_error *err);

/* A refused narrowing: net set on a bridge session (0 when allowed). */
int launch_network_check(const struct launch_ctx *c, const char *user, const char *session,
                         const struct egress_net *net, struct sbx_error *err);

void launch_request_done(struct launch_request *lr);

#endif
