/* idem.h — idempotency keys (issue 17): a request's key checked, its
 * fingerprint, and the key's row through its life (claim, bind to an
 * execution or finish with a result, release). The API's dispatcher
 * (api_idem.c) decides which methods take a key and how a retry is answered;
 * this module keeps the keys, in the store (migration 0015), so they survive
 * restarts. No state, no threads: the store serialises claims. */
#ifndef SANDBOXD_IDEM_H
#define SANDBOXD_IDEM_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "sandboxd/store.h"

#define IDEM_KEY_MAX STORE_IDEM_KEY_MAX

/* One key: (user, method, key) in store st. */
struct idem_ref {
        struct store *st;
        const char *user, *method, *key;
};

/* Whether key is 1-IDEM_KEY_MAX characters of [A-Za-z0-9._:-]. */
bool idem_key_valid(const char *key);
/* The fingerprint of a request (hex SHA-256 of method and canonical params:
 * keys sorted at every level; idempotency_key, traceparent and request_id
 * left out, so a retry under a new trace is the same request). */
int idem_fingerprint(const char *method, const cJSON *params, char out[65]);
/* Claim k for a request of fingerprint hash, for window_s seconds: 1 when
 * claimed, 0 when already held (*ret is its row: free with store_idem_done),
 * -EDQUOT when the user holds max_keys live keys. */
int idem_claim(const struct idem_ref *k, const char *hash, int64_t window_s, int64_t max_keys, struct store_idem *ret);
/* k's row now (-ENOENT: released meanwhile). */
int idem_get(const struct idem_ref *k, struct store_idem *ret);
/* k is answered by execution_id's record from now on. */
int idem_bind_execution(const struct idem_ref *k, const char *execution_id);
/* k is answered by result (JSON text) from now on. */
int idem_finish(const struct idem_ref *k, const char *result);
/* Forget a pending claim: the request failed before doing anything. */
void idem_release(const struct idem_ref *k);

#endif
