/* exec_admit.c — whether an execution may start: the caps
 * (limits.exec_global, _per_user, _per_session), the per-user quotas with the
 * fair share of limits.exec_global (the rule itself is quota_exec_admit in
 * quota.c; this file counts the load it is judged on), the workspace quota
 * (wsquota.c) and the session's spool quota, whose room is made by
 * removing the oldest ended executions' spools.
 *
 * Locks: e->lock while the live executions are counted and the admitted one
 * is registered, so two starts never both take the last slot; x->lock of
 * each counted execution inside it (e->lock before x->lock). The store and
 * spool files are touched with no lock held. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec_internal.h"
#include "sandboxd/log.h"
#include "sandboxd/quota.h"
#include "sandboxd/store.h"
#include "sandboxd/wsquota.h"

/* An execution in e->live whose state is final is only being recorded:
 * it no longer counts against any cap. Takes x->lock. */
static bool holds_slot(struct execution *x)
{
        pthread_mutex_lock(&x->lock);
        bool r = !exec_state_is_final(x->state);
        pthread_mutex_unlock(&x->lock);
        return r;
}

int exec_count_recorded(struct exec_registry *e, const char *user, const char *session, int64_t *ret)
{
        return store_exec_count(e->store, user, session, ret);
}

size_t exec_running_count(struct exec_registry *e, const char *user, const char *session)
{
        size_t n = 0;
        pthread_mutex_lock(&e->lock);
        for (struct execution *x = e->live; x; x = x->next)
                if ((!user || strcmp(user, x->user) == 0) && (!session || strcmp(session, x->session) == 0) &&
                    holds_slot(x))
                        n++;
        pthread_mutex_unlock(&e->lock);
        return n;
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* What x would join, counted over the executions holding a slot. Under
 * e->lock. -ENOMEM only if the distinct users cannot be counted. */
static int count_load(struct exec_registry *e, const struct execution *x, struct quota_exec_load *ret)
{
        _cleanup_free_ const char **others = NULL;
        size_t n = 0, cap = 0;

        *ret = (struct quota_exec_load){0};
        for (struct execution *y = e->live; y; y = y->next) {
                if (!holds_slot(y))
                        continue;
                ret->global++;
                if (strcmp(y->user, x->user) != 0) {
                        if (n == cap) {
                                const char **p = realloc(others, (cap = cap ? 2 * cap : 16) * sizeof(*p));
                                if (!p)
                                        return -ENOMEM;
                                others = p;
                        }
                        others[n++] = y->user;
                        continue;
                }
                ret->user++;
                if (strcmp(y->session, x->session) == 0)
                        ret->session++;
        }
        if (n > 0) {
                qsort(others, n, sizeof(*others), cmp_str);
                ret->other_users = 1;
                for (size_t i = 1; i < n; i++)
                        if (strcmp(others[i], others[i - 1]) != 0)
                                ret->other_users++;
        }
        return 0;
}

/* The session's spool quota: room for one more execution's full output
 * (both streams at EXEC_OUTPUT_CAP_BYTES) is made by removing the spools of the
 * session's oldest ended executions, like a log ring. Returns the bytes the
 * ended executions keep afterwards. No lock held: store and file I/O. */
static int64_t spool_make_room(struct exec_registry *e, const char *user, const char *session, int64_t limit,
                               int64_t want)
{
        int64_t kept = 0;

        for (int i = 0; i < 10000; i++) { /* bounded: each round clears one spool */
                char oldest[37], path[SBX_PATH_MAX + 64];

                if (store_quota_spool_usage(e->store, user, session, &kept, oldest) < 0)
                        return kept;
                if (kept <= limit - want || !oldest[0])
                        return kept;
                for (int k = 0; k < 2; k++) {
                        snprintf(path, sizeof(path), "%s/%s.%s", e->spool_dir, oldest, k ? "stderr" : "stdout");
                        (void)unlink(path);
                }
                if (store_exec_clear_spool(e->store, oldest) < 0)
                        return kept;
                log_ctx(LOG_LEVEL_INFO, user, session, NULL,
                        "output of execution %s removed: the session's spools reached max_spool_per_session", oldest);
        }
        return kept;
}

/* What the session's live executions may still spool. Under e->lock. */
static uint64_t spool_live(struct exec_registry *e, const struct execution *x)
{
        uint64_t sum = 0;
        for (struct execution *y = e->live; y; y = y->next) {
                if (strcmp(y->user, x->user) != 0 || strcmp(y->session, x->session) != 0)
                        continue;
                pthread_mutex_lock(&y->lock);
                /* one that ended counts what it kept (its row may not be final yet) */
                sum += exec_state_is_final(y->state) ? y->spooled[0] + y->spooled[1] : y->spool_budget;
                pthread_mutex_unlock(&y->lock);
        }
        return sum;
}

int exec_admit(struct exec_registry *e, struct execution *x, struct sbx_error *err)
{
        struct quota_limits lim;
        struct quota_exec_load load;
        int64_t want, kept;
        uint64_t live;
        int r;

        r = wsquota_admit(e->cfg, x->user, x->session, err); /* measure mode: a scan, outside the lock */
        if (r < 0)
                return r;

        pthread_mutex_lock(&e->lock);
        quota_limits_get(e->quota, e->cfg, x->user, &lim); /* q->lock is a leaf */
        pthread_mutex_unlock(&e->lock);
        want = 2 * e->cfg->exec_output_cap_bytes;
        if (want > lim.spool_bytes)
                want = lim.spool_bytes;
        kept = spool_make_room(e, x->user, x->session, lim.spool_bytes, want);

        pthread_mutex_lock(&e->lock);
        live = spool_live(e, x);
        /* what the quota leaves, at most a full output; 0 spools nothing (counted, truncated) */
        x->spool_budget = lim.spool_bytes - kept > (int64_t)live ? (uint64_t)(lim.spool_bytes - kept) - live : 0;
        if (x->spool_budget > (uint64_t)want)
                x->spool_budget = (uint64_t)want;
        r = count_load(e, x, &load);
        if (r < 0)
                r = sbx_error_set(err, r, 0, "out of memory");
        else if (e->closing)
                r = sbx_error_set(err, -ESHUTDOWN, 0, "the daemon is shutting down");
        else
                r = quota_exec_admit(e->cfg, &lim, &load, err);
        if (r == 0) {
                x->next = e->live;
                e->live = x;
                x->refs += 2; /* the registry's and the worker's */
                e->workers++;
        }
        pthread_mutex_unlock(&e->lock);
        return r;
}

void exec_admit_undo(struct exec_registry *e, struct execution *x)
{
        pthread_mutex_lock(&e->lock);
        for (struct execution **pp = &e->live; *pp; pp = &(*pp)->next)
                if (*pp == x) {
                        *pp = x->next;
                        break;
                }
        e->workers--;
        x->refs -= 2;
        pthread_mutex_unlock(&e->lock);
}
