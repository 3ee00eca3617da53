-- After a point-in-time restore, before any instance starts on the database (README, "Restore"):
-- psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f deploy/pgbackrest/after-restore.sql
--
-- The ids handed out after the restore point are gone from the database but not from the
-- world: the processor holds objects made under keys built from them (`payment_{id}_intent`,
-- `payment_{id}_capture`), and e-mails and webhooks carried them. A sequence restored to the
-- restore point hands those ids out again (PostgreSQL logs a sequence 32 values ahead, so any
-- busier stretch after the point is reused), and a reused payment id would meet the earlier
-- payment's objects at the processor. Every sequence of the schema moves a million past where
-- it stood: more ids than the service hands out between a restore point and the loss, at a
-- cost of nothing (ids are 64-bit).
DO $$
DECLARE
    seq record;
    last bigint;
BEGIN
    FOR seq IN SELECT schemaname, sequencename FROM pg_sequences WHERE schemaname = 'public' LOOP
        EXECUTE format('SELECT last_value FROM %I.%I', seq.schemaname, seq.sequencename) INTO last;
        PERFORM setval(format('%I.%I', seq.schemaname, seq.sequencename)::regclass, last + 1000000);
    END LOOP;
END
$$;
