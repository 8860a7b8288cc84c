#!/usr/bin/env bash
# Runs the whole test suite: installs and builds what it needs (through
# scripts/setup.sh), runs every test on the normal build, then again on a
# build with AddressSanitizer and UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."

# The GPU backends are compiled and linked in CI (no GPU: their device tests
# skip); the sanitizer build leaves them out, they add no host code paths
# that the CPU tests would exercise.
BUILD_DIR=build bash scripts/setup.sh
BUILD_DIR=build-asan MESON_ARGS="-Db_sanitize=address,undefined -Db_lundef=false -Dhip=disabled -Dcuda=disabled -Dbuildtype=debugoptimized" \
  bash scripts/setup.sh

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1
# OpenBLAS' own threads would oversubscribe the 2-core CI machine while the
# daemon's workers run too.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

status=0
echo "== tests (build) =="
meson test -C build --print-errorlogs --num-processes 2 || status=1
echo "== tests (build-asan: AddressSanitizer + UndefinedBehaviorSanitizer) =="
meson test -C build-asan --print-errorlogs --num-processes 2 --timeout-multiplier 4 || status=1

pass=0; fail=0; skip=0
for d in build build-asan; do
  j="$d/meson-logs/testlog.json"
  [ -f "$j" ] || continue
  pass=$((pass + $(grep -c '"result": "OK"' "$j" || true)))
  fail=$((fail + $(grep -cE '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' "$j" || true)))
  skip=$((skip + $(grep -c '"result": "SKIP"' "$j" || true)))
done
echo "$pass passed, $fail failed, $skip skipped"
# A cmocka test case that skips (no GPU, one core, not root...) leaves its
# program passing: name those cases, so that a pass is not read as more than
# it checked.
cases=$(grep -hE '^\[  SKIPPED \] test_' build/meson-logs/testlog.txt build-asan/meson-logs/testlog.txt \
  2>/dev/null | sed 's/^\[  SKIPPED \] //' | sort -u | paste -sd ' ' || true)
if [ -n "$cases" ]; then
  echo "test cases that skipped inside passing programs: $cases"
fi
exit $status
