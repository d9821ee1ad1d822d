/* store_secret.c — typed queries of the secrets table (issue 37). The
 * store only ever sees a secret sealed (secrets.c seals and opens); list
 * never reads the sealed column. Locking as in store.c: every function holds
 * the store lock for its whole duration. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"

#define SECRET_COLUMNS "user_id, name, hosts_json, header, created_at, updated_at, secret_id, version"
#define SEALED_COL 8 /* after SECRET_COLUMNS */

static void secret_from_row(struct store_query *q, void *p)
{
        struct store_secret *row = p;

        memset(row, 0, sizeof(*row));
        sq_col_text(q, 0, row->user_id, sizeof(row->user_id));
        sq_col_text(q, 1, row->name, sizeof(row->name));
        sq_col_text(q, 2, row->hosts_json, sizeof(row->hosts_json));
        sq_col_text(q, 3, row->header, sizeof(row->header));
        row->created_at = sq_col_int64(q, 4);
        row->updated_at = sq_col_int64(q, 5);
        sq_col_text(q, 6, row->secret_id, sizeof(row->secret_id));
        row->version = sq_col_int64(q, 7);
}

/* Under the store lock: the row of user's secret whose column (name or
 * secret_id) is key, into ret (may be NULL). */
static int secret_row_locked(struct store *s, const char *user, const char *column, const char *key,
                             struct store_secret *ret)
{
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s,
                         strcmp(column, "secret_id") == 0
                                 ? "SELECT " SECRET_COLUMNS " FROM secrets WHERE user_id = ?1 AND secret_id = ?2"
                                 : "SELECT " SECRET_COLUMNS " FROM secrets WHERE user_id = ?1 AND name = ?2");

        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, key);
        r = sq_step(&q);
        if (r <= 0)
                return r < 0 ? r : -ENOENT;
        if (ret)
                secret_from_row(&q, ret);
        return 0;
}

int store_secret_put(struct store *s, const struct store_secret *row, const char *sealed, int max_per_user,
                     enum store_secret_mode mode, const char *metadata_json, struct store_secret *row_out)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        char id[32], hex[25];
        bool exists;
        int r;

        if (!row || !sealed || !store_key_ok(row->user_id) || !row->name[0] ||
            (mode != STORE_SECRET_UPDATE && !row->hosts_json[0]) ||
            (metadata_json && strlen(metadata_json) > STORE_SECRET_METADATA_MAX))
                return -EINVAL;
        /* a replacement never counts against the cap; one lock covers the check and the write */
        r = sq_start(&q, s,
                     "SELECT (SELECT COUNT(*) FROM secrets WHERE user_id = ?1), "
                     "EXISTS (SELECT 1 FROM secrets WHERE user_id = ?1 AND name = ?2)");
        if (r < 0)
                return r;
        sq_text(&q, row->user_id);
        sq_text(&q, row->name);
        r = sq_step(&q);
        if (r <= 0)
                return r < 0 ? r : -EIO;
        exists = sq_col_int64(&q, 1) != 0;
        if (!exists && mode == STORE_SECRET_UPDATE)
                return -ENOENT;
        if (exists && mode == STORE_SECRET_CREATE)
                return -EEXIST;
        if (!exists && sq_col_int64(&q, 0) >= max_per_user)
                return -EDQUOT;
        sq_end(&q);

        if (exists) {
                r = sq_start(&q, s,
                             mode == STORE_SECRET_UPDATE
                                     ? "UPDATE secrets SET sealed = ?3, updated_at = ?4, version = version + 1, "
                                       "metadata_json = COALESCE(?5, metadata_json) WHERE user_id = ?1 AND name = ?2"
                                     : "UPDATE secrets SET sealed = ?3, updated_at = ?4, version = version + 1, "
                                       "metadata_json = COALESCE(?5, metadata_json), hosts_json = ?6, header = ?7 "
                                       "WHERE user_id = ?1 AND name = ?2");
                if (r < 0)
                        return r;
                sq_text(&q, row->user_id);
                sq_text(&q, row->name);
                sq_text(&q, sealed);
                sq_int64(&q, row->updated_at);
                sq_text_opt(&q, metadata_json);
                if (mode != STORE_SECRET_UPDATE) {
                        sq_text(&q, row->hosts_json);
                        sq_text_opt(&q, row->header);
                }
        } else {
                if (sbx_random_hex(hex, 12) < 0)
                        return -EIO;
                snprintf(id, sizeof(id), "sec_%s", hex);
                r = sq_start(&q, s,
                             "INSERT INTO secrets (user_id, name, hosts_json, header, sealed, created_at, "
                             "updated_at, secret_id, version, metadata_json) "
                             "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, 1, COALESCE(?8, '{}'))");
                if (r < 0)
                        return r;
                sq_text(&q, row->user_id);
                sq_text(&q, row->name);
                sq_text(&q, row->hosts_json);
                sq_text_opt(&q, row->header);
                sq_text(&q, sealed);
                sq_int64(&q, row->updated_at);
                sq_text(&q, id);
                sq_text_opt(&q, metadata_json);
        }
        r = sq_exec(&q);
        if (r < 0)
                return r;
        sq_end(&q);
        return row_out ? secret_row_locked(s, row->user_id, "name", row->name, row_out) : 0;
}

