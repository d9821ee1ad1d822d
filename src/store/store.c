/* store.c — sqlite3 access: opening, the migration runner, the query kit
 * (store_internal.h) and the audit log. The rows of each subject live in
 * store_*.c (sessions, containers and ports in store_session.c).
 *
 * The only code in sandboxd that runs SQL. One struct store owns one sqlite3
 * connection (SQLITE_OPEN_FULLMUTEX, WAL, busy timeout) and a small cache of
 * prepared statements keyed by the address of their SQL string literal.
 *
 * Locking: store->lock guards the connection, the statement cache and every
 * statement in it. Every public function takes it for its whole duration, so
 * a cached statement is never stepped by two threads at once, a multi-statement
 * transaction is never interleaved with another thread's statements, and
 * sqlite3_errmsg()/sqlite3_changes() belong to the call that just ran.
 * Several processes (or several struct store on one file) are serialised by
 * sqlite's own file locks: writers use BEGIN IMMEDIATE and wait up to the
 * busy timeout.
 *
 * Adding a query: see store_internal.h. */
#include "sandboxd/store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/log.h"
#include "store_internal.h"

#define STORE_BUSY_TIMEOUT_MS 5000
#define STORE_OPEN_RETRY_MS 20


/* ---- locking ---- */

struct store *store_lock(struct store *s)
{
        pthread_mutex_lock(&s->lock);
        return s;
}

void store_unlockp(struct store **s)
{
        if (*s)
                pthread_mutex_unlock(&(*s)->lock);
}


/* ---- errors ---- */

/* Map the connection's last error to a negative errno and log sqlite's
 * message at debug level. Constraint violations keep their meaning so that
 * callers can tell "already there" (-EEXIST) from "not allowed" (-EINVAL). */
int store_fail(struct store *s, const char *what)
{
        int ext = sqlite3_extended_errcode(s->db);

        log_debug("store: %s: %s (sqlite %d)", what, sqlite3_errmsg(s->db), ext);
        switch (ext & 0xff) {
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
                return -EBUSY;
        case SQLITE_NOMEM:
                return -ENOMEM;
        case SQLITE_CONSTRAINT:
                if (ext == SQLITE_CONSTRAINT_PRIMARYKEY || ext == SQLITE_CONSTRAINT_UNIQUE)
                        return -EEXIST;
                return -EINVAL;
        default:
                return -EIO;
        }
}

bool store_key_ok(const char *v)
{
        return v && *v && strlen(v) <= STORE_KEY_MAX;
}

/* ---- prepared statements ---- */

/* The cached statement for `sql`, reset and with no bindings. */
int store_stmt_get(struct store *s, const char *sql, sqlite3_stmt **ret)
{
        sqlite3_stmt *stmt = NULL;

        for (size_t i = 0; i < s->n_cache; i++)
                if (s->cache[i].sql == sql) {
                        stmt = s->cache[i].stmt;
                        sqlite3_reset(stmt);
                        sqlite3_clear_bindings(stmt);
                        *ret = stmt;
                        return 0;
                }

        if (s->n_cache == s->cap_cache) {
                size_t cap = s->cap_cache ? s->cap_cache * 2 : 32;
                struct cached_stmt *c = realloc(s->cache, cap * sizeof(*c));
                if (!c)
                        return -ENOMEM;
                s->cache = c;
                s->cap_cache = cap;
        }
        if (sqlite3_prepare_v2(s->db, sql, -1, &stmt, NULL) != SQLITE_OK)
                return store_fail(s, "prepare");
        s->cache[s->n_cache++] = (struct cached_stmt){sql, stmt};
        *ret = stmt;
        return 0;
}

/* One use of one cached statement. Binding errors are remembered and
 * reported by the next sq_step()/sq_exec(), so call sites stay short. */

int sq_start(struct store_query *q, struct store *s, const char *sql)
{
        int r;

        *q = (struct store_query){.s = s, .next_param = 1, .bind_rc = SQLITE_OK};
        r = store_stmt_get(s, sql, &q->stmt);
        if (r < 0)
                q->stmt = NULL;
        return r;
}

void sq_bound(struct store_query *q, int rc)
{
        q->next_param++;
        if (rc != SQLITE_OK && q->bind_rc == SQLITE_OK)
                q->bind_rc = rc;
}

