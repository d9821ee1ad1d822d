/* http.c — the http_exec_roundtrip row of sandboxd-bench (issue 16): the
 * exec round trip of `true` in a warm session through POST /v1/exec over
 * HTTPS with keep-alive (one libcurl handle, one TLS connection), against
 * the same exec on the API socket, sample for sample in turn (A B, B A, ...)
 * so a busy machine weighs on both. Target: p50 at most 2 ms above the
 * socket's.
 *
 * scripts/bench.sh makes a CA and a server certificate for 127.0.0.1, starts
 * the daemon with http.listen 127.0.0.1:0 and passes the CA (--http-ca);
 * the port is read from the daemon's log.
 *
 * Single-threaded: the main thread only. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define SESSION "http"

struct sink {
        char buf[65536];
        size_t len;
};

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
        struct sink *s = ud;
        size_t len = size * n, room = sizeof(s->buf) - 1 - s->len;

        memcpy(s->buf + s->len, p, len < room ? len : room);
        s->len += len < room ? len : room;
        s->buf[s->len] = '\0';
        return len;
}

/* The HTTPS port from the daemon's log ("HTTPS listening on ... (port N)"), or -1. */
static int https_port(const char *log_path)
{
        FILE *f = fopen(log_path, "re");
        char line[4096];
        int port = -1;

        while (f && fgets(line, sizeof(line), f)) {
                const char *p = strstr(line, "HTTPS listening on ");
                if (p && (p = strstr(p, "(port ")))
                        port = atoi(p + 6);
        }
        if (f)
                fclose(f);
        return port;
}

/* One POST /v1/exec on the kept-alive handle: ms, or -1 with why. */
static double http_exec(CURL *h, struct sink *s, char *why, size_t why_size)
{
        double t0 = bench_now_ms(), dt;
        long status = 0;
        CURLcode cr;

        s->len = 0;
        s->buf[0] = '\0';
        cr = curl_easy_perform(h);
        dt = bench_now_ms() - t0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        if (cr != CURLE_OK || status != 200 || !strstr(s->buf, "\"exit_code\":0")) {
                snprintf(why, why_size, "%s, HTTP %ld: %.200s", curl_easy_strerror(cr), status, s->buf);
                return -1;
        }
        return dt;
}

int phase_http(struct bench *b)
{
        struct measurement *m = report_add(&b->rep, "http_exec_roundtrip", "ms");
        char url[128], auth[300], why[512];
        struct curl_slist *hdrs = NULL;
        struct sink *sink = calloc(1, sizeof(*sink));
        long connects = 0;
        int port = https_port(b->log_path), errors = 0, rc = -1;
        struct conn c = {.fd = -1};
        CURL *h = NULL;

        m->has_baseline = true;
        snprintf(m->baseline_desc, sizeof(m->baseline_desc),
                 "the same exec on the API socket (one connection), interleaved");
        measurement_target(m, TARGET_DIFF_LE, 2, "p50 <= baseline p50 + 2 ms");
        if (!b->http_ca || port <= 0) {
                snprintf(m->note, sizeof(m->note), "not measured: the daemon has no HTTPS listener (--http-ca)");
                say("http: skipped (no HTTPS listener)");
                free(sink);
                return 0;
        }
        if (!sink || conn_open(&c, b->cfg.api_socket) < 0)
                goto out;
        h = curl_easy_init();
        if (!h)
                goto out;
        snprintf(url, sizeof(url), "https://127.0.0.1:%d/v1/exec", port);
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", b->token);
        hdrs = curl_slist_append(hdrs, auth);
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "{\"session\":\"" SESSION "\",\"command\":\"true\"}");
        curl_easy_setopt(h, CURLOPT_CAINFO, b->http_ca);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, sink);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)CALL_TIMEOUT_MS);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);

        /* warm: the container, the TLS connection, and a few of each */
        if (timed_exec(b, &c, SESSION, "true", why, sizeof(why)) < 0 || http_exec(h, sink, why, sizeof(why)) < 0) {
                say("http: cannot warm up: %s", why);
                goto out;
        }
        for (int i = 0; i < 3; i++) {
                (void)timed_exec(b, &c, SESSION, "true", why, sizeof(why));
                (void)http_exec(h, sink, why, sizeof(why));
        }
        say("http: %d interleaved pairs, HTTPS port %d", b->sz.http, port);
        for (int i = 0; i < b->sz.http; i++) {
                for (int k = 0; k < 2; k++) {
                        bool via_http = (k + i) % 2 == 0; /* A B, B A */
                        double dt = via_http ? http_exec(h, sink, why, sizeof(why))
                                             : timed_exec(b, &c, SESSION, "true", why, sizeof(why));
                        if (dt < 0) {
                                say("http: exec failed (%s): %s", via_http ? "https" : "socket", why);
                                errors++;
                                continue;
                        }
                        series_add(via_http ? &m->s : &m->base, dt);
                }
        }
        curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &connects);
        snprintf(m->note, sizeof(m->note),
                 "exec of true in a warm session: POST /v1/exec over HTTPS (one kept-alive TLS connection: "
                 "%ld new connection(s) in the last request) against the API socket; %d error(s)",
                 connects, errors);
        rc = errors ? -1 : 0;
out:
        curl_slist_free_all(hdrs);
        if (h)
                curl_easy_cleanup(h);
        if (c.fd >= 0)
                conn_close(&c);
        free(sink);
        return rc;
}
