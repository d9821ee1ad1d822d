-- 0028: paused sessions (issue 28, pause and resume). A session may be PAUSED: its container
-- exists, every process frozen by the cgroup freezer, its memory kept. SQLite cannot change a
-- CHECK constraint in place, so the table is rebuilt with the new state and paused_at (unix ms
-- of the pause, 0 when not paused). last_activity stays the last use: idle_timeout counts from
-- it whether the session is running or paused.
CREATE TABLE sessions_0028 (
        user_id        TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        state          TEXT NOT NULL CHECK (state IN ('CREATING', 'RUNNING', 'PAUSED', 'STOPPED', 'ERROR', 'DESTROYED')),
        container_id   TEXT,
        image          TEXT,
        network_mode   TEXT,
        last_error     TEXT,
        error_cause    TEXT,
        created_at     INTEGER NOT NULL, -- unix ms
        updated_at     INTEGER NOT NULL,
        last_activity  INTEGER NOT NULL,
        paused_at      INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (user_id, session_id)
);
INSERT INTO sessions_0028 (user_id, session_id, state, container_id, image, network_mode, last_error, error_cause,
                           created_at, updated_at, last_activity)
        SELECT user_id, session_id, state, container_id, image, network_mode, last_error, error_cause, created_at,
               updated_at, last_activity FROM sessions;
DROP TABLE sessions;
ALTER TABLE sessions_0028 RENAME TO sessions;
CREATE INDEX sessions_state ON sessions (state);
