"""Endpoint-list failover with two real daemons: the client library is
given tcp:A,tcp:B, A is killed with -9 under load, and every GEMM is
still answered correctly (those lost with A are resent to B)."""
import os
import subprocess
import sys
import time

import fleet


def main():
    a = fleet.Daemon("fo-a").start()
    b = fleet.Daemon("fo-b").start()
    stop = os.path.join(fleet.tempdir("fo-"), "stop")
    try:
        load = subprocess.Popen([fleet.HA_LOAD, f"{a.endpoint},{b.endpoint}", "4", "20", stop],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        fleet.wait_for(lambda: sum(x["completed"] for x in a.status()["devices"]) > 50, 15,
                       "load on A")
        a.kill()
        done_b = sum(x["completed"] for x in b.status()["devices"])
        time.sleep(1.0)
        open(stop, "w").close()
        out, err = load.communicate(timeout=30)
        after_b = sum(x["completed"] for x in b.status()["devices"])
        print(out.strip())
        assert load.returncode == 0, f"ha_load failed: {out} {err}"
        assert after_b > done_b, "B took no load after A was killed"
        print(f"A killed with -9; B answered {after_b - done_b} GEMMs after that; 0 errors")
    finally:
        a.kill()
        b.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
