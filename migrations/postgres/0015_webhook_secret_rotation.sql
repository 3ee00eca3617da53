-- Webhook secret rotation without a gap (issue 34). The twin is
-- migrations/sqlite/0015_webhook_secret_rotation.sql: same columns, type spelling as 0001 says.
--
-- Regenerating a secret keeps the one it replaces in `previous_secret` until
-- `previous_secret_until` (WEBHOOK_SECRET_ROTATION_HOURS later; both NULL with a zero window):
-- until then every delivery carries a signature with each. Only one old secret at a time: a
-- second regeneration within the window puts the secret it replaces here.
ALTER TABLE webhook_configs ADD COLUMN previous_secret TEXT;
ALTER TABLE webhook_configs ADD COLUMN previous_secret_until TIMESTAMPTZ;
