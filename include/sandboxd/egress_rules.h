/* egress_rules.h — the egress policy as the fronts see it: allowlist
 * additions per user and per session (validated, capped, audited), a
 * session's own narrowing, the effective policy of a session, and its
 * egress audit rows as JSON. Shared by the admin socket (sandboxctl egress
 * ...) and the API (the connector role's egress_allow, any token's
 * narrow_egress, session_info). */
#ifndef SANDBOXD_EGRESS_RULES_H
#define SANDBOXD_EGRESS_RULES_H

#include <cjson/cJSON.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct store;
struct privacy;

/* Add (remove false) or remove an allowlist pattern for every session of
 * user (session NULL) or for one session. The pattern is checked
 * (egress_policy.h; `*` is refused), at most egress_max_rules per scope
 * (-EDQUOT), and the change is written to the audit log as actor.
 * Removing an absent pattern: -ENOENT. */
int egress_rules_change(struct store *st, const struct sbx_config *cfg, const char *user, const char *session,
                        const char *pattern, bool remove, const char *actor, struct sbx_error *err);

/* "none" (private: no egress ever), "bridge" (network_default = bridge: raw
 * networking, no proxy) or "egress" (through the proxy, by allowlist). */
const char *egress_rules_mode(struct privacy *p, const struct sbx_config *cfg, const char *user, const char *session);

/* {"mode": ..., "allow": [{"pattern", "scope": config|user|session}, ...],
 * "narrowing"?: the session's own (egress_narrow_json)} ("allow" is empty
 * unless the mode is egress). */
cJSON *egress_rules_policy_json(struct store *st, struct privacy *p, const struct sbx_config *cfg, const char *user,
                                const char *session);

/* A session's own narrowing of its egress (issue 36: E2B's allowOut and
 * denyOut). It narrows, never widens: the proxy checks the allowlist
 * first, then the narrowing (egress_exec.c): a host an allow pattern
 * matches passes; else, with allow_only, nothing passes; else a host a deny
 * pattern matches does not. Patterns are checked and made canonical in n
 * (egress_policy.h; `*` refused); each allow pattern must be covered by the
 * operator's policy for the session (egress.allow, the user's and the
 * session's additions), else -EACCES naming it. Stored (a restart keeps
 * it; a fork and a snapshot carry it), replacing the one before; one with
 * nothing in it removes it. Audited as egress.narrow. */
struct store_egress_narrow;
int egress_narrow_set(struct store *st, const struct sbx_config *cfg, const char *user, const char *session,
                      struct store_egress_narrow *n, const char *actor, struct sbx_error *err);
/* {only, allow: [...], deny: [...]}, as session_info's egress.narrowing shows it. */
cJSON *egress_narrow_json(const struct store_egress_narrow *n);

/* The newest `limit` egress rows of the session, newest first, as a JSON
 * array; NULL on a store error (r set). */
cJSON *egress_rules_log_json(struct store *st, const char *user, const char *session, size_t limit, int *r);

/* Allowlist additions per user and per session: a list longer than this is
 * a policy for the operator's egress.allow. */
#define EGRESS_MAX_RULES 256

/* The `network` parameter of an execution (exec, run_code, run_cell,
 * run_tests; issue 37 item 3): absent or null (the session's egress),
 * "none", or {"allow": [host[:port], ...]} with 1-EGRESS_NET_MAX_HOSTS
 * patterns (egress_pattern_check, `*` refused; `*.suffix` allowed), no
 * other key. A narrowing only: a host must also pass the session's own
 * allowlist. ret->set says the parameter was given; ret->n_allow 0 with
 * set is "none". -EINVAL with err's message on any other shape. */
#define EGRESS_NET_MAX_HOSTS 16
#define EGRESS_NET_PATTERN_MAX 300
struct egress_net {
        bool set;
        size_t n_allow;
        char allow[EGRESS_NET_MAX_HOSTS][EGRESS_NET_PATTERN_MAX];
};
int egress_net_parse(const cJSON *v, struct egress_net *ret, struct sbx_error *err);

#endif
