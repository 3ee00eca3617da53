SET LOCAL lock_timeout = '1s';
SET LOCAL statement_timeout = '5s';
-- A project's budget beside each of its skills (issue #63, the first backfill): the skill
-- and budget filters of the project lists together read one range of an index (0058)
-- instead of every project of the skill. Expand: the column, kept by the triggers from now
-- on; the rows that existed before are filled by the `project_skill_budgets` backfill
-- (`store::backfills`), which only fills a NULL, so a value a trigger wrote is never
-- overwritten by an older one. The lists read `projects.budget_minor` until it finishes.
ALTER TABLE project_skills ADD COLUMN budget_minor BIGINT;

CREATE OR REPLACE FUNCTION projects_skills_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM project_skills WHERE project_id = NEW.id;
    END IF;
    INSERT INTO project_skills (skill, project_id, budget_minor)
        SELECT DISTINCT lower(s), NEW.id, NEW.budget_minor
          FROM jsonb_array_elements_text(NEW.skills_required) AS s
        ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE FUNCTION projects_skills_budget() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE project_skills SET budget_minor = NEW.budget_minor WHERE project_id = NEW.id;
    RETURN NULL;
END $$;
-- Its lock on `projects` waits for the inserts under way, so every project with an id up to
-- the one registered below is in the table when it is read, and every later one is written
-- by the triggers above.
CREATE TRIGGER projects_skills_budget AFTER UPDATE OF budget_minor ON projects
    FOR EACH ROW WHEN (OLD.budget_minor IS DISTINCT FROM NEW.budget_minor)
    EXECUTE FUNCTION projects_skills_budget();

INSERT INTO backfills (name, upto)
    SELECT 'project_skill_budgets', COALESCE(MAX(id), 0) FROM projects;
