/* pool_internal.h — what pool.c and pool_slot.c share. Not for other modules. */
#ifndef SANDBOXD_POOL_INTERNAL_H
#define SANDBOXD_POOL_INTERNAL_H

#include <sys/types.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"
#include "sandboxd/pool.h"

struct engine;
struct hub;
struct store;
struct store_pool_slot;

/* The test hook's stage (pool_set_test_hook); nothing without a hook. */
void pool_hook(const char *stage);

/* Remove everything of a slot: container, runner directory, workspace, the
 * engine's claim (Kubernetes pvc mode), uid, row (in that order, so a crash in between leaves a row, or nothing
 * pool_sweep_leftovers cannot find). */
void pool_slot_discard(const struct sbx_config *cfg, struct store *st, struct engine *d, struct hub *h,
                       const char *slot, const char *container_id);
/* {data_dir}/workspaces/<user> opened O_DIRECTORY|O_NOFOLLOW, or -errno. */
int pool_open_ws_dir(const struct sbx_config *cfg, const char *user);
/* Steps 2 and 3 of the claim (pool.h), idempotent: restart recovery runs them again. */
int pool_finish_claim(const struct sbx_config *cfg, struct store *st, struct engine *d, struct hub *h,
                      const struct store_pool_slot *row, char ret_ws[SBX_PATH_MAX], uid_t *ret_uid,
                      struct sbx_error *err);

#endif
