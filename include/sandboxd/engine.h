/* engine.h — the container engine seam: one table of operations between
 * sandboxd and whatever runs its containers.
 *
 * Like crun's `struct libcrun_cgroup_manager`, an engine is a `struct engine`
 * whose `ops` table is filled by one implementation (src/docker/,
 * engine_docker.h; src/kubernetes/, engine_kubernetes.h; src/qemu/,
 * engine_qemu.h, behind engine_select.c's router) and whose `priv`
 * only that implementation reads. Callers
 * (sessions, containers, pool, exec's fallback, services, the monitor, gc,
 * usage, runtime, metrics, the daemon) call the engine_* wrappers below and
 * never know which engine runs: no file outside src/docker/ includes docker.h
 * (cmake/check_boundaries.cmake fails the build otherwise).
 *
 * The create spec (struct engine_spec) is engine-neutral: the user, the
 * limits, a read-only root, tmpfs mounts, the workspace, the session
 * directory, the runner binary, the runtime class, the network and the
 * labels. Each engine maps it to its own API. Every engine must also, without
 * being asked: drop every capability, set no-new-privileges, never run
 * privileged, keep its default seccomp profile, and run an init as PID 1 with
 * the runner (or the image's command) as its first child.
 *
 * What an engine cannot enforce is stated in `capabilities` (ENGINE_CAP_*),
 * never dropped silently: engine_spec_unenforced() says which settings of a
 * spec the engine would not apply; container.c logs them once and refuses the
 * ones that weaken isolation, and the admin status shows the engine's
 * capabilities and what it leaves unenforced.
 *
 * Conventions, for every engine: every call returns 0 or a negative errno
 * (-ENOENT no such container/image/exec, -EEXIST a taken name, -EBUSY not
 * in the state the call needs, -EIO other engine errors, -ETIMEDOUT,
 * -EPROTO a reply the engine should not have sent), takes an optional
 * `struct sbx_error *` that says why in words, and is bounded by the
 * engine's own timeout. An operation an engine lacks (its capability bit
 * clear, or its op NULL) is -EOPNOTSUPP. Each operation's meaning is
 * written at its entry in struct engine_ops below.
 *
 * Threads: an engine is shared by every thread; each operation may be called
 * from any thread at once. A stream (the exec fallback's attached
 * connection) has one reader; writes from another thread need the caller's
 * lock. */
#ifndef SANDBOXD_ENGINE_H
#define SANDBOXD_ENGINE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandboxd/common.h"
#include "sandboxd/node.h"

#define ENGINE_ID_STR_MAX 65 /* 64 hex + NUL (Docker); other engines' ids fit */
#define ENGINE_MAX_LABELS 16
#define ENGINE_CLAIM_MAX 64 /* an engine's workspace volume name (a Kubernetes claim) */

/* What an engine can enforce or do. A clear bit is a setting it would leave
 * out, or an operation that fails with -EOPNOTSUPP. */
enum {
        ENGINE_CAP_PIDS_LIMIT = 1u << 0,       /* a per-container PID limit (a Pod has none) */
        ENGINE_CAP_MEMORY_SWAP = 1u << 1,      /* swap limited apart from memory (no swap) */
        ENGINE_CAP_CPU_WEIGHT = 1u << 2,       /* a relative CPU weight (cgroup cpu.weight) */
        ENGINE_CAP_OOM_SCORE_ADJ = 1u << 3,    /* the container's OOM score adjustment */
        ENGINE_CAP_RUNTIME_CLASS = 1u << 4,    /* choosing the OCI runtime (runc, runsc) per container */
        ENGINE_CAP_PAUSE = 1u << 5,            /* freeze and thaw a container */
        ENGINE_CAP_EXEC = 1u << 6,             /* the exec fallback (runs without the runner) */
        ENGINE_CAP_EVENTS = 1u << 7,           /* a followable stream of container events */
        ENGINE_CAP_STATS = 1u << 8,            /* memory, pids and CPU of a running container */
        ENGINE_CAP_ISOLATED_NETWORK = 1u << 9, /* a sandboxd-owned network, no traffic between containers */
        ENGINE_CAP_TMPFS_SIZE = 1u << 10,      /* a size bound on a tmpfs mount */
        ENGINE_CAP_LOGS = 1u << 11,            /* the main process's output, for start failures */
        /* a container's memory kept on disk and booted from again: pause to disk, a memory capture,
         * a boot from a capture (a microVM: its RAM is a file). A router (engine_select.c) has the bit
         * when one of its engines has it; an op on a container of the other is -EOPNOTSUPP. */
        ENGINE_CAP_MEMORY_CAPTURE = 1u << 12,
};
#define ENGINE_CAP_COUNT 13

