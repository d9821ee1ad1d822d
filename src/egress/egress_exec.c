/* egress_exec.c — the proxy's narrowings after the allowlist: the
 * session's own (issue 36, from the store: egress_rules.h) and the network
 * policy per execution (issue 37 item
 * 3; docs/security.md, "Network policy per execution"): whose connection a
 * tunnel is, from the RP_EGRESS_FROM header the runner puts first on each
 * egress.sock connection, and whether its host passes that execution's
 * narrowing, looked up in the daemon's own table (egress_set_narrow_hook).
 *
 * The header is believed only from the session's verified runner (the
 * gateway checks the peer: t->from_runner); egress.sock is reachable by
 * tenant code too, and a header it sends is read and dropped, leaving the
 * connection unattributed, which can only narrow it. A request head never
 * starts with a NUL byte, so a header is told apart from a client that
 * speaks HTTP at once. Loop thread only. */
#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/egress_policy.h"
#include "sandboxd/egress_rules.h"
#include "sandboxd/runner_proto.h"
#include "sandboxd/store_egress.h"
#include "egress_internal.h"

int egress_exec_from(struct tunnel *t, struct evbuffer *in)
{
        struct rp_hdr h;
        unsigned char first;
        unsigned int kind;

        if (t->from_read)
                return 1;
        if (evbuffer_copyout(in, &first, 1) != 1)
                return 0;
        t->from = RP_FROM_UNKNOWN;
        t->from_tag = 0;
        if (first != 0) { /* HTTP at once: a client of egress.sock itself */
                t->from_read = true;
                return 1;
        }
        if (evbuffer_get_length(in) < sizeof(h))
                return 0;
        evbuffer_remove(in, &h, sizeof(h));
        t->from_read = true;
        kind = h.flags & RP_FROM_KIND;
        if (h.len != 0 || h.type != RP_EGRESS_FROM || kind < RP_FROM_EXEC || kind > RP_FROM_UNKNOWN ||
            (h.flags & ~(RP_FROM_KIND | RP_FROM_NARROWED)) || ((h.flags & RP_FROM_NARROWED) && kind != RP_FROM_EXEC) ||
            (kind == RP_FROM_EXEC) != (h.tag != 0))
                return -1;
        if (t->from_runner) {
                t->from = kind;
                t->from_tag = h.tag;
                t->from_narrowed = h.flags & RP_FROM_NARROWED;
        }
        return 1;
}

/* The session's own narrowing (egress_rules.h, egress_narrow_set), from
 * the store: an allow pattern passes; else allow_only refuses; else a deny
 * pattern refuses. */
static bool session_allowed(struct tunnel *t, char *ret_reason, size_t reason_size, char *ret_detail,
                            size_t detail_size)
{
        struct store_egress_narrow *n = malloc(sizeof(*n));
        bool ok = true, denied = false;
        int r;

        if (!n) {
                snprintf(ret_reason, reason_size, "narrowed:session");
                snprintf(ret_detail, detail_size, "out of memory");
                return false;
        }
        r = store_egress_narrow_get(t->eg->store, t->s->user, t->s->session, n);
        if (r < 0) { /* a narrowing that cannot be read is not dropped in silence */
                ok = false;
                snprintf(ret_detail, detail_size, "cannot read this session's egress narrowing");
        } else if (r > 0) {
                bool allowed = false;
                for (size_t i = 0; i < n->n_allow && !allowed; i++)
                        allowed = egress_pattern_match(n->allow[i], t->host, t->port);
                for (size_t i = 0; i < n->n_deny && !allowed && !denied; i++)
                        denied = egress_pattern_match(n->deny[i], t->host, t->port);
                ok = allowed || (!n->allow_only && !denied);
                if (!ok)
                        snprintf(ret_detail, detail_size, "%s:%d is outside this session's own narrowing (%s)", t->host,
                                 t->port, denied ? "denied" : "not in its allow list");
        }
        free(n);
        if (!ok)
                snprintf(ret_reason, reason_size, "narrowed:session");
        return ok;
}

bool egress_exec_allowed(struct tunnel *t, char *ret_reason, size_t reason_size, char *ret_detail, size_t detail_size)
{
        struct egress_net *net;
        char id[40] = "";
        bool narrowed, ok = false;

        if (!session_allowed(t, ret_reason, reason_size, ret_detail, detail_size))
                return false;
        if (!t->eg->narrow_fn || t->from == RP_FROM_NONE)
                return true;
        net = malloc(sizeof(*net));
        if (!net) {
                snprintf(ret_reason, reason_size, "narrowed");
                snprintf(ret_detail, detail_size, "out of memory");
                return false;
        }
        narrowed = t->eg->narrow_fn(t->s->user, t->s->session, t->from, t->from_tag, net, id, t->eg->narrow_ud);
        if (!narrowed && t->from_narrowed) {
                /* started narrowed, no longer in the daemon's table: an orphan of an execution that
                 * ended, or one a restarted daemon adopted. Narrowed to nothing. */
                net->n_allow = 0;
                narrowed = true;
        }
        if (!narrowed) {
                free(net);
                return true;
        }
        for (size_t i = 0; i < net->n_allow && !ok; i++)
                ok = egress_pattern_match(net->allow[i], t->host, t->port);
        free(net);
        if (ok)
                return true;
        id[sizeof(id) - 1] = '\0';
        snprintf(ret_reason, reason_size, "narrowed:%s", id[0] ? id : "unknown");
        if (t->from == RP_FROM_UNKNOWN)
                snprintf(ret_detail, detail_size,
                         "the connection could not be attributed to an execution while execution %s, narrowed, runs",
                         id[0] ? id : "(not known)");
        else
                snprintf(ret_detail, detail_size, "%s:%d is outside the network narrowing of execution %s", t->host,
                         t->port, id[0] ? id : "(not known)");
        return false;
}
