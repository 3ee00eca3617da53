-- Lists and searches at a million rows (issue #32): what each list reads is indexed for its
-- order, its totals are kept by the writes that change them, and text is searched by word.

-- Text search by word: FTS5 over title and description, case and accents folded by its
-- tokenizer; kept by the triggers below (the projects table holds the text).
CREATE VIRTUAL TABLE projects_fts USING fts5(
    title, description, content = 'projects', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO projects_fts (projects_fts) VALUES ('rebuild');
CREATE TRIGGER projects_fts_insert AFTER INSERT ON projects BEGIN
    INSERT INTO projects_fts (rowid, title, description) VALUES (NEW.id, NEW.title, NEW.description);
END;
CREATE TRIGGER projects_fts_delete AFTER DELETE ON projects BEGIN
    INSERT INTO projects_fts (projects_fts, rowid, title, description)
        VALUES ('delete', OLD.id, OLD.title, OLD.description);
END;
CREATE TRIGGER projects_fts_update AFTER UPDATE OF title, description ON projects BEGIN
    INSERT INTO projects_fts (projects_fts, rowid, title, description)
        VALUES ('delete', OLD.id, OLD.title, OLD.description);
    INSERT INTO projects_fts (rowid, title, description) VALUES (NEW.id, NEW.title, NEW.description);
END;

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
    project_id  INTEGER NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    PRIMARY KEY (skill, project_id)
) WITHOUT ROWID;
CREATE INDEX idx_project_skills_project ON project_skills (project_id);
CREATE TRIGGER projects_skills_insert AFTER INSERT ON projects BEGIN
    INSERT OR IGNORE INTO project_skills (skill, project_id)
        SELECT lower(value), NEW.id FROM json_each(NEW.skills_required);
END;
CREATE TRIGGER projects_skills_update AFTER UPDATE OF skills_required ON projects
    WHEN OLD.skills_required IS NOT NEW.skills_required BEGIN
    DELETE FROM project_skills WHERE project_id = NEW.id;
    INSERT OR IGNORE INTO project_skills (skill, project_id)
        SELECT lower(value), NEW.id FROM json_each(NEW.skills_required);
END;
INSERT OR IGNORE INTO project_skills (skill, project_id)
    SELECT lower(j.value), p.id FROM projects p, json_each(p.skills_required) j;

-- How many projects there are of each type and status: every total the fixed filters of
-- the project lists need, summed from at most 26 rows instead of counting a million.
CREATE TABLE project_counts (
    project_type    TEXT NOT NULL,
    status          TEXT NOT NULL,
    n               INTEGER NOT NULL,
    PRIMARY KEY (project_type, status)
) WITHOUT ROWID;
INSERT INTO project_counts (project_type, status, n)
    SELECT project_type, status, COUNT(*) FROM projects GROUP BY project_type, status;
CREATE TRIGGER projects_count_insert AFTER INSERT ON projects BEGIN
    INSERT INTO project_counts (project_type, status, n) VALUES (NEW.project_type, NEW.status, 1)
        ON CONFLICT (project_type, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER projects_count_delete AFTER DELETE ON projects BEGIN
    UPDATE project_counts SET n = n - 1 WHERE project_type = OLD.project_type AND status = OLD.status;
END;
CREATE TRIGGER projects_count_update AFTER UPDATE OF project_type, status ON projects
    WHEN OLD.project_type IS NOT NEW.project_type OR OLD.status IS NOT NEW.status BEGIN
    UPDATE project_counts SET n = n - 1 WHERE project_type = OLD.project_type AND status = OLD.status;
    INSERT INTO project_counts (project_type, status, n) VALUES (NEW.project_type, NEW.status, 1)
        ON CONFLICT (project_type, status) DO UPDATE SET n = n + 1;
END;

-- The legacy invitation list (`projects.invited_experts`, specification Versioning 2) one row
-- per invited expert, so that "projects this expert may see" starts from an index.
CREATE TABLE project_legacy_invitees (
    expert_id   INTEGER NOT NULL,
    project_id  INTEGER NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    PRIMARY KEY (expert_id, project_id)
) WITHOUT ROWID;
CREATE INDEX idx_project_legacy_invitees_project ON project_legacy_invitees (project_id);
CREATE TRIGGER projects_invitees_insert AFTER INSERT ON projects BEGIN
    INSERT OR IGNORE INTO project_legacy_invitees (expert_id, project_id)
        SELECT value, NEW.id FROM json_each(NEW.invited_experts) WHERE type = 'integer';
END;
CREATE TRIGGER projects_invitees_update AFTER UPDATE OF invited_experts ON projects
    WHEN OLD.invited_experts IS NOT NEW.invited_experts BEGIN
    DELETE FROM project_legacy_invitees WHERE project_id = NEW.id;
    INSERT OR IGNORE INTO project_legacy_invitees (expert_id, project_id)
        SELECT value, NEW.id FROM json_each(NEW.invited_experts) WHERE type = 'integer';
END;
INSERT OR IGNORE INTO project_legacy_invitees (expert_id, project_id)
    SELECT j.value, p.id FROM projects p, json_each(p.invited_experts) j WHERE j.type = 'integer';
