/* docker.c — Docker Engine API client: the HTTP core and the plain
 * request/reply calls (version, ping, images, containers, logs, stats,
 * archive). JSON shapes live in docker_json.c, exec and the hijacked stream
 * in docker_exec.c, the events stream in docker_events.c.
 *
 * Transport: libcurl with CURLOPT_UNIX_SOCKET_PATH and URLs
 * http://localhost/vX.Y/... . Each (thread, struct docker) pair owns one
 * keep-alive CURL handle, found through a pthread key that belongs to the
 * struct docker, so several clients can live in one process. The key's
 * destructor frees the handle when the thread exits; docker_free() reaps the
 * handles of threads still alive (the main thread, typically).
 *
 * Locking: d->lock guards d->api_version and the d->handles list. It is
 * never held across I/O. A handle is only ever used by its own thread.
 *
 * Low module: no logging above debug; every failure is returned with an
 * sbx_error carrying the HTTP status and the engine's message. */
#include "docker_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "sandboxd/log.h"

#define DOCKER_CONNECT_TIMEOUT_MS 5000L

static inline void curl_freep(char **p) { curl_free(*p); }
#define _cleanup_curl_free_ _cleanup_(curl_freep)

/* Failed Engine API calls, process-wide (a relaxed atomic: metrics reads it). */
static uint64_t api_errors;

static void count_error(void)
{
        __atomic_add_fetch(&api_errors, 1, __ATOMIC_RELAXED);
}

int docker_global_init(void)
{
        return curl_global_init(CURL_GLOBAL_ALL) == CURLE_OK ? 0 : -EIO;
}

void docker_global_cleanup(void)
{
        curl_global_cleanup();
}

uint64_t docker_api_errors(void)
{
        return __atomic_load_n(&api_errors, __ATOMIC_RELAXED);
}

struct docker_handle {
        CURL *curl;
        struct docker *d;
        struct docker_handle *prev, *next;
};

/* ---- client and per-thread handles ---- */

static void handle_unlink_locked(struct docker_handle *h)
{
        if (h->prev)
                h->prev->next = h->next;
        else
                h->d->handles = h->next;
        if (h->next)
                h->next->prev = h->prev;
        h->prev = h->next = NULL;
}

/* pthread key destructor: the owning thread is exiting. */
static void handle_destroy(void *p)
{
        struct docker_handle *h = p;

        pthread_mutex_lock(&h->d->lock);
        handle_unlink_locked(h);
        pthread_mutex_unlock(&h->d->lock);
        curl_easy_cleanup(h->curl);
        free(h);
}

static CURL *docker_curl(struct docker *d)
{
        struct docker_handle *h = pthread_getspecific(d->key);

        if (h)
                return h->curl;
        h = calloc(1, sizeof(*h));
        if (!h)
                return NULL;
        h->curl = curl_easy_init();
        if (!h->curl) {
                free(h);
                return NULL;
        }
        h->d = d;
        if (pthread_setspecific(d->key, h) != 0) {
                curl_easy_cleanup(h->curl);
                free(h);
                return NULL;
        }
        pthread_mutex_lock(&d->lock);
        h->next = d->handles;
        if (h->next)
                h->next->prev = h;
        d->handles = h;
        pthread_mutex_unlock(&d->lock);
        return h->curl;
}

struct docker *docker_new(const char *socket_path, long timeout_ms)
{
        struct docker *d;

        if (!socket_path || !*socket_path)
                return NULL;
        d = calloc(1, sizeof(*d));
        if (!d)
                return NULL;
        d->socket_path = strdup(socket_path);
        d->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
        if (!d->socket_path || pthread_key_create(&d->key, handle_destroy) != 0) {
                free(d->socket_path);
                free(d);
                return NULL;
        }
        pthread_mutex_init(&d->lock, NULL);
        return d;
}

void docker_free(struct docker *d)
{
        struct docker_handle *h;

        if (!d)
                return;
        /* After this no destructor runs for the key; we reap every handle
         * ourselves. Callers guarantee no other thread still uses d. Other
         * threads' stale values for the deleted key are never seen again:
         * glibc tags each value with the key's generation, so a later
         * client that reuses the key number starts from NULL. */
        pthread_setspecific(d->key, NULL);
        pthread_key_delete(d->key);
        pthread_mutex_lock(&d->lock);
        while ((h = d->handles)) {
                handle_unlink_locked(h);
                curl_easy_cleanup(h->curl);
                free(h);
        }
        pthread_mutex_unlock(&d->lock);
        pthread_mutex_destroy(&d->lock);
        free(d->socket_path);
        free(d);
}

