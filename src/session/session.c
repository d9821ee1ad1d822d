/* session.c — the session manager: the key, the table of sessions and their
 * references, the manager's settings, and the one place a session's state
 * changes (session_change_locked).
 *
 * The other pieces: session_acquire.c (how a request gets a running session:
 * it waits, one step drives the transition it needs), session_container.c
 * (making the container),
 * session_info.c (snapshots), session_stop.c (taking containers away),
 * session_reconcile.c (after a restart); session_internal.h lists them.
 *
 * Locks: m->lock, then s->lock, never across a Docker call; a container is
 * made or removed inside s->transitioning (the rules in full:
 * session_internal.h). */
#include "sandboxd/session.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sandboxd/events.h"
#include "sandboxd/log.h"
#include "sandboxd/store.h"

#include "session_internal.h"

static const char *const state_names[] = {"CREATING", "RUNNING", "STOPPED", "ERROR", "PAUSED"};
_Static_assert(ELEMENTSOF(state_names) == SESSION_STATE_COUNT, "a name for every state");

const char *session_state_to_string(enum session_state s)
{
        return (unsigned)s < ELEMENTSOF(state_names) ? state_names[s] : "UNKNOWN";
}

int session_state_from_string(const char *s, enum session_state *ret)
{
        for (size_t i = 0; i < ELEMENTSOF(state_names); i++)
                if (s && strcmp(s, state_names[i]) == 0) {
                        *ret = (enum session_state)i;
                        return 0;
                }
        return -EINVAL;
}

int session_key_check(const char *user, const char *session, struct sbx_error *err)
{
        if (!session_id_valid(user))
                return sbx_error_set(err, -EINVAL, 0,
                                     "invalid user_id: must be 1-64 characters of [A-Za-z0-9_.-] and not '.' or '..'");
        if (!session_id_valid(session))
                return sbx_error_set(
                        err, -EINVAL, 0,
                        "invalid session_id: must be 1-64 characters of [A-Za-z0-9_.-] and not '.' or '..'");
        return 0;
}

static uint32_t fnv(uint32_t h, const char *p)
{
        for (; *p; p++)
                h = (h ^ (uint8_t)*p) * 16777619u;
        return h;
}

static unsigned key_hash(const char *user, const char *id)
{
        return fnv((fnv(2166136261u, user) ^ ':') * 16777619u, id) % N_BUCKETS;
}

static unsigned id_hash(const char *id)
{
        return fnv(2166136261u, id) % N_BUCKETS;
}

/* ---- persistence ---- */

static void persist_locked(struct session *s)
{
        struct store_session row = {0};
        int r;

        sbx_strlcpy(row.user_id, s->user, sizeof(row.user_id));
        sbx_strlcpy(row.session_id, s->id, sizeof(row.session_id));
        sbx_strlcpy(row.state, session_state_to_string(s->state), sizeof(row.state));
        sbx_strlcpy(row.container_id, s->container_id, sizeof(row.container_id));
        sbx_strlcpy(row.image, s->image, sizeof(row.image));
        sbx_strlcpy(row.network_mode, s->network_mode, sizeof(row.network_mode));
        sbx_strlcpy(row.last_error, s->last_error, sizeof(row.last_error));
        sbx_strlcpy(row.error_cause, s->error_cause, sizeof(row.error_cause));
        row.created_at = s->created_at;
        row.updated_at = sbx_wall_ms();
        row.last_activity = s->last_activity;
        row.paused_at = s->state == SESSION_PAUSED ? s->paused_at : 0;
        r = store_session_put(s->mgr->store, &row);
        if (r < 0)
                log_ctx(LOG_LEVEL_ERROR, s->user, s->id, s->container_id, "cannot persist session state %s: %s",
                        row.state, strerror(-r));
        else
                s->persisted = true;
}

/* The event log's line of a state change (events.h): session.created for a
 * new session's CREATING, session.resumed for RUNNING after PAUSED, then one
 * per state; nothing when the state stays. */
