#!/usr/bin/env python3
"""The restore drill (`deploy/restore.py`): pgBackRest's base backup, WAL archiving and
point-in-time recovery on a PostgreSQL cluster of its own, and the service's money after it.

It brings up dependencies of its own, never the shared ones: a PostgreSQL cluster
(`pg_createcluster` on a free port, dropped at exit) set up with deploy/pgbackrest/postgresql.conf
and backed up with deploy/pgbackrest/pgbackrest.conf as shipped (only its paths and port replaced;
repository, spool, logs and locks in a folder of the drill's own that the postgres user owns), a
Redis process, the processor sandbox as a process of its own (its ledger outlives the service)
and one instance of the release binary (`marketplace migrate`, then `serve`). Then:

  1. the database migrated (and seeded with benches/scale/seed.py at --size, so the figures are
     those of a real database), `stanza-create`, `check`, deploy/pgbackrest/metrics.py before any
     backup (status 2: no valid backup), a backup that fails (its failure recorded as the backup
     unit records it: last_run_success 0), then a full backup, timed, its size from `info`, and the
     metrics again (promtool check metrics; status 0, the backup's figures, last_run_success 1);
  2. an escrow deal through the API (company, expert with an active payout account, a project of
     three milestones, the expert selected); milestone 1 funded at the sandbox (held), delivered,
     approved (released: captured and transferred); milestone 2 funded (held) and delivered;
  3. the restore point: the database's clock T (`clock_timestamp()`), the sandbox's ledger L1 on
     either side of it (equal: nothing moved across T); a second later the last step, the approval
     of milestone 2 with an `Idempotency-Key` (captured, transferred, milestone 3's intent made),
     ledger L2; `pg_switch_wal()` and `pgbackrest check`: the WAL is in the repository;
  4. the machine lost: the service stopped, PostgreSQL stopped with `-m immediate` and its data
     directory emptied; `pgbackrest restore --type=time --target=T --target-action=promote`
     (timed), PostgreSQL started and out of recovery, deploy/pgbackrest/after-restore.sql run (every
     sequence a million on), the service started on it (timed);
  5. checks: (a) the restored database is the ledger as of L1 (milestone 1 released with its
     transfer, milestone 2 held, no milestone 3 payment; the last transaction replayed before T);
     (b) the money audit (`GET /api/admin/payments/audit`) over the deal's window names exactly the
     payments whose processor objects moved between L1 and L2 (milestone 2's: recorded held, intent
     succeeded), and the drill prints what an operator needs: the payment, its intent, the
     transfer and any other object at the processor the restored database does not know (from the
     ledger); (c) the last step replayed as a client would, the same request with the same
     `Idempotency-Key`: answered 2xx, no money moved at the processor (ledger L3 against L2: the
     same capture, the same transfer, nothing new but intents without money), the database
     records the transfer that was made, and the audit is clean.

Usage: deploy/restore.py --bin target/release/marketplace [--size S|M] [--delta] [--workdir DIR]
       [--pids FILE] [--cluster-file FILE] [--figures FILE]
(S: about 80 s, 35 s of it seeding; M: about 6 minutes, 3.5 of them seeding.)

Prints a table and PASS/FAIL lines; the figures line last. Exits non-zero on any broken
expectation. Only Python's standard library (and deploy/faults.py's helpers). Runs as root
(`pg_createcluster`; pgBackRest and PostgreSQL run as postgres through `runuser`).
"""

import argparse
import datetime
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faults  # noqa: E402
from faults import Account, Failed, api, free_port, log, member, sql, wait_until  # noqa: E402

DEPLOY = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DEPLOY)
PGBACKREST = os.path.join(DEPLOY, "pgbackrest")
STANZA = "marketplace"
# Milestone amounts of the deal (major units; the budget is their sum).
AMOUNTS = (40.0, 30.0, 30.0)
# Between the restore point and the last step: the step's commits are clearly after it.
AFTER_T = 1.0


def mb(n):
    return f"{n / 1e6:.1f} MB"


# --- the cluster and pgBackRest --------------------------------------------------------------