void docker_version_prefix(struct docker *d, char out[24])
{
        pthread_mutex_lock(&d->lock);
        if (d->api_version[0])
                snprintf(out, 24, "/v%s", d->api_version);
        else
                out[0] = '\0';
        pthread_mutex_unlock(&d->lock);
}

const char *docker_api_version(struct docker *d)
{
        /* Written once by docker_negotiate (same value on re-negotiation in
         * practice); the pointer stays valid for the client's lifetime. */
        const char *v;

        pthread_mutex_lock(&d->lock);
        v = d->api_version[0] ? d->api_version : NULL;
        pthread_mutex_unlock(&d->lock);
        return v;
}

/* ---- errors ---- */

int docker_status_to_errno(long status, bool conflict_is_exists)
{
        if (status >= 200 && status < 300)
                return 0;
        switch (status) {
        case 404:
                return -ENOENT;
        case 409:
                return conflict_is_exists ? -EEXIST : -EBUSY;
        default:
                return -EIO;
        }
}

int docker_unreachable(struct docker *d, int errnum, struct sbx_error *err)
{
        if (errnum <= 0) {
                struct stat st;
                /* curl did not tell us the OS error: look at the path. */
                errnum = stat(d->socket_path, &st) < 0 ? errno : ECONNREFUSED;
        }
        return sbx_error_set(err, errnum == ENOENT ? -ENOENT : -ECONNREFUSED, 0,
                             "cannot reach Docker at %s: %s", d->socket_path, strerror(errnum));
}

int docker_reply_error(const struct docker_reply *r, bool conflict_is_exists, struct sbx_error *err)
{
        int code = docker_status_to_errno(r->status, conflict_is_exists);
        const char *msg = NULL;
        cJSON *j = NULL;

        if (code == 0)
                code = -EIO; /* caller decided this status is unexpected */
        if (r->body && r->len > 0) {
                j = cJSON_ParseWithLength(r->body, r->len);
                msg = docker_json_str(j, "message");
        }
        if (msg)
                sbx_error_set(err, code, (int)r->status, "%s", msg);
        else if (r->body && r->len > 0) {
                /* not JSON: keep the first line of the text */
                size_t n = strcspn(r->body, "\r\n");
                sbx_error_set(err, code, (int)r->status, "HTTP %ld: %.*s", r->status, (int)(n > 512 ? 512 : n),
                              r->body);
        } else
                sbx_error_set(err, code, (int)r->status, "HTTP %ld from Docker", r->status);
        cJSON_Delete(j);
        return code;
}

char *docker_path_escape(const char *s, bool keep_slash)
{
        static const char hex[] = "0123456789ABCDEF";
        size_t n = strlen(s);
        char *out = malloc(3 * n + 1), *p = out;

        if (!out)
                return NULL;
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if (isalnum(c) || strchr("-._~:@", c) || (keep_slash && c == '/'))
                        *p++ = (char)c;
                else {
                        *p++ = '%';
                        *p++ = hex[c >> 4];
                        *p++ = hex[c & 15];
                }
        }
        *p = '\0';
        return out;
}

/* ---- the request primitive ---- */

/* libcurl opens its sockets without close-on-exec; a Docker connection
 * leaked into a child process would hand it root-equivalent access. */
static curl_socket_t open_cloexec(void *clientp, curlsocktype purpose, struct curl_sockaddr *addr)
{
        return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

void docker_curl_common(void *c, struct docker *d)
{
        curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, d->socket_path);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_cloexec);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                         d->timeout_ms < DOCKER_CONNECT_TIMEOUT_MS ? d->timeout_ms : DOCKER_CONNECT_TIMEOUT_MS);
}

struct recv_buf {
        char *data;
        size_t len, cap, max;
        bool overflow;
        char content_type[96];
};

static size_t recv_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
        struct recv_buf *b = userdata;
        size_t n = size * nmemb;

        if (b->len + n > b->max) {
                b->overflow = true;
                return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
        }
        if (b->len + n + 1 > b->cap) {
                size_t cap = b->cap ? b->cap : 4096;
                char *p;
                while (cap < b->len + n + 1)
                        cap *= 2;
                p = realloc(b->data, cap);
                if (!p)
                        return 0;
                b->data = p;
                b->cap = cap;
        }
        memcpy(b->data + b->len, ptr, n);
        b->len += n;
        b->data[b->len] = '\0';
        return n;
}