/* The name of capability bit i ("pids_limit"), or NULL past the last. */
const char *engine_cap_name(unsigned i);

struct engine_stream; /* an attached exec connection, the engine's own type */
struct engine;

struct engine_version {
        char engine[16];      /* "docker" */
        char version[64];     /* the engine's version */
        char api_version[16]; /* the API version in use */
};

struct engine_image_info {
        char id[80];      /* "sha256:..." */
        char digest[160]; /* a registry digest, "" for local-only images */
        char recipe[80];  /* label sandboxd.recipe, "" if absent */
};

struct engine_label {
        const char *key;
        const char *value;
};

struct engine_kv {
        char key[64];
        char value[160];
};
/* Value of a label in a list of them, or NULL. */
const char *engine_label_get(const struct engine_kv *kvs, size_t n, const char *key);

struct engine_tmpfs {
        const char *path;   /* inside the container, e.g. "/tmp" */
        int64_t size_bytes; /* 0: the engine's default */
        bool noexec, nosuid, nodev;
};

/* The hardened container, engine-neutral. Pointers are borrowed for the
 * call; zero limits are left unset. */
struct engine_spec {
        const char *image; /* the image reference: an id ("sha256:...") or a name */
        uid_t uid;         /* runs as uid:gid; never 0 */
        gid_t gid;
        int64_t memory_bytes;
        int64_t memory_swap_bytes; /* memory + swap; equal to memory_bytes: no swap */
        int64_t nano_cpus;         /* CPU, in billionths of a CPU */
        int64_t cpu_weight;        /* relative CPU weight (Docker's CpuShares scale) */
        int64_t pids_limit;
        int oom_score_adj; /* 0: unset */
        bool readonly_rootfs;
        const struct engine_tmpfs *tmpfs;
        size_t n_tmpfs;
        const char *workspace; /* host directory, read-write at CONTAINER_WORKSPACE */
        /* The engine's own volume for the workspace when it is not the one it
         * names after the session's labels (Kubernetes pvc mode: a pool
         * slot's claim the session took over, store_uid_claim_get); NULL: that one. */
        const char *workspace_claim;
        /* Both set: the runner binary and the session directory, read-only
         * (RP_BINARY_PATH, RP_SOCKET_DIR), the runner as the main process.
         * Either NULL: the image's command. A relative session_dir (only to
         * an engine that places containers itself) is relative to the data_dir
         * of the node agent of whichever node the container lands on. */
        const char *session_dir;
        const char *runner_binary;
        const char *passwd_file; /* host files read-only on /etc/passwd and /etc/group (NULL: the image's) */
        const char *group_file;
        const char *runtime_class; /* "runc" | "runsc" | NULL (the engine's default) */
        const char *network;       /* an isolated network made by engine_network_ensure; NULL: loopback only */
        const char *const *env;    /* "K=V", NULL-terminated */
        const char *workdir;
        const char *hostname;
        const struct engine_label *labels;
        size_t n_labels;
};

/* The capability bits a spec asks for that the engine lacks (0: all enforced). */
unsigned engine_spec_unenforced(const struct engine *e, const struct engine_spec *spec);