class Cluster(faults.Postgres):
    """faults.py's cluster of its own, archiving to a pgBackRest repository of its own: the
    repository, spool, logs, locks and configuration live in `<tmp>/<cluster>.pgbackrest`, owned
    by postgres (archive_command runs as postgres, and the drill's workdir may not be open to
    it). The cluster file holds `version name` on its first line (as faults.py's) and that folder
    on its second; both are removed at exit."""

    def __init__(self, cluster_file):
        super().__init__(cluster_file)
        self.cluster = f"restore_{secrets.token_hex(4)}"
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/restore"
        self.admin_url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        self.data = f"/var/lib/postgresql/{self.version}/{self.cluster}"
        self.home = os.path.join(tempfile.gettempdir(), f"{self.cluster}.pgbackrest")
        self.config = os.path.join(self.home, "pgbackrest.conf")
        self.repo = os.path.join(self.home, "repo")
        self.state = os.path.join(self.home, "last-run.json")
        self.prom = os.path.join(self.home, "pgbackrest.prom")
        self.home_made = False

    def create(self):
        assert self.port != 5432, "never the shared cluster"
        with open(self.cluster_file, "w") as f:
            f.write(f"{self.version} {self.cluster}\n{self.home}\n")
        os.mkdir(self.home, 0o700)
        self.home_made = True
        for sub in ("repo", "spool", "log", "lock"):
            os.mkdir(os.path.join(self.home, sub), 0o750)
        with open(os.path.join(PGBACKREST, "pgbackrest.conf")) as f:
            conf = drill_config(f.read(), {
                "repo1-path": self.repo, "spool-path": os.path.join(self.home, "spool"),
                "log-path": os.path.join(self.home, "log"), "pg1-path": self.data,
                "pg1-port": str(self.port)}, os.path.join(self.home, "lock"))
        with open(self.config, "w") as f:
            f.write(conf)
        subprocess.run(["chown", "-R", "postgres:postgres", self.home], check=True)
        subprocess.run(["pg_createcluster", "--start-conf=manual", "-p", str(self.port), self.version,
                        self.cluster, "--", "-A", "trust"], check=True, capture_output=True, text=True)
        self.created = True
        # deploy/pgbackrest/postgresql.conf's settings, into the cluster's postgresql.conf
        # (pg_conftool; a file of our own in conf.d would outlive pg_dropcluster).
        with open(os.path.join(PGBACKREST, "postgresql.conf")) as f:
            settings = re.findall(r"^\s*([a-z_]+)\s*=\s*(.*?)\s*$", f.read(), re.M)
        for name, value in settings:
            if name == "archive_command":
                if not value.startswith("'pgbackrest --stanza="):
                    raise Failed("deploy/pgbackrest/postgresql.conf changed: archive_command is not "
                                 "'pgbackrest --stanza=...': no place for the drill's --config")
                value = value.replace("'pgbackrest ", f"'pgbackrest --config={self.config} ", 1)
            subprocess.run(["pg_conftool", self.version, self.cluster, "set", name, value.strip("'")],
                           check=True, capture_output=True, text=True)
        self.start()
        data = sql(self.admin_url, "SHOW data_directory")[0][0]
        if data != self.data:
            raise Failed(f"the cluster's data directory is {data}, not {self.data}")
        settings = dict(sql(self.admin_url, "SELECT name, setting FROM pg_settings WHERE name IN "
                                            "('archive_mode', 'wal_level', 'archive_command')"))
        if settings.get("archive_mode") != "on" or settings.get("wal_level") != "replica" \
                or self.config not in settings.get("archive_command", ""):
            raise Failed(f"deploy/pgbackrest/postgresql.conf not in force: {settings}")
        sql(self.admin_url, "CREATE DATABASE restore")

    def pgbackrest(self, *argv, check=True, timeout=1800):
        """pgBackRest as postgres with the drill's configuration and stanza."""
        cmd = ["runuser", "-u", "postgres", "--", "pgbackrest", f"--config={self.config}",
               f"--stanza={STANZA}", *argv]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd="/", timeout=timeout)
        if check and out.returncode != 0:
            raise Failed(f"pgbackrest {' '.join(argv)}: exit {out.returncode}: "
                         f"{(out.stdout + out.stderr).strip()[-800:]}")
        return out

    def info(self):
        stanzas = json.loads(self.pgbackrest("--output=json", "info").stdout)
        return next(s for s in stanzas if s["name"] == STANZA)

    def wipe(self):
        """The data directory emptied, as on a machine whose disk is lost (the directory itself
        kept: Debian's cluster configuration points at it)."""
        for name in os.listdir(self.data):
            path = os.path.join(self.data, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)

    def keep_logs(self, folder):
        """PostgreSQL's log and pgBackRest's, into `folder`, before they go with the cluster."""
        log_file = f"/var/log/postgresql/postgresql-{self.version}-{self.cluster}.log"
        if os.path.exists(log_file):
            shutil.copy(log_file, os.path.join(folder, "postgresql.log"))
        if self.home_made and os.path.isdir(os.path.join(self.home, "log")):
            shutil.copytree(os.path.join(self.home, "log"), os.path.join(folder, "pgbackrest-logs"), dirs_exist_ok=True)

    def drop(self):
        super().drop()
        if self.home_made:
            shutil.rmtree(self.home, ignore_errors=True)


def segments(first, last):
    """WAL segments from `first` to `last` (names of 16 MB segments), both counted."""
    number = lambda name: int(name[8:16], 16) * 0x100 + int(name[16:], 16)
    return number(last) - number(first) + 1


def promoted(cl):
    try:
        return sql(cl.admin_url, "SELECT pg_is_in_recovery()")[0][0] == "f"
    except subprocess.CalledProcessError:
        return False


def drill_config(text, paths, lock_path):
    """deploy/pgbackrest/pgbackrest.conf as shipped, its paths and port replaced (each must be
    there: the drill runs the file, not a copy of its own) and a lock path of the drill's own."""
    out, seen = [], set()
    for line in text.splitlines():
        m = re.match(r"([a-z0-9-]+)=", line)
        if m and m.group(1) in paths:
            line = f"{m.group(1)}={paths[m.group(1)]}"
            seen.add(m.group(1))
        out.append(line)
        if line.strip() == "[global]":
            out.append(f"lock-path={lock_path}")
    missing = sorted(set(paths) - seen)
    if missing or f"[{STANZA}]" not in text or "[global]" not in text:
        raise Failed(f"deploy/pgbackrest/pgbackrest.conf changed: no place for {missing or '[global]/[' + STANZA + ']'}")
    return "\n".join(out) + "\n"


# --- deploy/pgbackrest/metrics.py ------------------------------------------------------------

