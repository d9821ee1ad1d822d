/* utf8.h — making tenant bytes safe for JSON text.
 *
 * Output of a command is raw bytes. Where it travels as JSON text, every
 * byte sequence that is not valid UTF-8 (stray continuation bytes, overlong
 * forms, surrogates, code points past U+10FFFF, sequences cut at the end)
 * is replaced by U+FFFD, one per maximal invalid subsequence, and NUL by
 * U+FFFD too. Byte counts and offsets always refer to the raw bytes, which
 * stay readable unchanged as base64. */
#ifndef SANDBOXD_UTF8_H
#define SANDBOXD_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Length of the valid UTF-8 sequence at s (1-4), or 0 if invalid/incomplete. */
size_t utf8_valid_prefix(const unsigned char *s, size_t len);
bool utf8_is_valid(const void *buf, size_t len);
/* How many bytes at the end of s begin a sequence cut short (0-3): what a
 * reader of a stream in chunks carries into the next chunk. */
size_t utf8_incomplete_tail(const unsigned char *s, size_t len);
/* A NUL-terminated, valid UTF-8 copy (malloc'd) of buf; NULL on OOM. */
char *utf8_sanitize(const void *buf, size_t len);

/* Base64 (RFC 4648, with padding). Encode returns a malloc'd string. Decode
 * returns -EINVAL for bad input; *ret is malloc'd. */
char *base64_encode(const void *buf, size_t len);
int base64_decode(const char *s, size_t len, unsigned char **ret, size_t *ret_len);

/* A user or session id (and a slot, an actor): 1-SBX_ID_MAX characters of
 * [A-Za-z0-9_.-], not "." nor "..". Safe as a path component. Here, in the
 * base library, so that a front (sandboxd-mcp) checks ids without linking
 * the session manager. */
#define SBX_ID_MAX 64
bool session_id_valid(const char *id);

#endif
