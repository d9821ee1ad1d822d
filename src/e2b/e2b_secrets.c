/* e2b_secrets.c — E2B's /secrets API (issue 36; docs/e2b.md "Secrets") on
 * sandboxd's own per-user secrets (secrets.h): one store, so a secret made
 * here is in list_secrets and `sandboxctl secret`, and one set there is
 * here. A name is E2B's (lower case here) and sandboxd's (an environment
 * variable name, upper case in the store): both rules hold, so the two
 * spellings map one to one. The value is only ever sealed (secrets.c):
 * never answered, logged, audited or evented. Runs on the connection's MHD
 * thread; no state of its own. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2b_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/secrets.h"
#include "sandboxd/store.h"

#define E2B_SECRET_NAME_MAX 128    /* E2B's NewSecret.name */
#define E2B_SECRET_META_KEYS 32    /* E2B's SecretMetadata: entries */
#define E2B_SECRET_META_KEY 128    /* bytes of a key */
#define E2B_SECRET_META_VALUE 1024 /* bytes of a value */
#define E2B_SECRET_META_TOTAL 8192 /* bytes of keys and values together */
#define E2B_SECRET_PAGE_MAX 100

/* E2B's name (or a path's) as the store's: E2B's rule (1-128 of
 * [a-zA-Z0-9_-], lower-cased, no sec_ prefix) and sandboxd's (an
 * environment variable name, at most SECRETS_NAME_MAX, no leading digit).
 * false with why naming the rule broken. */
bool e2b_secret_name(const char *in, char out[SECRETS_NAME_MAX + 1], char *why, size_t why_size)
{
        size_t n = strlen(in);

        if (n == 0 || n > E2B_SECRET_NAME_MAX ||
            strspn(in,
                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                   "0123456789_-") != n) {
                snprintf(why, why_size, "a secret name is 1-%d characters of a-z, A-Z, 0-9, _ and - (E2B's rule)",
                         E2B_SECRET_NAME_MAX);
                return false;
        }
        if (strncasecmp(in, "sec_", 4) == 0) {
                snprintf(why, why_size, "a secret name cannot start with sec_: it is the prefix of ids (E2B's rule)");
                return false;
        }
        if (strchr(in, '-')) {
                snprintf(why, why_size,
                         "a secret name here is also an environment variable name: - is not allowed, use _ "
                         "(sandboxd's rule, docs/e2b.md)");
                return false;
        }
        if (n > SECRETS_NAME_MAX || isdigit((unsigned char)in[0])) {
                snprintf(why, why_size,
                         "a secret name here is at most %d characters and does not start with a digit "
                         "(sandboxd's rule)",
                         SECRETS_NAME_MAX);
                return false;
        }
        for (size_t i = 0; i <= n; i++)
                out[i] = (char)toupper((unsigned char)in[i]);
        return true;
}

/* E2B's SecretMetadata: absent or null is NULL in *ret (kept); else its
 * JSON text. false with why when it breaks E2B's bounds. */
static bool metadata_check(const cJSON *m, char **ret, char *why, size_t why_size)
{
        const cJSON *it, *other;
        size_t total = 0;
        int n = 0;

        *ret = NULL;
        if (!m || cJSON_IsNull(m))
                return true;
        if (!cJSON_IsObject(m)) {
                snprintf(why, why_size, "metadata must be an object of strings");
                return false;
        }
        cJSON_ArrayForEach(it, m) {
                size_t kl = strlen(it->string), vl;
                if (++n > E2B_SECRET_META_KEYS) {
                        snprintf(why, why_size, "metadata has at most %d entries", E2B_SECRET_META_KEYS);
                        return false;
                }
                if (kl == 0 || kl > E2B_SECRET_META_KEY) {
                        snprintf(why, why_size, "a metadata key is 1-%d bytes", E2B_SECRET_META_KEY);
                        return false;
                }
                if (!cJSON_IsString(it)) {
                        snprintf(why, why_size, "metadata.%.64s must be a string", it->string);
                        return false;
                }
                vl = strlen(it->valuestring);
                if (vl > E2B_SECRET_META_VALUE) {
                        snprintf(why, why_size, "metadata.%.64s is longer than %d bytes", it->string,
                                 E2B_SECRET_META_VALUE);
                        return false;
                }
                for (other = m->child; other != it; other = other->next)
                        if (strcmp(other->string, it->string) == 0) {
                                snprintf(why, why_size, "metadata names %.64s twice", it->string);
                                return false;
                        }
                total += kl + vl;
        }
        if (total > E2B_SECRET_META_TOTAL) {
                snprintf(why, why_size, "metadata is more than %d bytes of keys and values", E2B_SECRET_META_TOTAL);
                return false;
        }
        *ret = cJSON_PrintUnformatted(m);
        if (!*ret) {
                snprintf(why, why_size, "out of memory");
                return false;
        }
        return true;
}

