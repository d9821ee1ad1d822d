/* webhook.c — the operator's webhook sender (include/sandboxd/webhook.h):
 * WEBHOOK_MAX_INFLIGHT threads ("sbx-webhook"), each with its own libcurl
 * handle, take the next event from a page read ahead of the log, POST it
 * signed, and retry with backoff.
 *
 * Locks: w->lock guards the read-ahead page, the cursor, the in-flight ids
 * and `stopping`; it is held across the store's short calls (only these
 * threads take it) and never across a transfer or a backoff wait. */
#include "sandboxd/webhook.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandboxd/log.h"
#include "sandboxd/sha256.h"
#include "sandboxd/store_events.h"

#define WEBHOOK_THREADS_MAX 64
#define WEBHOOK_PAGE 32 /* rows read ahead of the senders */

struct webhook {
        const struct sbx_config *cfg;
        struct store *st;
        char secret[256];
        size_t secret_len;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool stopping;                         /* lock; read unlocked as a hint by transfers */
        int64_t cursor;                        /* lock: every id <= cursor is done */
        int64_t fetched;                       /* lock: the newest id read ahead */
        int64_t inflight[WEBHOOK_THREADS_MAX]; /* lock */
        int n_inflight;                        /* lock */
        struct store_event *page;              /* lock */
        size_t page_n, page_i;                 /* lock */
        pthread_t threads[WEBHOOK_THREADS_MAX];
        int n_threads;
        int64_t last_warn_ms; /* lock */
};

static uint64_t s_attempts, s_delivered, s_failed, s_retries, s_dropped;
static int64_t s_inflight, s_inflight_peak, s_cursor;
#define BUMP(x, n) __atomic_add_fetch(&(x), (n), __ATOMIC_RELAXED)
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

void webhook_stats(struct webhook_stats *ret)
{
        ret->attempts = LOAD(s_attempts);
        ret->delivered = LOAD(s_delivered);
        ret->failed = LOAD(s_failed);
        ret->retries = LOAD(s_retries);
        ret->dropped = LOAD(s_dropped);
        ret->inflight = LOAD(s_inflight);
        ret->inflight_peak = LOAD(s_inflight_peak);
        ret->cursor = LOAD(s_cursor);
}

int webhook_sign(const char *secret, size_t secret_len, const char *timestamp, const char *body, size_t body_len,
                 char ret_hex[65])
{
        size_t tl = strlen(timestamp);
        _cleanup_free_ char *msg = malloc(tl + 1 + body_len);
        if (!msg)
                return -ENOMEM;
        memcpy(msg, timestamp, tl);
        msg[tl] = '.';
        memcpy(msg + tl + 1, body, body_len);
        return sha256_hmac_hex(secret, secret_len, msg, tl + 1 + body_len, ret_hex);
}

/* webhook.events: "" = all; else comma-separated types, "family.*" for a family. */
static bool wanted(const struct webhook *w, const char *type)
{
        const char *p = w->cfg->webhook_events;

        if (!*p)
                return true;
        while (*p) {
                size_t n;
                while (*p == ' ' || *p == ',')
                        p++;
                n = strcspn(p, ", ");
                if (n == 0)
                        break;
                if (n >= 2 && p[n - 1] == '*' && p[n - 2] == '.' ? strncmp(type, p, n - 1) == 0
                                                                 : strlen(type) == n && strncmp(type, p, n) == 0)
                        return true;
                p += n;
        }
        return false;
}

static char *event_body(const struct store_event *ev)
{
        cJSON *o = cJSON_CreateObject(), *data = cJSON_Parse(ev->data ? ev->data : "{}");
        char *text;

        if (!o) {
                cJSON_Delete(data);
                return NULL;
        }
        cJSON_AddNumberToObject(o, "id", (double)ev->id);
        cJSON_AddStringToObject(o, "type", ev->type);
        cJSON_AddStringToObject(o, "user", ev->user_id);
        cJSON_AddStringToObject(o, "session", ev->session_id);
        cJSON_AddNumberToObject(o, "ts", (double)ev->ts);
        cJSON_AddStringToObject(o, "trace_id", ev->trace_id);
        if (data)
                cJSON_AddItemToObject(o, "data", data);
        else
                cJSON_AddObjectToObject(o, "data");
        text = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        return text;
}

