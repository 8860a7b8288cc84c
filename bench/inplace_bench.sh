#!/usr/bin/env bash
# Large frames with and without the double copy (issue 10), in one run: two
# daemons side by side on temporary Unix sockets, "before" (a build of the
# commit to compare with) and "after" (BUILD, default build/), each with
# one resident random M x K f32 weight (CPU backend, one thread).  For each
# N, interleaved, ROUNDS times: `mfmactl bench` one in flight (submit and
# wait, D left to the library) and bench/blocking_bench (blocking
# mfma_gemm, D into the caller's buffer), each through its side's own
# client library; then bench/rtt_bench (16x16x16 against a raw echo).
# The programs are this build's; only the daemon and libmfmaclient differ
# (their public API is the same), chosen with LD_LIBRARY_PATH.
#
#   BEFORE_MFMAD=path/mfmad BEFORE_LIB=dir-of-libmfmaclient.so.0 \
#     bench/inplace_bench.sh [M K [ROUNDS]]        defaults: 1024 4096 2
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
: "${BEFORE_MFMAD:?set BEFORE_MFMAD to the mfmad to compare with}"
: "${BEFORE_LIB:?set BEFORE_LIB to the directory of its libmfmaclient.so.0}"
M=${1:-1024}
K=${2:-4096}
ROUNDS=${3:-2}
ns=(16 64 256)
reqs=(200 100 40)
dir=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$dir"' EXIT
printf 'cpu = { threads = 1; devices = 1; };\nlimits = { max_frame_mb = 512; };\n' > "$dir/mfmad.conf"
declare -A mfmad=([before]="$BEFORE_MFMAD" [after]="$BUILD/daemon/mfmad")
declare -A lib=([before]="$BEFORE_LIB" [after]="$BUILD/client/lib")
ctl() { local side=$1; shift; LD_LIBRARY_PATH="${lib[$side]}" "$BUILD/client/ctl/mfmactl" -e "unix:$dir/$side.sock" "$@"; }
for side in before after; do
  OPENBLAS_NUM_THREADS=1 "${mfmad[$side]}" -c "$dir/mfmad.conf" -s "$dir/$side.sock" \
    > "$dir/$side.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do ctl "$side" ping -c 1 >/dev/null 2>&1 && break; sleep 0.1; done
done
ctl after random -o "$dir/w.npy" --shape "${M}x${K}" --dtype f32 --seed 1 >/dev/null
for side in before after; do ctl "$side" load w "$dir/w.npy" >/dev/null; done
echo "| N | round | side | path | p50 us | client encode / send / wait / decode (us) | server queue / kernel / total (us) | server total - queue - kernel (us) |"
echo "|---:|---:|---|---|---:|---|---|---:|"
for round in $(seq "$ROUNDS"); do
  for i in "${!ns[@]}"; do
    n=${ns[$i]}
    for side in before after; do
      out=$(ctl "$side" --json bench -n "${reqs[$i]}" -j 1 --weight w --n "$n" --dtype f32 --warmup 2)
      python3 - "$n" "$round" "$side" "$out" <<'PY'
import json, sys
n, rnd, side, j = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
c, s = j["client_mean_ns"], j["server_mean_ns"]
u = lambda x: f"{x / 1000:.1f}"
print(f"| {n} | {rnd} | {side} | mfmactl bench (submit, no d) | {u(j['latency_ns']['p50'])} | "
      f"{u(c['encode'])} / {u(c['send'])} / {u(c['wait'])} / {u(c['decode'])} | "
      f"{u(s['queue'])} / {u(s['kernel'])} / {u(s['total'])} | "
      f"{u(s['total'] - s['queue'] - s['kernel'])} |")
PY
      out=$(LD_LIBRARY_PATH="${lib[$side]}" "$BUILD/bench/blocking_bench" "unix:$dir/$side.sock" w \
            "$K" "$n" "${reqs[$i]}" d)
      python3 - "$n" "$round" "$side" "$out" <<'PY'
import json, sys
n, rnd, side, j = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
c, s = j["client_us"], j["server_us"]
print(f"| {n} | {rnd} | {side} | blocking mfma_gemm, d given | {j['p50_us']:.1f} | "
      f"{c['encode']:.1f} / {c['send']:.1f} / {c['wait']:.1f} / {c['decode']:.1f} | "
      f"{s['queue']:.1f} / {s['kernel']:.1f} / {s['total']:.1f} | "
      f"{s['total'] - s['queue'] - s['kernel']:.1f} |")
PY
    done
  done
done
echo
for round in 1 2; do
  for side in before after; do
    echo "rtt_bench, $side, round $round:"
    LD_LIBRARY_PATH="${lib[$side]}" "$BUILD/bench/rtt_bench" "unix:$dir/$side.sock" 3000 | grep -E '^\| (raw|mfmad|difference)|breakdown'
  done
done
