#!/bin/bash
# mfmad end to end on a GPU machine (called by device_round.sh): the real
# daemon with only the CUDA backend, driven by the real client (mfmactl)
# over a Unix socket.
#  1. correctness: mfmactl submit --check (float64 reference in the client)
#     for every dtype, dense and the three 2:4 paths, odd shapes, f16/bf16
#     outputs, C with beta, and resident weights;
#  2. latency: a resident 14336x4096 weight (2:4 and dense) times N=16,
#     client round trip next to the server's kernel time;
#  3. (multi) throughput on every GPU against one GPU;
#  4. (choice) the measured choice of provider for resident weights: the
#     variant each N bucket chose and the server's kernel time, to set
#     beside bench_nv's times of each library alone (device_round.sh
#     choice runs both).
#  5. (pitch) one request at a time at shapes whose N puts B's rows on the
#     device with gaps between them (E2E_PITCH_SHAPES): a resident 2:4
#     weight (the measured choice) and A sent with every request (our
#     wgmma kernel), B in the frame and through a region (--shm); then the
#     same checked against float64 (--check).  E2E_PITCH_KINDS="dense"
#     (or "sparse dense") sends dense weights, whose rows land with gaps
#     where K is past 64 and not a multiple of 64;
#  6. (answers) the batched load of batch_bench.sh (resident 8192x8192 2:4
#     f16, N=8 per request, 64 in flight, bytes in the frames), then the
#     answer frames counted by where they lay: run it with
#     E2E_PINNED_ANSWERS_MB=0 and =64 for the two sides.
#
# E2E_PINNED_ANSWERS_MB (default 64) is cuda.pinned_answers_mb: answers'
# frames in each GPU's pinned arena (0: on the heap, D staged and copied by
# the worker), in every mode.
#
# usage: e2e.sh PAYLOAD_DIR OUT_DIR [single|latency|multi|choice|pitch|answers]
set -u
P=$1
OUT=$2
MODE=${3:-single}
SOCK=/tmp/mfmad-e2e.sock
D=/tmp/mfma-e2e
rm -rf "$D" && mkdir -p "$D"
CTL=("$P/bin/mfmactl" -e "unix:$SOCK" --timeout 600000)
cat >"$D/mfmad.conf" <<EOF
limits = {
  max_frame_mb = 1800;
  max_inflight_mb = 65536;
  max_inflight_per_connection = 256;
  worker_poll_us = ${E2E_WORKER_POLL_US:-0};
};
EOF
# E2E_PREFER pins one CUDA provider (cuda.providers.prefer): the choice
# mode then shows that provider's served times; E2E_GRAPHS=false turns
# cuda.graphs off; E2E_SERVED_TRIAL sets cuda.served_trial (0 = off);
# E2E_PINNED_ANSWERS_MB is cuda.pinned_answers_mb; E2E_GATE=false turns
# cuda.gate off.
printf 'cuda = { providers = { prefer = "%s"; }; graphs = %s; served_trial = %s; pinned_answers_mb = %s; gate = %s; };\n' \
	"${E2E_PREFER:-}" "${E2E_GRAPHS:-true}" "${E2E_SERVED_TRIAL:-16}" "${E2E_PINNED_ANSWERS_MB:-64}" \
	"${E2E_GATE:-true}" >>"$D/mfmad.conf"
rm -f "$SOCK"
METRICS_PORT=${E2E_METRICS_PORT:-9479}
# E2E_WRAP runs the daemon under a command (Nsight Compute, say); word-split.
${E2E_WRAP:-} "$P/bin/mfmad" --config "$D/mfmad.conf" --socket "$SOCK" --backends "${E2E_BACKENDS:-cuda}" --log-level info \
	--metrics "127.0.0.1:$METRICS_PORT" \
	2>"$OUT/mfmad_$MODE.log" &
DPID=$!
# The daemon goes with the script, however the script ends.  Under
# E2E_WRAP the daemon is the wrapper's child: it is stopped first and the
# wrapper given 60 s to finish (a profiler writes its report then).
stop_daemon() {
	if [ -n "${E2E_WRAP:-}" ]; then
		pkill -TERM -f "^$P/bin/mfmad --config $D/" 2>/dev/null
		for _ in $(seq 600); do
			kill -0 "$DPID" 2>/dev/null || return 0
			sleep 0.1
		done
	fi
	kill -TERM "$DPID" 2>/dev/null
}
trap stop_daemon EXIT
for _ in $(seq 150); do
	"${CTL[@]}" ping >/dev/null 2>&1 && break
	sleep 0.2
