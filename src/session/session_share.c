/* session_share.c — admission against the session caps, and the fair share
 * of limits.sessions.
 *
 * A session about to become live (to get a container) is admitted under
 * m->lock against max_sessions_per_user and limits.sessions. When limits.sessions
 * alone stands in the way, another user may have to give way, as the
 * execution slots are shared (quota.c), but by stopping a session rather
 * than refusing: the users holding the most live sessions, if that is at
 * least two more than the requester holds, give up their least recently
 * active idle session. Idle means RUNNING with no request in progress (no
 * reference from session_acquire, so no execution started through the
 * worker), and, asked of the busy check with no lock held, no running
 * execution and no active service: a session whose work goes on in the
 * background is in use even if nobody has called it for a while. The
 * session is stopped as idle expiry stops one (workspace kept, cause
 * "evicted") on the sbx-evict thread (session_stop.c), while the requester
 * makes its own container: it takes the victim's place at once. Each eviction moves one
 * session from a user holding k >= j+2 to one holding j, so the host
 * converges to equal shares (to within one) and never evicts back and
 * forth. When the heaviest users' sessions are all in use, the requester
 * gets `busy` as without the fair share.
 *
 * Races:
 *   - the victim is claimed (its transitioning set) and the requester
 *     marked (its own) in one pass under m->lock, so no third request can
 *     take the slot in between: for a moment both count, limits.sessions + 1;
 *   - the busy check runs with no lock held and may be stale by the claim,
 *     so the claim also requires the candidate's `uses` unchanged since it
 *     was collected (any request through session_acquire meanwhile, which is
 *     how executions and services reach a session, rules it out), and the
 *     check runs once more on the claimed session (an execution admitted
 *     but whose worker has not reached the session yet shows there; the
 *     claim is given back). What arrives after that waits for the stop;
 *   - a request to the victim while it is stopped waits on its transition,
 *     then finds it STOPPED and is admitted like any other (the same
 *     workspace, when there is room);
 *   - at most SHARE_ROUNDS rounds of collect, check, claim; then `busy`.
 *
 * Locks: m->lock, then the requester's s->lock (held by the caller), then
 * each other session's lock in turn for a short copy (counting passes are
 * serialised by m->lock, session_internal.h). The busy check, Docker and
 * the store's writes all happen outside them. */
#include "session_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>


#define SHARE_ROUNDS 3

/* Live sessions on the daemon and of `user`, not counting `skip`. Under
 * m->lock; takes each other s->lock in turn. */
static void live_count_locked(struct session_manager *m, const struct session *skip, const char *user, size_t *ret_all,
                              size_t *ret_user)
{
        size_t n = 0, mine = 0;
        for (size_t b = 0; b < N_BUCKETS; b++)
                for (struct session *s = m->buckets[b]; s; s = s->next) {
                        if (s == skip)
                                continue;
                        pthread_mutex_lock(&s->lock);
                        if (session_live_locked(s)) {
                                n++;
                                if (strcmp(s->user, user) == 0)
                                        mine++;
                        }
                        pthread_mutex_unlock(&s->lock);
                }
        *ret_all = n;
        *ret_user = mine;
}

int session_admit_locked(struct session_manager *m, const struct session *skip, const char *user, bool *ret_full,
                         struct sbx_error *err)
{
        int64_t cap = m->user_cap_fn ? m->user_cap_fn(user, m->user_cap_ud) /* a leaf lock */
                                     : m->cfg->max_sessions_per_user;
        size_t all, mine;

        *ret_full = false;
        live_count_locked(m, skip, user, &all, &mine);
        if ((int64_t)mine >= cap)
                return sbx_error_set(err, -EUSERS, 0,
                                     "busy: too many sessions: this user has %zu live sessions "
                                     "(max_sessions_per_user=%" PRId64 "); destroy one or let one expire",
                                     mine, cap);
        if (all >= (size_t)m->cfg->max_sessions) {
                *ret_full = true;
                return sbx_error_set(err, -EUSERS, 0,
                                     "busy: too many sessions: the limit limits.sessions=%d is reached",
                                     m->cfg->max_sessions);
        }
        return 0;
}

/* ---- who holds the most ---- */

/* The users holding the most live sessions, apart from the requester. The
 * names point into sessions in the table: valid while m->lock is held. */
struct share_tally {
        size_t mine;      /* the requester's live sessions */
        size_t heaviest;  /* the most another user holds */
        const char **top; /* the users holding `heaviest` (sorted) */
        size_t n_top;
};

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void tally_done(struct share_tally *t)
{
        free(t->top);
        *t = (struct share_tally){0};
}

/* Under m->lock. -ENOMEM only. */
static int tally_locked(struct session_manager *m, const struct session *skip, const char *user,
                        struct share_tally *ret)
{
        const char **users = calloc(m->n_sessions + 1, sizeof(*users));
        size_t n = 0, k = 0;

