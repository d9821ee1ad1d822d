/* secrets_ca.h — a session's own CA (issue 37): the egress proxy signs the
 * leaf certificates of the hosts the session's attached secrets name with
 * it, and the container trusts it through a bundle (the system CAs and this
 * one) in its runner directory, named by SSL_CERT_FILE and its kin.
 *
 * An EC P-256 key and a self-signed CA certificate, made the first time the
 * session needs one (its first execution or intercepted connection with a
 * secret attached), stored with the key sealed under the secrets key
 * (store_session_ca_*): kept across pause and daemon restart, gone with the
 * session; a fork or a restore is a new session with a new CA. */
#ifndef SANDBOXD_SECRETS_CA_H
#define SANDBOXD_SECRETS_CA_H

#include <stddef.h>

#include "sandboxd/egress.h"

struct secrets;
struct store;

#define SECRETS_CA_BUNDLE_MAX (4 << 20) /* the system CAs read, at most */

/* The session's CA, made and stored when it has none: the certificate and
 * (ret_key_pem non-NULL) its key, PEM, malloc'd; the caller wipes the key
 * (OPENSSL_cleanse-free: secrets_ca_key_free). s NULL: -EOPNOTSUPP. */
int secrets_ca_get(const struct secrets *s, struct store *st, const char *user, const char *session,
                   char **ret_cert_pem, char **ret_key_pem);
void secrets_ca_key_free(char *key_pem);

/* The bundle for the container: OpenSSL's default CA file (the host's
 * system store) followed by cert_pem. malloc'd. */
int secrets_ca_bundle(const char *cert_pem, char **ret, size_t *ret_len);

/* The session's attachments as the egress proxy takes them (egress.h),
 * values opened when s can (else NULL). */
int secrets_egress_attached(const struct secrets *s, struct store *st, const char *user, const char *session,
                            struct egress_secret **ret, size_t *ret_n);

#endif
