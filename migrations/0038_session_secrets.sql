-- 0038: secrets attached to a session (issue 37, part 2). The container's executions get
-- name=placeholder in their environment, never the value: placeholder is random per session
-- and attachment ("sbx_ph_" + 32 hex). Rows go with the session (destroy) and with the secret
-- (delete_secret); a fork or a restore starts with none.
CREATE TABLE session_secrets (
        user_id     TEXT NOT NULL,
        session_id  TEXT NOT NULL,
        name        TEXT NOT NULL,
        placeholder TEXT NOT NULL UNIQUE,
        created_at  INTEGER NOT NULL,
        PRIMARY KEY (user_id, session_id, name)
);
