-- Each user's reviews, counted by the writes (issue #32), in the tallies of 0023: the list of
-- a user's reviews and their statistics read a few tally rows instead of every review the
-- user wrote or received (45,000 received by the busiest expert at L: 74 ms for the list,
-- 60 ms for the statistics).
--
-- `reviews_by_user`, per user: `received:<visibility>` and `written:<visibility>`, and
-- `shown:<rating>`, the published reviews received that are revealed or announced (as 0023's
-- `expert_ratings` counts them). A review past its blind window that the reveal job has not
-- announced yet is shown too; the read adds those few.
CREATE FUNCTION review_user_tally(r reviews, sign BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'reviews_by_user', k.key, k.user_id, sign, 0
      FROM (SELECT 'received:' || r.visibility AS key, r.reviewee_id AS user_id
            UNION ALL
            SELECT 'written:' || r.visibility, r.reviewer_id
            UNION ALL
            SELECT 'shown:' || r.rating, r.reviewee_id
             WHERE r.visibility = 'published'
               AND (r.revealed_at IS NOT NULL OR r.announced_at IS NOT NULL)) k
     WHERE k.user_id IS NOT NULL
$$;
CREATE FUNCTION reviews_user_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM review_user_tally(OLD, -1); END IF;
    IF TG_OP <> 'DELETE' THEN PERFORM review_user_tally(NEW, 1); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER reviews_user_tally_insert_delete AFTER INSERT OR DELETE ON reviews
    FOR EACH ROW EXECUTE FUNCTION reviews_user_tally_sync();
CREATE TRIGGER reviews_user_tally_update
    AFTER UPDATE OF reviewer_id, reviewee_id, rating, visibility, revealed_at, announced_at
    ON reviews FOR EACH ROW
    WHEN ((OLD.reviewer_id, OLD.reviewee_id, OLD.rating, OLD.visibility,
           OLD.revealed_at IS NULL, OLD.announced_at IS NULL)
          IS DISTINCT FROM (NEW.reviewer_id, NEW.reviewee_id, NEW.rating, NEW.visibility,
           NEW.revealed_at IS NULL, NEW.announced_at IS NULL))
    EXECUTE FUNCTION reviews_user_tally_sync();

-- A page of the reviews a user received, newest first, read from an index in that order
-- whatever their visibility (`idx_reviews_reviewee` leads with the visibility).
CREATE INDEX idx_reviews_received ON reviews (reviewee_id, created_at, id);
-- The reviews a user received that are shown but not counted yet: past their blind window,
-- neither revealed nor announced (the reveal job announces them within minutes).
CREATE INDEX idx_reviews_unannounced_received ON reviews (reviewee_id, blind_until)
    WHERE announced_at IS NULL AND revealed_at IS NULL;

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'reviews_by_user', k.key, k.user_id, COUNT(*), 0 FROM (
    SELECT 'received:' || visibility AS key, reviewee_id AS user_id FROM reviews
    UNION ALL
    SELECT 'written:' || visibility, reviewer_id FROM reviews
    UNION ALL
    SELECT 'shown:' || rating, reviewee_id FROM reviews
     WHERE visibility = 'published' AND (revealed_at IS NOT NULL OR announced_at IS NOT NULL)) k
 WHERE k.user_id IS NOT NULL
 GROUP BY k.key, k.user_id;
