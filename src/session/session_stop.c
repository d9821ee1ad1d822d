/* session_stop.c — taking a session's container away: a failure the
 * monitor reports (session_mark_failed), the privacy ratchet
 * (session_enforce_network), idle and TTL expiry, the fair share's eviction
 * (session_evict; session_share.c chooses which), and session_destroy (with
 * the workspace purge and the uid release). OOM counts live here too.
 *
 * Locks: a container is removed inside the session's transition:
 * begin_teardown (or enforce_network) sets s->transitioning under s->lock,
 * the Docker work runs with no lock, and end_teardown or abort_transition
 * clears it and wakes the waiters (session_internal.h). */
#include "session_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sandboxd/audit.h"
#include "sandboxd/container.h"
#include "sandboxd/engine.h"
#include "sandboxd/events.h"
#include "sandboxd/gateway.h"
#include "sandboxd/log.h"
#include "sandboxd/portpool.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"
#include "sandboxd/store_egress.h"
#include "sandboxd/wsquota.h"

/* ---- failures ---- */

/* How specific a cause is: a later event may refine "exited" into "stopped"
 * (docker stop) or "removed" (docker rm -f), never the other way. A lost
 * node (Kubernetes) says most: its Pod may be removed later because of it. */
static int cause_rank(const char *cause)
{
        if (strncmp(cause, "node_", 5) == 0)
                return 5;
        if (strcmp(cause, "removed") == 0)
                return 4;
        if (strcmp(cause, "stopped") == 0)
                return 3;
        if (strcmp(cause, "oom_killed") == 0)
                return 2;
        return 1;
}

bool session_mark_failed(struct session_manager *m, const char *user, const char *id, const char *container_id,
                         const char *cause)
{
        struct session *s;
        bool changed = false, first = false, node_lost = false;
        char msg[256];

        if (session_lookup_ref(m, user, id, false, &s, NULL) < 0)
                return false;
        pthread_mutex_lock(&s->lock);
        if (!s->transitioning && strcmp(s->container_id, container_id) == 0) {
                snprintf(msg, sizeof(msg), "container %.12s failed: %s", container_id, cause);
                if (s->state == SESSION_RUNNING || s->state == SESSION_PAUSED) {
                        s->paused_at = 0;
                        (void)session_change_locked(s, SESSION_T_FAIL, SESSION_ERROR, cause, msg);
                        changed = first = true;
                } else if (s->state == SESSION_ERROR && cause_rank(cause) > cause_rank(s->error_cause)) {
                        /* a refinement to a lost node is on the record too (below) */
                        node_lost = strncmp(s->error_cause, "node_", 5) != 0;
                        (void)session_change_locked(s, SESSION_T_FAIL, SESSION_ERROR, cause, msg);
                        changed = true;
                }
        }
        pthread_mutex_unlock(&s->lock);
        session_unref(s);
        if ((first || node_lost) && strncmp(cause, "node_", 5) == 0) {
                /* a lost node is the cluster's doing, not the tenant's: on the record */
                cJSON *detail = cJSON_CreateObject();
                cJSON_AddStringToObject(detail, "container", container_id);
                cJSON_AddStringToObject(detail, "cause", cause);
                (void)audit_record_json(m->store, "monitor", user, id, "session.node_lost", detail);
        }
        if (first)
                session_call_handlers(m, user, id, container_id, cause);
        return changed;
}

static void end_teardown(struct session *s, enum session_state state, const char *cause);

/* The session's container is gone: its workspace image is unmounted
 * (workspace.quota_mode loop). Called inside the session's transition. */
static void release_workspace(struct session_manager *m, const char *user, const char *id)
{
        struct sbx_error err = {0};

        if (wsquota_detach(m->cfg, user, id, &err) < 0)
                log_ctx(LOG_LEVEL_WARN, user, id, NULL, "%s", err.msg);
}

/* The engine half of every teardown: remove the container (if any) and
 * record why, then give the session's ports back and (release_ws) its
 * workspace up. Nothing is released when the container cannot be removed. */
