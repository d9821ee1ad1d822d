/* api.h — the API socket: the door for agents (through sandboxd-mcp) and
 * connectors. A thin front: parse, authenticate, call the modules, format.
 *
 * Wire protocol (api_socket, a Unix stream socket, mode 0666 — every request
 * is authenticated by its token; the peer's uid from SO_PEERCRED is logged):
 * one JSON object per line, at most API_MAX_LINE bytes, requests answered in
 * order on a connection; a client may open several connections (at most
 * connections.max at once across all clients, by default limits.sessions + 64;
 * connections.max_per_uid from one peer uid other than root, by default
 * limits.sessions; and of those at most API_MAX_UNAUTHENTICATED_PER_UID (32) that
 * have not authenticated yet; past any of them a connection gets one busy
 * reply and is closed). Limits on what a peer costs (see reqguard.h):
 *   - until a request on the connection has authenticated, a line may be at
 *     most 4 KiB, unless its first 4 KiB already hold a top-level "token"
 *     that verifies (put the token before large fields); a connection must
 *     send an authenticated request within connections.auth_timeout (5 s); after 5
 *     failed authentications it is closed;
 *   - a line may hold at most 100000 JSON values nested at most 32 deep
 *     (too_large, checked before parsing);
 *   - a request that is not valid UTF-8, or has a NUL (\u0000) in any
 *     string, is refused with invalid: nothing is ever truncated at a NUL;
 *   - an unauthenticated reply echoes "id" only when it is small (else null);
 *   - a connection with no request for connections.idle_timeout is closed.
 * An over-long line gets a bad_request reply and the connection is closed.
 * Replies can be longer than API_MAX_LINE (a 4 MiB read_file, worst case
 * after escaping): clients should accept lines up to API_MAX_REPLY.
 *
 *   request   {"id": <any JSON>, "token": "<token>", "method": "<name>", "params": {...}}
 *   success   {"id": ..., "ok": true, "result": {...}}
 *   failure   {"id": ..., "ok": false, "error": {"code": "<code>", "message": "<text>"}}
 *   progress  {"id": ..., "event": "output", "stream": "stdout"|"stderr", "data": "<utf-8 text>"}
 *             sent before the final reply of a foreground exec/run_code when
 *             params.stream is true. Best effort: a client reading slower
 *             than the command writes loses chunks (never the final reply,
 *             which carries the output as always); UTF-8 sequences are never
 *             split between two events.
 * "id" is echoed as given (null when the line could not be parsed).
 *
 * Error codes: bad_request (malformed JSON, wrong types, missing fields,
 * unknown method, line too long), unauthorized (missing/wrong/revoked
 * token), forbidden (role may not; permission denied in the container),
 * not_found, invalid (bad argument, e.g. a path outside /workspace),
 * busy (a cap reached), too_large, conflict (e.g. a service name already
 * running, stdin already closed, an idempotency_key reused with another
 * request), quota_exceeded, already_finished, unavailable (Docker
 * down, the execution could not run), internal.
 *
 * Tokens (see token.h): role agent may call every method but mark_private,
 * egress_allow, set_secret and delete_secret;
 * role connector may call every method.
 *
 * Every method but the user-level ones below (and get_task, cancel_task) takes params.session (1-64 of [A-Za-z0-9_.-]); the user is
 * always the token's: a request can only reach its own user's sessions, and
 * an execution id is found only in the session it ran in (otherwise
 * not_found, exactly as for an unknown id). The session's container is
 * created on first use.
 *
 *   exec            {command | argv: [strings], timeout_seconds?, workdir?, env?: {K: V}, stdin?, background?, interactive?, stream?, encoding?,
 *                    tty?, rows?: 1-1000 (24), cols?: 1-1000 (80)}
 *       argv: the program and its arguments, exec'd as they are (no shell;
 *         1-4096 words, within EXEC_MAX_COMMAND_BYTES together), instead of command.
 *       tty: on a pseudo-terminal made by the session's runner (implies
 *         interactive; output comes back as stdout; eof sends ^D). Refused
 *         (unavailable) when the runner is not connected: the docker exec
 *         fallback runs no terminal.
 *   run_code        {language: python|node|bash, code, timeout_seconds?, workdir?, env?, stdin?, background?, interactive?, stream?, encoding?}
 *       → an execution result (below); with background → {execution_id, state} at once.
 *         A client that disconnects while waiting gets no reply; the
 *         execution runs on and stays readable by id.
 *   get_execution   {execution_id, wait?: seconds (0-60) or true (60) / false (0), stdout_offset?, stderr_offset?, encoding?: utf8|base64}
 *       → an execution result. wait long-polls until the execution ends or,
 *         with an offset, until output past it arrives. With stdout_offset
 *         (stderr_offset), stdout (stderr) is the bytes from that offset on
 *         (at most 2 × EXEC_RESULT_HEAD_BYTES), and the result adds stdout_offset
 *         and stdout_next_offset (the offset to ask for next; raw bytes).
 *         A run_cell cell's execution_id is read the same way (api_cells.c:
 *         kind "cell", its context, status; outputs_offset? pages its
 *         non-stream outputs, one JSON line each).
 *   send_stdin      {execution_id, data, encoding?, eof?}              → {execution_id, bytes, eof}
 *   resize_terminal {execution_id, rows: 1-1000, cols: 1-1000}   → {execution_id, rows, cols} (a tty execution's window; SIGWINCH)
 *   cancel_execution{execution_id, force?}   → the execution result, after waiting up to the kill grace + 5 s for it to end
 *         (a cell's id: it is interrupted, force: killed, and the reply is the cell's result)
 *   list_executions {states?: [..], limit?: 1-1000 (50), completed_within_ms?}
 *       → {executions: [result without stdout/stderr, plus command_preview]},
 *         newest first; with completed_within_ms only those that ended that
 *         recently, the most recently ended first.
 *   run_cell        {code, language?: python|node, context?, timeout_seconds?, env?, stream?}
 *       → {context, language, generation, execution_count, status, outputs: [...], stdout, stderr,
 *         error?, state_lost?: {cause, generation}, timed_out?, truncated?, duration_ms} (cells.h,
 *         docs/api.md "Stateful interpreters"); stream: {"event": "output", "stream", "data"} and
 *         {"event": "display", "output"} while the cell runs
 *   list_contexts   {}              → {contexts: [{context, language, generation, execution_count, state, rss_kb, last_used}]}
 *   restart_context {context?}      → the context, in a new generation
 *   delete_context  {context?}      → {context, deleted}
 *   get_variables   {context?}      → {context, generation, variables: [{name, type, repr, shape?}]}
 *   interrupt_cell  {context?}      → {interrupted} (already_finished when no cell runs)
 *   last_cell       {context?, wait_seconds?: 0-60}  → the last cell's result, plus complete (and
 *                   adopted for a cell that outlived a daemon restart: waits for its end up to wait_seconds)
 *   write_file      {path, content, encoding?: utf8|base64}      → {path, bytes}
 *   read_file       {path, offset?, length?, encoding?}
 *       → {path, content, encoding, valid_utf8 (utf8 only: false when bytes
 *         were replaced), offset, bytes, size, eof}; at most
 *         min(limits.file_size, 4 MiB) per call.
 *   list_files      {path?}       → {path, entries: [{name, type: file|dir|symlink|other, size}], truncated}
 *       Paths are relative to /workspace or absolute under it; anything
 *       resolving outside (lexically or through a symlink) is refused.
 *   start_service   {name, command, workdir?}                    → a service (below)
 *   stop_service    {name}                                       → a service
 *   list_services   {}                                           → {services: [...]}
 *   service_logs    {name, tail_lines?: 1-10000 (100)}           → {name, stdout, stderr}
 *   session_info    {}    → {user, session, state, network_mode, private, datasets: [{dataset, source, marked_at}],
 *                            ports: [{container_port, host_port}], container_id, image, created_at,
 *                            last_activity, last_error, error_cause, egress: {mode: egress|bridge|none,
 *                            allow: [{pattern, scope: config|user|session}], upstream_proxy}}
 *   mark_private    {dataset, source?}  (role connector only)    → {session, datasets, network_mode}
 *   create_task     {execution_id, tool: exec|run_code}   → a task (below), recorded in the store
 *   get_task        {task_id}  (no session needed)        → a task
 *   cancel_task     {task_id}  (no session needed)        → the task, cancelled from now on, and its
 *                   execution cancelled; already_finished if it had ended or was cancelled
 *       The MCP tasks extension's handles (api_tasks.c). A task is the
 *       user's alone, lives an hour, and a user holds at most 64 live ones
 *       (busy past that). Task: {task_id, session, execution_id, tool,
 *       status (working completed cancelled failed, from the execution's
 *       state, cancelled once cancel_task took it; failed only when the
 *       execution is gone), status_message,
 *       execution_state, ttl_ms, poll_interval_ms, created_at, updated_at,
 *       expires_at, cancel_requested}.
 *   egress_allow    {pattern, scope?: session|user (session), remove?}  (role connector only)
 *                                                                → the session's egress (as session_info's), session
 *
 * Agent tools (issue 17, src/api/api_agent.c; docs/api.md "Agent tools"):
 *   run_tests       {language: python|node, tests, code?, timeout_seconds?}
 *       → {success, summary: {total, passed, failed, skipped}, tests: [{name, passed, skipped, error,
 *         duration_ms}], tests_truncated, output, duration_ms, error, execution_id, language}
 *   run_code        also {script: NAME} (run a saved script) and {cache: false}; its result (and
 *                   get_execution's, once final) carries cached: {name, content_hash, language,
 *                   description, bytes, created_at} or null, and cache_error when the cap refused it
 *   list_scripts    {filter?, limit?: 1-1000 (100)}  → {scripts: [...], count, bytes, max_count, max_bytes}
 *   clear_scripts   {name?}                          → {removed}
 *   create_session  {session?, ttl_seconds?, image?, env?: {K: V}}  → session_info + {expires_at, env_names,
 *                   image_name}; conflict if the session exists
 *   destroy_session {session, purge?}   → {session, destroyed, purged, cancelled_executions}
 *   set_session_ttl {session, ttl_seconds: 0-session_ttl_max}  → {session, expires_at, ...}: the TTL
 *                   from now (0: none), as create_session's (E2B's setTimeout, e2b.h)
 *   list_sessions   {}                  → {sessions: [{session, state, image, created_at, last_activity,
 *                   expires_at, ...}]}
 * Secrets (issue 37, secrets.h; docs/security.md "Secrets"): the user's, write-only:
 *   set_secret      {name, value, hosts: [hostname], header?}  (role connector only) → {name, stored}
 *   list_secrets    {}                  → {secrets: [{name, hosts, header, created_at, updated_at}], count,
 *                   max_count}: never a value
 *   delete_secret   {name}  (role connector only)                → {name, deleted}
 * list_scripts, clear_scripts, list_sessions, create_session and the secret
 * methods take no params.session (create_session names one when it is
 * absent).
 * Idempotency (api_idem.c): exec, run_code, start_service and write_file
 * (and run_tests, create_session where they exist) take idempotency_key
 * (1-128 of [A-Za-z0-9._:-]). Per token user and method, a retry with the
 * same key and the same params within API_IDEMPOTENCY_WINDOW_S answers with the
 * first call's result without running anything again — for exec and
 * run_code, from the first call's execution (background: its id and state,
 * even while it runs; otherwise its end); the same key with other params is
 * conflict; past API_IDEMPOTENCY_MAX_KEYS live keys a new key is
 * quota_exceeded. Keys survive restarts; a call that failed before doing
 * anything leaves none. Any other method refuses the parameter (invalid).
 *
 * Execution result: {execution_id, session, state, exit_code (null unless
 * exited), cause, error, stdout, stderr, encoding, stdout_bytes,
 * stderr_bytes, truncated, duration_ms, created_at} where state is one of
 * pending running completed failed cancelled timeout; cause is null while
 * running, else exited timeout cancelled oom container_died
 * daemon_restarted error; stdout/stderr are the head, then
 * "\n...[N bytes omitted]...\n", then the tail when the output was larger
 * than the inline bound (N counts bytes past the spool cap too); text is
 * UTF-8 with invalid bytes replaced by U+FFFD (encoding base64 gives the raw
 * bytes, with the same marker bytes between head and tail). Times are unix
 * ms. Service: {name, state (starting running stopping stopped failed), pid,
 * exit_code, command, workdir, ports: [{container_port, host_port}],
 * started_at, stopped_at, last_error}. Absent values are null. */
#ifndef SANDBOXD_API_H
#define SANDBOXD_API_H

#include "sandboxd/common.h"

#define API_MAX_LINE (8 * 1024 * 1024)
#define API_MAX_REPLY (32 * 1024 * 1024)

struct daemon;
struct api_server;

/* Bind api_socket (replacing a stale socket file safely) and start serving
 * on a named thread, with one worker thread per connection (capped). */
int api_server_start(struct daemon *d, struct api_server **ret, struct sbx_error *err);
/* Stop accepting, close connections, join threads. Running executions go on. */
void api_server_stop(struct api_server *s);

/* Constants that were config keys: nobody had a reason to change them. */
/* Connections a uid may hold before authenticating: an agent opens one at a
 * time, 32 covers a burst of reconnects without letting one uid starve the
 * accept loop. */
#define API_MAX_UNAUTHENTICATED_PER_UID 32
/* An idempotency_key answers a retry for a day: longer than any client's
 * retry loop, short enough that the table stays small. */
#define API_IDEMPOTENCY_WINDOW_S (24 * 3600)
/* Live idempotency keys per user: a day of a busy agent's calls. */
#define API_IDEMPOTENCY_MAX_KEYS 10000

#endif
