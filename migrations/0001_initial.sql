-- 0001_initial: the first schema. The database is the source of truth for
-- sessions, ports, services, executions, private datasets, audit and tokens.

CREATE TABLE sessions (
        user_id        TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        state          TEXT NOT NULL CHECK (state IN ('CREATING', 'RUNNING', 'STOPPED', 'ERROR', 'DESTROYED')),
        container_id   TEXT,
        image          TEXT,
        network_mode   TEXT,
        last_error     TEXT,
        error_cause    TEXT,
        created_at     INTEGER NOT NULL, -- unix ms
        updated_at     INTEGER NOT NULL,
        last_activity  INTEGER NOT NULL,
        PRIMARY KEY (user_id, session_id)
);
CREATE INDEX sessions_state ON sessions (state);

-- Every container a session ever had, for audit and reconciliation.
CREATE TABLE containers (
        container_id   TEXT PRIMARY KEY,
        user_id        TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        image          TEXT,
        network_mode   TEXT,
        created_at     INTEGER NOT NULL,
        removed_at     INTEGER,
        end_cause      TEXT
);
CREATE INDEX containers_session ON containers (user_id, session_id);

-- One row per reserved host port.
CREATE TABLE port_allocations (
        port           INTEGER PRIMARY KEY,
        user_id        TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        container_id   TEXT,
        reserved_at    INTEGER NOT NULL
);
CREATE INDEX port_allocations_session ON port_allocations (user_id, session_id);

CREATE TABLE services (
        user_id        TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        name           TEXT NOT NULL,
        container_id   TEXT,
        command        TEXT NOT NULL,
        workdir        TEXT,
        state          TEXT NOT NULL,
        pid            INTEGER,
        exit_code      INTEGER,
        ports          TEXT, -- JSON list of {container_port, host_port}
        last_error     TEXT,
        started_at     INTEGER,
        stopped_at     INTEGER,
        PRIMARY KEY (user_id, session_id, name)
);

CREATE TABLE executions (
        id             TEXT PRIMARY KEY, -- uuid
        user_id        TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        container_id   TEXT,
        kind           TEXT NOT NULL, -- exec | run_code
        command_preview TEXT,
        command_sha256 TEXT,
        state          TEXT NOT NULL,
        cause          TEXT,
        exit_code      INTEGER,
        stdout_bytes   INTEGER NOT NULL DEFAULT 0,
        stderr_bytes   INTEGER NOT NULL DEFAULT 0,
        truncated      INTEGER NOT NULL DEFAULT 0,
        spool_path     TEXT,
        created_at     INTEGER NOT NULL,
        started_at     INTEGER,
        finished_at    INTEGER,
        duration_ms    INTEGER
);
CREATE INDEX executions_session ON executions (user_id, session_id, created_at);
CREATE INDEX executions_state ON executions (state);

CREATE TABLE private_datasets (
        user_id        TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        dataset        TEXT NOT NULL,
        source         TEXT,
        marked_at      INTEGER NOT NULL,
        PRIMARY KEY (user_id, session_id, dataset)
);

CREATE TABLE audit_log (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        ts             INTEGER NOT NULL,
        actor          TEXT,   -- "token:<id>", "admin:uid=0", "daemon"
        user_id        TEXT,
        session_id     TEXT,
        action         TEXT NOT NULL,
        detail         TEXT    -- JSON
);
CREATE INDEX audit_log_session ON audit_log (user_id, session_id, ts);

CREATE TABLE api_tokens (
        id             TEXT PRIMARY KEY,
        user_id        TEXT NOT NULL,
        role           TEXT NOT NULL CHECK (role IN ('agent', 'connector')),
        token_sha256   TEXT NOT NULL UNIQUE,
        created_at     INTEGER NOT NULL,
        revoked_at     INTEGER
);
