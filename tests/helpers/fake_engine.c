/* fake_engine.c — see fake_engine.h. One mutex (fe->lock) guards the
 * container table, the removed containers' labels and the event queue;
 * events_follow waits on fe->cond with a short slice so *stop is seen. */
#include "fake_engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAKE_MAX_CONTAINERS 512
#define FAKE_MAX_EVENTS 1024

struct fake_container {
        bool used, removed; /* removed: kept for its labels (stale events) */
        char id[ENGINE_ID_STR_MAX];
        char image[160];
        bool running, oom;
        int exit_code, restart_count;
        char started_at[40];
        int64_t pids_limit, memory;
        struct engine_kv labels[ENGINE_MAX_LABELS];
        size_t n_labels;
};

struct fake {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        uint64_t next_id;
        enum fake_create_fault fault;
        bool drop_events;
        struct fake_container c[FAKE_MAX_CONTAINERS];
        struct engine_event q[FAKE_MAX_EVENTS];
        size_t q_head, q_len;
        size_t creates, removes, events_sent;
};

static struct fake *fk(struct engine *e)
{
        return e->priv;
}

static struct fake_container *find_locked(struct fake *f, const char *id, bool removed_too)
{
        for (size_t i = 0; i < FAKE_MAX_CONTAINERS; i++)
                if (f->c[i].used && (removed_too || !f->c[i].removed) && strcmp(f->c[i].id, id) == 0)
                        return &f->c[i];
        return NULL;
}

static void queue_locked(struct fake *f, const struct fake_container *c, const char *action, int exit_code)
{
        struct engine_event *ev;

        if (f->drop_events || f->q_len == FAKE_MAX_EVENTS)
                return;
        ev = &f->q[(f->q_head + f->q_len++) % FAKE_MAX_EVENTS];
        memset(ev, 0, sizeof(*ev));
        sbx_strlcpy(ev->type, "container", sizeof(ev->type));
        sbx_strlcpy(ev->action, action, sizeof(ev->action));
        sbx_strlcpy(ev->id, c->id, sizeof(ev->id));
        ev->exit_code = exit_code;
        ev->time_nano = sbx_wall_ms() * 1000000;
        memcpy(ev->labels, c->labels, sizeof(c->labels));
        ev->n_labels = c->n_labels;
        pthread_cond_broadcast(&f->cond);
}

static bool labels_match(const struct fake_container *c, const char *const *filters)
{
        for (size_t i = 0; filters && filters[i]; i++) {
                const char *eq = strchr(filters[i], '=');
                size_t klen = eq ? (size_t)(eq - filters[i]) : strlen(filters[i]);
                bool hit = false;
                for (size_t j = 0; j < c->n_labels && !hit; j++)
                        hit = strlen(c->labels[j].key) == klen && strncmp(c->labels[j].key, filters[i], klen) == 0 &&
                              (!eq || strcmp(c->labels[j].value, eq + 1) == 0);
                if (!hit)
                        return false;
        }
        return true;
}

static void fake_free(struct engine *e)
{
        struct fake *f = fk(e);

        pthread_mutex_destroy(&f->lock);
        pthread_cond_destroy(&f->cond);
        free(f);
        free(e);
}

static int fake_version(struct engine *e, struct engine_version *ret, struct sbx_error *err)
{
        (void)e;
        (void)err;
        memset(ret, 0, sizeof(*ret));
        sbx_strlcpy(ret->engine, "fake", sizeof(ret->engine));
        sbx_strlcpy(ret->version, "0", sizeof(ret->version));
        return 0;
}

static int fake_image_inspect(struct engine *e, const char *image, struct engine_image_info *ret, struct sbx_error *err)
{
        (void)e;
        (void)err;
        memset(ret, 0, sizeof(*ret));
        snprintf(ret->id, sizeof(ret->id), "sha256:%.64s", image);
        return 0;
}

static int fake_has_runtime(struct engine *e, const char *name, bool *ret, struct sbx_error *err)
{
        (void)e;
        (void)err;
        *ret = strcmp(name, "runc") == 0;
        return 0;
}

static int fake_create(struct engine *e, const struct engine_spec *s, char ret_id[ENGINE_ID_STR_MAX],
                       struct sbx_error *err)
{
        struct fake *f = fk(e);
        struct fake_container *c = NULL;
        enum fake_create_fault fault;

