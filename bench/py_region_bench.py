#!/usr/bin/env python3
"""The Python client with and without a shared-memory region (issue 10 from
Python): a daemon of BUILD (default build/) on a temporary Unix socket, the
CPU backend, one resident random M x K f32 weight, and for each N the
round trip of Client.gemm measured here (time.perf_counter_ns around the
call), one in flight, the two paths in alternating rounds:

  bytes    c.gemm(None, b, weight="w")                B and D in the frames,
                                                      D a new numpy array
  region   c.gemm(None, rb, weight="w", out=rd)       rb, rd in a region

    bench/py_region_bench.py [--m 1024] [--k 1024] [--n 16,256] [--rounds 6]
                             [--requests 100]
Prints a Markdown table: p50 / p90 round trip, the daemon's own total and
kernel time (medians of what the answers carry), and the median of each
request's round trip less its kernel time: what the path itself costs."""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(build):
    d = tempfile.mkdtemp(prefix="pyregion-bench-")
    sock = os.path.join(d, "s.sock")
    with open(os.path.join(d, "mfmad.conf"), "w") as f:
        f.write("cpu = { devices = 1; };\n")
    env = dict(os.environ, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    p = subprocess.Popen([os.path.join(build, "daemon", "mfmad"), "-c",
                          os.path.join(d, "mfmad.conf"), "-s", sock, "--backends", "cpu"],
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "log"), "w"),
                         env=env)
    for _ in range(100):
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(sock)
            s.close()
            return p, d, "unix:" + sock
        except OSError:
            s.close()
            time.sleep(0.05)
    p.kill()
    raise SystemExit("mfmad did not start: " + open(os.path.join(d, "log")).read())


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, default=1024)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--n", default="16,256")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--requests", type=int, default=100, help="per round and path")
    ap.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    o = ap.parse_args()
    os.environ.setdefault("MFMA_CLIENT_LIB",
                          os.path.join(o.build, "client", "lib", "libmfmaclient.so.0"))
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import numpy as np
    import mfma

    p, d, ep = start(o.build)
    try:
        rng = np.random.default_rng(1)
        with mfma.Client(ep, timeout_ms=120000) as c:
            c.load_weight("w", rng.standard_normal((o.m, o.k)).astype(np.float32))
            print("| N | path | p50 round trip | p90 | daemon total (p50) | kernel (p50) "
                  "| round trip - kernel (p50) |")
            print("|---:|---|---:|---:|---:|---:|---:|")
            for n in (int(x) for x in o.n.split(",")):
                b = rng.standard_normal((o.k, n)).astype(np.float32)
                r = c.region(b.nbytes + o.m * n * 4)
                rb = r.array(b.shape, np.float32)
                rb[...] = b
                rd = r.array((o.m, n), np.float32, offset=b.nbytes)
                calls = {"bytes": lambda: c.gemm(None, b, weight="w"),
                         "region": lambda: c.gemm(None, rb, weight="w", out=rd)}
                lat = {k: [] for k in calls}
                srv = {k: [] for k in calls}
                ker = {k: [] for k in calls}
                for f in calls.values():  # warm-up, and both paths agree
                    f()
                if not np.array_equal(calls["bytes"](), rd):
                    raise SystemExit(f"N={n}: the two paths disagree")
                for rnd in range(o.rounds):
                    order = list(calls) if rnd % 2 == 0 else list(calls)[::-1]
                    for k in order:
                        f = calls[k]
                        for _ in range(o.requests):
                            t0 = time.perf_counter_ns()
                            f()
                            lat[k].append(time.perf_counter_ns() - t0)
                            srv[k].append(c.last_info.timing["total_ns"])
                            ker[k].append(c.last_info.timing["kernel_ns"])
                for k in calls:
                    print(f"| {n} | {k} | {pct(lat[k], .5) / 1e3:.0f} us | "
                          f"{pct(lat[k], .9) / 1e3:.0f} us | {pct(srv[k], .5) / 1e3:.0f} us | "
                          f"{pct(ker[k], .5) / 1e3:.0f} us | "
                          f"{pct([x - y for x, y in zip(lat[k], ker[k])], .5) / 1e3:.0f} us |")
                del rb, rd, calls
                r.close()
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
