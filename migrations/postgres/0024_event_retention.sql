-- Retention of what grows without bound (issue #32): the daily prune of dispatched outbox
-- events starts from the oldest by creation and stops at the first one young enough.
CREATE INDEX idx_events_dispatched_created ON events (created_at) WHERE dispatched_at IS NOT NULL;
