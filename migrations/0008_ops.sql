-- 0008: the isolation an operator chooses (issue 18): a runtime per user, and a host uid per session.

-- Per-user policy; a user without a row gets the config's `runtime`.
CREATE TABLE user_policy (
        user_id        TEXT PRIMARY KEY,
        runtime        TEXT,             -- runc | runsc; NULL: the config's
        updated_at     INTEGER NOT NULL
);

-- Not used yet (issue 18 item 3, not built): the host uid a session's processes will run as (from
-- sandbox_uid_range), like its port block:
-- kept while the session's workspace exists, so every later container reuses it.
CREATE TABLE session_uids (
        user_id        TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        uid            INTEGER NOT NULL UNIQUE,
        assigned_at    INTEGER NOT NULL,
        PRIMARY KEY (user_id, session_id)
);
