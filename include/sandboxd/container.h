/* container.h — the hardened container a session gets, its workspace, and
 * the sustained-state start check. Knows Docker (through docker.h) and the
 * config; knows nothing of session state, which session.c owns. */
#ifndef SANDBOXD_CONTAINER_H
#define SANDBOXD_CONTAINER_H

#include <stddef.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct docker;

#define CONTAINER_LABEL_MANAGED "sandboxd.managed"
#define CONTAINER_LABEL_USER "sandboxd.user"
#define CONTAINER_LABEL_SESSION "sandboxd.session"
#define CONTAINER_LABEL_INSTANCE "sandboxd.instance"
#define CONTAINER_WORKSPACE "/workspace"

struct container_params {
        const char *user;
        const char *session;
        const char *image;        /* resolved image id ("sha256:...") or name */
        const char *network_mode; /* "bridge" (sandboxd's own network) | "none" */
        bool egress_proxy;        /* HTTP(S)_PROXY & co. point at the runner's egress endpoint */
        const char *runtime;      /* OCI runtime ("runc" | "runsc"); NULL: the engine's default */
        const char *workspace;    /* host path of the workspace */
        const char *const *extra_labels; /* NULL-terminated "k=v", e.g. the test run label */
        /* Both set: the runner binary and the session's runner directory are
         * bind-mounted read-only and the runner is the main process under the
         * init. Either NULL: the image's command runs (docker exec only). */
        const char *runner_binary;
        const char *runner_dir;
};

/* Create (if missing) {data_dir}/workspaces/{user}/{session}: every level is
 * opened with O_NOFOLLOW|O_DIRECTORY relative to its parent, so no symlink is
 * followed; parents are root-owned 0711, the session directory is owned by
 * sandbox_uid with mode 0700. Keys must already be validated. */
int container_workspace_ensure(const struct sbx_config *cfg, const char *user, const char *session,
                               char ret_path[SBX_PATH_MAX], struct sbx_error *err);

/* Delete the workspace tree without following any symlink in it. */
int container_workspace_purge(const struct sbx_config *cfg, const char *user, const char *session,
                              struct sbx_error *err);

/* Create and start the hardened container, then require startup_checks
 * consecutive running inspections startup_check_interval_ms apart (the first
 * one immediately). If it exits or restarts inside that window the error
 * carries the exit code and the last log lines, and the container is removed.
 * A missing image gives -ENOENT naming the image and the build command. */
int container_create_started(struct docker *d, const struct sbx_config *cfg, const struct container_params *p,
                             char ret_id[65], struct sbx_error *err);

/* Remove (force) a container; a container that is already gone is success. */
int container_remove(struct docker *d, const char *id, struct sbx_error *err);

#define CONTAINER_NETWORK_ICC_OPTION "com.docker.network.bridge.enable_icc"

/* "sandboxd-<instance>": the bridge network of network_default = bridge,
 * labelled sandboxd.managed=1 and sandboxd.instance. */
void container_network_name(const struct sbx_config *cfg, char *ret, size_t size);
/* Create it (inter-container traffic off) unless it exists; refuse one of
 * that name whose inter-container traffic is on. */
int container_network_ensure(struct docker *d, const struct sbx_config *cfg, struct sbx_error *err);

/* Container-side port number i of the session's block. */
static inline int container_port(const struct sbx_config *cfg, size_t i) { return cfg->container_port_base + (int)i; }

#endif
