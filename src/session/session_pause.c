/* session_pause.c — pause and resume (session.h): freezing a session's
 * container with the engine (Docker: the cgroup freezer), thawing it for
 * the next request, the idle pause (pause_after), and the caps on paused
 * sessions (limits.paused_sessions, per user, and the host's memory floor),
 * which stop the least recently used paused sessions first.
 *
 * A pause happens inside the session's transition, like every container
 * change (session_internal.h): s->transitioning is set under s->lock, the
 * engine call runs with no lock, and the result is published under the lock
 * again. A request arriving meanwhile waits on s->cond, then finds PAUSED
 * and resumes it (session_acquire → session_resume_locked). The
 * runner hub is told before the freeze and after the thaw, so it never
 * takes a frozen runner's silence for a lost runner.
 *
 * Locks: m->lock for the counters and the pause check; s->lock as
 * everywhere else, never across an engine call. */
#include "session_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/audit.h"
#include "sandboxd/engine.h"
#include "sandboxd/log.h"
#include "sandboxd/hub.h"
#include "sandboxd/store.h"

/* How long a thawed session's runner may take to come back when the
 * daemon restarted while it was frozen (it reconnects on its own). */
#define RESUME_RUNNER_WAIT_MS 5000

static void count(struct session_manager *m, uint64_t *counter)
{
        pthread_mutex_lock(&m->lock);
        (*counter)++;
        pthread_mutex_unlock(&m->lock);
}

static void audit_pause(struct session_manager *m, const char *user, const char *id, const char *action,
                        const char *container, const char *reason, int64_t took_ms, int64_t paused_ms)
{
        cJSON *d = cJSON_CreateObject();

        cJSON_AddStringToObject(d, "container", container);
        cJSON_AddStringToObject(d, "reason", reason);
        if (took_ms >= 0)
                cJSON_AddNumberToObject(d, "took_ms", (double)took_ms);
        if (paused_ms >= 0)
                cJSON_AddNumberToObject(d, "paused_ms", (double)paused_ms);
        (void)audit_record_json(m->store, "daemon", user, id, action, d);
}

static bool pause_blocked(struct session_manager *m, const char *user, const char *id)
{
        pthread_mutex_lock(&m->lock);
        session_pause_block_fn fn = m->pause_block_fn;
        void *ud = m->pause_block_ud;
        pthread_mutex_unlock(&m->lock);
        return fn && fn(user, id, ud);
}

int session_resume_locked(struct session *s, const char *reason)
{
        struct session_manager *m = s->mgr;
        struct sbx_error e = {0};
        char cid[65];
        int64_t t0 = sbx_now_ms(), paused_ms = s->paused_at ? sbx_wall_ms() - s->paused_at : -1;
        int r;

        s->transitioning = true;
        memcpy(cid, s->container_id, sizeof(cid));
        pthread_mutex_unlock(&s->lock);

        r = engine_unpause(m->engine, cid, &e);
        if (r == -EBUSY) {
                /* not paused: thawed behind our back, or never frozen (a crash between): running is all we need */
                struct engine_container_info info;
                r = engine_inspect(m->engine, cid, &info, &e);
                if (r == 0 && !info.running)
                        r = -ENOENT; /* dead: replaced below like any failed container */
        }
        hub_set_frozen(m->runner, s->user, s->id, false);
        /* after a restart while frozen the runner reconnects only now: give it
         * a moment, so the request that resumed it finds it (no wait at all
         * when the container has no runner or it never stopped talking) */
        if (r == 0)
                (void)hub_wait(m->runner, s->user, s->id, RESUME_RUNNER_WAIT_MS);

        pthread_mutex_lock(&s->lock);
        s->transitioning = false;
        if (r == 0) {
                s->paused_at = 0;
                (void)session_change_locked(s, SESSION_T_RESUME, SESSION_RUNNING, reason, NULL);
                pthread_cond_broadcast(&s->cond);
                pthread_mutex_unlock(&s->lock);
                count(m, &m->resumes);
                audit_pause(m, s->user, s->id, "session.resumed", cid, reason, sbx_now_ms() - t0, paused_ms);
                log_ctx(LOG_LEVEL_INFO, s->user, s->id, cid, "session resumed (%s) in %" PRId64 " ms", reason,
                        sbx_now_ms() - t0);
                pthread_mutex_lock(&s->lock);
                return 0;
        }
        if (r == -ENOENT) {
                char msg[256];
                snprintf(msg, sizeof(msg), "container %.12s was gone when the paused session was resumed", cid);
                s->paused_at = 0;
                (void)session_change_locked(s, SESSION_T_RESUME_FAILED, SESSION_ERROR, "removed", msg);
                pthread_cond_broadcast(&s->cond);
                pthread_mutex_unlock(&s->lock);
                session_call_handlers(m, s->user, s->id, cid, "removed");
                pthread_mutex_lock(&s->lock);
                return 0; /* the caller's loop makes its successor */
        }
        hub_set_frozen(m->runner, s->user, s->id, true); /* still frozen */
        pthread_cond_broadcast(&s->cond);
        log_ctx(LOG_LEVEL_WARN, s->user, s->id, cid, "cannot resume the paused session: %s", e.msg);
        return r;
}

