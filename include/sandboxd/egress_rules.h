/* egress_rules.h — the egress policy as the fronts see it: allowlist
 * additions per user and per session (validated, capped, audited), the
 * effective policy of a session, and its egress audit rows as JSON. Shared
 * by the admin socket (sandboxctl egress ...) and the API (the connector
 * role's egress_allow, session_info). */
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

/* {"mode": ..., "allow": [{"pattern", "scope": config|user|session}, ...]}
 * ("allow" is empty unless the mode is egress). */
cJSON *egress_rules_policy_json(struct store *st, struct privacy *p, const struct sbx_config *cfg, const char *user,
                                const char *session);

/* The newest `limit` egress rows of the session, newest first, as a JSON
 * array; NULL on a store error (r set). */
cJSON *egress_rules_log_json(struct store *st, const char *user, const char *session, size_t limit, int *r);

/* Allowlist additions per user and per session: a list longer than this is
 * a policy for the operator's egress.allow. */
#define EGRESS_MAX_RULES 256

#endif
