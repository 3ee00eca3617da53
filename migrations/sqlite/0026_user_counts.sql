-- The administrators' user list at scale (issue #32): its total for no filter, one role or
-- one account status comes from tallies (0023) kept by the writes, never a count of every
-- account. Each status is the list filter's own condition (store::user_admin), deleted
-- accounts included where the list includes them.
CREATE TRIGGER users_count_tally_insert AFTER INSERT ON users BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'users', '', 1, 0
    UNION ALL
    SELECT 'users_by_status', 'active', 1, 0 WHERE NEW.is_active AND NEW.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'inactive', 1, 0
     WHERE NOT NEW.is_active AND NEW.suspended_at IS NULL AND NEW.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'suspended', 1, 0
     WHERE NEW.suspended_at IS NOT NULL AND NEW.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'deleted', 1, 0 WHERE NEW.deleted_at IS NOT NULL;
END;
CREATE TRIGGER users_count_tally_delete AFTER DELETE ON users BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'users', '', -1, 0
    UNION ALL
    SELECT 'users_by_status', 'active', -1, 0 WHERE OLD.is_active AND OLD.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'inactive', -1, 0
     WHERE NOT OLD.is_active AND OLD.suspended_at IS NULL AND OLD.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'suspended', -1, 0
     WHERE OLD.suspended_at IS NOT NULL AND OLD.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'deleted', -1, 0 WHERE OLD.deleted_at IS NOT NULL;
END;
CREATE TRIGGER users_count_tally_update AFTER UPDATE OF is_active, suspended_at, deleted_at ON users
    WHEN OLD.is_active IS NOT NEW.is_active
      OR (OLD.suspended_at IS NULL) <> (NEW.suspended_at IS NULL)
      OR (OLD.deleted_at IS NULL) <> (NEW.deleted_at IS NULL)
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'users_by_status', 'active', -1, 0 WHERE OLD.is_active AND OLD.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'inactive', -1, 0
     WHERE NOT OLD.is_active AND OLD.suspended_at IS NULL AND OLD.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'suspended', -1, 0
     WHERE OLD.suspended_at IS NOT NULL AND OLD.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'deleted', -1, 0 WHERE OLD.deleted_at IS NOT NULL
    UNION ALL
    SELECT 'users_by_status', 'active', 1, 0 WHERE NEW.is_active AND NEW.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'inactive', 1, 0
     WHERE NOT NEW.is_active AND NEW.suspended_at IS NULL AND NEW.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'suspended', 1, 0
     WHERE NEW.suspended_at IS NOT NULL AND NEW.deleted_at IS NULL
    UNION ALL
    SELECT 'users_by_status', 'deleted', 1, 0 WHERE NEW.deleted_at IS NOT NULL;
END;
CREATE TRIGGER user_roles_count_tally_insert AFTER INSERT ON user_roles BEGIN
    INSERT INTO tally_deltas (name, key, n, total) VALUES ('accounts_by_role', NEW.role, 1, 0);
END;
CREATE TRIGGER user_roles_count_tally_delete AFTER DELETE ON user_roles BEGIN
    INSERT INTO tally_deltas (name, key, n, total) VALUES ('accounts_by_role', OLD.role, -1, 0);
END;

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
