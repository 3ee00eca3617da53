-- The growth view adds to a window's day tallies the reviews past their blind window that the
-- reveal job has not announced yet (0040). It found them by reading every published review of
-- the window under 0025's index and testing each: a year's 280,000 reviews of a role at L, 85 ms
-- a role on SQLite for none found. Those reviews, and the ones still blind, are few at any
-- time: an index of their own answers for them.
CREATE INDEX idx_reviews_awaiting_reveal ON reviews (reviewer_role, blind_until)
    INCLUDE (created_at, rating)
    WHERE visibility = 'published' AND revealed_at IS NULL AND announced_at IS NULL;