def metrics(cl, record=None, backup_type=""):
    """metrics.py run as the backup unit runs it (as postgres), its output held to
    `promtool check metrics`; answers {(name, (labels...)): value}."""
    # The system's Python: the drill's own may live where postgres cannot reach (a pyenv in /root).
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable
    argv = ["runuser", "-u", "postgres", "--", python, os.path.join(PGBACKREST, "metrics.py"),
            "--config", cl.config, "--stanza", STANZA, "--state", cl.state, "--output", cl.prom]
    if record:
        argv += ["--record-run", record, "--type", backup_type]
    out = subprocess.run(argv, capture_output=True, text=True, cwd="/")
    if out.returncode != 0:
        raise Failed(f"metrics.py: exit {out.returncode}: {out.stderr.strip()[-500:]}")
    with open(cl.prom) as f:
        text = f.read()
    if shutil.which("promtool"):
        lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        if lint.returncode != 0:
            raise Failed(f"promtool check metrics: {(lint.stdout + lint.stderr).strip()}")
    samples = {}
    for line in text.splitlines():
        m = re.match(r"([a-z_]+)\{(.*)\} (\S+)$", line)
        if m:
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2))))
            samples[(m.group(1), labels)] = float(m.group(3))
    return samples


def sample(samples, name, **labels):
    return samples.get((name, tuple(sorted({"stanza": STANZA, **labels}.items()))))


# --- HTTP with a key of the caller's choosing ------------------------------------------------

def request(base, method, path, who=None, body=None, key=None, timeout=60):
    """(status, JSON body); a mutating request carries `key` as its Idempotency-Key (a new one
    when None)."""
    keyed = method != "GET" and not path.startswith("/api/auth/")
    a = faults.send(base, method, path, who and who.token, who and who.csrf, body,
                    key=(key or True) if keyed else False, timeout=timeout)
    if a.status is None:
        raise Failed(f"{method} {path}: {a.error}")
    return a.status, a.body


# --- the deal --------------------------------------------------------------------------------

def set_up_deal(base, db_url, sandbox, admin):
    """Company and expert (verified, the expert's payout account active at the sandbox), a
    validated project of three milestones with the expert's proposal selected."""
    tag = secrets.token_hex(3)
    company, _ = member(base, db_url, admin, f"r{tag}co", "empresa")
    expert, _ = member(base, db_url, admin, f"r{tag}ex", "experto")
    api(base, "POST", "/api/processor-connect/account-link", expert, {})
    account = api(base, "GET", "/api/processor-connect/status", expert)["account_id"]
    if faults.send(sandbox.url, "POST", f"/api/sandbox/accounts/{account}/complete-onboarding", body={}).status != 200:
        raise Failed("set-up: onboarding at the sandbox")
    wait_until("the payout account to be active",
               lambda: api(base, "GET", "/api/processor-connect/status", expert).get("status") == "active", 30)
    budget = sum(AMOUNTS)
    project = api(base, "POST", "/api/projects/", company, {
        "title": "Restore drill", "description": "Back it up", "budget": budget,
        "deadline": "2099-01-01T00:00:00", "skills_required": ["Rust"], "project_type": "curated",
        "status": "pending_publication"})["id"]
    api(base, "POST", f"/api/projects/{project}/validate", admin, {"approved": True})
    api(base, "POST", f"/api/admin/projects/{project}/invite-experts", admin, {"expert_ids": [expert.id]})
    api(base, "POST", f"/api/projects/{project}/apply", expert, {
        "cover_letter": "I can do it", "proposed_budget": budget,
        "proposed_milestones": [{"title": f"Milestone {i + 1}", "amount": a} for i, a in enumerate(AMOUNTS)]})
    first = api(base, "POST", f"/api/projects/{project}/select/{expert.id}", company)["payment"]
    return {"company": company, "expert": expert, "project": project, "account": account, "first": first}


def fund(base, sandbox, d, payment_id):
    """The company pays the milestone: `initiate` makes the intent, the card is confirmed at the
    sandbox, whose webhook makes the payment `held`. Answers the payment."""
    company = d["company"]
    y = api(base, "GET", f"/api/payments/{payment_id}", company)
    if not y.get("processor_payment_intent_id"):
        api(base, "POST", "/api/payments/initiate", company,
            {"project_id": d["project"], "milestone_id": y["milestone_id"]})
        y = api(base, "GET", f"/api/payments/{payment_id}", company)
    a = faults.send(sandbox.url, "POST", f"/api/sandbox/payment_intents/{y['processor_payment_intent_id']}/confirm",
                    body={"payment_method": "pm_card_visa"})
    if a.status != 200:
        raise Failed(f"confirmation at the sandbox: {a.status} {a.body}")
    wait_until(f"payment {payment_id} to be held",
               lambda: api(base, "GET", f"/api/payments/{payment_id}", company)["status"] == "held", 30)
    return api(base, "GET", f"/api/payments/{payment_id}", company)


def deliver(base, d, milestone_id):
    r = api(base, "POST", "/api/milestones/deliveries/", d["expert"],
            {"milestone_id": milestone_id, "description": "Done, as agreed"})
    return r["id"] if "id" in r else r["delivery"]["id"]


def approve(base, d, delivery_id, key):
    return request(base, "PUT", f"/api/milestones/deliveries/{delivery_id}/review", d["company"],
                   {"decision": "approve"}, key=key)


def settled(db_url):
    """Every processor event the service took is applied."""
    return sql(db_url, "SELECT COUNT(*) FROM processor_events WHERE processed_at IS NULL")[0][0] == "0"


