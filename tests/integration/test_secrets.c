/* Integration tests of the secrets (issue 37) over the daemon's real API
 * socket and sqlite: the value goes in and never comes out, not in an
 * answer, not in any file under data_dir (the db, its WAL), and a daemon
 * without a key file still starts and says why it cannot hold secrets. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/secrets.h"
#include "sandboxd/token.h"
#include "testenv.h"

TestSuite(secrets, .timeout = 300);

#define VALUE "sbx-test-secret-value-7f3a91c2d4e5b6a8"

static struct sbx_config cfg;
static struct daemon *d;
static char tok_a[TOKEN_LEN + 1], tok_b[TOKEN_LEN + 1], conn_a[TOKEN_LEN + 1], conn_b[TOKEN_LEN + 1];

static void open_daemon(bool with_key)
{
        char dir[SBX_PATH_MAX];
        struct daemon_options opts = {.extra_labels = fixture_labels(), .no_monitor = true, .sockets = true};
        struct sbx_error err = {0};

        fixture_config(&cfg);
        snprintf(dir, sizeof(dir), "%s", cfg.data_dir);
        snprintf(cfg.api_socket, sizeof(cfg.api_socket), "%s/run/api.sock", dirname(dir));
        snprintf(cfg.admin_socket, sizeof(cfg.admin_socket), "%s/run/admin.sock", dir);
        if (with_key) {
                /* beside data_dir, never in it */
                int fd;
                snprintf(cfg.secrets_key_file, sizeof(cfg.secrets_key_file), "%s/secrets.key", dir);
                fd = open(cfg.secrets_key_file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
                cr_assert_geq(fd, 0);
                cr_assert_eq(write(fd, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n", 65), 65);
                close(fd);
        }
        (void)testenv_docker();
        cr_assert_eq(fronts_open(&cfg, &opts, &d, &err), 0, "daemon_open: %s", err.msg);
        cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_AGENT, tok_a, NULL, &err), 0);
        cr_assert_eq(token_create(d->store, "bob", TOKEN_ROLE_AGENT, tok_b, NULL, &err), 0);
        cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_CONNECTOR, conn_a, NULL, &err), 0);
        cr_assert_eq(token_create(d->store, "bob", TOKEN_ROLE_CONNECTOR, conn_b, NULL, &err), 0);
}

static cJSON *call(const char *token, const char *method, const char *params_json)
{
        return apic_call(cfg.api_socket, token, method, apic_json(params_json));
}

static void expect_code(cJSON *reply, const char *code, const char *what)
{
        cr_assert_str_eq(apic_code(reply), code, "%s: got %s", what, cJSON_PrintUnformatted(reply));
        cJSON_Delete(reply);
}

/* Whether any file under dir (recursively) holds needle. */
static bool found_under(const char *dir, const char *needle)
{
        DIR *dp = opendir(dir);
        struct dirent *de;
        bool found = false;

        if (!dp)
                return false;
        while (!found && (de = readdir(dp))) {
                char p[SBX_PATH_MAX];
                struct stat st;
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
                if (lstat(p, &st) < 0)
                        continue;
                if (S_ISDIR(st.st_mode)) {
                        found = found_under(p, needle);
                } else if (S_ISREG(st.st_mode)) {
                        FILE *f = fopen(p, "rb");
                        size_t n = strlen(needle), have = 0;
                        int c;
                        /* a plain scan: the files are small, the needle has no repeated prefix */
                        while (f && !found && (c = fgetc(f)) != EOF) {
                                have = (unsigned char)c == (unsigned char)needle[have] ? have + 1
                                       : (unsigned char)c == (unsigned char)needle[0]  ? 1
                                                                                       : 0;
                                found = have == n;
                        }
                        if (found)
                                cr_log_error("%s holds the value", p);
                        if (f)
                                fclose(f);
                }
        }
        closedir(dp);
        return found;
}

static bool reply_has_value(const cJSON *r)
{
        char *text = cJSON_PrintUnformatted(r);
        bool has = text && strstr(text, VALUE);
        free(text);
        return has;
}

