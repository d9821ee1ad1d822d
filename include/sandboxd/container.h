/* container.h — the hardened container a session gets, its workspace, and
 * the sustained-state start check, and the check of a running container
 * before each use. Knows the engine (engine.h) and the config; knows
 * nothing of session state, which session*.c own. */
#ifndef SANDBOXD_CONTAINER_H
#define SANDBOXD_CONTAINER_H

#include <stddef.h>
#include <sys/types.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct engine;

#define CONTAINER_LABEL_MANAGED "sandboxd.managed"
#define CONTAINER_LABEL_USER "sandboxd.user"
#define CONTAINER_LABEL_SESSION "sandboxd.session"
#define CONTAINER_LABEL_INSTANCE "sandboxd.instance"
#define CONTAINER_LABEL_PREFIX "sandboxd.label." /* a session's own labels (docker ps --filter) */
#define CONTAINER_WORKSPACE "/workspace"
/* A warm pool slot's container (pool.h): user "@pool" (no valid user id),
 * session <slot>, and this label. */
#define CONTAINER_POOL_USER "@pool"
#define CONTAINER_LABEL_POOL "sandboxd.pool"

/* The start line (container_create_started): creates-and-starts with the
 * engine at once, of them one user's while another user waits, and how long
 * a start waits its turn before it is refused as busy. */
#define CONTAINER_STARTS_MAX 4
#define CONTAINER_STARTS_PER_USER 2
#define CONTAINER_START_QUEUE_MS 300000

struct container_params {
        const char *user;
        const char *session;
        const char *image;               /* resolved image id ("sha256:...") or name */
        const char *network_mode;        /* "bridge" (sandboxd's own network) | "none" */
        bool egress_proxy;               /* HTTP(S)_PROXY & co. point at the runner's egress endpoint */
        const char *runtime;             /* OCI runtime ("runc" | "runsc"); NULL: the engine's default */
        const char *workspace;           /* host path of the workspace */
        const char *workspace_claim;     /* the engine's volume of it, when recorded (engine_spec); NULL */
        uid_t uid;                       /* the session's host uid (and gid), sessuid.h; never 0 */
        const char *const *extra_labels; /* NULL-terminated "k=v", e.g. the test run label */
        /* Both set: the runner binary and the session's runner directory are
         * bind-mounted read-only and the runner is the main process under the
         * init. Either NULL: the image's command runs (docker exec only). */
        const char *runner_binary;
        const char *runner_dir;
        /* What the session asked for (sessspec.h); 0: the config's memory and cpus. */
        int64_t memory_bytes;
        int64_t nano_cpus;
        /* The session's labels as {"key": "value"} JSON (checked: sessspec.h), or
         * NULL; each becomes the Docker label CONTAINER_LABEL_PREFIX<key>. */
        const char *labels_json;
        /* An engine that places containers itself (engine.places): called
         * once the container is created, before its start is waited for,
         * with its id (the callee waits for its node and opens the session
         * directory there: node.h). A failure removes the container. */
        int (*placed)(const char *id, void *userdata, struct sbx_error *err);
        void *placed_ud;
};

/* Create (if missing) {data_dir}/workspaces/{user}/{session}: every level is
 * opened with O_NOFOLLOW|O_DIRECTORY relative to its parent, so no symlink is
 * followed; parents are root-owned 0700 (no session uid reaches any
 * workspace by path on the host), the session directory is owned by
 * uid:uid (the session's, sessuid.h) with mode 0700. A workspace another uid
 * owned (one from before per-session uids) is handed over whole first
 * (sessuid_own_tree). Keys must already be validated; uid 0 is refused. */
int container_workspace_ensure(const struct sbx_config *cfg, const char *user, const char *session, uid_t uid,
                               char ret_path[SBX_PATH_MAX], struct sbx_error *err);

