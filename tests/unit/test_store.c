/* test_store.c — typed queries: sessions, containers, ports, audit; file
 * mode and close-on-exec; many threads on one store and on one file. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/store.h"

static char tmpdir[PATH_MAX];
static char dbpath[PATH_MAX];
static struct store *st;

static void setup(void)
{
        const char *base = getenv("TMPDIR");
        struct sbx_error err = {};

        snprintf(tmpdir, sizeof(tmpdir), "%s/sbx-store-XXXXXX", base && *base ? base : "/tmp");
        cr_assert_not_null(mkdtemp(tmpdir));
        snprintf(dbpath, sizeof(dbpath), "%s/test.db", tmpdir);
        cr_assert_eq(store_open(dbpath, &st, &err), 0, "%s", err.msg);
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
        store_close(st);
        st = NULL;
        rm_tmpdir();
}

TestSuite(store, .init = setup, .fini = teardown);

static struct store_session mk_session(const char *user, const char *session, const char *state)
{
        struct store_session row = {};

        sbx_strlcpy(row.user_id, user, sizeof(row.user_id));
        sbx_strlcpy(row.session_id, session, sizeof(row.session_id));
        sbx_strlcpy(row.state, state, sizeof(row.state));
        sbx_strlcpy(row.image, "sandboxd/python@sha256:abc", sizeof(row.image));
        sbx_strlcpy(row.network_mode, "bridge", sizeof(row.network_mode));
        row.created_at = 1000;
        row.updated_at = 2000;
        row.last_activity = 3000;
        return row;
}

static size_t port_count(void)
{
        struct store_port *ports = NULL;
        size_t n = 0;

        cr_assert_eq(store_ports_list(st, &ports, &n), 0);
        free(ports);
        return n;
}

static void raw_exec(const char *sql)
{
        sqlite3 *db = NULL;
        char *msg = NULL;

        cr_assert_eq(sqlite3_open_v2(dbpath, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
        sqlite3_busy_timeout(db, 5000);
        cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s", sql, msg);
        sqlite3_close(db);
}

static int64_t raw_int(const char *sql)
{
        sqlite3 *db = NULL;
        sqlite3_stmt *stmt = NULL;
        int64_t v;

        cr_assert_eq(sqlite3_open_v2(dbpath, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &stmt, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
        cr_assert_eq(sqlite3_step(stmt), SQLITE_ROW);
        v = sqlite3_column_int64(stmt, 0);
        sqlite3_finalize(stmt);
        sqlite3_close(db);
        return v;
}

Test(store, session_put_get_roundtrip)
{
        struct store_session row = mk_session("alice", "s1", "RUNNING"), got;

        sbx_strlcpy(row.container_id, "c0ffee", sizeof(row.container_id));
        sbx_strlcpy(row.last_error, "it \"broke\"; DROP TABLE sessions; --", sizeof(row.last_error));
        sbx_strlcpy(row.error_cause, "oom", sizeof(row.error_cause));
        cr_assert_eq(store_session_put(st, &row), 0);

        memset(&got, 0x55, sizeof(got));
        cr_assert_eq(store_session_get(st, "alice", "s1", &got), 0);
        cr_assert_str_eq(got.user_id, "alice");
        cr_assert_str_eq(got.session_id, "s1");
        cr_assert_str_eq(got.state, "RUNNING");
        cr_assert_str_eq(got.container_id, "c0ffee");
        cr_assert_str_eq(got.image, "sandboxd/python@sha256:abc");
        cr_assert_str_eq(got.network_mode, "bridge");
        cr_assert_str_eq(got.last_error, row.last_error);
        cr_assert_str_eq(got.error_cause, "oom");
        cr_assert_eq(got.created_at, 1000);
        cr_assert_eq(got.updated_at, 2000);
        cr_assert_eq(got.last_activity, 3000);

        /* Overwrite: every column follows, and "" reads back as "". */
        row = mk_session("alice", "s1", "STOPPED");
        row.updated_at = 5000;
        cr_assert_eq(store_session_put(st, &row), 0);
        cr_assert_eq(store_session_get(st, "alice", "s1", &got), 0);
        cr_assert_str_eq(got.state, "STOPPED");
        cr_assert_str_eq(got.container_id, "");
        cr_assert_str_eq(got.last_error, "");
        cr_assert_eq(got.updated_at, 5000);
        cr_assert_eq(raw_int("SELECT COUNT(*) FROM sessions"), 1);
        cr_assert_eq(raw_int("SELECT COUNT(*) FROM sessions WHERE container_id IS NULL"), 1);
}

