"""python3 -m mfma bench: `mfmactl bench --json --samples` at several
concurrencies, printed as a table and, with --plot, drawn: the latency
distribution of each run and throughput against concurrency.  The numbers are
mfmactl's own measurements (the same JSON `mfmactl bench --json` prints);
nothing is re-measured here."""

import argparse
import json
import os
import shutil
import subprocess
import sys


def run_mfmactl(mfmactl, concurrency, requests, extra, endpoint):
    cmd = [mfmactl]
    if endpoint:
        cmd += ["-e", endpoint]
    cmd += ["--json", "bench", "--samples", "-j", str(concurrency), "-n", str(requests)] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"mfma bench: {' '.join(cmd)} exited {p.returncode}: "
                         f"{p.stderr.strip() or p.stdout.strip()}")
    return json.loads(p.stdout)


def plot(runs, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r0 = runs[0]
    title = (f"{r0['m']}x{r0['n']}x{r0['k']} {r0['dtype']} (A {r0['a']}), "
             f"{r0['requests']} requests per run"
             f"{', B and D in shared memory' if r0.get('shm') else ''}")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6), dpi=100)
    for r in runs:
        s = sorted(r.get("latency_samples_ns") or [])
        if not s:
            continue
        us = [v / 1e3 for v in s]
        frac = [(i + 1) / len(us) for i in range(len(us))]
        ax1.step(us, frac, where="post", label=f"{r['concurrency']} in flight")
    ax1.set_xscale("log")
    ax1.set_xlabel("round trip (us, log)")
    ax1.set_ylabel("fraction of requests")
    ax1.set_title("latency distribution", fontsize=10)
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=8)

    js = [r["concurrency"] for r in runs]
    ax2.plot(js, [r["requests_per_s"] for r in runs], "o-", color="C0", label="requests/s")
    ax2.set_xscale("log", base=2)
    ax2.set_xticks(js)
    ax2.set_xticklabels([str(j) for j in js])
    ax2.set_xlabel("requests in flight")
    ax2.set_ylabel("requests/s", color="C0")
    ax2.set_title("throughput and latency vs concurrency", fontsize=10)
    ax2.grid(True, alpha=0.3)
    ax3 = ax2.twinx()
    ax3.plot(js, [r["latency_ns"]["p50"] / 1e3 for r in runs], "s--", color="C1", label="p50")
    ax3.plot(js, [r["latency_ns"]["p99"] / 1e3 for r in runs], "^:", color="C3", label="p99")
    ax3.set_ylabel("latency (us)")
    ax2.set_ylim(bottom=0)
    ax3.set_ylim(bottom=0)
    lines = ax2.get_lines() + ax3.get_lines()
    ax3.legend(lines, [ln.get_label() for ln in lines], fontsize=8, loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def table(runs):
    print(f"{'in flight':>9} {'req/s':>10} {'GFLOP/s':>9} {'p50 us':>9} {'p90 us':>9} "
          f"{'p99 us':>9} {'max us':>9}")
    for r in runs:
        lat = r["latency_ns"]
        print(f"{r['concurrency']:>9} {r['requests_per_s']:>10.1f} {r['gflops_wall']:>9.2f} "
              f"{lat['p50'] / 1e3:>9.1f} {lat['p90'] / 1e3:>9.1f} {lat['p99'] / 1e3:>9.1f} "
              f"{lat['max'] / 1e3:>9.1f}")


def main(argv):
    ap = argparse.ArgumentParser(
        prog="python3 -m mfma bench",
        description="Runs `mfmactl bench --json --samples` once per concurrency and shows "
                    "the runs.  Options after -- go to mfmactl bench (--m, --n, --k, "
                    "--dtype, --sparse, --resident ...).")
    ap.add_argument("-j", "--concurrency", default="1,2,4,8",
                    help="comma-separated requests in flight (default 1,2,4,8)")
    ap.add_argument("-n", "--requests", type=int, default=500,
                    help="measured requests per run (default 500)")
    ap.add_argument("-e", "--endpoint", help="the daemon (default: mfmactl's)")
    ap.add_argument("--shm", action="store_true",
                    help="B and D through a shared-memory region (mfmactl bench --shm; the "
                    "Unix socket only)")
    ap.add_argument("--plot", metavar="OUT.png", help="draw the runs into OUT.png")
    ap.add_argument("--json", metavar="OUT.json", help="save the runs (a list of mfmactl's "
                    "JSON documents)")
    ap.add_argument("--input", metavar="IN.json", help="draw saved runs instead of running")
    ap.add_argument("--mfmactl", default=os.environ.get("MFMACTL_BIN") or
                    shutil.which("mfmactl") or "mfmactl", help="the mfmactl to run")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="-- then mfmactl bench options")
    o = ap.parse_args(argv)
    extra = o.extra[1:] if o.extra[:1] == ["--"] else o.extra
    if o.shm and "--shm" not in extra:
        extra.append("--shm")

    if o.input:
        with open(o.input) as f:
            runs = json.load(f)
    else:
        try:
            js = [int(x) for x in o.concurrency.split(",") if x]
        except ValueError:
            ap.error(f"--concurrency {o.concurrency!r}: expected numbers like 1,2,4,8")
        runs = [run_mfmactl(o.mfmactl, j, o.requests, extra, o.endpoint) for j in js]
    if not runs:
        ap.error("no runs")
    table(runs)
    if o.json:
        with open(o.json, "w") as f:
            json.dump(runs, f)
    if o.plot:
        plot(runs, o.plot)
        print(f"plot written to {o.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
