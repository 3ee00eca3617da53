-- Run by seed.py after a bulk load on SQLite (before ANALYZE). SQLite fires the migrations'
-- triggers on every seeded row (project counts, skills, legacy invitations, the FTS5
-- indexes), so little needs rebuilding here: the platform tallies' deltas (migration 0023),
-- one per seeded payment, user and review, are replaced by one recount (the migration's).
DELETE FROM tally_deltas;
DELETE FROM tallies;
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'payments', status, 0, COUNT(*), SUM(amount_minor) FROM payments GROUP BY status
UNION ALL
SELECT 'revenue', '', 0, COUNT(*), SUM(COALESCE(commission_minor, 0)) FROM payments
 WHERE status = 'released' GROUP BY status
UNION ALL
SELECT 'expert_earnings', '', expert_id, COUNT(*), SUM(COALESCE(expert_amount_minor, amount_minor))
  FROM payments WHERE status = 'released' AND expert_id IS NOT NULL GROUP BY expert_id
UNION ALL
SELECT 'company_spend', '', company_id, COUNT(*), SUM(amount_minor)
  FROM payments WHERE status = 'released' AND company_id IS NOT NULL GROUP BY company_id
UNION ALL
SELECT 'users_by_role', r.role, 0, COUNT(*), 0 FROM user_roles r JOIN users u ON u.id = r.user_id
 WHERE u.deleted_at IS NULL GROUP BY r.role
UNION ALL
SELECT 'profiles_by_verification', p.profile_type || ':' || p.verification_status, 0, COUNT(*), 0
  FROM profiles p JOIN users u ON u.id = p.user_id
 WHERE u.deleted_at IS NULL GROUP BY p.profile_type, p.verification_status
UNION ALL
SELECT 'expert_ratings', '', reviewee_id, COUNT(*), SUM(rating) FROM reviews
 WHERE reviewer_role = 'empresa' AND visibility = 'published' AND reviewee_id IS NOT NULL
   AND (revealed_at IS NOT NULL OR announced_at IS NOT NULL)
 GROUP BY reviewee_id;
-- Migration 0025: revenue and projects by month.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'revenue_by_month', substr(released_at, 1, 7), 0, COUNT(*), SUM(COALESCE(commission_minor, 0))
  FROM payments WHERE status = 'released' AND released_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'projects_by_month', substr(created_at, 1, 7), 0, COUNT(*), 0 FROM projects GROUP BY 2;
-- Migration 0026: accounts, by status and by role.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'users', '', 0, COUNT(*), 0 FROM users
UNION ALL
SELECT 'users_by_status', 'active', 0, COUNT(*), 0 FROM users
 WHERE is_active AND deleted_at IS NULL
UNION ALL
SELECT 'users_by_status', 'inactive', 0, COUNT(*), 0 FROM users
 WHERE NOT is_active AND suspended_at IS NULL AND deleted_at IS NULL
UNION ALL
SELECT 'users_by_status', 'suspended', 0, COUNT(*), 0 FROM users
 WHERE suspended_at IS NOT NULL AND deleted_at IS NULL
UNION ALL
SELECT 'users_by_status', 'deleted', 0, COUNT(*), 0 FROM users WHERE deleted_at IS NOT NULL
UNION ALL
SELECT 'accounts_by_role', role, 0, COUNT(*), 0 FROM user_roles GROUP BY role;
-- Migration 0027: listed experts by verification.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'listed_experts', CASE WHEN p.is_verified THEN 'true' ELSE 'false' END, 0,
       COUNT(*), 0
  FROM profiles p JOIN users u ON u.id = p.user_id
 WHERE p.profile_type = 'experto' AND u.is_active = TRUE
 GROUP BY 2;
-- Migration 0030: listed experts by skill and verification.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'experts_by_skill',
       s.skill_id || ':' || CASE WHEN p.is_verified THEN 'true' ELSE 'false' END, 0, COUNT(*), 0
  FROM profile_skills s JOIN profiles p ON p.id = s.profile_id JOIN users u ON u.id = p.user_id
 WHERE p.profile_type = 'experto' AND u.is_active = 1
 GROUP BY 2
UNION ALL
SELECT 'profiles', profile_type || ':' || CASE WHEN is_verified THEN 'true' ELSE 'false' END
                   || ':' || verification_status, 0, COUNT(*), 0
  FROM profiles GROUP BY 2;
-- Migration 0032: each user's projects and applications.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'projects_by_party', role || ':' || status, user_id, COUNT(*), 0 FROM (
    SELECT 'mine' AS role, status, company_id AS user_id FROM projects
    UNION ALL
    SELECT 'mine', status, expert_id FROM projects WHERE expert_id <> company_id
    UNION ALL
    SELECT 'expert', status, expert_id FROM projects WHERE expert_id IS NOT NULL) x
 GROUP BY role, status, user_id
UNION ALL
SELECT 'applications_by_expert', status, expert_id, COUNT(*), 0
  FROM applications GROUP BY status, expert_id;
