/* docker_exec.c — exec instances: create, inspect, the attached (hijacked)
 * stream with its demultiplexer, and docker_exec_run on top of them.
 *
 * Why a hand-written AF_UNIX connection and not libcurl for the attach:
 * POST /exec/{id}/start with "Connection: Upgrade / Upgrade: tcp" turns the
 * HTTP connection into a raw bidirectional pipe (101 UPGRADED). libcurl has
 * no API for a hijacked HTTP/1.1 connection; CONNECT_ONLY would leave us
 * writing the request and parsing the reply by hand anyway, while hiding the
 * fd's flags and giving no shutdown(SHUT_WR) for stdin EOF. A plain socket
 * (SOCK_CLOEXEC | SOCK_NONBLOCK) makes every step explicit: we write the
 * request, read until the blank line, keep whatever stream bytes arrived in
 * the same read in our buffer, and poll(2) with deadlines for everything, so
 * nothing here blocks past its timeout. The request and reply are small and
 * fixed; an error reply (404/409) is read with Content-Length or chunked
 * framing and turned into the usual sbx_error.
 *
 * A struct docker_stream has a single owner; no locks. The exec create /
 * inspect calls go through the shared per-thread libcurl handle. */
#include "docker_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandboxd/log.h"

#define STREAM_BUF_SIZE (64u * 1024)
#define STREAM_MAX_HEADER (16u * 1024)
#define EXEC_OUTPUT_DEFAULT (1u << 20)

struct docker_stream {
        int fd;
        bool eof;
        size_t pos, len; /* unread bytes are buf[pos..len) */
        struct docker_demux demux;
        uint8_t buf[STREAM_BUF_SIZE];
};

/* ---- demultiplexer ---- */

void docker_demux_init(struct docker_demux *m)
{
        memset(m, 0, sizeof(*m));
}

bool docker_demux_idle(const struct docker_demux *m)
{
        return m->hdr_len == 0 && m->remaining == 0;
}

ssize_t docker_demux_next(struct docker_demux *m, const void *data, size_t len, size_t max_payload,
                          enum docker_stream_kind *ret_kind, const void **ret_payload, size_t *ret_payload_len)
{
        const uint8_t *p = data;
        size_t used = 0;

        *ret_payload = NULL;
        *ret_payload_len = 0;
        /* Skip empty frames and collect the header, which may itself arrive
         * split over several reads. */
        while (m->remaining == 0) {
                size_t want = 8 - m->hdr_len, take = len - used < want ? len - used : want;

                memcpy(m->hdr + m->hdr_len, p + used, take);
                m->hdr_len += take;
                used += take;
                if (m->hdr_len < 8)
                        return (ssize_t)used; /* need more bytes */
                if (m->hdr[0] > 3 || m->hdr[1] || m->hdr[2] || m->hdr[3])
                        return -EPROTO;
                /* 0 (stdin) is never sent back by the engine; 3 is the
                 * engine's own "systemerr" and belongs with stderr */
                m->kind = m->hdr[0] == 2 || m->hdr[0] == 3 ? DOCKER_STREAM_STDERR : DOCKER_STREAM_STDOUT;
                m->remaining =
                        (size_t)m->hdr[4] << 24 | (size_t)m->hdr[5] << 16 | (size_t)m->hdr[6] << 8 | (size_t)m->hdr[7];
                m->hdr_len = 0;
                if (used == len)
                        return (ssize_t)used;
        }
        {
                size_t n = len - used;
                if (n > m->remaining)
                        n = m->remaining;
                if (n > max_payload)
                        n = max_payload;
                *ret_kind = m->kind;
                *ret_payload = p + used;
                *ret_payload_len = n;
                m->remaining -= n;
                used += n;
        }
        return (ssize_t)used;
}

/* ---- exec create / inspect ---- */