        *ret = (struct share_tally){0};
        if (!users)
                return -ENOMEM;
        for (size_t b = 0; b < N_BUCKETS; b++)
                for (struct session *s = m->buckets[b]; s; s = s->next) {
                        bool live;
                        if (s == skip)
                                continue;
                        pthread_mutex_lock(&s->lock);
                        live = session_live_locked(s);
                        pthread_mutex_unlock(&s->lock);
                        if (!live)
                                continue;
                        if (strcmp(s->user, user) == 0)
                                ret->mine++;
                        else
                                users[n++] = s->user;
                }
        qsort(users, n, sizeof(*users), cmp_str);
        /* runs of one name: keep the first name of each longest run */
        for (size_t i = 0; i < n; i = k) {
                for (k = i + 1; k < n && strcmp(users[k], users[i]) == 0; k++)
                        ;
                if (k - i > ret->heaviest) {
                        ret->heaviest = k - i;
                        ret->n_top = 0;
                }
                if (k - i == ret->heaviest)
                        users[ret->n_top++] = users[i]; /* ret->n_top <= i: not read again */
        }
        ret->top = users;
        return 0;
}

/* May a session of `owner` give way to the requester? */
static bool tally_may_take(const struct share_tally *t, const char *owner)
{
        return t->heaviest >= t->mine + 2 && bsearch(&owner, t->top, t->n_top, sizeof(*t->top), cmp_str);
}

/* RUNNING or PAUSED, with no request in progress and nothing changing it. Under s->lock. */
static bool looks_idle_locked(const struct session *s)
{
        return (s->state == SESSION_RUNNING || s->state == SESSION_PAUSED) && !s->transitioning && !s->destroyed &&
               s->active_ops == 0 && s->container_id[0];
}

bool session_share_possible_locked(struct session_manager *m, const char *user)
{
        struct share_tally t;
        bool found = false;

        if (tally_locked(m, NULL, user, &t) < 0)
                return false;
        for (size_t b = 0; b < N_BUCKETS && !found && t.heaviest >= t.mine + 2; b++)
                for (struct session *s = m->buckets[b]; s && !found; s = s->next) {
                        if (!tally_may_take(&t, s->user))
                                continue;
                        pthread_mutex_lock(&s->lock);
                        found = looks_idle_locked(s);
                        pthread_mutex_unlock(&s->lock);
                }
        tally_done(&t);
        return found;
}

/* ---- candidates: collected under m->lock, checked outside, claimed under it ---- */

struct candidate {
        struct session *s; /* a reference */
        uint64_t uses;     /* s->uses when collected */
        int64_t last_activity;
};

static int cmp_candidate(const void *a, const void *b)
{
        const struct candidate *x = a, *y = b;
        return x->last_activity < y->last_activity ? -1 : x->last_activity > y->last_activity;
}

/* Drop every candidate's reference. Under m->lock. */
static void candidates_drop_locked(struct candidate *c, size_t *n)
{
        for (size_t i = 0; i < *n; i++)
                session_unref_locked(c[i].s);
        *n = 0;
}

/* The idle-looking sessions of the users holding the most, if they may
 * give way to the requester, least recently active first; *ret_why tells
 * why none. Under m->lock. */
enum share_none { SHARE_NONE_FAIR, SHARE_NONE_BUSY };

static int collect_locked(struct session_manager *m, const struct session *skip, const char *user,
                          struct candidate **ret, size_t *ret_n, enum share_none *ret_why)
{
        struct share_tally t;
        struct candidate *c;
        size_t n = 0;
        int r = tally_locked(m, skip, user, &t);

        *ret_n = 0;
        if (r < 0)
                return r;
        *ret_why = t.heaviest >= t.mine + 2 ? SHARE_NONE_BUSY : SHARE_NONE_FAIR;
        c = realloc(*ret, (m->n_sessions + 1) * sizeof(*c));
        if (!c) {
                tally_done(&t);
                return -ENOMEM;
        }
        *ret = c;
        for (size_t b = 0; b < N_BUCKETS && t.heaviest >= t.mine + 2; b++)
                for (struct session *s = m->buckets[b]; s; s = s->next) {
                        if (s == skip || !tally_may_take(&t, s->user))
                                continue;
                        pthread_mutex_lock(&s->lock);
                        if (looks_idle_locked(s)) {
                                c[n] = (struct candidate){s, s->uses, s->last_activity};
                                s->refs++;
                                n++;
                        }
                        pthread_mutex_unlock(&s->lock);
                }
        tally_done(&t);
        qsort(c, n, sizeof(*c), cmp_candidate);
        *ret_n = n;
        return 0;
}

