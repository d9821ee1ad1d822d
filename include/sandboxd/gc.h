/* gc.h — the batch cleanup behind `sandboxd --gc`: run once, reclaim what
 * abandoned sessions left behind, report, exit.
 *
 * What it removes, each with its reason (kinds below):
 *   - containers of this instance whose session is idle past idle_timeout,
 *     or that were created more than gc.max_age ago (only when the session is
 *     quiet: no request for GC_RECENT_MS and no execution running);
 *   - orphan containers: this instance's labels, but the container of no
 *     session;
 *   - sessions left in ERROR with no container, untouched for idle_timeout
 *     (the row goes; the workspace and its private dataset marks stay);
 *   - port allocations of sessions that are neither live (RUNNING,
 *     CREATING) nor in ERROR and have no container;
 *   - services rows whose container is not running;
 *   - execution output spools past gc.execution_retention (and spool files no
 *     execution row knows, as old);
 *   - audit rows older than gc.audit_retention (when >= 0);
 *   - session uids (sessuid.h) whose workspace is gone, of sessions that
 *     are not live and have no container;
 *   - when gc.workspace_retention >= 0, workspaces of sessions destroyed (no
 *     row) or STOPPED/ERROR for longer than that;
 *   - this instance's bridge network (sandboxd-<instance>) when
 *     network_default is not bridge and no container is attached to it
 *     (Docker refuses while one is: then it is kept);
 *   - runtime microvm (engine.h, engine_microvm_gc): VM cgroups that a VM's
 *     removal here could not take (no task in them), and the images' root file systems that no
 *     VM and no memory snapshot names, unused for a day, not being made;
 * then it vacuums the store.
 *
 * What it never touches: containers without the sandboxd labels or of
 * another instance, and the workspace of a session that is alive (RUNNING or
 * CREATING in the store, or with any container in Docker).
 *
 * It opens the store and a Docker engine (engine_docker.h) of its own (never daemon_open: no
 * reconciliation, no monitor) and is safe to run beside a daemon: see gc.c. */
#ifndef SANDBOXD_GC_H
#define SANDBOXD_GC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

/* gc stops the container of a session created this long ago (s), however
 * active, once it is quiet: a backstop under idle_timeout against a container
 * that runs for weeks (its workspace stays; the next request makes a fresh
 * one). Was gc.max_age. */
#define GC_MAX_AGE_S (7 * 86400)

/* A session with a request this recent is in use: GC_MAX_AGE_S leaves its
 * container alone until it is quiet. */
#define GC_RECENT_MS 60000

/* Items kept in a report's list (the counts cover everything; the log has
 * every item). */
#define GC_MAX_ITEMS 10000

enum gc_kind {
        GC_IDLE_CONTAINERS,
        GC_OLD_CONTAINERS,
        GC_ORPHAN_CONTAINERS,
        GC_ERROR_SESSIONS,
        GC_PORTS,
        GC_SERVICES,
        GC_SPOOLS,
        GC_WORKSPACES,
        GC_AUDIT,
        GC_IDEMPOTENCY_KEYS,
        GC_UIDS,
        GC_STORE,
        GC_NETWORKS,
        GC_SNAPSHOTS,  /* past gc.snapshot_retention, or a copy a crash cut short (snapshot.h) */
        GC_VM_CGROUPS, /* a microVM's cgroup left without its VM (qemu_cgroup.c) */
        GC_VM_ROOTFS,  /* an image's root file system nothing uses (qemu_gc.c) */
};
#define GC_KIND_COUNT 16

/* "idle_containers", "old_containers", "orphan_containers", "error_sessions",
 * "ports", "services", "execution_spools", "workspaces", "audit_rows", "idempotency_keys",
 * "session_uids", "store", "networks", "snapshots", "vm_cgroups", "vm_rootfs". */
const char *gc_kind_name(enum gc_kind k);

struct gc_count {
        uint64_t count;  /* items removed (or, in a dry run, that would be) */
        uint64_t bytes;  /* bytes reclaimed: files (spools, workspaces) and the store's shrink; 0 for rows */
        uint64_t failed; /* items that failed (logged; gc went on) */
};

struct gc_item {
        enum gc_kind kind;
        char id[160];  /* container id, port, service or execution id, "user/session", the db path */
        char user[65]; /* "" when unknown */
        char session[65];
        char reason[256];
        uint64_t bytes;
        bool failed;
        char error[512]; /* why it failed */
};

struct gc_report {
        bool dry_run;
        char instance[64];
        int64_t started_at; /* unix ms */
        int64_t duration_ms;
        struct gc_count kinds[GC_KIND_COUNT];
        struct gc_count total;
        struct gc_item *items; /* the first GC_MAX_ITEMS items */
        size_t n_items;
        bool items_truncated;
};

struct gc_options {
        bool dry_run;   /* decide and report exactly as for real, change nothing */
        int64_t now_ms; /* the wall clock gc judges ages by; 0 = now (tests pass another) */
};

/* Run one collection. Returns 0 when it ran — whether or not items failed
 * (see ret->total.failed) — and fills *ret (free with gc_report_done).
 * Returns -errno with err set when it could not start at all: no data_dir or
 * store, Docker unreachable, another gc holding {data_dir}/gc.lock (-EBUSY).
 * The caller has called engine_docker_global_init(). */
int gc_run(const struct sbx_config *cfg, const struct gc_options *opts, struct gc_report *ret, struct sbx_error *err);
void gc_report_done(struct gc_report *r);

/* The report as a table (per kind: count, bytes, failed; then a total). */
void gc_report_print_table(const struct gc_report *r, FILE *f);
/* The report as one JSON object {"dry_run", "instance", "started_at",
 * "duration_ms", "kinds": {name: {count, bytes, failed}}, "total",
 * "items": [{kind, id, user, session, reason, bytes, failed, error}],
 * "items_truncated"}; malloc'd, NULL on OOM. */
char *gc_report_json(const struct gc_report *r);

/* The `sandboxd --gc` front: run, print the table or JSON on out, return the
 * exit status (0 all went well, 1 if any item failed or gc could not run). */
int gc_main(const struct sbx_config *cfg, bool dry_run, bool json, FILE *out);

#endif
