#!/usr/bin/env python3
"""The fault drill of deploy/check (`deploy/check faults`): the service against its
dependencies going away and coming back.

It brings up dependencies of its own, never the shared ones: a PostgreSQL cluster
(`pg_createcluster` on a free port, dropped at exit), a Redis process, a minimal SMTP sink (this
file, `--smtp-sink`) and the processor sandbox, then one instance of the release binary
(`marketplace migrate`, then `serve`). It sets up accounts through the API (an escrow deal, a pool
of companies to mail) and runs clients that send a steady mix of reads, writes, mail and
processor calls while it takes each dependency away and brings it back:

  baseline; redis away (SIGKILL) / redis back (started again, empty); postgres away
  (`pg_ctlcluster stop -m immediate`) / postgres back; smtp away / smtp back; processor away /
  processor back.

During each "away" phase it checks with real connection attempts that the dependency is down
(a drill that passes without the fault happening proves nothing). Per phase it counts requests,
ok (2xx or an expected 4xx), refused (503 with `Retry-After`), failed (any other 5xx, a 503
without `Retry-After`, an unexpected 4xx, a connection error, a timeout), the slowest request,
and after each "back" the seconds until every kind of request succeeds again. Afterwards it
checks that the mail asked for arrived and that every acknowledged write is in the database.

Prints a table and PASS/FAIL lines; the figures line last. Exits non-zero when the service
breaks the contract below (the constants), or when a fault did not really happen.
Only Python's standard library. Runs as root (`pg_createcluster`, `pg_ctlcluster`).
"""

import argparse
import asyncio
import collections
import concurrent.futures
import http.client
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

# --- the contract (what the service is held to) ----------------------------------------------

# Seconds per phase: long enough for a grace period plus a bounded stretch, short enough that
# the whole drill (set-up and mail wait included) stays under three minutes.
BASELINE_SECONDS = 6
AWAY_SECONDS = 7
POSTGRES_AWAY_SECONDS = 8      # its grace is 3 s: 5 s of bounded requests after it
BACK_SECONDS = 6

# No request, in a phase where every dependency is there (or only SMTP or the processor is
# away), takes longer than this: the baseline's bound.
BASELINE_BOUND = 1.0
# Redis away: sessions are in PostgreSQL and rate limits fall back to per-instance buckets, so
# from this long after the kill (time to notice the connection is gone)...
REDIS_GRACE = 1.0
# ...every request finishes (served, or refused 503 + Retry-After) within this.
AWAY_BOUND = 0.1
# PostgreSQL away: from this long after the stop (the pool notices, in-flight statements
# fail), every request finishes within AWAY_BOUND.
POSTGRES_GRACE = 3.0
# Processor away: requests that need it are refused (503 + Retry-After) within this; a refused
# connection is immediate, so anything slower is a wait the service should not make.
PROCESSOR_BOUND = 1.0
# After a dependency answers again, every kind of request succeeds within this; it is also the
# bound of any single request in a "back" phase.
RECOVERY_BOUND = 2.0
# Mail is queued, not lost: everything asked for while the SMTP server was away arrives within
# this after it is back (the mail queue retries 1 s, doubling, at most an hour apart — the
# outbox's RETRY in src/store/events.rs — so a message failing all through a 7 s outage is next
# tried at most ~8 s after the server is back); any other mail within this after it was asked.
MAIL_ARRIVAL_BOUND = 30.0
# A request still unanswered after this is counted as failed (a hang is counted, not waited on).
CLIENT_TIMEOUT = 10.0

# Pause between two requests of one client; each kind of request has its own client.
READ_PACE = 0.02
WRITE_PACE = 0.05
MONEY_PACE = 0.1
# Each mail request needs an account of its own: one password reset mail per account per two
# minutes, and a recipient of its own tells which request a message answers.
MAIL_PACE = 0.4
# How often a dependency is probed while it is away.
PROBE_EVERY = 0.25

PASSWORD = "Secret123!"


class Failed(Exception):
    """The drill cannot go on (set-up failed, a dependency did not come back)."""


def log(text):
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- HTTP ------------------------------------------------------------------------------------

class Answer:
    """One exchange: status (None on a connection error or timeout), headers, JSON body."""

    def __init__(self, status=None, headers=None, body=None, error=None, took=0.0):
        self.status, self.headers, self.body, self.error, self.took = status, headers or {}, body, error, took

    @property
    def code(self):
        return self.body.get("code", "") if isinstance(self.body, dict) else ""


def send(base, method, path, token=None, csrf=None, body=None, key=False, timeout=CLIENT_TIMEOUT):
    """One request on a connection of its own, never retried. `key`: its Idempotency-Key, a
    new one when True. Shared by the drills beside this one."""
    host, port = base.split("//")[1].split(":")
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if csrf:
        headers["Cookie"] = f"csrf_token={csrf}"
        headers["X-CSRF-Token"] = csrf
    if key:
        headers["Idempotency-Key"] = key if isinstance(key, str) else str(uuid.uuid4())
    data = json.dumps(body).encode() if body is not None else None
    started = time.monotonic()
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        text = resp.read().decode(errors="replace")
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text
        return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, parsed,
                      took=time.monotonic() - started)
    except socket.timeout:
        return Answer(error="timeout", took=time.monotonic() - started)
    except (OSError, http.client.HTTPException) as e:
        return Answer(error=type(e).__name__, took=time.monotonic() - started)
    finally:
        conn.close()


class Account:
    def __init__(self, id_, username, email, token, csrf=None):
        self.id, self.username, self.email, self.token, self.csrf = id_, username, email, token, csrf


