/* mcp_api_https.c — the adapter's API client over HTTPS (`sandboxd-mcp
 * --url`): the same requests as on the API socket (mcp_api.c), each a
 * `POST <url>/v1/<method>` with the params as the body and the token as
 * `Authorization: Bearer`, answered by the daemon's HTTP front (http.h) with
 * the result object or {"error": {code, message}}. No second protocol: the
 * core above cannot tell the two transports apart.
 *
 * libcurl does the HTTP and TLS (the adapter is a separate process from the
 * daemon and links libcurl itself; hand-written HTTP over GnuTLS would be
 * the worse choice). Certificates: the system store, or
 * --cacert FILE alone; --cert/--key present a client certificate (mTLS).
 * Plain http:// is accepted only to a loopback host.
 *
 * Threads: a connection belongs to one thread, as on the socket. Another
 * thread wakes a request by shutdown(2) on mcp_api_fd: that is one end of a
 * socketpair whose other end the transfer's progress callback watches, so
 * the transfer is aborted within a poll interval (curl calls it at least
 * once a second). mcp_https_configure runs once, before any thread. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "mcp_internal.h"
#include "sandboxd/api.h"

#define MCP_URL_MAX 512

static struct {
        char *cacert, *cert, *key;
} tls;

struct mcp_https {
        CURL *curl;
        char url[MCP_URL_MAX];
        int wake[2]; /* [0]: the fd others shut down; [1]: watched by the transfer */
};

struct body {
        char *buf;
        size_t len;
        bool too_long;
};

int mcp_https_configure(const char *cacert, const char *cert, const char *key)
{
        if ((cert && !key) || (key && !cert))
                return -EINVAL;
        tls.cacert = cacert ? strdup(cacert) : NULL;
        tls.cert = cert ? strdup(cert) : NULL;
        tls.key = key ? strdup(key) : NULL;
        return 0;
}

int mcp_https_global_init(void)
{
        return curl_global_init(CURL_GLOBAL_ALL) == CURLE_OK ? 0 : -EIO;
}

bool mcp_https_is_url(const char *s)
{
        return s && (strncmp(s, "https://", 8) == 0 || strncmp(s, "http://", 7) == 0);
}

/* The URL's host as libcurl parses it (what it will connect to), not a
 * prefix of the text: "http://127.0.0.1@evil.example/" is evil.example's,
 * and "http://127.evil.example" a name anyone may resolve. No userinfo. */
static bool loopback_host(const char *url)
{
        CURLU *u = curl_url();
        char *host = NULL, *user = NULL;
        bool ok = false;

        if (!u || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
            curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host)
                goto out;
        if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK && user)
                goto out; /* no credentials in the URL: and it hides the host from a reader */
        if (strcasecmp(host, "localhost") == 0 || strcmp(host, "[::1]") == 0)
                ok = true;
        else {
                struct in_addr a;
                ok = inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
        }
out:
        curl_free(host);
        curl_free(user);
        curl_url_cleanup(u);
        return ok;
}

int mcp_https_check_url(const char *url, struct sbx_error *err)
{
        size_t n = url ? strlen(url) : 0;

        if (!mcp_https_is_url(url) || n >= MCP_URL_MAX - 80)
                return sbx_error_set(err, -EINVAL, 0, "the URL must be https://host:port (at most %d bytes)",
                                     MCP_URL_MAX - 80);
        if (strncmp(url, "http://", 7) == 0 && !loopback_host(url))
                return sbx_error_set(err, -EINVAL, 0,
                                     "plain http:// only to a loopback host: the token would cross the network "
                                     "in clear");
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)url[i] <= ' ' || url[i] == '?' || url[i] == '#')
                        return sbx_error_set(err, -EINVAL, 0, "the URL must not hold blanks, a query or a fragment");
        return 0;
}

int mcp_https_open(const char *url, struct mcp_https **ret, struct sbx_error *err)
{
        struct mcp_https *h;
        int r = mcp_https_check_url(url, err);

        if (r < 0)
                return r;
        h = calloc(1, sizeof(*h));
        if (!h)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        snprintf(h->url, sizeof(h->url), "%s", url);
        while (strlen(h->url) > 8 && h->url[strlen(h->url) - 1] == '/')
                h->url[strlen(h->url) - 1] = '\0';
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, h->wake) < 0) {
                r = -errno;
                free(h);
                return sbx_error_set(err, r, 0, "socketpair: %s", strerror(-r));
        }
        h->curl = curl_easy_init();
        if (!h->curl) {
                close(h->wake[0]);
                close(h->wake[1]);
                free(h);
                return sbx_error_set(err, -ENOMEM, 0, "cannot make an HTTP handle");
        }
        *ret = h;
        return 0;
}

void mcp_https_close(struct mcp_https *h)
{
        if (!h)
                return;
        curl_easy_cleanup(h->curl);
        close(h->wake[0]);
        close(h->wake[1]);
        free(h);
}

