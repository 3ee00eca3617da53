#!/usr/bin/env python3
"""The upgrade drill of deploy/check (`deploy/check upgrade`, issue "online migrations /
upgrade drill"): deploy/rolling.py's drive, from the previous release to this one.

deploy/check has built the previous release (`--bin`, from the git ref UPGRADE_FROM), given the
drill's database that release's `migrate` and benches/scale/seed.py (of the same tree), made
the administrator with it, and started the processor sandbox and HAProxy. This driver:

  1. starts both instances on the PREVIOUS release and sets up the escrow deals and chat
     sockets through HAProxy, as the rolling restart does (rolling.py);
  2. while that load runs, and visitors read public expert profiles (each read from `profiles`,
     the table most migrations touch; the rolling load alone may never read the migrated
     table, and a wait nobody makes proves nothing), runs the NEW binary's `marketplace
     migrate` (`--new-bin`), again after a pause when it fails on its `lock_timeout` (at most
     `--migrate-attempts`), and samples pg_stat_activity every `--sample-ms` on a connection
     of its own for the drill's backends waiting on a lock: the longest wait seen;
  3. restarts each instance in turn onto the new binary (drain, SIGTERM, start, /ready,
     ready), as an operator upgrading would (README, "Upgrading");
  4. checks what the rolling restart checks (no failed request, sockets, chat, the ledger for
     this run's deals) and that no backend waited on a lock longer than `--max-lock-wait`
     while the migration ran, and that both instances run the new binary at the end.

Prints the rolling figures, then one `upgrade ...` line; exits non-zero on any failure.
"""

import argparse
import asyncio
import os
import random
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rolling  # noqa: E402
from rolling import F, Failed  # noqa: E402

# The migrator's connections carry this name (sqlx reads PGAPPNAME), so the sampler can tell
# the migration's own waits from the ones it causes.
MIGRATOR_APP = "marketplace-upgrade-migrate"

# Backends of the drill's database waiting on a heavyweight lock. The wait is measured as
# `clock_timestamp() - state_change`: an `active` backend's state_change is when it last became
# active, i.e. when its current statement started running (reset at each protocol message of
# it), so it bounds the lock wait from above and counts nothing of what came before in the
# transaction (`xact_start` would) or in an earlier statement. `query_start` is the statement's
# own start, never later than state_change, so it can only read longer for the same wait. A
# blocked statement waits on its relation locks before doing any work, so the bound is tight;
# pg_locks.waitstart (PostgreSQL 14 and later) is the exact start of the wait, printed beside as
# a cross-check.
SAMPLE = r"""
SELECT a.pid, a.application_name,
       round(extract(epoch FROM clock_timestamp() - a.state_change) * 1000),
       {waitstart},
       array_to_string(pg_blocking_pids(a.pid), ' '),
       left(regexp_replace(coalesce(a.query, ''), '\s+', ' ', 'g'), 160)
  FROM pg_stat_activity a
 WHERE a.datname = current_database() AND a.wait_event_type = 'Lock'
   AND a.pid <> pg_backend_pid()
"""
WAITSTART = ("coalesce(round(extract(epoch FROM clock_timestamp() - (SELECT min(l.waitstart) "
             "FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted)) * 1000)::text, '')")
MIGRATOR_PIDS = f"SELECT pid FROM pg_stat_activity WHERE application_name = '{MIGRATOR_APP}'"
END = "~~sample-end~~"


