-- A user's reviews are read newest first from the per-user indexes (`idx_reviews_received`,
-- 0035; `idx_reviews_written`, 0041). PostgreSQL preferred walking every review newest first
-- through the date index and filtering by user: it assumes a user's reviews spread evenly in
-- time and that the walk's heap reads are in order, and for a busy user whose reviews are
-- older than most it read 24,000 reviews for a page of 20 at L (22 ms). No list reads every
-- user's reviews by date (the growth view has its own index, 0025), so the index goes.
DROP INDEX idx_reviews_created_at;
