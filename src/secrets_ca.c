/* secrets_ca.c — a session's own CA (secrets_ca.h) and the session's
 * attached secrets as the egress proxy takes them. libcrypto makes the key
 * and the certificate; secrets.c seals the key; the store keeps both. No
 * thread of its own; callable from any thread (the store serializes, and a
 * race to make the CA is settled by its INSERT OR IGNORE: both read the
 * row that won). */
#include "sandboxd/secrets_ca.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/secrets.h"
#include "sandboxd/store.h"

#define CA_DAYS 3650
#define CA_SEAL_NAME "\x01session-ca" /* never a secret's name ([A-Z_]...): its own additional data */

void secrets_ca_key_free(char *key_pem)
{
        if (!key_pem)
                return;
        OPENSSL_cleanse(key_pem, strlen(key_pem));
        free(key_pem);
}

static char *bio_text(BIO *b)
{
        char *data, *out;
        long n = BIO_get_mem_data(b, &data);

        if (n <= 0)
                return NULL;
        out = malloc((size_t)n + 1);
        if (!out)
                return NULL;
        memcpy(out, data, (size_t)n);
        out[n] = '\0';
        return out;
}

static int add_ext(X509 *x, int nid, const char *value)
{
        X509V3_CTX ctx;
        X509_EXTENSION *ext;
        int ok;

        X509V3_set_ctx_nodb(&ctx);
        X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
        ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
        if (!ext)
                return -1;
        ok = X509_add_ext(x, ext, -1);
        X509_EXTENSION_free(ext);
        return ok ? 0 : -1;
}

/* A new CA: its certificate and key, PEM. */
static int ca_make(const char *session, char **ret_cert, char **ret_key)
{
        EVP_PKEY *key = EVP_EC_gen("P-256");
        X509 *x = X509_new();
        BIO *cb = BIO_new(BIO_s_mem()), *kb = BIO_new(BIO_s_mem());
        X509_NAME *name;
        unsigned char serial[16];
        BIGNUM *bn = NULL;
        char cn[128];
        int r = -ENOMEM;

        if (!key || !x || !cb || !kb || RAND_bytes(serial, sizeof(serial)) != 1)
                goto out;
        serial[0] &= 0x7f;
        bn = BN_bin2bn(serial, sizeof(serial), NULL);
        snprintf(cn, sizeof(cn), "sandboxd session CA %.64s", session);
        name = X509_get_subject_name(x);
        if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) || !X509_set_version(x, 2) ||
            !X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"sandboxd", -1, -1, 0) ||
            !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0) ||
            !X509_set_issuer_name(x, name) || !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
            !X509_gmtime_adj(X509_getm_notAfter(x), (long)CA_DAYS * 86400) || !X509_set_pubkey(x, key) ||
            add_ext(x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") < 0 ||
            add_ext(x, NID_key_usage, "critical,keyCertSign,cRLSign") < 0 ||
            add_ext(x, NID_subject_key_identifier, "hash") < 0 || !X509_sign(x, key, EVP_sha256()) ||
            !PEM_write_bio_X509(cb, x) || !PEM_write_bio_PrivateKey(kb, key, NULL, NULL, 0, NULL, NULL)) {
                r = -EIO;
                goto out;
        }
        *ret_cert = bio_text(cb);
        *ret_key = bio_text(kb);
        if (!*ret_cert || !*ret_key) {
                free(*ret_cert);
                secrets_ca_key_free(*ret_key);
                goto out;
        }
        r = 0;
out:
        BN_free(bn);
        X509_free(x);
        EVP_PKEY_free(key);
        BIO_free(cb);
        if (kb) {
                char *data;
                long n = BIO_get_mem_data(kb, &data);
                if (n > 0)
                        OPENSSL_cleanse(data, (size_t)n);
                BIO_free(kb);
        }
        return r;
}

/* The sealed key's additional data is the user and CA_SEAL_NAME + session. */
static void seal_name(const char *session, char *buf, size_t size)
{
        snprintf(buf, size, "%s:%s", CA_SEAL_NAME, session);
}

