-- The reviews past their blind window that the reveal job has not announced yet, and those
-- still blind: few at any time, so the growth view finds them here instead of testing every
-- published review of a window (the PostgreSQL migration of the same number says more).
CREATE INDEX idx_reviews_awaiting_reveal ON reviews (reviewer_role, blind_until, created_at, rating)
    WHERE visibility = 'published' AND revealed_at IS NULL AND announced_at IS NULL;
