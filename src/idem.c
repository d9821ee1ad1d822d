/* idem.c — idempotency keys (idem.h): a key checked, a request's
 * fingerprint, and the key's row through its life. The row is the store's
 * (store_idem_claim is a UNIQUE insert, so of two concurrent claims exactly
 * one wins); times stored are unix ms, as --gc judges them. No state. */
#include "sandboxd/idem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/common.h"
#include "sandboxd/sha256.h"

bool idem_key_valid(const char *key)
{
        size_t n = 0;

        if (!key)
                return false;
        for (const char *p = key; *p; p++, n++) {
                char c = *p;
                bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                          c == '_' || c == '.' || c == ':';
                if (!ok || n >= IDEM_KEY_MAX)
                        return false;
        }
        return n > 0;
}

static int member_cmp(const void *a, const void *b)
{
        const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
        return strcmp(x->string ? x->string : "", y->string ? y->string : "");
}

/* A copy of v with every object's members sorted by name (requests are
 * small: reqguard bounds their elements and depth before they are parsed). */
static cJSON *canonical(const cJSON *v)
{
        _cleanup_free_ const cJSON **members = NULL;
        const cJSON *it;
        size_t n = 0;
        cJSON *out;

        if (cJSON_IsArray(v)) {
                out = cJSON_CreateArray();
                cJSON_ArrayForEach(it, v)
                        cJSON_AddItemToArray(out, canonical(it));
                return out;
        }
        if (!cJSON_IsObject(v))
                return cJSON_Duplicate(v, false);
        out = cJSON_CreateObject();
        cJSON_ArrayForEach(it, v)
                n++;
        members = calloc(n ? n : 1, sizeof(*members));
        if (!out || !members) {
                cJSON_Delete(out);
                return NULL;
        }
        n = 0;
        cJSON_ArrayForEach(it, v)
                members[n++] = it;
        qsort(members, n, sizeof(*members), member_cmp);
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToObject(out, members[i]->string ? members[i]->string : "", canonical(members[i]));
        return out;
}

/* The fingerprint of a request: method and canonical params, the key left out. */
int idem_fingerprint(const char *method, const cJSON *params, char out[65])
{
        cJSON *copy = cJSON_Duplicate(params, true), *canon;
        char *text;
        struct sha256 h;
        uint8_t digest[32];
        int r;

        if (!copy)
                return -ENOMEM;
        cJSON_DeleteItemFromObjectCaseSensitive(copy, "idempotency_key");
        /* a retry is the same request under a new trace (reqctx.h) */
        cJSON_DeleteItemFromObjectCaseSensitive(copy, "traceparent");
        cJSON_DeleteItemFromObjectCaseSensitive(copy, "request_id");
        canon = canonical(copy);
        cJSON_Delete(copy);
        text = canon ? cJSON_PrintUnformatted(canon) : NULL;
        cJSON_Delete(canon);
        if (!text)
                return -ENOMEM;
        sha256_init(&h);
        sha256_update(&h, method, strlen(method) + 1);
        sha256_update(&h, text, strlen(text));
        r = sha256_final(&h, digest);
        free(text);
        if (r < 0)
                return r;
        for (int i = 0; i < 32; i++)
                snprintf(out + 2 * i, 3, "%02x", digest[i]);
        return 0;
}

int idem_claim(const struct idem_ref *k, const char *hash, int64_t window_s, int64_t max_keys, struct store_idem *ret)
{
        int64_t now = sbx_wall_ms();

        return store_idem_claim(k->st, k->user, k->method, k->key, hash, now, now + window_s * 1000, max_keys, ret);
}

int idem_get(const struct idem_ref *k, struct store_idem *ret)
{
        return store_idem_get(k->st, k->user, k->method, k->key, ret);
}

int idem_bind_execution(const struct idem_ref *k, const char *execution_id)
{
        return store_idem_set_execution(k->st, k->user, k->method, k->key, execution_id);
}

int idem_finish(const struct idem_ref *k, const char *result)
{
        return store_idem_finish(k->st, k->user, k->method, k->key, result);
}

void idem_release(const struct idem_ref *k)
{
        (void)store_idem_release(k->st, k->user, k->method, k->key);
}
