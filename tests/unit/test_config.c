/* Unit tests for the config table, parser and environment overrides. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandboxd/config.h"

static char path[64];

static void write_conf(const char *text)
{
        int fd;
        strcpy(path, "/tmp/sbx-config-XXXXXX");
        fd = mkstemp(path);
        cr_assert(fd >= 0);
        cr_assert(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
        close(fd);
}

static void cleanup(void)
{
        if (path[0])
                unlink(path);
        unsetenv("SANDBOXD_MEMORY");
        unsetenv("SANDBOXD_INSTANCE");
}

TestSuite(config, .fini = cleanup);

static void expect_error(const char *text, const char *line_tag, const char *why);

Test(config, defaults_are_valid)
{
        struct sbx_config cfg;
        struct sbx_error err = {0};
        cr_assert_eq(config_load(NULL, &cfg, &err), 0, "%s", err.msg);
        cr_assert_str_eq(cfg.network_default, "none");
        cr_assert_eq(cfg.memory_bytes, 1LL << 30);
        cr_assert_eq(cfg.nano_cpus, 1000000000LL);
        cr_assert_eq(cfg.port_range_lo, 20000);
        cr_assert_eq(cfg.port_range_hi, 29999);
        cr_assert_eq(cfg.workspace_retention_s, -1);
        cr_assert_eq(cfg.max_exec_global, 10);
        cr_assert_eq(cfg.max_exec_per_session, 5);
}

/* The shipped file sets every key (so --print-config names it FILE:LINE for
 * each) and parses; a key left at its default would show "from: default". */
Test(config, shipped_file_sets_every_key_and_print_config_names_each_source)
{
        char file[512], cmd[1200], line[4096];
        FILE *p;
        size_t keys = 0, from_file = 0, n_keys = 0;
        struct sbx_config cfg;
        struct sbx_error err = {0};

        snprintf(file, sizeof(file), "%s/etc/sandboxd.conf", SANDBOXD_SOURCE_DIR);
        cr_assert_eq(config_load(file, &cfg, &err), 0, "%s", err.msg);
        while (config_key_name(n_keys))
                n_keys++;
        /* egress.packages_file (issue 37 item 2) was the 90th; gc.max_age became GC_MAX_AGE_S */
        cr_assert_lt(n_keys, 90, "%zu keys: an operator cannot hold them in mind", n_keys);

        snprintf(cmd, sizeof(cmd), "env -i SANDBOXD_LIMITS_SESSIONS=7 %s/sandboxd --config %s --print-config",
                 SANDBOXD_BINARY_DIR, file);
        p = popen(cmd, "r");
        cr_assert_not_null(p);
        while (fgets(line, sizeof(line), p)) {
                char *from = strstr(line, " # from: ");
                if (line[0] == '#' || line[0] == '[' || line[0] == '\n')
                        continue;
                keys++;
                cr_assert_not_null(from, "no source: %s", line);
                if (strncmp(line, "sessions = ", 11) == 0)
                        cr_expect_not_null(strstr(from, "SANDBOXD_LIMITS_SESSIONS"), "%s", line);
                else if (strstr(from, file) && strchr(from + strlen(" # from: ") + strlen(file), ':'))
                        from_file++;
                else
                        cr_expect_fail("not from %s:LINE: %s", file, line);
        }
        cr_assert_eq(pclose(p), 0);
        cr_assert_eq(keys, n_keys, "--print-config printed %zu of %zu keys", keys, n_keys);
        cr_assert_eq(from_file, n_keys - 1);
}

Test(config, print_config_says_default_file_line_and_environment)
{
        char cmd[1200], out[65536];
        FILE *p;
        size_t n;

        write_conf("memory = 512m\n[node]\nfence = 45s\n");
        snprintf(cmd, sizeof(cmd), "env -i SANDBOXD_CPUS=2 %s/sandboxd --config %s --print-config", SANDBOXD_BINARY_DIR,
                 path);
        p = popen(cmd, "r");
        cr_assert_not_null(p);
        n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = '\0';
        cr_assert_eq(pclose(p), 0);
        char want[256];
        snprintf(want, sizeof(want), "\nmemory = \"512m\" # from: %s:1\n", path);
        cr_expect_not_null(strstr(out, want), "%s", want);
        snprintf(want, sizeof(want), "\n[node]\n");
        cr_expect_not_null(strstr(out, want));
        snprintf(want, sizeof(want), "\nfence = \"45s\" # from: %s:3\n", path);
        cr_expect_not_null(strstr(out, want), "%s", want);
        cr_expect_not_null(strstr(out, "\ncpus = \"2.000000000\" # from: SANDBOXD_CPUS\n"));
        cr_expect_not_null(strstr(out, "\nidle_timeout = \"2h\" # from: default\n"));
}

