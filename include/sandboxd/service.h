/* service.h — long-running processes in a session's container.
 *
 * On the session's runner (when connected): the runner supervises the
 * service under a subreaper shim (hub_ops.h), reports its exact PID and
 * exit code, and pushes its listening ports within about
 * RP_SVC_PORT_POLL_MS of the listen; a stop escalates SIGTERM, the grace,
 * SIGKILL over the service's whole tree. Logs and the port mapping are the
 * same on both paths.
 *
 * The docker exec fallback: start_service writes a start script into the container and runs it with
 * nohup in a new process group (setsid), stdout and stderr going to
 * /workspace/.sandboxd/services/<name>.stdout / .stderr, its PID captured
 * and the service recorded in the store. One monitor thread ("sbx-services")
 * serves every session: each interval it checks the PIDs and discovers the
 * TCP ports each service listens on (/proc/net/tcp and tcp6 inside the
 * container, matched to the service's process group through socket inodes),
 * and maps them to the session's published host ports. The monitor is
 * read-only: it never counts as activity and never restarts anything.
 *
 * States: STARTING → RUNNING → STOPPED (clean exit) / FAILED (non-zero exit,
 * exit code kept); a manual stop goes STOPPING → STOPPED. When the container
 * fails or is replaced, its services are cleared to STOPPED or FAILED with
 * the cause. */
#ifndef SANDBOXD_SERVICE_H
#define SANDBOXD_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct engine;
struct store;
struct session_manager;
struct exec_registry;
struct quota;
struct service_manager;
struct hub;

enum service_state {
        SERVICE_STARTING,
        SERVICE_RUNNING,
        SERVICE_STOPPING,
        SERVICE_STOPPED,
        SERVICE_FAILED,
};
const char *service_state_to_string(enum service_state s);

#define SERVICE_MAX_PORTS 16

struct service_port {
        int container_port;
        int host_port; /* 0 when the port is outside the session's published block */
};

struct service_info {
        char name[65];
        enum service_state state;
        int pid;            /* in the container's PID namespace; 0 if none */
        int exit_code;      /* -1 unless it exited */
        char command[1024]; /* preview */
        char workdir[256];
        int64_t started_at; /* unix ms */
        int64_t stopped_at;
        struct service_port ports[SERVICE_MAX_PORTS];
        size_t n_ports;
        char last_error[512];
};

/* Registers itself as a session failure handler. */
int service_manager_new(const struct sbx_config *cfg, struct engine *d, struct store *st, struct session_manager *sm,
                        struct exec_registry *ex, struct service_manager **ret, struct sbx_error *err);
/* Start the monitor thread. */
int service_manager_start(struct service_manager *m, struct sbx_error *err);
/* Stop the monitor thread and free. Services keep running. NULL is fine. */
void service_manager_free(struct service_manager *m);
/* Per-user limits (max_services_per_session and its overrides) come from q
 * from now on; without one, from the config. q must outlive m. */
void service_set_quota(struct service_manager *m, struct quota *q);
/* Services start on the session's runner when it is connected (supervised
 * there, ports reported as they open), else through docker exec. Call
 * before service_manager_start; h must outlive m. */
void service_set_runner(struct service_manager *m, struct hub *h);

/* name: 1-64 of [A-Za-z0-9_.-]. -EEXIST if that name is running; -EUSERS
 * past max_services_per_session; -E2BIG for a command over
 * EXEC_MAX_COMMAND_BYTES; -ENOENT for a missing workdir. */
int service_start(struct service_manager *m, const char *user, const char *session, const char *name,
                  const char *command, const char *workdir, struct service_info *ret, struct sbx_error *err);
/* SIGTERM, wait SERVICE_STOP_GRACE_MS, SIGKILL: on the runner to the service's
 * whole tree; on the fallback to its group, then a last-resort kill of every
 * process carrying the service's marker. -ENOENT if unknown. */
int service_stop(struct service_manager *m, const char *user, const char *session, const char *name,
                 struct service_info *ret, struct sbx_error *err);
int service_list(struct service_manager *m, const char *user, const char *session, struct service_info **ret,
                 size_t *ret_n);
/* The last tail_lines lines (1..10000) of stdout and stderr (malloc'd). */
int service_logs(struct service_manager *m, const char *user, const char *session, const char *name, int tail_lines,
                 char **ret_stdout, char **ret_stderr, struct sbx_error *err);

/* SIGTERM to SIGKILL when a service is stopped: long enough for a server
 * to close its sockets. */
#define SERVICE_STOP_GRACE_MS 5000

#endif
