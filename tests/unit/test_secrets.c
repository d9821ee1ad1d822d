/* test_secrets.c — secrets.c (issue 37): sealing round trips and refuses
 * any change, the key file checks, and the validation of names, hosts,
 * headers and values; secrets_ca.c: the session's CA. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/secrets.h"
#include "sandboxd/secrets_ca.h"
#include "sandboxd/store.h"
#include "sandboxd/utf8.h"

#define KEY_A "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n"
#define KEY_B "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100\n"

static char tmpdir[PATH_MAX], datadir[PATH_MAX], keypath[PATH_MAX];

static void write_file(const char *path, const char *text, mode_t mode)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

        cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
        cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        close(fd);
        cr_assert_eq(chmod(path, mode), 0);
}

static void setup(void)
{
        const char *base = getenv("TMPDIR");

        snprintf(tmpdir, sizeof(tmpdir), "%s/sbx-secrets-XXXXXX", base && *base ? base : "/tmp");
        cr_assert_not_null(mkdtemp(tmpdir));
        snprintf(datadir, sizeof(datadir), "%s/data", tmpdir);
        cr_assert_eq(mkdir(datadir, 0700), 0);
        snprintf(keypath, sizeof(keypath), "%s/key", tmpdir);
        write_file(keypath, KEY_A, 0600);
}

static void rm_dir(const char *dir)
{
        DIR *d = opendir(dir);
        struct dirent *de;

        if (d) {
                while ((de = readdir(d)))
                        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                                unlinkat(dirfd(d), de->d_name, 0);
                closedir(d);
        }
        rmdir(dir);
}

static void teardown(void)
{
        rm_dir(datadir);
        rm_dir(tmpdir);
}

TestSuite(secrets, .init = setup, .fini = teardown);

static struct secrets *open_key(const char *path)
{
        struct sbx_error err = {0};
        struct secrets *s = NULL;

        cr_assert_eq(secrets_open(path, datadir, &s, &err), 0, "%s", err.msg);
        return s;
}

/* secrets_open fails with an error naming the key file and containing want */
static void open_refused(const char *path, const char *want)
{
        struct sbx_error err = {0};
        struct secrets *s = NULL;

        cr_assert_lt(secrets_open(path, datadir, &s, &err), 0, "%s opened", path);
        cr_assert_null(s);
        cr_assert_not_null(strstr(err.msg, want), "error '%s' lacks '%s'", err.msg, want);
}

Test(secrets, seal_open_round_trip)
{
        struct secrets *s = open_key(keypath);
        struct secret_value *v = NULL;
        char *a = NULL, *b = NULL;

        cr_assert_eq(secrets_seal(s, "alice", "GITHUB_TOKEN", "ghp_abc123", 10, &a), 0);
        cr_assert_null(strstr(a, "ghp_abc123"));
        cr_assert_eq(secrets_unseal(s, "alice", "GITHUB_TOKEN", a, &v), 0);
        cr_assert_eq(v->len, 10);
        cr_assert_str_eq((char *)v->bytes, "ghp_abc123");
        secret_value_free(v);
        /* a fresh nonce each time: the same value seals differently */
        cr_assert_eq(secrets_seal(s, "alice", "GITHUB_TOKEN", "ghp_abc123", 10, &b), 0);
        cr_assert_str_neq(a, b);
        free(a);
        free(b);
        secrets_free(s);
}

/* decode, flip one bit at off (negative: from the end), encode, refuse */
static void flipped_refused(const struct secrets *s, const char *sealed, long off)
{
        unsigned char *raw = NULL;
        size_t n = 0;
        struct secret_value *v = NULL;
        char *text;

        cr_assert_eq(base64_decode(sealed, strlen(sealed), &raw, &n), 0);
        raw[off < 0 ? (long)n + off : off] ^= 0x01;
        text = base64_encode(raw, n);
        cr_assert_eq(secrets_unseal(s, "alice", "TOKEN", text, &v), -EBADMSG, "flip at %ld opened", off);
        cr_assert_null(v);
        free(text);
        free(raw);
}

Test(secrets, any_flipped_bit_is_refused)
{
        struct secrets *s = open_key(keypath);
        char *sealed = NULL;

        cr_assert_eq(secrets_seal(s, "alice", "TOKEN", "value-1234", 10, &sealed), 0);
        flipped_refused(s, sealed, 0);   /* nonce */
        flipped_refused(s, sealed, 11);  /* nonce, last byte */
        flipped_refused(s, sealed, 12);  /* ciphertext */
        flipped_refused(s, sealed, 21);  /* ciphertext, last byte */
        flipped_refused(s, sealed, -16); /* tag */
        flipped_refused(s, sealed, -1);  /* tag, last byte */
        free(sealed);
        secrets_free(s);
}