def api(base, method, path, who=None, body=None, expect=(200, 201)):
    """A set-up request: anything but `expect` stops the drill."""
    a = send(base, method, path, who and who.token, who and who.csrf, body,
             key=method != "GET" and not path.startswith("/api/auth/"), timeout=30)
    if a.status not in expect:
        raise Failed(f"set-up: {method} {path}: {a.status or a.error} {str(a.body)[:300]}")
    return a.body


def sql(db_url, query):
    """Rows of a query on the drill's own database (tab-separated columns) through psql."""
    out = subprocess.run(["psql", db_url, "-AtX", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-c", query],
                         check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


# --- the processes the drill owns ------------------------------------------------------------

class Children:
    """The drill's child processes; their ids in a file deploy/check's cleanup stops by id if
    the drill dies (rewritten on every change, so an exited process's id is never signalled)."""

    def __init__(self, pids_file):
        self.pids_file, self.procs = pids_file, []

    def start(self, argv, log_path, env=None, cwd=None):
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=open(log_path, "a"), stderr=subprocess.STDOUT)
        self.procs.append(proc)
        self.note()
        return proc

    def kill(self, proc, sig=signal.SIGKILL):
        if proc.poll() is None:
            proc.send_signal(sig)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.note()

    def note(self):
        with open(self.pids_file, "w") as f:
            f.writelines(f"{p.pid}\n" for p in self.procs if p.poll() is None)

    def stop_all(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.note()


def wait_until(what, probe, limit):
    until = time.monotonic() + limit
    while not probe():
        if time.monotonic() > until:
            raise Failed(f"timed out waiting for {what}")
        time.sleep(0.05)
    return time.monotonic()


class Postgres:
    """A cluster of the drill's own (`pg_createcluster` on a free port, trust authentication),
    owned by the postgres user; dropped at exit. Its name is written to `cluster_file` so that
    deploy/check drops it too if the drill dies."""

    name = "postgres"

    def __init__(self, cluster_file):
        self.version = sorted(os.listdir("/etc/postgresql"), key=int)[-1]
        self.cluster = f"faults_{secrets.token_hex(4)}"
        self.port = free_port()
        self.cluster_file = cluster_file
        self.created = False
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/faults"

    def create(self):
        assert self.port != 5432, "never the shared cluster"
        with open(self.cluster_file, "w") as f:
            f.write(f"{self.version} {self.cluster}\n")
        subprocess.run(["pg_createcluster", "--start-conf=manual", "-p", str(self.port), self.version,
                        self.cluster, "--", "-A", "trust"], check=True, capture_output=True, text=True)
        self.created = True
        self.start()
        subprocess.run(["psql", f"postgres://postgres@127.0.0.1:{self.port}/postgres", "-qX",
                        "-c", "CREATE DATABASE faults"], check=True, capture_output=True, text=True)

    def start(self):
        subprocess.run(["pg_ctlcluster", self.version, self.cluster, "start"], check=True,
                       capture_output=True, text=True)

    def stop(self):
        subprocess.run(["pg_ctlcluster", self.version, self.cluster, "stop", "-m", "immediate"],
                       check=True, capture_output=True, text=True)

    def answers(self):
        return subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port), "-t", "1"]
                              ).returncode == 0

    def drop(self):
        if self.created:
            subprocess.run(["pg_dropcluster", "--stop", self.version, self.cluster], capture_output=True)
        if os.path.exists(self.cluster_file):
            os.unlink(self.cluster_file)


class Redis:
    """A redis-server of the drill's own: no persistence, so it starts again empty."""

    name = "redis"

    def __init__(self, children, workdir):
        self.children, self.workdir = children, workdir
        self.port = free_port()
        self.proc = None

    def start(self):
        assert self.port != 6379, "never the shared Redis"
        self.proc = self.children.start(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.workdir], os.path.join(self.workdir, "redis.log"))

    def stop(self):
        self.children.kill(self.proc)

    def answers(self):
        """PING over a real connection."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def keys(self):
        out = subprocess.run(["redis-cli", "-p", str(self.port), "dbsize"], capture_output=True, text=True)
        return int(out.stdout.strip() or 0)


class SmtpSink:
    """This file run as a minimal SMTP server (`--smtp-sink`): every message it takes is a line
    `<monotonic time>\t<recipient>\t<subject>` in its spool, which outlives its restarts."""

    name = "smtp"

    def __init__(self, children, workdir):
        self.children, self.workdir = children, workdir
        self.port = free_port()
        self.spool = os.path.join(workdir, "smtp.spool")
        open(self.spool, "a").close()
        self.proc = None

    def start(self):
        self.proc = self.children.start(
            [sys.executable, os.path.abspath(__file__), "--smtp-sink", str(self.port), self.spool],
            os.path.join(self.workdir, "smtp.log"))

    def stop(self):
        self.children.kill(self.proc)

    def answers(self):
        """A real session: the greeting, then QUIT."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                ok = s.recv(64).startswith(b"220")
                s.sendall(b"QUIT\r\n")
                return ok
        except OSError:
            return False

    def received(self):
        """(time, recipient, subject) of every message taken so far."""
        with open(self.spool) as f:
            rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
        return [(float(t), rcpt.lower(), subject) for t, rcpt, subject in rows]