/* --check-config on a key of an older sandboxd names what replaced it. */
Test(config, check_config_names_the_replacement_of_an_old_key)
{
        char cmd[1200], out[4096];
        FILE *p;
        size_t n;

        write_conf("image = x\nmax_sessions = 10\n");
        snprintf(cmd, sizeof(cmd), "env -i %s/sandboxd --config %s --check-config 2>&1", SANDBOXD_BINARY_DIR, path);
        p = popen(cmd, "r");
        cr_assert_not_null(p);
        n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = '\0';
        cr_assert_neq(pclose(p), 0, "an old key was accepted: %s", out);
        cr_expect_not_null(strstr(out, ":2: key 'max_sessions' was renamed: write limits.sessions"), "%s", out);
        cr_expect_not_null(strstr(out, "SANDBOXD_LIMITS_SESSIONS"), "%s", out);

        expect_error("[limits]\nmax_exec_global = 3\n", ":2:", "write limits.exec_global");
        expect_error("http_timeout = 10s\n", ":1:", "became the constant HTTP_IDLE_TIMEOUT_S = 30s");
        expect_error("kube_gvisor_class = g\n", ":1:", "K8S_GVISOR_RUNTIME_CLASS = \"gvisor\"");
        expect_error("[gc]\nmax_age = 30d\n", ":2:",
                     "key 'gc.max_age' is no longer a setting: it became the "
                     "constant GC_MAX_AGE_S = 7d (include/sandboxd/gc.h)");
        expect_error("max_age = 30d\n", ":1:", "became the constant GC_MAX_AGE_S = 7d");
        expect_error("webhook_secret = k\n", ":1:", "webhook.secret_file");
        expect_error("[limits]\nidle_timeout = 1h\n", ":2:", "belongs before the first section");
        expect_error("[nosuch]\n", ":1:", "unknown section");

        /* the same from the environment, at start as in --check-config */
        struct sbx_config cfg;
        struct sbx_error err = {0};
        setenv("SANDBOXD_MAX_EXEC_GLOBAL", "3", 1);
        cr_expect_eq(config_load(NULL, &cfg, &err), -EINVAL);
        unsetenv("SANDBOXD_MAX_EXEC_GLOBAL");
        cr_expect_not_null(strstr(err.msg, "environment SANDBOXD_MAX_EXEC_GLOBAL: key 'max_exec_global' was renamed"),
                           "%s", err.msg);
        setenv("SANDBOXD_GC_MAX_AGE", "30d", 1);
        cr_expect_eq(config_load(NULL, &cfg, &err), -EINVAL);
        unsetenv("SANDBOXD_GC_MAX_AGE");
        cr_expect_not_null(strstr(err.msg, "environment SANDBOXD_GC_MAX_AGE: key 'gc.max_age' is no longer a setting"),
                           "%s", err.msg);
        /* node.listen and node.listen share their variable: still accepted */
        setenv("SANDBOXD_NODE_FENCE", "1m", 1);
        cr_expect_eq(config_load(NULL, &cfg, &err), 0, "%s", err.msg);
        unsetenv("SANDBOXD_NODE_FENCE");
        cr_expect_eq(cfg.node_fence_ms, 60000);

        /* every old key gives an error that is not "unknown key" */
        for (size_t i = 0; config_old_key_name(i); i++) {
                config_defaults(&cfg);
                cr_expect_eq(config_set(&cfg, config_old_key_name(i), "1", &err), -EINVAL);
                cr_expect_null(strstr(err.msg, "unknown key"), "%s", err.msg);
        }
}

/* One duration syntax: a whole number and ms, s, m, h or d, for every
 * duration key, stored in the field's unit; a bare number is that unit. */