Test(secrets, wrong_key_user_or_name_is_refused)
{
        char other[PATH_MAX];
        struct secrets *a = open_key(keypath), *b;
        struct secret_value *v = NULL;
        char *sealed = NULL;

        snprintf(other, sizeof(other), "%s/key2", tmpdir);
        write_file(other, KEY_B, 0400);
        b = open_key(other);
        cr_assert_eq(secrets_seal(a, "alice", "TOKEN", "value", 5, &sealed), 0);
        cr_assert_eq(secrets_unseal(b, "alice", "TOKEN", sealed, &v), -EBADMSG);
        cr_assert_eq(secrets_unseal(a, "bob", "TOKEN", sealed, &v), -EBADMSG);
        cr_assert_eq(secrets_unseal(a, "alice", "TOKEN2", sealed, &v), -EBADMSG);
        cr_assert_eq(secrets_unseal(a, "alice", "TOKEN", "not base64 !", &v), -EBADMSG);
        cr_assert_eq(secrets_unseal(a, "alice", "TOKEN", "AAAA", &v), -EBADMSG); /* too short */
        cr_assert_null(v);
        unlink(other);
        free(sealed);
        secrets_free(a);
        secrets_free(b);
}

Test(secrets, key_file_checks)
{
        char p[PATH_MAX], link[PATH_MAX];

        open_refused("relative/key", "absolute path");
        snprintf(p, sizeof(p), "%s/missing", tmpdir);
        open_refused(p, "keygen");

        /* group or other bits */
        snprintf(p, sizeof(p), "%s/open", tmpdir);
        write_file(p, KEY_A, 0640);
        open_refused(p, "readable by it alone");
        write_file(p, KEY_A, 0604);
        open_refused(p, "it is 0604");
        unlink(p);

        /* a symlink to a good key */
        snprintf(link, sizeof(link), "%s/link", tmpdir);
        cr_assert_eq(symlink(keypath, link), 0);
        open_refused(link, link);
        unlink(link);

        /* not a regular file */
        open_refused(tmpdir, "not a regular file");

        /* wrong size, not hex */
        snprintf(p, sizeof(p), "%s/short", tmpdir);
        write_file(p, "00112233", 0600);
        open_refused(p, "64 hex digits");
        write_file(p, KEY_A "00", 0600);
        open_refused(p, "64 hex digits");
        write_file(p, "zz112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 0600);
        open_refused(p, "64 hex digits");
        /* without the newline it is good */
        write_file(p, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 0600);
        secrets_free(open_key(p));
        unlink(p);

        /* inside data_dir, also through a symlinked directory */
        snprintf(p, sizeof(p), "%s/key", datadir);
        write_file(p, KEY_A, 0600);
        open_refused(p, "inside data_dir");
        snprintf(link, sizeof(link), "%s/datalink", tmpdir);
        cr_assert_eq(symlink(datadir, link), 0);
        snprintf(p, sizeof(p), "%s/key", link);
        open_refused(p, "inside data_dir");
        unlink(link);
}

Test(secrets, names)
{
        static const char *good[] = {"A", "_", "GITHUB_TOKEN", "X9",
                                     "A23456789012345678901234567890123456789012345678901234567890123"};
        static const char *bad[] = {"",     "9A",
                                    "a",    "GITHUB-TOKEN",
                                    "A B",  "A=B",
                                    "Ä",    "A\n",
                                    "../A", "A2345678901234567890123456789012345678901234567890123456789012345"};

        for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++)
                cr_assert(secrets_name_valid(good[i]), "%s refused", good[i]);
        for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
                cr_assert_not(secrets_name_valid(bad[i]), "'%s' accepted", bad[i]);
        cr_assert_not(secrets_name_valid(NULL));
}

static int hosts(const char *json, char **ret, struct sbx_error *err)
{
        cJSON *h = cJSON_Parse(json);
        int r;

        cr_assert_not_null(h, "%s", json);
        r = secrets_hosts_check(h, ret, err);
        cJSON_Delete(h);
        return r;
}

