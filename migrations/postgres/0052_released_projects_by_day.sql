-- The growth view's projects released on, from day tallies (issue #32). A window's average
-- project value is what was released in it over the projects it was released on, and those
-- were `COUNT(DISTINCT project_id)` over the window's releases: a read that grew with them
-- (2.3 ms for 30 days and 9.6 ms for a year at M, ten times that at L), where every other
-- figure of the view reads day tallies (0040). A sum of days would count a project twice.
--
-- So each released payment keeps the release time of its project's released payment just
-- before it, in the order (released_at, id): `prev_released_at`, NULL for the first. A project
-- released on in a window [a, b) has exactly one release there whose previous one is before a
-- (or none): the projects released on are the window's releases less those whose previous
-- release is at or after a. The writes count those pairs by day, as
--   growth:release_pair   key `<day of the previous release> <day of the release>`
-- so a window reads the pairs inside its whole days from the tallies, and rows only for the
-- parts of a day at its ends (`store::platform_metrics::window`).
--
-- The link is kept by the triggers below, whatever writes the payment: a release takes its
-- previous one, and the release after a payment that comes in before it or leaves (refunded,
-- deleted, moved) takes its new previous one. A project's releases are serialised by the lock
-- its workflows take (`LockScope::Project`), taken here too, so two releases of one project
-- committing at once cannot both find no previous release.
ALTER TABLE payments ADD COLUMN prev_released_at TIMESTAMPTZ;

UPDATE payments p SET prev_released_at = l.prev
  FROM (SELECT id, LAG(released_at) OVER (PARTITION BY project_id ORDER BY released_at, id) AS prev
          FROM payments WHERE status = 'released' AND released_at IS NOT NULL) l
 WHERE p.id = l.id AND l.prev IS NOT NULL;

-- `store::Tx::lock(LockScope::Project, project)`: the same advisory lock, re-entrant within
-- the transaction that already holds it.
CREATE FUNCTION lock_project_releases(project BIGINT) RETURNS void LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(1, (project % 2147483647)::int4)
$$;

-- A payment's own link, before it is written: each statement after the lock sees every
-- release committed before it.
CREATE FUNCTION payments_release_link() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'released' AND NEW.released_at IS NOT NULL THEN
        PERFORM lock_project_releases(NEW.project_id);
        SELECT MAX(released_at) INTO NEW.prev_released_at FROM payments
         WHERE project_id = NEW.project_id AND status = 'released' AND released_at IS NOT NULL
           AND id <> NEW.id AND (released_at, id) < (NEW.released_at, NEW.id);
    ELSE
        NEW.prev_released_at := NULL;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER payments_release_link_insert BEFORE INSERT ON payments
    FOR EACH ROW EXECUTE FUNCTION payments_release_link();
CREATE TRIGGER payments_release_link_update BEFORE UPDATE OF status, released_at, project_id
    ON payments FOR EACH ROW
    WHEN ((OLD.status, OLD.released_at, OLD.project_id)
          IS DISTINCT FROM (NEW.status, NEW.released_at, NEW.project_id))
    EXECUTE FUNCTION payments_release_link();

-- The release of `project` just after `(at, payment)` takes its previous release anew.
CREATE FUNCTION relink_release_after(project BIGINT, at TIMESTAMPTZ, payment BIGINT)
    RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    next_id BIGINT;
    next_at TIMESTAMPTZ;
    prev    TIMESTAMPTZ;
BEGIN
    SELECT id, released_at INTO next_id, next_at FROM payments
     WHERE project_id = project AND status = 'released' AND released_at IS NOT NULL
       AND (released_at, id) > (at, payment)
     ORDER BY released_at, id LIMIT 1;
    IF next_id IS NULL THEN
        RETURN;
    END IF;
    SELECT MAX(released_at) INTO prev FROM payments
     WHERE project_id = project AND status = 'released' AND released_at IS NOT NULL
       AND (released_at, id) < (next_at, next_id);
    UPDATE payments SET prev_released_at = prev
     WHERE id = next_id AND prev_released_at IS DISTINCT FROM prev;
END $$;

-- After a release comes in (before another: a tie, a clock set back) or leaves, the one
-- after its place takes its link anew; a release appended last has none after it.
CREATE FUNCTION payments_release_relink() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.status = 'released' AND OLD.released_at IS NOT NULL THEN
        PERFORM lock_project_releases(OLD.project_id);
        PERFORM relink_release_after(OLD.project_id, OLD.released_at, OLD.id);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.status = 'released' AND NEW.released_at IS NOT NULL THEN
        PERFORM relink_release_after(NEW.project_id, NEW.released_at, NEW.id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER payments_release_relink_insert_delete AFTER INSERT OR DELETE ON payments
    FOR EACH ROW EXECUTE FUNCTION payments_release_relink();
CREATE TRIGGER payments_release_relink_update AFTER UPDATE OF status, released_at, project_id
    ON payments FOR EACH ROW
    WHEN ((OLD.status, OLD.released_at, OLD.project_id)
          IS DISTINCT FROM (NEW.status, NEW.released_at, NEW.project_id))
    EXECUTE FUNCTION payments_release_relink();

CREATE FUNCTION payment_release_pair_tally(p payments, sign BIGINT) RETURNS void
    LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:release_pair',
           growth_day(p.prev_released_at) || ' ' || growth_day(p.released_at), sign, 0
     WHERE p.status = 'released' AND p.released_at IS NOT NULL
       AND p.prev_released_at IS NOT NULL;
$$;
CREATE FUNCTION payments_release_pair_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM payment_release_pair_tally(OLD, -1); END IF;
    IF TG_OP <> 'DELETE' THEN PERFORM payment_release_pair_tally(NEW, 1); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER payments_release_pair_tally_insert_delete AFTER INSERT OR DELETE ON payments
    FOR EACH ROW EXECUTE FUNCTION payments_release_pair_tally_sync();
CREATE TRIGGER payments_release_pair_tally_update
    AFTER UPDATE OF status, released_at, prev_released_at ON payments FOR EACH ROW
    WHEN ((OLD.status = 'released' OR NEW.status = 'released')
          AND (OLD.status, OLD.released_at, OLD.prev_released_at)
              IS DISTINCT FROM (NEW.status, NEW.released_at, NEW.prev_released_at))
    EXECUTE FUNCTION payments_release_pair_tally_sync();

INSERT INTO tallies (name, key, n, total)
SELECT 'growth:release_pair', growth_day(prev_released_at) || ' ' || growth_day(released_at),
       COUNT(*), 0
  FROM payments
 WHERE status = 'released' AND released_at IS NOT NULL AND prev_released_at IS NOT NULL
 GROUP BY 2;

-- The window's ends read the link beside the release; the releases of a whole day whose
-- previous release is in the part of a day before it are found by the link.
DROP INDEX idx_payments_released_window;
CREATE INDEX idx_payments_released_window ON payments (released_at)
    INCLUDE (commission_minor, amount_minor, prev_released_at) WHERE status = 'released';
CREATE INDEX idx_payments_released_after ON payments (prev_released_at) INCLUDE (released_at)
    WHERE status = 'released' AND prev_released_at IS NOT NULL;
