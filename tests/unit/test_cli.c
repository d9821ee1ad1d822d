/* The sandboxd front's command line: --check-config, --version, --help and
 * usage errors, run as the real binary. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Run the daemon binary with args; returns its exit status, output in out. */
static int run(const char *args, char *out, size_t size)
{
        char cmd[1024];
        size_t n;
        FILE *p;

        snprintf(cmd, sizeof(cmd), "env -u SANDBOXD_MEMORY %s/sandboxd %s 2>&1", SANDBOXD_BINARY_DIR, args);
        p = popen(cmd, "r");
        cr_assert_not_null(p);
        n = fread(out, 1, size - 1, p);
        out[n] = '\0';
        int status = pclose(p);
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char path[64];

static void conf(const char *text)
{
        strcpy(path, "/tmp/sbx-cli-XXXXXX");
        int fd = mkstemp(path);
        cr_assert(fd >= 0);
        cr_assert(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
        close(fd);
}

static void cleanup(void)
{
        if (path[0])
                unlink(path);
}

TestSuite(cli, .fini = cleanup);

Test(cli, check_config_accepts_the_documented_file)
{
        char out[4096], args[600];
        snprintf(args, sizeof(args), "--config %s/etc/sandboxd.conf --check-config", SANDBOXD_SOURCE_DIR);
        cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
        cr_assert_not_null(strstr(out, "configuration OK"), "%s", out);
}

Test(cli, check_config_names_the_offending_line)
{
        char out[4096], args[128];
        conf("memory = 1g\n# fine\nport_range = 9-1\n");
        snprintf(args, sizeof(args), "--config %s --check-config", path);
        cr_assert_eq(run(args, out, sizeof(out)), 1, "%s", out);
        cr_assert_not_null(strstr(out, ":3:"), "%s", out);
        cr_assert_not_null(strstr(out, "port_range"), "%s", out);
}

Test(cli, check_config_refuses_project_quotas_with_a_reason)
{
        char out[4096], args[128];
        conf("workspace.quota_mode = project\n");
        snprintf(args, sizeof(args), "--config %s --check-config", path);
        cr_assert_eq(run(args, out, sizeof(out)), 1, "%s", out);
        cr_assert_not_null(strstr(out, "workspace.quota_mode project"), "%s", out);
        cr_assert_not_null(strstr(out, "use loop"), "%s", out);
}

Test(cli, environment_errors_are_named_too)
{
        char out[4096];
        cr_assert_eq(setenv("SANDBOXD_MEMORY", "lots", 1), 0);
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "%s/sandboxd --check-config 2>&1", SANDBOXD_BINARY_DIR);
        FILE *p = popen(cmd, "r");
        size_t n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = '\0';
        int status = pclose(p);
        unsetenv("SANDBOXD_MEMORY");
        cr_assert_eq(WEXITSTATUS(status), 1, "%s", out);
        cr_assert_not_null(strstr(out, "SANDBOXD_MEMORY"), "%s", out);
}

Test(cli, version_help_and_usage_errors)
{
        char out[4096];
        cr_assert_eq(run("--version", out, sizeof(out)), 0);
        cr_assert_not_null(strstr(out, "sandboxd "), "%s", out);
        cr_assert_eq(run("--help", out, sizeof(out)), 0);
        cr_assert_not_null(strstr(out, "--check-config"), "%s", out);
        cr_assert_eq(run("--no-such-option", out, sizeof(out)), 2);
        cr_assert_eq(run("--config /nonexistent/x.conf --check-config", out, sizeof(out)), 1);
        cr_assert_not_null(strstr(out, "/nonexistent/x.conf"), "%s", out);
}

Test(cli, check_config_refuses_a_uid_range_a_host_account_holds)
{
        char out[4096], args[128];
        /* nobody (65534) is in every passwd database */
        conf("sandbox_uid_range = 60000-70000\n");
        snprintf(args, sizeof(args), "--config %s --check-config", path);
        cr_assert_eq(run(args, out, sizeof(out)), 1, "%s", out);
        cr_assert_not_null(strstr(out, "sandbox_uid_range"), "%s", out);
        cr_assert_not_null(strstr(out, "65534"), "%s", out);
}
