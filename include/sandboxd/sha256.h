/* sha256.h — SHA-256 (FIPS 180-4), for command hashes in the audit log and
 * API token digests. Small and dependency-free. */
#ifndef SANDBOXD_SHA256_H
#define SANDBOXD_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sha256 {
        uint32_t h[8];
        uint64_t len;
        uint8_t buf[64];
        size_t n;
};

void sha256_init(struct sha256 *c);
void sha256_update(struct sha256 *c, const void *data, size_t len);
void sha256_final(struct sha256 *c, uint8_t out[32]);
/* One shot, as 64 lowercase hex digits + NUL. */
void sha256_hex(const void *data, size_t len, char out[65]);

#endif