/* NULL binds SQL NULL. */
void sq_text(struct store_query *q, const char *v)
{
        sq_bound(q, v ? sqlite3_bind_text(q->stmt, q->next_param, v, -1, SQLITE_TRANSIENT)
                      : sqlite3_bind_null(q->stmt, q->next_param));
}

/* NULL and "" bind SQL NULL: for optional columns such as container_id. */
void sq_text_opt(struct store_query *q, const char *v)
{
        sq_text(q, v && *v ? v : NULL);
}

void sq_int64(struct store_query *q, int64_t v)
{
        sq_bound(q, sqlite3_bind_int64(q->stmt, q->next_param, v));
}

/* 1 when a row is ready, 0 when done, -errno on failure. */
int sq_step(struct store_query *q)
{
        int rc;

        if (q->bind_rc != SQLITE_OK) {
                log_debug("store: bind: %s", sqlite3_errstr(q->bind_rc));
                return q->bind_rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
        }
        rc = sqlite3_step(q->stmt);
        if (rc == SQLITE_ROW)
                return 1;
        if (rc == SQLITE_DONE)
                return 0;
        return store_fail(q->s, sqlite3_sql(q->stmt));
}

/* Run a statement that returns no rows; returns the number of rows changed. */
int sq_exec(struct store_query *q)
{
        int r;

        while ((r = sq_step(q)) > 0)
                ;
        if (r < 0)
                return r;
        return sqlite3_changes(q->s->db);
}

void sq_end(struct store_query *q)
{
        if (q->stmt) {
                sqlite3_reset(q->stmt);
                sqlite3_clear_bindings(q->stmt);
                q->stmt = NULL;
        }
}

/* Copy a text column into a fixed buffer; NULL reads as "", and a value too
 * long for the buffer is cut (always NUL-terminated). */
void sq_col_text(struct store_query *q, int col, char *buf, size_t size)
{
        sbx_strlcpy(buf, (const char *)sqlite3_column_text(q->stmt, col), size);
}

int64_t sq_col_int64(struct store_query *q, int col)
{
        return sqlite3_column_int64(q->stmt, col);
}

/* Run a single parameterless statement (BEGIN, COMMIT, PRAGMA ...). */
int store_exec_simple(struct store *s, const char *sql)
{
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, sql);
        if (r < 0)
                return r;
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_exec_key(struct store *s, const char *sql, const char *user, const char *session)
{
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, sql);
        if (r < 0)
                return r;
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

/* Grow a malloc'd array by one element; returns the new slot or NULL. */
int sq_collect(struct store_query *q, size_t elem, void (*read_row)(struct store_query *q, void *row), void **ret,
               size_t *ret_n)
{
        _cleanup_free_ void *rows = NULL;
        size_t n = 0, cap = 0;
        int r;

        while ((r = sq_step(q)) > 0) {
                void *row = store_array_push(&rows, &n, &cap, elem);
                if (!row)
                        return -ENOMEM;
                memset(row, 0, elem);
                read_row(q, row);
        }
        if (r < 0)
                return r;
        *ret = TAKE_PTR(rows);
        *ret_n = n;
        return 0;
}

void *store_array_push(void **array, size_t *n, size_t *cap, size_t elem)
{
        if (*n == *cap) {
                size_t c = *cap ? *cap * 2 : 16;
                void *p = realloc(*array, c * elem);
                if (!p)
                        return NULL;
                *array = p;
                *cap = c;
        }
        return (char *)*array + (*n)++ * elem;
}

/* ---- transactions ---- */

/* Rolled back by its cleanup unless committed. Declare queries used inside
 * the transaction after it, so they are reset before the rollback runs. */

int store_tx_begin(struct store *s, struct store_tx *tx)
{
        int r = store_exec_simple(s, "BEGIN IMMEDIATE");
        if (r < 0)
                return r;
        tx->s = s;
        return 0;
}

int store_tx_commit(struct store_tx *tx)
{
        int r = store_exec_simple(tx->s, "COMMIT");
        if (r < 0)
                return r; /* still active: the cleanup rolls back */
        tx->s = NULL;
        return 0;
}

void store_tx_rollbackp(struct store_tx *tx)
{
        /* Some errors (SQLITE_FULL, SQLITE_IOERR) end the transaction themselves. */
        if (tx->s && !sqlite3_get_autocommit(tx->s->db))
                (void)store_exec_simple(tx->s, "ROLLBACK");
        tx->s = NULL;
}

