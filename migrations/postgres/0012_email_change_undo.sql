-- An e-mail change tells the previous address and gives it a single-use link that undoes the
-- change (issue 31, D22): the link's token is one more purpose of the mailed, hashed tokens,
-- and its `email` is the address the undo restores.
ALTER TABLE one_time_tokens DROP CONSTRAINT IF EXISTS one_time_tokens_purpose_check;
ALTER TABLE one_time_tokens ADD CONSTRAINT one_time_tokens_purpose_check
    CHECK (purpose IN ('verify_email', 'reset_password', 'undo_email_change'));
-- An undo link keeps its address from being taken by another account while it is valid.
CREATE INDEX idx_one_time_tokens_email_purpose ON one_time_tokens (email, purpose);