struct engine_container_info {
        char id[ENGINE_ID_STR_MAX];
        char name[128];
        char image[160];
        char image_id[80];
        char status[16]; /* created|running|paused|restarting|removing|exited|dead */
        bool running;
        bool restarting;
        bool oom_killed;
        bool dead;
        int exit_code;
        int pid;
        int restart_count;
        char started_at[40]; /* RFC 3339 */
        char finished_at[40];
        char error[256];
        char network_mode[64];
        char runtime[32];
        char node[NODE_NAME_MAX + 1]; /* the node it runs on, for an engine that places containers
                                       * itself (engine.places: a Pod's spec.nodeName); "" otherwise
                                       * or until it is placed */
        bool has_network;             /* attached to any network beyond loopback */
        /* what the engine applied, for verification */
        bool readonly_rootfs;
        bool init;
        bool privileged;
        int64_t memory, memory_swap, nano_cpus, pids_limit, cpu_shares;
        int oom_score_adj;
        struct engine_kv labels[ENGINE_MAX_LABELS]; /* sandboxd.* first */
        size_t n_labels;
};

struct engine_container_summary {
        char id[ENGINE_ID_STR_MAX];
        char name[128];
        char state[16];
        int64_t created; /* unix seconds */
        struct engine_kv labels[ENGINE_MAX_LABELS];
        size_t n_labels;
};

/* A workspace volume the engine keeps (Kubernetes: a PersistentVolumeClaim). */
struct engine_claim_summary {
        char name[ENGINE_CLAIM_MAX];
        struct engine_kv labels[ENGINE_MAX_LABELS];
        size_t n_labels;
};

struct engine_stats {
        uint64_t memory_usage;
        uint64_t memory_limit;
        uint64_t pids;
        uint64_t cpu_total_ns;
};

struct engine_event {
        char type[16];   /* "container" */
        char action[32]; /* "die", "oom", "kill", "stop", "destroy", "start", ...; "lost": its node is lost */
        char id[ENGINE_ID_STR_MAX];
        int exit_code;   /* -1 if absent */
        char cause[128]; /* "lost": why ("node_not_ready: <node>", "node_gone: <node>"); else "" */
        int64_t time_nano;
        struct engine_kv labels[ENGINE_MAX_LABELS]; /* sandboxd.* and the filtered ones */
        size_t n_labels;
};
/* Non-zero stops the stream. */
typedef int (*engine_event_cb)(const struct engine_event *ev, void *userdata);

struct engine_exec_spec {
        const char *const *cmd; /* argv, required */
        const char *const *env;
        const char *workdir;
        const char *user;
        bool attach_stdin;
};

enum engine_stream_kind {
        ENGINE_STREAM_STDIN = 0,
        ENGINE_STREAM_STDOUT = 1,
        ENGINE_STREAM_STDERR = 2,
};

struct engine_exec_info {
        bool running;
        int exit_code; /* -1 while running */
        int pid;
};

struct engine_exec_result {
        int exit_code;
        char *out;
        size_t out_len;
        char *err;
        size_t err_len;
        bool truncated;
};
/* Free the outputs of a result (accepts NULL; safe twice). */
void engine_exec_result_done(struct engine_exec_result *r);

/* The table an engine fills; every entry's meaning is stated here, for any
 * engine. "id" is what create returned (a container, a Pod: the engine's
 * own handle, at most ENGINE_ID_STR_MAX - 1 bytes). */
/* A memory capture's count of the connections it could not keep (memory_capture). */
#define ENGINE_MEMORY_CONNECTIONS "memory.connections"

struct engine_ops {
        /* Free the engine's own state (priv); no call is in flight. */
        void (*free)(struct engine *e);
        /* Reach the engine and settle what the session needs (Docker: the API
         * version). Before it, other calls may still work, unversioned. */
        int (*connect)(struct engine *e, struct sbx_error *err);
        /* The engine's name and version, for status pages and logs. */
        int (*version)(struct engine *e, struct engine_version *ret, struct sbx_error *err);
        /* Calls that failed for a reason other than the engine's ordinary answers. */
        uint64_t (*api_errors)(struct engine *e);
        /* The image as the engine has it locally (id, digest, the recipe
         * label); -ENOENT when it does not have it (nothing is pulled). */
        int (*image_inspect)(struct engine *e, const char *image, struct engine_image_info *ret, struct sbx_error *err);
        /* Whether the engine offers this runtime class. */
        int (*has_runtime)(struct engine *e, const char *name, bool *ret, struct sbx_error *err);

