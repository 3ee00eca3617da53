-- A room's message count and each message's place in its room (issue #32), so that a page of
-- a chat's history answers its exact total without counting the room: the total before a
-- message is its place minus one. (SQLite writes one transaction at a time, so places
-- follow ids.)
CREATE TABLE chat_room_counts (
    project_id  INTEGER NOT NULL PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
    n           INTEGER NOT NULL
);
ALTER TABLE chat_messages ADD COLUMN room_seq INTEGER;
UPDATE chat_messages SET room_seq = (
    SELECT COUNT(*) FROM chat_messages older
     WHERE older.project_id = chat_messages.project_id AND older.id <= chat_messages.id);
INSERT INTO chat_room_counts (project_id, n)
    SELECT project_id, COUNT(*) FROM chat_messages GROUP BY project_id;
CREATE TRIGGER chat_messages_number AFTER INSERT ON chat_messages BEGIN
    INSERT INTO chat_room_counts (project_id, n) VALUES (NEW.project_id, 1)
        ON CONFLICT (project_id) DO UPDATE SET n = n + 1;
    UPDATE chat_messages SET room_seq = (SELECT n FROM chat_room_counts WHERE project_id = NEW.project_id)
     WHERE id = NEW.id;
END;
