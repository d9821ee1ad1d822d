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
 * matched only against strings of at most PATTERN_INPUT_MAX bytes. */
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
                cJSON_ArrayForEach(t, type) if (cJSON_IsString(t) && type_matches(t->valuestring, v)) return true;
                return false;
        }
        return true;
}

static bool schema_allows_type(const cJSON *schema, const char *name)
{
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type"), *t;
        const cJSON *any = cJSON_GetObjectItemCaseSensitive(schema, "anyOf"), *b;

        cJSON_ArrayForEach(b, any) if (schema_allows_type(b, name)) return true;

        if (cJSON_IsString(type))
                return strcmp(type->valuestring, name) == 0;
        cJSON_ArrayForEach(t, type) if (cJSON_IsString(t) && strcmp(t->valuestring, name) == 0) return true;
        return false;
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
        cJSON_ArrayForEach(t, any)
        {
                const cJSON *bt = cJSON_GetObjectItemCaseSensitive(t, "type");
                if (!cJSON_IsString(bt))
                        continue;
                pos += (size_t)snprintf(buf + pos, pos < size ? size - pos : 0, "%s%s", pos ? " or " : "",
                                        bt->valuestring);
                if (pos >= size)
                        return;
        }
        cJSON_ArrayForEach(t, type)
        {
                if (!cJSON_IsString(t))
                        continue;
                pos += (size_t)snprintf(buf + pos, pos < size ? size - pos : 0, "%s%s", pos ? " or " : "",
                                        t->valuestring);
                if (pos >= size)
                        break;
        }
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
        cJSON_ArrayForEach(e, en) if (cJSON_Compare(e, v, true)) return true;
        return false;
}

static void enum_list(const cJSON *schema, char *buf, size_t size)
{
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(schema, "enum"), *e;
        size_t pos = 0;

        buf[0] = '\0';
        cJSON_ArrayForEach(e, en)
        {
                if (!cJSON_IsString(e))
                        continue;
                pos += (size_t)snprintf(buf + pos, pos < size ? size - pos : 0, "%s\"%s\"", pos ? ", " : "",
                                        e->valuestring);
                if (pos >= size)
                        break;
        }
}

static double num_kw(const cJSON *schema, const char *kw, bool *present)
{
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(schema, kw);

        *present = cJSON_IsNumber(k);
        return *present ? k->valuedouble : 0;
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

        cJSON_ArrayForEach(b, any) if (mcp_schema_validate(b, value, NULL, NULL, 0)) return b;
        return NULL;
}

bool mcp_schema_validate(const cJSON *schema, const cJSON *value, const char *path, char *msg, size_t msg_size)
{
        char buf[160], sub[256], lim[32];
        bool has;
        double n;

        if (!cJSON_IsObject(schema))
                return true;
        if (!path)
                path = "value";
        {
                const cJSON *any = cJSON_GetObjectItemCaseSensitive(schema, "anyOf"), *b;
                if (cJSON_IsArray(any) && !any_of_branch(any, value)) {
                        /* one branch of the value's type explains best why */
                        cJSON_ArrayForEach(b, any) if (schema_type_ok(b, value) &&
                                                       cJSON_GetObjectItemCaseSensitive(b, "type")) return
                                mcp_schema_validate(b, value, path, msg, msg_size);
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
        if (cJSON_IsNumber(value)) {
                n = num_kw(schema, "minimum", &has);
                if (has && value->valuedouble < n) {
                        snprintf(lim, sizeof(lim), "%.15g", n);
                        return fail(msg, msg_size, path, "must be at least %s", lim);
                }
                n = num_kw(schema, "maximum", &has);
                if (has && value->valuedouble > n) {
                        snprintf(lim, sizeof(lim), "%.15g", n);
                        return fail(msg, msg_size, path, "must be at most %s", lim);
                }
        }
        if (cJSON_IsString(value)) {
                size_t len = utf8_code_points(value->valuestring);
                n = num_kw(schema, "minLength", &has);
                if (has && (double)len < n) {
                        snprintf(lim, sizeof(lim), "%.15g", n);
                        return fail(msg, msg_size, path, "must be at least %s character(s) long", lim);
                }
                n = num_kw(schema, "maxLength", &has);
                if (has && (double)len > n) {
                        snprintf(lim, sizeof(lim), "%.15g", n);
                        return fail(msg, msg_size, path, "must be at most %s characters long", lim);
                }
                const cJSON *pat = cJSON_GetObjectItemCaseSensitive(schema, "pattern");
                if (cJSON_IsString(pat) && pattern_match(pat->valuestring, value->valuestring) != 1)
                        return fail(msg, msg_size, path, "must match the pattern %.100s", pat->valuestring);
        }
        if (cJSON_IsArray(value)) {
                const cJSON *items = cJSON_GetObjectItemCaseSensitive(schema, "items"), *it;
                int count = cJSON_GetArraySize(value), i = 0;
                n = num_kw(schema, "minItems", &has);
                if (has && (double)count < n) {
                        snprintf(lim, sizeof(lim), "%.15g", n);
                        return fail(msg, msg_size, path, "must have at least %s item(s)", lim);
                }
                n = num_kw(schema, "maxItems", &has);
                if (has && (double)count > n) {
                        snprintf(lim, sizeof(lim), "%.15g", n);
                        return fail(msg, msg_size, path, "must have at most %s items", lim);
                }
                cJSON_ArrayForEach(it, value)
                {
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

                cJSON_ArrayForEach(r, req)
                {
                        if (cJSON_IsString(r) && !cJSON_GetObjectItemCaseSensitive(value, r->valuestring)) {
                                snprintf(sub, sizeof(sub), "%s.%s", path, r->valuestring);
                                return fail(msg, msg_size, sub, "is required");
                        }
                }
                cJSON_ArrayForEach(it, value)
                {
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
                cJSON_ArrayForEach(b, any) if (schema_type_ok(b, value) && mcp_schema_conform(b, value) &&
                                               mcp_schema_validate(b, value, NULL, NULL, 0)) break;
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
                cJSON_ArrayForEach(r, req)
                {
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