/* The row as E2B's Secret (its metadata read from the store). */
static cJSON *secret_object(struct e2b_req *q, const struct store_secret *row)
{
        cJSON *o = cJSON_CreateObject(), *meta = NULL;
        char *meta_json = NULL, lower[SECRETS_NAME_MAX + 1];
        size_t i;

        for (i = 0; row->name[i] && i < SECRETS_NAME_MAX; i++)
                lower[i] = (char)tolower((unsigned char)row->name[i]);
        lower[i] = '\0';
        cJSON_AddStringToObject(o, "secretID", row->secret_id);
        cJSON_AddStringToObject(o, "name", lower);
        cJSON_AddNumberToObject(o, "currentVersion", (double)row->version);
        if (store_secret_metadata(q->d->store, q->tok.user, row->name, &meta_json) == 0)
                meta = cJSON_Parse(meta_json);
        free(meta_json);
        cJSON_AddItemToObject(o, "metadata", cJSON_IsObject(meta) ? meta : cJSON_CreateObject());
        if (meta && !cJSON_IsObject(meta))
                cJSON_Delete(meta);
        e2b_add_time(o, "createdAt", (double)row->created_at);
        e2b_add_time(o, "updatedAt", (double)row->updated_at);
        return o;
}

/* The route's {sec}: an id (sec_ + hex) or a name of q's user, into row;
 * else an answer queued in *ans and false. */
static bool secret_find(struct e2b_req *q, struct MHD_Connection *conn, struct store_secret *row, enum MHD_Result *ans)
{
        char name[SECRETS_NAME_MAX + 1], why[160];
        int r;

        if (strncmp(q->secret, "sec_", 4) == 0) {
                size_t n = strlen(q->secret + 4);
                if (n == 0 || n >= sizeof(row->secret_id) - 4 || strspn(q->secret + 4, "0123456789abcdef") != n) {
                        *ans = e2b_reply_error(conn, 400, "a secret id is sec_ followed by lower-case hex");
                        return false;
                }
                r = store_secret_get_by_id(q->d->store, q->tok.user, q->secret, row);
        } else {
                if (!e2b_secret_name(q->secret, name, why, sizeof(why))) {
                        *ans = e2b_reply_error(conn, 400, "%s", why);
                        return false;
                }
                r = store_secret_get(q->d->store, q->tok.user, name, row, NULL);
        }
        if (r == -ENOENT) /* another user's reads the same */
                *ans = e2b_reply_error(conn, 404, "secret %.128s not found", q->secret);
        else if (r < 0)
                *ans = e2b_reply_error(conn, 500, "cannot read the secrets");
        return r == 0;
}

/* Making, changing and deleting a secret is a connector's act (set_secret's rule). */
static bool connector(struct e2b_req *q, struct MHD_Connection *conn, enum MHD_Result *ans)
{
        if (q->tok.role == TOKEN_ROLE_CONNECTOR)
                return true;
        *ans = e2b_reply_error(conn, 403, "changing secrets needs a connector key; this key's role is %s",
                               token_role_to_string(q->tok.role));
        return false;
}