class LockSampler:
    """psql on a connection of its own, asked every `period` seconds from a thread."""

    def __init__(self, db_url, period):
        self.period = period
        self.proc = subprocess.Popen(
            ["psql", db_url, "-AtXq", "-F", "\t", "-v", "ON_ERROR_STOP=1"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            bufsize=1, env=dict(os.environ, PGAPPNAME="marketplace-upgrade-sampler"))
        version = int(self.ask("SHOW server_version_num")[0][0])
        self.query = SAMPLE.format(waitstart=WAITSTART if version >= 140000 else "''")
        self.samples = 0
        self.slowest_sample = 0.0
        self.longest = 0                # ms, any backend but the migrator's
        self.longest_exact = None       # ms, from pg_locks.waitstart
        self.longest_what = ""
        self.waiters = set()            # (pid, statement) seen waiting
        self.migrator_longest = 0       # ms the migration itself waited for a lock
        self.error = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def ask(self, query):
        self.proc.stdin.write(query.strip().rstrip(";") + ";\n\\echo " + END + "\n")
        self.proc.stdin.flush()
        rows = []
        while (line := self.proc.stdout.readline()) and line.rstrip("\n") != END:
            rows.append(line.rstrip("\n").split("\t"))
        if not line:
            raise Failed(f"the lock sampler's psql ended: {self.proc.stderr.read()[:300]}")
        return rows

    def sample(self):
        started = time.monotonic()
        migrators = {r[0] for r in self.ask(MIGRATOR_PIDS)}
        for pid, app, ms, exact, blockers, query in self.ask(self.query):
            ms = int(float(ms))
            if app == MIGRATOR_APP:
                self.migrator_longest = max(self.migrator_longest, ms)
                continue
            self.waiters.add((pid, query))
            if exact:
                self.longest_exact = max(self.longest_exact or 0, int(float(exact)))
            if ms > self.longest:
                by = "the migration" if set(blockers.split()) & migrators else f"pids {blockers or '?'}"
                self.longest = ms
                self.longest_what = f"pid {pid} ({app or 'no name'}), blocked by {by}: {query}"
        self.samples += 1
        self.slowest_sample = max(self.slowest_sample, time.monotonic() - started)

    def loop(self):
        try:
            next_at = time.monotonic()
            while not self.stopping.is_set():
                self.sample()
                next_at += self.period
                self.stopping.wait(max(0.0, next_at - time.monotonic()))
        except Exception as e:  # noqa: BLE001 (reported as a problem of the run)
            self.error = repr(e)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stopping.set()
        self.thread.join()
        self.proc.stdin.close()
        self.proc.wait(10)


class Upgrade(rolling.Drill):
    """The previous release serves; the new version migrates under load; the restarts start
    the new binary."""

    scoped = True   # a seeded database: the ledger and the audit look at this run's deals

    def __init__(self, args):
        self.args = args
        self.attempts = 0
        self.attempt_errors = []
        self.migrate_seconds = 0.0
        self.requests_during_migrate = 0
        self.schema = ("?", "?")
        self.sampler = None
        self.reads = 0
        self.migrated_at = None
        self.backfills = []

    def applied(self):
        return rolling.sql(self.args.db_url, "SELECT COALESCE(MAX(version), 0) || ' (' || COUNT(*) || ' applied)' "
                                             "FROM _sqlx_migrations WHERE success")[0][0]

    def migrate(self, inst):
        """The new binary's `migrate` with the instances' settings; again after a pause while
        it fails on a lock it could not take within its `lock_timeout`."""
        work = os.path.join(self.args.workdir, "migrate")
        os.makedirs(work, exist_ok=True)
        env = dict(inst.env, DATA_DIR=work, PGAPPNAME=MIGRATOR_APP, PATH=os.environ.get("PATH", "/usr/bin:/bin"))
        started = time.monotonic()
        try:
            while True:
                self.attempts += 1
                out = subprocess.run([self.args.new_bin, "migrate"], env=env, cwd=work, stdin=subprocess.DEVNULL,
                                     capture_output=True, text=True, timeout=self.args.migrate_timeout)
                text = (out.stdout + out.stderr).strip()
                with open(os.path.join(work, f"migrate.log.{self.attempts}"), "w") as log:
                    log.write(text + "\n")
                if out.returncode == 0:
                    return
                if "lock timeout" not in text and "55P03" not in text:
                    raise Failed(f"the new version's migrate exited {out.returncode}: {text[-600:]}")
                self.attempt_errors.append(text.splitlines()[-1][-120:] if text else f"exit {out.returncode}")
                if self.attempts >= self.args.migrate_attempts:
                    raise Failed(f"the new version's migrate could not take its locks in {self.attempts} "
                                 f"attempts: {self.attempt_errors}")
                time.sleep(self.args.migrate_pause)
        except subprocess.TimeoutExpired:
            raise Failed(f"the new version's migrate still running after {self.args.migrate_timeout} s")
        finally:
            self.migrate_seconds = time.monotonic() - started

    async def visitor(self, slugs, stop):
        """Public expert profiles, one after the other, through HAProxy: never kept by an
        instance, each one is read from `profiles`."""
        while not stop.is_set():
            await asyncio.to_thread(rolling.http_call, self.args.proxy, "GET",
                                    f"/api/profiles/experts/slug/{random.choice(slugs)}")
            self.reads += 1
            await asyncio.sleep(0.02)

    async def before_restarts(self, inst):
        before = await asyncio.to_thread(self.applied)
        slugs = [r[0] for r in await asyncio.to_thread(
            rolling.sql, self.args.db_url, "SELECT slug FROM profiles WHERE profile_type = 'experto' "
                                           "AND slug IS NOT NULL ORDER BY random() LIMIT 500")]
        stop = asyncio.Event()
        visitors = [asyncio.create_task(self.visitor(slugs, stop)) for _ in range(2)] if slugs else []
        try:
            await asyncio.sleep(1)
            self.sampler = LockSampler(self.args.db_url, self.args.sample_ms / 1000)
            self.sampler.start()
            requests = F.requests
            try:
                await asyncio.to_thread(self.migrate, inst)
            finally:
                self.requests_during_migrate = F.requests - requests
                self.sampler.stop()
        finally:
            stop.set()
            await asyncio.gather(*visitors)
        self.schema = (before, await asyncio.to_thread(self.applied))
        self.migrated_at = time.time()
        # From here on every start is of the new binary. An instance of the OLD version must
        # never be started again after this migrate: its `serve` runs its migrator at every
        # start, and that migrator refuses a database holding a migration it does not know,
        # so it would not come up. The new instances run as production does on PostgreSQL:
        # MIGRATE_ON_START off, `serve` refusing a database missing one of its migrations
        # (the env file sets no APP_ENV, as the rolling check's: development, whose default
        # would have migrated at start and hidden a migrate that did not finish).
        inst.bin = self.args.new_bin
        inst.env = dict(inst.env, MIGRATE_ON_START="false")
        await asyncio.sleep(1)

    def backfilled(self):
        """Waits for the new instances' backfills job to finish every backfill a migration
        registered (`store::backfills`); the ones still unfinished after the wait."""
        until = time.monotonic() + self.args.backfill_timeout
        while True:
            self.backfills = rolling.sql(
                self.args.db_url,
                "SELECT name, upto, done_through, rows_changed, "
                "COALESCE(EXTRACT(EPOCH FROM finished_at)::text, '') FROM backfills ORDER BY name")
            unfinished = [row[0] for row in self.backfills if not row[4]]
            if not unfinished or time.monotonic() > until:
                return unfinished
            time.sleep(0.5)

    def problems(self, inst):
        problems = []
        s = self.sampler
        if s is None:
            return ["the migration never ran"]
        unfinished = self.backfilled()
        if unfinished:
            problems.append(f"backfills not finished {self.args.backfill_timeout:.0f} s after the "
                            f"restarts: {unfinished}")
        if s.error:
            problems.append(f"the lock sampler failed: {s.error}")
        if s.samples == 0:
            problems.append("the lock sampler took no sample")
        if s.longest > self.args.max_lock_wait * 1000:
            problems.append(f"a backend waited {s.longest} ms on a lock while the "
                            f"migration ran (at most {self.args.max_lock_wait * 1000:.0f}): {s.longest_what}")
        if self.requests_during_migrate == 0:
            problems.append("no request while the migration ran: it did not run under load")
        new = os.path.realpath(self.args.new_bin)
        for name, proc in inst.procs.items():
            try:
                exe = os.path.realpath(f"/proc/{proc.pid}/exe")
            except OSError:
                exe = "(gone)"
            if proc.poll() is not None or exe != new:
                problems.append(f"{name} is not running the new binary at the end: {exe}")
        return problems

    def figures(self):
        s = self.sampler
        lines = []
        if s is not None:
            lines.append(
                f"migration: schema {self.schema[0]} -> {self.schema[1]}; {self.attempts} attempt(s) in "
                f"{self.migrate_seconds:.2f}s{' (retried: ' + '; '.join(self.attempt_errors) + ')' if self.attempt_errors else ''}, "
                f"{self.requests_during_migrate} requests meanwhile ({self.reads} expert profiles read by "
                f"the visitors in all); lock sampler: {s.samples} samples every "
                f"{self.args.sample_ms} ms (slowest sample {s.slowest_sample * 1000:.0f} ms), "
                f"{len(s.waiters)} backend statements seen waiting, longest {s.longest} ms "
                f"(pg_locks.waitstart: {'-' if s.longest_exact is None else f'{s.longest_exact} ms'})"
                f"{': ' + s.longest_what if s.longest_what else ''}; the migration itself waited "
                f"{s.migrator_longest} ms for its locks")
            for name, upto, done, rows, finished in self.backfills:
                after = (f"finished {float(finished) - self.migrated_at:.1f}s after the migrate"
                         if finished and self.migrated_at else "not finished")
                lines.append(f"backfill {name}: ids up to {upto}, done through {done}, {rows} rows filled "
                             f"by the new instances' backfills job under the load, {after}")
            lines.append("new instances: MIGRATE_ON_START=false (serve refuses a database missing a migration, "
                         "production's default on PostgreSQL), APP_ENV unset as in the rolling check")
        lines.append(
            f"upgrade {self.args.from_ref} -> {self.args.to_ref}: requests {F.requests}, failed {len(F.failures)}, "
            f"longest request {F.max_latency * 1000:.0f} ms, migrate {self.migrate_seconds:.2f}s in "
            f"{self.attempts} attempt(s), longest lock wait {s.longest if s else '-'} ms, restarts {F.restarts}")
        return lines


def main():
    a = rolling.arguments(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    a.add_argument("--new-bin", required=True, help="the new version's binary (--bin is the previous one)")
    a.add_argument("--from-ref", required=True, help="what --bin was built from, for the figures")
    a.add_argument("--to-ref", required=True, help="what --new-bin was built from, for the figures")
    a.add_argument("--migrate-attempts", type=int, default=5)
    a.add_argument("--migrate-pause", type=float, default=2.0, help="seconds between two attempts")
    a.add_argument("--migrate-timeout", type=float, default=600.0, help="seconds one attempt may take")
    a.add_argument("--sample-ms", type=int, default=50)
    a.add_argument("--max-lock-wait", type=float, default=1.0, help="seconds")
    a.add_argument("--backfill-timeout", type=float, default=300.0,
                   help="seconds the backfills may take after the restarts")
    args = a.parse_args()
    drill = Upgrade(args)
    try:
        sys.exit(asyncio.run(rolling.run(args, drill)))
    except Failed as e:
        print(f"FAILED: {e}")
        print(f"after {F.requests} requests, {F.restarts} restarts; failures: {F.failures}")
        for line in drill.figures():
            print(line)
        sys.exit(1)


if __name__ == "__main__":
    main()
