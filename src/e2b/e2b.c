/* e2b.c — E2B's control API on the HTTPS front (include/sandboxd/e2b.h):
 * the route table, authentication (X-API-Key for the control routes, the
 * sandbox's access token for envd's), and the control handlers. Every
 * handler translates to the API's dispatcher (api_call) as the key's user,
 * so quotas, audit, events and labels hold exactly as on /v1/. No state of
 * its own but the access-token key, read once from the data directory
 * (key_lock). Runs on the connection's MHD thread. */
#include "sandboxd/e2b.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "e2b_internal.h"
#include "sandboxd/config.h"
#include "sandboxd/daemon.h"
#include "sandboxd/http.h"
#include "sandboxd/jsonutil.h"
#include "sandboxd/log.h"
#include "sandboxd/metrics.h"
#include "sandboxd/reqguard.h"
#include "sandboxd/session.h"
#include "sandboxd/store_egress.h"
#include "sandboxd/engine.h"
#include "sandboxd/wsquota.h"

#define E2B_KEY_LEN 32
#define E2B_MAC_HEX 64
#define E2B_LIST_LIMIT_MAX 100
#define E2B_FORK_MAX 10 /* forks per request: each snapshots the source once more */

static enum MHD_Result c_create(struct e2b_req *q, struct MHD_Connection *conn);
static enum MHD_Result c_get(struct e2b_req *q, struct MHD_Connection *conn);
static enum MHD_Result c_list(struct e2b_req *q, struct MHD_Connection *conn);
static enum MHD_Result c_kill(struct e2b_req *q, struct MHD_Connection *conn);
static enum MHD_Result c_connect(struct e2b_req *q, struct MHD_Connection *conn);
static enum MHD_Result c_pause(struct e2b_req *q, struct MHD_Connection *conn);
static enum MHD_Result c_resume(struct e2b_req *q, struct MHD_Connection *conn);
static enum MHD_Result c_timeout(struct e2b_req *q, struct MHD_Connection *conn);
static enum MHD_Result c_metrics(struct e2b_req *q, struct MHD_Connection *conn);
static enum MHD_Result c_fork(struct e2b_req *q, struct MHD_Connection *conn);
static enum MHD_Result c_snapshot(struct e2b_req *q, struct MHD_Connection *conn);
static enum MHD_Result c_snapshot_list(struct e2b_req *q, struct MHD_Connection *conn);
static enum MHD_Result c_snapshot_delete(struct e2b_req *q, struct MHD_Connection *conn);
static enum MHD_Result c_network(struct e2b_req *q, struct MHD_Connection *conn);
static enum MHD_Result c_unsupported(struct e2b_req *q, struct MHD_Connection *conn);

/* E2B's routes and the core calls they make (cmd_table[]). */
static const struct e2b_route routes[] = {
        {"POST", "/sandboxes", 0, E2B_BODY_MAX, c_create, "create_session {image, ttl_seconds, env, labels}"},
        {"POST", "/v2/sandboxes", 0, E2B_BODY_MAX, c_create, "create_session {image, ttl_seconds, env, labels}"},
        {"GET", "/sandboxes", 0, 0, c_list, "list_sessions {labels}"},
        {"GET", "/v2/sandboxes", 0, 0, c_list, "list_sessions {labels}, paginated here"},
        {"GET", "/sandboxes/{id}", 0, 0, c_get, "list_sessions {session}"},
        {"DELETE", "/sandboxes/{id}", 0, 0, c_kill, "destroy_session {purge}"},
        {"POST", "/sandboxes/{id}/connect", 0, E2B_BODY_MAX, c_connect, "resume_session when paused, set_session_ttl"},
        {"POST", "/v2/sandboxes/{id}/connect", 0, E2B_BODY_MAX, c_connect,
         "resume_session when paused, set_session_ttl"},
        {"POST", "/sandboxes/{id}/resume", 0, E2B_BODY_MAX, c_resume, "resume_session"},
        {"POST", "/sandboxes/{id}/pause", 0, E2B_BODY_MAX, c_pause, "pause_session"},
        {"POST", "/sandboxes/{id}/timeout", 0, E2B_BODY_MAX, c_timeout, "set_session_ttl"},
        {"POST", "/sandboxes/{id}/refreshes", 0, E2B_BODY_MAX, c_unsupported, "(not yet)"},
        {"POST", "/sandboxes/{id}/fork", 0, E2B_BODY_MAX, c_fork,
         "fork_session {from: {session}} per fork, set_session_ttl"},
        {"POST", "/sandboxes/{id}/snapshots", 0, E2B_BODY_MAX, c_snapshot,
         "snapshot_session {name}; create with its id is fork_session {from: {snapshot}}"},
        {"GET", "/snapshots", 0, 0, c_snapshot_list, "list_snapshots {session}, paginated here"},
        {"DELETE", "/templates/{snap}", 0, 0, c_snapshot_delete,
         "delete_snapshot (a snap- id; templates are the operator's)"},
        {"PUT", "/sandboxes/{id}/network", 0, E2B_BODY_MAX, c_network,
         "narrow_egress {allow, deny, only} (narrows the operator's policy, never widens it)"},
        {"GET", "/sandboxes/{id}/metrics", 0, 0, c_metrics, "list_sessions {session}, then the engine's stats"},
        {"GET", "/sandboxes/{id}/logs", 0, 0, c_unsupported, "(not called by the SDK 2.x)"},
        {"GET", "/secrets", 0, 0, e2b_secret_list, "list_secrets, paginated here"},
        {"POST", "/secrets", 0, E2B_BODY_MAX, e2b_secret_create, "set_secret's store, with no hosts (e2b_secrets.c)"},
        {"GET", "/secrets/{sec}", 0, 0, e2b_secret_get, "list_secrets' row, by id or name"},
        {"POST", "/secrets/{sec}", 0, E2B_BODY_MAX, e2b_secret_update, "set_secret's store: a new version"},
        {"DELETE", "/secrets/{sec}", 0, 0, e2b_secret_delete, "delete_secret"},
        {"GET", "/health", E2B_ENVD_PORT, 0, e2b_envd_health, "(session state)"},
        {"GET", "/files", E2B_ENVD_PORT, 0, e2b_envd_download, "read_file {encoding: base64}, paged"},
        {"POST", "/files", E2B_ENVD_PORT, E2B_UPLOAD_MAX, e2b_envd_upload, "write_file {encoding: base64}"},
        {"POST", "/process.Process/Start", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_start,
         "exec {background, tty with pty}, then get_execution {wait, offsets}"},
        {"POST", "/process.Process/Connect", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_connect,
         "get_execution {wait, offsets} from its output's end"},
        {"POST", "/process.Process/List", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_list,
         "list_executions {states: running}"},
        {"POST", "/process.Process/SendInput", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_send_input, "send_stdin"},
        {"POST", "/process.Process/CloseStdin", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_close_stdin, "send_stdin {eof}"},
        {"POST", "/process.Process/SendSignal", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_send_signal, "cancel_execution"},
        {"POST", "/process.Process/Update", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_update, "resize_terminal"},
        {"POST", "/filesystem.Filesystem/Stat", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_stat, "list_files of the parent"},
        {"POST", "/filesystem.Filesystem/ListDir", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_list_dir, "list_files"},
        {"POST", "/filesystem.Filesystem/MakeDir", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_make_dir, "files_mkdir"},
        {"POST", "/filesystem.Filesystem/Remove", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_remove, "files_remove"},
        {"POST", "/filesystem.Filesystem/Move", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_move, "files_move"},
        {"POST", "/filesystem.Filesystem/WatchDir", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_watch_dir,
         "files_watch (a runner watch, hub_ops.h)"},
        {"POST", "/filesystem.Filesystem/CreateWatcher", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_create_watcher,
         "files_watch"},
        {"POST", "/filesystem.Filesystem/GetWatcherEvents", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_get_watcher_events,
         "hub_watch_take"},
        {"POST", "/filesystem.Filesystem/RemoveWatcher", E2B_ENVD_PORT, E2B_BODY_MAX, e2b_envd_remove_watcher,
         "hub_watch_stop"},
        {"POST", "/execute", E2B_JUPYTER_PORT, E2B_BODY_MAX, e2b_jupyter_execute, "run_cell"},
        {"POST", "/contexts", E2B_JUPYTER_PORT, E2B_BODY_MAX, e2b_jupyter_create, "(a name; run_cell makes it)"},
        {"GET", "/contexts", E2B_JUPYTER_PORT, 0, e2b_jupyter_list, "list_contexts"},
        {"POST", "/contexts/{ctx}/restart", E2B_JUPYTER_PORT, E2B_BODY_MAX, e2b_jupyter_restart, "restart_context"},
        {"DELETE", "/contexts/{ctx}", E2B_JUPYTER_PORT, 0, e2b_jupyter_remove, "delete_context"},
};

/* ---- replies ---- */

static enum MHD_Result queue(struct MHD_Connection *conn, int status, const char *type, void *data, size_t len,
                             bool close)
{
        struct MHD_Response *resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
        enum MHD_Result r;

        if (!resp) {
                free(data);
                return MHD_NO;
        }
        if (type)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        if (close)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
        r = MHD_queue_response(conn, (unsigned)status, resp);
        MHD_destroy_response(resp);
        metrics_http_status(status);
        return r;
}

enum MHD_Result e2b_reply_raw(struct MHD_Connection *conn, int status, const char *type, void *data, size_t len)
{
        return queue(conn, status, type, data, len, false);
}

enum MHD_Result e2b_reply_json(struct MHD_Connection *conn, int status, cJSON *body)
{
        char *text = body ? cJSON_PrintUnformatted(body) : NULL;

        cJSON_Delete(body);
        if (!text)
                return MHD_NO;
        return e2b_reply_raw(conn, status, "application/json", text, strlen(text));
}

