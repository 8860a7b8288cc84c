#!/usr/bin/env bash
# Plaintext TCP vs TLS TCP vs TLS through HAProxy (TLS on both hops,
# deploy/haproxy/mfmad-tls.cfg), on loopback, in one run: `mfmactl bench`
# for a small (16x16x16 f32) and a 1 MiB request (16x8192 A and 8192x16 B,
# f32: 512 KiB each), one request in flight (round-trip p50 and its
# requests/s) and eight in flight over eight connections (requests/s).
# One daemon serves plaintext TCP, another TLS with client certificates;
# HAProxy sends both its servers to the TLS one.  Certificates are made by
# tests/tls/make_certs.sh.  Prints a Markdown table.
#
#   bench/tls_bench.sh [BUILD_DIR]      (default build; needs haproxy)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
# OpenBLAS' spinning threads would take the cores the TLS work needs on a
# small machine (as in scripts/test.sh); the GEMMs here are small anyway.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
mfmad=$build/daemon/mfmad
ctl=$build/client/ctl/mfmactl
tmp=$(mktemp -d /tmp/mfma-tlsbench-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

bash tests/tls/make_certs.sh "$tmp/certs" >/dev/null
c=$tmp/certs
p_plain=$(port); p_tls=$(port); m_tls=$(port); p_ha=$(port)
echo 'weights = { persist = false; };' > "$tmp/plain.conf"
cat > "$tmp/tls.conf" <<CONF
weights = { persist = false; };
listen = { tls_cert = "$c/server.pem"; tls_key = "$c/server.key"; tls_client_ca = "$c/ca.pem"; };
CONF
"$mfmad" -c "$tmp/plain.conf" -s "$tmp/p.sock" --tcp "127.0.0.1:$p_plain" --backends cpu -l warning &
pids+=($!)
"$mfmad" -c "$tmp/tls.conf" -s "$tmp/t.sock" --tcp "127.0.0.1:$p_tls" --backends cpu \
  --metrics "127.0.0.1:$m_tls" -l warning &
pids+=($!)
sed -e "s|@FRONT_PORT@|$p_ha|; s|@CERTS@|$c|g; s|@NODE[12]_PORT@|$p_tls|; s|@NODE[12]_METRICS@|$m_tls|" \
  deploy/haproxy/mfmad-tls.cfg > "$tmp/haproxy.cfg"
haproxy -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
pids+=($!)
export MFMA_TLS_CA=$c/ca.pem MFMA_TLS_CERT=$c/client.pem MFMA_TLS_KEY=$c/client.key
for ep in "tcp:127.0.0.1:$p_plain" "tls:localhost:$p_tls" "tls:localhost:$p_ha"; do
  for _ in $(seq 100); do "$ctl" -e "$ep" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
sleep 0.5 # HAProxy's health checks

# bench ENDPOINT SHAPE N J -> "p50_us req_s"
bench() {
  local out
  out=$("$ctl" -e "$1" bench --dtype f32 $2 -n "$3" -j "$4" --warmup 5 2>&1)
  local p50 rps
  p50=$(sed -n 's/.* p50 \([0-9.]*\) \([mu]s\).*/\1 \2/p' <<<"$out" | awk '{print $2=="ms" ? $1*1000 : $1}')
  rps=$(sed -n 's/.*throughput *\([0-9.]*\) requests.*/\1/p' <<<"$out")
  echo "$p50 $rps"
}

echo "| request | path | p50 round trip, 1 in flight (us) | req/s, 1 in flight | req/s, 8 in flight |"
echo "|---|---|---:|---:|---:|"
for shape in "small:--m 16 --n 16 --k 16:3000:1000" "1 MiB:--m 16 --n 16 --k 8192:300:200"; do
  IFS=: read -r name args n1 n8 <<<"$shape"
  for path in "plaintext TCP:tcp:127.0.0.1:$p_plain" "TLS TCP:tls:localhost:$p_tls" \
              "TLS via HAProxy:tls:localhost:$p_ha"; do
    label=${path%%:*}; ep=${path#*:}
    read -r p50 rps1 <<<"$(bench "$ep" "$args" "$n1" 1)"
    read -r _ rps8 <<<"$(bench "$ep" "$args" "$n8" 8)"
    echo "| $name | $label | $p50 | $rps1 | $rps8 |"
  done
done