class Sandbox:
    """The processor sandbox as a process of its own; its ledger lives in memory, so after a
    restart it knows nothing the service made before (the drill's processor requests create new
    intents, which need nothing old)."""

    name = "processor"

    def __init__(self, children, workdir, binary, webhook_url):
        self.children, self.workdir, self.binary = children, workdir, binary
        # Keys of the drill's own, shared with the service (`service_env`).
        self.keys = {"PROCESSOR_SECRET_KEY": f"sk_test_{secrets.token_hex(16)}",
                     "PROCESSOR_WEBHOOK_SECRET": f"whsec_{secrets.token_hex(16)}"}
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RUST_LOG": "warn",
                    "DATA_DIR": workdir, **self.keys}
        self.webhook_url = webhook_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self):
        self.proc = self.children.start(
            [self.binary, "processor-sandbox", "--port", str(self.port), "--webhook-url", self.webhook_url],
            os.path.join(self.workdir, "sandbox.log"), env=self.env, cwd=self.workdir)

    def stop(self):
        self.children.kill(self.proc)

    def answers(self):
        return send(self.url, "GET", "/api/sandbox/ledger", timeout=1).status == 200

    def ledger(self):
        return send(self.url, "GET", "/api/sandbox/ledger", timeout=5).body


# --- the SMTP sink (`faults.py --smtp-sink PORT SPOOL`) --------------------------------------

async def smtp_session(reader, writer, spool):
    """Just enough SMTP for lettre: EHLO, MAIL, RCPT, DATA, RSET, NOOP, QUIT."""
    def reply(text):
        writer.write(text.encode() + b"\r\n")

    reply("220 faults-drill ESMTP")
    rcpts = []
    try:
        while line := await reader.readline():
            command = line.decode(errors="replace").strip()
            verb = command[:4].upper()
            if verb == "EHLO":
                reply("250-faults-drill\r\n250 8BITMIME")
            elif verb == "RCPT":
                rcpts.append(command.split(":", 1)[1].strip().strip("<>").split(">")[0])
                reply("250 OK")
            elif verb == "DATA":
                reply("354 go on")
                await writer.drain()
                subject = ""
                while (data := await reader.readline()) not in (b".\r\n", b""):
                    if not subject and data.lower().startswith(b"subject:"):
                        subject = data.decode(errors="replace")[8:].strip()
                now = time.monotonic()
                with open(spool, "a") as f:
                    f.writelines(f"{now:.3f}\t{r}\t{subject}\n" for r in rcpts)
                rcpts = []
                reply("250 queued")
            elif verb == "QUIT":
                reply("221 bye")
                await writer.drain()
                break
            elif verb in ("MAIL", "RSET"):
                rcpts = []
                reply("250 OK")
            else:
                reply("250 OK")
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


def smtp_sink(port, spool):
    async def serve():
        server = await asyncio.start_server(lambda r, w: smtp_session(r, w, spool), "127.0.0.1", port)
        async with server:
            await server.serve_forever()
    asyncio.run(serve())


# --- phases and what is recorded -------------------------------------------------------------

Record = collections.namedtuple("Record", "kind phase start end outcome detail")


class Phase:
    """A stretch of the drill; a request belongs to the phase it ended in. `bound` is the
    longest a request may take (after `grace`); in a "back" phase, a request started before the
    dependency answers is still held to the away phase's bound, `bound_until_back`."""

    def __init__(self, name, dep=None, role="baseline", grace=0.0, bound=BASELINE_BOUND,
                 bound_until_back=None):
        self.name, self.dep, self.role, self.grace, self.bound = name, dep, role, grace, bound
        self.bound_until_back = bound_until_back
        self.start = self.end = self.t_back = None
        self.probes = []           # (time, answered) while the dependency should be away

    def limit(self, r):
        """The longest record `r` may take; None in the grace period."""
        if r.start < self.start + self.grace:
            return None
        if self.role == "back" and r.start < self.t_back:
            return self.bound_until_back
        return self.bound

    def bound_text(self):
        ms = lambda s: f"{s * 1000:.0f} ms"
        if self.role == "back" and self.bound_until_back != self.bound:
            return (f"every request within {ms(self.bound_until_back)} until {self.dep.name} answered, "
                    f"{ms(self.bound)} after")
        if not self.grace:
            return f"every request within {ms(self.bound)}"
        fault = "kill" if self.dep.name == "redis" else "stop"
        return f"every request within {ms(self.bound)} from {self.grace:g} s after the {fault}"


