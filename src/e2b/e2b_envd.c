/* e2b_envd.c — E2B's in-sandbox daemon (envd) on the HTTPS front: /health,
 * /files, and process.Process and filesystem.Filesystem over the Connect
 * protocol's JSON encoding (unary: a JSON body; Start, server-streaming:
 * 5-byte-prefixed envelopes, then an end-of-stream envelope). Paths follow
 * E2B's conventions: relative to /home/user, which is the session's
 * /workspace (both spellings are accepted). Every call goes through the
 * API's dispatcher as the access token's user. A Start stream runs on the
 * connection's MHD thread: MHD asks for more bytes only as the client reads,
 * so a client that never reads holds one long-poll and no memory. */
#include <errno.h>
#include <gnutls/gnutls.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "e2b_internal.h"
#include "sandboxd/config.h"
#include "sandboxd/daemon.h"
#include "sandboxd/exec.h"
#include "sandboxd/files.h"
#include "sandboxd/hub_ops.h"
#include "sandboxd/http.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/metrics.h"
#include "sandboxd/utf8.h"

#define E2B_HOME "/home/user"
#define E2B_POLL_WAIT_S 10 /* a long-poll of get_execution; a keepalive event between two */

/* ---- Connect ---- */

static const char *connect_code(const char *code, int *ret_status)
{
        static const struct {
                const char *ours, *theirs;
                int status;
        } map[] = {
                {"bad_request", "invalid_argument", 400},
                {"invalid", "invalid_argument", 400},
                {"unauthorized", "unauthenticated", 401},
                {"forbidden", "permission_denied", 403},
                {"not_found", "not_found", 404},
                {"conflict", "already_exists", 409},
                {"already_finished", "failed_precondition", 400},
                {"too_large", "resource_exhausted", 429},
                {"busy", "resource_exhausted", 429},
                {"quota_exceeded", "resource_exhausted", 429},
                {"unavailable", "unavailable", 503},
        };
        for (size_t i = 0; code && i < ELEMENTSOF(map); i++)
                if (strcmp(map[i].ours, code) == 0) {
                        *ret_status = map[i].status;
                        return map[i].theirs;
                }
        *ret_status = 500;
        return "internal";
}

static cJSON *connect_error_object(const char *code, const char *msg)
{
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "code", code);
        jsonutil_add_text(o, "message", msg);
        return o;
}

static enum MHD_Result unary_error(struct MHD_Connection *conn, const char *ours, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static enum MHD_Result unary_error(struct MHD_Connection *conn, const char *ours, const char *fmt, ...)
{
        char msg[512];
        int status;
        va_list ap;
        const char *code = connect_code(ours, &status);

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        return e2b_reply_json(conn, status, connect_error_object(code, msg));
}

static enum MHD_Result unary_fronterr(struct MHD_Connection *conn, const struct fronterr *e)
{
        return unary_error(conn, e->code, "%s", e->msg);
}

/* envd's user: the SDK names it as "Authorization: Basic base64(NAME:)"
 * (commands.run({user}), files.*({user})) and /files also as ?username=.
 * sandboxd runs everything as the sandbox's one user, E2B's `user`; any
 * other name, root included, is refused with the reason (msg), never
 * quietly run as user. */
static bool user_ok(struct MHD_Connection *conn, char *msg, size_t size)
{
        const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        const char *u = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "username");
        _cleanup_free_ unsigned char *raw = NULL;
        char who[72] = "";
        size_t n = 0, k = 0;
        bool ok = true;

        if (h) {
                ok = strncasecmp(h, "Basic ", 6) == 0 && strlen(h + 6) <= 256 &&
                     base64_decode(h + 6, strlen(h + 6), &raw, &n) == 0;
                for (k = 0; ok && k < n && raw[k] != ':'; k++)
                        ok = raw[k] > 0x20 && raw[k] < 0x7f; /* printable, so it can be named back */
                if (ok) {
                        snprintf(who, sizeof(who), "%.*s", (int)(k < 64 ? k : 64), (const char *)raw);
                        ok = k == 0 || strcmp(who, E2B_USER) == 0;
                } else {
                        snprintf(who, sizeof(who), "(an Authorization header that is not Basic NAME:)");
                }
        }
        if (ok && u && *u && strcmp(u, E2B_USER) != 0) {
                snprintf(who, sizeof(who), "%.64s", u);
                ok = false;
        }
        if (!ok)
                snprintf(msg, size,
                         "user %s is not available: sandboxd runs every command and file operation as the "
                         "sandbox's own user, %s (no root)",
                         who, E2B_USER);
        return ok;
}

/* The unary request message (a JSON object, bounded before parsing). */
static cJSON *unary_body(struct e2b_req *q, struct MHD_Connection *conn, enum MHD_Result *ans)
{
        const char *type = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        struct fronterr e = {0};
        char msg[256];
        cJSON *o;

        if (!type || strncmp(type, "application/json", 16) != 0) {
                *ans = unary_error(conn, "bad_request", "Content-Type must be application/json (Connect's JSON)");
                return NULL;
        }
        if (!user_ok(conn, msg, sizeof(msg))) {
                *ans = unary_error(conn, "invalid", "%s", msg);
                return NULL;
        }
        o = e2b_parse_object(q->body, q->len, &e);
        if (!o)
                *ans = unary_fronterr(conn, &e);
        return o;
}

/* ---- paths: E2B's home is the workspace ---- */

/* path (absolute, or relative to /home/user) as a workspace path; false when it is outside. */
static bool map_path(const char *path, char *out, size_t out_size)
{
        size_t hl = strlen(E2B_HOME);

        if (!path || !*path)
                path = E2B_HOME;
        if (strncmp(path, E2B_HOME, hl) == 0 && (path[hl] == '/' || path[hl] == '\0'))
                return (size_t)snprintf(out, out_size, "/workspace%s", path + hl) < out_size;
        if (strncmp(path, "/workspace", 10) == 0 && (path[10] == '/' || path[10] == '\0'))
                return (size_t)snprintf(out, out_size, "%s", path) < out_size;
        if (path[0] == '/' && path[1] == '\0')
                return false;
        if (path[0] == '/')
                return false;
        return (size_t)snprintf(out, out_size, "/workspace/%s", path) < out_size;
}

/* A workspace path as E2B's. */
static void home_path(const char *ws, char *out, size_t out_size)
{
        if (strncmp(ws, "/workspace", 10) == 0)
                snprintf(out, out_size, E2B_HOME "%s", ws + 10);
        else
                snprintf(out, out_size, "%s", ws);
}

/* An absolute workspace path, or a Connect error queued. */
static bool message_path(struct MHD_Connection *conn, const cJSON *m, const char *key, char *out, size_t size,
                         enum MHD_Result *ans)
{
        const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, key));
        char ws[FILES_PATH_MAX];
        struct sbx_error err = {0};

        if (!p || strlen(p) >= FILES_PATH_MAX) {
                *ans = unary_error(conn, "bad_request", "%s must be a path of at most %d bytes", key,
                                   FILES_PATH_MAX - 1);
                return false;
        }
        if (!map_path(p, ws, sizeof(ws)) || files_normalize(ws, out, &err) < 0) {
                *ans = unary_error(conn, "invalid", "%s is outside the sandbox's home %s (sandboxd serves only it)", p,
                                   E2B_HOME);
                return false;
        }
        (void)size;
        return true;
}

/* ---- /health, /files ---- */

