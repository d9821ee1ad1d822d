/* jsonutil.c — the typed parameter getters every front shares (API
 * methods, admin commands, agent tools, tasks, idempotency): one place says
 * what a string, an integer and a boolean argument are, and the message a
 * wrong one gets; and how a reply writes text that may be absent or not
 * UTF-8. No state, no threads. */
#include "sandboxd/jsonutil.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "sandboxd/fronterr.h"
#include "sandboxd/utf8.h"

static const cJSON *member(const struct jparams *p, const char *name)
{
        return p->obj ? cJSON_GetObjectItemCaseSensitive(p->obj, name) : NULL;
}

int jparam_string(const struct jparams *p, const char *name, bool required, const char **ret, struct fronterr *e)
{
        const cJSON *v = member(p, name);
        if (!v || cJSON_IsNull(v)) {
                if (required)
                        return fronterr_set(e, "bad_request", "%s%s is required", p->prefix, name);
                *ret = NULL;
                return 0;
        }
        if (!cJSON_IsString(v) || !v->valuestring)
                return fronterr_set(e, "bad_request", "%s%s must be a string", p->prefix, name);
        *ret = v->valuestring;
        return 0;
}

int jparam_int(const struct jparams *p, const char *name, int64_t lo, int64_t hi, int64_t def, int64_t *ret,
               struct fronterr *e)
{
        const cJSON *v = member(p, name);
        double x;

        if (!v || cJSON_IsNull(v)) {
                *ret = def;
                return 0;
        }
        if (!cJSON_IsNumber(v))
                return fronterr_set(e, "bad_request", "%s%s must be a number", p->prefix, name);
        x = v->valuedouble;
        if (!isfinite(x) || x != floor(x))
                return fronterr_set(e, "bad_request", "%s%s must be an integer", p->prefix, name);
        if (x < (double)lo || x > (double)hi)
                return fronterr_set(e, "invalid", "%s%s must be between %" PRId64 " and %" PRId64, p->prefix, name, lo,
                                    hi);
        *ret = (int64_t)x;
        return 0;
}

int jparam_bool(const struct jparams *p, const char *name, bool def, bool *ret, struct fronterr *e)
{
        const cJSON *v = member(p, name);
        if (!v || cJSON_IsNull(v)) {
                *ret = def;
                return 0;
        }
        if (!cJSON_IsBool(v))
                return fronterr_set(e, "bad_request", "%s%s must be true or false", p->prefix, name);
        *ret = cJSON_IsTrue(v);
        return 0;
}

void jsonutil_add_text(cJSON *o, const char *key, const char *s)
{
        if (s && *s) {
                _cleanup_free_ char *clean = utf8_sanitize(s, strlen(s));
                cJSON_AddStringToObject(o, key, clean ? clean : "");
        } else {
                cJSON_AddNullToObject(o, key);
        }
}

void jsonutil_add_lower(cJSON *o, const char *key, const char *s)
{
        char buf[64];
        size_t i = 0;

        for (; s && s[i] && i + 1 < sizeof(buf); i++)
                buf[i] = (char)tolower((unsigned char)s[i]);
        buf[i] = '\0';
        cJSON_AddStringToObject(o, key, buf);
}

void jsonutil_add_time(cJSON *o, const char *key, int64_t ms)
{
        if (ms > 0)
                cJSON_AddNumberToObject(o, key, (double)ms);
        else
                cJSON_AddNullToObject(o, key);
}
