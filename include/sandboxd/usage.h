/* usage.h — what each live session uses right now, for `sandboxctl top`. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/session.h"

struct engine;
struct exec_registry;
struct session_manager;
struct store;

/* What usage_collect asks, all borrowed. */
struct usage_ctx {
        struct session_manager *sessions;
        struct engine *engine;
        struct exec_registry *exec;
        struct store *store;
};

struct usage_row {
        char user[SESSION_KEY_MAX + 1];
        char session[SESSION_KEY_MAX + 1];
        enum session_state state;
        char container_id[65];
        char network_mode[16];
        bool has_stats;        /* false if the engine could not say (container gone meanwhile) */
        uint64_t cpu_total_ns; /* cumulative; CPU % is the client's delta over its refresh */
        uint64_t memory_usage; /* bytes */
        uint64_t memory_limit; /* bytes */
        uint64_t pids;
        size_t executions_running;
        int64_t executions_total; /* recorded in the store (gc forgets old ones) */
        int64_t sampled_at;       /* wall ms of the stats call */
};

/* Rows for the CREATING and RUNNING sessions (of user, or all if NULL), at most `max`
 * of them, ordered by user and session. One Docker stats call per container,
 * made one after another with no lock held; their cost bounds how often a client
 * should ask. *ret is malloc'd (free()). */
int usage_collect(const struct usage_ctx *c, const char *user, size_t max, struct usage_row **ret, size_t *ret_n);
