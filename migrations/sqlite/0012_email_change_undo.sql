-- An e-mail change tells the previous address and gives it a single-use link that undoes the
-- change (issue 31, D22): the link's token is one more purpose of the mailed, hashed tokens,
-- and its `email` is the address the undo restores. SQLite cannot change a CHECK in place, so
-- the table is rebuilt (nothing refers to it).
CREATE TABLE one_time_tokens_new (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    purpose     TEXT NOT NULL CHECK (purpose IN ('verify_email', 'reset_password', 'undo_email_change')),
    token_hash  TEXT NOT NULL UNIQUE,
    email       TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    used_at     TEXT,
    created_at  TEXT NOT NULL
);
INSERT INTO one_time_tokens_new (id, user_id, purpose, token_hash, email, expires_at, used_at, created_at)
    SELECT id, user_id, purpose, token_hash, email, expires_at, used_at, created_at FROM one_time_tokens;
DROP TABLE one_time_tokens;
ALTER TABLE one_time_tokens_new RENAME TO one_time_tokens;
CREATE INDEX idx_one_time_tokens_user_purpose ON one_time_tokens (user_id, purpose, created_at);
-- An undo link keeps its address from being taken by another account while it is valid.
CREATE INDEX idx_one_time_tokens_email_purpose ON one_time_tokens (email, purpose);
