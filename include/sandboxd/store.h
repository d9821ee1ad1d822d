/* store.h — sqlite3 access (the only code that runs SQL).
 *
 * One `struct store` wraps one sqlite3 connection in WAL mode with a busy
 * timeout, opened SQLITE_OPEN_FULLMUTEX so several threads may share it; a
 * store-level mutex additionally serialises multi-statement transactions.
 * Prepared statements only; no SQL is ever built from strings.
 *
 * Migrations are the files migrations/NNNN_name.sql, embedded into the binary
 * at build time. Each is applied once, in order, inside a transaction, and its
 * version recorded in schema_migrations. A database whose newest version is
 * above the newest this binary knows is refused with -EPROTONOSUPPORT.
 * Low module: returns errors, logs at debug level only. */
#ifndef SANDBOXD_STORE_H
#define SANDBOXD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/common.h"

struct store;

struct store_migration {
        int version;      /* NNNN from the file name */
        const char *name; /* file name, e.g. "0001_initial.sql" */
        const char *sql;
};

/* The migrations compiled into this binary, in order. */
const struct store_migration *store_builtin_migrations(size_t *ret_n);

/* Open (creating if needed) the database file and apply the builtin
 * migrations. The parent directory must exist. */
int store_open(const char *path, struct store **ret, struct sbx_error *err);
/* Same, with an explicit migration list (for tests). */
int store_open_with(const char *path, const struct store_migration *migs, size_t n, struct store **ret,
                    struct sbx_error *err);
void store_close(struct store *s);

/* Newest applied migration version. */
int store_schema_version(struct store *s, int *ret_version);

/* VACUUM and wal checkpoint (for --gc). */
int store_vacuum(struct store *s, struct sbx_error *err);

/* ---- sessions ---- */

struct store_session {
        char user_id[65];
        char session_id[65];
        char state[16];        /* CREATING RUNNING STOPPED ERROR DESTROYED */
        char container_id[65]; /* "" if none */
        char image[256];
        char network_mode[16];
        char last_error[1024];
        char error_cause[64];
        int64_t created_at;    /* unix ms */
        int64_t updated_at;
        int64_t last_activity;
};

/* Insert or replace the whole row. */
int store_session_put(struct store *s, const struct store_session *row);
/* -ENOENT when absent. */
int store_session_get(struct store *s, const char *user, const char *session, struct store_session *ret);
/* Delete the session row and its ports and private datasets (destroy). */
int store_session_delete(struct store *s, const char *user, const char *session);
/* All rows (optionally filtered by user and/or state; NULL = any). malloc'd array. */
int store_session_list(struct store *s, const char *user, const char *state, struct store_session **ret,
                       size_t *ret_n);
int store_session_touch(struct store *s, const char *user, const char *session, int64_t now_ms);

/* ---- containers (history) ---- */
int store_container_add(struct store *s, const char *container_id, const char *user, const char *session,
                        const char *image, const char *network_mode, int64_t now_ms);
int store_container_removed(struct store *s, const char *container_id, const char *cause, int64_t now_ms);

/* ---- port allocations ---- */

/* Insert rows for ports[0..n) bound to (user, session) in one transaction.
 * -EADDRINUSE if any is already allocated (then nothing is inserted). */
int store_ports_reserve(struct store *s, const int *ports, size_t n, const char *user, const char *session,
                        int64_t now_ms);
int store_ports_set_container(struct store *s, const char *user, const char *session, const char *container_id);
/* Delete every allocation of (user, session). */
int store_ports_release(struct store *s, const char *user, const char *session);
int store_ports_release_port(struct store *s, int port);
struct store_port {
        int port;
        char user_id[65];
        char session_id[65];
        char container_id[65];
};
/* All allocations, ordered by port. malloc'd array. */
int store_ports_list(struct store *s, struct store_port **ret, size_t *ret_n);

/* ---- audit ---- */

/* detail_json may be NULL. */
int store_audit(struct store *s, const char *actor, const char *user, const char *session, const char *action,
                const char *detail_json);
/* Count rows matching action (and user/session if non-NULL): for tests and stats. */
int store_audit_count(struct store *s, const char *user, const char *session, const char *action,
                      int64_t *ret_count);

#endif