int session_pause(struct session_manager *m, const char *user, const char *id, const char *reason, bool *ret_was_paused,
                  struct sbx_error *err)
{
        struct session *s;
        struct sbx_error e = {0};
        char cid[65];
        int64_t t0;
        int r;

        r = session_key_check(user, id, err);
        if (r < 0)
                return r;
        if (!(m->engine->capabilities & ENGINE_CAP_PAUSE))
                return sbx_error_set(err, -EOPNOTSUPP, 0, "the %s engine cannot pause a container", m->engine->name);
        if (session_lookup_ref(m, user, id, false, &s, NULL) < 0)
                return sbx_error_set(err, -ENOENT, 0, "no such session %s:%s", user, id);
        pthread_mutex_lock(&s->lock);
        while (s->transitioning)
                pthread_cond_wait(&s->cond, &s->lock);
        if (s->destroyed) {
                r = sbx_error_set(err, -ENOENT, 0, "no such session %s:%s", user, id);
                goto out_locked;
        }
        if (s->state == SESSION_PAUSED) {
                if (ret_was_paused)
                        *ret_was_paused = true;
                r = 0;
                goto out_locked;
        }
        if (s->state != SESSION_RUNNING || !s->container_id[0]) {
                r = sbx_error_set(err, -EINVAL, 0, "session %s:%s is %s: only a RUNNING session can be paused", user,
                                  id, session_state_to_string(s->state));
                goto out_locked;
        }
        if (s->active_ops > 0) {
                r = sbx_error_set(err, -EBUSY, 0,
                                  "busy: session %s:%s has a request in progress; pause it when it is done", user, id);
                goto out_locked;
        }
        s->transitioning = true; /* from here no request starts: each waits, then resumes it */
        memcpy(cid, s->container_id, sizeof(cid));
        pthread_mutex_unlock(&s->lock);

