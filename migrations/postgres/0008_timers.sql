-- Timed transitions (issue 20): the deadlines the timer job fires, kept beside what they
-- concern so the parties see them, each found by a partial index of what is still waiting.

-- A submitted delivery is approved by the service at `auto_approve_at`; the company is
-- reminded at `remind_at` (half the window, then its last fourteenth), `reminders_sent` so far.
ALTER TABLE deliveries ADD COLUMN auto_approve_at TIMESTAMPTZ;
ALTER TABLE deliveries ADD COLUMN remind_at TIMESTAMPTZ;
ALTER TABLE deliveries ADD COLUMN reminders_sent BIGINT NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN auto_approved BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX idx_deliveries_auto_approve ON deliveries (auto_approve_at) WHERE status = 'submitted';
CREATE INDEX idx_deliveries_remind ON deliveries (remind_at) WHERE status = 'submitted';

-- A dispute raised by the expert waits for the company's reply until `response_due_at`, then
-- is escalated (`escalated_at`) to the administrators.
ALTER TABLE disputes ADD COLUMN response_due_at TIMESTAMPTZ;
ALTER TABLE disputes ADD COLUMN escalated_at TIMESTAMPTZ;
CREATE INDEX idx_disputes_response_due ON disputes (response_due_at)
    WHERE status = 'open' AND escalated_at IS NULL;

-- A milestone `awaiting_payment` since `awaiting_payment_at` reminds the company at
-- `funding_due_at` (once: `funding_reminded_at`).
ALTER TABLE milestones ADD COLUMN awaiting_payment_at TIMESTAMPTZ;
ALTER TABLE milestones ADD COLUMN funding_due_at TIMESTAMPTZ;
ALTER TABLE milestones ADD COLUMN funding_reminded_at TIMESTAMPTZ;
CREATE INDEX idx_milestones_funding_due ON milestones (funding_due_at)
    WHERE status = 'awaiting_payment' AND funding_reminded_at IS NULL;
