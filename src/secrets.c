/* secrets.c — per-user secrets (secrets.h): the key file, validation of
 * names and hosts, sealing with AES-256-GCM (libcrypto's EVP), and the
 * set / delete / list the fronts call. No thread of its own; struct secrets
 * is read-only once open, so any thread may seal and open with it. Values
 * are never passed to a formatter: an error names the secret, never what it
 * holds. */
#include "sandboxd/secrets.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/audit.h"
#include "sandboxd/egress_policy.h"
#include "sandboxd/fronterr.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/store.h"
#include "sandboxd/utf8.h"

#define NONCE_LEN 12
#define TAG_LEN 16
#define KEY_HEX_LEN (2 * SECRETS_KEY_LEN)

struct secrets {
        unsigned char key[SECRETS_KEY_LEN];
};

void secret_value_free(struct secret_value *v)
{
        if (!v)
                return;
        OPENSSL_cleanse(v, sizeof(*v) + v->len + 1);
        free(v);
}

void secrets_free(struct secrets *s)
{
        if (!s)
                return;
        OPENSSL_cleanse(s, sizeof(*s));
        free(s);
}

/* Is path inside dir (lexically, both absolute and as configured)? */
static bool path_under(const char *path, const char *dir)
{
        size_t n = strlen(dir);

        while (n > 1 && dir[n - 1] == '/')
                n--;
        return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static int hexval(int c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        c = tolower(c);
        return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int secrets_open(const char *key_file, const char *data_dir, struct secrets **ret, struct sbx_error *err)
{
        char buf[KEY_HEX_LEN + 2], real[PATH_MAX], real_data[PATH_MAX]; /* realpath writes up to PATH_MAX */
        struct secrets *s = NULL;
        struct stat st;
        ssize_t n;
        int fd, r;

        if (!key_file || key_file[0] != '/')
                return sbx_error_set(err, -EINVAL, 0, "secrets_key_file must be an absolute path");
        /* the key must not travel with the data it protects (backups, snapshots of data_dir) */
        if (path_under(key_file, data_dir) ||
            (realpath(data_dir, real_data) && realpath(key_file, real) && path_under(real, real_data)))
                return sbx_error_set(err, -EPERM, 0, "secrets_key_file %s is inside data_dir %s: keep it elsewhere",
                                     key_file, data_dir);
        fd = open(key_file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        if (fd < 0)
                return sbx_error_set(err, -errno, 0,
                                     "secrets_key_file %s: %s (`sandboxctl secret keygen PATH` makes one)", key_file,
                                     strerror(errno));
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                close(fd);
                return sbx_error_set(err, -EINVAL, 0, "secrets_key_file %s is not a regular file", key_file);
        }
        if ((st.st_mode & (S_IRWXG | S_IRWXO)) || st.st_uid != geteuid()) {
                close(fd);
                return sbx_error_set(err, -EPERM, 0,
                                     "secrets_key_file %s must be owned by the daemon's user and readable by it alone "
                                     "(mode 0600 or 0400; it is %04o)",
                                     key_file, (unsigned)(st.st_mode & 07777));
        }
        n = read(fd, buf, sizeof(buf));
        close(fd);
        if (n == KEY_HEX_LEN + 1 && buf[KEY_HEX_LEN] == '\n')
                n--;
        s = calloc(1, sizeof(*s));
        if (!s) {
                OPENSSL_cleanse(buf, sizeof(buf));
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        r = n == KEY_HEX_LEN ? 0 : -EINVAL;
        for (size_t i = 0; r == 0 && i < SECRETS_KEY_LEN; i++) {
                int hi = hexval((unsigned char)buf[2 * i]), lo = hexval((unsigned char)buf[2 * i + 1]);
                if (hi < 0 || lo < 0)
                        r = -EINVAL;
                else
                        s->key[i] = (unsigned char)(hi << 4 | lo);
        }
        OPENSSL_cleanse(buf, sizeof(buf));
        if (r < 0) {
                secrets_free(s);
                return sbx_error_set(err, r, 0, "secrets_key_file %s must hold 64 hex digits (a 256-bit key)",
                                     key_file);
        }
        *ret = s;
        return 0;
}

bool secrets_name_valid(const char *name)
{
        size_t n = name ? strlen(name) : 0;

        if (n == 0 || n > SECRETS_NAME_MAX || isdigit((unsigned char)name[0]))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((name[i] >= 'A' && name[i] <= 'Z') || (name[i] >= '0' && name[i] <= '9') || name[i] == '_'))
                        return false;
        return true;
}

static bool header_valid(const char *h)
{
        size_t n = strlen(h);

        if (n == 0 || n > SECRETS_HEADER_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)h[i]) && h[i] != '-')
                        return false;
        return true;
}