        pthread_mutex_lock(&f->lock);
        fault = f->fault;
        f->fault = FAKE_CREATE_OK;
        if (fault == FAKE_CREATE_FAIL) {
                pthread_mutex_unlock(&f->lock);
                return sbx_error_set(err, -EIO, 500, "fake: create failed");
        }
        for (size_t i = 0; i < FAKE_MAX_CONTAINERS && !c; i++)
                if (!f->c[i].used)
                        c = &f->c[i];
        for (size_t i = 0; i < FAKE_MAX_CONTAINERS && !c; i++) /* full: forget a removed one's labels */
                if (f->c[i].removed)
                        c = &f->c[i];
        if (!c) {
                pthread_mutex_unlock(&f->lock);
                return sbx_error_set(err, -ENOSPC, 500, "fake: table full");
        }
        memset(c, 0, sizeof(*c));
        c->used = true;
        snprintf(c->id, sizeof(c->id), "%064llx", (unsigned long long)++f->next_id);
        sbx_strlcpy(c->image, s->image ? s->image : "", sizeof(c->image));
        c->exit_code = -1;
        /* what this engine enforces: no PID limit (its capability is clear) */
        c->pids_limit = engine_can(e, ENGINE_CAP_PIDS_LIMIT) ? s->pids_limit : 0;
        c->memory = s->memory_bytes;
        for (size_t i = 0; i < s->n_labels && i < ENGINE_MAX_LABELS; i++) {
                sbx_strlcpy(c->labels[i].key, s->labels[i].key, sizeof(c->labels[i].key));
                sbx_strlcpy(c->labels[i].value, s->labels[i].value, sizeof(c->labels[i].value));
                c->n_labels++;
        }
        f->creates++;
        queue_locked(f, c, "create", -1);
        if (fault == FAKE_START_FAIL)
                c->restart_count = -1; /* start refuses it */
        if (fault == FAKE_CREATE_HALFWAY) {
                pthread_mutex_unlock(&f->lock);
                return sbx_error_set(err, -EIO, 500, "fake: the engine failed after making the container");
        }
        memcpy(ret_id, c->id, ENGINE_ID_STR_MAX);
        pthread_mutex_unlock(&f->lock);
        return 0;
}

static int fake_start(struct engine *e, const char *id, struct sbx_error *err)
{
        struct fake *f = fk(e);
        struct fake_container *c;
        int r = 0;

        pthread_mutex_lock(&f->lock);
        c = find_locked(f, id, false);
        if (!c)
                r = sbx_error_set(err, -ENOENT, 404, "fake: no such container");
        else if (c->restart_count < 0)
                r = sbx_error_set(err, -EIO, 500, "fake: start failed");
        else if (!c->running) {
                c->running = true;
                c->exit_code = -1;
                snprintf(c->started_at, sizeof(c->started_at), "%lld", (long long)sbx_wall_ms());
                queue_locked(f, c, "start", -1);
        }
        pthread_mutex_unlock(&f->lock);
        return r;
}

static int fake_inspect(struct engine *e, const char *id, struct engine_container_info *ret, struct sbx_error *err)
{
        struct fake *f = fk(e);
        struct fake_container *c;

        pthread_mutex_lock(&f->lock);
        c = find_locked(f, id, false);
        if (!c) {
                pthread_mutex_unlock(&f->lock);
                return sbx_error_set(err, -ENOENT, 404, "fake: no such container");
        }
        memset(ret, 0, sizeof(*ret));
        sbx_strlcpy(ret->id, c->id, sizeof(ret->id));
        sbx_strlcpy(ret->image, c->image, sizeof(ret->image));
        sbx_strlcpy(ret->status,
                    c->running          ? "running"
                    : c->exit_code >= 0 ? "exited"
                                        : "created",
                    sizeof(ret->status));
        ret->running = c->running;
        ret->oom_killed = c->oom;
        ret->exit_code = c->exit_code < 0 ? 0 : c->exit_code;
        ret->restart_count = c->restart_count < 0 ? 0 : c->restart_count;
        sbx_strlcpy(ret->started_at, c->started_at, sizeof(ret->started_at));
        sbx_strlcpy(ret->network_mode, "none", sizeof(ret->network_mode));
        sbx_strlcpy(ret->runtime, "runc", sizeof(ret->runtime));
        ret->readonly_rootfs = true;
        ret->init = true;
        ret->memory = c->memory;
        ret->pids_limit = c->pids_limit;
        memcpy(ret->labels, c->labels, sizeof(c->labels));
        ret->n_labels = c->n_labels;
        pthread_mutex_unlock(&f->lock);
        return 0;
}