class Drill:
    """The clients, what they counted, and the phase they count in now. `world` is what the
    set-up made (accounts, the project, the pools of accounts to mail)."""

    def __init__(self, base, world):
        self.base, self.world = base, world
        self.lock = threading.Lock()
        self.records = []
        self.phases = []
        self.phase = None
        self.stop = threading.Event()
        # Acknowledged writes, checked in the database afterwards.
        self.acked_chat = []
        self.acked_milestones = []
        self.acked_payments = []
        self.acked_bio = 0
        self.acked_recontacts = []
        self.mail_asks = []        # (kind, recipient, start, end, phase)
        self.exhausted = set()     # mail kinds whose account pool ran out
        self.crashed = []          # clients that stopped on an exception (a bug of the drill)

    def begin(self, phase):
        now = time.monotonic()
        if self.phase:
            self.phase.end = now
        phase.start = now
        self.phases.append(phase)
        self.phase = phase
        log(f"phase {phase.name}")
        return phase

    def request(self, kind, method, path, who=None, body=None, expected=()):
        """A counted request: its phase is the one it ended in (a request under way when the
        next fault began met that fault). `expected` are the (status, code) answers that are
        fine for this kind besides 2xx."""
        start = time.monotonic()
        a = send(self.base, method, path, who and who.token, who and who.csrf, body,
                 key=method != "GET" and not path.startswith("/api/auth/"))
        end = time.monotonic()
        phase = self.phase
        outcome, detail = classify(a, expected)
        with self.lock:
            self.records.append(Record(kind, phase, start, end, outcome, detail))
        return outcome, a

    # --- the clients ---------------------------------------------------------------------------

    def run_client(self, step, pace):
        while not self.stop.is_set():
            try:
                step()
            except Exception as e:  # a bug in the drill, not in the service: it fails the run
                self.crashed.append(f"{step.__name__}: {e!r}")
                log(f"client {step.__name__} crashed: {e!r}")
                return
            self.stop.wait(pace)

    def start_clients(self):
        world = self.world
        company, expert, admin = world["company"], world["expert"], world["admin"]
        project = world["project"]
        turn = collections.Counter()

        def alternate(name, *who):
            turn[name] += 1
            return who[turn[name] % len(who)]

        def me():
            self.request("me", "GET", "/api/users/me", alternate("me", company, expert))

        def notifications():
            self.request("notifications", "GET", "/api/notifications?size=20", company)

        def projects():
            self.request("projects", "GET", "/api/projects/public?size=10")

        def one_project():
            self.request("project", "GET", f"/api/projects/{project}", company)

        def chat():
            who = alternate("chat", company, expert)
            outcome, a = self.request("chat", "POST", f"/api/chat/{project}", who,
                                      {"content": f"drill message {turn['chat']}"})
            if a.status == 201:
                self.acked_chat.append(a.body["id"])

        def mark_read():
            self.request("mark-read", "POST", "/api/notifications/mark-all-read", expert, {})

        def profile():
            # One writer, values in order: the database must end with the last one acknowledged
            # (or a later one whose answer was lost).
            turn["bio"] += 1
            outcome, a = self.request("profile", "PUT", f"/api/profiles/{world['company_profile']}",
                                      company, {"bio": f"drill {turn['bio']}"})
            if outcome == "ok":
                self.acked_bio = turn["bio"]

        unfunded = []

        def money():
            """Adds a milestone (a database write), then funds it: `initiate` creates its
            payment intent at the processor. A refused funding is tried again."""
            if not unfunded:
                outcome, a = self.request("milestone", "POST", "/api/milestones", company,
                                          {"project_id": project, "title": f"Drill {turn['m']}", "amount": 10})
                turn["m"] += 1
                if outcome == "ok":
                    self.acked_milestones.append(a.body["id"])
                    unfunded.append(a.body["id"])
                return
            # 409 PAYMENT_PENDING: an earlier attempt whose answer was lost did fund it.
            outcome, a = self.request("fund", "POST", "/api/payments/initiate", company,
                                      {"project_id": project, "milestone_id": unfunded[0]},
                                      expected={(409, "PAYMENT_PENDING")})
            if outcome == "ok":
                if a.status == 201:
                    self.acked_payments.append(a.body["id"])
                unfunded.pop()

        def mail(kind, pool, ask):
            def step():
                if not pool:
                    self.exhausted.add(kind)
                    self.stop.wait(1)
                    return
                who = pool.pop()
                phase, start = self.phase, time.monotonic()
                outcome, a = ask(who)
                if outcome == "ok":
                    self.mail_asks.append((kind, who.email.lower(), start, time.monotonic(), phase))
            step.__name__ = kind
            return step

        def reset(who):
            return self.request("reset-mail", "POST", "/api/auth/forgot-password", body={"email": who.email})

        def recontact(who):
            outcome, a = self.request("recontact-mail", "POST", f"/api/admin/users/{who.id}/recontact", admin, {})
            if outcome == "ok":
                self.acked_recontacts.append(who.id)
            return outcome, a

        clients = [(me, READ_PACE), (notifications, READ_PACE), (projects, READ_PACE),
                   (one_project, READ_PACE), (chat, WRITE_PACE), (mark_read, WRITE_PACE),
                   (profile, WRITE_PACE), (money, MONEY_PACE),
                   (mail("reset-mail", world["reset_pool"], reset), MAIL_PACE),
                   (mail("recontact-mail", world["recontact_pool"], recontact), MAIL_PACE)]
        threads = [threading.Thread(target=self.run_client, args=c, daemon=True) for c in clients]
        for t in threads:
            t.start()
        return threads


def classify(a, expected):
    """ok, refused or failed, and what it was."""
    if a.status is None:
        return "failed", a.error
    if 200 <= a.status < 300:
        return "ok", ""
    what = f"{a.status} {a.code}".strip()
    if (a.status, a.code) in expected:
        return "ok", what
    if a.status == 503 and "retry-after" in a.headers:
        return "refused", what
    if a.status == 503:
        return "failed", what + " without Retry-After"
    return "failed", what


# --- set-up through the API ------------------------------------------------------------------

def register(base, username, role):
    email = f"{username}@example.com"
    r = api(base, "POST", "/api/auth/register",
            body={"email": email, "username": username, "password": PASSWORD, "roles": [role]})
    return Account(r["user"]["id"], username, email, r["access_token"], r["csrf_token"])


