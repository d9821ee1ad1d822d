/* store_pool.c — the pool_slots table (migrations 0017, 0018): the warm pool's
 * slots and the claim transaction that hands one to a session (pool.h
 * describes the protocol). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/common.h"
#include "store_internal.h"

#define SLOT_COLUMNS                                                                                                   \
        "slot, state, container_id, image, network_mode, user_id, session_id, created_at, image_ref, ws_quota"

static void slot_row(struct store_query *q, void *p)
{
        struct store_pool_slot *r = p;

        memset(r, 0, sizeof(*r));
        sq_col_text(q, 0, r->slot, sizeof(r->slot));
        sq_col_text(q, 1, r->state, sizeof(r->state));
        sq_col_text(q, 2, r->container_id, sizeof(r->container_id));
        sq_col_text(q, 3, r->image, sizeof(r->image));
        sq_col_text(q, 4, r->network_mode, sizeof(r->network_mode));
        sq_col_text(q, 5, r->user_id, sizeof(r->user_id));
        sq_col_text(q, 6, r->session_id, sizeof(r->session_id));
        r->created_at = sq_col_int64(q, 7);
        sq_col_text(q, 8, r->image_ref, sizeof(r->image_ref));
        sq_col_text(q, 9, r->ws_quota, sizeof(r->ws_quota));
}

int store_pool_insert(struct store *s, const char *slot, const char *image_ref, const char *ws_quota, int64_t now_ms)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r;

        if (!store_key_ok(slot) || !image_ref || !image_ref[0])
                return -EINVAL;
        r = sq_start(&q, s,
                     "INSERT INTO pool_slots (slot, state, created_at, image_ref, ws_quota) "
                     "VALUES (?1, 'creating', ?2, ?3, ?4)");
        if (r < 0)
                return r;
        sq_text(&q, slot);
        sq_int64(&q, now_ms);
        sq_text(&q, image_ref);
        sq_text_opt(&q, ws_quota && ws_quota[0] ? ws_quota : NULL);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_pool_set_ready(struct store *s, const char *slot, const char *container_id, const char *image,
                         const char *network_mode)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s,
                         "UPDATE pool_slots SET state = 'ready', container_id = ?2, image = ?3, network_mode = ?4 "
                         "WHERE slot = ?1 AND state = 'creating'");
        if (r < 0)
                return r;
        sq_text(&q, slot);
        sq_text(&q, container_id);
        sq_text_opt(&q, image);
        sq_text_opt(&q, network_mode);
        r = sq_exec(&q);
        return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

int store_pool_delete(struct store *s, const char *slot)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, "DELETE FROM pool_slots WHERE slot = ?1");
        if (r < 0)
                return r;
        sq_text(&q, slot);
        r = sq_exec(&q);
        return r < 0 ? r : 0;
}

int store_pool_get(struct store *s, const char *slot, struct store_pool_slot *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, "SELECT " SLOT_COLUMNS " FROM pool_slots WHERE slot = ?1");
        if (r < 0)
                return r;
        sq_text(&q, slot);
        r = sq_step(&q);
        if (r <= 0)
                return r < 0 ? r : -ENOENT;
        slot_row(&q, ret);
        return 0;
}

int store_pool_list(struct store *s, struct store_pool_slot **ret, size_t *ret_n)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, "SELECT " SLOT_COLUMNS " FROM pool_slots ORDER BY created_at, slot");

        if (r < 0)
                return r;
        return SQ_COLLECT(&q, slot_row, ret, ret_n);
}

int store_pool_claim_begin(struct store *s, const char *user, const char *session, const char *image_ref,
                           const char *ws_quota, struct store_pool_slot *ret)
{
        STORE_LOCK(s);
        _cleanup_(store_tx_rollbackp) struct store_tx tx = {};
        int r;

        if (!store_key_ok(user) || !store_key_ok(session))
                return -EINVAL;
        r = store_tx_begin(s, &tx);
        if (r < 0)
                return r;
        {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s,
                             "SELECT " SLOT_COLUMNS
                             " FROM pool_slots WHERE state = 'ready' AND image_ref = ?1 "
                             "AND ws_quota IS ?2 ORDER BY created_at, slot LIMIT 1");
                if (r < 0)
                        return r;
                sq_text_opt(&q, image_ref);
                sq_text_opt(&q, ws_quota);
                r = sq_step(&q);
                if (r <= 0)
                        return r < 0 ? r : -ENOENT;
                slot_row(&q, ret);
        }
        {
                _cleanup_(sq_end) struct store_query q = {};
                r = sq_start(&q, s,
                             "UPDATE pool_slots SET state = 'claiming', user_id = ?2, session_id = ?3 "
                             "WHERE slot = ?1 AND state = 'ready'");
                if (r < 0)
                        return r;
                sq_text(&q, ret->slot);
                sq_text(&q, user);
                sq_text(&q, session);
                r = sq_exec(&q);
                if (r < 0)
                        return r;
        }
        r = store_tx_commit(&tx);
        if (r < 0)
                return r;
        sbx_strlcpy(ret->state, "claiming", sizeof(ret->state));
        sbx_strlcpy(ret->user_id, user, sizeof(ret->user_id));
        sbx_strlcpy(ret->session_id, session, sizeof(ret->session_id));
        return 0;
}

int store_pool_claim_undo(struct store *s, const char *slot)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s,
                         "UPDATE pool_slots SET state = 'ready', user_id = NULL, session_id = NULL "
                         "WHERE slot = ?1 AND state = 'claiming'");
        if (r < 0)
                return r;
        sq_text(&q, slot);
        r = sq_exec(&q);
        return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

/* Run sql with the claim's parameters ?1..?n (n: the highest the statement uses). */
static int claim_step(struct store *s, const char *sql, int n, const char *pool_user,
                      const struct store_pool_slot *slot, int64_t now_ms)
{
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s, sql);

        if (r < 0)
                return r;
        const char *texts[] = {slot->slot,  slot->user_id, slot->session_id,  slot->container_id,
                               slot->image, pool_user,     slot->network_mode};
        for (int i = 0; i < n && i < 7; i++)
                sq_text_opt(&q, texts[i]);
        if (n >= 8)
                sq_int64(&q, now_ms);
        return sq_exec(&q);
}

