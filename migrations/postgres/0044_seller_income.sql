-- Each expert's released income by quarter, kept by the writes (issue #32): DAC7's summary
-- of one expert summed every payment released to them that year (42,179 for the busiest at L)
-- and its report every payment of the year. `seller_income`, per expert, key
-- `<YYYY>-Q<n> <figure>` (quarters of UTC, as `domain::dac7::quarter_bounds`):
--   gross       n = payments released, total = their amount
--   commission  total = the commission withheld
--   net         total = what the expert received (the amount less the commission when the
--               payment does not say)
-- in the tallies of 0023, so a year is twelve keys a seller.
CREATE FUNCTION seller_quarter(t TIMESTAMPTZ) RETURNS TEXT LANGUAGE sql STABLE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-"Q"Q')
$$;

CREATE FUNCTION seller_income_tally(p payments, sign BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'seller_income', seller_quarter(p.released_at) || ' ' || f.figure, p.expert_id,
           sign * f.n, sign * f.amount
      FROM (VALUES
            ('gross', 1, p.amount_minor),
            ('commission', 0, COALESCE(p.commission_minor, 0)),
            ('net', 0, COALESCE(p.expert_amount_minor,
                                p.amount_minor - COALESCE(p.commission_minor, 0)))
           ) AS f (figure, n, amount)
     WHERE p.status = 'released' AND p.expert_id IS NOT NULL AND p.released_at IS NOT NULL
$$;
CREATE FUNCTION payments_seller_income_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM seller_income_tally(OLD, -1); END IF;
    IF TG_OP <> 'DELETE' THEN PERFORM seller_income_tally(NEW, 1); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER payments_seller_income_insert_delete AFTER INSERT OR DELETE ON payments
    FOR EACH ROW EXECUTE FUNCTION payments_seller_income_sync();
CREATE TRIGGER payments_seller_income_update
    AFTER UPDATE OF status, amount_minor, commission_minor, expert_amount_minor, expert_id,
        released_at
    ON payments FOR EACH ROW
    WHEN ((OLD.status = 'released' OR NEW.status = 'released')
          AND (OLD.status, OLD.amount_minor, OLD.commission_minor, OLD.expert_amount_minor,
               OLD.expert_id, OLD.released_at)
              IS DISTINCT FROM (NEW.status, NEW.amount_minor, NEW.commission_minor,
                                NEW.expert_amount_minor, NEW.expert_id, NEW.released_at))
    EXECUTE FUNCTION payments_seller_income_sync();

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'seller_income', seller_quarter(released_at) || ' ' || f.figure, expert_id,
       SUM(f.n), SUM(f.amount)
  FROM payments,
       LATERAL (VALUES
            ('gross', 1, amount_minor),
            ('commission', 0, COALESCE(commission_minor, 0)),
            ('net', 0, COALESCE(expert_amount_minor, amount_minor - COALESCE(commission_minor, 0)))
       ) AS f (figure, n, amount)
 WHERE status = 'released' AND expert_id IS NOT NULL AND released_at IS NOT NULL
 GROUP BY 2, 3;