        if (pause_blocked(m, user, id)) {
                r = sbx_error_set(err, -EBUSY, 0,
                                  "busy: session %s:%s has an execution or a cell running, which a pause would freeze "
                                  "mid-way; wait for it or cancel it",
                                  user, id);
                pthread_mutex_lock(&s->lock);
                s->transitioning = false;
                pthread_cond_broadcast(&s->cond);
                goto out_locked;
        }
        t0 = sbx_now_ms();
        hub_set_frozen(m->runner, user, id, true); /* before the freeze: no heartbeat is missed */
        r = engine_pause(m->engine, cid, &e);
        if (r == 0 && engine_can(m->engine, ENGINE_CAP_MEMORY_CAPTURE) &&
            (strcmp(reason, "idle") == 0 || strcmp(reason, "to_disk") == 0)) {
                /* where the engine keeps memory on disk (a microVM), its memory goes there and its
                 * process ends; the resume boots it from the save. A container whose engine cannot
                 * (-EOPNOTSUPP: a Docker one beside the VMs) stays paused in memory, as it would anyway. */
                struct sbx_error de = {0};
                int dr = engine_pause_to_disk(m->engine, cid, &de);
                if (dr < 0 && dr != -EOPNOTSUPP)
                        log_ctx(LOG_LEVEL_WARN, user, id, cid, "paused in memory, not to disk: %s", de.msg);
        }
        pthread_mutex_lock(&s->lock);
        s->transitioning = false;
        if (r < 0) {
                pthread_mutex_unlock(&s->lock);
                hub_set_frozen(m->runner, user, id, false);
                pthread_mutex_lock(&s->lock);
                pthread_cond_broadcast(&s->cond);
                r = sbx_error_set(err, r, 0, "cannot pause session %s:%s: %s", user, id, e.msg);
                goto out_locked;
        }
        s->paused_at = sbx_wall_ms();
        (void)session_change_locked(s, SESSION_T_PAUSE, SESSION_PAUSED, reason, NULL);
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        if (ret_was_paused)
                *ret_was_paused = false;
        count(m, &m->pauses);
        audit_pause(m, user, id, "session.paused", cid, reason, sbx_now_ms() - t0, -1);
        log_ctx(LOG_LEVEL_INFO, user, id, cid, "session paused (%s) in %" PRId64 " ms", reason, sbx_now_ms() - t0);
        session_unref(s);
        (void)session_enforce_paused(m);
        return 0;

out_locked:
        pthread_mutex_unlock(&s->lock);
        session_unref(s);
        return r;
}

int session_resume(struct session_manager *m, const char *user, const char *id, bool *ret_was_paused,
                   struct sbx_error *err)
{
        struct session *s;
        bool was;
        int r;

        r = session_key_check(user, id, err);
        if (r < 0)
                return r;
        /* a known key only: resume never makes a new session */
        if (session_lookup_ref(m, user, id, false, &s, NULL) < 0)
                return sbx_error_set(err, -ENOENT, 0, "no such session %s:%s", user, id);
        pthread_mutex_lock(&s->lock);
        was = s->state == SESSION_PAUSED;
        pthread_mutex_unlock(&s->lock);
        session_unref(s);
        r = session_acquire(m, user, id, &s, err);
        if (r < 0)
                return r;
        session_release(s);
        if (ret_was_paused)
                *ret_was_paused = was;
        return 0;
}

/* ---- resuming for callers that must not block ---- */

struct session_resumption {
        struct session_job job; /* first: the job is the resumption */
        struct session_manager *m;
        char user[SESSION_KEY_MAX + 1], id[SESSION_KEY_MAX + 1];
};

/* Dropped while the worker stops: nobody waits for it. */
static void resumption_run(struct session_job *job, bool stopping)
{
        struct session_resumption *rs = (struct session_resumption *)job;
        struct sbx_error e = {0};

        if (!stopping && session_is_paused(rs->m, rs->user, rs->id) &&
            session_resume(rs->m, rs->user, rs->id, NULL, &e) < 0)
                log_ctx(LOG_LEVEL_WARN, rs->user, rs->id, NULL, "cannot resume for a port client: %s", e.msg);
        free(rs);
}

