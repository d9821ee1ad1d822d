/* e2b_proxy.c — E2B's getHost(port) traffic (e2b.h): a request to
 * {port}-{sandboxID}.{e2b.domain}, or one naming E2b-Sandbox-Id with a port
 * other than envd's and the code interpreter's, is proxied to
 * 127.0.0.1:port inside the sandbox's container through the gateway's
 * channel for published ports (gateway_dial: fwd.sock and the runner; no
 * other way into a sealed container).
 *
 * HTTP/1.1 to the container, one request per connection ("Connection:
 * close"): the request's head is rebuilt from what MHD parsed (hop-by-hop
 * headers and sandboxd's own credentials dropped), its body streamed as it
 * comes (chunked again when the client sent it chunked); the answer's head
 * is read (at most PROXY_HEAD_MAX bytes), checked and re-issued through
 * MHD, its body streamed by a reader callback (Content-Length, chunked or
 * to the close), each read and write bounded by PROXY_IDLE_S. Memory per
 * request: PROXY_HEAD_MAX plus one MHD block.
 *
 * Upgrades (WebSocket and any other): a request with "Connection: upgrade"
 * and an Upgrade header goes to the container with both ("Connection:
 * Upgrade" instead of close). Any answer but 101 is relayed as above; a 101
 * is re-issued through MHD's upgrade support (MHD_ALLOW_UPGRADE, set in
 * http.c) with the container's Upgrade and its other end-to-end headers
 * (Sec-WebSocket-Accept), and once MHD hands the client's socket over
 * (relay_start) a detached thread ("sbx-e2b-relay", one per upgraded
 * connection) moves bytes both ways through two RELAY_BUF buffers with
 * poll(): bytes the container sent behind its 101 and the client behind
 * its request go first. It ends when either side closes (what was read
 * from it is delivered first) or errs, when no byte moves either way for
 * PROXY_IDLE_S, or when bytes wait PROXY_IDLE_S for a side that does not
 * read; then it closes the container's end, gives the slot back, and
 * closes the client's with MHD_upgrade_action(CLOSE) as its last act on
 * shared state. MHD_stop_daemon waits for that CLOSE (the connection's
 * thread blocks on it), and http_server_stop calls e2b_proxy_stop first,
 * which ends every relay at once (a pipe each one polls): the threads need
 * no join of their own.
 * struct relay is freed by the last of the request (e2b_proxy_free) and
 * the thread (refs, relay_lock).
 *
 * Access (E2B's): traffic is public (the sandbox id is the capability)
 * unless the sandbox was created with network.allowPublicTraffic false
 * (the label E2B_TRAFFIC_LABEL), when e2b-traffic-access-token must be its
 * access token. Unknown, another user's twin, or private without the right
 * token: the same 404. A paused sandbox: 502, as E2B's proxy answers.
 *
 * Caps: E2B_PROXY_MAX_TOTAL and e2b.proxy_max_per_user requests at once
 * (slot_lock), held from routing until the answer's last byte is handed to
 * MHD (or MHD frees the response), and by an upgraded connection until its
 * relay ends. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "e2b_internal.h"
#include "sandboxd/daemon.h"
#include "sandboxd/gateway.h"
#include "sandboxd/log.h"
#include "sandboxd/metrics.h"
#include "sandboxd/session.h"

#define PROXY_HEAD_MAX (16 * 1024) /* the container's status line and headers */
#define PROXY_IDLE_S 60            /* a read or a write to the container waits at most this long */
#define PROXY_BLOCK (32 * 1024)    /* MHD's block for the streamed answer */
#define PROXY_CHUNK_LINE_MAX 1024  /* a chunk-size line with its extensions */
#define RELAY_BUF PROXY_HEAD_MAX   /* an upgraded connection's buffer, each way */

/* ---- caps ---- */

struct slot_user {
        struct slot_user *next;
        char user[65];
        int n;
};

static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot_user *slot_users; /* slot_lock */
static int slot_total;               /* slot_lock */

static int slot_take(const struct sbx_config *cfg, const char *user)
{
        struct slot_user *u;
        int r = 0;

        pthread_mutex_lock(&slot_lock);
        for (u = slot_users; u && strcmp(u->user, user) != 0; u = u->next)
                ;
        if (slot_total >= cfg->e2b_proxy_max_total)
                r = -EBUSY;
        else if (u && u->n >= cfg->e2b_proxy_max_per_user)
                r = -EUSERS;
        else if (!u && !(u = calloc(1, sizeof(*u))))
                r = -ENOMEM;
        else {
                if (!u->user[0]) {
                        sbx_strlcpy(u->user, user, sizeof(u->user));
                        u->next = slot_users;
                        slot_users = u;
                }
                u->n++;
                slot_total++;
        }
        pthread_mutex_unlock(&slot_lock);
        return r;
}