static void actor_of(const struct e2b_req *q, char *actor, size_t size)
{
        snprintf(actor, size, "token:%s", q->tok.id);
}

static enum MHD_Result put_answer(struct MHD_Connection *conn, int r, const struct sbx_error *err)
{
        int status = r == -EEXIST                  ? 409
                     : r == -ENOENT                ? 404
                     : r == -EDQUOT                ? 400
                     : r == -EOPNOTSUPP            ? 503
                     : r == -EINVAL || r == -E2BIG ? 400
                                                   : 500;
        return e2b_reply_error(conn, status, "%s", err->msg[0] ? err->msg : "cannot store the secret");
}

/* The body's value: a string of 1-SECRETS_VALUE_MAX bytes (secrets.c checks
 * the bytes); NULL with an answer queued. */
static const char *body_value(const cJSON *b, struct MHD_Connection *conn, enum MHD_Result *ans)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, "value");

        if (!cJSON_IsString(v) || !v->valuestring[0]) {
                *ans = e2b_reply_error(conn, 400, "value is required: a string of 1-%d bytes", SECRETS_VALUE_MAX);
                return NULL;
        }
        return v->valuestring;
}

/* What create and update read first: a connector's key, the body (only
 * known members), its value and its metadata (*ret_meta NULL: none given).
 * NULL with an answer queued in *ans. */
static cJSON *put_body(struct e2b_req *q, struct MHD_Connection *conn, const char *const *known, const char **ret_value,
                       char **ret_meta, enum MHD_Result *ans)
{
        struct fronterr e = {0};
        char why[160];
        const char *bad;
        cJSON *b;

        if (!connector(q, conn, ans))
                return NULL;
        b = e2b_parse_object(q->body, q->len, &e);
        if (!b) {
                *ans = e2b_reply_fronterr(conn, &e);
                return NULL;
        }
        if ((bad = e2b_unknown_member(b, known)))
                *ans = e2b_reply_error(conn, 400, "unknown field %.64s", bad);
        else if (!(*ret_value = body_value(b, conn, ans)))
                ;
        else if (!metadata_check(cJSON_GetObjectItemCaseSensitive(b, "metadata"), ret_meta, why, sizeof(why)))
                *ans = e2b_reply_error(conn, 400, "%s", why);
        else
                return b;
        cJSON_Delete(b);
        return NULL;
}

enum MHD_Result e2b_secret_create(struct e2b_req *q, struct MHD_Connection *conn)
{
        static const char *const known[] = {"name", "value", "metadata", NULL};
        enum MHD_Result ans = MHD_NO;
        const char *value = NULL;
        _cleanup_free_ char *meta = NULL;
        _cleanup_(cjson_freep) cJSON *b = put_body(q, conn, known, &value, &meta, &ans);
        struct store_secret row = {0};
        struct sbx_error err = {0};
        char name[SECRETS_NAME_MAX + 1], why[160], actor[64];
        const cJSON *n;
        int r;

        if (!b)
                return ans;
        n = cJSON_GetObjectItemCaseSensitive(b, "name");
        if (!cJSON_IsString(n))
                return e2b_reply_error(conn, 400, "name is required (a string)");
        if (!e2b_secret_name(n->valuestring, name, why, sizeof(why)))
                return e2b_reply_error(conn, 400, "%s", why);
        actor_of(q, actor, sizeof(actor));
        r = secrets_put_hostless(q->d->secrets, q->d->store, q->tok.user, name, value, strlen(value),
                                 STORE_SECRET_CREATE, meta, actor, &row, &err);
        if (r < 0)
                return put_answer(conn, r, &err);
        return e2b_reply_json(conn, 201, secret_object(q, &row));
}

enum MHD_Result e2b_secret_update(struct e2b_req *q, struct MHD_Connection *conn)
{
        static const char *const known[] = {"value", "metadata", NULL};
        enum MHD_Result ans = MHD_NO;
        const char *value = NULL;
        _cleanup_free_ char *meta = NULL;
        _cleanup_(cjson_freep) cJSON *b = put_body(q, conn, known, &value, &meta, &ans);
        struct store_secret row = {0}, out = {0};
        struct sbx_error err = {0};
        char actor[64];
        int r;

