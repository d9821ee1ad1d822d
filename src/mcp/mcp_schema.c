/* mcp_schema.c — the small subset of JSON Schema the MCP tools advertise,
 * used both ways: arguments are validated against a tool's inputSchema (so
 * what the client is told and what the adapter enforces cannot drift), and
 * daemon replies are made to conform to its outputSchema (so clients that
 * validate structuredContent, as the official SDKs do, never reject a reply
 * because the daemon grew or lost a field). No threads, no state.
 *
 * Keywords enforced (and the only ones the tool schemas may use; the JS
 * tests check the published schemas against this list): type (one name, or
 * a list), anyOf, enum, minimum, maximum, minLength, maxLength, pattern,
 * items, minItems, maxItems, properties, required, additionalProperties;
 * description and title are annotations. pattern is a POSIX extended regular
 * expression (regcomp REG_EXTENDED|REG_NOSUB) — the schemas keep to the part
 * of it that ECMA-262 reads the same way (anchors, bracket classes, {m,n}) —
 * matched only against strings of at most PATTERN_INPUT_MAX bytes.
 *
 * mcp_schema_check refuses a schema that uses anything else, or uses these
 * keywords malformed (a pattern regcomp rejects, a negative maxLength...):
 * the tool catalog (mcp_catalog.c, schemas/mcp_tools.json) is checked with
 * it once, so validate and conform can assume well-formed schemas. */
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sandboxd/mcp.h"

#define PATTERN_INPUT_MAX 4096 /* longer strings never match a pattern (no regex run on them) */

static bool is_integer(const cJSON *v)
{
        double d;

        if (!cJSON_IsNumber(v))
                return false;
        d = v->valuedouble;
        return isfinite(d) && floor(d) == d && fabs(d) <= 9007199254740992.0;
}

static bool type_matches(const char *type, const cJSON *v)
{
        if (strcmp(type, "string") == 0)
                return cJSON_IsString(v);
        if (strcmp(type, "integer") == 0)
                return is_integer(v);
        if (strcmp(type, "number") == 0)
                return cJSON_IsNumber(v) && isfinite(v->valuedouble);
        if (strcmp(type, "boolean") == 0)
                return cJSON_IsBool(v);
        if (strcmp(type, "object") == 0)
                return cJSON_IsObject(v);
        if (strcmp(type, "array") == 0)
                return cJSON_IsArray(v);
        if (strcmp(type, "null") == 0)
                return cJSON_IsNull(v);
        return false;
}

/* True if v has one of the schema's types (or the schema names none). */
static bool schema_type_ok(const cJSON *schema, const cJSON *v)
{
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type"), *t;

        if (cJSON_IsString(type))
                return type_matches(type->valuestring, v);
        if (cJSON_IsArray(type)) {
                cJSON_ArrayForEach(t, type)
                        if (cJSON_IsString(t) && type_matches(t->valuestring, v))
                                return true;
                return false;
        }
        return true;
}

static bool schema_allows_type(const cJSON *schema, const char *name)
{
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type"), *t;
        const cJSON *any = cJSON_GetObjectItemCaseSensitive(schema, "anyOf"), *b;

        cJSON_ArrayForEach(b, any)
                if (schema_allows_type(b, name))
                        return true;

        if (cJSON_IsString(type))
                return strcmp(type->valuestring, name) == 0;
        cJSON_ArrayForEach(t, type)
                if (cJSON_IsString(t) && strcmp(t->valuestring, name) == 0)
                        return true;
        return false;
}

/* Append item (quoted with quote, after sep unless first) to the list in
 * buf; false once buf is full. */
static bool list_add(char *buf, size_t size, size_t *pos, const char *sep, const char *quote, const char *item)
{
        *pos += (size_t)snprintf(buf + *pos, *pos < size ? size - *pos : 0, "%s%s%s%s", *pos ? sep : "", quote, item,
                                 quote);
        return *pos < size;
}

