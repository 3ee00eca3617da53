-- The administrators' overview at scale (issue #32): its figures are kept by the writes that
-- change them, so a request reads a few rows instead of aggregating every payment, user,
-- profile and review.
--
-- Triggers append signed deltas to `tally_deltas`; a job (`tally_fold`) moves them into
-- `tallies` in one transaction, and a read adds the two (the same shape as on PostgreSQL,
-- where appending keeps the escrow path free of hot rows).
CREATE TABLE tallies (
    name      TEXT    NOT NULL,             -- what is counted (store::tallies::Tally)
    key       TEXT    NOT NULL DEFAULT '',  -- a status, role, ... ('' for per-user tallies)
    user_id   INTEGER NOT NULL DEFAULT 0,   -- the user of a per-user tally (0 otherwise)
    n         INTEGER NOT NULL DEFAULT 0,
    total     INTEGER NOT NULL DEFAULT 0,
    -- The mean ×100, rounded as ROUND(AVG(x) * 100) rounds: the ratings' order.
    mean_x100 INTEGER GENERATED ALWAYS AS
        (CASE WHEN n > 0 THEN CAST(ROUND(total * 100.0 / n) AS INTEGER) END) STORED,
    PRIMARY KEY (name, key, user_id)
);
CREATE INDEX idx_tallies_by_total ON tallies (name, total DESC, user_id) WHERE n > 0;
CREATE INDEX idx_tallies_by_mean ON tallies (name, mean_x100 DESC, n DESC, user_id) WHERE n > 0;

CREATE TABLE tally_deltas (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    name    TEXT    NOT NULL,
    key     TEXT    NOT NULL DEFAULT '',
    user_id INTEGER NOT NULL DEFAULT 0,
    n       INTEGER NOT NULL,
    total   INTEGER NOT NULL
);
CREATE INDEX idx_tally_deltas_name ON tally_deltas (name, key, user_id);

-- Payments: amount and count by status; commission, each expert's earnings and each
-- company's spend of released payments.
CREATE TRIGGER payments_tally_insert AFTER INSERT ON payments BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'payments', NEW.status, 0, 1, NEW.amount_minor
    UNION ALL
    SELECT 'revenue', '', 0, 1, COALESCE(NEW.commission_minor, 0) WHERE NEW.status = 'released'
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
    SELECT 'expert_earnings', '', OLD.expert_id, -1, -COALESCE(OLD.expert_amount_minor, OLD.amount_minor)
     WHERE OLD.status = 'released' AND OLD.expert_id IS NOT NULL
    UNION ALL
    SELECT 'company_spend', '', OLD.company_id, -1, -OLD.amount_minor
     WHERE OLD.status = 'released' AND OLD.company_id IS NOT NULL;
END;
CREATE TRIGGER payments_tally_update
    AFTER UPDATE OF status, amount_minor, commission_minor, expert_amount_minor, expert_id, company_id
    ON payments
    WHEN OLD.status IS NOT NEW.status OR OLD.amount_minor IS NOT NEW.amount_minor
      OR OLD.commission_minor IS NOT NEW.commission_minor
      OR OLD.expert_amount_minor IS NOT NEW.expert_amount_minor
      OR OLD.expert_id IS NOT NEW.expert_id OR OLD.company_id IS NOT NEW.company_id
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'payments', OLD.status, 0, -1, -OLD.amount_minor
    UNION ALL
    SELECT 'revenue', '', 0, -1, -COALESCE(OLD.commission_minor, 0) WHERE OLD.status = 'released'
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
    SELECT 'expert_earnings', '', NEW.expert_id, 1, COALESCE(NEW.expert_amount_minor, NEW.amount_minor)
     WHERE NEW.status = 'released' AND NEW.expert_id IS NOT NULL
    UNION ALL
    SELECT 'company_spend', '', NEW.company_id, 1, NEW.amount_minor
     WHERE NEW.status = 'released' AND NEW.company_id IS NOT NULL;
END;

-- Users by role and profiles by type and verification, of users not deleted (one writer at
-- a time: no race to guard against here).
CREATE TRIGGER user_roles_tally_insert AFTER INSERT ON user_roles
    WHEN EXISTS (SELECT 1 FROM users WHERE id = NEW.user_id AND deleted_at IS NULL)
BEGIN
    INSERT INTO tally_deltas (name, key, n, total) VALUES ('users_by_role', NEW.role, 1, 0);
END;
CREATE TRIGGER user_roles_tally_delete AFTER DELETE ON user_roles
    WHEN EXISTS (SELECT 1 FROM users WHERE id = OLD.user_id AND deleted_at IS NULL)
BEGIN
    INSERT INTO tally_deltas (name, key, n, total) VALUES ('users_by_role', OLD.role, -1, 0);
END;
CREATE TRIGGER profiles_tally_insert AFTER INSERT ON profiles
    WHEN EXISTS (SELECT 1 FROM users WHERE id = NEW.user_id AND deleted_at IS NULL)
BEGIN
    INSERT INTO tally_deltas (name, key, n, total) VALUES
        ('profiles_by_verification', NEW.profile_type || ':' || NEW.verification_status, 1, 0);
