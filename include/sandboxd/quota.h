/* quota.h — quotas per user.
 *
 * Each user has nine limits: live sessions, concurrent executions, services
 * per session, execution-output (spool) bytes per session, the script
 * cache's scripts and bytes, and the cpu, memory and disk one session may
 * ask for. Their defaults are config keys
 * (max_sessions_per_user, max_exec_per_user, max_services_per_session,
 * max_spool_per_session, max_scripts_per_user, max_script_bytes_per_user,
 * max_session_cpus, max_session_memory, max_session_disk,
 * max_paused_sessions_per_user);
 * an admin may override
 * any of them for one user (admin `quota.set`, `sandboxctl quota set`),
 * and the override is kept in the store.
 *
 * On top of the per-user caps, the global execution cap is shared fairly:
 * while executions of other users are running, a user holding
 * ceil(max_exec_global / users running) or more gets `busy` naming its
 * fair share. Nothing is preempted to make room: a user who took more
 * while alone regains slots only as its executions end (every execution
 * ends by its timeout).
 *
 * The module owns the overrides only; the counting is done by the owners
 * of what is counted (session manager, exec engine, services, spools),
 * which ask quota_limits_get() and call the admission checks below. */
#ifndef SANDBOXD_QUOTA_H
#define SANDBOXD_QUOTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct store;
struct quota;

struct quota_limits {
        int64_t sessions;     /* live sessions of the user */
        int64_t execs;        /* concurrent executions of the user */
        int64_t services;     /* services per session */
        int64_t spool_bytes;  /* execution output kept per session */
        int64_t scripts;      /* the user's script cache: scripts (scripts.h) */
        int64_t script_bytes; /* and bytes of code */
        /* what one session may ask for (sessspec.h) */
        int64_t session_nano_cpus; /* max_session_cpus (an override is in milli-CPUs) */
        int64_t session_memory;    /* max_session_memory, bytes */
        int64_t session_disk;      /* max_session_disk, bytes */
        int64_t paused_sessions;   /* max_paused_sessions_per_user (session_pause.c) */
};

/* Load the overrides from the store. */
int quota_new(struct store *st, struct quota **ret, struct sbx_error *err);
void quota_free(struct quota *q);

/* The override keys (the config keys they override), NULL past the end. */
const char *quota_key_name(size_t i);

/* Override `key` for user: recorded in the store, in force at once for
 * every later admission (what runs already is never stopped). value is
 * 0..the key's config maximum; 0 refuses the user that resource. */
int quota_set(struct quota *q, const char *user, const char *key, int64_t value, struct sbx_error *err);
/* Back to the config default for one key, or every key (key NULL).
 * Returns how many overrides went. */
int quota_unset(struct quota *q, const char *user, const char *key, struct sbx_error *err);
/* The overrides of user (NULL: of everyone), copied; free() *ret. */
struct store_quota;
int quota_overrides(struct quota *q, const char *user, struct store_quota **ret, size_t *ret_n);

/* The limits of a user: the config defaults, with the user's overrides if
 * q is non-NULL. Never fails. */
void quota_limits_get(struct quota *q, const struct sbx_config *cfg, const char *user, struct quota_limits *ret);

/* What the exec engine counts when an execution asks for a slot. */
struct quota_exec_load {
        size_t global;      /* executions holding a slot on the daemon */
        size_t user;        /* of them, the requesting user's */
        size_t session;     /* of them, the requesting session's */
        size_t other_users; /* distinct other users holding a slot */
};

/* 0 if one more execution may start, else -EBUSY with err naming the cap:
 * max_exec_per_session, max_exec_per_user, the fair share of
 * max_exec_global, or max_exec_global. */
int quota_exec_admit(const struct sbx_config *cfg, const struct quota_limits *lim, const struct quota_exec_load *load,
                     struct sbx_error *err);

#endif
