#!/usr/bin/env bash
# Two builds of mfmad side by side under the same batched loads on the CPU
# backend: for each round and load, a fresh daemon of each build in turn
# (BASE first, then NEW), `mfmactl bench --resident --sparse` against it
# (16 connections, a 2:4 f16 weight of M x K, OPENBLAS_NUM_THREADS=1, so
# the GEMM costs next to nothing and the serving path is what is
# measured), and the daemon's CPU time per request by thread from
# /proc/PID/task/*/stat over the run: the loop (the main thread), the
# device's worker (mfmad-dev0), the post threads together (mfmad-post0*),
# everything else; and the client's own user and system time.  At the
# end, each build's medians over the rounds, with the range of req/s.
#   bench/builds_bench.sh BASE_MFMAD NEW_MFMAD [ROUNDS]   (default 5)
#   LOADS="shm:1:256 bytes:1:256 shm:8:64"  kind:N:in_flight (shm: --shm)
#   REQUESTS=300000 M=16 K=16 MFMACTL=build/client/ctl/mfmactl
#   BASE_MFMACTL: the base's own client (default MFMACTL for both), with
#     BASE_LIBS its client library's folder (LD_LIBRARY_PATH), to compare
#     client builds (give the same mfmad twice); BASE_ARGS, NEW_ARGS: more
#     mfmactl bench arguments for the base's or the new runs alone (e.g.
#     NEW_ARGS=--cork)
#   CONF: more of the daemon's configuration (e.g. "limits = { post_threads = 1; };")
# Run it on an otherwise idle machine: on 2 cores the client, the loop,
# the worker and the post threads share them, which is what it measures.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${1:?usage: builds_bench.sh BASE_MFMAD NEW_MFMAD [ROUNDS]}
NEW=${2:?usage: builds_bench.sh BASE_MFMAD NEW_MFMAD [ROUNDS]}
ROUNDS=${3:-5}
LOADS=${LOADS:-shm:1:256 bytes:1:256 shm:8:64}
REQUESTS=${REQUESTS:-300000}
M=${M:-16}
K=${K:-16}
CTL=${MFMACTL:-build/client/ctl/mfmactl}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cat >"$T/mfmad.conf" <<CONF
limits = { max_inflight_per_connection = 256; max_inflight = 4096; };
${CONF:-}
CONF

# "name ticks" for every thread of pid $1, the main thread named "loop".
ticks() {
	for t in /proc/"$1"/task/*; do
		local name
		name=$(cat "$t/comm")
		[ "${t##*/}" = "$1" ] && name=loop
		echo "${t##*/} $name $(awk '{print $14 + $15}' "$t/stat")"
	done
}

run_one() { # build kind n in_flight client client_libs extra_args
	local bin=$1 kind=$2 n=$3 j=$4 ctl=$5 libs=$6 sock="$T/s.sock" shm=()
	[ "$kind" = shm ] && shm=(--shm)
	# shellcheck disable=SC2206
	local extra=($7)
	rm -f "$sock"
	OPENBLAS_NUM_THREADS=1 "$bin" --config "$T/mfmad.conf" --socket "$sock" --backends cpu \
		--threads 1 --log-level warning &
	local pid=$!
	for _ in $(seq 100); do "$CTL" -e "unix:$sock" ping >/dev/null 2>&1 && break; sleep 0.1; done
	ticks "$pid" >"$T/t0"
	LD_LIBRARY_PATH="$libs" /usr/bin/time -f "%U %S" -o "$T/client" "$ctl" -e "unix:$sock" --json bench --resident \
		--sparse --m "$M" --k "$K" --n "$n" --dtype f16 --out-dtype f16 -n "$REQUESTS" \
		-j "$j" --connections 16 --warmup 4 "${shm[@]}" "${extra[@]}" >"$T/bench.json"
	ticks "$pid" >"$T/t1"
	kill -TERM "$pid"
	wait "$pid" || true
	python3 - "$T" <<'PY'
import json, sys
t = sys.argv[1]
b = json.load(open(t + '/bench.json'))
before = {l.split()[0]: int(l.split()[2]) for l in open(t + '/t0')}
roles = {'loop': 0.0, 'worker': 0.0, 'post': 0.0, 'other': 0.0}
for l in open(t + '/t1'):
    tid, name, ticks = l.split()
    us = (int(ticks) - before.get(tid, 0)) * 1e6 / 100 / b['requests']  # 100 ticks a second
    role = ('loop' if name == 'loop' else 'worker' if name.startswith('mfmad-dev')
            else 'post' if name.startswith('mfmad-post') else 'other')
    roles[role] += us
u, s = (float(x) for x in open(t + '/client').read().split())
print('%.0f %.1f %.2f %.2f %.2f %.2f %.2f' % (b['requests_per_s'], b['mean_batch'], roles['loop'],
      roles['worker'], roles['post'], roles['other'], (u + s) * 1e6 / b['requests']))
PY
}

echo "| round | load | build | req/s | mean batch | daemon us/request: loop | worker | post threads | other | client us/request |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
for r in $(seq "$ROUNDS"); do
	for load in $LOADS; do
		IFS=: read -r kind n j <<<"$load"
		for who in base new; do
			bin=$BASE ctl=${BASE_MFMACTL:-$CTL} libs=${BASE_LIBS:-${LD_LIBRARY_PATH:-}}
			args=${BASE_ARGS:-}
			[ "$who" = new ] && bin=$NEW ctl=$CTL libs=${LD_LIBRARY_PATH:-} args=${NEW_ARGS:-}
			read -r rate batch loop worker post other client < \
				<(run_one "$bin" "$kind" "$n" "$j" "$ctl" "$libs" "$args")
			echo "$r $load $who $rate $batch $loop $worker $post $other $client" >>"$T/rows"
			echo "| $r | $load | $who | $rate | $batch | $loop | $worker | $post | $other | $client |"
		done
	done
done
echo
echo "Medians over $ROUNDS rounds (req/s: median, lowest-highest; the rest us/request):"
python3 - "$T/rows" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
keys = []
for r in rows:
    if (r[1], r[2]) not in keys:
        keys.append((r[1], r[2]))
for load, who in keys:
    v = [[float(x) for x in r[3:]] for r in rows if (r[1], r[2]) == (load, who)]
    m = [st.median(c) for c in zip(*v)]
    lo, hi = min(x[0] for x in v), max(x[0] for x in v)
    print('%-12s %-4s req/s %.1fk (%.1f-%.1fk)  batch %.0f  loop %.2f  worker %.2f  post %.2f  other %.2f  client %.2f'
          % (load, who, m[0] / 1e3, lo / 1e3, hi / 1e3, m[1], m[2], m[3], m[4], m[5], m[6]))
PY
