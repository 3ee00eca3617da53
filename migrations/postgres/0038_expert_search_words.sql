-- One search document per profile (issue #32): the words of its name, bio and main area, the
-- words of its skills' names, and a token per skill (`#<skill id>`, which no searched word
-- can be: words are letters and digits only). A search with a skill is then one full-text
-- match, the word's and the skill's posting lists intersected in the index, instead of a
-- skill's holders joined to every profile that has the word (157 ms for `skill=python&q=data`
-- at M, most of it testing the word on every expert). Replaces 0017's `text_words` and
-- `name_words`; the words may now fall in the text or the skill names, each anywhere.
CREATE FUNCTION profile_search_words(profile BIGINT, full_name TEXT, bio TEXT, main_area TEXT)
RETURNS tsvector LANGUAGE sql STABLE AS $$
    SELECT to_tsvector('simple', fold_text(
               COALESCE(full_name, '') || ' ' || COALESCE(bio, '') || ' ' || COALESCE(main_area, '')))
        || COALESCE((SELECT to_tsvector('simple', fold_text(string_agg(s.name, ' ')))
                            || array_to_tsvector(array_agg('#' || s.id))
                       FROM profile_skills ps JOIN skills s ON s.id = ps.skill_id
                      WHERE ps.profile_id = profile), ''::tsvector)
$$;

ALTER TABLE profiles DROP COLUMN text_words;
ALTER TABLE skills DROP COLUMN name_words;
ALTER TABLE profiles ADD COLUMN search_words tsvector NOT NULL DEFAULT ''::tsvector;
UPDATE profiles SET search_words = profile_search_words(id, full_name, bio, main_area);
CREATE INDEX idx_profiles_search_words ON profiles USING GIN (search_words);

-- The profile's own text.
CREATE FUNCTION profiles_search_words_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.search_words := profile_search_words(NEW.id, NEW.full_name, NEW.bio, NEW.main_area);
    RETURN NEW;
END $$;
CREATE TRIGGER profiles_search_words BEFORE INSERT OR UPDATE OF full_name, bio, main_area
    ON profiles FOR EACH ROW EXECUTE FUNCTION profiles_search_words_sync();

-- A skill added or removed. 0030's trigger, named before this one, has already locked the
-- profile; a profile deleted with its skills is not found.
CREATE FUNCTION profile_skills_search_words_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    profile BIGINT := CASE WHEN TG_OP = 'DELETE' THEN OLD.profile_id ELSE NEW.profile_id END;
BEGIN
    UPDATE profiles p SET search_words = profile_search_words(p.id, p.full_name, p.bio, p.main_area)
     WHERE p.id = profile;
    RETURN NULL;
END $$;
CREATE TRIGGER profile_skills_words AFTER INSERT OR DELETE ON profile_skills
    FOR EACH ROW EXECUTE FUNCTION profile_skills_search_words_sync();

-- A skill renamed: the profiles holding it.
CREATE FUNCTION skills_search_words_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE profiles p SET search_words = profile_search_words(p.id, p.full_name, p.bio, p.main_area)
     WHERE p.id IN (SELECT profile_id FROM profile_skills WHERE skill_id = NEW.id);
    RETURN NULL;
END $$;
CREATE TRIGGER skills_search_words AFTER UPDATE OF name ON skills
    FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name)
    EXECUTE FUNCTION skills_search_words_sync();