-- Migration 0034: each expert's invited projects; projects by skill.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'invitations_by_expert',
       p.status || ':' || CASE WHEN a.id IS NULL THEN 'false' ELSE 'true' END, i.expert_id,
       COUNT(*), 0
  FROM (SELECT project_id, expert_id FROM project_invitations
        UNION
        SELECT project_id, expert_id FROM project_legacy_invitees) i
  JOIN projects p ON p.id = i.project_id
  LEFT JOIN applications a ON a.project_id = i.project_id AND a.expert_id = i.expert_id
 GROUP BY 2, 3
UNION ALL
SELECT 'projects_by_skill', p.project_type || ' ' || p.status || ' ' || s.skill, 0, COUNT(*), 0
  FROM project_skills s JOIN projects p ON p.id = s.project_id
 GROUP BY 2;
-- Migration 0035: each user's reviews.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'reviews_by_user', k.key, k.user_id, COUNT(*), 0 FROM (
    SELECT 'received:' || visibility AS key, reviewee_id AS user_id FROM reviews
    UNION ALL
    SELECT 'written:' || visibility, reviewer_id FROM reviews
    UNION ALL
    SELECT 'shown:' || rating, reviewee_id FROM reviews
     WHERE visibility = 'published' AND (revealed_at IS NOT NULL OR announced_at IS NOT NULL)) k
 WHERE k.user_id IS NOT NULL
 GROUP BY k.key, k.user_id;
-- Migration 0036: disputes by status.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'disputes', status, 0, COUNT(*), 0 FROM disputes GROUP BY status;
-- Migration 0037: each expert's money held and released.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'expert_money', status, expert_id, COUNT(*),
       SUM(CASE WHEN status = 'released' THEN COALESCE(expert_amount_minor, 0) ELSE amount_minor END)
  FROM payments
 WHERE status IN ('held', 'released') AND expert_id IS NOT NULL
 GROUP BY status, expert_id;
-- Migration 0040: the growth view's day tallies and the projects under way.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'growth:project:' || project_type, substr(created_at, 1, 10), 0, COUNT(*), 0
  FROM projects GROUP BY 1, 2
UNION ALL
SELECT 'growth:completed', substr(completed_at, 1, 10), 0, COUNT(*), 0
  FROM projects WHERE status = 'completed' AND completed_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:cancelled', substr(cancelled_at, 1, 10), 0, COUNT(*), 0
  FROM projects WHERE status = 'cancelled' AND cancelled_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:assigned', substr(assigned_at, 1, 10), 0, COUNT(*), 0
  FROM projects WHERE assigned_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:ended', substr(CASE WHEN cancelled_at IS NULL OR completed_at < cancelled_at THEN completed_at ELSE cancelled_at END, 1, 10), 0, COUNT(*), 0
  FROM projects WHERE assigned_at IS NOT NULL AND CASE WHEN cancelled_at IS NULL OR completed_at < cancelled_at THEN completed_at ELSE cancelled_at END IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'under_way', 'assignments', 0, COUNT(*), 0 FROM projects WHERE assigned_at IS NOT NULL
UNION ALL
SELECT 'under_way', 'ends', 0, COUNT(*), 0 FROM projects
 WHERE assigned_at IS NOT NULL AND CASE WHEN cancelled_at IS NULL OR completed_at < cancelled_at THEN completed_at ELSE cancelled_at END IS NOT NULL
UNION ALL
SELECT 'growth:user', substr(created_at, 1, 10), 0, COUNT(*), 0 FROM users GROUP BY 2
UNION ALL
SELECT 'growth:dispute', substr(created_at, 1, 10), 0, COUNT(*), 0 FROM disputes GROUP BY 2
UNION ALL
SELECT 'growth:released', substr(released_at, 1, 10), 0, COUNT(*), SUM(amount_minor)
  FROM payments WHERE status = 'released' AND released_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:revenue', substr(released_at, 1, 10), 0, COUNT(*), SUM(COALESCE(commission_minor, 0))
  FROM payments WHERE status = 'released' AND released_at IS NOT NULL GROUP BY 2
UNION ALL
-- Migration 0052: the links themselves were written by its triggers as the rows came.
SELECT 'growth:release_pair', substr(prev_released_at, 1, 10) || ' ' || substr(released_at, 1, 10),
       0, COUNT(*), 0
  FROM payments
 WHERE status = 'released' AND released_at IS NOT NULL AND prev_released_at IS NOT NULL
 GROUP BY 2
UNION ALL
SELECT 'growth:rating:' || reviewer_role, substr(created_at, 1, 10), 0, COUNT(*), SUM(rating)
  FROM reviews WHERE visibility = 'published' AND reviewer_role IS NOT NULL
   AND (revealed_at IS NOT NULL OR announced_at IS NOT NULL) GROUP BY 1, 2;
-- Migration 0041: each party's payments by status.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'payments_by_party', 'company:' || status, company_id, COUNT(*), 0
  FROM payments WHERE company_id IS NOT NULL GROUP BY status, company_id
UNION ALL
SELECT 'payments_by_party', 'expert:' || status, expert_id, COUNT(*), 0
  FROM payments WHERE expert_id IS NOT NULL GROUP BY status, expert_id;

-- Migration 0044: each expert's released income by quarter.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'seller_income', key, expert_id, SUM(n), SUM(amount)
  FROM seller_income_rows GROUP BY key, expert_id;
