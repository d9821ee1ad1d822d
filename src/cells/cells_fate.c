/* cells_fate.c — what happens to contexts when their session does: the
 * session's failure and recreation, idle reaping, taking a running cell back
 * after a daemon restart (the adopter thread and recovery from the store),
 * forks, the warm pool's pre-started default contexts, and cells_new/free.
 * Locks: cells_internal.h. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cells_internal.h"
#include "sandboxd/audit.h"
#include "sandboxd/sha256.h"
#include "sandboxd/log.h"
#include "sandboxd/pool.h"
#include "sandboxd/hub.h"
#include "sandboxd/session.h"
#include "sandboxd/store_cells.h"
#include "sandboxd/utf8.h"

/* ---- the session's fate, idle reaping ---- */

static const char *cause_from_session(const char *cause)
{
        if (strcmp(cause, "privacy_ratchet") == 0)
                return "privacy_ratchet";
        if (strcmp(cause, "idle_expired") == 0 || strcmp(cause, "ttl_expired") == 0)
                return "idle_stop";
        if (strcmp(cause, "oom_killed") == 0)
                return "oom";
        if (strcmp(cause, "evicted") == 0) /* the fair share of limits.sessions (session_share.c) */
                return "evicted";
        if (strcmp(cause, "restored") == 0) /* restore_session put the workspace back (snapshot.h) */
                return "restored";
        if (strcmp(cause, "stopped_while_paused") == 0) /* past limits.paused_sessions, or memory pressure */
                return "stopped_while_paused";
        return "container_recreated";
}

bool cells_session_busy(struct cells *c, const char *user, const char *session)
{
        bool busy = false;

        if (!c)
                return false;
        pthread_mutex_lock(&c->lock);
        for (struct cell_ctx *x = c->list; x && !busy; x = x->next)
                if (strcmp(x->user, user) == 0 && strcmp(x->session, session) == 0) {
                        pthread_mutex_lock(&x->lock);
                        busy = x->busy;
                        pthread_mutex_unlock(&x->lock);
                }
        pthread_mutex_unlock(&c->lock);
        return busy;
}

/* The session's contexts, each with a reference (at most max). */
static size_t session_ctxs(struct cells *c, const char *user, const char *session, struct cell_ctx **v, size_t max)
{
        size_t n = 0;

        pthread_mutex_lock(&c->lock);
        for (struct cell_ctx *x = c->list; x && n < max; x = x->next)
                if (strcmp(x->user, user) == 0 && strcmp(x->session, session) == 0) {
                        x->refs++;
                        v[n++] = x;
                }
        pthread_mutex_unlock(&c->lock);
        return n;
}

/* The session's container is about to be removed on purpose: a generation
 * that runs in it ends for that reason, whichever sign of its end comes
 * first (the runner's channel closing, the bridge's SIGKILL), so a cell
 * running in it and the next cell report the same cause. */
static void on_session_teardown(const char *user, const char *session, const char *container_id, const char *cause,
                                void *ud)
{
        struct cells *c = ud;
        struct cell_ctx *v[64];
        size_t n = strcmp(cause, "destroyed") == 0 ? 0 : session_ctxs(c, user, session, v, ELEMENTSOF(v));

        for (size_t i = 0; i < n; i++) {
                struct cell_ctx *x = v[i];
                pthread_mutex_lock(&x->lock);
                if (x->phase != CTX_IDLE && !x->strong_cause[0] && strcmp(x->container_id, container_id) == 0)
                        sbx_strlcpy(x->strong_cause, cause_from_session(cause), sizeof(x->strong_cause));
                pthread_mutex_unlock(&x->lock);
                cells_ctx_unref(x);
        }
}

