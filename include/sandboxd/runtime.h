/* runtime.h — the OCI runtime a session's containers get: runc, or runsc (gVisor) for
 * high-risk tenants, chosen by the config's `runtime` and overridden per user through the
 * admin socket (stored, so restarts keep it). */
#pragma once

#include <stdbool.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct engine;
struct store;
struct session_manager;
struct runtime;

#define RUNTIME_NAME_MAX 16

int runtime_new(const struct sbx_config *cfg, struct engine *d, struct store *st, struct runtime **ret,
                struct sbx_error *err);
void runtime_free(struct runtime *rt);

/* Make the session manager ask rt for every new container's runtime (and refuse to create
 * one when that runtime cannot run). */
void runtime_attach(struct runtime *rt, struct session_manager *sm);

/* The runtime of user's next container: the user's override, else the config's; and in
 * ret_override (when not NULL) the override alone, "" when the user has none. */
int runtime_for_user(struct runtime *rt, const char *user, char ret[RUNTIME_NAME_MAX],
                     char ret_override[RUNTIME_NAME_MAX]);
/* Whether name ("runc" | "runsc" | "microvm") can run here: runc always; runsc only when dockerd
 * lists it (scripts/setup.sh registers it); microvm when the engine has a microVM engine beside it
 * (QEMU and scripts/build-vm.sh's guest, engine_qemu.h). -ENOTSUP naming why otherwise. */
int runtime_check(struct runtime *rt, const char *name, struct sbx_error *err);
/* Set a user's override (name "runc" | "runsc" | "microvm"), or remove it (name NULL or "default"). */
int runtime_set_user(struct runtime *rt, const char *user, const char *name, struct sbx_error *err);
/* Whether name is a known runtime. */
bool runtime_name_valid(const char *name);
