-- E-mail has a queue of its own: the outbox's e-mail consumer writes an event's messages here
-- and a sender delivers them at the mail server's pace, so that notifications and webhooks
-- never wait for SMTP. A message is sent at least once, under its idempotency key.
CREATE TABLE mail_queue (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    position        INTEGER NOT NULL CHECK (position >= 0),   -- index in the event's `email` list
    recipient       TEXT NOT NULL,
    template        TEXT NOT NULL,
    context         TEXT NOT NULL DEFAULT '{}',
    idempotency_key TEXT NOT NULL,
    available_at    TEXT NOT NULL,                            -- due, or leased until
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error      TEXT,
    sent_at         TEXT,
    UNIQUE (event_id, position)
);
CREATE INDEX idx_mail_queue_due ON mail_queue (available_at, id) WHERE sent_at IS NULL;
