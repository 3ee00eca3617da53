-- Curation at scale (issue #32): the verified experts in curation's order past the skills held
-- (level, then internal rating; `store::profiles::CURATION_RANK`). Suggestions for common
-- skills walk it probing each expert's skills instead of grouping every holder of every
-- required skill (14,839 at M, 200 ms; ten times as many at L). It holds all the walk reads of
-- a profile, availability included, so the walk never reads the profiles themselves (on
-- SQLite at M, 36 ms against 457 reading them).
CREATE INDEX idx_profiles_curation_rank ON profiles (
    (CASE expert_level WHEN 'Enterprise' THEN 2 WHEN 'Pro' THEN 1 ELSE 0 END) DESC,
    (COALESCE(internal_rating, 3.0)) DESC,
    user_id, id, expert_level, internal_rating, availability)
    WHERE profile_type = 'experto' AND is_verified = TRUE;
