#!/usr/bin/env python3
"""Issue 11's "served within 3% of the fastest alone", from one choice round
(device_round.sh choice): bench_nv's times alone (its "| f16 |" and
"| wgmma |" lines) against the served leader's median kernel time, which
the daemon logs when a bucket's served trial ends ("weight 'choice_MxK_KIND':
served trial at N=n ... (median kernel T us) over ...").  One row per
weight kind and N the daemon served and the bench timed; ratio over 1.03
marked "over".

Where bench_nv ran with --served (CHOICE_SERVED=1), its "| served |" lines
time each provider one call at a time between the copies, as the daemon
serves it (no daemon: launched directly and from a CUDA graph, the faster
kept); the last two columns are the fastest of those and the served leader
over it.  That reference takes the same lone launch and the same L2 state as
the daemon's (a weight that fits L2 stays there between calls, which the
back-to-back "alone" timing with rotating copies does not let it), so what
is over it is the daemon's own cost.  The dense rows have cuBLASLt there
only (bench_nv serves no dense kernel of ours).

With several rounds (CHOICE_BENCH_LOG MFMAD_LOG pairs, each a fresh daemon
and its own bench_nv run: device_round.sh fairchoice), each row compares
medians over the rounds: the served leader's median kernel time, and each
provider's time alone, the fastest provider's median the reference.  One
round's reference swings by up to 4.4 us between runs at 12-22 us rows (an
H100, bench/RESULTS.md), more than a 3% criterion allows: a row is judged
on the rounds together, and the spread of each side is printed.

usage: served_vs_alone.py CHOICE_BENCH_LOG MFMAD_LOG [CHOICE_BENCH_LOG MFMAD_LOG ...]"""
import re
import sys


def num(s):
    """A time cell's value, None where it is no number or NaN."""
    try:
        v = float(s)
    except ValueError:
        return None
    return v if v == v else None


def alone_times(path):
    """{(m, n, k): {"2:4": {who: us}, "dense": {who: us}}} from bench_nv."""
    out = {}
    for line in open(path, errors="replace"):
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 10 and cells[1] == "f16" and re.fullmatch(r"\d+x\d+x\d+", cells[2]):
            shape = tuple(int(v) for v in cells[2].split("x"))
            t = out.setdefault(shape, {"2:4": {}, "dense": {}})
            for kind, who, cell in (("2:4", "mma.sp", 3), ("dense", "mma", 5),
                                    ("dense", "cuBLASLt", 7), ("2:4", "cuSPARSELt", 9)):
                v = num(cells[cell])
                if v is not None:
                    t[kind][who] = v
            # A 2:4 weight may be served by cuBLASLt (expanded to dense).
            if "cuBLASLt" in t["dense"]:
                t["2:4"]["cuBLASLt"] = t["dense"]["cuBLASLt"]
        m = re.match(r"\| wgmma \| f16\s+\| (\d+x\d+x\d+)\s+\| 2:4\s+([\d.]+) us.*?\| dense\s+([\d.]+) us",
                     line)
        if m:
            shape = tuple(int(v) for v in m.group(1).split("x"))
            t = out.setdefault(shape, {"2:4": {}, "dense": {}})
            t["2:4"]["wgmma"] = float(m.group(2))
            t["dense"]["wgmma"] = float(m.group(3))
    return out


def served_times(path):
    """{(m, n, k): {"2:4": {who: us}, "dense": {who: us}}} from bench_nv's
    "| served |" lines: the faster of the direct and the graph launch."""
    out = {}
    kinds = {"ours 2:4": ("2:4",), "wgmma 2:4": ("2:4",), "cuSPARSELt": ("2:4",),
             "cuBLASLt": ("dense", "2:4")}
    for line in open(path, errors="replace"):
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 8 or cells[1] != "served" or cells[3] not in kinds:
            continue
        shape = tuple(int(v) for v in cells[2].split("x"))
        t = [v for v in (num(cells[4]), num(cells[6])) if v is not None]
        if not t:
            continue
        for kind in kinds[cells[3]]:
            out.setdefault(shape, {"2:4": {}, "dense": {}})[kind][cells[3]] = min(t)
    return out


TRIAL = re.compile(r"weight 'choice_(\d+)x(\d+)_(sparse|dense)': served trial at N=(\d+) "
                   r"(?:kept|changed the lead to) (\S+) \(median kernel ([\d.]+) us\)")


def trial_lines(path):
    """The daemon log's served-trial lines, in order: ((kind, m, k, n),
    leader variant, its median kernel us)."""
    for line in open(path, errors="replace"):
        m = TRIAL.search(line)
        if m:
            kind = "2:4" if m.group(3) == "sparse" else "dense"
            yield (kind, int(m.group(1)), int(m.group(2)), int(m.group(4))), m.group(5), float(m.group(6))


