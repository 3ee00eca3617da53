-- CRM synchronisation (issue 17): the sync log gains the answer's status and an exhaustion
-- mark; inbound CRM webhooks are stored by their webhookId; the contact state the CRM reports
-- (actual tags, e-mail DND) and opportunities are kept for the status endpoint.
-- The PostgreSQL twin is migrations/postgres/0007_crm.sql.

ALTER TABLE crm_sync_log ADD COLUMN response_status INTEGER;
-- Set when the retry scheduler gave up (status stays 'failed').
ALTER TABLE crm_sync_log ADD COLUMN exhausted_at TEXT;
CREATE INDEX idx_crm_sync_log_event_type ON crm_sync_log (event_type, created_at);

CREATE TABLE crm_webhook_events (
    webhook_id      TEXT NOT NULL PRIMARY KEY,
    event_type      TEXT NOT NULL,
    location_id     TEXT,
    contact_id      TEXT,
    payload         TEXT NOT NULL,
    received_at     TEXT NOT NULL,
    processed_at    TEXT,
    -- 'applied', 'ignored: <why>' or the error of the last attempt
    outcome         TEXT
);
CREATE INDEX idx_crm_webhook_events_type ON crm_webhook_events (event_type, received_at);
CREATE INDEX idx_crm_webhook_events_unprocessed ON crm_webhook_events (processed_at, received_at);

CREATE TABLE crm_contacts (
    contact_id      TEXT NOT NULL PRIMARY KEY,
    user_id         INTEGER REFERENCES users (id) ON DELETE SET NULL,
    tags            TEXT,
    email_dnd       BOOLEAN NOT NULL DEFAULT FALSE,
    updated_at      TEXT NOT NULL
);
CREATE INDEX idx_crm_contacts_user ON crm_contacts (user_id);

CREATE TABLE crm_opportunities (
    id                  TEXT NOT NULL PRIMARY KEY,
    contact_id          TEXT,
    user_id             INTEGER REFERENCES users (id) ON DELETE SET NULL,
    project_id          INTEGER REFERENCES projects (id) ON DELETE SET NULL,
    name                TEXT,
    status              TEXT NOT NULL,
    monetary_value_minor INTEGER,
    pipeline_id         TEXT,
    pipeline_stage_id   TEXT,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL
);
CREATE INDEX idx_crm_opportunities_contact ON crm_opportunities (contact_id);
CREATE INDEX idx_crm_opportunities_user ON crm_opportunities (user_id);
CREATE INDEX idx_crm_opportunities_project ON crm_opportunities (project_id);

-- The CRM's own queue: the outbox consumer only records what to sync (idempotent by event
-- id), and the CRM worker performs it, so a slow or rate-limited CRM never holds up the
-- outbox's other consumers. A claimed row is leased; a crash leaves it to be claimed again.
CREATE TABLE crm_queue (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        INTEGER UNIQUE,
    user_id         INTEGER,
    op              TEXT NOT NULL,
    available_at    TEXT NOT NULL,
    created_at      TEXT NOT NULL
);
CREATE INDEX idx_crm_queue_available ON crm_queue (available_at, id);