int store_secret_get_by_id(struct store *s, const char *user, const char *secret_id, struct store_secret *ret)
{
        STORE_LOCK(s);

        if (!user || !secret_id || !ret)
                return -EINVAL;
        return secret_row_locked(s, user, "secret_id", secret_id, ret);
}

int store_secret_metadata(struct store *s, const char *user, const char *name, char **ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        const unsigned char *text;
        int r;

        if (!user || !name || !ret)
                return -EINVAL;
        r = sq_start(&q, s, "SELECT metadata_json FROM secrets WHERE user_id = ?1 AND name = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, name);
        r = sq_step(&q);
        if (r <= 0)
                return r < 0 ? r : -ENOENT;
        text = sqlite3_column_text(q.stmt, 0);
        *ret = strdup(text ? (const char *)text : "{}");
        return *ret ? 0 : -ENOMEM;
}

int store_secret_get(struct store *s, const char *user, const char *name, struct store_secret *ret, char **ret_sealed)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        const unsigned char *text;
        char *sealed = NULL;
        int r;

        if (!user || !name || !ret)
                return -EINVAL;
        r = sq_start(&q, s, "SELECT " SECRET_COLUMNS ", sealed FROM secrets WHERE user_id = ?1 AND name = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, name);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOENT;
        if (ret_sealed) {
                text = sqlite3_column_text(q.stmt, SEALED_COL);
                sealed = strdup(text ? (const char *)text : "");
                if (!sealed)
                        return -ENOMEM;
                *ret_sealed = sealed;
        }
        secret_from_row(&q, ret);
        return 0;
}

int store_secret_list(struct store *s, const char *user, struct store_secret **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!user || !ret || !ret_n)
                return -EINVAL;
        r = sq_start(&q, s, "SELECT " SECRET_COLUMNS " FROM secrets WHERE user_id = ?1 ORDER BY name");
        if (r < 0)
                return r;
        sq_text(&q, user);
        return SQ_COLLECT(&q, secret_from_row, ret, ret_n);
}

int store_secret_delete(struct store *s, const char *user, const char *name)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!user || !name)
                return -EINVAL;
        r = sq_start(&q, s, "DELETE FROM secrets WHERE user_id = ?1 AND name = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, name);
        r = sq_exec(&q);
        if (r <= 0)
                return r < 0 ? r : -ENOENT;
        sq_end(&q);
        /* its attachments go with it: no session keeps a placeholder of nothing */
        r = sq_start(&q, s, "DELETE FROM session_secrets WHERE user_id = ?1 AND name = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, name);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

/* ---- attachments to sessions (issue 37, part 2) ---- */

static void attachment_from_row(struct store_query *q, void *p)
{
        struct store_session_secret *row = p;

        memset(row, 0, sizeof(*row));
        sq_col_text(q, 0, row->name, sizeof(row->name));
        sq_col_text(q, 1, row->placeholder, sizeof(row->placeholder));
        row->created_at = sq_col_int64(q, 2);
        sq_col_text(q, 3, row->rule_hosts_json, sizeof(row->rule_hosts_json));
        sq_col_text(q, 4, row->rule_header, sizeof(row->rule_header));
        sq_col_text(q, 5, row->rule_template, sizeof(row->rule_template));
}

int store_session_secret_attach(struct store *s, const char *user, const char *session, const char *name,
                                const char *placeholder, int max_per_session)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !session || !session[0] || !name || !name[0] || !placeholder || !placeholder[0])
                return -EINVAL;
        r = sq_start(&q, s,
                     "SELECT EXISTS (SELECT 1 FROM secrets WHERE user_id = ?1 AND name = ?3), "
                     "EXISTS (SELECT 1 FROM session_secrets WHERE user_id = ?1 AND session_id = ?2 AND name = ?3), "
                     "(SELECT COUNT(*) FROM session_secrets WHERE user_id = ?1 AND session_id = ?2)");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text(&q, name);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r == 0 || sq_col_int64(&q, 0) == 0)
                return -ENOENT;
        if (sq_col_int64(&q, 1) != 0)
                return -EEXIST;
        if (sq_col_int64(&q, 2) >= max_per_session)
                return -EDQUOT;
        sq_end(&q);

        r = sq_start(&q, s,
                     "INSERT INTO session_secrets (user_id, session_id, name, placeholder, created_at) "
                     "VALUES (?1, ?2, ?3, ?4, ?5)");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text(&q, name);
        sq_text(&q, placeholder);
        sq_int64(&q, sbx_wall_ms());
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_session_secret_set_rule(struct store *s, const char *user, const char *session, const char *name,
                                  const char *hosts_json, const char *header, const char *tmpl)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!user || !session || !name || !hosts_json || !hosts_json[0] || !header || !header[0] || !tmpl || !tmpl[0] ||
            strlen(hosts_json) >= STORE_SECRET_HOSTS_JSON_MAX || strlen(header) > 64 ||
            strlen(tmpl) >= STORE_SECRET_TEMPLATE_MAX)
                return -EINVAL;
        r = sq_start(&q, s,
                     "UPDATE session_secrets SET rule_hosts_json = ?4, rule_header = ?5, rule_template = ?6 "
                     "WHERE user_id = ?1 AND session_id = ?2 AND name = ?3");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text(&q, name);
        sq_text(&q, hosts_json);
        sq_text(&q, header);
        sq_text(&q, tmpl);
        r = sq_exec(&q);
        return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

