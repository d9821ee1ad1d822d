/* egress_rules.c — allowlist additions, a session's own narrowing (checked
 * against the policy it may only narrow), the effective egress policy and
 * the egress audit as JSON (egress_rules.h). No state, no locks: the store
 * is the truth for additions and narrowings, the config for the rest. */
#include "sandboxd/egress_rules.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/audit.h"
#include "sandboxd/egress_policy.h"
#include "sandboxd/privacy.h"
#include "sandboxd/utf8.h"
#include "sandboxd/store.h"
#include "sandboxd/store_egress.h"

int egress_rules_change(struct store *st, const struct sbx_config *cfg, const char *user, const char *session,
                        const char *pattern, bool remove, const char *actor, struct sbx_error *err)
{
        char canon[STORE_EGRESS_PATTERN_MAX], detail[STORE_EGRESS_PATTERN_MAX + 64];
        int r;

        if (!session_id_valid(user) || (session && !session_id_valid(session)))
                return sbx_error_set(err, -EINVAL, 0, "user and session are 1-64 characters of [A-Za-z0-9_.-]");
        r = egress_pattern_check(pattern, false, canon, sizeof(canon), err);
        if (r < 0)
                return r;
        if (remove)
                r = store_egress_rule_remove(st, user, session, canon);
        else
                r = store_egress_rule_add(st, user, session, canon, actor, sbx_wall_ms(),
                                          (size_t)cfg->egress_max_rules);
        if (r == -EDQUOT)
                return sbx_error_set(err, r, 0, "at most %d egress patterns per %s (egress_max_rules)",
                                     cfg->egress_max_rules, session ? "session" : "user");
        if (r == -ENOENT)
                return sbx_error_set(err, r, 0, "no egress pattern %s for this %s", canon,
                                     session ? "session" : "user");
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot store the egress pattern: %s", strerror(-r));
        /* the pattern passed egress_pattern_check: no quote or backslash in it */
        snprintf(detail, sizeof(detail), "{\"pattern\":\"%s\",\"scope\":\"%s\"}", canon, session ? "session" : "user");
        (void)audit_record(st, actor ? actor : "unknown", user, session, remove ? "egress.deny" : "egress.allow",
                           detail);
        return 0;
}

const char *egress_rules_mode(struct privacy *p, const struct sbx_config *cfg, const char *user, const char *session)
{
        if (!p || privacy_is_private(p, user, session))
                return "none";
        return strcmp(cfg->network_default, "bridge") == 0 ? "bridge" : "egress";
}

static void add_rule(cJSON *a, const char *pattern, const char *scope)
{
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "pattern", pattern);
        cJSON_AddStringToObject(o, "scope", scope);
        cJSON_AddItemToArray(a, o);
}

cJSON *egress_rules_policy_json(struct store *st, struct privacy *p, const struct sbx_config *cfg, const char *user,
                                const char *session)
{
        const char *mode = egress_rules_mode(p, cfg, user, session);
        cJSON *o = cJSON_CreateObject(), *a;
        struct store_egress_rule *rules = NULL;
        char **allow = NULL;
        size_t n = 0;

        if (!o)
                return NULL;
        cJSON_AddStringToObject(o, "mode", mode);
        a = cJSON_AddArrayToObject(o, "allow");
        if (strcmp(mode, "egress") != 0)
                return o;
        if (egress_allow_parse(cfg->egress_allow, true, &allow, &n, NULL) == 0) {
                for (size_t i = 0; i < n; i++)
                        add_rule(a, allow[i], "config");
                egress_strv_free(allow, n);
        }
        if (store_egress_rules(st, user, session, &rules, &n) == 0)
                for (size_t i = 0; i < n; i++)
                        add_rule(a, rules[i].pattern, rules[i].session_id[0] ? "session" : "user");
        free(rules);
        cJSON_AddBoolToObject(o, "upstream_proxy", cfg->egress_upstream_proxy[0] != '\0');
        if (session) {
                struct store_egress_narrow *nw = malloc(sizeof(*nw));
                if (nw && store_egress_narrow_get(st, user, session, nw) > 0)
                        cJSON_AddItemToObject(o, "narrowing", egress_narrow_json(nw));
                free(nw);
        }
        return o;
}

