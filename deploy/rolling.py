#!/usr/bin/env python3
"""The rolling-restart drive of deploy/check (issue 33), run by its `check_rolling_restart`.

deploy/check has already started the processor sandbox and HAProxy (with deploy/haproxy.cfg,
its ports and admin socket substituted) on a database of its own. This driver:

  1. starts the two instances (s1, s2) it will restart, and waits until HAProxy sees both UP;
  2. sets up, through HAProxy only, escrow deals between verified companies and experts
     (register, e-mail confirmed in SQL, profiles, fiscal data, verification by the
     administrator, the expert's payout account onboarded at the sandbox, project, validation,
     invitation, proposal, selection);
  3. opens a chat socket for the company and for the expert of each deal, posts chat messages
     over REST and drives each deal's milestones (fund at the sandbox, held, delivery,
     approval, released) while it restarts each instance in turn as an operator would:
     `set server … state drain` on HAProxy's runtime socket, SIGTERM, exit status 0, start
     again, `/ready` 200, `set server … state ready`, and HAProxy sees it UP again;
  4. checks: no HTTP request failed (a 5xx or an unexpected status is a failure; a connection
     error or `IDEMPOTENCY_KEY_IN_USE` is retried with the same `Idempotency-Key`, and
     counted), every closed socket reconnected, every participant has every chat message
     exactly once (pushed, or caught up over REST after a reconnect, de-duplicated by id,
     as a real client does), every message posted is stored once, and every payment in the
     database equals the sandbox's ledger (and the service's own money audit agrees).

Prints the figures as its last line; exits non-zero with the reasons on any failure.
Only Python's standard library and `websockets` (pinned by deploy/check).

deploy/upgrade.py runs the same drive as the upgrade drill: `run` takes a `Drill` whose hooks
(the new version's migration before the restarts, the restarts onto the new binary, payments
scoped to this run's deals on a seeded database) are no-ops here.
"""

import argparse
import asyncio
import csv
import http.client
import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

PASSWORD = "Secret123!"
# Milestone amounts (minor units) of each deal; one deal per entry.
DEALS = [
    [10_000, 20_050, 9_999, 5_000, 7_777],
    [12_345, 3_003, 8_000, 4_500, 6_100],
    [9_000, 11_111, 2_500, 7_000, 3_333],
]


def debug(text):
    """Socket events on stderr when ROLLING_DEBUG is set."""
    if os.environ.get("ROLLING_DEBUG"):
        print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


class Failed(Exception):
    """A requirement not met: the run fails with this sentence."""


class Figures:
    """What the run counts, printed at the end."""

    def __init__(self):
        self.requests = 0          # HTTP requests to the service, through HAProxy (each attempt)
        self.retries = 0           # of which repeats with the same Idempotency-Key (or a GET)
        self.retried = []          # why each retry happened
        self.failures = []         # requests that failed: the run fails
        self.max_latency = 0.0     # longest a request waited for its answer, retries included
        self.max_latency_what = ""
        self.during_restarts = 0   # requests sent while an instance was out of rotation
        self.deal_steps_during_restarts = 0
        self.restarts = 0
        self.restart_times = []
        self.closes = {}           # close code -> count, sockets closed by a server
        self.refusals = {}         # why an attempt to open a socket failed -> count
        self.reconnects = 0
        self.longest_silence = 0.0  # longest a socket stayed open but silent before its close
        self.posted = 0
        self.by_push = 0
        self.by_catch_up = 0
        self.pushed_twice = 0
        self.out_of_rotation = False


F = Figures()


# --- HTTP through the proxy -----------------------------------------------------------------