static void slot_give(const char *user)
{
        struct slot_user **p, *u;

        pthread_mutex_lock(&slot_lock);
        for (p = &slot_users; (u = *p) && strcmp(u->user, user) != 0; p = &u->next)
                ;
        if (u) {
                slot_total--;
                if (--u->n == 0) {
                        *p = u->next;
                        free(u);
                }
        }
        pthread_mutex_unlock(&slot_lock);
}

/* ---- names ---- */

int e2b_port_parse(const char *s, size_t n)
{
        int port = 0;

        if (n == 0 || n > 5 || s[0] == '0')
                return 0;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return 0;
                port = port * 10 + (s[i] - '0');
        }
        return port <= 65535 ? port : 0;
}

int e2b_host_target(const char *domain, const char *host, char ret_id[E2B_ID_MAX + 1])
{
        size_t dl = strlen(domain), hl, dash, idl;
        const char *colon;
        char id[E2B_ID_MAX + 1];
        int port;

        if (!domain[0] || !host)
                return 0;
        hl = strlen(host);
        /* an optional :port of the front itself */
        colon = memchr(host, ':', hl);
        if (colon) {
                if (!e2b_port_parse(colon + 1, hl - (size_t)(colon - host) - 1))
                        return 0;
                hl = (size_t)(colon - host);
        }
        if (hl && host[hl - 1] == '.') /* the absolute form */
                hl--;
        if (hl < dl + 2 || host[hl - dl - 1] != '.' || strncasecmp(host + hl - dl, domain, dl) != 0)
                return 0;
        hl -= dl + 1; /* host[0..hl) is "{port}-{id}" */
        dash = 0;
        while (dash < hl && host[dash] != '-')
                dash++;
        if (dash == hl || !(port = e2b_port_parse(host, dash)))
                return 0;
        idl = hl - dash - 1;
        if (idl != E2B_SANDBOX_ID_LEN)
                return 0;
        for (size_t i = 0; i < idl; i++) {
                char c = host[dash + 1 + i];
                if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
                        return 0;
                id[i] = c;
        }
        id[idl] = '\0';
        memcpy(ret_id, id, idl + 1);
        return port;
}

/* ---- the request to the container ---- */

static bool token_char(char c)
{
        return isalnum((unsigned char)c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool value_ok(const char *v)
{
        for (; *v; v++)
                if (((unsigned char)*v < 0x20 && *v != '\t') || *v == 0x7f)
                        return false;
        return true;
}

/* list (a header's comma-separated tokens) holds name, in any case */
static bool has_token(const char *list, const char *name)
{
        size_t n = strlen(name);

        for (const char *p = list; *p;) {
                while (*p == ' ' || *p == '\t' || *p == ',')
                        p++;
                const char *e = p;
                while (*e && *e != ',')
                        e++;
                size_t l = (size_t)(e - p);
                while (l && (p[l - 1] == ' ' || p[l - 1] == '\t'))
                        l--;
                if (l == n && strncasecmp(p, name, n) == 0)
                        return true;
                p = e;
        }
        return false;
}

/* All of buf, within PROXY_IDLE_S a write (SO_SNDTIMEO). */
static int write_all(int fd, const char *buf, size_t n)
{
        while (n) {
                ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return -EPIPE;
                buf += w;
                n -= (size_t)w;
        }
        return 0;
}

struct head {
        char *buf;
        size_t len, cap;
        bool bad;
};

static void head_add(struct head *h, const char *s, size_t n)
{
        if (h->bad)
                return;
        if (h->len + n + 1 > h->cap) {
                size_t cap = (h->len + n + 1) * 2;
                char *nb = realloc(h->buf, cap);
                if (!nb) {
                        h->bad = true;
                        return;
                }
                h->buf = nb;
                h->cap = cap;
        }
        memcpy(h->buf + h->len, s, n);
        h->len += n;
        h->buf[h->len] = '\0';
}

static void head_str(struct head *h, const char *s)
{
        head_add(h, s, strlen(s));
}

/* s percent-encoded again where it is not a path's or a query's own character (MHD decoded it). */
static void head_escaped(struct head *h, const char *s, bool query)
{
        static const char hex[] = "0123456789ABCDEF";

        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if (isalnum(c) || strchr(query ? "-._~!$'()*,;:@/?" : "-._~!$&'()*+,;=:@/", c)) {
                        head_add(h, (const char *)&c, 1);
                } else {
                        char e[3] = {'%', hex[c >> 4], hex[c & 15]};
                        head_add(h, e, 3);
                }
        }
}

static bool hop_by_hop(const char *k)
{
        static const char *const names[] = {"Connection",
                                            "Keep-Alive",
                                            "Proxy-Connection",
                                            "Proxy-Authenticate",
                                            "Proxy-Authorization",
                                            "TE",
                                            "Trailer",
                                            "Transfer-Encoding",
                                            "Upgrade",
                                            "Content-Length",
                                            "Host",
                                            "Expect",
                                            NULL};
        for (size_t i = 0; names[i]; i++)
                if (strcasecmp(k, names[i]) == 0)
                        return true;
        return false;
}

/* sandboxd's own credentials and routing never reach the sandbox */
static bool ours(const char *k)
{
        return strcasecmp(k, "E2b-Sandbox-Id") == 0 || strcasecmp(k, "E2b-Sandbox-Port") == 0 ||
               strcasecmp(k, "E2b-Traffic-Access-Token") == 0 || strcasecmp(k, "X-Access-Token") == 0 ||
               strcasecmp(k, "X-API-Key") == 0;
}

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
        struct head *h = cls;

        (void)kind;
        if (!key || hop_by_hop(key) || ours(key))
                return MHD_YES;
        head_str(h, key);
        head_str(h, ": ");
        head_str(h, value ? value : "");
        head_str(h, "\r\n");
        return MHD_YES;
}

