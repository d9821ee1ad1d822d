/* jsonutil.c — the typed parameter getters every front shares (API
 * methods, admin commands, agent tools, tasks, idempotency): one place says
 * what a string, an integer and a boolean argument are, and the message a
 * wrong one gets. No state, no threads. */
#include "sandboxd/jsonutil.h"

#include <inttypes.h>
#include <math.h>

#include "sandboxd/fronterr.h"

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
