-- A chat's unread count without counting the room (issue #32): each sender's message count in
-- a room and each message's place among its sender's, kept as migration 0018 keeps the
-- room's. Unread after a read mark = the room's messages after it, less the reader's own
-- after it, less the others' deleted after it (few, under a partial index).
CREATE TABLE chat_sender_counts (
    project_id  BIGINT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    sender_id   BIGINT NOT NULL,
    n           BIGINT NOT NULL,
    PRIMARY KEY (project_id, sender_id)
);
ALTER TABLE chat_messages ADD COLUMN sender_seq BIGINT;
UPDATE chat_messages m SET sender_seq = x.seq
  FROM (SELECT id, row_number() OVER (PARTITION BY project_id, sender_id ORDER BY id) AS seq
          FROM chat_messages WHERE sender_id IS NOT NULL) x
 WHERE m.id = x.id;
INSERT INTO chat_sender_counts (project_id, sender_id, n)
    SELECT project_id, sender_id, COUNT(*) FROM chat_messages
     WHERE sender_id IS NOT NULL GROUP BY project_id, sender_id;
CREATE INDEX idx_chat_messages_sender_in_room ON chat_messages (project_id, sender_id, id);
CREATE INDEX idx_chat_messages_deleted ON chat_messages (project_id, id) WHERE deleted_at IS NOT NULL;
CREATE OR REPLACE FUNCTION chat_messages_number() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chat_room_counts (project_id, n) VALUES (NEW.project_id, 1)
        ON CONFLICT (project_id) DO UPDATE SET n = chat_room_counts.n + 1
        RETURNING n INTO NEW.room_seq;
    IF NEW.sender_id IS NOT NULL THEN
        INSERT INTO chat_sender_counts (project_id, sender_id, n) VALUES (NEW.project_id, NEW.sender_id, 1)
            ON CONFLICT (project_id, sender_id) DO UPDATE SET n = chat_sender_counts.n + 1
            RETURNING n INTO NEW.sender_seq;
    END IF;
    NEW.id := nextval(pg_get_serial_sequence('chat_messages', 'id'));
    RETURN NEW;
END $$;