        if (!b)
                return ans;
        if (!secret_find(q, conn, &row, &ans))
                return ans;
        actor_of(q, actor, sizeof(actor));
        r = secrets_put_hostless(q->d->secrets, q->d->store, q->tok.user, row.name, value, strlen(value),
                                 STORE_SECRET_UPDATE, meta, actor, &out, &err);
        if (r < 0)
                return put_answer(conn, r, &err);
        return e2b_reply_json(conn, 200, secret_object(q, &out));
}

enum MHD_Result e2b_secret_get(struct e2b_req *q, struct MHD_Connection *conn)
{
        struct store_secret row = {0};
        enum MHD_Result ans = MHD_NO;

        if (!secret_find(q, conn, &row, &ans))
                return ans;
        return e2b_reply_json(conn, 200, secret_object(q, &row));
}

enum MHD_Result e2b_secret_delete(struct e2b_req *q, struct MHD_Connection *conn)
{
        struct store_secret row = {0};
        struct sbx_error err = {0};
        enum MHD_Result ans = MHD_NO;
        char actor[64];
        int r;

        if (!connector(q, conn, &ans) || !secret_find(q, conn, &row, &ans))
                return ans;
        actor_of(q, actor, sizeof(actor));
        r = secrets_delete(q->d->store, q->tok.user, row.name, actor, &err);
        if (r == -ENOENT)
                return e2b_reply_error(conn, 404, "secret %.128s not found", q->secret);
        if (r < 0)
                return e2b_reply_error(conn, 500, "%s", err.msg);
        return e2b_reply_raw(conn, 204, NULL, NULL, 0);
}

/* GET /secrets?limit&nextToken: by name; the token is the last name of
 * the page before (E2B's spelling), x-next-token when more are left. */
enum MHD_Result e2b_secret_list(struct e2b_req *q, struct MHD_Connection *conn)
{
        const char *lim = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit");
        const char *tok = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "nextToken");
        _cleanup_free_ struct store_secret *rows = NULL;
        char after[SECRETS_NAME_MAX + 1] = "", why[160], next[SECRETS_NAME_MAX + 1] = "";
        long limit = E2B_SECRET_PAGE_MAX;
        size_t n = 0;
        cJSON *out;
        int taken = 0;

        if (lim) {
                char *end = NULL;
                limit = strtol(lim, &end, 10);
                if (!*lim || *end || limit < 1 || limit > E2B_SECRET_PAGE_MAX)
                        return e2b_reply_error(conn, 400, "limit must be 1-%d", E2B_SECRET_PAGE_MAX);
        }
        if (tok && *tok && !e2b_secret_name(tok, after, why, sizeof(why)))
                return e2b_reply_error(conn, 400, "nextToken is not one this API gave");
        if (store_secret_list(q->d->store, q->tok.user, &rows, &n) < 0)
                return e2b_reply_error(conn, 500, "cannot list the secrets");
        out = cJSON_CreateArray();
        for (size_t i = 0; out && i < n; i++) { /* the store lists by name */
                if (after[0] && strcmp(rows[i].name, after) <= 0)
                        continue;
                if (taken == limit) {
                        size_t j;
                        for (j = 0; rows[i - 1].name[j]; j++)
                                next[j] = (char)tolower((unsigned char)rows[i - 1].name[j]);
                        next[j] = '\0';
                        break;
                }
                cJSON_AddItemToArray(out, secret_object(q, &rows[i]));
                taken++;
        }
        if (!out)
                return e2b_reply_error(conn, 500, "out of memory");
        return e2b_reply_page(conn, out, next);
}

/* ---- network.rules (docs/e2b.md "Secrets"): a secret's header set by the egress proxy ---- */

