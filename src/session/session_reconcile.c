/* session_reconcile.c — after a restart: adopt the containers of this
 * instance that still run (a paused one as PAUSED: frozen is not dead), mark the rest ERROR, remove the containers no
 * session (and no pool slot) holds, apply the privacy ratchet to adopted
 * containers, and release the ports and unmount the workspace images no
 * container holds. Runs once, before the fronts and the monitor start.
 *
 * Locks: each session's lock only for short reads and state changes; Docker
 * calls with no lock held (session_internal.h). */
#include "session_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sandboxd/container.h"
#include "sandboxd/engine.h"
#include "sandboxd/log.h"
#include "sandboxd/portpool.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"
#include "sandboxd/wsquota.h"

static bool live_container(struct session *s)
{
        bool r;
        pthread_mutex_lock(&s->lock);
        r = s->container_id[0] != '\0';
        pthread_mutex_unlock(&s->lock);
        return r;
}

/* Does the session hold a container (or is it getting one)? Its ports and
 * its mounted workspace stay. */
static bool keep_port_owner(const char *user, const char *id, void *ud)
{
        struct session_manager *m = ud;
        struct session *s;
        bool keep = false;

        if (strcmp(user, CONTAINER_POOL_USER) == 0) { /* a warm pool slot's (loop: its mounted image) */
                struct store_pool_slot row;
                return store_pool_get(m->store, id, &row) == 0;
        }
        if (session_lookup_ref(m, user, id, false, &s, NULL) < 0)
                return false;
        pthread_mutex_lock(&s->lock);
        keep = s->container_id[0] != '\0' || s->transitioning;
        pthread_mutex_unlock(&s->lock);
        session_unref(s);
        return keep;
}

