-- Each user's reviews, counted by the writes (issue #32), in the tallies of 0023: the list of
-- a user's reviews and their statistics read a few tally rows instead of every review the
-- user wrote or received (45,000 received by the busiest expert at L: 74 ms for the list,
-- 60 ms for the statistics).
--
-- `reviews_by_user`, per user: `received:<visibility>` and `written:<visibility>`, and
-- `shown:<rating>`, the published reviews received that are revealed or announced (as 0023's
-- `expert_ratings` counts them). A review past its blind window that the reveal job has not
-- announced yet is shown too; the read adds those few.
CREATE TRIGGER reviews_user_tally_insert AFTER INSERT ON reviews BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'reviews_by_user', k.key, k.user_id, 1, 0
      FROM (SELECT 'received:' || NEW.visibility AS key, NEW.reviewee_id AS user_id
            UNION ALL
            SELECT 'written:' || NEW.visibility, NEW.reviewer_id
            UNION ALL
            SELECT 'shown:' || NEW.rating, NEW.reviewee_id
             WHERE NEW.visibility = 'published'
               AND (NEW.revealed_at IS NOT NULL OR NEW.announced_at IS NOT NULL)) k
     WHERE k.user_id IS NOT NULL;
END;
CREATE TRIGGER reviews_user_tally_delete AFTER DELETE ON reviews BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'reviews_by_user', k.key, k.user_id, -1, 0
      FROM (SELECT 'received:' || OLD.visibility AS key, OLD.reviewee_id AS user_id
            UNION ALL
            SELECT 'written:' || OLD.visibility, OLD.reviewer_id
            UNION ALL
            SELECT 'shown:' || OLD.rating, OLD.reviewee_id
             WHERE OLD.visibility = 'published'
               AND (OLD.revealed_at IS NOT NULL OR OLD.announced_at IS NOT NULL)) k
     WHERE k.user_id IS NOT NULL;
END;
CREATE TRIGGER reviews_user_tally_update
    AFTER UPDATE OF reviewer_id, reviewee_id, rating, visibility, revealed_at, announced_at
    ON reviews
    WHEN OLD.reviewer_id IS NOT NEW.reviewer_id OR OLD.reviewee_id IS NOT NEW.reviewee_id
      OR OLD.rating IS NOT NEW.rating OR OLD.visibility IS NOT NEW.visibility
      OR (OLD.revealed_at IS NULL) <> (NEW.revealed_at IS NULL)
      OR (OLD.announced_at IS NULL) <> (NEW.announced_at IS NULL)
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'reviews_by_user', k.key, k.user_id, -1, 0
      FROM (SELECT 'received:' || OLD.visibility AS key, OLD.reviewee_id AS user_id
            UNION ALL
            SELECT 'written:' || OLD.visibility, OLD.reviewer_id
            UNION ALL
            SELECT 'shown:' || OLD.rating, OLD.reviewee_id
             WHERE OLD.visibility = 'published'
               AND (OLD.revealed_at IS NOT NULL OR OLD.announced_at IS NOT NULL)) k
     WHERE k.user_id IS NOT NULL;
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'reviews_by_user', k.key, k.user_id, 1, 0
      FROM (SELECT 'received:' || NEW.visibility AS key, NEW.reviewee_id AS user_id
            UNION ALL
            SELECT 'written:' || NEW.visibility, NEW.reviewer_id
            UNION ALL
            SELECT 'shown:' || NEW.rating, NEW.reviewee_id
             WHERE NEW.visibility = 'published'
               AND (NEW.revealed_at IS NOT NULL OR NEW.announced_at IS NOT NULL)) k
     WHERE k.user_id IS NOT NULL;
END;

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