Test(secrets, set_list_delete_never_shows_the_value)
{
        cJSON *r;
        const cJSON *res, *list, *e;

        open_daemon(true);
        expect_code(call(tok_a, "set_secret",
                         "{\"name\":\"GH\",\"value\":\"" VALUE "\",\"hosts\":[\"api.github.com\"]}"),
                    "forbidden", "an agent token sets");
        r = call(conn_a, "set_secret",
                 "{\"name\":\"GH\",\"value\":\"" VALUE
                 "\",\"hosts\":[\"API.github.com\"],\"header\":\"Authorization\"}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cr_assert_not(reply_has_value(r));
        cJSON_Delete(r);

        r = call(tok_a, "list_secrets", "{}");
        res = apic_result(r);
        cr_assert_not_null(res, "%s", cJSON_PrintUnformatted(r));
        cr_assert_not(reply_has_value(r));
        list = cJSON_GetObjectItem(res, "secrets");
        cr_assert_eq(cJSON_GetArraySize(list), 1);
        e = cJSON_GetArrayItem(list, 0);
        cr_assert_str_eq(apic_str(e, "name"), "GH");
        cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(e, "hosts"), 0)->valuestring, "api.github.com");
        cr_assert_str_eq(apic_str(e, "header"), "Authorization");
        cr_assert_gt(apic_num(e, "created_at"), 0);
        cr_assert_geq(apic_num(e, "updated_at"), apic_num(e, "created_at"));
        cr_assert_eq(apic_num(res, "max_count"), SECRETS_MAX_PER_USER);
        cJSON_Delete(r);

        /* another user sees none of it and cannot delete it */
        r = call(tok_b, "list_secrets", "{}");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(apic_result(r), "secrets")), 0, "%s",
                     cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        expect_code(call(conn_b, "delete_secret", "{\"name\":\"GH\"}"), "not_found", "bob deletes alice's");

        /* bad input is a client error naming the field, never echoing the value */
        r = call(conn_a, "set_secret", "{\"name\":\"gh\",\"value\":\"" VALUE "\",\"hosts\":[\"api.github.com\"]}");
        cr_assert_str_eq(apic_code(r), "invalid", "%s", cJSON_PrintUnformatted(r));
        cr_assert_not(reply_has_value(r));
        cJSON_Delete(r);
        expect_code(call(conn_a, "set_secret", "{\"name\":\"X\",\"value\":\"a\\r\\nb\",\"hosts\":[\"a.example\"]}"),
                    "invalid", "CR LF in the value");
        expect_code(call(conn_a, "set_secret", "{\"name\":\"X\",\"value\":\"v\",\"hosts\":[\"10.0.0.1\"]}"), "invalid",
                    "an address as host");

        /* the cap on count */
        for (int i = 1; i < SECRETS_MAX_PER_USER; i++) {
                char p[160];
                snprintf(p, sizeof(p), "{\"name\":\"S%d\",\"value\":\"v\",\"hosts\":[\"a.example\"]}", i);
                r = call(conn_a, "set_secret", p);
                cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
                cJSON_Delete(r);
        }
        r = call(conn_a, "set_secret", "{\"name\":\"ONE_MORE\",\"value\":\"v\",\"hosts\":[\"a.example\"]}");
        cr_assert_null(apic_result(r), "the %dth secret was stored", SECRETS_MAX_PER_USER + 1);
        cJSON_Delete(r);

        /* the value is nowhere under data_dir (db, WAL) while held, nor after delete */
        cr_assert_not(found_under(cfg.data_dir, VALUE));
        r = call(conn_a, "delete_secret", "{\"name\":\"GH\"}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        expect_code(call(conn_a, "delete_secret", "{\"name\":\"GH\"}"), "not_found", "deleted twice");
        r = call(tok_a, "list_secrets", "{}");
        cr_assert_eq(apic_num(apic_result(r), "count"), SECRETS_MAX_PER_USER - 1);
        cJSON_Delete(r);
        cr_assert_not(found_under(cfg.data_dir, VALUE));
        daemon_close(d);
        cr_assert_not(found_under(cfg.data_dir, VALUE));
}

Test(secrets, without_a_key_file_the_daemon_starts_and_refuses_set)
{
        cJSON *r;

        open_daemon(false);
        r = call(conn_a, "set_secret", "{\"name\":\"GH\",\"value\":\"" VALUE "\",\"hosts\":[\"api.github.com\"]}");
        cr_assert_str_eq(apic_code(r), "unavailable", "%s", cJSON_PrintUnformatted(r));
        cr_assert_not_null(strstr(cJSON_PrintUnformatted(r), "secrets_key_file"), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        r = call(tok_a, "list_secrets", "{}");
        cr_assert_eq(apic_num(apic_result(r), "count"), 0, "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        /* the daemon serves the rest */
        r = call(tok_a, "list_sessions", "{}");
        cr_assert_not_null(apic_result(r), "%s", cJSON_PrintUnformatted(r));
        cJSON_Delete(r);
        daemon_close(d);
}
