-- Exact totals of common searches and of the administrators' profile list at scale (issue
-- #32), kept by the writes in the tallies of 0023 instead of counted from every matching row.
--
-- `project_words`: projects by word of their title and description (the lexemes of
-- `text_words`), type and status; key `<word> <type> <status>`. A one-word search's total,
-- for any visibility rule over type and status, is a sum over a few keys.
CREATE FUNCTION project_words_tally(p projects, sign BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'project_words', w.lexeme || ' ' || p.project_type || ' ' || p.status, sign, 0
      FROM unnest(p.text_words) AS w
$$;
CREATE FUNCTION projects_words_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM project_words_tally(OLD, -1); END IF;
    IF TG_OP <> 'DELETE' THEN PERFORM project_words_tally(NEW, 1); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER projects_words_tally_insert_delete AFTER INSERT OR DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION projects_words_tally_sync();
CREATE TRIGGER projects_words_tally_update
    AFTER UPDATE OF title, description, project_type, status ON projects
    FOR EACH ROW
    WHEN ((OLD.text_words, OLD.project_type, OLD.status)
          IS DISTINCT FROM (NEW.text_words, NEW.project_type, NEW.status))
    EXECUTE FUNCTION projects_words_tally_sync();

-- `experts_by_skill`: listed experts (expert profiles of active users, as 0027's
-- `listed_experts`) by skill and verification; key `<skill id>:<true|false>`. A change of a
-- profile's skills locks the profile, then its user, as a profile's own change does (0027), so
-- a verification or an activity change racing it waits for it or is seen by it.
CREATE FUNCTION profile_skills_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ps profile_skills;
    verified BOOLEAN;
    active BOOLEAN;
BEGIN
    IF TG_OP = 'DELETE' THEN ps := OLD; ELSE ps := NEW; END IF;
    SELECT p.is_verified INTO verified FROM profiles p
     WHERE p.id = ps.profile_id AND p.profile_type = 'experto' FOR NO KEY UPDATE;
    IF NOT FOUND THEN RETURN NULL; END IF;
    SELECT u.is_active INTO active FROM users u
      JOIN profiles p ON p.user_id = u.id
     WHERE p.id = ps.profile_id FOR NO KEY UPDATE OF u;
    IF NOT COALESCE(active, FALSE) THEN RETURN NULL; END IF;
    INSERT INTO tally_deltas (name, key, n, total) VALUES
        ('experts_by_skill', ps.skill_id || ':' || CASE WHEN verified THEN 'true' ELSE 'false' END,
         CASE WHEN TG_OP = 'DELETE' THEN -1 ELSE 1 END, 0);
    RETURN NULL;
END $$;
CREATE TRIGGER profile_skills_tally AFTER INSERT OR DELETE ON profile_skills
    FOR EACH ROW EXECUTE FUNCTION profile_skills_tally_sync();

CREATE FUNCTION profiles_skills_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    active BOOLEAN;
BEGIN
    SELECT is_active INTO active FROM users WHERE id = NEW.user_id FOR NO KEY UPDATE;
    IF NOT COALESCE(active, FALSE) THEN RETURN NULL; END IF;
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'experts_by_skill',
           s.skill_id || ':' || CASE WHEN OLD.is_verified THEN 'true' ELSE 'false' END, -1, 0
      FROM profile_skills s WHERE s.profile_id = OLD.id AND OLD.profile_type = 'experto'
    UNION ALL
    SELECT 'experts_by_skill',
           s.skill_id || ':' || CASE WHEN NEW.is_verified THEN 'true' ELSE 'false' END, 1, 0
      FROM profile_skills s WHERE s.profile_id = NEW.id AND NEW.profile_type = 'experto';
    RETURN NULL;
END $$;
CREATE TRIGGER profiles_skills_tally AFTER UPDATE OF profile_type, is_verified ON profiles
    FOR EACH ROW
    WHEN ((OLD.profile_type, OLD.is_verified) IS DISTINCT FROM (NEW.profile_type, NEW.is_verified))
    EXECUTE FUNCTION profiles_skills_tally_sync();

CREATE FUNCTION users_skills_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'experts_by_skill',
           s.skill_id || ':' || CASE WHEN p.is_verified THEN 'true' ELSE 'false' END,
           CASE WHEN NEW.is_active THEN 1 ELSE -1 END, 0
      FROM profiles p JOIN profile_skills s ON s.profile_id = p.id
     WHERE p.user_id = NEW.id AND p.profile_type = 'experto';
    RETURN NULL;
END $$;
CREATE TRIGGER users_skills_tally AFTER UPDATE OF is_active ON users
    FOR EACH ROW WHEN (OLD.is_active IS DISTINCT FROM NEW.is_active)
    EXECUTE FUNCTION users_skills_tally_sync();

-- `profiles`: every profile, whatever its user's state (the administrators' list shows them
-- all), by type, verification and verification status; key `<type>:<true|false>:<status>`.
CREATE FUNCTION profile_kind_tally(p profiles, sign BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, key, n, total) VALUES
        ('profiles', p.profile_type || ':' || CASE WHEN p.is_verified THEN 'true' ELSE 'false' END
                     || ':' || p.verification_status, sign, 0)
$$;
CREATE FUNCTION profiles_kind_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM profile_kind_tally(OLD, -1); END IF;
    IF TG_OP <> 'DELETE' THEN PERFORM profile_kind_tally(NEW, 1); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER profiles_kind_tally_insert_delete AFTER INSERT OR DELETE ON profiles
    FOR EACH ROW EXECUTE FUNCTION profiles_kind_tally_sync();
CREATE TRIGGER profiles_kind_tally_update
    AFTER UPDATE OF profile_type, is_verified, verification_status ON profiles
    FOR EACH ROW
    WHEN ((OLD.profile_type, OLD.is_verified, OLD.verification_status)
          IS DISTINCT FROM (NEW.profile_type, NEW.is_verified, NEW.verification_status))
    EXECUTE FUNCTION profiles_kind_tally_sync();

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'project_words', w.lexeme || ' ' || p.project_type || ' ' || p.status, 0, COUNT(*), 0
  FROM projects p, unnest(p.text_words) AS w
 GROUP BY 2
UNION ALL
SELECT 'experts_by_skill',
       s.skill_id || ':' || CASE WHEN p.is_verified THEN 'true' ELSE 'false' END, 0, COUNT(*), 0
  FROM profile_skills s JOIN profiles p ON p.id = s.profile_id JOIN users u ON u.id = p.user_id
 WHERE p.profile_type = 'experto' AND u.is_active = TRUE
 GROUP BY 2
UNION ALL
SELECT 'profiles', profile_type || ':' || CASE WHEN is_verified THEN 'true' ELSE 'false' END
                   || ':' || verification_status, 0, COUNT(*), 0
  FROM profiles GROUP BY 2;