Test(config, one_duration_syntax)
{
        int64_t v;
        struct sbx_config cfg;
        struct sbx_error err = {0};

        cr_assert_eq(config_parse_duration("500ms", 1, &v), 0);
        cr_expect_eq(v, 500);
        cr_assert_eq(config_parse_duration("2m", 1, &v), 0);
        cr_expect_eq(v, 120000);
        cr_assert_eq(config_parse_duration("1d", 1, &v), 0);
        cr_expect_eq(v, 86400000);
        cr_assert_eq(config_parse_duration("3h", 1000, &v), 0);
        cr_expect_eq(v, 10800);
        cr_assert_eq(config_parse_duration("2000ms", 1000, &v), 0);
        cr_expect_eq(v, 2);
        cr_assert_eq(config_parse_duration("90", 1000, &v), 0, "a bare number is the field's unit");
        cr_expect_eq(v, 90);
        cr_assert_eq(config_parse_duration("90", 1, &v), 0);
        cr_expect_eq(v, 90);
        cr_assert_eq(config_parse_duration("-1", 1000, &v), 0, "forever, where a key allows it");
        cr_expect_eq(v, -1);
        cr_expect_eq(config_parse_duration("1500ms", 1000, &v), -EINVAL, "not whole seconds");
        cr_expect_eq(config_parse_duration("-1s", 1000, &v), -EINVAL);
        cr_expect_eq(config_parse_duration("5 min", 1000, &v), -EINVAL);
        cr_expect_eq(config_parse_duration("1.5s", 1, &v), -EINVAL);
        cr_expect_eq(config_parse_duration("s", 1, &v), -EINVAL);
        cr_expect_eq(config_parse_duration("99999999999999999d", 1, &v), -ERANGE);

        /* the same syntax on a seconds key and on a milliseconds key */
        config_defaults(&cfg);
        cr_assert_eq(config_set(&cfg, "idle_timeout", "90m", &err), 0, "%s", err.msg);
        cr_expect_eq(cfg.idle_timeout_s, 5400);
        cr_assert_eq(config_set(&cfg, "gc.execution_retention", "1d", &err), 0, "%s", err.msg);
        cr_expect_eq(cfg.execution_retention_s, 86400);
        cr_assert_eq(config_set(&cfg, "node.fence", "1m", &err), 0, "%s", err.msg);
        cr_expect_eq(cfg.node_fence_ms, 60000);
        cr_assert_eq(config_set(&cfg, "exec.kill_grace", "1d", &err), -EINVAL, "past its range");
        cr_assert_eq(config_set(&cfg, "pool.wait", "250ms", &err), 0, "%s", err.msg);
        cr_expect_eq(cfg.pool_wait_ms, 250);
        cr_assert_eq(config_set(&cfg, "exec.timeout_default", "1500ms", &err), -EINVAL);
        cr_expect_not_null(strstr(err.msg, "whole seconds"), "%s", err.msg);
}

Test(config, values_units_and_quotes)
{
        struct sbx_config cfg;
        struct sbx_error err = {0};
        write_conf(
                "# comment\n"
                "memory = 512m   # trailing comment\n"
                "cpus = 1.5\n"
                "idle_timeout = 2h\n"
                "port_range = 30000-30099\n"
                "instance = \"ci-1\"\n"
                "image = \"my image # not a comment\"\n"
                "[node]\n"
                "fence = 250ms\n"
                "limits.sessions = 7 # a dotted key anywhere\n"
                "\n");
        cr_assert_eq(config_load(path, &cfg, &err), 0, "%s", err.msg);
        cr_assert_eq(cfg.memory_bytes, 512LL << 20);
        cr_assert_eq(cfg.nano_cpus, 1500000000LL);
        cr_assert_eq(cfg.idle_timeout_s, 7200);
        cr_assert_eq(cfg.node_fence_ms, 250);
        cr_assert_eq(cfg.max_sessions, 7);
        cr_assert_eq(cfg.port_range_lo, 30000);
        cr_assert_eq(cfg.port_range_hi, 30099);
        cr_assert_str_eq(cfg.instance, "ci-1");
        cr_assert_str_eq(cfg.image, "my image # not a comment");
}

static void expect_error(const char *text, const char *line_tag, const char *why)
{
        struct sbx_config cfg;
        struct sbx_error err = {0};
        write_conf(text);
        cr_assert_eq(config_load(path, &cfg, &err), -EINVAL, "accepted: %s", text);
        cr_assert_not_null(strstr(err.msg, line_tag), "'%s' does not name %s", err.msg, line_tag);
        cr_assert_not_null(strstr(err.msg, why), "'%s' does not say '%s'", err.msg, why);
        unlink(path);
}

Test(config, errors_name_the_line_and_reason)
{
        expect_error("memory = 1g\nbogus_key = 1\n", ":2:", "unknown key 'bogus_key'");
        expect_error("\n\nmemory = lots\n", ":3:", "not a valid size");
        expect_error("pids_limit = 3\n", ":1:", "out of range");
        expect_error("network_default = host\n", ":1:", "not one of bridge|none");
        expect_error("port_range = 30000\n", ":1:", "LOW-HIGH");
        expect_error("port_range = 3000-2000\n", ":1:", "LOW <= HIGH");
        expect_error("data_dir = relative/path\n", ":1:", "absolute path");
        expect_error("just a line\n", ":1:", "key = value");
        expect_error("instance = \"bad label!\"\n", ":1:", "instance");
        expect_error("cpus = 1.2.3\n", ":1:", "CPU count");
        expect_error("image = \"unterminated\n", ":1:", "unterminated");
        expect_error("memory = 99999999999999999999\n", ":1:", "memory");
}

