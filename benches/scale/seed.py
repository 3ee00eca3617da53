#!/usr/bin/env python3
"""Fill a migrated marketplace database with realistic rows at scale (issue #32).

    python3 benches/scale/seed.py --size S|M|L --database-url <url> [--recreate]

PostgreSQL is loaded with `COPY ... FROM STDIN (FORMAT csv)` through `psql` (several COPY
streams at once, one per table of a phase); SQLite with executemany in large transactions
(`PRAGMA synchronous=OFF`, no journal and a 4 GiB page cache while loading). Rows are
generated as streams, never whole tables in memory; only small integer arrays (who is in
which project) are kept. Deterministic: one fixed random seed and a fixed reference date
(`--now`, default 2026-11-27).

Every seeded user has the password `Scale-Bench-2026!`: the service is started once on the
database, two accounts are registered through the API and their bcrypt hash is copied to every
seeded user. A manifest (hot company, hot expert, hot chat room, admin, ...) is written next to
the data for bench.py.
"""

import argparse
import array
import csv
import json
import os
import random
import subprocess
import sys
import time
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import wordlists as W  # noqa: E402

SEED = 32  # issue #32
SIZES = {"S": 1, "M": 10, "L": 100}
DAY = 86400


# ------------------------------------------------------------------------------------------
# Writers: one per table; PostgreSQL COPY through psql, or SQLite executemany.
# ------------------------------------------------------------------------------------------

class PgCopy:
    def __init__(self, url, table, cols):
        self.table, self.cols, self.count = table, cols, 0
        sql = "COPY %s (%s) FROM STDIN WITH (FORMAT csv)" % (table, ", ".join(cols))
        # session_replication_role = replica: no FK or trigger work per row (the ids are
        # consistent by construction; the auth NOTIFY triggers would fire once per row).
        self.proc = subprocess.Popen(
            ["psql", url, "-X", "-q", "-v", "ON_ERROR_STOP=1",
             "-c", "SET session_replication_role = replica", "-c", sql],
            stdin=subprocess.PIPE, encoding="utf-8", bufsize=1 << 20)
        self.w = csv.writer(self.proc.stdin, lineterminator="\n")

    def write(self, row):
        self.w.writerow(row)
        self.count += 1

    def close(self):
        self.proc.stdin.close()
        if self.proc.wait() != 0:
            raise SystemExit("COPY into %s failed" % self.table)


class SqliteInsert:
    BATCH = 50000

    def __init__(self, conn, table, cols):
        self.conn, self.table, self.cols, self.count = conn, table, cols, 0
        self.sql = "INSERT INTO %s (%s) VALUES (%s)" % (table, ", ".join(cols),
                                                        ", ".join("?" * len(cols)))
        self.buf = []

    def write(self, row):
        self.buf.append(row)
        self.count += 1
        if len(self.buf) >= self.BATCH:
            self.conn.executemany(self.sql, self.buf)
            self.buf = []

    def close(self):
        if self.buf:
            self.conn.executemany(self.sql, self.buf)
            self.buf = []


class Phase:
    """Several tables loaded together (their rows come from one pass)."""

    def __init__(self, seeder, name, tables):
        self.s, self.name, self.tables = seeder, name, tables

    def __enter__(self):
        self.t0 = time.perf_counter()
        s = self.s
        if s.engine == "sqlite":
            s.conn.execute("BEGIN")
        self.w = {}
        for t, cols in self.tables.items():
            self.w[t] = (PgCopy(s.url, t, cols) if s.engine == "postgres"
                         else SqliteInsert(s.conn, t, cols))
        return self.w

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            return False
        for w in self.w.values():
            w.close()
        if self.s.engine == "sqlite":
            self.s.conn.execute("COMMIT")
        dt = time.perf_counter() - self.t0
        for t, w in self.w.items():
            self.s.timings.append((t, w.count, dt, self.name))
            self.s.counts[t] = self.s.counts.get(t, 0) + w.count
        print("  %-28s %s in %.1f s" % (self.name, ", ".join(
            "%s %d" % (t, w.count) for t, w in self.w.items()), dt), flush=True)
        return False


# ------------------------------------------------------------------------------------------
# Small value helpers
# ------------------------------------------------------------------------------------------

_days = {}


def ts(sec):
    """RFC 3339 in UTC, the text sqlx writes on SQLite and PostgreSQL accepts."""
    sec = int(sec)
    d, r = divmod(sec, DAY)
    ds = _days.get(d)
    if ds is None:
        ds = _days[d] = time.strftime("%Y-%m-%d", time.gmtime(d * DAY))
    h, r = divmod(r, 3600)
    m, s = divmod(r, 60)
    return "%sT%02d:%02d:%02d+00:00" % (ds, h, m, s)


def ascii_lower(text):
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()


def slugify(text):
    out, dash = [], False
    text = text.replace("++", "pp").replace("#", "sharp").replace("+", "plus")
    for ch in ascii_lower(text):
        if ch.isalnum():
            out.append(ch)
            dash = False
        elif not dash:
            out.append("-")
            dash = True
    s = "".join(out).strip("-")
    return s or "x"


def jdump(v):
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