static size_t recv_header(char *ptr, size_t size, size_t nmemb, void *userdata)
{
        struct recv_buf *b = userdata;
        size_t n = size * nmemb;
        static const char key[] = "content-type:";

        if (n > sizeof(key) - 1 && strncasecmp(ptr, key, sizeof(key) - 1) == 0) {
                const char *v = ptr + sizeof(key) - 1;
                size_t vl = n - (sizeof(key) - 1);
                while (vl > 0 && (*v == ' ' || *v == '\t'))
                        v++, vl--;
                while (vl > 0 && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
                        vl--;
                if (vl >= sizeof(b->content_type))
                        vl = sizeof(b->content_type) - 1;
                memcpy(b->content_type, v, vl);
                b->content_type[vl] = '\0';
        }
        return n;
}

int docker_http(struct docker *d, const char *method, const char *path, const char *content_type,
                const void *body, size_t body_len, long extra_timeout_ms, size_t max_reply,
                struct docker_reply *ret, struct sbx_error *err)
{
        struct recv_buf b = {.max = max_reply ? max_reply : DOCKER_REPLY_MAX_DEFAULT};
        struct curl_slist *headers = NULL;
        char errbuf[CURL_ERROR_SIZE] = "";
        char prefix[24], *url;
        long timeout = d->timeout_ms + (extra_timeout_ms > 0 ? extra_timeout_ms : 0);
        CURL *c = docker_curl(d);
        CURLcode cc;
        int r;

        if (!c)
                return sbx_error_set(err, -ENOMEM, 0, "cannot allocate a CURL handle");
        docker_version_prefix(d, prefix);
        if (asprintf(&url, "http://localhost%s%s", prefix, path) < 0)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");

        /* reset keeps the live connection: that is the keep-alive we want */
        curl_easy_reset(c);
        docker_curl_common(c, d);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, recv_write);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, recv_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, &b);

        if (strcmp(method, "GET") == 0)
                curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
        else if (strcmp(method, "HEAD") == 0)
                curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
        else {
                curl_easy_setopt(c, CURLOPT_POST, 1L);
                curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? body_len : 0));
                curl_easy_setopt(c, CURLOPT_POSTFIELDS, body ? body : "");
                if (strcmp(method, "POST") != 0)
                        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
                /* Expect: 100-continue only costs a round trip on a local socket */
                headers = curl_slist_append(headers, "Expect:");
                if (content_type) {
                        char h[128];
                        snprintf(h, sizeof(h), "Content-Type: %s", content_type);
                        headers = curl_slist_append(headers, h);
                } else
                        headers = curl_slist_append(headers, "Content-Type:");
                curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        }

        cc = curl_easy_perform(c);
        if (cc == CURLE_OK) {
                memset(ret, 0, sizeof(*ret));
                curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &ret->status);
                ret->body = b.data ? b.data : strdup("");
                ret->len = b.len;
                memcpy(ret->content_type, b.content_type, sizeof(ret->content_type));
                b.data = NULL;
                r = ret->body ? 0 : sbx_error_set(err, -ENOMEM, 0, "out of memory");
                log_debug("docker %s %s -> %ld (%zu bytes)", method, path, ret->status, ret->len);
                if (ret->status >= 500)
                        count_error();
                goto out;
        }

        switch (cc) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST: {
                long oserr = 0;
                curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &oserr);
                r = docker_unreachable(d, (int)oserr, err);
                break;
        }
        case CURLE_OPERATION_TIMEDOUT:
                r = sbx_error_set(err, -ETIMEDOUT, 0, "Docker at %s did not answer %s %s within %ld ms",
                                  d->socket_path, method, path, timeout);
                break;
        case CURLE_WRITE_ERROR:
                if (b.overflow) {
                        r = sbx_error_set(err, -EFBIG, 0, "Docker reply to %s %s exceeds %zu bytes", method, path,
                                          b.max);
                        break;
                }
                /* fall through */
        default:
                r = sbx_error_set(err, -EIO, 0, "Docker request %s %s failed: %s", method, path,
                                  errbuf[0] ? errbuf : curl_easy_strerror(cc));
                break;
        }
        log_debug("docker %s %s failed: %s", method, path, curl_easy_strerror(cc));
        count_error();
