/* session_acquire.c — how a request gets a running session: it acquires
 * and waits; session_drive_locked makes the one transition the session
 * needs next, and the request looks again. Every request that needs the
 * session's container comes through here (executions, cells, files,
 * services, snapshots, the fronts' session methods).
 *
 *   session_acquire(user, id)
 *     loop, under s->lock:
 *       wait while another thread is between two states (s->transitioning)
 *       destroyed meanwhile               -> -ENOENT, nothing made again
 *       RUNNING and its container good    -> served: a reference (active_ops)
 *       else drive one step (session_drive_locked), then look again:
 *         PAUSED                          resume           (session_pause.c)
 *         RUNNING, its container failed   fail, then recreated on the next turn
 *         RUNNING, the ratchet's cause    replaced at once (create)
 *         not live                        admit (the caps; the fair share
 *                                         stops another user's session on
 *                                         the sbx-evict thread, never here)
 *         then                            create -> created | create_failed:
 *                                         the warm pool's container, or a new one
 *
 * "Good" is a live runner (its heartbeats vouch for its container) or, when
 * the network must be checked on the container itself, an inspect
 * (container_validate). Only the thread that set s->transitioning does
 * engine work, with no lock held; the transitions go through
 * session_change_locked (session_state.c has the table).
 *
 * Locks: as session.c. Each step below is entered and left with s->lock
 * held, so the loop reads as the table does. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sandboxd/audit.h"
#include "sandboxd/container.h"
#include "sandboxd/engine.h"
#include "sandboxd/gateway.h"
#include "sandboxd/log.h"
#include "sandboxd/portpool.h"
#include "sandboxd/hub.h"
#include "sandboxd/store.h"

#include "session_internal.h"

/* The audit record of a FULL → NONE transition: old and new container. */
static void audit_ratchet(struct session_manager *m, const char *user, const char *id, const char *old_id,
                          const char *new_id)
{
        char detail[256];
        snprintf(detail, sizeof(detail),
                 "{\"old_container\":\"%s\",\"new_container\":\"%s\",\"network_mode\":\"none\"}", old_id,
                 new_id ? new_id : "");
        (void)audit_record(m->store, "daemon", user, id, "privacy.ratchet", detail);
}

static void touch_locked(struct session *s)
{
        s->last_activity = sbx_wall_ms();
        (void)store_session_touch(s->mgr->store, s->user, s->id, s->last_activity);
}

/* Ports and egress of a claimed pool container, bound now that it is the
 * session's (a slot is served nothing while in the pool): the session's
 * port block and the gateway's listeners, fwd.sock and egress.sock in its
 * (re-keyed) runner directory. Pool containers are never private ones
 * (try_pool). -errno: the caller replaces the container on the cold path. */
static int bind_claimed(struct session *s, const char *network, const char *id)
{
        struct session_manager *m = s->mgr;
        const struct sbx_config *cfg = m->cfg;
        _cleanup_free_ int *ports = NULL;
        char runner_dir[SBX_PATH_MAX];
        bool sealed = strcmp(network, "none") == 0, have_runner;
        struct sbx_error e = {0};
        int r;

        have_runner = hub_binary(m->runner) && hub_prepare(m->runner, s->user, s->id, runner_dir, &e) == 0;
        for (int attempt = 0;; attempt++) {
                if (cfg->ports_per_session > 0 && have_runner) {
                        if (!ports)
                                ports = calloc((size_t)cfg->ports_per_session, sizeof(int));
                        if (!ports)
                                return -ENOMEM;
                        r = portpool_reserve_block(m->ports, s->user, s->id, ports, &e);
                        if (r < 0)
                                break;
                }
                size_t n = ports ? (size_t)cfg->ports_per_session : 0;
                r = gateway_open(m->gateway, s->user, s->id, have_runner ? runner_dir : NULL, ports, n,
                                 sealed && have_runner, &e);
                if (r == -EADDRINUSE && attempt < 2) {
                        (void)portpool_release(m->ports, s->user, s->id);
                        continue;
                }
                break;
        }
        if (r < 0) {
                log_ctx(LOG_LEVEL_WARN, s->user, s->id, id, "pool: cannot serve the claimed container, cold path: %s",
                        e.msg);
                (void)portpool_release(m->ports, s->user, s->id);
                gateway_drop(m->gateway, s->user, s->id);
                return r;
        }
        if (ports)
                (void)portpool_set_container(m->ports, s->user, s->id, id);
        return 0;
}