Test(store, session_get_missing_and_bad_rows)
{
        struct store_session row = mk_session("alice", "s1", "SLEEPING"), got;

        cr_assert_eq(store_session_get(st, "alice", "nope", &got), -ENOENT);
        cr_assert_eq(store_session_put(st, &row), -EINVAL, "CHECK constraint on state");
        row = mk_session("", "s1", "RUNNING");
        cr_assert_eq(store_session_put(st, &row), -EINVAL);
        cr_assert_eq(store_session_put(st, NULL), -EINVAL);
        cr_assert_eq(raw_int("SELECT COUNT(*) FROM sessions"), 0);
}

Test(store, session_longest_ids_fit)
{
        char id[65];
        struct store_session row, got;

        memset(id, 'x', 64);
        id[64] = '\0';
        row = mk_session(id, id, "CREATING");
        cr_assert_eq(store_session_put(st, &row), 0);
        cr_assert_eq(store_session_get(st, id, id, &got), 0);
        cr_assert_str_eq(got.user_id, id);
        cr_assert_str_eq(got.session_id, id);
}

Test(store, session_list_and_filters)
{
        static const struct {
                const char *user, *session, *state;
        } rows[] = {
                {"bob", "b2", "RUNNING"}, {"alice", "a1", "RUNNING"}, {"alice", "a2", "STOPPED"},
                {"bob", "b1", "ERROR"},   {"carol", "c1", "RUNNING"},
        };
        struct store_session *list = NULL;
        size_t n = 99;

        cr_assert_eq(store_session_list(st, NULL, NULL, &list, &n), 0);
        cr_assert_eq(n, 0);
        free(list);

        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                struct store_session row = mk_session(rows[i].user, rows[i].session, rows[i].state);
                cr_assert_eq(store_session_put(st, &row), 0);
        }

        cr_assert_eq(store_session_list(st, NULL, NULL, &list, &n), 0);
        cr_assert_eq(n, 5);
        cr_assert_str_eq(list[0].user_id, "alice"); /* ordered by user, session */
        cr_assert_str_eq(list[0].session_id, "a1");
        cr_assert_str_eq(list[2].session_id, "b1");
        cr_assert_str_eq(list[4].user_id, "carol");
        free(list);

        cr_assert_eq(store_session_list(st, "bob", NULL, &list, &n), 0);
        cr_assert_eq(n, 2);
        cr_assert_str_eq(list[0].session_id, "b1");
        cr_assert_str_eq(list[1].session_id, "b2");
        free(list);

        cr_assert_eq(store_session_list(st, NULL, "RUNNING", &list, &n), 0);
        cr_assert_eq(n, 3);
        for (size_t i = 0; i < n; i++)
                cr_assert_str_eq(list[i].state, "RUNNING");
        free(list);

        cr_assert_eq(store_session_list(st, "alice", "STOPPED", &list, &n), 0);
        cr_assert_eq(n, 1);
        cr_assert_str_eq(list[0].session_id, "a2");
        free(list);

        cr_assert_eq(store_session_list(st, "dave", NULL, &list, &n), 0);
        cr_assert_eq(n, 0);
        free(list);
}

