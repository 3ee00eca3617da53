#!/usr/bin/env python3
"""Time every list and search endpoint of the marketplace on a seeded database (issue #32).

    python3 benches/scale/bench.py --database-url <url> [--size S] \
        [--redis-url redis://127.0.0.1:6379] [--json out.json]

Starts the service binary on the database (with Redis on PostgreSQL when --redis-url is given,
as production runs; never on SQLite), logs in seeded users of each role (from the manifest
seed.py wrote), and times each endpoint single-client: 2 warm-ups, then 15 measured requests,
p50 and p99 (nearest rank; with 15 samples p99 is the slowest) in ms. A non-2xx answer or a
timeout is reported, not fatal. An endpoint
whose second warm-up takes more than --slow-seconds (3 s) gets --slow-requests (5) measured
requests instead of 15, so a run at L ends in minutes; the report's `n` says how many. On PostgreSQL, auto_explain logs the plan of every statement
slower than 20 ms while the bench runs; the plans are read back from the server log and tied to
the endpoint being measured at the time.
"""

import argparse
import glob
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

WARMUP = 2
REQUESTS = 15
TIMEOUT = 30.0
SLOW_MS = 20


def pct(sorted_ms, p):
    if not sorted_ms:
        return None
    return sorted_ms[max(0, math.ceil(p / 100 * len(sorted_ms)) - 1)]


def machine():
    info = {"platform": platform.platform(), "cores": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["ram_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return info


def binary_info(path, build=None, commit=None):
    """What was run. A binary copied out of the target directory names its build and commit
    (--build, --commit): its path no longer tells them."""
    st = os.stat(path)
    build = build or ("release" if "/release/" in path else "debug")
    if not commit:
        try:
            commit = subprocess.run(["git", "-C", os.path.dirname(path) + "/../..", "rev-parse",
                                     "--short", "HEAD"], capture_output=True, text=True,
                                    check=True).stdout.strip()
        except (subprocess.CalledProcessError, OSError):
            pass
    return {"path": path, "profile": build,
            "mtime": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(st.st_mtime)),
            "source_commit": commit}


PG_SETTINGS = ["shared_buffers", "work_mem", "effective_cache_size", "jit",
               "random_page_cost", "max_parallel_workers_per_gather", "server_version"]


class PgLog:
    """New lines of the PostgreSQL server log since `start()`."""

    def __init__(self, path=None):
        cands = sorted(glob.glob("/var/log/postgresql/postgresql-*-main.log"))
        self.path = path or (cands[-1] if cands else None)
        self.offset = 0

    def start(self):
        if self.path and os.path.exists(self.path):
            self.offset = os.path.getsize(self.path)

    def read(self):
        if not self.path:
            return ""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            return f.read().decode(errors="replace")


ENTRY = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) (\w+) \[\d+\] (\S*)@(\S*) LOG:  "
                   r"duration: ([\d.]+) ms  plan:", re.M)


def parse_plans(text, dbname):
    """[(epoch seconds, ms, query text, plan text)] for one database."""
    out = []
    matches = list(ENTRY.finditer(text))
    for i, m in enumerate(matches):
        if m.group(4) != dbname:
            continue
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[m.end():end]
        # stop at the next log line of any kind
        nxt = re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", body, re.M)
        if nxt:
            body = body[:nxt.start()]
        stamp = m.group(1)
        t = time.mktime(time.strptime(stamp.split(".")[0], "%Y-%m-%d %H:%M:%S"))
        if m.group(2) == "UTC":
            t -= time.timezone
        t += float("0." + stamp.split(".")[1])
        q = re.search(r"Query Text: (.*?)(?:\n\S|\n\s*(?:Limit|Sort|Seq|Index|Aggregate|Hash|"
                      r"Nested|Merge|Gather|Result|Bitmap|Unique|Subquery|CTE|WindowAgg|"
                      r"Append|Incremental|Group|Materialize|Memoize|Finalize|Partial))",
                      body, re.S)
        qtext = q.group(1) if q else body[:400]
        out.append((t, float(m.group(5)), " ".join(qtext.split()), body.rstrip()))
    return out