int secrets_hosts_check(const cJSON *hosts, char **ret_json, struct sbx_error *err)
{
        char canon[EGRESS_HOST_MAX];
        const cJSON *h;
        cJSON *out;
        char *json;
        int n = cJSON_GetArraySize(hosts);

        if (!cJSON_IsArray(hosts) || n < 1 || n > SECRETS_MAX_HOSTS)
                return sbx_error_set(err, -EINVAL, 0, "hosts must be an array of 1 to %d hostnames", SECRETS_MAX_HOSTS);
        out = cJSON_CreateArray();
        if (!out)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        cJSON_ArrayForEach(h, hosts) {
                const char *v = cJSON_IsString(h) ? h->valuestring : NULL;
                const char *last;
                bool numeric = true, dup = false;
                const cJSON *o;

                if (!v || egress_host_normalize(v, strlen(v), canon) < 0 || strchr(canon, ':')) {
                        cJSON_Delete(out);
                        return sbx_error_set(err, -EINVAL, 0, "hosts: each must be a hostname such as api.github.com");
                }
                /* the last label all digits: an address literal in some form, never a name */
                last = strrchr(canon, '.');
                for (const char *p = last ? last + 1 : canon; *p; p++)
                        numeric = numeric && isdigit((unsigned char)*p);
                if (numeric) {
                        cJSON_Delete(out);
                        return sbx_error_set(err, -EINVAL, 0,
                                             "hosts: %s is an address, not a hostname (a secret is bound to a name, "
                                             "which the proxy checks against TLS)",
                                             canon);
                }
                cJSON_ArrayForEach(o, out)
                        dup = dup || strcmp(o->valuestring, canon) == 0;
                if (!dup)
                        cJSON_AddItemToArray(out, cJSON_CreateString(canon));
        }
        json = cJSON_PrintUnformatted(out);
        cJSON_Delete(out);
        if (!json)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        *ret_json = json;
        return 0;
}

/* "user\0name": the additional data binding a sealed value to its row */
static size_t aad_make(const char *user, const char *name, unsigned char *buf, size_t size)
{
        size_t u = strlen(user), n = strlen(name);

        if (u + 1 + n > size)
                return 0;
        memcpy(buf, user, u);
        buf[u] = '\0';
        memcpy(buf + u + 1, name, n);
        return u + 1 + n;
}

int secrets_seal(const struct secrets *s, const char *user, const char *name, const void *value, size_t len, char **ret)
{
        unsigned char aad[SBX_ID_MAX + SECRETS_NAME_MAX + 2], *buf;
        size_t aad_len = aad_make(user, name, aad, sizeof(aad));
        EVP_CIPHER_CTX *c = NULL;
        int outl = 0, finl = 0, r = -EIO;
        char *text;

        if (!s || !aad_len || len > SECRETS_VALUE_MAX)
                return -EINVAL;
        buf = malloc(NONCE_LEN + len + TAG_LEN);
        if (!buf)
                return -ENOMEM;
        if (RAND_bytes(buf, NONCE_LEN) != 1 || !(c = EVP_CIPHER_CTX_new()) ||
            EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, s->key, buf) != 1 ||
            EVP_EncryptUpdate(c, NULL, &outl, aad, (int)aad_len) != 1 ||
            EVP_EncryptUpdate(c, buf + NONCE_LEN, &outl, value, (int)len) != 1 ||
            EVP_EncryptFinal_ex(c, buf + NONCE_LEN + outl, &finl) != 1 ||
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG_LEN, buf + NONCE_LEN + len) != 1)
                goto out;
        text = base64_encode(buf, NONCE_LEN + len + TAG_LEN);
        r = text ? 0 : -ENOMEM;
        if (text)
                *ret = text;
