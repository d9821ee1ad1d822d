/* tlsclient.h — a small blocking HTTPS/1.1 client for the tests of the
 * HTTPS front (GnuTLS), where curl's one process per request is too heavy:
 * hundreds of connections held open at once, a chosen source address on
 * loopback (127.0.0.2, ...), raw bytes trickled by hand. It does not verify
 * the server's certificate (test_http's curl does that). Every read and
 * write has a deadline (TLSC_IO_TIMEOUT_S), so nothing here can hang. */
#ifndef SANDBOXD_TLSCLIENT_H
#define SANDBOXD_TLSCLIENT_H

#include <stdbool.h>
#include <stddef.h>

#define TLSC_IO_TIMEOUT_S 30

struct tlsc;

/* A TCP connection from src (a numeric IPv4 address, NULL: any) to
 * 127.0.0.1:port; with tls, the handshake too. 0 or a negative errno. */
int tlsc_connect(const char *src, int port, bool tls, struct tlsc **ret);
/* One request on the connection (keep-alive): the status, or a negative
 * errno when the connection failed; the body in *ret_body (malloc'd) if
 * ret_body. token and body may be NULL. */
int tlsc_request(struct tlsc *c, const char *verb, const char *path, const char *token, const char *body,
                 char **ret_body);
/* Send raw bytes (over TLS once the handshake is done): 0 or a negative errno. */
int tlsc_send(struct tlsc *c, const void *buf, size_t len);
/* Whether the server has closed the connection (EOF or reset) within
 * timeout_ms; reads and drops whatever else arrives. */
bool tlsc_closed_within(struct tlsc *c, int timeout_ms);
void tlsc_close(struct tlsc *c);

#endif
