-- 0039: a session's own narrowing of its egress (issue 36: E2B's network.allowOut/denyOut and
-- allow_internet_access=false). It never widens: the proxy applies it after the allowlist
-- (egress_rules.h, egress_narrow_*). One row per pattern; kind 'only' (pattern '') says only the
-- 'allow' patterns pass; 'deny' patterns do not pass unless an 'allow' one names them too.
-- Rows go with the session (destroy); a fork or a restore of its snapshot carries them.
CREATE TABLE egress_narrowing (
        user_id     TEXT NOT NULL,
        session_id  TEXT NOT NULL,
        kind        TEXT NOT NULL,    -- only | allow | deny
        pattern     TEXT NOT NULL DEFAULT '',
        created_at  INTEGER NOT NULL,
        PRIMARY KEY (user_id, session_id, kind, pattern)
);