done
"${CTL[@]}" status || { echo "FAIL mfmad did not come up"; tail -20 "$OUT/mfmad_$MODE.log"; exit 1; }

fails=0
checks=0
# check LABEL ARGS...: one mfmactl submit --check
check() {
	local label=$1
	shift
	local out
	checks=$((checks + 1))
	if out=$("${CTL[@]}" --json submit "$@" --check 2>&1); then
		echo "CHECK ok   $label $(echo "$out" | grep -o '"variant":"[^"]*"\|"rel_error":[^,}]*' | tr '\n' ' ')"
	else
		fails=$((fails + 1))
		echo "FAIL $label: $out"
	fi
}

# check_weight LABEL NAME DTYPE: a GEMM on the resident weight, checked by
# mfmactl against the float64 reference of the same A (-a, read for the
# reference only).
check_weight() {
	local label=$1 name=$2 dt=$3
	shift 3
	checks=$((checks + 1))
	# The weight may run on another provider than the request that sends
	# A (the measured choice), so D is checked against the float64
	# reference, with A given to mfmactl for the reference only.
	local out
	if out=$("${CTL[@]}" --json submit --weight "$name" -a "$D/w.npy" -b "$D/b.npy" --dtype "$dt" \
		--check 2>&1); then
		echo "CHECK ok   $label $(echo "$out" | grep -o '"variant":"[^"]*"\|"rel_error":[^,}]*' | tr '\n' ' ')"
	else
		fails=$((fails + 1))
		echo "FAIL $label: $out"
	fi
}

rnd() { "${CTL[@]}" random -o "$1" --shape "$2" --dtype "$3" ${4:-} --seed "${5:-7}" >/dev/null; }

if [ "$MODE" = single ]; then
	for dt in f16 bf16 i8; do
		# Shapes as MxNxK words.
		# The client's float64 reference runs on one core: keep
		# the shapes small enough for it.
		for shape in ${E2E_SHAPES:-37x29x100 300x17x516 1000x64x2048 129x200x260 520x300x1028}; do
			IFS=x read -r m n k <<<"$shape"
			rnd "$D/a.npy" "${m}x${k}" "$dt" --sparse24 11
			rnd "$D/b.npy" "${k}x${n}" "$dt" "" 12
			check "$dt ${m}x${n}x${k} dense" -a "$D/a.npy" -b "$D/b.npy" --dtype "$dt"
			for sp in packed prune validate; do
				check "$dt ${m}x${n}x${k} 2:4 $sp" -a "$D/a.npy" -b "$D/b.npy" --dtype "$dt" --sparse "$sp"
			done
			if [ "$dt" != i8 ]; then
				rnd "$D/c.npy" "${m}x${n}" f32 "" 13
				check "$dt ${m}x${n}x${k} 2:4 out $dt, C, beta -0.5" -a "$D/a.npy" -b "$D/b.npy" \
					--dtype "$dt" --sparse packed --out-dtype "$dt" -c "$D/c.npy" --beta -0.5 --alpha 1.5
			else
				rnd "$D/c.npy" "${m}x${n}" i8 "" 13
			fi
		done
		# Dense with K that is no multiple of anything.
		rnd "$D/a.npy" "77x101" "$dt" "" 14
		rnd "$D/b.npy" "101x45" "$dt" "" 15
		check "$dt 77x45x101 dense" -a "$D/a.npy" -b "$D/b.npy" --dtype "$dt"
		# Resident weights, 2:4 and dense.
		rnd "$D/w.npy" "1000x1028" "$dt" --sparse24 16
		rnd "$D/b.npy" "1028x33" "$dt" "" 17
		"${CTL[@]}" load "w_${dt}_s" "$D/w.npy" --dtype "$dt" --sparse packed >/dev/null &&
			"${CTL[@]}" load "w_${dt}_d" "$D/w.npy" --dtype "$dt" >/dev/null ||
			{ fails=$((fails + 1)); echo "FAIL load $dt"; }
		check_weight "$dt resident 2:4 1000x1028 x N=33" "w_${dt}_s" "$dt"
		check_weight "$dt resident dense 1000x1028 x N=33" "w_${dt}_d" "$dt"
	done
	# f32 is not served by the CUDA kernels: refused with a message.
	rnd "$D/a.npy" "16x16" f32
	rnd "$D/b.npy" "16x16" f32
	echo "E2E f32 on cuda: $("${CTL[@]}" submit -a "$D/a.npy" -b "$D/b.npy" --dtype f32 2>&1 | tail -1)"
	echo "CHECK summary: $((checks - fails)) of $checks passed"

