-- Run by seed.py after a bulk load on SQLite (before ANALYZE). SQLite fires the migrations'
-- triggers on every seeded row (project counts, skills, legacy invitations, the FTS5
-- indexes), so nothing needs rebuilding here; derived data a trigger does not keep would.
SELECT 1;