def member(base, db_url, admin, username, role):
    """A verified member of `role` with complete fiscal data and a confirmed e-mail (as
    deploy/rolling.py makes them); answers the account and its profile's id."""
    who = register(base, username, role)
    sql(db_url, f"UPDATE users SET email_verified = TRUE, email_verified_at = now() WHERE id = {who.id}")
    if role == "empresa":
        profile = {"profile_type": "empresa", "company_name": f"{username} SL", "full_name": username}
    else:
        profile = {"profile_type": "experto", "full_name": f"Expert {username}", "skills": ["Rust", "SQL"]}
    p = api(base, "POST", "/api/profiles/", who, profile)
    api(base, "PUT", f"/api/profiles/{p['id']}/fiscal-data", who,
        {"tax_id": "B12345678", "fiscal_name": "Fiscal Name", "fiscal_address": "Calle Mayor 1",
         "fiscal_postal_code": "28001", "fiscal_city": "Madrid", "fiscal_country": "ES",
         "fiscal_type": "autonomo"})
    api(base, "PUT", f"/api/admin/users/{who.id}/verify", admin, {})
    return who, p["id"]


def set_up(base, db_url, sandbox, admin, pool_size):
    """A deal in escrow (company, expert with an active payout account, a project with the
    expert selected) and two pools of companies, one mail request each."""
    tag = secrets.token_hex(3)
    company, company_profile = member(base, db_url, admin, f"f{tag}co", "empresa")
    expert, _ = member(base, db_url, admin, f"f{tag}ex", "experto")
    api(base, "POST", "/api/processor-connect/account-link", expert, {})
    account = api(base, "GET", "/api/processor-connect/status", expert)["account_id"]
    if send(sandbox.url, "POST", f"/api/sandbox/accounts/{account}/complete-onboarding", body={}).status != 200:
        raise Failed("set-up: onboarding at the sandbox")
    wait_until("the payout account to be active",
               lambda: api(base, "GET", "/api/processor-connect/status", expert).get("status") == "active", 30)
    project = api(base, "POST", "/api/projects/", company, {
        "title": "Fault drill", "description": "Drill it", "budget": 100.0, "deadline": "2099-01-01T00:00:00",
        "skills_required": ["Rust"], "project_type": "curated", "status": "pending_publication"})["id"]
    api(base, "POST", f"/api/projects/{project}/validate", admin, {"approved": True})
    api(base, "POST", f"/api/admin/projects/{project}/invite-experts", admin, {"expert_ids": [expert.id]})
    api(base, "POST", f"/api/projects/{project}/apply", expert, {
        "cover_letter": "I can do it", "proposed_budget": 100.0,
        # At least three milestones; the drill adds its own later.
        "proposed_milestones": [{"title": f"Milestone {i}", "amount": a}
                                for i, a in ((1, 40.0), (2, 30.0), (3, 30.0))]})
    api(base, "POST", f"/api/projects/{project}/select/{expert.id}", company)

    def pool_company(i):
        who = register(base, f"f{tag}m{i}", "empresa")
        if i % 2:      # recontact needs a company profile; a reset only the account
            api(base, "POST", "/api/profiles/", who,
                {"profile_type": "empresa", "company_name": f"Pool {i} SL", "full_name": who.username})
        return who

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        pool = list(ex.map(pool_company, range(2 * pool_size)))
    return {"admin": admin, "company": company, "company_profile": company_profile, "expert": expert,
            "project": project, "reset_pool": pool[0::2], "recontact_pool": pool[1::2]}


# --- the phases ------------------------------------------------------------------------------

def hold_away(phase, seconds):
    """Takes the dependency away and probes it, with real connection attempts, until the phase
    ends: every probe must find it down."""
    phase.dep.stop()
    until = phase.start + seconds
    while time.monotonic() < until:
        phase.probes.append((time.monotonic(), phase.dep.answers()))
        time.sleep(PROBE_EVERY)
    phase.probes.append((time.monotonic(), phase.dep.answers()))


def bring_back(phase, seconds):
    """Starts the dependency again; `t_back` is when it first answers (recovery counts from
    there). The phase lasts long enough after it to see the recovery bound."""
    phase.dep.start()
    phase.t_back = wait_until(f"{phase.dep.name} to answer again", phase.dep.answers, 30)
    log(f"  {phase.dep.name} answers again after {phase.t_back - phase.start:.2f}s")
    until = max(phase.start + seconds, phase.t_back + RECOVERY_BOUND + 2)
    time.sleep(max(0.0, until - time.monotonic()))


def run_phases(drill, redis, postgres, smtp, sandbox):
    """The phases, with the clients running from the baseline's start to the last phase's end;
    answers the baseline and the clients' threads."""
    baseline = drill.begin(Phase("baseline"))
    threads = drill.start_clients()
    time.sleep(BASELINE_SECONDS)
    # Proof that the service uses the drill's own Redis and sandbox, not some other.
    baseline.redis_keys = redis.keys()
    baseline.intents = len((sandbox.ledger() or {}).get("intents", []))
    plan = [(redis, REDIS_GRACE, AWAY_SECONDS, AWAY_BOUND, RECOVERY_BOUND),
            (postgres, POSTGRES_GRACE, POSTGRES_AWAY_SECONDS, AWAY_BOUND, RECOVERY_BOUND),
            (smtp, 0.0, AWAY_SECONDS, BASELINE_BOUND, BASELINE_BOUND),
            (sandbox, 0.0, AWAY_SECONDS, PROCESSOR_BOUND, BASELINE_BOUND)]
    for dep, grace, away_seconds, away_bound, back_bound in plan:
        hold_away(drill.begin(Phase(f"{dep.name} away", dep, "away", grace, away_bound)), away_seconds)
        bring_back(drill.begin(Phase(f"{dep.name} back", dep, "back", 0.0, back_bound, away_bound)),
                   BACK_SECONDS)
    drill.phase.end = time.monotonic()
    return baseline, threads


