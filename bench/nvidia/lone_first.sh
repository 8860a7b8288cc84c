#!/bin/bash
# What the first request of a width costs one request in flight: for each
# N of LONE_NS, a fresh resident 2:4 weight (mfmactl bench --resident,
# which loads and, on the CUDA backend, warms it), then LONE_REQUESTS
# requests one at a time with no warm-up, so that the slowest is the first
# and shows any plan made on the serving path (cuSPARSELt's search at a
# width the warming did not cover).  LONE_PIN (default cusparselt; empty:
# none) pins the provider, so that the width runs on the library that plans
# per N whatever the measured choice picks.  MFMAD, MFMACTL and LABEL as
# for serving_bench.sh (a side-by-side run of an earlier build).
#
# usage: [LONE_NS="16 8 24 40"] [LONE_M=8192] [LONE_K=8192] [BACKENDS=cuda]
#        lone_first.sh PAYLOAD_DIR OUT_DIR
set -u
P=$1
OUT=$2
D=$(mktemp -d /tmp/mfma-lone.XXXXXX)
SOCK=$D/mfmad.sock
CTL=("${MFMACTL:-$P/bin/mfmactl}" -e "unix:$SOCK" --timeout 60000)
pin=${LONE_PIN-cusparselt}
{
	[ -n "$pin" ] && echo "cuda = { providers = { prefer = \"$pin\"; }; };"
	echo "weights = { state_dir = \"$D/state\"; };"
} > "$D/mfmad.conf"
mkdir -p "$D/state"
"${MFMAD:-$P/bin/mfmad}" --config "$D/mfmad.conf" --socket "$SOCK" --backends "${BACKENDS:-cuda}" \
	--log-level info 2>>"$OUT/mfmad_lone${LABEL:+_$LABEL}.log" &
DPID=$!
trap 'kill -TERM "$DPID" 2>/dev/null; sleep 1; kill -KILL "$DPID" 2>/dev/null; rm -rf "$D"' EXIT
for _ in $(seq 150); do
	"${CTL[@]}" ping >/dev/null 2>&1 && break
	sleep 0.2
done
for n in ${LONE_NS:-16 8 24 40}; do
	timeout 60 "${CTL[@]}" --json bench --resident --sparse --m "${LONE_M:-8192}" --k "${LONE_K:-8192}" \
		--n "$n" --dtype f16 --out-dtype f16 -n "${LONE_REQUESTS:-30}" -j 1 --warmup 0 >"$D/o.json" 2>&1
	python3 - "${LABEL:-new}" "${pin:--}" "$n" "$D/o.json" <<'PY'
import json, sys
label, pin, n, path = sys.argv[1:5]
try:
    j = json.load(open(path))
except ValueError:
    print(f"LONE [{label}] N={n}: no answer: {open(path).read()[:300]!r}")
    sys.exit()
lat, srv = j["latency_ns"], j.get("server_mean_ns", {})
print(f"LONE [{label} pin={pin}] N={n:>3}: p50 {lat['p50'] / 1e3:8.1f} max {lat['max'] / 1e3:9.1f} us;"
      f" kernel mean {srv.get('kernel', 0) / 1e3:7.1f} us; {j.get('variants', {})}")
PY
done
grep -h "loaded:" "$OUT/mfmad_lone${LABEL:+_$LABEL}.log" | sed 's/.*weight /LOAD /' | tail -n "$(echo ${LONE_NS:-16 8 24 40} | wc -w)"
