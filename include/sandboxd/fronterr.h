/* fronterr.h — the error every front answers with (API, admin, MCP, HTTP):
 * a short machine code and a human message, and the one table that turns a
 * module's -errno into that code. The fronts never keep a table of their
 * own, so a failure reads the same on every socket. */
#ifndef SANDBOXD_FRONTERR_H
#define SANDBOXD_FRONTERR_H

#include "sandboxd/common.h"

struct fronterr {
        const char *code; /* "invalid", "not_found", ... (a static string) */
        char msg[1024];
};

/* Fill e; returns -1 so callers can `return fronterr_set(...)`. */
int fronterr_set(struct fronterr *e, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* e from a -errno: its code from the table, the message from err (if it has
 * one), else what, else strerror. Returns -1. */
int fronterr_errno(struct fronterr *e, int r, const struct sbx_error *err, const char *what);
/* The code for a -errno (the single table): "internal" for anything it
 * does not name. */
const char *fronterr_code(int r);

#endif
