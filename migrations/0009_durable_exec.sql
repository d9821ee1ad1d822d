-- 0009_durable_exec: what a restarted daemon needs to re-adopt an execution
-- the in-container runner kept running (issue 13): the runner's tag for it,
-- its deadline (timeouts still hold), its start, its share of the session's
-- spool quota, who started it (audit) and how (stdin kept open, terminal).
ALTER TABLE executions ADD COLUMN runner_tag INTEGER;
ALTER TABLE executions ADD COLUMN deadline_at INTEGER; -- unix ms
ALTER TABLE executions ADD COLUMN spool_budget INTEGER;
ALTER TABLE executions ADD COLUMN actor TEXT;
ALTER TABLE executions ADD COLUMN interactive INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN tty INTEGER NOT NULL DEFAULT 0;