enum MHD_Result e2b_envd_health(struct e2b_req *q, struct MHD_Connection *conn)
{
        if (!e2b_session_exists(q))
                return e2b_reply_error(conn, 502, "sandbox %s not found", q->sandbox);
        return e2b_reply_raw(conn, 204, NULL, NULL, 0);
}

static bool query_path(struct e2b_req *q, struct MHD_Connection *conn, char *ws, size_t size, enum MHD_Result *ans)
{
        const char *p = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "path");
        char mapped[FILES_PATH_MAX], msg[256];
        struct sbx_error err = {0};

        if (!user_ok(conn, msg, sizeof(msg))) {
                *ans = e2b_reply_error(conn, 400, "%s", msg);
                return false;
        }
        if (!p || !*p || strlen(p) >= FILES_PATH_MAX) {
                *ans = e2b_reply_error(conn, 400, "path is required (at most %d bytes)", FILES_PATH_MAX - 1);
                return false;
        }
        if (!map_path(p, mapped, sizeof(mapped)) || files_normalize(mapped, ws, &err) < 0) {
                *ans = e2b_reply_error(conn, 400, "%.200s is outside the sandbox's home %s", p, E2B_HOME);
                return false;
        }
        (void)size;
        (void)q;
        return true;
}

enum MHD_Result e2b_envd_download(struct e2b_req *q, struct MHD_Connection *conn)
{
        char ws[FILES_PATH_MAX];
        enum MHD_Result ans = MHD_NO;
        struct fronterr e = {0};
        char *data = NULL;
        size_t len = 0;
        double offset = 0;
        size_t cap = (size_t)q->d->cfg.max_file_bytes;

        if (!query_path(q, conn, ws, sizeof(ws), &ans))
                return ans;
        if (!e2b_session_exists(q))
                return e2b_reply_error(conn, 404, "sandbox %s not found", q->sandbox);
        for (;;) {
                cJSON *params = cJSON_CreateObject(), *res = NULL;
                const char *b64;
                gnutls_datum_t in, out = {0};
                bool eof;
                char *nb;

                cJSON_AddStringToObject(params, "session", q->session);
                cJSON_AddStringToObject(params, "path", ws);
                cJSON_AddStringToObject(params, "encoding", "base64");
                cJSON_AddNumberToObject(params, "offset", offset);
                if (e2b_call(q, "read_file", params, &res, &e) < 0) {
                        free(data);
                        return e2b_reply_fronterr(conn, &e);
                }
                b64 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "content"));
                eof = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "eof"));
                in.data = (unsigned char *)(b64 ? b64 : "");
                in.size = (unsigned)strlen((const char *)in.data);
                if (in.size && gnutls_base64_decode2(&in, &out) < 0) {
                        cJSON_Delete(res);
                        free(data);
                        return e2b_reply_error(conn, 500, "cannot decode the file's content");
                }
                cJSON_Delete(res);
                if (len + out.size > cap || !(nb = realloc(data, len + out.size + 1))) {
                        gnutls_free(out.data);
                        free(data);
                        return e2b_reply_error(conn, 413, "the file is larger than limits.file_size");
                }
                data = nb;
                memcpy(data + len, out.data, out.size);
                len += out.size;
                offset += out.size;
                gnutls_free(out.data);
                if (eof || out.size == 0)
                        break;
        }
        return e2b_reply_raw(conn, 200, "application/octet-stream", data ? data : strdup(""), len);
}

static int write_one(struct e2b_req *q, const char *ws, const void *data, size_t len, cJSON *out, struct fronterr *e)
{
        gnutls_datum_t in = {(unsigned char *)data, (unsigned)len}, b64 = {0};
        cJSON *params, *res = NULL, *o;
        char home[FILES_PATH_MAX + 16];
        const char *slash;

        if (len && gnutls_base64_encode2(&in, &b64) < 0)
                return fronterr_set(e, "internal", "out of memory");
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddStringToObject(params, "path", ws);
        cJSON_AddStringToObject(params, "encoding", "base64");
        cJSON_AddStringToObject(params, "content", len ? (const char *)b64.data : "");
        gnutls_free(b64.data);
        if (e2b_call(q, "write_file", params, &res, e) < 0)
                return -1;
        cJSON_Delete(res);
        home_path(ws, home, sizeof(home));
        slash = strrchr(home, '/');
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", slash ? slash + 1 : home);
        cJSON_AddStringToObject(o, "type", "file");
        cJSON_AddStringToObject(o, "path", home);
        cJSON_AddItemToArray(out, o);
        return 0;
}

struct upload {
        struct e2b_req *q;
        const char *path; /* the query's, or NULL: each part's file name */
        char *buf;
        size_t len;
        char name[FILES_PATH_MAX];
        bool in_file, failed;
        cJSON *out;
        struct fronterr e;
};

static void upload_flush(struct upload *u)
{
        char mapped[FILES_PATH_MAX], ws[FILES_PATH_MAX];
        struct sbx_error err = {0};
        const char *p = u->path ? u->path : u->name;

        if (!u->in_file || u->failed)
                return;
        u->in_file = false;
        if (!map_path(p, mapped, sizeof(mapped)) || files_normalize(mapped, ws, &err) < 0) {
                u->failed = true;
                fronterr_set(&u->e, "invalid", "%.200s is outside the sandbox's home %s", p, E2B_HOME);
        } else if (write_one(u->q, ws, u->buf, u->len, u->out, &u->e) < 0) {
                u->failed = true;
        }
        free(u->buf);
        u->buf = NULL;
        u->len = 0;
}

static enum MHD_Result upload_part(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                                   const char *type, const char *encoding, const char *data, uint64_t off, size_t size)
{
        struct upload *u = cls;
        char *nb;

        if (u->failed || !key || strcmp(key, "file") != 0)
                return MHD_YES;
        if (off == 0) {
                upload_flush(u);
                if (!u->path && (!filename || !*filename || strlen(filename) >= sizeof(u->name))) {
                        u->failed = true;
                        fronterr_set(&u->e, "bad_request", "a file part needs a file name (its path) or ?path=");
                        return MHD_YES;
                }
                sbx_strlcpy(u->name, filename ? filename : "", sizeof(u->name));
                u->in_file = true;
        }
        if (size && (nb = realloc(u->buf, u->len + size))) {
                memcpy(nb + u->len, data, size);
                u->buf = nb;
                u->len += size;
        } else if (size) {
                u->failed = true;
                fronterr_set(&u->e, "internal", "out of memory");
        }
        return MHD_YES;
}