out:
        /* the error buffer lives on our stack: do not leave it in the handle */
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, NULL);
        curl_slist_free_all(headers);
        free(b.data);
        free(url);
        return r;
}

void docker_reply_done(struct docker_reply *r)
{
        if (!r)
                return;
        free(r->body);
        r->body = NULL;
        r->len = 0;
}

/* Request + "status must be one of 2xx (or `also_ok`)" + optional parsed JSON. */
static int docker_call(struct docker *d, const char *method, const char *path, const char *body,
                       bool conflict_is_exists, long also_ok, long extra_timeout_ms, cJSON **ret_json,
                       struct sbx_error *err)
{
        struct docker_reply rep;
        int r;

        r = docker_http(d, method, path, body ? "application/json" : NULL, body, body ? strlen(body) : 0,
                        extra_timeout_ms, 0, &rep, err);
        if (r < 0)
                return r;
        if ((rep.status < 200 || rep.status >= 300) && rep.status != also_ok) {
                r = docker_reply_error(&rep, conflict_is_exists, err);
                goto out;
        }
        if (ret_json) {
                cJSON *j = cJSON_ParseWithLength(rep.body, rep.len);
                if (!j) {
                        r = sbx_error_set(err, -EPROTO, (int)rep.status, "unparseable reply from Docker to %s %s",
                                          method, path);
                        goto out;
                }
                *ret_json = j;
        }
out:
        docker_reply_done(&rep);
        return r;
}

/* Build "/prefix/<escaped id>/suffix" into a malloc'd string. */
static char *path_with_id(const char *prefix, const char *id, const char *suffix, bool keep_slash)
{
        _cleanup_free_ char *eid = NULL;
        char *p;

        if (!id || !*id)
                return NULL;
        eid = docker_path_escape(id, keep_slash);
        if (!eid || asprintf(&p, "%s/%s%s", prefix, eid, suffix ? suffix : "") < 0)
                return NULL;
        return p;
}

#define CHECK_PATH(p, err)                                                                                   \
        do {                                                                                                 \
                if (!(p))                                                                                    \
                        return sbx_error_set(err, -EINVAL, 0, "missing or invalid id");                      \
        } while (0)

/* ---- version ---- */

int docker_ping(struct docker *d, struct sbx_error *err)
{
        return docker_call(d, "GET", "/_ping", NULL, false, 0, 0, NULL, err);
}

/* Compare "1.41" with "1.43": major then minor, numerically. */
static int api_version_cmp(const char *a, const char *b)
{
        long amaj = 0, amin = 0, bmaj = 0, bmin = 0;
        sscanf(a, "%ld.%ld", &amaj, &amin);
        sscanf(b, "%ld.%ld", &bmaj, &bmin);
        if (amaj != bmaj)
                return amaj < bmaj ? -1 : 1;
        return amin < bmin ? -1 : amin > bmin;
}

int docker_version(struct docker *d, struct docker_version *ret, struct sbx_error *err)
{
        struct docker_version v = {0};
        cJSON *j = NULL;
        int r;

        r = docker_call(d, "GET", "/version", NULL, false, 0, 0, &j, err);
        if (r < 0)
                return r;
        sbx_strlcpy(v.version, docker_json_str(j, "Version"), sizeof(v.version));
        sbx_strlcpy(v.api_version, docker_json_str(j, "ApiVersion"), sizeof(v.api_version));
        sbx_strlcpy(v.min_api_version, docker_json_str(j, "MinAPIVersion"), sizeof(v.min_api_version));
        sbx_strlcpy(v.os, docker_json_str(j, "Os"), sizeof(v.os));
        sbx_strlcpy(v.arch, docker_json_str(j, "Arch"), sizeof(v.arch));
        cJSON_Delete(j);
        if (!v.api_version[0])
                return sbx_error_set(err, -EPROTO, 200, "Docker /version reply has no ApiVersion");
        *ret = v;
        return 0;
}

int docker_has_runtime(struct docker *d, const char *name, bool *ret, struct sbx_error *err)
{
        cJSON *j = NULL;
        int r = docker_call(d, "GET", "/info", NULL, false, 0, 0, &j, err);

        if (r < 0)
                return r;
        *ret = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "Runtimes"), name) != NULL;
        cJSON_Delete(j);
        return 0;
}