cJSON *egress_rules_log_json(struct store *st, const char *user, const char *session, size_t limit, int *r)
{
        struct store_egress_entry *rows = NULL;
        size_t n = 0;
        cJSON *a;

        *r = store_egress_log_list(st, user, session, limit, &rows, &n);
        if (*r < 0)
                return NULL;
        a = cJSON_CreateArray();
        for (size_t i = 0; a && i < n; i++) {
                const struct store_egress_entry *e = &rows[i];
                cJSON *o = cJSON_CreateObject();
                cJSON_AddNumberToObject(o, "id", (double)e->id);
                cJSON_AddNumberToObject(o, "ts", (double)e->ts);
                cJSON_AddStringToObject(o, "host", e->host);
                cJSON_AddNumberToObject(o, "port", e->port);
                cJSON_AddStringToObject(o, "method", e->method);
                cJSON_AddStringToObject(o, "decision", e->decision);
                cJSON_AddStringToObject(o, "reason", e->reason);
                if (e->address[0])
                        cJSON_AddStringToObject(o, "address", e->address);
                else
                        cJSON_AddNullToObject(o, "address");
                cJSON_AddNumberToObject(o, "bytes_up", (double)e->bytes_up);
                cJSON_AddNumberToObject(o, "bytes_down", (double)e->bytes_down);
                cJSON_AddNumberToObject(o, "duration_ms", (double)e->duration_ms);
                cJSON_AddNumberToObject(o, "suppressed", (double)e->suppressed);
                cJSON_AddItemToArray(a, o);
        }
        free(rows);
        return a;
}

int egress_net_parse(const cJSON *v, struct egress_net *ret, struct sbx_error *err)
{
        const cJSON *it, *allow;

        memset(ret, 0, sizeof(*ret));
        if (!v || cJSON_IsNull(v))
                return 0;
        ret->set = true;
        if (cJSON_IsString(v)) {
                if (strcmp(v->valuestring, "none") != 0)
                        return sbx_error_set(err, -EINVAL, 0, "network must be \"none\" or {\"allow\": [hosts]}");
                return 0;
        }
        if (!cJSON_IsObject(v))
                return sbx_error_set(err, -EINVAL, 0, "network must be \"none\" or {\"allow\": [hosts]}");
        cJSON_ArrayForEach(it, v) {
                if (!it->string || strcmp(it->string, "allow") != 0)
                        return sbx_error_set(err, -EINVAL, 0, "network has one key, allow");
        }
        allow = cJSON_GetObjectItemCaseSensitive(v, "allow");
        if (!cJSON_IsArray(allow))
                return sbx_error_set(err, -EINVAL, 0, "network.allow must be an array of host names");
        if (cJSON_GetArraySize(allow) < 1 || cJSON_GetArraySize(allow) > EGRESS_NET_MAX_HOSTS)
                return sbx_error_set(err, -EINVAL, 0, "network.allow holds 1-%d hosts (\"none\" for no network)",
                                     EGRESS_NET_MAX_HOSTS);
        cJSON_ArrayForEach(it, allow) {
                if (!cJSON_IsString(it))
                        return sbx_error_set(err, -EINVAL, 0, "network.allow must be an array of host names");
                if (egress_pattern_check(it->valuestring, false, ret->allow[ret->n_allow],
                                         sizeof(ret->allow[ret->n_allow]), err) < 0)
                        return -EINVAL;
                ret->n_allow++;
        }
        return 0;
}

/* ---- a session's own narrowing ---- */

/* A pattern split into its host part and ports: 0 = 80 and 443 (no port
 * given), -1 = any (":*"), else that port. */
struct pat {
        char host[STORE_EGRESS_PATTERN_MAX];
        int port;
};

static void pat_split(const char *p, struct pat *ret)
{
        const char *colon = p[0] == '[' ? strstr(p, "]:") : strrchr(p, ':');
        size_t n;

        if (p[0] == '[' && colon)
                colon++;
        n = colon ? (size_t)(colon - p) : strlen(p);
        if (n >= sizeof(ret->host))
                n = sizeof(ret->host) - 1;
        memcpy(ret->host, p, n);
        ret->host[n] = '\0';
        ret->port = !colon ? 0 : strcmp(colon + 1, "*") == 0 ? -1 : atoi(colon + 1);
}

/* Does the host part q take in every name the host part p does? */
static bool host_covers(const char *q, const char *p)
{
        size_t nq, np;

        if (strcmp(q, "*") == 0)
                return true;
        if (strncmp(q, "*.", 2) != 0)
                return strcmp(q, p) == 0;
        if (strncmp(p, "*.", 2) == 0)
                p++; /* "*.a.b" under "*.b": ".a.b" ends with ".b" */
        nq = strlen(q + 1);
        np = strlen(p);
        return np > nq && strcmp(p + np - nq, q + 1) == 0;
}

