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
-- finding no project, count nothing.

CREATE TRIGGER projects_counts_tally_insert AFTER INSERT ON projects BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'invitations_by_expert',
           NEW.status || ':' || CASE WHEN EXISTS (SELECT 1 FROM applications a
                                                   WHERE a.project_id = NEW.id AND a.expert_id = i.expert)
                                     THEN 'true' ELSE 'false' END,
           i.expert, 1, 0
      FROM (SELECT value AS expert FROM json_each(NEW.invited_experts) WHERE type = 'integer'
             UNION
             SELECT expert_id FROM project_invitations WHERE project_id = NEW.id) i;
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'projects_by_skill', NEW.project_type || ' ' || NEW.status || ' ' || s.skill, 1, 0
      FROM (SELECT DISTINCT lower(value) AS skill FROM json_each(NEW.skills_required)) s;
END;
CREATE TRIGGER projects_counts_tally_update
    AFTER UPDATE OF status, project_type, skills_required, invited_experts ON projects
    WHEN OLD.status IS NOT NEW.status OR OLD.project_type IS NOT NEW.project_type
      OR OLD.skills_required IS NOT NEW.skills_required
      OR OLD.invited_experts IS NOT NEW.invited_experts
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'invitations_by_expert',
           OLD.status || ':' || CASE WHEN EXISTS (SELECT 1 FROM applications a
                                                   WHERE a.project_id = OLD.id AND a.expert_id = i.expert)
                                     THEN 'true' ELSE 'false' END,
           i.expert, -1, 0
      FROM (SELECT value AS expert FROM json_each(OLD.invited_experts) WHERE type = 'integer'
             UNION
             SELECT expert_id FROM project_invitations WHERE project_id = OLD.id) i;
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'projects_by_skill', OLD.project_type || ' ' || OLD.status || ' ' || s.skill, -1, 0
      FROM (SELECT DISTINCT lower(value) AS skill FROM json_each(OLD.skills_required)) s;
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'invitations_by_expert',
           NEW.status || ':' || CASE WHEN EXISTS (SELECT 1 FROM applications a
                                                   WHERE a.project_id = NEW.id AND a.expert_id = i.expert)
                                     THEN 'true' ELSE 'false' END,
           i.expert, 1, 0
      FROM (SELECT value AS expert FROM json_each(NEW.invited_experts) WHERE type = 'integer'
             UNION
             SELECT expert_id FROM project_invitations WHERE project_id = NEW.id) i;
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'projects_by_skill', NEW.project_type || ' ' || NEW.status || ' ' || s.skill, 1, 0
      FROM (SELECT DISTINCT lower(value) AS skill FROM json_each(NEW.skills_required)) s;
END;
CREATE TRIGGER projects_counts_tally_delete BEFORE DELETE ON projects BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'invitations_by_expert',
           OLD.status || ':' || CASE WHEN EXISTS (SELECT 1 FROM applications a
                                                   WHERE a.project_id = OLD.id AND a.expert_id = i.expert)
                                     THEN 'true' ELSE 'false' END,
           i.expert, -1, 0
      FROM (SELECT value AS expert FROM json_each(OLD.invited_experts) WHERE type = 'integer'
             UNION
             SELECT expert_id FROM project_invitations WHERE project_id = OLD.id) i;
    INSERT INTO tally_deltas (name, key, n, total)
    SELECT 'projects_by_skill', OLD.project_type || ' ' || OLD.status || ' ' || s.skill, -1, 0
      FROM (SELECT DISTINCT lower(value) AS skill FROM json_each(OLD.skills_required)) s;
END;

-- A formal invitation counts its pair unless the legacy list already names it.
CREATE TRIGGER invitations_tally_insert AFTER INSERT ON project_invitations
    WHEN NOT EXISTS (SELECT 1 FROM project_legacy_invitees l
                      WHERE l.expert_id = NEW.expert_id AND l.project_id = NEW.project_id)
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'invitations_by_expert',
           p.status || ':' || CASE WHEN EXISTS (SELECT 1 FROM applications a
                                                 WHERE a.project_id = NEW.project_id
                                                   AND a.expert_id = NEW.expert_id)
                                   THEN 'true' ELSE 'false' END,
           NEW.expert_id, 1, 0
      FROM projects p WHERE p.id = NEW.project_id;
END;
CREATE TRIGGER invitations_tally_delete AFTER DELETE ON project_invitations
    WHEN NOT EXISTS (SELECT 1 FROM project_legacy_invitees l
                      WHERE l.expert_id = OLD.expert_id AND l.project_id = OLD.project_id)
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'invitations_by_expert',
           p.status || ':' || CASE WHEN EXISTS (SELECT 1 FROM applications a
                                                 WHERE a.project_id = OLD.project_id
                                                   AND a.expert_id = OLD.expert_id)
                                   THEN 'true' ELSE 'false' END,
           OLD.expert_id, -1, 0
      FROM projects p WHERE p.id = OLD.project_id;
END;

-- An application moves its pair, when invited, between `false` and `true`.
CREATE TRIGGER applications_invitation_tally_insert AFTER INSERT ON applications
    WHEN EXISTS (SELECT 1 FROM project_invitations i
                    WHERE i.project_id = NEW.project_id AND i.expert_id = NEW.expert_id)
      OR EXISTS (SELECT 1 FROM project_legacy_invitees l
                  WHERE l.expert_id = NEW.expert_id AND l.project_id = NEW.project_id)
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'invitations_by_expert', p.status || ':true', NEW.expert_id, 1, 0
      FROM projects p WHERE p.id = NEW.project_id
    UNION ALL
    SELECT 'invitations_by_expert', p.status || ':false', NEW.expert_id, -1, 0
      FROM projects p WHERE p.id = NEW.project_id;
END;
CREATE TRIGGER applications_invitation_tally_delete AFTER DELETE ON applications
    WHEN EXISTS (SELECT 1 FROM project_invitations i
                    WHERE i.project_id = OLD.project_id AND i.expert_id = OLD.expert_id)
      OR EXISTS (SELECT 1 FROM project_legacy_invitees l
                  WHERE l.expert_id = OLD.expert_id AND l.project_id = OLD.project_id)
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'invitations_by_expert', p.status || ':true', OLD.expert_id, -1, 0
      FROM projects p WHERE p.id = OLD.project_id
    UNION ALL
    SELECT 'invitations_by_expert', p.status || ':false', OLD.expert_id, 1, 0
      FROM projects p WHERE p.id = OLD.project_id;
END;

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
