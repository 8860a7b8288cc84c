#!/usr/bin/env bash
# Installs what mfmad needs on Debian 12, configures and builds it.  Safe to
# run again: it installs only what is missing and rebuilds only what changed.
#
#   scripts/setup.sh              build into ./build
#   scripts/setup.sh --install    ... and install (meson install, ldconfig): also
#                                 the mfmad group and the Python package mfma
#   scripts/setup.sh --uninstall  stop the service and remove what --install
#                                 put in place (the build's install log); keeps
#                                 the configuration, /var/lib/mfmad and the
#                                 mfmad user and group
#   BUILD_DIR=dir scripts/setup.sh
#   MESON_ARGS="-Db_sanitize=address,undefined" BUILD_DIR=build-asan scripts/setup.sh
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
install=0
for arg in "$@"; do
  case "$arg" in
    --install) install=1 ;;
    --uninstall) install=-1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

# Build and test dependencies, all from Debian 12.  clang-22/lld-22/llvm-22
# build and inspect the AMD code objects, libamdhip64-dev is the HIP runtime
# the AMD backend links; prometheus gives promtool for the /metrics test;
# systemd gives systemd-analyze and systemd-socket-activate for the unit tests;
# libssl-dev is TLS on TCP, the openssl tool makes the tests' certificates;
# numpy, pytest and matplotlib are for the Python package (python/mfma), its
# tests and its benchmark plot.
packages=(
  build-essential pkg-config meson ninja-build
  libuv1-dev libprotobuf-c-dev protobuf-c-compiler libconfig-dev
  libsystemd-dev libcmocka-dev libmicrohttpd-dev libopenblas-dev libssl-dev openssl
  clang-22 lld-22 llvm-22 libclang-rt-22-dev libamdhip64-dev
  prometheus systemd groff-base man-db procps python3
  python3-numpy python3-pytest python3-matplotlib haproxy python3-yaml
)
# apt-get, waiting for the lock when another apt or dpkg (unattended-upgrades
# on a fresh machine) holds it: up to APT_LOCK_TIMEOUT seconds (default 600),
# saying so once, instead of failing at once with "Could not get lock".
apt_get() {
  local limit=${APT_LOCK_TIMEOUT:-600} start=$SECONDS said=0 out
  while :; do
    if out=$(apt-get -o DPkg::Lock::Timeout=0 "$@" 2>&1); then
      return 0
    fi
    if ! grep -qE "Could not get lock|Unable to acquire|Unable to lock" <<<"$out"; then
      printf '%s\n' "$out" >&2
      return 1
    fi
    if [ $((SECONDS - start)) -ge "$limit" ]; then
      printf '%s\n' "$out" >&2
      echo "setup.sh: another apt or dpkg still holds the package lock after ${limit}s;" \
           "let it finish (or set APT_LOCK_TIMEOUT) and run setup.sh again" >&2
      return 1
    fi
    if [ "$said" = 0 ]; then
      echo "setup.sh: another apt or dpkg is running; waiting up to ${limit}s for its lock"
      said=1
    fi
    sleep 3
  done
}

if [ "$install" = -1 ]; then
  log="$BUILD_DIR/meson-logs/install-log.txt"
  if [ ! -f "$log" ] || ! grep -q '/mfmad$' "$log"; then
    echo "setup.sh: $log does not list an install of mfmad; give the BUILD_DIR" \
         "that setup.sh --install used" >&2
    exit 1
  fi
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    systemctl disable --now mfmad.service mfmad.socket 2>/dev/null || true
  fi
  # A daemon started by hand from this install (the README's first
  # command) goes too; one of another build is left alone.
  bin=$(grep -m1 '/bin/mfmad$' "$log")
  for pid in $(pgrep -x mfmad || true); do
    if [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$bin" ]; then
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  ninja -C "$BUILD_DIR" uninstall
  ldconfig
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    systemctl daemon-reload || true
  fi
  echo "setup.sh: uninstalled; kept the configuration, /var/lib/mfmad (stored weights)" \
       "and the mfmad user and group"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: missing packages: ${missing[*]} (run as root to install them)" >&2
    exit 1
  fi
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_get update -qq
  apt_get install -y -qq --no-install-recommends "${missing[@]}"
fi

# nvcc is not a Debian package; where the CUDA toolkit is installed in its
# usual place, put it on PATH so the CUDA backend is built.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# shellcheck disable=SC2086
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  meson setup "$BUILD_DIR" ${MESON_ARGS:-}
fi
ninja -C "$BUILD_DIR"

if [ "$install" = 1 ]; then
  meson install -C "$BUILD_DIR" --quiet
  ldconfig
  # meson shows nothing its install scripts print: say here what they did.
  conf=$(meson introspect "$BUILD_DIR" --buildoptions | python3 -c '
import json, os, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
print(os.path.join(o["prefix"], o["sysconfdir"], "mfmad", "mfmad.conf"))')
  if [ -e "$conf.new" ]; then
    echo "setup.sh: kept your $conf; the shipped configuration is $conf.new (merge what you need)"
  fi
  if getent group mfmad >/dev/null; then
    echo "setup.sh: installed; let a user talk to /run/mfmad/mfmad.sock with: usermod -aG mfmad USER"
  fi
fi
