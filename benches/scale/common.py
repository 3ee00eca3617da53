"""Shared helpers of seed.py and bench.py: database access through `psql` / `sqlite3`, and
starting the service binary on a database. Standard library only."""

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

try:
    # A newer SQLite than the interpreter's where installed (`pip install pysqlite3-binary`):
    # seeding needs FTS5's trigram tokenizer with its options (SQLite 3.45 or later).
    import pysqlite3 as sqlite3
except ImportError:
    import sqlite3

HERE = os.path.dirname(os.path.abspath(__file__))
PASSWORD = "Scale-Bench-2026!"
RELEASE_BIN = "/work/main/target/release/marketplace"
DEBUG_BIN = "/work/main/target/debug/marketplace"


def find_binary(explicit=None):
    """The service binary: an explicit path, else the release build, else the debug one."""
    for path in ([explicit] if explicit else []) + [RELEASE_BIN, DEBUG_BIN]:
        if path and os.path.exists(path) and os.access(path, os.X_OK):
            return path
    raise SystemExit("no service binary (looked for %s and %s)" % (RELEASE_BIN, DEBUG_BIN))


def engine_of(url):
    if url.startswith("postgres://") or url.startswith("postgresql://"):
        return "postgres"
    if url.startswith("sqlite:"):
        return "sqlite"
    raise SystemExit("unsupported database URL: %s" % url)


def sqlite_path(url):
    """`sqlite://<path>` or `sqlite:<path>` to a file path (query string dropped)."""
    rest = url[len("sqlite:"):]
    if rest.startswith("//"):
        rest = rest[2:]
    return rest.split("?", 1)[0]


def pg_dbname(url):
    return urllib.parse.urlparse(url).path.lstrip("/")


def pg_admin_url(url, dbname="postgres"):
    u = urllib.parse.urlparse(url)
    return urllib.parse.urlunparse(u._replace(path="/" + dbname))


class Db:
    """A tiny query interface over either engine (psql for PostgreSQL)."""

    def __init__(self, url):
        self.url = url
        self.engine = engine_of(url)
        self.conn = None
        if self.engine == "sqlite":
            self.conn = sqlite3.connect(sqlite_path(url), isolation_level=None)

    def rows(self, sql):
        """Rows as lists of strings (PostgreSQL) or native values (SQLite)."""
        if self.engine == "sqlite":
            return [list(r) for r in self.conn.execute(sql).fetchall()]
        out = subprocess.run(
            ["psql", self.url, "-X", "-q", "-A", "-t", "-F", "\x1f", "-v", "ON_ERROR_STOP=1",
             "-c", sql],
            check=True, capture_output=True, text=True).stdout
        return [line.split("\x1f") for line in out.splitlines() if line != ""]

    def value(self, sql):
        r = self.rows(sql)
        return r[0][0] if r else None

    def execute(self, sql):
        if self.engine == "sqlite":
            self.conn.executescript(sql)
        else:
            subprocess.run(["psql", self.url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql],
                           check=True, capture_output=True, text=True)

    def run_file(self, path, then=()):
        """Run an SQL file, then the statements `then`, one statement at a time, printing each
        one's first line and how long it took (a bulk load's rebuild is most of its time)."""
        with open(path) as f:
            statements = split_statements(f.read()) + [(sql, sql) for sql in then]
        if self.engine == "sqlite":
            for label, sql in statements:
                t0 = time.perf_counter()
                self.conn.execute(sql)
                print("    %8.1f s  %s" % (time.perf_counter() - t0, label), flush=True)
            return
        # One psql session (the file's SETs hold for what follows), its timings beside labels.
        script = "\\timing on\n" + "".join(
            "\\echo '    %s'\n%s;\n" % (label.replace("'", ""), sql) for label, sql in statements)
        subprocess.run(["psql", self.url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"],
                       input=script, text=True, check=True)


def split_statements(text):
    """The statements of an SQL file whose statements end with `;` at the end of a line, each
    labelled by its first line and the comment before it."""
    out, cur, note = [], [], ""
    for line in text.splitlines():
        if not cur and line.lstrip().startswith("--"):
            if not note:
                note = line.strip(" -")
            continue
        if not cur and not line.strip():
            continue
        cur.append(line)
        if line.rstrip().endswith(";"):
            out.append(("%s  [%s]" % (cur[0].strip()[:44], note[:48]),
                        "\n".join(cur).rstrip().rstrip(";")))
            cur, note = [], ""
    return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http(method, url, body=None, token=None, timeout=30.0):
    """(status, parsed JSON or text, seconds). Never raises for HTTP errors; a timeout or a
    connection failure gives status 'timeout' / 'error'."""
    data = None
    headers = {"Accept": "application/json"}
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = "Bearer " + token
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as e:
        raw = e.read()
        status = e.code
    except (TimeoutError, socket.timeout):
        return "timeout", None, time.perf_counter() - t0
    except urllib.error.URLError as e:
        if isinstance(e.reason, (TimeoutError, socket.timeout)):
            return "timeout", None, time.perf_counter() - t0
        return "error", str(e.reason), time.perf_counter() - t0
    dt = time.perf_counter() - t0
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode(errors="replace")
    return status, parsed, dt


class Service:
    """The marketplace binary on one database, on a free loopback port."""

    def __init__(self, binary, database_url, data_dir, redis_url=None, extra_env=None,
                 log_path=None):
        self.binary = binary
        self.port = free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        os.makedirs(data_dir, exist_ok=True)
        env = dict(os.environ)
        env.update({
            "DATABASE_URL": database_url,
            "DATA_DIR": data_dir,
            "BIND_ADDR": "127.0.0.1:%d" % self.port,
            "APP_ENV": "development",
            "RATE_LIMIT_PER_MINUTE": "0",
            "LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER": "1000000",
            "LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_IP": "1000000",
            "CHAT_MESSAGES_PER_MINUTE": "1000000",
            "LOG_FORMAT": "json",
            "RUST_LOG": "warn",
        })
        env.pop("REDIS_URL", None)
        if redis_url:
            env["REDIS_URL"] = redis_url
        env.update(extra_env or {})
        self.log_path = log_path or os.path.join(data_dir, "service.log")
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([binary], env=env, stdout=self.log, stderr=self.log,
                                     cwd=data_dir)

    def wait_ready(self, timeout=600):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("service exited with %s; see %s" % (self.proc.returncode,
                                                                      self.log_path))
            status, _, _ = http("GET", self.base + "/ready", timeout=5)
            if status == 200:
                return
            time.sleep(0.5)
        raise SystemExit("service not ready after %ss; see %s" % (timeout, self.log_path))

    def rss_kib(self):
        try:
            with open("/proc/%d/status" % self.proc.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def login(base, username, password=PASSWORD):
    status, body, _ = http("POST", base + "/api/auth/login",
                           {"username": username, "password": password})
    if status != 200 or not isinstance(body, dict) or "access_token" not in body:
        raise SystemExit("login of %s failed: %s %s" % (username, status, body))
    return body["access_token"]