Test(secrets, hosts)
{
        static const char *bad[] = {
                "[]",
                "\"api.github.com\"",
                "[1]",
                "[\"\"]",
                "[\"10.0.0.1\"]",
                "[\"127.1\"]",
                "[\"[::1]\"]",
                "[\"::1\"]",
                "[\"api.github.com:443\"]",
                "[\"*.github.com\"]",
                "[\"a b.com\"]",
                "[\"a\\nb.com\"]",
                "[\"a.com\",\"b.com\",\"c.com\",\"d.com\",\"e.com\",\"f.com\",\"g.com\",\"h.com\",\"i.com\"]",
        };
        struct sbx_error err = {0};
        char *out = NULL;

        cr_assert_eq(hosts("[\"API.GitHub.com\",\"api.github.com\",\"uploads.github.com\"]", &out, &err), 0, "%s",
                     err.msg);
        cr_assert_str_eq(out, "[\"api.github.com\",\"uploads.github.com\"]");
        free(out);
        for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
                out = NULL;
                cr_assert_lt(hosts(bad[i], &out, &err), 0, "%s accepted", bad[i]);
                cr_assert_null(out);
                cr_assert_not_null(strstr(err.msg, "hosts"), "%s: %s", bad[i], err.msg);
        }
}

/* secrets_set against a real store: header and value checks, the cap */
Test(secrets, set_validates_header_and_value)
{
        char db[PATH_MAX], big[SECRETS_VALUE_MAX + 2];
        static const char *bad_headers[] = {
                "",         "X Auth", "X-Auth\r\nHost",
                "X-Auth\n", "X:Auth", "X-Auth-Token-0123456789012345678901234567890123456789012345678901"};
        static const char *bad_values[] = {"tok\r\nX-Evil: 1", "tok\n", "\rtok"};
        struct secrets *s = open_key(keypath);
        struct sbx_error err = {0};
        cJSON *h = cJSON_Parse("[\"api.example.com\"]");
        struct store *st = NULL;
        struct store_secret row;
        char *sealed = NULL;
        struct secret_value *v = NULL;

        snprintf(db, sizeof(db), "%s/test.db", datadir);
        cr_assert_eq(store_open(db, &st, &err), 0, "%s", err.msg);
        for (size_t i = 0; i < sizeof(bad_headers) / sizeof(*bad_headers); i++) {
                cr_assert_eq(secrets_set(s, st, "alice", "T", "v", 1, h, bad_headers[i], "test", &err), -EINVAL,
                             "header '%s' accepted", bad_headers[i]);
                cr_assert_not_null(strstr(err.msg, "header"), "%s", err.msg);
        }
        for (size_t i = 0; i < sizeof(bad_values) / sizeof(*bad_values); i++) {
                cr_assert_eq(secrets_set(s, st, "alice", "T", bad_values[i], strlen(bad_values[i]), h, NULL, "test",
                                         &err),
                             -EINVAL, "value %zu accepted", i);
                cr_assert_not_null(strstr(err.msg, "CR or LF"), "%s", err.msg);
                cr_assert_null(strstr(err.msg, "tok"), "the error repeats the value: %s", err.msg);
        }
        cr_assert_eq(secrets_set(s, st, "alice", "T", "a\0b", 3, h, NULL, "test", &err), -EINVAL);
        cr_assert_eq(secrets_set(s, st, "alice", "T", "", 0, h, NULL, "test", &err), -EINVAL);
        memset(big, 'x', sizeof(big));
        cr_assert_eq(secrets_set(s, st, "alice", "T", big, SECRETS_VALUE_MAX + 1, h, NULL, "test", &err), -E2BIG);
        cr_assert_eq(secrets_set(s, st, "alice", "bad-name", "v", 1, h, NULL, "test", &err), -EINVAL);
        cr_assert_eq(secrets_set(NULL, st, "alice", "T", "v", 1, h, NULL, "test", &err), -EOPNOTSUPP);
        cr_assert_not_null(strstr(err.msg, "secrets_key_file"), "%s", err.msg);
        cr_assert_eq(store_secret_get(st, "alice", "T", &row, &sealed), -ENOENT, "a refused set stored a row");

        /* the largest value and a header: stored sealed, opened back */
        cr_assert_eq(secrets_set(s, st, "alice", "T", big, SECRETS_VALUE_MAX, h, "X-Api-Key", "test", &err), 0, "%s",
                     err.msg);
        cr_assert_eq(store_secret_get(st, "alice", "T", &row, &sealed), 0);
        cr_assert_str_eq(row.header, "X-Api-Key");
        cr_assert_eq(secrets_unseal(s, "alice", "T", sealed, &v), 0);
        cr_assert_eq(v->len, SECRETS_VALUE_MAX);
        cr_assert_eq(memcmp(v->bytes, big, SECRETS_VALUE_MAX), 0);
        secret_value_free(v);
        free(sealed);

        /* the per-user cap, and another user unaffected */
        for (int i = 1; i < SECRETS_MAX_PER_USER; i++) {
                char name[16];
                snprintf(name, sizeof(name), "S%d", i);
                cr_assert_eq(secrets_set(s, st, "alice", name, "v", 1, h, NULL, "test", &err), 0, "%s", err.msg);
        }
        cr_assert_eq(secrets_set(s, st, "alice", "ONE_MORE", "v", 1, h, NULL, "test", &err), -EDQUOT);
        cr_assert_eq(secrets_set(s, st, "alice", "T", "v2", 2, h, NULL, "test", &err), 0, "replacing: %s", err.msg);
        cr_assert_eq(secrets_set(s, st, "bob", "T", "v", 1, h, NULL, "test", &err), 0, "%s", err.msg);
        cr_assert_eq(secrets_delete(st, "bob", "S1", "test", &err), -ENOENT);
        cr_assert_eq(secrets_delete(st, "alice", "S1", "test", &err), 0, "%s", err.msg);

        store_close(st);
        cJSON_Delete(h);
        secrets_free(s);
}

