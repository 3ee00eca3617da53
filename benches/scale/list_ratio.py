#!/usr/bin/env python3
"""The public project list and its search under load (`wrk -t2 -c32`), the service beside the
reference stack's same list (reference_lists.py) on one seeded PostgreSQL database, in one
sitting (issue #32: "under load the public project list and search stay >= 10x the reference
stack on the same data").

    python3 list_ratio.py --database-url postgres://postgres@127.0.0.1:5432/scale_m \\
        --redis-url redis://127.0.0.1:6379

Needs wrk (apt-get install wrk) and a virtual environment with the reference's packages
(`python3 -m venv /tmp/peer-venv && /tmp/peer-venv/bin/pip install fastapi uvicorn
sqlalchemy greenlet asyncpg`), `--venv` to use another. Prints the machine, PostgreSQL's
settings, and requests a second, p50 and p99 for each path and side, with the ratio.
"""
import argparse
import os
import re
import subprocess
import sys
import time

import bench
import common

PATHS = [
    ("public p1", "/api/projects/public"),
    ("public page 50", "/api/projects/public?page=50"),
    ("public search=kubernetes", "/api/projects/public?search=kubernetes"),
    ("public search=data", "/api/projects/public?search=data"),
]


def wrk(url, seconds, connections):
    """(requests a second, p50 ms, p99 ms, non-2xx responses) of one wrk run."""
    out = subprocess.run(["wrk", "-t2", "-c%d" % connections, "-d%ds" % seconds, "--latency",
                          url], capture_output=True, text=True, check=True).stdout

    def ms(label):
        m = re.search(r"^\s*%s%%\s+([\d.]+)(us|ms|s)\s*$" % label, out, re.M)
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rate, ms("50"), ms("99"), int(errors.group(1)) if errors else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--database-url", required=True, help="a PostgreSQL database seed.py filled")
    ap.add_argument("--redis-url")
    ap.add_argument("--binary", help="service binary (default: release, else debug build)")
    ap.add_argument("--build", choices=["release", "debug"],
                    help="the binary's build profile (default: from its path)")
    ap.add_argument("--commit", help="the commit the binary was built from (default: the "
                                     "checkout its path is in)")
    ap.add_argument("--venv", default="/tmp/peer-venv")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--data-dir", default="/work/scale-data")
    a = ap.parse_args()
    if common.engine_of(a.database_url) != "postgres":
        sys.exit("the reference stack runs on PostgreSQL only")
    binary = common.find_binary(a.binary)
    db = common.Db(a.database_url)
    print("machine:", bench.machine())
    print("load average:", open("/proc/loadavg").read().split()[:3])
    print("postgres:", {s: db.value("SHOW %s" % s) for s in bench.PG_SETTINGS})
    print("service:", bench.binary_info(binary, a.build, a.commit))
    print("wrk -t2 -c%d -d%ds, after a 2 s warm-up of each" % (a.connections, a.seconds))

    svc = common.Service(binary, a.database_url, os.path.join(a.data_dir, "list_ratio"),
                         redis_url=a.redis_url)
    ref_port = common.free_port()
    env = dict(os.environ, PEER_DATABASE_URL=a.database_url.replace(
        "postgres://", "postgresql+asyncpg://", 1))
    ref = subprocess.Popen([os.path.join(a.venv, "bin", "uvicorn"), "reference_lists:app",
                            "--host", "127.0.0.1", "--port", str(ref_port), "--workers", "2",
                            "--log-level", "warning"], cwd=common.HERE, env=env)
    try:
        svc.wait_ready()
        ref_base = "http://127.0.0.1:%d" % ref_port
        for _ in range(100):
            if common.http("GET", ref_base + PATHS[0][1], timeout=5)[0] == 200:
                break
            time.sleep(0.2)
        print()
        print("| path | service req/s | p50 / p99 ms | reference req/s | p50 / p99 ms | ratio |")
        print("|---|---:|---:|---:|---:|---:|")
        for label, path in PATHS:
            sides = []
            for base in (svc.base, ref_base):
                status, body, _ = common.http("GET", base + path)
                if status != 200:
                    sys.exit("%s%s answered %s: %s" % (base, path, status, body))
                wrk(base + path, 2, a.connections)
                sides.append(wrk(base + path, a.seconds, a.connections))
            (s_rate, s50, s99, s_err), (r_rate, r50, r99, r_err) = sides
            if s_err or r_err:
                sys.exit("non-2xx answers under load: service %d, reference %d" % (s_err, r_err))
            print("| %s | %.0f | %.1f / %.1f | %.0f | %.1f / %.1f | %.1fx |" % (
                label, s_rate, s50, s99, r_rate, r50, r99, s_rate / r_rate))
    finally:
        svc.stop()
        ref.terminate()
        ref.wait()


if __name__ == "__main__":
    main()