enum MHD_Result e2b_envd_upload(struct e2b_req *q, struct MHD_Connection *conn)
{
        const char *type = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        const char *p = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "path");
        const char *enc = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Encoding");
        struct upload u = {.q = q, .path = p && *p ? p : NULL};
        enum MHD_Result ans = MHD_NO;
        char ws[FILES_PATH_MAX], msg[256];

        if (!user_ok(conn, msg, sizeof(msg))) /* the multipart form's parts name paths of their own */
                return e2b_reply_error(conn, 400, "%s", msg);
        if (enc && *enc && strcmp(enc, "identity") != 0)
                return e2b_reply_error(conn, 400, "Content-Encoding %.32s is not supported (send it plain)", enc);
        if (!e2b_session_exists(q))
                return e2b_reply_error(conn, 404, "sandbox %s not found", q->sandbox);
        u.out = cJSON_CreateArray();
        if (type && strncmp(type, "application/octet-stream", 24) == 0) {
                if (!query_path(q, conn, ws, sizeof(ws), &ans)) {
                        cJSON_Delete(u.out);
                        return ans;
                }
                if (write_one(q, ws, q->body, q->len, u.out, &u.e) < 0) {
                        cJSON_Delete(u.out);
                        return e2b_reply_fronterr(conn, &u.e);
                }
                return e2b_reply_json(conn, 200, u.out);
        }
        if (!type || strncmp(type, "multipart/form-data", 19) != 0) {
                cJSON_Delete(u.out);
                return e2b_reply_error(conn, 400, "the upload must be multipart/form-data or application/octet-stream");
        }
        {
                struct MHD_PostProcessor *pp = MHD_create_post_processor(conn, 64 * 1024, upload_part, &u);
                if (!pp) {
                        cJSON_Delete(u.out);
                        return e2b_reply_error(conn, 400, "malformed multipart/form-data (no boundary)");
                }
                if (q->len && MHD_post_process(pp, q->body, q->len) != MHD_YES && !u.failed) {
                        u.failed = true;
                        fronterr_set(&u.e, "bad_request", "malformed multipart/form-data");
                }
                MHD_destroy_post_processor(pp);
        }
        upload_flush(&u);
        free(u.buf);
        if (u.failed) {
                cJSON_Delete(u.out);
                return e2b_reply_fronterr(conn, &u.e);
        }
        if (cJSON_GetArraySize(u.out) == 0) {
                cJSON_Delete(u.out);
                return e2b_reply_error(conn, 400, "no file part named \"file\" in the upload");
        }
        return e2b_reply_json(conn, 200, u.out);
}

/* ---- process.Process ---- */

/* E2B's pid of an execution: 31 bits of its id (a UUID). */
static uint32_t pid_of(const char *id)
{
        uint32_t v = 0;
        int k = 0;

        for (const char *p = id; *p && k < 8; p++) {
                unsigned d;
                if (*p >= '0' && *p <= '9')
                        d = (unsigned)(*p - '0');
                else if (*p >= 'a' && *p <= 'f')
                        d = (unsigned)(*p - 'a' + 10);
                else
                        continue;
                v = v << 4 | d;
                k++;
        }
        v &= 0x7fffffff;
        return v ? v : 1;
}

/* The running execution of that pid in the session; 0 with ret (malloc'd id) or e. */
static int exec_of_pid(struct e2b_req *q, const cJSON *m, char **ret, struct fronterr *e)
{
        const cJSON *sel = cJSON_GetObjectItemCaseSensitive(m, "process");
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(sel, "pid");
        cJSON *params, *res = NULL, *x;

        *ret = NULL;
        if (!cJSON_IsNumber(pid) || pid->valuedouble < 1 || pid->valuedouble > 0x7fffffff)
                return fronterr_set(e, "bad_request", "process.pid is required (tags are not supported yet)");
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddNumberToObject(params, "limit", 1000);
        if (e2b_call(q, "list_executions", params, &res, e) < 0)
                return -1;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(res, "executions")) {
                const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "execution_id"));
                if (id && pid_of(id) == (uint32_t)pid->valuedouble) {
                        *ret = strdup(id);
                        break;
                }
        }
        cJSON_Delete(res);
        if (!*ret)
                return fronterr_set(e, "not_found", "process with pid %u not found", (unsigned)pid->valuedouble);
        return 0;
}

/* A PTY message's size ({size: {cols, rows}}) as exec's rows and cols in
 * params; the API checks their range. */
static int pty_size(const cJSON *pty, cJSON *params, struct fronterr *e)
{
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(pty, "size");
        const cJSON *cols = cJSON_GetObjectItemCaseSensitive(size, "cols");
        const cJSON *rows = cJSON_GetObjectItemCaseSensitive(size, "rows");

        if (!cJSON_IsNumber(cols) || !cJSON_IsNumber(rows))
                return fronterr_set(e, "bad_request", "pty.size.cols and pty.size.rows are required (numbers)");
        cJSON_AddNumberToObject(params, "rows", rows->valuedouble);
        cJSON_AddNumberToObject(params, "cols", cols->valuedouble);
        return 0;
}

enum MHD_Result e2b_envd_list(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *m = unary_body(q, conn, &ans);
        struct fronterr e = {0};
        cJSON *params, *res = NULL, *x, *out, *a, *states;

        if (!m)
                return ans;
        if (!e2b_session_exists(q))
                return unary_error(conn, "not_found", "sandbox %s not found", q->sandbox);
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        states = cJSON_AddArrayToObject(params, "states");
        cJSON_AddItemToArray(states, cJSON_CreateString("running"));
        cJSON_AddItemToArray(states, cJSON_CreateString("pending"));
        if (e2b_call(q, "list_executions", params, &res, &e) < 0)
                return unary_fronterr(conn, &e);
        out = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(out, "processes");
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(res, "executions")) {
                const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "execution_id"));
                const char *cmd = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "command_preview"));
                cJSON *p, *cfg, *args;
                if (!id)
                        continue;
                if (cmd && strncmp(cmd, "/bin/bash -l -c ", 16) == 0)
                        cmd += 16; /* the preview of the SDK's argv: its script */
                p = cJSON_CreateObject();
                cfg = cJSON_AddObjectToObject(p, "config");
                cJSON_AddStringToObject(cfg, "cmd", "/bin/bash");
                args = cJSON_AddArrayToObject(cfg, "args");
                cJSON_AddItemToArray(args, cJSON_CreateString("-l"));
                cJSON_AddItemToArray(args, cJSON_CreateString("-c"));
                cJSON_AddItemToArray(args, cJSON_CreateString(cmd ? cmd : ""));
                cJSON_AddObjectToObject(cfg, "envs");
                cJSON_AddStringToObject(cfg, "cwd", E2B_HOME);
                cJSON_AddNumberToObject(p, "pid", pid_of(id));
                cJSON_AddItemToArray(a, p);
        }
        cJSON_Delete(res);
        return e2b_reply_json(conn, 200, out);
}

enum MHD_Result e2b_envd_send_input(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *m = unary_body(q, conn, &ans);
        _cleanup_free_ char *id = NULL;
        struct fronterr e = {0};
        const cJSON *in;
        const char *data;
        cJSON *params, *res = NULL;

        if (!m)
                return ans;
        in = cJSON_GetObjectItemCaseSensitive(m, "input");
        data = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(in, "stdin"));
        if (!data)
                data = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(in, "pty"));
        if (!data)
                return unary_error(conn, "bad_request", "input.stdin (base64) is required");
        if (exec_of_pid(q, m, &id, &e) < 0)
                return unary_fronterr(conn, &e);
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddStringToObject(params, "execution_id", id);
        cJSON_AddStringToObject(params, "data", data);
        cJSON_AddStringToObject(params, "encoding", "base64");
        if (e2b_call(q, "send_stdin", params, &res, &e) < 0)
                return unary_fronterr(conn, &e);
        cJSON_Delete(res);
        return e2b_reply_json(conn, 200, cJSON_CreateObject());
}

/* Update: a PTY's new size (the only thing E2B's Update changes). */
enum MHD_Result e2b_envd_update(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *m = unary_body(q, conn, &ans);
        _cleanup_(cjson_freep) cJSON *params = NULL;
        _cleanup_free_ char *id = NULL;
        struct fronterr e = {0};
        const cJSON *pty;
        cJSON *res = NULL;

        if (!m)
                return ans;
        pty = cJSON_GetObjectItemCaseSensitive(m, "pty");
        params = cJSON_CreateObject();
        if (pty && !cJSON_IsNull(pty) && pty_size(pty, params, &e) < 0)
                return unary_fronterr(conn, &e);
        if (exec_of_pid(q, m, &id, &e) < 0)
                return unary_fronterr(conn, &e);
        if (!pty || cJSON_IsNull(pty))
                return e2b_reply_json(conn, 200, cJSON_CreateObject()); /* nothing to change */
        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddStringToObject(params, "execution_id", id);
        if (e2b_call(q, "resize_terminal", TAKE_PTR(params), &res, &e) < 0)
                return unary_fronterr(conn, &e);
        cJSON_Delete(res);
        return e2b_reply_json(conn, 200, cJSON_CreateObject());
}

