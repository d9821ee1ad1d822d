-- 0005_runner: how an execution ran (the in-container runner or docker exec),
-- what it cost (rusage of its reaped process tree) and where it ran (image,
-- runtime, runner version) — issue 13.
ALTER TABLE executions ADD COLUMN via TEXT;
ALTER TABLE executions ADD COLUMN cpu_user_ms INTEGER;
ALTER TABLE executions ADD COLUMN cpu_system_ms INTEGER;
ALTER TABLE executions ADD COLUMN max_rss_kb INTEGER;
ALTER TABLE executions ADD COLUMN image TEXT;
ALTER TABLE executions ADD COLUMN runtime TEXT;
ALTER TABLE executions ADD COLUMN runner_version TEXT;
