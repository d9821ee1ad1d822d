-- 0037: per-user secrets (issue 37). Write-only: the value is kept only sealed (AES-256-GCM
-- under the operator's key file, secrets.c), as base64 of nonce || ciphertext || tag, with the
-- user and the name as additional data, so a row moved to another user or name does not open.
-- hosts_json: the hostnames the value may be sent to; header: the request header it goes in
-- (NULL: wherever the placeholder appears in the headers).
CREATE TABLE secrets (
        user_id    TEXT NOT NULL,
        name       TEXT NOT NULL,
        hosts_json TEXT NOT NULL,
        header     TEXT,
        sealed     TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (user_id, name)
);