enum MHD_Result e2b_envd_close_stdin(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *m = unary_body(q, conn, &ans);
        _cleanup_free_ char *id = NULL;
        struct fronterr e = {0};
        cJSON *params, *res = NULL;

        if (!m)
                return ans;
        if (exec_of_pid(q, m, &id, &e) < 0)
                return unary_fronterr(conn, &e);
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddStringToObject(params, "execution_id", id);
        cJSON_AddStringToObject(params, "data", "");
        cJSON_AddTrueToObject(params, "eof");
        if (e2b_call(q, "send_stdin", params, &res, &e) < 0)
                return unary_fronterr(conn, &e);
        cJSON_Delete(res);
        return e2b_reply_json(conn, 200, cJSON_CreateObject());
}

enum MHD_Result e2b_envd_send_signal(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *m = unary_body(q, conn, &ans);
        _cleanup_free_ char *id = NULL;
        struct fronterr e = {0};
        const char *sig;
        cJSON *params, *res = NULL;

        if (!m)
                return ans;
        sig = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "signal"));
        if (!sig || (strcmp(sig, "SIGNAL_SIGKILL") != 0 && strcmp(sig, "SIGNAL_SIGTERM") != 0))
                return unary_error(conn, "bad_request", "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
        if (exec_of_pid(q, m, &id, &e) < 0)
                return unary_fronterr(conn, &e);
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddStringToObject(params, "execution_id", id);
        cJSON_AddBoolToObject(params, "force", strcmp(sig, "SIGNAL_SIGKILL") == 0);
        if (e2b_call(q, "cancel_execution", params, &res, &e) < 0)
                return unary_fronterr(conn, &e);
        cJSON_Delete(res);
        return e2b_reply_json(conn, 200, cJSON_CreateObject());
}

/* A Start stream: the execution, the offsets read so far, the frames not yet taken. */
struct stream {
        struct e2b_req q; /* a copy: MHD frees the request before the response */
        char id[64];
        double out_off, err_off;
        char *buf;
        size_t len, off;
        bool ended;              /* the end-of-stream envelope is queued */
        bool pty;                /* a terminal: its output goes out as `pty` data */
        struct hub_watch *watch; /* a WatchDir stream: its watch (else an execution's) */
        int64_t until;           /* WatchDir: monotonic ms its Connect-Timeout-Ms ends it (0: none) */
};

static void watch_step(struct stream *s);

static void frame(struct stream *s, uint8_t flags, cJSON *msg)
{
        char *text = cJSON_PrintUnformatted(msg);
        size_t n = text ? strlen(text) : 0;
        char *nb;

        cJSON_Delete(msg);
        if (!text)
                return;
        if (s->off == s->len)
                s->off = s->len = 0;
        nb = realloc(s->buf, s->len + 5 + n);
        if (nb) {
                nb[s->len] = (char)flags;
                nb[s->len + 1] = (char)(n >> 24);
                nb[s->len + 2] = (char)(n >> 16);
                nb[s->len + 3] = (char)(n >> 8);
                nb[s->len + 4] = (char)n;
                memcpy(nb + s->len + 5, text, n);
                s->buf = nb;
                s->len += 5 + n;
        }
        free(text);
}

static cJSON *event(const char *kind, cJSON **ret_value)
{
        cJSON *o = cJSON_CreateObject(), *ev = cJSON_AddObjectToObject(o, "event");
        *ret_value = cJSON_AddObjectToObject(ev, kind);
        return o;
}

static void stream_end(struct stream *s, const char *code, const char *msg)
{
        cJSON *o = cJSON_CreateObject();
        if (code)
                cJSON_AddItemToObject(o, "error", connect_error_object(code, msg));
        frame(s, 0x02, o);
        s->ended = true;
}

/* One long-poll of the execution: its new output as data events, its end as
 * an end event and the end of the stream, or a keepalive. */
static void stream_step(struct stream *s)
{
        if (s->watch) {
                watch_step(s);
                return;
        }
        struct fronterr e = {0};
        cJSON *params = cJSON_CreateObject(), *res = NULL, *v, *o;
        const char *state;
        const cJSON *x;
        int status;

        cJSON_AddStringToObject(params, "session", s->q.session);
        cJSON_AddStringToObject(params, "execution_id", s->id);
        cJSON_AddNumberToObject(params, "wait", E2B_POLL_WAIT_S);
        cJSON_AddNumberToObject(params, "stdout_offset", s->out_off);
        cJSON_AddNumberToObject(params, "stderr_offset", s->err_off);
        cJSON_AddStringToObject(params, "encoding", "base64");
        if (e2b_call(&s->q, "get_execution", params, &res, &e) < 0) {
                stream_end(s, connect_code(e.code, &status), e.msg);
                return;
        }
        for (int i = 0; i < 2; i++) {
                const char *which = i ? "stderr" : "stdout";
                const char *data = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, which));
                double *off = i ? &s->err_off : &s->out_off;
                char key[32];
                snprintf(key, sizeof(key), "%s_next_offset", which);
                x = cJSON_GetObjectItemCaseSensitive(res, key);
                if (data && *data && cJSON_IsNumber(x) && x->valuedouble > *off) {
                        o = event("data", &v);
                        cJSON_AddStringToObject(v, s->pty ? "pty" : which, data);
                        frame(s, 0, o);
                }
                if (cJSON_IsNumber(x) && x->valuedouble > *off)
                        *off = x->valuedouble;
        }
        state = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "state"));
        if (state && strcmp(state, "running") != 0 && strcmp(state, "pending") != 0) {
                const cJSON *code = cJSON_GetObjectItemCaseSensitive(res, "exit_code");
                const char *err = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "error"));
                /* the output past what was read in this poll: read on before ending */
                bool more = false;
                for (int i = 0; i < 2; i++) {
                        x = cJSON_GetObjectItemCaseSensitive(res, i ? "stderr_bytes" : "stdout_bytes");
                        if (cJSON_IsNumber(x) && x->valuedouble > (i ? s->err_off : s->out_off))
                                more = true;
                }
                if (!more && strcmp(state, "timeout") == 0) {
                        stream_end(s, "deadline_exceeded", "the command ran past its timeout and was killed");
                } else if (!more) {
                        char st[64];
                        o = event("end", &v);
                        cJSON_AddNumberToObject(v, "exitCode", cJSON_IsNumber(code) ? code->valueint : -1);
                        cJSON_AddBoolToObject(v, "exited", cJSON_IsNumber(code));
                        if (cJSON_IsNumber(code))
                                snprintf(st, sizeof(st), "exit status %d", code->valueint);
                        else
                                snprintf(st, sizeof(st), "%s", state);
                        cJSON_AddStringToObject(v, "status", st);
                        if (err && *err)
                                jsonutil_add_text(v, "error", err);
                        frame(s, 0, o);
                        stream_end(s, NULL, NULL);
                }
        } else if (s->len == s->off) {
                o = event("keepalive", &v);
                frame(s, 0, o);
        }
        cJSON_Delete(res);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
        struct stream *s = cls;
        size_t k;

        (void)pos;
        while (s->off == s->len) {
                if (s->ended)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                if (s->q.c.gone && s->q.c.gone(&s->q.c))
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                stream_step(s);
        }
        k = s->len - s->off < max ? s->len - s->off : max;
        memcpy(buf, s->buf + s->off, k);
        s->off += k;
        return (ssize_t)k;
}

