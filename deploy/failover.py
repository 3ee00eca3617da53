#!/usr/bin/env python3
"""The failover drill: the PostgreSQL primary killed under load, the synchronous replica promoted
by Patroni, the service back on it through HAProxy.

It brings up a cluster of its own, never the shared one: an etcd member (its own ports, its data in
the workdir), two Patroni nodes with deploy/patroni/patroni.yml.in (node1, node2: PostgreSQL on
free ports, run as the postgres user, data directories of their own), HAProxy with
deploy/patroni/haproxy.cfg in front (Patroni's `OPTIONS /primary` health check), a Redis and the
processor sandbox (deploy/faults.py's), then the release binary (`marketplace migrate`, then
`serve`) with DATABASE_URL naming HAProxy. It waits until node1 leads and node2 streams as its
synchronous standby (Patroni's /cluster and the primary's pg_stat_replication agree), sets up an
escrow deal through the API and runs clients that send a steady mix of reads, writes (chat
messages, a profile), a money step (a milestone, funded at the processor) and writes carrying an
Idempotency-Key of their own:

  baseline; the kill: SIGKILL at once to the leader's Patroni, its postmaster and every PostgreSQL
  process of that node (a machine dying: no shutdown, no demotion, no handing over); the switch,
  until every kind of request succeeds again; after.

No failover is made here: the drill only kills, then watches Patroni promote the replica. It checks
that the old primary's processes are gone and its ports refuse connections (a drill that passes
without the primary dying proves nothing), that the other node is promoted (REST `/primary` 200,
`pg_is_in_recovery()` false on its own port, a new timeline) and that HAProxy sends the service
there. It counts per phase requests, ok (2xx or an expected answer), refused (503 with
Retry-After), failed (any other 5xx, a 503 without Retry-After, an unexpected 4xx, a connection
error, a timeout), and the seconds from the kill until each kind of request succeeds again. Then:
every write the service acknowledged (2xx) is in the promoted primary (synchronous commit: none
lost); each write with an Idempotency-Key that was refused (or went unanswered) during the switch
is sent again with the same key, as a client would (after Retry-After; after 409
IDEMPOTENCY_KEY_IN_USE, until the key's lease ends), answered 2xx, and made exactly one row; the
old primary is started again and rejoins as the synchronous standby (pg_rewind where its WAL went
past the new timeline), and Patroni's /metrics say so.

`--size S|M` seeds the database first with benches/scale/seed.py (S: ~25 s and 300 MB; M: ~3 min
and 1.9 GB), so the failover, the rewind and the rejoin are measured with production-sized data.

Prints a table and PASS/FAIL lines; the figures line last. Exits non-zero when the service breaks
the contract below (the constants), or when the primary did not really die or the replica was not
promoted. Only Python's standard library (and deploy/faults.py's helpers). Runs as root: PostgreSQL
runs as the postgres user. Needs patroni, etcd, haproxy, redis-server and PostgreSQL's server
binaries; exits 77 (skipped) without them.
"""

import argparse
import collections
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faults  # noqa: E402
from faults import Account, Failed, free_port, log, wait_until  # noqa: E402

DEPLOY = os.path.dirname(os.path.abspath(__file__))
PATRONI_TEMPLATE = os.path.join(DEPLOY, "patroni", "patroni.yml.in")
HAPROXY_TEMPLATE = os.path.join(DEPLOY, "patroni", "haproxy.cfg")
SEED = os.path.join(os.path.dirname(DEPLOY), "benches", "scale", "seed.py")


def dcs_timing():
    """ttl, loop_wait and retry_timeout as the template's bootstrap.dcs sets them."""
    text = open(PATRONI_TEMPLATE).read()
    return tuple(int(re.search(rf"^\s+{name}:\s*(\d+)", text, re.M).group(1))
                 for name in ("ttl", "loop_wait", "retry_timeout"))


TTL, LOOP_WAIT, RETRY_TIMEOUT = dcs_timing()

# --- the contract (what the service and the recipe are held to) ------------------------------

BASELINE_SECONDS = 6
# After every kind of request succeeds again, the clients go on this long (and at least this long
# after the new primary is confirmed): what the service does once recovered is counted too.
AFTER_SECONDS = 6
# From the kill until every kind of request succeeds again. The dead leader's key expires at most
# `ttl` after the kill (it was renewed every loop_wait before); the replica, watching the key, wins
# the race and is promoted within a loop (loop_wait; the promotion itself takes well under a
# second); HAProxy's next check of `/primary` (downinter 500 ms, rise 1) sends new connections
# there (1 s with the check's own time); the service's pool connects on its next request and its probe clears within 250 ms
# (1 s). Plus 4 s of margin for a loaded 2-core CI runner: ttl + loop_wait + 6, 18 s with
# ttl 10 / loop_wait 2. Measured 9-11.5 s; 15.4 s once, with rustc builds of other jobs on the
# same 2 cores (the promotion itself took 5 s there).
RECOVERY_BOUND = TTL + LOOP_WAIT + 6
# The old primary's processes are gone this soon after the SIGKILL.
GONE_BOUND = 2.0
# No request, while the primary is away, waits longer than this: the service refuses (503 with
# Retry-After) instead of queueing on a database that is not there (its pool's acquire timeout is
# 2 s; a statement cut by the kill fails at once, the connection being closed).
SWITCH_REQUEST_BOUND = 3.0
# Every request outside the switch finishes within this.
BASELINE_BOUND = 1.0
# A keyed write refused during the switch is sent again with its key until it is answered, for at
# most this long after the switch...
IDEMPOTENT_RETRY_SECONDS = 20.0
# ...or, while the answer is 409 IDEMPOTENCY_KEY_IN_USE, until this long after the kill: a request
# that took its key just before the kill and could not let it go after (the database gone) holds
# it for its lease (domain::idempotency::LEASE, 60 s); then a retry takes it over.
IDEMPOTENCY_LEASE = 60.0
# The old primary, started again, is the synchronous standby within this.
REJOIN_BOUND = 60.0

# Pause between two requests of one client; each kind of request has its own client.
READ_PACE = 0.03
WRITE_PACE = 0.05
MONEY_PACE = 0.1
KEYED_PACE = 0.1
# How often the promotion is watched after the kill.
WATCH_EVERY = 0.05

PG_USER = "postgres"


def debug(text):
    """Progress details on stderr when FAILOVER_DEBUG is set."""
    if os.environ.get("FAILOVER_DEBUG"):
        print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def pg_bin_dir():
    """The newest PostgreSQL server's binaries on this machine."""
    root = "/usr/lib/postgresql"
    versions = sorted((v for v in os.listdir(root) if v.isdigit()), key=int) if os.path.isdir(root) else []
    for v in reversed(versions):
        path = os.path.join(root, v, "bin")
        if os.path.exists(os.path.join(path, "pg_ctl")):
            return path
    return None


