/* wsquota.h — the disk quota of session workspaces (workspace.quota_mode).
 *
 *   off      no limit (usage is still reported, measured by a bounded scan)
 *   loop     each workspace is its own ext4 file system in a sparse image,
 *            {data_dir}/workspace-images/<user>/<session>.ext4, of
 *            workspace.quota bytes and workspace.inodes inodes, loop-mounted
 *            on {data_dir}/workspaces/<user>/<session> while the session has
 *            a container. The kernel enforces the limit: a write past it
 *            fails with ENOSPC inside the container.
 *   measure  the last resort: usage is measured by a bounded scan, and new
 *            executions and file writes of a session at or past its quota
 *            are refused with -EDQUOT (API code quota_exceeded).
 *   project  file system project quotas: detected and refused at start
 *            (not implemented; see docs/operations.md).
 *
 * Stateless: the mount table is the state. Keys must be validated
 * (session_key_check) before they reach this module. Callers serialise
 * attach and detach per session (session_container.c and session_stop.c do,
 * under the session's transition). */
#ifndef SANDBOXD_WSQUOTA_H
#define SANDBOXD_WSQUOTA_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct wsquota_usage {
        char mode[16];        /* the workspace.quota_mode in force */
        bool known;           /* the figures below could be read */
        bool mounted;         /* loop: the image is mounted now */
        bool over;            /* at or past a limit */
        uint64_t bytes_used;  /* loop: blocks in use, file system metadata included */
        uint64_t bytes_limit; /* 0: none */
        uint64_t inodes_used;
        uint64_t inodes_limit; /* 0: none */
};

/* At start: can the configured mode work here? loop needs /dev/loop-control
 * and mkfs.ext4; project is refused with a clear reason. */
int wsquota_check_config(const struct sbx_config *cfg, struct sbx_error *err);

/* loop: make the workspace's image if it has none (refused with -ENOTEMPTY
 * if the directory already holds files from before loop mode) and mount it
 * on the workspace directory, unless mounted already. The mounted root gets
 * the owner that container_workspace_ensure gave the directory (the
 * session's uid; an image's tree from an earlier owner is handed over with
 * sessuid_own_tree), mode 0700; the directory underneath becomes root's, so a container that ever gets it
 * unmounted cannot write there. Other modes: nothing. */
int wsquota_attach(const struct sbx_config *cfg, const char *user, const char *session, struct sbx_error *err);
/* The same, an image it makes being bytes large (0: workspace.quota): a
 * session's requested disk (sessspec.h). An existing image keeps its size. */
int wsquota_attach_sized(const struct sbx_config *cfg, const char *user, const char *session, int64_t bytes,
                         struct sbx_error *err);

/* loop: unmount the workspace (lazily if something still holds it); the loop
 * device goes with the last reference (autoclear). Not mounted: 0. */
int wsquota_detach(const struct sbx_config *cfg, const char *user, const char *session, struct sbx_error *err);

/* loop: detach, then delete the image. Other modes: nothing. */
int wsquota_purge(const struct sbx_config *cfg, const char *user, const char *session, struct sbx_error *err);

/* loop: is the workspace's image mounted now? Other modes: false. */
bool wsquota_mounted(const struct sbx_config *cfg, const char *user, const char *session);

/* loop: a warm pool claim (pool.h). A mount point cannot be renamed, so the
 * slot's image file is renamed to the session's ({images}/<to_user>/
 * <to_session>.ext4), its mounted file system is bind-mounted on the
 * session's workspace directory (container_workspace_ensure made it; it
 * becomes root's 0700 underneath, as in wsquota_attach) and the slot's own
 * mount point is unmounted. Each step is skipped when already done, so a
 * restart finishing a claim runs it again. -ENOTEMPTY when the session's
 * workspace holds files or it has an image of its own; -ENOENT when the
 * slot's file system is mounted nowhere. Other modes: 0. */
int wsquota_claim(const struct sbx_config *cfg, const char *from_user, const char *from_session, const char *to_user,
                  const char *to_session, struct sbx_error *err);

/* measure: -EDQUOT, with the figures in err, when the workspace is at or past
 * its quota. Other modes: 0. */
int wsquota_admit(const struct sbx_config *cfg, const char *user, const char *session, struct sbx_error *err);

/* Usage against the quota; never fails (known says whether it was read). */
void wsquota_usage(const struct sbx_config *cfg, const char *user, const char *session, struct wsquota_usage *ret);

/* {"mode", "bytes_used", "bytes_limit", "inodes_used", "inodes_limit", "over",
 * "mounted"} (used figures null when unknown). */
cJSON *wsquota_usage_to_json(const struct wsquota_usage *u);

/* Unmount every workspace mounted under data_dir for which keep(user,
 * session, ud) is false. Returns how many were released, or -errno. */
typedef bool (*wsquota_keep_fn)(const char *user, const char *session, void *ud);
int wsquota_sweep(const struct sbx_config *cfg, wsquota_keep_fn keep, void *ud);

#endif
