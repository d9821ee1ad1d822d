/* admin.h — the admin socket: the door for operators (sandboxctl).
 *
 * admin_socket is a Unix stream socket, mode 0600 (owner: the daemon's
 * user), or 0660 and group admin_group when that is set; the mode and group
 * are in place before the socket can be reached. On top of the file
 * permissions every connection's peer is checked with SO_PEERCRED: uid 0,
 * the daemon's own uid and (with admin_group) members of that group are
 * served; anyone else gets one "forbidden" reply and is disconnected (and the
 * refusal is audited).
 *
 * Protocol: one JSON object per line (at most ADMIN_MAX_LINE bytes), answered
 * in order:
 *   request   {"cmd": "<name>", ...arguments..., "id"?: <any>}
 *   success   {"ok": true, "result": ..., "id"?: ...}
 *   failure   {"ok": false, "error": {"code": "<code>", "message": "<text>"}}
 * with the API's error codes (bad_request, forbidden, not_found, invalid,
 * busy, conflict, unavailable, internal, ...).
 *
 *   health                                    → {status: "ok"|"degraded", version, uptime_s, docker: {ok, version?, error?}}
 *   stats                                     → {uptime_s, started_at, version, docker_version, sessions: {creating,
 *                                                running, stopped, error, total}, executions_running,
 *                                                ports: {used, total}, monitor_last_poll (unix ms or null),
 *                                                egress: {allowed, blocked, open}}
 *   metrics                                   → {text: the Prometheus exposition of metrics.h}
 *   nodes.list (or list_nodes) {}             → {nodes: [{name, connected, fenced, since, sessions (placed on
 *                                                it), last_heartbeat (null when away)}]}  the node agents
 *                                                known since start, and nodes sessions are still placed on;
 *                                                empty in one process (no node.listen)
 *   sessions.list   {user?, state?}           → {sessions: [{user, session, state, container_id, image,
 *                                                node (null in one process), network_mode, private, ports, created_at, last_activity,
 *                                                last_error, error_cause}]}
 *   session.show    {user, session}           → the above plus {workspace, datasets: [{dataset, source,
 *                                                marked_at}], egress: {mode, allow, upstream_proxy}, services: [...],
 *                                                executions: [recent, newest first]}
 *   session.destroy {user, session, purge?}   → {user, session, purged}
 *   session.mark_private {user, session, dataset, source?} → {user, session, datasets, network_mode}
 *   sessions.top    {user?}                   → {sampled_at, cpus_per_session, sessions: [{user, session, state,
 *                                                container_id, network_mode, cpu_total_ns, memory_usage,
 *                                                memory_limit, pids (these four null if Docker could not say),
 *                                                sampled_at, executions_running, executions_total,
 *                                                egress_bytes (through the egress proxy since the daemon
 *                                                started; null: not seen)}]}  CREATING and
 *                                                RUNNING sessions, at most 1000; CPU % is the client's delta
 *   session.logs    {user, session, limit?: 1-4096 (200)} → {user, session, audit: [{id, ts, actor, action,
 *                                                detail}], log: [the daemon's JSON log lines naming the session,
 *                                                of the last 4096 such lines this process wrote]}  oldest first
 *   user.runtime    {user, runtime?: runc|runsc|microvm|default} → {user, runtime (effective), override, default,
 *                                                unavailable (why it cannot run here, or null), applies_to}
 *                                                (with runtime: sets or resets the user's override first)
 *   egress.log      {user, session, limit?: 1-4096 (200)} → {user, session, entries: [{id, ts, host, port,
 *                                                method, decision, reason, address, bytes_up, bytes_down,
 *                                                duration_ms, suppressed}]}  newest first
 *   egress.policy   {user, session?}          → {user, session, mode, allow: [{pattern, scope}], upstream_proxy}
 *   egress.allow    {user, pattern, session?} → as egress.policy (adds for every session of user, or one)
 *   egress.deny     {user, pattern, session?} → as egress.policy (removes such an addition)
 *   token.create    {user, role?: agent|connector} → {token, id, user, role}  (the token is shown only here)
 *   token.revoke    {id}                      → {id, revoked: true}
 *   token.list      {}                        → {tokens: [{id, user, role, created_at, revoked_at}]}
 *   quota.show      {user}                    → {user, limits: {max_sessions_per_user, max_exec_per_user,
 *                                                max_services_per_session, max_spool_per_session}, overrides: {key:
 *                                                value}, usage: {live_sessions, executions_running}}
 *   quota.set       {user, key, value: integer} → as quota.show (key: one of the four limits; 0..its config max)
 *   quota.unset     {user, key?}              → as quota.show, plus removed (no key: every override of user)
 *   quota.list      {}                        → {defaults: {the four keys}, overrides: [{user, key, value}]}
 * Every command that changes something is audited (action "admin.<cmd>",
 * actor "admin:uid=<uid>"). */
#ifndef SANDBOXD_ADMIN_H
#define SANDBOXD_ADMIN_H

#include "sandboxd/common.h"

#define ADMIN_MAX_LINE (1024 * 1024)

struct daemon;
struct admin_server;

/* Bind admin_socket (stale socket replaced safely) and serve it. -EINVAL
 * (with err) for an admin_group that does not exist. */
int admin_server_start(struct daemon *d, struct admin_server **ret, struct sbx_error *err);
/* Stop accepting, close connections, join. NULL is fine. */
void admin_server_stop(struct admin_server *s);

#endif