        /* Create (not start) from the hardened spec, named spec->name. The
         * caller has checked engine_spec_unenforced(); the engine leaves those
         * settings out and applies every other one, or fails. A missing image
         * is -ENOENT, a taken name -EEXIST. */
        int (*create)(struct engine *e, const struct engine_spec *spec, char ret_id[ENGINE_ID_STR_MAX],
                      struct sbx_error *err);
        /* Start what create made; one that already runs is success. */
        int (*start)(struct engine *e, const char *id, struct sbx_error *err);
        /* Its state now (running, paused, exit code, OOM, node, labels). */
        int (*inspect)(struct engine *e, const char *id, struct engine_container_info *ret, struct sbx_error *err);
        /* Ask it to stop, killing it after timeout_s; one already stopped is
         * success. The call's bound is the engine's timeout plus timeout_s. */
        int (*stop)(struct engine *e, const char *id, int timeout_s, struct sbx_error *err);
        /* Force-remove with its anonymous volumes; a missing one is -ENOENT. */
        int (*remove)(struct engine *e, const char *id, struct sbx_error *err);
        /* Containers (all: stopped ones too) whose labels pass every filter;
         * label_filters: NULL-terminated "key" or "key=value". *ret_list is
         * malloc'd (free()). */
        int (*list)(struct engine *e, const char *const *label_filters, bool all,
                    struct engine_container_summary **ret_list, size_t *ret_n, struct sbx_error *err);
        /* The last tail_lines lines (< 0: all) of its main process's output,
         * stdout and stderr joined in arrival order; *ret_text malloc'd. */
        int (*logs)(struct engine *e, const char *id, int tail_lines, char **ret_text, struct sbx_error *err);
        /* One sample of its usage; what the engine does not report is 0. */
        int (*stats)(struct engine *e, const char *id, struct engine_stats *ret, struct sbx_error *err);
        /* Freeze and thaw every process, memory kept; -EBUSY when it is not
         * running (pause) or not paused (unpause). */
        int (*pause)(struct engine *e, const char *id, struct sbx_error *err);
        int (*unpause)(struct engine *e, const char *id, struct sbx_error *err);
        /* The to-disk half of a pause (ENGINE_CAP_MEMORY_CAPTURE): a container pause
         * froze has its memory saved to disk and its process ended; it reads as
         * paused (inspect, list, also to a restarted daemon); unpause boots it
         * again from the save, every process where it was; stop forgets the
         * save. On failure it stays paused in memory. */
        int (*pause_to_disk)(struct engine *e, const char *id, struct sbx_error *err);
        /* A memory capture (ENGINE_CAP_MEMORY_CAPTURE): stop container id,
         * write its memory, device state and workspace disk into dirfd (root's
         * files), run it on unless it was paused. -EDQUOT when they would take
         * more than room bytes; *ret_bytes what the files take. */
        int (*memory_capture)(struct engine *e, const char *id, int dirfd, int64_t room, int64_t *ret_bytes,
                              struct sbx_error *err);
        /* memory_capture also writes ENGINE_MEMORY_CONNECTIONS into dirfd (decimal text): the
         * connections open through the runner at that instant (egress clients, forwarded
         * connections), which no boot from the capture carries: each such boot drops them. */
        /* A boot from a capture: the next container made for user/session
         * starts from the capture in dir (a root-owned directory that
         * memory_capture filled), its disk copied in as the session's, every
         * process where it was. boot_cancel forgets one nobody claimed (a fork
         * that failed before its container). */
        int (*memory_boot)(struct engine *e, const char *user, const char *session, const char *dir,
                           struct sbx_error *err);
        void (*memory_boot_cancel)(struct engine *e, const char *user, const char *session);
        /* Blocks on the calling thread; reconnects without losing or repeating
         * events while the engine can say so (docker_events_follow). Kubernetes
         * also tells "lost" (ev->cause says why: its node is NotReady or gone)
         * when actions names it; the callback is never called from two threads
         * at once. */
        int (*events_follow)(struct engine *e, const char *const *label_filters, const char *const *actions,
                             engine_event_cb cb, void *userdata, volatile bool *stop, long reconnect_limit_ms,
                             struct sbx_error *err);

