-- The skill and budget filters together (0057): one range of this index per skill.
CREATE INDEX idx_project_skills_budget ON project_skills (skill, budget_minor, project_id);
