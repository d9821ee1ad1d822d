/* sessspec.c — labels and requested resources of a session (sessspec.h):
 * parsing, bounds, the per-user maxima and the label filter. No state, no
 * threads, no I/O. */
#include "sandboxd/sessspec.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sandboxd/quota.h"
#include "sandboxd/store.h"

/* ---- labels ---- */

static bool alnum_lower(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* A DNS subdomain: labels of [a-z0-9-], not starting or ending with '-'. */
static bool dns_prefix_valid(const char *s, size_t n)
{
        size_t label = 0;

        if (n == 0 || n > SESSSPEC_LABEL_PREFIX_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                if (c == '.') {
                        if (label == 0 || s[i - 1] == '-')
                                return false;
                        label = 0;
                        continue;
                }
                if (!alnum_lower(c) && c != '-')
                        return false;
                if (label == 0 && c == '-')
                        return false;
                if (++label > 63)
                        return false;
        }
        return label > 0 && s[n - 1] != '-';
}

bool sessspec_label_key_valid(const char *key)
{
        const char *slash, *name;
        size_t n;

        if (!key)
                return false;
        slash = strchr(key, '/');
        if (slash && !dns_prefix_valid(key, (size_t)(slash - key)))
                return false;
        name = slash ? slash + 1 : key;
        n = strnlen(name, SESSSPEC_LABEL_NAME_MAX + 1);
        if (n == 0 || n > SESSSPEC_LABEL_NAME_MAX || !alnum_lower(name[0]) || !alnum_lower(name[n - 1]))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!alnum_lower(name[i]) && !strchr("-_.", name[i]))
                        return false;
        return true;
}

bool sessspec_label_value_valid(const char *value)
{
        size_t n;

        if (!value)
                return false;
        n = strnlen(value, SESSSPEC_LABEL_VALUE_MAX + 1);
        if (n > SESSSPEC_LABEL_VALUE_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)value[i]) && !strchr("-_.", value[i]))
                        return false;
        return true;
}

/* A key for a message: printable ASCII, cut short. */
static void key_for_message(const char *key, char *buf, size_t size)
{
        size_t k = 0;
        for (const char *p = key ? key : ""; *p && k + 4 < size; p++)
                buf[k++] = (*p >= 0x20 && *p < 0x7f && *p != '"') ? *p : '?';
        if (key && strlen(key) > k)
                buf[k > 3 ? k - 3 : k] = '\0', strcat(buf, "...");
        else
                buf[k] = '\0';
}

static int cmp_keys(const void *a, const void *b)
{
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int sessspec_labels_parse(const cJSON *obj, const char *what, char **ret_json, struct sbx_error *err)
{
        const char *keys[SESSSPEC_LABELS_MAX];
        const cJSON *it;
        size_t n = 0;
        cJSON *out;
        char shown[80];

        if (!cJSON_IsObject(obj))
                return sbx_error_set(err, -EINVAL, 0, "%s must be an object of label names to string values", what);
        cJSON_ArrayForEach(it, obj) {
                key_for_message(it->string, shown, sizeof(shown));
                if (n == SESSSPEC_LABELS_MAX)
                        return sbx_error_set(err, -EINVAL, 0, "%s has more than %d labels", what, SESSSPEC_LABELS_MAX);
                if (!sessspec_label_key_valid(it->string))
                        return sbx_error_set(err, -EINVAL, 0,
                                             "%s: invalid label key \"%s\": a name of 1-63 characters of [a-z0-9_.-] "
                                             "starting and ending with [a-z0-9], optionally after a DNS prefix and '/'",
                                             what, shown);
                if (!cJSON_IsString(it) || !it->valuestring)
                        return sbx_error_set(err, -EINVAL, 0, "%s.%s must be a string", what, shown);
                if (!sessspec_label_value_valid(it->valuestring))
                        return sbx_error_set(err, -EINVAL, 0,
                                             "%s.%s: invalid label value: at most 63 characters of [A-Za-z0-9_.-]",
                                             what, shown);
                for (size_t i = 0; i < n; i++)
                        if (strcmp(keys[i], it->string) == 0)
                                return sbx_error_set(err, -EINVAL, 0, "%s: label key \"%s\" appears twice", what,
                                                     shown);
                keys[n++] = it->string;
        }
        if (n == 0) {
                *ret_json = NULL;
                return 0;
        }
        qsort(keys, n, sizeof(keys[0]), cmp_keys);
        out = cJSON_CreateObject();
        for (size_t i = 0; out && i < n; i++)
                if (!cJSON_AddStringToObject(out, keys[i],
                                             cJSON_GetObjectItemCaseSensitive(obj, keys[i])->valuestring)) {
                        cJSON_Delete(out);
                        out = NULL;
                }
        *ret_json = out ? cJSON_PrintUnformatted(out) : NULL;
        cJSON_Delete(out);
        if (!*ret_json)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        return 0;
}

bool sessspec_labels_match(const char *labels_json, const cJSON *filter)
{
        cJSON *labels;
        const cJSON *it;
        bool ok = true;

        if (!filter || !filter->child)
                return true;
        if (!labels_json)
                return false;
        labels = cJSON_Parse(labels_json);
        cJSON_ArrayForEach(it, filter) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(labels, it->string);
                if (!cJSON_IsString(v) || !cJSON_IsString(it) || strcmp(v->valuestring, it->valuestring) != 0) {
                        ok = false;
                        break;
                }
        }
        cJSON_Delete(labels);
        return ok;
}

