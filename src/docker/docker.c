/* docker.c — Docker Engine API client: the client and its per-thread
 * handles, the HTTP core, errors, and version negotiation. The plain
 * request/reply calls (images, containers, logs, stats, archive, networks)
 * live in docker_calls.c, JSON shapes in docker_json.c, exec and the
 * hijacked stream in docker_exec.c, the events stream in docker_events.c.
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
        return sbx_error_set(err, errnum == ENOENT ? -ENOENT : -ECONNREFUSED, 0, "cannot reach Docker at %s: %s",
                             d->socket_path, strerror(errnum));
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

int docker_buf_append(char **data, size_t *len, size_t *cap, const void *p, size_t n, size_t first_cap)
{
        if (*len + n + 1 > *cap) {
                size_t c = *cap ? *cap : first_cap;
                char *q;
                while (c < *len + n + 1)
                        c *= 2;
                q = realloc(*data, c);
                if (!q)
                        return -ENOMEM;
                *data = q;
                *cap = c;
        }
        memcpy(*data + *len, p, n);
        *len += n;
        (*data)[*len] = '\0';
        return 0;
}

static size_t recv_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
        struct recv_buf *b = userdata;
        size_t n = size * nmemb;

        if (b->len + n > b->max) {
                b->overflow = true;
                return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
        }
        return docker_buf_append(&b->data, &b->len, &b->cap, ptr, n, 4096) < 0 ? 0 : n;
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

int docker_http(struct docker *d, const char *method, const char *path, const char *content_type, const void *body,
                size_t body_len, long extra_timeout_ms, size_t max_reply, struct docker_reply *ret,
                struct sbx_error *err)
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
                r = sbx_error_set(err, -ETIMEDOUT, 0, "Docker at %s did not answer %s %s within %ld ms", d->socket_path,
                                  method, path, timeout);
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

int docker_get_ok(struct docker *d, const char *path, long extra_timeout_ms, size_t max_reply, struct docker_reply *ret,
                  struct sbx_error *err)
{
        int r = docker_http(d, "GET", path, NULL, NULL, 0, extra_timeout_ms, max_reply, ret, err);

        if (r < 0)
                return r;
        if (ret->status != 200) {
                r = docker_reply_error(ret, false, err);
                docker_reply_done(ret);
        }
        return r;
}

/* Request + "status must be one of 2xx (or `also_ok`)" + optional parsed JSON. */
int docker_call(struct docker *d, const char *method, const char *path, const char *body, bool conflict_is_exists,
                long also_ok, long extra_timeout_ms, cJSON **ret_json, struct sbx_error *err)
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
char *docker_path_with_id(const char *prefix, const char *id, const char *suffix, bool keep_slash)
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