static void emit_state_event(const struct session *s, enum session_state state, const char *cause, const char *error)
{
        const char *type = NULL;
        cJSON *o;

        if (state == SESSION_CREATING) {
                if (!s->persisted)
                        events_emit(EVENT_SESSION_CREATED, s->user, s->id, NULL);
                return;
        }
        if (s->state == state)
                return;
        if (state == SESSION_STOPPED) {
                events_session_stopped(s->user, s->id, cause && *cause ? cause : "stopped");
                return;
        }
        o = cJSON_CreateObject();
        switch (state) {
        case SESSION_RUNNING:
        case SESSION_PAUSED:
                cJSON_AddStringToObject(o, "container_id", s->container_id);
                if (state == SESSION_PAUSED || s->state == SESSION_PAUSED)
                        cJSON_AddStringToObject(o, "reason", cause ? cause : "request");
                type = state == SESSION_PAUSED      ? EVENT_SESSION_PAUSED
                       : s->state == SESSION_PAUSED ? EVENT_SESSION_RESUMED
                                                    : EVENT_SESSION_RUNNING;
                break;
        case SESSION_ERROR:
                cJSON_AddStringToObject(o, "cause", cause ? cause : "");
                cJSON_AddStringToObject(o, "message", error ? error : "");
                type = EVENT_SESSION_ERROR;
                break;
        default:
                break;
        }
        _cleanup_free_ char *text = type ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        if (type)
                events_emit(type, s->user, s->id, text);
}

int session_change_locked(struct session *s, enum session_transition t, enum session_state state, const char *cause,
                          const char *error)
{
        if (!session_transition_allowed(t, s->state, state)) {
                const struct session_transition_row *row = session_transition_row(t);
                log_ctx(LOG_LEVEL_ERROR, s->user, s->id, s->container_id[0] ? s->container_id : NULL,
                        "session %s -> %s refused: not a transition '%s' may make", session_state_to_string(s->state),
                        session_state_to_string(state), row ? row->name : "?");
                return -EPERM;
        }
        if (t == SESSION_T_DESTROY) { /* its row is gone: the event alone, whatever the state was */
                log_ctx(LOG_LEVEL_INFO, s->user, s->id, NULL, "session %s -> destroyed",
                        session_state_to_string(s->state));
                s->state = state;
                events_session_stopped(s->user, s->id, "destroyed");
                return 0;
        }
        if (s->state != state)
                log_ctx(LOG_LEVEL_INFO, s->user, s->id, s->container_id[0] ? s->container_id : NULL,
                        "session %s -> %s%s%s", session_state_to_string(s->state), session_state_to_string(state),
                        cause ? ": " : "", cause ? cause : "");
        emit_state_event(s, state, cause, error);
        /* a pause or resume names its reason in the event only: error_cause keeps the last failure */
        bool pause_edge = state == SESSION_PAUSED || (state == SESSION_RUNNING && s->state == SESSION_PAUSED);
        s->state = state;
        if (cause && !pause_edge)
                sbx_strlcpy(s->error_cause, cause, sizeof(s->error_cause));
        if (error)
                sbx_strlcpy(s->last_error, error, sizeof(s->last_error));
        persist_locked(s);
        return 0;
}

/* ---- table ---- */

static struct session *session_alloc(struct session_manager *m, const char *user, const char *id)
{
        struct session *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->mgr = m;
        sbx_strlcpy(s->user, user, sizeof(s->user));
        sbx_strlcpy(s->id, id, sizeof(s->id));
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->cond, NULL);
        s->state = SESSION_STOPPED;
        s->created_at = s->last_activity = sbx_wall_ms();
        return s;
}

static void session_load_row(struct session *s, const struct store_session *row)
{
        enum session_state st = SESSION_ERROR;
        (void)session_state_from_string(row->state, &st);
        s->state = st;
        s->persisted = true;
        sbx_strlcpy(s->container_id, row->container_id, sizeof(s->container_id));
        sbx_strlcpy(s->image, row->image, sizeof(s->image));
        sbx_strlcpy(s->network_mode, row->network_mode, sizeof(s->network_mode));
        sbx_strlcpy(s->last_error, row->last_error, sizeof(s->last_error));
        sbx_strlcpy(s->error_cause, row->error_cause, sizeof(s->error_cause));
        s->created_at = row->created_at;
        s->last_activity = row->last_activity;
        s->paused_at = row->paused_at;
}

static struct session *find_locked(struct session_manager *m, const char *user, const char *id)
{
        for (struct session *s = m->buckets[key_hash(user, id)]; s; s = s->next)
                if (strcmp(s->user, user) == 0 && strcmp(s->id, id) == 0)
                        return s;
        return NULL;
}

static void insert_locked(struct session_manager *m, struct session *s)
{
        unsigned h = key_hash(s->user, s->id);
        s->next = m->buckets[h];
        m->buckets[h] = s;
        h = id_hash(s->id);
        s->next_by_id = m->by_id[h];
        m->by_id[h] = s;
        s->refs++; /* the table's own reference */
        m->n_sessions++;
}

