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
 * The check runs afresh at every reservation, so a port freed outside is
 * usable again on the next call. Blocks are handed out round-robin, so a
 * just-released block is the last to be reused. A trailing remainder of the
 * range shorter than a block is never used.
 *
 * Thread-safe: one mutex guards the in-memory block table; it is held across
 * the bind probes and the store insert (a local sqlite write) but never across
 * a Docker call. user/session ids are 1..64 bytes (else -EINVAL). */
#ifndef SANDBOXD_PORTPOOL_H
#define SANDBOXD_PORTPOOL_H

#include <stdbool.h>
#include <stddef.h>

#include "sandboxd/common.h"

struct store;
struct portpool;

/* Load the reservations from the store (which must outlive the pool).
 * -EINVAL for a bad range (lo < 1, hi > 65535, lo > hi, per_session < 0, or
 * a range smaller than one block). per_session may be 0: then every
 * reservation is empty and succeeds. Allocations in the store that do not
 * fill exactly one block of this layout (written under another range or
 * block size) keep their blocks busy until released. */
int portpool_new(struct store *st, int lo, int hi, int per_session, struct portpool **ret, struct sbx_error *err);
/* Free the in-memory pool; reservations stay in the store. Accepts NULL. */
void portpool_free(struct portpool *p);

/* Ports per block, as given to portpool_new. */
int portpool_per_session(const struct portpool *p);

/* Reserve a block for (user, session), writing per_session ports to
 * ret_ports (which must hold that many). If the session already holds a
 * block, that block is returned (idempotent). -ENOSPC with a clear message
 * when no free block remains; nothing is reserved then. A failed bind probe
 * (e.g. -EMFILE) or store write fails the call, also reserving nothing. */
int portpool_reserve_block(struct portpool *p, const char *user, const char *session, int *ret_ports,
                           struct sbx_error *err);

/* Record which container uses the session's block (for reconciliation).
 * NULL or "" clears it. -ENOENT if the session holds no block. */
int portpool_set_container(struct portpool *p, const char *user, const char *session, const char *container_id);

/* Write the session's current block to ret_ports, or -ENOENT. */
int portpool_lookup(struct portpool *p, const char *user, const char *session, int *ret_ports);

/* Release the session's block and any other port the store holds for it
 * (no-op, returning 0, if it holds none). If the store write fails the block
 * stays reserved. */
int portpool_release(struct portpool *p, const char *user, const char *session);

/* Release every block whose session is not in the keep set; keep(user,
 * session, ud) returns true for sessions whose container still exists. It is
 * called once per session holding ports, without the pool lock held (it may
 * ask Docker or call other portpool functions). Meant for startup
 * reconciliation: a session that reserves between its keep() call and the
 * release loses the block. Returns the number of ports released, or -errno. */
int portpool_release_unheld(struct portpool *p, bool (*keep)(const char *user, const char *session, void *ud),
                            void *ud);

/* Ports in busy blocks and total ports in the pool's blocks (either pointer
 * may be NULL). */
void portpool_usage(struct portpool *p, size_t *ret_used, size_t *ret_total);

#endif
