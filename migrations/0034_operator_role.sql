-- 0034: the operator token role (issue 39, the browser console): a token that lists every
-- user's sessions and events and may call nothing else (include/sandboxd/token.h). SQLite cannot
-- change a CHECK constraint in place, so the table is rebuilt with the new role.
CREATE TABLE api_tokens_0034 (
        id             TEXT PRIMARY KEY,
        user_id        TEXT NOT NULL,
        role           TEXT NOT NULL CHECK (role IN ('agent', 'connector', 'operator')),
        token_sha256   TEXT NOT NULL UNIQUE,
        created_at     INTEGER NOT NULL,
        revoked_at     INTEGER
);
INSERT INTO api_tokens_0034 (id, user_id, role, token_sha256, created_at, revoked_at)
        SELECT id, user_id, role, token_sha256, created_at, revoked_at FROM api_tokens;
DROP TABLE api_tokens;
ALTER TABLE api_tokens_0034 RENAME TO api_tokens;