static bool stopping(struct webhook *w)
{
        return __atomic_load_n(&w->stopping, __ATOMIC_RELAXED);
}

static size_t discard_answer(char *ptr, size_t size, size_t n, void *ud)
{
        size_t *got = ud;
        *got += size * n;
        return *got > WEBHOOK_ANSWER_MAX ? 0 : size * n; /* 0 ends a receiver that talks too much */
}

static int abort_when_stopping(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
        return stopping(ud) ? 1 : 0;
}

/* One POST: 0 for a 2xx, else -errno (the status or curl's error in why). */
static int post_once(struct webhook *w, CURL *c, const struct store_event *ev, const char *body, int attempt, char *why,
                     size_t why_size)
{
        struct curl_slist *h = NULL;
        char line[256], ts[32], sig[65];
        size_t got = 0;
        long status = 0;
        CURLcode cc;
        int r;

        snprintf(ts, sizeof(ts), "%" PRId64, sbx_wall_ms() / 1000);
        r = webhook_sign(w->secret, w->secret_len, ts, body, strlen(body), sig);
        if (r < 0) {
                snprintf(why, why_size, "cannot sign: out of memory");
                return r;
        }
        h = curl_slist_append(h, "Content-Type: application/json");
        snprintf(line, sizeof(line), "X-Sandboxd-Event: %s", ev->type);
        h = curl_slist_append(h, line);
        snprintf(line, sizeof(line), "X-Sandboxd-Event-Id: %" PRId64, ev->id);
        h = curl_slist_append(h, line);
        snprintf(line, sizeof(line), "X-Sandboxd-Delivery-Attempt: %d", attempt);
        h = curl_slist_append(h, line);
        snprintf(line, sizeof(line), "X-Sandboxd-Timestamp: %s", ts);
        h = curl_slist_append(h, line);
        snprintf(line, sizeof(line), "X-Sandboxd-Signature: sha256=%s", sig);
        h = curl_slist_append(h, line);
        h = curl_slist_append(h, "Expect:"); /* no 100-continue round trip */
        if (!h) {
                snprintf(why, why_size, "out of memory");
                return -ENOMEM;
        }
        curl_easy_reset(c);
        curl_easy_setopt(c, CURLOPT_URL, w->cfg->webhook_url);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(c, CURLOPT_PROXY, ""); /* never an environment proxy */
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)w->cfg->webhook_timeout_ms);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
        curl_easy_setopt(c, CURLOPT_USERAGENT, "sandboxd-webhook/1");
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard_answer);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, abort_when_stopping);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, w);
        if (w->cfg->webhook_ca[0])
                curl_easy_setopt(c, CURLOPT_CAINFO, w->cfg->webhook_ca);
        BUMP(s_attempts, 1);
        cc = curl_easy_perform(c);
        curl_slist_free_all(h);
        if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && got > WEBHOOK_ANSWER_MAX)) {
                snprintf(why, why_size, "%s", curl_easy_strerror(cc));
                return cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -ECONNREFUSED;
        }
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        if (status < 200 || status > 299) {
                snprintf(why, why_size, "HTTP status %ld", status);
                return -EPROTO;
        }
        return 0;
}

/* Wait ms, or less when stopping: false when stopping. */
static bool backoff(struct webhook *w, int64_t ms)
{
        struct timespec until = sbx_deadline_after(CLOCK_REALTIME, ms);
        bool go;

        pthread_mutex_lock(&w->lock);
        while (!w->stopping && pthread_cond_timedwait(&w->cond, &w->lock, &until) != ETIMEDOUT)
                ;
        go = !w->stopping;
        pthread_mutex_unlock(&w->lock);
        return go;
}

