-- 0015: idempotency keys (issue 17 item 4). One row per (user, method, key): the request it
-- was first used with (a hash of its canonical params), and what that request produced. The
-- row is claimed (PENDING) by a UNIQUE insert before anything runs, so two concurrent
-- duplicates cannot both run; it becomes DONE with the result (or, for exec and run_code,
-- with the id of the execution, whose record is the result). Rows past expires_at
-- (idempotency_window) are pruned by the daemon and by --gc.
CREATE TABLE idempotency_keys (
        user_id        TEXT NOT NULL,
        method         TEXT NOT NULL,
        idem_key       TEXT NOT NULL,
        request_hash   TEXT NOT NULL,    -- sha256 of the canonical params, the key left out
        state          TEXT NOT NULL,    -- PENDING | DONE
        execution_id   TEXT,             -- exec / run_code: set as soon as the execution exists
        result         TEXT,             -- other methods: the result, as JSON
        created_at     INTEGER NOT NULL,
        expires_at     INTEGER NOT NULL,
        PRIMARY KEY (user_id, method, idem_key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

-- list_executions completed_within_ms: executions by the time they ended.
CREATE INDEX executions_user_finished ON executions (user_id, finished_at);
