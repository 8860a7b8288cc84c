#!/bin/bash
# The serving path on one GPU (called by device_round.sh serving): memfd
# regions (issue 10) against bytes in the frames, and the worker's idle
# poll, in one run through the real daemon and mfmactl over a Unix socket.
#  1. correctness with --shm: mfmactl submit --shm --check (float64
#     reference in the client) for f16, bf16 and i8, dense and 2:4, odd
#     shapes, C with beta, and a resident weight; the CUDA backend has
#     registered the region (cuMemHostRegister), so these are its direct
#     copies;
#  2. one request in flight on a resident 14336x4096 2:4 f16 weight,
#     N = 16, 64, 256: bytes, then --shm, side by side; with
#     limits.worker_poll_us 0 and then 300 (SIGHUP between);
#  3. the batching loads of batch_bench.sh (8192x8192 2:4 f16; N=8 x 64
#     in flight, N=1 x 256 in flight): bytes, then --shm; then with
#     batching off (SIGHUP), bytes and --shm, for the ratios in one run;
#     each after WARMUP (default 32) unmeasured requests per connection:
#     every bench loads its own weight, and a batch width a provider sees
#     first costs its plan (cuSPARSELt's search, some 60 ms) once;
#  3a. (batchcheck) batched loads with every answer checked against
#     float64 (mfmactl bench --check), f16/bf16, 2:4/dense, bytes/--shm;
#  3b. (step alone) one request in flight on that weight, N=8, batching
#     on and off alternating, bytes and --shm;
#  4. (MULTI=1, a machine of several GPUs) the batching loads pinned to
#     device 0 and left to the scheduler, bytes and --shm.
#
# E2E_PINNED_ANSWERS_MB, when set, is cuda.pinned_answers_mb (0: answer
# frames on the heap); E2E_PINNED_READS_MB, when set, limits.pinned_reads_mb
# (0: request frames on the heap); E2E_POST_THREADS, E2E_READER_THREADS,
# E2E_READER_MIN_KB and E2E_OVERLAP, when set, limits.post_threads,
# reader_threads, reader_min_kb and batching.overlap; E2E_MAX_COLUMNS and
# E2E_MAX_DELAY_US, batching.max_columns and max_queue_delay_us; E2E_CONNECTIONS,
# the batching loads' client connections (default: one per request in
# flight, mfmactl bench's); E2E_COPY_STREAM,
# E2E_DMA_PARTS_KB, E2E_REGION_COPIES, E2E_OUT_STREAM, E2E_GATE and E2E_TILE_OUT,
# cuda.copy_stream, dma_parts_kb, region_copies, out_stream, gate and tile_out;
# E2E_LOOP_POLL_US, limits.loop_poll_us (the client's spin comes from
# MFMA_SPIN_US in the environment, which mfmactl reads); unset, the
# daemon's defaults (and nothing an older build would refuse).  LOAD_SCALE
# (default 4; 1 gives the 0.1-0.3 s loads of runs before 2026-12-02, too
# short to tell 10% apart) multiplies the batching loads' request counts.
#
# usage: [SERVING_STEPS="check latency batching off"] [ROUNDS="1 2"] [MFMAD=path LABEL=name]
#        [LAT_POLLS="0 300"] serving_bench.sh PAYLOAD_DIR OUT_DIR
# MFMAD and MFMACTL run other binaries (builds of an earlier commit, for a
# side by side run); LABEL then tags every SERVE line.
set -u
P=$1
OUT=$2
SOCK=/tmp/mfmad-serving.sock
D=/tmp/mfma-serving
rm -rf "$D" && mkdir -p "$D"
CTL=("${MFMACTL:-$P/bin/mfmactl}" -e "unix:$SOCK" --timeout 600000)
# E2E_METRICS=PORT: /metrics on 127.0.0.1:PORT.
metrics_conf=${E2E_METRICS:+"metrics = { enabled = true; port = $E2E_METRICS; };"}
conf() {
	cat >"$D/mfmad.conf" <<CONF
limits = {
  max_frame_mb = 1800;
  max_inflight_mb = 65536;
  max_inflight_per_connection = 256;
  max_inflight = 4096;
  max_connections = 1024;
  max_pinned_mb = 16384;
  max_region_mb_per_conn = 4096;
  worker_poll_us = $1;
  ${E2E_PINNED_READS_MB:+pinned_reads_mb = $E2E_PINNED_READS_MB;}
  ${E2E_POST_THREADS:+post_threads = $E2E_POST_THREADS;}
  ${E2E_READER_THREADS:+reader_threads = $E2E_READER_THREADS;}
  ${E2E_READER_MIN_KB:+reader_min_kb = $E2E_READER_MIN_KB;}
  ${E2E_LOOP_START:+loop_start = $E2E_LOOP_START;}
  ${E2E_LOOP_POLL_US:+loop_poll_us = $E2E_LOOP_POLL_US;}
};
batching = { enabled = ${2:-true}; ${E2E_OVERLAP:+overlap = $E2E_OVERLAP;}
             ${E2E_MAX_COLUMNS:+max_columns = $E2E_MAX_COLUMNS;} ${E2E_MAX_DELAY_US:+max_queue_delay_us = $E2E_MAX_DELAY_US;} };
$metrics_conf
cuda = { ${E2E_PINNED_ANSWERS_MB:+pinned_answers_mb = $E2E_PINNED_ANSWERS_MB;} ${E2E_COPY_STREAM:+copy_stream = $E2E_COPY_STREAM;}
         ${E2E_DMA_PARTS_KB:+dma_parts_kb = $E2E_DMA_PARTS_KB;}
         ${E2E_REGION_COPIES:+region_copies = $E2E_REGION_COPIES;} ${E2E_GATE:+gate = $E2E_GATE;}
         ${E2E_OUT_STREAM:+out_stream = $E2E_OUT_STREAM;}
         ${E2E_TILE_OUT:+tile_out = $E2E_TILE_OUT;} };
CONF
}
conf 0
rm -f "$SOCK"
"${MFMAD:-$P/bin/mfmad}" --config "$D/mfmad.conf" --socket "$SOCK" --backends cuda --log-level info \
	2>>"$OUT/mfmad_serving${LABEL:+_$LABEL}.log" &