static void stream_free(void *cls)
{
        struct stream *s = cls;
        hub_watch_stop(s->watch); /* the client went, or the stream ended */
        free(s->buf);
        free(s);
}

/* The argv of a process config: cmd, then args, exec'd as they are (the
 * SDK sends `/bin/bash -l -c <cmd>`): no shell line is built here. The
 * vector borrows the message's strings. NULL with e. */
static const char **process_argv(const cJSON *proc, struct fronterr *e)
{
        const char *cmd = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(proc, "cmd"));
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(proc, "args"), *a;
        int n = 1;
        const char **v;

        if (!cmd || !*cmd) {
                fronterr_set(e, "bad_request", "process.cmd is required");
                return NULL;
        }
        if (args && !cJSON_IsNull(args) && !cJSON_IsArray(args)) {
                fronterr_set(e, "bad_request", "process.args must be an array of strings");
                return NULL;
        }
        cJSON_ArrayForEach(a, args) {
                if (!cJSON_IsString(a)) {
                        fronterr_set(e, "bad_request", "process.args must be an array of strings");
                        return NULL;
                }
                if (++n > EXEC_ARGV_MAX) {
                        fronterr_set(e, "too_large", "process.args has more than %d words", EXEC_ARGV_MAX - 1);
                        return NULL;
                }
        }
        v = calloc((size_t)n + 1, sizeof(*v));
        if (!v) {
                fronterr_set(e, "internal", "out of memory");
                return NULL;
        }
        n = 0;
        v[n++] = cmd;
        cJSON_ArrayForEach(a, args)
                v[n++] = a->valuestring;
        return v;
}

/* The command's time limit: Connect-Timeout-Ms (the SDK's timeoutMs)
 * rounded up, within exec.timeout_max; without one (timeoutMs 0: none),
 * exec.timeout_max, so a stream always ends. */
static int64_t deadline_s(struct e2b_req *q, struct MHD_Connection *conn)
{
        const char *t = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Connect-Timeout-Ms");
        int64_t max = q->d->cfg.exec_timeout_max_s, ms = 0;
        size_t n = t ? strlen(t) : 0;

        if (n == 0 || n > 10 || strspn(t, "0123456789") != n)
                return max;
        for (size_t i = 0; i < n; i++)
                ms = ms * 10 + (t[i] - '0');
        ms = (ms + 999) / 1000;
        return ms < 1 ? 1 : ms > max ? max : ms;
}

/* The Start request: one enveloped JSON message. NULL with e. */
static cJSON *envelope_message(struct e2b_req *q, struct fronterr *e)
{
        const unsigned char *b = (const unsigned char *)q->body;
        size_t n;

        if (q->len < 5) {
                fronterr_set(e, "bad_request", "a Connect stream request is one enveloped message (5-byte prefix)");
                return NULL;
        }
        n = (size_t)b[1] << 24 | (size_t)b[2] << 16 | (size_t)b[3] << 8 | b[4];
        if (b[0] != 0 || n != q->len - 5) {
                fronterr_set(e, "bad_request",
                             b[0] ? "compressed or end-of-stream envelopes are not accepted in a request"
                                  : "the envelope's length does not match the body");
                return NULL;
        }
        if (n == 0) {
                fronterr_set(e, "bad_request", "the message must be a JSON object");
                return NULL;
        }
        return e2b_parse_object(q->body + 5, n, e);
}

static enum MHD_Result stream_response(struct MHD_Connection *conn, struct stream *s, int status)
{
        struct MHD_Response *resp =
                MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, s, stream_free);
        enum MHD_Result r;

        if (!resp) {
                stream_free(s);
                return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
        r = MHD_queue_response(conn, (unsigned)status, resp);
        MHD_destroy_response(resp);
        metrics_http_status(status);
        return r;
}

/* A server-streaming call's request: its stream and its one message (ret_m),
 * or NULL with the answer queued in *ans (an error, or a stream that ends
 * with one). */
static struct stream *stream_request(struct e2b_req *q, struct MHD_Connection *conn, cJSON **ret_m,
                                     enum MHD_Result *ans)
{
        const char *type = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        struct stream *s = calloc(1, sizeof(*s));
        struct fronterr e = {0};
        char msg[256];
        int status;

        *ans = MHD_NO;
        if (!s)
                return NULL;
        s->q = *q;
        s->q.body = NULL; /* the copy owns nothing of the request */
        if (!type || strncmp(type, "application/connect+json", 24) != 0) {
                free(s);
                *ans = unary_error(conn, "bad_request", "Content-Type must be application/connect+json");
                return NULL;
        }
        *ret_m = envelope_message(q, &e);
        if (!*ret_m)
                stream_end(s, connect_code(e.code, &status), e.msg);
        else if (!user_ok(conn, msg, sizeof(msg)))
                stream_end(s, "invalid_argument", msg);
        else if (!e2b_session_exists(q))
                stream_end(s, "not_found", "sandbox not found");
        if (s->ended) {
                cJSON_Delete(*ret_m);
                *ret_m = NULL;
                *ans = stream_response(conn, s, 200);
                return NULL;
        }
        return s;
}

/* Connect: the events of a running process from now on (its start event,
 * then its new output and its end), as E2B's envd sends them. */
enum MHD_Result e2b_envd_connect(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans;
        _cleanup_(cjson_freep) cJSON *m = NULL;
        _cleanup_free_ char *id = NULL;
        struct stream *s = stream_request(q, conn, &m, &ans);
        struct fronterr e = {0};
        cJSON *params, *res = NULL, *o, *v;
        const cJSON *n;
        int status;

        if (!s)
                return ans;
        if (exec_of_pid(q, m, &id, &e) < 0) {
                stream_end(s, connect_code(e.code, &status), e.msg);
                return stream_response(conn, s, 200);
        }
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddStringToObject(params, "execution_id", id);
        if (e2b_call(q, "get_execution", params, &res, &e) < 0) {
                stream_end(s, connect_code(e.code, &status), e.msg);
                return stream_response(conn, s, 200);
        }
        sbx_strlcpy(s->id, id, sizeof(s->id));
        s->pty = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "tty"));
        n = cJSON_GetObjectItemCaseSensitive(res, "stdout_bytes");
        s->out_off = cJSON_IsNumber(n) ? n->valuedouble : 0;
        n = cJSON_GetObjectItemCaseSensitive(res, "stderr_bytes");
        s->err_off = cJSON_IsNumber(n) ? n->valuedouble : 0;
        cJSON_Delete(res);
        o = event("start", &v);
        cJSON_AddNumberToObject(v, "pid", pid_of(s->id));
        frame(s, 0, o);
        return stream_response(conn, s, 200);
}