int session_reconcile(struct session_manager *m, struct session_reconcile_report *ret, struct sbx_error *err)
{
        char filter[128];
        const char *filters[3] = {CONTAINER_LABEL_MANAGED "=1", filter, NULL};
        struct engine_container_summary *list = NULL;
        struct session_reconcile_report rep = {0};
        struct session **all;
        size_t n = 0, n_all;
        int r;

        snprintf(filter, sizeof(filter), CONTAINER_LABEL_INSTANCE "=%s", m->cfg->instance);
        r = engine_list(m->engine, filters, true, &list, &n, err);
        if (r < 0) {
                sbx_error_prefix(err, "listing containers of instance %s", m->cfg->instance);
                return r;
        }
        r = session_all_refs(m, &all, &n_all);
        if (r < 0) {
                free(list);
                return r;
        }
        /* microVM cgroups that a crash left without their VM (engine_qemu.h) */
        (void)engine_microvm_gc(m->engine, &(struct engine_microvm_gc){.dry_run = false});

        /* Sessions: adopt their container if it runs, else mark ERROR. */
        for (size_t i = 0; i < n_all; i++) {
                struct session *s = all[i];
                const struct engine_container_summary *c = NULL;
                char cause[96] = "", msg[256];
                bool failed = false;

                pthread_mutex_lock(&s->lock);
                for (size_t j = 0; s->container_id[0] && j < n; j++)
                        if (strcmp(list[j].id, s->container_id) == 0)
                                c = &list[j];
                /* a paused (frozen) container is alive: adopted as PAUSED, whatever the row says */
                bool frozen = c && strcmp(c->state, "paused") == 0;
                bool alive = c && (strcmp(c->state, "running") == 0 || frozen);
                if (alive && sessuid_lookup(m->store, s->user, s->id, &(uid_t){0}) == -ENOENT) {
                        /* Made before per-session uids (it runs as the image's uid 1000, shared by every
                         * such container): it goes as an orphan below, and the next request makes one
                         * under the session's own uid. */
                        snprintf(cause, sizeof(cause), "uid_per_session");
                        snprintf(msg, sizeof(msg), "container %.12s ran under a uid shared with other sessions",
                                 s->container_id);
                        s->container_id[0] = '\0';
                        (void)session_change_locked(s, SESSION_T_LOST, SESSION_ERROR, cause, msg);
                        rep.marked_error++;
                        failed = true;
                } else if (frozen) {
                        /* paused before the restart (or the daemon died between the freeze and
                         * its row): it stays paused until a request resumes it */
                        if (s->state != SESSION_PAUSED) {
                                if (!s->paused_at)
                                        s->paused_at = sbx_wall_ms();
                                (void)session_change_locked(s, SESSION_T_ADOPT, SESSION_PAUSED, "reconciled", NULL);
                        }
                        rep.adopted++;
                        rep.paused++;
                } else if (alive) {
                        if (s->state != SESSION_RUNNING) {
                                s->paused_at = 0; /* a PAUSED row whose thaw the daemon did not record */
                                (void)session_change_locked(s, SESSION_T_ADOPT, SESSION_RUNNING, NULL, NULL);
                        }
                        rep.adopted++;
                } else if (s->state == SESSION_RUNNING || s->state == SESSION_CREATING || s->state == SESSION_PAUSED) {
                        if (!c)
                                s->container_id[0] = '\0'; /* gone: nothing holds its ports any more */
                        snprintf(cause, sizeof(cause), "%s", c ? "exited while the daemon was down" : "removed");
                        snprintf(msg, sizeof(msg), "container %.12s %s", s->container_id[0] ? s->container_id : "-",
                                 c ? "was not running after a daemon restart" : "was missing after a daemon restart");
                        (void)session_change_locked(s, SESSION_T_LOST, SESSION_ERROR, cause, msg);
                        rep.marked_error++;
                        failed = true;
                }
                pthread_mutex_unlock(&s->lock);
                if (failed)
                        session_call_handlers(m, s->user, s->id, c ? c->id : "", cause);
        }

        /* Containers of this instance that belong to no session: remove. */
        for (size_t j = 0; j < n; j++) {
                bool owned = false;
                for (size_t i = 0; i < n_all && !owned; i++) {
                        pthread_mutex_lock(&all[i]->lock);
                        owned = strcmp(all[i]->container_id, list[j].id) == 0;
                        pthread_mutex_unlock(&all[i]->lock);
                }
                if (owned)
                        continue;
                const char *slot = engine_label_get(list[j].labels, list[j].n_labels, CONTAINER_LABEL_SESSION);
                struct store_pool_slot prow;
                if (engine_label_get(list[j].labels, list[j].n_labels, CONTAINER_LABEL_POOL) && slot &&
                    store_pool_get(m->store, slot, &prow) == 0)
                        continue; /* a pool slot's (pool_reconcile) */
                if (container_remove(m->engine, list[j].id, NULL) == 0) {
                        (void)store_container_removed(m->store, list[j].id, "orphan", sbx_wall_ms());
                        rep.removed_orphans++;
                        log_ctx(LOG_LEVEL_INFO,
                                engine_label_get(list[j].labels, list[j].n_labels, CONTAINER_LABEL_USER),
                                engine_label_get(list[j].labels, list[j].n_labels, CONTAINER_LABEL_SESSION), list[j].id,
                                "removed orphan container");
                }
        }
        /* The ratchet across a restart: a mark may have been recorded just
         * before the daemon died, with the networked container still there.
         * Every adopted container of a session that now requires "none" is
         * inspected and, if it has a network, removed before any front or
         * the monitor starts. */
        for (size_t i = 0; i < n_all; i++) {
                struct session *s = all[i];
                struct sbx_error e = {0};
                bool adopted;

                pthread_mutex_lock(&s->lock);
                adopted = (s->state == SESSION_RUNNING || s->state == SESSION_PAUSED) && s->container_id[0];
                pthread_mutex_unlock(&s->lock);
                if (!adopted || strcmp(session_required_network(m, s->user, s->id), "none") != 0)
                        continue;
                if (session_enforce_network(m, s->user, s->id, &e) < 0)
                        /* every request still inspects the container and recreates it
                         * without a network before using it */
                        log_ctx(LOG_LEVEL_WARN, s->user, s->id, NULL, "reconcile: %s", e.msg);
                else if (!live_container(s))
                        rep.ratchet_removed++;
        }
        session_refs_free(all, n_all);
        free(list);

        r = portpool_release_unheld(m->ports, keep_port_owner, m);
        if (r > 0)
                rep.ports_released = (size_t)r;
        /* workspace images mounted for containers that are gone (the daemon
         * died between removing one and unmounting) */
        r = wsquota_sweep(m->cfg, keep_port_owner, m);
        if (r > 0)
                log_info("reconciled: %d workspace image(s) of sessions without a container unmounted", r);
        if (ret)
                *ret = rep;
        log_info(
                "reconciled: %zu adopted (%zu paused), %zu marked ERROR, %zu orphans removed, %zu ports released, "
                "%zu networked containers of private sessions removed",
                rep.adopted, rep.paused, rep.marked_error, rep.removed_orphans, rep.ports_released,
                rep.ratchet_removed);
        return 0;
}
