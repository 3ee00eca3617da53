-- An expert's released income by date (issue #32): the DAC7 summary of one expert and year
-- reads its payments from this index alone (its amounts are its last columns: SQLite has
-- no INCLUDE).
CREATE INDEX idx_payments_released_by_expert
    ON payments (expert_id, released_at, amount_minor, commission_minor, expert_amount_minor)
    WHERE status = 'released';
