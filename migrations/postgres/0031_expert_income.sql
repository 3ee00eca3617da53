-- An expert's released income by date (issue #32): the DAC7 summary of one expert and year
-- reads its payments from this index alone (the hot expert's year at M: 142 ms through the
-- whole year's payments, 0.7 ms here).
CREATE INDEX idx_payments_released_by_expert ON payments (expert_id, released_at)
    INCLUDE (amount_minor, commission_minor, expert_amount_minor)
    WHERE status = 'released';
