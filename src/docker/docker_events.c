/* docker_events.c — following GET /events.
 *
 * The stream is newline-delimited JSON that stays open for as long as the
 * engine runs; objects may be split across reads, so bytes collect in a line
 * buffer and each complete line is parsed on its own. The transfer runs on a
 * private CURL handle (not the thread's keep-alive one, so the callback may
 * call other docker_* functions from the same thread) driven through a multi
 * handle polled every 100 ms: that is how the stop flag is seen within 200 ms
 * even when the stream is idle (curl_easy_perform would sleep up to 1 s
 * between progress callbacks). The XFERINFO callback checks it as well.
 *
 * No timeout and no low-speed limit: an idle stream is normal. After a drop
 * we reconnect with since=<last event time> and skip the event we already
 * delivered, backing off from 100 ms up to 1 s.
 *
 * Everything here is local to one docker_events_follow() call: no locks. */
#include "docker_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "sandboxd/log.h"

#define EVENTS_POLL_MS 100
#define EVENTS_BACKOFF_MIN_MS 100
#define EVENTS_BACKOFF_MAX_MS 1000
#define EVENTS_MAX_LINE (1u << 20)

struct events_ctx {
        const char *const *filters;
        docker_event_cb cb;
        void *userdata;
        volatile bool *stop;
        CURL *curl;

        long status; /* of the current connection, 0 until headers arrive */
        char *line;  /* partial line carried over between callbacks */
        size_t len, cap;
        bool overlong; /* dropping the rest of a line too long to keep */
        bool cb_stopped;
        char errbody[1024];
        size_t errlen;

        int64_t last_nano; /* the last delivered event, for since= and dedup */
        char last_id[65];
        char last_action[32];
};

static bool stop_requested(const struct events_ctx *x)
{
        return x->stop && __atomic_load_n(x->stop, __ATOMIC_RELAXED);
}

static int events_xferinfo(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
        return stop_requested(userdata) ? 1 : 0;
}

/* One complete line: parse, skip replays, deliver. */
static void events_line(struct events_ctx *x, const char *line, size_t len)
{
        struct docker_event ev;

        while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
                len--;
        if (len == 0)
                return;
        if (docker_event_parse_filtered(line, len, x->filters, &ev) < 0) {
                log_debug("docker events: skipping unparseable line (%zu bytes)", len);
                return;
        }
        /* since= replays events at that very nanosecond */
        if (ev.time_nano < x->last_nano ||
            (ev.time_nano == x->last_nano && strcmp(ev.id, x->last_id) == 0 && strcmp(ev.action, x->last_action) == 0))
                return;
        x->last_nano = ev.time_nano;
        memcpy(x->last_id, ev.id, sizeof(x->last_id));
        memcpy(x->last_action, ev.action, sizeof(x->last_action));
        if (x->cb(&ev, x->userdata) != 0)
                x->cb_stopped = true;
}

static size_t events_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
        struct events_ctx *x = userdata;
        size_t n = size * nmemb, off = 0;

        if (x->status == 0)
                curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &x->status);
        if (x->status != 200) {
                size_t take = sizeof(x->errbody) - 1 - x->errlen;
                if (take > n)
                        take = n;
                memcpy(x->errbody + x->errlen, ptr, take);
                x->errlen += take;
                x->errbody[x->errlen] = '\0';
                return n;
        }
        while (off < n && !x->cb_stopped) {
                const char *nl = memchr(ptr + off, '\n', n - off);
                size_t seg = nl ? (size_t)(nl - (ptr + off)) : n - off;

                if (x->overlong || x->len + seg > EVENTS_MAX_LINE) {
                        x->overlong = true; /* no event is this big: drop it */
                        x->len = 0;
                } else if (x->len == 0 && nl) {
                        events_line(x, ptr + off, seg); /* whole line in this chunk: no copy */
                } else {
                        if (x->len + seg > x->cap) {
                                size_t cap = x->cap ? x->cap : 4096;
                                char *p;
                                while (cap < x->len + seg)
                                        cap *= 2;
                                p = realloc(x->line, cap);
                                if (!p)
                                        return 0;
                                x->line = p;
                                x->cap = cap;
                        }
                        memcpy(x->line + x->len, ptr + off, seg);
                        x->len += seg;
                        if (nl) {
                                events_line(x, x->line, x->len);
                                x->len = 0;
                        }
                }
                if (nl)
                        x->overlong = false;
                off += seg + (nl ? 1 : 0);
        }
        return x->cb_stopped ? 0 : n; /* 0 aborts the transfer */
}