static int teardown_container(struct session_manager *m, const char *user, const char *id, const char *cid,
                              const char *cause, bool release_ws, struct sbx_error *err)
{
        if (cid[0]) {
                session_call_notices(m, user, id, cid, cause);
                int r = container_remove(m->engine, cid, err);
                if (r < 0)
                        return r;
                (void)store_container_removed(m->store, cid, cause, sbx_wall_ms());
        }
        (void)portpool_release(m->ports, user, id);
        if (release_ws)
                release_workspace(m, user, id);
        return 0;
}

/* The workspace is verifiably gone: so goes the session's uid, and with it
 * the identity files naming it. */
static void release_uid(struct session_manager *m, const char *user, const char *id)
{
        uid_t uid;

        if (sessuid_lookup(m->store, user, id, &uid) < 0)
                return;
        if (sessuid_release(m->store, user, id) < 0) {
                log_ctx(LOG_LEVEL_WARN, user, id, NULL, "cannot release uid %u; --gc will", (unsigned)uid);
                return;
        }
        container_identity_drop(m->cfg, uid);
        log_ctx(LOG_LEVEL_DEBUG, user, id, NULL, "uid %u released with the workspace", (unsigned)uid);
}

/* Give up a transition this thread began, nothing changed: clear the mark
 * and wake the waiters. */
static void abort_transition(struct session *s)
{
        pthread_mutex_lock(&s->lock);
        s->transitioning = false;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
}

int session_enforce_network(struct session_manager *m, const char *user, const char *id, struct sbx_error *err)
{
        struct engine_container_info info;
        struct session *s;
        char cid[65];
        int r;

        /* a sealed container has nothing to remove: the ratchet is the gateway
         * closing its listeners, its sockets and its tunnels */
        gateway_enforce(m->gateway, user, id);
        if (session_lookup_ref(m, user, id, false, &s, NULL) < 0)
                return 0; /* no container yet: the first one is made with the required mode */
        pthread_mutex_lock(&s->lock);
        while (s->transitioning)
                pthread_cond_wait(&s->cond, &s->lock);
        if (!s->container_id[0]) {
                pthread_mutex_unlock(&s->lock);
                session_unref(s);
                return 0;
        }
        s->transitioning = true;
        memcpy(cid, s->container_id, sizeof(cid));
        pthread_mutex_unlock(&s->lock);

        r = engine_inspect(m->engine, cid, &info, err);
        if (r == -ENOENT ||
            (r == 0 && !(strcmp(session_required_network(m, user, id), "none") == 0 && info.has_network))) {
                /* gone already, or already as required: nothing to take away */
                abort_transition(s);
                session_unref(s);
                return 0;
        }
        if (r == 0)
                r = teardown_container(m, user, id, cid, "privacy_ratchet", true, err);
        if (r < 0) {
                abort_transition(s);
                session_unref(s);
                sbx_error_prefix(err, "removing the networked container %.12s", cid);
                return r;
        }
        pthread_mutex_lock(&s->lock);
        memcpy(s->ratchet_from, cid, sizeof(s->ratchet_from));
        /* what it has now, and all it will ever get: no session view shows the old network again */
        sbx_strlcpy(s->network_mode, "none", sizeof(s->network_mode));
        pthread_mutex_unlock(&s->lock);
        end_teardown(s, SESSION_STOPPED, "privacy_ratchet");
        session_call_handlers(m, user, id, cid, "privacy_ratchet");
        log_ctx(LOG_LEVEL_INFO, user, id, cid, "privacy ratchet: networked container removed");
        session_unref(s);
        return 0;
}

void session_note_oom(struct session_manager *m, const char *user, const char *id, const char *container_id)
{
        struct session *s;

        if (session_lookup_ref(m, user, id, false, &s, NULL) < 0)
                return;
        pthread_mutex_lock(&s->lock);
        if (strcmp(s->container_id, container_id) == 0)
                s->oom_events++;
        pthread_mutex_unlock(&s->lock);
        session_unref(s);
}

uint64_t session_oom_events(struct session *s)
{
        uint64_t n;
        pthread_mutex_lock(&s->lock);
        n = s->oom_events;
        pthread_mutex_unlock(&s->lock);
        return n;
}

/* Take the container away from a session that is not in use: used by idle
 * expiry and destroy. Returns with s->transitioning set and the old id in
 * ret_id (maybe ""), or -EBUSY. */