Test(store, session_delete_drops_ports_datasets_services)
{
        struct store_session a = mk_session("alice", "s1", "RUNNING"), b = mk_session("alice", "s2", "RUNNING");
        const int pa[] = {30000, 30001}, pb[] = {30002};
        struct store_session got;

        cr_assert_eq(store_session_put(st, &a), 0);
        cr_assert_eq(store_session_put(st, &b), 0);
        cr_assert_eq(store_ports_reserve(st, pa, 2, "alice", "s1", 1), 0);
        cr_assert_eq(store_ports_reserve(st, pb, 1, "alice", "s2", 1), 0);
        cr_assert_eq(store_container_add(st, "cid1", "alice", "s1", "img", "bridge", 1), 0);
        cr_assert_eq(store_audit(st, "daemon", "alice", "s1", "create", NULL), 0);
        raw_exec(
                "INSERT INTO private_datasets VALUES ('alice', 's1', 'hr', 'x', 1), ('alice', 's2', 'hr', 'x', 1);"
                "INSERT INTO services (user_id, session_id, name, command, state) VALUES "
                "('alice', 's1', 'web', 'python -m http.server', 'RUNNING'), "
                "('alice', 's2', 'web', 'python -m http.server', 'RUNNING');");

        cr_assert_eq(store_session_delete(st, "alice", "s1", true), 0);
        cr_assert_eq(store_session_get(st, "alice", "s1", &got), -ENOENT);
        cr_assert_eq(store_session_get(st, "alice", "s2", &got), 0);
        cr_assert_eq(port_count(), 1);
        cr_assert_eq(raw_int("SELECT COUNT(*) FROM port_allocations WHERE session_id = 's1'"), 0);
        cr_assert_eq(raw_int("SELECT COUNT(*) FROM private_datasets WHERE session_id = 's1'"), 0);
        cr_assert_eq(raw_int("SELECT COUNT(*) FROM services WHERE session_id = 's1'"), 0);
        cr_assert_eq(raw_int("SELECT COUNT(*) FROM private_datasets"), 1);
        cr_assert_eq(raw_int("SELECT COUNT(*) FROM services"), 1);
        /* History stays. */
        cr_assert_eq(raw_int("SELECT COUNT(*) FROM containers"), 1);
        cr_assert_eq(raw_int("SELECT COUNT(*) FROM audit_log"), 1);

        cr_assert_eq(store_session_delete(st, "alice", "s1", true), -ENOENT);

        /* Without drop_private the marks outlive the row (the workspace keeps the data). */
        cr_assert_eq(store_session_delete(st, "alice", "s2", false), 0);
        cr_assert_eq(store_session_get(st, "alice", "s2", &got), -ENOENT);
        cr_assert_eq(raw_int("SELECT COUNT(*) FROM private_datasets WHERE session_id = 's2'"), 1);
        cr_assert_eq(raw_int("SELECT COUNT(*) FROM services"), 0);
        cr_assert_eq(port_count(), 0);
}

Test(store, session_touch)
{
        struct store_session row = mk_session("alice", "s1", "RUNNING"), got;

        cr_assert_eq(store_session_put(st, &row), 0);
        cr_assert_eq(store_session_touch(st, "alice", "s1", 9000), 0);
        cr_assert_eq(store_session_get(st, "alice", "s1", &got), 0);
        cr_assert_eq(got.last_activity, 9000);
        cr_assert_eq(got.updated_at, 2000, "touch is activity, not a state change");

        cr_assert_eq(store_session_touch(st, "alice", "s1", 8000), 0);
        cr_assert_eq(store_session_get(st, "alice", "s1", &got), 0);
        cr_assert_eq(got.last_activity, 9000, "activity never moves backwards");

        cr_assert_eq(store_session_touch(st, "alice", "nope", 9000), -ENOENT);
}

Test(store, containers_history)
{
        cr_assert_eq(store_container_add(st, "cid1", "alice", "s1", "img", NULL, 10), 0);
        cr_assert_eq(store_container_add(st, "cid1", "alice", "s1", "img", NULL, 10), -EEXIST);
        cr_assert_eq(store_container_removed(st, "cid1", "oom", 20), 0);
        cr_assert_eq(store_container_removed(st, "cid2", "oom", 20), -ENOENT);
        cr_assert_eq(raw_int("SELECT COUNT(*) FROM containers WHERE removed_at = 20 AND end_cause = 'oom' "
                             "AND network_mode IS NULL"),
                     1);
}

