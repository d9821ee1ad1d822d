/* test_migrations.c — the migration runner: order, once-only, rollback,
 * refusal of newer or malformed lists, WAL, the builtin schema, and two
 * processes racing on one fresh file. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandboxd/store.h"

static char tmpdir[PATH_MAX];
static char dbpath[PATH_MAX];

static void setup(void)
{
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof(tmpdir), "%s/sbx-migrations-XXXXXX", base && *base ? base : "/tmp");
        cr_assert_not_null(mkdtemp(tmpdir));
        snprintf(dbpath, sizeof(dbpath), "%s/test.db", tmpdir);
}

/* Remove the private temp dir and whatever sqlite left in it. */
static void rm_tmpdir(void)
{
        DIR *d = opendir(tmpdir);
        struct dirent *de;

        if (d) {
                while ((de = readdir(d)))
                        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                                unlinkat(dirfd(d), de->d_name, 0);
                closedir(d);
        }
        rmdir(tmpdir);
}

static void teardown(void)
{
        rm_tmpdir();
}

TestSuite(migrations, .init = setup, .fini = teardown);

/* A second, raw connection for looking at what the store did. */
static sqlite3 *raw_open(void)
{
        sqlite3 *db = NULL;
        cr_assert_eq(sqlite3_open_v2(dbpath, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
        sqlite3_busy_timeout(db, 5000);
        return db;
}

static int64_t raw_int(sqlite3 *db, const char *sql)
{
        sqlite3_stmt *st = NULL;
        int64_t v;

        cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s: %s", sql, sqlite3_errmsg(db));
        v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        return v;
}

static bool raw_table_exists(sqlite3 *db, const char *name)
{
        sqlite3_stmt *st = NULL;
        bool found;

        cr_assert_eq(sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", -1, &st,
                                        NULL),
                     SQLITE_OK);
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        found = sqlite3_step(st) == SQLITE_ROW;
        sqlite3_finalize(st);
        return found;
}

static const struct store_migration three[] = {
        {1, "0001_a.sql", "CREATE TABLE a (x INTEGER);"},
        /* Fails unless 0001 ran first. */
        {2, "0002_b.sql", "ALTER TABLE a ADD COLUMN y TEXT; CREATE TABLE b (z INTEGER);"},
        /* Applied twice, this would leave two rows. */
        {3, "0003_c.sql", "INSERT INTO a (x, y) VALUES (1, 'one');"},
};

Test(migrations, applies_in_order_each_once)
{
        struct store *s = NULL;
        struct sbx_error err = {};
        int v = -1;

        cr_assert_eq(store_open_with(dbpath, three, 3, &s, &err), 0, "%s", err.msg);
        cr_assert_eq(store_schema_version(s, &v), 0);
        cr_assert_eq(v, 3);
        store_close(s);

        s = NULL;
        cr_assert_eq(store_open_with(dbpath, three, 3, &s, &err), 0, "second open: %s", err.msg);
        cr_assert_eq(store_schema_version(s, &v), 0);
        cr_assert_eq(v, 3);
        store_close(s);

        sqlite3 *db = raw_open();
        cr_assert(raw_table_exists(db, "a"));
        cr_assert(raw_table_exists(db, "b"));
        cr_assert_eq(raw_int(db, "SELECT COUNT(*) FROM a"), 1);
        cr_assert_eq(raw_int(db, "SELECT COUNT(*) FROM schema_migrations"), 3);
        cr_assert_eq(raw_int(db,
                             "SELECT COUNT(*) FROM schema_migrations WHERE version = 2 AND name = '0002_b.sql' "
                             "AND applied_at > 0"),
                     1);
        sqlite3_close(db);
}

Test(migrations, new_migration_applied_on_later_open)
{
        struct store *s = NULL;
        struct sbx_error err = {};
        int v = -1;

        cr_assert_eq(store_open_with(dbpath, three, 1, &s, &err), 0, "%s", err.msg);
        cr_assert_eq(store_schema_version(s, &v), 0);
        cr_assert_eq(v, 1);
        store_close(s);

        cr_assert_eq(store_open_with(dbpath, three, 3, &s, &err), 0, "%s", err.msg);
        cr_assert_eq(store_schema_version(s, &v), 0);
        cr_assert_eq(v, 3);
        store_close(s);
}

Test(migrations, failing_migration_rolls_back_and_names_file)
{
        const struct store_migration broken[] = {
                three[0],
                {2, "0002_broken.sql",
                 "CREATE TABLE half (x INTEGER); INSERT INTO half VALUES (1); INSERT INTO nope VALUES (1);"},
        };
        const struct store_migration fixed[] = {
                three[0],
                {2, "0002_broken.sql", "CREATE TABLE half (x INTEGER); INSERT INTO half VALUES (1);"},
        };
        struct store *s = NULL;
        struct sbx_error err = {};
        int r, v = -1;

        r = store_open_with(dbpath, broken, 2, &s, &err);
        cr_assert_eq(r, -EIO, "r=%d", r);
        cr_assert_null(s);
        cr_assert_not_null(strstr(err.msg, "0002_broken.sql"), "%s", err.msg);
        cr_assert_not_null(strstr(err.msg, "no such table: nope"), "%s", err.msg);

        sqlite3 *db = raw_open();
        cr_assert(raw_table_exists(db, "a"), "0001 stays applied");
        cr_assert_not(raw_table_exists(db, "half"), "0002 must be rolled back entirely");
        cr_assert_eq(raw_int(db, "SELECT MAX(version) FROM schema_migrations"), 1);
        sqlite3_close(db);

        cr_assert_eq(store_open_with(dbpath, fixed, 2, &s, &err), 0, "%s", err.msg);
        cr_assert_eq(store_schema_version(s, &v), 0);
        cr_assert_eq(v, 2);
        store_close(s);
}

Test(migrations, newer_database_refused)
{
        struct store *s = NULL;
        struct sbx_error err = {};
        int r;

        cr_assert_eq(store_open_with(dbpath, three, 3, &s, &err), 0, "%s", err.msg);
        store_close(s);
        s = NULL;

        r = store_open_with(dbpath, three, 1, &s, &err);
        cr_assert_eq(r, -EPROTONOSUPPORT, "r=%d", r);
        cr_assert_null(s);
        cr_assert_not_null(strstr(err.msg,
                                  "database schema version 3 is newer than this sandboxd knows (1); upgrade sandboxd"),
                           "%s", err.msg);
}

Test(migrations, non_increasing_versions_refused)
{
        const struct store_migration descending[] = {three[1], three[0]};
        const struct store_migration repeated[] = {three[0], {1, "0001_again.sql", "SELECT 1;"}};
        const struct store_migration zero[] = {{0, "0000_zero.sql", "SELECT 1;"}};
        struct store *s = NULL;
        struct sbx_error err = {};

        cr_assert_eq(store_open_with(dbpath, descending, 2, &s, &err), -EINVAL);
        cr_assert_not_null(strstr(err.msg, "strictly increasing"), "%s", err.msg);
        cr_assert_eq(store_open_with(dbpath, repeated, 2, &s, &err), -EINVAL);
        cr_assert_eq(store_open_with(dbpath, zero, 1, &s, &err), -EINVAL);
        cr_assert_null(s);

        sqlite3 *db = raw_open();
        cr_assert_not(raw_table_exists(db, "a"), "nothing applied from a refused list");
        sqlite3_close(db);
}

Test(migrations, wal_mode_is_on)
{
        struct store *s = NULL;
        struct sbx_error err = {};
        sqlite3_stmt *st = NULL;

        cr_assert_eq(store_open(dbpath, &s, &err), 0, "%s", err.msg);
        sqlite3 *db = raw_open();
        cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
        cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "wal");
        sqlite3_finalize(st);
        sqlite3_close(db);
        store_close(s);
}