enum MHD_Result e2b_reply_error(struct MHD_Connection *conn, int status, const char *fmt, ...)
{
        char msg[512];
        va_list ap;
        cJSON *o = cJSON_CreateObject();

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        cJSON_AddNumberToObject(o, "code", status);
        jsonutil_add_text(o, "message", msg);
        return e2b_reply_json(conn, status, o);
}

enum MHD_Result e2b_reply_fronterr(struct MHD_Connection *conn, const struct fronterr *e)
{
        int status = http_status_for_code(e->code);

        if (e->code && strcmp(e->code, "quota_exceeded") == 0)
                status = 429;
        return e2b_reply_error(conn, status, "%s", e->msg);
}

/* ---- the core ---- */

int e2b_call(struct e2b_req *q, const char *method, cJSON *params, cJSON **ret, struct fronterr *e)
{
        int r;

        *ret = NULL;
        if (!params)
                return fronterr_set(e, "internal", "out of memory");
        r = api_call(&q->c, &q->tok, NULL, method, params, ret, e);
        cJSON_Delete(params);
        if (r == 1)
                return fronterr_set(e, "unavailable", "the client left");
        return r < 0 ? -1 : 0;
}

cJSON *e2b_parse_object(const char *buf, size_t len, struct fronterr *e)
{
        enum reqguard_verdict v = reqguard_scan(buf, len, REQGUARD_MAX_ELEMENTS, REQGUARD_MAX_DEPTH);
        cJSON *o;

        if (v != REQGUARD_OK) {
                fronterr_set(e, reqguard_verdict_is_invalid(v) ? "bad_request" : "too_large", "%s",
                             reqguard_verdict_message(v));
                return NULL;
        }
        o = len ? cJSON_ParseWithLength(buf, len) : cJSON_CreateObject();
        if (!cJSON_IsObject(o)) {
                cJSON_Delete(o);
                fronterr_set(e, "bad_request", "the body must be a JSON object");
                return NULL;
        }
        return o;
}

bool e2b_session_exists(struct e2b_req *q)
{
        struct session_info info;

        if (!q->session[0] || session_get_info(q->d->sessions, q->tok.user, q->session, &info) < 0)
                return false;
        session_info_done(&info);
        return true;
}

/* ---- access tokens: HMAC-SHA256(key, user ":" sandbox), the key in data_dir/e2b.key ---- */

static pthread_mutex_t key_lock = PTHREAD_MUTEX_INITIALIZER;
static char key_dir[SBX_PATH_MAX]; /* key_lock: whose key is cached (tests run several daemons) */
static unsigned char key_bytes[E2B_KEY_LEN];

static int key_load(const char *dir, unsigned char ret[E2B_KEY_LEN])
{
        char path[SBX_PATH_MAX + 16];
        int fd, r = 0;
        struct stat st;
        ssize_t n;

        pthread_mutex_lock(&key_lock);
        if (strcmp(key_dir, dir) == 0)
                goto done;
        snprintf(path, sizeof(path), "%s/e2b.key", dir);
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0 && errno == ENOENT) {
                unsigned char fresh[E2B_KEY_LEN];
                if (gnutls_rnd(GNUTLS_RND_KEY, fresh, sizeof(fresh)) != 0) {
                        r = -EIO;
                        goto out;
                }
                fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (fd >= 0) {
                        n = write(fd, fresh, sizeof(fresh));
                        if (n != (ssize_t)sizeof(fresh) || fsync(fd) < 0)
                                r = -EIO;
                        close(fd);
                }
                explicit_bzero(fresh, sizeof(fresh));
                if (r < 0)
                        goto out;
                fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW); /* whoever won the creation */
        }
        if (fd < 0) {
                r = -errno;
                goto out;
        }
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != E2B_KEY_LEN ||
            read(fd, key_bytes, E2B_KEY_LEN) != E2B_KEY_LEN)
                r = -EINVAL;
        close(fd);
        if (r == 0)
                sbx_strlcpy(key_dir, dir, sizeof(key_dir));
        else
                log_error("e2b: %s is not a key of %d bytes: access tokens cannot be checked", path, E2B_KEY_LEN);
out:
        if (r < 0)
                goto unlock;
done:
        memcpy(ret, key_bytes, E2B_KEY_LEN);
unlock:
        pthread_mutex_unlock(&key_lock);
        return r;
}

static void hex_of(const unsigned char *b, size_t n, char *out)
{
        static const char digits[] = "0123456789abcdef";
        for (size_t i = 0; i < n; i++) {
                out[2 * i] = digits[b[i] >> 4];
                out[2 * i + 1] = digits[b[i] & 15];
        }
        out[2 * n] = '\0';
}

/* "<hex of user>.<hex of the MAC>" */
#define E2B_ACCESS_TOKEN_MAX (2 * 64 + 1 + E2B_MAC_HEX)

static int access_mac(struct daemon *d, const char *user, const char *sandbox, char ret[E2B_MAC_HEX + 1])
{
        unsigned char key[E2B_KEY_LEN], mac[32];
        char msg[64 + 1 + E2B_ID_MAX + 1];
        int r = key_load(d->cfg.data_dir, key);

        if (r < 0)
                return r;
        snprintf(msg, sizeof(msg), "%s:%s", user, sandbox);
        r = gnutls_hmac_fast(GNUTLS_MAC_SHA256, key, sizeof(key), msg, strlen(msg), mac) == 0 ? 0 : -EIO;
        explicit_bzero(key, sizeof(key));
        if (r == 0)
                hex_of(mac, sizeof(mac), ret);
        return r;
}

static int access_token(struct e2b_req *q, char ret[E2B_ACCESS_TOKEN_MAX + 1])
{
        char mac[E2B_MAC_HEX + 1];
        size_t ul = strlen(q->tok.user);
        int r = access_mac(q->d, q->tok.user, q->sandbox, mac);

        if (r < 0)
                return r;
        hex_of((const unsigned char *)q->tok.user, ul, ret);
        ret[2 * ul] = '.';
        memcpy(ret + 2 * ul + 1, mac, sizeof(mac));
        return 0;
}

/* The user a token names, when its MAC is that user's for this sandbox. */
bool e2b_access_check(struct e2b_req *q, const char *token)
{
        const char *dot = token ? strchr(token, '.') : NULL;
        char mac[E2B_MAC_HEX + 1];
        size_t hl;

        if (!dot || strlen(dot + 1) != E2B_MAC_HEX)
                return false;
        hl = (size_t)(dot - token);
        if (hl == 0 || hl % 2 || hl / 2 >= sizeof(q->tok.user))
                return false;
        for (size_t i = 0; i < hl / 2; i++) {
                unsigned v;
                if (!isxdigit((unsigned char)token[2 * i]) || !isxdigit((unsigned char)token[2 * i + 1]) ||
                    sscanf(token + 2 * i, "%2x", &v) != 1)
                        return false;
                q->tok.user[i] = (char)v;
        }
        q->tok.user[hl / 2] = '\0';
        if (!session_id_valid(q->tok.user) || access_mac(q->d, q->tok.user, q->sandbox, mac) < 0)
                return false;
        return token_equal_ct(mac, dot + 1, E2B_MAC_HEX);
}

/* ---- routing ---- */

