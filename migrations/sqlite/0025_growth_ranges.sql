-- The growth view at scale (issue #32): each of its figures is counted over a date range
-- under an index holding every column the count reads (covering indexes), and the projects
-- under way in a window are counted as those still open plus those that ended after its
-- start, never by walking every project ever assigned.
CREATE INDEX idx_payments_released_window
    ON payments (released_at, commission_minor, amount_minor, project_id) WHERE status = 'released';
CREATE INDEX idx_projects_type_created ON projects (project_type, created_at);
CREATE INDEX idx_projects_open_assigned ON projects (assigned_at)
    WHERE assigned_at IS NOT NULL AND completed_at IS NULL AND cancelled_at IS NULL;
CREATE INDEX idx_projects_assigned_completed ON projects (completed_at, assigned_at, cancelled_at)
    WHERE assigned_at IS NOT NULL;
CREATE INDEX idx_projects_assigned_cancelled ON projects (cancelled_at, assigned_at, completed_at)
    WHERE assigned_at IS NOT NULL;
DROP INDEX idx_projects_assigned_at;
CREATE INDEX idx_reviews_published_window
    ON reviews (reviewer_role, created_at, rating, revealed_at, blind_until) WHERE visibility = 'published';

-- The twelve months of revenue and new projects from tallies (0023) keyed by calendar month
-- (UTC, `YYYY-MM`, the first seven characters of the stored time): revenue by the month of
-- release, projects by the month of creation.
DROP TRIGGER payments_tally_insert;
DROP TRIGGER payments_tally_delete;
DROP TRIGGER payments_tally_update;
CREATE TRIGGER payments_tally_insert AFTER INSERT ON payments BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'payments', NEW.status, 0, 1, NEW.amount_minor
    UNION ALL
    SELECT 'revenue', '', 0, 1, COALESCE(NEW.commission_minor, 0) WHERE NEW.status = 'released'
    UNION ALL
    SELECT 'revenue_by_month', substr(NEW.released_at, 1, 7), 0, 1, COALESCE(NEW.commission_minor, 0)
     WHERE NEW.status = 'released' AND NEW.released_at IS NOT NULL
    UNION ALL
    SELECT 'expert_earnings', '', NEW.expert_id, 1, COALESCE(NEW.expert_amount_minor, NEW.amount_minor)
     WHERE NEW.status = 'released' AND NEW.expert_id IS NOT NULL
    UNION ALL
    SELECT 'company_spend', '', NEW.company_id, 1, NEW.amount_minor
     WHERE NEW.status = 'released' AND NEW.company_id IS NOT NULL;
END;
CREATE TRIGGER payments_tally_delete AFTER DELETE ON payments BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'payments', OLD.status, 0, -1, -OLD.amount_minor
    UNION ALL
    SELECT 'revenue', '', 0, -1, -COALESCE(OLD.commission_minor, 0) WHERE OLD.status = 'released'
    UNION ALL
    SELECT 'revenue_by_month', substr(OLD.released_at, 1, 7), 0, -1, -COALESCE(OLD.commission_minor, 0)
     WHERE OLD.status = 'released' AND OLD.released_at IS NOT NULL
    UNION ALL
    SELECT 'expert_earnings', '', OLD.expert_id, -1, -COALESCE(OLD.expert_amount_minor, OLD.amount_minor)
     WHERE OLD.status = 'released' AND OLD.expert_id IS NOT NULL
    UNION ALL
    SELECT 'company_spend', '', OLD.company_id, -1, -OLD.amount_minor
     WHERE OLD.status = 'released' AND OLD.company_id IS NOT NULL;
END;
CREATE TRIGGER payments_tally_update
    AFTER UPDATE OF status, amount_minor, commission_minor, expert_amount_minor, expert_id,
                    company_id, released_at
    ON payments
    WHEN OLD.status IS NOT NEW.status OR OLD.amount_minor IS NOT NEW.amount_minor
      OR OLD.commission_minor IS NOT NEW.commission_minor
      OR OLD.expert_amount_minor IS NOT NEW.expert_amount_minor
      OR OLD.expert_id IS NOT NEW.expert_id OR OLD.company_id IS NOT NEW.company_id
      OR OLD.released_at IS NOT NEW.released_at
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'payments', OLD.status, 0, -1, -OLD.amount_minor
    UNION ALL
    SELECT 'revenue', '', 0, -1, -COALESCE(OLD.commission_minor, 0) WHERE OLD.status = 'released'
    UNION ALL
    SELECT 'revenue_by_month', substr(OLD.released_at, 1, 7), 0, -1, -COALESCE(OLD.commission_minor, 0)
     WHERE OLD.status = 'released' AND OLD.released_at IS NOT NULL
    UNION ALL
    SELECT 'expert_earnings', '', OLD.expert_id, -1, -COALESCE(OLD.expert_amount_minor, OLD.amount_minor)
     WHERE OLD.status = 'released' AND OLD.expert_id IS NOT NULL
    UNION ALL
    SELECT 'company_spend', '', OLD.company_id, -1, -OLD.amount_minor
     WHERE OLD.status = 'released' AND OLD.company_id IS NOT NULL
    UNION ALL
    SELECT 'payments', NEW.status, 0, 1, NEW.amount_minor
    UNION ALL
    SELECT 'revenue', '', 0, 1, COALESCE(NEW.commission_minor, 0) WHERE NEW.status = 'released'
    UNION ALL
    SELECT 'revenue_by_month', substr(NEW.released_at, 1, 7), 0, 1, COALESCE(NEW.commission_minor, 0)
     WHERE NEW.status = 'released' AND NEW.released_at IS NOT NULL
    UNION ALL
    SELECT 'expert_earnings', '', NEW.expert_id, 1, COALESCE(NEW.expert_amount_minor, NEW.amount_minor)
     WHERE NEW.status = 'released' AND NEW.expert_id IS NOT NULL
    UNION ALL
    SELECT 'company_spend', '', NEW.company_id, 1, NEW.amount_minor
     WHERE NEW.status = 'released' AND NEW.company_id IS NOT NULL;
END;

CREATE TRIGGER projects_month_tally_insert AFTER INSERT ON projects BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
        VALUES ('projects_by_month', substr(NEW.created_at, 1, 7), 1, 0);
END;
CREATE TRIGGER projects_month_tally_delete AFTER DELETE ON projects BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
        VALUES ('projects_by_month', substr(OLD.created_at, 1, 7), -1, 0);
END;
CREATE TRIGGER projects_month_tally_update AFTER UPDATE OF created_at ON projects
    WHEN OLD.created_at IS NOT NEW.created_at
BEGIN
    INSERT INTO tally_deltas (name, key, n, total) VALUES
        ('projects_by_month', substr(OLD.created_at, 1, 7), -1, 0),
        ('projects_by_month', substr(NEW.created_at, 1, 7), 1, 0);
END;

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'revenue_by_month', substr(released_at, 1, 7), 0, COUNT(*), SUM(COALESCE(commission_minor, 0))
  FROM payments WHERE status = 'released' AND released_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'projects_by_month', substr(created_at, 1, 7), 0, COUNT(*), 0 FROM projects GROUP BY 2;