static void type_list(const cJSON *schema, char *buf, size_t size)
{
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type"), *t;
        size_t pos = 0;

        const cJSON *any = cJSON_GetObjectItemCaseSensitive(schema, "anyOf");

        buf[0] = '\0';
        if (cJSON_IsString(type)) {
                snprintf(buf, size, "%s", type->valuestring);
                return;
        }
        if (cJSON_IsArray(any))
                type = NULL;
        cJSON_ArrayForEach(t, any) {
                const cJSON *bt = cJSON_GetObjectItemCaseSensitive(t, "type");
                if (cJSON_IsString(bt) && !list_add(buf, size, &pos, " or ", "", bt->valuestring))
                        return;
        }
        cJSON_ArrayForEach(t, type)
                if (cJSON_IsString(t) && !list_add(buf, size, &pos, " or ", "", t->valuestring))
                        break;
}

static const char *json_kind(const cJSON *v)
{
        if (cJSON_IsString(v))
                return "a string";
        if (cJSON_IsBool(v))
                return "a boolean";
        if (cJSON_IsNull(v))
                return "null";
        if (cJSON_IsArray(v))
                return "an array";
        if (cJSON_IsObject(v))
                return "an object";
        if (is_integer(v))
                return "an integer";
        if (cJSON_IsNumber(v))
                return "a number";
        return "an invalid value";
}

static size_t utf8_code_points(const char *s)
{
        size_t n = 0;

        for (; *s; s++)
                if (((unsigned char)*s & 0xC0) != 0x80)
                        n++;
        return n;
}

