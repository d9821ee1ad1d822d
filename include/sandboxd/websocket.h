/* websocket.h — RFC 6455 framing, as a server sees it: the handshake's
 * accept key, and a reader that turns a client's bytes into whole messages
 * (fragments joined, control frames passed up between them) or into the
 * close code the connection must end with. Pure: no sockets, no threads; the
 * HTTPS front's terminal (src/http/http_terminal.c) owns the connection.
 *
 * What a reader refuses, and the close code it names (RFC 6455 §7.4.1):
 *   1002  reserved bits set (no extension is negotiated), an unknown opcode,
 *         an unmasked client frame, a control frame fragmented or over 125
 *         bytes, a length not in its shortest form or with the top bit set,
 *         a continuation with no message begun, a new message inside one,
 *         a close payload of 1 byte or with a code no endpoint may send;
 *   1007  a text message or a close reason that is not UTF-8;
 *   1009  a message (all its fragments) longer than the reader's max. */
#ifndef SANDBOXD_WEBSOCKET_H
#define SANDBOXD_WEBSOCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WEBSOCKET_HEADER_MAX 14   /* 2 + 8 (length) + 4 (mask) */
#define WEBSOCKET_CONTROL_MAX 125 /* a control frame's payload */
#define WEBSOCKET_ACCEPT_LEN 28   /* base64 of a SHA-1 */

enum websocket_opcode {
        WEBSOCKET_CONTINUATION = 0x0,
        WEBSOCKET_TEXT = 0x1,
        WEBSOCKET_BINARY = 0x2,
        WEBSOCKET_CLOSE = 0x8,
        WEBSOCKET_PING = 0x9,
        WEBSOCKET_PONG = 0xa,
};

enum {
        WEBSOCKET_CLOSE_NORMAL = 1000,
        WEBSOCKET_CLOSE_GOING_AWAY = 1001,
        WEBSOCKET_CLOSE_PROTOCOL = 1002,
        WEBSOCKET_CLOSE_NO_STATUS = 1005, /* never on the wire: a close frame with no payload */
        WEBSOCKET_CLOSE_BAD_DATA = 1007,
        WEBSOCKET_CLOSE_POLICY = 1008,
        WEBSOCKET_CLOSE_TOO_BIG = 1009,
        WEBSOCKET_CLOSE_INTERNAL = 1011,
        WEBSOCKET_CLOSE_TRY_LATER = 1013,
};

/* Whether key is a Sec-WebSocket-Key: base64 of 16 bytes (24 characters). */
bool websocket_key_valid(const char *key);
/* Sec-WebSocket-Accept for key: base64(SHA-1(key + the RFC's GUID)). 0, or
 * -EINVAL when the key is not valid. */
int websocket_accept_key(const char *key, char ret[WEBSOCKET_ACCEPT_LEN + 1]);

/* A server's frame header (FIN set, never masked) for a payload of len
 * bytes: its length, at most WEBSOCKET_HEADER_MAX. */
size_t websocket_frame_header(uint8_t ret[WEBSOCKET_HEADER_MAX], enum websocket_opcode op, uint64_t len);

/* The reader of one client. Bytes go in through websocket_reader_space and
 * websocket_reader_commit (at most the larger of max_message and
 * WEBSOCKET_CONTROL_MAX, + WEBSOCKET_HEADER_MAX, wait at once, so a whole
 * frame always fits); websocket_reader_next hands out messages. */
struct websocket_reader {
        size_t max_message;
        uint8_t *in; /* raw bytes not yet parsed */
        size_t in_len, in_cap;
        size_t in_skip; /* bytes of in handed out by the last next, dropped by the next call */
        uint8_t *msg;   /* the data message being joined */
        size_t msg_len;
        enum websocket_opcode msg_op;
        bool in_message;
        bool msg_taken; /* msg was handed out whole: emptied by the next call */
        int close_code; /* set when next returns -1 */
};

/* One message: a data message whole, or a control frame. data points into
 * the reader and is valid until the next call. For a close, code is the
 * peer's (WEBSOCKET_CLOSE_NO_STATUS when it sent none) and data its reason. */
struct websocket_message {
        enum websocket_opcode op;
        const uint8_t *data;
        size_t len;
        int code;
};

int websocket_reader_init(struct websocket_reader *r, size_t max_message);
void websocket_reader_done(struct websocket_reader *r);
/* Where the next bytes from the socket go, and how many fit (0: a message
 * must be taken first). */
uint8_t *websocket_reader_space(struct websocket_reader *r, size_t *ret_len);
void websocket_reader_commit(struct websocket_reader *r, size_t n);
/* Append n bytes (what the socket read behind the handshake): 0, or
 * -ENOBUFS past the reader's room. */
int websocket_reader_feed(struct websocket_reader *r, const void *buf, size_t n);
/* 1 with *ret, 0 when more bytes are needed, -1 with r->close_code when the
 * peer broke the protocol (the connection ends with that code). */
int websocket_reader_next(struct websocket_reader *r, struct websocket_message *ret);

#endif
