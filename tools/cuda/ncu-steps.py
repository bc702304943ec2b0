#!/usr/bin/env python3
"""Per-kernel table of the decode steps in an ncu --csv --page raw capture.

ncu-steps.py CSV [ROWS]: a step starts at an embedding launch; decode steps
of ROWS rows (default 1) have an embedding grid of ROWS. Prints, per kernel
name, launches per step, µs per step, % of kernel time, DRAM MB per step and
GB/s, averaged over the complete decode steps in the capture.
"""
import csv, sys
from collections import defaultdict

def rows(path):
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]
    r = csv.reader(lines)
    head = next(r)
    next(r)  # units
    col = {k: head.index(k) for k in ("Kernel Name", "Grid Size", "gpu__time_duration.sum",
                                       "dram__bytes_read.sum", "dram__bytes_write.sum")}
    for v in r:
        num = lambda k: float(v[col[k]].replace(",", "") or 0)
        yield (v[col["Kernel Name"]], v[col["Grid Size"]], num("gpu__time_duration.sum"),
               num("dram__bytes_read.sum") + num("dram__bytes_write.sum"))

def main():
    path, want = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1
    steps, cur = [], None
    for name, grid, ns, b in rows(path):
        if name.startswith("embedding"):
            if cur is not None:
                steps.append(cur)
            g = int(grid.strip("()").split(",")[0])
            cur = {"rows": g, "k": []}
        if cur is not None:
            cur["k"].append((name, ns, b))
    # the last step may be cut off by the capture's end: dropped
    dec = [s for s in steps if s["rows"] == want]
    if not dec:
        sys.exit("no complete decode step of %d rows" % want)
    agg = defaultdict(lambda: [0, 0.0, 0.0])
    for s in dec:
        for name, ns, b in s["k"]:
            a = agg[name]
            a[0] += 1; a[1] += ns; a[2] += b
    n = len(dec)
    total = sum(a[1] for a in agg.values()) / n
    launches = sum(a[0] for a in agg.values()) / n
    print("%d decode steps of %d rows: %.0f launches, %.1f us of kernels per step" % (n, want, launches, total / 1e3))
    print("| kernel | launches | µs | % | DRAM MB | GB/s | % of 4.3 TB/s |")
    print("|---|---|---|---|---|---|---|")
    for name, (c, ns, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        us, mb = ns / n / 1e3, b / n / 1e6
        gbs = b / ns if ns else 0
        print("| %s | %.0f | %.1f | %.1f | %.1f | %.0f | %.0f |" % (name, c / n, us, 100 * ns / n / total, mb, gbs, 100 * gbs / 4300))

main()