static void on_session_failure(const char *user, const char *session, const char *container_id, const char *cause,
                               void *ud)
{
        struct cells *c = ud;
        struct cell_ctx *v[64];
        size_t n = session_ctxs(c, user, session, v, ELEMENTSOF(v));
        bool destroyed = strcmp(cause, "destroyed") == 0;

        (void)container_id;
        for (size_t i = 0; i < n; i++) {
                struct cell_ctx *x = v[i];
                pthread_mutex_lock(&x->lock);
                /* adopt_pending: a job kept across a restart, not taken back yet
                 * (its session paused meanwhile): it is lost with the container */
                /* a memory snapshot's context waits for the session's next VM, not this one */
                bool next_vm = x->carried && x->adopt_pending && !x->container_id[0] && !destroyed;
                if (!next_vm && (x->phase != CTX_IDLE || x->waiter_done || x->adopt_pending)) {
                        const char *k = cause_from_session(cause);
                        sbx_strlcpy(x->strong_cause, k, sizeof(x->strong_cause));
                        /* the generation may already have ended as merely killed, a
                         * cause that stands once it was reported */
                        if (x->phase == CTX_IDLE && x->lost_cause[0] && x->lost_generation == x->generation &&
                            !x->lost_reported)
                                sbx_strlcpy(x->lost_cause, k, sizeof(x->lost_cause));
                        cells_ctx_persist_locked(x, x->phase != CTX_IDLE);
                }
                pthread_mutex_unlock(&x->lock);
                if (destroyed)
                        cells_ctx_unlist(c, x);
                cells_ctx_unref(x);
        }
        if (destroyed) {
                (void)store_context_delete_session(c->store, user, session);
                cells_records_drop(c, user, session, NULL);
        }
}

static void *reaper_main(void *p)
{
        struct cells *c = p;

        pthread_mutex_lock(&c->lock);
        while (!c->stopping) {
                struct timespec ts = sbx_deadline_after(CLOCK_MONOTONIC, CELLS_REAP_EVERY_MS);
                (void)pthread_cond_timedwait(&c->cond, &c->lock, &ts);
                if (c->stopping)
                        break;
                int64_t cutoff = sbx_wall_ms() - (int64_t)c->cfg->cells_idle_timeout_s * 1000;
                struct cell_ctx *victim = NULL;
                for (struct cell_ctx *x = c->list; x && !victim; x = x->next) {
                        /* a paused session's kernel is frozen: left alone (lock order: cells, then sessions) */
                        if (session_is_paused(c->sessions, x->user, x->session))
                                continue;
                        pthread_mutex_lock(&x->lock);
                        if (x->phase == CTX_READY && !x->busy && x->last_used < cutoff) {
                                x->busy = true;
                                x->refs++;
                                victim = x;
                        }
                        pthread_mutex_unlock(&x->lock);
                }
                if (!victim)
                        continue;
                pthread_mutex_unlock(&c->lock);
                log_info("cells: %s:%s/%s idle past CELLS_IDLE_TIMEOUT_S: stopped", victim->user, victim->session,
                         victim->name);
                cells_ctx_kill(victim, "idle_stop", false);
                pthread_mutex_lock(&victim->lock);
                victim->busy = false;
                pthread_mutex_unlock(&victim->lock);
                cells_ctx_unref(victim);
                pthread_mutex_lock(&c->lock);
        }
        pthread_mutex_unlock(&c->lock);
        return NULL;
}

/* Take one context's job back after a restart: 0 when its bridge runs
 * again (its last cell is replayed), else the loss is daemon_restart. */
