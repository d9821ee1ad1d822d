/* fronts.h — the layer above the daemon: the API socket, the admin
 * socket, the HTTPS front and the metrics listener, started once every
 * engine exists and stopped before any engine goes. main (bin/sandboxd.c)
 * and the front tests open the daemon through here; the core (daemon.c)
 * knows nothing of the fronts. */
#ifndef SANDBOXD_FRONTS_H
#define SANDBOXD_FRONTS_H

#include "sandboxd/common.h"
#include "sandboxd/daemon.h"

/* daemon_open, then (when opts->sockets) the fronts in order: API, admin,
 * HTTP (http.listen), metrics (metrics.listen). daemon_close(*ret) stops
 * the fronts, in reverse order, before the engines. On failure nothing is
 * left running and err says why. */
int fronts_open(const struct sbx_config *cfg, const struct daemon_options *opts, struct daemon **ret,
                struct sbx_error *err);

#endif
