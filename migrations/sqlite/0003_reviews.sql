-- Reviews (issue 13): double-blind reveal, author edits, administrators' moderation log.

-- A review is shown to its reviewee and the public once revealed: when the counterpart reviews
-- too (`revealed_at`), or at `blind_until` (the project's end + REVIEW_BLIND_DAYS).
-- `announced_at`: the reveal was told to the reviewee (once).
ALTER TABLE reviews ADD COLUMN blind_until TEXT;
ALTER TABLE reviews ADD COLUMN revealed_at TEXT;
ALTER TABLE reviews ADD COLUMN announced_at TEXT;
ALTER TABLE reviews ADD COLUMN edited_at TEXT;
CREATE UNIQUE INDEX uq_reviews_project_author ON reviews (project_id, reviewer_id);
CREATE INDEX idx_reviews_unannounced ON reviews (blind_until) WHERE announced_at IS NULL;

-- Who published, hid or deleted which review, and when (kept after a deletion).
CREATE TABLE review_moderation (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    review_id       INTEGER NOT NULL,
    action          TEXT NOT NULL CHECK (action IN ('publish', 'hide', 'delete')),
    admin_id        INTEGER REFERENCES users (id) ON DELETE SET NULL,
    created_at      TEXT NOT NULL
);
CREATE INDEX idx_review_moderation_review ON review_moderation (review_id, created_at);

-- Both parties are asked for a review once when their project completes.
CREATE TABLE review_requests (
    project_id      INTEGER NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    user_id         INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at      TEXT NOT NULL,
    PRIMARY KEY (project_id, user_id)
);
