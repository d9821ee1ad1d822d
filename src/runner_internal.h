/* runner_internal.h — between runner.c (the hub: sockets, connections,
 * executions) and runner_ops.c (files and services over the same
 * connections). Not a public header. */
#ifndef SANDBOXD_RUNNER_INTERNAL_H
#define SANDBOXD_RUNNER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/runner.h"
#include "sandboxd/runner_ops.h"

/* runner.c */
struct runner_ops *runner_hub_ops(struct runner_hub *h);
/* The id of the session's live connection (-ENOTCONN without one). */
int runner_hub_conn(struct runner_hub *h, const char *user, const char *session, uint64_t *ret);
/* One frame on that very connection; -ENOTCONN if it is no longer the live one. */
int runner_hub_send(struct runner_hub *h, const char *user, const char *session, uint64_t conn, uint16_t type,
                    uint16_t flags, uint32_t tag, const void *p1, size_t n1, const void *p2, size_t n2);

/* runner_ops.c, called by runner.c */
struct runner_ops *runner_ops_new(struct runner_hub *h);
void runner_ops_free(struct runner_ops *o); /* NULL is fine */
/* A frame of types RP_FILE_READ..RP_SVC_STATE from the runner, on the hub
 * thread with no lock held. False: a protocol error. */
bool runner_ops_frame(struct runner_ops *o, const char *user, const char *session, uint64_t conn,
                      const struct rp_hdr *hdr, const unsigned char *p);
/* The connection went: its requests end with -ECONNRESET, its services'
 * reports are forgotten (the runner repeats them on its next hello). */
void runner_ops_closed(struct runner_ops *o, const char *user, const char *session, uint64_t conn);

#endif