#define E2B_RULE_DOMAINS_MAX SECRETS_MAX_HOSTS       /* domains in network.rules */
#define E2B_RULE_HEADERS_MAX SECRETS_MAX_PER_SESSION /* headers in all its transforms */
#define E2B_RULE_MARK "${e2b.secrets."

/* One header of a transform: its secret (the store's name) and its value
 * with the secret's mark as SECRETS_RULE_MARK; NULL, or why not. */
static const char *rule_header(struct e2b_req *q, const char *domain, const char *hname, const cJSON *v,
                               char name[SECRETS_NAME_MAX + 1], char *tmpl, size_t tmpl_size, char *why,
                               size_t why_size)
{
        const char *mark, *end;
        char e2b_name[E2B_SECRET_NAME_MAX + 1], rule[160];
        struct store_secret row;

        if (!cJSON_IsString(v)) {
                snprintf(why, why_size, "network.rules[%.64s]: header %.64s must be a string", domain, hname);
                return why;
        }
        mark = strstr(v->valuestring, E2B_RULE_MARK);
        if (!mark) {
                snprintf(why, why_size,
                         "network.rules[%.64s]: header %.64s holds no ${e2b.secrets.NAME}: sandboxd's proxy sets "
                         "only a secret's header (a plain header belongs in the request itself; docs/e2b.md)",
                         domain, hname);
                return why;
        }
        end = strchr(mark, '}');
        if (!end || (size_t)(end - mark) - strlen(E2B_RULE_MARK) > E2B_SECRET_NAME_MAX) {
                snprintf(why, why_size, "network.rules[%.64s]: header %.64s has an unclosed ${e2b.secrets.", domain,
                         hname);
                return why;
        }
        if (strstr(end, E2B_RULE_MARK)) {
                snprintf(why, why_size, "network.rules[%.64s]: header %.64s names more than one secret (one here)",
                         domain, hname);
                return why;
        }
        snprintf(e2b_name, sizeof(e2b_name), "%.*s", (int)(end - mark - strlen(E2B_RULE_MARK)),
                 mark + strlen(E2B_RULE_MARK));
        if (!e2b_secret_name(e2b_name, name, rule, sizeof(rule)) ||
            store_secret_get(q->d->store, q->tok.user, name, &row, NULL) < 0) {
                snprintf(why, why_size, "network.rules[%.64s]: no secret %.128s (the Secrets API lists yours)", domain,
                         e2b_name);
                return why;
        }
        if ((size_t)snprintf(tmpl, tmpl_size, "%.*s%s%s", (int)(mark - v->valuestring), v->valuestring,
                             SECRETS_RULE_MARK, end + 1) >= tmpl_size) {
                snprintf(why, why_size, "network.rules[%.64s]: header %.64s is longer than %d bytes", domain, hname,
                         SECRETS_RULE_VALUE_MAX);
                return why;
        }
        return NULL;
}

