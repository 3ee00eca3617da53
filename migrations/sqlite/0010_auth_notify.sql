-- PostgreSQL's 0010 announces changes to users, roles and sessions to every instance's
-- session cache. SQLite is one process that reads its sessions every time: nothing to do.
SELECT 1;
