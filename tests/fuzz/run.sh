#!/bin/sh
# Runs every libFuzzer target of a fuzz build (-Dfuzz=true) for a bounded
# time from its seed corpus and prints the coverage it reached (libFuzzer's
# "cov:" is edges of the whole instrumented tree).  Fails on a crash, a
# leak or a trap.  New inputs go to a scratch copy, not the repository.
#
# usage: run.sh FUZZ_BUILD_DIR CORPUS_DIR [SECONDS_PER_TARGET]
set -eu
bdir=$1 corpus=$2 secs=${3:-20}
tmp=$(mktemp -d /tmp/mfmad-fuzz-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
status=0
for t in frame request answer sparse24 npy config; do
	mkdir -p "$tmp/$t"
	cp "$corpus/$t"/* "$tmp/$t/"
	log="$tmp/$t.log"
	if "$bdir/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048 \
		-artifact_prefix="$tmp/$t-" "$tmp/$t" > "$log" 2>&1; then
		res=ok
	else
		res=FAILED
		status=1
		tail -40 "$log"
	fi
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
	ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
	runs=$(sed -n 's/.*stat::number_of_executed_units: *//p' "$log")
	echo "fuzz_$t: $res, ${secs}s, ${runs:-?} runs, coverage ${cov:-?} edges, ${ft:-?} features"
done
exit $status
