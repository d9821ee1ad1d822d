/* events.h — the lifecycle event log (issue 29 item 5): what happened to a
 * user's sessions, told to that user as it happens and kept for a while.
 *
 * Producers (the session manager, the execution engine, the egress proxy,
 * the API's refusals) call events_emit() or one of the helpers below. It
 * never blocks on I/O: it appends to an in-memory queue of at most
 * EVENTS_QUEUE_MAX events (past it the event is dropped and counted:
 * sandboxd_events_dropped_total) and returns. One writer thread
 * ("sbx-evlog") drains the queue in batches into the store (store_events.h:
 * each event gets an increasing id that is never reused), then fans the
 * batch out to live subscribers and wakes the listener (the webhook sender,
 * which reads the log itself with a persisted cursor). The log is bounded by
 * EVENTS_MAX rows and EVENTS_RETENTION_S; the writer prunes it, and so does
 * `sandboxd --gc`.
 *
 * An event: {"id", "type", "user", "session", "ts" (unix ms), "trace_id",
 * "data" (a small object)}. Types and their data:
 *   session.created    {}                                 a new session's first container is being made
 *   session.running    {"container_id"}                   its (new) container runs
 *   session.paused     {"container_id", "reason"}        frozen: request (pause_session), idle
 *                                                         (pause_after), reconciled (found paused at start)
 *   session.resumed    {"container_id", "reason"}        thawed: request (any call that needs it)
 *   session.stopped    {"reason"}  idle_expired, ttl_expired, destroyed, privacy_ratchet, ...
 *   session.error      {"cause", "message"}               its container failed or could not be made
 *   execution.finished {"execution_id", "state", "cause", "exit_code", "duration_ms"}
 *   egress.blocked     {"host", "port", "reason"}         (rate-limited like the egress audit rows)
 *   quota.reached      {"quota", "method", "message"}     a request refused by a per-user or global cap
 *   snapshot.created   {"snapshot", "name"?, "kind", "bytes", "reflink", "was_paused", "private"}
 *   snapshot.deleted   {"snapshot", "bytes"}
 *   session.restored   {"snapshot", "from_session", "private"}  its workspace was put back (snapshot.h)
 *   session.forked     {"snapshot", "from_session", "private"}  made from a snapshot or a live session
 * and two that only streams carry (never stored):
 *   gap                {"last_event_id", "oldest_id"}     the resume point is older than the log: events
 *                                                         in between are lost; its id is oldest_id - 1
 *   overflow           {"last_event_id"}                  the subscriber read too slowly and is cut off;
 *                                                         reconnect with Last-Event-ID (nothing is lost
 *                                                         while the log holds it)
 *
 * Subscribers: a user's own events only (an admin subscription may see all).
 * Each has a ring of EVENTS_SUB_QUEUE events; one that falls behind by more
 * is ended (overflow) rather than buffered. At most EVENTS_SUBS_PER_USER per
 * user and EVENTS_SUBS_MAX in all (-EUSERS past them).
 *
 * One event log per process: the first daemon_open owns it (a second daemon
 * opened in the same process, as some tests do, emits into the first's).
 *
 * Locks: q_lock guards the producer queue (leaf; held for a list append);
 * sub_lock guards the subscriber list and every ring (leaf; the writer holds
 * it while fanning a batch out, never across the store). */
#ifndef SANDBOXD_EVENTS_H
#define SANDBOXD_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/common.h"
#include "sandboxd/config.h"

struct store;
struct events;
struct events_sub;

#define EVENTS_QUEUE_MAX 4096
#define EVENTS_BATCH_MAX 256
#define EVENTS_SUB_QUEUE 256
#define EVENTS_SUBS_PER_USER 8
#define EVENTS_SUBS_MAX 128
#define EVENTS_PRUNE_INTERVAL_MS 10000
#define EVENTS_PAGE 64 /* rows read from the log at a time */

#define EVENT_SESSION_CREATED "session.created"
#define EVENT_SESSION_RUNNING "session.running"
#define EVENT_SESSION_PAUSED "session.paused"
#define EVENT_SESSION_RESUMED "session.resumed"
#define EVENT_SESSION_STOPPED "session.stopped"
#define EVENT_SESSION_ERROR "session.error"
#define EVENT_EXECUTION_FINISHED "execution.finished"
#define EVENT_EGRESS_BLOCKED "egress.blocked"
#define EVENT_QUOTA_REACHED "quota.reached"
#define EVENT_SNAPSHOT_CREATED "snapshot.created"
#define EVENT_SNAPSHOT_DELETED "snapshot.deleted"
#define EVENT_SESSION_RESTORED "session.restored"
#define EVENT_SESSION_FORKED "session.forked"
/* connections through a microVM's net port reset, never carried: {count, cause} */
#define EVENT_SESSION_CONNECTIONS_DROPPED "session.connections_dropped"
#define EVENT_GAP "gap"
#define EVENT_OVERFLOW "overflow"

