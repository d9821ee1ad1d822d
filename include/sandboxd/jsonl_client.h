/* jsonl_client.h — the one client of sandboxd's JSON-lines sockets (the API
 * socket, api.h, and the admin socket, admin.h), used by sandboxctl, the
 * MCP adapter (mcp_api.c) and the integration tests: connect, send one
 * object as one line, read one capped line by a deadline, parse it.
 *
 * Stateless: everything works on a plain fd, and a read never takes a byte
 * past the line's '\n' (it peeks first), so the next line stays in the
 * socket for whoever reads next, raw or through here. Every wait has a
 * deadline: connect and send by the socket's send timeout
 * (JSONL_SEND_TIMEOUT_S), reads by the caller's timeout. */
#ifndef SANDBOXD_JSONL_CLIENT_H
#define SANDBOXD_JSONL_CLIENT_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "sandboxd/common.h"

#define JSONL_SEND_TIMEOUT_S 30

/* Connect to the Unix stream socket at path: the fd (close-on-exec, its
 * connect and sends bounded by JSONL_SEND_TIMEOUT_S), or -errno with err
 * ("cannot connect to <path>: ..."). */
int jsonl_connect(const char *path, struct sbx_error *err);
/* Send len bytes as given (no newline added): 0 or -errno. */
int jsonl_send_raw(int fd, const void *buf, size_t len);
/* Send msg as one line (compact JSON and '\n'): 0 or -errno. */
int jsonl_send(int fd, const cJSON *msg);
/* Read one line (without its '\n') of at most max bytes, waiting at most
 * timeout_ms in all: 0 with *ret_line (malloc'd, NUL-terminated) and
 * *ret_len; -ETIMEDOUT, -ECONNRESET (the peer closed, or shut the fd down,
 * before a whole line), -EMSGSIZE (longer than max; the connection is then
 * unusable), or another -errno. */
int jsonl_read_line(int fd, size_t max, int timeout_ms, char **ret_line, size_t *ret_len);
/* jsonl_read_line, parsed: -EBADMSG when the line is not a JSON object. */
int jsonl_read(int fd, size_t max, int timeout_ms, cJSON **ret);
/* One request on a fresh connection: connect, send req, read the first
 * line that answers it, close. err names what failed. */
int jsonl_call(const char *path, const cJSON *req, size_t max, int timeout_ms, cJSON **ret_reply,
               struct sbx_error *err);

#endif
