#!/usr/bin/env bash
# The daemon's threads under ThreadSanitizer: a build with -Db_sanitize=thread
# (CPU backend only; through scripts/setup.sh, so it installs what it needs)
# and every test except those that bound the daemon's memory or descriptors
# (integration-hostile: TSan's shadow memory breaks its RSS bounds), one at a
# time (under TSan the timing tests of a busy 2-core machine run late).
# OpenBLAS runs single-threaded: its own threads are not instrumented and
# their heap reuse reads as races.  Not part of scripts/test.sh (it takes
# some ten minutes on 2 cores); run it after changing what threads share.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build-tsan MESON_ARGS="-Db_sanitize=thread -Dhip=disabled -Dcuda=disabled -Dbuildtype=debug" \
  bash scripts/setup.sh
export OPENBLAS_NUM_THREADS=1
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp"
tests=$(meson test -C build-tsan --list 2>/dev/null | sed 's/^mfmad:[^ ]* \/ //' |
	grep -v -e '^integration-hostile$' -e '^tls$')
# shellcheck disable=SC2086
meson test -C build-tsan --print-errorlogs --num-processes 1 --timeout-multiplier 6 $tests