static bool fail(char *msg, size_t size, const char *path, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static bool fail(char *msg, size_t size, const char *path, const char *fmt, ...)
{
        char why[256];
        va_list ap;

        if (!msg || !size)
                return false;
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        snprintf(msg, size, "%s: %s", path, why);
        return false;
}

static bool enum_ok(const cJSON *schema, const cJSON *v)
{
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(schema, "enum"), *e;

        if (!cJSON_IsArray(en))
                return true;
        cJSON_ArrayForEach(e, en)
                if (cJSON_Compare(e, v, true))
                        return true;
        return false;
}

static void enum_list(const cJSON *schema, char *buf, size_t size)
{
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(schema, "enum"), *e;
        size_t pos = 0;

        buf[0] = '\0';
        cJSON_ArrayForEach(e, en)
                if (cJSON_IsString(e) && !list_add(buf, size, &pos, ", ", "\"", e->valuestring))
                        break;
}

/* The bound keywords, each with how its failure reads. */
static const struct bound {
        const char *kw;
        bool upper;
        const char *verb, *unit; /* "<verb> <limit><unit>" */
} bounds[] = {
        {"minimum", false, "must be at least", ""},
        {"maximum", true, "must be at most", ""},
        {"minLength", false, "must be at least", " character(s) long"},
        {"maxLength", true, "must be at most", " characters long"},
        {"minItems", false, "must have at least", " item(s)"},
        {"maxItems", true, "must have at most", " items"},
};

/* measure (the number, the length in code points, the item count) against
 * one bound keyword of the schema, if it has it. */
static bool bound_ok(const cJSON *schema, const struct bound *b, double measure, const char *path, char *msg,
                     size_t msg_size)
{
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(schema, b->kw);
        char lim[32];

        if (!cJSON_IsNumber(k) || (b->upper ? measure <= k->valuedouble : measure >= k->valuedouble))
                return true;
        snprintf(lim, sizeof(lim), "%.15g", k->valuedouble);
        return fail(msg, msg_size, path, "%s %s%s", b->verb, lim, b->unit);
}

/* pattern: 1 matches, 0 does not, -1 the pattern does not compile. */
static int pattern_match(const char *pattern, const char *s)
{
        regex_t re;
        int r;

        if (strlen(s) > PATTERN_INPUT_MAX)
                return 0;
        if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
                return -1;
        r = regexec(&re, s, 0, NULL, 0) == 0 ? 1 : 0;
        regfree(&re);
        return r;
}

/* The first anyOf branch value validates against, or NULL. */
static const cJSON *any_of_branch(const cJSON *any, const cJSON *value)
{
        const cJSON *b;

        cJSON_ArrayForEach(b, any)
                if (mcp_schema_validate(b, value, NULL, NULL, 0))
                        return b;
        return NULL;
}

bool mcp_schema_validate(const cJSON *schema, const cJSON *value, const char *path, char *msg, size_t msg_size)
{
        char buf[160], sub[256];

        if (!cJSON_IsObject(schema))
                return true;
        if (!path)
                path = "value";
        {
                const cJSON *any = cJSON_GetObjectItemCaseSensitive(schema, "anyOf"), *b;
                if (cJSON_IsArray(any) && !any_of_branch(any, value)) {
                        /* one branch of the value's type explains best why */
                        cJSON_ArrayForEach(b, any)
                                if (schema_type_ok(b, value) && cJSON_GetObjectItemCaseSensitive(b, "type"))
                                        return mcp_schema_validate(b, value, path, msg, msg_size);
                        type_list(schema, buf, sizeof(buf));
                        return fail(msg, msg_size, path, "expected %s, got %s", buf, json_kind(value));
                }
        }
        if (!schema_type_ok(schema, value)) {
                type_list(schema, buf, sizeof(buf));
                return fail(msg, msg_size, path, "expected %s, got %s", buf, json_kind(value));
        }
        if (!enum_ok(schema, value)) {
                enum_list(schema, buf, sizeof(buf));
                return fail(msg, msg_size, path, "must be one of %s", buf);
        }
        if (cJSON_IsNumber(value) && (!bound_ok(schema, &bounds[0], value->valuedouble, path, msg, msg_size) ||
                                      !bound_ok(schema, &bounds[1], value->valuedouble, path, msg, msg_size)))
                return false;
        if (cJSON_IsString(value)) {
                double len = (double)utf8_code_points(value->valuestring);
                if (!bound_ok(schema, &bounds[2], len, path, msg, msg_size) ||
                    !bound_ok(schema, &bounds[3], len, path, msg, msg_size))
                        return false;
                const cJSON *pat = cJSON_GetObjectItemCaseSensitive(schema, "pattern");
                if (cJSON_IsString(pat) && pattern_match(pat->valuestring, value->valuestring) != 1)
                        return fail(msg, msg_size, path, "must match the pattern %.100s", pat->valuestring);
        }
        if (cJSON_IsArray(value)) {
                const cJSON *items = cJSON_GetObjectItemCaseSensitive(schema, "items"), *it;
                int count = cJSON_GetArraySize(value), i = 0;
                if (!bound_ok(schema, &bounds[4], count, path, msg, msg_size) ||
                    !bound_ok(schema, &bounds[5], count, path, msg, msg_size))
                        return false;
                cJSON_ArrayForEach(it, value) {
                        snprintf(sub, sizeof(sub), "%s[%d]", path, i++);
                        if (!mcp_schema_validate(items, it, sub, msg, msg_size))
                                return false;
                }
        }
        if (cJSON_IsObject(value)) {
                const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
                const cJSON *req = cJSON_GetObjectItemCaseSensitive(schema, "required");
                const cJSON *extra = cJSON_GetObjectItemCaseSensitive(schema, "additionalProperties");
                const cJSON *r, *it;

                cJSON_ArrayForEach(r, req) {
                        if (cJSON_IsString(r) && !cJSON_GetObjectItemCaseSensitive(value, r->valuestring)) {
                                snprintf(sub, sizeof(sub), "%s.%s", path, r->valuestring);
                                return fail(msg, msg_size, sub, "is required");
                        }
                }
                cJSON_ArrayForEach(it, value) {
                        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, it->string);
                        snprintf(sub, sizeof(sub), "%s.%.100s", path, it->string ? it->string : "");
                        if (ps) {
                                if (!mcp_schema_validate(ps, it, sub, msg, msg_size))
                                        return false;
                        } else if (cJSON_IsFalse(extra)) {
                                return fail(msg, msg_size, sub, "is not a known property");
                        } else if (cJSON_IsObject(extra)) {
                                if (!mcp_schema_validate(extra, it, sub, msg, msg_size))
                                        return false;
                        }
                }
        }
        return true;
}

