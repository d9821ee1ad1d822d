-- 0017: the warm pool (issue 15). One row per pool slot: a container made ahead, with its own
-- workspace directory ({data_dir}/workspaces/@pool/<slot>) and its own uid (session_uids row of
-- user '@pool', session <slot>). A slot is 'creating' from before its container exists until it
-- passed the start check, then 'ready'; a claim marks it 'claiming' with the session it goes to
-- and one transaction (store_pool_claim_commit) moves uid, container and session row to the
-- session and deletes the slot. Restart recovery finishes every 'claiming' slot and removes
-- 'creating' ones (pool.c).
CREATE TABLE pool_slots (
        slot           TEXT PRIMARY KEY,
        state          TEXT NOT NULL CHECK (state IN ('creating', 'ready', 'claiming')),
        container_id   TEXT,
        image          TEXT,
        network_mode   TEXT,
        user_id        TEXT,
        session_id     TEXT,
        created_at     INTEGER NOT NULL
);
CREATE INDEX pool_slots_state ON pool_slots (state, created_at);
