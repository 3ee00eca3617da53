-- A chat's unread count without counting the room (issue #32): each sender's message count in
-- a room and each message's place among its sender's, kept as migration 0018 keeps the
-- room's. Unread after a read mark = the room's messages after it, less the reader's own
-- after it, less the others' deleted after it (few, under a partial index).
CREATE TABLE chat_sender_counts (
    project_id  INTEGER NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    sender_id   INTEGER NOT NULL,
    n           INTEGER NOT NULL,
    PRIMARY KEY (project_id, sender_id)
) WITHOUT ROWID;
ALTER TABLE chat_messages ADD COLUMN sender_seq INTEGER;
UPDATE chat_messages SET sender_seq = (
    SELECT COUNT(*) FROM chat_messages older
     WHERE older.project_id = chat_messages.project_id
       AND older.sender_id = chat_messages.sender_id AND older.id <= chat_messages.id)
 WHERE sender_id IS NOT NULL;
INSERT INTO chat_sender_counts (project_id, sender_id, n)
    SELECT project_id, sender_id, COUNT(*) FROM chat_messages
     WHERE sender_id IS NOT NULL GROUP BY project_id, sender_id;
CREATE INDEX idx_chat_messages_sender_in_room ON chat_messages (project_id, sender_id, id);
CREATE INDEX idx_chat_messages_deleted ON chat_messages (project_id, id) WHERE deleted_at IS NOT NULL;
DROP TRIGGER chat_messages_number;
CREATE TRIGGER chat_messages_number AFTER INSERT ON chat_messages BEGIN
    INSERT INTO chat_room_counts (project_id, n) VALUES (NEW.project_id, 1)
        ON CONFLICT (project_id) DO UPDATE SET n = n + 1;
    INSERT INTO chat_sender_counts (project_id, sender_id, n)
        SELECT NEW.project_id, NEW.sender_id, 1 WHERE NEW.sender_id IS NOT NULL
        ON CONFLICT (project_id, sender_id) DO UPDATE SET n = n + 1;
    UPDATE chat_messages
       SET room_seq = (SELECT n FROM chat_room_counts WHERE project_id = NEW.project_id),
           sender_seq = (SELECT n FROM chat_sender_counts
                          WHERE project_id = NEW.project_id AND sender_id = NEW.sender_id)
     WHERE id = NEW.id;
END;
