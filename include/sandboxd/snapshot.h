/* snapshot.h — workspace snapshots, restore and fork (issue 28).
 *
 * A snapshot is a copy of a session's workspace taken at a frozen point
 * (the session is held: no container is made, recreated or removed
 * meanwhile, and its running container is paused with the engine's freezer
 * for the copy unless it was paused already, which it stays), together with
 * what recreates its environment: the image (name and id), the runtime, the
 * default env, the session's own egress additions, its labels and
 * resources, its interpreter contexts' names, and its privacy marks.
 *
 * How the files are kept (kind):
 *   image    workspace.quota_mode loop: a sparse copy of the workspace's
 *            ext4 image (a reflink where the file system can), its size (the
 *            workspace's limit) kept;
 *   archive  otherwise: a zstd-compressed tar of the tree (libarchive),
 *            written from a walk that follows no symlink and crosses no
 *            mount, holding regular files, directories and symlinks only.
 * Both live under {data_dir}/snapshots/<user>/<id>/ (root's, 0700), which is
 * no workspace and is bind-mounted into no container.
 *
 * Restore stops the session (its container removed, workspace kept), puts
 * the workspace back from the snapshot and leaves the session STOPPED: the
 * next request makes its container. Fork makes a new session of the same
 * user with the snapshot's environment and files: own uid, ports and
 * channels; a private snapshot's marks are recorded on it before its first
 * container exists. A fork carries no process memory: its contexts report
 * state_lost {cause: "forked"} (docs/architecture.md says why), except from
 * a memory snapshot of a microvm session (kind microvm,
 * snapshot_take_memory), whose forks run on with the guest's processes (the
 * contexts' bookkeeping still says forked).
 *
 * Extraction never trusts the stored copy either: every path is walked from
 * the target's fd one component at a time with O_NOFOLLOW; absolute paths,
 * "..", hardlinks, device nodes, FIFOs and sockets are refused; setuid and
 * setgid bits are dropped; everything is given to the target session's uid;
 * bytes and entries are bounded.
 *
 * Quotas: limits.snapshots_per_user and limits.snapshot_bytes_per_user (-EDQUOT,
 * the message naming the key); --gc removes snapshots past
 * gc.snapshot_retention (snapshot_gc).
 *
 * Threads: any; no lock of its own besides its counters (atomics). Calls
 * into a session serialise on the session's transition (session_hold). */
#ifndef SANDBOXD_SNAPSHOT_H
#define SANDBOXD_SNAPSHOT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"
#include "sandboxd/store_snapshot.h"

struct engine;
struct store;
struct session_manager;
struct privacy;
struct cells;

/* What the snapshot module works with, all borrowed (the daemon's). */
struct snapshot_ctx {
        const struct sbx_config *cfg;
        struct engine *engine;
        struct store *store;
        struct session_manager *sessions;
        struct privacy *privacy; /* NULL: no marks travel */
        struct cells *cells;     /* NULL: no contexts reported lost */
};

/* A snapshot name: 1-64 of [A-Za-z0-9._-], not starting with '.' or '-',
 * and not looking like an id ("snap-..."). */
bool snapshot_name_valid(const char *name);

/* Take a snapshot of user:session (name optional). -ENOENT no such session,
 * -EDQUOT over a quota, -EEXIST the name is taken. *ret: the row (done
 * with store_snapshot_done). */
int snapshot_take(const struct snapshot_ctx *c, const char *user, const char *session, const char *name,
                  const char *actor, struct store_snapshot *ret, struct sbx_error *err);

/* snapshot_take, and with memory the session's processes too: a microvm
 * session only (-EOPNOTSUPP otherwise, saying so), kind "microvm": its VM
 * stopped for an instant, its device state, frozen RAM and workspace disk
 * kept (engine_memory_capture, engine.h), counted against the same quotas.
 * restore_session and fork_session from such a snapshot boot the
 * session's next VM from it: processes, /tmp and files where they were;
 * every VM booted from one snapshot shares its RAM copy-on-write. */
int snapshot_take_memory(const struct snapshot_ctx *c, const char *user, const char *session, const char *name,
                         bool memory, const char *actor, struct store_snapshot *ret, struct sbx_error *err);

/* Stop user:session and put its workspace back from snapshot (id or name,
 * of the same user; any of its snapshots). From a memory snapshot (kind
 * microvm) the session runs again at once on the snapshot's guest when any
 * of its interpreter contexts ran then: those run on (cells_mark_carried). */
int snapshot_restore(const struct snapshot_ctx *c, const char *user, const char *session, const char *snapshot,
                     const char *actor, struct store_snapshot *ret_snap, struct sbx_error *err);

/* Make user:to_session from user's snapshot (id or name), or from the live
 * session from_session (a snapshot taken first, deleted after). The
 * session must not exist (-EEXIST). Its container is started (from the
 * warm pool where it can be). ret_snapshot: the id it was made from. */
/* A memory snapshot's connections open through its VM's net port when it was taken
 * (ENGINE_MEMORY_CONNECTIONS): every restore or fork from it drops them. 0 for any other. */
int64_t snapshot_dropped_connections(const struct sbx_config *cfg, const char *user, const char *snapshot_id);

int snapshot_fork(const struct snapshot_ctx *c, const char *user, const char *from_session, const char *from_snapshot,
                  const char *to_session, const char *actor, char ret_snapshot[STORE_SNAPSHOT_ID_MAX + 1],
                  struct sbx_error *err);

/* Delete user's snapshot (id or name): files, then row. */
int snapshot_delete(const struct snapshot_ctx *c, const char *user, const char *snapshot, const char *actor,
                    struct sbx_error *err);

/* At the daemon's start, before any request: a copy that was under way when
 * the daemon stopped is deleted, and the container it had frozen is thawed
 * (a session paused for its own sake was never recorded here). Returns how
 * many it cleared. */
int snapshot_recover(const struct snapshot_ctx *c);

/* The row as the fronts show it (no env values: their names only). */
cJSON *snapshot_to_json(const struct store_snapshot *s);

/* {snapshots: [...], count, bytes}: user's snapshots (of session only, when
 * it is non-empty), at most max, each as snapshot_to_json; count and bytes
 * are user's totals. user NULL (the operator's view): every user's, each
 * with its "user", count and bytes summed over the list. */
int snapshot_list_json(const struct snapshot_ctx *c, const char *user, const char *session, size_t max, cJSON **ret,
                       struct sbx_error *err);

/* "creating" rows this old are a copy a crash cut short (--gc removes them). */
#define SNAPSHOT_STALE_MS (24LL * 3600 * 1000)
/* --gc (gc.c decides which, by gc.snapshot_retention): the files, then the
 * row. 0, or -errno when the files could not all go (the row then stays). */
int snapshot_purge(const struct sbx_config *cfg, struct store *st, const char *user, const char *id);

/* Counters for /metrics: taken, restored, forked, deleted, failed. */
struct snapshot_counters {
        uint64_t taken, restored, forked, deleted, failed, bytes_written;
};
void snapshot_counters_get(struct snapshot_counters *ret);

#endif
