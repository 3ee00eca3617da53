-- Expert search at scale (issue #32): words of a profile's name, bio and main area, and of
-- skill names, under full-text indexes (case and accents folded, as migration 0016's
-- projects); the expert list's order (verified first, then newest) under an index.
ALTER TABLE profiles ADD COLUMN text_words tsvector GENERATED ALWAYS AS (
    to_tsvector('simple', fold_text(
        COALESCE(full_name, '') || ' ' || COALESCE(bio, '') || ' ' || COALESCE(main_area, '')))
) STORED;
CREATE INDEX idx_profiles_text_words ON profiles USING GIN (text_words);
CREATE INDEX idx_profiles_experts_listed ON profiles (is_verified DESC, created_at DESC, id DESC)
    WHERE profile_type = 'experto';
ALTER TABLE skills ADD COLUMN name_words tsvector
    GENERATED ALWAYS AS (to_tsvector('simple', fold_text(name))) STORED;
