-- 0002_execution_output: what the execution engine needs to serve output
-- after a restart: bytes actually kept in the spool (the totals count bytes
-- past the cap too), and the error of an execution that could not run.
ALTER TABLE executions ADD COLUMN stdout_spooled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN stderr_spooled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN error TEXT;
CREATE INDEX executions_user_created ON executions (user_id, created_at);
