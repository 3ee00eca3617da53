-- Curation's walk without a probe a profile (issue #32). The walk of 0042's index probed each
-- verified expert's skills in `profile_skills` and each one's account. Now:
-- - each profile holds the ids of its skills as `,4,24,154,` (`skill_ids`, NULL without any),
--   kept by the row triggers below, and the rank's index holds it, so the walk tests the
--   skills held in the index entry it is on;
-- - inactive accounts have an index of their own, a few entries, so the walk asks it whether
--   an expert's account is inactive instead of reading the account.
ALTER TABLE profiles ADD COLUMN skill_ids TEXT;

UPDATE profiles SET skill_ids = (
    SELECT ',' || group_concat(skill_id, ',') || ','
      FROM (SELECT skill_id FROM profile_skills WHERE profile_id = profiles.id ORDER BY skill_id));

-- A profile deleted with its skills is not found.
CREATE TRIGGER profile_skills_held_insert AFTER INSERT ON profile_skills BEGIN
    UPDATE profiles SET skill_ids = (
        SELECT ',' || group_concat(skill_id, ',') || ','
          FROM (SELECT skill_id FROM profile_skills WHERE profile_id = profiles.id
                 ORDER BY skill_id))
     WHERE id = NEW.profile_id;
END;
CREATE TRIGGER profile_skills_held_delete AFTER DELETE ON profile_skills BEGIN
    UPDATE profiles SET skill_ids = (
        SELECT ',' || group_concat(skill_id, ',') || ','
          FROM (SELECT skill_id FROM profile_skills WHERE profile_id = profiles.id
                 ORDER BY skill_id))
     WHERE id = OLD.profile_id;
END;
CREATE TRIGGER profile_skills_held_update AFTER UPDATE ON profile_skills BEGIN
    UPDATE profiles SET skill_ids = (
        SELECT ',' || group_concat(skill_id, ',') || ','
          FROM (SELECT skill_id FROM profile_skills WHERE profile_id = profiles.id
                 ORDER BY skill_id))
     WHERE id = OLD.profile_id;
    UPDATE profiles SET skill_ids = (
        SELECT ',' || group_concat(skill_id, ',') || ','
          FROM (SELECT skill_id FROM profile_skills WHERE profile_id = profiles.id
                 ORDER BY skill_id))
     WHERE id = NEW.profile_id;
END;

DROP INDEX idx_profiles_curation_rank;
CREATE INDEX idx_profiles_curation_rank ON profiles (
    (CASE expert_level WHEN 'Enterprise' THEN 2 WHEN 'Pro' THEN 1 ELSE 0 END) DESC,
    (COALESCE(internal_rating, 3.0)) DESC,
    user_id, id, expert_level, internal_rating, availability, skill_ids)
    WHERE profile_type = 'experto' AND is_verified = TRUE;

CREATE INDEX idx_users_inactive ON users (id) WHERE is_active = FALSE;
