/* api.h — the API socket: the door for agents (through sandboxd-mcp) and
 * connectors. A thin front: parse, authenticate, call the modules, format.
 *
 * Wire protocol (api_socket, a Unix stream socket, mode 0666 — every request
 * is authenticated by its token; the peer's uid from SO_PEERCRED is logged):
 * one JSON object per line, at most API_MAX_LINE bytes, requests answered in
 * order on a connection; a client may open several connections.
 *
 *   request   {"id": <any JSON>, "token": "<token>", "method": "<name>", "params": {...}}
 *   success   {"id": ..., "ok": true, "result": {...}}
 *   failure   {"id": ..., "ok": false, "error": {"code": "<code>", "message": "<text>"}}
 *   progress  {"id": ..., "event": "output", "stream": "stdout"|"stderr", "data": "<utf-8 text>"}
 *             sent before the final reply of exec/run_code when params.stream is true.
 *
 * Error codes: bad_request (malformed JSON, wrong types, line too long),
 * unauthorized (missing/wrong/revoked token), forbidden (role may not),
 * not_found, invalid (bad argument), busy (a cap reached), too_large,
 * conflict (e.g. a service name already running), already_finished,
 * unavailable (Docker down), internal.
 *
 * Every method takes params.session (1-64 of [A-Za-z0-9_.-]); the user is
 * always the token's: a request can only reach its own user's sessions.
 *
 *   exec            {command, timeout_seconds?, workdir?, env?: {K: V}, stdin?, background?, interactive?, stream?}
 *   run_code        {language: python|node|bash, code, timeout_seconds?, background?, interactive?, stream?}
 *       → an execution result (below); with background → {execution_id, state} at once
 *   get_execution   {execution_id, wait?: seconds, stdout_offset?, stderr_offset?, encoding?: utf8|base64}
 *   send_stdin      {execution_id, data, eof?}
 *   cancel_execution{execution_id, force?}
 *   list_executions {states?: [..], limit?}
 *   write_file      {path, content, encoding?: utf8|base64}      → {path, bytes}
 *   read_file       {path, offset?, length?, encoding?}          → {path, content, encoding, bytes, size, eof}
 *   list_files      {path?}                                      → {path, entries: [{name, type, size}]}
 *   start_service   {name, command, workdir?}                    → a service (below)
 *   stop_service    {name}
 *   list_services   {}                                            → {services: [...]}
 *   service_logs    {name, tail_lines?}                          → {name, stdout, stderr}
 *   session_info    {}    → {user, session, state, network_mode, private, ports: [{container_port, host_port}],
 *                            container_id, created_at, last_activity, last_error}
 *   mark_private    {dataset, source?}  (role connector only)    → {session, datasets, network_mode}
 *
 * Execution result: {execution_id, state, exit_code (null unless exited),
 * cause, stdout, stderr, stdout_bytes, stderr_bytes, truncated, duration_ms}
 * where stdout/stderr are the head, then "\n...[N bytes omitted]...\n",
 * then the tail when the output was larger than the inline bound; text is
 * UTF-8 with invalid bytes replaced by U+FFFD (encoding base64 gives the raw
 * bytes). Service: {name, state, pid, exit_code, ports: [{container_port,
 * host_port}], started_at, last_error}. */
#ifndef SANDBOXD_API_H
#define SANDBOXD_API_H

#include "sandboxd/common.h"

#define API_MAX_LINE (8 * 1024 * 1024)

struct daemon;
struct api_server;

/* Bind api_socket (replacing a stale socket file safely) and start serving
 * on a named thread, with one worker thread per connection (capped). */
int api_server_start(struct daemon *d, struct api_server **ret, struct sbx_error *err);
/* Stop accepting, close connections, join threads. Running executions go on. */
void api_server_stop(struct api_server *s);

#endif
