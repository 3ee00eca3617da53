-- Each expert's released income by quarter, kept by the writes (issue #32): DAC7's summary
-- of one expert summed every payment released to them that year (42,179 for the busiest at L)
-- and its report every payment of the year. `seller_income`, per expert, key
-- `<YYYY>-Q<n> <figure>` (quarters of UTC, as `domain::dac7::quarter_bounds`):
--   gross       n = payments released, total = their amount
--   commission  total = the commission withheld
--   net         total = what the expert received (the amount less the commission when the
--               payment does not say)
-- in the tallies of 0023, so a year is twelve keys a seller. Times are stored in UTC, so
-- the year and month are the text's first characters.
CREATE VIEW seller_income_rows AS
SELECT p.id AS payment_id, p.expert_id,
       substr(p.released_at, 1, 4) || '-Q'
           || ((CAST(substr(p.released_at, 6, 2) AS INTEGER) + 2) / 3) || ' ' || f.figure AS key,
       CASE f.figure WHEN 'gross' THEN 1 ELSE 0 END AS n,
       CASE f.figure
           WHEN 'gross' THEN p.amount_minor
           WHEN 'commission' THEN COALESCE(p.commission_minor, 0)
           ELSE COALESCE(p.expert_amount_minor, p.amount_minor - COALESCE(p.commission_minor, 0))
       END AS amount
  FROM payments p,
       (SELECT 'gross' AS figure UNION ALL SELECT 'commission' UNION ALL SELECT 'net') f
 WHERE p.status = 'released' AND p.expert_id IS NOT NULL AND p.released_at IS NOT NULL;

CREATE TRIGGER payments_seller_income_insert AFTER INSERT ON payments
    WHEN NEW.status = 'released'
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'seller_income', key, expert_id, n, amount FROM seller_income_rows
     WHERE payment_id = NEW.id;
END;
CREATE TRIGGER payments_seller_income_delete BEFORE DELETE ON payments
    WHEN OLD.status = 'released'
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'seller_income', key, expert_id, -n, -amount FROM seller_income_rows
     WHERE payment_id = OLD.id;
END;
-- The old figures are taken off before the row changes and the new ones added after.
CREATE TRIGGER payments_seller_income_update_before
    BEFORE UPDATE OF status, amount_minor, commission_minor, expert_amount_minor, expert_id,
        released_at ON payments
    WHEN OLD.status = 'released' OR NEW.status = 'released'
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'seller_income', key, expert_id, -n, -amount FROM seller_income_rows
     WHERE payment_id = OLD.id;
END;
CREATE TRIGGER payments_seller_income_update_after
    AFTER UPDATE OF status, amount_minor, commission_minor, expert_amount_minor, expert_id,
        released_at ON payments
    WHEN OLD.status = 'released' OR NEW.status = 'released'
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'seller_income', key, expert_id, n, amount FROM seller_income_rows
     WHERE payment_id = NEW.id;
END;

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'seller_income', key, expert_id, SUM(n), SUM(amount)
  FROM seller_income_rows GROUP BY key, expert_id;