Test(store, audit_insert_and_count)
{
        int64_t c = -1;

        cr_assert_eq(store_audit(st, "token:t1", "alice", "s1", "exec", "{\"cmd\":\"ls\"}"), 0);
        cr_assert_eq(store_audit(st, "token:t1", "alice", "s1", "exec", NULL), 0);
        cr_assert_eq(store_audit(st, "token:t1", "alice", "s2", "exec", NULL), 0);
        cr_assert_eq(store_audit(st, "admin:uid=0", "bob", "s1", "destroy", NULL), 0);
        cr_assert_eq(store_audit(st, "daemon", NULL, NULL, "startup", NULL), 0);
        cr_assert_eq(store_audit(st, "daemon", NULL, NULL, NULL, NULL), -EINVAL);

        cr_assert_eq(store_audit_count(st, NULL, NULL, "exec", &c), 0);
        cr_assert_eq(c, 3);
        cr_assert_eq(store_audit_count(st, "alice", NULL, "exec", &c), 0);
        cr_assert_eq(c, 3);
        cr_assert_eq(store_audit_count(st, "alice", "s1", "exec", &c), 0);
        cr_assert_eq(c, 2);
        cr_assert_eq(store_audit_count(st, NULL, "s1", NULL, &c), 0);
        cr_assert_eq(c, 3);
        cr_assert_eq(store_audit_count(st, NULL, NULL, NULL, &c), 0);
        cr_assert_eq(c, 5);
        cr_assert_eq(store_audit_count(st, "carol", NULL, "exec", &c), 0);
        cr_assert_eq(c, 0);
        cr_assert_eq(raw_int("SELECT COUNT(*) FROM audit_log WHERE detail = '{\"cmd\":\"ls\"}' AND ts > 0"), 1);
}

/* A session's rows read back from the newest in pages: each row once, oldest first in
 * a page, another user's and another session's never. */
Test(store, audit_page_reads_back_from_the_newest)
{
        struct store_audit_row *rows = NULL;
        int64_t ids[5];
        size_t n = 0;

        for (int i = 0; i < 5; i++) {
                cr_assert_eq(store_audit(st, "token:t1", "alice", "s1", "exec", NULL), 0);
                ids[i] = raw_int("SELECT MAX(id) FROM audit_log");
                cr_assert_eq(store_audit(st, "token:t2", "bob", "s1", "exec", NULL), 0);
                cr_assert_eq(store_audit(st, "token:t1", "alice", "s2", "exec", NULL), 0);
        }
        cr_assert_eq(store_audit_page(st, "alice", "s1", 0, 2, &rows, &n), 0);
        cr_assert_eq(n, 2);
        cr_assert(rows[0].id == ids[3] && rows[1].id == ids[4], "the newest two, oldest first");
        store_audit_rows_free(rows, n);
        cr_assert_eq(store_audit_page(st, "alice", "s1", ids[3], 2, &rows, &n), 0);
        cr_assert(n == 2 && rows[0].id == ids[1] && rows[1].id == ids[2], "the two before");
        store_audit_rows_free(rows, n);
        cr_assert_eq(store_audit_page(st, "alice", "s1", ids[1], 2, &rows, &n), 0);
        cr_assert(n == 1 && rows[0].id == ids[0], "the last one");
        cr_assert_str_eq(rows[0].actor, "token:t1");
        store_audit_rows_free(rows, n);
        cr_assert_eq(store_audit_page(st, "alice", "s1", ids[0], 2, &rows, &n), 0);
        cr_assert_eq(n, 0);
        store_audit_rows_free(rows, n);
        cr_assert_eq(store_audit_page(st, "alice", "s1", -1, 2, &rows, &n), -EINVAL);
        cr_assert_eq(store_audit_page(st, "alice", "s1", 0, 0, &rows, &n), -EINVAL);
}

Test(store, ports_reserve_is_all_or_nothing)
{
        const int a[] = {31000, 31001, 31002}, b[] = {31003, 31002, 31004}, dup[] = {31005, 31005};
        const int bad[] = {0}, big[] = {65536};
        struct store_port *list = NULL;
        size_t n = 0;

        cr_assert_eq(store_ports_reserve(st, a, 3, "alice", "s1", 1), 0);
        cr_assert_eq(store_ports_reserve(st, b, 3, "bob", "s1", 1), -EADDRINUSE);
        cr_assert_eq(store_ports_reserve(st, dup, 2, "bob", "s1", 1), -EADDRINUSE);
        cr_assert_eq(store_ports_reserve(st, bad, 1, "bob", "s1", 1), -EINVAL);
        cr_assert_eq(store_ports_reserve(st, big, 1, "bob", "s1", 1), -EINVAL);
        cr_assert_eq(store_ports_reserve(st, a, 0, "bob", "s1", 1), 0);

        cr_assert_eq(store_ports_list(st, &list, &n), 0);
        cr_assert_eq(n, 3, "31003 must not survive the failed reservation");
        for (size_t i = 0; i < n; i++) {
                cr_assert_eq(list[i].port, a[i]);
                cr_assert_str_eq(list[i].user_id, "alice");
                cr_assert_str_eq(list[i].container_id, "");
        }
        free(list);

        /* The store is still usable after the rollbacks. */
        cr_assert_eq(store_ports_reserve(st, &b[0], 1, "bob", "s1", 1), 0);
        cr_assert_eq(port_count(), 4);
}