out:
        EVP_CIPHER_CTX_free(c);
        free(buf);
        return r;
}

int secrets_unseal(const struct secrets *s, const char *user, const char *name, const char *sealed,
                   struct secret_value **ret)
{
        unsigned char aad[SBX_ID_MAX + SECRETS_NAME_MAX + 2], *raw = NULL;
        size_t aad_len = aad_make(user, name, aad, sizeof(aad)), raw_len = 0, len;
        struct secret_value *v = NULL;
        EVP_CIPHER_CTX *c = NULL;
        int outl = 0, finl = 0, r = -EBADMSG;

        if (!s || !aad_len || !sealed)
                return -EINVAL;
        if (base64_decode(sealed, strlen(sealed), &raw, &raw_len) < 0)
                return -EBADMSG;
        if (raw_len < NONCE_LEN + TAG_LEN || raw_len - NONCE_LEN - TAG_LEN > SECRETS_VALUE_MAX)
                goto out;
        len = raw_len - NONCE_LEN - TAG_LEN;
        v = malloc(sizeof(*v) + len + 1);
        if (!v) {
                r = -ENOMEM;
                goto out;
        }
        v->len = len;
        if (!(c = EVP_CIPHER_CTX_new()) || EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, s->key, raw) != 1 ||
            EVP_DecryptUpdate(c, NULL, &outl, aad, (int)aad_len) != 1 ||
            EVP_DecryptUpdate(c, v->bytes, &outl, raw + NONCE_LEN, (int)len) != 1 ||
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG_LEN, raw + NONCE_LEN + len) != 1 ||
            EVP_DecryptFinal_ex(c, v->bytes + outl, &finl) != 1)
                goto out; /* a wrong key, user, name, or any flipped bit */
        v->bytes[len] = '\0';
        *ret = v;
        v = NULL;
        r = 0;
out:
        EVP_CIPHER_CTX_free(c);
        secret_value_free(v);
        free(raw);
        return r;
}

static void audit_secret(struct store *st, const char *actor, const char *user, const char *action, const char *name)
{
        cJSON *d = cJSON_CreateObject();

        cJSON_AddStringToObject(d, "name", name);            /* the name only, never the value */
        audit_record_json(st, actor, user, NULL, action, d); /* takes d */
}

/* The key, the name and the value as every write takes them. */
static int input_check(const struct secrets *s, const char *name, const void *value, size_t len, struct sbx_error *err)
{
        if (!s)
                return sbx_error_set(err, -EOPNOTSUPP, 0,
                                     "secrets are off in this daemon: the operator sets secrets_key_file");
        if (!secrets_name_valid(name))
                return sbx_error_set(err, -EINVAL, 0,
                                     "name must be 1-%d characters of A-Z, 0-9 and _, not starting with a digit",
                                     SECRETS_NAME_MAX);
        if (len == 0 || len > SECRETS_VALUE_MAX)
                return sbx_error_set(err, len ? -E2BIG : -EINVAL, 0, "value must be 1 to %d bytes", SECRETS_VALUE_MAX);
        /* the value may go into an HTTP header: a NUL, CR or LF would end or split it */
        if (memchr(value, '\0', len) || memchr(value, '\r', len) || memchr(value, '\n', len))
                return sbx_error_set(err, -EINVAL, 0, "value must not contain a NUL, CR or LF byte");
        return 0;
}