# --- processes -------------------------------------------------------------------------------

def proc_state(pid):
    """The state letter of `pid` (R, S, Z, ...), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def alive(pid):
    """Running: there, and not a zombie waiting for a parent to reap it."""
    return proc_state(pid) not in (None, "Z", "X")


class Procs(faults.Children):
    """faults' Children, able to start a process as another user, and keeping in the pids file the
    postmasters too (Patroni's children, not ours), so deploy/check's cleanup stops them should
    the drill die."""

    def __init__(self, pids_file):
        super().__init__(pids_file)
        self.extra = set()

    def start(self, argv, log_path, env=None, cwd=None, user=None):
        as_user = {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []} if user else {}
        with open(log_path, "a") as out:
            proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, **as_user)
        self.procs.append(proc)
        self.note()
        return proc

    def adopt(self, pid):
        if pid:
            self.extra.add(pid)
            self.note()

    def note(self):
        self.extra = {pid for pid in self.extra if alive(pid)}
        with open(self.pids_file, "w") as f:
            f.writelines(f"{p.pid}\n" for p in self.procs if p.poll() is None)
            f.writelines(f"{pid}\n" for pid in sorted(self.extra))


class Etcd:
    """One etcd member of the drill's own: the DCS both Patroni nodes agree through."""

    name = "etcd"

    def __init__(self, procs, workdir):
        self.procs, self.workdir = procs, workdir
        self.port, self.peer_port = free_port(), free_port()
        self.proc = None

    def start(self):
        peer = f"http://127.0.0.1:{self.peer_port}"
        client = f"http://127.0.0.1:{self.port}"
        self.proc = self.procs.start(
            ["etcd", "--name", "drill", "--data-dir", os.path.join(self.workdir, "etcd"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"drill={peer}", "--initial-cluster-state", "new",
             "--initial-cluster-token", f"failover-{secrets.token_hex(4)}"],
            os.path.join(self.workdir, "etcd.log"))

    def answers(self):
        a = faults.send(f"http://127.0.0.1:{self.port}", "GET", "/health", timeout=1)
        return a.status == 200 and isinstance(a.body, dict) and a.body.get("health") == "true"


class Node:
    """A Patroni node (deploy/patroni/patroni.yml.in with its placeholders filled) and the
    PostgreSQL it runs, as the postgres user; its files under `root`, its log in the workdir."""

    def __init__(self, name, procs, root, workdir, scope, etcd, bin_dir, passwords):
        self.name, self.procs, self.scope = name, procs, scope
        self.pg_port, self.api_port = free_port(), free_port()
        self.dir = os.path.join(os.path.realpath(root), name)
        self.data = os.path.join(self.dir, "data")
        self.config = os.path.join(self.dir, "patroni.yml")
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.etcd, self.bin_dir, self.passwords = etcd, bin_dir, passwords
        self.socket_dir = os.path.join(root, "sockets")
        self.proc = None

    def write_config(self):
        values = {"NAME": self.name, "SCOPE": self.scope, "HOST": "127.0.0.1",
                  "PG_PORT": self.pg_port, "API_PORT": self.api_port,
                  "ETCD_HOSTS": f"127.0.0.1:{self.etcd.port}", "DATA_DIR": self.data,
                  "BIN_DIR": self.bin_dir, "SOCKET_DIR": self.socket_dir,
                  "PGPASS": os.path.join(self.dir, "pgpass"), "NETWORK": "127.0.0.1/32",
                  "AUTH_METHOD": "trust", "WATCHDOG_MODE": "off"}
        text = open(PATRONI_TEMPLATE).read()
        for key, value in values.items():
            text = text.replace(f"@{key}@", str(value))
        left = sorted(set(re.findall(r"@[A-Z_]+@", text)))
        if left:
            raise Failed(f"patroni.yml.in: placeholders the drill does not know: {left}")
        os.makedirs(self.dir, exist_ok=True)
        with open(self.config, "w") as f:
            f.write(text)
        postgres = pwd.getpwnam(PG_USER)
        for path in (self.dir, self.config):
            os.chown(path, postgres.pw_uid, postgres.pw_gid)
        os.chmod(self.dir, 0o700)

    def start(self):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.dir, "LANG": "C.UTF-8",
               "PATRONI_SUPERUSER_PASSWORD": self.passwords["superuser"],
               "PATRONI_REPLICATION_PASSWORD": self.passwords["replication"],
               "PATRONI_REWIND_PASSWORD": self.passwords["rewind"]}
        self.proc = self.procs.start(["patroni", self.config], self.log_path, env=env, cwd=self.dir,
                                     user=PG_USER)

    def rest(self, method, path, timeout=1.0):
        return faults.send(f"http://127.0.0.1:{self.api_port}", method, path, timeout=timeout)

    def is_leader(self):
        """Patroni's HAProxy check: `OPTIONS /primary` 200."""
        return self.rest("OPTIONS", "/primary").status == 200

    def sql(self, query, db="postgres", timeout=5):
        """Rows of `query` on this node's own port (not through HAProxy); None when it does not
        answer."""
        try:
            out = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "postgres",
                                  "-d", db, "-AtX", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-c", query],
                                 capture_output=True, text=True, timeout=timeout,
                                 env={**os.environ, "PGCONNECT_TIMEOUT": "2"})
        except subprocess.TimeoutExpired:
            return None
        if out.returncode != 0:
            return None
        return [line.split("\t") for line in out.stdout.splitlines() if line]

    def read_write(self):
        rows = self.sql("SELECT pg_is_in_recovery()", timeout=3)
        return bool(rows) and rows[0][0] == "f"

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline().strip())
        except (OSError, ValueError):
            return None

    def timeline(self):
        a = self.rest("GET", "/patroni")
        return a.body.get("timeline") if isinstance(a.body, dict) else None

    def metrics(self):
        """Patroni's Prometheus metrics (GET /metrics): name -> value, labels dropped."""
        a = self.rest("GET", "/metrics", timeout=2)
        if a.status != 200 or not isinstance(a.body, str):
            return {}
        found = {}
        for line in a.body.splitlines():
            m = re.match(r"^(patroni_\w+)(?:\{[^}]*\})?\s+(\S+)$", line)
            if m:
                found[m.group(1)] = float(m.group(2))
        return found

    def port_open(self, port):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False