static int fake_stop(struct engine *e, const char *id, int timeout_s, struct sbx_error *err)
{
        struct fake *f = fk(e);
        struct fake_container *c;

        (void)timeout_s;
        pthread_mutex_lock(&f->lock);
        c = find_locked(f, id, false);
        if (c && c->running) {
                c->running = false;
                c->exit_code = 143;
                queue_locked(f, c, "die", 143);
                queue_locked(f, c, "stop", -1);
        }
        pthread_mutex_unlock(&f->lock);
        return c ? 0 : sbx_error_set(err, -ENOENT, 404, "fake: no such container");
}

static int fake_remove(struct engine *e, const char *id, struct sbx_error *err)
{
        struct fake *f = fk(e);
        struct fake_container *c;

        pthread_mutex_lock(&f->lock);
        c = find_locked(f, id, false);
        if (c) {
                if (c->running)
                        queue_locked(f, c, "die", 137);
                c->running = false;
                c->removed = true;
                f->removes++;
                queue_locked(f, c, "destroy", -1);
        }
        pthread_mutex_unlock(&f->lock);
        return c ? 0 : sbx_error_set(err, -ENOENT, 404, "fake: no such container");
}

static int fake_list(struct engine *e, const char *const *filters, bool all, struct engine_container_summary **ret_list,
                     size_t *ret_n, struct sbx_error *err)
{
        struct fake *f = fk(e);
        struct engine_container_summary *l = calloc(FAKE_MAX_CONTAINERS, sizeof(*l));
        size_t n = 0;

        if (!l)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < FAKE_MAX_CONTAINERS; i++) {
                struct fake_container *c = &f->c[i];
                if (!c->used || c->removed || (!all && !c->running) || !labels_match(c, filters))
                        continue;
                sbx_strlcpy(l[n].id, c->id, sizeof(l[n].id));
                sbx_strlcpy(l[n].state, c->running ? "running" : "exited", sizeof(l[n].state));
                memcpy(l[n].labels, c->labels, sizeof(c->labels));
                l[n].n_labels = c->n_labels;
                n++;
        }
        pthread_mutex_unlock(&f->lock);
        *ret_list = l;
        *ret_n = n;
        return 0;
}

static int fake_events_follow(struct engine *e, const char *const *label_filters, const char *const *actions,
                              engine_event_cb cb, void *userdata, volatile bool *stop, long reconnect_limit_ms,
                              struct sbx_error *err)
{
        struct fake *f = fk(e);

        (void)reconnect_limit_ms;
        (void)err;
        for (;;) {
                struct engine_event ev;
                struct fake_container probe = {0};
                bool wanted = false;

                pthread_mutex_lock(&f->lock);
                while (f->q_len == 0 && !(stop && __atomic_load_n(stop, __ATOMIC_RELAXED))) {
                        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, 50);
                        pthread_cond_timedwait(&f->cond, &f->lock, &until);
                }
                if (stop && __atomic_load_n(stop, __ATOMIC_RELAXED)) {
                        pthread_mutex_unlock(&f->lock);
                        return 0;
                }
                ev = f->q[f->q_head];
                f->q_head = (f->q_head + 1) % FAKE_MAX_EVENTS;
                f->q_len--;
                pthread_mutex_unlock(&f->lock);

                memcpy(probe.labels, ev.labels, sizeof(ev.labels));
                probe.n_labels = ev.n_labels;
                for (size_t i = 0; actions && actions[i] && !wanted; i++)
                        wanted = strcmp(actions[i], ev.action) == 0;
                if (!actions)
                        wanted = true;
                if (!wanted || !labels_match(&probe, label_filters))
                        continue;
                pthread_mutex_lock(&f->lock);
                f->events_sent++;
                pthread_mutex_unlock(&f->lock);
                if (cb(&ev, userdata))
                        return 0;
        }
}

