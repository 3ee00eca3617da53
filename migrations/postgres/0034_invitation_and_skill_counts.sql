-- Kept counts for two totals that grew with one expert's invitations or one skill's projects
-- (issue #32), in the tallies of 0023:
--
-- `invitations_by_expert`, per expert: the projects they are invited to (formally or in the
-- legacy list, once each), key `<project status>:<true|false>` (`true` once they applied).
-- An expert's invitations, available projects and statistics add up a few keys instead of
-- reading every invitation and its project (45,000 for the busiest expert at L: 282 ms).
--
-- `projects_by_skill`: projects by `<type> <status> <skill>` (the skill as `project_skills`
-- holds it), so that a skill filter's total, for any visibility rule over type and status,
-- is a sum over a few keys.
--
-- A project's own triggers count what the row carries (status, type, skills, legacy list),
-- the old row's and the new one's, so that their order beside 0016's triggers that rebuild
-- `project_skills` and `project_legacy_invitees` does not matter. A project's deletion is
-- counted before the row goes; the cascaded deletions of its invitations and applications,
-- finding no project, count nothing. An invitation or an application locks its project's row
-- before it reads the project's status and the other table, so that a status change, an
-- invitation and an application of the same pair running at once are counted one after the
-- other.

-- The experts invited to project `p`: its legacy list (as 0016 reads it) and its formal
-- invitations, each once.
CREATE FUNCTION project_invitees(p projects) RETURNS SETOF BIGINT LANGUAGE sql STABLE AS $$
    SELECT (e #>> '{}')::bigint FROM jsonb_array_elements(p.invited_experts) AS e
     WHERE jsonb_typeof(e) = 'number'
    UNION
    SELECT expert_id FROM project_invitations WHERE project_id = p.id
$$;

-- Whether `expert` has applied to project `pid`, as the key's suffix.
CREATE FUNCTION applied_key(pid BIGINT, expert BIGINT) RETURNS TEXT LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM applications WHERE project_id = pid AND expert_id = expert)
                THEN 'true' ELSE 'false' END
$$;

CREATE FUNCTION project_counts_tally(p projects, sign BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'invitations_by_expert', p.status || ':' || applied_key(p.id, i.expert), i.expert, sign, 0
      FROM project_invitees(p) AS i(expert);
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'projects_by_skill', p.project_type || ' ' || p.status || ' ' || s.skill, sign, 0
      FROM (SELECT DISTINCT lower(s) AS skill
              FROM jsonb_array_elements_text(p.skills_required) AS s) s
$$;
CREATE FUNCTION projects_counts_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM project_counts_tally(OLD, -1); END IF;
    IF TG_OP <> 'DELETE' THEN PERFORM project_counts_tally(NEW, 1); END IF;
    RETURN OLD;
END $$;
CREATE TRIGGER projects_counts_tally_insert AFTER INSERT ON projects
    FOR EACH ROW EXECUTE FUNCTION projects_counts_tally_sync();
CREATE TRIGGER projects_counts_tally_update
    AFTER UPDATE OF status, project_type, skills_required, invited_experts ON projects
    FOR EACH ROW
    WHEN ((OLD.status, OLD.project_type, OLD.skills_required, OLD.invited_experts)
          IS DISTINCT FROM (NEW.status, NEW.project_type, NEW.skills_required, NEW.invited_experts))
    EXECUTE FUNCTION projects_counts_tally_sync();
CREATE TRIGGER projects_counts_tally_delete BEFORE DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION projects_counts_tally_sync();

-- A formal invitation counts its pair unless the legacy list already names it.
CREATE FUNCTION invitations_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    inv project_invitations;
    st TEXT;
BEGIN
    IF TG_OP = 'DELETE' THEN inv := OLD; ELSE inv := NEW; END IF;
    SELECT p.status INTO st FROM projects p WHERE p.id = inv.project_id FOR NO KEY UPDATE;
    IF NOT FOUND OR EXISTS (SELECT 1 FROM project_legacy_invitees l
                             WHERE l.expert_id = inv.expert_id AND l.project_id = inv.project_id)
    THEN
        RETURN NULL;
    END IF;
    INSERT INTO tally_deltas (name, key, user_id, n, total) VALUES
        ('invitations_by_expert', st || ':' || applied_key(inv.project_id, inv.expert_id),
         inv.expert_id, CASE WHEN TG_OP = 'DELETE' THEN -1 ELSE 1 END, 0);
    RETURN NULL;
END $$;
CREATE TRIGGER invitations_tally AFTER INSERT OR DELETE ON project_invitations
    FOR EACH ROW EXECUTE FUNCTION invitations_tally_sync();

-- An application moves its pair, when invited, between `false` and `true`.
CREATE FUNCTION applications_invitation_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    a applications;
    st TEXT;
    sign BIGINT;
BEGIN
    IF TG_OP = 'DELETE' THEN a := OLD; sign := -1; ELSE a := NEW; sign := 1; END IF;
    SELECT p.status INTO st FROM projects p WHERE p.id = a.project_id FOR NO KEY UPDATE;
    IF NOT FOUND OR NOT (
        EXISTS (SELECT 1 FROM project_invitations i
                 WHERE i.project_id = a.project_id AND i.expert_id = a.expert_id)
        OR EXISTS (SELECT 1 FROM project_legacy_invitees l
                    WHERE l.expert_id = a.expert_id AND l.project_id = a.project_id))
    THEN
        RETURN NULL;
    END IF;
    INSERT INTO tally_deltas (name, key, user_id, n, total) VALUES
        ('invitations_by_expert', st || ':true', a.expert_id, sign, 0),
        ('invitations_by_expert', st || ':false', a.expert_id, -sign, 0);
    RETURN NULL;
END $$;
CREATE TRIGGER applications_invitation_tally AFTER INSERT OR DELETE ON applications
    FOR EACH ROW EXECUTE FUNCTION applications_invitation_tally_sync();

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'invitations_by_expert',
       p.status || ':' || CASE WHEN a.id IS NULL THEN 'false' ELSE 'true' END, i.expert_id,
       COUNT(*), 0
  FROM (SELECT project_id, expert_id FROM project_invitations
        UNION
        SELECT project_id, expert_id FROM project_legacy_invitees) i
  JOIN projects p ON p.id = i.project_id
  LEFT JOIN applications a ON a.project_id = i.project_id AND a.expert_id = i.expert_id
 GROUP BY 2, 3
UNION ALL
SELECT 'projects_by_skill', p.project_type || ' ' || p.status || ' ' || s.skill, 0, COUNT(*), 0
  FROM project_skills s JOIN projects p ON p.id = s.project_id
 GROUP BY 2;
