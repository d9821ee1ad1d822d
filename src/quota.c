/* quota.c — per-user limits and the execution admission rule (quota.h).
 *
 * Locks: q->lock guards the in-memory copy of the overrides; it is a leaf
 * lock (nothing is called with it held, not even the store), so the session
 * manager and the exec engine may ask for limits under their own locks. The
 * store holds the overrides durably; they are loaded once by quota_new(). */
#include "sandboxd/quota.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sandboxd/utf8.h"
#include "sandboxd/store.h"

static const struct {
        const char *key;
        int64_t max;
} keys[] = {
        {"max_sessions_per_user", 100000},
        {"max_exec_per_user", 10000},
        {"max_services_per_session", 1000},
        {"max_spool_per_session", INT64_C(1) << 40},
        {"max_scripts_per_user", 100000}, /* the script cache (scripts.h) */
        {"max_script_bytes_per_user", INT64_C(1) << 32},
        /* what one session may ask for (sessspec.h); cpus in milli-CPUs */
        {"max_session_cpus", 256000},
        {"max_session_memory", INT64_C(1) << 40},
        {"max_session_disk", INT64_C(1) << 44},
        {"max_paused_sessions_per_user", 100000}, /* past it the user's oldest paused sessions stop */
};
#define KEY_SESSION_CPUS 6 /* its override is in milli-CPUs, the limit in nano-CPUs */

struct quota {
        struct store *store;
        pthread_mutex_t lock;
        struct store_quota *rows; /* the overrides (q->lock) */
        size_t n, cap;
};

int quota_new(struct store *st, struct quota **ret, struct sbx_error *err)
{
        struct quota *q = calloc(1, sizeof(*q));
        int r;

        if (!q)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        q->store = st;
        pthread_mutex_init(&q->lock, NULL);
        r = store_quota_list(st, &q->rows, &q->n);
        if (r < 0) {
                quota_free(q);
                return sbx_error_set(err, r, 0, "cannot load the quota overrides: %s", strerror(-r));
        }
        q->cap = q->n;
        *ret = q;
        return 0;
}

void quota_free(struct quota *q)
{
        if (!q)
                return;
        free(q->rows);
        pthread_mutex_destroy(&q->lock);
        free(q);
}

const char *quota_key_name(size_t i)
{
        return i < ELEMENTSOF(keys) ? keys[i].key : NULL;
}

static int key_index(const char *key)
{
        for (size_t i = 0; key && i < ELEMENTSOF(keys); i++)
                if (strcmp(keys[i].key, key) == 0)
                        return (int)i;
        return -1;
}

static int64_t *limit_field(struct quota_limits *l, int i)
{
        int64_t *fields[] = {&l->sessions,     &l->execs,          &l->services,          &l->spool_bytes,
                             &l->scripts,      &l->script_bytes,   &l->session_nano_cpus, &l->session_memory,
                             &l->session_disk, &l->paused_sessions};
        _Static_assert(ELEMENTSOF(fields) == ELEMENTSOF(keys), "a field per key");
        return fields[i];
}

void quota_limits_get(struct quota *q, const struct sbx_config *cfg, const char *user, struct quota_limits *ret)
{
        *ret = (struct quota_limits){
                .sessions = cfg->max_sessions_per_user,
                .execs = cfg->max_exec_per_user,
                .services = cfg->max_services_per_session,
                .spool_bytes = cfg->max_spool_per_session_bytes,
                .scripts = cfg->max_scripts_per_user,
                .script_bytes = cfg->max_script_bytes_per_user,
                /* 0 in the config: the global setting is the maximum */
                .session_nano_cpus = cfg->max_session_nano_cpus ? cfg->max_session_nano_cpus : cfg->nano_cpus,
                .session_memory = cfg->max_session_memory_bytes ? cfg->max_session_memory_bytes : cfg->memory_bytes,
                .session_disk = cfg->max_session_disk_bytes ? cfg->max_session_disk_bytes : cfg->workspace_quota_bytes,
                .paused_sessions = cfg->max_paused_sessions_per_user,
        };
        if (!q || !user)
                return;
        pthread_mutex_lock(&q->lock);
        for (size_t i = 0; i < q->n; i++) {
                int k;
                if (strcmp(q->rows[i].user_id, user) != 0 || (k = key_index(q->rows[i].key)) < 0)
                        continue;
                *limit_field(ret, k) = k == KEY_SESSION_CPUS ? q->rows[i].value * 1000000 : q->rows[i].value;
        }
        pthread_mutex_unlock(&q->lock);
}

