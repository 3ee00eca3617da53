-- Outgoing user webhook deliveries (issue 15). The PostgreSQL twin is
-- migrations/postgres/0005_webhook_deliveries.sql: same columns, type spelling as 0001 says.
--
-- One row per (event, user, type): `message_id` is the stable id receivers de-duplicate on
-- (the body's `id` and the `webhook-id` header, kept by a redelivery). `body` is the exact JSON
-- sent, fixed when the delivery is created (TEXT on both engines: the exact bytes signed). `state` is pending | delivered | failed | disabled;
-- a pending row is due at `next_attempt_at` (a dispatcher pushes it forward while it holds it).

CREATE TABLE webhook_deliveries (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id       TEXT NOT NULL UNIQUE,
    user_id          INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    event_id         INTEGER REFERENCES events (id) ON DELETE SET NULL,
    event_type       TEXT NOT NULL,
    body             TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed', 'disabled')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    failures         INTEGER NOT NULL DEFAULT 0,
    last_status_code INTEGER,
    last_error       TEXT,
    last_attempt_at  TEXT,
    next_attempt_at  TEXT,
    delivered_at     TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX idx_webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX idx_webhook_deliveries_user ON webhook_deliveries (user_id, id);

-- Since when the endpoint has failed without a success in between (NULL: healthy); past three
-- days it is disabled and its owner told.
ALTER TABLE webhook_configs ADD COLUMN failing_since TEXT;