static void deliver(struct webhook *w, CURL *c, const struct store_event *ev)
{
        _cleanup_free_ char *body = event_body(ev);
        char why[256] = "";
        int64_t delay = w->cfg->webhook_backoff_ms;

        for (int attempt = 0; body && !stopping(w); attempt++) {
                if (post_once(w, c, ev, body, attempt + 1, why, sizeof(why)) == 0) {
                        BUMP(s_delivered, 1);
                        return;
                }
                if (stopping(w))
                        return; /* not failed: the cursor stays before it and a restart sends it */
                if (attempt >= w->cfg->webhook_max_retries)
                        break;
                BUMP(s_retries, 1);
                if (!backoff(w, delay))
                        return;
                delay = delay * 2 > WEBHOOK_BACKOFF_MAX_MS ? WEBHOOK_BACKOFF_MAX_MS : delay * 2;
        }
        if (stopping(w))
                return;
        BUMP(s_failed, 1);
        pthread_mutex_lock(&w->lock);
        if (sbx_now_ms() - w->last_warn_ms > 60000) {
                w->last_warn_ms = sbx_now_ms();
                log_warn("webhook: event %" PRId64
                         " (%s) not delivered after %d attempts: %s (later failures "
                         "are counted, not logged, for a minute)",
                         ev->id, ev->type, w->cfg->webhook_max_retries + 1, body ? why : "out of memory");
        }
        pthread_mutex_unlock(&w->lock);
}

/* Every id up to the oldest in flight (or up to what was read ahead) is
 * done: persist the cursor when it moved. */
static void advance_locked(struct webhook *w)
{
        int64_t low = w->page_i < w->page_n ? w->page[w->page_i].id - 1 : w->fetched;

        for (int i = 0; i < w->n_inflight; i++)
                if (w->inflight[i] - 1 < low)
                        low = w->inflight[i] - 1;
        if (low <= w->cursor)
                return;
        w->cursor = low;
        __atomic_store_n(&s_cursor, low, __ATOMIC_RELAXED);
        if (store_event_cursor_set(w->st, WEBHOOK_CURSOR, low, sbx_wall_ms()) < 0)
                log_debug("webhook: cannot persist the cursor");
}

/* Read the next page after w->fetched; count what the log lost meanwhile. */
static void refill_locked(struct webhook *w)
{
        int64_t oldest, newest;

        store_events_free(w->page, w->page_n);
        w->page = NULL;
        w->page_n = w->page_i = 0;
        if (store_events_bounds(w->st, &oldest, &newest) < 0)
                return;
        if (w->fetched + 1 < oldest) {
                BUMP(s_dropped, (uint64_t)(oldest - 1 - w->fetched));
                w->fetched = oldest - 1;
        }
        (void)store_events_after(w->st, NULL, w->fetched, WEBHOOK_PAGE, &w->page, &w->page_n);
        if (w->page_n > 0)
                w->fetched = w->page[w->page_n - 1].id;
}

static void *sender_main(void *arg)
{
        struct webhook *w = arg;
        CURL *c = curl_easy_init();

        pthread_mutex_lock(&w->lock);
        while (!w->stopping && c) {
                struct store_event ev;

                if (w->page_i >= w->page_n) {
                        refill_locked(w);
                        advance_locked(w);
                        if (w->page_n == 0) {
                                struct timespec until = sbx_deadline_after(CLOCK_REALTIME, 1000);
                                (void)pthread_cond_timedwait(&w->cond, &w->lock, &until);
                        }
                        continue;
                }
                ev = w->page[w->page_i];
                w->page[w->page_i].data = NULL; /* taken */
                w->page_i++;
                if (!wanted(w, ev.type)) {
                        free(ev.data);
                        advance_locked(w);
                        continue;
                }
                w->inflight[w->n_inflight++] = ev.id;
                int64_t now_in = __atomic_add_fetch(&s_inflight, 1, __ATOMIC_RELAXED);
                if (now_in > LOAD(s_inflight_peak))
                        __atomic_store_n(&s_inflight_peak, now_in, __ATOMIC_RELAXED);
                pthread_mutex_unlock(&w->lock);

                deliver(w, c, &ev);
                free(ev.data);

                pthread_mutex_lock(&w->lock);
                __atomic_sub_fetch(&s_inflight, 1, __ATOMIC_RELAXED);
                for (int i = 0; i < w->n_inflight; i++)
                        if (w->inflight[i] == ev.id) {
                                w->inflight[i] = w->inflight[--w->n_inflight];
                                break;
                        }
                if (!w->stopping) /* a delivery cut short by the stop is not done */
                        advance_locked(w);
        }
        pthread_mutex_unlock(&w->lock);
        if (c)
                curl_easy_cleanup(c);
        return NULL;
}

