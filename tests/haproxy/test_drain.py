"""Drain against the real daemon, both ways (mfmactl drain and SIGUSR1):
a GEMM in flight is answered, /readyz says 503 before the daemon exits,
new connections are refused, and the daemon exits 0."""
import signal
import subprocess
import sys
import time

import fleet


def drain_once(how):
    d = fleet.Daemon(f"drain-{how}", threads=1).start()
    try:
        # Four large GEMMs, one per connection, queued on the one CPU device:
        # in flight once the daemon has them all.
        benches = [subprocess.Popen(
            [fleet.MFMACTL, "-e", d.endpoint, "--timeout", "60000", "bench", "-n", "1", "-j", "1",
             "--warmup", "0", "--m", "2048", "--n", "2048", "--k", "2048", "--dtype", "f32",
             "--seed", str(i + 1)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
        # Queued or running on the device, not merely decoding: a frame
        # still decoding when the drain starts is refused, by design.
        def queued():
            devs = d.status()["devices"]
            waiting = sum(x["queue_depth"] + x["in_flight"] for x in devs)
            return waiting >= 1 and waiting + sum(x["completed"] for x in devs) >= 4
        fleet.wait_for(queued, 20, "four GEMMs on the device, some still waiting")
        t0 = time.monotonic()
        if how == "ctl":
            fleet.ctl(d.endpoint, "drain", check=True)
        else:
            d.proc.send_signal(signal.SIGUSR1)
        fleet.wait_for(lambda: fleet.readyz(d.metrics_port) == 503, 5, "/readyz 503")
        flipped = time.monotonic() - t0
        assert d.proc.poll() is None, "the daemon exited before the GEMM in flight was done"
        r = fleet.ctl(d.endpoint, "ping")
        assert r.returncode != 0 and "refused" in r.stderr, \
            f"a new connection was not refused: {r.returncode} {r.stderr}"
        for b in benches:
            out, err = b.communicate(timeout=60)
            assert b.returncode == 0, f"a GEMM in flight failed: {out} {err}"
        rc = d.wait(60)
        assert rc == 0, f"exit status {rc}: {d.logtext()}"
        print(f"drain via {how}: /readyz 503 after {flipped * 1000:.0f} ms, new connection "
              f"refused, the 4 GEMMs in flight answered, exit 0 after "
              f"{(time.monotonic() - t0) * 1000:.0f} ms")
    finally:
        d.kill()


def main():
    drain_once("ctl")
    drain_once("sigusr1")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