static int begin_teardown(struct session *s, bool only_idle, int64_t idle_before, char ret_id[65])
{
        int r = 0;

        pthread_mutex_lock(&s->lock);
        if (only_idle) {
                /* a paused session too: idle_timeout counts from its last use */
                if (s->transitioning || s->active_ops > 0 ||
                    (s->state != SESSION_RUNNING && s->state != SESSION_PAUSED) || s->last_activity >= idle_before)
                        r = -EBUSY;
        } else {
                while (s->transitioning)
                        pthread_cond_wait(&s->cond, &s->lock);
        }
        if (s->destroyed)
                r = -ENOENT;
        if (r == 0) {
                s->transitioning = true;
                memcpy(ret_id, s->container_id, 65);
        }
        pthread_mutex_unlock(&s->lock);
        return r;
}

static void end_teardown(struct session *s, enum session_state state, const char *cause)
{
        pthread_mutex_lock(&s->lock);
        s->transitioning = false;
        s->container_id[0] = '\0';
        s->paused_at = 0;
        (void)session_change_locked(s, SESSION_T_STOP, state, cause, NULL);
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
}

/* Stop s (container removed, ports released, STOPPED, workspace kept) with
 * cause; only_idle: only if idle since before. 1 stopped, 0 not. */
static int stop_one(struct session_manager *m, struct session *s, bool only_idle, int64_t before, const char *cause)
{
        char id[65];
        struct sbx_error err = {0};

        if (begin_teardown(s, only_idle, before, id) < 0)
                return 0;
        if (teardown_container(m, s->user, s->id, id, cause, true, &err) < 0) {
                log_ctx(LOG_LEVEL_WARN, s->user, s->id, id, "%s: cannot remove container: %s", cause, err.msg);
                abort_transition(s);
                return 0;
        }
        end_teardown(s, SESSION_STOPPED, cause);
        session_call_handlers(m, s->user, s->id, id, cause);
        return 1;
}

int session_hold(struct session_manager *m, const char *user, const char *id, bool stop, const char *cause,
                 session_hold_fn fn, void *ud, struct sbx_error *err)
{
        struct session *s;
        char cid[65];
        int r;

        r = session_key_check(user, id, err);
        if (r < 0)
                return r;
        if (session_lookup_ref(m, user, id, false, &s, NULL) < 0)
                return sbx_error_set(err, -ENOENT, 0, "no session %s", id);
        if (begin_teardown(s, false, 0, cid) < 0) {
                session_unref(s);
                return sbx_error_set(err, -ENOENT, 0, "no session %s", id);
        }
        if (!stop) {
                r = fn(ud, cid, err);
                abort_transition(s);
                session_unref(s);
                return r;
        }
        r = teardown_container(m, user, id, cid, cause, true, err);
        if (r < 0) {
                abort_transition(s);
                session_unref(s);
                sbx_error_prefix(err, "removing container %.12s", cid);
                return r;
        }
        r = fn(ud, "", err);
        end_teardown(s, SESSION_STOPPED, cause);
        if (cid[0])
                session_call_handlers(m, user, id, cid, cause);
        session_unref(s);
        return r;
}

int session_stop_paused(struct session_manager *m, struct session *s, const char *cause, const char *msg)
{
        struct sbx_error err = {0};
        char id[65];

        pthread_mutex_lock(&s->lock);
        if (s->transitioning || s->destroyed || s->active_ops > 0 || s->state != SESSION_PAUSED) {
                pthread_mutex_unlock(&s->lock);
                return 0;
        }
        s->transitioning = true;
        memcpy(id, s->container_id, sizeof(id));
        pthread_mutex_unlock(&s->lock);
        /* a paused container is removed as it is: the engine kills it frozen */
        if (teardown_container(m, s->user, s->id, id, cause, true, &err) < 0) {
                log_ctx(LOG_LEVEL_WARN, s->user, s->id, id, "%s: cannot remove the paused container: %s", cause,
                        err.msg);
                abort_transition(s);
                return 0;
        }
        pthread_mutex_lock(&s->lock);
        s->transitioning = false;
        s->container_id[0] = '\0';
        s->paused_at = 0;
        (void)session_change_locked(s, SESSION_T_STOP, SESSION_STOPPED, cause, msg);
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        session_call_handlers(m, s->user, s->id, id, cause);
        return 1;
}

