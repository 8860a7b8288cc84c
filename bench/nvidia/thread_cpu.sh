#!/bin/bash
# Where the host's time goes under a batched load: mfmad started with
# batching on, `mfmactl bench` run against it, and the CPU share of every
# thread of both processes sampled over a window in the middle of the run
# (from /proc/PID/task/*/stat), busiest first.  A thread near 100% is the
# bound, except that a thread waiting for the GPU may spin at 100% too: the
# device's worker is also shown by phase over the same window (its
# mfmad_device_worker_seconds_total on /metrics, 127.0.0.1:METRICS_PORT,
# default 9478), idle, prepare, launch, wait and answers as shares of the
# window, with launch_calls, launch_gather and launch_split, the parts of
# launch spent in the provider's launch calls
# (mfmad_device_launch_seconds_total) and in a batch's gather and split
# (mfmad_device_batch_host_seconds_total).  The running phase counts up
# to each scrape (since 2026-12-02; before, each phase was counted when it
# ended, and a window starting inside a weight's load read over 100%); the
# launch parts are still counted when each call returns.
#
# E2E_PINNED_ANSWERS_MB (default 64) is cuda.pinned_answers_mb, as in e2e.sh;
# READER_THREADS (default 0) is limits.reader_threads; E2E_PINNED_READS_MB,
# when set, limits.pinned_reads_mb; POST_THREADS (default 1) is
# limits.post_threads; E2E_COPY_STREAM, E2E_DMA_PARTS_KB and
# E2E_REGION_COPIES and E2E_OUT_STREAM, when set, cuda.copy_stream,
# dma_parts_kb, region_copies and out_stream; E2E_LOOP_START and E2E_OVERLAP, when set,
# limits.loop_start and batching.overlap (as serving_bench.sh takes them).
# BATCH_SIZE (default 8192) is the resident 2:4 weight's M = K, as in
# batch_bench.sh.
#
# PERF, when set, is a perf launcher (pack_perf.sh's perf/run.sh): perf
# samples the daemon's threads (the software event cpu-clock, 2999 Hz) over
# the same window, and the log gets each thread's busiest functions, the
# loop's, the device's worker's and the post threads' apart (perf's own
# cost, about a sample's handling 3,000 times a second a thread, is in the
# shares above).
#
# usage: [MFMAD=path] [PERF=perf/run.sh] thread_cpu.sh PAYLOAD_DIR N IN_FLIGHT REQUESTS [mfmactl bench flags, e.g. --shm]
set -u
P=$1
N=$2
J=$3
REQ=$4
SOCK=/tmp/mfmad-cpu.sock
D=/tmp/mfma-cpu
rm -rf "$D" && mkdir -p "$D"
overlap_conf=${E2E_OVERLAP:+"batching = { overlap = $E2E_OVERLAP; };"}
cat >"$D/mfmad.conf" <<CONF
limits = { max_frame_mb = 1800; max_inflight_mb = 65536; max_inflight_per_connection = 256;
           max_inflight = 4096; max_connections = 1024; reader_threads = ${READER_THREADS:-0};
           ${E2E_PINNED_READS_MB:+pinned_reads_mb = $E2E_PINNED_READS_MB;}
           ${E2E_LOOP_START:+loop_start = $E2E_LOOP_START;}
           post_threads = ${POST_THREADS:-1}; };
$overlap_conf
cuda = { pinned_answers_mb = ${E2E_PINNED_ANSWERS_MB:-64};
         ${E2E_COPY_STREAM:+copy_stream = $E2E_COPY_STREAM;}
         ${E2E_DMA_PARTS_KB:+dma_parts_kb = $E2E_DMA_PARTS_KB;}
         ${E2E_REGION_COPIES:+region_copies = $E2E_REGION_COPIES;}
         ${E2E_OUT_STREAM:+out_stream = $E2E_OUT_STREAM;} };
CONF
rm -f "$SOCK"
MPORT=${METRICS_PORT:-9478}
"${MFMAD:-$P/bin/mfmad}" --config "$D/mfmad.conf" --socket "$SOCK" --backends cuda --log-level warning \
	--metrics "127.0.0.1:$MPORT" &
