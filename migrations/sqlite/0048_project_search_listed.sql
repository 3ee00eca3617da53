-- The project search's index learns which projects are public listings (issue #32), so a
-- search's matches among the listings, and their title matches, are counted in the index
-- alone: counted joined to `projects`, an expert's search for a common word at M read every
-- match's row (52 ms). Rebuilt contentless, as the expert search's (0046): the index keeps no
-- copy of the text, only what it needs to match and delete.
DROP TRIGGER projects_fts_insert;
DROP TRIGGER projects_fts_delete;
DROP TRIGGER projects_fts_update;
DROP TABLE projects_fts;

-- Each project's document as the index holds it: the one definition the triggers read.
-- `listed` is the public listing's rule (`project_lists::LISTED`, the partial index of 0016).
CREATE VIEW project_search_documents AS
SELECT id, title, description,
       CASE WHEN project_type = 'curated'
                 AND status IN ('published_curated', 'bidding', 'published', 'open')
            THEN 'true' ELSE 'false' END AS listed
  FROM projects;

CREATE VIRTUAL TABLE projects_fts USING fts5(
    title, description, listed, content = '', contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO projects_fts (rowid, title, description, listed)
    SELECT id, title, description, listed FROM project_search_documents;

CREATE TRIGGER projects_fts_insert AFTER INSERT ON projects BEGIN
    INSERT INTO projects_fts (rowid, title, description, listed)
        SELECT id, title, description, listed FROM project_search_documents WHERE id = NEW.id;
END;
-- A status or type changed may list or unlist the project: its row is put back whole.
CREATE TRIGGER projects_fts_update
    AFTER UPDATE OF title, description, project_type, status ON projects
    WHEN OLD.title IS NOT NEW.title OR OLD.description IS NOT NEW.description
      OR OLD.project_type IS NOT NEW.project_type OR OLD.status IS NOT NEW.status
BEGIN
    DELETE FROM projects_fts WHERE rowid = NEW.id;
    INSERT INTO projects_fts (rowid, title, description, listed)
        SELECT id, title, description, listed FROM project_search_documents WHERE id = NEW.id;
END;
CREATE TRIGGER projects_fts_delete AFTER DELETE ON projects BEGIN
    DELETE FROM projects_fts WHERE rowid = OLD.id;
END;