enum MHD_Result e2b_envd_start(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans;
        _cleanup_(cjson_freep) cJSON *m = NULL;
        struct stream *s = stream_request(q, conn, &m, &ans);
        struct fronterr e = {0};
        _cleanup_free_ const char **argv = NULL;
        const cJSON *proc, *envs, *cwd, *x;
        char wd[FILES_PATH_MAX], mapped[FILES_PATH_MAX];
        struct sbx_error err = {0};
        cJSON *params, *res = NULL, *o, *v;
        int status;

        if (!s)
                return ans;
        proc = cJSON_GetObjectItemCaseSensitive(m, "process");
        argv = cJSON_IsObject(proc) ? process_argv(proc, &e) : NULL;
        if (!argv) {
                if (!e.code)
                        fronterr_set(&e, "bad_request", "process is required");
                stream_end(s, connect_code(e.code, &status), e.msg);
                return stream_response(conn, s, 200);
        }
        cwd = cJSON_GetObjectItemCaseSensitive(proc, "cwd");
        if (!map_path(cJSON_GetStringValue(cwd), mapped, sizeof(mapped)) || files_normalize(mapped, wd, &err) < 0) {
                stream_end(s, "invalid_argument", "cwd is outside the sandbox's home " E2B_HOME);
                return stream_response(conn, s, 200);
        }
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        {
                cJSON *words = cJSON_AddArrayToObject(params, "argv");
                for (size_t i = 0; argv[i]; i++)
                        cJSON_AddItemToArray(words, cJSON_CreateString(argv[i]));
        }
        cJSON_AddStringToObject(params, "workdir", wd);
        cJSON_AddTrueToObject(params, "background");
        cJSON_AddNumberToObject(params, "timeout_seconds", (double)deadline_s(q, conn));
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "stdin")))
                cJSON_AddTrueToObject(params, "interactive");
        x = cJSON_GetObjectItemCaseSensitive(m, "pty");
        if (x && !cJSON_IsNull(x)) { /* a terminal the runner opens (exec's tty); its input stays open */
                s->pty = true;
                cJSON_AddTrueToObject(params, "tty");
                if (pty_size(x, params, &e) < 0) {
                        cJSON_Delete(params);
                        stream_end(s, connect_code(e.code, &status), e.msg);
                        return stream_response(conn, s, 200);
                }
        }
        envs = cJSON_GetObjectItemCaseSensitive(proc, "envs");
        if (cJSON_IsObject(envs) && envs->child)
                cJSON_AddItemToObject(params, "env", cJSON_Duplicate(envs, true));
        if (e2b_call(q, "exec", params, &res, &e) < 0) {
                stream_end(s, connect_code(e.code, &status), e.msg);
                return stream_response(conn, s, 200);
        }
        sbx_strlcpy(s->id, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "execution_id")) ?: "",
                    sizeof(s->id));
        cJSON_Delete(res);
        o = event("start", &v);
        cJSON_AddNumberToObject(v, "pid", pid_of(s->id));
        frame(s, 0, o);
        return stream_response(conn, s, 200);
}

/* ---- filesystem.Filesystem ---- */

static cJSON *entry_info(const char *ws_dir, const cJSON *ent)
{
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ent, "name"));
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ent, "type"));
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(ent, "size");
        char ws[2 * FILES_PATH_MAX], home[2 * FILES_PATH_MAX + 16];
        cJSON *o = cJSON_CreateObject();

        snprintf(ws, sizeof(ws), "%s/%s", strcmp(ws_dir, "/") == 0 ? "" : ws_dir, name ? name : "");
        home_path(ws, home, sizeof(home));
        cJSON_AddStringToObject(o, "name", name ? name : "");
        cJSON_AddStringToObject(o, "type", type && strcmp(type, "dir") == 0 ? "FILE_TYPE_DIRECTORY" : "FILE_TYPE_FILE");
        cJSON_AddStringToObject(o, "path", home);
        cJSON_AddStringToObject(o, "size", "0");
        if (cJSON_IsNumber(size)) {
                char n[32];
                snprintf(n, sizeof(n), "%lld", (long long)size->valuedouble);
                cJSON_ReplaceItemInObject(o, "size", cJSON_CreateString(n)); /* int64 in proto3 JSON */
        }
        cJSON_AddNumberToObject(o, "mode", type && strcmp(type, "dir") == 0 ? 0755 : 0644);
        cJSON_AddStringToObject(o, "permissions", type && strcmp(type, "dir") == 0 ? "drwxr-xr-x" : "-rw-r--r--");
        cJSON_AddStringToObject(o, "owner", "user");
        cJSON_AddStringToObject(o, "group", "user");
        return o;
}

static int list_dir(struct e2b_req *q, const char *ws, cJSON **ret, struct fronterr *e)
{
        cJSON *params = cJSON_CreateObject();

        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddStringToObject(params, "path", ws);
        return e2b_call(q, "list_files", params, ret, e);
}

enum MHD_Result e2b_envd_list_dir(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *m = unary_body(q, conn, &ans);
        char ws[FILES_PATH_MAX];
        struct fronterr e = {0};
        cJSON *res = NULL, *ent, *out, *a;
        const cJSON *depth;

        if (!m || !message_path(conn, m, "path", ws, sizeof(ws), &ans))
                return m ? ans : ans;
        depth = cJSON_GetObjectItemCaseSensitive(m, "depth");
        if (depth && !cJSON_IsNull(depth) && !(cJSON_IsNumber(depth) && depth->valuedouble == 1))
                return unary_error(conn, "bad_request", "depth other than 1 is not supported yet");
        if (!e2b_session_exists(q))
                return unary_error(conn, "not_found", "sandbox %s not found", q->sandbox);
        if (list_dir(q, ws, &res, &e) < 0)
                return unary_fronterr(conn, &e);
        out = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(out, "entries");
        cJSON_ArrayForEach(ent, cJSON_GetObjectItemCaseSensitive(res, "entries"))
                cJSON_AddItemToArray(a, entry_info(ws, ent));
        cJSON_Delete(res);
        return e2b_reply_json(conn, 200, out);
}

enum MHD_Result e2b_envd_stat(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *m = unary_body(q, conn, &ans);
        char ws[FILES_PATH_MAX], dir[FILES_PATH_MAX];
        struct fronterr e = {0};
        cJSON *res = NULL, *ent, *out = NULL;
        const char *base;

        if (!m || !message_path(conn, m, "path", ws, sizeof(ws), &ans))
                return ans;
        if (!e2b_session_exists(q))
                return unary_error(conn, "not_found", "sandbox %s not found", q->sandbox);
        if (strcmp(ws, "/workspace") == 0) {
                cJSON *root = cJSON_CreateObject();
                cJSON_AddStringToObject(root, "name", "user");
                cJSON_AddStringToObject(root, "type", "dir");
                out = cJSON_CreateObject();
                cJSON_AddItemToObject(out, "entry", entry_info("/", root));
                cJSON_ReplaceItemInObject(cJSON_GetObjectItemCaseSensitive(out, "entry"), "path",
                                          cJSON_CreateString(E2B_HOME));
                cJSON_Delete(root);
                return e2b_reply_json(conn, 200, out);
        }
        base = strrchr(ws, '/');
        snprintf(dir, sizeof(dir), "%.*s", (int)(base - ws), ws);
        if (list_dir(q, dir, &res, &e) < 0)
                return unary_fronterr(conn, &e);
        cJSON_ArrayForEach(ent, cJSON_GetObjectItemCaseSensitive(res, "entries")) {
                const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ent, "name"));
                if (name && strcmp(name, base + 1) == 0) {
                        out = cJSON_CreateObject();
                        cJSON_AddItemToObject(out, "entry", entry_info(dir, ent));
                        break;
                }
        }
        cJSON_Delete(res);
        if (!out)
                return unary_error(conn, "not_found", "path not found");
        return e2b_reply_json(conn, 200, out);
}

