-- Lists and searches at a million rows (issue #32): what each list reads is indexed for its
-- order, its totals are kept by the writes that change them, and text is searched by word.

-- Text search by word, case and accents folded (`fold_text`), on both title and description;
-- the title apart so that a title match ranks first. 'simple' keeps words as written (the
-- content mixes Spanish and English, so no one language's stemmer is right for all of it).
CREATE EXTENSION IF NOT EXISTS unaccent;
CREATE FUNCTION fold_text(text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT lower(public.unaccent('public.unaccent'::regdictionary, $1)) $$;

ALTER TABLE projects
    ADD COLUMN title_words tsvector
        GENERATED ALWAYS AS (to_tsvector('simple', fold_text(title))) STORED,
    ADD COLUMN text_words tsvector
        GENERATED ALWAYS AS (to_tsvector('simple', fold_text(title || ' ' || description))) STORED;
CREATE INDEX idx_projects_text_words ON projects USING GIN (text_words);

-- Orders of the project lists: newest first, ties by id.
DROP INDEX idx_projects_created_at;
CREATE INDEX idx_projects_newest ON projects (created_at DESC, id DESC);
CREATE INDEX idx_projects_listed_newest ON projects (created_at DESC, id DESC)
    WHERE project_type = 'curated' AND status IN ('published_curated', 'bidding', 'published', 'open');
DROP INDEX idx_projects_company;
CREATE INDEX idx_projects_company_newest ON projects (company_id, created_at DESC, id DESC);
DROP INDEX idx_projects_expert;
CREATE INDEX idx_projects_expert_newest ON projects (expert_id, created_at DESC, id DESC);
CREATE INDEX idx_projects_expert_assigned ON projects (expert_id, assigned_at DESC, id DESC);

-- A project's required skills, one row each, lower-cased: the skill filter starts here.
CREATE TABLE project_skills (
    skill       TEXT NOT NULL,
    project_id  BIGINT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    PRIMARY KEY (skill, project_id)
);
CREATE INDEX idx_project_skills_project ON project_skills (project_id);

CREATE FUNCTION projects_skills_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM project_skills WHERE project_id = NEW.id;
    END IF;
    INSERT INTO project_skills (skill, project_id)
        SELECT DISTINCT lower(s), NEW.id FROM jsonb_array_elements_text(NEW.skills_required) AS s
        ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER projects_skills_insert AFTER INSERT ON projects
    FOR EACH ROW EXECUTE FUNCTION projects_skills_sync();
CREATE TRIGGER projects_skills_update AFTER UPDATE OF skills_required ON projects
    FOR EACH ROW WHEN (OLD.skills_required IS DISTINCT FROM NEW.skills_required)
    EXECUTE FUNCTION projects_skills_sync();
INSERT INTO project_skills (skill, project_id)
    SELECT DISTINCT lower(s), p.id FROM projects p, jsonb_array_elements_text(p.skills_required) AS s
    ON CONFLICT DO NOTHING;

-- How many projects there are of each type and status: every total the fixed filters of
-- the project lists need, summed from at most 26 rows instead of counting a million.
CREATE TABLE project_counts (
    project_type    TEXT NOT NULL,
    status          TEXT NOT NULL,
    n               BIGINT NOT NULL,
    PRIMARY KEY (project_type, status)
);
-- Every type and status has its row from the start, so the triggers only update: a move
-- locks its two rows in key order, and two moves in opposite directions cannot deadlock.
INSERT INTO project_counts (project_type, status, n)
    SELECT t, s, 0
      FROM unnest(ARRAY['private', 'curated']) AS t,
           unnest(ARRAY['draft', 'pending_publication', 'published_private', 'published_curated',
                        'bidding', 'assigned', 'in_progress', 'in_review', 'completed', 'disputed',
                        'published', 'open', 'cancelled']) AS s;
UPDATE project_counts c SET n = x.n
  FROM (SELECT project_type, status, COUNT(*) AS n FROM projects GROUP BY project_type, status) x
 WHERE c.project_type = x.project_type AND c.status = x.status;
CREATE FUNCTION projects_count_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        PERFORM 1 FROM project_counts
          WHERE (project_type, status) IN ((OLD.project_type, OLD.status), (NEW.project_type, NEW.status))
          ORDER BY project_type, status FOR UPDATE;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE project_counts SET n = n - 1
         WHERE project_type = OLD.project_type AND status = OLD.status;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        UPDATE project_counts SET n = n + 1
         WHERE project_type = NEW.project_type AND status = NEW.status;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER projects_count_insert_delete AFTER INSERT OR DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION projects_count_sync();
CREATE TRIGGER projects_count_update AFTER UPDATE OF project_type, status ON projects
    FOR EACH ROW WHEN (OLD.project_type IS DISTINCT FROM NEW.project_type OR OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION projects_count_sync();

-- The legacy invitation list (`projects.invited_experts`, specification Versioning 2) one row
-- per invited expert, so that "projects this expert may see" starts from an index.
CREATE TABLE project_legacy_invitees (
    expert_id   BIGINT NOT NULL,
    project_id  BIGINT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    PRIMARY KEY (expert_id, project_id)
);
CREATE INDEX idx_project_legacy_invitees_project ON project_legacy_invitees (project_id);
CREATE FUNCTION projects_invitees_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM project_legacy_invitees WHERE project_id = NEW.id;
    END IF;
    INSERT INTO project_legacy_invitees (expert_id, project_id)
        SELECT DISTINCT (e #>> '{}')::bigint, NEW.id
          FROM jsonb_array_elements(NEW.invited_experts) AS e
         WHERE jsonb_typeof(e) = 'number'
        ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER projects_invitees_insert AFTER INSERT ON projects
    FOR EACH ROW EXECUTE FUNCTION projects_invitees_sync();
CREATE TRIGGER projects_invitees_update AFTER UPDATE OF invited_experts ON projects
    FOR EACH ROW WHEN (OLD.invited_experts IS DISTINCT FROM NEW.invited_experts)
    EXECUTE FUNCTION projects_invitees_sync();
INSERT INTO project_legacy_invitees (expert_id, project_id)
    SELECT DISTINCT (e #>> '{}')::bigint, p.id
      FROM projects p, jsonb_array_elements(p.invited_experts) AS e
     WHERE jsonb_typeof(e) = 'number'
    ON CONFLICT DO NOTHING;