/* {data_dir}/identities/<uid>.passwd and .group (root's, 0644, in a 0700
 * directory): root,
 * "sandbox" at uid:uid with home /workspace, nobody. Bind-mounted read-only
 * on the container's /etc/passwd and /etc/group, so the session's uid has a
 * name inside (whoami, getpwuid, ~). Rewritten only when they differ. */
int container_identity_ensure(const struct sbx_config *cfg, uid_t uid, char ret_passwd[SBX_PATH_MAX],
                              char ret_group[SBX_PATH_MAX], struct sbx_error *err);
/* Delete the identity files of a released uid. */
void container_identity_drop(const struct sbx_config *cfg, uid_t uid);

/* Delete the workspace tree without following any symlink in it. */
int container_workspace_purge(const struct sbx_config *cfg, const char *user, const char *session,
                              struct sbx_error *err);

/* Create and start the hardened container, then require CONTAINER_STARTUP_CHECKS
 * consecutive running inspections startup_check_interval_ms apart (the first
 * one immediately). If it exits or restarts inside that window the error
 * carries the exit code and the last log lines, and the container is removed.
 * A missing image gives -ENOENT naming the image and the build command.
 * A setting the engine cannot enforce (engine.h) is logged once, and
 * refused (-EOPNOTSUPP) when it is the runtime or the isolated network.
 * The create and start wait their turn in the start line (at most
 * CONTAINER_START_QUEUE_MS, then -EBUSY); the sustained check does not. */
int container_create_started(struct engine *e, const struct sbx_config *cfg, const struct container_params *p,
                             char ret_id[65], struct sbx_error *err);

/* The ENGINE_CAP_* bits of the config's limits that the engine leaves
 * unenforced (0: all enforced), for the admin status. */
unsigned container_unenforced(const struct engine *e, const struct sbx_config *cfg);

/* Remove (force) a container; a container that is already gone is success. */
int container_remove(struct engine *e, const char *id, struct sbx_error *err);

/* Inspect a session's running container before it is used: 0 if usable as
 * is (its runtime in ret_runtime), 1 with the reason to (re)create it in
 * cause ("removed", "oom_killed", "exited with code N", or
 * "privacy_ratchet" when network is "none" and it has one), -errno when
 * the engine fails. */
int container_validate(struct engine *e, const char *id, const char *network, char *cause, size_t size,
                       char ret_runtime[16], struct sbx_error *err);

#define CONTAINER_NETWORK_ICC_OPTION "com.docker.network.bridge.enable_icc"

/* "sandboxd-<instance>": the bridge network of network_default = bridge,
 * labelled sandboxd.managed=1 and sandboxd.instance. */
void container_network_name(const struct sbx_config *cfg, char *ret, size_t size);
/* Create it (inter-container traffic off) unless it exists; refuse one of
 * that name whose inter-container traffic is on. */
int container_network_ensure(struct engine *e, const struct sbx_config *cfg, struct sbx_error *err);

/* Container-side port number i of the session's block. */
static inline int container_port(const struct sbx_config *cfg, size_t i)
{
        return cfg->container_port_base + (int)i;
}

/* Constants that were config keys; the sandbox's own limits (memory, cpus,
 * pids_limit) stay keys. */
/* CPU weight below the 1024 of the daemon, dockerd and host processes, so a
 * busy sandbox cannot starve them. */
#define CONTAINER_CPU_SHARES 256
/* Host memory pressure takes sandbox processes before the daemon. */
#define CONTAINER_OOM_SCORE_ADJ 500
/* The noexec tmpfs at /tmp: scratch space; files to keep go to /workspace. */
#define CONTAINER_TMPFS_BYTES (INT64_C(64) << 20)
/* A container counts as started after this many running inspections this
 * far apart: one that crashes at once is caught before it is handed out. */
#define CONTAINER_STARTUP_CHECKS 3
#define CONTAINER_STARTUP_CHECK_INTERVAL_MS 25
/* A session's port block forwards to container ports 8000.., the port the
 * API documents to tenants: changing it would break their code. */
#define CONTAINER_PORT_BASE 8000

#endif
