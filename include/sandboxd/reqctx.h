/* reqctx.h — the correlation id of the request a thread is working on.
 *
 * A request names its correlation with a W3C `traceparent`
 * ("00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>", neither id all
 * zeros) or an `X-Request-Id` (1-64 characters of [A-Za-z0-9._:-]); HTTPS
 * takes them from the headers, the API socket from params.traceparent /
 * params.request_id, MCP from the call's _meta.traceparent. The trace id is
 * the traceparent's trace-id, else the request id, else a fresh 32-hex id:
 * a value that does not parse is ignored (W3C says a receiver must not fail
 * a request over it), never refused.
 *
 * The front sets it on the thread that serves the request (reqctx_set) and
 * clears it after (reqctx_clear); every log line (log.c), every audit row
 * (audit.c) and every event written meanwhile carries it. Work handed to
 * another thread carries a copy (the exec engine's jobs). Thread-local: no
 * locks. */
#ifndef SANDBOXD_REQCTX_H
#define SANDBOXD_REQCTX_H

#include <stdbool.h>
#include <stddef.h>

#define REQCTX_ID_MAX 64          /* a trace id's characters at most */
#define REQCTX_TRACEPARENT_LEN 55 /* "00-" 32 "-" 16 "-" 2 */

/* s is a valid traceparent (version 00, or a later version's first 55
 * characters followed by '-'); its trace-id into ret_trace (33 bytes). */
bool reqctx_traceparent_parse(const char *s, char ret_trace[33]);
/* 1-REQCTX_ID_MAX characters of [A-Za-z0-9._:-]. */
bool reqctx_request_id_valid(const char *s);
/* The trace id a request gets (rules above): from traceparent, else
 * request_id, else fresh; either may be NULL. ret holds REQCTX_ID_MAX + 1. */
void reqctx_pick(const char *traceparent, const char *request_id, char ret[REQCTX_ID_MAX + 1]);

/* This thread now works for the request of trace_id (copied; NULL or ""
 * clears). */
void reqctx_set(const char *trace_id);
void reqctx_clear(void);
/* The current request's trace id, "" when the thread serves none. Valid
 * until this thread's next reqctx_set / reqctx_clear. */
const char *reqctx_trace_id(void);
/* A traceparent naming trace_id (NULL: this thread's) and a fresh span id,
 * for a response header: 0, or -EINVAL when the trace id is not 32 hex (a
 * client's request id). */
int reqctx_traceparent(const char *trace_id, char ret[REQCTX_TRACEPARENT_LEN + 1]);

#endif