/* A neutral value of a type the schema allows (null when it may be null). */
static cJSON *neutral_value(const cJSON *schema)
{
        if (schema_allows_type(schema, "null"))
                return cJSON_CreateNull();
        if (schema_allows_type(schema, "string"))
                return cJSON_CreateString("");
        if (schema_allows_type(schema, "integer") || schema_allows_type(schema, "number")) {
                const cJSON *min = cJSON_GetObjectItemCaseSensitive(schema, "minimum");
                return cJSON_CreateNumber(cJSON_IsNumber(min) && min->valuedouble > 0 ? ceil(min->valuedouble) : 0);
        }
        if (schema_allows_type(schema, "boolean"))
                return cJSON_CreateFalse();
        if (schema_allows_type(schema, "array"))
                return cJSON_CreateArray();
        if (schema_allows_type(schema, "object")) {
                cJSON *o = cJSON_CreateObject();
                if (o)
                        mcp_schema_conform(schema, o);
                return o;
        }
        return cJSON_CreateNull();
}

bool mcp_schema_conform(const cJSON *schema, cJSON *value)
{
        const cJSON *any = cJSON_GetObjectItemCaseSensitive(schema, "anyOf"), *b;

        if (!cJSON_IsObject(schema) || !value)
                return true;
        if (cJSON_IsArray(any)) {
                /* conform to the first branch of the value's type */
                cJSON_ArrayForEach(b, any)
                        if (schema_type_ok(b, value) && mcp_schema_conform(b, value) &&
                            mcp_schema_validate(b, value, NULL, NULL, 0))
                                break;
                if (!b)
                        return false;
        }
        if (!schema_type_ok(schema, value))
                return false;
        if (cJSON_IsArray(value)) {
                const cJSON *items = cJSON_GetObjectItemCaseSensitive(schema, "items");
                cJSON *it = value->child, *next;
                for (; it; it = next) {
                        next = it->next;
                        if (!mcp_schema_conform(items, it) || !mcp_schema_validate(items, it, NULL, NULL, 0))
                                cJSON_Delete(cJSON_DetachItemViaPointer(value, it));
                }
        }
        if (cJSON_IsObject(value)) {
                const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
                const cJSON *req = cJSON_GetObjectItemCaseSensitive(schema, "required");
                const cJSON *extra = cJSON_GetObjectItemCaseSensitive(schema, "additionalProperties");
                const cJSON *r;
                cJSON *it = value->child, *next;

                for (; it; it = next) {
                        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, it->string);
                        next = it->next;
                        if (!ps)
                                ps = cJSON_IsObject(extra) ? extra : NULL;
                        if (!ps) {
                                if (cJSON_IsFalse(extra))
                                        cJSON_Delete(cJSON_DetachItemViaPointer(value, it));
                                continue;
                        }
                        if (!mcp_schema_conform(ps, it) || !mcp_schema_validate(ps, it, NULL, NULL, 0))
                                cJSON_Delete(cJSON_DetachItemViaPointer(value, it));
                }
                cJSON_ArrayForEach(r, req) {
                        const cJSON *ps;
                        cJSON *v;
                        if (!cJSON_IsString(r) || cJSON_GetObjectItemCaseSensitive(value, r->valuestring))
                                continue;
                        ps = cJSON_GetObjectItemCaseSensitive(props, r->valuestring);
                        v = neutral_value(ps);
                        if (v)
                                cJSON_AddItemToObject(value, r->valuestring, v);
                }
        }
        return true;
}

/* ---- the check of a schema itself (once, on the tool catalog) ---- */

