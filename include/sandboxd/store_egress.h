/* store_egress.h — the store's egress tables (migration 0012): allowlist
 * additions per user and per session, and the audit of every egress
 * decision. Typed queries only; src/store/store_egress.c runs the SQL. */
#ifndef SANDBOXD_STORE_EGRESS_H
#define SANDBOXD_STORE_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store;

#define STORE_EGRESS_PATTERN_MAX 272 /* a host name (253) with "*." and ":port" */
#define STORE_EGRESS_HOST_MAX 256

struct store_egress_rule {
        char user_id[65];
        char session_id[65]; /* "" = every session of the user */
        char pattern[STORE_EGRESS_PATTERN_MAX];
        int64_t created_at;
};

/* Add a rule (session NULL or "": user-wide). Idempotent: an existing rule
 * is kept. -EDQUOT when the scope already holds max_rules rules. */
int store_egress_rule_add(struct store *s, const char *user, const char *session, const char *pattern,
                          const char *actor, int64_t now_ms, size_t max_rules);
/* Remove a rule: 0, or -ENOENT when it did not exist. */
int store_egress_rule_remove(struct store *s, const char *user, const char *session, const char *pattern);
/* The user-wide rules and, with session non-NULL, the session's, ordered by
 * scope then pattern. malloc'd array. */
int store_egress_rules(struct store *s, const char *user, const char *session, struct store_egress_rule **ret,
                       size_t *ret_n);

/* A session's own narrowing of its egress (migration 0039; egress_rules.h
 * says what it means). Patterns are checked by the caller. */
#define STORE_EGRESS_NARROW_MAX 32
struct store_egress_narrow {
        bool allow_only; /* only the allow patterns pass (none: no egress) */
        size_t n_allow, n_deny;
        char allow[STORE_EGRESS_NARROW_MAX][STORE_EGRESS_PATTERN_MAX];
        char deny[STORE_EGRESS_NARROW_MAX][STORE_EGRESS_PATTERN_MAX];
};
/* Replace the session's narrowing with n (one with nothing in it removes
 * it). -EINVAL past STORE_EGRESS_NARROW_MAX or on a bad key. */
int store_egress_narrow_put(struct store *s, const char *user, const char *session, const struct store_egress_narrow *n,
                            int64_t now_ms);
/* The session's narrowing into *ret: 1 when it has one, 0 (ret emptied) when not. */
int store_egress_narrow_get(struct store *s, const char *user, const char *session, struct store_egress_narrow *ret);
/* Remove it (the session is destroyed). */
int store_egress_narrow_drop(struct store *s, const char *user, const char *session);

struct store_egress_entry {
        int64_t id;
        int64_t ts; /* unix ms */
        char host[STORE_EGRESS_HOST_MAX];
        int port;
        char method[16];
        char decision[8]; /* allowed | blocked */
        char reason[64];  /* "narrowed:<execution id>" fits */
        char address[64]; /* "" when nothing was connected */
        int64_t bytes_up, bytes_down, duration_ms;
        int64_t suppressed;
};

int store_egress_log_add(struct store *s, const char *user, const char *session, const struct store_egress_entry *row);
/* The newest `limit` (1-100000) rows of user:session, newest first. malloc'd array. */
int store_egress_log_list(struct store *s, const char *user, const char *session, size_t limit,
                          struct store_egress_entry **ret, size_t *ret_n);
/* Rows written before before_ms (gc.audit_retention): deleted, or with dry_run
 * counted. Returns how many. */
int store_gc_egress_prune(struct store *s, int64_t before_ms, bool dry_run);

#endif
