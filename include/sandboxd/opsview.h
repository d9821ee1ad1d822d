/* opsview.h — what an operator reads about the daemon, as JSON, for every
 * front that shows it: the admin socket (sandboxctl health, stats, pool,
 * nodes.list, quota.show) and the API's operator methods (list_users,
 * pool_status, list_nodes, daemon_health; docs/api.md). The fronts only
 * check who asks and pass these on; nothing here changes state. */
#pragma once

#include <cjson/cJSON.h>

struct daemon;
struct pool;

/* A user's quota: {user, limits, overrides, usage: {sessions, live_sessions,
 * paused_sessions, executions_running}}. */
cJSON *opsview_quota(struct daemon *d, const char *user);

/* {users: [opsview_quota + usage.memory_bytes, usage.cpu_total_ns], sessions:
 * [{user, session, state, memory_bytes, memory_limit, cpu_total_ns, pids,
 * executions_running}]}: every user with a live token, a session or a quota
 * override, by name; memory and CPU are the engine's figures for the user's
 * live containers, and the same per live session (one stats call per
 * container, at most 1,000, as sandboxctl top; null when the engine could not
 * say; sessions is empty when it cannot be asked). 0 or -errno. */
int opsview_users(struct daemon *d, cJSON **ret);

/* Add "pool": the warm pool's numbers (pool.h) to o. */
void opsview_add_pool(cJSON *o, struct pool *pl);

/* {nodes: [{name, connected, fenced, since, sessions, last_heartbeat}]}:
 * empty in one process (no node link). 0 or -errno. */
int opsview_nodes(struct daemon *d, cJSON **ret);

/* {status: ok|degraded, version, uptime_s, docker: {ok, version | error}}. */
cJSON *opsview_health(struct daemon *d);

/* {version, started_at, uptime_s, docker_version, engine, sessions: {by
 * state, total}, executions_running, ports, monitor_last_poll, pool, egress}. */
cJSON *opsview_stats(struct daemon *d);

/* opsview_health and opsview_stats in one object, with the counters of
 * /metrics an on-call engineer looks at first: {..., counters:
 * {auth_failures, engine_api_errors, events_written, events_dropped,
 * event_overflows}} (the API's daemon_health). */
cJSON *opsview_daemon_health(struct daemon *d);
