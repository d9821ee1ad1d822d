/* metrics.h — the daemon's figures in the Prometheus text exposition format
 * (version 0.0.4): served at GET /metrics on metrics.listen (loopback only,
 * no token; http.c) and by `sandboxctl metrics` (admin command "metrics").
 *
 *   sandboxd_up, sandboxd_start_time_seconds, sandboxd_build_info{version}
 *   sandboxd_sessions{state="creating|running|stopped|error"}      gauge
 *   sandboxd_session_evictions_total{reason="fair_share"}  sessions stopped for another user's fair
 *                                            share of limits.sessions (session_evictions)  counter
 *   sandboxd_executions_running                                      gauge
 *   sandboxd_executions_total{state,cause}   finished executions     counter
 *   sandboxd_exec_duration_seconds           histogram of the run time of finished executions
 *   sandboxd_docker_api_errors_total         Engine API calls that failed (transport, timeout, 5xx) counter
 *                                            (counted by the engine: engine_api_errors)
 *   sandboxd_http_requests_total{code}       answers of the HTTP front, by status  counter
 *   sandboxd_auth_failures_total             failed authentications on the API socket and HTTP  counter
 *   sandboxd_ports_used, sandboxd_ports_total                        gauges
 *   sandboxd_events_total, sandboxd_events_dropped_total, sandboxd_event_overflows_total  counters
 *   sandboxd_event_subscribers               live GET /v1/events streams  gauge
 *   sandboxd_webhook_inflight                webhook deliveries under way  gauge
 *   sandboxd_webhook_deliveries_total{outcome="delivered|failed|dropped"}, sandboxd_webhook_attempts_total
 *                                            (events.h, webhook.h)
 *   sandboxd_sessions_by_label{key,value}    sessions by label value (metrics.label_keys), past
 *                                            METRICS_LABEL_VALUES_MAX value="(other)"  gauge
 *   sandboxd_nodes_connected, sandboxd_node_up{node}   node agents connected (node.listen only)  gauges
 *   sandboxd_node_sessions{node}             sessions placed on each node (node.listen only)  gauge
 *   process_resident_memory_bytes, process_open_fds, process_threads gauges
 *
 * Label values that come from outside (session labels, node names) are
 * written so that two different ones never give the same text: the
 * characters of names and host names ([A-Za-z0-9._:/-]) as they are, any
 * other byte as %HH. Names the daemon writes itself ("(other)") use
 * characters outside that set, so no outside value can equal them.
 *
 * The counters are process-wide atomics (one daemon per process; tests that
 * open several compare deltas). */
#ifndef SANDBOXD_METRICS_H
#define SANDBOXD_METRICS_H

#include <stdint.h>

struct egress;
struct engine;
struct exec_registry;
struct pool;
struct node_server;
struct portpool;
struct session_manager;
struct store;
struct sbx_config;

/* The engines whose gauges metrics_render asks, all borrowed (the daemon
 * fills one: d->metrics_ctx). ports may be NULL. */
struct metrics_ctx {
        int64_t started_at; /* unix ms */
        struct session_manager *sessions;
        struct exec_registry *exec;
        struct portpool *ports;
        struct egress *egress;
        struct pool *pool;
        struct engine *engine;
        struct store *store;          /* sessions by label (metrics.label_keys); NULL: none */
        const struct sbx_config *cfg; /* NULL: no label metrics */
        struct node_server *node;     /* the node link (node.listen); NULL: one process, no node metrics */
};

/* An HTTP answer's status (http.c). */
void metrics_http_status(int status);
/* A failed authentication (api.c). */
void metrics_auth_failure(void);
/* sandboxd_auth_failures_total so far (opsview.h). */
uint64_t metrics_auth_failures(void);

/* The whole exposition text, malloc'd in *ret. 0 or -ENOMEM. */
int metrics_render(const struct metrics_ctx *m, char **ret);

/* Distinct values of each metrics.label_keys key /metrics shows; the rest
 * count as "other", so a tenant's labels cannot blow up the series count. */
#define METRICS_LABEL_VALUES_MAX 20

#endif
