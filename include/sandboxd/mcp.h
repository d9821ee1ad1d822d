/* mcp.h — the MCP front door: a stdio JSON-RPC 2.0 adapter (sandboxd-mcp)
 * that an MCP client launches as a subprocess, translating tool calls into
 * requests on the daemon's API socket (api.h), or with an https:// URL on a
 * remote daemon's HTTPS API (http.h). The daemon's /mcp serves the same core.
 *
 * Framing: one JSON-RPC message per line on stdin and stdout, at most
 * MCP_MAX_LINE bytes; a longer line is discarded as it streams past and
 * answered with a parse error, never buffered whole. Nothing but protocol
 * goes to stdout; logs go to stderr (log.h).
 *
 * Two protocol eras are served side by side, decided per request:
 *   - legacy (2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25): `initialize`
 *     negotiates the version (the client's if supported, else the latest),
 *     then `ping`, `logging/setLevel`, `tools/list`, `tools/call`, and the
 *     resources methods below.
 *   - 2026-07-28 (stateless): a request whose params._meta carries
 *     "io.modelcontextprotocol/protocolVersion" (plus
 *     "io.modelcontextprotocol/clientCapabilities", optionally
 *     ".../clientInfo" and ".../logLevel") is served on its own, with no
 *     handshake: `server/discover`, `tools/list`, `tools/call`,
 *     `resources/read`, `resources/list`, `resources/templates/list` (with
 *     ttlMs and cacheScope). Every result
 *     carries resultType "complete" and _meta ".../serverInfo". A version we
 *     do not speak gets -32022 with data {supported, requested}.
 *
 * Tasks (io.modelcontextprotocol/tasks, 2026-07-28 era; mcp_tasks.c): a
 * request whose client capabilities name the extension may get a
 * CreateTaskResult instead of a CallToolResult for a long exec/run_code,
 * followed with tasks/get, tasks/cancel (and tasks/update); the task is the
 * daemon's (its create_task / get_task / cancel_task API methods). A tasks
 * method without the extension declared is -32021. At 2025-11-25 the
 * experimental tasks of that version are served instead (params.task,
 * tasks/get, tasks/result, tasks/cancel); see mcp_tasks.c.
 *
 * Tool calls run concurrently: each tools/call gets a worker thread with its
 * own API connection, so a long exec never blocks a cancel or a ping. A call
 * whose request carries params._meta.progressToken gets
 * notifications/progress as output arrives; notifications/cancelled
 * (params.requestId) cancels the execution behind the call over a second API
 * connection and suppresses the call's response. Closing stdin ends the
 * adapter; executions go on in the daemon and stay readable by id.
 *
 * Large outputs by reference (mcp_resources.c): a tool result whose output
 * was cut (truncated) carries resource_link content items (2025-06-18 and
 * later) to each stream's whole output,
 * sandboxd://sessions/<session>/executions/<id>/<stdout|stderr>, which
 * resources/read serves in pages of MCP_RESOURCE_PAGE bytes (?offset=<n>;
 * _meta sandboxd/next names the next page) through get_execution with the
 * caller's token, so another user's execution is -32002 not found.
 *
 * The protocol core is independent of stdio: feed it lines (or raw bytes)
 * and it writes complete output lines through a callback, which makes it
 * testable without a daemon. */
#ifndef SANDBOXD_MCP_H
#define SANDBOXD_MCP_H

#include <stdbool.h>
#include <stddef.h>

#include "sandboxd/common.h"

#define MCP_MAX_LINE (8 * 1024 * 1024)
/* Output lines stay under this too: the official SDKs drop a client whose
 * read buffer passes 10 MiB. A tool result that would not fit is cut down
 * (see mcp_calls.c) rather than sent. */
#define MCP_MAX_OUTPUT (8 * 1024 * 1024)
/* read_file returns at most this much per call unless asked for less. */
#define MCP_READ_FILE_MAX (1024 * 1024)
/* resources/read returns at most this much of an execution's stream per
 * page (mcp_resources.c); base64 keeps it under MCP_MAX_OUTPUT. */