Test(store, ports_set_container_and_release)
{
        const int a[] = {32000, 32001}, b[] = {32002};
        struct store_port *list = NULL;
        size_t n = 0;

        cr_assert_eq(store_ports_reserve(st, a, 2, "alice", "s1", 1), 0);
        cr_assert_eq(store_ports_reserve(st, b, 1, "bob", "s1", 1), 0);
        cr_assert_eq(store_ports_set_container(st, "alice", "s1", "cid1"), 0);
        cr_assert_eq(store_ports_set_container(st, "carol", "s1", "cid9"), -ENOENT);

        cr_assert_eq(store_ports_list(st, &list, &n), 0);
        cr_assert_eq(n, 3);
        cr_assert_str_eq(list[0].container_id, "cid1");
        cr_assert_str_eq(list[1].container_id, "cid1");
        cr_assert_str_eq(list[2].container_id, "");
        free(list);

        cr_assert_eq(store_ports_release_port(st, 32002), 0);
        cr_assert_eq(store_ports_release_port(st, 32002), -ENOENT);
        cr_assert_eq(store_ports_release(st, "alice", "s1"), 2, "returns the number released");
        cr_assert_eq(store_ports_release(st, "alice", "s1"), 0);
        cr_assert_eq(port_count(), 0);
}

Test(store, vacuum_and_version)
{
        struct sbx_error err = {};
        int v = 0;

        cr_assert_eq(store_audit(st, "daemon", NULL, NULL, "x", NULL), 0);
        cr_assert_eq(store_vacuum(st, &err), 0, "%s", err.msg);
        cr_assert_eq(store_schema_version(st, &v), 0);
        cr_assert_geq(v, 1);
}

/* The file and its WAL companions are 0600 whatever the umask, and every fd
 * the store holds is close-on-exec. */
Test(store, file_mode_and_cloexec)
{
        static const char *const suffixes[] = {"", "-wal", "-shm"};
        struct stat sb;
        char p[PATH_MAX + 16], link[PATH_MAX + 16];
        size_t seen = 0;
        DIR *d;
        struct dirent *de;

        /* Make sure -wal exists: a write. */
        cr_assert_eq(store_audit(st, "daemon", NULL, NULL, "x", NULL), 0);
        for (size_t i = 0; i < ELEMENTSOF(suffixes); i++) {
                snprintf(p, sizeof(p), "%s%s", dbpath, suffixes[i]);
                cr_assert_eq(stat(p, &sb), 0, "%s", p);
                cr_assert_eq(sb.st_mode & 0777, 0600, "%s has mode %o", p, sb.st_mode & 0777);
        }

        d = opendir("/proc/self/fd");
        cr_assert_not_null(d);
        while ((de = readdir(d))) {
                int fd = atoi(de->d_name);
                ssize_t len;

                if (de->d_name[0] == '.' || fd == dirfd(d))
                        continue;
                snprintf(p, sizeof(p), "/proc/self/fd/%s", de->d_name);
                len = readlink(p, link, sizeof(link) - 1);
                if (len < 0)
                        continue;
                link[len] = '\0';
                if (strncmp(link, tmpdir, strlen(tmpdir)) != 0)
                        continue;
                seen++;
                cr_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC, "fd %d (%s) is not close-on-exec", fd, link);
        }
        closedir(d);
        cr_assert_geq(seen, 2, "expected the db and its -wal/-shm open");
}

