#!/usr/bin/env bash
# The busy-poll knobs side by side in one run (issue 10): one daemon on a
# temporary Unix socket (CPU backend, one thread), a resident random M x K
# f32 weight, then ROUNDS rounds of four settings in turn:
#   loop_poll_us 0 or LOOP_US (changed with SIGHUP) x client spin 0 or SPIN_US
# each running bench/rtt_bench (16x16x16 f32 against the raw Unix echo,
# MFMA_SPIN_US) and `mfmactl --spin-us S bench -j 1 --weight w --n N --shm`
# (one in flight, B and D in a region).  Prints every round and the median
# over rounds of each p50.  The daemon and the programs come from BUILD
# (default build/).
#   bench/spin_bench.sh [ROUNDS]      (default 4)
#   LOOP_US=300 SPIN_US=300 WORKER_POLL_US=0 M=256 K=256 N=16 RTT_ITERS=3000 BENCH_N=2000
#   DTYPE=f32 SPARSE= (SPARSE=1: a 2:4 weight, loaded with --sparse validate)
#   OUT_DTYPE= (D's dtype for mfmactl bench; empty: its default for DTYPE)
#   RTT_ITERS=0 leaves rtt_bench out (on a GPU host the 16x16x16 f32 goes to the GPU).
#   MFMAD_ARGS: more arguments for mfmad (e.g. "--backends cuda").
# On a GPU host, e.g.: M=14336 K=4096 N=16 DTYPE=f16 SPARSE=1 RTT_ITERS=0 bench/spin_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ROUNDS=${1:-4}
LOOP_US=${LOOP_US:-300}
SPIN_US=${SPIN_US:-300}
WORKER_POLL_US=${WORKER_POLL_US:-0}
M=${M:-256}
K=${K:-256}
N=${N:-16}
RTT_ITERS=${RTT_ITERS:-3000}
BENCH_N=${BENCH_N:-2000}
DTYPE=${DTYPE:-f32}
SPARSE=${SPARSE:-}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
unset MFMA_SPIN_US

dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
conf() {
  printf 'cpu = { threads = 1; devices = 1; };\nlimits = { loop_poll_us = %s; worker_poll_us = %s; max_frame_mb = 512; };\n' \
    "$1" "$WORKER_POLL_US" > "$dir/mfmad.conf"
}
conf 0
# shellcheck disable=SC2086 # MFMAD_ARGS is a list of arguments
"$BUILD/daemon/mfmad" -c "$dir/mfmad.conf" -s "$dir/s.sock" ${MFMAD_ARGS:-} > "$dir/mfmad.log" 2>&1 &
pid=$!
ctl=("$BUILD/client/ctl/mfmactl" -e "unix:$dir/s.sock")
for _ in $(seq 100); do "${ctl[@]}" ping -c 1 >/dev/null 2>&1 && break; sleep 0.1; done
if [ -n "$SPARSE" ]; then
  "${ctl[@]}" random -o "$dir/w.npy" --shape "${M}x${K}" --dtype "$DTYPE" --seed 1 --sparse24 >/dev/null
  "${ctl[@]}" load w "$dir/w.npy" --sparse validate >/dev/null
else
  "${ctl[@]}" random -o "$dir/w.npy" --shape "${M}x${K}" --dtype "$DTYPE" --seed 1 >/dev/null
  "${ctl[@]}" load w "$dir/w.npy" >/dev/null
fi

# Sets limits.loop_poll_us and waits until the daemon has reloaded.
set_loop() {
  local before
  before=$(grep -c "configuration reloaded" "$dir/mfmad.log" || true)
  conf "$1"
  kill -HUP "$pid"
  for _ in $(seq 200); do
    [ "$(grep -c "configuration reloaded" "$dir/mfmad.log" || true)" -gt "$before" ] && return 0
    sleep 0.02
  done
  echo "spin_bench: the daemon did not reload" >&2
  exit 1
}

echo "# spin_bench: $(date -u +%FT%TZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), worker_poll_us $WORKER_POLL_US,"\
     "rtt_bench $RTT_ITERS iterations, mfmactl bench $BENCH_N requests of ${M}x${N}x${K} $DTYPE${SPARSE:+ 2:4} --shm${OUT_DTYPE:+ out $OUT_DTYPE}"
echo
echo "| round | loop_poll_us | client spin us | echo p50 | rtt_bench mfmad p50 | mfmad - echo | bench --shm p50 | bench server total | bench kernel |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
results="$dir/results"
: > "$results"
for round in $(seq "$ROUNDS"); do
  for loop in 0 "$LOOP_US"; do
    set_loop "$loop"
    for spin in 0 "$SPIN_US"; do
      echo_p50=0 gemm_p50=0
      if [ "$RTT_ITERS" -gt 0 ]; then
        rtt=$(MFMA_SPIN_US=$spin "$BUILD/bench/rtt_bench" "unix:$dir/s.sock" "$RTT_ITERS")
        echo_p50=$(awk -F'|' '/raw Unix-socket echo/ { gsub(/ /, "", $4); print $4 }' <<<"$rtt")
        gemm_p50=$(awk -F'|' '/mfmad GEMM/ { gsub(/ /, "", $4); print $4 }' <<<"$rtt")
      fi
      # shellcheck disable=SC2086 # OUT_DTYPE is empty or one word
      js=$("${ctl[@]}" --spin-us "$spin" --json bench -n "$BENCH_N" -j 1 --weight w --n "$N" \
           --warmup 50 --shm ${OUT_DTYPE:+--out-dtype $OUT_DTYPE})
      read -r b50 btot bker bspin < <(python3 -c '
import json, sys
j = json.loads(sys.argv[1])
print(j["latency_ns"]["p50"] / 1e3, j["server_mean_ns"]["total"] / 1e3,
      j["server_mean_ns"]["kernel"] / 1e3, j["spin_us"])' "$js")
      [ "$bspin" = "$spin" ] || { echo "spin_bench: bench reports spin_us $bspin, not $spin" >&2; exit 1; }
      printf '| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n' "$round" "$loop" "$spin" \
        "$echo_p50" "$gemm_p50" "$(awk -v g="$gemm_p50" -v e="$echo_p50" 'BEGIN { print g - e }')" "$b50" "$btot" "$bker"
      echo "$loop $spin $echo_p50 $gemm_p50 $b50" >> "$results"
    done
  done
done
echo
echo "Medians over $ROUNDS rounds (us):"
echo
echo "| loop_poll_us | client spin us | echo p50 | rtt_bench mfmad p50 | mfmad - echo | bench --shm p50 |"
echo "|---:|---:|---:|---:|---:|---:|"
python3 - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    loop, spin, e, g, b = line.split()
    rows.setdefault((int(loop), int(spin)), []).append((float(e), float(g), float(b)))
for (loop, spin), v in sorted(rows.items()):
    med = lambda i: statistics.median(x[i] for x in v)
    print(f"| {loop} | {spin} | {med(0):.1f} | {med(1):.1f} | "
          f"{statistics.median(x[1] - x[0] for x in v):.1f} | {med(2):.1f} |")
PY
echo
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
