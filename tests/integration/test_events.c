/* Integration tests of the lifecycle event log (events.h) and the webhook
 * (webhook.h) against a real daemon (real dockerd, real sqlite, sockets): the
 * hooks produce the events a session's life implies, the polling method and
 * a subscription resume with nothing missed and only the user's own events,
 * a gap is reported, and the webhook signs, bounds its retries and keeps its
 * memory when the receiver is dead. Receivers are threads of this test on
 * 127.0.0.1. (GET /v1/events over TLS: tests/js/events.test.mjs.) */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "apiclient.h"
#include "fixture.h"
#include "sandboxd/events.h"
#include "sandboxd/store_events.h"
#include "sandboxd/token.h"
#include "sandboxd/webhook.h"
#include "testenv.h"

TestSuite(events, .timeout = 300);

#define SECRET "test-webhook-secret"

/* ---- a webhook receiver on 127.0.0.1 ---- */

enum recv_mode {
        RECV_OK,   /* 200 */
        RECV_FAIL, /* 500 */
        RECV_HOLD, /* accept, read, never answer */
};

#define RECV_MAX 64

struct delivery {
        char event_id[32], attempt[8], ts[32], sig[80], type[40];
        char *body;
};

static struct {
        pthread_mutex_t lock;
        int lfd, port;
        enum recv_mode mode;
        bool stop;
        pthread_t thread;
        struct delivery got[RECV_MAX];
        int n_got;
        int held[256]; /* RECV_HOLD: connections kept open */
        int n_held;
        int open_max; /* RECV_HOLD: the most connections held at once */
} rx = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void header(const char *head, const char *name, char *out, size_t size)
{
        const char *p = strcasestr(head, name);
        size_t n;

        out[0] = '\0';
        if (!p)
                return;
        p += strlen(name);
        while (*p == ' ')
                p++;
        n = strcspn(p, "\r\n");
        snprintf(out, size, "%.*s", (int)(n < size ? n : size - 1), p);
}

/* One request: the head and the body (Content-Length). */
static bool read_request(int fd, char *buf, size_t size, char **ret_body)
{
        size_t len = 0;
        char *end = NULL, cl[32];

        while (len < size - 1) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, 10000) <= 0)
                        return false;
                ssize_t n = read(fd, buf + len, size - 1 - len);
                if (n <= 0)
                        return false;
                len += (size_t)n;
                buf[len] = '\0';
                end = strstr(buf, "\r\n\r\n");
                if (!end)
                        continue;
                header(buf, "Content-Length:", cl, sizeof(cl));
                size_t want = (size_t)(end + 4 - buf) + (size_t)atol(cl);
                if (len >= want) {
                        *ret_body = strndup(end + 4, (size_t)atol(cl));
                        return true;
                }
        }
        return false;
}

