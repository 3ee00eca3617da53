-- A search's title matches are its first tier, read and counted apart from its other
-- matches (`store::listing::Tier`): the title's words get their own index, so counting them
-- intersects two indexes instead of reading every match's row to test its title.
CREATE INDEX idx_projects_title_words ON projects USING GIN (title_words);

-- The public listing by budget: its total counted from the index alone, written as the
-- listing's rule is (`project_lists::LISTED`).
CREATE INDEX idx_projects_listed_budget ON projects (budget_minor)
    WHERE project_type = 'curated' AND status IN ('published_curated', 'bidding', 'published', 'open');