int mcp_https_fd(struct mcp_https *h)
{
        return h ? h->wake[0] : -1;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
        struct body *b = ud;
        size_t len = size * n;
        char *nb;

        if (b->len + len > API_MAX_REPLY) {
                b->too_long = true;
                return 0; /* aborts the transfer */
        }
        nb = realloc(b->buf, b->len + len + 1);
        if (!nb)
                return 0;
        memcpy(nb + b->len, p, len);
        b->buf = nb;
        b->len += len;
        b->buf[b->len] = '\0';
        return len;
}

/* Non-zero aborts: the other end of the wake pair was shut down. */
static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
        struct mcp_https *h = ud;
        struct pollfd p = {.fd = h->wake[1], .events = POLLIN};
        char c;

        if (poll(&p, 1, 0) <= 0)
                return 0;
        return recv(h->wake[1], &c, 1, MSG_DONTWAIT) == 0 ? 1 : 0;
}

static void set_err(struct mcp_api_error *err, const char *code, const char *msg)
{
        if (!err)
                return;
        sbx_strlcpy(err->code, code, sizeof(err->code));
        sbx_strlcpy(err->message, msg, sizeof(err->message));
}

int mcp_https_request(struct mcp_https *h, const char *token, const char *method, const cJSON *params, int timeout_ms,
                      cJSON **ret_result, struct mcp_api_error *err)
{
        _cleanup_free_ char *body_out = NULL, *auth = NULL;
        char url[MCP_URL_MAX + 80], msg[CURL_ERROR_SIZE + 64], errbuf[CURL_ERROR_SIZE] = "";
        struct curl_slist *hdrs = NULL;
        struct body in = {0};
        long status = 0;
        CURLcode cr;
        cJSON *reply;
        int r;

        if (!h) {
                set_err(err, "transport", "not connected to sandboxd");
                return -ENOTCONN;
        }
        body_out = params ? cJSON_PrintUnformatted(params) : strdup("{}");
        if (!body_out || asprintf(&auth, "Authorization: Bearer %s", token ? token : "") < 0) {
                auth = NULL;
                set_err(err, "transport", "out of memory");
                return -ENOMEM;
        }
        snprintf(url, sizeof(url), "%s/v1/%s", h->url, method);
        hdrs = curl_slist_append(hdrs, auth);
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        hdrs = curl_slist_append(hdrs, "Accept: application/json");
        hdrs = curl_slist_append(hdrs, "Expect:");

        curl_easy_reset(h->curl); /* keeps the connection for the next request */
        curl_easy_setopt(h->curl, CURLOPT_URL, url);
        curl_easy_setopt(h->curl, CURLOPT_PROTOCOLS_STR, "https,http");
        curl_easy_setopt(h->curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, body_out);
        curl_easy_setopt(h->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body_out));
        curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, &in);
        curl_easy_setopt(h->curl, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h->curl, CURLOPT_XFERINFODATA, h);
        curl_easy_setopt(h->curl, CURLOPT_CONNECTTIMEOUT_MS, 15000L);
        curl_easy_setopt(h->curl, CURLOPT_TIMEOUT_MS, (long)(timeout_ms > 0 ? timeout_ms : 300000));
        curl_easy_setopt(h->curl, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(h->curl, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(h->curl, CURLOPT_SSL_VERIFYHOST, 2L);
        if (tls.cacert)
                curl_easy_setopt(h->curl, CURLOPT_CAINFO, tls.cacert);
        if (tls.cert) {
                curl_easy_setopt(h->curl, CURLOPT_SSLCERT, tls.cert);
                curl_easy_setopt(h->curl, CURLOPT_SSLKEY, tls.key);
        }
        cr = curl_easy_perform(h->curl);
        curl_slist_free_all(hdrs);
        if (cr != CURLE_OK) {
                r = cr == CURLE_OPERATION_TIMEDOUT           ? -ETIMEDOUT
                    : cr == CURLE_ABORTED_BY_CALLBACK        ? -ECONNRESET
                    : cr == CURLE_WRITE_ERROR && in.too_long ? -EMSGSIZE
                                                             : -ECONNREFUSED;
                snprintf(msg, sizeof(msg), "%s",
                         r == -ECONNRESET ? "sandboxd closed the connection"
                         : r == -EMSGSIZE ? "reply from sandboxd too long"
                         : errbuf[0]      ? errbuf
                                          : curl_easy_strerror(cr));
                set_err(err, "transport", msg);
                free(in.buf);
                return r;
        }
        curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &status);
        reply = in.buf ? cJSON_ParseWithLength(in.buf, in.len) : NULL;
        free(in.buf);
        if (!cJSON_IsObject(reply)) {
                cJSON_Delete(reply);
                snprintf(msg, sizeof(msg), "malformed reply from sandboxd (HTTP %ld)", status);
                set_err(err, "transport", msg);
                return -EBADMSG;
        }
        if (status == 200) {
                *ret_result = reply;
                return 0;
        }
        {
                const cJSON *e = cJSON_GetObjectItemCaseSensitive(reply, "error");
                const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");
                const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
                set_err(err, cJSON_IsString(c) ? c->valuestring : "internal",
                        cJSON_IsString(m) ? m->valuestring : "request failed");
        }
        cJSON_Delete(reply);
        return -EREMOTEIO;
}
