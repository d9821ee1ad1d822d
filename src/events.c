/* events.c — the lifecycle event log (include/sandboxd/events.h): the
 * producers' queue, the writer thread that stores and fans out, the
 * subscriptions (a store backlog, then a live ring) and polling.
 *
 * Threads and locks (DESIGN: a handover through a mutex, a condition
 * variable and a queue, as redis bio.c):
 *   any thread   events_emit: q_lock for a list append (leaf), never I/O.
 *   sbx-evlog    the writer: takes a batch under q_lock, writes it to the
 *                store with no lock held, then holds sub_lock to push it
 *                into the rings; calls the listener with no lock held.
 *   consumers    events_sub_next: the store (no lock), then sub_lock for
 *                the ring. sub_lock is a leaf too: q_lock and sub_lock are
 *                never held together.
 * The log is a process-wide singleton (one daemon per process: the first
 * events_open owns it); `bus` is published under g_lock and read by the
 * producers under q_lock's protection (bus lives from open to close, and
 * close unpublishes it before freeing). */
#include "sandboxd/events.h"
#include "sandboxd/reqctx.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/log.h"
#include "sandboxd/store_events.h"
#include "sandboxd/utf8.h"

struct events_sub {
        struct events_sub *next; /* sub_lock */
        char user[65];
        bool all;
        /* sub_lock: */
        struct event *ring[EVENTS_SUB_QUEUE];
        size_t head, n;
        bool overflowed;
        /* the consumer's own: */
        int64_t last_id;
        bool live; /* the backlog is read: events come from the ring */
        struct store_event *page;
        size_t page_n, page_i;
};

struct qnode {
        struct qnode *next;
        struct event *ev;
};

struct events {
        const struct sbx_config *cfg;
        struct store *st;
        pthread_t writer;
        bool started;
        void (*listener)(int64_t newest, void *ud);
        void *listener_ud;
        int64_t last_prune_ms;
        int64_t since_prune;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* bus publication */
static struct events *bus;

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cond = PTHREAD_COND_INITIALIZER;    /* the writer waits for work */
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER; /* flushers wait for written_seq */
static struct qnode *q_head, *q_tail;
static size_t q_len;
static bool q_open, q_stopping;
static uint64_t emitted_seq, handled_seq; /* q_lock: events queued; events the writer is done with */

static pthread_mutex_t sub_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sub_cond = PTHREAD_COND_INITIALIZER;
static struct events_sub *subs;
static size_t n_subs;
static bool subs_closing;

static uint64_t st_emitted, st_written, st_dropped, st_overflowed, st_pruned; /* relaxed atomics */
#define BUMP(x, n) __atomic_add_fetch(&(x), (n), __ATOMIC_RELAXED)
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

/* ---- events ---- */

void event_unref(struct event *ev)
{
        if (!ev || __atomic_sub_fetch(&ev->refs, 1, __ATOMIC_ACQ_REL) > 0)
                return;
        free(ev->data);
        free(ev);
}

static struct event *event_ref(struct event *ev)
{
        __atomic_add_fetch(&ev->refs, 1, __ATOMIC_RELAXED);
        return ev;
}

static struct event *event_new(const char *type, const char *user, const char *session, const char *trace_id,
                               const char *data)
{
        struct event *ev = calloc(1, sizeof(*ev));

        if (!ev)
                return NULL;
        ev->refs = 1;
        ev->ts = sbx_wall_ms();
        sbx_strlcpy(ev->type, type, sizeof(ev->type));
        sbx_strlcpy(ev->user, user ? user : "", sizeof(ev->user));
        sbx_strlcpy(ev->session, session ? session : "", sizeof(ev->session));
        sbx_strlcpy(ev->trace_id, trace_id ? trace_id : "", sizeof(ev->trace_id));
        if (!data || !*data)
                data = "{}";
        else if (strlen(data) > STORE_EVENT_DATA_MAX)
                data = "{\"truncated\":true}";
        ev->data = strdup(data);
        if (!ev->data) {
                free(ev);
                return NULL;
        }
        return ev;
}

static struct event *event_from_row(struct store_event *row)
{
        struct event *ev = calloc(1, sizeof(*ev));

