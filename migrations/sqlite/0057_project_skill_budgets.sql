-- A project's budget beside each of its skills (issue #63, the first backfill): the skill
-- and budget filters of the project lists together read one range of an index instead of
-- every project of the skill. Expand: the column, kept by the triggers from now on; the rows
-- that existed before are filled by the `project_skill_budgets` backfill
-- (`store::backfills`), which only fills a NULL. The lists read `projects.budget_minor` until
-- it finishes.
ALTER TABLE project_skills ADD COLUMN budget_minor INTEGER;

DROP TRIGGER projects_skills_insert;
CREATE TRIGGER projects_skills_insert AFTER INSERT ON projects BEGIN
    INSERT OR IGNORE INTO project_skills (skill, project_id, budget_minor)
        SELECT lower(value), NEW.id, NEW.budget_minor FROM json_each(NEW.skills_required);
END;
DROP TRIGGER projects_skills_update;
CREATE TRIGGER projects_skills_update AFTER UPDATE OF skills_required ON projects
    WHEN OLD.skills_required IS NOT NEW.skills_required BEGIN
    DELETE FROM project_skills WHERE project_id = NEW.id;
    INSERT OR IGNORE INTO project_skills (skill, project_id, budget_minor)
        SELECT lower(value), NEW.id, NEW.budget_minor FROM json_each(NEW.skills_required);
END;
CREATE TRIGGER projects_skills_budget AFTER UPDATE OF budget_minor ON projects
    WHEN OLD.budget_minor IS NOT NEW.budget_minor BEGIN
    UPDATE project_skills SET budget_minor = NEW.budget_minor WHERE project_id = NEW.id;
END;

INSERT INTO backfills (name, upto)
    SELECT 'project_skill_budgets', COALESCE(MAX(id), 0) FROM projects;
