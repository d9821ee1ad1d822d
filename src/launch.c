/* launch.c — one execution's preflight and start (launch.h). */
#include "sandboxd/launch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/egress_rules.h"
#include "sandboxd/session.h"

int launch_network_check(const struct launch_ctx *c, const char *user, const char *session,
                         const struct egress_net *net, struct sbx_error *err)
{
        if (!net || !net->set)
                return 0;
        /* bridge: raw networking, no proxy to narrow by: refused rather than run unnarrowed */
        if (strcmp(egress_rules_mode(c->privacy, c->cfg, user, session), "bridge") != 0)
                return 0;
        return sbx_error_set(err, -EHOSTUNREACH, 0,
                             "params.network needs the egress proxy (network_default none): a bridge "
                             "session's network cannot be narrowed per execution");
}

int launch_exec(const struct launch_ctx *c, struct launch_request *lr, char ret_id[37], struct sbx_error *err)
{
        struct exec_request *x = &lr->exec;
        struct session *s = NULL;
        int r = launch_network_check(c, x->user, x->session, x->network, err);

        if (r < 0)
                return r;
        /* the session first: its runner directory takes the CA bundle of the default env */
        r = session_acquire(c->env.sessions, x->user, x->session, &s, err);
        if (r < 0) {
                if (err && !err->msg[0])
                        sbx_error_set(err, r, 0, "the session's container is not available");
                return r;
        }
        session_release(s);
        r = sessenv_add(&c->env, x->user, x->session, &lr->env, err);
        if (r < 0)
                return r;
        x->env = lr->env.n ? lr->env.env : NULL;
        return exec_start(c->exec, x, ret_id, err);
}

void launch_request_done(struct launch_request *lr)
{
        for (size_t i = 0; i < lr->env.n; i++)
                free(lr->env.buf[i]);
        lr->env.n = 0;
}