fi
if [ "$MODE" = single ] || [ "$MODE" = latency ]; then
	# Latency of the decode shape: a resident 14336x4096 weight times N
	# columns, one request in flight, pinned to device 0; then 8 in flight.
	for sp in "--sparse" ""; do
		for n in 16 64; do
			echo "E2E resident 14336x4096 f16 ${sp:-dense} N=$n: $("${CTL[@]}" --json bench --resident $sp \
				--m 14336 --k 4096 --n $n --dtype f16 --out-dtype f16 -n 400 --warmup 20 --device 0 2>&1 | tr -s ' \n' ' ')"
		done
	done
	echo "E2E resident 14336x4096 f16 2:4 N=16, 8 in flight: $("${CTL[@]}" --json bench --resident --sparse \
		--m 14336 --k 4096 --n 16 --dtype f16 --out-dtype f16 -n 2000 -j 8 --warmup 10 --device 0 2>&1 | tr -s ' \n' ' ')"
fi
if [ "$MODE" = multi ]; then
	# Several GPUs: one weight loaded on every device, requests left to
	# the scheduler, against the same load pinned to device 0.  The shape
	# is chosen so that the GPU (streaming the weight), not the host copies
	# of the small B and D, bounds each request.
	rnd "$D/big.npy" 32768x32768 f16 --sparse24 21
	rnd "$D/b.npy" 32768x8 f16 "" 22
	"${CTL[@]}" load big "$D/big.npy" --dtype f16 --sparse packed || echo "FAIL load big"
	for pin in "--device 0" ""; do
		echo "E2E multi 32768x32768 2:4 f16 N=8 -j 32 ${pin:-all devices}: $("${CTL[@]}" --json bench \
			--weight big --n 8 --dtype f16 --out-dtype f16 -n 4000 -j 32 --warmup 4 $pin 2>&1 | tr -s ' \n' ' ')"
	done
	"${CTL[@]}" status
fi

# The device's counters now: launches, kernel and launch-call seconds, and
# the served trials that ended.
metrics_now() {
	python3 -c "import urllib.request as u; print(' '.join(l for l in u.urlopen('http://127.0.0.1:$METRICS_PORT/metrics').read().decode().splitlines() if l.startswith(('mfmad_gemm_executions_total', 'mfmad_device_kernel_seconds_total', 'mfmad_device_launch_seconds_total', 'mfmad_gemm_choice_trials_total'))))" 2>&1
}