static bool sandbox_id_valid(const char *s, size_t n)
{
        if (n == 0 || n > E2B_ID_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
                        return false;
        return true;
}

/* A template id as the SDK names one in a path: 1-E2B_ID_MAX of [a-z0-9-]
 * (a snapshot's is snap-<hex>). */
static bool template_id_valid(const char *s, size_t n)
{
        if (n == 0 || n > E2B_ID_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
                        return false;
        return true;
}

/* path matches pattern; {id} (a sandbox), {ctx} (a context), {snap} (a
 * template id) or {sec} (a secret's id or name, checked by e2b_secrets.c)
 * is one segment, copied to id. */
static bool path_match(const char *pattern, const char *path, char id[E2B_SEGMENT_MAX + 1], bool *ret_bad_id)
{
        const char *p = pattern, *u = path;

        while (*p) {
                if (strncmp(p, "{sec}", 5) == 0) {
                        size_t n = strcspn(u, "/");
                        if (n == 0)
                                return false;
                        if (n > E2B_SEGMENT_MAX) {
                                *ret_bad_id = true;
                        } else {
                                memcpy(id, u, n);
                                id[n] = '\0';
                        }
                        u += n;
                        p += 5;
                        continue;
                }
                if (strncmp(p, "{snap}", 6) == 0) {
                        size_t n = strcspn(u, "/");
                        if (n == 0)
                                return false;
                        if (!template_id_valid(u, n)) {
                                *ret_bad_id = true;
                        } else {
                                memcpy(id, u, n);
                                id[n] = '\0';
                        }
                        u += n;
                        p += 6;
                        continue;
                }
                if (strncmp(p, "{id}", 4) == 0 || strncmp(p, "{ctx}", 5) == 0) {
                        size_t plen = p[1] == 'i' ? 4 : 5;
                        size_t n = strcspn(u, "/");
                        if (n == 0)
                                return false;
                        /* a context id may be default-js (e2b_jupyter.c) */
                        if (!sandbox_id_valid(u, n) && !(plen == 5 && n == 10 && strncmp(u, "default-js", 10) == 0)) {
                                *ret_bad_id = true;
                                n = 0;
                        } else {
                                memcpy(id, u, n);
                                id[n] = '\0';
                        }
                        u += strcspn(u, "/");
                        p += plen;
                        continue;
                }
                if (*p++ != *u++)
                        return false;
        }
        return *u == '\0';
}

/* The getHost port the request names (its Host under e2b.domain, or
 * E2b-Sandbox-Id with a port that is not envd's or the interpreter's), id in
 * ret_id; 0: none; -1: E2b-Sandbox-Port is not a port. */
static int proxy_target(const struct daemon *d, struct MHD_Connection *conn, char ret_id[E2B_ID_MAX + 1])
{
        const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        const char *sid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2b-Sandbox-Id");
        const char *port = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2b-Sandbox-Port");
        int p = e2b_host_target(d->cfg.e2b_domain, host, ret_id);

        if (p || !sid || !sandbox_id_valid(sid, strlen(sid)))
                return p; /* a host name's envd and interpreter ports too (e2b_begin) */
        p = port ? e2b_port_parse(port, strlen(port)) : 0;
        if (!p)
                return -1;
        if (p == E2B_ENVD_PORT || p == E2B_JUPYTER_PORT)
                return 0;
        sbx_strlcpy(ret_id, sid, E2B_ID_MAX + 1);
        return p;
}

bool e2b_claims(const struct daemon *d, struct MHD_Connection *conn, const char *url)
{
        char id[E2B_ID_MAX + 1];

        return proxy_target(d, conn, id) > 0 || MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2b-Sandbox-Id") ||
               strcmp(url, "/sandboxes") == 0 || strncmp(url, "/sandboxes/", 11) == 0 ||
               strcmp(url, "/v2/sandboxes") == 0 || strncmp(url, "/v2/sandboxes/", 14) == 0 ||
               strcmp(url, "/snapshots") == 0 || strncmp(url, "/templates/", 11) == 0 || strcmp(url, "/secrets") == 0 ||
               strncmp(url, "/secrets/", 9) == 0;
}

bool e2b_decided(const struct e2b_req *q)
{
        return q->status != 0;
}

bool e2b_authenticated(const struct e2b_req *q)
{
        return q->authed;
}

int e2b_auth_failures(const struct e2b_req *q)
{
        return q->c.auth_failures;
}

void e2b_decide(struct e2b_req *q, int status, const char *fmt, ...)
{
        va_list ap;

        q->status = status;
        va_start(ap, fmt);
        vsnprintf(q->msg, sizeof(q->msg), fmt, ap);
        va_end(ap);
}

int e2b_begin(struct daemon *d, const struct api_conn *c, struct MHD_Connection *conn, const char *url,
              const char *verb, struct e2b_req **ret)
{
        struct e2b_req *q = calloc(1, sizeof(*q));
        const char *sid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2b-Sandbox-Id");
        const char *port = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2b-Sandbox-Port");
        const char *len = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        bool envd = sid != NULL, bad_id = false, path_known = false;
        int want_port = 0, proxy;
        char hid[E2B_ID_MAX + 1];
        struct fronterr e = {0};

        *ret = q;
        if (!q)
                return -ENOMEM;
        q->d = d;
        q->c = *c;
        q->pfd = -1;
        proxy = proxy_target(d, conn, q->sandbox);
        if (proxy == E2B_ENVD_PORT || proxy == E2B_JUPYTER_PORT) { /* the host name names envd's */
                sbx_strlcpy(hid, q->sandbox, sizeof(hid));
                sid = hid;
                envd = true;
                port = proxy == E2B_ENVD_PORT ? "49983" : "49999";
        } else if (proxy > 0) {
                q->head_request = strcmp(verb, MHD_HTTP_METHOD_HEAD) == 0;
                e2b_proxy_begin(q, conn, url, verb, proxy);
                return 0;
        }
        if (envd) {
                if (port && strcmp(port, "49983") == 0)
                        want_port = E2B_ENVD_PORT;
                else if (port && strcmp(port, "49999") == 0)
                        want_port = E2B_JUPYTER_PORT;
                if (!sandbox_id_valid(sid, strlen(sid))) {
                        e2b_decide(q, 400, "E2b-Sandbox-Id must be 1-%d characters of [a-z0-9]", E2B_ID_MAX);
                        return 0;
                }
                if (!want_port) { /* proxy_target found no port in it */
                        e2b_decide(q, 400, "E2b-Sandbox-Port must be a port, 1-65535");
                        return 0;
                }
                sbx_strlcpy(q->sandbox, sid, sizeof(q->sandbox));
        }
        for (size_t i = 0; i < ELEMENTSOF(routes); i++) {
                char id[E2B_SEGMENT_MAX + 1] = "";
                if (routes[i].port != want_port || !path_match(routes[i].path, url, id, &bad_id))
                        continue;
                path_known = true;
                if (strcmp(routes[i].verb, verb) == 0) {
                        q->route = &routes[i];
                        if (want_port)
                                sbx_strlcpy(q->context, id, sizeof(q->context));
                        else if (strstr(routes[i].path, "{sec}"))
                                sbx_strlcpy(q->secret, id, sizeof(q->secret));
                        else if (strstr(routes[i].path, "{snap}"))
                                sbx_strlcpy(q->snapshot, id, sizeof(q->snapshot));
                        else
                                sbx_strlcpy(q->sandbox, id, sizeof(q->sandbox));
                        break;
                }
        }
        if (bad_id && strncmp(url, "/secrets/", 9) == 0) {
                e2b_decide(q, 400, "a secret id or name is at most %d characters", E2B_SEGMENT_MAX);
                return 0;
        }
        if (bad_id && strncmp(url, "/templates/", 11) == 0) {
                e2b_decide(q, 400, "a template id is 1-%d characters of [a-z0-9-]", E2B_ID_MAX);
                return 0;
        }
        if (bad_id) {
                e2b_decide(q, 400, "a sandbox id is 1-%d characters of [a-z0-9]", E2B_ID_MAX);
                return 0;
        }
        if (!q->route) {
                if (path_known)
                        e2b_decide(q, 405, "%s is not a method of %s", verb, url);
                else
                        e2b_decide(q, 404, "no such path on this sandboxd's E2B front: %s", url);
                return 0;
        }
        if (q->sandbox[0])
                snprintf(q->session, sizeof(q->session), E2B_SESSION_PREFIX "%s", q->sandbox);
        if (envd) {
                const char *at = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Access-Token");
                /* the code interpreter's SDK sends only the traffic token (the same token here) on /contexts */
                if (!at)
                        at = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2B-Traffic-Access-Token");
                if (!e2b_access_check(q, at)) {
                        q->c.auth_failures++;
                        memset(&q->tok, 0, sizeof(q->tok));
                        /* a sandbox of another user, or none, reads the same */
                        e2b_decide(q, at ? 404 : 401,
                                   at ? "sandbox %s not found" : "X-Access-Token is required (returned at create)",
                                   q->sandbox);
                        return 0;
                }
                q->tok.role = TOKEN_ROLE_AGENT;
        } else {
                const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-API-Key");
                if (api_authenticate(&q->c, key, "e2b", &q->tok, &e) < 0) {
                        e2b_decide(q, http_status_for_code(e.code), "%s", e.msg);
                        return 0;
                }
        }
        q->authed = true;
        q->max = q->route->body_max;
        if (q->max == E2B_UPLOAD_MAX && (size_t)d->cfg.max_file_bytes < q->max)
                q->max = (size_t)d->cfg.max_file_bytes;
        if (len && strtoull(len, NULL, 10) > q->max)
                e2b_decide(q, 413, "the body is larger than %zu bytes", q->max);
        return 0;
}

void e2b_body(struct e2b_req *q, const char *data, size_t n)
{
        char *nb;

        if (q->proxy_port) {
                e2b_proxy_body(q, data, n);
                return;
        }
        if (q->too_large || q->len + n > q->max) {
                if (!q->too_large)
                        e2b_decide(q, 413, "the body is larger than %zu bytes", q->max);
                q->too_large = true;
                free(q->body);
                q->body = NULL;
                q->len = 0;
                return;
        }
        nb = realloc(q->body, q->len + n + 1);
        if (!nb) {
                q->too_large = true;
                return;
        }
        memcpy(nb + q->len, data, n);
        q->body = nb;
        q->len += n;
        q->body[q->len] = '\0';
}

int e2b_respond(struct e2b_req *q, struct MHD_Connection *conn, bool close)
{
        if (q->status && close) {
                cJSON *o = cJSON_CreateObject();
                char *text;

                cJSON_AddNumberToObject(o, "code", q->status);
                jsonutil_add_text(o, "message", q->msg);
                text = cJSON_PrintUnformatted(o);
                cJSON_Delete(o);
                return text ? queue(conn, q->status, "application/json", text, strlen(text), true) : MHD_NO;
        }
        if (q->status)
                return e2b_reply_error(conn, q->status, "%s", q->msg);
        if (q->proxy_port)
                return e2b_proxy_respond(q, conn);
        if (q->too_large)
                return e2b_reply_error(conn, 413, "the body is larger than %zu bytes", q->max);
        return q->route->run(q, conn);
}

void e2b_req_free(struct e2b_req *q)
{
        if (!q)
                return;
        e2b_proxy_free(q);
        free(q->body);
        free(q);
}

/* ---- the control API ---- */

/* The body as a JSON object, or NULL with E2B's error queued. */
static cJSON *body_object(struct e2b_req *q, struct MHD_Connection *conn, enum MHD_Result *ret_answer)
{
        struct fronterr e = {0};
        cJSON *o = e2b_parse_object(q->body, q->len, &e);

        if (!o)
                *ret_answer = e2b_reply_fronterr(conn, &e);
        return o;
}

const char *e2b_unknown_member(const cJSON *o, const char *const *names)
{
        const cJSON *m;

        cJSON_ArrayForEach(m, o) {
                size_t i = 0;
                while (names[i] && strcmp(names[i], m->string) != 0)
                        i++;
                if (!names[i])
                        return m->string;
        }
        return NULL;
}

/* The image of template (e2b.templates, else base and code-interpreter-v1
 * to the configured image); false when there is none. names gets the list. */
static bool template_image(const struct sbx_config *cfg, const char *tmpl, char *image, size_t image_size, char *names,
                           size_t names_size)
{
        char list[sizeof(cfg->e2b_templates)];
        char *save = NULL;
        bool found = false;

        names[0] = '\0';
        if (!cfg->e2b_templates[0]) {
                snprintf(names, names_size, "base, code-interpreter-v1");
                if (strcmp(tmpl, "base") == 0 || strcmp(tmpl, "code-interpreter-v1") == 0) {
                        sbx_strlcpy(image, cfg->image, image_size);
                        return true;
                }
                return false;
        }
        sbx_strlcpy(list, cfg->e2b_templates, sizeof(list));
        for (char *it = strtok_r(list, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
                char *eq = strchr(it, '=');
                while (*it == ' ')
                        it++;
                if (!eq)
                        continue;
                *eq = '\0';
                for (char *t = eq - 1; t >= it && *t == ' '; t--)
                        *t = '\0';
                for (eq++; *eq == ' '; eq++)
                        ;
                for (char *t = eq + strlen(eq); t > eq && t[-1] == ' ';)
                        *--t = '\0';
                if (!found && strcmp(it, tmpl) == 0) {
                        sbx_strlcpy(image, eq, image_size);
                        found = true;
                }
                snprintf(names + strlen(names), names_size - strlen(names), "%s%s", names[0] ? ", " : "", it);
        }
        return found;
}

/* The template whose image is image (the first), else the image itself. */
static void template_of(const struct sbx_config *cfg, const char *image, char *out, size_t out_size)
{
        char list[sizeof(cfg->e2b_templates)], *save = NULL;

        if (!image || !*image)
                image = cfg->image;
        if (!cfg->e2b_templates[0]) {
                sbx_strlcpy(out, !image || !*image || strcmp(image, cfg->image) == 0 ? "base" : image, out_size);
                return;
        }
        sbx_strlcpy(list, cfg->e2b_templates, sizeof(list));
        for (char *it = strtok_r(list, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
                char *eq = strchr(it, '='), *img;
                if (!eq)
                        continue;
                *eq = '\0';
                for (img = eq + 1; *img == ' '; img++)
                        ;
                while (*it == ' ')
                        it++;
                for (char *t = eq - 1; t >= it && *t == ' '; t--)
                        *t = '\0';
                if (image && strncmp(img, image, strcspn(img, " ")) == 0 && strlen(image) == strcspn(img, " ")) {
                        sbx_strlcpy(out, it, out_size);
                        return;
                }
        }
        sbx_strlcpy(out, image ? image : "", out_size);
}

static cJSON *sandbox_object(struct e2b_req *q, const char *tmpl, bool with_token)
{
        cJSON *o = cJSON_CreateObject();
        char at[E2B_ACCESS_TOKEN_MAX + 1];

        cJSON_AddStringToObject(o, "sandboxID", q->sandbox);
        cJSON_AddStringToObject(o, "templateID", tmpl);
        cJSON_AddStringToObject(o, "clientID", "sandboxd");
        cJSON_AddStringToObject(o, "envdVersion", E2B_ENVD_VERSION);
        if (with_token && access_token(q, at) == 0) {
                cJSON_AddStringToObject(o, "envdAccessToken", at);
                cJSON_AddStringToObject(o, "trafficAccessToken", at);
                explicit_bzero(at, sizeof(at));
        }
        if (q->d->cfg.e2b_domain[0]) /* the SDK's getHost(port) names {port}-{id}.<domain> */
                cJSON_AddStringToObject(o, "domain", q->d->cfg.e2b_domain);
        else
                cJSON_AddNullToObject(o, "domain");
        return o;
}

/* One of allowOut, denyOut as narrow_egress patterns into a (a JSON
 * array): a host name, *.suffix or one address ("/32" and "/128" are one
 * address too); 0.0.0.0/0 and ::/0 (the SDK's ALL_TRAFFIC) in denyOut set
 * *ret_all. NULL when fine, else why not (in why). */
static const char *network_list(const cJSON *v, const char *name, cJSON *a, bool *ret_all, char *why, size_t why_size)
{
        const cJSON *it;

        if (!v || cJSON_IsNull(v))
                return NULL;
        if (!cJSON_IsArray(v)) {
                snprintf(why, why_size, "network.%s must be an array of strings", name);
                return why;
        }
        cJSON_ArrayForEach(it, v) {
                char entry[STORE_EGRESS_PATTERN_MAX];
                char *slash;
                if (!cJSON_IsString(it) || !sbx_strlcpy(entry, it->valuestring, sizeof(entry))) {
                        snprintf(why, why_size, "network.%s must be an array of host names or addresses", name);
                        return why;
                }
                if (ret_all && (strcmp(entry, "0.0.0.0/0") == 0 || strcmp(entry, "::/0") == 0)) {
                        *ret_all = true;
                        continue;
                }
                slash = strchr(entry, '/');
                if (slash && (strcmp(slash, "/32") == 0 || strcmp(slash, "/128") == 0))
                        *slash = '\0';
                else if (slash) {
                        snprintf(why, why_size,
                                 "network.%s: %.64s: sandboxd takes host names, *.suffix and single addresses here, "
                                 "not CIDR blocks (docs/e2b.md)",
                                 name, it->valuestring);
                        return why;
                }
                cJSON_AddItemToArray(a, cJSON_CreateString(entry));
        }
        return NULL;
}

/* E2B's network (allowOut, denyOut) and allow_internet_access as the
 * params of narrow_egress into *ret (NULL when nothing narrows). E2B's
 * rules: an allowOut entry passes even where denyOut says no, and
 * allow_internet_access=false is denyOut 0.0.0.0/0. sandboxd's one more:
 * allowOut alone also keeps the sandbox to those hosts (no default of
 * everything to keep them out of). NULL when fine, else why not. */
static const char *network_narrowing(const cJSON *n, const cJSON *internet, cJSON **ret, char *why, size_t why_size)
{
        cJSON *p = cJSON_CreateObject(), *allow, *deny;
        bool all = cJSON_IsFalse(internet);
        const char *bad;

        *ret = NULL;
        if (!p)
                return "out of memory";
        allow = cJSON_AddArrayToObject(p, "allow");
        deny = cJSON_AddArrayToObject(p, "deny");
        if ((bad = network_list(cJSON_GetObjectItemCaseSensitive(n, "allowOut"), "allowOut", allow, NULL, why,
                                why_size)) ||
            (bad = network_list(cJSON_GetObjectItemCaseSensitive(n, "denyOut"), "denyOut", deny, &all, why,
                                why_size))) {
                cJSON_Delete(p);
                return bad;
        }
        cJSON_AddBoolToObject(p, "only", all || allow->child);
        *ret = p;
        return NULL;
}

/* network: {allowPublicTraffic} is served (getHost traffic behind the
 * access token when false, e2b_proxy.c), allowOut and denyOut narrow the
 * egress (network_narrowing), rules are e2b_rules_parse's; maskRequestHost
 * and egressProxy are refused, as is metadata naming E2B_TRAFFIC_LABEL. NULL when the create
 * goes on, else why not (in why). */
static const char *create_network(const cJSON *b, bool *ret_private, char *why, size_t why_size)
{
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(b, "network"), *m, *it;

        m = cJSON_GetObjectItemCaseSensitive(b, "metadata");
        if (cJSON_IsObject(m) && cJSON_GetObjectItemCaseSensitive(m, E2B_TRAFFIC_LABEL)) {
                snprintf(why, why_size, "metadata key %s is sandboxd's own", E2B_TRAFFIC_LABEL);
                return why;
        }
        if (!n || cJSON_IsNull(n))
                return NULL;
        if (!cJSON_IsObject(n))
                return "network must be an object";
        cJSON_ArrayForEach(it, n) {
                if (strcmp(it->string, "allowPublicTraffic") == 0) {
                        if (!cJSON_IsBool(it) && !cJSON_IsNull(it))
                                return "network.allowPublicTraffic must be a boolean";
                        *ret_private = cJSON_IsFalse(it);
                } else if (strcmp(it->string, "allowOut") != 0 && strcmp(it->string, "denyOut") != 0 &&
                           strcmp(it->string, "rules") != 0 && !cJSON_IsNull(it) &&
                           !(cJSON_IsArray(it) && !it->child) && !(cJSON_IsObject(it) && !it->child)) {
                        snprintf(why, why_size, "network.%.64s is not supported by sandboxd yet (docs/e2b.md)",
                                 it->string);
                        return why;
                }
        }
        return NULL;
}

/* narrow_egress with params (taken) on q->session; -1 with e set. */
static int narrow(struct e2b_req *q, cJSON *params, struct fronterr *e)
{
        cJSON *res = NULL;

        cJSON_AddStringToObject(params, "session", q->session);
        if (e2b_call(q, "narrow_egress", params, &res, e) < 0)
                return -1;
        cJSON_Delete(res);
        return 0;
}

/* fork_session into q->session from {key: from} ("session" or "snapshot"),
 * then its TTL; a fork whose TTL cannot be set is destroyed, never left
 * without one. 0, or -1 with e set. */
static int fork_into(struct e2b_req *q, const char *key, const char *from, int64_t timeout, struct fronterr *e)
{
        cJSON *params = cJSON_CreateObject(), *res = NULL;
        struct fronterr ignored = {0};

        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddStringToObject(cJSON_AddObjectToObject(params, "from"), key, from);
        if (e2b_call(q, "fork_session", params, &res, e) < 0)
                return -1;
        cJSON_Delete(res);
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddNumberToObject(params, "ttl_seconds", (double)timeout);
        if (e2b_call(q, "set_session_ttl", params, &res, e) == 0) {
                cJSON_Delete(res);
                return 0;
        }
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddTrueToObject(params, "purge");
        (void)e2b_call(q, "destroy_session", params, &res, &ignored);
        cJSON_Delete(res);
        return -1;
}

/* The body's "timeout": absent or null leaves *ret as it is; else whole
 * seconds from min to SESSSPEC_TTL_MAX_S into *ret, or an answer queued in
 * *ans and -1. */
static int body_timeout(struct e2b_req *q, struct MHD_Connection *conn, const cJSON *b, int64_t min, int64_t *ret,
                        enum MHD_Result *ans)
{
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "timeout");
        int64_t max = q->d->cfg.session_ttl_max_s;

        if (!t || cJSON_IsNull(t))
                return 0;
        if (!cJSON_IsNumber(t) || t->valuedouble < (double)min || t->valuedouble > (double)max ||
            t->valuedouble != (double)(int64_t)t->valuedouble) {
                *ans = e2b_reply_error(conn, 400, "timeout must be whole seconds, %lld-%lld", (long long)min,
                                       (long long)max);
                return -1;
        }
        *ret = (int64_t)t->valuedouble;
        return 0;
}

/* Sandbox.create(snapshotId): fork_session {from: {snapshot}} under a new
 * id, with the snapshot's image, env and labels; only timeout (and the
 * SDK's defaults) may be given beside it. */
static enum MHD_Result create_from_snapshot(struct e2b_req *q, struct MHD_Connection *conn, const cJSON *b,
                                            const char *snap)
{
        static const char *const allowed[] = {"templateID", "timeout", "secure", "autoPause", "allow_internet_access",
                                              NULL};
        const cJSON *m;
        char hex[E2B_ID_MAX + 1];
        struct fronterr e = {0};
        enum MHD_Result ans = MHD_NO;
        int64_t timeout = 300;

        cJSON_ArrayForEach(m, b) {
                size_t i = 0;
                while (allowed[i] && strcmp(allowed[i], m->string) != 0)
                        i++;
                if (!allowed[i] && !cJSON_IsNull(m) && !(cJSON_IsObject(m) && !m->child))
                        return e2b_reply_error(conn, 400, "%s cannot be given with a snapshot: it keeps its own",
                                               m->string);
        }
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "autoPause")) ||
            cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(b, "allow_internet_access")))
                return e2b_reply_error(conn, 400, "autoPause and allow_internet_access=false are not supported yet");
        for (size_t i = 2; allowed[i]; i++) { /* secure, autoPause, allow_internet_access */
                m = cJSON_GetObjectItemCaseSensitive(b, allowed[i]);
                if (m && !cJSON_IsBool(m) && !cJSON_IsNull(m))
                        return e2b_reply_error(conn, 400, "%s must be a boolean", allowed[i]);
        }
        if (body_timeout(q, conn, b, 1, &timeout, &ans) < 0)
                return ans;
        if (sbx_random_hex(hex, 10) < 0)
                return e2b_reply_error(conn, 500, "no randomness for a sandbox id");
        sbx_strlcpy(q->sandbox, hex, sizeof(q->sandbox));
        snprintf(q->session, sizeof(q->session), E2B_SESSION_PREFIX "%s", q->sandbox);
        if (fork_into(q, "snapshot", snap, timeout, &e) < 0) {
                if (e.code && strcmp(e.code, "not_found") == 0)
                        return e2b_reply_error(conn, 400, "unknown template or snapshot %.64s", snap);
                return e2b_reply_fronterr(conn, &e);
        }
        return e2b_reply_json(conn, 201, sandbox_object(q, snap, true));
}

