/* engine_docker.h — the Docker engine behind the seam (engine.h), built on
 * the Engine API client of src/docker/. The only way into Docker for
 * everything outside src/docker/.
 *
 * It enforces every ENGINE_CAP_*: the spec maps one to one onto a
 * /containers/create body (binds for the workspace, the identity files, the
 * runner binary and the session directory; Tmpfs; HostConfig limits;
 * CapDrop ALL, no-new-privileges, Init), exactly as container.c built it
 * before the seam: the same requests, in the same order. */
#ifndef SANDBOXD_ENGINE_DOCKER_H
#define SANDBOXD_ENGINE_DOCKER_H

#include "sandboxd/engine.h"

/* The transport's process-wide set-up: once, in main, before any thread
 * starts (libcurl's global init). 0 or -EIO. Cleanup after the last engine
 * is freed. */
int engine_docker_global_init(void);
void engine_docker_global_cleanup(void);

/* A Docker engine on the socket at socket_path; timeout_ms bounds every
 * ordinary call (<= 0: 30 s). Does no I/O: engine_connect() negotiates the
 * API version (one GET /version), where a missing or dead socket fails with
 * "connecting to Docker at <path>: cannot reach Docker ...". */
int engine_docker_new(const char *socket_path, long timeout_ms, struct engine **ret, struct sbx_error *err);

/* The /containers/create body this engine sends for spec (malloc'd JSON;
 * NULL on OOM or a spec past its bounds). For tests: the mapping is the
 * whole of what the seam changed about a create. */
char *engine_docker_create_body(const struct engine_spec *spec);

#endif