int quota_set(struct quota *q, const char *user, const char *key, int64_t value, struct sbx_error *err)
{
        int k = key_index(key), r;
        size_t i;

        if (!session_id_valid(user))
                return sbx_error_set(err, -EINVAL, 0, "invalid user_id");
        if (k < 0)
                return sbx_error_set(err, -EINVAL, 0,
                                     "unknown quota '%s': one of max_sessions_per_user, max_exec_per_user, "
                                     "max_services_per_session, max_spool_per_session, max_scripts_per_user, "
                                     "max_script_bytes_per_user, max_session_cpus (milli-CPUs), max_session_memory, "
                                     "max_session_disk, max_paused_sessions_per_user",
                                     key ? key : "");
        if (value < 0 || value > keys[k].max)
                return sbx_error_set(err, -EINVAL, 0, "%s: %" PRId64 " is out of range [0, %" PRId64 "]", key, value,
                                     keys[k].max);
        /* durable first, then visible; q->lock is never held across the store */
        r = store_quota_set(q->store, user, keys[k].key, value, sbx_wall_ms());
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot record the quota: %s", strerror(-r));
        pthread_mutex_lock(&q->lock);
        for (i = 0; i < q->n; i++)
                if (strcmp(q->rows[i].user_id, user) == 0 && strcmp(q->rows[i].key, keys[k].key) == 0)
                        break;
        if (i == q->n) {
                struct store_quota *row;
                if (q->n == q->cap) {
                        size_t cap = q->cap ? 2 * q->cap : 8;
                        struct store_quota *rows = realloc(q->rows, cap * sizeof(*rows));
                        if (!rows) {
                                pthread_mutex_unlock(&q->lock);
                                return sbx_error_set(err, -ENOMEM, 0, "out of memory (the quota is recorded)");
                        }
                        q->rows = rows;
                        q->cap = cap;
                }
                row = &q->rows[q->n++];
                memset(row, 0, sizeof(*row));
                sbx_strlcpy(row->user_id, user, sizeof(row->user_id));
                sbx_strlcpy(row->key, keys[k].key, sizeof(row->key));
        }
        q->rows[i].value = value;
        pthread_mutex_unlock(&q->lock);
        return 0;
}

int quota_unset(struct quota *q, const char *user, const char *key, struct sbx_error *err)
{
        size_t k = 0;
        int r;

        if (!session_id_valid(user))
                return sbx_error_set(err, -EINVAL, 0, "invalid user_id");
        if (key && key_index(key) < 0)
                return sbx_error_set(err, -EINVAL, 0, "unknown quota '%s'", key);
        r = store_quota_unset(q->store, user, key);
        if (r < 0)
                return sbx_error_set(err, r, 0, "cannot drop the quota: %s", strerror(-r));
        pthread_mutex_lock(&q->lock);
        for (size_t i = 0; i < q->n; i++)
                if (strcmp(q->rows[i].user_id, user) != 0 || (key && strcmp(q->rows[i].key, key) != 0))
                        q->rows[k++] = q->rows[i];
        q->n = k;
        pthread_mutex_unlock(&q->lock);
        return r;
}

int quota_overrides(struct quota *q, const char *user, struct store_quota **ret, size_t *ret_n)
{
        struct store_quota *out;
        size_t k = 0;

        pthread_mutex_lock(&q->lock);
        out = calloc(q->n + 1, sizeof(*out));
        if (!out) {
                pthread_mutex_unlock(&q->lock);
                return -ENOMEM;
        }
        for (size_t i = 0; i < q->n; i++)
                if (!user || strcmp(q->rows[i].user_id, user) == 0)
                        out[k++] = q->rows[i];
        pthread_mutex_unlock(&q->lock);
        *ret = out;
        *ret_n = k;
        return 0;
}

int quota_exec_admit(const struct sbx_config *cfg, const struct quota_limits *lim, const struct quota_exec_load *load,
                     struct sbx_error *err)
{
        size_t users = load->other_users + 1;
        size_t share = ((size_t)cfg->max_exec_global + users - 1) / users;

        if (load->session >= (size_t)cfg->max_exec_per_session)
                return sbx_error_set(err, -EBUSY, 0,
                                     "busy: %zu executions are running in this session (limits.exec_per_session=%d); "
                                     "wait for one to finish or cancel one",
                                     load->session, cfg->max_exec_per_session);
        if ((int64_t)load->user >= lim->execs)
                return sbx_error_set(err, -EBUSY, 0,
                                     "busy: %zu executions of this user are running (max_exec_per_user=%" PRId64
                                     "); wait for one to finish or cancel one",
                                     load->user, lim->execs);
        /* Only while others run: a user alone may use the whole pool. */
        if (load->other_users > 0 && load->user >= share)
                return sbx_error_set(err, -EBUSY, 0,
                                     "busy: %zu executions of this user are running, its fair share of "
                                     "limits.exec_global=%d among %zu users with executions; wait for one to finish",
                                     load->user, cfg->max_exec_global, users);
        if (load->global >= (size_t)cfg->max_exec_global)
                return sbx_error_set(
                        err, -EBUSY, 0,
                        "busy: %zu executions are running on this daemon (limits.exec_global=%d); retry later",
                        load->global, cfg->max_exec_global);
        return 0;
}
