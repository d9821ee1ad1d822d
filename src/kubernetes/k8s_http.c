/* k8s_http.c — the Kubernetes engine's one way to the API server: libcurl
 * over HTTPS with the credentials of a kubeconfig or a service account,
 * every request bounded by a timeout and every reply by a size, and the
 * apiserver's Status objects turned into errno values with their message.
 *
 * A curl handle per request (the engine is shared by every thread and a
 * request to the apiserver is rare next to a container's life); the
 * process-wide curl_global_init is main's (engine_docker_global_init). */
#include "k8s_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void k8s_reply_done(struct k8s_reply *r)
{
        if (!r)
                return;
        free(r->body);
        r->body = NULL;
        r->len = 0;
}

struct sink {
        char *buf;
        size_t len, cap, max;
        bool over;
};

static size_t sink_write(char *p, size_t size, size_t n, void *ud)
{
        struct sink *s = ud;
        size_t k = size * n;

        if (s->len + k > s->max) {
                s->over = true;
                return 0; /* aborts the transfer */
        }
        if (s->len + k + 1 > s->cap) {
                size_t cap = s->cap ? s->cap : 4096;
                char *nb;
                while (cap < s->len + k + 1)
                        cap *= 2;
                nb = realloc(s->buf, cap);
                if (!nb)
                        return 0;
                s->buf = nb;
                s->cap = cap;
        }
        memcpy(s->buf + s->len, p, k);
        s->len += k;
        s->buf[s->len] = '\0';
        return k;
}

struct progress {
        volatile bool *stop;
};

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
        struct progress *p = ud;
        (void)dt, (void)dn, (void)ut, (void)un;
        return p->stop && __atomic_load_n(p->stop, __ATOMIC_RELAXED) ? 1 : 0;
}

/* A handle set up for the server and credentials; headers in *ret_h. */
static CURL *handle(struct k8s *k, const char *path, long timeout_ms, const char *content_type,
                    struct curl_slist **ret_h, struct sbx_error *err)
{
        char url[sizeof(k->creds.server) + K8S_PATH_MAX];
        struct curl_slist *h = NULL;
        CURL *c;

        if (snprintf(url, sizeof(url), "%s%s", k->creds.server, path) >= (int)sizeof(url)) {
                sbx_error_set(err, -ENAMETOOLONG, 0, "request path too long");
                return NULL;
        }
        c = curl_easy_init();
        if (!c) {
                sbx_error_set(err, -ENOMEM, 0, "out of memory");
                return NULL;
        }
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https,http");
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 10000 ? timeout_ms : 10000L);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(c, CURLOPT_NOPROXY, "*"); /* never an environment proxy: the apiserver is reached directly */
        if (k->creds.ca_pem) {
                struct curl_blob b = {k->creds.ca_pem, k->creds.ca_len, CURL_BLOB_NOCOPY};
                curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &b);
        }
        if (k->creds.insecure) {
                curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
                curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
        }
        if (k->creds.cert_pem && k->creds.key_pem) {
                struct curl_blob cb = {k->creds.cert_pem, k->creds.cert_len, CURL_BLOB_NOCOPY};
                struct curl_blob kb = {k->creds.key_pem, k->creds.key_len, CURL_BLOB_NOCOPY};
                curl_easy_setopt(c, CURLOPT_SSLCERT_BLOB, &cb);
                curl_easy_setopt(c, CURLOPT_SSLCERTTYPE, "PEM");
                curl_easy_setopt(c, CURLOPT_SSLKEY_BLOB, &kb);
                curl_easy_setopt(c, CURLOPT_SSLKEYTYPE, "PEM");
        }
        h = curl_slist_append(h, "Accept: application/json");
        if (content_type) {
                char ct[96];
                snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
                h = curl_slist_append(h, ct);
        }
        if (k->creds.token) {
                size_t n = strlen(k->creds.token) + 32;
                char *auth = malloc(n);
                if (auth) {
                        snprintf(auth, n, "Authorization: Bearer %s", k->creds.token);
                        h = curl_slist_append(h, auth);
                        explicit_bzero(auth, n);
                        free(auth);
                }
        }
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        *ret_h = h;
        return c;
}

