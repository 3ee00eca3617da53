-- The administrators' user list at scale (issue #32): its total for no filter, one role or
-- one account status comes from tallies (0023) kept by the writes, never a count of every
-- account. Each status is the list filter's own condition (store::user_admin), deleted
-- accounts included where the list includes them.
CREATE FUNCTION user_count_tally(u users, sign BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'users', '', sign, 0
    UNION ALL
    SELECT 'users_by_status', 'active', sign, 0 WHERE u.is_active AND u.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'inactive', sign, 0
     WHERE NOT u.is_active AND u.suspended_at IS NULL AND u.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'suspended', sign, 0
     WHERE u.suspended_at IS NOT NULL AND u.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'deleted', sign, 0 WHERE u.deleted_at IS NOT NULL;
$$;
CREATE FUNCTION users_count_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM user_count_tally(OLD, -1); END IF;
    IF TG_OP <> 'DELETE' THEN PERFORM user_count_tally(NEW, 1); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER users_count_tally_insert_delete AFTER INSERT OR DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION users_count_tally_sync();
CREATE TRIGGER users_count_tally_update AFTER UPDATE OF is_active, suspended_at, deleted_at ON users
    FOR EACH ROW
    WHEN ((OLD.is_active, OLD.suspended_at IS NULL, OLD.deleted_at IS NULL)
          IS DISTINCT FROM (NEW.is_active, NEW.suspended_at IS NULL, NEW.deleted_at IS NULL))
    EXECUTE FUNCTION users_count_tally_sync();

CREATE FUNCTION user_roles_count_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO tally_deltas (name, key, n, total) VALUES ('accounts_by_role', NEW.role, 1, 0);
    ELSE
        INSERT INTO tally_deltas (name, key, n, total) VALUES ('accounts_by_role', OLD.role, -1, 0);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER user_roles_count_tally AFTER INSERT OR DELETE ON user_roles
    FOR EACH ROW EXECUTE FUNCTION user_roles_count_tally_sync();

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'users', '', 0, COUNT(*), 0 FROM users
UNION ALL
SELECT 'users_by_status', 'active', 0, COUNT(*), 0 FROM users
 WHERE is_active AND deleted_at IS NULL
UNION ALL
SELECT 'users_by_status', 'inactive', 0, COUNT(*), 0 FROM users
 WHERE NOT is_active AND suspended_at IS NULL AND deleted_at IS NULL
UNION ALL
SELECT 'users_by_status', 'suspended', 0, COUNT(*), 0 FROM users
 WHERE suspended_at IS NOT NULL AND deleted_at IS NULL
UNION ALL
SELECT 'users_by_status', 'deleted', 0, COUNT(*), 0 FROM users WHERE deleted_at IS NOT NULL
UNION ALL
SELECT 'accounts_by_role', role, 0, COUNT(*), 0 FROM user_roles GROUP BY role;