/* ---- opening ---- */

/* Create the file (or tighten an existing one) with mode 0600 before sqlite
 * opens it: sqlite creates files 0644 & ~umask, and gives the -wal and -shm
 * files the main file's mode. */
static int prepare_db_file(const char *path, struct sbx_error *err)
{
        _cleanup_close_ int fd = -1;
        struct stat st;

        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return sbx_error_set(err, -errno, 0, "opening database %s: %s", path, strerror(errno));
        if (fstat(fd, &st) < 0)
                return sbx_error_set(err, -errno, 0, "stat %s: %s", path, strerror(errno));
        if (!S_ISREG(st.st_mode))
                return sbx_error_set(err, -EINVAL, 0, "database %s is not a regular file", path);
        if ((st.st_mode & 07777) != 0600 && fchmod(fd, 0600) < 0)
                return sbx_error_set(err, -errno, 0, "chmod 0600 %s: %s", path, strerror(errno));
        return 0;
}

/* sqlite's default busy handler backs off to 100 ms sleeps. In WAL mode the
 * write lock is only ever polled, so under steady contention a waiter that
 * looks rarely can lose it to busier connections for the whole timeout (seen
 * with 8 connections under valgrind). Poll every 1-4 ms, jittered, up to the
 * same deadline. sqlite resets count at each step, and calls this on the
 * stepping thread: hence the thread-local start time. */
static int busy_wait(void *ud, int count)
{
        static __thread int64_t since;
        static __thread uint32_t seed;
        int64_t now = sbx_now_ms();

        if (count == 0) {
                since = now;
                if (seed == 0)
                        seed = (uint32_t)(uintptr_t)&since ^ (uint32_t)now ^ 0x9e3779b9u;
        }
        if (now - since >= STORE_BUSY_TIMEOUT_MS)
                return 0;
        seed = seed * 1103515245u + 12345u;
        sbx_sleep_ms(1 + (seed >> 16) % 4);
        return 1;
}

static int configure_connection(struct store *s, struct sbx_error *err)
{
        static const char *const pragmas[] = {
                "PRAGMA foreign_keys=ON",
                "PRAGMA synchronous=NORMAL",
        };
        _cleanup_(sq_end) struct store_query q = {};
        char mode[16] = "";
        int r;

        /* First, so that switching to WAL waits for other openers too. */
        if (sqlite3_busy_handler(s->db, busy_wait, NULL) != SQLITE_OK)
                return sbx_error_set(err, -EIO, 0, "setting busy handler: %s", sqlite3_errmsg(s->db));

        r = sq_start(&q, s, "PRAGMA journal_mode=WAL");
        if (r >= 0)
                r = sq_step(&q);
        if (r < 0)
                return sbx_error_set(err, r, 0, "enabling WAL: %s", sqlite3_errmsg(s->db));
        if (r > 0)
                sq_col_text(&q, 0, mode, sizeof(mode));
        sq_end(&q);
        if (strcasecmp(mode, "wal") != 0)
                return sbx_error_set(err, -EIO, 0, "enabling WAL: journal_mode stayed \"%s\"", mode);

        for (size_t i = 0; i < ELEMENTSOF(pragmas); i++) {
                r = store_exec_simple(s, pragmas[i]);
                if (r < 0)
                        return sbx_error_set(err, r, 0, "%s: %s", pragmas[i], sqlite3_errmsg(s->db));
        }
        return 0;
}

static int migrations_apply(struct store *s, const struct store_migration *migs, size_t n, struct sbx_error *err);

int store_open_with(const char *path, const struct store_migration *migs, size_t n, struct store **ret,
                    struct sbx_error *err)
{
        struct store *s;
        int64_t deadline;
        int r;

        if (!path || !*path || !ret || (n > 0 && !migs))
                return sbx_error_set(err, -EINVAL, 0, "store_open: bad arguments");

        r = prepare_db_file(path, err);
        if (r < 0)
                return r;

        s = calloc(1, sizeof(*s));
        if (!s)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        pthread_mutex_init(&s->lock, NULL);

