/* monitor.c — the health monitor threads.
 *
 * Threads: "sbx-events" (blocking in the Docker events stream) and
 * "sbx-monitor" (the periodic poll, the idle pause and the caps on paused
 * sessions (session_pause_idle, session_enforce_paused), idle expiry and the
 * TTLs create_session set, session_expire_ttl()). A paused container is
 * alive (the engine reports it running): the poll watches it like any. Each has its own
 * libcurl handle through the Docker client's per-thread handles.
 * mon->lock guards `stopping` and pairs with mon->wake for the poll sleep;
 * the counters are atomics. No lock is held across a Docker call: the poll
 * works on a copy of the running sessions (session_running()). */
#include "sandboxd/monitor.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sandboxd/container.h"
#include "sandboxd/engine.h"
#include "sandboxd/log.h"
#include "sandboxd/pool.h"
#include "sandboxd/session.h"

struct monitor {
        const struct sbx_config *cfg;
        struct engine *engine;
        struct session_manager *sessions;
        char instance_filter[128];

        pthread_t events_thread, poll_thread;
        bool events_started, poll_started;

        pthread_mutex_t lock;
        pthread_cond_t wake;
        bool stopping;
        volatile bool stop_events; /* polled by engine_events_follow; read and written atomically */

        int64_t last_poll;    /* atomic */
        uint64_t events_seen; /* atomic */
};

/* monitor_stop sets it from another thread. */
static bool events_stopping(struct monitor *mon)
{
        return __atomic_load_n(&mon->stop_events, __ATOMIC_RELAXED);
}

/* Why a container that is not running stopped, from an inspect. */
static void exit_cause(struct monitor *mon, const char *id, char *cause, size_t size)
{
        struct engine_container_info info;

        if (engine_inspect(mon->engine, id, &info, NULL) == -ENOENT)
                snprintf(cause, size, "removed");
        else if (info.running)
                cause[0] = '\0';
        else if (info.oom_killed)
                snprintf(cause, size, "oom_killed");
        else if (info.error[0]) /* the engine's own reason (a microVM: no exit code to give) */
                snprintf(cause, size, "%s", info.error);
        else
                snprintf(cause, size, "exited with code %d", info.exit_code);
}

static int on_event(const struct engine_event *ev, void *ud)
{
        struct monitor *mon = ud;
        const char *user = engine_label_get(ev->labels, ev->n_labels, CONTAINER_LABEL_USER);
        const char *session = engine_label_get(ev->labels, ev->n_labels, CONTAINER_LABEL_SESSION);
        char cause[128] = "";

        __atomic_add_fetch(&mon->events_seen, 1, __ATOMIC_RELAXED);
        if (!user || !session || strcmp(ev->type, "container") != 0)
                return events_stopping(mon);
        char owner_user[SESSION_KEY_MAX + 1], owner_session[SESSION_KEY_MAX + 1];
        if (strcmp(user, POOL_USER) == 0) {
                /* a warm pool container: its labels name the slot; once claimed, a session owns it */
                if (session_find_container(mon->sessions, ev->id, owner_user, owner_session) < 0)
                        return events_stopping(mon);
                user = owner_user;
                session = owner_session;
        }

        if (strcmp(ev->action, "die") == 0 && ev->exit_code >= 0) {
                /* Mark at once from the event's own exit code: an inspect now would
                 * wait for Docker to finish tearing the container down (hundreds of
                 * ms with published ports). The inspect below only refines it (OOM). */
                snprintf(cause, sizeof(cause), "exited with code %d", ev->exit_code);
                if (session_mark_failed(mon->sessions, user, session, ev->id, cause))
                        log_ctx(LOG_LEVEL_WARN, user, session, ev->id, "container failure detected (event die): %s",
                                cause);
        }
        if (strcmp(ev->action, "die") == 0 || strcmp(ev->action, "oom") == 0) {
                exit_cause(mon, ev->id, cause, sizeof(cause));
                if (!cause[0]) {
                        /* An OOM kill of one process inside a container that still runs (or a
                         * die event raced by a recreation): the execution that hit an OOM
                         * reports it; the session stays healthy. */
                        if (strcmp(ev->action, "oom") == 0) {
                                session_note_oom(mon->sessions, user, session, ev->id);
                                log_ctx(LOG_LEVEL_WARN, user, session, ev->id, "OOM kill inside the container");
                        }
                        return events_stopping(mon);
                }
        } else if (strcmp(ev->action, "stop") == 0) {
                snprintf(cause, sizeof(cause), "stopped");
        } else if (strcmp(ev->action, "destroy") == 0) {
                snprintf(cause, sizeof(cause), "removed");
        } else if (strcmp(ev->action, "lost") == 0 && ev->cause[0]) {
                /* its node is lost (Kubernetes): the container may run on, unreachable */
                snprintf(cause, sizeof(cause), "%s", ev->cause);
        } else {
                return events_stopping(mon);
        }
        if (session_mark_failed(mon->sessions, user, session, ev->id, cause))
                log_ctx(LOG_LEVEL_WARN, user, session, ev->id, "container failure detected (event %s): %s", ev->action,
                        cause);
        return events_stopping(mon);
}

