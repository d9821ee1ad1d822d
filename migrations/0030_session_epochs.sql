-- 0030: session epochs (issue 26, fencing). A session's epoch grows by one whenever its
-- container is (re)created or moved; the node agent that serves the session's channels presents
-- the epoch it was given, and one from an older epoch is refused (an audit row says so). A row
-- outlives its session on purpose: a session destroyed and created again continues from a higher
-- epoch, so a node agent that held the earlier incarnation is refused too.
CREATE TABLE session_epochs (
        user_id    TEXT NOT NULL,
        session_id TEXT NOT NULL,
        epoch      INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,               -- unix ms
        PRIMARY KEY (user_id, session_id)
);