const char *e2b_rules_parse(struct e2b_req *q, const cJSON *rules, cJSON **ret, char *why, size_t why_size)
{
        _cleanup_(cjson_freep) cJSON *out = cJSON_CreateArray();
        const cJSON *dom, *rule, *hdr;
        int n_dom = 0, n_hdr = 0;

        *ret = NULL;
        if (!out)
                return "out of memory";
        if (!cJSON_IsObject(rules))
                return "network.rules must be an object of domains";
        cJSON_ArrayForEach(dom, rules) {
                if (++n_dom > E2B_RULE_DOMAINS_MAX) {
                        snprintf(why, why_size, "network.rules names at most %d domains", E2B_RULE_DOMAINS_MAX);
                        return why;
                }
                if (!cJSON_IsArray(dom)) {
                        snprintf(why, why_size, "network.rules[%.64s] must be an array of rules", dom->string);
                        return why;
                }
                cJSON_ArrayForEach(rule, dom) {
                        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(rule, "transform");
                        const cJSON *hs = cJSON_GetObjectItemCaseSensitive(tr, "headers");
                        if (!cJSON_IsObject(rule) || (rule->child && (rule->child->next || !tr)) ||
                            (tr && !cJSON_IsObject(tr)) || (tr && tr->child && (tr->child->next || !hs)) ||
                            (hs && !cJSON_IsObject(hs))) {
                                snprintf(why, why_size,
                                         "network.rules[%.64s]: a rule is {transform: {headers: {Name: value}}}",
                                         dom->string);
                                return why;
                        }
                        cJSON_ArrayForEach(hdr, hs) {
                                char name[SECRETS_NAME_MAX + 1], tmpl[SECRETS_RULE_VALUE_MAX + 1];
                                _cleanup_free_ char *hosts_json = NULL;
                                struct sbx_error err = {0};
                                cJSON *a = NULL, *it, *hosts;
                                const char *bad;

                                if (++n_hdr > E2B_RULE_HEADERS_MAX) {
                                        snprintf(why, why_size, "network.rules sets at most %d headers",
                                                 E2B_RULE_HEADERS_MAX);
                                        return why;
                                }
                                if ((bad = rule_header(q, dom->string, hdr->string, hdr, name, tmpl, sizeof(tmpl), why,
                                                       why_size)))
                                        return bad;
                                cJSON_ArrayForEach(it, out)
                                        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(it, "name")), name) == 0)
                                                a = it;
                                if (!a) {
                                        a = cJSON_CreateObject();
                                        cJSON_AddItemToArray(out, a);
                                        cJSON_AddStringToObject(a, "name", name);
                                        cJSON_AddArrayToObject(a, "hosts");
                                        cJSON_AddStringToObject(a, "header", hdr->string);
                                        cJSON_AddStringToObject(a, "template", tmpl);
                                } else if (strcasecmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "header")),
                                                      hdr->string) != 0 ||
                                           strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "template")), tmpl) !=
                                                   0) {
                                        snprintf(why, why_size,
                                                 "network.rules: secret %.64s is in two different headers (one "
                                                 "header per secret here; docs/e2b.md)",
                                                 name);
                                        return why;
                                }
                                hosts = cJSON_GetObjectItem(a, "hosts");
                                cJSON_AddItemToArray(hosts, cJSON_CreateString(dom->string));
                                /* the domain a host name, the header and its value as the proxy takes them */
                                if (secrets_rule_check(hosts, hdr->string, tmpl, &hosts_json, &err) < 0) {
                                        snprintf(why, why_size, "network.rules[%.64s]: %s", dom->string, err.msg);
                                        return why;
                                }
                        }
                }
        }
        *ret = TAKE_PTR(out);
        return NULL;
}

int e2b_rules_apply(struct e2b_req *q, const cJSON *attach, bool replace, struct fronterr *e)
{
        const cJSON *it;
        cJSON *res = NULL;

        if (replace) { /* updateNetwork: the rules before go (an omitted field is cleared) */
                _cleanup_free_ struct store_session_secret *rows = NULL;
                size_t n = 0;
                if (store_session_secret_list(q->d->store, q->tok.user, q->session, &rows, &n) < 0)
                        return fronterr_set(e, "internal", "cannot list the sandbox's secrets");
                for (size_t i = 0; i < n; i++) {
                        cJSON *p;
                        if (!rows[i].rule_hosts_json[0])
                                continue;
                        p = cJSON_CreateObject();
                        cJSON_AddStringToObject(p, "session", q->session);
                        cJSON_AddStringToObject(p, "name", rows[i].name);
                        if (e2b_call(q, "detach_secret", p, &res, e) < 0)
                                return -1;
                        cJSON_Delete(res);
                }
        }
        cJSON_ArrayForEach(it, attach) {
                cJSON *p = cJSON_Duplicate(it, true);
                if (!p)
                        return fronterr_set(e, "internal", "out of memory");
                cJSON_AddStringToObject(p, "session", q->session);
                if (e2b_call(q, "attach_secret", p, &res, e) < 0)
                        return -1;
                cJSON_Delete(res);
        }
        return 0;
}