static void *events_main(void *ud)
{
        struct monitor *mon = ud;
        const char *filters[] = {CONTAINER_LABEL_MANAGED "=1", mon->instance_filter, NULL};
        const char *actions[] = {"die", "oom", "stop", "destroy", "lost", NULL};

        pthread_setname_np(pthread_self(), "sbx-events");
        while (!events_stopping(mon)) {
                struct sbx_error err = {0};
                int r = engine_events_follow(mon->engine, filters, actions, on_event, mon, &mon->stop_events, 0, &err);
                if (r < 0 && !events_stopping(mon)) {
                        log_warn("events stream ended: %s; the periodic poll covers the gap", err.msg);
                        sbx_sleep_ms(1000);
                }
        }
        return NULL;
}

static void poll_once(struct monitor *mon)
{
        const char *filters[] = {CONTAINER_LABEL_MANAGED "=1", mon->instance_filter, NULL};
        struct engine_container_summary *list = NULL;
        struct session_ref *running = NULL;
        size_t n = 0, n_running = 0;
        struct sbx_error err = {0};

        if (engine_list(mon->engine, filters, true, &list, &n, &err) < 0) {
                log_warn("monitor poll: cannot list containers: %s", err.msg);
                goto expire;
        }
        if (session_running(mon->sessions, &running, &n_running) < 0)
                goto expire;
        for (size_t i = 0; i < n_running; i++) {
                const struct engine_container_summary *c = NULL;
                char cause[96] = "";

                for (size_t j = 0; j < n && !c; j++)
                        if (strcmp(list[j].id, running[i].container_id) == 0)
                                c = &list[j];
                if (!c)
                        snprintf(cause, sizeof(cause), "removed");
                else if (strcmp(c->state, "running") != 0 && strcmp(c->state, "paused") != 0) /* frozen is alive */
                        exit_cause(mon, c->id, cause, sizeof(cause));
                if (cause[0] && session_mark_failed(mon->sessions, running[i].user, running[i].session,
                                                    running[i].container_id, cause))
                        log_ctx(LOG_LEVEL_WARN, running[i].user, running[i].session, running[i].container_id,
                                "container failure detected (poll): %s", cause);
        }
        __atomic_store_n(&mon->last_poll, sbx_wall_ms(), __ATOMIC_RELAXED);
expire:
        free(list);
        free(running);
        /* pause before stop: a session unused for pause_after is frozen, and
         * idle_timeout (from the same last use) stops it, paused or not */
        (void)session_pause_idle(mon->sessions, sbx_wall_ms());
        (void)session_enforce_paused(mon->sessions);
        (void)session_expire_idle(mon->sessions, sbx_wall_ms());
        (void)session_expire_ttl(mon->sessions, sbx_wall_ms());
}

static void *poll_main(void *ud)
{
        struct monitor *mon = ud;

        pthread_setname_np(pthread_self(), "sbx-monitor");
        pthread_mutex_lock(&mon->lock);
        while (!mon->stopping) {
                struct timespec until;

                pthread_mutex_unlock(&mon->lock);
                poll_once(mon);
                pthread_mutex_lock(&mon->lock);
                until = sbx_deadline_after(CLOCK_MONOTONIC, mon->cfg->monitor_interval_ms);
                while (!mon->stopping && pthread_cond_timedwait(&mon->wake, &mon->lock, &until) != ETIMEDOUT)
                        ;
        }
        pthread_mutex_unlock(&mon->lock);
        return NULL;
}

int monitor_start(const struct sbx_config *cfg, struct engine *d, struct session_manager *m, struct monitor **ret,
                  struct sbx_error *err)
{
        struct monitor *mon = calloc(1, sizeof(*mon));
        pthread_condattr_t ca;
        int r;

        if (!mon)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        mon->cfg = cfg;
        mon->engine = d;
        mon->sessions = m;
        snprintf(mon->instance_filter, sizeof(mon->instance_filter), CONTAINER_LABEL_INSTANCE "=%s", cfg->instance);
        pthread_mutex_init(&mon->lock, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&mon->wake, &ca);
        pthread_condattr_destroy(&ca);

        r = -pthread_create(&mon->events_thread, NULL, events_main, mon);
        if (r == 0) {
                mon->events_started = true;
                r = -pthread_create(&mon->poll_thread, NULL, poll_main, mon);
                mon->poll_started = r == 0;
        }
        if (r < 0) {
                monitor_stop(mon);
                return sbx_error_set(err, r, 0, "cannot start the monitor threads: %s", strerror(-r));
        }
        *ret = mon;
        return 0;
}

void monitor_stop(struct monitor *mon)
{
        if (!mon)
                return;
        pthread_mutex_lock(&mon->lock);
        mon->stopping = true;
        __atomic_store_n(&mon->stop_events, true, __ATOMIC_SEQ_CST);
        pthread_cond_broadcast(&mon->wake);
        pthread_mutex_unlock(&mon->lock);
        if (mon->poll_started)
                pthread_join(mon->poll_thread, NULL);
        if (mon->events_started)
                pthread_join(mon->events_thread, NULL);
        pthread_mutex_destroy(&mon->lock);
        pthread_cond_destroy(&mon->wake);
        free(mon);
}

int64_t monitor_last_poll(struct monitor *mon)
{
        return __atomic_load_n(&mon->last_poll, __ATOMIC_RELAXED);
}

uint64_t monitor_events_seen(struct monitor *mon)
{
        return __atomic_load_n(&mon->events_seen, __ATOMIC_RELAXED);
}