void session_resume_async(struct session_manager *m, const char *user, const char *id)
{
        struct session_resumption *rs;

        if (!session_id_valid(user) || !session_id_valid(id) || !session_is_paused(m, user, id))
                return;
        rs = calloc(1, sizeof(*rs));
        if (!rs)
                return;
        rs->job.run = resumption_run;
        rs->m = m;
        sbx_strlcpy(rs->user, user, sizeof(rs->user));
        sbx_strlcpy(rs->id, id, sizeof(rs->id));
        /* one queued resume per key: the key is "user:id" (':' is in neither) */
        snprintf(rs->job.key, sizeof(rs->job.key), "%s:%s", user, id);
        if (session_worker_post(&m->resumer, &rs->job) < 0)
                free(rs); /* stopping, full (SESSION_RESUME_QUEUE), or queued already */
}

void session_resume_async_stop(struct session_manager *m)
{
        session_worker_stop(&m->resumer); /* queued resumes are dropped */
}

bool session_is_paused(struct session_manager *m, const char *user, const char *id)
{
        struct session *s;
        bool paused;

        if (session_lookup_ref(m, user, id, false, &s, NULL) < 0)
                return false;
        pthread_mutex_lock(&s->lock);
        paused = s->state == SESSION_PAUSED;
        pthread_mutex_unlock(&s->lock);
        session_unref(s);
        return paused;
}

int session_pause_idle(struct session_manager *m, int64_t now_wall_ms)
{
        struct session **all;
        size_t n;
        int count_paused = 0;
        /* atomic: the one setting a test turns on in a live daemon (test_pause.c) */
        int after = __atomic_load_n(&m->cfg->pause_after_s, __ATOMIC_RELAXED);
        int64_t before = now_wall_ms - (int64_t)after * 1000;

        if (after <= 0 || !(m->engine->capabilities & ENGINE_CAP_PAUSE))
                return 0;
        if (session_all_refs(m, &all, &n) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                struct session *s = all[i];
                struct sbx_error e = {0};
                bool due;

                pthread_mutex_lock(&s->lock);
                due = s->state == SESSION_RUNNING && s->container_id[0] && !s->transitioning && !s->destroyed &&
                      s->active_ops == 0 && s->last_activity < before;
                pthread_mutex_unlock(&s->lock);
                /* busy (an execution or a cell runs): left running, asked again next round */
                if (!due || pause_blocked(m, s->user, s->id))
                        continue;
                if (session_pause(m, s->user, s->id, "idle", NULL, &e) == 0)
                        count_paused++;
                else
                        log_ctx(LOG_LEVEL_DEBUG, s->user, s->id, NULL, "idle pause skipped: %s", e.msg);
        }
        session_refs_free(all, n);
        return count_paused;
}

/* ---- the caps on paused sessions ---- */

struct paused {
        struct session *s; /* a reference */
        int64_t last_activity;
};

static int cmp_lru(const void *a, const void *b)
{
        const struct paused *x = a, *y = b;
        return x->last_activity < y->last_activity ? -1 : x->last_activity > y->last_activity;
}

/* The host's MemAvailable in bytes, or -1 when unknown. */
static int64_t mem_available(void)
{
        FILE *f = fopen("/proc/meminfo", "re");
        char line[128];
        int64_t kb = -1;

        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "MemAvailable: %" SCNd64 " kB", &kb) == 1)
                        break;
        fclose(f);
        return kb < 0 ? -1 : kb * 1024;
}

static int evict(struct session_manager *m, struct paused *p, const char *why)
{
        char msg[384], cid[65];
        cJSON *d;

        pthread_mutex_lock(&p->s->lock);
        memcpy(cid, p->s->container_id, sizeof(cid));
        pthread_mutex_unlock(&p->s->lock);
        snprintf(msg, sizeof(msg),
                 "stopped_while_paused: %s; the least recently used paused session was stopped first. The workspace "
                 "is kept and the next request starts the session again (its interpreter state is lost)",
                 why);
        if (session_stop_paused(m, p->s, "stopped_while_paused", msg) != 1)
                return 0;
        count(m, &m->pause_evictions);
        d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "reason", why);
        cJSON_AddStringToObject(d, "container", cid);
        (void)audit_record_json(m->store, "daemon", p->s->user, p->s->id, "session.pause_evicted", d);
        log_ctx(LOG_LEVEL_INFO, p->s->user, p->s->id, cid[0] ? cid : NULL, "paused session stopped: %s", why);
        return 1;
}