# --- the verdict -----------------------------------------------------------------------------

def recovery(drill, phase, kinds):
    """Seconds from the dependency answering again until every kind of request had succeeded
    and nothing was refused or failed any more; None when some kind never succeeded."""
    after = [r for r in drill.records if r.phase is phase and r.start >= phase.t_back]
    marks = [phase.t_back]
    missing = []
    for kind in kinds:
        oks = [r.end for r in after if r.kind == kind and r.outcome == "ok"]
        if oks:
            marks.append(min(oks))
        else:
            missing.append(kind)
    marks += [r.end for r in after if r.outcome != "ok"]
    return (None, missing) if missing else (max(marks) - phase.t_back, [])


def tally(details):
    c = collections.Counter(details)
    return ", ".join(f"{d or '?'} ×{n}" for d, n in c.most_common(4)) + (" …" if len(c) > 4 else "")


def judge_mail(drill, smtp, final_wait):
    """Waits for the mail asked for, then the asks whose message did not arrive in time.
    A reset answers 200 whatever happens (it reveals nothing), so one asked while Redis or
    PostgreSQL was away promises nothing; everything else acknowledged must arrive."""
    outages = [(p.start - 0.5, nxt.t_back) for p, nxt in zip(drill.phases, drill.phases[1:])
               if p.role == "away" and p.dep.name in ("redis", "postgres")]
    smtp_back = next(p.t_back for p in drill.phases if p.role == "back" and p.dep is smtp)
    smtp_away = next(p.start for p in drill.phases if p.role == "away" and p.dep is smtp)

    def promised(ask):
        kind, _, start, _, _ = ask
        return kind != "reset-mail" or not any(a <= start <= b for a, b in outages)

    def deadline(ask):
        # Asked from just before the SMTP server went away: it can only go out once it is back.
        end = ask[3]
        return (max(end, smtp_back) if end >= smtp_away - 1 else end) + MAIL_ARRIVAL_BOUND

    def arrivals():
        by_recipient = {}
        for t, rcpt, _ in smtp.received():
            by_recipient.setdefault(rcpt, []).append(t)
        return by_recipient

    judged = [a for a in drill.mail_asks if promised(a)]
    started = time.monotonic()
    while True:
        got = arrivals()
        late = [a for a in judged if not any(a[2] <= t <= deadline(a) for t in got.get(a[1], []))]
        if not late or time.monotonic() > max(deadline(a) for a in late) or time.monotonic() - started > final_wait:
            break
        time.sleep(0.5)
    waited = time.monotonic() - started
    last_smtp = [t - smtp_back for a in judged if a[4].dep is smtp for t in got.get(a[1], []) if t >= a[2]]
    return judged, late, waited, max(last_smtp, default=0.0)


def check_writes(drill, db_url):
    """Every acknowledged write is in the database."""
    problems = []
    for acked, query, what in (
        (drill.acked_chat, "SELECT id FROM chat_messages", "acknowledged chat messages missing"),
        (drill.acked_milestones, "SELECT id FROM milestones", "acknowledged milestones missing"),
        (drill.acked_payments,
         "SELECT id FROM payments WHERE processor_payment_intent_id IS NOT NULL",
         "acknowledged payments missing or without their intent"),
        (drill.acked_recontacts,
         "SELECT user_id FROM profiles WHERE recontacted_at IS NOT NULL",
         "acknowledged recontacts not recorded"),
    ):
        present = {int(r[0]) for r in sql(db_url, query)}
        lost = [i for i in acked if i not in present]
        if lost:
            problems.append(f"{len(lost)} {what}: {lost[:10]}")
    bio = sql(db_url, f"SELECT bio FROM profiles WHERE id = {drill.world['company_profile']}")[0][0]
    if drill.acked_bio and not (bio.startswith("drill ") and int(bio.split()[1]) >= drill.acked_bio):
        problems.append(f"the profile holds {bio!r}; 'drill {drill.acked_bio}' was acknowledged")
    acked = (drill.acked_chat, drill.acked_milestones, drill.acked_payments, drill.acked_recontacts)
    return problems, sum(map(len, acked)) + 1     # + the profile's last value


def judge_phase(drill, ph, kinds, judged, late, check):
    """The checks of one phase (through `check`) and its row of the table."""
    recs = [r for r in drill.records if r.phase is ph]
    by = collections.Counter(r.outcome for r in recs)
    slowest = max(recs, key=lambda r: r.end - r.start, default=None)
    slow_ms = (slowest.end - slowest.start) * 1000 if slowest else 0
    failed = [r for r in recs if r.outcome == "failed"]
    check(not failed, f"{ph.name}: no failed request" + (f"; {len(failed)} failed: " + tally(
        f"{r.kind} {r.detail}" for r in failed) if failed else ""))
    bounded = [r for r in recs if ph.limit(r) is not None]
    over = [r for r in bounded if r.end - r.start > ph.limit(r)]
    check(not over, f"{ph.name}: {ph.bound_text()}" + (
        f"; {len(over)} of {len(bounded)} slower (slowest {max(r.end - r.start for r in over) * 1000:.0f} ms: "
        + tally(r.kind for r in over) + ")" if over else ""))
    down = "-"
    if ph.role == "away":
        downs = sum(1 for _, answered in ph.probes if not answered)
        down = f"{downs}/{len(ph.probes)}"
        check(len(ph.probes) >= 3 and downs == len(ph.probes),
              f"{ph.name}: {ph.dep.name} really down while it counted ({down} probes found it down)")
    rec = "-"
    if ph.role == "back":
        seconds, missing = recovery(drill, ph, kinds)
        rec = f"{seconds:.2f}" if seconds is not None else "never"
        check(seconds is not None and seconds < RECOVERY_BOUND,
              f"{ph.name}: recovered within {RECOVERY_BOUND:g} s of {ph.dep.name} answering" + (
                  f" (took {seconds:.2f} s)" if seconds is not None else f"; never succeeded again: {missing}"))
    asked = [a for a in drill.mail_asks if a[4] is ph]
    promised = [a for a in judged if a[4] is ph]
    missing_mail = [a for a in late if a[4] is ph]
    mail = f"{len(promised) - len(missing_mail)}/{len(promised)}" + (
        f"+{len(asked) - len(promised)}" if len(asked) > len(promised) else "")
    if missing_mail:
        check(False, f"{ph.name}: mail asked for arrived in time; missing "
              + tally(a[0] for a in missing_mail))
    return ph.name, len(recs), by["ok"], by["refused"], by["failed"], f"{slow_ms:.0f}", rec, down, mail


