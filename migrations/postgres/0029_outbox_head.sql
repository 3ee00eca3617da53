-- The outbox dispatcher claims the oldest events not yet dispatched (`ORDER BY id LIMIT n`).
-- Without this index the claim walked the primary key past every dispatched event still
-- kept (30 days of them by default): 34 ms a claim at 300,000 events, growing with the table,
-- where this index reads the claimed events alone (0.05 ms).
CREATE INDEX idx_events_undispatched ON events (id) WHERE dispatched_at IS NULL;