static enum MHD_Result add_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
        struct head *h = cls;

        (void)kind;
        head_str(h, h->buf[h->len - 1] == '?' ? "" : "&");
        head_escaped(h, key, true);
        if (value) {
                head_str(h, "=");
                head_escaped(h, value, true);
        }
        return MHD_YES;
}

/* The owner of the sandbox's session: exactly one user has it (a twin a
 * user named so through /v1/ makes it nobody's: 404, never a guess). */
static int owner_of(struct e2b_req *q)
{
        return session_owner(q->d->sessions, q->session, q->tok.user, sizeof(q->tok.user));
}

/* The session as session_info sees it: E2B's paused, and its traffic label. */
static int sandbox_state(struct e2b_req *q, bool *ret_paused, bool *ret_private)
{
        struct fronterr e = {0};
        cJSON *params = cJSON_CreateObject(), *res = NULL;
        const cJSON *state, *label;

        if (params)
                cJSON_AddStringToObject(params, "session", q->session);
        if (e2b_call(q, "session_info", params, &res, &e) < 0) {
                log_ctx(LOG_LEVEL_DEBUG, q->tok.user, q->session, NULL, "e2b: getHost: session_info: %s", e.msg);
                return -ENOENT;
        }
        state = cJSON_GetObjectItemCaseSensitive(res, "state");
        label = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "labels"), E2B_TRAFFIC_LABEL);
        *ret_paused = cJSON_IsString(state) &&
                      (strcmp(state->valuestring, "paused") == 0 || strcmp(state->valuestring, "stopped") == 0);
        /* anything but "public" there is private: fail closed */
        *ret_private = label != NULL && !(cJSON_IsString(label) && strcmp(label->valuestring, "public") == 0);
        cJSON_Delete(res);
        return 0;
}