int secrets_set(const struct secrets *s, struct store *st, const char *user, const char *name, const void *value,
                size_t len, const cJSON *hosts, const char *header, const char *actor, struct sbx_error *err)
{
        struct store_secret row = {0};
        _cleanup_free_ char *hosts_json = NULL, *sealed = NULL;
        int r;

        r = input_check(s, name, value, len, err);
        if (r < 0)
                return r;
        if (header && !header_valid(header))
                return sbx_error_set(err, -EINVAL, 0, "header must be an HTTP header name (A-Z, a-z, 0-9, -; 1-%d)",
                                     SECRETS_HEADER_MAX);
        r = secrets_hosts_check(hosts, &hosts_json, err);
        if (r < 0)
                return r;
        if (strlen(hosts_json) >= sizeof(row.hosts_json))
                return sbx_error_set(err, -EINVAL, 0, "hosts are too long");
        r = secrets_seal(s, user, name, value, len, &sealed);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot seal secret %s", name);
        snprintf(row.user_id, sizeof(row.user_id), "%s", user);
        snprintf(row.name, sizeof(row.name), "%s", name);
        snprintf(row.hosts_json, sizeof(row.hosts_json), "%s", hosts_json);
        snprintf(row.header, sizeof(row.header), "%s", header ? header : "");
        row.updated_at = sbx_now_ms();
        r = store_secret_put(st, &row, sealed, SECRETS_MAX_PER_USER, STORE_SECRET_UPSERT, NULL, NULL);
        if (r == -EDQUOT)
                return sbx_error_set(err, r, 0, "a user holds at most %d secrets: delete_secret makes room",
                                     SECRETS_MAX_PER_USER);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot store secret %s", name);
        audit_secret(st, actor, user, "secret.set", name);
        return 0;
}

int secrets_delete(struct store *st, const char *user, const char *name, const char *actor, struct sbx_error *err)
{
        int r;

        if (!secrets_name_valid(name))
                return sbx_error_set(err, -EINVAL, 0, "name must be 1-%d characters of A-Z, 0-9 and _",
                                     SECRETS_NAME_MAX);
        r = store_secret_delete(st, user, name);
        if (r == -ENOENT)
                return sbx_error_set(err, r, 0, "no secret %s (list_secrets shows yours)", name);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot delete secret %s", name);
        audit_secret(st, actor, user, "secret.delete", name);
        return 0;
}

int secrets_put_hostless(const struct secrets *s, struct store *st, const char *user, const char *name,
                         const void *value, size_t len, enum store_secret_mode mode, const char *metadata_json,
                         const char *actor, struct store_secret *ret, struct sbx_error *err)
{
        struct store_secret row = {0};
        _cleanup_free_ char *sealed = NULL;
        int r;

        r = input_check(s, name, value, len, err);
        if (r < 0)
                return r;
        r = secrets_seal(s, user, name, value, len, &sealed);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot seal secret %s", name);
        snprintf(row.user_id, sizeof(row.user_id), "%s", user);
        snprintf(row.name, sizeof(row.name), "%s", name);
        snprintf(row.hosts_json, sizeof(row.hosts_json), "[]"); /* only where a sandbox's rule sends it */
        row.updated_at = sbx_now_ms();
        r = store_secret_put(st, &row, sealed, SECRETS_MAX_PER_USER, mode, metadata_json, ret);
        if (r == -EDQUOT)
                return sbx_error_set(err, r, 0, "a user holds at most %d secrets: delete one to make room",
                                     SECRETS_MAX_PER_USER);
        if (r == -EEXIST)
                return sbx_error_set(err, r, 0, "secret %s exists already (update it instead)", name);
        if (r == -ENOENT)
                return sbx_error_set(err, r, 0, "no secret %s", name);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot store secret %s", name);
        audit_secret(st, actor, user, "secret.set", name);
        return 0;
}

cJSON *secrets_list_json(struct store *st, const char *user)
{
        _cleanup_free_ struct store_secret *rows = NULL;
        size_t n = 0;
        cJSON *o, *a;

        if (store_secret_list(st, user, &rows, &n) < 0)
                return NULL;
        o = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(o, "secrets");
        for (size_t i = 0; a && i < n; i++) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "name", rows[i].name);
                cJSON_AddItemToObject(e, "hosts", cJSON_Parse(rows[i].hosts_json));
                if (rows[i].header[0])
                        cJSON_AddStringToObject(e, "header", rows[i].header);
                else
                        cJSON_AddNullToObject(e, "header");
                cJSON_AddNumberToObject(e, "created_at", (double)rows[i].created_at);
                cJSON_AddNumberToObject(e, "updated_at", (double)rows[i].updated_at);
                cJSON_AddStringToObject(e, "id", rows[i].secret_id);
                cJSON_AddNumberToObject(e, "version", (double)rows[i].version);
                cJSON_AddItemToArray(a, e);
        }
        cJSON_AddNumberToObject(o, "count", (double)n);
        cJSON_AddNumberToObject(o, "max_count", SECRETS_MAX_PER_USER);
        return o;
}