/* Has s work going on in the background? No lock held. */
static bool busy_now(struct session_manager *m, const struct session *s)
{
        session_busy_fn fn;
        void *ud;

        pthread_mutex_lock(&m->lock);
        fn = m->busy_fn;
        ud = m->busy_ud;
        pthread_mutex_unlock(&m->lock);
        return fn && fn(s->user, s->id, ud);
}

/* Drop the candidates the busy check calls busy. No lock held. */
static void candidates_check(struct session_manager *m, struct candidate *c, size_t *n)
{
        size_t k = 0;

        for (size_t i = 0; i < *n; i++) {
                if (busy_now(m, c[i].s)) {
                        session_unref(c[i].s);
                        continue;
                }
                c[k++] = c[i];
        }
        *n = k;
}

/* Give back a claim (nothing was done to it) and the reference. No lock held. */
static void unclaim(struct session *v)
{
        pthread_mutex_lock(&v->lock);
        v->transitioning = false;
        pthread_cond_broadcast(&v->cond);
        pthread_mutex_unlock(&v->lock);
        session_unref(v);
}

/* The first checked candidate that may still give way, claimed (its
 * transitioning set; the reference moves to the caller and out of c), or
 * NULL. Under m->lock, with the requester's lock held. */
static struct session *claim_locked(struct session_manager *m, const struct session *skip, const char *user,
                                    struct candidate *c, size_t *n)
{
        struct share_tally t;
        struct session *victim = NULL;

        if (*n == 0 || tally_locked(m, skip, user, &t) < 0)
                return NULL;
        for (size_t i = 0; i < *n && !victim; i++) {
                struct session *s = c[i].s;
                if (!tally_may_take(&t, s->user))
                        continue;
                pthread_mutex_lock(&s->lock);
                if (looks_idle_locked(s) && s->uses == c[i].uses) {
                        s->transitioning = true;
                        victim = s;
                        c[i] = c[--*n];
                }
                pthread_mutex_unlock(&s->lock);
        }
        tally_done(&t);
        return victim;
}

int session_admit(struct session_manager *m, struct session *s, struct session **ret_victim, struct sbx_error *err)
{
        _cleanup_free_ struct candidate *cand = NULL;
        enum share_none why = SHARE_NONE_FAIR;
        size_t n = 0;
        int r;

        *ret_victim = NULL;
        for (int round = 0;; round++) {
                struct session *victim = NULL;
                bool full = false;

                pthread_mutex_unlock(&s->lock);
                pthread_mutex_lock(&m->lock);
                pthread_mutex_lock(&s->lock);
                if (session_live_locked(s) || s->destroyed) {
                        candidates_drop_locked(cand, &n);
                        pthread_mutex_unlock(&m->lock);
                        return 1; /* the caller looks again */
                }
                r = session_admit_locked(m, s, s->user, &full, err);
                if (r < 0 && full)
                        victim = claim_locked(m, s, s->user, cand, &n);
                candidates_drop_locked(cand, &n);
                if (r == 0 || victim) {
                        s->transitioning = true;
                        pthread_mutex_unlock(&m->lock);
                        if (!victim) {
                                *ret_victim = NULL;
                                return 0;
                        }
                        /* Once more now that it is claimed: an execution registered
                         * since the check (its worker has not reached the session
                         * yet) shows here; one registered later finds it stopped. */
                        pthread_mutex_unlock(&s->lock);
                        bool busy = busy_now(m, victim);
                        if (busy)
                                unclaim(victim);
                        pthread_mutex_lock(&s->lock);
                        if (!busy) {
                                *ret_victim = victim;
                                return 0;
                        }
                        s->transitioning = false;
                        pthread_cond_broadcast(&s->cond);
                        continue;
                }
                if (full && round < SHARE_ROUNDS && collect_locked(m, s, s->user, &cand, &n, &why) < 0)
                        n = 0;
                pthread_mutex_unlock(&m->lock);
                if (!full)
                        return r;
                if (n == 0)
                        break;
                pthread_mutex_unlock(&s->lock);
                candidates_check(m, cand, &n);
                pthread_mutex_lock(&s->lock);
                if (n == 0)
                        break; /* all in use: collecting again would find the same */
        }
        if (why == SHARE_NONE_BUSY)
                return sbx_error_set(
                        err, -EUSERS, 0,
                        "busy: too many sessions: the limit limits.sessions=%d is reached, and the sessions "
                        "of the user holding the most are all in use (requests, executions or "
                        "services); retry later",
                        m->cfg->max_sessions);
        return sbx_error_set(err, -EUSERS, 0,
                             "busy: too many sessions: the limit limits.sessions=%d is reached, and no user holds two "
                             "more live sessions than this one (its fair share); destroy one or retry later",
                             m->cfg->max_sessions);
}