void e2b_proxy_begin(struct e2b_req *q, struct MHD_Connection *conn, const char *url, const char *verb, int port)
{
        const char *len = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
        const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        const char *token = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2b-Traffic-Access-Token");
        const char *upgrade = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_UPGRADE);
        const char *connection = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONNECTION);
        struct timeval tv = {PROXY_IDLE_S, 0};
        struct head h = {0};
        bool paused = false, private = false;
        char owner[sizeof(q->tok.user)], num[32];
        int r;

        q->proxy_port = port;
        q->upgrade = upgrade && upgrade[0] && value_ok(upgrade) && connection && has_token(connection, "upgrade");
        snprintf(q->session, sizeof(q->session), E2B_SESSION_PREFIX "%s", q->sandbox);
        q->tok.role = TOKEN_ROLE_AGENT;
        /* one answer for unknown, ambiguous, and private without its token: existence is not told */
        if (owner_of(q) < 0 || sandbox_state(q, &paused, &private) < 0) {
                memset(&q->tok, 0, sizeof(q->tok));
                e2b_decide(q, 404, "sandbox %s not found", q->sandbox);
                return;
        }
        if (private) {
                sbx_strlcpy(owner, q->tok.user, sizeof(owner));
                if (!token || !e2b_access_check(q, token) || strcmp(q->tok.user, owner) != 0) {
                        q->c.auth_failures++;
                        memset(&q->tok, 0, sizeof(q->tok));
                        e2b_decide(q, 404, "sandbox %s not found", q->sandbox);
                        return;
                }
        }
        q->authed = true; /* the id (and the token of a private one) is the capability */
        if (paused) {
                e2b_decide(q, 502, "sandbox %s is paused: resume it (Sandbox.connect) to reach port %d", q->sandbox,
                           port);
                return;
        }
        r = slot_take(&q->d->cfg, q->tok.user);
        if (r < 0) {
                e2b_decide(q, r == -EUSERS ? 429 : 503,
                           r == -EUSERS ? "too many proxied requests of this user at once (e2b.proxy_max_per_user)"
                                        : "too many proxied requests at once (E2B_PROXY_MAX_TOTAL)");
                return;
        }
        q->slot = true;
        r = gateway_dial(q->d->gateway, q->tok.user, q->session, port, &q->pfd);
        if (r < 0) {
                q->pfd = -1;
                e2b_decide(q, 502, "port %d of sandbox %s cannot be reached (%s)", port, q->sandbox, strerror(-r));
                return;
        }
        (void)setsockopt(q->pfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        (void)setsockopt(q->pfd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

        head_str(&h, verb);
        head_str(&h, " ");
        head_escaped(&h, url[0] == '/' ? url : "/", false);
        head_str(&h, "?");
        MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, add_arg, &h);
        if (!h.bad && h.buf[h.len - 1] == '?')
                h.buf[--h.len] = '\0';
        head_str(&h, " HTTP/1.1\r\nHost: ");
        head_str(&h, host ? host : "localhost");
        head_str(&h, "\r\n");
        MHD_get_connection_values(conn, MHD_HEADER_KIND, add_header, &h);
        if (te && strcasecmp(te, "chunked") == 0) {
                q->req_chunked = true;
                head_str(&h, "Transfer-Encoding: chunked\r\n");
        } else if (len) {
                snprintf(num, sizeof(num), "%" PRIu64, (uint64_t)strtoull(len, NULL, 10));
                head_str(&h, "Content-Length: ");
                head_str(&h, num);
                head_str(&h, "\r\n");
        }
        if (q->upgrade) {
                head_str(&h, "Connection: Upgrade\r\nUpgrade: ");
                head_str(&h, upgrade);
                head_str(&h, "\r\n\r\n");
        } else {
                head_str(&h, "Connection: close\r\n\r\n");
        }
        if (h.bad || write_all(q->pfd, h.buf, h.len) < 0)
                q->pfail = true; /* told when the answer is read (nothing listens, or it closed) */
        free(h.buf);
}

void e2b_proxy_body(struct e2b_req *q, const char *data, size_t n)
{
        char line[32];

        if (q->pfail || n == 0)
                return;
        if (q->req_chunked) {
                int l = snprintf(line, sizeof(line), "%zx\r\n", n);
                if (write_all(q->pfd, line, (size_t)l) < 0 || write_all(q->pfd, data, n) < 0 ||
                    write_all(q->pfd, "\r\n", 2) < 0)
                        q->pfail = true;
        } else if (write_all(q->pfd, data, n) < 0) {
                q->pfail = true;
        }
}

/* ---- the answer ---- */

enum body_mode { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_CLOSE };
enum chunk_state { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER, CH_DONE };

/* The answer's body, owned by the MHD response (its free callback). */
struct pbody {
        int fd;
        char user[65];
        enum body_mode mode;
        uint64_t left; /* BODY_LENGTH: bytes to come; BODY_CHUNKED: of this chunk */
        enum chunk_state ch;
        char buf[PROXY_HEAD_MAX];
        size_t off, len;
        bool done; /* fd closed and the slot given back */
};

static ssize_t fill(struct pbody *b)
{
        ssize_t n;

        if (b->off == b->len)
                b->off = b->len = 0;
        else if (b->off) {
                memmove(b->buf, b->buf + b->off, b->len - b->off);
                b->len -= b->off;
                b->off = 0;
        }
        if (b->len == sizeof(b->buf))
                return -1;
        do
                n = recv(b->fd, b->buf + b->len, sizeof(b->buf) - b->len, 0);
        while (n < 0 && errno == EINTR);
        if (n > 0)
                b->len += (size_t)n;
        return n;
}

/* One line of the buffer (CRLF or LF ended), read further as needed; NULL at
 * EOF, on a line past PROXY_CHUNK_LINE_MAX or a read that timed out. */
static char *take_line(struct pbody *b)
{
        for (;;) {
                char *nl = memchr(b->buf + b->off, '\n', b->len - b->off);
                if (nl) {
                        char *line = b->buf + b->off;
                        *nl = '\0';
                        if (nl > line && nl[-1] == '\r')
                                nl[-1] = '\0';
                        b->off = (size_t)(nl - b->buf) + 1;
                        return line;
                }
                if (b->len - b->off > PROXY_CHUNK_LINE_MAX || fill(b) <= 0)
                        return NULL;
        }
}

/* Up to max bytes of the current data (at most b->left when bounded). */
static ssize_t take_data(struct pbody *b, char *out, size_t max, bool bounded)
{
        size_t n;

        if (bounded && max > b->left)
                max = (size_t)b->left;
        if (b->off == b->len) {
                ssize_t r = fill(b);
                if (r <= 0)
                        return r;
        }
        n = b->len - b->off;
        if (n > max)
                n = max;
        memcpy(out, b->buf + b->off, n);
        b->off += n;
        if (bounded)
                b->left -= n;
        return (ssize_t)n;
}