static int curl_error(struct k8s *k, CURLcode cc, const char *errbuf, struct sbx_error *err)
{
        __atomic_add_fetch(&k->api_errors, 1, __ATOMIC_RELAXED);
        if (cc == CURLE_OPERATION_TIMEDOUT)
                return sbx_error_set(err, -ETIMEDOUT, 0, "the Kubernetes API server at %s did not answer in time",
                                     k->creds.server);
        return sbx_error_set(err, -EIO, 0, "cannot reach the Kubernetes API server at %s: %s", k->creds.server,
                             errbuf[0] ? errbuf : curl_easy_strerror(cc));
}

int k8s_request(struct k8s *k, const char *method, const char *path, const char *content_type, const char *body,
                long timeout_ms, struct k8s_reply *ret, struct sbx_error *err)
{
        struct curl_slist *h = NULL;
        struct sink s = {.max = K8S_REPLY_MAX};
        char errbuf[CURL_ERROR_SIZE] = "";
        CURLcode cc;
        CURL *c;
        long status = 0;

        c = handle(k, path, timeout_ms > 0 ? timeout_ms : k->timeout_ms, content_type, &h, err);
        if (!c)
                return -EIO; /* err says why */
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
        if (body) {
                curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
                curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
        }
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
        cc = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(c);
        curl_slist_free_all(h);
        if (s.over) {
                free(s.buf);
                __atomic_add_fetch(&k->api_errors, 1, __ATOMIC_RELAXED);
                return sbx_error_set(err, -E2BIG, 0, "a reply of the Kubernetes API server to %s %s is over %u bytes",
                                     method, path, K8S_REPLY_MAX);
        }
        if (cc != CURLE_OK) {
                free(s.buf);
                return curl_error(k, cc, errbuf, err);
        }
        ret->status = status;
        ret->body = s.buf ? s.buf : strdup("");
        ret->len = s.len;
        if (!ret->body)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        return 0;
}

int k8s_status_error(struct k8s *k, const struct k8s_reply *r, const char *what, struct sbx_error *err)
{
        cJSON *j;
        const char *msg = NULL;
        char buf[512] = "";
        int code;

        if (r->status >= 200 && r->status < 300)
                return 0;
        switch (r->status) {
        case 404:
                code = -ENOENT;
                break;
        case 409:
                code = -EEXIST;
                break;
        case 401:
        case 403:
                code = -EACCES;
                break;
        case 410:
                code = -ESTALE;
                break;
        case 400:
        case 422:
                code = -EINVAL;
                break;
        default:
                code = -EIO;
                __atomic_add_fetch(&k->api_errors, 1, __ATOMIC_RELAXED);
        }
        j = cJSON_ParseWithLength(r->body ? r->body : "", r->len);
        if (j)
                msg = k8s_json_str(j, "message");
        if (msg)
                snprintf(buf, sizeof(buf), "%s", msg);
        else /* not a Status object: a proxy's page, say, shown cut and on one line */
                for (size_t i = 0, o = 0; r->body && i < r->len && o < 160; i++)
                        buf[o++] = (r->body[i] >= 0x20 && r->body[i] < 0x7f) ? r->body[i] : ' ', buf[o] = '\0';
        code = sbx_error_set(err, code, (int)r->status, "%s: the Kubernetes API server answered %ld%s%s", what,
                             r->status, buf[0] ? ": " : "", buf);
        cJSON_Delete(j);
        return code;
}

int k8s_call(struct k8s *k, const char *method, const char *path, const char *body, const char *what, cJSON **ret_json,
             struct sbx_error *err)
{
        struct k8s_reply r = {0};
        cJSON *j;
        int rc;

        /* a PATCH is a JSON merge patch (RFC 7386): the one kind with no schema of its own to follow */
        rc = k8s_request(k, method, path,
                         !body                          ? NULL
                         : strcmp(method, "PATCH") == 0 ? "application/merge-patch+json"
                                                        : "application/json",
                         body, 0, &r, err);
        if (rc < 0) {
                sbx_error_prefix(err, "%s", what);
                return rc;
        }
        rc = k8s_status_error(k, &r, what, err);
        if (rc < 0 || !ret_json) {
                k8s_reply_done(&r);
                return rc;
        }
        j = cJSON_ParseWithLength(r.body, r.len);
        k8s_reply_done(&r);
        if (!cJSON_IsObject(j)) {
                cJSON_Delete(j);
                __atomic_add_fetch(&k->api_errors, 1, __ATOMIC_RELAXED);
                return sbx_error_set(err, -EPROTO, 0, "%s: the Kubernetes API server's reply is not a JSON object",
                                     what);
        }
        *ret_json = j;
        return 0;
}