static void *recv_main(void *arg)
{
        for (;;) {
                struct pollfd p = {.fd = rx.lfd, .events = POLLIN};
                char buf[65536], *body = NULL;
                int fd;

                if (__atomic_load_n(&rx.stop, __ATOMIC_RELAXED))
                        break;
                if (poll(&p, 1, 100) <= 0)
                        continue;
                fd = accept4(rx.lfd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        continue;
                if (!read_request(fd, buf, sizeof(buf), &body)) {
                        close(fd);
                        continue;
                }
                pthread_mutex_lock(&rx.lock);
                if (rx.n_got < RECV_MAX) {
                        struct delivery *dv = &rx.got[rx.n_got++];
                        header(buf, "X-Sandboxd-Event-Id:", dv->event_id, sizeof(dv->event_id));
                        header(buf, "X-Sandboxd-Delivery-Attempt:", dv->attempt, sizeof(dv->attempt));
                        header(buf, "X-Sandboxd-Timestamp:", dv->ts, sizeof(dv->ts));
                        header(buf, "X-Sandboxd-Signature:", dv->sig, sizeof(dv->sig));
                        header(buf, "X-Sandboxd-Event:", dv->type, sizeof(dv->type));
                        dv->body = body;
                        body = NULL;
                }
                if (rx.mode == RECV_HOLD) {
                        /* the receiver is dead: it never answers; the sender's timeout ends it.
                         * Closed connections are reaped so the count is of open ones. */
                        int k = 0;
                        for (int i = 0; i < rx.n_held; i++) {
                                struct pollfd hp = {.fd = rx.held[i], .events = POLLRDHUP};
                                if (poll(&hp, 1, 0) > 0 && (hp.revents & (POLLRDHUP | POLLHUP | POLLERR)))
                                        close(rx.held[i]);
                                else
                                        rx.held[k++] = rx.held[i];
                        }
                        rx.n_held = k;
                        if (rx.n_held < (int)ELEMENTSOF(rx.held))
                                rx.held[rx.n_held++] = fd;
                        else
                                close(fd);
                        if (rx.n_held > rx.open_max)
                                rx.open_max = rx.n_held;
                        pthread_mutex_unlock(&rx.lock);
                        free(body);
                        continue;
                }
                pthread_mutex_unlock(&rx.lock);
                free(body);
                const char *answer = rx.mode == RECV_OK
                                             ? "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                                             : "HTTP/1.1 500 Oops\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                (void)!write(fd, answer, strlen(answer));
                close(fd);
        }
        return NULL;
}

static void recv_start(enum recv_mode mode)
{
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t alen = sizeof(a);

        rx.mode = mode;
        rx.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert_geq(rx.lfd, 0);
        cr_assert_eq(bind(rx.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
        cr_assert_eq(listen(rx.lfd, 64), 0);
        cr_assert_eq(getsockname(rx.lfd, (struct sockaddr *)&a, &alen), 0);
        rx.port = ntohs(a.sin_port);
        cr_assert_eq(pthread_create(&rx.thread, NULL, recv_main, NULL), 0);
}

static void recv_stop(void)
{
        __atomic_store_n(&rx.stop, true, __ATOMIC_RELAXED);
        pthread_join(rx.thread, NULL);
        close(rx.lfd);
        for (int i = 0; i < rx.n_held; i++)
                close(rx.held[i]);
        for (int i = 0; i < rx.n_got; i++)
                free(rx.got[i].body);
}

static int recv_count(void)
{
        pthread_mutex_lock(&rx.lock);
        int n = rx.n_got;
        pthread_mutex_unlock(&rx.lock);
        return n;
}

/* ---- the daemon ---- */

static struct sbx_config cfg;
static struct daemon *d;
static char tok_a[TOKEN_LEN + 1], tok_b[TOKEN_LEN + 1];

static void open_daemon(void)
{
        struct sbx_error err = {0};

        d = fixture_open_sockets(&cfg);
        cr_assert_not_null(d->events, "the event log is open");
        cr_assert_eq(token_create(d->store, "alice", TOKEN_ROLE_AGENT, tok_a, NULL, &err), 0, "%s", err.msg);
        cr_assert_eq(token_create(d->store, "bob", TOKEN_ROLE_AGENT, tok_b, NULL, &err), 0, "%s", err.msg);
}

static void setup(void)
{
        fixture_config(&cfg);
        cfg.port_range_lo = 30800; /* below the ephemeral range, this suite's own */
        cfg.port_range_hi = 31299;
        cfg.ports_per_session = 0;
        cfg.pool_size = 0;
}

static void teardown(void)
{
        daemon_close(d);
        d = NULL;
        testenv_cleanup();
}

static void use_webhook(int max_inflight, int max_retries, int timeout_ms, int backoff_ms)
{
        snprintf(cfg.webhook_url, sizeof(cfg.webhook_url), "http://127.0.0.1:%d/hook", rx.port);
        snprintf(cfg.webhook_secret, sizeof(cfg.webhook_secret), SECRET);
        cfg.webhook_max_inflight = max_inflight;
        cfg.webhook_max_retries = max_retries;
        cfg.webhook_timeout_ms = timeout_ms;
        cfg.webhook_backoff_ms = backoff_ms;
}

/* events {since, limit} over the API socket as token: the reply (asserting success). */
static cJSON *poll_events(const char *token, int64_t since, int limit)
{
        cJSON *params = cJSON_CreateObject();
        cJSON *reply;

        if (since >= 0)
                cJSON_AddNumberToObject(params, "since", (double)since);
        cJSON_AddNumberToObject(params, "limit", limit);
        reply = apic_call(cfg.api_socket, token, "events", params);
        cr_assert_not_null(reply);
        cr_assert_str_empty(apic_code(reply), "events: %s", apic_code(reply));
        return reply;
}

static cJSON *call(const char *token, const char *method, const char *params_json)
{
        cJSON *reply = apic_call(cfg.api_socket, token, method, apic_json(params_json));
        cr_assert_not_null(reply);
        return reply;
}

/* ---- the hooks: a session's life as events, through the API ---- */

Test(events, lifecycle_and_quota, .init = setup, .fini = teardown)
{
        cJSON *r, *evs;
        const char *want[] = {"session.created", "session.running", "execution.finished", "session.stopped",
                              "quota.reached"};
        size_t k = 0;

        cfg.max_sessions_per_user = 1;
        open_daemon();
        r = poll_events(tok_a, -1, 10); /* no since: the resume point only */
        int64_t start = (int64_t)apic_num(apic_result(r), "next");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(apic_result(r), "events")), 0);
        cJSON_Delete(r);

        cJSON_Delete(call(tok_a, "create_session", "{\"session\": \"s1\"}"));
        r = call(tok_a, "exec", "{\"session\": \"s1\", \"command\": \"exit 3\"}");
        cr_assert_str_empty(apic_code(r), "exec: %s", apic_code(r));
        cJSON_Delete(r);
        r = call(tok_a, "destroy_session", "{\"session\": \"s1\"}");
        cr_assert_str_empty(apic_code(r), "destroy: %s", apic_code(r));
        cJSON_Delete(r);
        /* a second live session is past max_sessions_per_user = 1 */
        cJSON_Delete(call(tok_a, "create_session", "{\"session\": \"s2\"}"));
        r = call(tok_a, "create_session", "{\"session\": \"s3\"}");
        cr_assert_str_eq(apic_code(r), "busy");
        cJSON_Delete(r);
        cr_assert_eq(events_flush(10000), 0);

        r = poll_events(tok_a, start, 100);
        evs = cJSON_GetObjectItem(apic_result(r), "events");
        const cJSON *ev;
        cJSON_ArrayForEach(ev, evs) {
                const char *type = apic_str(ev, "type");
                const cJSON *data = cJSON_GetObjectItem(ev, "data");
                cr_assert_str_eq(apic_str(ev, "user"), "alice");
                if (k < ELEMENTSOF(want) && strcmp(type, want[k]) == 0) {
                        if (strcmp(type, "execution.finished") == 0) {
                                cr_assert_eq(apic_num(data, "exit_code"), 3);
                                cr_assert_str_eq(apic_str(data, "state"), "COMPLETED");
                        } else if (strcmp(type, "session.stopped") == 0) {
                                cr_assert_str_eq(apic_str(data, "reason"), "destroyed");
                                cr_assert_str_eq(apic_str(ev, "session"), "s1");
                        } else if (strcmp(type, "quota.reached") == 0) {
                                cr_assert_str_eq(apic_str(data, "quota"), "max_sessions_per_user");
                                cr_assert_str_eq(apic_str(data, "method"), "create_session");
                        }
                        k++;
                }
        }
        cr_assert_eq(k, ELEMENTSOF(want), "saw %zu of the expected events in order: %s", k,
                     cJSON_PrintUnformatted(evs));
        cJSON_Delete(r);
        /* bob sees none of it */
        r = poll_events(tok_b, 0, 100);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(apic_result(r), "events")), 0);
        cJSON_Delete(r);
}

