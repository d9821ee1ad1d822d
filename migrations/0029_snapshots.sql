-- 0029: workspace snapshots (issue 28). One row per snapshot: whose it is, the session it was
-- taken of, its optional name (unique per user), how its files are kept (kind 'image': a sparse
-- copy of a loop-mode workspace's ext4 image; 'archive': a compressed tar of the workspace tree),
-- the bytes it takes on disk, the workspace's size limit (loop: the image's size), what recreates
-- the environment (meta_json: image, runtime, env, egress additions, labels, resources, the
-- contexts it had) and its privacy marks (datasets_json, private). state 'creating' while the
-- copy runs (it counts against the quota already), 'ready' after; paused names the container the
-- copy froze until it thaws it, so a daemon that died meanwhile thaws it when it starts again. The files live under
-- {data_dir}/snapshots/<user>/<id>, outside every workspace.
CREATE TABLE snapshots (
        id             TEXT PRIMARY KEY,
        user_id        TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        name           TEXT,
        kind           TEXT NOT NULL,
        state          TEXT NOT NULL DEFAULT 'creating',
        bytes          INTEGER NOT NULL DEFAULT 0,
        workspace_size INTEGER NOT NULL DEFAULT 0,
        meta_json      TEXT NOT NULL,
        datasets_json  TEXT,
        private        INTEGER NOT NULL DEFAULT 0,
        paused         TEXT,              -- the container the copy froze, until it is thawed
        created_at     INTEGER NOT NULL
);
CREATE INDEX snapshots_user ON snapshots (user_id, created_at);
CREATE UNIQUE INDEX snapshots_user_name ON snapshots (user_id, name) WHERE name IS NOT NULL;