/* The warm path (pool.h): a new session of the default runtime, not
 * private, with no workspace content, takes a pool container of its image.
 * 0 with the claimed container; otherwise the caller takes the cold path. */
static int try_pool(struct session *s, const char *network, char ret_id[65], char ret_image[256],
                    char ret_workspace[SBX_PATH_MAX], char ret_runtime[16])
{
        struct session_manager *m = s->mgr;
        struct store_session_options o = {0};
        struct session_warm_claim c = {0};
        struct sbx_error e = {0};
        char image[256];
        int r;

        if (!m->pool_ops)
                return -ENOENT;
        pthread_mutex_lock(&m->lock);
        bool runtime_policy = m->runtime_fn != NULL;
        session_runtime_fn fn = m->runtime_fn;
        void *ud = m->runtime_ud;
        pthread_mutex_unlock(&m->lock);
        ret_runtime[0] = '\0';
        if (runtime_policy &&
            (fn(s->user, ret_runtime, &e, ud) < 0 || (ret_runtime[0] && strcmp(ret_runtime, "runc") != 0)))
                return -ENOENT; /* runsc, or a runtime that refuses: the cold path says why */
        sbx_strlcpy(image, m->cfg->image, sizeof(image));
        if (store_session_options_get(m->store, s->user, s->id, &o) == 0 && o.image[0])
                sbx_strlcpy(image, o.image, sizeof(image));
        store_session_options_done(&o);
        {
                /* a warm container has the config's limits and workspace size: a session that
                 * asked for its own gets one made for it (its labels alone do not matter) */
                struct store_session_spec spec = {0};
                bool own = store_session_spec_get(m->store, s->user, s->id, &spec) == 0 &&
                           (spec.nano_cpus || spec.memory || spec.disk);
                store_session_spec_done(&spec);
                if (own)
                        return -ENOENT;
        }
        if (gateway_is_private(m->gateway, s->user, s->id) || !m->pool_ops->applies(m->pool, s->user, s->id, network))
                return -ENOENT;
        if (m->pool_ops->claim(m->pool, s->user, s->id, network, image, &c, &e) < 0)
                return -ENOENT;
        memcpy(ret_id, c.container_id, 65);
        /* marked private since: the claimed container is replaced before anything serves it */
        r = gateway_is_private(m->gateway, s->user, s->id) ? -EPERM : bind_claimed(s, network, ret_id);
        if (r < 0)
                return r; /* ret_id is the claimed container: the cold path replaces it */
        sbx_strlcpy(ret_image, c.image, 256);
        sbx_strlcpy(ret_workspace, c.workspace, SBX_PATH_MAX);
        sbx_strlcpy(ret_runtime, "runc", 16);
        return 0;
}

/* A key whose first admission was refused: out of the table again, unless
 * it has a store row or someone else holds it too (its refs are the
 * table's and ours), so a busy answer leaves no session behind. */
static void forget_unused(struct session_manager *m, struct session *s)
{
        pthread_mutex_lock(&m->lock);
        if (s->refs == 2) {
                pthread_mutex_lock(&s->lock);
                if (!s->persisted && !s->destroyed && !session_live_locked(s)) {
                        s->destroyed = true;
                        session_unlink_locked(m, s);
                }
                pthread_mutex_unlock(&s->lock);
        }
        pthread_mutex_unlock(&m->lock);
}

/* What a look at a RUNNING session found. */
enum live_check {
        LIVE_SERVED,  /* good: a reference taken, s touched */
        LIVE_AGAIN,   /* another thread acted on it meanwhile, or it failed now: look again */
        LIVE_REPLACE, /* the ratchet: replace its container at once (cause set) */
};

/* s RUNNING with a container: is it still good? With s->lock held; dropped
 * during the check. -errno: the check itself failed (err says why). */
