-- Run by seed.py after a bulk load on PostgreSQL (after the sequences are reset, before
-- ANALYZE): rebuild the derived data a COPY under session_replication_role = replica does not
-- maintain (its triggers do not fire). Generated columns (the search vectors) are computed
-- by the COPY itself.

-- Memory for the recounts' sorts and hashes, and the VACUUM after them: with the defaults
-- (4 MB, 64 MB) each recount over millions of rows spills to disk.
SET work_mem = '256MB';
SET maintenance_work_mem = '1GB';

-- Migration 0016: project counts, project skills, the legacy invitation list.
UPDATE project_counts SET n = 0;
UPDATE project_counts c SET n = x.n
  FROM (SELECT project_type, status, COUNT(*) AS n FROM projects GROUP BY project_type, status) x
 WHERE c.project_type = x.project_type AND c.status = x.status;
TRUNCATE project_skills, project_legacy_invitees;
-- With each project's budget (migration 0057).
INSERT INTO project_skills (skill, project_id, budget_minor)
    SELECT DISTINCT lower(s), p.id, p.budget_minor
      FROM projects p, jsonb_array_elements_text(p.skills_required) AS s
    ON CONFLICT DO NOTHING;
INSERT INTO project_legacy_invitees (expert_id, project_id)
    SELECT DISTINCT (e #>> '{}')::bigint, p.id
      FROM projects p, jsonb_array_elements(p.invited_experts) AS e
     WHERE jsonb_typeof(e) = 'number'
    ON CONFLICT DO NOTHING;

-- Migration 0018: each room's message count and each message's place in its room.
UPDATE chat_messages m SET room_seq = x.seq
  FROM (SELECT id, row_number() OVER (PARTITION BY project_id ORDER BY id) AS seq
          FROM chat_messages) x
 WHERE m.id = x.id AND m.room_seq IS DISTINCT FROM x.seq;
TRUNCATE chat_room_counts;
INSERT INTO chat_room_counts (project_id, n)
    SELECT project_id, COUNT(*) FROM chat_messages GROUP BY project_id;

-- Migration 0020: each user's notification counts.
TRUNCATE notification_counts;
INSERT INTO notification_counts (user_id, total, unread)
    SELECT user_id, COUNT(*), COUNT(*) FILTER (WHERE NOT is_read) FROM notifications GROUP BY user_id;

-- Migration 0021: each sender's message count in a room and each message's place among its
-- sender's.
UPDATE chat_messages m SET sender_seq = x.seq
  FROM (SELECT id, row_number() OVER (PARTITION BY project_id, sender_id ORDER BY id) AS seq
          FROM chat_messages WHERE sender_id IS NOT NULL) x
 WHERE m.id = x.id AND m.sender_seq IS DISTINCT FROM x.seq;
TRUNCATE chat_sender_counts;
INSERT INTO chat_sender_counts (project_id, sender_id, n)
    SELECT project_id, sender_id, COUNT(*) FROM chat_messages
     WHERE sender_id IS NOT NULL GROUP BY project_id, sender_id;

-- Migration 0052: each release's link to its project's previous one (its triggers are off
-- here too; the pairs are counted with the tallies below).
SET session_replication_role = replica;
UPDATE payments p SET prev_released_at = l.prev
  FROM (SELECT id, LAG(released_at) OVER (PARTITION BY project_id ORDER BY released_at, id) AS prev
          FROM payments WHERE status = 'released' AND released_at IS NOT NULL) l
 WHERE p.id = l.id AND l.prev IS NOT NULL;
SET session_replication_role = DEFAULT;

-- Migration 0023: the platform tallies (the same recount as the migration's).
TRUNCATE tallies, tally_deltas;
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
SELECT 'revenue_by_month', to_char(released_at AT TIME ZONE 'UTC', 'YYYY-MM'), 0, COUNT(*),
       SUM(COALESCE(commission_minor, 0))
  FROM payments WHERE status = 'released' AND released_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'projects_by_month', to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM'), 0, COUNT(*), 0
  FROM projects GROUP BY 2;
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
-- Migration 0030: projects by word, type and status; listed experts by skill and verification.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'project_words', w.lexeme || ' ' || p.project_type || ' ' || p.status, 0, COUNT(*), 0
  FROM projects p, unnest(p.text_words) AS w
 GROUP BY 2
UNION ALL
SELECT 'experts_by_skill',
       s.skill_id || ':' || CASE WHEN p.is_verified THEN 'true' ELSE 'false' END, 0, COUNT(*), 0
  FROM profile_skills s JOIN profiles p ON p.id = s.profile_id JOIN users u ON u.id = p.user_id
 WHERE p.profile_type = 'experto' AND u.is_active = TRUE
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
SELECT 'growth:project:' || project_type, growth_day(created_at), 0, COUNT(*), 0
  FROM projects GROUP BY 1, 2
UNION ALL
SELECT 'growth:completed', growth_day(completed_at), 0, COUNT(*), 0
  FROM projects WHERE status = 'completed' AND completed_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:cancelled', growth_day(cancelled_at), 0, COUNT(*), 0
  FROM projects WHERE status = 'cancelled' AND cancelled_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:assigned', growth_day(assigned_at), 0, COUNT(*), 0
  FROM projects WHERE assigned_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:ended', growth_day(project_end(completed_at, cancelled_at)), 0, COUNT(*), 0
  FROM projects WHERE assigned_at IS NOT NULL
   AND project_end(completed_at, cancelled_at) IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'under_way', 'assignments', 0, COUNT(*), 0 FROM projects WHERE assigned_at IS NOT NULL
UNION ALL
SELECT 'under_way', 'ends', 0, COUNT(*), 0 FROM projects
 WHERE assigned_at IS NOT NULL AND project_end(completed_at, cancelled_at) IS NOT NULL
UNION ALL
SELECT 'growth:user', growth_day(created_at), 0, COUNT(*), 0 FROM users GROUP BY 2
UNION ALL
SELECT 'growth:dispute', growth_day(created_at), 0, COUNT(*), 0 FROM disputes GROUP BY 2
UNION ALL
SELECT 'growth:released', growth_day(released_at), 0, COUNT(*), SUM(amount_minor)
  FROM payments WHERE status = 'released' AND released_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:revenue', growth_day(released_at), 0, COUNT(*), SUM(COALESCE(commission_minor, 0))
  FROM payments WHERE status = 'released' AND released_at IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'growth:release_pair', growth_day(prev_released_at) || ' ' || growth_day(released_at), 0,
       COUNT(*), 0
  FROM payments
 WHERE status = 'released' AND released_at IS NOT NULL AND prev_released_at IS NOT NULL
 GROUP BY 2
UNION ALL
SELECT 'growth:rating:' || reviewer_role, growth_day(created_at), 0, COUNT(*), SUM(rating)
  FROM reviews WHERE visibility = 'published' AND reviewer_role IS NOT NULL
   AND (revealed_at IS NOT NULL OR announced_at IS NOT NULL) GROUP BY 1, 2;
-- Migration 0041: each party's payments by status.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'payments_by_party', 'company:' || status, company_id, COUNT(*), 0
  FROM payments WHERE company_id IS NOT NULL GROUP BY status, company_id
UNION ALL
SELECT 'payments_by_party', 'expert:' || status, expert_id, COUNT(*), 0
  FROM payments WHERE expert_id IS NOT NULL GROUP BY status, expert_id;
-- Migration 0046: the listed experts' search documents and their words' tallies, written
-- directly (the tally's trigger would append a delta for each word of each expert).
SET session_replication_role = replica;
-- Each profile's skill ids (0051).
UPDATE profiles p SET skill_ids = profile_skill_ids(p.id)
 WHERE EXISTS (SELECT 1 FROM profile_skills ps WHERE ps.profile_id = p.id);

TRUNCATE expert_search;
-- `profile_search_words` (0038) for every listed expert, its skills' part read for all at
-- once rather than once a profile (the same words; 6 s instead of 19 at M).
INSERT INTO expert_search (profile_id, is_verified, created_at, words)
WITH held AS (
    SELECT ps.profile_id,
           to_tsvector('simple', fold_text(string_agg(s.name, ' ')))
               || array_to_tsvector(array_agg('#' || s.id)) AS words
      FROM profile_skills ps JOIN skills s ON s.id = ps.skill_id
     GROUP BY ps.profile_id)
SELECT p.id, p.is_verified, p.created_at,
       strip(to_tsvector('simple', fold_text(
                 COALESCE(p.full_name, '') || ' ' || COALESCE(p.bio, '') || ' '
                 || COALESCE(p.main_area, '')))
             || COALESCE(h.words, ''::tsvector))
  FROM profiles p JOIN users u ON u.id = p.user_id LEFT JOIN held h ON h.profile_id = p.id
 WHERE p.profile_type = 'experto' AND u.is_active;
-- The rebuild above repeats the function's text: one document in a hundred is held against
-- the function itself, so a change to 0038's words stops the seeding instead of diverging.
DO $$ BEGIN IF EXISTS (
    SELECT 1 FROM expert_search e JOIN profiles p ON p.id = e.profile_id
     WHERE e.profile_id % 100 = 0
       AND e.words IS DISTINCT FROM strip(profile_search_words(p.id, p.full_name, p.bio, p.main_area)))
THEN RAISE EXCEPTION 'expert_search rebuilt unlike profile_search_words (migration 0038)'; END IF; END $$;
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'expert_words', k, 0, COUNT(*), 0
  FROM expert_search e, expert_word_keys(e.words, e.is_verified) k
 GROUP BY k;
SET session_replication_role = DEFAULT;
-- Migration 0039: each account's search text.
DELETE FROM account_search;
INSERT INTO account_search (user_id, text) SELECT id, account_search_text(id) FROM users;

-- Migration 0044: each expert's released income by quarter.
INSERT INTO tallies (name, key, user_id, n, total)
SELECT 'seller_income', seller_quarter(released_at) || ' ' || f.figure, expert_id,
       SUM(f.n), SUM(f.amount)
  FROM payments,
       LATERAL (VALUES
            ('gross', 1, amount_minor),
            ('commission', 0, COALESCE(commission_minor, 0)),
            ('net', 0, COALESCE(expert_amount_minor, amount_minor - COALESCE(commission_minor, 0)))
       ) AS f (figure, n, amount)
 WHERE status = 'released' AND expert_id IS NOT NULL AND released_at IS NOT NULL
 GROUP BY 2, 3;
