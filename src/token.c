/* token.c — API tokens: creation (random secret, digest stored), revocation,
 * listing and constant-time verification. No state of its own: the store
 * holds every row. Thread-safe as the store is. */
#include "sandboxd/token.h"

#include <errno.h>
#include <string.h>

#include "sandboxd/session.h"
#include "sandboxd/sha256.h"
#include "sandboxd/store.h"

static const char *const role_names[] = {
        [TOKEN_ROLE_AGENT] = "agent", [TOKEN_ROLE_CONNECTOR] = "connector", [TOKEN_ROLE_OPERATOR] = "operator"};

const char *token_role_to_string(enum token_role r)
{
        return (unsigned)r < ELEMENTSOF(role_names) ? role_names[r] : "unknown";
}

int token_role_from_string(const char *s, enum token_role *ret)
{
        for (size_t i = 0; s && i < ELEMENTSOF(role_names); i++)
                if (strcmp(s, role_names[i]) == 0) {
                        *ret = (enum token_role)i;
                        return 0;
                }
        return -EINVAL;
}

bool token_equal_ct(const void *a, const void *b, size_t n)
{
        const volatile unsigned char *x = a, *y = b;
        unsigned char d = 0;

        for (size_t i = 0; i < n; i++)
                d |= x[i] ^ y[i];
        return d == 0;
}

static void info_from_row(const struct store_token *row, struct token_info *ret)
{
        memset(ret, 0, sizeof(*ret));
        sbx_strlcpy(ret->id, row->id, sizeof(ret->id));
        sbx_strlcpy(ret->user, row->user_id, sizeof(ret->user));
        (void)token_role_from_string(row->role, &ret->role);
        ret->created_at = row->created_at;
        ret->revoked_at = row->revoked_at;
}

int token_create(struct store *st, const char *user, enum token_role role, char ret_token[TOKEN_LEN + 1],
                 struct token_info *ret_info, struct sbx_error *err)
{
        struct store_token row = {0};
        char token[TOKEN_LEN + 1];
        int r;

        if (!session_id_valid(user))
                return sbx_error_set(err, -EINVAL, 0, "user must be 1-64 characters of [A-Za-z0-9_.-]");
        if ((unsigned)role >= ELEMENTSOF(role_names))
                return sbx_error_set(err, -EINVAL, 0, "role must be agent, connector or operator");

        memcpy(token, TOKEN_PREFIX, 4);
        r = sbx_random_hex(token + 4, 32);
        if (r == 0)
                r = sbx_random_hex(row.id, TOKEN_ID_LEN / 2);
        if (r < 0)
                return sbx_error_set(err, r, 0, "no randomness: %s", strerror(-r));
        sbx_strlcpy(row.user_id, user, sizeof(row.user_id));
        sbx_strlcpy(row.role, role_names[role], sizeof(row.role));
        if (sha256_hex(token, TOKEN_LEN, row.token_sha256) < 0)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        row.created_at = sbx_wall_ms();
        r = store_token_add(st, &row);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot record the token: %s", strerror(-r));
        memcpy(ret_token, token, sizeof(token));
        explicit_bzero(token, sizeof(token));
        if (ret_info)
                info_from_row(&row, ret_info);
        return 0;
}

int token_revoke(struct store *st, const char *id, struct sbx_error *err)
{
        int r = store_token_revoke(st, id, sbx_wall_ms());

        if (r == -ENOENT || r == -EINVAL)
                return sbx_error_set(err, -ENOENT, 0, "no token with id %s", id ? id : "");
        if (r == -EALREADY)
                return sbx_error_set(err, r, 0, "token %s is already revoked", id);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot revoke token %s: %s", id, strerror(-r));
        return 0;
}

static void info_from_row_v(const void *row, void *info)
{
        info_from_row(row, info);
}

int token_list(struct store *st, struct token_info **ret, size_t *ret_n)
{
        struct store_token *rows = NULL;
        size_t n = 0;
        int r = store_token_list(st, &rows, &n);

        return r < 0 ? r : sbx_rows_convert(rows, n, sizeof(*rows), sizeof(**ret), info_from_row_v, ret, ret_n);
}

static bool token_well_formed(const char *t)
{
        if (!t || (strncmp(t, TOKEN_PREFIX, 4) != 0 && strncmp(t, TOKEN_PREFIX_E2B, 4) != 0) || strlen(t) != TOKEN_LEN)
                return false;
        for (const char *p = t + 4; *p; p++)
                if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
                        return false;
        return true;
}

int token_respell(char token[TOKEN_LEN + 1], const char *prefix)
{
        if (!token_well_formed(token) || (strcmp(prefix, TOKEN_PREFIX) != 0 && strcmp(prefix, TOKEN_PREFIX_E2B) != 0))
                return -EINVAL;
        memcpy(token, prefix, 4);
        return 0;
}

int token_verify(struct store *st, const char *token, struct token_info *ret)
{
        struct store_token row;
        char canon[TOKEN_LEN + 1], digest[65];
        int r;

        if (!token_well_formed(token))
                return -EACCES;
        /* the digest is of the sbx_ spelling: an e2b_ token is the same secret */
        memcpy(canon, token, sizeof(canon));
        memcpy(canon, TOKEN_PREFIX, 4);
        r = sha256_hex(canon, TOKEN_LEN, digest);
        explicit_bzero(canon, sizeof(canon));
        if (r < 0)
                return -ENOMEM;
        /* The lookup is by digest, so its timing says nothing about the
         * secret; the final comparison is constant-time all the same. */
        r = store_token_get_by_digest(st, digest, &row);
        if (r == -ENOENT)
                return -EACCES;
        if (r < 0)
                return r;
        if (strlen(row.token_sha256) != 64 || !token_equal_ct(row.token_sha256, digest, 64))
                return -EACCES;
        if (row.revoked_at != 0)
                return -EACCES;
        info_from_row(&row, ret);
        return 0;
}
