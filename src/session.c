/* session.c — the session manager.
 *
 * Locks:
 *   m->lock   guards the hash table, every session's `refs` and `next`, the
 *             handler list and the resolved image id. Never held across a
 *             Docker call or together with a session lock taken after it
 *             (order: m->lock, then s->lock, and only for short copies).
 *   s->lock   guards every other field of a session. Never held across a
 *             Docker call either: a thread that must create, recreate or
 *             remove the container sets s->transitioning, drops the lock,
 *             does the Docker work, then retakes the lock, publishes the
 *             result and broadcasts s->cond. Others wait on s->cond, so for
 *             one key at most one container is ever being made.
 *
 * The store mirrors every state transition (written under s->lock: a local
 * sqlite write, not a Docker call), so a restart sees the last state. */
#include "sandboxd/session.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sandboxd/container.h"
#include "sandboxd/docker.h"
#include "sandboxd/log.h"
#include "sandboxd/gateway.h"
#include "sandboxd/portpool.h"
#include "sandboxd/runner.h"
#include "sandboxd/pool.h"
#include "sandboxd/quota.h"
#include "sandboxd/sessuid.h"
#include "sandboxd/store.h"
#include "sandboxd/wsquota.h"

#define N_BUCKETS 1024
#define MAX_HANDLERS 8
#define MAX_EXTRA_LABELS 8

struct session {
        struct session_manager *mgr;
        char user[SESSION_KEY_MAX + 1];
        char id[SESSION_KEY_MAX + 1];
        struct session *next; /* hash chain (m->lock) */
        int refs;             /* (m->lock) */

        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool transitioning; /* one thread is changing the container */
        bool destroyed;     /* gone from the table: a waiter must not bring it back */
        int active_ops;     /* references handed out by get_or_create */
        bool persisted;     /* the store has a row */
        enum session_state state;
        char container_id[65];
        char image[256];
        char network_mode[16];
        char runtime[16]; /* of the current container, as Docker reports it */
        char workspace[SBX_PATH_MAX];
        char last_error[1024];
        char error_cause[64];
        int64_t created_at;
        int64_t last_activity;
        uint64_t oom_events; /* of the current container */
        char ratchet_from[65]; /* networked container removed by the privacy ratchet, until its successor exists */
        bool pooled;           /* the current container came from the warm pool */
};

struct handler {
        session_failure_fn fn;
        void *userdata;
};

struct session_manager {
        const struct sbx_config *cfg;
        struct docker *docker;
        struct store *store;
        struct portpool *ports;
        char *extra_labels[MAX_EXTRA_LABELS + 1];

        pthread_mutex_t lock;
        struct session *buckets[N_BUCKETS];
        size_t n_sessions;
        struct handler handlers[MAX_HANDLERS];
        size_t n_handlers;
        session_network_policy_fn policy;
        void *policy_ud;
        session_runtime_fn runtime_fn; /* (m->lock) NULL: the engine's default runtime */
        void *runtime_ud;
        struct quota *quota; /* per-user limits; NULL: the config defaults */
        char image_id[80]; /* cfg->image resolved to its id, "" until first use */
        struct runner_hub *runner; /* NULL: containers run without the runner */
        struct pool *pool;         /* NULL: no warm pool */
        struct gateway *gateway;   /* NULL: no listeners, every session counts as private */
};

static const char *const state_names[] = {"CREATING", "RUNNING", "STOPPED", "ERROR"};

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

bool session_id_valid(const char *id)
{
        size_t n;

        if (!id)
                return false;
        n = strnlen(id, SESSION_KEY_MAX + 1);
        if (n == 0 || n > SESSION_KEY_MAX || strcmp(id, ".") == 0 || strcmp(id, "..") == 0)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = id[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                      c == '.' || c == '-'))
                        return false;
        }
        return true;
}

int session_key_check(const char *user, const char *session, struct sbx_error *err)
{
        if (!session_id_valid(user))
                return sbx_error_set(err, -EINVAL, 0,
                                     "invalid user_id: must be 1-64 characters of [A-Za-z0-9_.-] and not '.' or '..'");
        if (!session_id_valid(session))
                return sbx_error_set(err, -EINVAL, 0,
                                     "invalid session_id: must be 1-64 characters of [A-Za-z0-9_.-] and not '.' or '..'");
        return 0;
}

static unsigned key_hash(const char *user, const char *id)
{
        uint32_t h = 2166136261u;
        for (const char *p = user; *p; p++)
                h = (h ^ (uint8_t)*p) * 16777619u;
        h = (h ^ ':') * 16777619u;
        for (const char *p = id; *p; p++)
                h = (h ^ (uint8_t)*p) * 16777619u;
        return h % N_BUCKETS;
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
        r = store_session_put(s->mgr->store, &row);
        if (r < 0)
                log_ctx(LOG_LEVEL_ERROR, s->user, s->id, s->container_id, "cannot persist session state %s: %s",
                        row.state, strerror(-r));
        else
                s->persisted = true;
}

static void set_state_locked(struct session *s, enum session_state state, const char *cause, const char *error)
{
        if (s->state != state)
                log_ctx(LOG_LEVEL_INFO, s->user, s->id, s->container_id[0] ? s->container_id : NULL,
                        "session %s -> %s%s%s", session_state_to_string(s->state), session_state_to_string(state),
                        cause ? ": " : "", cause ? cause : "");
        s->state = state;
        if (cause)
                sbx_strlcpy(s->error_cause, cause, sizeof(s->error_cause));
        if (error)
                sbx_strlcpy(s->last_error, error, sizeof(s->last_error));
        persist_locked(s);
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
        s->refs++; /* the table's own reference */
        m->n_sessions++;
}