int docker_exec_create(struct docker *d, const char *container_id, const struct docker_exec_spec *spec,
                       char ret_exec_id[65], struct sbx_error *err)
{
        _cleanup_free_ char *body = NULL, *path = NULL, *eid = NULL;
        struct docker_reply rep;
        cJSON *root, *j;
        const char *id;
        int r;

        if (!container_id || !*container_id || !spec || !spec->cmd || !spec->cmd[0])
                return sbx_error_set(err, -EINVAL, 0, "exec needs a container and a command");
        root = cJSON_CreateObject();
        if (root) {
                cJSON *cmd = cJSON_AddArrayToObject(root, "Cmd");
                for (size_t i = 0; cmd && spec->cmd[i]; i++)
                        cJSON_AddItemToArray(cmd, cJSON_CreateString(spec->cmd[i]));
                if (spec->env) {
                        cJSON *env = cJSON_AddArrayToObject(root, "Env");
                        for (size_t i = 0; env && spec->env[i]; i++)
                                cJSON_AddItemToArray(env, cJSON_CreateString(spec->env[i]));
                }
                if (spec->workdir && *spec->workdir)
                        cJSON_AddStringToObject(root, "WorkingDir", spec->workdir);
                if (spec->user && *spec->user)
                        cJSON_AddStringToObject(root, "User", spec->user);
                cJSON_AddBoolToObject(root, "AttachStdin", spec->attach_stdin);
                cJSON_AddBoolToObject(root, "AttachStdout", true);
                cJSON_AddBoolToObject(root, "AttachStderr", true);
                cJSON_AddBoolToObject(root, "Tty", false);
                body = cJSON_PrintUnformatted(root);
                cJSON_Delete(root);
        }
        eid = docker_path_escape(container_id, false);
        if (!body || !eid || asprintf(&path, "/containers/%s/exec", eid) < 0)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");

        r = docker_http(d, "POST", path, "application/json", body, strlen(body), 0, 0, &rep, err);
        if (r < 0)
                return r;
        if (rep.status != 201 && rep.status != 200) {
                r = docker_reply_error(&rep, false, err);
                docker_reply_done(&rep);
                return r;
        }
        j = cJSON_ParseWithLength(rep.body, rep.len);
        id = docker_json_str(j, "Id");
        if (id && strlen(id) == 64)
                memcpy(ret_exec_id, id, 65);
        else
                r = sbx_error_set(err, -EPROTO, (int)rep.status, "exec create reply has no Id");
        cJSON_Delete(j);
        docker_reply_done(&rep);
        return r;
}

int docker_exec_inspect(struct docker *d, const char *exec_id, struct docker_exec_info *ret, struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL, *eid = NULL;
        struct docker_exec_info info;
        struct docker_reply rep;
        const cJSON *code;
        cJSON *j;
        int r;

        if (!exec_id || !*exec_id)
                return sbx_error_set(err, -EINVAL, 0, "missing exec id");
        eid = docker_path_escape(exec_id, false);
        if (!eid || asprintf(&path, "/exec/%s/json", eid) < 0)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        r = docker_get_ok(d, path, 0, 0, &rep, err);
        if (r < 0)
                return r;
        j = cJSON_ParseWithLength(rep.body, rep.len);
        docker_reply_done(&rep);
        if (!cJSON_IsObject(j)) {
                cJSON_Delete(j);
                return sbx_error_set(err, -EPROTO, 200, "unparseable exec inspect reply");
        }
        info.running = docker_json_bool(j, "Running");
        code = cJSON_GetObjectItemCaseSensitive(j, "ExitCode");
        info.exit_code = info.running || !cJSON_IsNumber(code) ? -1 : code->valueint;
        info.pid = (int)docker_json_i64(j, "Pid", 0);
        cJSON_Delete(j);
        *ret = info;
        return 0;
}

/* ---- socket helpers (all bounded by an absolute monotonic deadline in ms; -1 = none) ---- */

static int remaining_ms(int64_t deadline)
{
        int64_t left;

        if (deadline < 0)
                return -1;
        left = deadline - sbx_now_ms();
        return left <= 0 ? 0 : left > 1000000 ? 1000000 : (int)left;
}

/* Wait for `events` on fd. 0 when ready, -ETIMEDOUT, or -errno. */
static int wait_fd(int fd, short events, int64_t deadline)
{
        for (;;) {
                struct pollfd p = {.fd = fd, .events = events};
                int n = poll(&p, 1, remaining_ms(deadline));
                if (n > 0)
                        return 0; /* including POLLERR/POLLHUP: the next syscall reports it */
                if (n == 0)
                        return -ETIMEDOUT;
                if (errno != EINTR)
                        return -errno;
        }
}