int docker_negotiate(struct docker *d, struct sbx_error *err)
{
        struct docker_version v;
        const char *pick;
        int r;

        r = docker_version(d, &v, err);
        if (r < 0)
                return r;
        pick = api_version_cmp(v.api_version, DOCKER_API_VERSION_MAX) < 0 ? v.api_version : DOCKER_API_VERSION_MAX;
        pthread_mutex_lock(&d->lock);
        sbx_strlcpy(d->api_version, pick, sizeof(d->api_version));
        pthread_mutex_unlock(&d->lock);
        log_debug("docker engine %s, API %s (engine max %s)", v.version, pick, v.api_version);
        return 0;
}

/* ---- images ---- */

int docker_image_inspect(struct docker *d, const char *image, struct docker_image_info *ret,
                         struct sbx_error *err)
{
        _cleanup_free_ char *path = path_with_id("/images", image, "/json", true);
        struct docker_image_info info = {0};
        const cJSON *digests, *labels;
        cJSON *j = NULL;
        int r;

        CHECK_PATH(path, err);
        r = docker_call(d, "GET", path, NULL, false, 0, 0, &j, err);
        if (r < 0)
                return r;
        sbx_strlcpy(info.id, docker_json_str(j, "Id"), sizeof(info.id));
        digests = cJSON_GetObjectItemCaseSensitive(j, "RepoDigests");
        if (cJSON_IsArray(digests) && cJSON_IsString(cJSON_GetArrayItem(digests, 0)))
                sbx_strlcpy(info.digest, cJSON_GetArrayItem(digests, 0)->valuestring, sizeof(info.digest));
        labels = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "Config"), "Labels");
        sbx_strlcpy(info.recipe, docker_json_str(labels, "sandboxd.recipe"), sizeof(info.recipe));
        cJSON_Delete(j);
        *ret = info;
        return 0;
}

/* ---- containers ---- */

int docker_container_create(struct docker *d, const struct docker_container_spec *spec, char ret_id[65],
                            struct sbx_error *err)
{
        _cleanup_free_ char *body = NULL, *path = NULL;
        _cleanup_curl_free_ char *ename = NULL;
        cJSON *j = NULL;
        const char *id;
        int r;

        if (!spec || !spec->image || !*spec->image)
                return sbx_error_set(err, -EINVAL, 0, "container spec without an image");
        body = docker_container_spec_to_json(spec);
        if (!body)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (spec->name && *spec->name) {
                ename = curl_easy_escape(NULL, spec->name, 0);
                if (!ename || asprintf(&path, "/containers/create?name=%s", ename) < 0)
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        } else if (!(path = strdup("/containers/create")))
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");

        r = docker_call(d, "POST", path, body, true, 0, 0, &j, err);
        if (r < 0)
                return r;
        id = docker_json_str(j, "Id");
        if (!id || strlen(id) != 64) {
                cJSON_Delete(j);
                return sbx_error_set(err, -EPROTO, 201, "Docker create reply has no container Id");
        }
        memcpy(ret_id, id, 65);
        cJSON_Delete(j);
        return 0;
}

int docker_container_start(struct docker *d, const char *id, struct sbx_error *err)
{
        _cleanup_free_ char *path = path_with_id("/containers", id, "/start", false);

        CHECK_PATH(path, err);
        /* 304: already running — the caller's goal is met */
        return docker_call(d, "POST", path, NULL, false, 304, 0, NULL, err);
}

int docker_container_stop(struct docker *d, const char *id, int timeout_s, struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL;
        char suffix[32];

        if (timeout_s < 0)
                timeout_s = 0;
        snprintf(suffix, sizeof(suffix), "/stop?t=%d", timeout_s);
        path = path_with_id("/containers", id, suffix, false);
        CHECK_PATH(path, err);
        /* the engine waits up to t seconds before SIGKILL: extend our bound */
        return docker_call(d, "POST", path, NULL, false, 304, (long)timeout_s * 1000, NULL, err);
}