        /* The isolated network of engine_spec.network: made (inter-container
         * traffic off) unless it exists; one that allows that traffic is -EPERM. */
        int (*network_ensure)(struct engine *e, const char *name, const struct engine_label *labels, size_t n_labels,
                              struct sbx_error *err);
        int (*network_list)(struct engine *e, const char *const *label_filters, char (**ret_names)[128], size_t *ret_n,
                            struct sbx_error *err);
        int (*network_remove)(struct engine *e, const char *name, struct sbx_error *err);

        /* Delete what the engine keeps of a session's workspace beyond the
         * host directory (Kubernetes: the session's PersistentVolumeClaim);
         * NULL: nothing. Gone already is 0. */
        int (*workspace_drop)(struct engine *e, const char *instance, const char *user, const char *session,
                              const char *claim, struct sbx_error *err);
        /* Hand a container made ahead, and what the engine keeps of its
         * workspace, to another owner without recreating either (the warm
         * pool's claim): set each label of set on both (a NULL value takes
         * the key away). ret_claim: the engine's volume of the workspace
         * ("" when it keeps none). Idempotent. -ENOENT: the container is gone,
         * going or dead (the claim takes the cold path). NULL: the engine
         * cannot relabel (Docker); its labels stay and the store decides. */
        int (*relabel)(struct engine *e, const char *id, const struct engine_label *set, size_t n_set,
                       char ret_claim[ENGINE_CLAIM_MAX], struct sbx_error *err);
        /* The workspace volumes whose labels pass every filter (as list's),
         * those being deleted left out; NULL: the engine keeps none. */
        int (*claim_list)(struct engine *e, const char *const *label_filters, struct engine_claim_summary **ret_list,
                          size_t *ret_n, struct sbx_error *err);

        /* The exec fallback: a process started in a running container by
         * the engine itself, used only when the runner cannot be reached.
         * create makes it (-EBUSY if the container is not running), attach
         * starts it and returns its stdin/stdout/stderr as one stream (its
         * own connection; -ENOENT for an unknown exec id), inspect tells
         * whether it still runs and its exit code, run does all three and
         * collects at most max_output bytes within timeout_ms. */
        int (*fallback_create)(struct engine *e, const char *container_id, const struct engine_exec_spec *spec,
                               char ret_exec_id[ENGINE_ID_STR_MAX], struct sbx_error *err);
        int (*fallback_attach)(struct engine *e, const char *exec_id, struct engine_stream **ret_stream,
                               struct sbx_error *err);
        int (*fallback_inspect)(struct engine *e, const char *exec_id, struct engine_exec_info *ret,
                                struct sbx_error *err);
        int (*fallback_run)(struct engine *e, const char *container_id, const struct engine_exec_spec *spec,
                            const void *stdin_data, size_t stdin_len, size_t max_output, int timeout_ms,
                            struct engine_exec_result *ret, struct sbx_error *err);
        /* A fallback stream. read: the next chunk with its kind, blocking up
         * to timeout_ms (-1 forever): > 0 bytes, 0 at its end, -ETIMEDOUT or
         * -errno. write_some: what the stream takes now without waiting (0
         * when full; -EPIPE once stdin is closed). wait: until a read (or,
         * with writable, a write) would not block. close_write: end of
         * input. free: close it; the process keeps running; accepts NULL. */
        ssize_t (*stream_read)(struct engine_stream *s, enum engine_stream_kind *ret_kind, void *buf, size_t cap,
                               int timeout_ms);
        ssize_t (*stream_write_some)(struct engine_stream *s, const void *buf, size_t len);
        int (*stream_wait)(struct engine_stream *s, bool writable, int timeout_ms);
        int (*stream_close_write)(struct engine_stream *s);
        void (*stream_free)(struct engine_stream *s);
};

struct engine {
        const struct engine_ops *ops;
        const char *name;      /* "docker" */
        unsigned capabilities; /* ENGINE_CAP_* */
        /* The engine puts containers on nodes itself (Kubernetes: kube-scheduler): over a node
         * link the session directory is opened on the node inspect names once the container is
         * placed, and the spec's session_dir is then relative (engine_spec). */
        bool places;
        void *priv; /* the implementation's own */
};

struct sbx_config;
/* The engine the config names (engine = docker | kubernetes), not yet
 * connected (engine_connect). */