class Haproxy:
    """HAProxy with deploy/patroni/haproxy.cfg, its placeholders filled."""

    name = "haproxy"

    def __init__(self, procs, workdir, nodes):
        self.procs, self.workdir, self.nodes = procs, workdir, nodes
        self.port = free_port()
        self.config = os.path.join(workdir, "haproxy-postgres.cfg")
        self.log_path = os.path.join(workdir, "haproxy.log")
        self.proc = None

    def start(self):
        values = {"BIND": f"127.0.0.1:{self.port}"}
        for i, node in enumerate(self.nodes, 1):
            values.update({f"NODE{i}_HOST": "127.0.0.1", f"NODE{i}_PG_PORT": node.pg_port,
                           f"NODE{i}_API_PORT": node.api_port})
        text = open(HAPROXY_TEMPLATE).read()
        for key, value in values.items():
            text = text.replace(f"@{key}@", str(value))
        left = sorted(set(re.findall(r"@[A-Z0-9_]+@", text)))
        if left:
            raise Failed(f"haproxy.cfg: placeholders the drill does not know: {left}")
        with open(self.config, "w") as f:
            f.write(text)
        check = subprocess.run(["haproxy", "-dW", "-c", "-f", self.config], capture_output=True, text=True)
        if check.returncode != 0:
            raise Failed(f"haproxy -c {self.config}: {(check.stdout + check.stderr).strip()[-500:]}")
        self.proc = self.procs.start(["haproxy", "-db", "-f", self.config], self.log_path)

    def routes_to(self):
        """The port of the node HAProxy sends a new connection to, and whether it is read-write."""
        try:
            out = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                                  "-d", "postgres", "-AtX", "-F", "\t", "-c",
                                  "SELECT inet_server_port(), pg_is_in_recovery()"],
                                 capture_output=True, text=True, timeout=5,
                                 env={**os.environ, "PGCONNECT_TIMEOUT": "2"})
        except subprocess.TimeoutExpired:
            return None, None
        if out.returncode != 0 or not out.stdout.strip():
            return None, None
        port, recovery = out.stdout.strip().split("\t")
        return int(port), recovery == "f"

    def events(self):
        """HAProxy's server state lines (`Server postgres/node2 is UP`), as it logged them."""
        try:
            with open(self.log_path, errors="replace") as f:
                return [line.strip() for line in f if re.search(r"Server postgres/\w+ is (UP|DOWN)", line)]
        except OSError:
            return []


# --- the clients -----------------------------------------------------------------------------

Record = collections.namedtuple("Record", "kind start end outcome detail")


class Drill:
    """The clients and what they counted. `world` is what the set-up made."""

    def __init__(self, base, world):
        self.base, self.world = base, world
        self.lock = threading.Lock()
        self.records = []
        self.stop = threading.Event()
        self.t_kill = None
        # Acknowledged writes, checked in the promoted primary afterwards: (id, acknowledged at).
        self.acked_chat = []
        self.acked_milestones = []
        self.acked_payments = []
        self.acked_bio = (0, 0.0)
        # Writes with an Idempotency-Key of their own: dicts (key, content, start, end, first
        # answer, and later the retries).
        self.keyed = []
        self.crashed = []

    def request(self, kind, method, path, who=None, body=None, expected=(), key=None):
        start = time.monotonic()
        if key is None:
            key = method != "GET" and not path.startswith("/api/auth/")
        a = faults.send(self.base, method, path, who and who.token, who and who.csrf, body, key=key)
        end = time.monotonic()
        outcome, detail = faults.classify(a, expected)
        with self.lock:
            self.records.append(Record(kind, start, end, outcome, detail))
        return outcome, a, end

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
        company, expert = world["company"], world["expert"]
        project = world["project"]
        turn = collections.Counter()
        tag = secrets.token_hex(3)

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
            _, a, end = self.request("chat", "POST", f"/api/chat/{project}", who,
                                     {"content": f"drill message {turn['chat']}"})
            if a.status == 201:
                self.acked_chat.append((a.body["id"], end))

        def profile():
            # One writer, values in order: the database must end with the last one acknowledged
            # (or a later one whose answer was lost).
            turn["bio"] += 1
            outcome, a, end = self.request("profile", "PUT", f"/api/profiles/{world['company_profile']}",
                                           company, {"bio": f"drill {turn['bio']}"})
            if outcome == "ok":
                self.acked_bio = (turn["bio"], end)

        unfunded = []

        def money():
            """A milestone (a database write), then its funding: `initiate` creates its payment
            intent at the processor and records the payment."""
            if not unfunded:
                outcome, a, end = self.request("milestone", "POST", "/api/milestones", company,
                                               {"project_id": project, "title": f"Drill {turn['m']}",
                                                "amount": 10})
                turn["m"] += 1
                if outcome == "ok":
                    self.acked_milestones.append((a.body["id"], end))
                    unfunded.append(a.body["id"])
                return
            # 409 PAYMENT_PENDING: an earlier attempt whose answer was lost did fund it.
            outcome, a, end = self.request("fund", "POST", "/api/payments/initiate", company,
                                           {"project_id": project, "milestone_id": unfunded[0]},
                                           expected={(409, "PAYMENT_PENDING")})
            if outcome == "ok":
                if a.status == 201:
                    self.acked_payments.append((a.body["id"], end))
                unfunded.pop()

        def keyed():
            """A chat message with an Idempotency-Key the drill keeps: one refused during the
            switch is sent again with the same key afterwards (`retry_keyed`)."""
            turn["keyed"] += 1
            entry = {"key": f"failover-{tag}-{turn['keyed']}-{uuid.uuid4()}",
                     "content": f"keyed {tag} {turn['keyed']}", "retries": []}
            entry["start"] = time.monotonic()
            _, a, end = self.request("keyed-chat", "POST", f"/api/chat/{project}", expert,
                                     {"content": entry["content"]}, key=entry["key"])
            entry.update(end=end, status=a.status, answer=answer_text(a),
                         id=a.body.get("id") if a.status == 201 and isinstance(a.body, dict) else None)
            self.keyed.append(entry)

        clients = [(me, READ_PACE), (notifications, READ_PACE), (projects, READ_PACE),
                   (one_project, READ_PACE), (chat, WRITE_PACE), (profile, WRITE_PACE),
                   (money, MONEY_PACE), (keyed, KEYED_PACE)]
        threads = [threading.Thread(target=self.run_client, args=c, daemon=True) for c in clients]
        for t in threads:
            t.start()
        return threads