static void unlink_locked(struct session_manager *m, struct session *s)
{
        for (struct session **pp = &m->buckets[key_hash(s->user, s->id)]; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                        *pp = s->next;
                        s->next = NULL;
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

static void unref(struct session *s)
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

static bool live_locked(const struct session *s)
{
        return s->state == SESSION_RUNNING || s->state == SESSION_CREATING || s->transitioning;
}

/* Live sessions on the daemon and of `user`, not counting `skip` (whose
 * lock the caller may hold). Under m->lock; takes each other s->lock in
 * turn (order: m->lock, then s->lock; a second session lock is safe here
 * because every other path holds at most one, and counting passes are
 * serialised by m->lock). */
static void live_count_locked(struct session_manager *m, const struct session *skip, const char *user,
                              size_t *ret_all, size_t *ret_user)
{
        size_t n = 0, mine = 0;
        for (size_t b = 0; b < N_BUCKETS; b++)
                for (struct session *s = m->buckets[b]; s; s = s->next) {
                        if (s == skip)
                                continue;
                        pthread_mutex_lock(&s->lock);
                        if (live_locked(s)) {
                                n++;
                                if (strcmp(s->user, user) == 0)
                                        mine++;
                        }
                        pthread_mutex_unlock(&s->lock);
                }
        *ret_all = n;
        *ret_user = mine;
}

/* May one more session of `user` become live? Under m->lock. */
static int admit_locked(struct session_manager *m, const struct session *skip, const char *user,
                        struct sbx_error *err)
{
        struct quota_limits lim;
        size_t all, mine;

        quota_limits_get(m->quota, m->cfg, user, &lim); /* q->lock is a leaf */
        live_count_locked(m, skip, user, &all, &mine);
        if ((int64_t)mine >= lim.sessions)
                return sbx_error_set(err, -EUSERS, 0,
                                     "busy: too many sessions: this user has %zu live sessions "
                                     "(max_sessions_per_user=%" PRId64 "); destroy one or let one expire",
                                     mine, lim.sessions);
        if (all >= (size_t)m->cfg->max_sessions)
                return sbx_error_set(err, -EUSERS, 0, "busy: too many sessions: the limit max_sessions=%d is reached",
                                     m->cfg->max_sessions);
        return 0;
}

/* Find the session, or make it (from its store row if there is one). */
static int lookup_ref(struct session_manager *m, const char *user, const char *id, bool create, struct session **ret,
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
        r = admit_locked(m, NULL, user, err);
        if (r < 0) {
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

/* ---- manager ---- */

static const char *default_policy(const char *user, const char *session, void *ud)
{
        const struct sbx_config *cfg = ud;
        return cfg->network_default;
}

int session_manager_new(const struct sbx_config *cfg, struct docker *d, struct store *st, struct portpool *pp,
                        const char *const *extra_labels, struct session_manager **ret, struct sbx_error *err)
{
        struct session_manager *m = calloc(1, sizeof(*m));
        struct store_session *rows = NULL;
        size_t n = 0;
        int r;

        if (!m)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        m->cfg = cfg;
        m->docker = d;
        m->store = st;
        m->ports = pp;
        m->policy = default_policy;
        m->policy_ud = (void *)cfg;
        pthread_mutex_init(&m->lock, NULL);
        for (size_t i = 0; extra_labels && extra_labels[i] && i < MAX_EXTRA_LABELS; i++)
                m->extra_labels[i] = strdup(extra_labels[i]);

        r = store_session_list(st, NULL, NULL, &rows, &n);
        if (r < 0) {
                session_manager_free(m);
                return sbx_error_set(err, r, 0, "cannot load sessions from the store: %s", strerror(-r));
        }
        for (size_t i = 0; i < n; i++) {
                struct session *s;
                if (strcmp(rows[i].state, "DESTROYED") == 0 ||
                    !session_id_valid(rows[i].user_id) || !session_id_valid(rows[i].session_id))
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
        free(m);
}

int session_register_failure_handler(struct session_manager *m, session_failure_fn fn, void *userdata)
{
        int r = 0;
        pthread_mutex_lock(&m->lock);
        if (m->n_handlers >= MAX_HANDLERS)
                r = -ENOSPC;
        else
                m->handlers[m->n_handlers++] = (struct handler){fn, userdata};
        pthread_mutex_unlock(&m->lock);
        return r;
}

void session_set_runner_hub(struct session_manager *m, struct runner_hub *h) { m->runner = h; }

void session_set_pool(struct session_manager *m, struct pool *p) { m->pool = p; }

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
void session_set_gateway(struct session_manager *m, struct gateway *gw) { m->gateway = gw; }

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

void session_set_quota(struct session_manager *m, struct quota *q)
{
        pthread_mutex_lock(&m->lock);
        m->quota = q;
        pthread_mutex_unlock(&m->lock);
}

const char *session_default_network(struct session_manager *m) { return m->cfg->network_default; }

static const char *required_network(struct session_manager *m, const char *user, const char *id)
{
        session_network_policy_fn fn;
        void *ud;

        pthread_mutex_lock(&m->lock);
        fn = m->policy;
        ud = m->policy_ud;
        pthread_mutex_unlock(&m->lock);
        return fn(user, id, ud);
}

static void call_handlers(struct session_manager *m, const char *user, const char *id, const char *container_id,
                          const char *cause)
{
        struct handler hs[MAX_HANDLERS];
        size_t n;

        pthread_mutex_lock(&m->lock);
        n = m->n_handlers;
        memcpy(hs, m->handlers, n * sizeof(hs[0]));
        pthread_mutex_unlock(&m->lock);
        for (size_t i = 0; i < n; i++)
                hs[i].fn(user, id, container_id, cause, hs[i].userdata);
}

/* Resolve cfg->image to its id once, so every container of this daemon runs
 * the same image even if the tag moves. */
static int resolve_image(struct session_manager *m, char ret[256], struct sbx_error *err)
{
        struct docker_image_info info;
        int r;

        pthread_mutex_lock(&m->lock);
        sbx_strlcpy(ret, m->image_id, 256);
        pthread_mutex_unlock(&m->lock);
        if (ret[0])
                return 0;
        struct sbx_error e = {0};
        r = docker_image_inspect(m->docker, m->cfg->image, &info, &e);
        if (err)
                *err = e;
        if (r == -ENOENT && e.http_status == 404)
                return sbx_error_set(err, -ENOENT, 404,
                                     "image '%s' does not exist on the Docker engine; build it with "
                                     "scripts/build-images.sh",
                                     m->cfg->image);
        if (r < 0) {
                sbx_error_prefix(err, "resolving image %s", m->cfg->image);
                return r;
        }
        pthread_mutex_lock(&m->lock);
        sbx_strlcpy(m->image_id, info.id, sizeof(m->image_id));
        pthread_mutex_unlock(&m->lock);
        sbx_strlcpy(ret, info.id, 256);
        return 0;
}

/* The image of s: the one create_session chose (store_session_options),
 * while the operator still allows it, else the config's. */
static int session_image(struct session_manager *m, struct session *s, char ret[256], struct sbx_error *err)
{
        struct store_session_options o = {0};
        struct docker_image_info info;
        int r;

        if (store_session_options_get(m->store, s->user, s->id, &o) < 0 || !o.image[0] ||
            strcmp(o.image, m->cfg->image) == 0) {
                store_session_options_done(&o);
                return resolve_image(m, ret, err);
        }
        store_session_options_done(&o);
        if (!config_image_allowed(m->cfg, o.image))
                return sbx_error_set(err, -EACCES, 0, "image '%s' is no longer among the allowed images", o.image);
        r = docker_image_inspect(m->docker, o.image, &info, err);
        if (r < 0) {
                sbx_error_prefix(err, "resolving image %s", o.image);
                return r;
        }
        sbx_strlcpy(ret, info.id, 256);
        return 0;
}

/* Cause from an inspect of a container that is no longer running. */
static void describe_exit(const struct docker_container_info *info, char *buf, size_t size)
{
        if (info->oom_killed)
                snprintf(buf, size, "oom_killed");
        else
                snprintf(buf, size, "exited with code %d", info->exit_code);
}

/* Remove the old container (if any) and release nothing: the port block
 * stays with the session across a recreation. Runs without locks. */
static int make_container(struct session *s, const char *old_id, const char **network, char ret_id[65],
                          char ret_image[256], char ret_workspace[SBX_PATH_MAX], char ret_runtime[16],
                          struct sbx_error *err)
{
        struct session_manager *m = s->mgr;
        const struct sbx_config *cfg = m->cfg;
        _cleanup_free_ int *ports = NULL;
        struct container_params p = {0};
        session_runtime_fn runtime_fn;
        void *runtime_ud;
        uid_t uid;
        int r;

        /* The runtime first: a runtime that cannot run refuses the session before anything changes. */
        pthread_mutex_lock(&m->lock);
        runtime_fn = m->runtime_fn;
        runtime_ud = m->runtime_ud;
        pthread_mutex_unlock(&m->lock);
        ret_runtime[0] = '\0';
        if (runtime_fn) {
                r = runtime_fn(s->user, ret_runtime, err, runtime_ud);
                if (r < 0)
                        return r;
        }
        if (strcmp(ret_runtime, "runsc") == 0)
                *network = "none"; /* gVisor sessions are sealed (runtime.c says why) */

        if (old_id && old_id[0]) {
                r = container_remove(m->docker, old_id, err);
                if (r < 0) {
                        sbx_error_prefix(err, "removing the old container %.12s", old_id);
                        return r;
                }
                (void)store_container_removed(m->store, old_id, "replaced", sbx_wall_ms());
        }
        r = session_image(m, s, ret_image, err);
        if (r < 0)
                return r;
        /* The session's own host uid: recorded at its first container, the same for every later one. */
        r = sessuid_get_or_assign(m->store, cfg, s->user, s->id, &uid, err);
        if (r < 0)
                return r;
        r = container_workspace_ensure(cfg, s->user, s->id, uid, ret_workspace, err);
        if (r == 0)
                r = wsquota_attach(cfg, s->user, s->id, err);
        if (r < 0)
                return r;
        /* Without a usable runner binary the container runs the image's own
         * command and executions fall back to docker exec. */
        char runner_dir[SBX_PATH_MAX];
        /* Not under gVisor: with the runner as its main process the gVisor sandbox of Debian 12's
         * runsc dies within seconds ("shim disconnected"), so runsc sessions use docker exec. */
        const char *runner_bin = strcmp(ret_runtime, "runsc") == 0 ? NULL : runner_hub_binary(m->runner);
        if (runner_bin) {
                struct sbx_error re = {0};
                if (runner_hub_prepare(m->runner, s->user, s->id, runner_dir, &re) < 0) {
                        log_ctx(LOG_LEVEL_WARN, s->user, s->id, NULL, "no runner for this container: %s", re.msg);
                        runner_bin = NULL;
                }
        }
        /* A private session is served nothing: no listeners, no egress, and
         * its block goes back to the pool. Anyone else keeps a fixed block,
         * on which the gateway listens (no PortBindings). A port can be taken
         * by something else between the pool's probe and the gateway's bind:
         * then the next block is tried (the pool moves on). */
        bool priv = gateway_is_private(m->gateway, s->user, s->id);
        bool sealed = strcmp(*network, "none") == 0;
        /* a sealed container without a runner (gVisor, no binary) cannot be reached at all */
        bool no_block = priv || (sealed && !runner_bin);
        for (int attempt = 0;; attempt++) {
                struct sbx_error e = {0};

                if (no_block) {
                        (void)portpool_release(m->ports, s->user, s->id);
                } else if (cfg->ports_per_session > 0) {
                        if (!ports)
                                ports = calloc((size_t)cfg->ports_per_session, sizeof(int));
                        if (!ports)
                                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
                        r = portpool_reserve_block(m->ports, s->user, s->id, ports, err);
                        if (r < 0)
                                return r;
                }
                size_t n_ports = !no_block && ports ? (size_t)cfg->ports_per_session : 0;
                r = gateway_open(m->gateway, s->user, s->id, runner_bin ? runner_dir : NULL, ports, n_ports,
                                 sealed && !priv, &e);
                if (r == -EADDRINUSE && attempt < 2) {
                        log_ctx(LOG_LEVEL_WARN, s->user, s->id, NULL, "a port was taken meanwhile, retrying: %s",
                                e.msg);
                        (void)portpool_release(m->ports, s->user, s->id);
                        continue;
                }
                if (r < 0) {
                        if (err)
                                *err = e;
                        (void)portpool_release(m->ports, s->user, s->id);
                        gateway_drop(m->gateway, s->user, s->id);
                        return r;
                }
                p.user = s->user;
                p.session = s->id;
                p.image = ret_image;
                p.network_mode = *network;
                /* the proxy variables only where something answers on the endpoint */
                p.egress_proxy = sealed && !priv && runner_bin;
                p.runtime = ret_runtime[0] ? ret_runtime : NULL;
                p.workspace = ret_workspace;
                p.uid = uid;
                p.extra_labels = (const char *const *)m->extra_labels;
                p.runner_binary = runner_bin;
                p.runner_dir = runner_bin ? runner_dir : NULL;
                r = container_create_started(m->docker, cfg, &p, ret_id, &e);
                if (r < 0 && p.runtime && strcmp(p.runtime, "runsc") == 0)
                        sbx_error_prefix(&e, "under gVisor (runsc)");
                if (err)
                        *err = e;
                if (r == 0)
                        break;
                (void)portpool_release(m->ports, s->user, s->id);
                gateway_drop(m->gateway, s->user, s->id);
                return r;
        }
        (void)portpool_set_container(m->ports, s->user, s->id, ret_id);
        (void)store_container_add(m->store, ret_id, s->user, s->id, ret_image, *network, sbx_wall_ms());
        return 0;
}

/* Inspect the container of a RUNNING session: 0 if usable as is, else a
 * reason to (re)create in cause. -errno for a Docker failure. */
static int validate(struct session_manager *m, const char *id, const char *network, char *cause, size_t size,
                    char ret_runtime[16], struct sbx_error *err)
{
        struct docker_container_info info;
        int r = docker_container_inspect(m->docker, id, &info, err);

        if (r == -ENOENT) {
                snprintf(cause, size, "removed");
                return 1;
        }
        if (r < 0)
                return r;
        if (!info.running) {
                describe_exit(&info, cause, size);
                return 1;
        }
        if (strcmp(network, "none") == 0 && info.has_network) {
                snprintf(cause, size, "privacy_ratchet");
                return 1;
        }
        sbx_strlcpy(ret_runtime, info.runtime, 16);
        return 0;
}

/* The audit record of a FULL → NONE transition: old and new container. */
static void audit_ratchet(struct session_manager *m, const char *user, const char *id, const char *old_id,
                          const char *new_id)
{
        char detail[256];
        snprintf(detail, sizeof(detail), "{\"old_container\":\"%s\",\"new_container\":\"%s\",\"network_mode\":\"none\"}",
                 old_id, new_id ? new_id : "");
        (void)store_audit(m->store, "daemon", user, id, "privacy.ratchet", detail);
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

        have_runner = runner_hub_binary(m->runner) && runner_hub_prepare(m->runner, s->user, s->id, runner_dir, &e) == 0;
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
        struct pool_claim c = {0};
        struct sbx_error e = {0};
        char image[256];
        int r;

        if (!m->pool)
                return -ENOENT;
        pthread_mutex_lock(&m->lock);
        bool runtime_policy = m->runtime_fn != NULL;
        session_runtime_fn fn = m->runtime_fn;
        void *ud = m->runtime_ud;
        pthread_mutex_unlock(&m->lock);
        ret_runtime[0] = '\0';
        if (runtime_policy && (fn(s->user, ret_runtime, &e, ud) < 0 || (ret_runtime[0] && strcmp(ret_runtime, "runc") != 0)))
                return -ENOENT; /* runsc, or a runtime that refuses: the cold path says why */
        sbx_strlcpy(image, m->cfg->image, sizeof(image));
        if (store_session_options_get(m->store, s->user, s->id, &o) == 0 && o.image[0])
                sbx_strlcpy(image, o.image, sizeof(image));
        store_session_options_done(&o);
        if (gateway_is_private(m->gateway, s->user, s->id) || !pool_applies(m->pool, s->user, s->id, network))
                return -ENOENT;
        if (pool_claim(m->pool, s->user, s->id, network, image, &c, &e) < 0)
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

int session_get_or_create(struct session_manager *m, const char *user, const char *id, struct session **ret,
                          struct sbx_error *err)
{
        struct session *s;
        char old_id[65], new_id[65], image[256], workspace[SBX_PATH_MAX], cause[128], runtime[16];
        const char *network;
        bool notified = false;
        int r;

        r = session_key_check(user, id, err);
        if (r < 0)
                return r;
        r = lookup_ref(m, user, id, true, &s, err);
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
                        unref(s);
                        return sbx_error_set(err, -ENOENT, 0, "session %s:%s was destroyed while this request waited",
                                             user, id);
                }

                cause[0] = '\0';
                if (s->state == SESSION_RUNNING && s->container_id[0]) {
                        memcpy(old_id, s->container_id, sizeof(old_id));
                        s->active_ops++;
                        pthread_mutex_unlock(&s->lock);
                        /* The actual container is inspected before every use, never a cached view:
                         * it may have died, vanished, or now need a network it must not have. */
                        network = required_network(m, user, id);
                        /* A live runner (heartbeats; its death closes the socket at once) vouches
                         * for its container, so the exec path needs no inspect. A session that
                         * must have no network is still inspected: the ratchet is checked on
                         * the container itself. */
                        if (strcmp(network, "none") != 0 && runner_hub_wait(m->runner, user, id, 0)) {
                                r = 0;
                                sbx_strlcpy(runtime, "runc", sizeof(runtime)); /* never a runner under runsc */
                        } else {
                                r = validate(m, old_id, network, cause, sizeof(cause), runtime, err);
                        }
                        pthread_mutex_lock(&s->lock);
                        if (r == 0) {
                                if (strcmp(s->container_id, old_id) == 0) /* adopted ones learn it here */
                                        sbx_strlcpy(s->runtime, runtime, sizeof(s->runtime));
                                touch_locked(s);
                                pthread_mutex_unlock(&s->lock);
                                *ret = s;
                                return 0;
                        }
                        s->active_ops--;
                        if (r < 0) {
                                pthread_mutex_unlock(&s->lock);
                                sbx_error_prefix(err, "checking the session's container");
                                unref(s);
                                return r;
                        }
                        if (s->transitioning || strcmp(s->container_id, old_id) != 0)
                                continue; /* someone else already acted on it */
                        if (s->state == SESSION_RUNNING && strcmp(cause, "privacy_ratchet") != 0) {
                                char msg[256];
                                snprintf(msg, sizeof(msg), "container %.12s failed: %s", old_id, cause);
                                set_state_locked(s, SESSION_ERROR, cause, msg);
                                pthread_mutex_unlock(&s->lock);
                                call_handlers(m, user, id, old_id, cause);
                                pthread_mutex_lock(&s->lock);
                                notified = true;
                                continue;
                        }
                }

                /* A session that is not live counts against the caps again
                 * from here on: admitted under m->lock together with the
                 * mark, so two threads cannot both take the last slot. */
                if (!live_locked(s)) {
                        pthread_mutex_unlock(&s->lock);
                        pthread_mutex_lock(&m->lock);
                        pthread_mutex_lock(&s->lock);
                        if (live_locked(s)) { /* someone else got there first */
                                pthread_mutex_unlock(&m->lock);
                                continue;
                        }
                        r = admit_locked(m, s, user, err);
                        if (r == 0)
                                s->transitioning = true;
                        pthread_mutex_unlock(&m->lock);
                        if (r < 0) {
                                pthread_mutex_unlock(&s->lock);
                                unref(s);
                                return r;
                        }
                }
                /* (Re)create. Only this thread does it; the others wait on s->cond. */
                s->transitioning = true;
                memcpy(old_id, s->container_id, sizeof(old_id));
                if (!cause[0])
                        snprintf(cause, sizeof(cause), "%s", s->state == SESSION_ERROR ? "recreated" : "");
                set_state_locked(s, SESSION_CREATING, NULL, NULL);
                pthread_mutex_unlock(&s->lock);

                r = 0;
                network = required_network(m, user, id);
                if (old_id[0] && cause[0] && !notified)
                        call_handlers(m, user, id, old_id, cause);
                s->pooled = false;
                new_id[0] = '\0';
                if (!old_id[0] && try_pool(s, network, new_id, image, workspace, runtime) == 0)
                        s->pooled = true;
                else {
                        if (new_id[0]) /* claimed but not servable: replaced like a failed container */
                                memcpy(old_id, new_id, sizeof(old_id));
                        pool_make_room(m->pool); /* slots count against max_sessions */
                        r = make_container(s, old_id, &network, new_id, image, workspace, runtime, err);
                }

                pthread_mutex_lock(&s->lock);
                s->transitioning = false;
                if (r < 0) {
                        s->container_id[0] = '\0';
                        set_state_locked(s, SESSION_ERROR, "create_failed", err ? err->msg : "creation failed");
                        pthread_cond_broadcast(&s->cond);
                        pthread_mutex_unlock(&s->lock);
                        log_ctx(LOG_LEVEL_WARN, user, id, NULL, "cannot create container: %s",
                                err ? err->msg : strerror(-r));
                        unref(s);
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
                        audit_ratchet(m, user, id, s->ratchet_from, new_id);
                        s->ratchet_from[0] = '\0';
                }
                s->active_ops++;
                s->last_activity = sbx_wall_ms();
                set_state_locked(s, SESSION_RUNNING, NULL, NULL);
                pthread_cond_broadcast(&s->cond);
                pthread_mutex_unlock(&s->lock);
                *ret = s;
                return 0;
        }
}

void session_release(struct session *s)
{
        if (!s)
                return;
        pthread_mutex_lock(&s->lock);
        s->active_ops--;
        pthread_mutex_unlock(&s->lock);
        unref(s);
}

const char *session_user(const struct session *s) { return s->user; }
const char *session_name(const struct session *s) { return s->id; }

void session_container_id(struct session *s, char ret_id[65])
{
        pthread_mutex_lock(&s->lock);
        memcpy(ret_id, s->container_id, 65);
        pthread_mutex_unlock(&s->lock);
}

/* ---- snapshots ---- */

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
        sbx_strlcpy(info->workspace, s->workspace, sizeof(info->workspace));
        sbx_strlcpy(info->last_error, s->last_error, sizeof(info->last_error));
        sbx_strlcpy(info->error_cause, s->error_cause, sizeof(info->error_cause));
        info->created_at = s->created_at;
        info->last_activity = s->last_activity;
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
        int r = lookup_ref(m, user, id, false, &s, NULL);
        if (r < 0)
                return r;
        pthread_mutex_lock(&s->lock);
        snapshot_locked(s, ret);
        pthread_mutex_unlock(&s->lock);
        unref(s);
        fill_ports(m, ret);
        return 0;
}

/* Copy references to every session (so no table lock is held while each
 * session is looked at). */
static int all_refs(struct session_manager *m, struct session ***ret, size_t *ret_n)
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

static void refs_free(struct session **list, size_t n)
{
        for (size_t i = 0; i < n; i++)
                unref(list[i]);
        free(list);
}

/* Copy out every session that `take` accepts, each under its own lock, into
 * a malloc'd array of elem-sized slots; no table lock is held meanwhile. */
static int collect(struct session_manager *m, bool (*take)(struct session *s, void *slot, void *ud), void *ud,
                   size_t elem, void **ret, size_t *ret_n)
{
        struct session **all;
        char *out;
        size_t n, k = 0;
        int r = all_refs(m, &all, &n);

        if (r < 0)
                return r;
        out = calloc(n + 1, elem);
        if (!out) {
                refs_free(all, n);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                pthread_mutex_lock(&all[i]->lock);
                if (take(all[i], out + k * elem, ud))
                        k++;
                pthread_mutex_unlock(&all[i]->lock);
        }
        refs_free(all, n);
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

void session_counts(struct session_manager *m, size_t counts[4])
{
        memset(counts, 0, 4 * sizeof(size_t));
        pthread_mutex_lock(&m->lock);
        for (size_t b = 0; b < N_BUCKETS; b++)
                for (struct session *s = m->buckets[b]; s; s = s->next) {
                        pthread_mutex_lock(&s->lock);
                        if ((unsigned)s->state < 4)
                                counts[s->state]++;
                        pthread_mutex_unlock(&s->lock);
                }
        pthread_mutex_unlock(&m->lock);
}

static bool take_running(struct session *s, void *slot, void *ud)
{
        struct session_ref *ref = slot;
        if (s->state != SESSION_RUNNING || s->transitioning || !s->container_id[0])
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

/* ---- failures ---- */

/* How specific a cause is: a later event may refine "exited" into "stopped"
 * (docker stop) or "removed" (docker rm -f), never the other way. */
static int cause_rank(const char *cause)
{
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
        bool changed = false, first = false;
        char msg[256];

        if (lookup_ref(m, user, id, false, &s, NULL) < 0)
                return false;
        pthread_mutex_lock(&s->lock);
        if (!s->transitioning && strcmp(s->container_id, container_id) == 0) {
                snprintf(msg, sizeof(msg), "container %.12s failed: %s", container_id, cause);
                if (s->state == SESSION_RUNNING) {
                        set_state_locked(s, SESSION_ERROR, cause, msg);
                        changed = first = true;
                } else if (s->state == SESSION_ERROR && cause_rank(cause) > cause_rank(s->error_cause)) {
                        set_state_locked(s, SESSION_ERROR, cause, msg);
                        changed = true;
                }
        }
        pthread_mutex_unlock(&s->lock);
        unref(s);
        if (first)
                call_handlers(m, user, id, container_id, cause);
        return changed;
}

static void end_teardown(struct session *s, enum session_state state, const char *cause);

/* The session's container is gone: its workspace image is unmounted
 * (workspace_quota_mode loop). Called inside the session's transition. */
static void release_workspace(struct session_manager *m, const char *user, const char *id)
{
        struct sbx_error err = {0};

        if (wsquota_detach(m->cfg, user, id, &err) < 0)
                log_ctx(LOG_LEVEL_WARN, user, id, NULL, "%s", err.msg);
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

int session_enforce_network(struct session_manager *m, const char *user, const char *id, struct sbx_error *err)
{
        struct docker_container_info info;
        struct session *s;
        char cid[65];
        int r;

        /* a sealed container has nothing to remove: the ratchet is the gateway
         * closing its listeners, its sockets and its tunnels */
        gateway_enforce(m->gateway, user, id);
        if (lookup_ref(m, user, id, false, &s, NULL) < 0)
                return 0; /* no container yet: the first one is made with the required mode */
        pthread_mutex_lock(&s->lock);
        while (s->transitioning)
                pthread_cond_wait(&s->cond, &s->lock);
        if (!s->container_id[0]) {
                pthread_mutex_unlock(&s->lock);
                unref(s);
                return 0;
        }
        s->transitioning = true;
        memcpy(cid, s->container_id, sizeof(cid));
        pthread_mutex_unlock(&s->lock);

        r = docker_container_inspect(m->docker, cid, &info, err);
        if (r == -ENOENT || (r == 0 && !(strcmp(required_network(m, user, id), "none") == 0 && info.has_network))) {
                /* gone already, or already as required: nothing to take away */
                pthread_mutex_lock(&s->lock);
                s->transitioning = false;
                pthread_cond_broadcast(&s->cond);
                pthread_mutex_unlock(&s->lock);
                unref(s);
                return 0;
        }
        if (r == 0)
                r = container_remove(m->docker, cid, err);
        if (r < 0) {
                pthread_mutex_lock(&s->lock);
                s->transitioning = false;
                pthread_cond_broadcast(&s->cond);
                pthread_mutex_unlock(&s->lock);
                unref(s);
                sbx_error_prefix(err, "removing the networked container %.12s", cid);
                return r;
        }
        (void)store_container_removed(m->store, cid, "privacy_ratchet", sbx_wall_ms());
        (void)portpool_release(m->ports, user, id);
        release_workspace(m, user, id);
        pthread_mutex_lock(&s->lock);
        memcpy(s->ratchet_from, cid, sizeof(s->ratchet_from));
        /* what it has now, and all it will ever get: no session view shows the old network again */
        sbx_strlcpy(s->network_mode, "none", sizeof(s->network_mode));
        pthread_mutex_unlock(&s->lock);
        end_teardown(s, SESSION_STOPPED, "privacy_ratchet");
        call_handlers(m, user, id, cid, "privacy_ratchet");
        log_ctx(LOG_LEVEL_INFO, user, id, cid, "privacy ratchet: networked container removed");
        unref(s);
        return 0;
}

void session_note_oom(struct session_manager *m, const char *user, const char *id, const char *container_id)
{
        struct session *s;

        if (lookup_ref(m, user, id, false, &s, NULL) < 0)
                return;
        pthread_mutex_lock(&s->lock);
        if (strcmp(s->container_id, container_id) == 0)
                s->oom_events++;
        pthread_mutex_unlock(&s->lock);
        unref(s);
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
                if (s->transitioning || s->active_ops > 0 || s->state != SESSION_RUNNING ||
                    s->last_activity >= idle_before)
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
        set_state_locked(s, state, cause, NULL);
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
        if (id[0] && container_remove(m->docker, id, &err) < 0) {
                log_ctx(LOG_LEVEL_WARN, s->user, s->id, id, "%s: cannot remove container: %s", cause, err.msg);
                pthread_mutex_lock(&s->lock);
                s->transitioning = false;
                pthread_cond_broadcast(&s->cond);
                pthread_mutex_unlock(&s->lock);
                return 0;
        }
        if (id[0])
                (void)store_container_removed(m->store, id, cause, sbx_wall_ms());
        (void)portpool_release(m->ports, s->user, s->id);
        release_workspace(m, s->user, s->id);
        end_teardown(s, SESSION_STOPPED, cause);
        call_handlers(m, s->user, s->id, id, cause);
        return 1;
}

int session_expire_idle(struct session_manager *m, int64_t now_wall_ms)
{
        struct session **all;
        size_t n;
        int count = 0;
        int64_t before = now_wall_ms - (int64_t)m->cfg->idle_timeout_s * 1000;

        if (all_refs(m, &all, &n) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                count += stop_one(m, all[i], true, before, "idle_expired");
        refs_free(all, n);
        return count;
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
                if (lookup_ref(m, users[i], ids[i], false, &s, NULL) < 0)
                        continue;
                if (stop_one(m, s, false, 0, "ttl_expired")) {
                        log_ctx(LOG_LEVEL_INFO, users[i], ids[i], NULL, "session stopped: its TTL is over");
                        count++;
                }
                unref(s);
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
        r = lookup_ref(m, user, id, false, &s, err);
        if (r == 0 && begin_teardown(s, false, 0, cid) < 0) {
                unref(s);
                r = -ENOENT;
        }
        if (r < 0)
                return sbx_error_set(err, -ENOENT, 0, "no such session %s:%s", user, id);
        if (cid[0]) {
                r = container_remove(m->docker, cid, err);
                if (r < 0) {
                        pthread_mutex_lock(&s->lock);
                        s->transitioning = false;
                        pthread_cond_broadcast(&s->cond);
                        pthread_mutex_unlock(&s->lock);
                        unref(s);
                        sbx_error_prefix(err, "removing container %.12s", cid);
                        return r;
                }
                (void)store_container_removed(m->store, cid, "destroyed", sbx_wall_ms());
        }
        (void)portpool_release(m->ports, user, id);
        if (!purge)
                release_workspace(m, user, id);
        call_handlers(m, user, id, cid, "destroyed");
        /* The ratchet: the private marks go only once the workspace is
         * verifiably gone. A purge that fails, or a daemon killed during it,
         * leaves the marks (and what is left of the workspace) behind, so
         * the key's next container is made with no network. */
        if (purge) {
                /* the image is unmounted first: a mount point cannot be deleted */
                purged = wsquota_purge(m->cfg, user, id, &perr);
                if (purged == 0)
                        purged = container_workspace_purge(m->cfg, user, id, &perr);
                if (purged < 0)
                        log_ctx(LOG_LEVEL_WARN, user, id, NULL, "%s; private marks kept", perr.msg);
                else
                        release_uid(m, user, id);
        }
        r = store_session_delete(m->store, user, id, purge && purged == 0);
        if (r < 0)
                log_ctx(LOG_LEVEL_ERROR, user, id, NULL, "cannot delete session row: %s", strerror(-r));
        (void)store_session_options_delete(m->store, user, id);
        pthread_mutex_lock(&m->lock);
        unlink_locked(m, s);
        pthread_mutex_unlock(&m->lock);
        pthread_mutex_lock(&s->lock);
        s->transitioning = false;
        s->destroyed = true;
        s->state = SESSION_STOPPED;
        s->container_id[0] = '\0';
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        unref(s);
        if (purged < 0) {
                if (err)
                        *err = perr;
                sbx_error_prefix(err, "the session is destroyed but its workspace is not (it stays private if it "
                                      "was)");
                return purged;
        }
        return 0;
}

/* ---- restart reconciliation ---- */

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

        if (strcmp(user, POOL_USER) == 0) { /* a warm pool slot's (loop: its mounted image) */
                struct store_pool_slot row;
                return store_pool_get(m->store, id, &row) == 0;
        }
        if (lookup_ref(m, user, id, false, &s, NULL) < 0)
                return false;
        pthread_mutex_lock(&s->lock);
        keep = s->container_id[0] != '\0' || s->transitioning;
        pthread_mutex_unlock(&s->lock);
        unref(s);
        return keep;
}

int session_reconcile(struct session_manager *m, struct session_reconcile_report *ret, struct sbx_error *err)
{
        char filter[128];
        const char *filters[3] = {CONTAINER_LABEL_MANAGED "=1", filter, NULL};
        struct docker_container_summary *list = NULL;
        struct session_reconcile_report rep = {0};
        struct session **all;
        size_t n = 0, n_all;
        int r;

        snprintf(filter, sizeof(filter), CONTAINER_LABEL_INSTANCE "=%s", m->cfg->instance);
        r = docker_container_list(m->docker, filters, true, &list, &n, err);
        if (r < 0) {
                sbx_error_prefix(err, "listing containers of instance %s", m->cfg->instance);
                return r;
        }
        r = all_refs(m, &all, &n_all);
        if (r < 0) {
                free(list);
                return r;
        }

        /* Sessions: adopt their container if it runs, else mark ERROR. */
        for (size_t i = 0; i < n_all; i++) {
                struct session *s = all[i];
                const struct docker_container_summary *c = NULL;
                char cause[96] = "", msg[256];
                bool failed = false;

                pthread_mutex_lock(&s->lock);
                for (size_t j = 0; s->container_id[0] && j < n; j++)
                        if (strcmp(list[j].id, s->container_id) == 0)
                                c = &list[j];
                if (c && strcmp(c->state, "running") == 0 &&
                    sessuid_lookup(m->store, s->user, s->id, &(uid_t){0}) == -ENOENT) {
                        /* Made before per-session uids (it runs as the image's uid 1000, shared by every
                         * such container): it goes as an orphan below, and the next request makes one
                         * under the session's own uid. */
                        snprintf(cause, sizeof(cause), "uid_per_session");
                        snprintf(msg, sizeof(msg), "container %.12s ran under a uid shared with other sessions",
                                 s->container_id);
                        s->container_id[0] = '\0';
                        set_state_locked(s, SESSION_ERROR, cause, msg);
                        rep.marked_error++;
                        failed = true;
                } else if (c && strcmp(c->state, "running") == 0) {
                        if (s->state != SESSION_RUNNING)
                                set_state_locked(s, SESSION_RUNNING, NULL, NULL);
                        rep.adopted++;
                } else if (s->state == SESSION_RUNNING || s->state == SESSION_CREATING) {
                        if (!c)
                                s->container_id[0] = '\0'; /* gone: nothing holds its ports any more */
                        snprintf(cause, sizeof(cause), "%s", c ? "exited while the daemon was down" : "removed");
                        snprintf(msg, sizeof(msg), "container %.12s %s", s->container_id[0] ? s->container_id : "-",
                                 c ? "was not running after a daemon restart" : "was missing after a daemon restart");
                        set_state_locked(s, SESSION_ERROR, cause, msg);
                        rep.marked_error++;
                        failed = true;
                }
                pthread_mutex_unlock(&s->lock);
                if (failed)
                        call_handlers(m, s->user, s->id, c ? c->id : "", cause);
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
                const char *slot = docker_kv_get(list[j].labels, list[j].n_labels, CONTAINER_LABEL_SESSION);
                struct store_pool_slot prow;
                if (docker_kv_get(list[j].labels, list[j].n_labels, POOL_LABEL) && slot &&
                    store_pool_get(m->store, slot, &prow) == 0)
                        continue; /* a pool slot's (pool_reconcile) */
                if (container_remove(m->docker, list[j].id, NULL) == 0) {
                        (void)store_container_removed(m->store, list[j].id, "orphan", sbx_wall_ms());
                        rep.removed_orphans++;
                        log_ctx(LOG_LEVEL_INFO, docker_kv_get(list[j].labels, list[j].n_labels, CONTAINER_LABEL_USER),
                                docker_kv_get(list[j].labels, list[j].n_labels, CONTAINER_LABEL_SESSION), list[j].id,
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
                adopted = s->state == SESSION_RUNNING && s->container_id[0];
                pthread_mutex_unlock(&s->lock);
                if (!adopted || strcmp(required_network(m, s->user, s->id), "none") != 0)
                        continue;
                if (session_enforce_network(m, s->user, s->id, &e) < 0)
                        /* every request still inspects the container and recreates it
                         * without a network before using it */
                        log_ctx(LOG_LEVEL_WARN, s->user, s->id, NULL, "reconcile: %s", e.msg);
                else if (!live_container(s))
                        rep.ratchet_removed++;
        }
        refs_free(all, n_all);
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
        log_info("reconciled: %zu adopted, %zu marked ERROR, %zu orphans removed, %zu ports released, "
                 "%zu networked containers of private sessions removed",
                 rep.adopted, rep.marked_error, rep.removed_orphans, rep.ports_released, rep.ratchet_removed);
        return 0;
}
