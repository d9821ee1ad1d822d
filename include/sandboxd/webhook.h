/* webhook.h — the operator's webhook: every lifecycle event (events.h) is
 * POSTed as JSON to webhook.url, signed, with bounded retries.
 *
 * Why a module of its own that links libcurl (the design keeps libcurl in
 * the Docker client): the webhook is the daemon's only outbound HTTP(S) client
 * besides the Engine API, and it must speak TLS to an arbitrary receiver,
 * which the Docker client (a unix socket, no TLS) has no reason to know.
 * Keeping it in src/webhook/, linked PRIVATE, keeps the rule's point: one
 * small, named owner per library (cmake/check_boundaries.cmake lists it).
 * It shares libcurl's global state, set up once by docker_global_init in
 * main before any thread starts; every sender thread has its own handle.
 *
 * Trust: the URL comes only from the operator's config, never from a
 * tenant, so it is not subject to the egress proxy's SSRF guard (a tenant
 * cannot point it anywhere). Environment proxies are ignored; redirects are
 * not followed; only http and https are spoken.
 *
 * Delivery: the sender reads the persisted log (store_events.h) after a
 * cursor (event_cursors row "webhook"), never an in-memory queue of its own,
 * so a dead receiver costs no memory: at most WEBHOOK_MAX_INFLIGHT
 * deliveries run at once (one thread each) and EVENTS_PAGE rows are read
 * ahead. The cursor is the newest id below which every event is done
 * (delivered, given up, or filtered out by webhook.events), persisted as it
 * moves; after a restart delivery resumes there. The first start begins at
 * the log's newest event. Events pruned from the log (EVENTS_MAX,
 * EVENTS_RETENTION_S) before the sender reached them are counted as dropped.
 *
 * Each attempt is `POST webhook.url` with the event object as its body
 * (events.h: id, type, user, session, ts, trace_id, data) and headers
 *   Content-Type: application/json
 *   X-Sandboxd-Event: <type>          X-Sandboxd-Event-Id: <id>
 *   X-Sandboxd-Delivery-Attempt: <1..>
 *   X-Sandboxd-Timestamp: <unix seconds when this attempt was signed>
 *   X-Sandboxd-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>
 * A receiver verifies: recompute the HMAC over the timestamp header, a dot
 * and the raw body; compare in constant time; reject a timestamp more than a
 * few minutes from its clock (replays), and de-duplicate on the event id (a
 * retry after a lost answer delivers the same id again).
 * A 2xx answer is success. Anything else (refused, timed out after
 * WEBHOOK_TIMEOUT_MS, another status) is retried up to WEBHOOK_MAX_RETRIES
 * times, after WEBHOOK_BACKOFF_MS, doubling, at most 60 s apart; then the
 * event is counted failed and skipped. */
#ifndef SANDBOXD_WEBHOOK_H
#define SANDBOXD_WEBHOOK_H

#include <stdint.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct store;
struct webhook;

#define WEBHOOK_CURSOR "webhook"
#define WEBHOOK_BACKOFF_MAX_MS 60000
#define WEBHOOK_ANSWER_MAX 65536 /* bytes of a receiver's answer read (the rest is ignored) */

/* Start the senders (nothing, *ret NULL, when webhook.url is empty). cfg
 * and st are borrowed. Reads webhook.secret_file. */
int webhook_start(const struct sbx_config *cfg, struct store *st, struct webhook **ret, struct sbx_error *err);
/* New events are in the log up to newest_id (events_set_listener's shape;
 * ud is the struct webhook). */
void webhook_notify(int64_t newest_id, void *ud);
/* Stop: transfers in flight are aborted, the cursor kept. NULL is fine. */
void webhook_stop(struct webhook *w);

/* Process-wide counters (relaxed atomics, like metrics.h's). */
struct webhook_stats {
        uint64_t attempts;  /* POSTs made */
        uint64_t delivered; /* events a receiver took (2xx) */
        uint64_t failed;    /* events given up after WEBHOOK_MAX_RETRIES */
        uint64_t retries;   /* attempts after a first failure */
        uint64_t dropped;   /* events pruned from the log before they were sent */
        int64_t inflight;   /* deliveries under way now */
        int64_t inflight_peak;
        int64_t cursor;
};
void webhook_stats(struct webhook_stats *ret);

/* The signature value: hex HMAC-SHA256(secret, "<timestamp>.<body>"). */
int webhook_sign(const char *secret, size_t secret_len, const char *timestamp, const char *body, size_t body_len,
                 char ret_hex[65]);

/* Constants that were config keys: delivery is at least once with backoff,
 * a receiver down for minutes gets its events from GET /v1/events. */
#define WEBHOOK_MAX_INFLIGHT 4
#define WEBHOOK_MAX_RETRIES 5
#define WEBHOOK_TIMEOUT_MS 10000
#define WEBHOOK_BACKOFF_MS 1000 /* first retry after this, doubling, at most 60 s */

#endif