Test(store, existing_file_tightened_to_0600)
{
        struct store *s2 = NULL;
        struct sbx_error err = {};
        struct stat sb;

        cr_assert_eq(chmod(dbpath, 0644), 0);
        cr_assert_eq(store_open(dbpath, &s2, &err), 0, "%s", err.msg);
        cr_assert_eq(stat(dbpath, &sb), 0);
        cr_assert_eq(sb.st_mode & 0777, 0600);
        store_close(s2);
}

Test(store, symlink_refused)
{
        struct store *s2 = NULL;
        struct sbx_error err = {};
        char p[PATH_MAX + 16];

        snprintf(p, sizeof(p), "%s/link.db", tmpdir);
        cr_assert_eq(symlink(dbpath, p), 0);
        cr_assert_lt(store_open(p, &s2, &err), 0);
        cr_assert_null(s2);
        unlink(p);
}

/* ---- concurrency ---- */

enum { THREADS = 8, ROUNDS = 200 };

struct worker {
        int id;
        struct store *s; /* NULL: open a private connection to the file */
        int failures;
        int first_error;
};

static void *worker_main(void *arg)
{
        struct worker *w = arg;
        struct store *s = w->s;
        struct sbx_error err = {};
        char user[32];

        if (!s && store_open(dbpath, &s, &err) < 0) {
                w->failures++;
                w->first_error = -1;
                return NULL;
        }
        snprintf(user, sizeof(user), "u%d%s", w->id, w->s ? "" : "p");
        for (int i = 0; i < ROUNDS; i++) {
                struct store_session row = {}, got;
                int r;

                sbx_strlcpy(row.user_id, user, sizeof(row.user_id));
                snprintf(row.session_id, sizeof(row.session_id), "s%d", i);
                sbx_strlcpy(row.state, "RUNNING", sizeof(row.state));
                row.created_at = row.updated_at = row.last_activity = i;

                r = store_session_put(s, &row);
                if (r == 0)
                        r = store_session_get(s, row.user_id, row.session_id, &got);
                if (r == 0 && got.last_activity != i)
                        r = -EBADMSG;
                if (r == 0)
                        r = store_session_touch(s, row.user_id, row.session_id, i + 1);
                if (r == 0 && i % 20 == 0) {
                        const int port = 40000 + w->id * 1000 + i + (w->s ? 0 : 500);
                        r = store_ports_reserve(s, &port, 1, row.user_id, row.session_id, i);
                }
                if (r < 0 && w->failures++ == 0)
                        w->first_error = r;
        }
        if (!w->s)
                store_close(s);
        return NULL;
}

static void run_workers(bool shared)
{
        pthread_t th[THREADS];
        struct worker w[THREADS];

        for (int i = 0; i < THREADS; i++) {
                w[i] = (struct worker){.id = i, .s = shared ? st : NULL};
                cr_assert_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
        }
        for (int i = 0; i < THREADS; i++)
                cr_assert_eq(pthread_join(th[i], NULL), 0);
        for (int i = 0; i < THREADS; i++)
                cr_assert_eq(w[i].failures, 0, "worker %d: %d failures, first %d", i, w[i].failures, w[i].first_error);
}

Test(store, concurrent_threads_share_one_store)
{
        struct store_session *list = NULL;
        size_t n = 0;

        run_workers(true);
        cr_assert_eq(store_session_list(st, NULL, NULL, &list, &n), 0);
        cr_assert_eq(n, THREADS * ROUNDS);
        free(list);
        cr_assert_eq(port_count(), THREADS * (ROUNDS / 20));
}

/* One connection per thread: the threads contend on sqlite's file locks, so
 * this only passes if the busy timeout and BEGIN IMMEDIATE do their job. */
Test(store, concurrent_threads_own_connections)
{
        struct store_session *list = NULL;
        size_t n = 0;

        run_workers(false);
        cr_assert_eq(store_session_list(st, NULL, NULL, &list, &n), 0);
        cr_assert_eq(n, THREADS * ROUNDS);
        free(list);
        cr_assert_eq(port_count(), THREADS * (ROUNDS / 20));
}