        /* sqlite opens every file (db, -wal, -shm, journal dir) with O_CLOEXEC on Linux. */
        if (sqlite3_open_v2(path, &s->db,
                            SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_NOFOLLOW,
                            NULL) != SQLITE_OK) {
                r = sbx_error_set(err, -EIO, 0, "opening database %s: %s", path,
                                  s->db ? sqlite3_errmsg(s->db) : "out of memory");
                goto fail;
        }
        sqlite3_extended_result_codes(s->db, 1);

        /* While another process switches a fresh file to WAL or sets up its
         * wal-index, sqlite can answer SQLITE_BUSY without consulting the busy
         * handler. Both steps are idempotent, so retry them for as long as the
         * busy timeout would have waited. */
        deadline = sbx_now_ms() + STORE_BUSY_TIMEOUT_MS;
        for (;;) {
                r = configure_connection(s, err);
                if (r >= 0)
                        r = migrations_apply(s, migs, n, err);
                if (r != -EBUSY || sbx_now_ms() >= deadline)
                        break;
                sbx_sleep_ms(STORE_OPEN_RETRY_MS);
        }
        if (r < 0) {
                sbx_error_prefix(err, "database %s", path);
                goto fail;
        }

        *ret = s;
        return 0;
fail:
        store_close(s);
        return r;
}

int store_open(const char *path, struct store **ret, struct sbx_error *err)
{
        size_t n;
        const struct store_migration *migs = store_builtin_migrations(&n);

        return store_open_with(path, migs, n, ret, err);
}

void store_close(struct store *s)
{
        if (!s)
                return;
        for (size_t i = 0; i < s->n_cache; i++)
                sqlite3_finalize(s->cache[i].stmt);
        free(s->cache);
        if (s->db && sqlite3_close(s->db) != SQLITE_OK)
                log_debug("store: close: %s", sqlite3_errmsg(s->db));
        pthread_mutex_destroy(&s->lock);
        free(s);
}

/* ---- migrations ---- */

static int schema_max_version(struct store *s, int *ret_version)
{
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
        if (r < 0)
                return r;
        r = sq_step(&q);
        if (r < 0)
                return r;
        *ret_version = r > 0 ? (int)sq_col_int64(&q, 0) : 0;
        return 0;
}

static int migration_applied(struct store *s, int version, bool *ret_applied)
{
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, "SELECT 1 FROM schema_migrations WHERE version = ?1");
        if (r < 0)
                return r;
        sq_int64(&q, version);
        r = sq_step(&q);
        if (r < 0)
                return r;
        *ret_applied = r > 0;
        return 0;
}

static int migration_apply_one(struct store *s, const struct store_migration *m, struct sbx_error *err)
{
        _cleanup_(store_tx_rollbackp) struct store_tx tx = {};
        char *errmsg = NULL;
        bool applied;
        int r;

        r = store_tx_begin(s, &tx);
        if (r < 0)
                return sbx_error_set(err, r, 0, "migration %s: begin: %s", m->name, sqlite3_errmsg(s->db));

        /* Another process may have applied it between our check and BEGIN IMMEDIATE. */
        r = migration_applied(s, m->version, &applied);
        if (r < 0)
                return sbx_error_set(err, r, 0, "migration %s: %s", m->name, sqlite3_errmsg(s->db));
        if (applied)
                return store_tx_commit(&tx);

        /* Migration files are trusted build inputs and may hold several
         * statements, hence sqlite3_exec rather than one prepared statement. */
        if (sqlite3_exec(s->db, m->sql, NULL, NULL, &errmsg) != SQLITE_OK) {
                r = store_fail(s, m->name);
                if (r != -EBUSY && r != -ENOMEM)
                        r = -EIO; /* a broken migration, not a constraint the caller could act on */
                sbx_error_set(err, r, 0, "migration %s failed: %s", m->name, errmsg ? errmsg : sqlite3_errmsg(s->db));
                sqlite3_free(errmsg);
                return r;
        }

        {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)");
                if (r >= 0) {
                        sq_int64(&q, m->version);
                        sq_text(&q, m->name);
                        sq_int64(&q, sbx_wall_ms());
                        r = sq_exec(&q);
                }
                if (r < 0)
                        return sbx_error_set(err, r, 0, "migration %s: recording version: %s", m->name,
                                             sqlite3_errmsg(s->db));
        }

        r = store_tx_commit(&tx);
        if (r < 0)
                return sbx_error_set(err, r, 0, "migration %s: commit: %s", m->name, sqlite3_errmsg(s->db));
        log_debug("store: applied migration %s", m->name);
        return 0;
}