static enum MHD_Result c_create(struct e2b_req *q, struct MHD_Connection *conn)
{
        static const char *const known[] = {
                "templateID",   "timeout",         "metadata",   "envVars", "secure", "allow_internet_access",
                "autoPause",    "autoPauseMemory", "autoResume", "network", "mcp",    "iam",
                "volumeMounts", "alias",           NULL};
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *b = body_object(q, conn, &ans);
        const cJSON *t, *m;
        const char *bad;
        char image[256], names[512], hex[E2B_ID_MAX + 1];
        cJSON *params, *res = NULL;
        struct fronterr e = {0};
        int64_t timeout = 300; /* E2B's documented default (the SDK may leave it to the server) */
        bool private_traffic = false;
        cJSON *narrowing = NULL;
        _cleanup_(cjson_freep) cJSON *rules = NULL;
        char why[512];

        if (!b)
                return ans;
        if ((bad = e2b_unknown_member(b, known)))
                return e2b_reply_error(conn, 400, "unknown field %s", bad);
        t = cJSON_GetObjectItemCaseSensitive(b, "templateID");
        if (!cJSON_IsString(t) || !t->valuestring[0])
                return e2b_reply_error(conn, 400, "templateID is required (a string)");
        if (!template_image(&q->d->cfg, t->valuestring, image, sizeof(image), names, sizeof(names))) {
                if (strncmp(t->valuestring, "snap-", 5) == 0)
                        return create_from_snapshot(q, conn, b, t->valuestring);
                return e2b_reply_error(conn, 400, "unknown template %.64s; this sandboxd has: %s", t->valuestring,
                                       names);
        }
        if (body_timeout(q, conn, b, 1, &timeout, &ans) < 0)
                return ans;
        /* what sandboxd cannot honour yet is refused, never dropped in silence */
        static const char *const unsupported[] = {"mcp", "iam", "volumeMounts", "autoResume", NULL};
        for (size_t i = 0; unsupported[i]; i++) {
                m = cJSON_GetObjectItemCaseSensitive(b, unsupported[i]);
                if (m && !cJSON_IsNull(m) && !(cJSON_IsObject(m) && !m->child) && !(cJSON_IsArray(m) && !m->child))
                        return e2b_reply_error(conn, 400, "%s is not supported by sandboxd yet (docs/e2b.md)",
                                               unsupported[i]);
        }
        if ((bad = create_network(b, &private_traffic, why, sizeof(why))))
                return e2b_reply_error(conn, 400, "%s", bad);
        m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(b, "network"), "rules");
        if (m && !cJSON_IsNull(m) && (bad = e2b_rules_parse(q, m, &rules, why, sizeof(why))))
                return e2b_reply_error(conn, 400, "%s", bad);
        m = cJSON_GetObjectItemCaseSensitive(b, "autoPause");
        if (cJSON_IsTrue(m))
                return e2b_reply_error(conn, 400, "autoPause is not supported by sandboxd yet (docs/e2b.md)");
        m = cJSON_GetObjectItemCaseSensitive(b, "allow_internet_access");
        if (m && !cJSON_IsBool(m) && !cJSON_IsNull(m))
                return e2b_reply_error(conn, 400, "allow_internet_access must be a boolean");
        if ((bad = network_narrowing(cJSON_GetObjectItemCaseSensitive(b, "network"), m, &narrowing, why, sizeof(why))))
                return e2b_reply_error(conn, 400, "%s", bad);
        if (!narrowing)
                return e2b_reply_error(conn, 500, "out of memory");
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(narrowing, "only")) &&
            !cJSON_GetObjectItemCaseSensitive(narrowing, "deny")->child) {
                cJSON_Delete(narrowing); /* nothing narrows: the operator's policy as it is */
                narrowing = NULL;
        }
        m = cJSON_GetObjectItemCaseSensitive(b, "secure");
        if (m && !cJSON_IsBool(m) && !cJSON_IsNull(m))
                return e2b_reply_error(conn, 400, "secure must be a boolean");

        if (sbx_random_hex(hex, 10) < 0)
                return e2b_reply_error(conn, 500, "no randomness for a sandbox id");
        sbx_strlcpy(q->sandbox, hex, sizeof(q->sandbox));
        snprintf(q->session, sizeof(q->session), E2B_SESSION_PREFIX "%s", q->sandbox);
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddStringToObject(params, "image", image);
        cJSON_AddNumberToObject(params, "ttl_seconds", (double)timeout);
        m = cJSON_GetObjectItemCaseSensitive(b, "envVars");
        if (m && !cJSON_IsNull(m))
                cJSON_AddItemToObject(params, "env", cJSON_Duplicate(m, true));
        m = cJSON_GetObjectItemCaseSensitive(b, "metadata");
        if (m && !cJSON_IsNull(m))
                cJSON_AddItemToObject(params, "labels", cJSON_Duplicate(m, true));
        if (private_traffic) {
                cJSON *labels = cJSON_GetObjectItemCaseSensitive(params, "labels");
                if (!cJSON_IsObject(labels))
                        labels = cJSON_AddObjectToObject(params, "labels"); /* a bad one was refused above */
                cJSON_AddStringToObject(labels, E2B_TRAFFIC_LABEL, "private");
        }
        if (e2b_call(q, "create_session", params, &res, &e) < 0) {
                cJSON_Delete(narrowing);
                return e2b_reply_fronterr(conn, &e);
        }
        cJSON_Delete(res);
        /* before the SDK has the id, nothing runs in it yet: a sandbox whose narrowing or rules are refused goes */
        if ((narrowing && narrow(q, TAKE_PTR(narrowing), &e) < 0) ||
            (rules && e2b_rules_apply(q, rules, false, &e) < 0)) {
                struct fronterr ignored = {0};
                params = cJSON_CreateObject();
                cJSON_AddStringToObject(params, "session", q->session);
                cJSON_AddTrueToObject(params, "purge");
                if (e2b_call(q, "destroy_session", params, &res, &ignored) == 0)
                        cJSON_Delete(res);
                return e2b_reply_fronterr(conn, &e);
        }
        return e2b_reply_json(conn, 201, sandbox_object(q, t->valuestring, true));
}