int secrets_front_set(const struct secrets *s, struct store *st, const char *user, const struct jparams *p,
                      const char *actor, cJSON **ret, struct fronterr *e)
{
        const char *name, *value, *header;
        struct sbx_error err = {0};
        int r;

        if (!s)
                return fronterr_set(e, "unavailable",
                                    "secrets are off in this daemon: the operator sets secrets_key_file");
        if (jparam_string(p, "name", true, &name, e) < 0 || jparam_string(p, "value", true, &value, e) < 0 ||
            jparam_string(p, "header", false, &header, e) < 0)
                return -1;
        r = secrets_set(s, st, user, name, value, strlen(value), cJSON_GetObjectItemCaseSensitive(p->obj, "hosts"),
                        header, actor, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "name", name);
        cJSON_AddBoolToObject(*ret, "stored", true);
        return 0;
}

int secrets_front_delete(struct store *st, const char *user, const struct jparams *p, const char *actor, cJSON **ret,
                         struct fronterr *e)
{
        const char *name;
        struct sbx_error err = {0};
        int r;

        if (jparam_string(p, "name", true, &name, e) < 0)
                return -1;
        r = secrets_delete(st, user, name, actor, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "name", name);
        cJSON_AddBoolToObject(*ret, "deleted", true);
        return 0;
}

int secrets_front_list(struct store *st, const char *user, cJSON **ret, struct fronterr *e)
{
        *ret = secrets_list_json(st, user);
        return *ret ? 0 : fronterr_set(e, "internal", "cannot list the secrets");
}

/* ---- attachments to sessions (issue 37, part 2) ---- */

static void audit_attachment(struct store *st, const char *actor, const char *user, const char *session,
                             const char *action, const char *name)
{
        cJSON *d = cJSON_CreateObject();

        cJSON_AddStringToObject(d, "name", name); /* never the value, never the placeholder */
        audit_record_json(st, actor, user, session, action, d);
}

int secrets_attach(struct store *st, const char *user, const char *session, const char *name, const char *actor,
                   struct sbx_error *err)
{
        char ph[STORE_SECRET_PLACEHOLDER_MAX], hex[2 * SECRETS_PLACEHOLDER_BYTES + 1];
        int r;

        if (!secrets_name_valid(name))
                return sbx_error_set(err, -EINVAL, 0, "name must be 1-%d characters of A-Z, 0-9 and _",
                                     SECRETS_NAME_MAX);
        if (sbx_random_hex(hex, SECRETS_PLACEHOLDER_BYTES) < 0)
                return sbx_error_set(err, -EIO, 0, "no randomness for a placeholder");
        snprintf(ph, sizeof(ph), "%s%s", SECRETS_PLACEHOLDER_PREFIX, hex);
        r = store_session_secret_attach(st, user, session, name, ph, SECRETS_MAX_PER_SESSION);
        if (r == -ENOENT)
                return sbx_error_set(err, r, 0, "no secret %s (list_secrets shows yours)", name);
        if (r == -EEXIST)
                return sbx_error_set(err, r, 0, "secret %s is attached to session %s already", name, session);
        if (r == -EDQUOT)
                return sbx_error_set(err, r, 0, "a session holds at most %d secrets", SECRETS_MAX_PER_SESSION);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot attach secret %s", name);
        audit_attachment(st, actor, user, session, "secret.attach", name);
        return 0;
}

int secrets_detach(struct store *st, const char *user, const char *session, const char *name, const char *actor,
                   struct sbx_error *err)
{
        int r;