END;
CREATE TRIGGER profiles_tally_update AFTER UPDATE OF profile_type, verification_status ON profiles
    WHEN (OLD.profile_type IS NOT NEW.profile_type
          OR OLD.verification_status IS NOT NEW.verification_status)
     AND EXISTS (SELECT 1 FROM users WHERE id = NEW.user_id AND deleted_at IS NULL)
BEGIN
    INSERT INTO tally_deltas (name, key, n, total) VALUES
        ('profiles_by_verification', OLD.profile_type || ':' || OLD.verification_status, -1, 0),
        ('profiles_by_verification', NEW.profile_type || ':' || NEW.verification_status, 1, 0);
END;
CREATE TRIGGER users_tally_deleted AFTER UPDATE OF deleted_at ON users
    WHEN (OLD.deleted_at IS NULL) <> (NEW.deleted_at IS NULL)
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
        SELECT 'users_by_role', role, CASE WHEN NEW.deleted_at IS NULL THEN 1 ELSE -1 END, 0
          FROM user_roles WHERE user_id = NEW.id;
    INSERT INTO tally_deltas (name, key, n, total)
        SELECT 'profiles_by_verification', profile_type || ':' || verification_status,
               CASE WHEN NEW.deleted_at IS NULL THEN 1 ELSE -1 END, 0
          FROM profiles WHERE user_id = NEW.id;
END;

-- Experts' ratings from companies, published and revealed: revealed early, or announced by
-- the reveal job once the blind window passed. A review past its window that the job has not
-- announced yet is added by the read (`idx_reviews_unannounced` finds those few).
CREATE TRIGGER reviews_tally_insert AFTER INSERT ON reviews
    WHEN NEW.reviewer_role = 'empresa' AND NEW.visibility = 'published'
     AND NEW.reviewee_id IS NOT NULL
     AND (NEW.revealed_at IS NOT NULL OR NEW.announced_at IS NOT NULL)
BEGIN
    INSERT INTO tally_deltas (name, user_id, n, total)
        VALUES ('expert_ratings', NEW.reviewee_id, 1, NEW.rating);
END;
CREATE TRIGGER reviews_tally_delete AFTER DELETE ON reviews
    WHEN OLD.reviewer_role = 'empresa' AND OLD.visibility = 'published'
     AND OLD.reviewee_id IS NOT NULL
     AND (OLD.revealed_at IS NOT NULL OR OLD.announced_at IS NOT NULL)
BEGIN
    INSERT INTO tally_deltas (name, user_id, n, total)
        VALUES ('expert_ratings', OLD.reviewee_id, -1, -OLD.rating);
END;
CREATE TRIGGER reviews_tally_update
    AFTER UPDATE OF reviewee_id, rating, visibility, reviewer_role, revealed_at, announced_at
    ON reviews
BEGIN
    INSERT INTO tally_deltas (name, user_id, n, total)
        SELECT 'expert_ratings', OLD.reviewee_id, -1, -OLD.rating
         WHERE OLD.reviewer_role = 'empresa' AND OLD.visibility = 'published'
           AND OLD.reviewee_id IS NOT NULL
           AND (OLD.revealed_at IS NOT NULL OR OLD.announced_at IS NOT NULL)
        UNION ALL
        SELECT 'expert_ratings', NEW.reviewee_id, 1, NEW.rating
         WHERE NEW.reviewer_role = 'empresa' AND NEW.visibility = 'published'
           AND NEW.reviewee_id IS NOT NULL
           AND (NEW.revealed_at IS NOT NULL OR NEW.announced_at IS NOT NULL);
END;

-- What is there already.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'payments', status, 0, COUNT(*), SUM(amount_minor) FROM payments GROUP BY status
UNION ALL
SELECT 'revenue', '', 0, COUNT(*), SUM(COALESCE(commission_minor, 0)) FROM payments
 WHERE status = 'released' GROUP BY status
UNION ALL
SELECT 'expert_earnings', '', expert_id, COUNT(*), SUM(COALESCE(expert_amount_minor, amount_minor))
  FROM payments WHERE status = 'released' AND expert_id IS NOT NULL GROUP BY expert_id
UNION ALL
SELECT 'company_spend', '', company_id, COUNT(*), SUM(amount_minor)
  FROM payments WHERE status = 'released' AND company_id IS NOT NULL GROUP BY company_id
UNION ALL
SELECT 'users_by_role', r.role, 0, COUNT(*), 0 FROM user_roles r JOIN users u ON u.id = r.user_id
 WHERE u.deleted_at IS NULL GROUP BY r.role
UNION ALL
SELECT 'profiles_by_verification', p.profile_type || ':' || p.verification_status, 0, COUNT(*), 0
  FROM profiles p JOIN users u ON u.id = p.user_id
 WHERE u.deleted_at IS NULL GROUP BY p.profile_type, p.verification_status
UNION ALL
SELECT 'expert_ratings', '', reviewee_id, COUNT(*), SUM(rating) FROM reviews
 WHERE reviewer_role = 'empresa' AND visibility = 'published' AND reviewee_id IS NOT NULL
   AND (revealed_at IS NOT NULL OR announced_at IS NOT NULL)
 GROUP BY reviewee_id;