# Project states: the "old" mix (history) and the "young" one (the last 5 % of projects).
OLD_STATUS = [("completed", 50), ("cancelled", 5), ("in_progress", 8), ("in_review", 2),
              ("assigned", 2), ("disputed", 1), ("published_curated", 12), ("bidding", 6),
              ("published_private", 3), ("pending_publication", 3), ("draft", 8)]
YOUNG_STATUS = [("draft", 15), ("pending_publication", 10), ("published_curated", 30),
                ("bidding", 15), ("published_private", 8), ("assigned", 7),
                ("in_progress", 15)]
WITH_EXPERT = {"completed", "in_progress", "in_review", "assigned", "disputed"}
OPEN_STATES = {"published_curated", "bidding", "published_private"}


def weighted(pairs):
    names = [n for n, _ in pairs]
    cum, t = [], 0
    for _, w in pairs:
        t += w
        cum.append(t)
    return names, cum


LEVELS = ["Global", "Pro", "Enterprise"]
RATE_BP = {"Global": 500, "Pro": 400, "Enterprise": 300}


class Seeder:
    def __init__(self, args):
        self.args = args
        self.url = args.database_url
        self.engine = common.engine_of(self.url)
        self.f = SIZES[args.size]
        self.timings = []
        self.counts = {}
        self.conn = None
        if self.engine == "sqlite":
            self.conn = common.sqlite3.connect(common.sqlite_path(self.url), isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=OFF")
            self.conn.execute("PRAGMA foreign_keys=OFF")
            self.conn.execute("PRAGMA cache_size=-262144")
        self.db = common.Db(self.url)
        if self.engine == "sqlite":
            self.db.conn = self.conn
        now = time.strptime(args.now, "%Y-%m-%d")
        self.end = int(time.mktime(now) - time.timezone)
        self.start = self.end - 3 * 365 * DAY
        self.span = self.end - self.start

    def rng(self, name):
        return random.Random("%d:%s" % (SEED, name))

    def base(self, table):
        return int(self.db.value("SELECT COALESCE(MAX(id), 0) FROM %s" % table) or 0)

    # --------------------------------------------------------------------------------------
    def plan(self):
        f = self.f
        self.n_users = 10000 * f
        self.n_admins = 10 * f
        self.n_companies = 2500 * f
        self.n_experts = self.n_users - self.n_admins - self.n_companies
        self.n_projects = 10000 * f
        self.n_messages = 100000 * f
        self.n_notifications = 50000 * f
        self.n_admin_invitations = 30 * f
        self.ubase = self.base("users")
        self.pfbase = self.base("profiles")
        self.skbase = self.base("skills")
        self.prbase = self.base("projects")
        # user k (1-based): admins, then companies, then experts
        self.first_company = self.n_admins + 1
        self.first_expert = self.n_admins + self.n_companies + 1
        self.hot_company = self.ubase + self.first_company
        self.hot_expert = self.ubase + self.first_expert
        self.admin = self.ubase + 1
        self.hot_room = self.prbase + 1

    def uid_company(self, rng):
        return self.ubase + self.first_company + int(self.n_companies * rng.random() ** 1.5)

    def uid_expert(self, rng):
        return self.ubase + self.first_expert + int(self.n_experts * rng.random() ** 1.5)

    def level_of(self, uid):
        h = (uid * 2654435761) % 100
        return "Enterprise" if h < 10 else ("Pro" if h < 35 else "Global")

    def person(self, k):
        """Deterministic (first, last1, last2) for user k."""
        r = random.Random(k * 7919 + SEED)
        first = r.choice(W.FIRST_NAMES)
        last = r.choice(W.LAST_NAMES)
        last2 = r.choice(W.LAST_NAMES)
        return first, last, last2, r

    # --------------------------------------------------------------------------------------
    def password_hash(self):
        if self.engine == "postgres":
            migrated = self.db.value("SELECT to_regclass('public.users') IS NOT NULL") == "t"
        else:
            migrated = bool(self.db.rows(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'users'"))
        rows = self.db.rows("SELECT password_hash FROM users WHERE email LIKE 'seed.%@example.com'"
                            " ORDER BY id LIMIT 1") if migrated else []
        if rows:
            return rows[0][0]
        binary = common.find_binary(self.args.binary)
        name = common.pg_dbname(self.url) if self.engine == "postgres" else \
            os.path.splitext(os.path.basename(common.sqlite_path(self.url)))[0]
        svc = common.Service(binary, self.url, os.path.join(self.args.data_dir, "seed-" + name))
        try:
            svc.wait_ready()
            for role in ("empresa", "experto"):
                st, body, _ = common.http("POST", svc.base + "/api/auth/register", {
                    "email": "seed.%s@example.com" % role, "username": "seed_%s" % role,
                    "password": common.PASSWORD, "roles": [role]})
                if st not in (200, 201, 409):
                    raise SystemExit("registration failed: %s %s" % (st, body))
        finally:
            svc.stop()
        return self.db.rows("SELECT password_hash FROM users WHERE email LIKE "
                            "'seed.%@example.com' ORDER BY id LIMIT 1")[0][0]

    def bulk_load(self, on):
        """SQLite, once the service that migrated the file has stopped: no journal while the
        rows go in, and a page cache that holds the indexes they fill. Each phase is one
        transaction; in WAL mode its pages spilled from a small cache were appended to the log
        again and again (7.6 GB of log 50 minutes into L's projects), and every page read had
        to look for its newest copy there. A failed load leaves a file to recreate, as it
        would anyway. Back to WAL, and the default cache, for the service."""
        if self.engine != "sqlite":
            return
        if on:
            self.conn.execute("PRAGMA journal_mode=OFF")
            self.conn.execute("PRAGMA cache_size=-%d" % (4 << 20))
        else:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA cache_size=-262144")

    # --------------------------------------------------------------------------------------
    def seed_skills(self):
        cols = ["id", "name", "slug", "is_active", "created_at", "category"]
        existing = {r[0] for r in self.db.rows("SELECT slug FROM skills")}
        self.skills = []  # (id, name)
        with Phase(self, "skills", {"skills": cols}) as w:
            sid = self.skbase
            for i, (name, cat) in enumerate(W.SKILLS):
                slug = slugify(name)
                if slug in existing:
                    continue
                existing.add(slug)
                sid += 1
                active = (i % 37) != 36  # a few inactive skills
                w["skills"].write((sid, name, slug, active, ts(self.start - DAY), cat))
                self.skills.append((sid, name))
        by_name = {n: i for i, n in self.skills}
        popular = [(by_name[n], n) for n in W.POPULAR_SKILLS if n in by_name]
        self.popular_skills = popular

    def pick_skills(self, rng, n):
        out = {}
        while len(out) < n:
            if rng.random() < 0.55:
                sid, name = rng.choice(self.popular_skills)
            else:
                sid, name = rng.choice(self.skills)
            out[sid] = name
        return out

    # --------------------------------------------------------------------------------------
    def seed_users(self, pw_hash):
        ucols = ["id", "email", "username", "password_hash", "active_role", "is_active",
                 "email_verified", "accept_marketing", "source", "suspended_at", "last_login_at",
                 "created_at", "updated_at", "email_verified_at"]
        rcols = ["user_id", "role", "created_at"]
        pcols = ["id", "user_id", "profile_type", "full_name", "bio", "phone", "location",
                 "is_verified", "verification_status", "slug", "expert_level", "availability",
                 "internal_rating", "hourly_rate_minor", "experience_years", "main_area",
                 "work_language", "linkedin_url", "company_name", "company_website",
                 "contact_person", "company_type", "industry", "company_size", "company_email",
                 "preferred_language", "tax_id", "fiscal_name", "fiscal_address",
                 "fiscal_postal_code", "fiscal_city", "fiscal_province", "fiscal_country",
                 "fiscal_type", "birth_date", "irpf_rate", "fiscal_data_complete",
                 "created_at", "updated_at", "verified_at"]
        pscols = ["profile_id", "skill_id"]
        dcols = ["id", "user_id", "period", "status", "review_deadline", "notified_at",
                 "reviewed_at", "created_at", "updated_at"]
        rng = self.rng("users")
        dac7_base = self.base("dac7_reviews")
        dac7_id = dac7_base
        words = W.TECH_WORDS + W.SPANISH_WORDS + W.BUSINESS_WORDS
        # users are created over the first 2.9 years, so the last month has signups too
        with Phase(self, "users+profiles+skills", {"users": ucols, "user_roles": rcols,
                                                   "profiles": pcols,
                                                   "profile_skills": pscols,
                                                   "dac7_reviews": dcols}) as w:
            wu, wr, wp, wps, wd = (w["users"], w["user_roles"], w["profiles"],
                                   w["profile_skills"], w["dac7_reviews"])
            n = self.n_users
            for k in range(1, n + 1):
                uid = self.ubase + k
                first, last, last2, r = self.person(k)
                if k < self.first_company:
                    role = "admin"
                elif k < self.first_expert:
                    role = "empresa"
                else:
                    role = "experto"
                created = self.start + int(self.span * (k - 1) / n) + r.randrange(3600)
                a_first, a_last = ascii_lower(first), ascii_lower(last)
                email = "%s.%s%d@%s" % (a_first, a_last, k, r.choice(W.EMAIL_DOMAINS))
                if role == "admin":
                    email = "%s.%s%d@marketplace.example" % (a_first, a_last, k)
                username = "%s_%s%d" % (a_first, a_last, k)
                hot = uid in (self.hot_company, self.hot_expert, self.admin)
                active = hot or r.random() > 0.01
                suspended = None if active else ts(created + 30 * DAY)
                last_login = ts(min(self.end - 60, created + r.randrange(max(1, self.end - created))))
                wu.write((uid, email, username, pw_hash, role, active, True,
                          r.random() < 0.3, r.choice(("web", "linkedin", "google", "referral")),
                          suspended, last_login, ts(created), ts(created), ts(created + 600)))
                wr.write((uid, role, ts(created)))
                full = "%s %s %s" % (first, last, last2)
                pid = self.pfbase + k
                verified = hot or r.random() < 0.8
                vstatus = "verified" if verified else r.choice(
                    ("pending", "pre_evaluated", "rejected", "resubmitted"))
                bio = " ".join(r.choices(words, k=25))
                city = r.choice(W.CITIES)
                prov = r.choice(W.PROVINCES)
                fiscal = r.random() < 0.6 or hot
                if role == "experto":
                    level = self.level_of(uid)
                    avail = "available" if hot else r.choice(
                        ("available", "available", "available", "part_time", "busy",
                         "unavailable"))
                    rating = None if r.random() < 0.5 else round(3 + 2 * r.random(), 1)
                    skills = self.pick_skills(r, r.randint(3, 7))
                    wp.write((pid, uid, "experto", full, bio, "+34 6%08d" % r.randrange(10 ** 8),
                              city, verified, vstatus, slugify(username), level, avail, rating,
                              r.randrange(20, 150) * 100, r.randrange(1, 25),
                              W.SKILLS[r.randrange(len(W.SKILLS))][1], r.choice(("es", "en")),
                              "https://www.linkedin.com/in/%s" % slugify(username),
                              None, None, None, None, None, None, None, r.choice(("es", "en")),
                              ("%08dZ" % r.randrange(10 ** 8)) if fiscal else None,
                              full if fiscal else None,
                              ("Calle %s %d" % (r.choice(W.LAST_NAMES), r.randrange(1, 200)))
                              if fiscal else None,
                              "%05d" % r.randrange(1000, 52999) if fiscal else None,
                              city if fiscal else None, prov if fiscal else None,
                              "ES" if fiscal else None, "autonomo" if fiscal else None,
                              "19%02d-%02d-%02d" % (r.randrange(60, 99), r.randrange(1, 13),
                                                    r.randrange(1, 29)) if fiscal else None,
                              15 if fiscal else None, fiscal, ts(created), ts(created),
                              ts(created + DAY) if verified else None))
                    for sid in skills:
                        wps.write((pid, sid))
                    if fiscal and r.random() < 0.2:
                        dac7_id += 1
                        st = r.choice(("pending_review", "notified", "reviewed"))
                        wd.write((dac7_id, uid, 2025, st, "2026-01-31",
                                  ts(self.end - 300 * DAY) if st != "pending_review" else None,
                                  ts(self.end - 290 * DAY) if st == "reviewed" else None,
                                  ts(self.end - 330 * DAY), ts(self.end - 290 * DAY)))
                elif role == "empresa":
                    cname = "%s %s %s" % (last, r.choice(W.COMPANY_WORDS),
                                          r.choice(("S.L.", "S.A.", "Ltd", "SLU")))
                    site = "https://www.%s.com" % slugify(cname)
                    wp.write((pid, uid, "empresa", full, bio, "+34 9%08d" % r.randrange(10 ** 8),
                              city, verified, vstatus, slugify(username), "Global", None, None,
                              None, None, None, None, None,
                              cname, site, full, r.choice(("startup", "sme", "corporate")),
                              r.choice(W.INDUSTRIES), r.choice(("1-10", "11-50", "51-200", "200+")),
                              "info%d@%s" % (k, site[12:]), r.choice(("es", "en")),
                              ("B%08d" % r.randrange(10 ** 8)) if fiscal else None,
                              cname if fiscal else None,
                              ("Avenida %s %d" % (r.choice(W.LAST_NAMES), r.randrange(1, 200)))
                              if fiscal else None,
                              "%05d" % r.randrange(1000, 52999) if fiscal else None,
                              city if fiscal else None, prov if fiscal else None,
                              "ES" if fiscal else None, "empresa" if fiscal else None, None,
                              None, fiscal, ts(created), ts(created),
                              ts(created + DAY) if verified else None))
                else:
                    wp.write((pid, uid, "admin", full, None, None, city, True, "verified",
                              slugify(username), "Global", None, None, None, None, None, None,
                              None, None, None, None, None, None, None, None, None, None, None,
                              None, None, None, None, None, None, None, None, False,
                              ts(created), ts(created), None))

    # --------------------------------------------------------------------------------------
    def seed_projects(self):
        prcols = ["id", "company_id", "expert_id", "target_expert_id", "title", "description", "budget_minor",
                  "currency", "deadline", "skills_required", "project_type", "status",
                  "validation_status", "submitted_at", "validated_at", "invited_experts",
                  "admin_notes", "created_at", "updated_at", "validated_by", "published_at",
                  "assigned_at", "completed_at", "cancelled_at"]
        apcols = ["id", "project_id", "expert_id", "cover_letter", "proposed_budget_minor",
                  "proposed_milestones", "status", "attempt_number", "created_at",
                  "updated_at", "rejected_by_selection"]
        micols = ["id", "project_id", "position", "title", "description", "amount_minor",
                  "currency", "due_date", "status", "rejection_count", "started_at",
                  "approved_at", "created_at", "updated_at", "completed_at", "cancelled_at",
                  "awaiting_payment_at", "funding_due_at", "funding_reminded_at"]
        pacols = ["id", "project_id", "milestone_id", "company_id", "expert_id", "amount_minor",
                  "currency", "processor_payment_intent_id", "processor_charge_id", "status",
                  "commission_minor", "expert_level_used", "application_fee_minor",
                  "expert_amount_minor", "processor_transfer_id", "payout_status", "held_at",
                  "released_at", "refunded_at", "payment_metadata", "created_at", "updated_at",
                  "capture_before"]
        dicols = ["id", "project_id", "payment_id", "raised_by", "status", "reason", "title",
                  "dispute_type", "priority", "description", "created_at", "updated_at",
                  "resolved_at", "resolution", "resolution_action", "resolved_by",
                  "response_due_at", "escalated_at"]
        rvcols = ["id", "project_id", "reviewer_id", "reviewee_id", "rating", "comment",
                  "visibility", "created_at", "updated_at", "reviewer_role", "blind_until",
                  "revealed_at", "announced_at"]
        picols = ["id", "project_id", "expert_id", "invited_by", "source", "created_at",
                  "message"]
        ids = {t: self.base(t) for t in ("applications", "milestones", "payments", "disputes",
                                         "reviews", "project_invitations")}
        rng = self.rng("projects")
        old_names, old_cum = weighted(OLD_STATUS)
        young_names, young_cum = weighted(YOUNG_STATUS)
        words = W.TECH_WORDS + W.SPANISH_WORDS + W.BUSINESS_WORDS
        n = self.n_projects
        hot_share = 0.05
        # chat rooms: (project, company, expert) of every project with an expert
        self.room_project = array.array("q")
        self.room_company = array.array("q")
        self.room_expert = array.array("q")
        self.curation_project = None
        self.hot_company_open_project = None
        self.hot_dispute = None
        self.hot_company_projects = 0
        self.hot_expert_reviews = 0
        with Phase(self, "projects and their children", {
                "projects": prcols, "applications": apcols, "milestones": micols,
                "payments": pacols, "disputes": dicols, "reviews": rvcols,
                "project_invitations": picols}) as w:
            for k in range(1, n + 1):
                pid = self.prbase + k
                created = self.start + int(self.span * (k - 1) / n) + rng.randrange(3600)
                age = self.end - created
                if k == 1:  # the hot chat room: the hot company with the hot expert
                    company, status = self.hot_company, "in_progress"
                else:
                    company = self.hot_company if rng.random() < hot_share else \
                        self.uid_company(rng)
                    if k > n * 0.95:
                        status = young_names[_bisect(young_cum, rng.random() * young_cum[-1])]
                    else:
                        status = old_names[_bisect(old_cum, rng.random() * old_cum[-1])]
                if company == self.hot_company:
                    self.hot_company_projects += 1
                ptype = "private" if status == "published_private" or (
                    status not in OPEN_STATES and rng.random() < 0.1) else "curated"
                expert = None
                if status in WITH_EXPERT or (status == "cancelled" and rng.random() < 0.5):
                    if k == 1 or (status == "completed" and rng.random() < 0.10):
                        expert = self.hot_expert
                    else:
                        expert = self.uid_expert(rng)
                skills = list(self.pick_skills(rng, rng.randint(1, 4)).values())
                if rng.random() < 0.5:
                    title = "%s %s" % (rng.choice(W.TITLE_ACTIONS_ES), rng.choice(W.TITLE_OBJECTS))
                else:
                    title = "%s %s" % (rng.choice(W.TITLE_ACTIONS_EN), rng.choice(W.TITLE_OBJECTS))
                title = "%s (%s)" % (title, skills[0])
                desc = " ".join(rng.choices(words, k=rng.randint(20, 45)))
                budget = rng.randrange(5, 500) * 10000
                validated = status not in ("draft", "pending_publication")
                submitted = None if status == "draft" else ts(created + 3600)
                published = ts(created + DAY) if validated else None
                assigned_at = created + 7 * DAY + rng.randrange(7 * DAY) if expert else None
                if assigned_at and assigned_at > self.end - 60:
                    assigned_at = self.end - 60
                completed_at = None
                if status == "completed":
                    completed_at = min(self.end - 30, assigned_at + rng.randrange(20, 120) * DAY)
                cancelled_at = ts(created + 20 * DAY) if status == "cancelled" else None
                updated = completed_at or assigned_at or created + DAY
                # invitations: curation on open curated projects (the hot expert is invited to
                # a fifth of them), the chosen experts of private ones
                inv = []
                if validated and (ptype == "private" or status in OPEN_STATES):
                    if status in OPEN_STATES and ptype == "curated" and rng.random() < 0.2:
                        inv.append(self.hot_expert)
                    for _ in range(rng.randint(1 if ptype == "private" else 0, 3)):
                        e = self.uid_expert(rng)
                        if e not in inv:
                            inv.append(e)
                target = inv[0] if status == "published_private" and inv else None
                if status == "published_curated" and company == self.hot_company and \
                        self.hot_company_open_project is None:
                    self.hot_company_open_project = pid
                if status == "published_curated" and self.curation_project is None and \
                        k > n * 0.95:
                    self.curation_project = pid
                w["projects"].write((
                    pid, company, expert, target, title, desc, budget, "eur",
                    ts(created + rng.randrange(30, 180) * DAY), jdump(skills), ptype, status,
                    ("approved" if validated else ("pending" if submitted else None)),
                    submitted, ts(created + DAY) if validated else None, "[]", "-",
                    ts(created), ts(min(updated, self.end - 1)),
                    self.admin if validated else None, published,
                    ts(assigned_at) if assigned_at else None,
                    ts(completed_at) if completed_at else None, cancelled_at))
                # applications
                if validated:
                    n_app = rng.randint(0, 5) + (3 if company == self.hot_company else 0)
                    appl = set()
                    if expert:
                        appl.add(expert)
                    while len(appl) < n_app + (1 if expert else 0):
                        appl.add(self.uid_expert(rng))
                    for e in appl:
                        ids["applications"] += 1
                        if expert:
                            st = "accepted" if e == expert else "rejected"
                        elif status == "cancelled":
                            st = "rejected"
                        else:
                            st = "pending" if rng.random() < 0.85 else "needs_revision"
                        at = created + DAY + rng.randrange(6 * DAY)
                        w["applications"].write((
                            ids["applications"], pid, e,
                            " ".join(rng.choices(words, k=15)),
                            budget - rng.randrange(0, 5) * 10000 if budget > 50000 else budget,
                            "[]", st, 1, ts(at), ts(at), st == "rejected" and expert is not None))
                # invitations on private projects
                for e in inv:
                    ids["project_invitations"] += 1
                    w["project_invitations"].write((
                        ids["project_invitations"], pid, e, self.admin,
                        "admin" if ptype == "private" else "curation", ts(created + DAY),
                        "Te invitamos a este proyecto"))
                if not expert:
                    continue
                self.room_project.append(pid)
                self.room_company.append(company)
                self.room_expert.append(expert)
                # milestones and payments
                n_ms = rng.randint(1, 4)
                level = self.level_of(expert)
                rate = RATE_BP[level]
                part = budget // n_ms
                dispute_payment = None
                for pos in range(1, n_ms + 1):
                    ids["milestones"] += 1
                    mid = ids["milestones"]
                    amount = part if pos < n_ms else budget - part * (n_ms - 1)
                    mcreated = assigned_at
                    if status == "completed":
                        mst = "approved"
                    elif status == "cancelled":
                        mst = "cancelled"
                    elif status == "assigned":
                        mst = "awaiting_payment" if pos == 1 else "pending"
                    elif status == "in_review":
                        mst = "approved" if pos < n_ms else "completed"
                    else:  # in_progress, disputed
                        cur = 1 + (k % n_ms)
                        mst = "approved" if pos < cur else ("in_progress" if pos == cur
                                                            else "pending")
                    done = completed_at or min(self.end - 60, mcreated + pos * 10 * DAY)
                    w["milestones"].write((
                        mid, pid, pos, "Hito %d: %s" % (pos, rng.choice(W.TITLE_OBJECTS)),
                        " ".join(rng.choices(words, k=10)), amount, "eur",
                        ts(mcreated + pos * 14 * DAY), mst, 0,
                        ts(mcreated) if mst != "awaiting_payment" else None,
                        ts(done) if mst == "approved" else None, ts(mcreated), ts(done),
                        ts(done) if mst in ("approved", "completed") else None,
                        ts(done) if mst == "cancelled" else None,
                        ts(mcreated) if mst == "awaiting_payment" else None,
                        ts(mcreated + 7 * DAY) if mst == "awaiting_payment" else None,
                        # a reminder already sent when it was due (else the service's timers
                        # send thousands of them at its first start)
                        ts(mcreated + 7 * DAY + 3600)
                        if mst == "awaiting_payment" and mcreated + 7 * DAY + 3600 < self.end
                        else None))
                    # payment: every funded milestone; released once approved
                    if mst == "awaiting_payment" or (mst == "cancelled" and rng.random() < 0.5):
                        continue
                    if mst == "approved":
                        pst, payout = "released", "transferred"
                    elif mst == "cancelled":
                        pst, payout = "refunded", "pending"
                    elif status == "disputed" and mst == "in_progress":
                        pst, payout = "disputed", "pending"
                    else:
                        pst, payout = "held", "pending"
                    ids["payments"] += 1
                    pay = ids["payments"]
                    if pst == "disputed":
                        dispute_payment = pay
                    com = amount * rate // 10000
                    w["payments"].write((
                        pay, pid, mid, company, expert, amount, "eur", "pi_seed_%d" % pay,
                        "ch_seed_%d" % pay, pst, com, level, com, amount - com,
                        "tr_seed_%d" % pay if payout == "transferred" else None, payout,
                        ts(mcreated + 3600), ts(done) if pst == "released" else None,
                        ts(done) if pst == "refunded" else None, "{}", ts(mcreated),
                        ts(done), ts(mcreated + 7 * DAY) if pst == "held" else None))
                # disputes: every disputed project, and a few resolved ones in history
                if status == "disputed" or (status == "completed" and rng.random() < 0.01):
                    ids["disputes"] += 1
                    dcreated = (assigned_at or created) + 10 * DAY
                    resolved = status == "completed"
                    dst = "resolved" if resolved else rng.choice(("open", "in_review"))
                    w["disputes"].write((
                        ids["disputes"], pid, dispute_payment, company, dst,
                        "La entrega no cumple los requisitos acordados",
                        "Disputa: %s" % title[:60], rng.choice(("quality", "deadline", "payment")),
                        rng.choice(("low", "medium", "high")),
                        " ".join(rng.choices(words, k=20)), ts(dcreated),
                        ts(dcreated + DAY), ts(dcreated + 5 * DAY) if resolved else None,
                        "Acuerdo entre las partes" if resolved else None,
                        "release_to_expert" if resolved else None,
                        self.admin if resolved else None,
                        None if resolved else ts(dcreated + 7 * DAY),
                        # escalated already when its response was due
                        ts(dcreated + 7 * DAY + 3600)
                        if not resolved and dcreated + 7 * DAY + 3600 < self.end else None))
                    if company == self.hot_company and not resolved and self.hot_dispute is None:
                        self.hot_dispute = pid
                # reviews on completed projects: company -> expert, expert -> company
                if status == "completed":
                    for reviewer, reviewee, role, p in ((company, expert, "empresa", 0.95),
                                                        (expert, company, "experto", 0.8)):
                        if rng.random() > p:
                            continue
                        ids["reviews"] += 1
                        if reviewee == self.hot_expert:
                            self.hot_expert_reviews += 1
                        rat = rng.choice((5, 5, 5, 4, 4, 4, 3, 2, 1))
                        rc = completed_at + rng.randrange(1, 10) * DAY
                        rc = min(rc, self.end - 10)
                        w["reviews"].write((
                            ids["reviews"], pid, reviewer, reviewee, rat,
                            rng.choice(W.REVIEW_COMMENTS),
                            "hidden" if rng.random() < 0.02 else "published", ts(rc), ts(rc),
                            role, ts(min(rc + 14 * DAY, self.end)), ts(min(rc + DAY, self.end)),
                            ts(min(rc + DAY, self.end))))

    # --------------------------------------------------------------------------------------
    def seed_chat(self):
        # Each message's place in its room and among its sender's (migrations 0018, 0021),
        # written here since the messages come in id order: renumbering 10 M rows after the
        # load took longer than the load itself at L.
        cols = ["id", "project_id", "sender_id", "content", "created_at", "room_seq",
                "sender_seq"]
        rng = self.rng("chat")
        base = self.base("chat_messages")
        n = self.n_messages
        rooms = len(self.room_project)
        # messages span the last 18 months, in id order
        start = self.end - 540 * DAY
        span = self.end - 60 - start
        words = W.TECH_WORDS + W.SPANISH_WORDS
        phrases = W.CHAT_PHRASES
        rp, rc, re_ = self.room_project, self.room_company, self.room_expert
        in_room = array.array("q", bytes(8 * rooms))
        by_company = array.array("q", bytes(8 * rooms))
        by_expert = array.array("q", bytes(8 * rooms))
        with Phase(self, "chat_messages", {"chat_messages": cols}) as w:
            wr = w["chat_messages"].write
            for i in range(1, n + 1):
                r = rng.random()
                j = 0 if r < 0.10 else int(rooms * rng.random())
                from_company = rng.random() < 0.5
                sender = rc[j] if from_company else re_[j]
                if r < 0.5:
                    content = phrases[int(r * 1000) % len(phrases)]
                else:
                    content = " ".join(rng.choices(words, k=1 + int(r * 12)))
                in_room[j] += 1
                mine = by_company if from_company else by_expert
                mine[j] += 1
                wr((base + i, rp[j], sender, content, ts(start + span * i // n), in_room[j],
                    mine[j]))

    def seed_notifications(self):
        cols = ["id", "user_id", "type", "title", "message", "data", "is_read", "read_at",
                "event_id", "created_at"]
        rng = self.rng("notifications")
        base = self.base("notifications")
        n = self.n_notifications
        start = self.end - 365 * DAY
        span = self.end - 60 - start
        types = W.NOTIFICATION_TYPES
        with Phase(self, "notifications", {"notifications": cols}) as w:
            wr = w["notifications"].write
            for i in range(1, n + 1):
                r = rng.random()
                if r < 0.05:
                    uid = self.hot_company
                elif r < 0.08:
                    uid = self.hot_expert
                else:
                    uid = self.ubase + 1 + int(self.n_users * rng.random())
                typ, title, msg = types[int(r * 7919) % len(types)]
                created = start + span * i // n
                read = rng.random() < 0.6
                wr((base + i, uid, typ, title, msg,
                    '{"project_id":%d}' % (self.prbase + 1 + int(self.n_projects * r)),
                    read, ts(created + 3600) if read else None, 10 ** 9 + base + i,
                    ts(created)))

    def seed_admin_invitations(self):
        cols = ["id", "email", "invited_by", "message", "token_hash", "expires_at", "used",
                "used_at", "created_at"]
        rng = self.rng("admin_invitations")
        base = self.base("admin_invitations")
        with Phase(self, "admin_invitations", {"admin_invitations": cols}) as w:
            for i in range(1, self.n_admin_invitations + 1):
                first, last = rng.choice(W.FIRST_NAMES), rng.choice(W.LAST_NAMES)
                created = self.end - rng.randrange(1, 700) * DAY
                used = rng.random() < 0.4
                w["admin_invitations"].write((
                    base + i, "%s.%s.inv%d@marketplace.example" % (ascii_lower(first),
                                                                    ascii_lower(last), i),
                    self.admin, "Bienvenido al equipo de administración",
                    "%064x" % random.Random(i).getrandbits(256), ts(created + 7 * DAY), used,
                    ts(created + DAY) if used else None, ts(created)))

    # --------------------------------------------------------------------------------------
    def finish(self):
        t0 = time.perf_counter()
        here = os.path.dirname(os.path.abspath(__file__))
        if self.engine == "postgres":
            tables = [r[0] for r in self.db.rows(
                "SELECT c.table_name FROM information_schema.columns c "
                "WHERE c.table_schema = 'public' AND c.column_name = 'id' "
                "AND c.is_identity = 'YES'")]
            sql = ";\n".join(
                "SELECT setval(pg_get_serial_sequence('%s', 'id'), "
                "GREATEST((SELECT MAX(id) FROM %s), 1))" % (t, t) for t in tables)
            self.db.execute(sql)
            # VACUUM as well: a database in service has its visibility maps set by
            # autovacuum, so its plans use index-only scans; a freshly loaded one has none.
            self.db.run_file(os.path.join(here, "after_seed.postgres.sql"),
                             then=["VACUUM ANALYZE"])
        else:
            self.db.run_file(os.path.join(here, "after_seed.sqlite.sql"), then=["ANALYZE"])
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        dt = time.perf_counter() - t0
        self.timings.append(("(sequences, after_seed, (VACUUM) ANALYZE)", 0, dt, "finish"))
        print("  %-28s %.1f s" % ("sequences+after_seed+ANALYZE", dt), flush=True)

    def manifest(self):
        rows = lambda sql: self.db.rows(sql)  # noqa: E731
        email = lambda uid: rows("SELECT email FROM users WHERE id = %d" % uid)[0][0]  # noqa
        plain_expert = self.ubase + self.first_expert + self.n_experts // 2
        plain_company = self.ubase + self.first_company + self.n_companies // 2
        return {
            "size": self.args.size, "engine": self.engine, "now": self.args.now,
            "password": common.PASSWORD,
            "admin": {"id": self.admin, "email": email(self.admin)},
            "hot_company": {"id": self.hot_company, "email": email(self.hot_company),
                            "projects": self.hot_company_projects},
            "hot_expert": {"id": self.hot_expert, "email": email(self.hot_expert),
                           "reviews_received": self.hot_expert_reviews},
            "expert": {"id": plain_expert, "email": email(plain_expert)},
            "company": {"id": plain_company, "email": email(plain_company)},
            "hot_room": self.hot_room,
            "hot_company_open_project": self.hot_company_open_project,
            "curation_project": self.hot_company_open_project,
            "hot_dispute_project": self.hot_dispute,
            "counts": self.counts,
        }


def _bisect(cum, x):
    lo, hi = 0, len(cum) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if cum[mid] > x:
            hi = mid
        else:
            lo = mid + 1
    return lo


def recreate(url):
    engine = common.engine_of(url)
    if engine == "postgres":
        name = common.pg_dbname(url)
        admin = common.pg_admin_url(url)
        subprocess.run(["psql", admin, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c",
                        'DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name], check=True)
        subprocess.run(["psql", admin, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c",
                        'CREATE DATABASE "%s"' % name], check=True)
    else:
        path = common.sqlite_path(url)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)


def default_manifest(url, data_dir):
    if common.engine_of(url) == "postgres":
        name = common.pg_dbname(url)
    else:
        name = os.path.splitext(os.path.basename(common.sqlite_path(url)))[0]
    return os.path.join(data_dir, "%s.%s.manifest.json" % (name, common.engine_of(url)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), required=True)
    ap.add_argument("--database-url", required=True)
    ap.add_argument("--recreate", action="store_true",
                    help="drop and create the PostgreSQL database (or delete the SQLite file) "
                         "first; the service then migrates it")
    ap.add_argument("--binary", help="service binary (default: release, else debug build)")
    ap.add_argument("--data-dir", default="/work/scale-data")
    ap.add_argument("--now", default="2026-11-27",
                    help="reference date (UTC) the data ends at (default 2026-11-27)")
    ap.add_argument("--manifest", help="where to write the manifest for bench.py")
    args = ap.parse_args()
    os.makedirs(args.data_dir, exist_ok=True)
    t_all = time.perf_counter()
    if args.recreate:
        recreate(args.database_url)
    s = Seeder(args)
    print("seeding size %s on %s (now=%s)" % (args.size, s.engine, args.now), flush=True)
    t0 = time.perf_counter()
    pw = s.password_hash()  # starts the service once if needed: it migrates the schema
    print("  %-28s %.1f s" % ("service start+register", time.perf_counter() - t0), flush=True)
    s.bulk_load(True)
    s.plan()
    s.seed_skills()
    s.seed_users(pw)
    s.seed_projects()
    s.seed_chat()
    s.seed_notifications()
    s.seed_admin_invitations()
    s.bulk_load(False)
    s.finish()
    total = time.perf_counter() - t_all
    man = s.manifest()
    man["seed_seconds"] = round(total, 1)
    man["timings"] = [{"table": t, "rows": n, "phase": p, "phase_seconds": round(d, 2)}
                      for t, n, d, p in s.timings]
    path = args.manifest or default_manifest(args.database_url, args.data_dir)
    with open(path, "w") as f:
        json.dump(man, f, indent=2)
    print("total %.1f s; manifest %s" % (total, path))


if __name__ == "__main__":
    main()
