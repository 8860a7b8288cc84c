#!/bin/sh
# Builds what a device round needs (here, not on the GPU machine) and packs
# it into .devlibs/payload.tar.xz: the test and benchmark binaries, mfmad,
# mfmactl, the static kernel libraries the benchmark is linked against
# there (with cuSPARSELt), and the shared libraries the GPU machine lacks.
#
# usage: bench/nvidia/pack_payload.sh [BUILD_DIR]   (default build-nvdev)
set -eu
cd "$(dirname "$0")/../.."
B=${1:-build-nvdev}
if [ ! -d "$B" ]; then
	# No HIP: its runtime is not on the GPU machine and is not needed there.
	meson setup "$B" -Dhip=disabled -Dcuda=enabled
fi
ninja -C "$B" -j2 daemon/mfmad client/ctl/mfmactl tests/nvidia/test_cuda_backend \
	tests/nvidia/test_nv_layout bench/nvidia/bench_nv bench/nvidia/copy_bench
P=$(mktemp -d)
mkdir -p "$P/bin" "$P/lib"
cp "$B/daemon/mfmad" "$B/client/ctl/mfmactl" "$B/tests/nvidia/test_cuda_backend" \
	"$B/tests/nvidia/test_nv_layout" "$B/bench/nvidia/bench_nv" "$B/bench/nvidia/copy_bench" "$P/bin/"
# Meson makes thin archives (member paths only): copy the members into
# real archives for the link on the GPU machine.
for a in kernels/nvidia/libmfma_nvidia.a kernels/common/libmfma_common.a; do
	(cd "$B/$(dirname "$a")" && ar t "$(basename "$a")" | xargs ar rcs "$P/lib/$(basename "$a")")
done
# Shared libraries of mfmad, mfmactl and the tests that are not part of a
# plain Ubuntu/CUDA image; cp -L follows the symlinks to the real files.
for bin in daemon/mfmad client/ctl/mfmactl tests/nvidia/test_cuda_backend bench/nvidia/bench_nv; do
	ldd "$B/$bin" | awk '/=> \//{print $1, $3}'
done | sort -u | while read -r name path; do
	case "$name" in
	libuv.so.*|libprotobuf-c.so.*|libconfig.so.*|libopenblas.so.*|libgfortran.so.*|\
	libquadmath.so.*|libcmocka.so.*|libmicrohttpd.so.*|libmfmaclient.so.*)
		cp -L "$path" "$P/lib/$name" ;;
	esac
done
mkdir -p .devlibs
tar -C "$P" -cJf .devlibs/payload.tar.xz bin lib
rm -rf "$P"
ls -la .devlibs/payload.tar.xz
