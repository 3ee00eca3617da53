-- Expert search at scale (issue #32): words of a profile's name, bio and main area, and of
-- skill names, under FTS5 tables (case and accents folded, as migration 0016's projects);
-- the expert list's order (verified first, then newest) under an index.
CREATE VIRTUAL TABLE profiles_fts USING fts5(
    full_name, bio, main_area, content = 'profiles', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO profiles_fts (profiles_fts) VALUES ('rebuild');
CREATE TRIGGER profiles_fts_insert AFTER INSERT ON profiles BEGIN
    INSERT INTO profiles_fts (rowid, full_name, bio, main_area)
        VALUES (NEW.id, NEW.full_name, NEW.bio, NEW.main_area);
END;
CREATE TRIGGER profiles_fts_delete AFTER DELETE ON profiles BEGIN
    INSERT INTO profiles_fts (profiles_fts, rowid, full_name, bio, main_area)
        VALUES ('delete', OLD.id, OLD.full_name, OLD.bio, OLD.main_area);
END;
CREATE TRIGGER profiles_fts_update AFTER UPDATE OF full_name, bio, main_area ON profiles BEGIN
    INSERT INTO profiles_fts (profiles_fts, rowid, full_name, bio, main_area)
        VALUES ('delete', OLD.id, OLD.full_name, OLD.bio, OLD.main_area);
    INSERT INTO profiles_fts (rowid, full_name, bio, main_area)
        VALUES (NEW.id, NEW.full_name, NEW.bio, NEW.main_area);
END;
CREATE INDEX idx_profiles_experts_listed ON profiles (is_verified DESC, created_at DESC, id DESC)
    WHERE profile_type = 'experto';

CREATE VIRTUAL TABLE skills_fts USING fts5(
    name, content = 'skills', content_rowid = 'id', tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO skills_fts (skills_fts) VALUES ('rebuild');
CREATE TRIGGER skills_fts_insert AFTER INSERT ON skills BEGIN
    INSERT INTO skills_fts (rowid, name) VALUES (NEW.id, NEW.name);
END;
CREATE TRIGGER skills_fts_delete AFTER DELETE ON skills BEGIN
    INSERT INTO skills_fts (skills_fts, rowid, name) VALUES ('delete', OLD.id, OLD.name);
END;
CREATE TRIGGER skills_fts_update AFTER UPDATE OF name ON skills BEGIN
    INSERT INTO skills_fts (skills_fts, rowid, name) VALUES ('delete', OLD.id, OLD.name);
    INSERT INTO skills_fts (rowid, name) VALUES (NEW.id, NEW.name);
END;