        if (!ev)
                return NULL;
        ev->refs = 1;
        ev->id = row->id;
        ev->ts = row->ts;
        sbx_strlcpy(ev->type, row->type, sizeof(ev->type));
        sbx_strlcpy(ev->user, row->user_id, sizeof(ev->user));
        sbx_strlcpy(ev->session, row->session_id, sizeof(ev->session));
        sbx_strlcpy(ev->trace_id, row->trace_id, sizeof(ev->trace_id));
        ev->data = row->data; /* taken */
        row->data = NULL;
        return ev;
}

char *event_to_json(const struct event *ev)
{
        cJSON *o = cJSON_CreateObject(), *data = cJSON_Parse(ev->data);
        char *text;

        if (!o) {
                cJSON_Delete(data);
                return NULL;
        }
        cJSON_AddNumberToObject(o, "id", (double)ev->id);
        cJSON_AddStringToObject(o, "type", ev->type);
        cJSON_AddStringToObject(o, "user", ev->user);
        cJSON_AddStringToObject(o, "session", ev->session);
        cJSON_AddNumberToObject(o, "ts", (double)ev->ts);
        cJSON_AddStringToObject(o, "trace_id", ev->trace_id);
        if (data)
                cJSON_AddItemToObject(o, "data", data);
        else
                cJSON_AddObjectToObject(o, "data");
        text = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        return text;
}

/* ---- producers ---- */

void events_emit_traced(const char *type, const char *user, const char *session, const char *trace_id,
                        const char *data_json)
{
        struct qnode *n;
        struct event *ev;

        if (!type || !user || !session_id_valid(user) || !__atomic_load_n(&q_open, __ATOMIC_RELAXED))
                return;
        ev = event_new(type, user, session, trace_id, data_json);
        n = ev ? malloc(sizeof(*n)) : NULL;
        if (!n) {
                event_unref(ev);
                BUMP(st_dropped, 1);
                return;
        }
        n->next = NULL;
        n->ev = ev;
        pthread_mutex_lock(&q_lock);
        if (!q_open || q_stopping || q_len >= EVENTS_QUEUE_MAX) {
                pthread_mutex_unlock(&q_lock);
                BUMP(st_dropped, 1);
                event_unref(ev);
                free(n);
                return;
        }
        if (q_tail)
                q_tail->next = n;
        else
                q_head = n;
        q_tail = n;
        q_len++;
        emitted_seq++;
        pthread_cond_signal(&q_cond);
        pthread_mutex_unlock(&q_lock);
        BUMP(st_emitted, 1);
}

void events_emit(const char *type, const char *user, const char *session, const char *data_json)
{
        events_emit_traced(type, user, session, reqctx_trace_id(), data_json);
}

/* Emit o (taken) as the event's data. */
static void emit_obj(const char *type, const char *user, const char *session, cJSON *o)
{
        _cleanup_free_ char *text = o ? cJSON_PrintUnformatted(o) : NULL;

        cJSON_Delete(o);
        events_emit(type, user, session, text);
}

void events_session_stopped(const char *user, const char *session, const char *reason)
{
        cJSON *o = cJSON_CreateObject();

        cJSON_AddStringToObject(o, "reason", reason ? reason : "");
        emit_obj(EVENT_SESSION_STOPPED, user, session, o);
}

void events_execution_finished(const char *user, const char *session, const char *execution_id, const char *state,
                               const char *cause, int exit_code, int64_t duration_ms)
{
        cJSON *o = cJSON_CreateObject();

        cJSON_AddStringToObject(o, "execution_id", execution_id ? execution_id : "");
        cJSON_AddStringToObject(o, "state", state ? state : "");
        cJSON_AddStringToObject(o, "cause", cause ? cause : "");
        cJSON_AddNumberToObject(o, "exit_code", exit_code);
        cJSON_AddNumberToObject(o, "duration_ms", (double)duration_ms);
        emit_obj(EVENT_EXECUTION_FINISHED, user, session, o);
}

void events_egress_blocked(const char *user, const char *session, const char *host, int port, const char *reason)
{
        cJSON *o = cJSON_CreateObject();

        cJSON_AddStringToObject(o, "host", host ? host : "");
        cJSON_AddNumberToObject(o, "port", port);
        cJSON_AddStringToObject(o, "reason", reason ? reason : "");
        emit_obj(EVENT_EGRESS_BLOCKED, user, session, o);
}

/* The caps the refusals name, in the words of their messages (a config key,
 * a constant or a per-user quota): the first that matches (longer names
 * before their prefixes). The event's quota keeps its name from before the
 * config keys had sections: it is part of the event's format. */
static const struct {
        const char *needle;
        const char *quota;
} quota_names[] = {
        {"max_sessions_per_user", "max_sessions_per_user"},
        {"limits.sessions", "max_sessions"},
        {"limits.exec_per_session", "max_exec_per_session"},
        {"max_exec_per_user", "max_exec_per_user"},
        {"fair share", "exec_fair_share"},
        {"limits.exec_global", "max_exec_global"},
        {"max_services_per_session", "max_services_per_session"},
        {"API_IDEMPOTENCY_MAX_KEYS", "idempotency_max_keys"},
        {"egress_max_rules", "egress_max_rules"},
        {"workspace over its quota", "workspace_quota"},
        {"script cache is full", "max_scripts_per_user"},
        {"too many live tasks", "tasks_per_user"},
};

void events_request_refused(const char *user, const char *session, const char *method, const char *code,
                            const char *msg)
{
        cJSON *o;

        if (!code || !msg || (strcmp(code, "busy") != 0 && strcmp(code, "quota_exceeded") != 0))
                return;
        for (size_t i = 0; i < ELEMENTSOF(quota_names); i++) {
                if (!strstr(msg, quota_names[i].needle))
                        continue;
                o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "quota", quota_names[i].quota);
                cJSON_AddStringToObject(o, "method", method ? method : "");
                cJSON_AddStringToObject(o, "message", msg);
                emit_obj(EVENT_QUOTA_REACHED, user, session, o);
                return;
        }
}

