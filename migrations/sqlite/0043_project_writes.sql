-- Every committed change to projects, counted (issue #32): each instance keeps the public
-- list's answers under this count (`store::page_cache`) and serves one while the count read
-- before it is the same. SQLite has row triggers only: one delta per row changed, appended to
-- the tallies of 0023. The list reads `projects` alone, and `project_skills` and the search
-- index follow it in the same statement's triggers.
CREATE TRIGGER projects_written_insert AFTER INSERT ON projects BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
        VALUES ('project_writes', '', 0, 1, 0);
END;
CREATE TRIGGER projects_written_update AFTER UPDATE ON projects BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
        VALUES ('project_writes', '', 0, 1, 0);
END;
CREATE TRIGGER projects_written_delete AFTER DELETE ON projects BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
        VALUES ('project_writes', '', 0, 1, 0);
END;