int store_pool_claim_commit(struct store *s, const char *pool_user, const struct store_pool_slot *slot, int64_t now_ms)
{
        STORE_LOCK(s);
        _cleanup_(store_tx_rollbackp) struct store_tx tx = {};
        int r;

        if (!store_key_ok(slot->user_id) || !store_key_ok(slot->session_id) || !slot->container_id[0])
                return -EINVAL;
        r = store_tx_begin(s, &tx);
        if (r < 0)
                return r;
        r = claim_step(s, "DELETE FROM pool_slots WHERE slot = ?1 AND state = 'claiming'", 1, pool_user, slot, now_ms);
        if (r <= 0)
                return r < 0 ? r : -ENOENT; /* finished by someone else */
        r = claim_step(s,
                       "UPDATE session_uids SET user_id = ?2, session_id = ?3 WHERE user_id = ?6 AND session_id = ?1",
                       6, pool_user, slot, now_ms);
        if (r < 0)
                return r;
        r = claim_step(s,
                       "INSERT INTO containers (container_id, user_id, session_id, image, network_mode, created_at) "
                       "VALUES (?4, ?2, ?3, ?5, ?7, ?8) "
                       "ON CONFLICT (container_id) DO UPDATE SET user_id = ?2, session_id = ?3",
                       8, pool_user, slot, now_ms);
        if (r < 0)
                return r;
        r = claim_step(s,
                       "INSERT INTO sessions (user_id, session_id, state, container_id, image, network_mode, "
                       "created_at, updated_at, last_activity) VALUES (?2, ?3, 'RUNNING', ?4, ?5, ?7, ?8, ?8, ?8) "
                       "ON CONFLICT (user_id, session_id) DO UPDATE SET state = 'RUNNING', container_id = ?4, "
                       "image = ?5, network_mode = ?7, last_error = NULL, error_cause = NULL, updated_at = ?8, "
                       "last_activity = ?8",
                       8, pool_user, slot, now_ms);
        if (r < 0)
                return r;
        return store_tx_commit(&tx);
}

int store_pool_evict_oldest(struct store *s, struct store_pool_slot *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s,
                         "UPDATE pool_slots SET state = 'creating' WHERE slot = (SELECT slot FROM pool_slots "
                         "WHERE state = 'ready' ORDER BY created_at, slot LIMIT 1) RETURNING " SLOT_COLUMNS);
        if (r < 0)
                return r;
        r = sq_step(&q);
        if (r <= 0)
                return r < 0 ? r : -ENOENT;
        slot_row(&q, ret);
        return 0;
}

int store_pool_evict(struct store *s, const char *slot, struct store_pool_slot *ret)
{
        STORE_LOCK(s);
        _cleanup_(sq_end) struct store_query q = {};
        int r = sq_start(&q, s,
                         "UPDATE pool_slots SET state = 'creating' WHERE slot = ?1 AND state = 'ready' "
                         "RETURNING " SLOT_COLUMNS);
        if (r < 0)
                return r;
        sq_text(&q, slot);
        r = sq_step(&q);
        if (r <= 0)
                return r < 0 ? r : -ENOENT;
        slot_row(&q, ret);
        return 0;
}