static void adopt_one(struct cells *c, struct cell_ctx *x)
{
        const uint64_t have[2] = {0, 0};
        uint64_t start[2];
        struct hub_exec *rx = NULL;
        struct sbx_error err = {0};
        struct waiter_arg *wa = NULL;
        int64_t deadline = sbx_now_ms() + CELLS_ADOPT_WAIT_MS;
        int r = -ETIMEDOUT;

        (void)hub_adopt(c->hub, x->user, x->session);
        while (r == -ETIMEDOUT && sbx_now_ms() < deadline) {
                pthread_mutex_lock(&c->lock);
                bool stopping = c->stopping;
                pthread_mutex_unlock(&c->lock);
                if (stopping)
                        return;
                pthread_mutex_lock(&x->lock);
                bool gone = x->strong_cause[0] != '\0'; /* its container went meanwhile */
                pthread_mutex_unlock(&x->lock);
                if (gone)
                        break;
                /* output resumes from the last acknowledgement, maybe inside a
                 * line: everything before the replay is ignored */
                pthread_mutex_lock(&x->lock);
                x->adopting = true;
                pthread_mutex_unlock(&x->lock);
                x->line_len = 0;
                x->line_skip = true;
                r = hub_exec_adopt(c->hub, x->user, x->session, x->tag, have, cells_on_output, x, 1000, &rx, start,
                                   &err);
        }
        if (r == 0 && !x->container_id[0]) {
                /* a memory fork's context (cells_mark_carried): its VM is the session's current one */
                struct session_info info;
                if (session_get_info(c->sessions, x->user, x->session, &info) == 0) {
                        pthread_mutex_lock(&x->lock);
                        sbx_strlcpy(x->container_id, info.container_id, sizeof(x->container_id));
                        pthread_mutex_unlock(&x->lock);
                        session_info_done(&info);
                }
        }
        if (r == 0) {
                wa = malloc(sizeof(*wa));
                pthread_mutex_lock(&x->rx_lock);
                x->rx = rx;
                pthread_mutex_unlock(&x->rx_lock);
                pthread_mutex_lock(&x->lock);
                x->phase = CTX_READY;
                x->waiter_done = false;
                x->adopt_pending = false;
                if (wa) {
                        *wa = (struct waiter_arg){.x = x, .rx = rx, .generation = x->generation};
                        r = -pthread_create(&x->waiter, NULL, cells_waiter_main, wa);
                        x->has_waiter = r == 0;
                } else
                        r = -ENOMEM;
                pthread_mutex_unlock(&x->lock);
                if (r == 0) {
                        cJSON *m = cJSON_CreateObject();
                        pthread_setname_np(x->waiter, "sbx-cellwait");
                        cJSON_AddStringToObject(m, "op", "replay");
                        (void)cells_ctx_send(x, m, sbx_now_ms() + 5000);
                        cJSON_Delete(m);
                        log_info("cells: %s:%s/%s generation %lld adopted %s", x->user, x->session, x->name,
                                 (long long)x->generation,
                                 x->carried ? "from a memory snapshot's guest" : "after a restart");
                        return;
                }
                free(wa);
                pthread_mutex_lock(&x->rx_lock);
                x->rx = NULL;
                pthread_mutex_unlock(&x->rx_lock);
                (void)hub_exec_signal(rx, SIGKILL);
                hub_exec_free(rx);
        } else if (r == -ETIMEDOUT)
                hub_unexpect(c->hub, x->user, x->session, x->tag);
        pthread_mutex_lock(&x->lock);
        x->phase = CTX_IDLE;
        x->adopting = x->adopt_pending = false;
        sbx_strlcpy(x->lost_cause,
                    x->strong_cause[0] ? x->strong_cause
                    : x->carried       ? x->carry_cause
                                       : "daemon_restart",
                    sizeof(x->lost_cause));
        x->lost_reported = false;
        char lost[sizeof(x->lost_cause)];
        memcpy(lost, x->lost_cause, sizeof(lost));
        x->lost_generation = x->generation;
        x->adopt_busy = x->busy = false;
        cells_ctx_persist_locked(x, false);
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        log_info("cells: %s:%s/%s could not be adopted after a restart (%s): %s", x->user, x->session, x->name,
                 r == -ETIMEDOUT ? "its runner did not come back" : "its job is gone", lost);
}

/* A memory fork's session has its VM (cells_mark_carried is called before it boots). */
static bool session_runs(struct cells *c, const char *user, const char *session)
{
        struct session_info info;
        bool runs;

        if (session_get_info(c->sessions, user, session, &info) < 0)
                return false;
        runs = info.state == SESSION_RUNNING && info.container_id[0];
        session_info_done(&info);
        return runs;
}