class Bench:
    def __init__(self, args):
        self.args = args
        self.url = args.database_url
        self.engine = common.engine_of(self.url)
        self.results = []

    def endpoint_list(self, m):
        """(name, caller, path[, statement run before each request]) in the order they run;
        paths may hold {placeholders}."""
        hc, he, room = m["hot_company"]["id"], m["hot_expert"]["id"], m["hot_room"]
        openp = m.get("hot_company_open_project") or room
        cur = openp  # the caller must own the project
        dproj = m.get("hot_dispute_project") or room
        # Writes that change nothing but count as writes (migrations 0043 and 0047).
        project_written = "UPDATE projects SET title = title WHERE id = %d" % openp
        expert_written = "UPDATE profiles SET bio = bio WHERE user_id = %d" % he
        return [
            ("projects public p1", "anon", "/api/projects/public"),
            ("projects public deep page", "anon", "/api/projects/public?page={deep}"),
            ("projects public last page", "anon", "/api/projects/public?page={last}"),
            ("projects public skill=python", "anon", "/api/projects/public?skill=python"),
            ("projects public budget 1000-5000", "anon",
             "/api/projects/public?min_budget=1000&max_budget=5000"),
            ("projects public search=kubernetes", "anon",
             "/api/projects/public?search=kubernetes"),
            ("projects search=kubernetes (expert)", "expert", "/api/projects?search=kubernetes"),
            ("projects search=kubernetes (admin)", "admin", "/api/projects?search=kubernetes"),
            ("projects list (expert) p1", "expert", "/api/projects"),
            ("projects/all (admin) p1", "admin", "/api/projects/all"),
            ("projects/my (hot company)", "hot_company", "/api/projects/my"),
            ("projects/my (hot company) last page", "hot_company", "/api/projects/my?page={my_last}"),
            ("expert available-projects", "expert", "/api/expert/available-projects"),
            ("expert available-projects (hot expert)", "hot_expert",
             "/api/expert/available-projects"),
            ("expert assigned-projects (hot expert)", "hot_expert",
             "/api/expert/assigned-projects"),
            ("expert applications (hot expert)", "hot_expert", "/api/expert/applications"),
            ("expert invitations", "expert", "/api/expert/invitations"),
            ("expert invitations (hot expert)", "hot_expert", "/api/expert/invitations"),
            ("expert stats (hot expert)", "hot_expert", "/api/expert/stats"),
            ("project applications (hot company)", "hot_company",
             "/api/projects/%d/applications" % openp),
            ("experts search skill=python&q=data", "anon",
             "/api/profiles/experts?skill=python&q=data"),
            ("experts search q=data", "anon", "/api/profiles/experts?q=data"),
            ("experts search q=data pipeline (two words)", "anon",
             "/api/profiles/experts?q=data%20pipeline"),
            ("experts search skill=python&q=data page 50", "anon",
             "/api/profiles/experts?skill=python&q=data&page=50"),
            ("experts search p1", "anon", "/api/profiles/experts"),
            ("skills python experts", "anon", "/api/skills/python/experts"),
            ("skills active", "anon", "/api/skills/active"),
            ("milestones of hot room", "hot_company", "/api/milestones/project/%d" % room),
            ("deliveries expert/me (hot expert)", "hot_expert",
             "/api/milestones/deliveries/expert/me"),
            ("payments history (hot company)", "hot_company", "/api/payments/history"),
            ("payments history (hot expert)", "hot_expert", "/api/payments/history"),
            ("payments of hot room", "hot_company", "/api/payments/project/%d" % room),
            ("admin payments", "admin", "/api/admin/payments"),
            ("project dispute (hot company)", "hot_company", "/api/projects/%d/dispute" % dproj),
            ("admin disputes", "admin", "/api/admin/disputes"),
            ("admin users p1", "admin", "/api/admin/users"),
            ("admin users search=garcia", "admin", "/api/admin/users?search=garcia"),
            ("admin users role=experto", "admin", "/api/admin/users?role=experto"),
            ("admin projects p1", "admin", "/api/admin/projects"),
            ("admin projects search=data", "admin", "/api/admin/projects?search=data"),
            ("admin profiles", "admin", "/api/admin/profiles"),
            ("admin invitations", "admin", "/api/admin/invitations"),
            ("notifications (hot company)", "hot_company", "/api/notifications"),
            ("notifications unread (hot company)", "hot_company",
             "/api/notifications?unread_only=true"),
            ("chat hot room newest", "hot_company", "/api/chat/%d" % room),
            ("chat hot room before_id (middle)", "hot_company",
             "/api/chat/%d?before_id={chat_mid}" % room),
            ("chat hot room before_id (oldest)", "hot_company",
             "/api/chat/%d?before_id={chat_old}" % room),
            ("reviews of hot expert", "anon", "/api/reviews/user/%d" % he),
            ("reviews stats of hot expert", "anon", "/api/reviews/stats/%d" % he),
            ("reviews of hot company", "anon", "/api/reviews/user/%d" % hc),
            ("admin metrics", "admin", "/api/admin/metrics"),
            ("admin metrics growth 30d", "admin", "/api/admin/metrics/growth?period=30d"),
            ("admin metrics growth 1y", "admin", "/api/admin/metrics/growth?period=1y"),
            ("dac7 summary 2025 (hot expert)", "hot_expert",
             "/api/dac7/expert/dac7-summary?year=2025"),
            ("dac7 admin report 2025", "admin", "/api/dac7/admin/report?year=2025"),
            ("curation suggestions", "hot_company",
             "/api/projects/%d/curation-suggestions" % cur),
            # The answers each instance keeps (`store::page_cache`) with what they are kept
            # under written before each request, as a busy marketplace writes: each is read.
            ("projects public p1 (a project written before each)", "anon",
             "/api/projects/public", project_written),
            ("projects search=kubernetes (expert; a project written before each)", "expert",
             "/api/projects?search=kubernetes", project_written),
            ("experts search q=data (an expert written before each)", "anon",
             "/api/profiles/experts?q=data", expert_written),
            ("curation suggestions (an expert written before each)", "hot_company",
             "/api/projects/%d/curation-suggestions" % cur, expert_written),
        ]

    def run(self):
        a = self.args
        manifest_path = a.manifest or os.path.join(
            a.data_dir, "%s.%s.manifest.json" % (self.dbname(), self.engine))
        with open(manifest_path) as f:
            m = json.load(f)
        size = a.size or m.get("size")
        binary = common.find_binary(a.binary)
        report = {"size": size, "engine": self.engine, "database": self.dbname(),
                  "machine": machine(), "build": binary_info(binary, a.build, a.commit),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "warmup": WARMUP, "requests": a.requests, "timeout_s": TIMEOUT,
                  "slow_seconds": a.slow_seconds, "slow_requests": a.slow_requests}
        db = common.Db(self.url)
        report["row_counts"] = self.row_counts(db)
        pglog = None
        if self.engine == "postgres":
            report["postgres"] = {s: db.value("SHOW %s" % s) for s in PG_SETTINGS}
            report["redis"] = bool(a.redis_url)
            dbn = self.dbname()
            if not a.no_explain:
                db.execute("ALTER DATABASE \"%s\" SET session_preload_libraries = 'auto_explain'"
                           % dbn)
                db.execute("ALTER DATABASE \"%s\" SET auto_explain.log_min_duration = '%dms'"
                           % (dbn, SLOW_MS))
                pglog = PgLog()
                pglog.start()
        else:
            report["sqlite"] = {"version": common.sqlite3.sqlite_version}
        # chat scroll positions (middle and oldest of the hot room)
        room = m["hot_room"]
        lo, hi = db.rows("SELECT MIN(id), MAX(id) FROM chat_messages WHERE project_id = %d"
                         % room)[0]
        lo, hi = int(lo or 1), int(hi or 1)
        data_dir = os.path.join(a.data_dir, "bench-" + self.dbname())
        extra = {"JWT_ACCESS_EXPIRE_MINUTES": "600"}
        svc = common.Service(binary, self.url, data_dir,
                             redis_url=a.redis_url if self.engine == "postgres" else None,
                             extra_env=extra)
        try:
            t0 = time.perf_counter()
            svc.wait_ready()
            report["service_ready_s"] = round(time.perf_counter() - t0, 2)
            report["rss_start_kib"] = svc.rss_kib()
            tokens = {"anon": None}
            for who in ("admin", "hot_company", "hot_expert", "expert", "company"):
                tokens[who] = common.login(svc.base, m[who]["email"], m.get("password",
                                                                          common.PASSWORD))
            vars_ = {"chat_mid": (lo + hi) // 2, "chat_old": lo + 50}
            st, body, _ = common.http("GET", svc.base + "/api/projects/public", timeout=TIMEOUT)
            pages = body.get("pages", 1) if isinstance(body, dict) else 1
            vars_["last"] = max(1, pages)
            vars_["deep"] = max(1, pages // 2)
            st, body, _ = common.http("GET", svc.base + "/api/projects/my",
                                      token=tokens["hot_company"], timeout=TIMEOUT)
            vars_["my_last"] = max(1, body.get("pages", 1)) if isinstance(body, dict) else 1
            report["vars"] = vars_
            only = re.compile(a.only) if a.only else None
            for name, who, path, *before in self.endpoint_list(m):
                if only and not only.search(name):
                    continue
                self.measure(svc.base, name, who, path.format(**vars_), tokens[who],
                             (lambda: db.execute(before[0])) if before else None)
            report["rss_end_kib"] = svc.rss_kib()
        finally:
            svc.stop()
            if pglog is not None:
                db.execute("ALTER DATABASE \"%s\" RESET session_preload_libraries" % dbn)
                db.execute("ALTER DATABASE \"%s\" RESET auto_explain.log_min_duration" % dbn)
        if pglog is not None:
            time.sleep(0.5)
            self.attach_plans(parse_plans(pglog.read(), self.dbname()))
        report["endpoints"] = self.results
        report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return report

    def dbname(self):
        if self.engine == "postgres":
            return common.pg_dbname(self.url)
        return os.path.splitext(os.path.basename(common.sqlite_path(self.url)))[0]

    def row_counts(self, db):
        out = {}
        for t in ("users", "profiles", "profile_skills", "skills", "projects", "applications",
                  "project_invitations", "milestones", "payments", "disputes", "reviews",
                  "chat_messages", "notifications", "admin_invitations", "dac7_reviews"):
            if self.engine == "postgres":
                # planner estimate after ANALYZE: exact counts of 10M rows cost seconds
                v = db.value("SELECT reltuples::bigint FROM pg_class WHERE relname = '%s'" % t)
            else:
                v = db.value("SELECT COUNT(*) FROM %s" % t)
            out[t] = int(v) if v not in (None, "") else None
        return out

    def measure(self, base, name, who, path, token, before=None):
        url = base + path
        statuses, times, errors = [], [], 0
        t_start = time.time()
        info = None
        total = WARMUP + self.args.requests
        i = 0
        while i < total:
            if before:
                before()
            st, body, dt = common.http("GET", url, token=token, timeout=TIMEOUT)
            if i == WARMUP - 1 and dt > self.args.slow_seconds:
                # a slow endpoint: fewer measured requests, so that L ends in minutes
                total = WARMUP + min(self.args.requests, self.args.slow_requests)
            if i == 0:
                if isinstance(body, dict) and "total" in body:
                    info = "total %s" % body["total"]
                elif isinstance(body, dict) and "items" in body:
                    info = "%d items" % len(body["items"])
                elif isinstance(body, list):
                    info = "%d items" % len(body)
                if not (isinstance(st, int) and 200 <= st < 300):
                    info = (json.dumps(body)[:120] if body is not None else None)
            statuses.append(st)
            if i >= WARMUP:
                times.append(dt * 1000)
            if st == "timeout":
                errors += 1
                if errors >= 2:  # two timeouts: stop, do not wait 15 x 30 s
                    break
            i += 1
        times.sort()
        ok = [s for s in statuses if isinstance(s, int) and 200 <= s < 300]
        status = statuses[-1] if not ok or len(ok) < len(statuses) else statuses[0]
        if "timeout" in statuses:
            status = "timeout"
        r = {"endpoint": name, "caller": who, "path": path, "status": status,
             "n": len(times), "p50_ms": round(pct(times, 50), 1) if times else None,
             "p99_ms": round(pct(times, 99), 1) if times else None,
             "max_ms": round(times[-1], 1) if times else None, "info": info,
             "t_start": t_start, "t_end": time.time()}
        self.results.append(r)
        print("%-42s %-11s %7s %3d %9s %9s  %s" % (name, who, status, r["n"],
                                                   fmt(r["p50_ms"]), fmt(r["p99_ms"]),
                                                   info or ""), flush=True)

    def attach_plans(self, plans):
        for r in self.results:
            # the log stamps a statement when it ends (millisecond precision)
            mine = [p for p in plans if r["t_start"] - 0.002 <= p[0] <= r["t_end"] + 0.02]
            groups = {}
            for t, ms, q, plan in mine:
                g = groups.setdefault(q, {"query": q, "count": 0, "total_ms": 0.0,
                                          "max_ms": 0.0, "plan": plan})
                g["count"] += 1
                g["total_ms"] += ms
                if ms >= g["max_ms"]:
                    g["max_ms"], g["plan"] = ms, plan
            slow = sorted(groups.values(), key=lambda g: -g["total_ms"])
            for g in slow:
                g["total_ms"] = round(g["total_ms"], 1)
            r["slow_statements"] = slow


def fmt(v):
    return "-" if v is None else "%.1f" % v


def print_report(rep):
    print()
    print("Scale bench: size %s on %s (%s), build %s" % (rep["size"], rep["engine"],
                                                         rep["database"],
                                                         rep["build"]["profile"]))
    mc = rep["machine"]
    print("machine: %s, %s cores, %s GiB RAM" % (mc.get("cpu"), mc.get("cores"),
                                                 mc.get("ram_gib")))
    if "postgres" in rep:
        print("postgres: " + ", ".join("%s=%s" % kv for kv in rep["postgres"].items())
              + ", redis=%s" % rep.get("redis"))
    print("rows: " + ", ".join("%s %s" % kv for kv in rep["row_counts"].items()))
    print("service RSS: start %s KiB, end %s KiB" % (rep.get("rss_start_kib"),
                                                      rep.get("rss_end_kib")))
    print()
    print("| endpoint | caller | status | n | p50 ms | p99 ms | result |")
    print("|---|---|---|---:|---:|---:|---|")
    for r in rep["endpoints"]:
        print("| %s | %s | %s | %s | %s | %s | %s |" % (r["endpoint"], r["caller"], r["status"],
                                                   r["n"], fmt(r["p50_ms"]), fmt(r["p99_ms"]),
                                                   (r["info"] or "").replace("|", "/")))
    slow = [r for r in rep["endpoints"] if r.get("slow_statements")]
    if slow:
        print()
        print("Statements slower than %d ms (auto_explain), by endpoint:" % SLOW_MS)
        for r in slow:
            print()
            print("## %s (p50 %s ms)" % (r["endpoint"], fmt(r["p50_ms"])))
            for g in r["slow_statements"][:3]:
                print("- %d x, total %.0f ms, max %.0f ms: %s" % (
                    g["count"], g["total_ms"], g["max_ms"], g["query"][:300]))
            print("  plan of the slowest:")
            lines = r["slow_statements"][0]["plan"].splitlines()
            first = next((i for i, line in enumerate(lines) if "(cost=" in line), 0)
            for line in lines[first:]:
                print("    " + line.strip("\t").rstrip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database-url", required=True)
    ap.add_argument("--size", help="label only (default: from the manifest)")
    ap.add_argument("--redis-url", help="Redis for the service (PostgreSQL runs only)")
    ap.add_argument("--json", help="write the full report (with plans) here")
    ap.add_argument("--binary", help="service binary (default: release, else debug build)")
    ap.add_argument("--build", choices=["release", "debug"],
                    help="the binary's build profile (default: from its path)")
    ap.add_argument("--commit", help="the commit the binary was built from (default: the "
                                     "checkout its path is in)")
    ap.add_argument("--data-dir", default="/work/scale-data")
    ap.add_argument("--manifest", help="manifest written by seed.py (default: "
                                       "<data-dir>/<db>.<engine>.manifest.json)")
    ap.add_argument("--only", help="regular expression: run only the endpoints it matches")
    ap.add_argument("--no-explain", action="store_true", help="do not enable auto_explain")
    ap.add_argument("--requests", type=int, default=REQUESTS,
                    help="measured requests per endpoint (default %d)" % REQUESTS)
    ap.add_argument("--slow-seconds", type=float, default=3.0,
                    help="an endpoint whose last warm-up took longer than this ...")
    ap.add_argument("--slow-requests", type=int, default=5,
                    help="... gets only this many measured requests (default 5)")
    args = ap.parse_args()
    b = Bench(args)
    rep = b.run()
    print_report(rep)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rep, f, indent=2)
        print("\nJSON report: %s" % args.json)


if __name__ == "__main__":
    main()