int docker_container_kill(struct docker *d, const char *id, const char *signal, struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL, *suffix = NULL;
        _cleanup_curl_free_ char *esig = NULL;

        if (signal && *signal) {
                esig = curl_easy_escape(NULL, signal, 0);
                if (!esig || asprintf(&suffix, "/kill?signal=%s", esig) < 0)
                        return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        path = path_with_id("/containers", id, suffix ? suffix : "/kill", false);
        CHECK_PATH(path, err);
        return docker_call(d, "POST", path, NULL, false, 0, 0, NULL, err);
}

int docker_container_remove(struct docker *d, const char *id, bool force, struct sbx_error *err)
{
        _cleanup_free_ char *path = path_with_id("/containers", id, force ? "?force=1&v=1" : "?v=1", false);

        CHECK_PATH(path, err);
        return docker_call(d, "DELETE", path, NULL, false, 0, 0, NULL, err);
}

int docker_container_rename(struct docker *d, const char *id, const char *new_name, struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL, *suffix = NULL;
        char *ename;

        if (!new_name || !*new_name)
                return sbx_error_set(err, -EINVAL, 0, "rename without a new name");
        ename = curl_easy_escape(NULL, new_name, 0);
        if (!ename)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (asprintf(&suffix, "/rename?name=%s", ename) < 0)
                suffix = NULL;
        curl_free(ename);
        if (!suffix)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        path = path_with_id("/containers", id, suffix, false);
        CHECK_PATH(path, err);
        return docker_call(d, "POST", path, NULL, true, 0, 0, NULL, err);
}

int docker_container_inspect(struct docker *d, const char *id, struct docker_container_info *ret,
                             struct sbx_error *err)
{
        _cleanup_free_ char *path = path_with_id("/containers", id, "/json", false);
        struct docker_reply rep;
        int r;

        CHECK_PATH(path, err);
        r = docker_http(d, "GET", path, NULL, NULL, 0, 0, 0, &rep, err);
        if (r < 0)
                return r;
        if (rep.status != 200)
                r = docker_reply_error(&rep, false, err);
        else if (docker_container_info_parse(rep.body, ret) < 0)
                r = sbx_error_set(err, -EPROTO, 200, "unparseable inspect reply for container %s", id);
        docker_reply_done(&rep);
        return r;
}

cJSON *docker_filters_new(const char *const *label_filters)
{
        cJSON *f = cJSON_CreateObject(), *labels;

        if (!f)
                return NULL;
        if (label_filters && label_filters[0]) {
                labels = cJSON_AddArrayToObject(f, "label");
                for (size_t i = 0; labels && label_filters[i]; i++)
                        cJSON_AddItemToArray(labels, cJSON_CreateString(label_filters[i]));
        }
        return f;
}

int docker_container_list(struct docker *d, const char *const *label_filters, bool all,
                          struct docker_container_summary **ret_list, size_t *ret_n, struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL, *fjson = NULL;
        char *efilters = NULL;
        struct docker_reply rep;
        cJSON *f;
        int r;

        f = docker_filters_new(label_filters);
        fjson = f ? cJSON_PrintUnformatted(f) : NULL;
        cJSON_Delete(f);
        if (!fjson || !(efilters = curl_easy_escape(NULL, fjson, 0)))
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        r = asprintf(&path, "/containers/json?all=%d&filters=%s", all ? 1 : 0, efilters);
        curl_free(efilters);
        if (r < 0) {
                path = NULL;
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        r = docker_http(d, "GET", path, NULL, NULL, 0, 0, 0, &rep, err);
        if (r < 0)
                return r;
        if (rep.status != 200)
                r = docker_reply_error(&rep, false, err);
        else if ((r = docker_container_list_parse(rep.body, ret_list, ret_n)) < 0)
                r = sbx_error_set(err, r, 200, "unparseable container list reply");
        docker_reply_done(&rep);
        return r;
}

/* ---- logs ---- */

/* Is this body a multiplexed stream? Engines ≥ API 1.42 say so in the
 * Content-Type; older ones send application/vnd.docker.raw-stream for both,
 * so look at the first header: a TTY container's text is very unlikely to
 * start with {0|1|2, 0, 0, 0}. */
static bool body_is_multiplexed(const struct docker_reply *rep)
{
        const unsigned char *b = (const unsigned char *)rep->body;

        if (strstr(rep->content_type, "multiplexed"))
                return true;
        if (rep->len == 0)
                return false;
        return rep->len >= 8 && b[0] <= 3 && b[1] == 0 && b[2] == 0 && b[3] == 0;
}

int docker_container_logs(struct docker *d, const char *id, int tail_lines, char **ret_text,
                          struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL;
        char suffix[64];
        struct docker_reply rep;
        char *out;
        size_t n = 0;
        int r;

        if (tail_lines >= 0)
                snprintf(suffix, sizeof(suffix), "/logs?stdout=1&stderr=1&tail=%d", tail_lines);
        else
                snprintf(suffix, sizeof(suffix), "/logs?stdout=1&stderr=1&tail=all");
        path = path_with_id("/containers", id, suffix, false);
        CHECK_PATH(path, err);
        r = docker_http(d, "GET", path, NULL, NULL, 0, 0, 0, &rep, err);
        if (r < 0)
                return r;
        if (rep.status != 200) {
                r = docker_reply_error(&rep, false, err);
                goto out;
        }
        if (!body_is_multiplexed(&rep)) {
                *ret_text = TAKE_PTR(rep.body);
                goto out;
        }
        /* demultiplex in place: payload never grows */
        out = rep.body;
        {
                struct docker_demux m;
                size_t off = 0;
                docker_demux_init(&m);
                while (off < rep.len) {
                        enum docker_stream_kind kind;
                        const void *payload;
                        size_t plen;
                        ssize_t used = docker_demux_next(&m, rep.body + off, rep.len - off, SIZE_MAX, &kind,
                                                         &payload, &plen);
                        if (used < 0) {
                                r = sbx_error_set(err, -EPROTO, 200, "malformed log stream of container %s", id);
                                goto out;
                        }
                        if (plen > 0) {
                                memmove(out + n, payload, plen);
                                n += plen;
                        }
                        off += (size_t)used;
                }
        }
        out[n] = '\0';
        *ret_text = TAKE_PTR(rep.body);
out:
        docker_reply_done(&rep);
        return r;
}

/* ---- stats ---- */

int docker_container_stats(struct docker *d, const char *id, struct docker_stats *ret, struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL;
        struct docker_stats s = {0};
        const cJSON *mem, *pids, *cpu;
        cJSON *j = NULL;
        int r;

        /* one-shot appeared in API 1.41; older engines ignore it and take
         * ~1 s for a second sample, which the client timeout still bounds */
        path = path_with_id("/containers", id, "/stats?stream=false&one-shot=true", false);
        CHECK_PATH(path, err);
        r = docker_call(d, "GET", path, NULL, false, 0, 0, &j, err);
        if (r < 0)
                return r;
        mem = cJSON_GetObjectItemCaseSensitive(j, "memory_stats");
        pids = cJSON_GetObjectItemCaseSensitive(j, "pids_stats");
        cpu = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "cpu_stats"), "cpu_usage");
        s.memory_usage = (uint64_t)docker_json_i64(mem, "usage", 0);
        s.memory_limit = (uint64_t)docker_json_i64(mem, "limit", 0);
        s.pids = (uint64_t)docker_json_i64(pids, "current", 0);
        s.cpu_total_ns = (uint64_t)docker_json_i64(cpu, "total_usage", 0);
        cJSON_Delete(j);
        *ret = s;
        return 0;
}

