-- One search document per profile (issue #32), as PostgreSQL's 0038: the words of its name,
-- bio and main area and of its skills' names (column `words`), and its skills' ids (column
-- `skills`). A search with a skill is one FTS5 match, `words : (...) AND skills : "<id>"`,
-- whose doclists the index intersects, instead of a skill's holders tested against every
-- expert with the word. Replaces 0017's `profiles_fts` and `skills_fts`.
DROP TRIGGER profiles_fts_insert;
DROP TRIGGER profiles_fts_delete;
DROP TRIGGER profiles_fts_update;
DROP TABLE profiles_fts;
DROP TRIGGER skills_fts_insert;
DROP TRIGGER skills_fts_delete;
DROP TRIGGER skills_fts_update;
DROP TABLE skills_fts;

-- Each profile's document as the index holds it: the one definition the triggers read.
CREATE VIEW profile_search_documents AS
SELECT p.id,
       COALESCE(p.full_name, '') || ' ' || COALESCE(p.bio, '') || ' ' || COALESCE(p.main_area, '')
           || ' ' || COALESCE((SELECT group_concat(s.name, ' ') FROM profile_skills ps
                                 JOIN skills s ON s.id = ps.skill_id
                                WHERE ps.profile_id = p.id), '') AS words,
       COALESCE((SELECT group_concat(ps.skill_id, ' ') FROM profile_skills ps
                  WHERE ps.profile_id = p.id), '') AS skills
  FROM profiles p;

-- Contentless: the index keeps no copy of the text, only what it needs to match and delete.
CREATE VIRTUAL TABLE profile_search USING fts5(
    words, skills, content = '', contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO profile_search (rowid, words, skills)
    SELECT id, words, skills FROM profile_search_documents;

CREATE TRIGGER profile_search_insert AFTER INSERT ON profiles BEGIN
    INSERT INTO profile_search (rowid, words, skills)
        SELECT id, words, skills FROM profile_search_documents WHERE id = NEW.id;
END;
CREATE TRIGGER profile_search_update AFTER UPDATE OF full_name, bio, main_area ON profiles BEGIN
    DELETE FROM profile_search WHERE rowid = NEW.id;
    INSERT INTO profile_search (rowid, words, skills)
        SELECT id, words, skills FROM profile_search_documents WHERE id = NEW.id;
END;
CREATE TRIGGER profile_search_delete AFTER DELETE ON profiles BEGIN
    DELETE FROM profile_search WHERE rowid = OLD.id;
END;

-- A skill added or removed (a profile deleted with its skills is not found).
CREATE TRIGGER profile_skills_search_insert AFTER INSERT ON profile_skills BEGIN
    DELETE FROM profile_search WHERE rowid = NEW.profile_id;
    INSERT INTO profile_search (rowid, words, skills)
        SELECT id, words, skills FROM profile_search_documents WHERE id = NEW.profile_id;
END;
CREATE TRIGGER profile_skills_search_delete AFTER DELETE ON profile_skills BEGIN
    DELETE FROM profile_search WHERE rowid = OLD.profile_id;
    INSERT INTO profile_search (rowid, words, skills)
        SELECT id, words, skills FROM profile_search_documents WHERE id = OLD.profile_id;
END;

-- A skill renamed: the profiles holding it.
CREATE TRIGGER skills_search_update AFTER UPDATE OF name ON skills
    WHEN OLD.name IS NOT NEW.name BEGIN
    DELETE FROM profile_search
     WHERE rowid IN (SELECT profile_id FROM profile_skills WHERE skill_id = NEW.id);
    INSERT INTO profile_search (rowid, words, skills)
        SELECT id, words, skills FROM profile_search_documents
         WHERE id IN (SELECT profile_id FROM profile_skills WHERE skill_id = NEW.id);
END;
