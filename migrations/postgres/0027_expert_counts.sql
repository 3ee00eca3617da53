-- The expert directory at scale (issue #32): its total with no filter, or only `verified`,
-- comes from a tally (0023) of listed experts (expert profiles of active users) by
-- verification, kept by the writes, never a count of every expert. A profile change locks its
-- user's row first, so a change of the user's activity racing it waits for it or is seen.
CREATE FUNCTION profiles_listed_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    active BOOLEAN;
BEGIN
    IF TG_OP = 'DELETE' THEN
        SELECT is_active INTO active FROM users WHERE id = OLD.user_id FOR NO KEY UPDATE;
    ELSE
        SELECT is_active INTO active FROM users WHERE id = NEW.user_id FOR NO KEY UPDATE;
    END IF;
    IF NOT COALESCE(active, FALSE) THEN RETURN NULL; END IF;
    IF TG_OP <> 'INSERT' AND OLD.profile_type = 'experto' THEN
        INSERT INTO tally_deltas (name, key, n, total) VALUES
            ('listed_experts', CASE WHEN OLD.is_verified THEN 'true' ELSE 'false' END, -1, 0);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.profile_type = 'experto' THEN
        INSERT INTO tally_deltas (name, key, n, total) VALUES
            ('listed_experts', CASE WHEN NEW.is_verified THEN 'true' ELSE 'false' END, 1, 0);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER profiles_listed_tally_insert_delete AFTER INSERT OR DELETE ON profiles
    FOR EACH ROW EXECUTE FUNCTION profiles_listed_tally_sync();
CREATE TRIGGER profiles_listed_tally_update AFTER UPDATE OF profile_type, is_verified ON profiles
    FOR EACH ROW
    WHEN ((OLD.profile_type, OLD.is_verified) IS DISTINCT FROM (NEW.profile_type, NEW.is_verified))
    EXECUTE FUNCTION profiles_listed_tally_sync();

CREATE FUNCTION users_listed_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
        SELECT 'listed_experts', CASE WHEN is_verified THEN 'true' ELSE 'false' END,
               CASE WHEN NEW.is_active THEN 1 ELSE -1 END, 0
          FROM profiles WHERE user_id = NEW.id AND profile_type = 'experto';
    RETURN NULL;
END $$;
CREATE TRIGGER users_listed_tally AFTER UPDATE OF is_active ON users
    FOR EACH ROW WHEN (OLD.is_active IS DISTINCT FROM NEW.is_active)
    EXECUTE FUNCTION users_listed_tally_sync();

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'listed_experts', CASE WHEN p.is_verified THEN 'true' ELSE 'false' END, 0,
       COUNT(*), 0
  FROM profiles p JOIN users u ON u.id = p.user_id
 WHERE p.profile_type = 'experto' AND u.is_active = TRUE
 GROUP BY 2;