/* updateNetwork: E2B replaces the sandbox's egress configuration whole
 * (an omitted field is cleared): the narrowing is replaced. */
static enum MHD_Result c_network(struct e2b_req *q, struct MHD_Connection *conn)
{
        static const char *const known[] = {"allowOut",    "denyOut", "allow_internet_access",
                                            "egressProxy", "rules",   NULL};
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *b = body_object(q, conn, &ans);
        const cJSON *m, *rm;
        const char *bad;
        cJSON *params = NULL;
        _cleanup_(cjson_freep) cJSON *rules = NULL;
        struct fronterr e = {0};
        char why[512];

        if (!b)
                return ans;
        if ((bad = e2b_unknown_member(b, known)))
                return e2b_reply_error(conn, 400, "unknown field %s", bad);
        m = cJSON_GetObjectItemCaseSensitive(b, "egressProxy");
        if (m && !cJSON_IsNull(m) && !(cJSON_IsObject(m) && !m->child))
                return e2b_reply_error(conn, 400, "egressProxy is not supported by sandboxd yet (docs/e2b.md)");
        m = cJSON_GetObjectItemCaseSensitive(b, "allow_internet_access");
        if (m && !cJSON_IsBool(m) && !cJSON_IsNull(m))
                return e2b_reply_error(conn, 400, "allow_internet_access must be a boolean");
        if (!e2b_session_exists(q))
                return e2b_reply_error(conn, 404, "sandbox %s not found", q->sandbox);
        rm = cJSON_GetObjectItemCaseSensitive(b, "rules");
        if (rm && !cJSON_IsNull(rm) && (bad = e2b_rules_parse(q, rm, &rules, why, sizeof(why))))
                return e2b_reply_error(conn, 400, "%s", bad);
        if ((bad = network_narrowing(b, m, &params, why, sizeof(why))))
                return e2b_reply_error(conn, 400, "%s", bad);
        if (!params)
                return e2b_reply_error(conn, 500, "out of memory");
        if (narrow(q, params, &e) < 0 || e2b_rules_apply(q, rules, true, &e) < 0)
                return e2b_reply_fronterr(conn, &e);
        return e2b_reply_raw(conn, 204, NULL, NULL, 0);
}