#define MCP_RESOURCE_PAGE (1024 * 1024)
/* Each call in flight holds one API connection (two while cancelling); the
 * daemon serves connections.max (by default limits.sessions + 64) across all
 * clients, and the HTTPS front lets a client address open 32 new ones at
 * once before they authenticate. */
#define MCP_MAX_INFLIGHT_DEFAULT 16

/* JSON-RPC and MCP error codes. */
#define MCP_PARSE_ERROR -32700
#define MCP_INVALID_REQUEST -32600
#define MCP_METHOD_NOT_FOUND -32601
#define MCP_INVALID_PARAMS -32602
#define MCP_INTERNAL_ERROR -32603
#define MCP_UNSUPPORTED_PROTOCOL_VERSION -32022 /* 2026-07-28 */
#define MCP_RESOURCE_NOT_FOUND -32002
#define MCP_MISSING_CLIENT_CAPABILITY -32021 /* 2026-07-28 */

#define MCP_MODERN_VERSION "2026-07-28"
#define MCP_LATEST_LEGACY_VERSION "2025-11-25"

struct mcp;

/* Receives one complete output line (a JSON-RPC message followed by '\n').
 * Called with the adapter's output lock held, so lines never interleave.
 * Returns 0, or a negative errno when the output is gone (the adapter then
 * stops writing). */
typedef int (*mcp_write_fn)(const char *line, size_t len, void *userdata);
/* The same, told which request the line answers or belongs to (the id of
 * its request for a response, and for the progress and log notifications
 * of a tool call; NULL for anything else): a transport with a stream per
 * request (Streamable HTTP) routes by it. */
struct cJSON;
typedef int (*mcp_write_related_fn)(const char *line, size_t len, const struct cJSON *related, void *userdata);

struct mcp_options {
        const char *api_socket; /* the daemon's API socket */
        const char *token;      /* NULL or "": tool calls report that none is configured */
        const char *session;    /* default session; NULL or "": "mcp-<random>" per adapter */
        mcp_write_fn write;
        mcp_write_related_fn write_related; /* instead of write, for transports that route */
        void *write_userdata;
        size_t max_inflight; /* concurrent tool calls; 0 = MCP_MAX_INFLIGHT_DEFAULT */
        int poll_wait_s;     /* long-poll wait while following an execution; 0 = 30 */
};

/* Copies every option. -EINVAL for a missing write callback (write or
 * write_related) or an invalid
 * default session. */
int mcp_new(const struct mcp_options *opt, struct mcp **ret, struct sbx_error *err);
/* Drops the caller's reference: no more output is written, and the adapter is
 * freed once the last in-flight call has ended. NULL is fine. */
void mcp_free(struct mcp *m);

/* Handle one line (without its '\n'; a trailing '\r' is ignored). */
void mcp_handle_line(struct mcp *m, const char *line, size_t len);
/* Split raw input into lines, enforcing MCP_MAX_LINE. */
void mcp_feed(struct mcp *m, const void *data, size_t len);
/* End of input: handles an unterminated last line. */
void mcp_feed_eof(struct mcp *m);

/* Cancel every tool call in flight, as notifications/cancelled would (their
 * responses are suppressed; the executions behind them are cancelled). */
void mcp_cancel_all(struct mcp *m);
/* Wait until no tool call is in flight, at most timeout_ms (< 0: forever).
 * Returns 0, or -ETIMEDOUT. */
int mcp_drain(struct mcp *m, int timeout_ms);
/* Tool calls currently in flight. */
size_t mcp_inflight(struct mcp *m);
/* True once the write callback failed. */
bool mcp_output_closed(struct mcp *m);
/* The session used when a tool call names none. */
const char *mcp_default_session(struct mcp *m);

/* ---- the tool catalog (mcp_catalog.c): schemas/mcp_tools.json, embedded
 * at build time, checked and parsed once ---- */

/* Names of the tools, in the order tools/list gives them; NULL past the end
 * (and none at all if the embedded catalog is broken). */