/* ---- resume, isolation, gap ---- */

Test(events, resume_isolation_and_gap, .init = setup, .fini = teardown)
{
        struct events_sub *sub;
        struct event *ev;
        int64_t last;
        char data[64];

        cfg.events_max = 100;
        open_daemon();
        for (int i = 0; i < 30; i++) {
                snprintf(data, sizeof(data), "{\"i\":%d}", i);
                events_emit("session.running", "alice", "s1", data);
                events_emit("session.running", "bob", "s1", data);
        }
        cr_assert_eq(events_flush(10000), 0);
        /* from the start: alice's 30, in order, none of bob's */
        cr_assert_eq(events_subscribe("alice", 0, &sub), 0);
        last = 0;
        for (int i = 0; i < 30; i++) {
                cr_assert_eq(events_sub_next(sub, 5000, &ev), 1);
                cr_assert_str_eq(ev->user, "alice");
                cr_assert_gt(ev->id, last);
                snprintf(data, sizeof(data), "{\"i\":%d}", i);
                cr_assert_str_eq(ev->data, data);
                last = ev->id;
                event_unref(ev);
                if (i == 9)
                        break; /* "disconnect" after 10 */
        }
        events_sub_close(sub);
        /* more while away, then resume after the 10th: exactly the rest, then the new ones */
        for (int i = 30; i < 35; i++) {
                snprintf(data, sizeof(data), "{\"i\":%d}", i);
                events_emit("session.running", "alice", "s1", data);
                events_emit("session.running", "bob", "s1", data);
        }
        cr_assert_eq(events_flush(10000), 0);
        cr_assert_eq(events_subscribe("alice", last, &sub), 0);
        for (int i = 10; i < 35; i++) {
                cr_assert_eq(events_sub_next(sub, 5000, &ev), 1);
                snprintf(data, sizeof(data), "{\"i\":%d}", i);
                cr_assert_str_eq(ev->data, data, "event %d", i);
                cr_assert_str_eq(ev->user, "alice");
                event_unref(ev);
        }
        /* live now: one emitted after the backlog arrives once */
        events_emit("session.stopped", "alice", "s1", "{\"reason\":\"live\"}");
        cr_assert_eq(events_sub_next(sub, 5000, &ev), 1);
        cr_assert_str_eq(ev->type, "session.stopped");
        event_unref(ev);
        cr_assert_eq(events_sub_next(sub, 200, &ev), 0, "nothing more");
        events_sub_close(sub);

        /* the log keeps EVENTS_MAX (100): many more prune the start away */
        for (int i = 0; i < 400; i++)
                events_emit("session.running", "alice", "s2", "{}");
        cr_assert_eq(events_flush(10000), 0);
        struct store_event *rows = NULL;
        size_t n = 0;
        cr_assert(TESTENV_WAIT_UNTIL(({
                                             int64_t oldest, newest;
                                             store_events_bounds(d->store, &oldest, &newest) == 0 && oldest > last + 1;
                                     }),
                                     30000),
                  "the writer prunes the log");
        (void)rows;
        (void)n;
        /* a resume point older than the log: a gap first, not silence */
        cr_assert_eq(events_subscribe("alice", last, &sub), 0);
        cr_assert_eq(events_sub_next(sub, 5000, &ev), 1);
        cr_assert_str_eq(ev->type, "gap");
        int64_t gap_id = ev->id;
        event_unref(ev);
        cr_assert_eq(events_sub_next(sub, 5000, &ev), 1);
        cr_assert_eq(ev->id, gap_id + 1, "the log's oldest follows the gap");
        event_unref(ev);
        events_sub_close(sub);
        /* and the polling method says so too */
        cJSON *r = poll_events(tok_a, last, 10);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(apic_result(r), "gap")));
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(apic_result(r), "events")), 10);
        cJSON_Delete(r);
}

