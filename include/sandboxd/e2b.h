/* e2b.h — E2B's protocols on the HTTPS front (issue 36, docs/e2b.md): a
 * thin translation, in src/e2b/, from E2B's control API and its in-sandbox
 * daemon (envd) onto the API's dispatcher (api_call), so the official E2B
 * SDKs drive sandboxd unchanged with E2B_API_URL and E2B_SANDBOX_URL both
 * set to the front's https://HOST:PORT and E2B_API_KEY a sandboxd token in
 * E2B's spelling (token.h).
 *
 * An E2B sandbox is the session "e2b-<sandboxID>" of the key's user: quotas,
 * audit, events, labels (E2B's metadata) and sandboxctl hold as for any
 * session. Templates map to images (e2b.templates: "name=image,..."; by
 * default base and code-interpreter-v1 to the configured image).
 *
 * Routing: the control routes (/sandboxes..., /v2/sandboxes, /snapshots,
 * /templates/..., /secrets... on the user's secrets: e2b_secrets.c) carry X-API-Key;
 * an in-sandbox request is one that names E2b-Sandbox-Id (E2b-Sandbox-Port
 * 49983: envd; 49999: the code interpreter, on run_cell) and carries the
 * sandbox's access token (X-Access-Token, or E2B-Traffic-Access-Token, the
 * same token, which the code interpreter's SDK sends), an HMAC
 * of the user and the sandbox id under a key of the daemon's data directory,
 * returned by create and connect. Another user's sandbox answers as an
 * unknown one (404).
 *
 * getHost(port) traffic (e2b_proxy.c): a Host "{port}-{id}.{e2b.domain}",
 * or E2b-Sandbox-Id with another E2b-Sandbox-Port, is proxied to that port
 * in the sandbox's container through the gateway (gateway_dial); public
 * unless created with network.allowPublicTraffic false, then it needs
 * e2b-traffic-access-token (the access token). Unknown, or private without
 * the right token: 404.
 *
 * Caps: a control body at most E2B_BODY_MAX, a Connect message at most
 * E2B_BODY_MAX, an upload at most min(limits.file_size, E2B_UPLOAD_MAX). */
#ifndef SANDBOXD_E2B_H
#define SANDBOXD_E2B_H

#include <stdbool.h>
#include <stddef.h>

#include "sandboxd/api_transport.h"

#define E2B_BODY_MAX (256 * 1024)
#define E2B_UPLOAD_MAX (64 * 1024 * 1024)
#define E2B_ID_MAX 32          /* a sandbox id: [a-z0-9], at most this long */
#define E2B_ENVD_PORT 49983    /* envd's port in E2B_SANDBOX_URL routing */
#define E2B_JUPYTER_PORT 49999 /* the code interpreter's */
#define E2B_ENVD_VERSION "0.5.7"
/* getHost(port) requests proxied at once in all (e2b_proxy.c); the per-user
 * cap is the key e2b.proxy_max_per_user. */
#define E2B_PROXY_MAX_TOTAL 512

struct daemon;
struct e2b_req;
struct MHD_Connection;

#define E2B_SANDBOX_ID_LEN 20 /* the ids create makes; the only ones a getHost host name routes */

/* Whether the request is the E2B front's: a control route, an envd request,
 * or getHost(port) traffic (a Host under e2b.domain). */
bool e2b_claims(const struct daemon *d, struct MHD_Connection *conn, const char *url);
/* A port in decimal, 1-65535, no sign, no leading zero; 0 if s[0..n) is not one. */
int e2b_port_parse(const char *s, size_t n);
/* The port of a getHost host name "{port}-{id}.{domain}" (an optional
 * ":port" of the front's own and a final dot allowed, domain matched without
 * case, id exactly E2B_SANDBOX_ID_LEN of [a-z0-9], copied to ret_id); 0 when
 * host is not one (or domain is empty). */
int e2b_host_target(const char *domain, const char *host, char ret_id[E2B_ID_MAX + 1]);
/* The headers are complete: route and authenticate. c is the connection's
 * API state (auth failures count there) with send and gone set for this
 * request. Always a request in *ret (NULL only without memory); when
 * e2b_decided, answer at once with e2b_respond without reading the body. */
int e2b_begin(struct daemon *d, const struct api_conn *c, struct MHD_Connection *conn, const char *url,
              const char *verb, struct e2b_req **ret);
bool e2b_decided(const struct e2b_req *q);
/* The authenticated user (the connection leaves the unauthenticated budget). */
bool e2b_authenticated(const struct e2b_req *q);
/* The connection's failed authentications, this request's included (the
 * front closes a connection after HTTP_MAX_AUTH_FAILURES). */
int e2b_auth_failures(const struct e2b_req *q);
/* A piece of the body. Past the route's cap it is e2b_decided (413): the
 * front answers at once and closes, the rest never read (a streamed body
 * has no Content-Length to refuse it by). */
void e2b_body(struct e2b_req *q, const char *data, size_t n);
/* The body is complete (or e2b_decided): run the route and queue its answer
 * (an enum MHD_Result); close: the answer closes the connection. */
int e2b_respond(struct e2b_req *q, struct MHD_Connection *conn, bool close);
void e2b_req_free(struct e2b_req *q);
/* The front stops: every upgraded getHost connection (a WebSocket) ends now,
 * and any later one at once; before MHD_stop_daemon, which waits for them. */
void e2b_proxy_stop(void);

#endif