void e2b_add_time(cJSON *o, const char *key, double ms)
{
        char buf[40];
        time_t s = (time_t)(ms / 1000);
        struct tm tm;

        if (ms <= 0 || !gmtime_r(&s, &tm)) {
                cJSON_AddNullToObject(o, key);
                return;
        }
        strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
        cJSON_AddStringToObject(o, key, buf);
}

/* list_sessions' entry as E2B's ListedSandbox (NULL: not an E2B sandbox). */
static cJSON *listed(struct e2b_req *q, const cJSON *s)
{
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(s, "session");
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(s, "state");
        /* image_name only when it is not the configured image (create_session) */
        const cJSON *image = cJSON_GetObjectItemCaseSensitive(s, "image_name");
        const cJSON *labels = cJSON_GetObjectItemCaseSensitive(s, "labels");
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(s, "resources");
        const cJSON *mem = cJSON_GetObjectItemCaseSensitive(res, "memory");
        const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(res, "cpu");
        const cJSON *disk = cJSON_GetObjectItemCaseSensitive(res, "disk");
        char tmpl[256];
        cJSON *o;

        if (!cJSON_IsString(name) || strncmp(name->valuestring, E2B_SESSION_PREFIX, 4) != 0)
                return NULL;
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "sandboxID", name->valuestring + 4);
        template_of(&q->d->cfg, cJSON_IsString(image) ? image->valuestring : NULL, tmpl, sizeof(tmpl));
        cJSON_AddStringToObject(o, "templateID", tmpl);
        cJSON_AddStringToObject(o, "clientID", "sandboxd");
        e2b_add_time(o, "startedAt", cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(s, "created_at")));
        e2b_add_time(o, "endAt", cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(s, "expires_at")));
        cJSON_AddNumberToObject(o, "cpuCount", cJSON_IsNumber(cpu) && cpu->valuedouble >= 1 ? cpu->valuedouble : 1);
        cJSON_AddNumberToObject(o, "memoryMB", cJSON_IsNumber(mem) ? mem->valuedouble / (1024 * 1024) : 0);
        cJSON_AddNumberToObject(o, "diskSizeMB", cJSON_IsNumber(disk) ? disk->valuedouble / (1024 * 1024) : 0);
        cJSON *meta = cJSON_IsObject(labels) ? cJSON_Duplicate(labels, true) : cJSON_CreateObject();
        cJSON_DeleteItemFromObjectCaseSensitive(meta, E2B_TRAFFIC_LABEL); /* sandboxd's, not the tenant's */
        cJSON_AddItemToObject(o, "metadata", meta);
        /* a stopped session (its timeout ran out, or idle) keeps its workspace: E2B's paused */
        cJSON_AddStringToObject(o, "state",
                                cJSON_IsString(state) && (strcmp(state->valuestring, "paused") == 0 ||
                                                          strcmp(state->valuestring, "stopped") == 0)
                                        ? "paused"
                                        : "running");
        cJSON_AddStringToObject(o, "envdVersion", E2B_ENVD_VERSION);
        return o;
}

/* The query's metadata ("k=v&k2=v2", URL-encoded once more by the SDK) as a labels filter. */
static int metadata_filter(struct MHD_Connection *conn, cJSON **ret, char *why, size_t why_size)
{
        const char *m = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "metadata");
        _cleanup_free_ char *copy = NULL;
        char *save = NULL;
        cJSON *f;

        *ret = NULL;
        if (!m || !*m)
                return 0;
        if (strlen(m) > 4096 || !(copy = strdup(m)) || !(f = cJSON_CreateObject())) {
                snprintf(why, why_size, "metadata is longer than 4096 bytes");
                return -EINVAL;
        }
        for (char *kv = strtok_r(copy, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
                char *eq = strchr(kv, '=');
                if (!eq) {
                        cJSON_Delete(f);
                        snprintf(why, why_size, "metadata must be key=value pairs joined by &");
                        return -EINVAL;
                }
                *eq = '\0';
                (void)MHD_http_unescape(kv);
                (void)MHD_http_unescape(eq + 1);
                cJSON_AddStringToObject(f, kv, eq + 1);
        }
        *ret = f;
        return 0;
}

/* The state filter: every state= (repeated, or comma-joined). */
struct states {
        bool any, running, paused;
};

static enum MHD_Result collect_state(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
        struct states *w = cls;

        if (!key || strcmp(key, "state") != 0 || !value)
                return MHD_YES;
        w->any = true;
        w->running |= strstr(value, "running") != NULL;
        w->paused |= strstr(value, "paused") != NULL;
        return MHD_YES;
}

static int session_cmp(const void *a, const void *b)
{
        const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
        return strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "sandboxID")),
                      cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(y, "sandboxID")));
}

/* 200 with the JSON array out (consumed) and, when next is not empty, the
 * x-next-token header with which the SDK's paginators ask for more. */
enum MHD_Result e2b_reply_page(struct MHD_Connection *conn, cJSON *out, const char *next)
{
        char *text = cJSON_PrintUnformatted(out);
        struct MHD_Response *resp;
        enum MHD_Result r;

        cJSON_Delete(out);
        if (!text)
                return MHD_NO;
        resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(text);
                return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        if (next[0])
                MHD_add_response_header(resp, "x-next-token", next);
        r = MHD_queue_response(conn, 200, resp);
        MHD_destroy_response(resp);
        metrics_http_status(200);
        return r;
}

static enum MHD_Result c_list(struct e2b_req *q, struct MHD_Connection *conn)
{
        bool v2 = strcmp(q->route->path, "/v2/sandboxes") == 0;
        const char *next = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "nextToken");
        struct states want = {0};
        const char *lim = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit");
        cJSON *filter = NULL, *params, *res = NULL, *out, *s;
        struct fronterr e = {0};
        char why[128];
        size_t n = 0, k = 0;
        long limit = E2B_LIST_LIMIT_MAX;
        char *end;

        if (metadata_filter(conn, &filter, why, sizeof(why)) < 0)
                return e2b_reply_error(conn, 400, "%s", why);
        if (lim) {
                errno = 0;
                limit = strtol(lim, &end, 10);
                if (!*lim || *end || errno || limit < 1 || limit > E2B_LIST_LIMIT_MAX) {
                        cJSON_Delete(filter);
                        return e2b_reply_error(conn, 400, "limit must be 1-%d", E2B_LIST_LIMIT_MAX);
                }
        }
        if (next && !sandbox_id_valid(next, strlen(next))) {
                cJSON_Delete(filter);
                return e2b_reply_error(conn, 400, "nextToken is not one this server gave");
        }
        params = cJSON_CreateObject();
        if (filter)
                cJSON_AddItemToObject(params, "labels", filter);
        if (e2b_call(q, "list_sessions", params, &res, &e) < 0)
                return e2b_reply_fronterr(conn, &e);
        (void)MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_state, &want);
        cJSON *all = cJSON_GetObjectItemCaseSensitive(res, "sessions");
        size_t cap = (size_t)cJSON_GetArraySize(all);
        _cleanup_free_ cJSON **v = calloc(cap ? cap : 1, sizeof(*v));
        out = cJSON_CreateArray();
        cJSON_ArrayForEach(s, all) {
                cJSON *o = v ? listed(q, s) : NULL;
                const char *st;
                if (!o)
                        continue;
                st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "state"));
                if (v2 && want.any && !(strcmp(st, "running") == 0 ? want.running : want.paused)) {
                        cJSON_Delete(o);
                        continue;
                }
                v[n++] = o;
        }
        qsort(v, n, sizeof(*v), session_cmp);
        for (size_t i = 0; i < n; i++) {
                const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v[i], "sandboxID"));
                if (!v2 || ((!next || strcmp(id, next) > 0) && k < (size_t)limit)) {
                        cJSON_AddItemToArray(out, v[i]);
                        k++;
                        if (v2 && k == (size_t)limit && i + 1 < n)
                                sbx_strlcpy(why, id, sizeof(why));
                        else if (v2)
                                why[0] = '\0';
                } else {
                        cJSON_Delete(v[i]);
                }
        }
        cJSON_Delete(res);
        return e2b_reply_page(conn, out, v2 && k == (size_t)limit ? why : "");
}

