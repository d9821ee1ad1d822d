/* http.h — the network front door: the JSON API and MCP (Streamable HTTP at
 * /mcp, http_mcp.c, with the tasks extension of the shared core) over HTTPS,
 * built on libmicrohttpd with GnuTLS. Off unless http.listen is set.
 *
 * Transport:
 *   - http.listen = host:port (a numeric IPv4 address, or [IPv6]:port).
 *   - TLS from http.tls_cert + http.tls_key (PEM). Without them the front serves plain
 *     HTTP, which is refused unless the address is loopback (127.0.0.0/8,
 *     ::1), and the daemon logs a warning saying so.
 *   - http.tls_client_ca (PEM): every request must come over a TLS session whose
 *     client certificate that CA signed (mTLS); otherwise 403 and the
 *     connection is closed.
 *   - Limits. Connections: at most connections.max at once (by default
 *     limits.sessions + 64: every session's agent can hold one), and
 *     http_max_connections_per_address per client address (default
 *     limits.sessions); an IPv6 address counts by its /64. Past either, a new
 *     connection is closed at accept.
 *   - Connections that have not authenticated yet (no request with a valid
 *     token) have a budget of their own, below the total:
 *     HTTP_MAX_UNAUTHENTICATED in all (at most half of connections.max) and
 *     HTTP_MAX_UNAUTHENTICATED_PER_ADDRESS. With the total spent, a new
 *     connection from an address holding fewer of them than the busiest
 *     address replaces that address's oldest; otherwise it is closed. One
 *     that has not authenticated within connections.auth_timeout (5 s) of opening is
 *     closed whatever it trickles (slowloris). So people without a token
 *     cannot hold the front, and authenticated connections, which no longer
 *     count there, are never displaced.
 *   - Request headers at most HTTP_MAX_HEADERS bytes (431), a body at most
 *     API_MAX_LINE bytes (413, refused from Content-Length before any of it
 *     is read), a connection idle (no byte moving, a TLS handshake included)
 *     for HTTP_IDLE_TIMEOUT_S (30 s) is closed. After 5 failed authentications a
 *     connection is closed.
 *   - No ceiling on descriptor numbers: the front waits with poll(), never
 *     select(), so it serves whatever number the kernel hands out (a daemon
 *     with many sessions holds thousands).
 *
 * Authentication: every request but GET /healthz carries
 * `Authorization: Bearer <api token>` — the same tokens, roles and per-user
 * isolation as the API socket (api.h). The token is checked when the headers
 * are complete, before any of the body is read.
 *
 * The JSON API: `POST /v1/<method>` with the method's params object as the
 * body (application/json; an empty body is {}), through the same dispatcher
 * as the socket (api_call in api.c). Success: 200 with the method's result
 * object as the body. Failure: {"error": {"code", "message"}} with the
 * status for the code:
 *   bad_request, invalid → 400   unauthorized → 401   forbidden → 403
 *   not_found, unknown method → 404   conflict, already_finished → 409
 *   too_large → 413   busy → 429   unavailable → 503   internal → 500
 * exec and run_code with `Accept: text/event-stream` answer 200 with a
 * Server-Sent Events stream: `event: output` with data
 * {"stream": "stdout"|"stderr", "data": "<utf-8 text>"} as output arrives
 * (best effort, as the socket's progress lines), then exactly one final
 * `event: result` (data: the result object) or `event: error` (data:
 * {"code", "message", "status"}). Comment lines (": keep-alive") come every
 * HTTP_SSE_KEEPALIVE_MS of silence.
 *
 * GET /healthz → 200 "ok" (no token).
 *
 * E2B's control API (/sandboxes..., /v2/sandboxes...) and its in-sandbox
 * protocol (requests naming E2b-Sandbox-Id) are src/e2b/'s (e2b.h), with
 * their own authentication (X-API-Key, X-Access-Token) and caps. */
#ifndef SANDBOXD_HTTP_H
#define SANDBOXD_HTTP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "sandboxd/common.h"

/* the metrics front's own caps (loopback, no token) */
#define HTTP_METRICS_MAX_CONNS 64
#define HTTP_METRICS_MAX_PER_PEER 16
#define HTTP_MAX_HEADERS (64 * 1024)
#define HTTP_SSE_KEEPALIVE_MS 10000

struct daemon;
struct http_server;

/* Parse "a.b.c.d:port" or "[v6]:port" (numeric only; port 0 = any free
 * port). *ret_loopback says whether the address is loopback. */
int http_parse_listen(const char *text, struct sockaddr_storage *ret, socklen_t *ret_len, bool *ret_loopback);

/* Start serving http.listen (does nothing and returns 0 when it is empty):
 * reads the PEM files, refuses plain HTTP off loopback. */
int http_server_start(struct daemon *d, struct http_server **ret, struct sbx_error *err);
/* Start serving metrics.listen (nothing when empty): GET /metrics
 * (metrics.h) and /healthz (200 "ok", or 503 when Docker does not answer),
 * no token, plain HTTP, loopback only. */
int http_metrics_start(struct daemon *d, struct http_server **ret, struct sbx_error *err);
/* The bound port (useful with port 0). */
int http_server_port(const struct http_server *s);
/* Stop accepting, end every connection and request worker. NULL is fine. */
void http_server_stop(struct http_server *s);

/* A client address as the caps count it: IPv4 whole (an IPv4-mapped IPv6
 * address too), IPv6 by its /64 (one subscriber's prefix). */
struct http_addr {
        uint8_t family; /* 4 or 6; 0 unknown */
        uint8_t bytes[8];
};
void http_addr_of(const struct sockaddr *sa, struct http_addr *ret);
bool http_addr_eq(const struct http_addr *a, const struct http_addr *b);

/* The HTTP status for an API error code. */
int http_status_for_code(const char *code);

/* Constants that were config keys. Connections before their first
 * authenticated request, in all and per client address (IPv6 per /64): a
 * handshake takes one round trip, so these only bound a flood. Half the
 * total per address: one host driving 100 E2B sandboxes at once opens about
 * 100 connections together (32 refused most of them). */
#define HTTP_MAX_UNAUTHENTICATED 256
#define HTTP_MAX_UNAUTHENTICATED_PER_ADDRESS 128
/* An idle HTTP connection (TLS handshake included) is closed after this:
 * clients reconnect in one round trip, a slow-loris holds a slot no longer. */
#define HTTP_IDLE_TIMEOUT_S 30

#endif
