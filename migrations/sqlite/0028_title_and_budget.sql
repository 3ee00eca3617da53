-- The public listing by budget: its total counted from the index alone, written as the
-- listing's rule is (`project_lists::LISTED`). A search's title matches, read and counted
-- apart from its other matches (`store::listing::Tier`), need nothing new here: FTS5 indexes
-- the title as a column of its own (`projects_fts`, 0016).
CREATE INDEX idx_projects_listed_budget ON projects (budget_minor)
    WHERE project_type = 'curated' AND status IN ('published_curated', 'bidding', 'published', 'open');