static int check_live_locked(struct session *s, char *cause, size_t cause_size, bool *notified, struct sbx_error *err)
{
        struct session_manager *m = s->mgr;
        /* made with no network by this daemon (nothing here ever attaches one later) */
        bool sealed = strcmp(s->network_mode, "none") == 0;
        char old_id[65], runtime[16];
        const char *network;
        int r;

        memcpy(old_id, s->container_id, sizeof(old_id));
        s->active_ops++;
        s->uses++;
        pthread_mutex_unlock(&s->lock);
        /* The container may have died, vanished, or now need a network it must not have. */
        network = session_required_network(m, s->user, s->id);
        /* A live runner (heartbeats; its death closes the socket at once) vouches
         * for its container, so the exec path needs no inspect. A session that
         * must have no network is still inspected when its container was made
         * with one (the ratchet is checked on the container itself); one made
         * sealed needs no inspect per use (issue 34: it was 1-2 ms of every
         * warm cell and exec). Not on an engine that never attaches a network
         * of its own (Kubernetes: every Pod is made sealed, has_network is never
         * set), where there is nothing to check and the inspect is a request to
         * the API server, twice per exec. */
        if ((strcmp(network, "none") != 0 || sealed || !engine_can(m->engine, ENGINE_CAP_ISOLATED_NETWORK)) &&
            hub_wait(m->runner, s->user, s->id, 0)) {
                r = 0;
                /* never a runner under runsc; a VM's id says it is one */
                sbx_strlcpy(runtime, engine_microvm_id(old_id) ? "microvm" : "runc", sizeof(runtime));
        } else {
                r = container_validate(m->engine, old_id, network, cause, cause_size, runtime, err);
        }
        pthread_mutex_lock(&s->lock);
        if (r == 0) {
                if (strcmp(s->container_id, old_id) == 0) /* adopted ones learn it here */
                        sbx_strlcpy(s->runtime, runtime, sizeof(s->runtime));
                touch_locked(s);
                return LIVE_SERVED;
        }
        s->active_ops--;
        if (r < 0) {
                sbx_error_prefix(err, "checking the session's container");
                return r;
        }
        if (s->transitioning || strcmp(s->container_id, old_id) != 0)
                return LIVE_AGAIN; /* someone else already acted on it */
        if (s->state == SESSION_RUNNING && strcmp(cause, "privacy_ratchet") != 0) {
                char msg[256];
                snprintf(msg, sizeof(msg), "container %.12s failed: %s", old_id, cause);
                (void)session_change_locked(s, SESSION_T_FAIL, SESSION_ERROR, cause, msg);
                pthread_mutex_unlock(&s->lock);
                session_call_handlers(m, s->user, s->id, old_id, cause);
                pthread_mutex_lock(&s->lock);
                *notified = true;
                return LIVE_AGAIN;
        }
        return LIVE_REPLACE;
}

/* A session that is not live counts against the caps again from here on:
 * admitted under m->lock together with the mark, so two threads cannot both
 * take the last slot; the fair share may make room by stopping another's
 * session (on the sbx-evict thread). With s->lock held. >0: look again
 * (someone else got there first, or it was destroyed); 0: admitted;
 * -errno: refused (err says why). */
static int admit_locked(struct session *s, struct sbx_error *err)
{
        struct session_manager *m = s->mgr;
        struct session *victim = NULL;
        int r;

        if (session_live_locked(s))
                return 0;
        r = session_admit(m, s, &victim, err);
        if (r == 0 && victim && session_evict_async(m, victim, s->user) < 0) {
                /* no evictor (the daemon is closing): on this thread, as
                 * s is marked: others wait, and it already counts */
                pthread_mutex_unlock(&s->lock);
                r = session_evict(m, victim, s->user, err);
                session_unref(victim);
                pthread_mutex_lock(&s->lock);
                if (r < 0) {
                        s->transitioning = false;
                        pthread_cond_broadcast(&s->cond);
                }
        }
        return r;
}

/* create, then created or create_failed: the session's container, from the
 * warm pool or made now, replacing the old one (cause says why, and the
 * failure handlers hear of it unless they already did). With s->lock held,
 * admitted; only this thread does it, the others wait on s->cond. 0: RUNNING
 * with a reference taken. */