/* One event, immutable once published, reference-counted (a batch is shared
 * by every subscriber it reaches). */
struct event {
        int refs; /* atomic */
        int64_t id;
        int64_t ts; /* unix ms */
        char type[32];
        char user[65];
        char session[65];
        char trace_id[65]; /* the causing request's trace id (reqctx.h, REQCTX_ID_MAX + 1), or "" */
        char *data;        /* JSON object text */
};
void event_unref(struct event *ev);
/* The event as one JSON object (text, malloc'd); NULL out of memory. */
char *event_to_json(const struct event *ev);

/* Start the log's writer over st (borrowed; it must outlive the log).
 * listener (may be NULL) is called by the writer after each batch is in the
 * store, with the newest id: the webhook sender's wake-up. *ret is NULL when
 * another daemon of this process owns the log already. */
int events_open(const struct sbx_config *cfg, struct store *st, void (*listener)(int64_t newest_id, void *ud),
                void *listener_ud, struct events **ret, struct sbx_error *err);
/* Write what is queued, stop the writer, end every subscription. NULL is fine. */
void events_close(struct events *ev);

/* Queue an event (data_json: a JSON object, NULL = {}; at most
 * STORE_EVENT_DATA_MAX bytes, else replaced by {"truncated": true}). Never
 * blocks; a no-op when no log is open. */
void events_emit(const char *type, const char *user, const char *session, const char *data_json);
void events_emit_traced(const char *type, const char *user, const char *session, const char *trace_id,
                        const char *data_json);

/* The helpers the producers call (one line each at the hook). The log knows
 * no module's types: a producer names its states in words (the session's
 * state changes are mapped to events in session.c). */
void events_session_stopped(const char *user, const char *session, const char *reason);
void events_execution_finished(const char *user, const char *session, const char *execution_id, const char *state,
                               const char *cause, int exit_code, int64_t duration_ms);
void events_egress_blocked(const char *user, const char *session, const char *host, int port, const char *reason);
/* A request refused with code (busy, quota_exceeded) and msg: a
 * quota.reached event naming the quota when msg names one (the config key
 * the refusals quote, e.g. max_sessions_per_user); other refusals are not
 * quotas and emit nothing. */
void events_request_refused(const char *user, const char *session, const char *method, const char *code,
                            const char *msg);

/* Subscribe to user's events (NULL: everyone's, for admins) after after_id
 * (-1: from now on). -EUSERS past the caps, -ENODEV when no log is open. */
int events_subscribe(const char *user, int64_t after_id, struct events_sub **ret);
/* The next event, waiting at most timeout_ms: 1 with *ret (a reference), 0
 * nothing yet, -EPIPE the subscriber fell behind (send overflow, end),
 * -ESHUTDOWN the log is closing, other -errno from the store. */
int events_sub_next(struct events_sub *s, int timeout_ms, struct event **ret);
/* The id of the last event next returned (the resume point). */
int64_t events_sub_last_id(const struct events_sub *s);
void events_sub_close(struct events_sub *s);

/* Polling: at most limit of user's events after after_id (-1: none, only
 * the resume point), oldest first; *ret_gap when after_id is older than the
 * log. *ret_next is where to resume (the last id returned, or the newest id
 * of the log when nothing was). */
int events_read(const char *user, int64_t after_id, size_t limit, struct event ***ret, size_t *ret_n, bool *ret_gap,
                int64_t *ret_oldest, int64_t *ret_next);
void events_free_array(struct event **evs, size_t n);

/* Wait until every event emitted before this call is in the store (and fanned
 * out): 0, or -ETIMEDOUT. For tests and shutdown. */
int events_flush(int timeout_ms);

struct events_stats {
        uint64_t emitted;    /* queued */
        uint64_t written;    /* in the store */
        uint64_t dropped;    /* queue full, or the store refused the batch */
        uint64_t overflowed; /* subscribers cut off for reading too slowly */
        uint64_t pruned;     /* rows pruned by the writer */
        size_t subscribers;  /* live */
        size_t queued;       /* waiting for the writer */
};
void events_stats(struct events_stats *ret);

/* The event log is a resume buffer for GET /v1/events and webhooks, not an
 * archive (the audit log is): it keeps this many rows for this long. */
#define EVENTS_MAX 100000
#define EVENTS_RETENTION_S (7 * 86400)

#endif
