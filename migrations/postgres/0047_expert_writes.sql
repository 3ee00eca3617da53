-- Every committed change to what the expert directory shows, counted (issue #32), as 0043
-- counts the projects' for the public list: each instance keeps the directory's answers under
-- this count (`store::page_cache`) and serves one while the count read before it is the same.
-- The directory reads profiles, their skills, the skills and whether each account is active;
-- the search documents and kept totals follow those in the same statements' triggers. One
-- delta per statement, appended to the tallies of 0023, so no writer waits on another.
CREATE FUNCTION experts_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
        VALUES ('expert_writes', '', 0, 1, 0);
    RETURN NULL;
END $$;
CREATE TRIGGER experts_written AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON profiles
    FOR EACH STATEMENT EXECUTE FUNCTION experts_written();
CREATE TRIGGER experts_written AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON profile_skills
    FOR EACH STATEMENT EXECUTE FUNCTION experts_written();
CREATE TRIGGER experts_written AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON skills
    FOR EACH STATEMENT EXECUTE FUNCTION experts_written();
CREATE TRIGGER experts_written AFTER UPDATE OF is_active ON users
    FOR EACH STATEMENT EXECUTE FUNCTION experts_written();