/* E2B's /secrets on the same rows (migration 0041): a stable id, a version
 * one more per new value from either front, metadata kept or replaced,
 * create-only and update-only, hostless rows; the cap holds for both. */
Test(secrets, ids_versions_and_metadata)
{
        char db[PATH_MAX], *meta = NULL;
        struct secrets *s = open_key(keypath);
        struct sbx_error err = {0};
        cJSON *h = cJSON_Parse("[\"api.example.com\"]");
        struct store *st = NULL;
        struct store_secret row, again, byid;

        snprintf(db, sizeof(db), "%s/test.db", datadir);
        cr_assert_eq(store_open(db, &st, &err), 0, "%s", err.msg);
        cr_assert_eq(secrets_put_hostless(s, st, "alice", "GH", "v1", 2, STORE_SECRET_CREATE, "{\"team\":\"a\"}",
                                          "test", &row, &err),
                     0, "%s", err.msg);
        cr_assert_eq(strncmp(row.secret_id, "sec_", 4), 0, "%s", row.secret_id);
        cr_assert_eq(strlen(row.secret_id), 28);
        cr_assert_eq(row.version, 1);
        cr_assert_str_eq(row.hosts_json, "[]");
        cr_assert_eq(secrets_put_hostless(s, st, "alice", "GH", "v", 1, STORE_SECRET_CREATE, NULL, "test", NULL, &err),
                     -EEXIST);
        cr_assert_eq(secrets_put_hostless(s, st, "alice", "NONE", "v", 1, STORE_SECRET_UPDATE, NULL, "test", NULL,
                                          &err),
                     -ENOENT);
        cr_assert_eq(store_secret_get(st, "alice", "NONE", &again, NULL), -ENOENT, "an update made a row");
        /* a new value keeps id and metadata; set_secret's is a new version too, and sets hosts */
        cr_assert_eq(secrets_put_hostless(s, st, "alice", "GH", "v2", 2, STORE_SECRET_UPDATE, NULL, "test", &again,
                                          &err),
                     0, "%s", err.msg);
        cr_assert_str_eq(again.secret_id, row.secret_id);
        cr_assert_eq(again.version, 2);
        cr_assert_eq(store_secret_metadata(st, "alice", "GH", &meta), 0);
        cr_assert_str_eq(meta, "{\"team\":\"a\"}");
        free(meta);
        cr_assert_eq(secrets_set(s, st, "alice", "GH", "v3", 2, h, NULL, "test", &err), 0, "%s", err.msg);
        cr_assert_eq(store_secret_get_by_id(st, "alice", row.secret_id, &byid), 0);
        cr_assert_str_eq(byid.name, "GH");
        cr_assert_eq(byid.version, 3);
        cr_assert_str_eq(byid.hosts_json, "[\"api.example.com\"]");
        cr_assert_eq(secrets_put_hostless(s, st, "alice", "GH", "v4", 2, STORE_SECRET_UPDATE, "{}", "test", &again,
                                          &err),
                     0, "%s", err.msg);
        cr_assert_eq(again.version, 4);
        cr_assert_str_eq(again.hosts_json, "[\"api.example.com\"]", "an E2B update keeps the hosts");
        cr_assert_eq(store_secret_metadata(st, "alice", "GH", &meta), 0);
        cr_assert_str_eq(meta, "{}");
        free(meta);
        /* another user sees neither the id nor the name */
        cr_assert_eq(store_secret_get_by_id(st, "bob", row.secret_id, &byid), -ENOENT);
        cr_assert_eq(secrets_put_hostless(s, st, "bob", "GH", "v", 1, STORE_SECRET_UPDATE, NULL, "test", NULL, &err),
                     -ENOENT);
        /* the name and value rules are set_secret's */
        cr_assert_eq(secrets_put_hostless(s, st, "alice", "gh", "v", 1, STORE_SECRET_CREATE, NULL, "test", NULL, &err),
                     -EINVAL);
        cr_assert_eq(secrets_put_hostless(s, st, "alice", "T", "a\nb", 3, STORE_SECRET_CREATE, NULL, "test", NULL,
                                          &err),
                     -EINVAL);
        cr_assert_eq(secrets_put_hostless(NULL, st, "alice", "T", "v", 1, STORE_SECRET_CREATE, NULL, "test", NULL,
                                          &err),
                     -EOPNOTSUPP);
        for (int i = 1; i < SECRETS_MAX_PER_USER; i++) {
                char name[16];
                snprintf(name, sizeof(name), "S%d", i);
                cr_assert_eq(secrets_put_hostless(s, st, "alice", name, "v", 1, STORE_SECRET_CREATE, NULL, "test", NULL,
                                                  &err),
                             0, "%s", err.msg);
        }
        cr_assert_eq(secrets_put_hostless(s, st, "alice", "ONE_MORE", "v", 1, STORE_SECRET_CREATE, NULL, "test", NULL,
                                          &err),
                     -EDQUOT);
        cr_assert_eq(secrets_delete(st, "alice", "GH", "test", &err), 0, "%s", err.msg);
        cr_assert_eq(store_secret_get_by_id(st, "alice", row.secret_id, &byid), -ENOENT);

        store_close(st);
        cJSON_Delete(h);
        secrets_free(s);
}

