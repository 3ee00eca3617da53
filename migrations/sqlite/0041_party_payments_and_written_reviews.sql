-- A user's payments and written reviews at scale (issue #32).
--
-- The payment history of a company or an expert counted every payment of the party for its
-- total (123,685 index entries for the busiest expert at L, 20 ms) and sorted them by id for
-- the page. `payments_by_party`, per user: `company:<status>` and `expert:<status>`, kept by
-- the writes in the tallies of 0023; and an index per party in the page's order, which
-- serves every other lookup by party too. An expert's DAC7 year reads the expert's released
-- payments of the year from an index holding what it sums (it filtered all of them by date).
--
-- The reviews a user wrote were read newest first through the reviews' date index, filtered
-- by author; they now have their own index in that order, as the received side has (0035).
CREATE TRIGGER payments_party_tally_insert AFTER INSERT ON payments BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'payments_by_party', 'company:' || NEW.status, NEW.company_id, 1, 0
     WHERE NEW.company_id IS NOT NULL
    UNION ALL
    SELECT 'payments_by_party', 'expert:' || NEW.status, NEW.expert_id, 1, 0
     WHERE NEW.expert_id IS NOT NULL;
END;
CREATE TRIGGER payments_party_tally_delete AFTER DELETE ON payments BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'payments_by_party', 'company:' || OLD.status, OLD.company_id, -1, 0
     WHERE OLD.company_id IS NOT NULL
    UNION ALL
    SELECT 'payments_by_party', 'expert:' || OLD.status, OLD.expert_id, -1, 0
     WHERE OLD.expert_id IS NOT NULL;
END;
CREATE TRIGGER payments_party_tally_update AFTER UPDATE OF status, company_id, expert_id ON payments
    WHEN OLD.status IS NOT NEW.status OR OLD.company_id IS NOT NEW.company_id
      OR OLD.expert_id IS NOT NEW.expert_id
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'payments_by_party', 'company:' || OLD.status, OLD.company_id, -1, 0
     WHERE OLD.company_id IS NOT NULL
    UNION ALL
    SELECT 'payments_by_party', 'expert:' || OLD.status, OLD.expert_id, -1, 0
     WHERE OLD.expert_id IS NOT NULL;
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'payments_by_party', 'company:' || NEW.status, NEW.company_id, 1, 0
     WHERE NEW.company_id IS NOT NULL
    UNION ALL
    SELECT 'payments_by_party', 'expert:' || NEW.status, NEW.expert_id, 1, 0
     WHERE NEW.expert_id IS NOT NULL;
END;

CREATE INDEX idx_payments_company_newest ON payments (company_id, id);
CREATE INDEX idx_payments_expert_newest ON payments (expert_id, id);
DROP INDEX idx_payments_company;
DROP INDEX idx_payments_expert;
CREATE INDEX idx_payments_expert_released ON payments (expert_id, released_at, amount_minor, commission_minor)
    WHERE status = 'released';
CREATE INDEX idx_reviews_written ON reviews (reviewer_id, created_at, id);
DROP INDEX idx_reviews_reviewer;

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'payments_by_party', 'company:' || status, company_id, COUNT(*), 0
  FROM payments WHERE company_id IS NOT NULL GROUP BY status, company_id
UNION ALL
SELECT 'payments_by_party', 'expert:' || status, expert_id, COUNT(*), 0
  FROM payments WHERE expert_id IS NOT NULL GROUP BY status, expert_id;
