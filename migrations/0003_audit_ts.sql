-- 0003_audit_ts: gc deletes audit rows past audit_retention by age, so ts
-- gets an index of its own.
CREATE INDEX IF NOT EXISTS audit_log_ts ON audit_log (ts);