def http_call(base, method, path, token=None, csrf=None, body=None, expect=(200, 201)):
    """One request to the service, retried only as a client safely may: on a connection error
    (or while the first attempt still holds the key) with the same Idempotency-Key. Any other
    status than `expect` (a 5xx above all) is a failure. Answers the JSON body."""
    host, port = base.split("//")[1].split(":")
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if csrf:
        headers["Cookie"] = f"csrf_token={csrf}"
        headers["X-CSRF-Token"] = csrf
    mutating = method != "GET"
    if mutating and not path.startswith("/api/auth/"):
        headers["Idempotency-Key"] = str(uuid.uuid4())
    data = json.dumps(body).encode() if body is not None else None
    started = time.monotonic()
    for attempt in range(60):
        F.requests += 1
        if F.out_of_rotation:
            F.during_restarts += 1
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            status, text = resp.status, resp.read().decode()
        except (OSError, http.client.HTTPException) as e:
            # Only a request that carries a key (or a GET) is repeated.
            if mutating and "Idempotency-Key" not in headers:
                F.failures.append(f"{method} {path}: {e!r} (no key: not retried)")
                raise Failed(f"{method} {path}: {e!r}")
            F.retries += 1
            F.retried.append(f"{method} {path}: {type(e).__name__}")
            time.sleep(0.2)
            continue
        finally:
            conn.close()
        if status == 409 and "IDEMPOTENCY_KEY_IN_USE" in text:
            F.retries += 1
            F.retried.append(f"{method} {path}: key in use")
            time.sleep(0.2)
            continue
        took = time.monotonic() - started
        if took > F.max_latency:
            F.max_latency, F.max_latency_what = took, f"{method} {path}"
        if status not in expect:
            F.failures.append(f"{method} {path}: {status} {text[:300]}")
            raise Failed(f"{method} {path}: {status} {text[:300]}")
        return json.loads(text) if text else None
    F.failures.append(f"{method} {path}: no answer after 60 attempts")
    raise Failed(f"{method} {path}: no answer after 60 attempts")