static int send_all(int fd, const void *buf, size_t len, int64_t deadline)
{
        const uint8_t *p = buf;

        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
                if (n >= 0) {
                        p += n;
                        len -= (size_t)n;
                        continue;
                }
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK)
                        return -errno;
                n = wait_fd(fd, POLLOUT, deadline);
                if (n < 0)
                        return (int)n;
        }
        return 0;
}

/* recv once into buf, waiting up to the deadline. >0 bytes, 0 EOF, -errno. */
static ssize_t recv_some(int fd, void *buf, size_t cap, int64_t deadline)
{
        for (;;) {
                ssize_t n = recv(fd, buf, cap, 0);
                if (n >= 0)
                        return n;
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK)
                        return -errno;
                n = wait_fd(fd, POLLIN, deadline);
                if (n < 0)
                        return n;
        }
}

static int unix_connect(struct docker *d, int64_t deadline, int *ret_fd, struct sbx_error *err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        _cleanup_close_ int fd = -1;

        if (!sbx_strlcpy(sa.sun_path, d->socket_path, sizeof(sa.sun_path)))
                return sbx_error_set(err, -ENAMETOOLONG, 0, "Docker socket path too long: %s", d->socket_path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return sbx_error_set(err, -errno, 0, "socket: %s", strerror(errno));
        /* A non-blocking AF_UNIX connect never goes "in progress": it either
         * succeeds, fails, or says EAGAIN when the listen backlog is full. */
        while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                if (errno == EINTR)
                        continue;
                if (errno == EAGAIN && remaining_ms(deadline) != 0) {
                        sbx_sleep_ms(5);
                        continue;
                }
                if (errno == EAGAIN)
                        return sbx_error_set(err, -ETIMEDOUT, 0, "Docker at %s: connect timed out (backlog full)",
                                             d->socket_path);
                return docker_unreachable(d, errno, err);
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* Decode a chunked body in place; returns the decoded length (stops at the
 * first malformed or incomplete chunk — good enough for an error message). */
static size_t dechunk(char *b, size_t len)
{
        size_t in = 0, out = 0;

        while (in < len) {
                char *end;
                unsigned long sz = strtoul(b + in, &end, 16);
                char *crlf = memmem(b + in, len - in, "\r\n", 2);
                if (!crlf || end == b + in || sz == 0)
                        break;
                in = (size_t)(crlf - b) + 2;
                if (sz > len - in)
                        sz = len - in;
                memmove(b + out, b + in, sz);
                out += sz;
                in += sz + 2;
        }
        return out;
}

static const char *find_header(const char *hdrs, const char *name)
{
        size_t nl = strlen(name);

        for (const char *p = strstr(hdrs, "\r\n"); p; p = strstr(p + 2, "\r\n"))
                if (strncasecmp(p + 2, name, nl) == 0 && p[2 + nl] == ':')
                        return p + 2 + nl + 1;
        return NULL;
}

/* Read the rest of an error reply (bounded) and convert it into err. */
static int attach_error(struct docker_stream *s, long status, size_t hdr_end, int64_t deadline, struct sbx_error *err)
{
        const char *cl = find_header((const char *)s->buf, "Content-Length");
        const char *te = find_header((const char *)s->buf, "Transfer-Encoding");
        bool chunked = te && strstr(te, "chunked");
        size_t want = cl ? strtoul(cl, NULL, 10) : SIZE_MAX;
        struct docker_reply rep = {.status = status};
        size_t cap = sizeof(s->buf) - 1;

        while (s->len - hdr_end < want && s->len < cap) {
                ssize_t n;
                if (chunked && memmem(s->buf + hdr_end, s->len - hdr_end, "\r\n0\r\n", 5))
                        break;
                n = recv_some(s->fd, s->buf + s->len, cap - s->len, deadline);
                if (n <= 0)
                        break;
                s->len += (size_t)n;
        }
        rep.body = (char *)s->buf + hdr_end;
        rep.len = s->len - hdr_end;
        if (want < rep.len)
                rep.len = want;
        if (chunked)
                rep.len = dechunk(rep.body, rep.len);
        rep.body[rep.len] = '\0';
        return docker_reply_error(&rep, false, err);
}

int docker_exec_attach(struct docker *d, const char *exec_id, struct docker_stream **ret_stream, struct sbx_error *err)
{
        static const char body[] = "{\"Detach\":false,\"Tty\":false}";
        int64_t deadline = sbx_now_ms() + d->timeout_ms;
        _cleanup_free_ char *eid = NULL, *req = NULL;
        struct docker_stream *s;
        char prefix[24], *hdr_end = NULL;
        long status = 0;
        int r;

        if (!exec_id || !*exec_id)
                return sbx_error_set(err, -EINVAL, 0, "missing exec id");
        eid = docker_path_escape(exec_id, false);
        docker_version_prefix(d, prefix);
        if (!eid || asprintf(&req,
                             "POST %s/exec/%s/start HTTP/1.1\r\n"
                             "Host: localhost\r\n"
                             "User-Agent: sandboxd/" SBX_VERSION "\r\n"
                             "Content-Type: application/json\r\n"
                             "Content-Length: %zu\r\n"
                             "Connection: Upgrade\r\n"
                             "Upgrade: tcp\r\n"
                             "\r\n%s",
                             prefix, eid, sizeof(body) - 1, body) < 0)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");

        s = malloc(sizeof(*s));
        if (!s)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        s->fd = -1;
        s->eof = false;
        s->pos = s->len = 0;
        docker_demux_init(&s->demux);

        r = unix_connect(d, deadline, &s->fd, err);
        if (r < 0)
                goto fail;
        r = send_all(s->fd, req, strlen(req), deadline);
        if (r < 0) {
                r = r == -ETIMEDOUT
                            ? sbx_error_set(err, r, 0, "Docker at %s: exec start request timed out", d->socket_path)
                            : sbx_error_set(err, r, 0, "Docker at %s: sending exec start: %s", d->socket_path,
                                            strerror(-r));
                goto fail;
        }

        /* Headers, then possibly the first frames, all in the same reads. */
        while (!hdr_end) {
                ssize_t n;
                if (s->len >= STREAM_MAX_HEADER) {
                        r = sbx_error_set(err, -EPROTO, 0, "exec start: reply headers too long");
                        goto fail;
                }
                n = recv_some(s->fd, s->buf + s->len, STREAM_MAX_HEADER - s->len, deadline);
                if (n <= 0) {
                        r = n == 0 ? sbx_error_set(err, -EPROTO, 0, "exec start: Docker closed the connection")
                            : n == -ETIMEDOUT ? sbx_error_set(err, -ETIMEDOUT, 0,
                                                              "Docker at %s did not answer exec start within %ld ms",
                                                              d->socket_path, d->timeout_ms)
                                              : sbx_error_set(err, (int)n, 0, "exec start: %s", strerror((int)-n));
                        goto fail;
                }
                s->len += (size_t)n;
                hdr_end = memmem(s->buf, s->len, "\r\n\r\n", 4);
        }
        *hdr_end = '\0'; /* headers become a C string; the stream starts after the blank line */
        if (sscanf((const char *)s->buf, "HTTP/%*d.%*d %ld", &status) != 1) {
                r = sbx_error_set(err, -EPROTO, 0, "exec start: malformed status line");
                goto fail;
        }
        s->pos = (size_t)(hdr_end - (char *)s->buf) + 4;
        if (status != 101 && status != 200) {
                r = attach_error(s, status, s->pos, deadline, err);
                goto fail;
        }
        log_debug("docker exec %.12s attached (HTTP %ld, %zu stream bytes early)", exec_id, status, s->len - s->pos);
        *ret_stream = s;
        return 0;
fail:
        docker_stream_free(s);
        return r;
}

/* ---- the stream ---- */

int docker_stream_fd(struct docker_stream *s)
{
        return s ? s->fd : -1;
}

ssize_t docker_stream_read(struct docker_stream *s, enum docker_stream_kind *ret_kind, void *buf, size_t cap,
                           int timeout_ms)
{
        int64_t deadline = timeout_ms < 0 ? -1 : sbx_now_ms() + timeout_ms;

        if (!s || !buf || cap == 0)
                return -EINVAL;
        for (;;) {
                ssize_t n;

                while (s->pos < s->len) {
                        const void *payload;
                        size_t plen;
                        n = docker_demux_next(&s->demux, s->buf + s->pos, s->len - s->pos, cap, ret_kind, &payload,
                                              &plen);
                        if (n < 0)
                                return n;
                        s->pos += (size_t)n;
                        if (plen > 0) {
                                memcpy(buf, payload, plen);
                                return (ssize_t)plen;
                        }
                }
                if (s->eof)
                        return 0; /* a frame cut short by EOF is simply over */
                s->pos = s->len = 0;
                n = recv_some(s->fd, s->buf, sizeof(s->buf), deadline);
                if (n < 0)
                        return n;
                if (n == 0)
                        s->eof = true;
                s->len = (size_t)n;
        }
}

int docker_stream_write(struct docker_stream *s, const void *buf, size_t len, int timeout_ms)
{
        if (!s || (!buf && len))
                return -EINVAL;
        return send_all(s->fd, buf, len, timeout_ms < 0 ? -1 : sbx_now_ms() + timeout_ms);
}

ssize_t docker_stream_write_some(struct docker_stream *s, const void *buf, size_t len)
{
        if (!s || (!buf && len))
                return -EINVAL;
        for (;;) {
                ssize_t n = send(s->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n >= 0)
                        return n;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                        return 0;
                if (errno != EINTR)
                        return -errno;
        }
}

int docker_stream_wait(struct docker_stream *s, bool writable, int timeout_ms)
{
        if (!s)
                return -EINVAL;
        if (s->pos < s->len || s->eof)
                return 0;
        return wait_fd(s->fd, (short)(POLLIN | (writable ? POLLOUT : 0)),
                       timeout_ms < 0 ? -1 : sbx_now_ms() + timeout_ms);
}

int docker_stream_close_write(struct docker_stream *s)
{
        if (!s)
                return -EINVAL;
        return shutdown(s->fd, SHUT_WR) < 0 ? -errno : 0;
}

void docker_stream_free(struct docker_stream *s)
{
        if (!s)
                return;
        closep(&s->fd);
        free(s);
}

/* ---- exec run ---- */

struct out_buf {
        char *data;
        size_t len, cap, max;
        bool truncated;
};

static int out_append(struct out_buf *b, const void *p, size_t n)
{
        if (b->len + n > b->max) {
                b->truncated = true;
                n = b->max - b->len;
        }
        return docker_buf_append(&b->data, &b->len, &b->cap, p, n, 256);
}

/* Drain everything the stream has without waiting. 1 at EOF, 0 when it
 * would block, -errno on error. */
static int drain(struct docker_stream *s, struct out_buf *out, struct out_buf *errb, int timeout_ms)
{
        char buf[16384];

        for (;;) {
                enum docker_stream_kind kind;
                ssize_t n = docker_stream_read(s, &kind, buf, sizeof(buf), timeout_ms);
                if (n == -ETIMEDOUT)
                        return 0;
                if (n < 0)
                        return (int)n;
                if (n == 0)
                        return 1;
                if (out_append(kind == DOCKER_STREAM_STDERR ? errb : out, buf, (size_t)n) < 0)
                        return -ENOMEM;
                timeout_ms = 0; /* only the first read may wait */
        }
}

void docker_exec_result_done(struct docker_exec_result *r)
{
        if (!r)
                return;
        free(r->out);
        free(r->err);
        r->out = r->err = NULL;
        r->out_len = r->err_len = 0;
}

int docker_exec_run(struct docker *d, const char *container_id, const struct docker_exec_spec *spec,
                    const void *stdin_data, size_t stdin_len, size_t max_output, int timeout_ms,
                    struct docker_exec_result *ret, struct sbx_error *err)
{
        int64_t deadline = timeout_ms < 0 ? -1 : sbx_now_ms() + timeout_ms;
        size_t cap = max_output ? max_output : EXEC_OUTPUT_DEFAULT;
        struct out_buf out = {.max = cap}, errb = {.max = cap};
        struct docker_exec_spec es;
        struct docker_stream *s = NULL;
        struct docker_exec_info info;
        const uint8_t *in = stdin_data;
        size_t in_off = 0;
        bool stdin_open;
        char exec_id[65];
        int r;

        if (!spec || !ret)
                return sbx_error_set(err, -EINVAL, 0, "exec run needs a spec and a result");
        es = *spec;
        es.attach_stdin = spec->attach_stdin || (stdin_data && stdin_len > 0);
        stdin_open = es.attach_stdin;

        r = docker_exec_create(d, container_id, &es, exec_id, err);
        if (r < 0)
                return r;
        r = docker_exec_attach(d, exec_id, &s, err);
        if (r < 0)
                return r;

        for (;;) {
                struct pollfd p = {.fd = s->fd, .events = POLLIN};
                int left = remaining_ms(deadline);

                if (stdin_open && in_off == stdin_len) {
                        /* all of stdin is written: EOF lets `cat`-like programs finish */
                        if (shutdown(s->fd, SHUT_WR) < 0 && errno != ENOTCONN) {
                                r = sbx_error_set(err, -errno, 0, "exec stdin EOF: %s", strerror(errno));
                                goto out;
                        }
                        stdin_open = false;
                }
                if (!stdin_open) {
                        r = drain(s, &out, &errb, left);
                        if (r == 1)
                                break;
                        if (r < 0) {
                                r = sbx_error_set(err, r, 0, "exec stream: %s", strerror(-r));
                                goto out;
                        }
                        if (left == 0) {
                                r = sbx_error_set(err, -ETIMEDOUT, 0, "exec did not finish within %d ms", timeout_ms);
                                goto out;
                        }
                        continue;
                }

                /* stdin pending: write what the socket takes, read what arrives */
                if (s->pos < s->len)
                        left = 0; /* buffered output first */
                else
                        p.events |= POLLOUT;
                if (left != 0 && poll(&p, 1, left) < 0 && errno != EINTR) {
                        r = sbx_error_set(err, -errno, 0, "poll: %s", strerror(errno));
                        goto out;
                }
                if (p.revents & POLLOUT) {
                        ssize_t n = send(s->fd, in + in_off, stdin_len - in_off, MSG_NOSIGNAL | MSG_DONTWAIT);
                        if (n > 0)
                                in_off += (size_t)n;
                        else if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
                                in_off = stdin_len, stdin_open = false; /* the process is gone; read what it said */
                        else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                                r = sbx_error_set(err, -errno, 0, "exec stdin: %s", strerror(errno));
                                goto out;
                        }
                }
                r = drain(s, &out, &errb, 0);
                if (r < 0) {
                        r = sbx_error_set(err, r, 0, "exec stream: %s", strerror(-r));
                        goto out;
                }
                if (r == 1)
                        break; /* process gone before reading all stdin */
                if (remaining_ms(deadline) == 0) {
                        r = sbx_error_set(err, -ETIMEDOUT, 0, "exec did not finish within %d ms", timeout_ms);
                        goto out;
                }
        }

        /* The stream closes when the process exits, a moment before the
         * engine records ExitCode: ask again briefly while Running is true. */
        for (int tries = 0;; tries++) {
                r = docker_exec_inspect(d, exec_id, &info, err);
                if (r < 0)
                        goto out;
                if (!info.running)
                        break;
                if (tries >= 200 || remaining_ms(deadline) == 0) {
                        r = sbx_error_set(err, -ETIMEDOUT, 0, "exec %.12s still running after its output ended",
                                          exec_id);
                        goto out;
                }
                sbx_sleep_ms(tries < 10 ? 1 : 10);
        }

        /* empty outputs are still malloc'd, NUL-terminated strings */
        if (out_append(&out, "", 0) < 0 || out_append(&errb, "", 0) < 0) {
                r = sbx_error_set(err, -ENOMEM, 0, "out of memory");
                goto out;
        }
        ret->exit_code = info.exit_code;
        ret->out_len = out.len;
        ret->out = TAKE_PTR(out.data);
        ret->err_len = errb.len;
        ret->err = TAKE_PTR(errb.data);
        ret->truncated = out.truncated || errb.truncated;
        r = 0;
out:
        free(out.data);
        free(errb.data);
        docker_stream_free(s);
        return r;
}