static void *adopter_main(void *p)
{
        struct cells *c = p;

        for (;;) {
                struct cell_ctx *x = NULL;
                bool deferred = false;
                pthread_mutex_lock(&c->lock);
                for (struct cell_ctx *y = c->list; y && !c->stopping; y = y->next)
                        if (y->adopt_pending) {
                                /* its runner is frozen with its paused session and reconnects
                                 * only once a request resumes it (cells_ctx_acquire does): not yet */
                                if (session_is_paused(c->sessions, y->user, y->session) ||
                                    (y->carried && !session_runs(c, y->user, y->session))) {
                                        deferred = true;
                                        continue;
                                }
                                y->refs++;
                                x = y;
                                break;
                        }
                if (!x && deferred && !c->stopping) {
                        struct timespec ts = sbx_deadline_after(CLOCK_MONOTONIC, 500);
                        (void)pthread_cond_timedwait(&c->cond, &c->lock, &ts);
                        pthread_mutex_unlock(&c->lock);
                        continue;
                }
                if (!x && !c->stopping) {
                        /* a memory fork's contexts come later (cells_mark_carried broadcasts) */
                        struct timespec ts = sbx_deadline_after(CLOCK_MONOTONIC, 5000);
                        (void)pthread_cond_timedwait(&c->cond, &c->lock, &ts);
                        pthread_mutex_unlock(&c->lock);
                        continue;
                }
                pthread_mutex_unlock(&c->lock);
                if (!x)
                        return NULL;
                adopt_one(c, x);
                pthread_mutex_lock(&x->lock);
                bool still = x->adopt_pending; /* stopping: leave it */
                x->adopt_pending = false;
                pthread_mutex_unlock(&x->lock);
                cells_ctx_unref(x);
                if (still)
                        return NULL;
        }
}

/* Contexts the store says were live when the daemon stopped: their
 * interpreters are gone (the runner drops jobs nobody expects), so their
 * next cell reports daemon_restart. */
