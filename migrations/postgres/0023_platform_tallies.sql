-- The administrators' overview at scale (issue #32): its figures are kept by the writes that
-- change them, so a request reads a few rows instead of aggregating every payment, user,
-- profile and review.
--
-- Triggers append signed deltas to `tally_deltas`; a job (`tally_fold`) moves them into
-- `tallies` in one statement, and a read adds the two. An INSERT never waits for another
-- transaction, so the escrow path gets no hot row and no lock order to keep, and a read (one
-- statement, one snapshot) sees each delta exactly once, folded or not.
CREATE TABLE tallies (
    name      TEXT   NOT NULL,             -- what is counted (store::tallies::Tally)
    key       TEXT   NOT NULL DEFAULT '',  -- a status, role, ... ('' for per-user tallies)
    user_id   BIGINT NOT NULL DEFAULT 0,   -- the user of a per-user tally (0 otherwise)
    n         BIGINT NOT NULL DEFAULT 0,
    total     BIGINT NOT NULL DEFAULT 0,
    -- The mean ×100, rounded as ROUND(AVG(x) * 100) rounds: the ratings' order.
    mean_x100 BIGINT GENERATED ALWAYS AS
        (CASE WHEN n > 0 THEN CAST(ROUND(total * 100.0 / n) AS BIGINT) END) STORED,
    PRIMARY KEY (name, key, user_id)
);
CREATE INDEX idx_tallies_by_total ON tallies (name, total DESC, user_id) WHERE n > 0;
CREATE INDEX idx_tallies_by_mean ON tallies (name, mean_x100 DESC, n DESC, user_id) WHERE n > 0;

CREATE TABLE tally_deltas (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name    TEXT   NOT NULL,
    key     TEXT   NOT NULL DEFAULT '',
    user_id BIGINT NOT NULL DEFAULT 0,
    n       BIGINT NOT NULL,
    total   BIGINT NOT NULL
);
CREATE INDEX idx_tally_deltas_name ON tally_deltas (name, key, user_id);