def answer_text(a):
    if a.status is None:
        return a.error
    text = f"{a.status} {a.code}".strip()
    if "retry-after" in a.headers:
        text += f" (Retry-After {a.headers['retry-after']})"
    if a.headers.get("idempotent-replayed") == "true":
        text += " (replayed)"
    return text


def retry_keyed(drill, limit):
    """Sends every keyed write that was not answered 2xx again, with its own key and body, as a
    client would: after a 503 it waits Retry-After; after 409 IDEMPOTENCY_KEY_IN_USE (the first
    attempt took the key, then the database went away before it could let it go: it is held until
    its lease ends) it tries again every 2 s. Stops on a 2xx, or on anything else final (409
    IDEMPOTENCY_KEY_INTERRUPTED: the first attempt committed, then lost its answer), or at the
    deadline: `limit` seconds, or the lease past the kill when a key is held."""
    project, expert = drill.world["project"], drill.world["expert"]
    pending = [e for e in drill.keyed if not (e["status"] is not None and 200 <= e["status"] < 300)]
    deadline = time.monotonic() + limit
    while pending:
        later = []
        for entry in pending:
            a = faults.send(drill.base, "POST", f"/api/chat/{project}", expert.token, expert.csrf,
                            {"content": entry["content"]}, key=entry["key"])
            entry["retries"].append((time.monotonic(), answer_text(a)))
            if a.status is not None and 200 <= a.status < 300:
                entry["retried_id"] = a.body.get("id") if isinstance(a.body, dict) else None
            elif a.status == 409 and a.code == "IDEMPOTENCY_KEY_IN_USE":
                deadline = max(deadline, drill.t_kill + IDEMPOTENCY_LEASE + 5)
                later.append(entry)
            elif a.status is None or a.status >= 500:
                later.append(entry)
        pending = later
        if pending:
            if time.monotonic() > deadline:
                break
            time.sleep(2.0)


# --- the verdict -----------------------------------------------------------------------------

def kind_recovery(records, t_kill, kind):
    """For one kind: (first refusal or failure after the kill, the last one, when it succeeded
    for good: the end of the first success started after the last refusal or failure), in seconds
    after the kill; None where there is none."""
    after = sorted((r for r in records if r.kind == kind and r.end >= t_kill), key=lambda r: r.start)
    bad = [r for r in after if r.outcome != "ok"]
    last_bad_start = bad[-1].start if bad else t_kill
    good = [r.end for r in after if r.outcome == "ok" and r.start >= last_bad_start]
    rel = lambda t: t - t_kill if t is not None else None  # noqa: E731
    return (rel(bad[0].end if bad else None), rel(bad[-1].end if bad else None),
            rel(min(good) if good else None), len(bad))


def check_writes(drill, node):
    """Every acknowledged write is in `node` (the promoted primary, on its own port): missing
    (what, ids), how many were checked, how many of them the old primary acknowledged."""
    problems = []
    checked = old = 0
    for acked, query, what in (
        (drill.acked_chat, "SELECT id FROM chat_messages WHERE id >= {}", "chat messages"),
        (drill.acked_milestones, "SELECT id FROM milestones WHERE id >= {}", "milestones"),
        (drill.acked_payments,
         "SELECT id FROM payments WHERE id >= {} AND processor_payment_intent_id IS NOT NULL", "payments"),
    ):
        if not acked:
            continue
        # Only the drill's own rows (a seeded database holds a million chat messages).
        rows = node.sql(query.format(min(i for i, _ in acked)), db="marketplace", timeout=30)
        if rows is None:
            problems.append(f"{what}: the promoted primary did not answer")
            continue
        present = {int(r[0]) for r in rows}
        lost = [i for i, _ in acked if i not in present]
        if lost:
            problems.append(f"{len(lost)} acknowledged {what} missing: {lost[:10]}")
        checked += len(acked)
        old += sum(1 for _, t in acked if t < drill.t_kill)
    number, at = drill.acked_bio
    if number:
        rows = node.sql(f"SELECT bio FROM profiles WHERE id = {drill.world['company_profile']}", db="marketplace")
        bio = rows[0][0] if rows else None
        if not (bio and bio.startswith("drill ") and int(bio.split()[1]) >= number):
            problems.append(f"the profile holds {bio!r}; 'drill {number}' was acknowledged")
        checked += 1
        old += at < drill.t_kill
    return problems, checked, old


def check_keyed(drill, node):
    """The keyed writes: each answered 2xx (at once, or when sent again with its key) is exactly one
    row; one whose retry was told 409 IDEMPOTENCY_KEY_INTERRUPTED (its first attempt committed, then
    lost its answer) is one row too; none is ever two. Answers the problems, the entries sent again,
    and one refused during the switch and answered 2xx when sent again, to show."""
    rows = node.sql("SELECT content, COUNT(*) FROM chat_messages WHERE content LIKE 'keyed %' GROUP BY content",
                    db="marketplace", timeout=30) or []
    count = {content: int(n) for content, n in rows}
    problems, retried = [], []
    for e in drill.keyed:
        n = e["rows"] = count.get(e["content"], 0)
        ok_first = e["status"] is not None and 200 <= e["status"] < 300
        last = e["retries"][-1][1] if e["retries"] else e["answer"]
        e["final"] = "2xx" if ok_first or e.get("retried_id") is not None else (
            "interrupted" if last.startswith("409 IDEMPOTENCY_KEY_INTERRUPTED") else last)
        if e["final"] in ("2xx", "interrupted") and n != 1:
            problems.append(f"{e['key']}: {e['final']}, {n} rows")
        elif n > 1:
            problems.append(f"{e['key']}: last answer {last}, {n} rows")
        if not ok_first:
            retried.append(e)
    shown = next((e for e in retried if e.get("retried_id") is not None and e["start"] >= drill.t_kill
                  and e["rows"] == 1 and e["status"] == 503), None)
    return problems, retried, shown


def table(rows, header):
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    return ["  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths)))
            for r in [header] + rows]


def log_errors(path, n=10):
    """The service's last error and warning lines, without colours."""
    try:
        with open(path, errors="replace") as f:
            lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in f]
    except OSError:
        return []
    return [line for line in lines if " ERROR " in line or " WARN " in line or "panicked" in line][-n:]


# --- the run ---------------------------------------------------------------------------------