/* 0009: what a restarted daemon needs to re-adopt an execution from its runner. */
Test(store, exec_adoptable_rows_keep_the_runner_tag_and_deadline)
{
        struct store_execution row = {0}, *rows = NULL;
        size_t n = 0, failed = 0;

        for (int i = 0; i < 3; i++) {
                snprintf(row.id, sizeof(row.id), "00000000-0000-0000-0000-00000000000%d", i);
                snprintf(row.user_id, sizeof(row.user_id), "u1");
                snprintf(row.session_id, sizeof(row.session_id), "s1");
                snprintf(row.kind, sizeof(row.kind), "exec");
                snprintf(row.state, sizeof(row.state), i == 2 ? "PENDING" : "RUNNING");
                snprintf(row.actor, sizeof(row.actor), "token:t1");
                row.exit_code = -1;
                row.created_at = 1000 + i;
                row.started_at = 2000;
                row.runner_tag = i == 0 ? 0xfffffff0u : 0; /* only the first ran on the runner */
                row.deadline_at = 9000;
                row.spool_budget = 1 << 20;
                row.interactive = true;
                row.tty = i == 0;
                cr_assert_eq(store_exec_put(st, &row), 0);
        }
        cr_assert_eq(store_exec_fail_unadoptable(st, "daemon_restarted", "gone", 5000, &failed), 0);
        cr_assert_eq(failed, 2, "the PENDING row and the one without a tag fail");
        cr_assert_eq(store_exec_list_adoptable(st, &rows, &n), 0);
        cr_assert_eq(n, 1);
        cr_assert_str_eq(rows[0].id, "00000000-0000-0000-0000-000000000000");
        cr_assert_eq(rows[0].runner_tag, 0xfffffff0u);
        cr_assert_eq(rows[0].deadline_at, 9000);
        cr_assert_eq(rows[0].started_at, 2000);
        cr_assert_eq(rows[0].spool_budget, 1 << 20);
        cr_assert_str_eq(rows[0].actor, "token:t1");
        cr_assert(rows[0].interactive && rows[0].tty);
        free(rows);
}

/* MCP tasks (migration 0013): per user, capped, gone after their ttl. */
Test(store, tasks_scoped_capped_and_expiring)
{
        struct store_task t = {}, got;
        int64_t now = 1000000;
        size_t n = 0;

        snprintf(t.task_id, sizeof(t.task_id), "%032x", 1);
        snprintf(t.user_id, sizeof(t.user_id), "alice");
        snprintf(t.session_id, sizeof(t.session_id), "s1");
        snprintf(t.execution_id, sizeof(t.execution_id), "e1");
        snprintf(t.tool, sizeof(t.tool), "exec");
        t.ttl_ms = 1000;
        t.poll_interval_ms = 500;
        t.created_at = now;
        cr_assert_eq(store_task_add(st, &t, now, 2, 10), 0);
        cr_assert_eq(store_task_add(st, &t, now, 2, 10), -EEXIST);
        cr_assert_eq(store_task_get(st, "alice", t.task_id, now + 10, &got), 0);
        cr_assert_str_eq(got.execution_id, "e1");
        cr_assert_eq(got.expires_at, now + 1000);
        cr_assert_eq(store_task_get(st, "bob", t.task_id, now + 10, &got), -ENOENT);
        cr_assert_eq(store_task_mark_cancel(st, "bob", t.task_id, now + 10), -ENOENT);
        cr_assert_eq(store_task_mark_cancel(st, "alice", t.task_id, now + 20), 0);
        cr_assert_eq(store_task_get(st, "alice", t.task_id, now + 30, &got), 0);
        cr_assert(got.cancel_requested);
        cr_assert_eq(got.updated_at, now + 20);

        snprintf(t.task_id, sizeof(t.task_id), "%032x", 2);
        cr_assert_eq(store_task_add(st, &t, now, 2, 10), 0);
        snprintf(t.task_id, sizeof(t.task_id), "%032x", 3);
        cr_assert_eq(store_task_add(st, &t, now, 2, 10), -EDQUOT, "the per-user cap");
        snprintf(t.user_id, sizeof(t.user_id), "bob");
        cr_assert_eq(store_task_add(st, &t, now, 2, 3), 0, "another user has room");
        snprintf(t.task_id, sizeof(t.task_id), "%032x", 4);
        cr_assert_eq(store_task_add(st, &t, now, 2, 3), -EDQUOT, "the global cap");

        /* past the ttl: not found, not counted, and purged by the next add */
        snprintf(t.user_id, sizeof(t.user_id), "alice");
        cr_assert_eq(store_task_get(st, "alice", "00000000000000000000000000000001", now + 1000, &got), -ENOENT);
        cr_assert_eq(store_task_count(st, NULL, now + 1000, &n), 0);
        cr_assert_eq(n, 0);
        t.created_at = now + 2000;
        cr_assert_eq(store_task_add(st, &t, now + 2000, 2, 3), 0);
        cr_assert_eq(store_task_count(st, NULL, now + 2000, &n), 0);
        cr_assert_eq(n, 1);
        cr_assert_eq(store_task_purge(st, now + 5000), 1);
}