/* ---- resources ---- */

/* "1.5" → nano-CPUs, "500m" → millicores; no floating point for strings. */
static int parse_cpu_text(const char *v, int64_t *ret)
{
        int64_t whole = 0, frac = 0, scale = 1000000000;
        const char *p = v;

        if (!isdigit((unsigned char)*p))
                return -EINVAL;
        for (; isdigit((unsigned char)*p); p++) {
                whole = whole * 10 + (*p - '0');
                if (whole > 1000000)
                        return -ERANGE;
        }
        if (*p == 'm' && p[1] == '\0') {
                *ret = whole * 1000000;
                return 0;
        }
        if (*p == '.') {
                p++;
                if (!isdigit((unsigned char)*p))
                        return -EINVAL;
                for (; isdigit((unsigned char)*p); p++) {
                        if (scale == 1)
                                return -EINVAL;
                        scale /= 10;
                        frac += (*p - '0') * scale;
                }
        }
        if (*p)
                return -EINVAL;
        *ret = whole * 1000000000 + frac;
        return 0;
}

static int parse_size_text(const char *v, int64_t *ret)
{
        static const struct {
                const char *suffix;
                int64_t mult;
        } units[] = {{"", 1},         {"b", 1},       {"k", 1024},     {"kb", 1024},           {"m", 1 << 20},
                     {"mb", 1 << 20}, {"g", 1 << 30}, {"gb", 1 << 30}, {"t", INT64_C(1) << 40}};
        char *end;
        long long x;

        if (!isdigit((unsigned char)*v))
                return -EINVAL;
        errno = 0;
        x = strtoll(v, &end, 10);
        if (errno != 0)
                return -ERANGE;
        for (size_t i = 0; i < ELEMENTSOF(units); i++)
                if (strcasecmp(end, units[i].suffix) == 0) {
                        if (x > INT64_MAX / units[i].mult)
                                return -ERANGE;
                        *ret = (int64_t)x * units[i].mult;
                        return 0;
                }
        return -EINVAL;
}

/* A size or cpu member: a number or a string. 0 absent, 1 read, -EINVAL. */
static int member_amount(const cJSON *params, const char *name, bool cpu, int64_t min, int64_t max, int64_t *ret,
                         struct sbx_error *err)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(params, name);
        int64_t x = 0;
        int r = 0;

        if (!v || cJSON_IsNull(v))
                return 0;
        if (cJSON_IsNumber(v)) {
                double d = cpu ? v->valuedouble * 1e9 : v->valuedouble;
                /* NaN fails every comparison: refused with the rest */
                if (!(d >= 0 && d <= (double)max * 2))
                        r = -EINVAL;
                else if (x = (int64_t)(d + 0.5), !cpu && (double)(int64_t)d != d)
                        r = -EINVAL;
        } else if (cJSON_IsString(v) && v->valuestring && strlen(v->valuestring) <= 32) {
                r = cpu ? parse_cpu_text(v->valuestring, &x) : parse_size_text(v->valuestring, &x);
        } else {
                r = -EINVAL;
        }
        if (r < 0 && cpu)
                return sbx_error_set(err, -EINVAL, 0, "params.cpu must be a number of CPUs (0.5, \"1.5\", \"500m\")");
        if (r < 0)
                return sbx_error_set(err, -EINVAL, 0,
                                     "params.%s must be a number of bytes or a size (\"512m\", \"2g\")", name);
        if ((x < min || x > max) && cpu)
                return sbx_error_set(err, -EINVAL, 0, "params.cpu is out of range [0.01, %" PRId64 "]",
                                     max / 1000000000);
        if (x < min || x > max)
                return sbx_error_set(err, -EINVAL, 0, "params.%s is out of range [16m, %" PRId64 " bytes]", name, max);
        *ret = x;
        return 1;
}

