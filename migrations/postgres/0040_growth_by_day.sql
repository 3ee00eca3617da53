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

-- A project's first end, completion or cancellation. The indexes below and the reads spell it
-- out as SQLite must (`store::platform_metrics::PROJECT_END`), so one query text serves both.
CREATE FUNCTION project_end(completed_at TIMESTAMPTZ, cancelled_at TIMESTAMPTZ)
    RETURNS TIMESTAMPTZ LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN cancelled_at IS NULL OR completed_at < cancelled_at
                THEN completed_at ELSE cancelled_at END
$$;

CREATE FUNCTION growth_day(t TIMESTAMPTZ) RETURNS TEXT LANGUAGE sql STABLE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD')
$$;

CREATE FUNCTION project_growth_tally(p projects, sign BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:project:' || p.project_type, growth_day(p.created_at), sign, 0
    UNION ALL
    SELECT 'growth:completed', growth_day(p.completed_at), sign, 0
     WHERE p.status = 'completed' AND p.completed_at IS NOT NULL
    UNION ALL
    SELECT 'growth:cancelled', growth_day(p.cancelled_at), sign, 0
     WHERE p.status = 'cancelled' AND p.cancelled_at IS NOT NULL
    UNION ALL
    SELECT 'growth:assigned', growth_day(p.assigned_at), sign, 0 WHERE p.assigned_at IS NOT NULL
    UNION ALL
    SELECT 'under_way', 'assignments', sign, 0 WHERE p.assigned_at IS NOT NULL
    UNION ALL
    SELECT 'growth:ended', growth_day(project_end(p.completed_at, p.cancelled_at)), sign, 0
     WHERE p.assigned_at IS NOT NULL AND project_end(p.completed_at, p.cancelled_at) IS NOT NULL
    UNION ALL
    SELECT 'under_way', 'ends', sign, 0
     WHERE p.assigned_at IS NOT NULL AND project_end(p.completed_at, p.cancelled_at) IS NOT NULL;
$$;
CREATE FUNCTION projects_growth_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM project_growth_tally(OLD, -1); END IF;
    IF TG_OP <> 'DELETE' THEN PERFORM project_growth_tally(NEW, 1); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER projects_growth_tally_insert_delete AFTER INSERT OR DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION projects_growth_tally_sync();
CREATE TRIGGER projects_growth_tally_update
    AFTER UPDATE OF project_type, created_at, status, completed_at, cancelled_at, assigned_at
    ON projects FOR EACH ROW
    WHEN ((OLD.project_type, OLD.created_at, OLD.status, OLD.completed_at, OLD.cancelled_at,
           OLD.assigned_at)
          IS DISTINCT FROM (NEW.project_type, NEW.created_at, NEW.status, NEW.completed_at,
           NEW.cancelled_at, NEW.assigned_at))
    EXECUTE FUNCTION projects_growth_tally_sync();

CREATE FUNCTION users_growth_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO tally_deltas (name, key, n, total)
            VALUES ('growth:user', growth_day(OLD.created_at), -1, 0);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO tally_deltas (name, key, n, total)
            VALUES ('growth:user', growth_day(NEW.created_at), 1, 0);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER users_growth_tally_insert_delete AFTER INSERT OR DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION users_growth_tally_sync();
CREATE TRIGGER users_growth_tally_update AFTER UPDATE OF created_at ON users FOR EACH ROW
    WHEN (OLD.created_at IS DISTINCT FROM NEW.created_at)
    EXECUTE FUNCTION users_growth_tally_sync();

CREATE FUNCTION disputes_growth_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO tally_deltas (name, key, n, total)
            VALUES ('growth:dispute', growth_day(OLD.created_at), -1, 0);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO tally_deltas (name, key, n, total)
            VALUES ('growth:dispute', growth_day(NEW.created_at), 1, 0);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER disputes_growth_tally_insert_delete AFTER INSERT OR DELETE ON disputes
    FOR EACH ROW EXECUTE FUNCTION disputes_growth_tally_sync();
CREATE TRIGGER disputes_growth_tally_update AFTER UPDATE OF created_at ON disputes FOR EACH ROW
    WHEN (OLD.created_at IS DISTINCT FROM NEW.created_at)
    EXECUTE FUNCTION disputes_growth_tally_sync();

CREATE FUNCTION payment_growth_tally(p payments, sign BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:released', growth_day(p.released_at), sign, sign * p.amount_minor
     WHERE p.status = 'released' AND p.released_at IS NOT NULL
    UNION ALL
    SELECT 'growth:revenue', growth_day(p.released_at), sign,
           sign * COALESCE(p.commission_minor, 0)
     WHERE p.status = 'released' AND p.released_at IS NOT NULL;
$$;
CREATE FUNCTION payments_growth_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM payment_growth_tally(OLD, -1); END IF;
    IF TG_OP <> 'DELETE' THEN PERFORM payment_growth_tally(NEW, 1); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER payments_growth_tally_insert_delete AFTER INSERT OR DELETE ON payments
    FOR EACH ROW EXECUTE FUNCTION payments_growth_tally_sync();
CREATE TRIGGER payments_growth_tally_update
    AFTER UPDATE OF status, amount_minor, commission_minor, released_at ON payments FOR EACH ROW
    WHEN ((OLD.status = 'released' OR NEW.status = 'released')
          AND (OLD.status, OLD.amount_minor, OLD.commission_minor, OLD.released_at)
              IS DISTINCT FROM (NEW.status, NEW.amount_minor, NEW.commission_minor,
                                NEW.released_at))
    EXECUTE FUNCTION payments_growth_tally_sync();

CREATE FUNCTION review_growth_tally(r reviews, sign BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:rating:' || r.reviewer_role, growth_day(r.created_at), sign, sign * r.rating
     WHERE r.visibility = 'published' AND r.reviewer_role IS NOT NULL
       AND (r.revealed_at IS NOT NULL OR r.announced_at IS NOT NULL);
$$;
CREATE FUNCTION reviews_growth_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM review_growth_tally(OLD, -1); END IF;
    IF TG_OP <> 'DELETE' THEN PERFORM review_growth_tally(NEW, 1); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER reviews_growth_tally_insert_delete AFTER INSERT OR DELETE ON reviews
    FOR EACH ROW EXECUTE FUNCTION reviews_growth_tally_sync();
CREATE TRIGGER reviews_growth_tally_update
    AFTER UPDATE OF reviewer_role, created_at, rating, visibility, revealed_at, announced_at
    ON reviews FOR EACH ROW
    WHEN ((OLD.reviewer_role, OLD.created_at, OLD.rating, OLD.visibility)
          IS DISTINCT FROM (NEW.reviewer_role, NEW.created_at, NEW.rating, NEW.visibility)
          OR (OLD.revealed_at IS NULL) <> (NEW.revealed_at IS NULL)
          OR (OLD.announced_at IS NULL) <> (NEW.announced_at IS NULL))
    EXECUTE FUNCTION reviews_growth_tally_sync();

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
SELECT 'growth:project:' || project_type, growth_day(created_at), 0, COUNT(*), 0
  FROM projects GROUP BY 1, 2
UNION ALL
SELECT 'growth:completed', growth_day(completed_at), 0, COUNT(*), 0
  FROM projects WHERE status = 'completed' AND completed_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:cancelled', growth_day(cancelled_at), 0, COUNT(*), 0
  FROM projects WHERE status = 'cancelled' AND cancelled_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:assigned', growth_day(assigned_at), 0, COUNT(*), 0
  FROM projects WHERE assigned_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:ended', growth_day(project_end(completed_at, cancelled_at)), 0, COUNT(*), 0
  FROM projects WHERE assigned_at IS NOT NULL
   AND project_end(completed_at, cancelled_at) IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'under_way', 'assignments', 0, COUNT(*), 0 FROM projects WHERE assigned_at IS NOT NULL
UNION ALL
SELECT 'under_way', 'ends', 0, COUNT(*), 0 FROM projects
 WHERE assigned_at IS NOT NULL AND project_end(completed_at, cancelled_at) IS NOT NULL
UNION ALL
SELECT 'growth:user', growth_day(created_at), 0, COUNT(*), 0 FROM users GROUP BY 2
UNION ALL
SELECT 'growth:dispute', growth_day(created_at), 0, COUNT(*), 0 FROM disputes GROUP BY 2
UNION ALL
SELECT 'growth:released', growth_day(released_at), 0, COUNT(*), SUM(amount_minor)
  FROM payments WHERE status = 'released' AND released_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:revenue', growth_day(released_at), 0, COUNT(*), SUM(COALESCE(commission_minor, 0))
  FROM payments WHERE status = 'released' AND released_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:rating:' || reviewer_role, growth_day(created_at), 0, COUNT(*), SUM(rating)
  FROM reviews WHERE visibility = 'published' AND reviewer_role IS NOT NULL
   AND (revealed_at IS NOT NULL OR announced_at IS NOT NULL) GROUP BY 1, 2;
