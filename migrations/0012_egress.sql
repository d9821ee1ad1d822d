-- 0012: egress through the daemon (issue 14): allowlist additions and the audit of every decision.

-- Additions to the config's egress_allow. session_id '' means every session of the user.
CREATE TABLE egress_rules (
        user_id        TEXT NOT NULL,
        session_id     TEXT NOT NULL DEFAULT '',
        pattern        TEXT NOT NULL,    -- host | *.suffix, optionally :port or :*
        actor          TEXT,
        created_at     INTEGER NOT NULL,
        PRIMARY KEY (user_id, session_id, pattern)
);

-- One row per decision: blocked ones at once, allowed ones when the tunnel ends.
CREATE TABLE egress_log (
        id             INTEGER PRIMARY KEY,
        user_id        TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        ts             INTEGER NOT NULL, -- unix ms of the decision
        host           TEXT NOT NULL,
        port           INTEGER NOT NULL,
        method         TEXT NOT NULL,
        decision       TEXT NOT NULL,    -- allowed | blocked
        reason         TEXT NOT NULL,
        address        TEXT,             -- the address connected to (allowed ones)
        bytes_up       INTEGER NOT NULL DEFAULT 0,
        bytes_down     INTEGER NOT NULL DEFAULT 0,
        duration_ms    INTEGER NOT NULL DEFAULT 0,
        suppressed     INTEGER NOT NULL DEFAULT 0 -- blocked rows of the session not written before this one
);
CREATE INDEX egress_log_session ON egress_log (user_id, session_id, id);
CREATE INDEX egress_log_ts ON egress_log (ts);