Test(events, subscriber_caps, .init = setup, .fini = teardown)
{
        struct events_sub *subs[EVENTS_SUBS_PER_USER + 1];

        open_daemon();
        for (int i = 0; i < EVENTS_SUBS_PER_USER; i++)
                cr_assert_eq(events_subscribe("alice", -1, &subs[i]), 0);
        cr_assert_eq(events_subscribe("alice", -1, &subs[EVENTS_SUBS_PER_USER]), -EUSERS);
        cr_assert_eq(events_subscribe("bob", -1, &subs[EVENTS_SUBS_PER_USER]), 0, "a cap per user");
        events_sub_close(subs[EVENTS_SUBS_PER_USER]);
        for (int i = 0; i < EVENTS_SUBS_PER_USER; i++)
                events_sub_close(subs[i]);
}

/* A subscriber that never reads is cut off once its ring is full: an
 * overflow, not memory. */
Test(events, slow_subscriber_overflows, .init = setup, .fini = teardown)
{
        struct events_sub *sub;
        struct event *ev;
        struct events_stats st;
        int r;

        open_daemon();
        cr_assert_eq(events_subscribe("alice", -1, &sub), 0);
        /* into the live phase: the backlog is empty */
        cr_assert_eq(events_sub_next(sub, 10, &ev), 0);
        for (int i = 0; i < EVENTS_SUB_QUEUE * 2; i++)
                events_emit("session.running", "alice", "s1", "{}");
        cr_assert_eq(events_flush(10000), 0);
        events_stats(&st);
        cr_assert_eq(st.overflowed, 1);
        int got = 0;
        while ((r = events_sub_next(sub, 1000, &ev)) == 1) {
                event_unref(ev);
                got++;
        }
        cr_assert_eq(r, -EPIPE);
        cr_assert_eq(got, EVENTS_SUB_QUEUE, "the ring's events, then the end");
        events_sub_close(sub);
}

