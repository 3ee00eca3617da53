SET LOCAL lock_timeout = '1s';
SET LOCAL statement_timeout = '5s';
-- Backfills (issue #63): a change that fills a column of a large table is not done by its
-- migration, which must finish in seconds while the previous version serves, but by the
-- `backfills` job (`workflows::backfills`), a batch of source ids per transaction, resumable
-- from `done_through` after a stop. The migration that adds the column registers a row here
-- with `upto`, the last source id that existed before its triggers kept the column; the code
-- reads the old shape until `finished_at` is set.
CREATE TABLE backfills (
    name            TEXT PRIMARY KEY,
    upto            BIGINT NOT NULL,
    done_through    BIGINT NOT NULL DEFAULT 0,
    rows_changed    BIGINT NOT NULL DEFAULT 0,
    finished_at     TIMESTAMPTZ
);
