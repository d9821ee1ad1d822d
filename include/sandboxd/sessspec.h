/* sessspec.h — what a session is created with besides its options: labels
 * and the resources it asks for (issue 29). Parsing and checks only; the
 * store keeps the result (struct store_session_spec, table session_spec),
 * the API records it at creation, the container spec applies it.
 *
 * Labels: at most SESSSPEC_LABELS_MAX per session, as a JSON object of
 * string to string. A key is Kubernetes' label key: an optional DNS
 * prefix of at most 253 characters (lower-case [a-z0-9-] labels joined by
 * dots) and '/', then a name of 1-63 characters of [a-z0-9_.-] that starts
 * and ends with [a-z0-9]. A value is 0-63 characters of [A-Za-z0-9_.-] (the
 * empty value too). Anything else is refused, naming the key.
 *
 * Resources: "cpu" (a number of CPUs, 0.01 or more: 0.5, "1.5", "500m"
 * millicores), "memory" and "disk" (bytes, or a string with a k/m/g/t suffix
 * in powers of 1024: "512m", "2g"), each within the user's maximum
 * (max_session_cpus, max_session_memory, max_session_disk: the config's
 * keys, which default to cpus, memory and workspace.quota, overridable per
 * user as quotas). Absent: the config's cpus, memory and workspace.quota. */
#ifndef SANDBOXD_SESSSPEC_H
#define SANDBOXD_SESSSPEC_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct store_session_spec;
struct quota_limits;

#define SESSSPEC_LABELS_MAX 16
#define SESSSPEC_LABEL_NAME_MAX 63
#define SESSSPEC_LABEL_PREFIX_MAX 253
#define SESSSPEC_LABEL_KEY_MAX (SESSSPEC_LABEL_PREFIX_MAX + 1 + SESSSPEC_LABEL_NAME_MAX)
#define SESSSPEC_LABEL_VALUE_MAX 63
#define SESSSPEC_MIN_NANO_CPUS 10000000         /* 0.01 CPU, as the config's cpus */
#define SESSSPEC_MIN_MEMORY (INT64_C(16) << 20) /* as the config's memory */
#define SESSSPEC_MIN_DISK (INT64_C(16) << 20)   /* as the config's workspace.quota */

bool sessspec_label_key_valid(const char *key);
bool sessspec_label_value_valid(const char *value);

/* obj (a JSON object; what names it in messages, e.g. "params.labels") as
 * canonical JSON text, keys sorted, in *ret_json (malloc'd; NULL when obj has
 * no members). -EINVAL with err naming the offending key. */
int sessspec_labels_parse(const cJSON *obj, const char *what, char **ret_json, struct sbx_error *err);
/* Every member of filter (a checked labels object) is in labels_json with
 * the same value. An empty filter matches everything. */
bool sessspec_labels_match(const char *labels_json, const cJSON *filter);

/* The labels, cpu, memory and disk members of params into ret (labels_json
 * malloc'd: store_session_spec_done), *ret_given telling whether any was
 * there. Syntax and the absolute bounds only; -EINVAL with err naming the
 * member. */
int sessspec_parse(const cJSON *params, struct store_session_spec *ret, bool *ret_given, struct sbx_error *err);
/* want within lim (quota_limits_get) and what the daemon can enforce
 * (disk needs workspace.quota_mode loop): 0, or -EINVAL with err naming
 * the limit, e.g. "memory 4g exceeds this user's maximum 1g
 * (max_session_memory)". */
int sessspec_check(const struct sbx_config *cfg, const struct quota_limits *lim, const struct store_session_spec *want,
                   struct sbx_error *err);
/* The same labels and resources. */
bool sessspec_equal(const struct store_session_spec *a, const struct store_session_spec *b);
/* spec as {"labels": {...}, "resources": {"cpu", "memory", "disk"}} members
 * of o, with the config's values where spec asks none (spec may be NULL). */
void sessspec_add_json(cJSON *o, const struct sbx_config *cfg, const struct store_session_spec *spec);

/* The largest ttl_seconds create_session accepts: a week, past it a
 * session is a server and belongs elsewhere. */
#define SESSSPEC_TTL_MAX_S (7 * 86400)

#endif
