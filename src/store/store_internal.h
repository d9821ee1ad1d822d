/* store_internal.h — the store's private toolkit, shared by the files that
 * hold typed queries (store.c, store_exec.c, ...). Nothing outside the
 * store/ files includes it: only the store runs SQL.
 *
 * Adding a query: write the SQL as a literal with numbered parameters, then
 *   STORE_LOCK(s);
 *   _cleanup_(sq_end) struct store_query q = {};
 *   r = sq_start(&q, s, "UPDATE t SET a = ?1 WHERE b = ?2");
 *   sq_text(&q, a); sq_int64(&q, b);
 *   r = sq_exec(&q);              // or: while ((r = sq_step(&q)) > 0) sq_col_*()
 * and, for several writes, a struct store_tx (declared before the queries). */
#ifndef SANDBOXD_STORE_INTERNAL_H
#define SANDBOXD_STORE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>

#include "sandboxd/store.h"

#define STORE_KEY_MAX 64 /* user_id / session_id, as in struct store_session */

struct cached_stmt {
        const char *sql; /* a string literal: compared by address */
        sqlite3_stmt *stmt;
};

struct store {
        pthread_mutex_t lock;
        sqlite3 *db;
        struct cached_stmt *cache;
        size_t n_cache, cap_cache;
};

/* Take the store lock for the rest of the scope. */
struct store *store_lock(struct store *s);
void store_unlockp(struct store **s);
#define STORE_LOCK(s) _cleanup_(store_unlockp) struct store *_store_locked_ __attribute__((unused)) = store_lock(s)

/* Map the connection's last error to -errno (debug-logging sqlite's message). */
int store_fail(struct store *s, const char *what);
bool store_key_ok(const char *v);
int store_stmt_get(struct store *s, const char *sql, sqlite3_stmt **ret);

/* One use of one cached statement; binding errors surface at the next step. */
struct store_query {
        struct store *s;
        sqlite3_stmt *stmt;
        int next_param; /* 1-based index of the next q_* binding */
        int bind_rc;    /* first sqlite error while binding */
};

int sq_start(struct store_query *q, struct store *s, const char *sql);
void sq_bound(struct store_query *q, int rc);
void sq_text(struct store_query *q, const char *v);     /* NULL binds NULL */
void sq_text_opt(struct store_query *q, const char *v); /* NULL and "" bind NULL */
void sq_int64(struct store_query *q, int64_t v);
int sq_step(struct store_query *q); /* 1 row, 0 done, -errno */
int sq_exec(struct store_query *q); /* rows changed, or -errno */
void sq_end(struct store_query *q);
void sq_col_text(struct store_query *q, int col, char *buf, size_t size);
int64_t sq_col_int64(struct store_query *q, int col);

/* Every row of a started query, as a new array of elem-sized elements, each
 * zeroed, then filled by read_row from the query's columns. *ret (malloc'd,
 * NULL when no row came) and *ret_n are written only on success. The store's
 * one list helper: SQ_COLLECT(&q, read_row, ret, ret_n) takes elem from ret. */
int sq_collect(struct store_query *q, size_t elem, void (*read_row)(struct store_query *q, void *row), void **ret,
               size_t *ret_n);
#define SQ_COLLECT(q, read_row, ret, ret_n) sq_collect((q), sizeof(**(ret)), (read_row), (void **)(ret), (ret_n))

int store_exec_simple(struct store *s, const char *sql);
/* sql with ?1 = user and ?2 = session (a session's rows removed, say); 0 or -errno. */
int store_exec_key(struct store *s, const char *sql, const char *user, const char *session);
/* Grow a malloc'd array by one element; returns the new slot or NULL. */
void *store_array_push(void **array, size_t *n, size_t *cap, size_t elem);

/* A transaction, rolled back by its cleanup unless committed. */
struct store_tx {
        struct store *s;
};

int store_tx_begin(struct store *s, struct store_tx *tx);
int store_tx_commit(struct store_tx *tx);
void store_tx_rollbackp(struct store_tx *tx);

#endif