int engine_new_from_config(const struct sbx_config *cfg, struct engine **ret, struct sbx_error *err);

/* Free an engine (accepts NULL). No other thread may use it any more. */
void engine_free(struct engine *e);

/* The microVMs beside Docker (engine_select.c's router; runtime.h's microvm), named without
 * the engine that runs them. engine_microvm_accel: "kvm" or "tcg", how the microVMs of e run;
 * NULL where e runs none (no QEMU or guest, or another engine). engine_microvm_id: whether
 * id names one of them (a container id of any engine otherwise). */
const char *engine_microvm_accel(const struct engine *e);
bool engine_microvm_id(const char *id);

/* A microVM engine's leftovers (src/qemu/qemu_gc.c): VM cgroups that a VM's removal of this data
 * directory could not take (always; never another daemon's, never one with a task), and
 * with rootfs the images' root file systems {data_dir}/vm/rootfs/<hex>.img that no VM of this
 * data directory and no memory snapshot names, unused for ENGINE_MICROVM_ROOTFS_GC_AGE_S, whose
 * per-image lock is free (nobody makes or waits for it). note is told each one removed (r 0;
 * dry_run: would be), kept because it is being made (r -EBUSY) or that failed (r -errno).
 * Startup reconciliation sweeps the cgroups, --gc both. -EOPNOTSUPP where e runs no microVMs. */
#define ENGINE_MICROVM_ROOTFS_GC_AGE_S (24 * 3600)
enum { ENGINE_MICROVM_GC_CGROUP, ENGINE_MICROVM_GC_ROOTFS };
struct engine_microvm_gc {
        bool dry_run;
        bool rootfs;
        int64_t now_ms; /* 0: the clock */
        void (*note)(void *ud, int kind, const char *what, uint64_t bytes, const char *reason, int r);
        void *ud;
};
int engine_microvm_gc(struct engine *e, const struct engine_microvm_gc *o);
/* Microvm VM id's rootfs_note (why it boots the busybox guest, not its image) into buf: "" when
 * it has its image's root file system. -ENOENT: no such VM; -EOPNOTSUPP: e runs none. */
int engine_microvm_rootfs_note(struct engine *e, const char *id, char *buf, size_t size);

static inline bool engine_can(const struct engine *e, unsigned cap)
{
        return (e->capabilities & cap) == cap;
}