static int64_t wall_nano(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static char *events_path(const char *const *label_filters, const char *const *actions, int64_t since_nano)
{
        cJSON *f = docker_filters_new(label_filters), *types, *evs;
        char *json = NULL, *esc = NULL, *path = NULL;

        if (!f)
                return NULL;
        types = cJSON_AddArrayToObject(f, "type");
        if (types)
                cJSON_AddItemToArray(types, cJSON_CreateString("container"));
        if (actions && actions[0]) {
                evs = cJSON_AddArrayToObject(f, "event");
                for (size_t i = 0; evs && actions[i]; i++)
                        cJSON_AddItemToArray(evs, cJSON_CreateString(actions[i]));
        }
        json = cJSON_PrintUnformatted(f);
        cJSON_Delete(f);
        if (json)
                esc = curl_easy_escape(NULL, json, 0);
        free(json);
        if (!esc)
                return NULL;
        if (since_nano > 0) {
                if (asprintf(&path, "/events?filters=%s&since=%lld.%09lld", esc, (long long)(since_nano / 1000000000),
                             (long long)(since_nano % 1000000000)) < 0)
                        path = NULL;
        } else if (asprintf(&path, "/events?filters=%s", esc) < 0)
                path = NULL;
        curl_free(esc);
        return path;
}

/* One connection: runs until the stream ends, fails, or we are told to stop.
 * Returns the CURLcode; *ret_connected tells whether a 200 was seen. */
static CURLcode events_once(struct docker *d, struct events_ctx *x, CURLM *multi, const char *url, bool *ret_connected,
                            long *ret_oserr)
{
        CURLcode result = CURLE_OK;
        bool done = false;

        curl_easy_reset(x->curl);
        docker_curl_common(x->curl, d);
        curl_easy_setopt(x->curl, CURLOPT_URL, url);
        curl_easy_setopt(x->curl, CURLOPT_TIMEOUT, 0L); /* the stream is meant to stay open */
        curl_easy_setopt(x->curl, CURLOPT_WRITEFUNCTION, events_write);
        curl_easy_setopt(x->curl, CURLOPT_WRITEDATA, x);
        curl_easy_setopt(x->curl, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(x->curl, CURLOPT_XFERINFOFUNCTION, events_xferinfo);
        curl_easy_setopt(x->curl, CURLOPT_XFERINFODATA, x);
        x->status = 0;
        x->len = 0;
        x->overlong = false;
        x->errlen = 0;
        x->errbody[0] = '\0';
        *ret_connected = false;
        *ret_oserr = 0;

        curl_multi_add_handle(multi, x->curl);
        while (!done) {
                int running = 0, left;
                CURLMsg *msg;

                curl_multi_perform(multi, &running);
                while ((msg = curl_multi_info_read(multi, &left)))
                        if (msg->msg == CURLMSG_DONE && msg->easy_handle == x->curl) {
                                result = msg->data.result;
                                done = true;
                        }
                if (!*ret_connected) {
                        long code = 0;
                        curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &code);
                        if (code == 200)
                                *ret_connected = true;
                        if (code != 0)
                                x->status = code;
                }
                if (done)
                        break;
                if (stop_requested(x) || x->cb_stopped) {
                        result = CURLE_ABORTED_BY_CALLBACK;
                        break;
                }
                curl_multi_poll(multi, NULL, 0, EVENTS_POLL_MS, NULL);
        }
        if (result == CURLE_COULDNT_CONNECT)
                curl_easy_getinfo(x->curl, CURLINFO_OS_ERRNO, ret_oserr);
        curl_multi_remove_handle(multi, x->curl);
        return result;
}

int docker_events_follow(struct docker *d, const char *const *label_filters, const char *const *actions,
                         docker_event_cb cb, void *userdata, volatile bool *stop, long reconnect_limit_ms,
                         struct sbx_error *err)
{
        struct events_ctx x = {.filters = label_filters, .cb = cb, .userdata = userdata, .stop = stop};
        int64_t started_nano = wall_nano(), down_since = -1;
        long backoff = EVENTS_BACKOFF_MIN_MS;
        bool first = true;
        CURLM *multi = NULL;
        char prefix[24];
        int r = 0;

        if (!d || !cb)
                return sbx_error_set(err, -EINVAL, 0, "events follow needs a client and a callback");
        x.curl = curl_easy_init();
        multi = curl_multi_init();
        if (!x.curl || !multi) {
                r = sbx_error_set(err, -ENOMEM, 0, "cannot allocate CURL handles");
                goto out;
        }

        for (;;) {
                _cleanup_free_ char *path = NULL, *url = NULL;
                bool connected;
                long oserr;
                CURLcode cc;

                if (stop_requested(&x))
                        break;
                /* after a drop, resume where we were (or where we began) */
                path = events_path(label_filters, actions, first ? 0 : x.last_nano ? x.last_nano : started_nano);
                first = false;
                docker_version_prefix(d, prefix);
                if (!path || asprintf(&url, "http://localhost%s%s", prefix, path) < 0) {
                        url = NULL;
                        r = sbx_error_set(err, -ENOMEM, 0, "out of memory");
                        break;
                }
                log_debug("docker events: GET %s", path);
                cc = events_once(d, &x, multi, url, &connected, &oserr);
                if (x.cb_stopped || stop_requested(&x))
                        break;
                if (x.status != 0 && x.status != 200 && x.status < 500) {
                        /* the engine refused the request itself (bad filter, ...) */
                        struct docker_reply rep = {.status = x.status, .body = x.errbody, .len = x.errlen};
                        r = docker_reply_error(&rep, false, err);
                        break;
                }
                if (connected) {
                        down_since = -1;
                        backoff = EVENTS_BACKOFF_MIN_MS;
                }
                if (down_since < 0)
                        down_since = sbx_now_ms();
                log_debug("docker events: stream ended (%s), reconnecting", curl_easy_strerror(cc));
                if (reconnect_limit_ms > 0 && sbx_now_ms() - down_since >= reconnect_limit_ms) {
                        if (cc == CURLE_COULDNT_CONNECT)
                                r = docker_unreachable(d, (int)oserr, err);
                        else
                                r = sbx_error_set(err, -EIO, (int)x.status, "Docker events stream at %s lost: %s",
                                                  d->socket_path, curl_easy_strerror(cc));
                        break;
                }
                {
                        /* never sleep past the reconnect limit */
                        int64_t until = sbx_now_ms() + backoff;
                        if (reconnect_limit_ms > 0 && until > down_since + reconnect_limit_ms)
                                until = down_since + reconnect_limit_ms;
                        while (!stop_requested(&x) && sbx_now_ms() < until) {
                                int64_t left = until - sbx_now_ms();
                                sbx_sleep_ms(left < EVENTS_POLL_MS ? left : EVENTS_POLL_MS);
                        }
                }
                backoff = backoff * 2 > EVENTS_BACKOFF_MAX_MS ? EVENTS_BACKOFF_MAX_MS : backoff * 2;
        }
out:
        if (multi)
                curl_multi_cleanup(multi);
        if (x.curl)
                curl_easy_cleanup(x.curl);
        free(x.line);
        return r;
}
