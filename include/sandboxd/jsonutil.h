/* jsonutil.h — cJSON cleanup helpers (common.h's pattern for cJSON trees):
 *   _cleanup_(cjson_freep) cJSON *o = cJSON_CreateObject();
 * the fronts' typed parameter getters and the reply helpers they share
 * (jsonutil.c). */
#ifndef SANDBOXD_JSONUTIL_H
#define SANDBOXD_JSONUTIL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "sandboxd/common.h"

struct fronterr;

static inline void cjson_freep(cJSON **p)
{
        cJSON_Delete(*p);
}

/* Where a front's arguments come from: an object (NULL reads as empty) and
 * how a message names a member ("params." on the API, "" on admin). */
struct jparams {
        const cJSON *obj;
        const char *prefix;
};

/* A string member: NULL when absent or null (bad_request if required). */
int jparam_string(const struct jparams *p, const char *name, bool required, const char **ret, struct fronterr *e);
/* An integer member in [lo, hi] (def when absent or null); a non-integer is
 * bad_request, one out of range invalid. */
int jparam_int(const struct jparams *p, const char *name, int64_t lo, int64_t hi, int64_t def, int64_t *ret,
               struct fronterr *e);
/* A boolean member (def when absent or null). */
int jparam_bool(const struct jparams *p, const char *name, bool def, bool *ret, struct fronterr *e);

/* Replies: s as sanitized UTF-8 text, null when s is NULL or empty. */
void jsonutil_add_text(cJSON *o, const char *key, const char *s);
/* s lower-cased (an enum's name: at most 63 bytes). */
void jsonutil_add_lower(cJSON *o, const char *key, const char *s);
/* A time in wall ms, null when 0. */
void jsonutil_add_time(cJSON *o, const char *key, int64_t ms);

#endif