/* The session's CA (secrets_ca.c): made once, the same after the store is
 * reopened (a daemon restart), another for another session (a fork is
 * one), its key only sealed at rest, gone with the session's attachments. */
Test(secrets, session_ca_is_kept_per_session_and_sealed)
{
        char db[PATH_MAX];
        struct secrets *s = open_key(keypath);
        struct sbx_error err = {0};
        struct store *st = NULL;
        char *c1 = NULL, *k1 = NULL, *c2 = NULL, *k2 = NULL, *c3 = NULL, *sealed = NULL, *bundle = NULL;
        size_t len = 0;

        snprintf(db, sizeof(db), "%s/test.db", datadir);
        cr_assert_eq(store_open(db, &st, &err), 0, "%s", err.msg);
        cr_assert_eq(secrets_ca_get(NULL, st, "alice", "s1", &c1, NULL), -EOPNOTSUPP);
        cr_assert_eq(secrets_ca_get(s, st, "alice", "s1", &c1, &k1), 0);
        cr_assert_not_null(strstr(c1, "BEGIN CERTIFICATE"));
        cr_assert_not_null(strstr(k1, "PRIVATE KEY"));
        store_close(st);
        cr_assert_eq(store_open(db, &st, &err), 0, "%s", err.msg);
        cr_assert_eq(secrets_ca_get(s, st, "alice", "s1", &c2, &k2), 0);
        cr_assert_str_eq(c1, c2, "the CA changed across a reopen");
        cr_assert_str_eq(k1, k2);
        cr_assert_eq(secrets_ca_get(s, st, "alice", "s2", &c3, NULL), 0);
        cr_assert_str_neq(c1, c3, "two sessions share a CA");
        /* at rest the key is sealed, never PEM */
        free(c2);
        c2 = NULL;
        cr_assert_eq(store_session_ca_get(st, "alice", "s1", &c2, &sealed), 0);
        cr_assert_null(strstr(sealed, "PRIVATE KEY"));
        cr_assert_eq(secrets_ca_bundle(c1, &bundle, &len), 0);
        cr_assert_eq(strcmp(bundle + len - strlen(c1), c1), 0, "the bundle ends with the session's CA");
        cr_assert_eq(store_session_secret_drop(st, "alice", "s1"), 0);
        free(c2);
        c2 = NULL;
        cr_assert_eq(store_session_ca_get(st, "alice", "s1", &c2, NULL), -ENOENT, "the CA outlived its session");
        free(c1);
        free(c3);
        free(sealed);
        free(bundle);
        secrets_ca_key_free(k1);
        secrets_ca_key_free(k2);
        store_close(st);
        secrets_free(s);
}

