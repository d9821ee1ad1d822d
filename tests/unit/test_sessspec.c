/* Unit tests of sessspec: label keys and values, the canonical form, the
 * filter, cpu/memory/disk parsing and the per-user maxima with their
 * messages. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/config.h"
#include "sandboxd/quota.h"
#include "sandboxd/sessspec.h"
#include "sandboxd/store.h"

Test(sessspec, label_keys_and_values)
{
        char prefix[300];

        cr_assert(sessspec_label_key_valid("team"));
        cr_assert(sessspec_label_key_valid("a"));
        cr_assert(sessspec_label_key_valid("app.kubernetes.io/name"));
        cr_assert(sessspec_label_key_valid("run_id.2-x"));
        cr_assert_not(sessspec_label_key_valid(""));
        cr_assert_not(sessspec_label_key_valid("Team"));
        cr_assert_not(sessspec_label_key_valid("_x"));
        cr_assert_not(sessspec_label_key_valid("x."));
        cr_assert_not(sessspec_label_key_valid("/x"));
        cr_assert_not(sessspec_label_key_valid("a/b/c"));
        cr_assert_not(sessspec_label_key_valid("-a.com/x"));
        cr_assert_not(sessspec_label_key_valid("a..com/x"));
        memset(prefix, 'a', 254);
        strcpy(prefix + 254, "/x");
        cr_assert_not(sessspec_label_key_valid(prefix), "prefix of 254");
        cr_assert(sessspec_label_value_valid(""));
        cr_assert(sessspec_label_value_valid("A-b_c.9"));
        cr_assert_not(sessspec_label_value_valid("a b"));
        cr_assert_not(sessspec_label_value_valid("a/b"));
        cr_assert_not(sessspec_label_value_valid("0123456789012345678901234567890123456789012345678901234567890123"));
}

Test(sessspec, labels_are_canonical_and_filter_exactly)
{
        cJSON *o = cJSON_Parse("{\"z\":\"1\",\"a\":\"2\"}"), *f;
        struct sbx_error err = {0};
        char *json = NULL;

        cr_assert_eq(sessspec_labels_parse(o, "params.labels", &json, &err), 0, "%s", err.msg);
        cr_assert_str_eq(json, "{\"a\":\"2\",\"z\":\"1\"}");
        f = cJSON_Parse("{\"a\":\"2\"}");
        cr_assert(sessspec_labels_match(json, f));
        cJSON_Delete(f);
        f = cJSON_Parse("{\"a\":\"2\",\"b\":\"\"}");
        cr_assert_not(sessspec_labels_match(json, f), "b is absent, not empty");
        cJSON_Delete(f);
        f = cJSON_Parse("{}");
        cr_assert(sessspec_labels_match(NULL, f));
        cJSON_Delete(f);
        free(json);
        cJSON_Delete(o);
        o = cJSON_Parse("{\"a\":\"1\",\"a\":\"2\"}");
        cr_assert_eq(sessspec_labels_parse(o, "params.labels", &json, &err), -EINVAL);
        cr_assert_not_null(strstr(err.msg, "twice"), "%s", err.msg);
        cJSON_Delete(o);
}

static int parse(const char *text, struct store_session_spec *s, struct sbx_error *err)
{
        cJSON *p = cJSON_Parse(text);
        bool given;
        int r = sessspec_parse(p, s, &given, err);
        cJSON_Delete(p);
        return r;
}

Test(sessspec, resources_parse_and_check)
{
        struct store_session_spec s = {0};
        struct sbx_error err = {0};
        struct sbx_config cfg;
        struct quota_limits lim;

        config_defaults(&cfg);
        quota_limits_get(NULL, &cfg, "alice", &lim);
        cr_assert_eq(lim.session_memory, cfg.memory_bytes, "the maximum defaults to memory");
        cr_assert_eq(parse("{\"cpu\":\"500m\",\"memory\":\"512m\",\"disk\":1073741824}", &s, &err), 0, "%s", err.msg);
        cr_assert_eq(s.nano_cpus, 500000000);
        cr_assert_eq(s.memory, 512 << 20);
        cr_assert_eq(s.disk, 1 << 30);
        cr_assert_eq(parse("{\"cpu\":1.25}", &s, &err), 0);
        cr_assert_eq(s.nano_cpus, 1250000000);
        cr_assert_eq(parse("{\"cpu\":\"1.5\"}", &s, &err), 0);
        cr_assert_eq(s.nano_cpus, 1500000000);
        cr_assert_eq(parse("{\"cpu\":0.001}", &s, &err), -EINVAL);
        cr_assert_eq(parse("{\"cpu\":\"x\"}", &s, &err), -EINVAL);
        cr_assert_eq(parse("{\"memory\":1.5}", &s, &err), -EINVAL);
        cr_assert_eq(parse("{\"memory\":\"99999999999999999999g\"}", &s, &err), -EINVAL);
        cr_assert_eq(parse("{\"memory\":true}", &s, &err), -EINVAL);

        cr_assert_eq(parse("{\"memory\":\"4g\"}", &s, &err), 0);
        cr_assert_eq(sessspec_check(&cfg, &lim, &s, &err), -EINVAL);
        cr_assert_str_eq(err.msg, "memory 4g exceeds this user's maximum 1g (max_session_memory)");
        cr_assert_eq(parse("{\"disk\":\"2g\"}", &s, &err), 0);
        cr_assert_eq(sessspec_check(&cfg, &lim, &s, &err), -EINVAL);
        cr_assert_not_null(strstr(err.msg, "workspace.quota_mode loop"), "%s", err.msg);
        snprintf(cfg.workspace_quota_mode, sizeof(cfg.workspace_quota_mode), "loop");
        cr_assert_eq(sessspec_check(&cfg, &lim, &s, &err), -EINVAL);
        cr_assert_str_eq(err.msg, "disk 2g exceeds this user's maximum 1g (max_session_disk)");
        cr_assert_eq(parse("{\"disk\":\"512m\",\"cpu\":1}", &s, &err), 0);
        cr_assert_eq(sessspec_check(&cfg, &lim, &s, &err), 0, "%s", err.msg);
}