static ssize_t body_read_one(struct pbody *b, char *out, size_t max)
{
        ssize_t n;
        char *line, *end;

        switch (b->mode) {
        case BODY_NONE:
                return MHD_CONTENT_READER_END_OF_STREAM;
        case BODY_LENGTH:
                if (b->left == 0)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                n = take_data(b, out, max, true);
                return n > 0 ? n : MHD_CONTENT_READER_END_WITH_ERROR;
        case BODY_CLOSE:
                n = take_data(b, out, max, false);
                return n > 0 ? n : n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
        case BODY_CHUNKED:
                for (;;) {
                        switch (b->ch) {
                        case CH_SIZE:
                                if (!(line = take_line(b)) || !isxdigit((unsigned char)line[0]))
                                        return MHD_CONTENT_READER_END_WITH_ERROR;
                                errno = 0;
                                b->left = strtoull(line, &end, 16);
                                if (errno || (*end && *end != ';' && *end != ' ' && *end != '\t'))
                                        return MHD_CONTENT_READER_END_WITH_ERROR;
                                b->ch = b->left ? CH_DATA : CH_TRAILER;
                                break;
                        case CH_DATA:
                                n = take_data(b, out, max, true);
                                if (n <= 0)
                                        return MHD_CONTENT_READER_END_WITH_ERROR;
                                if (b->left == 0)
                                        b->ch = CH_DATA_END;
                                return n;
                        case CH_DATA_END:
                                if (!(line = take_line(b)) || line[0])
                                        return MHD_CONTENT_READER_END_WITH_ERROR;
                                b->ch = CH_SIZE;
                                break;
                        case CH_TRAILER: /* trailers are dropped */
                                if (!(line = take_line(b)))
                                        return MHD_CONTENT_READER_END_WITH_ERROR;
                                if (!line[0])
                                        b->ch = CH_DONE;
                                break;
                        case CH_DONE:
                                return MHD_CONTENT_READER_END_OF_STREAM;
                        }
                }
        }
        return MHD_CONTENT_READER_END_WITH_ERROR;
}

/* The container's end closed and the slot given back, once: as soon as
 * the body's end (or its error) is handed to MHD, before the client can
 * see it, so a client's next request finds the slot free. */
static void body_done(struct pbody *b)
{
        if (b->done)
                return;
        b->done = true;
        close(b->fd);
        slot_give(b->user);
}

static ssize_t body_read(void *cls, uint64_t pos, char *out, size_t max)
{
        struct pbody *b = cls;
        ssize_t n;

        (void)pos;
        n = body_read_one(b, out, max);
        if (n < 0 || (b->mode == BODY_LENGTH && b->left == 0))
                body_done(b);
        return n;
}

static void body_free(void *cls)
{
        struct pbody *b = cls;

        body_done(b);
        free(b);
}

/* The container's headers (checked, each "name\0 value\0\n") on resp: the
 * end-to-end ones, and its Upgrade on a 101. */
static void add_answer_headers(struct MHD_Response *resp, char *line, char *end, bool upgrade)
{
        for (char *l = line; l < end;) {
                char *v = l + strlen(l) + 1, *after;
                size_t vl;
                while (*v == ' ' || *v == '\t')
                        v++;
                after = v + strlen(v) + 2; /* past the "\r\n" cut to "\0\n" */
                vl = strlen(v);
                while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
                        v[--vl] = '\0';
                if (upgrade && strcasecmp(l, "Upgrade") == 0)
                        (void)MHD_add_response_header(resp, l, v);
                else if (!hop_by_hop(l) && strcasecmp(l, "Date") != 0)
                        (void)MHD_add_response_header(resp, l, v);
                l = after < end ? after : end;
        }
}

/* ---- upgraded connections ---- */

struct relay_buf {
        char buf[RELAY_BUF];
        size_t off, len;
        int64_t since; /* ms: when its bytes last moved (the deadline of a side that does not read) */
};

struct relay {
        int pfd; /* the container's end */
        int cfd; /* the client's (MHD's: TLS behind a socket pair) */
        struct MHD_UpgradeResponseHandle *urh;
        char user[65];
        struct relay_buf up, down; /* client to container, container to client */
        int refs;                  /* relay_lock */
        bool started;              /* relay_lock: relay_start ran, the slot and pfd are the thread's */
};

static pthread_mutex_t relay_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t quit_once = PTHREAD_ONCE_INIT;
static int quit_pipe[2] = {-1, -1}; /* readable once e2b_proxy_stop ran: every relay ends */