/* The entry of a path just made or moved there (the listing's shape). */
static cJSON *made_entry(const char *ws, const char *type)
{
        char dir[FILES_PATH_MAX];
        const char *base = strrchr(ws, '/');
        cJSON *out = cJSON_CreateObject(), *d = cJSON_CreateObject();

        snprintf(dir, sizeof(dir), "%.*s", (int)(base - ws), ws);
        cJSON_AddStringToObject(d, "name", base + 1);
        cJSON_AddStringToObject(d, "type", type);
        cJSON_AddItemToObject(out, "entry", entry_info(dir, d));
        cJSON_Delete(d);
        return out;
}

/* The daemon's own file operations (files.h: through the runner, confined
 * to the workspace, never following a link the container planted). */
static enum MHD_Result files_error(struct MHD_Connection *conn, int r, const struct sbx_error *err)
{
        struct fronterr e = {0};

        fronterr_errno(&e, r, err, NULL);
        return unary_fronterr(conn, &e);
}

enum MHD_Result e2b_envd_make_dir(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *m = unary_body(q, conn, &ans);
        char ws[FILES_PATH_MAX];
        struct sbx_error err = {0};
        int r;

        if (!m || !message_path(conn, m, "path", ws, sizeof(ws), &ans))
                return ans;
        if (!e2b_session_exists(q))
                return unary_error(conn, "not_found", "sandbox %s not found", q->sandbox);
        if (strcmp(ws, "/workspace") == 0)
                return unary_error(conn, "conflict", "directory already exists");
        r = files_mkdir(&q->d->files, q->tok.user, q->session, ws, &err);
        if (r == -EEXIST)
                return unary_error(conn, "conflict", "directory already exists");
        if (r < 0)
                return files_error(conn, r, &err);
        return e2b_reply_json(conn, 200, made_entry(ws, "dir"));
}

enum MHD_Result e2b_envd_remove(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *m = unary_body(q, conn, &ans);
        char ws[FILES_PATH_MAX];
        struct sbx_error err = {0};
        int r;

        if (!m || !message_path(conn, m, "path", ws, sizeof(ws), &ans))
                return ans;
        if (strcmp(ws, "/workspace") == 0)
                return unary_error(conn, "invalid", "the home directory itself cannot be removed");
        if (!e2b_session_exists(q))
                return unary_error(conn, "not_found", "sandbox %s not found", q->sandbox);
        r = files_remove(&q->d->files, q->tok.user, q->session, ws, &err);
        if (r < 0 && r != -ENOENT) /* E2B's remove of a missing path succeeds */
                return files_error(conn, r, &err);
        return e2b_reply_json(conn, 200, cJSON_CreateObject());
}

enum MHD_Result e2b_envd_move(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *m = unary_body(q, conn, &ans);
        char src[FILES_PATH_MAX], dst[FILES_PATH_MAX];
        struct sbx_error err = {0};
        int r;

        if (!m || !message_path(conn, m, "source", src, sizeof(src), &ans) ||
            !message_path(conn, m, "destination", dst, sizeof(dst), &ans))
                return ans;
        if (strcmp(src, "/workspace") == 0 || strcmp(dst, "/workspace") == 0)
                return unary_error(conn, "invalid", "the home directory itself cannot be moved or replaced");
        if (!e2b_session_exists(q))
                return unary_error(conn, "not_found", "sandbox %s not found", q->sandbox);
        r = files_move(&q->d->files, q->tok.user, q->session, src, dst, &err);
        if (r < 0)
                return files_error(conn, r, &err);
        return e2b_reply_json(conn, 200, made_entry(dst, "file"));
}

/* ---- WatchDir and the watcher calls (a runner's directory watch: hub_ops.h) ---- */

#define WATCH_TAKE 64
#define WATCHERS_MAX HUB_WATCH_GLOBAL
#define WATCHER_IDLE_MS (10 * 60 * 1000) /* a watcher nobody polled that long is removed */

static const char *const event_types[] = {"EVENT_TYPE_UNSPECIFIED", "EVENT_TYPE_CREATE", "EVENT_TYPE_WRITE",
                                          "EVENT_TYPE_REMOVE",      "EVENT_TYPE_RENAME", "EVENT_TYPE_CHMOD"};

static cJSON *fs_event(const struct hub_watch_event *ev)
{
        cJSON *o = cJSON_CreateObject();
        jsonutil_add_text(o, "name", ev->name); /* a tenant's file name: made valid UTF-8 */
        cJSON_AddStringToObject(o, "type", event_types[ev->kind >= 1 && ev->kind <= 5 ? ev->kind : 0]);
        return o;
}

/* The request's path and recursive flag, and a watch on it; -1 with e. */
static int watch_open(struct e2b_req *q, const cJSON *m, struct hub_watch **ret, struct fronterr *e)
{
        const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "path"));
        const cJSON *rec = cJSON_GetObjectItemCaseSensitive(m, "recursive");
        char mapped[FILES_PATH_MAX], ws[FILES_PATH_MAX];
        struct sbx_error err = {0};
        int r;

        if (!p || strlen(p) >= FILES_PATH_MAX)
                return fronterr_set(e, "bad_request", "path must be a path of at most %d bytes", FILES_PATH_MAX - 1),
                       -1;
        if (rec && !cJSON_IsNull(rec) && !cJSON_IsBool(rec))
                return fronterr_set(e, "bad_request", "recursive must be a boolean"), -1;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "includeEntry")))
                return fronterr_set(e, "unimplemented",
                                    "includeEntry is not supported yet: events carry name and type"),
                       -1;
        if (!map_path(p, mapped, sizeof(mapped)) || files_normalize(mapped, ws, &err) < 0)
                return fronterr_set(e, "invalid", "%s is outside the sandbox's home %s (sandboxd serves only it)", p,
                                    E2B_HOME),
                       -1;
        r = files_watch(&q->d->files, q->tok.user, q->session, ws, cJSON_IsTrue(rec), ret, &err);
        if (r < 0) {
                fronterr_errno(e, r, &err, NULL);
                return -1;
        }
        return 0;
}

/* One long-poll of the watch: its events, a keepalive, or its end. */
static void watch_step(struct stream *s)
{
        struct hub_watch_event ev[WATCH_TAKE];
        int64_t wait = E2B_POLL_WAIT_S * 1000;
        bool lost = false;
        int n;

        if (s->until) {
                int64_t left = s->until - sbx_now_ms();
                if (left <= 0) {
                        stream_end(s, "deadline_exceeded", "the watch reached its timeout");
                        return;
                }
                if (left < wait)
                        wait = left;
        }
        n = hub_watch_take(s->watch, ev, WATCH_TAKE, (int)wait, &lost);
        if (n < 0) {
                stream_end(s, "unavailable", "the sandbox stopped: its watch ended");
                return;
        }
        for (int i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddItemToObject(o, "filesystem", fs_event(&ev[i]));
                frame(s, 0, o);
        }
        hub_watch_events_free(ev, (size_t)n);
        if (lost) /* as envd, whose watcher ends with its error */
                stream_end(s, "resource_exhausted",
                           "events were lost: the directory changed faster than the watch was read (its queue "
                           "overflowed)");
        else if (n == 0) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddObjectToObject(o, "keepalive");
                frame(s, 0, o);
        }
}

/* WatchDir: a start event, then the directory's events until the client
 * goes, its timeout, or the sandbox stops. */
