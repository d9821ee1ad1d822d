-- 0041: what E2B's /secrets API (issue 36, docs/e2b.md) keeps beside a secret: a stable id
-- ("sec_" + 24 hex, unique per user), its version (1 when made, one more per new value, from
-- any front) and the customer's metadata (a JSON object of strings, E2B's bounds, secrets.c).
-- Rows made before have an id drawn here, version 1 and no metadata.
ALTER TABLE secrets ADD COLUMN secret_id TEXT;
ALTER TABLE secrets ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE secrets ADD COLUMN metadata_json TEXT NOT NULL DEFAULT '{}';
UPDATE secrets SET secret_id = 'sec_' || lower(hex(randomblob(12))) WHERE secret_id IS NULL;
CREATE UNIQUE INDEX secrets_by_id ON secrets (user_id, secret_id);