def pg_root_for(workdir):
    """A folder the postgres user can reach and own for the nodes' files: in the workdir when every
    folder above it lets postgres through, else a folder of its own in /tmp."""
    root = os.path.join(workdir, "pg")
    os.makedirs(root, exist_ok=True)
    postgres = pwd.getpwnam(PG_USER)
    os.chown(root, postgres.pw_uid, postgres.pw_gid)
    reach = subprocess.run(["runuser", "-u", PG_USER, "--", "test", "-w", root], capture_output=True)
    if reach.returncode == 0:
        return root, False
    os.rmdir(root)
    root = tempfile.mkdtemp(prefix="failover-pg.", dir="/tmp")
    os.chmod(root, 0o755)
    os.chown(root, postgres.pw_uid, postgres.pw_gid)
    with open(os.path.join(workdir, "pg-root"), "w") as f:
        f.write(root + "\n")
    return root, True


def cluster_ready(leader, standby):
    """`leader` leads and `standby` streams as its synchronous standby: Patroni's /cluster and the
    leader's pg_stat_replication agree."""
    a = leader.rest("GET", "/cluster", timeout=2)
    if not isinstance(a.body, dict):
        return False
    roles = {m["name"]: m.get("role") for m in a.body.get("members", [])}
    if roles.get(leader.name) != "leader" or roles.get(standby.name) != "sync_standby":
        return False
    rows = leader.sql("SELECT application_name, state, sync_state FROM pg_stat_replication")
    return bool(rows) and [standby.name, "streaming", "sync"] in rows


def wait_cluster(leader, standby, limit=90):
    return wait_until(f"{leader.name} leading with {standby.name} as its synchronous standby",
                      lambda: cluster_ready(leader, standby), limit)


class Rejoin(threading.Thread):
    """Watches, from the moment the old primary is started again, for it to be the new primary's
    synchronous standby; `seconds` it took, None until then."""

    def __init__(self, leader, standby, limit):
        super().__init__(daemon=True)
        self.leader, self.standby, self.limit = leader, standby, limit
        self.started, self.seconds = time.monotonic(), None

    def run(self):
        while time.monotonic() < self.started + self.limit:
            if cluster_ready(self.leader, self.standby):
                self.seconds = time.monotonic() - self.started
                return
            time.sleep(0.2)


