/* fake_engine.h — an in-process engine (engine.h) for the faults a real one
 * cannot produce on demand: a create that fails halfway (the container is
 * made, the reply is a 500), a start that fails, events lost, events out of
 * order or stale. Everything else is the real code: the session state
 * machine, reconciliation and the monitor run against it unchanged.
 *
 * Not a Docker simulator: containers are rows in a table (labels, state,
 * exit code), "running" means nothing runs. It has no exec and no stats
 * (those capabilities are clear), and no PID limit (ENGINE_CAP_PIDS_LIMIT
 * clear), so the path that reports an unenforced setting is exercised.
 *
 * Threads: every call may come from any thread; one mutex guards the table
 * and the event queue (a leaf: no callback runs under it). */
#ifndef SANDBOXD_FAKE_ENGINE_H
#define SANDBOXD_FAKE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/engine.h"

enum fake_create_fault {
        FAKE_CREATE_OK = 0,
        FAKE_CREATE_HALFWAY, /* the container exists, the call says -EIO (a 500 after the engine made it) */
        FAKE_CREATE_FAIL,    /* nothing made, -EIO */
        FAKE_START_FAIL,     /* created, then start says -EIO */
};

/* A fake engine; engine_free() frees it. */
struct engine *fake_engine_new(void);

/* The next create (just one) meets this fault. */
void fake_engine_fault_next_create(struct engine *e, enum fake_create_fault f);
/* While true, events are not queued: they are lost for good. */
void fake_engine_drop_events(struct engine *e, bool drop);
/* The container exits (exit_code; oom) as if its main process died; with
 * event, a "die" is queued (unless events are dropped). -ENOENT if unknown. */
int fake_engine_kill(struct engine *e, const char *id, int exit_code, bool event);
/* Queue an event for id with that container's labels (or, for one already
 * removed, the labels it had): stale or out of order on purpose. */
int fake_engine_inject_event(struct engine *e, const char *action, const char *id, int exit_code);

struct fake_engine_counts {
        size_t containers; /* in the table, any state */
        size_t running;
        size_t creates, removes, events_sent;
};
void fake_engine_counts(struct engine *e, struct fake_engine_counts *ret);
/* How many containers labelled user:session are in the table (running only
 * when running_only). */
size_t fake_engine_count_session(struct engine *e, const char *user, const char *session, bool running_only);
/* Whether id is in the table and running. */
bool fake_engine_is_running(struct engine *e, const char *id);

#endif