int sessspec_parse(const cJSON *params, struct store_session_spec *ret, bool *ret_given, struct sbx_error *err)
{
        struct store_session_spec s = {0};
        const cJSON *labels = cJSON_GetObjectItemCaseSensitive(params, "labels");
        bool given = false;
        int r;

        if (labels && !cJSON_IsNull(labels)) {
                r = sessspec_labels_parse(labels, "params.labels", &s.labels_json, err);
                if (r < 0)
                        return r;
                given = true;
        }
        if ((r = member_amount(params, "cpu", true, SESSSPEC_MIN_NANO_CPUS, INT64_C(256) * 1000000000, &s.nano_cpus,
                               err)) < 0 ||
            (given |= r > 0,
             r = member_amount(params, "memory", false, SESSSPEC_MIN_MEMORY, INT64_C(1) << 40, &s.memory, err)) < 0 ||
            (given |= r > 0,
             r = member_amount(params, "disk", false, SESSSPEC_MIN_DISK, INT64_C(1) << 44, &s.disk, err)) < 0) {
                store_session_spec_done(&s);
                return r;
        }
        given |= r > 0;
        *ret = s;
        *ret_given = given;
        return 0;
}

static void fmt_size(int64_t b, char *buf, size_t size)
{
        static const char units[] = "kmgt";
        int u = -1;
        while (u < 3 && b >= 1024 && b % 1024 == 0) {
                b /= 1024;
                u++;
        }
        if (u < 0)
                snprintf(buf, size, "%" PRId64, b);
        else
                snprintf(buf, size, "%" PRId64 "%c", b, units[u]);
}

static void fmt_cpus(int64_t nano, char *buf, size_t size)
{
        int64_t frac = nano % 1000000000;
        int len;

        len = snprintf(buf, size, "%" PRId64 ".%09" PRId64, nano / 1000000000, frac);
        while (len > 0 && buf[len - 1] == '0')
                buf[--len] = '\0';
        if (len > 0 && buf[len - 1] == '.')
                buf[--len] = '\0';
}

int sessspec_check(const struct sbx_config *cfg, const struct quota_limits *lim, const struct store_session_spec *want,
                   struct sbx_error *err)
{
        char a[32], b[32];

        if (want->nano_cpus > lim->session_nano_cpus) {
                fmt_cpus(want->nano_cpus, a, sizeof(a));
                fmt_cpus(lim->session_nano_cpus, b, sizeof(b));
                return sbx_error_set(err, -EINVAL, 0, "cpu %s exceeds this user's maximum %s (max_session_cpus)", a, b);
        }
        if (want->memory > lim->session_memory) {
                fmt_size(want->memory, a, sizeof(a));
                fmt_size(lim->session_memory, b, sizeof(b));
                return sbx_error_set(err, -EINVAL, 0, "memory %s exceeds this user's maximum %s (max_session_memory)",
                                     a, b);
        }
        if (want->disk > 0 && strcmp(cfg->workspace_quota_mode, "loop") != 0)
                return sbx_error_set(err, -EINVAL, 0,
                                     "disk cannot be enforced here: it needs workspace.quota_mode loop (this daemon "
                                     "runs '%s')",
                                     cfg->workspace_quota_mode);
        if (want->disk > lim->session_disk) {
                fmt_size(want->disk, a, sizeof(a));
                fmt_size(lim->session_disk, b, sizeof(b));
                return sbx_error_set(err, -EINVAL, 0, "disk %s exceeds this user's maximum %s (max_session_disk)", a,
                                     b);
        }
        return 0;
}

bool sessspec_equal(const struct store_session_spec *a, const struct store_session_spec *b)
{
        const char *la = a->labels_json ? a->labels_json : "", *lb = b->labels_json ? b->labels_json : "";
        return strcmp(la, lb) == 0 && a->nano_cpus == b->nano_cpus && a->memory == b->memory && a->disk == b->disk;
}

void sessspec_add_json(cJSON *o, const struct sbx_config *cfg, const struct store_session_spec *spec)
{
        cJSON *labels = spec && spec->labels_json ? cJSON_Parse(spec->labels_json) : NULL, *res;
        bool quota =
                strcmp(cfg->workspace_quota_mode, "loop") == 0 || strcmp(cfg->workspace_quota_mode, "measure") == 0;

        cJSON_AddItemToObject(o, "labels", labels ? labels : cJSON_CreateObject());
        res = cJSON_AddObjectToObject(o, "resources");
        if (!res)
                return;
        cJSON_AddNumberToObject(res, "cpu", (double)(spec && spec->nano_cpus ? spec->nano_cpus : cfg->nano_cpus) / 1e9);
        cJSON_AddNumberToObject(res, "memory", (double)(spec && spec->memory ? spec->memory : cfg->memory_bytes));
        if (spec && spec->disk)
                cJSON_AddNumberToObject(res, "disk", (double)spec->disk);
        else if (quota)
                cJSON_AddNumberToObject(res, "disk", (double)cfg->workspace_quota_bytes);
        else
                cJSON_AddNullToObject(res, "disk");
}
