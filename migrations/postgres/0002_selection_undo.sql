-- Undoing a selection (POST /api/projects/{id}/selection/cancel) restores what the selection
-- changed: the project's state before it, and the proposals it turned down on the way.
ALTER TABLE projects ADD COLUMN status_before_selection TEXT;
ALTER TABLE applications ADD COLUMN rejected_by_selection BOOLEAN NOT NULL DEFAULT FALSE;
