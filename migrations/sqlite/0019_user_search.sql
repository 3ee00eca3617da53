-- The administrators' user list at scale (issue #32): its order under an index, and its
-- search (a substring of the e-mail, the username or a profile's name; case folded, and
-- accents) under FTS5 trigram indexes, kept by the triggers below.
DROP INDEX idx_users_created_at;
CREATE INDEX idx_users_newest ON users (created_at DESC, id DESC);

CREATE VIRTUAL TABLE users_search USING fts5(
    email, username, content = 'users', content_rowid = 'id',
    tokenize = 'trigram remove_diacritics 1'
);
INSERT INTO users_search (users_search) VALUES ('rebuild');
CREATE TRIGGER users_search_insert AFTER INSERT ON users BEGIN
    INSERT INTO users_search (rowid, email, username) VALUES (NEW.id, NEW.email, NEW.username);
END;
CREATE TRIGGER users_search_delete AFTER DELETE ON users BEGIN
    INSERT INTO users_search (users_search, rowid, email, username)
        VALUES ('delete', OLD.id, OLD.email, OLD.username);
END;
CREATE TRIGGER users_search_update AFTER UPDATE OF email, username ON users BEGIN
    INSERT INTO users_search (users_search, rowid, email, username)
        VALUES ('delete', OLD.id, OLD.email, OLD.username);
    INSERT INTO users_search (rowid, email, username) VALUES (NEW.id, NEW.email, NEW.username);
END;

CREATE VIRTUAL TABLE profile_names USING fts5(
    full_name, company_name, content = 'profiles', content_rowid = 'id',
    tokenize = 'trigram remove_diacritics 1'
);
INSERT INTO profile_names (profile_names) VALUES ('rebuild');
CREATE TRIGGER profile_names_insert AFTER INSERT ON profiles BEGIN
    INSERT INTO profile_names (rowid, full_name, company_name)
        VALUES (NEW.id, NEW.full_name, NEW.company_name);
END;
CREATE TRIGGER profile_names_delete AFTER DELETE ON profiles BEGIN
    INSERT INTO profile_names (profile_names, rowid, full_name, company_name)
        VALUES ('delete', OLD.id, OLD.full_name, OLD.company_name);
END;
CREATE TRIGGER profile_names_update AFTER UPDATE OF full_name, company_name ON profiles BEGIN
    INSERT INTO profile_names (profile_names, rowid, full_name, company_name)
        VALUES ('delete', OLD.id, OLD.full_name, OLD.company_name);
    INSERT INTO profile_names (rowid, full_name, company_name)
        VALUES (NEW.id, NEW.full_name, NEW.company_name);
END;
