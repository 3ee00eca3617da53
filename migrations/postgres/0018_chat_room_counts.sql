-- A room's message count and each message's place in its room (issue #32), so that a page of
-- a chat's history answers its exact total without counting the room: the total before a
-- message is its place minus one. A message is numbered, and given its id, under its room's
-- count row, so places follow ids within a room even when two instances post at once.
CREATE TABLE chat_room_counts (
    project_id  BIGINT NOT NULL PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
    n           BIGINT NOT NULL
);
ALTER TABLE chat_messages ADD COLUMN room_seq BIGINT;
UPDATE chat_messages m SET room_seq = x.seq
  FROM (SELECT id, row_number() OVER (PARTITION BY project_id ORDER BY id) AS seq
          FROM chat_messages) x
 WHERE m.id = x.id;
INSERT INTO chat_room_counts (project_id, n)
    SELECT project_id, COUNT(*) FROM chat_messages GROUP BY project_id;
CREATE FUNCTION chat_messages_number() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chat_room_counts (project_id, n) VALUES (NEW.project_id, 1)
        ON CONFLICT (project_id) DO UPDATE SET n = chat_room_counts.n + 1
        RETURNING n INTO NEW.room_seq;
    NEW.id := nextval(pg_get_serial_sequence('chat_messages', 'id'));
    RETURN NEW;
END $$;
CREATE TRIGGER chat_messages_number BEFORE INSERT ON chat_messages
    FOR EACH ROW EXECUTE FUNCTION chat_messages_number();