def payments_of(db_url, project):
    rows = sql(db_url, "SELECT id, milestone_id, status, payout_status, amount_minor, COALESCE(commission_minor, 0), "
                       "COALESCE(processor_payment_intent_id, ''), COALESCE(processor_transfer_id, '') "
                       f"FROM payments WHERE project_id = {int(project)} ORDER BY id")
    keys = ("id", "milestone", "status", "payout", "amount", "commission", "intent", "transfer")
    out = []
    for r in rows:
        p = dict(zip(keys, r))
        p["id"], p["amount"], p["commission"] = int(p["id"]), int(p["amount"]), int(p["commission"])
        p["milestone"] = int(p["milestone"]) if p["milestone"] else None
        out.append(p)
    return out


# --- the ledger ------------------------------------------------------------------------------

def ledger_of(sandbox, project):
    """The sandbox's ledger, the deal's objects only (intents and transfers by their metadata,
    refunds and disputes by their intent)."""
    whole = sandbox.ledger()
    if not isinstance(whole, dict):
        raise Failed(f"the sandbox's ledger: {whole!r}")
    mine = lambda o: (o.get("metadata") or {}).get("project_id") == str(project)
    intents = {i["id"]: i for i in whole.get("intents", []) if mine(i)}
    return {
        "intents": intents,
        "transfers": {t["id"]: t for t in whole.get("transfers", []) if mine(t)},
        "refunds": {r["id"]: r for r in whole.get("refunds", []) if r.get("payment_intent") in intents},
        "disputes": {x["id"]: x for x in whole.get("disputes", []) if x.get("payment_intent") in intents},
    }


def processor_keys(sandbox):
    """The Idempotency-Key of the request that made each transfer and capture, from the
    sandbox's events (the request an event answers carries it, as with the real processor)."""
    a = faults.send(sandbox.url, "GET", "/api/sandbox/events", timeout=10)
    keys = {}
    for record in a.body if isinstance(a.body, list) else []:
        event = json.loads(record.get("payload") or "{}")
        if event.get("type") in ("transfer.created", "charge.captured"):
            keys[event["data"]["object"]["id"]] = (event.get("request") or {}).get("idempotency_key")
    return keys


def payment_of(obj):
    pid = (obj.get("metadata") or {}).get("payment_id")
    return int(pid) if pid and pid.isdigit() else None


def intent_money(i):
    return (i["authorised"], i["captured"], i["captures"], i["refunded"])


def holds_money(i):
    return any(intent_money(i)) or i["status"] in ("requires_capture", "succeeded")


def moved(before, after):
    """What changed at the processor from `before` to `after`: [(payment id, text, money?)]."""
    changes = []
    for iid, i in after["intents"].items():
        was = before["intents"].get(iid)
        if was is None:
            changes.append((payment_of(i), f"new intent {iid} ({i['status']}, {i['amount']}, captured "
                                           f"{i['captured']})", holds_money(i)))
        elif intent_money(was) != intent_money(i) or was["status"] != i["status"]:
            changes.append((payment_of(i), f"intent {iid} {was['status']} -> {i['status']}, captured "
                                           f"{was['captured']} -> {i['captured']} ({i['captures']} captures)",
                            intent_money(was) != intent_money(i)))
    for tid, t in after["transfers"].items():
        was = before["transfers"].get(tid)
        if was is None:
            changes.append((payment_of(t), f"new transfer {tid} of {t['amount']} to {t['destination']}", True))
        elif (was["amount"], was["reversed"], was["failed"]) != (t["amount"], t["reversed"], t["failed"]):
            changes.append((payment_of(t), f"transfer {tid} reversed {was['reversed']} -> {t['reversed']}, "
                                           f"failed {was['failed']} -> {t['failed']}", True))
    for kind in ("refunds", "disputes"):
        for oid, o in after[kind].items():
            if oid not in before[kind]:
                i = after["intents"].get(o.get("payment_intent"), {})
                changes.append((payment_of(i), f"new {kind[:-1]} {oid} of {o['amount']}", True))
    for kind in ("intents", "transfers", "refunds", "disputes"):
        for oid in before[kind].keys() - after[kind].keys():
            changes.append((None, f"{kind[:-1]} {oid} gone from the ledger", True))
    return changes


def against(rows, ledger):
    """The database's payments held against a ledger: (disagreements, objects the database does
    not know as [(payment id, text, money?)])."""
    wrong, unknown = [], []
    intents, transfers = ledger["intents"], ledger["transfers"]
    fits = {"pending": lambda i: i["status"] in ("requires_payment_method", "requires_confirmation",
                                                 "requires_action", "processing") and not any(intent_money(i)),
            "held": lambda i: i["status"] == "requires_capture" and i["captured"] == 0,
            "released": lambda i: i["status"] == "succeeded" and i["captures"] == 1 and i["refunded"] == 0}
    for p in rows:
        i = intents.get(p["intent"]) if p["intent"] else None
        if p["intent"] and i is None:
            wrong.append(f"payment {p['id']}: intent {p['intent']} unknown to the processor")
        if i is not None:
            fit = fits.get(p["status"])
            if fit is None or not fit(i) or i["amount"] != p["amount"] or (
                    p["status"] == "released" and i["captured"] != p["amount"]):
                wrong.append(f"payment {p['id']}: recorded {p['status']} ({p['amount']}), intent {i['id']} "
                             f"{i['status']}, captured {i['captured']}")
        if p["transfer"]:
            t = transfers.get(p["transfer"])
            if t is None:
                wrong.append(f"payment {p['id']}: transfer {p['transfer']} unknown to the processor")
            elif (t["amount"], t["reversed"], t["failed"]) != (p["amount"] - p["commission"], 0, False):
                wrong.append(f"payment {p['id']}: transfer {t['id']} of {t['amount']} (reversed {t['reversed']}, "
                             f"failed {t['failed']}); recorded {p['amount']} - commission {p['commission']}")
        elif p["payout"] == "transferred":
            wrong.append(f"payment {p['id']}: payout transferred, no transfer recorded")
    by_id = {p["id"]: p for p in rows}
    for iid, i in intents.items():
        pid = payment_of(i)
        if by_id.get(pid, {}).get("intent") != iid:
            whose = (f"payment {pid} records {by_id[pid]['intent'] or 'no intent'}" if pid in by_id
                     else f"payment {pid}, not in the database")
            unknown.append((pid, f"intent {iid} ({i['status']}, {i['amount']}, captured {i['captured']}; {whose})",
                            holds_money(i)))
    for tid, t in transfers.items():
        pid = payment_of(t)
        if by_id.get(pid, {}).get("transfer") != tid:
            whose = (f"payment {pid} records {by_id[pid]['transfer'] or 'no transfer'}" if pid in by_id
                     else f"payment {pid}, not in the database")
            unknown.append((pid, f"transfer {tid} of {t['amount']} to {t['destination']} ({whose})", True))
    return wrong, unknown