/* Is every host and port the canonical pattern p names allowed by one of
 * the patterns in policy? A pattern's ports are checked one by one: "h"
 * (80 and 443) is covered by "h:80" with "h:443". */
static bool pattern_covered(const char *p, char **policy, size_t n)
{
        struct pat want, q;
        int units[2], n_units = 0;

        pat_split(p, &want);
        if (want.port == 0) {
                units[n_units++] = 80;
                units[n_units++] = 443;
        } else {
                units[n_units++] = want.port;
        }
        for (int u = 0; u < n_units; u++) {
                bool ok = false;
                for (size_t i = 0; i < n && !ok; i++) {
                        pat_split(policy[i], &q);
                        ok = host_covers(q.host, want.host) &&
                             (q.port == -1 ||
                              (units[u] != -1 &&
                               (q.port == units[u] || (q.port == 0 && (units[u] == 80 || units[u] == 443)))));
                }
                if (!ok)
                        return false;
        }
        return true;
}

int egress_narrow_set(struct store *st, const struct sbx_config *cfg, const char *user, const char *session,
                      struct store_egress_narrow *n, const char *actor, struct sbx_error *err)
{
        struct store_egress_rule *rules = NULL;
        char **policy = NULL, canon[STORE_EGRESS_PATTERN_MAX];
        size_t n_policy = 0, n_rules = 0;
        int r;

        if (!session_id_valid(user) || !session_id_valid(session))
                return sbx_error_set(err, -EINVAL, 0, "user and session are 1-64 characters of [A-Za-z0-9_.-]");
        if (n->n_allow > STORE_EGRESS_NARROW_MAX || n->n_deny > STORE_EGRESS_NARROW_MAX)
                return sbx_error_set(err, -EINVAL, 0, "at most %d allow and %d deny patterns", STORE_EGRESS_NARROW_MAX,
                                     STORE_EGRESS_NARROW_MAX);
        for (size_t i = 0; i < n->n_allow + n->n_deny; i++) {
                char *p = i < n->n_allow ? n->allow[i] : n->deny[i - n->n_allow];
                if (egress_pattern_check(p, false, canon, sizeof(canon), err) < 0)
                        return -EINVAL;
                sbx_strlcpy(p, canon, STORE_EGRESS_PATTERN_MAX);
        }
        /* the operator's policy for this session: the config's list, the user's and the session's additions */
        r = egress_allow_parse(cfg->egress_allow, true, &policy, &n_policy, err);
        if (r < 0)
                return r;
        if (store_egress_rules(st, user, session, &rules, &n_rules) == 0 && n_rules > 0) {
                char **more = realloc(policy, (n_policy + n_rules) * sizeof(*policy));
                if (!more) {
                        r = -ENOMEM;
                        goto out;
                }
                policy = more;
                for (size_t i = 0; i < n_rules; i++)
                        if ((policy[n_policy] = strdup(rules[i].pattern)))
                                n_policy++;
        }
        for (size_t i = 0; i < n->n_allow; i++)
                if (!pattern_covered(n->allow[i], policy, n_policy)) {
                        r = sbx_error_set(err, -EACCES, 0,
                                          "%s is not allowed to this session by the operator's egress policy: a "
                                          "narrowing cannot widen it",
                                          n->allow[i]);
                        goto out;
                }
        r = store_egress_narrow_put(st, user, session, n, sbx_wall_ms());
        if (r < 0) {
                sbx_error_set(err, r, 0, "cannot store the egress narrowing: %s", strerror(-r));
                goto out;
        }
        (void)audit_record_json(st, actor ? actor : "unknown", user, session, "egress.narrow", egress_narrow_json(n));
out:
        free(rules);
        egress_strv_free(policy, n_policy);
        return r;
}

cJSON *egress_narrow_json(const struct store_egress_narrow *n)
{
        cJSON *o = cJSON_CreateObject(), *a;

        cJSON_AddBoolToObject(o, "only", n->allow_only);
        a = cJSON_AddArrayToObject(o, "allow");
        for (size_t i = 0; i < n->n_allow; i++)
                cJSON_AddItemToArray(a, cJSON_CreateString(n->allow[i]));
        a = cJSON_AddArrayToObject(o, "deny");
        for (size_t i = 0; i < n->n_deny; i++)
                cJSON_AddItemToArray(a, cJSON_CreateString(n->deny[i]));
        return o;
}
