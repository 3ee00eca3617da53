-- Idempotency keys (issue 34): the first request of a user with a key runs, and its answer is
-- kept for a retry of the same request with the same key (24 h by default; swept by a job).
-- `owner` names the run holding the key: each transaction of that run marks `work_committed`
-- under its owner, so the mark commits with the work or not at all, and a retry may take a
-- key over only from a run that crashed having committed nothing.
CREATE TABLE idempotency_keys (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id           INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    idempotency_key   TEXT NOT NULL,
    fingerprint       TEXT NOT NULL,
    owner             TEXT NOT NULL,
    locked_until      TEXT NOT NULL,
    work_committed    BOOLEAN NOT NULL DEFAULT FALSE,
    -- The kept answer; no status while the first run runs.
    status            INTEGER,
    content_type      TEXT,
    location          TEXT,
    body              BLOB,
    created_at        TEXT NOT NULL,
    expires_at        TEXT NOT NULL,
    UNIQUE (user_id, idempotency_key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
