-- 0027: the lifecycle event log (issue 29 item 5; include/sandboxd/events.h). One row per
-- event: session created/running/paused/stopped/error, execution finished, egress blocked,
-- quota reached. AUTOINCREMENT: an id is never reused, even once every row is pruned, so a
-- client's Last-Event-ID always means the same point in the log. Bounded by count and age
-- (events_max, events_retention): pruned by the daemon and by --gc.
CREATE TABLE events (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        ts         INTEGER NOT NULL,               -- unix ms
        type       TEXT NOT NULL,
        user_id    TEXT NOT NULL,
        session_id TEXT NOT NULL DEFAULT '',
        trace_id   TEXT NOT NULL DEFAULT '',
        data       TEXT NOT NULL DEFAULT '{}'      -- a small JSON object
);
CREATE INDEX events_user ON events (user_id, id);
CREATE INDEX events_ts ON events (ts);

-- Readers that follow the log on their own (the webhook sender): the last id they are done with.
CREATE TABLE event_cursors (
        name       TEXT PRIMARY KEY,
        last_id    INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
);
