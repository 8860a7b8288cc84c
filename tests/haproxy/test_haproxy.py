"""Real haproxy (deploy/haproxy/mfmad.cfg) in front of two real mfmad on
loopback ports chosen here.  GEMMs are driven through it with the client
library (ha_load: blocking calls, the balancer's address given twice so
that a lost connection is reconnected and a GEMM whose answer was lost is
resent); node1 is drained and restarted, node2 is killed with -9 and
restarted; every GEMM must be answered correctly, 0 errors.  Prints the
traffic split from each node's counters, then the requests/s through
HAProxy and direct to the nodes, in one run.  Exit 77 when haproxy is not
installed."""
import os
import shutil
import signal
import subprocess
import sys
import time

import fleet

HERE = os.path.dirname(os.path.abspath(__file__))
CFG = os.path.join(HERE, "..", "..", "deploy", "haproxy", "mfmad.cfg")


def completed(d):
    return sum(x["completed"] for x in d.status()["devices"])


def start_haproxy(tmp, front, nodes, cfg=CFG, names=None):
    """haproxy on cfg with its @...@ names replaced: the ports, and names
    ({"@CERTS@": dir}, say)."""
    with open(cfg) as f:
        text = f.read()
    text = text.replace("@FRONT_PORT@", str(front))
    for k, v in (names or {}).items():
        text = text.replace(k, v)
    for i, n in enumerate(nodes, 1):
        text = text.replace(f"@NODE{i}_PORT@", str(n.port))
        text = text.replace(f"@NODE{i}_METRICS@", str(n.metrics_port))
    cfg = os.path.join(tmp, "haproxy.cfg")
    with open(cfg, "w") as f:
        f.write(text)
    chk = subprocess.run(["haproxy", "-c", "-f", cfg], capture_output=True, text=True)
    assert chk.returncode == 0, f"haproxy -c: {chk.stdout} {chk.stderr}"
    log = open(os.path.join(tmp, "haproxy.log"), "wb")
    return subprocess.Popen(["haproxy", "-db", "-f", cfg], stdout=log, stderr=log)


def run_load(endpoint, threads, seconds, stop):
    return subprocess.Popen([fleet.HA_LOAD, endpoint, str(threads), str(seconds), stop],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def parse(out):
    return dict(kv.split("=") for kv in out.split())


def compare_rps(lb, nodes, stop, what):
    """Prints the requests/s through the balancer (4 client threads, 3 s)
    against direct to the two nodes (2 threads each), one after the other."""
    out_ha, _ = run_load(lb, 4, 3, stop).communicate(timeout=30)
    direct = [run_load(n.endpoint, 2, 3, stop) for n in nodes]
    rps_direct = sum(float(parse(d.communicate(timeout=30)[0])["requests_per_s"])
                     for d in direct)
    rps_ha = float(parse(out_ha)["requests_per_s"])
    print(f"requests/s, 32x64x16 f32 GEMMs, 4 blocking client threads, 3 s{what}: "
          f"through haproxy {rps_ha:.0f}, direct {rps_direct:.0f} "
          f"({100.0 * rps_ha / rps_direct:.0f}% of direct)")


def main():
    if shutil.which("haproxy") is None:
        fleet.skip("haproxy is not installed (scripts/setup.sh installs it: apt-get install "
                   "haproxy)")
    t_start = time.monotonic()
    tmp = fleet.tempdir("ha-")
    front = fleet.free_port()
    n1 = fleet.Daemon("node1").start()
    n2 = fleet.Daemon("node2").start()
    ha = start_haproxy(tmp, front, [n1, n2])
    lb = f"tcp:127.0.0.1:{front}"
    split = {"node1": 0, "node2": 0}
    stop = os.path.join(tmp, "stop")
    try:
        fleet.wait_for(lambda: fleet.ctl(lb, "ping").returncode == 0, 10, "haproxy to answer")
        time.sleep(0.5)  # both nodes through their first health checks
        # The balancer given twice: the client reconnects to it (and resends
        # a GEMM whose answer was lost) when a node goes away under it.
        load = run_load(f"{lb},{lb}", 4, 45, stop)
        fleet.wait_for(lambda: completed(n1) + completed(n2) > 200, 15, "load through haproxy")

        # Drain node1: it answers what it has, leaves, and comes back.
        split["node1"] += completed(n1)
        assert split["node1"] > 0 and completed(n2) > 0, \
            f"leastconn did not spread the load: node1 {split['node1']}, node2 {completed(n2)}"
        fleet.ctl(n1.endpoint, "drain", check=True)
        rc = n1.wait(30)
        assert rc == 0, f"node1 exited {rc} after the drain: {n1.logtext()}"
        print(f"node1 drained and exited 0 ({split['node1']} GEMMs)")
        n1 = fleet.Daemon("node1", port=n1.port, metrics_port=n1.metrics_port).start()
        # Back in haproxy's pool (rise 2 x 200 ms); the load's connections
        # stay on node2 until it is killed.
        time.sleep(1.0)

        # Kill node2 outright: its connections break mid-request.  It
        # holds the load's connections now (node1's moved to it).
        before = completed(n2)
        time.sleep(0.2)
        split["node2"] += completed(n2)
        assert split["node2"] > before, "node2 was not serving when it was killed"
        n2.kill(signal.SIGKILL)
        print(f"node2 killed with -9 ({split['node2']} GEMMs before)")
        time.sleep(0.5)
        n2 = fleet.Daemon("node2", port=n2.port, metrics_port=n2.metrics_port).start()
        time.sleep(1.0)

        open(stop, "w").close()
        out, err = load.communicate(timeout=30)
        r = parse(out)
        split["node1"] += completed(n1)
        split["node2"] += completed(n2)
        print(f"through haproxy: {out.strip()}")
        assert load.returncode == 0 and r["errors"] == "0" and r["wrong"] == "0", \
            f"the client saw errors: {out} {err}"
        total = split["node1"] + split["node2"]
        print("traffic split (each node's device counters, over its restarts): " +
              ", ".join(f"{k} {v} ({100.0 * v / max(total, 1):.0f}%)" for k, v in split.items()) +
              f"; {r['ok']} answered to the client (node2's last answers before the "
              f"kill are not in its counters, which die with it)")

        # Requests/s through haproxy against direct, 4 client threads, 3 s each.
        os.unlink(stop)
        compare_rps(lb, [n1, n2], stop, "")
        print(f"done in {time.monotonic() - t_start:.1f} s")
    finally:
        open(stop, "w").close()
        ha.terminate()
        ha.wait(10)
        n1.kill()
        n2.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
