-- Each user's projects and applications, counted by the writes (issue #32): a company's own
-- list and an expert's statistics read a few tally rows (0023) instead of every project and
-- application of the user.
--
-- `projects_by_party`, per user: `mine:<status>` counts the projects the user owns or is the
-- expert of (once each), `expert:<status>` those the user is the expert of.
-- `applications_by_expert`, per expert: applications by status.
CREATE TRIGGER projects_party_tally_insert AFTER INSERT ON projects
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'projects_by_party', role || ':' || NEW.status, user_id, 1, 0
      FROM (SELECT 'mine' AS role, NEW.company_id AS user_id
            UNION ALL
            SELECT 'mine', CASE WHEN NEW.expert_id <> NEW.company_id THEN NEW.expert_id END
            UNION ALL
            SELECT 'expert', NEW.expert_id)
     WHERE user_id IS NOT NULL;
END;
CREATE TRIGGER projects_party_tally_delete AFTER DELETE ON projects
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'projects_by_party', role || ':' || OLD.status, user_id, -1, 0
      FROM (SELECT 'mine' AS role, OLD.company_id AS user_id
            UNION ALL
            SELECT 'mine', CASE WHEN OLD.expert_id <> OLD.company_id THEN OLD.expert_id END
            UNION ALL
            SELECT 'expert', OLD.expert_id)
     WHERE user_id IS NOT NULL;
END;
CREATE TRIGGER projects_party_tally_update AFTER UPDATE OF company_id, expert_id, status ON projects
    WHEN OLD.company_id IS NOT NEW.company_id OR OLD.expert_id IS NOT NEW.expert_id
      OR OLD.status IS NOT NEW.status
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'projects_by_party', role || ':' || OLD.status, user_id, -1, 0
      FROM (SELECT 'mine' AS role, OLD.company_id AS user_id
            UNION ALL
            SELECT 'mine', CASE WHEN OLD.expert_id <> OLD.company_id THEN OLD.expert_id END
            UNION ALL
            SELECT 'expert', OLD.expert_id)
     WHERE user_id IS NOT NULL;
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'projects_by_party', role || ':' || NEW.status, user_id, 1, 0
      FROM (SELECT 'mine' AS role, NEW.company_id AS user_id
            UNION ALL
            SELECT 'mine', CASE WHEN NEW.expert_id <> NEW.company_id THEN NEW.expert_id END
            UNION ALL
            SELECT 'expert', NEW.expert_id)
     WHERE user_id IS NOT NULL;
END;

CREATE TRIGGER applications_tally_insert AFTER INSERT ON applications
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
        VALUES ('applications_by_expert', NEW.status, NEW.expert_id, 1, 0);
END;
CREATE TRIGGER applications_tally_delete AFTER DELETE ON applications
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total)
        VALUES ('applications_by_expert', OLD.status, OLD.expert_id, -1, 0);
END;
CREATE TRIGGER applications_tally_update AFTER UPDATE OF expert_id, status ON applications
    WHEN OLD.expert_id IS NOT NEW.expert_id OR OLD.status IS NOT NEW.status
BEGIN
    INSERT INTO tally_deltas (name, key, user_id, n, total) VALUES
        ('applications_by_expert', OLD.status, OLD.expert_id, -1, 0),
        ('applications_by_expert', NEW.status, NEW.expert_id, 1, 0);
END;

INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'projects_by_party', role || ':' || status, user_id, COUNT(*), 0 FROM (
    SELECT 'mine' AS role, status, company_id AS user_id FROM projects
    UNION ALL
    SELECT 'mine', status, expert_id FROM projects WHERE expert_id <> company_id
    UNION ALL
    SELECT 'expert', status, expert_id FROM projects WHERE expert_id IS NOT NULL) x
 GROUP BY role, status, user_id
UNION ALL
SELECT 'applications_by_expert', status, expert_id, COUNT(*), 0
  FROM applications GROUP BY status, expert_id;