/* A pool slot's claim rides on its uid row and goes to the session with it (migration 0033). */
Test(store, a_recorded_workspace_claim_moves_with_the_slots_uid_to_the_session)
{
        struct store_pool_slot row;
        char claim[STORE_CLAIM_MAX];
        int64_t uid;

        cr_assert_eq(store_pool_insert(st, "p0123456789abcdef", "img", NULL, 1), 0);
        cr_assert_eq(store_uid_assign(st, "@pool", "p0123456789abcdef", 70000, 70010, 1, &uid), 0);
        cr_expect_eq(store_uid_claim_get(st, "@pool", "p0123456789abcdef", claim), -ENOENT, "none recorded yet");
        cr_assert_eq(store_pool_set_ready(st, "p0123456789abcdef", "sbx-pod", "img", "none"), 0);
        cr_assert_eq(store_pool_claim_begin(st, "u1", "s1", "img", NULL, &row), 0);
        cr_assert_eq(store_uid_claim_set(st, "@pool", "p0123456789abcdef", "sbx-ws-slot"), 0);
        cr_assert_eq(store_pool_claim_commit(st, "@pool", &row, 2), 0);
        cr_assert_eq(store_uid_claim_get(st, "u1", "s1", claim), 0);
        cr_expect_str_eq(claim, "sbx-ws-slot");
        cr_expect_eq(store_uid_claim_get(st, "@pool", "p0123456789abcdef", claim), -ENOENT);
        cr_expect_eq(store_uid_claim_set(st, "u1", "nope", "x"), -ENOENT, "no uid row, nothing to record on");
        cr_assert_eq(store_uid_claim_set(st, "u1", "s1", NULL), 0);
        cr_expect_eq(store_uid_claim_get(st, "u1", "s1", claim), -ENOENT, "cleared");
}

Test(store, session_nodes_placed_moved_forgotten_and_counted)
{
        struct store_node_count *c = NULL;
        char node[65];
        size_t n = 0;

        cr_assert_eq(store_node_get(st, "alice", "s1", node, sizeof(node)), 0);
        cr_assert_str_eq(node, "", "a session never placed has no node");
        cr_assert_eq(store_node_set(st, "alice", "s1", "node-a", 1000), 0);
        cr_assert_eq(store_node_set(st, "alice", "s2", "node-a", 1000), 0);
        cr_assert_eq(store_node_set(st, "bob", "s1", "node-b", 1000), 0);
        cr_assert_eq(store_node_get(st, "alice", "s1", node, sizeof(node)), 0);
        cr_assert_str_eq(node, "node-a");
        cr_assert_eq(store_node_set(st, "alice", "s1", "node-b", 2000), 0); /* a new container, moved */
        cr_assert_eq(store_node_get(st, "alice", "s1", node, sizeof(node)), 0);
        cr_assert_str_eq(node, "node-b");
        cr_assert_eq(store_node_counts(st, &c, &n), 0);
        cr_assert_eq(n, 2);
        cr_assert_str_eq(c[0].node, "node-a");
        cr_assert_eq(c[0].sessions, 1);
        cr_assert_str_eq(c[1].node, "node-b");
        cr_assert_eq(c[1].sessions, 2);
        free(c);
        uint64_t one = 0;
        cr_assert_eq(store_node_count(st, "node-b", &one), 0);
        cr_assert_eq(one, 2);
        cr_assert_eq(store_node_set(st, "alice", "s1", "", 3000), 0); /* dropped */
        cr_assert_eq(store_node_get(st, "alice", "s1", node, sizeof(node)), 0);
        cr_assert_str_eq(node, "");
}
