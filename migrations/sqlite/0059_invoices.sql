-- Invoices (issue #65): each released payment issues the expert's invoice to the company
-- (self-billed) and the platform's invoice for its commission; a refund after the release
-- issues credit notes. Numbers are taken in the issuing transaction from `invoice_series`,
-- one row per issuer, kind and year, whose `last_hash` is the head of that series' hash chain.
CREATE TABLE invoice_series (
    issuer_key      TEXT NOT NULL,
    doc_kind        TEXT NOT NULL CHECK (doc_kind IN ('invoice', 'credit_note')),
    year            INTEGER NOT NULL,
    last_number     INTEGER NOT NULL DEFAULT 0,
    last_hash       TEXT NOT NULL,
    PRIMARY KEY (issuer_key, doc_kind, year)
);

CREATE TABLE invoices (
    id                  INTEGER PRIMARY KEY,
    doc_kind            TEXT NOT NULL CHECK (doc_kind IN ('invoice', 'credit_note')),
    role                TEXT NOT NULL CHECK (role IN ('expert_service', 'platform_fee')),
    status              TEXT NOT NULL CHECK (status IN ('pending_fiscal_data', 'pending_agreement', 'issued')),
    payment_id          INTEGER NOT NULL REFERENCES payments (id) ON DELETE RESTRICT,
    project_id          INTEGER NOT NULL REFERENCES projects (id) ON DELETE RESTRICT,
    milestone_id        INTEGER REFERENCES milestones (id) ON DELETE RESTRICT,
    corrects_id         INTEGER REFERENCES invoices (id) ON DELETE RESTRICT,
    issuer_user_id      INTEGER REFERENCES users (id) ON DELETE RESTRICT,
    recipient_user_id   INTEGER NOT NULL REFERENCES users (id) ON DELETE RESTRICT,
    issuer_key          TEXT NOT NULL,
    currency            TEXT NOT NULL,
    payable_minor       INTEGER NOT NULL,
    year                INTEGER,
    number_in_series    INTEGER,
    number              TEXT UNIQUE,
    issued_at           TEXT,
    tax_case            TEXT CHECK (tax_case IN ('domestic', 'reverse_charge', 'not_subject', 'eu_consumer')),
    base_minor          INTEGER,
    vat_rate_bp         INTEGER,
    vat_minor           INTEGER,
    irpf_rate_bp        INTEGER,
    irpf_minor          INTEGER,
    total_minor         INTEGER,
    content             TEXT,
    prev_hash           TEXT,
    record_hash         TEXT,
    created_at          TEXT NOT NULL,
    UNIQUE (issuer_key, doc_kind, year, number_in_series),
    CHECK ((status = 'issued') = (number IS NOT NULL AND record_hash IS NOT NULL AND content IS NOT NULL))
);
CREATE UNIQUE INDEX invoices_one_per_payment ON invoices (payment_id, role) WHERE doc_kind = 'invoice';
CREATE INDEX invoices_recipient ON invoices (recipient_user_id, id);
CREATE INDEX invoices_issuer ON invoices (issuer_user_id, id);
CREATE INDEX invoices_pending ON invoices (status, id) WHERE status = 'pending_fiscal_data';

-- Issued documents are immutable: corrections are credit notes. A pending document may be
-- issued (its one update). Deletion is refused, except by the end-to-end reset, which marks
-- itself in `resets_running` inside its transaction.
CREATE TABLE resets_running (id INTEGER PRIMARY KEY);
CREATE TRIGGER invoices_issued_immutable BEFORE UPDATE ON invoices
    WHEN OLD.status = 'issued' BEGIN
    SELECT RAISE(ABORT, 'an issued invoice can only be corrected by a credit note');
END;
CREATE TRIGGER invoices_never_deleted BEFORE DELETE ON invoices
    WHEN NOT EXISTS (SELECT 1 FROM resets_running) BEGIN
    SELECT RAISE(ABORT, 'an invoice is never deleted');
END;

-- The expert's acceptance of self-billing (the platform issues their invoices in their name),
-- given once with its date: by their first proposal, or explicitly
-- (`POST /api/invoices/self-billing-agreement`).
ALTER TABLE profiles ADD COLUMN self_billing_accepted_at TEXT;
