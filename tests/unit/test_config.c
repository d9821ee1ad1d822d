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

Test(config, documented_file_lists_every_key_and_parses)
{
        char file[512];
        FILE *f;
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        struct sbx_config cfg, def;
        struct sbx_error err = {0};

        snprintf(file, sizeof(file), "%s/etc/sandboxd.conf", SANDBOXD_SOURCE_DIR);
        f = open_memstream(&text, &len);
        FILE *in = fopen(file, "r");
        cr_assert_not_null(in);
        for (int c; (c = fgetc(in)) != EOF;)
                fputc(c, f);
        fclose(in);
        fclose(f);
        for (size_t i = 0; config_key_name(i); i++) {
                char needle[80];
                snprintf(needle, sizeof(needle), "\n%s = ", config_key_name(i));
                cr_expect_not_null(strstr(text, needle), "etc/sandboxd.conf does not document %s", config_key_name(i));
        }
        cr_assert_eq(config_load(file, &cfg, &err), 0, "%s", err.msg);
        config_defaults(&def);
        cr_assert_eq(memcmp(&cfg, &def, sizeof(cfg)), 0, "etc/sandboxd.conf differs from the embedded defaults");
}

Test(config, values_units_and_quotes)
{
        struct sbx_config cfg;
        struct sbx_error err = {0};
        write_conf(
                "# comment\n"
                "memory = 512m   # trailing comment\n"
                "cpus = 1.5\n"
                "tmpfs_size = 2g\n"
                "idle_timeout = 2h\n"
                "monitor_interval = 250ms\n"
                "port_range = 30000-30099\n"
                "instance = \"ci-1\"\n"
                "image = \"my image # not a comment\"\n"
                "\n");
        cr_assert_eq(config_load(path, &cfg, &err), 0, "%s", err.msg);
        cr_assert_eq(cfg.memory_bytes, 512LL << 20);
        cr_assert_eq(cfg.nano_cpus, 1500000000LL);
        cr_assert_eq(cfg.tmpfs_bytes, 2LL << 30);
        cr_assert_eq(cfg.idle_timeout_s, 7200);
        cr_assert_eq(cfg.monitor_interval_ms, 250);
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
        write_conf("max_exec_per_session = 20\nmax_exec_global = 10\n");
        cr_assert_eq(config_load(path, &cfg, &err), -EINVAL);
        cr_assert_not_null(strstr(err.msg, "max_exec_per_session"), "%s", err.msg);
}

/* pool_images: per-image pool sizes over pool_size, of images sessions may use only */
Test(config, pool_images_override_pool_size_per_image)
{
        struct sbx_config cfg;
        struct sbx_error err = {0};
        char list[4][256];

        write_conf("image = a:1\nimages = b:2, c:3 ,a:1\npool_size = 2\npool_images = b:2=5, c:3 = 0\n");
        cr_assert_eq(config_load(path, &cfg, &err), 0, "%s", err.msg);
        cr_assert_eq(config_image_list(&cfg, list, 4), 3, "image first, then images, each once");
        cr_assert_str_eq(list[0], "a:1");
        cr_assert_str_eq(list[1], "b:2");
        cr_assert_str_eq(list[2], "c:3");
        cr_assert_eq(config_pool_size_for(&cfg, "a:1"), 2);
        cr_assert_eq(config_pool_size_for(&cfg, "b:2"), 5);
        cr_assert_eq(config_pool_size_for(&cfg, "c:3"), 0);
        unlink(path);
        write_conf("image = a:1\npool_images = z:9=1\n");
        cr_assert_eq(config_load(path, &cfg, &err), -EINVAL, "an image sessions cannot use was accepted");
        cr_assert_not_null(strstr(err.msg, "pool_images"), "%s", err.msg);
        unlink(path);
        write_conf("image = a:1\npool_images = a:1=1001\n");
        cr_assert_eq(config_load(path, &cfg, &err), -EINVAL, "a size past 1000 was accepted");
        unlink(path);
        write_conf("image = a:1\npool_images = a:1\n");
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
        write_conf("engine = kubernetes\nkube_workspace = pvc\npool_size = 2\nkube_namespace = sbx\n");
        cr_expect_eq(config_load(path, &cfg, &err), 0, "%s", err.msg);
        cr_expect_eq(cfg.pool_size, 2);
        write_conf("engine = kubernetes\nkube_workspace = pvc\npool_size = 0\nkube_namespace = sbx\n");
        cr_expect_eq(config_load(path, &cfg, &err), 0, "%s", err.msg);
        cr_expect_str_eq(cfg.engine, "kubernetes");
        cr_expect_str_eq(cfg.kube_workspace, "pvc");
        unlink(path);
}
