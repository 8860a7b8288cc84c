#!/usr/bin/env python3
"""Summarises an Nsight Compute CSV log (--csv --log-file, metrics
gpu__time_duration.sum, launch__grid_size and launch__block_size): one
line per kernel name and grid, with its launch count and the median,
lowest and highest time on the GPU, in microseconds, most launched first.

usage: kernel_names.py LABEL NCU_CSV"""
import csv
import statistics
import sys


# Microseconds per unit of ncu's "Metric Unit" column.
US_PER = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def rows(path):
    """The CSV's data rows as dicts; ncu's own messages (==PROF== lines)
    and the units row are skipped."""
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    it = csv.DictReader(lines)
    for r in it:
        if r.get("ID", "").isdigit():
            yield r


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    label, path = sys.argv[1], sys.argv[2]
    kernels = {}  # (process, launch ID, name) -> {metric: (value, unit)}
    try:
        for r in rows(path):
            key = (r["Process ID"], r["ID"], r["Kernel Name"])
            kernels.setdefault(key, {})[r["Metric Name"]] = (r["Metric Value"].replace(",", ""),
                                                             r.get("Metric Unit", ""))
    except (OSError, KeyError) as e:
        print(f"# {label}: no kernels read from {path} ({e})")
        return
    groups = {}
    units = set()
    for (_, _, name), m in kernels.items():
        try:
            v, unit = m["gpu__time_duration.sum"]
            if unit not in US_PER:
                units.add(unit)
            t = float(v) * US_PER.get(unit, float("nan"))
        except (KeyError, ValueError):
            continue
        g = (name[:90], m.get("launch__grid_size", ("?",))[0], m.get("launch__block_size", ("?",))[0])
        groups.setdefault(g, []).append(t)
    if units:
        print(f"# {label}: unknown time units {sorted(units)}")
    print(f"# kernels, {label}: launches | grid | block | median / min / max us | name")
    for (name, grid, block), ts in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:14]:
        print(f"{len(ts):6d} | {grid:>6} | {block:>4} | {statistics.median(ts):7.1f} / {min(ts):7.1f} / {max(ts):7.1f} | {name}")


if __name__ == "__main__":
    main()
