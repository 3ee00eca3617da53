#!/usr/bin/env python3
"""Side-by-side Markdown table of several bench.py JSON reports (p50 / p99 in ms per endpoint).

    python3 benches/scale/compare.py s-pg.json m-pg.json l-pg.json s-sqlite.json
    python3 benches/scale/compare.py --statements l-pg.json   # where the time went

Each report becomes one column `<size> <engine> (<build>)`; a cell is `p50 / p99`, or the
status when the endpoint did not answer 2xx (`timeout`, `500`, ...). Use it to put the figures
before and after a change next to each other."""

import json
import re
import sys


def cell(r):
    if r is None:
        return ""
    st = r["status"]
    if st == "timeout":
        return "timeout (>30 s)"
    if not (isinstance(st, int) and 200 <= st < 300):
        return "status %s" % st
    s = "%s / %s" % (fmt(r["p50_ms"]), fmt(r["p99_ms"]))
    return s + (" (n=%d)" % r["n"] if r.get("n") and r["n"] < 15 else "")


def fmt(v):
    if v is None:
        return "-"
    return "%.0f" % v if v >= 10 else "%.1f" % v


def short(sql, width=110):
    """A statement in one short line: a long select list becomes `…`."""
    sql = " ".join(sql.split())
    if sql[:7].upper() == "SELECT ":
        depth = 0
        for i in range(7, len(sql)):
            ch = sql[i]
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and sql[i:i + 6].upper() == " FROM ":
                if i > 47:
                    sql = "SELECT … FROM " + sql[i + 6:]
                break
    return sql if len(sql) <= width else sql[:width - 1] + "…"


def statements(rep):
    """Per endpoint of one report: where its time went (auto_explain, statements > 20 ms)."""
    print("| endpoint | p50 ms | slowest statements (count × mean ms) |")
    print("|---|---:|---|")
    for r in rep["endpoints"]:
        # a statement seen once may be a background job's or the previous call's tail
        slow = [g for g in r.get("slow_statements") or [] if g["count"] >= 2]
        if not slow:
            continue
        parts = ["%d × %.0f: `%s`" % (g["count"], g["total_ms"] / g["count"],
                                     short(g["query"]).replace("|", "\\|"))
                 for g in slow[:2]]
        print("| %s | %s | %s |" % (r["endpoint"], fmt(r["p50_ms"]), "<br>".join(parts)))


def main():
    args = sys.argv[1:]
    if args and args[0] == "--statements":
        for p in args[1:]:
            statements(json.load(open(p)))
        return
    reps = [json.load(open(p)) for p in args]
    if not reps:
        raise SystemExit(__doc__)
    names = []
    for rep in reps:
        for r in rep["endpoints"]:
            if r["endpoint"] not in names:
                names.append(r["endpoint"])
    heads = ["%s %s (%s)" % (r["size"], r["engine"], r["build"]["profile"]) for r in reps]
    print("| endpoint | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * len(reps))
    for n in names:
        cells = []
        for rep in reps:
            hit = next((r for r in rep["endpoints"] if r["endpoint"] == n), None)
            cells.append(cell(hit))
        print("| %s | %s |" % (n, " | ".join(cells)))
    print()
    print("| service RSS (MiB) start / end | " + " | ".join(
        "%s / %s" % (mib(r.get("rss_start_kib")), mib(r.get("rss_end_kib"))) for r in reps)
        + " |")


def mib(kib):
    return "-" if kib is None else "%.0f" % (kib / 1024)


if __name__ == "__main__":
    main()