Test(migrations, builtin_list_creates_every_table)
{
        static const char *const tables[] = {"sessions",  "containers", "port_allocations",
                                             "services",  "executions", "private_datasets",
                                             "audit_log", "api_tokens", "schema_migrations"};
        const struct store_migration *migs;
        struct store *s = NULL;
        struct sbx_error err = {};
        size_t n = 0;
        int v = -1;

        migs = store_builtin_migrations(&n);
        cr_assert_geq(n, 1);
        cr_assert_eq(migs[0].version, 1);
        cr_assert_str_eq(migs[0].name, "0001_initial.sql");
        for (size_t i = 1; i < n; i++)
                cr_assert_gt(migs[i].version, migs[i - 1].version);

        cr_assert_eq(store_open(dbpath, &s, &err), 0, "%s", err.msg);
        cr_assert_eq(store_schema_version(s, &v), 0);
        cr_assert_eq(v, migs[n - 1].version);
        store_close(s);

        sqlite3 *db = raw_open();
        for (size_t i = 0; i < ELEMENTSOF(tables); i++)
                cr_assert(raw_table_exists(db, tables[i]), "table %s missing", tables[i]);
        sqlite3_close(db);
}

/* Several processes open one fresh file at the same moment: each migration
 * must run exactly once (a second CREATE TABLE would fail that opener, a
 * second INSERT would leave two rows). */
Test(migrations, concurrent_openers_apply_once)
{
        enum { N = 8 };
        const struct store_migration migs[] = {
                /* Slow enough (20k rows) that the other openers have passed
                 * their first "applied?" check and wait on the write lock. */
                {1, "0001_hits.sql",
                 "CREATE TABLE hits (x INTEGER); CREATE TABLE filler (i INTEGER);"
                 "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 20000) "
                 "INSERT INTO filler SELECT i FROM c;"},
                {2, "0002_hit.sql", "INSERT INTO hits VALUES (1);"},
                {3, "0003_more.sql", "CREATE TABLE more (y INTEGER); INSERT INTO hits VALUES (2);"},
        };
        int go[2];
        pid_t pids[N];

        cr_assert_eq(pipe(go), 0);
        for (int i = 0; i < N; i++) {
                pids[i] = fork();
                /* No cr_assert in the child: with --full-stats every
                 * assertion talks to the runner over the inherited socket,
                 * and a forked child blocks on it forever. */
                if (pids[i] == 0) {
                        struct store *s = NULL;
                        struct sbx_error err = {};
                        char c;
                        int r;

                        close(go[1]);
                        (void)!read(go[0], &c, 1); /* EOF when the parent closes: all start together */
                        r = store_open_with(dbpath, migs, 3, &s, &err);
                        if (r < 0)
                                fprintf(stderr, "child %d: %s\n", i, err.msg);
                        store_close(s);
                        _exit(r < 0 ? 1 : 0);
                }
                cr_assert_gt(pids[i], 0, "fork: %s", strerror(errno));
        }
        close(go[0]);
        close(go[1]);
        for (int i = 0; i < N; i++) {
                int status = 0;
                cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
                cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "opener %d failed", i);
        }

        sqlite3 *db = raw_open();
        cr_assert_eq(raw_int(db, "SELECT COUNT(*) FROM hits"), 2);
        cr_assert_eq(raw_int(db, "SELECT COUNT(*) FROM schema_migrations"), 3);
        sqlite3_close(db);
}
