/* session_info.c — snapshots of sessions: one (session_get_info), a
 * filtered list (session_list), the counts per state and the running
 * containers (session_running). Each session is copied under its own lock
 * from a list of references, so no table lock is held while one is read
 * (session_internal.h has the lock rules). */
#include "session_internal.h"

#include <errno.h>
#include <string.h>

#include "sandboxd/engine.h"
#include "sandboxd/portpool.h"
#include "sandboxd/sessuid.h"

static void snapshot_locked(struct session *s, struct session_info *info)
{
        memset(info, 0, sizeof(*info));
        info->pooled = s->pooled;
        sbx_strlcpy(info->user, s->user, sizeof(info->user));
        sbx_strlcpy(info->session, s->id, sizeof(info->session));
        info->state = s->state;
        sbx_strlcpy(info->container_id, s->container_id, sizeof(info->container_id));
        sbx_strlcpy(info->image, s->image, sizeof(info->image));
        sbx_strlcpy(info->network_mode, s->network_mode, sizeof(info->network_mode));
        sbx_strlcpy(info->runtime, s->runtime, sizeof(info->runtime));
        if (strcmp(s->runtime, "microvm") == 0 && engine_microvm_accel(s->mgr->engine))
                sbx_strlcpy(info->accel, engine_microvm_accel(s->mgr->engine), sizeof(info->accel));
        sbx_strlcpy(info->workspace, s->workspace, sizeof(info->workspace));
        sbx_strlcpy(info->last_error, s->last_error, sizeof(info->last_error));
        sbx_strlcpy(info->error_cause, s->error_cause, sizeof(info->error_cause));
        info->created_at = s->created_at;
        info->last_activity = s->last_activity;
        info->paused_at = s->state == SESSION_PAUSED ? s->paused_at : 0;
}

static void fill_ports(struct session_manager *m, struct session_info *info)
{
        int n = portpool_per_session(m->ports);

        if (sessuid_lookup(m->store, info->user, info->session, &info->uid) < 0)
                info->uid = 0;
        if (n <= 0)
                return;
        info->ports = calloc((size_t)n, sizeof(int));
        if (info->ports && portpool_lookup(m->ports, info->user, info->session, info->ports) == 0)
                info->n_ports = (size_t)n;
}

void session_info_done(struct session_info *info)
{
        if (!info)
                return;
        free(info->ports);
        info->ports = NULL;
        info->n_ports = 0;
}

int session_get_info(struct session_manager *m, const char *user, const char *id, struct session_info *ret)
{
        struct session *s;
        int r = session_lookup_ref(m, user, id, false, &s, NULL);
        if (r < 0)
                return r;
        pthread_mutex_lock(&s->lock);
        snapshot_locked(s, ret);
        pthread_mutex_unlock(&s->lock);
        session_unref(s);
        fill_ports(m, ret);
        if (ret->accel[0] && engine_microvm_id(ret->container_id)) /* read outside the session's lock */
                (void)engine_microvm_rootfs_note(m->engine, ret->container_id, ret->rootfs_note,
                                                 sizeof(ret->rootfs_note));
        return 0;
}

/* Copy out every session that `take` accepts, each under its own lock, into
 * a malloc'd array of elem-sized slots; no table lock is held meanwhile. */
static int collect(struct session_manager *m, bool (*take)(struct session *s, void *slot, void *ud), void *ud,
                   size_t elem, void **ret, size_t *ret_n)
{
        struct session **all;
        char *out;
        size_t n, k = 0;
        int r = session_all_refs(m, &all, &n);

        if (r < 0)
                return r;
        out = calloc(n + 1, elem);
        if (!out) {
                session_refs_free(all, n);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                pthread_mutex_lock(&all[i]->lock);
                if (take(all[i], out + k * elem, ud))
                        k++;
                pthread_mutex_unlock(&all[i]->lock);
        }
        session_refs_free(all, n);
        *ret = out;
        *ret_n = k;
        return 0;
}

struct list_filter {
        const char *user;
        const enum session_state *state;
};

static bool take_info(struct session *s, void *slot, void *ud)
{
        const struct list_filter *f = ud;
        if ((f->user && strcmp(f->user, s->user) != 0) || (f->state && *f->state != s->state))
                return false;
        snapshot_locked(s, slot);
        return true;
}

int session_list(struct session_manager *m, const char *user, const enum session_state *state,
                 struct session_info **ret, size_t *ret_n)
{
        struct list_filter f = {user, state};
        struct session_info *out;
        size_t k;
        int r = collect(m, take_info, &f, sizeof(*out), (void **)&out, &k);

        if (r < 0)
                return r;
        for (size_t i = 0; i < k; i++)
                fill_ports(m, &out[i]);
        *ret = out;
        *ret_n = k;
        return 0;
}

void session_info_list_free(struct session_info *list, size_t n)
{
        for (size_t i = 0; list && i < n; i++)
                session_info_done(&list[i]);
        free(list);
}

void session_counts(struct session_manager *m, size_t counts[SESSION_STATE_COUNT])
{
        memset(counts, 0, SESSION_STATE_COUNT * sizeof(size_t));
        pthread_mutex_lock(&m->lock);
        for (size_t b = 0; b < N_BUCKETS; b++)
                for (struct session *s = m->buckets[b]; s; s = s->next) {
                        pthread_mutex_lock(&s->lock);
                        if ((unsigned)s->state < SESSION_STATE_COUNT)
                                counts[s->state]++;
                        pthread_mutex_unlock(&s->lock);
                }
        pthread_mutex_unlock(&m->lock);
}

static bool take_running(struct session *s, void *slot, void *ud)
{
        struct session_ref *ref = slot;
        if ((s->state != SESSION_RUNNING && s->state != SESSION_PAUSED) || s->transitioning || !s->container_id[0])
                return false;
        sbx_strlcpy(ref->user, s->user, sizeof(ref->user));
        sbx_strlcpy(ref->session, s->id, sizeof(ref->session));
        memcpy(ref->container_id, s->container_id, sizeof(ref->container_id));
        return true;
}

int session_running(struct session_manager *m, struct session_ref **ret, size_t *ret_n)
{
        return collect(m, take_running, NULL, sizeof(**ret), (void **)ret, ret_n);
}