static int drive_create_locked(struct session *s, const char *why, bool notified, struct sbx_error *err)
{
        struct session_manager *m = s->mgr;
        char old_id[65], new_id[65], image[256], workspace[SBX_PATH_MAX], cause[128], runtime[16];
        const char *network;
        bool pooled = false; /* published under s->lock below: snapshots read it there */
        int r = 0;

        s->transitioning = true;
        memcpy(old_id, s->container_id, sizeof(old_id));
        snprintf(cause, sizeof(cause), "%s", why[0] ? why : s->state == SESSION_ERROR ? "recreated" : "");
        (void)session_change_locked(s, SESSION_T_CREATE, SESSION_CREATING, NULL, NULL);
        pthread_mutex_unlock(&s->lock);

        network = session_required_network(m, s->user, s->id);
        if (old_id[0] && cause[0] && !notified)
                session_call_handlers(m, s->user, s->id, old_id, cause);
        new_id[0] = '\0';
        if (!old_id[0] && try_pool(s, network, new_id, image, workspace, runtime) == 0)
                pooled = true;
        else {
                if (new_id[0]) /* claimed but not servable: replaced like a failed container */
                        memcpy(old_id, new_id, sizeof(old_id));
                if (m->pool_ops) /* slots count against limits.sessions */
                        m->pool_ops->make_room(m->pool);
                r = session_make_container(s, old_id, &network, new_id, image, workspace, runtime, err);
        }

        pthread_mutex_lock(&s->lock);
        s->transitioning = false;
        s->pooled = pooled;
        if (r < 0) {
                s->container_id[0] = '\0';
                (void)session_change_locked(s, SESSION_T_CREATE_FAILED, SESSION_ERROR, "create_failed",
                                            err ? err->msg : "creation failed");
                pthread_cond_broadcast(&s->cond);
                return r;
        }
        memcpy(s->container_id, new_id, sizeof(s->container_id));
        s->oom_events = 0;
        sbx_strlcpy(s->image, image, sizeof(s->image));
        sbx_strlcpy(s->network_mode, network, sizeof(s->network_mode));
        /* what Docker fills in when none is named: its default, runc */
        sbx_strlcpy(s->runtime, runtime[0] ? runtime : "runc", sizeof(s->runtime));
        sbx_strlcpy(s->workspace, workspace, sizeof(s->workspace));
        s->last_error[0] = '\0';
        s->error_cause[0] = '\0';
        if (old_id[0] && strcmp(cause, "privacy_ratchet") == 0)
                memcpy(s->ratchet_from, old_id, sizeof(s->ratchet_from));
        if (s->ratchet_from[0]) {
                audit_ratchet(m, s->user, s->id, s->ratchet_from, new_id);
                s->ratchet_from[0] = '\0';
        }
        s->active_ops++;
        s->uses++;
        s->last_activity = sbx_wall_ms();
        (void)session_change_locked(s, SESSION_T_CREATED, SESSION_RUNNING, NULL, NULL);
        pthread_cond_broadcast(&s->cond);
        return 0;
}

int session_acquire(struct session_manager *m, const char *user, const char *id, struct session **ret,
                    struct sbx_error *err)
{
        struct session *s;
        char cause[128];
        bool notified = false;
        int r;

        r = session_key_check(user, id, err);
        if (r < 0)
                return r;
        r = session_lookup_ref(m, user, id, true, &s, err);
        if (r < 0)
                return r;

        pthread_mutex_lock(&s->lock);
        for (;;) {
                while (s->transitioning)
                        pthread_cond_wait(&s->cond, &s->lock);
                if (s->destroyed) {
                        /* Destroyed while this request waited: making a container now
                         * would bring back a session that is gone, with whatever network
                         * a dropped mark would allow. The caller may ask again. */
                        pthread_mutex_unlock(&s->lock);
                        session_unref(s);
                        return sbx_error_set(err, -ENOENT, 0, "session %s:%s was destroyed while this request waited",
                                             user, id);
                }
                cause[0] = '\0';
                /* A paused session is thawed first, transparently: then it is
                 * checked like any running one. */
                if (s->state == SESSION_PAUSED && s->container_id[0]) {
                        r = session_resume_locked(s, "request");
                        if (r < 0 && s->state == SESSION_PAUSED && !s->transitioning) {
                                pthread_mutex_unlock(&s->lock);
                                session_unref(s);
                                return sbx_error_set(err, r, 0, "cannot resume the paused session %s:%s: %s", user, id,
                                                     strerror(-r));
                        }
                        continue;
                }
                if (s->state == SESSION_RUNNING && s->container_id[0]) {
                        r = check_live_locked(s, cause, sizeof(cause), &notified, err);
                        if (r == LIVE_SERVED) {
                                pthread_mutex_unlock(&s->lock);
                                *ret = s;
                                return 0;
                        }
                        if (r < 0) {
                                pthread_mutex_unlock(&s->lock);
                                session_unref(s);
                                return r;
                        }
                        if (r == LIVE_AGAIN)
                                continue;
                }
                r = admit_locked(s, err);
                if (r > 0)
                        continue;
                if (r < 0) {
                        pthread_mutex_unlock(&s->lock);
                        forget_unused(m, s);
                        session_unref(s);
                        return r;
                }
                r = drive_create_locked(s, cause, notified, err);
                pthread_mutex_unlock(&s->lock);
                if (r < 0) {
                        log_ctx(LOG_LEVEL_WARN, user, id, NULL, "cannot create container: %s",
                                err ? err->msg : strerror(-r));
                        session_unref(s);
                        return r;
                }
                *ret = s;
                return 0;
        }
}
