-- Which projects a transaction changed, noted for its commit (issue #32): each instance keeps
-- the rows `GET /api/projects/{id}` reads under a token per project, and `store::Tx::commit`
-- takes this note (deleting it) just before committing and sets fresh tokens for the projects
-- named once committed (`store::written`). SQLite runs one writing transaction at a time, so
-- what the table holds at a commit is that transaction's own, and a rollback takes it back.
CREATE TABLE written_projects (project_id INTEGER PRIMARY KEY);
CREATE TRIGGER project_rows_noted_update AFTER UPDATE ON projects BEGIN
    INSERT OR IGNORE INTO written_projects (project_id) VALUES (old.id);
END;
CREATE TRIGGER project_rows_noted_delete AFTER DELETE ON projects BEGIN
    INSERT OR IGNORE INTO written_projects (project_id) VALUES (old.id);
END;