Test(config, cross_key_checks)
{
        struct sbx_config cfg;
        struct sbx_error err = {0};
        write_conf("port_range = 30000-30003\nports_per_session = 5\n");
        cr_assert_eq(config_load(path, &cfg, &err), -EINVAL);
        cr_assert_not_null(strstr(err.msg, "ports_per_session"), "%s", err.msg);
        unlink(path);
        write_conf("[limits]\nexec_per_session = 20\nexec_global = 10\n");
        cr_assert_eq(config_load(path, &cfg, &err), -EINVAL);
        cr_assert_not_null(strstr(err.msg, "limits.exec_per_session"), "%s", err.msg);
}

/* pool.images: per-image pool sizes over pool.size, of images sessions may use only */
Test(config, pool_images_override_pool_size_per_image)
{
        struct sbx_config cfg;
        struct sbx_error err = {0};
        char list[4][256];

        write_conf("image = a:1\nimages = b:2, c:3 ,a:1\n[pool]\nsize = 2\nimages = b:2=5, c:3 = 0\n");
        cr_assert_eq(config_load(path, &cfg, &err), 0, "%s", err.msg);
        cr_assert_eq(config_image_list(&cfg, list, 4), 3, "image first, then images, each once");
        cr_assert_str_eq(list[0], "a:1");
        cr_assert_str_eq(list[1], "b:2");
        cr_assert_str_eq(list[2], "c:3");
        cr_assert_eq(config_pool_size_for(&cfg, "a:1"), 2);
        cr_assert_eq(config_pool_size_for(&cfg, "b:2"), 5);
        cr_assert_eq(config_pool_size_for(&cfg, "c:3"), 0);
        unlink(path);
        write_conf("image = a:1\npool.images = z:9=1\n");
        cr_assert_eq(config_load(path, &cfg, &err), -EINVAL, "an image sessions cannot use was accepted");
        cr_assert_not_null(strstr(err.msg, "pool_images"), "%s", err.msg);
        unlink(path);
        write_conf("image = a:1\npool.images = a:1=1001\n");
        cr_assert_eq(config_load(path, &cfg, &err), -EINVAL, "a size past 1000 was accepted");
        unlink(path);
        write_conf("image = a:1\npool.images = a:1\n");
        cr_assert_eq(config_load(path, &cfg, &err), -EINVAL, "an entry without =N was accepted");
}

Test(config, environment_overrides_file)
{
        struct sbx_config cfg;
        struct sbx_error err = {0};
        write_conf("memory = 512m\ninstance = fromfile\n");
        setenv("SANDBOXD_MEMORY", "256m", 1);
        cr_assert_eq(config_load(path, &cfg, &err), 0, "%s", err.msg);
        cr_assert_eq(cfg.memory_bytes, 256LL << 20);
        cr_assert_str_eq(cfg.instance, "fromfile");
        setenv("SANDBOXD_INSTANCE", "bad value", 1);
        cr_assert_eq(config_load(path, &cfg, &err), -EINVAL);
        cr_assert_not_null(strstr(err.msg, "SANDBOXD_INSTANCE"), "%s", err.msg);
}

Test(config, missing_file_is_an_error)
{
        struct sbx_config cfg;
        struct sbx_error err = {0};
        cr_assert_eq(config_load("/nonexistent/sandboxd.conf", &cfg, &err), -ENOENT);
        cr_assert_not_null(strstr(err.msg, "/nonexistent/sandboxd.conf"), "%s", err.msg);
}

/* What the kubernetes engine cannot do is refused at load, not at the first session. */
Test(config, kubernetes_refuses_a_bridge_network_and_pools_on_claims)
{
        struct sbx_config cfg;
        struct sbx_error err = {0};

        write_conf("engine = kubernetes\nnetwork_default = bridge\n");
        cr_expect_eq(config_load(path, &cfg, &err), -EINVAL);
        cr_expect(strstr(err.msg, "default-deny NetworkPolicy"), "%s", err.msg);
        /* the warm pool makes each slot's claim ahead (issue 27) */
        write_conf("engine = kubernetes\n[kubernetes]\nworkspace = pvc\nnamespace = sbx\n[pool]\nsize = 2\n");
        cr_expect_eq(config_load(path, &cfg, &err), 0, "%s", err.msg);
        cr_expect_eq(cfg.pool_size, 2);
        write_conf("engine = kubernetes\n[kubernetes]\nworkspace = pvc\nnamespace = sbx\n[pool]\nsize = 0\n");
        cr_expect_eq(config_load(path, &cfg, &err), 0, "%s", err.msg);
        cr_expect_str_eq(cfg.engine, "kubernetes");
        cr_expect_str_eq(cfg.kube_workspace, "pvc");
        unlink(path);
}
