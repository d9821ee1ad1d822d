-- 0013: MCP tasks (issue 16, the io.modelcontextprotocol/tasks extension). A task is a durable handle on
-- one execution started by a tool call (exec, run_code); its status comes from that execution. The row
-- is written before the handle is returned, so a tasks/get for it always resolves until it expires.
CREATE TABLE mcp_tasks (
        task_id          TEXT PRIMARY KEY,          -- 32 hex characters, unguessable
        user_id          TEXT NOT NULL,             -- only this user sees the task
        session_id       TEXT NOT NULL,
        execution_id     TEXT NOT NULL,
        tool             TEXT NOT NULL,             -- exec | run_code
        ttl_ms           INTEGER NOT NULL,
        poll_interval_ms INTEGER NOT NULL,
        created_at       INTEGER NOT NULL,          -- unix ms
        updated_at       INTEGER NOT NULL,          -- unix ms: creation, or the cancel request
        expires_at       INTEGER NOT NULL,          -- created_at + ttl_ms: gone after this
        cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX mcp_tasks_user ON mcp_tasks (user_id, expires_at);
CREATE INDEX mcp_tasks_expiry ON mcp_tasks (expires_at);
