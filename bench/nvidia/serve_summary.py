#!/usr/bin/env python3
"""Summarises serving_bench.sh's SERVE lines (from stdin or files): one
short line each with the requests per second, client p50 and p99, the
server's mean kernel and copy times, the mean batch, the slowest answer
(its round trip and the server's queue, copies, kernel and total of it,
where the bench reports one) and the variants that answered.

usage: serve_summary.py [LOG...]"""
import fileinput
import json
import re


def main():
    for line in fileinput.input():
        if line.startswith("FAIL"):
            print(line.rstrip()[:300])
            continue
        if not line.startswith("SERVE"):
            continue
        head, _, rest = line.partition(": {")
        try:
            j = json.loads("{" + rest)
        except ValueError:
            print(line.rstrip()[:300])
            continue
        lat = j.get("latency_ns", {})
        srv = j.get("server_mean_ns", {})
        var = ",".join(f"{k}:{v}" for k, v in j.get("variants", {}).items())
        sl = j.get("slowest")
        slow = ""
        if sl:
            def us(k):
                return sl.get(k + "_ns", 0) / 1e3
            slow = (f" slowest {us('round_trip'):.0f} us (q {us('queue'):.0f} h2d {us('h2d'):.0f} "
                    f"k {us('kernel'):.0f} d2h {us('d2h'):.0f} total {us('total'):.0f});")
        print(f"{head}: {j.get('requests_per_s', 0):9.0f} req/s p50 {lat.get('p50', 0) / 1e3:8.1f} "
              f"p99 {lat.get('p99', 0) / 1e3:8.1f} us; server h2d {srv.get('h2d', 0) / 1e3:.1f} "
              f"kernel {srv.get('kernel', 0) / 1e3:.1f} d2h {srv.get('d2h', 0) / 1e3:.1f} total "
              f"{srv.get('total', 0) / 1e3:.1f}; batch {j.get('mean_batch', 0):.1f} busy "
              f"{j.get('device_busy', 0):.2f};{slow} {var[:120]}")


if __name__ == "__main__":
    main()
