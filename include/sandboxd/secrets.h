/* secrets.h — per-user secrets (issue 37): write-only values, sealed at rest
 * under the operator's key file, bound to the hosts they may be sent to.
 *
 * The key file (config secrets_key_file) holds 64 hex digits: a 256-bit
 * AES-256-GCM key. It must be a regular file outside data_dir, owned by the
 * daemon's user and readable by it alone (mode 0600 or 0400): otherwise the
 * secrets are not opened and the daemon refuses to start. `sandboxctl
 * secret keygen PATH` writes a new one. Without a key file the secret
 * methods answer unavailable.
 *
 * A value is sealed as base64(nonce(12) || ciphertext || tag(16)), a fresh
 * random nonce per seal, with "user\0name" as the additional data: a sealed
 * row copied to another user or name fails to open, as does any flipped
 * bit. An opened value is a struct secret_value, wiped when freed; it is
 * never formatted, logged, audited or returned by any method. */
#ifndef SANDBOXD_SECRETS_H
#define SANDBOXD_SECRETS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "sandboxd/common.h"
#include "sandboxd/store.h"

struct store;

#define SECRETS_KEY_LEN 32
#define SECRETS_NAME_MAX 64        /* [A-Z_][A-Z0-9_]{0,63} */
#define SECRETS_VALUE_MAX 8192     /* bytes of one value */
#define SECRETS_MAX_HOSTS 8        /* hostnames one secret may go to */
#define SECRETS_HEADER_MAX 64      /* an HTTP header name: [A-Za-z0-9-] */
#define SECRETS_MAX_PER_USER 64    /* secrets one user holds */
#define SECRETS_MAX_PER_SESSION 16 /* secrets attached to one session */
#define SECRETS_PLACEHOLDER_PREFIX "sbx_ph_"
#define SECRETS_PLACEHOLDER_BYTES 16 /* random bytes of a placeholder, as 32 hex */

/* The loaded key (wiped on free). */
struct secrets;

/* An opened value: len bytes, NUL-terminated. Wiped by secret_value_free. */
struct secret_value {
        size_t len;
        unsigned char bytes[];
};
void secret_value_free(struct secret_value *v);

/* Load key_file, checking it: absolute, a regular file (no symlink), not
 * under data_dir, mode without group or other bits, 64 hex digits. On
 * failure err says why. */
int secrets_open(const char *key_file, const char *data_dir, struct secrets **ret, struct sbx_error *err);
void secrets_free(struct secrets *s);

/* [A-Z_][A-Z0-9_]{0,63}: an environment variable name. */
bool secrets_name_valid(const char *name);
/* hosts: a JSON array of 1-SECRETS_MAX_HOSTS hostnames (no address
 * literal, no wildcard, no port); *ret_json their canonical (lower case,
 * deduplicated) JSON array, malloc'd. */
int secrets_hosts_check(const cJSON *hosts, char **ret_json, struct sbx_error *err);

/* Seal value for user's secret name (*ret malloc'd base64), and open it. */
int secrets_seal(const struct secrets *s, const char *user, const char *name, const void *value, size_t len,
                 char **ret);
/* -EBADMSG when sealed was not made by this key for this user and name. */
int secrets_unseal(const struct secrets *s, const char *user, const char *name, const char *sealed,
                   struct secret_value **ret);

/* The methods (store rows, audit rows naming the secret, never its value).
 * s NULL (no key file): -EOPNOTSUPP. */
int secrets_set(const struct secrets *s, struct store *st, const char *user, const char *name, const void *value,
                size_t len, const cJSON *hosts, const char *header, const char *actor, struct sbx_error *err);
/* E2B's create and update (STORE_SECRET_CREATE or _UPDATE): a secret with
 * no hosts of its own (it reaches a host only through a session's
 * attachment that names one, e2b's transform rules), metadata_json as
 * store_secret_put takes it; ret gets the row stored. Audited as set. */
int secrets_put_hostless(const struct secrets *s, struct store *st, const char *user, const char *name,
                         const void *value, size_t len, enum store_secret_mode mode, const char *metadata_json,
                         const char *actor, struct store_secret *ret, struct sbx_error *err);
int secrets_delete(struct store *st, const char *user, const char *name, const char *actor, struct sbx_error *err);
/* {secrets: [{name, hosts, header, created_at, updated_at}], count, max_count}; NULL on OOM or a store error. */
cJSON *secrets_list_json(struct store *st, const char *user);

/* What the fronts share (API methods, admin commands): the arguments read
 * from p ({name, value, hosts, header?} and {name}) for user, the answer
 * made, e filled on failure (-1). s NULL: unavailable. */
struct jparams;
struct fronterr;
int secrets_front_set(const struct secrets *s, struct store *st, const char *user, const struct jparams *p,
                      const char *actor, cJSON **ret, struct fronterr *e);
int secrets_front_delete(struct store *st, const char *user, const struct jparams *p, const char *actor, cJSON **ret,
                         struct fronterr *e);
int secrets_front_list(struct store *st, const char *user, cJSON **ret, struct fronterr *e);

/* Attachments (issue 37, part 2): the session's executions get
 * name=placeholder in their environment, a random "sbx_ph_" + 32 hex per
 * session and attachment, never the value. Audited by name only. attach:
 * -ENOENT (no such secret), -EEXIST (attached), -EDQUOT (past
 * SECRETS_MAX_PER_SESSION); detach: -ENOENT (not attached). */
int secrets_attach(struct store *st, const char *user, const char *session, const char *name, const char *actor,
                   struct sbx_error *err);
int secrets_detach(struct store *st, const char *user, const char *session, const char *name, const char *actor,
                   struct sbx_error *err);
/* A rule on the attachment (E2B's network.rules): hosts (as secrets_hosts_check)
 * in place of the secret's, and a header the egress proxy sets on HTTPS
 * requests to them, replacing the sandbox's header of that name: header an
 * HTTP header name (not Host, a hop-by-hop one or a body's framing), tmpl
 * its value, 1-SECRETS_RULE_VALUE_MAX bytes of printable ASCII, space and
 * tab, holding SECRETS_RULE_MARK exactly once: the attachment's placeholder
 * goes there, and the proxy swaps the value in. secrets_attach with the
 * rule set before it returns; on a bad rule nothing is attached. */
#define SECRETS_RULE_VALUE_MAX 512
#define SECRETS_RULE_MARK "${secret}"
int secrets_rule_check(const cJSON *hosts, const char *header, const char *tmpl, char **ret_hosts_json,
                       struct sbx_error *err);
int secrets_attach_rule(struct store *st, const char *user, const char *session, const char *name, const cJSON *hosts,
                        const char *header, const char *tmpl, const char *actor, struct sbx_error *err);
/* Drop every attachment of session (a new session of an old name starts with none). */
void secrets_detach_all(struct store *st, const char *user, const char *session);
/* The names attached to session, a JSON array; NULL on a store error or OOM. */
cJSON *secrets_attached_names(struct store *st, const char *user, const char *session);
/* names (create_session's params.secrets): an array of at most
 * SECRETS_MAX_PER_SESSION distinct names of user's secrets. */
int secrets_check_names(struct store *st, const char *user, const cJSON *names, struct sbx_error *err);
/* attach_secret / detach_secret {name}: {session, name, secrets: [names]}. */
int secrets_front_attach(struct store *st, const char *user, const char *session, const struct jparams *p,
                         const char *actor, cJSON **ret, struct fronterr *e);
int secrets_front_detach(struct store *st, const char *user, const char *session, const struct jparams *p,
                         const char *actor, cJSON **ret, struct fronterr *e);
#endif