def pg_processes(node):
    """The node's PostgreSQL processes still running: every process whose working directory is its
    data directory (PostgreSQL's processes all run there), whoever their parent is now."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.readlink(f"/proc/{d}/cwd") == node.data and alive(int(d)):
                    found.append(int(d))
            except OSError:
                continue
    return found


def kill_primary(node):
    """SIGKILL to the node's Patroni and its postmaster, then at once to every PostgreSQL process of
    the node (none can be forked any more): what they were (pids), when."""
    postmaster = node.postmaster_pid()
    if not postmaster or not alive(postmaster):
        raise Failed(f"{node.name}: no running postmaster to kill (postmaster.pid: {postmaster})")
    before = pg_processes(node)
    t = time.monotonic()
    for pid in (node.proc.pid, postmaster):
        os.kill(pid, signal.SIGKILL)
    victims = [node.proc.pid, postmaster]
    for pid in pg_processes(node):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        victims.append(pid)
    victims += [pid for pid in before if pid not in victims]
    return sorted(set(victims), key=victims.index), postmaster, t


def run_drill(args, procs, started):
    bin_dir = pg_bin_dir()
    pg_root, own_root = pg_root_for(args.workdir)
    args.cleanup_dirs += [pg_root] if own_root else [os.path.join(args.workdir, "pg")]
    args.cleanup_dirs.append(os.path.join(args.workdir, "etcd"))
    postgres = pwd.getpwnam(PG_USER)
    sockets = os.path.join(pg_root, "sockets")
    os.makedirs(sockets, exist_ok=True)
    os.chown(sockets, postgres.pw_uid, postgres.pw_gid)

    etcd = Etcd(procs, args.workdir)
    etcd.start()
    wait_until("etcd to answer", etcd.answers, 30)
    scope = f"marketplace-drill-{secrets.token_hex(3)}"
    passwords = {k: secrets.token_hex(12) for k in ("superuser", "replication", "rewind")}
    node1, node2 = (Node(n, procs, pg_root, args.workdir, scope, etcd, bin_dir, passwords)
                    for n in ("node1", "node2"))
    args.nodes = [node1, node2]
    for node in (node1, node2):
        assert 5432 not in (node.pg_port, node.api_port), "never the shared cluster's port"
        node.write_config()
    log(f"etcd on {etcd.port}; Patroni {scope}: node1 pg {node1.pg_port} api {node1.api_port}, "
        f"node2 pg {node2.pg_port} api {node2.api_port}; ttl {TTL} loop_wait {LOOP_WAIT} "
        f"retry_timeout {RETRY_TIMEOUT}")
    # node1 initialises the cluster; node2, started once node1 leads, is cloned from it.
    node1.start()
    wait_until("node1 to initialise the cluster and lead", lambda: node1.is_leader() and node1.read_write(), 90)
    node2.start()
    t_sync = wait_cluster(node1, node2)
    for node in (node1, node2):
        procs.adopt(node.postmaster_pid())
    log(f"node1 leads, node2 is its synchronous standby ({t_sync - started:.1f}s since start)")

    haproxy = Haproxy(procs, args.workdir, [node1, node2])
    haproxy.start()
    # HAProxy counts every server up when it starts, until `fall` checks say otherwise: the
    # replica is only out of rotation once it has been marked down.
    wait_until("HAProxy to mark node2 down and send connections to node1",
               lambda: any("postgres/node2 is DOWN" in e for e in haproxy.events())
               and haproxy.routes_to() == (node1.pg_port, True), 30)
    for statement in ("CREATE ROLE marketplace LOGIN", "CREATE DATABASE marketplace OWNER marketplace"):
        subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", str(haproxy.port), "-U", "postgres", "-d", "postgres", "-qX",
             "-v", "ON_ERROR_STOP=1", "-c", statement], check=True, capture_output=True, text=True)
    db_url = f"postgres://marketplace@127.0.0.1:{haproxy.port}/marketplace"
    admin_db_url = f"postgres://postgres@127.0.0.1:{haproxy.port}/marketplace"

    redis = faults.Redis(procs, args.workdir)
    redis.start()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    sandbox = faults.Sandbox(procs, args.workdir, args.bin, f"{base}/api/payments/webhooks/processor")
    sandbox.start()
    for dep in (redis, sandbox):
        wait_until(f"{dep.name} to answer", dep.answers, 30)
    data = os.path.join(args.workdir, "service")
    os.makedirs(data, exist_ok=True)
    env = faults.service_env(port, data, db_url, redis, sandbox, "failover:")
    subprocess.run([args.bin, "migrate"], env=env, cwd=data, check=True, capture_output=True, text=True)
    seeded = ""
    if args.size:
        t0 = time.monotonic()
        seed = subprocess.run([sys.executable, SEED, "--size", args.size, "--database-url", admin_db_url,
                               "--binary", args.bin, "--data-dir", os.path.join(args.workdir, "seed")],
                              capture_output=True, text=True)
        if seed.returncode != 0:
            raise Failed(f"seed.py --size {args.size}: {(seed.stdout + seed.stderr).strip()[-800:]}")
        size = node1.sql("SELECT (SELECT COUNT(*) FROM users) || ' users, ' || (SELECT COUNT(*) FROM "
                         "chat_messages) || ' chat messages, ' || pg_size_pretty(pg_database_size('marketplace'))",
                         db="marketplace")
        seeded = f"seeded {args.size} in {time.monotonic() - t0:.0f}s ({size[0][0] if size else '?'})"
        log(seeded)
    admin_password = "Aa1!" + secrets.token_hex(8)
    subprocess.run([args.bin, "create-admin", "--email", "failoveradmin@example.com", "--username",
                    "failoveradmin", "--password", admin_password],
                   env=env, cwd=data, check=True, capture_output=True, text=True)
    service = procs.start([args.bin, "serve"], os.path.join(args.workdir, "service.log"), env=env, cwd=data)
    args.service = service
    wait_until("the service to be ready", lambda: faults.send(base, "GET", "/ready").status == 200, 60)
    log(f"service on {base} through HAProxy {haproxy.port}; Redis on {redis.port}, sandbox on {sandbox.port}")

    token = faults.api(base, "POST", "/api/auth/login",
                       body={"username": "failoveradmin", "password": admin_password})["access_token"]
    admin = Account(0, "failoveradmin", "failoveradmin@example.com", token)
    world = faults.set_up(base, db_url, sandbox, admin, 1)
    t_setup = time.monotonic()
    log(f"set up in {t_setup - started:.1f}s: an escrow deal")

    # --- baseline -----------------------------------------------------------------------------
    drill = Drill(base, world)
    t0 = time.monotonic()
    log("phase baseline")
    threads = drill.start_clients()
    time.sleep(BASELINE_SECONDS)
    checks = []

    def check(ok, text):
        checks.append((bool(ok), text))

    # Right before the kill: the service writes to node1, and node2 is its synchronous standby.
    routed = haproxy.routes_to()
    sync_rows = node1.sql("SELECT application_name, state, sync_state FROM pg_stat_replication") or []
    sync_names = (node1.sql("SHOW synchronous_standby_names") or [[""]])[0][0]
    check(routed == (node1.pg_port, True) and [node2.name, "streaming", "sync"] in sync_rows,
          f"before the kill: HAProxy sends connections to node1 (read-write), node2 streams as its "
          f"synchronous standby (synchronous_standby_names {sync_names}; pg_stat_replication {sync_rows})")
    timeline_before = node1.timeline()

    # --- the kill -------------------------------------------------------------------------------
    victims, old_postmaster, t_kill = kill_primary(node1)
    drill.t_kill = t_kill
    log(f"phase switch: SIGKILL to node1's Patroni {node1.proc.pid}, postmaster {old_postmaster} and "
        f"{len(victims) - 2} more PostgreSQL processes")
    node1.proc.wait()
    t_gone = wait_until("node1's processes to be gone",
                        lambda: not any(alive(p) for p in victims) and not pg_processes(node1), 10)
    procs.note()
    gone_after = t_gone - t_kill
    ports_closed = not node1.port_open(node1.pg_port) and not node1.port_open(node1.api_port)
    check(gone_after <= GONE_BOUND and ports_closed,
          f"the old primary really died: its {len(victims)} processes (Patroni, postmaster "
          f"{old_postmaster}, every process in its data directory) gone {gone_after * 1000:.0f} ms after "
          f"the SIGKILL, its PostgreSQL and REST ports refuse connections")

    # Patroni promotes node2: watched from outside, nothing done to it.
    t_api = t_rw = None
    until = t_kill + RECOVERY_BOUND + 20
    while time.monotonic() < until and t_rw is None:
        if t_api is None and node2.is_leader():
            t_api = time.monotonic()
        if t_api is not None and node2.read_write():
            t_rw = time.monotonic()
        time.sleep(WATCH_EVERY)
    promoted = t_rw is not None
    if promoted:
        log(f"  node2 promoted: /primary 200 after {t_api - t_kill:.2f}s, read-write after {t_rw - t_kill:.2f}s")
    else:
        log("  node2 was not promoted")
    # The clients go on until every kind has succeeded again (or the bound is well past), then
    # AFTER_SECONDS more.
    kinds = sorted({r.kind for r in drill.records if r.end < t_kill and r.outcome == "ok"})

    def recovered():
        with drill.lock:
            records = list(drill.records)
        marks = [kind_recovery(records, t_kill, k)[2] for k in kinds]
        return None if None in marks else max(marks)

    limit = t_kill + RECOVERY_BOUND + 10
    while time.monotonic() < limit:
        back = recovered()
        if back is not None and time.monotonic() > t_kill + back + 1:
            break
        time.sleep(0.2)
    time.sleep(AFTER_SECONDS)
    drill.stop.set()
    for t in threads:
        t.join(faults.CLIENT_TIMEOUT + 5)
    t_end = time.monotonic()
    service_alive = service.poll() is None
    routed_after = haproxy.routes_to()
    timeline_after = node2.timeline()
    check(promoted and t_rw - t_kill <= RECOVERY_BOUND and routed_after == (node2.pg_port, True)
          and timeline_after and timeline_before and timeline_after > timeline_before,
          f"node2 was promoted by Patroni within {RECOVERY_BOUND} s: " + (
              f"/primary 200 after {t_api - t_kill:.2f} s, read-write after {t_rw - t_kill:.2f} s, "
              f"timeline {timeline_before} -> {timeline_after}, HAProxy sends connections to it"
              if promoted else f"not promoted (HAProxy routes to {routed_after})"))

    # --- the old primary rejoins (in the background), Idempotency-Key retries, the writes --------
    log("starting node1 again: it must rejoin as node2's synchronous standby")
    log_offset = os.path.getsize(node1.log_path)
    node1.start()
    rejoin = Rejoin(node2, node1, REJOIN_BOUND)
    rejoin.start()
    log("sending the keyed writes refused during the switch again, with their keys")
    retry_keyed(drill, IDEMPOTENT_RETRY_SECONDS)
    problems, writes, by_old = check_writes(drill, node2)
    check(not problems, f"all {writes} acknowledged writes are in the promoted primary ({by_old} of them "
          f"acknowledged by the old primary before it died)" + ("; " + "; ".join(problems) if problems else ""))
    keyed_problems, retried, shown = check_keyed(drill, node2)
    finals = collections.Counter(e["final"] for e in retried)
    held = [e for e in retried if any("IDEMPOTENCY_KEY_IN_USE" in ans for _, ans in e["retries"])]
    unsettled = [e for e in retried if e["final"] not in ("2xx", "interrupted")]
    check(not keyed_problems and shown is not None and not unsettled,
          f"Idempotency-Key: {len(retried)} keyed writes refused or unanswered during the switch, sent "
          f"again with their keys: {finals['2xx']} answered 2xx"
          + (f", {finals['interrupted']} 409 IDEMPOTENCY_KEY_INTERRUPTED (committed before the kill, "
             f"answer lost)" if finals["interrupted"] else "")
          + f", each exactly one row; {len(drill.keyed) - len(retried)} answered 2xx at once, one row each"
          + ("; " + "; ".join(keyed_problems[:5]) if keyed_problems else "")
          + ("" if shown else "; none refused during the switch and answered 2xx when sent again")
          + ("; never settled: " + faults.tally(e["final"] for e in unsettled) if unsettled else "")
          + (f"; {len(held)} held its key past the switch (409 IDEMPOTENCY_KEY_IN_USE until "
             f"{max(t for e in held for t, ans in e['retries'] if 'IN_USE' in ans) - t_kill:.0f} s after the kill)"
             if held else ""))
    with open(os.path.join(args.workdir, "keyed.tsv"), "w") as f:
        for e in drill.keyed:
            f.write(f"{e['key']}\t{e['start'] - t_kill:.3f}\t{e['answer']}\t"
                    + "; ".join(f"{t - t_kill:.1f} {ans}" for t, ans in e["retries"]) + f"\t{e['rows']}\n")

    rejoin.join(max(0.0, rejoin.started + REJOIN_BOUND + 5 - time.monotonic()))
    rejoined = rejoin.seconds
    procs.adopt(node1.postmaster_pid())
    with open(node1.log_path, errors="replace") as f:
        f.seek(log_offset)
        rewound = "pg_rewind exit code=0" in f.read()
    check(rejoined is not None, f"the old primary rejoined as the synchronous standby within {REJOIN_BOUND:g} s"
          + (f" ({rejoined:.1f} s" + (", rewound with pg_rewind)" if rewound else ")") if rejoined else ""))
    # What monitoring sees: Patroni's /metrics on each node (a node's own view of the cluster is
    # refreshed once per loop: given two loops to agree).
    until = time.monotonic() + 2 * LOOP_WAIT + 2
    while True:
        m1, m2 = node1.metrics(), node2.metrics()
        want = {"node2": (m2, {"patroni_primary": 1, "patroni_replica": 0, "patroni_postgres_running": 1}),
                "node1": (m1, {"patroni_primary": 0, "patroni_replica": 1, "patroni_sync_standby": 1})}
        wrong = [f"{name} {metric}={got.get(metric)}" for name, (got, exp) in want.items()
                 for metric, value in exp.items() if got.get(metric) != value]
        if not wrong or time.monotonic() > until:
            break
        time.sleep(0.5)
    lag = m2.get("patroni_xlog_location", 0) - m1.get("patroni_xlog_replayed_location", 0)
    check(not wrong, "Patroni's /metrics agree: node2 patroni_primary 1, node1 patroni_replica 1 and "
          f"patroni_sync_standby 1 (replay lag {lag:.0f} bytes)" + (f"; but {wrong}" if wrong else ""))

    # --- the tables -------------------------------------------------------------------------------
    records = drill.records
    all_kinds = sorted({r.kind for r in records})
    never = [k for k in all_kinds if k not in kinds]
    check(not never, "baseline: every kind of request succeeded before the kill" + (
        f" but {never}" if never else f" ({len(kinds)} kinds)"))
    per_kind = {k: kind_recovery(records, t_kill, k) for k in kinds}
    marks = [v[2] for v in per_kind.values()]
    back_all = None if None in marks else max(marks)
    t_back = t_kill + back_all if back_all is not None else t_end
    write_kinds = ("chat", "profile", "milestone", "fund", "keyed-chat")
    first_write = min((r.end - t_kill for r in records
                       if r.start >= t_kill and r.outcome == "ok" and r.kind in write_kinds), default=None)
    phases = [("baseline", t0, t_kill), ("switch", t_kill, t_back), ("after", t_back, t_end)]
    rows = []
    for name, a, b in phases:
        recs = [r for r in records if a <= r.end < b or (name == "after" and r.end >= b)]
        by = collections.Counter(r.outcome for r in recs)
        slowest = max((r.end - r.start for r in recs), default=0.0)
        rows.append((name, f"{max(b - a, 0):.1f}", len(recs), by["ok"], by["refused"], by["failed"],
                     f"{slowest * 1000:.0f}"))
        failed = [r for r in recs if r.outcome == "failed"]
        check(not failed, f"{name}: no failed request" + (
            f"; {len(failed)} failed: " + faults.tally(f"{r.kind} {r.detail}" for r in failed) if failed else ""))
        bound = SWITCH_REQUEST_BOUND if name == "switch" else BASELINE_BOUND
        over = [r for r in recs if r.end - r.start > bound]
        check(not over, f"{name}: every request within {bound * 1000:.0f} ms" + (
            f"; {len(over)} slower (slowest {slowest * 1000:.0f} ms: " + faults.tally(r.kind for r in over) + ")"
            if over else ""))
    check(back_all is not None and back_all <= RECOVERY_BOUND,
          f"every kind of request succeeded again within {RECOVERY_BOUND} s of the kill (ttl {TTL} + "
          f"loop_wait {LOOP_WAIT} + 6)" + (f": {back_all:.2f} s" if back_all is not None else
                                            f"; never: {[k for k, v in per_kind.items() if v[2] is None]}"))
    check(not drill.crashed, "the drill's clients ran to the end" + (f"; crashed: {drill.crashed}"
                                                                    if drill.crashed else ""))
    check(service_alive, "the service ran through the failover" + ("" if service_alive else ": it exited"))

    lines = table(rows, ("phase", "seconds", "requests", "ok", "refused", "failed", "slowest ms"))
    lines.append("switch: from the kill until every kind of request had succeeded again")
    lines.append("")
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    kind_rows = [(k, v[3], fmt(v[0]), fmt(v[1]), fmt(v[2])) for k, v in per_kind.items()]
    lines += table(kind_rows, ("kind", "refused", "first refused s", "last refused s", "2xx again s"))
    lines.append("seconds after the kill; '2xx again': the first success after the last refusal")
    lines.append("")
    if shown:
        first = shown["answer"]
        retry_at, retry_answer = shown["retries"][-1]
        lines.append(f"Idempotency-Key {shown['key']}: POST /api/chat/{world['project']} sent "
                     f"{shown['start'] - t_kill:.2f} s after the kill -> {first}; sent again with the same "
                     f"key {retry_at - t_kill:.2f} s after the kill -> {retry_answer}, message "
                     f"{shown['retried_id']}; {shown['rows']} row with its content in the promoted primary")
    for line in haproxy.events():
        event = re.sub(r"^.*?(Server postgres/)", r"\1", line)
        lines.append(f"haproxy: {event[:110]}")
    lines.append("")
    lines += [("PASS " if ok else "FAIL ") + text for ok, text in checks]
    print("\n".join(lines))

    switch = next(r for r in rows if r[0] == "switch")
    total = time.monotonic() - started
    figures = (f"failover: {switch[2]} requests during the switch ({switch[4]} refused, {switch[5]} failed), "
               f"{fmt(back_all)} s from the kill to every kind 2xx (bound {RECOVERY_BOUND} s; first write 2xx "
               f"{fmt(first_write)} s; node2 read-write {fmt(t_rw - t_kill if promoted else None)} s), "
               f"{writes} acknowledged writes present ({by_old} by the old primary), "
               f"{finals['2xx']}/{len(retried)} keyed writes 2xx when sent again with their key, one row each, "
               f"old primary pids gone in {gone_after * 1000:.0f} ms, promoted {node2.name if promoted else 'none'}, "
               f"rejoined {fmt(rejoined)} s, ttl {TTL}/loop_wait {LOOP_WAIT}/retry_timeout {RETRY_TIMEOUT}, "
               + (f"{seeded}, " if seeded else "")
               + f"{sum(1 for ok, _ in checks if not ok)} of {len(checks)} checks failed, total {total:.0f}s")
    print(figures)
    with open(args.figures, "w") as f:
        f.write("\n".join(lines[:len(rows) + 1] + [figures]) + "\n")
    with open(os.path.join(args.workdir, "requests.tsv"), "w") as f:
        for r in sorted(records, key=lambda r: r.start):
            f.write(f"{r.kind}\t{r.start - t_kill:.3f}\t{(r.end - r.start) * 1000:.0f}\t{r.outcome}\t{r.detail}\n")
    passed = all(ok for ok, _ in checks)
    if not passed:
        print(f"--- the service's last errors and warnings ({args.workdir}/service.log; every request in "
              f"requests.tsv, seconds after the kill)")
        print("".join(log_errors(os.path.join(args.workdir, "service.log"))), end="")
    return 0 if passed else 1


def stop_everything(args, procs):
    """The service first, then the Patroni nodes (each stops its PostgreSQL), then the rest; the
    nodes' data and etcd's removed (the logs stay in the workdir)."""
    t = time.monotonic()
    service = getattr(args, "service", None)
    if service is not None:
        procs.kill(service, signal.SIGTERM)
    debug(f"service stopped in {time.monotonic() - t:.1f}s")
    patronis = [p for p in procs.procs if p.args and "patroni" in str(p.args[0])]
    for p in patronis:
        if p.poll() is None:
            p.terminate()
    for p in patronis:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    debug(f"patroni stopped in {time.monotonic() - t:.1f}s")
    # Postmasters left behind by a Patroni that could not stop them.
    for pid in list(procs.extra):
        if alive(pid):
            try:
                os.kill(pid, signal.SIGQUIT)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in procs.extra) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in procs.extra:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    procs.stop_all()
    debug(f"all stopped in {time.monotonic() - t:.1f}s")
    # PostgreSQL's own logs, kept beside Patroni's before the data goes.
    for node in getattr(args, "nodes", []):
        logs = os.path.join(node.data, "log")
        if os.path.isdir(logs):
            with open(os.path.join(args.workdir, f"{node.name}-postgresql.log"), "w") as out:
                for name in sorted(os.listdir(logs)):
                    with open(os.path.join(logs, name), errors="replace") as f:
                        shutil.copyfileobj(f, out)
    for path in getattr(args, "cleanup_dirs", []):
        shutil.rmtree(path, ignore_errors=True)


def missing_tools():
    missing = [t for t in ("patroni", "etcd", "haproxy", "redis-server", "psql", "runuser") if not shutil.which(t)]
    if not pg_bin_dir():
        missing.append("PostgreSQL's server (/usr/lib/postgresql/*/bin)")
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        missing.append("the postgres user")
    return missing


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--bin", required=True, help="the release binary")
    a.add_argument("--workdir", help="logs and data (default: a new temporary folder)")
    a.add_argument("--pids", help="file to keep the running children's ids in (default: in workdir)")
    a.add_argument("--figures", help="file for the table and the figures line (default: in workdir)")
    a.add_argument("--size", choices=("S", "M"),
                   help="seed the database first with benches/scale/seed.py at this size")
    args = a.parse_args()
    missing = missing_tools()
    if missing:
        print(f"needs {', '.join(missing)}")
        sys.exit(77)
    if os.geteuid() != 0:
        print("needs root: PostgreSQL runs as the postgres user")
        sys.exit(77)
    if not os.access(args.bin, os.X_OK):
        print(f"FAILED: no binary at {args.bin}")
        sys.exit(1)
    if not args.workdir:
        args.workdir = tempfile.mkdtemp(prefix="failover.")
        # The postgres user keeps the nodes' data in it.
        os.chmod(args.workdir, 0o755)
    args.workdir = os.path.abspath(args.workdir)
    os.makedirs(args.workdir, exist_ok=True)
    args.pids = args.pids or os.path.join(args.workdir, "pids")
    args.figures = args.figures or os.path.join(args.workdir, "figures")
    args.cleanup_dirs = []
    # SIGTERM (deploy/check's cleanup, CI's timeout) unwinds through the `finally` that stops the
    # children and removes the clusters' data.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    procs = Procs(args.pids)
    rc = 1
    try:
        rc = run_drill(args, procs, started)
    except Failed as e:
        print(f"FAILED: {e}")
    except subprocess.CalledProcessError as e:
        print(f"FAILED: {' '.join(map(str, e.cmd))}: exit {e.returncode}: {(e.stderr or '').strip()[-500:]}")
    finally:
        # A second SIGTERM must not cut the cleanup short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop_everything(args, procs)
        log(f"stopped; logs in {args.workdir}")
    sys.exit(rc)


if __name__ == "__main__":
    main()