/* The calls. Each is its op, nothing more: no copy, no extra request. */
static inline int engine_connect(struct engine *e, struct sbx_error *err)
{
        return e->ops->connect ? e->ops->connect(e, err) : 0;
}
static inline int engine_version(struct engine *e, struct engine_version *ret, struct sbx_error *err)
{
        return e->ops->version(e, ret, err);
}
static inline uint64_t engine_api_errors(struct engine *e)
{
        return e->ops->api_errors ? e->ops->api_errors(e) : 0;
}
static inline int engine_image_inspect(struct engine *e, const char *image, struct engine_image_info *ret,
                                       struct sbx_error *err)
{
        return e->ops->image_inspect(e, image, ret, err);
}
static inline int engine_has_runtime(struct engine *e, const char *name, bool *ret, struct sbx_error *err)
{
        return e->ops->has_runtime(e, name, ret, err);
}
static inline int engine_create(struct engine *e, const struct engine_spec *spec, char ret_id[ENGINE_ID_STR_MAX],
                                struct sbx_error *err)
{
        return e->ops->create(e, spec, ret_id, err);
}
static inline int engine_start(struct engine *e, const char *id, struct sbx_error *err)
{
        return e->ops->start(e, id, err);
}
static inline int engine_inspect(struct engine *e, const char *id, struct engine_container_info *ret,
                                 struct sbx_error *err)
{
        return e->ops->inspect(e, id, ret, err);
}
static inline int engine_stop(struct engine *e, const char *id, int timeout_s, struct sbx_error *err)
{
        return e->ops->stop(e, id, timeout_s, err);
}
static inline int engine_remove(struct engine *e, const char *id, struct sbx_error *err)
{
        return e->ops->remove(e, id, err);
}
static inline int engine_list(struct engine *e, const char *const *label_filters, bool all,
                              struct engine_container_summary **ret_list, size_t *ret_n, struct sbx_error *err)
{
        return e->ops->list(e, label_filters, all, ret_list, ret_n, err);
}
static inline int engine_logs(struct engine *e, const char *id, int tail_lines, char **ret_text, struct sbx_error *err)
{
        if (!e->ops->logs)
                return sbx_error_set(err, -EOPNOTSUPP, 0, "the %s engine keeps no logs", e->name);
        return e->ops->logs(e, id, tail_lines, ret_text, err);
}
static inline int engine_stats(struct engine *e, const char *id, struct engine_stats *ret, struct sbx_error *err)
{
        if (!e->ops->stats)
                return sbx_error_set(err, -EOPNOTSUPP, 0, "the %s engine reports no stats", e->name);
        return e->ops->stats(e, id, ret, err);
}
static inline int engine_pause(struct engine *e, const char *id, struct sbx_error *err)
{
        if (!e->ops->pause)
                return sbx_error_set(err, -EOPNOTSUPP, 0, "the %s engine cannot pause", e->name);
        return e->ops->pause(e, id, err);
}
static inline int engine_unpause(struct engine *e, const char *id, struct sbx_error *err)
{
        if (!e->ops->unpause)
                return sbx_error_set(err, -EOPNOTSUPP, 0, "the %s engine cannot pause", e->name);
        return e->ops->unpause(e, id, err);
}
static inline int engine_pause_to_disk(struct engine *e, const char *id, struct sbx_error *err)
{
        if (!engine_can(e, ENGINE_CAP_MEMORY_CAPTURE) || !e->ops->pause_to_disk)
                return sbx_error_set(err, -EOPNOTSUPP, 0, "the %s engine cannot pause to disk", e->name);
        return e->ops->pause_to_disk(e, id, err);
}
static inline int engine_memory_capture(struct engine *e, const char *id, int dirfd, int64_t room, int64_t *ret_bytes,
                                        struct sbx_error *err)
{
        if (!engine_can(e, ENGINE_CAP_MEMORY_CAPTURE) || !e->ops->memory_capture)
                return sbx_error_set(err, -EOPNOTSUPP, 0, "the %s engine cannot keep a container's memory", e->name);
        return e->ops->memory_capture(e, id, dirfd, room, ret_bytes, err);
}
static inline int engine_memory_boot(struct engine *e, const char *user, const char *session, const char *dir,
                                     struct sbx_error *err)
{
        if (!engine_can(e, ENGINE_CAP_MEMORY_CAPTURE) || !e->ops->memory_boot)
                return sbx_error_set(err, -EOPNOTSUPP, 0, "the %s engine cannot boot from a memory capture", e->name);
        return e->ops->memory_boot(e, user, session, dir, err);
}
static inline void engine_memory_boot_cancel(struct engine *e, const char *user, const char *session)
{
        if (engine_can(e, ENGINE_CAP_MEMORY_CAPTURE) && e->ops->memory_boot_cancel)
                e->ops->memory_boot_cancel(e, user, session);
}
static inline int engine_events_follow(struct engine *e, const char *const *label_filters, const char *const *actions,
                                       engine_event_cb cb, void *userdata, volatile bool *stop, long reconnect_limit_ms,
                                       struct sbx_error *err)
{
        if (!e->ops->events_follow)
                return sbx_error_set(err, -EOPNOTSUPP, 0, "the %s engine has no events", e->name);
        return e->ops->events_follow(e, label_filters, actions, cb, userdata, stop, reconnect_limit_ms, err);
}
static inline int engine_network_ensure(struct engine *e, const char *name, const struct engine_label *labels,
                                        size_t n_labels, struct sbx_error *err)
{
        if (!e->ops->network_ensure)
                return sbx_error_set(err, -EOPNOTSUPP, 0, "the %s engine has no isolated network", e->name);
        return e->ops->network_ensure(e, name, labels, n_labels, err);
}
static inline int engine_network_list(struct engine *e, const char *const *label_filters, char (**ret_names)[128],
                                      size_t *ret_n, struct sbx_error *err)
{
        if (!e->ops->network_list) {
                *ret_names = NULL;
                *ret_n = 0;
                return 0;
        }
        return e->ops->network_list(e, label_filters, ret_names, ret_n, err);
}
static inline int engine_network_remove(struct engine *e, const char *name, struct sbx_error *err)
{
        return e->ops->network_remove ? e->ops->network_remove(e, name, err) : -EOPNOTSUPP;
}
/* claim: the volume recorded for the session (store_uid_claim_get), or NULL: the engine's name for the key. */
static inline int engine_workspace_drop(struct engine *e, const char *instance, const char *user, const char *session,
                                        const char *claim, struct sbx_error *err)
{
        return e->ops->workspace_drop ? e->ops->workspace_drop(e, instance, user, session, claim, err) : 0;
}
static inline int engine_relabel(struct engine *e, const char *id, const struct engine_label *set, size_t n_set,
                                 char ret_claim[ENGINE_CLAIM_MAX], struct sbx_error *err)
{
        if (!e->ops->relabel)
                return sbx_error_set(err, -EOPNOTSUPP, 0, "the %s engine cannot relabel", e->name);
        return e->ops->relabel(e, id, set, n_set, ret_claim, err);
}
static inline int engine_claim_list(struct engine *e, const char *const *label_filters,
                                    struct engine_claim_summary **ret_list, size_t *ret_n, struct sbx_error *err)
{
        if (!e->ops->claim_list) {
                *ret_list = NULL;
                *ret_n = 0;
                return 0;
        }
        return e->ops->claim_list(e, label_filters, ret_list, ret_n, err);
}
static inline int engine_exec_create(struct engine *e, const char *container_id, const struct engine_exec_spec *spec,
                                     char ret_exec_id[ENGINE_ID_STR_MAX], struct sbx_error *err)
{
        if (!e->ops->fallback_create)
                return sbx_error_set(err, -EOPNOTSUPP, 0, "the %s engine has no exec", e->name);
        return e->ops->fallback_create(e, container_id, spec, ret_exec_id, err);
}
static inline int engine_exec_attach(struct engine *e, const char *exec_id, struct engine_stream **ret_stream,
                                     struct sbx_error *err)
{
        return e->ops->fallback_attach(e, exec_id, ret_stream, err);
}
static inline int engine_exec_inspect(struct engine *e, const char *exec_id, struct engine_exec_info *ret,
                                      struct sbx_error *err)
{
        return e->ops->fallback_inspect(e, exec_id, ret, err);
}
static inline int engine_exec_run(struct engine *e, const char *container_id, const struct engine_exec_spec *spec,
                                  const void *stdin_data, size_t stdin_len, size_t max_output, int timeout_ms,
                                  struct engine_exec_result *ret, struct sbx_error *err)
{
        if (!e->ops->fallback_run)
                return sbx_error_set(err, -EOPNOTSUPP, 0, "the %s engine has no exec", e->name);
        return e->ops->fallback_run(e, container_id, spec, stdin_data, stdin_len, max_output, timeout_ms, ret, err);
}
static inline ssize_t engine_stream_read(struct engine *e, struct engine_stream *s, enum engine_stream_kind *ret_kind,
                                         void *buf, size_t cap, int timeout_ms)
{
        return e->ops->stream_read(s, ret_kind, buf, cap, timeout_ms);
}
static inline ssize_t engine_stream_write_some(struct engine *e, struct engine_stream *s, const void *buf, size_t len)
{
        return e->ops->stream_write_some(s, buf, len);
}
static inline int engine_stream_wait(struct engine *e, struct engine_stream *s, bool writable, int timeout_ms)
{
        return e->ops->stream_wait(s, writable, timeout_ms);
}
static inline int engine_stream_close_write(struct engine *e, struct engine_stream *s)
{
        return e->ops->stream_close_write(s);
}
/* Accepts NULL. */
static inline void engine_stream_free(struct engine *e, struct engine_stream *s)
{
        if (s)
                e->ops->stream_free(s);
}

/* One engine call (a Docker API call, a Kubernetes API request) may take
 * this long: the engine answers in milliseconds unless it is wedged, and a
 * wedged one must not hold a worker for long. */
#define ENGINE_CALL_TIMEOUT_MS 30000

#endif
