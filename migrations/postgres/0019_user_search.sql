-- The administrators' user list at scale (issue #32): its order under an index, and its
-- search (a substring of the e-mail, the username or a profile's name; case folded, and
-- accents in names) under trigram indexes.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
DROP INDEX idx_users_created_at;
CREATE INDEX idx_users_newest ON users (created_at DESC, id DESC);
CREATE INDEX idx_users_email_trgm ON users USING GIN (LOWER(email) gin_trgm_ops);
CREATE INDEX idx_users_username_trgm ON users USING GIN (LOWER(username) gin_trgm_ops);
CREATE INDEX idx_profiles_names_trgm ON profiles USING GIN (
    fold_text(COALESCE(full_name, '') || ' ' || COALESCE(company_name, '')) gin_trgm_ops);
