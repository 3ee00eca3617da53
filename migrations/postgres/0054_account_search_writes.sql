-- Every committed change to the accounts' search texts (0039), counted (issue #32), as 0043
-- counts the projects' for the public list: each instance keeps the administrators' search
-- totals under this count (`store::page_cache`) and uses one while the count read before it is
-- the same. A statement trigger appends one delta per statement to the tallies of 0023, so no
-- writer waits on another; every change reaches the texts through 0039's triggers or the
-- cascade of an account's deletion, both statements on this table.
CREATE FUNCTION account_search_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
        VALUES ('account_search_writes', '', 0, 1, 0);
    RETURN NULL;
END $$;
CREATE TRIGGER account_search_written
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON account_search
    FOR EACH STATEMENT EXECUTE FUNCTION account_search_written();