static int read_secret(const char *path, char *buf, size_t size, size_t *ret_len, struct sbx_error *err)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        ssize_t n;

        if (fd < 0)
                return sbx_error_set(err, -errno, 0, "webhook.secret_file: cannot open %s: %m", path);
        n = read(fd, buf, size - 1);
        if (n < 0)
                return sbx_error_set(err, -errno, 0, "webhook.secret_file: cannot read %s: %m", path);
        buf[n] = '\0';
        buf[strcspn(buf, "\r\n")] = '\0';
        *ret_len = strlen(buf);
        if (*ret_len == 0)
                return sbx_error_set(err, -EINVAL, 0, "webhook.secret_file: %s holds no key on its first line", path);
        return 0;
}

int webhook_start(const struct sbx_config *cfg, struct store *st, struct webhook **ret, struct sbx_error *err)
{
        struct webhook *w;
        int64_t oldest, newest;
        int r;

        *ret = NULL;
        if (!cfg->webhook_url[0])
                return 0;
        w = calloc(1, sizeof(*w));
        if (!w)
                return sbx_error_set(err, -ENOMEM, 0, "out of memory");
        w->cfg = cfg;
        w->st = st;
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->cond, NULL);
        if (cfg->webhook_secret_file[0]) {
                r = read_secret(cfg->webhook_secret_file, w->secret, sizeof(w->secret), &w->secret_len, err);
                if (r < 0)
                        goto fail;
        } else {
                sbx_strlcpy(w->secret, cfg->webhook_secret, sizeof(w->secret));
                w->secret_len = strlen(w->secret);
        }
        r = store_event_cursor_get(st, WEBHOOK_CURSOR, &w->cursor);
        if (r == -ENOENT) {
                /* the first start: from now on, not the whole history */
                r = store_events_bounds(st, &oldest, &newest);
                if (r == 0) {
                        w->cursor = newest;
                        r = store_event_cursor_set(st, WEBHOOK_CURSOR, newest, sbx_wall_ms());
                }
        }
        if (r < 0) {
                r = sbx_error_set(err, r, 0, "webhook: cannot read its cursor in the store: %s", strerror(-r));
                goto fail;
        }
        w->fetched = w->cursor;
        __atomic_store_n(&s_cursor, w->cursor, __ATOMIC_RELAXED);
        for (int i = 0; i < cfg->webhook_max_inflight && i < WEBHOOK_THREADS_MAX; i++) {
                if (pthread_create(&w->threads[i], NULL, sender_main, w) != 0) {
                        r = sbx_error_set(err, -EAGAIN, 0, "cannot start the webhook threads");
                        goto fail;
                }
                pthread_setname_np(w->threads[i], "sbx-webhook");
                w->n_threads++;
        }
        log_info("webhook: delivering events to %s from event %" PRId64 " (%d in flight at most)", cfg->webhook_url,
                 w->cursor + 1, cfg->webhook_max_inflight);
        *ret = w;
        return 0;
fail:
        webhook_stop(w);
        return r;
}

void webhook_notify(int64_t newest_id, void *ud)
{
        struct webhook *w = ud;

        if (!w)
                return;
        pthread_mutex_lock(&w->lock);
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
}

void webhook_stop(struct webhook *w)
{
        if (!w)
                return;
        pthread_mutex_lock(&w->lock);
        __atomic_store_n(&w->stopping, true, __ATOMIC_RELAXED);
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        for (int i = 0; i < w->n_threads; i++)
                pthread_join(w->threads[i], NULL);
        store_events_free(w->page, w->page_n);
        explicit_bzero(w->secret, sizeof(w->secret));
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
        free(w);
}
