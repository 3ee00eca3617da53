#!/usr/bin/env python3
"""The keyed edge under the third probe's D30 rows: what a request carrying `Idempotency-Key`
costs with a long multipart boundary, a large body, or many large bodies at once, with
`/health` asked every 20 ms meanwhile, and the server's peak memory.

    python3 idempotency_edge.py [--binary PATH] [--database-url URL] [--redis-url URL]

Starts the service binary (release by default) on a fresh SQLite file unless a database is
given, registers one account (unverified, as the probe's), and prints the machine, the binary,
then one line per row: answers, the slowest answer, `/health`'s median and slowest, and RSS
before and at its peak. Standard library only.
"""
import argparse
import http.client
import json
import os
import statistics
import tempfile
import threading
import time

import bench
import common


def send(port, path, token, csrf, boundary, body, key):
    """(status, seconds) of one POST of `body` typed multipart with `boundary`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {
        "Authorization": "Bearer " + token,
        "Cookie": "csrf_token=" + csrf,
        "X-CSRF-Token": csrf,
        "Content-Type": "multipart/form-data; boundary=" + boundary,
        "Content-Length": str(len(body)),
    }
    if key:
        headers["Idempotency-Key"] = key
    started = time.perf_counter()
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        status = resp.status
    except OSError as e:
        status = "error: %s" % e.__class__.__name__
    finally:
        conn.close()
    return status, time.perf_counter() - started


class HealthWatch:
    """`GET /health` every 20 ms on its own thread until stopped; each answer's seconds."""

    def __init__(self, base):
        self.base, self.times, self.running = base, [], True
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while self.running:
            status, _, took = common.http("GET", self.base + "/health", timeout=60)
            self.times.append(took if status == 200 else float("inf"))
            time.sleep(0.02)

    def stop(self):
        self.running = False
        self.thread.join()
        return statistics.median(self.times) * 1000, max(self.times) * 1000


def peak_rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["VmHWM"].split()[0]) / 1024, int(fields["VmRSS"].split()[0]) / 1024


def row(service, account, label, path, boundary, size, concurrent, keyed):
    body = b"a" * size
    port = service.port
    before_peak, before = peak_rss_mib(service.proc.pid)
    watch = HealthWatch(service.base)
    results = [None] * concurrent

    def one(i):
        key = "edge-%d-%d" % (time.time_ns(), i) if keyed else None
        results[i] = send(port, path, account["token"], account["csrf"], boundary, body, key)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(concurrent)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    health_median, health_max = watch.stop()
    peak, _ = peak_rss_mib(service.proc.pid)
    statuses = sorted(set(str(s) for s, _ in results))
    slowest = max(t for _, t in results)
    print("%-44s %-10s all in %6.2f s, slowest %6.2f s | /health median %6.1f ms, max %7.1f ms"
          " | RSS %4.0f MiB, peak %4.0f MiB (was %4.0f)"
          % (label, ",".join(statuses), wall, slowest, health_median, health_max, before,
             peak, before_peak))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", help="the service binary (default: the release build)")
    ap.add_argument("--build", help="release or debug, for a binary copied out of the target")
    ap.add_argument("--commit", help="the source commit, for a copied binary")
    ap.add_argument("--database-url", help="default: a fresh SQLite file")
    ap.add_argument("--redis-url")
    args = ap.parse_args()
    binary = common.find_binary(args.binary)
    print("machine:", json.dumps(bench.machine()))
    print("binary:", json.dumps(bench.binary_info(binary, args.build, args.commit)))
    data = tempfile.mkdtemp(prefix="idempotency-edge-")
    url = args.database_url or "sqlite:%s/marketplace.db" % data
    service = common.Service(binary, url, data, redis_url=args.redis_url,
                             extra_env={"WORKERS": "2", "BCRYPT_COST": "4"})
    try:
        service.wait_ready()
        name = "edge%d" % int(time.time())
        status, body, _ = common.http("POST", service.base + "/api/auth/register", {
            "email": name + "@example.com", "username": name, "password": common.PASSWORD,
            "roles": ["experto"]})
        assert status == 201, (status, body)
        account = {"token": body["access_token"], "csrf": body["csrf_token"]}
        print("settings: WORKERS=2, %s, one unverified account; sizes in bytes"
              % common.engine_of(url))
        long = "a" * 59_999 + "b"
        worst = "a" * 69 + "b"
        mark = "/api/notifications/mark-all-read"
        upload = "/api/profiles/upload"
        rows = [
            ("boundary 60,000, 8,000,000 x2, keyed", mark, long, 8_000_000, 2, True),
            ("same to an upload route, keyed", upload, long, 8_000_000, 2, True),
            ("boundary 70 (a..ab), 8,000,000 upload", upload, worst, 8_000_000, 1, False),
            ("same, keyed", upload, worst, 8_000_000, 1, True),
            ("15 MiB x55 to a route without body", mark, "xyz", 15 << 20, 55, False),
            ("same, keyed", mark, "xyz", 15 << 20, 55, True),
            ("15 MiB x30 uploads (refused unread)", upload, "xyz", 15 << 20, 30, False),
            ("same, keyed (read to fingerprint)", upload, "xyz", 15 << 20, 30, True),
        ]
        for label, path, boundary, size, concurrent, keyed in rows:
            row(service, account, label, path, boundary, size, concurrent, keyed)
    finally:
        service.stop()


if __name__ == "__main__":
    main()
