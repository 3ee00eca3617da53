-- The expert directory at scale (issue #32): its total with no filter, or only `verified`,
-- comes from a tally (0023) of listed experts (expert profiles of active users) by
-- verification, kept by the writes, never a count of every expert.
CREATE TRIGGER profiles_listed_tally_insert AFTER INSERT ON profiles
    WHEN NEW.profile_type = 'experto'
     AND EXISTS (SELECT 1 FROM users WHERE id = NEW.user_id AND is_active)
BEGIN
    INSERT INTO tally_deltas (name, key, n, total) VALUES
        ('listed_experts', CASE WHEN NEW.is_verified THEN 'true' ELSE 'false' END, 1, 0);
END;
CREATE TRIGGER profiles_listed_tally_delete AFTER DELETE ON profiles
    WHEN OLD.profile_type = 'experto'
     AND EXISTS (SELECT 1 FROM users WHERE id = OLD.user_id AND is_active)
BEGIN
    INSERT INTO tally_deltas (name, key, n, total) VALUES
        ('listed_experts', CASE WHEN OLD.is_verified THEN 'true' ELSE 'false' END, -1, 0);
END;
CREATE TRIGGER profiles_listed_tally_update AFTER UPDATE OF profile_type, is_verified ON profiles
    WHEN (OLD.profile_type IS NOT NEW.profile_type OR OLD.is_verified IS NOT NEW.is_verified)
     AND EXISTS (SELECT 1 FROM users WHERE id = NEW.user_id AND is_active)
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'listed_experts', CASE WHEN OLD.is_verified THEN 'true' ELSE 'false' END, -1, 0
     WHERE OLD.profile_type = 'experto'
    UNION ALL
    SELECT 'listed_experts', CASE WHEN NEW.is_verified THEN 'true' ELSE 'false' END, 1, 0
     WHERE NEW.profile_type = 'experto';
END;
CREATE TRIGGER users_listed_tally AFTER UPDATE OF is_active ON users
    WHEN OLD.is_active IS NOT NEW.is_active
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
        SELECT 'listed_experts', CASE WHEN is_verified THEN 'true' ELSE 'false' END,
               CASE WHEN NEW.is_active THEN 1 ELSE -1 END, 0
          FROM profiles WHERE user_id = NEW.id AND profile_type = 'experto';
END;

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'listed_experts', CASE WHEN p.is_verified THEN 'true' ELSE 'false' END, 0,
       COUNT(*), 0
  FROM profiles p JOIN users u ON u.id = p.user_id
 WHERE p.profile_type = 'experto' AND u.is_active = TRUE
 GROUP BY 2;