static void quit_init(void)
{
        if (pipe2(quit_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
                quit_pipe[0] = quit_pipe[1] = -1;
}

void e2b_proxy_stop(void)
{
        e2b_envd_watchers_stop();
        pthread_once(&quit_once, quit_init);
        if (quit_pipe[1] >= 0)
                (void)!write(quit_pipe[1], "q", 1);
}

static void relay_put(struct relay *r)
{
        int refs;

        pthread_mutex_lock(&relay_lock);
        refs = --r->refs;
        pthread_mutex_unlock(&relay_lock);
        if (refs == 0)
                free(r);
}

/* The end: the container's side closed, the slot back, then the client's
 * closed through MHD (the last use of MHD; MHD_stop_daemon waits for it). */
static void relay_finish(struct relay *r)
{
        close(r->pfd);
        slot_give(r->user);
        (void)MHD_upgrade_action(r->urh, MHD_UPGRADE_ACTION_CLOSE);
        relay_put(r);
}

/* Read into b when it is empty and from is readable: 1 bytes or nothing
 * yet, 0 the end, -1 an error. */
static int relay_read(int from, short revents, struct relay_buf *b, int64_t now)
{
        ssize_t n;

        if (b->len || !(revents & (POLLIN | POLLHUP | POLLERR)))
                return 1;
        n = recv(from, b->buf, sizeof(b->buf), 0);
        if (n < 0)
                return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 1 : -1;
        if (n == 0)
                return 0;
        b->off = 0;
        b->len = (size_t)n;
        b->since = now;
        return 1;
}

/* Write what b holds to to when it is writable: 0 or -1 an error. */
static int relay_write(int to, short revents, struct relay_buf *b, int64_t now)
{
        ssize_t n;

        if (!b->len || !(revents & (POLLOUT | POLLHUP | POLLERR)))
                return 0;
        n = send(to, b->buf + b->off, b->len, MSG_NOSIGNAL);
        if (n < 0)
                return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        b->off += (size_t)n;
        b->len -= (size_t)n;
        b->since = now;
        return 0;
}

static void *relay_main(void *arg)
{
        struct relay *r = arg;
        bool up_end = false, down_end = false;
        int quit;
        int64_t idle_ms = (int64_t)PROXY_IDLE_S * 1000, last = sbx_now_ms();

        (void)fcntl(r->pfd, F_SETFL, fcntl(r->pfd, F_GETFL) | O_NONBLOCK);
        (void)fcntl(r->cfd, F_SETFL, fcntl(r->cfd, F_GETFL) | O_NONBLOCK);
        r->up.since = r->down.since = last;
        pthread_once(&quit_once, quit_init);
        quit = quit_pipe[0];
        /* either side's end, once what it sent is delivered, ends both */
        while (!(up_end && !r->up.len) && !(down_end && !r->down.len)) {
                struct pollfd p[3] = {{.fd = r->cfd}, {.fd = r->pfd}, {.fd = quit, .events = POLLIN}};
                int64_t now = sbx_now_ms(), due = last + idle_ms, wait;
                int n;

                if (r->up.len && r->up.since + idle_ms < due)
                        due = r->up.since + idle_ms;
                if (r->down.len && r->down.since + idle_ms < due)
                        due = r->down.since + idle_ms;
                wait = due - now;
                if (wait <= 0)
                        break; /* nothing moved, or a side did not read, for PROXY_IDLE_S */
                p[0].events = (short)((!up_end && !r->up.len ? POLLIN : 0) | (r->down.len ? POLLOUT : 0));
                p[1].events = (short)((!down_end && !r->down.len ? POLLIN : 0) | (r->up.len ? POLLOUT : 0));
                /* a side that has ended and waits for nothing is not watched (its hang-up would spin) */
                if (up_end && !r->down.len)
                        p[0].fd = -1;
                if (down_end && !r->up.len)
                        p[1].fd = -1;
                n = poll(p, 3, (int)wait);
                if (n < 0 && errno != EINTR)
                        break;
                if (n <= 0)
                        continue;
                if (p[2].revents) /* the daemon stops */
                        break;
                if ((p[0].revents | p[1].revents) & (POLLERR | POLLNVAL))
                        break;
                /* hung up while its buffer was full: it sends nothing more */
                if ((p[0].revents & POLLHUP) && !(p[0].events & POLLIN))
                        up_end = true;
                if ((p[1].revents & POLLHUP) && !(p[1].events & POLLIN))
                        down_end = true;
                now = sbx_now_ms();
                last = now;
                if (relay_write(r->pfd, p[1].revents, &r->up, now) < 0 ||
                    relay_write(r->cfd, p[0].revents, &r->down, now) < 0)
                        break;
                if (!up_end && (p[0].events & POLLIN)) {
                        int k = relay_read(r->cfd, p[0].revents, &r->up, now);
                        if (k < 0)
                                break;
                        up_end = k == 0;
                }
                if (!down_end && (p[1].events & POLLIN)) {
                        int k = relay_read(r->pfd, p[1].revents, &r->down, now);
                        if (k < 0)
                                break;
                        down_end = k == 0;
                }
        }
        relay_finish(r);
        return NULL;
}

/* MHD's upgrade handler, on the connection's thread once the 101 is out:
 * the bytes already read both ways first, then the relay's thread. */
static void relay_start(void *cls, struct MHD_Connection *conn, void *req_cls, const char *extra_in,
                        size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
        struct relay *r = cls;
        pthread_attr_t attr;
        pthread_t t;
        int e;

        (void)conn;
        (void)req_cls;
        r->cfd = sock;
        r->urh = urh;
        pthread_mutex_lock(&relay_lock);
        r->started = true;
        r->refs++; /* the thread's */
        pthread_mutex_unlock(&relay_lock);
        /* the container's end still blocks with its PROXY_IDLE_S timeouts */
        if (extra_in_size && write_all(r->pfd, extra_in, extra_in_size) < 0) {
                relay_finish(r);
                return;
        }
        if (pthread_attr_init(&attr) != 0) {
                relay_finish(r);
                return;
        }
        (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        (void)pthread_attr_setstacksize(&attr, 256 * 1024);
        e = pthread_create(&t, &attr, relay_main, r);
        pthread_attr_destroy(&attr);
        if (e != 0) {
                log_ctx(LOG_LEVEL_WARN, r->user, NULL, NULL, "e2b: getHost: no relay thread: %s", strerror(e));
                relay_finish(r);
                return;
        }
        (void)pthread_setname_np(t, "sbx-e2b-relay");
}

/* The 101 answer: b's connection becomes the relay's (q->relay until MHD
 * calls relay_start), b freed. The headers are checked already. */
static int upgrade_respond(struct e2b_req *q, struct MHD_Connection *conn, struct pbody *b, char *line, char *end)
{
        struct relay *r = calloc(1, sizeof(*r));
        struct MHD_Response *resp;
        int ret;

        if (!r) {
                body_free(b);
                return MHD_NO;
        }
        r->pfd = b->fd;
        r->cfd = -1;
        sbx_strlcpy(r->user, b->user, sizeof(r->user));
        r->refs = 1; /* q's */
        /* what the container sent behind its 101 (at most PROXY_HEAD_MAX = RELAY_BUF) */
        r->down.len = b->len - b->off;
        memcpy(r->down.buf, b->buf + b->off, r->down.len);
        b->done = true; /* fd and slot are r's */
        q->relay = r;
        resp = MHD_create_response_for_upgrade(relay_start, r);
        if (!resp) {
                body_free(b);
                return MHD_NO;
        }
        add_answer_headers(resp, line, end, true);
        body_free(b);
        ret = MHD_queue_response(conn, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
        MHD_destroy_response(resp);
        metrics_http_status(MHD_HTTP_SWITCHING_PROTOCOLS);
        return ret;
}

/* The status line and headers, read into b->buf; 0 with b->off past them,
 * -ENODATA when the container said nothing (closed at once), -ETIMEDOUT,
 * -EPROTO when it is not an HTTP/1.x answer within PROXY_HEAD_MAX. */
static int read_head(struct pbody *b, char **ret_end)
{
        for (;;) {
                char *end = b->len >= 4 ? memmem(b->buf, b->len, "\r\n\r\n", 4) : NULL;
                ssize_t n;
                if (end) {
                        *ret_end = end;
                        return 0;
                }
                if (b->len == sizeof(b->buf))
                        return -EPROTO;
                do
                        n = recv(b->fd, b->buf + b->len, sizeof(b->buf) - b->len, 0);
                while (n < 0 && errno == EINTR);
                if (n < 0)
                        return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -EIO;
                if (n == 0)
                        return b->len ? -EPROTO : -ENODATA;
                b->len += (size_t)n;
        }
}

int e2b_proxy_respond(struct e2b_req *q, struct MHD_Connection *conn)
{
        struct pbody *b;
        struct MHD_Response *resp;
        char *end, *line, *next, *status_end;
        uint64_t length = 0;
        bool has_length = false, chunked = false, has_upgrade = false;
        long status;
        int r;

        if (q->req_chunked && !q->pfail && write_all(q->pfd, "0\r\n\r\n", 5) < 0)
                q->pfail = true;
        b = calloc(1, sizeof(*b));
        if (!b)
                return MHD_NO;
        b->fd = q->pfd;
        q->pfd = -1;
        sbx_strlcpy(b->user, q->tok.user, sizeof(b->user));
        q->slot = false; /* b's now (body_free) */
        r = read_head(b, &end);
        if (r < 0) {
                body_free(b);
                if (r == -ENODATA)
                        return e2b_reply_error(conn, 502,
                                               "nothing answered on port %d of sandbox %s: connection refused or "
                                               "closed; make sure a server listens on 127.0.0.1 or 0.0.0.0:%d there",
                                               q->proxy_port, q->sandbox, q->proxy_port);
                if (r == -ETIMEDOUT)
                        return e2b_reply_error(conn, 504, "port %d of sandbox %s did not answer within %d s",
                                               q->proxy_port, q->sandbox, PROXY_IDLE_S);
                return e2b_reply_error(conn, 502, "port %d of sandbox %s did not answer with HTTP/1.x", q->proxy_port,
                                       q->sandbox);
        }
again:
        *end = '\0';
        b->off = (size_t)(end - b->buf) + 4;
        /* "HTTP/1.x SSS reason" */
        if (strncmp(b->buf, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)b->buf[7]) || b->buf[8] != ' ')
                goto bad;
        status = strtol(b->buf + 9, &status_end, 10);
        if (status < 100 || status > 599 || status_end != b->buf + 12 ||
            (*status_end && *status_end != ' ' && *status_end != '\r'))
                goto bad;
        if (status == 101 && !q->upgrade) /* none was asked for (Connection: close) */
                goto bad;
        if (status < 200 && status != 101) { /* an interim answer (103 Early Hints): the final one follows */
                memmove(b->buf, b->buf + b->off, b->len - b->off);
                b->len -= b->off;
                b->off = 0;
                if (read_head(b, &end) < 0)
                        goto bad;
                goto again;
        }
        line = strstr(b->buf, "\r\n");
        line = line ? line + 2 : end;
        /* the headers first checked, then the response made */
        for (char *l = line; l < end; l = next) {
                char *crlf = strstr(l, "\r\n"), *colon;
                next = crlf ? crlf + 2 : end;
                if (crlf)
                        *crlf = '\0';
                colon = strchr(l, ':');
                if (!colon || colon == l)
                        goto bad;
                for (char *k = l; k < colon; k++)
                        if (!token_char(*k))
                                goto bad;
                *colon = '\0';
                if (!value_ok(colon + 1))
                        goto bad;
                if (strcasecmp(l, "Content-Length") == 0) {
                        char *v = colon + 1, *e;
                        while (*v == ' ' || *v == '\t')
                                v++;
                        errno = 0;
                        uint64_t x = strtoull(v, &e, 10);
                        while (*e == ' ' || *e == '\t')
                                e++;
                        if (!isdigit((unsigned char)*v) || errno || *e || (has_length && x != length))
                                goto bad;
                        length = x;
                        has_length = true;
                } else if (strcasecmp(l, "Upgrade") == 0) {
                        has_upgrade = true;
                } else if (strcasecmp(l, "Transfer-Encoding") == 0) {
                        chunked = strcasestr(colon + 1, "chunked") != NULL;
                        if (!chunked)
                                goto bad; /* another coding cannot be framed */
                }
        }
        if (status == 101) {
                if (!has_upgrade) /* MHD would refuse it, and the client not know what it got */
                        goto bad;
                return upgrade_respond(q, conn, b, line, end);
        }
        if (q->head_request || status == 204 || status == 304 || status < 200)
                b->mode = BODY_NONE;
        else if (chunked)
                b->mode = BODY_CHUNKED;
        else if (has_length)
                b->mode = BODY_LENGTH, b->left = length;
        else
                b->mode = BODY_CLOSE;
        resp = MHD_create_response_from_callback(b->mode == BODY_LENGTH ? length
                                                 : b->mode == BODY_NONE ? (q->head_request && has_length ? length : 0)
                                                                        : MHD_SIZE_UNKNOWN,
                                                 PROXY_BLOCK, body_read, b, body_free);
        if (!resp) {
                body_free(b);
                return MHD_NO;
        }
        add_answer_headers(resp, line, end, false);
        (void)MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, PROXY_IDLE_S);
        r = MHD_queue_response(conn, (unsigned)status, resp);
        MHD_destroy_response(resp);
        metrics_http_status((int)status);
        return r;
bad:
        body_free(b);
        return e2b_reply_error(conn, 502, "port %d of sandbox %s answered with a malformed HTTP head", q->proxy_port,
                               q->sandbox);
}

void e2b_proxy_free(struct e2b_req *q)
{
        if (q->proxy_port && q->pfd >= 0)
                close(q->pfd);
        if (q->slot)
                slot_give(q->tok.user);
        if (q->relay) {
                bool started;
                pthread_mutex_lock(&relay_lock);
                started = q->relay->started;
                pthread_mutex_unlock(&relay_lock);
                if (!started) { /* the 101 never went out: the container's end and the slot are still here */
                        close(q->relay->pfd);
                        slot_give(q->relay->user);
                }
                relay_put(q->relay);
                q->relay = NULL;
        }
}