static int migrations_apply(struct store *s, const struct store_migration *migs, size_t n, struct sbx_error *err)
{
        int newest = 0, current = 0, r;

        for (size_t i = 0; i < n; i++) {
                const struct store_migration *m = &migs[i];
                if (!m->name || !m->sql || m->version <= 0)
                        return sbx_error_set(err, -EINVAL, 0, "migration #%zu is malformed", i);
                if (i > 0 && m->version <= migs[i - 1].version)
                        return sbx_error_set(err, -EINVAL, 0,
                                             "migration versions must be strictly increasing: %s (%d) after %s (%d)",
                                             m->name, m->version, migs[i - 1].name, migs[i - 1].version);
                newest = m->version;
        }

        r = store_exec_simple(s,
                              "CREATE TABLE IF NOT EXISTS schema_migrations ("
                              "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)");
        if (r < 0)
                return sbx_error_set(err, r, 0, "creating schema_migrations: %s", sqlite3_errmsg(s->db));

        r = schema_max_version(s, &current);
        if (r < 0)
                return sbx_error_set(err, r, 0, "reading schema version: %s", sqlite3_errmsg(s->db));
        if (current > newest)
                return sbx_error_set(err, -EPROTONOSUPPORT, 0,
                                     "database schema version %d is newer than this sandboxd knows (%d); "
                                     "upgrade sandboxd",
                                     current, newest);

        for (size_t i = 0; i < n; i++) {
                bool applied;

                r = migration_applied(s, migs[i].version, &applied);
                if (r < 0)
                        return sbx_error_set(err, r, 0, "migration %s: %s", migs[i].name, sqlite3_errmsg(s->db));
                if (applied)
                        continue;
                r = migration_apply_one(s, &migs[i], err);
                if (r < 0)
                        return r;
        }
        return 0;
}

int store_schema_version(struct store *s, int *ret_version)
{
        STORE_LOCK(s);
        return schema_max_version(s, ret_version);
}

int store_vacuum(struct store *s, struct sbx_error *err)
{
        STORE_LOCK(s);
        int r;

        r = store_exec_simple(s, "VACUUM");
        if (r < 0)
                return sbx_error_set(err, r, 0, "VACUUM: %s", sqlite3_errmsg(s->db));
        r = store_exec_simple(s, "PRAGMA wal_checkpoint(TRUNCATE)");
        if (r < 0)
                return sbx_error_set(err, r, 0, "wal checkpoint: %s", sqlite3_errmsg(s->db));
        return 0;
}

/* ---- audit ---- */

int store_audit(struct store *s, const char *actor, const char *user, const char *session, const char *action,
                const char *detail_json)
{
        return store_audit_traced(s, actor, user, session, action, detail_json, NULL);
}

int store_audit_traced(struct store *s, const char *actor, const char *user, const char *session, const char *action,
                       const char *detail_json, const char *trace_id)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!action || !*action)
                return -EINVAL;
        r = sq_start(&q, s,
                     "INSERT INTO audit_log (ts, actor, user_id, session_id, action, detail, trace_id) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
        if (r < 0)
                return r;
        sq_int64(&q, sbx_wall_ms());
        sq_text_opt(&q, actor);
        sq_text_opt(&q, user);
        sq_text_opt(&q, session);
        sq_text(&q, action);
        sq_text_opt(&q, detail_json);
        sq_text_opt(&q, trace_id);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_audit_count(struct store *s, const char *user, const char *session, const char *action, int64_t *ret_count)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!ret_count)
                return -EINVAL;
        r = sq_start(&q, s,
                     "SELECT COUNT(*) FROM audit_log WHERE (?1 IS NULL OR action = ?1) "
                     "AND (?2 IS NULL OR user_id = ?2) AND (?3 IS NULL OR session_id = ?3)");
        if (r < 0)
                return r;
        sq_text(&q, action);
        sq_text(&q, user);
        sq_text(&q, session);
        r = sq_step(&q);
        if (r < 0)
                return r;
        *ret_count = r > 0 ? sq_col_int64(&q, 0) : 0;
        return 0;
}
