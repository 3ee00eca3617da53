-- Administration (issue 16): suspension, the steps of an account's removal, recontacts, and
-- the record of what administrators did to accounts and projects.

-- A suspension keeps the account inactive until `suspended_until` (NULL: until lifted).
ALTER TABLE users ADD COLUMN suspended_until TEXT;
ALTER TABLE users ADD COLUMN suspension_reason TEXT;
ALTER TABLE users ADD COLUMN suspended_by INTEGER REFERENCES users (id) ON DELETE SET NULL;
-- Removal: requested (with a reason), confirmed (account deactivated), then final
-- (`deleted_at`: personal data erased, money and tax records kept on the anonymised row).
ALTER TABLE users ADD COLUMN deletion_reason TEXT;
ALTER TABLE users ADD COLUMN deletion_requested_by INTEGER REFERENCES users (id) ON DELETE SET NULL;
ALTER TABLE users ADD COLUMN deletion_confirmed_by INTEGER REFERENCES users (id) ON DELETE SET NULL;
ALTER TABLE users ADD COLUMN deleted_at TEXT;
CREATE INDEX idx_users_deleted_at ON users (deleted_at);

ALTER TABLE profiles ADD COLUMN recontacted_by INTEGER REFERENCES users (id) ON DELETE SET NULL;

-- One line per administrator action on an account or a project: who, what, when, why.
CREATE TABLE admin_actions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    admin_id    INTEGER REFERENCES users (id) ON DELETE SET NULL,
    user_id     INTEGER REFERENCES users (id) ON DELETE SET NULL,
    project_id  INTEGER REFERENCES projects (id) ON DELETE SET NULL,
    action      TEXT NOT NULL,
    details     TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL
);
CREATE INDEX idx_admin_actions_user ON admin_actions (user_id, created_at);
CREATE INDEX idx_admin_actions_project ON admin_actions (project_id, created_at);
