/* reqguard.h — what a front checks in a request before it trusts the peer
 * or spends memory on it. Shared by every front that reads JSON requests
 * from tenants or local peers (api.c, admin.c, and any later front).
 *
 * The limits, in the order a front applies them:
 *   1. Before a connection has authenticated, a request line may be at most
 *      a few KiB (REQGUARD_PREAUTH_LINE). A longer first line is read past
 *      that only when its prefix already carries a top-level "token" member
 *      whose token verifies (reqguard_prefix_token): clients that put the
 *      token before large fields (every sandboxd client does) can send a
 *      large request as their first one.
 *   2. Before cJSON parses a line, reqguard_scan counts its values and its
 *      nesting in one pass with no allocation: a line past max_elements or
 *      max_depth is refused, so the parsed tree is bounded as well as the
 *      bytes (an 8 MiB line of "[0,0,...]" would otherwise cost ~300 MiB).
 *   3. Strict strings: a request whose text is not valid UTF-8, or whose
 *      strings hold a NUL (the escape \u0000 — cJSON would cut the string
 *      there), is refused with `invalid`. Every string parameter of every
 *      method is covered, because the whole request is checked.
 *   4. An unauthenticated reply never echoes a large "id"
 *      (reqguard_reply_id).
 *   5. Authentication failures are written to the audit log at most
 *      REQGUARD_AUDIT_BURST times per peer uid per REQGUARD_AUDIT_WINDOW_MS
 *      (reqguard_audit_allowed); the rest are counted and the count is
 *      reported with the next row that is written.
 *
 * Thread-safe: the scanners are pure; the audit limiter has one mutex. */
#ifndef SANDBOXD_REQGUARD_H
#define SANDBOXD_REQGUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#define REQGUARD_PREAUTH_LINE (4 * 1024) /* bytes of a request line before authentication */
#define REQGUARD_MAX_ELEMENTS 100000     /* JSON values in one request */
#define REQGUARD_MAX_DEPTH 32            /* nesting of arrays and objects */
#define REQGUARD_MAX_ID_BYTES 128        /* an unauthenticated "id" echoed back at most this long */
#define REQGUARD_AUDIT_BURST 10
#define REQGUARD_AUDIT_WINDOW_MS 60000

enum reqguard_verdict {
        REQGUARD_OK,
        REQGUARD_TOO_MANY_ELEMENTS,
        REQGUARD_TOO_DEEP,
        REQGUARD_BAD_UTF8, /* the text is not valid UTF-8 (a raw NUL byte included) */
        REQGUARD_NUL,      /* a string holds \u0000 */
};

/* One pass over a JSON text (malformed JSON is left to the parser: this only
 * measures). Counts stop at the first limit reached. */
enum reqguard_verdict reqguard_scan(const char *buf, size_t len, size_t max_elements, size_t max_depth);
/* A sentence for a verdict (for a reply's message). */
const char *reqguard_verdict_message(enum reqguard_verdict v);
/* True for the verdicts that are a bad argument (`invalid`) rather than a
 * request too large (`too_large`). */
bool reqguard_verdict_is_invalid(enum reqguard_verdict v);

/* In the first len bytes of a request line that has not fully arrived, the
 * string value of the top-level member "token", if it appears complete
 * before anything the scanner cannot skip: copied to ret (NUL-terminated)
 * and true; false otherwise (not there, cut off, escaped, or longer than
 * cap - 1). */
bool reqguard_prefix_token(const char *buf, size_t len, char *ret, size_t cap);

/* The "id" an unauthenticated reply may echo: id itself when it is a
 * number, a bool, null or a string of at most REQGUARD_MAX_ID_BYTES bytes;
 * NULL (reply with null) otherwise. */
const cJSON *reqguard_reply_id(const cJSON *id);

/* May an authentication failure of this peer be written to the audit log
 * now? When true, *ret_suppressed is how many of this peer's failures were
 * not written since its last row (to report with this one). */
bool reqguard_audit_allowed(uid_t uid, int64_t now_ms, uint64_t *ret_suppressed);

#endif
