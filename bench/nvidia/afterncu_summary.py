#!/usr/bin/env python3
"""Tables of `device_round.sh afterncu`: Nsight Compute's counters of our
wgmma 2:4 kernel launched after each preceding call, and of cuSPARSELt's own
call after ours.

usage: afterncu_summary.py FILE [--short]

FILE holds what `ncu --csv` printed around `bench_nv --served` with
BENCH_NV_PROFILE_AFTER=1: bench_nv's "| profile after |" lines, one for each
profiled call in order, saying what came before it and whose call it was
("profiled ours" or "profiled cuSPARSELt"), and ncu's rows, one per kernel
and metric, numbered by kernel in launch order.  Our call is our kernels
(their names start with nv_), cuSPARSELt's the run of other kernels between
two of ours.

Prints, for our kernel, each metric's median over the rounds with its range
in brackets, a column for each preceding call; then cuSPARSELt's kernels
with their launch figures.  --short keeps the metrics that say whether the
launch ran at another clock, started its CTAs late, ran them slowly or
waited on something new (time, cycles, frequency, active cycles, shared
memory configuration, the main stall reasons).
"""
import csv
import re
import statistics
import sys

SHORT = re.compile(
    r"^(Duration|Elapsed Cycles|SM Frequency|DRAM Frequency|SM Active Cycles|"
    r"Shared Memory Configuration Size|Driver Shared Memory Per Block|Dynamic Shared Memory Per Block|"
    r"Cluster Size|Grid Size|Registers Per Thread|Warp Cycles Per Issued Instruction|"
    r"Avg\. Active Threads Per Warp|gpu__time_duration\.sum|dram__bytes_read\.sum|"
    r"sm__cycles_active\..*|sm__cycles_elapsed\..*|.*stall.*)$", re.I)


def number(v):
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return None


def read(path):
    """The profile-after lines and ncu's kernels: [(id, name, {metric: (unit, value)})]."""
    cases, rows, header = [], [], None
    with open(path, newline="") as f:
        for line in f:
            if line.startswith("| profile after |"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                m = re.match(r"launch\s+(\d+): after (.*) \(rc (-?\d+)\)", cells[2])
                who = cells[3].replace("profiled ", "") if len(cells) > 3 else "ours"
                if m:
                    cases.append({"launch": int(m.group(1)), "after": m.group(2), "rc": int(m.group(3)),
                                  "who": who})
                continue
            if not line.startswith('"'):
                continue
            r = next(csv.reader([line]))
            if r and r[0] == "ID":
                header = {name: i for i, name in enumerate(r)}
                continue
            if header and r[0].isdigit():
                rows.append(r)
    kernels = {}
    if header:
        col = lambda r, name: r[header[name]] if name in header and header[name] < len(r) else ""
        for r in rows:
            k = kernels.setdefault(int(r[0]), {"name": col(r, "Kernel Name"), "grid": col(r, "Grid Size"),
                                               "block": col(r, "Block Size"), "metrics": {}})
            k["metrics"][col(r, "Metric Name")] = (col(r, "Metric Unit"), col(r, "Metric Value"))
    return cases, [(i, kernels[i]) for i in sorted(kernels)]


def assign(cases, kernels):
    """Each profiled call's kernels: ours one nv_ kernel each, cuSPARSELt's
    the run of other kernels up to the next nv_ one.  None when the counts
    do not agree (the table would mislabel them)."""
    out, at = [], 0
    for c in cases:
        got = []
        if c["who"] == "ours":
            if at < len(kernels) and kernels[at][1]["name"].startswith("nv_"):
                got.append(kernels[at])
                at += 1
        else:
            while at < len(kernels) and not kernels[at][1]["name"].startswith("nv_"):
                got.append(kernels[at])
                at += 1
        if not got and c["rc"] == 0:
            return None
        out.append((c, got))
    return out if at == len(kernels) else None


def fmt(x):
    return "%.0f" % x if abs(x) >= 1000 else "%.4g" % x


def cell(values):
    nums = [v for v in values if v is not None]
    if not nums:
        return "-"
    med = statistics.median(nums)
    if len(nums) == 1 or min(nums) == max(nums):
        return fmt(med)
    return "%s [%s-%s]" % (fmt(med), fmt(min(nums)), fmt(max(nums)))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    short = "--short" in sys.argv[2:]
    cases, kernels = read(sys.argv[1])
    pairs = assign(cases, kernels)
    if pairs is None:
        print("afterncu: %d profiled calls and %d kernels do not pair up; ncu's kernels in order:" %
              (len(cases), len(kernels)))
        for i, k in kernels:
            print("  %3d %s grid %s block %s" % (i, k["name"][:80], k["grid"], k["block"]))
        return 1
    ours = [(c, ks[0][1]) for c, ks in pairs if c["who"] == "ours" and ks]
    order = []
    for c, _ in ours:
        if c["after"] not in order:
            order.append(c["after"])
    names, units = [], {}
    for _, k in ours:
        for name, (unit, _) in k["metrics"].items():
            if name not in units:
                names.append(name)
                units[name] = unit
    if short:
        names = [n for n in names if SHORT.match(n)]
    if ours:
        print("our kernel %s, median of the rounds [range], after:" % ours[0][1]["name"][:60])
        print("| metric | unit | " + " | ".join(order) + " |")
        print("|---|---|" + "---:|" * len(order))
        for name in names:
            row = []
            for after in order:
                vals = [number(k["metrics"].get(name, ("", ""))[1]) for c, k in ours if c["after"] == after]
                row.append(cell(vals))
            print("| %s | %s | %s |" % (name, units[name], " | ".join(row)))
    seen = set()
    for c, ks in pairs:
        if c["who"] == "ours":
            continue
        for _, k in ks:
            if k["name"] in seen:
                continue
            seen.add(k["name"])
            print("cuSPARSELt's kernel %s, grid %s, block %s:" % (k["name"][:120], k["grid"], k["block"]))
            for name, (unit, value) in k["metrics"].items():
                if not short or SHORT.match(name):
                    print("    %s %s %s" % (name, value, unit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