        if (!secrets_name_valid(name))
                return sbx_error_set(err, -EINVAL, 0, "name must be 1-%d characters of A-Z, 0-9 and _",
                                     SECRETS_NAME_MAX);
        r = store_session_secret_detach(st, user, session, name);
        if (r == -ENOENT)
                return sbx_error_set(err, r, 0, "secret %s is not attached to session %s", name, session);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot detach secret %s", name);
        audit_attachment(st, actor, user, session, "secret.detach", name);
        return 0;
}

int secrets_rule_check(const cJSON *hosts, const char *header, const char *tmpl, char **ret_hosts_json,
                       struct sbx_error *err)
{
        /* the proxy writes these itself, or they frame the body: never a secret's */
        static const char *const reserved[] = {"Host",   "Connection",        "Proxy-Connection", "Keep-Alive",
                                               "TE",     "Trailer",           "Upgrade",          "Content-Length",
                                               "Expect", "Transfer-Encoding", "Accept-Encoding",  "Proxy-Authorization",
                                               NULL};
        const char *mark;
        size_t n;
        int r;

        if (!header || !header_valid(header))
                return sbx_error_set(err, -EINVAL, 0,
                                     "a rule's header must be an HTTP header name (A-Z, a-z, 0-9, -; 1-%d)",
                                     SECRETS_HEADER_MAX);
        for (size_t i = 0; reserved[i]; i++)
                if (strcasecmp(header, reserved[i]) == 0)
                        return sbx_error_set(err, -EINVAL, 0, "a rule cannot set %s (the proxy writes it)",
                                             reserved[i]);
        n = tmpl ? strlen(tmpl) : 0;
        if (n == 0 || n > SECRETS_RULE_VALUE_MAX)
                return sbx_error_set(err, -EINVAL, 0, "a rule's header value must be 1-%d bytes",
                                     SECRETS_RULE_VALUE_MAX);
        for (size_t i = 0; i < n; i++)
                if (((unsigned char)tmpl[i] < 0x20 && tmpl[i] != '\t') || (unsigned char)tmpl[i] >= 0x7f)
                        return sbx_error_set(err, -EINVAL, 0, "a rule's header value must be printable ASCII");
        mark = strstr(tmpl, SECRETS_RULE_MARK);
        if (!mark || strstr(mark + 1, SECRETS_RULE_MARK))
                return sbx_error_set(err, -EINVAL, 0, "a rule's header value must hold %s exactly once",
                                     SECRETS_RULE_MARK);
        r = secrets_hosts_check(hosts, ret_hosts_json, err);
        if (r == 0 && strlen(*ret_hosts_json) >= STORE_SECRET_HOSTS_JSON_MAX) {
                free(*ret_hosts_json);
                *ret_hosts_json = NULL;
                return sbx_error_set(err, -EINVAL, 0, "hosts are too long");
        }
        return r;
}

int secrets_attach_rule(struct store *st, const char *user, const char *session, const char *name, const cJSON *hosts,
                        const char *header, const char *tmpl, const char *actor, struct sbx_error *err)
{
        _cleanup_free_ struct store_session_secret *rows = NULL;
        _cleanup_free_ char *hosts_json = NULL;
        char filled[STORE_SECRET_TEMPLATE_MAX];
        const char *mark;
        size_t n = 0;
        int r = secrets_rule_check(hosts, header, tmpl, &hosts_json, err);

        if (r < 0)
                return r;
        r = secrets_attach(st, user, session, name, actor, err);
        if (r < 0)
                return r;
        r = store_session_secret_list(st, user, session, &rows, &n);
        for (size_t i = 0; r == 0 && i < n; i++) {
                if (strcmp(rows[i].name, name) != 0)
                        continue;
                mark = strstr(tmpl, SECRETS_RULE_MARK);
                snprintf(filled, sizeof(filled), "%.*s%s%s", (int)(mark - tmpl), tmpl, rows[i].placeholder,
                         mark + strlen(SECRETS_RULE_MARK));
                r = store_session_secret_set_rule(st, user, session, name, hosts_json, header, filled);
                OPENSSL_cleanse(filled, sizeof(filled));
                if (r == 0)
                        return 0;
        }
        (void)store_session_secret_detach(st, user, session, name);
        return sbx_error_set(err, r < 0 ? r : -EIO, 0, "cannot set the rule of secret %s", name);
}

