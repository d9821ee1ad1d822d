-- 0018: per-image warm pools and loop-mode slots (issue 15). image_ref is the configured image name
-- a slot was made for (image or one of images; the image column keeps the resolved id), and
-- ws_quota the quota its workspace was made with ("loop:<bytes>:<inodes>" in workspace_quota_mode
-- loop, NULL otherwise): a claim takes only a slot of the session's image and of the quota in force.
-- Slots from 0017 have neither: the next reconcile removes them (the refill makes new ones).
ALTER TABLE pool_slots ADD COLUMN image_ref TEXT;
ALTER TABLE pool_slots ADD COLUMN ws_quota TEXT;
CREATE INDEX pool_slots_image ON pool_slots (image_ref, state, created_at);
