#!/usr/bin/env bash
# Reader threads side by side (limits.reader_threads): the same loads with
# each setting in SETTINGS in turn, ROUNDS rounds, the settings alternating
# within each round.  reader_threads takes a restart, so each setting gets
# its own daemon (on a temporary Unix socket); each load is
# `mfmactl bench --resident` (a random weight loaded first, one connection
# per request in flight).  Every run prints one line: requests/s, p50 and
# p99 of the client's round trip, the mean batch, the CPU share of the
# loop thread (the main thread, "mfmad") and of the reader threads
# together ("mfmad-read*"), from /proc/PID/task/*/stat over the run, each
# also as CPU time per request (warm-up requests counted), and
# how many frames the readers took (/metrics); at the end, the median
# requests/s over the rounds of each setting and load.  The daemon and
# mfmactl come from BUILD (default build/).
#   bench/readers_bench.sh [ROUNDS]    (default 2)
#   SETTINGS="0 2 4"   reader_threads values
#   LOADS="8:64:4000 1:256:20000"  N:in_flight:requests
#   M=16 K=4096 DTYPE=f32 SPARSE=  the weight (SPARSE=1: 2:4, packed by mfmactl)
#   READER_MIN_KB=64 WHEN_BUSY=true WARMUP=8 DEVICE= (DEVICE=0: --device 0)
#   MFMAD_ARGS: more arguments for mfmad (e.g. "--backends cuda")
#   TAG=READERS: the first word of every printed line
# On this repository's CPU backend the default shape sends 128 KiB of B per
# request at N=8 (4096 x 8 f32), as the H200's f16 load does.  On a GPU
# host, e.g.:
#   M=8192 K=8192 DTYPE=f16 SPARSE=1 DEVICE=0 SETTINGS="0 4" MFMAD_ARGS="--backends cuda" \
#     LOADS="8:64:8000 1:256:40000" bench/readers_bench.sh 2
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ROUNDS=${1:-2}
SETTINGS=${SETTINGS:-0 2 4}
LOADS=${LOADS:-8:64:4000 1:256:20000}
M=${M:-16}
K=${K:-4096}
DTYPE=${DTYPE:-f32}
SPARSE=${SPARSE:-}
READER_MIN_KB=${READER_MIN_KB:-64}
WHEN_BUSY=${WHEN_BUSY:-true}
WARMUP=${WARMUP:-8}
TAG=${TAG:-READERS}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
unset MFMA_SPIN_US

dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
ctl=("$BUILD/client/ctl/mfmactl" -e "unix:$dir/s.sock" --timeout 600000)
port=$((20000 + RANDOM % 20000))

start() {
	cat >"$dir/mfmad.conf" <<CONF
limits = { max_frame_mb = 1800; max_inflight_mb = 65536; max_inflight_per_connection = 256;
           max_inflight = 4096; max_connections = 1024;
           reader_threads = $1; reader_min_kb = $READER_MIN_KB; reader_when_busy = $WHEN_BUSY; };
metrics = { enabled = true; port = $port; };
CONF
	rm -f "$dir/s.sock"
	# shellcheck disable=SC2086 # MFMAD_ARGS is a list of arguments
	"$BUILD/daemon/mfmad" -c "$dir/mfmad.conf" -s "$dir/s.sock" --log-level warning ${MFMAD_ARGS:-} \
		>>"$dir/mfmad.log" 2>&1 &
	pid=$!
	for _ in $(seq 150); do "${ctl[@]}" ping -c 1 >/dev/null 2>&1 && return; sleep 0.2; done
	echo "mfmad did not start:" >&2
	tail -20 "$dir/mfmad.log" >&2
	exit 1
}

stop() {
	kill -TERM "$pid"
	wait "$pid" || echo "mfmad exited with $?" >&2
	pid=
}

# CPU ticks of the loop thread and of the reader threads together.
ticks() {
	awk -v main="$1" 'FNR == 1 && FILENAME ~ /comm$/ { name = $1 }
		FNR == 1 && FILENAME ~ /stat$/ { split(FILENAME, f, "/"); t = $14 + $15
			if (f[5] == main) loop += t; else if (name ~ /^mfmad-read/) rd += t }
		END { print loop + 0, rd + 0 }' \
		$(for t in /proc/"$1"/task/*; do echo "$t/comm $t/stat"; done) 2>/dev/null
}

counter() {
	{
		exec 3<>"/dev/tcp/127.0.0.1/$port" &&
			printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 && cat <&3
		exec 3<&-
	} 2>/dev/null | awk -v k="$1" '$1 == k { print $2 }'
}

num() { grep -o "\"$1\": *[0-9.e+]*" | head -1 | sed 's/.*: *//'; }

hz=$(getconf CLK_TCK)
results="$dir/results"
for round in $(seq "$ROUNDS"); do
	for r in $SETTINGS; do
		start "$r"
		for load in $LOADS; do
			IFS=: read -r n j req <<<"$load"
			read -r l0 r0 <<<"$(ticks "$pid")"
			f0=$(counter mfmad_reader_frames_total)
			t0=$(date +%s.%N)
			# shellcheck disable=SC2046 # the optional flags are words
			out=$("${ctl[@]}" --json bench --resident $([ -n "$SPARSE" ] && echo --sparse) \
				--m "$M" --k "$K" --n "$n" --dtype "$DTYPE" -n "$req" -j "$j" \
				--warmup "$WARMUP" ${DEVICE:+--device "$DEVICE"} 2>&1) || true
			t1=$(date +%s.%N)
			read -r l1 r1 <<<"$(ticks "$pid")"
			f1=$(counter mfmad_reader_frames_total)
			rps=$(num requests_per_s <<<"$out")
			p50=$(num p50 <<<"$out")
			p99=$(num p99 <<<"$out")
			batch=$(num mean_batch <<<"$out")
			errs=$(num errors <<<"$out")
			if [ -z "$rps" ]; then
				echo "$TAG round=$round readers=$r N=$n in_flight=$j: bench failed: $(echo "$out" | tail -3)"
				continue
			fi
			awk -v tag="$TAG" -v round="$round" -v r="$r" -v n="$n" -v j="$j" -v rps="$rps" \
				-v p50="$p50" -v p99="$p99" -v b="$batch" -v e="${errs:-?}" -v hz="$hz" \
				-v w="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
				-v nreq=$((req + WARMUP * j)) -v dl=$((l1 - l0)) -v dr=$((r1 - r0)) -v f=$(( ${f1:-0} - ${f0:-0} )) \
				-v shape="${M}x${K} $DTYPE${SPARSE:+ 2:4}" 'BEGIN {
				printf "%s round=%s readers=%s %s N=%s in_flight=%s: %.0f req/s p50 %.1f us p99 %.1f us batch %s errors %s loop %.0f%% (%.1f us/req) readers %.0f%% (%.1f us/req) reader_frames %d\n",
					tag, round, r, shape, n, j, rps, p50 / 1000, p99 / 1000, b, e,
					100 * dl / hz / w, 1e6 * dl / hz / nreq, 100 * dr / hz / w,
					1e6 * dr / hz / nreq, f }'
			echo "$r $n $j $rps" >>"$results"
		done
		stop
	done
done
echo "$TAG median req/s over $ROUNDS round(s):"
for load in $LOADS; do
	IFS=: read -r n j _ <<<"$load"
	for r in $SETTINGS; do
		med=$(awk -v r="$r" -v n="$n" -v j="$j" '$1 == r && $2 == n && $3 == j { print $4 }' "$results" |
			sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }')
		echo "$TAG   N=$n in_flight=$j readers=$r: ${med:-?} req/s"
	done
done