void secrets_detach_all(struct store *st, const char *user, const char *session)
{
        (void)store_session_secret_drop(st, user, session);
}

cJSON *secrets_attached_names(struct store *st, const char *user, const char *session)
{
        _cleanup_free_ struct store_session_secret *rows = NULL;
        size_t n = 0;
        cJSON *a;

        if (store_session_secret_list(st, user, session, &rows, &n) < 0)
                return NULL;
        a = cJSON_CreateArray();
        for (size_t i = 0; a && i < n; i++)
                cJSON_AddItemToArray(a, cJSON_CreateString(rows[i].name));
        return a;
}

int secrets_check_names(struct store *st, const char *user, const cJSON *names, struct sbx_error *err)
{
        const cJSON *it;
        int n = 0;

        if (!cJSON_IsArray(names))
                return sbx_error_set(err, -EINVAL, 0, "secrets must be an array of secret names");
        cJSON_ArrayForEach(it, names) {
                struct store_secret row;
                const cJSON *other;

                if (++n > SECRETS_MAX_PER_SESSION)
                        return sbx_error_set(err, -EINVAL, 0, "a session holds at most %d secrets",
                                             SECRETS_MAX_PER_SESSION);
                if (!cJSON_IsString(it) || !secrets_name_valid(it->valuestring))
                        return sbx_error_set(err, -EINVAL, 0, "secrets must be names of [A-Z_][A-Z0-9_]{0,63}");
                for (other = names->child; other != it; other = other->next)
                        if (strcmp(other->valuestring, it->valuestring) == 0)
                                return sbx_error_set(err, -EINVAL, 0, "secrets names %s twice", it->valuestring);
                if (store_secret_get(st, user, it->valuestring, &row, NULL) < 0)
                        return sbx_error_set(err, -ENOENT, 0, "no secret %s (list_secrets shows yours)",
                                             it->valuestring);
        }
        return 0;
}

static int front_attachment(struct store *st, const char *user, const char *session, const struct jparams *p,
                            const char *actor, bool attach, cJSON **ret, struct fronterr *e)
{
        const char *name, *header = NULL, *tmpl = NULL;
        const cJSON *hosts;
        struct sbx_error err = {0};
        cJSON *names;
        int r;

        if (!session || !*session)
                return fronterr_set(e, "bad_request", "params.session is required");
        if (jparam_string(p, "name", true, &name, e) < 0)
                return -1;
        if (attach &&
            (jparam_string(p, "header", false, &header, e) < 0 || jparam_string(p, "template", false, &tmpl, e) < 0))
                return -1;
        hosts = attach ? cJSON_GetObjectItemCaseSensitive(p->obj, "hosts") : NULL;
        if (hosts && cJSON_IsNull(hosts))
                hosts = NULL;
        if ((hosts || header || tmpl) && !(hosts && header && tmpl))
                return fronterr_set(e, "bad_request", "a rule is hosts, header and template together");
        r = hosts    ? secrets_attach_rule(st, user, session, name, hosts, header, tmpl, actor, &err)
            : attach ? secrets_attach(st, user, session, name, actor, &err)
                     : secrets_detach(st, user, session, name, actor, &err);
        if (r < 0)
                return fronterr_errno(e, r, &err, NULL);
        names = secrets_attached_names(st, user, session);
        if (!names)
                return fronterr_set(e, "internal", "cannot list the session's secrets");
        *ret = cJSON_CreateObject();
        cJSON_AddStringToObject(*ret, "session", session);
        cJSON_AddStringToObject(*ret, "name", name);
        cJSON_AddItemToObject(*ret, "secrets", names);
        return 0;
}

int secrets_front_attach(struct store *st, const char *user, const char *session, const struct jparams *p,
                         const char *actor, cJSON **ret, struct fronterr *e)
{
        return front_attachment(st, user, session, p, actor, true, ret, e);
}

int secrets_front_detach(struct store *st, const char *user, const char *session, const struct jparams *p,
                         const char *actor, cJSON **ret, struct fronterr *e)
{
        return front_attachment(st, user, session, p, actor, false, ret, e);
}