def verdict(drill, baseline, sandbox, smtp, db_url, service_alive):
    """Prints the table and a PASS or FAIL line for every check; answers whether all passed,
    the table and the figures line."""
    kinds = sorted({r.kind for r in drill.records if r.phase is baseline and r.outcome == "ok"})
    all_kinds = sorted({r.kind for r in drill.records})
    checks = []          # (passed, text)

    def check(ok, text):
        checks.append((ok, text))

    # Not vacuous: the baseline exercised every kind, on the drill's own dependencies.
    never = [k for k in all_kinds if k not in kinds]
    check(not never, "baseline: every kind of request succeeded" + (f" but {never}" if never else
          f" ({len(kinds)} kinds)"))
    check(baseline.redis_keys > 0 and baseline.intents > 0,
          f"baseline: the service uses the drill's Redis ({baseline.redis_keys} keys) and sandbox "
          f"({baseline.intents} intents)")

    judged, late, waited, last_smtp = judge_mail(drill, smtp, MAIL_ARRIVAL_BOUND + 5)
    rows = [judge_phase(drill, ph, kinds, judged, late, check) for ph in drill.phases]
    processor_away = next(p for p in drill.phases if p.role == "away" and p.dep is sandbox)
    refused_funds = sum(1 for r in drill.records if r.phase is processor_away and r.kind == "fund"
                        and r.outcome != "ok")
    check(refused_funds > 0, f"processor away: the service did call it ({refused_funds} fund requests refused)")
    check(not late, f"mail: {len(judged) - len(late)} of {len(judged)} promised messages arrived "
          f"(waited {waited:.1f} s at the end; last of the smtp phases {last_smtp:.1f} s after it was back)")
    check(not drill.exhausted, "mail: the account pools lasted" + (f"; ran out: {sorted(drill.exhausted)}"
                                                                   if drill.exhausted else ""))
    problems, writes = check_writes(drill, db_url)
    check(not problems, f"after the last phase: all {writes} acknowledged writes are in the database"
          + ("; " + "; ".join(problems) if problems else ""))
    check(not drill.crashed, "the drill's clients ran to the end" + (f"; crashed: {drill.crashed}"
                                                                    if drill.crashed else ""))
    check(service_alive, "the service ran through every phase" + ("" if service_alive else ": it exited"))

    header = ("phase", "requests", "ok", "refused", "failed", "slowest ms", "recovery s", "down", "mail")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    table = ["  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths)))
             for r in [header] + rows]
    legend = ("down: probes that found the dependency down / probes; mail: messages arrived / promised "
              "(+ resets asked while Redis or PostgreSQL was away: answered 200 whatever happens, not judged)")
    lines = table + [legend, ""] + [("PASS " if ok else "FAIL ") + text for ok, text in checks]
    total = collections.Counter(r.outcome for r in drill.records)
    worst = max(drill.records, key=lambda r: r.end - r.start)
    recoveries = [float(r[6]) for r in rows if r[6] not in ("-", "never")]
    figures = (f"requests {len(drill.records)} (ok {total['ok']}, refused {total['refused']}, "
               f"failed {total['failed']}) "
               f"in {len(drill.phases)} phases, slowest {(worst.end - worst.start) * 1000:.0f} ms ({worst.phase.name}, "
               f"{worst.kind}), longest recovery {max(recoveries, default=0):.2f} s, mail {len(judged) - len(late)}/"
               f"{len(judged)} arrived, {writes} acknowledged writes checked, "
               f"{sum(1 for ok, _ in checks if not ok)} of {len(checks)} checks failed")
    print("\n".join(lines))
    return all(ok for ok, _ in checks), table, figures


def dump(drill, path):
    """Every counted request, one a line, for a closer look: phase, kind, start (s after the
    baseline began), milliseconds, outcome, what it was."""
    zero = drill.phases[0].start
    with open(path, "w") as f:
        for r in sorted(drill.records, key=lambda r: r.start):
            f.write(f"{r.phase.name}\t{r.kind}\t{r.start - zero:.3f}\t{(r.end - r.start) * 1000:.0f}\t"
                    f"{r.outcome}\t{r.detail}\n")


def log_errors(path, n=10):
    """The service's last error lines, without colours."""
    with open(path, errors="replace") as f:
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in f]
    return [line for line in lines if " ERROR " in line or "panicked" in line][-n:]


# --- the run ---------------------------------------------------------------------------------

