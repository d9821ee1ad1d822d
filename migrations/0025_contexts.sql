-- 0025: interpreter contexts of run_cell (issue 25). One row per (session, context name): its
-- language, the generation running (or last run) and its cell count, the runner job it runs as
-- (runner_tag) in which container, and state 'live' or 'lost' (with lost_cause, the reason the
-- next cell reports as state_lost). A daemon that starts finds the contexts that were live and
-- reports their loss (daemon_restart) instead of running silently in an empty namespace.
CREATE TABLE contexts (
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        name TEXT NOT NULL,
        language TEXT NOT NULL,
        generation INTEGER NOT NULL,
        execution_count INTEGER NOT NULL DEFAULT 0,
        runner_tag INTEGER NOT NULL DEFAULT 0,
        container_id TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL,
        lost_cause TEXT NOT NULL DEFAULT '',
        created_at INTEGER NOT NULL,
        last_used INTEGER NOT NULL,
        PRIMARY KEY (user_id, session_id, name)
);
