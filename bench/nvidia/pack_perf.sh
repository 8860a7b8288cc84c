#!/bin/sh
# Packs this machine's perf (Debian's linux-perf) with every shared library
# it loads, its own glibc and loader among them, into .devlibs/perf.tar.xz
# for the GPU machine, whose image has no perf.  There, perf/run.sh starts
# it through the packed loader, so the image's own libraries play no part;
# only the kernel's perf_event_open must allow the software event cpu-clock
# (the GPU machine exposes no hardware events).  Used by thread_cpu.sh's
# PERF= (device_round.sh perfphases): where each of mfmad's threads spends
# its time under a batched load.
#
# usage: bench/nvidia/pack_perf.sh   (as root: apt-get install linux-perf first)
set -eu
cd "$(dirname "$0")/../.."
PERF=$(command -v perf) || { echo "no perf here: apt-get install linux-perf" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/perf/bin" "$T/perf/lib"
cp -L "$PERF" "$T/perf/bin/perf"
ldd "$PERF" | awk '/=> \// { print $3 } /^\t\/.*ld-linux/ { print $1 }' | while read -r lib; do
	cp -L "$lib" "$T/perf/lib/"
done
cat >"$T/perf/run.sh" <<'RUN'
#!/bin/sh
# perf through its own loader and libraries (pack_perf.sh).
D=$(cd "$(dirname "$0")" && pwd)
exec "$D/lib/ld-linux-x86-64.so.2" --library-path "$D/lib" "$D/bin/perf" "$@"
RUN
chmod +x "$T/perf/run.sh"
mkdir -p .devlibs
tar -C "$T" -cJf .devlibs/perf.tar.xz perf
ls -la .devlibs/perf.tar.xz