/* ---- webhooks ---- */

/* HMAC-SHA256 of "<ts>.<body>" under SECRET, by the openssl CLI (not the
 * daemon's code). */
static void openssl_hmac(const char *ts, const char *body, char out[65])
{
        _cleanup_free_ char *dir = testenv_tmpdir();
        char path[SBX_PATH_MAX + 16], cmd[SBX_PATH_MAX + 128];
        FILE *f;

        snprintf(path, sizeof(path), "%s/msg", dir);
        f = fopen(path, "we");
        cr_assert_not_null(f);
        fprintf(f, "%s.%s", ts, body);
        fclose(f);
        snprintf(cmd, sizeof(cmd), "openssl dgst -sha256 -hmac '" SECRET "' -r %s", path);
        f = popen(cmd, "r");
        cr_assert_not_null(f);
        cr_assert_eq(fscanf(f, "%64s", out), 1);
        pclose(f);
}

Test(events, webhook_signed, .init = setup, .fini = teardown)
{
        char want[65], sig[80];

        recv_start(RECV_OK);
        use_webhook(2, 3, 5000, 50);
        open_daemon();
        events_emit("session.created", "alice", "s1", "{\"k\":\"v\"}");
        cr_assert(TESTENV_WAIT_UNTIL(recv_count() >= 1, 30000), "the receiver got the event");
        pthread_mutex_lock(&rx.lock);
        struct delivery dv = rx.got[0];
        pthread_mutex_unlock(&rx.lock);
        cr_assert_str_eq(dv.type, "session.created");
        cr_assert_str_eq(dv.attempt, "1");
        cJSON *body = apic_json(dv.body);
        cr_assert_not_null(body);
        cr_assert_str_eq(apic_str(body, "type"), "session.created");
        cr_assert_str_eq(apic_str(body, "user"), "alice");
        cr_assert_str_eq(apic_str(cJSON_GetObjectItem(body, "data"), "k"), "v");
        char id[32];
        snprintf(id, sizeof(id), "%lld", (long long)apic_num(body, "id"));
        cr_assert_str_eq(dv.event_id, id);
        cJSON_Delete(body);
        /* the receiver's check: the signature over "<timestamp>.<body>" */
        openssl_hmac(dv.ts, dv.body, want);
        snprintf(sig, sizeof(sig), "sha256=%s", want);
        cr_assert_str_eq(dv.sig, sig);
        cr_assert_leq(labs(atol(dv.ts) - sbx_wall_ms() / 1000), 300, "a fresh timestamp");
        /* and it fails for another body (what a receiver rejects) */
        openssl_hmac(dv.ts, "{\"forged\":true}", want);
        snprintf(sig, sizeof(sig), "sha256=%s", want);
        cr_assert_str_neq(dv.sig, sig);
        struct webhook_stats ws;
        cr_assert(TESTENV_WAIT_UNTIL(({
                                             webhook_stats(&ws);
                                             ws.delivered == 1 && ws.cursor >= atol(id);
                                     }),
                                     10000));
        daemon_close(d);
        d = NULL;
        recv_stop();
}

