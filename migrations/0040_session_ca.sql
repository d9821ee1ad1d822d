-- 0040: a session's own CA (issue 37, part 2): the egress proxy signs the leaf certificates of
-- the hosts its attached secrets name with it, and the container trusts it through a bundle in
-- its runner directory. The key is sealed with the secrets key (secrets.c), the certificate is
-- public. One per session, kept across pause and restart, gone with the session; a fork or a
-- restore is a new session and gets a new one.
CREATE TABLE session_ca (
        user_id    TEXT NOT NULL,
        session_id TEXT NOT NULL,
        cert_pem   TEXT NOT NULL,
        key_sealed TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (user_id, session_id)
);
