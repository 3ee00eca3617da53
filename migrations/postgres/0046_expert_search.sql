-- The expert directory's search at scale (issue #32). 0038 kept each profile's search
-- document on its wide `profiles` row, and a search's total counted every match there, each
-- joined to its user for the directory's rule, twice a page (the list's total and its
-- verified tier's): 35,265 matches for `skill=python&q=data` at L, 291 ms. Now:
-- - `expert_search` holds the documents of listed experts only (expert profiles of active
--   users, as 0027's `listed_experts`), beside what the directory orders by, so a search
--   reads one narrow table and no user;
-- - `expert_words` (the tallies of 0023) keeps, for each word of a listed expert's document,
--   how many listed experts hold it, alone and beside each of their skills, by verification:
--   key `<word>[ #<skill id>]:<true|false>`. A one-word search's total, with a skill or not,
--   is two keys, whatever it matches.
CREATE TABLE expert_search (
    profile_id  BIGINT PRIMARY KEY REFERENCES profiles (id) ON DELETE CASCADE,
    is_verified BOOLEAN NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    -- 0038's document without positions: matched by words, never by phrase or rank.
    words       tsvector NOT NULL
);

-- Brings a profile's row in line with the profile: its document when it is listed, no row
-- otherwise. An unchanged row is not written, so the tally below sees real changes only.
-- PL/pgSQL keeps the two statements' plans for the session (an SQL function plans them at
-- every call: a third of a listed expert's insert).
CREATE FUNCTION expert_search_refresh(profile BIGINT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM expert_search e
     WHERE e.profile_id = profile
       AND NOT EXISTS (SELECT 1 FROM profiles p JOIN users u ON u.id = p.user_id
                        WHERE p.id = profile AND p.profile_type = 'experto' AND u.is_active);
    INSERT INTO expert_search (profile_id, is_verified, created_at, words)
    SELECT p.id, p.is_verified, p.created_at,
           strip(profile_search_words(p.id, p.full_name, p.bio, p.main_area))
      FROM profiles p JOIN users u ON u.id = p.user_id
     WHERE p.id = profile AND p.profile_type = 'experto' AND u.is_active
    ON CONFLICT (profile_id) DO UPDATE
       SET is_verified = EXCLUDED.is_verified, created_at = EXCLUDED.created_at,
           words = EXCLUDED.words
     WHERE (expert_search.is_verified, expert_search.created_at, expert_search.words)
           IS DISTINCT FROM (EXCLUDED.is_verified, EXCLUDED.created_at, EXCLUDED.words);
END $$;

-- Each key a listed expert counts in: every word of the document alone and beside each of
-- its skills' tokens (`#<id>`, which no word can be), by verification.
CREATE FUNCTION expert_word_keys(words tsvector, verified BOOLEAN) RETURNS SETOF text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT w.lexeme || COALESCE(' ' || s.lexeme, '')
           || CASE WHEN verified THEN ':true' ELSE ':false' END
      FROM unnest(words) w
      CROSS JOIN LATERAL (SELECT NULL::text AS lexeme
                          UNION ALL
                          SELECT k.lexeme FROM unnest(words) k WHERE left(k.lexeme, 1) = '#') s
     WHERE left(w.lexeme, 1) <> '#'
$$;

INSERT INTO expert_search (profile_id, is_verified, created_at, words)
SELECT p.id, p.is_verified, p.created_at, strip(p.search_words)
  FROM profiles p JOIN users u ON u.id = p.user_id
 WHERE p.profile_type = 'experto' AND u.is_active;
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'expert_words', k, 0, COUNT(*), 0
  FROM expert_search e, expert_word_keys(e.words, e.is_verified) k
 GROUP BY k;
CREATE INDEX idx_expert_search_words ON expert_search USING GIN (words);
-- The directory's order within a tier, for pages walked rather than sorted.
CREATE INDEX idx_expert_search_order ON expert_search (is_verified, created_at, profile_id);

-- A row's change moves its keys: only those that differ, so a rename of one skill moves a
-- few keys a holder, not all of them.
CREATE FUNCTION expert_search_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO tally_deltas (name, key, n, total)
        SELECT 'expert_words', k, 1, 0 FROM expert_word_keys(NEW.words, NEW.is_verified) k;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO tally_deltas (name, key, n, total)
        SELECT 'expert_words', k, -1, 0 FROM expert_word_keys(OLD.words, OLD.is_verified) k;
    ELSE
        INSERT INTO tally_deltas (name, key, n, total)
        SELECT 'expert_words', d.k, SUM(d.n), 0
          FROM (SELECT k, -1 AS n FROM expert_word_keys(OLD.words, OLD.is_verified) k
                UNION ALL
                SELECT k, 1 FROM expert_word_keys(NEW.words, NEW.is_verified) k) d
         GROUP BY d.k HAVING SUM(d.n) <> 0;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER expert_search_tally AFTER INSERT OR UPDATE OR DELETE ON expert_search
    FOR EACH ROW EXECUTE FUNCTION expert_search_tally_sync();

-- 0038's document on the profile goes: the table above is its one home.
DROP TRIGGER profiles_search_words ON profiles;
DROP FUNCTION profiles_search_words_sync();
DROP TRIGGER profile_skills_words ON profile_skills;
DROP FUNCTION profile_skills_search_words_sync();
DROP TRIGGER skills_search_words ON skills;
DROP FUNCTION skills_search_words_sync();
ALTER TABLE profiles DROP COLUMN search_words;

-- A profile's own change. Its user's row is locked first, as 0027's triggers do, so a change
-- of the user's activity racing it waits for it or is seen by it. A deleted profile's row
-- goes with it (the key cascades).
CREATE FUNCTION profiles_expert_search_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM users WHERE id = NEW.user_id FOR NO KEY UPDATE;
    PERFORM expert_search_refresh(NEW.id);
    RETURN NULL;
END $$;
CREATE TRIGGER profiles_expert_search
    AFTER INSERT OR UPDATE OF user_id, profile_type, is_verified, created_at, full_name, bio,
                              main_area ON profiles
    FOR EACH ROW EXECUTE FUNCTION profiles_expert_search_sync();

-- An account activated or deactivated: its profiles.
CREATE FUNCTION users_expert_search_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM expert_search_refresh(p.id) FROM profiles p WHERE p.user_id = NEW.id;
    RETURN NULL;
END $$;
CREATE TRIGGER users_expert_search AFTER UPDATE OF is_active ON users
    FOR EACH ROW WHEN (OLD.is_active IS DISTINCT FROM NEW.is_active)
    EXECUTE FUNCTION users_expert_search_sync();

-- A skill added or removed: the profile, then its user, locked as 0030's trigger does (a
-- profile deleted with its skills is not found, and its row is gone with it).
CREATE FUNCTION profile_skills_expert_search_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    profile BIGINT := CASE WHEN TG_OP = 'DELETE' THEN OLD.profile_id ELSE NEW.profile_id END;
BEGIN
    PERFORM 1 FROM profiles p WHERE p.id = profile FOR NO KEY UPDATE;
    PERFORM 1 FROM users u JOIN profiles p ON p.user_id = u.id
     WHERE p.id = profile FOR NO KEY UPDATE OF u;
    PERFORM expert_search_refresh(profile);
    RETURN NULL;
END $$;
CREATE TRIGGER profile_skills_words AFTER INSERT OR DELETE ON profile_skills
    FOR EACH ROW EXECUTE FUNCTION profile_skills_expert_search_sync();

-- A skill renamed: the listed experts holding it.
CREATE FUNCTION skills_expert_search_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE expert_search e
       SET words = strip(profile_search_words(p.id, p.full_name, p.bio, p.main_area))
      FROM profiles p
     WHERE p.id = e.profile_id
       AND e.profile_id IN (SELECT profile_id FROM profile_skills WHERE skill_id = NEW.id);
    RETURN NULL;
END $$;
CREATE TRIGGER skills_expert_search AFTER UPDATE OF name ON skills
    FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name)
    EXECUTE FUNCTION skills_expert_search_sync();
