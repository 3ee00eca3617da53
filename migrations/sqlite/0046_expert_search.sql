-- The expert directory's search at scale (issue #32), as PostgreSQL's 0046: the search index
-- holds the documents of listed experts only (expert profiles of active users, as 0027's
-- `listed_experts`), with their verification as a column of its own (`verified`: `true` or
-- `false`). A search's totals, the list's and its verified tier's, are then counted in the
-- index alone, without reading a profile or a user for each match (0038 joined every match
-- to both, twice a page). PostgreSQL keeps one-word totals by word as well; SQLite's tokens are
-- not reachable from a trigger, so it counts its matches in the index.
DROP TRIGGER profile_search_insert;
DROP TRIGGER profile_search_update;
DROP TRIGGER profile_search_delete;
DROP TRIGGER profile_skills_search_insert;
DROP TRIGGER profile_skills_search_delete;
DROP TRIGGER skills_search_update;
DROP TABLE profile_search;
DROP VIEW profile_search_documents;

-- Each listed expert's document as the index holds it: the one definition the triggers read.
CREATE VIEW profile_search_documents AS
SELECT p.id,
       COALESCE(p.full_name, '') || ' ' || COALESCE(p.bio, '') || ' ' || COALESCE(p.main_area, '')
           || ' ' || COALESCE((SELECT group_concat(s.name, ' ') FROM profile_skills ps
                                 JOIN skills s ON s.id = ps.skill_id
                                WHERE ps.profile_id = p.id), '') AS words,
       COALESCE((SELECT group_concat(ps.skill_id, ' ') FROM profile_skills ps
                  WHERE ps.profile_id = p.id), '') AS skills,
       CASE WHEN p.is_verified THEN 'true' ELSE 'false' END AS verified
  FROM profiles p JOIN users u ON u.id = p.user_id
 WHERE p.profile_type = 'experto' AND u.is_active;

-- Contentless: the index keeps no copy of the text, only what it needs to match and delete.
CREATE VIRTUAL TABLE profile_search USING fts5(
    words, skills, verified, content = '', contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO profile_search (rowid, words, skills, verified)
    SELECT id, words, skills, verified FROM profile_search_documents;

-- Each trigger takes the profile's row out and puts back what the view holds of it: nothing
-- once it is no longer listed.
CREATE TRIGGER profile_search_insert AFTER INSERT ON profiles BEGIN
    INSERT INTO profile_search (rowid, words, skills, verified)
        SELECT id, words, skills, verified FROM profile_search_documents WHERE id = NEW.id;
END;
CREATE TRIGGER profile_search_update
    AFTER UPDATE OF user_id, profile_type, is_verified, full_name, bio, main_area ON profiles
BEGIN
    DELETE FROM profile_search WHERE rowid = NEW.id;
    INSERT INTO profile_search (rowid, words, skills, verified)
        SELECT id, words, skills, verified FROM profile_search_documents WHERE id = NEW.id;
END;
CREATE TRIGGER profile_search_delete AFTER DELETE ON profiles BEGIN
    DELETE FROM profile_search WHERE rowid = OLD.id;
END;

-- An account activated or deactivated: its profiles.
CREATE TRIGGER users_profile_search AFTER UPDATE OF is_active ON users
    WHEN OLD.is_active IS NOT NEW.is_active
BEGIN
    DELETE FROM profile_search WHERE rowid IN (SELECT id FROM profiles WHERE user_id = NEW.id);
    INSERT INTO profile_search (rowid, words, skills, verified)
        SELECT d.id, d.words, d.skills, d.verified FROM profile_search_documents d
         WHERE d.id IN (SELECT id FROM profiles WHERE user_id = NEW.id);
END;

-- A skill added or removed (a profile deleted with its skills is not found).
CREATE TRIGGER profile_skills_search_insert AFTER INSERT ON profile_skills BEGIN
    DELETE FROM profile_search WHERE rowid = NEW.profile_id;
    INSERT INTO profile_search (rowid, words, skills, verified)
        SELECT id, words, skills, verified FROM profile_search_documents WHERE id = NEW.profile_id;
END;
CREATE TRIGGER profile_skills_search_delete AFTER DELETE ON profile_skills BEGIN
    DELETE FROM profile_search WHERE rowid = OLD.profile_id;
    INSERT INTO profile_search (rowid, words, skills, verified)
        SELECT id, words, skills, verified FROM profile_search_documents WHERE id = OLD.profile_id;
END;

-- A skill renamed: the profiles holding it.
CREATE TRIGGER skills_search_update AFTER UPDATE OF name ON skills
    WHEN OLD.name IS NOT NEW.name BEGIN
    DELETE FROM profile_search
     WHERE rowid IN (SELECT profile_id FROM profile_skills WHERE skill_id = NEW.id);
    INSERT INTO profile_search (rowid, words, skills, verified)
        SELECT id, words, skills, verified FROM profile_search_documents
         WHERE id IN (SELECT profile_id FROM profile_skills WHERE skill_id = NEW.id);
END;