const char *mcp_tool_name(size_t i);
size_t mcp_tool_count(void);
/* Check a catalog text (NULL: the embedded one): JSON with a non-empty tools
 * array, each tool with a unique name, title, description, input and output
 * schemas of type object that pass mcp_schema_check, and annotations; the
 * tools the adapter treats specially all present. 0, or -EINVAL with err
 * saying what is wrong. mcp_new refuses to start on a broken embedded one. */
int mcp_tools_check(const char *json, struct sbx_error *err);

/* ---- a subset of JSON Schema (mcp_schema.c), the one the tool schemas use,
 * every keyword of it enforced: type (a name or a list; the published
 * schemas use one name and anyOf branches for nullable fields, which
 * single-type dialects accept), anyOf, enum, minimum, maximum, minLength,
 * maxLength (code points), pattern (POSIX ERE, on strings up to 4 KiB),
 * properties, required, additionalProperties (false or a schema), items,
 * minItems, maxItems. Annotations (description, title) are ignored;
 * mcp_schema_check (run on the catalog) and the JS tests refuse any other
 * keyword. validate and conform assume a schema that check accepted. */
struct cJSON;

/* Returns true if value conforms; otherwise writes "<path>: <why>" to msg. */
bool mcp_schema_validate(const struct cJSON *schema, const struct cJSON *value, const char *path, char *msg,
                         size_t msg_size);
/* Makes value conform in place where it can: properties of a wrong type are
 * dropped, missing required ones get a neutral value of their type (null when
 * allowed), array items that cannot conform are dropped. Used on daemon
 * replies so structuredContent always matches the advertised outputSchema.
 * Returns false only if value itself is of the wrong type. */
bool mcp_schema_conform(const struct cJSON *schema, struct cJSON *value);
/* True if schema is well-formed and uses only the keywords above (each of
 * the right kind; patterns compile); otherwise writes "<path>: <why>" to msg.
 * Recurses into properties, items, additionalProperties and anyOf. */
bool mcp_schema_check(const struct cJSON *schema, const char *path, char *msg, size_t msg_size);

/* ---- the API socket client (mcp_api.c): one connection, one request at a
 * time, replies read line by line up to API_MAX_REPLY. ---- */
struct mcp_api;

struct mcp_api_error {
        char code[32]; /* the API's code ("not_found", ...), or "transport" */
        char message[1024];
};

/* Called for each progress line ({"event": "output", ...}) before the reply. */
typedef void (*mcp_api_event_fn)(const struct cJSON *event, void *userdata);

/* socket_path may instead be an https:// URL (http:// to loopback only): the
 * same requests then go as POST <url>/v1/<method> (http.h), with the TLS
 * files of mcp_https_configure; on_event is not called over HTTPS. */
int mcp_api_open(const char *socket_path, struct mcp_api **ret, struct sbx_error *err);
/* Once, before any thread: the CA file to trust instead of the system's
 * (NULL: the system store), and a client certificate and key for mTLS (both
 * or neither). mcp_https_global_init must have run. 0 or -EINVAL. */
int mcp_https_configure(const char *cacert, const char *cert, const char *key);
/* The HTTPS client's process-wide set-up (libcurl's global init): once, in
 * main, before any thread starts, if an https:// URL is used. 0 or -EIO. */
int mcp_https_global_init(void);
/* 0 if url is usable for mcp_api_open (https://, or http:// to a loopback
 * host; no blanks, query or fragment), else -EINVAL with err. */
int mcp_https_check_url(const char *url, struct sbx_error *err);
void mcp_api_close(struct mcp_api *a);
/* The connection's fd, for shutdown(2) from another thread to wake a
 * blocked request; -1 if closed. */
int mcp_api_fd(struct mcp_api *a);
/* Send {id, token, method, params} and read until the reply. params is
 * borrowed. On success *ret_result is the reply's result (caller frees).
 * Returns -EREMOTEIO for an error reply (err holds its code and message),
 * -ETIMEDOUT when no reply came within timeout_ms, other -errno for a broken
 * connection or a malformed reply. */
int mcp_api_request(struct mcp_api *a, const char *token, const char *method, const struct cJSON *params,
                    int timeout_ms, mcp_api_event_fn on_event, void *userdata, struct cJSON **ret_result,
                    struct mcp_api_error *err);

#endif