/* ---- the writer ---- */

static bool sub_wants(const struct events_sub *s, const struct event *ev)
{
        return s->all || strcmp(s->user, ev->user) == 0;
}

static void fan_out(struct event **evs, size_t n)
{
        pthread_mutex_lock(&sub_lock);
        for (struct events_sub *s = subs; s; s = s->next) {
                for (size_t i = 0; i < n; i++) {
                        if (!sub_wants(s, evs[i]) || s->overflowed)
                                continue;
                        if (s->n == EVENTS_SUB_QUEUE) {
                                /* too slow: cut off, never buffered past the ring */
                                s->overflowed = true;
                                BUMP(st_overflowed, 1);
                                break;
                        }
                        s->ring[(s->head + s->n) % EVENTS_SUB_QUEUE] = event_ref(evs[i]);
                        s->n++;
                }
        }
        pthread_cond_broadcast(&sub_cond);
        pthread_mutex_unlock(&sub_lock);
}

static void prune(struct events *b, bool force)
{
        int64_t now = sbx_wall_ms();
        int r;

        if (!force && now - b->last_prune_ms < EVENTS_PRUNE_INTERVAL_MS &&
            b->since_prune < (b->cfg->events_max / 10 > 100 ? b->cfg->events_max / 10 : 100))
                return;
        b->last_prune_ms = now;
        b->since_prune = 0;
        r = store_events_prune(b->st, b->cfg->events_max, now - (int64_t)b->cfg->events_retention_s * 1000, false);
        if (r > 0)
                BUMP(st_pruned, (uint64_t)r);
        else if (r < 0)
                log_debug("events: prune: %s", strerror(-r));
}

static void write_batch(struct events *b, struct event **evs, size_t n)
{
        struct store_event rows[EVENTS_BATCH_MAX];
        static int64_t last_warn;
        int r;

        memset(rows, 0, n * sizeof(rows[0]));
        for (size_t i = 0; i < n; i++) {
                rows[i].ts = evs[i]->ts;
                sbx_strlcpy(rows[i].type, evs[i]->type, sizeof(rows[i].type));
                sbx_strlcpy(rows[i].user_id, evs[i]->user, sizeof(rows[i].user_id));
                sbx_strlcpy(rows[i].session_id, evs[i]->session, sizeof(rows[i].session_id));
                sbx_strlcpy(rows[i].trace_id, evs[i]->trace_id, sizeof(rows[i].trace_id));
                rows[i].data = evs[i]->data; /* borrowed */
        }
        r = store_events_append(b->st, rows, n);
        if (r < 0) {
                BUMP(st_dropped, n);
                if (sbx_now_ms() - last_warn > 60000) {
                        last_warn = sbx_now_ms();
                        log_warn("events: cannot write %zu events to the store: %s (dropped)", n, strerror(-r));
                }
                return;
        }
        for (size_t i = 0; i < n; i++)
                evs[i]->id = rows[i].id;
        BUMP(st_written, n);
        b->since_prune += (int64_t)n;
        fan_out(evs, n);
        if (b->listener)
                b->listener(rows[n - 1].id, b->listener_ud);
}

