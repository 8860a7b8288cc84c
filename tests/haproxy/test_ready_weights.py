"""/readyz says ready only when every weight the node is to serve is
resident: a weight loaded into a daemon that keeps its weights
(weights.persist) is restored at the next start before /readyz first
answers 200, and a GEMM on it through the first connection works."""
import os
import sys

import fleet


def main():
    state = fleet.tempdir("state-")
    conf = f'weights = {{ persist = true; state_dir = "{state}"; }};'
    d = fleet.Daemon("ready", conf=conf).start()
    npy = os.path.join(d.dir, "w1.npy")
    try:
        # 16 MiB: restoring it takes long enough for an early 200 to show.
        fleet.ctl(d.endpoint, "random", "-o", npy, "--shape", "2048x2048", "--dtype", "f32",
                  check=True)
        fleet.ctl(d.endpoint, "load", "w1", npy, check=True)
        d.kill(fleet.signal.SIGTERM)
        assert d.proc.returncode == 0
        d = fleet.Daemon("ready", port=d.port, metrics_port=d.metrics_port, conf=conf)
        d.start(wait_ready=False)
        seen = []
        def ready():
            code = fleet.readyz(d.metrics_port)
            seen.append(code)
            return code == 200
        fleet.wait_for(ready, 30, "/readyz 200 after the restart")
        names = fleet.ctl(d.endpoint, "weights", "--json", check=True).stdout
        assert '"w1"' in names, f"ready without w1 resident: {names}"
        b = os.path.join(d.dir, "b.npy")
        fleet.ctl(d.endpoint, "random", "-o", b, "--shape", "2048x8", "--dtype", "f32", check=True)
        fleet.ctl(d.endpoint, "submit", "--weight", "w1", "-b", b, check=True)
        print(f"/readyz before 200: {sorted(set(map(str, seen[:-1])))}; at the first 200, w1 "
              f"(2048x2048 f32) was resident and served a GEMM")
    finally:
        d.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
