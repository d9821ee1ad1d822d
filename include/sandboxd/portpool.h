/* portpool.h — the process-wide host port pool.
 *
 * The range [lo, hi] is cut into fixed blocks of `per_session` consecutive
 * ports (block k = lo + k*per_session ...). A session gets one whole block,
 * reserved before its container is created and released when the container
 * is removed. Reservations live in the store (port_allocations), so a
 * restarted daemon reloads them and neither leaks nor double-allocates.
 * Ports that something outside sandboxd already holds (bind(2) on them fails
 * with EADDRINUSE) are skipped: a block containing one is not handed out.
 *
 * Thread-safe: one mutex guards the in-memory bitmap; it is held across the
 * store insert (a local sqlite write) but never across a Docker call. */
#ifndef SANDBOXD_PORTPOOL_H
#define SANDBOXD_PORTPOOL_H

#include <stdbool.h>
#include <stddef.h>

#include "sandboxd/common.h"

struct store;
struct portpool;

/* Load the reservations from the store. -EINVAL for a bad range (lo > hi,
 * per_session < 1, or a range smaller than one block). per_session may be 0:
 * then every reservation is empty and succeeds. */
int portpool_new(struct store *st, int lo, int hi, int per_session, struct portpool **ret,
                 struct sbx_error *err);
void portpool_free(struct portpool *p);

int portpool_per_session(const struct portpool *p);

/* Reserve a block for (user, session), writing per_session ports to
 * ret_ports. If the session already holds a block, that block is returned
 * (idempotent). -ENOSPC with a clear message when no free block remains;
 * nothing is reserved then. */
int portpool_reserve_block(struct portpool *p, const char *user, const char *session, int *ret_ports,
                           struct sbx_error *err);

/* Record which container uses the session's block (for reconciliation). */
int portpool_set_container(struct portpool *p, const char *user, const char *session, const char *container_id);

/* The session's current block, or -ENOENT. */
int portpool_lookup(struct portpool *p, const char *user, const char *session, int *ret_ports);

/* Release the session's block (no-op if it holds none). */
int portpool_release(struct portpool *p, const char *user, const char *session);

/* Release every block whose session is not in the keep set; keep(user,
 * session, ud) returns true for sessions whose container still exists.
 * Returns the number of ports released, or -errno. */
int portpool_release_unheld(struct portpool *p, bool (*keep)(const char *user, const char *session, void *ud),
                            void *ud);

/* Ports reserved and total ports in the pool. */
void portpool_usage(struct portpool *p, size_t *ret_used, size_t *ret_total);

#endif
