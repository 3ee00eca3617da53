-- The growth view from day tallies (issue #32). Each figure of a window was counted over the
-- window's rows (0025): at L, 30 days of projects, users, payments and reviews, and every
-- project still open, 166 ms. The writes now count each figure by UTC day in the tallies of
-- 0023 (name `growth:<figure>`, key `YYYY-MM-DD`), so a window reads its whole days there and
-- counts from the rows only the parts of a day at either end.
--
--   growth:released           released payments by day of release; total = amount
--   growth:revenue            the same; total = commission
--   growth:project:<type>     projects by day of creation
--   growth:user               accounts by day of creation
--   growth:completed          completed projects by `completed_at`
--   growth:cancelled          cancelled projects by `cancelled_at`
--   growth:assigned           assigned projects by `assigned_at`
--   growth:ended              assigned projects by their first end (`project_end`)
--   growth:dispute            disputes by day of opening
--   growth:rating:<role>      published reviews by the reviewer's role and day written, once
--                             revealed or announced; total = the ratings' sum (a review past its
--                             blind window that the reveal job has not announced yet is added
--                             by the read, as 0035's statistics do)
--
-- `under_way` keeps `assignments` and `ends` over all time, so the projects under way in a window
-- (assigned before its end, not ended before its start) are those two totals less the days
-- after each bound.

-- A project's first end, completion or cancellation, is spelled out where it is needed:
-- `CASE WHEN cancelled_at IS NULL OR completed_at < cancelled_at THEN completed_at ELSE
-- cancelled_at END` (`store::platform_metrics::PROJECT_END`). A day is the first ten
-- characters of a stored time (UTC).
CREATE TRIGGER projects_growth_tally_insert AFTER INSERT ON projects BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:project:' || NEW.project_type, substr(NEW.created_at, 1, 10), 1, 0
    UNION ALL
    SELECT 'growth:completed', substr(NEW.completed_at, 1, 10), 1, 0
     WHERE NEW.status = 'completed' AND NEW.completed_at IS NOT NULL
    UNION ALL
    SELECT 'growth:cancelled', substr(NEW.cancelled_at, 1, 10), 1, 0
     WHERE NEW.status = 'cancelled' AND NEW.cancelled_at IS NOT NULL
    UNION ALL
    SELECT 'growth:assigned', substr(NEW.assigned_at, 1, 10), 1, 0 WHERE NEW.assigned_at IS NOT NULL
    UNION ALL
    SELECT 'under_way', 'assignments', 1, 0 WHERE NEW.assigned_at IS NOT NULL
    UNION ALL
    SELECT 'growth:ended', substr(CASE WHEN NEW.cancelled_at IS NULL OR NEW.completed_at < NEW.cancelled_at THEN NEW.completed_at ELSE NEW.cancelled_at END, 1, 10), 1, 0
     WHERE NEW.assigned_at IS NOT NULL AND CASE WHEN NEW.cancelled_at IS NULL OR NEW.completed_at < NEW.cancelled_at THEN NEW.completed_at ELSE NEW.cancelled_at END IS NOT NULL
    UNION ALL
    SELECT 'under_way', 'ends', 1, 0 WHERE NEW.assigned_at IS NOT NULL AND CASE WHEN NEW.cancelled_at IS NULL OR NEW.completed_at < NEW.cancelled_at THEN NEW.completed_at ELSE NEW.cancelled_at END IS NOT NULL;
END;
CREATE TRIGGER projects_growth_tally_delete AFTER DELETE ON projects BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:project:' || OLD.project_type, substr(OLD.created_at, 1, 10), -1, 0
    UNION ALL
    SELECT 'growth:completed', substr(OLD.completed_at, 1, 10), -1, 0
     WHERE OLD.status = 'completed' AND OLD.completed_at IS NOT NULL
    UNION ALL
    SELECT 'growth:cancelled', substr(OLD.cancelled_at, 1, 10), -1, 0
     WHERE OLD.status = 'cancelled' AND OLD.cancelled_at IS NOT NULL
    UNION ALL
    SELECT 'growth:assigned', substr(OLD.assigned_at, 1, 10), -1, 0 WHERE OLD.assigned_at IS NOT NULL
    UNION ALL
    SELECT 'under_way', 'assignments', -1, 0 WHERE OLD.assigned_at IS NOT NULL
    UNION ALL
    SELECT 'growth:ended', substr(CASE WHEN OLD.cancelled_at IS NULL OR OLD.completed_at < OLD.cancelled_at THEN OLD.completed_at ELSE OLD.cancelled_at END, 1, 10), -1, 0
     WHERE OLD.assigned_at IS NOT NULL AND CASE WHEN OLD.cancelled_at IS NULL OR OLD.completed_at < OLD.cancelled_at THEN OLD.completed_at ELSE OLD.cancelled_at END IS NOT NULL
    UNION ALL
    SELECT 'under_way', 'ends', -1, 0 WHERE OLD.assigned_at IS NOT NULL AND CASE WHEN OLD.cancelled_at IS NULL OR OLD.completed_at < OLD.cancelled_at THEN OLD.completed_at ELSE OLD.cancelled_at END IS NOT NULL;
END;
CREATE TRIGGER projects_growth_tally_update AFTER UPDATE OF project_type, created_at, status, completed_at, cancelled_at, assigned_at ON projects
    WHEN OLD.project_type IS NOT NEW.project_type OR OLD.created_at IS NOT NEW.created_at
      OR OLD.status IS NOT NEW.status OR OLD.completed_at IS NOT NEW.completed_at
      OR OLD.cancelled_at IS NOT NEW.cancelled_at OR OLD.assigned_at IS NOT NEW.assigned_at
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:project:' || OLD.project_type, substr(OLD.created_at, 1, 10), -1, 0
    UNION ALL
    SELECT 'growth:completed', substr(OLD.completed_at, 1, 10), -1, 0
     WHERE OLD.status = 'completed' AND OLD.completed_at IS NOT NULL
    UNION ALL
    SELECT 'growth:cancelled', substr(OLD.cancelled_at, 1, 10), -1, 0
     WHERE OLD.status = 'cancelled' AND OLD.cancelled_at IS NOT NULL
    UNION ALL
    SELECT 'growth:assigned', substr(OLD.assigned_at, 1, 10), -1, 0 WHERE OLD.assigned_at IS NOT NULL
    UNION ALL
    SELECT 'under_way', 'assignments', -1, 0 WHERE OLD.assigned_at IS NOT NULL
    UNION ALL
    SELECT 'growth:ended', substr(CASE WHEN OLD.cancelled_at IS NULL OR OLD.completed_at < OLD.cancelled_at THEN OLD.completed_at ELSE OLD.cancelled_at END, 1, 10), -1, 0
     WHERE OLD.assigned_at IS NOT NULL AND CASE WHEN OLD.cancelled_at IS NULL OR OLD.completed_at < OLD.cancelled_at THEN OLD.completed_at ELSE OLD.cancelled_at END IS NOT NULL
    UNION ALL
    SELECT 'under_way', 'ends', -1, 0 WHERE OLD.assigned_at IS NOT NULL AND CASE WHEN OLD.cancelled_at IS NULL OR OLD.completed_at < OLD.cancelled_at THEN OLD.completed_at ELSE OLD.cancelled_at END IS NOT NULL;
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:project:' || NEW.project_type, substr(NEW.created_at, 1, 10), 1, 0
    UNION ALL
    SELECT 'growth:completed', substr(NEW.completed_at, 1, 10), 1, 0
     WHERE NEW.status = 'completed' AND NEW.completed_at IS NOT NULL
    UNION ALL
    SELECT 'growth:cancelled', substr(NEW.cancelled_at, 1, 10), 1, 0
     WHERE NEW.status = 'cancelled' AND NEW.cancelled_at IS NOT NULL
    UNION ALL
    SELECT 'growth:assigned', substr(NEW.assigned_at, 1, 10), 1, 0 WHERE NEW.assigned_at IS NOT NULL
    UNION ALL
    SELECT 'under_way', 'assignments', 1, 0 WHERE NEW.assigned_at IS NOT NULL
    UNION ALL
    SELECT 'growth:ended', substr(CASE WHEN NEW.cancelled_at IS NULL OR NEW.completed_at < NEW.cancelled_at THEN NEW.completed_at ELSE NEW.cancelled_at END, 1, 10), 1, 0
     WHERE NEW.assigned_at IS NOT NULL AND CASE WHEN NEW.cancelled_at IS NULL OR NEW.completed_at < NEW.cancelled_at THEN NEW.completed_at ELSE NEW.cancelled_at END IS NOT NULL
    UNION ALL
    SELECT 'under_way', 'ends', 1, 0 WHERE NEW.assigned_at IS NOT NULL AND CASE WHEN NEW.cancelled_at IS NULL OR NEW.completed_at < NEW.cancelled_at THEN NEW.completed_at ELSE NEW.cancelled_at END IS NOT NULL;
END;

CREATE TRIGGER users_growth_tally_insert AFTER INSERT ON users BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
        VALUES ('growth:user', substr(NEW.created_at, 1, 10), 1, 0);
END;
CREATE TRIGGER users_growth_tally_delete AFTER DELETE ON users BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
        VALUES ('growth:user', substr(OLD.created_at, 1, 10), -1, 0);
END;
CREATE TRIGGER users_growth_tally_update AFTER UPDATE OF created_at ON users
    WHEN OLD.created_at IS NOT NEW.created_at
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
        VALUES ('growth:user', substr(OLD.created_at, 1, 10), -1, 0);
    INSERT INTO tally_deltas (name, key, n, total)
        VALUES ('growth:user', substr(NEW.created_at, 1, 10), 1, 0);
END;

CREATE TRIGGER disputes_growth_tally_insert AFTER INSERT ON disputes BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
        VALUES ('growth:dispute', substr(NEW.created_at, 1, 10), 1, 0);
END;
CREATE TRIGGER disputes_growth_tally_delete AFTER DELETE ON disputes BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
        VALUES ('growth:dispute', substr(OLD.created_at, 1, 10), -1, 0);
END;
CREATE TRIGGER disputes_growth_tally_update AFTER UPDATE OF created_at ON disputes
    WHEN OLD.created_at IS NOT NEW.created_at
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
        VALUES ('growth:dispute', substr(OLD.created_at, 1, 10), -1, 0);
    INSERT INTO tally_deltas (name, key, n, total)
        VALUES ('growth:dispute', substr(NEW.created_at, 1, 10), 1, 0);
END;

CREATE TRIGGER payments_growth_tally_insert AFTER INSERT ON payments BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:released', substr(NEW.released_at, 1, 10), 1, NEW.amount_minor
     WHERE NEW.status = 'released' AND NEW.released_at IS NOT NULL
    UNION ALL
    SELECT 'growth:revenue', substr(NEW.released_at, 1, 10), 1, COALESCE(NEW.commission_minor, 0)
     WHERE NEW.status = 'released' AND NEW.released_at IS NOT NULL;
END;
CREATE TRIGGER payments_growth_tally_delete AFTER DELETE ON payments BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:released', substr(OLD.released_at, 1, 10), -1, -OLD.amount_minor
     WHERE OLD.status = 'released' AND OLD.released_at IS NOT NULL
    UNION ALL
    SELECT 'growth:revenue', substr(OLD.released_at, 1, 10), -1, -COALESCE(OLD.commission_minor, 0)
     WHERE OLD.status = 'released' AND OLD.released_at IS NOT NULL;
END;
CREATE TRIGGER payments_growth_tally_update AFTER UPDATE OF status, amount_minor, commission_minor, released_at ON payments
    WHEN (OLD.status = 'released' OR NEW.status = 'released')
      AND (OLD.status IS NOT NEW.status OR OLD.amount_minor IS NOT NEW.amount_minor
           OR OLD.commission_minor IS NOT NEW.commission_minor
           OR OLD.released_at IS NOT NEW.released_at)
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:released', substr(OLD.released_at, 1, 10), -1, -OLD.amount_minor
     WHERE OLD.status = 'released' AND OLD.released_at IS NOT NULL
    UNION ALL
    SELECT 'growth:revenue', substr(OLD.released_at, 1, 10), -1, -COALESCE(OLD.commission_minor, 0)
     WHERE OLD.status = 'released' AND OLD.released_at IS NOT NULL;
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:released', substr(NEW.released_at, 1, 10), 1, NEW.amount_minor
     WHERE NEW.status = 'released' AND NEW.released_at IS NOT NULL
    UNION ALL
    SELECT 'growth:revenue', substr(NEW.released_at, 1, 10), 1, COALESCE(NEW.commission_minor, 0)
     WHERE NEW.status = 'released' AND NEW.released_at IS NOT NULL;
END;

CREATE TRIGGER reviews_growth_tally_insert AFTER INSERT ON reviews BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:rating:' || NEW.reviewer_role, substr(NEW.created_at, 1, 10), 1, NEW.rating
     WHERE NEW.visibility = 'published' AND NEW.reviewer_role IS NOT NULL
       AND (NEW.revealed_at IS NOT NULL OR NEW.announced_at IS NOT NULL);
END;
CREATE TRIGGER reviews_growth_tally_delete AFTER DELETE ON reviews BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:rating:' || OLD.reviewer_role, substr(OLD.created_at, 1, 10), -1, -OLD.rating
     WHERE OLD.visibility = 'published' AND OLD.reviewer_role IS NOT NULL
       AND (OLD.revealed_at IS NOT NULL OR OLD.announced_at IS NOT NULL);
END;
CREATE TRIGGER reviews_growth_tally_update AFTER UPDATE OF reviewer_role, created_at, rating, visibility, revealed_at, announced_at ON reviews
    WHEN OLD.reviewer_role IS NOT NEW.reviewer_role OR OLD.created_at IS NOT NEW.created_at
      OR OLD.rating IS NOT NEW.rating OR OLD.visibility IS NOT NEW.visibility
      OR (OLD.revealed_at IS NULL) <> (NEW.revealed_at IS NULL)
      OR (OLD.announced_at IS NULL) <> (NEW.announced_at IS NULL)
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:rating:' || OLD.reviewer_role, substr(OLD.created_at, 1, 10), -1, -OLD.rating
     WHERE OLD.visibility = 'published' AND OLD.reviewer_role IS NOT NULL
       AND (OLD.revealed_at IS NOT NULL OR OLD.announced_at IS NOT NULL);
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:rating:' || NEW.reviewer_role, substr(NEW.created_at, 1, 10), 1, NEW.rating
     WHERE NEW.visibility = 'published' AND NEW.reviewer_role IS NOT NULL
       AND (NEW.revealed_at IS NOT NULL OR NEW.announced_at IS NOT NULL);
END;

-- The parts of a day at a window's ends are counted from the rows: by day of assignment and
-- of first end; and the few projects assigned after they ended (reopened by an
-- administrator), which the two totals would count wrongly.
CREATE INDEX idx_projects_assigned_day ON projects (assigned_at) WHERE assigned_at IS NOT NULL;
CREATE INDEX idx_projects_ended_day ON projects ((CASE WHEN cancelled_at IS NULL
    OR completed_at < cancelled_at THEN completed_at ELSE cancelled_at END))
    WHERE assigned_at IS NOT NULL;
CREATE INDEX idx_projects_assigned_after_end ON projects (assigned_at)
    WHERE assigned_at > CASE WHEN cancelled_at IS NULL OR completed_at < cancelled_at
                             THEN completed_at ELSE cancelled_at END;
DROP INDEX idx_projects_open_assigned;
DROP INDEX idx_projects_assigned_completed;
DROP INDEX idx_projects_assigned_cancelled;

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'growth:project:' || project_type, substr(created_at, 1, 10), 0, COUNT(*), 0
  FROM projects GROUP BY 1, 2
UNION ALL
SELECT 'growth:completed', substr(completed_at, 1, 10), 0, COUNT(*), 0
  FROM projects WHERE status = 'completed' AND completed_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:cancelled', substr(cancelled_at, 1, 10), 0, COUNT(*), 0
  FROM projects WHERE status = 'cancelled' AND cancelled_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:assigned', substr(assigned_at, 1, 10), 0, COUNT(*), 0
  FROM projects WHERE assigned_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:ended', substr(CASE WHEN cancelled_at IS NULL OR completed_at < cancelled_at THEN completed_at ELSE cancelled_at END, 1, 10), 0, COUNT(*), 0
  FROM projects WHERE assigned_at IS NOT NULL AND CASE WHEN cancelled_at IS NULL OR completed_at < cancelled_at THEN completed_at ELSE cancelled_at END IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'under_way', 'assignments', 0, COUNT(*), 0 FROM projects WHERE assigned_at IS NOT NULL
UNION ALL
SELECT 'under_way', 'ends', 0, COUNT(*), 0 FROM projects
 WHERE assigned_at IS NOT NULL AND CASE WHEN cancelled_at IS NULL OR completed_at < cancelled_at THEN completed_at ELSE cancelled_at END IS NOT NULL
UNION ALL
SELECT 'growth:user', substr(created_at, 1, 10), 0, COUNT(*), 0 FROM users GROUP BY 2
UNION ALL
SELECT 'growth:dispute', substr(created_at, 1, 10), 0, COUNT(*), 0 FROM disputes GROUP BY 2
UNION ALL
SELECT 'growth:released', substr(released_at, 1, 10), 0, COUNT(*), SUM(amount_minor)
  FROM payments WHERE status = 'released' AND released_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:revenue', substr(released_at, 1, 10), 0, COUNT(*), SUM(COALESCE(commission_minor, 0))
  FROM payments WHERE status = 'released' AND released_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:rating:' || reviewer_role, substr(created_at, 1, 10), 0, COUNT(*), SUM(rating)
  FROM reviews WHERE visibility = 'published' AND reviewer_role IS NOT NULL
   AND (revealed_at IS NOT NULL OR announced_at IS NOT NULL) GROUP BY 1, 2;
