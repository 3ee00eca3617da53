-- One search text per account (issue #32), as PostgreSQL's 0039: its e-mail, username and
-- profiles' names, one per line, under one FTS5 trigram index (case and accents folded), so
-- that the administrators' search counts its matches from the index alone. Replaces 0019's
-- `users_search` and `profile_names`, whose matches were unioned through `profiles`.
DROP TRIGGER users_search_insert;
DROP TRIGGER users_search_delete;
DROP TRIGGER users_search_update;
DROP TABLE users_search;
DROP TRIGGER profile_names_insert;
DROP TRIGGER profile_names_delete;
DROP TRIGGER profile_names_update;
DROP TABLE profile_names;

-- Each account's text as the index holds it: the one definition the triggers read.
CREATE VIEW account_search_texts AS
SELECT u.id,
       u.email || char(10) || u.username || COALESCE(
           (SELECT group_concat(char(10) || COALESCE(p.full_name, '') || char(10)
                                || COALESCE(p.company_name, ''), '')
              FROM profiles p WHERE p.user_id = u.id), '') AS text
  FROM users u;

-- Contentless: the index keeps no copy of the text, only what it needs to match and delete.
CREATE VIRTUAL TABLE account_search USING fts5(
    text, content = '', contentless_delete = 1, tokenize = 'trigram remove_diacritics 1'
);
INSERT INTO account_search (rowid, text) SELECT id, text FROM account_search_texts;

CREATE TRIGGER users_account_search_insert AFTER INSERT ON users BEGIN
    INSERT INTO account_search (rowid, text) SELECT id, text FROM account_search_texts
     WHERE id = NEW.id;
END;
CREATE TRIGGER users_account_search_update AFTER UPDATE OF email, username ON users BEGIN
    DELETE FROM account_search WHERE rowid = NEW.id;
    INSERT INTO account_search (rowid, text) SELECT id, text FROM account_search_texts
     WHERE id = NEW.id;
END;
CREATE TRIGGER users_account_search_delete AFTER DELETE ON users BEGIN
    DELETE FROM account_search WHERE rowid = OLD.id;
END;

-- A profile's names, or the profile itself, changed (an account deleted with its profiles
-- is not found).
CREATE TRIGGER profiles_account_search_insert AFTER INSERT ON profiles BEGIN
    DELETE FROM account_search WHERE rowid = NEW.user_id;
    INSERT INTO account_search (rowid, text) SELECT id, text FROM account_search_texts
     WHERE id = NEW.user_id;
END;
CREATE TRIGGER profiles_account_search_update
    AFTER UPDATE OF full_name, company_name, user_id ON profiles BEGIN
    DELETE FROM account_search WHERE rowid IN (OLD.user_id, NEW.user_id);
    INSERT INTO account_search (rowid, text) SELECT id, text FROM account_search_texts
     WHERE id IN (OLD.user_id, NEW.user_id);
END;
CREATE TRIGGER profiles_account_search_delete AFTER DELETE ON profiles BEGIN
    DELETE FROM account_search WHERE rowid = OLD.user_id;
    INSERT INTO account_search (rowid, text) SELECT id, text FROM account_search_texts
     WHERE id = OLD.user_id;
END;
