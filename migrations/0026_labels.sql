-- 0026: what a session was created with beyond its options (issue 29): its labels and the
-- resources it asked for, fixed at creation, kept across every recreation of its container,
-- removed with the session (destroy_session, gc). And the correlation id of each audit row.
CREATE TABLE session_spec (
        user_id        TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        labels_json    TEXT,                       -- {"key": "value", ...} (sessspec.h), NULL: none
        nano_cpus      INTEGER NOT NULL DEFAULT 0, -- 0: the config's cpus
        memory         INTEGER NOT NULL DEFAULT 0, -- bytes; 0: the config's memory
        disk           INTEGER NOT NULL DEFAULT 0, -- bytes; 0: the config's workspace_quota
        created_at     INTEGER NOT NULL,           -- unix ms
        PRIMARY KEY (user_id, session_id)
);

-- The trace id (reqctx.h) of the request that caused the row; NULL: none (the daemon's own work).
ALTER TABLE audit_log ADD COLUMN trace_id TEXT;