/* ---- archive ---- */

int docker_archive_put(struct docker *d, const char *id, const char *dir, const void *tar, size_t len,
                       struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL, *suffix = NULL;
        struct docker_reply rep;
        char *edir;
        int r;

        if (!dir || !*dir || (!tar && len > 0))
                return sbx_error_set(err, -EINVAL, 0, "archive put needs a directory and a tar");
        edir = curl_easy_escape(NULL, dir, 0);
        if (!edir)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (asprintf(&suffix, "/archive?path=%s", edir) < 0)
                suffix = NULL;
        curl_free(edir);
        if (!suffix)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        path = path_with_id("/containers", id, suffix, false);
        CHECK_PATH(path, err);
        /* big uploads: give each MiB a second on top of the usual bound */
        r = docker_http(d, "PUT", path, "application/x-tar", tar, len, (long)(len >> 20) * 1000, 0, &rep, err);
        if (r < 0)
                return r;
        if (rep.status != 200)
                r = docker_reply_error(&rep, false, err);
        docker_reply_done(&rep);
        return r;
}

int docker_archive_get(struct docker *d, const char *id, const char *p, size_t max_bytes, void **ret_tar,
                       size_t *ret_len, struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL, *suffix = NULL;
        struct docker_reply rep;
        char *ep;
        int r;

        if (!p || !*p)
                return sbx_error_set(err, -EINVAL, 0, "archive get needs a path");
        ep = curl_easy_escape(NULL, p, 0);
        if (!ep)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        if (asprintf(&suffix, "/archive?path=%s", ep) < 0)
                suffix = NULL;
        curl_free(ep);
        if (!suffix)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        path = path_with_id("/containers", id, suffix, false);
        CHECK_PATH(path, err);
        r = docker_http(d, "GET", path, NULL, NULL, 0, (long)(max_bytes >> 20) * 1000, max_bytes, &rep, err);
        if (r < 0)
                return r;
        if (rep.status != 200) {
                r = docker_reply_error(&rep, false, err);
                docker_reply_done(&rep);
                return r;
        }
        *ret_len = rep.len;
        *ret_tar = TAKE_PTR(rep.body);
        return 0;
}