/* The sandbox as list_sessions {session} shows it, looked up by index
 * among this user's (NULL: none of this user's). */
static cJSON *find(struct e2b_req *q, struct fronterr *e)
{
        cJSON *params = cJSON_CreateObject(), *res = NULL, *o = NULL;
        const cJSON *s;

        cJSON_AddStringToObject(params, "session", q->session);
        if (e2b_call(q, "list_sessions", params, &res, e) < 0)
                return NULL;
        s = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(res, "sessions"), 0);
        if (s && strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "session")) ?: "", q->session) == 0)
                o = listed(q, s);
        cJSON_Delete(res);
        if (!o)
                fronterr_set(e, "not_found", "sandbox %s not found", q->sandbox);
        return o;
}

static enum MHD_Result c_get(struct e2b_req *q, struct MHD_Connection *conn)
{
        struct fronterr e = {0};
        cJSON *o = find(q, &e);
        char at[E2B_ACCESS_TOKEN_MAX + 1];

        if (!o)
                return e2b_reply_fronterr(conn, &e);
        if (access_token(q, at) == 0) {
                cJSON_AddStringToObject(o, "envdAccessToken", at);
                explicit_bzero(at, sizeof(at));
        }
        cJSON_AddNullToObject(o, "domain");
        return e2b_reply_json(conn, 200, o);
}

static enum MHD_Result c_kill(struct e2b_req *q, struct MHD_Connection *conn)
{
        struct fronterr e = {0};
        cJSON *params = cJSON_CreateObject(), *res = NULL;

        if (!e2b_session_exists(q)) {
                cJSON_Delete(params);
                return e2b_reply_error(conn, 404, "sandbox %s not found", q->sandbox);
        }
        /* an id is never reused: retired first, an envd call that raced
         * this kill cannot make the session again (session_retire) */
        if (session_retire(q->d->sessions, q->tok.user, q->session) < 0) {
                cJSON_Delete(params);
                return e2b_reply_error(conn, 500, "out of memory");
        }
        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddTrueToObject(params, "purge");
        if (e2b_call(q, "destroy_session", params, &res, &e) < 0)
                return e2b_reply_fronterr(conn, &e);
        cJSON_Delete(res);
        /* its watchers' watches back now, not when the hub sees the runner go */
        e2b_envd_watchers_forget(q->tok.user, q->session);
        return e2b_reply_raw(conn, 204, NULL, NULL, 0);
}

/* pause_session / resume_session on an existing sandbox; 0, or an answer queued. */
static int session_method(struct e2b_req *q, struct MHD_Connection *conn, const char *method, enum MHD_Result *ans)
{
        struct fronterr e = {0};
        cJSON *params, *res = NULL;

        if (!e2b_session_exists(q)) {
                *ans = e2b_reply_error(conn, 404, "sandbox %s not found", q->sandbox);
                return -1;
        }
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        if (e2b_call(q, method, params, &res, &e) < 0) {
                *ans = e2b_reply_fronterr(conn, &e);
                return -1;
        }
        cJSON_Delete(res);
        return 0;
}

static enum MHD_Result c_pause(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;

        if (session_method(q, conn, "pause_session", &ans) < 0)
                return ans;
        return e2b_reply_raw(conn, 204, NULL, NULL, 0);
}

static enum MHD_Result resumed(struct e2b_req *q, struct MHD_Connection *conn, int status)
{
        struct fronterr e = {0};
        cJSON *o = find(q, &e), *out;

        if (!o)
                return e2b_reply_fronterr(conn, &e);
        out = sandbox_object(q, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "templateID")), true);
        cJSON_Delete(o);
        return e2b_reply_json(conn, status, out);
}

static enum MHD_Result c_resume(struct e2b_req *q, struct MHD_Connection *conn)
{
        enum MHD_Result ans = MHD_NO;

        if (session_method(q, conn, "resume_session", &ans) < 0)
                return ans;
        return resumed(q, conn, 201);
}

/* The body's timeout (whole seconds within SESSSPEC_TTL_MAX_S) into the
 * session's TTL; absent: unchanged. 0, or an answer queued. */
static int apply_timeout(struct e2b_req *q, struct MHD_Connection *conn, const char *const *known, enum MHD_Result *ans)
{
        _cleanup_(cjson_freep) cJSON *b = body_object(q, conn, ans);
        const char *bad;
        struct fronterr e = {0};
        cJSON *params, *res = NULL;
        int64_t ttl = -1;

        if (!b)
                return -1;
        if ((bad = e2b_unknown_member(b, known))) {
                *ans = e2b_reply_error(conn, 400, "unknown field %s", bad);
                return -1;
        }
        if (body_timeout(q, conn, b, 0, &ttl, ans) < 0)
                return -1;
        if (ttl < 0)
                return 0;
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        cJSON_AddNumberToObject(params, "ttl_seconds", (double)ttl);
        if (e2b_call(q, "set_session_ttl", params, &res, &e) < 0) {
                *ans = e2b_reply_fronterr(conn, &e);
                return -1;
        }
        cJSON_Delete(res);
        return 0;
}

static enum MHD_Result c_timeout(struct e2b_req *q, struct MHD_Connection *conn)
{
        static const char *const known[] = {"timeout", NULL};
        enum MHD_Result ans = MHD_NO;

        if (!e2b_session_exists(q))
                return e2b_reply_error(conn, 404, "sandbox %s not found", q->sandbox);
        if (apply_timeout(q, conn, known, &ans) < 0)
                return ans;
        return e2b_reply_raw(conn, 204, NULL, NULL, 0);
}

static enum MHD_Result c_connect(struct e2b_req *q, struct MHD_Connection *conn)
{
        static const char *const known[] = {"timeout", "memory", NULL};
        struct fronterr e = {0};
        cJSON *o = find(q, &e);
        bool paused;
        enum MHD_Result ans = MHD_NO;

        if (!o)
                return e2b_reply_fronterr(conn, &e);
        if (apply_timeout(q, conn, known, &ans) < 0) {
                cJSON_Delete(o);
                return ans;
        }
        paused = strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "state")), "paused") == 0;
        cJSON_Delete(o);
        if (paused) {
                if (session_method(q, conn, "resume_session", &ans) < 0)
                        return ans;
                return resumed(q, conn, 201);
        }
        return resumed(q, conn, 200);
}

/* A query parameter that must be absent or whole seconds of unix time. */
static bool unix_seconds_ok(struct MHD_Connection *conn, const char *name)
{
        const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
        char *end;
        long long x;

        if (!v)
                return true;
        errno = 0;
        x = strtoll(v, &end, 10);
        return *v >= '0' && *v <= '9' && !*end && !errno && x >= 0;
}

/* E2B's SandboxMetric, one sample taken now: memory from the engine's
 * stats of the session's container, CPU as its average since the session
 * was created (the engine gives cumulative CPU time only), disk as the
 * workspace's use of its quota. start and end are checked, not applied:
 * sandboxd keeps no history. [] while the session has no container. */
static enum MHD_Result c_metrics(struct e2b_req *q, struct MHD_Connection *conn)
{
        struct fronterr e = {0};
        struct session_info info;
        struct engine_stats st;
        struct wsquota_usage du;
        cJSON *o, *out;
        double cpus, age_ms, pct;
        int64_t now = sbx_wall_ms();
        bool have;

        if (!unix_seconds_ok(conn, "start") || !unix_seconds_ok(conn, "end"))
                return e2b_reply_error(conn, 400, "start and end must be unix seconds");
        if (!(o = find(q, &e)))
                return e2b_reply_fronterr(conn, &e);
        cpus = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "cpuCount"));
        cJSON_Delete(o);
        if (session_get_info(q->d->sessions, q->tok.user, q->session, &info) < 0)
                return e2b_reply_error(conn, 404, "sandbox %s not found", q->sandbox);
        have = info.container_id[0] && engine_stats(q->d->engine, info.container_id, &st, NULL) == 0;
        age_ms = (double)(now - info.created_at);
        session_info_done(&info);
        out = cJSON_CreateArray();
        if (!have)
                return e2b_reply_json(conn, 200, out);
        o = cJSON_CreateObject();
        e2b_add_time(o, "timestamp", (double)now);
        cJSON_AddNumberToObject(o, "timestampUnix", (double)(now / 1000));
        cJSON_AddNumberToObject(o, "cpuCount", cpus);
        pct = age_ms > 0 ? (double)st.cpu_total_ns / 1e6 / age_ms / cpus * 100 : 0;
        cJSON_AddNumberToObject(o, "cpuUsedPct", pct > 100 ? 100 : pct);
        cJSON_AddNumberToObject(o, "memUsed", (double)st.memory_usage);
        cJSON_AddNumberToObject(o, "memTotal", (double)st.memory_limit);
        wsquota_usage(&q->d->cfg, q->tok.user, q->session, &du);
        cJSON_AddNumberToObject(o, "diskUsed", du.known ? (double)du.bytes_used : 0);
        cJSON_AddNumberToObject(o, "diskTotal", (double)du.bytes_limit);
        cJSON_AddItemToArray(out, o);
        return e2b_reply_json(conn, 200, out);
}

