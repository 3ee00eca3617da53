-- Every committed change to projects, counted (issue #32): each instance keeps the public
-- list's answers under this count (`store::page_cache`) and serves one while the count read
-- before it is the same. A statement trigger appends one delta per statement to the tallies
-- of 0023, so no writer waits on another, and a read (one snapshot) counts exactly the
-- changes committed before it, folded or not. The list reads `projects` alone, and
-- `project_skills` and the search vectors follow it in the same statement's triggers.
CREATE FUNCTION projects_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
        VALUES ('project_writes', '', 0, 1, 0);
    RETURN NULL;
END $$;
CREATE TRIGGER projects_written AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON projects
    FOR EACH STATEMENT EXECUTE FUNCTION projects_written();