DPID=$!
trap 'kill -TERM "$DPID" 2>/dev/null' EXIT
for _ in $(seq 150); do
	"${CTL[@]}" ping >/dev/null 2>&1 && break
	sleep 0.2
done
fails=0
checks=0
check() {
	local label=$1
	shift
	local out
	checks=$((checks + 1))
	if out=$("${CTL[@]}" --json submit --shm "$@" --check 2>&1); then
		echo "CHECK ok   $label $(echo "$out" | grep -o '"variant":"[^"]*"\|"rel_error":[^,}]*' | tr '\n' ' ')"
	else
		fails=$((fails + 1))
		echo "FAIL $label: $out"
	fi
}
rnd() { "${CTL[@]}" random -o "$1" --shape "$2" --dtype "$3" ${4:-} --seed "${5:-7}" >/dev/null; }

STEPS=" ${SERVING_STEPS:-check latency batching off} "
has() { case "$STEPS" in *" $1 "*) return 0 ;; esac; return 1; }
has check && for dt in f16 bf16 i8; do
	for shape in 37x29x100 300x17x516 129x200x260 520x300x1028; do
		IFS=x read -r m n k <<<"$shape"
		rnd "$D/a.npy" "${m}x${k}" "$dt" --sparse24 11
		rnd "$D/b.npy" "${k}x${n}" "$dt" "" 12
		check "shm $dt ${m}x${n}x${k} dense" -a "$D/a.npy" -b "$D/b.npy" --dtype "$dt"
		check "shm $dt ${m}x${n}x${k} 2:4" -a "$D/a.npy" -b "$D/b.npy" --dtype "$dt" --sparse packed
		if [ "$dt" != i8 ]; then
			rnd "$D/c.npy" "${m}x${n}" f32 "" 13
			check "shm $dt ${m}x${n}x${k} 2:4 out $dt, C, beta -0.5" -a "$D/a.npy" -b "$D/b.npy" \
				--dtype "$dt" --sparse packed --out-dtype "$dt" -c "$D/c.npy" --beta -0.5 --alpha 1.5
		fi
	done
	rnd "$D/w.npy" "1000x1028" "$dt" --sparse24 16
	rnd "$D/b.npy" "1028x33" "$dt" "" 17
	"${CTL[@]}" load "w_$dt" "$D/w.npy" --dtype "$dt" --sparse packed >/dev/null ||
		{ fails=$((fails + 1)); echo "FAIL load $dt"; }
	check "shm $dt resident 2:4 1000x1028 x N=33" --weight "w_$dt" -a "$D/w.npy" -b "$D/b.npy" --dtype "$dt"
done
echo "CHECK summary: $((checks - fails)) of $checks passed"
grep -c "copies through staging" "$OUT/mfmad_serving.log" | sed 's/^/regions not registered (log lines): /'

# E2E_BENCH_ARGS: more mfmactl bench arguments for every load (e.g. --cork).
# shellcheck disable=SC2086
bench() { "${CTL[@]}" --json bench --resident --sparse "$@" ${E2E_BENCH_ARGS:-} --dtype f16 --out-dtype f16 2>&1 | tr -s ' \n' ' '; }
has latency && for poll in ${LAT_POLLS:-0 300}; do
	if [ "$poll" != 0 ]; then
		conf "$poll"
		kill -HUP "$DPID"
		sleep 1
	fi
	for n in 16 64 256; do
		for how in "" --shm; do
			echo "SERVE${LABEL:+ [$LABEL]} poll=$poll one in flight 14336x4096 2:4 f16 N=$n ${how:-bytes}: $(bench --m 14336 --k 4096 --n $n -n 400 --warmup 20 --device 0 $how)"
		done
	done
