"""Real haproxy with TLS on both hops (deploy/haproxy/mfmad-tls.cfg) in front
of two real mfmad whose TCP listeners speak TLS and ask for client
certificates; certificates made for the run by tests/tls/make_certs.sh,
ports chosen here, everything on loopback.  GEMMs are driven through it
with the client library over TLS (ha_load, the balancer given twice so a
lost connection is reconnected and a GEMM whose answer was lost resent);
node1 is drained and restarted meanwhile; every GEMM must be answered
correctly, 0 errors, and each node must have served some.  A client
without a certificate is refused by HAProxy.  Prints the split and the
requests/s through HAProxy with TLS against TLS direct to the nodes, in one
run.  Exit 77 when haproxy is not installed."""
import os
import shutil
import subprocess
import sys
import time

import fleet
from test_haproxy import compare_rps, completed, parse, run_load, start_haproxy

HERE = os.path.dirname(os.path.abspath(__file__))
CFG = os.path.join(HERE, "..", "..", "deploy", "haproxy", "mfmad-tls.cfg")


def main():
    if shutil.which("haproxy") is None:
        fleet.skip("haproxy is not installed (scripts/setup.sh installs it: apt-get install "
                   "haproxy)")
    t_start = time.monotonic()
    tmp = fleet.tempdir("hatls-")
    certs = fleet.make_certs(os.path.join(tmp, "certs"))
    front = fleet.free_port()
    n1 = fleet.Daemon("node1", tls=certs).start()
    n2 = fleet.Daemon("node2", tls=certs).start()
    ha = start_haproxy(tmp, front, [n1, n2], CFG, {"@CERTS@": certs})
    lb = f"tls:localhost:{front}"
    split = {"node1": 0, "node2": 0}
    stop = os.path.join(tmp, "stop")
    try:
        fleet.wait_for(lambda: fleet.ctl(lb, "ping").returncode == 0, 10, "haproxy to answer")
        time.sleep(0.5)  # both nodes through their first health checks

        # HAProxy asks clients for a certificate of the CA.
        env = dict(os.environ)
        del env["MFMA_TLS_CERT"], env["MFMA_TLS_KEY"]
        r = subprocess.run([fleet.MFMACTL, "-e", lb, "--timeout", "5000", "ping"],
                           capture_output=True, text=True, env=env, timeout=30)
        print(f"client without a certificate: exit {r.returncode}: {r.stderr.strip()}")
        assert r.returncode == 3, r.stderr

        load = run_load(f"{lb},{lb}", 4, 45, stop)
        fleet.wait_for(lambda: completed(n1) + completed(n2) > 200, 20, "load through haproxy")

        split["node1"] += completed(n1)
        fleet.ctl(n1.endpoint, "drain", check=True)
        rc = n1.wait(30)
        assert rc == 0, f"node1 exited {rc} after the drain: {n1.logtext()}"
        print(f"node1 drained over TLS and exited 0 ({split['node1']} GEMMs)")
        n1 = fleet.Daemon("node1", port=n1.port, metrics_port=n1.metrics_port, tls=certs).start()
        time.sleep(1.5)  # back in haproxy's pool and taking load

        open(stop, "w").close()
        out, err = load.communicate(timeout=30)
        r = parse(out)
        split["node1"] += completed(n1)
        split["node2"] += completed(n2)
        print(f"through haproxy, TLS on both hops: {out.strip()}")
        assert load.returncode == 0 and r["errors"] == "0" and r["wrong"] == "0", \
            f"the client saw errors: {out} {err}"
        assert int(r["ok"]) > 200
        assert split["node1"] > 0 and split["node2"] > 0, split
        total = split["node1"] + split["node2"]
        print("traffic split (each node's counters, over its restart): " +
              ", ".join(f"{k} {v} ({100.0 * v / max(total, 1):.0f}%)" for k, v in split.items()))
        for n in (n1, n2):
            ok = [ln for ln in fleet.ctl(n.endpoint, "status", "--json").stdout.splitlines()]
            assert ok, f"{n.name} does not answer over TLS"

        os.unlink(stop)
        compare_rps(lb, [n1, n2], stop, ", all TLS")
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
