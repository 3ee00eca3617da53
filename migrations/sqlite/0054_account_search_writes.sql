-- Every committed change to the accounts' search texts (0039), counted (issue #32), as 0043
-- counts the projects' for the public list: each instance keeps the administrators' search
-- totals under this count (`store::page_cache`) and uses one while the count read before it is
-- the same. The index is a virtual table, which takes no trigger: the count follows the rows
-- 0039's triggers rewrite it from, one delta per row changed, appended to the tallies of 0023.
CREATE TRIGGER account_search_written_user_insert AFTER INSERT ON users BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
        VALUES ('account_search_writes', '', 0, 1, 0);
END;
CREATE TRIGGER account_search_written_user_update AFTER UPDATE OF email, username ON users BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
        VALUES ('account_search_writes', '', 0, 1, 0);
END;
CREATE TRIGGER account_search_written_user_delete AFTER DELETE ON users BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
        VALUES ('account_search_writes', '', 0, 1, 0);
END;
CREATE TRIGGER account_search_written_profile_insert AFTER INSERT ON profiles BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
        VALUES ('account_search_writes', '', 0, 1, 0);
END;
CREATE TRIGGER account_search_written_profile_update
    AFTER UPDATE OF full_name, company_name, user_id ON profiles BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
        VALUES ('account_search_writes', '', 0, 1, 0);
END;
CREATE TRIGGER account_search_written_profile_delete AFTER DELETE ON profiles BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
        VALUES ('account_search_writes', '', 0, 1, 0);
END;