/* The user's cap on paused sessions: the quota's (with overrides) or the config's. */
static int64_t paused_cap(struct session_manager *m, const char *user)
{
        pthread_mutex_lock(&m->lock);
        session_user_cap_fn fn = m->paused_cap_fn;
        void *ud = m->paused_cap_ud;
        pthread_mutex_unlock(&m->lock);
        return fn ? fn(user, ud) : m->cfg->max_paused_sessions_per_user;
}

int session_enforce_paused(struct session_manager *m)
{
        const struct sbx_config *cfg = m->cfg;
        struct session **all;
        struct paused *list;
        size_t n, k = 0;
        int stopped = 0;
        char why[160];

        if (session_all_refs(m, &all, &n) < 0)
                return -ENOMEM;
        list = calloc(n + 1, sizeof(*list));
        if (!list) {
                session_refs_free(all, n);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                pthread_mutex_lock(&all[i]->lock);
                if (all[i]->state == SESSION_PAUSED && !all[i]->transitioning && !all[i]->destroyed)
                        list[k++] = (struct paused){all[i], all[i]->last_activity};
                pthread_mutex_unlock(&all[i]->lock);
        }
        qsort(list, k, sizeof(*list), cmp_lru);

        /* per user: past max_paused_sessions_per_user, that user's oldest go */
        for (size_t i = 0; i < k; i++) {
                size_t mine = 0;
                if (!list[i].s)
                        continue;
                for (size_t j = i; j < k; j++)
                        mine += list[j].s && strcmp(list[j].s->user, list[i].s->user) == 0;
                int64_t cap = paused_cap(m, list[i].s->user);
                if ((int64_t)mine <= cap)
                        continue;
                snprintf(why, sizeof(why),
                         "user %s holds more than max_paused_sessions_per_user=%" PRId64 " paused sessions",
                         list[i].s->user, cap);
                stopped += evict(m, &list[i], why);
                list[i].s = NULL; /* counted as gone either way: one attempt per round */
        }
        /* in all: past limits.paused_sessions, the oldest go */
        size_t left = 0;
        for (size_t i = 0; i < k; i++)
                left += list[i].s != NULL;
        for (size_t i = 0; i < k && left > (size_t)cfg->max_paused_sessions; i++) {
                if (!list[i].s)
                        continue;
                snprintf(why, sizeof(why), "more than limits.paused_sessions=%d sessions were paused",
                         cfg->max_paused_sessions);
                stopped += evict(m, &list[i], why);
                list[i].s = NULL;
                left--;
        }
        /* memory pressure: while the host's MemAvailable is below the floor */
        for (size_t i = 0; i < k && cfg->pause_min_mem_available_bytes > 0; i++) {
                int64_t avail;
                if (!list[i].s)
                        continue;
                avail = mem_available();
                if (avail < 0 || avail >= cfg->pause_min_mem_available_bytes)
                        break;
                snprintf(why, sizeof(why),
                         "memory pressure: the host's MemAvailable (%" PRId64
                         " MiB) was below "
                         "SESSION_PAUSE_MIN_MEM_AVAILABLE (%" PRId64 " MiB)",
                         avail >> 20, cfg->pause_min_mem_available_bytes >> 20);
                stopped += evict(m, &list[i], why);
        }
        free(list);
        session_refs_free(all, n);
        return stopped;
}

void session_pause_stats(struct session_manager *m, struct session_pause_stats *ret)
{
        pthread_mutex_lock(&m->lock);
        *ret = (struct session_pause_stats){m->pauses, m->resumes, m->pause_evictions};
        pthread_mutex_unlock(&m->lock);
}
