-- 0033: the engine's volume holding a session's workspace when it is not the one named after the
-- session's key (issue 27, the warm pool on Kubernetes in kube_workspace = pvc): a pool slot's
-- Pod is made ahead with its own PersistentVolumeClaim, and a claim hands Pod and claim to the
-- session without recreating either, so the session's workspace keeps the slot's claim name. It
-- lives on the uid's row because it has the uid's lifetime (the workspace's: recreation, the
-- ratchet, restarts, until a purge or --gc deletes it), and store_pool_claim_commit moves that
-- row from the slot to the session. NULL: the engine's name for the key.
ALTER TABLE session_uids ADD COLUMN workspace_claim TEXT;
