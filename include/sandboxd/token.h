/* token.h — API tokens: who is calling the API socket.
 *
 * A token is "sbx_" followed by 64 hex digits (32 random bytes). It is shown
 * once, when created; the store keeps only its SHA-256 digest, with an id
 * (16 hex digits, safe to show and log), the user it acts for and its role:
 *   agent      every API method on the user's own sessions except mark_private;
 *   connector  the same plus mark_private (a data connector declaring that it
 *              put private data into a session).
 * Verification hashes the presented token, looks the digest up and compares
 * digests in constant time; a revoked token is refused like an unknown one.
 *
 * E2B's spelling: the same secret with the prefix "e2b_" (TOKEN_PREFIX_E2B)
 * in place of "sbx_" is the same token, accepted wherever the other is. It
 * is what E2B's SDKs check an API key against ("e2b_" then hex), so a token
 * shown that way (sandboxctl token create USER ROLE e2b) drives them
 * unchanged (docs/e2b.md). */
#ifndef SANDBOXD_TOKEN_H
#define SANDBOXD_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/common.h"

struct store;

#define TOKEN_PREFIX "sbx_"
#define TOKEN_PREFIX_E2B "e2b_"
#define TOKEN_LEN (4 + 64) /* characters, without the NUL */
#define TOKEN_ID_LEN 16

enum token_role {
        TOKEN_ROLE_AGENT,
        TOKEN_ROLE_CONNECTOR,
        /* reads every user's sessions (list_sessions) and events, users and
         * quotas, the pool, the nodes and the daemon's health, as the admin
         * socket shows them, and nothing else: every other method is
         * forbidden (api.c), so it can neither run nor change anything */
        TOKEN_ROLE_OPERATOR,
};
const char *token_role_to_string(enum token_role r);
/* "agent" | "connector" | "operator"; -EINVAL otherwise. */
int token_role_from_string(const char *s, enum token_role *ret);

struct token_info {
        char id[TOKEN_ID_LEN + 1];
        char user[65];
        enum token_role role;
        int64_t created_at; /* unix ms */
        int64_t revoked_at; /* 0 = live */
};

/* Create a token for user (a valid session-style id). Writes the token
 * (shown only now) and its row. -EINVAL for a bad user. */
int token_create(struct store *st, const char *user, enum token_role role, char ret_token[TOKEN_LEN + 1],
                 struct token_info *ret_info, struct sbx_error *err);
/* -ENOENT for an unknown id, -EALREADY if it is revoked already. */
int token_revoke(struct store *st, const char *id, struct sbx_error *err);
/* Every token (never the secret), oldest first. malloc'd array. */
int token_list(struct store *st, struct token_info **ret, size_t *ret_n);
/* The live token's row; -EACCES for anything else (malformed, unknown,
 * revoked), -EIO and friends if the store fails. */
int token_verify(struct store *st, const char *token, struct token_info *ret);

/* The token in E2B's spelling (or back: TOKEN_PREFIX), in place; -EINVAL
 * when it is not a token of either spelling. */
int token_respell(char token[TOKEN_LEN + 1], const char *prefix);

/* Compare n bytes without an early exit. */
bool token_equal_ct(const void *a, const void *b, size_t n);

#endif