DPID=$!
CTL=("$P/bin/mfmactl" -e "unix:$SOCK" --timeout 600000)
for _ in $(seq 150); do "${CTL[@]}" ping >/dev/null 2>&1 && break; sleep 0.2; done
"${CTL[@]}" --json bench --resident --sparse --m "${BATCH_SIZE:-8192}" --k "${BATCH_SIZE:-8192}" --n "$N" --dtype f16 --out-dtype f16 \
	-n "$REQ" -j "$J" --warmup 4 --device 0 "${@:5}" >"$D/bench.json" 2>&1 &
BPID=$!
sleep "${WARM_S:-4}"
# One awk reads every thread's stat and comm at once (a shell loop over a
# few hundred threads would take longer than the window).
ticks() { awk -v p="$2" 'FNR == 1 && FILENAME ~ /comm$/ { name = $1 }
	FNR == 1 && FILENAME ~ /stat$/ { split(FILENAME, f, "/"); print p name, $14 + $15, f[5] }' \
	$(for t in /proc/"$1"/task/*; do echo "$t/comm $t/stat"; done) 2>/dev/null; }
# Device 0's worker seconds by phase, "phase seconds" lines, and the
# daemon's uptime from the same page, the window's clock.
phases() { python3 -c "import re, urllib.request as u
t = u.urlopen('http://127.0.0.1:$MPORT/metrics').read().decode()
print('up', re.search(r'\nmfmad_uptime_seconds (\S+)', t).group(1))
print('launch_calls', re.search(r'\nmfmad_device_launch_seconds_total\{device=\"0\"\} (\S+)', t).group(1))
for p, v in re.findall(r'mfmad_device_worker_seconds_total\{device=\"0\",phase=\"(\w+)\"\} (\S+)', t):
    print(p, v)
for p, v in re.findall(r'mfmad_device_batch_host_seconds_total\{device=\"0\",step=\"(\w+)\"\} (\S+)', t):
    print('launch_' + p, v)"; }
# The scrapes (a Python start each) stay outside the ticks' window, which
# is timed around the two readings of the ticks alone.
pa=$(phases)
t0=$(date +%s.%N)
a=$( { ticks "$DPID" mfmad:; ticks "$BPID" mfmactl:; } )
if [ -n "${PERF:-}" ]; then
	"$PERF" record -q -e cpu-clock -F 2999 -p "$DPID" -o "$D/perf.data" -- sleep "${WINDOW_S:-2}" \
		>"$D/perf_record.log" 2>&1 || echo "perf record failed: $(tail -3 "$D/perf_record.log")"
else
	sleep "${WINDOW_S:-2}"
fi
b=$( { ticks "$DPID" mfmad:; ticks "$BPID" mfmactl:; } )
w=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
pb=$(phases)
hz=$(getconf CLK_TCK)
echo "window ${w} s (per thread: share of one core)"
join -j 3 <(echo "$a" | sort -k3,3) <(echo "$b" | sort -k3,3) |
	awk -v hz="$hz" -v w="$w" '{ printf "%-28s %5.1f%%\n", $2, 100 * ($5 - $3) / hz / w }' |
	sort -k2 -rn | head -12
echo "worker phases (share of the window): $(paste -d' ' <(echo "$pa") <(echo "$pb") |
	awk '$1 == "up" { w = $4 - $2; next } { printf "%s %.1f%%  ", $1, 100 * ($4 - $2) / w }')"
if [ -n "${PERF:-}" ] && [ -s "$D/perf.data" ]; then
	# report TITLE KEYS [filter]: perf's table by KEYS, in shares of the
	# samples the filter keeps.
	report() {
		echo "perf, $1:"
		"$PERF" report -i "$D/perf.data" --stdio --percentage relative --sort "$2" --percent-limit 0.7 \
			"${@:3}" 2>/dev/null | grep -vE "^(#|$)" | head -"${PERF_TOP:-30}"
	}
	report "samples by thread" comm,pid
	report "the loop thread, by function (self)" dso,sym --tid "$DPID"
	report "the device's worker" dso,sym --comms mfmad-dev0
	report "the post threads" dso,sym --comms mfmad-post0,mfmad-post0.1,mfmad-post0.2,mfmad-post0.3
fi
wait "$BPID"
grep -o '"requests_per_s": [0-9.]*\|"mean_batch": [0-9.]*\|"device_busy": [0-9.]*' "$D/bench.json" |
	tr '\n' ' '; echo
kill -TERM "$DPID"; wait "$DPID"
