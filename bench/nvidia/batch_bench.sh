#!/bin/bash
# Batching on and off through mfmad on one GPU (called by device_round.sh
# batching): the same closed-loop loads, daemon restarted with
# batching.enabled true and false in turn (off, on, off, on), so each pair
# is side by side in one run.
#  - resident 8192x8192 2:4 f16, N=8 per request, 64 in flight;
#  - the same weight, N=1, 256 in flight (token-at-a-time decode);
#  - the same weight, N=8, one in flight (batching must add nothing).
#
# With MULTI=1 (a machine of several GPUs): batching on only, the weight on
# every device, the same loads pinned to device 0 and left to the
# scheduler, side by side.
#
# E2E_PINNED_ANSWERS_MB (default 64) is cuda.pinned_answers_mb (0: answer
# frames on the heap), as in e2e.sh.  BATCH_SIZE (default 8192) is the
# weight's M and K; BATCH_MODES (default "false true") the batching.enabled
# settings of each round, BATCH_ROUNDS (default "1 2") the rounds; LABEL,
# when set, tags every BATCH line.
#
# usage: batch_bench.sh PAYLOAD_DIR OUT_DIR
set -u
P=$1
OUT=$2
SOCK=/tmp/mfmad-batch.sock
D=/tmp/mfma-batch
rm -rf "$D" && mkdir -p "$D"
CTL=("$P/bin/mfmactl" -e "unix:$SOCK" --timeout 600000)
SIZE=${BATCH_SIZE:-8192}
MODES=${BATCH_MODES:-false true}
PLACES="device0"
if [ "${MULTI:-0}" = 1 ]; then
	MODES="true"
	PLACES="device0 all"
fi
for round in ${BATCH_ROUNDS:-1 2}; do
	for mode in $MODES; do
		cat >"$D/mfmad.conf" <<CONF
limits = {
  max_frame_mb = 1800;
  max_inflight_mb = 65536;
  max_inflight_per_connection = 256;
  max_inflight = 4096;
  max_connections = 1024;
};
batching = { enabled = $mode; };
cuda = { pinned_answers_mb = ${E2E_PINNED_ANSWERS_MB:-64}; };
CONF
		rm -f "$SOCK"
		"$P/bin/mfmad" --config "$D/mfmad.conf" --socket "$SOCK" --backends cuda --log-level warning \
			2>>"$OUT/mfmad_batch.log" &
		DPID=$!
		for _ in $(seq 150); do
			"${CTL[@]}" ping >/dev/null 2>&1 && break
			sleep 0.2
		done
		for place in $PLACES; do
			dev=()
			[ "$place" = device0 ] && dev=(--device 0)
			for load in "8 64 8000" "1 256 40000" "8 1 400"; do
				set -- $load
				[ "${MULTI:-0}" = 1 ] && [ "$2" = 1 ] && continue
				echo "BATCH${LABEL:+ [$LABEL]} round=$round batching=$mode on=$place ${SIZE}x${SIZE} 2:4 f16 N=$1 in_flight=$2: $("${CTL[@]}" --json bench --resident --sparse \
					--m "$SIZE" --k "$SIZE" --n "$1" --dtype f16 --out-dtype f16 -n "$3" -j "$2" --warmup 4 "${dev[@]}" 2>&1 | tr -s ' \n' ' ')"
			done
		done
		curl -s "http://127.0.0.1:9464/metrics" >/dev/null 2>&1 || true
		kill -TERM "$DPID"
		wait "$DPID"
	done
done