# --- the run ---------------------------------------------------------------------------------

def iso(ts):
    """A database timestamp (`2026-12-07 16:00:00.123456+00`) as RFC 3339 in UTC."""
    return datetime.datetime.fromisoformat(ts).astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def audit(base, admin, since, until):
    q = urllib.parse.urlencode({"from": iso(since), "to": iso(until)})
    return api(base, "GET", f"/api/admin/payments/audit?{q}", admin)


def db_now(url, offset="0 seconds"):
    return sql(url, f"SELECT clock_timestamp() + interval '{offset}'")[0][0]


def seed(args, cl, env):
    """benches/scale/seed.py at --size on the migrated database: (seconds, what it holds)."""
    seed_dir = os.path.join(args.workdir, "seed")
    os.makedirs(seed_dir, exist_ok=True)
    started = time.monotonic()
    with open(os.path.join(args.workdir, "seed.log"), "w") as out:
        rc = subprocess.run([sys.executable, os.path.join(ROOT, "benches", "scale", "seed.py"), "--size", args.size,
                             "--database-url", cl.url, "--binary", args.bin, "--data-dir", seed_dir,
                             "--manifest", os.path.join(seed_dir, "manifest.json")],
                            env={"PATH": env["PATH"], "HOME": os.environ.get("HOME", "/root")}, cwd=seed_dir,
                            stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        with open(os.path.join(args.workdir, "seed.log")) as f:
            raise Failed(f"seed.py --size {args.size}: exit {rc}: {f.read()[-800:]}")
    took = time.monotonic() - started
    held = sql(cl.url, "SELECT (SELECT COUNT(*) FROM users), (SELECT COUNT(*) FROM payments), "
                       "(SELECT COUNT(*) FROM chat_messages)")[0]
    return took, f"{held[0]} users, {held[1]} payments, {held[2]} chat messages"


def run(args):
    started = time.monotonic()
    os.makedirs(args.workdir, exist_ok=True)
    children = faults.Children(args.pids)
    cl = Cluster(args.cluster_file)
    service = None
    checks, rows = [], []        # (passed, text); (what, figure)

    def check(ok, text):
        checks.append((bool(ok), text))
        log(("PASS " if ok else "FAIL ") + text)
        return ok

    try:
        log(f"PostgreSQL {cl.version} cluster {cl.cluster} on port {cl.port}; pgBackRest in {cl.home}")
        cl.create()
        redis = faults.Redis(children, args.workdir)
        redis.start()
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        sandbox = faults.Sandbox(children, args.workdir, args.bin, f"{base}/api/payments/webhooks/processor")
        sandbox.start()
        data = os.path.join(args.workdir, "service")
        os.makedirs(data, exist_ok=True)
        env = faults.service_env(port, data, cl.url, redis, sandbox, "restore:")
        subprocess.run([args.bin, "migrate"], env=env, cwd=data, check=True, capture_output=True, text=True)
        if args.size:
            took, held = seed(args, cl, env)
            log(f"seeded at {args.size} in {took:.1f}s: {held}")
            rows.append(("seeded", f"size {args.size} in {took:.1f} s: {held}"))
        admin_password = "Aa1!" + secrets.token_hex(8)
        subprocess.run([args.bin, "create-admin", "--email", "restoreadmin@example.com", "--username",
                        "restoreadmin", "--password", admin_password],
                       env=env, cwd=data, check=True, capture_output=True, text=True)
        db_size = int(sql(cl.url, "SELECT pg_database_size(current_database())")[0][0])

        # 1. The stanza, the metrics before any backup, a failed backup, the full backup.
        cl.pgbackrest("stanza-create")
        cl.pgbackrest("check")
        m = metrics(cl)
        check(sample(m, "pgbackrest_stanza_status") == 2
              and not any(k[0] == "pgbackrest_backup_last_completion_timestamp_seconds" for k in m),
              "metrics before any backup: stanza status 2 (no valid backup), no completion time "
              f"(status {sample(m, 'pgbackrest_stanza_status')})")
        bad = cl.pgbackrest("--type=full", f"--pg1-port={free_port()}", "backup", check=False)
        m = metrics(cl, "exit-code", "full")
        check(bad.returncode != 0 and sample(m, "pgbackrest_backup_last_run_success") == 0
              and abs((sample(m, "pgbackrest_backup_last_run_timestamp_seconds") or 0) - time.time()) < 60,
              f"a failed backup (exit {bad.returncode}) is recorded: pgbackrest_backup_last_run_success 0")
        t0 = time.monotonic()
        cl.pgbackrest("--type=full", "backup")
        backup_s = time.monotonic() - t0
        backup = cl.info()["backup"][-1]
        backup_repo, backup_db = backup["info"]["repository"]["delta"], backup["info"]["size"]
        m = metrics(cl, "success", "full")
        full = {"type": "full"}
        check(sample(m, "pgbackrest_stanza_status") == 0
              and sample(m, "pgbackrest_backup_last_completion_timestamp_seconds", **full) == backup["timestamp"]["stop"]
              and sample(m, "pgbackrest_backup_last_size_bytes", **full) == backup_repo
              and sample(m, "pgbackrest_backup_last_duration_seconds", **full)
              == backup["timestamp"]["stop"] - backup["timestamp"]["start"]
              and sample(m, "pgbackrest_backup_last_run_success") == 1,
              "metrics after the full backup: status 0, its completion time, size and duration, "
              "last_run_success 1 (promtool check metrics passes)")
        log(f"full backup {backup['label']}: {mb(backup_repo)} in the repository (database {mb(backup_db)}) "
            f"in {backup_s:.1f}s")
        rows.append(("full backup", f"{backup['label']}: {mb(backup_repo)} in the repository (the cluster "
                                    f"{mb(backup_db)}, the service's database {mb(db_size)}) in {backup_s:.1f} s"))

        # 2. The service and the deal's money steps.
        for dep in (redis, sandbox):
            wait_until(f"{dep.name} to answer", dep.answers, 30)
        service = children.start([args.bin, "serve"], os.path.join(args.workdir, "service.log"), env=env, cwd=data)
        wait_until("the service to be ready", lambda: faults.send(base, "GET", "/ready", timeout=2).status == 200, 60)
        token = api(base, "POST", "/api/auth/login",
                    body={"username": "restoreadmin", "password": admin_password})["access_token"]
        admin = Account(0, "restoreadmin", "restoreadmin@example.com", token)
        since = db_now(cl.url, "-1 second")
        d = set_up_deal(base, cl.url, sandbox, admin)
        project = d["project"]
        y1 = fund(base, sandbox, d, d["first"]["id"])
        r = api(base, "PUT", f"/api/milestones/deliveries/{deliver(base, d, y1['milestone_id'])}/review",
                d["company"], {"decision": "approve"})
        if r["payment"]["status"] != "released" or not r.get("next_payment"):
            raise Failed(f"milestone 1 not released with a next payment: {r}")
        y2 = fund(base, sandbox, d, r["next_payment"]["id"])
        delivery2 = deliver(base, d, y2["milestone_id"])
        wait_until("the processor's events to be applied", lambda: settled(cl.url), 30)
        log(f"deal: project {project}, payment {y1['id']} released, payment {y2['id']} held and delivered")

        # 3. The restore point and the last step.
        l1 = ledger_of(sandbox, project)
        target, target_seg = sql(cl.admin_url, "SELECT clock_timestamp(), pg_walfile_name(pg_current_wal_lsn())")[0]
        l1b = ledger_of(sandbox, project)
        check(l1 == l1b, "nothing moved at the processor across the restore point (L1 on either side of T)")
        time.sleep(AFTER_T)
        key = str(uuid.uuid4())
        status, last = approve(base, d, delivery2, key)
        if status != 200 or last["payment"]["status"] != "released":
            raise Failed(f"the last step (approval of payment {y2['id']}): {status} {last}")
        wait_until("the processor's events to be applied", lambda: settled(cl.url), 30)
        l2 = ledger_of(sandbox, project)
        step = moved(l1, l2)
        log(f"restore point {target}; the last step (Idempotency-Key {key}) moved: "
            + "; ".join(text for _, text, _ in step))
        seg = sql(cl.admin_url, "SELECT pg_walfile_name(pg_current_wal_lsn())")[0][0]
        sql(cl.admin_url, "SELECT pg_switch_wal()")
        t0 = time.monotonic()
        cl.pgbackrest("check")
        archive_max = cl.info()["archive"][-1]["max"]
        check(archive_max[8:] >= seg[8:],
              f"the last step's WAL is archived: segment {seg}, the archive reaches {archive_max} "
              f"(pgbackrest check {time.monotonic() - t0:.1f} s)")
        rows.append(("restore point", f"T = {target}; the last step after it: approval of payment {y2['id']}"))
        rows.append(("WAL archived", f"up to {archive_max}; from the backup's start ({backup['archive']['start']}) to T "
                                     f"({target_seg}): {segments(backup['archive']['start'], target_seg)} segments to replay"))

        # 4. The machine lost, the database restored to T.
        children.kill(service, signal.SIGTERM)
        service = None
        lost = time.monotonic()
        cl.stop()
        if args.delta:
            how = ["--delta"]
        else:
            cl.wipe()
            how = []
        t0 = time.monotonic()
        cl.pgbackrest(*how, "--type=time", f"--target={target}", "--target-action=promote", "restore")
        restore_s = time.monotonic() - t0
        t0 = time.monotonic()
        cl.start()
        wait_until("PostgreSQL out of recovery", lambda: promoted(cl), 600)
        recovery_s = time.monotonic() - t0
        replayed = sql(cl.admin_url, "SELECT pg_last_xact_replay_timestamp(), "
                                     f"pg_last_xact_replay_timestamp() <= '{target}'::timestamptz, "
                                     "(SELECT timeline_id FROM pg_control_checkpoint())")[0]
        check(replayed[1] == "t", f"recovery stopped before T: the last transaction replayed committed at "
                                  f"{replayed[0]} (timeline {replayed[2]})")
        log(f"restored ({'delta' if args.delta else 'empty data directory'}) in {restore_s:.1f}s, "
            f"recovered and promoted in {recovery_s:.1f}s")
        # The runbook's step before any instance starts: every sequence past what it handed out
        # after T, so no id the processor saw is handed out again.
        next_before = int(sql(cl.url, "SELECT last_value FROM payments_id_seq")[0][0])
        subprocess.run(["psql", cl.url, "-qX", "-v", "ON_ERROR_STOP=1", "-f",
                        os.path.join(PGBACKREST, "after-restore.sql")], check=True, capture_output=True, text=True)
        next_after = int(sql(cl.url, "SELECT last_value FROM payments_id_seq")[0][0])
        check(next_after == next_before + 1_000_000,
              f"after-restore.sql moved the sequences on: payments from {next_before} to {next_after}")
        t0 = time.monotonic()
        service = children.start([args.bin, "serve"], os.path.join(args.workdir, "service.log"), env=env, cwd=data)
        wait_until("the service to be ready on the restored database",
                   lambda: faults.send(base, "GET", "/ready", timeout=2).status == 200, 120)
        up_s = time.monotonic() - t0
        back_s = time.monotonic() - lost
        rows.append(("restore to T", f"pgbackrest restore {restore_s:.1f} s ({'--delta' if args.delta else 'into an emptied data directory'}),"
                                     f" then PostgreSQL started, WAL replayed to T and promoted in {recovery_s:.1f} s "
                                     f"(pg_ctlcluster start to pg_is_in_recovery() false), timeline {replayed[2]}"))
        rows.append(("service up", f"{up_s:.1f} s after its start, on the restored database; "
                                   f"{back_s:.1f} s from the database lost to the service serving again"))

        # 5a. The restored database is the ledger as of L1.
        restored = payments_of(cl.url, project)
        by_id = {p["id"]: p for p in restored}
        p1, p2 = by_id.get(y1["id"]), by_id.get(y2["id"])
        check(p1 and p1["status"] == "released" and p1["payout"] == "transferred" and p1["transfer"]
              and p2 and p2["status"] == "held" and not p2["transfer"] and len(restored) == 2,
              f"restored: payment {y1['id']} released and transferred, payment {y2['id']} held, no third payment "
              f"({[(p['id'], p['status'], p['payout']) for p in restored]})")
        wrong, unknown = against(restored, l1)
        check(not wrong and not unknown, "the restored database agrees with the ledger as of T (L1)"
              + ("; " + "; ".join(wrong + [u[1] for u in unknown]) if wrong or unknown else ""))

        # 5b. The money audit names what moved after T; the ledger names what it cannot see.
        until = db_now(cl.url, "1 minute")
        report = audit(base, admin, since, until)
        named = sorted({x["payment_id"] for x in report["mismatches"]})
        expected = sorted({pid for pid, _, _ in step if pid in by_id})
        check(named == expected and named == [y2["id"]],
              f"the audit after the restore names payments {named}: those whose processor objects moved "
              f"after T and that the restored database holds ({expected})")
        for x in report["mismatches"]:
            log(f"  audit: payment {x['payment_id']} ({x['status']}): {x['kind']}: {x['detail']} ({x['invariant']})")
        wrong, unknown = against(restored, l2)
        operator = []
        for pid in named:
            p = by_id[pid]
            i = l2["intents"].get(p["intent"], {})
            ts = [t for t in l2["transfers"].values() if payment_of(t) == pid]
            operator.append(f"payment {pid}: recorded {p['status']}; at the processor intent {p['intent']} "
                            f"{i.get('status')} (captured {i.get('captured')}), "
                            + (", ".join(f"transfer {t['id']} of {t['amount']} to {t['destination']}" for t in ts)
                               or "no transfer"))
        keys = processor_keys(sandbox)
        operator += [f"unknown to the restored database: {text}" + ("" if money else " (no money)")
                     + "".join(f", made with key {k}" for oid, k in keys.items() if text.startswith(f"transfer {oid} "))
                     for _, text, money in unknown]
        for line in operator:
            log("  operator: " + line)
        l2_transfers = {payment_of(t): t["id"] for t in l2["transfers"].values()}
        rows.append(("audit after restore", "; ".join(
            f"payment {x['payment_id']}: {x['kind']} ({x['detail']})" for x in report["mismatches"]) or "clean"))
        rows.append(("operator's list", " | ".join(operator)))

        # 5c. The last step replayed, as a client that never got its answer would.
        status, again = approve(base, d, delivery2, key)
        check(200 <= status < 300, f"the last step replayed with the same Idempotency-Key answers {status}"
              + ("" if 200 <= status < 300 else f": {again}"))
        wait_until("the processor's events to be applied", lambda: settled(cl.url), 30)
        time.sleep(0.5)
        l3 = ledger_of(sandbox, project)
        replay = moved(l2, l3)
        money = [text for _, text, m in replay if m]
        if money:
            keys = processor_keys(sandbox)
            made = [f"{t['id']} (key {keys.get(t['id'])})" for t in l3["transfers"].values() if payment_of(t) == y2["id"]]
            money.append(f"payment {y2['id']} now has {len(made)} transfers at the processor: {', '.join(made)}")
        check(not money, "the replay moved no money at the processor (L3 against L2: the same capture, the same "
              "transfer)" + ("; it moved: " + "; ".join(money) if money else ""))
        after = payments_of(cl.url, project)
        seen = {payment_of(o) for o in list(l2["intents"].values()) + list(l2["transfers"].values())} - {None}
        fresh = [p["id"] for p in after if p["id"] not in by_id]
        check(fresh and not set(fresh) & seen,
              f"the payment made by the replay ({fresh}) has an id the processor never saw "
              f"(it saw {sorted(seen)})")
        p2 = next((p for p in after if p["id"] == y2["id"]), {})
        check(p2.get("status") == "released" and p2.get("transfer") == l2_transfers.get(y2["id"]),
              f"after the replay payment {y2['id']} is released with the transfer made before the restore "
              f"({l2_transfers.get(y2['id'])}); it records {p2.get('status')}, {p2.get('transfer') or 'no transfer'}")
        wrong, unknown = against(after, l3)
        left = [text for _, text, m in unknown if not m]
        check(not wrong and not [u for u in unknown if u[2]],
              "after the replay the database agrees with the ledger (L3)"
              + ("; " + "; ".join(wrong + [t for _, t, m in unknown if m]) if wrong or [u for u in unknown if u[2]] else "")
              + (f"; left at the processor without money: {'; '.join(left)}" if left else ""))
        report = audit(base, admin, since, db_now(cl.url, "1 minute"))
        check(not report["mismatches"], f"the audit after the replay is clean ({report['payments_checked']} payments, "
              f"{len(report['mismatches'])} mismatches)" + "".join(
                  f"; payment {x['payment_id']}: {x['detail']}" for x in report["mismatches"]))
        rows.append(("replay", f"{status}; " + ("moved no money" if not money else "moved: " + "; ".join(money))
                     + (f"; new without money: {'; '.join(t for _, t, m in replay if not m)}"
                        if any(not m for _, _, m in replay) else "")))
        rows.append(("audit after replay", f"{len(report['mismatches'])} mismatches of {report['payments_checked']} payments"))

        # The repository after the restore: archiving goes on on the new timeline.
        cl.pgbackrest("check")
        m = metrics(cl)
        shutil.copy(cl.prom, os.path.join(args.workdir, "pgbackrest.prom"))
        check(sample(m, "pgbackrest_stanza_status") == 0,
              "after the restore the stanza is ok and archiving works on the new timeline (pgbackrest check)")

        t2 = l2["transfers"].get(l2_transfers.get(y2["id"]), {})
        figures = (f"restore{' at ' + args.size if args.size else ''}: backup {mb(backup_repo)} in {backup_s:.1f} s, "
                   f"WAL archived, restore to T in {restore_s:.1f} s (+{recovery_s:.1f} s start, replay and promotion), "
                   f"service up in {up_s:.1f} s ({back_s:.1f} s lost to serving), audit named "
                   + (", ".join(f"payment {pid} ({by_id[pid]['intent']}, {t2.get('id', 'no transfer')})" for pid in named)
                      or "nothing")
                   + (", replay moved no money" if not money else f", replay MOVED MONEY ({'; '.join(money)})")
                   + (", audit clean" if not report["mismatches"] else f", audit {len(report['mismatches'])} mismatches")
                   + f"; {sum(not ok for ok, _ in checks)} of {len(checks)} checks failed, "
                   f"total {time.monotonic() - started:.0f} s")
        width = max(len(w) for w, _ in rows)
        table = [f"{w.ljust(width)}  {f}" for w, f in rows]
        print("\n".join(table + [""] + [("PASS " if ok else "FAIL ") + t for ok, t in checks] + [figures]))
        with open(args.figures, "w") as f:
            f.write("\n".join(table + [figures]) + "\n")
        return 0 if all(ok for ok, _ in checks) else 1
    finally:
        if service is not None:
            children.kill(service, signal.SIGTERM)
        children.stop_all()
        try:
            cl.keep_logs(args.workdir)
        except OSError as e:
            log(f"logs not kept: {e}")
        cl.drop()


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--bin", required=True, help="the release binary")
    a.add_argument("--workdir", help="logs and data (default: a new temporary folder)")
    a.add_argument("--pids", help="file to keep the running children's ids in (default: in workdir)")
    a.add_argument("--cluster-file", help="file to keep the cluster's version and name in, and on a second line "
                                          "the pgBackRest folder (default: in workdir)")
    a.add_argument("--figures", help="file for the table and the figures line (default: in workdir)")
    a.add_argument("--size", choices=("S", "M", "L"),
                   help="seed the database with benches/scale/seed.py at this size before the backup (default: none)")
    a.add_argument("--delta", action="store_true",
                   help="restore with --delta over the old data directory instead of into an emptied one")
    args = a.parse_args()
    args.bin = os.path.abspath(args.bin)
    args.workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="restore."))
    args.pids = args.pids or os.path.join(args.workdir, "pids")
    args.cluster_file = args.cluster_file or os.path.join(args.workdir, "cluster")
    args.figures = args.figures or os.path.join(args.workdir, "figures")
    # SIGTERM (deploy/check's cleanup, CI's timeout) unwinds through the `finally` that drops the
    # cluster and its repository and stops the children.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        sys.exit(run(args))
    except Failed as e:
        print(f"FAILED: {e}")
        sys.exit(1)
    except subprocess.CalledProcessError as e:
        print(f"FAILED: {' '.join(map(str, e.cmd))}: exit {e.returncode}: {(e.stderr or '').strip()[-500:]}")
        sys.exit(1)


if __name__ == "__main__":
    main()