static bool check_kids(const cJSON *v, bool object, const char *path, const char *kw, char *msg, size_t msg_size)
{
        const cJSON *it;
        char sub[256];
        int i = 0;

        if (object ? !cJSON_IsObject(v) : (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0))
                return fail(msg, msg_size, path, "%s must be %s", kw, object ? "an object" : "a non-empty array");
        cJSON_ArrayForEach(it, v) {
                if (object)
                        snprintf(sub, sizeof(sub), "%s.%s.%.100s", path, kw, it->string);
                else
                        snprintf(sub, sizeof(sub), "%s.%s[%d]", path, kw, i++);
                if (!mcp_schema_check(it, sub, msg, msg_size))
                        return false;
        }
        return true;
}

static bool all_strings(const cJSON *v)
{
        const cJSON *it;

        cJSON_ArrayForEach(it, v)
                if (!cJSON_IsString(it))
                        return false;
        return cJSON_IsArray(v);
}

static bool known_type(const cJSON *t)
{
        static const char *const types[] = {"string", "integer", "number", "boolean", "object", "array", "null"};

        for (size_t i = 0; cJSON_IsString(t) && i < ELEMENTSOF(types); i++)
                if (strcmp(t->valuestring, types[i]) == 0)
                        return true;
        return false;
}

bool mcp_schema_check(const cJSON *schema, const char *path, char *msg, size_t msg_size)
{
        const cJSON *kw, *t;
        regex_t re;

        if (!cJSON_IsObject(schema))
                return fail(msg, msg_size, path, "a schema must be an object");
        cJSON_ArrayForEach(kw, schema) {
                const char *k = kw->string;
                bool ok = true;
                size_t i;

                for (i = 0; i < ELEMENTSOF(bounds) && strcmp(k, bounds[i].kw) != 0; i++)
                        ;
                if (i < ELEMENTSOF(bounds)) {
                        ok = cJSON_IsNumber(kw) && (strcmp(k, "minimum") == 0 || strcmp(k, "maximum") == 0 ||
                                                    (is_integer(kw) && kw->valuedouble >= 0));
                } else if (strcmp(k, "type") == 0) {
                        if (cJSON_IsArray(kw)) {
                                cJSON_ArrayForEach(t, kw)
                                        ok = ok && known_type(t);
                                ok = ok && cJSON_GetArraySize(kw) > 0;
                        } else {
                                ok = known_type(kw);
                        }
                } else if (strcmp(k, "anyOf") == 0) {
                        if (!check_kids(kw, false, path, k, msg, msg_size))
                                return false;
                } else if (strcmp(k, "properties") == 0) {
                        if (!check_kids(kw, true, path, k, msg, msg_size))
                                return false;
                } else if (strcmp(k, "items") == 0 || (strcmp(k, "additionalProperties") == 0 && !cJSON_IsBool(kw))) {
                        char sub[256];
                        snprintf(sub, sizeof(sub), "%s.%s", path, k);
                        if (!mcp_schema_check(kw, sub, msg, msg_size))
                                return false;
                } else if (strcmp(k, "enum") == 0) {
                        ok = cJSON_IsArray(kw) && cJSON_GetArraySize(kw) > 0;
                } else if (strcmp(k, "required") == 0) {
                        ok = all_strings(kw);
                } else if (strcmp(k, "pattern") == 0) {
                        ok = cJSON_IsString(kw) && regcomp(&re, kw->valuestring, REG_EXTENDED | REG_NOSUB) == 0;
                        if (ok)
                                regfree(&re);
                } else if (strcmp(k, "description") == 0 || strcmp(k, "title") == 0) {
                        ok = cJSON_IsString(kw);
                } else if (strcmp(k, "additionalProperties") != 0) {
                        return fail(msg, msg_size, path, "keyword %.64s is not one the validator enforces", k);
                }
                if (!ok)
                        return fail(msg, msg_size, path, "%.64s is malformed", k);
        }
        return true;
}