static const struct engine_ops fake_ops = {
        .free = fake_free,
        .version = fake_version,
        .image_inspect = fake_image_inspect,
        .has_runtime = fake_has_runtime,
        .create = fake_create,
        .start = fake_start,
        .inspect = fake_inspect,
        .stop = fake_stop,
        .remove = fake_remove,
        .list = fake_list,
        .events_follow = fake_events_follow,
};

struct engine *fake_engine_new(void)
{
        struct engine *e = calloc(1, sizeof(*e));
        struct fake *f = calloc(1, sizeof(*f));
        pthread_condattr_t ca;

        if (!e || !f) {
                free(e);
                free(f);
                return NULL;
        }
        pthread_mutex_init(&f->lock, NULL);
        pthread_condattr_init(&ca);
        pthread_cond_init(&f->cond, &ca);
        pthread_condattr_destroy(&ca);
        e->ops = &fake_ops;
        e->name = "fake";
        e->priv = f;
        /* no exec, stats, logs, pause, runtime class, isolated network, and no PID limit */
        e->capabilities = ENGINE_CAP_MEMORY_SWAP | ENGINE_CAP_CPU_WEIGHT | ENGINE_CAP_OOM_SCORE_ADJ |
                          ENGINE_CAP_EVENTS | ENGINE_CAP_TMPFS_SIZE;
        return e;
}

void fake_engine_fault_next_create(struct engine *e, enum fake_create_fault fault)
{
        struct fake *f = fk(e);

        pthread_mutex_lock(&f->lock);
        f->fault = fault;
        pthread_mutex_unlock(&f->lock);
}

void fake_engine_drop_events(struct engine *e, bool drop)
{
        struct fake *f = fk(e);

        pthread_mutex_lock(&f->lock);
        f->drop_events = drop;
        pthread_mutex_unlock(&f->lock);
}

int fake_engine_kill(struct engine *e, const char *id, int exit_code, bool event)
{
        struct fake *f = fk(e);
        struct fake_container *c;

        pthread_mutex_lock(&f->lock);
        c = find_locked(f, id, false);
        if (c && c->running) {
                c->running = false;
                c->exit_code = exit_code;
                if (event)
                        queue_locked(f, c, "die", exit_code);
        }
        pthread_mutex_unlock(&f->lock);
        return c ? 0 : -ENOENT;
}

int fake_engine_inject_event(struct engine *e, const char *action, const char *id, int exit_code)
{
        struct fake *f = fk(e);
        struct fake_container *c;
        bool dropped;

        pthread_mutex_lock(&f->lock);
        c = find_locked(f, id, true);
        dropped = f->drop_events;
        f->drop_events = false;
        if (c)
                queue_locked(f, c, action, exit_code);
        f->drop_events = dropped;
        pthread_mutex_unlock(&f->lock);
        return c ? 0 : -ENOENT;
}

void fake_engine_counts(struct engine *e, struct fake_engine_counts *ret)
{
        struct fake *f = fk(e);

        memset(ret, 0, sizeof(*ret));
        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < FAKE_MAX_CONTAINERS; i++)
                if (f->c[i].used && !f->c[i].removed) {
                        ret->containers++;
                        ret->running += f->c[i].running;
                }
        ret->creates = f->creates;
        ret->removes = f->removes;
        ret->events_sent = f->events_sent;
        pthread_mutex_unlock(&f->lock);
}

size_t fake_engine_count_session(struct engine *e, const char *user, const char *session, bool running_only)
{
        struct fake *f = fk(e);
        char fu[128], fs[128];
        const char *filters[] = {fu, fs, NULL};
        size_t n = 0;

        snprintf(fu, sizeof(fu), "sandboxd.user=%s", user);
        snprintf(fs, sizeof(fs), "sandboxd.session=%s", session);
        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < FAKE_MAX_CONTAINERS; i++)
                if (f->c[i].used && !f->c[i].removed && (!running_only || f->c[i].running) &&
                    labels_match(&f->c[i], filters))
                        n++;
        pthread_mutex_unlock(&f->lock);
        return n;
}

bool fake_engine_is_running(struct engine *e, const char *id)
{
        struct fake *f = fk(e);
        struct fake_container *c;
        bool r;

        pthread_mutex_lock(&f->lock);
        c = find_locked(f, id, false);
        r = c && c->running;
        pthread_mutex_unlock(&f->lock);
        return r;
}
