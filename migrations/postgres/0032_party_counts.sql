-- Each user's projects and applications, counted by the writes (issue #32): a company's own
-- list (50,000 projects for the busiest at L: 168 ms to count them) and an expert's statistics
-- read a few tally rows (0023) instead of every project and application of the user.
--
-- `projects_by_party`, per user: `mine:<status>` counts the projects the user owns or is the
-- expert of (once each), `expert:<status>` those the user is the expert of.
-- `applications_by_expert`, per expert: applications by status.
CREATE FUNCTION project_party_tally(p projects, sign BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tally_deltas (name, key, user_id, n, total)
    SELECT 'projects_by_party', k.role || ':' || p.status, k.user_id, sign, 0
      FROM (VALUES ('mine', p.company_id),
                   ('mine', CASE WHEN p.expert_id <> p.company_id THEN p.expert_id END),
                   ('expert', p.expert_id)) AS k(role, user_id)
     WHERE k.user_id IS NOT NULL
$$;
CREATE FUNCTION projects_party_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN PERFORM project_party_tally(OLD, -1); END IF;
    IF TG_OP <> 'DELETE' THEN PERFORM project_party_tally(NEW, 1); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER projects_party_tally_insert_delete AFTER INSERT OR DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION projects_party_tally_sync();
CREATE TRIGGER projects_party_tally_update AFTER UPDATE OF company_id, expert_id, status ON projects
    FOR EACH ROW
    WHEN ((OLD.company_id, OLD.expert_id, OLD.status)
          IS DISTINCT FROM (NEW.company_id, NEW.expert_id, NEW.status))
    EXECUTE FUNCTION projects_party_tally_sync();

CREATE FUNCTION applications_tally_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO tally_deltas (name, key, user_id, n, total)
            VALUES ('applications_by_expert', OLD.status, OLD.expert_id, -1, 0);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO tally_deltas (name, key, user_id, n, total)
            VALUES ('applications_by_expert', NEW.status, NEW.expert_id, 1, 0);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER applications_tally_insert_delete AFTER INSERT OR DELETE ON applications
    FOR EACH ROW EXECUTE FUNCTION applications_tally_sync();
CREATE TRIGGER applications_tally_update AFTER UPDATE OF expert_id, status ON applications
    FOR EACH ROW
    WHEN ((OLD.expert_id, OLD.status) IS DISTINCT FROM (NEW.expert_id, NEW.status))
    EXECUTE FUNCTION applications_tally_sync();

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