static void *writer_main(void *arg)
{
        struct events *b = arg;
        struct event *evs[EVENTS_BATCH_MAX];

        prune(b, true);
        for (;;) {
                size_t n = 0;
                bool stop;

                pthread_mutex_lock(&q_lock);
                if (!q_head && !q_stopping) {
                        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, 1000);
                        (void)pthread_cond_timedwait(&q_cond, &q_lock, &until);
                }
                while (q_head && n < EVENTS_BATCH_MAX) {
                        struct qnode *qn = q_head;
                        q_head = qn->next;
                        if (!q_head)
                                q_tail = NULL;
                        q_len--;
                        evs[n++] = qn->ev;
                        free(qn);
                }
                stop = q_stopping && !q_head;
                pthread_mutex_unlock(&q_lock);

                if (n)
                        write_batch(b, evs, n);
                for (size_t i = 0; i < n; i++)
                        event_unref(evs[i]);
                pthread_mutex_lock(&q_lock);
                handled_seq += n;
                pthread_cond_broadcast(&done_cond);
                pthread_mutex_unlock(&q_lock);
                prune(b, false);
                if (stop && n == 0)
                        break;
        }
        return NULL;
}

int events_open(const struct sbx_config *cfg, struct store *st, void (*listener)(int64_t newest_id, void *ud),
                void *listener_ud, struct events **ret, struct sbx_error *err)
{
        struct events *b;

        *ret = NULL;
        pthread_mutex_lock(&g_lock);
        if (bus) {
                pthread_mutex_unlock(&g_lock);
                log_debug("events: the log is owned by another daemon of this process");
                return 0;
        }
        b = calloc(1, sizeof(*b));
        if (!b) {
                pthread_mutex_unlock(&g_lock);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        b->cfg = cfg;
        b->st = st;
        b->listener = listener;
        b->listener_ud = listener_ud;
        pthread_mutex_lock(&q_lock);
        q_open = true;
        q_stopping = false;
        pthread_mutex_unlock(&q_lock);
        pthread_mutex_lock(&sub_lock);
        subs_closing = false;
        pthread_mutex_unlock(&sub_lock);
        if (pthread_create(&b->writer, NULL, writer_main, b) != 0) {
                pthread_mutex_lock(&q_lock);
                q_open = false;
                pthread_mutex_unlock(&q_lock);
                pthread_mutex_unlock(&g_lock);
                free(b);
                return sbx_error_set(err, -EAGAIN, 0, "cannot start the event writer thread");
        }
        b->started = true;
        pthread_setname_np(b->writer, "sbx-evlog");
        bus = b;
        pthread_mutex_unlock(&g_lock);
        *ret = b;
        return 0;
}

void events_close(struct events *b)
{
        if (!b)
                return;
        pthread_mutex_lock(&q_lock);
        q_stopping = true;
        pthread_cond_broadcast(&q_cond);
        pthread_mutex_unlock(&q_lock);
        if (b->started)
                pthread_join(b->writer, NULL);
        pthread_mutex_lock(&q_lock);
        q_open = false;
        pthread_mutex_unlock(&q_lock);
        /* subscribers see -ESHUTDOWN; their owners close them (the fronts stop first) */
        pthread_mutex_lock(&sub_lock);
        subs_closing = true;
        pthread_cond_broadcast(&sub_cond);
        pthread_mutex_unlock(&sub_lock);
        pthread_mutex_lock(&g_lock);
        bus = NULL;
        pthread_mutex_unlock(&g_lock);
        free(b);
}

int events_flush(int timeout_ms)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms);
        int r = 0;

        pthread_mutex_lock(&q_lock);
        uint64_t target = emitted_seq;
        while (q_open && handled_seq < target && r == 0)
                r = pthread_cond_timedwait(&done_cond, &q_lock, &until) == ETIMEDOUT ? -ETIMEDOUT : 0;
        pthread_mutex_unlock(&q_lock);
        return r;
}

