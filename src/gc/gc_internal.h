/* gc_internal.h — what the pieces of `sandboxd --gc` share: gc.c (the
 * snapshot, the container half, the run) and gc_fs.c (the filesystem
 * half). One thread, no locks (gc.c). Private to src/. */
#ifndef SANDBOXD_GC_INTERNAL_H
#define SANDBOXD_GC_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "sandboxd/gc.h"
#include "sandboxd/store.h"

struct gc {
        const struct sbx_config *cfg;
        bool dry_run;
        int64_t now; /* judges ages; writes are stamped with the real clock */
        struct store *st;
        struct engine *engine;
        struct engine_container_summary *ctrs; /* this instance's, all states */
        bool *ctr_gone;                        /* removed (or would be) by this run */
        size_t n_ctrs;
        struct store_session *rows; /* sorted by (user_id, session_id) */
        bool *row_gone;             /* deleted (or would be) by this run */
        size_t n_rows;
        char trash[SBX_PATH_MAX]; /* {data_dir}/gc-trash/<run>, once made */
        struct gc_report *rep;
};

static inline bool streq(const char *a, const char *b)
{
        return a && b && strcmp(a, b) == 0;
}

/* A session state that holds (or is getting) a container. */
static inline bool state_live(const char *state)
{
        return streq(state, "RUNNING") || streq(state, "CREATING") ||
               streq(state, "PAUSED"); /* paused: frozen, alive */
}

/* ---- gc.c ---- */

/* "3d4h", "5m2s": an age for log lines and reasons. */
void gc_fmt_age(int64_t ms, char *buf, size_t size);
/* Index of the snapshot row of (user, session), or -1. */
ssize_t gc_find_row(struct gc *g, const char *user, const char *session);
/* A container of (user, session) that this run leaves in place. */
bool gc_has_container(struct gc *g, const char *user, const char *session);
/* The report and the log: an item removed (or, dry, to remove), one that
 * failed, one the daemon's activity since the snapshot keeps. */
void gc_note_done(struct gc *g, enum gc_kind kind, const char *id, const char *user, const char *session,
                  uint64_t bytes, const char *reason);
void gc_note_failed(struct gc *g, enum gc_kind kind, const char *id, const char *user, const char *session,
                    const char *reason, const char *error);
void gc_note_kept(struct gc *g, enum gc_kind kind, const char *id, const char *user, const char *session,
                  const char *why);
/* The audit record (gc.remove) of a removal from a session. */
void gc_audit_remove(struct gc *g, const char *user, const char *session, enum gc_kind kind, const char *id,
                     const char *reason);

/* A listing's result r: false, noted as a failure of kind ("-", what), when it failed. */
bool gc_listed(struct gc *g, enum gc_kind kind, const char *what, int r);
/* The result r of a conditional store change (store_gc_*): -ESTALE, the
 * daemon changed the row since gc looked (noted as kept, with why); another
 * -errno, a failure. True when the change was made. */
bool gc_store_changed(struct gc *g, enum gc_kind kind, const char *id, const char *user, const char *session,
                      const char *reason, const char *why, int r);

/* ---- gc_fs.c: the passes, in gc_run's order ---- */

void gc_spools(struct gc *g);
void gc_mounts(struct gc *g);
void gc_workspaces(struct gc *g);
void gc_uids(struct gc *g);

#endif
