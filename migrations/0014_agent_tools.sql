-- 0014: what agents ask for (issue 17): a per-user script cache, and the options a session was created with.

-- A successful run_code, saved once per (user, content hash). content_hash is the SHA-256 (hex)
-- of the code; name is script-<utc time>-<first 12 hex of the hash>.<ext>.
CREATE TABLE scripts (
        user_id        TEXT NOT NULL,
        name           TEXT NOT NULL,
        content_hash   TEXT NOT NULL,
        language       TEXT NOT NULL,    -- python | node | bash
        description    TEXT,             -- from the leading comment, or NULL
        code           TEXT NOT NULL,
        bytes          INTEGER NOT NULL,
        created_at     INTEGER NOT NULL, -- unix ms
        PRIMARY KEY (user_id, name),
        UNIQUE (user_id, content_hash)
);

-- create_session's options; a session without a row has the config's image, no default
-- environment and no TTL. Removed with the session (destroy_session) or when its TTL ends it.
CREATE TABLE session_options (
        user_id        TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        image          TEXT,             -- NULL: the config's image
        env_json       TEXT,             -- {"NAME": "value"}: the default environment of executions
        expires_at     INTEGER,          -- unix ms; NULL: no TTL
        created_at     INTEGER NOT NULL,
        PRIMARY KEY (user_id, session_id)
);