-- Payments: amount and count by status; commission, each expert's earnings and each
-- company's spend of released payments.
CREATE FUNCTION payment_tally(p payments, sign BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'payments', p.status, 0, sign, sign * p.amount_minor
    UNION ALL
    SELECT 'revenue', '', 0, sign, sign * COALESCE(p.commission_minor, 0)
     WHERE p.status = 'released'
    UNION ALL
    SELECT 'expert_earnings', '', p.expert_id, sign,
           sign * COALESCE(p.expert_amount_minor, p.amount_minor)
     WHERE p.status = 'released' AND p.expert_id IS NOT NULL
    UNION ALL
    SELECT 'company_spend', '', p.company_id, sign, sign * p.amount_minor
     WHERE p.status = 'released' AND p.company_id IS NOT NULL;
$$;
CREATE FUNCTION payments_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM payment_tally(OLD, -1); END IF;
    IF TG_OP <> 'DELETE' THEN PERFORM payment_tally(NEW, 1); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER payments_tally_insert_delete AFTER INSERT OR DELETE ON payments
    FOR EACH ROW EXECUTE FUNCTION payments_tally_sync();
CREATE TRIGGER payments_tally_update
    AFTER UPDATE OF status, amount_minor, commission_minor, expert_amount_minor, expert_id, company_id
    ON payments FOR EACH ROW
    WHEN ((OLD.status, OLD.amount_minor, OLD.commission_minor, OLD.expert_amount_minor,
           OLD.expert_id, OLD.company_id)
          IS DISTINCT FROM (NEW.status, NEW.amount_minor, NEW.commission_minor,
           NEW.expert_amount_minor, NEW.expert_id, NEW.company_id))
    EXECUTE FUNCTION payments_tally_sync();

-- Users by role and profiles by type and verification, of users not deleted. A role or
-- profile change locks its user's row first, so a deletion racing it either waits for it
-- (and then sees the role) or is seen by it.
CREATE FUNCTION user_roles_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r user_roles;
BEGIN
    IF TG_OP = 'INSERT' THEN r := NEW; ELSE r := OLD; END IF;
    PERFORM 1 FROM users WHERE id = r.user_id AND deleted_at IS NULL FOR NO KEY UPDATE;
    IF FOUND THEN
        INSERT INTO tally_deltas (name, key, n, total)
            VALUES ('users_by_role', r.role, CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE -1 END, 0);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER user_roles_tally AFTER INSERT OR DELETE ON user_roles
    FOR EACH ROW EXECUTE FUNCTION user_roles_tally_sync();

CREATE FUNCTION profiles_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM users WHERE id = NEW.user_id AND deleted_at IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN RETURN NULL; END IF;
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO tally_deltas (name, key, n, total) VALUES
            ('profiles_by_verification', OLD.profile_type || ':' || OLD.verification_status, -1, 0);
    END IF;
    INSERT INTO tally_deltas (name, key, n, total) VALUES
        ('profiles_by_verification', NEW.profile_type || ':' || NEW.verification_status, 1, 0);
    RETURN NULL;
END $$;
CREATE TRIGGER profiles_tally_insert AFTER INSERT ON profiles
    FOR EACH ROW EXECUTE FUNCTION profiles_tally_sync();
CREATE TRIGGER profiles_tally_update AFTER UPDATE OF profile_type, verification_status ON profiles
    FOR EACH ROW
    WHEN ((OLD.profile_type, OLD.verification_status)
          IS DISTINCT FROM (NEW.profile_type, NEW.verification_status))
    EXECUTE FUNCTION profiles_tally_sync();

CREATE FUNCTION users_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sign BIGINT := CASE WHEN NEW.deleted_at IS NULL THEN 1 ELSE -1 END;
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
        SELECT 'users_by_role', role, sign, 0 FROM user_roles WHERE user_id = NEW.id;
    INSERT INTO tally_deltas (name, key, n, total)
        SELECT 'profiles_by_verification', profile_type || ':' || verification_status, sign, 0
          FROM profiles WHERE user_id = NEW.id;
    RETURN NULL;
END $$;
CREATE TRIGGER users_tally_deleted AFTER UPDATE OF deleted_at ON users
    FOR EACH ROW WHEN ((OLD.deleted_at IS NULL) <> (NEW.deleted_at IS NULL))
    EXECUTE FUNCTION users_tally_sync();

-- Experts' ratings from companies, published and revealed: revealed early, or announced by
-- the reveal job once the blind window passed. A review past its window that the job has not
-- announced yet is added by the read (`idx_reviews_unannounced` finds those few).
CREATE FUNCTION review_tally(r reviews, sign BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, user_id, n, total)
    SELECT 'expert_ratings', r.reviewee_id, sign, sign * r.rating
     WHERE r.reviewer_role = 'empresa' AND r.visibility = 'published'
       AND r.reviewee_id IS NOT NULL
       AND (r.revealed_at IS NOT NULL OR r.announced_at IS NOT NULL);
$$;
CREATE FUNCTION reviews_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM review_tally(OLD, -1); END IF;
    IF TG_OP <> 'DELETE' THEN PERFORM review_tally(NEW, 1); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER reviews_tally_insert_delete AFTER INSERT OR DELETE ON reviews
    FOR EACH ROW EXECUTE FUNCTION reviews_tally_sync();
CREATE TRIGGER reviews_tally_update
    AFTER UPDATE OF reviewee_id, rating, visibility, reviewer_role, revealed_at, announced_at
    ON reviews FOR EACH ROW
    WHEN ((OLD.reviewee_id, OLD.rating, OLD.visibility, OLD.reviewer_role,
           OLD.revealed_at IS NULL, OLD.announced_at IS NULL)
          IS DISTINCT FROM (NEW.reviewee_id, NEW.rating, NEW.visibility, NEW.reviewer_role,
           NEW.revealed_at IS NULL, NEW.announced_at IS NULL))
    EXECUTE FUNCTION reviews_tally_sync();

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
