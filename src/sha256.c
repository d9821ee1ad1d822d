/* sha256.c — SHA-256 over libcrypto (OpenSSL 3 EVP; include/sandboxd/sha256.h).
 * Stateless apart from the caller's struct sha256; no locks. */
#include "sandboxd/sha256.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>

int sha256_init(struct sha256 *c)
{
        c->error = 0;
        c->ctx = EVP_MD_CTX_new();
        if (!c->ctx) {
                c->error = -ENOMEM;
                return -ENOMEM;
        }
        if (EVP_DigestInit_ex(c->ctx, EVP_sha256(), NULL) != 1) {
                c->error = -EIO;
                return -EIO;
        }
        return 0;
}

void sha256_update(struct sha256 *c, const void *data, size_t len)
{
        if (c->error == 0 && len > 0 && EVP_DigestUpdate(c->ctx, data, len) != 1)
                c->error = -EIO;
}

int sha256_final(struct sha256 *c, uint8_t out[32])
{
        unsigned int n = 0;
        int r = c->error;

        if (r == 0 && (EVP_DigestFinal_ex(c->ctx, out, &n) != 1 || n != 32))
                r = -EIO;
        if (r < 0)
                memset(out, 0, 32);
        EVP_MD_CTX_free(c->ctx);
        c->ctx = NULL;
        return r;
}

int sha256_hex(const void *data, size_t len, char out[65])
{
        uint8_t d[32];
        unsigned int n = 0;

        if (EVP_Digest(data, len, d, &n, EVP_sha256(), NULL) != 1 || n != 32) {
                out[0] = '\0';
                return -ENOMEM;
        }
        for (int i = 0; i < 32; i++)
                snprintf(out + 2 * i, 3, "%02x", d[i]);
        return 0;
}

int sha256_hmac_hex(const void *key, size_t key_len, const void *data, size_t len, char out[65])
{
        uint8_t md[EVP_MAX_MD_SIZE];
        unsigned md_len = 0;

        out[0] = '\0';
        if (!HMAC(EVP_sha256(), key, (int)key_len, data, len, md, &md_len) || md_len != 32)
                return -ENOMEM;
        for (unsigned i = 0; i < 32; i++)
                snprintf(out + 2 * i, 3, "%02x", md[i]);
        return 0;
}