int store_session_secret_detach(struct store *s, const char *user, const char *session, const char *name)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!user || !session || !name)
                return -EINVAL;
        r = sq_start(&q, s, "DELETE FROM session_secrets WHERE user_id = ?1 AND session_id = ?2 AND name = ?3");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text(&q, name);
        r = sq_exec(&q);
        return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

int store_session_secret_list(struct store *s, const char *user, const char *session, struct store_session_secret **ret,
                              size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!user || !session || !ret || !ret_n)
                return -EINVAL;
        r = sq_start(
                &q, s,
                "SELECT name, placeholder, created_at, rule_hosts_json, rule_header, rule_template FROM session_secrets "
                "WHERE user_id = ?1 AND session_id = ?2 ORDER BY name");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        return SQ_COLLECT(&q, attachment_from_row, ret, ret_n);
}

int store_session_secret_drop(struct store *s, const char *user, const char *session)
{
        STORE_LOCK(s);
        int r;

        if (!user || !session)
                return -EINVAL;
        r = store_exec_key(s, "DELETE FROM session_secrets WHERE user_id = ?1 AND session_id = ?2", user, session);
        if (r < 0)
                return r;
        return store_exec_key(s, "DELETE FROM session_ca WHERE user_id = ?1 AND session_id = ?2", user, session);
}

int store_session_ca_add(struct store *s, const char *user, const char *session, const char *cert_pem,
                         const char *key_sealed)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(user) || !session || !session[0] || !cert_pem || !key_sealed)
                return -EINVAL;
        /* the first writer wins: a racing second one reads the first's */
        r = sq_start(&q, s,
                     "INSERT OR IGNORE INTO session_ca (user_id, session_id, cert_pem, key_sealed, created_at) "
                     "VALUES (?1, ?2, ?3, ?4, ?5)");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        sq_text(&q, cert_pem);
        sq_text(&q, key_sealed);
        sq_int64(&q, sbx_wall_ms());
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

static char *col_dup(struct store_query *q, int col)
{
        const unsigned char *text = sqlite3_column_text(q->stmt, col);
        return strdup(text ? (const char *)text : "");
}

int store_session_ca_get(struct store *s, const char *user, const char *session, char **ret_cert_pem,
                         char **ret_key_sealed)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        _cleanup_free_ char *cert = NULL, *key = NULL;
        int r;

        if (!user || !session || !ret_cert_pem)
                return -EINVAL;
        r = sq_start(&q, s, "SELECT cert_pem, key_sealed FROM session_ca WHERE user_id = ?1 AND session_id = ?2");
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_step(&q);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOENT;
        cert = col_dup(&q, 0);
        key = ret_key_sealed ? col_dup(&q, 1) : strdup("");
        if (!cert || !key)
                return -ENOMEM;
        *ret_cert_pem = TAKE_PTR(cert);
        if (ret_key_sealed)
                *ret_key_sealed = TAKE_PTR(key);
        return 0;
}