int session_expire_idle(struct session_manager *m, int64_t now_wall_ms)
{
        struct session **all;
        size_t n;
        int count = 0;
        int64_t before = now_wall_ms - (int64_t)m->cfg->idle_timeout_s * 1000;

        if (session_all_refs(m, &all, &n) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                count += stop_one(m, all[i], true, before, "idle_expired");
        session_refs_free(all, n);
        return count;
}

int session_evict(struct session_manager *m, struct session *v, const char *for_user, struct sbx_error *err)
{
        struct sbx_error e = {0};
        char id[65], msg[256];
        cJSON *detail;

        pthread_mutex_lock(&v->lock);
        memcpy(id, v->container_id, sizeof(id));
        pthread_mutex_unlock(&v->lock);
        if (teardown_container(m, v->user, v->id, id, "evicted", true, &e) < 0) {
                log_ctx(LOG_LEVEL_WARN, v->user, v->id, id, "fair share: cannot remove the container: %s", e.msg);
                abort_transition(v);
                return sbx_error_set(err, -EUSERS, 0,
                                     "busy: too many sessions: the limit limits.sessions=%d is reached, and the session "
                                     "chosen to give way could not be stopped; retry later",
                                     m->cfg->max_sessions);
        }
        /* the tenant reads this in its session info; who it gave way to is the audit's (admins') */
        snprintf(msg, sizeof(msg),
                 "evicted: fair_share: the daemon was full (limits.sessions=%d) and another user needed a session; "
                 "the workspace is kept and the next request starts the session again",
                 m->cfg->max_sessions);
        pthread_mutex_lock(&v->lock);
        v->transitioning = false;
        v->container_id[0] = '\0';
        (void)session_change_locked(v, SESSION_T_EVICT, SESSION_STOPPED, "evicted", msg);
        pthread_cond_broadcast(&v->cond);
        pthread_mutex_unlock(&v->lock);
        session_call_handlers(m, v->user, v->id, id, "evicted");
        pthread_mutex_lock(&m->lock);
        m->evictions++;
        pthread_mutex_unlock(&m->lock);
        detail = cJSON_CreateObject();
        cJSON_AddStringToObject(detail, "reason", "fair_share");
        cJSON_AddStringToObject(detail, "for_user", for_user);
        cJSON_AddStringToObject(detail, "container", id);
        cJSON_AddNumberToObject(detail, "max_sessions", m->cfg->max_sessions);
        (void)audit_record_json(m->store, "daemon", v->user, v->id, "session.evicted", detail);
        log_ctx(LOG_LEVEL_INFO, v->user, v->id, id[0] ? id : NULL,
                "session stopped for the fair share of limits.sessions (user %s needed one)", for_user);
        return 0;
}

/* ---- the evictor thread ---- */

struct session_eviction {
        struct session_job job; /* first: the job is the eviction */
        struct session_manager *m;
        struct session *v; /* claimed, a reference held */
        char for_user[SESSION_KEY_MAX + 1];
};

/* Run even while the worker stops: v is claimed, and only an eviction that
 * ends lets go of the claim. */
static void eviction_run(struct session_job *job, bool stopping)
{
        struct session_eviction *ev = (struct session_eviction *)job;
        struct sbx_error e = {0};

        (void)stopping;
        if (session_evict(ev->m, ev->v, ev->for_user, &e) < 0)
                log_ctx(LOG_LEVEL_WARN, ev->v->user, ev->v->id, NULL,
                        "fair share: the session chosen to give way to user %s stays (%s); that user's "
                        "session was made anyway, one over limits.sessions until one ends",
                        ev->for_user, e.msg);
        session_unref(ev->v);
        free(ev);
}

int session_evict_async(struct session_manager *m, struct session *v, const char *for_user)
{
        struct session_eviction *ev = calloc(1, sizeof(*ev));
        int r;

        if (!ev)
                return -ENOMEM;
        ev->job.run = eviction_run;
        ev->m = m;
        ev->v = v;
        sbx_strlcpy(ev->for_user, for_user, sizeof(ev->for_user));
        r = session_worker_post(&m->evictor, &ev->job);
        if (r < 0)
                free(ev);
        return r;
}

void session_evictions_stop(struct session_manager *m)
{
        session_worker_stop(&m->evictor); /* it finishes the queued ones first */
}

int session_expire_ttl(struct session_manager *m, int64_t now_wall_ms)
{
        char(*users)[65] = NULL, (*ids)[65] = NULL;
        size_t n = 0;
        int count = 0;

        if (store_session_options_expired(m->store, now_wall_ms, 256, &users, &ids, &n) < 0)
                return -EIO;
        for (size_t i = 0; i < n; i++) {
                struct session *s;
                /* the TTL is spent whatever happens next: a later use starts the session afresh */
                (void)store_session_options_clear_ttl(m->store, users[i], ids[i]);
                if (session_lookup_ref(m, users[i], ids[i], false, &s, NULL) < 0)
                        continue;
                if (stop_one(m, s, false, 0, "ttl_expired")) {
                        log_ctx(LOG_LEVEL_INFO, users[i], ids[i], NULL, "session stopped: its TTL is over");
                        count++;
                }
                session_unref(s);
        }
        free(users);
        free(ids);
        return count;
}

int session_destroy(struct session_manager *m, const char *user, const char *id, bool purge, struct sbx_error *err)
{
        struct session *s;
        struct sbx_error perr = {0};
        char cid[65];
        int r, purged = 0;

        r = session_key_check(user, id, err);
        if (r < 0)
                return r;
        r = session_lookup_ref(m, user, id, false, &s, err);
        if (r == 0 && begin_teardown(s, false, 0, cid) < 0) {
                session_unref(s);
                r = -ENOENT;
        }
        if (r < 0)
                return sbx_error_set(err, -ENOENT, 0, "no such session %s:%s", user, id);
        r = teardown_container(m, user, id, cid, "destroyed", !purge, err);
        if (r < 0) {
                abort_transition(s);
                session_unref(s);
                sbx_error_prefix(err, "removing container %.12s", cid);
                return r;
        }
        session_call_handlers(m, user, id, cid, "destroyed");
        /* The ratchet: the private marks go only once the workspace is
         * verifiably gone. A purge that fails, or a daemon killed during it,
         * leaves the marks (and what is left of the workspace) behind, so
         * the key's next container is made with no network. */
        if (purge) {
                /* the image is unmounted first: a mount point cannot be deleted */
                purged = wsquota_purge(m->cfg, user, id, &perr);
                if (purged == 0)
                        purged = container_workspace_purge(m->cfg, user, id, &perr);
                if (purged == 0) { /* the engine's part of it (Kubernetes: the claim, maybe a pool slot's) */
                        char claim[STORE_CLAIM_MAX];
                        bool own = store_uid_claim_get(m->store, user, id, claim) == 0;
                        purged =
                                engine_workspace_drop(m->engine, m->cfg->instance, user, id, own ? claim : NULL, &perr);
                }
                if (purged < 0)
                        log_ctx(LOG_LEVEL_WARN, user, id, NULL, "%s; private marks kept", perr.msg);
                else
                        release_uid(m, user, id);
        }
        r = store_session_delete(m->store, user, id, purge && purged == 0);
        if (r < 0)
                log_ctx(LOG_LEVEL_ERROR, user, id, NULL, "cannot delete session row: %s", strerror(-r));
        (void)store_session_options_delete(m->store, user, id);
        (void)store_session_secret_drop(m->store, user, id); /* its attached secrets (issue 37) */
        (void)store_egress_narrow_drop(m->store, user, id);  /* its own egress narrowing (issue 36) */
        (void)store_session_spec_delete(m->store, user, id); /* labels and resources */
        pthread_mutex_lock(&m->lock);
        session_unlink_locked(m, s);
        pthread_mutex_unlock(&m->lock);
        pthread_mutex_lock(&s->lock);
        s->transitioning = false;
        s->destroyed = true;
        (void)session_change_locked(s, SESSION_T_DESTROY, SESSION_STOPPED, "destroyed", NULL);
        s->container_id[0] = '\0';
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        session_unref(s);
        if (purged < 0) {
                if (err)
                        *err = perr;
                sbx_error_prefix(err,
                                 "the session is destroyed but its workspace is not (it stays private if it "
                                 "was)");
                return purged;
        }
        return 0;
}
