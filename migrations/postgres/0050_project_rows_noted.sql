-- Which projects a transaction changed, noted for its commit (issue #32): each instance keeps
-- the rows `GET /api/projects/{id}` reads under a token per project in the shared cache, and
-- `store::Tx::commit` reads this note just before committing and sets fresh tokens for the
-- projects named once committed (`store::written`). The note is a setting local to the
-- transaction: nothing is stored, a rolled-back savepoint takes its part back with it, and a
-- session that never reads it (psql, a migration) pays one function call per row. A note
-- past 2,000 characters becomes '*', every project (a company's account deleted, say).
CREATE FUNCTION note_project_row_written() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    noted text := coalesce(current_setting('marketplace.written_projects', true), '');
BEGIN
    IF noted = '*' OR position(',' || OLD.id || ',' IN noted) > 0 THEN
        RETURN NULL;
    ELSIF length(noted) > 2000 THEN
        noted := '*';
    ELSIF noted = '' THEN
        noted := ',' || OLD.id || ',';
    ELSE
        noted := noted || OLD.id || ',';
    END IF;
    PERFORM set_config('marketplace.written_projects', noted, true);
    RETURN NULL;
END $$;
CREATE TRIGGER project_rows_noted AFTER UPDATE OR DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION note_project_row_written();
