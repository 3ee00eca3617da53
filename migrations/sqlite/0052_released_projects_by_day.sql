-- The growth view's projects released on, from day tallies (issue #32): each released payment
-- keeps the release time of its project's released payment just before it, in the order
-- (released_at, id), and the writes count those pairs by day
-- (`growth:release_pair`, key `<day of the previous release> <day of the release>`). The
-- PostgreSQL migration of the same number says why and how a window reads them.
--
-- One writer at a time: a release sees every release before it. SQLite cannot set a row's own
-- link before it is written, so the triggers write it just after.
ALTER TABLE payments ADD COLUMN prev_released_at TEXT;

UPDATE payments SET prev_released_at = l.prev
  FROM (SELECT id, LAG(released_at) OVER (PARTITION BY project_id ORDER BY released_at, id) AS prev
          FROM payments WHERE status = 'released' AND released_at IS NOT NULL) AS l
 WHERE payments.id = l.id AND l.prev IS NOT NULL;

-- SQLite triggers have no functions to call: a view's INSTEAD OF trigger is one.
-- A payment id written to `payment_links_to_set` sets that payment's link from the releases
-- of its project before it (NULL unless it is released).
CREATE VIEW payment_links_to_set (payment_id) AS SELECT NULL WHERE 0;
CREATE TRIGGER payment_links_set INSTEAD OF INSERT ON payment_links_to_set BEGIN
    UPDATE payments SET prev_released_at =
        CASE WHEN status = 'released' AND released_at IS NOT NULL THEN
            (SELECT MAX(q.released_at) FROM payments q
              WHERE q.project_id = payments.project_id AND q.status = 'released'
                AND q.released_at IS NOT NULL
                AND (q.released_at, q.id) < (payments.released_at, payments.id))
        END
     WHERE id = NEW.payment_id;
END;
-- A place in a project's releases written to `release_places_changed` sets the link of the
-- release just after it: a release that comes in before another (a tie, a clock set back) or
-- leaves (refunded, deleted, moved) changes the next one's previous release.
CREATE VIEW release_places_changed (project_id, released_at, payment_id) AS
    SELECT NULL, NULL, NULL WHERE 0;
CREATE TRIGGER release_places_relink INSTEAD OF INSERT ON release_places_changed BEGIN
    INSERT INTO payment_links_to_set
    SELECT s.id FROM payments s
     WHERE s.project_id = NEW.project_id AND s.status = 'released'
       AND s.released_at IS NOT NULL
       AND (s.released_at, s.id) > (NEW.released_at, NEW.payment_id)
     ORDER BY s.released_at, s.id LIMIT 1;
END;

-- A payment's own link, and the link of the release after its place before (`OLD`) and after
-- (`NEW`) the write.
CREATE TRIGGER payments_release_link_insert AFTER INSERT ON payments
    WHEN NEW.status = 'released' AND NEW.released_at IS NOT NULL
BEGIN
    INSERT INTO payment_links_to_set VALUES (NEW.id);
    INSERT INTO release_places_changed VALUES (NEW.project_id, NEW.released_at, NEW.id);
END;
CREATE TRIGGER payments_release_link_update AFTER UPDATE OF status, released_at, project_id
    ON payments
    WHEN OLD.status IS NOT NEW.status OR OLD.released_at IS NOT NEW.released_at
      OR OLD.project_id IS NOT NEW.project_id
BEGIN
    INSERT INTO payment_links_to_set VALUES (NEW.id);
    INSERT INTO release_places_changed
    SELECT OLD.project_id, OLD.released_at, OLD.id
     WHERE OLD.status = 'released' AND OLD.released_at IS NOT NULL;
    INSERT INTO release_places_changed
    SELECT NEW.project_id, NEW.released_at, NEW.id
     WHERE NEW.status = 'released' AND NEW.released_at IS NOT NULL;
END;
CREATE TRIGGER payments_release_link_delete AFTER DELETE ON payments
    WHEN OLD.status = 'released' AND OLD.released_at IS NOT NULL
BEGIN
    INSERT INTO release_places_changed VALUES (OLD.project_id, OLD.released_at, OLD.id);
END;

CREATE TRIGGER payments_release_pair_tally_insert AFTER INSERT ON payments
    WHEN NEW.status = 'released' AND NEW.released_at IS NOT NULL
     AND NEW.prev_released_at IS NOT NULL
BEGIN
    INSERT INTO tally_deltas (name, key, n, total) VALUES ('growth:release_pair',
        substr(NEW.prev_released_at, 1, 10) || ' ' || substr(NEW.released_at, 1, 10), 1, 0);
END;
CREATE TRIGGER payments_release_pair_tally_delete AFTER DELETE ON payments
    WHEN OLD.status = 'released' AND OLD.released_at IS NOT NULL
     AND OLD.prev_released_at IS NOT NULL
BEGIN
    INSERT INTO tally_deltas (name, key, n, total) VALUES ('growth:release_pair',
        substr(OLD.prev_released_at, 1, 10) || ' ' || substr(OLD.released_at, 1, 10), -1, 0);
END;
CREATE TRIGGER payments_release_pair_tally_update
    AFTER UPDATE OF status, released_at, prev_released_at ON payments
    WHEN (OLD.status = 'released' OR NEW.status = 'released')
     AND (OLD.status IS NOT NEW.status OR OLD.released_at IS NOT NEW.released_at
          OR OLD.prev_released_at IS NOT NEW.prev_released_at)
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:release_pair',
           substr(OLD.prev_released_at, 1, 10) || ' ' || substr(OLD.released_at, 1, 10), -1, 0
     WHERE OLD.status = 'released' AND OLD.released_at IS NOT NULL
       AND OLD.prev_released_at IS NOT NULL;
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'growth:release_pair',
           substr(NEW.prev_released_at, 1, 10) || ' ' || substr(NEW.released_at, 1, 10), 1, 0
     WHERE NEW.status = 'released' AND NEW.released_at IS NOT NULL
       AND NEW.prev_released_at IS NOT NULL;
END;

INSERT INTO tallies (name, key, n, total)
SELECT 'growth:release_pair', substr(prev_released_at, 1, 10) || ' ' || substr(released_at, 1, 10),
       COUNT(*), 0
  FROM payments
 WHERE status = 'released' AND released_at IS NOT NULL AND prev_released_at IS NOT NULL
 GROUP BY 2;

DROP INDEX idx_payments_released_window;
CREATE INDEX idx_payments_released_window
    ON payments (released_at, commission_minor, amount_minor, prev_released_at)
    WHERE status = 'released';
CREATE INDEX idx_payments_released_after ON payments (prev_released_at, released_at)
    WHERE status = 'released' AND prev_released_at IS NOT NULL;
