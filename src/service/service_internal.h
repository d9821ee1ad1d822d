/* service_internal.h — what service.c (start, stop, list, logs, the
 * manager's life) and service_monitor.c (the monitor thread) share. The
 * lock rules are in service.c's header. */
#ifndef SANDBOXD_SERVICE_INTERNAL_H
#define SANDBOXD_SERVICE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "sandboxd/service.h"
#include "sandboxd/store.h"

#define SERVICE_DIR "/workspace/.sandboxd/services"
#define MAX_DIRTY 64

struct service_manager {
        const struct sbx_config *cfg;
        struct engine *engine;
        struct store *store;
        struct session_manager *sessions;
        struct exec_registry *exec;
        struct quota *quota; /* per-user limits; NULL: the config defaults (m->lock) */
        struct hub *runner;  /* NULL: docker exec only */

        pthread_mutex_t lock;  /* rows' read-modify-write */
        pthread_mutex_t wlock; /* `stopping`, the dirty sessions; with `wake` */
        pthread_cond_t wake;
        bool stopping;
        bool started;
        pthread_t thread;
        struct {
                char user[65], session[65];
        } dirty[MAX_DIRTY];
        size_t n_dirty;
};

/* The row's state is one a service is alive in (STARTING, RUNNING, STOPPING). */
bool service_is_active(const char *state);
/* The SBX_SERVICE_ID of the row's start: "<name>-<start ms>". */
void service_marker_of(const struct store_service *row, char *buf, size_t size);

/* ---- service_monitor.c ---- */

/* Apply the runner's latest reports on the session's services to the
 * store; how many rows changed. */
size_t service_apply_runner(struct service_manager *m, const char *user, const char *session);
/* The runner hub's report handler: mark the session dirty, wake the monitor. */
void service_on_runner_report(void *ud, const char *user, const char *session);
void *service_monitor_main(void *ud);

#endif