done
# checked_benches LABEL "DTYPES" FIELDS BENCH_ARGS...: `mfmactl bench --check`
# on a resident 4096x4096 weight for each of DTYPES, 2:4 and dense, bytes and
# --shm, every answer against the float64 reference; each counted in
# checks/fails and printed as "CHECK LABEL rc=..." with its check and the
# JSON fields the grep pattern FIELDS picks.
checked_benches() {
	local label=$1 dts=$2 fields=$3 dt sp how out rc
	shift 3
	for dt in $dts; do
		for sp in --sparse ""; do
			for how in "" --shm; do
				out=$("${CTL[@]}" --json bench --check --resident $sp --m 4096 --k 4096 \
					--dtype $dt --device 0 "$@" $how 2>&1)
				rc=$?
				out=$(echo "$out" | tr -s ' \n' ' ')
				checks=$((checks + 1))
				[ $rc = 0 ] || fails=$((fails + 1))
				echo "CHECK $label rc=$rc $dt ${sp:-dense} ${how:-bytes}: $(echo "$out" | grep -o "\"check\": {[^}]*}\\|$fields" | tr '\n' ' ')"
			done
		done
	done
}
# Batched launches checked: N=8, 64 in flight, a B per connection.
has batchcheck && checked_benches batched "${BATCHCHECK_DTYPES:-f16 bf16}" \
	'"mean_batch": [0-9.]*\|"errors": [0-9]*' --n 8 -n 3000 -j 64 --warmup 4
has batchcheck && echo "CHECK summary: $((checks - fails)) of $checks passed"
# Lone GEMMs checked: N=16, one request at a time (the loop starts each on
# the idle device, limits.loop_start, once the served trial is over: up to
# four candidates, 17 launches each, within the 80 unmeasured); then how
# many the loop started, from /metrics.
has lonecheck && checked_benches lone "f16 bf16" '"p50": [0-9]*' --n 16 -n 300 -j 1 --warmup 80
has lonecheck && echo "CHECK summary: $((checks - fails)) of $checks passed; $(python3 -c "import urllib.request as u; print(' '.join(l for l in u.urlopen('http://127.0.0.1:${E2E_METRICS:-9464}/metrics').read().decode().splitlines() if l.startswith(('mfmad_device_loop_starts_total', 'mfmad_device_completed_total', 'mfmad_device_gated_total', 'mfmad_device_tile_out_total'))))" 2>&1)"
conf 0
kill -HUP "$DPID"
sleep 1
has batching && for round in ${ROUNDS:-1 2}; do
	for load in "8 64 8000" "1 256 40000"; do
		set -- $load
		for how in "" --shm; do
			echo "SERVE${LABEL:+ [$LABEL]} batching round=$round 8192x8192 2:4 f16 N=$1 in_flight=$2 ${how:-bytes}: $(bench --m 8192 --k 8192 --n $1 -n $(($3 * ${LOAD_SCALE:-4})) -j $2 --warmup ${WARMUP:-32} --device 0 $how --connections ${E2E_CONNECTIONS:-$2})"
		done
	done
done
# One request in flight with batching on and off, alternating (issue 9:
# batching must add nothing to a lone request), on the batching weight;
# which goes first changes from round to round (on first in odd rounds).
has alone && for round in ${ROUNDS:-1 2}; do
	order="true false"
	[ $((round % 2)) = 0 ] && order="false true"
	for on in $order; do
		conf 0 "$on"
		kill -HUP "$DPID"
		sleep 1
		for how in "" --shm; do
			echo "SERVE${LABEL:+ [$LABEL]} alone batching=$on round=$round 8192x8192 2:4 f16 N=8 in_flight=1 ${how:-bytes}: $(bench --m 8192 --k 8192 --n 8 -n 1500 --warmup 50 --device 0 $how)"
		done
	done
done
has off && conf 0 false && kill -HUP "$DPID" && sleep 1 && for load in "8 64 8000" "1 256 20000"; do
	set -- $load
	for how in "" --shm; do
		echo "SERVE${LABEL:+ [$LABEL]} batching off 8192x8192 2:4 f16 N=$1 in_flight=$2 ${how:-bytes}: $(bench --m 8192 --k 8192 --n $1 -n $3 -j $2 --warmup ${WARMUP:-32} --device 0 $how)"
	done
done
if [ "${MULTI:-0}" = 1 ]; then
	# Several GPUs: batching on again, the weight on every device, the
	# same loads pinned to device 0 and left to the scheduler.
	conf 0 true
	kill -HUP "$DPID"
	sleep 1
	for round in 1 2; do
		for load in "8 64 8000" "1 256 40000"; do
			set -- $load
			for how in "" --shm; do
				for pin in "--device 0" ""; do
					echo "SERVE${LABEL:+ [$LABEL]} multi round=$round 8192x8192 2:4 f16 N=$1 in_flight=$2 ${how:-bytes} ${pin:-all devices}: $(bench --m 8192 --k 8192 --n $1 -n $3 -j $2 --warmup ${WARMUP:-32} $pin $how)"
				done
			done
		done
	done
fi
trap - EXIT
kill -TERM "$DPID"
wait "$DPID"
echo "SERVE${LABEL:+ [$LABEL]} mfmad exit status: $?"
exit $((fails > 0))
