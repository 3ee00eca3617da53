-- A user's reviews are read newest first from the per-user indexes (`idx_reviews_received`,
-- 0035; `idx_reviews_written`, 0041); no list reads every user's reviews by date (the growth
-- view has its own index, 0025), so the date index goes, as on PostgreSQL, where the planner
-- walked it for a busy user's page and read 24,000 reviews for 20 at L.
DROP INDEX idx_reviews_created_at;