enum MHD_Result e2b_envd_watch_dir(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans;
        _cleanup_(cjson_freep) cJSON *m = NULL;
        struct stream *s = stream_request(q, conn, &m, &ans);
        const char *t = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Connect-Timeout-Ms");
        struct fronterr e = {0};
        cJSON *o;
        int status;

        if (!s)
                return ans;
        if (watch_open(q, m, &s->watch, &e) < 0) {
                stream_end(s, connect_code(e.code, &status), e.msg);
                return stream_response(conn, s, 200);
        }
        if (t && *t && strlen(t) <= 10 && strspn(t, "0123456789") == strlen(t) && atoll(t) > 0)
                s->until = sbx_now_ms() + atoll(t);
        o = cJSON_CreateObject();
        cJSON_AddObjectToObject(o, "start");
        frame(s, 0, o);
        return stream_response(conn, s, 200);
}

/* CreateWatcher's watchers: a watch each, named by a random id, owned by the
 * sandbox (user and session) that made it. */
struct watcher {
        char id[33];
        char user[65];
        char session[sizeof(((struct e2b_req *)0)->session)];
        struct hub_watch *w;
        int64_t last; /* monotonic ms of its last call */
};

static pthread_mutex_t watchers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct watcher *watchers[WATCHERS_MAX];
static size_t n_watchers;

static void watcher_drop_locked(size_t i)
{
        hub_watch_stop(watchers[i]->w);
        free(watchers[i]);
        watchers[i] = watchers[--n_watchers];
}

/* Remove the watchers nobody polled for WATCHER_IDLE_MS and, with
 * ended, those whose watch ended with their sandbox (stopped or killed: a
 * killed sandbox's watchers can never be polled again, and each holds one
 * of the hub's HUB_WATCH_GLOBAL watches until it is stopped). */
static void watchers_sweep_locked(int64_t now, bool ended)
{
        for (size_t i = 0; i < n_watchers;)
                if (now - watchers[i]->last > WATCHER_IDLE_MS || (ended && hub_watch_ended(watchers[i]->w)))
                        watcher_drop_locked(i);
                else
                        i++;
}

void e2b_envd_watchers_forget(const char *user, const char *session)
{
        pthread_mutex_lock(&watchers_lock);
        for (size_t i = 0; i < n_watchers;)
                if (strcmp(watchers[i]->user, user) == 0 && strcmp(watchers[i]->session, session) == 0)
                        watcher_drop_locked(i);
                else
                        i++;
        pthread_mutex_unlock(&watchers_lock);
}

void e2b_envd_watchers_stop(void)
{
        pthread_mutex_lock(&watchers_lock);
        while (n_watchers)
                watcher_drop_locked(n_watchers - 1);
        pthread_mutex_unlock(&watchers_lock);
}

/* The caller's watcher named by the message's watcherId, under watchers_lock (held on success). */
static ssize_t watcher_find_locked(struct e2b_req *q, const cJSON *m)
{
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "watcherId"));

        if (!id)
                return -1;
        for (size_t i = 0; i < n_watchers; i++)
                if (strcmp(watchers[i]->id, id) == 0 && strcmp(watchers[i]->user, q->tok.user) == 0 &&
                    strcmp(watchers[i]->session, q->session) == 0)
                        return (ssize_t)i;
        return -1; /* another sandbox's watcher is not found either */
}

enum MHD_Result e2b_envd_create_watcher(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *m = unary_body(q, conn, &ans);
        struct fronterr e = {0};
        struct watcher *x;
        unsigned char rnd[16];
        cJSON *out;

        if (!m)
                return ans;
        if (!e2b_session_exists(q))
                return unary_error(conn, "not_found", "sandbox %s not found", q->sandbox);
        x = calloc(1, sizeof(*x));
        if (!x || getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
                free(x);
                return unary_error(conn, "internal", "out of memory");
        }
        for (size_t i = 0; i < sizeof(rnd); i++)
                snprintf(x->id + 2 * i, 3, "%02x", rnd[i]);
        sbx_strlcpy(x->user, q->tok.user, sizeof(x->user));
        sbx_strlcpy(x->session, q->session, sizeof(x->session));
        /* room first: the ended and idle ones give their watches back before this one counts against the caps */
        pthread_mutex_lock(&watchers_lock);
        watchers_sweep_locked(sbx_now_ms(), true);
        pthread_mutex_unlock(&watchers_lock);
        if (watch_open(q, m, &x->w, &e) < 0) {
                free(x);
                return unary_fronterr(conn, &e);
        }
        x->last = sbx_now_ms();
        pthread_mutex_lock(&watchers_lock);
        if (n_watchers >= WATCHERS_MAX) { /* the hub's global cap holds first; this is a second bound */
                pthread_mutex_unlock(&watchers_lock);
                hub_watch_stop(x->w);
                free(x);
                return unary_error(conn, "busy", "busy: the daemon has %d watchers already", WATCHERS_MAX);
        }
        watchers[n_watchers++] = x;
        out = cJSON_CreateObject();
        cJSON_AddStringToObject(out, "watcherId", x->id);
        pthread_mutex_unlock(&watchers_lock);
        return e2b_reply_json(conn, 200, out);
}

enum MHD_Result e2b_envd_get_watcher_events(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *m = unary_body(q, conn, &ans);
        struct hub_watch_event ev[WATCH_TAKE];
        cJSON *out, *a;
        bool lost = false, any_lost = false;
        size_t taken = 0;
        ssize_t i;
        int n = 0;

        if (!m)
                return ans;
        pthread_mutex_lock(&watchers_lock);
        watchers_sweep_locked(sbx_now_ms(), false); /* an ended one is told below, as unavailable */
        i = watcher_find_locked(q, m);
        if (i < 0) {
                pthread_mutex_unlock(&watchers_lock);
                return unary_error(conn, "not_found", "watcher not found");
        }
        watchers[i]->last = sbx_now_ms();
        out = cJSON_CreateObject();
        a = cJSON_AddArrayToObject(out, "events");
        /* what is queued now, never waiting (the lock is the registry's), and at most
         * HUB_WATCH_QUEUE: events that keep coming while this takes wait for the next call */
        while (taken < HUB_WATCH_QUEUE && (n = hub_watch_take(watchers[i]->w, ev, WATCH_TAKE, 0, &lost)) > 0) {
                for (int k = 0; k < n; k++)
                        cJSON_AddItemToArray(a, fs_event(&ev[k]));
                hub_watch_events_free(ev, (size_t)n);
                taken += (size_t)n;
                any_lost |= lost;
        }
        any_lost |= lost;
        if (n < 0 && cJSON_GetArraySize(a) == 0) {
                watcher_drop_locked((size_t)i);
                pthread_mutex_unlock(&watchers_lock);
                cJSON_Delete(out);
                return unary_error(conn, "unavailable", "the sandbox stopped: its watcher ended");
        }
        pthread_mutex_unlock(&watchers_lock);
        if (any_lost) {
                cJSON_Delete(out);
                return unary_error(conn, "busy", /* resource_exhausted */
                                   "events were lost: the directory changed faster than the watcher was read (its "
                                   "queue overflowed); the watcher goes on");
        }
        return e2b_reply_json(conn, 200, out);
}

enum MHD_Result e2b_envd_remove_watcher(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *m = unary_body(q, conn, &ans);
        ssize_t i;

        if (!m)
                return ans;
        pthread_mutex_lock(&watchers_lock);
        i = watcher_find_locked(q, m);
        if (i >= 0)
                watcher_drop_locked((size_t)i);
        pthread_mutex_unlock(&watchers_lock);
        if (i < 0)
                return unary_error(conn, "not_found", "watcher not found");
        return e2b_reply_json(conn, 200, cJSON_CreateObject());
}