void events_stats(struct events_stats *ret)
{
        memset(ret, 0, sizeof(*ret));
        ret->emitted = LOAD(st_emitted);
        ret->written = LOAD(st_written);
        ret->dropped = LOAD(st_dropped);
        ret->overflowed = LOAD(st_overflowed);
        ret->pruned = LOAD(st_pruned);
        pthread_mutex_lock(&sub_lock);
        ret->subscribers = n_subs;
        pthread_mutex_unlock(&sub_lock);
        pthread_mutex_lock(&q_lock);
        ret->queued = q_len;
        pthread_mutex_unlock(&q_lock);
}

/* ---- subscriptions ---- */

static struct store *bus_store(void)
{
        struct store *st;

        pthread_mutex_lock(&g_lock);
        st = bus ? bus->st : NULL;
        pthread_mutex_unlock(&g_lock);
        return st;
}

int events_subscribe(const char *user, int64_t after_id, struct events_sub **ret)
{
        struct store *st = bus_store();
        struct events_sub *s;
        size_t mine = 0;
        int64_t oldest, newest;
        int r;

        if (!st)
                return -ENODEV;
        if (user && !session_id_valid(user))
                return -EINVAL;
        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->all = !user;
        sbx_strlcpy(s->user, user ? user : "", sizeof(s->user));
        pthread_mutex_lock(&sub_lock);
        for (struct events_sub *o = subs; o; o = o->next)
                if (!o->all && user && strcmp(o->user, user) == 0)
                        mine++;
        if (subs_closing || n_subs >= EVENTS_SUBS_MAX || (user && mine >= EVENTS_SUBS_PER_USER)) {
                r = subs_closing ? -ESHUTDOWN : -EUSERS;
                pthread_mutex_unlock(&sub_lock);
                free(s);
                return r;
        }
        /* registered before the backlog is read: an event is in the store, the ring, or both */
        s->next = subs;
        subs = s;
        n_subs++;
        pthread_mutex_unlock(&sub_lock);
        if (after_id < 0) {
                r = store_events_bounds(st, &oldest, &newest);
                if (r < 0) {
                        events_sub_close(s);
                        return r;
                }
                after_id = newest;
        }
        s->last_id = after_id;
        *ret = s;
        return 0;
}

int64_t events_sub_last_id(const struct events_sub *s)
{
        return s->last_id;
}

static void ring_clear_locked(struct events_sub *s)
{
        while (s->n) {
                event_unref(s->ring[s->head]);
                s->head = (s->head + 1) % EVENTS_SUB_QUEUE;
                s->n--;
        }
        s->head = 0;
}

void events_sub_close(struct events_sub *s)
{
        if (!s)
                return;
        pthread_mutex_lock(&sub_lock);
        for (struct events_sub **pp = &subs; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                        *pp = s->next;
                        n_subs--;
                        break;
                }
        ring_clear_locked(s);
        pthread_mutex_unlock(&sub_lock);
        store_events_free(s->page, s->page_n);
        free(s);
}

static struct event *gap_event(const char *user, int64_t last_id, int64_t oldest)
{
        char data[128];
        struct event *ev;

        snprintf(data, sizeof(data), "{\"last_event_id\":%lld,\"oldest_id\":%lld}", (long long)last_id,
                 (long long)oldest);
        ev = event_new(EVENT_GAP, user, "", NULL, data);
        if (ev)
                ev->id = oldest - 1;
        return ev;
}

/* The backlog: the next stored event after last_id, a gap when the log no
 * longer holds what follows last_id, or 0 once the backlog is read. */
