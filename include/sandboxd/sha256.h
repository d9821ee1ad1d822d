/* sha256.h — SHA-256, for command hashes in the audit log, idempotency
 * fingerprints and API token digests: a thin wrapper over libcrypto's EVP
 * digests, so callers hash in one line and never include OpenSSL. */
#ifndef SANDBOXD_SHA256_H
#define SANDBOXD_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct evp_md_ctx_st; /* libcrypto's EVP_MD_CTX */

/* A running digest. sha256_init allocates; sha256_final frees (always). */
struct sha256 {
        struct evp_md_ctx_st *ctx;
        int error; /* a failed step: sha256_final reports it */
};

/* 0, or -ENOMEM (then update is a no-op and final returns -ENOMEM). */
int sha256_init(struct sha256 *c);
void sha256_update(struct sha256 *c, const void *data, size_t len);
/* The 32-byte digest in out: 0, or -ENOMEM/-EIO (out zeroed). Frees c. */
int sha256_final(struct sha256 *c, uint8_t out[32]);
/* One shot, as 64 lowercase hex digits + NUL: 0, or -ENOMEM (libcrypto
 * fails only out of memory) with out the empty string, which matches no digest. */
int sha256_hex(const void *data, size_t len, char out[65]);
/* HMAC-SHA256 of data under key, as 64 lowercase hex digits + NUL (the
 * webhook signature, webhook.h): 0, or -ENOMEM with out the empty string. */
int sha256_hmac_hex(const void *key, size_t key_len, const void *data, size_t len, char out[65]);

#endif
