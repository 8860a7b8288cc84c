#!/usr/bin/env bash
# Regions against the byte path in one run (issue 10): a daemon on a
# temporary Unix socket, one resident random M x K weight, then for each N
# `mfmactl bench` one in flight without and with --shm, interleaved, and a
# table of p50 round trip and requests/s.  The daemon and mfmactl come from
# BUILD (default build/).
#   bench/shm_bench.sh [M K] [REQUESTS...]   defaults: 4096 4096, and
#   N=16: 400, N=256: 100, N=4096: 4 requests (the CPU is slow at 4096).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
M=${1:-4096}
K=${2:-4096}
ns=(16 256 4096)
reqs=(${3:-400} ${4:-100} ${5:-4})
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
printf 'cpu = { threads = %s; devices = 1; };\nlimits = { max_frame_mb = 512; };\n' \
  "${THREADS:-0}" > "$dir/mfmad.conf"
OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} "$BUILD/daemon/mfmad" -c "$dir/mfmad.conf" \
  -s "$dir/s.sock" > "$dir/mfmad.log" 2>&1 &
pid=$!
ctl=("$BUILD/client/ctl/mfmactl" -e "unix:$dir/s.sock")
for _ in $(seq 50); do "${ctl[@]}" ping -c 1 >/dev/null 2>&1 && break; sleep 0.1; done
"${ctl[@]}" random -o "$dir/w.npy" --shape "${M}x${K}" --dtype f32 --seed 1 >/dev/null
"${ctl[@]}" load w "$dir/w.npy" >/dev/null
echo "| N | path | p50 round trip | requests/s | server total (mean) | kernel (mean) |"
echo "|---:|---|---:|---:|---:|---:|"
for i in "${!ns[@]}"; do
  n=${ns[$i]}
  for path in socket shm; do
    extra=()
    [ "$path" = shm ] && extra=(--shm)
    out=$("${ctl[@]}" --json bench -n "${reqs[$i]}" -j 1 --weight w --n "$n" --dtype f32 \
          --warmup 1 "${extra[@]}")
    python3 - "$n" "$path" "$out" <<'PY'
import json, sys
n, path, j = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
us = lambda ns: f"{ns / 1000:.0f} us" if ns < 10_000_000 else f"{ns / 1e6:.1f} ms"
s = j["server_mean_ns"]
print(f"| {n} | {path} | {us(j['latency_ns']['p50'])} | {j['requests_per_s']:.1f} | "
      f"{us(s['total'])} | {us(s['kernel'])} |")
PY
  done
done