int secrets_ca_get(const struct secrets *s, struct store *st, const char *user, const char *session,
                   char **ret_cert_pem, char **ret_key_pem)
{
        _cleanup_free_ char *cert = NULL, *sealed = NULL;
        struct secret_value *v = NULL;
        char name[128];
        int r;

        if (!s)
                return -EOPNOTSUPP;
        seal_name(session, name, sizeof(name));
        r = store_session_ca_get(st, user, session, &cert, &sealed);
        if (r == -ENOENT) {
                char *key = NULL, *new_cert = NULL, *new_sealed = NULL;
                r = ca_make(session, &new_cert, &key);
                if (r == 0)
                        r = secrets_seal(s, user, name, key, strlen(key), &new_sealed);
                if (r == 0)
                        r = store_session_ca_add(st, user, session, new_cert, new_sealed);
                free(new_cert);
                free(new_sealed);
                secrets_ca_key_free(key);
                if (r == 0)
                        r = store_session_ca_get(st, user, session, &cert, &sealed);
        }
        if (r < 0)
                return r;
        if (ret_key_pem) {
                r = secrets_unseal(s, user, name, sealed, &v);
                if (r < 0)
                        return r;
                *ret_key_pem = strndup((const char *)v->bytes, v->len);
                secret_value_free(v);
                if (!*ret_key_pem)
                        return -ENOMEM;
        }
        *ret_cert_pem = TAKE_PTR(cert);
        return 0;
}

int secrets_ca_bundle(const char *cert_pem, char **ret, size_t *ret_len)
{
        const char *sys = X509_get_default_cert_file();
        size_t cert_len = strlen(cert_pem), n = 0;
        _cleanup_close_ int fd = open(sys, O_RDONLY | O_CLOEXEC);
        struct stat stt;
        char *buf;

        /* no system store on this host: the session's CA alone */
        if (fd < 0 || fstat(fd, &stt) < 0 || !S_ISREG(stt.st_mode) || stt.st_size > SECRETS_CA_BUNDLE_MAX)
                stt.st_size = 0;
        buf = malloc((size_t)stt.st_size + cert_len + 2);
        if (!buf)
                return -ENOMEM;
        while (n < (size_t)stt.st_size) {
                ssize_t k = read(fd, buf + n, (size_t)stt.st_size - n);
                if (k <= 0)
                        break;
                n += (size_t)k;
        }
        if (n > 0 && buf[n - 1] != '\n')
                buf[n++] = '\n';
        memcpy(buf + n, cert_pem, cert_len);
        n += cert_len;
        buf[n] = '\0';
        *ret = buf;
        *ret_len = n;
        return 0;
}

static void hosts_fill(struct egress_secret *e, const char *hosts_json)
{
        cJSON *a = cJSON_Parse(hosts_json), *it;

        cJSON_ArrayForEach(it, a) {
                if (e->n_hosts >= EGRESS_SECRET_HOSTS || !cJSON_IsString(it) ||
                    strlen(it->valuestring) >= EGRESS_HOST_MAX)
                        continue;
                snprintf(e->hosts[e->n_hosts++], EGRESS_HOST_MAX, "%s", it->valuestring);
        }
        cJSON_Delete(a);
}

int secrets_egress_attached(const struct secrets *s, struct store *st, const char *user, const char *session,
                            struct egress_secret **ret, size_t *ret_n)
{
        _cleanup_free_ struct store_session_secret *att = NULL;
        struct egress_secret *v;
        size_t n = 0;
        int r = store_session_secret_list(st, user, session, &att, &n);

        if (r < 0)
                return r;
        *ret = NULL;
        *ret_n = 0;
        if (n == 0)
                return 0;
        v = calloc(n, sizeof(*v));
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                struct store_secret row;
                _cleanup_free_ char *sealed = NULL;
                struct secret_value *val = NULL;

                snprintf(v[i].name, sizeof(v[i].name), "%s", att[i].name);
                snprintf(v[i].placeholder, sizeof(v[i].placeholder), "%s", att[i].placeholder);
                if (store_secret_get(st, user, att[i].name, &row, &sealed) < 0)
                        continue;                /* deleted meanwhile: its placeholder is still refused */
                if (att[i].rule_hosts_json[0]) { /* a rule: its hosts and its header, not the secret's */
                        snprintf(v[i].header, sizeof(v[i].header), "%s", att[i].rule_header);
                        snprintf(v[i].inject, sizeof(v[i].inject), "%s", att[i].rule_template);
                        hosts_fill(&v[i], att[i].rule_hosts_json);
                } else {
                        snprintf(v[i].header, sizeof(v[i].header), "%s", row.header);
                        hosts_fill(&v[i], row.hosts_json);
                }
                if (s && secrets_unseal(s, user, att[i].name, sealed, &val) == 0) {
                        v[i].value = malloc(val->len + 1);
                        if (v[i].value) {
                                memcpy(v[i].value, val->bytes, val->len + 1);
                                v[i].value_len = val->len;
                        }
                        secret_value_free(val);
                }
        }
        *ret = v;
        *ret_n = n;
        return 0;
}
