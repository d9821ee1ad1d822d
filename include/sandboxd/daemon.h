/* daemon.h — wires the modules into one running daemon: store, the
 * container engine (engine.h; Docker's, engine_docker.h), port pool, session manager, reconciliation and the monitor. The
 * fronts (main, tests, benchmarks) create one with daemon_open() and tear it
 * down with daemon_close(). */
#ifndef SANDBOXD_DAEMON_H
#define SANDBOXD_DAEMON_H

#include "sandboxd/common.h"
#include "sandboxd/config.h"
#include "sandboxd/files.h"
#include "sandboxd/launch.h"
#include "sandboxd/metrics.h"
#include "sandboxd/snapshot.h"

struct engine;
struct store;
struct portpool;
struct session_manager;
struct monitor;
struct exec_registry;
struct service_manager;
struct privacy;
struct quota;
struct api_server;
struct admin_server;
struct http_server;
struct hub;
struct egress;
struct scripts;
struct events;
struct webhook;
struct cells;

struct daemon {
        struct sbx_config cfg; /* read-only after daemon_open */
        struct engine *engine; /* the container engine (engine.h) */
        struct store *store;
        struct portpool *ports;
        struct session_manager *sessions;
        struct monitor *monitor;
        struct exec_registry *exec;
        struct service_manager *services;
        struct privacy *privacy;
        struct runtime *runtime;  /* runc | runsc per user */
        struct quota *quota;      /* per-user limits and their overrides */
        struct hub *runner;       /* per-session runner sockets */
        struct node_server *node; /* the node link over TLS (node.listen), or NULL: in process */
        struct pool *pool;        /* warm pool (pool.h) */
        struct egress *egress;    /* the egress proxy behind egress.sock */
        struct gateway *gateway;  /* egress.sock, fwd.sock and the host port listeners */
        struct scripts *scripts;  /* the script cache's runs in flight (scripts.h) */
        struct events *events;    /* the lifecycle event log (events.h; NULL: another daemon owns it) */
        struct webhook *webhook;  /* its operator's webhook (webhook.h; NULL: none) */
        struct cells *cells;      /* run_cell's interpreter contexts (cells.h) */
        struct secrets *secrets;  /* the secrets' key (secrets.h; NULL: secrets_key_file unset) */
        int64_t started_at;       /* unix ms */
        /* the fronts, which fronts_open (fronts.h) starts above the daemon */
        struct api_server *api; /* the socket fronts (opts->sockets) */
        struct admin_server *admin;
        struct http_server *http;              /* the network front (opts->sockets and http.listen) */
        struct http_server *metrics;           /* metrics.listen (opts->sockets) */
        void (*fronts_stop)(struct daemon *d); /* set by fronts_open; daemon_close calls it first */
        /* the narrow views the core modules take instead of the daemon (filled once the engines exist) */
        struct files_ctx files;
        struct metrics_ctx metrics_ctx;
        struct snapshot_ctx snapshots; /* workspace snapshots, restore and fork (snapshot.h) */
        struct launch_ctx launch;      /* an execution's preflight and start (launch.h) */
};

struct daemon_options {
        const char *const *extra_labels; /* NULL-terminated "k=v" on every container (tests) */
        bool no_monitor;                 /* skip the monitor threads (tests that drive it by hand) */
        bool sockets;                    /* fronts_open only: serve api_socket, admin_socket and http.listen */
};

/* Open everything and reconcile with Docker. On failure nothing is left
 * running and err says which part failed and why. */
int daemon_open(const struct sbx_config *cfg, const struct daemon_options *opts, struct daemon **ret,
                struct sbx_error *err);
/* Stop the fronts (if fronts_open started any), the monitor, free
 * everything. Containers keep running. NULL is fine. */
void daemon_close(struct daemon *d);

/* The container engine's version (engine.h), asked now (for health and stats: the fronts
 * never talk to Docker themselves). */
int daemon_engine_version(struct daemon *d, char *ret, size_t size, struct sbx_error *err);
/* The node the session is placed on (node.h), "" in one process or when it
 * has none. */
void daemon_session_node(struct daemon *d, const char *user, const char *session, char *ret, size_t size);

#endif