if [ "$MODE" = choice ]; then
	# The first request of an N bucket times the candidates (its total
	# shows that one-time cost); 200 more give the chosen kernel's time.
	for wk in ${CHOICE_WEIGHTS:-14336x4096 4096x14336}; do
		IFS=x read -r m k <<<"$wk"
		rnd "$D/w.npy" "${m}x${k}" f16 --sparse24 31
		for sp in sparse dense; do
			name="choice_${m}x${k}_$sp"
			if [ "$sp" = sparse ]; then
				"${CTL[@]}" load "$name" "$D/w.npy" --dtype f16 --sparse packed >/dev/null
			else
				"${CTL[@]}" load "$name" "$D/w.npy" --dtype f16 >/dev/null
			fi || { fails=$((fails + 1)); echo "FAIL load $name"; continue; }
			for n in ${CHOICE_NS:-16 64 256}; do
				rnd "$D/b.npy" "${k}x${n}" f16 "" 32
				first=$("${CTL[@]}" --json submit --weight "$name" -b "$D/b.npy" --dtype f16 \
					--out-dtype f16 -o "$D/d.npy" 2>&1 | grep -o '"variant": *"[^"]*"\|"kernel_ns": *[0-9]*\|"total_ns": *[0-9]*' | tr '\n' ' ')
				# E2E_CHOICE_SETTLE requests first (a served trial of the
				# choice, say), outside the counted loop and its counters.
				if [ "${E2E_CHOICE_SETTLE:-0}" -gt 0 ]; then
					"${CTL[@]}" bench --weight "$name" --n "$n" --dtype f16 --out-dtype f16 \
						-n "$E2E_CHOICE_SETTLE" --warmup 0 --device 0 >/dev/null 2>&1
					echo "E2E mark: $(metrics_now)"
				fi
				loop=$("${CTL[@]}" --json bench --weight "$name" --n "$n" --dtype f16 --out-dtype f16 \
					-n 200 --warmup 5 --device 0 2>&1 | tr -s ' \n' ' ')
				echo "E2E choice f16 $sp ${m}x${n}x${k}: first $first| loop $loop"
				# The device's counters so far: launches, kernel and launch
				# call seconds (the launch call's host time per launch is
				# the difference between two of these lines over launches).
				echo "E2E metrics f16 $sp ${m}x${n}x${k}: $(metrics_now)"
			done
			"${CTL[@]}" unload "$name" >/dev/null
		done
	done
	"${CTL[@]}" status | grep -i variants | head -2
fi

if [ "$MODE" = pitch ]; then
	for kind in ${E2E_PITCH_KINDS:-sparse}; do
		sp=--sparse label=2:4
		[ "$kind" = dense ] && sp= label=dense
		for shape in ${E2E_PITCH_SHAPES:-8192x200x8192 14336x200x4096 8192x104x8192}; do
			IFS=x read -r m n k <<<"$shape"
			for a in "--resident" ""; do
				who=${a:+resident}
				who=${who:-lone}
				for shm in "" "--shm"; do
					echo "E2E pitch $who ${shm:-bytes} ${m}x${n}x${k} $label f16: $("${CTL[@]}" --json bench \
						$a $sp --m "$m" --n "$n" --k "$k" --dtype f16 --out-dtype f16 \
						-n "${E2E_PITCH_REQUESTS:-100}" --warmup 5 --device 0 $shm 2>&1 | tr -s ' \n' ' ')"
				done
				"${CTL[@]}" --json bench $a $sp --m "$m" --n "$n" --k "$k" --dtype f16 --out-dtype f16 \
					-n 4 --warmup 0 --device 0 --check >"$D/pitch_check.json" 2>&1 &&
					echo "CHECK ok   pitch $who $label ${m}x${n}x${k}" ||
					{ fails=$((fails + 1)); echo "FAIL pitch $who $label ${m}x${n}x${k}: $(tr -s ' \n' ' ' <"$D/pitch_check.json")"; }
			done
		done
	done
fi

if [ "$MODE" = answers ]; then
	# The batched load whose answers the worker used to copy out of the
	# staging pool one by one; then where the answer frames lay.
	for round in 1 2; do
		echo "E2E answers pinned_answers_mb=${E2E_PINNED_ANSWERS_MB:-64} round=$round 8192x8192 2:4 f16 N=8 in_flight=64: $("${CTL[@]}" --json bench --resident --sparse \
			--m 8192 --k 8192 --n 8 --dtype f16 --out-dtype f16 -n 8000 -j 64 --warmup 4 --device 0 2>&1 | tr -s ' \n' ' ')"
	done
	echo "E2E metrics answers: $(python3 -c "import urllib.request as u; print(' '.join(l for l in u.urlopen('http://127.0.0.1:$METRICS_PORT/metrics').read().decode().splitlines() if l.startswith(('mfmad_gemm_answer_frames_total', 'mfmad_gemm_executions_total', 'mfmad_gemm_d2h_seconds_total'))))" 2>&1)"
fi

# Stopped as the trap stops it (under E2E_WRAP the daemon first, so the
# wrapper can finish); the status is the wrapper's there.
trap - EXIT
stop_daemon
wait "$DPID"
echo "E2E mfmad exit status: $?"
exit $((fails > 0))