static int backlog_next(struct events_sub *s, struct store *st, struct event **ret)
{
        int64_t oldest, newest;
        int r;

        if (s->page_i < s->page_n) {
                struct event *ev = event_from_row(&s->page[s->page_i]);
                if (!ev)
                        return -ENOMEM;
                s->page_i++;
                s->last_id = ev->id;
                *ret = ev;
                return 1;
        }
        store_events_free(s->page, s->page_n);
        s->page = NULL;
        s->page_n = s->page_i = 0;
        r = store_events_bounds(st, &oldest, &newest);
        if (r < 0)
                return r;
        if (s->last_id + 1 < oldest) {
                struct event *ev = gap_event(s->all ? "" : s->user, s->last_id, oldest);
                if (!ev)
                        return -ENOMEM;
                s->last_id = ev->id;
                *ret = ev;
                return 1;
        }
        r = store_events_after(st, s->all ? NULL : s->user, s->last_id, EVENTS_PAGE, &s->page, &s->page_n);
        if (r < 0)
                return r;
        if (s->page_n > 0)
                return backlog_next(s, st, ret);
        return 0;
}

int events_sub_next(struct events_sub *s, int timeout_ms, struct event **ret)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, timeout_ms);
        struct store *st;
        int r;

        for (;;) {
                if (!s->live) {
                        st = bus_store();
                        if (!st)
                                return -ESHUTDOWN;
                        r = backlog_next(s, st, ret);
                        if (r != 0)
                                return r;
                        pthread_mutex_lock(&sub_lock);
                        if (s->overflowed) {
                                /* the ring lost events while the backlog was read: they are
                                 * in the store, so read on from there */
                                ring_clear_locked(s);
                                s->overflowed = false;
                                pthread_mutex_unlock(&sub_lock);
                                continue;
                        }
                        s->live = true;
                        pthread_mutex_unlock(&sub_lock);
                }
                pthread_mutex_lock(&sub_lock);
                while (s->n == 0 && !s->overflowed && !subs_closing) {
                        if (pthread_cond_timedwait(&sub_cond, &sub_lock, &until) == ETIMEDOUT) {
                                pthread_mutex_unlock(&sub_lock);
                                return 0;
                        }
                }
                if (s->n > 0) {
                        struct event *ev = s->ring[s->head];
                        s->head = (s->head + 1) % EVENTS_SUB_QUEUE;
                        s->n--;
                        pthread_mutex_unlock(&sub_lock);
                        if (ev->id <= s->last_id) { /* read from the backlog already */
                                event_unref(ev);
                                continue;
                        }
                        s->last_id = ev->id;
                        *ret = ev;
                        return 1;
                }
                r = s->overflowed ? -EPIPE : -ESHUTDOWN;
                pthread_mutex_unlock(&sub_lock);
                return r;
        }
}

/* ---- polling ---- */

void events_free_array(struct event **evs, size_t n)
{
        if (!evs)
                return;
        for (size_t i = 0; i < n; i++)
                event_unref(evs[i]);
        free(evs);
}

int events_read(const char *user, int64_t after_id, size_t limit, struct event ***ret, size_t *ret_n, bool *ret_gap,
                int64_t *ret_oldest, int64_t *ret_next)
{
        struct store *st = bus_store();
        struct store_event *rows = NULL;
        struct event **evs;
        size_t n = 0;
        int64_t oldest, newest;
        int r;

        if (!st)
                return -ENODEV;
        r = store_events_bounds(st, &oldest, &newest);
        if (r < 0)
                return r;
        *ret_gap = after_id >= 0 && after_id + 1 < oldest;
        *ret_oldest = oldest;
        if (after_id < 0 || limit == 0) {
                *ret = NULL;
                *ret_n = 0;
                *ret_next = after_id < 0 ? newest : after_id;
                return 0;
        }
        r = store_events_after(st, user, after_id, limit, &rows, &n);
        if (r < 0)
                return r;
        evs = calloc(n + 1, sizeof(*evs));
        if (!evs) {
                store_events_free(rows, n);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                evs[i] = event_from_row(&rows[i]);
                if (!evs[i]) {
                        events_free_array(evs, i);
                        store_events_free(rows, n);
                        return -ENOMEM;
                }
        }
        store_events_free(rows, n);
        *ret = evs;
        *ret_n = n;
        /* past a gap the resume point moves to the log's start; with a full page the last
         * row; with a short one, everything up to the newest id is seen for this user */
        *ret_next = n == limit ? evs[n - 1]->id : newest > after_id ? newest : after_id;
        if (n > 0 && evs[n - 1]->id > *ret_next)
                *ret_next = evs[n - 1]->id;
        return 0;
}