Test(events, webhook_retries_bounded, .init = setup, .fini = teardown)
{
        struct webhook_stats ws;

        recv_start(RECV_FAIL);
        use_webhook(1, 2, 5000, 10);
        open_daemon();
        events_emit("session.error", "alice", "s1", "{}");
        cr_assert(TESTENV_WAIT_UNTIL(({
                                             webhook_stats(&ws);
                                             ws.failed == 1;
                                     }),
                                     30000),
                  "given up after its retries");
        cr_assert(TESTENV_WAIT_UNTIL(({
                                             webhook_stats(&ws);
                                             ws.cursor > 0 && ws.inflight == 0;
                                     }),
                                     10000),
                  "the cursor moves past the failed event");
        /* exactly 1 + WEBHOOK_MAX_RETRIES attempts of that one event, numbered */
        cr_assert_eq(recv_count(), 3);
        cr_assert_eq(ws.attempts, 3);
        cr_assert_eq(ws.retries, 2);
        for (int i = 0; i < 3; i++) {
                char n[8];
                snprintf(n, sizeof(n), "%d", i + 1);
                cr_assert_str_eq(rx.got[i].attempt, n);
                cr_assert_str_eq(rx.got[i].event_id, rx.got[0].event_id);
        }
        daemon_close(d);
        d = NULL;
        recv_stop();
}

static long rss_kb(void)
{
        FILE *f = fopen("/proc/self/status", "re");
        char line[256];
        long kb = -1;

        while (f && fgets(line, sizeof(line), f))
                if (sscanf(line, "VmRSS: %ld", &kb) == 1)
                        break;
        if (f)
                fclose(f);
        return kb;
}

/* A receiver that accepts and never answers: deliveries in flight stay at
 * the cap, the log stays bounded, what it pruned unsent is counted, and the
 * daemon's memory does not follow the number of events. */
Test(events, webhook_dead_receiver_bounded, .init = setup, .fini = teardown)
{
        struct webhook_stats ws;
        struct events_stats es;
        int64_t oldest, newest;
        long before, after;

        recv_start(RECV_HOLD);
        use_webhook(3, 0, 300, 10);
        cfg.events_max = 200;
        open_daemon();
        for (int i = 0; i < 200; i++)
                events_emit("session.running", "alice", "s1", "{}");
        cr_assert(TESTENV_WAIT_UNTIL(({
                                             webhook_stats(&ws);
                                             ws.inflight == 3;
                                     }),
                                     30000),
                  "the cap of deliveries in flight is reached");
        before = rss_kb();
        for (int round = 0; round < 20; round++) {
                for (int i = 0; i < 1000; i++)
                        events_emit("session.running", "alice", "s1",
                                    "{\"padding\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}");
                cr_assert_eq(events_flush(30000), 0);
                webhook_stats(&ws);
                cr_assert_leq(ws.inflight, 3);
        }
        events_stats(&es);
        cr_assert_geq(es.written, 20000);
        webhook_stats(&ws);
        cr_assert_leq(ws.inflight_peak, 3, "never more than webhook_max_inflight");
        pthread_mutex_lock(&rx.lock);
        int open_max = rx.open_max;
        pthread_mutex_unlock(&rx.lock);
        cr_assert_leq(open_max, 3, "the receiver never held more connections than the cap");
        /* the log is bounded (EVENTS_MAX, pruned by the writer) */
        cr_assert(TESTENV_WAIT_UNTIL(({
                                             store_events_bounds(d->store, &oldest, &newest) == 0 &&
                                                     newest - oldest + 1 <= 200 + 100 + EVENTS_BATCH_MAX;
                                     }),
                                     30000));
        /* what the log dropped before the webhook got to it is counted */
        cr_assert(TESTENV_WAIT_UNTIL(({
                                             webhook_stats(&ws);
                                             ws.dropped > 0;
                                     }),
                                     30000));
        after = rss_kb();
        cr_assert_lt(after - before, 16 * 1024, "RSS grew by %ld kB for 20000 events", after - before);
        daemon_close(d);
        d = NULL;
        recv_stop();
}
