-- 0016: session uids are handed out round the range (issue 18 item 3). The uid after the last one
-- handed out comes first, so a uid released with a purged workspace is the last to be reused: a
-- process that ever outlived its session under that uid finds no new session's files soon after.
CREATE TABLE session_uid_cursor (
        id             INTEGER PRIMARY KEY CHECK (id = 1),
        last_uid       INTEGER NOT NULL
);
