-- Backfills (issue #63): a change that fills a column of a large table is not done by its
-- migration but by the `backfills` job (`workflows::backfills`), a batch of source ids per
-- transaction, resumable from `done_through`. The migration that adds the column registers a
-- row here with `upto`, the last source id before its triggers kept the column; the code
-- reads the old shape until `finished_at` is set.
CREATE TABLE backfills (
    name            TEXT PRIMARY KEY,
    upto            INTEGER NOT NULL,
    done_through    INTEGER NOT NULL DEFAULT 0,
    rows_changed    INTEGER NOT NULL DEFAULT 0,
    finished_at     TEXT
);