static void recover(struct cells *c)
{
        struct store_context *rows = NULL;
        size_t n = 0;

        if (store_context_list(c->store, NULL, NULL, &rows, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                struct store_context *r = &rows[i];
                struct cell_ctx *x;
                if (!cells_name_valid(r->name) ||
                    (strcmp(r->language, "python") != 0 && strcmp(r->language, "node") != 0))
                        continue;
                x = cells_ctx_alloc(c, r->user, r->session, r->name, r->language);
                if (!x)
                        break;
                x->generation = r->generation;
                x->execution_count = r->execution_count;
                x->created_at = r->created_at;
                x->last_used = r->last_used;
                sbx_strlcpy(x->container_id, r->container_id, sizeof(x->container_id));
                x->tag = r->runner_tag;
                x->lost_generation = x->generation;
                if (strcmp(r->state, "live") == 0 && r->runner_tag && c->hub) {
                        /* its job may still run: the runner keeps it for us (cells_adopt_main) */
                        hub_expect(c->hub, r->user, r->session, r->runner_tag);
                        x->adopt_pending = x->adopt_busy = x->busy = true;
                } else {
                        sbx_strlcpy(x->lost_cause, strcmp(r->state, "live") == 0 ? "daemon_restart" : r->lost_cause,
                                    sizeof(x->lost_cause));
                        cells_ctx_persist_locked(x, false);
                }
                x->next = c->list;
                c->list = x;
                c->n++;
        }
        free(rows);
}

/* A restore's copy over the session's own context x (a reference held): its generation ended
 * with the VM the restore removed; once its waiter is done it becomes the snapshot's, as a
 * fork's would. -EBUSY when it is still held (a cell that did not end with its VM). */
static int carry_over(struct cells *c, struct cell_ctx *x, const char *language, int64_t generation,
                      int64_t execution_count, uint32_t runner_tag)
{
        int64_t deadline = sbx_now_ms() + CELLS_KILL_WAIT_MS;

        pthread_mutex_lock(&x->lock);
        /* a cell in the removed VM ends with its runner connection */
        while ((x->busy || x->adopt_pending) && cells_wait_until(&x->cond, &x->lock, deadline))
                ;
        if (x->busy || x->adopt_pending) {
                pthread_mutex_unlock(&x->lock);
                return -EBUSY;
        }
        x->busy = true;
        pthread_mutex_unlock(&x->lock);
        cells_ctx_kill(x, "restored", false); /* its generation's waiter joined */
        pthread_mutex_lock(&x->lock);
        if (x->phase != CTX_IDLE || x->has_waiter) {
                x->busy = false;
                pthread_cond_broadcast(&x->cond);
                pthread_mutex_unlock(&x->lock);
                return -EBUSY;
        }
        sbx_strlcpy(x->language, language, sizeof(x->language));
        x->generation = x->lost_generation = generation;
        x->execution_count = execution_count;
        x->tag = runner_tag;
        x->container_id[0] = x->lost_cause[0] = x->strong_cause[0] = x->kill_cause[0] = x->bridge_cause[0] = '\0';
        x->kill_silent = x->lost_reported = x->waiter_done = x->adopting = x->adopted_cell = false;
        x->prestarted_generation = 0;
        x->carried = true;
        sbx_strlcpy(x->carry_cause, "restored", sizeof(x->carry_cause));
        hub_expect(c->hub, x->user, x->session, runner_tag);
        x->adopt_pending = x->adopt_busy = true; /* busy already */
        cells_ctx_persist_locked(x, true);
        pthread_mutex_unlock(&x->lock);
        pthread_mutex_lock(&c->lock);
        pthread_cond_broadcast(&c->cond); /* the adopter */
        pthread_mutex_unlock(&c->lock);
        return 0;
}

/* A forked session's copy of a context (snapshot.h): its name, language and counts; with a
 * runner tag (a memory snapshot's fork) its job is taken back once the session runs, else it
 * has no interpreter and the next cell reports state_lost "forked". A restore's, over a context
 * of that name: carry_over. */
static int mark_copy(struct cells *c, const char *user, const char *session, const char *name, const char *language,
                     int64_t generation, int64_t execution_count, uint32_t runner_tag)
{
        struct cell_ctx *x;

        if (!cells_name_valid(name) || (strcmp(language, "python") != 0 && strcmp(language, "node") != 0) ||
            (runner_tag && !c->hub))
                return -EINVAL;
        pthread_mutex_lock(&c->lock);
        x = cells_find_locked(c, user, session, name);
        if (x && runner_tag) {
                x->refs++;
                pthread_mutex_unlock(&c->lock);
                int r = carry_over(c, x, language, generation, execution_count, runner_tag);
                cells_ctx_unref(x);
                return r;
        }
        if (x) {
                pthread_mutex_unlock(&c->lock);
                return -EEXIST;
        }
        x = cells_ctx_alloc(c, user, session, name, language);
        if (!x) {
                pthread_mutex_unlock(&c->lock);
                return -ENOMEM;
        }
        x->generation = x->lost_generation = generation;
        x->execution_count = execution_count;
        if (runner_tag) {
                x->tag = runner_tag;
                x->carried = true;
                sbx_strlcpy(x->carry_cause, "forked", sizeof(x->carry_cause));
                /* before the session's first VM boots: its runner keeps the job for us
                 * (adopter_main, once the session runs) */
                hub_expect(c->hub, user, session, runner_tag);
                x->adopt_pending = x->adopt_busy = x->busy = true;
        } else {
                sbx_strlcpy(x->lost_cause, "forked", sizeof(x->lost_cause));
        }
        pthread_mutex_lock(&x->lock);
        cells_ctx_persist_locked(x, runner_tag != 0);
        pthread_mutex_unlock(&x->lock);
        x->next = c->list;
        c->list = x;
        c->n++;
        if (runner_tag)
                pthread_cond_broadcast(&c->cond); /* the adopter */
        pthread_mutex_unlock(&c->lock);
        return 0;
}

int cells_mark_forked(struct cells *c, const char *user, const char *session, const char *name, const char *language,
                      int64_t generation, int64_t execution_count)
{
        return mark_copy(c, user, session, name, language, generation, execution_count, 0);
}

uint32_t cells_runner_tag(struct cells *c, const char *user, const char *session, const char *name)
{
        struct cell_ctx *x;
        uint32_t tag = 0;

        pthread_mutex_lock(&c->lock);
        x = cells_find_locked(c, user, session, name);
        if (x) {
                pthread_mutex_lock(&x->lock);
                if (x->phase == CTX_READY && !x->waiter_done)
                        tag = x->tag;
                pthread_mutex_unlock(&x->lock);
        }
        pthread_mutex_unlock(&c->lock);
        return tag;
}

int cells_mark_carried(struct cells *c, const char *user, const char *session, const char *name, const char *language,
                       int64_t generation, int64_t execution_count, uint32_t runner_tag)
{
        return runner_tag ? mark_copy(c, user, session, name, language, generation, execution_count, runner_tag)
                          : -EINVAL;
}

/* ---- the warm pool's pre-started contexts ---- */

/* Take the slot's entry off the list (NULL: none). */
static struct cell_ctx *prestart_take(struct cells *c, const char *slot)
{
        struct cell_ctx *x = NULL;

        pthread_mutex_lock(&c->lock);
        for (struct prestart **pp = &c->prestarts; *pp; pp = &(*pp)->next)
                if (strcmp((*pp)->slot, slot) == 0) {
                        struct prestart *e = *pp;
                        *pp = e->next;
                        x = e->x;
                        free(e);
                        break;
                }
        pthread_mutex_unlock(&c->lock);
        return x;
}

/* Entries whose interpreter ended (their slot was discarded: its
 * container went, and the kernel with it). */
static void prestart_prune(struct cells *c)
{
        struct prestart *dead = NULL;

        pthread_mutex_lock(&c->lock);
        for (struct prestart **pp = &c->prestarts; *pp;) {
                struct prestart *e = *pp;
                pthread_mutex_lock(&e->x->lock);
                bool gone = e->x->waiter_done || e->x->phase == CTX_IDLE;
                pthread_mutex_unlock(&e->x->lock);
                if (gone) {
                        *pp = e->next;
                        e->next = dead;
                        dead = e;
                } else
                        pp = &e->next;
        }
        pthread_mutex_unlock(&c->lock);
        while (dead) {
                struct prestart *e = dead;
                dead = e->next;
                cells_ctx_unref(e->x); /* joins its waiter, which has ended */
                free(e);
        }
}

static void prestart_slot(struct cells *c, const char *slot, const char *container_id)
{
        struct sbx_error err = {0};
        struct prestart *e = calloc(1, sizeof(*e));
        struct cell_ctx *x = cells_ctx_alloc(c, POOL_USER, slot, CELLS_DEFAULT, "python");
        int r;

        if (!e || !x) {
                free(e);
                cells_ctx_unref(x);
                return;
        }
        x->deleted = true; /* no row until a session has it */
        x->busy = true;
        r = cells_ctx_start(x, container_id, NULL, &err);
        pthread_mutex_lock(&x->lock);
        x->busy = false;
        x->prestarted_generation = x->generation;
        pthread_mutex_unlock(&x->lock);
        if (r < 0) {
                log_info("cells: pool slot %s starts no interpreter ahead: %s", slot, err.msg);
                free(e);
                cells_ctx_unref(x);
                return;
        }
        sbx_strlcpy(e->slot, slot, sizeof(e->slot));
        e->x = x;
        pthread_mutex_lock(&c->lock);
        e->next = c->prestarts;
        c->prestarts = e;
        pthread_mutex_unlock(&c->lock);
}

/* user:session claimed the slot: its pre-started context becomes the
 * session's default context (generation 1, the same kernel: it runs under
 * the slot's uid, which is now the session's, in the workspace the slot's
 * directory became). A session that has a default context already (one
 * that lost its container) keeps that one and its state_lost; the kernel
 * ahead is killed. */
static void prestart_claimed(struct cells *c, const char *slot, const char *user, const char *session)
{
        struct cell_ctx *x = prestart_take(c, slot);
        size_t in_session = 0;
        bool adopt;

        if (!x)
                return;
        pthread_mutex_lock(&x->lock);
        adopt = x->phase == CTX_READY && !x->waiter_done;
        pthread_mutex_unlock(&x->lock);
        pthread_mutex_lock(&c->lock);
        for (struct cell_ctx *y = c->list; y && adopt; y = y->next)
                if (strcmp(y->user, user) == 0 && strcmp(y->session, session) == 0) {
                        in_session++;
                        adopt = strcmp(y->name, CELLS_DEFAULT) != 0;
                }
        adopt = adopt && !c->stopping && in_session < (size_t)c->cfg->cells_max_per_session &&
                c->n < (size_t)c->cfg->cells_max_global;
        if (adopt) {
                /* not listed until now: only the hub thread's debug log reads these meanwhile */
                pthread_mutex_lock(&x->lock);
                sbx_strlcpy(x->user, user, sizeof(x->user));
                sbx_strlcpy(x->session, session, sizeof(x->session));
                x->deleted = false;
                x->last_used = sbx_wall_ms();
                pthread_mutex_unlock(&x->lock);
                x->next = c->list;
                c->list = x; /* the list takes the entry's reference */
                c->n++;
        }
        pthread_mutex_unlock(&c->lock);
        if (!adopt) {
                cells_ctx_kill(x, "", true);
                cells_ctx_unref(x);
                return;
        }
        pthread_mutex_lock(&x->lock);
        cells_ctx_persist_locked(x, true);
        pthread_mutex_unlock(&x->lock);
        log_info("cells: %s:%s/default takes the python kernel started ahead in pool slot %s", user, session, slot);
}

void cells_pool_slot(void *userdata, const char *slot, const char *container_id, const char *user, const char *session)
{
        struct cells *c = userdata;
        bool stopping;

        pthread_mutex_lock(&c->lock);
        stopping = c->stopping;
        pthread_mutex_unlock(&c->lock);
        if (stopping)
                return;
        prestart_prune(c);
        if (user)
                prestart_claimed(c, slot, user, session);
        else if (strcmp(c->cfg->pool_cells_prestart, "python") == 0 && c->hub)
                prestart_slot(c, slot, container_id);
}

int cells_new(const struct sbx_config *cfg, struct store *st, struct session_manager *sm, struct hub *hub,
              struct cells **ret, struct sbx_error *err)
{
        struct cells *c = calloc(1, sizeof(*c));
        int r;

        if (!c)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        c->cfg = cfg;
        c->store = st;
        c->sessions = sm;
        c->hub = hub;
        pthread_mutex_init(&c->lock, NULL);
        cells_cond_init_mono(&c->cond);
        /* the cells' spools: the records are in memory, so what a previous
         * daemon left cannot be named any more */
        snprintf(c->spool_dir, sizeof(c->spool_dir), "%s/cells", cfg->data_dir);
        if (mkdir(c->spool_dir, 0700) == 0 || errno == EEXIST) {
                cell_spool_wipe(c->spool_dir);
                c->spool_ok = true;
        } else
                log_warn("cells: cannot create %s: %s; large outputs are dropped", c->spool_dir, strerror(errno));
        recover(c);
        (void)session_register_failure_handler(sm, on_session_failure, c);
        (void)session_register_teardown_notice(sm, on_session_teardown, c);
        r = -pthread_create(&c->reaper, NULL, reaper_main, c);
        if (r < 0) {
                cells_free(c);
                return sbx_error_set(err, r, 0, "cannot start the contexts' reaper");
        }
        c->has_reaper = true;
        pthread_setname_np(c->reaper, "sbx-cellreap");
        if (pthread_create(&c->adopter, NULL, adopter_main, c) == 0) {
                c->has_adopter = true;
                pthread_setname_np(c->adopter, "sbx-celladopt");
        }
        *ret = c;
        return 0;
}

void cells_free(struct cells *c)
{
        struct cell_ctx *x;

        if (!c)
                return;
        pthread_mutex_lock(&c->lock);
        c->stopping = true;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        if (c->has_reaper)
                pthread_join(c->reaper, NULL);
        if (c->has_adopter)
                pthread_join(c->adopter, NULL);
        while ((x = c->list)) {
                c->list = x->next;
                cells_ctx_join_waiter(x); /* each sees stopping within a second */
                cells_ctx_unref(x);
        }
        while (c->prestarts) { /* their kernels stay with the slots' runners, which drop them on restart */
                struct prestart *e = c->prestarts;
                c->prestarts = e->next;
                cells_ctx_join_waiter(e->x);
                cells_ctx_unref(e->x);
                free(e);
        }
        for (size_t i = 0; i < CELLS_RECENT_MAX; i++)
                cell_spool_kept_free(c->recent[i].kept);
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->cond);
        free(c);
}
