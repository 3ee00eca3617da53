-- The growth view at scale (issue #32): each of its figures is counted over a date range
-- under an index holding every column the count reads (index-only scans), and the projects
-- under way in a window are counted as those still open plus those that ended after its
-- start, never by walking every project ever assigned.
CREATE INDEX idx_payments_released_window ON payments (released_at)
    INCLUDE (commission_minor, amount_minor, project_id) WHERE status = 'released';
CREATE INDEX idx_projects_type_created ON projects (project_type, created_at);
CREATE INDEX idx_projects_open_assigned ON projects (assigned_at)
    WHERE assigned_at IS NOT NULL AND completed_at IS NULL AND cancelled_at IS NULL;
CREATE INDEX idx_projects_assigned_completed ON projects (completed_at)
    INCLUDE (assigned_at, cancelled_at) WHERE assigned_at IS NOT NULL;
CREATE INDEX idx_projects_assigned_cancelled ON projects (cancelled_at)
    INCLUDE (assigned_at, completed_at) WHERE assigned_at IS NOT NULL;
DROP INDEX idx_projects_assigned_at;
CREATE INDEX idx_reviews_published_window ON reviews (reviewer_role, created_at)
    INCLUDE (rating, revealed_at, blind_until) WHERE visibility = 'published';

-- The twelve months of revenue and new projects from tallies (0023) keyed by calendar month
-- (UTC, `YYYY-MM`): revenue by the month of release, projects by the month of creation.
CREATE OR REPLACE FUNCTION payment_tally(p payments, sign BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'payments', p.status, 0, sign, sign * p.amount_minor
    UNION ALL
    SELECT 'revenue', '', 0, sign, sign * COALESCE(p.commission_minor, 0)
     WHERE p.status = 'released'
    UNION ALL
    SELECT 'revenue_by_month', to_char(p.released_at AT TIME ZONE 'UTC', 'YYYY-MM'), 0, sign,
           sign * COALESCE(p.commission_minor, 0)
     WHERE p.status = 'released' AND p.released_at IS NOT NULL
    UNION ALL
    SELECT 'expert_earnings', '', p.expert_id, sign,
           sign * COALESCE(p.expert_amount_minor, p.amount_minor)
     WHERE p.status = 'released' AND p.expert_id IS NOT NULL
    UNION ALL
    SELECT 'company_spend', '', p.company_id, sign, sign * p.amount_minor
     WHERE p.status = 'released' AND p.company_id IS NOT NULL;
$$;
DROP TRIGGER payments_tally_update ON payments;
CREATE TRIGGER payments_tally_update
    AFTER UPDATE OF status, amount_minor, commission_minor, expert_amount_minor, expert_id,
                    company_id, released_at
    ON payments FOR EACH ROW
    WHEN ((OLD.status, OLD.amount_minor, OLD.commission_minor, OLD.expert_amount_minor,
           OLD.expert_id, OLD.company_id, OLD.released_at)
          IS DISTINCT FROM (NEW.status, NEW.amount_minor, NEW.commission_minor,
           NEW.expert_amount_minor, NEW.expert_id, NEW.company_id, NEW.released_at))
    EXECUTE FUNCTION payments_tally_sync();

CREATE FUNCTION projects_month_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO tally_deltas (name, key, n, total) VALUES
            ('projects_by_month', to_char(OLD.created_at AT TIME ZONE 'UTC', 'YYYY-MM'), -1, 0);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO tally_deltas (name, key, n, total) VALUES
            ('projects_by_month', to_char(NEW.created_at AT TIME ZONE 'UTC', 'YYYY-MM'), 1, 0);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER projects_month_tally_insert_delete AFTER INSERT OR DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION projects_month_tally_sync();
CREATE TRIGGER projects_month_tally_update AFTER UPDATE OF created_at ON projects
    FOR EACH ROW WHEN (OLD.created_at IS DISTINCT FROM NEW.created_at)
    EXECUTE FUNCTION projects_month_tally_sync();

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'revenue_by_month', to_char(released_at AT TIME ZONE 'UTC', 'YYYY-MM'), 0, COUNT(*),
       SUM(COALESCE(commission_minor, 0))
  FROM payments WHERE status = 'released' AND released_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'projects_by_month', to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM'), 0, COUNT(*), 0
  FROM projects GROUP BY 2;