struct line_sink {
        char *buf;
        size_t len;
        bool over, stopped;
        int (*on_line)(char *line, size_t len, void *ud);
        void (*on_open)(void *ud);
        void *ud;
        int status; /* of the last status line */
};

/* The headers: on_open once the reply is a 2xx and its headers ended (a
 * watch is established before any event comes). */
static size_t header_line(char *p, size_t size, size_t n, void *ud)
{
        struct line_sink *s = ud;
        size_t k = size * n;
        char line[64];
        int code;

        snprintf(line, sizeof(line), "%.*s", (int)(k < sizeof(line) ? k : sizeof(line) - 1), p); /* p has no NUL */
        if (strncmp(line, "HTTP/", 5) == 0 && sscanf(line, "HTTP/%*s %d", &code) == 1)
                s->status = code;
        else if (k <= 2 && (p[0] == '\r' || p[0] == '\n') && s->status >= 200 && s->status < 300 && s->on_open) {
                s->on_open(s->ud);
                s->on_open = NULL;
        }
        return k;
}

static size_t line_write(char *p, size_t size, size_t n, void *ud)
{
        struct line_sink *s = ud;
        size_t k = size * n;

        for (size_t i = 0; i < k; i++) {
                if (p[i] == '\n') {
                        s->buf[s->len] = '\0';
                        if (s->len > 0 && s->on_line(s->buf, s->len, s->ud) != 0) {
                                s->stopped = true;
                                return 0;
                        }
                        s->len = 0;
                        continue;
                }
                if (s->len + 1 >= K8S_WATCH_LINE_MAX) {
                        s->over = true;
                        return 0;
                }
                s->buf[s->len++] = p[i];
        }
        return k;
}

int k8s_stream(struct k8s *k, const char *path, long timeout_ms, volatile bool *stop,
               int (*on_line)(char *line, size_t len, void *ud), void *ud, long *ret_status, struct sbx_error *err)
{
        return k8s_stream_open(k, path, timeout_ms, stop, NULL, on_line, ud, ret_status, err);
}

int k8s_stream_open(struct k8s *k, const char *path, long timeout_ms, volatile bool *stop, void (*on_open)(void *ud),
                    int (*on_line)(char *line, size_t len, void *ud), void *ud, long *ret_status, struct sbx_error *err)
{
        struct curl_slist *h = NULL;
        struct line_sink s = {.on_line = on_line, .on_open = on_open, .ud = ud};
        struct progress pr = {stop};
        char errbuf[CURL_ERROR_SIZE] = "";
        long status = 0;
        CURLcode cc;
        CURL *c;

        s.buf = malloc(K8S_WATCH_LINE_MAX);
        if (!s.buf)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        c = handle(k, path, timeout_ms, NULL, &h, err);
        if (!c) {
                free(s.buf);
                return -EIO;
        }
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, line_write);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_line);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, &s);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &pr);
        cc = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(c);
        curl_slist_free_all(h);
        *ret_status = status;
        if (s.over) {
                free(s.buf);
                return sbx_error_set(err, -E2BIG, 0, "a watch event over %u bytes", K8S_WATCH_LINE_MAX);
        }
        if (status >= 300 && s.len > 0) { /* an error reply without a newline: its Status */
                struct k8s_reply r = {status, s.buf, s.len};
                s.buf[s.len] = '\0';
                int rc = k8s_status_error(k, &r,
                                          strncmp(path, "/api/v1/nodes", 13) == 0 ? "watching Nodes" : "watching Pods",
                                          err);
                free(s.buf);
                return rc;
        }
        free(s.buf);
        if (s.stopped || cc == CURLE_ABORTED_BY_CALLBACK || cc == CURLE_OK)
                return 0;
        return curl_error(k, cc, errbuf, err);
}