/* One fork of the sandbox as E2B's SandboxForkResult: {sandbox} or {error}. */
static cJSON *fork_one(struct e2b_req *q, const char *tmpl, int64_t timeout)
{
        char src_sandbox[sizeof(q->sandbox)], src_session[sizeof(q->session)], hex[E2B_ID_MAX + 1];
        struct fronterr e = {0};
        cJSON *out = cJSON_CreateObject(), *err;

        if (sbx_random_hex(hex, 10) < 0) {
                fronterr_set(&e, "internal", "no randomness for a sandbox id");
        } else {
                /* the fork's id from here on, then the source's again */
                memcpy(src_sandbox, q->sandbox, sizeof(src_sandbox));
                memcpy(src_session, q->session, sizeof(src_session));
                sbx_strlcpy(q->sandbox, hex, sizeof(q->sandbox));
                snprintf(q->session, sizeof(q->session), E2B_SESSION_PREFIX "%s", q->sandbox);
                if (fork_into(q, "session", src_session, timeout, &e) == 0)
                        cJSON_AddItemToObject(out, "sandbox", sandbox_object(q, tmpl, true));
                memcpy(q->sandbox, src_sandbox, sizeof(src_sandbox));
                memcpy(q->session, src_session, sizeof(src_session));
                if (cJSON_GetObjectItemCaseSensitive(out, "sandbox"))
                        return out;
        }
        err = cJSON_AddObjectToObject(out, "error");
        cJSON_AddNumberToObject(err, "code",
                                e.code && strcmp(e.code, "quota_exceeded") == 0 ? 429 : http_status_for_code(e.code));
        jsonutil_add_text(err, "message", e.msg);
        return out;
}

/* fork_session from the live sandbox, count times (1-E2B_FORK_MAX), each
 * with its own TTL of timeout seconds (300 when absent, as create's). */
static enum MHD_Result c_fork(struct e2b_req *q, struct MHD_Connection *conn)
{
        static const char *const known[] = {"timeout", "count", NULL};
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *b = body_object(q, conn, &ans);
        struct fronterr e = {0};
        const cJSON *c;
        const char *bad;
        int64_t timeout = 300, count = 1;
        char tmpl[256];
        cJSON *o, *out;

        if (!b)
                return ans;
        if (!(o = find(q, &e)))
                return e2b_reply_fronterr(conn, &e);
        sbx_strlcpy(tmpl, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "templateID")) ?: "", sizeof(tmpl));
        cJSON_Delete(o);
        if ((bad = e2b_unknown_member(b, known)))
                return e2b_reply_error(conn, 400, "unknown field %s", bad);
        if (body_timeout(q, conn, b, 1, &timeout, &ans) < 0)
                return ans;
        c = cJSON_GetObjectItemCaseSensitive(b, "count");
        if (c && !cJSON_IsNull(c)) {
                if (!cJSON_IsNumber(c) || c->valuedouble < 1 || c->valuedouble > E2B_FORK_MAX ||
                    c->valuedouble != (double)(int64_t)c->valuedouble)
                        return e2b_reply_error(conn, 400, "count must be 1-%d", E2B_FORK_MAX);
                count = (int64_t)c->valuedouble;
        }
        out = cJSON_CreateArray();
        for (int64_t i = 0; i < count; i++)
                cJSON_AddItemToArray(out, fork_one(q, tmpl, timeout));
        return e2b_reply_json(conn, 201, out);
}

/* snapshot_session {name?} of the sandbox: E2B's SnapshotInfo, the id
 * being what Sandbox.create() takes back (create_from_snapshot). */
static enum MHD_Result c_snapshot(struct e2b_req *q, struct MHD_Connection *conn)
{
        static const char *const known[] = {"name", NULL};
        enum MHD_Result ans = MHD_NO;
        _cleanup_(cjson_freep) cJSON *b = body_object(q, conn, &ans);
        struct fronterr e = {0};
        const cJSON *name;
        const char *bad, *id;
        cJSON *o, *params, *res = NULL, *out, *names;

        if (!b)
                return ans;
        if (!(o = find(q, &e)))
                return e2b_reply_fronterr(conn, &e);
        cJSON_Delete(o);
        if ((bad = e2b_unknown_member(b, known)))
                return e2b_reply_error(conn, 400, "unknown field %s", bad);
        name = cJSON_GetObjectItemCaseSensitive(b, "name");
        if (name && !cJSON_IsNull(name) && !cJSON_IsString(name))
                return e2b_reply_error(conn, 400, "name must be a string");
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", q->session);
        if (cJSON_IsString(name))
                cJSON_AddStringToObject(params, "name", name->valuestring); /* snapshot_session checks it */
        if (e2b_call(q, "snapshot_session", params, &res, &e) < 0)
                return e2b_reply_fronterr(conn, &e);
        id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "snapshot"));
        if (!id) {
                cJSON_Delete(res);
                return e2b_reply_error(conn, 500, "the snapshot has no id");
        }
        out = cJSON_CreateObject();
        cJSON_AddStringToObject(out, "snapshotID", id);
        names = cJSON_AddArrayToObject(out, "names");
        if (cJSON_IsString(name))
                cJSON_AddItemToArray(names, cJSON_CreateString(name->valuestring));
        cJSON_Delete(res);
        return e2b_reply_json(conn, 201, out);
}

static int snapshot_cmp(const void *a, const void *b)
{
        const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
        return strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "snapshotID")),
                      cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(y, "snapshotID")));
}

/* GET /snapshots?sandboxID&name&limit&nextToken (SDK listSnapshots): the
 * caller's snapshots as {snapshotID, names}, in id order, limit a page with
 * the last id given as x-next-token. */
static enum MHD_Result c_snapshot_list(struct e2b_req *q, struct MHD_Connection *conn)
{
        const char *sid = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "sandboxID");
        const char *want = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "name");
        const char *next = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "nextToken");
        const char *lim = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit");
        char session[sizeof(q->session)], last[E2B_ID_MAX + 1] = "";
        cJSON *params, *res = NULL, *out, *s;
        struct fronterr e = {0};
        size_t n = 0, k = 0;
        long limit = E2B_LIST_LIMIT_MAX;
        char *end;

        if (lim) {
                errno = 0;
                limit = strtol(lim, &end, 10);
                if (!*lim || *end || errno || limit < 1 || limit > E2B_LIST_LIMIT_MAX)
                        return e2b_reply_error(conn, 400, "limit must be 1-%d", E2B_LIST_LIMIT_MAX);
        }
        if (next && !template_id_valid(next, strlen(next)))
                return e2b_reply_error(conn, 400, "nextToken is not one this server gave");
        if (sid && !sandbox_id_valid(sid, strlen(sid)))
                return e2b_reply_error(conn, 400, "sandboxID must be 1-%d characters of [a-z0-9]", E2B_ID_MAX);
        if (want && (!want[0] || strlen(want) > 64)) /* only compared: a snapshot's name is 1-64 characters */
                return e2b_reply_error(conn, 400, "name must be 1-64 characters");
        params = cJSON_CreateObject();
        if (sid) {
                snprintf(session, sizeof(session), E2B_SESSION_PREFIX "%s", sid);
                cJSON_AddStringToObject(params, "session", session);
        }
        if (e2b_call(q, "list_snapshots", params, &res, &e) < 0)
                return e2b_reply_fronterr(conn, &e);
        cJSON *all = cJSON_GetObjectItemCaseSensitive(res, "snapshots");
        _cleanup_free_ cJSON **v = calloc((size_t)cJSON_GetArraySize(all) + 1, sizeof(*v));
        if (!v) {
                cJSON_Delete(res);
                return MHD_NO;
        }
        cJSON_ArrayForEach(s, all) {
                const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "snapshot"));
                const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "name"));
                cJSON *o, *names;
                if (!id || (want && (!name || strcmp(name, want) != 0)))
                        continue;
                o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "snapshotID", id);
                names = cJSON_AddArrayToObject(o, "names");
                if (name)
                        cJSON_AddItemToArray(names, cJSON_CreateString(name));
                v[n++] = o;
        }
        cJSON_Delete(res);
        qsort(v, n, sizeof(*v), snapshot_cmp);
        out = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++) {
                const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v[i], "snapshotID"));
                if ((!next || strcmp(id, next) > 0) && k < (size_t)limit) {
                        cJSON_AddItemToArray(out, v[i]);
                        /* a full page with more after it names its last id */
                        if (++k == (size_t)limit && i + 1 < n)
                                sbx_strlcpy(last, id, sizeof(last));
                } else {
                        cJSON_Delete(v[i]);
                }
        }
        return e2b_reply_page(conn, out, last);
}

/* DELETE /templates/{snap} (SDK deleteSnapshot): one of the caller's
 * snapshots; any other id, another tenant's snapshot or a template, is 404,
 * which the SDK answers as false. */
static enum MHD_Result c_snapshot_delete(struct e2b_req *q, struct MHD_Connection *conn)
{
        cJSON *params, *res = NULL;
        struct fronterr e = {0};

        if (strncmp(q->snapshot, "snap-", 5) != 0)
                return e2b_reply_error(conn, 404, "snapshot %s not found (templates are the operator's)", q->snapshot);
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "snapshot", q->snapshot);
        if (e2b_call(q, "delete_snapshot", params, &res, &e) < 0)
                return e2b_reply_fronterr(conn, &e);
        cJSON_Delete(res);
        return e2b_reply_raw(conn, 204, NULL, NULL, 0);
}

static enum MHD_Result c_unsupported(struct e2b_req *q, struct MHD_Connection *conn)
{
        if (q->session[0] && !e2b_session_exists(q))
                return e2b_reply_error(conn, 404, "sandbox %s not found", q->sandbox);
        return e2b_reply_error(conn, 501, "%s %s is not supported by sandboxd yet (docs/e2b.md)", q->route->verb,
                               q->route->path);
}