def service_env(port, data, db_url, redis, sandbox, prefix, extra=None):
    """The environment of a drill's instance: its own database, Redis (keys under `prefix`) and
    processor sandbox, limits far above a drill's pace. Shared by the drills beside this one."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DATA_DIR": data, "BIND_ADDR": f"127.0.0.1:{port}",
        "DATABASE_URL": db_url, "DATABASE_MAX_CONNECTIONS": "10",
        "REDIS_URL": f"redis://127.0.0.1:{redis.port}", "CACHE_PREFIX": prefix,
        "PROCESSOR_API_BASE": sandbox.url, **sandbox.keys,
        "JWT_SECRET": secrets.token_hex(32), "FRONTEND_URL": "http://frontend.test",
        # Limits far above the drill's pace: a 429 would be a failure, not the point.
        "RATE_LIMIT_PER_MINUTE": "1000000", "CHAT_MESSAGES_PER_MINUTE": "1000000",
        "LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER": "1000", "LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_IP": "100000",
        "BCRYPT_COST": "4", "WORKERS": "4", "SHUTDOWN_DRAIN_SECONDS": "0", "SHUTDOWN_TIMEOUT_SECONDS": "5",
        # The migrations ran before (`marketplace migrate`), as in production.
        "MIGRATE_ON_START": "false", "RUST_LOG": "warn",
        **(extra or {}),
    }


def run(args):
    started = time.monotonic()
    os.makedirs(args.workdir, exist_ok=True)
    children = Children(args.pids)
    postgres = Postgres(args.cluster_file)
    service = None
    try:
        log(f"PostgreSQL {postgres.version} cluster {postgres.cluster} on port {postgres.port}")
        postgres.create()
        redis = Redis(children, args.workdir)
        redis.start()
        smtp = SmtpSink(children, args.workdir)
        smtp.start()
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        sandbox = Sandbox(children, args.workdir, args.bin, f"{base}/api/payments/webhooks/processor")
        sandbox.start()
        for dep in (redis, smtp, sandbox):
            wait_until(f"{dep.name} to answer", dep.answers, 30)
        data = os.path.join(args.workdir, "service")
        os.makedirs(data, exist_ok=True)
        env = service_env(port, data, postgres.url, redis, sandbox, "faults:",
                          {"SMTP_URL": f"smtp://127.0.0.1:{smtp.port}",
                           "MAIL_FROM": "Marketplace <no-reply@example.com>"})
        admin_password = "Aa1!" + secrets.token_hex(8)
        for argv in (["migrate"], ["create-admin", "--email", "faultsadmin@example.com", "--username",
                                   "faultsadmin", "--password", admin_password]):
            subprocess.run([args.bin, *argv], env=env, cwd=data, check=True, capture_output=True, text=True)
        service = children.start([args.bin, "serve"], os.path.join(args.workdir, "service.log"), env=env, cwd=data)
        wait_until("the service to be ready", lambda: send(base, "GET", "/ready", timeout=2).status == 200, 60)
        log(f"service on {base}; Redis on {redis.port}, SMTP on {smtp.port}, sandbox on {sandbox.port}")

        token = api(base, "POST", "/api/auth/login",
                    body={"username": "faultsadmin", "password": admin_password})["access_token"]
        admin = Account(0, "faultsadmin", "faultsadmin@example.com", token)
        phase_seconds = BASELINE_SECONDS + 3 * (AWAY_SECONDS + BACK_SECONDS) + POSTGRES_AWAY_SECONDS + BACK_SECONDS
        pool_size = int(phase_seconds * 1.5 / MAIL_PACE) + 10
        world = set_up(base, postgres.url, sandbox, admin, pool_size)
        log(f"set up in {time.monotonic() - started:.1f}s: a deal, {2 * pool_size} accounts to mail")

        drill = Drill(base, world)
        baseline, threads = run_phases(drill, redis, postgres, smtp, sandbox)
        drill.stop.set()
        for t in threads:
            t.join(CLIENT_TIMEOUT + 5)
        service_alive = service.poll() is None
        passed, table, figures = verdict(drill, baseline, sandbox, smtp, postgres.url, service_alive)
        dump(drill, os.path.join(args.workdir, "requests.tsv"))
        figures += f", total {time.monotonic() - started:.0f}s"
        print(figures)
        with open(args.figures, "w") as f:
            f.write("\n".join(table + [figures]) + "\n")
        if not passed:
            print(f"--- the service's last errors ({args.workdir}/service.log; every request in requests.tsv)")
            print("".join(log_errors(os.path.join(args.workdir, "service.log"))), end="")
        return 0 if passed else 1
    finally:
        if service is not None:
            children.kill(service, signal.SIGTERM)
        children.stop_all()
        postgres.drop()


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--smtp-sink":
        smtp_sink(int(sys.argv[2]), sys.argv[3])
        return
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--bin", required=True, help="the release binary")
    a.add_argument("--workdir", help="logs and data (default: a new temporary folder)")
    a.add_argument("--pids", help="file to keep the running children's ids in (default: in workdir)")
    a.add_argument("--cluster-file", help="file to keep the cluster's version and name in (default: in workdir)")
    a.add_argument("--figures", help="file for the table and the figures line (default: in workdir)")
    args = a.parse_args()
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="faults.")
    args.pids = args.pids or os.path.join(args.workdir, "pids")
    args.cluster_file = args.cluster_file or os.path.join(args.workdir, "cluster")
    args.figures = args.figures or os.path.join(args.workdir, "figures")
    # SIGTERM (deploy/check's cleanup, CI's timeout) unwinds through the `finally` that drops the
    # cluster and stops the children.
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