def trial_rows(path):
    """{(kind, m, k, n): (leader, median us)} from the daemon's log."""
    return {key: (leader, us) for key, leader, us in trial_lines(path)}


def spread(name, med, low, high):
    """'name med (low-high)', one decimal each."""
    return f"{name} {med:.1f} ({low:.1f}-{high:.1f})"


def median(v):
    """The median of a non-empty list (the upper one of an even count, as
    the daemon's)."""
    v = sorted(v)
    return v[len(v) // 2]


def fastest_median(rounds, key):
    """Of the providers timed in every round at key: (who, median, low,
    high) of the one whose median over the rounds is lowest; None if none."""
    meds = {}
    for who in set.intersection(*(set(r.get(key, {})) for r in rounds)) if rounds else ():
        v = [r[key][who] for r in rounds]
        meds[who] = (median(v), min(v), max(v))
    if not meds:
        return None
    who = min(meds, key=lambda w: meds[w][0])
    return (who,) + meds[who]


def main_rounds(pairs):
    """The rows every round served and timed, judged on medians."""
    trials = [trial_rows(mlog) for _, mlog in pairs]
    alone, lone = [], []
    for blog, _ in pairs:
        a, s = alone_times(blog), served_times(blog)
        alone.append({(kind, mm, kk, n): t for (mm, n, kk), kinds in a.items() for kind, t in kinds.items()})
        lone.append({(kind, mm, kk, n): t for (mm, n, kk), kinds in s.items() for kind, t in kinds.items()})
    rows = over = over_lone = 0
    print(f"{len(pairs)} rounds; medians (lowest-highest) over the rounds, us")
    print(f"{'weight, N':24} {'served leaders':>34} {'fastest alone':>30} {'ratio':>6}"
          f"   {'fastest one at a time':>30} {'ratio':>6}")
    for key in sorted(set.intersection(*(set(t) for t in trials))):
        served = [t[key][1] for t in trials]
        leaders = sorted({t[key][0].split(".")[0] for t in trials})
        ref = fastest_median(alone, key)
        if ref is None:
            continue
        sm = median(served)
        rows += 1
        ratio = sm / ref[1]
        over += ratio > 1.03
        row = (f"{key[0] + ' ' + str(key[1]) + 'x' + str(key[2]) + ', ' + str(key[3]):24} "
               f"{spread('/'.join(leaders), sm, min(served), max(served)):>34} "
               f"{spread(*ref):>30} "
               f"{ratio:6.3f}{' over' if ratio > 1.03 else '     '}")
        lref = fastest_median(lone, key)
        if lref:
            lr = sm / lref[1]
            over_lone += lr > 1.03
            row += f" {spread(*lref):>30} {lr:6.3f}{' over' if lr > 1.03 else ''}"
        print(row.rstrip())
    print(f"{rows} rows, {over} over 1.03 against the fastest alone, {over_lone} against the fastest one at a time")


def main():
    if len(sys.argv) < 3 or len(sys.argv) % 2 != 1:
        sys.exit(__doc__)
    if len(sys.argv) > 3:
        main_rounds([(sys.argv[i], sys.argv[i + 1]) for i in range(1, len(sys.argv), 2)])
        return
    alone = alone_times(sys.argv[1])
    served = served_times(sys.argv[1])
    rows = over = 0
    print(f"{'weight, N':28} {'fastest alone':>22} {'served leader (median)':>42} {'ratio':>6}"
          + (f"       {'fastest one at a time':>24} {'ratio':>6}" if served else ""))
    for (kind, mm, kk, n), leader, us in trial_lines(sys.argv[2]):
        times = alone.get((mm, n, kk), {}).get(kind)
        if not times:
            continue
        who = min(times, key=times.get)
        ratio = us / times[who]
        rows += 1
        over += ratio > 1.03
        row = (f"{kind + ' ' + str(mm) + 'x' + str(kk) + ', ' + str(n):28} "
               f"{who + ' ' + format(times[who], '.1f'):>22} "
               f"{leader + ' ' + format(us, '.1f'):>42} {ratio:6.3f}{' over' if ratio > 1.03 else '     '}")
        lone = served.get((mm, n, kk), {}).get(kind)
        if lone:
            lw = min(lone, key=lone.get)
            row += f"  {lw + ' ' + format(lone[lw], '.1f'):>24} {us / lone[lw]:6.3f}"
        print(row.rstrip())
    print(f"{rows} rows, {over} over 1.03")


if __name__ == "__main__":
    main()
