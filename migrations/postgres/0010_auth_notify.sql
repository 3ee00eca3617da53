-- Every change to a user, its roles or its sessions is announced at commit on the channel
-- `auth_changed`, the user's id as payload: each instance's session cache
-- (`store::session_cache`) forgets that user. A rolled-back change announces nothing, and
-- PostgreSQL folds repeats of one payload within a transaction into one.
CREATE FUNCTION notify_auth_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed jsonb;
BEGIN
    IF TG_OP = 'DELETE' THEN
        changed := to_jsonb(OLD);
    ELSE
        changed := to_jsonb(NEW);
    END IF;
    PERFORM pg_notify('auth_changed', changed ->> TG_ARGV[0]);
    RETURN NULL;
END
$$;

CREATE TRIGGER users_auth_changed AFTER UPDATE OR DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION notify_auth_changed('id');
CREATE TRIGGER user_roles_auth_changed AFTER INSERT OR UPDATE OR DELETE ON user_roles
    FOR EACH ROW EXECUTE FUNCTION notify_auth_changed('user_id');
CREATE TRIGGER auth_sessions_auth_changed AFTER UPDATE OR DELETE ON auth_sessions
    FOR EACH ROW EXECUTE FUNCTION notify_auth_changed('user_id');
