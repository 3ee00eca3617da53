#!/usr/bin/env python3
"""pgBackRest's figures for Prometheus, through node_exporter's textfile collector.

Reads `pgbackrest info --output=json` (and the state file the backup unit's ExecStopPost keeps
with the last attempt's outcome) and writes, in Prometheus's text format, to OUTPUT (a temporary
file in the same folder first, then renamed, so the collector never reads half a file):

  pgbackrest_stanza_status{stanza}                               status.code of the stanza
      (0 ok, 1 missing stanza path, 2 no valid backups, 3 missing stanza data, 4 different
      across repos, 5 database mismatch across repos, 6 requested backup not found, 99 other;
      99 as well when `pgbackrest info` itself fails or answers nothing for the stanza)
  pgbackrest_backup_last_completion_timestamp_seconds{stanza,type}  timestamp.stop of the
      newest backup of each type (full, diff, incr) in the repositories
  pgbackrest_backup_last_size_bytes{stanza,type}                 info.repository.delta of that
      backup: what it stored in the repository, compressed (pgBackRest's "backup size")
  pgbackrest_backup_last_duration_seconds{stanza,type}           timestamp.stop - timestamp.start
  pgbackrest_backup_last_run_success{stanza}                     1/0, the last attempt's outcome
  pgbackrest_backup_last_run_timestamp_seconds{stanza}           when that attempt ended
      (these two from the state file; absent until a first attempt was recorded)

`pgbackrest info` gives the archive's oldest and newest WAL segment names, but no time: there is
no WAL archive timestamp here (pg_stat_archiver.last_archived_time, through postgres_exporter,
is the place for that).

Usage (the units in this folder):
  metrics.py --stanza marketplace --output /var/lib/prometheus/node-exporter/pgbackrest.prom
  metrics.py --stanza marketplace --record-run "$SERVICE_RESULT" --type full --output ...

--record-run RESULT first records an attempt in the state file: systemd's $SERVICE_RESULT of the
backup unit ("success", or why not: "exit-code", "timeout", "signal", ...); anything but
"success" is a failure. Only Python's standard library. Exits 1 when `pgbackrest info` failed
(after writing the file, which then says so with status 99).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

TYPES = ("full", "diff", "incr")
OTHER = 99  # pgBackRest's "other" status code; also ours for "info failed"


def info(pgbackrest, config, stanza):
    """The parsed `pgbackrest info --output=json`, or (None, why)."""
    argv = [pgbackrest]
    if config:
        argv.append(f"--config={config}")
    if stanza:
        argv.append(f"--stanza={stanza}")
    argv += ["--output=json", "info"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{' '.join(argv)}: {e}"
    if out.returncode != 0:
        return None, f"{' '.join(argv)}: exit {out.returncode}: {out.stderr.strip()[-300:]}"
    try:
        return json.loads(out.stdout), None
    except ValueError as e:
        return None, f"{' '.join(argv)}: not JSON: {e}"


def load_state(path):
    try:
        with open(path) as f:
            state = json.load(f)
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}


def write_atomically(path, text, mode=0o644):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".pgbackrest-metrics.", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def record_run(path, stanza, result, backup_type, now):
    state = load_state(path)
    state[stanza] = {"success": result == "success", "result": result, "type": backup_type,
                     "timestamp": now}
    write_atomically(path, json.dumps(state, indent=2, sort_keys=True) + "\n")


def label(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def number(value):
    return repr(float(value)) if isinstance(value, float) else str(int(value))


class Family:
    def __init__(self, name, help_text):
        self.name, self.help, self.samples = name, help_text, []

    def add(self, labels, value):
        text = ",".join(f'{k}="{label(v)}"' for k, v in labels.items())
        self.samples.append(f"{self.name}{{{text}}} {number(value)}")

    def render(self):
        if not self.samples:
            return []
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge", *self.samples]


def metrics(stanzas, state, wanted):
    """The text of the metrics: `stanzas` is info's list (None when it failed), `wanted` the
    stanza asked for (None: every stanza info names)."""
    status = Family("pgbackrest_stanza_status",
                    "pgBackRest's status code of the stanza: 0 ok, 1 missing stanza path, 2 no valid "
                    "backups, 3 missing stanza data, 4 different across repos, 5 database mismatch "
                    "across repos, 6 requested backup not found, 99 other (or pgbackrest info failed).")
    completion = Family("pgbackrest_backup_last_completion_timestamp_seconds",
                        "Stop time of the newest backup of this type in the repositories.")
    size = Family("pgbackrest_backup_last_size_bytes",
                  "Bytes the newest backup of this type stored in the repository, compressed "
                  "(info.repository.delta).")
    duration = Family("pgbackrest_backup_last_duration_seconds",
                      "Seconds the newest backup of this type took (stop - start).")
    success = Family("pgbackrest_backup_last_run_success",
                     "1 if the last backup attempt succeeded, 0 if it failed (the backup unit's result).")
    run_at = Family("pgbackrest_backup_last_run_timestamp_seconds",
                    "When the last backup attempt ended.")
    seen = set()
    for s in stanzas or []:
        name = s.get("name")
        if not name or (wanted and name != wanted):
            continue
        seen.add(name)
        status.add({"stanza": name}, int((s.get("status") or {}).get("code", OTHER)))
        newest = {}
        for b in s.get("backup") or []:
            kind, stop = b.get("type"), (b.get("timestamp") or {}).get("stop")
            if kind in TYPES and stop is not None and (kind not in newest or stop >= newest[kind]["timestamp"]["stop"]):
                newest[kind] = b
        for kind in TYPES:
            b = newest.get(kind)
            if not b:
                continue
            labels = {"stanza": name, "type": kind}
            stamp = b["timestamp"]
            completion.add(labels, stamp["stop"])
            repo = (b.get("info") or {}).get("repository") or {}
            if "delta" in repo:
                size.add(labels, repo["delta"])
            duration.add(labels, stamp["stop"] - stamp["start"])
    # A stanza asked for and not reported (info failed, or it does not know the stanza): not ok;
    # without --stanza, when info failed, the stanzas a backup attempt was recorded for.
    expected = {wanted} if wanted else (set(state) if stanzas is None else set())
    for name in sorted(expected - seen):
        status.add({"stanza": name}, OTHER)
    for name, run in sorted(state.items()):
        if wanted and name != wanted:
            continue
        if isinstance(run, dict) and "timestamp" in run:
            success.add({"stanza": name}, 1 if run.get("success") else 0)
            run_at.add({"stanza": name}, float(run["timestamp"]))
    lines = []
    for family in (status, completion, size, duration, success, run_at):
        lines += family.render()
    return "\n".join(lines) + "\n"


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--output", required=True, help="the .prom file node_exporter's textfile collector reads")
    a.add_argument("--stanza", help="this stanza only (default: every stanza pgbackrest info names)")
    a.add_argument("--config", help="pgBackRest's configuration file (default: pgBackRest's own default)")
    a.add_argument("--pgbackrest", default="pgbackrest", help="the pgbackrest executable")
    a.add_argument("--state", default="/var/lib/pgbackrest-metrics/last-run.json",
                   help="where the last attempt's outcome is kept")
    a.add_argument("--record-run", metavar="RESULT",
                   help='record a backup attempt first: "success", or systemd\'s $SERVICE_RESULT for a failure')
    a.add_argument("--type", default="", help="the recorded attempt's backup type (full, diff, incr)")
    args = a.parse_args()
    if args.record_run is not None:
        if not args.stanza:
            a.error("--record-run needs --stanza")
        record_run(args.state, args.stanza, args.record_run, args.type, time.time())
    stanzas, error = info(args.pgbackrest, args.config, args.stanza)
    write_atomically(args.output, metrics(stanzas, load_state(args.state), args.stanza))
    if error:
        print(error, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
