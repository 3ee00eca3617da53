-- New-chat-message e-mails (issue 14): a participant not connected to a room gets at most one
-- e-mail per room per CHAT_EMAIL_DIGEST_MINUTES. `last_sent_at` is moved only by a conditional
-- upsert (`… DO UPDATE … WHERE last_sent_at <= now - window`), so two instances posting at
-- once send one e-mail. The SQLite twin is migrations/sqlite/0006_chat_digests.sql.
CREATE TABLE chat_email_digests (
    project_id      BIGINT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    user_id         BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    last_sent_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (project_id, user_id)
);
CREATE INDEX idx_chat_email_digests_user ON chat_email_digests (user_id);