/* A rule on an attachment (E2B's network.rules): checked before anything is
 * attached; the egress loader takes its hosts, header and value (the
 * placeholder in it) in place of the secret's; a plain attachment keeps
 * the secret's. */
Test(secrets, a_rule_on_an_attachment)
{
        char db[PATH_MAX], *hj = NULL;
        struct secrets *s = open_key(keypath);
        struct sbx_error err = {0};
        cJSON *h = cJSON_Parse("[\"API.example.com\"]"), *bad = cJSON_Parse("[\"*.example.com\"]");
        struct store *st = NULL;
        struct egress_secret *v = NULL;
        size_t n = 0;
        char want[128];

        snprintf(db, sizeof(db), "%s/test.db", datadir);
        cr_assert_eq(store_open(db, &st, &err), 0, "%s", err.msg);
        cr_assert_eq(secrets_put_hostless(s, st, "alice", "GH", "v1", 2, STORE_SECRET_CREATE, NULL, "test", NULL, &err),
                     0, "%s", err.msg);
        cr_assert_eq(secrets_put_hostless(s, st, "alice", "OTHER", "v2", 2, STORE_SECRET_CREATE, NULL, "test", NULL,
                                          &err),
                     0, "%s", err.msg);
        cr_assert_eq(secrets_rule_check(h, "Authorization", "Bearer ${secret}", &hj, &err), 0, "%s", err.msg);
        cr_assert_str_eq(hj, "[\"api.example.com\"]");
        free(hj);
        hj = NULL;
        cr_assert_eq(secrets_rule_check(h, "Authorization", "Bearer plain", &hj, &err), -EINVAL);
        cr_assert_eq(secrets_rule_check(h, "Authorization", "${secret}${secret}", &hj, &err), -EINVAL);
        cr_assert_eq(secrets_rule_check(h, "Host", "${secret}", &hj, &err), -EINVAL);
        cr_assert_eq(secrets_rule_check(h, "transfer-encoding", "${secret}", &hj, &err), -EINVAL);
        cr_assert_eq(secrets_rule_check(h, "X Bad", "${secret}", &hj, &err), -EINVAL);
        cr_assert_eq(secrets_rule_check(h, "X-Key", "a\x01${secret}", &hj, &err), -EINVAL);
        cr_assert_eq(secrets_rule_check(bad, "X-Key", "${secret}", &hj, &err), -EINVAL);
        cr_assert_null(hj);
        /* a bad rule attaches nothing */
        cr_assert_eq(secrets_attach_rule(st, "alice", "s1", "GH", bad, "X-Key", "${secret}", "test", &err), -EINVAL);
        cr_assert_eq(secrets_attach_rule(st, "alice", "s1", "NOSUCH", h, "X-Key", "${secret}", "test", &err), -ENOENT);
        cr_assert_eq(secrets_egress_attached(s, st, "alice", "s1", &v, &n), 0);
        cr_assert_eq(n, 0);
        cr_assert_eq(secrets_attach_rule(st, "alice", "s1", "GH", h, "Authorization", "Bearer ${secret}!", "test",
                                         &err),
                     0, "%s", err.msg);
        cr_assert_eq(secrets_attach(st, "alice", "s1", "OTHER", "test", &err), 0, "%s", err.msg);
        cr_assert_eq(secrets_egress_attached(s, st, "alice", "s1", &v, &n), 0);
        cr_assert_eq(n, 2);
        cr_assert_str_eq(v[0].name, "GH");
        cr_assert_eq(v[0].n_hosts, 1);
        cr_assert_str_eq(v[0].hosts[0], "api.example.com");
        cr_assert_str_eq(v[0].header, "Authorization");
        snprintf(want, sizeof(want), "Bearer %s!", v[0].placeholder);
        cr_assert_str_eq(v[0].inject, want);
        cr_assert_str_eq((const char *)v[0].value, "v1");
        cr_assert_str_eq(v[1].name, "OTHER");
        cr_assert_eq(v[1].n_hosts, 0, "a hostless secret attached plainly goes nowhere");
        cr_assert_str_eq(v[1].inject, "");
        egress_secrets_free(v, n);
        cJSON_Delete(h);
        cJSON_Delete(bad);
        store_close(st);
        secrets_free(s);
}
