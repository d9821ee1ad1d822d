/* privacy.h — PrivateData and the one-way network ratchet.
 *
 * A dataset marked on a session is recorded in the store for good (only
 * destroying the session deletes it). A session with any mark requires
 * NetworkMode "none"; every other session gets network_default. The
 * session manager asks privacy_required_network() before every operation
 * and compares it with the container's actual, inspected mode: a networked
 * container of a marked session is removed and recreated with "none" on the
 * same workspace (its services cleared with cause privacy_ratchet). Never
 * the other way: FULL → NONE only.
 *
 * Ordering guarantee: privacy_mark() returns only after the mark is durable
 * AND the session's egress tunnels are closed (privacy_set_tunnel_closer) AND
 * the session holds no networked container any more (it is removed
 * before the call returns, waiting for an in-progress creation). Every
 * operation that starts after that — including ones that were already
 * waiting on the session — goes through session_acquire, which sees the mark
 * and can only create a "none" container. */
#ifndef SANDBOXD_PRIVACY_H
#define SANDBOXD_PRIVACY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/common.h"

struct store;
struct session_manager;
struct privacy;

struct privacy_dataset {
        char dataset[257];
        char source[257];
        int64_t marked_at; /* unix ms */
};

/* Installs the network policy into the session manager. */
int privacy_new(struct store *st, struct session_manager *sm, struct privacy **ret, struct sbx_error *err);
void privacy_free(struct privacy *p);
/* Closes every egress tunnel of a session and returns once they are closed
 * (egress_close_session: the daemon wires the egress proxy here, so privacy
 * and the egress policy never include each other). */
typedef void (*privacy_close_fn)(const char *user, const char *session, void *userdata);
/* What privacy_mark() calls between the durable mark and the container's
 * removal (NULL: no proxy). Set once, before any mark. */
void privacy_set_tunnel_closer(struct privacy *p, privacy_close_fn fn, void *userdata);

/* dataset: 1-256 printable characters; source: 0-256. Idempotent. */
int privacy_mark(struct privacy *p, const char *user, const char *session, const char *dataset, const char *source,
                 const char *actor, struct sbx_error *err);
bool privacy_is_private(struct privacy *p, const char *user, const char *session);
const char *privacy_required_network(struct privacy *p, const char *user, const char *session);
int privacy_list(struct privacy *p, const char *user, const char *session, struct privacy_dataset **ret, size_t *ret_n);

#endif