def direct(url, method="GET", body=None):
    """A request to the sandbox (the processor: the card holder's side, not the service) or
    to one instance directly (the operator's readiness probe); (status, JSON or None)."""
    host, rest = url.split("//")[1].split("/", 1)
    h, p = host.split(":")
    conn = http.client.HTTPConnection(h, int(p), timeout=30)
    try:
        conn.request(method, "/" + rest, body=json.dumps(body).encode() if body is not None else None,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read().decode()
        try:
            return resp.status, json.loads(text) if text else None
        except ValueError:
            return resp.status, None
    finally:
        conn.close()


def sql(db_url, query):
    """Rows of a query (tab-separated columns) through psql."""
    out = subprocess.run(["psql", db_url, "-AtX", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-c", query],
                         check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


class Account:
    def __init__(self, api, id_, username, token, csrf=None):
        self.api, self.id, self.username, self.token, self.csrf = api, id_, username, token, csrf

    def call(self, method, path, body=None, expect=(200, 201)):
        return http_call(self.api, method, path, self.token, self.csrf, body, expect)

    async def acall(self, method, path, body=None, expect=(200, 201)):
        return await asyncio.to_thread(self.call, method, path, body, expect)


# --- the instances and HAProxy --------------------------------------------------------------

class Instances:
    """The two instances this driver starts, stops and starts again; HAProxy's runtime API."""

    def __init__(self, args):
        self.args = args
        self.env = dict(line.rstrip("\n").split("=", 1) for line in open(args.env_file) if "=" in line)
        self.ports = dict(spec.split(":") for spec in args.instance)    # name -> port
        self.procs = {}
        self.starts = {name: 0 for name in self.ports}
        # What every start runs: the upgrade drill changes both between its migration and
        # its restarts; the rolling restart never does.
        self.bin = args.bin

    def start(self, name):
        port = self.ports[name]
        data = os.path.join(self.args.workdir, name)
        os.makedirs(data, exist_ok=True)
        self.starts[name] += 1
        log = open(os.path.join(data, f"server.log.{self.starts[name]}"), "w")
        env = dict(self.env, BIND_ADDR=f"127.0.0.1:{port}", DATA_DIR=data,
                   PATH=os.environ.get("PATH", "/usr/bin:/bin"))
        proc = subprocess.Popen([self.bin, "serve"], env=env, cwd=data, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        self.note_pids()

    def note_pids(self):
        """The ids of the instances running now, for deploy/check's cleanup to stop by id if
        this driver dies (rewritten, so an exited instance's id is never signalled)."""
        with open(self.args.pids, "w") as pids:
            pids.writelines(f"{p.pid}\n" for p in self.procs.values() if p.poll() is None)

    def ready(self, name):
        try:
            return direct(f"http://127.0.0.1:{self.ports[name]}/ready")[0] == 200
        except OSError:
            return False

    def haproxy(self, command):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(self.args.haproxy_socket)
            s.sendall(command.encode() + b"\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return out.decode()

    def status(self, name):
        """HAProxy's view of a server: UP, DOWN, DRAIN, `UP 1/2` …"""
        text = self.haproxy("show stat").lstrip("# ")
        for row in csv.DictReader(io.StringIO(text)):
            if row["pxname"] == "marketplace" and row["svname"] == name:
                return row["status"]
        raise Failed(f"HAProxy does not know server {name}")

    async def wait(self, what, probe, limit):
        until = time.monotonic() + limit
        while not await asyncio.to_thread(probe):
            if time.monotonic() > until:
                raise Failed(f"timed out waiting for {what}")
            await asyncio.sleep(0.1)

    async def start_all(self):
        for name in self.ports:
            self.start(name)
        for name in self.ports:
            await self.wait(f"{name} ready", lambda n=name: self.ready(n), 60)
            await self.wait(f"HAProxy to see {name} UP", lambda n=name: self.status(n) == "UP", 30)

    async def restart(self, name):
        """Drain, SIGTERM, exit 0, start, /ready 200, ready in HAProxy (and UP there)."""
        started = time.monotonic()
        F.out_of_rotation = True
        debug(f"drain {name}")
        self.haproxy(f"set server marketplace/{name} state drain")
        proc = self.procs[name]
        proc.send_signal(signal.SIGTERM)
        try:
            rc = await asyncio.to_thread(proc.wait, 60)
        except subprocess.TimeoutExpired:
            raise Failed(f"{name} still running 60 s after SIGTERM")
        if rc != 0:
            raise Failed(f"{name} exited {rc} after SIGTERM, not 0")
        debug(f"{name} exited 0; starting")
        self.start(name)
        await self.wait(f"{name} ready again", lambda: self.ready(name), 60)
        self.haproxy(f"set server marketplace/{name} state ready")
        # Its health checks must pass `rise` times before HAProxy sends it anything: until
        # then the other instance must not leave.
        await self.wait(f"HAProxy to see {name} UP again", lambda: self.status(name) == "UP", 30)
        F.out_of_rotation = False
        F.restarts += 1
        F.restart_times.append(time.monotonic() - started)

    def stop_all(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.note_pids()


# --- setup: accounts and deals, through the proxy ---------------------------------------------

def member(args, admin, username, role):
    """A verified member of `role` with complete fiscal data and a confirmed e-mail."""
    r = http_call(args.proxy, "POST", "/api/auth/register",
                  body={"email": f"{username}@example.com", "username": username,
                        "password": PASSWORD, "roles": [role]})
    who = Account(args.proxy, r["user"]["id"], username, r["access_token"], r["csrf_token"])
    sql(args.db_url, f"UPDATE users SET email_verified = TRUE, email_verified_at = now() WHERE id = {who.id}")
    if role == "empresa":
        profile = {"profile_type": "empresa", "company_name": f"{username} SL", "full_name": username}
    else:
        profile = {"profile_type": "experto", "full_name": f"Expert {username}", "skills": ["Rust", "SQL"]}
    p = who.call("POST", "/api/profiles/", profile)
    who.call("PUT", f"/api/profiles/{p['id']}/fiscal-data",
             {"tax_id": "B12345678", "fiscal_name": "Fiscal Name", "fiscal_address": "Calle Mayor 1",
              "fiscal_postal_code": "28001", "fiscal_city": "Madrid", "fiscal_country": "ES",
              "fiscal_type": "autonomo"})
    admin.call("PUT", f"/api/admin/users/{who.id}/verify", {})
    return who


def deal(args, admin, tag, amounts):
    """Company and expert, the expert's payout account active, a validated project with the
    expert's proposal of `amounts` selected; the first payment pending."""
    company = member(args, admin, f"{tag}co", "empresa")
    expert = member(args, admin, f"{tag}ex", "experto")
    expert.call("POST", "/api/processor-connect/account-link", {})
    account = expert.call("GET", "/api/processor-connect/status")["account_id"]
    status, _ = direct(f"{args.sandbox}/api/sandbox/accounts/{account}/complete-onboarding", "POST", {})
    if status != 200:
        raise Failed(f"onboarding at the sandbox: {status}")
    until = time.monotonic() + 30
    while expert.call("GET", "/api/processor-connect/status").get("status") != "active":
        if time.monotonic() > until:
            raise Failed("the payout account did not become active")
        time.sleep(0.1)
    total = sum(amounts) / 100
    project = company.call("POST", "/api/projects/", {
        "title": "Data platform", "description": "Build it", "budget": total,
        "deadline": "2099-01-01T00:00:00", "skills_required": ["Rust"],
        "project_type": "curated", "status": "pending_publication"})["id"]
    admin.call("POST", f"/api/projects/{project}/validate", {"approved": True})
    admin.call("POST", f"/api/admin/projects/{project}/invite-experts", {"expert_ids": [expert.id]})
    expert.call("POST", f"/api/projects/{project}/apply", {
        "cover_letter": "I can do it", "proposed_budget": total,
        "proposed_milestones": [{"title": f"Milestone {i + 1}", "amount": a / 100}
                                for i, a in enumerate(amounts)]})
    first = company.call("POST", f"/api/projects/{project}/select/{expert.id}")["payment"]["id"]
    return {"company": company, "expert": expert, "project": project, "first": first,
            "account": account, "amounts": amounts}


# --- the deal's steps while the instances restart -------------------------------------------

async def think():
    """A person's pace between steps, so the deals stay in flight across the restarts."""
    await asyncio.sleep(random.uniform(0.8, 1.6))


async def drive(args, d, restarting):
    """Each milestone: fund at the sandbox, wait for `held`, the expert delivers, the company
    approves the delivery, which releases the payment (and makes the next one)."""
    company, expert = d["company"], d["expert"]
    payment = d["first"]
    for n in range(len(d["amounts"])):
        y = await company.acall("GET", f"/api/payments/{payment}")
        if not y.get("processor_payment_intent_id"):
            await company.acall("POST", "/api/payments/initiate",
                                {"project_id": d["project"], "milestone_id": y["milestone_id"]})
            y = await company.acall("GET", f"/api/payments/{payment}")
        status, _ = await asyncio.to_thread(
            direct, f"{args.sandbox}/api/sandbox/payment_intents/{y['processor_payment_intent_id']}/confirm",
            "POST", {"payment_method": "pm_card_visa"})
        if status != 200:
            raise Failed(f"confirmation at the sandbox: {status}")
        # The sandbox's webhook (through HAProxy, delivered again if it fails) makes it held.
        until = time.monotonic() + 60
        while (await company.acall("GET", f"/api/payments/{payment}"))["status"] != "held":
            if time.monotonic() > until:
                raise Failed(f"payment {payment} not held 60 s after its confirmation")
            await asyncio.sleep(0.2)
        await think()
        if restarting():
            F.deal_steps_during_restarts += 1
        r = await expert.acall("POST", "/api/milestones/deliveries/",
                               {"milestone_id": y["milestone_id"], "description": f"Milestone {n + 1} done"})
        delivery = r["id"] if "id" in r else r["delivery"]["id"]
        await think()
        if restarting():
            F.deal_steps_during_restarts += 1
        r = await company.acall("PUT", f"/api/milestones/deliveries/{delivery}/review", {"decision": "approve"})
        if r["payment"]["status"] != "released":
            raise Failed(f"payment {payment} is {r['payment']['status']} after the approval")
        nxt = r.get("next_payment")
        if n + 1 < len(d["amounts"]):
            if not nxt:
                raise Failed(f"no next payment after payment {payment}")
            payment = nxt["id"]
        await think()


# --- chat: sockets that reconnect and catch up, messages posted over REST -------------------

class Participant:
    """A chat client: one socket to the project's room; when a server closes it, it opens a
    new one (through HAProxy, so on the other instance) and catches up what it missed over
    REST, de-duplicating by message id."""

    def __init__(self, args, who, project):
        self.args, self.who, self.project = args, who, project
        self.seen = {}            # message id -> how it arrived
        self.opened = 0
        self.task = None
        self.last_push = None

    def take(self, message_id, how):
        if message_id in self.seen:
            if how == "push" and self.seen[message_id] == "push":
                F.pushed_twice += 1
            return
        self.seen[message_id] = how
        if how == "push":
            F.by_push += 1
        else:
            F.by_catch_up += 1

    async def catch_up(self):
        """Newest first, page by page, back to the newest message already had."""
        mark = max(self.seen, default=0)
        before = None
        while True:
            q = f"/api/chat/{self.project}?size=100" + (f"&before_id={before}" if before else "")
            items = (await self.who.acall("GET", q))["items"]
            for m in items:
                self.take(m["id"], "catch-up")
            if not items or min(m["id"] for m in items) <= mark:
                return
            before = min(m["id"] for m in items)

    async def listen(self, stop):
        ws_base = self.args.proxy.replace("http://", "ws://")
        url = f"{ws_base}/api/ws/chat/{self.project}?token={self.who.token}"
        while not stop.is_set():
            was_open = False
            try:
                async with connect(url, open_timeout=10, close_timeout=2, max_size=2**20) as ws:
                    was_open = True
                    self.opened += 1
                    debug(f"{self.who.username} open #{self.opened}")
                    if self.opened > 1:
                        F.reconnects += 1
                        await self.catch_up()
                    async for raw in ws:
                        frame = json.loads(raw)
                        if frame.get("type") == "message.created":
                            self.take(frame["data"]["id"], "push")
                            self.last_push = time.monotonic()
                        else:
                            debug(f"{self.who.username} frame {raw[:200]}")
                    code = ws.protocol.close_code
            except ConnectionClosed as e:
                code = e.rcvd.code if e.rcvd else "no close frame"
            except InvalidStatus as e:
                # Refused while opening (e.g. 503 from an instance that is draining).
                code = f"refused {e.response.status_code}"
            except (OSError, asyncio.TimeoutError) as e:
                code = type(e).__name__
            if stop.is_set():
                return
            if was_open:
                # How long the socket stayed open without a push before the server closed it.
                silence = time.monotonic() - (self.last_push or time.monotonic())
                F.longest_silence = max(F.longest_silence, silence)
                F.closes[code] = F.closes.get(code, 0) + 1
                debug(f"{self.who.username} closed: {code}, {silence:.1f}s after its last push")
            else:
                F.refusals[code] = F.refusals.get(code, 0) + 1
                debug(f"{self.who.username} could not open: {code}")
            await asyncio.sleep(0.1)


async def post_messages(parts, stop, posted):
    """Company and expert of each project take turns posting, a few messages a second."""
    n = 0
    while not stop.is_set():
        p = parts[n % len(parts)]
        content = f"message {n} from {p.who.username}"
        r = await p.who.acall("POST", f"/api/chat/{p.project}", {"content": content})
        posted.setdefault(p.project, {})[content] = r["id"]
        F.posted += 1
        n += 1
        await asyncio.sleep(0.05)


# --- the checks after the run ---------------------------------------------------------------

def all_messages(who, project):
    ids, before = [], None
    while True:
        q = f"/api/chat/{project}?size=100" + (f"&before_id={before}" if before else "")
        items = who.call("GET", q)["items"]
        if not items:
            return ids
        ids += [(m["id"], m["content"]) for m in items]
        before = min(m["id"] for m in items)


def check_chat(parts, posted):
    problems = []
    for project, sent in posted.items():
        stored = all_messages(next(p.who for p in parts if p.project == project), project)
        contents = [c for _, c in stored]
        for content in sent:
            if contents.count(content) != 1:
                problems.append(f"project {project}: {content!r} stored {contents.count(content)} times")
        ids = {i for i, _ in stored}
        for p in parts:
            if p.project == project and set(p.seen) != ids:
                missing = sorted(ids - set(p.seen))
                problems.append(f"{p.who.username} lacks {len(missing)} messages {missing[:10]}")
    return problems


def check_ledger(args, deals, scoped=False):
    """Every payment in the database equals the sandbox's ledger: captured once in full, one
    transfer of amount − commission to the expert's account, nothing refunded or reversed.
    `scoped` (a seeded database, whose rows the sandbox never saw): the payments of `deals`'
    projects only, and a stranger is a transfer for no payment the database holds."""
    want = sum(len(d["amounts"]) for d in deals)
    where = f"WHERE project_id IN ({', '.join(str(int(d['project'])) for d in deals)}) " if scoped else ""
    until = time.monotonic() + 90
    while True:
        rows = sql(args.db_url, "SELECT id, amount_minor, status, payout_status, processor_payment_intent_id, "
                                f"commission_minor, processor_transfer_id, project_id FROM payments {where}ORDER BY id")
        unapplied = sql(args.db_url, "SELECT COUNT(*) FROM processor_events WHERE processed_at IS NULL")[0][0]
        settled = all(r[2] == "released" and r[3] == "transferred" for r in rows)
        if len(rows) == want and settled and unapplied == "0":
            break
        if time.monotonic() > until:
            return [f"not settled after 90 s: {len(rows)} payments of {want}, {unapplied} processor "
                    f"events unapplied, states {sorted({(r[2], r[3]) for r in rows})}"]
        time.sleep(0.5)
    status, ledger = direct(f"{args.sandbox}/api/sandbox/ledger")
    if status != 200:
        return [f"ledger: {status}"]
    account_of = {str(d["project"]): d["account"] for d in deals}
    intents = {i["id"]: i for i in ledger.get("intents", [])}
    problems = []
    for pid, amount, _, _, intent, commission, transfer, project in rows:
        amount, commission = int(amount), int(commission or 0)
        at = intents.get(intent)
        if not at:
            problems.append(f"payment {pid}: intent {intent} not in the ledger")
            continue
        if (at["captured"], at["captures"], at["refunded"], at["status"]) != (amount, 1, 0, "succeeded"):
            problems.append(f"payment {pid}: ledger intent {at}")
        ts = [t for t in ledger.get("transfers", []) if t["metadata"].get("payment_id") == pid]
        if len(ts) != 1:
            problems.append(f"payment {pid}: {len(ts)} transfers")
            continue
        t = ts[0]
        if (t["amount"] + commission, t["reversed"], t["failed"], t["id"], t["destination"]) != (
                amount, 0, False, transfer, account_of[project]):
            problems.append(f"payment {pid} ({amount}, commission {commission}, {transfer}): transfer {t}")
    ours = {r[0] for r in (sql(args.db_url, "SELECT id FROM payments") if scoped else rows)}
    strangers = [t["id"] for t in ledger.get("transfers", []) if t["metadata"].get("payment_id") not in ours]
    if strangers:
        problems.append(f"transfers the service does not know: {strangers}")
    return problems


# --- the run --------------------------------------------------------------------------------

class Drill:
    """What a run does beyond the rolling restart: nothing, here. deploy/upgrade.py's drill
    runs the new version's migration in `before_restarts` and points the instances at the new
    binary; its database is seeded, so the ledger and the audit are `scoped` to the deals."""

    scoped = False

    async def before_restarts(self, inst):
        pass

    def problems(self, inst):
        return []

    def figures(self):
        """Lines printed after the rolling figures."""
        return []


async def run(args, drill=None):
    drill = drill or Drill()
    started = time.monotonic()
    inst = Instances(args)
    try:
        await inst.start_all()
        admin_name, admin_password = args.admin.split(":", 1)
        token = http_call(args.proxy, "POST", "/api/auth/login",
                          body={"username": admin_name, "password": admin_password})["access_token"]
        admin = Account(args.proxy, 0, admin_name, token)
        tag = uuid.uuid4().hex[:6]
        deals = [await asyncio.to_thread(deal, args, admin, f"r{tag}{i}", amounts)
                 for i, amounts in enumerate(DEALS)]
        setup = time.monotonic() - started

        stop = asyncio.Event()
        parts = [Participant(args, d[who], d["project"]) for d in deals for who in ("company", "expert")]
        for p in parts:
            p.task = asyncio.create_task(p.listen(stop))
        until = time.monotonic() + 30
        while any(p.opened == 0 for p in parts):
            if time.monotonic() > until or any(p.task.done() for p in parts):
                raise Failed("the chat sockets did not open")
            await asyncio.sleep(0.05)
        posted = {}
        poster = asyncio.create_task(post_messages(parts, stop, posted))
        restarting = lambda: F.out_of_rotation
        drivers = [asyncio.create_task(drive(args, d, restarting)) for d in deals]

        # The operator's rolling restarts, each instance in turn, while all of this runs.
        await asyncio.sleep(2)
        await drill.before_restarts(inst)
        for _ in range(args.rounds):
            for name in inst.ports:
                await inst.restart(name)
                await asyncio.sleep(1)
        for t in drivers:
            await t
        await asyncio.sleep(1)
        stop.set()
        await poster
        # Pushes still on their way arrive; then the sockets are closed by us.
        until = time.monotonic() + 10
        while time.monotonic() < until and any(len(p.seen) < len(posted.get(p.project, {})) for p in parts):
            await asyncio.sleep(0.1)
        crashed = [f"{p.who.username}'s socket client stopped: {p.task.exception()!r}"
                   for p in parts if p.task.done() and p.task.exception()]
        for p in parts:
            p.task.cancel()
        await asyncio.gather(*(p.task for p in parts), return_exceptions=True)

        problems = list(F.failures) + crashed
        problems += await asyncio.to_thread(check_chat, parts, posted)
        # Every socket a server closed during the run was opened again (closes after the
        # run are not counted).
        unreconnected = sum(F.closes.values()) - F.reconnects
        if unreconnected > 0:
            problems.append(f"{unreconnected} closed sockets did not reconnect: {F.closes}")
        if F.reconnects < len(parts):
            problems.append(f"only {F.reconnects} reconnects for {len(parts)} sockets: the restarts missed them")
        if F.during_restarts == 0 or F.deal_steps_during_restarts == 0:
            problems.append("no request or deal step while an instance was out of rotation")
        problems += await asyncio.to_thread(check_ledger, args, deals, drill.scoped)
        audit = await asyncio.to_thread(admin.call, "GET", "/api/admin/payments/audit")
        mismatches = audit.get("mismatches")
        if drill.scoped and mismatches:
            projects = {int(d["project"]) for d in deals}
            mismatches = [m for m in mismatches if int(m.get("project_id") or 0) in projects]
        if mismatches:
            problems.append(f"the money audit: {mismatches}")
        problems += drill.problems(inst)

        payments = sum(len(d["amounts"]) for d in deals)
        print(f"setup {setup:.1f}s; restarts took {', '.join(f'{t:.1f}s' for t in F.restart_times)}; "
              f"socket closes {F.closes}, failed opens {F.refusals or 'none'}; retried: {sorted(set(F.retried)) or 'none'}; "
              f"longest request {F.max_latency_what}")
        print(f"requests {F.requests} ({F.during_restarts} while an instance was out of rotation), "
              f"retries {F.retries}, failed {len(F.failures)}, restarts {F.restarts}, "
              f"reconnects {F.reconnects} of {len(parts)} sockets (longest silence before a close "
              f"{F.longest_silence:.1f}s), messages {F.posted} "
              f"(seen {F.by_push} by push, {F.by_catch_up} by catch-up, {F.pushed_twice} pushed twice), "
              f"payments {payments} checked against the ledger, deal steps during restarts "
              f"{F.deal_steps_during_restarts}, max latency {F.max_latency * 1000:.0f} ms, "
              f"total {time.monotonic() - started:.1f}s")
        for line in drill.figures():
            print(line)
        if problems:
            print("FAILED:\n  " + "\n  ".join(problems))
            return 1
        return 0
    finally:
        inst.stop_all()


def arguments(a):
    """The drive's options (deploy/upgrade.py adds its own)."""
    a.add_argument("--bin", required=True)
    a.add_argument("--env-file", required=True, help="the instances' settings, NAME=value lines")
    a.add_argument("--instance", action="append", required=True, help="name:port, as in haproxy.cfg")
    a.add_argument("--haproxy-socket", required=True)
    a.add_argument("--proxy", required=True, help="HAProxy's frontend, http://127.0.0.1:PORT")
    a.add_argument("--sandbox", required=True, help="the processor sandbox, http://127.0.0.1:PORT")
    a.add_argument("--db-url", required=True)
    a.add_argument("--admin", required=True, help="username:password of an administrator")
    a.add_argument("--workdir", required=True)
    a.add_argument("--pids", required=True, help="file to keep the running instances' ids in")
    a.add_argument("--rounds", type=int, default=1, help="restarts of each instance")
    return a


def main():
    args = arguments(argparse.ArgumentParser(description=__doc__.split("\n")[0])).parse_args()
    try:
        sys.exit(asyncio.run(run(args)))
    except Failed as e:
        print(f"FAILED: {e}")
        print(f"after {F.requests} requests, {F.restarts} restarts; failures: {F.failures}")
        sys.exit(1)


if __name__ == "__main__":
    main()
