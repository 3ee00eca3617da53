-- One search text per account (issue #32): its e-mail, username and profiles' names, folded
-- (case and accents), one per line, in a narrow table under one trigram index. The
-- administrators' search is then one index scan whose matches are rechecked on short rows;
-- before, three trigram indexes (0019) were read and unioned, and each of a profile's
-- candidates folded on its wide row (72 ms for `search=garcia` at M, most of it in the
-- profiles' recheck). A pattern holding a line break could match across two fields.
CREATE TABLE account_search (
    user_id BIGINT PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    text    TEXT NOT NULL
);

-- The account's text, or NULL when it does not exist (being deleted).
CREATE FUNCTION account_search_text(account BIGINT) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT fold_text(u.email || E'\n' || u.username || COALESCE(
               (SELECT string_agg(E'\n' || COALESCE(p.full_name, '') || E'\n'
                                  || COALESCE(p.company_name, ''), '')
                  FROM profiles p WHERE p.user_id = u.id), ''))
      FROM users u WHERE u.id = account
$$;

CREATE FUNCTION account_search_refresh(account BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO account_search (user_id, text)
    SELECT account, t.text FROM (SELECT account_search_text(account) AS text) t
     WHERE t.text IS NOT NULL
    ON CONFLICT (user_id) DO UPDATE SET text = EXCLUDED.text
$$;

INSERT INTO account_search (user_id, text) SELECT id, account_search_text(id) FROM users;
CREATE INDEX idx_account_search_text ON account_search USING GIN (text gin_trgm_ops);
DROP INDEX idx_users_email_trgm;
DROP INDEX idx_users_username_trgm;
DROP INDEX idx_profiles_names_trgm;

CREATE FUNCTION users_account_search_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM account_search_refresh(NEW.id);
    RETURN NULL;
END $$;
CREATE TRIGGER users_account_search AFTER INSERT OR UPDATE OF email, username ON users
    FOR EACH ROW EXECUTE FUNCTION users_account_search_sync();

-- A profile's names, or the profile itself, changed; an account deleted with its profiles
-- is not found, and its text goes with it.
CREATE FUNCTION profiles_account_search_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM account_search_refresh(NEW.user_id);
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM account_search_refresh(OLD.user_id);
    ELSE
        PERFORM account_search_refresh(OLD.user_id);
        IF NEW.user_id <> OLD.user_id THEN
            PERFORM account_search_refresh(NEW.user_id);
        END IF;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER profiles_account_search
    AFTER INSERT OR DELETE OR UPDATE OF full_name, company_name, user_id ON profiles
    FOR EACH ROW EXECUTE FUNCTION profiles_account_search_sync();
