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
CREATE FUNCTION payment_party_tally(p payments, sign BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'payments_by_party', 'company:' || p.status, p.company_id, sign, 0
     WHERE p.company_id IS NOT NULL
    UNION ALL
    SELECT 'payments_by_party', 'expert:' || p.status, p.expert_id, sign, 0
     WHERE p.expert_id IS NOT NULL
$$;
CREATE FUNCTION payments_party_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM payment_party_tally(OLD, -1); END IF;
    IF TG_OP <> 'DELETE' THEN PERFORM payment_party_tally(NEW, 1); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER payments_party_tally_insert_delete AFTER INSERT OR DELETE ON payments
    FOR EACH ROW EXECUTE FUNCTION payments_party_tally_sync();
CREATE TRIGGER payments_party_tally_update AFTER UPDATE OF status, company_id, expert_id
    ON payments FOR EACH ROW
    WHEN ((OLD.status, OLD.company_id, OLD.expert_id)
          IS DISTINCT FROM (NEW.status, NEW.company_id, NEW.expert_id))
    EXECUTE FUNCTION payments_party_tally_sync();

CREATE INDEX idx_payments_company_newest ON payments (company_id, id);
CREATE INDEX idx_payments_expert_newest ON payments (expert_id, id);
DROP INDEX idx_payments_company;
DROP INDEX idx_payments_expert;
CREATE INDEX idx_payments_expert_released ON payments (expert_id, released_at)
    INCLUDE (amount_minor, commission_minor) WHERE status = 'released';
CREATE INDEX idx_reviews_written ON reviews (reviewer_id, created_at, id);
DROP INDEX idx_reviews_reviewer;

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'payments_by_party', 'company:' || status, company_id, COUNT(*), 0
  FROM payments WHERE company_id IS NOT NULL GROUP BY status, company_id
UNION ALL
SELECT 'payments_by_party', 'expert:' || status, expert_id, COUNT(*), 0
  FROM payments WHERE expert_id IS NOT NULL GROUP BY status, expert_id;
