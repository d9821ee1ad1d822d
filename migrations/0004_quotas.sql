-- 0004_quotas: per-user overrides of the quota defaults (quota.h). One row
-- per (user, key); a user without a row for a key gets the config default.
CREATE TABLE user_quotas (
        user_id        TEXT NOT NULL,
        key            TEXT NOT NULL,
        value          INTEGER NOT NULL,
        set_at         INTEGER NOT NULL, -- unix ms
        PRIMARY KEY (user_id, key)
);
