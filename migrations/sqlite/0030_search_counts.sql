-- Exact totals of common searches and of the administrators' profile list at scale (issue
-- #32), kept by the writes in the tallies of 0023 instead of counted from every matching row.
--
-- `experts_by_skill`: listed experts (expert profiles of active users, as 0027's
-- `listed_experts`) by skill and verification; key `<skill id>:<true|false>`. (PostgreSQL
-- also keeps `project_words` from its full-text vectors; SQLite's FTS5 tokens are not
-- reachable from a trigger, so SQLite counts a search's matches.)
CREATE TRIGGER profile_skills_tally_insert AFTER INSERT ON profile_skills
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'experts_by_skill',
           NEW.skill_id || ':' || CASE WHEN p.is_verified THEN 'true' ELSE 'false' END, 1, 0
      FROM profiles p JOIN users u ON u.id = p.user_id
     WHERE p.id = NEW.profile_id AND p.profile_type = 'experto' AND u.is_active;
END;
CREATE TRIGGER profile_skills_tally_delete AFTER DELETE ON profile_skills
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'experts_by_skill',
           OLD.skill_id || ':' || CASE WHEN p.is_verified THEN 'true' ELSE 'false' END, -1, 0
      FROM profiles p JOIN users u ON u.id = p.user_id
     WHERE p.id = OLD.profile_id AND p.profile_type = 'experto' AND u.is_active;
END;
CREATE TRIGGER profiles_skills_tally AFTER UPDATE OF profile_type, is_verified ON profiles
    WHEN (OLD.profile_type IS NOT NEW.profile_type OR OLD.is_verified IS NOT NEW.is_verified)
     AND EXISTS (SELECT 1 FROM users WHERE id = NEW.user_id AND is_active)
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'experts_by_skill',
           s.skill_id || ':' || CASE WHEN OLD.is_verified THEN 'true' ELSE 'false' END, -1, 0
      FROM profile_skills s WHERE s.profile_id = OLD.id AND OLD.profile_type = 'experto'
    UNION ALL
    SELECT 'experts_by_skill',
           s.skill_id || ':' || CASE WHEN NEW.is_verified THEN 'true' ELSE 'false' END, 1, 0
      FROM profile_skills s WHERE s.profile_id = NEW.id AND NEW.profile_type = 'experto';
END;
CREATE TRIGGER users_skills_tally AFTER UPDATE OF is_active ON users
    WHEN OLD.is_active IS NOT NEW.is_active
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'experts_by_skill',
           s.skill_id || ':' || CASE WHEN p.is_verified THEN 'true' ELSE 'false' END,
           CASE WHEN NEW.is_active THEN 1 ELSE -1 END, 0
      FROM profiles p JOIN profile_skills s ON s.profile_id = p.id
     WHERE p.user_id = NEW.id AND p.profile_type = 'experto';
END;

-- `profiles`: every profile, whatever its user's state (the administrators' list shows them
-- all), by type, verification and verification status; key `<type>:<true|false>:<status>`.
CREATE TRIGGER profiles_kind_tally_insert AFTER INSERT ON profiles
BEGIN
    INSERT INTO tally_deltas (name, key, n, total) VALUES
        ('profiles', NEW.profile_type || ':' || CASE WHEN NEW.is_verified THEN 'true' ELSE 'false' END
                     || ':' || NEW.verification_status, 1, 0);
END;
CREATE TRIGGER profiles_kind_tally_delete AFTER DELETE ON profiles
BEGIN
    INSERT INTO tally_deltas (name, key, n, total) VALUES
        ('profiles', OLD.profile_type || ':' || CASE WHEN OLD.is_verified THEN 'true' ELSE 'false' END
                     || ':' || OLD.verification_status, -1, 0);
END;
CREATE TRIGGER profiles_kind_tally_update
    AFTER UPDATE OF profile_type, is_verified, verification_status ON profiles
    WHEN OLD.profile_type IS NOT NEW.profile_type OR OLD.is_verified IS NOT NEW.is_verified
      OR OLD.verification_status IS NOT NEW.verification_status
BEGIN
    INSERT INTO tally_deltas (name, key, n, total) VALUES
        ('profiles', OLD.profile_type || ':' || CASE WHEN OLD.is_verified THEN 'true' ELSE 'false' END
                     || ':' || OLD.verification_status, -1, 0),
        ('profiles', NEW.profile_type || ':' || CASE WHEN NEW.is_verified THEN 'true' ELSE 'false' END
                     || ':' || NEW.verification_status, 1, 0);
END;

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'experts_by_skill',
       s.skill_id || ':' || CASE WHEN p.is_verified THEN 'true' ELSE 'false' END, 0, COUNT(*), 0
  FROM profile_skills s JOIN profiles p ON p.id = s.profile_id JOIN users u ON u.id = p.user_id
 WHERE p.profile_type = 'experto' AND u.is_active = 1
 GROUP BY 2
UNION ALL
SELECT 'profiles', profile_type || ':' || CASE WHEN is_verified THEN 'true' ELSE 'false' END
                   || ':' || verification_status, 0, COUNT(*), 0
  FROM profiles GROUP BY 2;
