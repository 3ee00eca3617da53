-- Every committed change to what the expert directory shows, counted (issue #32), as 0043
-- counts the projects' for the public list: each instance keeps the directory's answers under
-- this count (`store::page_cache`) and serves one while the count read before it is the same.
-- The directory reads profiles, their skills, the skills and whether each account is active;
-- the search index and kept totals follow those in the same statements' triggers. SQLite has
-- row triggers only: one delta per row changed, appended to the tallies of 0023.
CREATE TRIGGER experts_written_profile_insert AFTER INSERT ON profiles BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total) VALUES ('expert_writes', '', 0, 1, 0);
END;
CREATE TRIGGER experts_written_profile_update AFTER UPDATE ON profiles BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total) VALUES ('expert_writes', '', 0, 1, 0);
END;
CREATE TRIGGER experts_written_profile_delete AFTER DELETE ON profiles BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total) VALUES ('expert_writes', '', 0, 1, 0);
END;
CREATE TRIGGER experts_written_skill_held AFTER INSERT ON profile_skills BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total) VALUES ('expert_writes', '', 0, 1, 0);
END;
CREATE TRIGGER experts_written_skill_changed AFTER UPDATE ON profile_skills BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total) VALUES ('expert_writes', '', 0, 1, 0);
END;
CREATE TRIGGER experts_written_skill_dropped AFTER DELETE ON profile_skills BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total) VALUES ('expert_writes', '', 0, 1, 0);
END;
CREATE TRIGGER experts_written_skill_insert AFTER INSERT ON skills BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total) VALUES ('expert_writes', '', 0, 1, 0);
END;
CREATE TRIGGER experts_written_skill_update AFTER UPDATE ON skills BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total) VALUES ('expert_writes', '', 0, 1, 0);
END;
CREATE TRIGGER experts_written_skill_delete AFTER DELETE ON skills BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total) VALUES ('expert_writes', '', 0, 1, 0);
END;
CREATE TRIGGER experts_written_activity AFTER UPDATE OF is_active ON users BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total) VALUES ('expert_writes', '', 0, 1, 0);
END;