/* ---- networks ---- */

int docker_network_create(struct docker *d, const char *name, const struct docker_label *labels, size_t n_labels,
                          const struct docker_label *options, size_t n_options, struct sbx_error *err)
{
        _cleanup_free_ char *body = NULL;
        cJSON *j = cJSON_CreateObject(), *l, *o;

        if (!name || !*name)
                return sbx_error_set(err, -EINVAL, 0, "network without a name");
        if (!j)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        cJSON_AddStringToObject(j, "Name", name);
        cJSON_AddStringToObject(j, "Driver", "bridge");
        cJSON_AddBoolToObject(j, "CheckDuplicate", true);
        l = cJSON_AddObjectToObject(j, "Labels");
        o = cJSON_AddObjectToObject(j, "Options");
        for (size_t i = 0; l && i < n_labels; i++)
                cJSON_AddStringToObject(l, labels[i].key, labels[i].value);
        for (size_t i = 0; o && i < n_options; i++)
                cJSON_AddStringToObject(o, options[i].key, options[i].value);
        body = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        if (!body)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        return docker_call(d, "POST", "/networks/create", body, true, 0, 0, NULL, err);
}

int docker_network_inspect_option(struct docker *d, const char *name, const char *option, char *ret, size_t size,
                                  struct sbx_error *err)
{
        _cleanup_free_ char *path = path_with_id("/networks", name, NULL, false);
        cJSON *j = NULL;
        const char *v;
        int r;

        CHECK_PATH(path, err);
        r = docker_call(d, "GET", path, NULL, false, 0, 0, &j, err);
        if (r < 0)
                return r;
        v = docker_json_str(cJSON_GetObjectItemCaseSensitive(j, "Options"), option);
        sbx_strlcpy(ret, v ? v : "", size);
        cJSON_Delete(j);
        return 0;
}

int docker_network_remove(struct docker *d, const char *name, struct sbx_error *err)
{
        _cleanup_free_ char *path = path_with_id("/networks", name, NULL, false);

        CHECK_PATH(path, err);
        return docker_call(d, "DELETE", path, NULL, false, 0, 0, NULL, err);
}

int docker_network_list(struct docker *d, const char *const *label_filters, char (**ret_names)[128], size_t *ret_n,
                        struct sbx_error *err)
{
        _cleanup_free_ char *path = NULL, *fjson = NULL;
        char *efilters = NULL;
        char(*names)[128] = NULL;
        cJSON *f, *j = NULL, *it;
        size_t n = 0;
        int r;

        f = docker_filters_new(label_filters);
        fjson = f ? cJSON_PrintUnformatted(f) : NULL;
        cJSON_Delete(f);
        if (!fjson || !(efilters = curl_easy_escape(NULL, fjson, 0)))
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        r = asprintf(&path, "/networks?filters=%s", efilters);
        curl_free(efilters);
        if (r < 0) {
                path = NULL;
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        r = docker_call(d, "GET", path, NULL, false, 0, 0, &j, err);
        if (r < 0)
                return r;
        names = calloc((size_t)cJSON_GetArraySize(j) + 1, sizeof(*names));
        if (!names) {
                cJSON_Delete(j);
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        }
        cJSON_ArrayForEach(it, j)
        {
                const char *name = docker_json_str(it, "Name");
                if (name && *name)
                        sbx_strlcpy(names[n++], name, sizeof(names[0]));
        }
        cJSON_Delete(j);
        *ret_names = names;
        *ret_n = n;
        return 0;
}