int session_owner(struct session_manager *m, const char *id, char *ret_user, size_t size)
{
        size_t found = 0;

        pthread_mutex_lock(&m->lock);
        for (struct session *s = m->by_id[id_hash(id)]; s; s = s->next_by_id)
                if (strcmp(s->id, id) == 0 && found++ == 0)
                        sbx_strlcpy(ret_user, s->user, size);
        pthread_mutex_unlock(&m->lock);
        return found == 1 ? 0 : -ENOENT;
}

void session_unlink_locked(struct session_manager *m, struct session *s)
{
        for (struct session **pp = &m->buckets[key_hash(s->user, s->id)]; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                        *pp = s->next;
                        s->next = NULL;
                        for (struct session **qp = &m->by_id[id_hash(s->id)]; *qp; qp = &(*qp)->next_by_id)
                                if (*qp == s) {
                                        *qp = s->next_by_id;
                                        s->next_by_id = NULL;
                                        break;
                                }
                        m->n_sessions--;
                        s->refs--;
                        return;
                }
}

static void session_free(struct session *s)
{
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
}

void session_unref_locked(struct session *s)
{
        if (s && --s->refs == 0)
                session_free(s);
}

void session_unref(struct session *s)
{
        struct session_manager *m;
        bool last;

        if (!s)
                return;
        m = s->mgr;
        pthread_mutex_lock(&m->lock);
        last = --s->refs == 0;
        pthread_mutex_unlock(&m->lock);
        if (last)
                session_free(s);
}

/* Find the session, or make it (from its store row if there is one). */
static bool retired_locked(struct session_manager *m, const char *user, const char *id)
{
        for (size_t i = 0; i < m->retired_n; i++)
                if (strcmp(m->retired[i][1], id) == 0 && strcmp(m->retired[i][0], user) == 0)
                        return true;
        return false;
}

int session_retire(struct session_manager *m, const char *user, const char *session)
{
        int r = session_key_check(user, session, NULL);

        if (r < 0)
                return r;
        pthread_mutex_lock(&m->lock);
        if (!m->retired)
                m->retired = calloc(SESSION_RETIRED_MAX, sizeof(*m->retired));
        if (!m->retired) {
                pthread_mutex_unlock(&m->lock);
                return -ENOMEM;
        }
        if (!retired_locked(m, user, session)) {
                sbx_strlcpy(m->retired[m->retired_next][0], user, SESSION_KEY_MAX + 1);
                sbx_strlcpy(m->retired[m->retired_next][1], session, SESSION_KEY_MAX + 1);
                m->retired_next = (m->retired_next + 1) % SESSION_RETIRED_MAX;
                if (m->retired_n < SESSION_RETIRED_MAX)
                        m->retired_n++;
        }
        pthread_mutex_unlock(&m->lock);
        return 0;
}

int session_lookup_ref(struct session_manager *m, const char *user, const char *id, bool create, struct session **ret,
                       struct sbx_error *err)
{
        struct session *s;
        struct store_session row;
        int r;

        pthread_mutex_lock(&m->lock);
        s = find_locked(m, user, id);
        if (s) {
                s->refs++;
                pthread_mutex_unlock(&m->lock);
                *ret = s;
                return 0;
        }
        if (!create) {
                pthread_mutex_unlock(&m->lock);
                return -ENOENT;
        }
        if (m->retired && retired_locked(m, user, id)) {
                pthread_mutex_unlock(&m->lock);
                return sbx_error_set(err, -ENOENT, 0, "session %s:%s was destroyed for good", user, id);
        }
        bool full = false;
        r = session_admit_locked(m, NULL, user, &full, err);
        /* only limits.sessions refuses it and the fair share may make room:
         * session_admit decides (and forgets the key if it cannot) */
        if (r < 0 && !(full && session_share_possible_locked(m, user))) {
                pthread_mutex_unlock(&m->lock);
                return r;
        }
        s = session_alloc(m, user, id);
        if (!s) {
                pthread_mutex_unlock(&m->lock);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        if (store_session_get(m->store, user, id, &row) == 0)
                session_load_row(s, &row);
        insert_locked(m, s);
        s->refs++;
        pthread_mutex_unlock(&m->lock);
        *ret = s;
        return 0;
}

/* Copy references to every session (so no table lock is held while each
 * session is looked at). */
int session_all_refs(struct session_manager *m, struct session ***ret, size_t *ret_n)
{
        struct session **list;
        size_t n = 0;

        pthread_mutex_lock(&m->lock);
        list = calloc(m->n_sessions + 1, sizeof(*list));
        if (!list) {
                pthread_mutex_unlock(&m->lock);
                return -ENOMEM;
        }
        for (size_t b = 0; b < N_BUCKETS; b++)
                for (struct session *s = m->buckets[b]; s; s = s->next) {
                        s->refs++;
                        list[n++] = s;
                }
        pthread_mutex_unlock(&m->lock);
        *ret = list;
        *ret_n = n;
        return 0;
}

void session_refs_free(struct session **list, size_t n)
{
        for (size_t i = 0; i < n; i++)
                session_unref(list[i]);
        free(list);
}

/* ---- manager ---- */

static const char *default_policy(const char *user, const char *session, void *ud)
{
        const struct sbx_config *cfg = ud;
        return cfg->network_default;
}

int session_manager_new(const struct sbx_config *cfg, struct engine *d, struct store *st, struct portpool *pp,
                        const char *const *extra_labels, struct session_manager **ret, struct sbx_error *err)
{
        struct session_manager *m = calloc(1, sizeof(*m));
        struct store_session *rows = NULL;
        size_t n = 0;
        int r;

        if (!m)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        *m = (struct session_manager){
                .cfg = cfg, .engine = d, .store = st, .ports = pp, .policy = default_policy, .policy_ud = (void *)cfg};
        pthread_mutex_init(&m->lock, NULL);
        session_worker_init(&m->resumer, "sbx-resume", SESSION_RESUME_QUEUE);
        session_worker_init(&m->evictor, "sbx-evict", 0);
        for (size_t i = 0; extra_labels && extra_labels[i] && i < MAX_EXTRA_LABELS; i++)
                m->extra_labels[i] = strdup(extra_labels[i]);

        r = store_session_list(st, NULL, NULL, &rows, &n);
        if (r < 0) {
                session_manager_free(m);
                return sbx_error_set(err, r, 0, "cannot load sessions from the store: %s", strerror(-r));
        }
        for (size_t i = 0; i < n; i++) {
                struct session *s;
                if (strcmp(rows[i].state, "DESTROYED") == 0 || !session_id_valid(rows[i].user_id) ||
                    !session_id_valid(rows[i].session_id))
                        continue;
                s = session_alloc(m, rows[i].user_id, rows[i].session_id);
                if (!s)
                        break;
                session_load_row(s, &rows[i]);
                insert_locked(m, s);
        }
        free(rows);
        *ret = m;
        return 0;
}

void session_manager_free(struct session_manager *m)
{
        if (!m)
                return;
        session_resume_async_stop(m); /* its thread holds references */
        session_evictions_stop(m);    /* so does this one's queue */
        free(m->retired);
        for (size_t b = 0; b < N_BUCKETS; b++) {
                struct session *s = m->buckets[b];
                while (s) {
                        struct session *next = s->next;
                        /* callers must have released their references */
                        session_free(s);
                        s = next;
                }
        }
        for (size_t i = 0; i < MAX_EXTRA_LABELS; i++)
                free(m->extra_labels[i]);
        pthread_mutex_destroy(&m->lock);
        session_worker_destroy(&m->resumer);
        session_worker_destroy(&m->evictor);
        free(m);
}

static int register_handler(struct session_manager *m, struct handler *list, size_t *n, session_failure_fn fn,
                            void *userdata)
{
        int r = 0;
        pthread_mutex_lock(&m->lock);
        if (*n >= MAX_HANDLERS)
                r = -ENOSPC;
        else
                list[(*n)++] = (struct handler){fn, userdata};
        pthread_mutex_unlock(&m->lock);
        return r;
}

int session_register_failure_handler(struct session_manager *m, session_failure_fn fn, void *userdata)
{
        return register_handler(m, m->handlers, &m->n_handlers, fn, userdata);
}

int session_register_teardown_notice(struct session_manager *m, session_failure_fn fn, void *userdata)
{
        return register_handler(m, m->notices, &m->n_notices, fn, userdata);
}

void session_set_hub(struct session_manager *m, struct hub *h)
{
        m->runner = h;
}

void session_set_pool(struct session_manager *m, const struct session_pool_ops *ops, void *pool)
{
        m->pool_ops = ops;
        m->pool = pool;
}

void session_set_busy_check(struct session_manager *m, session_busy_fn fn, void *userdata)
{
        pthread_mutex_lock(&m->lock);
        m->busy_fn = fn;
        m->busy_ud = userdata;
        pthread_mutex_unlock(&m->lock);
}

void session_set_pause_check(struct session_manager *m, session_pause_block_fn fn, void *userdata)
{
        pthread_mutex_lock(&m->lock);
        m->pause_block_fn = fn;
        m->pause_block_ud = userdata;
        pthread_mutex_unlock(&m->lock);
}

void session_set_paused_cap(struct session_manager *m, session_user_cap_fn fn, void *userdata)
{
        pthread_mutex_lock(&m->lock);
        m->paused_cap_fn = fn;
        m->paused_cap_ud = userdata;
        pthread_mutex_unlock(&m->lock);
}

uint64_t session_evictions(struct session_manager *m)
{
        pthread_mutex_lock(&m->lock);
        uint64_t n = m->evictions;
        pthread_mutex_unlock(&m->lock);
        return n;
}

int session_find_container(struct session_manager *m, const char *container_id, char ret_user[SESSION_KEY_MAX + 1],
                           char ret_session[SESSION_KEY_MAX + 1])
{
        int r = -ENOENT;

        pthread_mutex_lock(&m->lock);
        for (size_t b = 0; b < N_BUCKETS && r < 0; b++)
                for (struct session *s = m->buckets[b]; s && r < 0; s = s->next) {
                        pthread_mutex_lock(&s->lock);
                        if (s->container_id[0] && strcmp(s->container_id, container_id) == 0) {
                                memcpy(ret_user, s->user, SESSION_KEY_MAX + 1);
                                memcpy(ret_session, s->id, SESSION_KEY_MAX + 1);
                                r = 0;
                        }
                        pthread_mutex_unlock(&s->lock);
                }
        pthread_mutex_unlock(&m->lock);
        return r;
}
void session_set_gateway(struct session_manager *m, struct gateway *gw)
{
        m->gateway = gw;
}

void session_set_network_policy(struct session_manager *m, session_network_policy_fn fn, void *userdata)
{
        pthread_mutex_lock(&m->lock);
        m->policy = fn ? fn : default_policy;
        m->policy_ud = fn ? userdata : (void *)m->cfg;
        pthread_mutex_unlock(&m->lock);
}

void session_set_runtime_policy(struct session_manager *m, session_runtime_fn fn, void *userdata)
{
        pthread_mutex_lock(&m->lock);
        m->runtime_fn = fn;
        m->runtime_ud = userdata;
        pthread_mutex_unlock(&m->lock);
}

void session_set_user_cap(struct session_manager *m, session_user_cap_fn fn, void *userdata)
{
        pthread_mutex_lock(&m->lock);
        m->user_cap_fn = fn;
        m->user_cap_ud = userdata;
        pthread_mutex_unlock(&m->lock);
}

const char *session_default_network(struct session_manager *m)
{
        return m->cfg->network_default;
}

const char *session_required_network(struct session_manager *m, const char *user, const char *id)
{
        session_network_policy_fn fn;
        void *ud;

        pthread_mutex_lock(&m->lock);
        fn = m->policy;
        ud = m->policy_ud;
        pthread_mutex_unlock(&m->lock);
        return fn(user, id, ud);
}

static void call_list(struct session_manager *m, const struct handler *list, const size_t *n_list, const char *user,
                      const char *id, const char *container_id, const char *cause)
{
        struct handler hs[MAX_HANDLERS];
        size_t n;

        pthread_mutex_lock(&m->lock);
        n = *n_list;
        memcpy(hs, list, n * sizeof(hs[0]));
        pthread_mutex_unlock(&m->lock);
        for (size_t i = 0; i < n; i++)
                hs[i].fn(user, id, container_id, cause, hs[i].userdata);
}

void session_call_handlers(struct session_manager *m, const char *user, const char *id, const char *container_id,
                           const char *cause)
{
        call_list(m, m->handlers, &m->n_handlers, user, id, container_id, cause);
}

void session_call_notices(struct session_manager *m, const char *user, const char *id, const char *container_id,
                          const char *cause)
{
        call_list(m, m->notices, &m->n_notices, user, id, container_id, cause);
}

void session_release(struct session *s)
{
        if (!s)
                return;
        pthread_mutex_lock(&s->lock);
        s->active_ops--;
        pthread_mutex_unlock(&s->lock);
        session_unref(s);
}

void session_container_id(struct session *s, char ret_id[65])
{
        pthread_mutex_lock(&s->lock);
        memcpy(ret_id, s->container_id, 65);
        pthread_mutex_unlock(&s->lock);
}
